/* The tests' loop executor (see test_loop.h). */
#include "test_loop.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct item {
    void (*fn)(void *);
    void *arg;
    struct item *next;
};

struct test_loop {
    struct event_base *base;
    struct event *wake, *tick;
    pthread_mutex_t mu;
    struct item *head, *tail;
    struct gw_executor ex;
    unsigned long posted;
    int (*done)(void *);
    void *done_arg;
};

static int post(void *ctx, void (*fn)(void *), void *arg)
{
    struct test_loop *l = ctx;
    struct item *it = malloc(sizeof(*it));
    if (!it) return -1;
    it->fn = fn;
    it->arg = arg;
    it->next = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
    pthread_mutex_unlock(&l->mu);
    event_active(l->wake, EV_READ, 0);
    return 0;
}

static void check_done(struct test_loop *l)
{
    if (l->done && l->done(l->done_arg)) event_base_loopbreak(l->base);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct test_loop *l = arg;
    pthread_mutex_lock(&l->mu);
    struct item *it = l->head;
    l->head = l->tail = NULL;
    pthread_mutex_unlock(&l->mu);
    while (it) {
        struct item *next = it->next;
        it->fn(it->arg);
        l->posted++;
        free(it);
        it = next;
    }
    check_done(l);
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
    pthread_mutex_init(&l->mu, NULL);
    l->base = event_base_new();
    l->wake = l->base ? event_new(l->base, -1, EV_PERSIST, on_wake, l) : NULL;
    l->tick = l->base ? event_new(l->base, -1, EV_PERSIST, on_tick, l) : NULL;
    if (!l->wake || !l->tick) {
        test_loop_free(l);
        return NULL;
    }
    l->ex.post = post;
    l->ex.ctx = l;
    return l;
}

void test_loop_free(struct test_loop *l)
{
    if (!l) return;
    /* run what is still queued, so posted work is not leaked */
    if (l->wake) on_wake(-1, 0, l);
    if (l->wake) event_free(l->wake);
    if (l->tick) event_free(l->tick);
    if (l->base) event_base_free(l->base);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

struct event_base *test_loop_base(struct test_loop *l)
{
    return l->base;
}

const struct gw_executor *test_loop_executor(struct test_loop *l)
{
    return &l->ex;
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
    return l->posted;
}
