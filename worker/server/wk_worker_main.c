/* mmgw-worker: serve one model over gRPC (proto/worker.proto).
 *
 * Threads: main (signals), the scheduler (owns the engine), the media encoder (the vision tower, when the
 * engine can run it beside the steps), the gRPC completion-queue threads, and the engine's own compute
 * threads. SIGTERM or SIGINT drains: no new calls, running requests finish (or end
 * with UNAVAILABLE after --drain-timeout), then exit 0. A second signal cuts the drain short. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mm_file.h"
#include "mm_log.h"
#include "mm_malloc.h"
#include "mm_outfile.h"
#include "wk_auth.h"
#include "wk_cli.h"
#include "wk_engine.h"
#include "wk_grpc_server.h"
#include "wk_sched.h"
#include "wk_uploads.h"

#define LOG "worker"

/* A PEM file read whole (gRPC takes the text); kind is what its BEGIN line must name ("PRIVATE KEY" also
 * matches "RSA PRIVATE KEY" and "EC PRIVATE KEY"). */
static int32_t read_pem(const char *path, const char *opt, const char *kind, char **out, struct mm_err *err)
{
    *out = NULL;
    char *s = NULL;
    size_t len = 0;
    if (mm_file_read_text(path, 1 << 20, &s, &len, err) != MM_OK) return mm_err_prefix(err, "%s", opt);
    const char *b = strstr(s, "-----BEGIN ");
    const char *e = b ? strstr(b, "-----\n") : NULL;
    char want[64];
    snprintf(want, sizeof want, "%s-----", kind);
    if (!b || !e || !memmem(b, (size_t)(e - b) + 5, want, strlen(want))) {
        free(s);
        return mm_err_set(err, MM_INVALID, "%s %s holds no PEM %s", opt, path, kind);
    }
    *out = s;
    return MM_OK;
}

/* Whoever waits for the file never reads half of it (a temporary file renamed into place); a symbolic link
 * or a FIFO at the path is written through (mm_outfile.h). */
static int32_t write_port_file(const char *path, int32_t port, struct mm_err *err)
{
    struct mm_outfile out;
    int32_t rc = mm_outfile_open(&out, path, err);
    if (rc != MM_OK) return rc;
    return mm_outfile_close(&out, fprintf(out.f, "%d\n", port) > 0, err);
}

/* Signals, once serving: one thread sigwaits for SIGTERM/SIGINT for the whole run. The first starts the drain
 * (main waits for it), a later one cuts the drain short. g_sig_sched is the scheduler to cut short (set by
 * main when it starts the drain, cleared before the scheduler is freed); g_sig_cut says a second signal came
 * before it was set. All under g_sig_mu. */
static pthread_mutex_t g_sig_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_sig_cv = PTHREAD_COND_INITIALIZER;
static struct wk_sched *g_sig_sched;
static int g_sig_first, g_sig_cut;
static sigset_t g_sig_set;
static pthread_t g_sig_thread;

static void *signal_main(void *arg)
{
    (void)arg;
    int sig = 0;
    while (sigwait(&g_sig_set, &sig) == 0) {
        pthread_mutex_lock(&g_sig_mu);
        if (!g_sig_first) {
            g_sig_first = sig;
            pthread_cond_signal(&g_sig_cv);
        } else if (g_sig_sched) {
            mm_log_warn(LOG, "second signal (%d): aborting the requests still running", sig);
            wk_sched_drain(g_sig_sched, 0);
        } else {
            g_sig_cut = 1;
        }
        pthread_mutex_unlock(&g_sig_mu);
    }
    return NULL;
}

/* Threads that libraries start before main blocks the signals (OpenBLAS's pthread build starts its pool in a
 * constructor) do not block them, so the kernel hands them a SIGTERM that arrives while no thread sigwaits,
 * and its default action killed the process mid-drain (exit 143, streams cut without a status). There this
 * handler passes the signal on to the thread that waits for it. */
static void forward_signal(int sig)
{
    pthread_kill(g_sig_thread, sig);
}

int main(int argc, char **argv)
{
    mm_malloc_tune_server();
    struct wk_cli cli;
    struct mm_err err = {0};
    if (wk_cli_parse(argc, argv, &cli, &err) != MM_OK) {
        fprintf(stderr, "mmgw-worker: %s\n%s", err.msg, wk_cli_usage());
        return 2;
    }
    if (cli.help) {
        fputs(wk_cli_usage(), stdout);
        return 0;
    }
    if (cli.log_level >= 0) mm_log_set_level(cli.log_level);

    /* every thread inherits this mask, so only sigwait sees the signals */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct wk_engine_opts eo = {.backend = cli.backend,
                                .threads = cli.threads,
                                .cache_pages = cli.cache_pages,
                                .max_batch_tokens = cli.step_tokens};
    struct wk_engine *e = NULL;
    if (wk_engine_open(cli.model, &eo, &e, &err) != MM_OK) {
        mm_log_error(LOG, "cannot open model '%s': %s", cli.model, err.msg);
        return 1;
    }
    wk_engine_set_media_keep(e, cli.media_keep_bytes);
    int32_t enc_threads = cli.encode_threads;
    if (enc_threads < 0) { /* as many as the model: while an image encodes, the OS shares the cores evenly */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        enc_threads = cli.threads > 0 ? cli.threads : cores > 0 ? (int32_t)cores : 1;
    }
    if (enc_threads > 0) {
        /* media on its own threads, beside the decode steps; a backend that cannot keeps it in the steps */
        int32_t erc = wk_engine_set_encode_threads(e, enc_threads, &err);
        if (erc == MM_UNSUPPORTED) {
            mm_log_info(LOG, "media encoding stays inside the model steps: %s", err.msg);
        } else if (erc != MM_OK) {
            mm_log_error(LOG, "media encoder: %s", err.msg);
            wk_engine_close(e);
            return 1;
        }
    }
    const struct wk_model_info *mi = wk_engine_info(e);
    mm_log_info(LOG, "model '%s' (%s, %s): vocab %d, context %lld, %lld cache pages of %d tokens; media %s",
                mi->name, mi->model_type, mi->dtype, mi->vocab_size, (long long)mi->max_context,
                (long long)mi->pages_total, mi->block_size,
                mi->concurrent_encode ? "encoded beside the decode steps"
                                      : "encoded inside the decode steps");

    struct wk_uploads *up = wk_uploads_create((uint64_t)cli.upload_bytes, cli.upload_ttl_ms);
    struct wk_sched_opts so = {.max_waiting = cli.max_queue,
                               .max_seqs = cli.max_seqs,
                               .step_tokens = cli.step_tokens,
                               .grow_tokens = cli.grow_tokens,
                               .host_draw = cli.host_draw};
    struct wk_sched *s = NULL;
    char *auth = NULL, *tls_cert = NULL, *tls_key = NULL;
    int rc = 1;
    if (!up) {
        mm_log_error(LOG, "out of memory");
        goto out;
    }
    if (wk_sched_create(e, &so, &s, &err) != MM_OK || wk_sched_start(s, &err) != MM_OK) {
        mm_log_error(LOG, "scheduler: %s", err.msg);
        goto out;
    }
    /* A sequence longer than the whole cache can never be held: advertise and enforce the smaller of the
     * model's context and the pool (the scheduler's), so the gateway answers 400 (too long) instead of a
     * 429 that invites retries that cannot succeed. Clamped rather than refused (vLLM refuses to start):
     * a small --cache-pages is a legitimate choice for short prompts. */
    int64_t max_context = wk_sched_max_context(s);
    if (max_context < mi->max_context)
        mm_log_warn(
            LOG,
            "context limited to %lld tokens by the cache (%lld pages of %d; the model's is %lld): raise "
            "--cache-pages for longer sequences",
            (long long)max_context, (long long)mi->pages_total, mi->block_size, (long long)mi->max_context);
    struct wk_service svc = {
        .info = mi,
        .sched = s,
        .uploads = up,
        .limits = {.vocab_size = mi->vocab_size,
                   .max_context = max_context,
                   .image_token_id = mi->image_token_id,
                   .video_token_id = mi->video_token_id,
                   .merge_factor = mi->merge_factor, /* the checkpoint's: what its vision tower makes */
                   .uploads = up,
                   .allow_shm = cli.allow_shm},
        .max_message_bytes = cli.max_message_bytes,
        .threads = cli.grpc_threads,
    };
    if (cli.auth_token_file) {
        if (wk_auth_load(cli.auth_token_file, &auth, &err) != MM_OK) {
            mm_log_error(LOG, "%s", err.msg);
            goto out;
        }
        svc.auth = auth;
    }
    if (cli.tls_cert) {
        if (read_pem(cli.tls_cert, "--tls-cert", "CERTIFICATE", &tls_cert, &err) != MM_OK ||
            read_pem(cli.tls_key, "--tls-key", "PRIVATE KEY", &tls_key, &err) != MM_OK) {
            mm_log_error(LOG, "%s", err.msg);
            goto out;
        }
        svc.tls_cert_pem = tls_cert;
        svc.tls_key_pem = tls_key;
    }
    struct wk_grpc *g = NULL;
    int32_t port = 0;
    if (wk_grpc_create(cli.listen, &svc, &g, &port, &err) != MM_OK) {
        mm_log_error(LOG, "%s", err.msg);
        goto out;
    }
    mm_log_info(LOG, "listening on %s (port %d)", cli.listen, port);
    if (cli.port_file && write_port_file(cli.port_file, port, &err) != MM_OK) {
        /* whoever asked for the file waits for it (with port 0 it is the only way to learn the port) */
        mm_log_error(LOG, "cannot write the port file: %s", err.msg);
        wk_grpc_shutdown(g, 0);
        wk_sched_stop(s);
        wk_grpc_destroy(g);
        goto out;
    }

    g_sig_set = set;
    if (pthread_create(&g_sig_thread, NULL, signal_main, NULL) == 0) {
        pthread_detach(g_sig_thread);
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = forward_signal;
        sa.sa_mask = set;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
    } else { /* wait here instead; a second signal then cannot cut the drain short */
        mm_log_warn(LOG, "cannot start the signal thread: a second signal will not cut the drain short");
        int sig = 0;
        sigwait(&set, &sig);
        g_sig_first = sig;
    }

    pthread_mutex_lock(&g_sig_mu);
    while (!g_sig_first) pthread_cond_wait(&g_sig_cv, &g_sig_mu);
    mm_log_info(LOG, "signal %d: draining (no new calls; up to %lld s for running requests)", g_sig_first,
                (long long)(cli.drain_ms / 1000));
    g_sig_sched = s;
    wk_sched_drain(s, g_sig_cut ? 0 : cli.drain_ms);
    pthread_mutex_unlock(&g_sig_mu);
    wk_grpc_shutdown(g, cli.drain_ms + 5000); /* streams end once the scheduler finished or aborted them */
    wk_sched_wait_idle(s, 5000);
    /* stop the scheduler while the calls it may still hold are valid, then the server (whose late
     * completions may still reach the stopped scheduler, which answers them at once) */
    wk_sched_stop(s);
    /* gRPC core reports shutdown once every call's last batch is done, which is not yet when its bytes are on
     * the wire: give the transports a moment to flush the final statuses before the connections close, or a
     * client can see UNAVAILABLE after its last token */
    struct timespec linger = {.tv_sec = 0, .tv_nsec = 250 * 1000 * 1000};
    nanosleep(&linger, NULL);
    wk_grpc_destroy(g);
    mm_log_info(LOG, "drained; bye");
    rc = 0;
out:
    pthread_mutex_lock(&g_sig_mu);
    g_sig_sched = NULL;
    pthread_mutex_unlock(&g_sig_mu);
    wk_sched_destroy(s);
    wk_uploads_destroy(up);
    wk_engine_close(e);
    free(auth);
    free(tls_cert);
    if (tls_key) explicit_bzero(tls_key, strlen(tls_key));
    free(tls_key);
    return rc;
}
