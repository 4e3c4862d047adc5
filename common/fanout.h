/* fanout: runs fn(arg, 0..n-1) in parallel on a small pool of threads: the sharded
 * clients' per-shard calls (replay/client.h, paramserver/client.h).
 *
 * The pool owns `workers` threads started at create. fl_fanout_run hands the items of
 * one batch to the workers and runs items itself too, so a batch always finishes even
 * when every worker is busy with other callers' batches (no deadlock, no starvation),
 * and returns when every item has run. With 0 workers it is a plain loop.
 * Thread-safe: any number of threads may run batches at once. */
#ifndef FL_COMMON_FANOUT_H
#define FL_COMMON_FANOUT_H

#include "common/status.h"

typedef struct fl_fanout fl_fanout_t;

fl_status fl_fanout_create(int workers, fl_fanout_t **out, fl_err_t *err);
/* Joins the workers; no batch may be running. NULL is a no-op. */
void fl_fanout_destroy(fl_fanout_t *f);
void fl_fanout_run(fl_fanout_t *f, int n, void (*fn)(void *arg, int i), void *arg);

#endif
