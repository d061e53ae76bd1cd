/* Generic directive setters and the value parsers behind them (sizes, durations, addresses). */
#include "gw_conf.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "mm_text.h"

#define FIELD(conf, d, type) ((type *)((char *)(conf) + (d)->offset))

/* digits followed by one unit from the table; *len = characters consumed, *unit = the unit's index */
static int parse_scaled(const char *s, int64_t *out, const char *const *units, const int64_t *mult,
                        size_t n_units, size_t *len, size_t *unit)
{
    const char *p = s;
    if (!isdigit((unsigned char)*p)) return -1;
    int64_t v = 0;
    while (isdigit((unsigned char)*p)) {
        if (v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
        p++;
    }
    /* longest unit first: "ms" before "m" */
    size_t best = n_units, best_len = 0;
    for (size_t i = 0; i < n_units; i++) {
        size_t ul = strlen(units[i]);
        if ((best == n_units || ul > best_len) && strncmp(p, units[i], ul) == 0) {
            best = i;
            best_len = ul;
        }
    }
    if (best == n_units) return -1;
    if (v > INT64_MAX / mult[best]) return -1;
    *out = v * mult[best];
    *len = (size_t)(p - s) + best_len;
    *unit = best;
    return 0;
}

int gw_conf_parse_size(const char *s, int64_t *out)
{
    static const char *const units[] = {"", "k", "K", "m", "M", "g", "G"};
    static const int64_t mult[] = {1, 1024, 1024, 1 << 20, 1 << 20, 1 << 30, 1 << 30};
    size_t len, unit;
    if (!s || parse_scaled(s, out, units, mult, 7, &len, &unit) || s[len]) return -1;
    return 0;
}

int gw_conf_parse_msec(const char *s, int64_t *out)
{
    static const char *const units[] = {"ms", "s", "m", "h", "d"};
    static const int64_t mult[] = {1, 1000, 60000, 3600000, 86400000};
    if (!s || !*s) return -1;
    bool all_digits = true;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p)) all_digits = false;
    if (all_digits) { /* a bare number is seconds, as in nginx */
        int64_t v;
        if (mm_parse_i64(s, INT64_MIN, INT64_MAX, &v) || v > INT64_MAX / 1000) return -1;
        *out = v * 1000;
        return 0;
    }
    /* parts in falling units, each unit once ("1h30m", "1s500ms"), as nginx takes them: "1h1h" or "30m1h"
     * is a typo, not a sum */
    int64_t total = 0, last = INT64_MAX;
    const char *p = s;
    while (*p) {
        int64_t v;
        size_t len, unit;
        if (parse_scaled(p, &v, units, mult, 5, &len, &unit) || mult[unit] >= last) return -1;
        last = mult[unit];
        if (total > INT64_MAX - v) return -1;
        total += v;
        p += len;
    }
    *out = total;
    return 0;
}

int gw_conf_parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    if (!s || !*s) return -1;
    char host[128];
    const char *port_s;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':' || (size_t)(rb - s - 1) >= sizeof host) return -1;
        memcpy(host, s + 1, (size_t)(rb - s - 1));
        host[rb - s - 1] = '\0';
        port_s = rb + 2;
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
        if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1) return -1;
        a6->sin6_family = AF_INET6;
        *len = sizeof *a6;
    } else {
        const char *colon = strrchr(s, ':');
        struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
        a4->sin_family = AF_INET;
        *len = sizeof *a4;
        if (!colon) { /* a bare port listens on every IPv4 address */
            port_s = s;
            a4->sin_addr.s_addr = htonl(INADDR_ANY);
        } else {
            if ((size_t)(colon - s) >= sizeof host || colon == s) return -1;
            memcpy(host, s, (size_t)(colon - s));
            host[colon - s] = '\0';
            port_s = colon + 1;
            if (strcmp(host, "*") == 0)
                a4->sin_addr.s_addr = htonl(INADDR_ANY);
            else if (strcmp(host, "localhost") == 0)
                a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            else if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
                return -1;
        }
    }
    int64_t port;
    if (port_s[0] == '+' || port_s[0] == '-' || mm_parse_i64(port_s, 0, 65535, &port)) return -1;
    if (ss->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    return 0;
}

/* ---- setters ---- */

const char *gw_conf_set_flag(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    const char *v = gw_conf_arg(cf, 0);
    bool *f = FIELD(conf, d, bool);
    if (strcmp(v, "on") == 0)
        *f = true;
    else if (strcmp(v, "off") == 0)
        *f = false;
    else
        return gw_conf_msg(cf, "invalid value \"%s\" (expected \"on\" or \"off\")", v);
    return NULL;
}

static const char *set_bounded(struct gw_conf_parse *cf, const struct gw_directive *d, int64_t v,
                               const char *text, const char *what)
{
    if (v < d->min || v > d->max)
        return gw_conf_msg(cf, "invalid value \"%s\" (expected %s from %lld to %lld)", text, what,
                           (long long)d->min, (long long)d->max);
    return NULL;
}

const char *gw_conf_set_int(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    const char *v = gw_conf_arg(cf, 0);
    int64_t x;
    if (mm_parse_i64(v, INT64_MIN, INT64_MAX, &x))
        return gw_conf_msg(cf, "invalid value \"%s\" (expected an integer)", v);
    const char *m = set_bounded(cf, d, x, v, "an integer");
    if (m) return m;
    if (x < INT32_MIN || x > INT32_MAX) return gw_conf_msg(cf, "invalid value \"%s\" (out of range)", v);
    *FIELD(conf, d, int32_t) = (int32_t)x;
    return NULL;
}

const char *gw_conf_set_int_auto(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    if (strcmp(gw_conf_arg(cf, 0), "auto") == 0) {
        *FIELD(conf, d, int32_t) = 0;
        return NULL;
    }
    return gw_conf_set_int(cf, d, conf);
}

const char *gw_conf_set_int64(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    const char *v = gw_conf_arg(cf, 0);
    int64_t x;
    if (mm_parse_i64(v, INT64_MIN, INT64_MAX, &x))
        return gw_conf_msg(cf, "invalid value \"%s\" (expected an integer)", v);
    const char *m = set_bounded(cf, d, x, v, "an integer");
    if (m) return m;
    *FIELD(conf, d, int64_t) = x;
    return NULL;
}

const char *gw_conf_set_size(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    const char *v = gw_conf_arg(cf, 0);
    int64_t x;
    if (gw_conf_parse_size(v, &x))
        return gw_conf_msg(cf, "invalid value \"%s\" (expected a size such as 512, 16k, 64m, 1g)", v);
    const char *m = set_bounded(cf, d, x, v, "a size in bytes");
    if (m) return m;
    *FIELD(conf, d, int64_t) = x;
    return NULL;
}

const char *gw_conf_set_msec(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    const char *v = gw_conf_arg(cf, 0);
    int64_t x;
    if (gw_conf_parse_msec(v, &x))
        return gw_conf_msg(cf, "invalid value \"%s\" (expected a time such as 500ms, 10s, 5m, 1h)", v);
    const char *m = set_bounded(cf, d, x, v, "a time in ms");
    if (m) return m;
    *FIELD(conf, d, int64_t) = x;
    return NULL;
}

const char *gw_conf_set_str(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    const char *v = gw_conf_arg(cf, 0);
    if (!*v) return "empty value";
    char *s = gw_conf_strdup(cf, v);
    if (!s) return "out of memory";
    *FIELD(conf, d, const char *) = s;
    return NULL;
}

const char *gw_conf_set_path(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    const char *v = gw_conf_arg(cf, 0);
    if (!*v) return "empty path";
    char *s = gw_conf_path(cf, v);
    if (!s) return "out of memory";
    *FIELD(conf, d, const char *) = s;
    return NULL;
}

const char *gw_conf_set_enum(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    const char *v = gw_conf_arg(cf, 0);
    char choices[256] = "";
    size_t used = 0;
    for (int32_t i = 0; d->values && d->values[i]; i++) {
        if (strcmp(v, d->values[i]) == 0) {
            *FIELD(conf, d, int32_t) = i;
            return NULL;
        }
        int n = snprintf(choices + used, sizeof choices - used, "%s%s", i ? ", " : "", d->values[i]);
        if (n > 0 && (size_t)n < sizeof choices - used) used += (size_t)n;
    }
    return gw_conf_msg(cf, "invalid value \"%s\" (expected one of: %s)", v, choices);
}

const char *gw_conf_set_str_list(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf)
{
    const char ***arr = FIELD(conf, d, const char **);
    size_t *n = (size_t *)((char *)conf + d->offset + sizeof(const char **));
    for (size_t i = 0; i < gw_conf_nargs(cf); i++) {
        const char *v = gw_conf_arg(cf, i);
        if (!*v) return "empty value";
        const char **slot = gw_conf_push(cf, arr, n, sizeof *slot);
        if (!slot || !(*slot = gw_conf_strdup(cf, v))) return "out of memory";
    }
    return NULL;
}
