/* table_checkpoint: the replay table's checkpoint file (format in table.h): save through
 * a snapshot copied under the table's lock and written without it, and load, which
 * validates all of a file before it returns a table.
 *
 * Ownership: a snapshot holds a copy of the occupied rows and priorities and one
 * reference to every chunk they use, so that the table may change (and free chunks)
 * while the copy is written; the caller frees it. Load builds a new table that the
 * caller owns; the extra section it returns is malloc'd for the caller.
 * Failure: save writes a temporary file and renames it over the target, so a failed save
 * leaves the previous file; load changes nothing and frees what it built, and its
 * message names the file and what was wrong (replay/table.h lists the codes).
 * Thread-safety: snapshot_take holds the table's lock for the copy only; writing a
 * snapshot and loading touch no shared state (temporary names are unique per process
 * through an atomic serial). The table internals come from replay/table_internal.h. */
#include "replay/table.h"

#include <assert.h>
#include <errno.h>
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
#include "replay/selector.h"
#include "replay/sumtree.h"
#include "replay/table_internal.h"

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
static void put_u32(hdr_t *h, uint32_t v) {
    put(h, &v, 4);
}
static void put_u64(hdr_t *h, uint64_t v) {
    put(h, &v, 8);
}
static void put_f64(hdr_t *h, double v) {
    put(h, &v, 8);
}
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
    const uint64_t counters[] = {st->inserted,      st->window,          st->size,          st->sampled,
                                 st->removed,       st->updates_applied, st->updates_stale, st->rebuilds,
                                 st->since_rebuild, st->draws_left,      st->fifo_head};
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
static uint64_t ckpt_fixed_bytes(uint64_t window, uint64_t size, size_t row, int mts, int live_list) {
    uint64_t n = window * row + window * 8;
    if (mts) n += (window + 63) / 64 * 8;
    if (mts && live_list) n += size * 8;
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
    sn->st = (ckpt_state_t){t->inserted,        t->window,        t->size,     t->sampled,       t->removed,
                            t->updates_applied, t->updates_stale, t->rebuilds, t->since_rebuild, t->draws_left,
                            t->fifo_head,       t->max_priority,  t->rng};
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
    fl__window_t ws = fl__table_window_start(t);
    fl_chunk_t *prev = NULL;
    for (uint64_t i = 0; i < w; i++) {
        uint64_t slot = fl__table_seq_slot(t, ws, ws.seq + i);
        fl_chunk_t *c = fl__table_row_chunk(t, slot);
        if (c != prev) {
            fl_chunk_retain(c, 1);
            sn->chunks[sn->nchunks++] = c;
            prev = c;
        }
        uint64_t index = sn->nchunks - 1;
        memcpy(sn->rows + (size_t)slot * t->stride + FL__ROW_CHUNK, &index, sizeof(index));
    }
    assert(sn->nchunks == t->chunks);
    pthread_mutex_unlock(&t->mu);
    *out = sn;
    return FL_OK;
}

/* Serial of temporary files written by this process, so that concurrent saves to one
 * path never share a temporary file. */
static _Atomic unsigned long ckpt_serial;

fl_status fl_table_snapshot_write(const fl_table_snapshot_t *sn, const char *path, const void *extra, size_t extra_len,
                                  fl_table_save_info_t *info, fl_err_t *err) {
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
#define MISMATCH(field, fmt, fv, ev)            \
    return fl_err_set(err, FL_INVALID_ARGUMENT, \
                      "checkpoint %s: " field " " fmt " in the file, " fmt " configured for this shard", path, fv, ev)
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
        const fl__row_head_t *h = fl__table_row(t, s);
        if (!(isfinite(q[s]) && q[s] >= 0.0))
            return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: slot %" PRIu64 " has priority %g", path, s,
                              q[s]);
        if (!isfinite(h->reward) || !(h->discount >= 0.0f && h->discount <= 1.0f))
            return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: slot %" PRIu64 " has reward %g, discount %g",
                              path, s, (double)h->reward, (double)h->discount);
        if (fl__table_slot_gone(t, s)) {
            if (q[s] != 0.0)
                return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: removed slot %" PRIu64 " has priority %g",
                                  path, s, q[s]);
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
            if (s >= w || fl__table_slot_gone(t, s) || t->live_pos[s] != UINT64_MAX)
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
        memcpy(&index, t->rows + (size_t)r * t->stride + FL__ROW_CHUNK, sizeof(index));
        if (index >= nchunks) {
            free(rows);
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "checkpoint %s: slot %" PRIu64 " names chunk %" PRIu64 " of %" PRIu64, path, r, index,
                              nchunks);
        }
        const uint16_t *ix = fl__table_row_idx(t, r);
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
        memcpy(&index, t->rows + (size_t)r * t->stride + FL__ROW_CHUNK, sizeof(index));
        memcpy(t->rows + (size_t)r * t->stride + FL__ROW_CHUNK, &chunks[index], sizeof(fl_chunk_t *));
    }
    for (uint64_t i = 0; i < nchunks; i++) fl__table_attach_chunk(t, chunks[i], rows[i]);
    free(rows);
    return FL_OK;
}

fl_status fl_table_load(const char *path, const fl_table_config_t *expected, fl_table_t **out, fl_err_t *err) {
    return fl_table_load_extra(path, expected, out, NULL, NULL, err);
}

/* A checkpoint being loaded: the file, what has been read of it, and what is built from
 * it. A read that comes up short clears `ok` and is reported once the CRC has been read
 * (as a read error), so that the phases below need not check every read. */
typedef struct {
    const char *path;
    ckpt_io_t io;
    uint64_t file_bytes;
    int ok;
    fl_table_config_t fc; /* the configuration the table is created with */
    ckpt_state_t st;
    fl_table_t *t;
    double *q;           /* (window) the slots' priorities */
    fl_chunk_t **chunks; /* (nchunks) built from the file, owned here until attached */
    uint64_t nchunks;
    int attached;   /* the table holds the chunks */
    uint8_t *extra; /* (extra_len) the extra section */
    uint64_t extra_len;
} load_t;

/* Frees what a failed load built. */
static void load_abandon(load_t *ld) {
    if (ld->io.f) fclose(ld->io.f);
    free(ld->q);
    free(ld->extra);
    if (ld->chunks && !ld->attached)
        for (uint64_t i = 0; i < ld->nchunks; i++) free(ld->chunks[i]); /* never shared */
    free(ld->chunks);
    fl_table_destroy(ld->t);
}

static fl_status load_open(load_t *ld, fl_err_t *err) {
    ld->io = (ckpt_io_t){fopen(ld->path, "rb"), crc32(0L, Z_NULL, 0), 0};
    if (!ld->io.f)
        return fl_err_set(err, errno == ENOENT ? FL_NOT_FOUND : FL_INTERNAL, "checkpoint %s: cannot open: %s", ld->path,
                          strerror(errno));
    setvbuf(ld->io.f, NULL, _IOFBF, 1 << 20);
    struct stat stt;
    if (fstat(fileno(ld->io.f), &stt) != 0)
        return fl_err_set(err, FL_INTERNAL, "checkpoint %s: cannot stat: %s", ld->path, strerror(errno));
    ld->file_bytes = (uint64_t)stt.st_size;
    return FL_OK;
}

/* Reads the header: magic, version and length first, then the rest, into *h. */
static fl_status load_header_bytes(load_t *ld, hdr_t *h, fl_err_t *err) {
    const char *path = ld->path;
    memset(h, 0, sizeof(*h));
    if (ld->file_bytes < 16 || !io_read(&ld->io, h->b, 16))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: %" PRIu64 " bytes, too short for a header", path,
                          ld->file_bytes);
    if (memcmp(h->b, FL_TABLE_CKPT_MAGIC, 8) != 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: bad magic, not a fleet replay checkpoint", path);
    h->at = 8;
    uint32_t version = get_u32(h), hlen = get_u32(h);
    if (version != FL_TABLE_CKPT_VERSION)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: format version %u, this build reads version %u",
                          path, version, FL_TABLE_CKPT_VERSION);
    if (hlen != FL_TABLE_CKPT_HEADER_BYTES)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: header length %u, expected %u for version %u", path,
                          hlen, FL_TABLE_CKPT_HEADER_BYTES, version);
    if (ld->file_bytes < FL_TABLE_CKPT_HEADER_BYTES || !io_read(&ld->io, h->b + 16, FL_TABLE_CKPT_HEADER_BYTES - 16))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: truncated: %" PRIu64 " bytes, header alone is %u",
                          path, ld->file_bytes, FL_TABLE_CKPT_HEADER_BYTES);
    return FL_OK;
}

/* Decodes and checks the header: a valid configuration (equal to `expected` where it
 * must be), consistent counters, and a file long enough for the slots they announce. */
static fl_status load_header(load_t *ld, const fl_table_config_t *expected, fl_err_t *err) {
    const char *path = ld->path;
    hdr_t h;
    FL_TRY(load_header_bytes(ld, &h, err));
    fl_table_config_t *fc = &ld->fc;
    const ckpt_state_t *st = &ld->st;
    uint64_t obs_bytes = 0;
    header_decode(&h, fc, &obs_bytes, &ld->st);
    size_t want_obs = 0;
    fl_err_t e2;
    fl_err_init(&e2);
    if (fl__table_check_config(fc, &want_obs, &e2) != FL_OK)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: bad configuration in the header: %s", path, e2.msg);
    if (obs_bytes != want_obs)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: obs_bytes %" PRIu64 " but the shape gives %zu",
                          path, obs_bytes, want_obs);
    if (expected) {
        FL_TRY(check_signature(path, fc, expected, err));
        fc->rebuild_every = expected->rebuild_every;
        fc->zstd_level = expected->zstd_level; /* chunks say whether they are compressed */
    }
    uint64_t want_window = st->inserted < fc->capacity ? st->inserted : fc->capacity;
    if (st->window != want_window || st->size > st->window || st->inserted > FL_TABLE_KEY_SEQ_MASK)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "checkpoint %s: inconsistent counters: inserted %" PRIu64 ", window %" PRIu64
                          ", size %" PRIu64 " for capacity %" PRIu64,
                          path, st->inserted, st->window, st->size, fc->capacity);
    int mts = fc->max_times_sampled > 0, live_list = fl_selector_ops(fc->selector)->live_list;
    uint64_t fixed = ckpt_fixed_bytes(st->window, st->size, fl__table_row_bytes(fc->frame_stack), mts, live_list);
    if (ld->file_bytes < FL_TABLE_CKPT_HEADER_BYTES + fixed + CKPT_TAIL_MIN)
        return fl_err_set(
            err, FL_INVALID_ARGUMENT,
            "checkpoint %s: %" PRIu64 " bytes, at least %" PRIu64 " expected for %" PRIu64 " slots (truncated)", path,
            ld->file_bytes, (uint64_t)FL_TABLE_CKPT_HEADER_BYTES + fixed + CKPT_TAIL_MIN, st->window);
    return FL_OK;
}

/* Creates the table and reads the slots into it: rows, priorities (into ld->q), the
 * removed-slot bitmap and the live list. */
static fl_status load_slots(load_t *ld, fl_err_t *err) {
    fl_table_config_t tc = ld->fc;
    fl_status s = fl_table_create(&tc, &ld->t, err);
    if (s != FL_OK) {
        fl_err_prefix(err, "checkpoint %s", ld->path);
        return s;
    }
    fl_table_t *t = ld->t;
    uint64_t w = ld->st.window;
    ld->q = malloc(w ? (size_t)w * sizeof(double) : 1);
    if (!ld->q)
        return fl_err_set(err, FL_NO_MEMORY, "checkpoint %s: out of memory for %" PRIu64 " priorities", ld->path, w);
    size_t rb = t->row_bytes;
    int ok = 1;
    for (uint64_t r = 0; ok && r < w; r++) ok = io_read(&ld->io, fl__table_row(t, r), rb);
    ok = ok && io_read(&ld->io, ld->q, (size_t)w * sizeof(double));
    if (t->gone) ok = ok && io_read(&ld->io, t->gone, (size_t)((w + 63) / 64) * sizeof(uint64_t));
    if (t->live_list) ok = ok && io_read(&ld->io, t->live_list, (size_t)ld->st.size * sizeof(uint64_t));
    ld->ok = ok;
    return FL_OK;
}

/* Reads the chunk section: every size is checked against what the file has left before
 * it is allocated or read, and every chunk is validated as it is rebuilt. */
static fl_status load_chunks(load_t *ld, fl_err_t *err) {
    const char *path = ld->path;
    const uint64_t w = ld->st.window, file_bytes = ld->file_bytes;
    ckpt_io_t *io = &ld->io;
    ld->ok = ld->ok && io_read(io, &ld->nchunks, sizeof(ld->nchunks));
    if (!ld->ok) return FL_OK;
    uint64_t nchunks = ld->nchunks;
    if (nchunks > w || (w > 0 && nchunks == 0))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: %" PRIu64 " chunks for %" PRIu64 " slots", path,
                          nchunks, w);
    if (!(ld->chunks = calloc(nchunks ? (size_t)nchunks : 1, sizeof(fl_chunk_t *))))
        return fl_err_set(err, FL_NO_MEMORY, "checkpoint %s: out of memory for %" PRIu64 " chunks", path, nchunks);
    for (uint64_t i = 0; i < nchunks; i++) {
        uint32_t head[2];
        uint64_t bytes = 0;
        if (!(ld->ok = io_read(io, head, sizeof(head)) && io_read(io, &bytes, sizeof(bytes)))) break;
        if (bytes > file_bytes - io->bytes || file_bytes - io->bytes - bytes < 8 + 4)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "checkpoint %s: chunk %" PRIu64 " of %" PRIu64 " bytes, the file has %" PRIu64
                              " left (truncated)",
                              path, i, bytes, file_bytes - io->bytes);
        uint8_t *data = malloc(bytes ? (size_t)bytes : 1);
        if (!data) return fl_err_set(err, FL_NO_MEMORY, "checkpoint %s: out of memory for chunk %" PRIu64, path, i);
        fl_status s = FL_OK;
        fl_err_t e2;
        fl_err_init(&e2);
        if ((ld->ok = io_read(io, data, (size_t)bytes)) &&
            (s = fl_chunk_from_data(&ld->t->lay, head[0], head[1], data, (size_t)bytes, &ld->chunks[i], &e2)) != FL_OK)
            fl_err_set(err, s, "checkpoint %s: chunk %" PRIu64 ": %s", path, i, e2.msg);
        free(data);
        if (s != FL_OK) return s;
        if (!ld->ok) break;
    }
    return FL_OK;
}

/* Reads the extra section, whose length must be what the file has left before the CRC,
 * and the CRC, which must match everything read before it. */
static fl_status load_extra_and_crc(load_t *ld, fl_err_t *err) {
    const char *path = ld->path;
    ckpt_io_t *io = &ld->io;
    uint64_t elen = UINT64_MAX;
    int ok = ld->ok && io_read(io, &elen, sizeof(elen));
    uint64_t want_extra = ok && ld->file_bytes - io->bytes >= 4 ? ld->file_bytes - io->bytes - 4 : 0;
    if (ok && (elen != want_extra || want_extra > FL_TABLE_CKPT_MAX_EXTRA))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "checkpoint %s: extra section of %" PRIu64 " bytes, but the file size leaves %" PRIu64
                          " (at most %u; truncated or trailing bytes)",
                          path, elen, want_extra, FL_TABLE_CKPT_MAX_EXTRA);
    ld->extra = malloc(want_extra ? (size_t)want_extra : 1);
    if (!ld->extra) return fl_err_set(err, FL_NO_MEMORY, "checkpoint %s: out of memory", path);
    ld->extra_len = want_extra;
    ok = ok && io_read(io, ld->extra, (size_t)want_extra);
    uint32_t want_crc = (uint32_t)io->crc, crc = 0;
    ok = ok && fread(&crc, 1, sizeof(crc), io->f) == sizeof(crc);
    if (!ok)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: read error after %" PRIu64 " bytes", path,
                          io->bytes);
    if (crc != want_crc)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: CRC-32 %08x in the file, %08x computed: corrupted",
                          path, crc, want_crc);
    return FL_OK;
}

/* Points the rows at their chunks, restores the counters and checks the whole table
 * (check_loaded, then fl_table_verify). */
static fl_status load_install(load_t *ld, fl_err_t *err) {
    const char *path = ld->path;
    fl_table_t *t = ld->t;
    const ckpt_state_t *st = &ld->st;
    uint64_t w = st->window;
    if (t->gone && w % 64 && (t->gone[(w - 1) / 64] >> (w % 64)) != 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: removed bits set past the window", path);
    FL_TRY(attach_loaded(path, t, w, ld->chunks, ld->nchunks, err));
    ld->attached = 1;
    t->inserted = st->inserted;
    t->window = st->window;
    t->size = st->size;
    t->sampled = st->sampled;
    t->removed = st->removed;
    t->updates_applied = st->updates_applied;
    t->updates_stale = st->updates_stale;
    t->rebuilds = st->rebuilds;
    t->since_rebuild = st->since_rebuild;
    t->draws_left = st->draws_left;
    t->fifo_head = st->fifo_head;
    t->max_priority = st->max_priority;
    t->rng = st->rng;
    if (!isfinite(st->max_priority) || st->max_priority < 0.0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: max_priority %g", path, st->max_priority);
    FL_TRY(check_loaded(path, t, ld->q, err));
    fl_err_t e2;
    fl_err_init(&e2);
    if (fl_table_verify(t, &e2) != FL_OK)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: inconsistent contents: %s", path, e2.msg);
    return FL_OK;
}

fl_status fl_table_load_extra(const char *path, const fl_table_config_t *expected, fl_table_t **out, void **extra,
                              size_t *extra_len, fl_err_t *err) {
    *out = NULL;
    if (extra) *extra = NULL;
    if (extra_len) *extra_len = 0;
    if (!path || !*path) return fl_err_set(err, FL_INVALID_ARGUMENT, "restore: empty checkpoint path");
    load_t ld;
    memset(&ld, 0, sizeof ld);
    ld.path = path;
    ld.ok = 1;
    fl_status s;
    if ((s = load_open(&ld, err)) != FL_OK || (s = load_header(&ld, expected, err)) != FL_OK ||
        (s = load_slots(&ld, err)) != FL_OK || (s = load_chunks(&ld, err)) != FL_OK ||
        (s = load_extra_and_crc(&ld, err)) != FL_OK || (s = load_install(&ld, err)) != FL_OK) {
        load_abandon(&ld);
        return s;
    }
    fclose(ld.io.f);
    free(ld.q);
    free(ld.chunks);
    *out = ld.t;
    if (extra && ld.extra_len) {
        *extra = ld.extra;
        ld.extra = NULL;
    }
    if (extra_len) *extra_len = (size_t)ld.extra_len;
    free(ld.extra);
    return FL_OK;
}
