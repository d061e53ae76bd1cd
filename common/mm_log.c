#include "mm_log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_int log_level = -1;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int32_t mm_log_level_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (s && strcmp(s, level_names[i]) == 0) return i;
    return -1;
}

void mm_log_set_level(int32_t level)
{
    atomic_store(&log_level, level);
}

int32_t mm_log_get_level(void)
{
    int lv = atomic_load(&log_level);
    if (lv < 0) {
        /* first use: the environment decides, INFO otherwise */
        lv = mm_log_level_parse(getenv("MMGW_LOG_LEVEL"));
        if (lv < 0) lv = MM_LOG_INFO;
        atomic_store(&log_level, lv);
    }
    return lv;
}

void mm_log(int32_t level, const char *component, const char *fmt, ...)
{
    if (level > mm_log_get_level()) return;
    if (level < 0) level = 0;
    if (level > 3) level = 3;
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L,
                     level_names[level], component ? component : "mmgw");
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* one fputs per line keeps concurrent lines whole */
    size_t len = strlen(line);
    if (len + 1 < sizeof line) {
        line[len] = '\n';
        line[len + 1] = '\0';
    }
    fputs(line, stderr);
}
