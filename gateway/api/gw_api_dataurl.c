/* data: URL decoding (see gw_api_dataurl.h). */
#include "gw_api_dataurl.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mm_text.h"

int gw_api_is_data_url(const char *url, size_t len)
{
    return len >= 5 && strncasecmp(url, "data:", 5) == 0;
}

/* Symbol classes, one table lookup per byte: a base64 digit d of either alphabet ("+/" or "-_") is d + 1,
 * whitespace (skipped) B64_SPACE, '=' B64_PAD, anything else 0. */
enum { B64_SPACE = 65, B64_PAD = 66 };
/* clang-format off */
static const uint8_t b64_class[256] = {
     0,  0,  0,  0,  0,  0,  0,  0,  0, 65, 65,  0,  0, 65,  0,  0,
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
    65,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0, 63,  0, 63,  0, 64,
    53, 54, 55, 56, 57, 58, 59, 60, 61, 62,  0,  0,  0, 66,  0,  0,
     0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15,
    16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,  0,  0,  0,  0, 64,
     0, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41,
    42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52,  0,  0,  0,  0,  0,
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
};
/* clang-format on */

static int32_t decode_base64(const char *p, size_t n, uint64_t cap, struct gw_api_dataurl *out,
                             struct mm_err *err)
{
    const unsigned char *s = (const unsigned char *)p;
    size_t bound = n / 4 * 3 + 3;
    if (cap && bound > cap) {
        /* whitespace could make it smaller: count the real symbols before refusing */
        size_t sym = 0;
        for (size_t i = 0; i < n; i++) sym += b64_class[s[i]] - 1u < 64;
        if ((uint64_t)sym / 4 * 3 + (sym % 4 ? sym % 4 - 1 : 0) > cap)
            return mm_err_set(err, MM_TOO_LARGE, "data: URL payload decodes to more than %llu bytes",
                              (unsigned long long)cap);
        bound = sym / 4 * 3 + 3;
    }
    uint8_t *buf = malloc(bound ? bound : 1);
    if (!buf) return mm_err_set(err, MM_NOMEM, "out of memory decoding a data: URL");
    uint32_t acc = 0;
    int bits = 0, pad = 0;
    size_t o = 0, i = 0;
    while (i < n) {
        /* whole groups of four digits (almost all of a payload) three bytes at a time */
        if (bits == 0 && !pad) {
            for (; i + 4 <= n; i += 4, o += 3) {
                const uint32_t a = b64_class[s[i]] - 1u, b = b64_class[s[i + 1]] - 1u,
                               c = b64_class[s[i + 2]] - 1u, d = b64_class[s[i + 3]] - 1u;
                if ((a | b | c | d) > 63) break; /* whitespace, padding or a bad byte: one at a time */
                const uint32_t v = a << 18 | b << 12 | c << 6 | d;
                buf[o] = (uint8_t)(v >> 16);
                buf[o + 1] = (uint8_t)(v >> 8);
                buf[o + 2] = (uint8_t)v;
            }
            if (i >= n) break;
        }
        const uint8_t k = b64_class[s[i]];
        if (k == B64_SPACE) {
            i++;
            continue;
        }
        if (k == B64_PAD) {
            pad++;
            i++;
            continue;
        }
        if (k == 0 || pad) {
            free(buf);
            return mm_err_set(err, MM_INVALID, "data: URL has an invalid base64 character at offset %zu", i);
        }
        acc = (acc << 6) | (uint32_t)(k - 1);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[o++] = (uint8_t)(acc >> bits);
        }
        i++;
    }
    if (bits >= 6 || pad > 2) { /* one dangling symbol carries no full byte */
        free(buf);
        return mm_err_set(err, MM_INVALID, "data: URL has a truncated base64 payload");
    }
    out->data = buf;
    out->len = o;
    return MM_OK;
}

static int32_t decode_percent(const char *p, size_t n, uint64_t cap, struct gw_api_dataurl *out,
                              struct mm_err *err)
{
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return mm_err_set(err, MM_NOMEM, "out of memory decoding a data: URL");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '%') {
            int h = i + 2 < n ? mm_hex_digit((unsigned char)p[i + 1]) : -1,
                l = i + 2 < n ? mm_hex_digit((unsigned char)p[i + 2]) : -1;
            if (h < 0 || l < 0) {
                free(buf);
                return mm_err_set(err, MM_INVALID, "data: URL has a bad percent escape at offset %zu", i);
            }
            c = (unsigned char)(h * 16 + l);
            i += 2;
        }
        buf[o++] = c;
        if (cap && o > cap) {
            free(buf);
            return mm_err_set(err, MM_TOO_LARGE, "data: URL payload decodes to more than %llu bytes",
                              (unsigned long long)cap);
        }
    }
    out->data = buf;
    out->len = o;
    return MM_OK;
}

int32_t gw_api_dataurl_decode(const char *url, size_t len, uint64_t max_bytes, struct gw_api_dataurl *out,
                              struct mm_err *err)
{
    memset(out, 0, sizeof *out);
    if (!gw_api_is_data_url(url, len)) return mm_err_set(err, MM_INVALID, "not a data: URL");
    const char *meta = url + 5;
    const char *comma = memchr(meta, ',', len - 5);
    if (!comma) return mm_err_set(err, MM_INVALID, "data: URL without a ',' before its payload");
    size_t mlen = (size_t)(comma - meta);
    int base64 = 0;
    if (mlen >= 7 && strncasecmp(comma - 7, ";base64", 7) == 0) {
        base64 = 1;
        mlen -= 7;
    }
    /* the media type is what comes before the first ';' */
    const char *semi = memchr(meta, ';', mlen);
    size_t tlen = semi ? (size_t)(semi - meta) : mlen;
    if (tlen >= sizeof out->mediatype) tlen = sizeof out->mediatype - 1;
    for (size_t i = 0; i < tlen; i++) out->mediatype[i] = (char)tolower((unsigned char)meta[i]);
    out->mediatype[tlen] = '\0';
    const char *payload = comma + 1;
    size_t plen = len - (size_t)(payload - url);
    if (plen == 0) return mm_err_set(err, MM_INVALID, "data: URL has an empty payload");
    return base64 ? decode_base64(payload, plen, max_bytes, out, err)
                  : decode_percent(payload, plen, max_bytes, out, err);
}
