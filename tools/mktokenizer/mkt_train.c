/* BPE training over a table of distinct pre-tokens with their counts. Pair counts live in a hash map
 * together with the list of words each pair occurs in, so a merge only revisits the words that contain
 * it; the best pair comes from a max-heap with lazy deletion (existing pairs only lose counts during a
 * merge, new pairs are pushed once the merge is done). */
#include "mkt_train.h"

#include <stdlib.h>
#include <string.h>

#include "gw_tok_internal.h"

struct word {
    size_t off;     /* first symbol in t->syms */
    uint32_t len;   /* current symbol count */
    uint32_t stamp; /* last merge that visited it */
    uint64_t count;
};

struct pair {
    uint64_t key; /* UINT64_MAX = empty */
    int64_t count;
    uint32_t *words;
    uint32_t nw, cap;
};

struct hitem {
    int64_t count;
    uint64_t key;
};

struct mkt_trainer {
    struct gw_tok_strmap index; /* word bytes -> word number */
    struct word *words;
    size_t n_words, cap_words;
    uint32_t *syms;
    size_t n_syms, cap_syms;
    struct pair *pairs;
    size_t pair_mask, n_pairs;
    struct hitem *heap;
    size_t n_heap, cap_heap;
};

struct mkt_trainer *mkt_trainer_create(void)
{
    struct mkt_trainer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (gw_tok_strmap_init(&t->index, 1024)) {
        free(t);
        return NULL;
    }
    return t;
}

void mkt_trainer_destroy(struct mkt_trainer *t)
{
    if (!t) return;
    gw_tok_strmap_free(&t->index);
    for (size_t i = 0; t->pairs && i <= t->pair_mask; i++) free(t->pairs[i].words);
    free(t->pairs);
    free(t->words);
    free(t->syms);
    free(t->heap);
    free(t);
}

int32_t mkt_trainer_add_word(struct mkt_trainer *t, const uint8_t *s, size_t n, const uint16_t byte_id[256],
                             struct mm_err *err)
{
    if (n == 0) return MM_OK;
    uint32_t w = gw_tok_strmap_get(&t->index, s, n);
    if (w != GW_TOK_NONE) {
        t->words[w].count++;
        return MM_OK;
    }
    if (t->n_words == t->cap_words) {
        size_t cap = t->cap_words ? t->cap_words * 2 : 1024;
        struct word *nw = realloc(t->words, cap * sizeof *nw);
        if (!nw) return mm_err_set(err, MM_NOMEM, "trainer: out of memory");
        t->words = nw;
        t->cap_words = cap;
    }
    while (t->n_syms + n > t->cap_syms) {
        size_t cap = t->cap_syms ? t->cap_syms * 2 : 65536;
        uint32_t *ns = realloc(t->syms, cap * sizeof *ns);
        if (!ns) return mm_err_set(err, MM_NOMEM, "trainer: out of memory");
        t->syms = ns;
        t->cap_syms = cap;
    }
    if (t->n_words >= UINT32_MAX - 1 || gw_tok_strmap_put(&t->index, s, n, (uint32_t)t->n_words))
        return mm_err_set(err, MM_NOMEM, "trainer: out of memory");
    struct word *wd = &t->words[t->n_words++];
    wd->off = t->n_syms;
    wd->len = (uint32_t)n;
    wd->count = 1;
    wd->stamp = 0;
    for (size_t i = 0; i < n; i++) t->syms[t->n_syms++] = byte_id[s[i]];
    return MM_OK;
}

/* ---- pair map ---- */

static struct pair *pair_slot(struct mkt_trainer *t, uint64_t key, int create)
{
    if (create && (t->n_pairs + 1) * 2 > t->pair_mask + 1) {
        size_t cap = t->pairs ? (t->pair_mask + 1) * 2 : 4096;
        struct pair *np = malloc(cap * sizeof *np);
        if (!np) return NULL;
        for (size_t i = 0; i < cap; i++) np[i] = (struct pair){UINT64_MAX, 0, NULL, 0, 0};
        for (size_t i = 0; t->pairs && i <= t->pair_mask; i++) {
            if (t->pairs[i].key == UINT64_MAX) continue;
            size_t j = (size_t)((t->pairs[i].key * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
            while (np[j].key != UINT64_MAX) j = (j + 1) & (cap - 1);
            np[j] = t->pairs[i];
        }
        free(t->pairs);
        t->pairs = np;
        t->pair_mask = cap - 1;
    }
    if (!t->pairs) return NULL;
    size_t j = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & t->pair_mask;
    while (t->pairs[j].key != key) {
        if (t->pairs[j].key == UINT64_MAX) {
            if (!create) return NULL;
            t->pairs[j].key = key;
            t->n_pairs++;
            break;
        }
        j = (j + 1) & t->pair_mask;
    }
    return &t->pairs[j];
}

static int pair_add(struct mkt_trainer *t, uint32_t a, uint32_t b, int64_t delta, uint32_t word)
{
    struct pair *p = pair_slot(t, gw_tok_pair_key(a, b), 1);
    if (!p) return -1;
    p->count += delta;
    if (delta > 0) {
        if (p->nw == p->cap) {
            uint32_t cap = p->cap ? p->cap * 2 : 4;
            uint32_t *nw = realloc(p->words, cap * sizeof *nw);
            if (!nw) return -1;
            p->words = nw;
            p->cap = cap;
        }
        p->words[p->nw++] = word;
    }
    return 0;
}

/* ---- heap: highest count first, then lowest key ---- */

static int hbefore(const struct hitem *x, const struct hitem *y)
{
    return x->count > y->count || (x->count == y->count && x->key < y->key);
}

static int hpush(struct mkt_trainer *t, int64_t count, uint64_t key)
{
    if (t->n_heap == t->cap_heap) {
        size_t cap = t->cap_heap ? t->cap_heap * 2 : 4096;
        struct hitem *nh = realloc(t->heap, cap * sizeof *nh);
        if (!nh) return -1;
        t->heap = nh;
        t->cap_heap = cap;
    }
    struct hitem e = {count, key};
    size_t i = t->n_heap++;
    while (i > 0 && hbefore(&e, &t->heap[(i - 1) / 2])) {
        t->heap[i] = t->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    t->heap[i] = e;
    return 0;
}

static struct hitem hpop(struct mkt_trainer *t)
{
    struct hitem top = t->heap[0], last = t->heap[--t->n_heap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= t->n_heap) break;
        if (c + 1 < t->n_heap && hbefore(&t->heap[c + 1], &t->heap[c])) c++;
        if (!hbefore(&t->heap[c], &last)) break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (t->n_heap) t->heap[i] = last;
    return top;
}

int32_t mkt_trainer_run(struct mkt_trainer *t, size_t max_merges, uint64_t min_count, uint32_t **left,
                        uint32_t **right, size_t *n_merges, struct mm_err *err)
{
    *left = *right = NULL;
    *n_merges = 0;
    uint32_t *L = malloc((max_merges + 1) * sizeof *L), *R = malloc((max_merges + 1) * sizeof *R);
    uint64_t *fresh = NULL; /* keys of pairs created by the current merge */
    size_t n_fresh = 0, cap_fresh = 0;
    if (!L || !R) goto oom;
    for (size_t w = 0; w < t->n_words; w++) {
        const uint32_t *s = t->syms + t->words[w].off;
        for (uint32_t i = 0; i + 1 < t->words[w].len; i++)
            if (pair_add(t, s[i], s[i + 1], (int64_t)t->words[w].count, (uint32_t)w)) goto oom;
    }
    for (size_t i = 0; t->pairs && i <= t->pair_mask; i++)
        if (t->pairs[i].key != UINT64_MAX && t->pairs[i].count >= (int64_t)min_count &&
            hpush(t, t->pairs[i].count, t->pairs[i].key))
            goto oom;
    size_t nm = 0;
    while (nm < max_merges && t->n_heap) {
        struct hitem top = hpop(t);
        struct pair *p = pair_slot(t, top.key, 0);
        if (!p || p->count != top.count) {
            if (p && p->count >= (int64_t)min_count && hpush(t, p->count, p->key)) goto oom;
            continue;
        }
        uint32_t a = (uint32_t)(top.key >> 32), b = (uint32_t)top.key, nid = (uint32_t)(256 + nm);
        L[nm] = a;
        R[nm] = b;
        nm++;
        n_fresh = 0;
        /* The list may hold a word several times or words that lost the pair already. */
        uint32_t nw = p->nw;
        for (uint32_t k = 0; k < nw; k++) {
            struct pair *pp = pair_slot(t, top.key, 0); /* the table may have grown */
            uint32_t w = pp->words[k];
            struct word *wd = &t->words[w];
            if (wd->stamp == (uint32_t)nm) continue;
            wd->stamp = (uint32_t)nm;
            uint32_t *s = t->syms + wd->off;
            int64_t c = (int64_t)wd->count;
            int has = 0;
            for (uint32_t i = 0; i + 1 < wd->len; i++)
                if (s[i] == a && s[i + 1] == b) has = 1;
            if (!has) continue;
            for (uint32_t i = 0; i + 1 < wd->len; i++)
                if (pair_add(t, s[i], s[i + 1], -c, w)) goto oom;
            uint32_t o = 0;
            for (uint32_t i = 0; i < wd->len; i++) {
                if (i + 1 < wd->len && s[i] == a && s[i + 1] == b) {
                    s[o++] = nid;
                    i++;
                } else {
                    s[o++] = s[i];
                }
            }
            wd->len = o;
            for (uint32_t i = 0; i + 1 < wd->len; i++) {
                if (pair_add(t, s[i], s[i + 1], c, w)) goto oom;
                if (s[i] == nid || s[i + 1] == nid) {
                    if (n_fresh == cap_fresh) {
                        cap_fresh = cap_fresh ? cap_fresh * 2 : 256;
                        uint64_t *nf = realloc(fresh, cap_fresh * sizeof *nf);
                        if (!nf) goto oom;
                        fresh = nf;
                    }
                    fresh[n_fresh++] = gw_tok_pair_key(s[i], s[i + 1]);
                }
            }
        }
        for (size_t k = 0; k < n_fresh; k++) {
            struct pair *np = pair_slot(t, fresh[k], 0);
            /* pushed once per distinct key: a stale duplicate is dropped at pop time */
            if (np && np->count >= (int64_t)min_count && hpush(t, np->count, np->key)) goto oom;
        }
    }
    free(fresh);
    *left = L;
    *right = R;
    *n_merges = nm;
    return MM_OK;
oom:
    free(L);
    free(R);
    free(fresh);
    return mm_err_set(err, MM_NOMEM, "trainer: out of memory");
}
