/* Per-thread cache of pre-token -> ids. Natural text repeats a small set of words, so most pre-tokens
 * skip BPE entirely. The cache is private to one thread (no locks, no sharing of cache lines) and
 * bounded: when either the slot table or the byte pool fills up it is cleared at once, which keeps
 * the code trivial and the memory fixed. */
#include <stdlib.h>
#include <string.h>

#include "gw_tok_internal.h"

#define CACHE_SLOTS 32768u       /* power of two; 16 bytes each */
#define CACHE_MAX_ENTRIES 16384u /* half full at most */
#define CACHE_POOL (2u << 20)    /* key bytes + ids: ~2.5 MiB per encoding thread in all */
#define CACHE_MAX_KEY 128u       /* longer pre-tokens are rare and not worth keeping */

int gw_tok_cache_init(struct gw_tok_cache *c)
{
    memset(c, 0, sizeof *c);
    c->slots = calloc(CACHE_SLOTS, sizeof *c->slots);
    c->pool = malloc(CACHE_POOL);
    if (!c->slots || !c->pool) {
        gw_tok_cache_free(c);
        return -1;
    }
    c->mask = CACHE_SLOTS - 1;
    c->max_count = CACHE_MAX_ENTRIES;
    c->pool_cap = CACHE_POOL;
    return 0;
}

void gw_tok_cache_free(struct gw_tok_cache *c)
{
    free(c->slots);
    free(c->pool);
    memset(c, 0, sizeof *c);
}

const uint32_t *gw_tok_cache_get(const struct gw_tok_cache *c, uint64_t hash, const uint8_t *key, size_t len,
                                 size_t *n_ids)
{
    if (!c->slots || len > CACHE_MAX_KEY) return NULL;
    hash |= 1; /* 0 marks an empty slot */
    uint32_t i = (uint32_t)hash & c->mask;
    for (;;) {
        const struct gw_tok_cache_slot *s = &c->slots[i];
        if (!s->hash) return NULL;
        if (s->hash == hash && s->key_len == len && memcmp(c->pool + s->off, key, len) == 0) {
            *n_ids = s->n_ids;
            return (const uint32_t *)(const void *)(c->pool + ((s->off + len + 3) & ~(size_t)3));
        }
        i = (i + 1) & c->mask;
    }
}

void gw_tok_cache_put(struct gw_tok_cache *c, uint64_t hash, const uint8_t *key, size_t len,
                      const uint32_t *ids, size_t n_ids)
{
    if (!c->slots || len > CACHE_MAX_KEY || n_ids > CACHE_MAX_KEY) return;
    size_t need = ((len + 3) & ~(size_t)3) + n_ids * sizeof(uint32_t) + 4;
    if (c->count >= c->max_count || c->pool_len + need > c->pool_cap) {
        memset(c->slots, 0, (size_t)(c->mask + 1) * sizeof *c->slots);
        c->count = 0;
        c->pool_len = 0;
    }
    hash |= 1;
    uint32_t i = (uint32_t)hash & c->mask;
    while (c->slots[i].hash) i = (i + 1) & c->mask;
    size_t off = (c->pool_len + 3) & ~(size_t)3;
    memcpy(c->pool + off, key, len);
    size_t ids_off = (off + len + 3) & ~(size_t)3;
    memcpy(c->pool + ids_off, ids, n_ids * sizeof(uint32_t));
    c->pool_len = ids_off + n_ids * sizeof(uint32_t);
    c->slots[i].hash = hash;
    c->slots[i].off = (uint32_t)off;
    c->slots[i].key_len = (uint16_t)len;
    c->slots[i].n_ids = (uint16_t)n_ids;
    c->count++;
}
