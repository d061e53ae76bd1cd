/* mmgw-mktokenizer: write a byte-level BPE tokenizer.json (HF format) for the demo model, shaped like
 * MiniMax-M3's: NFC normalizer, Split(M3 regex, Isolated) + ByteLevel pre-tokenizer, ByteLevel decoder,
 * the 256 byte tokens, merges learned from a built-in text (or --corpus), and M3's special and marker
 * tokens as added tokens at the same offsets as in M3 (M3 id 200000 + k -> our id base + k).
 *
 * usage: mmgw-mktokenizer --out tokenizer.json [--merges N] [--corpus FILE] [--min-count K] [--pad]
 *   --merges N     merges to learn (default 400); fewer if the text has no more pairs seen K times
 *   --corpus FILE  learn from this UTF-8 file instead of the built-in text
 *   --min-count K  a pair must occur at least K times to be merged (default 2)
 *   --pad          fill up to N merges with synthetic ones (large-vocabulary benchmarks)
 * The file is loaded back and checked (ids, round trip) before the tool reports success. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_tok_internal.h"
#include "gw_tokenizer.h"
#include "mkt_text.h"
#include "mkt_train.h"
#include "mm_text.h"

#define M3_SPECIAL_SLOTS 64 /* ids 200000..200063 in MiniMax-M3 */

static const char M3_SPLIT_REGEX[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* M3's added tokens by offset from 200000 (../shared/docs/M3_CHAT.md section 5). Markers the chat parsers
 * must see in decoded text (think and tool-call tags, the ]<]minimax[>[ namespace) are not special, so
 * skip_special_tokens keeps them. */
static const struct {
    int offset;
    const char *content;
    int special;
} M3_TOKENS[] = {
    {0, "]!p~[", 1},
    {19, "]~b]", 1},
    {20, "[e~[", 1},
    {21, "]!d~[", 1},
    {25, "]<]image[>[", 1},
    {26, "]<]video[>[", 1},
    {29, "]<]start of image[>[", 1},
    {30, "]<]end of image[>[", 1},
    {31, "]<]start of video[>[", 1},
    {32, "]<]end of video[>[", 1},
    {33, "]<]vision pad[>[", 1},
    {34, "]~!b[", 1},
    {50, "<think>", 0},
    {51, "</think>", 0},
    {52, "<tool_call>", 0},
    {53, "</tool_call>", 0},
    {54, "]<]frame[>[", 1},
    {55, "]<]start of frame[>[", 1},
    {56, "]<]end of frame[>[", 1},
    {57, "<|content_altered_placeholder|>", 1},
    {58, "]<]minimax[>[", 0},
    {59, "<mm:think>", 0},
    {60, "</mm:think>", 0},
};

struct vocab {
    char **str; /* token text (byte-level characters), by id */
    size_t n, cap;
    struct gw_tok_strmap index;
};

static int vocab_add(struct vocab *v, char *s)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 1024;
        char **ns = realloc(v->str, cap * sizeof *ns);
        if (!ns) return -1;
        v->str = ns;
        v->cap = cap;
    }
    if (gw_tok_strmap_put(&v->index, s, strlen(s), (uint32_t)v->n)) return -1;
    v->str[v->n++] = s;
    return 0;
}

static char *concat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

/* The tokenizer.json document; merges as "a b" strings. */
static json_t *build_json(const struct vocab *v, const uint32_t *L, const uint32_t *R, size_t nm,
                          uint32_t base)
{
    json_t *added = json_array();
    for (int k = 0; k < M3_SPECIAL_SLOTS; k++) {
        char filler[48];
        const char *content = NULL;
        int special = 1;
        for (size_t i = 0; i < sizeof M3_TOKENS / sizeof M3_TOKENS[0]; i++)
            if (M3_TOKENS[i].offset == k) {
                content = M3_TOKENS[i].content;
                special = M3_TOKENS[i].special;
            }
        if (!content) { /* keep ids contiguous: HF renumbers added tokens that leave gaps */
            snprintf(filler, sizeof filler, "<|mmgw_reserved_%d|>", k);
            content = filler;
        }
        json_array_append_new(added,
                              json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)(base + k),
                                        "content", content, "single_word", 0, "lstrip", 0, "rstrip", 0,
                                        "normalized", 0, "special", special));
    }
    json_t *vocab = json_object();
    for (size_t i = 0; i < v->n; i++) json_object_set_new(vocab, v->str[i], json_integer((json_int_t)i));
    json_t *merges = json_array();
    for (size_t i = 0; i < nm; i++) {
        size_t la = strlen(v->str[L[i]]), lb = strlen(v->str[R[i]]);
        char *m = malloc(la + lb + 2);
        if (!m) break;
        memcpy(m, v->str[L[i]], la);
        m[la] = ' ';
        memcpy(m + la + 1, v->str[R[i]], lb + 1);
        json_array_append_new(merges, json_string(m));
        free(m);
    }
    json_t *model = json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout",
                              "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0,
                              "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab, "merges", merges);
    json_t *pre = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type", "Sequence",
                            "pretokenizers", "type", "Split", "pattern", "Regex", M3_SPLIT_REGEX, "behavior",
                            "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0,
                            "trim_offsets", 1, "use_regex", 0);
    return json_pack("{s:s, s:n, s:n, s:o, s:{s:s}, s:o, s:n, s:{s:s, s:b, s:b, s:b}, s:o}", "version", "1.0",
                     "truncation", "padding", "added_tokens", added, "normalizer", "type", "NFC",
                     "pre_tokenizer", pre, "post_processor", "decoder", "type", "ByteLevel",
                     "add_prefix_space", 1, "trim_offsets", 1, "use_regex", 1, "model", model);
}

struct train_ctx {
    struct mkt_trainer *tr;
    const uint16_t *byte_id;
    struct mm_err *err;
};

static int32_t on_pretoken(void *ctx, const uint8_t *s, size_t n)
{
    struct train_ctx *c = ctx;
    return mkt_trainer_add_word(c->tr, s, n, c->byte_id, c->err);
}

/* Pre-tokenize text exactly as the finished tokenizer will (a merge-less copy of it) and count words. */
static int32_t count_words(const struct vocab *v, const char *text, size_t len, struct mkt_trainer *tr,
                           const uint16_t byte_id[256], struct mm_err *err)
{
    json_t *doc = build_json(v, NULL, NULL, 0, (uint32_t)v->n);
    char *s = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (!s) return mm_err_set(err, MM_NOMEM, "out of memory");
    struct gw_tokenizer *tok = NULL;
    int32_t rc = gw_tokenizer_load_mem(s, strlen(s), "skeleton", &tok, err);
    free(s);
    if (rc) return rc;
    struct gw_tok_tls *tls = gw_tok_tls_get(tok);
    struct train_ctx c = {tr, byte_id, err};
    size_t pos = 0;
    while (!rc && pos < len) {
        size_t end = pos + 65536 < len ? pos + 65536 : len;
        while (end < len && text[end] != '\n') end++;
        uint8_t *norm = NULL;
        size_t nl = end - pos;
        rc = gw_tok_normalize(tok, (const uint8_t *)text + pos, end - pos, &norm, &nl, err);
        if (!rc)
            rc = gw_tok_pretokenize_with(tok, tls, norm ? norm : (const uint8_t *)text + pos, nl, on_pretoken,
                                         &c, err);
        free(norm);
        pos = end;
    }
    gw_tokenizer_free(tok);
    return rc;
}

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    size_t got;
    while (b && (got = fread(b + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    *n = len;
    return b;
}

/* Load the written file and check what the gateway and mmgw-mkdemo rely on. */
static int verify(const char *path, const char *text, size_t len, uint32_t base, size_t n_vocab)
{
    struct mm_err e;
    struct gw_tokenizer *tok;
    if (gw_tokenizer_load_file(path, &tok, &e)) {
        fprintf(stderr, "mmgw-mktokenizer: written file does not load: %s\n", e.msg);
        return 1;
    }
    int bad = 0;
    if (gw_tokenizer_vocab_size(tok) != n_vocab + M3_SPECIAL_SLOTS) bad = 1;
    for (size_t i = 0; i < sizeof M3_TOKENS / sizeof M3_TOKENS[0]; i++) {
        uint32_t id;
        if (gw_tokenizer_token_to_id(tok, M3_TOKENS[i].content, strlen(M3_TOKENS[i].content), &id) ||
            id != base + (uint32_t)M3_TOKENS[i].offset)
            bad = 1;
    }
    struct gw_tok_ids ids = {0};
    struct mm_buf out;
    mm_buf_init(&out, 0);
    if (gw_tokenizer_encode(tok, text, len, 0, &ids, &e) ||
        gw_tokenizer_decode(tok, ids.ids, ids.n, 0, &out, &e))
        bad = 1;
    else if (out.len != len || memcmp(out.data, text, len) != 0)
        bad = 1; /* the texts used here are already NFC */
    if (bad)
        fprintf(stderr, "mmgw-mktokenizer: %s failed its self-check\n", path);
    else
        printf("wrote %s: vocab %u (256 bytes, %zu merges, %d added); ]<]image[>[ = %u, ]<]video[>[ = %u, "
               "[e~[ = %u; %zu bytes of text -> %zu tokens\n",
               path, gw_tokenizer_vocab_size(tok), n_vocab - 256, M3_SPECIAL_SLOTS, base + 25, base + 26,
               base + 20, len, ids.n);
    mm_buf_free(&out);
    gw_tok_ids_free(&ids);
    gw_tokenizer_free(tok);
    return bad;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: mmgw-mktokenizer --out tokenizer.json [--merges N] [--corpus FILE] [--min-count K] "
            "[--pad]\n");
}

int main(int argc, char **argv)
{
    const char *out = NULL, *corpus = NULL;
    int64_t merges = 400, min_count = 2;
    int pad = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--pad")) {
            pad = 1;
            continue;
        }
        if (i + 1 >= argc) {
            usage();
            return 2;
        }
        if (!strcmp(a, "--out"))
            out = argv[++i];
        else if (!strcmp(a, "--corpus"))
            corpus = argv[++i];
        else if (!strcmp(a, "--merges") || !strcmp(a, "--min-count")) {
            int is_merges = !strcmp(a, "--merges");
            if (mm_parse_i64(argv[++i], is_merges ? 0 : 1, 4000000, is_merges ? &merges : &min_count)) {
                fprintf(stderr, "mmgw-mktokenizer: bad value for %s: '%s'\n", a, argv[i]);
                return 2;
            }
        } else {
            usage();
            return 2;
        }
    }
    if (!out) {
        usage();
        return 2;
    }
    size_t len = 0;
    char *owned = NULL;
    const char *text = mkt_builtin_text;
    if (corpus) {
        owned = read_all(corpus, &len);
        if (!owned) {
            fprintf(stderr, "mmgw-mktokenizer: cannot read %s\n", corpus);
            return 1;
        }
        text = owned;
    } else {
        len = strlen(mkt_builtin_text);
    }

    /* 256 byte tokens in code-point order (as HF's trainer orders its alphabet). */
    struct vocab v = {0};
    uint16_t byte_id[256];
    struct mm_err e;
    int rc = 1;
    uint32_t *L = NULL, *R = NULL;
    size_t nm = 0;
    struct mkt_trainer *tr = mkt_trainer_create();
    if (!tr || gw_tok_strmap_init(&v.index, 4096)) goto done;
    for (uint32_t cp = 0; cp < 0x200; cp++) {
        int b = gw_tok_cp_to_byte(cp);
        if (b < 0) continue;
        char *s = malloc(3);
        if (!s) goto done;
        if (cp < 0x80) {
            s[0] = (char)cp;
            s[1] = 0;
        } else {
            s[0] = (char)(0xC0 | (cp >> 6));
            s[1] = (char)(0x80 | (cp & 0x3F));
            s[2] = 0;
        }
        byte_id[b] = (uint16_t)v.n;
        if (vocab_add(&v, s)) goto done;
    }
    if (count_words(&v, text, len, tr, byte_id, &e) ||
        mkt_trainer_run(tr, (size_t)merges, (uint64_t)min_count, &L, &R, &nm, &e)) {
        fprintf(stderr, "mmgw-mktokenizer: %s\n", e.msg);
        goto done;
    }
    for (size_t i = 0; i < nm; i++) {
        char *s = concat(v.str[L[i]], v.str[R[i]]);
        if (!s || vocab_add(&v, s)) goto done;
    }
    if (pad && nm < (size_t)merges) {
        /* Synthetic merges of two existing tokens into a new string, after all learned ones. */
        uint32_t *nl = realloc(L, (size_t)merges * sizeof *nl), *nr = realloc(R, (size_t)merges * sizeof *nr);
        if (nl) L = nl;
        if (nr) R = nr;
        if (!nl || !nr) goto done;
        uint64_t x = 0x9E3779B97F4A7C15ull;
        while (nm < (size_t)merges) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            uint32_t a = (uint32_t)((x >> 8) % v.n), b = (uint32_t)((x >> 36) % v.n);
            if (strlen(v.str[a]) + strlen(v.str[b]) > 48) continue;
            char *s = concat(v.str[a], v.str[b]);
            if (!s) goto done;
            if (gw_tok_strmap_get(&v.index, s, strlen(s)) != GW_TOK_NONE) {
                free(s);
                continue;
            }
            L[nm] = a;
            R[nm] = b;
            nm++;
            if (vocab_add(&v, s)) goto done;
        }
    }
    if (nm < (size_t)merges && !pad)
        fprintf(stderr, "mmgw-mktokenizer: the text supports %zu merges (of %ld asked)\n", nm, merges);
    json_t *doc = build_json(&v, L, R, nm, (uint32_t)v.n);
    if (!doc || json_dump_file(doc, out, JSON_INDENT(2))) {
        fprintf(stderr, "mmgw-mktokenizer: cannot write %s\n", out);
        json_decref(doc);
        goto done;
    }
    json_decref(doc);
    rc = verify(out, text, len, (uint32_t)v.n, v.n);
done:
    for (size_t i = 0; i < v.n; i++) free(v.str[i]);
    free(v.str);
    gw_tok_strmap_free(&v.index);
    mkt_trainer_destroy(tr);
    free(L);
    free(R);
    free(owned);
    return rc;
}
