/* An executor for the main thread (a libevent base run by gw_server). */
#ifndef GW_MAIN_EXEC_H
#define GW_MAIN_EXEC_H

#include <pthread.h>
#include <stdbool.h>

#include "gw_executor.h"

struct event;
struct event_base;
struct task;

struct gw_main_exec {
    struct gw_executor exec;
    pthread_mutex_t mu;
    struct task *head, *tail;
    bool closed;
    struct event *ev;
};

int gw_main_exec_init(struct gw_main_exec *m, struct event_base *base);
/** Run what is queued now (also used after the base stopped, at shutdown). */
void gw_main_exec_run(struct gw_main_exec *m);
/** Refuse new posts, run what is queued, free. */
void gw_main_exec_fini(struct gw_main_exec *m);

#endif
