/* Read-only mappings of POSIX shared-memory objects named in a Tensor (gateway and worker on one host). */
#ifndef WK_SHM_H
#define WK_SHM_H

#include <grpc/grpc.h>
#include <stddef.h>
#include <stdint.h>

#include "mm_status.h"

/** Bytes of the key at the start of an object (SharedMemoryRef.key). */
#define WK_SHM_KEY_BYTES 16

/** Map bytes [offset, offset + length) of the object `name` ("/mmgw-...", as shm_open takes it) read-only,
 * once its first WK_SHM_KEY_BYTES bytes are the caller's key (offset is at least that). A missing or wrong
 * key is MM_NOT_FOUND: only the sender knows it, other local clients only see the name.
 * *data points at the first byte; *handle is passed to wk_shm_unmap. The object must be a regular file
 * of this process's user that no one else may write. MM_INVALID for a bad name, a FIFO or directory, an
 * object others may write or a range past the object's end; MM_NOT_FOUND when the object does not exist,
 * belongs to another user or may not be opened (the sender falls back to inline or upload). */
int32_t wk_shm_map(const char *name, const uint8_t *key, size_t key_len, uint64_t offset, uint64_t length,
                   const void **data, void **handle, struct mm_err *err);
/** Unmap (a release hook: takes void *). NULL is fine. */
void wk_shm_unmap(void *handle);

/** Whether a gRPC peer (grpc_call_get_peer's "ipv4:127.0.0.1:5", "ipv6:[::1]:5", "unix:/path") is on this
 * host. Only such callers may name shared-memory objects: a caller over the network could otherwise have
 * the worker read any object its user can open. NULL is not local. */
int wk_shm_peer_local(const char *peer);
/** wk_shm_peer_local of a call's peer. */
int wk_shm_call_local(grpc_call *call);

#endif
