/* A shared token the gateway must present: "authorization: Bearer TOKEN" on every call (the worker's
 * --auth-token-file, the gateway's upstream_token). Without one, anyone who reaches the port may generate. */
#ifndef WK_AUTH_H
#define WK_AUTH_H

#include <grpc/grpc.h>

#include "mm_status.h"

/** Read the token from path (one line of visible ASCII; a trailing newline is dropped) and set *bearer to a
 * malloc'd "Bearer TOKEN" for wk_auth_ok. MM_INVALID names the file on an empty, over-long or unprintable
 * token; MM_IO when it cannot be read. Warns when others may read the file. */
int32_t wk_auth_load(const char *path, char **bearer, struct mm_err *err);

/** Whether md carries "authorization" equal to bearer (compared in full, without an early exit). */
int wk_auth_ok(const grpc_metadata_array *md, const char *bearer);

#endif
