/* CORS (`cors_allow_origin`), for browser front-ends that call the API directly: a preflight (OPTIONS with
 * Origin and Access-Control-Request-Method) from an allowed origin is answered 204 before any route, and
 * every response to an allowed Origin names it in Access-Control-Allow-Origin. Without the directive nothing
 * changes (OPTIONS stays a 405). Credentials (cookies) are never allowed: the API authenticates with a
 * bearer key, which a browser app sends itself. */
#include <string.h>
#include <strings.h>

#include "gw_http_internal.h"

#define CORS_METHODS "GET, POST, OPTIONS"
#define CORS_HEADERS "authorization, content-type"
#define CORS_MAX_AGE "600"

/* "*", the request's origin when it is listed, or NULL */
static const char *allowed(const struct gw__req *r, const char *origin)
{
    const struct gw_http_conf *hc = &r->site->config->http;
    if (!origin || !*origin) return NULL;
    for (size_t i = 0; i < hc->n_cors_origins; i++) {
        const char *o = hc->cors_origins[i];
        if (strcmp(o, "*") == 0) return "*";
        if (strcasecmp(o, origin) == 0) return origin;
    }
    return NULL;
}

/* A header list a preflight may echo: tokens, commas and blanks only (it goes back out as a header) */
static bool header_list_ok(const char *v)
{
    if (strlen(v) > 512) return false;
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        if (!(*p == ',' || *p == ' ' || *p == '-' || *p == '_' || *p == '.' || (*p >= '0' && *p <= '9') ||
              (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return false;
    return true;
}

int32_t gw__cors_headers(struct gw__req *r)
{
    if (r->site->config->http.n_cors_origins == 0) return MM_OK;
    const char *a = allowed(r, gw_request_header(&r->pub, "origin"));
    if (!a) return MM_OK;
    if (gw_http_add_header(&r->pub, "access-control-allow-origin", a)) return MM_NOMEM;
    /* an echoed origin makes the answer depend on it: caches must key on it */
    if (strcmp(a, "*") != 0 && gw_http_add_header(&r->pub, "vary", "origin")) return MM_NOMEM;
    return MM_OK;
}

bool gw__cors_preflight(struct gw__req *r)
{
    struct gw_request *pub = &r->pub;
    if (r->site->config->http.n_cors_origins == 0 || strcmp(pub->method, "OPTIONS") != 0) return false;
    const char *origin = gw_request_header(pub, "origin");
    if (!origin || !gw_request_header(pub, "access-control-request-method")) return false;
    if (!allowed(r, origin)) {
        gw_http_send_error(pub, 403, NULL, "this origin may not call the API (cors_allow_origin)", NULL,
                           "origin_not_allowed");
        return true;
    }
    const char *want = gw_request_header(pub, "access-control-request-headers");
    gw_http_add_header(pub, "access-control-allow-methods", CORS_METHODS);
    gw_http_add_header(pub, "access-control-allow-headers",
                       want && header_list_ok(want) ? want : CORS_HEADERS);
    gw_http_add_header(pub, "access-control-max-age", CORS_MAX_AGE);
    gw_http_respond(pub, 204, NULL, NULL, 0); /* the allow-origin header comes with every response (begin) */
    return true;
}
