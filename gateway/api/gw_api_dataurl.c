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

/* 0..63, or -1 (not base64), -2 (whitespace, skipped), -3 (padding). */
static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') return -2;
    if (c == '=') return -3;
    return -1;
}

static int32_t decode_base64(const char *p, size_t n, uint64_t cap, struct gw_api_dataurl *out,
                             struct mm_err *err)
{
    size_t bound = n / 4 * 3 + 3;
    if (cap && bound > cap) {
        /* whitespace could make it smaller: count the real symbols before refusing */
        size_t sym = 0;
        for (size_t i = 0; i < n; i++) sym += b64_value((unsigned char)p[i]) >= 0;
        if ((uint64_t)sym / 4 * 3 + (sym % 4 ? sym % 4 - 1 : 0) > cap)
            return mm_err_set(err, MM_TOO_LARGE, "data: URL payload decodes to more than %llu bytes",
                              (unsigned long long)cap);
        bound = sym / 4 * 3 + 3;
    }
    uint8_t *buf = malloc(bound ? bound : 1);
    if (!buf) return mm_err_set(err, MM_NOMEM, "out of memory decoding a data: URL");
    uint32_t acc = 0;
    int bits = 0, pad = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)p[i]);
        if (v == -2) continue;
        if (v == -3) {
            pad++;
            continue;
        }
        if (v < 0 || pad) {
            free(buf);
            return mm_err_set(err, MM_INVALID, "data: URL has an invalid base64 character at offset %zu", i);
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[o++] = (uint8_t)(acc >> bits);
        }
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
