/* server_stream: a replay shard's stream records (the hash map stream_id -> record, the
 * reclaiming of idle records and the eviction of the least recently used) and the one
 * place where an insert changes the table (fl__replay_apply_insert), which the live
 * Insert path (server_insert.c) and the recovery from the write-ahead log
 * (server_recovery.c) share. The bottom of replay/server*: it calls none of the others.
 * See replay/server.c for the state and the lock order. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "replay/ratelimit.h"
#include "replay/server_internal.h"
#include "replay/wal.h"

static size_t hash_id(uint64_t id) {
    id ^= id >> 33;
    id *= UINT64_C(0xff51afd7ed558ccd);
    id ^= id >> 33;
    return (size_t)id;
}

/* Removes the record at slot i (streams_mu held) and closes the gap it leaves in its
 * probe sequence by moving later entries back (linear probing without tombstones). */
static void map_remove_at(fl_replay_service_t *s, size_t i) {
    const size_t mask = s->streams_cap - 1;
    s->streams[i] = NULL;
    s->nstreams--;
    for (size_t j = (i + 1) & mask; s->streams[j]; j = (j + 1) & mask) {
        size_t home = hash_id(s->streams[j]->id) & mask;
        /* The entry at j stays when its home lies cyclically in (i, j]. */
        int stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (stays) continue;
        s->streams[i] = s->streams[j];
        s->streams[j] = NULL;
        i = j;
    }
}

/* Frees every record that no call is bound to and that has not been used for
 * stream_idle_s (streams_mu held), and notes when the next one can be due. */
static void reclaim_idle(fl_replay_service_t *s, double now) {
    double next = now + s->stream_idle_s;
    size_t freed = 0;
    for (size_t i = 0; i < s->streams_cap;) {
        fl__stream_rec_t *r = s->streams[i];
        if (r && r->users == 0 && now - r->last_used >= s->stream_idle_s) {
            map_remove_at(s, i); /* an entry may move into slot i: look at it again */
            pthread_mutex_destroy(&r->mu);
            free(r);
            freed++;
            continue;
        }
        if (r && r->users == 0 && r->last_used + s->stream_idle_s < next) next = r->last_used + s->stream_idle_s;
        i++;
    }
    /* Records released after this scan were used at or after `now`. */
    s->next_reclaim = next;
    s->streams_reclaimed += freed;
    if (freed)
        FL_INFO("replay shard %d: reclaimed %zu insert stream records idle for %g s or more (%zu left)", s->shard,
                freed, s->stream_idle_s, s->nstreams);
}

/* Eviction order when the map is full: records that applied at most one batch (what a
 * flood of fresh streams leaves) before the others, each group least recently used
 * first. */
static int evict_order(const void *a, const void *b) {
    const fl__stream_rec_t *x = *(fl__stream_rec_t *const *)a, *y = *(fl__stream_rec_t *const *)b;
    int bx = x->last_seq > 1, by = y->last_seq > 1;
    if (bx != by) return bx - by;
    return (x->last_used > y->last_used) - (x->last_used < y->last_used);
}

/* The map is full and no record has been idle for stream_idle_s (streams_mu held):
 * frees a sixteenth of max_streams (at least one) of the records no call is bound to, in
 * evict_order, so that a client opening streams faster than they go idle pushes out only
 * records nobody is using, and never locks a new writer out. A writer whose record went
 * this way and that resends a batch the shard had applied has it inserted twice (as
 * after stream_idle_s). Returns how many were freed: 0 when every record has a call. */
static size_t evict_lru(fl_replay_service_t *s, double now) {
    fl__stream_rec_t **idle = malloc(s->nstreams * sizeof *idle);
    if (!idle) return 0;
    size_t n = 0;
    for (size_t i = 0; i < s->streams_cap; i++)
        if (s->streams[i] && s->streams[i]->users == 0) idle[n++] = s->streams[i];
    size_t want = s->max_streams / 16 ? s->max_streams / 16 : 1;
    if (want > n) want = n;
    if (want) qsort(idle, n, sizeof *idle, evict_order);
    const size_t mask = s->streams_cap - 1;
    double youngest = 0;
    for (size_t k = 0; k < want; k++) {
        fl__stream_rec_t *r = idle[k];
        size_t h = hash_id(r->id) & mask;
        while (s->streams[h] != r) h = (h + 1) & mask;
        map_remove_at(s, h);
        if (k == 0 || now - r->last_used < youngest) youngest = now - r->last_used;
        pthread_mutex_destroy(&r->mu);
        free(r);
    }
    free(idle);
    uint64_t before = s->streams_evicted;
    s->streams_evicted += want;
    if (want && (before == 0 || s->streams_evicted / 10000 != before / 10000))
        FL_WARN(
            "replay shard %d: all %zu insert stream records (replay.max_streams) are taken, none idle for "
            "replay.stream_idle_s = %g s: freed the %zu least recently used with no call (idle %.1f s and more; "
            "%" PRIu64
            " so far). Clients open streams faster than they go idle: a flood, or writers that start "
            "a new stream per batch",
            s->shard, s->max_streams, s->stream_idle_s, want, youngest, s->streams_evicted);
    return want;
}

/* Doubles the map (streams_mu held); 0 when out of memory. */
static int map_grow(fl_replay_service_t *s) {
    size_t cap = s->streams_cap ? 2 * s->streams_cap : 64;
    fl__stream_rec_t **m = calloc(cap, sizeof *m);
    if (!m) return 0;
    for (size_t i = 0; i < s->streams_cap; i++) {
        fl__stream_rec_t *r = s->streams[i];
        if (!r) continue;
        size_t h = hash_id(r->id) & (cap - 1);
        while (m[h]) h = (h + 1) & (cap - 1);
        m[h] = r;
    }
    free(s->streams);
    s->streams = m;
    s->streams_cap = cap;
    return 1;
}

fl__stream_rec_t *fl__replay_get_stream(fl_replay_service_t *s, uint64_t id, int acquire, fl_err_t *err) {
    pthread_mutex_lock(&s->streams_mu);
    fl__stream_rec_t *r = NULL;
    if (s->streams_cap) {
        size_t h = hash_id(id) & (s->streams_cap - 1);
        while (s->streams[h] && s->streams[h]->id != id) h = (h + 1) & (s->streams_cap - 1);
        r = s->streams[h];
    }
    if (!r) {
        double now = fl_clock_sec();
        int full = acquire && s->nstreams >= s->max_streams;
        if ((full || 2 * (s->nstreams + 1) > s->streams_cap) && now >= s->next_reclaim) reclaim_idle(s, now);
        if (acquire && s->nstreams >= s->max_streams) evict_lru(s, now);
        if (acquire && s->nstreams >= s->max_streams) {
            size_t n = s->nstreams;
            pthread_mutex_unlock(&s->streams_mu);
            fl_err_set(err, FL_RESOURCE_EXHAUSTED,
                       "stream %" PRIu64
                       " refused: replay shard %d holds the records of %zu insert streams, as many "
                       "as replay.max_streams = %zu allows, and every one has an Insert call open; try again later",
                       id, s->shard, n, s->max_streams);
            return NULL;
        }
        if (2 * (s->nstreams + 1) > s->streams_cap && !map_grow(s)) {
            pthread_mutex_unlock(&s->streams_mu);
            fl_err_set(err, FL_NO_MEMORY, "replay shard %d: out of memory for stream records", s->shard);
            return NULL;
        }
        r = calloc(1, sizeof *r);
        if (!r) {
            pthread_mutex_unlock(&s->streams_mu);
            fl_err_set(err, FL_NO_MEMORY, "replay shard %d: out of memory for stream records", s->shard);
            return NULL;
        }
        r->id = id;
        r->last_used = now;
        pthread_mutex_init(&r->mu, NULL);
        size_t h = hash_id(id) & (s->streams_cap - 1);
        while (s->streams[h]) h = (h + 1) & (s->streams_cap - 1);
        s->streams[h] = r;
        s->nstreams++;
    }
    if (acquire) r->users++;
    pthread_mutex_unlock(&s->streams_mu);
    return r;
}

void fl__replay_put_stream(fl_replay_service_t *s, fl__stream_rec_t *r) {
    if (!r) return;
    pthread_mutex_lock(&s->streams_mu);
    r->users--;
    r->last_used = fl_clock_sec();
    pthread_mutex_unlock(&s->streams_mu);
}

void fl__replay_deadline_in(struct timespec *t, double sec) {
    clock_gettime(CLOCK_MONOTONIC, t);
    long ns = t->tv_nsec + (long)((sec - (double)(long)sec) * 1e9);
    t->tv_sec += (time_t)sec + ns / 1000000000L;
    t->tv_nsec = ns % 1000000000L;
}

fl_status fl__replay_apply_insert(fl_replay_service_t *s, fl__stream_rec_t *r, uint64_t sequence, uint64_t stream_key,
                                  const fl_wire_batch_t *b, fl_table_prep_t *prep, uint64_t *keys, fl_err_t *e) {
    if (prep) {
        fl_table_commit(prep, keys); /* prepared (validated, frames hashed) outside the log's lock */
    } else {
        fl_status st = fl_table_insert(s->table, b->count, b->obs, b->actions, b->rewards, b->discounts, b->next_obs,
                                       b->priorities, keys, e);
        if (st != FL_OK) return st;
    }
    r->last_seq = sequence;
    if (!r->key) r->key = stream_key;
    size_t slot = (size_t)(sequence % FL__REPLAY_KEY_RING);
    r->ring_seq[slot] = sequence;
    r->ring_key[slot] = keys[0];
    return FL_OK;
}
