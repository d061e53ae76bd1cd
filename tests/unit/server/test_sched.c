/* The scheduler against a fake engine (test fixture): batching, chunked prefill, forks, stops, abort,
 * admission, preemption, prefix reuse, drain (media: test_sched_media.c). The expected tokens come from the
 * fake model run alone (fake_solo_greedy), never from the scheduler. */
#include <math.h>
#include <stdio.h>

#include "sched_env.h"

static void test_single(void)
{
    struct wk_sched_opts so = {0};
    struct env v = env_open(&k_cfg, &so, 1);
    int32_t ids[37];
    mkprompt(ids, 37, 1, 64);
    struct rec *r = rec_new();
    CHECK(submit(&v, mkreq("a", ids, 37, 20, 1, 512), r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->status, MM_OK);
    check_solo(r, 0, ids, 37, 20);
    CHECK_STR(r->comp[0].finish_reason, "length");
    CHECK_EQ_INT(r->comp[0].prompt_tokens, 37);
    CHECK_EQ_INT(r->comp[0].completion_tokens, 20);
    CHECK_EQ_INT(r->comp[0].cached_tokens, 0);
    CHECK(r->order_ok);
    /* greedy without log-probabilities: every token (the prompt's first and 19 decode steps) came back as
     * the engine's argmax, no logits */
    const struct fake_stats *fs = fake_engine_stats(v.e);
    CHECK_EQ_INT(fake_engine_stat(v.e, &fs->argmax_rows), 20);
    CHECK_EQ_INT(fake_engine_stat(v.e, &fs->logit_rows), 0);
    struct wk_sched_load l;
    wk_sched_load(v.s, &l);
    CHECK_EQ_INT(l.free_pages, l.total_pages);
    CHECK_EQ_INT(l.running_requests, 0);
    rec_free(r);
    env_close(&v);
}

/* 16 requests at once, chunked prefill with a small budget: each equals its solo run, and steps mixed them */
static void test_concurrent_chunked(void)
{
    struct wk_sched_opts so = {.step_tokens = 16};
    struct env v = env_open(&k_cfg, &so, 1);
    enum { N = 16 };
    int32_t ids[N][80];
    int64_t len[N];
    struct rec *r[N];
    for (int i = 0; i < N; i++) {
        len[i] = 5 + i * 4;
        mkprompt(ids[i], len[i], 100 + (uint64_t)i, 64);
        r[i] = rec_new();
        char id[16];
        snprintf(id, sizeof(id), "c%d", i);
        CHECK(submit(&v, mkreq(id, ids[i], len[i], 10 + i, 1, 512), r[i]) == MM_OK);
    }
    for (int i = 0; i < N; i++) {
        CHECK(rec_wait_end(r[i], 10000) == 0);
        CHECK_EQ_INT(r[i]->status, MM_OK);
        check_solo(r[i], 0, ids[i], len[i], 10 + i);
        rec_free(r[i]);
    }
    const struct fake_stats *st = fake_engine_stats(v.e);
    CHECK_MSG(st->max_items > 1, "no step batched several sequences (max %lld)", (long long)st->max_items);
    CHECK_MSG(st->max_step_tokens <= 16, "a step took %lld tokens, budget 16",
              (long long)st->max_step_tokens);
    CHECK_EQ_INT(st->exhausted, 0);
    env_close(&v);
}

static void test_fork_n(void)
{
    struct wk_sched_opts so = {0};
    struct env v = env_open(&k_cfg, &so, 1);
    int32_t ids[30];
    mkprompt(ids, 30, 7, 64);
    struct rec *r = rec_new();
    CHECK(submit(&v, mkreq("f", ids, 30, 12, 3, 512), r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->status, MM_OK);
    for (int c = 0; c < 3; c++) {
        check_solo(r, c, ids, 30, 12); /* greedy: every choice is the same continuation */
        CHECK_STR(r->comp[c].finish_reason, "length");
    }
    CHECK_EQ_INT(r->completes, 3);
    CHECK_EQ_INT(fake_engine_stats(v.e)->forks, 2);
    rec_free(r);

    /* sampling with a seed: reproducible, and the choices are not all equal */
    struct rec *a = rec_new(), *b = rec_new();
    for (int k = 0; k < 2; k++) {
        struct wk_request *q = mkreq(k ? "s2" : "s1", ids, 30, 16, 3, 512);
        q->sp.temperature = 5.0f;
        q->sp.has_seed = 1;
        q->sp.seed = 42;
        CHECK(submit(&v, q, k ? b : a) == MM_OK);
    }
    CHECK(rec_wait_end(a, 5000) == 0 && rec_wait_end(b, 5000) == 0);
    int same_runs = 1, all_same_choices = 1;
    for (int c = 0; c < 3; c++) {
        same_runs &= a->n_tok[c] == b->n_tok[c] && memcmp(a->tok[c], b->tok[c], sizeof(a->tok[c])) == 0;
        all_same_choices &= memcmp(a->tok[c], a->tok[0], sizeof(a->tok[0])) == 0;
    }
    CHECK_MSG(same_runs, "the same seed gave different tokens");
    CHECK_MSG(!all_same_choices, "three sampled choices came out identical");
    rec_free(a);
    rec_free(b);
    env_close(&v);
}

/* A prompt whose greedy continuation meets the eos token within 40 tokens. */
static int64_t find_eos_prompt(int32_t *ids, int64_t n, int32_t *eos_at)
{
    int32_t out[40];
    for (uint64_t seed = 1; seed < 100000; seed++) {
        mkprompt(ids, n, seed, 64);
        fake_solo_greedy(ids, n, NULL, 40, out);
        for (int i = 2; i < 40; i++)
            if (out[i] == 1) {
                int first = 1;
                for (int j = 0; j < i; j++) first &= out[j] != 1;
                if (!first) break;
                *eos_at = i;
                return (int64_t)seed;
            }
    }
    return -1;
}

static void test_stops(void)
{
    struct wk_sched_opts so = {0};
    struct env v = env_open(&k_cfg, &so, 1);
    int32_t ids[20], eos_at = -1;
    CHECK(find_eos_prompt(ids, 20, &eos_at) > 0);
    /* eos: tokens up to and including it, finish "stop", matched */
    struct rec *r = rec_new();
    struct wk_request *q = mkreq("eos", ids, 20, 40, 1, 512);
    q->sp.ignore_eos = 0;
    CHECK(submit(&v, q, r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->n_tok[0], eos_at + 1);
    CHECK_EQ_INT(r->tok[0][eos_at], 1);
    CHECK_STR(r->comp[0].finish_reason, "stop");
    CHECK(r->comp[0].has_matched_stop && r->comp[0].matched_stop == 1);
    rec_free(r);

    /* a stop id: the first occurrence of the solo run's 3rd token */
    int32_t solo[40];
    fake_solo_greedy(ids, 20, NULL, 40, solo);
    int32_t stop = solo[2], first = 0;
    while (solo[first] != stop) first++;
    r = rec_new();
    q = mkreq("stopid", ids, 20, 40, 1, 512);
    q->sp.stop_ids = malloc(sizeof(int32_t));
    q->sp.stop_ids[0] = stop;
    q->sp.n_stop_ids = 1;
    CHECK(submit(&v, q, r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->n_tok[0], first + 1);
    CHECK_STR(r->comp[0].finish_reason, "stop");
    CHECK_EQ_INT(r->comp[0].matched_stop, stop);
    rec_free(r);

    /* min_new_tokens: the stop id cannot come before it */
    r = rec_new();
    q = mkreq("minnew", ids, 20, 40, 1, 512);
    q->sp.stop_ids = malloc(sizeof(int32_t));
    q->sp.stop_ids[0] = solo[0];
    q->sp.n_stop_ids = 1;
    q->sp.min_new_tokens = 3;
    const struct fake_stats *fs = fake_engine_stats(v.e);
    const int64_t lr0 = fake_engine_stat(v.e, &fs->logit_rows), am0 = fake_engine_stat(v.e, &fs->argmax_rows);
    CHECK(submit(&v, q, r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK(r->n_tok[0] >= 3);
    /* the first 3 tokens need the logits (the stop id masked), the rest only the argmax */
    CHECK_EQ_INT(fake_engine_stat(v.e, &fs->logit_rows) - lr0, 3);
    CHECK_EQ_INT(fake_engine_stat(v.e, &fs->argmax_rows) - am0, r->n_tok[0] - 3);
    for (int i = 0; i < 3 && i < r->n_tok[0]; i++) CHECK(r->tok[0][i] != solo[0]);
    rec_free(r);

    /* max_new_tokens 0: nothing generated, "length" */
    r = rec_new();
    CHECK(submit(&v, mkreq("zero", ids, 20, 0, 2, 512), r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->status, MM_OK);
    CHECK_EQ_INT(r->n_tok[0], 0);
    CHECK_EQ_INT(r->completes, 2);
    CHECK_STR(r->comp[1].finish_reason, "length");
    rec_free(r);

    /* the context bound: finish "length" when the sequence reaches max_context */
    r = rec_new();
    int32_t big[500];
    mkprompt(big, 500, 3, 64);
    CHECK(submit(&v, mkreq("ctx", big, 500, -1, 1, 512), r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->n_tok[0], 12);
    CHECK_STR(r->comp[0].finish_reason, "length");
    rec_free(r);
    env_close(&v);
}

static int32_t g_abort_found = -1;
static void on_abort(void *arg, int32_t found)
{
    __atomic_store_n(&g_abort_found, found, __ATOMIC_SEQ_CST);
}

static void test_abort_cancel(void)
{
    struct wk_sched_opts so = {.step_tokens = 8};
    struct env v = env_open(&k_cfg, &so, 1);
    fake_engine_set_delay(v.e, 2000);
    int32_t ids[40];
    mkprompt(ids, 40, 9, 64);
    struct rec *r = rec_new();
    CHECK(submit(&v, mkreq("long", ids, 40, 470, 2, 512), r) == MM_OK);
    CHECK(rec_wait_tokens(r, 5, 5000) == 0);
    wk_sched_abort(v.s, "long", on_abort, NULL);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->status, MM_CANCELLED);
    CHECK_EQ_INT(r->completes, 2);
    CHECK_STR(r->comp[0].finish_reason, "abort");
    CHECK(r->order_ok);
    /* the abort callback runs after the pages are back */
    for (int i = 0; i < 100 && __atomic_load_n(&g_abort_found, __ATOMIC_SEQ_CST) < 0; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    CHECK_EQ_INT(__atomic_load_n(&g_abort_found, __ATOMIC_SEQ_CST), 1);
    struct wk_sched_load l;
    wk_sched_load(v.s, &l);
    CHECK_EQ_INT(l.free_pages, l.total_pages);
    CHECK_EQ_INT(l.running_requests, 0);
    rec_free(r);

    __atomic_store_n(&g_abort_found, -1, __ATOMIC_SEQ_CST);
    wk_sched_abort(v.s, "nobody", on_abort, NULL);
    for (int i = 0; i < 100 && __atomic_load_n(&g_abort_found, __ATOMIC_SEQ_CST) < 0; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    CHECK_EQ_INT(__atomic_load_n(&g_abort_found, __ATOMIC_SEQ_CST), 0);

    /* cancel by ticket (a client that went away) */
    r = rec_new();
    struct wk_sched_sink sk = rec_sink(r);
    struct mm_err err = {0};
    uint64_t t = 0;
    CHECK(wk_sched_submit(v.s, mkreq("gone", ids, 40, 470, 1, 512), &sk, &t, &err) == MM_OK);
    CHECK(rec_wait_tokens(r, 3, 5000) == 0);
    wk_sched_cancel(v.s, t);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->status, MM_CANCELLED);
    CHECK(r->n_tok[0] < 470);
    rec_free(r);
    env_close(&v);
}

/* A pool of 24 pages (96 tokens): four requests of 10 pages each can only run two at a time. */
static void test_admission(void)
{
    struct fake_config cfg = k_cfg;
    cfg.pages = 24;
    struct wk_sched_opts so = {.max_waiting = 8};
    struct env v = env_open(&cfg, &so, 1);
    int32_t ids[4][20];
    struct rec *r[4];
    for (int i = 0; i < 4; i++) {
        mkprompt(ids[i], 20, 50 + (uint64_t)i, 64);
        r[i] = rec_new();
        char id[8];
        snprintf(id, sizeof(id), "p%d", i);
        CHECK(submit(&v, mkreq(id, ids[i], 20, 20, 1, 512), r[i]) == MM_OK);
    }
    for (int i = 0; i < 4; i++) {
        CHECK(rec_wait_end(r[i], 10000) == 0);
        CHECK_EQ_INT(r[i]->status, MM_OK);
        check_solo(r[i], 0, ids[i], 20, 20);
        rec_free(r[i]);
    }
    CHECK_EQ_INT(fake_engine_stats(v.e)->exhausted, 0); /* never ran out mid-generation */

    /* a request that can never fit the pool, even alone, is refused at once, as the client's error: 4
     * choices of 10 + 30 tokens reserve 10 + 3 x 8 = 34 pages of 24 */
    int32_t big[60];
    mkprompt(big, 60, 5, 64);
    struct rec *x = rec_new();
    CHECK_EQ_INT(submit(&v, mkreq("many", big, 10, 30, 4, 512), x), MM_INVALID);
    rec_free(x);
    env_close(&v);
}

/* The context a request may fill is capped by the pool (24 pages of 4 = 96 tokens of the model's 512): a
 * prompt that fits it is admitted, whether or not max_new_tokens is set (an unbounded one reserves up to the
 * capped context, not 256 tokens past the prompt); n choices that cannot all fit are MM_INVALID. */
static void test_context_capped_by_pool(void)
{
    struct fake_config cfg = k_cfg;
    cfg.pages = 24;
    struct wk_sched_opts so = {0};
    struct env v = env_open(&cfg, &so, 1);
    CHECK_EQ_INT(wk_sched_max_context(v.s), 96);
    int32_t ids[95];
    mkprompt(ids, 95, 7, 64);
    /* the requests as the decoder makes them with the advertised context (96): max_new_tokens <= 96 - n */
    const char *names[2] = {"unbounded", "bounded"};
    for (int b = 0; b < 2; b++) {
        struct rec *r = rec_new();
        CHECK_EQ_INT(submit(&v, mkreq(names[b], ids, 95, b ? 500 : -1, 1, 96), r), MM_OK);
        CHECK(rec_wait_end(r, 5000) == 0);
        CHECK_EQ_INT(r->status, MM_OK);
        check_solo(r, 0, ids, 95, 1);
        CHECK_STR(r->comp[0].finish_reason, "length");
        rec_free(r);
    }
    struct rec *x = rec_new();
    /* two choices of the 95-token prompt: 24 pages + the second's copied last page */
    CHECK_EQ_INT(submit(&v, mkreq("two", ids, 95, -1, 2, 96), x), MM_INVALID);
    /* two choices of 40 + 56 tokens: 24 + (24 - 10) pages */
    CHECK_EQ_INT(submit(&v, mkreq("two-bounded", ids, 40, 56, 2, 96), x), MM_INVALID);
    rec_free(x);
    /* what fits is still admitted, the pool whole again */
    struct rec *r = rec_new();
    CHECK_EQ_INT(submit(&v, mkreq("two-short", ids, 40, 8, 2, 96), r), MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->status, MM_OK);
    check_solo(r, 0, ids, 40, 8);
    rec_free(r);
    struct wk_sched_load l;
    wk_sched_load(v.s, &l);
    CHECK_EQ_INT(l.free_pages, 24);
    env_close(&v);
}

static void test_queue_bound_and_ids(void)
{
    struct wk_sched_opts so = {.max_waiting = 2};
    struct env v = env_open(&k_cfg, &so, 0); /* not started: nothing leaves the queue */
    int32_t ids[8];
    mkprompt(ids, 8, 1, 64);
    struct rec *r[4];
    for (int i = 0; i < 4; i++) r[i] = rec_new();
    CHECK_EQ_INT(submit(&v, mkreq("q0", ids, 8, 4, 1, 512), r[0]), MM_OK);
    CHECK_EQ_INT(submit(&v, mkreq("q0", ids, 8, 4, 1, 512), r[1]), MM_INVALID); /* id in use */
    CHECK_EQ_INT(submit(&v, mkreq("q1", ids, 8, 4, 1, 512), r[1]), MM_OK);
    CHECK_EQ_INT(submit(&v, mkreq("q2", ids, 8, 4, 1, 512), r[2]), MM_EXHAUSTED);
    struct wk_sched_load l;
    wk_sched_load(v.s, &l);
    CHECK_EQ_INT(l.waiting_requests, 2);
    wk_sched_destroy(v.s);
    CHECK(r[0]->ended && r[0]->status == MM_UNAVAILABLE);
    CHECK(r[1]->ended && r[1]->status == MM_UNAVAILABLE);
    CHECK(!r[2]->ended);
    for (int i = 0; i < 4; i++) rec_free(r[i]);
    wk_engine_close(v.e);
}

static void test_prefix_reuse(void)
{
    struct wk_sched_opts so = {0};
    struct env v = env_open(&k_cfg, &so, 1);
    int32_t ids[22];
    mkprompt(ids, 22, 77, 64);
    struct rec *a = rec_new(), *b = rec_new();
    CHECK(submit(&v, mkreq("first", ids, 22, 6, 1, 512), a) == MM_OK);
    CHECK(rec_wait_end(a, 5000) == 0);
    CHECK_EQ_INT(a->comp[0].cached_tokens, 0);
    CHECK(submit(&v, mkreq("second", ids, 22, 6, 1, 512), b) == MM_OK);
    CHECK(rec_wait_end(b, 5000) == 0);
    CHECK_EQ_INT(b->comp[0].cached_tokens, 20); /* the five full pages of 4 */
    check_solo(b, 0, ids, 22, 6);
    rec_free(a);
    rec_free(b);
    env_close(&v);
}

/* Requests without max_new_tokens grow their reservation step by step; when the pool runs short the
 * youngest is preempted and recomputed later, and its tokens are still exactly the solo run's. */
static void test_preemption(void)
{
    struct fake_config cfg = k_cfg;
    cfg.pages = 64;
    cfg.max_context = 120;
    struct wk_sched_opts so = {.grow_tokens = 8, .step_tokens = 32};
    /* queued before the scheduler starts, so all three run together whatever the machine's load (started
     * first, u0 could finish before u2 arrived and nothing would need preempting) */
    struct env v = env_open(&cfg, &so, 0);
    enum { N = 3 };
    int32_t ids[N][10];
    struct rec *r[N];
    for (int i = 0; i < N; i++) {
        mkprompt(ids[i], 10, 300 + (uint64_t)i, 64);
        r[i] = rec_new();
        char id[8];
        snprintf(id, sizeof(id), "u%d", i);
        CHECK(submit(&v, mkreq(id, ids[i], 10, -1, i == 1 ? 2 : 1, 120), r[i]) == MM_OK);
    }
    struct mm_err err = {0};
    CHECK(wk_sched_start(v.s, &err) == MM_OK);
    for (int i = 0; i < N; i++) {
        CHECK(rec_wait_end(r[i], 20000) == 0);
        CHECK_EQ_INT(r[i]->status, MM_OK);
        check_solo(r[i], 0, ids[i], 10, 110);
        if (i == 1) check_solo(r[i], 1, ids[i], 10, 110);
        CHECK_STR(r[i]->comp[0].finish_reason, "length");
        rec_free(r[i]);
    }
    struct wk_sched_load l;
    wk_sched_load(v.s, &l);
    CHECK_MSG(l.preemptions > 0, "expected the small pool to force a preemption");
    CHECK_EQ_INT(fake_engine_stats(v.e)->exhausted, 0);
    env_close(&v);
}

static void test_logprobs(void)
{
    struct wk_sched_opts so = {0};
    struct env v = env_open(&k_cfg, &so, 1);
    int32_t ids[12];
    mkprompt(ids, 12, 21, 64);
    struct wk_request *q = mkreq("lp", ids, 12, 5, 1, 512);
    q->sp.return_logprobs = 1;
    q->sp.top_logprobs = 3;
    struct rec *r = rec_new();
    CHECK(submit(&v, q, r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    /* the fake's logits: 5 at the peak, the rest in [0, 1): compute the peak's log-softmax independently */
    uint64_t h = 0x1234;
    for (int i = 0; i < 12; i++) h = fake_mix(h, ids[i]);
    float lg[64];
    fake_logits(64, h, lg);
    double sum = 0;
    for (int i = 0; i < 64; i++) sum += exp((double)lg[i]);
    CHECK_NEAR(r->lp[0][0], 5.0 - log(sum), 1e-4);
    /* greedy log-probabilities come from the candidates (the top 3 and more) with the row's log-sum-exp */
    CHECK_EQ_INT(fake_engine_stat(v.e, &fake_engine_stats(v.e)->logit_rows), 0);
    CHECK_EQ_INT(fake_engine_stat(v.e, &fake_engine_stats(v.e)->cand_rows), 5);
    CHECK_EQ_INT(fake_engine_stat(v.e, &fake_engine_stats(v.e)->argmax_rows), 0);
    for (int k = 0; k < 5; k++) {
        CHECK(r->lp[0][k] < 0.0f);
        CHECK_EQ_INT(r->top1[0][k], r->tok[0][k]);
    }
    rec_free(r);
    env_close(&v);
}

/* Sampled requests take their tokens from the engine's candidates (WK_LOGITS_CANDS), with a top-k or without
 * (top-p only): the same seeded request asking for log-probabilities gets the same tokens (with a top-k from
 * the candidates with the row's log-sum-exp; without, drawn with its logit and top list). Without a top-k
 * the engine draws (the fake always does) with the uniform the choice's state gives next, and the state moves
 * on as wk_sample's would; host_draw turns that off (the fake then hands every token as a candidate). */
static void test_candidates(int32_t top_k, int32_t host_draw)
{
    struct wk_sched_opts so = {.host_draw = host_draw};
    struct env v = env_open(&k_cfg, &so, 1);
    int32_t ids[14];
    mkprompt(ids, 14, 41, 64);
    const struct fake_stats *fs = fake_engine_stats(v.e);
    struct rec *r[2];
    for (int k = 0; k < 2; k++) {
        struct wk_request *q = mkreq(k ? "whole" : "cands", ids, 14, 12, 1, 512);
        q->sp.temperature = 1.5f;
        q->sp.top_k = top_k;
        q->sp.top_p = top_k ? 1.0f : 0.9f;
        q->sp.has_seed = 1;
        q->sp.seed = 77;
        q->sp.return_logprobs = k;
        const int64_t c0 = fake_engine_stat(v.e, &fs->cand_rows), l0 = fake_engine_stat(v.e, &fs->logit_rows),
                      d0 = fake_engine_stat(v.e, &fs->drawn_rows);
        r[k] = rec_new();
        CHECK(submit(&v, q, r[k]) == MM_OK);
        CHECK(rec_wait_end(r[k], 5000) == 0);
        CHECK_EQ_INT(r[k]->n_tok[0], 12);
        CHECK_EQ_INT(fake_engine_stat(v.e, &fs->cand_rows) - c0, 12);
        CHECK_EQ_INT(fake_engine_stat(v.e, &fs->logit_rows) - l0, 0);
        CHECK_EQ_INT(fake_engine_stat(v.e, &fs->drawn_rows) - d0, !top_k && !host_draw ? 12 : 0);
    }
    CHECK(memcmp(r[0]->tok[0], r[1]->tok[0], 12 * sizeof(int32_t)) == 0);
    int varied = 0; /* a sampled run, not the greedy one */
    for (int i = 1; i < 12; i++) varied |= r[0]->tok[0][i] != r[0]->tok[0][0];
    CHECK(varied);
    rec_free(r[0]), rec_free(r[1]);
    env_close(&v);
}

/* Sampled without a top-k, with log-probabilities and the top 3: every token is drawn by the engine, which
 * returns its logit and the top list with the row's log-sum-exp; each token's log-probability and top
 * token equal those computed here from the fake's whole row, and the tokens, log-probabilities and top
 * tokens equal those of the same seeded request sampled on the host (host_draw: every token a candidate) */
static void test_logprobs_drawn(void)
{
    enum { N = 10, P = 11 };
    struct rec *r[2];
    int32_t ids[P];
    mkprompt(ids, P, 47, 64);
    for (int hd = 0; hd < 2; hd++) {
        struct wk_sched_opts so = {.host_draw = hd};
        struct env v = env_open(&k_cfg, &so, 1);
        const struct fake_stats *fs = fake_engine_stats(v.e);
        struct wk_request *q = mkreq(hd ? "lp-host" : "lp-drawn", ids, P, N, 1, 512);
        q->sp.temperature = 1.5f;
        q->sp.top_p = 0.9f;
        q->sp.has_seed = 1;
        q->sp.seed = 5;
        q->sp.return_logprobs = 1;
        q->sp.top_logprobs = 3;
        const int64_t d0 = fake_engine_stat(v.e, &fs->drawn_rows),
                      l0 = fake_engine_stat(v.e, &fs->logit_rows);
        r[hd] = rec_new();
        CHECK(submit(&v, q, r[hd]) == MM_OK);
        CHECK(rec_wait_end(r[hd], 5000) == 0);
        CHECK_EQ_INT(r[hd]->n_tok[0], N);
        CHECK_EQ_INT(fake_engine_stat(v.e, &fs->drawn_rows) - d0, hd ? 0 : N);
        CHECK_EQ_INT(fake_engine_stat(v.e, &fs->logit_rows) - l0, 0);
        env_close(&v);
    }
    uint64_t h = 0x1234;
    for (int i = 0; i < P; i++) h = fake_mix(h, ids[i]);
    for (int k = 0; k < N && k < r[0]->n_tok[0]; k++) {
        float lg[64];
        fake_logits(64, h, lg);
        double sum = 0;
        int32_t best = 0;
        for (int i = 0; i < 64; i++) {
            sum += exp((double)lg[i]);
            if (lg[i] > lg[best]) best = i;
        }
        const int32_t tok = r[0]->tok[0][k];
        CHECK_NEAR(r[0]->lp[0][k], lg[tok] - log(sum), 1e-4);
        CHECK_EQ_INT(r[0]->top1[0][k], best);
        CHECK_EQ_INT(r[1]->tok[0][k], tok);
        CHECK(r[1]->lp[0][k] == r[0]->lp[0][k]);
        CHECK_EQ_INT(r[1]->top1[0][k], best);
        h = fake_mix(h, tok);
    }
    int varied = 0; /* sampled, not greedy */
    for (int k = 0; k < N; k++) varied |= r[0]->tok[0][k] != r[0]->top1[0][k];
    CHECK(varied);
    rec_free(r[0]), rec_free(r[1]);
}

/* A request of 3 choices without a top-k: the prompt's last row gives all three their first token, so it is
 * not drawn from with one choice's uniform (candidates, or the whole row); the decode rows are, one draw per
 * choice and step; the tokens equal those of the same seeded request sampled on the host (host_draw) */
static void test_draw_choices(void)
{
    struct wk_sched_opts so = {0};
    struct env v = env_open(&k_cfg, &so, 1);
    struct wk_sched_opts so_host = {.host_draw = 1};
    struct env vh = env_open(&k_cfg, &so_host, 1);
    int32_t ids[9];
    mkprompt(ids, 9, 43, 64);
    struct rec *r[2];
    for (int k = 0; k < 2; k++) {
        struct wk_request *q = mkreq(k ? "host3" : "draw3", ids, 9, 6, 3, 512);
        q->sp.temperature = 1.2f;
        q->sp.top_p = 0.8f;
        q->sp.has_seed = 1;
        q->sp.seed = 99;
        struct env *e = k ? &vh : &v;
        const int64_t d0 = fake_engine_stat(e->e, &fake_engine_stats(e->e)->drawn_rows);
        r[k] = rec_new();
        CHECK(submit(e, q, r[k]) == MM_OK);
        CHECK(rec_wait_end(r[k], 5000) == 0);
        for (int i = 0; i < 3; i++) CHECK_EQ_INT(r[k]->n_tok[i], 6);
        CHECK_EQ_INT(fake_engine_stat(e->e, &fake_engine_stats(e->e)->drawn_rows) - d0, k ? 0 : 3 * 5);
    }
    for (int i = 0; i < 3; i++) CHECK(memcmp(r[0]->tok[i], r[1]->tok[i], 6 * sizeof(int32_t)) == 0);
    rec_free(r[0]), rec_free(r[1]);
    env_close(&v);
    env_close(&vh);
}

static void test_forward_failure_and_drain(void)
{
    struct wk_sched_opts so = {0};
    struct env v = env_open(&k_cfg, &so, 1);
    int32_t ids[10];
    mkprompt(ids, 10, 31, 64);
    fake_engine_fail_forward_after(v.e, 2);
    struct rec *r = rec_new();
    CHECK(submit(&v, mkreq("boom", ids, 10, 20, 1, 512), r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->status, MM_ERROR);
    CHECK_EQ_INT(r->completes, 1); /* the open choice still gets its Complete */
    CHECK_STR(r->comp[0].finish_reason, "abort");
    rec_free(r);
    /* the scheduler keeps serving */
    r = rec_new();
    CHECK(submit(&v, mkreq("after", ids, 10, 5, 1, 512), r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->status, MM_OK);
    check_solo(r, 0, ids, 10, 5);
    rec_free(r);

    /* drain: a running request finishes, new ones are refused */
    fake_engine_set_delay(v.e, 1000);
    r = rec_new();
    CHECK(submit(&v, mkreq("last", ids, 10, 200, 1, 512), r) == MM_OK);
    CHECK(rec_wait_tokens(r, 2, 5000) == 0);
    wk_sched_drain(v.s, 10000);
    struct rec *late = rec_new();
    CHECK_EQ_INT(submit(&v, mkreq("late", ids, 10, 5, 1, 512), late), MM_UNAVAILABLE);
    CHECK_EQ_INT(wk_sched_wait_idle(v.s, 10000), MM_OK);
    CHECK_EQ_INT(r->status, MM_OK);
    CHECK_EQ_INT(r->n_tok[0], 200);
    rec_free(r);
    rec_free(late);
    env_close(&v);

    /* drain with no time left: running requests end with UNAVAILABLE */
    v = env_open(&k_cfg, &so, 1);
    fake_engine_set_delay(v.e, 1000);
    r = rec_new();
    CHECK(submit(&v, mkreq("cut", ids, 10, 480, 1, 512), r) == MM_OK);
    CHECK(rec_wait_tokens(r, 2, 5000) == 0);
    wk_sched_drain(v.s, 0);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK(r->status == MM_UNAVAILABLE || r->status == MM_OK);
    CHECK_STR(r->comp[0].finish_reason, r->status == MM_OK ? "length" : "abort");
    rec_free(r);
    env_close(&v);
}

int main(void)
{
    test_single();
    test_concurrent_chunked();
    test_fork_n();
    test_stops();
    test_abort_cancel();
    test_admission();
    test_context_capped_by_pool();
    test_queue_bound_and_ids();
    test_prefix_reuse();
    test_preemption();
    test_logprobs();
    test_candidates(8, 0);
    test_candidates(0, 0);
    test_candidates(0, 1);
    test_draw_choices();
    test_logprobs_drawn();
    test_forward_failure_and_drain();
    return test_done();
}
