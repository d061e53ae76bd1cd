/* One batched step: compose the forward (decode tokens first, then prompt and catch-up chunks within the
 * token budget), run it, then sample, stream and finish choices. */
#include "wk_sched_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mm_log.h"
#include "mm_logprobs.h"
#include "mm_clock.h"

#define LOG "sched"

/* Step-local media spans of prompt chunks. */
struct embed_buf {
    struct wk_embed_span *spans;
    int32_t n;
};

static int32_t ensure_items(struct wk_sched *s, int32_t n)
{
    if (n <= s->items_cap) return 0;
    int32_t cap = s->items_cap ? s->items_cap : 64;
    while (cap < n) cap *= 2;
    struct wk_step_item *it = realloc(s->items, (size_t)cap * sizeof(*it));
    if (!it) return -1;
    s->items = it;
    struct sreq **ir = realloc(s->item_req, (size_t)cap * sizeof(*ir));
    if (!ir) return -1;
    s->item_req = ir;
    int32_t *ic = realloc(s->item_choice, (size_t)cap * sizeof(*ic));
    if (!ic) return -1;
    s->item_choice = ic;
    struct wk_cands *cd = realloc(s->item_cands, (size_t)cap * sizeof(*cd));
    if (!cd) return -1;
    s->item_cands = cd;
    int32_t *ci = realloc(s->cand_ids, (size_t)cap * SCHED_CANDS * sizeof(*ci));
    if (!ci) return -1;
    s->cand_ids = ci;
    float *cl = realloc(s->cand_logits, (size_t)cap * SCHED_CANDS * sizeof(*cl));
    if (!cl) return -1;
    s->cand_logits = cl;
    s->items_cap = cap;
    return 0;
}

static int32_t ensure_logits(struct wk_sched *s, int64_t rows)
{
    int64_t need = rows * s->info->vocab_size;
    if (need <= s->logits_cap) return 0;
    float *l = realloc(s->logits, (size_t)need * sizeof(float));
    if (!l) return -1;
    s->logits = l;
    s->logits_cap = need;
    return 0;
}

void sched_finish_choice(struct wk_sched *s, struct sreq *q, int32_t i, const char *reason,
                         int32_t has_matched, int32_t matched)
{
    struct choice *c = &q->ch[i];
    if (c->finished) return;
    c->finished = 1;
    q->n_done++;
    /* choice 0 keeps the prompt until the others have forked from it */
    if (c->seq && !(i == 0 && q->state != SREQ_RUNNING)) {
        wk_seq_free(s->e, c->seq);
        c->seq = NULL;
    }
    struct wk_complete_ev ev = {
        .index = i,
        .finish_reason = reason,
        .prompt_tokens = q->r->n_ids,
        .completion_tokens = c->n_gen,
        .cached_tokens = q->cached,
        .has_matched_stop = has_matched,
        .matched_stop = matched,
    };
    q->sink.complete(q->sink.ctx, &ev);
    q->dirty = 1;
}

static int32_t is_eos(const struct wk_sched *s, int32_t tok)
{
    for (int32_t i = 0; i < s->info->n_eos; i++)
        if (s->info->eos_ids[i] == tok) return 1;
    return 0;
}

static int32_t is_stop(const struct sreq *q, int32_t tok)
{
    for (int32_t i = 0; i < q->r->sp.n_stop_ids; i++)
        if (q->r->sp.stop_ids[i] == tok) return 1;
    return 0;
}

/* Greedy: the plain argmax of the logits */
static int greedy(const struct wk_sampling_req *sp)
{
    return !(sp->temperature > 0.0f) || sp->top_k == 1;
}

/* No stop token is masked in choice c's next token: min_new_tokens reached, or nothing to mask */
static int stops_unmasked(const struct wk_sched *s, const struct sreq *q, const struct choice *c)
{
    const struct wk_sampling_req *sp = &q->r->sp;
    return c->n_gen >= sp->min_new_tokens || (sp->n_stop_ids == 0 && (sp->ignore_eos || s->info->n_eos == 0));
}

/* Whether choice c's next token can be drawn without its whole logits row: no log-probabilities asked, and
 * no stop token masked */
static int row_not_needed(const struct wk_sched *s, const struct sreq *q, const struct choice *c)
{
    const struct wk_sampling_req *sp = &q->r->sp;
    if (sp->return_logprobs || sp->top_logprobs > 0) return 0;
    return stops_unmasked(s, q, c);
}

/* Whether choice c's next token is the plain argmax of its logits, so that the engine may return only the
 * token (WK_LOGITS_ARGMAX: on a GPU the logits stay on the device): greedy, and no row needed */
static int greedy_token_only(const struct wk_sched *s, const struct sreq *q, const struct choice *c)
{
    return greedy(&q->r->sp) && row_not_needed(s, q, c);
}

/* Whether choice c's next token can be sampled from the engine's candidates (WK_LOGITS_CANDS: on a GPU a few
 * logits come back instead of the row, and the sampler sorts a few): sampled, no log-probabilities, no stop
 * token masked. wk_sample then gives what the whole row gives. Without a top-k the candidates are every
 * token the sampler could keep (within 28.6 T of the best): a confident row fits, a flat one comes back
 * whole. */
static int cands_token(const struct wk_sched *s, const struct sreq *q, const struct choice *c)
{
    const struct wk_sampling_req *sp = &q->r->sp;
    if (greedy(sp) || sp->top_k > SCHED_CANDS) return 0;
    return row_not_needed(s, q, c);
}

/* Whether choice c's next token and its log-probabilities can come from the engine's candidates with the
 * row's log-sum-exp (WK_LOGITS_CANDS with MM_CANDS_EXACT | MM_CANDS_LSE): log-probabilities asked, no stop
 * token masked, and greedy or a top-k: the top max(top_k, top_logprobs) logits hold the token, its logit and
 * the top log-probabilities */
static int logprob_cands(const struct wk_sched *s, const struct sreq *q, const struct choice *c)
{
    const struct wk_sampling_req *sp = &q->r->sp;
    if (!sp->return_logprobs || !stops_unmasked(s, q, c)) return 0;
    return greedy(sp) || (sp->top_k > 1 && sp->top_k <= SCHED_CANDS);
}

/* Whether choice c's next token is sampled without a top-k and wants log-probabilities, no stop token
 * masked: the engine's candidates with the row's log-sum-exp and the top_logprobs largest (n_top), or for a
 * flat row the token it drew with its logit and that top list */
static int logprob_draw(const struct wk_sched *s, const struct sreq *q, const struct choice *c)
{
    const struct wk_sampling_req *sp = &q->r->sp;
    return sp->return_logprobs && !greedy(sp) && sp->top_k <= 0 && stops_unmasked(s, q, c);
}

/* The logits mode of choice c's next token, and its candidates request (item k) when it takes them. shared:
 * the row also gives other choices their first token (a prompt's last row with n > 1), so it is not drawn
 * from with c's uniform alone */
static int32_t token_mode(struct wk_sched *s, const struct sreq *q, const struct choice *c, int32_t k,
                          int32_t shared)
{
    if (greedy_token_only(s, q, c)) return WK_LOGITS_ARGMAX;
    const int lp = logprob_cands(s, q, c), lpd = !lp && logprob_draw(s, q, c);
    if (!lp && !lpd && !cands_token(s, q, c)) return WK_LOGITS_LAST;
    const struct wk_sampling_req *sp = &q->r->sp;
    struct wk_cands *cd = &s->item_cands[k];
    *cd = (struct wk_cands){.temperature = sp->temperature,
                            .cap = SCHED_CANDS,
                            .ids = s->cand_ids + (int64_t)k * SCHED_CANDS,
                            .logits = s->cand_logits + (int64_t)k * SCHED_CANDS,
                            .n = -1};
    if (lp) {
        const int32_t n_top = sp->top_logprobs > 0 ? sp->top_logprobs : 1, kk = greedy(sp) ? 1 : sp->top_k;
        cd->k = kk > n_top ? kk : n_top;
        if (greedy(sp)) cd->temperature = 1.0f;
        cd->flags = MM_CANDS_EXACT | MM_CANDS_LSE;
        return WK_LOGITS_CANDS;
    }
    /* without a top-k, a row whose candidates do not fit is drawn from where it lies, with the uniform
     * wk_sample would take next (take_token advances the state when it was) */
    uint64_t peek = c->rng;
    cd->k = sp->top_k > 0 ? sp->top_k : INT32_MAX;
    cd->draw = !s->o.host_draw && !shared;
    cd->top_p = sp->top_p, cd->min_p = sp->min_p;
    cd->u = wk_sample_uniform(&peek);
    if (lpd) cd->flags = MM_CANDS_LSE, cd->n_top = sp->top_logprobs;
    return WK_LOGITS_CANDS;
}

/* Where a token's log-probabilities come from: the whole row (ids NULL: an index is a token), or the engine's
 * candidates (or a drawn row's top list) with the row's log-sum-exp */
struct lp_src {
    const float *x; /* the top log-probabilities' logits */
    int32_t n;
    const int32_t *ids;
    float lse;
    float x_tok; /* the token's logit */
};

static void commit_token(struct wk_sched *s, struct sreq *q, int32_t i, int32_t tok,
                         const struct lp_src *src);

/* The whole logits row an item brought back: LAST, or CANDS whose candidates did not fit (n = -1) */
static const float *sampled_logits(const struct wk_step_item *it)
{
    if (it->logits_mode == WK_LOGITS_LAST) return it->logits;
    if (it->logits_mode == WK_LOGITS_CANDS && it->cands && it->cands->n < 0) return it->logits;
    return NULL;
}

/* Sample choice i's next token, stream it, and finish the choice when it stops. logits: the position's
 * logits; NULL when the engine returned only its greedy token (greedy_token_only), its candidates (cands,
 * with n >= 0) or the token it drew (n = -2) */
static void take_token(struct wk_sched *s, struct sreq *q, int32_t i, const float *logits, int32_t greedy_tok,
                       const struct wk_cands *cands)
{
    struct choice *c = &q->ch[i];
    const struct wk_sampling_req *sp = &q->r->sp;
    const int32_t V = s->info->vocab_size;
    if (cands && cands->n == -2) { /* drawn by the engine with this choice's next uniform: take it */
        (void)wk_sample_uniform(&c->rng);
        const int32_t tok = cands->ids[0];
        /* with the row's log-sum-exp: its logit and the top list came along (logprob_draw) */
        const struct lp_src src = {cands->logits + 1, cands->n_top_out, cands->ids + 1, cands->lse,
                                   cands->logits[0]};
        commit_token(s, q, i, tok >= 0 && tok < V ? tok : 0, (cands->flags & MM_CANDS_LSE) ? &src : NULL);
        return;
    }
    if (cands && cands->n >= 0) {
        /* no candidates: a row of NaN, whose whole-row sample is token 0 */
        struct wk_sampling ws = {
            .temperature = sp->temperature, .top_p = sp->top_p, .top_k = sp->top_k, .min_p = sp->min_p};
        const int32_t j = cands->n > 0 ? wk_sample(cands->logits, cands->n, &ws, &c->rng, NULL) : -1;
        const int32_t tok = j >= 0 && j < cands->n ? cands->ids[j] : 0;
        /* with the row's log-sum-exp the candidates also give the log-probabilities (logprob_cands) */
        const struct lp_src src = {cands->logits, cands->n, cands->ids, cands->lse,
                                   j >= 0 && j < cands->n ? cands->logits[j] : 0.0f};
        const int lp = (cands->flags & MM_CANDS_LSE) && j >= 0 && j < cands->n;
        commit_token(s, q, i, tok >= 0 && tok < V ? tok : 0, lp ? &src : NULL);
        return;
    }
    if (!logits) {
        commit_token(s, q, i, greedy_tok >= 0 && greedy_tok < V ? greedy_tok : 0, NULL);
        return;
    }
    const float *lg = logits;
    if (c->n_gen < sp->min_new_tokens) {
        /* too early to stop: the stop tokens cannot be chosen yet */
        memcpy(s->scratch, logits, (size_t)V * sizeof(float));
        if (!sp->ignore_eos)
            for (int32_t k = 0; k < s->info->n_eos; k++)
                if (s->info->eos_ids[k] >= 0 && s->info->eos_ids[k] < V)
                    s->scratch[s->info->eos_ids[k]] = -INFINITY;
        for (int32_t k = 0; k < sp->n_stop_ids; k++) s->scratch[sp->stop_ids[k]] = -INFINITY;
        lg = s->scratch;
    }
    struct wk_sampling ws = {
        .temperature = sp->temperature, .top_p = sp->top_p, .top_k = sp->top_k, .min_p = sp->min_p};
    int32_t tok = wk_sample(lg, V, &ws, &c->rng, NULL);
    if (tok < 0 || tok >= V) tok = 0; /* defensive: a sampler bug must not index out of the vocabulary */
    const struct lp_src src = {logits, V, NULL, 0.0f, logits[tok]};
    commit_token(s, q, i, tok, &src);
}

/* Append tok to choice i, stream it (with its log-probabilities from logits when asked), end the choice on
 * a stop token or its length. */
static void commit_token(struct wk_sched *s, struct sreq *q, int32_t i, int32_t tok, const struct lp_src *src)
{
    struct choice *c = &q->ch[i];
    const struct wk_sampling_req *sp = &q->r->sp;

    if (c->n_gen == c->cap_gen) {
        int64_t cap = c->cap_gen ? c->cap_gen * 2 : 16;
        int32_t *g = realloc(c->gen, (size_t)cap * sizeof(int32_t));
        if (!g) {
            sched_finish_choice(s, q, i, "abort", 0, 0);
            return;
        }
        c->gen = g;
        c->cap_gen = cap;
    }
    c->gen[c->n_gen++] = tok;

    float lp = 0.0f;
    int32_t top_ids[WK_MAX_TOP_LOGPROBS];
    float top_lp[WK_MAX_TOP_LOGPROBS];
    struct wk_chunk_ev ev = {.index = i, .ids = &c->gen[c->n_gen - 1], .n = 1};
    if (sp->return_logprobs && src) {
        const float lse = src->ids ? src->lse : mm_logsumexp(src->x, src->n);
        lp = src->x_tok - lse;
        ev.logprobs = &lp;
        if (sp->top_logprobs > 0) {
            int32_t k = sp->top_logprobs < src->n ? sp->top_logprobs : src->n;
            mm_top_logprobs(src->x, src->n, lse, k, top_ids, top_lp);
            if (src->ids)
                for (int32_t m = 0; m < k; m++) top_ids[m] = src->ids[top_ids[m]];
            ev.top_n = k;
            ev.top_ids = top_ids;
            ev.top_logprobs = top_lp;
        }
    }
    if (!q->t_first_ms) q->t_first_ms = mm_now_ms();
    q->sink.chunk(q->sink.ctx, &ev);
    q->dirty = 1;

    if ((!sp->ignore_eos && is_eos(s, tok)) || is_stop(q, tok)) {
        sched_finish_choice(s, q, i, "stop", 1, tok);
    } else if (c->n_gen >= sp->max_new_tokens || q->r->n_ids + c->n_gen >= s->max_context) {
        sched_finish_choice(s, q, i, "length", 0, 0);
    }
}

/* The prompt is in choice 0's sequence: fork the other choices from it and sample every first token. */
static int32_t prompt_done(struct wk_sched *s, struct sreq *q, const float *logits, int32_t greedy_tok,
                           const struct wk_cands *cands)
{
    const int32_t n = q->r->sp.n;
    for (int32_t i = 1; i < n; i++) {
        if (q->ch[i].finished) continue;
        struct mm_err err = {0};
        if (wk_seq_fork(s->e, q->ch[0].seq, &q->ch[i].seq, &err) != MM_OK) {
            mm_log_error(LOG, "request '%s': fork: %s", q->r->id, err.msg);
            sched_end(s, q, err.code ? err.code : MM_ERROR, err.msg);
            return -1;
        }
    }
    q->state = SREQ_RUNNING;
    if (q->ch[0].finished && q->ch[0].seq) { /* a preempted request whose choice 0 had already ended */
        wk_seq_free(s->e, q->ch[0].seq);
        q->ch[0].seq = NULL;
    }
    for (int32_t i = 0; i < n; i++) {
        struct choice *c = &q->ch[i];
        if (c->finished || c->n_gen > 0) continue;
        if (q->r->sp.max_new_tokens == 0) {
            sched_finish_choice(s, q, i, "length", 0, 0);
        } else if (logits || greedy_tok >= 0 || cands) {
            take_token(s, q, i, logits, greedy_tok, cands);
        }
    }
    return 0;
}

static struct sreq *youngest(struct wk_sched *s)
{
    struct sreq *y = NULL;
    for (struct sreq *q = s->running; q; q = q->next)
        if (!y || q->admit_seq > y->admit_seq) y = q;
    return y;
}

int32_t sched_step(struct wk_sched *s)
{
    if (!s->running) return 0;
    int32_t n_items = 0, n_logit_rows = 0;
    int32_t budget = s->o.step_tokens;
    int32_t cap = 0;
    for (struct sreq *q = s->running; q; q = q->next) cap += q->r->sp.n;
    if (ensure_items(s, cap) != 0) {
        mm_log_error(LOG, "out of memory for a step of %d sequences", cap);
        return 0;
    }
    struct embed_buf *ebs = calloc((size_t)cap, sizeof(*ebs));
    if (!ebs) return 0;

    /* decode tokens first: they are what streams are waiting for */
    for (struct sreq *q = s->running; q; q = q->next) {
        if (q->state != SREQ_RUNNING) continue;
        for (int32_t i = 0; i < q->r->sp.n; i++) {
            struct choice *c = &q->ch[i];
            if (c->finished || !c->seq || c->fed != c->n_gen - 1 || budget < 1) continue;
            s->items[n_items] = (struct wk_step_item){.seq = c->seq,
                                                      .ids = &c->gen[c->fed],
                                                      .n = 1,
                                                      .logits_mode = token_mode(s, q, c, n_items, 0)};
            if (s->items[n_items].logits_mode == WK_LOGITS_CANDS)
                s->items[n_items].cands = &s->item_cands[n_items];
            s->item_req[n_items] = q;
            s->item_choice[n_items++] = i;
            budget--;
        }
    }
    /* then prompt chunks and catch-up (preempted choices re-entering their tokens), oldest first */
    struct sreq *q = s->running;
    while (q && budget > 0) {
        struct sreq *next = q->next;
        if (q->state == SREQ_PREFILL && sched_waits_for_encoder(q)) {
            /* its next prompt position needs an item the encoder still has: it goes on when that is back */
        } else if (q->state == SREQ_PREFILL) {
            /* the text before an item still being encoded may already be prefilled */
            int64_t left = sched_media_ready_until(q) - q->prompt_fed;
            int32_t nchunk = (int32_t)(left < budget ? left : budget);
            const int32_t last = q->prompt_fed + nchunk == q->r->n_ids;
            int32_t need_logits = 0, first = -1;
            for (int32_t i = 0; i < q->r->sp.n; i++)
                if (!q->ch[i].finished && q->ch[i].n_gen == 0 && q->r->sp.max_new_tokens > 0) {
                    need_logits++;
                    if (first < 0) first = i;
                }
            /* every choice draws its first token from the prompt's one row: one mode serves them all, and a
             * request's choices share their sampling settings and n_gen (0) */
            const int32_t mode =
                need_logits ? token_mode(s, q, &q->ch[first], n_items, need_logits > 1) : WK_LOGITS_NONE;
            struct embed_buf eb;
            if (sched_chunk_embeds(s, q, q->prompt_fed, nchunk, &eb.spans, &eb.n) != 0) {
                q = next;
                continue;
            }
            ebs[n_items] = eb;
            s->items[n_items] = (struct wk_step_item){
                .seq = q->ch[0].seq,
                .ids = q->r->ids + q->prompt_fed,
                .n = nchunk,
                .spans = eb.spans,
                .n_spans = eb.n,
                .logits_mode = (last && need_logits) ? mode : WK_LOGITS_NONE,
                .cands = (last && mode == WK_LOGITS_CANDS) ? &s->item_cands[n_items] : NULL};
            s->item_req[n_items] = q;
            s->item_choice[n_items++] = -1;
            budget -= nchunk;
        } else {
            for (int32_t i = 0; i < q->r->sp.n && budget > 0; i++) {
                struct choice *c = &q->ch[i];
                if (c->finished || !c->seq || c->fed >= c->n_gen - 1) continue;
                int64_t left = c->n_gen - 1 - c->fed;
                int32_t nchunk = (int32_t)(left < budget ? left : budget);
                s->items[n_items] = (struct wk_step_item){
                    .seq = c->seq, .ids = c->gen + c->fed, .n = nchunk, .logits_mode = WK_LOGITS_NONE};
                s->item_req[n_items] = q;
                s->item_choice[n_items++] = i;
                budget -= nchunk;
            }
        }
        q = next;
    }
    for (int32_t k = 0; k < n_items; k++)
        n_logit_rows +=
            s->items[k].logits_mode == WK_LOGITS_LAST || s->items[k].logits_mode == WK_LOGITS_CANDS;
    if (ensure_logits(s, n_logit_rows) != 0) {
        for (int32_t k = 0; k < n_items; k++) free(ebs[k].spans);
        free(ebs);
        /* nothing ran; shed the youngest request so that the next step needs less */
        mm_log_error(LOG, "out of memory for %d logit rows", n_logit_rows);
        sched_end(s, youngest(s), MM_NOMEM, "out of memory for the step's logits");
        return 1;
    }
    n_logit_rows = 0;
    for (int32_t k = 0; k < n_items; k++)
        if (s->items[k].logits_mode == WK_LOGITS_LAST || s->items[k].logits_mode == WK_LOGITS_CANDS)
            s->items[k].logits = s->logits + (int64_t)(n_logit_rows++) * s->info->vocab_size;

    int32_t rc = MM_OK;
    struct mm_err err = {0};
    if (n_items > 0) {
        rc = wk_engine_forward(s->e, s->items, n_items, &err);
        s->steps++;
    }
    for (int32_t k = 0; k < n_items; k++) free(ebs[k].spans);
    free(ebs);
    if (n_items == 0) return 0;

    if (rc == MM_EXHAUSTED) {
        /* the reservation should prevent this; if the engine disagrees, recompute the youngest later */
        struct sreq *y = youngest(s);
        mm_log_warn(LOG, "cache full mid-step (%s): preempting '%s'", err.msg, y->r->id);
        if (s->running == y && !y->next) {
            sched_end(s, y, MM_EXHAUSTED, "the cache cannot hold this request");
        } else {
            sched_preempt(s, y);
        }
        return 1;
    }
    if (rc != MM_OK) {
        mm_log_error(LOG, "forward failed: %s (%s); ending the %d requests in the step", err.msg,
                     mm_status_name(rc), n_items);
        for (int32_t k = 0; k < n_items; k++) {
            struct sreq *r = s->item_req[k];
            int32_t seen = 0;
            for (int32_t j = 0; j < k; j++) seen |= s->item_req[j] == r;
            if (!seen) sched_end(s, r, MM_ERROR, err.msg[0] ? err.msg : "model step failed");
        }
        return 1;
    }

    for (int32_t k = 0; k < n_items; k++) {
        struct sreq *r = s->item_req[k];
        const struct wk_step_item *it = &s->items[k];
        int32_t i = s->item_choice[k];
        if (i < 0) {
            r->prompt_fed += it->n;
            if (r->prompt_fed == r->r->n_ids)
                prompt_done(s, r, sampled_logits(it), it->logits_mode == WK_LOGITS_ARGMAX ? it->token : -1,
                            it->logits_mode == WK_LOGITS_CANDS ? it->cands : NULL);
            /* prompt_done may end r; nothing after this touches it */
            continue;
        }
        struct choice *c = &r->ch[i];
        c->fed += it->n;
        if (it->logits_mode == WK_LOGITS_LAST || it->logits_mode == WK_LOGITS_CANDS)
            take_token(s, r, i, sampled_logits(it), -1,
                       it->logits_mode == WK_LOGITS_CANDS ? it->cands : NULL);
        if (it->logits_mode == WK_LOGITS_ARGMAX) take_token(s, r, i, NULL, it->token, NULL);
    }
    /* requests whose every choice has ended */
    q = s->running;
    while (q) {
        struct sreq *next = q->next;
        if (q->state == SREQ_RUNNING && q->n_done == q->r->sp.n) sched_end(s, q, MM_OK, NULL);
        q = next;
    }
    return 1;
}
