/* Helper for test_chat_float_repr.py: reads IEEE-754 bit patterns (hex, one per line) and prints, per line,
 * the plugin's Python repr and serde/ryu spellings separated by a space. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "chat_fixture.h"
#include "m3_text.h"

int main(void)
{
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {
        uint64_t bits;
        if (sscanf(line, "%" SCNx64, &bits) != 1) continue;
        double x;
        memcpy(&x, &bits, sizeof(x));
        struct m3_buf b;
        m3_buf_init(&b, &fixture_host);
        m3_fmt_py_float(&b, x);
        m3_buf_putc(&b, ' ');
        m3_fmt_serde_float(&b, x);
        m3_buf_putc(&b, '\n');
        fwrite(b.p, 1, b.len, stdout);
        m3_buf_free(&b);
    }
    return 0;
}
