/* The gRPC status table and channel basics that need no worker: codes map as the protocol and the
 * API expect, retry/fault classes, and which targets count as "this host" for shared memory. No call
 * is made, so nothing is contacted. */
#include <grpc/status.h>

#include "gw_grpc_status.h"
#include "gw_upstream.h"
#include "mmgw_test.h"

int main(void)
{
    /* the worker protocol's error classes (issue 4) and what the API must turn them into */
    CHECK_EQ_INT(gw_grpc_to_mm(GRPC_STATUS_OK), MM_OK);
    CHECK_EQ_INT(gw_grpc_to_mm(GRPC_STATUS_INVALID_ARGUMENT), MM_INVALID);
    CHECK_EQ_INT(gw_grpc_to_mm(GRPC_STATUS_RESOURCE_EXHAUSTED), MM_EXHAUSTED);
    CHECK_EQ_INT(gw_grpc_to_mm(GRPC_STATUS_CANCELLED), MM_CANCELLED);
    CHECK_EQ_INT(gw_grpc_to_mm(GRPC_STATUS_UNAVAILABLE), MM_UNAVAILABLE);
    CHECK_EQ_INT(gw_grpc_to_mm(GRPC_STATUS_DEADLINE_EXCEEDED), MM_TIMEOUT);
    CHECK_EQ_INT(gw_grpc_to_mm(GRPC_STATUS_UNIMPLEMENTED), MM_UNSUPPORTED);
    CHECK_EQ_INT(gw_grpc_to_mm(GRPC_STATUS_INTERNAL), MM_ERROR);
    CHECK_EQ_INT(gw_grpc_to_mm(GRPC_STATUS_NOT_FOUND), MM_NOT_FOUND);
    CHECK_EQ_INT(gw_grpc_to_mm(99), MM_ERROR);
    CHECK_EQ_INT(gw_grpc_to_mm(-1), MM_ERROR);
    CHECK_STR(gw_grpc_code_name(GRPC_STATUS_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
    CHECK_STR(gw_grpc_code_name(42), "UNKNOWN_CODE");
    /* every code in gRPC's table has its own name, in order */
    for (int c = 0; c <= GRPC_STATUS_UNAUTHENTICATED; c++)
        CHECK(strcmp(gw_grpc_code_name(c), "UNKNOWN_CODE") != 0);

    /* retry elsewhere: unreachable, broken or full workers; never a bad request or our own cancel */
    CHECK(gw_grpc_retryable(GRPC_STATUS_UNAVAILABLE));
    CHECK(gw_grpc_retryable(GRPC_STATUS_RESOURCE_EXHAUSTED));
    CHECK(gw_grpc_retryable(GRPC_STATUS_INTERNAL));
    CHECK(!gw_grpc_retryable(GRPC_STATUS_INVALID_ARGUMENT));
    CHECK(!gw_grpc_retryable(GRPC_STATUS_CANCELLED));
    CHECK(!gw_grpc_retryable(GRPC_STATUS_DEADLINE_EXCEEDED));
    CHECK(!gw_grpc_retryable(GRPC_STATUS_OK));
    /* breaker faults: capacity pushback is not one */
    CHECK(gw_grpc_worker_fault(GRPC_STATUS_UNAVAILABLE));
    CHECK(gw_grpc_worker_fault(GRPC_STATUS_INTERNAL));
    CHECK(!gw_grpc_worker_fault(GRPC_STATUS_RESOURCE_EXHAUSTED));
    CHECK(!gw_grpc_worker_fault(GRPC_STATUS_INVALID_ARGUMENT));
    CHECK(!gw_grpc_worker_fault(GRPC_STATUS_CANCELLED));

    /* channels: created idle (no connection until a call), local or not by target */
    struct gw_upstream *up;
    struct mm_err e;
    CHECK_EQ_INT(gw_upstream_create(NULL, &up, &e), MM_OK);
    struct {
        const char *target;
        int local;
    } t[] = {{"127.0.0.1:1", 1}, {"127.9.9.9:1", 1},      {"localhost:1", 1},
             {"[::1]:1", 1},     {"unix:/tmp/x.sock", 1}, {"ipv4:127.0.0.1:1", 1},
             {"10.0.0.1:1", 0},  {"[2001:db8::1]:1", 0},  {"192.0.2.7:50051", 0}};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct gw_upstream_chan *ch = NULL;
        CHECK_EQ_INT(gw_upstream_chan_open(up, t[i].target, &ch, &e), MM_OK);
        if (!ch) continue;
        CHECK_MSG(gw_upstream_chan_is_local(ch) == t[i].local, "%s", t[i].target);
        CHECK_STR(gw_upstream_chan_target(ch), t[i].target);
        struct gw_worker_info info;
        gw_upstream_chan_info(ch, &info);
        CHECK_EQ_INT(info.known, 0);
        gw_upstream_chan_close(ch);
    }
    struct gw_upstream_chan *ch = NULL;
    CHECK_EQ_INT(gw_upstream_chan_open(up, "", &ch, &e), MM_INVALID);
    CHECK(ch == NULL);
    CHECK_EQ_INT(gw_upstream_live_calls(up), 0);
    gw_upstream_destroy(up);
    return test_done();
}
