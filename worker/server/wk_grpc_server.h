/* The worker's gRPC server (gRPC C core, completion queues): method paths "/mmgw.worker.v1.Worker/<Method>"
 * from proto/worker.proto, messages (de)serialized with protobuf-c. One completion-queue thread serves
 * every call; Generate streams are fed by the scheduler thread (wk_sched.h). */
#ifndef WK_GRPC_SERVER_H
#define WK_GRPC_SERVER_H

#include <stdint.h>

#include "mm_status.h"
#include "wk_request_decode.h"

struct wk_model_info;
struct wk_sched;
struct wk_uploads;

/** What the RPC handlers serve from. Pointers are borrowed and must outlive the server. */
struct wk_service {
    const struct wk_model_info *info;
    struct wk_sched *sched;
    struct wk_uploads *uploads;
    struct wk_decode_limits limits;
    int64_t max_message_bytes; /* gRPC receive/send limit per message */
    int32_t threads;           /* completion-queue threads (0 = 2): decoding a large request on one does not
                                * hold up the token streams served by the other */
    const char *auth;          /* "Bearer TOKEN" every call must carry (wk_auth.h), NULL = none */
    const char *tls_cert_pem, *tls_key_pem; /* serve TLS with these (PEM text); NULL = plaintext */
};

struct wk_grpc;

/** Listen on addr ("127.0.0.1:50051", "[::1]:0", port 0 = any free one) and start serving. *port gets
 * the bound port. */
int32_t wk_grpc_create(const char *addr, const struct wk_service *svc, struct wk_grpc **out, int32_t *port,
                       struct mm_err *err);
/** Refuse new calls and wait up to timeout_ms for the live ones to end; then cancel what is left. The
 * scheduler must be drained by the caller (wk_sched_drain) so that streams can end. */
void wk_grpc_shutdown(struct wk_grpc *g, int64_t timeout_ms);
/** Shut down (if not yet), stop the completion-queue thread and free. NULL is fine. */
void wk_grpc_destroy(struct wk_grpc *g);

#endif
