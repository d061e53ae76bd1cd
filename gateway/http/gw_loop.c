/* One event loop per thread: the cross-thread executor, same-thread deferred calls, the cached Date header,
 * and the loop's share of the connection limit. */
#include "gw_http_internal.h"

#include <event2/thread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t gw_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- executor (any thread -> this loop) ---- */

static int loop_post(void *ctx, void (*fn)(void *arg), void *arg)
{
    struct gw_loop *l = ctx;
    struct gw_task *t = malloc(sizeof *t);
    if (!t) return -1;
    t->fn = fn;
    t->arg = arg;
    t->next = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->q_closed) {
        pthread_mutex_unlock(&l->mu);
        free(t);
        return -1;
    }
    bool wake = l->q_head == NULL;
    if (l->q_tail)
        l->q_tail->next = t;
    else
        l->q_head = t;
    l->q_tail = t;
    pthread_mutex_unlock(&l->mu);
    /* one wake-up per batch: the callback drains everything queued so far */
    if (wake) event_active(l->wake_ev, EV_READ, 0);
    return 0;
}

static void run_tasks(struct gw_task *t)
{
    while (t) {
        struct gw_task *n = t->next;
        t->fn(t->arg);
        free(t);
        t = n;
    }
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    struct gw_loop *l = arg;
    pthread_mutex_lock(&l->mu);
    struct gw_task *t = l->q_head;
    l->q_head = l->q_tail = NULL;
    pthread_mutex_unlock(&l->mu);
    run_tasks(t);
}

/* ---- deferred calls (same thread) ---- */

int gw_loop_defer(struct gw_loop *l, void (*fn)(void *arg), void *arg)
{
    struct gw_task *t = malloc(sizeof *t);
    if (!t) return -1;
    t->fn = fn;
    t->arg = arg;
    t->next = NULL;
    bool wake = l->d_head == NULL;
    if (l->d_tail)
        l->d_tail->next = t;
    else
        l->d_head = t;
    l->d_tail = t;
    if (wake) event_active(l->defer_ev, EV_READ, 0);
    return 0;
}

static void defer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct gw_loop *l = arg;
    /* calls deferred by these calls run in the next round, so a chain cannot starve I/O */
    struct gw_task *t = l->d_head;
    l->d_head = l->d_tail = NULL;
    run_tasks(t);
}

/* ---- misc ---- */

const char *gw_loop_date(struct gw_loop *l)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec != l->date_sec) {
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        strftime(l->date, sizeof l->date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        l->date_sec = ts.tv_sec;
    }
    return l->date;
}

const struct gw_config *gw_loop_config(const struct gw_loop *l)
{
    return l->site->config;
}

/* ---- lifecycle ---- */

static void use_threads_once(void)
{
    evthread_use_pthreads();
}

void gw_http_global_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, use_threads_once);
}

int32_t gw__loop_init(struct gw_loop *l, struct gw_http *h, uint32_t index, struct mm_err *err)
{
    gw_http_global_init();
    memset(l, 0, sizeof *l);
    l->http = h;
    l->index = index;
    pthread_mutex_init(&l->mu, NULL);
    l->executor.post = loop_post;
    l->executor.ctx = l;
    /* no EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST: it defers EPOLL_CTL_DEL past close(), and a connection
     * accepted in the same iteration can reuse the fd number and never be registered (found with TSan) */
    l->base = event_base_new();
    if (!l->base) return mm_err_set(err, MM_NOMEM, "cannot create event base for loop %u", index);
    l->wake_ev = event_new(l->base, -1, EV_PERSIST, wake_cb, l);
    l->defer_ev = event_new(l->base, -1, EV_PERSIST, defer_cb, l);
    l->n_fields = 128;
    l->fields = calloc(l->n_fields, sizeof *l->fields);
    if (!l->wake_ev || !l->defer_ev || !l->fields)
        return mm_err_set(err, MM_NOMEM, "out of memory creating loop");
    return MM_OK;
}

void gw__loop_close_queue(struct gw_loop *l)
{
    /* tasks already queued still run here, on the loop's thread; later posts fail */
    pthread_mutex_lock(&l->mu);
    l->q_closed = true;
    struct gw_task *t = l->q_head;
    l->q_head = l->q_tail = NULL;
    pthread_mutex_unlock(&l->mu);
    run_tasks(t);
    struct gw_task *d = l->d_head;
    l->d_head = l->d_tail = NULL;
    run_tasks(d);
}

void gw__loop_fini(struct gw_loop *l)
{
    if (l->wake_ev) event_free(l->wake_ev);
    if (l->defer_ev) event_free(l->defer_ev);
    if (l->stop_timer) event_free(l->stop_timer);
    if (l->base) event_base_free(l->base);
    free(l->fields);
    pthread_mutex_destroy(&l->mu);
}
