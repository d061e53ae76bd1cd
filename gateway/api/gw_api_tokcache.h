/* A cache of token ids for prompt pieces cut at special tokens.
 *
 * Chat prompts repeat most of their text: M3's system block (~900 bytes, always the same), the default
 * developer block, every earlier turn of a conversation. Tokenizing that again on every request was the
 * largest single cost of a short chat on the event loop. HF tokenizers cut the text at added tokens first
 * and tokenize the pieces independently, so the ids of a text are the ids of its pieces, in order, when the
 * cuts are made where the tokenizer's own added-token matching would make them. This cache cuts only after
 * "safe" added tokens (below) and remembers each piece's ids; the result is identical to
 * gw_tokenizer_encode of the whole text, which the tests check on random texts built from the tokenizer's
 * own added tokens.
 *
 * A safe cut token is a non-normalized added token without lstrip/rstrip/single_word, not starting or
 * ending with white space, that no other such token contains or overlaps from the left (no proper suffix of
 * another token is a prefix of it), and that does not end in a word character when a single_word token
 * exists (that token would look across the cut). Any occurrence of it, scanning left to right, is then a
 * match of HF's leftmost-longest split, nothing matched before it reaches past it, and nothing after it
 * looks back across it.
 *
 * Thread-safe (a mutex around lookups and inserts; tokenizing runs outside it). Bounded: least recently used
 * pieces go once the budget is spent. */
#ifndef GW_API_TOKCACHE_H
#define GW_API_TOKCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "gw_tokenizer.h"

struct gw_api_tokcache;

/** A cache for tok (which must outlive it) holding at most budget_bytes of pieces and ids (0 = 4 MiB).
 * NULL when out of memory or when the tokenizer has no safe cut token (then there is nothing to gain). */
struct gw_api_tokcache *gw_api_tokcache_create(const struct gw_tokenizer *tok, size_t budget_bytes);
void gw_api_tokcache_free(struct gw_api_tokcache *c);

/** Exactly gw_tokenizer_encode(tok, text, len, 0, out, err): ids are appended to out; on error nothing is
 * appended and err is the whole text's error. c may be NULL (plain encode). */
int32_t gw_api_tokcache_encode(struct gw_api_tokcache *c, const struct gw_tokenizer *tok, const char *text,
                               size_t len, struct gw_tok_ids *out, struct mm_err *err);

/** Counters, for tests and benchmarks. */
struct gw_api_tokcache_stats {
    uint64_t hits, misses, entries, bytes;
    uint32_t cut_tokens; /* how many added tokens are safe cut points */
};
void gw_api_tokcache_stats(struct gw_api_tokcache *c, struct gw_api_tokcache_stats *out);

#endif
