/* server: one replay shard's gRPC service (fleet.Replay) over one prioritized table.
 *
 * The service is created from its own options (fl_replay_service_opts_t below), one
 * field per key of a run configuration's [replay] section that it reads (plus run.seed
 * and actor.count); launcher/options.h (fl_options_replay) maps a run's configuration to them, and the
 * messages below name the keys.
 *
 * Methods (see proto/fleet.proto for the messages):
 *   Insert            client-streaming. Each InsertRequest is decoded, validated against
 *                     the table's signature (replay/wire.h: also finite float32
 *                     observations, |reward| <= replay.max_abs_reward, priorities <=
 *                     replay.max_priority) and inserted before the next one is read. The
 *                     shard keeps, per stream_id, the last sequence it applied: a batch
 *                     whose sequence is not above it is a resend and is skipped (still
 *                     counted in the response's `batches`), so a writer that resends
 *                     unacknowledged batches after a failure never duplicates one. One
 *                     stream_id per call; sequences start at 1.
 *                     Streams belong to their writer: every message carries the writer's
 *                     random stream_key (0 is INVALID_ARGUMENT); the stream's first
 *                     applied batch binds the key, and a later message of that stream_id
 *                     with another key is PERMISSION_DENIED ("stream N belongs to another
 *                     writer"), nothing applied. A new batch may run at most
 *                     FL_REPLAY_MAX_SEQUENCE_STEP past the stream's last sequence
 *                     (INVALID_ARGUMENT naming the range), so that no message can mark a
 *                     stream's future batches as held. The shard keeps records of at
 *                     most replay.max_streams streams; a record with no call bound to it
 *                     for replay.stream_idle_s is reclaimed when room is needed (its
 *                     writer, if it ever comes back, starts afresh: its resends would go
 *                     in again, which is why the deadline must exceed any actor's
 *                     outage). When none is that idle, a new stream pushes out the least
 *                     recently used records with no call bound (those of one batch first:
 *                     what a flood of fresh streams leaves), so that no flood locks a new
 *                     writer out; only when every record has a call open is a new stream
 *                     RESOURCE_EXHAUSTED naming replay.max_streams. The response (at the client's
 *                     half-close) reports the stream's
 *                     last_sequence, this call's batches and inserted items, the table
 *                     size and each batch's first key (UINT64_MAX for a skipped batch
 *                     too old for the shard to remember its key). A malformed message
 *                     fails the call with INVALID_ARGUMENT naming the stream, the
 *                     sequence and the field; batches before it stay inserted (the
 *                     writer's resend skips them), and the shard keeps serving.
 *   Sample            waits up to timeout_ms (a condition variable signalled by inserts)
 *                     until the table holds the sampling threshold and the rate limiter
 *                     allows the batch, else FAILED_PRECONDITION "replay holds N of the M
 *                     transitions needed to sample" or "rate limited: ...". The threshold is this shard's share of
 *                     replay.min_size_to_sample (ceil(min_size / shards), at most the
 *                     table's capacity). batch_size 0 (or above FL_REPLAY_MAX_SAMPLE) and
 *                     beta outside [0, 1] are INVALID_ARGUMENT. At most
 *                     FL_REPLAY_MAX_SAMPLE_WAITERS calls wait at once, so that waiting
 *                     samplers never hold every serving thread, and at most
 *                     FL_REPLAY_MAX_SAMPLE_WAITERS_PER_CLIENT of them from one client
 *                     (one peer address, i.e. one connection), so that no client holds
 *                     every waiting place; a call beyond either fails at once with
 *                     FAILED_PRECONDITION naming the limit. Priority updates carried by the
 *                     request (update_keys / update_priorities, a learner's updates for
 *                     its previous batch) are checked and applied first, as
 *                     UpdatePriorities would (a malformed list fails the call whole with
 *                     INVALID_ARGUMENT), so they are in even when the call then waits or
 *                     is refused; the response counts them.
 *   Rate limit        with replay.samples_per_insert > 0 (see replay/ratelimit.h), an
 *                     Insert message waits until the limiter admits its items, and a
 *                     Sample waits as above. At most (threads - MAX_SAMPLE_WAITERS - 2)
 *                     inserts wait at once; one more is refused with RESOURCE_EXHAUSTED
 *                     (not acknowledged: the writer sends it again). Waiting time is
 *                     counted in Info (insert_blocked_s, sample_blocked_s).
 *   UpdatePriorities  keys and priorities of equal length, priorities finite, >= 0 and <=
 *                     replay.max_priority (else INVALID_ARGUMENT, nothing applied); keys that are not live
 *                     (evicted, another shard's, never issued) are counted as stale.
 *   Info              every counter of ReplayInfo.
 *   Checkpoint        writes the whole table (replay/table.h: fl_table_save, atomic
 *                     temporary file + fsync + rename) to the file the request names
 *                     inside replay.checkpoint_dir, or when the name is empty to
 *                     replay.checkpoint_dir/shard-<id>.ckpt. A name is a plain file name:
 *                     1 to FL_REPLAY_CKPT_NAME_MAX characters of [A-Za-z0-9._-], ending
 *                     in ".ckpt", not starting with '.', without "..", and not starting
 *                     with "shard-" unless it is this shard's own default name (so that
 *                     no call overwrites a log segment, another shard's checkpoint or
 *                     the learner's and actors' files next to them); anything else is
 *                     INVALID_ARGUMENT naming what is wrong. A new name when the folder
 *                     already holds FL_REPLAY_MAX_NAMED_CKPTS such files (*.ckpt not
 *                     starting with "shard-") is RESOURCE_EXHAUSTED (a name already there
 *                     may be written again), so that calls cannot fill the disk with
 *                     copies of the table. Without a checkpoint folder
 *                     the call is UNIMPLEMENTED ("checkpoints are not enabled"). The
 *                     response names the file, the live items and the bytes written. One
 *                     checkpoint runs at a time; inserts and samples wait only while
 *                     the table is copied, not while the file is written. Per-stream
 *                     resend records are saved (in the file's extra section) only by a
 *                     checkpoint to the default file with replay.wal on; the service's
 *                     own counters (insert_batches, sample_calls, rejected, waiting
 *                     times) are never saved.
 *   Periodic          with replay.checkpoint_every > 0 (needs replay.checkpoint_dir), a
 *                     housekeeping thread started by fl_replay_service_start writes the
 *                     default checkpoint every that many seconds until stop; failures
 *                     are logged and retried at the next period. The same thread gives
 *                     the heap's free pages back to the system (glibc malloc_trim) every
 *                     FL_REPLAY_TRIM_EVERY_S when rows were inserted since the last time,
 *                     and after each checkpoint, so that the resident memory of a full
 *                     shard stays flat.
 *   Restore           with opts.restore_path, create loads that checkpoint instead of
 *                     creating an empty table; the file's signature must match the
 *                     shard's configured table (see fl_table_load), and the rate
 *                     limiter continues from the restored inserted/sampled counters.
 *                     Not with replay.wal = 1 (FL_INVALID_ARGUMENT): see below.
 *   Write-ahead log   with replay.wal = 1 (needs replay.checkpoint_dir; see replay/wal.h
 *                     and docs/replay-durability.md) every Insert message that is not a
 *                     resend is appended, as the serialized InsertRequest received, to
 *                     the log replay.checkpoint_dir/shard-<id>.wal.<N> before it is
 *                     inserted and so before it is acknowledged; the append, the table
 *                     insert and the stream's sequence record happen under one
 *                     service-wide insert mutex, so the log's order is the insertion
 *                     order. A failed append is answered UNAVAILABLE (nothing inserted;
 *                     the writer sends it again). With replay.wal_fsync = 0 a record is
 *                     in the page cache when acknowledged (survives kill -9 of the
 *                     shard, not a machine crash); with 1 it is fdatasync'ed first.
 *                     A checkpoint to the default file (the Checkpoint call without a
 *                     path, or the periodic one) rotates the log to segment N+1 and
 *                     copies the table and the stream records under that mutex, writes
 *                     them with N+1 in the file, then deletes segments <= N; a
 *                     checkpoint to another path is a plain copy of the table and leaves
 *                     the log alone. At create the shard recovers by itself: the default
 *                     checkpoint if it exists (table, stream records, the segment to
 *                     resume from; else an empty table and segment 1), then every log
 *                     record from that segment on, in order, through the same code as a
 *                     live insert, so keys and resend records are those acknowledged
 *                     before (a resent batch is skipped, not duplicated). A torn last
 *                     record of the last segment (never acknowledged) is cut off with a
 *                     warning; any other damage fails create (FL_DATA_LOSS naming the
 *                     file and offset). Appending continues in a fresh segment; the rate
 *                     limiter continues from the recovered counters; Info's
 *                     insert_batches counts only batches received by this process.
 *                     Priority updates and samples are not logged: after recovery the
 *                     items inserted since the checkpoint have their inserted
 *                     priorities, and other items the checkpoint's. The folder is
 *                     flock'ed (shard-<id>.wal.lock): a second process for the same
 *                     shard and folder fails create with FL_FAILED_PRECONDITION.
 *
 * The table: capacity ceil(replay.capacity / replay.shards), replay.alpha,
 * replay.priority_eps, replay.selector, replay.max_times_sampled,
 * replay.tree_rebuild_every, replay.frame_stack, replay.zstd_level, shard id `shard`, a
 * sampling seed derived from run.seed and the shard, and the observation signature given
 * in the options (the configured env's; the caller resolves env.name so that this
 * library does not depend on the env registry).
 *
 * Threads: the service is served by max(FL_REPLAY_SERVICE_THREADS, actors per shard +
 * MAX_SAMPLE_WAITERS + 4) threads (at most 256), so that every actor's stream can wait
 * on the rate limiter while samples are still served (held inserts go in the order they
 * came, their places shared among clients: docs/security.md); all handlers are
 * thread-safe (the table locks itself, per-stream records have their own locks).
 * Lifetime (as the other roles' services): create, start once, stop (idempotent;
 * waiting samplers are woken and answered UNAVAILABLE, calls in flight get the rpc
 * layer's grace period), destroy.
 * fl_replay_service_info and fl_replay_service_table may be called from any thread
 * between create and destroy. */
#ifndef FL_REPLAY_SERVER_H
#define FL_REPLAY_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "common/obs.h"
#include "common/status.h"
#include "replay/client.h"
#include "replay/selector.h"
#include "replay/table.h"

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
 * back to the system (see Periodic). */
#define FL_REPLAY_TRIM_EVERY_S 10.0

/* Longest checkpoint_dir, its NUL included (as long as a run configuration's strings). */
#define FL_REPLAY_DIR_MAX 256

/* What a shard is created from. Each field is the key named in its comment; counts
 * "over all shards" are the run's, of which the shard serves its share. The strings are
 * read by create only (the service keeps copies of what it needs). */
typedef struct fl_replay_service_opts {
    int shard;                  /* this shard, 0 .. shards - 1 (the top 8 bits of its keys) */
    int shards;                 /* replay.shards, 1 .. 256 */
    fl_obs_spec_t obs;          /* the observation signature (env.name's) */
    int num_actions;            /* env.name's action count: inserted actions must be below it;
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
    uint64_t seed;              /* run.seed */
    /* sampling and rate limit */
    int64_t min_size_to_sample; /* replay.min_size_to_sample over all shards (<= 0: 1) */
    double samples_per_insert;  /* replay.samples_per_insert (0 = off) */
    double rate_error_buffer;   /* replay.rate_error_buffer over all shards */
    int64_t actors;             /* actor.count: the insert streams over all shards (see Threads) */
    /* checkpoints and the write-ahead log */
    const char *checkpoint_dir; /* replay.checkpoint_dir; NULL or "" = none; shorter than FL_REPLAY_DIR_MAX */
    double checkpoint_every;    /* replay.checkpoint_every, seconds (0 = off) */
    int checkpoint_at_stop;     /* a last checkpoint to the default file when the service stops
                                   (run.checkpoints: what a resumed experiment restores) */
    int wal;                    /* replay.wal */
    int wal_fsync;              /* replay.wal_fsync */
    const char *restore_path;   /* a checkpoint to start from (see Restore); NULL or "" = none */
    /* limits on what a client may send or leave behind (docs/security.md) */
    double max_abs_reward;      /* replay.max_abs_reward: |reward| of an inserted transition, > 0 */
    double max_priority;        /* replay.max_priority: inserted and updated priorities, > 0 */
    int64_t max_streams;        /* replay.max_streams: insert streams with a record, >= 1 */
    double stream_idle_s;       /* replay.stream_idle_s: a record unused this long may be reclaimed, > 0 */
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

/* Creates shard opts->shard's table (see above): empty, loaded from opts->restore_path,
 * or, with opts->wal, recovered from opts->checkpoint_dir (see Write-ahead log above).
 * FL_INVALID_ARGUMENT for a bad shard, signature or option (the message names it),
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

/* Writes a checkpoint of the table to `path` (NULL or "": the configured default, see
 * Checkpoint above; FL_UNIMPLEMENTED when there is none). The path is the caller's (the
 * process's own code: the Checkpoint call reaches here only with a checked name inside
 * replay.checkpoint_dir, see fl_replay_service_checkpoint_path). With replay.wal on, a
 * checkpoint to the default file also rotates the log and deletes the segments it covers
 * (see Write-ahead log above). path_out (len bytes, may be NULL) receives the path used,
 * info (may be NULL) the items and bytes written. Any thread, between create and
 * destroy; checkpoints are serialized. */
fl_status fl_replay_service_checkpoint(fl_replay_service_t *s, const char *path, fl_table_save_info_t *info,
                                       char *path_out, size_t len, fl_err_t *err);
/* The file a Checkpoint call's `name` stands for (see Checkpoint above): path (len bytes)
 * receives replay.checkpoint_dir/name, or the default file for an empty name.
 * FL_INVALID_ARGUMENT naming what is wrong with the name, FL_UNIMPLEMENTED without a
 * checkpoint folder. */
fl_status fl_replay_service_checkpoint_path(const fl_replay_service_t *s, const char *name, char *path, size_t len,
                                            fl_err_t *err);

/* Binds listen_addr ("host:port", port 0 = the OS chooses, or "unix:/path") and starts
 * serving. bound_addr_out (len bytes, may be NULL) receives the address clients should
 * use: "host:PORT" with the chosen port, or the unix address as given. */
fl_status fl_replay_service_start(fl_replay_service_t *s, const char *listen_addr, char *bound_addr_out,
                                  size_t len, fl_err_t *err);

/* Stops serving (see above). Idempotent; the table and counters stay readable. */
void fl_replay_service_stop(fl_replay_service_t *s);

/* Stops if needed and frees everything. NULL is a no-op. */
void fl_replay_service_destroy(fl_replay_service_t *s);

/* The counters that Info reports. */
void fl_replay_service_info(fl_replay_service_t *s, fl_replay_info_t *out);

/* The shard's table (owned by the service), e.g. for checks in tests. */
fl_table_t *fl_replay_service_table(fl_replay_service_t *s);

/* Sample calls waiting for the table to fill right now. */
int fl_replay_service_sample_waiters(fl_replay_service_t *s);

/* The sampling threshold: transitions this shard must hold before Sample answers. */
uint64_t fl_replay_service_min_size(const fl_replay_service_t *s);

#endif
