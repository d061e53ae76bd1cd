/* Metrics registry: exposition text (Prometheus 0.0.4), labels and escaping, histograms, idempotent
 * registration, cardinality bound, collectors, and exact totals under concurrent updates. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gw_metrics.h"
#include "mmgw_test.h"

static char *render(struct gw_metrics *r)
{
    struct mm_buf b;
    mm_buf_init(&b, 0);
    CHECK(gw_metrics_render(r, &b) == MM_OK);
    return b.data ? b.data : strdup("");
}

static void test_exposition(void)
{
    struct gw_metrics *r = gw_metrics_create();
    struct mm_err err;
    const char *lbl[] = {"route", "status"};
    struct gw_metric *c =
        gw_metrics_register(r, GW_METRIC_COUNTER, "t_requests_total", "Requests.", lbl, 2, NULL, 0, &err);
    struct gw_metric *g =
        gw_metrics_register(r, GW_METRIC_GAUGE, "t_open", "Open \\ things\nnow.", NULL, 0, NULL, 0, &err);
    const double bounds[] = {0.005, 0.1, 1};
    struct gw_metric *h =
        gw_metrics_register(r, GW_METRIC_HISTOGRAM, "t_latency_seconds", "Latency.", lbl, 1, bounds, 3, &err);
    CHECK(c && g && h);
    gw_series_inc(gw_metric_series(c, (const char *[]){"/a", "200"}));
    gw_series_add(gw_metric_series(c, (const char *[]){"/a", "200"}), 2);
    gw_series_add(gw_metric_series(c, (const char *[]){"/a", "200"}), -5); /* counters never go down */
    gw_series_inc(gw_metric_series(c, (const char *[]){"q\"\\\n", "500"}));
    gw_series_set(gw_metric_series(g, NULL), 2.5);
    gw_series_add(gw_metric_series(g, NULL), -1);
    struct gw_series *hs = gw_metric_series(h, (const char *[]){"/a"});
    gw_series_observe(hs, 0.005); /* upper bounds are inclusive */
    gw_series_observe(hs, 0.05);
    gw_series_observe(hs, 7);
    CHECK_EQ_INT(gw_series_hist_bucket(hs, 0), 1);
    CHECK_EQ_INT(gw_series_hist_bucket(hs, 1), 2);
    CHECK_EQ_INT(gw_series_hist_bucket(hs, 3), 3);
    CHECK_NEAR(gw_series_hist_sum(hs), 7.055, 1e-12);
    char *text = render(r);
    const char *want = "# HELP t_requests_total Requests.\n"
                       "# TYPE t_requests_total counter\n"
                       "t_requests_total{route=\"/a\",status=\"200\"} 3\n"
                       "t_requests_total{route=\"q\\\"\\\\\\n\",status=\"500\"} 1\n"
                       "# HELP t_open Open \\\\ things\\nnow.\n"
                       "# TYPE t_open gauge\n"
                       "t_open 1.5\n"
                       "# HELP t_latency_seconds Latency.\n"
                       "# TYPE t_latency_seconds histogram\n"
                       "t_latency_seconds_bucket{route=\"/a\",le=\"0.005\"} 1\n"
                       "t_latency_seconds_bucket{route=\"/a\",le=\"0.1\"} 2\n"
                       "t_latency_seconds_bucket{route=\"/a\",le=\"1\"} 2\n"
                       "t_latency_seconds_bucket{route=\"/a\",le=\"+Inf\"} 3\n"
                       "t_latency_seconds_sum{route=\"/a\"} 7.055\n"
                       "t_latency_seconds_count{route=\"/a\"} 3\n";
    CHECK_MSG(strcmp(text, want) == 0, "exposition:\n%s", text);
    free(text);
    gw_metrics_destroy(r);
}

static void test_registration(void)
{
    struct gw_metrics *r = gw_metrics_create();
    struct mm_err err;
    const char *l1[] = {"a"}, *l2[] = {"b"}, *le[] = {"le"}, *bad[] = {"__x"};
    struct gw_metric *m = gw_metrics_register(r, GW_METRIC_COUNTER, "x_total", "X.", l1, 1, NULL, 0, &err);
    CHECK(m != NULL);
    CHECK(gw_metrics_register(r, GW_METRIC_COUNTER, "x_total", "other help", l1, 1, NULL, 0, &err) == m);
    CHECK(gw_metrics_register(r, GW_METRIC_GAUGE, "x_total", "X.", l1, 1, NULL, 0, &err) == NULL);
    CHECK(strstr(err.msg, "already registered") != NULL);
    CHECK(gw_metrics_register(r, GW_METRIC_COUNTER, "x_total", "X.", l2, 1, NULL, 0, &err) == NULL);
    CHECK(gw_metrics_register(r, GW_METRIC_COUNTER, "9bad", "X.", NULL, 0, NULL, 0, &err) == NULL);
    CHECK(gw_metrics_register(r, GW_METRIC_COUNTER, "bad-name", "X.", NULL, 0, NULL, 0, &err) == NULL);
    CHECK(gw_metrics_register(r, GW_METRIC_COUNTER, "ok:name", "X.", NULL, 0, NULL, 0, &err) != NULL);
    CHECK(gw_metrics_register(r, GW_METRIC_COUNTER, "y", "X.", bad, 1, NULL, 0, &err) == NULL);
    CHECK(gw_metrics_register(r, GW_METRIC_HISTOGRAM, "h", "X.", le, 1, NULL, 0, &err) == NULL);
    const double unsorted[] = {1, 0.5};
    CHECK(gw_metrics_register(r, GW_METRIC_HISTOGRAM, "h", "X.", NULL, 0, unsorted, 2, &err) == NULL);
    struct gw_metric *hd = gw_metrics_register(r, GW_METRIC_HISTOGRAM, "h", "X.", NULL, 0, NULL, 0, &err);
    CHECK(hd != NULL);
    gw_series_observe(gw_metric_series(hd, NULL), 0.2); /* default buckets */
    CHECK_EQ_INT(gw_series_hist_bucket(gw_metric_series(hd, NULL), gw_metrics_n_latency_buckets), 1);
    /* updates through the wrong type or NULL are no-ops */
    gw_series_set(gw_metric_series(m, l1), 5);
    gw_series_observe(gw_metric_series(m, l1), 5);
    CHECK_NEAR(gw_series_value(gw_metric_series(m, l1)), 0, 0);
    gw_series_inc(NULL);
    CHECK(gw_metric_series(m, NULL) == NULL); /* labels required */
    /* cardinality bound */
    char v[32];
    size_t made = 0;
    for (int i = 0; i < GW_METRICS_MAX_SERIES + 5; i++) {
        snprintf(v, sizeof v, "v%d", i);
        if (gw_metric_series(m, (const char *[]){v})) made++;
    }
    CHECK_EQ_INT(made, GW_METRICS_MAX_SERIES - 1);              /* the series {a="a"} made above counts too */
    CHECK(gw_metric_series(m, (const char *[]){"v3"}) != NULL); /* existing ones are still found */
    gw_metrics_destroy(r);
}

struct worker_arg {
    struct gw_metric *c, *h;
};

static void *worker(void *arg)
{
    struct worker_arg *a = arg;
    struct gw_series *s = gw_metric_series(a->c, (const char *[]){"shared"});
    for (int i = 0; i < 100000; i++) {
        gw_series_inc(s);
        if (i % 10 == 0) gw_series_observe(gw_metric_series(a->h, NULL), 0.5);
    }
    return NULL;
}

static int collected;

static void collector(struct gw_metrics *r, void *ud)
{
    collected++;
    gw_series_set(gw_metric_series(ud, NULL), 42);
}

static void test_threads_and_collectors(void)
{
    struct gw_metrics *r = gw_metrics_create();
    struct mm_err err;
    struct worker_arg a = {
        gw_metrics_register(r, GW_METRIC_COUNTER, "c_total", "C.", (const char *[]){"k"}, 1, NULL, 0, &err),
        gw_metrics_register(r, GW_METRIC_HISTOGRAM, "h_seconds", "H.", NULL, 0, NULL, 0, &err),
    };
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, &a);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    CHECK_NEAR(gw_series_value(gw_metric_series(a.c, (const char *[]){"shared"})), 400000, 0);
    CHECK_NEAR(gw_series_value(gw_metric_series(a.h, NULL)), 40000, 0);
    CHECK_NEAR(gw_series_hist_sum(gw_metric_series(a.h, NULL)), 20000, 1e-6);
    struct gw_metric *g = gw_metrics_register(r, GW_METRIC_GAUGE, "g", "G.", NULL, 0, NULL, 0, &err);
    CHECK(gw_metrics_add_collector(r, collector, g) == MM_OK);
    char *text = render(r);
    CHECK(collected == 1 && strstr(text, "\ng 42\n") != NULL);
    free(text);
    gw_metrics_remove_collector(r, collector, g);
    text = render(r);
    CHECK(collected == 1);
    free(text);
    gw_metrics_destroy(r);
}

int main(void)
{
    test_exposition();
    test_registration();
    test_threads_and_collectors();
    return test_done();
}
