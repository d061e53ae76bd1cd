/* gw_event_exec: posts from other threads run on the base's thread, in order, one wake-up draining a batch;
 * after close a post is refused (the caller keeps its argument) and what was queued still runs; fini runs
 * what is left; a struct that was never initialized can be finalized. */
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>

#include "gw_event_exec.h"
#include "mmgw_test.h"

enum { PER_THREAD = 500, THREADS = 4 };

struct rec {
    pthread_t base_thread;
    int on_base; /* runs seen on the base's thread */
    int runs;
    int last[THREADS]; /* last sequence number seen per poster: order within a poster holds */
    int out_of_order;
    struct event_base *base;
    int stop_at;
};

struct item {
    struct rec *r;
    int poster, seq;
};

static struct item items[THREADS][PER_THREAD];

static void record(void *arg)
{
    struct item *it = arg;
    struct rec *r = it->r;
    r->runs++;
    r->on_base += pthread_equal(pthread_self(), r->base_thread) != 0;
    if (it->seq != r->last[it->poster] + 1) r->out_of_order++;
    r->last[it->poster] = it->seq;
    if (r->runs == r->stop_at) event_base_loopbreak(r->base);
}

struct poster {
    struct gw_event_exec *q;
    int index;
    int refused;
};

static void *post_all(void *arg)
{
    struct poster *p = arg;
    for (int i = 0; i < PER_THREAD; i++)
        p->refused += gw_executor_post(&p->q->exec, record, &items[p->index][i]) != 0;
    return NULL;
}

static void count(void *arg)
{
    (*(int *)arg)++;
}

int main(void)
{
    evthread_use_pthreads();
    struct event_base *base = event_base_new();
    CHECK(base != NULL);
    if (!base) return test_done();

    struct gw_event_exec q;
    CHECK_EQ_INT(gw_event_exec_init(&q, base), 0);
    struct rec r = {.base_thread = pthread_self(), .base = base, .stop_at = THREADS * PER_THREAD};
    for (int t = 0; t < THREADS; t++) {
        r.last[t] = -1;
        for (int i = 0; i < PER_THREAD; i++) items[t][i] = (struct item){&r, t, i};
    }
    pthread_t th[THREADS];
    struct poster ps[THREADS];
    for (int t = 0; t < THREADS; t++) {
        ps[t] = (struct poster){&q, t, 0};
        CHECK_EQ_INT(pthread_create(&th[t], NULL, post_all, &ps[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++) CHECK_EQ_INT(ps[t].refused, 0);
    CHECK_EQ_INT(r.runs, 0); /* never inline */
    event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
    CHECK_EQ_INT(r.runs, THREADS * PER_THREAD);
    CHECK_EQ_INT(r.on_base, THREADS * PER_THREAD);
    CHECK_EQ_INT(r.out_of_order, 0);
    CHECK_EQ_INT(q.ran, THREADS * PER_THREAD);

    /* queued, then closed: the queued one runs at close, a later post is refused */
    int n = 0;
    CHECK_EQ_INT(gw_executor_post(&q.exec, count, &n), 0);
    gw_event_exec_close(&q);
    CHECK_EQ_INT(n, 1);
    CHECK(gw_executor_post(&q.exec, count, &n) != 0);
    gw_event_exec_fini(&q);
    CHECK_EQ_INT(n, 1);

    /* fini runs what is still queued */
    struct gw_event_exec q2;
    CHECK_EQ_INT(gw_event_exec_init(&q2, base), 0);
    CHECK_EQ_INT(gw_executor_post(&q2.exec, count, &n), 0);
    CHECK_EQ_INT(gw_executor_post(&q2.exec, count, &n), 0);
    gw_event_exec_fini(&q2);
    CHECK_EQ_INT(n, 3);

    struct gw_event_exec never;
    memset(&never, 0, sizeof never);
    gw_event_exec_fini(&never); /* nothing to do, nothing to crash on */

    event_base_free(base);
    return test_done();
}
