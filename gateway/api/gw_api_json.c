/* JSON writers for the hot paths (chunks are written once per token): strings and numbers. */
#include <math.h>
#include <string.h>

#include "gw_api_json.h"
#include "mm_text.h"

int gw_json_str(struct mm_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    /* worst case: every byte becomes \u00xx */
    if (n > (SIZE_MAX - 2) / 6 || mm_buf_reserve(b, n * 6 + 2)) return -1;
    char *o = b->data + b->len;
    *o++ = '"';
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            *o++ = (char)c;
            i++;
            continue;
        }
        if (c < 0x80) {
            *o++ = '\\';
            switch (c) {
            case '"':
                *o++ = '"';
                break;
            case '\\':
                *o++ = '\\';
                break;
            case '\n':
                *o++ = 'n';
                break;
            case '\r':
                *o++ = 'r';
                break;
            case '\t':
                *o++ = 't';
                break;
            case '\b':
                *o++ = 'b';
                break;
            case '\f':
                *o++ = 'f';
                break;
            default:
                *o++ = 'u';
                *o++ = '0';
                *o++ = '0';
                *o++ = hex[c >> 4];
                *o++ = hex[c & 15];
            }
            i++;
            continue;
        }
        size_t l = mm_utf8_seq_len(p + i, n - i);
        if (l == 0) { /* U+FFFD for a byte that starts no valid sequence */
            *o++ = (char)0xef;
            *o++ = (char)0xbf;
            *o++ = (char)0xbd;
            i++;
            continue;
        }
        memcpy(o, p + i, l);
        o += l;
        i += l;
    }
    *o++ = '"';
    *o = '\0';
    b->len = (size_t)(o - b->data);
    return 0;
}

size_t gw_json_str_chars(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t chars = 0;
    for (size_t i = 0; i < n; chars++) {
        size_t l = p[i] < 0x80 ? 1 : mm_utf8_seq_len(p + i, n - i);
        i += l ? l : 1;
    }
    return chars;
}

int gw_json_num(struct mm_buf *b, double v)
{
    if (!isfinite(v)) return mm_buf_append_str(b, "-9999.0");
    if (v == floor(v) && fabs(v) < 1e15) return mm_buf_printf(b, "%.1f", v);
    return mm_buf_printf(b, "%.9g", v);
}

int gw_json_uint(struct mm_buf *b, unsigned long long v)
{
    char tmp[24];
    size_t n = sizeof tmp;
    do {
        tmp[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return mm_buf_append(b, tmp + n, sizeof tmp - n);
}
