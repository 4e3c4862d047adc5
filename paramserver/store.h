/* store: the versioned parameter slice held by one paramserver shard.
 *
 * The store keeps the latest version of its slice [offset, offset + n) of the flat
 * parameter vector as an immutable, reference-counted snapshot. A snapshot carries the
 * serialized fleet.FetchResponse of its version (has_params = true, float32), built once,
 * and, from the first bfloat16 fetch of that version on, the bfloat16 response too
 * (built once, under the snapshot's own lock), so that the many fetches of one version
 * are answered by handing out those bytes, never by encoding again. A fetch takes a
 * reference under a mutex and reads without it, so every reader sees one complete
 * version while a newer one is being made.
 *
 * Geometry: the shard owns slice `shard_id` of `num_shards` (paramserver/shard.h) of a
 * vector whose length the first publish fixes (its `total`). A publish or push must
 * carry exactly that slice; with num_shards == 1 that is the whole vector.
 *
 * Versions: a publish must carry a version above the held one (0 when none) and at most
 * max_version_step above it, so that no publish can put the version where no later one
 * can pass it (a version near 2^64).
 *
 * Two modes (learner.mode):
 *   apex    a publish replaces the held version (versions must grow); pushes are refused.
 *   gorila  the first publish sets the initial parameters (and the optimizer starts over
 *           the slice); later publishes are refused. Each applied push runs one
 *           optimizer step (kernels/optim.h) on the live parameters and increments the
 *           version by one; the snapshot of a version is encoded lazily, by the first
 *           fetch that wants it. Staleness of a push = held version - based_on_version.
 *             drop  (max_staleness > 0) a push with staleness > max_staleness is not
 *                   applied and is counted as dropped.
 *             wait  stale-synchronous parallel: every applied push advances the pushing
 *                   learner's clock c_i (its applied pushes on this shard). After
 *                   applying a push from learner i the reply is held while
 *                     c_i - min{c_j : j < learners, c_j >= 1} > max_staleness,
 *                   i.e. the fast learner waits until the slowest learner that has
 *                   pushed at all is within max_staleness pushes of it (learners that
 *                   never pushed do not hold anyone), for at most wait_timeout_s; then
 *                   it is answered anyway (applied, wait_timed_out). The push itself
 *                   is never dropped.
 *           staleness_lr: the step of a push uses lr / max(1, staleness).
 *
 * Failures leave the store unchanged and explain themselves in err, naming the field:
 *   FL_FAILED_PRECONDITION  a version not newer than the held one (naming the held version
 *                           and the accepted range); a push in apex mode,
 *                           before the first publish or based on a future version; a
 *                           second publish in gorila mode
 *   FL_INVALID_ARGUMENT     a version more than max_version_step past the held one (naming
 *                           the held version and the accepted range), an empty slice or
 *                           one that is not this shard's (expected and
 *                           got named), a length different from the held one, a
 *                           non-finite value (its index), a learner out of range, a push
 *                           whose optimizer step would make a parameter or the optimizer's
 *                           state non-finite (finite gradients too large for float32: the
 *                           step is undone, the push neither applied nor counted)
 *   FL_NO_MEMORY            a snapshot or the optimizer could not be allocated
 *
 * Thread-safe: any number of threads may publish, push, fetch and read counters at once.
 * fl_param_store_stop releases every held reply (for shutdown). */
#ifndef FL_PARAMSERVER_STORE_H
#define FL_PARAMSERVER_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/optim.h"
#include "paramserver/staleness.h"

typedef struct fl_param_store fl_param_store_t;

/* One version of the slice. Read-only; valid until released. */
typedef struct fl_param_snapshot {
    uint64_t version;
    uint64_t offset, total; /* the slice is [offset, offset + n) of a total-element vector */
    size_t n;
    const uint8_t *values;   /* (n,) float32, little-endian; no alignment guaranteed */
    const uint8_t *response; /* serialized fleet.FetchResponse carrying this version */
    size_t response_len;
} fl_param_snapshot_t;

typedef struct fl_param_store_info {
    uint32_t shard_id;
    uint64_t version; /* 0 = nothing published */
    uint64_t offset, size, total;
    uint64_t publishes;           /* publishes applied */
    uint64_t fetches;             /* fetches answered */
    uint64_t fetches_with_params; /* of which returned a snapshot */
    double uptime_s;              /* since create */
    uint32_t num_shards;
    int gorila;
    uint64_t fetches_bf16; /* fetches answered with bfloat16 values */
    uint64_t pushes_applied, pushes_dropped, waits, wait_timeouts;
    uint64_t staleness_hist[FL_PARAM_STALENESS_BUCKETS]; /* applied and dropped pushes */
    uint64_t push_bytes;                                 /* request bytes of pushes (counted by the service) */
} fl_param_store_info_t;

typedef struct fl_param_store_opts {
    uint32_t shard_id;
    int num_shards;            /* paramserver.shards (>= 1) */
    int gorila;                /* 0 = apex */
    fl_optim_config_t optim;   /* gorila: the optimizer of the slice */
    int learners;              /* gorila: learner.count (pushes name a learner below it) */
    uint64_t max_staleness;    /* gorila: 0 = no bound */
    int stale_wait;            /* gorila: 0 = drop, 1 = wait */
    int staleness_lr;          /* gorila: lr / max(1, staleness) */
    double wait_timeout_s;     /* gorila, wait */
    uint64_t max_version_step; /* paramserver.max_version_step: a publish's version at most this past
                                  the held one (0 = no bound) */
} fl_param_store_opts_t;

/* The default of paramserver.max_version_step: 2^32. A learner publishes its own last
 * version + 1 (or, when a restarted learner finds a newer one held, that + 1); a jump
 * over more than one version happens only when a learner resumed from a checkpoint
 * publishes to a fresh parameter server: its checkpoint's version + 1, which stays
 * below 2^32 for any run of fewer than 2^32 publishes (years at learner.publish_every
 * = 1). */
#define FL_PARAM_DEFAULT_MAX_VERSION_STEP (UINT64_C(1) << 32)

/* Apex, one shard (the whole vector), shard id 0; gorila fields at the config defaults;
 * max_version_step FL_PARAM_DEFAULT_MAX_VERSION_STEP. */
void fl_param_store_opts_init(fl_param_store_opts_t *o);

fl_status fl_param_store_create(const fl_param_store_opts_t *o, fl_param_store_t **out, fl_err_t *err);
/* Frees the store; snapshots still referenced stay valid until released. No call may
 * be running (fl_param_store_stop first releases held replies). NULL is a no-op. */
void fl_param_store_destroy(fl_param_store_t *s);
/* Wakes every push reply held by the wait policy (answered with wait_timed_out) and
 * makes later waits return at once. Idempotent. */
void fl_param_store_stop(fl_param_store_t *s);

/* Publishes values (n float32 elements as little-endian bytes, any alignment) as
 * `version` of the slice [offset, offset + n) of a total-element vector. */
fl_status fl_param_store_publish(fl_param_store_t *s, uint64_t version, uint64_t offset, uint64_t total,
                                 const void *values, size_t n, fl_err_t *err);

typedef struct fl_param_push_outcome {
    int applied;        /* 0 when dropped as too stale */
    int waited;         /* wait policy: the reply was held */
    int wait_timed_out; /* ... until wait_timeout_s ran out (or the store stopped) */
    uint64_t version;   /* held after this push (and its wait) */
    uint64_t staleness; /* held version at arrival - based_on_version */
} fl_param_push_outcome_t;

/* Gorila: applies grads (n float32 as little-endian bytes, any alignment) for the slice
 * [offset, offset + n) of total, computed by `learner` from `based_on_version`. May
 * block (wait policy). */
fl_status fl_param_store_push(fl_param_store_t *s, uint32_t learner, uint64_t based_on_version, uint64_t offset,
                              uint64_t total, const void *grads, size_t n, fl_param_push_outcome_t *out, fl_err_t *err);

/* Counts one fetch. Returns a new reference to the held version's snapshot when the
 * held version is greater than if_newer_than (release it with fl_param_snapshot_release),
 * else NULL. *held_version (may be NULL) gets the version the answer is based on (0 =
 * none). In gorila mode this may encode the snapshot of a new version (once). NULL with
 * *held_version > if_newer_than means out of memory. */
const fl_param_snapshot_t *fl_param_store_fetch(fl_param_store_t *s, uint64_t if_newer_than, uint64_t *held_version);
/* The snapshot's bfloat16 FetchResponse (built on first use, once; thread-safe). Values
 * are rounded as fl_bf16_from_float does, except that a finite value beyond the largest
 * bfloat16 becomes the largest finite bfloat16 of its sign, not infinity.
 * FL_NO_MEMORY when it cannot be built. Valid while the snapshot is referenced. */
fl_status fl_param_snapshot_bf16(const fl_param_snapshot_t *snap, const uint8_t **response, size_t *len);
/* Drops a reference taken by fl_param_store_fetch. NULL is a no-op. */
void fl_param_snapshot_release(const fl_param_snapshot_t *snap);

/* Counters kept for the service. */
void fl_param_store_count_bf16(fl_param_store_t *s);
void fl_param_store_count_push_bytes(fl_param_store_t *s, uint64_t bytes);

/* ---- checkpoints (gorila; paramserver/checkpoint.h writes and reads the files) ----
 *
 * What a gorila shard needs to go on after a restart: a copy of its slice, of the
 * optimizer's state over it and of the version and counters. */
typedef struct fl_param_store_state {
    uint64_t version, offset, total;
    size_t n;
    float *params; /* (n) */
    float *optim;  /* (optim_size): the optimizer's slots, one after another; NULL for an empty slice */
    size_t optim_size;
    int64_t optim_steps;
    int learners;
    uint64_t *clocks; /* (learners) applied pushes per learner (the wait policy's clocks) */
    uint64_t publishes, pushes_applied, pushes_dropped, waits, wait_timeouts;
    uint64_t staleness_hist[FL_PARAM_STALENESS_BUCKETS];
} fl_param_store_state_t;

/* The options the store was created with. */
const fl_param_store_opts_t *fl_param_store_opts(const fl_param_store_t *s);
/* Copies the state under the store's lock (pushes wait only for the copy). *have = 0 and
 * nothing copied while nothing is published; FL_FAILED_PRECONDITION in apex mode;
 * FL_NO_MEMORY. Free with fl_param_store_state_free. */
fl_status fl_param_store_capture(fl_param_store_t *s, fl_param_store_state_t *out, int *have, fl_err_t *err);
void fl_param_store_state_free(fl_param_store_state_t *st); /* frees the arrays; NULL is a no-op */
/* Installs a captured state (the caller checked it against the config: the slice, the
 * optimizer's kind and sizes, learners) into a store that holds nothing yet:
 * FL_FAILED_PRECONDITION in apex mode or once something is held, FL_INVALID_ARGUMENT for
 * a slice that is not this shard's or arrays of the wrong size, FL_NO_MEMORY. After a
 * restore, a push based on a version newer than the held one (the versions the shard
 * lost since its checkpoint) is applied as a fresh one (staleness 0) and moves the held
 * version to based_on_version + 1 (within max_version_step), so that no client sees the
 * version go back. */
fl_status fl_param_store_restore(fl_param_store_t *s, const fl_param_store_state_t *in, fl_err_t *err);

/* The latest version (0 = none); lock-free. */
uint64_t fl_param_store_version(const fl_param_store_t *s);
void fl_param_store_info(fl_param_store_t *s, fl_param_store_info_t *out);

#endif
