/* Loading tokenizer.json (HF tokenizers serialization 1.0) into the immutable gw_tokenizer.
 *
 * Added tokens get their ids the way HF assigns them when it deserializes (AddedVocabulary::add_tokens),
 * not blindly from the file: a token already in the vocab keeps the vocab id, a new one gets the next id
 * after the vocab / the largest added id. HF only warns when that differs from the "id" in the file;
 * we do the same, so both encode to the same ids. Everything that would make our output differ from HF
 * (other models, normalizers, decoders) is refused with MM_UNSUPPORTED and a message naming the field. */
#include <errno.h>
#include <stdarg.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gw_tok_internal.h"
#include "gw_tok_json.h"
#include "gw_tok_utf8.h"
#include "mm_log.h"

#define MAX_FILE_BYTES ((size_t)1 << 30)

/* Loader state: the tokenizer being built plus temporaries freed at the end. */
struct loader {
    struct gw_tokenizer *tok;
    const char *name;
    struct mm_err *err;
    /* HF AddedVocabulary bookkeeping */
    struct gw_tok_added *tokens; /* every non-empty definition, in file order */
    uint32_t n_tokens, cap_tokens;
    uint32_t *special_list, *classic_list; /* indices into tokens, as HF's two lists */
    uint32_t n_special_list, n_classic_list;
    struct gw_tok_strmap special_set; /* content -> 1 */
    struct gw_tok_strmap id_def;      /* id (4 bytes) -> index of its current definition (HF map_r) */
    uint32_t max_added_id;
    uint32_t max_vocab_id;
    int have_added;
    /* fast path for model.vocab / model.merges (gw_tok_json.c) */
    int fast;
    const char *json;
    struct gw_tok_jspan vocab_span, merges_span;
    char *merge_buf;
    size_t merge_cap;
};

static int32_t fail(struct loader *L, int32_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int32_t fail(struct loader *L, int32_t code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mm_err_set(L->err, code, "%s: %s", L->name, msg);
}

static int32_t nomem(struct loader *L)
{
    return fail(L, MM_NOMEM, "out of memory");
}

/* ---- small JSON accessors ---- */

static int get_bool(const json_t *o, const char *key, int dflt)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return dflt;
    return json_is_true(v);
}

static const char *get_type(const json_t *o)
{
    const json_t *t = json_object_get(o, "type");
    return json_is_string(t) ? json_string_value(t) : NULL;
}

/* Read a token id: a non-negative integer below GW_TOK_MAX_ID. */
static int32_t get_id(struct loader *L, const json_t *v, const char *where, uint32_t *id)
{
    if (!json_is_integer(v)) return fail(L, MM_FORMAT, "%s: id is not an integer", where);
    json_int_t x = json_integer_value(v);
    if (x < 0 || x >= (json_int_t)GW_TOK_MAX_ID)
        return fail(L, MM_TOO_LARGE, "%s: id %lld out of range [0, %u)", where, (long long)x, GW_TOK_MAX_ID);
    *id = (uint32_t)x;
    return MM_OK;
}

/* ---- model ---- */

static int32_t vocab_entry(void *ctx, const char *key, size_t klen, int64_t id)
{
    struct loader *L = ctx;
    struct gw_tokenizer *tok = L->tok;
    if (id < 0 || id >= (int64_t)GW_TOK_MAX_ID)
        return fail(L, MM_TOO_LARGE, "model.vocab['%.*s']: id %lld out of range [0, %u)",
                    (int)(klen > 40 ? 40 : klen), key, (long long)id, GW_TOK_MAX_ID);
    if (gw_tok_strmap_put(&tok->model_vocab, key, klen, (uint32_t)id)) return nomem(L);
    if (tok->model_vocab.count >= GW_TOK_MAX_ID)
        return fail(L, MM_TOO_LARGE, "model.vocab: too many entries");
    if ((uint32_t)id > L->max_vocab_id) L->max_vocab_id = (uint32_t)id;
    return MM_OK;
}

/* One merge: "a b" (b == NULL: split a at its single space, as HF's split(' ') into two parts) or the
 * pair form [a, b]. Its rank is its index. */
static int32_t merge_entry(void *ctx, size_t i, const char *a, size_t al, const char *b, size_t bl)
{
    struct loader *L = ctx;
    struct gw_tokenizer *tok = L->tok;
    if (!b) {
        const char *sp = memchr(a, ' ', al);
        if (!sp || memchr(sp + 1, ' ', al - (size_t)(sp - a) - 1))
            return fail(L, MM_FORMAT, "model.merges[%zu]: '%.*s' is not two tokens separated by one space", i,
                        (int)(al > 60 ? 60 : al), a);
        b = sp + 1;
        bl = al - (size_t)(sp - a) - 1;
        al = (size_t)(sp - a);
    }
    uint32_t ia = gw_tok_strmap_get(&tok->model_vocab, a, al);
    uint32_t ib = gw_tok_strmap_get(&tok->model_vocab, b, bl);
    if (ia == GW_TOK_NONE || ib == GW_TOK_NONE) {
        const char *m = ia == GW_TOK_NONE ? a : b;
        size_t ml = ia == GW_TOK_NONE ? al : bl;
        return fail(L, MM_FORMAT, "model.merges[%zu]: token '%.*s' not in vocab", i, (int)(ml > 60 ? 60 : ml),
                    m);
    }
    if (al + bl > L->merge_cap) {
        size_t cap = (al + bl) * 2 + 64;
        char *nb = realloc(L->merge_buf, cap);
        if (!nb) return nomem(L);
        L->merge_buf = nb;
        L->merge_cap = cap;
    }
    memcpy(L->merge_buf, a, al);
    memcpy(L->merge_buf + al, b, bl);
    uint32_t im = gw_tok_strmap_get(&tok->model_vocab, L->merge_buf, al + bl);
    if (im == GW_TOK_NONE)
        return fail(L, MM_FORMAT, "model.merges[%zu]: merged token '%.*s' not in vocab", i,
                    (int)(al + bl > 60 ? 60 : al + bl), L->merge_buf);
    if (i >= GW_TOK_MAX_ID * (size_t)4) return fail(L, MM_TOO_LARGE, "model.merges: too many entries");
    if (gw_tok_mergemap_put(&tok->merges, ia, ib, (uint32_t)i, im)) return nomem(L);
    return MM_OK;
}

/* model.vocab and model.merges: from the fast in-place reader when it found them, else from jansson. */
static int32_t load_vocab_merges(struct loader *L, const json_t *model)
{
    struct gw_tokenizer *tok = L->tok;
    int32_t rc;
    size_t bad_at = 0;
    if (L->fast) {
        if (gw_tok_strmap_init(&tok->model_vocab, (L->vocab_span.end - L->vocab_span.start) / 24 + 16))
            return nomem(L);
        rc = gw_tok_json_parse_vocab(L->json, L->vocab_span, vocab_entry, L, &bad_at);
        if (rc == -1 || rc == -2 || rc == -3)
            return rc == -2 ? nomem(L)
                            : fail(L, MM_FORMAT, "model.vocab: %s at byte %zu",
                                   rc == -3 ? "an id that is not an integer" : "malformed JSON", bad_at);
        if (rc) return rc;
        tok->model_vocab_len = tok->model_vocab.count;
        size_t ms = L->merges_span.end - L->merges_span.start;
        if (gw_tok_mergemap_init(&tok->merges, ms / 16 + 16)) return nomem(L);
        if (!ms) return MM_OK;
        rc = gw_tok_json_parse_merges(L->json, L->merges_span, merge_entry, L, &bad_at);
        if (rc == -1 || rc == -2 || rc == -3)
            return rc == -2 ? nomem(L)
                            : fail(L, MM_FORMAT, "model.merges: malformed JSON at byte %zu", bad_at);
        return rc;
    }
    const json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return fail(L, MM_FORMAT, "model.vocab: not an object");
    if (gw_tok_strmap_init(&tok->model_vocab, json_object_size(vocab))) return nomem(L);
    const char *key;
    size_t klen;
    json_t *val;
    json_object_keylen_foreach((json_t *)vocab, key, klen, val)
    {
        if (!json_is_integer(val))
            return fail(L, MM_FORMAT, "model.vocab['%.40s']: id is not an integer", key);
        if ((rc = vocab_entry(L, key, klen, (int64_t)json_integer_value(val)))) return rc;
    }
    tok->model_vocab_len = tok->model_vocab.count;
    const json_t *merges = json_object_get(model, "merges");
    if (merges && !json_is_null(merges) && !json_is_array(merges))
        return fail(L, MM_FORMAT, "model.merges: not an array");
    size_t n = json_is_array(merges) ? json_array_size(merges) : 0;
    if (gw_tok_mergemap_init(&tok->merges, n)) return nomem(L);
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(merges, i);
        if (json_is_string(m)) {
            rc = merge_entry(L, i, json_string_value(m), json_string_length(m), NULL, 0);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            const json_t *x = json_array_get(m, 0), *y = json_array_get(m, 1);
            rc = merge_entry(L, i, json_string_value(x), json_string_length(x), json_string_value(y),
                             json_string_length(y));
        } else {
            rc = fail(L, MM_FORMAT, "model.merges[%zu]: neither \"a b\" nor [\"a\", \"b\"]", i);
        }
        if (rc) return rc;
    }
    return MM_OK;
}

/* Decode a stored token string through the ByteLevel table into out (room for len bytes). Returns the
 * byte count, or SIZE_MAX when a character is not one of the 256 byte characters. */
static size_t bytelevel_decode(const uint8_t *s, size_t len, uint8_t *out)
{
    size_t i = 0, k = 0;
    while (i < len) {
        uint32_t cp;
        i += gw_tok_utf8_decode(s + i, len - i, &cp);
        int b = gw_tok_cp_to_byte(cp);
        if (b < 0) return SIZE_MAX;
        out[k++] = (uint8_t)b;
    }
    return k;
}

static int32_t load_model(struct loader *L, const json_t *model)
{
    struct gw_tokenizer *tok = L->tok;
    if (!json_is_object(model)) return fail(L, MM_FORMAT, "model: missing or not an object");
    const char *type = get_type(model);
    if (type && strcmp(type, "BPE") != 0)
        return fail(L, MM_UNSUPPORTED, "model.type '%s' is not supported (only byte-level BPE)", type);
    const json_t *d = json_object_get(model, "dropout");
    if (d && !json_is_null(d) && (!json_is_number(d) || json_number_value(d) != 0.0))
        return fail(L, MM_UNSUPPORTED, "model.dropout: BPE dropout is not supported");
    const char *fields[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(model, fields[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return fail(L, MM_UNSUPPORTED, "model.%s is not supported (byte-level BPE has none)", fields[i]);
    }
    const json_t *unk = json_object_get(model, "unk_token");
    if (unk && !json_is_null(unk)) return fail(L, MM_UNSUPPORTED, "model.unk_token is not supported");
    tok->ignore_merges = get_bool(model, "ignore_merges", 0);
    int32_t rc = load_vocab_merges(L, model);
    if (rc) return rc;
    for (int b = 0; b < 256; b++) {
        uint8_t u[4];
        size_t ul = gw_tok_utf8_encode(gw_tok_byte_to_cp((uint8_t)b), u);
        tok->byte_id[b] = gw_tok_strmap_get(&tok->model_vocab, u, ul);
    }
    if (get_bool(model, "byte_fallback", 0))
        for (int b = 0; b < 256; b++)
            if (tok->byte_id[b] == GW_TOK_NONE)
                return fail(L, MM_UNSUPPORTED, "model.byte_fallback with byte %d missing from the vocab", b);
    if (tok->ignore_merges) {
        const struct gw_tok_strmap *v = &tok->model_vocab;
        if (gw_tok_strmap_init(&tok->raw_vocab, v->count)) return nomem(L);
        uint8_t *tmp = NULL;
        size_t tmp_cap = 0;
        for (uint32_t i = 0; i <= v->mask; i++) {
            const struct gw_tok_strslot *s = &v->slots[i];
            if (!s->hash) continue;
            if (s->key_len > tmp_cap) {
                tmp_cap = s->key_len * 2 + 16;
                uint8_t *nt = realloc(tmp, tmp_cap);
                if (!nt) {
                    free(tmp);
                    return nomem(L);
                }
                tmp = nt;
            }
            size_t bl = bytelevel_decode((const uint8_t *)v->blob + s->key_off, s->key_len, tmp);
            if (bl != SIZE_MAX && gw_tok_strmap_put(&tok->raw_vocab, tmp, bl, s->value)) {
                free(tmp);
                return nomem(L);
            }
        }
        free(tmp);
    }
    return MM_OK;
}

/* ---- added tokens (HF AddedVocabulary::add_tokens, one token at a time as its deserializer does) ---- */

static uint32_t token_to_id(struct loader *L, const char *s, size_t n)
{
    uint32_t id = gw_tok_strmap_get(&L->tok->added_map, s, n);
    return id != GW_TOK_NONE ? id : gw_tok_strmap_get(&L->tok->model_vocab, s, n);
}

static int push_u32(uint32_t **v, uint32_t *n, uint32_t x)
{
    if (*n == 0 || (*n & (*n - 1)) == 0) { /* capacity doubles at powers of two */
        uint32_t cap = *n ? *n * 2 : 16;
        uint32_t *nv = realloc(*v, (size_t)cap * sizeof *nv);
        if (!nv) return -1;
        *v = nv;
    }
    (*v)[(*n)++] = x;
    return 0;
}

static int same_def(const struct gw_tok_added *x, const struct gw_tok_added *y)
{
    return x->len == y->len && memcmp(x->content, y->content, x->len) == 0 && x->special == y->special &&
           x->normalized == y->normalized && x->lstrip == y->lstrip && x->rstrip == y->rstrip &&
           x->single_word == y->single_word;
}

static int32_t add_token(struct loader *L, const json_t *t, size_t idx)
{
    struct gw_tokenizer *tok = L->tok;
    if (!json_is_object(t)) return fail(L, MM_FORMAT, "added_tokens[%zu]: not an object", idx);
    const json_t *c = json_object_get(t, "content");
    if (!json_is_string(c)) return fail(L, MM_FORMAT, "added_tokens[%zu].content: not a string", idx);
    uint32_t file_id = GW_TOK_NONE;
    const json_t *jid = json_object_get(t, "id");
    if (jid) {
        char where[48];
        snprintf(where, sizeof where, "added_tokens[%zu]", idx);
        int32_t rc = get_id(L, jid, where, &file_id);
        if (rc) return rc;
    }
    size_t clen = json_string_length(c);
    if (clen == 0) return MM_OK; /* HF ignores empty tokens */
    if (clen > 65536) return fail(L, MM_TOO_LARGE, "added_tokens[%zu].content: %zu bytes", idx, clen);
    struct gw_tok_added a = {0};
    a.len = (uint32_t)clen;
    a.special = (uint8_t)get_bool(t, "special", 0);
    a.normalized = (uint8_t)get_bool(t, "normalized", 1);
    a.lstrip = (uint8_t)get_bool(t, "lstrip", 0);
    a.rstrip = (uint8_t)get_bool(t, "rstrip", 0);
    a.single_word = (uint8_t)get_bool(t, "single_word", 0);
    a.content = malloc(clen + 1);
    if (!a.content) return nomem(L);
    memcpy(a.content, json_string_value(c), clen);
    a.content[clen] = '\0';

    int new_special = a.special && gw_tok_strmap_get(&L->special_set, a.content, clen) == GW_TOK_NONE;
    if (new_special && gw_tok_strmap_put(&L->special_set, a.content, clen, 1)) goto oom;
    uint32_t id = token_to_id(L, a.content, clen);
    int ignored = 0;
    if (id != GW_TOK_NONE) {
        uint32_t cur = gw_tok_strmap_get(&L->id_def, &id, sizeof id);
        ignored = cur != GW_TOK_NONE && same_def(&L->tokens[cur], &a);
    } else {
        uint32_t vl = tok->model_vocab_len;
        if (!L->have_added)
            id = vl;
        else
            id = (L->max_added_id >= vl || vl == 0) ? L->max_added_id + 1 : vl;
        if (id >= GW_TOK_MAX_ID) {
            free(a.content);
            return fail(L, MM_TOO_LARGE, "added_tokens[%zu]: id %u out of range", idx, id);
        }
    }
    if (!ignored && file_id != GW_TOK_NONE && file_id != id)
        mm_log_warn("tokenizer", "%s: added token '%.40s' has id %u in the file, HF assigns %u: using %u",
                    L->name, a.content, file_id, id, id);
    a.id = id;
    if (L->n_tokens == L->cap_tokens) {
        uint32_t cap = L->cap_tokens ? L->cap_tokens * 2 : 32;
        struct gw_tok_added *nt = realloc(L->tokens, (size_t)cap * sizeof *nt);
        if (!nt) goto oom;
        L->tokens = nt;
        L->cap_tokens = cap;
    }
    uint32_t ti = L->n_tokens++;
    L->tokens[ti] = a;
    if (new_special && push_u32(&L->special_list, &L->n_special_list, ti)) return nomem(L);
    if (ignored) return MM_OK;
    if (gw_tok_strmap_put(&tok->added_map, a.content, clen, id)) return nomem(L);
    if (gw_tok_strmap_put(&L->id_def, &id, sizeof id, ti)) return nomem(L);
    if (!L->have_added || id > L->max_added_id) L->max_added_id = id;
    L->have_added = 1;
    if (gw_tok_strmap_get(&L->special_set, a.content, clen) == GW_TOK_NONE &&
        push_u32(&L->classic_list, &L->n_classic_list, ti))
        return nomem(L);
    return MM_OK;
oom:
    free(a.content);
    return nomem(L);
}

static int32_t load_added(struct loader *L, const json_t *arr)
{
    if (gw_tok_strmap_init(&L->tok->added_map, 64) || gw_tok_strmap_init(&L->special_set, 64) ||
        gw_tok_strmap_init(&L->id_def, 64))
        return nomem(L);
    if (!arr || json_is_null(arr)) return MM_OK;
    if (!json_is_array(arr)) return fail(L, MM_FORMAT, "added_tokens: not an array");
    if (json_array_size(arr) >= GW_TOK_MAX_ID)
        return fail(L, MM_TOO_LARGE, "added_tokens: %zu entries", json_array_size(arr));
    for (size_t i = 0; i < json_array_size(arr); i++) {
        int32_t rc = add_token(L, json_array_get(arr, i), i);
        if (rc) return rc;
    }
    return MM_OK;
}

/* ---- normalizer ---- */

static int32_t load_normalizer(struct loader *L, const json_t *n, int depth)
{
    struct gw_tokenizer *tok = L->tok;
    if (!n || json_is_null(n)) return MM_OK;
    if (!json_is_object(n) || !get_type(n)) return fail(L, MM_FORMAT, "normalizer: no type");
    if (depth > 4) return fail(L, MM_UNSUPPORTED, "normalizer: Sequence nested too deep");
    const char *type = get_type(n);
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list)) return fail(L, MM_FORMAT, "normalizer.normalizers: not an array");
        for (size_t i = 0; i < json_array_size(list); i++) {
            int32_t rc = load_normalizer(L, json_array_get(list, i), depth + 1);
            if (rc) return rc;
        }
        return MM_OK;
    }
    static const struct {
        const char *name;
        int form;
    } forms[] = {{"NFC", GW_TOK_NFC}, {"NFD", GW_TOK_NFD}, {"NFKC", GW_TOK_NFKC}, {"NFKD", GW_TOK_NFKD}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
        if (strcmp(type, forms[i].name) == 0) {
            if (tok->n_norms == GW_TOK_MAX_NORMS)
                return fail(L, MM_UNSUPPORTED, "normalizer: too many steps");
            tok->norms[tok->n_norms++] = forms[i].form;
            if (forms[i].form == GW_TOK_NFC) gw_tok_nfc_init(); /* its table now, not in the first request */
            return MM_OK;
        }
    return fail(L, MM_UNSUPPORTED, "normalizer type '%s' is not supported (NFC, NFD, NFKC, NFKD, Sequence)",
                type);
}

/* ---- pre-tokenizer ---- */

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int32_t add_step(struct loader *L, struct gw_tok_step st)
{
    struct gw_tokenizer *tok = L->tok;
    if (tok->n_steps == GW_TOK_MAX_STAGES) {
        if (st.re) pcre2_code_free(st.re);
        return fail(L, MM_UNSUPPORTED, "pre_tokenizer: more than %d steps", GW_TOK_MAX_STAGES);
    }
    size_t jit_size = 0;
    if (st.re && pcre2_pattern_info(st.re, PCRE2_INFO_JITSIZE, &jit_size) == 0 && jit_size > 0) st.jit = 1;
    tok->steps[tok->n_steps++] = st;
    return MM_OK;
}

static int32_t load_pretok(struct loader *L, const json_t *p, int depth)
{
    if (!json_is_object(p) || !get_type(p)) return fail(L, MM_FORMAT, "pre_tokenizer: no type");
    if (depth > 4) return fail(L, MM_UNSUPPORTED, "pre_tokenizer: Sequence nested too deep");
    const char *type = get_type(p);
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list)) return fail(L, MM_FORMAT, "pre_tokenizer.pretokenizers: not an array");
        for (size_t i = 0; i < json_array_size(list); i++) {
            int32_t rc = load_pretok(L, json_array_get(list, i), depth + 1);
            if (rc) return rc;
        }
        return MM_OK;
    }
    struct gw_tok_step st = {0};
    if (strcmp(type, "ByteLevel") == 0) {
        st.kind = GW_TOK_STEP_BYTELEVEL;
        st.add_prefix_space = get_bool(p, "add_prefix_space", 1);
        if (get_bool(p, "use_regex", 1)) {
            int32_t rc = gw_tok_regex_compile(GPT2_PATTERN, sizeof GPT2_PATTERN - 1, 0, &st.re, L->err);
            if (rc) {
                mm_err_prefix(L->err, "%s: pre_tokenizer ByteLevel", L->name);
                return rc;
            }
        }
        return add_step(L, st);
    }
    if (strcmp(type, "Split") == 0) {
        st.kind = GW_TOK_STEP_SPLIT;
        const json_t *pat = json_object_get(p, "pattern");
        const json_t *re = json_object_get(pat, "Regex");
        const json_t *str = json_object_get(pat, "String");
        const json_t *src = json_is_string(re) ? re : json_is_string(str) ? str : NULL;
        if (!src) return fail(L, MM_FORMAT, "pre_tokenizer Split.pattern: neither Regex nor String");
        const json_t *beh = json_object_get(p, "behavior");
        static const struct {
            const char *name;
            int b;
        } behs[] = {{"Isolated", GW_TOK_ISOLATED},
                    {"Removed", GW_TOK_REMOVED},
                    {"MergedWithPrevious", GW_TOK_MERGED_WITH_PREVIOUS},
                    {"MergedWithNext", GW_TOK_MERGED_WITH_NEXT},
                    {"Contiguous", GW_TOK_CONTIGUOUS}};
        st.behavior = -1;
        for (size_t i = 0; json_is_string(beh) && i < sizeof behs / sizeof behs[0]; i++)
            if (strcmp(json_string_value(beh), behs[i].name) == 0) st.behavior = behs[i].b;
        if (st.behavior < 0) return fail(L, MM_FORMAT, "pre_tokenizer Split.behavior: unknown");
        st.invert = get_bool(p, "invert", 0);
        if (src == str && json_string_length(str) == 0) {
            /* HF: an empty String pattern matches nothing, so the piece passes through whole */
            st.behavior = GW_TOK_ISOLATED;
            st.invert = 0;
        }
        int32_t rc =
            gw_tok_regex_compile(json_string_value(src), json_string_length(src), src == str, &st.re, L->err);
        if (rc) {
            mm_err_prefix(L->err, "%s: pre_tokenizer Split", L->name);
            return rc;
        }
        return add_step(L, st);
    }
    return fail(L, MM_UNSUPPORTED, "pre_tokenizer type '%s' is not supported (Split, ByteLevel, Sequence)",
                type);
}

static int32_t check_steps(struct loader *L)
{
    struct gw_tokenizer *tok = L->tok;
    /* Our BPE works on raw bytes, which is exactly HF's ByteLevel-mapped string when ByteLevel is the
     * last step; a Split after ByteLevel would see the mapped characters instead. */
    for (int i = 0; i < tok->n_steps; i++)
        if (tok->steps[i].kind == GW_TOK_STEP_BYTELEVEL && i != tok->n_steps - 1)
            return fail(L, MM_UNSUPPORTED, "pre_tokenizer: ByteLevel must be the last step");
    if (!tok->n_steps || tok->steps[tok->n_steps - 1].kind != GW_TOK_STEP_BYTELEVEL)
        return fail(L, MM_UNSUPPORTED, "pre_tokenizer: no ByteLevel step (only byte-level BPE is supported)");
    return MM_OK;
}

/* ---- post-processor (only what add_special_tokens adds around one sequence) ---- */

static int32_t append_ids(struct loader *L, uint32_t **v, uint32_t *n, const json_t *ids, const char *where)
{
    if (!json_is_array(ids)) return fail(L, MM_FORMAT, "%s: ids not an array", where);
    for (size_t i = 0; i < json_array_size(ids); i++) {
        uint32_t id;
        int32_t rc = get_id(L, json_array_get(ids, i), where, &id);
        if (rc) return rc;
        if (push_u32(v, n, id)) return nomem(L);
    }
    return MM_OK;
}

static int32_t load_post(struct loader *L, const json_t *p, int depth)
{
    struct gw_tokenizer *tok = L->tok;
    if (!p || json_is_null(p)) return MM_OK;
    if (!json_is_object(p) || !get_type(p)) return fail(L, MM_FORMAT, "post_processor: no type");
    if (depth > 4) return fail(L, MM_UNSUPPORTED, "post_processor: Sequence nested too deep");
    const char *type = get_type(p);
    if (strcmp(type, "ByteLevel") == 0) return MM_OK; /* only adjusts offsets */
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(p, "processors");
        if (!json_is_array(list)) return fail(L, MM_FORMAT, "post_processor.processors: not an array");
        for (size_t i = 0; i < json_array_size(list); i++) {
            int32_t rc = load_post(L, json_array_get(list, i), depth + 1);
            if (rc) return rc;
        }
        return MM_OK;
    }
    /* Each processor wraps the result of the previous one: new prefix before, new suffix after. */
    uint32_t *pre = NULL, *suf = NULL, np = 0, ns = 0;
    int32_t rc = MM_OK;
    if (strcmp(type, "TemplateProcessing") == 0) {
        const json_t *single = json_object_get(p, "single");
        const json_t *specials = json_object_get(p, "special_tokens");
        if (!json_is_array(single)) return fail(L, MM_FORMAT, "post_processor.single: not an array");
        int seen_seq = 0;
        for (size_t i = 0; i < json_array_size(single) && !rc; i++) {
            const json_t *item = json_array_get(single, i);
            const json_t *sp = json_object_get(item, "SpecialToken");
            if (json_object_get(item, "Sequence")) {
                seen_seq = 1;
                continue;
            }
            const json_t *name = json_object_get(sp, "id");
            const json_t *def =
                json_is_string(name) ? json_object_get(specials, json_string_value(name)) : NULL;
            if (!def) {
                rc = fail(L, MM_FORMAT, "post_processor.single[%zu]: unknown special token", i);
                break;
            }
            rc = append_ids(L, seen_seq ? &suf : &pre, seen_seq ? &ns : &np, json_object_get(def, "ids"),
                            "post_processor.special_tokens");
        }
    } else if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        const json_t *cls = json_object_get(p, "cls"), *sep = json_object_get(p, "sep");
        uint32_t a, b;
        if (!json_is_array(cls) || !json_is_array(sep)) return fail(L, MM_FORMAT, "post_processor: cls/sep");
        rc = get_id(L, json_array_get(cls, 1), "post_processor.cls", &a);
        if (!rc) rc = get_id(L, json_array_get(sep, 1), "post_processor.sep", &b);
        if (!rc && (push_u32(&pre, &np, a) || push_u32(&suf, &ns, b))) rc = nomem(L);
    } else {
        return fail(L, MM_UNSUPPORTED, "post_processor type '%s' is not supported", type);
    }
    if (!rc) {
        uint32_t *npre = malloc(((size_t)np + tok->n_prefix + 1) * sizeof *npre);
        uint32_t *nsuf = malloc(((size_t)ns + tok->n_suffix + 1) * sizeof *nsuf);
        if (!npre || !nsuf) {
            free(npre);
            free(nsuf);
            rc = nomem(L);
        } else {
            if (np) memcpy(npre, pre, np * sizeof *pre);
            if (tok->n_prefix) memcpy(npre + np, tok->prefix_ids, tok->n_prefix * sizeof *pre);
            if (tok->n_suffix) memcpy(nsuf, tok->suffix_ids, tok->n_suffix * sizeof *suf);
            if (ns) memcpy(nsuf + tok->n_suffix, suf, ns * sizeof *suf);
            free(tok->prefix_ids);
            free(tok->suffix_ids);
            tok->prefix_ids = npre;
            tok->suffix_ids = nsuf;
            tok->n_prefix += np;
            tok->n_suffix += ns;
        }
    }
    free(pre);
    free(suf);
    return rc;
}

static int32_t load_decoder(struct loader *L, const json_t *d, int depth)
{
    if (!d || json_is_null(d))
        return fail(L, MM_UNSUPPORTED, "decoder: missing (only the ByteLevel decoder is supported)");
    if (!json_is_object(d) || !get_type(d)) return fail(L, MM_FORMAT, "decoder: no type");
    if (depth > 4) return fail(L, MM_UNSUPPORTED, "decoder: Sequence nested too deep");
    const char *type = get_type(d);
    if (strcmp(type, "ByteLevel") == 0) return MM_OK;
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(d, "decoders");
        if (!json_is_array(list) || json_array_size(list) == 0)
            return fail(L, MM_FORMAT, "decoder.decoders: not a non-empty array");
        for (size_t i = 0; i < json_array_size(list); i++) {
            int32_t rc = load_decoder(L, json_array_get(list, i), depth + 1);
            if (rc) return rc;
        }
        return MM_OK;
    }
    return fail(L, MM_UNSUPPORTED, "decoder type '%s' is not supported (only ByteLevel)", type);
}

/* ---- per-id table ---- */

static int32_t build_ids(struct loader *L)
{
    struct gw_tokenizer *tok = L->tok;
    uint64_t n = 0;
    if (tok->model_vocab.count) n = (uint64_t)L->max_vocab_id + 1;
    if (L->have_added && (uint64_t)L->max_added_id + 1 > n) n = (uint64_t)L->max_added_id + 1;
    tok->n_ids = (uint32_t)n;
    tok->ids = calloc(n ? n : 1, sizeof *tok->ids);
    if (!tok->ids) return nomem(L);
    for (uint64_t i = 0; i < n; i++) tok->ids[i].added = GW_TOK_NONE;

    /* Added tokens in id order (their current definition), owning the content strings. */
    tok->added = calloc(tok->added_map.count ? tok->added_map.count : 1, sizeof *tok->added);
    if (!tok->added) return nomem(L);
    for (uint64_t id = 0; id < n; id++) {
        uint32_t id32 = (uint32_t)id;
        uint32_t ti = gw_tok_strmap_get(&L->id_def, &id32, sizeof id32);
        if (ti == GW_TOK_NONE) continue;
        struct gw_tok_added *a = &tok->added[tok->n_added];
        *a = L->tokens[ti];
        a->content = malloc(a->len + 1);
        if (!a->content) return nomem(L);
        memcpy(a->content, L->tokens[ti].content, a->len + 1);
        tok->ids[id].added = tok->n_added++;
    }

    /* Strings and decoded bytes: model entries first, then added contents override (HF id_to_token). */
    size_t total = tok->model_vocab.blob_len + 1;
    for (uint32_t i = 0; i < tok->n_added; i++) total += tok->added[i].len + 1;
    tok->strs = malloc(total);
    tok->bytes = malloc(total);
    if (!tok->strs || !tok->bytes) return nomem(L);
    size_t so = 0, bo = 0;
    const struct gw_tok_strmap *v = &tok->model_vocab;
    for (uint32_t i = 0; i <= v->mask; i++) {
        const struct gw_tok_strslot *s = &v->slots[i];
        if (!s->hash) continue;
        struct gw_tok_idrec *r = &tok->ids[s->value];
        if (r->flags & GW_TOK_ID_PRESENT) continue; /* two strings with one id: keep the first seen */
        const char *str = v->blob + s->key_off;
        memcpy(tok->strs + so, str, s->key_len);
        r->str_off = (uint32_t)so;
        r->str_len = s->key_len;
        so += s->key_len;
        r->flags |= GW_TOK_ID_PRESENT;
    }
    for (uint32_t i = 0; i < tok->n_added; i++) {
        const struct gw_tok_added *a = &tok->added[i];
        struct gw_tok_idrec *r = &tok->ids[a->id];
        memcpy(tok->strs + so, a->content, a->len);
        r->str_off = (uint32_t)so;
        r->str_len = a->len;
        so += a->len;
        r->flags |= GW_TOK_ID_PRESENT | GW_TOK_ID_ADDED;
    }
    tok->strs_len = so;
    for (uint64_t id = 0; id < n; id++) {
        struct gw_tok_idrec *r = &tok->ids[id];
        if (!(r->flags & GW_TOK_ID_PRESENT)) continue;
        const uint8_t *str = (const uint8_t *)tok->strs + r->str_off;
        /* HF ByteLevel decoder: a token made only of byte characters becomes those bytes, any other
         * token contributes its own UTF-8 text. */
        size_t bl = bytelevel_decode(str, r->str_len, tok->bytes + bo);
        if (bl == SIZE_MAX) {
            memcpy(tok->bytes + bo, str, r->str_len);
            bl = r->str_len;
        }
        r->byte_off = (uint32_t)bo;
        r->byte_len = (uint32_t)bl;
        bo += bl;
        if (gw_tok_strmap_get(&L->special_set, str, r->str_len) != GW_TOK_NONE) r->flags |= GW_TOK_ID_SPECIAL;
    }
    tok->bytes_len = bo;
    return MM_OK;
}

/* Added-token tries: HF's special list then classic list, split by the `normalized` flag. */
static int32_t build_tries(struct loader *L)
{
    struct gw_tokenizer *tok = L->tok;
    for (int pass = 0; pass < 2; pass++) {
        const uint32_t *list = pass ? L->classic_list : L->special_list;
        uint32_t nl = pass ? L->n_classic_list : L->n_special_list;
        for (uint32_t i = 0; i < nl; i++) {
            const struct gw_tok_added *a = &L->tokens[list[i]];
            uint32_t id = token_to_id(L, a->content, a->len);
            if (id == GW_TOK_NONE || id >= tok->n_ids || tok->ids[id].added == GW_TOK_NONE) continue;
            if (!a->normalized) {
                if (gw_tok_trie_add(&tok->trie_raw, (const uint8_t *)a->content, a->len, id)) return nomem(L);
                continue;
            }
            uint8_t *norm = NULL;
            size_t nl2 = a->len;
            int32_t rc = gw_tok_normalize(tok, (const uint8_t *)a->content, a->len, &norm, &nl2, L->err);
            if (rc) {
                mm_err_prefix(L->err, "%s: added token '%.40s'", L->name, a->content);
                return rc;
            }
            int bad = gw_tok_trie_add(&tok->trie_norm, norm ? norm : (const uint8_t *)a->content, nl2, id);
            free(norm);
            if (bad) return nomem(L);
        }
    }
    return MM_OK;
}

/* ---- entry points ---- */

static void loader_free(struct loader *L)
{
    for (uint32_t i = 0; i < L->n_tokens; i++) free(L->tokens[i].content);
    free(L->tokens);
    free(L->special_list);
    free(L->classic_list);
    gw_tok_strmap_free(&L->special_set);
    gw_tok_strmap_free(&L->id_def);
    free(L->merge_buf);
}

int32_t gw_tokenizer_load_mem(const char *json, size_t len, const char *name, struct gw_tokenizer **out,
                              struct mm_err *err)
{
    if (!out) return mm_err_set(err, MM_INVALID, "tokenizer: NULL output");
    *out = NULL;
    if (!name) name = "tokenizer.json";
    if (!json) return mm_err_set(err, MM_INVALID, "%s: NULL input", name);
    /* The big members are read in place; jansson parses the rest with them blanked out. */
    struct gw_tok_jspan vs, ms;
    char *reduced = NULL;
    int fast = gw_tok_json_find_model_parts(json, len, &vs, &ms) == 0;
    size_t reduced_len = len;
    if (fast) {
        /* Cut the two spans out (jansson would otherwise still scan megabytes of blanks); they are
         * normally the last members of the file, so error line numbers elsewhere are unchanged. */
        reduced = malloc(len + 5);
        if (!reduced) return mm_err_set(err, MM_NOMEM, "%s: out of memory", name);
        struct gw_tok_jspan first = vs, second = ms;
        const char *fr = "{}", *sr = "[]";
        if (ms.end > ms.start && ms.start < vs.start) {
            first = ms, second = vs;
            fr = "[]", sr = "{}";
        }
        size_t o = 0;
        memcpy(reduced + o, json, first.start);
        o += first.start;
        memcpy(reduced + o, fr, 2);
        o += 2;
        size_t after = first.end;
        if (second.end > second.start) {
            memcpy(reduced + o, json + after, second.start - after);
            o += second.start - after;
            memcpy(reduced + o, sr, 2);
            o += 2;
            after = second.end;
        }
        memcpy(reduced + o, json + after, len - after);
        reduced_len = o + len - after;
    }
    json_error_t je;
    json_t *root = json_loadb(fast ? reduced : json, reduced_len, JSON_ALLOW_NUL, &je);
    free(reduced);
    if (!root) return mm_err_set(err, MM_FORMAT, "%s:%d:%d: %s", name, je.line, je.column, je.text);
    struct gw_tokenizer *tok = calloc(1, sizeof *tok);
    struct loader L = {.tok = tok,
                       .name = name,
                       .err = err,
                       .fast = fast,
                       .json = json,
                       .vocab_span = vs,
                       .merges_span = ms};
    int32_t rc = MM_OK;
    if (!tok) {
        json_decref(root);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory", name);
    }
    if (!json_is_object(root)) rc = fail(&L, MM_FORMAT, "top level is not an object");
    /* HF would cut or pad every encoding to these lengths; the gateway enforces its own limits. */
    for (int i = 0; !rc && i < 2; i++) {
        const json_t *v = json_object_get(root, i ? "padding" : "truncation");
        if (v && !json_is_null(v))
            mm_log_warn("tokenizer", "%s: \"%s\" is set and ignored (encode never truncates or pads)", name,
                        i ? "padding" : "truncation");
    }
    if (!rc) rc = load_model(&L, json_object_get(root, "model"));
    if (!rc) rc = load_normalizer(&L, json_object_get(root, "normalizer"), 0);
    if (!rc) rc = load_added(&L, json_object_get(root, "added_tokens"));
    if (!rc) {
        const json_t *pt = json_object_get(root, "pre_tokenizer");
        if (pt && !json_is_null(pt)) rc = load_pretok(&L, pt, 0);
        if (!rc) rc = check_steps(&L);
    }
    if (!rc) rc = load_post(&L, json_object_get(root, "post_processor"), 0);
    if (!rc) rc = load_decoder(&L, json_object_get(root, "decoder"), 0);
    if (!rc) rc = build_ids(&L);
    if (!rc) rc = build_tries(&L);
    if (!rc) {
        for (uint32_t i = 0; i < tok->n_prefix + tok->n_suffix; i++) {
            uint32_t id = i < tok->n_prefix ? tok->prefix_ids[i] : tok->suffix_ids[i - tok->n_prefix];
            if (id >= tok->n_ids) {
                rc = fail(&L, MM_FORMAT, "post_processor: id %u is not a token", id);
                break;
            }
        }
    }
    if (!rc && gw_tok_tls_init_key(tok)) rc = fail(&L, MM_NOMEM, "no thread-local key left");
    loader_free(&L);
    json_decref(root);
    if (rc) {
        gw_tokenizer_free(tok);
        return rc;
    }
    *out = tok;
    return MM_OK;
}

int32_t gw_tokenizer_load_file(const char *path, struct gw_tokenizer **out, struct mm_err *err)
{
    if (!out) return mm_err_set(err, MM_INVALID, "tokenizer: NULL output");
    *out = NULL;
    if (!path) return mm_err_set(err, MM_INVALID, "tokenizer: NULL path");
    FILE *f = fopen(path, "rb");
    if (!f) return mm_err_set(err, MM_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
        fclose(f);
        return mm_err_set(err, MM_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > MAX_FILE_BYTES) {
        fclose(f);
        return mm_err_set(err, MM_TOO_LARGE, "%s: %lld bytes (limit %zu)", path, (long long)st.st_size,
                          MAX_FILE_BYTES);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory", path);
    }
    size_t got = fread(buf, 1, n, f);
    int rerr = ferror(f);
    fclose(f);
    if (rerr || got != n) {
        free(buf);
        return mm_err_set(err, MM_IO, "%s: read error", path);
    }
    int32_t rc = gw_tokenizer_load_mem(buf, n, path, out, err);
    free(buf);
    return rc;
}

void gw_tokenizer_free(struct gw_tokenizer *tok)
{
    if (!tok) return;
    gw_tok_tls_free_all(tok);
    for (int i = 0; i < tok->n_steps; i++) pcre2_code_free(tok->steps[i].re);
    for (uint32_t i = 0; i < tok->n_added; i++) free(tok->added[i].content);
    free(tok->added);
    free(tok->ids);
    free(tok->strs);
    free(tok->bytes);
    free(tok->prefix_ids);
    free(tok->suffix_ids);
    gw_tok_strmap_free(&tok->model_vocab);
    gw_tok_strmap_free(&tok->raw_vocab);
    gw_tok_strmap_free(&tok->added_map);
    gw_tok_mergemap_free(&tok->merges);
    gw_tok_trie_free(&tok->trie_raw);
    gw_tok_trie_free(&tok->trie_norm);
    free(tok);
}
