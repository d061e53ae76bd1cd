/* What the upstream tests record of the gRPC client's calls (test_upstream_client, test_upstream_loop,
 * test_upstream_interop): a unary call's answer and a Generate stream, with the waits over them. */
#ifndef UPSTREAM_CALLS_H
#define UPSTREAM_CALLS_H

#include <pthread.h>

#include "gw_upstream.h"
#include "gw_upstream_generate.h"
#include "test_loop.h"

/** One unary call's answer: the fields of whichever response came (ModelInfo, Health, Load, Abort). */
struct unary_rec {
    int done;
    pthread_t thread; /* where the callback ran */
    struct gw_call_status st;
    char model_name[64];
    uint32_t block_size, image_token, vocab;
    int supports_shm;
    int healthy;
    char health_msg[128];
    uint32_t running, waiting;
    int found;
};

/** The unary callback (gw_unary_cb) filling the struct unary_rec at arg. */
void unary_rec_cb(void *arg, const struct gw_call_status *st, const ProtobufCMessage *resp);
/** For test_loop_run: the call has answered. */
int unary_rec_done(void *arg);
/** The "yielded=N" of fake_worker.py's Health message (chunks it sent so far, all streams), or -1. */
long health_yielded(struct test_loop *loop, struct gw_upstream_chan *ch);

/** One Generate stream: what arrived, and when to pause or cancel it. */
struct stream_rec {
    struct gw_gen_call *call;
    int responses, chunks, completes, merged, done;
    pthread_t thread; /* where the last callback ran */
    uint32_t completion_tokens;
    uint32_t tokens[64];
    int n_tokens;
    struct gw_call_status st;
    uint32_t reported; /* responses, as on_done counted them */
    int pause_after;   /* pause once this many responses arrived (0 = never) */
    int cancel_after;  /* cancel once this many arrived (0 = never) */
    char finish[16];
};

/** Callbacks recording into the struct stream_rec passed as their argument. */
extern const struct gw_gen_callbacks stream_rec_callbacks;
/** For test_loop_run: on_done came. */
int stream_rec_done(void *arg);
/** Run the loop until each of the n streams is done once; 0 when timeout_ms passes first. */
int stream_recs_done(struct test_loop *loop, struct stream_rec *s, int n, int timeout_ms);

/** A loopback port nothing listens on (bound, read back, closed), for refused connections. */
int unused_port(void);

#endif
