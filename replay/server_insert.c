/* server_insert: fleet.Replay/Insert, the client stream of one shard's writers: the
 * request's checks, the rate limiter's waits (first come, first served, with a bounded
 * number of waiting places shared among clients), the write-ahead log's append and the
 * insert itself (fl__replay_apply_insert), and the call's answer. See replay/server.c
 * for the state and the lock order. */
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
    if (!s->insert_head && fl__replay_may_insert(s, n)) {
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
    while (!s->stopping && !me.give_way && !(s->insert_head == &me && fl__replay_may_insert(s, n))) {
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
            resp.table_size = fl__replay_table_size(s);
            resp.n_first_keys = c->batches;
            resp.first_keys = c->first_keys;
            st = fl_rpc_reply_pb(reply, &resp.base);
        }
    }
    if (c) fl__replay_put_stream(s, c->rec);
    insert_call_free(c);
    return st;
}

const fl_rpc_stream_handler_t fl__replay_insert_handler = {insert_open, insert_message, insert_close};
