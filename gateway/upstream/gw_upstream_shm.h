/* Shared-memory objects that carry tensors to a worker on this host, kept for reuse.
 *
 * An object per tensor cost more than its copy: tmpfs allocates and zeroes every page and each first
 * write faults one in (about 1.3 ms of the gateway's 6.5 ms of CPU per 640x480 image). So an object whose
 * call the worker answered OK, which means it has read the bytes, goes back to a pool, still mapped, and
 * takes the next tensor that fits. One whose call failed or was cancelled is unlinked instead: that worker
 * may still be reading it (its mapping keeps the old pages alive).
 *
 * Names are "/mmgw-<pid>-<token>-<n>", token 16 random hex digits per process, so that a process never
 * shares a prefix with a dead one of the same pid (PID reuse, PID namespaces sharing /dev/shm). Each
 * process holds an flock on its "/mmgw-<pid>-<token>-lock" object (created O_EXCL, 0600); on first use a
 * process removes the objects of any process whose lock, a regular file of our user with exactly that
 * name form, is free (it died without cleaning up), keeping the lock held until its objects and then the
 * lock are unlinked. So a crash does not leave the pool in /dev/shm for good, and no lock-like name
 * another user leaves there can make us remove a live process's objects. */
#ifndef GW_UPSTREAM_SHM_H
#define GW_UPSTREAM_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "mm_status.h"

/** Longest shared-memory object name we create, with its NUL. */
#define GW_SHM_NAME_MAX 64
/** An object starts with its key (SharedMemoryRef.key, new random bytes for each tensor: names are visible
 * to every user, the key only to us and the worker); the tensor follows at GW_SHM_DATA_OFFSET. */
#define GW_SHM_KEY_BYTES 16
#define GW_SHM_DATA_OFFSET 4096

struct gw_shm_tensor;

/** An object holding len (> 0) bytes copied from data, from the pool when one fits, else new (mode
 * 0600, pages allocated up front so a full /dev/shm is an error here and not a SIGBUS later). */
int32_t gw_shm_tensor_create(const void *data, size_t len, struct gw_shm_tensor **out, struct mm_err *err);

/** Its name, as shm_open takes it; the bytes are at GW_SHM_DATA_OFFSET. */
const char *gw_shm_tensor_name(const struct gw_shm_tensor *t);
/** Its key, GW_SHM_KEY_BYTES bytes (also at offset 0 of the object). */
const uint8_t *gw_shm_tensor_key(const struct gw_shm_tensor *t);

/** The call is over. reuse: the worker answered it OK, so the object may hold the next tensor (it is
 * pooled while the pool has room); otherwise it is unlinked. NULL is fine. */
void gw_shm_tensor_release(struct gw_shm_tensor *t, int reuse);

/** Unlink every pooled object (shutdown; also registered with atexit on first use). Objects still out
 * with a call are unlinked when they come back. */
void gw_shm_pool_drain(void);

/** Pooled objects and their bytes (tests, metrics). */
void gw_shm_pool_stats(size_t *objects, size_t *bytes);

#endif
