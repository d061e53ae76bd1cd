/* Prefix affinity: which worker last served a conversation prefix, so the next turn (whose prompt
 * starts with the previous one) goes where that prefix's KV pages are cached.
 *
 * A prompt is cut into full pages of page_tokens tokens (the worker's KV page = MSA block); key k is a
 * chained hash of pages 0..k, so two prompts share key k exactly when their first k+1 pages are equal
 * (media items mix their content hash into the page holding their placeholders, since placeholder
 * token ids are the same for every image). A lookup finds the longest known prefix.
 *
 * The map is a bounded 4-way set-associative cache (entries * 16 bytes): inserting into a full set
 * evicts its least recently used entry. It is a hint, so losing entries is harmless. Not thread-safe:
 * the router holds its lock. */
#ifndef GW_AFFINITY_H
#define GW_AFFINITY_H

#include <stddef.h>
#include <stdint.h>

struct gw_affinity;

/** A map of about entries keys (rounded up to a power of two, at least 64). NULL on out of memory. */
struct gw_affinity *gw_affinity_create(size_t entries);
void gw_affinity_destroy(struct gw_affinity *a);

/** A media item's placeholders, for hashing: the token offset of its first placeholder and its
 * content hash. */
struct gw_affinity_media {
    uint32_t offset;
    uint64_t content_hash;
};

/** Keys of the first full pages of tokens (at most max_keys); returns how many were written. Media
 * entries must be sorted by offset. */
size_t gw_affinity_keys(const uint32_t *tokens, size_t n_tokens, uint32_t page_tokens,
                        const struct gw_affinity_media *media, size_t n_media, uint64_t *keys,
                        size_t max_keys);

/** The worker recorded for the longest of keys[0..n) that is known, or -1. *pages = how many pages
 * matched (0 when none). */
int gw_affinity_lookup(struct gw_affinity *a, const uint64_t *keys, size_t n, size_t *pages);
/** Record worker for every key. */
void gw_affinity_record(struct gw_affinity *a, const uint64_t *keys, size_t n, int worker);
/** Entries currently held (for tests). */
size_t gw_affinity_size(const struct gw_affinity *a);

#endif
