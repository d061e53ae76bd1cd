/* One choice's output: token ids -> incremental detokenizer -> stop strings -> the plugin's output parser
 * (reasoning, tool calls) -> the delta of the next chunk, or the whole message; and the JSON of chunks and
 * complete responses, written by hand because it runs once per token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_api_output.h"

/* ---- choice state ---- */

static int32_t out_emit(void *ctx, int32_t kind, int32_t tool_index, const char *text, uint64_t len)
{
    struct gw_api_choice *c = ctx;
    switch (kind) {
    case MMGW_OUT_CONTENT:
        return mm_buf_append(&c->content, text, (size_t)len) ? MMGW_E_NOMEM : MMGW_OK;
    case MMGW_OUT_REASONING:
        return mm_buf_append(&c->reasoning, text, (size_t)len) ? MMGW_E_NOMEM : MMGW_OK;
    case MMGW_OUT_TOOL_NAME:
    case MMGW_OUT_TOOL_ARGS:
        break;
    default:
        return MMGW_OK;
    }
    struct gw_api_toolcall *last = c->n_calls ? &c->calls[c->n_calls - 1] : NULL;
    if (kind == MMGW_OUT_TOOL_ARGS && last && last->index == tool_index)
        return mm_buf_append(&last->args, text, (size_t)len) ? MMGW_E_NOMEM : MMGW_OK;
    if (c->n_calls == c->cap_calls) {
        size_t cap = c->cap_calls ? c->cap_calls * 2 : 4;
        struct gw_api_toolcall *n = realloc(c->calls, cap * sizeof *n);
        if (!n) return MMGW_E_NOMEM;
        c->calls = n;
        c->cap_calls = cap;
    }
    struct gw_api_toolcall *t = &c->calls[c->n_calls++];
    memset(t, 0, sizeof *t);
    t->index = tool_index;
    mm_buf_init(&t->args, 0);
    if (kind == MMGW_OUT_TOOL_NAME) {
        memcpy(t->id, "call_", 5);
        gw_api_random_hex(t->id + 5, 24);
        t->name = strndup(text, (size_t)len);
        if (!t->name) return MMGW_E_NOMEM;
        c->n_calls_total++;
    } else if (mm_buf_append(&t->args, text, (size_t)len)) {
        return MMGW_E_NOMEM;
    }
    return MMGW_OK;
}

int gw_api_choices_init(struct gw_api_req *r, struct gw_api_error *e)
{
    r->n_choices = r->p.n;
    /* in the request's arena (r->http->arena, NULL: the heap); gw_api_req_clear knows which */
    r->choices = r->http->arena ? mm_arena_calloc(r->http->arena, r->n_choices, sizeof *r->choices)
                                : calloc(r->n_choices, sizeof *r->choices);
    if (!r->choices) return gw_api_fail(e, 503, NULL, "out of memory");
    r->stops.strs = r->p.stop;
    r->stops.lens = r->p.stop_len;
    r->stops.n = r->p.n_stop;
    const struct mmgw_plugin *vt = r->model->vt;
    for (uint32_t i = 0; i < r->n_choices; i++) {
        struct gw_api_choice *c = &r->choices[i];
        c->index = i;
        /* skip_special_tokens drops special tokens from the text, except the markers the parser reads */
        gw_tok_stream_init(&c->dec, r->model->tok, r->p.skip_special ? GW_TOK_SKIP_SPECIAL : 0);
        if (r->kind == GW_API_CHAT && vt->parser_create)
            gw_tok_stream_keep(&c->dec, r->model->parser_ids, r->model->n_parser_ids);
        gw_api_stop_init(&c->stop, &r->stops);
        /* small answers live in the request's arena (the choices are freed before it) */
        mm_buf_init_arena(&c->text, 0, r->http->arena);
        mm_buf_init_arena(&c->content, 0, r->http->arena);
        mm_buf_init_arena(&c->reasoning, 0, r->http->arena);
        mm_buf_init(&c->lp, 0);
        mm_buf_init(&c->lp_tokens, 0);
        mm_buf_init(&c->lp_values, 0);
        mm_buf_init(&c->lp_tops, 0);
        mm_buf_init(&c->lp_offsets, 0);
        if (r->kind == GW_API_CHAT && vt->parser_create) {
            struct mmgw_error perr;
            mm_err_clear(&perr.e);
            int32_t rc =
                vt->parser_create(r->model->inst, r->norm, r->norm_len, r->prompt.data ? r->prompt.data : "",
                                  r->prompt.len, &c->parser, &perr);
            if (rc != MMGW_OK) {
                perr.e.code = rc;
                return gw_api_fail_mm(e, &perr.e, NULL);
            }
        }
    }
    return 0;
}

/* Released text of a choice: through the parser (chat with a parser), else straight to the text. */
static int deliver(struct gw_api_req *r, struct gw_api_choice *c, const char *text, size_t len)
{
    if (len == 0) return 0;
    if (r->kind != GW_API_CHAT) return mm_buf_append(&c->text, text, len);
    if (!c->parser) return mm_buf_append(&c->content, text, len);
    struct mmgw_out_sink sink = {.ctx = c, .emit = out_emit};
    struct mmgw_error perr;
    return r->model->vt->parser_feed(c->parser, text, len, &sink, &perr) == MMGW_OK ? 0 : -1;
}

/* End of a choice's text: drain the detokenizer, the stop matcher and the parser. */
static int close_text(struct gw_api_req *r, struct gw_api_choice *c, bool *stopped)
{
    struct mm_buf tail, rel;
    char tail_st[256], rel_st[256]; /* the usual tail fits: no malloc */
    mm_buf_init_with(&tail, 0, tail_st, sizeof tail_st);
    mm_buf_init_with(&rel, 0, rel_st, sizeof rel_st);
    int rc = gw_tok_stream_finish(&c->dec, &tail, NULL) == MM_OK ? 0 : -1;
    if (!rc && tail.len) {
        int m = gw_api_stop_feed(&c->stop, tail.data, tail.len, &rel);
        if (m < 0) rc = -1;
        if (m == 1) *stopped = true;
    }
    if (!rc && gw_api_stop_flush(&c->stop, &rel)) rc = -1;
    if (!rc) rc = deliver(r, c, rel.data, rel.len);
    mm_buf_free(&tail);
    mm_buf_free(&rel);
    if (!rc && c->parser) {
        struct mmgw_out_sink sink = {.ctx = c, .emit = out_emit};
        struct mmgw_error perr;
        if (r->model->vt->parser_finish(c->parser, &sink, &perr) != MMGW_OK) rc = -1;
    }
    return rc;
}

int gw_api_choice_finish(struct gw_api_req *r, struct gw_api_choice *c, const char *reason)
{
    if (c->finished) return 0;
    bool stopped = false;
    int rc = close_text(r, c, &stopped);
    if (stopped) reason = "stop";
    if (r->kind == GW_API_CHAT && c->n_calls_total > 0 && strcmp(reason, "stop") == 0) reason = "tool_calls";
    c->finished = true;
    c->finish_reason = reason;
    r->n_finished++;
    return rc;
}

static bool is_hidden(const struct gw_api_req *r, uint32_t id)
{
    for (size_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == id) return true;
    return false;
}

static bool is_request_stop(const struct gw_api_req *r, uint32_t id)
{
    for (size_t i = 0; i < r->p.n_stop_ids; i++)
        if (r->p.stop_ids[i] == id) return true;
    return false;
}

/* ---- logprobs ---- */

static int token_str(struct gw_api_req *r, struct mm_buf *b, uint32_t id)
{
    if (r->p.tokens_as_ids) return mm_buf_printf(b, "\"token_id:%u\"", id) < 0 ? -1 : 0;
    size_t len = 0;
    const uint8_t *t = gw_tokenizer_token_bytes(r->model->tok, id, &len);
    return gw_json_str(b, t ? (const char *)t : "", t ? len : 0);
}

static int token_bytes(struct gw_api_req *r, struct mm_buf *b, uint32_t id)
{
    size_t len = 0;
    const uint8_t *t = gw_tokenizer_token_bytes(r->model->tok, id, &len);
    if (mm_buf_append(b, "[", 1)) return -1;
    for (size_t i = 0; t && i < len; i++)
        if (mm_buf_printf(b, i ? ",%u" : "%u", t[i]) < 0) return -1;
    return mm_buf_append(b, "]", 1);
}

static int chat_logprob(struct gw_api_req *r, struct gw_api_choice *c, uint32_t id, float lp,
                        const Mmgw__Worker__V1__TopLogprobs *top)
{
    struct mm_buf *b = &c->lp;
    if ((b->len && mm_buf_append(b, ",", 1)) || mm_buf_append_str(b, "{\"token\":") || token_str(r, b, id) ||
        mm_buf_append_str(b, ",\"logprob\":") || gw_json_num(b, lp) || mm_buf_append_str(b, ",\"bytes\":") ||
        token_bytes(r, b, id) || mm_buf_append_str(b, ",\"top_logprobs\":["))
        return -1;
    size_t k = top ? top->n_token_ids : 0;
    if (top && top->n_logprobs < k) k = top->n_logprobs;
    if (k > (size_t)r->p.top_logprobs) k = (size_t)r->p.top_logprobs;
    for (size_t i = 0; i < k; i++)
        if ((i && mm_buf_append(b, ",", 1)) || mm_buf_append_str(b, "{\"token\":") ||
            token_str(r, b, top->token_ids[i]) || mm_buf_append_str(b, ",\"logprob\":") ||
            gw_json_num(b, top->logprobs[i]) || mm_buf_append_str(b, ",\"bytes\":") ||
            token_bytes(r, b, top->token_ids[i]) || mm_buf_append(b, "}", 1))
            return -1;
    c->n_lp++;
    return mm_buf_append_str(b, "]}");
}

/* OpenAI's text_offset of the next token: the characters of the choice's text that start before the token's
 * first byte. That is what the detokenizer has released, plus the character its held-back bytes (an
 * incomplete UTF-8 sequence) will become, completed or as one U+FFFD. Unlike vLLM's running sum of token
 * string lengths, it stays right after a token that ends inside a character, so text[text_offset[i]:] is
 * where token i's text is. */
static size_t text_offset(const struct gw_api_choice *c)
{
    return c->text_offset + (gw_tok_stream_pending(&c->dec) ? 1 : 0);
}

static int legacy_logprob(struct gw_api_req *r, struct gw_api_choice *c, uint32_t id, float lp,
                          const Mmgw__Worker__V1__TopLogprobs *top)
{
    const char *sep = c->n_lp ? "," : "";
    if (mm_buf_append_str(&c->lp_tokens, sep) || token_str(r, &c->lp_tokens, id) ||
        mm_buf_append_str(&c->lp_values, sep) || gw_json_num(&c->lp_values, lp) ||
        mm_buf_printf(&c->lp_offsets, "%s%zu", sep, text_offset(c)) < 0 ||
        mm_buf_append_str(&c->lp_tops, sep) || mm_buf_append(&c->lp_tops, "{", 1))
        return -1;
    size_t k = top ? top->n_token_ids : 0;
    if (top && top->n_logprobs < k) k = top->n_logprobs;
    if (k > (size_t)r->p.top_logprobs) k = (size_t)r->p.top_logprobs;
    for (size_t i = 0; i < k; i++)
        if ((i && mm_buf_append(&c->lp_tops, ",", 1)) || token_str(r, &c->lp_tops, top->token_ids[i]) ||
            mm_buf_append(&c->lp_tops, ":", 1) || gw_json_num(&c->lp_tops, top->logprobs[i]))
            return -1;
    c->n_lp++;
    return mm_buf_append(&c->lp_tops, "}", 1);
}

/* ---- tokens ---- */

int gw_api_choice_token(struct gw_api_req *r, struct gw_api_choice *c, uint32_t id, const float *lp,
                        const Mmgw__Worker__V1__TopLogprobs *top)
{
    if (c->finished || c->worker_abort) return 0;
    /* a token past max_model_len (len_cap) is never shown: reachable only when a worker goes on after a
     * stop token at the bound that it stops on (below), which it should not */
    if (r->len_cap && c->n_tokens >= r->len_cap) return gw_api_choice_finish(r, c, "length");
    c->n_tokens++;
    if (is_hidden(r, id)) {
        /* a stop token: its text is never shown. One the worker stops on (every hidden id, or with
         * ignore_eos only the request's stop_token_ids) ends the choice with the worker's Complete ("stop",
         * also at the bound). Past the others (eos under ignore_eos) the worker goes on, so the bound
         * applies here as to a shown token */
        if (r->p.ignore_eos && !is_request_stop(r, id) && r->len_cap && c->n_tokens >= r->len_cap)
            return gw_api_choice_finish(r, c, "length");
        return 0;
    }
    if (r->p.logprobs && lp) {
        int rc =
            r->kind == GW_API_CHAT ? chat_logprob(r, c, id, *lp, top) : legacy_logprob(r, c, id, *lp, top);
        if (rc) return -1;
    }
    struct mm_buf piece, rel;
    char piece_st[128], rel_st[256]; /* one token's text: no malloc per token */
    mm_buf_init_with(&piece, 0, piece_st, sizeof piece_st);
    mm_buf_init_with(&rel, 0, rel_st, sizeof rel_st);
    int rc = gw_tok_stream_push(&c->dec, id, &piece, NULL) == MM_OK ? 0 : -1;
    c->text_offset += gw_json_str_chars(piece.data, piece.len);
    int m = 0;
    if (!rc && piece.len) {
        m = gw_api_stop_feed(&c->stop, piece.data, piece.len, &rel);
        if (m < 0) rc = -1;
    }
    if (!rc) rc = deliver(r, c, rel.data, rel.len);
    mm_buf_free(&piece);
    mm_buf_free(&rel);
    if (!rc && m == 1) rc = gw_api_choice_finish(r, c, "stop");
    if (!rc && r->len_cap && c->n_tokens >= r->len_cap) rc = gw_api_choice_finish(r, c, "length");
    return rc;
}

/* ---- JSON ---- */

int gw_api_write_prefix(struct gw_api_req *r)
{
    struct mm_buf *b = &r->prefix;
    mm_buf_reset(b);
    const char *object = r->kind == GW_API_CHAT ? (r->p.stream ? "chat.completion.chunk" : "chat.completion")
                                                : "text_completion";
    if (mm_buf_append_str(b, "{\"id\":\"") || mm_buf_append_str(b, r->id) ||
        mm_buf_append_str(b, "\",\"object\":\"") || mm_buf_append_str(b, object) ||
        mm_buf_append_str(b, "\",\"created\":") || gw_json_uint(b, (unsigned long long)r->created) ||
        mm_buf_append_str(b, ",\"model\":") || gw_json_str(b, r->model->name, strlen(r->model->name)) ||
        mm_buf_append_str(b, ",\"choices\":["))
        return -1;
    return 0;
}

static int write_tool_calls(struct mm_buf *b, const struct gw_api_choice *c, bool stream)
{
    if (mm_buf_append_str(b, "\"tool_calls\":[")) return -1;
    for (size_t i = 0; i < c->n_calls; i++) {
        const struct gw_api_toolcall *t = &c->calls[i];
        if (i && mm_buf_append(b, ",", 1)) return -1;
        if (mm_buf_append(b, "{", 1)) return -1;
        if (stream && mm_buf_printf(b, "\"index\":%d,", (int)t->index) < 0) return -1;
        if (t->name && (mm_buf_printf(b, "\"id\":\"%s\",\"type\":\"function\",", t->id) < 0)) return -1;
        if (mm_buf_append_str(b, "\"function\":{")) return -1;
        if (t->name && (mm_buf_append_str(b, "\"name\":") || gw_json_str(b, t->name, strlen(t->name)) ||
                        mm_buf_append(b, ",", 1)))
            return -1;
        if (mm_buf_append_str(b, "\"arguments\":") ||
            gw_json_str(b, t->args.data ? t->args.data : "", t->args.len) || mm_buf_append_str(b, "}}"))
            return -1;
    }
    return mm_buf_append(b, "]", 1);
}

static void clear_delta(struct gw_api_choice *c)
{
    mm_buf_reset(&c->text);
    mm_buf_reset(&c->content);
    mm_buf_reset(&c->reasoning);
    for (size_t i = 0; i < c->n_calls; i++) {
        free(c->calls[i].name);
        mm_buf_free(&c->calls[i].args);
    }
    c->n_calls = 0;
    mm_buf_reset(&c->lp);
    mm_buf_reset(&c->lp_tokens);
    mm_buf_reset(&c->lp_values);
    mm_buf_reset(&c->lp_tops);
    mm_buf_reset(&c->lp_offsets);
    c->n_lp = 0;
}

static int write_logprobs(struct gw_api_req *r, struct mm_buf *b, const struct gw_api_choice *c)
{
    if (!r->p.logprobs) return mm_buf_append_str(b, "null");
    if (r->kind == GW_API_CHAT)
        return mm_buf_printf(b, "{\"content\":[%s]}", c->lp.data ? c->lp.data : "") < 0 ? -1 : 0;
    return mm_buf_printf(
               b, "{\"tokens\":[%s],\"token_logprobs\":[%s],\"top_logprobs\":[%s],\"text_offset\":[%s]}",
               c->lp_tokens.data ? c->lp_tokens.data : "", c->lp_values.data ? c->lp_values.data : "",
               c->lp_tops.data ? c->lp_tops.data : "", c->lp_offsets.data ? c->lp_offsets.data : "") < 0
               ? -1
               : 0;
}

static int write_finish(struct mm_buf *b, const struct gw_api_choice *c, bool now)
{
    if (!now) return mm_buf_append_str(b, ",\"finish_reason\":null");
    return mm_buf_append_str(b, ",\"finish_reason\":\"") || mm_buf_append_str(b, c->finish_reason) ||
                   mm_buf_append(b, "\"", 1)
               ? -1
               : 0;
}

/* {"index":N, */
static int write_index(struct mm_buf *b, uint32_t index)
{
    return mm_buf_append_str(b, "{\"index\":") || gw_json_uint(b, index) || mm_buf_append(b, ",", 1) ? -1 : 0;
}

int gw_api_chunk_write(struct gw_api_req *r, struct gw_api_choice *c, struct mm_buf *out)
{
    bool finish_now = c->finished && !c->finish_sent;
    bool have = c->text.len || c->content.len || c->reasoning.len || c->n_calls || c->n_lp || !c->role_sent;
    if (!have && !finish_now) return 0;
    struct mm_buf *b = out;
    if (mm_buf_append_str(b, "data: ") || mm_buf_append(b, r->prefix.data, r->prefix.len) ||
        write_index(b, c->index))
        return -1;
    if (r->kind == GW_API_CHAT) {
        if (mm_buf_append_str(b, "\"delta\":{")) return -1;
        bool comma = false;
        if (!c->role_sent) {
            if (mm_buf_append_str(b, "\"role\":\"assistant\"")) return -1;
            comma = true;
        }
        if (c->content.len || (!c->role_sent && !c->reasoning.len && !c->n_calls)) {
            if ((comma && mm_buf_append(b, ",", 1)) || mm_buf_append_str(b, "\"content\":") ||
                gw_json_str(b, c->content.data ? c->content.data : "", c->content.len))
                return -1;
            comma = true;
        }
        if (c->reasoning.len) {
            if ((comma && mm_buf_append(b, ",", 1)) || mm_buf_append_str(b, "\"reasoning_content\":") ||
                gw_json_str(b, c->reasoning.data, c->reasoning.len))
                return -1;
            comma = true;
        }
        if (c->n_calls && ((comma && mm_buf_append(b, ",", 1)) || write_tool_calls(b, c, true))) return -1;
        if (mm_buf_append_str(b, "},\"logprobs\":")) return -1;
    } else {
        if (mm_buf_append_str(b, "\"text\":") ||
            gw_json_str(b, c->text.data ? c->text.data : "", c->text.len) ||
            mm_buf_append_str(b, ",\"logprobs\":"))
            return -1;
    }
    if ((c->n_lp ? write_logprobs(r, b, c) : mm_buf_append_str(b, "null")) ||
        write_finish(b, c, finish_now) || mm_buf_append_str(b, "}]") ||
        (r->p.include_usage && mm_buf_append_str(b, ",\"usage\":null")) || mm_buf_append_str(b, "}\n\n"))
        return -1;
    c->role_sent = true;
    if (finish_now) c->finish_sent = true;
    clear_delta(c);
    return 0;
}

static uint32_t completion_tokens(const struct gw_api_req *r)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->n_choices; i++) n += r->choices[i].n_tokens;
    return n;
}

static int write_usage(struct gw_api_req *r, struct mm_buf *b)
{
    uint32_t ct = completion_tokens(r);
    return mm_buf_append_str(b, "\"usage\":{\"prompt_tokens\":") || gw_json_uint(b, r->prompt_tokens) ||
                   mm_buf_append_str(b, ",\"completion_tokens\":") || gw_json_uint(b, ct) ||
                   mm_buf_append_str(b, ",\"total_tokens\":") ||
                   gw_json_uint(b, (unsigned long long)r->prompt_tokens + ct) ||
                   mm_buf_append_str(b, ",\"prompt_tokens_details\":{\"cached_tokens\":") ||
                   gw_json_uint(b, r->cached_tokens) || mm_buf_append_str(b, "}}")
               ? -1
               : 0;
}

int gw_api_usage_chunk(struct gw_api_req *r, struct mm_buf *out)
{
    if (mm_buf_append_str(out, "data: ") || mm_buf_append(out, r->prefix.data, r->prefix.len) ||
        mm_buf_append_str(out, "],") || write_usage(r, out) || mm_buf_append_str(out, "}\n\n"))
        return -1;
    return 0;
}

int gw_api_full_response(struct gw_api_req *r, struct mm_buf *b)
{
    if (mm_buf_append(b, r->prefix.data, r->prefix.len)) return -1;
    for (uint32_t i = 0; i < r->n_choices; i++) {
        struct gw_api_choice *c = &r->choices[i];
        if ((i && mm_buf_append(b, ",", 1)) || write_index(b, c->index)) return -1;
        if (r->kind == GW_API_CHAT) {
            if (mm_buf_append_str(b, "\"message\":{\"role\":\"assistant\",\"content\":")) return -1;
            int rc = c->content.len || !c->n_calls
                         ? gw_json_str(b, c->content.data ? c->content.data : "", c->content.len)
                         : mm_buf_append_str(b, "null");
            if (rc) return -1;
            if (c->reasoning.len && (mm_buf_append_str(b, ",\"reasoning_content\":") ||
                                     gw_json_str(b, c->reasoning.data, c->reasoning.len)))
                return -1;
            if (c->n_calls && (mm_buf_append(b, ",", 1) || write_tool_calls(b, c, false))) return -1;
            if (mm_buf_append_str(b, "},\"logprobs\":")) return -1;
        } else {
            if (mm_buf_append_str(b, "\"text\":") ||
                gw_json_str(b, c->text.data ? c->text.data : "", c->text.len) ||
                mm_buf_append_str(b, ",\"logprobs\":"))
                return -1;
        }
        if (write_logprobs(r, b, c) || write_finish(b, c, true) || mm_buf_append(b, "}", 1)) return -1;
    }
    return mm_buf_append_str(b, "],") || write_usage(r, b) || mm_buf_append(b, "}", 1) ? -1 : 0;
}
