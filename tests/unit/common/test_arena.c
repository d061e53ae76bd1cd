#include <stdint.h>

#include "mm_arena.h"
#include "mmgw_test.h"

static int cleaned;
static void on_cleanup(void *p)
{
    cleaned += *(int *)p;
}

int main(void)
{
    struct mm_arena *a = mm_arena_create(1024);
    CHECK(a != NULL);
    char *s = mm_arena_strdup(a, "abc");
    CHECK_STR(s, "abc");
    for (int i = 0; i < 1000; i++) {
        void *p = mm_arena_alloc(a, (size_t)(i % 97) + 1);
        CHECK(p != NULL && ((uintptr_t)p & 15) == 0);
    }
    void *big = mm_arena_alloc_aligned(a, 100000, 4096);
    CHECK(big != NULL && ((uintptr_t)big & 4095) == 0);
    int *z = mm_arena_calloc(a, 100, sizeof(int));
    int sum = 0;
    for (int i = 0; i < 100; i++) sum += z[i];
    CHECK_EQ_INT(sum, 0);
    CHECK(mm_arena_calloc(a, SIZE_MAX / 2, 4) == NULL); /* overflow refused */
    static int one = 1, two = 2;
    mm_arena_cleanup_add(a, on_cleanup, &one);
    mm_arena_cleanup_add(a, on_cleanup, &two);
    mm_arena_reset(a);
    CHECK_EQ_INT(cleaned, 3);
    CHECK_EQ_INT(mm_arena_used(a), 0);
    CHECK(mm_arena_alloc(a, 10) != NULL);
    mm_arena_cleanup_add(a, on_cleanup, &one);
    mm_arena_destroy(a);
    CHECK_EQ_INT(cleaned, 4);
    return test_done();
}
