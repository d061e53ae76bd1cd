#include "wk_auth.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mm_file.h"
#include "mm_log.h"

#define TOKEN_MAX 4096

/* buf's one line (a trailing newline dropped): non-empty visible ASCII of at most TOKEN_MAX bytes */
static int32_t check_token(const char *path, const char *buf, size_t *len, struct mm_err *err)
{
    size_t n = *len;
    if (n > 0 && buf[n - 1] == '\n') n--;
    if (n > 0 && buf[n - 1] == '\r') n--;
    *len = n;
    if (n == 0) return mm_err_set(err, MM_INVALID, "--auth-token-file %s: the token is empty", path);
    if (n > TOKEN_MAX)
        return mm_err_set(err, MM_INVALID, "--auth-token-file %s: the token is longer than %d bytes", path,
                          TOKEN_MAX);
    for (size_t i = 0; i < n; i++)
        if (buf[i] <= ' ' || buf[i] > '~')
            return mm_err_set(
                err, MM_INVALID,
                "--auth-token-file %s: the token has a character other than visible ASCII at byte "
                "%zu (one line, no blanks)",
                path, i + 1);
    return MM_OK;
}

int32_t wk_auth_load(const char *path, char **bearer, struct mm_err *err)
{
    *bearer = NULL;
    char *buf = NULL;
    size_t len = 0;
    if (mm_file_read_text(path, 1 << 20, &buf, &len, err) != MM_OK)
        return mm_err_prefix(err, "--auth-token-file");
    struct stat st;
    if (stat(path, &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)))
        mm_log_warn("worker", "--auth-token-file %s may be read by other users (mode %03o): chmod 600 it",
                    path, (unsigned)(st.st_mode & 0777));
    const size_t read_len = len;
    int32_t rc = check_token(path, buf, &len, err);
    if (rc == MM_OK) {
        char *b = malloc(len + 8);
        if (b) {
            memcpy(b, "Bearer ", 7);
            memcpy(b + 7, buf, len);
            b[len + 7] = '\0';
            *bearer = b;
        } else {
            rc = mm_err_set(err, MM_NOMEM, "out of memory");
        }
    }
    explicit_bzero(buf, read_len);
    free(buf);
    return rc;
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
