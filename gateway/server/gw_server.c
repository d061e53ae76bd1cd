/* The mmgw process: command line, configuration generations, signals (SIGHUP reload, SIGTERM/SIGINT drain),
 * and orderly shutdown. */
#include "gw_server_internal.h"

#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw_conf.h"
#include "mm_log.h"
#include "mm_malloc.h"

#ifndef MMGW_VERSION
#define MMGW_VERSION "0.0.0"
#endif

#define DEFAULT_CONF "conf/mmgw.conf"

/* ---- generations ---- */

/* A config the parser accepts may still leave nothing to serve on: without a listen directive the process
 * would run (or reload) into a gateway that accepts no connection at all. */
static int32_t check_listeners(const struct gw_config *conf, struct mm_err *err)
{
    if (conf->http.n_listen > 0) return MM_OK;
    return mm_err_set(err, MM_INVALID,
                      "%s: no \"listen\" directive in \"http\": the gateway would accept no connections",
                      conf->path);
}

static void gen_free(struct gw_generation *g)
{
    struct gw_server *srv = g->srv;
    for (size_t i = g->n_inited; i-- > 0;)
        if (srv->modules[i]->fini) srv->modules[i]->fini(g->states[i]);
    mm_log_debug(GW_SERVER_COMP, "configuration generation %llu retired", (unsigned long long)g->number);
    gw_config_unref(g->config);
    free(g->states);
    free(g);
}

static void gen_retire_task(void *arg)
{
    gen_free(arg);
}

/* The site's last reference went away (any thread): module fini runs on the main thread. */
static void site_released(void *ud, struct gw_site *site)
{
    struct gw_generation *g = ud;
    if (gw_executor_post(&g->srv->main_exec.exec, gen_retire_task, g) != 0)
        gen_free(g); /* main loop is gone */
}

static int32_t gen_create(struct gw_server *srv, struct gw_config *conf, struct gw_generation *prev,
                          bool check_only, struct gw_generation **out, struct gw_routes **routes_out,
                          struct mm_err *err)
{
    struct gw_generation *g = calloc(1, sizeof *g);
    struct gw_routes *rt = gw_routes_create();
    uint32_t n = srv->http ? gw_http_n_loops(srv->http) : 0;
    struct event_base **bases = n ? calloc(n, sizeof *bases) : NULL;
    const struct gw_executor **execs = n ? calloc(n, sizeof *execs) : NULL;
    if (g) g->states = calloc(srv->n_modules ? srv->n_modules : 1, sizeof *g->states);
    if (!g || !g->states || !rt || (n && (!bases || !execs))) {
        if (g) free(g->states);
        free(g);
        gw_routes_free(rt);
        free(bases);
        free(execs);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < n; i++) {
        bases[i] = gw_http_loop_base(srv->http, i);
        execs[i] = gw_http_loop_executor(srv->http, i);
    }
    g->srv = srv;
    gw_config_ref(conf);
    g->config = conf;
    g->number = ++srv->generations;
    struct gw_module_ctx ctx = {
        .config = conf,
        .routes = rt,
        .metrics = srv->metrics,
        .check_only = check_only,
        .n_loops = n,
        .bases = bases,
        .executors = execs,
        .main_executor = &srv->main_exec.exec,
    };
    int32_t rc = MM_OK;
    for (size_t i = 0; i < srv->n_modules && rc == MM_OK; i++) {
        const struct gw_module *m = srv->modules[i];
        void *state = NULL;
        rc = m->init ? m->init(&ctx, prev ? prev->states[i] : NULL, &state, err) : MM_OK;
        if (rc == MM_OK) {
            g->states[i] = state;
            g->n_inited = i + 1;
        } else if (err && err->msg[0] == '\0') {
            mm_err_set(err, rc, "module %s: init failed (%s)", m->name, mm_strerror(rc));
        }
    }
    if (rc == MM_OK) rc = gw_builtin_routes_add(srv, rt, err);
    free(bases);
    free(execs);
    if (rc) {
        gw_routes_free(rt);
        gen_free(g);
        return rc;
    }
    *out = g;
    *routes_out = rt;
    return MM_OK;
}

/* Build a generation for conf and make it current. */
static int32_t activate(struct gw_server *srv, struct gw_config *conf, struct gw_generation *prev,
                        struct mm_err *err)
{
    struct gw_generation *g;
    struct gw_routes *rt;
    int32_t rc = gen_create(srv, conf, prev, false, &g, &rt, err);
    if (rc) return rc;
    struct gw_site_hooks hooks = {.log = gw_builtin_log, .release = site_released, .ud = g};
    struct gw_site *site;
    rc = gw_site_create(conf, rt, &hooks, &site, err);
    if (rc) {
        gen_free(g);
        return rc;
    }
    rc = gw_http_apply(srv->http, site, err);
    gw_site_unref(site); /* on success the transport holds it; on failure this retires the generation */
    return rc;
}

/* The generation of the current site, to hand modules their previous state on reload. */
static struct gw_generation *current_generation(struct gw_server *srv);

/* ---- logging level ---- */

static void apply_log_level(struct gw_server *srv, const struct gw_config *conf)
{
    if (!srv->log_level_from_env) mm_log_set_level(conf->http.log_level);
}

/* ---- signals ---- */

static void stop_now(struct gw_server *srv)
{
    srv->stopping = true;
    event_base_loopbreak(srv->base);
}

static void drained_task(void *arg)
{
    struct gw_server *srv = arg;
    mm_log_info(GW_SERVER_COMP, "all connections closed");
    stop_now(srv);
}

static void drained(void *ud)
{
    struct gw_server *srv = ud;
    /* runs on a loop thread: hop to the main thread */
    if (gw_executor_post(&srv->main_exec.exec, drained_task, srv) != 0) event_base_loopbreak(srv->base);
}

static void drain_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    struct gw_server *srv = arg;
    mm_log_warn(GW_SERVER_COMP, "shutdown_timeout passed with requests still running; closing them");
    stop_now(srv);
}

static void on_term(evutil_socket_t sig, short what, void *arg)
{
    struct gw_server *srv = arg;
    if (atomic_load(&srv->draining)) {
        mm_log_info(GW_SERVER_COMP, "signal %d again: stopping now", (int)sig);
        stop_now(srv);
        return;
    }
    atomic_store(&srv->draining, true);
    int64_t ms = srv->config->http.shutdown_timeout_ms;
    mm_log_info(GW_SERVER_COMP, "signal %d: draining (up to %lld ms)", (int)sig, (long long)ms);
    srv->drain_timer = evtimer_new(srv->base, drain_timeout_cb, srv);
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    if (srv->drain_timer) evtimer_add(srv->drain_timer, &tv);
    gw_http_drain(srv->http, drained, srv);
}

static void on_hup(evutil_socket_t sig, short what, void *arg)
{
    struct gw_server *srv = arg;
    if (atomic_load(&srv->draining)) return;
    mm_log_info(GW_SERVER_COMP, "SIGHUP: reloading %s", srv->conf_path);
    struct mm_err err;
    mm_err_clear(&err);
    struct gw_config *conf;
    int32_t rc = gw_config_load(srv->conf_path, &conf, &err);
    if (rc == MM_OK && (rc = check_listeners(conf, &err)) != MM_OK) gw_config_unref(conf);
    if (rc == MM_OK) {
        if (conf->http.worker_threads != srv->config->http.worker_threads)
            mm_log_warn(GW_SERVER_COMP, "worker_threads changed: takes effect after a restart");
        rc = activate(srv, conf, current_generation(srv), &err);
        if (rc == MM_OK) {
            gw_config_unref(srv->config);
            srv->config = conf;
            apply_log_level(srv, conf);
        } else {
            gw_config_unref(conf);
        }
    }
    if (rc) {
        gw_series_inc(srv->bm.reload_failed);
        mm_log_error(GW_SERVER_COMP, "reload failed, keeping the running configuration: %s", err.msg);
        return;
    }
    gw_series_inc(srv->bm.reload_ok);
    mm_log_info(GW_SERVER_COMP, "reloaded: configuration generation %llu",
                (unsigned long long)srv->generations);
}

/* ---- current generation lookup ---- */

static struct gw_generation *current_generation(struct gw_server *srv)
{
    /* the transport's current site carries the generation as its hooks' ud */
    const struct gw_site *site = srv->http ? gw_http_current_site(srv->http) : NULL;
    return site ? gw_site_hooks_ud(site) : NULL;
}

/* ---- command line ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: mmgw [-c FILE] [-t] [-v] [-h] [--dump-directives]\n"
               "  -c FILE             configuration file (default " DEFAULT_CONF ")\n"
               "  -t                  test the configuration and exit\n"
               "  -v                  print the version and exit\n"
               "  --dump-directives   print the directive reference (docs/config.md) and exit\n"
               "Signals: SIGHUP reloads the configuration, SIGTERM/SIGINT drain and exit.\n");
}

static int test_config(struct gw_server *srv, const char *path)
{
    struct mm_err err;
    mm_err_clear(&err);
    struct gw_config *conf;
    int32_t rc = gw_config_load(path, &conf, &err);
    if (rc == MM_OK) {
        rc = check_listeners(conf, &err);
        if (rc == MM_OK) rc = gw_tls_check_config(conf, &err);
        if (rc == MM_OK) {
            struct gw_generation *g;
            struct gw_routes *rt;
            rc = gen_create(srv, conf, NULL, true, &g, &rt, &err);
            if (rc == MM_OK) {
                gw_routes_free(rt);
                gen_free(g);
            }
        }
        gw_config_unref(conf);
    }
    if (rc) {
        fprintf(stderr, "mmgw: %s\nmmgw: configuration file %s test failed\n", err.msg, path);
        return 1;
    }
    fprintf(stderr, "mmgw: configuration file %s test is successful\n", path);
    return 0;
}

static uint32_t loop_count(const struct gw_config *conf)
{
    if (conf->http.worker_threads > 0) return (uint32_t)conf->http.worker_threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1;
}

int gw_server_main(int argc, char **argv, const struct gw_module *const *modules)
{
    mm_malloc_tune_server();
    const char *path = DEFAULT_CONF;
    bool test = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-c") == 0 && i + 1 < argc) {
            path = argv[++i];
        } else if (strcmp(a, "-t") == 0) {
            test = true;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) {
            printf("mmgw %s\n", MMGW_VERSION);
            return 0;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--dump-directives") == 0) {
            gw_conf_dump_markdown(stdout);
            return 0;
        } else {
            fprintf(stderr, "mmgw: unknown option \"%s\"\n", a);
            usage(stderr);
            return 2;
        }
    }
    struct gw_server srv_storage;
    struct gw_server *srv = &srv_storage;
    memset(srv, 0, sizeof *srv);
    srv->modules = modules;
    while (modules && modules[srv->n_modules]) srv->n_modules++;
    srv->conf_path = path;
    srv->log_level_from_env = getenv("MMGW_LOG_LEVEL") != NULL;
    signal(SIGPIPE, SIG_IGN);
    gw_http_global_init(); /* before the main base: loop threads wake it */
    srv->base = event_base_new();
    srv->metrics = gw_metrics_create();
    if (!srv->base || !srv->metrics || gw_event_exec_init(&srv->main_exec, srv->base) != 0) {
        fprintf(stderr, "mmgw: out of memory\n");
        return 1;
    }
    int exit_code = 1;
    struct mm_err err;
    mm_err_clear(&err);
    if (test) {
        exit_code = test_config(srv, path);
        goto out;
    }
    if (gw_config_load(path, &srv->config, &err) != MM_OK || check_listeners(srv->config, &err) != MM_OK) {
        fprintf(stderr, "mmgw: %s\n", err.msg);
        goto out;
    }
    apply_log_level(srv, srv->config);
    if (gw_builtin_metrics_init(srv, &err) != MM_OK ||
        gw_http_create(loop_count(srv->config), &srv->http, &err) != MM_OK ||
        activate(srv, srv->config, NULL, &err) != MM_OK) {
        mm_log_error(GW_SERVER_COMP, "%s", err.msg);
        goto out;
    }
    struct event *ev_hup = evsignal_new(srv->base, SIGHUP, on_hup, srv);
    struct event *ev_term = evsignal_new(srv->base, SIGTERM, on_term, srv);
    struct event *ev_int = evsignal_new(srv->base, SIGINT, on_term, srv);
    if (!ev_hup || !ev_term || !ev_int || evsignal_add(ev_hup, NULL) || evsignal_add(ev_term, NULL) ||
        evsignal_add(ev_int, NULL)) {
        mm_log_error(GW_SERVER_COMP, "cannot install signal handlers");
    } else {
        mm_log_info(GW_SERVER_COMP, "mmgw %s started: %u loop(s), %zu module(s), pid %d", MMGW_VERSION,
                    gw_http_n_loops(srv->http), srv->n_modules, (int)getpid());
        event_base_dispatch(srv->base);
        exit_code = 0;
    }
    if (ev_hup) event_free(ev_hup);
    if (ev_term) event_free(ev_term);
    if (ev_int) event_free(ev_int);
out:
    if (srv->http) gw_http_destroy(srv->http); /* closes what is left; sites are released */
    srv->http = NULL;
    if (srv->drain_timer) event_free(srv->drain_timer);
    gw_event_exec_fini(&srv->main_exec); /* retire the generations released on loop threads */
    gw_builtin_metrics_fini(srv);
    gw_config_unref(srv->config);
    gw_metrics_destroy(srv->metrics);
    event_base_free(srv->base);
    if (exit_code == 0 && !test) mm_log_info(GW_SERVER_COMP, "exiting");
    return exit_code;
}
