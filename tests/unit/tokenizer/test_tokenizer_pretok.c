/* Pre-tokenization: Split behaviours (HF's documented "the-final--countdown" example), Oniguruma
 * regex semantics carried over to PCRE2 (\s with U+0085, \w with marks, (?i), (?m), {,n}, \h), the
 * GPT-2 ByteLevel regex on HF's own test sentences, and empty-match handling. */
#include "gw_tok_internal.h"
#include "mmgw_test.h"
#include "tok_test_util.h"

struct pieces {
    char buf[4096];
    size_t len;
};

static int32_t collect(void *ctx, const uint8_t *s, size_t n)
{
    struct pieces *p = ctx;
    if (p->len + n + 1 >= sizeof p->buf) return MM_TOO_LARGE;
    memcpy(p->buf + p->len, s, n);
    p->len += n;
    p->buf[p->len++] = '|';
    p->buf[p->len] = '\0';
    return MM_OK;
}

/* Pre-tokenize text and return the pieces joined as "a|b|c|". */
static const char *pretok(const struct gw_tokenizer *tok, const char *text)
{
    static struct pieces p;
    struct mm_err e;
    p.len = 0;
    p.buf[0] = '\0';
    struct gw_tok_tls *tls = gw_tok_tls_get(tok);
    if (!tls || gw_tok_pretokenize_with(tok, tls, (const uint8_t *)text, strlen(text), collect, &p, &e))
        return "ERROR";
    return p.buf;
}

static struct gw_tokenizer *split_tok(const char *pattern_json, const char *behavior, int invert)
{
    char extra[1024];
    snprintf(extra, sizeof extra,
             "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
             "{\"type\": \"Split\", \"pattern\": %s, \"behavior\": \"%s\", \"invert\": %s},"
             "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}}",
             pattern_json, behavior, invert ? "true" : "false");
    return tt_load(NULL, 0, extra);
}

static void check_split(const char *pattern_json, const char *behavior, int invert, const char *text,
                        const char *want)
{
    struct gw_tokenizer *tok = split_tok(pattern_json, behavior, invert);
    const char *got = pretok(tok, text);
    CHECK_MSG(strcmp(got, want) == 0, "%s %s%s on '%s': got '%s' want '%s'", pattern_json, behavior,
              invert ? " inverted" : "", text, got, want);
    gw_tokenizer_free(tok);
}

static int32_t load_err(const char *extra)
{
    char *s = tt_json(NULL, 0, extra);
    struct gw_tokenizer *tok = NULL;
    struct mm_err e;
    int32_t rc = gw_tokenizer_load_mem(s, strlen(s), "t", &tok, &e);
    free(s);
    gw_tokenizer_free(tok);
    return rc;
}

int main(void)
{
    const char *dash = "{\"String\": \"-\"}";
    const char *cd = "the-final--countdown";
    check_split(dash, "Removed", 0, cd, "the|final|countdown|");
    check_split(dash, "Isolated", 0, cd, "the|-|final|-|-|countdown|");
    check_split(dash, "MergedWithPrevious", 0, cd, "the-|final-|-|countdown|");
    check_split(dash, "MergedWithNext", 0, cd, "the|-final|-|-countdown|");
    check_split(dash, "Contiguous", 0, cd, "the|-|final|--|countdown|");
    check_split(dash, "Removed", 1, cd, "-|-|-|");
    check_split(dash, "Isolated", 1, cd, "the|-|final|-|-|countdown|");
    /* a literal String pattern is not a regex */
    check_split("{\"String\": \".\"}", "Removed", 0, "a.b.c", "a|b|c|");

    /* \s is Unicode White_Space as in Oniguruma: NEL U+0085 yes, MONGOLIAN VOWEL SEPARATOR U+180E no */
    check_split("{\"Regex\": \"\\\\s+\"}", "Removed", 0,
                "a\xC2\x85"
                "b",
                "a|b|");
    check_split("{\"Regex\": \"\\\\s+\"}", "Removed", 0,
                "a\xE1\xA0\x8E"
                "b",
                "a\xE1\xA0\x8E"
                "b|");
    check_split("{\"Regex\": \"\\\\S+\"}", "Isolated", 0, "x\xC2\x85y", "x|\xC2\x85|y|");
    check_split("{\"Regex\": \"[^\\\\s]+\"}", "Isolated", 0, "x\xC2\x85y", "x|\xC2\x85|y|");
    /* \w includes marks (Oniguruma), \d is Nd, \h is a hex digit */
    check_split("{\"Regex\": \"\\\\w+\"}", "Isolated", 0, "e\xCC\x81x-y", "e\xCC\x81x|-|y|");
    check_split("{\"Regex\": \"\\\\d+\"}", "Isolated", 0,
                "a12\xD9\xA3"
                "b",
                "a|12\xD9\xA3|b|");
    check_split("{\"Regex\": \"\\\\h+\"}", "Isolated", 0, "xBEEFy", "x|BEEF|y|");
    /* case-insensitive groups fold Unicode: 'S and 'ſ (U+017F) match (?i:'s) */
    check_split("{\"Regex\": \"(?i:'s)\"}", "Isolated", 0,
                "a'Sb'\xC5\xBF"
                "c",
                "a|'S|b|'\xC5\xBF|c|");
    /* (?m) is dot-all in Oniguruma */
    check_split("{\"Regex\": \"(?m:.+)\"}", "Isolated", 0, "a\nb", "a\nb|");
    check_split("{\"Regex\": \".+\"}", "Isolated", 0, "a\nb", "a|\n|b|");
    /* {,n} means {0,n}; empty matches follow Oniguruma's find_iter */
    check_split("{\"Regex\": \"a{,2}\"}", "Isolated", 0, "aaaa", "aa|aa|");
    check_split("{\"Regex\": \"x*\"}", "Removed", 0, "abxc", "a|b|c|");
    /* the M3 / cl100k-style pattern of the tiny tokenizer */
    const char *m3 =
        "{\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}|"
        " ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}";
    check_split(m3, "Isolated", 0, "I'LL pay 1234 for   it!!\r\n\r\n  ok",
                "I|'LL| pay| |1|2|3|4| for|  | it|!!\r\n\r\n| | ok|");

    /* ByteLevel's own GPT-2 regex: HF's tests in pre_tokenizers/byte_level.rs */
    struct gw_tokenizer *tok = tt_load(
        NULL, 0,
        "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}}");
    const char *got = pretok(tok, "Hello my friend, how is your day going?");
    CHECK_STR(got, "Hello| my| friend|,| how| is| your| day| going|?|");
    CHECK_STR(pretok(tok, "Hello there\nHello there"), "Hello| there|\n|Hello| there|");
    CHECK_STR(pretok(tok, "Hello there       dear"), "Hello| there|      | dear|");
    CHECK_STR(pretok(tok, "i\xE2\xAD\xA2j"), "i|\xE2\xAD\xA2|j|");
    gw_tokenizer_free(tok);
    tok = tt_load(NULL, 0, "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true}}");
    CHECK_STR(pretok(tok, "Hello my friend, how is your day going?"),
              " Hello| my| friend|,| how| is| your| day| going|?|");
    CHECK_STR(pretok(tok, " Hello"), " Hello|");
    gw_tokenizer_free(tok);

    /* what PCRE2 cannot express is refused, not approximated */
#define SPLIT_FMT                                                                                            \
    "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\","                 \
    " \"pattern\": {\"Regex\": \"%s\"}, \"behavior\": \"Isolated\", \"invert\": false},"                     \
    " {\"type\": \"ByteLevel\", \"use_regex\": false}]}}"
    char extra[512];
    const char *unsupported[] = {"[[:punct:]]", "[a&&b]", "[a[b]]", "[\\\\W]"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(extra, sizeof extra, SPLIT_FMT, unsupported[i]);
        CHECK_EQ_INT(load_err(extra), MM_UNSUPPORTED);
    }
    snprintf(extra, sizeof extra, SPLIT_FMT, "(ab");
    CHECK_EQ_INT(load_err(extra), MM_INVALID);
    snprintf(extra, sizeof extra, SPLIT_FMT, "[[:alpha:]]+");
    CHECK_EQ_INT(load_err(extra), MM_OK);
    /* ByteLevel must come last; a pre-tokenizer without ByteLevel is not byte-level */
    CHECK_EQ_INT(
        load_err("{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"},"
                 " {\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Isolated\"}]}}"),
        MM_UNSUPPORTED);
    CHECK_EQ_INT(load_err("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}}"), MM_UNSUPPORTED);
    CHECK_EQ_INT(load_err("{\"pre_tokenizer\": null}"), MM_UNSUPPORTED);

    /* translation output for the documented cases */
    struct mm_buf b;
    struct mm_err e;
    mm_buf_init(&b, 0);
    CHECK(gw_tok_regex_translate("(?m)a{,3}", 9, &b, &e) == MM_OK);
    CHECK_STR(b.data, "(?s)a{0,3}");
    mm_buf_free(&b);
    return test_done();
}
