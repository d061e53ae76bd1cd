/* Decode steps as CUDA graphs. A decode step issues ~35 small launches per layer; on the H200 VMs measured
 * each launch costs 4-6 us of host and front-end time, more than most of the kernels themselves. So the CUDA
 * backend records a decode step's operations (a function and a copy of its arguments) instead of launching
 * them, and runs them at the first point that needs their results (a download, a host-visible operation, the
 * end of the step), as one segment:
 *  - a segment equal to one captured before (same functions, same argument bytes, same key: the launch
 *    parameters the backend derives from its own state) replays that graph: one launch;
 *  - a segment seen once before, unchanged, is captured into a graph while it runs (its second sighting, so
 *    scratch buffers have stopped growing: nothing is allocated or freed during a capture);
 *  - anything else runs operation by operation, as without graphs.
 * Device data that changes between steps (positions, block tables, token ids, RoPE tables) lives at fixed
 * device addresses that the backend refills before the segment runs, so a replay reads the new values; the
 * key holds everything host-side the launches depend on (batch shape, block counts, scratch generation). */
#ifndef WK_CUDA_STEPS_H
#define WK_CUDA_STEPS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

/** A recorded operation: runs it on ctx with its argument copy. */
typedef void (*wk_step_fn)(void *ctx, const void *args);

struct wk_steps;

/** Counters since creation (reports and tests). */
struct wk_steps_stats {
    int64_t replays;  /* segments run as a graph replay */
    int64_t captures; /* segments captured (and then launched) */
    int64_t eager;    /* segments run operation by operation */
    int64_t ops;      /* operations recorded */
};

/** NULL when out of memory. */
struct wk_steps *wk_steps_new(void);
void wk_steps_free(struct wk_steps *s);

/** Record fn(ctx, args) (n bytes, copied; padding bytes must be zeroed, since segments compare as bytes).
 * Returns 0, or -1 when out of memory (nothing recorded: run it now, after wk_steps_run). */
int wk_steps_push(struct wk_steps *s, wk_step_fn fn, const void *args, size_t n);

/** Operations recorded and not yet run. */
int wk_steps_pending(const struct wk_steps *s);

enum { WK_STEPS_OK = 0, WK_STEPS_CAPTURE_FAILED = 1 };

/** Run the recorded operations on `stream` (see the top of this file; graphs = 0: one by one) and forget
 * them. key: key_n bytes that, together with the operations, decide every launch. WK_STEPS_CAPTURE_FAILED:
 * the capture was refused (the operations did not run and are still recorded: the caller resets what they
 * set and calls again with graphs = 0). */
int wk_steps_run(struct wk_steps *s, void *ctx, cudaStream_t stream, const void *key, size_t key_n,
                 int graphs);

void wk_steps_get_stats(const struct wk_steps *s, struct wk_steps_stats *out);

#endif
