/* Small text scanners that several parsers need (HTTP chunk sizes, data: URLs, IP literals, JSON escapes and
 * writers, command lines, config values): one copy each. */
#ifndef MM_TEXT_H
#define MM_TEXT_H

#include <stddef.h>
#include <stdint.h>

/** Value of a hexadecimal digit (either case), or -1. */
static inline int mm_hex_digit(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/** Length (1..4) of the well-formed UTF-8 sequence at s[0..n), or 0 when none starts there: no overlong
 * forms, surrogates or code points past U+10FFFF, and no sequence cut by the end of s. */
size_t mm_utf8_seq_len(const uint8_t *s, size_t n);

/** A whole string as a decimal integer in [lo, hi]: an optional sign, then digits, nothing else (no
 * blanks). Returns 0 and *out, or -1 (*out untouched). */
int mm_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

#endif
