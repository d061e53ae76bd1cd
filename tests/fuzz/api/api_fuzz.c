/* Fuzz harness of gateway/api before the worker (see api_fuzz.h).
 *
 * The context: two models of the M3 plugin (linked in, so the fuzzer sees the template's coverage) sharing a
 * small demo-shaped tokenizer (tokenizer.json here, 5 KB: `mmgw-mktokenizer --merges 24` with its reserved
 * slots dropped, the added tokens renumbered densely and the JSON compacted; M3's special tokens); "m3"
 * with the defaults, "m3-tight" with a context of 1024 tokens, at most 2 media and video disabled (as the
 * registry disables a kind whose expansion does not fit the tokenizer). Served together, "model" is
 * required; "m3" alone (with data: URLs switched off) it may be left out. data: URLs are decoded under a
 * 4 KiB cap; file: URLs are accepted beneath /tmp. Nothing is fetched or read: an http(s) or file:
 * item's URL text stands in for its bytes, and instead of decoding images (tests/fuzz/media does that) each
 * item gets a small grid drawn from its bytes, which is all the prompt build reads. The steps are the
 * handlers' own (gw_api_parse_body, gw_api_params_parse, gw_api_*_prepare, gw_api_media_error,
 * gw_api_prompt_build, gw_api_choices_init) on a context made with gw_api_req_init and freed with
 * gw_api_req_clear. */
#include "api_fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gw_api_dataurl.h"
#include "gw_api_fileurl.h"
#include "gw_api_internal.h"
#include "gw_api_output.h"
#include "gw_api_tokcache.h"
#include "gw_config.h"
#include "gw_plugin.h"
#include "mm_dtype.h"

#define FAIL(...)                                                                                            \
    do {                                                                                                     \
        fprintf(stderr, "api fuzz invariant broken: " __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                                                 \
        abort();                                                                                             \
    } while (0)

#define TIGHT_MODEL_LEN 1024
#define DATA_CAP 4096

static struct {
    int ready;
    int verbose; /* API_FUZZ_VERBOSE set: one line per endpoint run (triage) */
    struct gw_config *cfg, *cfg_nodata;
    struct gw_tokenizer *tok;
    struct gw_api_tokcache *cache;
    struct gw_plugin plugin;
    struct mmgw_plugin_instance *inst;
    struct gw_api_model models[2];
    struct gw_api_state two; /* both models: "model" is required */
    struct gw_api_state one; /* "m3" alone, data: URLs off: "model" may be left out */
} H;

/* What the registry's model_build does once a plugin and a tokenizer are loaded (the registry dlopens the
 * plugin; here it is linked in). */
static void model_setup(struct gw_api_model *m, const struct gw_model_conf *c)
{
    m->conf = c;
    m->name = c->name;
    m->plugin = &H.plugin;
    m->inst = H.inst;
    m->vt = &H.plugin.vt;
    m->tok = H.tok;
    m->tokcache = H.cache;
    m->vocab = gw_tokenizer_vocab_size(H.tok);
    const char *const *stops = m->vt->stop_tokens(m->inst);
    for (size_t i = 0; stops && stops[i] && m->n_stop_ids < 8; i++)
        if (gw_tokenizer_token_to_id(H.tok, stops[i], strlen(stops[i]), &m->stop_ids[m->n_stop_ids++]) !=
            MM_OK)
            FAIL("stop token %s is not in the tokenizer", stops[i]);
    const char *const *ptoks = m->vt->parser_tokens(m->inst);
    for (size_t i = 0; ptoks && ptoks[i] && m->n_parser_ids < 8; i++)
        if (gw_tokenizer_token_to_id(H.tok, ptoks[i], strlen(ptoks[i]), &m->parser_ids[m->n_parser_ids]) ==
            MM_OK)
            m->n_parser_ids++;
    for (int32_t k = 0; k < 2; k++) {
        const char *mk = m->vt->media_marker(m->inst, k);
        uint32_t id;
        if (!mk || gw_tokenizer_token_to_id(H.tok, mk, strlen(mk), &id) != MM_OK)
            FAIL("media marker %d is not in the tokenizer", (int)k);
        m->marker[k] = mk;
        m->marker_len[k] = strlen(mk);
    }
    if (strcmp(m->name, "m3-tight") == 0) m->marker[MMGW_MEDIA_VIDEO] = NULL; /* video parts get a 400 */
}

static void setup(void)
{
    /* the upstream is required by the config and never contacted: no router is made here */
    static const char conf_fmt[] = "model m3 { plugin m3; tokenizer %s; upstream 127.0.0.1:9; }\n"
                                   "model m3-tight { plugin m3; tokenizer %s; upstream 127.0.0.1:9;"
                                   " max_model_len %d; max_media_per_request 2; }\n"
                                   "media { fetch_max_bytes %d; allowed_local_media_path %s; }\n";
    const char *tokpath = MMGW_FUZZ_API_DIR "/tokenizer.json";
    char conf[2048];
    snprintf(conf, sizeof conf, conf_fmt, tokpath, tokpath, TIGHT_MODEL_LEN, DATA_CAP, "/tmp");
    struct mm_err err;
    mm_err_clear(&err);
    if (gw_config_parse_text("fuzz.conf", conf, strlen(conf), "/", false, &H.cfg, &err) != MM_OK)
        FAIL("config: %s", err.msg);
    /* the same with data: URLs switched off (only its media block is read) */
    snprintf(conf, sizeof conf, "media { allow_data_urls off; }\n");
    if (gw_config_parse_text("nodata.conf", conf, strlen(conf), "/", false, &H.cfg_nodata, &err) != MM_OK)
        FAIL("config: %s", err.msg);
    if (gw_tokenizer_load_file(tokpath, &H.tok, &err) != MM_OK) FAIL("tokenizer: %s", err.msg);
    H.cache = gw_api_tokcache_create(H.tok, 256 * 1024);
    const struct mmgw_plugin *vt = mmgw_plugin_entry(gw_plugin_host_api());
    if (gw_plugin_validate(vt, "m3 (linked in)", &err) != MM_OK) FAIL("plugin: %s", err.msg);
    memcpy(&H.plugin.vt, vt, sizeof H.plugin.vt);
    if (gw_plugin_instance_create(&H.plugin, NULL, 0, &H.inst, &err) != MM_OK) FAIL("instance: %s", err.msg);
    if (H.cfg->n_models != 2) FAIL("config has %zu models", H.cfg->n_models);
    for (size_t i = 0; i < 2; i++) model_setup(&H.models[i], &H.cfg->models[i]);
    /* file: URLs beneath /tmp (what the registry resolves from allowed_local_media_path) */
    static char tmp_dir[] = "/tmp";
    H.two = (struct gw_api_state){
        .config = H.cfg, .models = H.models, .n_models = 2, .check_only = true, .local_media_real = tmp_dir};
    H.one =
        (struct gw_api_state){.config = H.cfg_nodata, .models = H.models, .n_models = 1, .check_only = true};
    if (H.cfg->media.fetch_max_bytes != DATA_CAP || !H.cfg->media.allow_data_urls ||
        H.cfg_nodata->media.allow_data_urls || !H.cfg->media.local_media_path ||
        H.cfg_nodata->media.local_media_path)
        FAIL("media config");
    H.verbose = getenv("API_FUZZ_VERBOSE") != NULL;
    H.ready = 1;
}

/* ---- invariants ---- */

static void check_error(const struct gw_api_error *e)
{
    /* 500 is documented only for a plugin/tokenizer mismatch, which this pair does not have */
    if (!((e->status >= 400 && e->status <= 499) || e->status == 503))
        FAIL("status %d (%s)", e->status, e->msg);
    if (!e->msg[0]) FAIL("status %d with an empty message", e->status);
    for (const char *c = e->msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) FAIL("a control character in the message: %s", e->msg);
    /* only the body as a whole has no field to blame */
    bool body_level = strncmp(e->msg, "the request body", 16) == 0;
    if (e->status < 500 && !body_level && !e->param[0])
        FAIL("status %d without a param: %s", e->status, e->msg);
    /* "'stop[3]' must be ..." names the field: param is that field or one above it */
    if (e->msg[0] == '\'' && e->param[0]) {
        size_t pl = strlen(e->param);
        if (strncmp(e->msg + 1, e->param, pl) != 0 || !e->msg[1 + pl] || !strchr("'.[", e->msg[1 + pl]))
            FAIL("param '%s' is not the field the message names: %s", e->param, e->msg);
    }
    /* what the client receives */
    char *json = gw_http_error_json(e->status, e->type, e->msg, e->param[0] ? e->param : NULL, e->code);
    if (!json) FAIL("no error JSON for: %s", e->msg);
    json_t *j = json_loads(json, 0, NULL);
    json_t *err = json_object_get(j, "error");
    if (!json_is_string(json_object_get(err, "message")) || !json_is_string(json_object_get(err, "type")))
        FAIL("error JSON without message/type: %s", json);
    json_t *param = json_object_get(err, "param");
    if (e->param[0] ? !json_is_string(param) : !json_is_null(param)) FAIL("error JSON param: %s", json);
    json_decref(j);
    free(json);
}

static void check_params(const struct gw_api_req *r)
{
    const struct gw_api_params *p = &r->p;
    if (r->kind == GW_API_TOKENIZE) return;
    if (p->max_tokens != -1 && (p->max_tokens < 1 || p->max_tokens > INT32_MAX))
        FAIL("max_tokens %lld", (long long)p->max_tokens);
    if (p->min_tokens != -1 && (p->min_tokens < 0 || p->min_tokens > INT32_MAX))
        FAIL("min_tokens %lld", (long long)p->min_tokens);
    if (p->has_temperature && !(p->temperature >= 0 && p->temperature <= 2))
        FAIL("temperature %g", p->temperature);
    if (p->has_top_p && !(p->top_p > 0 && p->top_p <= 1)) FAIL("top_p %g", p->top_p);
    if (p->has_top_k && (p->top_k < 1 || p->top_k > INT32_MAX)) FAIL("top_k %lld", (long long)p->top_k);
    if (p->has_min_p && !(p->min_p >= 0 && p->min_p <= 1)) FAIL("min_p %g", p->min_p);
    if (p->n < 1 || p->n > GW_API_MAX_N) FAIL("n %u", p->n);
    if (p->top_logprobs < 0 || p->top_logprobs > GW_API_MAX_TOP_LOGPROBS)
        FAIL("top_logprobs %d", p->top_logprobs);
    if (r->kind == GW_API_CHAT && p->top_logprobs > 0 && !p->logprobs) FAIL("top_logprobs without logprobs");
    if (p->include_usage && !p->stream) FAIL("include_usage without stream");
    if (p->n_stop > GW_API_MAX_STOP_STRS) FAIL("%zu stop strings", p->n_stop);
    for (size_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || p->stop_len[i] == 0 || p->stop_len[i] > GW_API_MAX_STOP_LEN ||
            strlen(p->stop[i]) != p->stop_len[i])
            FAIL("stop[%zu] of %zu bytes", i, p->stop_len[i]);
    if (p->n_stop_ids > GW_API_MAX_STOP_IDS / 2) FAIL("%zu stop ids", p->n_stop_ids);
    for (size_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] >= r->model->vocab) FAIL("stop id %u", p->stop_ids[i]);
}

static void check_media(const struct gw_api_req *r)
{
    if (r->n_media > (size_t)r->model->conf->max_media_per_request) FAIL("%zu media", r->n_media);
    for (size_t k = 0; k < r->n_media; k++) {
        const struct gw_api_media *m = &r->media[k];
        if ((m->kind != MMGW_MEDIA_IMAGE && m->kind != MMGW_MEDIA_VIDEO) || !r->model->marker[m->kind])
            FAIL("media %zu of kind %d", k, (int)m->kind);
        if (!m->param[0]) FAIL("media %zu without a param", k);
        bool ok = gw_api_is_data_url(m->url, m->url_len) ||
                  (m->url_len >= 7 && strncasecmp(m->url, "http://", 7) == 0) ||
                  (m->url_len >= 8 && strncasecmp(m->url, "https://", 8) == 0);
        if (gw_api_is_file_url(m->url, m->url_len)) {
            /* accepted only where configured, well-formed, and beneath the folder */
            const char *root = r->st->local_media_real;
            char *path = NULL;
            struct mm_err err;
            ok = root && gw_api_file_url_path(m->url, m->url_len, &path, &err) == MM_OK &&
                 (gw_api_file_beneath(root, path) ||
                  gw_api_file_beneath(r->st->config->media.local_media_path, path));
            free(path);
        }
        if (!ok) FAIL("media %zu has the URL %.*s", k, (int)m->url_len, m->url);
    }
    if (r->chat_prompt) {
        if (r->n_order > r->n_media) FAIL("%u rendered of %zu media", r->n_order, r->n_media);
        for (uint32_t i = 0; i < r->n_order; i++)
            if (r->media_order[i] >= r->n_media) FAIL("media_order[%u] = %u", i, r->media_order[i]);
    }
}

static void check_prompt(const struct gw_api_req *r)
{
    uint32_t vocab = r->model->vocab;
    for (size_t i = 0; i < r->ids.n; i++)
        if (r->ids.ids[i] >= vocab) FAIL("prompt id %u at %zu", r->ids.ids[i], i);
    if (r->kind != GW_API_TOKENIZE) {
        if (r->ids.n == 0) FAIL("an empty prompt was accepted");
        uint64_t mml = gw_api_max_model_len(r->model);
        uint64_t want = r->ids.n + (r->p.max_tokens > 0 ? (uint64_t)r->p.max_tokens : 1);
        if (mml && want > mml)
            FAIL("%zu prompt ids + max_tokens %lld over %llu", r->ids.n, (long long)r->p.max_tokens,
                 (unsigned long long)mml);
    }
    size_t rendered = 0;
    for (size_t k = 0; k < r->n_media; k++) {
        const struct gw_api_media *m = &r->media[k];
        if (!m->rendered) continue;
        rendered++;
        if (m->n_ranges == 0) FAIL("media %zu rendered without placeholders", k);
        for (size_t i = m->range_first; i < m->range_first + m->n_ranges; i++) {
            uint32_t off = r->ranges[i].offset, len = r->ranges[i].length;
            if (len == 0 || (uint64_t)off + len > r->ids.n)
                FAIL("range %u+%u of %zu ids", off, len, r->ids.n);
            for (uint32_t t = 1; t < len; t++)
                if (r->ids.ids[off + t] != r->ids.ids[off]) FAIL("range %u+%u is not one id", off, len);
        }
    }
    if (r->chat_prompt && rendered != r->n_order)
        FAIL("%zu rendered, media_order has %u", rendered, r->n_order);
    if (!r->chat_prompt && rendered != r->n_media)
        FAIL("%zu of %zu completion media used", rendered, r->n_media);
}

/* ---- media without a decoder ---- */

/* A processed item's shape, drawn from its bytes: grids of 2..8 patches a side, videos of 1..3 temporal
 * groups with their frame numbers (what expand_media reads). */
static int stub_result(struct gw_media_result *res, int32_t kind, const uint8_t *b, size_t n)
{
    memset(res, 0, sizeof *res);
    res->kind = kind;
    res->dtype = MM_DT_BF16;
    res->grid_thw[0] = 1;
    res->grid_thw[1] = 2 * (1 + (n > 0 ? b[0] % 4 : 0));
    res->grid_thw[2] = 2 * (1 + (n > 1 ? b[1] % 4 : 0));
    res->n_frames = 1;
    if (kind == MMGW_MEDIA_VIDEO) {
        res->grid_thw[0] = 1 + (n > 2 ? b[2] % 3 : 0);
        res->n_frames = (uint32_t)res->grid_thw[0] * 2;
        res->frame_indices = malloc(res->n_frames * sizeof *res->frame_indices);
        if (!res->frame_indices) return -1;
        for (uint32_t i = 0; i < res->n_frames; i++) res->frame_indices[i] = i * 5;
        res->total_frames = res->n_frames * 5;
        res->source_fps = 10.0;
    }
    res->n_patches = (uint64_t)(res->grid_thw[0] * res->grid_thw[1] * res->grid_thw[2]);
    res->patch_dim = 1176;
    return 0;
}

/* The media step of the pipeline (gw_api_media.c) for the items the template kept: data: URLs decoded as
 * on the pool, under fetch_max_bytes; a failure is reported as the pipeline reports it. */
static int load_media(struct gw_api_req *r, struct gw_api_error *e)
{
    uint64_t cap = (uint64_t)r->st->config->media.fetch_max_bytes;
    for (size_t k = 0; k < r->n_media; k++) {
        struct gw_api_media *m = &r->media[k];
        if (!m->rendered) continue;
        const uint8_t *bytes = (const uint8_t *)m->url;
        size_t n = m->url_len;
        struct gw_api_dataurl du = {0};
        if (gw_api_is_data_url(m->url, m->url_len)) {
            struct mm_err err;
            mm_err_clear(&err);
            int32_t rc = gw_api_dataurl_decode(m->url, m->url_len, cap, &du, &err);
            if (rc != MM_OK) {
                if (du.data) FAIL("a failed data: URL decode (%d) left data", (int)rc);
                if (rc != MM_INVALID && rc != MM_TOO_LARGE && rc != MM_NOMEM)
                    FAIL("data: URL rc %d", (int)rc);
                if (!err.msg[0]) FAIL("data: URL refused (%d) without a message", (int)rc);
                return gw_api_media_error(e, m, rc, true, err.msg);
            }
            if (du.len > cap || (du.len && !du.data)) FAIL("data: URL of %zu bytes over the cap", du.len);
            bytes = du.data;
            n = du.len;
        }
        int bad = stub_result(&m->res, m->kind, bytes, n);
        free(du.data);
        if (bad) return gw_api_fail(e, 503, NULL, "out of memory");
        m->done = true;
    }
    return 0;
}

/* ---- one endpoint ---- */

/* The prompt ids of an accepted body, to compare the paths. A chat: the chat handler hands the plugin the
 * body as received, /tokenize a re-dump of the parsed JSON; both must render the same prompt. A plain text
 * prompt: /v1/completions (marker by marker, through the piece cache) and /tokenize (in one piece) must
 * give the same ids. */
enum { IDS_NONE, IDS_CHAT, IDS_TEXT };
struct ids_copy {
    uint32_t *ids;
    size_t n;
    int set;
};

static void run(struct gw_api_state *st, enum gw_api_kind kind, const char *body, size_t len,
                struct ids_copy *out)
{
    /* only what the pipeline reads of a request: the body as received */
    struct gw_request http = {.body = body, .body_len = len};
    struct gw_api_req r;
    gw_api_req_init(&r, &http, st, kind, "fuzz");
    struct gw_api_error e = {0};
    int rc = gw_api_parse_body(&http, st, &r.body, &r.model, &e);
    if (!rc && kind != GW_API_TOKENIZE) rc = gw_api_params_parse(r.body, kind, r.model->vocab, &r.p, &e);
    if (!rc) {
        rc = kind == GW_API_CHAT         ? gw_api_chat_prepare(&r, &e)
             : kind == GW_API_COMPLETION ? gw_api_completion_prepare(&r, &e)
                                         : gw_api_tokenize_prepare(&r, &e);
    }
    if (!rc) {
        check_params(&r);
        check_media(&r);
        rc = load_media(&r, &e);
    }
    if (!rc) rc = gw_api_prompt_build(&r, &e);
    if (!rc) check_prompt(&r);
    if (!rc && kind != GW_API_TOKENIZE) {
        rc = gw_api_choices_init(&r, &e);
        if (!rc && r.n_choices != r.p.n) FAIL("%u choices for n %u", r.n_choices, r.p.n);
    }
    if (rc) check_error(&e);
    int what = r.chat_prompt                                           ? IDS_CHAT
               : r.tokenize_plain || (!r.prompt_ids && r.n_media == 0) ? IDS_TEXT
                                                                       : IDS_NONE;
    if (!rc && out && what != IDS_NONE) {
        out->ids = malloc((r.ids.n ? r.ids.n : 1) * sizeof *out->ids);
        if (out->ids) {
            memcpy(out->ids, r.ids.ids, r.ids.n * sizeof *out->ids);
            out->n = r.ids.n;
            out->set = what;
        }
    }
    if (H.verbose) {
        static const char *const names[] = {"chat", "completions", "tokenize"};
        if (rc)
            fprintf(stderr, "%s/%zu: %d [%s] %s\n", names[kind], st->n_models, e.status, e.param, e.msg);
        else
            fprintf(stderr, "%s/%zu: ok, %zu ids, %zu media\n", names[kind], st->n_models, r.ids.n,
                    r.n_media);
    }
    gw_api_req_clear(&r);
}

void api_fuzz_body(const uint8_t *data, size_t size)
{
    if (!H.ready) setup();
    /* the HTTP layer hands handlers a NUL-terminated body */
    char *body = malloc(size + 1);
    if (!body) return;
    if (size) memcpy(body, data, size);
    body[size] = '\0';
    struct ids_copy chat = {0}, completion = {0}, tokenize = {0}, chat_one = {0};
    run(&H.two, GW_API_CHAT, body, size, &chat);
    run(&H.two, GW_API_COMPLETION, body, size, &completion);
    run(&H.two, GW_API_TOKENIZE, body, size, &tokenize);
    run(&H.one, GW_API_CHAT, body, size, &chat_one);
    const struct {
        const struct ids_copy *a, *b;
        const char *what;
    } pairs[] = {{&chat, &tokenize, "chat and /tokenize"},
                 {&chat, &chat_one, "chat with the model named and defaulted"},
                 {&completion, &tokenize, "completion and /tokenize"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const struct ids_copy *a = pairs[i].a, *b = pairs[i].b;
        if (a->set && a->set == b->set &&
            (a->n != b->n || memcmp(a->ids, b->ids, a->n * sizeof *a->ids) != 0))
            FAIL("the prompt ids of %s differ (%zu and %zu ids)", pairs[i].what, a->n, b->n);
    }
    free(chat.ids);
    free(completion.ids);
    free(tokenize.ids);
    free(chat_one.ids);
    free(body);
}
