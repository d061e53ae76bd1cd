/* The directive tables: one row per directive. To add a directive, add a field to the struct in
 * gw_config.h and a row here; docs/config.md is regenerated with `mmgw --dump-directives`. */
#include "gw_conf.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mm_log.h"

int32_t gw_conf__apply_defaults(struct gw_conf_parse *cf, uint32_t ctx, void *conf);

#define MS_DAY (86400000LL)
#define GIB (1LL << 30)

/* gw_conf_set_str_list needs the count right after the array pointer */
_Static_assert(offsetof(struct gw_media_conf, n_fetch_allow) ==
                   offsetof(struct gw_media_conf, fetch_allow) + sizeof(const char **),
               "n_fetch_allow must follow fetch_allow");
_Static_assert(offsetof(struct gw_media_conf, n_fetch_deny) ==
                   offsetof(struct gw_media_conf, fetch_deny) + sizeof(const char **),
               "n_fetch_deny must follow fetch_deny");
_Static_assert(offsetof(struct gw_model_conf, n_upstreams) ==
                   offsetof(struct gw_model_conf, upstreams) + sizeof(const char **),
               "n_upstreams must follow upstreams");

/* ---- blocks ---- */

static const char *set_http_block(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    struct gw_config *c = conf;
    gw_conf_enter_block(cf, GW_CTX_HTTP, &c->http);
    return NULL;
}

static const char *set_media_block(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    struct gw_config *c = conf;
    gw_conf_enter_block(cf, GW_CTX_MEDIA, &c->media);
    return NULL;
}

static const char *set_model_block(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    struct gw_config *c = conf;
    const char *name = gw_conf_arg(cf, 0);
    if (!*name) return "empty model name";
    if (strlen(name) > 256) return "model name longer than 256 bytes";
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) return "model name contains a control character";
    for (size_t i = 0; i < c->n_models; i++)
        if (strcmp(c->models[i].name, name) == 0)
            return gw_conf_msg(cf, "model \"%s\" is already defined at %s:%d", name, c->models[i].file,
                               c->models[i].line);
    struct gw_model_conf *m = gw_conf_push(cf, &c->models, &c->n_models, sizeof *m);
    if (!m) return "out of memory";
    m->name = gw_conf_strdup(cf, name);
    m->file = gw_conf_strdup(cf, gw_conf_file(cf));
    m->line = gw_conf_line(cf);
    if (!m->name || !m->file) return "out of memory";
    if (gw_conf__apply_defaults(cf, GW_CTX_MODEL, m)) return "invalid defaults";
    gw_conf_enter_block(cf, GW_CTX_MODEL, m);
    return NULL;
}

/* ---- http ---- */

static const char *set_listen(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    struct gw_http_conf *h = conf;
    const char *addr = gw_conf_arg(cf, 0);
    struct gw_listen_conf l = {.backlog = 511};
    if (gw_conf_parse_addr(addr, &l.addr, &l.addr_len))
        return gw_conf_msg(cf, "invalid address \"%s\" (expected IP:PORT, [IPv6]:PORT, *:PORT or PORT)",
                           addr);
    for (size_t i = 1; i < gw_conf_nargs(cf); i++) {
        const char *p = gw_conf_arg(cf, i);
        if (strcmp(p, "ssl") == 0) {
            l.ssl = true;
        } else if (strcmp(p, "http2") == 0) {
            l.http2 = true;
        } else if (strncmp(p, "backlog=", 8) == 0) {
            char *end;
            long v = strtol(p + 8, &end, 10);
            if (!isdigit((unsigned char)p[8]) || *end || v < 1 || v > 65535)
                return gw_conf_msg(cf, "invalid backlog \"%s\" (expected 1 to 65535)", p + 8);
            l.backlog = (int32_t)v;
        } else {
            return gw_conf_msg(cf, "invalid parameter \"%s\" (expected ssl, http2 or backlog=N)", p);
        }
    }
    l.text = gw_conf_strdup(cf, addr);
    l.file = gw_conf_strdup(cf, gw_conf_file(cf));
    l.line = gw_conf_line(cf);
    struct gw_listen_conf *slot = gw_conf_push(cf, &h->listen, &h->n_listen, sizeof *slot);
    if (!slot || !l.text || !l.file) return "out of memory";
    *slot = l;
    return NULL;
}

static const char *set_log_level(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    int32_t lv = mm_log_level_parse(gw_conf_arg(cf, 0));
    if (lv < 0)
        return gw_conf_msg(cf, "invalid value \"%s\" (expected error, warn, info or debug)",
                           gw_conf_arg(cf, 0));
    *(int32_t *)((char *)conf + d->offset) = lv;
    return NULL;
}

/* ---- model ---- */

static const char *set_plugin_option(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    struct gw_model_conf *m = conf;
    const char *k = gw_conf_arg(cf, 0), *v = gw_conf_arg(cf, 1);
    if (!*k) return "empty option name";
    for (size_t i = 0; i < m->n_plugin_options; i++)
        if (strcmp(m->plugin_options[i].key, k) == 0) return gw_conf_msg(cf, "option \"%s\" is duplicate", k);
    struct gw_kv *kv = gw_conf_push(cf, &m->plugin_options, &m->n_plugin_options, sizeof *kv);
    if (!kv || !(kv->key = gw_conf_strdup(cf, k)) || !(kv->value = gw_conf_strdup(cf, v)) ||
        !(kv->file = gw_conf_strdup(cf, gw_conf_file(cf))))
        return "out of memory";
    kv->line = gw_conf_line(cf);
    return NULL;
}

static const char *set_plugin(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    struct gw_model_conf *m = conf;
    const char *v = gw_conf_arg(cf, 0);
    if (!*v) return "empty value";
    /* a name with a slash or ending in .so is a file; anything else is a built-in plugin name */
    size_t n = strlen(v);
    bool is_path = strchr(v, '/') || (n > 3 && strcmp(v + n - 3, ".so") == 0);
    m->plugin = is_path ? gw_conf_path(cf, v) : gw_conf_strdup(cf, v);
    m->plugin_file = gw_conf_strdup(cf, gw_conf_file(cf));
    m->plugin_line = gw_conf_line(cf);
    return m->plugin && m->plugin_file ? NULL : "out of memory";
}

static const char *set_tokenizer(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    struct gw_model_conf *m = conf;
    m->tokenizer_file = gw_conf_strdup(cf, gw_conf_file(cf));
    m->tokenizer_line = gw_conf_line(cf);
    if (!m->tokenizer_file) return "out of memory";
    return gw_conf_set_path(cf, d, conf);
}

static bool valid_host_port(const char *s)
{
    if (strncmp(s, "unix:", 5) == 0) return s[5] != '\0';
    struct sockaddr_storage ss;
    socklen_t len;
    if (s[0] == '[') return gw_conf_parse_addr(s, &ss, &len) == 0;
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || !colon[1]) return false;
    for (const char *p = s; p < colon; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_') return false;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    return !*end && isdigit((unsigned char)colon[1]) && port >= 1 && port <= 65535;
}

static const char *set_upstream(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    const struct gw_model_conf *m = conf;
    for (size_t i = 0; i < gw_conf_nargs(cf); i++) {
        const char *a = gw_conf_arg(cf, i);
        if (!valid_host_port(a))
            return gw_conf_msg(cf, "invalid address \"%s\" (expected HOST:PORT, [IPv6]:PORT or unix:PATH)",
                               a);
        /* a worker listed twice would take twice its share of the routing: a typo, not a weight */
        bool dup = false;
        for (size_t k = 0; k < m->n_upstreams && !dup; k++) dup = strcmp(m->upstreams[k], a) == 0;
        for (size_t k = 0; k < i && !dup; k++) dup = strcmp(gw_conf_arg(cf, k), a) == 0;
        if (dup) return gw_conf_msg(cf, "worker \"%s\" is listed twice", a);
    }
    return gw_conf_set_str_list(cf, d, conf);
}

/* ---- media ---- */

/* Host-rule syntax, checked here so that `mmgw -t` names the file and line (the fetch policy compiles the
 * same rules later and must never find one this accepted invalid): the rules of gw_fetch_policy.c. */

/* An address with an optional prefix: a dotted quad or IPv6 (brackets allowed), prefix without leading
 * zeros, no host bits set below it (a typo such as 10.0.0.1/8). */
static bool valid_cidr(const char *s)
{
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    char ip[64];
    bool bracketed = n >= 2 && s[0] == '[' && s[n - 1] == ']';
    if (bracketed) { /* [IPv6] only */
        s++;
        n -= 2;
    }
    if (n == 0 || n >= sizeof ip) return false;
    memcpy(ip, s, n);
    ip[n] = '\0';
    unsigned char bytes[16];
    unsigned max;
    if (!bracketed && inet_pton(AF_INET, ip, bytes) == 1)
        max = 32;
    else if (inet_pton(AF_INET6, ip, bytes) == 1)
        max = 128;
    else
        return false;
    unsigned prefix = max;
    if (slash) {
        const char *p = slash + 1;
        size_t plen = strlen(p);
        if (plen == 0 || plen > 3 || (plen > 1 && p[0] == '0')) return false;
        prefix = 0;
        for (size_t i = 0; i < plen; i++) {
            if (!isdigit((unsigned char)p[i])) return false;
            prefix = prefix * 10 + (unsigned)(p[i] - '0');
        }
        if (prefix > max) return false;
    }
    for (unsigned bit = prefix; bit < max; bit++)
        if (bytes[bit / 8] & (0x80 >> (bit % 8))) return false;
    return true;
}

/* A host name: labels of letters, digits, '-' and '_', 1..63 bytes, 253 in all, one trailing dot allowed.
 * A name whose last label is a number (decimal, or 0x hex) is an IPv4 address to URL parsers, so it must
 * be written as a dotted quad (the suffix of a *.domain wildcard is only checked for syntax). */
static bool valid_name(const char *s, bool wildcard)
{
    size_t len = strlen(s);
    if (len > 0 && s[len - 1] == '.') len--;
    if (len == 0 || len > 253) return false;
    size_t label = 0, last = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '.') {
            if (label == 0) return false;
            label = 0;
            last = i + 1;
        } else if (isalnum(c) || c == '-' || c == '_') {
            if (++label > 63) return false;
        } else {
            return false;
        }
    }
    if (label == 0) return false;
    const char *l = s + last;
    size_t ln = len - last, i = 0;
    bool hex = ln >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X'); /* "0x" alone is 0 */
    for (i = hex ? 2 : 0; i < ln; i++)
        if (!(hex ? isxdigit((unsigned char)l[i]) : isdigit((unsigned char)l[i]))) break;
    bool numeric = i == ln;
    return wildcard || !numeric;
}

/* NULL when s is a valid rule, else why not. */
static const char *host_rule_error(const char *s)
{
    if (strlen(s) >= 128) return "longer than 127 bytes";
    if (strchr(s, '/') || strchr(s, ':'))
        return valid_cidr(s) ? NULL
                             : "not an IP address or CIDR range (write a dotted quad or IPv6, a prefix in "
                               "range, no host bits set below it)";
    if (valid_cidr(s)) return NULL;
    if (strncmp(s, "*.", 2) == 0 && s[2] ? valid_name(s + 2, true) : valid_name(s, false)) return NULL;
    return "expected a host name, *.domain, a dotted-quad IP address or a CIDR range";
}

static const char *set_host_rules(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    for (size_t i = 0; i < gw_conf_nargs(cf); i++) {
        const char *why = host_rule_error(gw_conf_arg(cf, i));
        if (why) return gw_conf_msg(cf, "invalid value \"%s\": %s", gw_conf_arg(cf, i), why);
    }
    return gw_conf_set_str_list(cf, d, conf);
}

/* ---- tables ---- */

#define HTTP(f) offsetof(struct gw_http_conf, f)
#define MODEL(f) offsetof(struct gw_model_conf, f)
#define MEDIA(f) offsetof(struct gw_media_conf, f)

static const struct gw_directive main_directives[] = {
    {"http", GW_CTX_MAIN | GW_CONF_BLOCK | GW_CONF_NOARGS, set_http_block, 0, 0, 0, NULL, "{ ... }",
     "The HTTP server: listeners, TLS, limits, timeouts, logging.", NULL},
    {"model", GW_CTX_MAIN | GW_CONF_BLOCK | GW_CONF_MULTI | GW_CONF_TAKE1, set_model_block, 0, 0, 0, NULL,
     "NAME { ... }", "A served model; NAME is what clients put in \"model\".", NULL},
    {"media", GW_CTX_MAIN | GW_CONF_BLOCK | GW_CONF_NOARGS, set_media_block, 0, 0, 0, NULL, "{ ... }",
     "Media fetch policy and budgets.", NULL},
    {NULL, 0, NULL, 0, 0, 0, NULL, NULL, NULL, NULL},
};

/* A key travels in an HTTP header: visible ASCII only (no blanks, no quotes to confuse a shell or a log) */
static const char *set_api_keys(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    for (size_t i = 0; i < gw_conf_nargs(cf); i++) {
        const char *k = gw_conf_arg(cf, i);
        if (!*k) return "empty key";
        for (const char *p = k; *p; p++)
            if (*p <= ' ' || *p > '~' || *p == '"' || *p == '\'')
                return gw_conf_msg(cf, "key %zu has a character other than visible ASCII (a blank, a quote)",
                                   i + 1);
    }
    return gw_conf_set_str_list(cf, d, conf);
}

/* An origin is "scheme://host[:port]" as browsers send it (no path, no blanks), or "*" */
static const char *set_cors_origins(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    for (size_t i = 0; i < gw_conf_nargs(cf); i++) {
        const char *o = gw_conf_arg(cf, i);
        if (strcmp(o, "*") == 0) continue;
        const char *sep = strstr(o, "://");
        bool ok = sep && sep > o && sep[3] && !strchr(sep + 3, '/');
        for (const char *p = o; ok && *p; p++) ok = *p > ' ' && *p <= '~' && *p != '"' && *p != ',';
        if (!ok) return gw_conf_msg(cf, "invalid origin \"%s\" (scheme://host[:port], or *)", o);
    }
    return gw_conf_set_str_list(cf, d, conf);
}

/* The token a worker's --auth-token-file holds: one word of visible ASCII (it travels in a header) */
static const char *set_upstream_token(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    const char *t = gw_conf_arg(cf, 0);
    if (!*t) return "empty token";
    if (strlen(t) > 4096) return "token longer than 4096 bytes";
    for (const char *p = t; *p; p++)
        if (*p <= ' ' || *p > '~')
            return "the token has a character other than visible ASCII (a blank, a control character)";
    return gw_conf_set_str(cf, d, conf);
}

static const struct gw_directive http_directives[] = {
    {"listen", GW_CTX_HTTP | GW_CONF_1MORE | GW_CONF_MULTI, set_listen, 0, 0, 0, NULL,
     "ADDRESS:PORT [ssl] [http2] [backlog=N]",
     "A listening socket (repeatable). Plain listeners take HTTP/1.1 and HTTP/2 with prior knowledge; `ssl` "
     "ones "
     "TLS with ALPN h2/http/1.1. ADDRESS is an IPv4 address, [IPv6], `*` or `localhost`; port 0 picks a free "
     "port.",
     NULL},
    {"ssl_certificate", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_path, HTTP(ssl_certificate), 0, 0, NULL,
     "FILE", "PEM certificate (chain) for `ssl` listeners.", NULL},
    {"ssl_certificate_key", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_path, HTTP(ssl_certificate_key), 0, 0,
     NULL, "FILE", "PEM private key for `ssl` listeners.", NULL},
    {"worker_threads", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_int_auto, HTTP(worker_threads), 0, 1024,
     "auto", "N | auto", "Event-loop threads (`auto` = one per CPU). A change needs a restart.", NULL},
    {"client_max_body_size", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_size, HTTP(client_max_body_size), 0,
     64 * GIB, "64m", "SIZE", "Largest request body; larger ones get 413.", NULL},
    {"client_max_header_size", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_size, HTTP(client_max_header_size),
     1024, 1 << 20, "32k", "SIZE",
     "Largest request line plus headers; larger ones get 431 (414 for a long URI).", NULL},
    {"client_max_headers", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_int, HTTP(client_max_headers), 1, 10000,
     "100", "N", "Most header fields in one request.", NULL},
    {"client_header_timeout", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_msec, HTTP(client_header_timeout_ms),
     1, MS_DAY, "60s", "TIME", "Time to receive a request head (and the TLS handshake); then 408.", NULL},
    {"client_body_timeout", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_msec, HTTP(client_body_timeout_ms), 1,
     MS_DAY, "60s", "TIME", "Longest pause between two reads of a request body; then 408.", NULL},
    {"keepalive_timeout", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_msec, HTTP(keepalive_timeout_ms), 1,
     MS_DAY, "75s", "TIME", "An idle connection (no request in progress) is closed after this.", NULL},
    {"keepalive_requests", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_int, HTTP(keepalive_requests), 1,
     100000000, "10000", "N", "Requests served on one HTTP/1.1 connection before it is closed.", NULL},
    {"send_timeout", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_msec, HTTP(send_timeout_ms), 1, MS_DAY, "60s",
     "TIME",
     "A client that reads nothing for this long while a response is pending is disconnected (request "
     "aborted).",
     NULL},
    {"max_connections", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_int, HTTP(max_connections), 1, 10000000,
     "10000", "N",
     "Open client connections (split evenly between loops); past it new connections wait in the listen "
     "backlog.",
     NULL},
    {"http2", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_flag, HTTP(http2), 0, 0, "on", "on | off",
     "Accept HTTP/2 (prior knowledge on plain listeners, ALPN on TLS).", NULL},
    {"http2_max_concurrent_streams", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_int,
     HTTP(http2_max_concurrent_streams), 1, 100000, "128", "N",
     "SETTINGS_MAX_CONCURRENT_STREAMS per connection.", NULL},
    {"stream_buffer_max", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_size, HTTP(stream_buffer_max), 4096, GIB,
     "1m", "SIZE", "Most response bytes queued for one request (backpressure bound for slow readers).", NULL},
    {"shutdown_timeout", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_msec, HTTP(shutdown_timeout_ms), 0, MS_DAY,
     "30s", "TIME", "On SIGTERM, how long running requests may finish before they are cut.", NULL},
    {"log_level", GW_CTX_HTTP | GW_CONF_TAKE1, set_log_level, HTTP(log_level), 0, 0, "info",
     "error | warn | info | debug", "Log verbosity (stderr). MMGW_LOG_LEVEL in the environment wins.", NULL},
    {"access_log", GW_CTX_HTTP | GW_CONF_TAKE1, gw_conf_set_flag, HTTP(access_log), 0, 0, "off", "on | off",
     "One log line per request: client, request line, status, bytes, duration, request id.", NULL},
    {"api_key", GW_CTX_HTTP | GW_CONF_1MORE | GW_CONF_MULTI, set_api_keys, HTTP(api_keys), 0, 0, NULL,
     "KEY ...",
     "Require `Authorization: Bearer KEY` (any of the keys; repeatable) on the API's routes (/v1/..., "
     "/tokenize, /detokenize); /health, /health/models and /metrics stay open. Without it no key is asked. "
     "Keep keys out of a shared file with `include` of one only the server can read.",
     NULL},
    {"cors_allow_origin", GW_CTX_HTTP | GW_CONF_1MORE | GW_CONF_MULTI, set_cors_origins, HTTP(cors_origins),
     0, 0, NULL, "ORIGIN ... | *",
     "Let browser apps served from these origins (`https://app.example.com`, or `*` for any) call the API: "
     "preflights (OPTIONS) are answered 204 and responses carry Access-Control-Allow-Origin. Cookies are "
     "never allowed (use api_key). Without it OPTIONS is a 405.",
     NULL},
    {NULL, 0, NULL, 0, 0, 0, NULL, NULL, NULL, NULL},
};

static const struct gw_directive model_directives[] = {
    {"plugin", GW_CTX_MODEL | GW_CONF_TAKE1, set_plugin, MODEL(plugin), 0, 0, NULL, "NAME | PATH.so",
     "The model plugin: a built-in name (`m3`, `qwen2vl`) or a path to a shared object.", NULL},
    {"plugin_option", GW_CTX_MODEL | GW_CONF_TAKE2 | GW_CONF_MULTI, set_plugin_option, 0, 0, 0, NULL,
     "KEY VALUE",
     "An option passed to the plugin as text (repeatable), e.g. `plugin_option max_long_side_pixel 1024;`.",
     NULL},
    {"tokenizer", GW_CTX_MODEL | GW_CONF_TAKE1, set_tokenizer, MODEL(tokenizer), 0, 0, NULL, "FILE",
     "The model's HF tokenizer.json.", NULL},
    {"upstream", GW_CTX_MODEL | GW_CONF_1MORE | GW_CONF_MULTI, set_upstream, MODEL(upstreams), 0, 0, NULL,
     "HOST:PORT ...", "Worker address(es) speaking proto/worker.proto (repeatable).", NULL},
    {"max_model_len", GW_CTX_MODEL | GW_CONF_TAKE1, gw_conf_set_int, MODEL(max_model_len), 0, 100000000, "0",
     "N", "Prompt plus completion tokens; 0 = what the worker reports.", NULL},
    {"preprocess_threads", GW_CTX_MODEL | GW_CONF_TAKE1, gw_conf_set_int, MODEL(preprocess_threads), 1, 1024,
     "2", "N", "Threads decoding and preprocessing this model's media.", NULL},
    {"max_media_per_request", GW_CTX_MODEL | GW_CONF_TAKE1, gw_conf_set_int, MODEL(max_media_per_request), 0,
     10000, "16", "N", "Images plus videos accepted in one request.", NULL},
    {"health_check_interval", GW_CTX_MODEL | GW_CONF_TAKE1, gw_conf_set_msec, MODEL(health_check_interval_ms),
     100, MS_DAY, "5s", "TIME", "How often each worker is probed (Health/Load).", NULL},
    {"health_check_timeout", GW_CTX_MODEL | GW_CONF_TAKE1, gw_conf_set_msec, MODEL(health_check_timeout_ms),
     10, MS_DAY, "2s", "TIME", "Deadline of one probe.", NULL},
    {"retries", GW_CTX_MODEL | GW_CONF_TAKE1, gw_conf_set_int, MODEL(retries), 0, 100, "2", "N",
     "Other workers tried when one fails before the first token was sent.", NULL},
    {"breaker_failures", GW_CTX_MODEL | GW_CONF_TAKE1, gw_conf_set_int, MODEL(breaker_failures), 1, 100000,
     "5", "N", "Consecutive failures that open a worker's circuit breaker.", NULL},
    {"breaker_cooldown", GW_CTX_MODEL | GW_CONF_TAKE1, gw_conf_set_msec, MODEL(breaker_cooldown_ms), 1,
     MS_DAY, "30s", "TIME", "Time an open breaker waits before a half-open probe.", NULL},
    {"upstream_connect_timeout", GW_CTX_MODEL | GW_CONF_TAKE1, gw_conf_set_msec,
     MODEL(upstream_connect_timeout_ms), 1, MS_DAY, "5s", "TIME", "Deadline for connecting to a worker.",
     NULL},
    {"request_timeout", GW_CTX_MODEL | GW_CONF_TAKE1, gw_conf_set_msec, MODEL(request_timeout_ms), 0,
     7 * MS_DAY, "0", "TIME", "Deadline of one generation on the worker; 0 = none.", NULL},
    {"upstream_token", GW_CTX_MODEL | GW_CONF_TAKE1, set_upstream_token, MODEL(upstream_token), 0, 0, NULL,
     "TOKEN",
     "Sent to this model's workers with every call as `authorization: Bearer TOKEN`: what a worker started "
     "with `--auth-token-file` requires (without it, anyone who reaches a worker's port may use it; a "
     "plaintext connection still shows the token to whoever can read the traffic).",
     NULL},
    {"upstream_tls", GW_CTX_MODEL | GW_CONF_TAKE1, gw_conf_set_flag, MODEL(upstream_tls), 0, 0, "off",
     "on | off",
     "Reach this model's workers over TLS (workers started with `--tls-cert` and `--tls-key`); their "
     "certificates are verified against `upstream_tls_ca`.",
     NULL},
    {"upstream_tls_ca", GW_CTX_MODEL | GW_CONF_TAKE1, gw_conf_set_path, MODEL(upstream_tls_ca), 0, 0, NULL,
     "FILE", "PEM certificates that sign the workers' (with `upstream_tls on`); default: gRPC's roots.",
     NULL},
    {"upstream_tls_name", GW_CTX_MODEL | GW_CONF_TAKE1, gw_conf_set_str, MODEL(upstream_tls_name), 0, 0, NULL,
     "NAME",
     "The name the workers' certificates must carry (with `upstream_tls on`); default: the host of each "
     "`upstream` address.",
     NULL},
    {NULL, 0, NULL, 0, 0, 0, NULL, NULL, NULL, NULL},
};

/* The folder is resolved by the API module (gw_api_registry.c), which names this line when it is missing. */
static const char *set_local_media_path(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    struct gw_media_conf *m = conf;
    m->local_media_file = gw_conf_strdup(cf, gw_conf_file(cf));
    m->local_media_line = gw_conf_line(cf);
    if (!m->local_media_file) return "out of memory";
    return gw_conf_set_path(cf, d, conf);
}

static const struct gw_directive media_directives[] = {
    {"media_fetch_allow", GW_CTX_MEDIA | GW_CONF_1MORE | GW_CONF_MULTI, set_host_rules, MEDIA(fetch_allow), 0,
     0, NULL, "HOST | *.DOMAIN | CIDR ...",
     "Widen the default fetch policy (which refuses loopback, private, link-local, metadata ... addresses).",
     NULL},
    {"media_fetch_deny", GW_CTX_MEDIA | GW_CONF_1MORE | GW_CONF_MULTI, set_host_rules, MEDIA(fetch_deny), 0,
     0, NULL, "HOST | *.DOMAIN | CIDR ...", "Narrow the fetch policy; deny wins over allow.", NULL},
    {"fetch_timeout", GW_CTX_MEDIA | GW_CONF_TAKE1, gw_conf_set_msec, MEDIA(fetch_timeout_ms), 1, MS_DAY,
     "10s", "TIME", "Total time for fetching one media URL (all redirects).", NULL},
    {"fetch_connect_timeout", GW_CTX_MEDIA | GW_CONF_TAKE1, gw_conf_set_msec, MEDIA(fetch_connect_timeout_ms),
     1, MS_DAY, "3s", "TIME", "Connect time per hop.", NULL},
    {"fetch_max_bytes", GW_CTX_MEDIA | GW_CONF_TAKE1, gw_conf_set_size, MEDIA(fetch_max_bytes), 1, 16 * GIB,
     "32m", "SIZE", "Largest media body fetched; the transfer stops the moment it passes.", NULL},
    {"fetch_max_redirects", GW_CTX_MEDIA | GW_CONF_TAKE1, gw_conf_set_int, MEDIA(fetch_max_redirects), 0, 50,
     "5", "N", "Redirect hops followed (each re-checked against the policy).", NULL},
    {"max_pixels", GW_CTX_MEDIA | GW_CONF_TAKE1, gw_conf_set_int64, MEDIA(max_pixels), 0, 1LL << 40, "0", "N",
     "Decoded pixels per image or frame before resizing; 0 = the plugin's budget.", NULL},
    {"preprocess_timeout", GW_CTX_MEDIA | GW_CONF_TAKE1, gw_conf_set_msec, MEDIA(preprocess_timeout_ms), 1,
     MS_DAY, "60s", "TIME",
     "Time for preprocessing one image or video (decode, frame sampling, resize, patching) from when a pool "
     "thread starts it; over it the item fails with 400 naming the part (fetching has fetch_timeout). A 4 s "
     "1080p clip or a 48 Mpx photo takes under a second; raise it for videos of many minutes.",
     NULL},
    {"allow_data_urls", GW_CTX_MEDIA | GW_CONF_TAKE1, gw_conf_set_flag, MEDIA(allow_data_urls), 0, 0, "on",
     "on | off", "Accept `data:` URLs in image_url / video_url parts.", NULL},
    {"allowed_local_media_path", GW_CTX_MEDIA | GW_CONF_TAKE1, set_local_media_path, MEDIA(local_media_path),
     0, 0, NULL, "DIR",
     "Accept `file:` URLs (file:///path) for files beneath DIR (neither `..` nor a symbolic link leads out; "
     "regular files only, at most fetch_max_bytes). Without it `file:` URLs are refused.",
     NULL},
    {NULL, 0, NULL, 0, 0, 0, NULL, NULL, NULL, NULL},
};

const struct gw_directive *const gw_conf_tables[] = {main_directives, http_directives, model_directives,
                                                     media_directives, NULL};
