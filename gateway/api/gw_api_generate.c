/* The generation: the GenerateRequest for the router, the worker's stream back to the client (SSE chunks
 * or one JSON answer), backpressure from the client's socket to the worker's stream, and the end of the
 * request however it comes (done, stop string, worker error, client gone). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_api_output.h"
#include "mm_dtype.h"
#include "mm_log.h"

#define WRITE_PIECE (64 * 1024) /* well under stream_buffer_max, so a write can always make progress */

static void finalize(struct gw_api_req *r);
static void fail_midway(struct gw_api_req *r, const struct gw_api_error *e);

/* ---- backpressure ---- */

static void flush_out(struct gw_api_req *r);

static void on_drain(struct gw_request *req, void *ud)
{
    struct gw_api_req *r = ud;
    flush_out(r);
}

/* Hand buffered SSE bytes to the transport; pause the worker stream while the client lags. */
static void flush_out(struct gw_api_req *r)
{
    if (r->aborted) return;
    size_t off = 0;
    while (off < r->out.len) {
        size_t n = r->out.len - off < WRITE_PIECE ? r->out.len - off : WRITE_PIECE;
        int32_t rc = gw_http_stream_write(r->http, r->out.data + off, n);
        if (rc != MM_OK) break; /* MM_AGAIN: full; MM_CANCELLED: the abort callback follows */
        off += n;
    }
    mm_buf_consume(&r->out, off);
    bool lagging = r->out.len > 0 || gw_http_stream_queued(r->http) > GW_API_SSE_HIGH;
    if (lagging) {
        if (!r->paused && r->call) {
            gw_route_pause(r->call);
            r->paused = true;
        }
        gw_http_stream_on_drain(r->http, GW_API_SSE_LOW, on_drain, r);
        return;
    }
    if (r->paused) {
        r->paused = false;
        if (r->call) gw_route_resume(r->call);
    }
    if (r->finished_stream) {
        gw_http_stream_end(r->http);
        gw_api_req_release(r);
    }
}

static void out_nomem(struct gw_api_req *r)
{
    mm_log_error(GW_API_COMP, "request %s: out of memory writing the answer", r->http->id_str);
}

/* ---- the worker's stream ---- */

static void count_usage(struct gw_api_req *r)
{
    uint32_t ct = 0;
    for (uint32_t i = 0; i < r->n_choices; i++) ct += r->choices[i].n_tokens;
    gw_series_add(r->model->tok_prompt, r->prompt_tokens);
    gw_series_add(r->model->tok_completion, ct);
    gw_series_add(r->model->tok_cached, r->cached_tokens);
}

static void first_response(struct gw_api_req *r)
{
    r->t_first_ns = mm_now_ns();
    const char *l[] = {r->model->name, r->endpoint};
    gw_series_observe(gw_metric_series(r->st->m.ttft, l), (double)(r->t_first_ns - r->t_start_ns) / 1e9);
    if (r->p.stream) {
        gw_http_sse_start(r->http);
        r->streaming = true;
    }
}

/* The worker's Complete for a choice: usage counts and the finish reason. "abort" (the worker failed in the
 * middle of this choice, e.g. out of memory) is no OpenAI finish_reason and would pass a truncated answer off
 * as finished: the choice stays open and marked, and the request fails at the stream's end (finalize), or
 * with the worker's own status when the stream ends in an error, as the worker's scheduler does after it
 * ended every open choice "abort". A choice the gateway already ended (stop string, max_model_len) keeps its
 * answer. */
static int complete_choice(struct gw_api_req *r, const Mmgw__Worker__V1__GenerateComplete *cp,
                           struct gw_api_choice **out)
{
    if (cp->index >= r->n_choices) return 0;
    struct gw_api_choice *c = &r->choices[cp->index];
    *out = c;
    if (cp->cached_tokens > r->cached_tokens) r->cached_tokens = cp->cached_tokens;
    c->worker_complete = true;
    if (c->finished || c->worker_abort) return 0; /* ended already (or a worker's second Complete) */
    if (strcmp(cp->finish_reason, "abort") == 0) {
        c->worker_abort = true;
        r->n_lost++;
        return 0;
    }
    return gw_api_choice_finish(r, c, strcmp(cp->finish_reason, "length") == 0 ? "length" : "stop");
}

static void on_response(void *arg, const Mmgw__Worker__V1__GenerateResponse *resp)
{
    struct gw_api_req *r = arg;
    if (r->finished || r->finished_stream || r->aborted) return;
    if (!r->t_first_ns) first_response(r);
    struct gw_api_choice *c = NULL;
    int rc = 0;
    if (resp->response_case == MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_CHUNK && resp->chunk) {
        const Mmgw__Worker__V1__GenerateChunk *ch = resp->chunk;
        if (ch->index >= r->n_choices) return;
        c = &r->choices[ch->index];
        for (size_t i = 0; i < ch->n_token_ids && !rc; i++) {
            const float *lp = i < ch->n_logprobs ? &ch->logprobs[i] : NULL;
            const Mmgw__Worker__V1__TopLogprobs *top = i < ch->n_top_logprobs ? ch->top_logprobs[i] : NULL;
            rc = gw_api_choice_token(r, c, ch->token_ids[i], lp, top);
        }
        /* the choice's end in the same message (merge_complete): after its tokens, as if it came next */
        if (!rc && resp->chunk_complete && resp->chunk_complete->index == ch->index)
            rc = complete_choice(r, resp->chunk_complete, &c);
    } else if (resp->response_case == MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_COMPLETE &&
               resp->complete) {
        if (resp->complete->index >= r->n_choices) return;
        rc = complete_choice(r, resp->complete, &c);
    }
    if (rc) out_nomem(r);
    if (r->streaming && c) {
        if (gw_api_chunk_write(r, c, &r->out)) out_nomem(r);
        flush_out(r);
    }
    if (r->n_finished + r->n_lost == r->n_choices && !r->finished && !r->finished_stream) {
        bool all_worker = true;
        for (uint32_t i = 0; i < r->n_choices; i++) all_worker &= r->choices[i].worker_complete;
        /* stopped by a stop string: the worker is still generating, stop it; else its end is imminent (and
         * may carry the worker's error status, which then says why a choice was aborted) */
        if (!all_worker) {
            if (r->call) gw_route_cancel(r->call);
            r->call = NULL;
            finalize(r);
        }
    }
}

static void on_done(void *arg, const struct gw_call_status *st, uint32_t responses, uint32_t attempts,
                    int worker)
{
    struct gw_api_req *r = arg;
    r->call = NULL; /* the router frees the call after this returns */
    if (r->finished || r->finished_stream || r->aborted) return;
    if (st->code == MM_OK) {
        finalize(r);
        return;
    }
    mm_log_warn(GW_API_COMP, "request %s (%s): %s", r->http->id_str, r->model->name, st->message);
    struct gw_api_error e;
    int status = gw_http_status_from_mm(st->code);
    if (st->code == MM_CANCELLED) status = 503; /* the worker went away (shutdown) */
    /* the worker's status without its address (internal), which the log line above keeps */
    const char *msg = st->client < sizeof st->message ? st->message + st->client : "";
    if (msg[0])
        gw_api_fail(&e, status, NULL, "worker %s", msg);
    else
        gw_api_fail(&e, status, NULL, "%s", mm_strerror(st->code));
    fail_midway(r, &e);
}

/* ---- the end ---- */

/* The request fails after the worker's stream began: an error response, or on a started stream the error
 * event after what the client already has (which stays valid). */
static void fail_midway(struct gw_api_req *r, const struct gw_api_error *e)
{
    if (r->streaming) {
        flush_out(r);
        mm_buf_reset(&r->out);
    }
    gw_api_req_fail(r, e);
}

/* The worker's stream ended without error but a choice has no answer: the worker ended it "abort" (it
 * failed mid-generation, e.g. out of memory) or never sent its Complete. Its text is cut short, which no
 * OpenAI finish_reason says, so the request fails as after a worker error mid-stream: 503 (retryable;
 * Retry-After from the server core), or the error event on a started stream. */
static void fail_lost(struct gw_api_req *r, const struct gw_api_choice *c)
{
    const char *why = c->worker_abort ? "the worker aborted the generation (e.g. out of memory)"
                                      : "the worker's stream ended without finishing it";
    mm_log_warn(GW_API_COMP, "request %s (%s): choice %u: %s", r->http->id_str, r->model->name, c->index,
                why);
    struct gw_api_error e;
    gw_api_fail(&e, 503, NULL, "choice %u is incomplete: %s; try again", c->index, why);
    fail_midway(r, &e);
}

static void finalize(struct gw_api_req *r)
{
    if (r->finished || r->finished_stream) return;
    for (uint32_t i = 0; i < r->n_choices; i++)
        if (!r->choices[i].finished) {
            fail_lost(r, &r->choices[i]);
            return;
        }
    count_usage(r);
    if (!r->t_first_ns) first_response(r); /* defensive: a finished choice had a worker response */
    if (r->streaming) {
        for (uint32_t i = 0; i < r->n_choices; i++)
            if (gw_api_chunk_write(r, &r->choices[i], &r->out)) out_nomem(r);
        if (r->p.include_usage && gw_api_usage_chunk(r, &r->out)) out_nomem(r);
        if (mm_buf_append_str(&r->out, "data: [DONE]\n\n")) out_nomem(r);
        gw_api_req_metrics(r, 200);
        r->finished_stream = true; /* no more worker callbacks matter; release once the bytes are out */
        flush_out(r);
        return;
    }
    struct mm_buf b;
    mm_buf_init_arena(&b, 0, r->http->arena); /* a typical response: no malloc */
    /* one allocation (512 bytes) for a typical short response instead of 256 then 512 */
    if (mm_buf_reserve(&b, 480) || gw_api_full_response(r, &b)) {
        mm_buf_free(&b);
        struct gw_api_error e;
        gw_api_fail(&e, 503, NULL, "out of memory");
        gw_api_req_fail(r, &e);
        return;
    }
    if (!r->aborted) gw_http_respond(r->http, 200, "application/json", b.data, b.len);
    mm_buf_free(&b);
    gw_api_req_metrics(r, 200);
    gw_api_req_release(r);
}

/* ---- the request to the worker ---- */

static void add_id(uint32_t *set, size_t *n, size_t cap, uint32_t id)
{
    for (size_t i = 0; i < *n; i++)
        if (set[i] == id) return;
    if (*n < cap) set[(*n)++] = id;
}

static int build_request(struct gw_api_req *r, uint32_t *worker_stops, size_t n_worker_stops,
                         struct gw_api_error *e)
{
    Mmgw__Worker__V1__GenerateRequest *g = &r->gr;
    Mmgw__Worker__V1__SamplingParams *sp = &r->sp;
    mmgw__worker__v1__generate_request__init(g);
    mmgw__worker__v1__sampling_params__init(sp);
    memcpy(r->rid, "mmgw-", 5);
    gw_api_random_hex(r->rid + 5, 24);
    g->request_id = r->rid;
    g->merge_complete = 1; /* a choice's last chunk may carry its Complete: one message less per choice */
    g->input_ids = r->ids.ids;
    g->n_input_ids = r->ids.n;
    g->sampling = sp;
    if (r->p.max_tokens > 0) {
        sp->has_max_new_tokens_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_MAX_NEW_TOKENS_MAX_NEW_TOKENS;
        sp->max_new_tokens = (uint32_t)r->p.max_tokens;
    }
    if (r->p.has_temperature) {
        sp->has_temperature_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_TEMPERATURE_TEMPERATURE;
        sp->temperature = (float)r->p.temperature;
    }
    if (r->p.has_top_p) {
        sp->has_top_p_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_TOP_P_TOP_P;
        sp->top_p = (float)r->p.top_p;
    }
    if (r->p.has_top_k) {
        sp->has_top_k_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_TOP_K_TOP_K;
        sp->top_k = (int32_t)r->p.top_k;
    }
    if (r->p.has_min_p) {
        sp->has_min_p_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_MIN_P_MIN_P;
        sp->min_p = (float)r->p.min_p;
    }
    if (r->p.has_seed) {
        sp->has_seed_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_SEED_SEED;
        sp->seed = r->p.seed;
    }
    if (r->p.min_tokens > 0) {
        sp->has_min_new_tokens_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_MIN_NEW_TOKENS_MIN_NEW_TOKENS;
        sp->min_new_tokens = (uint32_t)r->p.min_tokens;
    }
    sp->has_n_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_N_N;
    sp->n = r->p.n;
    if (r->p.logprobs) {
        sp->has_logprobs_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_LOGPROBS_LOGPROBS;
        sp->logprobs = (uint32_t)r->p.top_logprobs;
        g->return_logprobs = 1;
    }
    sp->ignore_eos = r->p.ignore_eos;
    sp->stop_token_ids = worker_stops;
    sp->n_stop_token_ids = n_worker_stops;

    size_t n_items = 0;
    for (size_t k = 0; k < r->n_media; k++) n_items += r->media[k].rendered;
    if (n_items == 0) return 0;
    r->items = calloc(n_items, sizeof *r->items);
    r->item_ptrs = calloc(n_items, sizeof *r->item_ptrs);
    r->tensors = calloc(n_items, sizeof *r->tensors);
    r->grids = calloc(n_items * 5, sizeof *r->grids); /* 3 for grid_thw + 2 for the tensor shape */
    if (!r->items || !r->item_ptrs || !r->tensors || !r->grids)
        return gw_api_fail(e, 503, NULL, "out of memory");
    size_t o = 0;
    for (size_t k = 0; k < r->n_media; k++) {
        struct gw_api_media *m = &r->media[k];
        if (!m->rendered) continue;
        Mmgw__Worker__V1__MultimodalItem *it = &r->items[o];
        Mmgw__Worker__V1__Tensor *t = &r->tensors[o];
        int64_t *grid = &r->grids[o * 5];
        mmgw__worker__v1__multimodal_item__init(it);
        mmgw__worker__v1__tensor__init(t);
        it->modality = m->kind == MMGW_MEDIA_VIDEO ? MMGW__WORKER__V1__MODALITY__VIDEO
                                                   : MMGW__WORKER__V1__MODALITY__IMAGE;
        t->dtype = m->res.dtype == MM_DT_BF16 ? MMGW__WORKER__V1__DTYPE__BF16 : MMGW__WORKER__V1__DTYPE__F32;
        grid[3] = (int64_t)m->res.n_patches;
        grid[4] = m->res.patch_dim;
        t->shape = &grid[3];
        t->n_shape = 2;
        t->data.data = m->res.pixels;
        t->data.len = m->res.n_patches * m->res.patch_dim * mm_dtype_size(m->res.dtype);
        memcpy(grid, m->res.grid_thw, 3 * sizeof *grid);
        it->grid_thw = grid;
        it->n_grid_thw = 3;
        it->pixel_values = t;
        it->placeholders = r->range_ptrs ? &r->range_ptrs[m->range_first] : NULL;
        it->n_placeholders = m->n_ranges;
        it->content_hash = m->hash;
        r->item_ptrs[o++] = it;
    }
    g->mm_inputs = r->item_ptrs;
    g->n_mm_inputs = o;
    return 0;
}

void gw_api_generate(struct gw_api_req *r)
{
    struct gw_api_error e;
    struct gw_api_model *m = r->model;
    /* ids whose text is never shown: the plugin's stop tokens, the workers' eos ids, the request's stop ids
     */
    uint32_t eos[GW_API_MAX_EOS];
    size_t n_eos = gw_api_worker_eos(m, eos, GW_API_MAX_EOS);
    for (size_t i = 0; i < m->n_stop_ids; i++)
        add_id(r->stop_ids, &r->n_stop_ids, GW_API_MAX_STOP_IDS, m->stop_ids[i]);
    for (size_t i = 0; i < n_eos; i++) add_id(r->stop_ids, &r->n_stop_ids, GW_API_MAX_STOP_IDS, eos[i]);
    /* what the worker stops on besides its eos ids: the plugin's stops (they are the model's eos, so
     * ignore_eos lifts them too) and the request's stop_token_ids */
    uint32_t wstops[GW_API_MAX_STOP_IDS];
    size_t n_wstops = 0;
    if (!r->p.ignore_eos)
        for (size_t i = 0; i < m->n_stop_ids; i++)
            add_id(wstops, &n_wstops, GW_API_MAX_STOP_IDS, m->stop_ids[i]);
    for (size_t i = 0; i < r->p.n_stop_ids; i++) {
        add_id(wstops, &n_wstops, GW_API_MAX_STOP_IDS, r->p.stop_ids[i]);
        add_id(r->stop_ids, &r->n_stop_ids, GW_API_MAX_STOP_IDS, r->p.stop_ids[i]);
    }
    snprintf(r->id, sizeof r->id, "%s", r->kind == GW_API_CHAT ? "chatcmpl-" : "cmpl-");
    gw_api_random_hex(r->id + strlen(r->id), 24);
    r->prompt_tokens = (uint32_t)r->ids.n;
    if (gw_api_choices_init(r, &e) || build_request(r, wstops, n_wstops, &e)) {
        gw_api_req_fail(r, &e);
        return;
    }
    if (gw_api_write_prefix(r)) {
        gw_api_fail(&e, 503, NULL, "out of memory");
        gw_api_req_fail(r, &e);
        return;
    }
    static const struct gw_route_callbacks cbs = {on_response, on_done};
    struct mm_err err;
    mm_err_clear(&err);
    /* the router keeps a pointer to sp->stop_token_ids: give it storage that lives with r */
    memcpy(r->worker_stops, wstops, n_wstops * sizeof *wstops);
    r->sp.stop_token_ids = r->worker_stops;
    /* on this loop's own connection to the worker (no thread hop per response) */
    struct gw_up_loop loop = {r->http->base, r->http->executor, r->http->loop_index};
    int32_t rc = gw_router_generate_on(m->router, &r->gr, &loop, &cbs, r, &r->call, &err);
    if (rc != MM_OK) {
        gw_api_fail_mm(&e, &err, NULL);
        gw_api_req_fail(r, &e);
    }
}
