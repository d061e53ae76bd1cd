/* A small thread-safe metrics registry with Prometheus text exposition (format 0.0.4).
 *
 * A metric (family) has a type, a name, help text and label names; a series is one set of label values.
 * Register families once (at module init; registering the same name again with the same type and labels
 * returns the existing family, so reloads are harmless), look a series up once and keep the pointer: series
 * live as long as the registry, and updating one is a few atomic operations, safe from any thread.
 *
 *   struct gw_metric *m = gw_metrics_register(reg, GW_METRIC_COUNTER, "mmgw_tokens_total",
 *                                             "Tokens by direction.", (const char *[]){"dir"}, 1, NULL, 0,
 * err); struct gw_series *in = gw_metric_series(m, (const char *[]){"in"}); gw_series_add(in, 42);
 *
 * Cardinality is bounded: past GW_METRICS_MAX_SERIES series in one family, gw_metric_series returns NULL and
 * updates through NULL are no-ops (never label with unbounded values such as request ids or raw paths). */
#ifndef GW_METRICS_H
#define GW_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "mm_buf.h"
#include "mm_status.h"

#define GW_METRICS_MAX_SERIES 10000
#define GW_METRICS_MAX_LABELS 8
#define GW_METRICS_MAX_BUCKETS 64

enum gw_metric_type { GW_METRIC_COUNTER, GW_METRIC_GAUGE, GW_METRIC_HISTOGRAM };

struct gw_metrics;
struct gw_metric;
struct gw_series;

struct gw_metrics *gw_metrics_create(void);
/** Free the registry and every family and series (no update may run concurrently). NULL is fine. */
void gw_metrics_destroy(struct gw_metrics *r);

/** Register (or find) a family. label_names may be NULL when n_labels is 0. Histograms take strictly
 * increasing upper bounds (the +Inf bucket is implicit); NULL buckets = gw_metrics_latency_buckets.
 * Returns NULL with err set on a bad name, bad labels, or a clash with an existing family of the same name.
 */
struct gw_metric *gw_metrics_register(struct gw_metrics *r, enum gw_metric_type type, const char *name,
                                      const char *help, const char *const *label_names, size_t n_labels,
                                      const double *buckets, size_t n_buckets, struct mm_err *err);

/** The series for these label values (n_labels strings; NULL for an unlabeled family), created on first use.
 * Returns NULL on out of memory or when the family already holds GW_METRICS_MAX_SERIES series. */
struct gw_series *gw_metric_series(struct gw_metric *m, const char *const *label_values);

/** Counter or gauge += v (counters ignore negative v). NULL s is a no-op. */
void gw_series_add(struct gw_series *s, double v);
/** Counter += 1. */
void gw_series_inc(struct gw_series *s);
/** Gauge = v. */
void gw_series_set(struct gw_series *s, double v);
/** Histogram: record one observation. */
void gw_series_observe(struct gw_series *s, double v);
/** Current value of a counter or gauge; a histogram's observation count. */
double gw_series_value(const struct gw_series *s);
/** Histogram only: the sum of observations and the cumulative count of bucket i (i == n_buckets: +Inf). */
double gw_series_hist_sum(const struct gw_series *s);
uint64_t gw_series_hist_bucket(const struct gw_series *s, size_t i);

/** A collector runs just before each render (from the thread that renders) to refresh gauges that are
 * cheaper to read than to track (per-worker health, queue depths). It must not register families. */
typedef void (*gw_metrics_collect_fn)(struct gw_metrics *r, void *ud);
int32_t gw_metrics_add_collector(struct gw_metrics *r, gw_metrics_collect_fn fn, void *ud);
/** Remove a collector; when this returns the collector is not running and will not run again. */
void gw_metrics_remove_collector(struct gw_metrics *r, gw_metrics_collect_fn fn, void *ud);

/** Append the Prometheus text exposition of every family to out. Returns MM_OK or MM_NOMEM. */
int32_t gw_metrics_render(struct gw_metrics *r, struct mm_buf *out);

/** Default latency buckets in seconds: 5 ms .. 60 s. */
extern const double gw_metrics_latency_buckets[];
extern const size_t gw_metrics_n_latency_buckets;

#endif
