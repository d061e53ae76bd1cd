/* Shared-memory tensor sources. The sender owns the object (and unlinks or reuses it once we answered); we
 * only map it read-only for as long as the vision tower needs the bytes. */
#include "wk_shm.h"

#include <errno.h>
#include <grpc/support/alloc.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct wk_shm_map {
    void *base;
    size_t len;
};

int32_t wk_shm_map(const char *name, uint64_t offset, uint64_t length, const void **data, void **handle,
                   struct mm_err *err)
{
    *data = NULL;
    *handle = NULL;
    size_t nl = name ? strlen(name) : 0;
    if (nl < 2 || name[0] != '/' || strchr(name + 1, '/') || nl > NAME_MAX)
        return mm_err_set(err, MM_INVALID, "shm name '%s' must be '/name' without further slashes",
                          name ? name : "");
    if (length == 0) return mm_err_set(err, MM_INVALID, "shm '%s': length is 0", name);
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0)
        return mm_err_set(err, errno == ENOENT ? MM_NOT_FOUND : MM_IO, "shm '%s': %s", name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return mm_err_set(err, MM_IO, "shm '%s': fstat: %s", name, strerror(e));
    }
    uint64_t size = (uint64_t)st.st_size;
    if (offset > size || length > size - offset) {
        close(fd);
        return mm_err_set(err, MM_INVALID, "shm '%s': bytes [%llu, +%llu) pass the object's %llu bytes", name,
                          (unsigned long long)offset, (unsigned long long)length, (unsigned long long)size);
    }
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t start = offset / page * page;
    size_t maplen = (size_t)(offset - start + length);
    void *base = mmap(NULL, maplen, PROT_READ, MAP_SHARED, fd, (off_t)start);
    int e = errno;
    close(fd);
    if (base == MAP_FAILED) return mm_err_set(err, MM_IO, "shm '%s': mmap: %s", name, strerror(e));
    struct wk_shm_map *m = malloc(sizeof(*m));
    if (!m) {
        munmap(base, maplen);
        return mm_err_set(err, MM_NOMEM, "shm '%s': out of memory", name);
    }
    m->base = base;
    m->len = maplen;
    *data = (const uint8_t *)base + (offset - start);
    *handle = m;
    return MM_OK;
}

void wk_shm_unmap(void *handle)
{
    struct wk_shm_map *m = handle;
    if (!m) return;
    munmap(m->base, m->len);
    free(m);
}

int wk_shm_peer_local(const char *peer)
{
    if (!peer) return 0;
    static const char *const local[] = {"unix:", "unix-abstract:", "ipv4:127.",
                                        "ipv6:[::1]:", "ipv6:[::ffff:127."};
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
        if (strncmp(peer, local[i], strlen(local[i])) == 0) return 1;
    return 0;
}

int wk_shm_call_local(grpc_call *call)
{
    char *peer = grpc_call_get_peer(call);
    int local = wk_shm_peer_local(peer);
    gpr_free(peer);
    return local;
}
