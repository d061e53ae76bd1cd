/* TEST AND BENCHMARK DOUBLES ONLY: what the two stand-ins for worker/wk_engine.h have in common — the
 * scheduler tests' fake_engine.c (exact, linear-time bookkeeping) and bench/api's bench_engine.c (the same
 * hash "model" with O(1) page bookkeeping): the model's shape, the media "encoder" and the sampling draw. */
#ifndef FAKE_MODEL_H
#define FAKE_MODEL_H

#include <stdint.h>

#include "mm_status.h"

struct wk_media;
struct wk_model_info;

struct fake_config {
    int32_t vocab;
    int64_t max_context;
    int32_t block;
    int64_t pages;
    int32_t hidden;
    int32_t eos, image, video;
};

/** The model info of c, one layer, no MSA layer, one KV group; pages_total = pages. */
void fake_model_info(struct wk_model_info *info, const struct fake_config *c, const char *name,
                     const char *model_type, int64_t pages);

/** One token per 4 patch rows (a 2x2 merge group), every value of its hidden-wide embedding the first
 * element of its first row (read in the media's dtype, as a model reads its pixels). embeds: malloc'ed. */
int32_t fake_model_encode_media(int32_t hidden, const struct wk_media *m, float **embeds, int64_t *n_tokens,
                                struct mm_err *err);

/** A uniform draw in [0, 1) from a xorshift state (a zero state is seeded). */
double fake_model_uniform(uint64_t *rng);

#endif
