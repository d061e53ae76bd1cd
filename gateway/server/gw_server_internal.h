/* Private to gateway/server: the process state shared by the lifecycle code and the built-in routes. */
#ifndef GW_SERVER_INTERNAL_H
#define GW_SERVER_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>

#include "gw_http_server.h"
#include "gw_event_exec.h"
#include "gw_metrics.h"
#include "gw_module.h"

#define GW_SERVER_COMP "mmgw"

struct gw_server;

/** One configuration generation: the config, each module's state, and the transport site serving it. */
struct gw_generation {
    struct gw_server *srv;
    struct gw_config *config;
    void **states; /* [n_modules] */
    size_t n_inited;
    uint64_t number;
};

struct gw_builtin_metrics {
    struct gw_metric *requests, *duration, *reloads, *conns_open, *conns_total, *in_flight, *build_info,
        *start_time;
    struct gw_series *reload_ok, *reload_failed;
    uint64_t last_conns_total[3];
};

struct gw_server {
    const struct gw_module *const *modules;
    size_t n_modules;
    const char *conf_path;
    struct gw_config *config; /* the current one */
    struct gw_http *http;
    struct gw_metrics *metrics;
    struct event_base *base;
    struct gw_event_exec main_exec; /* the main thread's executor (retiring generations, drain) */
    uint64_t generations;
    atomic_bool draining;
    bool stopping;
    bool log_level_from_env;
    struct event *drain_timer;
    struct gw_builtin_metrics bm;
};

/** Register the built-in metrics and the transport collector. */
int32_t gw_builtin_metrics_init(struct gw_server *srv, struct mm_err *err);
void gw_builtin_metrics_fini(struct gw_server *srv);
/** Add GET /health and GET /metrics unless a module already has them. */
int32_t gw_builtin_routes_add(struct gw_server *srv, struct gw_routes *rt, struct mm_err *err);
/** The site log hook (ud: the struct gw_generation): access log line and request metrics. */
void gw_builtin_log(void *ud, const struct gw_request *req, const struct gw_request_log *info);

#endif
