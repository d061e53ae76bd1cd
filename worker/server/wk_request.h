/* A generation request as the scheduler sees it: validated, protocol-free.
 *
 * The gRPC layer builds one from a GenerateRequest (wk_request_decode.c) and hands it to the scheduler,
 * which owns it from then on. Media bytes are referenced, not copied: each item carries a release hook
 * that frees whatever holds the bytes (the unpacked protobuf message, a staged upload, a shared-memory
 * mapping) once the vision tower has consumed them. */
#ifndef WK_REQUEST_H
#define WK_REQUEST_H

#include <stdint.h>

/** The most choices one request may ask for (n). */
#define WK_MAX_CHOICES 64
/** The most extra stop ids one request may give. */
#define WK_MAX_STOP_IDS 64
/** The most top log-probs per token. */
#define WK_MAX_TOP_LOGPROBS 20

struct wk_placeholder_run {
    int64_t offset, length;
};

struct wk_media_item {
    int32_t kind;  /* 0 image, 1 video (wk_media numbering) */
    int32_t dtype; /* MM_DT_F32 / MM_DT_BF16 / MM_DT_F16 */
    const void *pixels;
    int64_t n_rows, row_len;
    int64_t grid_t, grid_h, grid_w;
    struct wk_placeholder_run *runs; /* sorted by offset, owned by the request */
    int32_t n_runs;
    int64_t n_tokens; /* sum of run lengths */
    uint64_t content_hash;
    void (*release)(void *arg); /* frees the bytes behind pixels; may be NULL */
    void *release_arg;
};

struct wk_sampling_req {
    int32_t has_max_new_tokens;
    int64_t max_new_tokens;
    float temperature, top_p, min_p;
    int32_t top_k;
    int32_t has_seed;
    uint64_t seed;
    int32_t *stop_ids;
    int32_t n_stop_ids;
    int32_t n;            /* choices, >= 1 */
    int32_t top_logprobs; /* 0 = none */
    int32_t return_logprobs;
    int32_t ignore_eos;
    int64_t min_new_tokens;
};

struct wk_request {
    char *id;
    int32_t *ids;
    int64_t n_ids;
    struct wk_sampling_req sp;
    struct wk_media_item *media;
    int32_t n_media;
    uint64_t media_hash; /* 0 for text-only prompts; else a hash over every item's content */
};

/** Free a request and release its media (NULL is fine). */
void wk_request_free(struct wk_request *r);
/** Release the media bytes (after encoding) but keep the rest; idempotent. */
void wk_request_release_media(struct wk_request *r);

#endif
