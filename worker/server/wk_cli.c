/* Command line of mmgw-worker (see wk_cli.h). */
#include "wk_cli.h"

#include <stdlib.h>
#include <string.h>

#include "mm_log.h"
#include "mm_text.h"
#include "wk_engine.h"

const char *wk_cli_usage(void)
{
    return "usage: mmgw-worker --model DIR [--listen HOST:PORT] [options]\n"
           "  --model DIR           checkpoint folder (config.json + safetensors)\n"
           "  --listen HOST:PORT    gRPC address (default 127.0.0.1:50051; port 0 = any free one)\n"
           "  --backend cpu|cuda    model backend (default cpu)\n"
           "  --threads N           CPU threads for the model (default: all cores)\n"
           "  --encode-threads N    CPU threads of the media encoder, which runs beside the decode steps\n"
           "                        (default: as --threads; the CUDA backend encodes on its own stream\n"
           "                        whatever N > 0 says; 0 = encode on the model's threads, stalling the\n"
           "                        running streams for every image)\n"
           "  --media-keep-mb N     media embeddings kept where they were encoded (the GPU's memory) until\n"
           "                        their prefill, at most N MiB at once; past it they wait on the host\n"
           "                        (default 256; 0 = always on the host)\n"
           "  --max-queue N         waiting requests before RESOURCE_EXHAUSTED (default 256)\n"
           "  --cache-pages N       KV/index cache pages (default: the engine's choice)\n"
           "  --max-seqs N          sequences (choices) running at once (default 256)\n"
           "  --step-tokens N       tokens per model step: decode + prefill chunks (default 2048)\n"
           "  --grow-tokens N       page reservation step when max_new_tokens is unset (default 256)\n"
           "  --drain-timeout S     on SIGTERM, seconds running requests may take to finish (default 30)\n"
           "  --max-message-mb N    gRPC message size limit (default 2047)\n"
           "  --upload-max-mb N     bytes staged by UploadTensor at once (default 8192)\n"
           "  --upload-ttl S        seconds an unused upload is kept (default 300)\n"
           "  --no-shm              refuse shared-memory tensors\n"
           "  --host-draw           sample every flat row of a request without top-k on the host from the\n"
           "                        whole row (default: drawn where the logits lie, without their download)\n"
           "  --grpc-threads N      gRPC completion-queue threads (default 2)\n"
           "  --port-file PATH      write the bound port to PATH once listening\n"
           "  --auth-token-file F   every call must carry \"authorization: Bearer TOKEN\", TOKEN being F's "
           "one\n"
           "                        line (the gateway's upstream_token); others are UNAUTHENTICATED\n"
           "  --tls-cert F --tls-key F  serve TLS with this PEM certificate (chain) and key (the gateway's\n"
           "                        upstream_tls)\n"
           "  --log-level L         error|warn|info|debug\n";
}

static int32_t parse_int(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out,
                         struct mm_err *err)
{
    if (!v) return mm_err_set(err, MM_INVALID, "%s needs a value", opt);
    if (mm_parse_i64(v, lo, hi, out) != 0)
        return mm_err_set(err, MM_INVALID, "%s '%s' must be an integer in [%lld, %lld]", opt, v,
                          (long long)lo, (long long)hi);
    return MM_OK;
}

/* gRPC takes the port of "HOST:PORT" modulo 65536 and a missing one as 443, so a typo would listen on another
 * port than the one the gateway is told (65536 becomes a random free port): refuse anything but a decimal
 * port in [0, 65535] after a non-empty host. gRPC's unix: and unix-abstract: addresses pass as they are. */
static int32_t check_listen(const char *addr, struct mm_err *err)
{
    if (!strncmp(addr, "unix:", 5) || !strncmp(addr, "unix-abstract:", 14)) return MM_OK;
    const char *colon = strrchr(addr, ':');
    int64_t port = 0;
    if (!colon || colon == addr || mm_parse_i64(colon + 1, 0, 65535, &port) != 0 || colon[1] == '-' ||
        colon[1] == '+')
        return mm_err_set(err, MM_INVALID, "--listen '%s' must be HOST:PORT with a port in [0, 65535]", addr);
    return MM_OK;
}

int32_t wk_cli_parse(int argc, char **argv, struct wk_cli *cli, struct mm_err *err)
{
    memset(cli, 0, sizeof(*cli));
    cli->listen = "127.0.0.1:50051";
    cli->backend = WK_BACKEND_CPU;
    cli->encode_threads = -1; /* as --threads */
    cli->media_keep_bytes = WK_MEDIA_KEEP_DEFAULT;
    cli->max_queue = 256;
    cli->max_seqs = 256;
    cli->step_tokens = 2048;
    cli->grow_tokens = 256;
    cli->drain_ms = 30000;
    cli->max_message_bytes = 2047ll << 20;
    cli->upload_bytes = 8192ll << 20;
    cli->upload_ttl_ms = 300000;
    cli->allow_shm = 1;
    cli->grpc_threads = 2;
    cli->log_level = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x = 0;
        int32_t rc = MM_OK;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli->help = 1;
            continue;
        } else if (!strcmp(a, "--no-shm")) {
            cli->allow_shm = 0;
            continue;
        } else if (!strcmp(a, "--host-draw")) {
            cli->host_draw = 1;
            continue;
        }
        if (!v) return mm_err_set(err, MM_INVALID, "%s needs a value (or is unknown)", a);
        if (!strcmp(a, "--model")) {
            cli->model = v;
        } else if (!strcmp(a, "--listen")) {
            cli->listen = v;
        } else if (!strcmp(a, "--backend")) {
            if (!strcmp(v, "cpu"))
                cli->backend = WK_BACKEND_CPU;
            else if (!strcmp(v, "cuda"))
                cli->backend = WK_BACKEND_CUDA;
            else
                return mm_err_set(err, MM_INVALID, "--backend '%s' must be cpu or cuda", v);
        } else if (!strcmp(a, "--threads")) {
            if (!(rc = parse_int(a, v, 0, 4096, &x, err))) cli->threads = (int32_t)x;
        } else if (!strcmp(a, "--encode-threads")) {
            if (!(rc = parse_int(a, v, 0, 4096, &x, err))) cli->encode_threads = (int32_t)x;
        } else if (!strcmp(a, "--media-keep-mb")) {
            if (!(rc = parse_int(a, v, 0, 1 << 24, &x, err))) cli->media_keep_bytes = x << 20;
        } else if (!strcmp(a, "--max-queue")) {
            if (!(rc = parse_int(a, v, 0, 1 << 20, &x, err))) cli->max_queue = (int32_t)x;
        } else if (!strcmp(a, "--cache-pages")) {
            if (!(rc = parse_int(a, v, 1, INT64_MAX / 2, &x, err))) cli->cache_pages = x;
        } else if (!strcmp(a, "--max-seqs")) {
            if (!(rc = parse_int(a, v, 1, 1 << 16, &x, err))) cli->max_seqs = (int32_t)x;
        } else if (!strcmp(a, "--step-tokens")) {
            if (!(rc = parse_int(a, v, 1, 1 << 20, &x, err))) cli->step_tokens = (int32_t)x;
        } else if (!strcmp(a, "--grow-tokens")) {
            if (!(rc = parse_int(a, v, 1, 1 << 20, &x, err))) cli->grow_tokens = (int32_t)x;
        } else if (!strcmp(a, "--drain-timeout")) {
            if (!(rc = parse_int(a, v, 0, 86400, &x, err))) cli->drain_ms = x * 1000;
        } else if (!strcmp(a, "--max-message-mb")) {
            if (!(rc = parse_int(a, v, 4, 2047, &x, err))) cli->max_message_bytes = x << 20;
        } else if (!strcmp(a, "--upload-max-mb")) {
            if (!(rc = parse_int(a, v, 0, 1 << 24, &x, err))) cli->upload_bytes = x << 20;
        } else if (!strcmp(a, "--upload-ttl")) {
            if (!(rc = parse_int(a, v, 1, 86400, &x, err))) cli->upload_ttl_ms = x * 1000;
        } else if (!strcmp(a, "--grpc-threads")) {
            if (!(rc = parse_int(a, v, 1, 16, &x, err))) cli->grpc_threads = (int32_t)x;
        } else if (!strcmp(a, "--port-file")) {
            cli->port_file = v;
        } else if (!strcmp(a, "--auth-token-file")) {
            cli->auth_token_file = v;
        } else if (!strcmp(a, "--tls-cert")) {
            cli->tls_cert = v;
        } else if (!strcmp(a, "--tls-key")) {
            cli->tls_key = v;
        } else if (!strcmp(a, "--log-level")) {
            cli->log_level = mm_log_level_parse(v);
            if (cli->log_level < 0)
                return mm_err_set(err, MM_INVALID, "--log-level '%s' is not error|warn|info|debug", v);
        } else {
            return mm_err_set(err, MM_INVALID, "unknown option '%s'", a);
        }
        if (rc) return rc;
        i++;
    }
    if (!cli->help && !cli->model) return mm_err_set(err, MM_INVALID, "--model DIR is required");
    if (!cli->help && !cli->tls_cert != !cli->tls_key)
        return mm_err_set(err, MM_INVALID, "--tls-cert and --tls-key go together");
    if (!cli->help) return check_listen(cli->listen, err);
    return MM_OK;
}
