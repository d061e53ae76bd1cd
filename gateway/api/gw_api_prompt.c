/* Prompt ids: the rendered text is tokenized around its media markers, and each marker is replaced by
 * the plugin's expand_media segments (text such as a video timestamp, and runs of special tokens; the
 * placeholder runs become the protocol's PlaceholderRanges).
 *
 * Exactness: HF processors expand markers in the text and tokenize the whole string. Added tokens split
 * that string before anything else, so tokenizing the text between two special tokens on its own gives
 * the same ids; that is what we do, merging each expansion's text segments with the text around them
 * (a timestamp after user text tokenizes as HF would). The plugin's special tokens are single ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_api_internal.h"
#include "gw_api_tokcache.h"

struct range {
    size_t item;
    uint32_t offset, length;
};

struct builder {
    struct gw_api_req *r;
    struct mm_buf text; /* text waiting to be tokenized */
    struct range *ranges;
    size_t n_ranges, cap_ranges;
    size_t item; /* the media item being expanded */
    uint32_t tok_flags;
    struct gw_api_error *e;
    int failed;
};

/* Tokenize t[0..n) onto the prompt ids. */
static int encode_text(struct builder *b, const char *t, size_t n)
{
    if (n == 0) return 0;
    struct mm_err err;
    mm_err_clear(&err);
    const struct gw_api_model *m = b->r->model;
    /* without the post-processor a text's ids are its pieces' ids: the cache serves the repeated ones */
    int32_t rc = b->tok_flags == 0 ? gw_api_tokcache_encode(m->tokcache, m->tok, t, n, &b->r->ids, &err)
                                   : gw_tokenizer_encode(m->tok, t, n, b->tok_flags, &b->r->ids, &err);
    if (rc != MM_OK) return gw_api_fail_mm(b->e, &err, NULL);
    return 0;
}

static int flush_text(struct builder *b)
{
    int rc = encode_text(b, b->text.data, b->text.len);
    mm_buf_reset(&b->text);
    return rc;
}

/* The text t[0..n) and then the end of the prompt: tokenized where it lies when no text is pending (a
 * prompt without media is not copied). */
static int flush_with(struct builder *b, const char *t, size_t n)
{
    if (b->text.len == 0) return encode_text(b, t, n);
    if (mm_buf_append(&b->text, t, n)) return gw_api_fail(b->e, 503, NULL, "out of memory");
    return flush_text(b);
}

static int32_t seg_emit(void *ctx, const struct mmgw_prompt_seg *seg)
{
    struct builder *b = ctx;
    if (seg->kind == MMGW_SEG_TEXT) {
        if (mm_buf_append(&b->text, seg->text, seg->text_len)) goto nomem;
        return MMGW_OK;
    }
    if (flush_text(b)) {
        b->failed = 1;
        return MMGW_E_INVALID;
    }
    uint32_t id;
    if (gw_tokenizer_token_to_id(b->r->model->tok, seg->text, seg->text_len, &id) != MM_OK) {
        gw_api_fail(b->e, 500, NULL, "model %s: the plugin's token \"%.*s\" is not in the tokenizer",
                    b->r->model->name, (int)seg->text_len, seg->text);
        b->failed = 1;
        return MMGW_E_INVALID;
    }
    struct gw_tok_ids *ids = &b->r->ids;
    if (seg->placeholder) {
        if (b->n_ranges == b->cap_ranges) {
            size_t cap = b->cap_ranges ? b->cap_ranges * 2 : 16;
            struct range *nr = realloc(b->ranges, cap * sizeof *nr);
            if (!nr) goto nomem;
            b->ranges = nr;
            b->cap_ranges = cap;
        }
        b->ranges[b->n_ranges++] = (struct range){b->item, (uint32_t)ids->n, seg->count};
    }
    if (ids->n + seg->count > ids->cap) {
        size_t cap = ids->cap ? ids->cap : 256;
        while (cap < ids->n + seg->count) cap *= 2;
        uint32_t *nv = realloc(ids->ids, cap * sizeof *nv);
        if (!nv) goto nomem;
        ids->ids = nv;
        ids->cap = cap;
    }
    for (uint32_t i = 0; i < seg->count; i++) ids->ids[ids->n++] = id;
    return MMGW_OK;
nomem:
    gw_api_fail(b->e, 503, NULL, "out of memory");
    b->failed = 1;
    return MMGW_E_NOMEM;
}

static int expand(struct builder *b, size_t item)
{
    struct gw_api_media *m = &b->r->media[item];
    struct mmgw_media_info info;
    gw_media_result_info(&m->res, &info);
    b->item = item;
    struct mmgw_seg_sink sink = {.ctx = b, .emit = seg_emit};
    struct mmgw_error perr;
    mm_err_clear(&perr.e);
    int32_t rc = b->r->model->vt->expand_media(b->r->model->inst, &info, &sink, &perr);
    if (rc != MMGW_OK && !b->failed) {
        perr.e.code = rc;
        return gw_api_fail_mm(b->e, &perr.e, m->param);
    }
    return b->failed ? -1 : 0;
}

/* The next media marker at or after `from` in t[0..n): its offset and kind, or -1. */
static long next_marker(const struct gw_api_model *m, const char *t, size_t n, size_t from, int32_t *kind)
{
    long best = -1;
    for (int32_t k = 0; k < 2; k++) {
        if (!m->marker[k]) continue;
        const char *p = memmem(t + from, n - from, m->marker[k], m->marker_len[k]);
        if (p && (best < 0 || p - t < best)) {
            best = p - t;
            *kind = k;
        }
    }
    return best;
}

/* Chat: the markers must be exactly the rendered media, in media_order; completions: the i-th marker of
 * a kind is the i-th item of that kind. */
static int text_prompt(struct builder *b)
{
    struct gw_api_req *r = b->r;
    const struct gw_api_model *m = r->model;
    const char *t = r->prompt.data ? r->prompt.data : "";
    size_t n = r->prompt.len, pos = 0, seen = 0, seen_kind[2] = {0, 0};
    int32_t kind = 0;
    for (long at; (at = next_marker(m, t, n, pos, &kind)) >= 0;) {
        size_t item;
        if (r->chat_prompt) {
            if (seen >= r->n_order || r->media[r->media_order[seen]].kind != kind)
                return gw_api_fail(
                    b->e, 400, "messages",
                    "the message text contains the %s marker \"%s\", which is reserved for media parts",
                    kind ? "video" : "image", m->marker[kind]);
            item = r->media_order[seen];
        } else {
            size_t i = 0, c = 0;
            for (; i < r->n_media; i++)
                if (r->media[i].kind == kind && c++ == seen_kind[kind]) break;
            if (i == r->n_media)
                return gw_api_fail(b->e, 400, "prompt",
                                   "the prompt has more %s markers (\"%s\") than multi_modal_data has %ss",
                                   kind ? "video" : "image", m->marker[kind], kind ? "video" : "image");
            item = i;
            r->media[i].rendered = true;
        }
        seen++;
        seen_kind[kind]++;
        if (mm_buf_append(&b->text, t + pos, (size_t)at - pos))
            return gw_api_fail(b->e, 503, NULL, "out of memory");
        if (expand(b, item)) return -1;
        pos = (size_t)at + m->marker_len[kind];
    }
    if (r->chat_prompt && seen != r->n_order)
        return gw_api_fail(b->e, 500, "messages",
                           "the template rendered %u media parts but the prompt holds %zu markers",
                           r->n_order, seen);
    if (!r->chat_prompt && seen != r->n_media)
        return gw_api_fail(b->e, 400, "multi_modal_data",
                           "multi_modal_data has %zu items but the prompt has %zu markers", r->n_media, seen);
    /* the tokenizer's post-processor (BOS...) only makes sense on a prompt in one piece */
    if (!r->chat_prompt && r->p.add_special_tokens && b->n_ranges == 0 && r->ids.n == 0)
        b->tok_flags = GW_TOK_ADD_SPECIAL;
    return flush_with(b, t + pos, n - pos);
}

static int ids_prompt(struct builder *b)
{
    struct gw_api_req *r = b->r;
    const struct gw_api_model *m = r->model;
    uint32_t marker_id[2] = {UINT32_MAX, UINT32_MAX};
    for (int k = 0; k < 2; k++)
        if (m->marker[k]) gw_tokenizer_token_to_id(m->tok, m->marker[k], m->marker_len[k], &marker_id[k]);
    size_t seen_kind[2] = {0, 0}, seen = 0;
    for (size_t i = 0; i < r->n_prompt_ids; i++) {
        uint32_t id = r->prompt_ids[i];
        int kind = r->n_media == 0 ? -1 : id == marker_id[0] ? 0 : id == marker_id[1] ? 1 : -1;
        if (kind < 0) {
            if (gw_tok_ids_append(&r->ids, &id, 1)) return gw_api_fail(b->e, 503, NULL, "out of memory");
            continue;
        }
        size_t k = 0, c = 0;
        for (; k < r->n_media; k++)
            if (r->media[k].kind == kind && c++ == seen_kind[kind]) break;
        if (k == r->n_media)
            return gw_api_fail(b->e, 400, "prompt",
                               "the prompt has more %s marker ids (%u) than multi_modal_data has %ss",
                               kind ? "video" : "image", id, kind ? "video" : "image");
        seen_kind[kind]++;
        seen++;
        if (expand(b, k) || flush_text(b)) return -1;
    }
    if (seen != r->n_media)
        return gw_api_fail(b->e, 400, "multi_modal_data",
                           "multi_modal_data has %zu items but the prompt has %zu markers", r->n_media, seen);
    return 0;
}

/* Copy the placeholder runs into the request's protocol items. */
static int attach_ranges(struct builder *b)
{
    struct gw_api_req *r = b->r;
    if (b->n_ranges == 0) return 0;
    r->ranges = calloc(b->n_ranges, sizeof *r->ranges);
    r->range_ptrs = calloc(b->n_ranges, sizeof *r->range_ptrs);
    if (!r->ranges || !r->range_ptrs) return gw_api_fail(b->e, 503, NULL, "out of memory");
    /* runs are grouped per item in expansion order, which is also the order of r->media */
    size_t o = 0;
    for (size_t item = 0; item < r->n_media; item++) {
        r->media[item].range_first = o;
        for (size_t i = 0; i < b->n_ranges; i++) {
            if (b->ranges[i].item != item) continue;
            mmgw__worker__v1__placeholder_range__init(&r->ranges[o]);
            r->ranges[o].offset = b->ranges[i].offset;
            r->ranges[o].length = b->ranges[i].length;
            r->range_ptrs[o] = &r->ranges[o];
            o++;
        }
        r->media[item].n_ranges = o - r->media[item].range_first;
    }
    return 0;
}

int gw_api_prompt_build(struct gw_api_req *r, struct gw_api_error *e)
{
    int64_t t0 = mm_now_ns();
    struct builder b = {.r = r, .e = e};
    mm_buf_init_arena(&b.text, 0, r->http->arena);
    r->ids.n = 0;
    /* room for the usual ids at once (text runs ~2-4 bytes per token), not a realloc per doubling */
    size_t room = r->prompt.len / 2 + 64;
    if (r->ids.cap < room) {
        uint32_t *v = realloc(r->ids.ids, room * sizeof *v);
        if (v) {
            r->ids.ids = v;
            r->ids.cap = room;
        }
    }
    const char *bos =
        r->chat_prompt && r->model->vt->bos_token ? r->model->vt->bos_token(r->model->inst) : NULL;
    if (bos && !(r->prompt.len >= strlen(bos) && memcmp(r->prompt.data, bos, strlen(bos)) == 0)) {
        uint32_t id;
        if (gw_tokenizer_token_to_id(r->model->tok, bos, strlen(bos), &id) == MM_OK)
            gw_tok_ids_append(&r->ids, &id, 1);
    }
    int rc;
    if (r->tokenize_plain) {
        b.tok_flags = r->p.add_special_tokens ? GW_TOK_ADD_SPECIAL : 0;
        rc = flush_with(&b, r->prompt.data ? r->prompt.data : "", r->prompt.len);
    } else {
        rc = r->prompt_ids ? ids_prompt(&b) : text_prompt(&b);
    }
    if (rc == 0) rc = attach_ranges(&b);
    mm_buf_free(&b.text);
    free(b.ranges);
    if (rc) return -1;
    r->tokenize_ns += (uint64_t)(mm_now_ns() - t0);
    gw_series_observe(r->st->m.stage[3], (double)r->tokenize_ns / 1e9);
    if (r->kind == GW_API_TOKENIZE) return 0;
    if (r->ids.n == 0)
        return gw_api_fail(e, 400, r->chat_prompt ? "messages" : "prompt", "the prompt is empty");
    uint64_t mml = gw_api_max_model_len(r->model);
    if (mml) {
        uint64_t want = r->ids.n + (r->p.max_tokens > 0 ? (uint64_t)r->p.max_tokens : 1);
        if (r->ids.n >= mml || want > mml) {
            const char *param = r->chat_prompt ? "messages" : "prompt";
            if (r->p.max_tokens > 0)
                return gw_api_fail(
                    e, 400, param,
                    "This model's maximum context length is %llu tokens. However, you requested %llu tokens "
                    "(%zu in the prompt, %lld for the completion). Please reduce the length of the prompt "
                    "or of the completion.",
                    (unsigned long long)mml, (unsigned long long)want, r->ids.n, (long long)r->p.max_tokens);
            return gw_api_fail(
                e, 400, param,
                "This model's maximum context length is %llu tokens. However, the prompt has %zu tokens. "
                "Please reduce the length of the prompt.",
                (unsigned long long)mml, r->ids.n);
        }
        /* without max_tokens a choice may run to the end of the context: the worker only knows its own
         * context, which a configured max_model_len may undercut, so the gateway ends the choice there */
        if (r->p.max_tokens <= 0) r->len_cap = mml - r->ids.n;
    }
    return 0;
}
