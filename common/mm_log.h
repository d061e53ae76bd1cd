/* The logger: one line per call on stderr, "2026-11-30T19:00:00.123Z level component: message".
 * Thread-safe; lines never interleave. The level is process-wide (MMGW_LOG_LEVEL or mm_log_set_level). */
#ifndef MM_LOG_H
#define MM_LOG_H

#include <stdint.h>

enum mm_log_level { MM_LOG_ERROR = 0, MM_LOG_WARN = 1, MM_LOG_INFO = 2, MM_LOG_DEBUG = 3 };

void mm_log_set_level(int32_t level);
int32_t mm_log_get_level(void);
/** Parse "error|warn|info|debug"; returns -1 when unknown. */
int32_t mm_log_level_parse(const char *s);
void mm_log(int32_t level, const char *component, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define mm_log_error(comp, ...) mm_log(MM_LOG_ERROR, comp, __VA_ARGS__)
#define mm_log_warn(comp, ...) mm_log(MM_LOG_WARN, comp, __VA_ARGS__)
#define mm_log_info(comp, ...) mm_log(MM_LOG_INFO, comp, __VA_ARGS__)
#define mm_log_debug(comp, ...)                                                                              \
    do {                                                                                                     \
        if (mm_log_get_level() >= MM_LOG_DEBUG) mm_log(MM_LOG_DEBUG, comp, __VA_ARGS__);                     \
    } while (0)

#endif
