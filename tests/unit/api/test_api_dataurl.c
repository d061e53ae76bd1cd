/* data: URLs: base64 (standard, URL-safe, unpadded, wrapped), percent-encoded payloads, media types,
 * refusals with their reasons, and the size cap, against an independent encoder. */
#include <stdint.h>
#include <stdlib.h>

#include "gw_api_dataurl.h"
#include "mmgw_test.h"

static char *b64(const uint8_t *p, size_t n, int urlsafe, int pad, int wrap)
{
    const char *a = urlsafe ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                            : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(n * 2 + 16), *q = o;
    size_t col = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v =
            (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        size_t k = n - i >= 3 ? 4 : n - i + 1;
        for (size_t j = 0; j < 4; j++) {
            if (j < k)
                *q++ = a[(v >> (18 - 6 * j)) & 63];
            else if (pad)
                *q++ = '=';
        }
        if (wrap && (col += 4) >= 16) {
            *q++ = '\n';
            col = 0;
        }
    }
    *q = '\0';
    return o;
}

/* The decoder one symbol at a time, as the spec reads (the gateway's takes whole groups where it can):
 * MM_OK with the bytes, or MM_INVALID with the offset of the first bad byte (-1: truncated). */
static int32_t ref_decode(const char *p, size_t n, uint8_t *out, size_t *len, long *bad)
{
    const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint32_t acc = 0;
    int bits = 0, pad = 0;
    *len = 0;
    *bad = -1;
    for (size_t i = 0; i < n; i++) {
        char c = p[i] == '-' ? '+' : p[i] == '_' ? '/' : p[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
        if (c == '=') {
            pad++;
            continue;
        }
        const char *f = c ? strchr(a, c) : NULL;
        if (!f || pad) {
            *bad = (long)i;
            return MM_INVALID;
        }
        acc = acc << 6 | (uint32_t)(f - a);
        if ((bits += 6) >= 8) out[(*len)++] = (uint8_t)(acc >> (bits -= 8));
    }
    return bits >= 6 || pad > 2 ? MM_INVALID : MM_OK;
}

/* Random payloads mixing digits of both alphabets with whitespace, padding and bad bytes anywhere: same
 * bytes, same verdict and the same offset named as the reference. */
static void check_against_reference(void)
{
    const char sym[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_";
    uint64_t s = 99;
    char p[200], url[256];
    uint8_t want[200];
    for (int t = 0; t < 20000; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 1 + (size_t)(s >> 33) % 120;
        const unsigned odd = (unsigned)(s >> 20) % 4; /* 0: clean digits, else rarer and rarer extras */
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const unsigned r = (unsigned)(s >> 40) % 1000;
            if (odd && r < 40 / odd)
                p[i] = " \n\t\r"[r % 4];
            else if (odd && r < 50 / odd)
                p[i] = '=';
            else if (odd && r < 54 / odd)
                p[i] = "*.!\x80"[r % 4];
            else
                p[i] = sym[(s >> 50) % (sizeof sym - 1)];
        }
        p[n] = '\0';
        size_t want_len;
        long bad;
        const int32_t want_rc = ref_decode(p, n, want, &want_len, &bad);
        snprintf(url, sizeof url, "data:;base64,%s", p);
        struct gw_api_dataurl d;
        struct mm_err e;
        mm_err_clear(&e);
        const int32_t rc = gw_api_dataurl_decode(url, strlen(url), 0, &d, &e);
        if (want_rc == MM_OK && want_len == 0) { /* only padding or whitespace: the caller's "empty" */
            CHECK(rc != MM_OK || d.len == 0);
            if (rc == MM_OK) free(d.data);
            continue;
        }
        CHECK_MSG(rc == want_rc, "payload %d \"%s\": %d, reference %d (%s)", t, p, rc, want_rc, e.msg);
        if (rc == MM_OK && want_rc == MM_OK) {
            CHECK_MSG(d.len == want_len && memcmp(d.data, want, want_len) == 0, "payload %d \"%s\"", t, p);
            free(d.data);
        } else if (rc == MM_INVALID && bad >= 0) {
            char at[48];
            snprintf(at, sizeof at, "offset %ld", bad);
            CHECK_MSG(strstr(e.msg, at) != NULL, "payload %d \"%s\": %s, want %s", t, p, e.msg, at);
        }
    }
}

static int32_t decode(const char *url, uint64_t cap, struct gw_api_dataurl *d, struct mm_err *e)
{
    mm_err_clear(e);
    return gw_api_dataurl_decode(url, strlen(url), cap, d, e);
}

int main(void)
{
    struct gw_api_dataurl d;
    struct mm_err e;
    CHECK(gw_api_is_data_url("DATA:x", 6) && !gw_api_is_data_url("dat", 3) &&
          !gw_api_is_data_url("http://x", 8));
    CHECK(decode("data:image/PNG;base64,aGVsbG8=", 0, &d, &e) == MM_OK);
    CHECK(d.len == 5 && memcmp(d.data, "hello", 5) == 0);
    CHECK_STR(d.mediatype, "image/png");
    free(d.data);
    CHECK(decode("data:text/plain;charset=utf-8;base64,aGk", 0, &d, &e) == MM_OK); /* no padding */
    CHECK(d.len == 2 && memcmp(d.data, "hi", 2) == 0);
    CHECK_STR(d.mediatype, "text/plain");
    free(d.data);
    CHECK(decode("data:,a%20b%2Cc", 0, &d, &e) == MM_OK);
    CHECK(d.len == 5 && memcmp(d.data, "a b,c", 5) == 0 && d.mediatype[0] == '\0');
    free(d.data);
    /* refusals name the problem */
    CHECK(decode("data:image/png;base64", 0, &d, &e) == MM_INVALID && strstr(e.msg, ","));
    CHECK(decode("data:image/png;base64,", 0, &d, &e) == MM_INVALID && strstr(e.msg, "empty"));
    CHECK(decode("data:image/png;base64,aGV*bG8=", 0, &d, &e) == MM_INVALID && strstr(e.msg, "offset 3"));
    CHECK(decode("data:image/png;base64,aGVsb", 0, &d, &e) == MM_INVALID && strstr(e.msg, "truncated"));
    CHECK(decode("data:image/png;base64,aGk=aGk=", 0, &d, &e) == MM_INVALID);
    CHECK(decode("data:,100%", 0, &d, &e) == MM_INVALID && strstr(e.msg, "percent"));
    CHECK(decode("http://x/y.png", 0, &d, &e) == MM_INVALID && d.data == NULL);
    /* round trips of random bytes in every spelling, and the cap at its boundary */
    uint64_t s = 12345;
    for (int t = 0; t < 300; t++) {
        size_t n = (size_t)(t * 7 % 200);
        uint8_t *p = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            p[i] = (uint8_t)(s >> 56);
        }
        char *enc = b64(p, n, t & 1, t & 2, t & 4);
        char *url = malloc(strlen(enc) + 64);
        sprintf(url, "data:application/octet-stream;base64,%s", enc);
        int32_t rc = decode(url, 0, &d, &e);
        if (n == 0) {
            CHECK(rc == MM_INVALID);
        } else {
            CHECK_MSG(rc == MM_OK && d.len == n && memcmp(d.data, p, n) == 0, "round trip %d (%zu bytes): %s",
                      t, n, e.msg);
            free(d.data);
            CHECK(decode(url, n, &d, &e) == MM_OK);
            free(d.data);
            if (n > 1) CHECK(decode(url, n - 1, &d, &e) == MM_TOO_LARGE && d.data == NULL); /* 0 = no cap */
        }
        free(url);
        free(enc);
        free(p);
    }
    CHECK(decode("data:,abcdef", 5, &d, &e) == MM_TOO_LARGE);
    check_against_reference();
    return test_done();
}
