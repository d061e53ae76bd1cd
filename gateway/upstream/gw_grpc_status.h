/* gRPC status codes in mmgw terms: the one table that maps a worker's gRPC status to an mm_status code
 * (the API maps those to HTTP), and says whether a failure may be retried on another worker (before
 * any token reached the client) and whether it counts against the worker's circuit breaker. */
#ifndef GW_GRPC_STATUS_H
#define GW_GRPC_STATUS_H

#include <stdint.h>

/** The mm_status code for a grpc_status_code (MM_ERROR for codes outside gRPC's table). */
int32_t gw_grpc_to_mm(int grpc_code);
/** Short name of a gRPC code ("UNAVAILABLE"). */
const char *gw_grpc_code_name(int grpc_code);
/** Whether a call that failed with this code, before any response reached the client, may be sent
 * to another worker: the worker was unreachable, broken or full, not the request bad. */
int gw_grpc_retryable(int grpc_code);
/** Whether this failure says something about the worker's health (counts for its circuit breaker).
 * Capacity pushback (RESOURCE_EXHAUSTED), client errors and cancellations do not. */
int gw_grpc_worker_fault(int grpc_code);

#endif
