/* Fast in-place reader for model.vocab and model.merges of tokenizer.json (see gw_tok_json.c). Internal. */
#ifndef GW_TOK_JSON_H
#define GW_TOK_JSON_H

#include <stddef.h>
#include <stdint.h>

/* A JSON value's byte range [start, end) in the document. */
struct gw_tok_jspan {
    size_t start, end;
};

/** Find the values of "vocab" and "merges" inside the top-level "model" object (the last ones, as a
 * JSON DOM would keep). Returns 0 when vocab was found, -1 when the document is not shaped as expected
 * (the caller then falls back to jansson, which reports the error). merges may come back empty. */
int gw_tok_json_find_model_parts(const char *s, size_t n, struct gw_tok_jspan *vocab,
                                 struct gw_tok_jspan *merges);

/** Called per vocab entry; key is not NUL-terminated and only valid during the call. Non-zero stops. */
typedef int32_t (*gw_tok_json_vocab_fn)(void *ctx, const char *key, size_t key_len, int64_t id);
/** Called per merge: either a = "x y" (b NULL) or the pair form [a, b]. Non-zero stops. */
typedef int32_t (*gw_tok_json_merge_fn)(void *ctx, size_t index, const char *a, size_t al, const char *b,
                                        size_t bl);

/** Parse an object of string -> integer. Returns 0, the callback's non-zero status, -1 (syntax), -2 (out
 * of memory) or -3 (a non-integer number); *bad_at is the byte offset where parsing stopped. */
int32_t gw_tok_json_parse_vocab(const char *s, struct gw_tok_jspan span, gw_tok_json_vocab_fn fn, void *ctx,
                                size_t *bad_at);
/** Parse an array of "a b" strings or [a, b] string pairs. Same returns. */
int32_t gw_tok_json_parse_merges(const char *s, struct gw_tok_jspan span, gw_tok_json_merge_fn fn, void *ctx,
                                 size_t *bad_at);

#endif
