/* The monotonic clock every component measures time with (deadlines, timeouts, latencies), and the
 * realtime deadlines that pthread_cond_timedwait takes. */
#ifndef MM_CLOCK_H
#define MM_CLOCK_H

#include <stdint.h>
#include <time.h>

/** Monotonic nanoseconds. */
static inline int64_t mm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/** Monotonic milliseconds. */
static inline int64_t mm_now_ms(void)
{
    return mm_now_ns() / 1000000;
}

/** The CLOCK_REALTIME time ms milliseconds from now: a deadline for pthread_cond_timedwait. */
static inline struct timespec mm_realtime_after_ms(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

#endif
