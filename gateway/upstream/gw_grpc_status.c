/* The gRPC status table (see gw_grpc_status.h). */
#include "gw_grpc_status.h"

#include <grpc/status.h>

#include "mm_status.h"

enum { RETRY = 1, FAULT = 2 };

struct row {
    int grpc;
    const char *name;
    int32_t mm;
    int flags;
};

/* Indexed by grpc_status_code (0..16). */
static const struct row rows[] = {
    {GRPC_STATUS_OK, "OK", MM_OK, 0},
    {GRPC_STATUS_CANCELLED, "CANCELLED", MM_CANCELLED, 0},
    {GRPC_STATUS_UNKNOWN, "UNKNOWN", MM_ERROR, RETRY | FAULT},
    {GRPC_STATUS_INVALID_ARGUMENT, "INVALID_ARGUMENT", MM_INVALID, 0},
    /* our own per-call deadline: the request took too long, not a sign of a broken worker */
    {GRPC_STATUS_DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED", MM_TIMEOUT, 0},
    {GRPC_STATUS_NOT_FOUND, "NOT_FOUND", MM_NOT_FOUND, 0},
    {GRPC_STATUS_ALREADY_EXISTS, "ALREADY_EXISTS", MM_INVALID, 0},
    /* gateway and worker disagree about credentials: a deployment error, never the client's */
    {GRPC_STATUS_PERMISSION_DENIED, "PERMISSION_DENIED", MM_ERROR, RETRY | FAULT},
    /* capacity pushback: try another worker, but the worker is healthy */
    {GRPC_STATUS_RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED", MM_EXHAUSTED, RETRY},
    {GRPC_STATUS_FAILED_PRECONDITION, "FAILED_PRECONDITION", MM_INVALID, 0},
    {GRPC_STATUS_ABORTED, "ABORTED", MM_AGAIN, RETRY},
    {GRPC_STATUS_OUT_OF_RANGE, "OUT_OF_RANGE", MM_INVALID, 0},
    {GRPC_STATUS_UNIMPLEMENTED, "UNIMPLEMENTED", MM_UNSUPPORTED, RETRY | FAULT},
    {GRPC_STATUS_INTERNAL, "INTERNAL", MM_ERROR, RETRY | FAULT},
    {GRPC_STATUS_UNAVAILABLE, "UNAVAILABLE", MM_UNAVAILABLE, RETRY | FAULT},
    {GRPC_STATUS_DATA_LOSS, "DATA_LOSS", MM_IO, RETRY | FAULT},
    {GRPC_STATUS_UNAUTHENTICATED, "UNAUTHENTICATED", MM_ERROR, RETRY | FAULT},
};

static const struct row *find(int code)
{
    if (code < 0 || (unsigned)code >= sizeof(rows) / sizeof(rows[0])) return NULL;
    return &rows[code];
}

int32_t gw_grpc_to_mm(int grpc_code)
{
    const struct row *r = find(grpc_code);
    return r ? r->mm : MM_ERROR;
}

const char *gw_grpc_code_name(int grpc_code)
{
    const struct row *r = find(grpc_code);
    return r ? r->name : "UNKNOWN_CODE";
}

int gw_grpc_retryable(int grpc_code)
{
    const struct row *r = find(grpc_code);
    return r ? (r->flags & RETRY) != 0 : 1;
}

int gw_grpc_worker_fault(int grpc_code)
{
    const struct row *r = find(grpc_code);
    return r ? (r->flags & FAULT) != 0 : 1;
}
