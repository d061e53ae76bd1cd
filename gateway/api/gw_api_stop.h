/* Stop strings: matched on the detokenized text across token boundaries, never emitted.
 *
 * Semantics: the text is cut where the first stop string to be complete starts (the earliest end; among
 * stop strings ending at the same byte, the longest), which is where generation token by token would
 * stop, and it does not depend on how the text was split into pieces.
 *
 * The matcher owns the text that could still be the start of a stop string (at most the longest stop
 * string minus one byte) and releases the rest. Feed it complete UTF-8 text; everything it releases is
 * complete UTF-8 too (a stop string starts with a lead byte, so a held suffix starts on a character).
 *
 *   gw_api_stop_feed(s, text, len, &out) -> 1 when a stop string matched: out got the text before it
 *   and the choice is finished; 0 otherwise: out got the text that can no longer be part of a match.
 *   gw_api_stop_flush(s, &out) at the end of the output releases what was held back. */
#ifndef GW_API_STOP_H
#define GW_API_STOP_H

#include <stddef.h>
#include <stdint.h>

#include "mm_buf.h"

struct gw_api_stop_set {
    const char *const *strs; /* borrowed; each non-empty */
    const size_t *lens;
    size_t n;
};

struct gw_api_stop {
    const struct gw_api_stop_set *set; /* NULL or n == 0: everything passes through */
    struct mm_buf held;
    int matched;  /* a stop string was found; later input is ignored */
    size_t which; /* the index of the matched stop string */
};

void gw_api_stop_init(struct gw_api_stop *s, const struct gw_api_stop_set *set);
void gw_api_stop_free(struct gw_api_stop *s);
/** Append released text to out. Returns 1 on a match, 0 otherwise, -1 when out of memory. */
int gw_api_stop_feed(struct gw_api_stop *s, const char *text, size_t len, struct mm_buf *out);
/** Release the held-back text (no match can complete any more). Returns 0 or -1 (out of memory). */
int gw_api_stop_flush(struct gw_api_stop *s, struct mm_buf *out);

#endif
