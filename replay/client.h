/* replay client: what actors and learners use to talk to a replay shard over gRPC.
 *
 * Writer (actors): transitions are appended in batches (the actor's local buffer); each
 * batch gets the next sequence number of the writer's stream id and is sent at once on
 * an open client-streaming Insert call. After `batches_per_call` batches (or on
 * fl_replay_writer_flush) the call is finished and the shard's InsertResponse
 * acknowledges the batches it holds. Batches not yet acknowledged stay in the writer;
 * when a call fails they are sent again, in order, on the next call (the shard skips a
 * batch whose sequence it already holds, so a resend never duplicates). Nothing
 * appended is dropped unless the writer is destroyed before it was acknowledged.
 *
 * A stream id names one writer incarnation: a shard skips every batch of that id whose
 * sequence is not above the last it applied, so a restarted process must not reuse
 * its predecessor's id. Until the shard has acknowledged a first call, the writer's
 * calls wait for it to come up (wait-for-ready, up to the call's 60 s deadline), so an
 * actor started before its shard waits for it; afterwards append never waits for an
 * unreachable shard: a failed call leaves its batches pending and appends retry at
 * most every backoff interval (common/retry.h: 0.05 s doubling to 2 s). Flush always waits for the
 * shard, up to its timeout.
 *
 * Reader (learners): Sample into caller-owned reusable columns, UpdatePriorities, Info.
 * Reader calls wait for the shard to come up until their deadline.
 *
 * Sharded replay (fl_replay_sharded_*): R shards, each a `fleet replay` process, seen as
 * one prioritized replay.
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
 *     rows (ReplayInfo.min_priority), so weights use every shard's current minimum. table_size is sum N_s, total_priority T and
 *     min_priority q_min, at sampling time.
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
 * Thread-safety: a writer belongs to one thread; a client (and its reader calls) may be
 * shared by threads, and so may a sharded client. */
#ifndef FL_REPLAY_CLIENT_H
#define FL_REPLAY_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/obs.h"
#include "common/status.h"

typedef struct fl_replay_client fl_replay_client_t;
typedef struct fl_replay_writer fl_replay_writer_t;

/* addr: "host:port" or "unix:/path". */
fl_status fl_replay_client_create(const char *addr, fl_replay_client_t **out, fl_err_t *err);
void fl_replay_client_destroy(fl_replay_client_t *c);
/* Deadline of UpdatePriorities calls and of Sample calls given timeout_ms <= 0
 * (default FL_REPLAY_CLIENT_TIMEOUT_MS; <= 0 restores the default). */
#define FL_REPLAY_CLIENT_TIMEOUT_MS 30000
void fl_replay_client_set_timeout(fl_replay_client_t *c, int64_t timeout_ms);

fl_status fl_replay_writer_create(fl_replay_client_t *c, uint64_t stream_id, const fl_obs_spec_t *obs,
                                  int batches_per_call, fl_replay_writer_t **out, fl_err_t *err);
/* Destroys the writer; batches not yet acknowledged are lost (flush first). */
void fl_replay_writer_destroy(fl_replay_writer_t *w);
/* Appends one batch of n transitions (columns are copied) and sends it. A send failure
 * is not an error here: the batch stays pending and goes out on the next call. Returns
 * an error only for bad input (e.g. a non-finite priority, n == 0) or out of memory. */
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

/* A sampled batch: columns sized for `capacity` transitions, reused across calls. All
 * columns live in one page-aligned allocation (block, block_bytes), each column aligned
 * to 64 bytes, so that a GPU learner can page-lock a batch with one registration. */
typedef struct fl_replay_batch {
    uint8_t *block;
    size_t block_bytes;
    size_t capacity, count, obs_bytes;
    uint8_t *obs;       /* (count, obs_bytes) */
    int32_t *actions;   /* (count) */
    float *rewards;     /* (count) */
    float *discounts;   /* (count) */
    uint8_t *next_obs;  /* (count, obs_bytes) */
    uint64_t *keys;     /* (count) */
    float *weights;     /* (count) */
    double *probs;      /* (count) */
    uint64_t table_size;
    double total_priority;
    double min_priority; /* smallest positive p^alpha the weights were normalised by (0: beta 0) */
} fl_replay_batch_t;

fl_status fl_replay_batch_init(fl_replay_batch_t *b, size_t capacity, size_t obs_bytes);
void fl_replay_batch_free(fl_replay_batch_t *b);

/* Samples batch_size transitions. timeout_ms bounds the call (and the shard's wait for
 * min_size_to_sample): FL_FAILED_PRECONDITION when the shard holds too few. */
fl_status fl_replay_sample(fl_replay_client_t *c, size_t batch_size, double beta, int64_t timeout_ms,
                           fl_replay_batch_t *out, fl_err_t *err);

/* Priority updates sent along with a Sample call (SampleRequest.update_keys), so that a
 * learner makes one call per batch instead of two: n keys with their new |TD errors|
 * (finite, >= 0; checked before anything is sent), applied by the shard before it
 * draws, stale keys skipped. applied receives how many were applied. The shard applies
 * them whether or not it then has a batch to give: after FL_OK or FL_FAILED_PRECONDITION
 * (the shard answered) they are in; after another error they may or may not be, and
 * sending them again is harmless (an update sets a priority, it does not add to it). */
typedef struct fl_replay_updates {
    size_t n;
    const uint64_t *keys;
    const float *priorities;
    uint64_t applied;
} fl_replay_updates_t;

/* fl_replay_sample with updates (NULL or n = 0: none). */
fl_status fl_replay_sample_updating(fl_replay_client_t *c, size_t batch_size, double beta, int64_t timeout_ms,
                                    fl_replay_updates_t *upd, fl_replay_batch_t *out, fl_err_t *err);
fl_status fl_replay_update_priorities(fl_replay_client_t *c, size_t n, const uint64_t *keys,
                                      const float *priorities, uint64_t *applied, fl_err_t *err);

typedef struct fl_replay_info {
    uint32_t shard_id;
    uint64_t size, capacity, inserted, sampled, insert_batches, updates_applied, updates_stale, sample_calls,
        rejected;
    double total_priority, max_priority, uptime_s;
    double samples_per_insert;                /* the shard's rate limit (0 = off) */
    double insert_blocked_s, sample_blocked_s; /* time inserts / samples spent waiting on it */
    uint32_t inserts_waiting, samples_waiting; /* calls waiting right now */
    double sampling_mass;                      /* what the shard's draws are proportional to: total_priority
                                                  (prioritized selector) or size (uniform, fifo) */
    double min_priority;                       /* prioritized: smallest positive p^alpha held; 0 when
                                                  none and with the other selectors */
    uint64_t storage_bytes, frames;            /* table memory, distinct frames stored */
} fl_replay_info_t;

fl_status fl_replay_info(fl_replay_client_t *c, int64_t timeout_ms, fl_replay_info_t *out, fl_err_t *err);

/* ------------------------------------------------------------ sharded ---- */

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
