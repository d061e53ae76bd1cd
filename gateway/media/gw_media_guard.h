/* The per-item time budget and cancellation of the preprocessing pipeline (internal to gateway/media).
 *
 * gw_media_process makes one guard per item: a CLOCK_MONOTONIC deadline (from gw_media_limits.max_process_ns)
 * and the caller's cancel flag (gw_media_options.cancel). The long loops poll it: the video demuxer's packet
 * loop, the frame decoding loop (also through FFmpeg's interrupt callback, which FFmpeg polls inside
 * avformat_open_input / avformat_find_stream_info), and the row sink every decoded image row and every
 * sampled frame passes through. Polling costs a clock read and a relaxed atomic load. */
#ifndef GW_MEDIA_GUARD_H
#define GW_MEDIA_GUARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "mm_status.h"

struct gw_media_guard {
    uint64_t deadline_ns;      /* CLOCK_MONOTONIC; UINT64_MAX = no budget */
    uint64_t budget_ns;        /* what the deadline was made from (for messages) */
    const atomic_bool *cancel; /* NULL = cannot be cancelled */
};

static inline uint64_t gw_media_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/** A guard whose deadline is budget_ns from now (GW_MEDIA_NO_TIME_LIMIT, UINT64_MAX: none). */
static inline void gw_media_guard_init(struct gw_media_guard *g, uint64_t budget_ns,
                                       const atomic_bool *cancel)
{
    uint64_t now = gw_media_mono_ns();
    g->budget_ns = budget_ns;
    g->deadline_ns = budget_ns > UINT64_MAX - now ? UINT64_MAX : now + budget_ns;
    g->cancel = cancel;
}

/** MM_OK to go on, MM_CANCELLED (the flag is set) or MM_TIMEOUT (past the deadline). No message: for
 * callbacks that only answer stop/go (FFmpeg's interrupt callback). NULL guard = MM_OK. */
static inline int32_t gw_media_guard_poll(const struct gw_media_guard *g)
{
    if (!g) return MM_OK;
    if (g->cancel && atomic_load_explicit(g->cancel, memory_order_relaxed)) return MM_CANCELLED;
    if (g->deadline_ns != UINT64_MAX && gw_media_mono_ns() > g->deadline_ns) return MM_TIMEOUT;
    return MM_OK;
}

/** The one-line message for a stop that gw_media_guard_poll reported (why): "<label>: preprocessing took
 * longer than the time limit of N ms (stopped while <stage>)" or "<label>: preprocessing was cancelled
 * (while <stage>)". Returns why. */
int32_t gw_media_guard_fail(const struct gw_media_guard *g, int32_t why, const char *label, const char *stage,
                            struct mm_err *err);

/** Poll, and on a stop set err (gw_media_guard_fail). */
static inline int32_t gw_media_guard_check(const struct gw_media_guard *g, const char *label,
                                           const char *stage, struct mm_err *err)
{
    int32_t why = gw_media_guard_poll(g);
    return why == MM_OK ? MM_OK : gw_media_guard_fail(g, why, label, stage, err);
}

#endif
