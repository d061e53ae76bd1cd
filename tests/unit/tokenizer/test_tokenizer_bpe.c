/* BPE: the linear-scan and heap merge strategies agree on random words under random merge tables
 * (including long words that take the heap path inside the encoder), ignore_merges, the per-thread
 * cache (results survive the cache being cleared) and concurrent encoding from several threads. */
#include <pthread.h>

#include "gw_tok_internal.h"
#include "mmgw_test.h"
#include "tok_test_util.h"

static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11) % n;
}

/* Independent reference: merge the leftmost lowest-rank pair until none applies. */
static size_t ref_merge(const struct gw_tok_mergemap *m, uint32_t *s, size_t n)
{
    for (;;) {
        size_t best_i = SIZE_MAX;
        uint32_t best_rank = UINT32_MAX, best_id = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            const struct gw_tok_mergeslot *x = gw_tok_mergemap_get(m, s[i], s[i + 1]);
            if (x && x->rank < best_rank) {
                best_rank = x->rank;
                best_i = i;
                best_id = x->id;
            }
        }
        if (best_i == SIZE_MAX) return n;
        s[best_i] = best_id;
        memmove(s + best_i + 1, s + best_i + 2, (n - best_i - 2) * sizeof *s);
        n--;
    }
}

struct thr {
    const struct gw_tokenizer *tok;
    const char *text;
    const struct gw_tok_ids *want;
    int ok;
};

static void *thr_main(void *p)
{
    struct thr *t = p;
    t->ok = 1;
    for (int r = 0; r < 20; r++) {
        struct gw_tok_ids ids = {0};
        struct mm_err e;
        if (gw_tokenizer_encode(t->tok, t->text, strlen(t->text), 0, &ids, &e) || ids.n != t->want->n ||
            memcmp(ids.ids, t->want->ids, ids.n * sizeof *ids.ids) != 0)
            t->ok = 0;
        gw_tok_ids_free(&ids);
    }
    return NULL;
}

int main(void)
{
    /* Random merge tables over the bytes a, b, c: every token of length 2..5 made of them, merged from a
     * random split, in random rank order (so ranks do not follow lengths). */
    for (int table = 0; table < 20; table++) {
        static char strs[400][8];
        static const char *pairs[400][2];
        size_t np = 0, ns = 0;
        for (int len = 2; len <= 5; len++) {
            int count = 1;
            for (int k = 0; k < len; k++) count *= 3;
            for (int x = 0; x < count && ns < 400; x++) {
                int v = x;
                for (int k = 0; k < len; k++, v /= 3) strs[ns][k] = (char)('a' + v % 3);
                strs[ns][len] = '\0';
                ns++;
            }
        }
        /* keep tokens whose two halves exist: split at a random point into already-listed tokens */
        static char halves[400][2][8];
        for (size_t i = 0; i < ns; i++) {
            size_t len = strlen(strs[i]);
            size_t cut = 1 + rnd((uint32_t)(len - 1));
            memcpy(halves[np][0], strs[i], cut);
            halves[np][0][cut] = '\0';
            memcpy(halves[np][1], strs[i] + cut, len - cut + 1);
            pairs[np][0] = halves[np][0];
            pairs[np][1] = halves[np][1];
            np++;
        }
        /* order: shuffle, then a stable pass so every merge comes after the merges creating its halves */
        for (size_t i = np; i > 1; i--) {
            size_t j = rnd((uint32_t)i);
            const char *a = pairs[i - 1][0], *b = pairs[i - 1][1];
            pairs[i - 1][0] = pairs[j][0];
            pairs[i - 1][1] = pairs[j][1];
            pairs[j][0] = a;
            pairs[j][1] = b;
        }
        const char *ordered[400][2];
        size_t no = 0;
        static char known[1200][8];
        size_t nk = 3;
        strcpy(known[0], "a"), strcpy(known[1], "b"), strcpy(known[2], "c");
        int progress = 1;
        static int used[400];
        memset(used, 0, sizeof used);
        while (progress) {
            progress = 0;
            for (size_t i = 0; i < np; i++) {
                if (used[i]) continue;
                int ha = 0, hb = 0;
                for (size_t k = 0; k < nk; k++) {
                    ha |= strcmp(known[k], pairs[i][0]) == 0;
                    hb |= strcmp(known[k], pairs[i][1]) == 0;
                }
                if (!ha || !hb) continue;
                used[i] = 1;
                ordered[no][0] = pairs[i][0];
                ordered[no][1] = pairs[i][1];
                no++;
                snprintf(known[nk++], 8, "%s%s", pairs[i][0], pairs[i][1]);
                progress = 1;
            }
        }
        struct gw_tokenizer *tok = tt_load(ordered, no, NULL);
        for (int w = 0; w < 300; w++) {
            uint32_t a[200], b[200], c[200];
            size_t n = 2 + rnd(w < 280 ? 40 : 190);
            for (size_t i = 0; i < n; i++) a[i] = b[i] = c[i] = 'a' + rnd(3);
            size_t na = gw_tok_bpe_merge_scan(&tok->merges, a, n);
            size_t nb = gw_tok_bpe_merge_heap(&tok->merges, b, n, NULL);
            size_t nc = ref_merge(&tok->merges, c, n);
            CHECK_MSG(na == nc && memcmp(a, c, na * sizeof *a) == 0, "scan differs from reference (table %d)",
                      table);
            CHECK_MSG(nb == nc && memcmp(b, c, nb * sizeof *b) == 0, "heap differs from reference (table %d)",
                      table);
        }
        /* through the encoder: one long word (heap path) equals the reference */
        char word[301];
        uint32_t ref[300];
        for (size_t i = 0; i < 300; i++) word[i] = (char)('a' + rnd(3)), ref[i] = (unsigned char)word[i];
        word[300] = '\0';
        size_t nr = ref_merge(&tok->merges, ref, 300);
        CHECK(tt_encode_is(tok, word, 300, 0, ref, nr));
        gw_tokenizer_free(tok);
    }

    /* ignore_merges: a word present in the vocab is taken whole even if merges would not build it */
    static const char *const m1[][2] = {{"a", "b"}, {"ab", "c"}};
    {
        struct gw_tokenizer *tok = tt_load(m1, 2, NULL);
        CHECK(tt_encode_is(tok, "abc", 3, 0, TT_IDS(257)));
        CHECK(tt_encode_is(tok, "bc", 2, 0, TT_IDS('b', 'c')));
        gw_tokenizer_free(tok);
        /* build the same with ignore_merges on and an extra vocab entry "bc" that no merge makes */
        char *doc = tt_json(m1, 2, NULL);
        char *p = strstr(doc, "\"ignore_merges\":false");
        CHECK(p != NULL);
        if (p) memcpy(p, "\"ignore_merges\":true ", 21);
        p = strstr(doc, "\"vocab\":{");
        size_t dl = strlen(doc);
        char *doc2 = malloc(dl + 32);
        size_t head = (size_t)(p - doc) + 9;
        memcpy(doc2, doc, head);
        memcpy(doc2 + head, "\"bc\":300,", 9);
        memcpy(doc2 + head + 9, doc + head, dl - head + 1);
        struct mm_err e;
        CHECK(gw_tokenizer_load_mem(doc2, strlen(doc2), "im", &tok, &e) == MM_OK);
        CHECK(tt_encode_is(tok, "bc", 2, 0, TT_IDS(300)));
        CHECK(tt_encode_is(tok, "abc", 3, 0, TT_IDS(257)));
        gw_tokenizer_free(tok);
        free(doc);
        free(doc2);
    }

    /* cache: 20000 distinct words (the cache clears itself several times), encoded twice */
    static const char *const m2[][2] = {{"q", "u"}, {"qu", "i"}, {"e", "r"}, {" ", "q"}};
    struct gw_tokenizer *tok = tt_load(
        m2, 4,
        "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}}");
    size_t cap = 20000 * 9 + 1, len = 0;
    char *text = malloc(cap);
    for (int w = 0; w < 20000; w++) {
        text[len++] = ' ';
        for (int k = 0; k < 7; k++) text[len++] = "quiertxz"[rnd(8)];
    }
    text[len] = '\0';
    struct gw_tok_ids first = {0}, second = {0};
    struct mm_err e;
    CHECK(gw_tokenizer_encode(tok, text, len, 0, &first, &e) == MM_OK);
    CHECK(gw_tokenizer_encode(tok, text, len, 0, &second, &e) == MM_OK);
    CHECK(first.n == second.n && memcmp(first.ids, second.ids, first.n * sizeof *first.ids) == 0);
    /* word by word, one encode call each, gives the same ids */
    struct gw_tok_ids words = {0};
    for (size_t i = 0; i < len; i += 8) CHECK(gw_tokenizer_encode(tok, text + i, 8, 0, &words, &e) == MM_OK);
    CHECK(words.n == first.n && memcmp(words.ids, first.ids, first.n * sizeof *first.ids) == 0);

    /* several threads share the tokenizer */
    pthread_t tid[4];
    struct thr th[4];
    for (int i = 0; i < 4; i++) {
        th[i] = (struct thr){tok, text, &first, 0};
        CHECK(pthread_create(&tid[i], NULL, thr_main, &th[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(tid[i], NULL);
        CHECK_MSG(th[i].ok, "thread %d got different ids", i);
    }
    gw_tok_ids_free(&first);
    gw_tok_ids_free(&second);
    gw_tok_ids_free(&words);
    free(text);
    gw_tokenizer_free(tok);
    return test_done();
}
