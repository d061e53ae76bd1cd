/* GPT-2's bytes_to_unicode table: printable Latin-1 bytes stand for themselves, the other 68 bytes
 * (controls, space, DEL, NBSP, soft hyphen...) are shifted to U+0100.. in byte order. Computed
 * arithmetically so there is no table to initialise or keep in sync. */
#include "gw_tok_internal.h"

static int printable(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t gw_tok_byte_to_cp(uint8_t b)
{
    if (printable(b)) return b;
    /* n = how many non-printable bytes come before b */
    uint32_t n;
    if (b <= ' ')
        n = b; /* 0x00..0x20: 33 bytes */
    else if (b <= 0xA0)
        n = 33 + (b - 0x7F); /* 0x7F..0xA0: 34 bytes */
    else
        n = 67; /* 0xAD */
    return 256 + n;
}

int gw_tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256) return printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t n = cp - 256;
    if (n <= 32) return (int)n;
    if (n <= 66) return (int)(0x7F + (n - 33));
    return 0xAD;
}
