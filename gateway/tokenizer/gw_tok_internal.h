/* Internal layout of a loaded tokenizer, shared by the gw_tok_*.c files. Not part of the API. */
#ifndef GW_TOK_INTERNAL_H
#define GW_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_tokenizer.h"

#define GW_TOK_NONE UINT32_MAX
#define GW_TOK_MAX_STAGES 8 /* pre-tokenizer steps after flattening Sequence */
#define GW_TOK_MAX_NORMS 8  /* normalizer steps after flattening Sequence */

/* ---- hash maps (gw_tok_map.c) ---- */

/* Byte string -> uint32 value, open addressing. Keys are copied into the map's own blob. */
struct gw_tok_strmap {
    struct gw_tok_strslot {
        uint32_t hash; /* 0 = empty slot (real hashes are forced non-zero) */
        uint32_t value;
        uint32_t key_off;
        uint32_t key_len;
    } * slots;
    uint32_t mask, count;
    char *blob;
    size_t blob_len, blob_cap;
};
int gw_tok_strmap_init(struct gw_tok_strmap *m, size_t expected);
void gw_tok_strmap_free(struct gw_tok_strmap *m);
/** Insert or overwrite (HF maps keep the last value). Returns 0 or -1 on out of memory. */
int gw_tok_strmap_put(struct gw_tok_strmap *m, const void *key, size_t len, uint32_t value);
/** The value for key, or GW_TOK_NONE. */
uint32_t gw_tok_strmap_get(const struct gw_tok_strmap *m, const void *key, size_t len);

/* (left id, right id) -> (rank, merged id), open addressing on a 64-bit key. */
struct gw_tok_mergemap {
    struct gw_tok_mergeslot {
        uint64_t key; /* UINT64_MAX = empty */
        uint32_t rank;
        uint32_t id;
    } * slots;
    uint32_t mask, count;
};
int gw_tok_mergemap_init(struct gw_tok_mergemap *m, size_t expected);
void gw_tok_mergemap_free(struct gw_tok_mergemap *m);
int gw_tok_mergemap_put(struct gw_tok_mergemap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t id);

static inline uint64_t gw_tok_pair_key(uint32_t a, uint32_t b)
{
    return ((uint64_t)a << 32) | b;
}
static inline const struct gw_tok_mergeslot *gw_tok_mergemap_get(const struct gw_tok_mergemap *m, uint32_t a,
                                                                 uint32_t b)
{
    uint64_t key = gw_tok_pair_key(a, b);
    uint32_t i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;
    for (;;) {
        const struct gw_tok_mergeslot *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
        i = (i + 1) & m->mask;
    }
}

/** 64-bit hash of a byte string (fast on short keys; not cryptographic). */
uint64_t gw_tok_hash_bytes(const void *p, size_t n);

/* ---- byte-level mapping (gw_tok_bytelevel.c) ---- */

/** The code point GPT-2's bytes_to_unicode maps byte b to. */
uint32_t gw_tok_byte_to_cp(uint8_t b);
/** The byte a code point stands for, or -1 when cp is not one of the 256 byte characters. */
int gw_tok_cp_to_byte(uint32_t cp);

/* ---- added tokens (gw_tok_added.c) ---- */

struct gw_tok_added {
    uint32_t id;
    char *content; /* NUL-terminated copy */
    uint32_t len;
    uint8_t special, normalized, lstrip, rstrip, single_word;
};

/* A byte trie over added-token patterns; leftmost-longest search. */
struct gw_tok_trie {
    struct gw_tok_trie_node {
        uint32_t child;   /* first child, or 0 */
        uint32_t sibling; /* next sibling, or 0 */
        uint32_t value;   /* added-token id ending here, or GW_TOK_NONE */
        uint8_t byte;
    } * nodes;
    uint32_t n_nodes, cap;
    uint8_t first[32]; /* bitmap of first bytes, to skip text quickly */
    uint32_t n_patterns;
};

/* ---- pre-tokenizer steps ---- */

enum gw_tok_step_kind { GW_TOK_STEP_SPLIT, GW_TOK_STEP_BYTELEVEL };
enum gw_tok_behavior {
    GW_TOK_ISOLATED,
    GW_TOK_REMOVED,
    GW_TOK_MERGED_WITH_PREVIOUS,
    GW_TOK_MERGED_WITH_NEXT,
    GW_TOK_CONTIGUOUS
};
struct gw_tok_step {
    int kind;
    int behavior;
    int invert;
    int add_prefix_space; /* ByteLevel */
    pcre2_code *re;       /* NULL: ByteLevel without regex */
    int jit;              /* re was JIT-compiled: match with pcre2_jit_match */
};

enum gw_tok_norm { GW_TOK_NFC, GW_TOK_NFD, GW_TOK_NFKC, GW_TOK_NFKD };

/* Per-id record. */
enum { GW_TOK_ID_PRESENT = 1, GW_TOK_ID_SPECIAL = 2, GW_TOK_ID_ADDED = 4 };
struct gw_tok_idrec {
    uint32_t str_off, str_len;   /* id_to_token text in tok->strs */
    uint32_t byte_off, byte_len; /* decoded bytes in tok->bytes */
    uint32_t added;              /* index in tok->added, or GW_TOK_NONE */
    uint8_t flags;
};

struct gw_tok_tls;

struct gw_tokenizer {
    uint32_t n_ids; /* vocab size: max id + 1 */
    struct gw_tok_idrec *ids;
    char *strs;
    size_t strs_len;
    uint8_t *bytes;
    size_t bytes_len;

    /* model (BPE) */
    struct gw_tok_strmap model_vocab; /* stored token string -> id */
    uint32_t model_vocab_len;         /* entries in model.vocab (HF get_vocab_size) */
    struct gw_tok_mergemap merges;
    uint32_t byte_id[256]; /* id of each single-byte token, GW_TOK_NONE if absent */
    int ignore_merges;
    struct gw_tok_strmap raw_vocab; /* decoded bytes -> id, only with ignore_merges */

    /* added tokens */
    struct gw_tok_added *added; /* by ascending id */
    uint32_t n_added;
    struct gw_tok_strmap added_map; /* content -> id */
    struct gw_tok_trie trie_raw;    /* non-normalized tokens, matched on the raw text */
    struct gw_tok_trie trie_norm;   /* normalized tokens, matched on normalized pieces */

    /* normalizer, pre-tokenizer, post-processor */
    int norms[GW_TOK_MAX_NORMS];
    int n_norms;
    struct gw_tok_step steps[GW_TOK_MAX_STAGES];
    int n_steps;
    uint32_t *prefix_ids, *suffix_ids; /* add_special_tokens template for one sequence */
    uint32_t n_prefix, n_suffix;

    /* per-thread scratch */
    pthread_key_t tls_key;
    int tls_key_ok;
    pthread_mutex_t tls_lock;
    struct gw_tok_tls *tls_all;
};

/* ---- normalization (gw_tok_normalize.c) ---- */

/** Apply the normalizer chain to s[0..n). *out is NULL when the text is already normal (use s), else a
 * malloc'd buffer of *out_len bytes the caller frees. */
int32_t gw_tok_normalize(const struct gw_tokenizer *tok, const uint8_t *s, size_t n, uint8_t **out,
                         size_t *out_len, struct mm_err *err);
/** Normalize one form on its own (used at load for `normalized` added tokens). */
int32_t gw_tok_normalize_form(int form, const uint8_t *s, size_t n, uint8_t **out, size_t *out_len,
                              struct mm_err *err);
/** Build the NFC quick-check table now (once per process, ~10 ms) rather than in the first request. */
void gw_tok_nfc_init(void);
/** 1 when every character of s is NFC-stable (quick check "yes" and combining class 0). */
int gw_tok_nfc_quick_yes(const uint8_t *s, size_t n);

/* ---- regex (gw_tok_regex.c) ---- */

/** Translate an Oniguruma pattern (HF's regex engine) to PCRE2 syntax with the same meaning. */
int32_t gw_tok_regex_translate(const char *pat, size_t len, struct mm_buf *out, struct mm_err *err);
/** Translate, compile (UTF, UCP) and JIT-compile. literal: the pattern is a plain string. */
int32_t gw_tok_regex_compile(const char *pat, size_t len, int literal, pcre2_code **out, struct mm_err *err);

/* ---- added-token tries (gw_tok_added.c) ---- */

int gw_tok_trie_add(struct gw_tok_trie *t, const uint8_t *s, size_t n, uint32_t value);
void gw_tok_trie_free(struct gw_tok_trie *t);
/** Leftmost-longest match in s[from..n): returns 1 and sets *start, *end, *value, or 0. */
int gw_tok_trie_find(const struct gw_tok_trie *t, const uint8_t *s, size_t n, size_t from, size_t *start,
                     size_t *end, uint32_t *value);

/** One piece of an added-token split: an added token (id != NONE) or text s[start..end). */
typedef int32_t (*gw_tok_piece_fn)(void *ctx, uint32_t id, const uint8_t *s, size_t start, size_t end);
/** HF AddedVocabulary::find_matches over s[0..n) with trie t, calling fn for each piece in order. */
int32_t gw_tok_added_split(const struct gw_tokenizer *tok, const struct gw_tok_trie *t, const uint8_t *s,
                           size_t n, gw_tok_piece_fn fn, void *ctx);

/* ---- per-thread scratch (gw_tok_tls.c) ---- */

struct gw_tok_cache {
    struct gw_tok_cache_slot {
        uint64_t hash; /* 0 = empty */
        uint32_t off;  /* key bytes at pool+off, then the ids (4-aligned) */
        uint16_t key_len;
        uint16_t n_ids;
    } * slots;
    uint32_t mask, count, max_count;
    uint8_t *pool;
    size_t pool_len, pool_cap;
};

struct gw_tok_split {
    size_t start, end;
    int is_match;
};
struct gw_tok_splitvec {
    struct gw_tok_split *v;
    size_t n, cap;
};

struct gw_tok_tls {
    struct gw_tok_tls *next, *prev; /* in tok->tls_all */
    struct gw_tokenizer *tok;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    struct gw_tok_cache cache;
    struct gw_tok_splitvec splits[GW_TOK_MAX_STAGES];
    uint8_t *prefix_buf; /* ByteLevel add_prefix_space copies */
    size_t prefix_cap;
    /* BPE scratch */
    uint32_t *sym;
    size_t sym_cap;
    void *heap;
    size_t heap_cap;
};

/** This thread's scratch for tok, created on first use; NULL on out of memory. */
struct gw_tok_tls *gw_tok_tls_get(const struct gw_tokenizer *tok);
int gw_tok_tls_init_key(struct gw_tokenizer *tok);
/** Free every thread's scratch (at gw_tokenizer_free). */
void gw_tok_tls_free_all(struct gw_tokenizer *tok);
/** Free scratch buffers that grew past everyday sizes (called after each encode). */
void gw_tok_tls_trim(struct gw_tok_tls *t);
/** Grow a split vector. Returns 0 or -1. */
int gw_tok_splitvec_push(struct gw_tok_splitvec *v, size_t start, size_t end, int is_match);

/* ---- pre-token cache (gw_tok_cache.c) ---- */

int gw_tok_cache_init(struct gw_tok_cache *c);
void gw_tok_cache_free(struct gw_tok_cache *c);
/** Cached ids for key, or NULL; *n_ids is set on a hit. */
const uint32_t *gw_tok_cache_get(const struct gw_tok_cache *c, uint64_t hash, const uint8_t *key, size_t len,
                                 size_t *n_ids);
/** Remember ids for key (silently skipped when too large; clears itself when full). */
void gw_tok_cache_put(struct gw_tok_cache *c, uint64_t hash, const uint8_t *key, size_t len,
                      const uint32_t *ids, size_t n_ids);

/* ---- BPE (gw_tok_bpe.c) ---- */

/** Merge the symbols sym[0..n) in place by rank (HF's order); returns the new count, or SIZE_MAX when
 * scratch memory ran out. */
size_t gw_tok_bpe_merge(const struct gw_tok_mergemap *m, uint32_t *sym, size_t n, struct gw_tok_tls *tls);
/** The two merge strategies, exposed for tests that check they agree. */
size_t gw_tok_bpe_merge_scan(const struct gw_tok_mergemap *m, uint32_t *sym, size_t n);
size_t gw_tok_bpe_merge_heap(const struct gw_tok_mergemap *m, uint32_t *sym, size_t n, void *scratch);
/* (scratch NULL: allocate it; SIZE_MAX on out of memory) */
/** Scratch bytes gw_tok_bpe_merge_heap needs for n symbols. */
size_t gw_tok_bpe_heap_scratch(size_t n);

/** Append the ids of one pre-token (raw bytes) to out: cache, ignore_merges, BPE. */
int32_t gw_tok_bpe_word(const struct gw_tokenizer *tok, struct gw_tok_tls *tls, const uint8_t *s, size_t n,
                        struct gw_tok_ids *out, struct mm_err *err);

/* ---- pre-tokenization (gw_tok_pretok.c) ---- */

/** Run the pre-tokenizer steps over s[0..n) and BPE every resulting pre-token into out. */
int32_t gw_tok_pretokenize(const struct gw_tokenizer *tok, struct gw_tok_tls *tls, const uint8_t *s, size_t n,
                           struct gw_tok_ids *out, struct mm_err *err);
/** Same, handing each pre-token (raw bytes, before ByteLevel mapping) to sink instead (tests, tools). */
typedef int32_t (*gw_tok_pretoken_fn)(void *ctx, const uint8_t *s, size_t n);
int32_t gw_tok_pretokenize_with(const struct gw_tokenizer *tok, struct gw_tok_tls *tls, const uint8_t *s,
                                size_t n, gw_tok_pretoken_fn sink, void *sink_ctx, struct mm_err *err);

/* ---- ids ---- */

/** Reserve room for extra more ids. Returns 0 or -1. */
int gw_tok_ids_reserve(struct gw_tok_ids *v, size_t extra);
static inline int gw_tok_ids_push(struct gw_tok_ids *v, uint32_t id)
{
    if (v->n == v->cap && gw_tok_ids_reserve(v, 1)) return -1;
    v->ids[v->n++] = id;
    return 0;
}

#endif
