/* Decode steps as CUDA graphs: recording, matching, capture and replay (wk_cuda_steps.h). */
#include "wk_cuda_steps.h"

#include <stdlib.h>
#include <string.h>

/* Segments remembered: a step is one segment, or two when an operation in the middle must run at once (the
 * selections copied out for the caller); a few more cover alternating batch shapes. */
#define WK_STEPS_SLOTS 6

struct bytes {
    uint8_t *p;
    size_t n, cap;
};

/* A segment seen before: its records followed by its key, and its graph once captured. */
struct slot {
    struct bytes seg;
    cudaGraphExec_t exec; /* NULL: seen once, not captured yet */
    uint64_t used;        /* last use, for replacement */
};

struct wk_steps {
    struct bytes cur; /* the pending segment: per operation [fn][n][args, padded to 8 bytes] */
    int n_ops;
    struct slot slot[WK_STEPS_SLOTS];
    uint64_t clock;
    struct wk_steps_stats st;
};

static int bytes_reserve(struct bytes *b, size_t more)
{
    if (b->n + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int bytes_add(struct bytes *b, const void *src, size_t n)
{
    if (bytes_reserve(b, n)) return -1;
    memcpy(b->p + b->n, src, n);
    b->n += n;
    return 0;
}

struct wk_steps *wk_steps_new(void)
{
    return calloc(1, sizeof(struct wk_steps));
}

static void slot_clear(struct slot *sl)
{
    if (sl->exec) cudaGraphExecDestroy(sl->exec);
    sl->exec = NULL;
    sl->seg.n = 0;
    sl->used = 0;
}

void wk_steps_free(struct wk_steps *s)
{
    if (!s) return;
    for (int i = 0; i < WK_STEPS_SLOTS; i++) {
        slot_clear(&s->slot[i]);
        free(s->slot[i].seg.p);
    }
    free(s->cur.p);
    free(s);
}

int wk_steps_push(struct wk_steps *s, wk_step_fn fn, const void *args, size_t n)
{
    static const uint8_t zero[8];
    const uint64_t n64 = n;
    const size_t pad = (8 - n % 8) % 8;
    if (bytes_reserve(&s->cur, sizeof fn + sizeof n64 + n + pad)) return -1;
    bytes_add(&s->cur, &fn, sizeof fn);
    bytes_add(&s->cur, &n64, sizeof n64);
    bytes_add(&s->cur, args, n);
    bytes_add(&s->cur, zero, pad);
    s->n_ops++;
    s->st.ops++;
    return 0;
}

int wk_steps_pending(const struct wk_steps *s)
{
    return s->n_ops;
}

static void run_all(struct wk_steps *s, void *ctx)
{
    size_t at = 0;
    while (at < s->cur.n) {
        wk_step_fn fn;
        uint64_t n;
        memcpy(&fn, s->cur.p + at, sizeof fn);
        memcpy(&n, s->cur.p + at + sizeof fn, sizeof n);
        at += sizeof fn + sizeof n;
        fn(ctx, s->cur.p + at); /* 8-byte aligned: every entry is a multiple of 8 bytes */
        at += (size_t)n + (8 - n % 8) % 8;
    }
}

static void forget_pending(struct wk_steps *s)
{
    s->cur.n = 0;
    s->n_ops = 0;
}

static struct slot *find(struct wk_steps *s, const void *key, size_t key_n)
{
    for (int i = 0; i < WK_STEPS_SLOTS; i++) {
        struct slot *sl = &s->slot[i];
        if (sl->seg.n == s->cur.n + key_n && sl->seg.n && !memcmp(sl->seg.p, s->cur.p, s->cur.n) &&
            !memcmp(sl->seg.p + s->cur.n, key, key_n))
            return sl;
    }
    return NULL;
}

/* Remember the pending segment (after it ran) in a free or the least recently used slot. */
static void remember(struct wk_steps *s, const void *key, size_t key_n)
{
    struct slot *best = &s->slot[0];
    for (int i = 0; i < WK_STEPS_SLOTS; i++) {
        struct slot *sl = &s->slot[i];
        if (!sl->seg.n) {
            best = sl;
            break;
        }
        if (sl->used < best->used) best = sl;
    }
    slot_clear(best);
    if (bytes_add(&best->seg, s->cur.p, s->cur.n) || bytes_add(&best->seg, key, key_n)) {
        best->seg.n = 0; /* out of memory: simply not remembered */
        return;
    }
    best->used = s->clock;
}

int wk_steps_run(struct wk_steps *s, void *ctx, cudaStream_t stream, const void *key, size_t key_n,
                 int graphs)
{
    if (!s->n_ops) return WK_STEPS_OK;
    s->clock++;
    struct slot *sl = graphs ? find(s, key, key_n) : NULL;
    if (sl && sl->exec) {
        if (cudaGraphLaunch(sl->exec, stream) == cudaSuccess) {
            sl->used = s->clock;
            s->st.replays++;
            forget_pending(s);
            return WK_STEPS_OK;
        }
        (void)cudaGetLastError();
        slot_clear(sl);
        sl = NULL;
    }
    if (sl) { /* second sighting: capture while recording the launches, then launch the graph */
        cudaGraph_t g = NULL;
        cudaGraphExec_t x = NULL;
        if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
            (void)cudaGetLastError();
            return WK_STEPS_CAPTURE_FAILED;
        }
        run_all(s, ctx);
        cudaError_t e = cudaStreamEndCapture(stream, &g);
        if (e == cudaSuccess && g) e = cudaGraphInstantiate(&x, g, 0);
        if (g) cudaGraphDestroy(g);
        if (e == cudaSuccess && x) e = cudaGraphLaunch(x, stream);
        if (e != cudaSuccess || !x) {
            if (x) cudaGraphExecDestroy(x);
            (void)cudaGetLastError();
            return WK_STEPS_CAPTURE_FAILED;
        }
        sl->exec = x;
        sl->used = s->clock;
        s->st.captures++;
        forget_pending(s);
        return WK_STEPS_OK;
    }
    run_all(s, ctx);
    s->st.eager++;
    if (graphs) remember(s, key, key_n);
    forget_pending(s);
    return WK_STEPS_OK;
}

void wk_steps_get_stats(const struct wk_steps *s, struct wk_steps_stats *out)
{
    *out = s->st;
}
