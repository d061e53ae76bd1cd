#include "gw_metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double gw_metrics_latency_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
const size_t gw_metrics_n_latency_buckets =
    sizeof gw_metrics_latency_buckets / sizeof gw_metrics_latency_buckets[0];

#define SERIES_HASH 256

struct gw_series {
    struct gw_series *hash_next;
    struct gw_series *next; /* creation order, for rendering */
    struct gw_metric *family;
    uint64_t hash;
    char **values;
    _Atomic uint64_t bits;     /* counter/gauge value (a double's bits); histogram sum */
    _Atomic uint64_t count;    /* histogram observations */
    _Atomic uint64_t *buckets; /* histogram: per-bucket (not cumulative) counts, n_buckets + 1 */
};

struct gw_metric {
    struct gw_metric *next;
    enum gw_metric_type type;
    char *name, *help;
    char **labels;
    size_t n_labels;
    double *bounds;
    size_t n_bounds;
    pthread_mutex_t lock; /* series creation */
    struct gw_series *hash[SERIES_HASH];
    struct gw_series *first, *last;
    size_t n_series;
};

struct collector {
    gw_metrics_collect_fn fn;
    void *ud;
};

struct gw_metrics {
    pthread_mutex_t lock; /* families */
    pthread_mutex_t collect_lock;
    struct gw_metric *first, *last;
    struct collector *collectors;
    size_t n_collectors;
};

static uint64_t dbits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double bitsd(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static void atomic_add_double(_Atomic uint64_t *a, double v)
{
    uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(a, &old, dbits(bitsd(old) + v), memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

struct gw_metrics *gw_metrics_create(void)
{
    struct gw_metrics *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->collect_lock, NULL);
    return r;
}

static void free_strv(char **v, size_t n)
{
    if (!v) return;
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

static void family_free(struct gw_metric *m)
{
    struct gw_series *s = m->first;
    while (s) {
        struct gw_series *n = s->next;
        free_strv(s->values, m->n_labels);
        free(s->buckets);
        free(s);
        s = n;
    }
    free_strv(m->labels, m->n_labels);
    free(m->bounds);
    free(m->name);
    free(m->help);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void gw_metrics_destroy(struct gw_metrics *r)
{
    if (!r) return;
    struct gw_metric *m = r->first;
    while (m) {
        struct gw_metric *n = m->next;
        family_free(m);
        m = n;
    }
    free(r->collectors);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->collect_lock);
    free(r);
}

static bool valid_name(const char *s, bool colon_ok)
{
    if (!s || !*s) return false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':') ||
                  (p != s && c >= '0' && c <= '9');
        if (!ok) return false;
    }
    return true;
}

static bool same_shape(const struct gw_metric *m, enum gw_metric_type type, const char *const *labels,
                       size_t n)
{
    if (m->type != type || m->n_labels != n) return false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(m->labels[i], labels[i]) != 0) return false;
    return true;
}

struct gw_metric *gw_metrics_register(struct gw_metrics *r, enum gw_metric_type type, const char *name,
                                      const char *help, const char *const *label_names, size_t n_labels,
                                      const double *buckets, size_t n_buckets, struct mm_err *err)
{
    if (!valid_name(name, true)) {
        mm_err_set(err, MM_INVALID, "metric name \"%s\" is invalid", name ? name : "(null)");
        return NULL;
    }
    if (n_labels > GW_METRICS_MAX_LABELS || (n_labels && !label_names)) {
        mm_err_set(err, MM_INVALID, "metric %s: too many labels", name);
        return NULL;
    }
    for (size_t i = 0; i < n_labels; i++) {
        if (!valid_name(label_names[i], false) || strncmp(label_names[i], "__", 2) == 0 ||
            (type == GW_METRIC_HISTOGRAM && strcmp(label_names[i], "le") == 0)) {
            mm_err_set(err, MM_INVALID, "metric %s: label name \"%s\" is invalid", name,
                       label_names[i] ? label_names[i] : "(null)");
            return NULL;
        }
    }
    if (type == GW_METRIC_HISTOGRAM) {
        if (!buckets) {
            buckets = gw_metrics_latency_buckets;
            n_buckets = gw_metrics_n_latency_buckets;
        }
        if (n_buckets == 0 || n_buckets > GW_METRICS_MAX_BUCKETS) {
            mm_err_set(err, MM_INVALID, "metric %s: 1 to %d buckets", name, GW_METRICS_MAX_BUCKETS);
            return NULL;
        }
        for (size_t i = 0; i < n_buckets; i++)
            if (isnan(buckets[i]) || (i && !(buckets[i] > buckets[i - 1]))) {
                mm_err_set(err, MM_INVALID, "metric %s: buckets must increase", name);
                return NULL;
            }
    } else {
        n_buckets = 0;
    }
    pthread_mutex_lock(&r->lock);
    for (struct gw_metric *m = r->first; m; m = m->next) {
        if (strcmp(m->name, name) != 0) continue;
        pthread_mutex_unlock(&r->lock);
        if (same_shape(m, type, label_names, n_labels)) return m;
        mm_err_set(err, MM_INVALID, "metric %s is already registered with another type or labels", name);
        return NULL;
    }
    struct gw_metric *m = calloc(1, sizeof *m);
    bool ok = m != NULL;
    if (ok) {
        pthread_mutex_init(&m->lock, NULL);
        m->type = type;
        m->name = strdup(name);
        m->help = strdup(help ? help : "");
        m->n_labels = n_labels;
        ok = m->name && m->help;
        if (ok && n_labels) {
            m->labels = calloc(n_labels, sizeof *m->labels);
            ok = m->labels != NULL;
            for (size_t i = 0; ok && i < n_labels; i++) ok = (m->labels[i] = strdup(label_names[i])) != NULL;
        }
        if (ok && n_buckets) {
            m->bounds = malloc(n_buckets * sizeof *m->bounds);
            ok = m->bounds != NULL;
            if (ok) memcpy(m->bounds, buckets, n_buckets * sizeof *m->bounds);
            m->n_bounds = n_buckets;
        }
    }
    if (!ok) {
        pthread_mutex_unlock(&r->lock);
        if (m) family_free(m);
        mm_err_set(err, MM_NOMEM, "out of memory registering metric %s", name);
        return NULL;
    }
    if (r->last)
        r->last->next = m;
    else
        r->first = m;
    r->last = m;
    pthread_mutex_unlock(&r->lock);
    return m;
}

static uint64_t hash_values(const char *const *v, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        for (const char *p = v[i]; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
        h = (h ^ 0xff) * 1099511628211ull; /* separator: ("ab","c") != ("a","bc") */
    }
    return h;
}

static bool same_values(const struct gw_series *s, const char *const *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s->values[i], v[i]) != 0) return false;
    return true;
}

struct gw_series *gw_metric_series(struct gw_metric *m, const char *const *label_values)
{
    if (!m) return NULL;
    size_t n = m->n_labels;
    if (n && !label_values) return NULL;
    for (size_t i = 0; i < n; i++)
        if (!label_values[i]) return NULL;
    uint64_t h = hash_values(label_values, n);
    pthread_mutex_lock(&m->lock);
    for (struct gw_series *s = m->hash[h % SERIES_HASH]; s; s = s->hash_next) {
        if (s->hash == h && same_values(s, label_values, n)) {
            pthread_mutex_unlock(&m->lock);
            return s;
        }
    }
    struct gw_series *s = NULL;
    if (m->n_series < GW_METRICS_MAX_SERIES) s = calloc(1, sizeof *s);
    bool ok = s != NULL;
    if (ok && n) {
        s->values = calloc(n, sizeof *s->values);
        ok = s->values != NULL;
        for (size_t i = 0; ok && i < n; i++) ok = (s->values[i] = strdup(label_values[i])) != NULL;
    }
    if (ok && m->type == GW_METRIC_HISTOGRAM) {
        s->buckets = calloc(m->n_bounds + 1, sizeof *s->buckets);
        ok = s->buckets != NULL;
    }
    if (!ok) {
        if (s) {
            free_strv(s->values, n);
            free(s->buckets);
            free(s);
        }
        pthread_mutex_unlock(&m->lock);
        return NULL;
    }
    s->family = m;
    s->hash = h;
    s->hash_next = m->hash[h % SERIES_HASH];
    m->hash[h % SERIES_HASH] = s;
    if (m->last)
        m->last->next = s;
    else
        m->first = s;
    m->last = s;
    m->n_series++;
    pthread_mutex_unlock(&m->lock);
    return s;
}

void gw_series_add(struct gw_series *s, double v)
{
    if (!s || s->family->type == GW_METRIC_HISTOGRAM) return;
    if (s->family->type == GW_METRIC_COUNTER && !(v >= 0)) return;
    atomic_add_double(&s->bits, v);
}

void gw_series_inc(struct gw_series *s)
{
    gw_series_add(s, 1.0);
}

void gw_series_set(struct gw_series *s, double v)
{
    if (!s || s->family->type != GW_METRIC_GAUGE) return;
    atomic_store_explicit(&s->bits, dbits(v), memory_order_relaxed);
}

void gw_series_observe(struct gw_series *s, double v)
{
    if (!s || s->family->type != GW_METRIC_HISTOGRAM || isnan(v)) return;
    const struct gw_metric *m = s->family;
    size_t i = 0;
    while (i < m->n_bounds && v > m->bounds[i]) i++;
    atomic_fetch_add_explicit(&s->buckets[i], 1, memory_order_relaxed);
    atomic_add_double(&s->bits, v);
    atomic_fetch_add_explicit(&s->count, 1, memory_order_relaxed);
}

double gw_series_value(const struct gw_series *s)
{
    if (!s) return 0;
    if (s->family->type == GW_METRIC_HISTOGRAM)
        return (double)atomic_load_explicit((_Atomic uint64_t *)&s->count, memory_order_relaxed);
    return bitsd(atomic_load_explicit((_Atomic uint64_t *)&s->bits, memory_order_relaxed));
}

double gw_series_hist_sum(const struct gw_series *s)
{
    if (!s || s->family->type != GW_METRIC_HISTOGRAM) return 0;
    return bitsd(atomic_load_explicit((_Atomic uint64_t *)&s->bits, memory_order_relaxed));
}

uint64_t gw_series_hist_bucket(const struct gw_series *s, size_t i)
{
    if (!s || s->family->type != GW_METRIC_HISTOGRAM || i > s->family->n_bounds) return 0;
    uint64_t c = 0;
    for (size_t k = 0; k <= i; k++)
        c += atomic_load_explicit((_Atomic uint64_t *)&s->buckets[k], memory_order_relaxed);
    return c;
}

int32_t gw_metrics_add_collector(struct gw_metrics *r, gw_metrics_collect_fn fn, void *ud)
{
    pthread_mutex_lock(&r->collect_lock);
    struct collector *nc = realloc(r->collectors, (r->n_collectors + 1) * sizeof *nc);
    if (!nc) {
        pthread_mutex_unlock(&r->collect_lock);
        return MM_NOMEM;
    }
    r->collectors = nc;
    r->collectors[r->n_collectors++] = (struct collector){fn, ud};
    pthread_mutex_unlock(&r->collect_lock);
    return MM_OK;
}

void gw_metrics_remove_collector(struct gw_metrics *r, gw_metrics_collect_fn fn, void *ud)
{
    pthread_mutex_lock(&r->collect_lock);
    for (size_t i = 0; i < r->n_collectors; i++) {
        if (r->collectors[i].fn == fn && r->collectors[i].ud == ud) {
            memmove(&r->collectors[i], &r->collectors[i + 1],
                    (r->n_collectors - i - 1) * sizeof *r->collectors);
            r->n_collectors--;
            break;
        }
    }
    pthread_mutex_unlock(&r->collect_lock);
}

/* ---- exposition ---- */

/* The shortest %g text that reads back as the same double ("0.005", not "0.0050000000000000001"). */
static void format_double(char *buf, size_t size, double v)
{
    if (isnan(v)) {
        snprintf(buf, size, "NaN");
    } else if (isinf(v)) {
        snprintf(buf, size, v > 0 ? "+Inf" : "-Inf");
    } else if (v == floor(v) && fabs(v) < 9007199254740992.0) {
        snprintf(buf, size, "%.0f", v);
    } else {
        for (int prec = 6; prec <= 17; prec++) {
            snprintf(buf, size, "%.*g", prec, v);
            if (strtod(buf, NULL) == v) break;
        }
    }
}

static int put_value(struct mm_buf *b, double v)
{
    char t[40];
    format_double(t, sizeof t, v);
    return mm_buf_append_str(b, t);
}

static int put_escaped(struct mm_buf *b, const char *s, bool help)
{
    for (const char *p = s; *p; p++) {
        int rc;
        if (*p == '\\')
            rc = mm_buf_append(b, "\\\\", 2);
        else if (*p == '\n')
            rc = mm_buf_append(b, "\\n", 2);
        else if (*p == '"' && !help)
            rc = mm_buf_append(b, "\\\"", 2);
        else
            rc = mm_buf_append(b, p, 1);
        if (rc) return rc;
    }
    return 0;
}

/* {a="x",b="y"[,le="..."]} or nothing */
static int put_labels(struct mm_buf *b, const struct gw_metric *m, const struct gw_series *s, const char *le)
{
    if (m->n_labels == 0 && !le) return 0;
    int rc = mm_buf_append(b, "{", 1);
    for (size_t i = 0; !rc && i < m->n_labels; i++) {
        rc = mm_buf_printf(b, "%s%s=\"", i ? "," : "", m->labels[i]);
        if (!rc) rc = put_escaped(b, s->values[i], false);
        if (!rc) rc = mm_buf_append(b, "\"", 1);
    }
    if (!rc && le) rc = mm_buf_printf(b, "%sle=\"%s\"", m->n_labels ? "," : "", le);
    if (!rc) rc = mm_buf_append(b, "}", 1);
    return rc;
}

static int render_family(struct mm_buf *b, struct gw_metric *m)
{
    static const char *const tnames[] = {"counter", "gauge", "histogram"};
    int rc = mm_buf_printf(b, "# HELP %s ", m->name);
    if (!rc) rc = put_escaped(b, m->help, true);
    if (!rc) rc = mm_buf_printf(b, "\n# TYPE %s %s\n", m->name, tnames[m->type]);
    /* the lock only guards series creation, so holding it while formatting delays nobody's updates */
    pthread_mutex_lock(&m->lock);
    for (struct gw_series *s = m->first; !rc && s; s = s->next) {
        if (m->type != GW_METRIC_HISTOGRAM) {
            rc = mm_buf_append_str(b, m->name);
            if (!rc) rc = put_labels(b, m, s, NULL);
            if (!rc) rc = mm_buf_append(b, " ", 1);
            if (!rc) rc = put_value(b, gw_series_value(s));
            if (!rc) rc = mm_buf_append(b, "\n", 1);
            continue;
        }
        uint64_t cum = 0;
        for (size_t i = 0; !rc && i <= m->n_bounds; i++) {
            cum += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
            char le[40];
            format_double(le, sizeof le, i == m->n_bounds ? INFINITY : m->bounds[i]);
            rc = mm_buf_printf(b, "%s_bucket", m->name);
            if (!rc) rc = put_labels(b, m, s, le);
            if (!rc) rc = mm_buf_printf(b, " %llu\n", (unsigned long long)cum);
        }
        if (!rc) rc = mm_buf_printf(b, "%s_sum", m->name);
        if (!rc) rc = put_labels(b, m, s, NULL);
        if (!rc) rc = mm_buf_append(b, " ", 1);
        if (!rc) rc = put_value(b, gw_series_hist_sum(s));
        if (!rc) rc = mm_buf_printf(b, "\n%s_count", m->name);
        if (!rc) rc = put_labels(b, m, s, NULL);
        /* the count is the +Inf bucket, so the exposition stays self-consistent under concurrent updates */
        if (!rc) rc = mm_buf_printf(b, " %llu\n", (unsigned long long)cum);
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

int32_t gw_metrics_render(struct gw_metrics *r, struct mm_buf *out)
{
    pthread_mutex_lock(&r->collect_lock);
    for (size_t i = 0; i < r->n_collectors; i++) r->collectors[i].fn(r, r->collectors[i].ud);
    pthread_mutex_unlock(&r->collect_lock);
    pthread_mutex_lock(&r->lock);
    int rc = 0;
    for (struct gw_metric *m = r->first; !rc && m; m = m->next) rc = render_family(out, m);
    pthread_mutex_unlock(&r->lock);
    return rc ? MM_NOMEM : MM_OK;
}
