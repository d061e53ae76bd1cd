#include "wk_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mm_log.h"

#define TOKEN_MAX 4096

int32_t wk_auth_load(const char *path, char **bearer, struct mm_err *err)
{
    *bearer = NULL;
    /* O_NONBLOCK: a FIFO given by mistake must not hang the start */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return mm_err_set(err, MM_IO, "--auth-token-file %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return mm_err_set(err, MM_INVALID, "--auth-token-file %s: not a regular file", path);
    }
    if (st.st_mode & (S_IRGRP | S_IROTH))
        mm_log_warn("worker", "--auth-token-file %s may be read by other users (mode %03o): chmod 600 it",
                    path, (unsigned)(st.st_mode & 0777));
    char buf[TOKEN_MAX + 2];
    ssize_t n = read(fd, buf, sizeof buf);
    int e = errno;
    close(fd);
    if (n < 0) return mm_err_set(err, MM_IO, "--auth-token-file %s: %s", path, strerror(e));
    size_t len = (size_t)n;
    if (len > 0 && buf[len - 1] == '\n') len--;
    if (len > 0 && buf[len - 1] == '\r') len--;
    if (len == 0) return mm_err_set(err, MM_INVALID, "--auth-token-file %s: the token is empty", path);
    if (len > TOKEN_MAX)
        return mm_err_set(err, MM_INVALID, "--auth-token-file %s: the token is longer than %d bytes", path,
                          TOKEN_MAX);
    for (size_t i = 0; i < len; i++)
        if (buf[i] <= ' ' || buf[i] > '~')
            return mm_err_set(
                err, MM_INVALID,
                "--auth-token-file %s: the token has a character other than visible ASCII at byte "
                "%zu (one line, no blanks)",
                path, i + 1);
    char *b = malloc(len + 8);
    if (!b) return mm_err_set(err, MM_NOMEM, "out of memory");
    memcpy(b, "Bearer ", 7);
    memcpy(b + 7, buf, len);
    b[len + 7] = '\0';
    *bearer = b;
    return MM_OK;
}

int wk_auth_ok(const grpc_metadata_array *md, const char *bearer)
{
    const size_t want = strlen(bearer);
    int found = 0;
    for (size_t i = 0; i < md->count; i++) {
        if (grpc_slice_str_cmp(md->metadata[i].key, "authorization") != 0) continue;
        const grpc_slice v = md->metadata[i].value;
        const size_t n = GRPC_SLICE_LENGTH(v);
        if (n != want) return 0;
        const uint8_t *p = GRPC_SLICE_START_PTR(v);
        uint8_t diff = 0;
        for (size_t k = 0; k < n; k++) diff |= (uint8_t)(p[k] ^ (uint8_t)bearer[k]);
        if (diff || found) return 0; /* a second authorization header is refused too */
        found = 1;
    }
    return found;
}
