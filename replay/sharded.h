/* sharded: R replay shards, each a `fleet replay` process, seen as one prioritized
 * replay, for actors (which shard a stream writes to) and learners (one sampler over
 * every shard). How a batch is split across the shards, why the union is a draw from the
 * global distribution, and what happens to a shard that refuses are in docs/design.md,
 * "A sample, from the table to the learner and back" (steps 2, 3 and 7).
 *   Inserts: an actor's stream sticks to one shard, fl_replay_shard_for_actor(index, R)
 *     = index % R. Writers are plain writers (replay/writer.h) on that shard's client.
 *   Sample: batch B is split across shards in proportion to their sampling mass (total
 *     priority with the prioritized selector, size with uniform and fifo), the Sample
 *     calls in flight at once. Rows are ordered by shard. Per item: probs = the global
 *     P(i) (q_i / T with the prioritized selector), weights against the smallest
 *     positive priority over all shards; table_size is sum N_s, total_priority T and
 *     min_priority q_min, at sampling time. A shard that refuses its rows
 *     (FAILED_PRECONDITION) is left out of the batch, and probs, weights and
 *     total_priority describe the draw from the shards that served; when no shard can
 *     serve, the call waits on every shard until its deadline and fails with the first
 *     refusal. With one shard the call is exactly fl_replay_sample.
 *   UpdatePriorities: keys are grouped by fl_table_key_shard(key) and each group goes to
 *     its shard, concurrently; a key naming a shard >= R is INVALID_ARGUMENT and nothing
 *     is sent. When one shard fails the others' updates are still applied.
 *   Failures: a shard that is down makes the call wait for it (wait-for-ready) until the
 *     deadline, as with one shard; any shard's error fails the whole call, naming the
 *     shard and its address. A shard that answers with another shard id (addresses
 *     listed out of order) is DATA_LOSS.
 *
 * Ownership: a sharded client owns one client per shard (replay/client.h) and a pool of
 * R - 1 threads for the per-shard calls (common/fanout.h); batches are the caller's.
 * Thread-safety: a sharded client may be shared by threads (its split state has its own
 * lock). */
#ifndef FL_REPLAY_SHARDED_H
#define FL_REPLAY_SHARDED_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "replay/client.h"

#define FL_REPLAY_MAX_SHARDS 256

/* Shard addresses, in shard order. */
typedef struct fl_replay_addrs {
    int count;
    char **addr; /* (count) */
} fl_replay_addrs_t;

/* Parses "ADDR[,ADDR...]" (shard 0 first), or "@PATH": the list read from file PATH
 * (addresses separated by commas, spaces or newlines), for more shards than a 255-byte
 * command-line option holds. FL_INVALID_ARGUMENT for an empty list or entry, more than
 * FL_REPLAY_MAX_SHARDS entries, or an unreadable file (naming it). */
fl_status fl_replay_addrs_parse(const char *spec, fl_replay_addrs_t *out, fl_err_t *err);
void fl_replay_addrs_free(fl_replay_addrs_t *a);

/* The shard actor `actor_index`'s insert stream sticks to: actor_index % shards. */
int fl_replay_shard_for_actor(int actor_index, int shards);

typedef struct fl_replay_sharded fl_replay_sharded_t;

/* One client per address of `addrs` (see fl_replay_addrs_parse); nothing is sent yet.
 * seed seeds the split of batches across shards. */
fl_status fl_replay_sharded_create(const char *addrs, uint64_t seed, fl_replay_sharded_t **out, fl_err_t *err);
void fl_replay_sharded_destroy(fl_replay_sharded_t *s);
int fl_replay_sharded_count(const fl_replay_sharded_t *s);
const char *fl_replay_sharded_addr(const fl_replay_sharded_t *s, int shard);
fl_replay_client_t *fl_replay_sharded_client(fl_replay_sharded_t *s, int shard);
/* As fl_replay_client_set_timeout, for every shard. */
void fl_replay_sharded_set_timeout(fl_replay_sharded_t *s, int64_t timeout_ms);

/* Samples batch_size transitions from all shards (see the top of this file). timeout_ms
 * bounds the whole call as in fl_replay_sample; when no shard holds any priority mass
 * yet, it polls the shards' Info until one does (FL_FAILED_PRECONDITION at the end). */
fl_status fl_replay_sharded_sample(fl_replay_sharded_t *s, size_t batch_size, double beta, int64_t timeout_ms,
                                   fl_replay_batch_t *out, fl_err_t *err);
/* fl_replay_sharded_sample with updates (see fl_replay_updates_t): with one shard they
 * ride on its Sample call; with several they are routed by key in UpdatePriorities calls
 * first (an update failure is returned and nothing is sampled). */
fl_status fl_replay_sharded_sample_updating(fl_replay_sharded_t *s, size_t batch_size, double beta, int64_t timeout_ms,
                                            fl_replay_updates_t *upd, fl_replay_batch_t *out, fl_err_t *err);
/* Routes each key to its shard; *applied sums the shards' applied counts. */
fl_status fl_replay_sharded_update_priorities(fl_replay_sharded_t *s, size_t n, const uint64_t *keys,
                                              const float *priorities, uint64_t *applied, fl_err_t *err);
/* Info from every shard, concurrently. per_shard (count entries, may be NULL) gets each
 * shard's answer; total (may be NULL) the sum over shards of the counters, sizes,
 * capacities, priority totals, storage and blocked times, the largest max_priority and
 * samples_per_insert, the smallest uptime_s and positive min_priority, and shard_id 0. On failure (the first
 * failing shard's error) total is left as it was, and so are the entries of shards
 * that did not answer. */
fl_status fl_replay_sharded_info(fl_replay_sharded_t *s, int64_t timeout_ms, fl_replay_info_t *total,
                                 fl_replay_info_t *per_shard, fl_err_t *err);

#endif
