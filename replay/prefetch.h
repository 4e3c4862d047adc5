/* prefetch: keeps several Sample calls of a (sharded) replay in flight for one learner.
 *
 * `depth` threads each own one buffer and loop: sample `per_call` batches in one call
 * (fl_replay_sharded_sample of per_call x batch_size rows, with the given beta and
 * per-call timeout), hand them in one by one with the call's status, wait for the learner
 * to give every one of them back, sample again. The
 * learner takes results in completion order with fl_replay_prefetch_next (which waits
 * for one) and returns each buffer with fl_replay_prefetch_release once it has trained
 * on the batch and sent its priorities. So while the learner trains on one batch, up to
 * depth - 1 more are being drawn or wait ready; each is drawn from the table as it
 * stands when its call is answered (priority updates of batches still being trained on
 * are not in it: the usual asynchrony of Ape-X's learner, bounded by depth x per_call).
 * Batches drawn in one call share that call's importance-weight normalisation (the
 * largest weight among its rows is 1) and its table figures. Several batches per call
 * spare the shard and the learner's threads a call, its wake-ups and its copies per
 * batch after the first.
 *
 * Priority updates: fl_replay_prefetch_release_updating gives the buffer back with the
 * new priorities of its batch; once all of a call's batches are back the thread sends
 * theirs along with its next Sample call (fl_replay_sharded_sample_updating: one call
 * instead of two). Updates whose
 * call failed (other than the shard refusing to sample, which applies them) go again
 * with the next one; fl_replay_prefetch_stop sends whatever is still pending.
 *
 * A failed call (the replay not ready, a shard down) is handed in like a batch (one
 * result, whatever per_call), with its status and message, so that the learner decides what to do (wait, retry, give
 * up); the thread samples again once the buffer is back. Thread-safety: one learner thread calls next / release; the
 * threads share the sharded client (which is thread-safe). Destroy stops the threads after their current call (at most
 * timeout_ms). */
#ifndef FL_REPLAY_PREFETCH_H
#define FL_REPLAY_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "replay/sharded.h"

#define FL_REPLAY_PREFETCH_MAX_DEPTH 64
#define FL_REPLAY_PREFETCH_MAX_PER_CALL 16

typedef struct fl_replay_prefetch fl_replay_prefetch_t;

/* A result: the batch (valid until released; at most batch_size rows, the last batch of
 * a call that came back short may hold fewer) and how its call ended. */
typedef struct fl_replay_prefetched {
    fl_replay_batch_t *batch;
    fl_status status;         /* FL_OK: batch holds batch->count transitions */
    fl_err_t err;             /* the message when status is not FL_OK */
    double sample_s;          /* seconds the call took (on its first batch; 0 on the others) */
    uint64_t updates_applied; /* priority updates the call carried that the shard applied (likewise) */
} fl_replay_prefetched_t;

/* depth in 1 .. FL_REPLAY_PREFETCH_MAX_DEPTH, per_call in 1 ..
 * FL_REPLAY_PREFETCH_MAX_PER_CALL, batch_size >= 1, obs_bytes >= 1, beta in [0, 1];
 * timeout_ms > 0 bounds each call. Starts the threads at once. */
fl_status fl_replay_prefetch_create(fl_replay_sharded_t *rs, int depth, int per_call, size_t batch_size,
                                    size_t obs_bytes, double beta, int64_t timeout_ms, fl_replay_prefetch_t **out,
                                    fl_err_t *err);
/* Stops the threads after their current call and sends the priority updates still
 * pending (UpdatePriorities, bounded by timeout_ms); later calls of next return 0.
 * Idempotent. Returns the status of that last send. */
fl_status fl_replay_prefetch_stop(fl_replay_prefetch_t *p, fl_err_t *err);
/* Priority updates applied by the shards so far (piggybacked and at stop). */
uint64_t fl_replay_prefetch_updates_applied(fl_replay_prefetch_t *p);
/* Stops (as above, ignoring its status) and frees the buffers. NULL is a no-op. */
void fl_replay_prefetch_destroy(fl_replay_prefetch_t *p);

/* Waits up to timeout_ms (<= 0: without limit) for the next result. 1 with *out filled,
 * 0 on timeout. The result's buffer belongs to the caller until released. */
int fl_replay_prefetch_next(fl_replay_prefetch_t *p, int64_t timeout_ms, fl_replay_prefetched_t **out);
/* Gives a result's buffer back to its thread, which samples into it again. */
void fl_replay_prefetch_release(fl_replay_prefetch_t *p, fl_replay_prefetched_t *r);
/* The same, with new priorities (|TD errors|) for the first n rows of its batch
 * (n <= the batch's count; the keys are the batch's), sent with the thread's next call. */
void fl_replay_prefetch_release_updating(fl_replay_prefetch_t *p, fl_replay_prefetched_t *r, size_t n,
                                         const float *priorities);

#endif
