/* Helpers for tokenizer tests: build small byte-level BPE tokenizer.json documents in memory, so tests
 * control every vocab entry and merge (and need no golden data). Byte tokens get ids 0..255 (id = byte
 * value), each merge adds one token with id 256 + its index. */
#ifndef TOK_TEST_UTIL_H
#define TOK_TEST_UTIL_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_tokenizer.h"

/* GPT-2 bytes_to_unicode, written out from its definition (independent of the library's version). */
static inline unsigned tt_byte_cp(unsigned b)
{
    static unsigned table[256];
    static int init;
    if (!init) {
        int n = 0;
        for (unsigned x = 0; x < 256; x++) {
            int printable = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE);
            table[x] = printable ? x : 256 + (unsigned)n++;
        }
        init = 1;
    }
    return table[b & 0xFF];
}

/* Append the byte-level form of raw bytes s to out (UTF-8). */
static inline void tt_map(const char *s, size_t n, char *out, size_t *olen)
{
    for (size_t i = 0; i < n; i++) {
        unsigned cp = tt_byte_cp((unsigned char)s[i]);
        if (cp < 0x80) {
            out[(*olen)++] = (char)cp;
        } else {
            out[(*olen)++] = (char)(0xC0 | (cp >> 6));
            out[(*olen)++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[*olen] = '\0';
}

/* A tokenizer.json text: byte tokens, merges[i] = {left, right} in raw bytes, and extra top-level
 * members given as a JSON object text (may be NULL). Defaults: no normalizer, ByteLevel pre-tokenizer
 * without regex, ByteLevel decoder. Caller frees the result. */
static inline char *tt_json(const char *const (*merges)[2], size_t n_merges, const char *extra)
{
    json_t *vocab = json_object();
    json_t *ml = json_array();
    char buf[1024];
    for (unsigned b = 0; b < 256; b++) {
        size_t l = 0;
        char c = (char)b;
        tt_map(&c, 1, buf, &l);
        json_object_set_new(vocab, buf, json_integer(b));
    }
    for (size_t i = 0; i < n_merges; i++) {
        char a[256], bb[256], ab[512];
        size_t la = 0, lb = 0, lab = 0;
        tt_map(merges[i][0], strlen(merges[i][0]), a, &la);
        tt_map(merges[i][1], strlen(merges[i][1]), bb, &lb);
        snprintf(buf, sizeof buf, "%s %s", a, bb);
        json_array_append_new(ml, json_string(buf));
        memcpy(ab, a, la);
        memcpy(ab + la, bb, lb + 1);
        lab = la + lb;
        (void)lab;
        if (!json_object_get(vocab, ab)) json_object_set_new(vocab, ab, json_integer((json_int_t)(256 + i)));
    }
    json_t *model =
        json_pack("{s:s, s:o, s:o, s:b}", "type", "BPE", "vocab", vocab, "merges", ml, "ignore_merges", 0);
    json_t *root =
        json_pack("{s:s, s:o, s:n, s:{s:s, s:b, s:b, s:b}, s:{s:s}, s:n}", "version", "1.0", "model", model,
                  "normalizer", "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets",
                  1, "use_regex", 0, "decoder", "type", "ByteLevel", "post_processor");
    if (extra) {
        json_error_t je;
        json_t *x = json_loads(extra, 0, &je);
        if (!x) {
            fprintf(stderr, "tt_json: bad extra JSON: %s\n", je.text);
            exit(1);
        }
        json_object_update(root, x);
        json_decref(x);
    }
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

static inline struct gw_tokenizer *tt_load(const char *const (*merges)[2], size_t n_merges, const char *extra)
{
    char *s = tt_json(merges, n_merges, extra);
    struct gw_tokenizer *tok = NULL;
    struct mm_err e;
    if (gw_tokenizer_load_mem(s, strlen(s), "test", &tok, &e)) {
        fprintf(stderr, "tt_load: %s\n", e.msg);
        free(s);
        exit(1);
    }
    free(s);
    return tok;
}

/* Encode and compare with the expected ids; prints both on mismatch. Returns 1 when equal. */
static inline int tt_encode_is(const struct gw_tokenizer *tok, const char *text, size_t len, uint32_t flags,
                               const uint32_t *want, size_t n_want)
{
    struct gw_tok_ids ids = {0};
    struct mm_err e;
    int32_t rc = gw_tokenizer_encode(tok, text, len, flags, &ids, &e);
    int ok =
        rc == MM_OK && ids.n == n_want && (n_want == 0 || memcmp(ids.ids, want, n_want * sizeof *want) == 0);
    if (!ok) {
        fprintf(stderr, "  encode '%.*s': rc %d (%s)\n   got :", (int)len, text, rc, rc ? e.msg : "");
        for (size_t i = 0; i < ids.n; i++) fprintf(stderr, " %u", ids.ids[i]);
        fprintf(stderr, "\n   want:");
        for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %u", want[i]);
        fprintf(stderr, "\n");
    }
    gw_tok_ids_free(&ids);
    return ok;
}

#define TT_IDS(...)                                                                                          \
    ((const uint32_t[]){__VA_ARGS__}), (sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t))

#endif
