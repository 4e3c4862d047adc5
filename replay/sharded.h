/* sharded: R replay shards seen as one replay, for actors (which shard a stream writes
 * to) and learners (one sampler over every shard).
 *
 * R shards, each a `fleet replay` process, seen as one prioritized replay.
 *   Inserts: an actor's stream sticks to one shard, fl_replay_shard_for_actor(index, R)
 *     = index % R, so that its batches (and frames shared between them) stay together
 *     and its sequence numbers are checked by one shard. Writers are plain writers on
 *     that shard's client.
 *   Sample: batch B is split across shards in proportion to their total priority mass
 *     T_s (sum of p^alpha) by systematic sampling: one uniform u in [0, 1), the points
 *     (k + u) / B, k < B, of [0, 1) cut into consecutive intervals of length T_s / T
 *     (T = sum T_s); B_s points fall in shard s's interval, so B_s is floor or ceil of
 *     B T_s / T and E[B_s] = B T_s / T exactly. Each shard samples its B_s stratified
 *     over its own tree, so every slot of the batch draws item i of shard s with
 *     probability (T_s / T) (q_i / T_s) = q_i / T: the union is a draw from the global
 *     distribution, as from one table holding every item. The Sample calls are in
 *     flight at once (the caller and a pool of R - 1 threads, common/fanout.h). A
 *     shard that gets no rows answers an Info call instead, at most every 0.1 s, so
 *     that its mass stays current (it holds less than 1/B of the total, or it would
 *     have got a row). The masses used to split are
 *     the latest answers (an Info round on the first call and after any failure);
 *     between batches they drift by the inserts and updates of one step.
 *     Rows are ordered by shard. Per item: probs = q_i / T (the global P(i)) and
 *     weights w_i = (N P(i))^-beta / max_j (N P_j)^-beta = (q_min / q_i)^beta with q_min
 *     the smallest positive priority over all shards, i.e. the shard's own weight times
 *     (q_min / q_min_s)^beta. Each Sample response carries its shard's q_min_s (see
 *     SampleResponse.min_priority), and so does the Info answer of a shard that got no
 *     rows (ReplayInfo.min_priority), so weights use every shard's current minimum.
 *     table_size is sum N_s, total_priority T and min_priority q_min, at sampling time.
 *     A shard that refuses its rows (FAILED_PRECONDITION: fewer items than its share of
 *     replay.min_size_to_sample, or its rate limiter) after waiting for them is left out
 *     of the batch: its rows are drawn from the other shards by the same split, and
 *     probs, weights and total_priority describe that draw (T over the shards that
 *     served). Later calls probe it without waiting until it serves again, so that one
 *     stalled shard (an actor stopped, a slow writer) never stalls the learner while
 *     others can serve; it is out of the draw meanwhile, which is what its rate limiter
 *     asks for. When no shard can serve, the call waits on every shard until its
 *     deadline and fails with the first refusal. With one shard the call is exactly
 *     fl_replay_sample.
 *     Selectors (replay.selector): the split and P(i) use each shard's sampling mass
 *     (SampleResponse / ReplayInfo sampling_mass): T_s with the prioritized selector
 *     (as above), N_s with uniform (so P(i) = 1/N over all shards, weights 1) and with
 *     fifo (each shard's oldest items, in proportion to its size; probs scaled by
 *     N_s / N, weights 1).
 *   UpdatePriorities: keys are grouped by fl_table_key_shard(key) and each group goes to
 *     its shard, concurrently; a key naming a shard >= R is INVALID_ARGUMENT and nothing
 *     is sent. When one shard fails the others' updates are still applied.
 *   Failures: a shard that is down makes the call wait for it (wait-for-ready) until the
 *     deadline, as with one shard; any shard's error fails the whole call, naming the
 *     shard and its address. A shard that answers with another shard id (addresses
 *     listed out of order) is DATA_LOSS.
 *
 * Ownership: a sharded client owns one client per shard (replay/client.h) and a pool of
 * R - 1 threads for the per-shard calls; batches are the caller's.
 * Failure: see Failures above; errors name the shard and its address.
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
fl_status fl_replay_sharded_sample_updating(fl_replay_sharded_t *s, size_t batch_size, double beta,
                                            int64_t timeout_ms, fl_replay_updates_t *upd, fl_replay_batch_t *out,
                                            fl_err_t *err);
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
