/* table: one shard's replay table, an in-process data structure: a ring of `capacity`
 * slots with FIFO eviction, a sum-tree over the priorities (replay/sumtree.h), the
 * observations stored as frame chunks in which each distinct frame of an insert is kept
 * once (replay/frames.h), and a selector (replay/selector.h). How an insert and a sample
 * go through it, how each selector draws and what runs under its lock are in
 * docs/design.md, "The life of an insert and of a sample"; its file in "The replay
 * checkpoint".
 *
 * Items have a fixed signature given at create: an observation of one dtype and shape
 * (obs_bytes = product of the shape * dtype size), and per item
 *   obs (obs_bytes), action (int32), reward (float32), discount (float32: gamma^n, 0 at a
 *   terminal), next_obs (obs_bytes).
 * Item seq lives in slot seq % capacity, so the table holds the items of the last
 * `capacity` insertions (the window), less those removed after max_times_sampled draws.
 *
 * Keys: every inserted item gets a uint64 key; the top 8 bits are the table's shard id,
 * the low 56 bits its insertion sequence number (0, 1, 2, ... per table). A key is live
 * iff its shard matches, inserted - window <= seq < inserted, and its item has not been
 * removed; once a slot is reused the old key never becomes live again. Operations on a
 * key that is not live (evicted, removed, from another shard, never issued) are skipped
 * and counted, so a stale priority update can never land on the item that reused its slot.
 *
 * Selectors (fl_table_config_t.selector): prioritized, P(i) = q_i / sum_j q_j over live
 * items with q_i = (p_i + priority_eps)^alpha; uniform; fifo (the oldest live item). What
 * sample returns under each is at fl_table_sample. Priorities are stored and updated the
 * same way for every selector.
 *
 * Ownership: the table copies every input (into its rows and chunks); sample copies
 * the items out into buffers the caller owns. Failure: every entry point validates all
 * of its input before changing anything, so a failed call leaves the table as it was,
 * and says what was wrong in `err`.
 * Thread-safety: every function may be called from any number of threads at once (one
 * mutex around the ring, the sum-tree, the counters and the sampling RNG).
 * fl_table_config and fl_table_obs_bytes read immutable fields and take no lock. */
#ifndef FL_REPLAY_TABLE_H
#define FL_REPLAY_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "common/obs.h"
#include "common/status.h"
#include "replay/frames.h"
#include "replay/selector.h"

#define FL_TABLE_KEY_SHARD_SHIFT 56
#define FL_TABLE_KEY_SEQ_MASK ((UINT64_C(1) << FL_TABLE_KEY_SHARD_SHIFT) - 1)

/* The shard id of a key (0 .. 255) and its sequence number within the shard. */
static inline int fl_table_key_shard(uint64_t key) {
    return (int)(key >> FL_TABLE_KEY_SHARD_SHIFT);
}
static inline uint64_t fl_table_key_seq(uint64_t key) {
    return key & FL_TABLE_KEY_SEQ_MASK;
}
static inline uint64_t fl_table_key_make(int shard, uint64_t seq) {
    return ((uint64_t)shard << FL_TABLE_KEY_SHARD_SHIFT) | (seq & FL_TABLE_KEY_SEQ_MASK);
}

/* Upper bound of fl_table_config_t.max_times_sampled. */
#define FL_TABLE_MAX_TIMES_SAMPLED 2147483647

typedef struct fl_table_config {
    uint64_t capacity;         /* items, >= 1 (any value) */
    fl_obs_spec_t obs;         /* element type and per-item shape of obs and next_obs
                                  (rank 0 .. FL_OBS_MAX_RANK, 0: a scalar) */
    double alpha;              /* priority exponent, finite, >= 0 (0: uniform) */
    double priority_eps;       /* added to |TD| before alpha, finite, >= 0 */
    int shard_id;              /* 0 .. 255, the top 8 bits of every key */
    uint64_t seed;             /* seeds the sampling RNG */
    fl_selector selector;      /* prioritized, uniform or fifo */
    int64_t max_times_sampled; /* 0: unlimited; 1 .. FL_TABLE_MAX_TIMES_SAMPLED: an
                                  item is removed once sampled that many times */
    uint64_t rebuild_every;    /* applied priority updates between full sum-tree
                                  rebuilds (fl_table_rebuild); 0: never */
    int frame_stack;           /* 1 .. FL_FRAMES_MAX_STACK: an observation is this many
                                  frames on its last axis (replay/frames.h); 1: none */
    int zstd_level;            /* 0: frames stored raw; 1 .. 19: each frame zstd-compressed */
} fl_table_config_t;

/* Ape-X defaults: capacity 2,000,000, alpha 0.6, priority_eps 1e-6, shard 0, seed 0,
 * selector prioritized, max_times_sampled 0 (unlimited), rebuild_every 2^20, frame_stack
 * 1, zstd_level 0; the caller still sets obs. */
void fl_table_config_init(fl_table_config_t *cfg);

typedef struct fl_table fl_table_t;

/* Validates cfg (FL_INVALID_ARGUMENT naming the field) and allocates the ring and the tree
 * (FL_NO_MEMORY). On failure *out is NULL. */
fl_status fl_table_create(const fl_table_config_t *cfg, fl_table_t **out, fl_err_t *err);
void fl_table_destroy(fl_table_t *t);

/* About how many bytes a full table of `capacity` transitions holds (fl_table_info's
 * storage_bytes once it is full), for observations of obs_bytes stacked frame_stack
 * deep, inserted per_insert consecutive n-step transitions of one env at a time: each
 * such run stores its distinct frames once (about per_insert + n_step + frame_stack - 1), so a transition costs a
 * little more than one frame, plus its row and its share of the sum tree. Uncompressed: zstd_level > 0 stores less. */
uint64_t fl_table_bytes_estimate(uint64_t capacity, size_t obs_bytes, int frame_stack, int per_insert, int n_step);

/* The configuration the table was created with. */
const fl_table_config_t *fl_table_config(const fl_table_t *t);
/* Bytes of one observation (and of one next_obs). */
size_t fl_table_obs_bytes(const fl_table_t *t);

/* Appends n items (columns; all required when n > 0):
 *   obs (n, obs_bytes), actions (n), rewards (n), discounts (n), next_obs (n, obs_bytes),
 *   priorities (n): |TD error| before eps and alpha.
 * keys_out (n) may be NULL. Keys of one call are consecutive. Inserting more than
 * capacity items in one call is allowed: the earliest are evicted by the later ones.
 * FL_INVALID_ARGUMENT, and nothing inserted, if a priority is negative or not finite, a
 * reward is not finite, or a discount is not in [0, 1]; the message names the index. */
fl_status fl_table_insert(fl_table_t *t, size_t n, const void *obs, const int32_t *actions, const float *rewards,
                          const float *discounts, const void *next_obs, const float *priorities, uint64_t *keys_out,
                          fl_err_t *err);

/* fl_table_insert in two steps, for a caller that must do something between the work on
 * the observations and the moment the items enter the table (the replay shard's
 * write-ahead log appends a record there, under a lock that orders log and table):
 *   fl_table_prepare validates everything and builds the frame chunks (no table lock,
 *   nothing changes; the same errors as fl_table_insert); the columns actions, rewards
 *   and discounts must stay valid until commit;
 *   fl_table_commit inserts the prepared items (keys as fl_table_insert) and frees the
 *   preparation; it cannot fail. fl_table_prep_free drops a preparation instead.
 * n = 0 prepares nothing to insert. */
typedef struct fl_table_prep fl_table_prep_t;
fl_status fl_table_prepare(fl_table_t *t, size_t n, const void *obs, const int32_t *actions, const float *rewards,
                           const float *discounts, const void *next_obs, const float *priorities, fl_table_prep_t **out,
                           fl_err_t *err);
void fl_table_commit(fl_table_prep_t *p, uint64_t *keys_out);
void fl_table_prep_free(fl_table_prep_t *p);

/* Draws B >= 1 items with the table's selector at importance exponent beta (finite,
 * >= 0) and writes, into caller-owned buffers:
 *   keys (B), probs (B): the probability with which the selector chose the item at that
 *   draw (prioritized: P(i), uniform: 1/N, fifo: 1), weights (B): w_i in (0, 1] (1 for
 *   uniform and fifo), obs (B, obs_bytes), actions (B), rewards (B), discounts (B),
 *   next_obs (B, obs_bytes).
 * Any output pointer may be NULL to skip that column. Prioritized: item j comes from
 * segment j. With max_times_sampled = m the draws of one call are taken in order and
 * count at once: an item never comes out more than m times in all, and is removed right
 * after its m-th draw. A prioritized draw that lands on an item removed earlier in the
 * same call is drawn again, from the items that remain, with probability q_i / (their
 * total); weights stay normalized by the smallest priority at the start of the call.
 * FL_FAILED_PRECONDITION, and nothing changed, if the table is empty, if (prioritized)
 * every priority is 0, or if (max_times_sampled) the live items can give fewer than B
 * more draws in all; FL_INVALID_ARGUMENT for B == 0 or a bad beta. */
fl_status fl_table_sample(fl_table_t *t, size_t B, double beta, uint64_t *keys, double *probs, float *weights,
                          void *obs, int32_t *actions, float *rewards, float *discounts, void *next_obs, fl_err_t *err);

/* Sets the priority of n items to priorities[i] (|TD errors|, before eps and alpha).
 * Keys that are not live are skipped and counted in info.updates_stale; if a key appears
 * twice the later entry wins. *applied (may be NULL) receives how many were applied.
 * FL_INVALID_ARGUMENT, and nothing applied, if a priority is negative or not finite. */
fl_status fl_table_update_priorities(fl_table_t *t, size_t n, const uint64_t *keys, const float *priorities,
                                     size_t *applied, fl_err_t *err);

typedef struct fl_table_info {
    uint64_t size; /* live items: the window min(inserted, capacity) less the
                      items removed from it */
    uint64_t capacity;
    uint64_t inserted;        /* items ever inserted (the next sequence number) */
    uint64_t sampled;         /* items ever returned by sample (B per call) */
    uint64_t removed;         /* items ever removed for reaching max_times_sampled */
    uint64_t updates_applied; /* priority updates applied */
    uint64_t updates_stale;   /* priority updates skipped: key not live */
    uint64_t rebuilds;        /* full sum-tree rebuilds (periodic and fl_table_rebuild) */
    double total_priority;    /* sum over live items of (p + eps)^alpha */
    double max_priority;      /* largest |TD| priority ever inserted or applied (before eps
                                 and alpha); 0 before the first insert */
    double min_priority;      /* smallest positive (p + eps)^alpha over live items; 0 if none */
    uint64_t chunks;          /* frame chunks held (one per insert call, see replay/frames.h) */
    uint64_t frames;          /* distinct frames they hold */
    uint64_t frame_bytes;     /* bytes they occupy (compressed when zstd_level > 0) */
    uint64_t storage_bytes;   /* everything the table holds: frame_bytes plus the rows, the
                                 sum-tree and the removal bookkeeping, sized for capacity */
    uint64_t row_bytes;       /* bytes of one slot's row (scalars, chunk pointer, frame indices) */
} fl_table_info_t;

void fl_table_info(fl_table_t *t, fl_table_info_t *info);

/* The sampling priority (p + eps)^alpha stored for `key`; FL_NOT_FOUND if the key is not
 * live. */
fl_status fl_table_priority(fl_table_t *t, uint64_t key, double *priority, fl_err_t *err);

/* Recomputes the sum-tree from its leaves now (O(capacity) under the lock); the table
 * also does this every rebuild_every applied priority updates. See replay/sumtree.h. */
void fl_table_rebuild(fl_table_t *t);

/* Full O(capacity) consistency check under the lock: counters agree (size = window less
 * removed items, the remaining draws of max_times_sampled), the sum-tree is consistent
 * (see fl_sumtree_verify), its total matches an independent sum of the live items'
 * priorities, and empty slots (past the window, or removed) hold priority 0. FL_INTERNAL
 * with a message otherwise. For tests and debugging. */
fl_status fl_table_verify(fl_table_t *t, fl_err_t *err);

/* ---- checkpoints ---------------------------------------------------------------------
 *
 * File format (version FL_TABLE_CKPT_VERSION, little-endian, no padding):
 *   header (FL_TABLE_CKPT_HEADER_BYTES):
 *     magic "FLRPLAY\0" (8), version u32, header length u32,
 *     config: capacity u64, selector u32 (its id, replay/selector.h), obs dtype u32, obs
 *       rank u32, obs shape u32 x4 (unused entries 0), shard_id u32, max_times_sampled
 *       i64, alpha f64, priority_eps f64, seed u64, rebuild_every u64, obs_bytes u64,
 *       frame_stack u32, zstd_level u32,
 *     counters: inserted, window, size, sampled, removed, updates_applied, updates_stale,
 *       rebuilds, since_rebuild, draws_left, fifo_head (u64 each), max_priority f64,
 *     sampling RNG state u64 x4
 *   payload, for the slots s = 0 .. window-1 that the window occupies:
 *     rows: per slot action i32, reward f32, discount f32, times sampled u32, the number
 *       of its chunk u64 (chunks numbered from 0 in insertion order), then its 2 *
 *       frame_stack frame indices u16 in that chunk (obs's frames, then next_obs's)
 *     priorities: per slot (p + eps)^alpha f64 (0 for a removed item)
 *     with max_times_sampled: the removed-slot bitmap, ceil(window / 64) u64
 *     with max_times_sampled and a selector that keeps a live list (uniform): the dense
 *       live list, size u64
 *     chunks: their count u64, then per chunk nframes u32, compressed u32 (0 or 1), data
 *       bytes u64 and the data (replay/frames.h: fl_chunk_t)
 *     extra section: its length u64, then that many bytes (the caller's; see
 *       fl_table_snapshot_write)
 *   trailer: CRC-32 (zlib) u32 of every byte before it.
 * A slot's generation (its item's sequence number) follows from the slot and `inserted`,
 * so keys issued before a save stay valid after a load.
 *
 * fl_table_save writes PATH.tmp.<pid>.<n>, flushes and fsyncs it, renames it over PATH
 * and fsyncs the folder, so PATH is always either the previous file or the new one. It
 * copies the state under the table's lock (a memcpy of the occupied rows and O(window)
 * leaf reads; the copy doubles the memory of the occupied rows for the duration of the
 * save) and writes the copy with the lock released, so inserts and samples wait only
 * for the copy. `info` (may be NULL) receives the live items and the bytes written.
 * FL_INTERNAL naming the file and the failed step on an I/O error (the temporary file
 * is removed), FL_NO_MEMORY if the copy does not fit. Thread-safe.
 *
 * fl_table_load reads PATH and validates all of it (magic, version, header length, the
 * configuration, the file size against the header, the CRC, then every counter, row,
 * priority and list entry against the others, as fl_table_verify does) before it
 * returns a table; on any failure *out is NULL and err names the file and what was
 * wrong: FL_NOT_FOUND for a missing file, FL_INVALID_ARGUMENT for a malformed one or a
 * signature mismatch. With `expected` not NULL, the file's capacity, observation
 * dtype/rank/shape, selector, max_times_sampled, alpha, priority_eps and shard_id must
 * equal it (FL_INVALID_ARGUMENT naming the field, the file's value and the configured
 * one); rebuild_every is taken from `expected` and the seed from the file (the RNG state
 * is restored, so sampling continues exactly as the saved table would have). With
 * `expected` NULL the file's configuration is used as is. */
#define FL_TABLE_CKPT_MAGIC "FLRPLAY"
#define FL_TABLE_CKPT_VERSION 2u
#define FL_TABLE_CKPT_MAX_EXTRA (64u << 20)
#define FL_TABLE_CKPT_HEADER_BYTES 240u

typedef struct fl_table_save_info {
    uint64_t items; /* live items saved */
    uint64_t bytes; /* file size */
} fl_table_save_info_t;

fl_status fl_table_save(fl_table_t *t, const char *path, fl_table_save_info_t *info, fl_err_t *err);
fl_status fl_table_load(const char *path, const fl_table_config_t *expected, fl_table_t **out, fl_err_t *err);

/* fl_table_save in two steps, for a caller that must pair the table's state with its
 * own (e.g. a write-ahead log position and per-stream records) and write both without
 * holding its own lock during the I/O:
 *   fl_table_snapshot_take copies the state under the table's lock (as fl_table_save);
 *   fl_table_snapshot_write writes that copy to `path` exactly as fl_table_save does,
 *   with `extra` (extra_len <= FL_TABLE_CKPT_MAX_EXTRA bytes; NULL / 0 for none) stored
 *   in the file's extra section, covered by the CRC. A snapshot may be written any
 *   number of times and is freed by fl_table_snapshot_free (NULL is a no-op).
 * fl_table_load_extra is fl_table_load that also returns the extra section: *extra
 * (malloc'd, the caller frees; NULL when the section is empty) and *extra_len. Either
 * pointer may be NULL. fl_table_load ignores the section. */
typedef struct fl_table_snapshot fl_table_snapshot_t;
fl_status fl_table_snapshot_take(fl_table_t *t, fl_table_snapshot_t **out, fl_err_t *err);
fl_status fl_table_snapshot_write(const fl_table_snapshot_t *sn, const char *path, const void *extra, size_t extra_len,
                                  fl_table_save_info_t *info, fl_err_t *err);
void fl_table_snapshot_free(fl_table_snapshot_t *sn);
fl_status fl_table_load_extra(const char *path, const fl_table_config_t *expected, fl_table_t **out, void **extra,
                              size_t *extra_len, fl_err_t *err);

#endif
