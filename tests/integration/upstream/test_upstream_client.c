/* The gRPC client against fake_worker.py on 127.0.0.1: unary calls, streaming, flow control, cancel
 * (Abort reaches the worker), a worker dying mid-stream, status mapping, deadlines, and the three ways a
 * tensor travels (inline, shared memory, UploadTensor) with byte-exact checks on the worker side. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "fake_worker.h"
#include "gw_upstream.h"
#include "gw_upstream_generate.h"
#include "gw_upstream_media.h"
#include "gw_upstream_shm.h"
#include "mmgw_test.h"
#include "test_loop.h"
#include "upstream_calls.h"

static struct test_loop *loop;
static struct gw_upstream *up;
static pthread_t main_thread;

/* ---- unary ---- */

static void test_unary(void)
{
    struct fake_worker w;
    const char *args[] = {"--id", "7", "--running", "3", "--waiting", "2", "--supports-shm", NULL};
    if (fake_worker_start(&w, "unary", 0, args) != 0) {
        CHECK(0);
        return;
    }
    struct gw_upstream_chan *ch = NULL;
    struct mm_err e;
    CHECK_EQ_INT(gw_upstream_chan_open(up, w.target, &ch, &e), MM_OK);
    CHECK(gw_upstream_chan_is_local(ch));
    struct gw_worker_info info;
    gw_upstream_chan_info(ch, &info);
    CHECK_EQ_INT(info.known, 0);

    struct unary_rec o;
    memset(&o, 0, sizeof(o));
    CHECK_EQ_INT(gw_upstream_model_info(ch, 5000, test_loop_executor(loop), unary_rec_cb, &o, &e), MM_OK);
    CHECK(test_loop_run(loop, unary_rec_done, &o, 10000));
    CHECK_EQ_INT(o.st.code, MM_OK);
    CHECK(pthread_equal(o.thread, main_thread));
    CHECK_STR(o.model_name, "fake-7");
    CHECK_EQ_INT(o.block_size, 4);
    gw_upstream_chan_info(ch, &info);
    CHECK_EQ_INT(info.known, 1);
    CHECK_EQ_INT(info.supports_shm, 1);
    CHECK_STR(info.model_name, "fake-7");

    memset(&o, 0, sizeof(o));
    CHECK_EQ_INT(gw_upstream_health(ch, 5000, test_loop_executor(loop), unary_rec_cb, &o, &e), MM_OK);
    CHECK(test_loop_run(loop, unary_rec_done, &o, 5000));
    CHECK_EQ_INT(o.healthy, 1);

    memset(&o, 0, sizeof(o));
    CHECK_EQ_INT(gw_upstream_load(ch, 5000, test_loop_executor(loop), unary_rec_cb, &o, &e), MM_OK);
    CHECK(test_loop_run(loop, unary_rec_done, &o, 5000));
    CHECK_EQ_INT(o.running, 3);
    CHECK_EQ_INT(o.waiting, 2);

    memset(&o, 0, sizeof(o));
    CHECK_EQ_INT(gw_upstream_abort(ch, "nothing", 5000, test_loop_executor(loop), unary_rec_cb, &o, &e),
                 MM_OK);
    CHECK(test_loop_run(loop, unary_rec_done, &o, 5000));
    CHECK_EQ_INT(o.found, 1);
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"abort\"", "\"nothing\"", NULL), 1);

    gw_upstream_chan_close(ch);
    fake_worker_kill(&w);
    fake_worker_cleanup(&w);
}

/* ---- streaming ---- */

static int32_t start(struct gw_upstream_chan *ch, const char *id, struct stream_rec *s,
                     const struct gw_gen_opts *opts, Mmgw__Worker__V1__MultimodalItem **items, size_t n_items)
{
    uint32_t ids[3] = {11, 12, 13};
    Mmgw__Worker__V1__GenerateRequest req = MMGW__WORKER__V1__GENERATE_REQUEST__INIT;
    req.request_id = (char *)id;
    req.input_ids = ids;
    req.n_input_ids = 3;
    req.mm_inputs = items;
    req.n_mm_inputs = n_items;
    struct mm_err e;
    int32_t rc = gw_upstream_generate(ch, &req, opts, test_loop_executor(loop), &stream_rec_callbacks, s,
                                      &s->call, &e);
    if (rc != MM_OK) fprintf(stderr, "generate: %s\n", e.msg);
    return rc;
}

static void test_stream_basic(void)
{
    struct fake_worker w;
    const char *args[] = {"--id", "3", "--tokens", "5", NULL};
    if (fake_worker_start(&w, "stream", 0, args) != 0) {
        CHECK(0);
        return;
    }
    struct gw_upstream_chan *ch;
    struct mm_err e;
    CHECK_EQ_INT(gw_upstream_chan_open(up, w.target, &ch, &e), MM_OK);
    struct stream_rec s;
    memset(&s, 0, sizeof(s));
    CHECK_EQ_INT(start(ch, "basic-1", &s, NULL, NULL, 0), MM_OK);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
    CHECK_EQ_INT(s.st.code, MM_OK);
    CHECK_EQ_INT(s.chunks, 5);
    CHECK_EQ_INT(s.completes, 1);
    CHECK_EQ_INT(s.reported, 6);
    CHECK_STR(s.finish, "length");
    CHECK(pthread_equal(s.thread, main_thread));
    for (int i = 0; i < 5 && i < s.n_tokens; i++) CHECK_EQ_INT(s.tokens[i], 3000 + i);
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"generate\"", "[11, 12, 13]", NULL), 1);

    /* many concurrent streams on one channel, each complete and in order */
    enum { N = 16 };
    struct stream_rec many[N];
    memset(many, 0, sizeof(many));
    for (int i = 0; i < N; i++) {
        char id[32];
        snprintf(id, sizeof(id), "many-%d", i);
        CHECK_EQ_INT(start(ch, id, &many[i], NULL, NULL, 0), MM_OK);
    }
    CHECK(stream_recs_done(loop, many, N, 10000));
    for (int i = 0; i < N; i++)
        if (many[i].done != 1)
            fprintf(stderr, "stream %d: done %d responses %d\n", i, many[i].done, many[i].responses);
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(many[i].st.code, MM_OK);
        CHECK_EQ_INT(many[i].chunks, 5);
        CHECK_EQ_INT(many[i].n_tokens > 4 ? many[i].tokens[4] : 0, 3004);
    }
    gw_upstream_chan_close(ch);
    fake_worker_kill(&w);
    fake_worker_cleanup(&w);
}

static void test_cancel_aborts(void)
{
    struct fake_worker w;
    const char *args[] = {"--tokens", "2000", "--delay-ms", "10", NULL};
    if (fake_worker_start(&w, "cancel", 0, args) != 0) {
        CHECK(0);
        return;
    }
    struct gw_upstream_chan *ch;
    struct mm_err e;
    CHECK_EQ_INT(gw_upstream_chan_open(up, w.target, &ch, &e), MM_OK);
    struct stream_rec s;
    memset(&s, 0, sizeof(s));
    s.cancel_after = 3;
    CHECK_EQ_INT(start(ch, "cancel-me", &s, NULL, NULL, 0), MM_OK);
    struct fake_worker_logwait lw = {&w, "\"abort\"", "\"cancel-me\""};
    CHECK_MSG(test_loop_run(loop, fake_worker_log_seen, &lw, 5000), "Abort never reached the worker");
    /* the worker's stream stops (gRPC stops pulling its generator once the call is cancelled) */
    test_loop_run(loop, NULL, NULL, 100);
    long y1 = health_yielded(loop, ch);
    test_loop_run(loop, NULL, NULL, 300);
    long y2 = health_yielded(loop, ch);
    CHECK_MSG(y1 >= 2 && y1 == y2, "the worker kept generating after cancel (%ld -> %ld)", y1, y2);
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"finished\"", "\"cancel-me\"", NULL), 0);
    test_loop_run(loop, NULL, NULL, 100);
    CHECK_EQ_INT(s.responses, 3); /* nothing delivered after cancel */
    CHECK_EQ_INT(s.done, 0);      /* and no on_done either */
    gw_upstream_chan_close(ch);
    fake_worker_kill(&w);
    fake_worker_cleanup(&w);
}

static void test_failures(void)
{
    struct mm_err e;
    /* a worker that dies mid-stream: the error comes after the chunks it sent */
    struct fake_worker w;
    const char *dies[] = {"--tokens", "10", "--die-after", "2", NULL};
    if (fake_worker_start(&w, "dies", 0, dies) == 0) {
        struct gw_upstream_chan *ch;
        CHECK_EQ_INT(gw_upstream_chan_open(up, w.target, &ch, &e), MM_OK);
        struct stream_rec s;
        memset(&s, 0, sizeof(s));
        CHECK_EQ_INT(start(ch, "dies-1", &s, NULL, NULL, 0), MM_OK);
        CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
        CHECK_EQ_INT(s.chunks, 2);
        CHECK_EQ_INT(s.completes, 0);
        CHECK_MSG(s.st.code == MM_UNAVAILABLE || s.st.code == MM_ERROR, "code %d: %s", s.st.code,
                  s.st.message);
        CHECK(strstr(s.st.message, w.target) != NULL);
        gw_upstream_chan_close(ch);
        fake_worker_kill(&w);
        fake_worker_cleanup(&w);
    } else {
        CHECK(0);
    }
    /* status codes map through the table, with the worker's message */
    struct {
        const char *grpc;
        int32_t mm;
    } codes[] = {{"INVALID_ARGUMENT", MM_INVALID},
                 {"RESOURCE_EXHAUSTED", MM_EXHAUSTED},
                 {"UNAVAILABLE", MM_UNAVAILABLE}};
    for (size_t i = 0; i < 3; i++) {
        const char *fail[] = {"--fail-all", "--fail-code", codes[i].grpc, NULL};
        if (fake_worker_start(&w, "fails", 0, fail) != 0) {
            CHECK(0);
            continue;
        }
        struct gw_upstream_chan *ch;
        CHECK_EQ_INT(gw_upstream_chan_open(up, w.target, &ch, &e), MM_OK);
        struct stream_rec s;
        memset(&s, 0, sizeof(s));
        CHECK_EQ_INT(start(ch, "fails-1", &s, NULL, NULL, 0), MM_OK);
        CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
        CHECK_MSG(s.st.code == codes[i].mm, "%s -> %d (%s)", codes[i].grpc, s.st.code, s.st.message);
        CHECK(strstr(s.st.message, "scripted failure") != NULL);
        CHECK(strstr(s.st.message, codes[i].grpc) != NULL);
        CHECK_EQ_INT(s.responses, 0);
        gw_upstream_chan_close(ch);
        fake_worker_kill(&w);
        fake_worker_cleanup(&w);
    }
    /* nobody listening */
    char target[64];
    snprintf(target, sizeof(target), "127.0.0.1:%d", unused_port());
    struct gw_upstream_chan *ch;
    CHECK_EQ_INT(gw_upstream_chan_open(up, target, &ch, &e), MM_OK);
    struct stream_rec s;
    memset(&s, 0, sizeof(s));
    CHECK_EQ_INT(start(ch, "nobody", &s, NULL, NULL, 0), MM_OK);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
    CHECK_EQ_INT(s.st.code, MM_UNAVAILABLE);
    gw_upstream_chan_close(ch);

    /* a deadline */
    const char *slow[] = {"--tokens", "100", "--delay-ms", "100", NULL};
    if (fake_worker_start(&w, "slow", 0, slow) == 0) {
        CHECK_EQ_INT(gw_upstream_chan_open(up, w.target, &ch, &e), MM_OK);
        memset(&s, 0, sizeof(s));
        struct gw_gen_opts o = {.timeout_ms = 400};
        CHECK_EQ_INT(start(ch, "slow-1", &s, &o, NULL, 0), MM_OK);
        CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
        CHECK_EQ_INT(s.st.code, MM_TIMEOUT);
        CHECK(s.chunks >= 1 && s.chunks < 100);
        gw_upstream_chan_close(ch);
        fake_worker_kill(&w);
        fake_worker_cleanup(&w);
    }
}

/* A paused consumer stops the worker: its stream stalls far short of the end, and resumes to the end. */
static void test_flow_control(void)
{
    struct fake_worker w;
    const char *args[] = {"--tokens", "3000", "--chunk-ids", "1024", NULL};
    if (fake_worker_start(&w, "flow", 0, args) != 0) {
        CHECK(0);
        return;
    }
    struct gw_upstream_chan *ch;
    struct mm_err e;
    CHECK_EQ_INT(gw_upstream_chan_open(up, w.target, &ch, &e), MM_OK);
    struct stream_rec s;
    memset(&s, 0, sizeof(s));
    s.pause_after = 1;
    CHECK_EQ_INT(start(ch, "flow-1", &s, NULL, NULL, 0), MM_OK);
    test_loop_run(loop, NULL, NULL, 1000);
    long y1 = health_yielded(loop, ch);
    test_loop_run(loop, NULL, NULL, 400);
    long y2 = health_yielded(loop, ch);
    CHECK_EQ_INT(s.responses, 1); /* nothing delivered while paused */
    CHECK_MSG(y1 >= 0 && y1 < 3000, "the worker sent %ld of 3000 chunks to a paused consumer", y1);
    CHECK_MSG(y2 == y1, "the worker kept sending while paused (%ld -> %ld)", y1, y2);
    printf("flow control: worker stalled after %ld of 3000 4-KiB chunks while the consumer was paused\n", y1);
    gw_gen_resume(s.call);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 30000));
    CHECK_EQ_INT(s.st.code, MM_OK);
    CHECK_EQ_INT(s.chunks, 3000);
    CHECK_EQ_INT(s.completes, 1);
    gw_upstream_chan_close(ch);
    fake_worker_kill(&w);
    fake_worker_cleanup(&w);
}

/* ---- media ---- */

static uint8_t *pattern(size_t n, unsigned seed)
{
    uint8_t *p = malloc(n);
    if (!p) return NULL;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (uint8_t)(x >> 24);
    }
    return p;
}

struct item_buf {
    Mmgw__Worker__V1__MultimodalItem item;
    Mmgw__Worker__V1__Tensor tensor;
    int64_t shape[2];
    int64_t grid[3];
};

static void make_item(struct item_buf *b, uint8_t *data, size_t len)
{
    mmgw__worker__v1__multimodal_item__init(&b->item);
    mmgw__worker__v1__tensor__init(&b->tensor);
    b->tensor.dtype = MMGW__WORKER__V1__DTYPE__BF16;
    b->shape[0] = (int64_t)(len / 2352);
    b->shape[1] = 1176;
    b->tensor.shape = b->shape;
    b->tensor.n_shape = 2;
    b->tensor.data.data = data;
    b->tensor.data.len = len;
    b->item.modality = MMGW__WORKER__V1__MODALITY__IMAGE;
    b->item.pixel_values = &b->tensor;
}

/* One item of len pattern bytes (seed), and the crc line the fake worker logs for it. */
struct one_item {
    uint8_t *px;
    struct item_buf ib;
    Mmgw__Worker__V1__MultimodalItem *items[1];
    char crc[32];
};

static void one_item_make(struct one_item *o, size_t len, unsigned seed)
{
    o->px = pattern(len, seed);
    make_item(&o->ib, o->px, len);
    o->items[0] = &o->ib.item;
    snprintf(o->crc, sizeof(o->crc), "\"crc\": %lu", crc32(0, o->px, (uInt)len));
}

static int count_shm_objects(void)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "mmgw-%ld-", (long)getpid());
    DIR *d = opendir("/dev/shm");
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0 && !strstr(de->d_name, "-lock");
    closedir(d);
    return n;
}

struct upload_out {
    int done;
    struct gw_call_status st;
    uint64_t received;
};

static void on_up(void *arg, const struct gw_call_status *st, uint64_t received)
{
    struct upload_out *u = arg;
    u->done = 1;
    u->st = *st;
    u->received = received;
}

static int upload_done(void *arg)
{
    return ((struct upload_out *)arg)->done;
}

/* A channel to w whose worker info (supports_shm, limits) is in, as the router's first health round
 * leaves it. */
static struct gw_upstream_chan *open_with_info(const struct fake_worker *w)
{
    struct gw_upstream_chan *ch = NULL;
    struct mm_err e;
    CHECK_EQ_INT(gw_upstream_chan_open(up, w->target, &ch, &e), MM_OK);
    struct unary_rec o;
    memset(&o, 0, sizeof(o));
    CHECK_EQ_INT(gw_upstream_model_info(ch, 5000, test_loop_executor(loop), unary_rec_cb, &o, &e), MM_OK);
    CHECK(test_loop_run(loop, unary_rec_done, &o, 10000));
    return ch;
}

/* A worker on this host with a /dev/shm of its own (a container, a Kubernetes sidecar): it answers NOT_FOUND
 * for our object; the status says so, and the channel sends tensors inline from then on. */
static void test_shm_refused(void)
{
    char dir[] = "/tmp/mmgw-noshm-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    struct fake_worker w;
    const char *args[] = {"--supports-shm", "--shm-dir", dir, "--tokens", "2", NULL};
    if (fake_worker_start(&w, "noshm", 0, args) != 0) {
        CHECK(0);
        rmdir(dir);
        return;
    }
    struct gw_upstream_chan *ch = open_with_info(&w);
    CHECK(gw_upstream_chan_shm_usable(ch));

    struct one_item it;
    one_item_make(&it, 1u << 20, 4);
    struct stream_rec s;
    memset(&s, 0, sizeof(s));
    CHECK_EQ_INT(start(ch, "noshm-1", &s, NULL, it.items, 1), MM_OK);
    struct gw_gen_transport tr;
    gw_gen_transport(s.call, &tr);
    CHECK_EQ_INT(tr.shm_items, 1);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
    CHECK_EQ_INT(s.st.code, MM_NOT_FOUND);
    CHECK_EQ_INT(s.st.shm_refused, 1);
    CHECK(!gw_upstream_chan_shm_usable(ch));
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"noshm-1\"", "shm_missing", NULL), 1);
    test_loop_run(loop, NULL, NULL, 50);
    CHECK_EQ_INT(count_shm_objects(), 0); /* a failed call's object is unlinked, not pooled */

    /* the next call on the channel goes inline and works */
    memset(&s, 0, sizeof(s));
    CHECK_EQ_INT(start(ch, "noshm-2", &s, NULL, it.items, 1), MM_OK);
    gw_gen_transport(s.call, &tr);
    CHECK_EQ_INT(tr.shm_items, 0);
    CHECK_EQ_INT(tr.inline_items, 1);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
    CHECK_MSG(s.st.code == MM_OK && s.st.shm_refused == 0, "%s", s.st.message);
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"noshm-2\"", "\"transport\": \"inline\"", it.crc, NULL), 1);

    free(it.px);
    gw_upstream_chan_close(ch);
    fake_worker_kill(&w);
    fake_worker_cleanup(&w);
    rmdir(dir);
}

/* Entries of /dev/shm whose names start with "mmgw-<pid>-" (locks too). */
static int count_pid_entries(long pid)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "mmgw-%ld-", pid);
    DIR *d = opendir("/dev/shm");
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* A regular 0600 object /dev/shm/<name> (no leading slash), 1 byte. */
static void touch_shm(const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
    CHECK(fd >= 0 && write(fd, "x", 1) == 1);
    if (fd >= 0) close(fd);
}

static void unlink_shm(const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    unlink(path);
}

/* A process that died with objects out (here: a child that created one and _exit'ed, without atexit) leaves
 * them in /dev/shm with its lock object free; the next process's first use removes them, and nothing else:
 * not a live process's objects whatever lock-like names lie around ("mmgw-0<pid>-lock" once meant process
 * <pid>'s), not old objects with our own pid (a predecessor with the same pid, whose leftovers once made
 * every O_EXCL create fail). Runs before this process uses shared memory itself. */
static void test_shm_sweep(void)
{
    static uint8_t b[4096];
    pid_t dead = fork();
    if (dead == 0) {
        struct gw_shm_tensor *t;
        struct mm_err e;
        _exit(gw_shm_tensor_create(b, sizeof b, &t, &e) == MM_OK ? 0 : 1);
    }
    int status = 0;
    CHECK(dead > 0 && waitpid(dead, &status, 0) == dead && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ_INT(count_pid_entries(dead), 2); /* its object and its lock */

    int go[2], ready[2];
    CHECK(pipe(go) == 0 && pipe(ready) == 0);
    pid_t live = fork();
    if (live == 0) {
        struct gw_shm_tensor *t;
        struct mm_err e;
        char c = gw_shm_tensor_create(b, sizeof b, &t, &e) == MM_OK ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) < 0) _exit(2);
        gw_shm_tensor_release(t, 1);
        exit(0); /* atexit drains the pool */
    }
    char c = 0;
    CHECK(live > 0 && read(ready[0], &c, 1) == 1 && c == 'y');
    CHECK_EQ_INT(count_pid_entries(live), 2);

    char forged[3][64], self_old[2][64], self_new[2][64];
    snprintf(forged[0], sizeof forged[0], "mmgw-0%ld-lock", (long)live);
    snprintf(forged[1], sizeof forged[1], "mmgw-+%ld-lock", (long)live);
    snprintf(forged[2], sizeof forged[2], "mmgw-0%ld-0123456789abcdef-lock", (long)live);
    snprintf(self_old[0], sizeof self_old[0], "mmgw-%ld-lock", (long)getpid());
    snprintf(self_old[1], sizeof self_old[1], "mmgw-%ld-0", (long)getpid());
    snprintf(self_new[0], sizeof self_new[0], "mmgw-%ld-0123456789abcdef-lock", (long)getpid());
    snprintf(self_new[1], sizeof self_new[1], "mmgw-%ld-0123456789abcdef-0", (long)getpid());
    for (int i = 0; i < 3; i++) touch_shm(forged[i]);
    for (int i = 0; i < 2; i++) touch_shm(self_old[i]), touch_shm(self_new[i]);

    struct gw_shm_tensor *t = NULL;
    struct mm_err e;
    CHECK_MSG(gw_shm_tensor_create(b, sizeof b, &t, &e) == MM_OK, "%s", e.msg);
    CHECK_EQ_INT(count_pid_entries(dead), 0);
    CHECK_EQ_INT(count_pid_entries(live), 2); /* alive: untouched */
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/%s", self_new[1]);
    CHECK(access(path, F_OK) != 0); /* a dead predecessor with our pid: removed */
    gw_shm_tensor_release(t, 0);

    CHECK(write(go[1], "g", 1) == 1);
    CHECK(waitpid(live, &status, 0) == live && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ_INT(count_pid_entries(live), 0);
    for (int i = 0; i < 3; i++) unlink_shm(forged[i]);
    for (int i = 0; i < 2; i++) unlink_shm(self_old[i]), unlink_shm(self_new[i]);
    close(go[0]), close(go[1]), close(ready[0]), close(ready[1]);
    CHECK_EQ_INT(count_shm_objects(), 0);
}

/* A forked child that exits through exit() runs the atexit drain: it must leave its parent's objects alone.
 */
static void test_shm_fork_exit(void)
{
    static uint8_t b[4096];
    struct gw_shm_tensor *t = NULL;
    struct mm_err e;
    CHECK_EQ_INT(gw_shm_tensor_create(b, sizeof b, &t, &e), MM_OK);
    gw_shm_tensor_release(t, 1);
    CHECK_EQ_INT(count_shm_objects(), 1);
    pid_t pid = fork();
    if (pid == 0) exit(0);
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_EQ_INT(count_shm_objects(), 1);
    CHECK_EQ_INT(count_pid_entries(getpid()), 2); /* and our lock */
    gw_shm_pool_drain();
    CHECK_EQ_INT(count_shm_objects(), 0);
}

/* The pool keeps at most 64 MiB (and an eighth of /dev/shm); what does not fit is unlinked on release. */
static void test_shm_pool_cap(void)
{
    enum { N = 72 };
    static uint8_t b[1u << 20];
    struct gw_shm_tensor *t[N];
    struct mm_err e;
    int made = 0;
    /* as many as /dev/shm takes (all 72 on a host; a small container's may refuse some) */
    for (int i = 0; i < N && gw_shm_tensor_create(b, sizeof b, &t[made], &e) == MM_OK; i++) made++;
    CHECK(made >= 1);
    for (int i = 0; i < made; i++) gw_shm_tensor_release(t[i], 1);
    size_t objects = 0, bytes = 0;
    gw_shm_pool_stats(&objects, &bytes);
    CHECK_MSG(bytes <= (64u << 20) && bytes == objects * (sizeof b + GW_SHM_DATA_OFFSET) && objects >= 1,
              "pooled %zu objects, %zu bytes", objects, bytes);
    CHECK_EQ_INT(count_shm_objects(), (int)objects);
    gw_shm_pool_drain();
    CHECK_EQ_INT(count_shm_objects(), 0);
}

/* An object is 0600, starts with its key and holds the tensor at GW_SHM_DATA_OFFSET; a pooled object gets a
 * new key with each tensor (the worker that read the last one knew the old key). */
static void test_shm_key(void)
{
    static uint8_t b[8192];
    for (size_t i = 0; i < sizeof b; i++) b[i] = (uint8_t)(i * 13 + 1);
    struct gw_shm_tensor *t = NULL;
    struct mm_err e;
    CHECK_EQ_INT(gw_shm_tensor_create(b, sizeof b, &t, &e), MM_OK);
    if (!t) return;
    uint8_t key1[GW_SHM_KEY_BYTES], head[GW_SHM_KEY_BYTES], back[sizeof b];
    memcpy(key1, gw_shm_tensor_key(t), sizeof key1);
    char name[GW_SHM_NAME_MAX];
    snprintf(name, sizeof name, "%s", gw_shm_tensor_name(t));
    int fd = shm_open(name, O_RDONLY, 0);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK(pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head && memcmp(head, key1, sizeof head) == 0);
    CHECK(pread(fd, back, sizeof back, GW_SHM_DATA_OFFSET) == (ssize_t)sizeof back &&
          memcmp(back, b, sizeof b) == 0);
    close(fd);
    gw_shm_tensor_release(t, 1);
    CHECK_EQ_INT(gw_shm_tensor_create(b, sizeof b, &t, &e), MM_OK);
    if (!t) return;
    CHECK(strcmp(name, gw_shm_tensor_name(t)) == 0); /* the pooled object */
    CHECK(memcmp(key1, gw_shm_tensor_key(t), sizeof key1) != 0);
    gw_shm_tensor_release(t, 0);
    CHECK_EQ_INT(count_shm_objects(), 0);
}

static void test_media(void)
{
    struct fake_worker w;
    const char *args[] = {"--supports-shm", "--tokens", "2", NULL};
    if (fake_worker_start(&w, "media", 0, args) != 0) {
        CHECK(0);
        return;
    }
    struct gw_upstream_chan *ch = open_with_info(&w);

    size_t small_len = 2352 * 4, big_len = 2352 * 2600; /* 9 KiB and ~6 MiB */
    uint8_t *small = pattern(small_len, 1), *big = pattern(big_len, 2);
    struct item_buf ib[2];
    make_item(&ib[0], small, small_len);
    make_item(&ib[1], big, big_len);
    Mmgw__Worker__V1__MultimodalItem *items[2] = {&ib[0].item, &ib[1].item};
    char crc_small[32], crc_big[32], bytes_big[32];
    snprintf(crc_small, sizeof(crc_small), "\"crc\": %lu", crc32(0, small, (uInt)small_len));
    snprintf(crc_big, sizeof(crc_big), "\"crc\": %lu", crc32(0, big, (uInt)big_len));
    snprintf(bytes_big, sizeof(bytes_big), "\"bytes\": %zu", big_len);

    /* local worker with shared memory: the big tensor goes through /dev/shm, unlinked afterwards */
    struct stream_rec s;
    memset(&s, 0, sizeof(s));
    CHECK_EQ_INT(start(ch, "media-shm", &s, NULL, items, 2), MM_OK);
    struct gw_gen_transport tr;
    gw_gen_transport(s.call, &tr);
    CHECK_EQ_INT(tr.inline_items, 1);
    CHECK_EQ_INT(tr.shm_items, 1);
    CHECK_EQ_INT(tr.upload_items, 0);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
    CHECK_MSG(s.st.code == MM_OK, "%s", s.st.message);
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"media-shm\"", "\"transport\": \"inline\"", crc_small, NULL), 1);
    CHECK_EQ_INT(
        fake_worker_log_count(&w, "\"media-shm\"", "\"transport\": \"shm\"", crc_big, bytes_big, NULL), 1);
    /* answered OK: the object is kept for the next tensor, and drained (unlinked) on demand */
    test_loop_run(loop, NULL, NULL, 50);
    size_t pooled = 0;
    gw_shm_pool_stats(&pooled, NULL);
    CHECK_EQ_INT(pooled, 1);
    CHECK_EQ_INT(count_shm_objects(), 1);
    gw_shm_pool_drain();
    CHECK_EQ_INT(count_shm_objects(), 0);

    /* a mid-size tensor (1 MiB, fits inline) also goes by shared memory to a local worker, and inline when
     * shm_min_bytes is above it */
    struct one_item mid;
    one_item_make(&mid, 1u << 20, 3);
    memset(&s, 0, sizeof(s));
    CHECK_EQ_INT(start(ch, "media-mid-shm", &s, NULL, mid.items, 1), MM_OK);
    gw_gen_transport(s.call, &tr);
    CHECK_EQ_INT(tr.shm_items, 1);
    CHECK_EQ_INT(tr.inline_items, 0);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
    CHECK_MSG(s.st.code == MM_OK, "%s", s.st.message);
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"media-mid-shm\"", "\"transport\": \"shm\"", mid.crc, NULL), 1);
    /* a second tensor of the size takes the pooled object: still one object, other bytes delivered */
    test_loop_run(loop, NULL, NULL, 50);
    CHECK_EQ_INT(count_shm_objects(), 1);
    struct one_item mid2;
    one_item_make(&mid2, 1u << 20, 5);
    memset(&s, 0, sizeof(s));
    CHECK_EQ_INT(start(ch, "media-mid-shm2", &s, NULL, mid2.items, 1), MM_OK);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
    CHECK_MSG(s.st.code == MM_OK, "%s", s.st.message);
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"media-mid-shm2\"", "\"transport\": \"shm\"", mid2.crc, NULL),
                 1);
    test_loop_run(loop, NULL, NULL, 50);
    CHECK_EQ_INT(count_shm_objects(), 1);
    free(mid2.px);
    memset(&s, 0, sizeof(s));
    struct gw_gen_opts mid_inline = {.shm_min_bytes = 2u << 20};
    CHECK_EQ_INT(start(ch, "media-mid-inline", &s, &mid_inline, mid.items, 1), MM_OK);
    gw_gen_transport(s.call, &tr);
    CHECK_EQ_INT(tr.inline_items, 1);
    CHECK_EQ_INT(tr.shm_items, 0);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
    CHECK_MSG(s.st.code == MM_OK, "%s", s.st.message);
    CHECK_EQ_INT(
        fake_worker_log_count(&w, "\"media-mid-inline\"", "\"transport\": \"inline\"", mid.crc, NULL), 1);
    /* shared memory refused (here: a file size limit below the tensor, EFBIG from posix_fallocate; the
     * pooled object that would serve it drained first): the tensor goes inline instead, and no object is
     * left behind */
    gw_shm_pool_drain();
    CHECK_EQ_INT(count_shm_objects(), 0);
    struct rlimit fsize_was;
    getrlimit(RLIMIT_FSIZE, &fsize_was);
    struct rlimit small_files = {.rlim_cur = 512u << 10, .rlim_max = fsize_was.rlim_max};
    void (*xfsz_was)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &small_files) == 0);
    memset(&s, 0, sizeof(s));
    CHECK_EQ_INT(start(ch, "media-mid-noshm", &s, NULL, mid.items, 1), MM_OK);
    setrlimit(RLIMIT_FSIZE, &fsize_was);
    signal(SIGXFSZ, xfsz_was);
    gw_gen_transport(s.call, &tr);
    CHECK_EQ_INT(tr.inline_items, 1);
    CHECK_EQ_INT(tr.shm_items, 0);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
    CHECK_MSG(s.st.code == MM_OK, "%s", s.st.message);
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"media-mid-noshm\"", "\"transport\": \"inline\"", mid.crc, NULL),
                 1);
    test_loop_run(loop, NULL, NULL, 50);
    CHECK_EQ_INT(count_shm_objects(), 0);
    free(mid.px);

    /* without shared memory: an UploadTensor stream first, the Generate names the upload */
    memset(&s, 0, sizeof(s));
    struct gw_gen_opts opts = {.no_shm = 1, .upload_chunk_bytes = 256 * 1024};
    CHECK_EQ_INT(start(ch, "media-up", &s, &opts, items, 2), MM_OK);
    gw_gen_transport(s.call, &tr);
    CHECK_EQ_INT(tr.upload_items, 1);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 20000));
    CHECK_MSG(s.st.code == MM_OK, "%s", s.st.message);
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"upload\"", "media-up-1-", crc_big, NULL), 1);
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"media-up\"", "\"transport\": \"upload\"", crc_big, NULL), 1);

    /* a low inline limit sends even the small one out of band */
    memset(&s, 0, sizeof(s));
    struct gw_gen_opts tiny = {.no_shm = 1, .inline_max_bytes = 1000};
    CHECK_EQ_INT(start(ch, "media-tiny", &s, &tiny, items, 2), MM_OK);
    gw_gen_transport(s.call, &tr);
    CHECK_EQ_INT(tr.upload_items, 2);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 20000));
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"media-tiny\"", "\"transport\": \"upload\"", crc_small, NULL),
                 1);

    /* cancel while uploading: no callback, the caller's buffer is free to go */
    memset(&s, 0, sizeof(s));
    uint8_t *huge = pattern(32u << 20, 3);
    struct item_buf hb;
    make_item(&hb, huge, 32u << 20);
    Mmgw__Worker__V1__MultimodalItem *hitems[1] = {&hb.item};
    struct gw_gen_opts small_chunks = {.no_shm = 1, .upload_chunk_bytes = 64 * 1024};
    CHECK_EQ_INT(start(ch, "media-cancel", &s, &small_chunks, hitems, 1), MM_OK);
    test_loop_run(loop, NULL, NULL, 30);
    gw_gen_cancel(s.call);
    memset(huge, 0, 32u << 20);
    free(huge);
    test_loop_run(loop, NULL, NULL, 300);
    CHECK_EQ_INT(s.done, 0);
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"generate\"", "\"media-cancel\"", NULL), 0);

    /* an F32 tensor travels as BF16 (round to nearest even), unless asked to keep F32 */
    size_t nf = 2352;
    float *f32 = malloc(nf * sizeof(float));
    uint16_t *want = malloc(nf * sizeof(uint16_t));
    for (size_t i = 0; i < nf; i++) {
        f32[i] = ((float)i - 1000.0f) / 3.0f;
        uint32_t u;
        memcpy(&u, &f32[i], 4);
        want[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    struct item_buf fb;
    make_item(&fb, (uint8_t *)f32, nf * sizeof(float));
    fb.tensor.dtype = MMGW__WORKER__V1__DTYPE__F32;
    Mmgw__Worker__V1__MultimodalItem *fitems[1] = {&fb.item};
    char crc_bf16[32], bytes_bf16[32];
    snprintf(crc_bf16, sizeof(crc_bf16), "\"crc\": %lu", crc32(0, (const uint8_t *)want, (uInt)(nf * 2)));
    snprintf(bytes_bf16, sizeof(bytes_bf16), "\"bytes\": %zu", nf * 2);
    memset(&s, 0, sizeof(s));
    CHECK_EQ_INT(start(ch, "media-f32", &s, NULL, fitems, 1), MM_OK);
    gw_gen_transport(s.call, &tr);
    CHECK_EQ_INT(tr.converted_items, 1);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"media-f32\"", crc_bf16, bytes_bf16, "\"dtype\": 2", NULL), 1);
    memset(&s, 0, sizeof(s));
    struct gw_gen_opts keep = {.keep_f32 = 1};
    CHECK_EQ_INT(start(ch, "media-keep", &s, &keep, fitems, 1), MM_OK);
    CHECK(test_loop_run(loop, stream_rec_done, &s, 10000));
    snprintf(bytes_bf16, sizeof(bytes_bf16), "\"bytes\": %zu", nf * 4);
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"media-keep\"", bytes_bf16, "\"dtype\": 1", NULL), 1);
    free(f32);
    free(want);

    /* the upload call on its own */
    struct mm_err e;
    struct upload_out u;
    memset(&u, 0, sizeof(u));
    CHECK_EQ_INT(gw_upstream_upload(ch, "direct-1", big, big_len, 100000, 10000, test_loop_executor(loop),
                                    on_up, &u, NULL, &e),
                 MM_OK);
    CHECK(test_loop_run(loop, upload_done, &u, 10000));
    CHECK_EQ_INT(u.st.code, MM_OK);
    CHECK_EQ_INT(u.received, big_len);
    CHECK_EQ_INT(fake_worker_log_count(&w, "\"upload\"", "\"direct-1\"", crc_big, NULL), 1);

    free(small);
    free(big);
    gw_upstream_chan_close(ch);
    fake_worker_kill(&w);
    fake_worker_cleanup(&w);
}

/* Destroying the client with a stream in flight cancels it and returns. */
static void test_destroy_in_flight(void)
{
    struct fake_worker w;
    const char *args[] = {"--tokens", "1000", "--delay-ms", "20", NULL};
    if (fake_worker_start(&w, "destroy", 0, args) != 0) {
        CHECK(0);
        return;
    }
    struct gw_upstream_chan *ch;
    struct mm_err e;
    CHECK_EQ_INT(gw_upstream_chan_open(up, w.target, &ch, &e), MM_OK);
    struct stream_rec s;
    memset(&s, 0, sizeof(s));
    CHECK_EQ_INT(start(ch, "destroy-1", &s, NULL, NULL, 0), MM_OK);
    test_loop_run(loop, NULL, NULL, 200);
    gw_upstream_chan_close(ch);
    gw_upstream_destroy(up);
    up = NULL;
    test_loop_run(loop, stream_rec_done, &s, 2000);
    CHECK_EQ_INT(s.done, 1);
    CHECK_EQ_INT(s.st.code, MM_CANCELLED);
    fake_worker_kill(&w);
    fake_worker_cleanup(&w);
}

int main(void)
{
    main_thread = pthread_self();
    printf("-- test_shm_sweep\n"); /* first: it forks, before any thread exists */
    fflush(stdout);
    test_shm_sweep();
    test_shm_pool_cap();
    test_shm_key();
    test_shm_fork_exit();
    loop = test_loop_new();
    struct mm_err e;
    if (!loop || gw_upstream_create(NULL, &up, &e) != MM_OK) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    printf("-- test_unary\n");
    fflush(stdout);
    test_unary();
    printf("-- test_stream_basic\n");
    fflush(stdout);
    test_stream_basic();
    printf("-- test_cancel_aborts\n");
    fflush(stdout);
    test_cancel_aborts();
    printf("-- test_failures\n");
    fflush(stdout);
    test_failures();
    printf("-- test_flow_control\n");
    fflush(stdout);
    test_flow_control();
    printf("-- test_media\n");
    fflush(stdout);
    test_media();
    test_shm_refused();
    printf("-- test_destroy_in_flight\n");
    fflush(stdout);
    test_destroy_in_flight();
    gw_shm_pool_drain(); /* every object is pooled or gone: none leaked */
    CHECK_EQ_INT(count_shm_objects(), 0);
    if (up) gw_upstream_destroy(up);
    test_loop_free(loop);
    return test_done();
}
