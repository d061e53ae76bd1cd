/* Added and special tokens are cut out of the text before normalization and pre-tokenization, as HF's
 * AddedVocabulary::find_matches does: an Aho-Corasick search in leftmost-longest mode, then each match
 * is checked against its token's single_word flag and widened by lstrip/rstrip. A byte trie with a
 * first-byte filter gives the same leftmost-longest matches; tokenizers have tens to a few thousand
 * added tokens, so walking the trie from each candidate position is cheap. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "gw_tok_internal.h"
#include "gw_tok_utf8.h"

/* ---- trie ---- */

static uint32_t trie_new_node(struct gw_tok_trie *t, uint8_t byte)
{
    if (t->n_nodes == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 64;
        struct gw_tok_trie_node *nn = realloc(t->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return 0;
        t->nodes = nn;
        t->cap = cap;
    }
    struct gw_tok_trie_node *n = &t->nodes[t->n_nodes];
    n->child = n->sibling = 0;
    n->value = GW_TOK_NONE;
    n->byte = byte;
    return t->n_nodes++;
}

int gw_tok_trie_add(struct gw_tok_trie *t, const uint8_t *s, size_t n, uint32_t value)
{
    if (n == 0) return 0; /* HF never matches an empty token */
    if (t->n_nodes == 0 && trie_new_node(t, 0) != 0) return -1;
    if (t->n_nodes == 0) return -1;
    uint32_t cur = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = t->nodes[cur].child, prev = 0;
        while (c && t->nodes[c].byte != s[i]) {
            prev = c;
            c = t->nodes[c].sibling;
        }
        if (!c) {
            c = trie_new_node(t, s[i]);
            if (!c) return -1;
            if (prev)
                t->nodes[prev].sibling = c;
            else
                t->nodes[cur].child = c;
        }
        cur = c;
    }
    /* Several patterns with the same bytes: Aho-Corasick reports the first one added. */
    if (t->nodes[cur].value == GW_TOK_NONE) t->nodes[cur].value = value;
    t->first[s[0] >> 3] |= (uint8_t)(1u << (s[0] & 7));
    t->n_patterns++;
    return 0;
}

void gw_tok_trie_free(struct gw_tok_trie *t)
{
    free(t->nodes);
    memset(t, 0, sizeof *t);
}

int gw_tok_trie_find(const struct gw_tok_trie *t, const uint8_t *s, size_t n, size_t from, size_t *start,
                     size_t *end, uint32_t *value)
{
    if (!t->n_patterns) return 0;
    for (size_t i = from; i < n; i++) {
        if (!(t->first[s[i] >> 3] & (1u << (s[i] & 7)))) continue;
        uint32_t cur = 0, best = GW_TOK_NONE;
        size_t best_end = 0;
        for (size_t j = i; j < n; j++) {
            uint32_t c = t->nodes[cur].child;
            while (c && t->nodes[c].byte != s[j]) c = t->nodes[c].sibling;
            if (!c) break;
            cur = c;
            if (t->nodes[c].value != GW_TOK_NONE) {
                best = t->nodes[c].value;
                best_end = j + 1;
            }
        }
        if (best != GW_TOK_NONE) {
            *start = i;
            *end = best_end;
            *value = best;
            return 1;
        }
    }
    return 0;
}

/* ---- character classes used by the flags (Rust regex's Unicode \w and \s) ---- */

static int is_space_cp(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* \w = Alphabetic | Mark | Decimal_Number | Connector_Punctuation | Join_Control. Alphabetic is the
 * letters, letter numbers and Other_Alphabetic; the Other_Alphabetic characters outside the mark
 * categories are the circled and squared Latin letters listed here. */
static int is_word_cp(uint32_t c)
{
    if (c < 0x80)
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (c == 0x200C || c == 0x200D) return 1;
    if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
        (c >= 0x1F170 && c <= 0x1F189))
        return 1;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

/* The character before byte offset pos (pos > 0). */
static uint32_t cp_before(const uint8_t *s, size_t pos)
{
    uint32_t cp;
    size_t l = gw_tok_utf8_prev_len(s, pos);
    gw_tok_utf8_decode(s + pos - l, l, &cp);
    return cp;
}

int32_t gw_tok_added_split(const struct gw_tokenizer *tok, const struct gw_tok_trie *t, const uint8_t *s,
                           size_t n, gw_tok_piece_fn fn, void *ctx)
{
    size_t start_offset = 0, pos = 0, st, en;
    uint32_t id;
    int32_t rc;
    while (pos < n && gw_tok_trie_find(t, s, n, pos, &st, &en, &id)) {
        pos = en; /* the automaton resumes after the match, whatever the flags do with it */
        const struct gw_tok_added *a = &tok->added[tok->ids[id].added];
        size_t start = st, stop = en;
        if (a->single_word) {
            uint32_t cp;
            int left_ok = st == 0 || !is_word_cp(cp_before(s, st));
            int right_ok = en == n || (gw_tok_utf8_decode(s + en, n - en, &cp), !is_word_cp(cp));
            if (!left_ok || !right_ok) continue;
        }
        if (a->lstrip) {
            size_t ns = st;
            while (ns > 0) {
                size_t l = gw_tok_utf8_prev_len(s, ns);
                if (!is_space_cp(cp_before(s, ns))) break;
                ns -= l;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            while (stop < n) {
                uint32_t cp;
                size_t l = gw_tok_utf8_decode(s + stop, n - stop, &cp);
                if (!is_space_cp(cp)) break;
                stop += l;
            }
        }
        if (start_offset < start && (rc = fn(ctx, GW_TOK_NONE, s, start_offset, start))) return rc;
        if ((rc = fn(ctx, id, s, start, stop))) return rc;
        start_offset = stop;
    }
    if (start_offset < n && (rc = fn(ctx, GW_TOK_NONE, s, start_offset, n))) return rc;
    return MM_OK;
}
