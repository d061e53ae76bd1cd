/* Staged uploads: ordered chunks, caps, take-once, expiry. */
#include "mm_clock.h"
#include "mmgw_test.h"
#include "wk_uploads.h"

int main(void)
{
    struct wk_uploads *u = wk_uploads_create(1000, 60000);
    struct mm_err err = {0};
    uint64_t got = 0;
    uint8_t data[600];
    for (int i = 0; i < 600; i++) data[i] = (uint8_t)i;

    CHECK_EQ_INT(wk_uploads_append(u, "a", 0, 0, data, 10, &got, &err), MM_INVALID); /* no total */
    CHECK_EQ_INT(wk_uploads_append(u, "a", 600, 0, data, 200, &got, &err), MM_OK);
    CHECK_EQ_INT(got, 200);
    CHECK_EQ_INT(wk_uploads_bytes(u), 600);
    CHECK(!wk_uploads_complete(u, "a"));
    CHECK_EQ_INT(wk_uploads_append(u, "a", 0, 100, data, 10, &got, &err), MM_INVALID); /* out of order */
    CHECK(strstr(err.msg, "expected 200") != NULL);
    CHECK_EQ_INT(wk_uploads_append(u, "a", 0, 200, data + 200, 500, &got, &err), MM_INVALID); /* overflows */
    CHECK_EQ_INT(wk_uploads_append(u, "a", 601, 200, data + 200, 10, &got, &err),
                 MM_INVALID);                                                          /* total changed */
    CHECK_EQ_INT(wk_uploads_append(u, "a", 600, 0, data, 10, &got, &err), MM_INVALID); /* restarted */
    CHECK_EQ_INT(wk_uploads_append(u, "b", 500, 0, data, 10, &got, &err),
                 MM_EXHAUSTED);                                                        /* 600 + 500 > 1000 */
    CHECK_EQ_INT(wk_uploads_append(u, "zz", 0, 50, data, 10, &got, &err), MM_INVALID); /* never started */
    /* a first chunk longer than its total is refused and stages nothing (found by fuzz_wk_upload) */
    CHECK_EQ_INT(wk_uploads_append(u, "e", 5, 0, data, 10, &got, &err), MM_INVALID);
    CHECK(strstr(err.msg, "passes total_bytes") != NULL);
    CHECK_EQ_INT(wk_uploads_bytes(u), 600);
    CHECK(!wk_uploads_complete(u, "e"));
    CHECK_EQ_INT(wk_uploads_append(u, "e", 0, 5, data, 1, &got, &err), MM_INVALID); /* nothing to continue */
    struct wk_upload *up = NULL;
    CHECK_EQ_INT(wk_uploads_take(u, "a", &up, &err), MM_NOT_FOUND); /* incomplete */
    CHECK_EQ_INT(wk_uploads_append(u, "a", 0, 200, data + 200, 400, &got, &err), MM_OK);
    CHECK(wk_uploads_complete(u, "a"));
    CHECK_EQ_INT(wk_uploads_take(u, "a", &up, &err), MM_OK);
    CHECK_EQ_INT(wk_upload_size(up), 600);
    CHECK(memcmp(wk_upload_data(up), data, 600) == 0);
    CHECK_EQ_INT(wk_uploads_bytes(u), 0);
    wk_upload_free(up);
    CHECK_EQ_INT(wk_uploads_take(u, "a", &up, &err), MM_NOT_FOUND); /* taken once */
    CHECK(up == NULL);

    char longid[WK_UPLOAD_ID_MAX + 2];
    memset(longid, 'x', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = 0;
    CHECK_EQ_INT(wk_uploads_append(u, longid, 10, 0, data, 10, &got, &err), MM_INVALID);
    CHECK_EQ_INT(wk_uploads_append(u, "", 10, 0, data, 10, &got, &err), MM_INVALID);

    /* drop and expiry free the bytes */
    CHECK_EQ_INT(wk_uploads_append(u, "c", 300, 0, data, 10, &got, &err), MM_OK);
    wk_uploads_drop(u, "c");
    CHECK_EQ_INT(wk_uploads_bytes(u), 0);
    CHECK_EQ_INT(wk_uploads_append(u, "d", 300, 0, data, 300, &got, &err), MM_OK);
    wk_uploads_sweep(u, mm_now_ms() + 120000);
    CHECK_EQ_INT(wk_uploads_bytes(u), 0);
    CHECK_EQ_INT(wk_uploads_take(u, "d", &up, &err), MM_NOT_FOUND);
    wk_uploads_destroy(u);
    return test_done();
}
