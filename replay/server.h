/* server: one replay shard's gRPC service (fleet.Replay) over one prioritized table
 * (replay/table.h). How a shard works (its threads, what each handler waits for, the
 * locks and their order, the rate limiter, stop) is in docs/design.md, "A replay shard"
 * and "The life of an insert and of a sample"; checkpoints and the write-ahead log in
 * docs/replay-durability.md and docs/design.md, "On-disk formats"; every limit on what a
 * client may do, with the message it gets, in docs/security.md, "Replay shards".
 *
 * Options: fl_replay_service_opts_t below, one field per key of a run configuration's
 * [replay] section that it reads (plus run.seed and actor.count); launcher/options.h
 * (fl_options_replay) maps a run's configuration to them, and the messages name the keys.
 *
 * Methods (messages in proto/fleet.proto). A refusal's message names the field or the
 * limit; the shard keeps serving.
 *   Insert            client-streaming, one stream_id per call, sequences from 1. Each
 *                     message is validated (replay/wire.h) and applied before the next is
 *                     read. A batch whose sequence is not above the stream's last applied
 *                     one is a resend: skipped, still counted in the response's `batches`.
 *                     INVALID_ARGUMENT naming the stream, the sequence and the field for a
 *                     malformed message, a stream_key of 0, or a sequence more than
 *                     FL_REPLAY_MAX_SEQUENCE_STEP past the last; PERMISSION_DENIED ("stream
 *                     N belongs to another writer") for a key other than the one the
 *                     stream's first applied batch bound; RESOURCE_EXHAUSTED when every
 *                     stream record (replay.max_streams) has a call open, or when the
 *                     rate limiter's waiting places are taken; UNAVAILABLE when the log
 *                     append fails. Batches before a refused message stay inserted;
 *                     nothing refused is acknowledged (the writer sends it again). The
 *                     response, at the half-close: last_sequence, this call's batches and
 *                     items, the table size, each batch's first key (UINT64_MAX for a
 *                     skipped batch too old for the shard to remember its key).
 *   Sample            waits up to timeout_ms until the shard holds its sampling threshold
 *                     (fl_replay_service_min_size) and the rate limiter allows the batch,
 *                     else FAILED_PRECONDITION ("replay holds N of the M transitions needed
 *                     to sample", "rate limited: ..."), and at once, naming the limit,
 *                     when FL_REPLAY_MAX_SAMPLE_WAITERS calls already wait, or
 *                     FL_REPLAY_MAX_SAMPLE_WAITERS_PER_CLIENT of one connection.
 *                     INVALID_ARGUMENT for batch_size 0 or above FL_REPLAY_MAX_SAMPLE, or
 *                     beta outside [0, 1]. Priority updates riding on the request are
 *                     checked and applied first, as UpdatePriorities would (a malformed
 *                     list fails the call whole), so they are in even when the call then
 *                     waits or is refused; the response counts them.
 *   UpdatePriorities  keys and priorities of equal length, priorities finite and in
 *                     [0, replay.max_priority], else INVALID_ARGUMENT and nothing applied;
 *                     keys that are not live are counted as stale.
 *   Info              every counter of ReplayInfo.
 *   Checkpoint        writes the whole table to the file fl_replay_service_checkpoint_path
 *                     gives for the request's name (its errors as it says them);
 *                     RESOURCE_EXHAUSTED for a new name when the folder already holds
 *                     FL_REPLAY_MAX_NAMED_CKPTS named checkpoints. The response names the
 *                     file, the live items and the bytes written. One at a time; inserts
 *                     and samples wait only while the table is copied.
 *   Round             run.deterministic only (round_participants below).
 *
 * Lifetime (as the other roles' services): create, start once, stop (idempotent; waiting
 * calls are answered UNAVAILABLE, calls in flight get the rpc layer's grace period),
 * destroy. Handlers are thread-safe; the functions below that say so may be called from
 * any thread between create and destroy. */
#ifndef FL_REPLAY_SERVER_H
#define FL_REPLAY_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "common/obs.h"
#include "common/status.h"
#include "replay/client.h"
#include "replay/selector.h"
#include "replay/table.h"

/* Serving threads: max(FL_REPLAY_SERVICE_THREADS, actors per shard +
 * FL_REPLAY_MAX_SAMPLE_WAITERS + 4), at most 256; Insert messages held by the rate limiter
 * take at most threads - FL_REPLAY_MAX_SAMPLE_WAITERS - 2 of them (docs/design.md, "A
 * replay shard"). Sample calls waiting at once: FL_REPLAY_MAX_SAMPLE_WAITERS. */
#define FL_REPLAY_SERVICE_THREADS 6
#define FL_REPLAY_MAX_SAMPLE_WAITERS 4
/* Waiting Sample calls of one client (a learner keeps learner.prefetch = 2 in flight). */
#define FL_REPLAY_MAX_SAMPLE_WAITERS_PER_CLIENT 2
#define FL_REPLAY_MAX_SAMPLE 65536
/* Longest name a Checkpoint call may give its file. */
#define FL_REPLAY_CKPT_NAME_MAX 100
/* Checkpoint files by name (other than the shards' own) a checkpoint folder may hold
 * before a Checkpoint call with a new name is refused: each is a whole table's copy. */
#define FL_REPLAY_MAX_NAMED_CKPTS 4
/* How far a new batch's sequence may run past its stream's last one. A writer numbers its
 * batches 1, 2, 3, ... and resends from its oldest unacknowledged one, so its next new
 * batch is the last + 1; a larger gap means the shard lost acknowledged batches (it was
 * restored from an older checkpoint), at most the batches written since. */
#define FL_REPLAY_MAX_SEQUENCE_STEP (UINT64_C(1) << 20)

/* Seconds between the housekeeping thread's looks at whether to give free heap pages
 * back to the system (docs/design.md, "A replay shard"). */
#define FL_REPLAY_TRIM_EVERY_S 10.0

/* Longest checkpoint_dir, its NUL included (as long as a run configuration's strings). */
#define FL_REPLAY_DIR_MAX 256

/* What a shard is created from. Each field is the key named in its comment; counts
 * "over all shards" are the run's, of which the shard serves its share. The strings are
 * read by create only (the service keeps copies of what it needs). */
typedef struct fl_replay_service_opts {
    int shard;         /* this shard, 0 .. shards - 1 (the top 8 bits of its keys) */
    int shards;        /* replay.shards, 1 .. 256 */
    fl_obs_spec_t obs; /* the observation signature (env.name's) */
    int num_actions;   /* env.name's action count: inserted actions must be below it;
                          0: only checked to be >= 0 */
    /* the table */
    int64_t capacity;           /* replay.capacity over all shards, >= 1 */
    double alpha;               /* replay.alpha */
    double priority_eps;        /* replay.priority_eps */
    fl_selector selector;       /* replay.selector */
    int64_t max_times_sampled;  /* replay.max_times_sampled */
    int64_t tree_rebuild_every; /* replay.tree_rebuild_every */
    int frame_stack;            /* replay.frame_stack: <= 1 none (the caller resolves 0, the env's) */
    int zstd_level;             /* replay.zstd_level */
    uint64_t seed;              /* run.seed (the table's sampling seed derives from it and shard) */
    /* sampling and rate limit */
    int64_t min_size_to_sample; /* replay.min_size_to_sample over all shards (<= 0: 1) */
    double samples_per_insert;  /* replay.samples_per_insert (0 = off) */
    double rate_error_buffer;   /* replay.rate_error_buffer over all shards */
    int64_t actors;             /* actor.count: the insert streams over all shards (serving threads) */
    /* checkpoints and the write-ahead log */
    const char *checkpoint_dir; /* replay.checkpoint_dir; NULL or "" = none; shorter than FL_REPLAY_DIR_MAX */
    double checkpoint_every;    /* replay.checkpoint_every: seconds between default checkpoints (0 = off;
                                   needs checkpoint_dir) */
    int checkpoint_at_stop;     /* a last checkpoint to the default file when the service stops
                                   (run.checkpoints: what a resumed experiment restores) */
    int wal;                    /* replay.wal: log every new Insert message before it is applied and
                                   acknowledged (needs checkpoint_dir; docs/replay-durability.md) */
    int wal_fsync;              /* replay.wal_fsync: fdatasync each record before acknowledging it */
    const char *restore_path;   /* a checkpoint to start from instead of an empty table (not with wal);
                                   NULL or "" = none */
    /* limits on what a client may send or leave behind (docs/security.md) */
    double max_abs_reward; /* replay.max_abs_reward: |reward| of an inserted transition, > 0 */
    double max_priority;   /* replay.max_priority: inserted and updated priorities, > 0 */
    int64_t max_streams;   /* replay.max_streams: insert streams with a record, >= 1 */
    double stream_idle_s;  /* replay.stream_idle_s: a record unused this long may be reclaimed, > 0;
                              keep it above any actor's outage, as a writer whose record went
                              starts afresh and its resends go in again */
    /* run.deterministic: the participants of the Round calls, actor.count + run.evaluators
     * (0 = off). With them, transitions come only through Round (Insert is refused), in
     * rounds committed in participant order; there is no rate limit (the learner takes a
     * fixed number of samples per round) and no write-ahead log. One shard only. */
    int64_t round_participants;
} fl_replay_service_opts_t;

/* The most Round participants, and how far past its round a participant's `through`
 * may reach. */
#define FL_REPLAY_MAX_ROUND_PARTICIPANTS 65536
#define FL_REPLAY_MAX_ROUNDS_THROUGH (1 << 20)

/* The defaults of those keys (common/config_keys.h: capacity 1,000,000, alpha 0.6,
 * priority_eps 1e-6, prioritized, tree_rebuild_every 2^20, min_size_to_sample 1,000,
 * samples_per_insert 8, rate_error_buffer 20,000, run.seed 1, actor.count 2, max_abs_reward and max_priority
 * 1e6, max_streams 16,384, stream_idle_s 3600, everything else 0 / off), shard 0 of 1,
 * and no observation signature (the caller sets obs and num_actions). */
void fl_replay_service_opts_init(fl_replay_service_opts_t *opts);

typedef struct fl_replay_service fl_replay_service_t;

/* Creates shard opts->shard's table (capacity ceil(replay.capacity / replay.shards)):
 * empty, loaded from opts->restore_path, or, with opts->wal, recovered from
 * opts->checkpoint_dir (docs/replay-durability.md); a restored or recovered shard's rate
 * limiter continues from the counters it restored. FL_INVALID_ARGUMENT for a bad shard,
 * signature or option, or restore_path with wal (the message names it),
 * FL_NO_MEMORY if the table does not fit. Restoring: a missing file is FL_NOT_FOUND; a
 * malformed file or one whose signature differs from the configured table is
 * FL_INVALID_ARGUMENT with a message naming the file and the field. With the log:
 * FL_DATA_LOSS for a damaged log, FL_INVALID_ARGUMENT for a checkpoint or log record
 * that does not fit the configured table, FL_FAILED_PRECONDITION when another process
 * holds the folder's lock, each naming the file. */
fl_status fl_replay_service_create(const fl_replay_service_opts_t *opts, fl_replay_service_t **out, fl_err_t *err);
/* What fl_replay_service_create checks of opts before it allocates anything (shards,
 * capacity, signature, checkpoint and log settings), for a launcher that checks before
 * any process starts. */
fl_status fl_replay_service_check_opts(const fl_replay_service_opts_t *opts, fl_err_t *err);

/* Writes a checkpoint of the table to `path` (NULL or "": the default file,
 * replay.checkpoint_dir/shard-<id>.ckpt; FL_UNIMPLEMENTED when there is none). The path is the caller's (the
 * process's own code: the Checkpoint call reaches here only with a checked name inside
 * replay.checkpoint_dir, see fl_replay_service_checkpoint_path). With replay.wal on, a
 * checkpoint to the default file also rotates the log, saves the streams' resend records
 * and deletes the segments it covers (docs/replay-durability.md, "How it works"). path_out (len bytes, may be NULL)
 * receives the path used, info (may be NULL) the items and bytes written. Any thread, between create and destroy;
 * checkpoints are serialized. */
fl_status fl_replay_service_checkpoint(fl_replay_service_t *s, const char *path, fl_table_save_info_t *info,
                                       char *path_out, size_t len, fl_err_t *err);
/* The file a Checkpoint call's `name` stands for: path (len bytes) receives
 * replay.checkpoint_dir/name, or the default file for an empty name. A name is a plain
 * file name of 1 to FL_REPLAY_CKPT_NAME_MAX characters of [A-Za-z0-9._-], ending in
 * ".ckpt", not starting with '.', without "..", and not starting with "shard-" unless it
 * is this shard's own default name (so that no call overwrites a log segment, another
 * shard's checkpoint or the roles' files beside them). FL_INVALID_ARGUMENT naming what is
 * wrong with the name, FL_UNIMPLEMENTED ("checkpoints are not enabled") without a
 * checkpoint folder. */
fl_status fl_replay_service_checkpoint_path(const fl_replay_service_t *s, const char *name, char *path, size_t len,
                                            fl_err_t *err);

/* Binds listen_addr ("host:port", port 0 = the OS chooses, or "unix:/path") and starts
 * serving. bound_addr_out (len bytes, may be NULL) receives the address clients should
 * use: "host:PORT" with the chosen port, or the unix address as given. */
fl_status fl_replay_service_start(fl_replay_service_t *s, const char *listen_addr, char *bound_addr_out, size_t len,
                                  fl_err_t *err);

/* Stops serving (see Lifetime above); then, with checkpoint_at_stop, a shard that served
 * writes the default checkpoint. Idempotent; the table and counters stay readable. */
void fl_replay_service_stop(fl_replay_service_t *s);

/* Stops if needed and frees everything. NULL is a no-op. */
void fl_replay_service_destroy(fl_replay_service_t *s);

/* The counters that Info reports. Any thread, between create and destroy. */
void fl_replay_service_info(fl_replay_service_t *s, fl_replay_info_t *out);

/* The shard's table (owned by the service), e.g. for checks in tests. Any thread, between
 * create and destroy. */
fl_table_t *fl_replay_service_table(fl_replay_service_t *s);

/* Sample calls waiting for the table to fill right now. */
int fl_replay_service_sample_waiters(fl_replay_service_t *s);

/* The sampling threshold: transitions this shard must hold before Sample answers. */
uint64_t fl_replay_service_min_size(const fl_replay_service_t *s);

#endif
