/* The engine: lifecycle (config, weights, backend, cache pool), sequences and pages (wk_engine.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "mm_dtype.h"
#include "mm_log.h"
#include "wk_engine_int.h"
#ifdef MMGW_HAVE_CUDA_BACKEND
#include "wk_backend_cuda.h"
#endif

static const char *dtype_label(int32_t dt)
{
    switch (dt) {
    case MM_DT_BF16:
        return "bf16";
    case MM_DT_F16:
        return "f16";
    case MM_DT_F32:
        return "f32";
    case MM_DT_F8_E4M3:
        return "fp8_e4m3";
    default:
        return "unknown";
    }
}

/* eos ids from generation_config.json when config.json has none */
static void read_generation_eos(const char *dir, struct wk_text_config *t)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    if (!root) return;
    json_t *eos = json_object_get(root, "eos_token_id");
    if (json_is_integer(eos)) t->eos[t->n_eos++] = (int32_t)json_integer_value(eos);
    for (size_t i = 0; json_is_array(eos) && i < json_array_size(eos) && t->n_eos < 8; i++)
        if (json_is_integer(json_array_get(eos, i)))
            t->eos[t->n_eos++] = (int32_t)json_integer_value(json_array_get(eos, i));
    json_decref(root);
}

/* The backend knows its cache's element types (an fp16 or bf16 cache takes half of fp32); one that does not
 * say stores fp32. */
static int64_t bytes_per_page(const struct wk_be *be, const struct wk_cache_geom *g)
{
    if (be->iface->cache_page_bytes) return be->iface->cache_page_bytes(be->ctx, g);
    int64_t b = 0;
    for (int32_t l = 0; l < g->n_layers; l++) {
        b += 2LL * g->block * g->n_kv * g->head_dim * (int64_t)sizeof(float);
        if (g->layer_sparse[l]) b += (int64_t)g->block * g->idx_dim * (int64_t)sizeof(float);
    }
    return b;
}

static int64_t auto_pages(const struct wk_config *c, int64_t bpp)
{
    /* room for 256K tokens, but never more than a quarter of the machine's memory */
    int64_t pages = ((int64_t)262144 + c->text.block - 1) / c->text.block;
    long ps = sysconf(_SC_PAGESIZE), np = sysconf(_SC_PHYS_PAGES);
    if (ps > 0 && np > 0) {
        int64_t cap = (int64_t)ps * np / 4 / bpp;
        if (cap < pages) pages = cap;
    }
    return pages < 16 ? 16 : pages;
}

int32_t wk_engine_open(const char *model_dir, const struct wk_engine_opts *opts, struct wk_engine **out,
                       struct mm_err *err)
{
    *out = NULL;
    struct wk_engine_opts o = {0};
    if (opts) o = *opts;
    struct wk_engine *e = calloc(1, sizeof *e);
    if (!e) return mm_err_set(err, MM_NOMEM, "out of memory");
    char path[4096];
    struct wk_ckpt *ck = NULL;
    int32_t rc;
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    if ((rc = wk_config_load(path, &e->cfg, err))) goto fail;
    if (e->cfg.text.n_eos == 0) read_generation_eos(model_dir, &e->cfg.text);
    if (o.backend == WK_BACKEND_CUDA) {
#ifdef MMGW_HAVE_CUDA_BACKEND
        rc = wk_backend_cuda_create(&e->be, err);
#else
        rc = mm_err_set(err, MM_UNSUPPORTED, "this build has no CUDA backend");
#endif
        if (rc) goto fail;
    } else if (o.backend != WK_BACKEND_CPU) {
        rc = mm_err_set(err, MM_INVALID, "unknown backend %d", o.backend);
        goto fail;
    } else if ((rc = wk_backend_cpu_create(o.threads, &e->be, err))) {
        goto fail;
    }
    if ((rc = wk_ckpt_open(model_dir, e->cfg.fp8_block, &ck, err))) goto fail;
    if ((rc = wk_model_load(&e->cfg, ck, &e->be, &e->w, err))) goto fail;
    wk_ckpt_close(ck); /* the backend holds its own copy of every weight */
    ck = NULL;

    const struct wk_text_config *t = &e->cfg.text;
    struct wk_cache_geom g = {0, t->block, t->n_layers, t->layer_sparse, t->n_kv, t->head_dim, t->idx_dim};
    int64_t bpp = bytes_per_page(&e->be, &g);
    if (bpp <= 0) {
        rc = mm_err_set(err, MM_ERROR, "backend %s: %lld bytes per cache page", e->be.iface->name,
                        (long long)bpp);
        goto fail;
    }
    int64_t pages = o.cache_pages > 0   ? o.cache_pages
                    : o.cache_bytes > 0 ? o.cache_bytes / bpp
                                        : auto_pages(&e->cfg, bpp);
    if (pages < 1) pages = 1;
    e->cache = wk_cache_create(pages, t->block);
    if (!e->cache) {
        rc = mm_err_set(err, MM_NOMEM, "out of memory for a pool of %lld pages", (long long)pages);
        goto fail;
    }
    g.n_pages = pages;
    if ((rc = e->be.iface->cache_init(e->be.ctx, &g, err))) goto fail;
    if ((rc = wk_forward_alloc(e, o.max_batch_tokens > 0 ? o.max_batch_tokens : 8192, err))) goto fail;

    struct wk_model_info *mi = &e->info;
    /* name: the directory's last component, trailing slashes ignored */
    char dirbuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", model_dir);
    size_t dl = strlen(dirbuf);
    while (dl > 1 && dirbuf[dl - 1] == '/') dirbuf[--dl] = '\0';
    const char *base = strrchr(dirbuf, '/');
    snprintf(mi->name, sizeof mi->name, "%.127s", base && base[1] ? base + 1 : dirbuf);
    snprintf(mi->model_type, sizeof mi->model_type, "%.63s",
             e->cfg.model_type[0] ? e->cfg.model_type : "minimax_m3_vl");
    snprintf(mi->dtype, sizeof mi->dtype, "%s", dtype_label(e->w.src_dtype));
    mi->vocab_size = t->vocab_size;
    mi->hidden_size = t->hidden;
    mi->max_context = t->max_pos;
    mi->block_size = t->block;
    mi->n_layers = t->n_layers;
    mi->first_msa_layer = t->first_msa;
    mi->n_kv_groups = t->n_kv;
    mi->topk_blocks = t->topk_blocks;
    mi->image_token_id = e->cfg.image_token_id;
    mi->video_token_id = e->cfg.video_token_id;
    mi->n_eos = t->n_eos;
    memcpy(mi->eos_ids, t->eos, sizeof mi->eos_ids);
    mi->pages_total = pages;
    mi->n_index_heads = t->idx_heads;
    mi->local_blocks = t->local_blocks;
    mi->bytes_per_page = bpp;
    /* what the vision tower makes of a grid (wk_vision.c): one embedding per merge x merge patches */
    mi->merge_factor = e->w.has_vision ? e->cfg.vision.merge * e->cfg.vision.merge : 0;
    e->threads = o.threads;
    e->keep_cap = WK_MEDIA_KEEP_DEFAULT;
    mm_log_info("runtime",
                "loaded %s: %d layers (first MSA %d), %.1f MiB of weights, %lld cache pages of %d tokens "
                "(%.1f KiB each)",
                model_dir, t->n_layers, t->first_msa, (double)e->w.bytes / 1048576.0, (long long)pages,
                t->block, (double)bpp / 1024.0);
    *out = e;
    return MM_OK;
fail:
    wk_ckpt_close(ck);
    wk_engine_close(e);
    return rc;
}

void wk_engine_close(struct wk_engine *e)
{
    if (!e) return;
    while (e->seqs) wk_seq_free(e, e->seqs);
    wk_forward_profile_report();
    if (e->has_venc) {
        e->venc.iface->destroy(e->venc.ctx);
        pthread_mutex_destroy(&e->venc_mu);
    }
    if (e->be.iface) {
        wk_forward_free(e);
        wk_model_free(&e->be, &e->w);
        e->be.iface->destroy(e->be.ctx);
    }
    wk_cache_destroy(e->cache);
    free(e);
}

const struct wk_model_info *wk_engine_info(const struct wk_engine *e)
{
    return &e->info;
}

int32_t wk_engine_encode_media(struct wk_engine *e, const struct wk_media *m, float **embeds,
                               int64_t *n_tokens, struct mm_err *err)
{
    return wk_engine_encode_media_cancellable(e, m, NULL, embeds, n_tokens, err);
}

/* An encode on the vision context when there is one (encodes serialized among themselves), else on the
 * engine's own; keep as wk_vision_encode_on. */
static int32_t encode(struct wk_engine *e, const struct wk_media *m, const int32_t *cancel, int32_t keep,
                      float **embeds, int64_t *n_tokens, struct mm_err *err)
{
    if (!e->has_venc) return wk_vision_encode_on(e, &e->be, m, cancel, keep, embeds, n_tokens, err);
    pthread_mutex_lock(&e->venc_mu);
    int32_t rc = wk_vision_encode_on(e, &e->venc, m, cancel, keep, embeds, n_tokens, err);
    pthread_mutex_unlock(&e->venc_mu);
    return rc;
}

int32_t wk_engine_encode_media_cancellable(struct wk_engine *e, const struct wk_media *m,
                                           const int32_t *cancel, float **embeds, int64_t *n_tokens,
                                           struct mm_err *err)
{
    return encode(e, m, cancel, 0, embeds, n_tokens, err);
}

/* Bytes of n_tokens embeddings: what a kept result counts against the budget. */
static int64_t embeds_bytes(const struct wk_engine *e, int64_t n_tokens)
{
    return n_tokens * e->cfg.text.hidden * (int64_t)sizeof(float);
}

/* Kept embeddings need the engine's context to copy from them and to free them (a vision context's memory
 * through free_vision). The budget is reserved before the encode, so concurrent encodes cannot overshoot it.
 */
int32_t wk_engine_encode_media_kept(struct wk_engine *e, const struct wk_media *m, const int32_t *cancel,
                                    struct wk_embeds *out, struct mm_err *err)
{
    *out = (struct wk_embeds){0};
    const struct wk_backend_iface *B = e->be.iface;
    const int64_t mm = (int64_t)e->cfg.vision.merge * e->cfg.vision.merge;
    const int64_t bytes = mm > 0 && m->n_rows > 0 ? embeds_bytes(e, m->n_rows / mm) : 0;
    int32_t keep = B->copy && (!e->has_venc || B->free_vision) && bytes > 0 && e->keep_cap > 0;
    if (keep && __atomic_add_fetch(&e->kept, bytes, __ATOMIC_RELAXED) > e->keep_cap) {
        __atomic_sub_fetch(&e->kept, bytes, __ATOMIC_RELAXED);
        keep = 0;
    }
    /* the same n_tokens x hidden floats as reserved: the tower makes n_rows / merge^2 of them */
    int32_t rc = encode(e, m, cancel, keep, &out->data, &out->n_tokens, err);
    if (rc != MM_OK) {
        if (keep) __atomic_sub_fetch(&e->kept, bytes, __ATOMIC_RELAXED);
        *out = (struct wk_embeds){0};
        return rc;
    }
    out->place = !keep ? WK_EMBEDS_HOST : e->has_venc ? WK_EMBEDS_VISION : WK_EMBEDS_ENGINE;
    return MM_OK;
}

void wk_engine_embeds_free(struct wk_engine *e, struct wk_embeds *x)
{
    if (!x->data) {
        *x = (struct wk_embeds){0};
        return;
    }
    const struct wk_backend_iface *B = e->be.iface;
    if (x->place == WK_EMBEDS_HOST) {
        free(x->data);
    } else {
        if (x->place == WK_EMBEDS_VISION)
            B->free_vision(e->be.ctx, x->data);
        else
            B->free(e->be.ctx, x->data);
        __atomic_sub_fetch(&e->kept, embeds_bytes(e, x->n_tokens), __ATOMIC_RELAXED);
    }
    *x = (struct wk_embeds){0};
}

void wk_engine_set_media_keep(struct wk_engine *e, int64_t bytes)
{
    e->keep_cap = bytes > 0 ? bytes : 0;
}

int64_t wk_engine_media_kept(const struct wk_engine *e)
{
    return __atomic_load_n(&e->kept, __ATOMIC_RELAXED);
}

/* The backend's vision context (wk_backend.h): a CPU instance with its own thread pool and scratch, a CUDA
 * context with its own stream, scratch and cuBLAS handle; both read the weights `be` loaded. A backend
 * without one keeps encoding on the engine's thread. */
int32_t wk_engine_set_encode_threads(struct wk_engine *e, int32_t threads, struct mm_err *err)
{
    if (e->has_venc) return mm_err_set(err, MM_INVALID, "the vision tower already has its own threads");
    if (threads < 1) return mm_err_set(err, MM_INVALID, "encode threads %d (at least 1)", threads);
    if (!e->w.has_vision) return mm_err_set(err, MM_UNSUPPORTED, "the model has no vision tower");
    if (!e->be.iface->vision_context)
        return mm_err_set(err, MM_UNSUPPORTED, "the %s backend encodes media on the engine's thread",
                          e->be.iface->name);
    int32_t rc = e->be.iface->vision_context(e->be.ctx, threads, &e->venc, err);
    if (rc) return rc;
    pthread_mutex_init(&e->venc_mu, NULL);
    e->has_venc = 1;
    e->info.concurrent_encode = 1;
    return MM_OK;
}

/* ---- sequences ---- */

static struct wk_seq *seq_new(struct wk_engine *e)
{
    struct wk_seq *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cur_ids = calloc((size_t)e->cfg.text.block, sizeof(int32_t));
    if (!s->cur_ids) {
        free(s);
        return NULL;
    }
    s->next = e->seqs;
    if (e->seqs) e->seqs->prev = s;
    e->seqs = s;
    return s;
}

int32_t wk_seq_create(struct wk_engine *e, struct wk_seq **out, struct mm_err *err)
{
    *out = seq_new(e);
    return *out ? MM_OK : mm_err_set(err, MM_NOMEM, "out of memory");
}

int32_t wk_seq_fork(struct wk_engine *e, const struct wk_seq *parent, struct wk_seq **out, struct mm_err *err)
{
    *out = NULL;
    int32_t B = e->cfg.text.block;
    int partial = parent->len % B != 0;
    if (partial && wk_cache_free_count(e->cache) < 1)
        return mm_err_set(err, MM_EXHAUSTED, "fork: no free page for the partial last block");
    struct wk_seq *s = seq_new(e);
    if (!s) return mm_err_set(err, MM_NOMEM, "out of memory");
    if (parent->n_blocks) {
        s->bt = malloc(sizeof(int32_t) * (size_t)parent->bt_cap);
        if (!s->bt) {
            wk_seq_free(e, s);
            return mm_err_set(err, MM_NOMEM, "out of memory");
        }
        s->bt_cap = parent->bt_cap;
    }
    for (int64_t b = 0; b < parent->n_blocks; b++) {
        int32_t p = parent->bt[b];
        if (partial && b == parent->n_blocks - 1) {
            /* the partial page will be written by both: the child gets its own copy */
            int32_t np = wk_cache_take(e->cache);
            e->be.iface->cache_copy_page(e->be.ctx, np, p, (int32_t)(parent->len % B));
            s->bt[b] = np;
        } else {
            wk_cache_ref(e->cache, p);
            s->bt[b] = p;
        }
    }
    s->n_blocks = parent->n_blocks;
    s->len = parent->len;
    s->last_key = parent->last_key;
    s->media_hash = parent->media_hash;
    s->cur_media = parent->cur_media;
    s->no_publish = parent->no_publish;
    memcpy(s->cur_ids, parent->cur_ids, sizeof(int32_t) * (size_t)B);
    *out = s;
    return MM_OK;
}

void wk_seq_free(struct wk_engine *e, struct wk_seq *s)
{
    if (!s) return;
    for (int64_t b = 0; b < s->n_blocks; b++) wk_cache_unref(e->cache, s->bt[b]);
    if (s->prev)
        s->prev->next = s->next;
    else
        e->seqs = s->next;
    if (s->next) s->next->prev = s->prev;
    free(s->bt);
    free(s->cur_ids);
    free(s);
}

int64_t wk_seq_len(const struct wk_seq *s)
{
    return s->len;
}

int64_t wk_engine_free_pages(const struct wk_engine *e)
{
    return wk_cache_free_count(e->cache);
}

int64_t wk_engine_pages_for(const struct wk_engine *e, int64_t n_tokens)
{
    int32_t B = e->cfg.text.block;
    return n_tokens <= 0 ? 0 : (n_tokens + B - 1) / B;
}

int64_t wk_seq_reuse_prefix(struct wk_engine *e, struct wk_seq *s, const int32_t *ids, int64_t n,
                            uint64_t media_hash)
{
    int32_t B = e->cfg.text.block;
    if (!s || s->len != 0 || s->n_blocks != 0 || !ids || n <= 0) return 0;
    s->media_hash = media_hash; /* pages this sequence fills later are published under it */
    int64_t full = (n - 1) / B; /* k < n: at least one token is left to compute */
    if (full <= 0) return 0;
    if (s->bt_cap < full) {
        int32_t *bt = realloc(s->bt, sizeof(int32_t) * (size_t)full);
        if (!bt) return 0;
        s->bt = bt;
        s->bt_cap = full;
    }
    uint64_t parent = 0;
    int64_t b = 0;
    for (; b < full; b++) {
        const int32_t *pid = ids + b * B;
        int media = 0;
        for (int32_t i = 0; i < B && !media; i++)
            media = pid[i] == e->cfg.image_token_id || pid[i] == e->cfg.video_token_id;
        if (media && media_hash == 0) break;
        uint64_t key = wk_cache_key(parent, pid, B, media ? media_hash : 0);
        int32_t page = wk_cache_lookup(e->cache, key, parent, pid);
        if (page < 0) break;
        s->bt[b] = page;
        parent = key;
    }
    s->n_blocks = b;
    s->len = b * B;
    s->last_key = parent;
    return s->len;
}

int32_t wk_engine_forward(struct wk_engine *e, struct wk_step_item *items, int32_t n_items,
                          struct mm_err *err)
{
    return wk_forward_run(e, items, n_items, err);
}
