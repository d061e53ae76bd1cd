/* A gw_executor bound to a libevent base: posts from any thread join a queue, and one event on the base
 * runs them, in order, on the thread that runs the base.
 *
 * Each HTTP loop, the main thread and the API service loop own one; tests and benchmarks that drive an
 * executor-based client (the gRPC client, the router) from a loop of their own use the same. */
#ifndef GW_EVENT_EXEC_H
#define GW_EVENT_EXEC_H

#include <pthread.h>
#include <stdbool.h>

#include "gw_executor.h"

struct event;
struct event_base;
struct gw_event_task;

struct gw_event_exec {
    struct gw_executor exec; /* posts into this queue */
    pthread_mutex_t mu;
    struct gw_event_task *head, *tail;
    bool closed;
    bool initialized;
    struct event *ev;
    unsigned long ran; /* tasks run so far (read it on the base's thread) */
};

/** Bind to base. Returns 0, or -1 when out of memory; gw_event_exec_fini is safe either way (and on a
 * zeroed struct that was never initialized). */
int gw_event_exec_init(struct gw_event_exec *q, struct event_base *base);
/** Run what is queued now, on the calling thread (the base's thread). */
void gw_event_exec_run(struct gw_event_exec *q);
/** Refuse later posts and run what is queued (at shutdown, possibly after the base stopped). */
void gw_event_exec_close(struct gw_event_exec *q);
/** Close, then free the event (before its base is freed). */
void gw_event_exec_fini(struct gw_event_exec *q);

#endif
