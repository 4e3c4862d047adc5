/* writer: acknowledged inserts into one replay shard (see writer.h).
 *
 * The stream key is drawn from the kernel's random source at create and goes with every
 * InsertRequest; the shard binds the stream to it.
 *
 * The writer keeps every appended batch in a FIFO until an InsertResponse's
 * last_sequence covers it. `sent` counts the FIFO's leading batches already written on
 * the open call; a new call starts at 0, so opening a call after a failure resends
 * everything unacknowledged, oldest first, and the shard's per-stream sequence record
 * skips what it already holds. Calls are rotated after batches_per_call batches and
 * before they get near their deadline, so an idle-but-healthy call never expires. */
#include "replay/writer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/methods.h"
#include "common/retry.h"
#include "common/rpc.h"
#include "common/stop.h"
#include "fleet.pb-c.h"
#include "replay/client_internal.h"
#include "replay/wire.h"

/* Deadline of one Insert call of a writer; calls are rotated at half of it. */
#define WRITER_CALL_TIMEOUT_MS 60000
/* While the shard is unreachable, append waits for it once this many calls' worth of
 * batches are pending. */
#define AWAY_CALLS 4
/* The longest wait before calling again a shard that was unreachable (once its channel
 * is connected again). */
#define AWAY_RETRY_S 0.25
/* Room left in a message for everything but a batch's observations. */
#define MSG_SLACK (1u << 20)

typedef struct wbatch {
    uint64_t seq;
    size_t bytes;         /* of mem */
    fl_wire_batch_t cols; /* points into mem */
    void *mem;
} wbatch;

struct fl_replay_writer {
    fl_replay_client_t *c;
    uint64_t stream_id;
    uint64_t stream_key; /* random, nonzero: binds the stream to this writer at the shard */
    double max_abs_reward, max_priority;
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
    double retry_at, failed_since;
    fl_backoff_t backoff;
    fl_err_t last_err;

    uint64_t acked, pending;
    size_t pending_bytes, max_pending_bytes; /* the backlog's memory and its bound (0 = none) */
    uint64_t dropped, dropped_batches;       /* unsent transitions dropped for the bound */
    fl_rpc_wait_fn on_wait;                  /* called while append waits (may be NULL) */
    void *on_wait_ctx;
    int appending; /* inside append: a held call's wait calls on_wait (not in flush) */
};

static void wbatch_free(wbatch *b) {
    free(b->mem);
}

/* A random nonzero 64-bit key from the kernel (getrandom, else /dev/urandom). */
static fl_status draw_key(uint64_t *key, fl_err_t *err) {
    *key = 0;
    for (int tries = 0; tries < 4 && *key == 0; tries++) {
        ssize_t got = getrandom(key, sizeof *key, 0);
        if (got != (ssize_t)sizeof *key) {
            int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
            got = fd >= 0 ? read(fd, key, sizeof *key) : -1;
            if (fd >= 0) close(fd);
            if (got != (ssize_t)sizeof *key)
                return fl_err_set(err, FL_INTERNAL,
                                  "replay writer: cannot draw a stream key (getrandom and "
                                  "/dev/urandom: %s)",
                                  strerror(errno));
        }
    }
    if (*key == 0) return fl_err_set(err, FL_INTERNAL, "replay writer: the random source gave only zero keys");
    return FL_OK;
}

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
    uint64_t key;
    FL_TRY(draw_key(&key, err));
    fl_replay_writer_t *w = calloc(1, sizeof *w);
    if (!w) return fl_err_set(err, FL_NO_MEMORY, "replay writer: out of memory");
    w->c = c;
    w->stream_id = stream_id;
    w->stream_key = key;
    w->max_abs_reward = FL_REPLAY_WRITER_MAX_ABS_REWARD;
    w->max_priority = FL_REPLAY_WRITER_MAX_PRIORITY;
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

void fl_replay_writer_set_limits(fl_replay_writer_t *w, double max_abs_reward, double max_priority) {
    w->max_abs_reward = max_abs_reward;
    w->max_priority = max_priority;
}

uint64_t fl_replay_writer_acked(const fl_replay_writer_t *w) {
    return w->acked;
}
uint64_t fl_replay_writer_pending(const fl_replay_writer_t *w) {
    return w->pending;
}
uint64_t fl_replay_writer_dropped(const fl_replay_writer_t *w) {
    return w->dropped;
}
void fl_replay_writer_set_backlog(fl_replay_writer_t *w, size_t max_bytes) {
    w->max_pending_bytes = max_bytes;
}

/* Drops the pending batches the shard acknowledged (sequence <= last). */
static void apply_ack(fl_replay_writer_t *w, uint64_t last) {
    size_t k = 0;
    while (k < w->len && w->q[k].seq <= last) {
        w->acked += w->q[k].cols.count;
        w->pending -= w->q[k].cols.count;
        w->pending_bytes -= w->q[k].bytes;
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
    /* a call cancelled by the stop, or by the owner's wait hook (an actor asked to stop):
     * the flush sends it */
    if (!w->failed && (fl_stop_requested() || e->code == FL_CANCELLED))
        FL_DEBUG("replay writer %" PRIu64 ": %s; %" PRIu64 " transitions pending for the last flush", w->stream_id,
                 e->msg, w->pending);
    else if (!w->failed)
        FL_WARN("replay writer %" PRIu64 ": %s; %" PRIu64 " transitions pending, will resend", w->stream_id, e->msg,
                w->pending);
    if (!w->failed) w->failed_since = fl_clock_sec();
    w->failed = 1;
    w->last_err = *e;
    w->sent = 0;
    double wait = fl_backoff_next(&w->backoff);
    if (e->code == FL_UNAVAILABLE && wait > AWAY_RETRY_S) wait = AWAY_RETRY_S;
    w->retry_at = fl_clock_sec() + wait;
}

static void mark_ok(fl_replay_writer_t *w) {
    if (w->failed && w->acked_once)
        FL_INFO("replay writer %" PRIu64 ": the shard acknowledges again after %.1f s away", w->stream_id,
                fl_clock_sec() - w->failed_since);
    w->acked_once = 1;
    w->failed = 0;
    fl_backoff_reset(&w->backoff);
}

/* A call the shard holds (its rate limiter): while append waits for it, the owner's hook
 * runs; a nonzero return cancels the call (its batches stay pending). */
static int call_waits(void *ctx) {
    fl_replay_writer_t *w = ctx;
    return w->appending && w->on_wait ? w->on_wait(w->on_wait_ctx) : 0;
}

static fl_status open_call(fl_replay_writer_t *w, int64_t timeout_ms, unsigned flags, fl_err_t *err) {
    w->sent = 0;
    fl_status st =
        fl_rpc_stream_open(w->c->ch, fl_method_path(FL_METHOD_REPLAY_INSERT), timeout_ms, flags, &w->call, err);
    if (st == FL_OK) {
        w->call_t0 = fl_clock_sec();
        fl_rpc_stream_on_wait(w->call, call_waits, w);
    }
    return st;
}

/* Writes q[sent..) on the open call, up to batches_per_call batches on one call (a
 * backlog goes out in pieces, each acknowledged before the next). A failure means the
 * call is over. */
static fl_status send_unsent(fl_replay_writer_t *w, fl_err_t *err) {
    while (w->sent < w->len && w->sent < (size_t)w->batches_per_call) {
        wbatch *b = &w->q[w->sent];
        fl_wire_batch_msg_t bm;
        fl_wire_encode_batch(&bm, &w->obs, &b->cols);
        Fleet__InsertRequest req = FLEET__INSERT_REQUEST__INIT;
        req.stream_id = w->stream_id;
        req.stream_key = w->stream_key;
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
 * call when it is full or old. Failures only mark the writer failed. A shard that went
 * away is waited for up to wait_ms. */
static void pump(fl_replay_writer_t *w, int64_t wait_ms) {
    fl_err_t e;
    fl_err_init(&e);
    if (!w->call) {
        /* A shard that went away: the next call waits until the channel is connected
         * again (then at most AWAY_RETRY_S). Asking the channel is what makes it try:
         * gRPC's channel, once its connection attempts were refused, fails the calls
         * that do not wait for it with the old error and, unless watched, connects
         * again only after tens of seconds. */
        if (w->failed && w->last_err.code == FL_UNAVAILABLE && !fl_rpc_channel_wait_ready(w->c->ch, wait_ms)) return;
        if (w->failed && fl_clock_sec() < w->retry_at) return;
        /* Until the shard has acknowledged a call, wait for it to come up (an actor may
         * start first); afterwards fail fast while it is unreachable, keeping batches. */
        unsigned flags = FL_RPC_STOPPABLE | (w->acked_once ? 0u : FL_RPC_WAIT_FOR_READY);
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
                          "replay writer append: n is %zu, expected at most %zu (observations of %zu bytes)", n, max_n,
                          w->obs_bytes);
    const char *missing = !obs          ? "obs"
                          : !actions    ? "actions"
                          : !rewards    ? "rewards"
                          : !discounts  ? "discounts"
                          : !next_obs   ? "next_obs"
                          : !priorities ? "priorities"
                                        : NULL;
    if (missing) return fl_err_set(err, FL_INVALID_ARGUMENT, "replay writer append: %s is NULL", missing);
    for (size_t i = 0; i < n; i++) {
        if (actions[i] < 0)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "replay writer append: actions[%zu]: got %" PRId32 ", expected >= 0", i, actions[i]);
        if (!(discounts[i] >= 0.0f && discounts[i] <= 1.0f))
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "replay writer append: discounts[%zu]: got %g, expected a value in [0, 1]", i,
                              (double)discounts[i]);
    }
    /* What the shard would refuse: non-finite float32 observations, rewards and
     * priorities beyond their bounds (replay.max_abs_reward, replay.max_priority). */
    fl_status st = fl_wire_check_rewards("rewards", n, rewards, w->max_abs_reward, err);
    for (int k = 0; st == FL_OK && k < 2 && w->obs.dtype == FL_DTYPE_FLOAT32; k++) {
        size_t per = w->obs_bytes / 4, bad = fl_wire_first_non_finite(k ? next_obs : obs, n * per);
        if (bad < n * per) {
            float v;
            memcpy(&v, (const uint8_t *)(k ? next_obs : obs) + 4 * bad, 4);
            st = fl_err_set(err, FL_INVALID_ARGUMENT, "%s[%zu][%zu]: got %g, expected a finite value",
                            k ? "next_obs" : "obs", bad / per, bad % per, (double)v);
        }
    }
    if (st == FL_OK) st = fl_wire_check_priorities_max("priorities", n, priorities, w->max_priority, err);
    if (st != FL_OK) fl_err_prefix(err, "replay writer append");
    return st;
}

/* Keeps the backlog within max_pending_bytes: drops the oldest batches not on the open
 * call (never the newest, just appended), counting them. Acknowledged batches are gone
 * from the queue already, so only unacknowledged data is ever dropped. */
static void bound_backlog(fl_replay_writer_t *w) {
    if (!w->max_pending_bytes) return;
    size_t k = w->sent, end = k;
    size_t bytes = w->pending_bytes;
    uint64_t items = 0;
    while (bytes > w->max_pending_bytes && end + 1 < w->len) {
        bytes -= w->q[end].bytes;
        items += w->q[end].cols.count;
        wbatch_free(&w->q[end]);
        end++;
    }
    if (end == k) return;
    if (w->dropped_batches == 0 || (w->dropped_batches + (end - k)) / 1000 != w->dropped_batches / 1000)
        FL_WARN("replay writer %" PRIu64
                ": the unacknowledged backlog passed its bound of %zu MiB: dropped the "
                "oldest %" PRIu64 " unsent transitions (%" PRIu64 " so far)",
                w->stream_id, w->max_pending_bytes >> 20, items, w->dropped + items);
    memmove(w->q + k, w->q + end, (w->len - end) * sizeof *w->q);
    w->len -= end - k;
    w->pending_bytes = bytes;
    w->pending -= items;
    w->dropped += items;
    w->dropped_batches += end - k;
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
    b->bytes = bytes;
    b->cols = (fl_wire_batch_t){.count = n,
                                .obs_bytes = w->obs_bytes,
                                .obs = o,
                                .actions = a,
                                .rewards = r,
                                .discounts = g,
                                .next_obs = no,
                                .priorities = p};
    w->pending += n;
    w->pending_bytes += bytes;
    bound_backlog(w);
    w->appending = 1;
    pump(w, 1);
    /* The shard is away: the caller does not run ahead of it by more than a few calls'
     * worth (what it would make meanwhile could only go out late or be dropped). */
    while (w->failed && fl_retry_transient(w->last_err.code) && w->len > AWAY_CALLS * (size_t)w->batches_per_call &&
           !fl_stop_requested()) {
        double pause = w->retry_at - fl_clock_sec();
        if (pause > 0) fl_sleep_sec(pause < 0.1 ? pause : 0.1);
        pump(w, 100);
        if (w->on_wait && w->on_wait(w->on_wait_ctx)) break;
    }
    w->appending = 0;
    /* A refusal that resending cannot change (the stream bound to another writer, a
     * batch the shard will not take): the writer is done; its owner must start over. */
    if (w->failed && !fl_retry_transient(w->last_err.code))
        return fl_err_set(err, w->last_err.code,
                          "replay writer %" PRIu64 ": the shard refuses this writer's batches (%" PRIu64
                          " transitions pending): %s",
                          w->stream_id, w->pending, w->last_err.msg);
    return FL_OK;
}

void fl_replay_writer_on_wait(fl_replay_writer_t *w, fl_rpc_wait_fn fn, void *ctx) {
    w->on_wait = fn;
    w->on_wait_ctx = ctx;
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
            if (st == FL_OK)
                st = fl_err_set(&e, FL_DEADLINE_EXCEEDED, "flush timed out after %" PRId64 " ms", timeout_ms);
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
    return fl_err_set(err, st, "replay writer %" PRIu64 ": %" PRIu64 " transitions in %zu batches not acknowledged: %s",
                      w->stream_id, w->pending, w->len, e.msg[0] ? e.msg : fl_status_str(st));
}
