/* Staged tensor uploads (the client-streaming UploadTensor RPC).
 *
 * A tensor too large for one message arrives as ordered chunks under an id chosen by the sender; a later
 * Generate names the id instead of carrying the bytes. A completed upload is taken (removed) by the first
 * request that names it. Uploads not taken within the time-to-live are dropped, and the bytes held by all
 * staged uploads together are capped, so a client cannot pin memory forever. Thread-safe. */
#ifndef WK_UPLOADS_H
#define WK_UPLOADS_H

#include <stddef.h>
#include <stdint.h>

#include "mm_status.h"

/** Longest upload id accepted. */
#define WK_UPLOAD_ID_MAX 128

struct wk_uploads;
struct wk_upload; /* one completed upload, owned by whoever took it */

/** A store holding at most max_bytes over all uploads; uploads older than ttl_ms are dropped. */
struct wk_uploads *wk_uploads_create(uint64_t max_bytes, int64_t ttl_ms);
void wk_uploads_destroy(struct wk_uploads *u);

/** Append one chunk. The first chunk of an id (offset 0) gives total_bytes and creates the upload; later
 * chunks must continue exactly where the previous ended. *received gets the bytes held so far.
 * MM_INVALID for an out-of-order, overflowing or duplicate chunk, MM_EXHAUSTED past the store's cap. */
int32_t wk_uploads_append(struct wk_uploads *u, const char *id, uint64_t total_bytes, uint64_t offset,
                          const void *data, size_t len, uint64_t *received, struct mm_err *err);
/** Whether the upload id holds all its bytes. */
int32_t wk_uploads_complete(struct wk_uploads *u, const char *id);
/** Drop an upload (a stream that broke off). Unknown ids are ignored. */
void wk_uploads_drop(struct wk_uploads *u, const char *id);
/** Take a completed upload out of the store. MM_NOT_FOUND when unknown or still incomplete. */
int32_t wk_uploads_take(struct wk_uploads *u, const char *id, struct wk_upload **out, struct mm_err *err);
/** Drop uploads older than the ttl (called on every append and take; exposed for tests). */
void wk_uploads_sweep(struct wk_uploads *u, int64_t now_ms);
/** Bytes held by staged (not yet taken) uploads. */
uint64_t wk_uploads_bytes(struct wk_uploads *u);

const void *wk_upload_data(const struct wk_upload *up);
uint64_t wk_upload_size(const struct wk_upload *up);
/** Free a taken upload (a release hook for wk_media_item: takes void *). */
void wk_upload_free(void *up);

#endif
