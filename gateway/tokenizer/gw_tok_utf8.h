/* UTF-8 helpers of the tokenizer: validation, decoding, and the ill-formed-sequence scan that
 * reproduces Rust's String::from_utf8_lossy (Unicode "maximal subpart" replacement). Internal. */
#ifndef GW_TOK_UTF8_H
#define GW_TOK_UTF8_H

#include <stddef.h>
#include <stdint.h>

/** One step of a lossy scan: s[0..valid) is well-formed, then s[valid..valid+invalid) is one ill-formed
 * subsequence (0 bytes when the scan reached the end). truncated is 1 when that subsequence is a proper
 * prefix of a well-formed sequence cut by the end of s (more bytes could still complete it). */
struct gw_tok_utf8_chunk {
    size_t valid;
    size_t invalid;
    int truncated;
};

/** Scan s[0..n) up to and including its first ill-formed subsequence. */
void gw_tok_utf8_chunk(const uint8_t *s, size_t n, struct gw_tok_utf8_chunk *c);

/** Length of the longest well-formed prefix of s[0..n) (n when all of it is valid UTF-8). */
size_t gw_tok_utf8_valid_prefix(const uint8_t *s, size_t n);

/** Decode the character at s (s[0..n) must start with a well-formed sequence); returns its length. */
static inline size_t gw_tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t b = s[0];
    if (b < 0x80 || n < 2) {
        *cp = b;
        return 1;
    }
    if (b < 0xE0) {
        *cp = ((uint32_t)(b & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (b < 0xF0 || n < 4) {
        *cp = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
          (s[3] & 0x3F);
    return 4;
}

/** Length of the character ending at s[end-1] (s[0..end) well-formed, end > 0). */
static inline size_t gw_tok_utf8_prev_len(const uint8_t *s, size_t end)
{
    size_t i = end - 1;
    while (i > 0 && (s[i] & 0xC0) == 0x80 && end - i < 4) i--;
    return end - i;
}

/** Encode cp as UTF-8 into out (4 bytes room); returns the length. */
static inline size_t gw_tok_utf8_encode(uint32_t cp, uint8_t *out)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

#endif
