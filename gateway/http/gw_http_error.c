/* Errors as OpenAI-style JSON, the reason phrases, and the one mm_status -> HTTP status table. */
#include "gw_http_internal.h"

#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "mm_json.h"
#include "mm_text.h"

int gw_http_status_from_mm(int32_t code)
{
    switch (code) {
    case MM_OK:
        return 200;
    case MM_INVALID:
    case MM_FORMAT:
    case MM_UNSUPPORTED:
    case MM_DENIED: /* a media URL refused by the fetch policy is the client's problem */
        return 400;
    case MM_NOT_FOUND:
        return 404;
    case MM_TOO_LARGE:
        return 413;
    case MM_EXHAUSTED:
        return 429;
    case MM_IO:
        return 502; /* an upstream or fetch failed */
    case MM_NOMEM:
    case MM_AGAIN:
    case MM_UNAVAILABLE:
    case MM_CANCELLED:
        return 503;
    case MM_TIMEOUT:
        return 504;
    case MM_ERROR:
    case MM_ABI:
    default:
        return 500;
    }
}

const char *gw_http_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 206:
        return "Partial Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 307:
        return "Temporary Redirect";
    case 308:
        return "Permanent Redirect";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 406:
        return "Not Acceptable";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 411:
        return "Length Required";
    case 413:
        return "Payload Too Large";
    case 414:
        return "URI Too Long";
    case 415:
        return "Unsupported Media Type";
    case 416:
        return "Range Not Satisfiable";
    case 417:
        return "Expectation Failed";
    case 422:
        return "Unprocessable Entity";
    case 425:
        return "Too Early";
    case 426:
        return "Upgrade Required";
    case 428:
        return "Precondition Required";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 499:
        return "Client Closed Request";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}

static const char *default_type(int status)
{
    if (status == 401) return "authentication_error";
    if (status == 403) return "permission_error";
    if (status == 429) return "rate_limit_error";
    if (status >= 500) return "server_error";
    return "invalid_request_error";
}

/* Copy s, replacing each byte that starts no valid UTF-8 sequence by U+FFFD, so jansson accepts any message
 * (messages may quote client input). */
static char *utf8_clean(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(n * 3 + 1);
    if (!out) return NULL;
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = mm_utf8_seq_len(p + i, n - i);
        if (!len) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(out + o, p + i, len);
        o += len;
        i += len;
    }
    out[o] = '\0';
    return out;
}

char *gw_http_error_json(int status, const char *type, const char *message, const char *param,
                         const char *code)
{
    char *m = utf8_clean(message ? message : gw_http_reason(status));
    char *pa = param ? utf8_clean(param) : NULL;
    char *co = code ? utf8_clean(code) : NULL;
    char *out = NULL;
    if (m && (!param || pa) && (!code || co)) {
        json_t *j = json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", m, "type",
                              type ? type : default_type(status), "param", pa, "code", co);
        if (j) {
            out = mm_json_dumps(j, JSON_COMPACT);
            json_decref(j);
        }
    }
    free(m);
    free(pa);
    free(co);
    return out;
}

int32_t gw_http_send_error(struct gw_request *req, int status, const char *type, const char *message,
                           const char *param, const char *code)
{
    struct gw__req *r = gw__req_of(req);
    if (r->aborted || !r->stream) return MM_CANCELLED;
    if (status < 400 || status > 599) status = 500;
    char *json = gw_http_error_json(status, type, message, param, code);
    static const char fallback[] =
        "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
    const char *body = json ? json : fallback;
    int32_t rc;
    if (r->resp == GW_RESP_STREAMING) {
        /* headers are gone: tell an SSE client in-band, then end the stream */
        rc = gw__req_sse_error(r, body);
    } else {
        rc = gw_http_respond(req, json ? status : 500, "application/json", body, strlen(body));
    }
    free(json);
    return rc;
}

int32_t gw_http_send_mm_error(struct gw_request *req, const struct mm_err *err)
{
    char code[32];
    const char *name = mm_status_name(err->code);
    size_t i = 0;
    for (; name[i] && i + 1 < sizeof code; i++) code[i] = (char)tolower((unsigned char)name[i]);
    code[i] = '\0';
    return gw_http_send_error(req, gw_http_status_from_mm(err->code), NULL, err->msg[0] ? err->msg : NULL,
                              NULL, code);
}
