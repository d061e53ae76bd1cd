/* Properties of encoding with the real tiny M3 tokenizer (testdata/m3-tiny-a/tokenizer.json) that must
 * hold for any HF-exact implementation: NFC equivalence, special tokens splitting text into independent
 * pieces, round trips of whitespace runs, digits one by one (its regex has \p{N} without a repeat),
 * emoji and long inputs, clear refusal of invalid UTF-8, and the vocabulary lookups plugins rely on. */
#include "mmgw_test.h"
#include "tok_test_util.h"

static struct gw_tokenizer *g_tok;

static struct gw_tok_ids enc(const char *s, size_t n)
{
    struct gw_tok_ids ids = {0};
    struct mm_err e;
    if (gw_tokenizer_encode(g_tok, s, n, 0, &ids, &e)) fprintf(stderr, "encode: %s\n", e.msg);
    return ids;
}

static int same(const struct gw_tok_ids *a, const struct gw_tok_ids *b)
{
    return a->n == b->n && (a->n == 0 || memcmp(a->ids, b->ids, a->n * sizeof *a->ids) == 0);
}

static void check_equiv(const char *x, const char *y)
{
    struct gw_tok_ids a = enc(x, strlen(x)), b = enc(y, strlen(y));
    CHECK_MSG(same(&a, &b), "'%s' and '%s' should encode alike", x, y);
    gw_tok_ids_free(&a);
    gw_tok_ids_free(&b);
}

static void check_roundtrip(const char *x, size_t n)
{
    struct gw_tok_ids a = enc(x, n);
    struct mm_buf out;
    struct mm_err e;
    mm_buf_init(&out, 0);
    CHECK(gw_tokenizer_decode(g_tok, a.ids, a.n, 0, &out, &e) == MM_OK);
    CHECK_MSG(out.len == n && (n == 0 || memcmp(out.data, x, n) == 0), "round trip of %zu bytes '%.30s'", n,
              x);
    mm_buf_free(&out);
    gw_tok_ids_free(&a);
}

int main(void)
{
    const char *dir = test_require_data();
    char path[1024];
    struct mm_err e;
    snprintf(path, sizeof path, "%s/m3-tiny-a/tokenizer.json", dir);
    CHECK_MSG(gw_tokenizer_load_file(path, &g_tok, &e) == MM_OK, "%s", e.msg);
    if (!g_tok) return test_done();

    /* lookups the M3 plugin and the demo tooling use */
    uint32_t id = 0;
    CHECK(gw_tokenizer_token_to_id(g_tok, "]<]image[>[", 11, &id) == MM_OK && id == 8195);
    CHECK(gw_tokenizer_token_to_id(g_tok, "]<]video[>[", 11, &id) == MM_OK && id == 8196);
    CHECK(gw_tokenizer_token_to_id(g_tok, "[e~[", 4, &id) == MM_OK && id == 8194);
    CHECK(gw_tokenizer_token_to_id(g_tok, "<|im_end|>", 10, &id) == MM_OK && id == 2);
    CHECK(gw_tokenizer_token_to_id(g_tok, "<mm:think>", 10, &id) == MM_NOT_FOUND);
    size_t len;
    const char *t = gw_tokenizer_id_to_token(g_tok, 8197, &len);
    CHECK(t && len == 20 && memcmp(t, "]<]start of image[>[", 20) == 0);
    CHECK(gw_tokenizer_is_special(g_tok, 8195) && gw_tokenizer_is_special(g_tok, 0));
    CHECK(!gw_tokenizer_is_special(g_tok, 100));
    CHECK_EQ_INT(gw_tokenizer_added_count(g_tok), 14);

    /* NFC: decomposed and composed spellings are the same text */
    check_equiv("caf\x65\xCC\x81 e\xCC\x81t\xC3\xA9", "caf\xC3\xA9 \xC3\xA9t\xC3\xA9");
    check_equiv("\xE2\x84\xAB", "\xC3\x85");                             /* ANGSTROM SIGN -> A with ring */
    check_equiv("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81"); /* jamo -> Hangul syllable */
    check_equiv("x\xCC\xA3\xCC\x81", "x\xCC\xA3\xCC\x81");               /* already canonical order */
    check_equiv("a\xCC\x81\xCC\xA3", "\xE1\xBA\xA1\xCC\x81");            /* reordered, then composed */

    /* special tokens split the text into pieces encoded on their own */
    static const char *const specials[] = {"<|im_start|>", "]<]image[>[", "[e~[", "]~!b["};
    static const char *const sides[] = {"a", "Hello ", " world", "\n", "\xCC\x81x", "12", "'s", "", "  "};
    for (size_t s = 0; s < 4; s++)
        for (size_t i = 0; i < 9; i++)
            for (size_t j = 0; j < 9; j++) {
                char buf[128];
                int n = snprintf(buf, sizeof buf, "%s%s%s", sides[i], specials[s], sides[j]);
                struct gw_tok_ids whole = enc(buf, (size_t)n), want = enc(sides[i], strlen(sides[i]));
                struct gw_tok_ids right = enc(sides[j], strlen(sides[j]));
                CHECK(gw_tokenizer_token_to_id(g_tok, specials[s], strlen(specials[s]), &id) == MM_OK);
                gw_tok_ids_append(&want, &id, 1);
                gw_tok_ids_append(&want, right.ids, right.n);
                CHECK_MSG(same(&whole, &want), "'%s' does not split at the special token", buf);
                gw_tok_ids_free(&whole);
                gw_tok_ids_free(&want);
                gw_tok_ids_free(&right);
            }

    /* digits are single pre-tokens */
    struct gw_tok_ids d = enc("9081726354", 10);
    CHECK_EQ_INT(d.n, 10);
    for (size_t i = 0; i < d.n && i < 10; i++) {
        struct gw_tok_ids one = enc(&"9081726354"[i], 1);
        CHECK(one.n == 1 && one.ids[0] == d.ids[i]);
        gw_tok_ids_free(&one);
    }
    gw_tok_ids_free(&d);

    /* whitespace, line breaks, emoji, controls round-trip exactly */
    static const char *const rt[] = {
        "\r\n\r\n\r\n",
        "a\r\r\nb\n\n\n  \n\t\t x",
        "   ",
        "\t",
        " \n ",
        "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7!",
        "\xF0\x9F\x87\xAF\xF0\x9F\x87\xB5 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
        "nul\x01\x02\x7F",
        "x\xC2\x85y\xE2\x80\xA8z\xE3\x80\x80",
        ""};
    for (size_t i = 0; i < sizeof rt / sizeof rt[0]; i++) check_roundtrip(rt[i], strlen(rt[i]));
    check_roundtrip("a\0b", 3); /* an embedded NUL is text too */

    /* invalid UTF-8 is refused with the byte offset, and nothing is appended */
    struct gw_tok_ids ids = {0};
    CHECK_EQ_INT(gw_tokenizer_encode(g_tok, "abc\xFF", 4, 0, &ids, &e), MM_INVALID);
    CHECK(strstr(e.msg, "byte 3") != NULL && ids.n == 0);
    CHECK_EQ_INT(gw_tokenizer_encode(g_tok, "ok \xED\xA0\x80", 6, 0, &ids, &e), MM_INVALID); /* surrogate */
    CHECK_EQ_INT(gw_tokenizer_encode(g_tok, "\xC0\xAF", 2, 0, &ids, &e), MM_INVALID);        /* overlong */
    CHECK_EQ_INT(gw_tokenizer_encode(g_tok, "\xE2\x82", 2, 0, &ids, &e), MM_INVALID);        /* truncated */
    CHECK_EQ_INT(gw_tokenizer_encode(g_tok, NULL, 3, 0, &ids, &e), MM_INVALID);
    CHECK_EQ_INT(gw_tokenizer_encode(g_tok, NULL, 0, 0, &ids, &e), MM_OK);
    CHECK_EQ_INT(ids.n, 0);

    /* a long input (about 1.5 MB, mixed scripts and long runs) round-trips */
    size_t cap = 1600000, n = 0;
    char *big = malloc(cap);
    static const char *const parts[] = {"The tokenizer must be exact. ",
                                        "\xE4\xB8\xAD\xE6\x96\x87\xE5\x88\x86\xE8\xAF\x8D ",
                                        "x = 1234567;\n",
                                        "   \n\n",
                                        "\xF0\x9F\x9A\x80",
                                        "Ol\xC3\xA1 mundo! "};
    for (size_t i = 0; n + 30064 < cap; i++) {
        const char *p = parts[(i * 7 + i / 3) % 6];
        size_t l = strlen(p);
        memcpy(big + n, p, l);
        n += l;
    }
    memset(big + n, 'z', 30000); /* one 30000-byte word at the end */
    n += 30000;
    check_roundtrip(big, n);
    free(big);

    gw_tokenizer_free(g_tok);
    return test_done();
}
