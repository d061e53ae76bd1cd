/* Whole-model speed through the engine API on the CUDA backend: time to first token (prefill of a random
 * prompt of CTX tokens, chunked by max_batch_tokens, logits of the last position) and decode tokens/s
 * (greedy, every sequence of the batch one token per step), for a checkpoint given on the command line (the
 * synthetic one with M3's attention and index shapes comes from mmgw-mkdemo; see bench/cuda/README.md).
 *
 *   model_bench --model DIR [--ctx 32768,131072] [--batch 1,16] [--steps 32] [--pages N] [--chunk 8192]
 *               [--tokens argmax|logits|sample|sample-logits|logprobs|logprobs-logits] [--top-k 40]
 *               [--out results.tsv]
 *
 * --tokens: how each step's tokens are picked: argmax (the default, what the worker's scheduler asks for
 * greedy requests: WK_LOGITS_ARGMAX, the argmax on the device), logits (every sequence's logits row
 * downloaded and its argmax taken on the host), sample (sampled at MiniMax's recommended temperature 1,
 * top-p 0.95, top-k 40 from the candidates the device picks, WK_LOGITS_CANDS, as the scheduler does) or
 * sample-logits (the same sampling on the downloaded rows). --top-k 0: sampling without a top-k (top-p 0.95
 * alone); the random checkpoints' rows are flat, so sample then draws every token on the device
 * (kernels/cpu/kn_draw.h) and sample-logits samples every downloaded row on the host. logprobs: greedy with
 * the token's log-probability and the top 5 (what a request with logprobs and top_logprobs 5 asks): from the
 * device's candidates and the row's log-sum-exp, as the scheduler does; logprobs-logits: from the downloaded
 * row on the host (its log-sum-exp, the top 5). sample-logprobs: sampled as sample, with the token's
 * log-probability and the top 5 (a request with logprobs and top_logprobs 5): without a top-k (--top-k 0) the
 * device draws a flat row and returns the token's logit, the row's log-sum-exp and the top 5 (the scheduler's
 * logprob_draw); sample-logprobs-logits: the same from the downloaded row on the host.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kn_cands.h"
#include "mm_logprobs.h"
#include "mm_status.h"
#include "wk_engine.h"

#define DECODE_WARM 4 /* untimed decode steps per (context, batch) before the timed ones */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_list(const char *s, int64_t *v, int max)
{
    int n = 0;
    while (s && *s && n < max) {
        char *end;
        v[n++] = strtoll(s, &end, 10);
        s = *end == ',' ? end + 1 : NULL;
    }
    return n;
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

#define SAMPLE_CANDS 1024

static struct wk_sampling sp = {1.0f, 0.95f, 40, 0.0f}; /* MiniMax's recommended sampling (--top-k) */
static volatile float lp_sink;                          /* the log-probabilities are computed, not used */

/* item's logits request for the --tokens mode (cands: its candidates' room; rng: its sequence's state) */
static void set_mode(struct wk_step_item *it, int tokens, struct wk_cands *cands, int32_t *cids, float *clg,
                     const uint64_t *rng)
{
    static const int32_t modes[] = {WK_LOGITS_LAST,  WK_LOGITS_ARGMAX, WK_LOGITS_CANDS, WK_LOGITS_LAST,
                                    WK_LOGITS_CANDS, WK_LOGITS_LAST,   WK_LOGITS_CANDS, WK_LOGITS_LAST};
    it->logits_mode = modes[tokens];
    if (tokens == 4) {
        *cands = (struct wk_cands){.k = 5,
                                   .temperature = 1.0f,
                                   .cap = SAMPLE_CANDS,
                                   .ids = cids,
                                   .logits = clg,
                                   .n = -1,
                                   .flags = MM_CANDS_EXACT | MM_CANDS_LSE};
        it->cands = cands;
    }
    if (tokens == 2 || tokens == 6) {
        uint64_t peek = *rng;
        *cands = (struct wk_cands){.k = sp.top_k > 0 ? sp.top_k : INT32_MAX,
                                   .temperature = sp.temperature,
                                   .cap = SAMPLE_CANDS,
                                   .ids = cids,
                                   .logits = clg,
                                   .n = -1,
                                   .draw = 1,
                                   .top_p = sp.top_p,
                                   .min_p = sp.min_p,
                                   .u = wk_sample_uniform(&peek)};
        if (tokens == 6)
            cands->flags = MM_CANDS_LSE, cands->n_top = 5; /* as the scheduler asks (logprob_draw) */
        it->cands = cands;
    }
}

/* the sampled token's log-probability and the top 5 (x, n: the top list's logits; ids NULL: indexes are ids)
 */
static void sampled_logprobs(const float *x, int32_t n, const int32_t *ids, float lse, float x_tok)
{
    int32_t top[5] = {0};
    float lp[5] = {0};
    mm_top_logprobs(x, n, lse, n < 5 ? n : 5, top, lp);
    lp_sink += lp[0] + (x_tok - lse) + (float)(ids ? ids[top[0]] : top[0]);
}

/* the token the --tokens mode picks from what the step brought back */
static int32_t pick(const struct wk_step_item *it, int tokens, int32_t V, uint64_t *rng)
{
    if (tokens == 1) return it->token;
    if (tokens == 0) return argmax(it->logits, V);
    if (tokens == 4 || tokens == 5) { /* the greedy token, its log-probability and the top 5 */
        const int cand = tokens == 4 && it->cands->n > 0;
        const float *x = cand ? it->cands->logits : it->logits;
        const int32_t n = cand ? it->cands->n : V;
        const float lse = cand ? it->cands->lse : mm_logsumexp(x, n);
        int32_t top[5] = {0};
        float lp[5] = {0};
        mm_top_logprobs(x, n, lse, n < 5 ? n : 5, top, lp);
        lp_sink += lp[0];
        return cand ? it->cands->ids[top[0]] : top[0];
    }
    const struct wk_cands *c = it->cands;
    if ((tokens == 2 || tokens == 6) && c->n == -2) { /* drawn on the device with this state's next uniform */
        (void)wk_sample_uniform(rng);
        if (tokens == 6) sampled_logprobs(c->logits + 1, c->n_top_out, c->ids + 1, c->lse, c->logits[0]);
        return c->ids[0];
    }
    if ((tokens == 2 || tokens == 6) && c->n >= 0) {
        const int32_t j = c->n ? wk_sample(c->logits, c->n, &sp, rng, NULL) : -1;
        if (tokens == 6 && j >= 0) sampled_logprobs(c->logits, c->n, c->ids, c->lse, c->logits[j]);
        return j >= 0 ? c->ids[j] : 0;
    }
    const int32_t tok = wk_sample(it->logits, V, &sp, rng, NULL);
    if (tokens == 6 || tokens == 7)
        sampled_logprobs(it->logits, V, NULL, mm_logsumexp(it->logits, V), it->logits[tok]);
    return tok;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *outp = NULL;
    int64_t ctxs[8] = {32768, 131072}, batches[8] = {1, 16};
    int n_ctx = 2, n_batch = 2;
    int64_t pages = 0, chunk = 8192, steps = 32;
    int tokens = 1; /* 0 logits, 1 argmax, 2 sample, 3 sample-logits, 4 logprobs, 5 logprobs-logits,
                     * 6 sample-logprobs, 7 sample-logprobs-logits */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--ctx"))
            n_ctx = parse_list(argv[i + 1], ctxs, 8);
        else if (!strcmp(argv[i], "--batch"))
            n_batch = parse_list(argv[i + 1], batches, 8);
        else if (!strcmp(argv[i], "--steps"))
            steps = strtoll(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--pages"))
            pages = strtoll(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--chunk"))
            chunk = strtoll(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--out"))
            outp = argv[i + 1];
        else if (!strcmp(argv[i], "--top-k"))
            sp.top_k = (int32_t)strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--tokens")) {
            static const char *const modes[] = {
                "logits",   "argmax",          "sample",          "sample-logits",
                "logprobs", "logprobs-logits", "sample-logprobs", "sample-logprobs-logits"};
            tokens = -1;
            for (int m = 0; m < 8; m++)
                if (!strcmp(argv[i + 1], modes[m])) tokens = m;
            if (tokens < 0) {
                fprintf(stderr,
                        "model_bench: --tokens %s: argmax, logits, sample, sample-logits, logprobs, "
                        "logprobs-logits, sample-logprobs or sample-logprobs-logits\n",
                        argv[i + 1]);
                return 2;
            }
        } else {
            fprintf(stderr, "model_bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!model || chunk < 1 || steps < 1) {
        fprintf(stderr,
                "usage: model_bench --model DIR [--ctx 32768,...] [--batch 1,...] [--steps N] [--pages N] "
                "[--chunk N] [--tokens argmax|logits|sample|sample-logits|logprobs|logprobs-logits|"
                "sample-logprobs|sample-logprobs-logits] [--top-k N] [--out FILE]\n");
        return 2;
    }
    FILE *tsv = outp ? fopen(outp, "w") : NULL;
    struct wk_engine_opts o = {0};
    o.backend = WK_BACKEND_CUDA;
    o.cache_pages = pages;
    o.max_batch_tokens = (int32_t)chunk;
    struct wk_engine *e = NULL;
    struct mm_err err = {0};
    double t0 = now_s();
    if (wk_engine_open(model, &o, &e, &err)) {
        fprintf(stderr, "model_bench: %s: %s\n", mm_status_name(err.code), err.msg);
        return err.code == MM_UNAVAILABLE ? 77 : 1;
    }
    const struct wk_model_info *info = wk_engine_info(e);
    printf("model %s: %d layers, hidden %d, block %d, %lld pages (load %.1f s)\n", info->name, info->n_layers,
           info->hidden_size, info->block_size, (long long)info->pages_total, now_s() - t0);
    const int32_t V = info->vocab_size;
    uint64_t rng = 12345;
    /* warm-up (not timed): cuBLAS heuristics, scratch buffers grown to their working sizes */
    {
        struct wk_seq *ws = NULL;
        int32_t *wid = calloc((size_t)chunk, sizeof(int32_t));
        float *wl = malloc(sizeof(float) * (size_t)V);
        int rc = !wid || !wl || wk_seq_create(e, &ws, &err);
        for (int k = 0; k < 2 && !rc; k++) {
            struct wk_step_item it = {0};
            it.seq = ws;
            it.ids = wid;
            it.n = (int32_t)chunk;
            it.logits_mode = WK_LOGITS_LAST;
            it.logits = wl;
            rc = wk_engine_forward(e, &it, 1, &err);
        }
        for (int k = 0; k < 4 && !rc; k++) {
            struct wk_step_item it = {0};
            it.seq = ws;
            it.ids = wid;
            it.n = 1;
            it.logits_mode = WK_LOGITS_LAST;
            it.logits = wl;
            rc = wk_engine_forward(e, &it, 1, &err);
        }
        if (rc) fprintf(stderr, "model_bench: warm-up failed: %s\n", err.msg);
        if (ws) wk_seq_free(e, ws);
        free(wid);
        free(wl);
    }
    for (int ci = 0; ci < n_ctx; ci++)
        for (int bi = 0; bi < n_batch; bi++) {
            const int64_t ctx = ctxs[ci], B = batches[bi];
            if (wk_engine_pages_for(e, ctx + DECODE_WARM + steps) * B > wk_engine_free_pages(e)) {
                printf("  ctx %lld batch %lld: skipped, needs %lld pages (%lld free)\n", (long long)ctx,
                       (long long)B, (long long)(wk_engine_pages_for(e, ctx + DECODE_WARM + steps) * B),
                       (long long)wk_engine_free_pages(e));
                continue;
            }
            struct wk_seq **seqs = calloc((size_t)B, sizeof *seqs);
            int32_t *ids = malloc(sizeof(int32_t) * (size_t)chunk);
            float *logits = malloc(sizeof(float) * (size_t)V * (size_t)B);
            int32_t *next = malloc(sizeof(int32_t) * (size_t)B);
            struct wk_step_item *items = calloc((size_t)B, sizeof *items);
            struct wk_cands *cands = calloc((size_t)B, sizeof *cands);
            int32_t *cids = malloc(sizeof(int32_t) * SAMPLE_CANDS * (size_t)B);
            float *clg = malloc(sizeof(float) * SAMPLE_CANDS * (size_t)B);
            uint64_t *srng = malloc(sizeof(uint64_t) * (size_t)B); /* each sequence's sampling state */
            for (int64_t s = 0; srng && s < B; s++) srng[s] = 12345 + (uint64_t)s;
            if (!seqs || !ids || !logits || !next || !items || !cands || !cids || !clg || !srng) {
                fprintf(stderr, "model_bench: out of memory\n");
                return 1;
            }
            int rc = 0;
            for (int64_t s = 0; s < B && !rc; s++) rc = wk_seq_create(e, &seqs[s], &err);
            /* prefill: every sequence's prompt in chunks; the batch's first token is out when the last one is
             */
            double tp = now_s();
            for (int64_t s = 0; s < B && !rc; s++)
                for (int64_t p = 0; p < ctx && !rc; p += chunk) {
                    int32_t n = (int32_t)(ctx - p < chunk ? ctx - p : chunk);
                    for (int32_t i = 0; i < n; i++) {
                        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                        ids[i] = (int32_t)((rng >> 33) % (uint64_t)V);
                    }
                    struct wk_step_item it = {0};
                    it.seq = seqs[s];
                    it.ids = ids;
                    it.n = n;
                    it.logits = logits + s * V;
                    if (p + n == ctx)
                        set_mode(&it, tokens, &cands[s], cids + s * SAMPLE_CANDS, clg + s * SAMPLE_CANDS,
                                 &srng[s]);
                    rc = wk_engine_forward(e, &it, 1, &err);
                    if (p + n == ctx && !rc) next[s] = pick(&it, tokens, V, &srng[s]);
                }
            double ttft = now_s() - tp;
            /* decode: one token per sequence per step; the first DECODE_WARM steps untimed: a batch size's
             * first steps pay one-time costs (the first launch of each product kernel loads its module,
             * cuBLAS picks an algorithm per shape, graphs are captured), ~20 ms at batch 4, which is 20 % of
             * 64 steps */
            double td = now_s();
            for (int64_t st = 0; st < DECODE_WARM + steps && !rc; st++) {
                if (st == DECODE_WARM) td = now_s();
                for (int64_t s = 0; s < B; s++) {
                    memset(&items[s], 0, sizeof items[s]);
                    items[s].seq = seqs[s];
                    items[s].ids = &next[s];
                    items[s].n = 1;
                    items[s].logits = logits + s * V;
                    set_mode(&items[s], tokens, &cands[s], cids + s * SAMPLE_CANDS, clg + s * SAMPLE_CANDS,
                             &srng[s]);
                }
                rc = wk_engine_forward(e, items, (int32_t)B, &err);
                for (int64_t s = 0; s < B && !rc; s++) next[s] = pick(&items[s], tokens, V, &srng[s]);
            }
            double dec = now_s() - td;
            if (rc) {
                printf("  ctx %lld batch %lld: FAILED: %s: %s\n", (long long)ctx, (long long)B,
                       mm_status_name(err.code), err.msg);
            } else {
                double tps = (double)(B * steps) / dec;
                printf("  ctx %7lld batch %3lld: TTFT %8.3f s (prefill %.0f tok/s)  decode %8.1f tok/s (%.2f "
                       "ms/step)\n",
                       (long long)ctx, (long long)B, ttft, (double)(B * ctx) / ttft, tps,
                       1e3 * dec / (double)steps);
                if (tsv) {
                    fprintf(tsv, "model\tctx %lldK batch %lld\tTTFT\t%.6g\ts\n", (long long)(ctx / 1024),
                            (long long)B, ttft);
                    fprintf(tsv, "model\tctx %lldK batch %lld\tdecode\t%.6g\ttok/s\n",
                            (long long)(ctx / 1024), (long long)B, tps);
                    fflush(tsv);
                }
            }
            fflush(stdout);
            for (int64_t s = 0; s < B; s++)
                if (seqs[s]) wk_seq_free(e, seqs[s]);
            free(seqs), free(ids), free(logits), free(next), free(items), free(cands), free(cids), free(clg),
                free(srng);
        }
    wk_engine_close(e);
    if (tsv) fclose(tsv);
    return 0;
}
