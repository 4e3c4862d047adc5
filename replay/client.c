/* client: the replay shard's client side (see client.h).
 *
 * The writer keeps every appended batch in a FIFO until an InsertResponse's
 * last_sequence covers it. `sent` counts the FIFO's leading batches already written on
 * the open call; a new call starts at 0, so opening a call after a failure resends
 * everything unacknowledged, oldest first, and the shard's per-stream sequence record
 * skips what it already holds. Calls are rotated after batches_per_call batches and
 * before they get near their deadline, so an idle-but-healthy call never expires. */
#include "replay/client.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/fanout.h"
#include "common/log.h"
#include "common/retry.h"
#include "common/rng.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "replay/table.h"
#include "replay/wire.h"

#define M_INSERT "/fleet.Replay/Insert"
#define M_SAMPLE "/fleet.Replay/Sample"
#define M_UPDATE "/fleet.Replay/UpdatePriorities"
#define M_INFO "/fleet.Replay/Info"

/* Deadline of one Insert call of a writer; calls are rotated at half of it. */
#define WRITER_CALL_TIMEOUT_MS 60000
/* Room left in a message for everything but a batch's observations. */
#define MSG_SLACK (1u << 20)

struct fl_replay_client {
    fl_rpc_channel_t *ch;
    int64_t timeout_ms;
};

fl_status fl_replay_client_create(const char *addr, fl_replay_client_t **out, fl_err_t *err) {
    *out = NULL;
    fl_replay_client_t *c = calloc(1, sizeof *c);
    if (!c) return fl_err_set(err, FL_NO_MEMORY, "replay client: out of memory");
    c->timeout_ms = FL_REPLAY_CLIENT_TIMEOUT_MS;
    fl_status st = fl_rpc_channel_create(addr, 0, &c->ch, err);
    if (st != FL_OK) {
        free(c);
        return st;
    }
    *out = c;
    return FL_OK;
}

void fl_replay_client_destroy(fl_replay_client_t *c) {
    if (!c) return;
    fl_rpc_channel_destroy(c->ch);
    free(c);
}

void fl_replay_client_set_timeout(fl_replay_client_t *c, int64_t timeout_ms) {
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : FL_REPLAY_CLIENT_TIMEOUT_MS;
}

/* ------------------------------------------------------------- writer ---- */

typedef struct wbatch {
    uint64_t seq;
    fl_wire_batch_t cols; /* points into mem */
    void *mem;
} wbatch;

struct fl_replay_writer {
    fl_replay_client_t *c;
    uint64_t stream_id;
    fl_obs_spec_t obs;
    size_t obs_bytes;
    int batches_per_call;
    uint64_t last_seq; /* sequence of the latest appended batch */

    wbatch *q; /* pending batches, oldest first: q[0..len) */
    size_t len, cap;
    size_t sent; /* q[0..sent) went out on the open call */

    fl_rpc_stream_t *call;
    double call_t0;
    int acked_once; /* a call was acknowledged: later calls need not wait for the shard */
    int failed;     /* the last call failed: appends retry after retry_at */
    double retry_at;
    fl_backoff_t backoff;
    fl_err_t last_err;

    uint64_t acked, pending;
};

static void wbatch_free(wbatch *b) { free(b->mem); }

fl_status fl_replay_writer_create(fl_replay_client_t *c, uint64_t stream_id, const fl_obs_spec_t *obs,
                                  int batches_per_call, fl_replay_writer_t **out, fl_err_t *err) {
    *out = NULL;
    if (!c || !obs) return fl_err_set(err, FL_INVALID_ARGUMENT, "replay writer: %s is NULL", !c ? "client" : "obs");
    size_t ob = fl_obs_spec_bytes(obs);
    if (ob == 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay writer: invalid observation spec (dtype %d, rank %d; expected a known dtype, rank "
                          "0 .. 4 and dimensions >= 1)",
                          (int)obs->dtype, obs->rank);
    if (batches_per_call < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay writer: batches_per_call %d, expected >= 1",
                          batches_per_call);
    fl_replay_writer_t *w = calloc(1, sizeof *w);
    if (!w) return fl_err_set(err, FL_NO_MEMORY, "replay writer: out of memory");
    w->c = c;
    w->stream_id = stream_id;
    w->obs = fl_obs_spec_make(obs->dtype, obs->rank, obs->shape);
    w->obs_bytes = ob;
    w->batches_per_call = batches_per_call;
    fl_backoff_init(&w->backoff);
    fl_err_init(&w->last_err);
    *out = w;
    return FL_OK;
}

void fl_replay_writer_destroy(fl_replay_writer_t *w) {
    if (!w) return;
    fl_rpc_stream_cancel(w->call);
    for (size_t i = 0; i < w->len; i++) wbatch_free(&w->q[i]);
    free(w->q);
    free(w);
}

uint64_t fl_replay_writer_acked(const fl_replay_writer_t *w) { return w->acked; }
uint64_t fl_replay_writer_pending(const fl_replay_writer_t *w) { return w->pending; }

/* Drops the pending batches the shard acknowledged (sequence <= last). */
static void apply_ack(fl_replay_writer_t *w, uint64_t last) {
    size_t k = 0;
    while (k < w->len && w->q[k].seq <= last) {
        w->acked += w->q[k].cols.count;
        w->pending -= w->q[k].cols.count;
        wbatch_free(&w->q[k]);
        k++;
    }
    if (k == 0) return;
    memmove(w->q, w->q + k, (w->len - k) * sizeof *w->q);
    w->len -= k;
    w->sent = w->sent > k ? w->sent - k : 0;
}

/* Records a failed call: everything pending goes out again on the next one. */
static void mark_failed(fl_replay_writer_t *w, const fl_err_t *e) {
    if (!w->failed)
        FL_WARN("replay writer %" PRIu64 ": %s; %" PRIu64 " transitions pending, will resend", w->stream_id, e->msg,
                w->pending);
    w->failed = 1;
    w->last_err = *e;
    w->sent = 0;
    w->retry_at = fl_clock_sec() + fl_backoff_next(&w->backoff);
}

static void mark_ok(fl_replay_writer_t *w) {
    w->acked_once = 1;
    w->failed = 0;
    fl_backoff_reset(&w->backoff);
}

static fl_status open_call(fl_replay_writer_t *w, int64_t timeout_ms, unsigned flags, fl_err_t *err) {
    w->sent = 0;
    fl_status st = fl_rpc_stream_open(w->c->ch, M_INSERT, timeout_ms, flags, &w->call, err);
    if (st == FL_OK) w->call_t0 = fl_clock_sec();
    return st;
}

/* Writes q[sent..len) on the open call. A failure means the call is over. */
static fl_status send_unsent(fl_replay_writer_t *w, fl_err_t *err) {
    while (w->sent < w->len) {
        wbatch *b = &w->q[w->sent];
        fl_wire_batch_msg_t bm;
        fl_wire_encode_batch(&bm, &w->obs, &b->cols);
        Fleet__InsertRequest req = FLEET__INSERT_REQUEST__INIT;
        req.stream_id = w->stream_id;
        req.sequence = b->seq;
        req.batch = &bm.batch;
        FL_TRY(fl_rpc_stream_send_pb(w->call, &req.base, err));
        w->sent++;
    }
    return FL_OK;
}

/* Finishes the open call and applies its acknowledgement. */
static fl_status finish_call(fl_replay_writer_t *w, fl_err_t *err) {
    ProtobufCMessage *m = NULL;
    fl_status st = fl_rpc_stream_finish_pb(w->call, &fleet__insert_response__descriptor, &m, err);
    w->call = NULL;
    w->sent = 0;
    if (st != FL_OK) return st;
    Fleet__InsertResponse *resp = (Fleet__InsertResponse *)m;
    apply_ack(w, resp->last_sequence);
    fleet__insert_response__free_unpacked(resp, NULL);
    return FL_OK;
}

/* Sends what is pending on the open call (opening one when allowed) and rotates the
 * call when it is full or old. Failures only mark the writer failed. */
static void pump(fl_replay_writer_t *w) {
    fl_err_t e;
    fl_err_init(&e);
    if (!w->call) {
        if (w->failed && fl_clock_sec() < w->retry_at) return;
        /* Until the shard has acknowledged a call, wait for it to come up (an actor may
         * start first); afterwards fail fast while it is unreachable, keeping batches. */
        unsigned flags = w->acked_once ? 0u : FL_RPC_WAIT_FOR_READY;
        if (open_call(w, WRITER_CALL_TIMEOUT_MS, flags, &e) != FL_OK) {
            mark_failed(w, &e);
            return;
        }
    }
    if (send_unsent(w, &e) != FL_OK) {
        fl_err_t fe;
        fl_err_init(&fe);
        /* The call is over: its status says why (the send error only says that it ended). */
        if (finish_call(w, &fe) == FL_OK) {
            mark_failed(w, &e);
        } else {
            mark_failed(w, &fe);
        }
        return;
    }
    double age_ms = (fl_clock_sec() - w->call_t0) * 1e3;
    if (w->sent >= (size_t)w->batches_per_call || age_ms > WRITER_CALL_TIMEOUT_MS / 2) {
        if (finish_call(w, &e) == FL_OK)
            mark_ok(w);
        else
            mark_failed(w, &e);
    }
}

static fl_status check_append(const fl_replay_writer_t *w, size_t n, const void *obs, const int32_t *actions,
                              const float *rewards, const float *discounts, const void *next_obs,
                              const float *priorities, fl_err_t *err) {
    if (n == 0) return fl_err_set(err, FL_INVALID_ARGUMENT, "replay writer append: n is 0, expected >= 1");
    size_t row = 2 * w->obs_bytes + 4 * sizeof(float);
    size_t max_n = (FL_RPC_DEFAULT_MAX_MESSAGE - MSG_SLACK) / row;
    if (max_n > UINT32_MAX) max_n = UINT32_MAX;
    if (n > max_n)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay writer append: n is %zu, expected at most %zu (observations of %zu bytes)", n,
                          max_n, w->obs_bytes);
    const char *missing = !obs ? "obs" : !actions ? "actions" : !rewards ? "rewards" : !discounts ? "discounts"
                        : !next_obs ? "next_obs" : !priorities ? "priorities" : NULL;
    if (missing) return fl_err_set(err, FL_INVALID_ARGUMENT, "replay writer append: %s is NULL", missing);
    for (size_t i = 0; i < n; i++) {
        if (actions[i] < 0)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "replay writer append: actions[%zu]: got %" PRId32
                              ", expected >= 0", i, actions[i]);
        if (!isfinite(rewards[i]))
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "replay writer append: rewards[%zu]: got %g, expected a finite value", i,
                              (double)rewards[i]);
        if (!(discounts[i] >= 0.0f && discounts[i] <= 1.0f))
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "replay writer append: discounts[%zu]: got %g, expected a value in [0, 1]", i,
                              (double)discounts[i]);
    }
    fl_status st = fl_wire_check_priorities("priorities", n, priorities, err);
    if (st != FL_OK) fl_err_prefix(err, "replay writer append");
    return st;
}

fl_status fl_replay_writer_append(fl_replay_writer_t *w, size_t n, const void *obs, const int32_t *actions,
                                  const float *rewards, const float *discounts, const void *next_obs,
                                  const float *priorities, fl_err_t *err) {
    FL_TRY(check_append(w, n, obs, actions, rewards, discounts, next_obs, priorities, err));
    if (w->len == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        wbatch *q = realloc(w->q, cap * sizeof *q);
        if (!q) return fl_err_set(err, FL_NO_MEMORY, "replay writer append: out of memory");
        w->q = q;
        w->cap = cap;
    }
    size_t ob = n * w->obs_bytes;
    size_t bytes = 2 * ob + n * (sizeof(int32_t) + 3 * sizeof(float));
    uint8_t *mem = malloc(bytes);
    if (!mem) return fl_err_set(err, FL_NO_MEMORY, "replay writer append: out of memory for %zu bytes", bytes);
    /* Layout: the 4-byte columns first (aligned by malloc), then the observations. */
    int32_t *a = (int32_t *)mem;
    float *r = (float *)(mem + n * 4);
    float *g = (float *)(mem + n * 8);
    float *p = (float *)(mem + n * 12);
    uint8_t *o = mem + n * 16;
    uint8_t *no = o + ob;
    memcpy(a, actions, n * sizeof *a);
    memcpy(r, rewards, n * sizeof *r);
    memcpy(g, discounts, n * sizeof *g);
    memcpy(p, priorities, n * sizeof *p);
    memcpy(o, obs, ob);
    memcpy(no, next_obs, ob);
    wbatch *b = &w->q[w->len++];
    b->seq = ++w->last_seq;
    b->mem = mem;
    b->cols = (fl_wire_batch_t){.count = n,
                                .obs_bytes = w->obs_bytes,
                                .obs = o,
                                .actions = a,
                                .rewards = r,
                                .discounts = g,
                                .next_obs = no,
                                .priorities = p};
    w->pending += n;
    pump(w);
    return FL_OK;
}

fl_status fl_replay_writer_flush(fl_replay_writer_t *w, int64_t timeout_ms, fl_err_t *err) {
    if (timeout_ms <= 0) timeout_ms = w->c->timeout_ms;
    double deadline = fl_clock_sec() + (double)timeout_ms * 1e-3;
    fl_err_t e;
    fl_err_init(&e);
    fl_status st = FL_OK;
    if (w->call) {
        if ((st = send_unsent(w, &e)) != FL_OK) fl_err_init(&e);
        st = finish_call(w, &e);
        if (st == FL_OK)
            mark_ok(w);
        else
            mark_failed(w, &e);
    }
    while (w->len > 0) {
        if (st != FL_OK && !fl_retry_transient(st)) break;
        double left_s = deadline - fl_clock_sec();
        if (st != FL_OK) {
            /* Wait out the backoff of the failure just seen, within the deadline. */
            double pause = w->retry_at - fl_clock_sec();
            if (pause > left_s) pause = left_s;
            fl_sleep_sec(pause);
            left_s = deadline - fl_clock_sec();
        }
        int64_t left_ms = (int64_t)(left_s * 1e3);
        if (left_ms <= 0) {
            if (st == FL_OK) st = fl_err_set(&e, FL_DEADLINE_EXCEEDED, "flush timed out after %" PRId64 " ms", timeout_ms);
            break;
        }
        st = open_call(w, left_ms, FL_RPC_WAIT_FOR_READY, &e);
        if (st == FL_OK) {
            if (send_unsent(w, &e) != FL_OK) fl_err_init(&e);
            st = finish_call(w, &e);
        }
        if (st == FL_OK)
            mark_ok(w);
        else
            mark_failed(w, &e);
    }
    if (w->len == 0) return FL_OK;
    if (st == FL_OK) st = FL_DEADLINE_EXCEEDED;
    return fl_err_set(err, st,
                      "replay writer %" PRIu64 ": %" PRIu64 " transitions in %zu batches not acknowledged: %s",
                      w->stream_id, w->pending, w->len, e.msg[0] ? e.msg : fl_status_str(st));
}

/* ------------------------------------------------------------- reader ---- */

/* Bytes rounded up to the columns' alignment. */
static size_t col_bytes(size_t n) { return (n + 63) & ~(size_t)63; }

fl_status fl_replay_batch_init(fl_replay_batch_t *b, size_t capacity, size_t obs_bytes) {
    memset(b, 0, sizeof *b);
    if (capacity == 0 || obs_bytes == 0) return FL_INVALID_ARGUMENT;
    if (capacity > SIZE_MAX / 64 || obs_bytes > (SIZE_MAX / 4) / capacity) return FL_INVALID_ARGUMENT;
    const size_t ob = col_bytes(capacity * obs_bytes), i4 = col_bytes(capacity * 4), i8 = col_bytes(capacity * 8);
    /* obs, next_obs; actions, rewards, discounts, weights (4 bytes); keys, probs (8) */
    const size_t total = 2 * ob + 4 * i4 + 2 * i8;
    void *block = NULL;
    if (posix_memalign(&block, 4096, total) != 0) return FL_NO_MEMORY;
    uint8_t *p = block;
    b->block = p;
    b->block_bytes = total;
    b->capacity = capacity;
    b->obs_bytes = obs_bytes;
    b->obs = p;
    b->next_obs = p + ob;
    p += 2 * ob;
    b->actions = (int32_t *)p;
    b->rewards = (float *)(p + i4);
    b->discounts = (float *)(p + 2 * i4);
    b->weights = (float *)(p + 3 * i4);
    p += 4 * i4;
    b->keys = (uint64_t *)p;
    b->probs = (double *)(p + i8);
    return FL_OK;
}

void fl_replay_batch_free(fl_replay_batch_t *b) {
    if (!b) return;
    free(b->block);
    memset(b, 0, sizeof *b);
}

/* What a Sample response said besides its rows. */
typedef struct sample_meta {
    size_t count;
    uint64_t table_size;
    double total, min_q, mass;
    uint32_t shard_id;
    uint64_t updates_applied; /* of the updates sent along */
} sample_meta;

/* One Sample call whose rows land in out at rows [offset, offset + count). probe: the
 * shard answers at once (no wait for data or the rate limiter) within timeout_ms. */
static fl_status sample_rows(fl_replay_client_t *c, size_t batch_size, double beta, int64_t timeout_ms, int probe,
                             const fl_replay_updates_t *upd, fl_replay_batch_t *out, size_t offset, sample_meta *meta,
                             fl_err_t *err) {
    /* The shard waits for data a little less than the call may take, so that running out
     * of time is answered by the shard (FAILED_PRECONDITION with its size), not by the
     * deadline, and the batch still has time to arrive. */
    int64_t wait_ms = 0, deadline_ms = c->timeout_ms;
    if (timeout_ms > 0) {
        int64_t margin = timeout_ms / 4 < 1000 ? timeout_ms / 4 : 1000;
        wait_ms = probe ? 0 : timeout_ms - margin;
        deadline_ms = timeout_ms;
    }
    Fleet__SampleRequest req = FLEET__SAMPLE_REQUEST__INIT;
    req.batch_size = (uint32_t)batch_size;
    req.beta = beta;
    req.timeout_ms = wait_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)wait_ms;
    if (upd && upd->n > 0) {
        req.n_update_keys = req.n_update_priorities = upd->n;
        req.update_keys = (uint64_t *)upd->keys;
        req.update_priorities = (float *)upd->priorities;
    }
    ProtobufCMessage *m = NULL;
    FL_TRY(fl_rpc_unary_pb(c->ch, M_SAMPLE, &req.base, &fleet__sample_response__descriptor, &m, deadline_ms,
                           FL_RPC_WAIT_FOR_READY, err));
    Fleet__SampleResponse *resp = (Fleet__SampleResponse *)m;
    size_t room = out->capacity - offset;
    fl_wire_batch_t b;
    fl_status st = fl_wire_decode_batch_bytes(resp->batch, out->obs_bytes, 0, &b, err);
    if (st != FL_OK) {
        fl_err_prefix(err, "replay sample: bad response");
        st = FL_DATA_LOSS;
        if (err) err->code = st;
        goto done;
    }
    if (b.count > room || resp->n_keys != b.count || resp->n_weights != b.count || resp->n_probabilities != b.count) {
        st = fl_err_set(err, FL_DATA_LOSS,
                        "replay sample: bad response: %zu transitions (capacity %zu) with %zu keys, %zu weights, %zu "
                        "probabilities",
                        b.count, room, resp->n_keys, resp->n_weights, resp->n_probabilities);
        goto done;
    }
    size_t n = b.count, ob = out->obs_bytes;
    memcpy(out->obs + offset * ob, b.obs, n * ob);
    memcpy(out->next_obs + offset * ob, b.next_obs, n * ob);
    memcpy(out->actions + offset, b.actions, n * sizeof *out->actions);
    memcpy(out->rewards + offset, b.rewards, n * sizeof *out->rewards);
    memcpy(out->discounts + offset, b.discounts, n * sizeof *out->discounts);
    memcpy(out->keys + offset, resp->keys, n * sizeof *out->keys);
    memcpy(out->weights + offset, resp->weights, n * sizeof *out->weights);
    memcpy(out->probs + offset, resp->probabilities, n * sizeof *out->probs);
    meta->count = n;
    meta->table_size = resp->table_size;
    meta->total = resp->total_priority;
    meta->min_q = resp->min_priority;
    meta->shard_id = resp->shard_id;
    meta->mass = resp->sampling_mass;
    meta->updates_applied = resp->updates_applied;
done:
    fleet__sample_response__free_unpacked(resp, NULL);
    return st;
}

fl_status fl_replay_sample(fl_replay_client_t *c, size_t batch_size, double beta, int64_t timeout_ms,
                           fl_replay_batch_t *out, fl_err_t *err) {
    return fl_replay_sample_updating(c, batch_size, beta, timeout_ms, NULL, out, err);
}

/* Checks updates to send along with a Sample (see fl_replay_updates_t). */
static fl_status check_updates(const fl_replay_updates_t *upd, fl_err_t *err) {
    if (!upd || upd->n == 0) return FL_OK;
    if (!upd->keys || !upd->priorities)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay sample: update %s is NULL for %zu items",
                          !upd->keys ? "keys" : "priorities", upd->n);
    return fl_wire_check_priorities("update priorities", upd->n, upd->priorities, err);
}

fl_status fl_replay_sample_updating(fl_replay_client_t *c, size_t batch_size, double beta, int64_t timeout_ms,
                                    fl_replay_updates_t *upd, fl_replay_batch_t *out, fl_err_t *err) {
    if (upd) upd->applied = 0;
    FL_TRY(check_updates(upd, err));
    if (batch_size == 0 || batch_size > out->capacity || batch_size > UINT32_MAX)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay sample: batch_size %zu, expected 1 .. %zu (the batch's capacity)", batch_size,
                          out->capacity);
    sample_meta meta;
    memset(&meta, 0, sizeof meta);
    fl_status st = sample_rows(c, batch_size, beta, timeout_ms, 0, upd, out, 0, &meta, err);
    if (upd) upd->applied = meta.updates_applied;
    if (st != FL_OK) return st;
    out->count = meta.count;
    out->table_size = meta.table_size;
    out->total_priority = meta.total;
    out->min_priority = meta.min_q;
    return FL_OK;
}

fl_status fl_replay_update_priorities(fl_replay_client_t *c, size_t n, const uint64_t *keys, const float *priorities,
                                      uint64_t *applied, fl_err_t *err) {
    if (applied) *applied = 0;
    if (n == 0) return FL_OK;
    if (!keys || !priorities)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay update_priorities: %s is NULL for %zu items",
                          !keys ? "keys" : "priorities", n);
    Fleet__UpdatePrioritiesRequest req = FLEET__UPDATE_PRIORITIES_REQUEST__INIT;
    req.n_keys = n;
    req.keys = (uint64_t *)keys;
    req.n_priorities = n;
    req.priorities = (float *)priorities;
    ProtobufCMessage *m = NULL;
    FL_TRY(fl_rpc_unary_pb(c->ch, M_UPDATE, &req.base, &fleet__update_priorities_response__descriptor, &m,
                           c->timeout_ms, FL_RPC_WAIT_FOR_READY, err));
    Fleet__UpdatePrioritiesResponse *resp = (Fleet__UpdatePrioritiesResponse *)m;
    if (applied) *applied = resp->applied;
    fleet__update_priorities_response__free_unpacked(resp, NULL);
    return FL_OK;
}

fl_status fl_replay_info(fl_replay_client_t *c, int64_t timeout_ms, fl_replay_info_t *out, fl_err_t *err) {
    Fleet__ReplayInfoRequest req = FLEET__REPLAY_INFO_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    FL_TRY(fl_rpc_unary_pb(c->ch, M_INFO, &req.base, &fleet__replay_info__descriptor, &m,
                           timeout_ms > 0 ? timeout_ms : c->timeout_ms, FL_RPC_WAIT_FOR_READY, err));
    Fleet__ReplayInfo *r = (Fleet__ReplayInfo *)m;
    memset(out, 0, sizeof *out);
    out->shard_id = r->shard_id;
    out->size = r->size;
    out->capacity = r->capacity;
    out->inserted = r->inserted;
    out->sampled = r->sampled;
    out->insert_batches = r->insert_batches;
    out->updates_applied = r->updates_applied;
    out->updates_stale = r->updates_stale;
    out->sample_calls = r->sample_calls;
    out->rejected = r->rejected;
    out->samples_per_insert = r->samples_per_insert;
    out->insert_blocked_s = r->insert_blocked_s;
    out->sample_blocked_s = r->sample_blocked_s;
    out->inserts_waiting = r->inserts_waiting;
    out->samples_waiting = r->samples_waiting;
    out->sampling_mass = r->sampling_mass;
    out->min_priority = r->min_priority;
    out->storage_bytes = r->storage_bytes;
    out->frames = r->frames;
    out->total_priority = r->total_priority;
    out->max_priority = r->max_priority;
    out->uptime_s = r->uptime_s;
    fleet__replay_info__free_unpacked(r, NULL);
    return FL_OK;
}

/* ------------------------------------------------------------ sharded ---- */

fl_status fl_replay_addrs_parse(const char *spec, fl_replay_addrs_t *out, fl_err_t *err) {
    memset(out, 0, sizeof *out);
    if (!spec || !*spec)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay addresses: empty (expected HOST:PORT[,HOST:PORT...] or @FILE)");
    char *text = NULL;
    const char *seps = ",";
    if (spec[0] == '@') {
        FILE *f = fopen(spec + 1, "rb");
        if (!f) return fl_err_set(err, FL_INVALID_ARGUMENT, "replay addresses: cannot read '%s'", spec + 1);
        size_t cap = 4096, n = 0, k;
        text = malloc(cap);
        while (text && (k = fread(text + n, 1, cap - n - 1, f)) > 0) {
            n += k;
            if (n + 1 >= cap) {
                char *t = realloc(text, cap * 2);
                if (!t) {
                    free(text);
                    text = NULL;
                    break;
                }
                text = t;
                cap *= 2;
            }
        }
        fclose(f);
        if (!text) return fl_err_set(err, FL_NO_MEMORY, "replay addresses: out of memory reading '%s'", spec + 1);
        text[n] = '\0';
        seps = ", \t\r\n";
    } else {
        text = strdup(spec);
        if (!text) return fl_err_set(err, FL_NO_MEMORY, "replay addresses: out of memory");
    }
    fl_status st = FL_OK;
    out->addr = calloc(FL_REPLAY_MAX_SHARDS, sizeof *out->addr);
    if (!out->addr) {
        st = fl_err_set(err, FL_NO_MEMORY, "replay addresses: out of memory");
        goto done;
    }
    /* Between separators: with commas only, an empty entry ("a,,b") is an error; in a
     * file, runs of whitespace are one separator. */
    const char *p = text;
    for (;;) {
        size_t len = strcspn(p, seps);
        if (len == 0 && spec[0] == '@') {
            if (!*p) break;
            p++;
            continue;
        }
        if (len == 0) {
            st = fl_err_set(err, FL_INVALID_ARGUMENT, "replay addresses: entry %d of '%s' is empty", out->count, spec);
            goto done;
        }
        if (out->count == FL_REPLAY_MAX_SHARDS) {
            st = fl_err_set(err, FL_INVALID_ARGUMENT, "replay addresses: more than %d in '%.64s...'",
                            FL_REPLAY_MAX_SHARDS, spec);
            goto done;
        }
        out->addr[out->count] = strndup(p, len);
        if (!out->addr[out->count]) {
            st = fl_err_set(err, FL_NO_MEMORY, "replay addresses: out of memory");
            goto done;
        }
        out->count++;
        p += len;
        if (!*p) break;
        p++;
    }
    if (out->count == 0) st = fl_err_set(err, FL_INVALID_ARGUMENT, "replay addresses: none in '%s'", spec);
done:
    free(text);
    if (st != FL_OK) fl_replay_addrs_free(out);
    return st;
}

void fl_replay_addrs_free(fl_replay_addrs_t *a) {
    if (!a) return;
    for (int i = 0; a->addr && i < a->count; i++) free(a->addr[i]);
    free(a->addr);
    memset(a, 0, sizeof *a);
}

int fl_replay_shard_for_actor(int actor_index, int shards) {
    if (shards <= 1 || actor_index < 0) return 0;
    return actor_index % shards;
}

/* What the sampler last learned of one shard. */
typedef struct shard_view {
    double mass;    /* what its draws are proportional to (T_s with the prioritized selector) */
    double total;   /* T_s: sum of p^alpha */
    uint64_t size;  /* N_s */
    double min_q;   /* smallest positive p^alpha (0: unknown) */
    int stalled;    /* its last Sample was refused (too few items, rate limit): probed */
    double seen_at; /* clock of the answer these figures come from */
} shard_view;

/* A shard's sampling mass as answered (a server without the field: its total priority). */
static double mass_of(double sampling_mass, double total) {
    return sampling_mass > 0.0 ? sampling_mass : total > 0.0 ? total : 0.0;
}

/* A shard that gets no rows of a batch is asked for its Info at most this often (its
 * mass, < 1/B of the total or it would have got a row, is refreshed for the next split). */
#define SHARD_REFRESH_S 0.1

struct fl_replay_sharded {
    int n;
    fl_replay_addrs_t addrs;
    fl_replay_client_t **c; /* (n) */
    fl_fanout_t *pool;      /* n - 1 workers for the per-shard calls */
    int64_t timeout_ms;

    pthread_mutex_t mu; /* guards the fields below */
    fl_rng_t rng;       /* the split's uniform */
    int have_views;     /* views hold answers of the last call (else: refresh first) */
    shard_view *views;  /* (n) */
};

fl_status fl_replay_sharded_create(const char *addrs, uint64_t seed, fl_replay_sharded_t **out, fl_err_t *err) {
    *out = NULL;
    fl_replay_sharded_t *s = calloc(1, sizeof *s);
    if (!s) return fl_err_set(err, FL_NO_MEMORY, "replay: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    fl_rng_init(&s->rng, seed);
    s->timeout_ms = FL_REPLAY_CLIENT_TIMEOUT_MS;
    fl_status st = fl_replay_addrs_parse(addrs, &s->addrs, err);
    if (st != FL_OK) goto fail;
    s->c = calloc((size_t)s->addrs.count, sizeof *s->c);
    s->views = calloc((size_t)s->addrs.count, sizeof *s->views);
    if (!s->c || !s->views) {
        st = fl_err_set(err, FL_NO_MEMORY, "replay: out of memory");
        goto fail;
    }
    for (int i = 0; i < s->addrs.count; i++) {
        if ((st = fl_replay_client_create(s->addrs.addr[i], &s->c[i], err)) != FL_OK) {
            fl_err_prefix(err, "replay shard %d (%s)", i, s->addrs.addr[i]);
            goto fail;
        }
        s->n++;
    }
    if (s->n > 1 && (st = fl_fanout_create(s->n - 1, &s->pool, err)) != FL_OK) goto fail;
    *out = s;
    return FL_OK;
fail:
    fl_replay_sharded_destroy(s);
    return st;
}

void fl_replay_sharded_destroy(fl_replay_sharded_t *s) {
    if (!s) return;
    fl_fanout_destroy(s->pool); /* no call is running: its workers are idle */
    for (int i = 0; i < s->n; i++) fl_replay_client_destroy(s->c[i]);
    free(s->c);
    free(s->views);
    fl_replay_addrs_free(&s->addrs);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int fl_replay_sharded_count(const fl_replay_sharded_t *s) {
    return s->n;
}

const char *fl_replay_sharded_addr(const fl_replay_sharded_t *s, int shard) {
    return shard >= 0 && shard < s->n ? s->addrs.addr[shard] : NULL;
}

fl_replay_client_t *fl_replay_sharded_client(fl_replay_sharded_t *s, int shard) {
    return shard >= 0 && shard < s->n ? s->c[shard] : NULL;
}

void fl_replay_sharded_set_timeout(fl_replay_sharded_t *s, int64_t timeout_ms) {
    s->timeout_ms = timeout_ms > 0 ? timeout_ms : FL_REPLAY_CLIENT_TIMEOUT_MS;
    for (int i = 0; i < s->n; i++) fl_replay_client_set_timeout(s->c[i], timeout_ms);
}

/* One shard's part of a call, run on its own thread. */
typedef enum { JOB_SAMPLE, JOB_INFO, JOB_UPDATE } job_kind;

typedef struct job {
    job_kind kind;
    fl_replay_client_t *c;
    int shard;
    int64_t timeout_ms;
    /* sample */
    size_t count, offset;
    int probe;
    double beta;
    fl_replay_batch_t *out;
    sample_meta meta;
    /* info */
    fl_replay_info_t info;
    /* update */
    const uint64_t *keys;
    const float *prios;
    uint64_t applied;

    fl_status st;
    fl_err_t err;
} job_t;

static void *job_run(void *arg) {
    job_t *j = arg;
    fl_err_init(&j->err);
    switch (j->kind) {
    case JOB_SAMPLE:
        j->st = sample_rows(j->c, j->count, j->beta, j->timeout_ms, j->probe, NULL, j->out, j->offset, &j->meta,
                            &j->err);
        break;
    case JOB_INFO: j->st = fl_replay_info(j->c, j->timeout_ms, &j->info, &j->err); break;
    case JOB_UPDATE:
        j->st = fl_replay_update_priorities(j->c, j->count, j->keys, j->prios, &j->applied, &j->err);
        break;
    }
    return NULL;
}

static void job_item(void *arg, int i) { job_run((job_t *)arg + i); }

/* Runs n jobs at once on the client's pool (the caller's thread takes part). */
static void run_jobs(fl_replay_sharded_t *s, job_t *jobs, int n) { fl_fanout_run(s->pool, n, job_item, jobs); }

/* The first failed job's error (jobs are in shard order), naming its shard. */
static fl_status first_error(const fl_replay_sharded_t *s, const job_t *jobs, int n, fl_err_t *err) {
    for (int i = 0; i < n; i++) {
        if (jobs[i].st == FL_OK) continue;
        const char *msg = jobs[i].err.msg[0] ? jobs[i].err.msg : fl_status_str(jobs[i].st);
        return fl_err_set(err, jobs[i].st, "replay shard %d of %d (%s): %s", jobs[i].shard, s->n,
                          s->addrs.addr[jobs[i].shard], msg);
    }
    return FL_OK;
}

static fl_status wrong_shard(const fl_replay_sharded_t *s, int shard, unsigned got, fl_err_t *err) {
    return fl_err_set(err, FL_DATA_LOSS,
                      "replay shard %d of %d (%s) answers as shard %u: the replay addresses must be listed in shard "
                      "order",
                      shard, s->n, s->addrs.addr[shard], got);
}

static int64_t ms_left(double deadline) {
    double left = (deadline - fl_clock_sec()) * 1e3;
    return left < 1.0 ? 1 : (int64_t)left;
}

/* Info from every shard into the views. Any failure (named) invalidates them. */
static fl_status refresh_views(fl_replay_sharded_t *s, int64_t timeout_ms, fl_err_t *err) {
    job_t *jobs = calloc((size_t)s->n, sizeof *jobs);
    if (!jobs) return fl_err_set(err, FL_NO_MEMORY, "replay sample: out of memory");
    for (int i = 0; i < s->n; i++)
        jobs[i] = (job_t){.kind = JOB_INFO, .c = s->c[i], .shard = i, .timeout_ms = timeout_ms};
    run_jobs(s, jobs, s->n);
    fl_status st = first_error(s, jobs, s->n, err);
    for (int i = 0; st == FL_OK && i < s->n; i++)
        if (jobs[i].info.shard_id != (uint32_t)i) st = wrong_shard(s, i, jobs[i].info.shard_id, err);
    pthread_mutex_lock(&s->mu);
    if (st == FL_OK) {
        double t = fl_clock_sec();
        for (int i = 0; i < s->n; i++) {
            shard_view *v = &s->views[i];
            v->total = jobs[i].info.total_priority;
            v->mass = mass_of(jobs[i].info.sampling_mass, v->total);
            v->size = jobs[i].info.size;
            v->seen_at = t;
            v->min_q = v->total > 0.0 ? jobs[i].info.min_priority : 0.0;
        }
    }
    s->have_views = st == FL_OK;
    pthread_mutex_unlock(&s->mu);
    free(jobs);
    return st;
}

/* Until some shard holds priority mass (polling Info), or the deadline. */
static fl_status wait_for_mass(fl_replay_sharded_t *s, int64_t timeout_ms, double deadline, fl_err_t *err) {
    for (;;) {
        FL_TRY(refresh_views(s, timeout_ms > 0 ? ms_left(deadline) : s->timeout_ms, err));
        double sum = 0.0;
        uint64_t size = 0;
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < s->n; i++) {
            sum += s->views[i].mass;
            size += s->views[i].size;
        }
        pthread_mutex_unlock(&s->mu);
        if (sum > 0.0) return FL_OK;
        double now = fl_clock_sec();
        if (timeout_ms <= 0 || now + 0.05 >= deadline)
            return fl_err_set(err, FL_FAILED_PRECONDITION,
                              "replay holds %" PRIu64 " transitions and nothing to sample on any of its %d shards",
                              size, s->n);
        fl_sleep_sec(0.05);
    }
}

/* Moves rows [src, src + n) of out to [dst, dst + n), dst <= src. */
static void move_rows(fl_replay_batch_t *out, size_t dst, size_t src, size_t n) {
    if (dst == src || n == 0) return;
    size_t ob = out->obs_bytes;
    memmove(out->obs + dst * ob, out->obs + src * ob, n * ob);
    memmove(out->next_obs + dst * ob, out->next_obs + src * ob, n * ob);
    memmove(out->actions + dst, out->actions + src, n * sizeof *out->actions);
    memmove(out->rewards + dst, out->rewards + src, n * sizeof *out->rewards);
    memmove(out->discounts + dst, out->discounts + src, n * sizeof *out->discounts);
    memmove(out->keys + dst, out->keys + src, n * sizeof *out->keys);
    memmove(out->weights + dst, out->weights + src, n * sizeof *out->weights);
    memmove(out->probs + dst, out->probs + src, n * sizeof *out->probs);
}

/* Systematic split of `need` rows over the shards with mass[i] > 0 and !skip[i]: one
 * uniform u; shard i gets the points (k + u) / need, k < need, that fall in its share of
 * [0, 1). cnt (n) receives the counts (sum need); returns the mass split over. */
static double split_rows(int n, const double *mass, const unsigned char *skip, size_t need, double u, size_t *cnt) {
    double sum = 0.0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        cnt[i] = 0;
        if (!skip[i] && mass[i] > 0.0) {
            sum += mass[i];
            last = i;
        }
    }
    if (last < 0) return 0.0;
    const double B = (double)need;
    size_t below = 0; /* points below the shard's interval */
    double cum = 0.0;
    for (int i = 0; i <= last; i++) {
        if (skip[i] || !(mass[i] > 0.0)) continue;
        size_t upto = need;
        if (i < last) {
            cum += mass[i];
            double x = ceil(cum / sum * B - u);
            upto = x <= 0.0 ? 0 : x >= B ? need : (size_t)x;
            if (upto < below) upto = below;
        }
        cnt[i] = upto - below;
        below = upto;
    }
    return sum;
}

/* Checks one shard's answer to a Sample of j->count rows. */
static fl_status check_sampled(const fl_replay_sharded_t *s, const job_t *j, const fl_replay_batch_t *out,
                               fl_err_t *err) {
    int i = j->shard;
    if (j->meta.count != j->count)
        return fl_err_set(err, FL_DATA_LOSS, "replay shard %d of %d (%s): asked for %zu transitions, got %zu", i, s->n,
                          s->addrs.addr[i], j->count, j->meta.count);
    if (j->meta.shard_id != (uint32_t)i) return wrong_shard(s, i, j->meta.shard_id, err);
    for (size_t r = j->offset; r < j->offset + j->count; r++)
        if (fl_table_key_shard(out->keys[r]) != i)
            return wrong_shard(s, i, (unsigned)fl_table_key_shard(out->keys[r]), err);
    if (!(mass_of(j->meta.mass, j->meta.total) > 0.0))
        return fl_err_set(err, FL_DATA_LOSS, "replay shard %d of %d (%s): a batch drawn from sampling mass %g", i, s->n,
                          s->addrs.addr[i], j->meta.mass);
    return FL_OK;
}

/* A run of rows of the batch that one shard answered. */
typedef struct segment {
    int shard;
    size_t offset, count;
} segment;

fl_status fl_replay_sharded_sample_updating(fl_replay_sharded_t *s, size_t batch_size, double beta,
                                            int64_t timeout_ms, fl_replay_updates_t *upd, fl_replay_batch_t *out,
                                            fl_err_t *err) {
    if (s->n == 1) return fl_replay_sample_updating(s->c[0], batch_size, beta, timeout_ms, upd, out, err);
    if (upd) {
        upd->applied = 0;
        if (upd->n > 0)
            FL_TRY(fl_replay_sharded_update_priorities(s, upd->n, upd->keys, upd->priorities, &upd->applied, err));
    }
    return fl_replay_sharded_sample(s, batch_size, beta, timeout_ms, out, err);
}

fl_status fl_replay_sharded_sample(fl_replay_sharded_t *s, size_t batch_size, double beta, int64_t timeout_ms,
                                   fl_replay_batch_t *out, fl_err_t *err) {
    if (s->n == 1) return fl_replay_sample(s->c[0], batch_size, beta, timeout_ms, out, err);
    if (batch_size == 0 || batch_size > out->capacity || batch_size > UINT32_MAX)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay sample: batch_size %zu, expected 1 .. %zu (the batch's capacity)", batch_size,
                          out->capacity);
    if (!(beta >= 0.0 && beta <= 1.0))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay sample: beta %g, expected a value in [0, 1]", beta);
    const int n = s->n;
    double deadline = fl_clock_sec() + (double)(timeout_ms > 0 ? timeout_ms : s->timeout_ms) * 1e-3;
    fl_status st = FL_OK;
    fl_err_t refusal;
    fl_err_init(&refusal);
    fl_status refusal_st = FL_OK;
    size_t nseg = 0, filled = 0;
    job_t *jobs = calloc((size_t)n, sizeof *jobs);
    job_t *active = calloc((size_t)n, sizeof *active);
    segment *segs = calloc((size_t)n * (size_t)(n + 2), sizeof *segs);
    double *mass = calloc((size_t)n, sizeof *mass); /* to split by: the last answers */
    size_t *cnt = calloc((size_t)n, sizeof *cnt);
    unsigned char *skip = calloc((size_t)n, 1);       /* refused during this call */
    unsigned char *stalled = calloc((size_t)n, 1);    /* probe instead of waiting */
    unsigned char *answered = calloc((size_t)n, 1);   /* figures fresh: this call or recent */
    shard_view *now = calloc((size_t)n, sizeof *now); /* what the shards said this call */
    if (!jobs || !active || !segs || !mass || !cnt || !skip || !stalled || !answered || !now) {
        st = fl_err_set(err, FL_NO_MEMORY, "replay sample: out of memory");
        goto done;
    }

    /* The masses to split by: the last call's answers, or a fresh Info round. */
    pthread_mutex_lock(&s->mu);
    int have = s->have_views;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += s->views[i].mass;
    pthread_mutex_unlock(&s->mu);
    if (!have || !(sum > 0.0)) {
        if ((st = wait_for_mass(s, timeout_ms, deadline, err)) != FL_OK) goto done;
    }
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++) {
        now[i] = s->views[i];
        mass[i] = now[i].mass;
        stalled[i] = (unsigned char)now[i].stalled;
    }
    pthread_mutex_unlock(&s->mu);

    /* Passes: split what is missing over the shards not refused yet; a shard that
     * refuses (FAILED_PRECONDITION: too few items, or its rate limiter) is left out and
     * its rows are drawn from the others. A stalled shard is probed without waiting; if
     * nobody serves, one more pass waits on every shard. */
    int waiting_pass = 0;
    double t_call = fl_clock_sec();
    for (int i = 0; i < n; i++) answered[i] = t_call - now[i].seen_at < SHARD_REFRESH_S;
    while (filled < batch_size) {
        pthread_mutex_lock(&s->mu);
        double u = fl_rng_double(&s->rng);
        pthread_mutex_unlock(&s->mu);
        if (!(split_rows(n, mass, skip, batch_size - filled, u, cnt) > 0.0)) {
            if (refusal_st != FL_OK) {
                st = fl_err_set(err, refusal_st, "%s", refusal.msg);
            } else {
                st = fl_err_set(err, FL_FAILED_PRECONDITION, "replay: nothing to sample on any of its %d shards", n);
            }
            goto done;
        }
        int na = 0;
        size_t at = filled;
        for (int i = 0; i < n; i++) {
            job_t *j = &jobs[i];
            *j = (job_t){.c = s->c[i], .shard = i, .beta = beta, .out = out};
            if (cnt[i] > 0) {
                j->kind = JOB_SAMPLE;
                j->count = cnt[i];
                j->offset = at;
                j->probe = stalled[i] && !waiting_pass;
                j->timeout_ms = timeout_ms > 0 ? ms_left(deadline) : timeout_ms;
                at += cnt[i];
            } else if (!answered[i]) {
                j->kind = JOB_INFO; /* refreshes its mass for the next split */
                j->timeout_ms = timeout_ms > 0 ? ms_left(deadline) : s->timeout_ms;
            } else {
                continue;
            }
            active[na++] = *j;
        }
        run_jobs(s, active, na);
        size_t served = 0;
        int probes_refused = 0;
        for (int a = 0; a < na; a++) {
            job_t *j = &active[a];
            int i = j->shard;
            if (j->st == FL_FAILED_PRECONDITION && j->kind == JOB_SAMPLE) {
                /* Refused: leave it out of this call, probe it on the next ones. */
                if (refusal_st == FL_OK) {
                    refusal_st = j->st;
                    fl_err_set(&refusal, j->st, "replay shard %d of %d (%s): %s", i, n, s->addrs.addr[i], j->err.msg);
                }
                skip[i] = 1;
                stalled[i] = 1;
                probes_refused += j->probe;
                continue;
            }
            if (j->st != FL_OK) {
                st = first_error(s, j, 1, err);
                goto done;
            }
            answered[i] = 1;
            if (j->kind == JOB_INFO) {
                if (j->info.shard_id != (uint32_t)i) {
                    st = wrong_shard(s, i, j->info.shard_id, err);
                    goto done;
                }
                now[i].total = j->info.total_priority;
                now[i].mass = mass_of(j->info.sampling_mass, now[i].total);
                now[i].size = j->info.size;
                now[i].seen_at = fl_clock_sec();
                now[i].min_q = now[i].total > 0.0 ? j->info.min_priority : 0.0;
                continue;
            }
            if ((st = check_sampled(s, j, out, err)) != FL_OK) goto done;
            now[i].total = j->meta.total;
            now[i].mass = mass_of(j->meta.mass, j->meta.total);
            now[i].size = j->meta.table_size;
            now[i].seen_at = fl_clock_sec();
            if (j->meta.min_q > 0.0) now[i].min_q = j->meta.min_q;
            stalled[i] = 0;
            /* Close the gaps left by refused shards: rows of this pass move down. */
            move_rows(out, filled + served, j->offset, j->count);
            segs[nseg++] = (segment){i, filled + served, j->count};
            served += j->count;
        }
        filled += served;
        if (served == 0) {
            if (probes_refused && !waiting_pass) {
                waiting_pass = 1; /* nobody could serve at once: wait on every shard */
                memset(skip, 0, (size_t)n);
                continue;
            }
            st = fl_err_set(err, refusal_st, "%s", refusal.msg);
            goto done;
        }
    }

    /* The batch is a draw from the shards that served (all of them, normally): P(i) =
     * P_s(i) M_s / M over those shards (M_s: sampling mass, T_s when prioritized),
     * weights renormalised to their smallest priority. */
    double M = 0.0, T = 0.0, qmin = INFINITY; /* sampling mass, priority total */
    uint64_t N = 0;
    for (int i = 0; i < n; i++) {
        /* In: every shard that served rows, and every other shard with mass that is not
         * refusing (its figures from this call, or from an answer < SHARD_REFRESH_S old). */
        int served_rows = 0;
        for (size_t k = 0; k < nseg; k++) served_rows |= segs[k].shard == i;
        if (!(now[i].mass > 0.0) || !(served_rows || (!skip[i] && !stalled[i]))) continue;
        M += now[i].mass;
        T += now[i].total;
        N += now[i].size;
        if (now[i].min_q > 0.0 && now[i].min_q < qmin) qmin = now[i].min_q;
    }
    for (size_t k = 0; k < nseg; k++) {
        const segment *g = &segs[k];
        const shard_view *v = &now[g->shard];
        double share = v->mass / M;
        double f = 1.0;
        if (beta > 0.0 && isfinite(qmin) && v->min_q > 0.0) f = pow(qmin / v->min_q, beta);
        for (size_t r = g->offset; r < g->offset + g->count; r++) {
            out->probs[r] *= share;
            if (f != 1.0) {
                float w = (float)((double)out->weights[r] * f);
                out->weights[r] = w > 0.0f ? w : FLT_MIN;
            }
        }
    }
    out->count = batch_size;
    out->table_size = N;
    out->total_priority = T;
    out->min_priority = beta > 0.0 && isfinite(qmin) ? qmin : 0.0;

done:
    /* What the shards said becomes the next split's masses; after a failure the next
     * call asks every shard's Info first. Stalled flags persist either way. */
    if (now && stalled) {
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < n; i++) {
            if (now[i].seen_at > s->views[i].seen_at) {
                s->views[i].total = now[i].total;
                s->views[i].mass = now[i].mass;
                s->views[i].size = now[i].size;
                s->views[i].min_q = now[i].min_q;
                s->views[i].seen_at = now[i].seen_at;
            }
            s->views[i].stalled = stalled[i];
        }
        s->have_views = st == FL_OK;
        pthread_mutex_unlock(&s->mu);
    }
    free(jobs);
    free(active);
    free(segs);
    free(mass);
    free(cnt);
    free(skip);
    free(stalled);
    free(answered);
    free(now);
    return st;
}

fl_status fl_replay_sharded_update_priorities(fl_replay_sharded_t *s, size_t n, const uint64_t *keys,
                                              const float *priorities, uint64_t *applied, fl_err_t *err) {
    if (s->n == 1) return fl_replay_update_priorities(s->c[0], n, keys, priorities, applied, err);
    if (applied) *applied = 0;
    if (n == 0) return FL_OK;
    if (!keys || !priorities)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay update_priorities: %s is NULL for %zu items",
                          !keys ? "keys" : "priorities", n);
    for (size_t i = 0; i < n; i++)
        if (fl_table_key_shard(keys[i]) >= s->n)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "replay update_priorities: keys[%zu] = %016" PRIx64
                              " names shard %d, expected 0 .. %d "
                              "(%d replay shards)",
                              i, keys[i], fl_table_key_shard(keys[i]), s->n - 1, s->n);
    FL_TRY(fl_wire_check_priorities("replay update_priorities: priorities", n, priorities, err));
    fl_status st = FL_OK;
    size_t *count = calloc((size_t)s->n + 1, sizeof *count);
    uint64_t *k = malloc(n * sizeof *k);
    float *p = malloc(n * sizeof *p);
    job_t *jobs = calloc((size_t)s->n, sizeof *jobs);
    if (!count || !k || !p || !jobs) {
        st = fl_err_set(err, FL_NO_MEMORY, "replay update_priorities: out of memory for %zu keys", n);
        goto done;
    }
    /* Group by shard, keeping each shard's keys in their order (a later duplicate wins). */
    for (size_t i = 0; i < n; i++) count[fl_table_key_shard(keys[i]) + 1]++;
    for (int i = 0; i < s->n; i++) count[i + 1] += count[i];
    int nj = 0;
    for (int i = 0; i < s->n; i++)
        if (count[i + 1] > count[i])
            jobs[nj++] = (job_t){.kind = JOB_UPDATE,
                                 .c = s->c[i],
                                 .shard = i,
                                 .count = count[i + 1] - count[i],
                                 .keys = k + count[i],
                                 .prios = p + count[i]};
    for (size_t i = 0; i < n; i++) {
        size_t at = count[fl_table_key_shard(keys[i])]++;
        k[at] = keys[i];
        p[at] = priorities[i];
    }
    run_jobs(s, jobs, nj);
    for (int i = 0; i < nj; i++)
        if (applied) *applied += jobs[i].applied;
    st = first_error(s, jobs, nj, err);
done:
    free(count);
    free(k);
    free(p);
    free(jobs);
    return st;
}

fl_status fl_replay_sharded_info(fl_replay_sharded_t *s, int64_t timeout_ms, fl_replay_info_t *total,
                                 fl_replay_info_t *per_shard, fl_err_t *err) {
    job_t *jobs = calloc((size_t)s->n, sizeof *jobs);
    if (!jobs) return fl_err_set(err, FL_NO_MEMORY, "replay info: out of memory");
    for (int i = 0; i < s->n; i++)
        jobs[i] = (job_t){.kind = JOB_INFO, .c = s->c[i], .shard = i, .timeout_ms = timeout_ms};
    run_jobs(s, jobs, s->n);
    fl_replay_info_t t;
    memset(&t, 0, sizeof t);
    int answered = 0;
    for (int i = 0; i < s->n; i++) {
        if (jobs[i].st != FL_OK) continue;
        const fl_replay_info_t *in = &jobs[i].info;
        if (per_shard) per_shard[i] = *in;
        t.size += in->size;
        t.capacity += in->capacity;
        t.inserted += in->inserted;
        t.sampled += in->sampled;
        t.insert_batches += in->insert_batches;
        t.updates_applied += in->updates_applied;
        t.updates_stale += in->updates_stale;
        t.sample_calls += in->sample_calls;
        t.rejected += in->rejected;
        t.total_priority += in->total_priority;
        t.sampling_mass += in->sampling_mass;
        t.storage_bytes += in->storage_bytes;
        t.frames += in->frames;
        if (in->min_priority > 0.0 && (t.min_priority == 0.0 || in->min_priority < t.min_priority))
            t.min_priority = in->min_priority;
        t.max_priority = fmax(t.max_priority, in->max_priority);
        t.uptime_s = answered++ ? fmin(t.uptime_s, in->uptime_s) : in->uptime_s;
        t.samples_per_insert = fmax(t.samples_per_insert, in->samples_per_insert);
        t.insert_blocked_s += in->insert_blocked_s;
        t.sample_blocked_s += in->sample_blocked_s;
        t.inserts_waiting += in->inserts_waiting;
        t.samples_waiting += in->samples_waiting;
    }
    fl_status st = first_error(s, jobs, s->n, err);
    if (st == FL_OK && total) *total = t;
    free(jobs);
    return st;
}
