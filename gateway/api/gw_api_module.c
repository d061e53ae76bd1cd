/* The OpenAI API module of `mmgw`: one state per configuration generation (the model registry), its
 * routes, and the per-worker metrics collector. */
#include <stdlib.h>
#include <string.h>

#include "gw_api.h"
#include "gw_api_internal.h"
#include "mm_json.h"
#include "mm_log.h"

static void collect_workers(struct gw_metrics *reg, void *ud)
{
    struct gw_api_state *st = ud;
    for (size_t i = 0; i < st->n_models; i++) {
        struct gw_api_model *m = &st->models[i];
        if (!m->router) continue;
        struct gw_worker_stats ws[64];
        size_t n = gw_router_stats(m->router, ws, 64);
        if (n > 64) n = 64;
        for (size_t k = 0; k < n; k++) {
            const char *l[] = {m->name, ws[k].target};
            double h = ws[k].health == GW_WORKER_HEALTHY   ? 1.0
                       : ws[k].health == GW_WORKER_UNKNOWN ? 0.5
                                                           : 0.0;
            double b = ws[k].breaker == GW_BREAKER_CLOSED      ? 0.0
                       : ws[k].breaker == GW_BREAKER_HALF_OPEN ? 1.0
                                                               : 2.0;
            gw_series_set(gw_metric_series(st->m.w_health, l), h);
            gw_series_set(gw_metric_series(st->m.w_breaker, l), b);
            gw_series_set(gw_metric_series(st->m.w_inflight, l), ws[k].in_flight);
            gw_series_set(gw_metric_series(st->m.w_load, l), ws[k].reported_load);
            gw_series_set(gw_metric_series(st->m.w_requests, l), (double)ws[k].requests);
            gw_series_set(gw_metric_series(st->m.w_failures, l), (double)ws[k].failures);
        }
    }
}

static void api_fini(void *state)
{
    struct gw_api_state *st = state;
    if (!st) return;
    if (st->collecting) gw_metrics_remove_collector(st->reg, collect_workers, st);
    gw_api_registry_free(st);
    gw_api_auth_free(&st->auth);
    free(st);
}

struct route_def {
    const char *method, *path;
    gw_handler_fn fn;
    uint32_t match; /* GW_ROUTE_EXACT or GW_ROUTE_PREFIX */
    bool open;      /* served without an api_key (health checks of load balancers) */
};

static const struct route_def routes[] = {
    {"POST", "/v1/chat/completions", gw_api_handle_chat, GW_ROUTE_EXACT, false},
    {"POST", "/v1/completions", gw_api_handle_completions, GW_ROUTE_EXACT, false},
    {"GET", "/v1/models", gw_api_handle_models, GW_ROUTE_EXACT, false},
    {"GET", "/v1/models/", gw_api_handle_model, GW_ROUTE_PREFIX, false},
    {"POST", "/tokenize", gw_api_handle_tokenize, GW_ROUTE_EXACT, false},
    {"POST", "/detokenize", gw_api_handle_detokenize, GW_ROUTE_EXACT, false},
    {"GET", "/health/models", gw_api_handle_health, GW_ROUTE_EXACT, true},
};
_Static_assert(sizeof routes / sizeof routes[0] <= GW_API_MAX_ROUTES, "GW_API_MAX_ROUTES");

/* Every API route enters here: the key check (api_key), then its handler. */
static void api_route(struct gw_request *req, void *ud)
{
    const struct gw_api_route *rt = ud;
    if (!rt->open && !gw_api_auth_check(&rt->st->auth, req)) return;
    /* the handler's JSON (the body, its normalisation, the plugin's parse of it) comes from the request's
     * arena: the request holds every value it makes there and drops them before the arena goes (r->body
     * in gw_api_req_clear, the parsers in choice_free); the dispatcher's reference keeps the arena for
     * the call */
    struct mm_json_scope prev = mm_json_arena_enter(req->arena, GW_API_JSON_ARENA_CAP);
    rt->fn(req, rt->st);
    mm_json_arena_leave(prev);
}

static int32_t api_init(const struct gw_module_ctx *ctx, void *prev_state, void **state, struct mm_err *err)
{
    struct gw_api_state *st = calloc(1, sizeof *st);
    if (!st) return mm_err_set(err, MM_NOMEM, "out of memory");
    st->reg = ctx->metrics;
    int32_t rc = gw_api_metrics_init(ctx->metrics, &st->m, err);
    if (rc == MM_OK) rc = gw_api_registry_build(st, ctx, err);
    if (rc == MM_OK)
        rc = gw_api_auth_init(&st->auth, ctx->config->http.api_keys, ctx->config->http.n_api_keys, err);
    for (size_t i = 0; rc == MM_OK && i < sizeof routes / sizeof routes[0]; i++) {
        st->routes[i] = (struct gw_api_route){.fn = routes[i].fn, .st = st, .open = routes[i].open};
        rc = gw_routes_add(ctx->routes, routes[i].method, routes[i].path, routes[i].match, api_route,
                           &st->routes[i], false, err);
    }
    if (rc == MM_OK && !ctx->check_only) {
        if (gw_metrics_add_collector(ctx->metrics, collect_workers, st) != MM_OK)
            rc = mm_err_set(err, MM_NOMEM, "out of memory");
        else
            st->collecting = true;
    }
    if (rc != MM_OK) {
        api_fini(st);
        return rc;
    }
    if (!ctx->check_only)
        mm_log_info(GW_API_COMP, "serving %zu model(s)%s", st->n_models, prev_state ? " (reloaded)" : "");
    *state = st;
    return MM_OK;
}

const struct gw_module gw_api_module = {
    .name = "api",
    .init = api_init,
    .fini = api_fini,
};
