/* The page pool of the paged KV + index cache: reference counts, free pages, and the prefix cache.
 *
 * A page holds `block` tokens of every layer. Sequences hold references to pages through their block
 * tables; a page returns to the pool when its last reference goes. Full pages can be published under a
 * chain key (hash of the previous page's key, the page's token ids and, for pages holding media
 * placeholders, the media hash): an unreferenced published page stays cached (least recently released
 * first out) until its room is needed, and a later sequence with the same prefix takes it back instead
 * of recomputing it. Only page bookkeeping lives here; the page contents belong to the backend. */
#ifndef WK_CACHE_H
#define WK_CACHE_H

#include <stdint.h>

struct wk_cache;

struct wk_cache *wk_cache_create(int64_t n_pages, int32_t block);
void wk_cache_destroy(struct wk_cache *c);

int64_t wk_cache_pages(const struct wk_cache *c);
/** Pages no sequence references (free, or cached and evictable). */
int64_t wk_cache_free_count(const struct wk_cache *c);
/** Unreferenced pages still holding a published prefix. */
int64_t wk_cache_cached_count(const struct wk_cache *c);

/** A page with reference count 1: a free one, else the least recently released cached one (forgotten).
 * -1 when every page is referenced. */
int32_t wk_cache_take(struct wk_cache *c);
void wk_cache_ref(struct wk_cache *c, int32_t page);
void wk_cache_unref(struct wk_cache *c, int32_t page);
int32_t wk_cache_refcount(const struct wk_cache *c, int32_t page);

/** The chain key of a full page. */
uint64_t wk_cache_key(uint64_t parent_key, const int32_t *ids, int32_t block, uint64_t media_hash);
/** Publish a full, referenced page under key (ids kept to verify lookups). No-op when the key is taken. */
void wk_cache_publish(struct wk_cache *c, int32_t page, uint64_t key, uint64_t parent_key,
                      const int32_t *ids);
/** The page published under key with exactly these ids and parent, with a new reference; -1 when none. */
int32_t wk_cache_lookup(struct wk_cache *c, uint64_t key, uint64_t parent_key, const int32_t *ids);

#endif
