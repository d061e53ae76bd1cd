/* mm_status -> gRPC status code (see wk_grpc_status.h). */
#include "wk_grpc_status.h"

#include "mm_status.h"

grpc_status_code wk_grpc_status_from_mm(int32_t code)
{
    switch (code) {
    case MM_OK:
        return GRPC_STATUS_OK;
    case MM_INVALID:
    case MM_FORMAT:
    case MM_TOO_LARGE:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case MM_NOT_FOUND:
        return GRPC_STATUS_NOT_FOUND;
    case MM_UNSUPPORTED:
        return GRPC_STATUS_UNIMPLEMENTED;
    case MM_TIMEOUT:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    case MM_DENIED:
        return GRPC_STATUS_PERMISSION_DENIED;
    case MM_AGAIN:
    case MM_UNAVAILABLE:
        return GRPC_STATUS_UNAVAILABLE;
    case MM_EXHAUSTED:
    case MM_NOMEM:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case MM_CANCELLED:
        return GRPC_STATUS_CANCELLED;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}
