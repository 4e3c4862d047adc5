/* status: the one status code of fleet, and an error record that carries a message.
 *
 * Every library function that can fail returns an fl_status. Where a caller needs to
 * know *what* was wrong (a config key, a message field, a server's reason), the function
 * also takes an optional fl_err_t* and writes a human-readable message into it. Library
 * code never exits; main() functions turn a status into a message and an exit code.
 * The codes mirror gRPC's canonical codes so that statuses cross process boundaries
 * unchanged (fl_status value == grpc_status_code value for the shared ones).
 * Thread-safe: everything here is pure or writes only caller-owned memory. */
#ifndef FL_COMMON_STATUS_H
#define FL_COMMON_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, value, "message") */
#define FL_STATUS_TABLE(X)                              \
    X(FL_OK, 0, "ok")                                   \
    X(FL_CANCELLED, 1, "cancelled")                     \
    X(FL_UNKNOWN, 2, "unknown error")                   \
    X(FL_INVALID_ARGUMENT, 3, "invalid argument")       \
    X(FL_DEADLINE_EXCEEDED, 4, "deadline exceeded")     \
    X(FL_NOT_FOUND, 5, "not found")                     \
    X(FL_ALREADY_EXISTS, 6, "already exists")           \
    X(FL_PERMISSION_DENIED, 7, "permission denied")     \
    X(FL_RESOURCE_EXHAUSTED, 8, "resource exhausted")   \
    X(FL_FAILED_PRECONDITION, 9, "failed precondition") \
    X(FL_ABORTED, 10, "aborted")                        \
    X(FL_OUT_OF_RANGE, 11, "out of range")              \
    X(FL_UNIMPLEMENTED, 12, "unimplemented")            \
    X(FL_INTERNAL, 13, "internal error")                \
    X(FL_UNAVAILABLE, 14, "unavailable")                \
    X(FL_DATA_LOSS, 15, "data loss")                    \
    X(FL_UNAUTHENTICATED, 16, "unauthenticated")        \
    X(FL_NO_MEMORY, 100, "out of memory")               \
    X(FL_IO_ERROR, 101, "input/output error")           \
    X(FL_PARSE_ERROR, 102, "parse error")               \
    X(FL_NO_DEVICE, 103, "no GPU device available")

typedef enum {
#define FL__STATUS_ENUM(name, value, msg) name = value,
    FL_STATUS_TABLE(FL__STATUS_ENUM)
#undef FL__STATUS_ENUM
} fl_status;

/* "FL_INVALID_ARGUMENT" */
const char *fl_status_name(fl_status s);
/* "invalid argument" */
const char *fl_status_str(fl_status s);
/* The gRPC canonical code for a status (codes >= 100 map to UNKNOWN/INTERNAL/...). */
int fl_status_to_grpc(fl_status s);
/* The fleet status for a gRPC canonical code (unknown codes map to FL_UNKNOWN). */
fl_status fl_status_from_grpc(int code);

#define FL_ERR_MSG_MAX 512

/* An error with its message. Small value type, caller-allocated; zero it or use
 * fl_err_init. A NULL fl_err_t* is accepted everywhere and means "don't care". */
typedef struct fl_err {
    fl_status code;
    char msg[FL_ERR_MSG_MAX];
} fl_err_t;

void fl_err_init(fl_err_t *e);
/* Sets code and a printf-style message; returns code so that callers can write
 * `return fl_err_set(err, FL_INVALID_ARGUMENT, "obs: expected %d bytes, got %zu", ...);` */
fl_status fl_err_set(fl_err_t *e, fl_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prepends "prefix: " to an existing message (for adding context while unwinding). */
fl_status fl_err_prefix(fl_err_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define FL_TRY(expr)                      \
    do {                                  \
        fl_status fl__s = (expr);         \
        if (fl__s != FL_OK) return fl__s; \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
