/* The NFC quick check that lets most text skip normalization, verified over every code point: a
 * character it calls stable has combining class 0 and is its own NFC; and no character that occurs
 * after the first position in the decomposition of a composite NFC keeps (so it can be the second of a
 * composition) is called stable. Plus normalization through the tokenizer API for the forms we support. */
#include <utf8proc.h>

#include "gw_tok_internal.h"
#include "gw_tok_utf8.h"
#include "mmgw_test.h"
#include "tok_test_util.h"

static int stable(uint32_t cp)
{
    uint8_t b[4];
    size_t l = gw_tok_utf8_encode(cp, b);
    return gw_tok_nfc_quick_yes(b, l);
}

int main(void)
{
    int bad_self = 0, bad_second = 0, n_stable = 0, n_kept = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        uint8_t in[4];
        size_t l = gw_tok_utf8_encode(cp, in);
        if (stable(cp)) {
            n_stable++;
            utf8proc_uint8_t *o = NULL;
            utf8proc_ssize_t ol =
                utf8proc_map(in, (utf8proc_ssize_t)l, &o, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (utf8proc_get_property((utf8proc_int32_t)cp)->combining_class != 0 ||
                ol != (utf8proc_ssize_t)l || memcmp(o, in, l) != 0) {
                if (bad_self++ < 5) fprintf(stderr, "U+%04X called stable but NFC changes it\n", cp);
            }
            free(o);
        }
        /* a composite that NFC keeps (not excluded): everything after its first character composes */
        utf8proc_int32_t dec[8];
        int opt = 0;
        utf8proc_ssize_t dn = utf8proc_decompose_char((utf8proc_int32_t)cp, dec, 8, UTF8PROC_DECOMPOSE, &opt);
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t nl =
            dn > 1 ? utf8proc_map(in, (utf8proc_ssize_t)l, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE) : 0;
        int kept = dn > 1 && nl == (utf8proc_ssize_t)l && memcmp(nfc, in, l) == 0;
        free(nfc);
        n_kept += kept;
        for (utf8proc_ssize_t k = 1; kept && k < dn && k < 8; k++)
            if (stable((uint32_t)dec[k])) {
                if (bad_second++ < 5)
                    fprintf(stderr, "U+%04X in the decomposition of U+%04X is called stable\n",
                            (unsigned)dec[k], cp);
            }
    }
    /* the loops did their work: most code points are stable, ~940 composites recompose (Unicode 15) */
    CHECK_MSG(n_stable > 1000000 && n_kept > 900, "%d stable, %d composites", n_stable, n_kept);
    CHECK_EQ_INT(bad_self, 0);
    CHECK_EQ_INT(bad_second, 0);
    /* Hangul: vowels and trailing consonants compose with what precedes them */
    CHECK(!stable(0x1161) && !stable(0x11A8) && stable(0xAC00) && stable(0x1100));
    CHECK(stable('a') && stable(0xE9) && !stable(0x301) && !stable(0x212B) && stable(0x4E2D));

    /* the four forms through the tokenizer: NFKC folds the ligature and full-width letters */
    static const char *const forms[] = {"NFC", "NFD", "NFKC", "NFKD"};
    static const char *const want[] = {"\xEF\xAC\x81 \xEF\xBC\xA1 \xC3\xA9",
                                       "\xEF\xAC\x81 \xEF\xBC\xA1 e\xCC\x81", "fi A \xC3\xA9",
                                       "fi A e\xCC\x81"};
    for (int f = 0; f < 4; f++) {
        char extra[128];
        snprintf(extra, sizeof extra,
                 "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"%s\"}]}}",
                 forms[f]);
        struct gw_tokenizer *tok = tt_load(NULL, 0, extra);
        const char *in = "\xEF\xAC\x81 \xEF\xBC\xA1 e\xCC\x81";
        uint32_t ids[64];
        size_t n = strlen(want[f]);
        for (size_t i = 0; i < n; i++) ids[i] = (unsigned char)want[f][i];
        CHECK_MSG(tt_encode_is(tok, in, strlen(in), 0, ids, n), "%s", forms[f]);
        gw_tokenizer_free(tok);
    }
    return test_done();
}
