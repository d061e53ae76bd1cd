/* A fixed pool of worker threads for data-parallel loops (attention over tokens, MoE experts...).
 * The calling thread takes part, so a pool of 1 runs everything inline. Not reentrant: one wk_pool_run at a
 * time, from one thread. */
#ifndef WK_POOL_H
#define WK_POOL_H

#include <stdint.h>

struct wk_pool;

/** n_threads in total (the caller included); 0 = online cores. NULL on failure. */
struct wk_pool *wk_pool_create(int32_t n_threads);
void wk_pool_destroy(struct wk_pool *p);
int32_t wk_pool_threads(const struct wk_pool *p);

/** Run fn(arg, task, thread) for every task in [0, n_tasks), spread over the threads (thread in
 * [0, wk_pool_threads)); returns when all are done. */
void wk_pool_run(struct wk_pool *p, int64_t n_tasks, void (*fn)(void *arg, int64_t task, int32_t thread),
                 void *arg);

#endif
