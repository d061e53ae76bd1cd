/* A fast path for the two large members of tokenizer.json, model.vocab and model.merges (hundreds of
 * thousands of short strings in a real tokenizer): jansson spends ~0.4 s building and freeing a DOM for
 * them, while this scanner reads them in place, copying only strings that contain escapes. It is a
 * strict JSON reader (RFC 8259 strings and integers, UTF-8 validated) so anything malformed is refused
 * with the byte offset; the rest of the document still goes through jansson. */
#include <stdlib.h>
#include <string.h>

#include "gw_tok_json.h"
#include "gw_tok_utf8.h"
#include "mm_text.h"

struct js {
    const char *s;
    size_t n, i;
    char *buf; /* unescape scratch */
    size_t cap;
};

static void ws(struct js *j)
{
    while (j->i < j->n &&
           (j->s[j->i] == ' ' || j->s[j->i] == '\n' || j->s[j->i] == '\r' || j->s[j->i] == '\t'))
        j->i++;
}

static int hex4(struct js *j, size_t at, uint32_t *v)
{
    if (at + 4 > j->n) return -1;
    uint32_t x = 0;
    for (int k = 0; k < 4; k++) {
        int h = mm_hex_digit(j->s[at + k]);
        if (h < 0) return -1;
        x = x << 4 | (uint32_t)h;
    }
    *v = x;
    return 0;
}

/* Read a string at j->i (which must be '"'). *out points into the text or into j->buf. */
static int read_string(struct js *j, const char **out, size_t *len)
{
    if (j->i >= j->n || j->s[j->i] != '"') return -1;
    size_t start = ++j->i;
    int escaped = 0;
    while (j->i < j->n && j->s[j->i] != '"') {
        unsigned char c = (unsigned char)j->s[j->i];
        if (c < 0x20) return -1;
        if (c == '\\') {
            escaped = 1;
            j->i++;
        }
        j->i++;
    }
    if (j->i >= j->n) return -1;
    size_t end = j->i++;
    if (gw_tok_utf8_valid_prefix((const uint8_t *)j->s + start, end - start) != end - start) return -1;
    if (!escaped) {
        *out = j->s + start;
        *len = end - start;
        return 0;
    }
    if (end - start + 1 > j->cap) {
        size_t cap = (end - start) * 2 + 64;
        char *nb = realloc(j->buf, cap);
        if (!nb) return -2;
        j->buf = nb;
        j->cap = cap;
    }
    size_t o = 0;
    for (size_t k = start; k < end; k++) {
        char c = j->s[k];
        if (c != '\\') {
            j->buf[o++] = c;
            continue;
        }
        c = j->s[++k];
        switch (c) {
        case '"':
            j->buf[o++] = '"';
            break;
        case '\\':
            j->buf[o++] = '\\';
            break;
        case '/':
            j->buf[o++] = '/';
            break;
        case 'b':
            j->buf[o++] = '\b';
            break;
        case 'f':
            j->buf[o++] = '\f';
            break;
        case 'n':
            j->buf[o++] = '\n';
            break;
        case 'r':
            j->buf[o++] = '\r';
            break;
        case 't':
            j->buf[o++] = '\t';
            break;
        case 'u': {
            uint32_t cp, lo;
            if (hex4(j, k + 1, &cp) || k + 4 >= end) return -1;
            k += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (k + 6 >= end || j->s[k + 1] != '\\' || j->s[k + 2] != 'u' || hex4(j, k + 3, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return -1;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                k += 6;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return -1;
            }
            o += gw_tok_utf8_encode(cp, (uint8_t *)j->buf + o);
            break;
        }
        default:
            return -1;
        }
    }
    *out = j->buf;
    *len = o;
    return 0;
}

/* Skip any JSON value (depth-limited). */
static int skip_value(struct js *j, int depth)
{
    if (depth > 64) return -1;
    ws(j);
    if (j->i >= j->n) return -1;
    char c = j->s[j->i];
    const char *str;
    size_t len;
    if (c == '"') return read_string(j, &str, &len) == 0 ? 0 : -1;
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->i++;
        ws(j);
        if (j->i < j->n && j->s[j->i] == close) {
            j->i++;
            return 0;
        }
        for (;;) {
            if (c == '{') {
                ws(j);
                if (read_string(j, &str, &len)) return -1;
                ws(j);
                if (j->i >= j->n || j->s[j->i] != ':') return -1;
                j->i++;
            }
            if (skip_value(j, depth + 1)) return -1;
            ws(j);
            if (j->i >= j->n) return -1;
            if (j->s[j->i] == ',') {
                j->i++;
                continue;
            }
            if (j->s[j->i] != close) return -1;
            j->i++;
            return 0;
        }
    }
    /* numbers and literals: the characters they can be made of */
    size_t s0 = j->i;
    while (j->i < j->n && strchr("0123456789+-.eEtrufalsn", j->s[j->i]) && j->s[j->i]) j->i++;
    return j->i > s0 ? 0 : -1;
}

int gw_tok_json_find_model_parts(const char *s, size_t n, struct gw_tok_jspan *vocab,
                                 struct gw_tok_jspan *merges)
{
    struct js j = {s, n, 0, NULL, 0};
    int rc = -1;
    vocab->start = vocab->end = merges->start = merges->end = 0;
    ws(&j);
    if (j.i >= n || s[j.i] != '{') goto out;
    j.i++;
    for (;;) {
        const char *key;
        size_t kl;
        ws(&j);
        if (j.i < n && s[j.i] == '}') break;
        if (read_string(&j, &key, &kl)) goto out;
        int is_model = kl == 5 && memcmp(key, "model", 5) == 0;
        ws(&j);
        if (j.i >= n || s[j.i] != ':') goto out;
        j.i++;
        ws(&j);
        if (is_model && j.i < n && s[j.i] == '{') {
            /* a later "model" replaces an earlier one, as in jansson */
            vocab->start = vocab->end = merges->start = merges->end = 0;
            j.i++;
            for (;;) {
                ws(&j);
                if (j.i < n && s[j.i] == '}') {
                    j.i++;
                    break;
                }
                if (read_string(&j, &key, &kl)) goto out;
                int which = kl == 5 && memcmp(key, "vocab", 5) == 0    ? 1
                            : kl == 6 && memcmp(key, "merges", 6) == 0 ? 2
                                                                       : 0;
                ws(&j);
                if (j.i >= n || s[j.i] != ':') goto out;
                j.i++;
                ws(&j);
                size_t v0 = j.i;
                if (skip_value(&j, 1)) goto out;
                if (which == 1) *vocab = (struct gw_tok_jspan){v0, j.i};
                if (which == 2) *merges = (struct gw_tok_jspan){v0, j.i};
                ws(&j);
                if (j.i < n && s[j.i] == ',') {
                    j.i++;
                    continue;
                }
                if (j.i < n && s[j.i] == '}') {
                    j.i++;
                    break;
                }
                goto out;
            }
        } else if (skip_value(&j, 0)) {
            goto out;
        }
        ws(&j);
        if (j.i < n && s[j.i] == ',') {
            j.i++;
            continue;
        }
        if (j.i < n && s[j.i] == '}') break;
        goto out;
    }
    rc = (vocab->end > vocab->start) ? 0 : -1;
out:
    free(j.buf);
    return rc;
}

int32_t gw_tok_json_parse_vocab(const char *s, struct gw_tok_jspan span, gw_tok_json_vocab_fn fn, void *ctx,
                                size_t *bad_at)
{
    struct js j = {s, span.end, span.start, NULL, 0};
    int32_t rc = -1;
    ws(&j);
    if (j.i >= j.n || s[j.i] != '{') goto out;
    j.i++;
    ws(&j);
    if (j.i < j.n && s[j.i] == '}') {
        rc = 0;
        goto out;
    }
    for (;;) {
        const char *key;
        size_t kl;
        ws(&j);
        int r = read_string(&j, &key, &kl);
        if (r) {
            rc = r == -2 ? -2 : -1;
            goto out;
        }
        ws(&j);
        if (j.i >= j.n || s[j.i] != ':') goto out;
        j.i++;
        ws(&j);
        /* an integer: -?(0|[1-9][0-9]*), no fraction or exponent */
        size_t d0 = j.i;
        int neg = j.i < j.n && s[j.i] == '-';
        if (neg) j.i++;
        int64_t v = 0;
        size_t digits = 0;
        while (j.i < j.n && s[j.i] >= '0' && s[j.i] <= '9') {
            if (v < (int64_t)1 << 40) v = v * 10 + (s[j.i] - '0');
            j.i++;
            digits++;
        }
        if (!digits || (digits > 1 && s[d0 + neg] == '0')) goto out;
        if (j.i < j.n && (s[j.i] == '.' || s[j.i] == 'e' || s[j.i] == 'E')) {
            rc = -3; /* a number that is not an integer */
            goto out;
        }
        rc = fn(ctx, key, kl, neg ? -v : v);
        if (rc) goto out;
        rc = -1;
        ws(&j);
        if (j.i < j.n && s[j.i] == ',') {
            j.i++;
            continue;
        }
        if (j.i < j.n && s[j.i] == '}') {
            rc = 0;
            break;
        }
        goto out;
    }
out:
    *bad_at = j.i;
    free(j.buf);
    return rc;
}

int32_t gw_tok_json_parse_merges(const char *s, struct gw_tok_jspan span, gw_tok_json_merge_fn fn, void *ctx,
                                 size_t *bad_at)
{
    struct js j = {s, span.end, span.start, NULL, 0};
    char *first = NULL; /* [a, b] form: a must survive reading b */
    size_t first_cap = 0;
    int32_t rc = -1;
    ws(&j);
    if (j.i >= j.n || s[j.i] != '[') goto out;
    j.i++;
    ws(&j);
    if (j.i < j.n && s[j.i] == ']') {
        rc = 0;
        goto out;
    }
    for (size_t idx = 0;; idx++) {
        const char *a, *b = NULL;
        size_t al, bl = 0;
        ws(&j);
        if (j.i < j.n && s[j.i] == '[') {
            j.i++;
            ws(&j);
            if (read_string(&j, &a, &al)) goto out;
            if (al + 1 > first_cap) {
                first_cap = al * 2 + 32;
                char *nf = realloc(first, first_cap);
                if (!nf) {
                    rc = -2;
                    goto out;
                }
                first = nf;
            }
            memcpy(first, a, al);
            a = first;
            ws(&j);
            if (j.i >= j.n || s[j.i] != ',') goto out;
            j.i++;
            ws(&j);
            if (read_string(&j, &b, &bl)) goto out;
            ws(&j);
            if (j.i >= j.n || s[j.i] != ']') goto out;
            j.i++;
        } else if (read_string(&j, &a, &al)) {
            goto out;
        }
        rc = fn(ctx, idx, a, al, b, bl);
        if (rc) goto out;
        rc = -1;
        ws(&j);
        if (j.i < j.n && s[j.i] == ',') {
            j.i++;
            continue;
        }
        if (j.i < j.n && s[j.i] == ']') {
            rc = 0;
            break;
        }
        goto out;
    }
out:
    *bad_at = j.i;
    free(first);
    free(j.buf);
    return rc;
}
