/* Decoding: lossy UTF-8 exactly as Rust's from_utf8_lossy (Unicode "maximal subpart" practice), the
 * incremental decoder against whole-sequence decoding on every byte split, special-token skipping. The
 * tokenizer here has one token per byte, so any byte sequence is an id sequence. */
#include "mmgw_test.h"
#include "tok_test_util.h"

#define R "\xEF\xBF\xBD" /* U+FFFD */

static char *decode(const struct gw_tokenizer *tok, const uint32_t *ids, size_t n, uint32_t flags,
                    size_t *len)
{
    struct mm_buf b;
    struct mm_err e;
    mm_buf_init(&b, 0);
    if (gw_tokenizer_decode(tok, ids, n, flags, &b, &e)) {
        mm_buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.data;
}

/* Independent reference: Unicode Table 3-7 ranges, replacement per maximal subpart. */
static size_t ref_lossy(const unsigned char *s, size_t n, unsigned char *out)
{
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned b = s[i];
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (b < 0x80) {
            out[o++] = (unsigned char)b;
            i++;
            continue;
        } else if (b >= 0xC2 && b <= 0xDF)
            need = 1;
        else if (b == 0xE0)
            need = 2, lo = 0xA0;
        else if (b >= 0xE1 && b <= 0xEC)
            need = 2;
        else if (b == 0xED)
            need = 2, hi = 0x9F;
        else if (b >= 0xEE && b <= 0xEF)
            need = 2;
        else if (b == 0xF0)
            need = 3, lo = 0x90;
        else if (b >= 0xF1 && b <= 0xF3)
            need = 3;
        else if (b == 0xF4)
            need = 3, hi = 0x8F;
        else {
            memcpy(out + o, R, 3);
            o += 3;
            i++;
            continue;
        }
        size_t k = 1;
        while (k <= need && i + k < n) {
            unsigned c = s[i + k];
            unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
            if (c < l || c > h) break;
            k++;
        }
        if (k == need + 1) {
            memcpy(out + o, s + i, k);
            o += k;
        } else {
            memcpy(out + o, R, 3);
            o += 3;
        }
        i += k;
    }
    return o;
}

/* Well-formed UTF-8: the lossy reference leaves it unchanged (U+FFFD itself is well-formed). */
static int utf8_valid(const unsigned char *s, size_t n)
{
    unsigned char tmp[3 * 64];
    if (n == 0) return 1;
    if (n > 64) return 0;
    size_t o = ref_lossy(s, n, tmp);
    return o == n && memcmp(tmp, s, n) == 0;
}

/* Decode bytes whole and streamed one byte per push; both must equal want. */
static void check_bytes(const struct gw_tokenizer *tok, const char *bytes, size_t n, const char *want)
{
    uint32_t ids[64];
    for (size_t i = 0; i < n; i++) ids[i] = (unsigned char)bytes[i];
    size_t len = 0;
    char *got = decode(tok, ids, n, 0, &len);
    CHECK_MSG(got && len == strlen(want) && memcmp(got, want, len) == 0, "whole decode of %zu bytes", n);
    free(got);

    struct gw_tok_stream st;
    struct mm_err e;
    struct mm_buf acc;
    mm_buf_init(&acc, 0);
    gw_tok_stream_init(&st, tok, 0);
    for (size_t i = 0; i < n; i++) {
        size_t before = acc.len;
        CHECK(gw_tok_stream_push(&st, ids[i], &acc, &e) == MM_OK);
        CHECK(gw_tok_stream_pending(&st) <= 3);
        CHECK_MSG(utf8_valid((unsigned char *)acc.data + before, acc.len - before),
                  "delta at byte %zu is not whole characters", i);
    }
    CHECK(gw_tok_stream_finish(&st, &acc, &e) == MM_OK);
    CHECK_EQ_INT(gw_tok_stream_pending(&st), 0);
    CHECK_MSG(acc.len == strlen(want) && (acc.len == 0 || memcmp(acc.data, want, acc.len) == 0),
              "streamed decode of %zu bytes", n);
    mm_buf_free(&acc);
}

int main(void)
{
    struct gw_tokenizer *tok = tt_load(NULL, 0, NULL);

    /* Unicode 15, Table 3-8 (U+FFFD for maximal subparts) */
    check_bytes(tok, "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", 13, "a" R R R "b" R "c" R R "d");
    check_bytes(tok, "\xED\xA0\x80", 3, R R R);       /* surrogate */
    check_bytes(tok, "\xC0\xAF", 2, R R);             /* overlong */
    check_bytes(tok, "\xE0\x80\x80", 3, R R R);       /* overlong 3-byte */
    check_bytes(tok, "\xF4\x90\x80\x80", 4, R R R R); /* above U+10FFFF */
    check_bytes(tok, "\xF0\x9F\x98", 3, R);           /* truncated at the end: one replacement */
    check_bytes(tok, "\xF0\x9F\x98\x41", 4, R "A");   /* truncated before ASCII */
    check_bytes(tok, "\xFF\xFE", 2, R R);
    check_bytes(tok, "\xF0\x9F\x98\x80", 4, "\xF0\x9F\x98\x80"); /* U+1F600 */
    check_bytes(tok, "\xC3\xA9t\xC3\xA9", 5, "\xC3\xA9t\xC3\xA9");
    check_bytes(tok, "\xE2\x82", 2, R);
    check_bytes(tok, "\xE2\x82\xE2\x82\xAC", 5, R "\xE2\x82\xAC");
    check_bytes(tok, "", 0, "");

    /* Random byte strings over the bytes that matter, against the independent reference. */
    static const unsigned char alphabet[] = {0x41, 0x20, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2,
                                             0xDF, 0xE0, 0xE1, 0xED, 0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF};
    unsigned seed = 12345;
    for (int t = 0; t < 3000; t++) {
        char b[16];
        unsigned char want[64];
        size_t n = (seed = seed * 1103515245u + 12345u) >> 16 & 15;
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            b[i] = (char)alphabet[(seed >> 16) % sizeof alphabet];
        }
        size_t wl = ref_lossy((unsigned char *)b, n, want);
        want[wl] = '\0';
        check_bytes(tok, b, n, (char *)want);
    }

    /* ids without a token are skipped, as HF does */
    uint32_t odd[] = {0x68, 999999, 0x69};
    size_t len;
    char *s = decode(tok, odd, 3, 0, &len);
    CHECK_STR(s, "hi");
    free(s);
    gw_tokenizer_free(tok);

    /* special tokens: kept by default, dropped with GW_TOK_SKIP_SPECIAL; non-special added tokens kept */
    tok = tt_load(
        NULL, 0,
        "{\"added_tokens\": [{\"id\": 256, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
        " {\"id\": 257, \"content\": \"<x>\", \"special\": false, \"normalized\": false},"
        " {\"id\": 258, \"content\": \"caf\xC3\xA9 \xE2\x82\xAC\", \"special\": true}]}");
    uint32_t ids[] = {256, 'a', 257, 'b', 258};
    s = decode(tok, ids, 5, 0, &len);
    CHECK_STR(s, "<s>a<x>bcaf\xC3\xA9 \xE2\x82\xAC");
    free(s);
    s = decode(tok, ids, 5, GW_TOK_SKIP_SPECIAL, &len);
    CHECK_STR(s, "a<x>b");
    free(s);
    CHECK(gw_tokenizer_is_special(tok, 256));
    CHECK(!gw_tokenizer_is_special(tok, 257));
    CHECK(!gw_tokenizer_is_special(tok, 'a'));
    /* An added token made only of byte characters decodes through the byte table: "éé" is two GPT-2
     * byte characters (0xE9 0xE9), so HF turns it into two invalid bytes. A token whose content is
     * already in the vocab ("é" = byte 0xE9) gets the vocab id, whatever the file says. */
    gw_tokenizer_free(tok);
    tok = tt_load(NULL, 0,
                  "{\"added_tokens\": [{\"id\": 256, \"content\": \"\xC3\xA9\xC3\xA9\", \"special\": false},"
                  " {\"id\": 257, \"content\": \"\xC3\xA9\", \"special\": false}]}");
    uint32_t e1[] = {256};
    s = decode(tok, e1, 1, 0, &len);
    CHECK_STR(s, R R);
    free(s);
    size_t bl = 0;
    const uint8_t *tb = gw_tokenizer_token_bytes(tok, 256, &bl);
    CHECK(tb && bl == 2 && tb[0] == 0xE9 && tb[1] == 0xE9);
    uint32_t tid = 0;
    CHECK(gw_tokenizer_token_to_id(tok, "\xC3\xA9", 2, &tid) == MM_OK && tid == 0xE9);
    CHECK_EQ_INT(gw_tokenizer_vocab_size(tok), 257);
    gw_tokenizer_free(tok);
    return test_done();
}
