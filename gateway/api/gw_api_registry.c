/* The model registry of one configuration generation: for every `model` block its plugin instance,
 * tokenizer, special-token ids, worker pool (router), preprocessing pool and what the workers said about
 * themselves (ModelInfo). Expensive, immutable pieces are shared with the previous generation: a
 * tokenizer whose file did not change, and the process's one gRPC client. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gw_api_internal.h"
#include "gw_api_tokcache.h"
#include "gw_upstream.h"
#include "mm_file.h"
#include "mm_log.h"

/* ---- shared tokenizers (main thread only: init and fini) ---- */

struct gw_api_tok {
    char *path;
    dev_t dev;
    ino_t ino;
    int64_t mtime_ns;
    off_t size;
    struct gw_tokenizer *tok;
    struct gw_api_tokcache *cache; /* prompt pieces' ids, kept across reloads with the tokenizer */
    int refs;
    struct gw_api_tok *next;
};

static struct gw_api_tok *tok_list;

static int32_t tok_acquire(const char *path, struct gw_api_tok **out, struct mm_err *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return mm_err_set(err, MM_NOT_FOUND, "tokenizer %s: cannot stat", path);
    int64_t mt = (int64_t)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
    for (struct gw_api_tok *t = tok_list; t; t = t->next)
        if (strcmp(t->path, path) == 0 && t->dev == sb.st_dev && t->ino == sb.st_ino && t->mtime_ns == mt &&
            t->size == sb.st_size) {
            t->refs++;
            *out = t;
            return MM_OK;
        }
    struct gw_api_tok *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path))) {
        free(t);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    int32_t rc = gw_tokenizer_load_file(path, &t->tok, err);
    if (rc != MM_OK) {
        free(t->path);
        free(t);
        return rc;
    }
    t->cache = gw_api_tokcache_create(t->tok, 0); /* NULL: no safe cut token, plain encoding */
    t->dev = sb.st_dev;
    t->ino = sb.st_ino;
    t->mtime_ns = mt;
    t->size = sb.st_size;
    t->refs = 1;
    t->next = tok_list;
    tok_list = t;
    *out = t;
    return MM_OK;
}

static void tok_release(struct gw_api_tok *t)
{
    if (!t || --t->refs > 0) return;
    for (struct gw_api_tok **p = &tok_list; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    gw_api_tokcache_free(t->cache);
    gw_tokenizer_free(t->tok);
    free(t->path);
    free(t);
}

/* ---- the shared gRPC client (main thread only) ---- */

static struct gw_upstream *up_shared;
static int up_refs;

static int32_t up_acquire(struct gw_upstream **out, struct mm_err *err)
{
    if (!up_shared) {
        int32_t rc = gw_upstream_create(NULL, &up_shared, err);
        if (rc != MM_OK) return rc;
    }
    up_refs++;
    *out = up_shared;
    return MM_OK;
}

static void up_release(void)
{
    if (up_refs > 0 && --up_refs == 0) {
        gw_upstream_destroy(up_shared);
        up_shared = NULL;
    }
}

/* ---- worker info (ModelInfo answers arrive on the completion-queue thread) ---- */

/* Shared by the model and its in-flight ModelInfo calls, so a retired model never has to wait for them. */
struct infobox {
    atomic_int refs;
    pthread_mutex_t mu;
    size_t n;
    struct gw_api_winfo w[];
};

struct info_call {
    struct infobox *box;
    size_t idx;
    char model[128];
    char target[128];
    uint32_t tok_vocab;
};

static void box_unref(struct infobox *b)
{
    if (atomic_fetch_sub(&b->refs, 1) != 1) return;
    pthread_mutex_destroy(&b->mu);
    free(b);
}

static void on_model_info(void *arg, const struct gw_call_status *st, const ProtobufCMessage *resp)
{
    struct info_call *c = arg;
    if (st->code == MM_OK && resp) {
        const Mmgw__Worker__V1__ModelInfoResponse *mi = (const Mmgw__Worker__V1__ModelInfoResponse *)resp;
        pthread_mutex_lock(&c->box->mu);
        struct gw_api_winfo *w = &c->box->w[c->idx];
        w->known = 1;
        w->vocab = mi->vocab_size;
        w->max_context = mi->max_context;
        w->n_eos = 0;
        snprintf(w->model_type, sizeof w->model_type, "%s", mi->model_type ? mi->model_type : "");
        w->merge_factor = mi->merge_factor;
        w->type_checked = 0;
        for (size_t i = 0; i < mi->n_eos_token_ids && w->n_eos < GW_API_MAX_EOS; i++)
            w->eos[w->n_eos++] = mi->eos_token_ids[i];
        bool warn = !w->warned && mi->vocab_size && mi->vocab_size < c->tok_vocab;
        if (warn) w->warned = 1;
        pthread_mutex_unlock(&c->box->mu);
        if (warn)
            mm_log_warn(
                GW_API_COMP,
                "model %s: worker %s reports a vocabulary of %u ids but the tokenizer has %u: prompts "
                "using the extra ids will be refused by the worker",
                c->model, c->target, mi->vocab_size, c->tok_vocab);
        mm_log_debug(GW_API_COMP, "model %s: worker %s: model %s, vocab %u, context %llu, %zu eos ids",
                     c->model, c->target, mi->model_name, mi->vocab_size, (unsigned long long)mi->max_context,
                     mi->n_eos_token_ids);
    }
    box_unref(c->box);
    free(c);
}

/* m->winfo points at the infobox's array; the box header sits just before it. */
static struct infobox *box_of(struct gw_api_model *m)
{
    return (struct infobox *)((char *)m->winfo - offsetof(struct infobox, w));
}

static void ask_model_info(struct gw_api_model *m)
{
    struct infobox *box = box_of(m);
    for (size_t i = 0; i < m->n_chans; i++) {
        struct info_call *c = calloc(1, sizeof *c);
        if (!c) return;
        c->box = box;
        c->idx = i;
        c->tok_vocab = m->vocab;
        snprintf(c->model, sizeof c->model, "%s", m->name);
        snprintf(c->target, sizeof c->target, "%s", m->conf->upstreams[i]);
        atomic_fetch_add(&box->refs, 1);
        struct mm_err e;
        if (gw_upstream_model_info(m->chans[i], (uint32_t)m->conf->health_check_timeout_ms, NULL,
                                   on_model_info, c, &e) != MM_OK) {
            box_unref(box);
            free(c);
        }
    }
}

uint64_t gw_api_max_model_len(struct gw_api_model *m)
{
    if (m->conf->max_model_len > 0) return (uint64_t)m->conf->max_model_len;
    if (!m->winfo) return 0;
    struct infobox *b = box_of(m);
    uint64_t best = 0;
    pthread_mutex_lock(&b->mu);
    for (size_t i = 0; i < b->n; i++)
        if (b->w[i].known && b->w[i].max_context && (!best || b->w[i].max_context < best))
            best = b->w[i].max_context;
    pthread_mutex_unlock(&b->mu);
    return best;
}

/* A worker whose vision tower merges patches otherwise than the plugin preprocesses them refuses every media
 * request (the placeholder runs do not match its embeddings): say so once, in the operator's log. */
static void check_merge(const struct gw_api_model *m, const struct gw_api_winfo *w, const char *target)
{
    if (!w->merge_factor || (!m->marker[0] && !m->marker[1]) || !m->vt->vision_params) return;
    const struct mmgw_vision_params *vp = m->vt->vision_params(m->inst);
    uint32_t want = vp ? vp->merge_size * vp->merge_size : 0;
    if (want && want != w->merge_factor)
        mm_log_warn(
            GW_API_COMP,
            "model %s: worker %s makes one media token per %u patches but plugin %s per %u (merge %u): "
            "its image and video requests will be refused",
            m->name, target, w->merge_factor, m->vt->name, want, vp->merge_size);
}

size_t gw_api_worker_eos(struct gw_api_model *m, uint32_t *out, size_t cap)
{
    if (!m->winfo) return 0;
    struct infobox *b = box_of(m);
    size_t n = 0;
    bool any = false;
    pthread_mutex_lock(&b->mu);
    for (size_t i = 0; i < b->n; i++) {
        if (!b->w[i].known) continue;
        any = true;
        struct gw_api_winfo *w = &b->w[i];
        if (!w->type_checked) {
            /* here, not on the gRPC thread: the plugin is certainly loaded while a request uses the model */
            w->type_checked = 1;
            if (w->model_type[0] && m->vt->match_model_type && !m->vt->match_model_type(w->model_type))
                mm_log_warn(GW_API_COMP,
                            "model %s: worker %s serves model_type \"%s\", which plugin %s does not claim",
                            m->name, m->conf->upstreams[i], w->model_type, m->vt->name);
            check_merge(m, w, m->conf->upstreams[i]);
        }
        for (uint32_t k = 0; k < b->w[i].n_eos; k++) {
            bool dup = false;
            for (size_t j = 0; j < n; j++) dup |= out[j] == b->w[i].eos[k];
            if (!dup && n < cap) out[n++] = b->w[i].eos[k];
        }
    }
    uint64_t t = (uint64_t)mm_now_ms();
    bool ask = !any && t - m->info_asked_ms >= 1000;
    if (ask) m->info_asked_ms = t;
    pthread_mutex_unlock(&b->mu);
    if (ask) ask_model_info(m);
    return n;
}

/* ---- building a model ---- */

struct probe_sink {
    struct gw_api_model *m;
    struct mm_err *err;
    int bad;
};

static int32_t probe_emit(void *ctx, const struct mmgw_prompt_seg *seg)
{
    struct probe_sink *ps = ctx;
    if (seg->kind != MMGW_SEG_TOKEN || ps->bad) return MMGW_OK;
    uint32_t id;
    if (gw_tokenizer_token_to_id(ps->m->tok, seg->text, seg->text_len, &id) != MM_OK) {
        mm_err_set(ps->err, MM_INVALID, "token \"%.*s\" is not in the tokenizer", (int)seg->text_len,
                   seg->text);
        ps->bad = 1;
    }
    return MMGW_OK;
}

/* Expand a small item of each kind once, so a plugin/tokenizer mismatch shows at start, not per request. */
static void probe_media(struct gw_api_model *m)
{
    for (int32_t kind = 0; kind < 2; kind++) {
        const char *mk = m->vt->media_marker ? m->vt->media_marker(m->inst, kind) : NULL;
        uint32_t id;
        struct mm_err e;
        mm_err_clear(&e);
        if (!mk || gw_tokenizer_token_to_id(m->tok, mk, strlen(mk), &id) != MM_OK) {
            if (mk)
                mm_log_warn(
                    GW_API_COMP,
                    "%s:%d: model %s: media marker \"%s\" is not a tokenizer token: %s parts are refused",
                    m->conf->file, m->conf->line, m->name, mk, kind ? "video" : "image");
            continue;
        }
        uint32_t frames[4] = {0, 10, 20, 30};
        struct mmgw_media_info info = {.struct_size = sizeof info,
                                       .kind = kind,
                                       .grid_t = kind ? 2 : 1,
                                       .grid_h = 2,
                                       .grid_w = 2,
                                       .n_frames = kind ? 4 : 1,
                                       .frame_indices = kind ? frames : NULL,
                                       .source_fps = kind ? 10.0 : 0.0};
        struct probe_sink ps = {.m = m, .err = &e};
        struct mmgw_seg_sink sink = {.ctx = &ps, .emit = probe_emit};
        struct mmgw_error perr;
        mm_err_clear(&perr.e);
        if (m->vt->expand_media(m->inst, &info, &sink, &perr) != MMGW_OK || ps.bad) {
            mm_log_warn(GW_API_COMP,
                        "%s:%d: model %s: %s expansion does not fit the tokenizer (%s): %s parts are refused",
                        m->conf->file, m->conf->line, m->name, kind ? "video" : "image",
                        ps.bad ? e.msg : perr.e.msg, kind ? "video" : "image");
            continue;
        }
        m->marker[kind] = mk;
        m->marker_len[kind] = strlen(mk);
    }
}

/* MMGW_UPSTREAM_TRANSPORT=grpc-core sends every Generate through gRPC C core instead of each loop's own
 * HTTP/2 connection (docs/design/upstream.md, "Performance"): a diagnostic switch, and the benchmark's
 * baseline. */
static int upstream_core_only(void)
{
    const char *v = getenv("MMGW_UPSTREAM_TRANSPORT");
    return v && strcmp(v, "grpc-core") == 0;
}

/* upstream_tls_ca read whole (gRPC takes the PEM text), so that mmgw -t finds a missing or unreadable file */
static int32_t load_tls_ca(const struct gw_model_conf *c, char **pem, struct mm_err *err)
{
    *pem = NULL;
    if (!c->upstream_tls && (c->upstream_tls_ca || c->upstream_tls_name))
        return mm_err_set(err, MM_INVALID,
                          "%s:%d: model %s: upstream_tls_ca / upstream_tls_name need upstream_tls on",
                          c->file, c->line, c->name);
    if (!c->upstream_tls || !c->upstream_tls_ca) return MM_OK;
    char *s = NULL;
    size_t len = 0;
    if (mm_file_read_text(c->upstream_tls_ca, 1 << 20, &s, &len, err) != MM_OK)
        return mm_err_prefix(err, "%s:%d: model %s: upstream_tls_ca", c->file, c->line, c->name);
    if (!strstr(s, "-----BEGIN CERTIFICATE-----")) {
        free(s);
        return mm_err_set(err, MM_INVALID, "%s:%d: model %s: upstream_tls_ca %s holds no PEM certificate",
                          c->file, c->line, c->name, c->upstream_tls_ca);
    }
    *pem = s;
    return MM_OK;
}

/* file:line of a model directive, for messages ("plugin", "tokenizer"); the block's when unknown. */
#define AT(c, what)                                                                                          \
    ((c)->what##_file ? (c)->what##_file : (c)->file), ((c)->what##_file ? (c)->what##_line : (c)->line)

/* The plugin_option a plugin's error message names ("plugin_option KEY: ..." or "... 'KEY'"), so the message
 * can point at its line. */
static const struct gw_kv *option_named(const struct gw_model_conf *c, const char *msg)
{
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < c->n_plugin_options; i++) {
            const char *k = c->plugin_options[i].key;
            char q[160];
            snprintf(q, sizeof q, pass ? "'%s'" : "plugin_option %s", k);
            const char *hit = strstr(msg, q);
            size_t ql = strlen(q);
            if (hit && (pass || hit[ql] == ':' || hit[ql] == ' ' || hit[ql] == '\0'))
                return &c->plugin_options[i];
        }
    return NULL;
}

static int32_t model_build(struct gw_api_state *st, struct gw_api_model *m, const struct gw_model_conf *c,
                           const struct gw_module_ctx *ctx, struct mm_err *err)
{
    m->st = st;
    m->conf = c;
    m->name = c->name;
    m->created = (int64_t)time(NULL);
    if (!c->plugin)
        return mm_err_set(err, MM_INVALID, "%s:%d: model %s: no \"plugin\" directive", c->file, c->line,
                          c->name);
    if (!c->tokenizer)
        return mm_err_set(err, MM_INVALID, "%s:%d: model %s: no \"tokenizer\" directive", c->file, c->line,
                          c->name);
    if (c->n_upstreams == 0 && !ctx->check_only)
        return mm_err_set(err, MM_INVALID, "%s:%d: model %s: no \"upstream\" directive", c->file, c->line,
                          c->name);
    int32_t rc = gw_plugin_load(c->plugin, NULL, &m->plugin, err);
    if (rc != MM_OK) return mm_err_prefix(err, "%s:%d: model %s", AT(c, plugin), c->name);
    m->vt = &m->plugin->vt;
    struct mmgw_option *opts = c->n_plugin_options ? calloc(c->n_plugin_options, sizeof *opts) : NULL;
    if (c->n_plugin_options && !opts) return mm_err_set(err, MM_NOMEM, "out of memory");
    for (size_t i = 0; i < c->n_plugin_options; i++) {
        opts[i].key = c->plugin_options[i].key;
        opts[i].value = c->plugin_options[i].value;
    }
    rc = gw_plugin_instance_create(m->plugin, opts, (uint32_t)c->n_plugin_options, &m->inst, err);
    free(opts);
    if (rc != MM_OK) {
        const struct gw_kv *o = option_named(c, err->msg);
        return o ? mm_err_prefix(err, "%s:%d: model %s", o->file, o->line, c->name)
                 : mm_err_prefix(err, "%s:%d: model %s", AT(c, plugin), c->name);
    }
    rc = tok_acquire(c->tokenizer, &m->tokref, err);
    if (rc != MM_OK) return mm_err_prefix(err, "%s:%d: model %s", AT(c, tokenizer), c->name);
    m->tok = m->tokref->tok;
    m->tokcache = m->tokref->cache;
    m->vocab = gw_tokenizer_vocab_size(m->tok);
    const char *const *stops = m->vt->stop_tokens ? m->vt->stop_tokens(m->inst) : NULL;
    for (size_t i = 0; stops && stops[i]; i++) {
        uint32_t id;
        if (gw_tokenizer_token_to_id(m->tok, stops[i], strlen(stops[i]), &id) != MM_OK)
            return mm_err_set(err, MM_INVALID, "%s:%d: model %s: the plugin's stop token \"%s\" is not in %s",
                              AT(c, tokenizer), c->name, stops[i], c->tokenizer);
        if (m->n_stop_ids < sizeof m->stop_ids / sizeof m->stop_ids[0]) m->stop_ids[m->n_stop_ids++] = id;
    }
    /* markers the output parser reads as text; one the tokenizer lacks arrives as plain text anyway */
    const char *const *ptoks = m->vt->parser_tokens ? m->vt->parser_tokens(m->inst) : NULL;
    for (size_t i = 0; ptoks && ptoks[i]; i++) {
        uint32_t id;
        if (gw_tokenizer_token_to_id(m->tok, ptoks[i], strlen(ptoks[i]), &id) == MM_OK &&
            m->n_parser_ids < sizeof m->parser_ids / sizeof m->parser_ids[0])
            m->parser_ids[m->n_parser_ids++] = id;
    }
    probe_media(m);
    if ((rc = load_tls_ca(c, &m->tls_ca_pem, err)) != MM_OK) return rc;
    if (ctx->check_only) return MM_OK;
    const struct gw_upstream_tls tls = {.ca_pem = m->tls_ca_pem, .server_name = c->upstream_tls_name};

    /* worker info, asked once now and again while nobody has answered */
    struct infobox *box = calloc(1, sizeof *box + c->n_upstreams * sizeof(struct gw_api_winfo));
    m->chans = calloc(c->n_upstreams, sizeof *m->chans);
    if (!box || !m->chans) {
        free(box);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    atomic_init(&box->refs, 1);
    pthread_mutex_init(&box->mu, NULL);
    box->n = c->n_upstreams;
    m->winfo = box->w;
    for (size_t i = 0; i < c->n_upstreams; i++) {
        rc = gw_upstream_chan_open_tls(st->up, c->upstreams[i], c->upstream_tls ? &tls : NULL, &m->chans[i],
                                       err);
        if (rc != MM_OK) return mm_err_prefix(err, "%s:%d: model %s", c->file, c->line, c->name);
        m->n_chans++;
        if (c->upstream_token &&
            (rc = gw_upstream_chan_set_token(m->chans[i], c->upstream_token, err)) != MM_OK)
            return mm_err_prefix(err, "%s:%d: model %s", c->file, c->line, c->name);
    }
    m->info_asked_ms = (uint64_t)mm_now_ms();
    ask_model_info(m);

    struct gw_router_opts ro = {
        .health_interval_ms = (uint32_t)c->health_check_interval_ms,
        .health_timeout_ms = (uint32_t)c->health_check_timeout_ms,
        .breaker = {.failures = (uint32_t)c->breaker_failures,
                    .cooldown_ms = (uint32_t)c->breaker_cooldown_ms},
        .retries = c->retries > 0 ? c->retries : -1,
        .gen = {.timeout_ms = (uint32_t)c->request_timeout_ms, .core_only = upstream_core_only()},
        .auth_token = c->upstream_token,
        .tls = c->upstream_tls ? &tls : NULL,
    };
    rc = gw_router_create(st->up, c->name, c->upstreams, c->n_upstreams, &ro, gw_api_svc_base(st->svc),
                          &m->router, err);
    if (rc != MM_OK) return mm_err_prefix(err, "%s:%d", c->file, c->line);
    rc = gw_pool_create((uint32_t)c->preprocess_threads, 0, &m->pool, err);
    if (rc != MM_OK) return mm_err_prefix(err, "%s:%d: model %s", c->file, c->line, c->name);

    const char *l_prompt[] = {m->name, "prompt"}, *l_comp[] = {m->name, "completion"},
               *l_cached[] = {m->name, "cached"};
    const char *l_img[] = {m->name, "image"}, *l_vid[] = {m->name, "video"};
    m->tok_prompt = gw_metric_series(st->m.tokens, l_prompt);
    m->tok_completion = gw_metric_series(st->m.tokens, l_comp);
    m->tok_cached = gw_metric_series(st->m.tokens, l_cached);
    m->media_image = gw_metric_series(st->m.media, l_img);
    m->media_video = gw_metric_series(st->m.media, l_vid);
    return MM_OK;
}

static void model_free(struct gw_api_model *m)
{
    /* the service loop is stopped: router timers cannot fire while we tear down */
    if (m->router) gw_router_destroy(m->router);
    if (m->pool) gw_pool_destroy(m->pool);
    for (size_t i = 0; i < m->n_chans; i++) gw_upstream_chan_close(m->chans[i]);
    free(m->chans);
    if (m->winfo) box_unref(box_of(m));
    if (m->inst) gw_plugin_instance_destroy(m->plugin, m->inst);
    if (m->plugin) gw_plugin_unload(m->plugin);
    tok_release(m->tokref);
    free(m->tls_ca_pem);
}

struct gw_api_model *gw_api_find_model(struct gw_api_state *st, const char *name)
{
    for (size_t i = 0; i < st->n_models; i++)
        if (strcmp(st->models[i].name, name) == 0) return &st->models[i];
    return NULL;
}

/* ---- the generation ---- */

/* file: URLs are opened beneath the folder's real path (openat2 RESOLVE_BENEATH, gw_api_fileurl.c); a folder
 * that is missing is an error at its line here (as a tokenizer is), not a 400 at every request. */
static int32_t local_media_resolve(struct gw_api_state *st, const struct gw_media_conf *mc,
                                   struct mm_err *err)
{
    const char *dir = mc->local_media_path;
    st->local_media_real = realpath(dir, NULL);
    struct stat sb;
    const char *why = !st->local_media_real                                          ? strerror(errno)
                      : stat(st->local_media_real, &sb) != 0 || !S_ISDIR(sb.st_mode) ? "not a directory"
                                                                                     : NULL;
    if (!why) return MM_OK;
    return mm_err_set(err, MM_INVALID, "%s:%d: \"allowed_local_media_path\" directive: \"%s\": %s",
                      mc->local_media_file, (int)mc->local_media_line, dir, why);
}

int32_t gw_api_registry_build(struct gw_api_state *st, const struct gw_module_ctx *ctx, struct mm_err *err)
{
    const struct gw_config *c = ctx->config;
    st->config = c;
    st->check_only = ctx->check_only;
    int32_t rc;
    const struct gw_media_conf *mc = &c->media;
    rc = gw_fetch_policy_create(mc->fetch_allow, mc->n_fetch_allow, mc->fetch_deny, mc->n_fetch_deny,
                                &st->policy, err);
    if (rc != MM_OK) return mm_err_prefix(err, "%s: media", c->path);
    if (mc->local_media_path && (rc = local_media_resolve(st, mc, err)) != MM_OK) return rc;
    if (!ctx->check_only) {
        if ((rc = gw_fetch_global_init(err)) != MM_OK) return rc;
        if ((rc = gw_media_global_init(err)) != MM_OK) return rc;
        if ((rc = gw_api_svc_create(&st->svc, err)) != MM_OK) return rc;
        if ((rc = up_acquire(&st->up, err)) != MM_OK) return rc;
        struct gw_fetch_opts fo = {
            .policy = st->policy,
            .limits = {.max_bytes = (uint64_t)mc->fetch_max_bytes,
                       .timeout_ms = (uint32_t)mc->fetch_timeout_ms,
                       .connect_timeout_ms = (uint32_t)mc->fetch_connect_timeout_ms,
                       .max_redirects = mc->fetch_max_redirects ? (uint32_t)mc->fetch_max_redirects
                                                                : GW_FETCH_NO_REDIRECTS},
        };
        if ((rc = gw_fetcher_create(gw_api_svc_base(st->svc), &fo, &st->fetcher, err)) != MM_OK) return rc;
    }
    st->models = c->n_models ? calloc(c->n_models, sizeof *st->models) : NULL;
    if (c->n_models && !st->models) return mm_err_set(err, MM_NOMEM, "out of memory");
    for (size_t i = 0; i < c->n_models; i++) {
        st->n_models = i + 1;
        if ((rc = model_build(st, &st->models[i], &c->models[i], ctx, err)) != MM_OK) return rc;
    }
    if (!ctx->check_only && (rc = gw_api_svc_start(st->svc, err)) != MM_OK) return rc;
    return MM_OK;
}

void gw_api_registry_free(struct gw_api_state *st)
{
    gw_api_svc_stop(st->svc);
    if (st->fetcher) gw_fetcher_destroy(st->fetcher);
    for (size_t i = 0; i < st->n_models; i++) model_free(&st->models[i]);
    free(st->models);
    gw_api_svc_free(st->svc);
    gw_fetch_policy_destroy(st->policy);
    free(st->local_media_real);
    if (st->up) up_release();
}
