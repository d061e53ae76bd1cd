/* mm_status -> gRPC status code: the one place the worker decides what a client sees. */
#ifndef WK_GRPC_STATUS_H
#define WK_GRPC_STATUS_H

#include <grpc/status.h>
#include <stdint.h>

grpc_status_code wk_grpc_status_from_mm(int32_t code);

#endif
