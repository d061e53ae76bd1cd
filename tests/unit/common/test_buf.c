/* mm_buf on the heap, in an arena and in caller storage: the same contents whatever the storage, moves to
 * the heap past the arena's share or the caller's array, detach always hands back malloc memory. */
#include <stdlib.h>
#include <string.h>

#include "mm_arena.h"
#include "mm_buf.h"
#include "mmgw_test.h"

/* Append 1..n bytes in steps and check the contents after each. */
static void fill(struct mm_buf *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = (char)('a' + i % 26);
        CHECK(mm_buf_append(b, &c, 1) == 0);
        CHECK(b->len == i + 1 && b->data[i] == c && b->data[i + 1] == '\0');
    }
    for (size_t i = 0; i < n; i++) CHECK(b->data[i] == (char)('a' + i % 26));
}

int main(void)
{
    /* heap, as before */
    struct mm_buf h;
    mm_buf_init(&h, 0);
    fill(&h, 3000);
    CHECK(h.owned);
    mm_buf_free(&h);
    CHECK(h.data == NULL && h.len == 0);

    /* a zeroed struct is an empty heap buffer */
    struct mm_buf z;
    memset(&z, 0, sizeof z);
    CHECK(mm_buf_append_str(&z, "xyz") == 0);
    CHECK_STR(z.data, "xyz");
    mm_buf_free(&z);

    /* arena: small growth from the arena, then the heap */
    struct mm_arena *a = mm_arena_create(16384);
    CHECK(a != NULL);
    struct mm_buf ab;
    mm_buf_init_arena(&ab, 0, a);
    CHECK(mm_buf_append_str(&ab, "hello") == 0);
    CHECK(!ab.owned && mm_arena_used(a) >= 256);
    mm_buf_reset(&ab);
    fill(&ab, MM_BUF_ARENA_MAX - 1); /* fits the arena's share */
    CHECK(!ab.owned);
    CHECK(mm_buf_append(&ab, "!", 1) == 0); /* past it: the heap, contents kept */
    CHECK(ab.owned && ab.len == MM_BUF_ARENA_MAX && ab.data[MM_BUF_ARENA_MAX - 1] == '!');
    CHECK(ab.data[0] == 'a' && ab.data[MM_BUF_ARENA_MAX - 2] == (char)('a' + (MM_BUF_ARENA_MAX - 2) % 26));
    fill(&ab, 0);
    mm_buf_consume(&ab, 10);
    CHECK(ab.len == MM_BUF_ARENA_MAX - 10 && ab.data[0] == 'k');
    mm_buf_free(&ab);
    /* after a free it starts over in the arena; detach copies to the heap */
    CHECK(mm_buf_printf(&ab, "%d-%s", 42, "x") == 0);
    CHECK(!ab.owned);
    size_t n = 0;
    char *d = mm_buf_detach(&ab, &n);
    CHECK(d != NULL && n == 4);
    CHECK_STR(d, "42-x");
    free(d);
    CHECK(ab.data == NULL && ab.len == 0);
    /* the cap still applies */
    struct mm_buf capped;
    mm_buf_init_arena(&capped, 8, a);
    CHECK(mm_buf_append_str(&capped, "12345678") == 0);
    CHECK(mm_buf_append(&capped, "9", 1) == -1);
    CHECK_STR(capped.data, "12345678");
    mm_buf_free(&capped);
    mm_arena_destroy(a);

    /* caller storage: used until it is too small, then the heap */
    char st[16];
    struct mm_buf sb;
    mm_buf_init_with(&sb, 0, st, sizeof st);
    CHECK(sb.data == st && sb.len == 0 && st[0] == '\0');
    CHECK(mm_buf_append_str(&sb, "0123456789abcde") == 0); /* 15 + NUL fills it */
    CHECK(sb.data == st && !sb.owned);
    CHECK(mm_buf_append(&sb, "f", 1) == 0);
    CHECK(sb.data != st && sb.owned);
    CHECK_STR(sb.data, "0123456789abcdef");
    mm_buf_free(&sb);
    mm_buf_init_with(&sb, 0, st, sizeof st);
    CHECK(mm_buf_append_str(&sb, "abc") == 0);
    d = mm_buf_detach(&sb, &n);
    CHECK(d != NULL && d != st && n == 3);
    CHECK_STR(d, "abc");
    free(d);
    mm_buf_free(&sb); /* nothing to free */
    return test_done();
}
