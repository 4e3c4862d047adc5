/* frames: compact observation storage for the replay table.
 *
 * An observation is `stack` frames concatenated on its last axis, as the framestack
 * wrapper builds it (envs/core/wrappers.h): for an observation of shape (..., stack * C),
 * channel k * C + c holds channel c of frame k. Without frame stacking stack is 1 and a
 * frame is the whole observation. A frame is frame_bytes = obs_bytes / stack bytes, laid
 * out as (..., C).
 *
 * A chunk holds the distinct frames of one insert call: the observations s_t and
 * s_{t+n} of its transitions are split into frames, equal frames (byte for byte) are
 * stored once, and every transition keeps the chunk and 2 * stack frame indices (its
 * obs's frames, then its next_obs's). n-step transitions from one actor stream share
 * almost all of their frames: s_{t+n} of one transition is s_{t'} of another, and with
 * frame stacking consecutive observations share stack - 1 frames. A batch of B
 * transitions from one stream holds about B + n + stack - 1 distinct frames instead of
 * 2 * stack * B.
 *
 * With zstd_level > 0 every frame is compressed on its own (zstd at that level), so that
 * reading a transition decompresses only its own 2 * stack frames.
 *
 * Chunks are immutable once built and reference counted (atomically), so that a reader
 * may hold one without the table's lock (a checkpoint being written, a sample being
 * copied out). The table keeps `rows` (how many of its slots point at the chunk) under
 * its own lock and holds one reference while rows > 0.
 *
 * Thread-safety: building, reading and releasing chunks may happen on any threads;
 * fl_chunk_retain / fl_chunk_release are atomic. */
#ifndef FL_REPLAY_FRAMES_H
#define FL_REPLAY_FRAMES_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

/* Frames per chunk are indexed by uint16_t. */
#define FL_CHUNK_MAX_FRAMES 65535u
/* Upper bound of the frame stack of a table. */
#define FL_FRAMES_MAX_STACK 64

typedef struct fl_frames_layout {
    size_t obs_bytes;   /* one observation */
    int stack;          /* frames per observation, >= 1 */
    size_t frame_bytes; /* obs_bytes / stack */
    size_t inner;       /* bytes of one frame at one position of the leading axes: C * dtype size */
    size_t outer;       /* positions of the leading axes: frame_bytes / inner */
    int zstd_level;     /* 0: frames stored raw; 1 .. 19: each frame compressed at that level */
} fl_frames_layout_t;

/* Lays out obs_bytes-byte observations whose last axis (last_dim entries of elem_bytes)
 * holds `stack` frames. FL_INVALID_ARGUMENT naming the value when stack is out of range
 * or does not divide last_dim, or zstd_level is not 0 .. 19. */
fl_status fl_frames_layout_init(fl_frames_layout_t *l, size_t obs_bytes, size_t elem_bytes, int last_dim, int stack,
                                int zstd_level, fl_err_t *err);

typedef struct fl_chunk {
    atomic_uint_fast32_t refs; /* holders: the table (while rows > 0), snapshots, readers */
    uint64_t rows;             /* table slots pointing here (the table's lock guards it) */
    uint32_t nframes;
    uint32_t compressed; /* 1: zstd frames, offsets[] in front of the data */
    size_t data_bytes;   /* bytes of data[] */
    uint8_t data[];      /* raw: nframes * frame_bytes; compressed: uint32 offsets[nframes + 1]
                            (offsets into data[], the first one past the table), then the frames */
} fl_chunk_t;

/* Bytes the chunk occupies (header and data). */
size_t fl_chunk_alloc_bytes(const fl_chunk_t *c);

/* Builds the chunk of n >= 1 transitions (obs and next_obs: n observations each) and
 * writes, per transition i, idx[i * 2 * stack + k]: frame k of obs[i] (k < stack), then
 * the frames of next_obs[i]. n * 2 * stack must be at most FL_CHUNK_MAX_FRAMES. The
 * chunk comes back with refs 0 and rows 0. FL_NO_MEMORY, or FL_INTERNAL if zstd fails. */
fl_status fl_chunk_build(const fl_frames_layout_t *l, size_t n, const void *obs, const void *next_obs, uint16_t *idx,
                         fl_chunk_t **out, fl_err_t *err);

/* Rebuilds a chunk from its data (a checkpoint), validating all of it: nframes >= 1 and
 * at most FL_CHUNK_MAX_FRAMES, data_bytes matching (raw) or offsets increasing within
 * the data and every frame decompressing to exactly frame_bytes (compressed).
 * FL_INVALID_ARGUMENT naming what was wrong. refs and rows are 0. */
fl_status fl_chunk_from_data(const fl_frames_layout_t *l, uint32_t nframes, uint32_t compressed, const void *data,
                             size_t data_bytes, fl_chunk_t **out, fl_err_t *err);

static inline void fl_chunk_retain(fl_chunk_t *c, uint32_t k) {
    atomic_fetch_add(&c->refs, k);
}
/* Drops k references; frees the chunk when none is left. */
void fl_chunk_release(fl_chunk_t *c, uint32_t k);

/* Scratch for fl_frames_gather: a zstd decompression context and room for one
 * observation's frames. One per thread at a time. */
typedef struct fl_frames_reader fl_frames_reader_t;
fl_status fl_frames_reader_create(const fl_frames_layout_t *l, fl_frames_reader_t **out, fl_err_t *err);
void fl_frames_reader_destroy(fl_frames_reader_t *r);

/* Writes the observation made of frames idx[0 .. stack) of chunk c into out (obs_bytes).
 * r may be NULL when the chunk is not compressed. Returns 0, or -1 if the chunk is
 * compressed and r is NULL, or a compressed frame does not decompress to frame_bytes
 * (impossible for chunks built or validated here). */
int fl_frames_gather(const fl_frames_layout_t *l, const fl_chunk_t *c, const uint16_t *idx, fl_frames_reader_t *r,
                     void *out);

#endif
