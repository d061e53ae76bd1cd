/* Encoding pipeline (HF TokenizerImpl::encode_single_sequence): split out the non-normalized added
 * tokens on the raw text, normalize each remaining piece on its own, split out the normalized added
 * tokens, pre-tokenize and BPE what is left, then wrap with the post-processor's special tokens.
 * Also the small vocabulary accessors of the public API. */
#include <stdlib.h>
#include <string.h>

#include "gw_tok_internal.h"
#include "gw_tok_utf8.h"

void gw_tok_ids_init(struct gw_tok_ids *v)
{
    v->ids = NULL;
    v->n = v->cap = 0;
}

void gw_tok_ids_free(struct gw_tok_ids *v)
{
    free(v->ids);
    gw_tok_ids_init(v);
}

int gw_tok_ids_reserve(struct gw_tok_ids *v, size_t extra)
{
    if (extra > SIZE_MAX / sizeof(uint32_t) - v->n) return -1;
    size_t need = v->n + extra;
    if (need <= v->cap) return 0;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 8 ? need : cap * 2;
    uint32_t *n = realloc(v->ids, cap * sizeof *n);
    if (!n) return -1;
    v->ids = n;
    v->cap = cap;
    return 0;
}

int gw_tok_ids_append(struct gw_tok_ids *v, const uint32_t *ids, size_t n)
{
    if (!n) return 0;
    if (!ids || gw_tok_ids_reserve(v, n)) return -1;
    memcpy(v->ids + v->n, ids, n * sizeof *ids);
    v->n += n;
    return 0;
}

struct enc_ctx {
    const struct gw_tokenizer *tok;
    struct gw_tok_tls *tls;
    struct gw_tok_ids *out;
    struct mm_err *err;
};

static int32_t push_id(struct enc_ctx *c, uint32_t id)
{
    return gw_tok_ids_push(c->out, id) ? mm_err_set(c->err, MM_NOMEM, "encode: out of memory") : MM_OK;
}

/* A piece of normalized text: an added token matched on normalized text, or text to pre-tokenize. */
static int32_t on_normalized_piece(void *ctx, uint32_t id, const uint8_t *s, size_t start, size_t end)
{
    struct enc_ctx *c = ctx;
    if (id != GW_TOK_NONE) return push_id(c, id);
    return gw_tok_pretokenize(c->tok, c->tls, s + start, end - start, c->out, c->err);
}

/* A piece of the raw text: a non-normalized added token, or text to normalize on its own. */
static int32_t on_raw_piece(void *ctx, uint32_t id, const uint8_t *s, size_t start, size_t end)
{
    struct enc_ctx *c = ctx;
    if (id != GW_TOK_NONE) return push_id(c, id);
    uint8_t *norm = NULL;
    size_t nl = end - start;
    int32_t rc = gw_tok_normalize(c->tok, s + start, end - start, &norm, &nl, c->err);
    if (rc) return rc;
    rc = gw_tok_added_split(c->tok, &c->tok->trie_norm, norm ? norm : s + start, nl, on_normalized_piece, c);
    free(norm);
    return rc;
}

int32_t gw_tokenizer_encode(const struct gw_tokenizer *tok, const char *text, size_t len, uint32_t flags,
                            struct gw_tok_ids *out, struct mm_err *err)
{
    if (!tok || !out || (!text && len)) return mm_err_set(err, MM_INVALID, "encode: NULL argument");
    const uint8_t *s = (const uint8_t *)text;
    size_t valid = gw_tok_utf8_valid_prefix(s, len);
    if (valid != len)
        return mm_err_set(err, MM_INVALID, "encode: input is not valid UTF-8 at byte %zu", valid);
    struct gw_tok_tls *tls = gw_tok_tls_get(tok);
    if (!tls) return mm_err_set(err, MM_NOMEM, "encode: out of memory (thread scratch)");
    struct enc_ctx c = {tok, tls, out, err};
    size_t n0 = out->n;
    int add = (flags & GW_TOK_ADD_SPECIAL) != 0;
    int32_t rc = MM_OK;
    for (uint32_t i = 0; add && i < tok->n_prefix && !rc; i++) rc = push_id(&c, tok->prefix_ids[i]);
    if (!rc && len) rc = gw_tok_added_split(tok, &tok->trie_raw, s, len, on_raw_piece, &c);
    for (uint32_t i = 0; add && i < tok->n_suffix && !rc; i++) rc = push_id(&c, tok->suffix_ids[i]);
    if (rc) out->n = n0; /* all or nothing */
    gw_tok_tls_trim(tls);
    return rc;
}

/* ---- vocabulary accessors ---- */

uint32_t gw_tokenizer_vocab_size(const struct gw_tokenizer *tok)
{
    return tok ? tok->n_ids : 0;
}

int32_t gw_tokenizer_token_to_id(const struct gw_tokenizer *tok, const char *text, size_t len, uint32_t *id)
{
    if (!tok || !id || (!text && len)) return MM_INVALID;
    if (!text) text = "";
    uint32_t v = gw_tok_strmap_get(&tok->added_map, text, len);
    if (v == GW_TOK_NONE) v = gw_tok_strmap_get(&tok->model_vocab, text, len);
    if (v == GW_TOK_NONE) return MM_NOT_FOUND;
    *id = v;
    return MM_OK;
}

const char *gw_tokenizer_id_to_token(const struct gw_tokenizer *tok, uint32_t id, size_t *len)
{
    if (!tok || id >= tok->n_ids || !(tok->ids[id].flags & GW_TOK_ID_PRESENT)) return NULL;
    if (len) *len = tok->ids[id].str_len;
    return tok->strs + tok->ids[id].str_off;
}

const uint8_t *gw_tokenizer_token_bytes(const struct gw_tokenizer *tok, uint32_t id, size_t *len)
{
    if (!tok || id >= tok->n_ids || !(tok->ids[id].flags & GW_TOK_ID_PRESENT)) return NULL;
    if (len) *len = tok->ids[id].byte_len;
    return tok->bytes + tok->ids[id].byte_off;
}

int gw_tokenizer_is_special(const struct gw_tokenizer *tok, uint32_t id)
{
    return tok && id < tok->n_ids && (tok->ids[id].flags & GW_TOK_ID_SPECIAL) != 0;
}

uint32_t gw_tokenizer_added_count(const struct gw_tokenizer *tok)
{
    return tok ? tok->n_added : 0;
}

int32_t gw_tokenizer_added_get(const struct gw_tokenizer *tok, uint32_t i, struct gw_tok_added_info *info)
{
    if (!tok || !info || i >= tok->n_added) return MM_NOT_FOUND;
    const struct gw_tok_added *a = &tok->added[i];
    info->id = a->id;
    info->content = a->content;
    info->content_len = a->len;
    info->special = a->special;
    info->normalized = a->normalized;
    info->lstrip = a->lstrip;
    info->rstrip = a->rstrip;
    info->single_word = a->single_word;
    return MM_OK;
}
