/* The prompt-piece token cache (gateway/api/gw_api_tokcache.c) must give exactly what the tokenizer gives
 * for the whole text. Random texts are built from a tokenizer's own added tokens (including ones that
 * overlap, contain each other, strip white space or are normalized), text with merges, white space and
 * characters NFC changes; each is encoded with and without the cache, twice (the second time from the
 * cache). Also: which tokens are cut points, errors equal the plain encoder's, the memory budget holds.
 * The same runs on the golden M3 test tokenizer and on the demo tokenizer when they are available. */
#include <unistd.h>

#include "gw_api_tokcache.h"
#include "mmgw_test.h"
#include "tok_test_util.h"

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static int same(const struct gw_tok_ids *a, const struct gw_tok_ids *b)
{
    return a->n == b->n && (a->n == 0 || memcmp(a->ids, b->ids, a->n * sizeof *a->ids) == 0);
}

/* Encode text both ways (and once more through the cache) and compare. */
static int check_text(struct gw_api_tokcache *c, const struct gw_tokenizer *tok, const char *t, size_t n)
{
    struct gw_tok_ids plain = {0}, cached = {0}, again = {0};
    struct mm_err e1, e2, e3;
    mm_err_clear(&e1);
    mm_err_clear(&e2);
    mm_err_clear(&e3);
    int32_t r1 = gw_tokenizer_encode(tok, t, n, 0, &plain, &e1);
    int32_t r2 = gw_api_tokcache_encode(c, tok, t, n, &cached, &e2);
    int32_t r3 = gw_api_tokcache_encode(c, tok, t, n, &again, &e3);
    int ok = r1 == r2 && r1 == r3 && same(&plain, &cached) && same(&plain, &again) &&
             (r1 == MM_OK || (strcmp(e1.msg, e2.msg) == 0 && strcmp(e1.msg, e3.msg) == 0));
    if (!ok) {
        fprintf(stderr, "mismatch on '%.*s': rc %d/%d/%d, %zu/%zu/%zu ids\n", (int)n, t, r1, r2, r3, plain.n,
                cached.n, again.n);
        for (size_t i = 0; i < plain.n || i < cached.n; i++)
            fprintf(stderr, "  %zu: %u %u\n", i, i < plain.n ? plain.ids[i] : 0,
                    i < cached.n ? cached.ids[i] : 0);
    }
    gw_tok_ids_free(&plain);
    gw_tok_ids_free(&cached);
    gw_tok_ids_free(&again);
    return ok;
}

/* Random texts from the added tokens of tok and the given fragments. */
static int fuzz(struct gw_api_tokcache *c, const struct gw_tokenizer *tok, const char *const *frags,
                size_t n_frags, int rounds)
{
    uint32_t n_added = gw_tokenizer_added_count(tok);
    char buf[4096];
    int bad = 0;
    for (int r = 0; r < rounds && bad < 5; r++) {
        size_t len = 0;
        int pieces = 1 + (int)rnd(40);
        for (int k = 0; k < pieces; k++) {
            const char *s;
            size_t sl;
            struct gw_tok_added_info info;
            if (n_added && rnd(3) == 0 && gw_tokenizer_added_get(tok, rnd(n_added), &info) == MM_OK) {
                s = info.content;
                sl = info.content_len;
                if (rnd(4) == 0 && sl > 1) sl = 1 + rnd((uint32_t)sl - 1); /* a token cut short */
            } else {
                s = frags[rnd((uint32_t)n_frags)];
                sl = strlen(s);
            }
            if (len + sl >= sizeof buf) break;
            memcpy(buf + len, s, sl);
            len += sl;
        }
        if (!check_text(c, tok, buf, len)) bad++;
        /* re-encode an earlier text's prefix now and then: pieces then come from the cache mid-text */
        if (len > 4 && !check_text(c, tok, buf, rnd((uint32_t)len))) bad++;
    }
    return bad == 0;
}

static const char *const frags[] = {"hello", " world", "\n",   "  ",        "\t",   "x",   "[",  "]",    "~",
                                    "e",     "b",      "!",    "<",         ">",    "|",   "im", "A",    "B",
                                    "C",     "n",      "é",    "e\xcc\x81", "日本", " sp", "ab", "abab", "t",
                                    "<t>",   "z\n\n",  "\xff", "[e",        "x[e",  "q",   " ",  "_",    "9"};

#define TOKENS_COMMON                                                                                        \
    "{\"id\": 300, \"content\": \"]~b]\", \"special\": true, \"normalized\": false},"                        \
    "{\"id\": 301, \"content\": \"[e~[\", \"special\": true, \"normalized\": false},"                        \
    "{\"id\": 302, \"content\": \"x[e\", \"special\": false, \"normalized\": false},"                        \
    "{\"id\": 303, \"content\": \"<|im|>\", \"special\": true, \"normalized\": false},"                      \
    "{\"id\": 304, \"content\": \"AB\", \"special\": true, \"normalized\": false},"                          \
    "{\"id\": 305, \"content\": \"ABC\", \"special\": true, \"normalized\": false},"                         \
    "{\"id\": 306, \"content\": \" sp\", \"special\": true, \"lstrip\": true, \"normalized\": false},"       \
    "{\"id\": 307, \"content\": \"nn\", \"special\": false, \"normalized\": true},"                          \
    "{\"id\": 309, \"content\": \"|>\", \"special\": true, \"normalized\": false},"                          \
    "{\"id\": 310, \"content\": \"]~!b[\", \"special\": true, \"normalized\": false},"                       \
    "{\"id\": 311, \"content\": \"é\", \"special\": true, \"normalized\": false},"                          \
    "{\"id\": 312, \"content\": \"q \", \"special\": true, \"rstrip\": true, \"normalized\": false}"

static const char *const merges[][2] = {{"a", "b"},        {"ab", "ab"},  {"h", "e"}, {"he", "l"},
                                        {"hel", "l"},      {"hell", "o"}, {" ", "w"}, {"\xcc", "\x81"},
                                        {"e", "\xcc\x81"}, {"x", "["}};

static void run_handmade(const char *extra, uint32_t want_cuts, const char *name)
{
    struct gw_tokenizer *tok = tt_load(merges, sizeof merges / sizeof merges[0], extra);
    struct gw_api_tokcache *c = gw_api_tokcache_create(tok, 0);
    CHECK(c != NULL);
    if (!c) return;
    struct gw_api_tokcache_stats st;
    gw_api_tokcache_stats(c, &st);
    CHECK_MSG(st.cut_tokens == want_cuts, "%s: cut tokens: %u", name, st.cut_tokens);
    CHECK(check_text(c, tok, "]~b]hello[e~[ world", 19));
    CHECK(check_text(c, tok, "x[e~[e~[", 8));
    CHECK(check_text(c, tok, "x[e<t>", 6));
    CHECK(check_text(c, tok, "<|im|>ABCAB sp nn <t> e\xcc\x81", 26));
    CHECK(check_text(c, tok, "", 0));
    CHECK(check_text(c, tok, "]~b]\xff\xfe]~b]", 10)); /* invalid UTF-8: the whole text's error */
    CHECK(fuzz(c, tok, frags, sizeof frags / sizeof frags[0], 20000));
    gw_api_tokcache_stats(c, &st);
    CHECK(st.hits > 1000 && st.misses > 100);
    printf("%s: %u cut tokens, %llu hits, %llu misses, %llu entries, %llu bytes\n", name, st.cut_tokens,
           (unsigned long long)st.hits, (unsigned long long)st.misses, (unsigned long long)st.entries,
           (unsigned long long)st.bytes);
    gw_api_tokcache_free(c);

    /* a small budget: bounded, still exact */
    c = gw_api_tokcache_create(tok, 8192);
    CHECK(fuzz(c, tok, frags, sizeof frags / sizeof frags[0], 3000));
    gw_api_tokcache_stats(c, &st);
    CHECK_MSG(st.bytes <= 8192, "%llu bytes", (unsigned long long)st.bytes);
    gw_api_tokcache_free(c);
    gw_tokenizer_free(tok);
}

static void test_handmade(void)
{
    /* cut points: ]~b], x[e, <|im|>, ABC, é. Not: [e~[ (x[e ends with its start "[e"), ]~!b[ (]~b] ends
     * with its "]"), |> (inside <|im|>), AB (inside ABC), " sp" (lstrip), "q " (rstrip), nn (normalized) */
    run_handmade("{\"normalizer\": {\"type\": \"NFC\"}, \"added_tokens\": [" TOKENS_COMMON "]}", 5,
                 "handmade");
    /* with a single_word token, cut tokens ending in a word character go too (x[e, ABC, é): "x[e<t>"
     * keeps <t> as text, "<t>" alone is the token */
    run_handmade("{\"normalizer\": {\"type\": \"NFC\"}, \"added_tokens\": [" TOKENS_COMMON
                 ", {\"id\": 308, \"content\": \"<t>\", \"special\": true, \"single_word\": true, "
                 "\"normalized\": false}]}",
                 2, "handmade with single_word");
    /* byte-level with a prefix space and the GPT-2 split regex: still the pieces' ids */
    run_handmade(
        "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": "
        "true, \"use_regex\": true}, \"added_tokens\": [" TOKENS_COMMON "]}",
        5, "handmade, prefix space");

    /* no cut token at all: no cache (plain encoding through a NULL cache) */
    struct gw_tokenizer *plain = tt_load(merges, 2, NULL);
    CHECK(gw_api_tokcache_create(plain, 0) == NULL);
    CHECK(check_text(NULL, plain, "abab hello", 10));
    gw_tokenizer_free(plain);
}

static void test_file(const char *path, const char *name)
{
    struct gw_tokenizer *tok = NULL;
    struct mm_err e;
    if (gw_tokenizer_load_file(path, &tok, &e) != MM_OK) {
        CHECK_MSG(0, "%s: %s", path, e.msg);
        return;
    }
    struct gw_api_tokcache *c = gw_api_tokcache_create(tok, 0);
    CHECK(c != NULL);
    static const char *const prose[] = {"Your model version is MiniMax-M3, developed by MiniMax.",
                                        " Knowledge cutoff: January 2026.",
                                        "\n\n<thinking_instructions>\n",
                                        "system\n",
                                        "user\n",
                                        "ai\n",
                                        "developer\n",
                                        "You are a helpful assistant.",
                                        " The quick brown fox",
                                        " jumps over the lazy dog",
                                        "\n",
                                        " ",
                                        "  ",
                                        "Weather in this city?",
                                        "<mm:think>",
                                        "</mm:think>",
                                        "<tool_call>",
                                        "Grüße, 世界! ",
                                        "e\xcc\x81t\xc3\xa9",
                                        "1234567",
                                        "'s",
                                        " don't"};
    CHECK(fuzz(c, tok, prose, sizeof prose / sizeof prose[0], 5000));
    struct gw_api_tokcache_stats st;
    gw_api_tokcache_stats(c, &st);
    printf("%s: %u cut tokens, %llu hits, %llu misses\n", name, st.cut_tokens, (unsigned long long)st.hits,
           (unsigned long long)st.misses);
    gw_api_tokcache_free(c);
    gw_tokenizer_free(tok);
}

int main(void)
{
    test_handmade();
    const char *data = test_data_dir();
    if (data) {
        char path[512];
        snprintf(path, sizeof path, "%s/m3-tiny-a/tokenizer.json", data);
        test_file(path, "m3-tiny-a");
    } else {
        printf("note: no golden data; the M3 test tokenizer part is skipped\n");
    }
    const char *build = getenv("MMGW_BUILD");
    char tool[512], out[512], cmd[1200];
    snprintf(tool, sizeof tool, "%s/bin/mmgw-mktokenizer", build ? build : ".");
    snprintf(out, sizeof out, "%s/mmgw-tokcache-%ld.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (long)getpid());
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' >/dev/null 2>&1", tool, out);
    if (build && access(tool, X_OK) == 0 && system(cmd) == 0) {
        test_file(out, "demo tokenizer");
        unlink(out);
    } else {
        printf("note: mmgw-mktokenizer is not built; the demo tokenizer part is skipped\n");
    }
    return test_done();
}
