/* wire: conversion between fleet.proto's TransitionBatch / Tensor messages and C columns.
 *
 * Decoding is where untrusted bytes meet the table, so it checks everything a table
 * insert relies on against the shard's signature (fl_wire_sig_t): every column holds
 * `count` values, obs and next_obs have the table's dtype and the shape
 * (count, *obs_shape), their data holds exactly count * obs_bytes bytes, actions lie in
 * [0, num_actions) (or are >= 0 when the number of actions is unknown), rewards are
 * finite (and, with a bound in the signature, |r| <= max_abs_reward), discounts lie in
 * [0, 1], priorities are finite and >= 0 (and <= max_priority with that bound), and with
 * FL_WIRE_FINITE_OBS every float32 observation value is finite. Every rejection is
 * FL_INVALID_ARGUMENT with a message that names the field, what it held and what was
 * expected, e.g.
 *   batch.obs.shape: got [50, 3], expected [50, 4] (count, 4)
 *
 * Ownership: decoding and encoding never copy columns. A decoded fl_wire_batch_t points
 * into the unpacked message (valid while the message lives); an encoded message points
 * at the caller's columns (which must outlive packing). Pure functions, thread-safe. */
#ifndef FL_REPLAY_WIRE_H
#define FL_REPLAY_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/obs.h"
#include "common/pbwalk.h"
#include "common/status.h"
#include "fleet.pb-c.h"

/* The observation signature of a table, plus its action count and the bounds on values
 * (replay.max_abs_reward, replay.max_priority; 0 = only finite). */
typedef struct fl_wire_sig {
    fl_obs_spec_t obs;     /* bytes of one observation: fl_obs_spec_bytes(&obs) */
    int num_actions;       /* > 0: actions must be < num_actions; 0: unknown */
    double max_abs_reward; /* > 0: every |reward| must be <= it */
    double max_priority;   /* > 0: every priority must be <= it */
} fl_wire_sig_t;

/* Columns of one batch. Decoded batches point into their message. */
typedef struct fl_wire_batch {
    size_t count;
    size_t obs_bytes;        /* bytes of one observation */
    const void *obs;         /* (count, obs_bytes) */
    const int32_t *actions;  /* (count) */
    const float *rewards;    /* (count) */
    const float *discounts;  /* (count) */
    const void *next_obs;    /* (count, obs_bytes) */
    const float *priorities; /* (count), or NULL when the batch carries none */
} fl_wire_batch_t;

/* Decode flags. */
#define FL_WIRE_NEED_PRIORITIES 1u /* the priorities column must hold count values (inserts) */
#define FL_WIRE_FINITE_OBS 2u      /* float32 observations must be finite (inserts; other dtypes always are) */

/* Checks a TransitionBatch (the field `batch` of its message; may be NULL, which is an
 * error) against sig and fills *out with views into it. Priorities are validated when
 * present; without FL_WIRE_NEED_PRIORITIES they may also be absent (out->priorities
 * NULL). FL_INVALID_ARGUMENT naming the field on any mismatch. */
fl_status fl_wire_decode_batch(const Fleet__TransitionBatch *m, const fl_wire_sig_t *sig, unsigned flags,
                               fl_wire_batch_t *out, fl_err_t *err);

/* The same for a reader that knows only the size of one observation (obs_bytes): the
 * tensors' dtype must be valid, their shape (count, ...) and their element count times
 * the dtype size obs_bytes per item; actions need only be >= 0. */
fl_status fl_wire_decode_batch_bytes(const Fleet__TransitionBatch *m, size_t obs_bytes, unsigned flags,
                                     fl_wire_batch_t *out, fl_err_t *err);

/* A TransitionBatch message with the storage its tensors need. */
typedef struct fl_wire_batch_msg {
    Fleet__TransitionBatch batch;
    Fleet__Tensor obs, next_obs;
    int64_t obs_shape[FL_OBS_MAX_RANK + 1];
    int64_t next_obs_shape[FL_OBS_MAX_RANK + 1];
} fl_wire_batch_msg_t;

/* Fills m so that m->batch describes b's columns with the observation signature obs (the
 * tensors' shapes are (count, *shape)). No copies: m points at b's columns, and
 * b->priorities == NULL leaves that column empty. m must not move after this call
 * (the message points into it). */
void fl_wire_encode_batch(fl_wire_batch_msg_t *m, const fl_obs_spec_t *obs, const fl_wire_batch_t *b);

/* A SampleResponse written with its observations in place. The two observation tensors
 * come first, at offsets fixed before the draw, so that the table gathers the sampled
 * observations straight into the reply (the largest part of it, never copied again);
 * the batch's other columns and the response's other fields follow once they are known.
 * The batch's and the tensors' length prefixes are 5-byte varints (longer than needed,
 * which every protobuf parser accepts: protobuf-c reads up to 5 bytes of a length, upb
 * 10), so that they can be written before the sizes of what follows them; fields come
 * out of field-number order (obs before count), which parsers accept too. */
typedef struct fl_wire_sample_reply {
    uint8_t *buf;            /* malloc'd; the caller frees it (or hands it to the RPC layer) */
    size_t cap;              /* its size */
    uint8_t *obs, *next_obs; /* where the draw writes the (count, obs_bytes) observations */
    size_t count, obs_bytes;
    size_t tail; /* offset of the rest (the batch's other columns, then the response's fields) */
} fl_wire_sample_reply_t;

/* Allocates r->buf for count observations of the signature obs and writes everything
 * before and between the observations. FL_NO_MEMORY, or FL_INVALID_ARGUMENT when count
 * is 0 or one tensor would pass 4 GB. */
fl_status fl_wire_sample_reply_begin(fl_wire_sample_reply_t *r, const fl_obs_spec_t *obs, size_t count, fl_err_t *err);
/* Writes the batch's other columns (actions, rewards, discounts: count each) and the
 * response's fields (resp, whose batch must be NULL) after the observations: the reply is
 * r->buf[0 .. *len). FL_INTERNAL if they do not fit (they always do). */
fl_status fl_wire_sample_reply_finish(fl_wire_sample_reply_t *r, const int32_t *actions, const float *rewards,
                                      const float *discounts, const Fleet__SampleResponse *resp, size_t *len,
                                      fl_err_t *err);

/* Where a Sample reply read in place goes: columns with room for `room` transitions. */
typedef struct fl_wire_sample_cols {
    size_t room, obs_bytes;  /* obs_bytes: bytes of one observation */
    uint8_t *obs, *next_obs; /* (room, obs_bytes) */
    int32_t *actions;
    float *rewards, *discounts, *weights;
    uint64_t *keys;
    double *probs;
} fl_wire_sample_cols_t;

/* What a Sample reply said besides its rows (SampleResponse's scalars). */
typedef struct fl_wire_sample_info {
    size_t count;
    uint64_t table_size, updates_applied, updates_stale;
    double total_priority, min_priority, sampling_mass;
    uint32_t shard_id;
} fl_wire_sample_info_t;

/* Reads a SampleResponse in the segments it arrived in (common/pbwalk.h) straight into
 * cols: each observation byte is copied once, from the reply to cols->obs / next_obs.
 * Checks what fl_wire_decode_batch_bytes checks (with obs_bytes), that the batch fits the
 * room, and that keys, weights and probabilities hold one value per transition. Fields in
 * any order, repeated scalars packed or not; a message field sent twice (which protobuf
 * would merge) is refused. FL_DATA_LOSS with a message naming the field on a bad reply;
 * the columns may then hold part of it. */
fl_status fl_wire_read_sample_reply(const fl_pb_seg_t *seg, size_t nseg, const fl_wire_sample_cols_t *cols,
                                    fl_wire_sample_info_t *info, fl_err_t *err);

/* Checks priorities given as |TD errors|: finite and >= 0. The message names
 * `field`[i]. */
fl_status fl_wire_check_priorities(const char *field, size_t n, const float *p, fl_err_t *err);
/* The same with an upper bound (max > 0; 0 = none): every value finite and in [0, max].
 * The message names the bound as replay.max_priority. */
fl_status fl_wire_check_priorities_max(const char *field, size_t n, const float *p, double max, fl_err_t *err);
/* The same for rewards: finite, and |r| <= max when max > 0 (replay.max_abs_reward). */
fl_status fl_wire_check_rewards(const char *field, size_t n, const float *r, double max, fl_err_t *err);
/* Index of the first non-finite value among n float32 (little-endian bytes, any
 * alignment), or n when all are finite. */
size_t fl_wire_first_non_finite(const void *values, size_t n);

#endif
