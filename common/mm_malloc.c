/* Process-wide malloc settings (see mm_malloc.h). */
#include "mm_malloc.h"

#include <stdlib.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

/* glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX); larger blocks are rare (long
 * videos) and may be mapped. Free memory above the trim threshold at the top of a heap goes back to the
 * kernel, so a burst's peak is not held forever. */
#define MMAP_THRESHOLD (32u << 20)
#define TRIM_THRESHOLD (128u << 20)

static int env_set(const char *name)
{
    const char *v = getenv(name);
    return v && v[0];
}

void mm_malloc_tune_server(void)
{
#ifdef __GLIBC__
    if (env_set("GLIBC_TUNABLES")) return; /* the operator tunes malloc; leave it */
    if (!env_set("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, (int)MMAP_THRESHOLD);
    if (!env_set("MALLOC_TRIM_THRESHOLD_")) mallopt(M_TRIM_THRESHOLD, (int)TRIM_THRESHOLD);
#endif
}
