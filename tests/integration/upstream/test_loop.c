/* The tests' loop executor (see test_loop.h). */
#include "test_loop.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "gw_event_exec.h"

struct test_loop {
    struct event_base *base;
    struct gw_event_exec queue;
    struct event *tick;
    int (*done)(void *);
    void *done_arg;
};

static void check_done(struct test_loop *l)
{
    if (l->done && l->done(l->done_arg)) event_base_loopbreak(l->base);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    check_done(arg);
}

struct test_loop *test_loop_new(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, (void (*)(void))evthread_use_pthreads);
    struct test_loop *l = calloc(1, sizeof(*l));
    if (!l) return NULL;
    l->base = event_base_new();
    int q = l->base ? gw_event_exec_init(&l->queue, l->base) : -1;
    l->tick = l->base ? event_new(l->base, -1, EV_PERSIST, on_tick, l) : NULL;
    if (q != 0 || !l->tick) {
        test_loop_free(l);
        return NULL;
    }
    return l;
}

void test_loop_free(struct test_loop *l)
{
    if (!l) return;
    gw_event_exec_fini(&l->queue); /* runs what is still queued, so posted work is not leaked */
    if (l->tick) event_free(l->tick);
    if (l->base) event_base_free(l->base);
    free(l);
}

struct event_base *test_loop_base(struct test_loop *l)
{
    return l->base;
}

const struct gw_executor *test_loop_executor(struct test_loop *l)
{
    return &l->queue.exec;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int never(void *arg)
{
    return 0;
}

int test_loop_run(struct test_loop *l, int (*done)(void *arg), void *arg, int timeout_ms)
{
    l->done = done ? done : never;
    l->done_arg = arg;
    if (l->done(arg)) return 1;
    struct timeval tick = {0, 5000};
    event_add(l->tick, &tick);
    double end = now_ms() + timeout_ms;
    int ok = 0;
    while (!(ok = l->done(arg)) && now_ms() < end) event_base_loop(l->base, EVLOOP_ONCE);
    event_del(l->tick);
    l->done = NULL;
    return ok;
}

unsigned long test_loop_posted(struct test_loop *l)
{
    return l->queue.ran;
}
