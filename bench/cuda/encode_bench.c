/* What a media encode costs the requests already decoding, on the CUDA backend: a batch of sequences decodes
 * greedily (one token each per step) while images are encoded
 *   - alone: no encode (the baseline step time);
 *   - inline: on the engine's thread between two steps, as the worker does without a media encoder (every
 *     running stream waits for the whole encode: the step that carries it takes step + encode);
 *   - beside: on a second thread through the vision context (wk_engine_set_encode_threads), as the worker's
 *     media encoder does: the steps go on and share the GPU with the encode.
 * Reports per mode the median, 99th percentile and largest gap between two consecutive steps' ends (what a
 * streaming client sees between tokens) and the encode time per image. Needs a checkpoint with a vision
 * tower.
 *
 *   encode_bench --model DIR [--ctx 4096] [--batch 16] [--patches 48] [--images 4] [--steps 200]
 *                [--backend cuda|cpu] [--beside 0|1]
 *
 * --patches P: a P x P patch image (P even; M3's largest image is 48 x 48 patches = 576 tokens).
 * --beside 0: no "beside" phase, so that MMGW_CUDA_OP_TIMING's totals for the vision context hold only the
 * encodes that had the GPU to themselves (2 warm-up + --images).
 * --prompts R (default 0): then R rounds of an image prompt's first token (64 text tokens, the image, 64 text
 * tokens: encode through the vision context, then one prefill), three ways per round, interleaved:
 *   - staged: the host embeddings copied into a buffer of the chunk's rows and handed over by use_embed (the
 *     worker's path before embeddings were kept);
 *   - host: the host embeddings handed over as a span (wk_engine_set_media_keep 0);
 *   - kept: the embeddings left in device memory and read there (the default).
 * Medians of encode, prefill and the sum.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mm_dtype.h"
#include "mm_status.h"
#include "wk_engine.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static struct wk_engine *E;
static struct wk_media M;
static int32_t V;

struct side {
    int32_t images, done;
    double ms; /* encode time, summed */
    int32_t failed;
};

static int32_t encode_one(double *ms)
{
    float *emb = NULL;
    int64_t nt = 0;
    struct mm_err err = {0};
    double t = now_ms();
    int32_t rc = wk_engine_encode_media(E, &M, &emb, &nt, &err);
    *ms = now_ms() - t;
    if (rc) fprintf(stderr, "encode_bench: encode: %s\n", err.msg);
    free(emb);
    return rc;
}

static void *side_main(void *p)
{
    struct side *s = p;
    for (int32_t i = 0; i < s->images; i++) {
        double ms = 0;
        if (encode_one(&ms)) s->failed = 1;
        s->ms += ms;
    }
    __atomic_store_n(&s->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* one greedy step of every sequence */
static int32_t step(struct wk_seq **seqs, int32_t B, int32_t *next)
{
    struct wk_step_item it[64];
    for (int32_t s = 0; s < B; s++) {
        memset(&it[s], 0, sizeof it[s]);
        it[s].seq = seqs[s], it[s].ids = &next[s], it[s].n = 1, it[s].logits_mode = WK_LOGITS_ARGMAX;
        it[s].token = -1;
    }
    struct mm_err err = {0};
    int32_t rc = wk_engine_forward(E, it, B, &err);
    if (rc) fprintf(stderr, "encode_bench: step: %s\n", err.msg);
    for (int32_t s = 0; s < B; s++) next[s] = it[s].token >= 0 ? it[s].token : 0;
    return rc;
}

/* One image prompt's first token: encode, then the prefill with the image at [64, 64 + nt). mode 0 staged,
 * 1 host span, 2 kept span. */
static int32_t prompt_once(int32_t mode, const int32_t *ids, int64_t L, double *enc_ms, double *pf_ms)
{
    struct mm_err err = {0};
    const int64_t H = wk_engine_info(E)->hidden_size;
    wk_engine_set_media_keep(E, mode == 2 ? WK_MEDIA_KEEP_DEFAULT : 0);
    double t0 = now_ms();
    struct wk_embeds k = {0};
    int32_t rc = wk_engine_encode_media_kept(E, &M, NULL, &k, &err);
    double t1 = now_ms();
    struct wk_seq *s = NULL;
    if (!rc) rc = wk_seq_create(E, &s, &err);
    float *rows = NULL;
    uint8_t *use = NULL;
    struct wk_step_item it = {.seq = s, .ids = ids, .n = (int32_t)L, .logits_mode = WK_LOGITS_ARGMAX};
    struct wk_embed_span sp = {64, (int32_t)k.n_tokens, k.data, k.place != WK_EMBEDS_HOST};
    if (!rc && mode == 0) { /* as the scheduler did: the chunk's rows, the image's copied in */
        rows = malloc(sizeof(float) * (size_t)(L * H));
        use = calloc((size_t)L, 1);
        if (!rows || !use) rc = MM_NOMEM;
        if (!rc) {
            memcpy(rows + 64 * H, k.data, sizeof(float) * (size_t)(k.n_tokens * H));
            memset(use + 64, 1, (size_t)k.n_tokens);
            it.embeds = rows, it.use_embed = use;
        }
    } else {
        it.spans = &sp, it.n_spans = 1;
    }
    if (!rc && (mode == 2) != (k.place != WK_EMBEDS_HOST)) {
        fprintf(stderr, "encode_bench: mode %d got embeddings in place %d\n", mode, k.place);
        rc = MM_ERROR;
    }
    if (!rc) rc = wk_engine_forward(E, &it, 1, &err);
    double t2 = now_ms();
    if (rc) fprintf(stderr, "encode_bench: prompt (mode %d): %s\n", mode, err.msg);
    if (s) wk_seq_free(E, s);
    wk_engine_embeds_free(E, &k);
    free(rows), free(use);
    *enc_ms = t1 - t0, *pf_ms = t2 - t1;
    return rc;
}

static void report(const char *mode, double *gap, int32_t n, int32_t images, double enc_ms)
{
    qsort(gap, (size_t)n, sizeof *gap, cmp_d);
    const int32_t p99 = (int32_t)ceil(0.99 * n) - 1;
    printf("  %-7s %4d steps: gap median %7.2f ms, p99 %7.2f ms, max %7.2f ms", mode, n, gap[n / 2],
           gap[p99 < 0 ? 0 : p99], gap[n - 1]);
    if (images) printf("; %d images, %.1f ms each", images, enc_ms / images);
    printf("\n");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int32_t backend = WK_BACKEND_CUDA;
    int64_t ctx = 4096, B = 16, P = 48, images = 4, steps = 200, beside = 1, prompts = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        int64_t *v = !strcmp(argv[i], "--ctx")       ? &ctx
                     : !strcmp(argv[i], "--batch")   ? &B
                     : !strcmp(argv[i], "--patches") ? &P
                     : !strcmp(argv[i], "--images")  ? &images
                     : !strcmp(argv[i], "--steps")   ? &steps
                     : !strcmp(argv[i], "--beside")  ? &beside
                     : !strcmp(argv[i], "--prompts") ? &prompts
                                                     : NULL;
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--backend"))
            backend = !strcmp(argv[i + 1], "cpu") ? WK_BACKEND_CPU : WK_BACKEND_CUDA;
        else if (v)
            *v = strtoll(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "encode_bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!model || ctx < 1 || B < 1 || B > 64 || P < 2 || P % 2 || images < 1 || steps < 10 ||
        steps < images) {
        fprintf(stderr, "usage: encode_bench --model DIR [--ctx N] [--batch 1-64] [--patches even P] "
                        "[--images N] [--steps >= 10 and >= images] [--beside 0|1]\n");
        return 2;
    }
    struct wk_engine_opts o = {0};
    o.backend = backend;
    o.max_batch_tokens = 8192;
    struct mm_err err = {0};
    if (wk_engine_open(model, &o, &E, &err)) {
        fprintf(stderr, "encode_bench: %s: %s\n", mm_status_name(err.code), err.msg);
        return err.code == MM_UNAVAILABLE ? 77 : 1;
    }
    const struct wk_model_info *info = wk_engine_info(E);
    V = info->vocab_size;
    /* the image: P x P patches of 3 x 2 x 14 x 14 values (bf16, as the gateway sends them) */
    const int64_t n = P * P, row = 3 * 2 * 14 * 14;
    uint16_t *px = malloc(sizeof(uint16_t) * (size_t)(n * row));
    if (!px) return 1;
    for (int64_t i = 0; i < n * row; i++) px[i] = mm_f32_to_bf16((float)sin((double)i * 0.013));
    M = (struct wk_media){.kind = 0,
                          .dtype = MM_DT_BF16,
                          .pixels = px,
                          .n_rows = n,
                          .row_len = row,
                          .grid_t = 1,
                          .grid_h = P,
                          .grid_w = P};
    struct wk_seq *seqs[64];
    int32_t next[64], *ids = malloc(sizeof(int32_t) * (size_t)ctx);
    uint64_t rng = 12345;
    int32_t rc = ids ? 0 : 1;
    for (int64_t s = 0; s < B && !rc; s++) {
        rc = wk_seq_create(E, &seqs[s], &err);
        for (int64_t p = 0; p < ctx && !rc; p += 8192) {
            int32_t k = (int32_t)(ctx - p < 8192 ? ctx - p : 8192);
            for (int32_t i = 0; i < k; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                ids[i] = (int32_t)((rng >> 33) % (uint64_t)V);
            }
            struct wk_step_item it = {.seq = seqs[s], .ids = ids, .n = k, .logits_mode = WK_LOGITS_ARGMAX};
            it.token = -1;
            rc = wk_engine_forward(E, &it, 1, &err);
            next[s] = it.token >= 0 ? it.token : 0;
        }
    }
    double enc_ms = 0;
    for (int32_t w = 0; w < 2 && !rc; w++) rc = encode_one(&enc_ms);          /* warm: cuBLAS, scratch */
    for (int32_t w = 0; w < 8 && !rc; w++) rc = step(seqs, (int32_t)B, next); /* graphs captured */
    if (rc) {
        fprintf(stderr, "encode_bench: set-up failed: %s\n", err.msg);
        return 1;
    }
    printf("model %s: hidden %d; batch %lld at context %lld; image %lld x %lld patches (%lld tokens)\n",
           info->name, info->hidden_size, (long long)B, (long long)ctx, (long long)P, (long long)P,
           (long long)(n / 4));
    double *gap = malloc(sizeof(double) * (size_t)(steps + 4 * images * 64));
    if (!gap) return 1;
    /* alone */
    double t = now_ms();
    for (int64_t i = 0; i < steps && !rc; i++) {
        rc = step(seqs, (int32_t)B, next);
        double u = now_ms();
        gap[i] = u - t, t = u;
    }
    if (!rc) report("alone", gap, (int32_t)steps, 0, 0);
    /* inline: one image every steps / images steps, on this thread before the step */
    enc_ms = 0;
    t = now_ms();
    for (int64_t i = 0; i < steps && !rc; i++) {
        if (i % (steps / images) == steps / images / 2 && i / (steps / images) < images) {
            double ms = 0;
            rc = encode_one(&ms);
            enc_ms += ms;
        }
        if (!rc) rc = step(seqs, (int32_t)B, next);
        double u = now_ms();
        gap[i] = u - t, t = u;
    }
    if (!rc) report("inline", gap, (int32_t)steps, (int32_t)images, enc_ms);
    /* beside: the images back to back on a second thread, steps until they are done (at least `steps`) */
    if (!rc) rc = wk_engine_set_encode_threads(E, 1, &err);
    if (rc) {
        fprintf(stderr, "encode_bench: %s\n", err.msg);
        return 1;
    }
    for (int32_t w = 0; w < 2 && !rc; w++) rc = encode_one(&enc_ms); /* warm the vision context */
    /* the vision context alone (no steps): what an encode costs when it has the GPU to itself */
    double alone_ms = 0;
    for (int64_t i = 0; i < images && !rc; i++) {
        double ms = 0;
        rc = encode_one(&ms);
        alone_ms += ms;
    }
    if (!rc)
        printf("  vision context alone: %lld images, %.1f ms each\n", (long long)images, alone_ms / images);
    struct side sd = {.images = beside ? (int32_t)images : 0};
    pthread_t th;
    if (pthread_create(&th, NULL, side_main, &sd)) return 1;
    int32_t ns = 0;
    const int32_t cap = (int32_t)(steps + 4 * images * 64);
    t = now_ms();
    while (!rc && ns < cap && !__atomic_load_n(&sd.done, __ATOMIC_SEQ_CST)) {
        rc = step(seqs, (int32_t)B, next);
        double u = now_ms();
        gap[ns++] = u - t, t = u;
    }
    pthread_join(th, NULL);
    if (!rc && !sd.failed && ns > 0 && beside) report("beside", gap, ns, (int32_t)images, sd.ms);
    /* image prompts: the first token three ways, interleaved, after one warm-up round */
    const int64_t L = 128 + n / 4;
    int32_t *pids = malloc(sizeof(int32_t) * (size_t)L);
    double *pt = malloc(sizeof(double) * (size_t)(9 * (prompts + 1)));
    if (!pids || !pt) return 1;
    for (int64_t i = 0; i < L; i++)
        pids[i] = i >= 64 && i < 64 + n / 4 ? info->image_token_id : 100 + (int32_t)(i % 500);
    for (int64_t r = 0; r <= prompts && prompts > 0 && !rc; r++)
        for (int32_t mode = 0; mode < 3 && !rc; mode++) {
            double e = 0, f = 0;
            rc = prompt_once(mode, pids, L, &e, &f);
            if (r > 0)
                pt[(mode * 3 + 0) * prompts + r - 1] = e, pt[(mode * 3 + 1) * prompts + r - 1] = f,
                                                  pt[(mode * 3 + 2) * prompts + r - 1] = e + f;
        }
    for (int32_t mode = 0; mode < 3 && prompts > 0 && !rc; mode++) {
        double med[3];
        for (int32_t q = 0; q < 3; q++) {
            double *x = pt + (mode * 3 + q) * prompts;
            qsort(x, (size_t)prompts, sizeof *x, cmp_d);
            med[q] = x[prompts / 2];
        }
        printf("  prompt %-6s %lld tokens (%lld of the image), %lld rounds: encode %.2f ms, prefill %.2f ms, "
               "first token %.2f ms (medians)\n",
               mode == 0   ? "staged"
               : mode == 1 ? "host"
                           : "kept",
               (long long)L, (long long)(n / 4), (long long)prompts, med[0], med[1], med[2]);
    }
    free(pids), free(pt);
    for (int64_t s = 0; s < B; s++) wk_seq_free(E, seqs[s]);
    wk_engine_close(E);
    free(px), free(ids), free(gap);
    return rc || sd.failed ? 1 : 0;
}
