/* An executor on a libevent base (see gw_event_exec.h). */
#include "gw_event_exec.h"

#include <event2/event.h>
#include <stdlib.h>

struct gw_event_task {
    struct gw_event_task *next;
    void (*fn)(void *arg);
    void *arg;
};

static int post(void *ctx, void (*fn)(void *arg), void *arg)
{
    struct gw_event_exec *q = ctx;
    struct gw_event_task *t = malloc(sizeof *t);
    if (!t) return -1;
    t->fn = fn;
    t->arg = arg;
    t->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->closed) {
        pthread_mutex_unlock(&q->mu);
        free(t);
        return -1;
    }
    bool wake = !q->head;
    if (q->tail)
        q->tail->next = t;
    else
        q->head = t;
    q->tail = t;
    pthread_mutex_unlock(&q->mu);
    /* one wake-up per batch: the callback drains everything queued so far */
    if (wake) event_active(q->ev, EV_READ, 0);
    return 0;
}

void gw_event_exec_run(struct gw_event_exec *q)
{
    pthread_mutex_lock(&q->mu);
    struct gw_event_task *t = q->head;
    q->head = q->tail = NULL;
    pthread_mutex_unlock(&q->mu);
    while (t) {
        struct gw_event_task *n = t->next;
        t->fn(t->arg);
        q->ran++;
        free(t);
        t = n;
    }
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    gw_event_exec_run(arg);
}

int gw_event_exec_init(struct gw_event_exec *q, struct event_base *base)
{
    pthread_mutex_init(&q->mu, NULL);
    q->initialized = true;
    q->head = q->tail = NULL;
    q->closed = false;
    q->ran = 0;
    q->exec.post = post;
    q->exec.ctx = q;
    q->ev = event_new(base, -1, EV_PERSIST, wake_cb, q);
    return q->ev ? 0 : -1;
}

void gw_event_exec_close(struct gw_event_exec *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    pthread_mutex_unlock(&q->mu);
    gw_event_exec_run(q);
}

void gw_event_exec_fini(struct gw_event_exec *q)
{
    if (!q->initialized) return;
    gw_event_exec_close(q);
    if (q->ev) event_free(q->ev);
    q->ev = NULL;
    pthread_mutex_destroy(&q->mu);
    q->initialized = false;
}
