/* BENCHMARK TOOL ONLY (see bench_engine.h). Never shipped.
 *
 * The "model" is the scheduler tests' fake (tests/unit/server/fake_engine.c) made cheap: a sequence's state
 * is a running hash of its tokens and the logits after a position peak at hash % vocab, so continuations
 * still depend on the whole prefix. What the test fixture does in linear time (finding a free page, counting
 * free pages, matching a cached prefix against every published page) is O(1) per page here: a free stack,
 * a counter, a hash map from a prefix's hash to its page and an LRU list of cached pages nobody uses. A real
 * worker runs the model and its sampling on the GPU; the fixture's CPU costs (a softmax over the vocabulary
 * per token at temperature 1, the linear scans) made the benchmark measure them instead of the serving
 * stack. Sampling honours temperature only (as the fixture): top_p, top_k and min_p are ignored. */
#include "bench_engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "wk_engine.h"

#define PEAK 5.0f /* the logit at hash % vocab; every other logit is 0 */

struct page {
    uint64_t key;       /* the prefix hash at the page's end, when published */
    int32_t refs;       /* sequences holding it */
    int32_t published;  /* findable by its key */
    int32_t prev, next; /* LRU of published pages nobody holds; -1 = none */
    int32_t chain;      /* next page in the same map bucket */
};

struct wk_seq {
    int32_t *pages;
    int64_t n_pages, cap_pages;
    int64_t len;
    uint64_t h;
    uint64_t media_hash;
};

struct wk_engine {
    struct wk_model_info info;
    struct page *pg;
    int32_t *free_stack; /* never published, nobody holds them */
    int64_t n_free;
    int32_t lru_head, lru_tail; /* published, nobody holds them: evicted from the tail */
    int64_t held;               /* pages with refs > 0 */
    int32_t *map;               /* buckets of published pages by key */
    uint64_t map_mask;
};

static struct fake_config g_cfg = {.vocab = 720,
                                   .max_context = 32768,
                                   .block = 16,
                                   .pages = 65536,
                                   .hidden = 8,
                                   .eos = 719,
                                   .image = 681,
                                   .video = 682};

void bench_engine_set_config(const struct fake_config *c)
{
    g_cfg = *c;
}

static uint64_t mix(uint64_t h, int64_t v)
{
    h = (h ^ (uint64_t)v) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
}

static uint64_t page_key(uint64_t h, uint64_t media_hash)
{
    uint64_t k = mix(h, (int64_t)media_hash);
    return k ? k : 1;
}

/* ---- pages ---- */

static void lru_unlink(struct wk_engine *e, int32_t p)
{
    struct page *g = &e->pg[p];
    if (g->prev >= 0)
        e->pg[g->prev].next = g->next;
    else
        e->lru_head = g->next;
    if (g->next >= 0)
        e->pg[g->next].prev = g->prev;
    else
        e->lru_tail = g->prev;
    g->prev = g->next = -1;
}

static void lru_push(struct wk_engine *e, int32_t p)
{
    struct page *g = &e->pg[p];
    g->prev = -1;
    g->next = e->lru_head;
    if (e->lru_head >= 0) e->pg[e->lru_head].prev = p;
    e->lru_head = p;
    if (e->lru_tail < 0) e->lru_tail = p;
}

static int32_t map_find(const struct wk_engine *e, uint64_t key)
{
    for (int32_t p = e->map[key & e->map_mask]; p >= 0; p = e->pg[p].chain)
        if (e->pg[p].key == key) return p;
    return -1;
}

static void unpublish(struct wk_engine *e, int32_t p)
{
    struct page *g = &e->pg[p];
    for (int32_t *q = &e->map[g->key & e->map_mask]; *q >= 0; q = &e->pg[*q].chain)
        if (*q == p) {
            *q = g->chain;
            break;
        }
    g->published = 0;
    g->chain = -1;
}

static void publish(struct wk_engine *e, int32_t p, uint64_t key)
{
    struct page *g = &e->pg[p];
    if (g->published || map_find(e, key) >= 0) return; /* one page per prefix */
    g->key = key;
    g->published = 1;
    g->chain = e->map[key & e->map_mask];
    e->map[key & e->map_mask] = p;
}

static int32_t take_page(struct wk_engine *e)
{
    int32_t p;
    if (e->n_free) {
        p = e->free_stack[--e->n_free];
    } else if (e->lru_tail >= 0) {
        p = e->lru_tail; /* the least recently released cached prefix */
        lru_unlink(e, p);
        unpublish(e, p);
    } else {
        return -1;
    }
    e->pg[p].refs = 1;
    e->held++;
    return p;
}

static void page_ref(struct wk_engine *e, int32_t p)
{
    if (e->pg[p].refs++ == 0) {
        e->held++;
        lru_unlink(e, p); /* only published pages are found again, and those wait in the LRU */
    }
}

static void page_unref(struct wk_engine *e, int32_t p)
{
    if (--e->pg[p].refs > 0) return;
    e->held--;
    if (e->pg[p].published)
        lru_push(e, p);
    else
        e->free_stack[e->n_free++] = p;
}

static int32_t seq_push_page(struct wk_seq *s, int32_t page)
{
    if (s->n_pages == s->cap_pages) {
        int64_t cap = s->cap_pages ? s->cap_pages * 2 : 32;
        int32_t *p = realloc(s->pages, (size_t)cap * sizeof(int32_t));
        if (!p) return -1;
        s->pages = p;
        s->cap_pages = cap;
    }
    s->pages[s->n_pages++] = page;
    return 0;
}

/* ---- engine ---- */

int32_t wk_engine_open(const char *model_dir, const struct wk_engine_opts *opts, struct wk_engine **out,
                       struct mm_err *err)
{
    (void)model_dir;
    struct wk_engine *e = calloc(1, sizeof(*e));
    if (!e) return mm_err_set(err, MM_NOMEM, "out of memory");
    int64_t n = opts && opts->cache_pages ? opts->cache_pages : g_cfg.pages;
    if (n < 1 || n > (1 << 30)) n = g_cfg.pages;
    fake_model_info(&e->info, &g_cfg, "bench", "bench_engine", n);
    uint64_t buckets = 1;
    while (buckets < (uint64_t)n) buckets <<= 1;
    e->pg = calloc((size_t)n, sizeof *e->pg);
    e->free_stack = malloc((size_t)n * sizeof *e->free_stack);
    e->map = malloc((size_t)buckets * sizeof *e->map);
    if (!e->pg || !e->free_stack || !e->map) {
        wk_engine_close(e);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    e->map_mask = buckets - 1;
    for (uint64_t b = 0; b < buckets; b++) e->map[b] = -1;
    for (int64_t i = 0; i < n; i++) {
        e->pg[i].prev = e->pg[i].next = e->pg[i].chain = -1;
        e->free_stack[i] = (int32_t)(n - 1 - i);
    }
    e->n_free = n;
    e->lru_head = e->lru_tail = -1;
    *out = e;
    return MM_OK;
}

void wk_engine_close(struct wk_engine *e)
{
    if (!e) return;
    free(e->pg);
    free(e->free_stack);
    free(e->map);
    free(e);
}

const struct wk_model_info *wk_engine_info(const struct wk_engine *e)
{
    return &e->info;
}

int32_t wk_engine_encode_media(struct wk_engine *e, const struct wk_media *m, float **embeds,
                               int64_t *n_tokens, struct mm_err *err)
{
    return fake_model_encode_media(e->info.hidden_size, m, embeds, n_tokens, err);
}

void wk_engine_set_media_keep(struct wk_engine *e, int64_t bytes)
{
    (void)e;
    (void)bytes;
}

/* nothing to keep elsewhere: the results stay on the host */
int32_t wk_engine_encode_media_kept(struct wk_engine *e, const struct wk_media *m, const int32_t *cancel,
                                    struct wk_embeds *out, struct mm_err *err)
{
    (void)cancel;
    *out = (struct wk_embeds){0};
    return fake_model_encode_media(e->info.hidden_size, m, &out->data, &out->n_tokens, err);
}

void wk_engine_embeds_free(struct wk_engine *e, struct wk_embeds *x)
{
    (void)e;
    free(x->data);
    *x = (struct wk_embeds){0};
}

int64_t wk_engine_free_pages(const struct wk_engine *e)
{
    return e->info.pages_total - e->held;
}

int64_t wk_engine_pages_for(const struct wk_engine *e, int64_t n)
{
    return (n + e->info.block_size - 1) / e->info.block_size;
}

/* ---- sequences ---- */

int32_t wk_seq_create(struct wk_engine *e, struct wk_seq **out, struct mm_err *err)
{
    (void)e;
    struct wk_seq *s = calloc(1, sizeof(*s));
    if (!s) return mm_err_set(err, MM_NOMEM, "out of memory");
    s->h = 0x1234;
    *out = s;
    return MM_OK;
}

int32_t wk_seq_fork(struct wk_engine *e, const struct wk_seq *parent, struct wk_seq **out, struct mm_err *err)
{
    struct wk_seq *s = calloc(1, sizeof(*s));
    if (!s) return mm_err_set(err, MM_NOMEM, "out of memory");
    int64_t full = parent->len / e->info.block_size;
    for (int64_t i = 0; i < full; i++) {
        if (seq_push_page(s, parent->pages[i]) != 0) {
            wk_seq_free(e, s);
            return mm_err_set(err, MM_NOMEM, "out of memory");
        }
        page_ref(e, parent->pages[i]);
    }
    if (parent->n_pages > full) { /* the partial last page is copied */
        int32_t p = take_page(e);
        if (p < 0 || seq_push_page(s, p) != 0) {
            if (p >= 0) page_unref(e, p);
            wk_seq_free(e, s);
            return mm_err_set(err, MM_EXHAUSTED, "no page for the fork's partial page");
        }
    }
    s->len = parent->len;
    s->h = parent->h;
    s->media_hash = parent->media_hash;
    *out = s;
    return MM_OK;
}

void wk_seq_free(struct wk_engine *e, struct wk_seq *s)
{
    if (!s) return;
    for (int64_t i = 0; i < s->n_pages; i++) page_unref(e, s->pages[i]);
    free(s->pages);
    free(s);
}

int64_t wk_seq_len(const struct wk_seq *s)
{
    return s->len;
}

int64_t wk_seq_reuse_prefix(struct wk_engine *e, struct wk_seq *s, const int32_t *ids, int64_t n,
                            uint64_t media_hash)
{
    const int32_t B = e->info.block_size;
    if (s->len != 0) return 0;
    s->media_hash = media_hash;
    uint64_t h = s->h;
    int64_t k = 0;
    while (k + B < n) {
        uint64_t hp = h;
        for (int32_t j = 0; j < B; j++) hp = mix(hp, ids[k + j]);
        int32_t p = map_find(e, page_key(hp, media_hash));
        if (p < 0 || seq_push_page(s, p) != 0) break;
        page_ref(e, p);
        h = hp;
        k += B;
    }
    s->len = k;
    s->h = h;
    return k;
}

/* ---- forward and sampling ---- */

int32_t wk_engine_forward(struct wk_engine *e, struct wk_step_item *items, int32_t n_items,
                          struct mm_err *err)
{
    const int32_t B = e->info.block_size, V = e->info.vocab_size;
    int64_t need = 0;
    for (int32_t i = 0; i < n_items; i++) {
        if (items[i].n <= 0) return mm_err_set(err, MM_INVALID, "empty item");
        for (int32_t t = 0; t < items[i].n; t++)
            if (items[i].ids[t] < 0 || items[i].ids[t] >= V) return mm_err_set(err, MM_INVALID, "bad id");
        struct wk_seq *s = items[i].seq;
        if (s->len + items[i].n > e->info.max_context) return mm_err_set(err, MM_INVALID, "past the context");
        need += wk_engine_pages_for(e, s->len + items[i].n) - s->n_pages;
    }
    if (need > wk_engine_free_pages(e))
        return mm_err_set(err, MM_EXHAUSTED, "need %lld pages", (long long)need);
    for (int32_t i = 0; i < n_items; i++) {
        struct wk_step_item *it = &items[i];
        struct wk_seq *s = it->seq;
        int32_t sp = 0; /* the first media span not ending before t */
        for (int32_t t = 0; t < it->n; t++) {
            if (s->len % B == 0 && s->len / B == s->n_pages) {
                int32_t p = take_page(e);
                if (p < 0 || seq_push_page(s, p) != 0) return mm_err_set(err, MM_NOMEM, "out of pages");
            }
            int64_t v = it->ids[t];
            if (it->embeds && it->use_embed && it->use_embed[t])
                v = (int64_t)(it->embeds[(int64_t)t * e->info.hidden_size] * 1000.0f);
            while (sp < it->n_spans && it->spans[sp].at + it->spans[sp].n <= t) sp++;
            if (sp < it->n_spans && it->spans[sp].at <= t)
                v = (int64_t)(it->spans[sp].rows[(int64_t)(t - it->spans[sp].at) * e->info.hidden_size] *
                              1000.0f);
            s->h = mix(s->h, v);
            s->len++;
            if (s->len % B == 0) publish(e, s->pages[s->n_pages - 1], page_key(s->h, s->media_hash));
        }
        if (it->logits_mode == WK_LOGITS_LAST || it->logits_mode == WK_LOGITS_CANDS) {
            /* candidates: this engine returns the whole row (n = -1), as a backend without topk_rows does */
            memset(it->logits, 0, (size_t)V * sizeof(float));
            it->logits[s->h % (uint64_t)V] = PEAK;
            if (it->logits_mode == WK_LOGITS_CANDS) it->cands->n = -1;
        } else if (it->logits_mode == WK_LOGITS_ARGMAX) {
            it->token = (int32_t)(s->h % (uint64_t)V); /* the row's peak */
        } else if (it->logits_mode == WK_LOGITS_ALL) {
            return mm_err_set(err, MM_UNSUPPORTED, "the bench engine has no ALL logits");
        }
    }
    return MM_OK;
}

double wk_sample_uniform(uint64_t *rng)
{
    return fake_model_uniform(rng);
}

int32_t wk_sample(const float *logits, int32_t vocab, const struct wk_sampling *sp, uint64_t *rng,
                  float *logprob)
{
    int32_t best = 0, others_zero = 1;
    for (int32_t v = 1; v < vocab; v++)
        if (logits[v] > logits[best]) best = v;
    for (int32_t v = 0; v < vocab && others_zero; v++) others_zero = v == best || logits[v] == 0.0f;
    if (sp->temperature <= 0.0f) return best;
    double u = fake_model_uniform(rng);
    double t = sp->temperature;
    if (others_zero) {
        /* this engine's logits: the softmax has two values, one exp instead of one per token */
        double pb = 1.0 / (1.0 + (double)(vocab - 1) * exp(-(double)logits[best] / t));
        if (logprob) *logprob = (float)log(pb);
        if (u < pb || vocab == 1) return best;
        int32_t k = (int32_t)((u - pb) / (1.0 - pb) * (double)(vocab - 1));
        if (k >= vocab - 1) k = vocab - 2;
        return k < best ? k : k + 1;
    }
    double sum = 0.0, acc = 0.0;
    for (int32_t v = 0; v < vocab; v++) sum += exp((double)(logits[v] - logits[best]) / t);
    int32_t pick = best;
    for (int32_t v = 0; v < vocab; v++) {
        acc += exp((double)(logits[v] - logits[best]) / t) / sum;
        if (u < acc) {
            pick = v;
            break;
        }
    }
    if (logprob) *logprob = (float)((double)(logits[pick] - logits[best]) / t - log(sum));
    return pick;
}
