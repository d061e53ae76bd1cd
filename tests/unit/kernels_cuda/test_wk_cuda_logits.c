/* The CUDA backend's greedy tokens and sampling candidates through the engine (WK_LOGITS_ARGMAX,
 * WK_LOGITS_CANDS: argmax_rows and topk_rows of wk_backend_cuda.c) against the logits WK_LOGITS_LAST brings
 * back for the same prompts in a step of the same shape: the token is wk_argmax of that row; the candidates
 * are kernels/cpu/kn_cands.c's for that row, in ascending ids with their logits; a row with more candidates
 * than the item's room comes back whole, and one without top-k that asks for the draw comes back as the
 * token kernels/cpu/kn_draw.c draws from that row. Prompt steps (run at once) and decode steps (recorded,
 * captured and replayed as graphs) both. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_util.h"
#include "kn_cands.h"
#include "mm_logprobs.h"
#include "kn_draw.h"
#include "mkdemo.h"
#include "wk_engine.h"

enum { S = 5, N = 12, CAP = 256, STEPS = 4, ENGINE_CAP = 1024 /* wk_forward.c's CANDS_CAP */ };

static struct wk_engine *E;
static int32_t V;

/* one step over seqs, item j with modes[j] (cands[j] for WK_LOGITS_CANDS), its tokens ids[j][0..n) */
static void step(struct wk_seq **seqs, int32_t (*ids)[N], int32_t n, const int32_t *modes, float *rows,
                 struct wk_cands *cands, struct wk_step_item *it)
{
    struct mm_err err = {0};
    for (int j = 0; j < S; j++) {
        memset(&it[j], 0, sizeof it[j]);
        it[j].seq = seqs[j], it[j].ids = ids[j], it[j].n = n, it[j].logits_mode = modes[j];
        it[j].logits = rows + (int64_t)j * V, it[j].cands = &cands[j], it[j].token = -1;
    }
    CHECK_MSG(wk_engine_forward(E, it, S, &err) == MM_OK, "forward: %s", err.msg);
}

/* the modes' results against the LAST rows ref of a step of the same shape */
static void check(const struct wk_step_item *it, const float *ref, const char *what)
{
    float *scratch = ct_hmalloc(sizeof(float) * (size_t)V), want_v[CAP];
    int32_t want[CAP];
    for (int j = 0; j < S; j++) {
        const float *row = ref + (int64_t)j * V;
        if (it[j].logits_mode == WK_LOGITS_ARGMAX) {
            CHECK_MSG(it[j].token == wk_argmax(row, V), "%s seq %d: token %d, want %d", what, j, it[j].token,
                      wk_argmax(row, V));
            continue;
        }
        const struct wk_cands *c = it[j].cands;
        const struct mm_cand_req q = {.k = c->k, .t = c->temperature, .flags = c->flags, .n_top = c->n_top};
        const int32_t n = kn_cands_req(row, V, &q, CAP, want, want_v, scratch);
        if (c->flags & MM_CANDS_LSE) {
            const float wl = mm_logsumexp(row, V);
            CHECK_MSG(fabsf(c->lse - wl) <= 2.5e-7f * fabsf(wl), "%s seq %d: lse %.9g, want %.9g", what, j,
                      c->lse, wl);
        }
        if (n > ENGINE_CAP && c->draw && c->k == INT32_MAX) {
            const struct mm_cand_req r = {
                .k = c->k, .t = c->temperature, .top_p = c->top_p, .min_p = c->min_p, .draw = 1, .u = c->u};
            const int32_t tok = kn_draw(row, V, &r, (uint32_t *)(void *)scratch);
            CHECK_MSG(c->n == -2 && c->ids[0] == tok, "%s seq %d: n %d token %d, want the draw's %d", what, j,
                      c->n, c->ids[0], tok);
            if (c->n != -2 || c->ids[0] != tok) continue;
            CHECK_MSG(c->logits[0] == row[tok], "%s seq %d: the token's logit %g, want %g", what, j,
                      c->logits[0], row[tok]);
            if (c->n_top > 0) { /* the top list: the exact top n_top's ids (any order) with their logits */
                const struct mm_cand_req tq = {.k = c->n_top, .t = c->temperature, .flags = MM_CANDS_EXACT};
                const int32_t nt = kn_cands_req(row, V, &tq, CAP, want, want_v, scratch);
                int ok = c->n_top_out == nt;
                for (int32_t a = 0; ok && a < nt; a++) {
                    int found = 0;
                    for (int32_t b = 0; b < nt; b++) found |= c->ids[1 + a] == want[b];
                    ok &= found && c->logits[1 + a] == row[c->ids[1 + a]];
                }
                CHECK_MSG(ok, "%s seq %d: top list of %d, want the exact top %d (%d)", what, j, c->n_top_out,
                          c->n_top, nt);
            }
            continue;
        }
        if (n > c->cap) { /* whole */
            CHECK_MSG(c->n == -1, "%s seq %d: %d candidates for room %d", what, j, c->n, c->cap);
            CHECK_MSG(memcmp(it[j].logits, row, sizeof(float) * (size_t)V) == 0,
                      "%s seq %d: whole row differs", what, j);
            continue;
        }
        CHECK_MSG(c->n == n && memcmp(c->ids, want, sizeof(int32_t) * (size_t)n) == 0 &&
                      memcmp(c->logits, want_v, sizeof(float) * (size_t)n) == 0,
                  "%s seq %d: %d candidates, want %d", what, j, c->n, n);
    }
    free(scratch);
}

int main(void)
{
    ct_require_gpu();
    char dir[] = "/tmp/mmgw_cuda_logits_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    struct mk_demo_opts o;
    struct mm_err err = {0};
    mk_demo_defaults(&o);
    CHECK_EQ_INT(mk_demo_write(dir, &o, &err), MM_OK);
    struct wk_engine_opts eo = {WK_BACKEND_CUDA, 1, 256, 0, 512};
    CHECK_MSG(wk_engine_open(dir, &eo, &E, &err) == MM_OK, "open: %s", err.msg);
    if (!E) return test_done();
    V = wk_engine_info(E)->vocab_size;
    int32_t ids[S][N];
    for (int j = 0; j < S; j++)
        for (int i = 0; i < N; i++) ids[j][i] = 10 + (int32_t)((j * 7919 + i * 104729) % 8000);
    float *ref = ct_hmalloc(sizeof(float) * S * V), *rows = ct_hmalloc(sizeof(float) * S * V);
    int32_t cid[S][CAP];
    float clg[S][CAP];
    /* seq 0 greedy; 1 top-k 40; 2 no top-k at a temperature whose candidates outgrow 8 (whole); 3 no top-k,
     * top-p 0.9 and min-p, drawn from on the device (the random model's rows are flat) with
     * log-probabilities: its token's logit, the row's log-sum-exp and the top 5; 4 greedy with 5
     * log-probabilities (no floor, the row's log-sum-exp) */
    struct wk_cands cands[S] = {
        {0},
        {.k = 40, .temperature = 0.8f, .cap = CAP, .ids = cid[1], .logits = clg[1]},
        {.k = INT32_MAX, .temperature = 1.0f, .cap = 8, .ids = cid[2], .logits = clg[2]},
        {.k = INT32_MAX,
         .temperature = 1.2f,
         .cap = CAP,
         .ids = cid[3],
         .logits = clg[3],
         .draw = 1,
         .top_p = 0.9f,
         .min_p = 0.001f,
         .u = 0.3,
         .flags = MM_CANDS_LSE,
         .n_top = 5},
        {.k = 5,
         .temperature = 1.0f,
         .cap = CAP,
         .ids = cid[4],
         .logits = clg[4],
         .flags = MM_CANDS_EXACT | MM_CANDS_LSE}};
    struct wk_cands none[S];
    memset(none, 0, sizeof none);
    static const int32_t last[S] = {WK_LOGITS_LAST, WK_LOGITS_LAST, WK_LOGITS_LAST, WK_LOGITS_LAST,
                                    WK_LOGITS_LAST};
    static const int32_t modes[S] = {WK_LOGITS_ARGMAX, WK_LOGITS_CANDS, WK_LOGITS_CANDS, WK_LOGITS_CANDS,
                                     WK_LOGITS_CANDS};
    struct wk_seq *a[S], *b[S];
    for (int j = 0; j < S; j++) {
        CHECK_EQ_INT(wk_seq_create(E, &a[j], &err), MM_OK);
        CHECK_EQ_INT(wk_seq_create(E, &b[j], &err), MM_OK);
    }
    struct wk_step_item ia[S], ib[S];
    step(a, ids, N, last, ref, none, ia);
    step(b, ids, N, modes, rows, cands, ib);
    check(ib, ref, "prompt");
    /* decode: both sets fed the same tokens (the greedy one of the reference rows) */
    int32_t next[S][N];
    for (int s = 0; s < STEPS; s++) {
        for (int j = 0; j < S; j++) next[j][0] = wk_argmax(ref + (int64_t)j * V, V);
        cands[3].u = 0.13 + 0.21 * s; /* each replay of the graph draws with its step's uniform */
        step(a, next, 1, last, ref, none, ia);
        step(b, next, 1, modes, rows, cands, ib);
        check(ib, ref, "decode");
    }
    for (int j = 0; j < S; j++) wk_seq_free(E, a[j]), wk_seq_free(E, b[j]);
    wk_engine_close(E);
    free(ref), free(rows);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "cleanup failed\n");
    return test_done();
}
