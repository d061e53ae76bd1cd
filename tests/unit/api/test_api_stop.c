/* Stop strings: hand cases, and a brute-force comparison with "cut the whole text at the earliest stop
 * string" over random texts, stop sets and token splits. */
#include <stdint.h>

#include "gw_api_stop.h"
#include "mmgw_test.h"

/* Feed text in the given pieces; return the released text (malloc'ed) and whether a stop matched. */
static char *run(const char *const *stops, size_t n_stops, const char *const *pieces, size_t n_pieces,
                 int *matched)
{
    size_t lens[16];
    for (size_t i = 0; i < n_stops; i++) lens[i] = strlen(stops[i]);
    struct gw_api_stop_set set = {stops, lens, n_stops};
    struct gw_api_stop s;
    gw_api_stop_init(&s, &set);
    struct mm_buf out;
    mm_buf_init(&out, 0);
    *matched = 0;
    for (size_t i = 0; i < n_pieces && !*matched; i++) {
        int m = gw_api_stop_feed(&s, pieces[i], strlen(pieces[i]), &out);
        CHECK(m >= 0);
        *matched = m == 1;
    }
    if (!*matched) CHECK(gw_api_stop_flush(&s, &out) == 0);
    gw_api_stop_free(&s);
    size_t len;
    char *r = mm_buf_detach(&out, &len);
    return r ? r : strdup("");
}

static void hand_cases(void)
{
    int m;
    char *r;
    const char *none[] = {"x"};
    r = run(NULL, 0, (const char *[]){"Hello", " world"}, 2, &m);
    CHECK_STR(r, "Hello world");
    CHECK(!m);
    free(r);
    /* across token boundaries */
    r = run((const char *[]){"o w"}, 1, (const char *[]){"Hel", "lo", " wor", "ld"}, 4, &m);
    CHECK_STR(r, "Hell");
    CHECK(m);
    free(r);
    /* held back, then released when it cannot match */
    const char *abc[] = {"abc"};
    r = run(abc, 1, (const char *[]){"xxab", "d"}, 2, &m);
    CHECK_STR(r, "xxabd");
    CHECK(!m);
    free(r);
    /* a partial match at the very end is released by flush */
    r = run(abc, 1, (const char *[]){"xxa", "b"}, 2, &m);
    CHECK_STR(r, "xxab");
    CHECK(!m);
    free(r);
    /* overlapping prefixes: "aab" with stop "ab" */
    r = run((const char *[]){"ab"}, 1, (const char *[]){"a", "a", "b"}, 3, &m);
    CHECK_STR(r, "a");
    CHECK(m);
    free(r);
    /* the first to be complete wins, whichever was listed first, however the text is split */
    r = run((const char *[]){"world", "lo"}, 2, (const char *[]){"hello world"}, 1, &m);
    CHECK_STR(r, "hel");
    CHECK(m);
    free(r);
    r = run((const char *[]){"abcd", "bc"}, 2, (const char *[]){"xabcd"}, 1, &m);
    CHECK_STR(r, "xa");
    free(r);
    r = run((const char *[]){"abcd", "bcd"}, 2, (const char *[]){"xab", "cd"}, 2, &m);
    CHECK_STR(r, "x");
    free(r);
    /* multi-byte stop strings split inside a character */
    r = run((const char *[]){"\xc3\xa9t\xc3\xa9"}, 1, (const char *[]){"un \xc3", "\xa9t", "\xc3\xa9 chaud"},
            3, &m);
    CHECK_STR(r, "un ");
    CHECK(m);
    free(r);
    /* input after a match is ignored */
    {
        size_t l = 1;
        struct gw_api_stop_set set = {none, &l, 1};
        struct gw_api_stop s;
        gw_api_stop_init(&s, &set);
        struct mm_buf out;
        mm_buf_init(&out, 0);
        CHECK(gw_api_stop_feed(&s, "abxcd", 5, &out) == 1);
        CHECK(gw_api_stop_feed(&s, "efg", 3, &out) == 1);
        CHECK(gw_api_stop_flush(&s, &out) == 0);
        CHECK(out.len == 2 && memcmp(out.data, "ab", 2) == 0);
        CHECK(s.which == 0);
        mm_buf_free(&out);
        gw_api_stop_free(&s);
    }
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static void random_cases(void)
{
    static const char alpha[] = "abc ";
    for (int trial = 0; trial < 20000; trial++) {
        char text[64], stops_buf[4][8];
        const char *stops[4];
        size_t n = 1 + rnd(40), ns = rnd(4);
        for (size_t i = 0; i < n; i++) text[i] = alpha[rnd(4)];
        text[n] = '\0';
        for (size_t k = 0; k < ns; k++) {
            size_t l = 1 + rnd(5);
            for (size_t i = 0; i < l; i++) stops_buf[k][i] = alpha[rnd(4)];
            stops_buf[k][l] = '\0';
            stops[k] = stops_buf[k];
        }
        /* reference: cut where the first stop string to be complete starts (earliest end, then longest) */
        size_t cut = n, end = SIZE_MAX;
        for (size_t k = 0; k < ns; k++) {
            const char *p = strstr(text, stops[k]);
            if (!p) continue;
            size_t st = (size_t)(p - text), e = st + strlen(stops[k]);
            if (e < end || (e == end && st < cut)) {
                cut = st;
                end = e;
            }
        }
        /* random split into pieces */
        char pieces_buf[64][64];
        const char *pieces[64];
        size_t np = 0;
        for (size_t i = 0; i < n;) {
            size_t l = 1 + rnd(6);
            if (l > n - i) l = n - i;
            memcpy(pieces_buf[np], text + i, l);
            pieces_buf[np][l] = '\0';
            pieces[np] = pieces_buf[np];
            np++;
            i += l;
        }
        int m;
        char *r = run(stops, ns, pieces, np, &m);
        CHECK_MSG(strlen(r) == cut && memcmp(r, text, cut) == 0 && m == (cut < n),
                  "text '%s', stops [%s|%s|%s], got '%s' (matched %d), want %zu bytes", text,
                  ns > 0 ? stops[0] : "", ns > 1 ? stops[1] : "", ns > 2 ? stops[2] : "", r, m, cut);
        free(r);
    }
}

int main(void)
{
    hand_cases();
    random_cases();
    return test_done();
}
