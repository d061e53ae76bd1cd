/* Command line of mmgw-worker. */
#ifndef WK_CLI_H
#define WK_CLI_H

#include <stdint.h>

#include "mm_status.h"

struct wk_cli {
    const char *model;
    const char *listen;     /* HOST:PORT; default 127.0.0.1:50051 */
    int32_t backend;        /* enum wk_backend */
    int32_t threads;        /* 0 = all cores */
    int32_t encode_threads; /* vision tower threads beside the step loop; 0 = encode inside the step; -1 = as
                               threads */
    int64_t media_keep_bytes; /* embeddings kept in the backend's memory at once (wk_engine_set_media_keep) */
    int32_t max_queue;        /* waiting requests before RESOURCE_EXHAUSTED */
    int64_t cache_pages;      /* 0 = engine default */
    int32_t max_seqs;         /* choices running at once */
    int32_t step_tokens;      /* token budget per step (chunked prefill) */
    int32_t grow_tokens;      /* reservation step for requests without max_new_tokens */
    int64_t drain_ms;         /* SIGTERM: how long running requests may finish */
    int64_t max_message_bytes;
    int64_t upload_bytes; /* cap on staged uploads */
    int64_t upload_ttl_ms;
    int32_t allow_shm;
    int32_t host_draw;              /* wk_sched_opts.host_draw */
    int32_t grpc_threads;           /* completion-queue threads */
    const char *port_file;          /* write the bound port here once listening */
    const char *auth_token_file;    /* calls must carry "authorization: Bearer" the token in it */
    const char *tls_cert, *tls_key; /* PEM files: serve TLS instead of plaintext HTTP/2 (both or neither) */
    int32_t log_level;              /* -1 = from MMGW_LOG_LEVEL / default */
    int32_t help;
};

/** Parse argv; MM_INVALID with a message naming the option on a bad one. */
int32_t wk_cli_parse(int argc, char **argv, struct wk_cli *cli, struct mm_err *err);
/** The usage text. */
const char *wk_cli_usage(void);

#endif
