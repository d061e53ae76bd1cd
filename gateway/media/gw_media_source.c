/* The CLI's media loader: files, data: URLs, http(s) through libcurl (see gw_media_source.h). */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "gw_media_source.h"
#include "mm_file.h"

void gw_bytes_free(struct gw_bytes *b)
{
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = 0;
}

static void limits_resolve(const struct gw_source_limits *in, struct gw_source_limits *out)
{
    out->max_bytes = in && in->max_bytes ? in->max_bytes : 512ull << 20;
    out->timeout_ms = in && in->timeout_ms > 0 ? in->timeout_ms : 30000;
    out->connect_timeout_ms = in && in->connect_timeout_ms > 0 ? in->connect_timeout_ms : 5000;
    long r = in ? in->max_redirects : 0;
    out->max_redirects = r == 0 ? 5 : (r < 0 ? 0 : r);
}

/* ---- base64 ---- */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

int gw_base64_decode(const char *in, size_t len, uint8_t *out, size_t *out_len)
{
    uint32_t acc = 0;
    int bits = 0, pad = 0;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
        if (c == '=') {
            pad++;
            continue;
        }
        if (pad) return -1; /* data after padding */
        int v = b64_value(c);
        if (v < 0) return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (uint8_t)(acc >> bits);
        }
    }
    if (bits >= 6 || pad > 2) return -1; /* a lone trailing character */
    *out_len = n;
    return 0;
}

/* ---- data: URLs ---- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int32_t load_data_url(const char *src, const struct gw_source_limits *lim, struct gw_bytes *out,
                             struct mm_err *err)
{
    const char *comma = strchr(src, ',');
    if (!comma) return mm_err_set(err, MM_INVALID, "data: URL without a comma");
    const char *meta = src + 5;
    size_t meta_len = (size_t)(comma - meta);
    int is_b64 = meta_len >= 7 && strncasecmp(comma - 7, ";base64", 7) == 0;
    const char *payload = comma + 1;
    size_t plen = strlen(payload);
    size_t cap = is_b64 ? plen / 4 * 3 + 3 : plen;
    if ((is_b64 ? plen / 4 * 3 : plen / 3) > lim->max_bytes)
        return mm_err_set(err, MM_TOO_LARGE, "data: URL of %zu characters is over the limit of %llu bytes",
                          plen, (unsigned long long)lim->max_bytes);
    uint8_t *buf = malloc(cap + 1);
    if (!buf) return mm_err_set(err, MM_NOMEM, "data: URL: out of memory");
    size_t n = 0;
    if (is_b64) {
        if (gw_base64_decode(payload, plen, buf, &n)) {
            free(buf);
            return mm_err_set(err, MM_FORMAT, "data: URL: bad base64");
        }
    } else {
        for (size_t i = 0; i < plen; i++) {
            if (payload[i] == '%' && i + 2 < plen && hexval(payload[i + 1]) >= 0 &&
                hexval(payload[i + 2]) >= 0) {
                buf[n++] = (uint8_t)(hexval(payload[i + 1]) * 16 + hexval(payload[i + 2]));
                i += 2;
            } else {
                buf[n++] = (uint8_t)payload[i];
            }
        }
    }
    if (n > lim->max_bytes) {
        free(buf);
        return mm_err_set(err, MM_TOO_LARGE, "data: URL decodes to %zu bytes, over the limit of %llu", n,
                          (unsigned long long)lim->max_bytes);
    }
    out->data = buf;
    out->len = n;
    return MM_OK;
}

/* ---- files ---- */

static int32_t load_file(const char *path, const struct gw_source_limits *lim, struct gw_bytes *out,
                         struct mm_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mm_err_set(err, errno == ENOENT ? MM_NOT_FOUND : MM_IO, "%s: %s", path, strerror(errno));
    int32_t rc = mm_file_read_fd(fd, path, lim->max_bytes, &out->data, &out->len, err);
    close(fd);
    return rc;
}

/* ---- http(s) ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct http_sink {
    uint8_t *data;
    size_t len, cap;
    uint64_t max;
    int over;
};

static size_t http_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct http_sink *s = ud;
    size_t n = size * nmemb;
    if (s->len + n > s->max) {
        s->over = 1;
        return 0; /* aborts the transfer */
    }
    if (s->len + n > s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 65536;
        while (nc < s->len + n) nc *= 2;
        if (nc > s->max) nc = (size_t)s->max;
        uint8_t *np = realloc(s->data, nc);
        if (!np) return 0;
        s->data = np;
        s->cap = nc;
    }
    memcpy(s->data + s->len, ptr, n);
    s->len += n;
    return n;
}

static int32_t load_http(const char *url, const struct gw_source_limits *lim, struct gw_bytes *out,
                         struct mm_err *err)
{
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) return mm_err_set(err, MM_ERROR, "libcurl failed to initialise");
    CURL *h = curl_easy_init();
    if (!h) return mm_err_set(err, MM_NOMEM, "%s: cannot create a libcurl handle", url);
    struct http_sink sink = {.max = lim->max_bytes};
    char ebuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, lim->max_redirects);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, lim->timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, lim->connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)lim->max_bytes);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "mmgw-preprocess/0.1");
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ebuf);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, http_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_cleanup(h);
    if (rc != CURLE_OK) {
        free(sink.data);
        if (sink.over || rc == CURLE_FILESIZE_EXCEEDED)
            return mm_err_set(err, MM_TOO_LARGE, "%s: more than %llu bytes", url,
                              (unsigned long long)lim->max_bytes);
        if (rc == CURLE_OPERATION_TIMEDOUT) return mm_err_set(err, MM_TIMEOUT, "%s: timed out", url);
        return mm_err_set(err, MM_IO, "%s: %s", url, ebuf[0] ? ebuf : curl_easy_strerror(rc));
    }
    out->data = sink.data ? sink.data : malloc(1);
    out->len = sink.len;
    if (!out->data) return mm_err_set(err, MM_NOMEM, "%s: out of memory", url);
    return MM_OK;
}

int32_t gw_media_source_load(const char *src, const struct gw_source_limits *lim_in, struct gw_bytes *out,
                             struct mm_err *err)
{
    out->data = NULL;
    out->len = 0;
    if (!src || !*src) return mm_err_set(err, MM_INVALID, "empty media source");
    struct gw_source_limits lim;
    limits_resolve(lim_in, &lim);
    if (strncasecmp(src, "data:", 5) == 0) return load_data_url(src, &lim, out, err);
    if (strncasecmp(src, "http://", 7) == 0 || strncasecmp(src, "https://", 8) == 0)
        return load_http(src, &lim, out, err);
    if (strncasecmp(src, "file://", 7) == 0) return load_file(src + 7, &lim, out, err);
    if (strstr(src, "://"))
        return mm_err_set(err, MM_UNSUPPORTED,
                          "%s: only file paths, file://, data: and http(s) URLs are supported", src);
    return load_file(src, &lim, out, err);
}
