/* Out-of-band tensor transport: the UploadTensor client stream, for any worker (shared memory for a worker on
 * this host: gw_upstream_shm.h). Public so that tests can use it directly. */
#ifndef GW_UPSTREAM_MEDIA_H
#define GW_UPSTREAM_MEDIA_H

#include <stddef.h>
#include <stdint.h>

#include "gw_upstream.h"

struct gw_upload;

/** Completion of an upload: received = what the worker acknowledged. */
typedef void (*gw_upload_cb)(void *arg, const struct gw_call_status *st, uint64_t received);

/** Stream len bytes at data to the worker as upload_id, in chunks of chunk_bytes (0 = 1 MiB). data is
 * read chunk by chunk until the callback runs or gw_upload_cancel returns. ex NULL: cb runs on the
 * completion-queue thread. *out (may be NULL) is valid until the callback has run. */
int32_t gw_upstream_upload(struct gw_upstream_chan *ch, const char *upload_id, const void *data, uint64_t len,
                           uint32_t chunk_bytes, uint32_t timeout_ms, const struct gw_executor *ex,
                           gw_upload_cb cb, void *arg, struct gw_upload **out, struct mm_err *err);
/** Stop an upload: after this returns data is no longer read. Returns 1 when the callback will not run;
 * 0 when, without an executor, it was already running or about to run on the completion-queue thread.
 * With an executor (called on its thread) it always returns 1. Only before the callback has run. */
int gw_upload_cancel(struct gw_upload *u);

#endif
