/* Unicode normalization through utf8proc. Most text is already in NFC, so NFC first runs the standard
 * quick check (every character "NFC_QC=Yes" with combining class 0 means the text is NFC) from a bitmap
 * of the characters that fail it, built once per process; only text that fails goes through
 * utf8proc_map, which allocates. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "gw_tok_internal.h"
#include "gw_tok_utf8.h"

#define CP_LIMIT 0x110000u
static uint8_t g_nfc_maybe[CP_LIMIT / 8]; /* bit set: the character may change under NFC in context */
static pthread_once_t g_nfc_once = PTHREAD_ONCE_INIT;

/* A character that can be the second of a canonical composition pair. utf8proc 2.8 and older flag
 * it with comb_index >= 0x8000; later versions have a comb_issecond bit. */
static int is_comp_second(const utf8proc_property_t *p)
{
#if UTF8PROC_VERSION_MAJOR == 2 && UTF8PROC_VERSION_MINOR < 9
    return p->comb_index != UINT16_MAX && p->comb_index >= 0x8000;
#else
    return p->comb_issecond;
#endif
}

static void build_nfc_table(void)
{
    for (uint32_t cp = 0x300; cp < CP_LIMIT; cp++) { /* everything below U+0300 is NFC-stable */
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
        int maybe = p->combining_class != 0 || is_comp_second(p);
        /* Hangul vowel and trailing jamo compose with the syllable before them. */
        if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) maybe = 1;
        if (!maybe && p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) {
            /* Canonically decomposable: stable only if NFC maps it back to itself (not a singleton or
             * a composition exclusion). */
            uint8_t in[4];
            size_t l = gw_tok_utf8_encode(cp, in);
            utf8proc_uint8_t *o = NULL;
            utf8proc_ssize_t ol =
                utf8proc_map(in, (utf8proc_ssize_t)l, &o, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (ol != (utf8proc_ssize_t)l || memcmp(o, in, l) != 0) maybe = 1;
            free(o);
        }
        if (maybe) g_nfc_maybe[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    }
}

void gw_tok_nfc_init(void)
{
    pthread_once(&g_nfc_once, build_nfc_table);
}

int gw_tok_nfc_quick_yes(const uint8_t *s, size_t n)
{
    pthread_once(&g_nfc_once, build_nfc_table);
    size_t i = 0;
    while (i < n) {
        /* Lead bytes below 0xCC encode code points below U+0300. */
        if (s[i] < 0xCC) {
            i++;
            continue;
        }
        uint32_t cp;
        i += gw_tok_utf8_decode(s + i, n - i, &cp);
        if (cp < CP_LIMIT && (g_nfc_maybe[cp >> 3] & (1u << (cp & 7)))) return 0;
    }
    return 1;
}

static int form_options(int form)
{
    switch (form) {
    case GW_TOK_NFC:
        return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    case GW_TOK_NFD:
        return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    case GW_TOK_NFKC:
        return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    default:
        return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    }
}

static int is_ascii(const uint8_t *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ull) return 0;
    }
    for (; i < n; i++)
        if (s[i] & 0x80) return 0;
    return 1;
}

int32_t gw_tok_normalize_form(int form, const uint8_t *s, size_t n, uint8_t **out, size_t *out_len,
                              struct mm_err *err)
{
    *out = NULL;
    *out_len = n;
    /* ASCII is invariant under all four forms. */
    if (is_ascii(s, n)) return MM_OK;
    if (form == GW_TOK_NFC && gw_tok_nfc_quick_yes(s, n)) return MM_OK;
    if (n > (size_t)INT32_MAX) return mm_err_set(err, MM_TOO_LARGE, "normalize: text of %zu bytes", n);
    utf8proc_uint8_t *o = NULL;
    utf8proc_ssize_t ol = utf8proc_map(s, (utf8proc_ssize_t)n, &o, form_options(form));
    if (ol < 0) {
        free(o);
        if (ol == UTF8PROC_ERROR_NOMEM) return mm_err_set(err, MM_NOMEM, "normalize: out of memory");
        return mm_err_set(err, MM_INVALID, "normalize: %s", utf8proc_errmsg(ol));
    }
    *out = o;
    *out_len = (size_t)ol;
    return MM_OK;
}

int32_t gw_tok_normalize(const struct gw_tokenizer *tok, const uint8_t *s, size_t n, uint8_t **out,
                         size_t *out_len, struct mm_err *err)
{
    *out = NULL;
    *out_len = n;
    for (int i = 0; i < tok->n_norms; i++) {
        uint8_t *o = NULL;
        size_t ol = 0;
        int32_t rc = gw_tok_normalize_form(tok->norms[i], *out ? *out : s, *out_len, &o, &ol, err);
        if (rc) {
            free(*out);
            *out = NULL;
            return rc;
        }
        if (o) {
            free(*out);
            *out = o;
            *out_len = ol;
        }
    }
    return MM_OK;
}
