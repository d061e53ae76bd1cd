/* Decoding: ids -> bytes (each token's ByteLevel bytes, precomputed at load) -> UTF-8 text with U+FFFD
 * for ill-formed input exactly where Rust's from_utf8_lossy puts them. Whole-sequence decoding is the
 * incremental decoder run to the end, so both give the same text by construction. */
#include <string.h>

#include "gw_tok_internal.h"
#include "gw_tok_utf8.h"

static const uint8_t REPLACEMENT[3] = {0xEF, 0xBF, 0xBD};

void gw_tok_stream_init(struct gw_tok_stream *s, const struct gw_tokenizer *tok, uint32_t flags)
{
    s->tok = tok;
    s->flags = flags;
    s->npend = 0;
    s->keep = NULL;
    s->n_keep = 0;
}

void gw_tok_stream_keep(struct gw_tok_stream *s, const uint32_t *ids, size_t n)
{
    s->keep = ids;
    s->n_keep = ids ? n : 0;
}

static int kept(const struct gw_tok_stream *s, uint32_t id)
{
    for (size_t i = 0; i < s->n_keep; i++)
        if (s->keep[i] == id) return 1;
    return 0;
}

size_t gw_tok_stream_pending(const struct gw_tok_stream *s)
{
    return s->npend;
}

/* Append the well-formed text of b[0..n), replacing ill-formed subsequences; a truncated sequence at
 * the very end is kept in s->pend. */
static int feed_tail(struct gw_tok_stream *s, const uint8_t *b, size_t n, struct mm_buf *out)
{
    while (n) {
        struct gw_tok_utf8_chunk c;
        gw_tok_utf8_chunk(b, n, &c);
        if (c.valid && mm_buf_append(out, b, c.valid)) return -1;
        if (!c.invalid) return 0;
        if (c.truncated) {
            memcpy(s->pend, b + c.valid, c.invalid);
            s->npend = (uint8_t)c.invalid;
            return 0;
        }
        if (mm_buf_append(out, REPLACEMENT, 3)) return -1;
        b += c.valid + c.invalid;
        n -= c.valid + c.invalid;
    }
    return 0;
}

static int feed(struct gw_tok_stream *s, const uint8_t *b, size_t n, struct mm_buf *out)
{
    if (s->npend && n) {
        /* The held-back prefix and at most 4 - npend new bytes decide its fate: a sequence is at most 4
         * bytes long, so with 4 bytes it is either complete or known to be ill-formed. */
        uint8_t tmp[8];
        size_t p = s->npend, k = n < 4 - p ? n : 4 - p;
        memcpy(tmp, s->pend, p);
        memcpy(tmp + p, b, k);
        struct gw_tok_utf8_chunk c;
        gw_tok_utf8_chunk(tmp, p + k, &c);
        s->npend = 0;
        if (c.valid) {
            if (mm_buf_append(out, tmp, c.valid)) return -1;
            b += c.valid - p;
            n -= c.valid - p;
        } else if (c.truncated) {
            memcpy(s->pend, tmp, p + k); /* still incomplete: all new bytes joined the prefix */
            s->npend = (uint8_t)(p + k);
            return 0;
        } else {
            if (mm_buf_append(out, REPLACEMENT, 3)) return -1;
            b += c.invalid - p;
            n -= c.invalid - p;
        }
    }
    return feed_tail(s, b, n, out);
}

int32_t gw_tok_stream_push(struct gw_tok_stream *s, uint32_t id, struct mm_buf *out, struct mm_err *err)
{
    const struct gw_tokenizer *tok = s->tok;
    if (id >= tok->n_ids) return MM_OK; /* HF skips ids without a token */
    const struct gw_tok_idrec *r = &tok->ids[id];
    if (!(r->flags & GW_TOK_ID_PRESENT)) return MM_OK;
    if ((s->flags & GW_TOK_SKIP_SPECIAL) && (r->flags & GW_TOK_ID_SPECIAL) && !kept(s, id)) return MM_OK;
    if (feed(s, tok->bytes + r->byte_off, r->byte_len, out))
        return mm_err_set(err, MM_NOMEM, "decode: out of memory (%zu bytes of text)", out->len);
    return MM_OK;
}

int32_t gw_tok_stream_push_n(struct gw_tok_stream *s, const uint32_t *ids, size_t n, struct mm_buf *out,
                             struct mm_err *err)
{
    for (size_t i = 0; i < n; i++) {
        int32_t rc = gw_tok_stream_push(s, ids[i], out, err);
        if (rc) return rc;
    }
    return MM_OK;
}

int32_t gw_tok_stream_finish(struct gw_tok_stream *s, struct mm_buf *out, struct mm_err *err)
{
    if (!s->npend) return MM_OK;
    s->npend = 0;
    if (mm_buf_append(out, REPLACEMENT, 3)) return mm_err_set(err, MM_NOMEM, "decode: out of memory");
    return MM_OK;
}

int32_t gw_tokenizer_decode(const struct gw_tokenizer *tok, const uint32_t *ids, size_t n, uint32_t flags,
                            struct mm_buf *out, struct mm_err *err)
{
    if (!tok || !out || (!ids && n)) return mm_err_set(err, MM_INVALID, "decode: NULL argument");
    struct gw_tok_stream s;
    gw_tok_stream_init(&s, tok, flags);
    size_t len0 = out->len;
    int32_t rc = gw_tok_stream_push_n(&s, ids, n, out, err);
    if (!rc) rc = gw_tok_stream_finish(&s, out, err);
    if (rc) {
        out->len = len0; /* nothing appended on error */
        if (out->data) out->data[len0] = '\0';
    }
    /* Empty output still gets a NUL-terminated buffer, so callers can use out->data as a string. */
    if (!rc && !out->data && mm_buf_append(out, "", 0))
        return mm_err_set(err, MM_NOMEM, "decode: out of memory");
    return rc;
}
