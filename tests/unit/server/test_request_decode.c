/* GenerateRequest validation: every malformed input gets MM_INVALID (or NOT_FOUND) with a message naming
 * the field, valid ones convert exactly, and nothing leaks on any path (run under ASan). */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mm_dtype.h"
#include "mmgw_test.h"
#include "wk_request_decode.h"
#include "wk_shm.h"
#include "wk_uploads.h"

enum { VOCAB = 100, CTX = 64, IMG = 90, VID = 91, ROW = 6 };

static struct wk_uploads *g_up;

static struct wk_decode_limits limits(void)
{
    struct wk_decode_limits l = {.vocab_size = VOCAB,
                                 .max_context = CTX,
                                 .image_token_id = IMG,
                                 .video_token_id = VID,
                                 .merge_factor = 4,
                                 .uploads = g_up,
                                 .allow_shm = 1};
    return l;
}

/* Round-trip through the wire so the decoder gets a heap message it may free, as from gRPC. */
static int32_t decode(const Mmgw__Worker__V1__GenerateRequest *m, struct wk_request **out, struct mm_err *err)
{
    size_t n = mmgw__worker__v1__generate_request__get_packed_size(m);
    uint8_t *buf = malloc(n + 1);
    mmgw__worker__v1__generate_request__pack(m, buf);
    Mmgw__Worker__V1__GenerateRequest *u = mmgw__worker__v1__generate_request__unpack(NULL, n, buf);
    free(buf);
    if (!u) return -100;
    struct wk_decode_limits l = limits();
    memset(err, 0, sizeof(*err));
    return wk_request_decode(u, &l, "fallback-1", out, err);
}

static int32_t expect_fail(const Mmgw__Worker__V1__GenerateRequest *m, int32_t code, const char *needle)
{
    struct wk_request *r = NULL;
    struct mm_err err;
    int32_t rc = decode(m, &r, &err);
    CHECK_MSG(rc == code, "got %s (%s), expected %s", mm_status_name(rc), err.msg, mm_status_name(code));
    CHECK(r == NULL);
    if (needle) CHECK_MSG(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
    wk_request_free(r);
    return rc;
}

static void test_text(void)
{
    uint32_t ids[5] = {3, 4, 5, 6, 7};
    Mmgw__Worker__V1__GenerateRequest m = MMGW__WORKER__V1__GENERATE_REQUEST__INIT;
    m.n_input_ids = 5;
    m.input_ids = ids;
    struct wk_request *r = NULL;
    struct mm_err err;
    CHECK_EQ_INT(decode(&m, &r, &err), MM_OK);
    CHECK_STR(r->id, "fallback-1");
    CHECK_EQ_INT(r->n_ids, 5);
    CHECK_EQ_INT(r->ids[4], 7);
    CHECK_EQ_INT(r->sp.n, 1);
    CHECK_NEAR(r->sp.temperature, 1.0, 0);
    CHECK_EQ_INT(r->sp.has_max_new_tokens, 0);
    CHECK_EQ_INT(r->sp.max_new_tokens, CTX - 5);
    CHECK_EQ_INT(r->media_hash, 0);
    wk_request_free(r);

    Mmgw__Worker__V1__SamplingParams sp = MMGW__WORKER__V1__SAMPLING_PARAMS__INIT;
    uint32_t stops[2] = {8, 9};
    sp.has_max_new_tokens_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_MAX_NEW_TOKENS_MAX_NEW_TOKENS;
    sp.max_new_tokens = 1000; /* clamped to the context */
    sp.has_temperature_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_TEMPERATURE_TEMPERATURE;
    sp.temperature = 0.0f;
    sp.has_n_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_N_N;
    sp.n = 3;
    sp.has_logprobs_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_LOGPROBS_LOGPROBS;
    sp.logprobs = 2;
    sp.n_stop_token_ids = 2;
    sp.stop_token_ids = stops;
    sp.has_top_k_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_TOP_K_TOP_K;
    sp.top_k = -1;
    m.sampling = &sp;
    m.request_id = "abc";
    CHECK_EQ_INT(decode(&m, &r, &err), MM_OK);
    CHECK_STR(r->id, "abc");
    CHECK_EQ_INT(r->sp.has_max_new_tokens, 1);
    CHECK_EQ_INT(r->sp.max_new_tokens, CTX - 5);
    CHECK_NEAR(r->sp.temperature, 0.0, 0);
    CHECK_EQ_INT(r->sp.n, 3);
    CHECK_EQ_INT(r->sp.top_logprobs, 2);
    CHECK_EQ_INT(r->sp.return_logprobs, 1);
    CHECK_EQ_INT(r->sp.n_stop_ids, 2);
    CHECK_EQ_INT(r->sp.stop_ids[1], 9);
    CHECK_EQ_INT(r->sp.top_k, 0);
    wk_request_free(r);
}

static void test_text_errors(void)
{
    uint32_t ids[5] = {3, 4, VOCAB, 6, 7};
    Mmgw__Worker__V1__GenerateRequest m = MMGW__WORKER__V1__GENERATE_REQUEST__INIT;
    expect_fail(&m, MM_INVALID, "input_ids is empty");
    m.n_input_ids = 5;
    m.input_ids = ids;
    expect_fail(&m, MM_INVALID, "input_ids[2]");
    ids[2] = 5;
    uint32_t long_ids[CTX];
    for (int i = 0; i < CTX; i++) long_ids[i] = 3;
    m.n_input_ids = CTX;
    m.input_ids = long_ids;
    expect_fail(&m, MM_INVALID, "context");
    m.n_input_ids = 5;
    m.input_ids = ids;
    char longid[300];
    memset(longid, 'x', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = 0;
    m.request_id = longid;
    expect_fail(&m, MM_INVALID, "request_id");
    m.request_id = "ok";

    Mmgw__Worker__V1__SamplingParams sp = MMGW__WORKER__V1__SAMPLING_PARAMS__INIT;
    m.sampling = &sp;
    sp.has_temperature_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_TEMPERATURE_TEMPERATURE;
    sp.temperature = -1.0f;
    expect_fail(&m, MM_INVALID, "temperature");
    sp.temperature = 0.5f;
    sp.has_top_p_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_TOP_P_TOP_P;
    sp.top_p = 0.0f;
    expect_fail(&m, MM_INVALID, "top_p");
    sp.top_p = 0.9f;
    sp.has_n_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_N_N;
    sp.n = 0;
    expect_fail(&m, MM_INVALID, "sampling.n");
    sp.n = WK_MAX_CHOICES + 1;
    expect_fail(&m, MM_INVALID, "sampling.n");
    sp.n = 2;
    sp.has_logprobs_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_LOGPROBS_LOGPROBS;
    sp.logprobs = WK_MAX_TOP_LOGPROBS + 1;
    expect_fail(&m, MM_INVALID, "logprobs");
    sp.logprobs = 1;
    uint32_t stops[1] = {VOCAB + 5};
    sp.n_stop_token_ids = 1;
    sp.stop_token_ids = stops;
    expect_fail(&m, MM_INVALID, "stop_token_ids[0]");
    sp.has_min_p_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_MIN_P_MIN_P;
    sp.min_p = 2.0f;
    stops[0] = 3;
    expect_fail(&m, MM_INVALID, "min_p");
}

/* A prompt with an image of grid 1x4x6 (24 rows, 6 tokens at [2, 8)). */
struct img_req {
    uint32_t ids[12];
    float px[24 * ROW];
    int64_t shape[2];
    int64_t grid[3];
    Mmgw__Worker__V1__Tensor t;
    Mmgw__Worker__V1__PlaceholderRange pr, *prs[2];
    Mmgw__Worker__V1__MultimodalItem it, *its[2];
    Mmgw__Worker__V1__GenerateRequest m;
};

static void img_init(struct img_req *q)
{
    memset(q, 0, sizeof(*q));
    for (int i = 0; i < 12; i++) q->ids[i] = (i >= 2 && i < 8) ? IMG : 10 + (uint32_t)i;
    for (int i = 0; i < 24 * ROW; i++) q->px[i] = (float)i * 0.01f;
    mmgw__worker__v1__tensor__init(&q->t);
    q->t.dtype = MMGW__WORKER__V1__DTYPE__F32;
    q->shape[0] = 24;
    q->shape[1] = ROW;
    q->t.n_shape = 2;
    q->t.shape = q->shape;
    q->t.data.data = (uint8_t *)q->px;
    q->t.data.len = sizeof(q->px);
    mmgw__worker__v1__placeholder_range__init(&q->pr);
    q->pr.offset = 2;
    q->pr.length = 6;
    q->prs[0] = &q->pr;
    mmgw__worker__v1__multimodal_item__init(&q->it);
    q->it.modality = MMGW__WORKER__V1__MODALITY__IMAGE;
    q->it.pixel_values = &q->t;
    q->grid[0] = 1;
    q->grid[1] = 4;
    q->grid[2] = 6;
    q->it.n_grid_thw = 3;
    q->it.grid_thw = q->grid;
    q->it.n_placeholders = 1;
    q->it.placeholders = q->prs;
    q->its[0] = &q->it;
    mmgw__worker__v1__generate_request__init(&q->m);
    q->m.n_input_ids = 12;
    q->m.input_ids = q->ids;
    q->m.n_mm_inputs = 1;
    q->m.mm_inputs = q->its;
}

static void test_image(void)
{
    struct img_req q;
    img_init(&q);
    struct wk_request *r = NULL;
    struct mm_err err;
    CHECK_EQ_INT(decode(&q.m, &r, &err), MM_OK);
    CHECK_EQ_INT(r->n_media, 1);
    CHECK_EQ_INT(r->media[0].kind, 0);
    CHECK_EQ_INT(r->media[0].dtype, MM_DT_F32);
    CHECK_EQ_INT(r->media[0].n_rows, 24);
    CHECK_EQ_INT(r->media[0].n_tokens, 6);
    CHECK_EQ_INT(r->media[0].runs[0].offset, 2);
    CHECK(r->media[0].pixels && memcmp(r->media[0].pixels, q.px, sizeof(q.px)) == 0);
    CHECK(r->media_hash != 0);
    uint64_t h1 = r->media_hash;
    wk_request_release_media(r); /* frees the message the pixels live in */
    CHECK(r->media[0].pixels == NULL);
    wk_request_free(r);
    /* a different picture hashes differently; a given content_hash is used as is */
    q.px[5] += 1.0f;
    CHECK_EQ_INT(decode(&q.m, &r, &err), MM_OK);
    CHECK(r->media_hash != h1);
    wk_request_free(r);
    q.it.content_hash = 77;
    CHECK_EQ_INT(decode(&q.m, &r, &err), MM_OK);
    CHECK_EQ_INT(r->media[0].content_hash, 77);
    wk_request_free(r);

    /* BF16 bytes */
    uint16_t bf[24 * ROW] = {0};
    q.t.dtype = MMGW__WORKER__V1__DTYPE__BF16;
    q.t.data.data = (uint8_t *)bf;
    q.t.data.len = sizeof(bf);
    CHECK_EQ_INT(decode(&q.m, &r, &err), MM_OK);
    CHECK_EQ_INT(r->media[0].dtype, MM_DT_BF16);
    wk_request_free(r);
}

static void test_image_errors(void)
{
    struct img_req q;
    img_init(&q);
    q.t.data.len -= 4;
    expect_fail(&q.m, MM_INVALID, "bytes");
    img_init(&q);
    q.t.dtype = MMGW__WORKER__V1__DTYPE__BF16; /* F32 bytes under a BF16 label: twice too many */
    expect_fail(&q.m, MM_INVALID, "bytes");
    img_init(&q);
    q.t.dtype = MMGW__WORKER__V1__DTYPE__DTYPE_UNSPECIFIED;
    expect_fail(&q.m, MM_INVALID, "dtype");
    img_init(&q);
    int64_t s3[3] = {24, 3, 2};
    q.t.n_shape = 3;
    q.t.shape = s3;
    expect_fail(&q.m, MM_INVALID, "shape");
    img_init(&q);
    q.shape[0] = -24;
    expect_fail(&q.m, MM_INVALID, "shape");
    img_init(&q);
    q.shape[0] = INT64_MAX / 2;
    expect_fail(&q.m, MM_INVALID, NULL);
    img_init(&q);
    q.grid[1] = 3; /* 1x3x5: 15 patches do not merge 2x2 */
    q.grid[2] = 5;
    expect_fail(&q.m, MM_INVALID, "merge");
    img_init(&q);
    q.grid[1] = 2; /* 1x2x6 = 12 rows != 24 */
    q.pr.length = 3;
    expect_fail(&q.m, MM_INVALID, "rows");
    img_init(&q);
    q.pr.length = 5;
    expect_fail(&q.m, MM_INVALID, "placeholders[0] has length 5");
    img_init(&q);
    q.pr.offset = 8; /* [8, 14) passes the 12-token prompt */
    expect_fail(&q.m, MM_INVALID, "passes the prompt");
    img_init(&q);
    q.ids[4] = 11;
    expect_fail(&q.m, MM_INVALID, "input_ids[4] = 11 is not the image token");
    img_init(&q);
    q.ids[10] = IMG; /* an image token outside every run */
    expect_fail(&q.m, MM_INVALID, "input_ids[10]");
    img_init(&q);
    q.it.n_placeholders = 0;
    expect_fail(&q.m, MM_INVALID, "placeholder runs");
    img_init(&q);
    q.it.n_grid_thw = 2;
    expect_fail(&q.m, MM_INVALID, "grid_thw");
    img_init(&q);
    q.grid[0] = 2;
    expect_fail(&q.m, MM_INVALID, "grid t");
    img_init(&q);
    q.it.modality = MMGW__WORKER__V1__MODALITY__MODALITY_UNSPECIFIED;
    expect_fail(&q.m, MM_INVALID, "modality");
    img_init(&q);
    q.it.pixel_values = NULL;
    expect_fail(&q.m, MM_INVALID, "pixel_values is missing");
    img_init(&q);
    q.t.upload_id = "also"; /* two byte sources */
    expect_fail(&q.m, MM_INVALID, "exactly one");
    /* two items claiming the same positions */
    img_init(&q);
    q.its[1] = &q.it;
    q.m.n_mm_inputs = 2;
    expect_fail(&q.m, MM_INVALID, "already taken");
}

static void test_video(void)
{
    /* grid 2x2x4: 16 rows, two runs of 2 tokens, a timestamp token between them */
    uint32_t ids[10] = {5, VID, VID, 6, 7, VID, VID, 8, 9, 10};
    float px[16 * ROW] = {0};
    int64_t shape[2] = {16, ROW}, grid[3] = {2, 2, 4};
    Mmgw__Worker__V1__Tensor t = MMGW__WORKER__V1__TENSOR__INIT;
    t.dtype = MMGW__WORKER__V1__DTYPE__F32;
    t.n_shape = 2;
    t.shape = shape;
    t.data.data = (uint8_t *)px;
    t.data.len = sizeof(px);
    Mmgw__Worker__V1__PlaceholderRange a = MMGW__WORKER__V1__PLACEHOLDER_RANGE__INIT,
                                       b = MMGW__WORKER__V1__PLACEHOLDER_RANGE__INIT;
    a.offset = 5; /* given out of order: the decoder sorts runs */
    a.length = 2;
    b.offset = 1;
    b.length = 2;
    Mmgw__Worker__V1__PlaceholderRange *prs[2] = {&a, &b};
    Mmgw__Worker__V1__MultimodalItem it = MMGW__WORKER__V1__MULTIMODAL_ITEM__INIT, *its[1] = {&it};
    it.modality = MMGW__WORKER__V1__MODALITY__VIDEO;
    it.pixel_values = &t;
    it.n_grid_thw = 3;
    it.grid_thw = grid;
    it.n_placeholders = 2;
    it.placeholders = prs;
    Mmgw__Worker__V1__GenerateRequest m = MMGW__WORKER__V1__GENERATE_REQUEST__INIT;
    m.n_input_ids = 10;
    m.input_ids = ids;
    m.n_mm_inputs = 1;
    m.mm_inputs = its;
    struct wk_request *r = NULL;
    struct mm_err err;
    CHECK_EQ_INT(decode(&m, &r, &err), MM_OK);
    CHECK_EQ_INT(r->media[0].kind, 1);
    CHECK_EQ_INT(r->media[0].n_runs, 2);
    CHECK_EQ_INT(r->media[0].runs[0].offset, 1);
    CHECK_EQ_INT(r->media[0].runs[1].offset, 5);
    CHECK_EQ_INT(r->media[0].n_tokens, 4);
    wk_request_free(r);
    it.n_placeholders = 1; /* a video has one run per temporal group */
    expect_fail(&m, MM_INVALID, "expected 2");
    it.n_placeholders = 2;
    ids[1] = IMG; /* the image token where the video token belongs */
    expect_fail(&m, MM_INVALID, "video token");
}

static void test_upload_and_shm(void)
{
    struct img_req q;
    img_init(&q);
    struct mm_err err = {0};
    uint64_t got = 0;
    const uint8_t *bytes = (const uint8_t *)q.px;
    CHECK_EQ_INT(wk_uploads_append(g_up, "up1", sizeof(q.px), 0, bytes, 100, &got, &err), MM_OK);
    q.t.data.len = 0;
    q.t.data.data = NULL;
    q.t.upload_id = "up1";
    expect_fail(&q.m, MM_NOT_FOUND, "incomplete"); /* half an upload is not usable */
    CHECK_EQ_INT(wk_uploads_append(g_up, "up1", 0, 100, bytes + 100, sizeof(q.px) - 100, &got, &err), MM_OK);
    struct wk_request *r = NULL;
    CHECK_EQ_INT(decode(&q.m, &r, &err), MM_OK);
    CHECK(memcmp(r->media[0].pixels, q.px, sizeof(q.px)) == 0);
    wk_request_free(r);
    expect_fail(&q.m, MM_NOT_FOUND, "not staged"); /* taken by the first request */

    /* shared memory */
    char name[64];
    snprintf(name, sizeof(name), "/mmgw-test-%d", (int)getpid());
    int fd = shm_open(name, O_CREAT | O_RDWR | O_EXCL, 0600);
    CHECK(fd >= 0);
    size_t off = 18; /* after the key; any alignment */
    uint8_t key[WK_SHM_KEY_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    CHECK(ftruncate(fd, (off_t)(off + sizeof(q.px))) == 0);
    CHECK(pwrite(fd, key, sizeof key, 0) == (ssize_t)sizeof key);
    CHECK(pwrite(fd, q.px, sizeof(q.px), (off_t)off) == (ssize_t)sizeof(q.px));
    close(fd);
    Mmgw__Worker__V1__SharedMemoryRef shm = MMGW__WORKER__V1__SHARED_MEMORY_REF__INIT;
    shm.name = name;
    shm.offset = off;
    shm.length = sizeof(q.px);
    q.t.upload_id = "";
    q.t.shm = &shm;
    expect_fail(&q.m, MM_NOT_FOUND, "key"); /* the name alone (every user can list it) is not enough */
    shm.key.data = key;
    shm.key.len = sizeof key;
    CHECK_EQ_INT(decode(&q.m, &r, &err), MM_OK);
    CHECK(r && memcmp(r->media[0].pixels, q.px, sizeof(q.px)) == 0);
    wk_request_free(r);
    key[0] ^= 0x80;
    expect_fail(&q.m, MM_NOT_FOUND, "key");
    key[0] ^= 0x80;
    shm.length -= 4;
    expect_fail(&q.m, MM_INVALID, "bytes");
    shm.length = sizeof(q.px) + 100; /* the right size claimed, but past the object's end */
    q.shape[0] = 24;
    expect_fail(&q.m, MM_INVALID, NULL);
    shm.length = sizeof(q.px);
    shm_unlink(name);
    expect_fail(&q.m, MM_NOT_FOUND, "shm");
    shm.name = "no-slash";
    expect_fail(&q.m, MM_INVALID, "shm name");
}

int main(void)
{
    g_up = wk_uploads_create(1 << 20, 60000);
    test_text();
    test_text_errors();
    test_image();
    test_image_errors();
    test_video();
    test_upload_and_shm();
    wk_uploads_destroy(g_up);
    return test_done();
}
