/* Tests of the replay service (replay/server), its client (replay/client) and the wire
 * checks (replay/wire): real gRPC servers on 127.0.0.1 port 0 or on a unix socket, the
 * real client over gRPC, and hand-built messages for what the client never sends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "replay/client.h"
#include "replay/server.h"
#include "replay/table.h"
#include "replay/wire.h"
#include "replay/writer.h"
#include "tests/replay_fixture.h"

#define OBS_DIM 4
#define OBS_BYTES (OBS_DIM * sizeof(float))
#define NUM_ACTIONS 3

static const fl_wire_sig_t SIG = {{FL_DTYPE_FLOAT32, 1, {OBS_DIM}}, NUM_ACTIONS, 0, 0};
static const fl_obs_spec_t SPEC = {FL_DTYPE_FLOAT32, 1, {OBS_DIM}};

/* ---- helpers --------------------------------------------------------------- */

static fl_replay_service_opts_t make_opts(int64_t capacity, int64_t min_size, double alpha) {
    fl_replay_service_opts_t o = replay_fixture_opts(SIG.obs, SIG.num_actions, capacity, min_size);
    o.shards = 1;
    o.alpha = alpha;
    o.seed = 7;
    return o;
}

static void server_verify(replay_fixture_t *s) {
    fl_err_t e;
    fl_err_init(&e);
    if (fl_table_verify(fl_replay_service_table(s->svc), &e) != FL_OK) fail_msg("table: %s", e.msg);
}

/* Columns of n transitions whose every value derives from the id base + i, so that
 * any row can be recomputed from its id. */
typedef struct cols {
    size_t n;
    float *obs, *next_obs, *rewards, *discounts, *priorities;
    int32_t *actions;
} cols_t;

static void cols_make(cols_t *c, size_t n, uint64_t base) {
    c->n = n;
    c->obs = malloc(n * OBS_BYTES);
    c->next_obs = malloc(n * OBS_BYTES);
    c->rewards = malloc(n * sizeof(float));
    c->discounts = malloc(n * sizeof(float));
    c->priorities = malloc(n * sizeof(float));
    c->actions = malloc(n * sizeof(int32_t));
    assert_non_null(c->actions);
    for (size_t i = 0; i < n; i++) {
        uint64_t id = base + i;
        for (int d = 0; d < OBS_DIM; d++) {
            c->obs[i * OBS_DIM + d] = (float)id + 0.125f * (float)d;
            c->next_obs[i * OBS_DIM + d] = -(float)id - 0.25f * (float)d;
        }
        c->actions[i] = (int32_t)(id % NUM_ACTIONS);
        c->rewards[i] = 0.5f * (float)id;
        c->discounts[i] = (id % 7 == 0) ? 0.0f : 0.970299f;
        c->priorities[i] = 1.0f;
    }
}

static void cols_free(cols_t *c) {
    free(c->obs);
    free(c->next_obs);
    free(c->rewards);
    free(c->discounts);
    free(c->priorities);
    free(c->actions);
}

static void append_ok(fl_replay_writer_t *w, size_t n, uint64_t base) {
    cols_t c;
    cols_make(&c, n, base);
    fl_err_t e;
    fl_err_init(&e);
    fl_status st =
        fl_replay_writer_append(w, n, c.obs, c.actions, c.rewards, c.discounts, c.next_obs, c.priorities, &e);
    cols_free(&c);
    if (st != FL_OK) fail_msg("append: %s", e.msg);
}

static void flush_ok(fl_replay_writer_t *w) {
    fl_err_t e;
    fl_err_init(&e);
    if (fl_replay_writer_flush(w, 20000, &e) != FL_OK) fail_msg("flush: %s", e.msg);
}

static fl_replay_info_t info_of(fl_replay_client_t *c) {
    fl_replay_info_t in;
    fl_err_t e;
    fl_err_init(&e);
    if (fl_replay_info(c, 10000, &in, &e) != FL_OK) fail_msg("info: %s", e.msg);
    return in;
}

/* Waits (bounded, so that a broken service fails the test instead of hanging it) until
 * pred(arg) holds; returns whether it did. */
static int wait_until(int (*pred)(void *), void *arg) {
    for (int i = 0; i < 4000; i++) {
        if (pred(arg)) return 1;
        fl_sleep_sec(0.005);
    }
    return pred(arg);
}

/* Sends messages on one raw Insert call; returns the call's status and response. */
static fl_status raw_insert(const char *addr, size_t nmsg, const Fleet__InsertRequest *const *msgs,
                            Fleet__InsertResponse **resp, fl_err_t *e) {
    fl_rpc_channel_t *ch = NULL;
    assert_int_equal(fl_rpc_channel_create(addr, 0, &ch, e), FL_OK);
    fl_rpc_stream_t *s = NULL;
    assert_int_equal(fl_rpc_stream_open(ch, "/fleet.Replay/Insert", 10000, FL_RPC_WAIT_FOR_READY, &s, e), FL_OK);
    for (size_t i = 0; i < nmsg; i++)
        if (fl_rpc_stream_send_pb(s, &msgs[i]->base, e) != FL_OK) break;
    ProtobufCMessage *m = NULL;
    fl_status st = fl_rpc_stream_finish_pb(s, &fleet__insert_response__descriptor, &m, e);
    *resp = (Fleet__InsertResponse *)m;
    fl_rpc_channel_destroy(ch);
    return st;
}

/* A well-formed InsertRequest over c's columns (the message points into msg and c). */
typedef struct req_msg {
    Fleet__InsertRequest req;
    fl_wire_batch_msg_t bm;
} req_msg_t;

static void req_make(req_msg_t *m, uint64_t stream, uint64_t seq, const cols_t *c) {
    fl_wire_batch_t b = {c->n, OBS_BYTES, c->obs, c->actions, c->rewards, c->discounts, c->next_obs, c->priorities};
    fl_wire_encode_batch(&m->bm, &SIG.obs, &b);
    fleet__insert_request__init(&m->req);
    m->req.stream_id = stream;
    m->req.stream_key = 2 * stream + 1; /* one key per stream, as its writer would keep */
    m->req.sequence = seq;
    m->req.batch = &m->bm.batch;
}

/* ---- wire ------------------------------------------------------------------ */

static void test_wire_roundtrip_and_messages(void **state) {
    (void)state;
    cols_t c;
    cols_make(&c, 50, 0);
    req_msg_t m;
    req_make(&m, 1, 1, &c);
    /* Through the bytes, as the server sees it. */
    size_t len = fleet__insert_request__get_packed_size(&m.req);
    uint8_t *buf = malloc(len);
    fleet__insert_request__pack(&m.req, buf);
    Fleet__InsertRequest *u = fleet__insert_request__unpack(NULL, len, buf);
    assert_non_null(u);
    fl_wire_batch_t b;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_wire_decode_batch(u->batch, &SIG, FL_WIRE_NEED_PRIORITIES, &b, &e), FL_OK);
    assert_int_equal(b.count, 50);
    assert_memory_equal(b.obs, c.obs, 50 * OBS_BYTES);
    assert_memory_equal(b.next_obs, c.next_obs, 50 * OBS_BYTES);
    assert_memory_equal(b.actions, c.actions, 50 * sizeof(int32_t));
    assert_memory_equal(b.priorities, c.priorities, 50 * sizeof(float));
    assert_int_equal(fl_wire_decode_batch_bytes(u->batch, OBS_BYTES, 0, &b, &e), FL_OK);
    assert_int_equal(fl_wire_decode_batch_bytes(u->batch, OBS_BYTES + 4, 0, &b, &e), FL_INVALID_ARGUMENT);

    Fleet__TransitionBatch *tb = u->batch;
    /* The exact message for a shape mismatch. */
    tb->obs->shape[1] = 3;
    assert_int_equal(fl_wire_decode_batch(tb, &SIG, FL_WIRE_NEED_PRIORITIES, &b, &e), FL_INVALID_ARGUMENT);
    assert_string_equal(e.msg, "batch.obs.shape: got [50, 3], expected [50, 4] (count, 4)");
    tb->obs->shape[1] = 4;
    tb->next_obs->dtype = FLEET__DTYPE__DTYPE_UINT8;
    assert_int_equal(fl_wire_decode_batch(tb, &SIG, 0, &b, &e), FL_INVALID_ARGUMENT);
    assert_string_equal(e.msg, "batch.next_obs.dtype: got uint8, expected float32");
    tb->next_obs->dtype = FLEET__DTYPE__DTYPE_FLOAT32;
    tb->actions[7] = NUM_ACTIONS;
    assert_int_equal(fl_wire_decode_batch(tb, &SIG, 0, &b, &e), FL_INVALID_ARGUMENT);
    assert_string_equal(e.msg, "batch.actions[7]: got 3, expected 0 .. 2");
    tb->actions[7] = 0;
    tb->n_priorities = 0;
    assert_int_equal(fl_wire_decode_batch(tb, &SIG, 0, &b, &e), FL_OK);
    assert_null(b.priorities);
    assert_int_equal(fl_wire_decode_batch(tb, &SIG, FL_WIRE_NEED_PRIORITIES, &b, &e), FL_INVALID_ARGUMENT);
    assert_string_equal(e.msg, "batch.priorities: got 0 values, expected 50 (count)");
    tb->n_priorities = 50;
    tb->discounts[3] = 1.5f;
    assert_int_equal(fl_wire_decode_batch(tb, &SIG, 0, &b, &e), FL_INVALID_ARGUMENT);
    assert_string_equal(e.msg, "batch.discounts[3]: got 1.5, expected a value in [0, 1]");
    tb->discounts[3] = 1.0f;
    tb->count = 0;
    assert_int_equal(fl_wire_decode_batch(tb, &SIG, 0, &b, &e), FL_INVALID_ARGUMENT);
    assert_string_equal(e.msg, "batch.count: got 0, expected >= 1");
    assert_int_equal(fl_wire_decode_batch(NULL, &SIG, 0, &b, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "batch: missing"));
    fleet__insert_request__free_unpacked(u, NULL);
    free(buf);
    cols_free(&c);
}

/* ---- writer, Info ------------------------------------------------------------ */

static void test_writer_flush_and_info(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(10000, 1, 0.6);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    assert_non_null(strstr(s.addr, "127.0.0.1:"));
    assert_string_not_equal(s.addr, "127.0.0.1:0");
    fl_replay_client_t *c = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(s.addr, &c, &e), FL_OK);
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(c, 42, &SPEC, 4, &w, &e), FL_OK);
    for (int b = 0; b < 10; b++) append_ok(w, 50, (uint64_t)b * 50);
    flush_ok(w);
    assert_int_equal(fl_replay_writer_acked(w), 500);
    assert_int_equal(fl_replay_writer_pending(w), 0);
    fl_replay_info_t in = info_of(c);
    assert_int_equal(in.shard_id, 0);
    assert_int_equal(in.inserted, 500);
    assert_int_equal(in.size, 500);
    assert_int_equal(in.capacity, 10000);
    assert_int_equal(in.insert_batches, 10);
    assert_int_equal(in.rejected, 0);
    assert_int_equal(in.sampled, 0);
    /* 500 items of priority 1: total = 500 * (1 + eps)^0.6, max = (1 + eps)^0.6. */
    assert_true(fabs(in.total_priority - 500 * pow(1 + 1e-6, 0.6)) < 1e-6);
    assert_true(fabs(in.max_priority - pow(1 + 1e-6, 0.6)) < 1e-12);
    assert_true(in.uptime_s >= 0.0);

    /* Bad input to append is an error and sends nothing. */
    cols_t bad;
    cols_make(&bad, 5, 0);
    bad.priorities[2] = NAN;
    assert_int_equal(fl_replay_writer_append(w, 5, bad.obs, bad.actions, bad.rewards, bad.discounts, bad.next_obs,
                                             bad.priorities, &e),
                     FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "priorities[2]"));
    assert_int_equal(fl_replay_writer_append(w, 0, bad.obs, bad.actions, bad.rewards, bad.discounts, bad.next_obs,
                                             bad.priorities, &e),
                     FL_INVALID_ARGUMENT);
    cols_free(&bad);
    assert_int_equal(fl_replay_writer_pending(w), 0);

    /* The raw Info carries the observation signature; Checkpoint is not there yet. */
    fl_rpc_channel_t *ch = NULL;
    assert_int_equal(fl_rpc_channel_create(s.addr, 0, &ch, &e), FL_OK);
    Fleet__ReplayInfoRequest ireq = FLEET__REPLAY_INFO_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    assert_int_equal(
        fl_rpc_unary_pb(ch, "/fleet.Replay/Info", &ireq.base, &fleet__replay_info__descriptor, &m, 5000, 0, &e), FL_OK);
    Fleet__ReplayInfo *ri = (Fleet__ReplayInfo *)m;
    assert_int_equal(ri->obs_dtype, FLEET__DTYPE__DTYPE_FLOAT32);
    assert_int_equal(ri->n_obs_shape, 1);
    assert_int_equal(ri->obs_shape[0], OBS_DIM);
    assert_int_equal(ri->inserted, 500);
    fleet__replay_info__free_unpacked(ri, NULL);
    Fleet__CheckpointRequest creq = FLEET__CHECKPOINT_REQUEST__INIT;
    assert_int_equal(fl_rpc_unary_pb(ch, "/fleet.Replay/Checkpoint", &creq.base,
                                     &fleet__checkpoint_response__descriptor, &m, 5000, 0, &e),
                     FL_UNIMPLEMENTED);
    assert_non_null(strstr(e.msg, "Checkpoint"));
    fl_rpc_channel_destroy(ch);

    server_verify(&s);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    replay_fixture_stop(&s);
}

/* ---- Sample -------------------------------------------------------------------- */

static void test_sample_byte_identical(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(10000, 1, 0.6);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    fl_replay_client_t *c = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(s.addr, &c, &e), FL_OK);
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(c, 5, &SPEC, 2, &w, &e), FL_OK);
    for (int b = 0; b < 8; b++) append_ok(w, 25, (uint64_t)b * 25);
    flush_ok(w);

    /* One writer into an empty table: item id == insertion sequence == key's low bits. */
    cols_t all;
    cols_make(&all, 200, 0);
    fl_replay_batch_t batch;
    assert_int_equal(fl_replay_batch_init(&batch, 128, OBS_BYTES), FL_OK);
    for (int round = 0; round < 4; round++) {
        assert_int_equal(fl_replay_sample(c, 100, 0.4, 5000, &batch, &e), FL_OK);
        assert_int_equal(batch.count, 100);
        assert_int_equal(batch.table_size, 200);
        assert_true(batch.total_priority > 0);
        for (size_t j = 0; j < batch.count; j++) {
            uint64_t key = batch.keys[j];
            assert_int_equal(fl_table_key_shard(key), 0);
            uint64_t id = fl_table_key_seq(key);
            assert_true(id < 200);
            assert_memory_equal(batch.obs + j * OBS_BYTES, all.obs + id * OBS_DIM, OBS_BYTES);
            assert_memory_equal(batch.next_obs + j * OBS_BYTES, all.next_obs + id * OBS_DIM, OBS_BYTES);
            assert_int_equal(batch.actions[j], all.actions[id]);
            assert_memory_equal(&batch.rewards[j], &all.rewards[id], sizeof(float));
            assert_memory_equal(&batch.discounts[j], &all.discounts[id], sizeof(float));
            assert_true(batch.weights[j] > 0.0f && batch.weights[j] <= 1.0f);
            assert_true(fabs(batch.probs[j] - 1.0 / 200) < 1e-9);
        }
    }
    fl_replay_info_t in = info_of(c);
    assert_int_equal(in.sample_calls, 4);
    assert_int_equal(in.sampled, 400);

    /* A batch larger than the caller's buffer is refused before any call. */
    assert_int_equal(fl_replay_sample(c, 129, 0.4, 5000, &batch, &e), FL_INVALID_ARGUMENT);
    fl_replay_batch_free(&batch);
    cols_free(&all);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    replay_fixture_stop(&s);
}

static size_t count_key(const fl_replay_batch_t *b, uint64_t key) {
    size_t n = 0;
    for (size_t j = 0; j < b->count; j++) n += b->keys[j] == key;
    return n;
}

static void test_update_priorities_changes_sampling(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(1000, 1, 1.0);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    fl_replay_client_t *c = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(s.addr, &c, &e), FL_OK);
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(c, 9, &SPEC, 8, &w, &e), FL_OK);
    for (int b = 0; b < 4; b++) append_ok(w, 25, (uint64_t)b * 25);
    flush_ok(w);

    uint64_t target = fl_table_key_make(0, 37);
    fl_replay_batch_t batch;
    assert_int_equal(fl_replay_batch_init(&batch, 64, OBS_BYTES), FL_OK);
    assert_int_equal(fl_replay_sample(c, 64, 0.4, 5000, &batch, &e), FL_OK);
    /* Equal priorities: 64 stratified draws over 100 items hit one item at most twice. */
    assert_true(count_key(&batch, target) <= 2);

    float p = 1e6f;
    uint64_t applied = 0;
    assert_int_equal(fl_replay_update_priorities(c, 1, &target, &p, &applied, &e), FL_OK);
    assert_int_equal(applied, 1);
    double q = 0;
    assert_int_equal(fl_table_priority(fl_replay_service_table(s.svc), target, &q, &e), FL_OK);
    assert_true(fabs(q - (1e6 + 1e-6)) < 1e-3);
    assert_int_equal(fl_replay_sample(c, 64, 0.4, 5000, &batch, &e), FL_OK);
    /* Its share of the total is 1e6 / (1e6 + 99): every segment lands on it. */
    assert_true(count_key(&batch, target) >= 63);
    for (size_t j = 0; j < batch.count; j++)
        if (batch.keys[j] == target) assert_true(batch.probs[j] > 0.999);

    /* Mismatched lengths and bad values are refused whole. */
    fl_rpc_channel_t *ch = NULL;
    assert_int_equal(fl_rpc_channel_create(s.addr, 0, &ch, &e), FL_OK);
    uint64_t keys[2] = {target, fl_table_key_make(0, 1)};
    float pr[2] = {1.0f, NAN};
    Fleet__UpdatePrioritiesRequest ureq = FLEET__UPDATE_PRIORITIES_REQUEST__INIT;
    ureq.n_keys = 2;
    ureq.keys = keys;
    ureq.n_priorities = 1;
    ureq.priorities = pr;
    ProtobufCMessage *m = NULL;
    assert_int_equal(fl_rpc_unary_pb(ch, "/fleet.Replay/UpdatePriorities", &ureq.base,
                                     &fleet__update_priorities_response__descriptor, &m, 5000, 0, &e),
                     FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "priorities: got 1 values, expected 2"));
    ureq.n_priorities = 2;
    assert_int_equal(fl_rpc_unary_pb(ch, "/fleet.Replay/UpdatePriorities", &ureq.base,
                                     &fleet__update_priorities_response__descriptor, &m, 5000, 0, &e),
                     FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "priorities[1]"));
    pr[1] = -1.0f;
    assert_int_equal(fl_replay_update_priorities(c, 2, keys, pr, &applied, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "priorities[1]: got -1"));
    pr[1] = INFINITY;
    assert_int_equal(fl_rpc_unary_pb(ch, "/fleet.Replay/UpdatePriorities", &ureq.base,
                                     &fleet__update_priorities_response__descriptor, &m, 5000, 0, &e),
                     FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg,
                           "priorities[1]: got inf, expected a finite value in [0, 1e+06] (replay.max_priority, by "
                           "default from env.reward_bound)"));
    /* Bytes that do not parse, to UpdatePriorities and to Sample; the shard keeps serving. */
    {
        const uint8_t junk[] = {0x0a, 0x7f, 0x01};
        fl_rpc_buf_t out = {0};
        assert_int_equal(fl_rpc_unary(ch, "/fleet.Replay/UpdatePriorities", junk, sizeof junk, 5000, 0, &out, &e),
                         FL_INVALID_ARGUMENT);
        assert_non_null(strstr(e.msg, "UpdatePrioritiesRequest"));
        assert_int_equal(fl_rpc_unary(ch, "/fleet.Replay/Sample", junk, sizeof junk, 5000, 0, &out, &e),
                         FL_INVALID_ARGUMENT);
        assert_non_null(strstr(e.msg, "SampleRequest"));
    }
    /* Nothing of the refused updates was applied: the target keeps its priority. */
    assert_int_equal(fl_table_priority(fl_replay_service_table(s.svc), target, &q, &e), FL_OK);
    assert_true(fabs(q - (1e6 + 1e-6)) < 1e-3);
    fl_rpc_channel_destroy(ch);

    server_verify(&s);
    fl_replay_batch_free(&batch);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    replay_fixture_stop(&s);
}

static void test_stale_keys_counted(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(50, 1, 0.6);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    fl_replay_client_t *c = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(s.addr, &c, &e), FL_OK);
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(c, 3, &SPEC, 8, &w, &e), FL_OK);
    for (int b = 0; b < 4; b++) append_ok(w, 25, (uint64_t)b * 25);
    flush_ok(w);
    /* 100 inserted into 50 slots: sequences 0 .. 49 are evicted. */
    uint64_t keys[4] = {fl_table_key_make(0, 0), fl_table_key_make(0, 99), fl_table_key_make(3, 60),
                        fl_table_key_make(0, 1000)};
    float pr[4] = {2, 2, 2, 2};
    uint64_t applied = 0;
    assert_int_equal(fl_replay_update_priorities(c, 4, keys, pr, &applied, &e), FL_OK);
    assert_int_equal(applied, 1);
    fl_replay_info_t in = info_of(c);
    assert_int_equal(in.size, 50);
    assert_int_equal(in.inserted, 100);
    assert_int_equal(in.updates_applied, 1);
    assert_int_equal(in.updates_stale, 3);
    server_verify(&s);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    replay_fixture_stop(&s);
}

typedef struct sampler_arg {
    fl_replay_client_t *c;
    atomic_int done;
    fl_status st;
    size_t count;
    fl_err_t e;
} sampler_arg;

static void *wait_sampler(void *p) {
    sampler_arg *a = p;
    fl_replay_batch_t b;
    assert_int_equal(fl_replay_batch_init(&b, 32, OBS_BYTES), FL_OK);
    fl_err_init(&a->e);
    a->st = fl_replay_sample(a->c, 32, 0.4, 60000, &b, &a->e);
    a->count = b.count;
    fl_replay_batch_free(&b);
    atomic_store(&a->done, 1);
    return NULL;
}

static int has_waiter(void *p) {
    return fl_replay_service_sample_waiters(p) == 1;
}

static void test_sample_waits_for_min_size(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(1000, 100, 0.6);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    assert_int_equal(fl_replay_service_min_size(s.svc), 100);
    fl_replay_client_t *c = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(s.addr, &c, &e), FL_OK);
    fl_replay_batch_t b;
    assert_int_equal(fl_replay_batch_init(&b, 32, OBS_BYTES), FL_OK);
    assert_int_equal(fl_replay_sample(c, 32, 0.4, 300, &b, &e), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(e.msg, "replay holds 0 of the 100 transitions needed to sample"));
    assert_int_equal(fl_replay_sample(c, 32, 0.4, 0, &b, &e), FL_FAILED_PRECONDITION);

    /* Bad requests, straight to the server. */
    fl_rpc_channel_t *ch = NULL;
    assert_int_equal(fl_rpc_channel_create(s.addr, 0, &ch, &e), FL_OK);
    Fleet__SampleRequest sreq = FLEET__SAMPLE_REQUEST__INIT;
    sreq.batch_size = 0;
    sreq.beta = 0.4;
    ProtobufCMessage *m = NULL;
    assert_int_equal(
        fl_rpc_unary_pb(ch, "/fleet.Replay/Sample", &sreq.base, &fleet__sample_response__descriptor, &m, 5000, 0, &e),
        FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "batch_size: got 0"));
    sreq.batch_size = 4;
    sreq.beta = 1.5;
    assert_int_equal(
        fl_rpc_unary_pb(ch, "/fleet.Replay/Sample", &sreq.base, &fleet__sample_response__descriptor, &m, 5000, 0, &e),
        FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "beta: got 1.5"));
    sreq.beta = NAN;
    assert_int_equal(
        fl_rpc_unary_pb(ch, "/fleet.Replay/Sample", &sreq.base, &fleet__sample_response__descriptor, &m, 5000, 0, &e),
        FL_INVALID_ARGUMENT);
    fl_rpc_channel_destroy(ch);

    /* A sampler that waits, while another thread fills the table. */
    sampler_arg a = {.c = c};
    atomic_init(&a.done, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wait_sampler, &a), 0);
    assert_true(wait_until(has_waiter, s.svc));
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(c, 11, &SPEC, 8, &w, &e), FL_OK);
    for (int i = 0; i < 3; i++) append_ok(w, 20, (uint64_t)i * 20);
    flush_ok(w);
    /* 60 of 100: acknowledged, so in the table, and still not enough. */
    assert_int_equal(atomic_load(&a.done), 0);
    assert_int_equal(fl_replay_service_sample_waiters(s.svc), 1);
    for (int i = 3; i < 5; i++) append_ok(w, 20, (uint64_t)i * 20);
    flush_ok(w);
    pthread_join(th, NULL);
    if (a.st != FL_OK) fail_msg("waiting sample: %s", a.e.msg);
    assert_int_equal(a.count, 32);
    assert_int_equal(fl_replay_service_sample_waiters(s.svc), 0);
    fl_replay_info_t in = info_of(c);
    assert_int_equal(in.sample_calls, 1);

    fl_replay_batch_free(&b);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    replay_fixture_stop(&s);
}

/* A sampler waiting while the shard stops is answered, not left hanging. */
static void test_stop_wakes_waiting_sampler(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(1000, 100, 0.6);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    fl_replay_client_t *c = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(s.addr, &c, &e), FL_OK);
    sampler_arg a = {.c = c};
    atomic_init(&a.done, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wait_sampler, &a), 0);
    assert_true(wait_until(has_waiter, s.svc));
    fl_replay_service_stop(s.svc);
    pthread_join(th, NULL);
    assert_int_equal(a.st, FL_UNAVAILABLE);
    fl_replay_client_destroy(c);
    replay_fixture_stop(&s);
}

/* ---- Insert: malformed messages and resends ------------------------------------ */

typedef void (*mutate_fn)(req_msg_t *m, cols_t *c);
static void bad_shape(req_msg_t *m, cols_t *c) {
    (void)c;
    m->bm.obs_shape[1] = 3;
    m->bm.obs.data.len = m->bm.batch.count * 3 * sizeof(float);
}
static void bad_dtype(req_msg_t *m, cols_t *c) {
    (void)c;
    m->bm.obs.dtype = FLEET__DTYPE__DTYPE_UINT8;
}
static void bad_count(req_msg_t *m, cols_t *c) {
    (void)c;
    m->bm.batch.n_rewards = m->bm.batch.count - 1;
}
static void bad_priority(req_msg_t *m, cols_t *c) {
    c->priorities[2] = NAN;
}
static void bad_short_data(req_msg_t *m, cols_t *c) {
    (void)c;
    m->bm.next_obs.data.len -= 4;
}
static void bad_discount(req_msg_t *m, cols_t *c) {
    c->discounts[1] = 1.5f;
}
static void bad_action(req_msg_t *m, cols_t *c) {
    c->actions[0] = -1;
}
static void bad_sequence(req_msg_t *m, cols_t *c) {
    (void)c;
    m->req.sequence = 0;
}
static void bad_missing_obs(req_msg_t *m, cols_t *c) {
    (void)c;
    m->bm.batch.obs = NULL;
}

static int g_inserted_target;
static int inserted_reaches(void *p) {
    fl_replay_info_t in;
    fl_replay_service_info(p, &in);
    return in.inserted >= (uint64_t)g_inserted_target;
}

static void test_malformed_inserts_rejected(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(10000, 1, 0.6);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    struct {
        mutate_fn fn;
        const char *field;
    } cases[] = {
        {bad_shape, "batch.obs.shape: got [8, 3], expected [8, 4] (count, 4)"},
        {bad_dtype, "batch.obs.dtype: got uint8, expected float32"},
        {bad_count, "batch.rewards: got 7 values, expected 8 (count)"},
        {bad_priority, "batch.priorities[2]: got nan"},
        {bad_short_data, "batch.next_obs.data: got 124 bytes, expected 128"},
        {bad_discount, "batch.discounts[1]: got 1.5"},
        {bad_action, "batch.actions[0]: got -1, expected 0 .. 2"},
        {bad_sequence, "sequence: got 0, expected >= 1"},
        {bad_missing_obs, "batch.obs: missing"},
    };
    size_t ncases = sizeof cases / sizeof cases[0];
    uint64_t expect_inserted = 0;
    for (size_t k = 0; k < ncases; k++) {
        /* Each call: a good batch, then the bad one, then a good one that never lands. */
        uint64_t stream = 100 + k;
        cols_t good, bad, after;
        cols_make(&good, 8, 0);
        cols_make(&bad, 8, 8);
        cols_make(&after, 8, 16);
        req_msg_t mg, mb, ma;
        req_make(&mg, stream, 1, &good);
        req_make(&mb, stream, 2, &bad);
        req_make(&ma, stream, 3, &after);
        cases[k].fn(&mb, &bad);
        const Fleet__InsertRequest *msgs[3] = {&mg.req, &mb.req, &ma.req};
        Fleet__InsertResponse *resp = NULL;
        fl_err_t e;
        fl_err_init(&e);
        fl_status st = raw_insert(s.addr, 3, msgs, &resp, &e);
        if (st != FL_INVALID_ARGUMENT || !strstr(e.msg, cases[k].field))
            fail_msg("case %zu: status %d, message '%s', expected INVALID_ARGUMENT naming '%s'", k, (int)st, e.msg,
                     cases[k].field);
        assert_null(resp);
        expect_inserted += 8;
        cols_free(&good);
        cols_free(&bad);
        cols_free(&after);
    }
    /* The good batches before each bad one stayed inserted; the bad ones are counted. */
    fl_replay_info_t in;
    fl_replay_service_info(s.svc, &in);
    assert_int_equal(in.inserted, expect_inserted);
    assert_int_equal(in.rejected, ncases);

    /* Bytes that are not an InsertRequest at all. */
    {
        fl_rpc_channel_t *ch = NULL;
        fl_err_t e;
        fl_err_init(&e);
        assert_int_equal(fl_rpc_channel_create(s.addr, 0, &ch, &e), FL_OK);
        fl_rpc_stream_t *st = NULL;
        assert_int_equal(fl_rpc_stream_open(ch, "/fleet.Replay/Insert", 5000, FL_RPC_WAIT_FOR_READY, &st, &e), FL_OK);
        const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
        fl_rpc_stream_send(st, junk, sizeof junk, &e);
        fl_rpc_buf_t out = {0};
        assert_int_equal(fl_rpc_stream_finish(st, &out, &e), FL_INVALID_ARGUMENT);
        assert_non_null(strstr(e.msg, "InsertRequest"));
        fl_rpc_channel_destroy(ch);
    }

    /* Two stream ids in one call. */
    {
        cols_t c1;
        cols_make(&c1, 8, 0);
        req_msg_t m1, m2;
        req_make(&m1, 500, 1, &c1);
        req_make(&m2, 501, 1, &c1);
        const Fleet__InsertRequest *msgs[2] = {&m1.req, &m2.req};
        Fleet__InsertResponse *resp = NULL;
        fl_err_t e;
        fl_err_init(&e);
        assert_int_equal(raw_insert(s.addr, 2, msgs, &resp, &e), FL_INVALID_ARGUMENT);
        assert_non_null(strstr(e.msg, "stream_id: got 501, expected 500"));
        expect_inserted += 8;
        cols_free(&c1);
    }

    /* The shard keeps serving: a writer's insert succeeds afterwards. */
    fl_replay_client_t *c = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(s.addr, &c, &e), FL_OK);
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(c, 1, &SPEC, 4, &w, &e), FL_OK);
    append_ok(w, 10, 0);
    flush_ok(w);
    assert_int_equal(fl_replay_writer_acked(w), 10);
    in = info_of(c);
    assert_int_equal(in.inserted, expect_inserted + 10);
    assert_int_equal(in.rejected, ncases + 2);
    server_verify(&s);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    replay_fixture_stop(&s);
}

/* Every field of the batch checked over real gRPC, one case per way it can be wrong:
 * each call sends a good batch (sequence 1) and then the bad one (sequence 2) and must end
 * with INVALID_ARGUMENT whose message names the field, what it held and what was
 * expected. Then the same stream id goes on on a new call: a good batch with the bad
 * one's sequence number is accepted (the rejected batch consumed nothing), and the table
 * holds exactly the good batches. */
static uint8_t g_long_obs[8 * OBS_BYTES + 4];
static void bad_next_obs_dtype(req_msg_t *m, cols_t *c) {
    (void)c;
    m->bm.next_obs.dtype = FLEET__DTYPE__DTYPE_UINT8;
}
static void bad_unknown_dtype(req_msg_t *m, cols_t *c) {
    (void)c;
    m->bm.obs.dtype = (Fleet__DType)99;
}
static void bad_next_obs_rank(req_msg_t *m, cols_t *c) {
    (void)c;
    m->bm.next_obs.n_shape = 1;
}
static void bad_obs_rank_high(req_msg_t *m, cols_t *c) {
    (void)c;
    m->bm.obs_shape[1] = 2;
    m->bm.obs_shape[2] = 2;
    m->bm.obs.n_shape = 3;
}
static void bad_long_obs(req_msg_t *m, cols_t *c) {
    memcpy(g_long_obs, c->obs, 8 * OBS_BYTES);
    m->bm.obs.data.data = g_long_obs;
    m->bm.obs.data.len = sizeof g_long_obs;
}
static void bad_count_high(req_msg_t *m, cols_t *c) {
    (void)c;
    m->bm.batch.count = 9;
}
static void bad_n_actions(req_msg_t *m, cols_t *c) {
    (void)c;
    m->bm.batch.n_actions = 7;
}
static void bad_n_discounts(req_msg_t *m, cols_t *c) {
    (void)c;
    m->bm.batch.n_discounts = 9;
    static float d9[9];
    m->bm.batch.discounts = d9;
}
static void bad_no_priorities(req_msg_t *m, cols_t *c) {
    (void)c;
    m->bm.batch.n_priorities = 0;
}
static void bad_reward_nan(req_msg_t *m, cols_t *c) {
    c->rewards[3] = NAN;
}
static void bad_reward_inf(req_msg_t *m, cols_t *c) {
    c->rewards[0] = INFINITY;
}
static void bad_reward_ninf(req_msg_t *m, cols_t *c) {
    c->rewards[7] = -INFINITY;
}
static void bad_priority_neg(req_msg_t *m, cols_t *c) {
    c->priorities[5] = -1.0f;
}
static void bad_priority_inf(req_msg_t *m, cols_t *c) {
    c->priorities[0] = INFINITY;
}
static void bad_discount_neg(req_msg_t *m, cols_t *c) {
    c->discounts[2] = -0.25f;
}
static void bad_discount_nan(req_msg_t *m, cols_t *c) {
    c->discounts[0] = NAN;
}
static void bad_action_high(req_msg_t *m, cols_t *c) {
    c->actions[4] = NUM_ACTIONS;
}
static void bad_empty(req_msg_t *m, cols_t *c) {
    (void)c;
    Fleet__TransitionBatch *b = &m->bm.batch;
    b->count = 0;
    b->obs = b->next_obs = NULL;
    b->n_actions = b->n_rewards = b->n_discounts = b->n_priorities = 0;
}
static void bad_no_batch(req_msg_t *m, cols_t *c) {
    (void)c;
    m->req.batch = NULL;
}

static void test_bad_inserts_name_field_and_stream_goes_on(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(10000, 1, 0.6);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    struct {
        mutate_fn fn;
        const char *msg;
    } cases[] = {
        {bad_next_obs_dtype, "batch.next_obs.dtype: got uint8, expected float32"},
        {bad_unknown_dtype, "batch.obs.dtype: got 99 (not a known dtype), expected float32"},
        {bad_next_obs_rank, "batch.next_obs.shape: got [8], expected [8, 4] (count, 4)"},
        {bad_obs_rank_high, "batch.obs.shape: got [8, 2, 2], expected [8, 4] (count, 4)"},
        {bad_long_obs, "batch.obs.data: got 132 bytes, expected 128 (8 x 16 bytes)"},
        {bad_count_high, "batch.obs.shape: got [8, 4], expected [9, 4] (count, 4)"},
        {bad_n_actions, "batch.actions: got 7 values, expected 8 (count)"},
        {bad_n_discounts, "batch.discounts: got 9 values, expected 8 (count)"},
        {bad_no_priorities, "batch.priorities: got 0 values, expected 8 (count)"},
        {bad_reward_nan, "batch.rewards[3]: got nan, expected a finite value"},
        {bad_reward_inf, "batch.rewards[0]: got inf, expected a finite value"},
        {bad_reward_ninf, "batch.rewards[7]: got -inf, expected a finite value"},
        {bad_priority_neg,
         "batch.priorities[5]: got -1, expected a finite value in [0, 1e+06] (replay.max_priority, by default from "
         "env.reward_bound)"},
        {bad_priority_inf,
         "batch.priorities[0]: got inf, expected a finite value in [0, 1e+06] (replay.max_priority, by default from "
         "env.reward_bound)"},
        {bad_discount_neg, "batch.discounts[2]: got -0.25, expected a value in [0, 1]"},
        {bad_discount_nan, "batch.discounts[0]: got nan, expected a value in [0, 1]"},
        {bad_action_high, "batch.actions[4]: got 3, expected 0 .. 2"},
        {bad_empty, "batch.count: got 0, expected >= 1"},
        {bad_no_batch, "batch: missing"},
    };
    size_t ncases = sizeof cases / sizeof cases[0];
    uint64_t expect_inserted = 0, expect_rejected = 0;
    for (size_t k = 0; k < ncases; k++) {
        uint64_t stream = 1000 + k;
        cols_t good, bad, retry;
        cols_make(&good, 8, 0);
        cols_make(&bad, 8, 8);
        cols_make(&retry, 8, 16);
        req_msg_t mg, mb, mr;
        req_make(&mg, stream, 1, &good);
        req_make(&mb, stream, 2, &bad);
        req_make(&mr, stream, 2, &retry);
        cases[k].fn(&mb, &bad);
        const Fleet__InsertRequest *msgs[2] = {&mg.req, &mb.req};
        Fleet__InsertResponse *resp = NULL;
        fl_err_t e;
        fl_err_init(&e);
        fl_status st = raw_insert(s.addr, 2, msgs, &resp, &e);
        char where[64];
        snprintf(where, sizeof where, "stream %" PRIu64 " sequence 2: ", stream);
        if (st != FL_INVALID_ARGUMENT || !strstr(e.msg, cases[k].msg) || !strstr(e.msg, where))
            fail_msg("case %zu: status %d, message '%s', expected INVALID_ARGUMENT with '%s%s'", k, (int)st, e.msg,
                     where, cases[k].msg);
        assert_null(resp);
        expect_inserted += 8;
        expect_rejected += 1;

        /* Nothing of the bad batch entered the table. */
        fl_replay_info_t in;
        fl_replay_service_info(s.svc, &in);
        assert_int_equal(in.inserted, expect_inserted);
        assert_int_equal(in.size, expect_inserted);
        assert_int_equal(in.rejected, expect_rejected);
        server_verify(&s);

        /* The same stream goes on: sequence 2 was not consumed by the rejected batch. */
        const Fleet__InsertRequest *again[1] = {&mr.req};
        fl_err_init(&e);
        st = raw_insert(s.addr, 1, again, &resp, &e);
        if (st != FL_OK) fail_msg("case %zu: good batch after the rejection: %s", k, e.msg);
        assert_non_null(resp);
        assert_int_equal(resp->stream_id, stream);
        assert_int_equal(resp->last_sequence, 2);
        assert_int_equal(resp->batches, 1);
        assert_int_equal(resp->items, 8);
        fleet__insert_response__free_unpacked(resp, NULL);
        expect_inserted += 8;
        fl_replay_service_info(s.svc, &in);
        assert_int_equal(in.inserted, expect_inserted);
        assert_int_equal(in.rejected, expect_rejected);
        cols_free(&good);
        cols_free(&bad);
        cols_free(&retry);
    }

    /* Garbage bytes on a stream, then the same stream id goes on with a good batch. */
    {
        fl_rpc_channel_t *ch = NULL;
        fl_err_t e;
        fl_err_init(&e);
        assert_int_equal(fl_rpc_channel_create(s.addr, 0, &ch, &e), FL_OK);
        fl_rpc_stream_t *st = NULL;
        assert_int_equal(fl_rpc_stream_open(ch, "/fleet.Replay/Insert", 5000, FL_RPC_WAIT_FOR_READY, &st, &e), FL_OK);
        const uint8_t junk[] = {0x1a, 0x7f, 0x08, 0x01, 0x12}; /* a batch field that runs past the end */
        fl_rpc_stream_send(st, junk, sizeof junk, &e);
        fl_rpc_buf_t out = {0};
        assert_int_equal(fl_rpc_stream_finish(st, &out, &e), FL_INVALID_ARGUMENT);
        assert_non_null(strstr(e.msg, "5 bytes that do not parse as a fleet.InsertRequest"));
        fl_rpc_channel_destroy(ch);
        expect_rejected += 1;

        cols_t c1;
        cols_make(&c1, 8, 0);
        req_msg_t m1;
        req_make(&m1, 2000, 1, &c1);
        const Fleet__InsertRequest *msgs[1] = {&m1.req};
        Fleet__InsertResponse *resp = NULL;
        fl_err_init(&e);
        if (raw_insert(s.addr, 1, msgs, &resp, &e) != FL_OK) fail_msg("good batch after garbage: %s", e.msg);
        assert_int_equal(resp->items, 8);
        fleet__insert_response__free_unpacked(resp, NULL);
        expect_inserted += 8;
        cols_free(&c1);
    }

    fl_replay_info_t in;
    fl_replay_service_info(s.svc, &in);
    assert_int_equal(in.inserted, expect_inserted);
    assert_int_equal(in.size, expect_inserted);
    assert_int_equal(in.rejected, expect_rejected);
    server_verify(&s);
    replay_fixture_stop(&s);
}

static void test_resend_dedupe(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(10000, 1, 0.6);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    cols_t c1, c2, c3;
    cols_make(&c1, 8, 0);
    cols_make(&c2, 8, 8);
    cols_make(&c3, 8, 16);
    req_msg_t m1, m2, m3;
    req_make(&m1, 77, 1, &c1);
    req_make(&m2, 77, 2, &c2);
    req_make(&m3, 77, 3, &c3);
    Fleet__InsertResponse *r = NULL;
    fl_err_t e;
    fl_err_init(&e);

    const Fleet__InsertRequest *call1[1] = {&m1.req};
    assert_int_equal(raw_insert(s.addr, 1, call1, &r, &e), FL_OK);
    assert_int_equal(r->stream_id, 77);
    assert_int_equal(r->last_sequence, 1);
    assert_int_equal(r->batches, 1);
    assert_int_equal(r->items, 8);
    assert_int_equal(r->table_size, 8);
    assert_int_equal(r->n_first_keys, 1);
    uint64_t key1 = r->first_keys[0];
    assert_int_equal(key1, fl_table_key_make(0, 0));
    fleet__insert_response__free_unpacked(r, NULL);

    /* The same (stream, sequence) again: acknowledged, not inserted. */
    assert_int_equal(raw_insert(s.addr, 1, call1, &r, &e), FL_OK);
    assert_int_equal(r->last_sequence, 1);
    assert_int_equal(r->batches, 1);
    assert_int_equal(r->items, 0);
    assert_int_equal(r->table_size, 8);
    assert_int_equal(r->first_keys[0], key1);
    fleet__insert_response__free_unpacked(r, NULL);

    /* A resend followed by new batches, and a duplicate within one call. */
    const Fleet__InsertRequest *call3[4] = {&m1.req, &m2.req, &m3.req, &m3.req};
    assert_int_equal(raw_insert(s.addr, 4, call3, &r, &e), FL_OK);
    assert_int_equal(r->last_sequence, 3);
    assert_int_equal(r->batches, 4);
    assert_int_equal(r->items, 16);
    assert_int_equal(r->table_size, 24);
    assert_int_equal(r->n_first_keys, 4);
    assert_int_equal(r->first_keys[0], key1);
    assert_int_equal(r->first_keys[1], fl_table_key_make(0, 8));
    assert_int_equal(r->first_keys[2], fl_table_key_make(0, 16));
    assert_int_equal(r->first_keys[3], fl_table_key_make(0, 16));
    fleet__insert_response__free_unpacked(r, NULL);

    /* Another stream's sequence 1 is its own. */
    req_msg_t o1;
    req_make(&o1, 78, 1, &c1);
    const Fleet__InsertRequest *call4[1] = {&o1.req};
    assert_int_equal(raw_insert(s.addr, 1, call4, &r, &e), FL_OK);
    assert_int_equal(r->items, 8);
    fleet__insert_response__free_unpacked(r, NULL);

    fl_replay_info_t in;
    fl_replay_service_info(s.svc, &in);
    assert_int_equal(in.inserted, 32);
    assert_int_equal(in.insert_batches, 4);
    assert_int_equal(in.rejected, 0);
    cols_free(&c1);
    cols_free(&c2);
    cols_free(&c3);
    server_verify(&s);
    replay_fixture_stop(&s);
}

/* ---- a writer across a shard restart --------------------------------------------- */

static void test_writer_resends_after_failure(void **state) {
    (void)state;
    char path[128], addr[160];
    snprintf(path, sizeof path, "/tmp/fleet-test-replay-%d.sock", (int)getpid());
    snprintf(addr, sizeof addr, "unix:%s", path);
    fl_replay_service_opts_t opts = make_opts(10000, 1, 0.6);
    replay_fixture_t a;
    replay_fixture_start_at(&a, &opts, addr);
    assert_string_equal(a.addr, addr);
    fl_replay_client_t *c = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(addr, &c, &e), FL_OK);
    fl_replay_writer_t *w = NULL;
    /* A call holds up to 100 batches, so the batches below stay unacknowledged. */
    assert_int_equal(fl_replay_writer_create(c, 1234, &SPEC, 100, &w, &e), FL_OK);
    const size_t n = 10;
    for (int b = 0; b < 3; b++) append_ok(w, n, (uint64_t)b * n);
    flush_ok(w);
    assert_int_equal(fl_replay_writer_acked(w), 3 * n);
    append_ok(w, n, 3 * n);
    append_ok(w, n, 4 * n);
    assert_int_equal(fl_replay_writer_pending(w), 2 * n);
    /* The shard applies both, then goes away before acknowledging them. */
    g_inserted_target = (int)(5 * n);
    assert_true(wait_until(inserted_reaches, a.svc));
    replay_fixture_stop(&a);

    /* Appends while the shard is down succeed; the batches stay pending. */
    for (int b = 5; b < 8; b++) append_ok(w, n, (uint64_t)b * n);
    assert_int_equal(fl_replay_writer_acked(w), 3 * n);
    assert_int_equal(fl_replay_writer_pending(w), 5 * n);

    /* A new shard on the same address gets everything pending on flush. */
    replay_fixture_t b;
    replay_fixture_start_at(&b, &opts, addr);
    flush_ok(w);
    assert_int_equal(fl_replay_writer_acked(w), 8 * n);
    assert_int_equal(fl_replay_writer_pending(w), 0);
    fl_replay_info_t in = info_of(c);
    assert_int_equal(in.inserted, 5 * n);
    assert_int_equal(in.insert_batches, 5);

    /* In order: the new table holds batches 3 .. 7, oldest first. */
    cols_t all;
    cols_make(&all, 8 * n, 0);
    fl_replay_batch_t batch;
    assert_int_equal(fl_replay_batch_init(&batch, 64, OBS_BYTES), FL_OK);
    assert_int_equal(fl_replay_sample(c, 64, 0.4, 5000, &batch, &e), FL_OK);
    for (size_t j = 0; j < batch.count; j++) {
        uint64_t id = 3 * n + fl_table_key_seq(batch.keys[j]);
        assert_memory_equal(batch.obs + j * OBS_BYTES, all.obs + id * OBS_DIM, OBS_BYTES);
    }
    fl_replay_batch_free(&batch);
    cols_free(&all);

    /* The writer keeps working on the new shard. */
    append_ok(w, n, 8 * n);
    flush_ok(w);
    assert_int_equal(fl_replay_writer_acked(w), 9 * n);
    server_verify(&b);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    replay_fixture_stop(&b);
    unlink(path);
}

/* With its shard gone, appends keep their batches and a flush fails at its deadline. */
static void test_flush_without_shard_times_out(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(1000, 1, 0.6);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    fl_replay_client_t *c = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(s.addr, &c, &e), FL_OK);
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(c, 1, &SPEC, 1, &w, &e), FL_OK);
    append_ok(w, 10, 0);
    assert_int_equal(fl_replay_writer_acked(w), 10); /* batches_per_call 1: acknowledged at once */
    replay_fixture_stop(&s);

    append_ok(w, 10, 10);
    append_ok(w, 10, 20);
    assert_int_equal(fl_replay_writer_acked(w), 10);
    assert_int_equal(fl_replay_writer_pending(w), 20);
    fl_status st = fl_replay_writer_flush(w, 300, &e);
    assert_true(st == FL_DEADLINE_EXCEEDED || st == FL_UNAVAILABLE);
    assert_non_null(strstr(e.msg, "20 transitions in 2 batches not acknowledged"));
    assert_int_equal(fl_replay_writer_pending(w), 20);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
}

/* ---- concurrency ----------------------------------------------------------------- */

#define NWRITERS 8
#define WBATCHES 20
#define WITEMS 25

typedef struct writer_arg {
    fl_replay_client_t *c;
    int index;
    uint64_t acked, pending;
    fl_status st;
    fl_err_t e;
} writer_arg;

static void *writer_thread(void *p) {
    writer_arg *a = p;
    fl_replay_writer_t *w = NULL;
    fl_err_init(&a->e);
    a->st = fl_replay_writer_create(a->c, 1000 + (uint64_t)a->index, &SPEC, 3, &w, &a->e);
    if (a->st != FL_OK) return NULL;
    cols_t cl;
    cols_make(&cl, WITEMS, 0);
    for (int b = 0; b < WBATCHES && a->st == FL_OK; b++)
        a->st = fl_replay_writer_append(w, WITEMS, cl.obs, cl.actions, cl.rewards, cl.discounts, cl.next_obs,
                                        cl.priorities, &a->e);
    cols_free(&cl);
    if (a->st == FL_OK) a->st = fl_replay_writer_flush(w, 30000, &a->e);
    a->acked = fl_replay_writer_acked(w);
    a->pending = fl_replay_writer_pending(w);
    fl_replay_writer_destroy(w);
    return NULL;
}

typedef struct sampler_loop {
    fl_replay_client_t *c;
    atomic_int stop;
    uint64_t calls, items, failures;
    int bad;
} sampler_loop;

static void *sampler_thread(void *p) {
    sampler_loop *s = p;
    fl_replay_batch_t b;
    if (fl_replay_batch_init(&b, 16, OBS_BYTES) != FL_OK) {
        s->bad = 1;
        return NULL;
    }
    while (!atomic_load(&s->stop)) {
        fl_err_t e;
        fl_err_init(&e);
        fl_status st = fl_replay_sample(s->c, 16, 0.4, 2000, &b, &e);
        if (st == FL_OK) {
            s->calls++;
            s->items += b.count;
            for (size_t j = 0; j < b.count; j++)
                if (fl_table_key_shard(b.keys[j]) != 0 || b.weights[j] <= 0.0f || b.weights[j] > 1.0f) s->bad = 1;
        } else if (st == FL_FAILED_PRECONDITION) {
            s->failures++;
        } else {
            s->bad = 1;
            break;
        }
    }
    fl_replay_batch_free(&b);
    return NULL;
}

static void test_concurrent_writers_and_sampler(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(100000, 1, 0.6);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    fl_replay_client_t *c = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(s.addr, &c, &e), FL_OK);
    sampler_loop sl = {.c = c};
    atomic_init(&sl.stop, 0);
    pthread_t sth;
    assert_int_equal(pthread_create(&sth, NULL, sampler_thread, &sl), 0);
    writer_arg wa[NWRITERS];
    pthread_t wth[NWRITERS];
    for (int i = 0; i < NWRITERS; i++) {
        wa[i] = (writer_arg){.c = c, .index = i};
        assert_int_equal(pthread_create(&wth[i], NULL, writer_thread, &wa[i]), 0);
    }
    uint64_t acked = 0;
    for (int i = 0; i < NWRITERS; i++) {
        pthread_join(wth[i], NULL);
        if (wa[i].st != FL_OK) fail_msg("writer %d: %s", i, wa[i].e.msg);
        assert_int_equal(wa[i].acked, WBATCHES * WITEMS);
        assert_int_equal(wa[i].pending, 0);
        acked += wa[i].acked;
    }
    atomic_store(&sl.stop, 1);
    pthread_join(sth, NULL);
    assert_false(sl.bad);
    fl_replay_info_t in = info_of(c);
    assert_int_equal(in.inserted, acked);
    assert_int_equal(in.inserted, NWRITERS * WBATCHES * WITEMS);
    assert_int_equal(in.size, NWRITERS * WBATCHES * WITEMS);
    assert_int_equal(in.insert_batches, NWRITERS * WBATCHES);
    assert_int_equal(in.sample_calls, sl.calls);
    assert_int_equal(in.sampled, sl.items);
    assert_int_equal(in.rejected, 0);
    server_verify(&s);
    fl_replay_client_destroy(c);
    replay_fixture_stop(&s);
}

/* ---- create ------------------------------------------------------------------------ */

static void test_create_checks(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(1001, 301, 0.6);
    opts.shards = 4;
    fl_replay_service_t *svc = NULL;
    fl_err_t e;
    fl_err_init(&e);
    opts.shard = 4;
    assert_int_equal(fl_replay_service_create(&opts, &svc, &e), FL_INVALID_ARGUMENT);
    assert_null(svc);
    assert_non_null(strstr(e.msg, "shard 4"));
    fl_replay_service_opts_t bad = opts;
    bad.shard = 1;
    bad.obs.dtype = FL_DTYPE_INVALID;
    assert_int_equal(fl_replay_service_create(&bad, &svc, &e), FL_INVALID_ARGUMENT);
    opts.shard = 3;
    assert_int_equal(fl_replay_service_create(&opts, &svc, &e), FL_OK);
    fl_replay_info_t in;
    fl_replay_service_info(svc, &in);
    assert_int_equal(in.capacity, 251); /* ceil(1001 / 4) */
    assert_int_equal(in.shard_id, 3);
    assert_int_equal(fl_replay_service_min_size(svc), 76); /* ceil(301 / 4) */
    assert_int_equal(fl_table_config(fl_replay_service_table(svc))->shard_id, 3);
    /* Never started: destroy alone tears it down. */
    fl_replay_service_destroy(svc);
    fl_replay_service_destroy(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_roundtrip_and_messages),
        cmocka_unit_test(test_create_checks),
        cmocka_unit_test(test_writer_flush_and_info),
        cmocka_unit_test(test_sample_byte_identical),
        cmocka_unit_test(test_update_priorities_changes_sampling),
        cmocka_unit_test(test_stale_keys_counted),
        cmocka_unit_test(test_sample_waits_for_min_size),
        cmocka_unit_test(test_stop_wakes_waiting_sampler),
        cmocka_unit_test(test_malformed_inserts_rejected),
        cmocka_unit_test(test_bad_inserts_name_field_and_stream_goes_on),
        cmocka_unit_test(test_resend_dedupe),
        cmocka_unit_test(test_writer_resends_after_failure),
        cmocka_unit_test(test_flush_without_shard_times_out),
        cmocka_unit_test(test_concurrent_writers_and_sampler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
