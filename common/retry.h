/* retry: the one retry policy of fleet's clients -- which failures are worth another try,
 * and how long to wait before it.
 *
 * A call that failed with a transient status (the peer is down, restarting, slow or
 * overloaded, or the transport broke mid-call) is retried after a backoff that starts at
 * FL_RETRY_MIN_S and doubles up to FL_RETRY_MAX_S; a success resets it. Any other status
 * (a malformed request, a wrong shape, a refused precondition) is the caller's to report:
 * sending the same thing again would get the same answer.
 *
 * fl_backoff_t is a small value type owned by its caller; not thread-safe. */
#ifndef FL_COMMON_RETRY_H
#define FL_COMMON_RETRY_H

#include "common/status.h"

#define FL_RETRY_MIN_S 0.05
#define FL_RETRY_MAX_S 2.0

/* 1 for UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, ABORTED, RESOURCE_EXHAUSTED, UNKNOWN and
 * INTERNAL (gRPC reports a stream reset by a restarting server as INTERNAL); 0 otherwise. */
int fl_retry_transient(fl_status s);

typedef struct fl_backoff {
    double next_s; /* the wait before the next try */
} fl_backoff_t;

/* Starts at FL_RETRY_MIN_S. */
void fl_backoff_init(fl_backoff_t *b);
/* The wait before the next try; doubles the one after it, up to FL_RETRY_MAX_S. */
double fl_backoff_next(fl_backoff_t *b);
/* After a success: the next failure waits FL_RETRY_MIN_S again. */
void fl_backoff_reset(fl_backoff_t *b);

#endif
