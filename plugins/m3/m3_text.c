/* Text helpers of the M3 plugin: buffer, Python/serde number spellings, JSON writers. */
#include "m3_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void m3_buf_init(struct m3_buf *b, const struct mmgw_host_api *host)
{
    memset(b, 0, sizeof(*b));
    b->host = host;
}

void m3_buf_free(struct m3_buf *b)
{
    if (b->p) b->host->free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

static int buf_reserve(struct m3_buf *b, size_t extra)
{
    if (b->oom) return -1;
    if (extra <= b->cap - b->len) return 0;
    if (extra > SIZE_MAX / 2 - b->len) {
        b->oom = 1;
        return -1;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < extra) cap *= 2;
    char *p = b->host->alloc(cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    if (b->len) memcpy(p, b->p, b->len);
    if (b->p) b->host->free(b->p);
    b->p = p;
    b->cap = cap;
    return 0;
}

void m3_buf_reserve(struct m3_buf *b, size_t n)
{
    int oom = b->oom;
    buf_reserve(b, n);
    b->oom = oom; /* only a hint: a buffer that could not get it grows as usual */
}

void m3_buf_put(struct m3_buf *b, const void *data, size_t n)
{
    if (n == 0 || buf_reserve(b, n) != 0) return;
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

void m3_buf_puts(struct m3_buf *b, const char *s)
{
    m3_buf_put(b, s, strlen(s));
}

void m3_buf_putc(struct m3_buf *b, char c)
{
    m3_buf_put(b, &c, 1);
}

void m3_buf_truncate(struct m3_buf *b, size_t len)
{
    if (len < b->len) b->len = len;
}

void m3_buf_consume(struct m3_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

/* ---- shortest round-trip digits ---- */

/* Parse "%.*e" output ("d.ddde+XX") into an integer mantissa and the power of ten of its last digit. */
static void parse_sci(const char *s, uint64_t *mant, int *scale, int *ndig)
{
    uint64_t m = 0;
    int n = 0;
    for (; *s && *s != 'e'; s++) {
        if (*s >= '0' && *s <= '9') {
            m = m * 10 + (uint64_t)(*s - '0');
            n++;
        }
    }
    int e = *s == 'e' ? (int)strtol(s + 1, NULL, 10) : 0;
    *mant = m;
    *ndig = n;
    *scale = e - (n - 1);
}

static int reads_back(uint64_t m, int scale, double ax)
{
    char s[48];
    snprintf(s, sizeof(s), "%llue%d", (unsigned long long)m, scale);
    return strtod(s, NULL) == ax;
}

static long double distance(uint64_t m, int scale, double ax)
{
    char s[48];
    snprintf(s, sizeof(s), "%llue%d", (unsigned long long)m, scale);
    return fabsl(strtold(s, NULL) - (long double)ax);
}

/* The shortest decimal that reads back as ax (finite, > 0), nearest to ax among those (the rule of David
 * Gay's dtoa mode 0, which Python and ryu follow). Writes its digits without trailing zeros and returns
 * their count; *decpt is set so that ax = 0.DIGITS x 10^decpt. */
static int shortest_digits(double ax, char digits[24], int *decpt)
{
    uint64_t best = 0;
    int best_scale = 0;
    for (int p = 1; p <= 17; p++) {
        char s[48];
        uint64_t m;
        int scale, nd;
        snprintf(s, sizeof(s), "%.*e", p - 1, ax);
        parse_sci(s, &m, &scale, &nd);
        if (strtod(s, NULL) == ax) {
            best = m;
            best_scale = scale;
            break;
        }
        /* The correctly rounded p-digit value can miss while a neighbour hits: the rounding interval of a
         * power of two is narrower below than above. */
        uint64_t pow = 1;
        for (int i = 1; i < p; i++) pow *= 10;
        uint64_t lo = m - 1, hi = m + 1;
        int lo_scale = scale;
        if (m == pow) { /* 100 - 1 = 99 has one digit fewer: use 999 one place lower */
            lo = pow * 10 - 1;
            lo_scale = scale - 1;
        }
        int lo_ok = m > 0 && reads_back(lo, lo_scale, ax), hi_ok = reads_back(hi, scale, ax);
        if (lo_ok && (!hi_ok || distance(lo, lo_scale, ax) <= distance(hi, scale, ax))) {
            best = lo;
            best_scale = lo_scale;
            break;
        }
        if (hi_ok) {
            best = hi;
            best_scale = scale;
            break;
        }
    }
    char tmp[24];
    int n = snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)best);
    *decpt = n + best_scale;
    while (n > 1 && tmp[n - 1] == '0') n--;
    memcpy(digits, tmp, (size_t)n);
    digits[n] = '\0';
    return n;
}

static void put_exponent(struct m3_buf *b, int e, int py_style)
{
    char s[16];
    if (py_style)
        snprintf(s, sizeof(s), "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    else
        snprintf(s, sizeof(s), "e%d", e);
    m3_buf_puts(b, s);
}

static void put_zeros(struct m3_buf *b, int n)
{
    for (int i = 0; i < n; i++) m3_buf_putc(b, '0');
}

/* Both layouts share: digits d (n of them), decimal point position decpt. */
static void fmt_float(struct m3_buf *b, double x, int py_style)
{
    if (isnan(x)) {
        m3_buf_puts(b, py_style ? "nan" : "null");
        return;
    }
    if (signbit(x)) m3_buf_putc(b, '-');
    double ax = fabs(x);
    if (isinf(ax)) {
        m3_buf_puts(b, py_style ? "inf" : "null");
        return;
    }
    if (ax == 0) {
        m3_buf_puts(b, "0.0");
        return;
    }
    char d[24];
    int decpt;
    int n = shortest_digits(ax, d, &decpt);
    int use_exp = py_style ? (decpt <= -4 || decpt > 16) : !(decpt > -5 && decpt <= 16);
    if (use_exp) {
        m3_buf_putc(b, d[0]);
        if (n > 1) {
            m3_buf_putc(b, '.');
            m3_buf_put(b, d + 1, (size_t)n - 1);
        }
        put_exponent(b, decpt - 1, py_style);
    } else if (decpt <= 0) {
        m3_buf_puts(b, "0.");
        put_zeros(b, -decpt);
        m3_buf_put(b, d, (size_t)n);
    } else if (decpt >= n) {
        m3_buf_put(b, d, (size_t)n);
        put_zeros(b, decpt - n);
        m3_buf_puts(b, ".0");
    } else {
        m3_buf_put(b, d, (size_t)decpt);
        m3_buf_putc(b, '.');
        m3_buf_put(b, d + decpt, (size_t)(n - decpt));
    }
}

void m3_fmt_py_float(struct m3_buf *b, double x)
{
    fmt_float(b, x, 1);
}

void m3_fmt_serde_float(struct m3_buf *b, double x)
{
    fmt_float(b, x, 0);
}

/* ---- JSON ---- */

/* Length of a valid UTF-8 sequence at s (n bytes available), or 0 if it is not one. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if (n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

void m3_fmt_json_string(struct m3_buf *b, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    m3_buf_putc(b, '"');
    size_t run = 0; /* start of the pending run of bytes copied as they are */
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        const char *esc = NULL;
        char ubuf[8];
        if (c >= 0x80) {
            size_t len = utf8_seq_len(s + i, n - i);
            if (len) {
                i += len;
                continue;
            }
            esc = "\xEF\xBF\xBD"; /* U+FFFD for a byte that starts no valid sequence */
        } else if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c == '\b')
            esc = "\\b";
        else if (c == '\f')
            esc = "\\f";
        else if (c < 0x20) {
            snprintf(ubuf, sizeof(ubuf), "\\u%04x", c);
            esc = ubuf;
        }
        if (!esc) {
            i++;
            continue;
        }
        m3_buf_put(b, s + run, i - run);
        m3_buf_puts(b, esc);
        run = ++i;
    }
    m3_buf_put(b, s + run, n - run);
    m3_buf_putc(b, '"');
}

static int32_t dump_json(struct m3_buf *b, const json_t *v, int depth, int py_style)
{
    if (depth <= 0) return MMGW_E_INVALID;
    const char *item_sep = py_style ? ", " : ",", *key_sep = py_style ? ": " : ":";
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        size_t key_len;
        json_t *val;
        int first = 1;
        m3_buf_putc(b, '{');
        json_object_keylen_foreach((json_t *)v, key, key_len, val)
        {
            if (!first) m3_buf_puts(b, item_sep);
            first = 0;
            m3_fmt_json_string(b, key, key_len);
            m3_buf_puts(b, key_sep);
            int32_t rc = dump_json(b, val, depth - 1, py_style);
            if (rc != MMGW_OK) return rc;
        }
        m3_buf_putc(b, '}');
        return MMGW_OK;
    }
    case JSON_ARRAY: {
        m3_buf_putc(b, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) m3_buf_puts(b, item_sep);
            int32_t rc = dump_json(b, json_array_get(v, i), depth - 1, py_style);
            if (rc != MMGW_OK) return rc;
        }
        m3_buf_putc(b, ']');
        return MMGW_OK;
    }
    case JSON_STRING:
        m3_fmt_json_string(b, json_string_value(v), json_string_length(v));
        return MMGW_OK;
    case JSON_INTEGER: {
        char s[32];
        snprintf(s, sizeof(s), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        m3_buf_puts(b, s);
        return MMGW_OK;
    }
    case JSON_REAL:
        fmt_float(b, json_real_value(v), py_style);
        return MMGW_OK;
    case JSON_TRUE:
        m3_buf_puts(b, "true");
        return MMGW_OK;
    case JSON_FALSE:
        m3_buf_puts(b, "false");
        return MMGW_OK;
    case JSON_NULL:
        m3_buf_puts(b, "null");
        return MMGW_OK;
    }
    return MMGW_E_ERROR;
}

int32_t m3_dump_py_json(struct m3_buf *b, const json_t *v, int max_depth)
{
    return dump_json(b, v, max_depth, 1);
}

int32_t m3_dump_serde_json(struct m3_buf *b, const json_t *v, int max_depth)
{
    return dump_json(b, v, max_depth, 0);
}

int32_t m3_put_py_str(struct m3_buf *b, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        m3_buf_put(b, json_string_value(v), json_string_length(v));
        return MMGW_OK;
    case JSON_INTEGER:
    case JSON_REAL:
        return dump_json(b, v, 1, 1);
    case JSON_TRUE:
        m3_buf_puts(b, "True");
        return MMGW_OK;
    case JSON_FALSE:
        m3_buf_puts(b, "False");
        return MMGW_OK;
    case JSON_NULL:
        m3_buf_puts(b, "None");
        return MMGW_OK;
    default:
        return MMGW_E_UNSUPPORTED;
    }
}

char *m3_printable(char *dst, size_t cap, const char *s, size_t n)
{
    size_t i = 0;
    for (; cap > 0 && i < n && i < cap - 1; i++) {
        unsigned char ch = (unsigned char)s[i];
        dst[i] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
    }
    if (cap > 0) dst[i] = '\0';
    return dst;
}

int m3_json_truthy(const json_t *v)
{
    if (!v) return 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return json_object_size(v) > 0;
    case JSON_ARRAY:
        return json_array_size(v) > 0;
    case JSON_STRING:
        return json_string_length(v) > 0;
    case JSON_INTEGER:
        return json_integer_value(v) != 0;
    case JSON_REAL:
        return json_real_value(v) != 0.0;
    case JSON_TRUE:
        return 1;
    default:
        return 0;
    }
}

size_t m3_unicode_space_len(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    if (n == 0) return 0;
    if (s[0] == ' ' || (s[0] >= 0x09 && s[0] <= 0x0D)) return 1;
    if (s[0] < 0x80) return 0;
    size_t len = utf8_seq_len(s, n);
    if (len == 0) return 0;
    uint32_t cp;
    if (len == 2)
        cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    else if (len == 3)
        cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    else
        return 0; /* no White_Space above U+FFFF */
    switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
        return len;
    default:
        return (cp >= 0x2000 && cp <= 0x200A) ? len : 0;
    }
}

/* Length of a White_Space code point that ends exactly at s + n, or 0. */
static size_t trailing_space_len(const char *s, size_t n)
{
    for (size_t len = 1; len <= 3 && len <= n; len++) {
        size_t l = m3_unicode_space_len(s + n - len, len);
        if (l == len) return len;
    }
    return 0;
}

void m3_trim_unicode(const char **s, size_t *n)
{
    size_t l;
    while (*n && (l = m3_unicode_space_len(*s, *n)) > 0) {
        *s += l;
        *n -= l;
    }
    while (*n && (l = trailing_space_len(*s, *n)) > 0) *n -= l;
}
