/* Thread pool (see gw_pool.h): one mutex, two condition variables, a ring buffer of jobs. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "gw_pool.h"

struct gw_pool_job {
    void (*fn)(void *);
    void *arg;
};

struct gw_pool {
    pthread_mutex_t mu;
    pthread_cond_t has_work; /* a job was queued, or shutdown began */
    pthread_cond_t idle;     /* the queue emptied and nothing runs */
    struct gw_pool_job *ring;
    uint32_t cap, head, count;
    uint32_t running;
    int stopping;
    uint32_t n_threads;
    pthread_t *threads;
};

static void *pool_main(void *arg)
{
    struct gw_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->count == 0 && !p->stopping) pthread_cond_wait(&p->has_work, &p->mu);
        if (p->count == 0 && p->stopping) break;
        struct gw_pool_job job = p->ring[p->head];
        p->head = (p->head + 1) % p->cap;
        p->count--;
        p->running++;
        pthread_mutex_unlock(&p->mu);
        job.fn(job.arg);
        pthread_mutex_lock(&p->mu);
        p->running--;
        if (p->count == 0 && p->running == 0) pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int32_t gw_pool_create(uint32_t n_threads, uint32_t max_queue, struct gw_pool **out, struct mm_err *err)
{
    *out = NULL;
    if (n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (uint32_t)n : 1;
    }
    if (n_threads > 1024) return mm_err_set(err, MM_INVALID, "pool: %u threads is too many", n_threads);
    if (max_queue == 0) max_queue = 1024;
    struct gw_pool *p = calloc(1, sizeof *p);
    if (!p) return mm_err_set(err, MM_NOMEM, "pool: out of memory");
    p->ring = calloc(max_queue, sizeof *p->ring);
    p->threads = calloc(n_threads, sizeof *p->threads);
    if (!p->ring || !p->threads) {
        free(p->ring);
        free(p->threads);
        free(p);
        return mm_err_set(err, MM_NOMEM, "pool: out of memory");
    }
    p->cap = max_queue;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->has_work, NULL);
    pthread_cond_init(&p->idle, NULL);
    for (uint32_t i = 0; i < n_threads; i++) {
        if (pthread_create(&p->threads[i], NULL, pool_main, p) != 0) {
            p->n_threads = i;
            gw_pool_destroy(p);
            return mm_err_set(err, MM_EXHAUSTED, "pool: cannot start thread %u of %u", i + 1, n_threads);
        }
        p->n_threads = i + 1;
    }
    *out = p;
    return MM_OK;
}

int32_t gw_pool_submit(struct gw_pool *p, void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&p->mu);
    int32_t rc = MM_OK;
    if (p->stopping)
        rc = MM_CANCELLED;
    else if (p->count == p->cap)
        rc = MM_EXHAUSTED;
    else {
        p->ring[(p->head + p->count) % p->cap] = (struct gw_pool_job){fn, arg};
        p->count++;
        pthread_cond_signal(&p->has_work);
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void gw_pool_wait_idle(struct gw_pool *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->count || p->running) pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

uint32_t gw_pool_threads(const struct gw_pool *p)
{
    return p->n_threads;
}

size_t gw_pool_queued(struct gw_pool *p)
{
    pthread_mutex_lock(&p->mu);
    size_t n = p->count;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void gw_pool_destroy(struct gw_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->has_work);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->has_work);
    pthread_cond_destroy(&p->idle);
    free(p->ring);
    free(p->threads);
    free(p);
}
