/* file: URLs read beneath allowed_local_media_path (see gw_api_fileurl.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gw_api_fileurl.h"
#include "mm_file.h"
#include "mm_text.h"

int gw_api_is_file_url(const char *url, size_t len)
{
    return len >= 5 && strncasecmp(url, "file:", 5) == 0;
}

int32_t gw_api_file_url_path(const char *url, size_t len, char **path, struct mm_err *err)
{
    *path = NULL;
    if (!gw_api_is_file_url(url, len)) return mm_err_set(err, MM_INVALID, "not a file: URL");
    const char *p = url + 5, *end = url + len;
    if (end - p >= 2 && p[0] == '/' && p[1] == '/') {
        /* an authority: only the local host has our files */
        const char *host = p + 2;
        const char *slash = memchr(host, '/', (size_t)(end - host));
        if (!slash) return mm_err_set(err, MM_INVALID, "file: URL without a path");
        size_t hl = (size_t)(slash - host);
        if (hl && !(hl == 9 && strncasecmp(host, "localhost", 9) == 0))
            return mm_err_set(err, MM_INVALID,
                              "file: URL names the host \"%.*s\" (only local files are read)",
                              (int)(hl < 64 ? hl : 64), host);
        p = slash;
    }
    if (p == end || *p != '/')
        return mm_err_set(err, MM_INVALID, "file: URL with a relative path (file:///absolute/path expected)");
    if (memchr(p, '?', (size_t)(end - p)) || memchr(p, '#', (size_t)(end - p)))
        return mm_err_set(
            err, MM_INVALID,
            "file: URL with a query or fragment (write '?' as %%3F and '#' as %%23 in a file name)");
    if ((size_t)(end - p) >= PATH_MAX) return mm_err_set(err, MM_INVALID, "file: URL path too long");
    char *out = malloc((size_t)(end - p) + 1);
    if (!out) return mm_err_set(err, MM_NOMEM, "out of memory");
    size_t n = 0;
    for (const char *q = p; q < end; q++) {
        int c = (unsigned char)*q;
        if (c == '%') {
            int hi = end - q > 2 ? mm_hex_digit(q[1]) : -1, lo = end - q > 2 ? mm_hex_digit(q[2]) : -1;
            if (hi < 0 || lo < 0) {
                free(out);
                return mm_err_set(err, MM_INVALID, "file: URL with a bad %% escape at offset %zu",
                                  (size_t)(q - url));
            }
            c = hi * 16 + lo;
            q += 2;
        }
        if (c == 0) {
            free(out);
            return mm_err_set(err, MM_INVALID, "file: URL with a NUL character in its path");
        }
        out[n++] = (char)c;
    }
    out[n] = '\0';
    *path = out;
    return MM_OK;
}

const char *gw_api_file_beneath(const char *folder, const char *path)
{
    if (!folder || !path) return NULL;
    size_t n = strlen(folder);
    while (n > 1 && folder[n - 1] == '/') n--; /* "/srv/media/" as written in the configuration */
    if (n == 1 && folder[0] == '/') return path[0] == '/' ? path + 1 : NULL;
    if (strncmp(path, folder, n) != 0 || path[n] != '/') return NULL;
    return path + n + 1;
}

/* A message for an open that failed. */
static int32_t open_failed(int e, const char *path, struct mm_err *err)
{
    if (e == ENOENT || e == ENOTDIR) return mm_err_set(err, MM_NOT_FOUND, "%s: no such file", path);
    if (e == EXDEV || e == ELOOP)
        return mm_err_set(err, MM_DENIED,
                          "%s: leads out of allowed_local_media_path (through \"..\" or a symbolic link)",
                          path);
    if (e == EACCES || e == EPERM) return mm_err_set(err, MM_DENIED, "%s: permission denied", path);
    return mm_err_set(err, MM_IO, "%s: %s", path, strerror(e));
}

/* Whether what exists of path (its longest prefix that resolves) lies in root: a path that fails to resolve
 * outside the folder ("/media/../etc/missing") must say "leads out" as one that resolves there does, not
 * "no such file", or the fallback would tell whether files outside the folder exist. */
static bool existing_part_inside(const char *root, const char *path)
{
    char *p = strdup(path);
    if (!p) return false;
    bool inside = false;
    for (char *slash = strrchr(p, '/'); slash; slash = strrchr(p, '/')) {
        slash[slash == p ? 1 : 0] = '\0';
        char *real = realpath(p, NULL);
        if (real) {
            inside = strcmp(real, root) == 0 || gw_api_file_beneath(root, real);
            free(real);
            break;
        }
        if (slash == p) break;
    }
    free(p);
    return inside;
}

/* Without openat2 (kernels before 5.6: ENOSYS; container seccomp profiles older than the call: EPERM,
 * which openat2 itself does not return for a path it may not open): resolve the whole path, check
 * the result is still beneath the folder, and open that without following a final link. A link swapped in
 * between the two steps could still be followed; openat2 leaves no such window. */
static int open_resolved(const char *root, const char *path, struct mm_err *err, int32_t *rc)
{
    char *real = realpath(path, NULL);
    if (!real) {
        int e = errno;
        *rc = open_failed(existing_part_inside(root, path) ? e : EXDEV, path, err);
        return -1;
    }
    int fd = -1;
    if (!gw_api_file_beneath(root, real)) {
        *rc = open_failed(EXDEV, path, err);
    } else {
        fd = open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) *rc = open_failed(errno, path, err);
    }
    free(real);
    return fd;
}

int32_t gw_api_file_read(const char *root, const char *alias, const char *path, uint64_t max_bytes,
                         uint8_t **data, size_t *len, struct mm_err *err)
{
    *data = NULL;
    *len = 0;
    const char *rel = gw_api_file_beneath(root, path);
    if (!rel) rel = gw_api_file_beneath(alias, path);
    if (!rel) return mm_err_set(err, MM_DENIED, "%s: outside the folder this server reads media from", path);
    while (*rel == '/') rel++;
    if (!*rel) return mm_err_set(err, MM_INVALID, "%s: not a regular file", path);

    int32_t rc = MM_OK;
    int dfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return mm_err_set(err, MM_IO, "allowed_local_media_path: %s", strerror(errno));
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused as not a regular file) */
    struct open_how how = {.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, dfd, rel, &how, sizeof how);
    int e = errno;
    close(dfd);
    if (fd < 0 && (e == ENOSYS || e == EPERM))
        fd = open_resolved(root, path, err, &rc);
    else if (fd < 0)
        rc = open_failed(e, path, err);
    if (fd < 0) return rc;
    rc = mm_file_read_fd(fd, path, max_bytes, data, len, err);
    close(fd);
    return rc;
}
