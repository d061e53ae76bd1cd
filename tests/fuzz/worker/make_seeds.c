/* Writes the seed corpora of the worker fuzz targets: serialized GenerateRequests (valid ones: text only,
 * with sampling, images and a video by data, upload and shared memory; broken ones: one per check of
 * wk_request_decode) into DIR/request, and TensorChunk record lists for fuzz_wk_upload into DIR/upload.
 * Run once; the output is committed:
 *   cmake --build build --target fuzz_wk_make_seeds && build/tests/fuzz_wk_make_seeds
 * tests/fuzz/worker/corpus */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_wk_common.h"
#include "worker.pb-c.h"
#include "wk_request.h"
#include "wk_uploads.h"

static char g_dir[4096];

static void save(const char *sub, const char *name, const uint8_t *buf, size_t n)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s/%s", g_dir, sub, name);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(buf, 1, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static void save_req(const char *name, const Mmgw__Worker__V1__GenerateRequest *m)
{
    size_t n = mmgw__worker__v1__generate_request__get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    mmgw__worker__v1__generate_request__pack(m, buf);
    save("request", name, buf, n);
    free(buf);
}

/* One media item with its tensor and placeholder runs, wired into a request. */
struct item {
    Mmgw__Worker__V1__MultimodalItem it;
    Mmgw__Worker__V1__Tensor t;
    Mmgw__Worker__V1__SharedMemoryRef shm;
    Mmgw__Worker__V1__PlaceholderRange pr[4], *prp[4];
    int64_t grid[3], shape[2];
    uint8_t px[16 * FZ_ROW * 4];
};

/* grid t x h x w of F32 rows of FZ_ROW values; runs start at the given offsets */
static void item_init(struct item *q, int video, int64_t t, int64_t h, int64_t w, const uint32_t *offsets)
{
    memset(q, 0, sizeof *q);
    mmgw__worker__v1__multimodal_item__init(&q->it);
    mmgw__worker__v1__tensor__init(&q->t);
    mmgw__worker__v1__shared_memory_ref__init(&q->shm);
    q->it.modality = video ? MMGW__WORKER__V1__MODALITY__VIDEO : MMGW__WORKER__V1__MODALITY__IMAGE;
    q->grid[0] = t;
    q->grid[1] = h;
    q->grid[2] = w;
    q->it.n_grid_thw = 3;
    q->it.grid_thw = q->grid;
    q->shape[0] = t * h * w;
    q->shape[1] = FZ_ROW;
    q->t.dtype = MMGW__WORKER__V1__DTYPE__F32;
    q->t.n_shape = 2;
    q->t.shape = q->shape;
    for (size_t i = 0; i < sizeof q->px; i++) q->px[i] = (uint8_t)(i * 3);
    q->t.data.data = q->px;
    q->t.data.len = (size_t)(q->shape[0] * FZ_ROW * 4);
    q->it.pixel_values = &q->t;
    int64_t runs = video ? t : 1, len = video ? h * w / FZ_MERGE : t * h * w / FZ_MERGE;
    for (int64_t j = 0; j < runs; j++) {
        mmgw__worker__v1__placeholder_range__init(&q->pr[j]);
        q->pr[j].offset = offsets[j];
        q->pr[j].length = (uint32_t)len;
        q->prp[j] = &q->pr[j];
    }
    q->it.n_placeholders = (size_t)runs;
    q->it.placeholders = q->prp;
}

static void request_seeds(void)
{
    uint32_t text[5] = {1, 2, 3, 4, 5};
    Mmgw__Worker__V1__GenerateRequest m = MMGW__WORKER__V1__GENERATE_REQUEST__INIT;
    m.request_id = "req-1";
    m.n_input_ids = 5;
    m.input_ids = text;
    save_req("valid_text.pb", &m);

    Mmgw__Worker__V1__SamplingParams sp = MMGW__WORKER__V1__SAMPLING_PARAMS__INIT;
    uint32_t stops[2] = {2, 3};
    sp.has_max_new_tokens_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_MAX_NEW_TOKENS_MAX_NEW_TOKENS;
    sp.max_new_tokens = 16;
    sp.has_temperature_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_TEMPERATURE_TEMPERATURE;
    sp.temperature = 0.7f;
    sp.has_top_p_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_TOP_P_TOP_P;
    sp.top_p = 0.9f;
    sp.has_top_k_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_TOP_K_TOP_K;
    sp.top_k = 40;
    sp.has_min_p_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_MIN_P_MIN_P;
    sp.min_p = 0.05f;
    sp.has_seed_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_SEED_SEED;
    sp.seed = 42;
    sp.n_stop_token_ids = 2;
    sp.stop_token_ids = stops;
    sp.has_n_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_N_N;
    sp.n = 2;
    sp.has_logprobs_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_LOGPROBS_LOGPROBS;
    sp.logprobs = 5;
    sp.ignore_eos = 1;
    sp.has_min_new_tokens_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_MIN_NEW_TOKENS_MIN_NEW_TOKENS;
    sp.min_new_tokens = 1;
    m.sampling = &sp;
    m.return_logprobs = 1;
    m.merge_complete = 1;
    save_req("valid_sampling.pb", &m);

    /* one broken sampling value per seed, the rest as above */
    sp.temperature = -1.0f;
    save_req("bad_temperature.pb", &m);
    sp.temperature = 0.7f;
    sp.top_p = 0.0f;
    save_req("bad_top_p.pb", &m);
    sp.top_p = 0.9f;
    sp.min_p = 1.5f;
    save_req("bad_min_p.pb", &m);
    sp.min_p = 0.05f;
    sp.n = WK_MAX_CHOICES + 1;
    save_req("bad_n.pb", &m);
    sp.n = 2;
    sp.logprobs = 21;
    save_req("bad_logprobs.pb", &m);
    sp.logprobs = 5;
    uint32_t many[65];
    for (int i = 0; i < 65; i++) many[i] = 7;
    sp.n_stop_token_ids = 65;
    sp.stop_token_ids = many;
    save_req("bad_stop_count.pb", &m);
    stops[1] = FZ_VOCAB;
    sp.n_stop_token_ids = 2;
    sp.stop_token_ids = stops;
    save_req("bad_stop_id.pb", &m);
    m.sampling = NULL;

    char longid[300];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    m.request_id = longid;
    save_req("bad_request_id.pb", &m);
    m.request_id = "req-2";
    text[2] = FZ_VOCAB;
    save_req("bad_token.pb", &m);
    text[2] = FZ_IMAGE_TOKEN;
    save_req("bad_uncovered_image_token.pb", &m);
    m.n_input_ids = 0;
    save_req("bad_empty.pb", &m);
    /* the prompt at the context's edge: one id short of it (max_new_tokens clamped to 1), then all of it */
    uint32_t longp[FZ_MAX_CONTEXT];
    for (int i = 0; i < FZ_MAX_CONTEXT; i++) longp[i] = 1 + (uint32_t)i % 100;
    sp.n_stop_token_ids = 0;
    sp.max_new_tokens = 100;
    m.sampling = &sp;
    m.input_ids = longp;
    m.n_input_ids = FZ_MAX_CONTEXT - 1;
    save_req("valid_context_edge.pb", &m);
    m.n_input_ids = FZ_MAX_CONTEXT;
    save_req("bad_context.pb", &m);
    m.sampling = NULL;
    m.input_ids = text;

    /* images and a video with their bytes inline */
    uint32_t ids[8] = {1, FZ_IMAGE_TOKEN, 2, FZ_IMAGE_TOKEN, 3, FZ_VIDEO_TOKEN, FZ_VIDEO_TOKEN, 4};
    struct item a, b;
    Mmgw__Worker__V1__MultimodalItem *items[2] = {&a.it, &b.it};
    m.input_ids = ids;
    m.n_input_ids = 3;
    m.mm_inputs = items;
    m.n_mm_inputs = 1;
    item_init(&a, 0, 1, 2, 2, (uint32_t[]){1});
    save_req("valid_image.pb", &m);
    a.t.dtype = MMGW__WORKER__V1__DTYPE__BF16;
    a.t.data.len /= 2;
    save_req("valid_image_bf16.pb", &m);
    a.t.dtype = MMGW__WORKER__V1__DTYPE__F16;
    save_req("valid_image_f16.pb", &m);
    item_init(&a, 0, 1, 2, 2, (uint32_t[]){1});
    a.t.data.len -= 4;
    save_req("bad_image_bytes.pb", &m);
    a.t.data.len += 4;
    a.t.dtype = MMGW__WORKER__V1__DTYPE__DTYPE_UNSPECIFIED;
    save_req("bad_image_dtype.pb", &m);
    a.t.dtype = MMGW__WORKER__V1__DTYPE__F32;
    a.pr[0].offset = 0;
    save_req("bad_image_placeholder.pb", &m);
    a.pr[0].offset = 1;
    a.grid[1] = 3;
    save_req("bad_image_grid.pb", &m);
    a.grid[1] = 2;
    a.it.modality = MMGW__WORKER__V1__MODALITY__MODALITY_UNSPECIFIED;
    save_req("bad_modality.pb", &m);
    a.it.modality = MMGW__WORKER__V1__MODALITY__IMAGE;
    a.shape[0] = -4;
    save_req("bad_shape.pb", &m);
    a.shape[0] = 4;

    /* two images, then both on the same placeholder */
    m.n_input_ids = 5;
    m.n_mm_inputs = 2;
    item_init(&b, 0, 1, 2, 2, (uint32_t[]){3});
    save_req("valid_two_images.pb", &m);
    b.pr[0].offset = 1;
    save_req("bad_overlap.pb", &m);

    /* a video: two temporal groups, one run each, after the first image */
    ids[3] = 9;
    m.n_input_ids = 8;
    m.n_mm_inputs = 2;
    item_init(&b, 1, 2, 2, 2, (uint32_t[]){5, 6});
    items[0] = &b.it;
    items[1] = &a.it;
    save_req("valid_video_image.pb", &m);
    b.it.n_placeholders = 1;
    save_req("bad_video_runs.pb", &m);

    /* bytes by upload and by shared memory */
    items[0] = &a.it;
    m.n_input_ids = 3;
    m.n_mm_inputs = 1;
    a.t.data.len = 0;
    a.t.upload_id = FZ_UPLOAD_ID;
    save_req("valid_upload.pb", &m);
    a.t.upload_id = FZ_UPLOAD_PART_ID;
    save_req("bad_upload_partial.pb", &m);
    a.t.upload_id = "never-sent";
    save_req("bad_upload_unknown.pb", &m);
    a.t.upload_id = "";
    a.shm.name = FZ_SHM_NAME;
    a.shm.offset = 100;
    a.shm.length = FZ_UPLOAD_BYTES;
    a.shm.key.data = (uint8_t *)FZ_SHM_KEY;
    a.shm.key.len = 16;
    a.t.shm = &a.shm;
    save_req("valid_shm.pb", &m);
    a.shm.key.data = (uint8_t *)"fuzz-wk-shm-key?"; /* the name without the key: NOT_FOUND */
    save_req("bad_shm_key.pb", &m);
    a.shm.key.data = (uint8_t *)FZ_SHM_KEY;
    a.shm.offset = FZ_SHM_BYTES - 8;
    save_req("bad_shm_range.pb", &m);
    a.shm.offset = UINT64_MAX - 8;
    save_req("bad_shm_offset_wrap.pb", &m);
    a.shm.offset = 0;
    a.shm.name = "mmgw-fuzz-wk";
    save_req("bad_shm_name.pb", &m);
    a.shm.name = FZ_SHM_NAME;
    a.t.upload_id = FZ_UPLOAD_ID;
    save_req("bad_two_sources.pb", &m);

    save("request", "bad_wire.pb", (const uint8_t *)"\x12\xff\xff\xff\xff\x0f", 6);
}

/* A record list for fuzz_wk_upload: [op][len lo][len hi][bytes]. */
struct recs {
    uint8_t buf[2048];
    size_t n;
};

static void rec(struct recs *r, uint8_t op, const void *p, size_t n)
{
    if (r->n + 3 + n > sizeof r->buf) exit(1);
    r->buf[r->n++] = op;
    r->buf[r->n++] = (uint8_t)(n & 0xff);
    r->buf[r->n++] = (uint8_t)(n >> 8);
    memcpy(r->buf + r->n, p, n);
    r->n += n;
}

static void chunk(struct recs *r, const char *id, uint64_t total, uint64_t off, const char *data)
{
    Mmgw__Worker__V1__TensorChunk c = MMGW__WORKER__V1__TENSOR_CHUNK__INIT;
    c.upload_id = (char *)id;
    c.total_bytes = total;
    c.offset = off;
    c.data.data = (uint8_t *)data;
    c.data.len = data ? strlen(data) : 0;
    uint8_t b[1024];
    size_t n = mmgw__worker__v1__tensor_chunk__pack(&c, b);
    rec(r, 0, b, n);
}

static void upload_seeds(void)
{
    struct recs r = {.n = 0};
    chunk(&r, "u1", 10, 0, "abcd");
    rec(&r, 6, "u1", 2);
    chunk(&r, "u1", 0, 4, "efghij");
    rec(&r, 6, "u1", 2);
    rec(&r, 4, "u1", 2);
    rec(&r, 4, "u1", 2);
    save("upload", "valid_two_chunks.rec", r.buf, r.n);

    r.n = 0;
    chunk(&r, "a", 4, 0, "ab");
    chunk(&r, "b", 4, 0, "wxyz");
    chunk(&r, "a", 4, 4, "cd");   /* out of order */
    chunk(&r, "a", 5, 2, "cd");   /* total changed */
    chunk(&r, "a", 0, 2, "cde");  /* past the total */
    chunk(&r, "a", 4, 0, "ab");   /* started twice */
    chunk(&r, "zz", 0, 3, "abc"); /* never started */
    rec(&r, 4, "a", 1);           /* incomplete */
    rec(&r, 5, "a", 1);
    rec(&r, 4, "b", 1);
    save("upload", "bad_order.rec", r.buf, r.n);

    r.n = 0;
    chunk(&r, "big", FZ_UPLOAD_CAP + 1ull, 0, "x");
    chunk(&r, "half", FZ_UPLOAD_CAP / 2, 0, "x");
    chunk(&r, "half2", FZ_UPLOAD_CAP / 2 + 1, 0, "x"); /* over the cap together */
    chunk(&r, "", 4, 0, "x");
    chunk(&r, "zero", 0, 0, "x");
    char longid[WK_UPLOAD_ID_MAX + 2];
    memset(longid, 'i', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    chunk(&r, longid, 4, 0, "x");
    save("upload", "bad_cap.rec", r.buf, r.n);

    r.n = 0;
    chunk(&r, "over", 2, 0, "abcdef"); /* a first chunk longer than its total */
    rec(&r, 6, "over", 4);
    chunk(&r, "over", 2, 0, "ab");
    rec(&r, 4, "over", 4);
    save("upload", "bad_first_chunk_too_long.rec", r.buf, r.n);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
    char sub[8192];
    snprintf(sub, sizeof sub, "%s/request", g_dir);
    mkdir(sub, 0755);
    snprintf(sub, sizeof sub, "%s/upload", g_dir);
    mkdir(sub, 0755);
    request_seeds();
    upload_seeds();
    return 0;
}
