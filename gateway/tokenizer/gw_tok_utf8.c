/* The scan follows Rust's Utf8Chunks (core::str::lossy) step for step, because HF decodes with
 * String::from_utf8_lossy and our text must match it byte for byte: an ill-formed subsequence is either
 * the longest prefix of a well-formed sequence or a single byte. */
#include "gw_tok_utf8.h"

#include <string.h>

/* Byte i of s, or 0 past the end (0 is never a continuation byte, so the scan stops there). */
static inline uint8_t at(const uint8_t *s, size_t n, size_t i)
{
    return i < n ? s[i] : 0;
}

void gw_tok_utf8_chunk(const uint8_t *s, size_t n, struct gw_tok_utf8_chunk *c)
{
    size_t i = 0, valid = 0;
    size_t fail = n; /* where the scan failed; == n means it ran out of bytes */
    int bad = 0;
    while (i < n) {
        uint8_t b = s[i];
        /* Runs of ASCII, 8 bytes at a time. */
        if (b < 0x80) {
            i++;
            while (i + 8 <= n) {
                uint64_t w;
                memcpy(&w, s + i, 8);
                if (w & 0x8080808080808080ull) break;
                i += 8;
            }
            valid = i;
            continue;
        }
        i++;
        uint8_t c1 = at(s, n, i);
        if (b >= 0xC2 && b <= 0xDF) {
            if ((c1 & 0xC0) != 0x80) goto stop;
            i++;
        } else if (b >= 0xE0 && b <= 0xEF) {
            int ok = (b == 0xE0)   ? (c1 >= 0xA0 && c1 <= 0xBF)
                     : (b == 0xED) ? (c1 >= 0x80 && c1 <= 0x9F)
                                   : (c1 >= 0x80 && c1 <= 0xBF);
            if (!ok) goto stop;
            i++;
            if ((at(s, n, i) & 0xC0) != 0x80) goto stop;
            i++;
        } else if (b >= 0xF0 && b <= 0xF4) {
            int ok = (b == 0xF0)   ? (c1 >= 0x90 && c1 <= 0xBF)
                     : (b == 0xF4) ? (c1 >= 0x80 && c1 <= 0x8F)
                                   : (c1 >= 0x80 && c1 <= 0xBF);
            if (!ok) goto stop;
            i++;
            if ((at(s, n, i) & 0xC0) != 0x80) goto stop;
            i++;
            if ((at(s, n, i) & 0xC0) != 0x80) goto stop;
            i++;
        } else {
            fail = i - 1; /* a byte that never starts a sequence: not a truncation */
            bad = 1;
            break;
        }
        valid = i;
        continue;
    stop:
        fail = i;
        bad = 1;
        break;
    }
    c->valid = valid;
    c->invalid = bad ? i - valid : 0;
    c->truncated = bad && fail >= n;
}

size_t gw_tok_utf8_valid_prefix(const uint8_t *s, size_t n)
{
    struct gw_tok_utf8_chunk c;
    gw_tok_utf8_chunk(s, n, &c);
    return c.valid;
}
