/* Prefix keys and the bounded affinity map. */
#include <stdlib.h>

#include "gw_affinity.h"
#include "mmgw_test.h"

int main(void)
{
    uint32_t a[20], b[20];
    for (int i = 0; i < 20; i++) a[i] = b[i] = (uint32_t)(100 + i);
    b[9] = 7; /* b differs from a in page 2 (tokens 8..11) */
    uint64_t ka[8], kb[8];
    size_t na = gw_affinity_keys(a, 20, 4, NULL, 0, ka, 8);
    size_t nb = gw_affinity_keys(b, 18, 4, NULL, 0, kb, 8);
    CHECK_EQ_INT(na, 5);
    CHECK_EQ_INT(nb, 4); /* only full pages count */
    CHECK(ka[0] == kb[0] && ka[1] == kb[1]);
    CHECK(ka[2] != kb[2] && ka[3] != kb[3]); /* a chained hash: everything after a difference differs */
    CHECK_EQ_INT(gw_affinity_keys(a, 20, 4, NULL, 0, ka, 3), 3); /* capped */
    CHECK_EQ_INT(gw_affinity_keys(a, 3, 4, NULL, 0, ka, 8), 0);
    CHECK_EQ_INT(gw_affinity_keys(a, 20, 0, NULL, 0, ka, 8), 0);

    /* media: same tokens, different content hash in page 1 -> keys differ from page 1 on */
    struct gw_affinity_media m1 = {.offset = 5, .content_hash = 111}, m2 = {.offset = 5, .content_hash = 222};
    uint64_t k1[8], k2[8];
    gw_affinity_keys(a, 20, 4, &m1, 1, k1, 8);
    gw_affinity_keys(a, 20, 4, &m2, 1, k2, 8);
    CHECK(k1[0] == k2[0]);
    CHECK(k1[1] != k2[1] && k1[4] != k2[4]);
    gw_affinity_keys(a, 20, 4, &m1, 1, k2, 8);
    CHECK(k1[4] == k2[4]); /* deterministic */

    struct gw_affinity *m = gw_affinity_create(64);
    CHECK(m != NULL);
    if (!m) return test_done();
    size_t pages = 99;
    na = gw_affinity_keys(a, 20, 4, NULL, 0, ka, 8);
    CHECK_EQ_INT(gw_affinity_lookup(m, ka, na, &pages), -1);
    CHECK_EQ_INT(pages, 0);
    /* a conversation's first turn (3 pages) served by worker 2 */
    gw_affinity_record(m, ka, 3, 2);
    /* the next turn extends it: the longest known prefix is 3 pages */
    CHECK_EQ_INT(gw_affinity_lookup(m, ka, na, &pages), 2);
    CHECK_EQ_INT(pages, 3);
    /* another conversation sharing only page 0..1 with a */
    nb = gw_affinity_keys(b, 20, 4, NULL, 0, kb, 8);
    CHECK_EQ_INT(gw_affinity_lookup(m, kb, nb, &pages), 2);
    CHECK_EQ_INT(pages, 2);
    gw_affinity_record(m, kb, nb, 5);
    CHECK_EQ_INT(gw_affinity_lookup(m, kb, nb, &pages), 5);
    CHECK_EQ_INT(pages, 5);
    /* the shared pages now point at the latest worker, a's own third page still at 2 */
    CHECK_EQ_INT(gw_affinity_lookup(m, ka, 3, &pages), 2);

    /* bounded: thousands of inserts keep it at its capacity */
    uint64_t key;
    for (uint64_t i = 1; i <= 5000; i++) {
        key = i * 0x9e3779b97f4a7c15ull;
        gw_affinity_record(m, &key, 1, (int)(i % 7));
    }
    CHECK(gw_affinity_size(m) <= 64);
    CHECK(gw_affinity_size(m) >= 48);
    /* the most recent insert is still there */
    CHECK_EQ_INT(gw_affinity_lookup(m, &key, 1, &pages), 5000 % 7);
    gw_affinity_destroy(m);
    return test_done();
}
