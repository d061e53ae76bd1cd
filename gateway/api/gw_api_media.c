/* The request pipeline up to the prompt: every media item the template kept is loaded and preprocessed
 * concurrently — data: URLs are decoded and file: URLs read on the preprocessing pool, http(s) URLs are
 * fetched on the service loop under the media policy first — and when the last one is in, the prompt is built
 * and the generation (or the /tokenize answer) starts. Nothing here blocks an event loop. */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "gw_api_dataurl.h"
#include "gw_api_fileurl.h"
#include "gw_api_internal.h"
#include "mm_dtype.h"
#include "mm_log.h"

static void respond_tokenize(struct gw_api_req *r);

/* A fetch or decode problem is the client's (400: refused address, undecodable, too many pixels); byte
 * caps on what was sent or fetched are 413 (bytes_stage); overload and shutdown 503. The time caps
 * (fetch_timeout, preprocess_timeout: MM_TIMEOUT) are 400 too, like the other "too expensive media"
 * refusals: the item itself is too slow to fetch or preprocess, and sending it again would fail again (a
 * 504 would invite that retry). */
int gw_api_media_error(struct gw_api_error *e, const struct gw_api_media *m, int32_t code, bool bytes_stage,
                       const char *msg)
{
    int status = code == MM_TOO_LARGE && bytes_stage ? 413
                 : code == MM_NOMEM || code == MM_EXHAUSTED || code == MM_CANCELLED || code == MM_UNAVAILABLE
                     ? 503
                     : 400;
    /* the media pipeline's messages already start with the part's name (its job label) */
    size_t pl = strlen(m->param);
    if (strncmp(msg, m->param, pl) == 0 && msg[pl] == ':') return gw_api_fail(e, status, m->param, "%s", msg);
    return gw_api_fail(e, status, m->param, "%s: %s", m->param, msg);
}

static void media_failed(struct gw_api_req *r, struct gw_api_media *m, int32_t code, bool bytes_stage,
                         const char *msg)
{
    struct gw_api_error e;
    gw_api_media_error(&e, m, code, bytes_stage, msg);
    gw_api_req_fail(r, &e);
}

/* Prompts above this many bytes are tokenized on the preprocessing pool, not on the loop (the tokenizer
 * does ~50 MB/s: 32 KiB is well under a millisecond, a 1 MB prompt would stall the loop ~20 ms). */
#define INLINE_TOKENIZE_MAX (32 * 1024)

static void prompt_ready(struct gw_api_req *r, int rc, const struct gw_api_error *e)
{
    if (rc) {
        gw_api_req_fail(r, e);
        return;
    }
    if (r->kind == GW_API_TOKENIZE)
        respond_tokenize(r);
    else
        gw_api_generate(r);
}

struct tjob {
    struct gw_api_req *r;
    const struct gw_executor *ex;
    int rc;
    struct gw_api_error e;
};

static void tjob_back(void *arg)
{
    struct tjob *j = arg;
    struct gw_api_req *r = j->r;
    if (!gw_api_req_async_back(r)) prompt_ready(r, j->rc, &j->e);
    free(j);
}

static void tjob_run(void *arg)
{
    /* the loop leaves the request's prompt state alone while this job is pending */
    struct tjob *j = arg;
    j->rc = gw_api_prompt_build(j->r, &j->e);
    if (gw_executor_post(j->ex, tjob_back, j) != 0) free(j); /* the loop is gone (shutdown) */
}

static void all_media_ready(struct gw_api_req *r)
{
    struct gw_api_error e;
    if (r->prompt.len > INLINE_TOKENIZE_MAX && r->model->pool) {
        struct tjob *j = calloc(1, sizeof *j);
        if (j) {
            j->r = r;
            j->ex = r->http->executor;
            if (gw_pool_submit(r->model->pool, tjob_run, j) == MM_OK) {
                r->pending++;
                return;
            }
            free(j); /* queue full: tokenize here rather than refuse */
        }
    }
    int rc = gw_api_prompt_build(r, &e);
    prompt_ready(r, rc, &e);
}

/* ---- preprocessing on the pool ---- */

struct pjob {
    struct gw_api_req *r;
    size_t k;
    const struct gw_executor *ex;
    const struct mmgw_plugin *vt;
    const struct mmgw_plugin_instance *inst;
    int32_t kind;
    const char *url; /* a data: URL (decoded here), or NULL when bytes or path are given */
    size_t url_len;
    char *path;               /* a file: URL's path (read here beneath root), or NULL */
    const char *root, *alias; /* allowed_local_media_path, real and as configured (the state's) */
    uint8_t *bytes;
    size_t n_bytes;
    uint64_t max_bytes;
    struct gw_media_limits lim;
    const atomic_bool *cancel; /* &r->stop_media: polled while the job runs (r outlives it, see there) */
    char label[128];
    /* out */
    int32_t rc;
    bool in_decode_url; /* the failure was decoding the data: URL itself */
    struct mm_err err;
    struct gw_media_result res;
    uint64_t hash;
};

/* The protocol's content_hash (the worker's prefix-cache key for the pages holding the item, and the
 * router's affinity key): a hash of what the worker consumes, the pixel values with their grid and dtype.
 * Not of the encoded bytes: the same file preprocessed under other options (another model's plugin_option
 * on the same worker, a reload) gives other pixels, and the worker would reuse the pages computed from the
 * first ones. XXH3 (libxxhash): the pixels are megabytes per image, and a word-at-a-time multiply chain
 * took ~1.4 ms for a 640 x 427 JPEG's 3.2 MB of patches, as long as decoding and resizing it. 0 means
 * "unknown" in the protocol, so it is never returned. */
static uint64_t pixels_hash(const struct gw_media_result *res)
{
    const uint64_t meta[5] = {(uint64_t)res->grid_thw[0], (uint64_t)res->grid_thw[1],
                              (uint64_t)res->grid_thw[2], res->patch_dim, (uint64_t)res->dtype};
    const uint64_t h =
        XXH3_64bits_withSeed(res->pixels, res->n_patches * res->patch_dim * mm_dtype_size(res->dtype),
                             XXH3_64bits(meta, sizeof meta));
    return h ? h : 1;
}

static void pjob_back(void *arg);

static void pjob_run(void *arg)
{
    struct pjob *j = arg;
    mm_err_clear(&j->err);
    j->rc = MM_OK;
    if (atomic_load_explicit(j->cancel, memory_order_relaxed)) {
        /* the request ended while this job was queued: skip even the data: URL's decoding */
        j->rc = MM_CANCELLED;
    } else if (j->url) {
        struct gw_api_dataurl du;
        j->rc = gw_api_dataurl_decode(j->url, j->url_len, j->max_bytes, &du, &j->err);
        j->in_decode_url = j->rc != MM_OK;
        j->bytes = du.data;
        j->n_bytes = du.len;
    } else if (j->path) {
        j->rc = gw_api_file_read(j->root, j->alias, j->path, j->max_bytes, &j->bytes, &j->n_bytes, &j->err);
        j->in_decode_url = j->rc != MM_OK;
    }
    if (j->rc == MM_OK) {
        struct gw_media_input in = {.kind = j->kind, .data = j->bytes, .len = j->n_bytes, .label = j->label};
        struct gw_media_options opt = {.dtype = MM_DT_BF16, .limits = &j->lim, .cancel = j->cancel};
        j->rc = gw_media_process(&in, j->vt, j->inst, &opt, &j->res, &j->err);
        if (j->rc == MM_OK) j->hash = pixels_hash(&j->res);
    }
    free(j->bytes);
    j->bytes = NULL;
    free(j->path);
    j->path = NULL;
    if (gw_executor_post(j->ex, pjob_back, j) != 0) {
        /* the loop is gone (shutdown): nobody will read this */
        gw_media_result_free(&j->res);
        free(j);
    }
}

static void pjob_back(void *arg)
{
    struct pjob *j = arg;
    struct gw_api_req *r = j->r;
    if (gw_api_req_async_back(r)) {
        gw_media_result_free(&j->res);
        free(j);
        return;
    }
    struct gw_api_media *m = &r->media[j->k];
    if (j->rc != MM_OK) {
        media_failed(r, m, j->rc, j->in_decode_url, j->err.msg[0] ? j->err.msg : mm_strerror(j->rc));
        free(j);
        return;
    }
    m->res = j->res;
    m->hash = j->hash;
    m->done = true;
    struct gw_api_state *st = r->st;
    gw_series_observe(st->m.stage[1], (double)m->res.timing.decode_ns / 1e9);
    gw_series_observe(st->m.stage[2], (double)m->res.timing.post_ns / 1e9);
    gw_series_inc(m->kind == MMGW_MEDIA_VIDEO ? r->model->media_video : r->model->media_image);
    free(j);
    if (--r->media_left == 0) all_media_ready(r);
}

/* Queue the preprocessing of item k; takes bytes (or, given none, decodes the data: URL or reads the file:
 * URL's file on the pool: both can take milliseconds the loop must not spend). */
static int submit_media(struct gw_api_req *r, size_t k, uint8_t *bytes, size_t n)
{
    struct gw_api_media *m = &r->media[k];
    struct pjob *j = calloc(1, sizeof *j);
    if (!j) {
        free(bytes);
        media_failed(r, m, MM_NOMEM, false, "out of memory");
        return -1;
    }
    j->r = r;
    j->k = k;
    j->ex = r->http->executor;
    j->vt = r->model->vt;
    j->inst = r->model->inst;
    j->kind = m->kind;
    j->bytes = bytes;
    j->n_bytes = n;
    const struct gw_media_conf *mc = &r->st->config->media;
    if (!bytes && gw_api_is_file_url(m->url, m->url_len)) {
        struct mm_err err;
        if (gw_api_file_url_path(m->url, m->url_len, &j->path, &err) != MM_OK) {
            free(j);
            media_failed(r, m, err.code, false, err.msg);
            return -1;
        }
        j->root = r->st->local_media_real;
        j->alias = mc->local_media_path;
    } else if (!bytes) {
        j->url = m->url;
        j->url_len = m->url_len;
    }
    j->max_bytes = (uint64_t)mc->fetch_max_bytes;
    j->lim.max_input_bytes = (uint64_t)mc->fetch_max_bytes;
    if (mc->max_pixels > 0) j->lim.max_source_pixels = (uint64_t)mc->max_pixels;
    j->lim.max_process_ns = (uint64_t)mc->preprocess_timeout_ms * 1000000u;
    j->cancel = &r->stop_media;
    snprintf(j->label, sizeof j->label, "%s", m->param);
    int32_t rc = gw_pool_submit(r->model->pool, pjob_run, j);
    if (rc != MM_OK) {
        free(j->bytes);
        free(j->path);
        free(j);
        media_failed(r, m, rc == MM_EXHAUSTED ? MM_EXHAUSTED : MM_UNAVAILABLE, false,
                     "the preprocessing queue is full; try again later");
        return -1;
    }
    r->pending++;
    return 0;
}

/* ---- fetching on the service loop ---- */

struct fop {
    struct gw_api_req *r;
    size_t k;
    const struct gw_executor *ex;
    struct gw_fetcher *fetcher;
    struct event_base *svc_base;
    const atomic_bool *cancel; /* &r->stop_media (r outlives the fop: it holds a pending count) */
    struct gw_fetch *t;        /* the fetch in flight, on the service loop */
    struct event *poll;        /* watches cancel while t is in flight */
    char *url;
    int32_t rc;
    char msg[512];
    uint8_t *body;
    size_t n;
    int64_t t0;
};

static void fop_back(void *arg);

static void fop_post_back(struct fop *f)
{
    if (gw_executor_post(f->ex, fop_back, f) != 0) {
        free(f->body);
        free(f->url);
        free(f);
    }
}

/* The fetch is over (done, or cancelled below): its watch goes. On the service loop. */
static void fop_unwatch(struct fop *f)
{
    if (f->poll) event_free(f->poll);
    f->poll = NULL;
    f->t = NULL;
}

/* A fetch whose request is over (the client went away, another item failed) would otherwise run until
 * fetch_timeout holding a connection to somebody's server: every FOP_POLL_MS the service loop looks at the
 * request's stop flag and cancels it. Polled, not posted: the request's loop cannot touch the fetch, and a
 * cancel message could cross the fetch's own end. */
#define FOP_POLL_MS 50

static void fop_poll(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct fop *f = arg;
    if (!atomic_load_explicit(f->cancel, memory_order_relaxed)) return;
    gw_fetch_cancel(f->t); /* its callback will not run */
    fop_unwatch(f);
    f->rc = MM_CANCELLED;
    snprintf(f->msg, sizeof f->msg, "the fetch was cancelled");
    fop_post_back(f);
}

static void fop_done(void *arg, struct gw_fetch_result *res)
{
    struct fop *f = arg;
    fop_unwatch(f);
    f->rc = res->status;
    snprintf(f->msg, sizeof f->msg, "%s", res->message ? res->message : "");
    if (res->status == MM_OK) f->body = (uint8_t *)mm_buf_detach(&res->body, &f->n);
    fop_post_back(f);
}

static void fop_start(void *arg)
{
    struct fop *f = arg;
    struct mm_err err;
    mm_err_clear(&err);
    int32_t rc = atomic_load_explicit(f->cancel, memory_order_relaxed)
                     ? mm_err_set(&err, MM_CANCELLED, "the fetch was cancelled")
                     : gw_fetch_start(f->fetcher, f->url, NULL, fop_done, f, &f->t, &err);
    if (rc != MM_OK) {
        f->rc = rc;
        snprintf(f->msg, sizeof f->msg, "%s", err.msg);
        fop_post_back(f);
        return;
    }
    /* without the watch (no memory) the fetch still ends by fetch_timeout */
    const struct timeval every = {0, FOP_POLL_MS * 1000};
    f->poll = event_new(f->svc_base, -1, EV_PERSIST, fop_poll, f);
    if (f->poll && event_add(f->poll, &every) != 0) {
        event_free(f->poll);
        f->poll = NULL;
    }
}

static void fop_back(void *arg)
{
    struct fop *f = arg;
    struct gw_api_req *r = f->r;
    free(f->url);
    if (gw_api_req_async_back(r)) {
        free(f->body);
        free(f);
        return;
    }
    gw_series_observe(r->st->m.stage[0], (double)(mm_now_ns() - f->t0) / 1e9);
    struct gw_api_media *m = &r->media[f->k];
    if (f->rc != MM_OK) {
        media_failed(r, m, f->rc, true, f->msg[0] ? f->msg : mm_strerror(f->rc));
        free(f->body);
        free(f);
        return;
    }
    uint8_t *body = f->body;
    size_t n = f->n;
    size_t k = f->k;
    free(f);
    submit_media(r, k, body, n);
}

static int fetch_media(struct gw_api_req *r, size_t k)
{
    struct gw_api_media *m = &r->media[k];
    struct fop *f = calloc(1, sizeof *f);
    if (f) f->url = strndup(m->url, m->url_len);
    if (!f || !f->url) {
        free(f);
        media_failed(r, m, MM_NOMEM, false, "out of memory");
        return -1;
    }
    f->r = r;
    f->k = k;
    f->ex = r->http->executor;
    f->fetcher = r->st->fetcher;
    f->svc_base = gw_api_svc_base(r->st->svc);
    f->cancel = &r->stop_media;
    f->t0 = mm_now_ns();
    if (gw_executor_post(gw_api_svc_executor(r->st->svc), fop_start, f) != 0) {
        free(f->url);
        free(f);
        media_failed(r, m, MM_UNAVAILABLE, false, "the server is reloading; try again");
        return -1;
    }
    r->pending++;
    return 0;
}

void gw_api_pipeline_start(struct gw_api_req *r)
{
    size_t todo = 0;
    for (size_t k = 0; k < r->n_media; k++) todo += r->media[k].rendered;
    if (todo == 0) {
        all_media_ready(r);
        return;
    }
    r->media_left = todo;
    /* hold the request while starting, so a synchronous failure cannot free it under us */
    r->pending++;
    for (size_t k = 0; k < r->n_media && !r->finished; k++) {
        struct gw_api_media *m = &r->media[k];
        if (!m->rendered) continue;
        if (gw_api_is_data_url(m->url, m->url_len) || gw_api_is_file_url(m->url, m->url_len))
            submit_media(r, k, NULL, 0);
        else
            fetch_media(r, k);
    }
    gw_api_req_async_back(r);
}

/* ---- /tokenize answers come from here once the prompt exists ---- */

static void respond_tokenize(struct gw_api_req *r)
{
    struct mm_buf b;
    mm_buf_init(&b, 0);
    int bad = mm_buf_append_str(&b, "{\"tokens\":[");
    for (size_t i = 0; i < r->ids.n && !bad; i++)
        bad = mm_buf_printf(&b, i ? ",%u" : "%u", r->ids.ids[i]) < 0;
    uint64_t mml = gw_api_max_model_len(r->model);
    if (!bad) bad = mm_buf_printf(&b, "],\"count\":%zu,\"max_model_len\":", r->ids.n) < 0;
    if (!bad)
        bad = mml ? mm_buf_printf(&b, "%llu", (unsigned long long)mml) < 0 : mm_buf_append_str(&b, "null");
    if (!bad && r->p.return_token_strs) {
        bad = mm_buf_append_str(&b, ",\"token_strs\":[");
        for (size_t i = 0; i < r->ids.n && !bad; i++) {
            size_t len = 0;
            const char *t = gw_tokenizer_id_to_token(r->model->tok, r->ids.ids[i], &len);
            bad = (i && mm_buf_append(&b, ",", 1)) || gw_json_str(&b, t ? t : "", t ? len : 0);
        }
        if (!bad) bad = mm_buf_append_str(&b, "]");
    }
    if (!bad) bad = mm_buf_append_str(&b, "}");
    if (bad) {
        struct gw_api_error e;
        gw_api_fail(&e, 503, NULL, "out of memory");
        mm_buf_free(&b);
        gw_api_req_fail(r, &e);
        return;
    }
    if (!r->aborted) gw_http_respond(r->http, 200, "application/json", b.data, b.len);
    mm_buf_free(&b);
    gw_api_req_metrics(r, 200);
    gw_api_req_release(r);
}
