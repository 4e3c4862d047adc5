/* server_recovery: how a replay shard's table comes to be at create, and the
 * write-ahead log's rotation at a checkpoint (docs/replay-durability.md, "How it works";
 * replay/server.h, fl_replay_service_create).
 *
 * At create the table is empty, loaded from the checkpoint given to restore from, or,
 * with the log on, recovered by the shard itself: its default checkpoint if it exists
 * (the table, the per-stream resend records and the log segment to resume from, kept in
 * the checkpoint's extra section), then every log record from that segment on, applied
 * through fl__replay_apply_insert like a live insert, then a fresh segment to append to.
 * A checkpoint to the default file with the log on rotates the log under the insert
 * mutex, so that the file holds exactly the inserts of the segments it lets the shard
 * delete.
 *
 * Ownership: the table, the log and the folder's lock file go to the service (freed by
 * its destroy, also after a failed create). Failure: a damaged log is FL_DATA_LOSS, a
 * checkpoint or record that does not fit the table FL_INVALID_ARGUMENT, a folder locked
 * by another process FL_FAILED_PRECONDITION, each naming the file; a failed checkpoint
 * leaves the previous one and every log segment. Thread-safety: recovery runs in create,
 * before the service serves; the checkpoint takes the locks of replay/server.c (the
 * caller holds ckpt_mu; wal_mu around the rotation and the copy). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "fleet.pb-c.h"
#include "replay/server_internal.h"
#include "replay/table.h"
#include "replay/wal.h"
#include "replay/wire.h"

/* With the log on, a checkpoint's extra section holds the stream records and the log
 * segment that follows the checkpoint (little-endian):
 *   magic "FLWALST2" (8), resume segment u64, streams u64, then per stream:
 *   id u64, last applied sequence u64, stream key u64 (0: not bound yet), ring entries
 *   u32, then per entry (sequence u64, first key u64).
 * Version 1 ("FLWALST1", written before streams had keys) is still read: the same
 * without the key, so its streams are bound again by their first batch after the load. */
#define WAL_EXTRA_MAGIC "FLWALST2"
#define WAL_EXTRA_MAGIC_V1 "FLWALST1"

static uint8_t *put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + 8;
}

static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The extra section for segment `resume` (caller holds wal_mu, under which the stream
 * records change). *out is malloc'd. */
static fl_status wal_extra_encode(fl_replay_service_t *s, uint64_t resume, uint8_t **out, size_t *len, fl_err_t *err) {
    pthread_mutex_lock(&s->streams_mu);
    size_t n = 24;
    for (size_t i = 0; i < s->streams_cap; i++) {
        const fl__stream_rec_t *r = s->streams[i];
        if (!r) continue;
        n += 28;
        for (int k = 0; k < FL__REPLAY_KEY_RING; k++) n += r->ring_seq[k] ? 16 : 0;
    }
    uint8_t *buf = malloc(n), *p = buf;
    if (!buf) {
        pthread_mutex_unlock(&s->streams_mu);
        return fl_err_set(err, FL_NO_MEMORY, "checkpoint: out of memory for %zu bytes of stream records", n);
    }
    memcpy(p, WAL_EXTRA_MAGIC, 8);
    p = put_u64(p + 8, resume);
    p = put_u64(p, (uint64_t)s->nstreams);
    for (size_t i = 0; i < s->streams_cap; i++) {
        const fl__stream_rec_t *r = s->streams[i];
        if (!r) continue;
        p = put_u64(p, r->id);
        p = put_u64(p, r->last_seq);
        p = put_u64(p, r->key);
        uint32_t cnt = 0;
        for (int k = 0; k < FL__REPLAY_KEY_RING; k++) cnt += r->ring_seq[k] != 0;
        for (int b = 0; b < 4; b++) p[b] = (uint8_t)(cnt >> (8 * b));
        p += 4;
        for (int k = 0; k < FL__REPLAY_KEY_RING; k++) {
            if (!r->ring_seq[k]) continue;
            p = put_u64(p, r->ring_seq[k]);
            p = put_u64(p, r->ring_key[k]);
        }
    }
    pthread_mutex_unlock(&s->streams_mu);
    *out = buf;
    *len = (size_t)(p - buf);
    return FL_OK;
}

/* Restores the stream records and the resume segment from a checkpoint's extra section
 * (version 2, or version 1 without keys). */
static fl_status wal_extra_decode(fl_replay_service_t *s, const char *path, const uint8_t *x, size_t n,
                                  uint64_t *resume, fl_err_t *err) {
    int v1 = n >= 8 && memcmp(x, WAL_EXTRA_MAGIC_V1, 8) == 0;
    if (n < 24 || (!v1 && memcmp(x, WAL_EXTRA_MAGIC, 8) != 0))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "checkpoint %s: its extra section (%zu bytes) is not the write-ahead log's stream records "
                          "(expected magic \"%s\" or \"%s\" and at least 24 bytes)",
                          path, n, WAL_EXTRA_MAGIC, WAL_EXTRA_MAGIC_V1);
    const size_t head = v1 ? 20 : 28; /* id, last, [key,] count */
    *resume = get_u64(x + 8);
    uint64_t nstreams = get_u64(x + 16);
    if (*resume == 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: log segment 0 in its extra section, expected >= 1",
                          path);
    size_t off = 24;
    for (uint64_t i = 0; i < nstreams; i++) {
        if (n - off < head)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "checkpoint %s: stream record %" PRIu64 " of %" PRIu64 " cut short at byte %zu of %zu",
                              path, i, nstreams, off, n);
        uint64_t id = get_u64(x + off), last = get_u64(x + off + 8), key = v1 ? 0 : get_u64(x + off + 16);
        const uint8_t *c = x + off + head - 4;
        uint32_t cnt = (uint32_t)c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 | (uint32_t)c[3] << 24;
        off += head;
        if (cnt > FL__REPLAY_KEY_RING || (n - off) / 16 < cnt)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "checkpoint %s: stream %" PRIu64 ": %" PRIu32
                              " remembered keys, expected at most %d "
                              "within the %zu bytes left",
                              path, id, cnt, FL__REPLAY_KEY_RING, n - off);
        fl__stream_rec_t *r = fl__replay_get_stream(s, id, 0, err);
        if (!r) return fl_err_set(err, FL_NO_MEMORY, "checkpoint %s: out of memory for stream records", path);
        r->last_seq = last;
        r->key = key;
        for (uint32_t k = 0; k < cnt; k++, off += 16) {
            uint64_t seq = get_u64(x + off);
            if (seq == 0 || seq > last)
                return fl_err_set(err, FL_INVALID_ARGUMENT,
                                  "checkpoint %s: stream %" PRIu64 " remembers sequence %" PRIu64
                                  ", expected 1 .. %" PRIu64,
                                  path, id, seq, last);
            r->ring_seq[seq % FL__REPLAY_KEY_RING] = seq;
            r->ring_key[seq % FL__REPLAY_KEY_RING] = get_u64(x + off + 8);
        }
    }
    if (off != n)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "checkpoint %s: %zu bytes after the %" PRIu64 " stream records",
                          path, n - off, nstreams);
    return FL_OK;
}

/* A checkpoint to the default file with the log on. Under the insert mutex: rotate the
 * log to segment N+1, copy the table and serialize the stream records with N+1, so that
 * the file holds exactly the inserts logged in segments <= N. Then write the file
 * (holding only ckpt_mu) and delete the segments below N+1, which it covers. */
fl_status fl__replay_wal_checkpoint(fl_replay_service_t *s, const char *path, fl_table_save_info_t *si, fl_err_t *err) {
    fl_table_snapshot_t *sn = NULL;
    uint8_t *extra = NULL;
    size_t extra_len = 0;
    pthread_mutex_lock(&s->wal_mu);
    fl_status st = fl_wal_rotate(s->wal, err);
    uint64_t resume = fl_wal_segment(s->wal);
    if (st == FL_OK) st = fl_table_snapshot_take(s->table, &sn, err);
    if (st == FL_OK) st = wal_extra_encode(s, resume, &extra, &extra_len, err);
    pthread_mutex_unlock(&s->wal_mu);
    if (st == FL_OK) st = fl_table_snapshot_write(sn, path, extra, extra_len, si, err);
    fl_table_snapshot_free(sn);
    free(extra);
    if (st != FL_OK) return st;
    size_t deleted = 0;
    fl_err_t e;
    fl_err_init(&e);
    if (fl_wal_delete_before(s->wal_dir, s->shard, resume, &deleted, &e) != FL_OK)
        FL_WARN("replay shard %d: checkpoint %s is written, but covered log segments remain: %s", s->shard, path,
                e.msg);
    FL_DEBUG("replay shard %d: log resumes at segment %" PRIu64 " after checkpoint %s; %zu segments deleted", s->shard,
             resume, path, deleted);
    return FL_OK;
}

/* Replays the records of the log from segment `start` on into the table, through
 * apply_insert; counts what it did. */
static fl_status wal_replay(fl_replay_service_t *s, uint64_t start, uint64_t *last_seg, uint64_t *records,
                            uint64_t *items, uint64_t *skipped, fl_err_t *err) {
    fl_wal_reader_t *rd = NULL;
    FL_TRY(fl_wal_reader_open(s->wal_dir, s->shard, start, &rd, err));
    uint64_t *keys = NULL;
    size_t keys_cap = 0;
    fl_status st = FL_OK;
    /* What the log holds was acknowledged under the limits of its day: only the table's
     * own signature is checked again, never replay.max_abs_reward or max_priority. */
    fl_wire_sig_t sig = s->sig;
    sig.max_abs_reward = sig.max_priority = 0.0;
    for (;;) {
        const void *p;
        size_t n;
        uint64_t seg = 0, off = 0;
        if ((st = fl_wal_reader_next(rd, &p, &n, &seg, &off, err)) != FL_OK || !p) break;
        char path[FL_REPLAY_DIR_MAX + 64];
        fl_wal_segment_path(path, sizeof path, s->wal_dir, s->shard, seg);
        Fleet__InsertRequest *req = fleet__insert_request__unpack(NULL, n, p);
        if (!req || req->sequence == 0) {
            if (req) fleet__insert_request__free_unpacked(req, NULL);
            st = fl_err_set(err, FL_DATA_LOSS,
                            "wal %s: the record at offset %" PRIu64 " (%zu bytes) is not a valid fleet.InsertRequest",
                            path, off, n);
            break;
        }
        fl_wire_batch_t b;
        fl_err_t e;
        fl_err_init(&e);
        if (fl_wire_decode_batch(req->batch, &sig, FL_WIRE_NEED_PRIORITIES, &b, &e) != FL_OK) {
            st = fl_err_set(err, FL_INVALID_ARGUMENT,
                            "wal %s: the record at offset %" PRIu64
                            " does not fit this shard's table (was the "
                            "configuration changed?): %s",
                            path, off, e.msg);
            fleet__insert_request__free_unpacked(req, NULL);
            break;
        }
        if (b.count > keys_cap) {
            uint64_t *k = realloc(keys, b.count * sizeof *k);
            if (!k) {
                st = fl_err_set(err, FL_NO_MEMORY, "wal %s: out of memory for %zu keys", path, b.count);
                fleet__insert_request__free_unpacked(req, NULL);
                break;
            }
            keys = k;
            keys_cap = b.count;
        }
        fl__stream_rec_t *r = fl__replay_get_stream(s, req->stream_id, 0, &e);
        if (!r) {
            st = fl_err_set(err, FL_NO_MEMORY, "wal %s: out of memory for stream records", path);
            fleet__insert_request__free_unpacked(req, NULL);
            break;
        }
        pthread_mutex_lock(&r->mu);
        pthread_mutex_lock(&s->wal_mu);
        if (req->sequence <= r->last_seq) {
            (*skipped)++;
        } else if (fl__replay_apply_insert(s, r, req->sequence, req->stream_key, &b, NULL, keys, &e) == FL_OK) {
            (*items) += b.count;
        } else {
            /* The live shard refused it the same way (and acknowledged nothing). */
            FL_WARN("replay shard %d: wal %s offset %" PRIu64 ": skipped, as when it was received: %s", s->shard, path,
                    off, e.msg);
            (*skipped)++;
        }
        pthread_mutex_unlock(&s->wal_mu);
        pthread_mutex_unlock(&r->mu);
        (*records)++;
        fleet__insert_request__free_unpacked(req, NULL);
    }
    free(keys);
    fl_wal_torn_t torn;
    if (st == FL_OK && fl_wal_reader_torn(rd, &torn)) {
        FL_WARN("replay shard %d: wal %s: cutting a torn tail of %" PRIu64 " bytes at offset %" PRIu64
                " (%s); it was never acknowledged",
                s->shard, torn.path, torn.bytes, torn.offset, torn.why);
        st = fl_wal_reader_truncate_torn(rd, err);
    }
    *last_seg = fl_wal_reader_last_segment(rd);
    fl_wal_reader_close(rd);
    return st;
}

/* Recovery at create with the log on (docs/replay-durability.md): the table and the stream records
 * from replay.checkpoint_dir/shard-<id>.ckpt when it exists (else an empty table and
 * segment 1), every record of the log from the checkpoint's segment on, then a fresh
 * segment to append to. The folder is flock'ed so that two processes never share a log. */
static fl_status wal_recover(fl_replay_service_t *s, const fl_table_config_t *tc, fl_err_t *err) {
    double t0 = fl_clock_sec();
    char lock[FL_REPLAY_DIR_MAX + 64];
    snprintf(lock, sizeof lock, "%s/shard-%d.wal.lock", s->wal_dir, s->shard);
    s->wal_lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s->wal_lock_fd < 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay.wal: cannot open %s: %s (replay.checkpoint_dir must be "
                          "an existing, writable folder)",
                          lock, strerror(errno));
    if (flock(s->wal_lock_fd, LOCK_EX | LOCK_NB) != 0)
        return fl_err_set(err, FL_FAILED_PRECONDITION,
                          "replay.wal: %s is locked: another process serves shard %d from replay.checkpoint_dir %s",
                          lock, s->shard, s->wal_dir);
    uint64_t start = 1;
    void *extra = NULL;
    size_t extra_len = 0;
    fl_status st = fl_table_load_extra(s->ckpt_default, tc, &s->table, &extra, &extra_len, err);
    int from_ckpt = st == FL_OK;
    if (st == FL_NOT_FOUND) {
        st = fl_table_create(tc, &s->table, err);
    } else if (st == FL_OK && extra_len) {
        st = wal_extra_decode(s, s->ckpt_default, extra, extra_len, &start, err);
    } else if (st == FL_OK) {
        /* A checkpoint written without the log: it says nothing about log segments. */
        uint64_t *segs = NULL;
        size_t nseg = 0;
        st = fl_wal_list(s->wal_dir, s->shard, &segs, &nseg, err);
        free(segs);
        if (st == FL_OK && nseg)
            st = fl_err_set(err, FL_FAILED_PRECONDITION,
                            "checkpoint %s was written without replay.wal (it records no log position), and %zu log "
                            "segments shard-%d.wal.* exist in %s: remove the segments (their inserts are lost) or the "
                            "checkpoint",
                            s->ckpt_default, nseg, s->shard, s->wal_dir);
    }
    free(extra);
    if (st != FL_OK) return st;
    fl_table_info_t ti0;
    fl_table_info(s->table, &ti0);
    size_t stale = 0;
    fl_err_t e;
    fl_err_init(&e);
    if (fl_wal_delete_before(s->wal_dir, s->shard, start, &stale, &e) != FL_OK)
        FL_WARN("replay shard %d: log segments covered by the checkpoint remain: %s", s->shard, e.msg);
    uint64_t last = 0, records = 0, items = 0, skipped = 0;
    FL_TRY(wal_replay(s, start, &last, &records, &items, &skipped, err));
    uint64_t next = last ? last + 1 : start;
    FL_TRY(fl_wal_open(s->wal_dir, s->shard, next, s->wal_fsync, &s->wal, err));
    /* The rate limiter continues from the recovered counters. */
    fl_table_info_t ti;
    fl_table_info(s->table, &ti);
    s->rl.inserted = ti.inserted;
    s->rl.sampled = ti.sampled;
    fl_ratelimit_clamp(&s->rl);
    char segs[64] = "";
    if (last) snprintf(segs, sizeof segs, " of segments %" PRIu64 " .. %" PRIu64, start, last);
    FL_INFO("replay shard %d: recovered %" PRIu64 " items in %.3f s (%" PRIu64 " from %s, %" PRIu64 " in %" PRIu64
            " log records%s, %" PRIu64 " skipped); size %" PRIu64 "; logging to %s segment %" PRIu64 "%s",
            s->shard, ti.inserted, fl_clock_sec() - t0, ti0.inserted, from_ckpt ? s->ckpt_default : "no checkpoint",
            items, records, segs, skipped, ti.size, s->wal_dir, next, s->wal_fsync ? " (fdatasync per record)" : "");
    return FL_OK;
}

fl_status fl__replay_open_table(fl_replay_service_t *s, const fl_table_config_t *tc, const char *restore_path, int wal,
                                fl_err_t *err) {
    if (!(restore_path && *restore_path)) return wal ? wal_recover(s, tc, err) : fl_table_create(tc, &s->table, err);
    FL_TRY(fl_table_load(restore_path, tc, &s->table, err));
    /* The rate limiter continues from the restored counters. */
    fl_table_info_t ti;
    fl_table_info(s->table, &ti);
    s->rl.inserted = ti.inserted;
    s->rl.sampled = ti.sampled;
    fl_ratelimit_clamp(&s->rl);
    FL_INFO("replay shard %d: restored %" PRIu64 " items (%" PRIu64 " inserted, %" PRIu64 " sampled) from %s", s->shard,
            ti.size, ti.inserted, ti.sampled, restore_path);
    return FL_OK;
}
