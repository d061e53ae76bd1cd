/* The service loop of a generation: one thread with its own libevent base, where the media fetcher
 * (libcurl multi) and the routers' health-check timers live. Keeping them off the HTTP loops gives them a
 * lifetime the module controls: the HTTP loops' bases are freed before retired generations are, so
 * nothing of ours may stay registered on them. */
#include <event2/event.h>
#include <stdlib.h>

#include "gw_api_internal.h"
#include "gw_event_exec.h"

struct gw_api_svc {
    struct event_base *base;
    struct gw_event_exec queue;
    pthread_t thread;
    bool started;
};

int32_t gw_api_svc_create(struct gw_api_svc **out, struct mm_err *err)
{
    struct gw_api_svc *s = calloc(1, sizeof *s);
    if (!s) return mm_err_set(err, MM_NOMEM, "out of memory");
    s->base = event_base_new();
    if (!s->base || gw_event_exec_init(&s->queue, s->base) != 0) {
        gw_api_svc_free(s);
        return mm_err_set(err, MM_NOMEM, "cannot create the API service loop");
    }
    *out = s;
    return MM_OK;
}

struct event_base *gw_api_svc_base(struct gw_api_svc *s)
{
    return s->base;
}

const struct gw_executor *gw_api_svc_executor(struct gw_api_svc *s)
{
    return &s->queue.exec;
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
    if (gw_executor_post(&s->queue.exec, svc_break, s) != 0) event_base_loopbreak(s->base);
    pthread_join(s->thread, NULL);
    s->started = false;
    /* tasks that arrived after the break still run (here): they must tolerate a stopped loop */
    gw_event_exec_close(&s->queue);
}

void gw_api_svc_free(struct gw_api_svc *s)
{
    if (!s) return;
    gw_api_svc_stop(s);
    gw_event_exec_fini(&s->queue);
    if (s->base) event_base_free(s->base);
    free(s);
}
