/* An executor: somewhere to run a function later, on a particular thread.
 *
 * Components that complete work on their own threads (the gRPC client's completion-queue thread, the
 * preprocessing pool) hand results back to the thread that owns the request through an executor, so
 * request state is only ever touched by its event-loop thread. Each libevent loop provides one
 * (gw_loop_executor in gateway/http); tests can use an inline or queue-based one. */
#ifndef GW_EXECUTOR_H
#define GW_EXECUTOR_H

struct gw_executor {
    /** Queue fn(arg) to run on the executor's thread. Thread-safe; never runs fn inline. Returns 0, or -1
     * when the executor is shutting down (fn will not run; the caller still owns arg). */
    int (*post)(void *ctx, void (*fn)(void *arg), void *arg);
    void *ctx;
};

static inline int gw_executor_post(const struct gw_executor *ex, void (*fn)(void *arg), void *arg)
{
    return ex->post(ex->ctx, fn, arg);
}

#endif
