/* TEST FIXTURE ONLY: a fake of worker/wk_engine.h for the scheduler's unit tests (see fake_engine.c). */
#ifndef FAKE_ENGINE_H
#define FAKE_ENGINE_H

#include <stdint.h>

#include "fake_model.h"

struct wk_engine;

struct fake_stats {
    int64_t forwards, tokens, max_items, max_step_tokens, forks, encodes, reused_tokens, exhausted;
    int64_t live_seqs;
    int64_t argmax_rows, logit_rows; /* positions asked for their greedy token only / for their logits */
    int64_t cand_rows;               /* positions asked for their top-k candidates */
    int64_t drawn_rows;              /* of those, drawn from by the engine (no top-k, draw allowed) */
    /* written by the encoder thread (read them with fake_engine_stat) */
    int64_t encode_started, encode_cancelled, forwards_during_encode;
    /* media spans the forward read: of embeddings kept "in the backend" (wk_engine_encode_media_kept) / on
     * the host; kept embeddings alive now (bytes; atomic) */
    int64_t kept_spans, host_spans, kept_bytes;
};

/** Shape of the next engine wk_engine_open makes. */
void fake_engine_set_config(const struct fake_config *c);
/** The engine opened last. */
struct wk_engine *fake_engine_last(void);
const struct fake_stats *fake_engine_stats(const struct wk_engine *e);
/** Make the forward call after n more successful ones fail with MM_ERROR (once). */
void fake_engine_fail_forward_after(struct wk_engine *e, int64_t n);

/** Sleep us microseconds in every forward (< 1 s). */
void fake_engine_set_delay(struct wk_engine *e, int32_t us);
/** Every media encode takes us microseconds (cancellable; FAKE_ENGINE_ENCODE_DELAY_US for the fake worker).
 */
void fake_engine_set_encode_delay(struct wk_engine *e, int32_t us);
/* The fake's wk_engine_encode_media_kept keeps results "in the backend" (host memory it tracks: a forward
 * refuses a kept span outside a live kept buffer, so a scheduler that frees them early fails) within the
 * budget of wk_engine_set_media_keep, as the runtime does. */
/** An atomic read of a stats field that another thread writes (encodes, encode_started...). */
int64_t fake_engine_stat(const struct wk_engine *e, const int64_t *field);

/** The fake model's greedy continuation of a prompt run alone: k tokens into out. media_first[i], when
 * not NaN, is the embedding value the fake sees at position i instead of ids[i] (NULL = text only). */
int32_t fake_solo_greedy(const int32_t *ids, int64_t n, const float *media_first, int32_t k, int32_t *out);
uint64_t fake_mix(uint64_t h, int64_t v);
void fake_logits(int32_t vocab, uint64_t h, float *out);

#endif
