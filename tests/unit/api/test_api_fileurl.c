/* file: URLs: the spellings RFC 8089 allows and the ones refused, the folder prefix, and reads beneath a
 * temporary folder: "..", absolute and escaping symbolic links, a FIFO (refused without blocking), a
 * folder, a missing file, the size cap. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gw_api_fileurl.h"
#include "mmgw_test.h"

#ifdef NO_OPENAT2
#include <errno.h>
#ifndef NO_OPENAT2_ERRNO
#define NO_OPENAT2_ERRNO ENOSYS
#endif
/* Linked with --wrap=syscall: the library's openat2 lands here and finds a kernel without it (ENOSYS), or a
 * seccomp profile older than the call (EPERM: NO_OPENAT2_ERRNO), so the realpath fallback runs. */
static int wrapped_calls;
long __wrap_syscall(long n, ...);
long __wrap_syscall(long n, ...)
{
    (void)n;
    wrapped_calls++;
    errno = NO_OPENAT2_ERRNO;
    return -1;
}
#endif

static int32_t parse(const char *url, char **path, struct mm_err *e)
{
    mm_err_clear(e);
    return gw_api_file_url_path(url, strlen(url), path, e);
}

static void check_path(const char *url, const char *want)
{
    char *p = NULL;
    struct mm_err e;
    int32_t rc = parse(url, &p, &e);
    CHECK_MSG(rc == MM_OK && p && strcmp(p, want) == 0, "%s -> %s (%s), want %s", url, p ? p : "NULL", e.msg,
              want);
    free(p);
}

static void check_refused(const char *url, const char *why)
{
    char *p = NULL;
    struct mm_err e;
    int32_t rc = parse(url, &p, &e);
    CHECK_MSG(rc == MM_INVALID && !p && strstr(e.msg, why), "%s: rc %d, message \"%s\", want \"%s\"", url, rc,
              e.msg, why);
    free(p);
}

static void write_file(const char *path, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    for (size_t i = 0; i < n; i++) fputc((int)(i * 7 & 255), f);
    fclose(f);
}

static int32_t read_at(const char *root, const char *alias, const char *path, uint64_t cap, size_t *len,
                       struct mm_err *e)
{
    uint8_t *d = NULL;
    mm_err_clear(e);
    int32_t rc = gw_api_file_read(root, alias, path, cap, &d, len, e);
    if (rc == MM_OK) {
        for (size_t i = 0; i < *len; i++)
            if (d[i] != (uint8_t)(i * 7 & 255)) {
                CHECK_MSG(0, "%s: byte %zu differs", path, i);
                break;
            }
    } else {
        CHECK(d == NULL);
    }
    free(d);
    return rc;
}

int main(void)
{
    CHECK(gw_api_is_file_url("FILE:///x", 9) && !gw_api_is_file_url("fil", 3) &&
          !gw_api_is_file_url("http://x", 8));
    check_path("file:///data/a.png", "/data/a.png");
    check_path("FILE://LocalHost/data/a.png", "/data/a.png");
    check_path("file:/data/a.png", "/data/a.png");
    check_path("file:///data/a%20b%3F%23.png", "/data/a b?#.png");
    check_path("file:///data/%C3%A9.png", "/data/\xc3\xa9.png");
    check_refused("file://example.com/data/a.png", "host");
    check_refused("file:data/a.png", "relative");
    check_refused("file://localhost", "without a path");
    check_refused("file:///data/a.png?x=1", "query");
    check_refused("file:///data/a.png#f", "fragment");
    check_refused("file:///data/a%2.png", "escape");
    check_refused("file:///data/a%", "escape");
    check_refused("file:///data/a%00.png", "NUL");
    check_refused("http://x/y.png", "not a file");

    CHECK(strcmp(gw_api_file_beneath("/data", "/data/a.png"), "a.png") == 0);
    CHECK(gw_api_file_beneath("/data", "/database/a.png") == NULL);
    CHECK(gw_api_file_beneath("/data", "/data") == NULL);
    CHECK(strcmp(gw_api_file_beneath("/", "/etc/x"), "etc/x") == 0);
    CHECK(gw_api_file_beneath(NULL, "/x") == NULL);
    /* the folder as configured may end in '/' */
    const char *b1 = gw_api_file_beneath("/data/", "/data/a.png"),
               *b2 = gw_api_file_beneath("/data//", "/data/a.png");
    CHECK(b1 && strcmp(b1, "a.png") == 0);
    CHECK(b2 && strcmp(b2, "a.png") == 0);
    CHECK(gw_api_file_beneath("/data/", "/database/a.png") == NULL);

    /* a folder with a file, a subfolder, links in and out, a FIFO; a secret beside it */
    char base[] = "/tmp/mmgw-fileurl-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char root[256], alias[256], p[512], q[512];
    snprintf(root, sizeof root, "%s/media", base);
    snprintf(alias, sizeof alias, "%s/alias", base);
    CHECK(mkdir(root, 0755) == 0);
    CHECK(symlink("media", alias) == 0);
    snprintf(p, sizeof p, "%s/sub", root);
    CHECK(mkdir(p, 0755) == 0);
    snprintf(p, sizeof p, "%s/a.bin", root);
    write_file(p, 1000);
    snprintf(p, sizeof p, "%s/sub/b.bin", root);
    write_file(p, 10);
    snprintf(p, sizeof p, "%s/secret.bin", base);
    write_file(p, 20);
    snprintf(p, sizeof p, "%s/abs-link", root);
    snprintf(q, sizeof q, "%s/a.bin", root);
    CHECK(symlink(q, p) == 0); /* absolute, even though it points inside */
    snprintf(p, sizeof p, "%s/out-link", root);
    CHECK(symlink("../secret.bin", p) == 0);
    snprintf(p, sizeof p, "%s/in-link", root);
    CHECK(symlink("sub/b.bin", p) == 0);
    snprintf(p, sizeof p, "%s/fifo", root);
    CHECK(mkfifo(p, 0600) == 0);

    size_t len = 0;
    struct mm_err e;
    snprintf(p, sizeof p, "%s/a.bin", root);
    CHECK(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_OK && len == 1000);
    CHECK_MSG(read_at(root, NULL, p, 999, &len, &e) == MM_TOO_LARGE && strstr(e.msg, "999"), "%s", e.msg);
    CHECK(read_at(root, NULL, p, 1000, &len, &e) == MM_OK && len == 1000);
    snprintf(p, sizeof p, "%s/a.bin", alias); /* named through the folder as configured */
    CHECK(read_at(root, alias, p, 1 << 20, &len, &e) == MM_OK && len == 1000);
    char alias_slash[260];
    snprintf(alias_slash, sizeof alias_slash, "%s/", alias); /* configured with a trailing '/' */
    CHECK_MSG(read_at(root, alias_slash, p, 1 << 20, &len, &e) == MM_OK && len == 1000, "%s", e.msg);
    CHECK(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_DENIED && strstr(e.msg, "outside"));
    snprintf(p, sizeof p, "%s/sub/../a.bin", root);
    CHECK(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_OK && len == 1000);
    snprintf(p, sizeof p, "%s/in-link", root);
    CHECK(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_OK && len == 10);
    snprintf(p, sizeof p, "%s/../secret.bin", root);
    CHECK_MSG(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_DENIED && strstr(e.msg, "leads out"), "%s",
              e.msg);
    snprintf(p, sizeof p, "%s/out-link", root);
    CHECK_MSG(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_DENIED, "%s", e.msg);
    /* outside, a missing file reads as an existing one: whether files exist there is not told */
    snprintf(p, sizeof p, "%s/../missing.bin", root);
    CHECK_MSG(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_DENIED && strstr(e.msg, "leads out"), "%s",
              e.msg);
    snprintf(p, sizeof p, "%s/sub/../../no-dir/missing.bin", root);
    CHECK_MSG(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_DENIED && strstr(e.msg, "leads out"), "%s",
              e.msg);
    snprintf(p, sizeof p, "%s/abs-link", root);
#ifdef NO_OPENAT2
    /* realpath follows an absolute link; what it reaches is inside, so the fallback reads it */
    CHECK_MSG(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_OK && len == 1000, "%s", e.msg);
#else
    CHECK_MSG(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_DENIED, "%s", e.msg);
#endif
    snprintf(p, sizeof p, "%s/secret.bin", base);
    CHECK(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_DENIED && strstr(e.msg, "outside"));
    snprintf(p, sizeof p, "%s/missing.bin", root);
    CHECK(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_NOT_FOUND);
    snprintf(p, sizeof p, "%s/a.bin/x", root);
    CHECK(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_NOT_FOUND);
    snprintf(p, sizeof p, "%s/fifo", root); /* no writer: an open without O_NONBLOCK would hang here */
    CHECK_MSG(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_INVALID && strstr(e.msg, "regular"), "%s",
              e.msg);
    snprintf(p, sizeof p, "%s/sub", root);
    CHECK(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_INVALID);
    snprintf(p, sizeof p, "%s/", root);
    CHECK(read_at(root, NULL, p, 1 << 20, &len, &e) == MM_INVALID);

    const char *names[] = {
        "media/a.bin", "media/sub/b.bin", "media/abs-link", "media/out-link", "media/in-link",
        "media/fifo",  "media/sub",       "alias",          "secret.bin",     "media"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(p, sizeof p, "%s/%s", base, names[i]);
        if (unlink(p) != 0) rmdir(p);
    }
    CHECK(rmdir(base) == 0);
#ifdef NO_OPENAT2
    CHECK(wrapped_calls > 0);
#endif
    return test_done();
}
