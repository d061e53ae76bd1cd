/* The gRPC client against the project's other worker implementations, on 127.0.0.1:
 *   - the C worker service (worker/server) over its scheduler test double (build/tests/wk_fake_worker),
 *   - the Python toy worker (tests/toy_worker/toy_worker.py).
 * Streams end with a Complete whose counts match what was delivered; a cancelled stream frees the
 * worker (Load shows it); and one image sent inline, through UploadTensor and through shared memory
 * gives the same greedy tokens, which proves the bytes arrived intact whichever way they travelled. */
#include <stdlib.h>
#include <unistd.h>

#include "fake_worker.h"
#include "gw_upstream.h"
#include "gw_upstream_generate.h"
#include "mmgw_test.h"
#include "test_loop.h"
#include "upstream_calls.h"

static struct test_loop *loop;
static struct gw_upstream *up;

static struct unary_rec unary(struct gw_upstream_chan *ch, int which)
{
    struct unary_rec o;
    memset(&o, 0, sizeof(o));
    struct mm_err e;
    int32_t rc = which == 0 ? gw_upstream_model_info(ch, 5000, test_loop_executor(loop), unary_rec_cb, &o, &e)
                 : which == 1 ? gw_upstream_load(ch, 5000, test_loop_executor(loop), unary_rec_cb, &o, &e)
                              : gw_upstream_health(ch, 5000, test_loop_executor(loop), unary_rec_cb, &o, &e);
    CHECK_EQ_INT(rc, MM_OK);
    CHECK(test_loop_run(loop, unary_rec_done, &o, 10000));
    return o;
}

/* Not upstream_calls.h's stream_rec: this one cancels after a count of tokens (whatever the chunking of
 * the worker under test) and counts a cancel as its end (no on_done follows a cancel). */
struct stream {
    struct gw_gen_call *call;
    int done, completes;
    uint32_t tokens[256];
    int n_tokens;
    uint32_t completion_tokens;
    char finish[16];
    struct gw_call_status st;
    int cancel_after;
};

static void on_resp(void *arg, const Mmgw__Worker__V1__GenerateResponse *r)
{
    struct stream *s = arg;
    if (r->response_case == MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_CHUNK) {
        for (size_t i = 0; i < r->chunk->n_token_ids && s->n_tokens < 256; i++)
            s->tokens[s->n_tokens++] = r->chunk->token_ids[i];
        if (s->cancel_after && s->n_tokens >= s->cancel_after) {
            gw_gen_cancel(s->call);
            s->cancel_after = 0;
            s->done = -1;
        }
    } else if (r->response_case == MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_COMPLETE) {
        s->completes++;
        s->completion_tokens = r->complete->completion_tokens;
        snprintf(s->finish, sizeof(s->finish), "%s", r->complete->finish_reason);
    }
}

static void on_done(void *arg, const struct gw_call_status *st, uint32_t responses)
{
    struct stream *s = arg;
    s->done = 1;
    s->st = *st;
}

static int stream_done(void *arg)
{
    return ((struct stream *)arg)->done != 0;
}

static const struct gw_gen_callbacks cbs = {on_resp, on_done};

static void generate(struct gw_upstream_chan *ch, const char *id, const uint32_t *ids, size_t n,
                     uint32_t max_new, Mmgw__Worker__V1__MultimodalItem **items, size_t n_items,
                     const struct gw_gen_opts *opts, struct stream *s)
{
    Mmgw__Worker__V1__SamplingParams sp = MMGW__WORKER__V1__SAMPLING_PARAMS__INIT;
    sp.has_max_new_tokens_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_MAX_NEW_TOKENS_MAX_NEW_TOKENS;
    sp.max_new_tokens = max_new;
    sp.has_temperature_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_TEMPERATURE_TEMPERATURE;
    sp.temperature = 0.0f;
    sp.ignore_eos = 1;
    Mmgw__Worker__V1__GenerateRequest req = MMGW__WORKER__V1__GENERATE_REQUEST__INIT;
    req.request_id = (char *)id;
    req.input_ids = (uint32_t *)ids;
    req.n_input_ids = n;
    req.sampling = &sp;
    req.mm_inputs = items;
    req.n_mm_inputs = n_items;
    struct mm_err e;
    int32_t rc = gw_upstream_generate(ch, &req, opts, test_loop_executor(loop), &cbs, s, &s->call, &e);
    CHECK_MSG(rc == MM_OK, "%s: %s", id, e.msg);
    if (rc == MM_OK && s->cancel_after == 0)
        CHECK_MSG(test_loop_run(loop, stream_done, s, 20000), "%s: no end", id);
}

static void run_target(const char *name, struct fake_worker *w, int echo, int with_shm)
{
    struct gw_upstream_chan *ch;
    struct mm_err e;
    CHECK_EQ_INT(gw_upstream_chan_open(up, w->target, &ch, &e), MM_OK);
    struct unary_rec info = unary(ch, 0);
    CHECK_EQ_INT(info.st.code, MM_OK);
    CHECK_EQ_INT(unary(ch, 2).st.code, MM_OK);
    printf("%s: vocab %u, image token %u, shm %d\n", name, info.vocab, info.image_token, info.supports_shm);

    /* a plain stream */
    uint32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = (uint32_t)(3 + i);
    struct stream s;
    memset(&s, 0, sizeof(s));
    char rid[64];
    snprintf(rid, sizeof(rid), "%s-text", name);
    generate(ch, rid, ids, 12, 10, NULL, 0, NULL, &s);
    CHECK_MSG(s.st.code == MM_OK, "%s: %s", name, s.st.message);
    CHECK_EQ_INT(s.n_tokens, 10);
    CHECK_EQ_INT(s.completes, 1);
    CHECK_EQ_INT(s.completion_tokens, 10);
    CHECK_STR(s.finish, "length");
    if (echo)
        for (int j = 0; j < s.n_tokens; j++) CHECK_EQ_INT(s.tokens[j], ids[j % 12]);

    /* cancel mid-stream: the worker lets go of it */
    memset(&s, 0, sizeof(s));
    s.cancel_after = 3;
    snprintf(rid, sizeof(rid), "%s-cancel", name);
    generate(ch, rid, ids, 12, 200, NULL, 0, NULL, &s);
    CHECK(test_loop_run(loop, stream_done, &s, 20000));
    int freed = 0;
    for (int i = 0; i < 100 && !freed; i++) {
        struct unary_rec l = unary(ch, 1);
        freed = l.st.code == MM_OK && l.running == 0 && l.waiting == 0;
        if (!freed) test_loop_run(loop, NULL, NULL, 20);
    }
    CHECK_MSG(freed, "%s: the cancelled request is still running", name);

    /* one image, three transports, the same tokens */
    if (!info.image_token) {
        gw_upstream_chan_close(ch);
        return;
    }
    enum { ROWS = 16, ROW = 6 }; /* grid 1x4x4 in the test double's 6-value rows */
    uint16_t px[ROWS * ROW];
    for (int i = 0; i < ROWS * ROW; i++) px[i] = (uint16_t)(0x3c00 + i * 7); /* BF16 around 0.0078..1 */
    int64_t shape[2] = {ROWS, ROW}, grid[3] = {1, 4, 4};
    Mmgw__Worker__V1__Tensor t = MMGW__WORKER__V1__TENSOR__INIT;
    t.dtype = MMGW__WORKER__V1__DTYPE__BF16;
    t.shape = shape;
    t.n_shape = 2;
    t.data.data = (uint8_t *)px;
    t.data.len = sizeof(px);
    Mmgw__Worker__V1__PlaceholderRange pr = MMGW__WORKER__V1__PLACEHOLDER_RANGE__INIT;
    pr.offset = 2;
    pr.length = ROWS / 4;
    Mmgw__Worker__V1__PlaceholderRange *prs[1] = {&pr};
    Mmgw__Worker__V1__MultimodalItem item = MMGW__WORKER__V1__MULTIMODAL_ITEM__INIT;
    item.modality = MMGW__WORKER__V1__MODALITY__IMAGE;
    item.pixel_values = &t;
    item.grid_thw = grid;
    item.n_grid_thw = 3;
    item.placeholders = prs;
    item.n_placeholders = 1;
    Mmgw__Worker__V1__MultimodalItem *items[1] = {&item};
    uint32_t mids[10] = {3, 4, info.image_token, info.image_token, info.image_token, info.image_token, 5, 6,
                         7, 8};

    struct gw_gen_opts via[3] = {
        {.no_shm = 1}, {.no_shm = 1, .inline_max_bytes = 16}, {.inline_max_bytes = 16}};
    const char *how[3] = {"inline", "upload", "shm"};
    uint32_t first[32];
    int n_first = -1;
    for (int k = 0; k < (with_shm ? 3 : 2); k++) {
        memset(&s, 0, sizeof(s));
        snprintf(rid, sizeof(rid), "%s-img-%s", name, how[k]);
        generate(ch, rid, mids, 10, 12, items, 1, &via[k], &s);
        struct gw_gen_transport tr;
        CHECK_MSG(s.st.code == MM_OK, "%s %s: %s", name, how[k], s.st.message);
        (void)tr;
        CHECK_EQ_INT(s.n_tokens, 12);
        if (n_first < 0) {
            n_first = s.n_tokens;
            memcpy(first, s.tokens, sizeof(uint32_t) * (size_t)s.n_tokens);
        } else {
            CHECK_MSG(s.n_tokens == n_first &&
                          memcmp(first, s.tokens, sizeof(uint32_t) * (size_t)n_first) == 0,
                      "%s: tokens via %s differ from inline", name, how[k]);
        }
    }
    /* and a different image gives different tokens on the model double (it reads the pixels) */
    if (!echo) {
        px[0] ^= 0x0100;
        memset(&s, 0, sizeof(s));
        snprintf(rid, sizeof(rid), "%s-img-other", name);
        generate(ch, rid, mids, 10, 12, items, 1, &via[0], &s);
        CHECK_MSG(s.n_tokens != n_first || memcmp(first, s.tokens, sizeof(uint32_t) * (size_t)n_first) != 0,
                  "%s: changing a pixel changed nothing (the pixels are not read?)", name);
    }
    gw_upstream_chan_close(ch);
}

int main(void)
{
    const char *build = getenv("MMGW_BUILD");
    const char *src = getenv("MMGW_SOURCE");
    if (!build || !src) test_skip("MMGW_BUILD/MMGW_SOURCE not set (run through ctest)");
    loop = test_loop_new();
    struct mm_err e;
    if (!loop || gw_upstream_create(NULL, &up, &e) != MM_OK) return 1;
    int ran = 0;

    char bin[512], dir[512];
    snprintf(bin, sizeof(bin), "%s/tests/wk_fake_worker", build);
    snprintf(dir, sizeof(dir), "%s/tests", build);
    if (access(bin, X_OK) == 0) {
        struct fake_worker w;
        memset(&w, 0, sizeof(w));
        const char *argv[] = {bin, "--model", dir, "--listen", "127.0.0.1:0", "--cache-pages", "64", NULL};
        const char *env[] = {"FAKE_ENGINE_DELAY_US=2000", NULL};
        if (fake_worker_start_cmd(&w, "cworker", argv, env) == 0) {
            run_target("c-worker", &w, 0, 1);
            fake_worker_kill(&w);
            fake_worker_cleanup(&w);
            ran++;
        } else {
            CHECK_MSG(0, "%s did not start", bin);
        }
    } else {
        printf("note: %s is not built; the C worker part is skipped\n", bin);
    }
    char toy[512];
    snprintf(toy, sizeof(toy), "%s/tests/toy_worker/toy_worker.py", src);
    if (access(toy, R_OK) == 0 && system("/usr/bin/python3 -c 'import grpc' 2>/dev/null") == 0) {
        struct fake_worker w;
        memset(&w, 0, sizeof(w));
        const char *argv[] = {"/usr/bin/python3", toy, "--listen", "127.0.0.1:0", "--rate", "200", NULL};
        if (fake_worker_start_cmd(&w, "toy", argv, NULL) == 0) {
            run_target("toy-worker", &w, 1, 0);
            fake_worker_kill(&w);
            fake_worker_cleanup(&w);
            ran++;
        } else {
            CHECK_MSG(0, "the toy worker did not start");
        }
    } else {
        printf("note: the toy worker or python3-grpcio is missing; that part is skipped\n");
    }
    gw_upstream_destroy(up);
    test_loop_free(loop);
    if (!ran) test_skip("neither the C worker (wk_fake_worker) nor the toy worker is available");
    return test_done();
}
