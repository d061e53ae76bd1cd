/* The route table: exact paths first, then the longest matching prefix; HEAD falls back to GET. */
#include "gw_http_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gw_routes *gw_routes_create(void)
{
    return calloc(1, sizeof(struct gw_routes));
}

void gw_routes_free(struct gw_routes *rt)
{
    if (!rt) return;
    for (size_t i = 0; i < rt->n; i++) {
        free(rt->v[i].method);
        free(rt->v[i].pattern);
    }
    free(rt->v);
    free(rt);
}

static bool same_method(const char *a, const char *b)
{
    if (!a || !b) return a == b;
    return strcmp(a, b) == 0;
}

static struct gw_route *find(const struct gw_routes *rt, const char *method, const char *pattern,
                             uint32_t flags)
{
    for (size_t i = 0; i < rt->n; i++) {
        struct gw_route *r = &rt->v[i];
        if (r->flags == flags && same_method(r->method, method) && strcmp(r->pattern, pattern) == 0) return r;
    }
    return NULL;
}

bool gw_routes_has(const struct gw_routes *rt, const char *method, const char *pattern)
{
    return find(rt, method, pattern, GW_ROUTE_EXACT) || find(rt, method, pattern, GW_ROUTE_PREFIX);
}

int32_t gw_routes_add(struct gw_routes *rt, const char *method, const char *pattern, uint32_t flags,
                      gw_handler_fn fn, void *ud, bool replace, struct mm_err *err)
{
    if (!rt || !pattern || pattern[0] != '/' || !fn || flags > GW_ROUTE_PREFIX)
        return mm_err_set(err, MM_INVALID, "route %s: the pattern must start with '/' and have a handler",
                          pattern ? pattern : "(null)");
    if (method)
        for (const char *p = method; *p; p++)
            if (*p < 'A' || *p > 'Z')
                return mm_err_set(err, MM_INVALID, "route %s: bad method \"%s\"", pattern, method);
    struct gw_route *r = find(rt, method, pattern, flags);
    if (r) {
        if (!replace)
            return mm_err_set(err, MM_INVALID, "route %s %s is already registered", method ? method : "*",
                              pattern);
        r->fn = fn;
        r->ud = ud;
        return MM_OK;
    }
    if (rt->n == rt->cap) {
        size_t cap = rt->cap ? rt->cap * 2 : 16;
        struct gw_route *nv = realloc(rt->v, cap * sizeof *nv);
        if (!nv) return mm_err_set(err, MM_NOMEM, "out of memory");
        rt->v = nv;
        rt->cap = cap;
    }
    r = &rt->v[rt->n];
    memset(r, 0, sizeof *r);
    r->method = method ? strdup(method) : NULL;
    r->pattern = strdup(pattern);
    if ((method && !r->method) || !r->pattern) {
        free(r->method);
        free(r->pattern);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    r->pattern_len = strlen(pattern);
    r->flags = flags;
    r->fn = fn;
    r->ud = ud;
    rt->n++;
    return MM_OK;
}

static bool path_matches(const struct gw_route *r, const char *path)
{
    if (r->flags == GW_ROUTE_PREFIX) return strncmp(path, r->pattern, r->pattern_len) == 0;
    return strcmp(path, r->pattern) == 0;
}

static bool method_matches(const struct gw_route *r, const char *method)
{
    if (!r->method) return true;
    if (strcmp(r->method, method) == 0) return true;
    return strcmp(method, "HEAD") == 0 && strcmp(r->method, "GET") == 0;
}

const struct gw_route *gw_routes_match(const struct gw_routes *rt, const char *method, const char *path,
                                       int *status, char *allow, size_t allow_size)
{
    const struct gw_route *best = NULL;
    bool path_known = false;
    /* exact beats prefix; among prefixes the longest wins */
    for (size_t i = 0; i < rt->n; i++) {
        const struct gw_route *r = &rt->v[i];
        if (!path_matches(r, path)) continue;
        path_known = true;
        if (!method_matches(r, method)) continue;
        if (!best || (best->flags == GW_ROUTE_PREFIX &&
                      (r->flags == GW_ROUTE_EXACT || r->pattern_len > best->pattern_len)))
            best = r;
    }
    if (best) return best;
    *status = path_known ? 405 : 404;
    if (allow_size) allow[0] = '\0';
    if (path_known) {
        size_t used = 0;
        for (size_t i = 0; i < rt->n; i++) {
            const struct gw_route *r = &rt->v[i];
            if (!path_matches(r, path) || !r->method || strstr(allow, r->method)) continue;
            int n = snprintf(allow + used, allow_size - used, "%s%s", used ? ", " : "", r->method);
            if (n < 0 || (size_t)n >= allow_size - used) break;
            used += (size_t)n;
        }
    }
    return NULL;
}
