/* TEST FIXTURE ONLY: a stand-in for the model runtime behind worker/wk_engine.h, so that the scheduler's
 * batching, paging, forking, prefix reuse and admission can be tested fast and exactly. Never shipped.
 *
 * The "model": a sequence's state is a running hash of every token it holds (media positions contribute
 * their embedding's first value); the logits after a position peak at hash % vocab. So the greedy
 * continuation depends on the whole prefix, and a scheduler that mixes up sequences, pages, forks or
 * prefixes produces different tokens than fake_solo_greedy. Pages are reference-counted like the real
 * pool (full pages shared by forks, the partial last page copied; released full pages stay cached for
 * prefix reuse and count as free). */
#include "fake_engine.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wk_engine.h"
#include "mm_logprobs.h"

struct fake_published {
    uint64_t key; /* running hash at the page's end */
    uint64_t media_hash;
    int32_t page;
    int64_t n_ids;
    int32_t *ids; /* the whole prefix up to this page's end */
    uint64_t stamp;
};

struct wk_seq {
    int32_t *pages;
    int64_t n_pages, cap_pages;
    int64_t len;
    uint64_t h;
    int32_t *ids; /* every token fed, for publishing pages */
    int64_t cap_ids;
    uint64_t media_hash; /* recorded by wk_seq_reuse_prefix, as the runtime does */
};

static int32_t seq_push_id(struct wk_seq *s, int32_t id)
{
    if (s->len == s->cap_ids) {
        int64_t cap = s->cap_ids ? s->cap_ids * 2 : 16;
        int32_t *p = realloc(s->ids, (size_t)cap * sizeof(int32_t));
        if (!p) return -1;
        s->ids = p;
        s->cap_ids = cap;
    }
    s->ids[s->len] = id;
    return 0;
}

struct wk_engine {
    struct wk_model_info info;
    int32_t *refs;
    int32_t *published_idx; /* per page: index into pub or -1 */
    struct fake_published *pub;
    int64_t n_pub;
    uint64_t stamp;
    struct fake_stats st;
    int64_t fail_after;      /* forward calls before an injected MM_ERROR; < 0 = never */
    int32_t delay_us;        /* sleep per forward, so that tests can act mid-stream */
    int32_t encode_delay_us; /* time an encode takes (cancellable in 1 ms steps) */
    int32_t encoding;        /* atomic: an encode is running (to count forwards beside it) */
    /* kept embeddings: the budget, and the live buffers (under kept_mu: the encoder thread adds) */
    int64_t keep_cap;
    pthread_mutex_t kept_mu;
    struct fake_kept {
        const float *p;
        int64_t bytes;
    } kept[256];
    int32_t n_kept;
};

void fake_engine_set_delay(struct wk_engine *e, int32_t us)
{
    e->delay_us = us;
}

void fake_engine_set_encode_delay(struct wk_engine *e, int32_t us)
{
    e->encode_delay_us = us;
}

int64_t fake_engine_stat(const struct wk_engine *e, const int64_t *field)
{
    (void)e;
    return __atomic_load_n(field, __ATOMIC_SEQ_CST);
}

static struct fake_config g_cfg = {.vocab = 64,
                                   .max_context = 512,
                                   .block = 4,
                                   .pages = 256,
                                   .hidden = 8,
                                   .eos = 1,
                                   .image = 60,
                                   .video = 61};
static struct wk_engine *g_last;

void fake_engine_set_config(const struct fake_config *c)
{
    g_cfg = *c;
}

struct wk_engine *fake_engine_last(void)
{
    return g_last;
}

const struct fake_stats *fake_engine_stats(const struct wk_engine *e)
{
    return &e->st;
}

void fake_engine_fail_forward_after(struct wk_engine *e, int64_t n)
{
    e->fail_after = n;
}

uint64_t fake_mix(uint64_t h, int64_t v)
{
    h ^= (uint64_t)v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}

void fake_logits(int32_t vocab, uint64_t h, float *out)
{
    int32_t peak = (int32_t)(h % (uint64_t)vocab);
    for (int32_t v = 0; v < vocab; v++) out[v] = (float)(fake_mix(h, v) % 1000) / 1000.0f;
    out[peak] = 5.0f;
}

int32_t fake_solo_greedy(const int32_t *ids, int64_t n, const float *media_first, int32_t k, int32_t *out)
{
    uint64_t h = 0x1234;
    for (int64_t i = 0; i < n; i++)
        h = fake_mix(h, media_first && !isnan(media_first[i]) ? (int64_t)(media_first[i] * 1000.0f) : ids[i]);
    for (int32_t j = 0; j < k; j++) {
        out[j] = (int32_t)(h % (uint64_t)g_cfg.vocab);
        h = fake_mix(h, out[j]);
    }
    return k;
}

int32_t wk_engine_open(const char *model_dir, const struct wk_engine_opts *opts, struct wk_engine **out,
                       struct mm_err *err)
{
    struct wk_engine *e = calloc(1, sizeof(*e));
    if (!e) return mm_err_set(err, MM_NOMEM, "oom");
    fake_model_info(&e->info, &g_cfg, "fake", "fake_test_fixture",
                    opts && opts->cache_pages ? opts->cache_pages : g_cfg.pages);
    e->refs = calloc((size_t)e->info.pages_total, sizeof(int32_t));
    e->published_idx = malloc((size_t)e->info.pages_total * sizeof(int32_t));
    e->pub = calloc((size_t)e->info.pages_total, sizeof(*e->pub));
    if (!e->refs || !e->published_idx || !e->pub) {
        wk_engine_close(e);
        return mm_err_set(err, MM_NOMEM, "oom");
    }
    for (int64_t i = 0; i < e->info.pages_total; i++) e->published_idx[i] = -1;
    e->fail_after = -1;
    e->keep_cap = WK_MEDIA_KEEP_DEFAULT;
    pthread_mutex_init(&e->kept_mu, NULL);
    const char *d = getenv("FAKE_ENGINE_DELAY_US"); /* for the fake worker binary */
    if (d) e->delay_us = atoi(d);
    const char *ed = getenv("FAKE_ENGINE_ENCODE_DELAY_US");
    if (ed) e->encode_delay_us = atoi(ed);
    g_last = e;
    *out = e;
    return MM_OK;
}

void wk_engine_close(struct wk_engine *e)
{
    if (!e) return;
    for (int64_t i = 0; i < e->n_pub; i++) free(e->pub[i].ids);
    free(e->pub);
    free(e->published_idx);
    free(e->refs);
    pthread_mutex_destroy(&e->kept_mu);
    if (g_last == e) g_last = NULL;
    free(e);
}

const struct wk_model_info *wk_engine_info(const struct wk_engine *e)
{
    return &e->info;
}

int32_t wk_engine_set_encode_threads(struct wk_engine *e, int32_t threads, struct mm_err *err)
{
    if (threads < 1) return mm_err_set(err, MM_INVALID, "encode threads %d", threads);
    e->info.concurrent_encode = 1; /* the fake's encode touches nothing forward() does */
    return MM_OK;
}

int32_t wk_engine_encode_media(struct wk_engine *e, const struct wk_media *m, float **embeds,
                               int64_t *n_tokens, struct mm_err *err)
{
    return wk_engine_encode_media_cancellable(e, m, NULL, embeds, n_tokens, err);
}

/* Runs on the scheduler's encoder thread when concurrent_encode is set: it touches only atomics and the
 * request's own bytes. A slow encode polls the cancel flag every millisecond, like the runtime between vision
 * layers. */
int32_t wk_engine_encode_media_cancellable(struct wk_engine *e, const struct wk_media *m,
                                           const int32_t *cancel, float **embeds, int64_t *n_tokens,
                                           struct mm_err *err)
{
    *embeds = NULL;
    *n_tokens = 0;
    __atomic_add_fetch(&e->st.encode_started, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&e->encoding, 1, __ATOMIC_SEQ_CST);
    for (int32_t left = e->encode_delay_us; left > 0; left -= 1000) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED)) {
            __atomic_store_n(&e->encoding, 0, __ATOMIC_SEQ_CST);
            __atomic_add_fetch(&e->st.encode_cancelled, 1, __ATOMIC_SEQ_CST);
            return mm_err_set(err, MM_CANCELLED, "encode cancelled");
        }
        struct timespec ts = {0, (long)(left < 1000 ? left : 1000) * 1000};
        nanosleep(&ts, NULL);
    }
    int32_t rc = fake_model_encode_media(e->info.hidden_size, m, embeds, n_tokens, err);
    __atomic_store_n(&e->encoding, 0, __ATOMIC_SEQ_CST);
    if (rc == MM_OK) __atomic_add_fetch(&e->st.encodes, 1, __ATOMIC_SEQ_CST);
    return rc;
}

void wk_engine_set_media_keep(struct wk_engine *e, int64_t bytes)
{
    e->keep_cap = bytes > 0 ? bytes : 0;
}

int64_t wk_engine_media_kept(const struct wk_engine *e)
{
    return __atomic_load_n(&e->st.kept_bytes, __ATOMIC_SEQ_CST);
}

int32_t wk_engine_encode_media_kept(struct wk_engine *e, const struct wk_media *m, const int32_t *cancel,
                                    struct wk_embeds *out, struct mm_err *err)
{
    *out = (struct wk_embeds){0};
    int32_t rc = wk_engine_encode_media_cancellable(e, m, cancel, &out->data, &out->n_tokens, err);
    if (rc != MM_OK) return rc;
    const int64_t bytes = out->n_tokens * e->info.hidden_size * (int64_t)sizeof(float);
    pthread_mutex_lock(&e->kept_mu);
    const int64_t held = __atomic_load_n(&e->st.kept_bytes, __ATOMIC_SEQ_CST);
    if (held + bytes <= e->keep_cap && e->n_kept < 256) {
        e->kept[e->n_kept++] = (struct fake_kept){out->data, bytes};
        __atomic_add_fetch(&e->st.kept_bytes, bytes, __ATOMIC_SEQ_CST);
        out->place = e->info.concurrent_encode ? WK_EMBEDS_VISION : WK_EMBEDS_ENGINE;
    }
    pthread_mutex_unlock(&e->kept_mu);
    return MM_OK;
}

void wk_engine_embeds_free(struct wk_engine *e, struct wk_embeds *x)
{
    if (x->data && x->place != WK_EMBEDS_HOST) {
        pthread_mutex_lock(&e->kept_mu);
        for (int32_t i = 0; i < e->n_kept; i++)
            if (e->kept[i].p == x->data) {
                __atomic_sub_fetch(&e->st.kept_bytes, e->kept[i].bytes, __ATOMIC_SEQ_CST);
                e->kept[i] = e->kept[--e->n_kept];
                break;
            }
        pthread_mutex_unlock(&e->kept_mu);
    }
    free(x->data);
    *x = (struct wk_embeds){0};
}

/* Whether n rows of a kept span lie inside a live kept buffer. */
static int32_t kept_live(struct wk_engine *e, const float *rows, int64_t n)
{
    const int64_t bytes = n * e->info.hidden_size * (int64_t)sizeof(float);
    int32_t ok = 0;
    pthread_mutex_lock(&e->kept_mu);
    for (int32_t i = 0; i < e->n_kept && !ok; i++) {
        const char *b = (const char *)e->kept[i].p, *r = (const char *)rows;
        ok = r >= b && r + bytes <= b + e->kept[i].bytes;
    }
    pthread_mutex_unlock(&e->kept_mu);
    return ok;
}

int64_t wk_engine_free_pages(const struct wk_engine *e)
{
    int64_t n = 0;
    for (int64_t i = 0; i < e->info.pages_total; i++) n += e->refs[i] == 0;
    return n;
}

int64_t wk_engine_pages_for(const struct wk_engine *e, int64_t n)
{
    return (n + e->info.block_size - 1) / e->info.block_size;
}

static void unpublish(struct wk_engine *e, int32_t page)
{
    int32_t k = e->published_idx[page];
    if (k < 0) return;
    free(e->pub[k].ids);
    e->pub[k] = e->pub[e->n_pub - 1];
    e->published_idx[e->pub[k].page] = k;
    e->n_pub--;
    e->published_idx[page] = -1;
}

/* A page nobody references: a never-published one first, else the least recently published one. */
static int32_t take_page(struct wk_engine *e)
{
    int32_t best = -1;
    uint64_t best_stamp = UINT64_MAX;
    for (int64_t i = 0; i < e->info.pages_total; i++) {
        if (e->refs[i]) continue;
        if (e->published_idx[i] < 0) {
            best = (int32_t)i;
            break;
        }
        uint64_t s = e->pub[e->published_idx[i]].stamp;
        if (s < best_stamp) {
            best_stamp = s;
            best = (int32_t)i;
        }
    }
    if (best < 0) return -1;
    unpublish(e, best);
    e->refs[best] = 1;
    return best;
}

static int32_t seq_push_page(struct wk_seq *s, int32_t page)
{
    if (s->n_pages == s->cap_pages) {
        int64_t cap = s->cap_pages ? s->cap_pages * 2 : 8;
        int32_t *p = realloc(s->pages, (size_t)cap * sizeof(int32_t));
        if (!p) return -1;
        s->pages = p;
        s->cap_pages = cap;
    }
    s->pages[s->n_pages++] = page;
    return 0;
}

int32_t wk_seq_create(struct wk_engine *e, struct wk_seq **out, struct mm_err *err)
{
    struct wk_seq *s = calloc(1, sizeof(*s));
    if (!s) return mm_err_set(err, MM_NOMEM, "oom");
    s->h = 0x1234;
    e->st.live_seqs++;
    *out = s;
    return MM_OK;
}

int32_t wk_seq_fork(struct wk_engine *e, const struct wk_seq *parent, struct wk_seq **out, struct mm_err *err)
{
    struct wk_seq *s = calloc(1, sizeof(*s));
    if (!s) return mm_err_set(err, MM_NOMEM, "oom");
    int64_t full = parent->len / e->info.block_size;
    for (int64_t i = 0; i < full; i++) {
        seq_push_page(s, parent->pages[i]);
        e->refs[parent->pages[i]]++;
    }
    if (parent->n_pages > full) {
        int32_t p = take_page(e);
        if (p < 0) {
            for (int64_t i = 0; i < s->n_pages; i++) e->refs[s->pages[i]]--;
            free(s->pages);
            free(s);
            return mm_err_set(err, MM_EXHAUSTED, "no page for the fork's partial page");
        }
        seq_push_page(s, p);
    }
    s->ids = malloc((size_t)(parent->len + 1) * sizeof(int32_t));
    if (!s->ids) {
        for (int64_t i = 0; i < s->n_pages; i++) e->refs[s->pages[i]]--;
        free(s->pages);
        free(s);
        return mm_err_set(err, MM_NOMEM, "oom");
    }
    memcpy(s->ids, parent->ids, (size_t)parent->len * sizeof(int32_t));
    s->cap_ids = parent->len + 1;
    s->len = parent->len;
    s->h = parent->h;
    s->media_hash = parent->media_hash;
    e->st.live_seqs++;
    e->st.forks++;
    *out = s;
    return MM_OK;
}

void wk_seq_free(struct wk_engine *e, struct wk_seq *s)
{
    if (!s) return;
    for (int64_t i = 0; i < s->n_pages; i++) e->refs[s->pages[i]]--;
    free(s->pages);
    free(s->ids);
    free(s);
    e->st.live_seqs--;
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
    int64_t best = -1, best_n = 0;
    for (int64_t k = 0; k < e->n_pub; k++) {
        const struct fake_published *p = &e->pub[k];
        if (p->n_ids >= n || p->n_ids <= best_n || p->media_hash != media_hash) continue;
        if (memcmp(p->ids, ids, (size_t)p->n_ids * sizeof(int32_t)) != 0) continue;
        best = k;
        best_n = p->n_ids;
    }
    if (best < 0) return 0;
    /* every page of the prefix must still be published under the same prefix */
    int64_t n_pages = best_n / B;
    int32_t *pages = malloc((size_t)n_pages * sizeof(int32_t));
    if (!pages) return 0;
    for (int64_t j = 0; j < n_pages; j++) {
        pages[j] = -1;
        for (int64_t k = 0; k < e->n_pub; k++)
            if (e->pub[k].n_ids == (j + 1) * B && e->pub[k].media_hash == media_hash &&
                memcmp(e->pub[k].ids, ids, (size_t)e->pub[k].n_ids * sizeof(int32_t)) == 0)
                pages[j] = e->pub[k].page;
        if (pages[j] < 0) {
            free(pages);
            return 0;
        }
    }
    for (int64_t j = 0; j < n_pages; j++) {
        seq_push_page(s, pages[j]);
        e->refs[pages[j]]++;
    }
    free(pages);
    for (int64_t j = 0; j < best_n; j++) {
        s->len = j;
        seq_push_id(s, ids[j]);
    }
    s->len = best_n;
    s->h = e->pub[best].key;
    e->st.reused_tokens += best_n;
    return best_n;
}

static int32_t fake_draw(const float *logits, int32_t vocab, float temperature, double u);

int32_t wk_engine_forward(struct wk_engine *e, struct wk_step_item *items, int32_t n_items,
                          struct mm_err *err)
{
    const int32_t B = e->info.block_size, V = e->info.vocab_size;
    if (e->delay_us) {
        struct timespec ts = {0, (long)e->delay_us * 1000};
        nanosleep(&ts, NULL);
    }
    if (e->fail_after == 0) {
        e->fail_after = -1; /* once */
        return mm_err_set(err, MM_ERROR, "injected failure");
    }
    if (e->fail_after > 0) e->fail_after--;
    int64_t need = 0, tokens = 0;
    for (int32_t i = 0; i < n_items; i++) {
        for (int32_t j = 0; j < i; j++)
            if (items[j].seq == items[i].seq)
                return mm_err_set(err, MM_INVALID, "a sequence twice in one step");
        if (items[i].n <= 0) return mm_err_set(err, MM_INVALID, "empty item");
        for (int32_t t = 0; t < items[i].n; t++)
            if (items[i].ids[t] < 0 || items[i].ids[t] >= V) return mm_err_set(err, MM_INVALID, "bad id");
        int64_t len = items[i].seq->len;
        if (len + items[i].n > e->info.max_context) return mm_err_set(err, MM_INVALID, "past the context");
        need += (len + items[i].n + B - 1) / B - items[i].seq->n_pages;
        tokens += items[i].n;
        int64_t end = 0; /* spans in order, apart, inside the item; kept ones alive */
        for (int32_t k = 0; k < items[i].n_spans; k++) {
            const struct wk_embed_span *sp = &items[i].spans[k];
            if (sp->at < end || sp->n < 1 || sp->at + sp->n > items[i].n || !sp->rows)
                return mm_err_set(err, MM_INVALID, "bad span");
            if (sp->kept && !kept_live(e, sp->rows, sp->n))
                return mm_err_set(err, MM_INVALID, "a kept span outside every live kept buffer");
            end = sp->at + sp->n;
        }
    }
    if (need > wk_engine_free_pages(e)) {
        e->st.exhausted++;
        return mm_err_set(err, MM_EXHAUSTED, "need %lld pages", (long long)need);
    }
    __atomic_add_fetch(&e->st.forwards, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&e->encoding, __ATOMIC_SEQ_CST))
        __atomic_add_fetch(&e->st.forwards_during_encode, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&e->st.tokens, tokens, __ATOMIC_SEQ_CST);
    if (n_items > e->st.max_items) e->st.max_items = n_items;
    if (tokens > e->st.max_step_tokens) e->st.max_step_tokens = tokens;
    for (int32_t i = 0; i < n_items; i++) {
        struct wk_step_item *it = &items[i];
        struct wk_seq *s = it->seq;
        for (int32_t k = 0; k < it->n_spans; k++)
            __atomic_add_fetch(it->spans[k].kept ? &e->st.kept_spans : &e->st.host_spans, 1,
                               __ATOMIC_SEQ_CST);
        int32_t sp = 0; /* the first span not ending before t */
        for (int32_t t = 0; t < it->n; t++) {
            if (s->len % B == 0) seq_push_page(s, take_page(e));
            int64_t v = it->ids[t];
            if (it->embeds && it->use_embed && it->use_embed[t])
                v = (int64_t)(it->embeds[(int64_t)t * e->info.hidden_size] * 1000.0f);
            while (sp < it->n_spans && it->spans[sp].at + it->spans[sp].n <= t) sp++;
            if (sp < it->n_spans && it->spans[sp].at <= t)
                v = (int64_t)(it->spans[sp].rows[(int64_t)(t - it->spans[sp].at) * e->info.hidden_size] *
                              1000.0f);
            s->h = fake_mix(s->h, v);
            if (seq_push_id(s, it->ids[t]) != 0) return mm_err_set(err, MM_NOMEM, "oom");
            s->len++;
            if (s->len % B == 0) {
                /* publish the full page under its whole prefix (text only: media positions hash differently,
                 * so a media prompt's pages carry the media hash the caller reuses with) */
                int32_t page = s->pages[s->n_pages - 1];
                if (e->published_idx[page] < 0) {
                    struct fake_published *p = &e->pub[e->n_pub];
                    p->ids = malloc((size_t)s->len * sizeof(int32_t));
                    if (p->ids) {
                        memcpy(p->ids, s->ids, (size_t)s->len * sizeof(int32_t));
                        p->n_ids = s->len;
                        p->key = s->h;
                        p->media_hash = s->media_hash;
                        p->page = page;
                        p->stamp = ++e->stamp;
                        e->published_idx[page] = (int32_t)e->n_pub++;
                    }
                }
            }
        }
        if (it->logits_mode == WK_LOGITS_LAST) {
            fake_logits(V, s->h, it->logits);
            e->st.logit_rows++;
        } else if (it->logits_mode == WK_LOGITS_ARGMAX) {
            float *l = malloc(sizeof(float) * (size_t)V);
            if (!l) return mm_err_set(err, MM_NOMEM, "oom");
            fake_logits(V, s->h, l);
            it->token = wk_argmax(l, V);
            free(l);
            e->st.argmax_rows++;
        } else if (it->logits_mode == WK_LOGITS_CANDS) {
            /* every token a candidate when they fit (the same draw as the whole row), else the whole row;
             * a request without top-k that allows the draw is drawn from here, as a flat row of M3 is */
            fake_logits(V, s->h, it->logits);
            it->cands->n = -1;
            if (it->cands->draw && it->cands->k == INT32_MAX) {
                const int32_t tok = fake_draw(it->logits, V, it->cands->temperature, it->cands->u);
                it->cands->ids[0] = tok, it->cands->logits[0] = it->logits[tok];
                it->cands->n = -2;
                /* with log-probabilities: the row's log-sum-exp and, as the top list, every token (a superset
                 * of the n_top largest, in the order a backend may give: any) */
                if (it->cands->flags & MM_CANDS_LSE) it->cands->lse = mm_logsumexp(it->logits, V);
                it->cands->n_top_out = 0;
                for (int32_t v = V - 1;
                     it->cands->n_top > 0 && v >= 0 && 1 + it->cands->n_top_out < it->cands->cap; v--) {
                    it->cands->ids[1 + it->cands->n_top_out] = v;
                    it->cands->logits[1 + it->cands->n_top_out++] = it->logits[v];
                }
                e->st.drawn_rows++;
            } else if (V <= it->cands->cap) {
                if (it->cands->flags & MM_CANDS_LSE) it->cands->lse = mm_logsumexp(it->logits, V);
                for (int32_t v = 0; v < V; v++) it->cands->ids[v] = v, it->cands->logits[v] = it->logits[v];
                it->cands->n = V;
            }
            e->st.cand_rows++;
        } else if (it->logits_mode == WK_LOGITS_ALL) {
            return mm_err_set(err, MM_UNSUPPORTED, "the fake has no ALL logits");
        }
    }
    return MM_OK;
}

int32_t wk_argmax(const float *logits, int32_t vocab)
{
    int32_t best = 0;
    for (int32_t v = 1; v < vocab; v++)
        if (logits[v] > logits[best] || (isnan(logits[best]) && !isnan(logits[v]))) best = v;
    return best;
}

double wk_sample_uniform(uint64_t *rng)
{
    return fake_model_uniform(rng);
}

/* a draw over softmax(logits / T) with uniform u */
static int32_t fake_draw(const float *logits, int32_t vocab, float temperature, double u)
{
    int32_t best = 0;
    for (int32_t v = 1; v < vocab; v++)
        if (logits[v] > logits[best]) best = v;
    double sum = 0.0;
    for (int32_t v = 0; v < vocab; v++) sum += exp((double)(logits[v] - logits[best]) / temperature);
    double acc = 0.0;
    for (int32_t v = 0; v < vocab; v++) {
        acc += exp((double)(logits[v] - logits[best]) / temperature) / sum;
        if (u < acc) return v;
    }
    return best;
}

int32_t wk_sample(const float *logits, int32_t vocab, const struct wk_sampling *sp, uint64_t *rng,
                  float *logprob)
{
    (void)logprob;
    if (sp->temperature <= 0.0f) return wk_argmax(logits, vocab);
    return fake_draw(logits, vocab, sp->temperature, wk_sample_uniform(rng));
}
