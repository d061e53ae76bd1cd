/* Hash maps of the tokenizer: string -> id (vocab, added tokens) and id pair -> merge. Both are open
 * addressing with linear probing at most half full, so a lookup is usually one cache line. They are
 * built once at load and only read afterwards, so they need no locking. */
#include <stdlib.h>
#include <string.h>

#include "gw_tok_internal.h"

uint64_t gw_tok_hash_bytes(const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, s, n);
        h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    }
    /* murmur3 finaliser: spreads every input bit over the whole word */
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    return h;
}

static uint32_t table_size(size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2 && cap < ((size_t)1 << 30)) cap <<= 1;
    return (uint32_t)cap;
}

/* ---- string map ---- */

int gw_tok_strmap_init(struct gw_tok_strmap *m, size_t expected)
{
    memset(m, 0, sizeof *m);
    uint32_t cap = table_size(expected);
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return -1;
    m->mask = cap - 1;
    return 0;
}

void gw_tok_strmap_free(struct gw_tok_strmap *m)
{
    free(m->slots);
    free(m->blob);
    memset(m, 0, sizeof *m);
}

static uint32_t str_hash(const void *key, size_t len)
{
    uint32_t h = (uint32_t)(gw_tok_hash_bytes(key, len) >> 32);
    return h ? h : 1;
}

static int strmap_grow(struct gw_tok_strmap *m)
{
    uint32_t cap = (m->mask + 1) * 2;
    struct gw_tok_strslot *ns = calloc(cap, sizeof *ns);
    if (!ns) return -1;
    for (uint32_t i = 0; i <= m->mask; i++) {
        struct gw_tok_strslot *s = &m->slots[i];
        if (!s->hash) continue;
        uint32_t j = s->hash & (cap - 1);
        while (ns[j].hash) j = (j + 1) & (cap - 1);
        ns[j] = *s;
    }
    free(m->slots);
    m->slots = ns;
    m->mask = cap - 1;
    return 0;
}

int gw_tok_strmap_put(struct gw_tok_strmap *m, const void *key, size_t len, uint32_t value)
{
    if (len > UINT32_MAX / 2) return -1;
    if ((m->count + 1) * 2 > m->mask + 1 && strmap_grow(m)) return -1;
    uint32_t h = str_hash(key, len);
    uint32_t i = h & m->mask;
    for (;;) {
        struct gw_tok_strslot *s = &m->slots[i];
        if (!s->hash) break;
        if (s->hash == h && s->key_len == len && memcmp(m->blob + s->key_off, key, len) == 0) {
            s->value = value;
            return 0;
        }
        i = (i + 1) & m->mask;
    }
    if (m->blob_len + len + 1 > m->blob_cap) {
        size_t cap = m->blob_cap ? m->blob_cap : 4096;
        while (cap < m->blob_len + len + 1) cap *= 2;
        if (cap > UINT32_MAX) return -1;
        char *nb = realloc(m->blob, cap);
        if (!nb) return -1;
        m->blob = nb;
        m->blob_cap = cap;
    }
    if (len) memcpy(m->blob + m->blob_len, key, len);
    m->blob[m->blob_len + len] = '\0';
    struct gw_tok_strslot *s = &m->slots[i];
    s->hash = h;
    s->value = value;
    s->key_off = (uint32_t)m->blob_len;
    s->key_len = (uint32_t)len;
    m->blob_len += len + 1;
    m->count++;
    return 0;
}

uint32_t gw_tok_strmap_get(const struct gw_tok_strmap *m, const void *key, size_t len)
{
    if (!m->slots) return GW_TOK_NONE;
    uint32_t h = str_hash(key, len);
    uint32_t i = h & m->mask;
    for (;;) {
        const struct gw_tok_strslot *s = &m->slots[i];
        if (!s->hash) return GW_TOK_NONE;
        if (s->hash == h && s->key_len == len && memcmp(m->blob + s->key_off, key, len) == 0) return s->value;
        i = (i + 1) & m->mask;
    }
}

/* ---- merge map ---- */

int gw_tok_mergemap_init(struct gw_tok_mergemap *m, size_t expected)
{
    memset(m, 0, sizeof *m);
    uint32_t cap = table_size(expected);
    m->slots = malloc((size_t)cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (uint32_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
    return 0;
}

void gw_tok_mergemap_free(struct gw_tok_mergemap *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}

int gw_tok_mergemap_put(struct gw_tok_mergemap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t id)
{
    if ((m->count + 1) * 2 > m->mask + 1) {
        uint32_t cap = (m->mask + 1) * 2;
        struct gw_tok_mergeslot *ns = malloc((size_t)cap * sizeof *ns);
        if (!ns) return -1;
        for (uint32_t i = 0; i < cap; i++) ns[i].key = UINT64_MAX;
        for (uint32_t i = 0; i <= m->mask; i++) {
            if (m->slots[i].key == UINT64_MAX) continue;
            uint32_t j = (uint32_t)((m->slots[i].key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
            while (ns[j].key != UINT64_MAX) j = (j + 1) & (cap - 1);
            ns[j] = m->slots[i];
        }
        free(m->slots);
        m->slots = ns;
        m->mask = cap - 1;
    }
    uint64_t key = gw_tok_pair_key(a, b);
    uint32_t i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key) i = (i + 1) & m->mask;
    if (m->slots[i].key == UINT64_MAX) m->count++;
    /* A repeated pair keeps its last rank, as HF's HashMap collect does. */
    m->slots[i].key = key;
    m->slots[i].rank = rank;
    m->slots[i].id = id;
    return 0;
}
