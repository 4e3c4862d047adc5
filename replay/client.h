/* replay client: a learner's (or a tool's) connection to one replay shard over gRPC:
 * Sample into caller-owned reusable columns (fl_replay_batch_t), UpdatePriorities, Info.
 * Calls wait for the shard to come up (wait-for-ready) until their deadline. Actors insert
 * through a writer on a client (replay/writer.h); several shards seen as one replay are
 * replay/sharded.h.
 *
 * Ownership: a client owns its channel; batches are the caller's, reused across calls.
 * Failure: a call's error is returned with the shard's message (DATA_LOSS for a
 * malformed answer); nothing is retried here.
 * Thread-safety: a client (and its calls) may be shared by threads. */
#ifndef FL_REPLAY_CLIENT_H
#define FL_REPLAY_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/obs.h"
#include "common/status.h"

typedef struct fl_replay_client fl_replay_client_t;

/* addr: "host:port" or "unix:/path". */
fl_status fl_replay_client_create(const char *addr, fl_replay_client_t **out, fl_err_t *err);
void fl_replay_client_destroy(fl_replay_client_t *c);
/* Deadline of UpdatePriorities calls and of Sample calls given timeout_ms <= 0
 * (default FL_REPLAY_CLIENT_TIMEOUT_MS; <= 0 restores the default). */
#define FL_REPLAY_CLIENT_TIMEOUT_MS 30000
void fl_replay_client_set_timeout(fl_replay_client_t *c, int64_t timeout_ms);

/* A sampled batch: columns sized for `capacity` transitions, reused across calls. All
 * columns live in one allocation of whole pages (block, block_bytes), each column aligned
 * to 64 bytes, so that a GPU learner can page-lock a batch with one registration. */
typedef struct fl_replay_batch {
    uint8_t *block;
    size_t block_bytes;
    size_t capacity, count, obs_bytes;
    uint8_t *obs;      /* (count, obs_bytes) */
    int32_t *actions;  /* (count) */
    float *rewards;    /* (count) */
    float *discounts;  /* (count) */
    uint8_t *next_obs; /* (count, obs_bytes) */
    uint64_t *keys;    /* (count) */
    float *weights;    /* (count) */
    double *probs;     /* (count) */
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
fl_status fl_replay_update_priorities(fl_replay_client_t *c, size_t n, const uint64_t *keys, const float *priorities,
                                      uint64_t *applied, fl_err_t *err);

typedef struct fl_replay_info {
    uint32_t shard_id;
    uint64_t size, capacity, inserted, sampled, insert_batches, updates_applied, updates_stale, sample_calls, rejected;
    double total_priority, max_priority, uptime_s;
    double samples_per_insert;                 /* the shard's rate limit (0 = off) */
    double insert_blocked_s, sample_blocked_s; /* time inserts / samples spent waiting on it */
    uint32_t inserts_waiting, samples_waiting; /* calls waiting right now */
    double sampling_mass;                      /* what the shard's draws are proportional to: total_priority
                                                  (prioritized selector) or size (uniform, fifo) */
    double min_priority;                       /* prioritized: smallest positive p^alpha held; 0 when
                                                  none and with the other selectors */
    uint64_t storage_bytes, frames;            /* table memory, distinct frames stored */
    uint64_t rss_bytes, private_bytes;         /* the shard process's resident and private memory */
    double cpu_s;                              /* its CPU seconds so far */
} fl_replay_info_t;

fl_status fl_replay_info(fl_replay_client_t *c, int64_t timeout_ms, fl_replay_info_t *out, fl_err_t *err);

/* One Round call of a deterministic run (proto/fleet.proto, RoundRequest): participant
 * (1-based; 0 = only wait) finished `round` (through `through`, 0 = round) with the
 * transitions of batch (NULL or count 0: none; its observations of signature obs, with
 * priorities); waits up to wait_ms for the round to be committed. *out (may be NULL)
 * receives the shard's answer. The call is idempotent: sending a round again changes
 * nothing. */
typedef struct fl_replay_round_answer {
    uint64_t committed_round;  /* every round up to this one is in the table */
    uint64_t table_size;       /* items held after that commit */
    uint64_t first_full_round; /* first round after which the table held min_size_to_sample (0: none yet) */
} fl_replay_round_answer_t;
struct fl_wire_batch;
fl_status fl_replay_round(fl_replay_client_t *c, uint32_t participant, uint64_t round, uint64_t through,
                          const fl_obs_spec_t *obs, const struct fl_wire_batch *batch, uint32_t wait_ms,
                          fl_replay_round_answer_t *out, fl_err_t *err);

#endif
