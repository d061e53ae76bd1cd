/* One event loop per thread: the cross-thread executor (gw_event_exec), same-thread deferred calls, the
 * cached Date header, and the loop's share of the connection limit. */
#include "gw_http_internal.h"

#include "mm_arena.h"

#include <event2/thread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- deferred calls (same thread; the cross-thread executor is l->queue) ---- */

static void run_tasks(struct gw_task *t)
{
    while (t) {
        struct gw_task *n = t->next;
        t->fn(t->arg);
        free(t);
        t = n;
    }
}

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

static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
    gw__conn_flush_queued(arg);
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
    /* no EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST: it defers EPOLL_CTL_DEL past close(), and a connection
     * accepted in the same iteration can reuse the fd number and never be registered (found with TSan) */
    l->base = event_base_new();
    if (!l->base) return mm_err_set(err, MM_NOMEM, "cannot create event base for loop %u", index);
    int q = gw_event_exec_init(&l->queue, l->base);
    l->defer_ev = event_new(l->base, -1, EV_PERSIST, defer_cb, l);
    l->flush_ev = event_new(l->base, -1, 0, flush_cb, l);
    l->n_fields = 128;
    l->fields = calloc(l->n_fields, sizeof *l->fields);
    if (q != 0 || !l->defer_ev || !l->flush_ev || !l->fields)
        return mm_err_set(err, MM_NOMEM, "out of memory creating loop");
    return MM_OK;
}

void gw__loop_close_queue(struct gw_loop *l)
{
    /* tasks already queued still run here, on the loop's thread; later posts fail */
    gw_event_exec_close(&l->queue);
    struct gw_task *d = l->d_head;
    l->d_head = l->d_tail = NULL;
    run_tasks(d);
}

void gw__loop_fini(struct gw_loop *l)
{
    gw_event_exec_fini(&l->queue);
    if (l->defer_ev) event_free(l->defer_ev);
    if (l->flush_ev) event_free(l->flush_ev);
    while (l->n_arena_pool) mm_arena_destroy(l->arena_pool[--l->n_arena_pool]);
    if (l->stop_timer) event_free(l->stop_timer);
    if (l->base) event_base_free(l->base);
    free(l->fields);
}
