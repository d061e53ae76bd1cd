/* skip_special_tokens in the incremental detokenizer: special tokens dropped, non-special added tokens and
 * the kept markers (gw_tok_stream_keep) shown, UTF-8 held back across a dropped token, and the streamed text
 * equal to decoding the filtered ids for any chunking. The tokenizer has one token per byte (id = byte), so
 * any byte sequence is an id sequence; the expected text is the reference decode of the ids HF would keep. */
#include "mmgw_test.h"
#include "tok_test_util.h"

#define R "\xEF\xBF\xBD" /* U+FFFD */

enum { BOS = 256, THINK = 257, PLAIN = 258, EURO = 259, END = 260 };

static const char *const ADDED =
    "{\"added_tokens\": ["
    "{\"id\": 256, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
    "{\"id\": 257, \"content\": \"<mm:think>\", \"special\": true, \"normalized\": false},"
    "{\"id\": 258, \"content\": \"<x>\", \"special\": false, \"normalized\": false},"
    "{\"id\": 259, \"content\": \"\xE2\x82\xAC!\", \"special\": true, \"normalized\": false},"
    "{\"id\": 260, \"content\": \"</mm:think>\", \"special\": true, \"normalized\": false}]}";

/* Stream ids in chunks of the given sizes (cycled); returns the concatenated text (caller frees). */
static char *stream(const struct gw_tokenizer *tok, uint32_t flags, const uint32_t *keep, size_t n_keep,
                    const uint32_t *ids, size_t n, const size_t *chunks, size_t n_chunks, size_t *len)
{
    struct gw_tok_stream st;
    struct mm_err e;
    struct mm_buf acc;
    mm_buf_init(&acc, 0);
    gw_tok_stream_init(&st, tok, flags);
    gw_tok_stream_keep(&st, keep, n_keep);
    size_t i = 0, k = 0;
    while (i < n) {
        size_t c = chunks[k++ % n_chunks];
        if (c > n - i) c = n - i;
        CHECK(gw_tok_stream_push_n(&st, ids + i, c, &acc, &e) == MM_OK);
        CHECK(gw_tok_stream_pending(&st) <= 3);
        i += c;
    }
    CHECK(gw_tok_stream_finish(&st, &acc, &e) == MM_OK);
    if (!acc.data) mm_buf_append(&acc, "", 0);
    *len = acc.len;
    return acc.data;
}

static char *whole(const struct gw_tokenizer *tok, const uint32_t *ids, size_t n, uint32_t flags, size_t *len)
{
    struct mm_buf b;
    struct mm_err e;
    mm_buf_init(&b, 0);
    CHECK(gw_tokenizer_decode(tok, ids, n, flags, &b, &e) == MM_OK);
    *len = b.len;
    return b.data;
}

static void check_stream(const struct gw_tokenizer *tok, uint32_t flags, const uint32_t *keep, size_t n_keep,
                         const uint32_t *ids, size_t n, const char *want, size_t want_len, const char *what)
{
    static const size_t one[] = {1}, mixed[] = {2, 1, 3}, all[] = {64};
    const size_t *plans[] = {one, mixed, all};
    const size_t plan_n[] = {1, 3, 1};
    for (int p = 0; p < 3; p++) {
        size_t len = 0;
        char *got = stream(tok, flags, keep, n_keep, ids, n, plans[p], plan_n[p], &len);
        CHECK_MSG(got && len == want_len && memcmp(got, want, len) == 0, "%s (chunk plan %d): got '%.*s'",
                  what, p, (int)len, got ? got : "");
        free(got);
    }
}

static int is_special_here(uint32_t id)
{
    return id == BOS || id == THINK || id == EURO || id == END;
}

int main(void)
{
    struct gw_tokenizer *tok = tt_load(NULL, 0, ADDED);
    for (uint32_t id = BOS; id <= END; id++)
        CHECK_MSG(gw_tokenizer_is_special(tok, id) == is_special_here(id), "is_special(%u)", id);

    /* dropped vs shown */
    const uint32_t a[] = {BOS, 'H', 'i', PLAIN, THINK, 'o', 'k', END, EURO, '.'};
    const char *keep_all = "<s>Hi<x><mm:think>ok</mm:think>\xE2\x82\xAC!.";
    check_stream(tok, 0, NULL, 0, a, 10, keep_all, strlen(keep_all), "no skip");
    check_stream(tok, GW_TOK_SKIP_SPECIAL, NULL, 0, a, 10, "Hi<x>ok.", 8, "skip");
    /* the parser's markers stay, other special tokens go */
    const uint32_t markers[] = {THINK, END};
    const char *kept = "Hi<x><mm:think>ok</mm:think>.";
    check_stream(tok, GW_TOK_SKIP_SPECIAL, markers, 2, a, 10, kept, strlen(kept), "skip, markers kept");
    /* a keep list without the skip flag changes nothing */
    check_stream(tok, 0, markers, 2, a, 10, keep_all, strlen(keep_all), "keep without skip");

    /* A special token inside a UTF-8 character: skipped, the character completes across it (HF filters the
     * ids first, then decodes); shown, it cuts the character into two replacements. */
    const uint32_t split[] = {'a', 0xC3, BOS, 0xA9, 'b', 0xE2, 0x82, EURO, 0xAC};
    check_stream(tok, GW_TOK_SKIP_SPECIAL, NULL, 0, split, 9,
                 "a\xC3\xA9"
                 "b\xE2\x82\xAC",
                 7, "split, skip");
    const char *cut = "a" R "<s>" R "b" R "\xE2\x82\xAC!" R;
    check_stream(tok, 0, NULL, 0, split, 9, cut, strlen(cut), "split, no skip");
    /* held-back bytes then only special tokens at the end: one replacement at finish */
    const uint32_t tail[] = {'z', 0xF0, 0x9F, END, BOS};
    check_stream(tok, GW_TOK_SKIP_SPECIAL, NULL, 0, tail, 5, "z" R, 4, "truncated before dropped tokens");
    /* only special tokens: empty text */
    const uint32_t only[] = {BOS, EURO, BOS};
    check_stream(tok, GW_TOK_SKIP_SPECIAL, NULL, 0, only, 3, "", 0, "only special");

    /* Random id sequences over bytes that matter for UTF-8 and the added tokens, random chunking: the
     * streamed text equals the whole decode of the ids kept by the rule (special and not kept: dropped),
     * with skip and keep lists, and gw_tokenizer_decode with the flag equals it too. */
    static const uint32_t alphabet[] = {0x41, 0x20, 0x80, 0xA9, 0xBF,  0xC3,  0xE2, 0x82, 0xAC,
                                        0xF0, 0x9F, 0xFF, BOS,  THINK, PLAIN, EURO, END};
    unsigned seed = 777;
    for (int t = 0; t < 3000; t++) {
        uint32_t ids[24], filtered[24];
        size_t chunks[4];
        seed = seed * 1103515245u + 12345u;
        size_t n = (seed >> 16) % 24, nf = 0;
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            ids[i] = alphabet[(seed >> 16) % (sizeof alphabet / sizeof alphabet[0])];
        }
        for (size_t i = 0; i < 4; i++) {
            seed = seed * 1103515245u + 12345u;
            chunks[i] = 1 + (seed >> 16) % 5;
        }
        const int use_keep = t & 1;
        for (size_t i = 0; i < n; i++)
            if (!is_special_here(ids[i]) || (use_keep && (ids[i] == THINK || ids[i] == END)))
                filtered[nf++] = ids[i];
        size_t wl = 0, gl = 0, dl = 0;
        char *want = whole(tok, filtered, nf, 0, &wl);
        char *got = stream(tok, GW_TOK_SKIP_SPECIAL, use_keep ? markers : NULL, use_keep ? 2 : 0, ids, n,
                           chunks, 4, &gl);
        CHECK_MSG(want && got && wl == gl && memcmp(want, got, wl) == 0, "random case %d (keep %d)", t,
                  use_keep);
        if (!use_keep) {
            char *dec = whole(tok, ids, n, GW_TOK_SKIP_SPECIAL, &dl);
            CHECK_MSG(dec && dl == wl && memcmp(dec, want, wl) == 0, "random case %d: whole decode", t);
            free(dec);
        }
        free(want);
        free(got);
    }
    gw_tokenizer_free(tok);
    return test_done();
}
