/* The thread pool and asynchronous preprocessing: every job runs exactly once, a full queue refuses at once
 * (no blocking), destroy drains what was queued, and gw_media_submit delivers results through the
 * requester's executor (or reports cancellation when the executor is gone). */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "gw_media_job.h"
#include "gw_pool.h"
#include "media_fixture.h"

static atomic_int ran;

static void count_job(void *arg)
{
    atomic_fetch_add(&ran, 1);
    atomic_fetch_add((atomic_int *)arg, 1);
}

/* A job that blocks until released: to fill the queue deterministically. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open, gate_waiting;

static void gate_job(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&gate_mu);
    gate_waiting++;
    pthread_cond_broadcast(&gate_cv);
    while (!gate_open) pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
}

/* A queue executor standing in for an event loop: posts are run later by the test thread. */
struct queue_exec {
    pthread_mutex_t mu;
    void (*fn[64])(void *);
    void *arg[64];
    int n;
    int closed;
};

static int qe_post(void *ctx, void (*fn)(void *), void *arg)
{
    struct queue_exec *q = ctx;
    pthread_mutex_lock(&q->mu);
    int ok = !q->closed && q->n < 64;
    if (ok) {
        q->fn[q->n] = fn;
        q->arg[q->n++] = arg;
    }
    pthread_mutex_unlock(&q->mu);
    return ok ? 0 : -1;
}

static int qe_run(struct queue_exec *q)
{
    pthread_mutex_lock(&q->mu);
    int n = q->n;
    void (*fn[64])(void *);
    void *arg[64];
    memcpy(fn, q->fn, sizeof fn);
    memcpy(arg, q->arg, sizeof arg);
    q->n = 0;
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < n; i++) fn[i](arg[i]);
    return n;
}

static pthread_t test_thread;
static atomic_int done_count, done_on_test_thread;

static void on_done(struct gw_media_job *job, void *arg)
{
    (void)arg;
    atomic_fetch_add(&done_count, 1);
    if (pthread_equal(pthread_self(), test_thread)) atomic_fetch_add(&done_on_test_thread, 1);
}

int main(void)
{
    struct mm_err err = {0};
    test_thread = pthread_self();

    /* every job runs once */
    struct gw_pool *p = NULL;
    CHECK(gw_pool_create(4, 256, &p, &err) == MM_OK);
    CHECK_EQ_INT(gw_pool_threads(p), 4);
    atomic_int mine = 0;
    for (int i = 0; i < 200; i++) CHECK(gw_pool_submit(p, count_job, &mine) == MM_OK);
    gw_pool_wait_idle(p);
    CHECK_EQ_INT(atomic_load(&mine), 200);
    gw_pool_destroy(p);

    /* a full queue refuses immediately; destroy runs what was queued */
    CHECK(gw_pool_create(1, 4, &p, &err) == MM_OK);
    CHECK(gw_pool_submit(p, gate_job, NULL) == MM_OK);
    pthread_mutex_lock(&gate_mu);
    while (gate_waiting < 1) pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    atomic_int queued = 0;
    for (int i = 0; i < 4; i++) CHECK(gw_pool_submit(p, count_job, &queued) == MM_OK);
    double t0 = fx_now();
    CHECK(gw_pool_submit(p, count_job, &queued) == MM_EXHAUSTED);
    CHECK(fx_now() - t0 < 0.5);
    CHECK_EQ_INT(gw_pool_queued(p), 4);
    pthread_mutex_lock(&gate_mu);
    gate_open = 1;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
    gw_pool_destroy(p);
    CHECK_EQ_INT(atomic_load(&queued), 4);

    /* asynchronous preprocessing through an executor */
    CHECK(gw_media_global_init(&err) == MM_OK);
    struct fx_plugin fp;
    CHECK(fx_plugin_open(&fp, "m3", NULL, 0) == 0);
    uint8_t *pat = fx_pattern(120, 90, 3, 3);
    size_t len = 0;
    uint8_t *png = fx_encode(pat, 120, 90, 3, ".png", &len);
    CHECK(fp.p && png);
    if (fp.p && png) {
        struct queue_exec q = {.mu = PTHREAD_MUTEX_INITIALIZER};
        struct gw_executor ex = {qe_post, &q};
        CHECK(gw_pool_create(2, 16, &p, &err) == MM_OK);
        struct gw_media_job jobs[8];
        memset(jobs, 0, sizeof jobs);
        for (int i = 0; i < 8; i++) {
            jobs[i].input = (struct gw_media_input){MMGW_MEDIA_IMAGE, png, i == 7 ? 10 : len, "async"};
            jobs[i].vt = &fp.p->vt;
            jobs[i].inst = fp.inst;
            jobs[i].ex = &ex;
            jobs[i].done = on_done;
            CHECK(gw_media_submit(p, &jobs[i]) == MM_OK);
        }
        gw_pool_wait_idle(p);
        CHECK_EQ_INT(atomic_load(&done_count), 0); /* nothing completes before the loop runs */
        CHECK_EQ_INT(qe_run(&q), 8);
        CHECK_EQ_INT(atomic_load(&done_count), 8);
        CHECK_EQ_INT(atomic_load(&done_on_test_thread), 8);
        for (int i = 0; i < 7; i++) {
            CHECK(jobs[i].rc == MM_OK && jobs[i].result.pixels != NULL);
            CHECK(jobs[i].result.n_patches == jobs[0].result.n_patches);
            CHECK(memcmp(jobs[i].result.pixels, jobs[0].result.pixels,
                         jobs[0].result.n_patches * jobs[0].result.patch_dim * 4) == 0);
        }
        CHECK(jobs[7].rc != MM_OK && jobs[7].result.pixels == NULL); /* truncated input */
        for (int i = 0; i < 8; i++) gw_media_result_free(&jobs[i].result);

        /* the requesting loop is gone: done runs on the pool thread, cancelled, nothing leaks */
        q.closed = 1;
        memset(jobs, 0, sizeof jobs);
        jobs[0] = (struct gw_media_job){.input = {MMGW_MEDIA_IMAGE, png, len, "late"},
                                        .vt = &fp.p->vt,
                                        .inst = fp.inst,
                                        .ex = &ex,
                                        .done = on_done};
        CHECK(gw_media_submit(p, &jobs[0]) == MM_OK);
        gw_pool_wait_idle(p);
        CHECK_EQ_INT(atomic_load(&done_count), 9);
        CHECK(jobs[0].rc == MM_CANCELLED && jobs[0].result.pixels == NULL);
        gw_pool_destroy(p);
    }
    free(png);
    free(pat);
    fx_plugin_close(&fp);
    return test_done();
}
