/* The parsed configuration: plain structs, filled by the table-driven parser in gw_conf.c.
 *
 * A `struct gw_config` is immutable once gw_config_load returns it and is shared between threads by
 * reference count: every request keeps the snapshot it started under, so a reload (SIGHUP) never changes
 * values under a running request. All strings and arrays live in the config's arena.
 *
 * Units: durations are milliseconds (int64_t, *_ms), sizes are bytes (int64_t). Relative paths in path
 * directives are resolved against the directory of the file that contains the directive.
 *
 * Adding a directive: add a field here and one row in the matching table of gw_conf_directives.c (name,
 * contexts, argument count, setter, offsetof(field), bounds, default, help). The parser, `mmgw -t`, the
 * error messages and docs/config.md (`mmgw --dump-directives`) follow from the row. */
#ifndef GW_CONFIG_H
#define GW_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "mm_arena.h"
#include "mm_status.h"

/** One `listen` line. */
struct gw_listen_conf {
    const char *text;             /* as written: "127.0.0.1:8080", "[::1]:8443" */
    struct sockaddr_storage addr; /* numeric address; port 0 = pick one (tests) */
    socklen_t addr_len;
    bool ssl;         /* TLS; h2 offered through ALPN unless `http2 off` */
    bool http2;       /* `http2` flag given (h2 is on by default anyway; see `http2`) */
    int32_t backlog;  /* listen(2) backlog */
    const char *file; /* where it was written, for messages */
    int32_t line;
};

/** The `http { }` block: transport, limits, timeouts, logging. */
struct gw_http_conf {
    struct gw_listen_conf *listen;
    size_t n_listen;
    const char *ssl_certificate;      /* PEM chain file (absolute after parsing), NULL if none */
    const char *ssl_certificate_key;  /* PEM key file */
    int32_t worker_threads;           /* event loops; 0 = one per online CPU */
    int64_t client_max_body_size;     /* request body bytes; over it -> 413 */
    int64_t client_max_header_size;   /* request line + headers bytes (HTTP/2: decoded header list) */
    int32_t client_max_headers;       /* header count */
    int64_t client_header_timeout_ms; /* a request head must arrive within this */
    int64_t client_body_timeout_ms;   /* max gap between two reads of a request body */
    int64_t keepalive_timeout_ms;     /* idle connection lifetime */
    int32_t keepalive_requests;       /* requests per HTTP/1.1 connection */
    int64_t send_timeout_ms;          /* max time without write progress while output is pending */
    int32_t max_connections;          /* open client connections, all loops together */
    bool http2;                       /* accept HTTP/2 (prior knowledge on plain, ALPN on TLS) */
    int32_t http2_max_concurrent_streams;
    int64_t stream_buffer_max;   /* bytes one response may have queued; past it writes get MM_AGAIN */
    int64_t shutdown_timeout_ms; /* SIGTERM: how long running requests may finish */
    int32_t log_level;           /* mm_log level (MM_LOG_ERROR..MM_LOG_DEBUG) */
    bool access_log;             /* one log line per request */
    const char **api_keys;     /* api_key: a request to the API needs "Authorization: Bearer" one of these */
    size_t n_api_keys;         /* (must follow api_keys: gw_conf_set_str_list); 0 = no key needed */
    const char **cors_origins; /* cors_allow_origin: origins (or "*") browsers may call the API from */
    size_t n_cors_origins;     /* (must follow cors_origins); 0 = no CORS headers, OPTIONS is a 405 */
};

/** A `key value` pair of `plugin_option`, passed to the plugin as text. */
struct gw_kv {
    const char *key;
    const char *value;
    const char *file; /* where it was written, for messages */
    int32_t line;
};

/** One `model NAME { }` block. */
struct gw_model_conf {
    const char *name;   /* the name clients put in "model" */
    const char *plugin; /* a built-in name ("m3") or a path to a .so (absolute after parsing) */
    struct gw_kv *plugin_options;
    size_t n_plugin_options;
    const char *tokenizer;  /* path to tokenizer.json */
    const char **upstreams; /* "host:port" of each worker */
    size_t n_upstreams;
    int32_t max_model_len;         /* prompt + completion tokens; 0 = ask the worker (ModelInfo) */
    int32_t preprocess_threads;    /* media preprocessing threads for this model */
    int32_t max_media_per_request; /* images + videos in one request */
    /* upstream resilience */
    int64_t health_check_interval_ms;
    int64_t health_check_timeout_ms;
    int32_t retries;             /* other workers tried when one fails before the first token */
    int32_t breaker_failures;    /* consecutive failures that open a worker's circuit breaker */
    int64_t breaker_cooldown_ms; /* open breaker: time before a half-open probe */
    int64_t upstream_connect_timeout_ms;
    int64_t request_timeout_ms;    /* a whole generation; 0 = none */
    const char *upstream_token;    /* sent to the workers as "authorization: Bearer"; NULL = none */
    bool upstream_tls;             /* workers are reached over TLS (gRPC C core's transport) */
    const char *upstream_tls_ca;   /* PEM roots that sign the workers' certificates; NULL = gRPC's default */
    const char *upstream_tls_name; /* the name their certificates must carry; NULL = each address's host */
    const char *file;              /* where the block starts, for messages */
    int32_t line;
    /* where `plugin` and `tokenizer` were written (messages about them name that line) */
    const char *plugin_file, *tokenizer_file;
    int32_t plugin_line, tokenizer_line;
};

/** The `media { }` block: media fetch policy and budgets. */
struct gw_media_conf {
    const char **fetch_allow; /* hosts, *.domain wildcards or CIDRs that widen the default policy */
    size_t n_fetch_allow;
    const char **fetch_deny; /* ... that narrow it; deny wins */
    size_t n_fetch_deny;
    int64_t fetch_timeout_ms;
    int64_t fetch_connect_timeout_ms;
    int64_t fetch_max_bytes;
    int32_t fetch_max_redirects;
    int64_t max_pixels; /* decoded pixels per image or video frame, before resizing; 0 = plugin's */
    int64_t preprocess_timeout_ms; /* wall-clock budget for preprocessing one item on the pool */
    bool allow_data_urls;          /* accept data: URLs in image_url/video_url */
    /* allowed_local_media_path: file: URLs are read beneath this folder (as written, made absolute; NULL =
     * refused). The API module resolves its real path when it loads the config, as it loads tokenizers: the
     * server core's -t checks syntax only, so the shipped demo config passes before the demo exists. */
    const char *local_media_path;
    const char *local_media_file; /* where the directive was written */
    int32_t local_media_line;
};

struct gw_config {
    const char *path; /* the main file, as given */
    struct gw_http_conf http;
    struct gw_media_conf media;
    struct gw_model_conf *models;
    size_t n_models;
    struct mm_arena *arena; /* owns every string and array above */
    int refs;               /* private: use gw_config_ref/unref (atomic) */
};

/** Parse path (and its includes) into a new config with one reference. On error returns the code and a
 * one-line "file:line: message" in err. */
int32_t gw_config_load(const char *path, struct gw_config **out, struct mm_err *err);
/** Parse a config from memory; `name` is used in messages and relative paths resolve against base_dir
 * (NULL = the current directory). allow_include false refuses `include` (fuzzing). */
int32_t gw_config_parse_text(const char *name, const char *text, size_t len, const char *base_dir,
                             bool allow_include, struct gw_config **out, struct mm_err *err);
/** A config with every default and no listen/model (tests, --dump). */
int32_t gw_config_defaults(struct gw_config **out, struct mm_err *err);
void gw_config_ref(struct gw_config *c);
/** Drop a reference; frees at zero. NULL is fine. */
void gw_config_unref(struct gw_config *c);
/** The model named `name`, or NULL. */
const struct gw_model_conf *gw_config_model(const struct gw_config *c, const char *name);

#endif
