/* The service loop of a generation: one thread with its own libevent base, where the media fetcher
 * (libcurl multi) and the routers' health-check timers live. Keeping them off the HTTP loops gives them a
 * lifetime the module controls: the HTTP loops' bases are freed before retired generations are, so
 * nothing of ours may stay registered on them. */
#include <event2/event.h>
#include <stdlib.h>

#include "gw_api_internal.h"

struct svc_task {
    void (*fn)(void *arg);
    void *arg;
    struct svc_task *next;
};

struct gw_api_svc {
    struct event_base *base;
    struct event *wake;
    struct gw_executor exec;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    struct svc_task *head, *tail;
    bool closed;
};

static int svc_post(void *ctx, void (*fn)(void *arg), void *arg)
{
    struct gw_api_svc *s = ctx;
    struct svc_task *t = malloc(sizeof *t);
    if (!t) return -1;
    t->fn = fn;
    t->arg = arg;
    t->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->closed) {
        pthread_mutex_unlock(&s->mu);
        free(t);
        return -1;
    }
    bool wake = !s->head;
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    pthread_mutex_unlock(&s->mu);
    if (wake) event_active(s->wake, EV_READ, 0);
    return 0;
}

static void svc_wake(evutil_socket_t fd, short what, void *arg)
{
    struct gw_api_svc *s = arg;
    pthread_mutex_lock(&s->mu);
    struct svc_task *t = s->head;
    s->head = s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (t) {
        struct svc_task *n = t->next;
        t->fn(t->arg);
        free(t);
        t = n;
    }
}

int32_t gw_api_svc_create(struct gw_api_svc **out, struct mm_err *err)
{
    struct gw_api_svc *s = calloc(1, sizeof *s);
    if (!s) return mm_err_set(err, MM_NOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    s->base = event_base_new();
    s->wake = s->base ? event_new(s->base, -1, EV_PERSIST, svc_wake, s) : NULL;
    if (!s->wake) {
        gw_api_svc_free(s);
        return mm_err_set(err, MM_NOMEM, "cannot create the API service loop");
    }
    s->exec.post = svc_post;
    s->exec.ctx = s;
    *out = s;
    return MM_OK;
}

struct event_base *gw_api_svc_base(struct gw_api_svc *s)
{
    return s->base;
}

const struct gw_executor *gw_api_svc_executor(struct gw_api_svc *s)
{
    return &s->exec;
}

static void *svc_main(void *arg)
{
    struct gw_api_svc *s = arg;
    event_base_loop(s->base, EVLOOP_NO_EXIT_ON_EMPTY); /* idle is normal between fetches */
    return NULL;
}

int32_t gw_api_svc_start(struct gw_api_svc *s, struct mm_err *err)
{
    if (pthread_create(&s->thread, NULL, svc_main, s) != 0)
        return mm_err_set(err, MM_NOMEM, "cannot start the API service thread");
    s->started = true;
    return MM_OK;
}

static void svc_break(void *arg)
{
    struct gw_api_svc *s = arg;
    event_base_loopbreak(s->base);
}

void gw_api_svc_stop(struct gw_api_svc *s)
{
    if (!s || !s->started) return;
    if (svc_post(s, svc_break, s) != 0) event_base_loopbreak(s->base);
    pthread_join(s->thread, NULL);
    s->started = false;
    pthread_mutex_lock(&s->mu);
    s->closed = true;
    struct svc_task *t = s->head;
    s->head = s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    /* tasks that arrived after the break still run (here): they must tolerate a stopped loop */
    while (t) {
        struct svc_task *n = t->next;
        t->fn(t->arg);
        free(t);
        t = n;
    }
}

void gw_api_svc_free(struct gw_api_svc *s)
{
    if (!s) return;
    gw_api_svc_stop(s);
    if (s->wake) event_free(s->wake);
    if (s->base) event_base_free(s->base);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
