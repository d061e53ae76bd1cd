/* Token ids of prompt pieces cut after safe special tokens (see gw_api_tokcache.h). */
#include "gw_api_tokcache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define DEFAULT_BUDGET (4u << 20)
#define MAX_PIECE (64u << 10) /* longer pieces are tokenized every time (rare, and they would crowd out) */
#define N_BUCKETS 4096        /* power of two */

struct entry {
    uint64_t hash;
    uint32_t len, n_ids;
    struct entry *chain;       /* bucket */
    struct entry *prev, *next; /* LRU: head = most recent */
    uint32_t *ids;             /* inside this allocation, after the text */
    char text[];
};

struct cut_token {
    const char *text;
    uint32_t len;
};

struct gw_api_tokcache {
    pthread_mutex_t mu;
    struct entry *buckets[N_BUCKETS];
    struct entry *lru_head, *lru_tail;
    size_t bytes, budget;
    uint64_t hits, misses, entries;
    /* safe cut tokens grouped by first byte: first[b] .. first[b+1] in cuts */
    struct cut_token *cuts;
    uint32_t n_cuts;
    uint32_t first[257];
    uint8_t lead[4]; /* the distinct first bytes, when there are at most 4 (a vector scan finds them) */
    uint32_t n_lead;
};

/* ---- which added tokens are safe cut points ---- */

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}

/* Letters, digits, '_' and anything non-ASCII (it may be a letter). */
static bool is_word_byte(char ch)
{
    uint8_t b = (uint8_t)ch;
    return b >= 0x80 || b == '_' || (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') ||
           (b >= 'A' && b <= 'Z');
}

/* Some proper suffix of u (shorter than u) equals a prefix of t, or u contains t: an occurrence of u could
 * start before t's and cover its beginning, or match where t does and run longer. */
static bool covers(const struct gw_tok_added_info *u, const struct gw_tok_added_info *t)
{
    if (u->content_len >= t->content_len && memmem(u->content, u->content_len, t->content, t->content_len))
        return true;
    for (size_t k = 1; k < u->content_len && k <= t->content_len; k++)
        if (memcmp(u->content + u->content_len - k, t->content, k) == 0) return true;
    return false;
}

static int cmp_first_byte(const void *a, const void *b)
{
    const struct cut_token *x = a, *y = b;
    return (int)(uint8_t)x->text[0] - (int)(uint8_t)y->text[0];
}

static int find_cut_tokens(struct gw_api_tokcache *c, const struct gw_tokenizer *tok)
{
    uint32_t n = gw_tokenizer_added_count(tok);
    struct gw_tok_added_info *all = calloc(n ? n : 1, sizeof *all);
    c->cuts = calloc(n ? n : 1, sizeof *c->cuts);
    if (!all || !c->cuts) {
        free(all);
        return -1;
    }
    uint32_t m = 0;
    bool single_word = false;
    for (uint32_t i = 0; i < n; i++)
        if (gw_tokenizer_added_get(tok, i, &all[m]) == MM_OK && all[m].content_len > 0 &&
            !all[m].normalized) {
            single_word |= all[m].single_word;
            m++; /* normalized tokens are matched later, inside the pieces: they never move a cut */
        }
    for (uint32_t i = 0; i < m; i++) {
        const struct gw_tok_added_info *t = &all[i];
        if (t->lstrip || t->rstrip || t->single_word || is_space(t->content[0]) ||
            is_space(t->content[t->content_len - 1]) || t->content_len > 256)
            continue;
        /* a single_word token right after the cut looks at the character before it: after a cut that is
         * the start of the text, so the cut token must not end in a word character */
        if (single_word && is_word_byte(t->content[t->content_len - 1])) continue;
        bool safe = true;
        for (uint32_t j = 0; j < m && safe; j++)
            if (j != i && covers(&all[j], t)) safe = false;
        if (safe) c->cuts[c->n_cuts++] = (struct cut_token){t->content, (uint32_t)t->content_len};
    }
    free(all);
    qsort(c->cuts, c->n_cuts, sizeof *c->cuts, cmp_first_byte);
    uint32_t k = 0;
    for (uint32_t b = 0; b <= 256; b++) {
        while (k < c->n_cuts && (uint8_t)c->cuts[k].text[0] < b) k++;
        c->first[b] = k;
    }
    for (uint32_t b = 0; b < 256; b++)
        if (c->first[b + 1] > c->first[b]) {
            if (c->n_lead < 4) c->lead[c->n_lead] = (uint8_t)b;
            c->n_lead++;
        }
    return 0;
}

/* The safe cut token starting at p, or NULL. */
static const struct cut_token *cut_at(const struct gw_api_tokcache *c, const char *t, size_t len, size_t p)
{
    uint8_t b = (uint8_t)t[p];
    for (uint32_t k = c->first[b]; k < c->first[b + 1]; k++) {
        const struct cut_token *ct = &c->cuts[k];
        if (ct->len <= len - p && (ct->len < 2 || ct->text[1] == t[p + 1]) &&
            memcmp(t + p, ct->text, ct->len) == 0)
            return ct;
    }
    return NULL;
}

/* The end of the first safe cut token occurring at or after from, or len. */
static size_t next_cut(const struct gw_api_tokcache *c, const char *t, size_t len, size_t from)
{
    size_t p = from;
#if defined(__SSE2__)
    if (c->n_lead <= 4) {
        /* 16 bytes at a time: only positions holding one of the (few) first bytes are looked at */
        __m128i l0 = _mm_set1_epi8((char)c->lead[0]), l1 = _mm_set1_epi8((char)c->lead[c->n_lead > 1]),
                l2 = _mm_set1_epi8((char)c->lead[c->n_lead > 2 ? 2 : 0]),
                l3 = _mm_set1_epi8((char)c->lead[c->n_lead > 3 ? 3 : 0]);
        for (; p + 16 <= len; p += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(t + p));
            __m128i eq = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, l0), _mm_cmpeq_epi8(v, l1)),
                                      _mm_or_si128(_mm_cmpeq_epi8(v, l2), _mm_cmpeq_epi8(v, l3)));
            unsigned mask = (unsigned)_mm_movemask_epi8(eq);
            while (mask) {
                size_t q = p + (size_t)__builtin_ctz(mask);
                const struct cut_token *ct = cut_at(c, t, len, q);
                if (ct) return q + ct->len;
                mask &= mask - 1;
            }
        }
    }
#endif
    for (; p < len; p++) {
        const struct cut_token *ct = cut_at(c, t, len, p);
        if (ct) return p + ct->len;
    }
    return len;
}

/* ---- the table ---- */

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

static void lru_unlink(struct gw_api_tokcache *c, struct entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->lru_head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->lru_tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push(struct gw_api_tokcache *c, struct entry *e)
{
    e->prev = NULL;
    e->next = c->lru_head;
    if (c->lru_head) c->lru_head->prev = e;
    c->lru_head = e;
    if (!c->lru_tail) c->lru_tail = e;
}

static size_t entry_size(size_t len, size_t n_ids)
{
    size_t off = (sizeof(struct entry) + len + 3) & ~(size_t)3;
    return off + n_ids * sizeof(uint32_t);
}

static void evict_one(struct gw_api_tokcache *c)
{
    struct entry *e = c->lru_tail;
    lru_unlink(c, e);
    for (struct entry **p = &c->buckets[e->hash & (N_BUCKETS - 1)]; *p; p = &(*p)->chain)
        if (*p == e) {
            *p = e->chain;
            break;
        }
    c->bytes -= entry_size(e->len, e->n_ids);
    c->entries--;
    free(e);
}

/* mu held */
static struct entry *lookup(struct gw_api_tokcache *c, uint64_t h, const char *t, size_t len)
{
    for (struct entry *e = c->buckets[h & (N_BUCKETS - 1)]; e; e = e->chain)
        if (e->hash == h && e->len == len && memcmp(e->text, t, len) == 0) return e;
    return NULL;
}

static void insert(struct gw_api_tokcache *c, uint64_t h, const char *t, size_t len, const uint32_t *ids,
                   size_t n_ids)
{
    size_t size = entry_size(len, n_ids);
    if (size > c->budget / 4) return;
    pthread_mutex_lock(&c->mu);
    if (lookup(c, h, t, len)) { /* another loop was first */
        pthread_mutex_unlock(&c->mu);
        return;
    }
    while (c->lru_tail && c->bytes + size > c->budget) evict_one(c);
    struct entry *e = malloc(size);
    if (e) {
        e->hash = h;
        e->len = (uint32_t)len;
        e->n_ids = (uint32_t)n_ids;
        memcpy(e->text, t, len);
        e->ids = (uint32_t *)(void *)((char *)e + ((sizeof(struct entry) + len + 3) & ~(size_t)3));
        memcpy(e->ids, ids, n_ids * sizeof *ids);
        e->chain = c->buckets[h & (N_BUCKETS - 1)];
        c->buckets[h & (N_BUCKETS - 1)] = e;
        lru_push(c, e);
        c->bytes += size;
        c->entries++;
    }
    pthread_mutex_unlock(&c->mu);
}

/* Append the cached ids of piece t; false on a miss. */
static bool take_cached(struct gw_api_tokcache *c, uint64_t h, const char *t, size_t len,
                        struct gw_tok_ids *out, bool *nomem)
{
    pthread_mutex_lock(&c->mu);
    struct entry *e = lookup(c, h, t, len);
    if (e) {
        lru_unlink(c, e);
        lru_push(c, e);
        c->hits++;
        if (gw_tok_ids_append(out, e->ids, e->n_ids)) *nomem = true;
    } else {
        c->misses++;
    }
    pthread_mutex_unlock(&c->mu);
    return e != NULL;
}

/* ---- public ---- */

struct gw_api_tokcache *gw_api_tokcache_create(const struct gw_tokenizer *tok, size_t budget_bytes)
{
    struct gw_api_tokcache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (find_cut_tokens(c, tok) != 0 || c->n_cuts == 0) {
        free(c->cuts);
        free(c);
        return NULL;
    }
    c->budget = budget_bytes ? budget_bytes : DEFAULT_BUDGET;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void gw_api_tokcache_free(struct gw_api_tokcache *c)
{
    if (!c) return;
    while (c->lru_tail) evict_one(c);
    pthread_mutex_destroy(&c->mu);
    free(c->cuts);
    free(c);
}

int32_t gw_api_tokcache_encode(struct gw_api_tokcache *c, const struct gw_tokenizer *tok, const char *text,
                               size_t len, struct gw_tok_ids *out, struct mm_err *err)
{
    if (!c) return gw_tokenizer_encode(tok, text, len, 0, out, err);
    size_t start = out->n;
    for (size_t from = 0; from < len;) {
        size_t cut = next_cut(c, text, len, from), n = cut - from;
        const char *piece = text + from;
        from = cut;
        if (n > MAX_PIECE) {
            if (gw_tokenizer_encode(tok, piece, n, 0, out, err) != MM_OK) goto whole;
            continue;
        }
        uint64_t h = hash_bytes(piece, n);
        bool nomem = false;
        if (take_cached(c, h, piece, n, out, &nomem)) {
            if (nomem) goto whole;
            continue;
        }
        size_t before = out->n;
        if (gw_tokenizer_encode(tok, piece, n, 0, out, err) != MM_OK) goto whole;
        insert(c, h, piece, n, out->ids + before, out->n - before);
    }
    return MM_OK;
whole:
    /* a failure (invalid UTF-8, out of memory) reports what encoding the whole text reports */
    out->n = start;
    return gw_tokenizer_encode(tok, text, len, 0, out, err);
}

void gw_api_tokcache_stats(struct gw_api_tokcache *c, struct gw_api_tokcache_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    out->hits = c->hits;
    out->misses = c->misses;
    out->entries = c->entries;
    out->bytes = c->bytes;
    out->cut_tokens = c->n_cuts;
    pthread_mutex_unlock(&c->mu);
}
