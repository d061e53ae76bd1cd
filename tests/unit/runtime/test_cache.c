/* The page pool: references, free pages, prefix publishing, lookup and eviction. */
#include "mmgw_test.h"
#include "wk_cache.h"

int main(void)
{
    struct wk_cache *c = wk_cache_create(4, 2);
    CHECK(c != NULL);
    if (!c) return test_done();
    CHECK_EQ_INT(wk_cache_free_count(c), 4);
    int32_t p[5];
    for (int i = 0; i < 4; i++) p[i] = wk_cache_take(c);
    CHECK_EQ_INT(p[0], 0); /* lowest ids first */
    CHECK_EQ_INT(p[3], 3);
    CHECK_EQ_INT(wk_cache_take(c), -1);
    CHECK_EQ_INT(wk_cache_free_count(c), 0);
    /* shared page: two references */
    wk_cache_ref(c, p[1]);
    CHECK_EQ_INT(wk_cache_refcount(c, p[1]), 2);
    wk_cache_unref(c, p[1]);
    CHECK_EQ_INT(wk_cache_free_count(c), 0);
    /* publish page 1 and release it: it stays cached and counts as free */
    const int32_t ids_a[2] = {5, 6}, ids_b[2] = {7, 8};
    uint64_t ka = wk_cache_key(0, ids_a, 2, 0);
    CHECK(ka == wk_cache_key(0, ids_a, 2, 0));
    CHECK(ka != wk_cache_key(0, ids_b, 2, 0));
    CHECK(ka != wk_cache_key(0, ids_a, 2, 99)); /* media hash is part of the key */
    CHECK(ka != wk_cache_key(1, ids_a, 2, 0));  /* so is the parent */
    wk_cache_publish(c, p[1], ka, 0, ids_a);
    wk_cache_unref(c, p[1]);
    CHECK_EQ_INT(wk_cache_free_count(c), 1);
    CHECK_EQ_INT(wk_cache_cached_count(c), 1);
    /* lookup with the right key, parent and ids takes it back */
    CHECK_EQ_INT(wk_cache_lookup(c, ka, 0, ids_b), -1); /* ids must match exactly */
    CHECK_EQ_INT(wk_cache_lookup(c, ka, 5, ids_a), -1); /* and the parent */
    CHECK_EQ_INT(wk_cache_lookup(c, ka, 0, ids_a), p[1]);
    CHECK_EQ_INT(wk_cache_refcount(c, p[1]), 1);
    CHECK_EQ_INT(wk_cache_cached_count(c), 0);
    /* a second page published under the same key is not registered twice */
    wk_cache_publish(c, p[2], ka, 0, ids_a);
    wk_cache_unref(c, p[2]);
    CHECK_EQ_INT(wk_cache_cached_count(c), 0);
    CHECK_EQ_INT(wk_cache_free_count(c), 1);
    /* release the published page again, then take two: the free one first, then the cached one is evicted */
    wk_cache_unref(c, p[1]);
    CHECK_EQ_INT(wk_cache_free_count(c), 2);
    int32_t t1 = wk_cache_take(c), t2 = wk_cache_take(c);
    CHECK_EQ_INT(t1, p[2]);
    CHECK_EQ_INT(t2, p[1]);
    CHECK_EQ_INT(wk_cache_lookup(c, ka, 0, ids_a), -1); /* forgotten */
    /* many publish/evict rounds keep the table healthy (tombstones are rebuilt) */
    for (int r = 0; r < 200; r++) {
        int32_t ids[2] = {r, r + 1};
        uint64_t k = wk_cache_key(0, ids, 2, 0);
        wk_cache_publish(c, t2, k, 0, ids);
        wk_cache_unref(c, t2);
        CHECK_EQ_INT(wk_cache_lookup(c, k, 0, ids), t2);
        wk_cache_unref(c, t2);
        t2 = wk_cache_take(c); /* evicts it */
        CHECK_EQ_INT(wk_cache_lookup(c, k, 0, ids), -1);
    }
    wk_cache_destroy(c);
    CHECK(wk_cache_create(0, 16) == NULL);
    return test_done();
}
