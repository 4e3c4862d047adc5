/* server: the fleet.Replay service of one shard (see server.h): its RPC handlers, the
 * rate limiter's waits, checkpoints and the service's lifetime. How the table comes to be
 * at create (empty, restored, or recovered from the write-ahead log) and the log's
 * rotation at a checkpoint are in replay/server_recovery.c; what the two share is in
 * replay/server_internal.h.
 *
 * State beyond the table: a hash map stream_id -> per-stream record (last applied
 * sequence, the writer's key and the first keys of its recent batches), each record with
 * its own mutex held across "check key and sequence, insert, record sequence" so that two
 * calls of the same stream can never both apply one batch. A record counts the calls
 * bound to it (under the map's mutex); one with none for replay.stream_idle_s is freed
 * when the map needs room (at most replay.max_streams records). A mutex + condition
 * variable on which Sample
 * waits for the table to fill, signalled after every applied insert; and atomic
 * counters for what the table does not count itself. Lock order: a stream record, then
 * the table (inside fl_table_*), released before the service mutex is taken.
 *
 * Write-ahead log (replay.wal, replay/wal.h): the insert mutex wal_mu is held across
 * "append the InsertRequest to the log, insert into the table, record the sequence"
 * (inside a stream record's lock), so the log's order is the table's insertion order and
 * replaying it through the same fl__replay_apply_insert gives the same keys. With the log on, stream
 * records are only changed under wal_mu, so a checkpoint reads them under wal_mu alone.
 * Lock order: a stream record, wal_mu, the streams map, the table. */
#include "replay/server.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/methods.h"
#include "common/procmem.h"
#include "common/rng.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "replay/ratelimit.h"
#include "replay/selector.h"
#include "replay/server_internal.h"
#include "replay/wal.h"

/* Reserve for everything but the observations in a sample response. */
#define SAMPLE_MSG_SLACK (1u << 20)

/* ------------------------------------------------------------ streams ---- */

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
        FL_WARN("replay shard %d: all %zu insert stream records (replay.max_streams) are taken, none idle for "
                "replay.stream_idle_s = %g s: freed the %zu least recently used with no call (idle %.1f s and more; "
                "%" PRIu64 " so far). Clients open streams faster than they go idle: a flood, or writers that start "
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
                       "stream %" PRIu64 " refused: replay shard %d holds the records of %zu insert streams, as many "
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

/* An insert the rate limiter let through ended: its `admitted` rows leave the
 * reservation (rate_wait_insert) and the `applied` ones are counted as inserted. */
static void insert_ended(fl_replay_service_t *s, uint64_t admitted, uint64_t applied) {
    pthread_mutex_lock(&s->mu);
    s->insert_reserved -= admitted;
    fl_ratelimit_inserted(&s->rl, applied);
    if (applied && s->waiters > 0) pthread_cond_broadcast(&s->cv);
    if (applied < admitted && s->insert_head) pthread_cond_broadcast(&s->insert_cv); /* room it did not use */
    pthread_mutex_unlock(&s->mu);
}

/* Whether n more rows may go in now (s->mu held): the rate limiter's count plus the rows
 * let through and not yet inserted. */
static int may_insert(const fl_replay_service_t *s, uint64_t n) {
    return fl_ratelimit_can_insert(&s->rl, s->insert_reserved + n);
}

void fl__replay_deadline_in(struct timespec *t, double sec) {
    clock_gettime(CLOCK_MONOTONIC, t);
    long ns = t->tv_nsec + (long)((sec - (double)(long)sec) * 1e9);
    t->tv_sec += (time_t)sec + ns / 1000000000L;
    t->tv_nsec = ns % 1000000000L;
}

/* The entry of client `key` among the waiting inserts' clients (s->mu held): its own,
 * else a free one (there are more entries than places). */
static int insert_client(fl_replay_service_t *s, const char *key) {
    int free_one = -1;
    for (int i = 0; i < s->n_insert_clients; i++) {
        fl__insert_client_t *c = &s->insert_clients[i];
        if (c->n > 0 && strcmp(c->key, key) == 0) return i;
        if (c->n == 0 && free_one < 0) free_one = i;
    }
    snprintf(s->insert_clients[free_one].key, sizeof s->insert_clients[free_one].key, "%s", key);
    return free_one;
}

/* Every place is taken: the newest place of the client that holds the most, when that is
 * at least two more than `mine` holds (and no other place is already giving way), so
 * that the places are shared out among the clients that want them; NULL otherwise. */
static fl__insert_place_t *place_to_give_way(fl_replay_service_t *s, int mine) {
    if (s->insert_giving_way > 0) return NULL;
    int most = -1;
    for (int i = 0; i < s->n_insert_clients; i++)
        if (s->insert_clients[i].n > 0 && (most < 0 || s->insert_clients[i].n > s->insert_clients[most].n)) most = i;
    if (most < 0 || s->insert_clients[most].n < s->insert_clients[mine].n + 2) return NULL;
    fl__insert_place_t *newest = NULL;
    for (fl__insert_place_t *p = s->insert_head; p; p = p->next)
        if (p->client == most && !p->give_way) newest = p;
    return newest;
}

static void unlink_place(fl_replay_service_t *s, fl__insert_place_t *me) {
    fl__insert_place_t **pp = &s->insert_head, *prev = NULL;
    while (*pp != me) prev = *pp, pp = &(*pp)->next;
    *pp = me->next;
    if (s->insert_tail == me) s->insert_tail = prev;
}

/* Blocks an insert of n items until the rate limiter lets it through (or the shard
 * stops). Held inserts go in the order they came (a large batch is not passed over by
 * smaller ones that keep coming). At most max_insert_waiters inserts wait at once, so
 * that waiting inserts never hold every serving thread, and the places are shared among
 * clients (fl_rpc_peer_key: a remote host, or a connection on loopback): when all are
 * taken, a client that holds fewer than another takes the other's newest place, which
 * gives way. An insert refused, or one that gave way, gets RESOURCE_EXHAUSTED, which
 * writers treat as "not acknowledged" and send again later. */
static fl_status rate_wait_insert(fl_replay_service_t *s, uint64_t n, fl_rpc_reply_t *reply) {
    pthread_mutex_lock(&s->mu);
    if (!s->insert_head && may_insert(s, n)) {
        s->insert_reserved += n;
        pthread_mutex_unlock(&s->mu);
        return FL_OK;
    }
    char key[96];
    fl__insert_place_t me = {.n = n,
                             .client = insert_client(s, fl_rpc_peer_key(fl_rpc_reply_peer(reply), key, sizeof key))};
    if (s->insert_waiters >= s->max_insert_waiters) {
        fl__insert_place_t *other = place_to_give_way(s, me.client);
        if (!other) {
            int w = s->insert_waiters, held = s->insert_clients[me.client].n;
            pthread_mutex_unlock(&s->mu);
            return fl_rpc_reply_error(reply, FL_RESOURCE_EXHAUSTED,
                                      "rate limited: %d inserts already wait for the learner to sample "
                                      "(samples_per_insert %g; at most %d wait, shared among clients, and %d of "
                                      "them are this client's); send again later",
                                      w, s->rl.spi, s->max_insert_waiters, held);
        }
        other->give_way = 1;
        const uint64_t k = ++s->inserts_gave_way;
        if (k <= 10 || k % 1000 == 0)
            fl_log(FL_LOG_WARN,
                   "replay shard %d: every place for inserts held by the rate limiter is taken (%d); client %s "
                   "holds %d of them: its newest gives way to %s (%" PRIu64 " so far)",
                   s->shard, s->max_insert_waiters, s->insert_clients[other->client].key,
                   s->insert_clients[other->client].n, key, k);
        s->insert_giving_way++;
        pthread_cond_broadcast(&s->insert_cv);
    }
    if (s->insert_tail)
        s->insert_tail->next = &me;
    else
        s->insert_head = &me;
    s->insert_tail = &me;
    s->insert_clients[me.client].n++;
    s->insert_waiters++;
    double t0 = fl_clock_sec();
    while (!s->stopping && !me.give_way && !(s->insert_head == &me && may_insert(s, n))) {
        struct timespec until;
        fl__replay_deadline_in(&until, 0.2);
        pthread_cond_timedwait(&s->insert_cv, &s->mu, &until);
    }
    unlink_place(s, &me);
    s->insert_clients[me.client].n--;
    s->insert_waiters--;
    if (me.give_way) s->insert_giving_way--;
    int admitted = !s->stopping && !me.give_way;
    if (admitted) s->insert_reserved += n;
    if (s->insert_head) pthread_cond_broadcast(&s->insert_cv); /* the next one may go */
    s->insert_blocked_s += fl_clock_sec() - t0;
    int stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (admitted) return FL_OK;
    if (stopping) return fl_rpc_reply_error(reply, FL_UNAVAILABLE, "replay shard %d is shutting down", s->shard);
    return fl_rpc_reply_error(reply, FL_RESOURCE_EXHAUSTED,
                              "rate limited: this insert gave its waiting place to another client's (at most %d wait, "
                              "shared among clients); send again later",
                              s->max_insert_waiters);
}

static uint64_t table_size(fl_replay_service_t *s) {
    fl_table_info_t ti;
    fl_table_info(s->table, &ti);
    return ti.size;
}

/* ------------------------------------------------------------- Insert ---- */

typedef struct insert_call {
    int have_stream;
    uint64_t stream_id;
    fl__stream_rec_t *rec;
    uint64_t batches, items;
    uint64_t *first_keys; /* (batches) */
    size_t keys_cap;
    uint64_t *keybuf; /* scratch: keys of one batch */
    size_t keybuf_cap;
} insert_call;

static void *insert_open(void *user) {
    (void)user;
    return calloc(1, sizeof(insert_call));
}

static void insert_call_free(insert_call *c) {
    if (!c) return;
    free(c->first_keys);
    free(c->keybuf);
    free(c);
}

static fl_status reject(fl_replay_service_t *s, fl_rpc_reply_t *reply, const Fleet__InsertRequest *req,
                        const fl_err_t *e) {
    atomic_fetch_add(&s->rejected, 1);
    return fl_rpc_reply_error(reply, e->code, "stream %" PRIu64 " sequence %" PRIu64 ": %s", req->stream_id,
                              req->sequence, e->msg);
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

/* The request's own checks: a sequence, a stream key, the call's one stream, a batch that
 * fits the table and its limits (*b, decoded). A rejection is answered (and counted)
 * here. */
static fl_status check_request(fl_replay_service_t *s, const insert_call *c, const Fleet__InsertRequest *req,
                               fl_wire_batch_t *b, fl_rpc_reply_t *reply) {
    fl_err_t e;
    fl_err_init(&e);
    if (req->sequence == 0) {
        fl_err_set(&e, FL_INVALID_ARGUMENT, "sequence: got 0, expected >= 1");
        return reject(s, reply, req, &e);
    }
    if (req->stream_key == 0) {
        fl_err_set(&e, FL_INVALID_ARGUMENT, "stream_key: got 0, expected the writer's random nonzero key");
        return reject(s, reply, req, &e);
    }
    if (c->have_stream && req->stream_id != c->stream_id) {
        fl_err_set(&e, FL_INVALID_ARGUMENT, "stream_id: got %" PRIu64 ", expected %" PRIu64 " (one stream per call)",
                   req->stream_id, c->stream_id);
        return reject(s, reply, req, &e);
    }
    if (fl_wire_decode_batch(req->batch, &s->sig, FL_WIRE_NEED_PRIORITIES | FL_WIRE_FINITE_OBS, b, &e) != FL_OK)
        return reject(s, reply, req, &e);
    return FL_OK;
}

/* Binds the call to its stream's record on its first message, and makes room for one
 * more first key and for the keys of a batch of `count`. */
static fl_status prepare_call(fl_replay_service_t *s, insert_call *c, uint64_t stream_id, size_t count,
                              fl_rpc_reply_t *reply) {
    if (!c->have_stream) {
        fl_err_t e;
        fl_err_init(&e);
        c->rec = fl__replay_get_stream(s, stream_id, 1, &e);
        if (!c->rec)
            return fl_rpc_reply_error(reply, e.code == FL_NO_MEMORY ? FL_RESOURCE_EXHAUSTED : e.code, "%s", e.msg);
        c->have_stream = 1;
        c->stream_id = stream_id;
    }
    if (c->batches == c->keys_cap) {
        size_t cap = c->keys_cap ? 2 * c->keys_cap : 16;
        uint64_t *k = realloc(c->first_keys, cap * sizeof *k);
        if (!k) return fl_rpc_reply_error(reply, FL_RESOURCE_EXHAUSTED, "replay shard out of memory");
        c->first_keys = k;
        c->keys_cap = cap;
    }
    if (count > c->keybuf_cap) {
        uint64_t *k = realloc(c->keybuf, count * sizeof *k);
        if (!k) return fl_rpc_reply_error(reply, FL_RESOURCE_EXHAUSTED, "replay shard out of memory");
        c->keybuf = k;
        c->keybuf_cap = count;
    }
    return FL_OK;
}

/* A new batch of stream record r (the caller holds r->mu). With the log on, the message
 * is in the log before the table changes (and before anything is acknowledged), in the
 * order of the table's inserts: the table's own work on the batch (checks, frame
 * hashing) comes first, outside the lock that orders log and table, so that a batch the
 * table refuses is never logged. keys (b->count) receives the batch's keys. */
static fl_status log_and_apply(fl_replay_service_t *s, fl__stream_rec_t *r, const Fleet__InsertRequest *req,
                               const uint8_t *msg, size_t len, const fl_wire_batch_t *b, uint64_t *keys, fl_err_t *e) {
    if (!s->wal) return fl__replay_apply_insert(s, r, req->sequence, req->stream_key, b, NULL, keys, e);
    fl_table_prep_t *prep = NULL;
    FL_TRY(fl_table_prepare(s->table, b->count, b->obs, b->actions, b->rewards, b->discounts, b->next_obs,
                            b->priorities, &prep, e));
    pthread_mutex_lock(&s->wal_mu);
    fl_err_t we;
    fl_err_init(&we);
    fl_status st;
    if (fl_wal_append(s->wal, msg, len, &we) != FL_OK) {
        st = fl_err_set(e, FL_UNAVAILABLE, "write-ahead log: %s (nothing inserted; send again)", we.msg);
        fl_table_prep_free(prep);
    } else {
        st = fl__replay_apply_insert(s, r, req->sequence, req->stream_key, b, prep, keys, e);
    }
    pthread_mutex_unlock(&s->wal_mu);
    return st;
}

/* The stream's own rules for a message (r->mu held): the key it was bound to, and how far
 * a new batch may run past the last one. */
static fl_status check_stream(const fl__stream_rec_t *r, const Fleet__InsertRequest *req, fl_err_t *e) {
    if (r->key && req->stream_key != r->key)
        return fl_err_set(e, FL_PERMISSION_DENIED,
                          "stream %" PRIu64 " belongs to another writer (its batches carry another stream_key)",
                          req->stream_id);
    if (r->last_seq && req->sequence > r->last_seq && req->sequence - r->last_seq > FL_REPLAY_MAX_SEQUENCE_STEP)
        return fl_err_set(e, FL_INVALID_ARGUMENT,
                          "sequence: got %" PRIu64 ", expected 1 .. %" PRIu64 " (the stream's last batch is %" PRIu64
                          ": resends up to it, new batches at most %" PRIu64 " past it)",
                          req->sequence, r->last_seq + FL_REPLAY_MAX_SEQUENCE_STEP, r->last_seq,
                          FL_REPLAY_MAX_SEQUENCE_STEP);
    return FL_OK;
}

/* Inserts the batch of the call's stream unless it is a resend (sequence not above the
 * stream's last), after the rate limiter lets a new batch through. *first_key receives
 * its first key (a resend's as remembered, else UINT64_MAX), *applied whether it went
 * in. A failure is answered here (a refusal of the stream, the table or the log as a
 * rejection). */
static fl_status insert_batch(fl_replay_service_t *s, insert_call *c, const Fleet__InsertRequest *req,
                              const uint8_t *msg, size_t len, const fl_wire_batch_t *b, uint64_t *first_key,
                              int *applied, fl_rpc_reply_t *reply) {
    fl__stream_rec_t *r = c->rec;
    *first_key = UINT64_MAX;
    *applied = 0;
    fl_err_t e;
    fl_err_init(&e);
    pthread_mutex_lock(&r->mu);
    fl_status st = check_stream(r, req, &e);
    int resend = req->sequence <= r->last_seq;
    pthread_mutex_unlock(&r->mu);
    if (st != FL_OK) return reject(s, reply, req, &e);
    if (!resend) FL_TRY(rate_wait_insert(s, b->count, reply));
    pthread_mutex_lock(&r->mu);
    if ((st = check_stream(r, req, &e)) != FL_OK) { /* another call of the stream may have moved it meanwhile */
    } else if (req->sequence <= r->last_seq) {
        size_t slot = (size_t)(req->sequence % FL__REPLAY_KEY_RING);
        if (r->ring_seq[slot] == req->sequence) *first_key = r->ring_key[slot];
    } else if ((st = log_and_apply(s, r, req, msg, len, b, c->keybuf, &e)) == FL_OK) {
        *first_key = c->keybuf[0];
        *applied = 1;
    }
    pthread_mutex_unlock(&r->mu);
    if (!resend) insert_ended(s, b->count, *applied ? b->count : 0);
    if (st != FL_OK) return reject(s, reply, req, &e);
    return FL_OK;
}

static fl_status insert_message(void *user, void *state, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply) {
    fl_replay_service_t *s = user;
    insert_call *c = state;
    if (!c) return fl_rpc_reply_error(reply, FL_RESOURCE_EXHAUSTED, "replay shard out of memory");
    if (s->participants) {
        atomic_fetch_add(&s->rejected, 1);
        return fl_rpc_reply_error(reply, FL_FAILED_PRECONDITION,
                                  "replay shard %d runs deterministic rounds (run.deterministic): transitions come "
                                  "through Round, not Insert",
                                  s->shard);
    }
    Fleet__InsertRequest *req = fleet__insert_request__unpack(NULL, len, msg);
    if (!req) {
        atomic_fetch_add(&s->rejected, 1);
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT,
                                  "InsertRequest: %zu bytes that do not parse as a fleet.InsertRequest", len);
    }
    fl_wire_batch_t b;
    uint64_t first_key = UINT64_MAX;
    int applied = 0;
    fl_status st;
    if ((st = check_request(s, c, req, &b, reply)) == FL_OK &&
        (st = prepare_call(s, c, req->stream_id, b.count, reply)) == FL_OK &&
        (st = insert_batch(s, c, req, msg, len, &b, &first_key, &applied, reply)) == FL_OK) {
        if (applied) {
            atomic_fetch_add(&s->insert_batches, 1);
            c->items += b.count;
        }
        c->first_keys[c->batches++] = first_key;
    }
    fleet__insert_request__free_unpacked(req, NULL);
    return st;
}

static fl_status insert_close(void *user, void *state, fl_status why, fl_rpc_reply_t *reply) {
    fl_replay_service_t *s = user;
    insert_call *c = state;
    fl_status st = FL_OK;
    if (why == FL_OK && reply) {
        if (!c) {
            st = fl_rpc_reply_error(reply, FL_RESOURCE_EXHAUSTED, "replay shard out of memory");
        } else {
            Fleet__InsertResponse resp = FLEET__INSERT_RESPONSE__INIT;
            resp.stream_id = c->stream_id;
            if (c->rec) {
                pthread_mutex_lock(&c->rec->mu);
                resp.last_sequence = c->rec->last_seq;
                pthread_mutex_unlock(&c->rec->mu);
            }
            resp.batches = c->batches;
            resp.items = c->items;
            resp.table_size = table_size(s);
            resp.n_first_keys = c->batches;
            resp.first_keys = c->first_keys;
            st = fl_rpc_reply_pb(reply, &resp.base);
        }
    }
    if (c) fl__replay_put_stream(s, c->rec);
    insert_call_free(c);
    return st;
}

/* ------------------------------------------------------------- Sample ---- */

/* The waiting-place entry of client `peer` (s->mu held): its own, else a free one (one
 * is free whenever fewer than FL_REPLAY_MAX_SAMPLE_WAITERS calls wait). */
static fl__sample_waiter_t *waiter_entry(fl_replay_service_t *s, const char *peer) {
    fl__sample_waiter_t *free_one = NULL;
    for (int i = 0; i < FL_REPLAY_MAX_SAMPLE_WAITERS; i++) {
        fl__sample_waiter_t *w = &s->waiting[i];
        if (w->n > 0 && strncmp(w->peer, peer, sizeof w->peer - 1) == 0) return w;
        if (w->n == 0 && !free_one) free_one = w;
    }
    if (free_one) snprintf(free_one->peer, sizeof free_one->peer, "%s", peer);
    return free_one;
}

/* Waits (up to timeout_ms) until B items may be sampled: the table holds min_size items
 * and the rate limiter allows it. On success the B samples are counted by the limiter
 * (the caller then draws them). peer: the calling client, which may have at most
 * FL_REPLAY_MAX_SAMPLE_WAITERS_PER_CLIENT calls waiting. */
static fl_status wait_for_data(fl_replay_service_t *s, size_t B, uint32_t timeout_ms, const char *peer,
                               fl_rpc_reply_t *reply) {
    pthread_mutex_lock(&s->mu);
    uint64_t size = table_size(s);
    if (fl_ratelimit_can_sample(&s->rl, B, size)) goto allowed;
    fl__sample_waiter_t *mine = timeout_ms == 0 || s->waiters >= FL_REPLAY_MAX_SAMPLE_WAITERS ? NULL
                                                                                             : waiter_entry(s, peer);
    if (!mine || mine->n >= FL_REPLAY_MAX_SAMPLE_WAITERS_PER_CLIENT) {
        char why[160] = "";
        if (mine)
            snprintf(why, sizeof why,
                     "; not waiting: this client already has %d Sample calls waiting (at most %d per client)", mine->n,
                     FL_REPLAY_MAX_SAMPLE_WAITERS_PER_CLIENT);
        else if (timeout_ms)
            snprintf(why, sizeof why, "; not waiting: %d Sample calls already wait (at most %d at once)", s->waiters,
                     FL_REPLAY_MAX_SAMPLE_WAITERS);
        pthread_mutex_unlock(&s->mu);
        if (size < s->min_size)
            return fl_rpc_reply_error(reply, FL_FAILED_PRECONDITION,
                                      "replay holds %" PRIu64 " of the %" PRIu64 " transitions needed to sample%s",
                                      size, s->min_size, why);
        return fl_rpc_reply_error(reply, FL_FAILED_PRECONDITION,
                                  "rate limited: %g samples per insert allows no more samples until actors insert "
                                  "more%s",
                                  s->rl.spi, why);
    }
    mine->n++;
    s->waiters++;
    double t0 = fl_clock_sec();
    struct timespec until;
    fl__replay_deadline_in(&until, timeout_ms / 1000.0);
    int timed_out = 0;
    while (!s->stopping && !fl_ratelimit_can_sample(&s->rl, B, size = table_size(s))) {
        if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT) {
            size = table_size(s);
            timed_out = !fl_ratelimit_can_sample(&s->rl, B, size);
            break;
        }
    }
    s->waiters--;
    mine->n--;
    s->sample_blocked_s += fl_clock_sec() - t0;
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return fl_rpc_reply_error(reply, FL_UNAVAILABLE, "replay shard %d is shutting down", s->shard);
    }
    if (timed_out) {
        pthread_mutex_unlock(&s->mu);
        if (size < s->min_size)
            return fl_rpc_reply_error(reply, FL_FAILED_PRECONDITION,
                                      "replay holds %" PRIu64 " of the %" PRIu64
                                      " transitions needed to sample (waited %" PRIu32 " ms)",
                                      size, s->min_size, timeout_ms);
        return fl_rpc_reply_error(reply, FL_FAILED_PRECONDITION,
                                  "rate limited: waited %" PRIu32 " ms for actors to insert (%g samples per insert)",
                                  timeout_ms, s->rl.spi);
    }
allowed:
    fl_ratelimit_sampled(&s->rl, B);
    /* held inserts wake when the first of them may go */
    if (s->insert_head && may_insert(s, s->insert_head->n)) pthread_cond_broadcast(&s->insert_cv);
    pthread_mutex_unlock(&s->mu);
    return FL_OK;
}

/* The table's smallest positive sampling priority q_min when a batch was drawn, from the
 * batch itself: w_j = (q_min / q_j)^beta and q_j = P(j) * total, so
 * q_min = P(j) * total * w_j^(1/beta). The item with the largest weight is used (the
 * one least affected by float rounding, never clamped to FLT_MIN unless all are). The
 * relative error, ~1e-7 / beta, shrinks back by beta when a client raises a ratio of
 * such minima to beta. total is read right after drawing: exact unless an insert or
 * update landed in between. 0 when beta is 0 (all weights are 1 and carry nothing). */
static double min_priority_of(size_t B, double beta, const double *probs, const float *weights, double total) {
    if (!(beta > 0.0) || B == 0) return 0.0;
    size_t jm = 0;
    for (size_t j = 1; j < B; j++)
        if (weights[j] > weights[jm]) jm = j;
    double q = probs[jm] * total * pow((double)weights[jm], 1.0 / beta);
    return isfinite(q) && q > 0.0 ? q : 0.0;
}

/* Checks and applies priority updates (keys and priorities of one request, named by
 * field): equal lengths, every priority finite, >= 0 and <= replay.max_priority, else FL_INVALID_ARGUMENT in e and
 * nothing applied. *applied receives the updates applied (the rest were stale). Shared by
 * UpdatePriorities and the updates that ride on a Sample request. */
static fl_status apply_updates(fl_replay_service_t *s, const char *field, size_t n_keys, const uint64_t *keys,
                               size_t n_prio, const float *prio, size_t *applied, fl_err_t *e) {
    *applied = 0;
    if (n_prio != n_keys)
        return fl_err_set(e, FL_INVALID_ARGUMENT, "%s: got %zu values, expected %zu (one per key)", field, n_prio,
                          n_keys);
    FL_TRY(fl_wire_check_priorities_max(field, n_prio, prio, s->sig.max_priority, e));
    return fl_table_update_priorities(s->table, n_keys, keys, prio, applied, e);
}

static fl_status sample_handler(void *user, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply) {
    fl_replay_service_t *s = user;
    Fleet__SampleRequest *req = fleet__sample_request__unpack(NULL, len, msg);
    if (!req)
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT,
                                  "SampleRequest: %zu bytes that do not parse as a fleet.SampleRequest", len);
    size_t B = req->batch_size;
    double beta = req->beta;
    uint32_t timeout_ms = req->timeout_ms;
    /* Piggybacked priority updates go in first, whatever happens to the sample. */
    size_t upd_applied = 0, upd_n = req->n_update_keys;
    if (req->n_update_keys || req->n_update_priorities) {
        fl_err_t ue;
        fl_err_init(&ue);
        fl_status ust = apply_updates(s, "update_priorities", req->n_update_keys, req->update_keys,
                                      req->n_update_priorities, req->update_priorities, &upd_applied, &ue);
        if (ust != FL_OK) {
            fleet__sample_request__free_unpacked(req, NULL);
            return fl_rpc_reply_error(reply, ust, "%s", ue.msg);
        }
    }
    fleet__sample_request__free_unpacked(req, NULL);

    size_t row = 2 * s->obs_bytes + sizeof(uint64_t) + sizeof(float) * 4 + sizeof(double) + sizeof(int32_t);
    size_t max_b = (FL_RPC_DEFAULT_MAX_MESSAGE - SAMPLE_MSG_SLACK) / row;
    if (max_b > FL_REPLAY_MAX_SAMPLE) max_b = FL_REPLAY_MAX_SAMPLE;
    if (B == 0) return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT, "batch_size: got 0, expected >= 1");
    if (B > max_b)
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT,
                                  "batch_size: got %zu, expected at most %zu (observations of %zu bytes)", B, max_b,
                                  s->obs_bytes);
    if (!(beta >= 0.0 && beta <= 1.0))
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT, "beta: got %g, expected a value in [0, 1]", beta);
    FL_TRY(wait_for_data(s, B, timeout_ms, fl_rpc_reply_peer(reply), reply));

    /* The observations are drawn straight into the reply (fl_wire_sample_reply_t); the
     * other columns into one block: 8-byte columns first, then 4-byte ones. */
    fl_wire_sample_reply_t out = {0};
    uint8_t *block = malloc(B * (2 * sizeof(uint64_t) + 4 * sizeof(float)));
    uint64_t *keys = (uint64_t *)block;
    double *probs = (double *)(keys + B);
    float *weights = (float *)(probs + B);
    int32_t *actions = (int32_t *)(weights + B);
    float *rewards = (float *)(actions + B);
    float *discounts = rewards + B;
    fl_status st;
    fl_err_t e;
    fl_err_init(&e);
    if (!block || fl_wire_sample_reply_begin(&out, &s->sig.obs, B, &e) != FL_OK) {
        st = fl_rpc_reply_error(reply, FL_RESOURCE_EXHAUSTED, "replay shard out of memory for a batch of %zu", B);
        goto done;
    }
    st = fl_table_sample(s->table, B, beta, keys, probs, weights, out.obs, actions, rewards, discounts, out.next_obs,
                         &e);
    if (st != FL_OK) {
        st = fl_rpc_reply_error(reply, st, "%s", e.msg);
        goto done;
    }
    fl_table_info_t ti;
    fl_table_info(s->table, &ti);

    Fleet__SampleResponse resp = FLEET__SAMPLE_RESPONSE__INIT;
    resp.n_keys = B;
    resp.keys = keys;
    resp.n_weights = B;
    resp.weights = weights;
    resp.n_probabilities = B;
    resp.probabilities = probs;
    resp.table_size = ti.size;
    resp.total_priority = ti.total_priority;
    int prioritized = fl_selector_ops(fl_table_config(s->table)->selector)->prioritized;
    resp.min_priority = prioritized ? min_priority_of(B, beta, probs, weights, ti.total_priority) : 0.0;
    resp.shard_id = (uint32_t)s->shard;
    resp.sampling_mass = prioritized ? ti.total_priority : (double)ti.size;
    resp.updates_applied = upd_applied;
    resp.updates_stale = upd_n - upd_applied;
    size_t reply_len = 0;
    st = fl_wire_sample_reply_finish(&out, actions, rewards, discounts, &resp, &reply_len, &e);
    if (st != FL_OK) {
        st = fl_rpc_reply_error(reply, st, "%s", e.msg);
        goto done;
    }
    st = fl_rpc_reply_ref(reply, out.buf, reply_len, free, out.buf); /* the reply owns the buffer now */
    out.buf = NULL;
    if (st == FL_OK) atomic_fetch_add(&s->sample_calls, 1);
done:
    free(out.buf);
    free(block);
    return st;
}

/* --------------------------------------------------- UpdatePriorities ---- */

static fl_status update_handler(void *user, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply) {
    fl_replay_service_t *s = user;
    Fleet__UpdatePrioritiesRequest *req = fleet__update_priorities_request__unpack(NULL, len, msg);
    if (!req)
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT,
                                  "UpdatePrioritiesRequest: %zu bytes that do not parse as a "
                                  "fleet.UpdatePrioritiesRequest",
                                  len);
    fl_err_t e;
    fl_err_init(&e);
    size_t applied = 0;
    fl_status st = apply_updates(s, "priorities", req->n_keys, req->keys, req->n_priorities, req->priorities,
                                 &applied, &e);
    if (st != FL_OK) {
        st = fl_rpc_reply_error(reply, st, "%s", e.msg);
        goto done;
    }
    Fleet__UpdatePrioritiesResponse resp = FLEET__UPDATE_PRIORITIES_RESPONSE__INIT;
    resp.applied = applied;
    resp.stale = req->n_keys - applied;
    st = fl_rpc_reply_pb(reply, &resp.base);
done:
    fleet__update_priorities_request__free_unpacked(req, NULL);
    return st;
}

/* --------------------------------------------------------- Info etc. ---- */

void fl_replay_service_info(fl_replay_service_t *s, fl_replay_info_t *out) {
    fl_table_info_t ti;
    fl_table_info(s->table, &ti);
    const fl_table_config_t *tc = fl_table_config(s->table);
    memset(out, 0, sizeof *out);
    out->shard_id = (uint32_t)s->shard;
    out->size = ti.size;
    out->capacity = ti.capacity;
    out->inserted = ti.inserted;
    out->sampled = ti.sampled;
    out->insert_batches = atomic_load(&s->insert_batches);
    out->updates_applied = ti.updates_applied;
    out->updates_stale = ti.updates_stale;
    out->sample_calls = atomic_load(&s->sample_calls);
    out->rejected = atomic_load(&s->rejected);
    out->total_priority = ti.total_priority;
    int prioritized = fl_selector_ops(tc->selector)->prioritized;
    out->sampling_mass = prioritized ? ti.total_priority : (double)ti.size;
    out->min_priority = prioritized ? ti.min_priority : 0.0;
    out->storage_bytes = ti.storage_bytes;
    out->frames = ti.frames;
    /* The wire reports priorities as stored for sampling: (p + eps)^alpha. */
    out->max_priority = ti.inserted ? pow(ti.max_priority + tc->priority_eps, tc->alpha) : 0.0;
    out->uptime_s = s->started ? fl_clock_sec() - s->t_start : 0.0;
    pthread_mutex_lock(&s->mu);
    out->samples_per_insert = s->rl.spi;
    out->insert_blocked_s = s->insert_blocked_s;
    out->sample_blocked_s = s->sample_blocked_s;
    out->inserts_waiting = (uint32_t)s->insert_waiters;
    out->samples_waiting = (uint32_t)s->waiters;
    pthread_mutex_unlock(&s->mu);
}

static fl_status info_handler(void *user, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply) {
    fl_replay_service_t *s = user;
    Fleet__ReplayInfoRequest *req = fleet__replay_info_request__unpack(NULL, len, msg);
    if (!req)
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT,
                                  "ReplayInfoRequest: %zu bytes that do not parse as a fleet.ReplayInfoRequest", len);
    fleet__replay_info_request__free_unpacked(req, NULL);
    fl_replay_info_t in;
    fl_replay_service_info(s, &in);
    int64_t shape[FL_OBS_MAX_RANK];
    for (int d = 0; d < s->sig.obs.rank; d++) shape[d] = s->sig.obs.shape[d];
    Fleet__ReplayInfo r = FLEET__REPLAY_INFO__INIT;
    r.shard_id = in.shard_id;
    r.size = in.size;
    r.capacity = in.capacity;
    r.inserted = in.inserted;
    r.sampled = in.sampled;
    r.insert_batches = in.insert_batches;
    r.updates_applied = in.updates_applied;
    r.updates_stale = in.updates_stale;
    r.total_priority = in.total_priority;
    r.max_priority = in.max_priority;
    r.obs_dtype = (Fleet__DType)s->sig.obs.dtype;
    r.n_obs_shape = (size_t)s->sig.obs.rank;
    r.obs_shape = shape;
    r.sample_calls = in.sample_calls;
    r.uptime_s = in.uptime_s;
    r.rejected = in.rejected;
    r.samples_per_insert = in.samples_per_insert;
    r.insert_blocked_s = in.insert_blocked_s;
    r.sample_blocked_s = in.sample_blocked_s;
    r.inserts_waiting = in.inserts_waiting;
    r.samples_waiting = in.samples_waiting;
    r.sampling_mass = in.sampling_mass;
    r.min_priority = in.min_priority;
    r.storage_bytes = in.storage_bytes;
    r.frames = in.frames;
    fl_procmem(&r.rss_bytes, &r.private_bytes);
    r.cpu_s = fl_proc_cpu_s();
    return fl_rpc_reply_pb(reply, &r.base);
}

fl_status fl_replay_service_checkpoint(fl_replay_service_t *s, const char *path, fl_table_save_info_t *info,
                                       char *path_out, size_t len, fl_err_t *err) {
    if (info) memset(info, 0, sizeof *info);
    if (!path || !*path) path = s->ckpt_default;
    if (!*path)
        return fl_err_set(err, FL_UNIMPLEMENTED,
                          "replay shard %d: checkpoints are not enabled (the request names no file and "
                          "replay.checkpoint_dir is empty)",
                          s->shard);
    if (path_out && len) snprintf(path_out, len, "%s", path);
    double t0 = fl_clock_sec();
    pthread_mutex_lock(&s->ckpt_mu);
    fl_table_save_info_t si;
    fl_status st = s->wal && strcmp(path, s->ckpt_default) == 0 ? fl__replay_wal_checkpoint(s, path, &si, err)
                                                                : fl_table_save(s->table, path, &si, err);
    pthread_mutex_unlock(&s->ckpt_mu);
    if (st != FL_OK) {
        fl_err_prefix(err, "replay shard %d", s->shard);
        return st;
    }
    FL_INFO("replay shard %d: checkpoint %s: %" PRIu64 " items, %" PRIu64 " bytes in %.3f s", s->shard, path, si.items,
            si.bytes, fl_clock_sec() - t0);
    if (info) *info = si;
    return FL_OK;
}

/* What is wrong with a Checkpoint call's file name, or NULL (see server.h, Checkpoint).
 * own: the shard's default file name. */
static const char *bad_name(const char *name, const char *own, char *why, size_t len) {
    size_t n = strlen(name);
    if (n > FL_REPLAY_CKPT_NAME_MAX) {
        snprintf(why, len, "%zu characters, expected at most %d", n, FL_REPLAY_CKPT_NAME_MAX);
        return why;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch == '/') {
            snprintf(why, len, "'/' at character %zu: expected a file name without a folder (the file goes into "
                     "replay.checkpoint_dir)", i);
            return why;
        }
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == '-')) {
            snprintf(why, len, "byte 0x%02x at character %zu: expected only A-Z, a-z, 0-9, '.', '_' and '-'", ch, i);
            return why;
        }
    }
    if (name[0] == '.') {
        snprintf(why, len, "\"%s\" starts with '.': expected a plain file name", name);
        return why;
    }
    if (strstr(name, "..")) {
        snprintf(why, len, "\"%s\" contains \"..\": expected a plain file name", name);
        return why;
    }
    if (n < 6 || strcmp(name + n - 5, ".ckpt") != 0) {
        snprintf(why, len, "\"%s\" does not end in \".ckpt\" (with a name before it)", name);
        return why;
    }
    if (strncmp(name, "shard-", 6) == 0 && strcmp(name, own) != 0) {
        snprintf(why, len,
                 "\"%s\": names starting with \"shard-\" belong to the shards' own files (checkpoints and logs); "
                 "expected %s or another name",
                 name, own);
        return why;
    }
    return NULL;
}

fl_status fl_replay_service_checkpoint_path(const fl_replay_service_t *s, const char *name, char *path, size_t len,
                                            fl_err_t *err) {
    if (!s->ckpt_default[0])
        return fl_err_set(err, FL_UNIMPLEMENTED,
                          "replay shard %d: checkpoints are not enabled (replay.checkpoint_dir is empty; a Checkpoint "
                          "call writes only inside that folder)",
                          s->shard);
    if (!name || !*name) {
        snprintf(path, len, "%s", s->ckpt_default);
        return FL_OK;
    }
    char own[32], why[FL_ERR_MSG_MAX / 2];
    snprintf(own, sizeof own, "shard-%d.ckpt", s->shard);
    if (bad_name(name, own, why, sizeof why))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "name: %s", why);
    int n = snprintf(path, len, "%s/%s", s->wal_dir, name);
    if (n < 0 || (size_t)n >= len)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "name: \"%s\" does not fit a path of %zu bytes", name, len);
    return FL_OK;
}

/* The named checkpoints (*.ckpt not starting with "shard-") in dir other than `name`. */
static int named_checkpoints(const char *dir, const char *name) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".ckpt") == 0 && strncmp(e->d_name, "shard-", 6) != 0 &&
            e->d_name[0] != '.' && strcmp(e->d_name, name) != 0)
            n++;
    }
    closedir(d);
    return n;
}

static fl_status checkpoint_handler(void *user, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply) {
    fl_replay_service_t *s = user;
    Fleet__CheckpointRequest *req = fleet__checkpoint_request__unpack(NULL, len, msg);
    if (!req)
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT,
                                  "CheckpointRequest: %zu bytes that do not parse as a fleet.CheckpointRequest", len);
    fl_err_t e;
    fl_err_init(&e);
    fl_table_save_info_t si;
    char path[FL_REPLAY_DIR_MAX + FL_REPLAY_CKPT_NAME_MAX + 8];
    fl_status st = fl_replay_service_checkpoint_path(s, req->name, path, sizeof path, &e);
    /* A named file: counted and written under named_mu, so that two calls cannot both
     * take the last place. */
    const int named = st == FL_OK && req->name && req->name[0] && strncmp(req->name, "shard-", 6) != 0;
    if (named) {
        pthread_mutex_lock(&s->named_mu);
        int held = named_checkpoints(s->wal_dir, req->name);
        if (held >= FL_REPLAY_MAX_NAMED_CKPTS)
            st = fl_err_set(&e, FL_RESOURCE_EXHAUSTED,
                            "name: \"%s\" would be a new named checkpoint, and %s already holds %d (at most %d, each "
                            "a copy of the whole table): remove one, or write one of those names again",
                            req->name, s->wal_dir, held, FL_REPLAY_MAX_NAMED_CKPTS);
    }
    if (st == FL_OK) st = fl_replay_service_checkpoint(s, path, &si, NULL, 0, &e);
    if (named) pthread_mutex_unlock(&s->named_mu);
    if (st != FL_OK) {
        st = fl_rpc_reply_error(reply, st, "%s", e.msg);
        goto done;
    }
    Fleet__CheckpointResponse resp = FLEET__CHECKPOINT_RESPONSE__INIT;
    resp.path = path;
    resp.items = si.items;
    resp.bytes = si.bytes;
    st = fl_rpc_reply_pb(reply, &resp.base);
done:
    fleet__checkpoint_request__free_unpacked(req, NULL);
    return st;
}

/* Housekeeping until the service stops: writes the default checkpoint every ckpt_every
 * seconds (when set), and every FL_REPLAY_TRIM_EVERY_S gives the heap's free pages back
 * to the system when rows were inserted since the last time (which, in a full table,
 * evicts as many) or a checkpoint's copy was freed. Frame chunks live until evicted and
 * are freed in FIFO order among short-lived gRPC buffers: without the trims the free
 * space between them grew a full shard's resident memory by tens of MB though the
 * bytes in use stayed flat (`fleet replay` also keeps the process to one malloc arena). */
static void *housekeeping_loop(void *arg) {
    fl_replay_service_t *s = arg;
    const int checkpoints = s->ckpt_every > 0 && s->ckpt_default[0];
    uint64_t trimmed_at = 0; /* the table's inserted count at the last trim */
    pthread_mutex_lock(&s->mu);
    double now = fl_clock_sec();
    double next_ckpt = now + s->ckpt_every, next_trim = now + FL_REPLAY_TRIM_EVERY_S;
    while (!s->stopping) {
        now = fl_clock_sec();
        double next = checkpoints && next_ckpt < next_trim ? next_ckpt : next_trim;
        if (now < next) {
            struct timespec until;
            fl__replay_deadline_in(&until, next - now < 0.5 ? next - now : 0.5);
            pthread_cond_timedwait(&s->hk_cv, &s->mu, &until);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        int trim = 0;
        if (checkpoints && now >= next_ckpt) {
            fl_err_t e;
            fl_err_init(&e);
            if (fl_replay_service_checkpoint(s, NULL, NULL, NULL, 0, &e) != FL_OK)
                FL_WARN("periodic checkpoint failed: %s", e.msg);
            next_ckpt = fl_clock_sec() + s->ckpt_every;
            trim = 1;
        }
        if (now >= next_trim) {
            fl_table_info_t ti;
            fl_table_info(s->table, &ti);
            if (ti.inserted != trimmed_at) trim = 1;
            trimmed_at = ti.inserted;
            next_trim = fl_clock_sec() + FL_REPLAY_TRIM_EVERY_S;
        }
        if (trim) malloc_trim(0);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ----------------------------------------------------------- lifetime ---- */

void fl_replay_service_opts_init(fl_replay_service_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->shard = 0;
    o->shards = 1;
    o->obs.dtype = FL_DTYPE_INVALID;
    o->capacity = 1000000;
    o->alpha = 0.6;
    o->priority_eps = 1e-6;
    o->selector = FL_SELECTOR_PRIORITIZED;
    o->tree_rebuild_every = INT64_C(1) << 20;
    o->seed = 1;
    o->min_size_to_sample = 1000;
    o->samples_per_insert = 8;
    o->rate_error_buffer = 20000;
    o->actors = 2;
    o->max_abs_reward = 1e6;
    o->max_priority = 1e6;
    o->max_streams = 16384;
    o->stream_idle_s = 3600;
}

/* The options' own checks, before anything is built. */
static fl_status check_opts(const fl_replay_service_opts_t *o, fl_err_t *err) {
    const int shard = o->shard;
    const char *dir = o->checkpoint_dir ? o->checkpoint_dir : "";
    if (o->shards < 1 || o->shards > 256)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay.shards = %d: expected 1 .. 256", o->shards);
    if (o->round_participants < 0 || o->round_participants > FL_REPLAY_MAX_ROUND_PARTICIPANTS)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay shard %d: %" PRId64 " round participants, expected 0 .. %d",
                          shard, o->round_participants, FL_REPLAY_MAX_ROUND_PARTICIPANTS);
    if (o->round_participants > 0 && o->shards != 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "run.deterministic needs replay.shards = 1 (got %d): the rounds are one shard's", o->shards);
    if (shard < 0 || shard >= o->shards)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay shard %d: expected 0 .. %d (replay.shards = %d)", shard,
                          o->shards - 1, o->shards);
    if (o->capacity < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay.capacity = %" PRId64 ": expected >= 1", o->capacity);
    if (fl_obs_spec_bytes(&o->obs) == 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay shard %d: invalid observation signature (dtype %d, rank %d)", shard,
                          (int)o->obs.dtype, o->obs.rank);
    if (o->num_actions < 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay shard %d: num_actions %d, expected >= 0", shard,
                          o->num_actions);
    if (!(o->max_abs_reward > 0) || !(o->max_priority > 0) || !(o->stream_idle_s > 0))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay.max_abs_reward = %g, replay.max_priority = %g, replay.stream_idle_s = %g: expected "
                          "each > 0",
                          o->max_abs_reward, o->max_priority, o->stream_idle_s);
    if (o->max_streams < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay.max_streams = %" PRId64 ": expected >= 1", o->max_streams);
    if (strlen(dir) >= FL_REPLAY_DIR_MAX)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay.checkpoint_dir: %zu bytes, expected at most %d",
                          strlen(dir), FL_REPLAY_DIR_MAX - 1);
    if (o->checkpoint_every > 0 && !dir[0])
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay.checkpoint_every = %g needs replay.checkpoint_dir (the folder to write to)",
                          o->checkpoint_every);
    if (o->wal && !dir[0])
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay.wal needs replay.checkpoint_dir (the folder of the write-ahead log and the "
                          "checkpoints)");
    if (o->wal && o->restore_path && *o->restore_path)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay shard %d: restoring %s cannot be combined with replay.wal = 1: with the log the "
                          "shard recovers from %s/shard-%d.ckpt and its log segments by itself (copy the checkpoint "
                          "there instead)",
                          shard, o->restore_path, dir, shard);
    return FL_OK;
}

fl_status fl_replay_service_check_opts(const fl_replay_service_opts_t *opts, fl_err_t *err) {
    return check_opts(opts, err);
}

/* The shard's table: its share of the capacity, its id, a sampling seed derived from the
 * run's seed and the shard, and the options' signature and priorities. */
static fl_table_config_t shard_table_config(const fl_replay_service_opts_t *o) {
    uint64_t shards = (uint64_t)o->shards;
    fl_table_config_t tc;
    fl_table_config_init(&tc);
    tc.capacity = ((uint64_t)o->capacity + shards - 1) / shards;
    tc.obs = fl_obs_spec_make(o->obs.dtype, o->obs.rank, o->obs.shape);
    tc.alpha = o->alpha;
    tc.priority_eps = o->priority_eps;
    tc.selector = o->selector;
    tc.max_times_sampled = o->max_times_sampled;
    tc.rebuild_every = (uint64_t)o->tree_rebuild_every;
    tc.shard_id = o->shard;
    tc.frame_stack = o->frame_stack > 1 ? o->frame_stack : 1;
    tc.zstd_level = o->zstd_level;
    fl_rng_t rng;
    fl_rng_init_stream(&rng, o->seed, UINT64_C(0x7265706c61790000) + (uint64_t)o->shard);
    tc.seed = fl_rng_u64(&rng);
    return tc;
}

/* Everything of a new service but its table and its RPC server: the signature, locks,
 * counters, checkpoint and log settings. */
static void init_state(fl_replay_service_t *s, const fl_replay_service_opts_t *o) {
    const char *dir = o->checkpoint_dir ? o->checkpoint_dir : "";
    s->sig = (fl_wire_sig_t){fl_obs_spec_make(o->obs.dtype, o->obs.rank, o->obs.shape), o->num_actions,
                             o->max_abs_reward, o->max_priority};
    s->obs_bytes = fl_obs_spec_bytes(&o->obs);
    s->shard = o->shard;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_cond_init(&s->insert_cv, &ca);
    pthread_cond_init(&s->hk_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->streams_mu, NULL);
    s->max_streams = (size_t)o->max_streams;
    s->stream_idle_s = o->stream_idle_s;
    pthread_mutex_init(&s->ckpt_mu, NULL);
    pthread_mutex_init(&s->named_mu, NULL);
    pthread_mutex_init(&s->wal_mu, NULL);
    s->wal_lock_fd = -1;
    s->wal_fsync = o->wal_fsync;
    snprintf(s->wal_dir, sizeof s->wal_dir, "%s", dir);
    if (dir[0]) snprintf(s->ckpt_default, sizeof s->ckpt_default, "%s/shard-%d.ckpt", dir, o->shard);
    s->ckpt_every = o->checkpoint_every;
    s->ckpt_at_stop = o->checkpoint_at_stop && s->ckpt_default[0];
    atomic_init(&s->insert_batches, 0);
    atomic_init(&s->rejected, 0);
    atomic_init(&s->sample_calls, 0);
}

/* The shard's shares of the sampling threshold and of the rate limiter's error buffer,
 * and enough serving threads that every actor's stream may wait on the rate limiter
 * while samples, priority updates and Info are still served. */
static void init_limits(fl_replay_service_t *s, const fl_replay_service_opts_t *o, uint64_t capacity) {
    uint64_t shards = (uint64_t)o->shards;
    uint64_t need = o->min_size_to_sample > 0 ? (uint64_t)o->min_size_to_sample : 1;
    need = (need + shards - 1) / shards;
    s->min_size = need < capacity ? need : capacity;
    /* Deterministic rounds: the learner's fixed samples per round are the rate. */
    fl_ratelimit_init(&s->rl, o->round_participants > 0 ? 0.0 : o->samples_per_insert,
                      o->rate_error_buffer / (double)shards, s->min_size);
    const int64_t streams = o->round_participants > o->actors ? o->round_participants : o->actors;
    int want = (int)(streams / (int64_t)shards) + 1 + FL_REPLAY_MAX_SAMPLE_WAITERS + 3;
    s->threads = want < FL_REPLAY_SERVICE_THREADS ? FL_REPLAY_SERVICE_THREADS : want > 256 ? 256 : want;
    s->max_insert_waiters = s->threads - FL_REPLAY_MAX_SAMPLE_WAITERS - 2;
    s->n_insert_clients = s->max_insert_waiters + 2; /* at most one more place than that, and the newcomer */
    s->insert_clients = calloc((size_t)s->n_insert_clients, sizeof *s->insert_clients);
}

/* The RPC server, with the service's methods registered. */
static fl_status register_methods(fl_replay_service_t *s, fl_err_t *err) {
    fl_rpc_server_opts_t ro = {.threads = s->threads};
    fl_status st;
    FL_TRY(fl_rpc_server_create(&ro, &s->rpc, err));
    static const fl_rpc_stream_handler_t insert_h = {insert_open, insert_message, insert_close};
    if ((st = fl_rpc_server_add_stream(s->rpc, fl_method_path(FL_METHOD_REPLAY_INSERT), &insert_h, s)) != FL_OK ||
        (st = fl_rpc_server_add_unary(s->rpc, fl_method_path(FL_METHOD_REPLAY_SAMPLE), sample_handler, s)) != FL_OK ||
        (st = fl_rpc_server_add_unary(s->rpc, fl_method_path(FL_METHOD_REPLAY_UPDATE_PRIORITIES), update_handler, s)) !=
            FL_OK ||
        (st = fl_rpc_server_add_unary(s->rpc, fl_method_path(FL_METHOD_REPLAY_INFO), info_handler, s)) != FL_OK ||
        (st = fl_rpc_server_add_unary(s->rpc, fl_method_path(FL_METHOD_REPLAY_CHECKPOINT), checkpoint_handler, s)) !=
            FL_OK ||
        (st = fl_rpc_server_add_unary(s->rpc, fl_method_path(FL_METHOD_REPLAY_ROUND), fl__replay_round_handler, s)) !=
            FL_OK)
        return fl_err_set(err, st, "replay shard %d: cannot register its methods", s->shard);
    return FL_OK;
}

fl_status fl_replay_service_create(const fl_replay_service_opts_t *opts, fl_replay_service_t **out, fl_err_t *err) {
    *out = NULL;
    FL_TRY(check_opts(opts, err));
    fl_replay_service_t *s = calloc(1, sizeof *s);
    if (!s) return fl_err_set(err, FL_NO_MEMORY, "replay shard %d: out of memory", opts->shard);
    init_state(s, opts);
    fl_table_config_t tc = shard_table_config(opts);
    init_limits(s, opts, tc.capacity);
    if (!s->insert_clients) {
        fl_replay_service_destroy(s);
        return fl_err_set(err, FL_NO_MEMORY, "replay shard %d: out of memory", opts->shard);
    }
    fl_status st = fl__replay_rounds_init(s, opts->round_participants, err);
    if (st == FL_OK) st = fl__replay_open_table(s, &tc, opts->restore_path, opts->wal && !s->participants, err);
    if (st != FL_OK) {
        fl_err_prefix(err, "replay shard %d", opts->shard);
        goto fail;
    }
    if ((st = register_methods(s, err)) != FL_OK) goto fail;
    *out = s;
    return FL_OK;
fail:
    fl_replay_service_destroy(s);
    return st;
}

fl_status fl_replay_service_start(fl_replay_service_t *s, const char *listen_addr, char *bound_addr_out,
                                  size_t len, fl_err_t *err) {
    if (s->started) return fl_err_set(err, FL_FAILED_PRECONDITION, "replay shard %d: already started", s->shard);
    if (!listen_addr || !*listen_addr)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay shard %d: empty listen address", s->shard);
    int port = 0;
    FL_TRY(fl_rpc_server_bind(s->rpc, listen_addr, &port, err));
    FL_TRY(fl_rpc_server_start(s->rpc, err));
    s->started = 1;
    s->t_start = fl_clock_sec();
    if (pthread_create(&s->housekeeping, NULL, housekeeping_loop, s) == 0)
        s->housekeeping_started = 1;
    else
        FL_WARN("replay shard %d: cannot start the housekeeping thread (periodic checkpoints, giving memory "
                "back)",
                s->shard);
    if (bound_addr_out && len) {
        const char *colon = strrchr(listen_addr, ':');
        if (strncmp(listen_addr, "unix:", 5) == 0 || !colon)
            snprintf(bound_addr_out, len, "%s", listen_addr);
        else
            snprintf(bound_addr_out, len, "%.*s:%d", (int)(colon - listen_addr), listen_addr, port);
    }
    return FL_OK;
}

void fl_replay_service_stop(fl_replay_service_t *s) {
    if (!s || s->stopped) return;
    s->stopped = 1;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_cond_broadcast(&s->insert_cv);
    pthread_cond_broadcast(&s->hk_cv);
    pthread_mutex_unlock(&s->mu);
    if (s->housekeeping_started) {
        pthread_join(s->housekeeping, NULL);
        s->housekeeping_started = 0;
    }
    /* A server never started is torn down by fl_rpc_server_destroy alone. */
    if (s->started) fl_rpc_server_shutdown(s->rpc);
    /* No call runs any more: the table holds everything acknowledged. Only a shard that
     * served writes it: one whose recovery failed must not overwrite the checkpoint. */
    if (s->ckpt_at_stop && s->started) {
        fl_err_t e;
        fl_err_init(&e);
        if (fl_replay_service_checkpoint(s, NULL, NULL, NULL, 0, &e) != FL_OK)
            FL_WARN("replay shard %d: the last checkpoint failed: %s", s->shard, e.msg);
    }
}

void fl_replay_service_destroy(fl_replay_service_t *s) {
    if (!s) return;
    fl_replay_service_stop(s);
    fl_rpc_server_destroy(s->rpc);
    fl_wal_close(s->wal);
    if (s->wal_lock_fd >= 0) close(s->wal_lock_fd); /* releases the flock */
    fl_table_destroy(s->table);
    fl__replay_rounds_free(s);
    for (size_t i = 0; i < s->streams_cap; i++) {
        if (!s->streams[i]) continue;
        pthread_mutex_destroy(&s->streams[i]->mu);
        free(s->streams[i]);
    }
    free(s->streams);
    free(s->insert_clients);
    pthread_mutex_destroy(&s->streams_mu);
    pthread_mutex_destroy(&s->ckpt_mu);
    pthread_mutex_destroy(&s->named_mu);
    pthread_mutex_destroy(&s->wal_mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->insert_cv);
    pthread_cond_destroy(&s->hk_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

fl_table_t *fl_replay_service_table(fl_replay_service_t *s) { return s->table; }

int fl_replay_service_sample_waiters(fl_replay_service_t *s) {
    pthread_mutex_lock(&s->mu);
    int w = s->waiters;
    pthread_mutex_unlock(&s->mu);
    return w;
}

uint64_t fl_replay_service_min_size(const fl_replay_service_t *s) { return s->min_size; }
