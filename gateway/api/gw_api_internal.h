/* Private to gateway/api: the model registry of one configuration generation, the request pipeline and
 * the helpers the endpoint files share. See docs/design/api.md for the why.
 *
 * Threads. Module init/fini run on the main thread. Handlers and everything that touches a struct
 * gw_api_req run on that request's event loop. Media fetches run on the generation's service loop
 * (gw_api_svc: one thread with its own libevent base that also drives the routers' health checks);
 * preprocessing runs on the model's gw_pool. Both hand their results back through the request loop's
 * executor. */
#ifndef GW_API_INTERNAL_H
#define GW_API_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "gw_api_auth.h"
#include "gw_api_json.h"
#include "gw_api_stop.h"
#include "gw_fetch.h"
#include "gw_http.h"
#include "gw_media.h"
#include "gw_metrics.h"
#include "gw_module.h"
#include "gw_plugin.h"
#include "gw_pool.h"
#include "gw_router.h"
#include "gw_tokenizer.h"
#include "mm_buf.h"
#include "mm_clock.h"

#define GW_API_COMP "api"
#define GW_API_MAX_STOP_IDS 64   /* plugin stops + eos + request stop_token_ids */
#define GW_API_MAX_STOP_STRS 16  /* `stop` strings per request */
#define GW_API_MAX_STOP_LEN 1024 /* bytes per stop string */
#define GW_API_MAX_N 128         /* choices per request */
#define GW_API_MAX_TOP_LOGPROBS 20
#define GW_API_MAX_EOS 16
#define GW_API_SSE_HIGH (64 * 1024) /* pause the worker stream past this many queued bytes */
#define GW_API_SSE_LOW (16 * 1024)  /* resume at or below this */
/* jansson allocations a handler makes in its request's arena, counted with the arena's other use; past it
 * they come from malloc (a large body does not grow the arena beyond what the HTTP layer reuses) */
#define GW_API_JSON_ARENA_CAP (12 * 1024)

/* ---- errors ---- */

/** An API error on its way to the client: HTTP status, OpenAI type/code, the offending parameter. */
struct gw_api_error {
    int status;
    const char *type; /* NULL: the usual one for the status */
    const char *code; /* NULL: JSON null */
    char param[128];  /* "" = null */
    char msg[512];
};

/** Fill e; returns -1 so parsers can `return gw_api_fail(...)`. param may be NULL. */
int gw_api_fail(struct gw_api_error *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/** Fill e from an mm_err (status from the gateway's one table). Returns -1. */
int gw_api_fail_mm(struct gw_api_error *e, const struct mm_err *err, const char *param);
/** Send e (as a response, or as an SSE error event when the stream has started). */
void gw_api_send_error(struct gw_request *req, const struct gw_api_error *e);

/* ---- the service loop ---- */

struct gw_api_svc;
int32_t gw_api_svc_create(struct gw_api_svc **out, struct mm_err *err);
struct event_base *gw_api_svc_base(struct gw_api_svc *s);
const struct gw_executor *gw_api_svc_executor(struct gw_api_svc *s);
/** Start the thread (after everything bound to the base was created). */
int32_t gw_api_svc_start(struct gw_api_svc *s, struct mm_err *err);
/** Stop and join the thread; tasks posted afterwards are refused. Objects bound to the base can then be
 * destroyed from the caller's thread. */
void gw_api_svc_stop(struct gw_api_svc *s);
void gw_api_svc_free(struct gw_api_svc *s);

/* ---- metrics ---- */

/** Process-wide families (registered idempotently at every init). */
struct gw_api_metrics {
    struct gw_metric *requests;   /* {model, endpoint, status} */
    struct gw_metric *duration;   /* {model, endpoint} histogram */
    struct gw_metric *ttft;       /* {model, endpoint} histogram */
    struct gw_metric *preprocess; /* {stage} histogram: fetch, decode, resize, tokenize */
    struct gw_metric *tokens;     /* {model, kind}: prompt, completion, cached */
    struct gw_metric *media;      /* {model, kind}: image, video */
    struct gw_metric *w_health;   /* {model, worker}: 1 healthy, 0.5 unknown, 0 unhealthy */
    struct gw_metric *w_breaker;  /* {model, worker}: 0 closed, 1 half-open, 2 open */
    struct gw_metric *w_inflight; /* {model, worker} */
    struct gw_metric *w_load;     /* {model, worker} */
    struct gw_metric *w_requests; /* {model, worker} counter */
    struct gw_metric *w_failures; /* {model, worker} counter */
    struct gw_series *stage[4];   /* fetch, decode, resize, tokenize */
};
int32_t gw_api_metrics_init(struct gw_metrics *reg, struct gw_api_metrics *m, struct mm_err *err);

/* ---- registry ---- */

struct gw_api_tokcache;
struct gw_api_tok; /* a loaded tokenizer shared between generations (same file, same mtime) */

/** What a worker said in ModelInfo (filled on the gRPC completion thread under model->mu). */
struct gw_api_winfo {
    int known;
    uint32_t vocab;
    uint64_t max_context;
    uint32_t eos[GW_API_MAX_EOS];
    uint32_t n_eos;
    int warned;
    char model_type[64];   /* "" when not reported */
    uint32_t merge_factor; /* patch rows per media token; 0 when not reported (or no vision tower) */
    int type_checked;      /* compared with the plugin's match_model_type and merge (on a loop thread) */
};

struct gw_api_state;

struct gw_api_model {
    struct gw_api_state *st;
    const struct gw_model_conf *conf;
    const char *name;
    struct gw_plugin *plugin;
    struct mmgw_plugin_instance *inst;
    const struct mmgw_plugin *vt;
    struct gw_api_tok *tokref;
    const struct gw_tokenizer *tok;
    struct gw_api_tokcache *tokcache; /* shared with tokref; may be NULL */
    uint32_t vocab;
    uint32_t stop_ids[8]; /* the plugin's stop tokens */
    size_t n_stop_ids;
    uint32_t parser_ids[8]; /* the plugin's parser tokens: shown even when skip_special_tokens */
    size_t n_parser_ids;
    const char *marker[2]; /* media markers by kind (image, video); NULL if the plugin has none */
    size_t marker_len[2];
    struct gw_router *router;
    char *tls_ca_pem; /* upstream_tls_ca's certificates, read at load (NULL: plaintext or gRPC's roots) */
    struct gw_pool *pool;
    struct gw_upstream_chan **chans; /* one per upstream, for ModelInfo */
    size_t n_chans;
    struct gw_api_winfo *winfo; /* one per upstream, in a shared box (gw_api_registry.c) */
    uint64_t info_asked_ms;
    int64_t created;
    /* metric series of this model */
    struct gw_series *tok_prompt, *tok_completion, *tok_cached, *media_image, *media_video;
};

/* One API route as registered: the handler behind the key check (gw_api_module.c). */
struct gw_api_route {
    gw_handler_fn fn;
    struct gw_api_state *st;
    bool open; /* no api_key asked (health) */
};
#define GW_API_MAX_ROUTES 8

struct gw_api_state {
    const struct gw_config *config;
    struct gw_api_auth auth;
    struct gw_api_route routes[GW_API_MAX_ROUTES];
    struct gw_api_model *models;
    size_t n_models;
    struct gw_api_svc *svc;
    struct gw_fetch_policy *policy;
    struct gw_fetcher *fetcher; /* on svc */
    struct gw_upstream *up;     /* shared by every generation */
    char *local_media_real;     /* allowed_local_media_path's real path (file: URLs); NULL = refused */
    struct gw_metrics *reg;
    struct gw_api_metrics m;
    bool collecting;
    bool check_only;
};

struct gw_api_model *gw_api_find_model(struct gw_api_state *st, const char *name);
/** The context length to enforce: the config's max_model_len, else the smallest a worker reported,
 * else 0 (unknown: the worker checks). */
uint64_t gw_api_max_model_len(struct gw_api_model *m);
/** Copy the eos ids the workers reported (union, at most cap) and return their count. Asks again
 * (at most once a second) while no worker has answered. */
size_t gw_api_worker_eos(struct gw_api_model *m, uint32_t *out, size_t cap);

int32_t gw_api_registry_build(struct gw_api_state *st, const struct gw_module_ctx *ctx, struct mm_err *err);
void gw_api_registry_free(struct gw_api_state *st);

/* ---- request parameters ---- */

enum gw_api_kind { GW_API_CHAT = 0, GW_API_COMPLETION = 1, GW_API_TOKENIZE = 2 };

struct gw_api_params {
    bool stream, include_usage;
    int64_t max_tokens; /* -1 unset */
    int64_t min_tokens; /* -1 unset */
    bool has_temperature, has_top_p, has_top_k, has_min_p, has_seed;
    double temperature, top_p, min_p;
    int64_t top_k;
    uint64_t seed;
    uint32_t n;
    bool logprobs;    /* chat: logprobs; completions: logprobs != null */
    int top_logprobs; /* chat: top_logprobs; completions: logprobs value */
    bool ignore_eos;
    bool tokens_as_ids; /* vLLM return_tokens_as_token_ids */
    bool skip_special;  /* vLLM skip_special_tokens (default true) */
    const char *stop[GW_API_MAX_STOP_STRS];
    size_t stop_len[GW_API_MAX_STOP_STRS];
    size_t n_stop;
    uint32_t stop_ids[GW_API_MAX_STOP_IDS];
    size_t n_stop_ids;
    bool add_special_tokens;
    bool add_generation_prompt;
    bool return_token_strs;
    bool has_tools;
};

/** Parse the sampling and streaming fields shared by /v1/chat/completions and /v1/completions. */
int gw_api_params_parse(json_t *body, enum gw_api_kind kind, uint32_t vocab, struct gw_api_params *p,
                        struct gw_api_error *e);

/* ---- the request pipeline ---- */

struct gw_api_media {
    int32_t kind;    /* enum mmgw_media_kind */
    json_t *src;     /* the JSON string holding the URL (a reference we own) */
    const char *url; /* in src */
    size_t url_len;
    char param[128]; /* where it came from, for errors: messages[1].content[0].image_url */
    bool rendered;   /* the template kept it (media_order) */
    bool done;
    uint8_t *bytes; /* fetched bytes (http) */
    size_t n_bytes;
    struct gw_media_result res;
    uint64_t hash;
    size_t range_first, n_ranges; /* its placeholder runs in gw_api_req.ranges */
};

struct gw_api_toolcall {
    int32_t index;
    char id[32];
    char *name; /* set on the call's first delta */
    struct mm_buf args;
};

struct gw_api_choice {
    uint32_t index;
    struct gw_tok_stream dec;
    struct gw_api_stop stop;
    struct mmgw_output_parser *parser;
    bool finished, role_sent, finish_sent;
    bool worker_complete; /* the worker sent its Complete for this choice */
    bool worker_abort; /* ... with finish_reason "abort": the answer is lost (finalize fails the request) */
    const char *finish_reason;
    uint32_t n_tokens;
    uint32_t n_calls_total;
    /* streaming: what goes into the next chunk; otherwise: everything */
    struct mm_buf text, content, reasoning;
    struct gw_api_toolcall *calls;
    size_t n_calls, cap_calls;
    struct mm_buf lp;                                        /* logprob entries, comma separated */
    struct mm_buf lp_tokens, lp_values, lp_tops, lp_offsets; /* completions' legacy arrays */
    size_t n_lp;
    size_t text_offset; /* characters the detokenizer has released (completions' logprobs.text_offset) */
};

struct gw_api_req {
    struct gw_request *http;
    struct gw_api_state *st;
    struct gw_api_model *model;
    enum gw_api_kind kind;
    bool chat_prompt;     /* the prompt was rendered from messages (markers = media_order) */
    const char *endpoint; /* metrics label */
    json_t *body;
    struct gw_api_params p;
    struct gw_api_stop_set stops;
    char id[48]; /* chatcmpl-... / cmpl-... */
    int64_t created;
    /* prompt */
    struct mm_buf prompt; /* rendered chat prompt, or the completion prompt text */
    char *norm_json;      /* the normalised request we dumped (owned), when media parts were rewritten */
    const char *norm;     /* the request text handed to the plugin: norm_json, or the body as received */
    size_t norm_len;
    uint32_t *prompt_ids; /* a completion prompt given as token ids */
    size_t n_prompt_ids;
    bool tokenize_plain; /* /tokenize of a plain prompt: no media markers */
    struct gw_api_media *media;
    size_t n_media;
    uint32_t *media_order;
    uint32_t n_order;
    size_t media_left;
    struct gw_tok_ids ids;
    /* generation */
    Mmgw__Worker__V1__GenerateRequest gr;
    Mmgw__Worker__V1__SamplingParams sp;
    Mmgw__Worker__V1__MultimodalItem *items;
    Mmgw__Worker__V1__MultimodalItem **item_ptrs;
    Mmgw__Worker__V1__Tensor *tensors;
    Mmgw__Worker__V1__PlaceholderRange *ranges;
    Mmgw__Worker__V1__PlaceholderRange **range_ptrs;
    int64_t *grids;
    uint32_t stop_ids[GW_API_MAX_STOP_IDS]; /* all ids whose text is never shown */
    size_t n_stop_ids;
    struct gw_route_call *call;
    struct gw_api_choice *choices;
    uint32_t n_choices, n_finished;
    uint32_t n_lost; /* choices the worker ended "abort" (never finished) */
    uint32_t prompt_tokens, cached_tokens;
    uint64_t len_cap;     /* tokens per choice the context leaves when max_tokens is unset (0: none) */
    struct mm_buf out;    /* SSE bytes not yet accepted by the transport */
    struct mm_buf prefix; /* the chunk JSON up to "choices":[ */
    int pending;          /* async operations whose completion will come back to us */
    bool aborted, finished, streaming, paused, metrics_done;
    /* Set (by the loop thread) when the request is over: finished, aborted by the client, or failed. Its
     * preprocessing jobs poll it from pool threads (gw_media_options.cancel) and stop at their next check.
     * Safe to read there: r is freed only once pending is 0, and a job's pending hold is dropped on the loop
     * after the job has returned from gw_media_process. */
    atomic_bool stop_media;
    bool finished_stream; /* the last SSE bytes are queued in out: end the stream once they are written */
    char rid[40];         /* the worker request_id */
    uint32_t worker_stops[GW_API_MAX_STOP_IDS];
    int64_t t_start_ns, t_first_ns;
    uint64_t tokenize_ns;
};

/** Fill e for media item m that failed with code and msg (bytes_stage: while reading or decoding the bytes
 * sent or fetched, where MM_TOO_LARGE is a 413). Returns -1. */
int gw_api_media_error(struct gw_api_error *e, const struct gw_api_media *m, int32_t code, bool bytes_stage,
                       const char *msg);
/** Start the pipeline for a parsed request (media → prompt → generate). Takes over r. */
void gw_api_pipeline_start(struct gw_api_req *r);
/** Build the prompt ids once media are ready; 0 or -1 with e. */
int gw_api_prompt_build(struct gw_api_req *r, struct gw_api_error *e);
/** Send the request to the model's workers and stream the answer back. */
void gw_api_generate(struct gw_api_req *r);
/** The request failed before any answer: send e and release. */
void gw_api_req_fail(struct gw_api_req *r, const struct gw_api_error *e);
/** Create / free the per-request context (arena-free: it outlives handler calls). */
struct gw_api_req *gw_api_req_new(struct gw_request *http, struct gw_api_state *st, enum gw_api_kind kind,
                                  const char *endpoint);
void gw_api_req_release(struct gw_api_req *r);
/** An asynchronous job of r's (r->pending++ when it was started) came back on r's loop: drop its hold.
 * True when the request is over (the client left): the caller stops, r may be gone. */
bool gw_api_req_async_back(struct gw_api_req *r);
/** The two halves of new/release that do not touch the HTTP request's lifetime (no reference, no abort
 * callback): the fuzz harness (tests/fuzz/api) drives the pipeline's steps on a context of its own. init
 * reads only http->start_ns and http->arena (NULL: buffers on the heap); clear frees everything r owns. */
void gw_api_req_init(struct gw_api_req *r, struct gw_request *http, struct gw_api_state *st,
                     enum gw_api_kind kind, const char *endpoint);
void gw_api_req_clear(struct gw_api_req *r);
/** Record request metrics (status) once. */
void gw_api_req_metrics(struct gw_api_req *r, int status);

/* ---- endpoints ---- */

void gw_api_handle_chat(struct gw_request *req, void *ud);
void gw_api_handle_completions(struct gw_request *req, void *ud);
void gw_api_handle_tokenize(struct gw_request *req, void *ud);
void gw_api_handle_detokenize(struct gw_request *req, void *ud);
void gw_api_handle_models(struct gw_request *req, void *ud);
/** GET /v1/models/{model}: one model object, or 404 model_not_found. */
void gw_api_handle_model(struct gw_request *req, void *ud);
void gw_api_handle_health(struct gw_request *req, void *ud);

/** The request body as JSON text: without one leading UTF-8 byte order mark (RFC 8259 §8.1), never NULL. */
const char *gw_api_body_text(const struct gw_request *req, size_t *len);
/** Parse the body (gw_api_body_text) as a JSON object, find the model. 0 or -1 with e (400 / 404). */
int gw_api_parse_body(struct gw_request *req, struct gw_api_state *st, json_t **body,
                      struct gw_api_model **model, struct gw_api_error *e);
/** gw_api_parse_body into r->body and r->model, then next(r) on r's loop; a parse error fails r. A body
 * over GW_API_INLINE_PARSE_MAX is parsed on a preprocessing pool: jansson reads ~100 MB/s, so a 20 MB
 * video data: URL would hold the loop, and every connection on it, for 200 ms. */
#define GW_API_INLINE_PARSE_MAX (256 * 1024)
void gw_api_parse_then(struct gw_api_req *r, void (*next)(struct gw_api_req *r));

/** Collect and normalise the media parts of a chat request (in place), 0 or -1 with e. */
int gw_api_chat_collect(struct gw_api_req *r, struct gw_api_error *e);
/** Collect the media, normalise the request and render it through the plugin's template into r->prompt. */
int gw_api_chat_prepare(struct gw_api_req *r, struct gw_api_error *e);
/** Collect multi_modal_data of a completion request. */
int gw_api_completion_collect(struct gw_api_req *r, struct gw_api_error *e);
/** /v1/completions after the parameters: the prompt (text or ids), multi_modal_data, add_special_tokens. */
int gw_api_completion_prepare(struct gw_api_req *r, struct gw_api_error *e);
/** /tokenize after the body: a chat (rendered as gw_api_chat_prepare does) or a plain prompt. */
int gw_api_tokenize_prepare(struct gw_api_req *r, struct gw_api_error *e);

/** Random lower-case hex into out (n chars + NUL). */
void gw_api_random_hex(char *out, size_t n);

#endif
