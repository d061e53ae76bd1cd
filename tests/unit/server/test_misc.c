/* Small pieces of the worker service: command line, log-probabilities, status mapping. */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mmgw_test.h"
#include "wk_cli.h"
#include "wk_engine.h"
#include "wk_grpc_status.h"
#include "wk_shm.h"
#include "mm_logprobs.h"

static void test_cli(void)
{
    struct wk_cli c;
    struct mm_err err = {0};
    char *a1[] = {"w",
                  "--model",
                  "/m",
                  "--listen",
                  "[::1]:0",
                  "--threads",
                  "3",
                  "--max-queue",
                  "7",
                  "--cache-pages",
                  "99",
                  "--backend",
                  "cuda",
                  "--step-tokens",
                  "64",
                  "--no-shm",
                  "--drain-timeout",
                  "2"};
    CHECK_EQ_INT(wk_cli_parse(18, a1, &c, &err), MM_OK);
    CHECK_STR(c.model, "/m");
    CHECK_STR(c.listen, "[::1]:0");
    CHECK_EQ_INT(c.threads, 3);
    CHECK_EQ_INT(c.max_queue, 7);
    CHECK_EQ_INT(c.cache_pages, 99);
    CHECK_EQ_INT(c.backend, WK_BACKEND_CUDA);
    CHECK_EQ_INT(c.step_tokens, 64);
    CHECK_EQ_INT(c.allow_shm, 0);
    CHECK_EQ_INT(c.drain_ms, 2000);
    char *a2[] = {"w", "--listen", "x:1"};
    CHECK_EQ_INT(wk_cli_parse(3, a2, &c, &err), MM_INVALID); /* no --model */
    char *a3[] = {"w", "--model", "m", "--threads", "-2"};
    CHECK_EQ_INT(wk_cli_parse(5, a3, &c, &err), MM_INVALID);
    CHECK(strstr(err.msg, "--threads") != NULL);
    char *a4[] = {"w", "--model", "m", "--bogus", "1"};
    CHECK_EQ_INT(wk_cli_parse(5, a4, &c, &err), MM_INVALID);
    char *a5[] = {"w", "--model", "m", "--backend", "tpu"};
    CHECK_EQ_INT(wk_cli_parse(5, a5, &c, &err), MM_INVALID);
    char *a6[] = {"w", "--model"};
    CHECK_EQ_INT(wk_cli_parse(2, a6, &c, &err), MM_INVALID);
    /* gRPC would take 65536 as 0 (any free port), 99999 as 34463 and a missing port as 443 */
    const char *bad_listen[] = {"127.0.0.1:65536", "127.0.0.1:99999", "127.0.0.1",
                                ":50051",          "127.0.0.1:",      "127.0.0.1:+80",
                                "127.0.0.1:-1",    "127.0.0.1: 80",   "[::1]:131072"};
    for (size_t i = 0; i < sizeof(bad_listen) / sizeof(bad_listen[0]); i++) {
        char *al[] = {"w", "--model", "m", "--listen", (char *)bad_listen[i]};
        CHECK_EQ_INT(wk_cli_parse(5, al, &c, &err), MM_INVALID);
        CHECK(strstr(err.msg, "--listen") != NULL);
    }
    const char *good_listen[] = {"127.0.0.1:0", "localhost:65535", "[::1]:50051", "unix:/tmp/w.sock"};
    for (size_t i = 0; i < sizeof(good_listen) / sizeof(good_listen[0]); i++) {
        char *al[] = {"w", "--model", "m", "--listen", (char *)good_listen[i]};
        CHECK_EQ_INT(wk_cli_parse(5, al, &c, &err), MM_OK);
    }
    char *a7[] = {"w", "--help"};
    CHECK_EQ_INT(wk_cli_parse(2, a7, &c, &err), MM_OK);
    CHECK(c.help);
    /* the media encoder: as many threads as the model by default (-1), 0 = encode inside the steps */
    char *a8[] = {"w", "--model", "m"};
    CHECK_EQ_INT(wk_cli_parse(3, a8, &c, &err), MM_OK);
    CHECK_EQ_INT(c.encode_threads, -1);
    CHECK_EQ_INT(c.host_draw, 0); /* flat rows drawn where the logits lie unless --host-draw */
    char *a8b[] = {"w", "--model", "m", "--host-draw"};
    CHECK_EQ_INT(wk_cli_parse(4, a8b, &c, &err), MM_OK);
    CHECK_EQ_INT(c.host_draw, 1);
    char *a9[] = {"w", "--model", "m", "--encode-threads", "0"};
    CHECK_EQ_INT(wk_cli_parse(5, a9, &c, &err), MM_OK);
    CHECK_EQ_INT(c.encode_threads, 0);
    char *a10[] = {"w", "--model", "m", "--encode-threads", "-1"};
    CHECK_EQ_INT(wk_cli_parse(5, a10, &c, &err), MM_INVALID);
    CHECK(strstr(err.msg, "--encode-threads") != NULL);
    /* embeddings kept where they were encoded: 256 MiB by default, 0 = never */
    CHECK_EQ_INT(wk_cli_parse(3, a8, &c, &err), MM_OK);
    CHECK_EQ_INT(c.media_keep_bytes, WK_MEDIA_KEEP_DEFAULT);
    char *a11[] = {"w", "--model", "m", "--media-keep-mb", "0"},
         *a12[] = {"w", "--model", "m", "--media-keep-mb", "64"},
         *a13[] = {"w", "--model", "m", "--media-keep-mb", "-3"};
    CHECK_EQ_INT(wk_cli_parse(5, a11, &c, &err), MM_OK);
    CHECK_EQ_INT(c.media_keep_bytes, 0);
    CHECK_EQ_INT(wk_cli_parse(5, a12, &c, &err), MM_OK);
    CHECK_EQ_INT(c.media_keep_bytes, (int64_t)64 << 20);
    CHECK_EQ_INT(wk_cli_parse(5, a13, &c, &err), MM_INVALID);
    CHECK(strstr(err.msg, "--media-keep-mb") != NULL);
}

static void test_logprobs(void)
{
    float x[6] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 2.0f};
    double s = 0;
    for (int i = 0; i < 6; i++) s += exp(x[i]);
    float lse = mm_logsumexp(x, 6);
    CHECK_NEAR(lse, log(s), 1e-5);
    int32_t ids[3];
    float lp[3];
    mm_top_logprobs(x, 6, lse, 3, ids, lp);
    CHECK_EQ_INT(ids[0], 1); /* tie with 3: the lower id first */
    CHECK_EQ_INT(ids[1], 3);
    CHECK_EQ_INT(ids[2], 5);
    CHECK_NEAR(lp[2], 2.0 - log(s), 1e-5);
    float big[3] = {1000.0f, 1000.0f, -INFINITY}; /* stable for large logits */
    CHECK_NEAR(mm_logsumexp(big, 3), 1000.0 + log(2.0), 1e-3);
}

static void test_status(void)
{
    CHECK_EQ_INT(wk_grpc_status_from_mm(MM_OK), GRPC_STATUS_OK);
    CHECK_EQ_INT(wk_grpc_status_from_mm(MM_INVALID), GRPC_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_INT(wk_grpc_status_from_mm(MM_EXHAUSTED), GRPC_STATUS_RESOURCE_EXHAUSTED);
    CHECK_EQ_INT(wk_grpc_status_from_mm(MM_CANCELLED), GRPC_STATUS_CANCELLED);
    CHECK_EQ_INT(wk_grpc_status_from_mm(MM_UNAVAILABLE), GRPC_STATUS_UNAVAILABLE);
    CHECK_EQ_INT(wk_grpc_status_from_mm(MM_NOT_FOUND), GRPC_STATUS_NOT_FOUND);
    CHECK_EQ_INT(wk_grpc_status_from_mm(MM_ERROR), GRPC_STATUS_INTERNAL);
    CHECK_EQ_INT(wk_grpc_status_from_mm(-999), GRPC_STATUS_INTERNAL);
}

/* Shared memory is for callers on this host only. */
static void test_shm_peer(void)
{
    CHECK(wk_shm_peer_local("ipv4:127.0.0.1:41234"));
    CHECK(wk_shm_peer_local("ipv4:127.8.9.10:1"));
    CHECK(wk_shm_peer_local("ipv6:[::1]:5000"));
    CHECK(wk_shm_peer_local("ipv6:[::ffff:127.0.0.1]:5000"));
    CHECK(wk_shm_peer_local("unix:/tmp/worker.sock"));
    CHECK(wk_shm_peer_local("unix-abstract:mmgw"));
    CHECK(!wk_shm_peer_local("ipv4:10.0.0.7:41234"));
    CHECK(!wk_shm_peer_local("ipv4:128.0.0.1:1"));
    CHECK(!wk_shm_peer_local("ipv4:1.127.0.1:1"));
    CHECK(!wk_shm_peer_local("ipv6:[::1234]:5000"));
    CHECK(!wk_shm_peer_local("ipv6:[::ffff:10.0.0.1]:5000"));
    CHECK(!wk_shm_peer_local("ipv6:[2001:db8::1]:5000"));
    CHECK(!wk_shm_peer_local(""));
    CHECK(!wk_shm_peer_local(NULL));
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "wk_shm_map waited on a FIFO\n";
    ssize_t n = write(2, msg, sizeof msg - 1);
    (void)n;
    _exit(1);
}

static const uint8_t key[WK_SHM_KEY_BYTES] = "0123456789abcde";

static int32_t map(const char *name, uint64_t off, uint64_t len, const void **data, void **h,
                   struct mm_err *err)
{
    return wk_shm_map(name, key, sizeof key, off, len, data, h, err);
}

/* A regular object named name, 4096 bytes starting with key, mode 0600 (fd left open, or -1). */
static int make_object(const char *name)
{
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0 && (ftruncate(fd, 4096) != 0 || pwrite(fd, key, sizeof key, 0) != (ssize_t)sizeof key)) {
        close(fd);
        shm_unlink(name);
        fd = -1;
    }
    CHECK(fd >= 0);
    return fd;
}

/* The worker opens only regular objects of its own user, named like the gateway's, and never waits: a local
 * client must not make it read another program's object, hang on a FIFO, or map an object another user can
 * truncate under it (SIGBUS). */
static void test_shm_map_refuses(void)
{
    const void *data;
    void *h;
    struct mm_err err = {0};
    char name[64], path[80];
    snprintf(name, sizeof name, "/mmgw-test-fifo-%d", (int)getpid());
    snprintf(path, sizeof path, "/dev/shm%s", name);
    if (mkfifo(path, 0600) == 0) {
        signal(SIGALRM, on_alarm);
        alarm(5);
        CHECK_EQ_INT(map(name, 16, 1, &data, &h, &err), MM_INVALID);
        alarm(0);
        unlink(path);
    }
    CHECK_EQ_INT(map("/..", 0, 1, &data, &h, &err), MM_INVALID); /* /dev */
    CHECK_EQ_INT(map("/.", 0, 1, &data, &h, &err), MM_INVALID);  /* /dev/shm */
    CHECK_EQ_INT(map("/mmgw-/x", 0, 1, &data, &h, &err), MM_INVALID);

    snprintf(name, sizeof name, "/other-test-%d", (int)getpid()); /* another program's object */
    int fd = make_object(name);
    CHECK_EQ_INT(map(name, 16, 1, &data, &h, &err), MM_INVALID);
    CHECK(h == NULL && data == NULL);
    if (fd >= 0) close(fd);
    shm_unlink(name);

    snprintf(name, sizeof name, "/mmgw-test-mode-%d", (int)getpid());
    fd = make_object(name);
    if (fd < 0) return;
    CHECK_EQ_INT(map(name, 16, 4080, &data, &h, &err), MM_OK);
    wk_shm_unmap(h);
    /* another local client sees the name in /dev/shm, not the key */
    uint8_t wrong[WK_SHM_KEY_BYTES];
    memcpy(wrong, key, sizeof wrong);
    wrong[15] ^= 1;
    CHECK_EQ_INT(wk_shm_map(name, wrong, sizeof wrong, 16, 4080, &data, &h, &err), MM_NOT_FOUND);
    CHECK_EQ_INT(wk_shm_map(name, NULL, 0, 16, 4080, &data, &h, &err), MM_NOT_FOUND);
    CHECK_EQ_INT(wk_shm_map(name, key, 8, 16, 4080, &data, &h, &err), MM_NOT_FOUND);
    CHECK_EQ_INT(map(name, 0, 4096, &data, &h, &err), MM_INVALID); /* the tensor may not overlap the key */
    CHECK(fchmod(fd, 0622) == 0); /* others could truncate it under our mapping */
    CHECK_EQ_INT(map(name, 16, 4080, &data, &h, &err), MM_INVALID);
    CHECK(strstr(err.msg, "writable") != NULL);
    if (geteuid() == 0) { /* root opens anything: the owner decides */
        CHECK(fchmod(fd, 0600) == 0 && fchown(fd, 65534, (gid_t)-1) == 0);
    } else { /* a sender of another user: its 0600 object cannot be opened */
        CHECK(fchmod(fd, 0) == 0);
    }
    CHECK_EQ_INT(map(name, 16, 4080, &data, &h, &err), MM_NOT_FOUND);
    close(fd);
    shm_unlink(name);
}

int main(void)
{
    test_shm_peer();
    test_shm_map_refuses();
    test_cli();
    test_logprobs();
    test_status();
    return test_done();
}
