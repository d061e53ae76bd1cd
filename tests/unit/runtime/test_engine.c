/* The engine contract (wk_engine.h) on a generated tiny checkpoint: chunked prefill and batching give the
 * results of one sequence run alone, prefix reuse, fork, pool exhaustion without side effects, media
 * encoding, and refusals of bad input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cands.h"
#include "mm_logprobs.h"
#include "kn_draw.h"
#include "mkdemo.h"
#include "mm_dtype.h"
#include "mmgw_test.h"
#include "wk_engine.h"
#include "wk_engine_int.h" /* the backend table, to offer the forward an optional fused op */

static char dir[256];
static struct wk_engine *E;
static int32_t V;

static void prompt(int32_t *ids, int32_t n, uint32_t seed)
{
    for (int32_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = 10 + (int32_t)((seed >> 8) % 8000);
    }
}

static int32_t argmax(const float *l)
{
    int32_t b = 0;
    for (int32_t i = 1; i < V; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

static double maxdiff(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Run ids through a fresh sequence in chunks of `chunk`, logits for every position. */
static struct wk_seq *run_chunks(const int32_t *ids, int32_t n, int32_t chunk, float *logits)
{
    struct wk_seq *s = NULL;
    struct mm_err err = {0};
    CHECK_EQ_INT(wk_seq_create(E, &s, &err), MM_OK);
    for (int32_t o = 0; o < n; o += chunk) {
        int32_t k = n - o < chunk ? n - o : chunk;
        struct wk_step_item it = {s, ids + o, k,    NULL, NULL, WK_LOGITS_ALL, logits + (int64_t)o * V, NULL,
                                  0, 0,       NULL, NULL, 0};
        CHECK_EQ_INT(wk_engine_forward(E, &it, 1, &err), MM_OK);
    }
    CHECK_EQ_INT(wk_seq_len(s), n);
    return s;
}

static void test_chunking(void)
{
    enum { N = 50 };
    int32_t ids[N];
    prompt(ids, N, 1);
    float *a = malloc(sizeof(float) * N * V), *b = malloc(sizeof(float) * N * V);
    struct wk_seq *s1 = run_chunks(ids, N, N, a);
    int chunks[] = {1, 7, 16, 26};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        struct wk_seq *s2 = run_chunks(ids, N, chunks[c], b);
        CHECK_MSG(maxdiff(a, b, (int64_t)N * V) < 1e-4, "chunk %d: max diff %g", chunks[c],
                  maxdiff(a, b, (int64_t)N * V));
        int same = 1;
        for (int i = 0; i < N; i++) same &= argmax(a + (int64_t)i * V) == argmax(b + (int64_t)i * V);
        CHECK(same);
        wk_seq_free(E, s2);
    }
    wk_seq_free(E, s1);
    free(a);
    free(b);
}

/* Greedy-decode `steps` tokens for several sequences in one batch per step. */
static void decode(struct wk_seq **s, int32_t n, const int32_t *first, int32_t steps, int32_t *out)
{
    struct mm_err err = {0};
    struct wk_step_item it[8];
    float *lg = malloc(sizeof(float) * (size_t)n * V);
    int32_t cur[8];
    for (int32_t j = 0; j < n; j++) cur[j] = first[j];
    for (int32_t t = 0; t < steps; t++) {
        for (int32_t j = 0; j < n; j++)
            it[j] = (struct wk_step_item){
                s[j], &cur[j], 1, NULL, NULL, WK_LOGITS_LAST, lg + (int64_t)j * V, NULL, 0, 0, NULL, NULL, 0};
        CHECK_EQ_INT(wk_engine_forward(E, it, n, &err), MM_OK);
        for (int32_t j = 0; j < n; j++) out[j * steps + t] = cur[j] = argmax(lg + (int64_t)j * V);
    }
    free(lg);
}

static void test_batching(void)
{
    enum { S = 3, STEPS = 6 };
    const int32_t lens[S] = {5, 40, 33};
    int32_t *ids[S];
    float *alone[S], *batched[S];
    struct wk_seq *sa[S], *sb[S];
    struct mm_err err = {0};
    int32_t first[S], out_a[S * STEPS], out_b[S * STEPS];
    for (int j = 0; j < S; j++) {
        ids[j] = malloc(sizeof(int32_t) * (size_t)lens[j]);
        prompt(ids[j], lens[j], 100 + (uint32_t)j);
        alone[j] = malloc(sizeof(float) * (size_t)lens[j] * V);
        batched[j] = malloc(sizeof(float) * (size_t)lens[j] * V);
        sa[j] = run_chunks(ids[j], lens[j], lens[j], alone[j]);
        first[j] = argmax(alone[j] + (int64_t)(lens[j] - 1) * V);
        decode(&sa[j], 1, &first[j], STEPS, out_a + j * STEPS);
    }
    struct wk_step_item it[S];
    for (int j = 0; j < S; j++) {
        CHECK_EQ_INT(wk_seq_create(E, &sb[j], &err), MM_OK);
        it[j] = (struct wk_step_item){sb[j], ids[j], lens[j], NULL, NULL, WK_LOGITS_ALL, batched[j], NULL,
                                      0,     0,      NULL,    NULL, 0};
    }
    CHECK_EQ_INT(wk_engine_forward(E, it, S, &err), MM_OK);
    for (int j = 0; j < S; j++)
        CHECK_MSG(maxdiff(alone[j], batched[j], (int64_t)lens[j] * V) < 1e-4, "seq %d", j);
    decode(sb, S, first, STEPS, out_b);
    CHECK(memcmp(out_a, out_b, sizeof out_a) == 0);
    for (int j = 0; j < S; j++) {
        wk_seq_free(E, sa[j]);
        wk_seq_free(E, sb[j]);
        free(ids[j]);
        free(alone[j]);
        free(batched[j]);
    }
}

static void test_prefix_and_fork(void)
{
    enum { N = 45 }; /* two full pages of 16 and a partial one */
    int32_t ids[N + 1];
    prompt(ids, N + 1, 7);
    struct mm_err err = {0};
    int64_t free0 = wk_engine_free_pages(E);
    float *ref = malloc(sizeof(float) * (N + 1) * V), *got = malloc(sizeof(float) * (N + 1) * V);
    struct wk_seq *s1 = run_chunks(ids, N + 1, N + 1, ref);
    CHECK_EQ_INT(wk_engine_free_pages(E), free0 - 3);
    wk_seq_free(E, s1);
    CHECK_EQ_INT(wk_engine_free_pages(E), free0); /* cached pages count as free */

    /* a new sequence with the same first 45 tokens reuses the two full pages */
    struct wk_seq *s2 = NULL;
    CHECK_EQ_INT(wk_seq_create(E, &s2, &err), MM_OK);
    int64_t k = wk_seq_reuse_prefix(E, s2, ids, N, 0);
    CHECK_EQ_INT(k, 32);
    CHECK_EQ_INT(wk_seq_len(s2), 32);
    struct wk_step_item it = {
        s2, ids + k, (int32_t)(N + 1 - k), NULL, NULL, WK_LOGITS_ALL, got, NULL, 0, 0, NULL, NULL, 0};
    CHECK_EQ_INT(wk_engine_forward(E, &it, 1, &err), MM_OK);
    CHECK_MSG(maxdiff(ref + k * V, got, (N + 1 - k) * V) < 1e-4, "reused prefix differs: %g",
              maxdiff(ref + k * V, got, (N + 1 - k) * V));
    /* k < n always: a prompt of exactly 32 tokens keeps its last page to compute */
    struct wk_seq *s3 = NULL;
    CHECK_EQ_INT(wk_seq_create(E, &s3, &err), MM_OK);
    CHECK_EQ_INT(wk_seq_reuse_prefix(E, s3, ids, 32, 0), 16);
    wk_seq_free(E, s3);
    /* a different first token shares nothing */
    int32_t other[N];
    memcpy(other, ids, sizeof other);
    other[0] ^= 1;
    CHECK_EQ_INT(wk_seq_create(E, &s3, &err), MM_OK);
    CHECK_EQ_INT(wk_seq_reuse_prefix(E, s3, other, N, 0), 0);
    wk_seq_free(E, s3);

    /* fork at a partial page: parent and child continue independently and each matches a fresh run */
    struct wk_seq *child = NULL;
    CHECK_EQ_INT(wk_seq_fork(E, s2, &child, &err), MM_OK);
    CHECK_EQ_INT(wk_seq_len(child), N + 1);
    int32_t xa = 1234, xb = 4321;
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    struct wk_step_item two[2] = {{s2, &xa, 1, NULL, NULL, WK_LOGITS_LAST, la, NULL, 0, 0, NULL, NULL, 0},
                                  {child, &xb, 1, NULL, NULL, WK_LOGITS_LAST, lb, NULL, 0, 0, NULL, NULL, 0}};
    CHECK_EQ_INT(wk_engine_forward(E, two, 2, &err), MM_OK);
    int32_t full[N + 2];
    memcpy(full, ids, sizeof(int32_t) * (N + 1));
    float *fr = malloc(sizeof(float) * (N + 2) * V);
    full[N + 1] = xa;
    struct wk_seq *fa = run_chunks(full, N + 2, N + 2, fr);
    CHECK_MSG(maxdiff(la, fr + (int64_t)(N + 1) * V, V) < 1e-4, "fork parent");
    full[N + 1] = xb;
    struct wk_seq *fb = run_chunks(full, N + 2, N + 2, fr);
    CHECK_MSG(maxdiff(lb, fr + (int64_t)(N + 1) * V, V) < 1e-4, "fork child");
    wk_seq_free(E, fa);
    wk_seq_free(E, fb);
    wk_seq_free(E, child);
    wk_seq_free(E, s2);
    CHECK_EQ_INT(wk_engine_free_pages(E), free0);
    free(la);
    free(lb);
    free(fr);
    free(ref);
    free(got);
}

/* The forward with a backend that offers add_rmsnorm (the residual add and the next norm in one op): here the
 * op is the CPU backend's add then rmsnorm, so the logits must be the same bits as without it, and the op
 * must replace both residual adds of every layer (the next layer's input norm and the final norm inside it).
 */
static const struct wk_backend_iface *plain_be;
static int64_t fused_calls;

static void add_rmsnorm_composed(void *ctx, float *y, const float *x, const struct wk_weight *w, int64_t n,
                                 int32_t dim, float eps, float *out)
{
    fused_calls++;
    plain_be->add(ctx, y, x, n * dim);
    plain_be->rmsnorm(ctx, y, w, n, dim, eps, out);
}

static void test_fused_add_norm(void)
{
    enum { N = 40 };
    int32_t ids[N];
    prompt(ids, N, 9);
    float *a = malloc(sizeof(float) * N * V), *b = malloc(sizeof(float) * N * V);
    /* a prefill of 30 tokens, then one token per step (decode) */
    struct wk_seq *s1 = run_chunks(ids, 30, 30, a);
    wk_seq_free(E, s1);
    s1 = run_chunks(ids, N, 1, a);
    plain_be = E->be.iface;
    struct wk_backend_iface fused = *plain_be;
    fused.add_rmsnorm = add_rmsnorm_composed;
    E->be.iface = &fused;
    struct wk_seq *s2 = run_chunks(ids, N, 1, b);
    E->be.iface = plain_be;
    CHECK_MSG(!memcmp(a, b, sizeof(float) * N * V), "add_rmsnorm offered: logits differ (max %.3g)",
              maxdiff(a, b, (int64_t)N * V));
    const int64_t layers = E->cfg.text.n_layers;
    CHECK_MSG(fused_calls == 2 * layers * N, "add_rmsnorm: %lld calls for %d steps of %lld layers",
              (long long)fused_calls, N, (long long)layers);
    wk_seq_free(E, s1);
    wk_seq_free(E, s2);
    free(a), free(b);
}

/* Media embeddings reach the step's rows run by run (one set_rows per run of consecutive media positions of
 * an item, straight from the item's rows): record the calls and check they cover exactly the media rows, in
 * order, with the items' data; the logits equal those of the same step with the rows handed over one by one.
 * The same rows as spans (wk_step_item.spans) give the same set_rows calls and logits from host memory, and
 * the same logits as kept spans (the backend's copy, no set_rows at all). */
static const struct wk_backend_iface *rows_plain;
static int64_t rows_seen[64], rows_calls, copy_calls;
static const float *rows_data[64];
static int32_t rows_one; /* forward each row in its own call */

static void set_rows_recorded(void *ctx, float *out, int32_t dim, const int64_t *rows, const float *data,
                              int64_t n_rows)
{
    for (int64_t r = 0; r < n_rows && rows_calls < 64; r++) {
        rows_seen[rows_calls] = rows[r];
        rows_data[rows_calls++] = data + r * dim;
    }
    if (!rows_one) {
        rows_plain->set_rows(ctx, out, dim, rows, data, n_rows);
        return;
    }
    for (int64_t r = 0; r < n_rows; r++) rows_plain->set_rows(ctx, out, dim, rows + r, data + r * dim, 1);
}

static void copy_recorded(void *ctx, float *dst, const float *src, int64_t n)
{
    copy_calls++;
    rows_plain->copy(ctx, dst, src, n);
}

/* the runs of use[0, n) as spans over rows (kept or not) */
static int32_t spans_of(const uint8_t *use, int32_t n, const float *rows, int32_t H, int32_t kept,
                        struct wk_embed_span *sp)
{
    int32_t k = 0;
    for (int32_t i = 0; i < n;) {
        if (!use[i]) {
            i++;
            continue;
        }
        int32_t i1 = i;
        while (i1 < n && use[i1]) i1++;
        sp[k++] = (struct wk_embed_span){i, i1 - i, rows + (int64_t)i * H, kept};
        i = i1;
    }
    return k;
}

static void test_media_rows(void)
{
    enum { N0 = 9, N1 = 7, PASSES = 4 };
    static const uint8_t use0[N0] = {0, 1, 1, 0, 0, 1, 1, 1, 1}, use1[N1] = {1, 1, 0, 1, 0, 0, 0};
    const int32_t H = E->cfg.text.hidden;
    int32_t ids0[N0], ids1[N1];
    prompt(ids0, N0, 71);
    prompt(ids1, N1, 72);
    float *emb0 = malloc(sizeof(float) * N0 * H), *emb1 = malloc(sizeof(float) * N1 * H);
    for (int64_t i = 0; i < (int64_t)N0 * H; i++) emb0[i] = (float)sin((double)i * 0.37);
    for (int64_t i = 0; i < (int64_t)N1 * H; i++) emb1[i] = (float)cos((double)i * 0.29);
    float *lg[PASSES];
    for (int p = 0; p < PASSES; p++) lg[p] = malloc(sizeof(float) * (N0 + N1) * V);
    rows_plain = E->be.iface;
    struct wk_backend_iface rec = *rows_plain;
    rec.set_rows = set_rows_recorded;
    rec.copy = copy_recorded;
    struct mm_err err = {0};
    /* passes: runs from use_embed, one row per call, host spans, kept spans */
    for (int pass = 0; pass < PASSES; pass++) {
        rows_one = pass == 1;
        rows_calls = copy_calls = 0;
        struct wk_seq *a = NULL, *b = NULL;
        CHECK_EQ_INT(wk_seq_create(E, &a, &err), MM_OK);
        CHECK_EQ_INT(wk_seq_create(E, &b, &err), MM_OK);
        struct wk_step_item it[2] = {
            {a, ids0, N0, emb0, use0, WK_LOGITS_ALL, lg[pass], NULL, 0, 0, NULL, NULL, 0},
            {b, ids1, N1, emb1, use1, WK_LOGITS_ALL, lg[pass] + (int64_t)N0 * V, NULL, 0, 0, NULL, NULL, 0}};
        struct wk_embed_span sp0[N0], sp1[N1];
        if (pass >= 2) {
            it[0].embeds = it[1].embeds = NULL;
            it[0].use_embed = it[1].use_embed = NULL;
            it[0].spans = sp0, it[0].n_spans = spans_of(use0, N0, emb0, H, pass == 3, sp0);
            it[1].spans = sp1, it[1].n_spans = spans_of(use1, N1, emb1, H, pass == 3, sp1);
            CHECK(it[0].n_spans == 2 && it[1].n_spans == 2);
        }
        E->be.iface = &rec;
        CHECK_EQ_INT(wk_engine_forward(E, it, 2, &err), MM_OK);
        E->be.iface = rows_plain;
        if (pass == 3) { /* kept spans: one copy each, no host rows */
            CHECK_MSG(copy_calls == 4 && rows_calls == 0, "kept spans: %lld copies, %lld rows set",
                      (long long)copy_calls, (long long)rows_calls);
        } else {
            /* the media rows in batch order (item 0's rows, then item 1's from N0), each with its own data */
            int64_t k = 0, bad = 0;
            for (int32_t j = 0; j < 2; j++)
                for (int32_t i = 0; i < (j ? N1 : N0); i++) {
                    if (!(j ? use1 : use0)[i]) continue;
                    const int64_t row = (j ? N0 : 0) + i;
                    const float *want = (j ? emb1 : emb0) + (int64_t)i * H;
                    bad += k >= rows_calls || rows_seen[k] != row || rows_data[k] != want;
                    k++;
                }
            CHECK_MSG(bad == 0 && k == rows_calls && copy_calls == 0,
                      "media rows (pass %d): %lld wrong of %lld, %lld handed over, %lld copies", pass,
                      (long long)bad, (long long)k, (long long)rows_calls, (long long)copy_calls);
        }
        wk_seq_free(E, a);
        wk_seq_free(E, b);
    }
    for (int p = 1; p < PASSES; p++)
        CHECK_MSG(!memcmp(lg[0], lg[p], sizeof(float) * (N0 + N1) * V),
                  "media rows by runs and %s: logits differ (max %.3g)",
                  p == 1   ? "one by one"
                  : p == 2 ? "as host spans"
                           : "as kept spans",
                  maxdiff(lg[0], lg[p], (int64_t)(N0 + N1) * V));
    free(emb0), free(emb1);
    for (int p = 0; p < PASSES; p++) free(lg[p]);
}

/* tok is the greedy token of logits l, up to the batch-dependent rounding of this step (1e-4, the batching
 * test's bound): a near-tie may go either way */
static int greedy_ok(const float *l, int32_t tok)
{
    return tok >= 0 && tok < V && l[tok] >= l[wk_argmax(l, V)] - 1e-4f;
}

/* WK_LOGITS_ARGMAX: the greedy token of the last position, equal to wk_argmax of the logits WK_LOGITS_LAST
 * returns, in a step that mixes both modes and NONE; with the backend's argmax_rows and without it (rows
 * downloaded, host argmax). */
static void test_greedy_tokens(void)
{
    enum { S = 4, N = 12 };
    int32_t ids[S][N];
    for (int j = 0; j < S; j++) prompt(ids[j], N, 50 + (uint32_t)j);
    float *ref = malloc(sizeof(float) * S * V), *got = malloc(sizeof(float) * S * V);
    struct mm_err err = {0};
    struct wk_seq *r[S], *g[S];
    struct wk_step_item it[S];
    for (int j = 0; j < S; j++) {
        CHECK_EQ_INT(wk_seq_create(E, &r[j], &err), MM_OK);
        it[j] = (struct wk_step_item){
            r[j], ids[j], N, NULL, NULL, WK_LOGITS_LAST, ref + (int64_t)j * V, NULL, 0, 0, NULL, NULL, 0};
    }
    CHECK_EQ_INT(wk_engine_forward(E, it, S, &err), MM_OK);
    const struct wk_backend_iface *plain = E->be.iface;
    struct wk_backend_iface no_argmax = *plain;
    no_argmax.argmax_rows = NULL;
    for (int pass = 0; pass < 2; pass++) {
        if (pass) E->be.iface = &no_argmax;
        static const int32_t modes[S] = {WK_LOGITS_ARGMAX, WK_LOGITS_LAST, WK_LOGITS_ARGMAX, WK_LOGITS_NONE};
        for (int j = 0; j < S; j++) {
            CHECK_EQ_INT(wk_seq_create(E, &g[j], &err), MM_OK);
            it[j] = (struct wk_step_item){g[j],
                                          ids[j],
                                          N,
                                          NULL,
                                          NULL,
                                          modes[j],
                                          modes[j] == WK_LOGITS_LAST ? got + (int64_t)j * V : NULL,
                                          NULL,
                                          0,
                                          -1,
                                          NULL,
                                          NULL,
                                          0};
        }
        CHECK_EQ_INT(wk_engine_forward(E, it, S, &err), MM_OK);
        for (int j = 0; j < S; j++) {
            if (modes[j] == WK_LOGITS_ARGMAX)
                CHECK_MSG(greedy_ok(ref + (int64_t)j * V, it[j].token), "pass %d seq %d: token %d, want %d",
                          pass, j, it[j].token, wk_argmax(ref + (int64_t)j * V, V));
            if (modes[j] == WK_LOGITS_LAST)
                CHECK_MSG(maxdiff(ref + (int64_t)j * V, got + (int64_t)j * V, V) < 1e-4, "pass %d seq %d",
                          pass, j);
            if (modes[j] == WK_LOGITS_NONE) CHECK_EQ_INT(it[j].token, -1);
        }
        /* a decode step: the greedy token fed back, both modes again */
        int32_t next[S];
        for (int j = 0; j < S; j++) {
            next[j] = wk_argmax(ref + (int64_t)j * V, V);
            it[j] = (struct wk_step_item){g[j],
                                          &next[j],
                                          1,
                                          NULL,
                                          NULL,
                                          j % 2 ? WK_LOGITS_LAST : WK_LOGITS_ARGMAX,
                                          got + (int64_t)j * V,
                                          NULL,
                                          0,
                                          -1,
                                          NULL,
                                          NULL,
                                          0};
        }
        CHECK_EQ_INT(wk_engine_forward(E, it, S, &err), MM_OK);
        for (int j = 0; j < S; j += 2) {
            /* the same step with logits, on the reference sequences */
            struct wk_step_item one = {
                r[j], &next[j], 1,    NULL, NULL, WK_LOGITS_LAST, ref + (int64_t)j * V, NULL,
                0,    0,        NULL, NULL, 0};
            struct wk_seq *keep = r[j];
            CHECK_EQ_INT(wk_seq_fork(E, keep, &r[j], &err), MM_OK);
            one.seq = r[j];
            CHECK_EQ_INT(wk_engine_forward(E, &one, 1, &err), MM_OK);
            CHECK_MSG(greedy_ok(ref + (int64_t)j * V, it[j].token), "pass %d seq %d decode: token %d", pass,
                      j, it[j].token);
            wk_seq_free(E, r[j]);
            r[j] = keep;
            /* ref row j is now the decode step's: restore the prompt's for the next pass */
            struct wk_step_item again = {
                NULL, ids[j], N, NULL, NULL, WK_LOGITS_LAST, ref + (int64_t)j * V, NULL, 0, 0, NULL, NULL, 0};
            CHECK_EQ_INT(wk_seq_create(E, &again.seq, &err), MM_OK);
            CHECK_EQ_INT(wk_engine_forward(E, &again, 1, &err), MM_OK);
            wk_seq_free(E, again.seq);
        }
        for (int j = 0; j < S; j++) wk_seq_free(E, g[j]);
    }
    E->be.iface = plain;
    for (int j = 0; j < S; j++) wk_seq_free(E, r[j]);
    free(ref), free(got);
}

/* WK_LOGITS_CANDS: the candidates the engine returns (ascending ids, their logits) sample as the whole row
 * does; a row with more than cap of them, or a backend without topk_rows, comes back whole (n = -1). The
 * whole rows are caught inside the CPU backend's topk_rows (its logits are host memory). */
static const struct wk_backend_iface *cands_plain;
static float *cands_rows;
static int64_t cands_seen; /* rows caught so far: each item's last row is a run of its own here */
static void topk_rows_spy(void *ctx, float *src, int32_t rows, int64_t n, const struct mm_cand_req *req,
                          int32_t cap, int32_t *counts, int32_t *ids, float *vals, float *lse)
{
    if (cands_seen + rows <= 32) memcpy(cands_rows + cands_seen * n, src, sizeof(float) * (size_t)(rows * n));
    cands_seen += rows;
    cands_plain->topk_rows(ctx, src, rows, n, req, cap, counts, ids, vals, lse);
}

/* the spy with room for 2 candidates in the backend: the small model's rows overflow, as M3's flat ones do */
static void topk_rows_small(void *ctx, float *src, int32_t rows, int64_t n, const struct mm_cand_req *req,
                            int32_t cap, int32_t *counts, int32_t *ids, float *vals, float *lse)
{
    for (int32_t i = 0; i < rows; i++) {
        if (cands_seen < 32) memcpy(cands_rows + cands_seen * n, src + i * n, sizeof(float) * (size_t)n);
        cands_seen++;
        cands_plain->topk_rows(ctx, src + i * n, 1, n, &req[i], 2, &counts[i], ids + i * cap, vals + i * cap,
                               &lse[i]);
        if (counts[i] > 2)
            counts[i] = cap + 1; /* only 2 written: more than the engine's room, as it sees it */
    }
}

static void test_candidates(void)
{
    enum { S = 3, N = 10, CAP = 64 };
    int32_t ids[S][N];
    for (int j = 0; j < S; j++) prompt(ids[j], N, 70 + (uint32_t)j);
    float *full = malloc(sizeof(float) * S * V);
    cands_rows = malloc(sizeof(float) * 32 * V);
    int32_t cid[S][CAP];
    float clg[S][CAP];
    struct wk_cands c[S];
    struct mm_err err = {0};
    cands_plain = E->be.iface;
    struct wk_backend_iface spy = *cands_plain, none = *cands_plain;
    spy.topk_rows = topk_rows_spy;
    none.topk_rows = NULL;
    for (int pass = 0; pass < 2; pass++) {
        E->be.iface = pass ? &none : &spy;
        cands_seen = 0;
        struct wk_seq *g[S];
        struct wk_step_item it[S];
        for (int j = 0; j < S; j++) {
            CHECK_EQ_INT(wk_seq_create(E, &g[j], &err), MM_OK);
            /* item 2 allows 2 candidates only: its row comes back whole */
            /* item 0 also without the floor and with its log-sum-exp (what log-probabilities ask) */
            c[j] = (struct wk_cands){.k = j == 1 ? 40 : 5,
                                     .temperature = 0.8f,
                                     .cap = j == 2 ? 2 : CAP,
                                     .ids = cid[j],
                                     .logits = clg[j],
                                     .n = 99,
                                     .flags = j == 0 ? MM_CANDS_EXACT | MM_CANDS_LSE : 0};
            it[j] = (struct wk_step_item){
                g[j], ids[j], N,     NULL, NULL, WK_LOGITS_CANDS, full + (int64_t)j * V, NULL,
                0,    0,      &c[j], NULL, 0};
        }
        CHECK_EQ_INT(wk_engine_forward(E, it, S, &err), MM_OK);
        CHECK_EQ_INT(cands_seen, pass ? 0 : S);
        for (int j = 0; j < S; j++) {
            const float *row = cands_rows + (int64_t)j * V;
            if (pass || j == 2) {
                CHECK_EQ_INT(c[j].n, -1);
                if (!pass) CHECK(memcmp(full + (int64_t)j * V, row, sizeof(float) * V) == 0);
                continue;
            }
            CHECK(c[j].n >= c[j].k && c[j].n <= CAP);
            int asc = 1;
            for (int32_t q = 1; q < c[j].n; q++) asc &= cid[j][q] > cid[j][q - 1];
            CHECK(asc);
            for (int32_t q = 0; q < c[j].n; q++) CHECK(clg[j][q] == row[cid[j][q]]);
            struct wk_sampling sp = {0.8f, 0.95f, c[j].k, 0};
            uint64_t r1 = 3, r2 = 3;
            int same = 1;
            for (int d = 0; d < 50; d++) {
                const int32_t a = wk_sample(row, V, &sp, &r1, NULL),
                              q = wk_sample(clg[j], c[j].n, &sp, &r2, NULL);
                same &= q >= 0 && q < c[j].n && cid[j][q] == a;
            }
            CHECK_MSG(same, "seq %d: candidates sample differently from the whole row", j);
            if (j == 0) { /* the row's log-sum-exp, as the worker's mm_logsumexp computes it */
                const float want = mm_logsumexp(row, V);
                CHECK(memcmp(&c[j].lse, &want, sizeof want) == 0);
            }
        }
        for (int j = 0; j < S; j++) wk_seq_free(E, g[j]);
    }
    E->be.iface = cands_plain;
    free(full), free(cands_rows);
}

/* WK_LOGITS_CANDS with the draw: a row without top-k whose candidates do not fit is drawn from by the
 * backend (n = -2, the token kn_draw gives on the whole row, which wk_sample with the same uniform gives
 * too); without draw, or with a top-k, the row comes back whole */
static void test_candidates_draw(void)
{
    enum { S = 3, N = 9, CAP = 64 };
    int32_t ids[S][N];
    for (int j = 0; j < S; j++) prompt(ids[j], N, 90 + (uint32_t)j);
    float *full = malloc(sizeof(float) * S * V);
    uint32_t *keys = malloc(sizeof(uint32_t) * V);
    cands_rows = malloc(sizeof(float) * 32 * V);
    int32_t cid[S][CAP];
    float clg[S][CAP];
    struct wk_cands c[S];
    struct mm_err err = {0};
    cands_plain = E->be.iface;
    struct wk_backend_iface small = *cands_plain;
    small.topk_rows = topk_rows_small;
    E->be.iface = &small;
    cands_seen = 0;
    struct wk_seq *g[S];
    struct wk_step_item it[S];
    uint64_t rng0 = 12345, peek = rng0;
    const double u = wk_sample_uniform(&peek);
    for (int j = 0; j < S; j++) {
        CHECK_EQ_INT(wk_seq_create(E, &g[j], &err), MM_OK);
        c[j] = (struct wk_cands){.k = j == 2 ? 40 : INT32_MAX,
                                 .temperature = 0.9f,
                                 .cap = CAP,
                                 .ids = cid[j],
                                 .logits = clg[j],
                                 .n = 99,
                                 .draw = j != 1,
                                 .top_p = 0.9f,
                                 .min_p = 0.01f,
                                 .u = u};
        it[j] = (struct wk_step_item){
            g[j], ids[j], N, NULL, NULL, WK_LOGITS_CANDS, full + (int64_t)j * V, NULL, 0, 0, &c[j], NULL, 0};
    }
    CHECK_EQ_INT(wk_engine_forward(E, it, S, &err), MM_OK);
    CHECK_EQ_INT(cands_seen, S);
    const struct mm_cand_req r = {
        .k = INT32_MAX, .t = 0.9f, .top_p = 0.9f, .min_p = 0.01f, .draw = 1, .u = u};
    CHECK_EQ_INT(c[0].n, -2);
    CHECK_EQ_INT(c[0].ids[0], kn_draw(cands_rows, V, &r, keys));
    struct wk_sampling sp = {0.9f, 0.9f, 0, 0.01f};
    uint64_t rng = rng0;
    CHECK_EQ_INT(c[0].ids[0], wk_sample(cands_rows, V, &sp, &rng, NULL));
    for (int j = 1; j < S; j++) { /* no draw, a top-k: whole rows */
        CHECK_EQ_INT(c[j].n, -1);
        CHECK(memcmp(full + (int64_t)j * V, cands_rows + (int64_t)j * V, sizeof(float) * V) == 0);
    }
    for (int j = 0; j < S; j++) wk_seq_free(E, g[j]);
    E->be.iface = cands_plain;
    free(full), free(keys), free(cands_rows);
}

/* the spy that makes every row flat (all logits 0.5) first: a top list of ties by the thousand */
static void topk_rows_flat(void *ctx, float *src, int32_t rows, int64_t n, const struct mm_cand_req *req,
                           int32_t cap, int32_t *counts, int32_t *ids, float *vals, float *lse)
{
    for (int64_t i = 0; i < rows * n; i++) src[i] = 0.5f;
    cands_plain->topk_rows(ctx, src, rows, n, req, cap, counts, ids, vals, lse);
}

/* A sampled row without top-k that wants log-probabilities (n_top, MM_CANDS_LSE) and is flat (every token a
 * candidate at temperature 50) is drawn from with its token's logit, the row's log-sum-exp and the top list:
 * kn_draw's token, its logit in logits[0], mm_logsumexp's lse, and the ids of the exact top 5 (ties
 * included: kn_cands_req without floor) with their logits after it */
static void test_candidates_draw_logprobs(void)
{
    enum { N = 7, CAP = 64 };
    int32_t ids[N];
    prompt(ids, N, 123);
    float *full = malloc(sizeof(float) * V), *scratch = malloc(sizeof(float) * V), tv[CAP];
    uint32_t *keys = malloc(sizeof(uint32_t) * V);
    cands_rows = malloc(sizeof(float) * 32 * V);
    int32_t cid[CAP], want[CAP];
    float clg[CAP];
    struct mm_err err = {0};
    cands_plain = E->be.iface;
    struct wk_backend_iface spy = *cands_plain;
    spy.topk_rows = topk_rows_spy;
    E->be.iface = &spy;
    cands_seen = 0;
    struct wk_seq *g = NULL;
    CHECK_EQ_INT(wk_seq_create(E, &g, &err), MM_OK);
    struct wk_cands c = {.k = INT32_MAX,
                         .temperature = 50.0f,
                         .cap = CAP,
                         .ids = cid,
                         .logits = clg,
                         .n = 99,
                         .draw = 1,
                         .top_p = 0.9f,
                         .u = 0.3,
                         .flags = MM_CANDS_LSE,
                         .n_top = 5};
    struct wk_step_item it = {g, ids, N, NULL, NULL, WK_LOGITS_CANDS, full, NULL, 0, 0, &c, NULL, 0};
    CHECK_EQ_INT(wk_engine_forward(E, &it, 1, &err), MM_OK);
    CHECK_EQ_INT(cands_seen, 1);
    const float *row = cands_rows;
    const struct mm_cand_req r = {.k = INT32_MAX, .t = 50.0f, .top_p = 0.9f, .draw = 1, .u = 0.3};
    CHECK_EQ_INT(c.n, -2);
    CHECK_EQ_INT(c.ids[0], kn_draw(row, V, &r, keys));
    CHECK(c.logits[0] == row[c.ids[0]]);
    CHECK(c.lse == mm_logsumexp(row, V));
    const struct mm_cand_req tq = {.k = 5, .t = 50.0f, .flags = MM_CANDS_EXACT};
    const int32_t nt = kn_cands_req(row, V, &tq, CAP, want, tv, scratch);
    CHECK_EQ_INT(c.n_top_out, nt);
    int ok = c.n_top_out == nt;
    for (int32_t j = 0; ok && j < nt; j++) { /* the same set (the list comes in any order) */
        int found = 0;
        for (int32_t m = 0; m < nt; m++) found |= c.ids[1 + j] == want[m];
        ok &= found && c.logits[1 + j] == row[c.ids[1 + j]];
    }
    CHECK_MSG(ok, "the drawn row's top list differs from the exact top 5");
    /* a flat row: every token ties for the top 5, more than the engine's room: the whole row comes back */
    struct wk_backend_iface flat = *cands_plain;
    flat.topk_rows = topk_rows_flat;
    E->be.iface = &flat;
    c.n = 99;
    struct wk_step_item it2 = {g, ids, 1, NULL, NULL, WK_LOGITS_CANDS, full, NULL, 0, 0, &c, NULL, 0};
    CHECK_EQ_INT(wk_engine_forward(E, &it2, 1, &err), MM_OK);
    CHECK_EQ_INT(c.n, -1);
    CHECK(full[0] == 0.5f && full[V - 1] == 0.5f);
    wk_seq_free(E, g);
    E->be.iface = cands_plain;
    free(full), free(scratch), free(keys), free(cands_rows);
}

static void test_refusals(void)
{
    struct mm_err err = {0};
    struct wk_seq *s = NULL;
    CHECK_EQ_INT(wk_seq_create(E, &s, &err), MM_OK);
    int32_t ids[3] = {5, V, 7};
    float *lg = malloc(sizeof(float) * 3 * V);
    struct wk_step_item it = {s, ids, 3, NULL, NULL, WK_LOGITS_LAST, lg, NULL, 0, 0, NULL, NULL, 0};
    CHECK_EQ_INT(wk_engine_forward(E, &it, 1, &err), MM_INVALID);
    CHECK(strstr(err.msg, "vocabulary") != NULL);
    ids[1] = 6;
    struct wk_step_item dup[2] = {it, it};
    CHECK_EQ_INT(wk_engine_forward(E, dup, 2, &err), MM_INVALID);
    it.n = 0;
    CHECK_EQ_INT(wk_engine_forward(E, &it, 1, &err), MM_INVALID);
    it.n = 3;
    int32_t sel[3 * 2 * 2];
    it.sel = sel;
    it.sel_k = 2; /* < topk_blocks */
    CHECK_EQ_INT(wk_engine_forward(E, &it, 1, &err), MM_INVALID);
    it.sel = NULL;
    it.logits = NULL;
    CHECK_EQ_INT(wk_engine_forward(E, &it, 1, &err), MM_INVALID);
    it.logits = lg;
    /* media spans out of order, overlapping, empty, past the item, without rows, beside use_embed, or kept
     * on a backend that keeps nothing */
    const int32_t H = E->cfg.text.hidden;
    float *rows = calloc((size_t)(3 * H), sizeof(float));
    static const uint8_t use[3] = {0, 1, 0};
    const struct wk_embed_span bad[][2] = {
        {{2, 1, rows, 0}, {0, 1, rows, 0}}, {{0, 2, rows, 0}, {1, 1, rows, 0}},
        {{0, 0, rows, 0}, {1, 1, rows, 0}}, {{0, 1, rows, 0}, {2, 2, rows, 0}},
        {{0, 1, rows, 0}, {1, 1, NULL, 0}}, {{0, 1, rows, 0}, {-1, 1, rows, 0}}};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        it.spans = bad[b], it.n_spans = 2;
        CHECK_EQ_INT(wk_engine_forward(E, &it, 1, &err), MM_INVALID);
        CHECK_MSG(strstr(err.msg, "span") != NULL, "bad spans %zu: %s", b, err.msg);
    }
    const struct wk_embed_span one = {1, 1, rows, 0}, kept = {1, 1, rows, 1};
    it.spans = &one, it.n_spans = 1;
    it.embeds = rows, it.use_embed = use;
    CHECK_EQ_INT(wk_engine_forward(E, &it, 1, &err), MM_INVALID);
    it.embeds = NULL, it.use_embed = NULL;
    it.spans = NULL; /* a count without spans */
    CHECK_EQ_INT(wk_engine_forward(E, &it, 1, &err), MM_INVALID);
    const struct wk_backend_iface *plain = E->be.iface;
    struct wk_backend_iface nocopy = *plain;
    nocopy.copy = NULL;
    it.spans = &kept;
    E->be.iface = &nocopy;
    CHECK_EQ_INT(wk_engine_forward(E, &it, 1, &err), MM_INVALID);
    E->be.iface = plain;
    CHECK_MSG(strstr(err.msg, "kept") != NULL, "kept span without copy: %s", err.msg);
    it.spans = NULL, it.n_spans = 0;
    free(rows);
    CHECK_EQ_INT(wk_seq_len(s), 0); /* nothing of the above changed the sequence */
    wk_seq_free(E, s);
    free(lg);
}

static void test_exhausted(void)
{
    struct wk_engine_opts o = {WK_BACKEND_CPU, 1, 4, 0, 256};
    struct wk_engine *e = NULL;
    struct mm_err err = {0};
    CHECK_EQ_INT(wk_engine_open(dir, &o, &e, &err), MM_OK);
    if (!e) return;
    CHECK_EQ_INT(wk_engine_info(e)->pages_total, 4);
    CHECK_EQ_INT(wk_engine_pages_for(e, 33), 3);
    int32_t ids[100];
    prompt(ids, 100, 3);
    struct wk_seq *a = NULL, *b = NULL;
    wk_seq_create(e, &a, &err);
    wk_seq_create(e, &b, &err);
    struct wk_step_item it = {a, ids, 40, NULL, NULL, WK_LOGITS_NONE, NULL, NULL, 0, 0, NULL, NULL, 0};
    CHECK_EQ_INT(wk_engine_forward(e, &it, 1, &err), MM_OK); /* 3 pages */
    struct wk_step_item two[2] = {
        {a, ids + 40, 1, NULL, NULL, WK_LOGITS_NONE, NULL, NULL, 0, 0, NULL, NULL, 0},
        {b, ids, 20, NULL, NULL, WK_LOGITS_NONE, NULL, NULL, 0, 0, NULL, NULL, 0}};
    CHECK_EQ_INT(wk_engine_forward(e, two, 2, &err), MM_EXHAUSTED); /* b needs 2, one is free */
    CHECK_EQ_INT(wk_seq_len(a), 40);
    CHECK_EQ_INT(wk_seq_len(b), 0);
    CHECK_EQ_INT(wk_engine_free_pages(e), 1);
    two[1].n = 16;
    CHECK_EQ_INT(wk_engine_forward(e, two, 2, &err), MM_OK);
    /* more tokens than max_batch_tokens in one step */
    struct wk_seq *c = NULL;
    wk_seq_create(e, &c, &err);
    int32_t *big = calloc(300, sizeof(int32_t));
    struct wk_step_item bi = {c, big, 300, NULL, NULL, WK_LOGITS_NONE, NULL, NULL, 0, 0, NULL, NULL, 0};
    CHECK_EQ_INT(wk_engine_forward(e, &bi, 1, &err), MM_TOO_LARGE);
    free(big);
    wk_engine_close(e); /* frees the live sequences too */
}

/* a backend that offers upload_typed but takes no dtype: the vision code widens on the host */
static int32_t upload_typed_declines(void *ctx, float *dst, const void *src, int32_t dtype, int64_t n)
{
    (void)ctx, (void)dst, (void)src, (void)dtype, (void)n;
    return 0;
}

static void test_media(void)
{
    struct mm_err err = {0};
    int64_t row = 3 * 2 * 14 * 14, n = 2 * 4 * 6;
    float *px = malloc(sizeof(float) * (size_t)(n * row));
    for (int64_t i = 0; i < n * row; i++) px[i] = (float)sin((double)i * 0.01);
    struct wk_media m = {0, 1 /* MM_DT_F32 */, px, n, row, 2, 4, 6};
    float *emb = NULL;
    int64_t nt = 0;
    CHECK_EQ_INT(wk_engine_encode_media(E, &m, &emb, &nt, &err), MM_OK);
    CHECK_EQ_INT(nt, n / 4);
    double norm = 0;
    for (int64_t i = 0; emb && i < nt * wk_engine_info(E)->hidden_size; i++) norm += emb[i] * emb[i];
    CHECK(norm > 0 && isfinite(norm));
    /* the same item again gives the same embeddings (no state leaks between items) */
    float *emb2 = NULL;
    CHECK_EQ_INT(wk_engine_encode_media(E, &m, &emb2, &nt, &err), MM_OK);
    CHECK(emb && emb2 &&
          memcmp(emb, emb2, sizeof(float) * (size_t)(nt * wk_engine_info(E)->hidden_size)) == 0);
    free(emb);
    free(emb2);
    /* 16-bit pixels (what the gateway sends) give the embeddings of the same values in f32, bit for bit,
     * whether the backend widens them (upload_typed) or the vision code does (upload_typed NULL) */
    const int64_t H = wk_engine_info(E)->hidden_size;
    uint16_t *p16 = malloc(sizeof(uint16_t) * (size_t)(n * row));
    float *pw = malloc(sizeof(float) * (size_t)(n * row));
    const struct wk_backend_iface *plain = E->be.iface;
    struct wk_backend_iface untyped = *plain, declines = *plain;
    untyped.upload_typed = NULL;
    declines.upload_typed = upload_typed_declines;
    for (int f16 = 0; f16 < 2; f16++) {
        for (int64_t i = 0; i < n * row; i++) { /* half subnormals and both signs in the f16 round */
            const float v = f16 ? (float)(sin((double)i * 0.01) * (i % 7 == 0 ? 1e-6 : 1.0)) : px[i];
            p16[i] = f16 ? mm_f32_to_f16(v) : mm_f32_to_bf16(v);
            pw[i] = f16 ? mm_f16_to_f32(p16[i]) : mm_bf16_to_f32(p16[i]);
        }
        struct wk_media mw = m, mh = m;
        mw.pixels = pw;
        mh.dtype = f16 ? MM_DT_F16 : MM_DT_BF16;
        mh.pixels = p16;
        float *ew = NULL, *eh = NULL, *eu = NULL, *ed = NULL;
        int64_t nw = 0, nh = 0, nu = 0, nd = 0;
        CHECK_EQ_INT(wk_engine_encode_media(E, &mw, &ew, &nw, &err), MM_OK);
        CHECK_EQ_INT(wk_engine_encode_media(E, &mh, &eh, &nh, &err), MM_OK);
        E->be.iface = &untyped;
        CHECK_EQ_INT(wk_engine_encode_media(E, &mh, &eu, &nu, &err), MM_OK);
        E->be.iface = &declines;
        CHECK_EQ_INT(wk_engine_encode_media(E, &mh, &ed, &nd, &err), MM_OK);
        E->be.iface = plain;
        CHECK(nw == n / 4 && nh == nw && nu == nw && nd == nw);
        CHECK_MSG(ew && ed && !memcmp(ew, ed, sizeof(float) * (size_t)(nw * H)),
                  "%s pixels, upload_typed declining: embeddings differ", f16 ? "f16" : "bf16");
        CHECK_MSG(ew && eh && !memcmp(ew, eh, sizeof(float) * (size_t)(nw * H)),
                  "%s pixels: embeddings differ", f16 ? "f16" : "bf16");
        CHECK_MSG(ew && eu && !memcmp(ew, eu, sizeof(float) * (size_t)(nw * H)),
                  "%s pixels widened by the vision code: embeddings differ", f16 ? "f16" : "bf16");
        free(ew), free(eh), free(eu), free(ed);
    }
    free(p16);
    free(pw);
    m.row_len = row - 1;
    CHECK_EQ_INT(wk_engine_encode_media(E, &m, &emb, &nt, &err), MM_INVALID);
    m.row_len = row;
    m.grid_h = 3; /* not a multiple of the merge size */
    CHECK_EQ_INT(wk_engine_encode_media(E, &m, &emb, &nt, &err), MM_INVALID);
    m.grid_h = 4;
    m.n_rows = n - 1;
    CHECK_EQ_INT(wk_engine_encode_media(E, &m, &emb, &nt, &err), MM_INVALID);
    CHECK(emb == NULL);
    free(px);
}

/* The pool's page size follows the cache's element type (MMGW_CPU_KV): fp32 pages hold 4 bytes an element,
 * fp16 pages 2, so a byte budget buys twice the pages. Expected sizes from the checkpoint's shape. */
static void test_page_bytes(const struct mk_demo_opts *d)
{
    int64_t elems = 0; /* K + V of every layer, index keys of the MSA layers, per page */
    for (int32_t l = 0; l < d->layers; l++)
        elems += 2LL * d->block * d->kv_heads * d->head_dim +
                 (d->attn_pattern[l] == 's' ? d->block * d->idx_dim : 0);
    const char *old = getenv("MMGW_CPU_KV");
    char saved[16] = "";
    if (old) snprintf(saved, sizeof saved, "%s", old);
    static const char *const kinds[] = {"f32", "f16"};
    for (int k = 0; k < 2; k++) {
        setenv("MMGW_CPU_KV", kinds[k], 1);
        const int64_t elem = k ? 2 : 4, budget = 10 * elems * 4 + 123;
        struct wk_engine_opts o = {WK_BACKEND_CPU, 1, 0, budget, 64};
        struct wk_engine *e = NULL;
        struct mm_err err = {0};
        CHECK_EQ_INT(wk_engine_open(dir, &o, &e, &err), MM_OK);
        if (!e) continue;
        CHECK_EQ_INT(wk_engine_info(e)->bytes_per_page, elems * elem);
        CHECK_EQ_INT(wk_engine_info(e)->pages_total, k ? 20 : 10);
        /* the pool really holds that many pages: fill all of them, one more is refused */
        int32_t n = (int32_t)(wk_engine_info(e)->pages_total * d->block);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n + 1));
        struct wk_seq *s = NULL;
        if (ids && wk_seq_create(e, &s, &err) == MM_OK) {
            prompt(ids, n + 1, 7);
            for (int32_t o2 = 0; o2 < n; o2 += 64) {
                struct wk_step_item it = {s,    ids + o2, n - o2 < 64 ? n - o2 : 64,
                                          NULL, NULL,     WK_LOGITS_NONE,
                                          NULL, NULL,     0,
                                          0,    NULL,     NULL,
                                          0};
                CHECK_EQ_INT(wk_engine_forward(e, &it, 1, &err), MM_OK);
            }
            CHECK_EQ_INT(wk_engine_free_pages(e), 0);
            struct wk_step_item it = {s, ids + n, 1,    NULL, NULL, WK_LOGITS_NONE, NULL, NULL,
                                      0, 0,       NULL, NULL, 0};
            CHECK_EQ_INT(wk_engine_forward(e, &it, 1, &err), MM_EXHAUSTED);
            wk_seq_free(e, s);
        }
        free(ids);
        wk_engine_close(e);
    }
    /* a cache type the backend does not know is refused when the engine opens */
    setenv("MMGW_CPU_KV", "bf8", 1);
    struct wk_engine_opts o = {WK_BACKEND_CPU, 1, 4, 0, 64};
    struct wk_engine *e = NULL;
    struct mm_err err = {0};
    CHECK_EQ_INT(wk_engine_open(dir, &o, &e, &err), MM_INVALID);
    CHECK(strstr(err.msg, "MMGW_CPU_KV") != NULL);
    wk_engine_close(e);
    if (old)
        setenv("MMGW_CPU_KV", saved, 1);
    else
        unsetenv("MMGW_CPU_KV");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/mmgw_engine_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    struct mk_demo_opts o;
    struct mm_err err = {0};
    mk_demo_defaults(&o);
    CHECK_EQ_INT(mk_demo_write(dir, &o, &err), MM_OK);
    struct wk_engine_opts eo = {WK_BACKEND_CPU, 2, 256, 0, 512};
    CHECK_EQ_INT(wk_engine_open(dir, &eo, &E, &err), MM_OK);
    if (!E) {
        fprintf(stderr, "%s\n", err.msg);
        return test_done();
    }
    V = wk_engine_info(E)->vocab_size;
    CHECK_EQ_INT(wk_engine_info(E)->first_msa_layer, 1);
    CHECK_EQ_INT(wk_engine_info(E)->block_size, 16);
    test_chunking();
    test_batching();
    test_prefix_and_fork();
    test_fused_add_norm();
    test_greedy_tokens();
    test_candidates();
    test_candidates_draw();
    test_candidates_draw_logprobs();
    test_refusals();
    test_media();
    test_media_rows();
    wk_engine_close(E);
    test_exhausted();
    test_page_bytes(&o);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "cleanup failed\n");
    return test_done();
}
