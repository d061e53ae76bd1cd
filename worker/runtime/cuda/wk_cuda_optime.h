/* GPU time per kind of operation, for profiling the CUDA backend's decode steps (MMGW_CUDA_OP_TIMING=1):
 * events around every operation run one by one, summed by a key (operation and shape) once the step has
 * synchronised, and logged as a table at the end, with the host time spent inside each kind (its checks and
 * launches) and between operations. Costs an event pair per operation; off by default. */
#ifndef WK_CUDA_OPTIME_H
#define WK_CUDA_OPTIME_H

#include <stdint.h>

#include <cuda_runtime_api.h>

struct wk_optime;

/** NULL when out of memory or when events cannot be created. */
struct wk_optime *wk_optime_new(cudaStream_t stream);
void wk_optime_free(struct wk_optime *t);

/** Bracket one operation on the stream; key is copied (at most 63 bytes). Past the per-step capacity the
 * operation is not timed. */
void wk_optime_begin(struct wk_optime *t, const char *key);
void wk_optime_end(struct wk_optime *t);

/** After the stream has synchronised: add this step's intervals to the totals (counted as one step). */
void wk_optime_step_done(struct wk_optime *t);

/** Log the totals (mm_log info, component "cuda"): per key, microseconds per step and calls per step. */
void wk_optime_log(const struct wk_optime *t);

#endif
