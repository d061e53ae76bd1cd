/* Small shared helpers: API errors, JSON string/number writers, ids and clocks. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "gw_api_internal.h"

int gw_api_fail(struct gw_api_error *e, int status, const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = NULL;
    e->code = NULL;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    /* messages quote client text (a model name, a part's type): keep them one printable line, as the
     * plugins' are */
    for (char *c = e->msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    return -1;
}

int gw_api_fail_mm(struct gw_api_error *e, const struct mm_err *err, const char *param)
{
    gw_api_fail(e, gw_http_status_from_mm(err->code), param, "%s",
                err->msg[0] ? err->msg : mm_strerror(err->code));
    return -1;
}

void gw_api_send_error(struct gw_request *req, const struct gw_api_error *e)
{
    gw_http_send_error(req, e->status, e->type, e->msg, e->param[0] ? e->param : NULL, e->code);
}

/* ---- ids and clocks ---- */

static _Thread_local uint64_t rng_state;

void gw_api_random_hex(char *out, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (rng_state == 0) {
        uint64_t seed = 0;
        if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&seed;
        }
        rng_state = seed | 1;
    }
    for (size_t i = 0; i < n;) {
        /* xorshift64*: ids need uniqueness, not secrecy */
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        uint64_t x = rng_state * 0x2545f4914f6cdd1dull;
        for (int k = 0; k < 16 && i < n; k++, i++, x >>= 4) out[i] = hex[x & 15];
    }
    out[n] = '\0';
}
