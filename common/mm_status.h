/* Status codes shared by every mmgw component, with a message buffer for details.
 *
 * Codes are int32_t: 0 is success, negative values are errors. The table is append-only: never
 * renumber or reuse a code. Mapping to HTTP and gRPC status lives in one place each
 * (gateway/http, worker/server), keyed by these codes. */
#ifndef MM_STATUS_H
#define MM_STATUS_H

#include <stddef.h>
#include <stdint.h>

#define MM_STATUS_MAP(X)                                                                                     \
    X(OK, 0, "success")                                                                                      \
    X(ERROR, -1, "internal error")                                                                           \
    X(NOMEM, -2, "out of memory")                                                                            \
    X(INVALID, -3, "invalid argument")                                                                       \
    X(IO, -4, "I/O error")                                                                                   \
    X(FORMAT, -5, "malformed data")                                                                          \
    X(UNSUPPORTED, -6, "unsupported")                                                                        \
    X(NOT_FOUND, -7, "not found")                                                                            \
    X(TOO_LARGE, -8, "too large")                                                                            \
    X(TIMEOUT, -9, "timed out")                                                                              \
    X(DENIED, -10, "refused by policy")                                                                      \
    X(AGAIN, -11, "try again")                                                                               \
    X(EXHAUSTED, -12, "resources exhausted")                                                                 \
    X(CANCELLED, -13, "cancelled")                                                                           \
    X(UNAVAILABLE, -14, "unavailable")                                                                       \
    X(ABI, -15, "incompatible plugin ABI")

enum mm_status {
#define MM__STATUS_ENUM(name, code, text) MM_##name = code,
    MM_STATUS_MAP(MM__STATUS_ENUM)
#undef MM__STATUS_ENUM
};

/** Short upper-case name of a code ("INVALID"); "UNKNOWN" for codes not in the table. */
const char *mm_status_name(int32_t code);
/** Human text of a code ("invalid argument"). */
const char *mm_strerror(int32_t code);

/** Error details: the code and a one-line message. Callers own it (usually on the stack). */
struct mm_err {
    int32_t code;
    char msg[512];
};

/** Record code and a printf-style message in err (err may be NULL). Returns code, so callers can
 * write `return mm_err_set(err, MM_INVALID, "...")`. */
int32_t mm_err_set(struct mm_err *err, int32_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** Prefix the existing message with more context ("loading x: <old message>"). Returns err->code. */
int32_t mm_err_prefix(struct mm_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Clear err to MM_OK with an empty message. */
void mm_err_clear(struct mm_err *err);

#endif
