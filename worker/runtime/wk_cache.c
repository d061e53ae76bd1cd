#include "wk_cache.h"

#include <stdlib.h>
#include <string.h>

#define EMPTY (-1)
#define TOMB (-2)

struct wk_cache {
    int64_t n_pages;
    int32_t block;
    int32_t *ref;
    int32_t *free_stack;
    int64_t n_free;
    /* published pages */
    uint64_t *key, *parent;
    int32_t *ids; /* [n_pages][block] */
    /* unreferenced published pages, oldest release first */
    int32_t *prev, *next;
    int32_t head, tail;
    int64_t n_lru;
    /* key -> page, open addressing */
    int32_t *ht;
    int64_t ht_cap, n_tomb;
};

struct wk_cache *wk_cache_create(int64_t n_pages, int32_t block)
{
    if (n_pages <= 0 || n_pages > INT32_MAX / 2 || block <= 0) return NULL;
    struct wk_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->n_pages = n_pages;
    c->block = block;
    c->ht_cap = 16;
    while (c->ht_cap < 2 * n_pages) c->ht_cap *= 2;
    c->ref = calloc((size_t)n_pages, sizeof(int32_t));
    c->free_stack = malloc(sizeof(int32_t) * (size_t)n_pages);
    c->key = calloc((size_t)n_pages, sizeof(uint64_t));
    c->parent = calloc((size_t)n_pages, sizeof(uint64_t));
    c->ids = malloc(sizeof(int32_t) * (size_t)n_pages * (size_t)block);
    c->prev = malloc(sizeof(int32_t) * (size_t)n_pages);
    c->next = malloc(sizeof(int32_t) * (size_t)n_pages);
    c->ht = malloc(sizeof(int32_t) * (size_t)c->ht_cap);
    if (!c->ref || !c->free_stack || !c->key || !c->parent || !c->ids || !c->prev || !c->next || !c->ht) {
        wk_cache_destroy(c);
        return NULL;
    }
    /* lowest ids handed out first */
    for (int64_t i = 0; i < n_pages; i++) c->free_stack[i] = (int32_t)(n_pages - 1 - i);
    c->n_free = n_pages;
    c->head = c->tail = -1;
    for (int64_t i = 0; i < c->ht_cap; i++) c->ht[i] = EMPTY;
    return c;
}

void wk_cache_destroy(struct wk_cache *c)
{
    if (!c) return;
    free(c->ref);
    free(c->free_stack);
    free(c->key);
    free(c->parent);
    free(c->ids);
    free(c->prev);
    free(c->next);
    free(c->ht);
    free(c);
}

int64_t wk_cache_pages(const struct wk_cache *c)
{
    return c->n_pages;
}

int64_t wk_cache_free_count(const struct wk_cache *c)
{
    return c->n_free + c->n_lru;
}

int64_t wk_cache_cached_count(const struct wk_cache *c)
{
    return c->n_lru;
}

int32_t wk_cache_refcount(const struct wk_cache *c, int32_t page)
{
    return page >= 0 && page < c->n_pages ? c->ref[page] : 0;
}

static void lru_remove(struct wk_cache *c, int32_t p)
{
    if (c->prev[p] >= 0)
        c->next[c->prev[p]] = c->next[p];
    else
        c->head = c->next[p];
    if (c->next[p] >= 0)
        c->prev[c->next[p]] = c->prev[p];
    else
        c->tail = c->prev[p];
    c->n_lru--;
}

static void lru_push(struct wk_cache *c, int32_t p)
{
    c->prev[p] = c->tail;
    c->next[p] = -1;
    if (c->tail >= 0)
        c->next[c->tail] = p;
    else
        c->head = p;
    c->tail = p;
    c->n_lru++;
}

static int64_t ht_slot(const struct wk_cache *c, uint64_t key)
{
    return (int64_t)(key & (uint64_t)(c->ht_cap - 1));
}

static int64_t ht_find(const struct wk_cache *c, uint64_t key)
{
    for (int64_t i = ht_slot(c, key), n = 0; n < c->ht_cap; i = (i + 1) & (c->ht_cap - 1), n++) {
        if (c->ht[i] == EMPTY) return -1;
        if (c->ht[i] >= 0 && c->key[c->ht[i]] == key) return i;
    }
    return -1;
}

static void ht_insert(struct wk_cache *c, int32_t page)
{
    int64_t i = ht_slot(c, c->key[page]);
    while (c->ht[i] >= 0) i = (i + 1) & (c->ht_cap - 1);
    if (c->ht[i] == TOMB) c->n_tomb--;
    c->ht[i] = page;
}

static void forget(struct wk_cache *c, int32_t p)
{
    int64_t s = ht_find(c, c->key[p]);
    if (s >= 0) {
        c->ht[s] = TOMB;
        c->n_tomb++;
    }
    c->key[p] = 0;
    if (c->n_tomb > c->ht_cap / 4) {
        /* too many tombstones make misses walk far: rebuild from the live keys */
        for (int64_t i = 0; i < c->ht_cap; i++) c->ht[i] = EMPTY;
        c->n_tomb = 0;
        for (int64_t q = 0; q < c->n_pages; q++)
            if (c->key[q]) ht_insert(c, (int32_t)q);
    }
}

int32_t wk_cache_take(struct wk_cache *c)
{
    int32_t p;
    if (c->n_free > 0) {
        p = c->free_stack[--c->n_free];
    } else if (c->head >= 0) {
        p = c->head;
        lru_remove(c, p);
        forget(c, p);
    } else {
        return -1;
    }
    c->ref[p] = 1;
    return p;
}

void wk_cache_ref(struct wk_cache *c, int32_t page)
{
    if (c->ref[page]++ == 0 && c->key[page]) lru_remove(c, page);
}

void wk_cache_unref(struct wk_cache *c, int32_t page)
{
    if (c->ref[page] <= 0) return;
    if (--c->ref[page] > 0) return;
    if (c->key[page])
        lru_push(c, page);
    else
        c->free_stack[c->n_free++] = page;
}

uint64_t wk_cache_key(uint64_t parent_key, const int32_t *ids, int32_t block, uint64_t media_hash)
{
    /* splitmix64-style mixing of every word: cheap and well spread; verification happens on lookup */
    uint64_t h = parent_key ^ 0x9e3779b97f4a7c15ull;
    uint64_t words[2] = {media_hash, (uint64_t)block};
    for (int w = 0; w < 2; w++) {
        h ^= words[w];
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    for (int32_t i = 0; i < block; i++) {
        h ^= (uint64_t)(uint32_t)ids[i] + 0x9e3779b97f4a7c15ull;
        h *= 0x94d049bb133111ebull;
        h ^= h >> 29;
    }
    return h ? h : 1;
}

void wk_cache_publish(struct wk_cache *c, int32_t page, uint64_t key, uint64_t parent_key, const int32_t *ids)
{
    if (c->key[page] || ht_find(c, key) >= 0) return;
    c->key[page] = key;
    ht_insert(c, page);
    c->parent[page] = parent_key;
    memcpy(c->ids + (int64_t)page * c->block, ids, sizeof(int32_t) * (size_t)c->block);
}

int32_t wk_cache_lookup(struct wk_cache *c, uint64_t key, uint64_t parent_key, const int32_t *ids)
{
    int64_t s = ht_find(c, key);
    if (s < 0) return -1;
    int32_t p = c->ht[s];
    if (c->parent[p] != parent_key ||
        memcmp(c->ids + (int64_t)p * c->block, ids, sizeof(int32_t) * (size_t)c->block))
        return -1;
    wk_cache_ref(c, p);
    return p;
}
