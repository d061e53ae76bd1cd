/* Whole-file reads with a regular-file check and a size cap (see mm_file.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mm_file.h"

int32_t mm_file_read_fd(int fd, const char *label, uint64_t max_bytes, uint8_t **data, size_t *len,
                        struct mm_err *err)
{
    *data = NULL;
    *len = 0;
    struct stat st;
    if (fstat(fd, &st) != 0) return mm_err_set(err, MM_IO, "%s: %s", label, strerror(errno));
    if (!S_ISREG(st.st_mode)) return mm_err_set(err, MM_INVALID, "%s: not a regular file", label);
    if ((uint64_t)st.st_size > max_bytes)
        return mm_err_set(err, MM_TOO_LARGE, "%s: %lld bytes, over the limit of %llu", label,
                          (long long)st.st_size, (unsigned long long)max_bytes);
    size_t size = (size_t)st.st_size;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return mm_err_set(err, MM_NOMEM, "%s: out of memory for %zu bytes", label, size);
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            return mm_err_set(err, MM_IO, "%s: %s", label, strerror(e));
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    if (got != size) {
        free(buf);
        return mm_err_set(err, MM_IO, "%s: short read (the file changed while it was read)", label);
    }
    *data = buf;
    *len = size;
    return MM_OK;
}

int32_t mm_file_read_text(const char *path, uint64_t max_bytes, char **text, size_t *len, struct mm_err *err)
{
    *text = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return mm_err_set(err, MM_IO, "%s: %s", path, strerror(errno));
    uint8_t *data = NULL;
    size_t n = 0;
    int32_t rc = mm_file_read_fd(fd, path, max_bytes, &data, &n, err);
    close(fd);
    if (rc != MM_OK) return rc;
    char *s = realloc(data, n + 1);
    if (!s) {
        free(data);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory", path);
    }
    s[n] = '\0';
    *text = s;
    *len = n;
    return MM_OK;
}
