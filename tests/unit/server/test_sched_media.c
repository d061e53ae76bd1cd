/* The scheduler's media path against the fake engine (test fixture): embeddings land on their placeholder
 * runs (encoded inside the step, or by the encoder thread beside the steps); the encoder keeps the batch
 * stepping while it works; Abort, client cancel and shutdown during an encode free the pages at once and the
 * pixels once the encoder lets go; an item that fails ends only its request; a request preempted while
 * encoding keeps its embeddings. Expected tokens come from the fake model run alone, never from the
 * scheduler. */
#include <math.h>
#include <stdio.h>

#include "mm_clock.h"
#include "mm_dtype.h"
#include "sched_env.h"

/* pixel buffers freed by their release hook (the scheduler or a returning encoder job) */
static int32_t g_released;

static void release_pixels(void *p)
{
    free(p);
    __atomic_add_fetch(&g_released, 1, __ATOMIC_SEQ_CST);
}

static int32_t released(void)
{
    return __atomic_load_n(&g_released, __ATOMIC_SEQ_CST);
}

static int32_t g_abort_found = -1;

static void on_abort(void *arg, int32_t found)
{
    (void)arg;
    __atomic_store_n(&g_abort_found, found, __ATOMIC_SEQ_CST);
}

/* Wait (up to ms) until *field of the fake's stats reaches want; returns the value seen. */
static int64_t wait_stat(struct env *v, const int64_t *field, int64_t want, int64_t ms)
{
    int64_t got = fake_engine_stat(v->e, field);
    for (int64_t t = 0; t < ms && got < want; t += 2) {
        sleep_ms(2);
        got = fake_engine_stat(v->e, field);
    }
    return got;
}

/* Wait (up to ms) until *field of the fake's stats falls to 0; returns the value seen. */
static int64_t wait_stat_down(struct env *v, const int64_t *field, int64_t ms)
{
    int64_t got = fake_engine_stat(v->e, field);
    for (int64_t t = 0; t < ms && got > 0; t += 2) {
        sleep_ms(2);
        got = fake_engine_stat(v->e, field);
    }
    return got;
}

static int32_t wait_released(int32_t want, int64_t ms)
{
    for (int64_t t = 0; t < ms && released() < want; t += 2) sleep_ms(2);
    return released();
}

/* One F32 image of `tokens` placeholder tokens at [at, at + tokens): grid (1, 2, 2 * tokens), so 4 patch rows
 * per token; the fake encoder's embedding of token t is the first value of its first row, here
 * first + 0.125 t (recorded in media_first[at + t], NaN elsewhere as the caller set it). */
static struct wk_media_item image_item(int32_t *ids, float *media_first, int64_t at, int64_t tokens,
                                       float first)
{
    const int64_t row = 6, rows = 4 * tokens;
    float *px = calloc((size_t)(rows * row), sizeof(float));
    for (int64_t t = 0; t < tokens; t++) {
        px[t * 4 * row] = first + 0.125f * (float)t;
        ids[at + t] = k_cfg.image;
        if (media_first) media_first[at + t] = px[t * 4 * row];
    }
    struct wk_media_item it = {.kind = 0,
                               .dtype = MM_DT_F32,
                               .pixels = px,
                               .n_rows = rows,
                               .row_len = row,
                               .grid_t = 1,
                               .grid_h = 2,
                               .grid_w = 2 * tokens,
                               .n_runs = 1,
                               .n_tokens = tokens,
                               .release = release_pixels,
                               .release_arg = px};
    it.runs = calloc(1, sizeof(struct wk_placeholder_run));
    it.runs[0] = (struct wk_placeholder_run){at, tokens};
    return it;
}

/* A request over ids with the given items (copied; the request owns their runs and pixels). */
static struct wk_request *media_req(const char *id, const int32_t *ids, int64_t n, int64_t max_new,
                                    const struct wk_media_item *items, int32_t n_items, int64_t max_context)
{
    struct wk_request *q = mkreq(id, ids, n, max_new, 1, max_context);
    q->n_media = n_items;
    q->media = calloc((size_t)n_items, sizeof(*q->media));
    memcpy(q->media, items, (size_t)n_items * sizeof(*items));
    q->media_hash = 1234;
    return q;
}

static void nan_fill(float *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) a[i] = NAN;
}

/* An image and a two-run video (BF16): embeddings land on their runs, also when prefill chunks split a run;
 * the same prompt again reuses every page that holds media, so nothing is encoded a second time. */
static void test_placement(int32_t encode_threads)
{
    struct wk_sched_opts so = {.step_tokens = 5};
    struct env v = env_open_enc(&k_cfg, &so, 1, encode_threads);
    const int32_t rel0 = released();
    enum { L = 30 };
    int32_t ids[L];
    float media_first[L];
    mkprompt(ids, L, 11, 64);
    nan_fill(media_first, L);
    struct wk_media_item items[2];
    items[0] = image_item(ids, media_first, 4, 3, 0.25f);
    /* video: 2 runs of 2 tokens at [12, 14) and [20, 22), BF16 pixels */
    const int64_t row = 6;
    uint16_t *vid = calloc(16 * row, sizeof(uint16_t));
    const int vpos[4] = {12, 13, 20, 21};
    for (int t = 0; t < 4; t++) {
        vid[t * 4 * row] = mm_f32_to_bf16(-0.5f * (float)(t + 1));
        media_first[vpos[t]] = mm_bf16_to_f32(vid[t * 4 * row]);
        ids[vpos[t]] = k_cfg.video;
    }
    items[1] = (struct wk_media_item){.kind = 1,
                                      .dtype = MM_DT_BF16,
                                      .pixels = vid,
                                      .n_rows = 16,
                                      .row_len = row,
                                      .grid_t = 2,
                                      .grid_h = 2,
                                      .grid_w = 4,
                                      .n_runs = 2,
                                      .n_tokens = 4,
                                      .release = release_pixels,
                                      .release_arg = vid};
    items[1].runs = calloc(2, sizeof(struct wk_placeholder_run));
    items[1].runs[0] = (struct wk_placeholder_run){12, 2};
    items[1].runs[1] = (struct wk_placeholder_run){20, 2};
    struct rec *r = rec_new();
    CHECK(submit(&v, media_req("mm", ids, L, 8, items, 2, 512), r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->status, MM_OK);
    check_solo_media(r, 0, ids, L, media_first, 8);
    CHECK_EQ_INT(fake_engine_stat(v.e, &fake_engine_stats(v.e)->encodes), 2);
    CHECK_EQ_INT(wait_released(rel0 + 2, 2000) - rel0, 2);
    /* the embeddings stayed where the engine kept them (prefill chunks read them there) until the request
     * was freed */
    const struct fake_stats *st = fake_engine_stats(v.e);
    CHECK_MSG(fake_engine_stat(v.e, &st->kept_spans) >= 3 && fake_engine_stat(v.e, &st->host_spans) == 0,
              "%lld kept spans, %lld host spans", (long long)fake_engine_stat(v.e, &st->kept_spans),
              (long long)fake_engine_stat(v.e, &st->host_spans));
    CHECK_EQ_INT(wait_stat_down(&v, &st->kept_bytes, 2000), 0);
    rec_free(r);

    /* the same prompt: pages up to position 28 are reused, media included, so no item is encoded again */
    struct wk_media_item again[2];
    int32_t ids2[L];
    memcpy(ids2, ids, sizeof(ids));
    again[0] = image_item(ids2, NULL, 4, 3, 0.25f);
    uint16_t *vid2 = calloc(16 * row, sizeof(uint16_t)); /* zeros: were it encoded, the tokens would differ */
    again[1] = items[1];
    again[1].pixels = vid2;
    again[1].release_arg = vid2;
    again[1].runs = calloc(2, sizeof(struct wk_placeholder_run));
    again[1].runs[0] = (struct wk_placeholder_run){12, 2};
    again[1].runs[1] = (struct wk_placeholder_run){20, 2};
    r = rec_new();
    CHECK(submit(&v, media_req("mm2", ids2, L, 8, again, 2, 512), r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->status, MM_OK);
    CHECK_EQ_INT(r->comp[0].cached_tokens, 28);
    check_solo_media(r, 0, ids, L, media_first, 8);
    CHECK_EQ_INT(fake_engine_stat(v.e, &fake_engine_stats(v.e)->encode_started), 2);
    /* unencoded pixels are released with their request, just after its end */
    CHECK_EQ_INT(wait_released(rel0 + 4, 2000) - rel0, 4);
    rec_free(r);

    /* the vision tower disagreeing with the placeholder count ends the request with MM_INVALID */
    mkprompt(ids, L, 12, 64);
    struct wk_media_item bad = image_item(ids, NULL, 4, 2, 1.0f);
    bad.runs[0].length = 3; /* 8 patch rows make 2 embeddings, the run says 3 */
    bad.n_tokens = 3;
    ids[6] = k_cfg.image;
    r = rec_new();
    CHECK(submit(&v, media_req("mmbad", ids, L, 8, &bad, 1, 512), r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_EQ_INT(r->status, MM_INVALID);
    CHECK_MSG(strstr(r->msg, "mm_inputs[0]") && strstr(r->msg, "2 embeddings"), "message: %s", r->msg);
    CHECK_EQ_INT(wait_released(rel0 + 5, 2000) - rel0, 5);
    rec_free(r);
    env_close(&v);
}

/* The engine keeps embeddings within its budget and hands the rest over on the host: with room for one of two
 * images, one request reads kept spans and the other host spans, and both equal their solo runs; all kept
 * bytes come back when the requests end. */
static void test_keep_budget(int32_t encode_threads)
{
    struct wk_sched_opts so = {.step_tokens = 6};
    struct env v = env_open_enc(&k_cfg, &so, 1, encode_threads);
    enum { L = 24, T = 5 };
    wk_engine_set_media_keep(v.e, (int64_t)T * k_cfg.hidden * (int64_t)sizeof(float));
    int32_t ids[2][L];
    float media_first[2][L];
    struct rec *r[2];
    fake_engine_set_encode_delay(v.e, 20000); /* both encodes outlast the first prefill chunk */
    fake_engine_set_delay(v.e, 3000);         /* and the first request decodes while the second encodes */
    for (int q = 0; q < 2; q++) {
        mkprompt(ids[q], L, 31 + q, 64);
        nan_fill(media_first[q], L);
        struct wk_media_item it = image_item(ids[q], media_first[q], 3 + q, T, 0.5f + (float)q);
        r[q] = rec_new();
        char id[8];
        snprintf(id, sizeof id, "kb%d", q);
        CHECK(submit(&v, media_req(id, ids[q], L, 30, &it, 1, 512), r[q]) == MM_OK);
    }
    for (int q = 0; q < 2; q++) {
        CHECK(rec_wait_end(r[q], 5000) == 0);
        CHECK_EQ_INT(r[q]->status, MM_OK);
        check_solo_media(r[q], 0, ids[q], L, media_first[q], 30);
        rec_free(r[q]);
    }
    const struct fake_stats *st = fake_engine_stats(v.e);
    CHECK_MSG(fake_engine_stat(v.e, &st->kept_spans) >= 1 && fake_engine_stat(v.e, &st->host_spans) >= 1,
              "%lld kept spans, %lld host spans", (long long)fake_engine_stat(v.e, &st->kept_spans),
              (long long)fake_engine_stat(v.e, &st->host_spans));
    CHECK_EQ_INT(wait_stat_down(&v, &st->kept_bytes, 2000), 0);
    env_close(&v);
}

/* While an image is encoded (300 ms in the fake), the running text request keeps stepping with the encoder
 * thread, and stalls without it. Both requests still equal their solo runs. */
static void test_steps_continue(int32_t encode_threads)
{
    struct wk_sched_opts so = {0};
    struct env v = env_open_enc(&k_cfg, &so, 1, encode_threads);
    fake_engine_set_delay(v.e, 1000);
    fake_engine_set_encode_delay(v.e, 300000);
    int32_t tids[40];
    mkprompt(tids, 40, 21, 64);
    struct rec *t = rec_new(), *m = rec_new();
    CHECK(submit(&v, mkreq("text", tids, 40, 400, 1, 512), t) == MM_OK);
    CHECK(rec_wait_tokens(t, 3, 5000) == 0);
    enum { L = 24 };
    int32_t ids[L];
    float media_first[L];
    mkprompt(ids, L, 22, 64);
    nan_fill(media_first, L);
    struct wk_media_item it = image_item(ids, media_first, 6, 4, 0.5f);
    CHECK(submit(&v, media_req("image", ids, L, 6, &it, 1, 512), m) == MM_OK);
    CHECK(rec_wait_end(m, 10000) == 0);
    CHECK_EQ_INT(m->status, MM_OK);
    check_solo_media(m, 0, ids, L, media_first, 6);
    const int64_t beside = fake_engine_stat(v.e, &fake_engine_stats(v.e)->forwards_during_encode);
    if (encode_threads > 0) /* about 300 steps of 1 ms fit in the encode; a loaded machine still runs 20 */
        CHECK_MSG(beside >= 20, "only %lld steps ran during the 300 ms encode", (long long)beside);
    else
        CHECK_MSG(beside == 0, "%lld steps ran during an encode on the scheduler thread", (long long)beside);
    CHECK(rec_wait_end(t, 10000) == 0);
    CHECK_EQ_INT(t->status, MM_OK);
    check_solo(t, 0, tids, 40, 400);
    rec_free(t);
    rec_free(m);
    env_close(&v);
}

/* The text before the image is prefilled while the image is with the encoder; the rest follows when it is
 * back, and the tokens equal the solo run. */
static void test_prefix_prefilled_meanwhile(void)
{
    struct wk_sched_opts so = {.step_tokens = 5};
    struct env v = env_open_enc(&k_cfg, &so, 1, 1);
    fake_engine_set_encode_delay(v.e, 400000);
    const struct fake_stats *st = fake_engine_stats(v.e);
    enum { L = 30 };
    int32_t ids[L];
    float media_first[L];
    mkprompt(ids, L, 71, 64);
    nan_fill(media_first, L);
    struct wk_media_item it = image_item(ids, media_first, 17, 4, 0.5f);
    struct rec *m = rec_new();
    CHECK(submit(&v, media_req("late-image", ids, L, 5, &it, 1, 512), m) == MM_OK);
    CHECK_EQ_INT(wait_stat(&v, &st->tokens, 17, 5000), 17);
    CHECK_EQ_INT(fake_engine_stat(v.e, &st->encodes), 0); /* all 17 text tokens went in during the encode */
    sleep_ms(50);
    CHECK_EQ_INT(fake_engine_stat(v.e, &st->tokens), 17); /* and not one token past the image's run */
    CHECK(rec_wait_end(m, 5000) == 0);
    CHECK_EQ_INT(m->status, MM_OK);
    check_solo_media(m, 0, ids, L, media_first, 5);
    rec_free(m);
    env_close(&v);
}

/* Abort while the encoder works: the reused prefix pages and the reservation are back when the Abort
 * completes, the stream ends CANCELLED at once (not after the 10 s encode), the encode stops early, and the
 * pixels are released once the encoder hands the job back. A client that goes away while its job is still
 * queued behind another is never encoded at all. */
static void test_abort_during_encode(void)
{
    struct wk_sched_opts so = {0};
    struct env v = env_open_enc(&k_cfg, &so, 1, 1);
    const int32_t rel0 = released();
    const struct fake_stats *st = fake_engine_stats(v.e);
    enum { L = 30 };
    int32_t ids[L];
    mkprompt(ids, L, 31, 64);
    /* a first request publishes the pages of ids[0, 28): the next one reuses 5 of them */
    struct wk_media_item first = image_item(ids, NULL, 22, 3, 0.75f);
    struct rec *r0 = rec_new();
    CHECK(submit(&v, media_req("warm", ids, L, 2, &first, 1, 512), r0) == MM_OK);
    CHECK(rec_wait_end(r0, 5000) == 0);
    CHECK_EQ_INT(r0->status, MM_OK);
    rec_free(r0);
    struct wk_sched_load base;
    wk_sched_load(v.s, &base);

    fake_engine_set_encode_delay(v.e, 10000000);
    ids[20] = (ids[20] + 1) % 50 + 2; /* same first 20 tokens, then different: 5 pages reusable */
    struct wk_media_item it = image_item(ids, NULL, 22, 3, 0.5f);
    struct rec *r = rec_new();
    CHECK(submit(&v, media_req("slow", ids, L, 40, &it, 1, 512), r) == MM_OK);
    CHECK_EQ_INT(wait_stat(&v, &st->encode_started, 2, 5000), 2);
    struct wk_sched_load mid;
    for (int i = 0; i < 1000; i++) { /* the text before the image goes in meanwhile */
        wk_sched_load(v.s, &mid);
        if (mid.free_pages == base.free_pages - 6) break;
        sleep_ms(2);
    }
    CHECK_EQ_INT(mid.encoding_requests, 1);
    CHECK_EQ_INT(mid.running_requests, 1);
    /* 5 reused prefix pages attached, 1 taken by the 2 text tokens before the image, the rest reserved */
    CHECK_EQ_INT(mid.free_pages, base.free_pages - 6);
    CHECK(mid.available_pages < mid.free_pages);
    const int64_t t0 = mm_now_ms();
    __atomic_store_n(&g_abort_found, -1, __ATOMIC_SEQ_CST);
    wk_sched_abort(v.s, "slow", on_abort, NULL);
    for (int i = 0; i < 500 && __atomic_load_n(&g_abort_found, __ATOMIC_SEQ_CST) < 0; i++) sleep_ms(2);
    CHECK_EQ_INT(__atomic_load_n(&g_abort_found, __ATOMIC_SEQ_CST), 1);
    struct wk_sched_load after;
    wk_sched_load(v.s, &after);
    CHECK_EQ_INT(after.free_pages, base.free_pages);
    CHECK_EQ_INT(after.available_pages, base.available_pages);
    CHECK_EQ_INT(after.encoding_requests, 0);
    CHECK_EQ_INT(after.running_requests, 0);
    CHECK(rec_wait_end(r, 5000) == 0);
    CHECK_MSG(mm_now_ms() - t0 < 5000, "the abort waited %lld ms for the encode",
              (long long)(mm_now_ms() - t0));
    CHECK_EQ_INT(r->status, MM_CANCELLED);
    CHECK_EQ_INT(r->n_tok[0], 0);
    CHECK_STR(r->comp[0].finish_reason, "abort");
    CHECK_EQ_INT(wait_stat(&v, &st->encode_cancelled, 1, 5000), 1);
    CHECK_EQ_INT(wait_released(rel0 + 2, 5000) - rel0, 2);
    rec_free(r);

    /* two at once: B's job waits behind A's; B's client goes away, then A is aborted */
    struct rec *a = rec_new(), *b = rec_new();
    int32_t ida[L], idb[L];
    mkprompt(ida, L, 32, 64);
    mkprompt(idb, L, 33, 64);
    struct wk_media_item ia = image_item(ida, NULL, 3, 2, 0.5f), ib = image_item(idb, NULL, 3, 2, 0.5f);
    CHECK(submit(&v, media_req("A", ida, L, 4, &ia, 1, 512), a) == MM_OK);
    CHECK_EQ_INT(wait_stat(&v, &st->encode_started, 3, 5000), 3);
    struct wk_sched_sink sk = rec_sink(b);
    struct mm_err err = {0};
    uint64_t ticket = 0;
    CHECK(wk_sched_submit(v.s, media_req("B", idb, L, 4, &ib, 1, 512), &sk, &ticket, &err) == MM_OK);
    for (int i = 0; i < 1000; i++) { /* until both are admitted and waiting for the encoder */
        wk_sched_load(v.s, &mid);
        if (mid.encoding_requests == 2) break;
        sleep_ms(2);
    }
    CHECK_EQ_INT(mid.encoding_requests, 2);
    wk_sched_cancel(v.s, ticket);
    CHECK(rec_wait_end(b, 5000) == 0);
    CHECK_EQ_INT(b->status, MM_CANCELLED);
    wk_sched_abort(v.s, "A", NULL, NULL);
    CHECK(rec_wait_end(a, 5000) == 0);
    CHECK_EQ_INT(a->status, MM_CANCELLED);
    CHECK_EQ_INT(wait_released(rel0 + 4, 5000) - rel0, 4);
    CHECK_EQ_INT(fake_engine_stat(v.e, &st->encode_started), 3); /* B's job was skipped, never encoded */
    rec_free(a);
    rec_free(b);

    /* still serving, with a fast encoder again */
    fake_engine_set_encode_delay(v.e, 0);
    int32_t tids[12];
    mkprompt(tids, 12, 34, 64);
    r = rec_new();
    CHECK(submit(&v, mkreq("after", tids, 12, 5, 1, 512), r) == MM_OK);
    CHECK(rec_wait_end(r, 5000) == 0);
    check_solo(r, 0, tids, 12, 5);
    rec_free(r);
    wk_sched_load(v.s, &after);
    CHECK_EQ_INT(after.free_pages, after.total_pages);
    env_close(&v);
}

/* An item the vision tower refuses ends its own request with the error (naming the item); the text request
 * decoding beside it is untouched. In a two-item request whose second item fails, the first item's
 * embeddings and both pixel buffers are freed (the sanitizer build checks the leak). */
static void test_encode_error_isolated(void)
{
    struct wk_sched_opts so = {0};
    struct env v = env_open_enc(&k_cfg, &so, 1, 1);
    fake_engine_set_delay(v.e, 1000);
    fake_engine_set_encode_delay(v.e, 20000);
    const int32_t rel0 = released();
    int32_t tids[30];
    mkprompt(tids, 30, 41, 64);
    struct rec *t = rec_new();
    CHECK(submit(&v, mkreq("text", tids, 30, 150, 1, 512), t) == MM_OK);
    CHECK(rec_wait_tokens(t, 2, 5000) == 0);
    enum { L = 24 };
    int32_t ids[L];
    mkprompt(ids, L, 42, 64);
    struct wk_media_item items[2];
    items[0] = image_item(ids, NULL, 2, 2, 0.5f);
    items[1] = image_item(ids, NULL, 10, 2, 0.5f);
    items[1].n_rows = 7; /* the fake vision tower refuses rows that are not whole 2x2 groups */
    struct rec *m = rec_new();
    CHECK(submit(&v, media_req("broken", ids, L, 5, items, 2, 512), m) == MM_OK);
    CHECK(rec_wait_end(m, 5000) == 0);
    CHECK_EQ_INT(m->status, MM_INVALID);
    CHECK_MSG(strstr(m->msg, "mm_inputs[1]") != NULL, "message: %s", m->msg);
    CHECK_EQ_INT(m->n_tok[0], 0);
    CHECK_EQ_INT(wait_released(rel0 + 2, 5000) - rel0, 2);
    CHECK(rec_wait_end(t, 10000) == 0);
    CHECK_EQ_INT(t->status, MM_OK);
    check_solo(t, 0, tids, 30, 150);
    rec_free(t);
    rec_free(m);
    env_close(&v);
}

/* Shutdown while an item is being encoded: the request ends UNAVAILABLE without waiting for the encode,
 * and the encoder's job (with its pixels) is freed. */
static void test_stop_during_encode(void)
{
    struct wk_sched_opts so = {0};
    struct env v = env_open_enc(&k_cfg, &so, 1, 1);
    fake_engine_set_encode_delay(v.e, 10000000);
    const int32_t rel0 = released();
    enum { L = 20 };
    int32_t ids[L];
    mkprompt(ids, L, 51, 64);
    struct wk_media_item it = image_item(ids, NULL, 5, 2, 0.5f);
    struct rec *m = rec_new();
    CHECK(submit(&v, media_req("late", ids, L, 5, &it, 1, 512), m) == MM_OK);
    const struct fake_stats *st = fake_engine_stats(v.e);
    CHECK_EQ_INT(wait_stat(&v, &st->encode_started, 1, 5000), 1);
    const int64_t t0 = mm_now_ms();
    env_close(&v); /* stops the scheduler, then the encoder */
    CHECK_MSG(mm_now_ms() - t0 < 5000, "stopping waited %lld ms for the encode",
              (long long)(mm_now_ms() - t0));
    CHECK(m->ended);
    CHECK_EQ_INT(m->status, MM_UNAVAILABLE);
    CHECK_EQ_INT(released() - rel0, 1);
    rec_free(m);
}

/* A request preempted while its image is with the encoder: the job still comes back, the embeddings are
 * kept, and on re-admission the request prefills without encoding again; its tokens equal the solo run. */
static void test_preempted_while_encoding(void)
{
    struct fake_config cfg = k_cfg;
    cfg.pages = 35;
    cfg.max_context = 120;
    struct wk_sched_opts so = {.grow_tokens = 8, .step_tokens = 32};
    struct env v = env_open_enc(&cfg, &so, 1, 1);
    fake_engine_set_delay(v.e, 1000);
    fake_engine_set_encode_delay(v.e, 600000);
    int32_t tids[10];
    mkprompt(tids, 10, 61, 64);
    struct rec *t = rec_new(), *m = rec_new();
    CHECK(submit(&v, mkreq("grower", tids, 10, -1, 1, 120), t) == MM_OK); /* unbounded: grows to 120 */
    CHECK(rec_wait_tokens(t, 2, 5000) == 0);
    enum { L = 30 };
    int32_t ids[L];
    float media_first[L];
    mkprompt(ids, L, 62, 64);
    nan_fill(media_first, L);
    struct wk_media_item it = image_item(ids, media_first, 8, 4, 0.5f);
    CHECK(submit(&v, media_req("victim", ids, L, -1, &it, 1, 120), m) == MM_OK);
    CHECK(rec_wait_end(t, 20000) == 0);
    CHECK(rec_wait_end(m, 20000) == 0);
    CHECK_EQ_INT(t->status, MM_OK);
    CHECK_EQ_INT(m->status, MM_OK);
    check_solo(t, 0, tids, 10, 110);
    check_solo_media(m, 0, ids, L, media_first, 90);
    struct wk_sched_load l;
    wk_sched_load(v.s, &l);
    CHECK_MSG(l.preemptions > 0, "expected the small pool to preempt the request that was encoding");
    CHECK_EQ_INT(fake_engine_stat(v.e, &fake_engine_stats(v.e)->encode_started), 1);
    CHECK_EQ_INT(fake_engine_stats(v.e)->exhausted, 0);
    rec_free(t);
    rec_free(m);
    env_close(&v);
}

int main(void)
{
    test_placement(0);
    test_placement(1);
    test_keep_budget(0);
    test_keep_budget(1);
    test_steps_continue(0);
    test_steps_continue(1);
    test_prefix_prefilled_meanwhile();
    test_abort_during_encode();
    test_encode_error_isolated();
    test_stop_during_encode();
    test_preempted_while_encoding();
    return test_done();
}
