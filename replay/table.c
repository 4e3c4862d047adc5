/* table: ring storage (one row per slot) + a sum-tree over the slots, behind one mutex.
 *
 * A row is the slot's scalars (action, reward, discount, times sampled), a pointer to the
 * chunk of frames its observations were stored in (replay/frames.h) and the 2 * stack
 * indices of its obs's and next_obs's frames in that chunk, padded so that a row of up
 * to 64 bytes never straddles a cache line. Observations are built into chunks before
 * the lock is taken; a sampled batch is copied out of its chunks under the lock when it
 * is small and raw, and otherwise after the lock is released, the chunks held by a
 * reference meanwhile (so inserts never wait for decompression or large copies).
 *
 * Slot s holds the item whose sequence number seq has seq % capacity == s. The window is
 * the sequence numbers [inserted - window, inserted), window = min(inserted, capacity);
 * while the ring is filling, slots >= window are empty. With max_times_sampled, a bitmap
 * marks the slots of the window whose item was removed; such a slot holds priority 0 and
 * is cleared when an insert reuses it. Every entry point validates and converts its input
 * (|TD| -> (|TD| + eps)^alpha) before taking the lock, then applies it all at once, so a
 * failed call changes nothing and the critical sections stay short.
 *
 * Selectors: prioritized descends the sum-tree; uniform picks a window offset (or, when
 * items can be removed, an entry of a dense list of the live slots, kept with
 * swap-removal); fifo keeps a cursor on the oldest sequence number that may be live.
 * With max_times_sampled, draws_left counts the draws the live items can still give
 * (prioritized: only the items of positive priority), so that a batch that cannot be
 * completed is refused before anything changes. */
#include "replay/table.h"

#include <assert.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/fsync.h"
#include "common/rng.h"
#include "replay/frames.h"
#include "replay/sumtree.h"

/* Batches up to this many items use stack scratch space; larger ones allocate. */
#define SCRATCH_ITEMS 512
/* Rows fetched ahead of the one being copied out by sample. */
#define PREFETCH_AHEAD 16

/* The scalar columns at the start of every row; the chunk pointer (ROW_CHUNK) and the
 * frame indices (ROW_IDX: obs's stack frames, then next_obs's) follow. */
typedef struct {
    int32_t action;
    float reward;
    float discount;
    uint32_t times; /* times sampled (kept only with max_times_sampled) */
} row_head_t;
#define ROW_CHUNK sizeof(row_head_t)
#define ROW_IDX (ROW_CHUNK + sizeof(fl_chunk_t *))
/* Sampled batches of more observation bytes than this are copied out of their chunks
 * after the table's lock is released. */
#define GATHER_UNLOCKED_BYTES (64u << 10)

struct fl_table {
    fl_table_config_t cfg; /* immutable after create */
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
    fl_sumtree_t *tree;     /* leaf s: (p + eps)^alpha of slot s, 0 if the slot is empty */
    uint8_t *rows;          /* (capacity, stride) */
    uint64_t *gone;         /* mts: (ceil(capacity / 64)) bit s: slot s's item was removed */
    uint64_t *live_list;    /* uniform and mts: (capacity) the live slots, first `size` */
    uint64_t *live_pos;     /* uniform and mts: (capacity) index of a live slot in live_list */
    uint64_t chunks, frames; /* chunks referenced by rows of the window, and their frames */
    uint64_t chunk_bytes;   /* their allocation sizes */
    _Atomic uint64_t zstd_chunks; /* of those, compressed (a table restored from a checkpoint
                               written with another zstd_level may hold both kinds); changed
                               under the lock, read without it by sample's preparations */
};

const char *fl_selector_name(fl_selector s) {
    switch (s) {
    case FL_SELECTOR_PRIORITIZED: return "prioritized";
    case FL_SELECTOR_UNIFORM: return "uniform";
    case FL_SELECTOR_FIFO: return "fifo";
    default: return "invalid";
    }
}

fl_status fl_selector_parse(const char *name, fl_selector *out, fl_err_t *err) {
    static const fl_selector all[] = {FL_SELECTOR_PRIORITIZED, FL_SELECTOR_UNIFORM, FL_SELECTOR_FIFO};
    for (size_t i = 0; name && i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(name, fl_selector_name(all[i])) == 0) {
            *out = all[i];
            return FL_OK;
        }
    return fl_err_set(err, FL_INVALID_ARGUMENT, "selector '%s': expected prioritized, uniform or fifo",
                      name ? name : "(null)");
}

void fl_table_config_init(fl_table_config_t *cfg) {
    memset(cfg, 0, sizeof(*cfg));
    cfg->capacity = 2000000;
    cfg->obs.dtype = FL_DTYPE_INVALID;
    cfg->alpha = 0.6;
    cfg->priority_eps = 1e-6;
    cfg->shard_id = 0;
    cfg->seed = 0;
    cfg->selector = FL_SELECTOR_PRIORITIZED;
    cfg->max_times_sampled = 0;
    cfg->rebuild_every = UINT64_C(1) << 20;
    cfg->frame_stack = 1;
    cfg->zstd_level = 0;
}

/* Space for `count` elements of `size` bytes: `stack` if they fit in it, else heap memory
 * (NULL on failure or overflow); release with scratch_free. */
static void *scratch_get(void *stack, size_t stack_bytes, size_t count, size_t size) {
    if (count > SIZE_MAX / size) return NULL;
    return count * size <= stack_bytes ? stack : malloc(count * size);
}

static void scratch_free(void *p, void *stack) {
    if (p != stack) free(p);
}

/* Bytes of a row's head, chunk pointer and frame indices. */
static size_t row_bytes(int stack) { return ROW_IDX + 2 * (size_t)stack * sizeof(uint16_t); }

/* Bytes per row: row_bytes rounded up to a power of two when that is at most 64 (a row
 * never straddles a cache line), else to a multiple of 64. */
static size_t row_stride(size_t row) {
    if (row <= 64) {
        size_t s = 16;
        while (s < row) s *= 2;
        return s;
    }
    return (row + 63) / 64 * 64;
}

static fl_status check_config(const fl_table_config_t *cfg, size_t *obs_bytes, fl_err_t *err) {
    uint64_t max_capacity = FL_SUMTREE_MAX_CAPACITY;
    if (cfg->capacity < 1 || cfg->capacity > max_capacity)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table capacity %" PRIu64 ": expected 1 .. %" PRIu64,
                          cfg->capacity, max_capacity);
    const fl_obs_spec_t *obs = &cfg->obs;
    size_t elem = fl_dtype_size(obs->dtype);
    if (elem == 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table obs_dtype %d: expected a valid dtype", (int)obs->dtype);
    if (obs->rank < 0 || obs->rank > FL_OBS_MAX_RANK)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table obs_rank %d: expected 0 .. %d", obs->rank,
                          FL_OBS_MAX_RANK);
    size_t bytes = elem;
    for (int d = 0; d < obs->rank; d++) {
        int dim = obs->shape[d];
        if (dim < 1)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "table obs_shape[%d] = %d: expected >= 1", d, dim);
        if (bytes > SIZE_MAX / (size_t)dim)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "table obs_shape: observation size overflows");
        bytes *= (size_t)dim;
    }
    fl_frames_layout_t lay;
    fl_err_t e2;
    fl_err_init(&e2);
    if (fl_frames_layout_init(&lay, bytes, elem, obs->rank > 0 ? obs->shape[obs->rank - 1] : 1,
                              cfg->frame_stack, cfg->zstd_level, &e2) != FL_OK)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table %s", e2.msg);
    size_t stride = row_stride(row_bytes(cfg->frame_stack));
    if (stride > SIZE_MAX / cfg->capacity)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "table capacity %" PRIu64 " * obs_bytes %zu: storage size overflows", cfg->capacity,
                          bytes);
    if (!isfinite(cfg->alpha) || cfg->alpha < 0.0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table alpha %g: expected a finite value >= 0", cfg->alpha);
    if (!isfinite(cfg->priority_eps) || cfg->priority_eps < 0.0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table priority_eps %g: expected a finite value >= 0",
                          cfg->priority_eps);
    if (cfg->shard_id < 0 || cfg->shard_id > 255)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table shard_id %d: expected 0 .. 255", cfg->shard_id);
    if (cfg->selector != FL_SELECTOR_PRIORITIZED && cfg->selector != FL_SELECTOR_UNIFORM &&
        cfg->selector != FL_SELECTOR_FIFO)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "table selector %d: expected prioritized (%d), uniform (%d) or fifo (%d)", (int)cfg->selector,
                          FL_SELECTOR_PRIORITIZED, FL_SELECTOR_UNIFORM, FL_SELECTOR_FIFO);
    if (cfg->max_times_sampled < 0 || cfg->max_times_sampled > FL_TABLE_MAX_TIMES_SAMPLED)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "table max_times_sampled %" PRId64 ": expected 0 (unlimited) or 1 .. %d",
                          cfg->max_times_sampled, FL_TABLE_MAX_TIMES_SAMPLED);
    *obs_bytes = bytes;
    return FL_OK;
}

fl_status fl_table_create(const fl_table_config_t *cfg, fl_table_t **out, fl_err_t *err) {
    *out = NULL;
    size_t obs_bytes = 0;
    FL_TRY(check_config(cfg, &obs_bytes, err));

    fl_status s = FL_OK;
    fl_table_t *t = calloc(1, sizeof(*t));
    if (!t) return fl_err_set(err, FL_NO_MEMORY, "table: cannot allocate");
    t->cfg = *cfg;
    t->obs_bytes = obs_bytes;
    {
        fl_err_t e2;
        fl_err_init(&e2);
        (void)fl_frames_layout_init(&t->lay, obs_bytes, fl_dtype_size(cfg->obs.dtype),
                                    cfg->obs.rank > 0 ? cfg->obs.shape[cfg->obs.rank - 1] : 1, cfg->frame_stack,
                                    cfg->zstd_level, &e2); /* checked by check_config */
    }
    t->row_bytes = row_bytes(cfg->frame_stack);
    t->stride = row_stride(t->row_bytes);
    t->capacity = cfg->capacity;
    t->mts = (uint32_t)cfg->max_times_sampled;
    fl_rng_init(&t->rng, cfg->seed);
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        return fl_err_set(err, FL_INTERNAL, "table: cannot initialize mutex");
    }
    if ((s = fl_sumtree_create(cfg->capacity, &t->tree, err)) != FL_OK) goto fail;

    size_t cap = (size_t)cfg->capacity;
    t->rows = fl__replay_alloc_big(cap * t->stride);
    int ok = t->rows != NULL;
    if (t->mts > 0) {
        t->gone = calloc((cap + 63) / 64, sizeof(uint64_t));
        ok = ok && t->gone;
        if (cfg->selector == FL_SELECTOR_UNIFORM) {
            t->live_list = fl__replay_alloc_big(cap * sizeof(uint64_t));
            t->live_pos = fl__replay_alloc_big(cap * sizeof(uint64_t));
            ok = ok && t->live_list && t->live_pos;
        }
    }
    if (!ok) {
        s = fl_err_set(err, FL_NO_MEMORY, "table: cannot allocate storage for %" PRIu64 " items of %zu bytes",
                       cfg->capacity, t->stride);
        goto fail;
    }
    *out = t;
    return FL_OK;

fail:
    fl_table_destroy(t);
    return s;
}

static inline fl_chunk_t *row_chunk(const fl_table_t *t, uint64_t slot);
static void detach_chunk(fl_table_t *t, fl_chunk_t *c, uint64_t rows);

void fl_table_destroy(fl_table_t *t) {
    if (!t) return;
    if (t->rows) /* one release per chunk: walk the window's runs of equal chunks */
        for (uint64_t s = 0; s < t->window;) {
            fl_chunk_t *c = row_chunk(t, s);
            uint64_t e = s + 1;
            while (e < t->window && row_chunk(t, e) == c) e++;
            if (c) detach_chunk(t, c, e - s);
            s = e;
        }
    fl_sumtree_destroy(t->tree);
    free(t->rows);
    free(t->gone);
    free(t->live_list);
    free(t->live_pos);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

const fl_table_config_t *fl_table_config(const fl_table_t *t) { return &t->cfg; }

size_t fl_table_obs_bytes(const fl_table_t *t) { return t->obs_bytes; }

/* (p + eps)^alpha, with the common exponents done without pow. */
static inline double sampling_priority(double p_eps, double alpha) {
    if (alpha == 1.0) return p_eps;
    if (alpha == 0.5) return sqrt(p_eps);
    if (alpha == 0.0) return 1.0;
    return pow(p_eps, alpha);
}

/* Checks n |TD| priorities (finite, >= 0) and writes (p + eps)^alpha to q and their max
 * to *max_p. */
static fl_status convert_priorities(const fl_table_t *t, size_t n, const float *priorities, double *q,
                                    double *max_p, fl_err_t *err) {
    double mx = 0.0;
    const double eps = t->cfg.priority_eps, alpha = t->cfg.alpha;
    for (size_t i = 0; i < n; i++) {
        float p = priorities[i];
        if (!isfinite(p) || p < 0.0f)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "priorities[%zu] = %g: expected a finite value >= 0", i,
                              (double)p);
        q[i] = sampling_priority((double)p + eps, alpha);
        if (p > mx) mx = p;
    }
    *max_p = mx;
    return FL_OK;
}

/* ---- slots, sequence numbers and liveness (all under the lock) ------------------------ */

static inline row_head_t *row_at(const fl_table_t *t, uint64_t slot) {
    return (row_head_t *)(t->rows + (size_t)slot * t->stride);
}

static inline fl_chunk_t *row_chunk(const fl_table_t *t, uint64_t slot) {
    fl_chunk_t *c;
    memcpy(&c, t->rows + (size_t)slot * t->stride + ROW_CHUNK, sizeof(c));
    return c;
}

static inline uint16_t *row_idx(const fl_table_t *t, uint64_t slot) {
    return (uint16_t *)(t->rows + (size_t)slot * t->stride + ROW_IDX);
}

/* A chunk that `rows` more slots point at (rows > 0). */
static void attach_chunk(fl_table_t *t, fl_chunk_t *c, uint64_t rows) {
    if (c->rows == 0) {
        fl_chunk_retain(c, 1);
        t->chunks++;
        t->frames += c->nframes;
        t->chunk_bytes += fl_chunk_alloc_bytes(c);
        t->zstd_chunks += c->compressed;
    }
    c->rows += rows;
}

/* `rows` slots no longer point at c; the table lets go of it with the last one. */
static void detach_chunk(fl_table_t *t, fl_chunk_t *c, uint64_t rows) {
    c->rows -= rows;
    if (c->rows == 0) {
        t->chunks--;
        t->frames -= c->nframes;
        t->chunk_bytes -= fl_chunk_alloc_bytes(c);
        t->zstd_chunks -= c->compressed;
        fl_chunk_release(c, 1);
    }
}

static inline int slot_gone(const fl_table_t *t, uint64_t s) {
    return t->gone && ((t->gone[s / 64] >> (s % 64)) & 1);
}

/* The first sequence number of the window, and its slot. */
typedef struct {
    uint64_t seq;
    uint64_t slot;
} window_t;

static inline window_t window_start(const fl_table_t *t) {
    window_t w = {t->inserted - t->window, 0};
    w.slot = w.seq % t->capacity;
    return w;
}

/* The slot of a sequence number of the window. */
static inline uint64_t seq_slot(const fl_table_t *t, window_t w, uint64_t seq) {
    uint64_t s = w.slot + (seq - w.seq);
    return s >= t->capacity ? s - t->capacity : s;
}

/* The sequence number in a slot of the window. */
static inline uint64_t slot_seq(const fl_table_t *t, window_t w, uint64_t s) {
    return w.seq + (s >= w.slot ? s - w.slot : s + t->capacity - w.slot);
}

/* Whether key names a live item; if so, *slot receives its slot. */
static inline int key_live(const fl_table_t *t, window_t w, uint64_t key, uint64_t *slot) {
    uint64_t seq = fl_table_key_seq(key);
    if (fl_table_key_shard(key) != t->cfg.shard_id || seq >= t->inserted || seq < w.seq) return 0;
    *slot = seq_slot(t, w, seq);
    return !slot_gone(t, *slot);
}

/* Whether an item of sampling priority q counts towards draws_left. */
static inline int sampleable(const fl_table_t *t, double q) {
    return t->cfg.selector != FL_SELECTOR_PRIORITIZED || q > 0.0;
}

/* Appends slot s to the dense list (call before size is incremented). */
static inline void list_add(fl_table_t *t, uint64_t s) {
    t->live_pos[s] = t->size;
    t->live_list[t->size] = s;
}

/* Removes live slot s from the dense list (call before size is decremented). */
static inline void list_remove(fl_table_t *t, uint64_t s) {
    uint64_t i = t->live_pos[s], last = t->live_list[t->size - 1];
    t->live_list[i] = last;
    t->live_pos[last] = i;
}

/* Removes the live item in slot s after its last allowed draw. */
static void remove_item(fl_table_t *t, uint64_t s) {
    t->gone[s / 64] |= UINT64_C(1) << (s % 64);
    if (t->live_list) list_remove(t, s);
    t->size--;
    t->removed++;
    fl_sumtree_set(t->tree, s, 0.0);
}

/* Counts one draw of the live item in slot s (max_times_sampled only). */
static inline void count_draw(fl_table_t *t, uint64_t s) {
    row_head_t *h = row_at(t, s);
    t->draws_left--;
    if (++h->times == t->mts) remove_item(t, s);
}

/* ---- insert ------------------------------------------------------------------------- */

/* Stores rows [row, row + m) of the input columns into slots [slot, slot + m), retiring
 * whatever live items those slots held. Row r's observations are in
 * chunks[(r - base) / piece] at frame indices idx[r * 2 * stack ...]. */
static void store_rows(fl_table_t *t, uint64_t slot, size_t row, size_t m, const int32_t *actions,
                       const float *rewards, const float *discounts, fl_chunk_t *const *chunks, size_t base,
                       size_t piece, const uint16_t *idx, const double *q) {
    const size_t per = 2 * (size_t)t->lay.stack;
    int full = t->window == t->capacity;
    if (t->mts > 0) {
        for (size_t k = 0; k < m; k++) {
            uint64_t s = slot + k;
            int old_live = (full || s < t->window) && !slot_gone(t, s);
            if (old_live) {
                row_head_t *h = row_at(t, s);
                if (sampleable(t, fl_sumtree_get(t->tree, s))) t->draws_left -= t->mts - h->times;
                t->size--; /* the new item takes the list entry over */
            } else {
                t->gone[s / 64] &= ~(UINT64_C(1) << (s % 64));
                if (t->live_list) list_add(t, s);
            }
            t->size++;
            if (sampleable(t, q[row + k])) t->draws_left += t->mts;
        }
    }
    /* Let go of the chunks the slots pointed at, one detach per run of equal chunks. */
    for (size_t k = 0; k < m;) {
        uint64_t s = slot + k;
        if (!(full || s < t->window)) break; /* the slots from here on were never filled */
        fl_chunk_t *c = row_chunk(t, s);
        size_t e = k + 1;
        while (e < m && (full || slot + e < t->window) && row_chunk(t, slot + e) == c) e++;
        detach_chunk(t, c, e - k);
        k = e;
    }
    for (size_t k = 0; k < m; k++) {
        size_t r = row + k;
        uint8_t *dst = (uint8_t *)row_at(t, slot + k);
        row_head_t h = {actions[r], rewards[r], discounts[r], 0};
        fl_chunk_t *c = chunks[(r - base) / piece];
        memcpy(dst, &h, sizeof(h));
        memcpy(dst + ROW_CHUNK, &c, sizeof(c));
        memcpy(dst + ROW_IDX, idx + r * per, per * sizeof(uint16_t));
    }
    for (size_t k = 0; k < m;) { /* attach per chunk */
        size_t p = (row + k - base) / piece;
        size_t end = base + (p + 1) * piece - row;
        if (end > m) end = m;
        attach_chunk(t, chunks[p], end - k);
        k = end;
    }
    fl_sumtree_set_range(t->tree, slot, m, q + row);
}

/* Transitions per chunk: every frame index fits in 16 bits. */
static size_t chunk_piece(const fl_table_t *t) { return FL_CHUNK_MAX_FRAMES / (2 * (size_t)t->lay.stack); }

/* A validated insert whose observations are already in chunks (fl_table_prepare). */
struct fl_table_prep {
    fl_table_t *t;
    size_t n, skip, m, piece, npieces;
    const int32_t *actions; /* the caller's columns, valid until commit */
    const float *rewards, *discounts;
    double *q;             /* (n) sampling priorities */
    double max_p;
    uint16_t *idx;         /* (n, 2 stack) frame indices */
    fl_chunk_t **chunks;   /* (npieces) */
};

void fl_table_prep_free(fl_table_prep_t *p) {
    if (!p) return;
    if (p->chunks)
        for (size_t i = 0; i < p->npieces; i++) free(p->chunks[i]); /* never shared before commit */
    free(p->q);
    free(p->idx);
    free(p->chunks);
    free(p);
}

fl_status fl_table_prepare(fl_table_t *t, size_t n, const void *obs, const int32_t *actions, const float *rewards,
                           const float *discounts, const void *next_obs, const float *priorities,
                           fl_table_prep_t **out, fl_err_t *err) {
    *out = NULL;
    const char *missing = !obs ? "obs" : !actions ? "actions" : !rewards ? "rewards" : !discounts ? "discounts"
                        : !next_obs ? "next_obs" : !priorities ? "priorities" : NULL;
    if (n > 0 && missing) return fl_err_set(err, FL_INVALID_ARGUMENT, "insert: %s is NULL for %zu items", missing, n);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(rewards[i]))
            return fl_err_set(err, FL_INVALID_ARGUMENT, "rewards[%zu] = %g: expected a finite value", i,
                              (double)rewards[i]);
        if (!(discounts[i] >= 0.0f && discounts[i] <= 1.0f))
            return fl_err_set(err, FL_INVALID_ARGUMENT, "discounts[%zu] = %g: expected a value in [0, 1]", i,
                              (double)discounts[i]);
    }
    fl_table_prep_t *p = calloc(1, sizeof *p);
    if (!p) return fl_err_set(err, FL_NO_MEMORY, "insert: out of memory");
    p->t = t;
    p->n = n;
    p->actions = actions;
    p->rewards = rewards;
    p->discounts = discounts;
    /* Rows that the same call would overwrite again are never stored. */
    p->skip = n > t->capacity ? n - (size_t)t->capacity : 0;
    p->m = n - p->skip;
    const size_t per = 2 * (size_t)t->lay.stack;
    p->piece = chunk_piece(t);
    p->npieces = (p->m + p->piece - 1) / p->piece;
    p->q = malloc((n ? n : 1) * sizeof(double));
    p->idx = malloc((n ? n : 1) * per * sizeof(uint16_t));
    p->chunks = calloc(p->npieces ? p->npieces : 1, sizeof(fl_chunk_t *));
    fl_status s = FL_OK;
    if (!p->q || !p->idx || !p->chunks) {
        s = fl_err_set(err, FL_NO_MEMORY, "insert: cannot allocate scratch for %zu items", n);
        goto fail;
    }
    if ((s = convert_priorities(t, n, priorities, p->q, &p->max_p, err)) != FL_OK) goto fail;
    /* The observations go into chunks: rows [skip, n) as pieces of at most `piece` rows,
     * chunks[k] holding rows skip + [k * piece, (k + 1) * piece). */
    for (size_t k = 0; k < p->npieces; k++) {
        size_t r0 = p->skip + k * p->piece, cnt = p->m - k * p->piece < p->piece ? p->m - k * p->piece : p->piece;
        const uint8_t *o = (const uint8_t *)obs + r0 * t->obs_bytes;
        const uint8_t *no = (const uint8_t *)next_obs + r0 * t->obs_bytes;
        if ((s = fl_chunk_build(&t->lay, cnt, o, no, p->idx + r0 * per, &p->chunks[k], err)) != FL_OK) goto fail;
    }
    *out = p;
    return FL_OK;
fail:
    fl_table_prep_free(p);
    return s;
}

void fl_table_commit(fl_table_prep_t *p, uint64_t *keys_out) {
    fl_table_t *t = p->t;
    const size_t n = p->n, m = p->m, skip = p->skip;
    if (n > 0) {
        pthread_mutex_lock(&t->mu);
        uint64_t first_seq = t->inserted;
        uint64_t slot = (first_seq + skip) % t->capacity;
        size_t run = (size_t)(t->capacity - slot) < m ? (size_t)(t->capacity - slot) : m;
        store_rows(t, slot, skip, run, p->actions, p->rewards, p->discounts, p->chunks, skip, p->piece, p->idx, p->q);
        if (run < m)
            store_rows(t, 0, skip + run, m - run, p->actions, p->rewards, p->discounts, p->chunks, skip, p->piece,
                       p->idx, p->q);
        t->inserted += n;
        t->window = t->inserted < t->capacity ? t->inserted : t->capacity;
        if (t->mts == 0) t->size = t->window;
        if (p->max_p > t->max_priority) t->max_priority = p->max_p;
        pthread_mutex_unlock(&t->mu);
        if (keys_out)
            for (size_t i = 0; i < n; i++) keys_out[i] = fl_table_key_make(t->cfg.shard_id, first_seq + i);
    }
    free(p->chunks); /* the table holds them now */
    p->chunks = NULL;
    fl_table_prep_free(p);
}

fl_status fl_table_insert(fl_table_t *t, size_t n, const void *obs, const int32_t *actions,
                          const float *rewards, const float *discounts, const void *next_obs,
                          const float *priorities, uint64_t *keys_out, fl_err_t *err) {
    if (n == 0) return FL_OK;
    fl_table_prep_t *p = NULL;
    FL_TRY(fl_table_prepare(t, n, obs, actions, rewards, discounts, next_obs, priorities, &p, err));
    fl_table_commit(p, keys_out);
    return FL_OK;
}

/* ---- sample ------------------------------------------------------------------------- */

/* Prioritized: B stratified draws; with max_times_sampled, a draw that lands on an item
 * removed earlier in this call is drawn again from what remains. */
static void select_prioritized(fl_table_t *t, size_t B, uint64_t *slots, double *q, double *probs) {
    double total = fl_sumtree_total(t->tree);
    fl_sumtree_sample_stratified(t->tree, &t->rng, B, slots, q);
    if (t->mts == 0) {
        if (probs)
            for (size_t j = 0; j < B; j++) probs[j] = q[j] / total;
        return;
    }
    for (size_t j = 0; j < B; j++) {
        double tot = total;
        if (slot_gone(t, slots[j])) {
            tot = fl_sumtree_total(t->tree);
            slots[j] = fl_sumtree_find(t->tree, fl_rng_double(&t->rng) * tot);
        }
        q[j] = fl_sumtree_get(t->tree, slots[j]);
        if (probs) probs[j] = q[j] / tot;
        count_draw(t, slots[j]);
    }
}

/* Uniform: B independent draws over the live items. */
static void select_uniform(fl_table_t *t, size_t B, uint64_t *slots, double *q, double *probs) {
    window_t w = window_start(t);
    for (size_t j = 0; j < B; j++) {
        if (t->live_list) {
            slots[j] = t->live_list[fl_rng_below(&t->rng, t->size)];
        } else {
            uint64_t s = w.slot + fl_rng_below(&t->rng, t->window);
            slots[j] = s >= t->capacity ? s - t->capacity : s;
        }
        q[j] = fl_sumtree_get(t->tree, slots[j]);
        if (probs) probs[j] = 1.0 / (double)t->size;
        if (t->mts > 0) count_draw(t, slots[j]);
    }
}

/* FIFO: every draw is the oldest live item. */
static void select_fifo(fl_table_t *t, size_t B, uint64_t *slots, double *q, double *probs) {
    window_t w = window_start(t);
    for (size_t j = 0; j < B; j++) {
        if (t->fifo_head < w.seq) t->fifo_head = w.seq;
        uint64_t s = seq_slot(t, w, t->fifo_head);
        while (slot_gone(t, s)) {
            t->fifo_head++;
            s = s + 1 == t->capacity ? 0 : s + 1;
        }
        slots[j] = s;
        q[j] = fl_sumtree_get(t->tree, s);
        if (probs) probs[j] = 1.0;
        if (t->mts > 0) count_draw(t, s);
    }
}

fl_status fl_table_sample(fl_table_t *t, size_t B, double beta, uint64_t *keys, double *probs,
                          float *weights, void *obs, int32_t *actions, float *rewards,
                          float *discounts, void *next_obs, fl_err_t *err) {
    if (B == 0) return fl_err_set(err, FL_INVALID_ARGUMENT, "sample: batch size 0, expected >= 1");
    if (!isfinite(beta) || beta < 0.0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "sample: beta %g, expected a finite value >= 0", beta);
    fl_status s = FL_OK;
    void *held = NULL; /* unlocked copy: (B) chunk pointers, then (B, 2 * stack) frame indices */
    fl_frames_reader_t *rd = NULL; /* decompressor, when the table may hold compressed chunks */
    uint64_t slot_stack[SCRATCH_ITEMS];
    double q_stack[SCRATCH_ITEMS];
    uint64_t *slots = scratch_get(slot_stack, sizeof(slot_stack), B, sizeof(uint64_t)); /* (B) */
    double *q = scratch_get(q_stack, sizeof(q_stack), B, sizeof(double));              /* (B) */
    if (!slots || !q) {
        s = fl_err_set(err, FL_NO_MEMORY, "sample: cannot allocate scratch for %zu items", B);
        goto done;
    }
    /* Everything a copy after the lock may need is allocated before any draw, so that a
     * lack of memory never costs draws (max_times_sampled) or returns a partial batch.
     * Compressed chunks appear only through inserts with zstd_level > 0 or a load. */
    const size_t S_ = (size_t)t->lay.stack;
    if (obs || next_obs) {
        held = malloc(B * (sizeof(fl_chunk_t *) + 2 * S_ * sizeof(uint16_t)));
        fl_err_t e2;
        fl_err_init(&e2);
        if (!held || ((t->lay.zstd_level > 0 || atomic_load(&t->zstd_chunks) > 0) &&
                      fl_frames_reader_create(&t->lay, &rd, &e2) != FL_OK)) {
            s = fl_err_set(err, FL_NO_MEMORY, "sample: cannot allocate room to copy %zu items out", B);
            goto done;
        }
    }

    pthread_mutex_lock(&t->mu);
    double total = fl_sumtree_total(t->tree);
    double qmin = fl_sumtree_min(t->tree);
    int prioritized = t->cfg.selector == FL_SELECTOR_PRIORITIZED;
    if (t->size == 0 || (prioritized && !(total > 0.0)) || (t->mts > 0 && t->draws_left < B)) {
        uint64_t size = t->size, left = t->draws_left;
        pthread_mutex_unlock(&t->mu);
        if (size == 0)
            s = fl_err_set(err, FL_FAILED_PRECONDITION, "sample: the table is empty");
        else if (prioritized && !(total > 0.0))
            s = fl_err_set(err, FL_FAILED_PRECONDITION, "sample: all %" PRIu64 " items have priority 0", size);
        else
            s = fl_err_set(err, FL_FAILED_PRECONDITION,
                           "sample: the live items can give %" PRIu64 " more draws (max_times_sampled %u), %zu asked",
                           left, t->mts, B);
        goto done;
    }
    /* Keys and rows are read after the draws: a removed item keeps its row and its place
     * in the window until an insert reuses the slot, which cannot happen under the lock. */
    window_t w = window_start(t);
    switch (t->cfg.selector) {
    case FL_SELECTOR_PRIORITIZED: select_prioritized(t, B, slots, q, probs); break;
    case FL_SELECTOR_UNIFORM: select_uniform(t, B, slots, q, probs); break;
    case FL_SELECTOR_FIFO: select_fifo(t, B, slots, q, probs); break;
    }
    if (keys)
        for (size_t j = 0; j < B; j++) keys[j] = fl_table_key_make(t->cfg.shard_id, slot_seq(t, w, slots[j]));
    const size_t ob = t->obs_bytes, S = (size_t)t->lay.stack;
    uint8_t *obs_out = obs, *next_out = next_obs;
    int want_obs = obs_out || next_out;
    /* Large or compressed batches are copied out after the lock is released: each row's
     * chunk is held by a reference (taken here, dropped below) and its frame indices are
     * kept in `held` (the slot itself may be reused meanwhile). */
    const int need_reader = t->zstd_chunks > 0; /* some chunk is compressed */
    const int unlocked = want_obs && (need_reader || 2 * ob * B > GATHER_UNLOCKED_BYTES);
    if (want_obs || actions || rewards || discounts) {
        /* Two random reads per item (its row, then its frames in a chunk): rows are
         * fetched 2 * PREFETCH_AHEAD items ahead, their frames PREFETCH_AHEAD ahead. */
        const int raw = want_obs && !unlocked;
        const size_t fb = t->lay.frame_bytes;
        for (size_t j = 0; j < B; j++) {
            if (j + 2 * PREFETCH_AHEAD < B) __builtin_prefetch(row_at(t, slots[j + 2 * PREFETCH_AHEAD]));
            if (raw && j + PREFETCH_AHEAD < B) {
                const uint8_t *ra = (const uint8_t *)row_at(t, slots[j + PREFETCH_AHEAD]);
                const fl_chunk_t *ca;
                memcpy(&ca, ra + ROW_CHUNK, sizeof(ca));
                const uint16_t *ixa = (const uint16_t *)(ra + ROW_IDX);
                if (obs_out) __builtin_prefetch(ca->data + (size_t)ixa[0] * fb);
                if (next_out) __builtin_prefetch(ca->data + (size_t)ixa[S] * fb);
            }
            const uint8_t *r = (const uint8_t *)row_at(t, slots[j]);
            row_head_t h;
            memcpy(&h, r, sizeof(h));
            if (actions) actions[j] = h.action;
            if (rewards) rewards[j] = h.reward;
            if (discounts) discounts[j] = h.discount;
            if (!want_obs) continue;
            fl_chunk_t *c;
            memcpy(&c, r + ROW_CHUNK, sizeof(c));
            const uint16_t *ix = (const uint16_t *)(r + ROW_IDX);
            if (unlocked) {
                fl_chunk_retain(c, 1);
                ((fl_chunk_t **)held)[j] = c;
                memcpy((uint16_t *)((fl_chunk_t **)held + B) + j * 2 * S, ix, 2 * S * sizeof(uint16_t));
                continue;
            }
            if (S == 1 && !c->compressed) { /* one raw frame per observation: a plain copy */
                if (obs_out) memcpy(obs_out + j * ob, c->data + (size_t)ix[0] * ob, ob);
                if (next_out) memcpy(next_out + j * ob, c->data + (size_t)ix[1] * ob, ob);
                continue;
            }
            if (obs_out) (void)fl_frames_gather(&t->lay, c, ix, NULL, obs_out + j * ob);
            if (next_out) (void)fl_frames_gather(&t->lay, c, ix + S, NULL, next_out + j * ob);
        }
    }
    t->sampled += B;
    pthread_mutex_unlock(&t->mu);

    if (unlocked) {
        fl_chunk_t **hc = held;
        const uint16_t *hix = (const uint16_t *)(hc + B);
        int bad = 0;
        for (size_t j = 0; j < B; j++) {
            const uint16_t *ix = hix + j * 2 * S;
            if (obs_out) bad |= fl_frames_gather(&t->lay, hc[j], ix, rd, obs_out + j * ob);
            if (next_out) bad |= fl_frames_gather(&t->lay, hc[j], ix + S, rd, next_out + j * ob);
            fl_chunk_release(hc[j], 1);
        }
        if (bad) {
            s = fl_err_set(err, FL_DATA_LOSS, "sample: a stored frame no longer decompresses");
            goto done;
        }
    }

    /* w_j = (N P_j)^-beta / (N P_min)^-beta = (q_min / q_j)^beta, with q_j >= q_min > 0. A
     * weight too small for a float is raised to FLT_MIN so that it stays positive. */
    if (weights) {
        if (!prioritized || beta == 0.0) {
            for (size_t j = 0; j < B; j++) weights[j] = 1.0f;
        } else {
            for (size_t j = 0; j < B; j++) {
                double r = qmin / q[j];
                float wj = (float)(beta == 1.0 ? r : beta == 0.5 ? sqrt(r) : pow(r, beta));
                weights[j] = wj > 0.0f ? wj : FLT_MIN;
            }
        }
    }
done:
    fl_frames_reader_destroy(rd);
    free(held);
    scratch_free(slots, slot_stack);
    scratch_free(q, q_stack);
    return s;
}

/* ---- priorities --------------------------------------------------------------------- */

fl_status fl_table_update_priorities(fl_table_t *t, size_t n, const uint64_t *keys,
                                     const float *priorities, size_t *applied, fl_err_t *err) {
    if (applied) *applied = 0;
    if (n == 0) return FL_OK;
    if (!keys || !priorities)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "update_priorities: %s is NULL for %zu items",
                          !keys ? "keys" : "priorities", n);
    fl_status s = FL_OK;
    double q_stack[SCRATCH_ITEMS], old_stack[SCRATCH_ITEMS];
    uint64_t slot_stack[SCRATCH_ITEMS];
    int track = t->mts > 0 && t->cfg.selector == FL_SELECTOR_PRIORITIZED; /* draws_left depends on q > 0 */
    double *q = scratch_get(q_stack, sizeof(q_stack), n, sizeof(double));              /* (n) */
    uint64_t *slots = scratch_get(slot_stack, sizeof(slot_stack), n, sizeof(uint64_t)); /* (n) */
    double *old = track ? scratch_get(old_stack, sizeof(old_stack), n, sizeof(double)) : NULL; /* (n) */
    if (!q || !slots || (track && !old)) {
        s = fl_err_set(err, FL_NO_MEMORY, "update_priorities: cannot allocate scratch for %zu items", n);
        goto done;
    }
    double max_p = 0.0;
    if ((s = convert_priorities(t, n, priorities, q, &max_p, err)) != FL_OK) goto done;

    /* Live keys are compacted to the front of (slots, q), in order, then applied at once. */
    size_t ok = 0;
    pthread_mutex_lock(&t->mu);
    window_t w = window_start(t);
    for (size_t i = 0; i < n; i++) {
        if (!key_live(t, w, keys[i], &slots[ok])) continue;
        q[ok] = q[i];
        if (priorities[i] > t->max_priority) t->max_priority = priorities[i];
        ok++;
    }
    fl_sumtree_set_many(t->tree, ok, slots, q, old);
    /* An item whose priority moves between 0 and positive leaves or joins the draws that
     * a prioritized table can still give. old[k] is the value just before entry k, so the
     * changes of a key given twice add up. */
    for (size_t k = 0; track && k < ok; k++)
        if ((old[k] > 0.0) != (q[k] > 0.0)) {
            uint64_t left = t->mts - row_at(t, slots[k])->times;
            t->draws_left = q[k] > 0.0 ? t->draws_left + left : t->draws_left - left;
        }
    t->updates_applied += ok;
    t->updates_stale += n - ok;
    t->since_rebuild += ok;
    if (t->cfg.rebuild_every > 0 && t->since_rebuild >= t->cfg.rebuild_every) {
        fl_sumtree_rebuild(t->tree);
        t->rebuilds++;
        t->since_rebuild = 0;
    }
    pthread_mutex_unlock(&t->mu);
    if (applied) *applied = ok;
done:
    scratch_free(q, q_stack);
    scratch_free(slots, slot_stack);
    if (old) scratch_free(old, old_stack);
    return s;
}

void fl_table_info(fl_table_t *t, fl_table_info_t *info) {
    pthread_mutex_lock(&t->mu);
    info->size = t->size;
    info->capacity = t->capacity;
    info->inserted = t->inserted;
    info->sampled = t->sampled;
    info->removed = t->removed;
    info->updates_applied = t->updates_applied;
    info->updates_stale = t->updates_stale;
    info->rebuilds = t->rebuilds;
    info->total_priority = fl_sumtree_total(t->tree);
    info->max_priority = t->max_priority;
    double qmin = fl_sumtree_min(t->tree);
    info->min_priority = isfinite(qmin) ? qmin : 0.0;
    info->chunks = t->chunks;
    info->frames = t->frames;
    info->frame_bytes = t->chunk_bytes;
    info->row_bytes = t->stride;
    info->storage_bytes = t->chunk_bytes + (uint64_t)t->capacity * t->stride + fl_sumtree_bytes(t->tree) +
                          (t->gone ? (t->capacity + 63) / 64 * 8 : 0) + (t->live_list ? t->capacity * 16 : 0);
    pthread_mutex_unlock(&t->mu);
}

fl_status fl_table_priority(fl_table_t *t, uint64_t key, double *priority, fl_err_t *err) {
    pthread_mutex_lock(&t->mu);
    uint64_t slot = 0;
    int live = key_live(t, window_start(t), key, &slot);
    if (live) *priority = fl_sumtree_get(t->tree, slot);
    pthread_mutex_unlock(&t->mu);
    if (!live)
        return fl_err_set(err, FL_NOT_FOUND, "key %#" PRIx64 " (shard %d, seq %" PRIu64 ") is not live", key,
                          fl_table_key_shard(key), fl_table_key_seq(key));
    return FL_OK;
}

void fl_table_rebuild(fl_table_t *t) {
    pthread_mutex_lock(&t->mu);
    fl_sumtree_rebuild(t->tree);
    t->rebuilds++;
    t->since_rebuild = 0;
    pthread_mutex_unlock(&t->mu);
}

fl_status fl_table_verify(fl_table_t *t, fl_err_t *err) {
    fl_status s = FL_OK;
    pthread_mutex_lock(&t->mu);
    uint64_t want_window = t->inserted < t->capacity ? t->inserted : t->capacity;
    if (t->window != want_window) {
        s = fl_err_set(err, FL_INTERNAL, "table: window %" PRIu64 " but %" PRIu64 " inserted into capacity %" PRIu64,
                       t->window, t->inserted, t->capacity);
        goto done;
    }
    if ((s = fl_sumtree_verify(t->tree, err)) != FL_OK) goto done;
    /* One pass over the slots: emptiness, the live count, the draws left, and a Kahan sum
     * of the live leaves in slot order, independent of the tree's grouping. */
    double sum = 0.0, c = 0.0;
    uint64_t live = 0, draws = 0;
    for (uint64_t sl = 0; sl < t->capacity; sl++) {
        double v = fl_sumtree_get(t->tree, sl);
        int in_window = t->window == t->capacity || sl < t->window;
        if (!in_window && slot_gone(t, sl)) {
            s = fl_err_set(err, FL_INTERNAL, "table: slot %" PRIu64 " past the window is marked removed", sl);
            goto done;
        }
        if (!in_window || slot_gone(t, sl)) {
            if (v != 0.0) {
                s = fl_err_set(err, FL_INTERNAL, "table: empty slot %" PRIu64 " has priority %g", sl, v);
                goto done;
            }
            continue;
        }
        live++;
        if (t->mts > 0) {
            uint32_t times = row_at(t, sl)->times;
            if (times >= t->mts) {
                s = fl_err_set(err, FL_INTERNAL, "table: live slot %" PRIu64 " sampled %u times, max %u", sl, times,
                               t->mts);
                goto done;
            }
            if (sampleable(t, v)) draws += t->mts - times;
            if (t->live_list && (t->live_pos[sl] >= t->size || t->live_list[t->live_pos[sl]] != sl)) {
                s = fl_err_set(err, FL_INTERNAL, "table: live slot %" PRIu64 " is not in the uniform list", sl);
                goto done;
            }
        }
        double y = v - c, z = sum + y;
        c = (z - sum) - y;
        sum = z;
    }
    if (live != t->size) {
        s = fl_err_set(err, FL_INTERNAL, "table: size %" PRIu64 " but %" PRIu64 " live slots", t->size, live);
        goto done;
    }
    /* Every empty slot of the window held an item that was removed; removed items and
     * live ones are distinct insertions. */
    if (t->window - live > t->removed || t->removed > t->inserted - live) {
        s = fl_err_set(err, FL_INTERNAL, "table: %" PRIu64 " removed of %" PRIu64 " inserted, %" PRIu64 " live",
                       t->removed, t->inserted, live);
        goto done;
    }
    if (t->mts > 0 && draws != t->draws_left) {
        s = fl_err_set(err, FL_INTERNAL, "table: %" PRIu64 " draws left but the live items give %" PRIu64,
                       t->draws_left, draws);
        goto done;
    }
    if (t->cfg.selector == FL_SELECTOR_FIFO && t->size > 0) {
        window_t w = window_start(t);
        for (uint64_t seq = w.seq; seq < t->fifo_head; seq++)
            if (!slot_gone(t, seq_slot(t, w, seq))) {
                s = fl_err_set(err, FL_INTERNAL, "table: live seq %" PRIu64 " is before the fifo head %" PRIu64, seq,
                               t->fifo_head);
                goto done;
            }
    }
    /* Chunks: in insertion order, the rows of one chunk are one run whose length is the
     * chunk's row count; the frame indices lie within the chunk; the totals add up. */
    {
        window_t w = window_start(t);
        uint64_t nchunks = 0, nframes = 0, nbytes = 0;
        const size_t per = 2 * (size_t)t->lay.stack;
        for (uint64_t i = 0; i < t->window;) {
            fl_chunk_t *ch = row_chunk(t, seq_slot(t, w, w.seq + i));
            uint64_t e = i;
            while (e < t->window && row_chunk(t, seq_slot(t, w, w.seq + e)) == ch) {
                const uint16_t *ix = row_idx(t, seq_slot(t, w, w.seq + e));
                for (size_t k = 0; ch && k < per; k++)
                    if (ix[k] >= ch->nframes) {
                        s = fl_err_set(err, FL_INTERNAL, "table: seq %" PRIu64 " frame index %u of a chunk of %u",
                                       w.seq + e, ix[k], ch->nframes);
                        goto done;
                    }
                e++;
            }
            if (!ch || ch->rows != e - i || atomic_load(&ch->refs) < 1) {
                s = fl_err_set(err, FL_INTERNAL,
                               "table: seq %" PRIu64 " .. %" PRIu64 " share a chunk that counts %" PRIu64 " rows",
                               w.seq + i, w.seq + e - 1, ch ? ch->rows : 0);
                goto done;
            }
            nchunks++;
            nframes += ch->nframes;
            nbytes += fl_chunk_alloc_bytes(ch);
            i = e;
        }
        if (nchunks != t->chunks || nframes != t->frames || nbytes != t->chunk_bytes) {
            s = fl_err_set(err, FL_INTERNAL,
                           "table: %" PRIu64 " chunks, %" PRIu64 " frames, %" PRIu64 " bytes counted, %" PRIu64
                           " / %" PRIu64 " / %" PRIu64 " found",
                           t->chunks, t->frames, t->chunk_bytes, nchunks, nframes, nbytes);
            goto done;
        }
    }
    /* The tree sums groups of 8 pairwise, a few ulps per level, ~3 per level at worst;
     * 64 ulps covers any supported capacity. */
    double total = fl_sumtree_total(t->tree);
    if (fabs(total - sum) > 64.0 * DBL_EPSILON * sum) {
        s = fl_err_set(err, FL_INTERNAL, "table: tree total %.17g != sum of leaves %.17g", total, sum);
        goto done;
    }
done:
    pthread_mutex_unlock(&t->mu);
    return s;
}

/* ---- checkpoints (format in table.h) ------------------------------------------------ */

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "replay checkpoints are written in host order, which must be little-endian"
#endif

/* The header holds 4 shape entries whatever the rank (unused ones 0). */
#define CKPT_SHAPE_DIMS 4
_Static_assert(FL_OBS_MAX_RANK == CKPT_SHAPE_DIMS, "the checkpoint header holds FL_OBS_MAX_RANK shape entries");


/* The header as a byte buffer with a cursor. */
typedef struct {
    uint8_t b[FL_TABLE_CKPT_HEADER_BYTES];
    size_t at;
} hdr_t;

static void put(hdr_t *h, const void *v, size_t n) {
    assert(h->at + n <= sizeof(h->b));
    memcpy(h->b + h->at, v, n);
    h->at += n;
}
static void put_u32(hdr_t *h, uint32_t v) { put(h, &v, 4); }
static void put_u64(hdr_t *h, uint64_t v) { put(h, &v, 8); }
static void put_f64(hdr_t *h, double v) { put(h, &v, 8); }
static void get(hdr_t *h, void *v, size_t n) {
    assert(h->at + n <= sizeof(h->b));
    memcpy(v, h->b + h->at, n);
    h->at += n;
}
static uint32_t get_u32(hdr_t *h) {
    uint32_t v;
    get(h, &v, 4);
    return v;
}
static uint64_t get_u64(hdr_t *h) {
    uint64_t v;
    get(h, &v, 8);
    return v;
}
static double get_f64(hdr_t *h) {
    double v;
    get(h, &v, 8);
    return v;
}

/* The mutable state that a checkpoint carries besides the slots. */
typedef struct {
    uint64_t inserted, window, size, sampled, removed, updates_applied, updates_stale, rebuilds, since_rebuild,
        draws_left, fifo_head;
    double max_priority;
    fl_rng_t rng;
} ckpt_state_t;

static void header_encode(hdr_t *h, const fl_table_config_t *c, uint64_t obs_bytes, const ckpt_state_t *st) {
    memset(h, 0, sizeof(*h));
    put(h, FL_TABLE_CKPT_MAGIC, 8); /* the 7 letters and their NUL */
    put_u32(h, FL_TABLE_CKPT_VERSION);
    put_u32(h, FL_TABLE_CKPT_HEADER_BYTES);
    put_u64(h, c->capacity);
    put_u32(h, (uint32_t)c->selector);
    put_u32(h, (uint32_t)c->obs.dtype);
    put_u32(h, (uint32_t)c->obs.rank);
    for (int d = 0; d < CKPT_SHAPE_DIMS; d++) put_u32(h, d < c->obs.rank ? (uint32_t)c->obs.shape[d] : 0);
    put_u32(h, (uint32_t)c->shard_id);
    put_u64(h, (uint64_t)c->max_times_sampled);
    put_f64(h, c->alpha);
    put_f64(h, c->priority_eps);
    put_u64(h, c->seed);
    put_u64(h, c->rebuild_every);
    put_u64(h, obs_bytes);
    put_u32(h, (uint32_t)c->frame_stack);
    put_u32(h, (uint32_t)c->zstd_level);
    const uint64_t counters[] = {st->inserted,        st->window,        st->size,     st->sampled,
                                 st->removed,         st->updates_applied, st->updates_stale, st->rebuilds,
                                 st->since_rebuild,   st->draws_left,    st->fifo_head};
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) put_u64(h, counters[i]);
    put_f64(h, st->max_priority);
    for (int i = 0; i < 4; i++) put_u64(h, st->rng.s[i]);
    assert(h->at == FL_TABLE_CKPT_HEADER_BYTES);
}

/* Decodes everything after magic, version and header length (already checked). */
static void header_decode(hdr_t *h, fl_table_config_t *c, uint64_t *obs_bytes, ckpt_state_t *st) {
    h->at = 16;
    fl_table_config_init(c);
    c->capacity = get_u64(h);
    c->selector = (fl_selector)get_u32(h);
    c->obs.dtype = (fl_dtype)get_u32(h);
    uint32_t rank = get_u32(h);
    c->obs.rank = rank > (uint32_t)CKPT_SHAPE_DIMS ? -1 : (int)rank;
    for (int d = 0; d < CKPT_SHAPE_DIMS; d++) {
        uint32_t v = get_u32(h);
        c->obs.shape[d] = v > INT32_MAX ? -1 : (int)v;
    }
    uint32_t shard = get_u32(h);
    c->shard_id = shard > 255 ? -1 : (int)shard;
    uint64_t mts = get_u64(h);
    c->max_times_sampled = mts > (uint64_t)FL_TABLE_MAX_TIMES_SAMPLED ? -1 : (int64_t)mts;
    c->alpha = get_f64(h);
    c->priority_eps = get_f64(h);
    c->seed = get_u64(h);
    c->rebuild_every = get_u64(h);
    *obs_bytes = get_u64(h);
    uint32_t stack = get_u32(h), level = get_u32(h);
    c->frame_stack = stack > FL_FRAMES_MAX_STACK ? -1 : (int)stack;
    c->zstd_level = level > 19 ? -1 : (int)level;
    uint64_t *counters[] = {&st->inserted,      &st->window,          &st->size,          &st->sampled,
                            &st->removed,       &st->updates_applied, &st->updates_stale, &st->rebuilds,
                            &st->since_rebuild, &st->draws_left,      &st->fifo_head};
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) *counters[i] = get_u64(h);
    st->max_priority = get_f64(h);
    for (int i = 0; i < 4; i++) st->rng.s[i] = get_u64(h);
}

/* Bytes after the header up to the chunk section (rows, priorities, bitmap, list) for a
 * table of this shape. */
static uint64_t ckpt_fixed_bytes(uint64_t window, uint64_t size, size_t row, int mts, int uniform) {
    uint64_t n = window * row + window * 8;
    if (mts) n += (window + 63) / 64 * 8;
    if (mts && uniform) n += size * 8;
    return n;
}
/* The smallest tail after them: chunk count, extra length, CRC. */
#define CKPT_TAIL_MIN (8u + 8u + 4u)
/* Per chunk in the file: nframes u32, compressed u32, data bytes u64, then the data. */
#define CKPT_CHUNK_HEAD 16u

/* A file being written or read, with a running CRC-32. */
typedef struct {
    FILE *f;
    uLong crc;
    uint64_t bytes;
} ckpt_io_t;

/* Adds n bytes to the running CRC (zlib takes at most 4 GiB per call) and the count. */
static void io_account(ckpt_io_t *io, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t left = n; left > 0;) {
        uInt m = left > (1u << 30) ? (1u << 30) : (uInt)left;
        io->crc = crc32(io->crc, b, m);
        b += m;
        left -= m;
    }
    io->bytes += n;
}

static int io_write(ckpt_io_t *io, const void *p, size_t n) {
    io_account(io, p, n);
    return n == 0 || fwrite(p, 1, n, io->f) == n;
}

static int io_read(ckpt_io_t *io, void *p, size_t n) {
    if (n && fread(p, 1, n, io->f) != n) return 0;
    io_account(io, p, n);
    return 1;
}

/* The state of a table copied under its lock. */
struct fl_table_snapshot {
    fl_table_config_t cfg;
    size_t obs_bytes, stride;
    int mts;
    ckpt_state_t st;
    uint8_t *rows;       /* (window, stride) */
    double *q;           /* (window) */
    uint64_t *gone;      /* mts: (ceil(window / 64)) */
    uint64_t *live_list; /* mts and uniform: (size) */
    fl_chunk_t **chunks; /* (nchunks) in insertion order, one reference each */
    uint64_t nchunks;    /* the rows' chunk fields hold indices into chunks */
    size_t row_bytes;
};
typedef struct fl_table_snapshot snapshot_t;

void fl_table_snapshot_free(fl_table_snapshot_t *sn) {
    if (!sn) return;
    free(sn->rows);
    free(sn->q);
    free(sn->gone);
    free(sn->live_list);
    for (uint64_t i = 0; i < sn->nchunks; i++) fl_chunk_release(sn->chunks[i], 1);
    free(sn->chunks);
    free(sn);
}

fl_status fl_table_snapshot_take(fl_table_t *t, fl_table_snapshot_t **out, fl_err_t *err) {
    *out = NULL;
    snapshot_t *sn = calloc(1, sizeof(*sn));
    if (!sn) return fl_err_set(err, FL_NO_MEMORY, "checkpoint: out of memory");
    sn->cfg = t->cfg;
    sn->obs_bytes = t->obs_bytes;
    sn->stride = t->stride;
    sn->row_bytes = t->row_bytes;
    sn->mts = t->mts > 0;
    pthread_mutex_lock(&t->mu);
    uint64_t w = t->window;
    size_t words = (size_t)((w + 63) / 64);
    sn->rows = malloc(w ? (size_t)w * t->stride : 1);
    sn->q = malloc(w ? (size_t)w * sizeof(double) : 1);
    if (t->gone) sn->gone = malloc(words ? words * sizeof(uint64_t) : 1);
    if (t->live_list) sn->live_list = malloc(t->size ? (size_t)t->size * sizeof(uint64_t) : 1);
    sn->chunks = malloc(t->chunks ? (size_t)t->chunks * sizeof(fl_chunk_t *) : 1);
    if (!sn->rows || !sn->q || (t->gone && !sn->gone) || (t->live_list && !sn->live_list) || !sn->chunks) {
        pthread_mutex_unlock(&t->mu);
        fl_table_snapshot_free(sn);
        return fl_err_set(err, FL_NO_MEMORY, "checkpoint: cannot allocate a copy of %" PRIu64 " rows of %zu bytes", w,
                          t->stride);
    }
    sn->st = (ckpt_state_t){t->inserted,   t->window,        t->size,          t->sampled,
                            t->removed,    t->updates_applied, t->updates_stale, t->rebuilds,
                            t->since_rebuild, t->draws_left, t->fifo_head,     t->max_priority,
                            t->rng};
    memcpy(sn->rows, t->rows, (size_t)w * t->stride);
    for (uint64_t s = 0; s < w; s++) sn->q[s] = fl_sumtree_get(t->tree, s);
    if (t->gone) {
        memcpy(sn->gone, t->gone, words * sizeof(uint64_t));
        /* Bits past the window are 0 (fl_table_verify checks it); clear the tail anyway. */
        if (w % 64) sn->gone[words - 1] &= (UINT64_C(1) << (w % 64)) - 1;
    }
    if (t->live_list) memcpy(sn->live_list, t->live_list, (size_t)t->size * sizeof(uint64_t));
    /* The chunks, numbered in insertion order (each is one run of rows), one reference
     * each; the copied rows get the numbers instead of the pointers. */
    window_t ws = window_start(t);
    fl_chunk_t *prev = NULL;
    for (uint64_t i = 0; i < w; i++) {
        uint64_t slot = seq_slot(t, ws, ws.seq + i);
        fl_chunk_t *c = row_chunk(t, slot);
        if (c != prev) {
            fl_chunk_retain(c, 1);
            sn->chunks[sn->nchunks++] = c;
            prev = c;
        }
        uint64_t index = sn->nchunks - 1;
        memcpy(sn->rows + (size_t)slot * t->stride + ROW_CHUNK, &index, sizeof(index));
    }
    assert(sn->nchunks == t->chunks);
    pthread_mutex_unlock(&t->mu);
    *out = sn;
    return FL_OK;
}

/* Serial of temporary files written by this process, so that concurrent saves to one
 * path never share a temporary file. */
static _Atomic unsigned long ckpt_serial;


fl_status fl_table_snapshot_write(const fl_table_snapshot_t *sn, const char *path, const void *extra,
                                  size_t extra_len, fl_table_save_info_t *info, fl_err_t *err) {
    if (info) memset(info, 0, sizeof(*info));
    if (!path || !*path) return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint: empty path");
    if (extra_len > FL_TABLE_CKPT_MAX_EXTRA)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: %zu extra bytes, at most %u", path, extra_len,
                          FL_TABLE_CKPT_MAX_EXTRA);
    fl_status s = FL_OK;
    size_t tlen = strlen(path) + 64;
    char *tmp = malloc(tlen);
    if (!tmp) return fl_err_set(err, FL_NO_MEMORY, "checkpoint %s: out of memory", path);
    snprintf(tmp, tlen, "%s.tmp.%ld.%lu", path, (long)getpid(), (unsigned long)(ckpt_serial++));
    ckpt_io_t io = {fopen(tmp, "wb"), crc32(0L, Z_NULL, 0), 0};
    if (!io.f) {
        s = fl_err_set(err, FL_INTERNAL, "checkpoint %s: cannot create %s: %s", path, tmp, strerror(errno));
        goto done;
    }
    setvbuf(io.f, NULL, _IOFBF, 1 << 20);
    hdr_t h;
    header_encode(&h, &sn->cfg, sn->obs_bytes, &sn->st);
    int ok = io_write(&io, h.b, sizeof(h.b));
    size_t rb = sn->row_bytes;
    uint64_t w = sn->st.window;
    for (uint64_t r = 0; ok && r < w; r++) ok = io_write(&io, sn->rows + (size_t)r * sn->stride, rb);
    ok = ok && io_write(&io, sn->q, (size_t)w * sizeof(double));
    if (sn->gone) ok = ok && io_write(&io, sn->gone, (size_t)((w + 63) / 64) * sizeof(uint64_t));
    if (sn->live_list) ok = ok && io_write(&io, sn->live_list, (size_t)sn->st.size * sizeof(uint64_t));
    uint64_t chunk_section = 8;
    ok = ok && io_write(&io, &sn->nchunks, sizeof(uint64_t));
    for (uint64_t i = 0; ok && i < sn->nchunks; i++) {
        const fl_chunk_t *c = sn->chunks[i];
        uint32_t head[2] = {c->nframes, c->compressed};
        uint64_t bytes = c->data_bytes;
        ok = io_write(&io, head, sizeof(head)) && io_write(&io, &bytes, sizeof(bytes)) &&
             io_write(&io, c->data, c->data_bytes);
        chunk_section += CKPT_CHUNK_HEAD + c->data_bytes;
    }
    uint64_t elen = extra_len;
    ok = ok && io_write(&io, &elen, sizeof(elen));
    if (extra_len) ok = ok && io_write(&io, extra, extra_len);
    uint32_t crc = (uint32_t)io.crc;
    ok = ok && io_write(&io, &crc, sizeof(crc));
    if (!ok || fflush(io.f) != 0 || fsync(fileno(io.f)) != 0) {
        s = fl_err_set(err, FL_INTERNAL, "checkpoint %s: cannot write %s: %s", path, tmp, strerror(errno));
        fclose(io.f);
        unlink(tmp);
        goto done;
    }
    if (fclose(io.f) != 0) {
        s = fl_err_set(err, FL_INTERNAL, "checkpoint %s: cannot close %s: %s", path, tmp, strerror(errno));
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, path) != 0) {
        s = fl_err_set(err, FL_INTERNAL, "checkpoint %s: cannot rename %s over it: %s", path, tmp, strerror(errno));
        unlink(tmp);
        goto done;
    }
    if ((s = fl_fsync_parent(path, err)) != FL_OK) {
        fl_err_prefix(err, "checkpoint %s", path);
        goto done;
    }
    assert(io.bytes == FL_TABLE_CKPT_HEADER_BYTES +
                           ckpt_fixed_bytes(w, sn->st.size, sn->row_bytes, sn->mts, sn->live_list != NULL) +
                           chunk_section + 8 + extra_len + 4);
    if (info) {
        info->items = sn->st.size;
        info->bytes = io.bytes;
    }
done:
    free(tmp);
    return s;
}

fl_status fl_table_save(fl_table_t *t, const char *path, fl_table_save_info_t *info, fl_err_t *err) {
    if (info) memset(info, 0, sizeof(*info));
    if (!path || !*path) return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint: empty path");
    fl_table_snapshot_t *sn;
    FL_TRY(fl_table_snapshot_take(t, &sn, err));
    fl_status s = fl_table_snapshot_write(sn, path, NULL, 0, info, err);
    fl_table_snapshot_free(sn);
    return s;
}

/* Compares the file's configuration with the configured one, field by field. */
static fl_status check_signature(const char *path, const fl_table_config_t *f, const fl_table_config_t *e,
                                 fl_err_t *err) {
#define MISMATCH(field, fmt, fv, ev)                                                                              \
    return fl_err_set(err, FL_INVALID_ARGUMENT,                                                                  \
                      "checkpoint %s: " field " " fmt " in the file, " fmt " configured for this shard", path, fv, \
                      ev)
    if (f->capacity != e->capacity) MISMATCH("capacity", "%" PRIu64, f->capacity, e->capacity);
    if (f->obs.dtype != e->obs.dtype)
        MISMATCH("obs_dtype", "%s", fl_dtype_name(f->obs.dtype), fl_dtype_name(e->obs.dtype));
    if (f->obs.rank != e->obs.rank) MISMATCH("obs_rank", "%d", f->obs.rank, e->obs.rank);
    for (int d = 0; d < f->obs.rank; d++)
        if (f->obs.shape[d] != e->obs.shape[d]) MISMATCH("obs_shape", "%d", f->obs.shape[d], e->obs.shape[d]);
    if (f->selector != e->selector)
        MISMATCH("selector", "%s", fl_selector_name(f->selector), fl_selector_name(e->selector));
    if (f->max_times_sampled != e->max_times_sampled)
        MISMATCH("max_times_sampled", "%" PRId64, f->max_times_sampled, e->max_times_sampled);
    if (f->alpha != e->alpha) MISMATCH("alpha", "%.17g", f->alpha, e->alpha);
    if (f->priority_eps != e->priority_eps) MISMATCH("priority_eps", "%.17g", f->priority_eps, e->priority_eps);
    if (f->shard_id != e->shard_id) MISMATCH("shard_id", "%d", f->shard_id, e->shard_id);
    if (f->frame_stack != e->frame_stack) MISMATCH("frame_stack", "%d", f->frame_stack, e->frame_stack);
#undef MISMATCH
    return FL_OK;
}

/* Checks the loaded slots against each other and the counters, and builds what derives
 * from them (the tree, the uniform list's positions). Nothing in t is trusted yet. */
static fl_status check_loaded(const char *path, fl_table_t *t, const double *q, fl_err_t *err) {
    uint64_t w = t->window;
    uint64_t live = 0;
    for (uint64_t s = 0; s < w; s++) {
        const row_head_t *h = row_at(t, s);
        if (!(isfinite(q[s]) && q[s] >= 0.0))
            return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: slot %" PRIu64 " has priority %g", path, s, q[s]);
        if (!isfinite(h->reward) || !(h->discount >= 0.0f && h->discount <= 1.0f))
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "checkpoint %s: slot %" PRIu64 " has reward %g, discount %g", path, s, (double)h->reward,
                              (double)h->discount);
        if (slot_gone(t, s)) {
            if (q[s] != 0.0)
                return fl_err_set(err, FL_INVALID_ARGUMENT,
                                  "checkpoint %s: removed slot %" PRIu64 " has priority %g", path, s, q[s]);
            continue;
        }
        live++;
        if (t->mts > 0 && h->times >= t->mts)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "checkpoint %s: live slot %" PRIu64 " was sampled %u times, max_times_sampled %u", path,
                              s, h->times, t->mts);
    }
    if (live != t->size)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: size %" PRIu64 " but %" PRIu64 " live slots", path,
                          t->size, live);
    if (t->fifo_head > t->inserted)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "checkpoint %s: fifo head %" PRIu64 " past the %" PRIu64 " items inserted", path,
                          t->fifo_head, t->inserted);
    if (t->live_list) {
        for (uint64_t s = 0; s < t->capacity; s++) t->live_pos[s] = UINT64_MAX;
        for (uint64_t i = 0; i < t->size; i++) {
            uint64_t s = t->live_list[i];
            if (s >= w || slot_gone(t, s) || t->live_pos[s] != UINT64_MAX)
                return fl_err_set(err, FL_INVALID_ARGUMENT,
                                  "checkpoint %s: live list entry %" PRIu64 " = slot %" PRIu64
                                  " is not a distinct live slot",
                                  path, i, s);
            t->live_pos[s] = i;
        }
    }
    fl_sumtree_set_range(t->tree, 0, (size_t)w, q);
    return FL_OK;
}

/* Points the loaded rows [0, w) (whose chunk fields hold chunk numbers) at their chunks,
 * after checking every number and frame index, and that every chunk has a row. Changes
 * nothing on failure. */
static fl_status attach_loaded(const char *path, fl_table_t *t, uint64_t w, fl_chunk_t **chunks, uint64_t nchunks,
                               fl_err_t *err) {
    const size_t per = 2 * (size_t)t->lay.stack;
    uint64_t *rows = calloc(nchunks ? (size_t)nchunks : 1, sizeof(uint64_t));
    if (!rows) return fl_err_set(err, FL_NO_MEMORY, "checkpoint %s: out of memory", path);
    for (uint64_t r = 0; r < w; r++) {
        uint64_t index;
        memcpy(&index, t->rows + (size_t)r * t->stride + ROW_CHUNK, sizeof(index));
        if (index >= nchunks) {
            free(rows);
            return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: slot %" PRIu64 " names chunk %" PRIu64
                              " of %" PRIu64, path, r, index, nchunks);
        }
        const uint16_t *ix = row_idx(t, r);
        for (size_t k = 0; k < per; k++)
            if (ix[k] >= chunks[index]->nframes) {
                free(rows);
                return fl_err_set(err, FL_INVALID_ARGUMENT,
                                  "checkpoint %s: slot %" PRIu64 " names frame %u of a chunk of %u", path, r, ix[k],
                                  chunks[index]->nframes);
            }
        rows[index]++;
    }
    for (uint64_t i = 0; i < nchunks; i++)
        if (rows[i] == 0) {
            free(rows);
            return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: chunk %" PRIu64 " is used by no slot", path, i);
        }
    for (uint64_t r = 0; r < w; r++) {
        uint64_t index;
        memcpy(&index, t->rows + (size_t)r * t->stride + ROW_CHUNK, sizeof(index));
        memcpy(t->rows + (size_t)r * t->stride + ROW_CHUNK, &chunks[index], sizeof(fl_chunk_t *));
    }
    for (uint64_t i = 0; i < nchunks; i++) attach_chunk(t, chunks[i], rows[i]);
    free(rows);
    return FL_OK;
}

fl_status fl_table_load(const char *path, const fl_table_config_t *expected, fl_table_t **out, fl_err_t *err) {
    return fl_table_load_extra(path, expected, out, NULL, NULL, err);
}

fl_status fl_table_load_extra(const char *path, const fl_table_config_t *expected, fl_table_t **out, void **extra,
                              size_t *extra_len, fl_err_t *err) {
    *out = NULL;
    if (extra) *extra = NULL;
    if (extra_len) *extra_len = 0;
    uint8_t *xbuf = NULL;
    fl_chunk_t **chunks = NULL;
    uint64_t nchunks = 0;
    int attached = 0;
    if (!path || !*path) return fl_err_set(err, FL_INVALID_ARGUMENT, "restore: empty checkpoint path");
    fl_status s = FL_OK;
    fl_table_t *t = NULL;
    double *q = NULL;
    ckpt_io_t io = {fopen(path, "rb"), crc32(0L, Z_NULL, 0), 0};
    if (!io.f)
        return fl_err_set(err, errno == ENOENT ? FL_NOT_FOUND : FL_INTERNAL, "checkpoint %s: cannot open: %s", path,
                          strerror(errno));
    setvbuf(io.f, NULL, _IOFBF, 1 << 20);
    struct stat stt;
    if (fstat(fileno(io.f), &stt) != 0) {
        s = fl_err_set(err, FL_INTERNAL, "checkpoint %s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    uint64_t file_bytes = (uint64_t)stt.st_size;

    hdr_t h;
    memset(&h, 0, sizeof(h));
    if (file_bytes < 16 || !io_read(&io, h.b, 16)) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: %" PRIu64 " bytes, too short for a header", path,
                       file_bytes);
        goto fail;
    }
    if (memcmp(h.b, FL_TABLE_CKPT_MAGIC, 8) != 0) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: bad magic, not a fleet replay checkpoint", path);
        goto fail;
    }
    h.at = 8;
    uint32_t version = get_u32(&h), hlen = get_u32(&h);
    if (version != FL_TABLE_CKPT_VERSION) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: format version %u, this build reads version %u", path,
                       version, FL_TABLE_CKPT_VERSION);
        goto fail;
    }
    if (hlen != FL_TABLE_CKPT_HEADER_BYTES) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: header length %u, expected %u for version %u", path,
                       hlen, FL_TABLE_CKPT_HEADER_BYTES, version);
        goto fail;
    }
    if (file_bytes < FL_TABLE_CKPT_HEADER_BYTES || !io_read(&io, h.b + 16, FL_TABLE_CKPT_HEADER_BYTES - 16)) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: truncated: %" PRIu64 " bytes, header alone is %u",
                       path, file_bytes, FL_TABLE_CKPT_HEADER_BYTES);
        goto fail;
    }
    fl_table_config_t fc;
    uint64_t obs_bytes = 0;
    ckpt_state_t st;
    header_decode(&h, &fc, &obs_bytes, &st);
    size_t want_obs = 0;
    fl_err_t e2;
    fl_err_init(&e2);
    if (check_config(&fc, &want_obs, &e2) != FL_OK) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: bad configuration in the header: %s", path, e2.msg);
        goto fail;
    }
    if (obs_bytes != want_obs) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: obs_bytes %" PRIu64 " but the shape gives %zu", path,
                       obs_bytes, want_obs);
        goto fail;
    }
    if (expected) {
        if ((s = check_signature(path, &fc, expected, err)) != FL_OK) goto fail;
        fc.rebuild_every = expected->rebuild_every;
        fc.zstd_level = expected->zstd_level; /* chunks say whether they are compressed */
    }
    uint64_t want_window = st.inserted < fc.capacity ? st.inserted : fc.capacity;
    if (st.window != want_window || st.size > st.window || st.inserted > FL_TABLE_KEY_SEQ_MASK) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT,
                       "checkpoint %s: inconsistent counters: inserted %" PRIu64 ", window %" PRIu64 ", size %" PRIu64
                       " for capacity %" PRIu64,
                       path, st.inserted, st.window, st.size, fc.capacity);
        goto fail;
    }
    int mts = fc.max_times_sampled > 0, uniform = fc.selector == FL_SELECTOR_UNIFORM;
    uint64_t fixed = ckpt_fixed_bytes(st.window, st.size, row_bytes(fc.frame_stack), mts, uniform);
    if (file_bytes < FL_TABLE_CKPT_HEADER_BYTES + fixed + CKPT_TAIL_MIN) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT,
                       "checkpoint %s: %" PRIu64 " bytes, at least %" PRIu64 " expected for %" PRIu64
                       " slots (truncated)",
                       path, file_bytes, (uint64_t)FL_TABLE_CKPT_HEADER_BYTES + fixed + CKPT_TAIL_MIN, st.window);
        goto fail;
    }

    fl_table_config_t tc = fc;
    if ((s = fl_table_create(&tc, &t, err)) != FL_OK) {
        fl_err_prefix(err, "checkpoint %s", path);
        goto fail;
    }
    uint64_t w = st.window;
    q = malloc(w ? (size_t)w * sizeof(double) : 1);
    if (!q) {
        s = fl_err_set(err, FL_NO_MEMORY, "checkpoint %s: out of memory for %" PRIu64 " priorities", path, w);
        goto fail;
    }
    size_t rb = t->row_bytes;
    int ok = 1;
    for (uint64_t r = 0; ok && r < w; r++) ok = io_read(&io, row_at(t, r), rb);
    ok = ok && io_read(&io, q, (size_t)w * sizeof(double));
    if (t->gone) ok = ok && io_read(&io, t->gone, (size_t)((w + 63) / 64) * sizeof(uint64_t));
    if (t->live_list) ok = ok && io_read(&io, t->live_list, (size_t)st.size * sizeof(uint64_t));
    /* The chunks: every size is checked against what the file has left before it is
     * allocated or read. */
    ok = ok && io_read(&io, &nchunks, sizeof(nchunks));
    if (ok && (nchunks > w || (w > 0 && nchunks == 0))) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: %" PRIu64 " chunks for %" PRIu64 " slots", path,
                       nchunks, w);
        goto fail;
    }
    if (ok && !(chunks = calloc(nchunks ? (size_t)nchunks : 1, sizeof(fl_chunk_t *)))) {
        s = fl_err_set(err, FL_NO_MEMORY, "checkpoint %s: out of memory for %" PRIu64 " chunks", path, nchunks);
        goto fail;
    }
    for (uint64_t i = 0; ok && i < nchunks; i++) {
        uint32_t head[2];
        uint64_t bytes = 0;
        ok = io_read(&io, head, sizeof(head)) && io_read(&io, &bytes, sizeof(bytes));
        if (!ok) break;
        if (bytes > file_bytes - io.bytes || file_bytes - io.bytes - bytes < 8 + 4) {
            s = fl_err_set(err, FL_INVALID_ARGUMENT,
                           "checkpoint %s: chunk %" PRIu64 " of %" PRIu64 " bytes, the file has %" PRIu64
                           " left (truncated)",
                           path, i, bytes, file_bytes - io.bytes);
            goto fail;
        }
        uint8_t *data = malloc(bytes ? (size_t)bytes : 1);
        if (!data) {
            s = fl_err_set(err, FL_NO_MEMORY, "checkpoint %s: out of memory for chunk %" PRIu64, path, i);
            goto fail;
        }
        ok = io_read(&io, data, (size_t)bytes);
        if (ok) {
            fl_err_init(&e2);
            s = fl_chunk_from_data(&t->lay, head[0], head[1], data, (size_t)bytes, &chunks[i], &e2);
            if (s != FL_OK) {
                free(data);
                s = fl_err_set(err, s, "checkpoint %s: chunk %" PRIu64 ": %s", path, i, e2.msg);
                goto fail;
            }
        }
        free(data);
    }
    uint64_t elen = UINT64_MAX;
    ok = ok && io_read(&io, &elen, sizeof(elen));
    uint64_t want_extra = ok && file_bytes - io.bytes >= 4 ? file_bytes - io.bytes - 4 : 0;
    if (ok && (elen != want_extra || want_extra > FL_TABLE_CKPT_MAX_EXTRA)) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT,
                       "checkpoint %s: extra section of %" PRIu64 " bytes, but the file size leaves %" PRIu64
                       " (at most %u; truncated or trailing bytes)",
                       path, elen, want_extra, FL_TABLE_CKPT_MAX_EXTRA);
        goto fail;
    }
    xbuf = malloc(want_extra ? (size_t)want_extra : 1);
    if (!xbuf) {
        s = fl_err_set(err, FL_NO_MEMORY, "checkpoint %s: out of memory", path);
        goto fail;
    }
    ok = ok && io_read(&io, xbuf, (size_t)want_extra);
    uint32_t want_crc = (uint32_t)io.crc, crc = 0;
    ok = ok && fread(&crc, 1, sizeof(crc), io.f) == sizeof(crc);
    if (!ok) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: read error after %" PRIu64 " bytes", path, io.bytes);
        goto fail;
    }
    if (crc != want_crc) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: CRC-32 %08x in the file, %08x computed: corrupted",
                       path, crc, want_crc);
        goto fail;
    }
    if (t->gone && w % 64 && (t->gone[(w - 1) / 64] >> (w % 64)) != 0) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: removed bits set past the window", path);
        goto fail;
    }
    if ((s = attach_loaded(path, t, w, chunks, nchunks, err)) != FL_OK) goto fail;
    attached = 1;
    t->inserted = st.inserted;
    t->window = st.window;
    t->size = st.size;
    t->sampled = st.sampled;
    t->removed = st.removed;
    t->updates_applied = st.updates_applied;
    t->updates_stale = st.updates_stale;
    t->rebuilds = st.rebuilds;
    t->since_rebuild = st.since_rebuild;
    t->draws_left = st.draws_left;
    t->fifo_head = st.fifo_head;
    t->max_priority = st.max_priority;
    t->rng = st.rng;
    if (!isfinite(st.max_priority) || st.max_priority < 0.0) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: max_priority %g", path, st.max_priority);
        goto fail;
    }
    if ((s = check_loaded(path, t, q, err)) != FL_OK) goto fail;
    fl_err_init(&e2);
    if (fl_table_verify(t, &e2) != FL_OK) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: inconsistent contents: %s", path, e2.msg);
        goto fail;
    }
    fclose(io.f);
    free(q);
    free(chunks);
    *out = t;
    if (extra && want_extra) {
        *extra = xbuf;
        xbuf = NULL;
    }
    if (extra_len) *extra_len = (size_t)want_extra;
    free(xbuf);
    return FL_OK;

fail:
    fclose(io.f);
    free(q);
    free(xbuf);
    if (chunks && !attached)
        for (uint64_t i = 0; i < nchunks; i++) free(chunks[i]); /* never shared */
    free(chunks);
    fl_table_destroy(t);
    return s;
}
