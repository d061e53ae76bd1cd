/* The monotonic clock the worker service measures time with. */
#ifndef WK_CLOCK_H
#define WK_CLOCK_H

#include <stdint.h>

/** Monotonic milliseconds. */
int64_t wk_now_ms(void);

#endif
