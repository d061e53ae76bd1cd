/* What the wk_engine.h doubles share (see fake_model.h). */
#include "fake_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mm_dtype.h"
#include "wk_engine.h"

void fake_model_info(struct wk_model_info *info, const struct fake_config *c, const char *name,
                     const char *model_type, int64_t pages)
{
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", name);
    snprintf(info->model_type, sizeof info->model_type, "%s", model_type);
    snprintf(info->dtype, sizeof info->dtype, "f32");
    info->vocab_size = c->vocab;
    info->hidden_size = c->hidden;
    info->max_context = c->max_context;
    info->block_size = c->block;
    info->n_layers = 1;
    info->first_msa_layer = -1;
    info->n_kv_groups = 1;
    info->image_token_id = c->image;
    info->video_token_id = c->video;
    info->eos_ids[0] = c->eos;
    info->n_eos = 1;
    info->pages_total = pages;
    info->merge_factor = 4; /* fake_model_encode_media: one token per 4 rows */
}

int32_t fake_model_encode_media(int32_t hidden, const struct wk_media *m, float **embeds, int64_t *n_tokens,
                                struct mm_err *err)
{
    if (m->n_rows % 4)
        return mm_err_set(err, MM_INVALID, "rows %lld not a multiple of 4", (long long)m->n_rows);
    int64_t n = m->n_rows / 4;
    float *o = calloc((size_t)(n * hidden) + 1, sizeof(float));
    if (!o) return mm_err_set(err, MM_NOMEM, "out of memory");
    for (int64_t t = 0; t < n; t++) {
        float v = 0.0f;
        const uint8_t *p =
            (const uint8_t *)m->pixels + (size_t)(t * 4 * m->row_len) * mm_dtype_size(m->dtype);
        mm_convert_to_f32(&v, p, m->dtype, 1);
        for (int64_t j = 0; j < hidden; j++) o[t * hidden + j] = v;
    }
    *embeds = o;
    *n_tokens = n;
    return MM_OK;
}

double fake_model_uniform(uint64_t *rng)
{
    uint64_t x = *rng ? *rng : 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *rng = x;
    return (double)(x >> 11) / 9007199254740992.0;
}

/* The media-encoder calls appended to wk_engine.h, for a double that does not model them (bench/api's
 * bench_engine.c): media then stays inside the scheduler's steps, as with a backend that cannot encode beside
 * forward(). Weak, so that a double that does model them (fake_engine.c) overrides them. */
__attribute__((weak)) int32_t wk_engine_set_encode_threads(struct wk_engine *e, int32_t threads,
                                                           struct mm_err *err)
{
    (void)e;
    (void)threads;
    return mm_err_set(err, MM_UNSUPPORTED, "this engine double encodes media inside the steps");
}

__attribute__((weak)) int32_t wk_engine_encode_media_cancellable(struct wk_engine *e,
                                                                 const struct wk_media *m,
                                                                 const int32_t *cancel, float **embeds,
                                                                 int64_t *n_tokens, struct mm_err *err)
{
    (void)cancel;
    return wk_engine_encode_media(e, m, embeds, n_tokens, err);
}
