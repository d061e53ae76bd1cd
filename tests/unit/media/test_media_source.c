/* The CLI's media loader: base64 (RFC 4648 vectors, URL-safe, bad input), data: URLs (base64 and
 * percent-encoded, size caps), files (missing, not regular, size caps) and refused schemes. http(s) is
 * exercised against a loopback server by the CLI integration test. */
#include <unistd.h>

#include "gw_media_source.h"
#include "mmgw_test.h"

static void b64(const char *in, const char *want)
{
    uint8_t out[256];
    size_t n = 0;
    int rc = gw_base64_decode(in, strlen(in), out, &n);
    CHECK_MSG(rc == 0 && n == strlen(want) && memcmp(out, want, n) == 0, "base64 '%s'", in);
}

static void load(const char *src, uint64_t max, int32_t want, const char *content)
{
    struct gw_source_limits lim = {.max_bytes = max};
    struct gw_bytes b;
    struct mm_err err = {0};
    int32_t rc = gw_media_source_load(src, &lim, &b, &err);
    CHECK_MSG(rc == want, "%.60s: rc %s want %s (%s)", src, mm_status_name(rc), mm_status_name(want),
              err.msg);
    if (rc == MM_OK && content)
        CHECK_MSG(b.len == strlen(content) && memcmp(b.data, content, b.len) == 0, "%.60s: content", src);
    if (rc != MM_OK) CHECK(b.data == NULL && strchr(err.msg, '\n') == NULL);
    gw_bytes_free(&b);
}

int main(void)
{
    /* RFC 4648 section 10 */
    b64("", "");
    b64("Zg==", "f");
    b64("Zm8=", "fo");
    b64("Zm9v", "foo");
    b64("Zm9vYg==", "foob");
    b64("Zm9vYmE=", "fooba");
    b64("Zm9vYmFy", "foobar");
    b64("Zm9vYmE", "fooba");     /* padding optional */
    b64("Zm9v\nYmFy", "foobar"); /* line breaks skipped */
    b64("-_8=", "\xfb\xff");     /* URL-safe alphabet */
    uint8_t out[16];
    size_t n;
    CHECK(gw_base64_decode("Zm9v!", 5, out, &n) != 0);
    CHECK(gw_base64_decode("Z", 1, out, &n) != 0);
    CHECK(gw_base64_decode("Zg==Zg", 6, out, &n) != 0);

    load("data:image/png;base64,Zm9vYmFy", 0, MM_OK, "foobar");
    load("data:;base64,Zm9vYmFy", 0, MM_OK, "foobar");
    load("data:text/plain,hello%20world%21", 0, MM_OK, "hello world!");
    load("DATA:image/png;BASE64,Zm9v", 0, MM_OK, "foo");
    load("data:image/png;base64,Zm9v*mFy", 0, MM_FORMAT, NULL);
    load("data:image/png;base64", 0, MM_INVALID, NULL);
    load("data:image/png;base64,Zm9vYmFyZm9vYmFyZm9vYmFy", 8, MM_TOO_LARGE, NULL);

    char path[] = "/tmp/mmgw_source_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && write(fd, "file bytes", 10) == 10);
    close(fd);
    load(path, 0, MM_OK, "file bytes");
    char url[64];
    snprintf(url, sizeof url, "file://%s", path);
    load(url, 0, MM_OK, "file bytes");
    load(path, 5, MM_TOO_LARGE, NULL);
    unlink(path);
    load(path, 0, MM_NOT_FOUND, NULL);
    load("/tmp", 0, MM_INVALID, NULL);
    load("", 0, MM_INVALID, NULL);
    load("ftp://example.invalid/x.png", 0, MM_UNSUPPORTED, NULL);
    load("gopher://127.0.0.1/x", 0, MM_UNSUPPORTED, NULL);
    return test_done();
}
