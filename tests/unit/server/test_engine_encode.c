/* What the worker's media encoder relies on in the real runtime (worker/runtime) on a generated tiny
 * checkpoint: after wk_engine_set_encode_threads the engine says concurrent_encode, and media encoding
 * on one thread while another thread runs prefill and decode steps gives exactly the results each gives alone
 * (no shared thread pool, stream or scratch between them); the cancel flag stops an encode with
 * MM_CANCELLED. The CPU backend by default; `cuda` as the argument runs it on the CUDA backend's vision
 * context (its own stream beside the steps' graphs; skipped without a GPU). Run it under ThreadSanitizer to
 * check for data races (docs/design/worker-service.md, "Media encoding"). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mkdemo.h"
#include "mm_dtype.h"
#include "mmgw_test.h"
#include "wk_engine.h"

enum { PROMPT = 200, CHUNK = 64, DECODE = 12 };

static struct wk_engine *E;
static int32_t V, H, BACKEND = WK_BACKEND_CPU;

static void prompt(int32_t *ids, int32_t n, uint32_t seed)
{
    for (int32_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = 10 + (int32_t)((seed >> 8) % 8000);
    }
}

/* A prompt prefilled in chunks, then greedy decode steps; every step's last-row logits into out
 * [(chunks + DECODE) * V]. Returns the number of logit rows written. */
static int32_t run_text(float *out)
{
    int32_t ids[PROMPT + DECODE];
    prompt(ids, PROMPT, 7);
    struct wk_seq *s = NULL;
    struct mm_err err = {0};
    CHECK_EQ_INT(wk_seq_create(E, &s, &err), MM_OK);
    int32_t rows = 0;
    for (int32_t o = 0; o < PROMPT; o += CHUNK) {
        int32_t k = PROMPT - o < CHUNK ? PROMPT - o : CHUNK;
        struct wk_step_item it = {.seq = s,
                                  .ids = ids + o,
                                  .n = k,
                                  .logits_mode = WK_LOGITS_LAST,
                                  .logits = out + (int64_t)rows * V};
        CHECK_EQ_INT(wk_engine_forward(E, &it, 1, &err), MM_OK);
        rows++;
    }
    for (int32_t d = 0; d < DECODE; d++) {
        const float *l = out + (int64_t)(rows - 1) * V;
        int32_t best = 0;
        for (int32_t v = 1; v < V; v++)
            if (l[v] > l[best]) best = v;
        ids[PROMPT + d] = best;
        struct wk_step_item it = {.seq = s,
                                  .ids = ids + PROMPT + d,
                                  .n = 1,
                                  .logits_mode = WK_LOGITS_LAST,
                                  .logits = out + (int64_t)rows * V};
        CHECK_EQ_INT(wk_engine_forward(E, &it, 1, &err), MM_OK);
        rows++;
    }
    wk_seq_free(E, s);
    return rows;
}

struct enc_arg {
    const struct wk_media *m;
    const float *want;
    int64_t want_tokens;
    int32_t reps, same, done;
};

static void *encode_main(void *p)
{
    struct enc_arg *a = p;
    for (int32_t r = 0; r < a->reps; r++) {
        float *emb = NULL;
        int64_t nt = 0;
        struct mm_err err = {0};
        int32_t rc = wk_engine_encode_media(E, a->m, &emb, &nt, &err);
        if (rc == MM_OK && nt == a->want_tokens &&
            memcmp(emb, a->want, sizeof(float) * (size_t)(nt * H)) == 0)
            a->same++;
        free(emb);
    }
    __atomic_store_n(&a->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* A bf16 image (what the gateway sends) of gh x gw patches valued sin(i f); *px receives its pixels. */
static struct wk_media bf16_image(int64_t gh, int64_t gw, double f, uint16_t **px)
{
    const int64_t n = gh * gw, row = 3 * 2 * 14 * 14;
    uint16_t *p = malloc(sizeof(uint16_t) * (size_t)(n * row));
    for (int64_t i = 0; p && i < n * row; i++) p[i] = mm_f32_to_bf16((float)sin((double)i * f));
    *px = p;
    return (struct wk_media){.kind = 0,
                             .dtype = MM_DT_BF16,
                             .pixels = p,
                             .n_rows = n,
                             .row_len = row,
                             .grid_t = 1,
                             .grid_h = gh,
                             .grid_w = gw};
}

static void test_concurrent(void)
{
    /* a 32 x 32 patch image: 1,024 patches, 256 embeddings */
    const int64_t n = 32 * 32;
    uint16_t *px = NULL;
    const struct wk_media m = bf16_image(32, 32, 0.013, &px);
    struct mm_err err = {0};
    float *want = NULL;
    int64_t nt = 0;
    CHECK_EQ_INT(wk_engine_encode_media(E, &m, &want, &nt, &err), MM_OK);
    CHECK_EQ_INT(nt, n / 4);
    const int32_t max_rows = PROMPT / CHUNK + 1 + DECODE;
    float *ref = malloc(sizeof(float) * (size_t)max_rows * (size_t)V);
    float *got = malloc(sizeof(float) * (size_t)max_rows * (size_t)V);
    const int32_t rows = run_text(ref);

    struct enc_arg a = {.m = &m, .want = want, .want_tokens = nt, .reps = 3};
    pthread_t th;
    CHECK_EQ_INT(pthread_create(&th, NULL, encode_main, &a), 0);
    int32_t runs = 0, equal = 0;
    /* keep stepping until the encoder is done (at least once): the steps overlap every encode */
    while (runs == 0 || !__atomic_load_n(&a.done, __ATOMIC_SEQ_CST)) {
        CHECK_EQ_INT(run_text(got), rows);
        equal += memcmp(got, ref, sizeof(float) * (size_t)rows * (size_t)V) == 0;
        runs++;
    }
    pthread_join(th, NULL);
    CHECK_MSG(a.same == 3, "%d of 3 encodes beside the steps equal the one alone", a.same);
    CHECK_MSG(equal == runs, "%d of %d step sequences beside the encoder equal the one alone", equal, runs);
    CHECK_EQ_INT(wk_engine_free_pages(E), wk_engine_info(E)->pages_total);

    /* cancelled before it starts: no embeddings, MM_CANCELLED */
    int32_t cancel = 1;
    float *emb = NULL;
    CHECK_EQ_INT(wk_engine_encode_media_cancellable(E, &m, &cancel, &emb, &nt, &err), MM_CANCELLED);
    CHECK(emb == NULL);
    cancel = 0;
    /* the context is fine afterwards */
    CHECK_EQ_INT(wk_engine_encode_media_cancellable(E, &m, &cancel, &emb, &nt, &err), MM_OK);
    CHECK(emb && memcmp(emb, want, sizeof(float) * (size_t)(nt * H)) == 0);
    free(emb);
    free(want);
    free(ref);
    free(got);
    free(px);
}

/* Prompt [0, KP) with an image's nt embeddings at [KAT, KAT + nt), prefilled in chunks of KC (the image split
 * over two chunks), the last row's logits of every chunk into out. mode 0: the rows as embeds / use_embed
 * (host), 1: as host spans, 2: as kept spans (rows in the backend's memory). */
enum { KP = 100, KAT = 20, KC = 48 };

static void run_media(struct wk_engine *e, const float *rows, int64_t nt, int mode, float *out)
{
    const int32_t Ve = wk_engine_info(e)->vocab_size;
    const int64_t He = wk_engine_info(e)->hidden_size;
    int32_t ids[KP];
    prompt(ids, KP, 19);
    for (int64_t i = KAT; i < KAT + nt; i++) ids[i] = wk_engine_info(e)->image_token_id;
    float *emb = calloc((size_t)(KC * He), sizeof(float));
    uint8_t use[KC];
    struct wk_seq *s = NULL;
    struct mm_err err = {0};
    CHECK_EQ_INT(wk_seq_create(e, &s, &err), MM_OK);
    for (int32_t o = 0, r = 0; o < KP; o += KC, r++) {
        const int32_t k = KP - o < KC ? KP - o : KC;
        const int64_t lo = o > KAT ? o : KAT, hi = o + k < KAT + nt ? o + k : KAT + nt;
        struct wk_embed_span sp = {(int32_t)(lo - o), (int32_t)(hi - lo), rows + (lo - KAT) * He, mode == 2};
        memset(use, 0, sizeof use);
        for (int64_t i = lo; i < hi && mode == 0; i++) { /* kept rows (mode 2) may be device memory */
            use[i - o] = 1;
            memcpy(emb + (i - o) * He, rows + (i - KAT) * He, sizeof(float) * (size_t)He);
        }
        struct wk_step_item it = {
            .seq = s, .ids = ids + o, .n = k, .logits_mode = WK_LOGITS_LAST, .logits = out + (int64_t)r * Ve};
        if (lo < hi && mode == 0) it.embeds = emb, it.use_embed = use;
        if (lo < hi && mode > 0) it.spans = &sp, it.n_spans = 1;
        CHECK_EQ_INT(wk_engine_forward(e, &it, 1, &err), MM_OK);
    }
    wk_seq_free(e, s);
    free(emb);
}

/* Embeddings kept where the encode made them (a GPU's memory; the CPU backend's heap): the same values as
 * the host's, and a prefill reading them from there (kept spans) gives the logits of the host rows, bit for
 * bit. The engine counts what it keeps, and past its budget the result goes to the host. place: where e
 * keeps them (its vision context's memory, or its own when it has none). */
static void test_kept(struct wk_engine *e, int32_t place)
{
    const int64_t n = 16 * 16;
    const int64_t He = wk_engine_info(e)->hidden_size;
    const int32_t Ve = wk_engine_info(e)->vocab_size, chunks = (KP + KC - 1) / KC;
    uint16_t *px = NULL;
    const struct wk_media m = bf16_image(16, 16, 0.011, &px);
    struct mm_err err = {0};
    float *want = NULL;
    int64_t nt = 0;
    CHECK_EQ_INT(wk_engine_encode_media(e, &m, &want, &nt, &err), MM_OK);
    CHECK_EQ_INT(nt, n / 4);
    const int64_t bytes = nt * He * (int64_t)sizeof(float);
    CHECK_EQ_INT(wk_engine_media_kept(e), 0);
    struct wk_embeds k = {0};
    CHECK_EQ_INT(wk_engine_encode_media_kept(e, &m, NULL, &k, &err), MM_OK);
    CHECK_EQ_INT(k.place, place);
    CHECK(k.data != NULL && k.n_tokens == nt);
    CHECK_EQ_INT(wk_engine_media_kept(e), bytes);
    float *lg[3];
    for (int mode = 0; mode < 3; mode++) {
        lg[mode] = malloc(sizeof(float) * (size_t)chunks * (size_t)Ve);
        if (want && k.data) run_media(e, mode == 2 ? k.data : want, nt, mode, lg[mode]);
    }
    for (int mode = 1; mode < 3; mode++)
        CHECK_MSG(!memcmp(lg[0], lg[mode], sizeof(float) * (size_t)chunks * (size_t)Ve),
                  "the image's rows as %s spans: logits differ from use_embed's",
                  mode == 1 ? "host" : "kept");
    wk_engine_embeds_free(e, &k);
    CHECK(k.data == NULL && k.n_tokens == 0);
    CHECK_EQ_INT(wk_engine_media_kept(e), 0);

    /* over the budget: on the host, the same values; a failed encode keeps nothing */
    wk_engine_set_media_keep(e, bytes - 1);
    CHECK_EQ_INT(wk_engine_encode_media_kept(e, &m, NULL, &k, &err), MM_OK);
    CHECK_EQ_INT(k.place, WK_EMBEDS_HOST);
    CHECK(k.data && want && k.n_tokens == nt && !memcmp(k.data, want, (size_t)bytes));
    CHECK_EQ_INT(wk_engine_media_kept(e), 0);
    wk_engine_embeds_free(e, &k);
    wk_engine_set_media_keep(e, WK_MEDIA_KEEP_DEFAULT);
    int32_t cancel = 1;
    CHECK_EQ_INT(wk_engine_encode_media_kept(e, &m, &cancel, &k, &err), MM_CANCELLED);
    CHECK(k.data == NULL);
    CHECK_EQ_INT(wk_engine_media_kept(e), 0);
    for (int mode = 0; mode < 3; mode++) free(lg[mode]);
    free(want);
    free(px);
}

/* Encoding through the separate vision context equals encoding on the engine's own threads. */
static void test_same_as_inline(const char *dir)
{
    struct wk_engine_opts o = {.backend = BACKEND, .threads = 2, .cache_pages = 64};
    struct wk_engine *inl = NULL;
    struct mm_err err = {0};
    CHECK_EQ_INT(wk_engine_open(dir, &o, &inl, &err), MM_OK);
    if (!inl) return;
    CHECK_EQ_INT(wk_engine_info(inl)->concurrent_encode, 0);
    const int64_t n = 2 * 8 * 12, row = 3 * 2 * 14 * 14;
    float *px = malloc(sizeof(float) * (size_t)(n * row));
    for (int64_t i = 0; i < n * row; i++) px[i] = (float)cos((double)i * 0.007);
    struct wk_media m = {.kind = 1,
                         .dtype = MM_DT_F32,
                         .pixels = px,
                         .n_rows = n,
                         .row_len = row,
                         .grid_t = 2,
                         .grid_h = 8,
                         .grid_w = 12};
    float *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    /* the CPU backend's vision attention blocks its queries by the scratch it has grown so far, which changes
     * the summation order: give the engine's own context the history E's vision context has (the 32 x 32
     * image) so that both compute the same way */
    const int64_t bn = 32 * 32;
    float *big = calloc((size_t)(bn * row), sizeof(float));
    struct wk_media bm = {.kind = 0,
                          .dtype = MM_DT_F32,
                          .pixels = big,
                          .n_rows = bn,
                          .row_len = row,
                          .grid_t = 1,
                          .grid_h = 32,
                          .grid_w = 32};
    CHECK_EQ_INT(wk_engine_encode_media(inl, &bm, &a, &na, &err), MM_OK);
    free(a);
    free(big);
    CHECK_EQ_INT(wk_engine_encode_media(inl, &m, &a, &na, &err), MM_OK);
    CHECK_EQ_INT(wk_engine_encode_media(E, &m, &b, &nb, &err), MM_OK);
    CHECK_EQ_INT(na, nb);
    double worst = 0;
    for (int64_t i = 0; a && b && i < na * H; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]) / (1.0 + fabs((double)a[i])));
    CHECK_MSG(a && b && worst == 0.0, "separate vision context differs by %g", worst);
    free(a);
    free(b);
    free(px);
    test_kept(inl, WK_EMBEDS_ENGINE); /* no vision context: kept in the engine's own memory */
    wk_engine_close(inl);
}

/* Pixels in bf16 or f16 (the gateway sends bf16) give the embeddings of the same values in f32, bit for bit:
 * on CUDA they cross in 16 bits and are widened on the device (upload_typed), with odd counts of values too.
 */
static void test_typed_pixels(void)
{
    const int64_t row = 3 * 2 * 14 * 14;
    /* 576 x 1176 16-bit values: 1.35 MB, through the CUDA backend's pinned staging; 8 x 1176 */
    static const int64_t grids[2][3] = {{1, 24, 24}, {2, 2, 2}};
    for (int gi = 0; gi < 2; gi++) {
        const int64_t n = grids[gi][0] * grids[gi][1] * grids[gi][2];
        uint16_t *p16 = malloc(sizeof(uint16_t) * (size_t)(n * row) + 2);
        float *pw = malloc(sizeof(float) * (size_t)(n * row));
        for (int f16 = 0; f16 < 2; f16++) {
            /* from the second element of the buffer: a source not 8-byte aligned takes the scalar kernel */
            uint16_t *src = p16 + gi;
            for (int64_t i = 0; i < n * row; i++) {
                const double v = sin((double)i * 0.013) * (i % 5 == 0 ? 3e-6 : 1.5);
                src[i] = f16 ? mm_f32_to_f16((float)v) : mm_f32_to_bf16((float)v);
                pw[i] = f16 ? mm_f16_to_f32(src[i]) : mm_bf16_to_f32(src[i]);
            }
            struct wk_media mw = {.kind = 0,
                                  .dtype = MM_DT_F32,
                                  .pixels = pw,
                                  .n_rows = n,
                                  .row_len = row,
                                  .grid_t = grids[gi][0],
                                  .grid_h = grids[gi][1],
                                  .grid_w = grids[gi][2]};
            struct wk_media mh = mw;
            mh.dtype = f16 ? MM_DT_F16 : MM_DT_BF16;
            mh.pixels = src;
            float *a = NULL, *b = NULL;
            int64_t na = 0, nb = 0;
            struct mm_err err = {0};
            CHECK_EQ_INT(wk_engine_encode_media(E, &mw, &a, &na, &err), MM_OK);
            CHECK_EQ_INT(wk_engine_encode_media(E, &mh, &b, &nb, &err), MM_OK);
            CHECK(na == n / 4 && nb == na);
            CHECK_MSG(a && b && !memcmp(a, b, sizeof(float) * (size_t)(na * H)),
                      "%s pixels (%lld patches): embeddings differ from f32's", f16 ? "f16" : "bf16",
                      (long long)n);
            free(a);
            free(b);
        }
        free(p16);
        free(pw);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "cuda")) BACKEND = WK_BACKEND_CUDA;
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/mmgw_encode_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    struct mk_demo_opts o;
    struct mm_err err = {0};
    mk_demo_defaults(&o);
    CHECK_EQ_INT(mk_demo_write(dir, &o, &err), MM_OK);
    struct wk_engine_opts eo = {.backend = BACKEND, .threads = 2, .cache_pages = 64, .max_batch_tokens = 256};
    const int32_t orc = wk_engine_open(dir, &eo, &E, &err);
    if (orc == MM_UNAVAILABLE && BACKEND == WK_BACKEND_CUDA) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd)) fprintf(stderr, "cleanup failed\n");
        test_skip(err.msg); /* no GPU here: the GPU machine runs it */
    }
    CHECK_EQ_INT(orc, MM_OK);
    if (E) {
        CHECK_EQ_INT(wk_engine_info(E)->concurrent_encode, 0);
        CHECK_EQ_INT(wk_engine_set_encode_threads(E, 1, &err), MM_OK);
        CHECK_EQ_INT(wk_engine_set_encode_threads(E, 1, &err), MM_INVALID); /* once */
        V = wk_engine_info(E)->vocab_size;
        H = wk_engine_info(E)->hidden_size;
        CHECK_EQ_INT(wk_engine_info(E)->concurrent_encode, 1);
        test_concurrent();
        test_same_as_inline(dir);
        test_typed_pixels();
        test_kept(E, WK_EMBEDS_VISION);
        wk_engine_close(E);
    } else {
        fprintf(stderr, "%s\n", err.msg);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "cleanup failed\n");
    return test_done();
}
