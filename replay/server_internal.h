/* server_internal: what the replay service's files share. Not for use outside replay/.
 *   server.c           Sample, UpdatePriorities, Info, Checkpoint, housekeeping and the
 *                      service's lifetime;
 *   server_insert.c    Insert: its checks, the rate limiter's waits, the log's append;
 *   server_round.c     the deterministic rounds (fleet.Replay/Round);
 *   server_recovery.c  how the shard's table comes to be at create (empty, restored
 *                      from a checkpoint, or recovered from its checkpoint and
 *                      write-ahead log) and the log's rotation at a checkpoint;
 *   server_stream.c    the stream records and fl__replay_apply_insert, the one place an
 *                      insert changes the table.
 * Calls go one way: server.c -> server_insert.c, server_round.c, server_recovery.c ->
 * server_stream.c.
 *
 * The service's state and its per-stream records; the locking rules are at the top of
 * replay/server.c. */
#ifndef FL_REPLAY_SERVER_INTERNAL_H
#define FL_REPLAY_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rpc.h"
#include "common/status.h"
#include "replay/ratelimit.h"
#include "replay/server.h"
#include "replay/table.h"
#include "replay/wal.h"
#include "replay/wire.h"

/* First keys remembered per stream, for the response to a resent batch. */
#define FL__REPLAY_KEY_RING 64

typedef struct fl__stream_rec {
    uint64_t id;
    pthread_mutex_t mu; /* guards the fields up to the rings */
    uint64_t last_seq;
    uint64_t key; /* the writer's stream_key, bound by the first batch applied; 0 = not yet */
    uint64_t ring_seq[FL__REPLAY_KEY_RING];
    uint64_t ring_key[FL__REPLAY_KEY_RING];
    /* guarded by the service's streams_mu */
    int users;        /* Insert calls bound to the record: it is never reclaimed while > 0 */
    double last_used; /* fl_clock_sec() when it was made or its last call ended */
} fl__stream_rec_t;

/* A participant's batch of a round not yet committed: a copy of its RoundRequest. */
typedef struct fl__staged_round {
    uint64_t round;
    uint8_t *msg; /* NULL: none */
    size_t len;
} fl__staged_round_t;

/* Rounds past the committed one that a participant may send a batch for. */
#define FL__ROUND_AHEAD 2

/* Sample calls waiting, per client (peer address). */
typedef struct fl__sample_waiter {
    char peer[96];
    int n;
} fl__sample_waiter_t;

/* An Insert message the rate limiter holds: a place in the queue of waiting inserts,
 * which go in the order they came (server.c, rate_wait_insert). */
typedef struct fl__insert_place {
    struct fl__insert_place *next;
    uint64_t n;   /* its rows */
    int client;   /* its entry in insert_clients */
    int give_way; /* asked to give its place to another client's insert */
} fl__insert_place_t;

/* The places one client holds (fl_rpc_peer_key: a remote host, or a connection on
 * loopback); n = 0: a free entry. */
typedef struct fl__insert_client {
    char key[96];
    int n;
} fl__insert_client_t;

struct fl_replay_service {
    fl_table_t *table;
    fl_wire_sig_t sig;
    size_t obs_bytes;
    int shard;
    uint64_t min_size;
    fl_rpc_server_t *rpc;
    int started, stopped;
    double t_start;

    pthread_mutex_t mu;       /* guards the fields below */
    pthread_cond_t cv;        /* Sample and Round calls wait here: signalled by inserts, commits and stop */
    pthread_cond_t insert_cv; /* inserts the rate limiter holds wait here: signalled by samples and stop */
    pthread_cond_t hk_cv;     /* the housekeeping thread sleeps here: signalled at stop */
    int waiters;              /* Sample calls waiting for data or for the rate limiter */
    fl__sample_waiter_t waiting[FL_REPLAY_MAX_SAMPLE_WAITERS]; /* ... by client (n = 0: a free entry) */
    int insert_waiters;                                        /* Insert messages waiting for the rate limiter ... */
    fl__insert_place_t *insert_head, *insert_tail;             /* ... in the order they came */
    fl__insert_client_t *insert_clients;                       /* (n_insert_clients) ... by client */
    int n_insert_clients;
    int insert_giving_way; /* places asked to give way, not yet gone */
    int max_insert_waiters;
    uint64_t insert_reserved; /* rows the rate limiter let through that are not inserted yet */
    uint64_t inserts_gave_way;
    int stopping;
    fl_ratelimit_t rl;
    double insert_blocked_s, sample_blocked_s;
    int threads;

    pthread_mutex_t streams_mu; /* guards the map and the records' users and last_used; a record
                                   goes away only when reclaimed, with no call bound to it */
    fl__stream_rec_t **streams; /* open addressing, linear probing, streams_cap a power of two */
    size_t nstreams, streams_cap;
    size_t max_streams;   /* replay.max_streams */
    double stream_idle_s; /* replay.stream_idle_s */
    double next_reclaim;  /* fl_clock_sec() before which no record can be reclaimable */
    uint64_t streams_reclaimed, streams_evicted;

    atomic_uint_fast64_t insert_batches, rejected, sample_calls;

    char ckpt_default[FL_REPLAY_DIR_MAX + 32]; /* replay.checkpoint_dir/shard-<id>.ckpt, or "" */
    double ckpt_every;                         /* seconds; 0 = no periodic checkpoints */
    int ckpt_at_stop;                          /* a last checkpoint to ckpt_default at the stop */
    pthread_mutex_t ckpt_mu;                   /* serializes checkpoints (each copies the table) */
    pthread_mutex_t named_mu;                  /* a named Checkpoint call's count of named files and its write */
    pthread_t housekeeping;                    /* periodic checkpoints and heap trims (server.c) */
    int housekeeping_started;

    /* write-ahead log (replay.wal; NULL when off) */
    fl_wal_t *wal;
    pthread_mutex_t wal_mu;          /* the insert mutex: log append + table insert + stream record */
    char wal_dir[FL_REPLAY_DIR_MAX]; /* replay.checkpoint_dir */
    int wal_fsync;                   /* replay.wal_fsync */
    int wal_lock_fd;                 /* flock'd shard-<id>.wal.lock, or -1 */

    /* deterministic rounds (replay/server_round.c; participants 0 = off), guarded by mu */
    int participants;
    uint64_t committed_round;
    uint64_t first_full_round;  /* the first committed round after which the table held min_size (0: none) */
    uint64_t *round_done;       /* (participants + 1): the last round participant p finished */
    fl__staged_round_t *staged; /* ((participants + 1) * FL__ROUND_AHEAD): batches held, slot round % AHEAD */
};

/* Whether n more rows may go in now (s->mu held): the rate limiter's count plus the rows
 * let through and not yet inserted. */
static inline int fl__replay_may_insert(const fl_replay_service_t *s, uint64_t n) {
    return fl_ratelimit_can_insert(&s->rl, s->insert_reserved + n);
}

/* The table's row count now. */
static inline uint64_t fl__replay_table_size(fl_replay_service_t *s) {
    fl_table_info_t ti;
    fl_table_info(s->table, &ti);
    return ti.size;
}

/* server_insert.c: fleet.Replay/Insert's handlers. */
extern const fl_rpc_stream_handler_t fl__replay_insert_handler;

/* The deterministic rounds of a service with `participants` (<= 0: none); freed by
 * fl__replay_rounds_free. The Round handler (fleet.Replay/Round). */
fl_status fl__replay_rounds_init(fl_replay_service_t *s, int64_t participants, fl_err_t *err);
void fl__replay_rounds_free(fl_replay_service_t *s);
fl_status fl__replay_round_handler(void *user, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply);
/* *t = CLOCK_MONOTONIC now + sec (the clock of the service's cv). */
void fl__replay_deadline_in(struct timespec *t, double sec);

/* The record of stream `id`, created on first use. acquire: for a live Insert call,
 * which binds itself to the record (release it with fl__replay_put_stream); a new record
 * then needs room under replay.max_streams (idle records are reclaimed to make it),
 * else NULL with FL_RESOURCE_EXHAUSTED in err. Without acquire (recovery, before the
 * service serves) the cap does not apply. NULL with FL_NO_MEMORY when out of memory. */
fl__stream_rec_t *fl__replay_get_stream(fl_replay_service_t *s, uint64_t id, int acquire, fl_err_t *err);
/* Ends a call's binding to its record (NULL is a no-op). */
void fl__replay_put_stream(fl_replay_service_t *s, fl__stream_rec_t *r);

/* Applies one decoded InsertRequest (its sequence and batch) to the table and to its
 * stream's record. This is the one place where an insert changes the table: the live
 * path and recovery from the write-ahead log both call it, so that replaying the log
 * gives the keys acknowledged before. The caller holds r->mu and, with the log on, the
 * insert mutex wal_mu, and has checked that sequence > r->last_seq (and the stream key
 * against r->key). stream_key binds a record that has none yet (0 leaves it unbound, as
 * for a log record written before keys existed). keys (b->count)
 * receives the batch's keys. prep: the batch already prepared by fl_table_prepare (the
 * live path with the log on, which prepares before taking the insert mutex), committed
 * here; NULL: fl_table_insert. On failure nothing changed (the table validates its whole
 * input first); the live path never logs a batch the table refuses, and an older log's
 * refused record is refused again on replay. */
fl_status fl__replay_apply_insert(fl_replay_service_t *s, fl__stream_rec_t *r, uint64_t sequence, uint64_t stream_key,
                                  const fl_wire_batch_t *b, fl_table_prep_t *prep, uint64_t *keys, fl_err_t *e);

/* Gives the service its table (s->table) for configuration tc: loaded from restore_path
 * when that is set (the rate limiter continues from its counters), else with the
 * write-ahead log on (wal) recovered from replay.checkpoint_dir (s->wal set, see
 * server.h), else empty. On failure err says why (not yet prefixed with the shard). */
fl_status fl__replay_open_table(fl_replay_service_t *s, const fl_table_config_t *tc, const char *restore_path, int wal,
                                fl_err_t *err);

/* A checkpoint to the default file with the log on: rotates the log, writes the table
 * and the stream records to path, then deletes the log segments the file covers. The
 * caller holds ckpt_mu. */
fl_status fl__replay_wal_checkpoint(fl_replay_service_t *s, const char *path, fl_table_save_info_t *si, fl_err_t *err);

#endif
