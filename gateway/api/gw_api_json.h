/* JSON writing for the API's hot paths (one chunk per token): hand-written, no allocation per value. */
#ifndef GW_API_JSON_H
#define GW_API_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "mm_buf.h"

/** Append s[0..n) as a quoted JSON string: ", \\ and control characters escaped, everything else raw;
 * a byte that starts no valid UTF-8 sequence becomes U+FFFD (so any token bytes give valid JSON).
 * Returns 0 or -1 (out of memory). */
int gw_json_str(struct mm_buf *b, const char *s, size_t n);
/** The number of characters (code points) gw_json_str writes for s[0..n): one per valid UTF-8 sequence,
 * one U+FFFD per byte that starts none. */
size_t gw_json_str_chars(const char *s, size_t n);
/** Append a number JSON accepts: integral values as "-5.0", others with 9 significant digits, non-finite
 * values as -9999.0 (what vLLM writes for -inf log-probs). Returns 0 or -1. */
int gw_json_num(struct mm_buf *b, double v);
/** Append an unsigned integer in decimal (no printf on the per-response path). Returns 0 or -1. */
int gw_json_uint(struct mm_buf *b, unsigned long long v);

#endif
