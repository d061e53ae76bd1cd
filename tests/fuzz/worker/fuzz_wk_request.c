/* libFuzzer target: the worker's GenerateRequest validation (wk_request_decode) on arbitrary bytes unpacked
 * as a GenerateRequest, with the limits of a demo-sized worker, a staged upload and a shared-memory object
 * to name. A request it accepts must keep every promise wk_request.h makes (ids in the vocabulary, sampling
 * in range, media bytes readable and matching their grid, every placeholder token covered once); a refused
 * one must say why. Leaks show through LeakSanitizer. */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_wk_common.h"
#include "mm_dtype.h"
#include "wk_request_decode.h"
#include "wk_uploads.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void unlink_shm(void)
{
    shm_unlink(FZ_SHM_NAME);
}

/* Once per process: the shared-memory object requests may name (creation may fail in a sandbox; the
 * shm path is then refused as not found, which is fine too). */
static void make_shm(void)
{
    static int done;
    if (done) return;
    done = 1;
    int fd = shm_open(FZ_SHM_NAME, O_CREAT | O_RDWR, 0600);
    if (fd < 0) return;
    uint8_t page[FZ_SHM_BYTES];
    for (size_t i = 0; i < sizeof page; i++) page[i] = (uint8_t)(i * 7);
    memcpy(page, FZ_SHM_KEY, 16);
    if (ftruncate(fd, (off_t)sizeof page) != 0 || pwrite(fd, page, sizeof page, 0) != (ssize_t)sizeof page)
        abort();
    close(fd);
    atexit(unlink_shm);
}

static struct wk_uploads *make_uploads(void)
{
    struct wk_uploads *u = wk_uploads_create(FZ_UPLOAD_CAP, 60000);
    if (!u) abort();
    uint8_t px[FZ_UPLOAD_BYTES];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i + 1);
    struct mm_err err;
    if (wk_uploads_append(u, FZ_UPLOAD_ID, sizeof px, 0, px, sizeof px, NULL, &err) ||
        wk_uploads_append(u, FZ_UPLOAD_PART_ID, sizeof px, 0, px, sizeof px / 2, NULL, &err))
        abort();
    return u;
}

static void check_sampling(const struct wk_request *r)
{
    const struct wk_sampling_req *s = &r->sp;
    if (s->n < 1 || s->n > WK_MAX_CHOICES) abort();
    if (!isfinite(s->temperature) || s->temperature < 0.0f) abort();
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f) || !(s->min_p >= 0.0f && s->min_p <= 1.0f)) abort();
    if (s->top_k < 0 || s->top_logprobs < 0 || s->top_logprobs > WK_MAX_TOP_LOGPROBS) abort();
    if (s->max_new_tokens < 0 || r->n_ids + s->max_new_tokens > FZ_MAX_CONTEXT) abort();
    if (s->n_stop_ids < 0 || s->n_stop_ids > WK_MAX_STOP_IDS || (s->n_stop_ids && !s->stop_ids)) abort();
    for (int32_t i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] < 0 || s->stop_ids[i] >= FZ_VOCAB) abort();
}

static void check_media(const struct wk_request *r)
{
    if ((r->n_media > 0) != (r->media_hash != 0) || (r->n_media && !r->media)) abort();
    uint8_t *owner = calloc((size_t)r->n_ids, 1); /* 1 + the item that covers each position */
    if (!owner) abort();
    for (int32_t k = 0; k < r->n_media; k++) {
        const struct wk_media_item *m = &r->media[k];
        if (m->kind != 0 && m->kind != 1) abort();
        size_t es = mm_dtype_size(m->dtype);
        if (es == 0 || !m->pixels || m->row_len <= 0 || m->grid_t <= 0 || m->grid_h <= 0 || m->grid_w <= 0)
            abort();
        if (m->kind == 0 && m->grid_t != 1) abort();
        if (m->n_rows != m->grid_t * m->grid_h * m->grid_w) abort();
        /* every byte the vision tower will read is there: touch both ends */
        uint64_t nbytes = (uint64_t)m->n_rows * (uint64_t)m->row_len * es;
        volatile uint8_t first = ((const uint8_t *)m->pixels)[0],
                         last = ((const uint8_t *)m->pixels)[nbytes - 1];
        (void)first;
        (void)last;
        int32_t tok = m->kind ? FZ_VIDEO_TOKEN : FZ_IMAGE_TOKEN;
        int64_t sum = 0, prev_end = 0;
        if (m->n_runs != (m->kind ? m->grid_t : 1) || !m->runs) abort();
        for (int32_t j = 0; j < m->n_runs; j++) {
            const struct wk_placeholder_run *run = &m->runs[j];
            if (run->offset < prev_end || run->length <= 0 || run->offset + run->length > r->n_ids) abort();
            if (run->length * (m->kind ? m->grid_t : 1) * FZ_MERGE != m->grid_t * m->grid_h * m->grid_w)
                abort();
            for (int64_t p = run->offset; p < run->offset + run->length; p++) {
                if (r->ids[p] != tok || owner[p]) abort();
                owner[p] = (uint8_t)(1 + (k & 0x7f));
            }
            prev_end = run->offset + run->length;
            sum += run->length;
        }
        if (sum != m->n_tokens) abort();
    }
    /* no placeholder token reaches the model uncovered */
    for (int64_t p = 0; p < r->n_ids; p++)
        if ((r->ids[p] == FZ_IMAGE_TOKEN || r->ids[p] == FZ_VIDEO_TOKEN) && !owner[p]) abort();
    free(owner);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    make_shm();
    Mmgw__Worker__V1__GenerateRequest *msg = mmgw__worker__v1__generate_request__unpack(NULL, size, data);
    if (!msg) return 0; /* the RPC answers "does not parse" before any validation */
    size_t n_ids = msg->n_input_ids;
    struct wk_uploads *up = make_uploads();
    uint64_t staged = wk_uploads_bytes(up);
    struct wk_decode_limits lim = {.vocab_size = FZ_VOCAB,
                                   .max_context = FZ_MAX_CONTEXT,
                                   .image_token_id = FZ_IMAGE_TOKEN,
                                   .video_token_id = FZ_VIDEO_TOKEN,
                                   .merge_factor = FZ_MERGE,
                                   .max_row_len = 0,
                                   .uploads = up,
                                   .allow_shm = 1};
    struct wk_request *r = NULL;
    struct mm_err err = {0};
    int32_t rc = wk_request_decode(msg, &lim, "wk-fuzz-1", &r, &err); /* takes msg */
    if (rc == MM_OK) {
        if (!r || !r->id || !r->id[0] || strlen(r->id) > 256 || r->n_ids != (int64_t)n_ids || !r->ids)
            abort();
        for (int64_t i = 0; i < r->n_ids; i++)
            if (r->ids[i] < 0 || r->ids[i] >= FZ_VOCAB) abort();
        check_sampling(r);
        check_media(r);
        wk_request_release_media(r);
        wk_request_release_media(r); /* idempotent */
        wk_request_free(r);
    } else if (r || rc >= 0 || err.code != rc || err.msg[0] == '\0') {
        abort();
    }
    /* at most the complete upload was taken (by an item naming it, even if a later check refused) */
    uint64_t left = wk_uploads_bytes(up);
    if (left != staged && left != staged - FZ_UPLOAD_BYTES) abort();
    wk_uploads_destroy(up);
    return 0;
}
