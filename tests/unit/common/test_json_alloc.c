/* jansson values from an arena scope (mm_json.h): parsed inside a scope, dropped inside or outside it;
 * values made outside dropped inside; large allocations and a full scope fall back to the heap; nested
 * scopes; mm_json_dumps gives free()able memory equal to json_dumps's text. Under ASan a heap block freed
 * as an arena one (or the reverse) shows up as a leak or a bad free. */
#include <stdlib.h>
#include <string.h>

#include "mm_arena.h"
#include "mm_json.h"
#include "mmgw_test.h"

static const char doc[] = "{\"model\":\"demo\",\"messages\":[{\"role\":\"user\",\"content\":\"Say something "
                          "short about the sea.\"}],\"max_tokens\":1,\"ignore_eos\":true}";

int main(void)
{
    /* a scope before the install changes nothing */
    struct mm_arena *a = mm_arena_create(16384);
    CHECK(a != NULL);
    struct mm_json_scope s0 = mm_json_arena_enter(a, 12 * 1024);
    mm_json_arena_leave(s0);
    mm_json_alloc_install();
    mm_json_alloc_install(); /* idempotent */
    CHECK(mm_json_alloc_installed());

    json_t *outside = json_loads(doc, 0, NULL); /* heap */
    CHECK(outside != NULL);
    CHECK_EQ_INT(mm_arena_used(a), 0);

    struct mm_json_scope prev = mm_json_arena_enter(a, 12 * 1024);
    json_t *in = json_loads(doc, 0, NULL);
    CHECK(in != NULL);
    size_t used = mm_arena_used(a);
    CHECK(used > 0);
    CHECK(json_equal(in, outside));
    /* edits inside the scope, and an outside value dropped inside */
    CHECK(json_object_set_new(in, "n", json_integer(3)) == 0);
    CHECK(json_array_append_new(json_object_get(in, "messages"), json_string("x")) == 0);
    json_t *tmp = json_loads("[1,2,3]", 0, NULL);
    json_decref(tmp);
    /* a long string: from the heap even inside the scope */
    char *big = malloc(MM_JSON_ARENA_MAX_ALLOC * 4);
    CHECK(big != NULL);
    memset(big, 'q', MM_JSON_ARENA_MAX_ALLOC * 4 - 1);
    big[MM_JSON_ARENA_MAX_ALLOC * 4 - 1] = '\0';
    size_t before = mm_arena_used(a);
    json_t *bs = json_string(big);
    CHECK(bs != NULL && json_string_length(bs) == MM_JSON_ARENA_MAX_ALLOC * 4 - 1);
    CHECK(mm_arena_used(a) - before < MM_JSON_ARENA_MAX_ALLOC); /* the text went to the heap */
    json_decref(bs);
    free(big);
    /* a nested scope without an arena: the heap */
    struct mm_json_scope inner = mm_json_arena_enter(NULL, 0);
    before = mm_arena_used(a);
    json_t *heap2 = json_loads(doc, 0, NULL);
    CHECK(heap2 != NULL && mm_arena_used(a) == before);
    mm_json_arena_leave(inner);
    /* dumps: the same text as json_dumps, freed with free() */
    char *d1 = mm_json_dumps(in, JSON_COMPACT | JSON_SORT_KEYS);
    char *d2 = json_dumps(in, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK(d1 != NULL && d2 != NULL);
    if (d1 && d2) CHECK_STR(d1, d2);
    free(d1);
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    jfree(d2); /* json_dumps's memory goes back through jansson's free */
    mm_json_arena_leave(prev);

    /* values made in the scope dropped outside it; a heap value made in the nested scope too */
    json_decref(heap2);
    json_decref(in);
    json_decref(outside);

    /* a full scope: the rest comes from the heap */
    mm_arena_reset(a);
    prev = mm_json_arena_enter(a, 64);
    json_t *small = json_loads(doc, 0, NULL);
    CHECK(small != NULL && mm_arena_used(a) <= 64);
    json_decref(small);
    mm_json_arena_leave(prev);
    mm_arena_destroy(a);
    return test_done();
}
