/* Built-in routes (GET /health, GET /metrics), the access log, and the server's own metrics. */
#include "gw_server_internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#ifndef MMGW_VERSION
#define MMGW_VERSION "0.0.0"
#endif

static const char *method_label(enum gw_method m)
{
    static const char *const names[] = {"OTHER", "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"};
    return (unsigned)m < sizeof names / sizeof names[0] ? names[m] : "OTHER";
}

/* One access line on stderr, in the logger's format but independent of log_level: `access_log on` means
 * every request is written. One fputs per line keeps lines whole. */
static void access_line(const struct gw_request *req, const struct gw_request_log *info, double secs)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    const char *ver = req->version == GW_HTTP_2 ? "2" : req->version == GW_HTTP_1_0 ? "1.0" : "1.1";
    char line[1400];
    /* the target is client data: cut it, and the printf below never sees it as a format */
    snprintf(
        line, sizeof line,
        "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ info access: %s \"%s %.1024s HTTP/%s\" %d %llu %.3fms id=%s\n",
        tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L,
        req->remote_addr, req->method, req->target, ver, info->status, (unsigned long long)info->bytes_out,
        secs * 1e3, req->id_str);
    fputs(line, stderr);
}

void gw_builtin_log(void *ud, const struct gw_request *req, const struct gw_request_log *info)
{
    const struct gw_generation *g = ud;
    struct gw_server *srv = g->srv;
    double secs = (double)info->duration_ns / 1e9;
    char status[8];
    snprintf(status, sizeof status, "%d", info->status);
    /* the route pattern, not the raw path, keeps the label set bounded */
    const char *route = req->route && req->route[0] ? req->route : "(none)";
    const char *labels[] = {route, method_label(req->method_id), status};
    gw_series_inc(gw_metric_series(srv->bm.requests, labels));
    gw_series_observe(gw_metric_series(srv->bm.duration, labels), secs);
    if (req->config && req->config->http.access_log) access_line(req, info, secs);
}

/* ---- routes ---- */

static void health(struct gw_request *req, void *ud)
{
    struct gw_server *srv = ud;
    if (atomic_load(&srv->draining))
        gw_http_respond_json(req, 503, "{\"status\":\"draining\"}");
    else
        gw_http_respond_json(req, 200, "{\"status\":\"ok\"}");
}

static void metrics(struct gw_request *req, void *ud)
{
    struct gw_server *srv = ud;
    struct mm_buf b;
    mm_buf_init(&b, 0);
    if (gw_metrics_render(srv->metrics, &b) != MM_OK) {
        mm_buf_free(&b);
        gw_http_send_error(req, 503, NULL, "out of memory rendering metrics", NULL, NULL);
        return;
    }
    gw_http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", b.data ? b.data : "", b.len);
    mm_buf_free(&b);
}

int32_t gw_builtin_routes_add(struct gw_server *srv, struct gw_routes *rt, struct mm_err *err)
{
    int32_t rc = MM_OK;
    if (!gw_routes_has(rt, "GET", "/health"))
        rc = gw_routes_add(rt, "GET", "/health", 0, health, srv, false, err);
    if (!rc && !gw_routes_has(rt, "GET", "/metrics"))
        rc = gw_routes_add(rt, "GET", "/metrics", 0, metrics, srv, false, err);
    return rc;
}

/* ---- metrics ---- */

static void collect(struct gw_metrics *r, void *ud)
{
    struct gw_server *srv = ud;
    if (!srv->http) return;
    struct gw_http_stats st;
    gw_http_get_stats(srv->http, &st);
    gw_series_set(gw_metric_series(srv->bm.conns_open, NULL), (double)st.connections_open);
    gw_series_set(gw_metric_series(srv->bm.in_flight, NULL), (double)st.requests_active);
    /* the transport keeps totals; counters advance by the difference since the last scrape */
    const uint64_t totals[3] = {st.connections_total, st.connections_h2_total, st.connections_tls_total};
    static const char *const kinds[3] = {"all", "h2", "tls"};
    for (int i = 0; i < 3; i++) {
        const char *l[] = {kinds[i]};
        gw_series_add(gw_metric_series(srv->bm.conns_total, l),
                      (double)(totals[i] - srv->bm.last_conns_total[i]));
        srv->bm.last_conns_total[i] = totals[i];
    }
}

int32_t gw_builtin_metrics_init(struct gw_server *srv, struct mm_err *err)
{
    struct gw_builtin_metrics *m = &srv->bm;
    struct gw_metrics *r = srv->metrics;
    static const char *const req_labels[] = {"route", "method", "status"};
    static const char *const kind_label[] = {"kind"};
    static const char *const result_label[] = {"result"};
    static const char *const version_label[] = {"version"};
    m->requests = gw_metrics_register(r, GW_METRIC_COUNTER, "mmgw_http_requests_total",
                                      "HTTP requests answered, by route pattern, method and status.",
                                      req_labels, 3, NULL, 0, err);
    if (!m->requests) return err->code;
    m->duration = gw_metrics_register(r, GW_METRIC_HISTOGRAM, "mmgw_http_request_duration_seconds",
                                      "Time from the request head to the end of the response.", req_labels, 3,
                                      NULL, 0, err);
    if (!m->duration) return err->code;
    m->conns_open = gw_metrics_register(r, GW_METRIC_GAUGE, "mmgw_http_connections_open",
                                        "Open client connections.", NULL, 0, NULL, 0, err);
    if (!m->conns_open) return err->code;
    m->conns_total =
        gw_metrics_register(r, GW_METRIC_COUNTER, "mmgw_http_connections_total",
                            "Accepted client connections (all, HTTP/2, TLS).", kind_label, 1, NULL, 0, err);
    if (!m->conns_total) return err->code;
    m->in_flight =
        gw_metrics_register(r, GW_METRIC_GAUGE, "mmgw_http_requests_in_flight",
                            "Requests alive (being read, handled or answered).", NULL, 0, NULL, 0, err);
    if (!m->in_flight) return err->code;
    m->reloads =
        gw_metrics_register(r, GW_METRIC_COUNTER, "mmgw_config_reloads_total",
                            "Configuration reloads (SIGHUP) by result.", result_label, 1, NULL, 0, err);
    if (!m->reloads) return err->code;
    m->build_info = gw_metrics_register(r, GW_METRIC_GAUGE, "mmgw_build_info",
                                        "Always 1; the version as a label.", version_label, 1, NULL, 0, err);
    if (!m->build_info) return err->code;
    m->start_time =
        gw_metrics_register(r, GW_METRIC_GAUGE, "mmgw_start_time_seconds",
                            "Process start, seconds since the Unix epoch.", NULL, 0, NULL, 0, err);
    if (!m->start_time) return err->code;
    const char *ok[] = {"ok"}, *failed[] = {"failed"}, *ver[] = {MMGW_VERSION};
    m->reload_ok = gw_metric_series(m->reloads, ok);
    m->reload_failed = gw_metric_series(m->reloads, failed);
    gw_series_set(gw_metric_series(m->build_info, ver), 1);
    gw_series_set(gw_metric_series(m->start_time, NULL), (double)time(NULL));
    gw_metric_series(m->conns_open, NULL);
    gw_metric_series(m->in_flight, NULL);
    if (gw_metrics_add_collector(r, collect, srv) != MM_OK) return mm_err_set(err, MM_NOMEM, "out of memory");
    return MM_OK;
}

void gw_builtin_metrics_fini(struct gw_server *srv)
{
    gw_metrics_remove_collector(srv->metrics, collect, srv);
}
