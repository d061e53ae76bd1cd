/* Stream outbox: a choice's tokens coalesce while a send is in flight, completes keep their place, and
 * the packed messages decode to exactly what went in. */
#include "mmgw_test.h"
#include "worker.pb-c.h"
#include "wk_outbox.h"

static Mmgw__Worker__V1__GenerateResponse *pop(struct wk_outbox *o)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    if (wk_outbox_pop_packed(o, "rid", &buf, &len) != 1) return NULL;
    Mmgw__Worker__V1__GenerateResponse *r = mmgw__worker__v1__generate_response__unpack(NULL, len, buf);
    free(buf);
    return r;
}

static void chunk(struct wk_outbox *o, int32_t index, int32_t tok, const float *lp, int32_t top_n,
                  const int32_t *tids, const float *tlps)
{
    struct wk_chunk_ev ev = {.index = index,
                             .ids = &tok,
                             .n = 1,
                             .logprobs = lp,
                             .top_n = top_n,
                             .top_ids = tids,
                             .top_logprobs = tlps};
    CHECK_EQ_INT(wk_outbox_add_chunk(o, &ev), 0);
}

int main(void)
{
    struct wk_outbox o;
    wk_outbox_init(&o);
    chunk(&o, 0, 5, NULL, 0, NULL, NULL);
    chunk(&o, 1, 6, NULL, 0, NULL, NULL);
    chunk(&o, 0, 7, NULL, 0, NULL, NULL);
    struct wk_complete_ev done1 = {.index = 1,
                                   .finish_reason = "stop",
                                   .prompt_tokens = 9,
                                   .completion_tokens = 1,
                                   .cached_tokens = 4,
                                   .has_matched_stop = 1,
                                   .matched_stop = 6};
    CHECK_EQ_INT(wk_outbox_add_complete(&o, &done1), 0);
    chunk(&o, 0, 8, NULL, 0, NULL, NULL);
    struct wk_complete_ev done0 = {
        .index = 0, .finish_reason = "length", .prompt_tokens = 9, .completion_tokens = 3};
    CHECK_EQ_INT(wk_outbox_add_complete(&o, &done0), 0);
    CHECK_EQ_INT(o.count, 4);

    Mmgw__Worker__V1__GenerateResponse *r = pop(&o);
    CHECK(r && r->response_case == MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_CHUNK);
    CHECK_STR(r->request_id, "rid");
    CHECK_EQ_INT(r->chunk->index, 0);
    CHECK_EQ_INT(r->chunk->n_token_ids, 3); /* 5, 7, 8 merged */
    CHECK(r->chunk->token_ids[0] == 5 && r->chunk->token_ids[1] == 7 && r->chunk->token_ids[2] == 8);
    CHECK_EQ_INT(r->chunk->n_logprobs, 0);
    mmgw__worker__v1__generate_response__free_unpacked(r, NULL);
    r = pop(&o);
    CHECK(r && r->chunk && r->chunk->index == 1 && r->chunk->n_token_ids == 1 && r->chunk->token_ids[0] == 6);
    mmgw__worker__v1__generate_response__free_unpacked(r, NULL);
    r = pop(&o);
    CHECK(r && r->response_case == MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_COMPLETE);
    CHECK(r && r->complete->index == 1 && r->complete->cached_tokens == 4 &&
          r->complete->matched_stop_token == 6);
    CHECK(r && r->complete->has_matched_stop_token_case != 0);
    CHECK_STR(r->complete->finish_reason, "stop");
    mmgw__worker__v1__generate_response__free_unpacked(r, NULL);
    r = pop(&o);
    CHECK(r && r->complete->index == 0 && r->complete->completion_tokens == 3 &&
          r->complete->has_matched_stop_token_case == 0);
    CHECK_STR(r->complete->finish_reason, "length");
    mmgw__worker__v1__generate_response__free_unpacked(r, NULL);
    CHECK(pop(&o) == NULL);
    CHECK_EQ_INT(o.count, 0);

    /* a chunk after its choice's complete is a new message after it (order kept) */
    CHECK_EQ_INT(wk_outbox_add_complete(&o, &done0), 0);
    chunk(&o, 0, 9, NULL, 0, NULL, NULL);
    CHECK_EQ_INT(o.count, 2);
    wk_outbox_clear(&o);
    CHECK_EQ_INT(o.count, 0);

    /* log-probs and top log-probs merge token by token */
    float lp1 = -0.5f, lp2 = -1.5f;
    int32_t t1[2] = {3, 4}, t2[2] = {5, 6};
    float l1[2] = {-0.5f, -2.0f}, l2[2] = {-1.5f, -1.6f};
    chunk(&o, 2, 3, &lp1, 2, t1, l1);
    chunk(&o, 2, 5, &lp2, 2, t2, l2);
    for (int i = 0; i < 40; i++) chunk(&o, 2, 100 + i, &lp1, 2, t1, l1); /* growth past the first capacity */
    r = pop(&o);
    CHECK(r && r->chunk->n_token_ids == 42 && r->chunk->n_logprobs == 42 && r->chunk->n_top_logprobs == 42);
    if (r && r->chunk->n_top_logprobs == 42) {
        CHECK_NEAR(r->chunk->logprobs[1], -1.5, 0);
        CHECK(r->chunk->top_logprobs[1]->n_token_ids == 2 && r->chunk->top_logprobs[1]->token_ids[1] == 6);
        CHECK_NEAR(r->chunk->top_logprobs[1]->logprobs[1], -1.6, 1e-7);
        CHECK_EQ_INT(r->chunk->token_ids[41], 139);
    }
    mmgw__worker__v1__generate_response__free_unpacked(r, NULL);
    CHECK(pop(&o) == NULL);
    return test_done();
}
