/* One forward step of the text model over a batch of sequences: the model code, written against the
 * backend interface (wk_backend.h). */
#include <math.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "kn_rope.h"
#include "mm_log.h"
#include "wk_engine_int.h"

/* MMGW_PROFILE=1: CPU time of the driving thread per kind of operation over every step, logged when the
 * engine closes (meant for --threads 1 runs of a synchronous backend: work done by other threads is not
 * counted). MMGW_PROFILE=decode: wall-clock time per kind over decode steps only (one token per sequence),
 * reported per decoded token: what a multi-threaded batched decode step spends where. */
enum prof_kind {
    P_NORM,
    P_QKV,
    P_INDEX,
    P_ATTN_DENSE,
    P_ATTN_MSA,
    P_OPROJ,
    P_MOE,
    P_MLP,
    P_LOGITS,
    P_OTHER,
    P_N
};
static const char *const prof_names[P_N] = {"norms+rope", "q/k/v+idx", "index nrm", "attn dense", "attn msa",
                                            "o_proj",     "moe",       "dense mlp", "logits",     "other"};
static double prof_t[P_N];
static int64_t prof_tokens;
static int prof_on = -1; /* 0 off, 1 thread CPU time (every step), 2 wall time (decode steps) */
static int prof_step;    /* whether this step is timed */

static double prof_now(void)
{
    struct timespec ts;
    clock_gettime(prof_on == 2 ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define PROF(kind, ...)                                                                                      \
    do {                                                                                                     \
        double t0__ = prof_step ? prof_now() : 0.0;                                                          \
        __VA_ARGS__;                                                                                         \
        if (prof_step) prof_t[kind] += prof_now() - t0__;                                                    \
    } while (0)

static void prof_init(void)
{
    if (prof_on >= 0) return;
    const char *pe = getenv("MMGW_PROFILE");
    prof_on = !pe ? 0 : !strcmp(pe, "1") ? 1 : !strcmp(pe, "decode") ? 2 : 0;
}

void wk_forward_profile_report(void)
{
    if (prof_on < 1) return;
    double tot = 0;
    for (int i = 0; i < P_N; i++) tot += prof_t[i];
    if (tot <= 0) return;
    for (int i = 0; i < P_N; i++) {
        if (prof_on == 2)
            mm_log_info("runtime", "profile (decode, wall): %-10s %8.2f us/token %5.1f%%", prof_names[i],
                        prof_tokens ? prof_t[i] * 1e6 / (double)prof_tokens : 0.0, 100.0 * prof_t[i] / tot);
        else
            mm_log_info("runtime", "profile: %-10s %8.3f s %5.1f%%", prof_names[i], prof_t[i],
                        100.0 * prof_t[i] / tot);
        prof_t[i] = 0; /* one report per engine */
    }
    prof_tokens = 0;
}

#define LOGIT_ROWS 32 /* rows of logits computed per product */

int32_t wk_forward_alloc(struct wk_engine *e, int64_t T, struct mm_err *err)
{
    const struct wk_text_config *t = &e->cfg.text;
    const struct wk_backend_iface *B = e->be.iface;
    void *bc = e->be.ctx;
    struct wk_acts *a = &e->a;
    struct wk_host *hs = &e->hs;
    int64_t H = t->hidden, qd = (int64_t)t->n_heads * t->head_dim, kd = (int64_t)t->n_kv * t->head_dim;
    int64_t inter = t->dense_inter > t->shared_inter ? t->dense_inter : t->shared_inter;
    int has_msa = t->first_msa >= 0;
    a->max_tokens = T;
    a->logits_rows = LOGIT_ROWS;
    a->x = B->alloc(bc, T * H);
    a->h = B->alloc(bc, T * H);
    a->tmp = B->alloc(bc, T * H);
    a->y = B->alloc(bc, T * H);
    a->q = B->alloc(bc, T * qd);
    a->attn = B->alloc(bc, T * qd);
    a->k = B->alloc(bc, T * kd);
    a->v = B->alloc(bc, T * kd);
    a->g = B->alloc(bc, T * inter);
    a->u = B->alloc(bc, T * inter);
    a->cos_t = B->alloc(bc, T * t->rot_dim);
    a->sin_t = B->alloc(bc, T * t->rot_dim);
    a->logits = B->alloc(bc, (int64_t)LOGIT_ROWS * t->vocab_size);
    if (has_msa) {
        a->iq = B->alloc(bc, T * t->idx_heads * t->idx_dim);
        a->ik = B->alloc(bc, T * t->idx_dim);
    }
    hs->ids = malloc(sizeof(int32_t) * (size_t)T);
    hs->seq_of = malloc(sizeof(int32_t) * (size_t)T);
    hs->pos = malloc(sizeof(int64_t) * (size_t)T);
    hs->cos_t = malloc(sizeof(float) * (size_t)(T * t->rot_dim));
    hs->sin_t = malloc(sizeof(float) * (size_t)(T * t->rot_dim));
    hs->media_rows = malloc(sizeof(int64_t) * (size_t)T);
    if (has_msa) hs->sel = malloc(sizeof(int32_t) * (size_t)(T * t->idx_heads * t->topk_blocks));
    if (!a->x || !a->h || !a->tmp || !a->y || !a->q || !a->attn || !a->k || !a->v || !a->g || !a->u ||
        !a->cos_t || !a->sin_t || !a->logits || (has_msa && (!a->iq || !a->ik || !hs->sel)) || !hs->ids ||
        !hs->seq_of || !hs->pos || !hs->cos_t || !hs->sin_t || !hs->media_rows)
        return mm_err_set(err, MM_NOMEM, "out of memory for activations of %lld tokens", (long long)T);
    return MM_OK;
}

void wk_forward_free(struct wk_engine *e)
{
    const struct wk_backend_iface *B = e->be.iface;
    void *bc = e->be.ctx;
    struct wk_acts *a = &e->a;
    float *all[] = {a->x,  a->h,  a->q, a->k, a->v,     a->attn,  a->tmp,   a->y,
                    a->iq, a->ik, a->g, a->u, a->cos_t, a->sin_t, a->logits};
    if (B)
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (all[i]) B->free(bc, all[i]);
    memset(a, 0, sizeof *a);
    struct wk_host *hs = &e->hs;
    free(hs->ids);
    free(hs->seq_of);
    free(hs->pos);
    free(hs->cos_t);
    free(hs->sin_t);
    free(hs->sel);
    free(hs->media_rows);
    free(hs->seq_first);
    free(hs->seq_len);
    free(hs->seq_n);
    free(hs->tables);
    free(hs->old_blocks);
    free(hs->cand_ids);
    free(hs->cand_vals);
    free(hs->cand_pairs);
    memset(hs, 0, sizeof *hs);
}

static int32_t grow_items(struct wk_host *hs, int32_t n, struct mm_err *err)
{
    if (hs->items_cap >= n) return MM_OK;
    int64_t *f = realloc(hs->seq_first, sizeof(int64_t) * (size_t)n);
    if (f) hs->seq_first = f;
    int64_t *l = realloc(hs->seq_len, sizeof(int64_t) * (size_t)n);
    if (l) hs->seq_len = l;
    int32_t *s = realloc(hs->seq_n, sizeof(int32_t) * (size_t)n);
    if (s) hs->seq_n = s;
    const int32_t **t = realloc(hs->tables, sizeof(int32_t *) * (size_t)n);
    if (t) hs->tables = t;
    int64_t *o = realloc(hs->old_blocks, sizeof(int64_t) * (size_t)n);
    if (o) hs->old_blocks = o;
    if (!f || !l || !s || !t || !o) return mm_err_set(err, MM_NOMEM, "out of memory");
    hs->items_cap = n;
    return MM_OK;
}

static int is_media_token(const struct wk_engine *e, int32_t id)
{
    return id == e->cfg.image_token_id || id == e->cfg.video_token_id;
}

static int32_t check_spans(const struct wk_engine *e, const struct wk_step_item *it, int32_t j,
                           struct mm_err *err)
{
    if (it->n_spans < 0 || !it->spans)
        return mm_err_set(err, MM_INVALID, "forward: item %d: %d spans at %p", j, it->n_spans,
                          (const void *)it->spans);
    if (it->use_embed) return mm_err_set(err, MM_INVALID, "forward: item %d has both spans and use_embed", j);
    int64_t end = 0; /* the previous span's end: spans come in order and apart */
    for (int32_t k = 0; k < it->n_spans; k++) {
        const struct wk_embed_span *sp = &it->spans[k];
        if (sp->at < end || sp->n < 1 || (int64_t)sp->at + sp->n > it->n || !sp->rows)
            return mm_err_set(err, MM_INVALID, "forward: item %d: span %d (%d at %d) of %d positions", j, k,
                              sp->n, sp->at, it->n);
        if (sp->kept && !e->be.iface->copy)
            return mm_err_set(err, MM_INVALID,
                              "forward: item %d: span %d is kept but the %s backend keeps none", j, k,
                              e->be.iface->name);
        end = (int64_t)sp->at + sp->n;
    }
    return MM_OK;
}

static int32_t validate(struct wk_engine *e, struct wk_step_item *items, int32_t n_items, int64_t *total,
                        struct mm_err *err)
{
    const struct wk_text_config *t = &e->cfg.text;
    int32_t rc = MM_OK;
    *total = 0;
    if (n_items <= 0 || !items) return mm_err_set(err, MM_INVALID, "forward: no items");
    int32_t marked = 0;
    for (int32_t j = 0; j < n_items && !rc; j++, marked++) {
        struct wk_step_item *it = &items[j];
        if (!it->seq || !it->ids || it->n <= 0) {
            rc = mm_err_set(err, MM_INVALID, "forward: item %d has no sequence or no tokens", j);
            break;
        }
        if (it->seq->in_step) {
            rc = mm_err_set(err, MM_INVALID, "forward: item %d repeats a sequence of this step", j);
            break;
        }
        it->seq->in_step = 1;
        if (it->seq->len + it->n > t->max_pos)
            rc = mm_err_set(err, MM_TOO_LARGE, "forward: item %d: %lld tokens exceed the %lld-token context",
                            j, (long long)(it->seq->len + it->n), (long long)t->max_pos);
        else if (it->logits_mode != WK_LOGITS_NONE && it->logits_mode != WK_LOGITS_LAST &&
                 it->logits_mode != WK_LOGITS_ALL && it->logits_mode != WK_LOGITS_ARGMAX &&
                 it->logits_mode != WK_LOGITS_CANDS)
            rc = mm_err_set(err, MM_INVALID, "forward: item %d: logits_mode %d", j, it->logits_mode);
        else if (it->logits_mode == WK_LOGITS_CANDS &&
                 (!it->cands || it->cands->k < 1 || !(it->cands->temperature > 0.0f) || it->cands->cap < 1 ||
                  !it->cands->ids || !it->cands->logits))
            rc = mm_err_set(err, MM_INVALID, "forward: item %d: bad candidates request", j);
        else if ((it->logits_mode == WK_LOGITS_LAST || it->logits_mode == WK_LOGITS_ALL ||
                  it->logits_mode == WK_LOGITS_CANDS) &&
                 !it->logits)
            rc = mm_err_set(err, MM_INVALID, "forward: item %d asks for logits without a buffer", j);
        else if (it->use_embed && !it->embeds)
            rc = mm_err_set(err, MM_INVALID, "forward: item %d has use_embed without embeds", j);
        else if (it->n_spans)
            rc = check_spans(e, it, j, err);
        else if (it->sel && it->sel_k < t->topk_blocks)
            rc = mm_err_set(err, MM_INVALID, "forward: item %d: sel_k %d < topk_blocks %d", j, it->sel_k,
                            t->topk_blocks);
        for (int32_t i = 0; !rc && i < it->n; i++)
            if (it->ids[i] < 0 || it->ids[i] >= t->vocab_size)
                rc = mm_err_set(err, MM_INVALID,
                                "forward: item %d: token %d at %d is outside the vocabulary of %d", j,
                                it->ids[i], i, t->vocab_size);
        *total += it->n;
    }
    for (int32_t j = 0; j < marked; j++)
        if (items[j].seq) items[j].seq->in_step = 0;
    if (!rc && *total > e->a.max_tokens)
        rc = mm_err_set(err, MM_TOO_LARGE, "forward: %lld tokens in one step (max_batch_tokens %lld)",
                        (long long)*total, (long long)e->a.max_tokens);
    return rc;
}

/* Take the pages the items need; all or nothing. */
static int32_t take_pages(struct wk_engine *e, struct wk_step_item *items, int32_t n_items,
                          int64_t *old_blocks, struct mm_err *err)
{
    int32_t B = e->cfg.text.block;
    int64_t need = 0;
    for (int32_t j = 0; j < n_items; j++) {
        struct wk_seq *s = items[j].seq;
        int64_t nb = (s->len + items[j].n + B - 1) / B;
        if (nb > s->bt_cap) {
            int64_t cap = s->bt_cap ? s->bt_cap : 16;
            while (cap < nb) cap *= 2;
            int32_t *bt = realloc(s->bt, sizeof(int32_t) * (size_t)cap);
            if (!bt) return mm_err_set(err, MM_NOMEM, "out of memory for a block table");
            s->bt = bt;
            s->bt_cap = cap;
        }
        need += nb - s->n_blocks;
    }
    if (need > wk_cache_free_count(e->cache))
        return mm_err_set(err, MM_EXHAUSTED, "forward: %lld pages needed, %lld free", (long long)need,
                          (long long)wk_cache_free_count(e->cache));
    for (int32_t j = 0; j < n_items; j++) {
        struct wk_seq *s = items[j].seq;
        old_blocks[j] = s->n_blocks;
        int64_t nb = (s->len + items[j].n + B - 1) / B;
        while (s->n_blocks < nb) s->bt[s->n_blocks++] = wk_cache_take(e->cache);
    }
    return MM_OK;
}

static void release_new_pages(struct wk_engine *e, struct wk_step_item *items, int32_t n_items,
                              const int64_t *old_blocks)
{
    for (int32_t j = 0; j < n_items; j++) {
        struct wk_seq *s = items[j].seq;
        while (s->n_blocks > old_blocks[j]) wk_cache_unref(e->cache, s->bt[--s->n_blocks]);
    }
}

/* After a step: remember the new tokens and publish the pages they filled. */
static void commit(struct wk_engine *e, struct wk_step_item *it)
{
    struct wk_seq *s = it->seq;
    int32_t B = e->cfg.text.block;
    int32_t sp = 0; /* the first span that does not end before position i */
    for (int32_t i = 0; i < it->n; i++) {
        int64_t p = s->len + i;
        int32_t slot = (int32_t)(p % B);
        s->cur_ids[slot] = it->ids[i];
        while (sp < it->n_spans && it->spans[sp].at + it->spans[sp].n <= i) sp++;
        if (is_media_token(e, it->ids[i]) || (it->use_embed && it->use_embed[i]) ||
            (sp < it->n_spans && it->spans[sp].at <= i))
            s->cur_media = 1;
        if (slot != B - 1) continue;
        if (!s->no_publish && s->cur_media && s->media_hash == 0) s->no_publish = 1;
        if (!s->no_publish) {
            uint64_t key = wk_cache_key(s->last_key, s->cur_ids, B, s->cur_media ? s->media_hash : 0);
            wk_cache_publish(e->cache, s->bt[p / B], key, s->last_key, s->cur_ids);
            s->last_key = key;
        }
        s->cur_media = 0;
    }
    s->len += it->n;
}

/* The media embeddings into the step's rows: one set_rows per run of consecutive media positions of an item
 * (an image is one run), straight from the item's rows: a gathered copy cost a pass over every image's
 * embeddings (14 MB for a 576-token image at M3's width) on the step's thread. A run's batch rows are
 * consecutive; each run has its own stretch of hs->media_rows (T entries: every row at most once). Spans of
 * kept embeddings (in the backend's memory) are one copy each into their consecutive rows of x. */
static void set_run(struct wk_engine *e, int64_t *k, int64_t row, const float *data, int64_t n)
{
    const struct wk_backend_iface *B = e->be.iface;
    for (int64_t r = 0; r < n; r++) e->hs.media_rows[*k + r] = row + r;
    B->set_rows(e->be.ctx, e->a.x, e->cfg.text.hidden, e->hs.media_rows + *k, data, n);
    *k += n;
}

static void set_media(struct wk_engine *e, const struct wk_step_item *items, int32_t n_items)
{
    const struct wk_backend_iface *B = e->be.iface;
    const int64_t H = e->cfg.text.hidden;
    int64_t row0 = 0, k = 0; /* the item's first batch row; the next free entry of hs->media_rows */
    for (int32_t j = 0; j < n_items; row0 += items[j].n, j++) {
        const struct wk_step_item *it = &items[j];
        for (int32_t s = 0; s < it->n_spans; s++) {
            const struct wk_embed_span *sp = &it->spans[s];
            if (sp->kept)
                B->copy(e->be.ctx, e->a.x + (row0 + sp->at) * H, sp->rows, sp->n * H);
            else
                set_run(e, &k, row0 + sp->at, sp->rows, sp->n);
        }
        const uint8_t *use = it->use_embed;
        if (!use) continue;
        for (int32_t i = 0; i < it->n;) {
            if (!use[i]) {
                i++;
                continue;
            }
            int32_t i1 = i;
            while (i1 < it->n && use[i1]) i1++;
            set_run(e, &k, row0 + i, it->embeds + (int64_t)i * H, i1 - i);
            i = i1;
        }
    }
}

/* Products of several weights with one input: one backend step when the backend offers it. */
static void lin_n(struct wk_engine *e, int32_t n_w, const struct wk_weight *const *w, const float *x,
                  int64_t T, float *const *y)
{
    const struct wk_backend_iface *B = e->be.iface;
    if (B->linear_multi)
        B->linear_multi(e->be.ctx, n_w, w, x, T, y);
    else
        for (int32_t i = 0; i < n_w; i++) B->linear(e->be.ctx, w[i], NULL, x, T, y[i]);
}

/* The residual add and the RMSNorm after it: one backend step when the backend offers it. */
static void add_norm(struct wk_engine *e, float *y, const float *x, const struct wk_weight *w, int64_t T,
                     int32_t H, float eps, float *out)
{
    const struct wk_backend_iface *B = e->be.iface;
    if (B->add_rmsnorm) {
        B->add_rmsnorm(e->be.ctx, y, x, w, T, H, eps, out);
    } else {
        B->add(e->be.ctx, y, x, T * H);
        B->rmsnorm(e->be.ctx, y, w, T, H, eps, out);
    }
}

static void run_layers(struct wk_engine *e, int64_t T, const struct wk_sel_out *sel)
{
    const struct wk_text_config *t = &e->cfg.text;
    const struct wk_backend_iface *B = e->be.iface;
    void *bc = e->be.ctx;
    struct wk_acts *a = &e->a;
    int32_t H = t->hidden, nh = t->n_heads, nkv = t->n_kv, hd = t->head_dim, rot = t->rot_dim;
    float eps = t->rms_eps, scale = 1.0f / sqrtf((float)hd);
    struct wk_msa_params mp = {t->idx_heads, t->idx_dim, t->topk_blocks, t->local_blocks};
    int32_t irot =
        rot < t->idx_dim ? rot : t->idx_dim; /* the reference truncates the table to the index dim */
    for (int32_t l = 0; l < t->n_layers; l++) {
        const struct wk_layer_w *w = &e->w.layers[l];
        /* later layers' input norm: the previous layer's last residual add did it */
        if (l == 0) PROF(P_NORM, B->rmsnorm(bc, a->x, w->in_norm, T, H, eps, a->h));
        PROF(P_QKV, {
            /* every projection of the normed input in one step (the index ones of an MSA layer too) */
            const struct wk_weight *pw[5] = {w->q, w->k, w->v, w->iq, w->ik};
            float *py[5] = {a->q, a->k, a->v, a->iq, a->ik};
            lin_n(e, t->layer_sparse[l] ? 5 : 3, pw, a->h, T, py);
        });
        const struct wk_sel_out *lsel = l == t->first_msa ? sel : NULL;
        if (B->attn_layer) {
            /* norms, RoPE, cache writes and attention in one backend step (per-token work in parallel) */
            struct wk_attn_layer al = {.layer = l,
                                       .q = a->q,
                                       .k = a->k,
                                       .v = a->v,
                                       .q_norm = w->q_norm,
                                       .k_norm = w->k_norm,
                                       .cos_t = a->cos_t,
                                       .sin_t = a->sin_t,
                                       .table_stride = rot,
                                       .rot = rot,
                                       .irot = irot,
                                       .n_heads = nh,
                                       .eps = eps,
                                       .scale = scale,
                                       .sel = lsel,
                                       .out = a->attn};
            if (t->layer_sparse[l]) {
                al.iq = a->iq;
                al.ik = a->ik;
                al.iq_norm = w->iq_norm;
                al.ik_norm = w->ik_norm;
                al.msa = &mp;
            }
            PROF(t->layer_sparse[l] ? P_ATTN_MSA : P_ATTN_DENSE, B->attn_layer(bc, &al));
        } else {
            PROF(P_NORM, {
                B->head_rmsnorm(bc, a->q, T, nh, hd, w->q_norm, eps);
                B->head_rmsnorm(bc, a->k, T, nkv, hd, w->k_norm, eps);
                B->rope(bc, a->q, T, nh, hd, a->cos_t, a->sin_t, rot, rot);
                B->rope(bc, a->k, T, nkv, hd, a->cos_t, a->sin_t, rot, rot);
            });
            PROF(P_OTHER, B->kv_write(bc, l, a->k, a->v));
            if (t->layer_sparse[l]) {
                PROF(P_INDEX, {
                    B->head_rmsnorm(bc, a->iq, T, t->idx_heads, t->idx_dim, w->iq_norm, eps);
                    B->head_rmsnorm(bc, a->ik, T, 1, t->idx_dim, w->ik_norm, eps);
                    B->rope(bc, a->iq, T, t->idx_heads, t->idx_dim, a->cos_t, a->sin_t, rot, irot);
                    B->rope(bc, a->ik, T, 1, t->idx_dim, a->cos_t, a->sin_t, rot, irot);
                    B->idx_write(bc, l, a->ik);
                });
                PROF(P_ATTN_MSA, B->attn_msa(bc, l, a->q, a->iq, nh, scale, &mp, lsel, a->attn));
            } else {
                PROF(P_ATTN_DENSE, B->attn_dense(bc, l, a->q, nh, scale, a->attn));
            }
        }
        PROF(P_OPROJ, B->linear(bc, w->o, NULL, a->attn, T, a->tmp));
        PROF(P_NORM, add_norm(e, a->x, a->tmp, w->post_norm, T, H, eps, a->h));
        if (t->layer_moe[l]) {
            struct wk_moe m = {w->router,
                               w->router_bias,
                               (const struct wk_weight *const *)w->w1,
                               (const struct wk_weight *const *)w->w3,
                               (const struct wk_weight *const *)w->w2,
                               t->n_experts,
                               t->topk_experts,
                               H,
                               t->expert_inter,
                               t->routed_scale,
                               t->swiglu_alpha,
                               t->swiglu_limit};
            PROF(P_MOE, {
                B->moe(bc, &m, a->h, T, a->tmp);
                if (w->sh_gate) {
                    int64_t S = t->shared_inter;
                    const struct wk_weight *pw[2] = {w->sh_gate, w->sh_up};
                    float *py[2] = {a->g, a->u};
                    lin_n(e, 2, pw, a->h, T, py);
                    B->swiglu(bc, a->g, a->u, T * S, t->swiglu_alpha, t->swiglu_limit, a->g);
                    B->linear(bc, w->sh_down, NULL, a->g, T, a->y);
                    B->add(bc, a->tmp, a->y, T * H);
                }
            });
        } else {
            PROF(P_MLP, {
                int64_t I = t->dense_inter;
                const struct wk_weight *pw[2] = {w->gate, w->up};
                float *py[2] = {a->g, a->u};
                lin_n(e, 2, pw, a->h, T, py);
                B->swiglu(bc, a->g, a->u, T * I, t->swiglu_alpha, t->swiglu_limit, a->g);
                B->linear(bc, w->down, NULL, a->g, T, a->tmp);
            });
        }
        const struct wk_weight *next = l + 1 < t->n_layers ? e->w.layers[l + 1].in_norm : e->w.final_norm;
        PROF(P_NORM, add_norm(e, a->x, a->tmp, next, T, H, eps, a->h));
    }
    if (t->n_layers == 0) PROF(P_NORM, B->rmsnorm(bc, a->x, e->w.final_norm, T, H, eps, a->h));
}

/* Logits for the rows the items asked for, up to LOGIT_ROWS consecutive rows per product; each row goes to
 * dst (its logits) or to tok (its greedy token). */
struct logit_run {
    int64_t first;
    int32_t n;
    float *dst[LOGIT_ROWS];
    int32_t *tok[LOGIT_ROWS];
    struct wk_cands *cands[LOGIT_ROWS];
};

#define CANDS_CAP 1024 /* candidates per row the backend returns; a row with more is downloaded whole */

static int cmp_id(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The candidates of the run's cands rows into their wk_cands (ids ascending), or the token the backend drew;
 * a row whose candidates do not fit (or a backend without topk_rows) keeps its dst, so that its whole row
 * is downloaded (n = -1). */
static void run_cands(struct wk_engine *e, struct logit_run *r)
{
    const struct wk_backend_iface *B = e->be.iface;
    const int32_t V = e->cfg.text.vocab_size;
    struct mm_cand_req req[LOGIT_ROWS];
    int32_t counts[LOGIT_ROWS];
    float lse[LOGIT_ROWS];
    memset(req, 0, sizeof req);
    for (int32_t i = 0; i < r->n; i++) {
        const struct wk_cands *c = r->cands[i];
        if (!c) continue;
        req[i] = (struct mm_cand_req){.k = c->k,
                                      .t = c->temperature,
                                      .top_p = c->top_p,
                                      .min_p = c->min_p,
                                      .draw = c->draw && c->k == INT32_MAX,
                                      .flags = c->flags & (MM_CANDS_EXACT | MM_CANDS_LSE),
                                      .u = c->u,
                                      .n_top = c->k == INT32_MAX && c->n_top > 0 ? c->n_top : 0};
        r->cands[i]->n = -1;
    }
    struct wk_host *hs = &e->hs;
    if (B->topk_rows && !hs->cand_pairs) { /* once: a decode step must not map and unmap 256 KB */
        hs->cand_ids = hs->cand_ids ? hs->cand_ids : malloc(sizeof(int32_t) * LOGIT_ROWS * CANDS_CAP);
        hs->cand_vals = hs->cand_vals ? hs->cand_vals : malloc(sizeof(float) * LOGIT_ROWS * CANDS_CAP);
        if (hs->cand_ids && hs->cand_vals) hs->cand_pairs = malloc(sizeof(int64_t) * CANDS_CAP);
    }
    int32_t *ids = hs->cand_ids;
    float *vals = hs->cand_vals;
    int64_t *pairs = hs->cand_pairs;
    if (B->topk_rows && pairs) {
        B->topk_rows(e->be.ctx, e->a.logits, r->n, V, req, CANDS_CAP, counts, ids, vals, lse);
        for (int32_t i = 0; i < r->n; i++) {
            struct wk_cands *c = r->cands[i];
            if (!c) continue;
            if (req[i].flags & MM_CANDS_LSE) c->lse = lse[i];
            if (counts[i] == MM_CANDS_DRAWN && req[i].draw) {
                const int32_t tok = ids[i * CANDS_CAP];
                c->ids[0] = tok >= 0 && tok < V ? tok : 0;
                c->logits[0] = vals[i * CANDS_CAP];
                c->n_top_out = 0;
                /* the top list after the token; one that filled every slot (ties by the thousand) may be cut,
                 * and one longer than the caller's room is: then the whole row, as for candidates that do
                 * not fit (the backends keep the logits when they draw for a top list) */
                int32_t j = 1;
                for (; req[i].n_top > 0 && j < CANDS_CAP; j++) {
                    const int32_t id = ids[i * CANDS_CAP + j];
                    if (id < 0 || id >= V || j >= c->cap) break;
                    c->ids[j] = id, c->logits[j] = vals[i * CANDS_CAP + j], c->n_top_out++;
                }
                if (req[i].n_top > 0 && (j == CANDS_CAP || (j >= c->cap && ids[i * CANDS_CAP + j] >= 0))) {
                    c->n_top_out = 0;
                    continue; /* n stays -1: the row comes back whole */
                }
                c->n = -2;
                r->dst[i] = NULL;
                continue;
            }
            if (counts[i] < 0 || counts[i] > CANDS_CAP || counts[i] > c->cap) continue;
            /* ascending ids (the kernel's order is arbitrary): id in the high bits, the slot in the low */
            for (int32_t j = 0; j < counts[i]; j++) pairs[j] = (int64_t)ids[i * CANDS_CAP + j] << 16 | j;
            qsort(pairs, (size_t)counts[i], sizeof pairs[0], cmp_id);
            for (int32_t j = 0; j < counts[i]; j++) {
                const int32_t slot = (int32_t)(pairs[j] & 0xffff);
                c->ids[j] = ids[i * CANDS_CAP + slot];
                c->logits[j] = vals[i * CANDS_CAP + slot];
            }
            c->n = counts[i];
            r->dst[i] = NULL; /* nothing more to download for this row */
        }
    }
}

/* The greedy tokens of the run's rows [0, n) (only the tok rows are used) */
static void run_argmax(struct wk_engine *e, const struct logit_run *r, int32_t *ids)
{
    const struct wk_backend_iface *B = e->be.iface;
    const int32_t V = e->cfg.text.vocab_size;
    if (B->argmax_rows) {
        B->argmax_rows(e->be.ctx, e->a.logits, r->n, V, ids);
        return;
    }
    float *row = malloc(sizeof(float) * (size_t)V);
    for (int32_t i = 0; i < r->n; i++) {
        ids[i] = 0;
        if (!r->tok[i] || !row) continue;
        B->download(e->be.ctx, row, e->a.logits + (int64_t)i * V, V);
        ids[i] = wk_argmax(row, V);
    }
    free(row);
}

static void flush_logits(struct wk_engine *e, struct logit_run *r)
{
    const struct wk_backend_iface *B = e->be.iface;
    int32_t H = e->cfg.text.hidden, V = e->cfg.text.vocab_size;
    if (!r->n) return;
    B->linear(e->be.ctx, e->w.lm_head, NULL, e->a.h + r->first * H, r->n, e->a.logits);
    int32_t n_tok = 0, n_cands = 0;
    for (int32_t i = 0; i < r->n; i++) n_tok += r->tok[i] != NULL, n_cands += r->cands[i] != NULL;
    if (n_cands) run_cands(e, r);
    if (n_tok) {
        int32_t ids[LOGIT_ROWS];
        run_argmax(e, r, ids);
        for (int32_t i = 0; i < r->n; i++)
            if (r->tok[i]) *r->tok[i] = ids[i];
    }
    /* the logits rows, in runs of consecutive rows (all of them when no row wants a token) */
    for (int32_t i = 0; i < r->n;) {
        if (!r->dst[i]) {
            i++;
            continue;
        }
        int32_t k = i;
        while (k < r->n && r->dst[k]) k++;
        const float *src = e->a.logits + (int64_t)i * V;
        if (B->download_rows && k - i > 1)
            B->download_rows(e->be.ctx, r->dst + i, src, k - i, V);
        else
            for (int32_t j = i; j < k; j++) B->download(e->be.ctx, r->dst[j], src + (int64_t)(j - i) * V, V);
        i = k;
    }
    r->n = 0;
}

static void compute_logits(struct wk_engine *e, struct wk_step_item *items, int32_t n_items)
{
    int32_t V = e->cfg.text.vocab_size;
    struct logit_run run = {0, 0, {0}, {0}, {0}};
    int64_t first = 0;
    for (int32_t j = 0; j < n_items; j++) {
        struct wk_step_item *it = &items[j];
        for (int32_t i = 0; i < it->n; i++) {
            float *d = NULL;
            int32_t *tok = NULL;
            if (it->logits_mode == WK_LOGITS_ALL)
                d = it->logits + (int64_t)i * V;
            else if (it->logits_mode == WK_LOGITS_LAST && i == it->n - 1)
                d = it->logits;
            else if (it->logits_mode == WK_LOGITS_ARGMAX && i == it->n - 1)
                tok = &it->token;
            else if (it->logits_mode == WK_LOGITS_CANDS && i == it->n - 1)
                d = it->logits; /* the fallback; run_cands clears it when the candidates fit */
            if (!d && !tok) continue;
            int64_t r = first + i;
            if (run.n && (run.first + run.n != r || run.n == LOGIT_ROWS)) flush_logits(e, &run);
            if (!run.n) run.first = r;
            run.dst[run.n] = d;
            run.cands[run.n] = it->logits_mode == WK_LOGITS_CANDS ? it->cands : NULL;
            run.tok[run.n++] = tok;
        }
        first += it->n;
    }
    flush_logits(e, &run);
}

static void compute_logits_timed(struct wk_engine *e, struct wk_step_item *items, int32_t n_items)
{
    PROF(P_LOGITS, compute_logits(e, items, n_items));
}

int32_t wk_forward_run(struct wk_engine *e, struct wk_step_item *items, int32_t n_items, struct mm_err *err)
{
    const struct wk_text_config *t = &e->cfg.text;
    struct wk_host *hs = &e->hs;
    const struct wk_backend_iface *B = e->be.iface;
    void *bc = e->be.ctx;
    int64_t T;
    int32_t rc = validate(e, items, n_items, &T, err);
    if (rc) return rc;
    if ((rc = grow_items(hs, n_items, err))) return rc;
    int64_t *old_blocks = hs->old_blocks;
    if ((rc = take_pages(e, items, n_items, old_blocks, err))) return rc;

    int64_t row = 0, max_pos = 0;
    int want_sel = 0;
    for (int32_t j = 0; j < n_items; j++) {
        struct wk_step_item *it = &items[j];
        hs->seq_first[j] = row;
        hs->seq_n[j] = it->n;
        hs->seq_len[j] = it->seq->len + it->n;
        hs->tables[j] = it->seq->bt;
        for (int32_t i = 0; i < it->n; i++, row++) {
            hs->ids[row] = it->ids[i];
            hs->pos[row] = it->seq->len + i;
            hs->seq_of[row] = j;
        }
        if (hs->seq_len[j] - 1 > max_pos) max_pos = hs->seq_len[j] - 1;
        want_sel |= it->sel != NULL;
    }
    prof_init();
    prof_step = prof_on == 1 || (prof_on == 2 && T == n_items);
    if (prof_on == 2 && prof_step) prof_tokens += T;
    struct wk_batch batch = {T,         n_items,     hs->ids,    hs->pos, hs->seq_of, hs->seq_first,
                             hs->seq_n, hs->seq_len, hs->tables, max_pos};
    kn_rope_text_table(hs->pos, T, t->rot_dim, t->rope_theta, hs->cos_t, hs->sin_t);
    if ((rc = B->batch_begin(bc, &batch, err))) goto fail;
    B->upload(bc, e->a.cos_t, hs->cos_t, T * t->rot_dim);
    B->upload(bc, e->a.sin_t, hs->sin_t, T * t->rot_dim);
    B->embed(bc, e->w.embed, e->a.x, t->hidden);
    set_media(e, items, n_items);
    struct wk_sel_out sel = {want_sel && t->first_msa >= 0 ? hs->sel : NULL, t->topk_blocks};
    run_layers(e, T, &sel);
    compute_logits_timed(e, items, n_items);
    if ((rc = B->batch_end(bc, err))) goto fail;

    for (int32_t j = 0; j < n_items; j++) {
        struct wk_step_item *it = &items[j];
        if (!it->sel) continue;
        for (int32_t g = 0; g < t->idx_heads; g++)
            for (int32_t i = 0; i < it->n; i++) {
                int32_t *d = it->sel + ((int64_t)g * it->n + i) * it->sel_k;
                const int32_t *s =
                    sel.sel ? hs->sel + ((int64_t)g * T + hs->seq_first[j] + i) * t->topk_blocks : NULL;
                for (int32_t x = 0; x < it->sel_k; x++) d[x] = s && x < t->topk_blocks ? s[x] : -1;
            }
    }
    for (int32_t j = 0; j < n_items; j++) commit(e, &items[j]);
    return MM_OK;
fail:
    release_new_pages(e, items, n_items, old_blocks);
    return rc;
}
