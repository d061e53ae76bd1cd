/* The host services table lent to plugins: heap, logger, error sink and clock. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gw_plugin.h"
#include "mm_clock.h"
#include "mm_log.h"

static void *host_alloc(uint64_t size)
{
    if (size == 0) size = 1;
    if (size > (uint64_t)SIZE_MAX) return NULL;
    return malloc((size_t)size);
}

static void host_free(void *p)
{
    free(p);
}

static void host_log(int32_t level, const char *plugin_name, const char *msg)
{
    char comp[64];
    snprintf(comp, sizeof comp, "plugin:%s", plugin_name ? plugin_name : "?");
    if (level < MM_LOG_ERROR) level = MM_LOG_ERROR;
    if (level > MM_LOG_DEBUG) level = MM_LOG_DEBUG;
    if (level > mm_log_get_level()) return;
    mm_log(level, comp, "%s", msg ? msg : "");
}

__attribute__((format(printf, 3, 4))) static int32_t host_set_error(struct mmgw_error *err, int32_t code,
                                                                    const char *fmt, ...)
{
    if (!err) return code;
    err->e.code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->e.msg, sizeof err->e.msg, fmt, ap);
    va_end(ap);
    /* One line: a plugin's message must not break the log or an HTTP error body. */
    for (char *c = err->e.msg; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    return code;
}

static uint64_t host_now_ns(void)
{
    return (uint64_t)mm_now_ns();
}

static const struct mmgw_host_api host_api = {
    .struct_size = sizeof(struct mmgw_host_api),
    .abi_major = MMGW_PLUGIN_ABI_MAJOR,
    .abi_minor = MMGW_PLUGIN_ABI_MINOR,
    .alloc = host_alloc,
    .free = host_free,
    .log = host_log,
    .set_error = host_set_error,
    .now_ns = host_now_ns,
};

const struct mmgw_host_api *gw_plugin_host_api(void)
{
    return &host_api;
}
