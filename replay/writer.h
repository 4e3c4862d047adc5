/* writer: an actor's acknowledged inserts into one replay shard (a client of
 * replay/client.h), over client-streaming Insert calls.
 *
 * Transitions are appended in batches (the actor's local buffer); each batch gets the
 * next sequence number of the writer's stream id and is sent at once on the open call.
 * After `batches_per_call` batches (or on fl_replay_writer_flush) the call is finished
 * and the shard's InsertResponse acknowledges the batches it holds. Batches not yet
 * acknowledged stay in the writer; when a call fails they are sent again, in order, on
 * the next calls, at most batches_per_call batches per call (a backlog goes out in
 * pieces, each acknowledged before the next, so no call outgrows its deadline), and the
 * shard skips a batch whose sequence it already holds, so a resend never duplicates.
 * The backlog is bounded (fl_replay_writer_set_backlog): past the bound the oldest
 * batches not on the open call are dropped and counted. Nothing acknowledged is ever
 * dropped; nothing else is dropped but for the bound or when the writer is destroyed
 * before its batches were acknowledged.
 *
 * A stream id names one writer incarnation: a shard skips every batch of that id whose
 * sequence is not above the last it applied, so a restarted process must not reuse
 * its predecessor's id. Each writer also draws a random stream key at create (from the
 * kernel: getrandom, else /dev/urandom) and sends it with every batch; the shard binds
 * the stream to the key of its first batch and refuses the stream id to anyone else.
 * Until the shard has acknowledged a first call, the writer's
 * calls wait for it to come up (wait-for-ready, up to the call's 60 s deadline), so an
 * actor started before its shard waits for it; afterwards a failed call leaves its
 * batches pending and appends retry at most every backoff interval (common/retry.h:
 * 0.05 s doubling to 2 s), without waiting, until four calls' worth of batches are
 * pending: then append waits for the shard (retrying) until it takes them or the
 * process is asked to stop, so an actor does not run ahead of an absent shard. Flush always
 * waits for the shard, up to its timeout. A call that waits on the shard (its rate
 * limiter holding inserts back) is cancelled once the process is asked to stop
 * (common/stop.h), so an actor stops promptly; flush is not cancelled that way.
 *
 * Ownership: the writer copies every appended batch and keeps it until the shard
 * acknowledges it; the client is borrowed and must outlive the writer.
 * Failure: a send failure is never an append error (see fl_replay_writer_append); flush
 * reports what is still unacknowledged and why.
 * Thread-safety: a writer belongs to one thread (its client may be shared). */
#ifndef FL_REPLAY_WRITER_H
#define FL_REPLAY_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "common/obs.h"
#include "common/rpc.h"
#include "common/status.h"
#include "replay/client.h"

typedef struct fl_replay_writer fl_replay_writer_t;

/* The bounds a writer checks until told otherwise (the defaults of replay.max_abs_reward
 * and replay.max_priority). */
#define FL_REPLAY_WRITER_MAX_ABS_REWARD 1e6
#define FL_REPLAY_WRITER_MAX_PRIORITY 1e6

/* FL_INTERNAL when no random stream key can be drawn. */
fl_status fl_replay_writer_create(fl_replay_client_t *c, uint64_t stream_id, const fl_obs_spec_t *obs,
                                  int batches_per_call, fl_replay_writer_t **out, fl_err_t *err);
/* The shard's bounds (replay.max_abs_reward, replay.max_priority; 0 = only finite), so
 * that append refuses what the shard would. */
void fl_replay_writer_set_limits(fl_replay_writer_t *w, double max_abs_reward, double max_priority);
/* Destroys the writer; batches not yet acknowledged are lost (flush first). */
void fl_replay_writer_destroy(fl_replay_writer_t *w);
/* Appends one batch of n transitions (columns are copied) and sends it. A transient send
 * failure (common/retry.h: the shard away, restarting, overloaded) is not an error here:
 * the batch stays pending and goes out on a later call. Returns an error for bad input
 * (n == 0, an action < 0, a discount outside [0, 1], a non-finite float32 observation, a
 * reward or priority that is not finite or beyond the limits above: FL_INVALID_ARGUMENT
 * naming the column and row), out of memory, or when the shard refused the writer's last
 * call with a status that resending cannot change (PERMISSION_DENIED: its stream is bound
 * to another writer): the writer cannot go on, and an actor exits, to be restarted with
 * a new stream. */
fl_status fl_replay_writer_append(fl_replay_writer_t *w, size_t n, const void *obs, const int32_t *actions,
                                  const float *rewards, const float *discounts, const void *next_obs,
                                  const float *priorities, fl_err_t *err);
/* Finishes the open call and waits for its acknowledgement (up to timeout_ms; <= 0 means
 * the client's timeout); resends pending batches first when the previous call failed.
 * FL_OK means every appended batch is acknowledged; otherwise the batches stay pending
 * and the error says how many and why (the shard's INVALID_ARGUMENT is returned at
 * once, as resending cannot fix it). */
fl_status fl_replay_writer_flush(fl_replay_writer_t *w, int64_t timeout_ms, fl_err_t *err);
/* Transitions acknowledged so far, and transitions appended but not acknowledged. */
uint64_t fl_replay_writer_acked(const fl_replay_writer_t *w);
uint64_t fl_replay_writer_pending(const fl_replay_writer_t *w);
/* Transitions dropped unacknowledged because the backlog passed its bound. */
uint64_t fl_replay_writer_dropped(const fl_replay_writer_t *w);
/* While append waits (a shard that holds its call for the rate limiter, or one away or
 * overloaded: above), it calls fn(ctx) about every 0.1 s: the owner keeps its own duties
 * (an actor reports, so that a supervisor does not take a rate-limited actor for a hung
 * one). A nonzero return ends the wait (a held call is cancelled); the batches stay
 * pending. Flush does not call it. */
void fl_replay_writer_on_wait(fl_replay_writer_t *w, fl_rpc_wait_fn fn, void *ctx);
/* Bounds the unacknowledged backlog to max_bytes of batch memory (0 = unbounded, the
 * default). The newest batch is always kept, whatever its size. */
void fl_replay_writer_set_backlog(fl_replay_writer_t *w, size_t max_bytes);

#endif
