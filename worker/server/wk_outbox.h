/* The messages of one Generate stream waiting for their turn to be sent (at most one SEND_MESSAGE may be in
 * flight on a gRPC call). While a send is in flight, new tokens of a choice join that choice's pending chunk
 * instead of queueing a message each: a reader that falls behind gets fewer, larger chunks, and the backlog
 * stays small. Completes keep their place after their choice's tokens. Not thread-safe: the caller locks. */
#ifndef WK_OUTBOX_H
#define WK_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

#include "wk_sched.h"

struct wk_outmsg;

struct wk_outbox {
    struct wk_outmsg *head, *tail;
    int32_t count;
    /* the client set GenerateRequest.merge_complete: a Complete joins its choice's pending chunk */
    int32_t merge_complete;
};

void wk_outbox_init(struct wk_outbox *o);
void wk_outbox_clear(struct wk_outbox *o);
/** Queue a chunk (merged into the choice's pending chunk when there is one). -1 on out of memory. */
int32_t wk_outbox_add_chunk(struct wk_outbox *o, const struct wk_chunk_ev *ev);
/** Queue a Complete (with merge_complete, attached to the choice's last chunk while that is still
 * pending). -1 on out of memory. */
int32_t wk_outbox_add_complete(struct wk_outbox *o, const struct wk_complete_ev *ev);
/** Take the first pending message as a packed GenerateResponse (malloc'ed, caller frees). 0 when the outbox
 * is empty, -1 on out of memory (the message stays queued). */
int32_t wk_outbox_pop_packed(struct wk_outbox *o, const char *request_id, uint8_t **buf, size_t *len);

#endif
