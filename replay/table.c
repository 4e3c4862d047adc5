/* table: ring storage (one row per slot) + a sum-tree over the slots, behind one mutex;
 * insert, sample, priority updates, info and fl_table_verify. Checkpoints are in
 * replay/table_checkpoint.c, the selectors in replay/select_*.c; what these files share
 * (the state, the row layout, the slot helpers) is in replay/table_internal.h.
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
 * Selectors (replay/selector.h): sample draws with the configured selector's select
 * function; its properties say whether draws follow the priorities and whether the table
 * keeps a dense list of the live slots (kept with swap-removal) for it. With
 * max_times_sampled, draws_left counts the draws the live items can still give (with a
 * prioritized selector only the items of positive priority), so that a batch that
 * cannot be completed is refused before anything changes. */
#include "replay/table.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "replay/frames.h"
#include "replay/selector.h"
#include "replay/sumtree.h"
#include "replay/table_internal.h"

/* Batches up to this many items use stack scratch space; larger ones allocate. */
#define SCRATCH_ITEMS 512
/* Rows fetched ahead of the one being copied out by sample. */
#define PREFETCH_AHEAD 16

/* Sampled batches of more observation bytes than this are copied out of their chunks
 * after the table's lock is released. */
#define GATHER_UNLOCKED_BYTES (64u << 10)

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

fl_status fl__table_check_config(const fl_table_config_t *cfg, size_t *obs_bytes, fl_err_t *err) {
    uint64_t max_capacity = FL_SUMTREE_MAX_CAPACITY;
    if (cfg->capacity < 1 || cfg->capacity > max_capacity)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table capacity %" PRIu64 ": expected 1 .. %" PRIu64, cfg->capacity,
                          max_capacity);
    const fl_obs_spec_t *obs = &cfg->obs;
    size_t elem = fl_dtype_size(obs->dtype);
    if (elem == 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table obs_dtype %d: expected a valid dtype", (int)obs->dtype);
    if (obs->rank < 0 || obs->rank > FL_OBS_MAX_RANK)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table obs_rank %d: expected 0 .. %d", obs->rank, FL_OBS_MAX_RANK);
    size_t bytes = elem;
    for (int d = 0; d < obs->rank; d++) {
        int dim = obs->shape[d];
        if (dim < 1) return fl_err_set(err, FL_INVALID_ARGUMENT, "table obs_shape[%d] = %d: expected >= 1", d, dim);
        if (bytes > SIZE_MAX / (size_t)dim)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "table obs_shape: observation size overflows");
        bytes *= (size_t)dim;
    }
    fl_frames_layout_t lay;
    fl_err_t e2;
    fl_err_init(&e2);
    if (fl_frames_layout_init(&lay, bytes, elem, obs->rank > 0 ? obs->shape[obs->rank - 1] : 1, cfg->frame_stack,
                              cfg->zstd_level, &e2) != FL_OK)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table %s", e2.msg);
    size_t stride = row_stride(fl__table_row_bytes(cfg->frame_stack));
    if (stride > SIZE_MAX / cfg->capacity)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "table capacity %" PRIu64 " * obs_bytes %zu: storage size overflows", cfg->capacity, bytes);
    if (!isfinite(cfg->alpha) || cfg->alpha < 0.0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table alpha %g: expected a finite value >= 0", cfg->alpha);
    if (!isfinite(cfg->priority_eps) || cfg->priority_eps < 0.0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table priority_eps %g: expected a finite value >= 0",
                          cfg->priority_eps);
    if (cfg->shard_id < 0 || cfg->shard_id > 255)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table shard_id %d: expected 0 .. 255", cfg->shard_id);
    if (!fl_selector_ops(cfg->selector)) {
        char names[256];
        fl_selector_list(names, sizeof names, 1);
        return fl_err_set(err, FL_INVALID_ARGUMENT, "table selector %d: expected %s", (int)cfg->selector, names);
    }
    if (cfg->max_times_sampled < 0 || cfg->max_times_sampled > FL_TABLE_MAX_TIMES_SAMPLED)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "table max_times_sampled %" PRId64 ": expected 0 (unlimited) or 1 .. %d",
                          cfg->max_times_sampled, FL_TABLE_MAX_TIMES_SAMPLED);
    *obs_bytes = bytes;
    return FL_OK;
}

uint64_t fl_table_bytes_estimate(uint64_t capacity, size_t obs_bytes, int frame_stack, int per_insert, int n_step) {
    int stack = frame_stack > 1 ? frame_stack : 1;
    double frame = (double)obs_bytes / stack;
    double per = per_insert > 0 ? per_insert : 1;
    double frames_per_item = 1.0 + (double)(n_step + stack - 1) / per;
    /* the row, the sum tree's leaves and inner levels (about 2 doubles), liveness */
    double item = frame * frames_per_item + (double)row_stride(fl__table_row_bytes(stack)) + 2.0 * sizeof(double) + 16;
    return (uint64_t)(item * (double)capacity);
}

fl_status fl_table_create(const fl_table_config_t *cfg, fl_table_t **out, fl_err_t *err) {
    *out = NULL;
    size_t obs_bytes = 0;
    FL_TRY(fl__table_check_config(cfg, &obs_bytes, err));

    fl_status s = FL_OK;
    fl_table_t *t = calloc(1, sizeof(*t));
    if (!t) return fl_err_set(err, FL_NO_MEMORY, "table: cannot allocate");
    t->cfg = *cfg;
    t->sel = fl_selector_ops(cfg->selector); /* checked by fl__table_check_config */
    t->obs_bytes = obs_bytes;
    {
        fl_err_t e2;
        fl_err_init(&e2);
        (void)fl_frames_layout_init(&t->lay, obs_bytes, fl_dtype_size(cfg->obs.dtype),
                                    cfg->obs.rank > 0 ? cfg->obs.shape[cfg->obs.rank - 1] : 1, cfg->frame_stack,
                                    cfg->zstd_level, &e2); /* checked by fl__table_check_config */
    }
    t->row_bytes = fl__table_row_bytes(cfg->frame_stack);
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
        if (t->sel->live_list) {
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

static void detach_chunk(fl_table_t *t, fl_chunk_t *c, uint64_t rows);

void fl_table_destroy(fl_table_t *t) {
    if (!t) return;
    if (t->rows) /* one release per chunk: walk the window's runs of equal chunks */
        for (uint64_t s = 0; s < t->window;) {
            fl_chunk_t *c = fl__table_row_chunk(t, s);
            uint64_t e = s + 1;
            while (e < t->window && fl__table_row_chunk(t, e) == c) e++;
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

const fl_table_config_t *fl_table_config(const fl_table_t *t) {
    return &t->cfg;
}

size_t fl_table_obs_bytes(const fl_table_t *t) {
    return t->obs_bytes;
}

/* (p + eps)^alpha, with the common exponents done without pow. */
static inline double sampling_priority(double p_eps, double alpha) {
    if (alpha == 1.0) return p_eps;
    if (alpha == 0.5) return sqrt(p_eps);
    if (alpha == 0.0) return 1.0;
    return pow(p_eps, alpha);
}

/* Checks n |TD| priorities (finite, >= 0) and writes (p + eps)^alpha to q and their max
 * to *max_p. */
static fl_status convert_priorities(const fl_table_t *t, size_t n, const float *priorities, double *q, double *max_p,
                                    fl_err_t *err) {
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

/* A chunk that `rows` more slots point at (rows > 0). */
void fl__table_attach_chunk(fl_table_t *t, fl_chunk_t *c, uint64_t rows) {
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

/* Whether key names a live item; if so, *slot receives its slot. */
static inline int key_live(const fl_table_t *t, fl__window_t w, uint64_t key, uint64_t *slot) {
    uint64_t seq = fl_table_key_seq(key);
    if (fl_table_key_shard(key) != t->cfg.shard_id || seq >= t->inserted || seq < w.seq) return 0;
    *slot = fl__table_seq_slot(t, w, seq);
    return !fl__table_slot_gone(t, *slot);
}

/* Whether an item of sampling priority q counts towards draws_left. */
static inline int sampleable(const fl_table_t *t, double q) {
    return !t->sel->prioritized || q > 0.0;
}

/* Appends slot s to the dense list (call before size is incremented). */
static inline void list_add(fl_table_t *t, uint64_t s) {
    t->live_pos[s] = t->size;
    t->live_list[t->size] = s;
}

/* ---- insert ------------------------------------------------------------------------- */

/* Stores rows [row, row + m) of the input columns into slots [slot, slot + m), retiring
 * whatever live items those slots held. Row r's observations are in
 * chunks[(r - base) / piece] at frame indices idx[r * 2 * stack ...]. */
static void store_rows(fl_table_t *t, uint64_t slot, size_t row, size_t m, const int32_t *actions, const float *rewards,
                       const float *discounts, fl_chunk_t *const *chunks, size_t base, size_t piece,
                       const uint16_t *idx, const double *q) {
    const size_t per = 2 * (size_t)t->lay.stack;
    int full = t->window == t->capacity;
    if (t->mts > 0) {
        for (size_t k = 0; k < m; k++) {
            uint64_t s = slot + k;
            int old_live = (full || s < t->window) && !fl__table_slot_gone(t, s);
            if (old_live) {
                fl__row_head_t *h = fl__table_row(t, s);
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
        fl_chunk_t *c = fl__table_row_chunk(t, s);
        size_t e = k + 1;
        while (e < m && (full || slot + e < t->window) && fl__table_row_chunk(t, slot + e) == c) e++;
        detach_chunk(t, c, e - k);
        k = e;
    }
    for (size_t k = 0; k < m; k++) {
        size_t r = row + k;
        uint8_t *dst = (uint8_t *)fl__table_row(t, slot + k);
        fl__row_head_t h = {actions[r], rewards[r], discounts[r], 0};
        fl_chunk_t *c = chunks[(r - base) / piece];
        memcpy(dst, &h, sizeof(h));
        memcpy(dst + FL__ROW_CHUNK, &c, sizeof(c));
        memcpy(dst + FL__ROW_IDX, idx + r * per, per * sizeof(uint16_t));
    }
    for (size_t k = 0; k < m;) { /* attach per chunk */
        size_t p = (row + k - base) / piece;
        size_t end = base + (p + 1) * piece - row;
        if (end > m) end = m;
        fl__table_attach_chunk(t, chunks[p], end - k);
        k = end;
    }
    fl_sumtree_set_range(t->tree, slot, m, q + row);
}

/* Transitions per chunk: every frame index fits in 16 bits. */
static size_t chunk_piece(const fl_table_t *t) {
    return FL_CHUNK_MAX_FRAMES / (2 * (size_t)t->lay.stack);
}

/* A validated insert whose observations are already in chunks (fl_table_prepare). */
struct fl_table_prep {
    fl_table_t *t;
    size_t n, skip, m, piece, npieces;
    const int32_t *actions; /* the caller's columns, valid until commit */
    const float *rewards, *discounts;
    double *q; /* (n) sampling priorities */
    double max_p;
    uint16_t *idx;       /* (n, 2 stack) frame indices */
    fl_chunk_t **chunks; /* (npieces) */
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
                           const float *discounts, const void *next_obs, const float *priorities, fl_table_prep_t **out,
                           fl_err_t *err) {
    *out = NULL;
    const char *missing = !obs          ? "obs"
                          : !actions    ? "actions"
                          : !rewards    ? "rewards"
                          : !discounts  ? "discounts"
                          : !next_obs   ? "next_obs"
                          : !priorities ? "priorities"
                                        : NULL;
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

fl_status fl_table_insert(fl_table_t *t, size_t n, const void *obs, const int32_t *actions, const float *rewards,
                          const float *discounts, const void *next_obs, const float *priorities, uint64_t *keys_out,
                          fl_err_t *err) {
    if (n == 0) return FL_OK;
    fl_table_prep_t *p = NULL;
    FL_TRY(fl_table_prepare(t, n, obs, actions, rewards, discounts, next_obs, priorities, &p, err));
    fl_table_commit(p, keys_out);
    return FL_OK;
}

/* ---- sample ------------------------------------------------------------------------- */

/* The caller's output columns of one sample (any may be NULL). */
typedef struct {
    uint64_t *keys;
    double *probs;
    float *weights;
    uint8_t *obs, *next_obs;
    int32_t *actions;
    float *rewards, *discounts;
} sample_out_t;

/* Everything a copy after the lock may need is allocated before any draw, so that a lack
 * of memory never costs draws (max_times_sampled) or returns a partial batch: *held, room
 * for (B) chunk pointers then (B, 2 * stack) frame indices, and *rd, a decompressor when
 * the table may hold compressed chunks (they appear only through inserts with
 * zstd_level > 0 or a load). */
static fl_status prepare_copy_out(fl_table_t *t, size_t B, const sample_out_t *o, void **held, fl_frames_reader_t **rd,
                                  fl_err_t *err) {
    if (!o->obs && !o->next_obs) return FL_OK;
    const size_t S = (size_t)t->lay.stack;
    *held = malloc(B * (sizeof(fl_chunk_t *) + 2 * S * sizeof(uint16_t)));
    fl_err_t e2;
    fl_err_init(&e2);
    const int may_be_compressed = t->lay.zstd_level > 0 || atomic_load(&t->zstd_chunks) > 0;
    if (!*held || (may_be_compressed && fl_frames_reader_create(&t->lay, rd, &e2) != FL_OK))
        return fl_err_set(err, FL_NO_MEMORY, "sample: cannot allocate room to copy %zu items out", B);
    return FL_OK;
}

/* Whether B draws can be given now (under the lock), given the tree's total. */
static int can_draw(const fl_table_t *t, size_t B, double total) {
    return !(t->size == 0 || (t->sel->prioritized && !(total > 0.0)) || (t->mts > 0 && t->draws_left < B));
}

/* Why B draws cannot be given, from the figures read under the lock. */
static fl_status refuse_sample(const fl_table_t *t, size_t B, uint64_t size, uint64_t left, double total,
                               fl_err_t *err) {
    if (size == 0) return fl_err_set(err, FL_FAILED_PRECONDITION, "sample: the table is empty");
    if (t->sel->prioritized && !(total > 0.0))
        return fl_err_set(err, FL_FAILED_PRECONDITION, "sample: all %" PRIu64 " items have priority 0", size);
    return fl_err_set(err, FL_FAILED_PRECONDITION,
                      "sample: the live items can give %" PRIu64 " more draws (max_times_sampled %u), %zu asked", left,
                      t->mts, B);
}

/* Under the lock: copies the drawn rows' scalars out, and their observations too unless
 * `unlocked`, in which case each row's chunk gets a reference (dropped by copy_held) and
 * its frame indices go to `held` (the slot itself may be reused once the lock is
 * released). Two random reads per item (its row, then its frames in a chunk): rows are
 * fetched 2 * PREFETCH_AHEAD items ahead, their frames PREFETCH_AHEAD ahead. */
static void copy_rows_locked(fl_table_t *t, size_t B, const uint64_t *slots, const sample_out_t *o, int unlocked,
                             void *held) {
    const size_t ob = t->obs_bytes, S = (size_t)t->lay.stack;
    uint8_t *obs_out = o->obs, *next_out = o->next_obs;
    int32_t *actions = o->actions;
    float *rewards = o->rewards, *discounts = o->discounts;
    const int want_obs = obs_out || next_out;
    if (!want_obs && !actions && !rewards && !discounts) return;
    const int raw = want_obs && !unlocked;
    const size_t fb = t->lay.frame_bytes;
    for (size_t j = 0; j < B; j++) {
        if (j + 2 * PREFETCH_AHEAD < B) __builtin_prefetch(fl__table_row(t, slots[j + 2 * PREFETCH_AHEAD]));
        if (raw && j + PREFETCH_AHEAD < B) {
            const uint8_t *ra = (const uint8_t *)fl__table_row(t, slots[j + PREFETCH_AHEAD]);
            const fl_chunk_t *ca;
            memcpy(&ca, ra + FL__ROW_CHUNK, sizeof(ca));
            const uint16_t *ixa = (const uint16_t *)(ra + FL__ROW_IDX);
            if (obs_out) __builtin_prefetch(ca->data + (size_t)ixa[0] * fb);
            if (next_out) __builtin_prefetch(ca->data + (size_t)ixa[S] * fb);
        }
        const uint8_t *r = (const uint8_t *)fl__table_row(t, slots[j]);
        fl__row_head_t h;
        memcpy(&h, r, sizeof(h));
        if (actions) actions[j] = h.action;
        if (rewards) rewards[j] = h.reward;
        if (discounts) discounts[j] = h.discount;
        if (!want_obs) continue;
        fl_chunk_t *c;
        memcpy(&c, r + FL__ROW_CHUNK, sizeof(c));
        const uint16_t *ix = (const uint16_t *)(r + FL__ROW_IDX);
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

/* After the lock: the observations of the rows copy_rows_locked held, out of their
 * chunks (decompressed with rd), dropping the references. */
static fl_status copy_held(fl_table_t *t, size_t B, const sample_out_t *o, void *held, fl_frames_reader_t *rd,
                           fl_err_t *err) {
    const size_t ob = t->obs_bytes, S = (size_t)t->lay.stack;
    fl_chunk_t **hc = held;
    const uint16_t *hix = (const uint16_t *)(hc + B);
    int bad = 0;
    for (size_t j = 0; j < B; j++) {
        const uint16_t *ix = hix + j * 2 * S;
        if (o->obs) bad |= fl_frames_gather(&t->lay, hc[j], ix, rd, o->obs + j * ob);
        if (o->next_obs) bad |= fl_frames_gather(&t->lay, hc[j], ix + S, rd, o->next_obs + j * ob);
        fl_chunk_release(hc[j], 1);
    }
    if (bad) return fl_err_set(err, FL_DATA_LOSS, "sample: a stored frame no longer decompresses");
    return FL_OK;
}

/* w_j = (N P_j)^-beta / (N P_min)^-beta = (q_min / q_j)^beta, with q_j >= q_min > 0 (1
 * when draws ignore priorities). A weight too small for a float is raised to FLT_MIN so
 * that it stays positive. */
static void importance_weights(const fl_table_t *t, size_t B, double beta, double qmin, const double *q,
                               float *weights) {
    if (!t->sel->prioritized || beta == 0.0) {
        for (size_t j = 0; j < B; j++) weights[j] = 1.0f;
        return;
    }
    for (size_t j = 0; j < B; j++) {
        double r = qmin / q[j];
        float wj = (float)(beta == 1.0 ? r : beta == 0.5 ? sqrt(r) : pow(r, beta));
        weights[j] = wj > 0.0f ? wj : FLT_MIN;
    }
}

fl_status fl_table_sample(fl_table_t *t, size_t B, double beta, uint64_t *keys, double *probs, float *weights,
                          void *obs, int32_t *actions, float *rewards, float *discounts, void *next_obs,
                          fl_err_t *err) {
    if (B == 0) return fl_err_set(err, FL_INVALID_ARGUMENT, "sample: batch size 0, expected >= 1");
    if (!isfinite(beta) || beta < 0.0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "sample: beta %g, expected a finite value >= 0", beta);
    const sample_out_t o = {keys, probs, weights, obs, next_obs, actions, rewards, discounts};
    fl_status s = FL_OK;
    void *held = NULL;             /* unlocked copy: (B) chunk pointers, then (B, 2 * stack) frame indices */
    fl_frames_reader_t *rd = NULL; /* decompressor, when the table may hold compressed chunks */
    uint64_t slot_stack[SCRATCH_ITEMS];
    double q_stack[SCRATCH_ITEMS];
    uint64_t *slots = scratch_get(slot_stack, sizeof(slot_stack), B, sizeof(uint64_t)); /* (B) */
    double *q = scratch_get(q_stack, sizeof(q_stack), B, sizeof(double));               /* (B) */
    if (!slots || !q) {
        s = fl_err_set(err, FL_NO_MEMORY, "sample: cannot allocate scratch for %zu items", B);
        goto done;
    }
    if ((s = prepare_copy_out(t, B, &o, &held, &rd, err)) != FL_OK) goto done;

    pthread_mutex_lock(&t->mu);
    double total = fl_sumtree_total(t->tree);
    double qmin = fl_sumtree_min(t->tree);
    if (!can_draw(t, B, total)) {
        uint64_t size = t->size, left = t->draws_left;
        pthread_mutex_unlock(&t->mu);
        s = refuse_sample(t, B, size, left, total, err);
        goto done;
    }
    /* Keys and rows are read after the draws: a removed item keeps its row and its place
     * in the window until an insert reuses the slot, which cannot happen under the lock. */
    fl__window_t w = fl__table_window_start(t);
    t->sel->select(t, B, slots, q, probs);
    if (keys)
        for (size_t j = 0; j < B; j++) keys[j] = fl_table_key_make(t->cfg.shard_id, fl__table_slot_seq(t, w, slots[j]));
    /* Large or compressed batches are copied out after the lock is released. */
    const int need_reader = t->zstd_chunks > 0; /* some chunk is compressed */
    const int unlocked = (o.obs || o.next_obs) && (need_reader || 2 * t->obs_bytes * B > GATHER_UNLOCKED_BYTES);
    copy_rows_locked(t, B, slots, &o, unlocked, held);
    t->sampled += B;
    pthread_mutex_unlock(&t->mu);

    if (unlocked && (s = copy_held(t, B, &o, held, rd, err)) != FL_OK) goto done;
    if (weights) importance_weights(t, B, beta, qmin, q, weights);
done:
    fl_frames_reader_destroy(rd);
    free(held);
    scratch_free(slots, slot_stack);
    scratch_free(q, q_stack);
    return s;
}

/* ---- priorities --------------------------------------------------------------------- */

fl_status fl_table_update_priorities(fl_table_t *t, size_t n, const uint64_t *keys, const float *priorities,
                                     size_t *applied, fl_err_t *err) {
    if (applied) *applied = 0;
    if (n == 0) return FL_OK;
    if (!keys || !priorities)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "update_priorities: %s is NULL for %zu items",
                          !keys ? "keys" : "priorities", n);
    fl_status s = FL_OK;
    double q_stack[SCRATCH_ITEMS], old_stack[SCRATCH_ITEMS];
    uint64_t slot_stack[SCRATCH_ITEMS];
    int track = t->mts > 0 && t->sel->prioritized;                        /* draws_left depends on q > 0 */
    double *q = scratch_get(q_stack, sizeof(q_stack), n, sizeof(double)); /* (n) */
    uint64_t *slots = scratch_get(slot_stack, sizeof(slot_stack), n, sizeof(uint64_t));        /* (n) */
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
    fl__window_t w = fl__table_window_start(t);
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
            uint64_t left = t->mts - fl__table_row(t, slots[k])->times;
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
    int live = key_live(t, fl__table_window_start(t), key, &slot);
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

/* fl_table_verify's pass over the slots: empty slots (past the window, or removed) hold
 * priority 0, live ones are within max_times_sampled and in the live list; counts the
 * live slots and the draws they can give, and sums their leaves (Kahan, in slot order,
 * independent of the tree's grouping). */
static fl_status verify_slots(const fl_table_t *t, double *sum_out, uint64_t *live_out, uint64_t *draws_out,
                              fl_err_t *err) {
    double sum = 0.0, c = 0.0;
    uint64_t live = 0, draws = 0;
    for (uint64_t sl = 0; sl < t->capacity; sl++) {
        double v = fl_sumtree_get(t->tree, sl);
        int in_window = t->window == t->capacity || sl < t->window;
        if (!in_window && fl__table_slot_gone(t, sl))
            return fl_err_set(err, FL_INTERNAL, "table: slot %" PRIu64 " past the window is marked removed", sl);
        if (!in_window || fl__table_slot_gone(t, sl)) {
            if (v != 0.0) return fl_err_set(err, FL_INTERNAL, "table: empty slot %" PRIu64 " has priority %g", sl, v);
            continue;
        }
        live++;
        if (t->mts > 0) {
            uint32_t times = fl__table_row(t, sl)->times;
            if (times >= t->mts)
                return fl_err_set(err, FL_INTERNAL, "table: live slot %" PRIu64 " sampled %u times, max %u", sl, times,
                                  t->mts);
            if (sampleable(t, v)) draws += t->mts - times;
            if (t->live_list && (t->live_pos[sl] >= t->size || t->live_list[t->live_pos[sl]] != sl))
                return fl_err_set(err, FL_INTERNAL, "table: live slot %" PRIu64 " is not in the uniform list", sl);
        }
        double y = v - c, z = sum + y;
        c = (z - sum) - y;
        sum = z;
    }
    *sum_out = sum;
    *live_out = live;
    *draws_out = draws;
    return FL_OK;
}

/* The counters against what the slots hold. */
static fl_status verify_counts(const fl_table_t *t, uint64_t live, uint64_t draws, fl_err_t *err) {
    if (live != t->size)
        return fl_err_set(err, FL_INTERNAL, "table: size %" PRIu64 " but %" PRIu64 " live slots", t->size, live);
    /* Every empty slot of the window held an item that was removed; removed items and
     * live ones are distinct insertions. */
    if (t->window - live > t->removed || t->removed > t->inserted - live)
        return fl_err_set(err, FL_INTERNAL, "table: %" PRIu64 " removed of %" PRIu64 " inserted, %" PRIu64 " live",
                          t->removed, t->inserted, live);
    if (t->mts > 0 && draws != t->draws_left)
        return fl_err_set(err, FL_INTERNAL, "table: %" PRIu64 " draws left but the live items give %" PRIu64,
                          t->draws_left, draws);
    return FL_OK;
}

/* Chunks: in insertion order, the rows of one chunk are one run whose length is the
 * chunk's row count; the frame indices lie within the chunk; the totals add up. */
static fl_status verify_chunks(const fl_table_t *t, fl_err_t *err) {
    fl__window_t w = fl__table_window_start(t);
    uint64_t nchunks = 0, nframes = 0, nbytes = 0;
    const size_t per = 2 * (size_t)t->lay.stack;
    for (uint64_t i = 0; i < t->window;) {
        fl_chunk_t *ch = fl__table_row_chunk(t, fl__table_seq_slot(t, w, w.seq + i));
        uint64_t e = i;
        while (e < t->window && fl__table_row_chunk(t, fl__table_seq_slot(t, w, w.seq + e)) == ch) {
            const uint16_t *ix = fl__table_row_idx(t, fl__table_seq_slot(t, w, w.seq + e));
            for (size_t k = 0; ch && k < per; k++)
                if (ix[k] >= ch->nframes)
                    return fl_err_set(err, FL_INTERNAL, "table: seq %" PRIu64 " frame index %u of a chunk of %u",
                                      w.seq + e, ix[k], ch->nframes);
            e++;
        }
        if (!ch || ch->rows != e - i || atomic_load(&ch->refs) < 1)
            return fl_err_set(err, FL_INTERNAL,
                              "table: seq %" PRIu64 " .. %" PRIu64 " share a chunk that counts %" PRIu64 " rows",
                              w.seq + i, w.seq + e - 1, ch ? ch->rows : 0);
        nchunks++;
        nframes += ch->nframes;
        nbytes += fl_chunk_alloc_bytes(ch);
        i = e;
    }
    if (nchunks != t->chunks || nframes != t->frames || nbytes != t->chunk_bytes)
        return fl_err_set(err, FL_INTERNAL,
                          "table: %" PRIu64 " chunks, %" PRIu64 " frames, %" PRIu64 " bytes counted, %" PRIu64
                          " / %" PRIu64 " / %" PRIu64 " found",
                          t->chunks, t->frames, t->chunk_bytes, nchunks, nframes, nbytes);
    return FL_OK;
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
    double sum = 0.0;
    uint64_t live = 0, draws = 0;
    if ((s = fl_sumtree_verify(t->tree, err)) != FL_OK || (s = verify_slots(t, &sum, &live, &draws, err)) != FL_OK ||
        (s = verify_counts(t, live, draws, err)) != FL_OK ||
        (t->sel->verify && (s = t->sel->verify(t, err)) != FL_OK) || (s = verify_chunks(t, err)) != FL_OK)
        goto done;
    /* The tree sums groups of 8 pairwise, a few ulps per level, ~3 per level at worst;
     * 64 ulps covers any supported capacity. */
    double total = fl_sumtree_total(t->tree);
    if (fabs(total - sum) > 64.0 * DBL_EPSILON * sum)
        s = fl_err_set(err, FL_INTERNAL, "table: tree total %.17g != sum of leaves %.17g", total, sum);
done:
    pthread_mutex_unlock(&t->mu);
    return s;
}
