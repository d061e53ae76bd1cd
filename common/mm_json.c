#include "mm_json.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mm_buf.h"

/* Every block carries a 16-byte header (malloc's alignment is kept) that says where it came from. */
#define HDR 16
#define TAG_HEAP UINT64_C(0x6d6d6a736f6e4850)  /* "mmjsonHP" */
#define TAG_ARENA UINT64_C(0x6d6d6a736f6e4152) /* "mmjsonAR" */

static atomic_int installed;
static _Thread_local struct mm_json_scope scope;

static void *j_malloc(size_t n)
{
    if (n > SIZE_MAX - HDR) return NULL;
    struct mm_arena *a = scope.arena;
    unsigned char *p = NULL;
    uint64_t tag = TAG_ARENA;
    if (a && n <= MM_JSON_ARENA_MAX_ALLOC && mm_arena_used(a) + n + HDR <= scope.cap)
        p = mm_arena_alloc(a, n + HDR);
    if (!p) {
        p = malloc(n + HDR);
        if (!p) return NULL;
        tag = TAG_HEAP;
    }
    memcpy(p, &tag, sizeof tag);
    return p + HDR;
}

static void j_free(void *q)
{
    if (!q) return;
    unsigned char *p = (unsigned char *)q - HDR;
    uint64_t tag;
    memcpy(&tag, p, sizeof tag);
    if (tag == TAG_ARENA) return; /* the arena takes it back */
    free(p);
}

void mm_json_alloc_install(void)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&installed, &expected, 1)) json_set_alloc_funcs(j_malloc, j_free);
}

int mm_json_alloc_installed(void)
{
    return atomic_load(&installed);
}

struct mm_json_scope mm_json_arena_enter(struct mm_arena *a, size_t cap)
{
    struct mm_json_scope prev = scope;
    scope.arena = atomic_load_explicit(&installed, memory_order_relaxed) ? a : NULL;
    scope.cap = cap;
    return prev;
}

void mm_json_arena_leave(struct mm_json_scope prev)
{
    scope = prev;
}

static int dump_cb(const char *buffer, size_t size, void *data)
{
    return mm_buf_append(data, buffer, size) ? -1 : 0;
}

char *mm_json_dumps(const json_t *json, size_t flags)
{
    struct mm_buf b;
    mm_buf_init(&b, 0);
    if (json_dump_callback(json, dump_cb, &b, flags) != 0 || mm_buf_reserve(&b, 0) != 0) {
        mm_buf_free(&b);
        return NULL;
    }
    return mm_buf_detach(&b, NULL);
}
