/* A fixed-size thread pool with a bounded FIFO queue: where the gateway runs preprocessing so its event
 * loops never block on decoding.
 *
 * Submitting never blocks: a full queue answers MM_EXHAUSTED at once (the caller turns it into 429/503),
 * which bounds memory under overload. Jobs run in submission order on whichever thread is free. Destroying
 * the pool stops intake, lets the threads finish every queued job, and joins them. Thread-safe. */
#ifndef GW_POOL_H
#define GW_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "mm_status.h"

struct gw_pool;

/** n_threads 0 = the number of online CPUs; max_queue 0 = 1024. */
int32_t gw_pool_create(uint32_t n_threads, uint32_t max_queue, struct gw_pool **out, struct mm_err *err);

/** Queue fn(arg). Returns MM_OK, MM_EXHAUSTED (queue full) or MM_CANCELLED (the pool is shutting down);
 * on failure fn will not run and the caller keeps arg. */
int32_t gw_pool_submit(struct gw_pool *p, void (*fn)(void *arg), void *arg);

/** Wait until no job is queued or running. */
void gw_pool_wait_idle(struct gw_pool *p);

uint32_t gw_pool_threads(const struct gw_pool *p);
/** Jobs waiting (not yet running). */
size_t gw_pool_queued(struct gw_pool *p);

/** Finish queued jobs, join the threads, free. NULL is fine. Must not be called from a pool thread. */
void gw_pool_destroy(struct gw_pool *p);

#endif
