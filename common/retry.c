/* retry: see retry.h. */
#include "common/retry.h"

int fl_retry_transient(fl_status s) {
    switch (s) {
    case FL_UNAVAILABLE:
    case FL_DEADLINE_EXCEEDED:
    case FL_CANCELLED:
    case FL_ABORTED:
    case FL_RESOURCE_EXHAUSTED:
    case FL_UNKNOWN:
    case FL_INTERNAL: return 1;
    default: return 0;
    }
}

void fl_backoff_init(fl_backoff_t *b) {
    b->next_s = FL_RETRY_MIN_S;
}

double fl_backoff_next(fl_backoff_t *b) {
    double wait = b->next_s;
    b->next_s = wait * 2 > FL_RETRY_MAX_S ? FL_RETRY_MAX_S : wait * 2;
    return wait;
}

void fl_backoff_reset(fl_backoff_t *b) {
    fl_backoff_init(b);
}
