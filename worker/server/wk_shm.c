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

/* The names gw_upstream_shm.c gives its objects. */
#define WK_SHM_PREFIX "/mmgw-"

struct wk_shm_map {
    void *base;
    size_t len;
};

int32_t wk_shm_map(const char *name, const uint8_t *key, size_t key_len, uint64_t offset, uint64_t length,
                   const void **data, void **handle, struct mm_err *err)
{
    *data = NULL;
    *handle = NULL;
    /* Only names the gateway gives its objects: "/." and "/.." would open /dev/shm and /dev, and any other
     * name could be another program's object that our user happens to be able to read. */
    const size_t pl = sizeof WK_SHM_PREFIX - 1;
    size_t nl = name ? strlen(name) : 0;
    if (nl <= pl || strncmp(name, WK_SHM_PREFIX, pl) != 0 || strchr(name + 1, '/') || nl > NAME_MAX)
        return mm_err_set(err, MM_INVALID,
                          "shm name '%s' must be '" WK_SHM_PREFIX "...' without further slashes",
                          name ? name : "");
    if (length == 0) return mm_err_set(err, MM_INVALID, "shm '%s': length is 0", name);
    if (!key || key_len != WK_SHM_KEY_BYTES)
        return mm_err_set(err, MM_NOT_FOUND, "shm '%s': the request has no %d-byte key", name,
                          WK_SHM_KEY_BYTES);
    if (offset < WK_SHM_KEY_BYTES)
        return mm_err_set(err, MM_INVALID, "shm '%s': the tensor at %llu overlaps the key", name,
                          (unsigned long long)offset);
    /* O_NONBLOCK: /dev/shm is writable by every user, and opening a FIFO put there would wait for a writer,
     * holding this gRPC thread for good (glibc's shm_open adds O_NOFOLLOW and O_CLOEXEC itself). */
    int fd = shm_open(name, O_RDONLY | O_NONBLOCK, 0);
    if (fd < 0) {
        /* EACCES: the sender runs as another user; NOT_FOUND makes it fall back to inline or upload */
        int e = errno;
        return mm_err_set(err, e == ENOENT || e == EACCES ? MM_NOT_FOUND : MM_IO, "shm '%s': %s", name,
                          strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return mm_err_set(err, MM_IO, "shm '%s': fstat: %s", name, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return mm_err_set(err, MM_INVALID, "shm '%s' is not a regular file", name);
    }
    /* Ours, and writable by no one else: another user could otherwise truncate it under our mapping (the
     * vision tower would die of SIGBUS) or change the bytes between the content hash and the encoder. An
     * object of another user is NOT_FOUND, so that a sender running as another user falls back. */
    if (st.st_uid != geteuid()) {
        close(fd);
        return mm_err_set(err, MM_NOT_FOUND, "shm '%s' belongs to uid %lu, not to this worker's user", name,
                          (unsigned long)st.st_uid);
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        close(fd);
        return mm_err_set(err, MM_INVALID, "shm '%s' is writable by others (mode %03o)", name,
                          (unsigned)(st.st_mode & 0777));
    }
    uint64_t size = (uint64_t)st.st_size;
    if (offset > size || length > size - offset) {
        close(fd);
        return mm_err_set(err, MM_INVALID, "shm '%s': bytes [%llu, +%llu) pass the object's %llu bytes", name,
                          (unsigned long long)offset, (unsigned long long)length, (unsigned long long)size);
    }
    /* the caller must know the key the object starts with (compared in full: no early exit to time) */
    uint8_t have[WK_SHM_KEY_BYTES];
    ssize_t got = pread(fd, have, sizeof have, 0);
    uint8_t diff = got == (ssize_t)sizeof have ? 0 : 1;
    for (size_t i = 0; i < sizeof have; i++) diff |= (uint8_t)(have[i] ^ key[i]);
    if (diff) {
        close(fd);
        return mm_err_set(err, MM_NOT_FOUND, "shm '%s': the key does not match the object's", name);
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
