/* The main thread's executor: loop threads (and any other) post work here, such as retiring a generation. */
#include "gw_main_exec.h"

#include <event2/event.h>
#include <stdlib.h>

struct task {
    struct task *next;
    void (*fn)(void *);
    void *arg;
};

static int post(void *ctx, void (*fn)(void *arg), void *arg)
{
    struct gw_main_exec *m = ctx;
    struct task *t = malloc(sizeof *t);
    if (!t) return -1;
    t->fn = fn;
    t->arg = arg;
    t->next = NULL;
    pthread_mutex_lock(&m->mu);
    if (m->closed) {
        pthread_mutex_unlock(&m->mu);
        free(t);
        return -1;
    }
    bool wake = !m->head;
    if (m->tail)
        m->tail->next = t;
    else
        m->head = t;
    m->tail = t;
    pthread_mutex_unlock(&m->mu);
    if (wake) event_active(m->ev, EV_READ, 0);
    return 0;
}

void gw_main_exec_run(struct gw_main_exec *m)
{
    pthread_mutex_lock(&m->mu);
    struct task *t = m->head;
    m->head = m->tail = NULL;
    pthread_mutex_unlock(&m->mu);
    while (t) {
        struct task *n = t->next;
        t->fn(t->arg);
        free(t);
        t = n;
    }
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    gw_main_exec_run(arg);
}

int gw_main_exec_init(struct gw_main_exec *m, struct event_base *base)
{
    pthread_mutex_init(&m->mu, NULL);
    m->head = m->tail = NULL;
    m->closed = false;
    m->exec.post = post;
    m->exec.ctx = m;
    m->ev = event_new(base, -1, EV_PERSIST, wake_cb, m);
    return m->ev ? 0 : -1;
}

void gw_main_exec_fini(struct gw_main_exec *m)
{
    pthread_mutex_lock(&m->mu);
    m->closed = true;
    pthread_mutex_unlock(&m->mu);
    gw_main_exec_run(m);
    if (m->ev) event_free(m->ev);
    m->ev = NULL;
    pthread_mutex_destroy(&m->mu);
}
