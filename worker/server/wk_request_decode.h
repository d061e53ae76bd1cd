/* GenerateRequest (protobuf-c) -> struct wk_request, with every check that needs no model run:
 * empty input, ids out of the vocabulary, a prompt longer than the context, sampling values out of range,
 * tensors whose bytes do not match shape and dtype, placeholder runs that do not match the grid or the
 * tokens there, image/video tokens no item covers. Each failure is MM_INVALID (or MM_NOT_FOUND for an
 * unknown upload) with a one-line message naming the field. */
#ifndef WK_REQUEST_DECODE_H
#define WK_REQUEST_DECODE_H

#include <stdint.h>

#include "mm_status.h"
#include "worker.pb-c.h"
#include "wk_request.h"

struct wk_uploads;

/** What the checks need to know about the model and the server. */
struct wk_decode_limits {
    int32_t vocab_size;
    int64_t max_context;
    int32_t image_token_id, video_token_id;
    int32_t merge_factor;       /* vision patches per placeholder token (4: M3's 2x2 merge); 0: no media */
    int64_t max_row_len;        /* 0 = any; else the patch row length the vision tower takes */
    struct wk_uploads *uploads; /* NULL: upload_id refused */
    int32_t allow_shm;
};

/** Validate msg and build a request. Takes ownership of msg in every case: it is freed, or kept alive by
 * the request's media items (whose pixels point into it) until wk_request_release_media. fallback_id is
 * used when request_id is empty. */
int32_t wk_request_decode(Mmgw__Worker__V1__GenerateRequest *msg, const struct wk_decode_limits *lim,
                          const char *fallback_id, struct wk_request **out, struct mm_err *err);

/** 64-bit hash of a byte range (content hashes of media the sender did not hash). */
uint64_t wk_hash_bytes(const void *p, uint64_t n, uint64_t seed);

#endif
