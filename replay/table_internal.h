/* table_internal: what the replay table's files share (replay/table.c: the ring, insert,
 * sample, priorities and checks; replay/table_checkpoint.c: the checkpoint format, save,
 * load and their validation; replay/select_*.c: the selectors of replay/selector.h).
 * Not for use outside replay/.
 *
 * The table's state, its row layout and the inline helpers on slots, sequence numbers
 * and liveness. Every helper that reads or changes the state below `mu` must be called
 * with `mu` held; the fields above it are immutable after create. */
#ifndef FL_REPLAY_TABLE_INTERNAL_H
#define FL_REPLAY_TABLE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/rng.h"
#include "common/status.h"
#include "replay/frames.h"
#include "replay/selector.h"
#include "replay/sumtree.h"
#include "replay/table.h"

/* The scalar columns at the start of every row; the chunk pointer (FL__ROW_CHUNK) and the
 * frame indices (FL__ROW_IDX: obs's stack frames, then next_obs's) follow. */
typedef struct {
    int32_t action;
    float reward;
    float discount;
    uint32_t times; /* times sampled (kept only with max_times_sampled) */
} fl__row_head_t;
#define FL__ROW_CHUNK sizeof(fl__row_head_t)
#define FL__ROW_IDX (FL__ROW_CHUNK + sizeof(fl_chunk_t *))

struct fl_table {
    fl_table_config_t cfg;        /* immutable after create */
    const fl_selector_ops_t *sel; /* cfg.selector's strategy (replay/selector.h) */
    size_t obs_bytes;
    fl_frames_layout_t lay;
    size_t row_bytes; /* head, chunk pointer and frame indices */
    size_t stride;    /* bytes per row (row_bytes padded) */
    uint64_t capacity;
    uint32_t mts; /* max_times_sampled, 0 = unlimited */

    pthread_mutex_t mu; /* guards everything below */
    uint64_t inserted;  /* next sequence number */
    uint64_t window;    /* min(inserted, capacity) */
    uint64_t size;      /* live items: window less removed */
    uint64_t sampled;
    uint64_t removed;
    uint64_t updates_applied;
    uint64_t updates_stale;
    uint64_t rebuilds;
    uint64_t since_rebuild; /* applied updates since the last rebuild */
    uint64_t draws_left;    /* mts: sum over sampleable live items of mts - times */
    uint64_t fifo_head;     /* fifo: no live item has a smaller sequence number */
    double max_priority;
    fl_rng_t rng;
    fl_sumtree_t *tree;           /* leaf s: (p + eps)^alpha of slot s, 0 if the slot is empty */
    uint8_t *rows;                /* (capacity, stride) */
    uint64_t *gone;               /* mts: (ceil(capacity / 64)) bit s: slot s's item was removed */
    uint64_t *live_list;          /* sel->live_list and mts: (capacity) the live slots, first `size` */
    uint64_t *live_pos;           /* sel->live_list and mts: (capacity) index of a live slot in live_list */
    uint64_t chunks, frames;      /* chunks referenced by rows of the window, and their frames */
    uint64_t chunk_bytes;         /* their allocation sizes */
    _Atomic uint64_t zstd_chunks; /* of those, compressed (a table restored from a checkpoint
                               written with another zstd_level may hold both kinds); changed
                               under the lock, read without it by sample's preparations */
};

/* Validates a configuration (see fl_table_create) and gives the bytes of one observation. */
fl_status fl__table_check_config(const fl_table_config_t *cfg, size_t *obs_bytes, fl_err_t *err);

/* Bytes of a row's head, chunk pointer and frame indices. */
static inline size_t fl__table_row_bytes(int stack) {
    return FL__ROW_IDX + 2 * (size_t)stack * sizeof(uint16_t);
}

/* A chunk that `rows` more slots point at (rows > 0). */
void fl__table_attach_chunk(fl_table_t *t, fl_chunk_t *c, uint64_t rows);

/* ---- slots, sequence numbers and liveness (all under the lock) ------------------------ */

static inline fl__row_head_t *fl__table_row(const fl_table_t *t, uint64_t slot) {
    return (fl__row_head_t *)(t->rows + (size_t)slot * t->stride);
}

static inline fl_chunk_t *fl__table_row_chunk(const fl_table_t *t, uint64_t slot) {
    fl_chunk_t *c;
    memcpy(&c, t->rows + (size_t)slot * t->stride + FL__ROW_CHUNK, sizeof(c));
    return c;
}

static inline uint16_t *fl__table_row_idx(const fl_table_t *t, uint64_t slot) {
    return (uint16_t *)(t->rows + (size_t)slot * t->stride + FL__ROW_IDX);
}

static inline int fl__table_slot_gone(const fl_table_t *t, uint64_t s) {
    return t->gone && ((t->gone[s / 64] >> (s % 64)) & 1);
}

/* The first sequence number of the window, and its slot. */
typedef struct {
    uint64_t seq;
    uint64_t slot;
} fl__window_t;

static inline fl__window_t fl__table_window_start(const fl_table_t *t) {
    fl__window_t w = {t->inserted - t->window, 0};
    w.slot = w.seq % t->capacity;
    return w;
}

/* The slot of a sequence number of the window. */
static inline uint64_t fl__table_seq_slot(const fl_table_t *t, fl__window_t w, uint64_t seq) {
    uint64_t s = w.slot + (seq - w.seq);
    return s >= t->capacity ? s - t->capacity : s;
}

/* The sequence number in a slot of the window. */
static inline uint64_t fl__table_slot_seq(const fl_table_t *t, fl__window_t w, uint64_t s) {
    return w.seq + (s >= w.slot ? s - w.slot : s + t->capacity - w.slot);
}

/* Removes live slot s from the dense list (call before size is decremented). */
static inline void fl__table_list_remove(fl_table_t *t, uint64_t s) {
    uint64_t i = t->live_pos[s], last = t->live_list[t->size - 1];
    t->live_list[i] = last;
    t->live_pos[last] = i;
}

/* Removes the live item in slot s after its last allowed draw. */
static inline void fl__table_remove_item(fl_table_t *t, uint64_t s) {
    t->gone[s / 64] |= UINT64_C(1) << (s % 64);
    if (t->live_list) fl__table_list_remove(t, s);
    t->size--;
    t->removed++;
    fl_sumtree_set(t->tree, s, 0.0);
}

/* Counts one draw of the live item in slot s (max_times_sampled only). */
static inline void fl__table_count_draw(fl_table_t *t, uint64_t s) {
    fl__row_head_t *h = fl__table_row(t, s);
    t->draws_left--;
    if (++h->times == t->mts) fl__table_remove_item(t, s);
}

#endif
