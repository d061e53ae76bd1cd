/* The scheduler tests' environment: a fake engine (fake_engine.c) with a scheduler over it, and checks
 * against the fake model run alone. Shared by test_sched.c and test_sched_media.c. */
#ifndef SCHED_ENV_H
#define SCHED_ENV_H

#include "fake_engine.h"
#include "mmgw_test.h"
#include "sched_harness.h"
#include "wk_engine.h"

static const struct fake_config k_cfg = {.vocab = 64,
                                         .max_context = 512,
                                         .block = 4,
                                         .pages = 256,
                                         .hidden = 8,
                                         .eos = 1,
                                         .image = 60,
                                         .video = 61};

struct env {
    struct wk_engine *e;
    struct wk_sched *s;
};

/** encode_threads > 0: the engine says concurrent_encode and the scheduler starts its media encoder. */
static inline struct env env_open_enc(const struct fake_config *cfg, const struct wk_sched_opts *so,
                                      int start, int32_t encode_threads)
{
    struct env v = {0};
    struct mm_err err = {0};
    fake_engine_set_config(cfg);
    struct wk_engine_opts eo = {0};
    CHECK(wk_engine_open("fake", &eo, &v.e, &err) == MM_OK);
    if (encode_threads > 0) CHECK(wk_engine_set_encode_threads(v.e, encode_threads, &err) == MM_OK);
    CHECK(wk_sched_create(v.e, so, &v.s, &err) == MM_OK);
    if (start) CHECK(wk_sched_start(v.s, &err) == MM_OK);
    return v;
}

static inline struct env env_open(const struct fake_config *cfg, const struct wk_sched_opts *so, int start)
{
    return env_open_enc(cfg, so, start, 0);
}

static inline void env_close(struct env *v)
{
    wk_sched_destroy(v->s);
    CHECK_EQ_INT(fake_engine_stats(v->e)->live_seqs, 0); /* every sequence was freed */
    CHECK_EQ_INT(wk_engine_media_kept(v->e), 0);         /* and every kept embedding */
    wk_engine_close(v->e);
}

static inline int32_t submit(struct env *v, struct wk_request *r, struct rec *rc)
{
    struct wk_sched_sink sk = rec_sink(rc);
    struct mm_err err = {0};
    uint64_t t;
    int32_t st = wk_sched_submit(v->s, r, &sk, &t, &err);
    if (st != MM_OK) wk_request_free(r);
    return st;
}

/** Choice `choice` of r streamed exactly the k tokens the fake model continues ids with, run alone
 * (media_first: the embedding value at each media position, NaN elsewhere; NULL = text only). */
static inline void check_solo_media(struct rec *r, int32_t choice, const int32_t *ids, int64_t n,
                                    const float *media_first, int32_t k)
{
    int32_t want[REC_MAX_TOKENS];
    fake_solo_greedy(ids, n, media_first, k, want);
    CHECK_EQ_INT(r->n_tok[choice], k);
    int same = r->n_tok[choice] == k && memcmp(r->tok[choice], want, (size_t)k * sizeof(int32_t)) == 0;
    CHECK_MSG(same, "choice %d differs from the solo greedy run", choice);
}

static inline void check_solo(struct rec *r, int32_t choice, const int32_t *ids, int64_t n, int32_t k)
{
    check_solo_media(r, choice, ids, n, NULL, k);
}

/** Sleep ms milliseconds. */
static inline void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

#endif
