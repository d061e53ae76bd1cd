/* HF tokenizers runs pre-tokenizer regexes through Oniguruma (default syntax, UTF-8). We run them
 * through PCRE2 (UTF + UCP, JIT) and translate the constructs whose meaning differs:
 *   \s \S   Oniguruma: White_Space (TAB..CR, SPACE, NEL U+0085, Zs, Zl, Zp); PCRE2 lacks U+0085.
 *           Spelled out as explicit ranges, so the result does not depend on either library's tables.
 *   \w \W   Oniguruma: Letter|Mark|Number|Connector_Punctuation; PCRE2 (10.42): Letter|Number|'_'.
 *   \d \D   Decimal_Number in both; spelled \p{Nd} for clarity.
 *   \h \H   Oniguruma: hex digit; PCRE2: horizontal space.
 *   \b \B   word boundary over Oniguruma's \w, written with look-arounds.
 *   (?m)    Oniguruma (Ruby options): dot matches newline = PCRE2 (?s).
 *   {,n}    Oniguruma: {0,n}; PCRE2 10.42 reads it literally.
 *   [:alpha:] and friends inside classes: Oniguruma's Unicode definitions.
 * `^`/`$` are line anchors in Oniguruma, hence PCRE2_MULTILINE. Constructs PCRE2 cannot express
 * (nested classes, && intersections, \W or \H inside a class) are refused with MM_UNSUPPORTED rather
 * than silently matching something else. */
#include <string.h>

#include "gw_tok_internal.h"

#define WS_BODY                                                                                              \
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define NWS_BODY                                                                                             \
    "\\x{0}-\\x{8}\\x{E}-\\x{1F}\\x{21}-\\x{84}\\x{86}-\\x{9F}\\x{A1}-\\x{167F}\\x{1681}-\\x{1FFF}"          \
    "\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{10FFFF}"
#define WORD_BODY "\\p{L}\\p{M}\\p{N}\\p{Pc}"
#define HEX_BODY "0-9A-Fa-f"

static int put(struct mm_buf *o, const char *s)
{
    return mm_buf_append_str(o, s);
}

/* Length of the UTF-8 character starting with byte b (1 for stray bytes). */
static size_t char_len(unsigned char b)
{
    return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

/* Copy a \p{..}, \x{..} or \o{..} brace argument through (p points at '{'); returns bytes used. */
static size_t copy_brace(const char *p, size_t left, struct mm_buf *o, int *fail)
{
    const char *close = memchr(p, '}', left);
    if (!close) {
        *fail = 1;
        return 0;
    }
    size_t n = (size_t)(close - p) + 1;
    if (mm_buf_append(o, p, n)) *fail = 1;
    return n;
}

/* A POSIX bracket [:name:] inside a class, in Oniguruma's Unicode meaning. */
static const char *posix_class(const char *name, size_t len)
{
    static const struct {
        const char *name, *body;
    } map[] = {
        {"alpha", "\\p{L}\\p{M}"},
        {"alnum", "\\p{L}\\p{M}\\p{Nd}"},
        {"digit", "\\p{Nd}"},
        {"space", WS_BODY},
        {"word", "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"},
        {"lower", "\\p{Ll}"},
        {"upper", "\\p{Lu}"},
        {"xdigit", HEX_BODY},
        {"blank", "\\t\\p{Zs}"},
        {"ascii", "\\x{0}-\\x{7F}"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strlen(map[i].name) == len && memcmp(map[i].name, name, len) == 0) return map[i].body;
    return NULL;
}

int32_t gw_tok_regex_translate(const char *pat, size_t len, struct mm_buf *o, struct mm_err *err)
{
    int in_class = 0, fail = 0;
    size_t i = 0, class_start = 0;
    while (i < len && !fail) {
        unsigned char c = (unsigned char)pat[i];
        if (c == '\\') {
            if (i + 1 >= len) return mm_err_set(err, MM_INVALID, "regex: trailing backslash");
            char e = pat[i + 1];
            const char *rep = NULL;
            if (!in_class) {
                switch (e) {
                case 's':
                    rep = "[" WS_BODY "]";
                    break;
                case 'S':
                    rep = "[" NWS_BODY "]";
                    break;
                case 'w':
                    rep = "[" WORD_BODY "]";
                    break;
                case 'W':
                    rep = "[^" WORD_BODY "]";
                    break;
                case 'd':
                    rep = "\\p{Nd}";
                    break;
                case 'D':
                    rep = "\\P{Nd}";
                    break;
                case 'h':
                    rep = "[" HEX_BODY "]";
                    break;
                case 'H':
                    rep = "[^" HEX_BODY "]";
                    break;
                case 'b':
                    rep =
                        "(?:(?<=[" WORD_BODY "])(?![" WORD_BODY "])|(?<![" WORD_BODY "])(?=[" WORD_BODY "]))";
                    break;
                case 'B':
                    rep =
                        "(?:(?<=[" WORD_BODY "])(?=[" WORD_BODY "])|(?<![" WORD_BODY "])(?![" WORD_BODY "]))";
                    break;
                default:
                    break;
                }
            } else {
                switch (e) {
                case 's':
                    rep = WS_BODY;
                    break;
                case 'S':
                    rep = NWS_BODY;
                    break;
                case 'w':
                    rep = WORD_BODY;
                    break;
                case 'd':
                    rep = "\\p{Nd}";
                    break;
                case 'D':
                    rep = "\\P{Nd}";
                    break;
                case 'h':
                    rep = HEX_BODY;
                    break;
                case 'W':
                case 'H':
                    return mm_err_set(err, MM_UNSUPPORTED, "regex: \\%c inside a character class", e);
                default:
                    break;
                }
            }
            if (rep) {
                fail = put(o, rep);
                i += 2;
                continue;
            }
            if ((e == 'p' || e == 'P' || e == 'x' || e == 'o') && i + 2 < len && pat[i + 2] == '{') {
                fail = mm_buf_append(o, pat + i, 2);
                i += 2;
                i += copy_brace(pat + i, len - i, o, &fail);
                if (fail) return mm_err_set(err, MM_INVALID, "regex: unterminated \\%c{", e);
                continue;
            }
            size_t cl = char_len((unsigned char)e);
            if (i + 1 + cl > len) cl = len - i - 1;
            fail = mm_buf_append(o, pat + i, 1 + cl);
            i += 1 + cl;
            continue;
        }
        if (in_class) {
            if (c == '[') {
                if (i + 1 < len && pat[i + 1] == ':') {
                    const char *end = NULL;
                    for (size_t j = i + 2; j + 1 < len; j++)
                        if (pat[j] == ':' && pat[j + 1] == ']') {
                            end = pat + j;
                            break;
                        }
                    const char *name = pat + i + 2;
                    const char *body = end ? posix_class(name, (size_t)(end - name)) : NULL;
                    if (!body) return mm_err_set(err, MM_UNSUPPORTED, "regex: POSIX class at offset %zu", i);
                    fail = put(o, body);
                    i = (size_t)(end - pat) + 2;
                    continue;
                }
                return mm_err_set(err, MM_UNSUPPORTED, "regex: nested character class at offset %zu", i);
            }
            if (c == '&' && i + 1 < len && pat[i + 1] == '&')
                return mm_err_set(err, MM_UNSUPPORTED, "regex: class intersection && at offset %zu", i);
            /* a ']' right after '[' or '[^' is a literal, as in PCRE2 */
            if (c == ']' && i > class_start) in_class = 0;
            fail = mm_buf_append(o, pat + i, 1);
            i++;
            continue;
        }
        if (c == '[') {
            in_class = 1;
            fail = mm_buf_append(o, "[", 1);
            i++;
            if (i < len && pat[i] == '^') {
                fail = fail || mm_buf_append(o, "^", 1);
                i++;
            }
            class_start = i;
            continue;
        }
        if (c == '(' && i + 2 < len && pat[i + 1] == '?') {
            /* option groups (?imx-imx) and (?imx-imx:...): Ruby's m is PCRE2's s */
            size_t j = i + 2;
            while (j < len && strchr("imx-", pat[j]) && pat[j]) j++;
            if (j > i + 2 && j < len && (pat[j] == ')' || pat[j] == ':')) {
                fail = mm_buf_append(o, "(?", 2);
                for (size_t k = i + 2; k < j && !fail; k++)
                    fail = mm_buf_append(o, pat[k] == 'm' ? "s" : pat + k, 1);
                i = j;
                continue;
            }
        }
        if (c == '{' && i + 1 < len && pat[i + 1] == ',') {
            size_t j = i + 2;
            while (j < len && pat[j] >= '0' && pat[j] <= '9') j++;
            if (j > i + 2 && j < len && pat[j] == '}') {
                fail = mm_buf_append(o, "{0", 2);
                i++;
                continue;
            }
        }
        size_t cl = char_len(c);
        if (i + cl > len) cl = len - i;
        fail = mm_buf_append(o, pat + i, cl);
        i += cl;
    }
    if (fail) return mm_err_set(err, MM_NOMEM, "regex: out of memory");
    if (in_class) return mm_err_set(err, MM_INVALID, "regex: unterminated character class");
    return MM_OK;
}

int32_t gw_tok_regex_compile(const char *pat, size_t len, int literal, pcre2_code **out, struct mm_err *err)
{
    struct mm_buf t;
    mm_buf_init(&t, 0);
    *out = NULL;
    const char *src = pat;
    size_t src_len = len;
    uint32_t opts = PCRE2_UTF;
    if (literal) {
        opts |= PCRE2_LITERAL; /* cannot be combined with UCP, which a literal does not need */
    } else {
        opts |= PCRE2_UCP;
        int32_t rc = gw_tok_regex_translate(pat, len, &t, err);
        if (rc) {
            mm_buf_free(&t);
            return rc;
        }
        src = t.data ? t.data : "";
        src_len = t.len;
        opts |= PCRE2_MULTILINE | PCRE2_ALT_CIRCUMFLEX;
    }
    int ec;
    PCRE2_SIZE eoff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)src, src_len, opts, &ec, &eoff, NULL);
    mm_buf_free(&t);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return mm_err_set(err, MM_INVALID, "regex '%.*s': %s", (int)(len > 80 ? 80 : len), pat, (char *)msg);
    }
    /* JIT is an optimisation: without it (unsupported CPU) the interpreter gives the same matches. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *out = re;
    return MM_OK;
}
