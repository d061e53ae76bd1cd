/* The gateway tokenizer: HF `tokenizer.json` byte-level BPE, encoding exactly as HF `tokenizers` does.
 *
 * Pipeline (HF's order): added/special tokens are cut out of the raw text (leftmost-longest, with the
 * tokens' lstrip/rstrip/single_word flags), each remaining piece is normalized (NFC/NFD/NFKC/NFKD or
 * none) and searched again for the added tokens marked `normalized`, then pre-tokenized (Split regexes
 * through PCRE2-JIT, then ByteLevel), and every pre-token goes through BPE merges by rank. Decoding maps
 * ids back to bytes (ByteLevel) and replaces invalid UTF-8 exactly as Rust's String::from_utf8_lossy.
 *
 * Threads: a loaded tokenizer is immutable and may be used by any number of threads at once. Each
 * thread that encodes gets its own scratch (PCRE2 match data, JIT stack, a bounded pre-token cache),
 * created on first use and freed when the thread exits or the tokenizer is freed. Free a tokenizer
 * only when no thread uses it any more (e.g. after draining on reload).
 *
 * Errors: functions return 0 (MM_OK) or a negative mm_status code with a one-line message in err
 * (err may be NULL). Bad input (malformed JSON, invalid UTF-8 text, out-of-range ids) never crashes. */
#ifndef GW_TOKENIZER_H
#define GW_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "mm_buf.h"
#include "mm_status.h"

struct gw_tokenizer;

/** Hard cap on token ids accepted from a tokenizer.json (vocab + added tokens): 4 M ids, 16x the largest
 * vocabularies in use, so a hostile file cannot make the loader allocate gigabytes. */
#define GW_TOK_MAX_ID (1u << 22)

/* ---- loading ---- */

/** Load a tokenizer.json file. On success *out owns the tokenizer (gw_tokenizer_free). Errors name the
 * file and the JSON field ("model.merges[12]: token 'xy' not in vocab"); unsupported components
 * (non-BPE models, unknown normalizers or pre-tokenizers) are refused with MM_UNSUPPORTED. */
int32_t gw_tokenizer_load_file(const char *path, struct gw_tokenizer **out, struct mm_err *err);
/** Same from memory (json need not be NUL-terminated). name labels error messages (may be NULL). */
int32_t gw_tokenizer_load_mem(const char *json, size_t len, const char *name, struct gw_tokenizer **out,
                              struct mm_err *err);
/** Free a tokenizer and every per-thread scratch made for it. NULL is fine. */
void gw_tokenizer_free(struct gw_tokenizer *tok);

/* ---- vocabulary ---- */

/** Max token id + 1 over the model vocab and the added tokens (the embedding rows a model needs). */
uint32_t gw_tokenizer_vocab_size(const struct gw_tokenizer *tok);
/** The id of a token given by its text, as HF token_to_id: added tokens first ("]<]image[>[", "<|im_end|>"),
 * then the model vocab in its stored form ("Ġthe"). Returns MM_OK and *id, or MM_NOT_FOUND. */
int32_t gw_tokenizer_token_to_id(const struct gw_tokenizer *tok, const char *text, size_t len, uint32_t *id);
/** The text of a token as HF id_to_token (added content, or the model's stored string such as "Ġthe").
 * Returns a pointer into the tokenizer (valid until free, not NUL-terminated) and its length in *len,
 * or NULL for an id with no token. */
const char *gw_tokenizer_id_to_token(const struct gw_tokenizer *tok, uint32_t id, size_t *len);
/** The bytes one token decodes to (ByteLevel mapping; may be a partial UTF-8 character). NULL for an
 * id with no token. Useful for stop strings and logprob byte arrays. */
const uint8_t *gw_tokenizer_token_bytes(const struct gw_tokenizer *tok, uint32_t id, size_t *len);
/** 1 when the id is a special token (removed by GW_TOK_SKIP_SPECIAL), else 0. */
int gw_tokenizer_is_special(const struct gw_tokenizer *tok, uint32_t id);

/** An added token as listed in tokenizer.json, after HF's id assignment. */
struct gw_tok_added_info {
    uint32_t id;
    const char *content; /* NUL-terminated, owned by the tokenizer */
    size_t content_len;
    uint8_t special, normalized, lstrip, rstrip, single_word;
};
/** Number of added tokens. */
uint32_t gw_tokenizer_added_count(const struct gw_tokenizer *tok);
/** The i-th added token (0 <= i < count), in ascending id order. Returns MM_OK or MM_NOT_FOUND. */
int32_t gw_tokenizer_added_get(const struct gw_tokenizer *tok, uint32_t i, struct gw_tok_added_info *info);

/* ---- encoding ---- */

/** Encode flags. */
enum {
    GW_TOK_ADD_SPECIAL = 1u << 0, /* apply the post_processor template (BOS/EOS...), as add_special_tokens */
};

/** A growable id array owned by the caller. Zero-initialise (or gw_tok_ids_init) before first use. */
struct gw_tok_ids {
    uint32_t *ids;
    size_t n, cap;
};
void gw_tok_ids_init(struct gw_tok_ids *v);
void gw_tok_ids_free(struct gw_tok_ids *v);
/** Append n ids (placeholders, template tokens...). Returns 0, or -1 when out of memory. */
int gw_tok_ids_append(struct gw_tok_ids *v, const uint32_t *ids, size_t n);

/** Encode UTF-8 text and APPEND the ids to out (so prompts can be built piece by piece). Text that is
 * not valid UTF-8 is refused with MM_INVALID naming the byte offset; nothing is appended on error.
 * Special tokens written in the text are recognised (HF behaviour); GW_TOK_ADD_SPECIAL additionally
 * applies the tokenizer's post_processor template. */
int32_t gw_tokenizer_encode(const struct gw_tokenizer *tok, const char *text, size_t len, uint32_t flags,
                            struct gw_tok_ids *out, struct mm_err *err);

/* ---- decoding ---- */

/** Decode flags. */
enum {
    GW_TOK_SKIP_SPECIAL = 1u << 0, /* drop special tokens, as skip_special_tokens */
};

/** Decode ids as HF Tokenizer::decode and APPEND the UTF-8 text to out: ids with no token are skipped,
 * invalid byte sequences become U+FFFD (one per maximal ill-formed subsequence, as Rust's
 * from_utf8_lossy and Unicode's "best practice"). MM_NOMEM when out cannot grow. */
int32_t gw_tokenizer_decode(const struct gw_tokenizer *tok, const uint32_t *ids, size_t n, uint32_t flags,
                            struct mm_buf *out, struct mm_err *err);

/** Incremental detokenizer for streaming. Feed ids one at a time; each push appends only complete UTF-8
 * characters to out, holding back an incomplete trailing sequence (at most 3 bytes) until it completes
 * or is known to be invalid (then U+FFFD). After gw_tok_stream_finish, the concatenation of everything
 * appended equals gw_tokenizer_decode of the whole id sequence. Embed it anywhere (no allocation);
 * one stream per generated sequence, not shared between threads. Fields are private. */
struct gw_tok_stream {
    const struct gw_tokenizer *tok;
    uint32_t flags;
    uint8_t pend[4];
    uint8_t npend;
    const uint32_t *keep; /* special ids shown despite GW_TOK_SKIP_SPECIAL (gw_tok_stream_keep) */
    size_t n_keep;
};
void gw_tok_stream_init(struct gw_tok_stream *s, const struct gw_tokenizer *tok, uint32_t flags);
/** Special ids that GW_TOK_SKIP_SPECIAL must still show (an output parser reads them as text, e.g. M3's
 * reasoning and tool-call markers when a tokenizer marks them special). The array is the caller's and must
 * outlive the stream; it is searched linearly, so keep it short (a handful of markers). */
void gw_tok_stream_keep(struct gw_tok_stream *s, const uint32_t *ids, size_t n);
/** Append the text that id completes (possibly nothing). MM_NOMEM when out cannot grow. */
int32_t gw_tok_stream_push(struct gw_tok_stream *s, uint32_t id, struct mm_buf *out, struct mm_err *err);
/** Same for several ids. */
int32_t gw_tok_stream_push_n(struct gw_tok_stream *s, const uint32_t *ids, size_t n, struct mm_buf *out,
                             struct mm_err *err);
/** End of sequence: a held-back incomplete sequence becomes one U+FFFD. The stream can be reused. */
int32_t gw_tok_stream_finish(struct gw_tok_stream *s, struct mm_buf *out, struct mm_err *err);
/** Bytes currently held back (0..3). */
size_t gw_tok_stream_pending(const struct gw_tok_stream *s);

#endif
