/* Prefix affinity map (see gw_affinity.h). */
#include "gw_affinity.h"

#include <stdlib.h>

#define WAYS 4

struct entry {
    uint64_t key; /* 0 = empty (a real key of 0 is remapped to 1) */
    int32_t worker;
    uint32_t used; /* LRU tick */
};

struct gw_affinity {
    struct entry *slots;
    size_t sets; /* power of two */
    uint32_t tick;
    size_t size;
};

static uint64_t mix64(uint64_t x)
{
    /* splitmix64 finaliser: every input bit affects every output bit */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

struct gw_affinity *gw_affinity_create(size_t entries)
{
    struct gw_affinity *a = calloc(1, sizeof(*a));
    if (!a) return NULL;
    size_t sets = 16;
    while (sets * WAYS < entries && sets < ((size_t)1 << 40)) sets <<= 1;
    a->slots = calloc(sets * WAYS, sizeof(*a->slots));
    if (!a->slots) {
        free(a);
        return NULL;
    }
    a->sets = sets;
    return a;
}

void gw_affinity_destroy(struct gw_affinity *a)
{
    if (!a) return;
    free(a->slots);
    free(a);
}

static uint64_t rotl(uint64_t x, int r)
{
    return x << r | x >> (64 - r);
}

size_t gw_affinity_keys(const uint32_t *tokens, size_t n_tokens, uint32_t page_tokens,
                        const struct gw_affinity_media *media, size_t n_media, uint64_t *keys,
                        size_t max_keys)
{
    if (!page_tokens || !tokens) return 0;
    size_t pages = n_tokens / page_tokens;
    if (pages > max_keys) pages = max_keys;
    const uint64_t k = 0x9e3779b97f4a7c15ull;
    uint64_t h = 0x6d6d67772d616666ull; /* "mmgw-aff" */
    size_t m = 0;
    for (size_t p = 0; p < pages; p++) {
        /* four independent multiply lanes per page (a serial mix per token was the router's cost on
         * long prompts), folded into the chain once per page: a key still covers the whole prefix */
        uint64_t a = h, b = h ^ 0x5851f42d4c957f2dull, c = h ^ 0x14057b7ef767814full, d = h ^ k;
        const uint32_t *t = tokens + p * page_tokens;
        size_t i = 0;
        for (; i + 4 <= page_tokens; i += 4) {
            a = (a ^ t[i]) * k;
            b = (b ^ t[i + 1]) * k;
            c = (c ^ t[i + 2]) * k;
            d = (d ^ t[i + 3]) * k;
        }
        for (; i < page_tokens; i++) a = (a ^ t[i]) * k;
        h = mix64(a ^ rotl(b, 17) ^ rotl(c, 31) ^ rotl(d, 47));
        /* media whose placeholders start in this page */
        while (m < n_media && media[m].offset < (p + 1) * page_tokens) {
            if (media[m].offset >= p * page_tokens) h = mix64(h ^ media[m].content_hash ^ k);
            m++;
        }
        keys[p] = h ? h : 1;
    }
    return pages;
}

static struct entry *set_of(struct gw_affinity *a, uint64_t key)
{
    return &a->slots[(mix64(key) & (a->sets - 1)) * WAYS];
}

int gw_affinity_lookup(struct gw_affinity *a, const uint64_t *keys, size_t n, size_t *pages)
{
    if (pages) *pages = 0;
    for (size_t k = n; k-- > 0;) {
        uint64_t key = keys[k] ? keys[k] : 1;
        struct entry *s = set_of(a, key);
        for (int w = 0; w < WAYS; w++) {
            if (s[w].key == key) {
                s[w].used = ++a->tick;
                if (pages) *pages = k + 1;
                return s[w].worker;
            }
        }
    }
    return -1;
}

void gw_affinity_record(struct gw_affinity *a, const uint64_t *keys, size_t n, int worker)
{
    for (size_t k = 0; k < n; k++) {
        uint64_t key = keys[k] ? keys[k] : 1;
        struct entry *s = set_of(a, key);
        struct entry *victim = &s[0];
        int found = 0;
        for (int w = 0; w < WAYS; w++) {
            if (s[w].key == key) {
                victim = &s[w];
                found = 1;
                break;
            }
            if (s[w].key == 0 && victim->key != 0)
                victim = &s[w];
            else if (victim->key != 0 && s[w].key != 0 && s[w].used < victim->used)
                victim = &s[w];
        }
        if (!found && victim->key == 0) a->size++;
        victim->key = key;
        victim->worker = worker;
        victim->used = ++a->tick;
    }
}

size_t gw_affinity_size(const struct gw_affinity *a)
{
    return a->size;
}
