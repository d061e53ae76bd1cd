/* GenerateRequest validation and conversion (see wk_request_decode.h). */
#include "wk_request_decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mm_dtype.h"
#include "wk_shm.h"
#include "wk_uploads.h"

#define REQUEST_ID_MAX 256

/* The unpacked message stays alive while any item's pixels point into it. Only the thread that owns the
 * request touches the count, so it needs no atomics. */
struct msg_holder {
    int32_t refs;
    Mmgw__Worker__V1__GenerateRequest *msg;
};

static void holder_release(void *arg)
{
    struct msg_holder *h = arg;
    if (--h->refs > 0) return;
    mmgw__worker__v1__generate_request__free_unpacked(h->msg, NULL);
    free(h);
}

uint64_t wk_hash_bytes(const void *p, uint64_t n, uint64_t seed)
{
    /* word-at-a-time multiply-xorshift: fast enough to hash gigabytes of pixels next to a vision tower */
    const uint8_t *b = p;
    uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ull);
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h ^= w * 0xbf58476d1ce4e5b9ull;
        h = (h << 31 | h >> 33) * 0x94d049bb133111ebull;
    }
    uint64_t w = 0;
    memcpy(&w, b + i, (size_t)(n - i));
    h ^= w * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 32;
    return h;
}

static uint64_t mix64(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

static int32_t decode_sampling(const Mmgw__Worker__V1__SamplingParams *s, const struct wk_decode_limits *lim,
                               int64_t n_ids, struct wk_sampling_req *sp, struct mm_err *err)
{
    sp->temperature = 1.0f;
    sp->top_p = 1.0f;
    sp->top_k = 0;
    sp->min_p = 0.0f;
    sp->n = 1;
    int64_t room = lim->max_context - n_ids; /* tokens that still fit in the context */
    sp->max_new_tokens = room;
    if (!s) return MM_OK;
    if (s->has_max_new_tokens_case) {
        sp->has_max_new_tokens = 1;
        /* clamped, not refused: the context bound is reported as finish_reason "length" */
        sp->max_new_tokens = (int64_t)s->max_new_tokens < room ? (int64_t)s->max_new_tokens : room;
    }
    if (s->has_temperature_case) {
        if (!isfinite(s->temperature) || s->temperature < 0.0f)
            return mm_err_set(err, MM_INVALID, "sampling.temperature %g must be >= 0",
                              (double)s->temperature);
        sp->temperature = s->temperature;
    }
    if (s->has_top_p_case) {
        if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
            return mm_err_set(err, MM_INVALID, "sampling.top_p %g must be in (0, 1]", (double)s->top_p);
        sp->top_p = s->top_p;
    }
    if (s->has_top_k_case) sp->top_k = s->top_k > 0 ? s->top_k : 0; /* 0 and -1 both mean "off" */
    if (s->has_min_p_case) {
        if (!(s->min_p >= 0.0f && s->min_p <= 1.0f))
            return mm_err_set(err, MM_INVALID, "sampling.min_p %g must be in [0, 1]", (double)s->min_p);
        sp->min_p = s->min_p;
    }
    if (s->has_seed_case) {
        sp->has_seed = 1;
        sp->seed = s->seed;
    }
    if (s->has_n_case) {
        if (s->n < 1 || s->n > WK_MAX_CHOICES)
            return mm_err_set(err, MM_INVALID, "sampling.n %u must be in [1, %d]", s->n, WK_MAX_CHOICES);
        sp->n = (int32_t)s->n;
    }
    if (s->has_logprobs_case) {
        if (s->logprobs > WK_MAX_TOP_LOGPROBS)
            return mm_err_set(err, MM_INVALID, "sampling.logprobs %u must be at most %d", s->logprobs,
                              WK_MAX_TOP_LOGPROBS);
        sp->return_logprobs = 1;
        sp->top_logprobs = (int32_t)s->logprobs;
    }
    if (s->n_stop_token_ids > WK_MAX_STOP_IDS)
        return mm_err_set(err, MM_INVALID, "sampling.stop_token_ids has %zu ids, at most %d allowed",
                          s->n_stop_token_ids, WK_MAX_STOP_IDS);
    if (s->n_stop_token_ids) {
        sp->stop_ids = malloc(s->n_stop_token_ids * sizeof(int32_t));
        if (!sp->stop_ids) return mm_err_set(err, MM_NOMEM, "out of memory");
        for (size_t i = 0; i < s->n_stop_token_ids; i++) {
            if (s->stop_token_ids[i] >= (uint32_t)lim->vocab_size)
                return mm_err_set(err, MM_INVALID,
                                  "sampling.stop_token_ids[%zu] = %u is outside the vocabulary (%d)", i,
                                  s->stop_token_ids[i], lim->vocab_size);
            sp->stop_ids[i] = (int32_t)s->stop_token_ids[i];
        }
        sp->n_stop_ids = (int32_t)s->n_stop_token_ids;
    }
    sp->ignore_eos = s->ignore_eos ? 1 : 0;
    if (s->has_min_new_tokens_case) sp->min_new_tokens = s->min_new_tokens;
    return MM_OK;
}

static int32_t dtype_from_proto(int32_t d)
{
    switch (d) {
    case MMGW__WORKER__V1__DTYPE__F32:
        return MM_DT_F32;
    case MMGW__WORKER__V1__DTYPE__BF16:
        return MM_DT_BF16;
    case MMGW__WORKER__V1__DTYPE__F16:
        return MM_DT_F16;
    default:
        return MM_DT_INVALID;
    }
}

/* Find the bytes of item k's tensor and check them against its shape and dtype. */
static int32_t decode_tensor(const Mmgw__Worker__V1__Tensor *t, size_t k, const struct wk_decode_limits *lim,
                             struct msg_holder *holder, struct wk_media_item *m, struct mm_err *err)
{
    if (!t) return mm_err_set(err, MM_INVALID, "mm_inputs[%zu].pixel_values is missing", k);
    m->dtype = dtype_from_proto(t->dtype);
    if (m->dtype == MM_DT_INVALID)
        return mm_err_set(err, MM_INVALID, "mm_inputs[%zu].pixel_values.dtype %d is not F32, BF16 or F16", k,
                          (int)t->dtype);
    if (t->n_shape != 2)
        return mm_err_set(err, MM_INVALID,
                          "mm_inputs[%zu].pixel_values.shape has %zu dims, expected 2 [patches, row]", k,
                          t->n_shape);
    if (t->shape[0] <= 0 || t->shape[1] <= 0)
        return mm_err_set(err, MM_INVALID, "mm_inputs[%zu].pixel_values.shape [%lld, %lld] must be positive",
                          k, (long long)t->shape[0], (long long)t->shape[1]);
    m->n_rows = t->shape[0];
    m->row_len = t->shape[1];
    if (lim->max_row_len && m->row_len != lim->max_row_len)
        return mm_err_set(err, MM_INVALID,
                          "mm_inputs[%zu].pixel_values rows have %lld values, the model takes %lld", k,
                          (long long)m->row_len, (long long)lim->max_row_len);
    uint64_t nbytes;
    if (__builtin_mul_overflow((uint64_t)m->n_rows, (uint64_t)m->row_len, &nbytes) ||
        __builtin_mul_overflow(nbytes, (uint64_t)mm_dtype_size(m->dtype), &nbytes))
        return mm_err_set(err, MM_INVALID, "mm_inputs[%zu].pixel_values.shape is too large", k);
    int has_data = t->data.len > 0, has_up = t->upload_id && t->upload_id[0], has_shm = t->shm != NULL;
    if (has_data + has_up + has_shm != 1)
        return mm_err_set(err, MM_INVALID,
                          "mm_inputs[%zu].pixel_values needs exactly one of data, upload_id and shm (got %d)",
                          k, has_data + has_up + has_shm);
    uint64_t got;
    if (has_data) {
        got = t->data.len;
        if (got == nbytes) {
            m->pixels = t->data.data;
            holder->refs++;
            m->release = holder_release;
            m->release_arg = holder;
        }
    } else if (has_up) {
        if (!lim->uploads) return mm_err_set(err, MM_INVALID, "mm_inputs[%zu]: uploads are not enabled", k);
        struct wk_upload *up;
        int32_t rc = wk_uploads_take(lim->uploads, t->upload_id, &up, err);
        if (rc) return mm_err_prefix(err, "mm_inputs[%zu].pixel_values", k);
        got = wk_upload_size(up);
        m->pixels = wk_upload_data(up);
        m->release = wk_upload_free;
        m->release_arg = up;
    } else {
        if (!lim->allow_shm)
            return mm_err_set(err, MM_INVALID,
                              "mm_inputs[%zu]: shared memory is disabled, or the caller is not on this host",
                              k);
        got = t->shm->length;
        if (got == nbytes) {
            void *h;
            int32_t rc = wk_shm_map(t->shm->name, t->shm->key.data, t->shm->key.len, t->shm->offset,
                                    t->shm->length, &m->pixels, &h, err);
            if (rc) return mm_err_prefix(err, "mm_inputs[%zu].pixel_values", k);
            m->release = wk_shm_unmap;
            m->release_arg = h;
        }
    }
    if (got != nbytes)
        return mm_err_set(err, MM_INVALID,
                          "mm_inputs[%zu].pixel_values has %llu bytes, shape [%lld, %lld] %s needs %llu", k,
                          (unsigned long long)got, (long long)m->n_rows, (long long)m->row_len,
                          mm_dtype_name(m->dtype), (unsigned long long)nbytes);
    return MM_OK;
}

static int cmp_run(const void *a, const void *b)
{
    const struct wk_placeholder_run *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int32_t decode_item(const Mmgw__Worker__V1__MultimodalItem *it, size_t k, const struct wk_request *r,
                           const struct wk_decode_limits *lim, struct msg_holder *holder, uint8_t *covered,
                           struct wk_media_item *m, struct mm_err *err)
{
    if (it->modality != MMGW__WORKER__V1__MODALITY__IMAGE &&
        it->modality != MMGW__WORKER__V1__MODALITY__VIDEO)
        return mm_err_set(err, MM_INVALID, "mm_inputs[%zu].modality %d is not IMAGE or VIDEO", k,
                          (int)it->modality);
    m->kind = it->modality == MMGW__WORKER__V1__MODALITY__IMAGE ? 0 : 1;
    const char *what = m->kind ? "video" : "image";
    if (it->n_grid_thw != 3)
        return mm_err_set(err, MM_INVALID, "mm_inputs[%zu].grid_thw has %zu values, expected 3 (t, h, w)", k,
                          it->n_grid_thw);
    for (int i = 0; i < 3; i++)
        if (it->grid_thw[i] <= 0 || it->grid_thw[i] > (1 << 20))
            return mm_err_set(err, MM_INVALID, "mm_inputs[%zu].grid_thw[%d] = %lld is out of range", k, i,
                              (long long)it->grid_thw[i]);
    m->grid_t = it->grid_thw[0];
    m->grid_h = it->grid_thw[1];
    m->grid_w = it->grid_thw[2];
    if (lim->merge_factor <= 0)
        return mm_err_set(err, MM_INVALID, "mm_inputs[%zu]: the model has no vision tower", k);
    int64_t hw = m->grid_h * m->grid_w, per_group = hw / lim->merge_factor;
    if (hw % lim->merge_factor)
        return mm_err_set(err, MM_INVALID,
                          "mm_inputs[%zu].grid_thw h*w = %lld is not a multiple of the merge (%d)", k,
                          (long long)hw, lim->merge_factor);
    if (m->kind == 0 && m->grid_t != 1)
        return mm_err_set(err, MM_INVALID, "mm_inputs[%zu]: an image has grid t = 1, got %lld", k,
                          (long long)m->grid_t);
    int32_t rc = decode_tensor(it->pixel_values, k, lim, holder, m, err);
    if (rc) return rc;
    if (m->n_rows != m->grid_t * hw)
        return mm_err_set(err, MM_INVALID,
                          "mm_inputs[%zu].pixel_values has %lld rows, grid %lldx%lldx%lld has %lld", k,
                          (long long)m->n_rows, (long long)m->grid_t, (long long)m->grid_h,
                          (long long)m->grid_w, (long long)(m->grid_t * hw));
    m->content_hash = it->content_hash;
    if (!m->content_hash) {
        uint64_t nbytes = (uint64_t)m->n_rows * (uint64_t)m->row_len * mm_dtype_size(m->dtype);
        m->content_hash = wk_hash_bytes(m->pixels, nbytes, (uint64_t)m->dtype);
    }

    /* placeholders: an image has one run; a video one per temporal group, each h*w/merge long */
    int64_t want_runs = m->kind ? m->grid_t : 1;
    if ((int64_t)it->n_placeholders != want_runs)
        return mm_err_set(err, MM_INVALID,
                          "mm_inputs[%zu] (%s, grid t %lld) has %zu placeholder runs, expected %lld", k, what,
                          (long long)m->grid_t, it->n_placeholders, (long long)want_runs);
    m->runs = calloc((size_t)want_runs, sizeof(*m->runs));
    if (!m->runs) return mm_err_set(err, MM_NOMEM, "out of memory");
    m->n_runs = (int32_t)want_runs;
    int32_t tok = m->kind ? lim->video_token_id : lim->image_token_id;
    for (int64_t j = 0; j < want_runs; j++) {
        const Mmgw__Worker__V1__PlaceholderRange *pr = it->placeholders[j];
        int64_t off = pr ? pr->offset : 0, len = pr ? pr->length : 0;
        int64_t want = m->kind ? per_group : m->grid_t * per_group;
        if (len != want)
            return mm_err_set(
                err, MM_INVALID,
                "mm_inputs[%zu].placeholders[%lld] has length %lld, the grid %lldx%lldx%lld needs %lld (one "
                "token per %d patches)",
                k, (long long)j, (long long)len, (long long)m->grid_t, (long long)m->grid_h,
                (long long)m->grid_w, (long long)want, lim->merge_factor);
        if (off + len > r->n_ids)
            return mm_err_set(err, MM_INVALID,
                              "mm_inputs[%zu].placeholders[%lld] [%lld, +%lld) passes the prompt (%lld)", k,
                              (long long)j, (long long)off, (long long)len, (long long)r->n_ids);
        for (int64_t p = off; p < off + len; p++) {
            if (r->ids[p] != tok)
                return mm_err_set(
                    err, MM_INVALID,
                    "mm_inputs[%zu].placeholders[%lld]: input_ids[%lld] = %d is not the %s token %d", k,
                    (long long)j, (long long)p, r->ids[p], what, tok);
            if (covered[p])
                return mm_err_set(err, MM_INVALID,
                                  "mm_inputs[%zu].placeholders[%lld]: position %lld is already taken", k,
                                  (long long)j, (long long)p);
            covered[p] = 1;
        }
        m->runs[j].offset = off;
        m->runs[j].length = len;
        m->n_tokens += len;
    }
    qsort(m->runs, (size_t)m->n_runs, sizeof(*m->runs), cmp_run);
    return MM_OK;
}

static int32_t decode_media(Mmgw__Worker__V1__GenerateRequest *msg, const struct wk_decode_limits *lim,
                            struct msg_holder *holder, struct wk_request *r, struct mm_err *err)
{
    uint8_t *covered = calloc((size_t)r->n_ids, 1);
    if (!covered) return mm_err_set(err, MM_NOMEM, "out of memory");
    int32_t rc = MM_OK;
    if (msg->n_mm_inputs) {
        if (msg->n_mm_inputs > 4096) {
            rc = mm_err_set(err, MM_INVALID, "%zu mm_inputs, at most 4096 allowed", msg->n_mm_inputs);
            goto out;
        }
        r->media = calloc(msg->n_mm_inputs, sizeof(*r->media));
        if (!r->media) {
            rc = mm_err_set(err, MM_NOMEM, "out of memory");
            goto out;
        }
    }
    uint64_t mh = 0x6d6d67772d6d6564ull;
    for (size_t k = 0; k < msg->n_mm_inputs; k++) {
        r->n_media = (int32_t)k + 1; /* so that a failure releases what this item took */
        rc = decode_item(msg->mm_inputs[k], k, r, lim, holder, covered, &r->media[k], err);
        if (rc) goto out;
        const struct wk_media_item *m = &r->media[k];
        mh = mix64(mh, m->content_hash);
        mh = mix64(mh, (uint64_t)m->kind);
        mh = mix64(mh, (uint64_t)m->runs[0].offset);
    }
    r->media_hash = r->n_media ? (mh ? mh : 1) : 0;
    /* a placeholder token that no item fills would reach the model as a plain token: refuse it */
    for (int64_t p = 0; p < r->n_ids; p++) {
        if (covered[p]) continue;
        if (r->ids[p] == lim->image_token_id || r->ids[p] == lim->video_token_id) {
            rc = mm_err_set(err, MM_INVALID,
                            "input_ids[%lld] = %d is the %s placeholder token but no mm_inputs run covers it",
                            (long long)p, r->ids[p], r->ids[p] == lim->image_token_id ? "image" : "video");
            goto out;
        }
    }
out:
    free(covered);
    return rc;
}

int32_t wk_request_decode(Mmgw__Worker__V1__GenerateRequest *msg, const struct wk_decode_limits *lim,
                          const char *fallback_id, struct wk_request **out, struct mm_err *err)
{
    *out = NULL;
    struct wk_request *r = calloc(1, sizeof(*r));
    struct msg_holder *holder = calloc(1, sizeof(*holder));
    int32_t rc = MM_OK;
    if (!r || !holder) {
        rc = mm_err_set(err, MM_NOMEM, "out of memory");
        goto fail;
    }
    holder->refs = 1; /* ours, dropped at the end */
    holder->msg = msg;

    const char *id = msg->request_id && msg->request_id[0] ? msg->request_id : fallback_id;
    if (strlen(id) > REQUEST_ID_MAX) {
        rc = mm_err_set(err, MM_INVALID, "request_id is longer than %d bytes", REQUEST_ID_MAX);
        goto fail;
    }
    r->id = strdup(id);
    if (!r->id) {
        rc = mm_err_set(err, MM_NOMEM, "out of memory");
        goto fail;
    }
    if (msg->n_input_ids == 0) {
        rc = mm_err_set(err, MM_INVALID, "input_ids is empty");
        goto fail;
    }
    if ((int64_t)msg->n_input_ids >= lim->max_context) {
        rc = mm_err_set(err, MM_INVALID,
                        "the prompt has %zu tokens, the context holds %lld (prompt + at least 1 new)",
                        msg->n_input_ids, (long long)lim->max_context);
        goto fail;
    }
    r->n_ids = (int64_t)msg->n_input_ids;
    r->ids = malloc((size_t)r->n_ids * sizeof(int32_t));
    if (!r->ids) {
        rc = mm_err_set(err, MM_NOMEM, "out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < r->n_ids; i++) {
        if (msg->input_ids[i] >= (uint32_t)lim->vocab_size) {
            rc = mm_err_set(err, MM_INVALID, "input_ids[%lld] = %u is outside the vocabulary (%d)",
                            (long long)i, msg->input_ids[i], lim->vocab_size);
            goto fail;
        }
        r->ids[i] = (int32_t)msg->input_ids[i];
    }
    rc = decode_sampling(msg->sampling, lim, r->n_ids, &r->sp, err);
    if (rc) goto fail;
    if (msg->return_logprobs) r->sp.return_logprobs = 1;
    rc = decode_media(msg, lim, holder, r, err);
    if (rc) goto fail;
    holder_release(holder);
    *out = r;
    return MM_OK;
fail:
    wk_request_free(r); /* releases the holder references its items took */
    if (holder) {
        holder_release(holder);
    } else {
        mmgw__worker__v1__generate_request__free_unpacked(msg, NULL);
    }
    return rc;
}
