/* Gateway modules: how a component (the OpenAI API handlers, a test route set) plugs into the `mmgw`
 * process: it receives each configuration generation, registers its routes and metrics, and is told when a
 * generation is retired.
 *
 * Registering a module with the mmgw binary (CMake, in the module's own CMakeLists.txt):
 *
 *   add_library(gw_api STATIC ...)                       # defines: const struct gw_module gw_api_module =
 * {...}; target_link_libraries(gw_api PUBLIC gw_server)       # for this header and gw_http.h
 *   set_property(GLOBAL APPEND PROPERTY MMGW_GATEWAY_MODULES "gw_api:gw_api_module")
 *
 * gateway/server generates the module list of `mmgw` from that property at the end of configuration
 * (modules run in the order they registered). Another program can call gw_server_main with its own list
 * (the HTTP integration tests do).
 *
 * Generations. At start and at every successful reload (SIGHUP) the server builds a generation: for each
 * module init() gets the new config and an empty route table, and returns its state. The built-in routes
 * (GET /health, GET /metrics) are added afterwards unless a module registered the same method and path.
 * Requests run on the generation that was current when they arrived; a generation is retired, and fini()
 * called with its state, once no request of it is alive. Routes' ud pointers should point into the state.
 *
 * Threads. init and fini run on the main thread; handlers run on loop threads (see gw_http.h). While a
 * reload runs init, the previous generation keeps serving, so init must not change what prev_state's
 * handlers use. To keep an expensive object across reloads (a loaded tokenizer, worker channels), share it
 * by reference count between prev_state and the new state.
 *
 * Failure. If init fails the generation is abandoned: fini is called for the modules whose init succeeded,
 * at start the process exits non-zero, on reload the old generation stays and the error is logged. */
#ifndef GW_MODULE_H
#define GW_MODULE_H

#include <stdbool.h>
#include <stdint.h>

#include "gw_config.h"
#include "gw_executor.h"
#include "gw_http.h"
#include "gw_metrics.h"

struct event_base;

struct gw_module_ctx {
    const struct gw_config *config;  /* the generation's config (valid until fini) */
    struct gw_routes *routes;        /* add routes with gw_routes_add */
    struct gw_metrics *metrics;      /* process-wide; register idempotently (same name = same family) */
    bool check_only;                 /* `mmgw -t`: validate (files exist, options parse) but start nothing;
                                        n_loops is 0 and fini follows at once */
    uint32_t n_loops;                /* event loops (threads); requests carry their loop_index */
    struct event_base *const *bases; /* [n_loops] each loop's base */
    const struct gw_executor *const *executors; /* [n_loops] post work to a loop */
    const struct gw_executor *main_executor;    /* the main thread (where init/fini run) */
};

struct gw_module {
    const char *name;
    /** Build the state for ctx->config, add routes, return it in *state. prev_state is the state of the
     * generation being replaced (NULL at start). Errors: a code and a one-line message (use the
     * "file:line: " of struct gw_model_conf where it applies). */
    int32_t (*init)(const struct gw_module_ctx *ctx, void *prev_state, void **state, struct mm_err *err);
    /** The generation is retired (no request of it is alive), or its init was abandoned. */
    void (*fini)(void *state);
};

/** Run the mmgw process: parse argv (-c FILE, -t, -v, -h, --dump-directives), then serve until SIGTERM or
 * SIGINT. modules is a NULL-terminated list. Returns the process exit code. */
int gw_server_main(int argc, char **argv, const struct gw_module *const *modules);

#endif
