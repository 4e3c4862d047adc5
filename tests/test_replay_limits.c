/* Tests of what a replay shard refuses a client (docs/security.md, "Limits on what a
 * client may do"): real shards on 127.0.0.1 port 0, clients over gRPC, hand-built
 * messages for what fleet's own clients never send. Every refusal is followed by a check
 * that the shard keeps serving and that nothing acknowledged was lost. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "replay/client.h"
#include "replay/server.h"
#include "replay/wire.h"
#include "replay/writer.h"
#include "tests/replay_fixture.h"

#define OBS_DIM 4
#define OBS_BYTES (OBS_DIM * sizeof(float))
#define NUM_ACTIONS 3

static const fl_obs_spec_t SPEC = {FL_DTYPE_FLOAT32, 1, {OBS_DIM}};

static char g_dir[64];

static int setup_dir(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fl_limits_test_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- helpers --------------------------------------------------------------- */

static fl_replay_service_opts_t make_opts(int64_t min_size) {
    fl_replay_service_opts_t o = replay_fixture_opts(SPEC, NUM_ACTIONS, 10000, min_size);
    o.seed = 7;
    return o;
}

static fl_replay_info_t info_of(replay_fixture_t *s) {
    fl_replay_info_t in;
    fl_replay_service_info(s->svc, &in);
    return in;
}

/* The shard answers Info over gRPC: it keeps serving. */
static void still_serving(const replay_fixture_t *s) {
    fl_replay_client_t *c = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(s->addr, &c, &e), FL_OK);
    fl_replay_info_t in;
    if (fl_replay_info(c, 10000, &in, &e) != FL_OK) fail_msg("info after a refusal: %s", e.msg);
    fl_replay_client_destroy(c);
}

/* Columns of n plain transitions. */
typedef struct cols {
    size_t n;
    float obs[64 * OBS_DIM], next_obs[64 * OBS_DIM], rewards[64], discounts[64], priorities[64];
    int32_t actions[64];
} cols_t;

static void cols_make(cols_t *c, size_t n, uint64_t base) {
    assert_true(n <= 64);
    c->n = n;
    for (size_t i = 0; i < n; i++) {
        for (int d = 0; d < OBS_DIM; d++) {
            c->obs[i * OBS_DIM + d] = (float)(base + i) + 0.25f * (float)d;
            c->next_obs[i * OBS_DIM + d] = -(float)(base + i) - 0.5f * (float)d;
        }
        c->actions[i] = (int32_t)((base + i) % NUM_ACTIONS);
        c->rewards[i] = 1.0f;
        c->discounts[i] = 0.97f;
        c->priorities[i] = 1.0f;
    }
}

/* A raw InsertRequest over c's columns. */
typedef struct req_msg {
    Fleet__InsertRequest req;
    fl_wire_batch_msg_t bm;
} req_msg_t;

static void req_make(req_msg_t *m, uint64_t stream, uint64_t key, uint64_t seq, const cols_t *c) {
    fl_wire_batch_t b = {c->n, OBS_BYTES, c->obs, c->actions, c->rewards, c->discounts, c->next_obs, c->priorities};
    fl_wire_encode_batch(&m->bm, &SPEC, &b);
    fleet__insert_request__init(&m->req);
    m->req.stream_id = stream;
    m->req.stream_key = key;
    m->req.sequence = seq;
    m->req.batch = &m->bm.batch;
}

/* One raw Insert call of one message; returns its status (and frees the response,
 * after copying its items and last sequence to *items and *last when not NULL). */
static fl_status insert_one(const char *addr, const req_msg_t *m, uint64_t *items, uint64_t *last, fl_err_t *e) {
    fl_rpc_channel_t *ch = NULL;
    assert_int_equal(fl_rpc_channel_create(addr, 0, &ch, e), FL_OK);
    fl_rpc_stream_t *s = NULL;
    assert_int_equal(fl_rpc_stream_open(ch, "/fleet.Replay/Insert", 10000, FL_RPC_WAIT_FOR_READY, &s, e), FL_OK);
    fl_rpc_stream_send_pb(s, &m->req.base, e);
    ProtobufCMessage *resp = NULL;
    fl_status st = fl_rpc_stream_finish_pb(s, &fleet__insert_response__descriptor, &resp, e);
    if (resp) {
        Fleet__InsertResponse *r = (Fleet__InsertResponse *)resp;
        if (items) *items = r->items;
        if (last) *last = r->last_sequence;
        fleet__insert_response__free_unpacked(r, NULL);
    }
    fl_rpc_channel_destroy(ch);
    return st;
}

static void insert_ok(const char *addr, uint64_t stream, uint64_t key, uint64_t seq, size_t n) {
    cols_t c;
    cols_make(&c, n, seq * 100);
    req_msg_t m;
    req_make(&m, stream, key, seq, &c);
    fl_err_t e;
    fl_err_init(&e);
    if (insert_one(addr, &m, NULL, NULL, &e) != FL_OK)
        fail_msg("stream %" PRIu64 " sequence %" PRIu64 ": %s", stream, seq, e.msg);
}

/* An Insert call kept open after its first message, so that its stream's record is in
 * use; the message has been applied when it returns. */
typedef struct open_call {
    fl_rpc_channel_t *ch;
    fl_rpc_stream_t *s;
} open_call_t;

static void open_call_start(open_call_t *oc, replay_fixture_t *srv, uint64_t stream, uint64_t key, uint64_t seq) {
    fl_err_t e;
    fl_err_init(&e);
    uint64_t before = info_of(srv).insert_batches;
    assert_int_equal(fl_rpc_channel_create(srv->addr, 0, &oc->ch, &e), FL_OK);
    assert_int_equal(fl_rpc_stream_open(oc->ch, "/fleet.Replay/Insert", 30000, FL_RPC_WAIT_FOR_READY, &oc->s, &e),
                     FL_OK);
    cols_t c;
    cols_make(&c, 3, seq);
    req_msg_t m;
    req_make(&m, stream, key, seq, &c);
    assert_int_equal(fl_rpc_stream_send_pb(oc->s, &m.req.base, &e), FL_OK);
    for (int i = 0; i < 3000 && info_of(srv).insert_batches == before; i++) fl_sleep_sec(0.01);
    assert_true(info_of(srv).insert_batches > before);
}

/* Finishes the call; returns the stream's last sequence as the shard answered it. */
static uint64_t open_call_finish(open_call_t *oc) {
    fl_err_t e;
    fl_err_init(&e);
    ProtobufCMessage *resp = NULL;
    if (fl_rpc_stream_finish_pb(oc->s, &fleet__insert_response__descriptor, &resp, &e) != FL_OK)
        fail_msg("open call: %s", e.msg);
    uint64_t last = ((Fleet__InsertResponse *)resp)->last_sequence;
    fleet__insert_response__free_unpacked((Fleet__InsertResponse *)resp, NULL);
    fl_rpc_channel_destroy(oc->ch);
    return last;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- Checkpoint: a name inside the checkpoint folder ------------------------- */

static fl_status checkpoint_call(const char *addr, const char *name, char *path, size_t len, fl_err_t *e) {
    fl_rpc_channel_t *ch = NULL;
    assert_int_equal(fl_rpc_channel_create(addr, 0, &ch, e), FL_OK);
    Fleet__CheckpointRequest req = FLEET__CHECKPOINT_REQUEST__INIT;
    req.name = (char *)name;
    ProtobufCMessage *m = NULL;
    fl_status st = fl_rpc_unary_pb(ch, "/fleet.Replay/Checkpoint", &req.base, &fleet__checkpoint_response__descriptor,
                                   &m, 10000, 0, e);
    if (m) {
        if (path) snprintf(path, len, "%s", ((Fleet__CheckpointResponse *)m)->path);
        fleet__checkpoint_response__free_unpacked((Fleet__CheckpointResponse *)m, NULL);
    }
    fl_rpc_channel_destroy(ch);
    return st;
}

static size_t files_in(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    for (struct dirent *de; (de = readdir(d));) n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

static void test_checkpoint_names(void **state) {
    (void)state;
    char dir[128], want[256], got[256];
    snprintf(dir, sizeof dir, "%s/ckpt", g_dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    fl_replay_service_opts_t opts = make_opts(1);
    opts.checkpoint_dir = dir;
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    insert_ok(s.addr, 1, 11, 1, 5);
    fl_err_t e;
    fl_err_init(&e);

    /* Empty: the default file; a plain name: that file in the folder; the shard's own
     * default name is fine too. */
    assert_int_equal(checkpoint_call(s.addr, "", got, sizeof got, &e), FL_OK);
    snprintf(want, sizeof want, "%s/shard-0.ckpt", dir);
    assert_string_equal(got, want);
    assert_int_equal(checkpoint_call(s.addr, "before-upgrade_2.ckpt", got, sizeof got, &e), FL_OK);
    snprintf(want, sizeof want, "%s/before-upgrade_2.ckpt", dir);
    assert_string_equal(got, want);
    assert_true(file_exists(want));
    assert_int_equal(checkpoint_call(s.addr, "shard-0.ckpt", NULL, 0, &e), FL_OK);
    assert_int_equal(files_in(dir), 2);

    char long_name[FL_REPLAY_CKPT_NAME_MAX + 8];
    memset(long_name, 'a', FL_REPLAY_CKPT_NAME_MAX - 4);
    snprintf(long_name + FL_REPLAY_CKPT_NAME_MAX - 4, 8, ".ckpt"); /* 101 characters */
    struct {
        const char *name, *msg;
    } bad[] = {
        {"../escape.ckpt", "name: '/' at character 2: expected a file name without a folder"},
        {"/tmp/absolute.ckpt", "name: '/' at character 0"},
        {"sub/x.ckpt", "name: '/' at character 3"},
        {".hidden.ckpt", "name: \".hidden.ckpt\" starts with '.'"},
        {"..", "name: \"..\" starts with '.'"},
        {"a..b.ckpt", "name: \"a..b.ckpt\" contains \"..\""},
        {"notes.txt", "name: \"notes.txt\" does not end in \".ckpt\""},
        {"shard-0.wal.00000001", "does not end in \".ckpt\""},
        {"shard-1.ckpt", "name: \"shard-1.ckpt\": names starting with \"shard-\" belong to the shards' own files"},
        {"shard-0.wal.lock.ckpt", "belong to the shards' own files (checkpoints and logs); expected shard-0.ckpt"},
        {"two words.ckpt", "name: byte 0x20 at character 3: expected only A-Z, a-z, 0-9, '.', '_' and '-'"},
        {"tab\t.ckpt", "byte 0x09 at character 3"},
        {long_name, "name: 101 characters, expected at most 100"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fl_err_init(&e);
        fl_status st = checkpoint_call(s.addr, bad[i].name, NULL, 0, &e);
        if (st != FL_INVALID_ARGUMENT || !strstr(e.msg, bad[i].msg))
            fail_msg("name '%s': status %d, message '%s', expected INVALID_ARGUMENT with '%s'", bad[i].name, (int)st,
                     e.msg, bad[i].msg);
    }
    /* Nothing was written anywhere else, and the shard keeps serving. */
    assert_int_equal(files_in(dir), 2);
    snprintf(want, sizeof want, "%s/escape.ckpt", g_dir);
    assert_false(file_exists(want));
    assert_false(file_exists("/tmp/absolute.ckpt"));
    /* Named copies are bounded (each is the whole table): 4 names, then a fifth new name
     * is refused; a name already there may be written again, the shard's own file too.
     * (Before, every distinct name wrote one more copy.) */
    static const char *const names[] = {"a.ckpt", "b.ckpt", "c.ckpt"}; /* with before-upgrade_2.ckpt: 4 */
    for (int i = 0; i < 3; i++) assert_int_equal(checkpoint_call(s.addr, names[i], NULL, 0, &e), FL_OK);
    assert_int_equal(checkpoint_call(s.addr, "d.ckpt", NULL, 0, &e), FL_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(e.msg, "name: \"d.ckpt\" would be a new named checkpoint, and "));
    assert_non_null(strstr(e.msg, "already holds 4 (at most 4, each a copy of the whole table)"));
    assert_int_equal(checkpoint_call(s.addr, "b.ckpt", NULL, 0, &e), FL_OK);
    assert_int_equal(checkpoint_call(s.addr, "", NULL, 0, &e), FL_OK);
    assert_int_equal(files_in(dir), 5);
    still_serving(&s);
    replay_fixture_stop(&s);

    /* A shard without a checkpoint folder refuses every Checkpoint call. */
    opts.checkpoint_dir = NULL;
    replay_fixture_start(&s, &opts);
    assert_int_equal(checkpoint_call(s.addr, "x.ckpt", NULL, 0, &e), FL_UNIMPLEMENTED);
    assert_non_null(strstr(e.msg, "checkpoints are not enabled (replay.checkpoint_dir is empty"));
    assert_int_equal(checkpoint_call(s.addr, "", NULL, 0, &e), FL_UNIMPLEMENTED);
    still_serving(&s);
    replay_fixture_stop(&s);
}

/* ---- values: non-finite observations, huge rewards and priorities ----------- */

static void expect_insert_refused(replay_fixture_t *s, const cols_t *c, const char *msg) {
    static uint64_t stream = 5000;
    stream++;
    req_msg_t m;
    req_make(&m, stream, 2 * stream + 1, 1, c);
    fl_err_t e;
    fl_err_init(&e);
    uint64_t inserted = info_of(s).inserted;
    fl_status st = insert_one(s->addr, &m, NULL, NULL, &e);
    if (st != FL_INVALID_ARGUMENT || !strstr(e.msg, msg))
        fail_msg("status %d, message '%s', expected INVALID_ARGUMENT with '%s'", (int)st, e.msg, msg);
    assert_int_equal(info_of(s).inserted, inserted);
}

static void test_values_refused(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(1);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    cols_t c;

    cols_make(&c, 8, 0);
    c.obs[1 * OBS_DIM + 2] = NAN;
    expect_insert_refused(&s, &c, "batch.obs[1][2]: got nan, expected a finite value (float32 observations");
    cols_make(&c, 8, 0);
    c.next_obs[7 * OBS_DIM + 3] = -INFINITY;
    expect_insert_refused(&s, &c, "batch.next_obs[7][3]: got -inf, expected a finite value");
    cols_make(&c, 8, 0);
    c.rewards[4] = 2e6f;
    expect_insert_refused(&s, &c,
                          "batch.rewards[4]: got 2e+06, expected a value with |r| <= 1e+06 "
                          "(replay.max_abs_reward, by default from env.reward_bound)");
    cols_make(&c, 8, 0);
    c.rewards[0] = -1.5e6f;
    expect_insert_refused(&s, &c, "batch.rewards[0]: got -1.5e+06");
    cols_make(&c, 8, 0);
    c.priorities[6] = 3e6f;
    expect_insert_refused(&s, &c,
                          "batch.priorities[6]: got 3e+06, expected a finite value in [0, 1e+06] "
                          "(replay.max_priority, by default from env.reward_bound)");
    assert_int_equal(info_of(&s).rejected, 5);

    /* At the bounds: accepted. */
    cols_make(&c, 8, 0);
    c.rewards[0] = -1e6f;
    c.priorities[0] = 1e6f;
    req_msg_t m;
    req_make(&m, 1, 3, 1, &c);
    fl_err_t e;
    fl_err_init(&e);
    uint64_t items = 0;
    if (insert_one(s.addr, &m, &items, NULL, &e) != FL_OK) fail_msg("insert at the bounds: %s", e.msg);
    assert_int_equal(items, 8);

    /* Priority updates beyond the bound: refused whole, on UpdatePriorities and riding
     * on a Sample; within it, applied. */
    fl_replay_client_t *cl = NULL;
    assert_int_equal(fl_replay_client_create(s.addr, &cl, &e), FL_OK);
    fl_replay_batch_t b, b2;
    assert_int_equal(fl_replay_batch_init(&b, 4, OBS_BYTES), FL_OK);
    assert_int_equal(fl_replay_batch_init(&b2, 4, OBS_BYTES), FL_OK);
    assert_int_equal(fl_replay_sample(cl, 4, 0.4, 5000, &b, &e), FL_OK);
    float prio[4] = {1.0f, 2e6f, 1.0f, 1.0f};
    uint64_t applied = 0;
    assert_int_equal(fl_replay_update_priorities(cl, 4, b.keys, prio, &applied, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg,
                           "priorities[1]: got 2e+06, expected a finite value in [0, 1e+06] "
                           "(replay.max_priority, by default from env.reward_bound)"));
    fl_replay_updates_t upd = {4, b.keys, prio, 0};
    assert_int_equal(fl_replay_sample_updating(cl, 4, 0.4, 5000, &upd, &b2, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "update_priorities[1]: got 2e+06"));
    assert_int_equal(info_of(&s).updates_applied, 0);
    prio[1] = 1e6f;
    assert_int_equal(fl_replay_update_priorities(cl, 4, b.keys, prio, &applied, &e), FL_OK);
    assert_int_equal(applied, 4);
    fl_replay_batch_free(&b);
    fl_replay_batch_free(&b2);
    fl_replay_client_destroy(cl);
    replay_fixture_stop(&s);

    /* Bounds from the configuration. */
    opts.max_abs_reward = 10;
    opts.max_priority = 5;
    replay_fixture_start(&s, &opts);
    cols_make(&c, 8, 0);
    c.rewards[2] = 10.5f;
    expect_insert_refused(&s, &c,
                          "batch.rewards[2]: got 10.5, expected a value with |r| <= 10 (replay.max_abs_reward, by "
                          "default from env.reward_bound)");
    cols_make(&c, 8, 0);
    c.priorities[3] = 5.5f;
    expect_insert_refused(&s, &c,
                          "batch.priorities[3]: got 5.5, expected a finite value in [0, 5] (replay.max_priority, by "
                          "default from env.reward_bound)");
    still_serving(&s);
    replay_fixture_stop(&s);
}

/* The writer refuses the same before sending, naming the column and the row. */
static void test_writer_refuses_values(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(1);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    fl_err_t e;
    fl_err_init(&e);
    fl_replay_client_t *cl = NULL;
    assert_int_equal(fl_replay_client_create(s.addr, &cl, &e), FL_OK);
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(cl, 9, &SPEC, 4, &w, &e), FL_OK);
    cols_t c;
    struct {
        int what;
        const char *msg;
    } cases[] = {
        {0, "replay writer append: obs[2][1]: got nan, expected a finite value"},
        {1, "replay writer append: next_obs[0][0]: got inf, expected a finite value"},
        {2,
         "replay writer append: rewards[5]: got 1e+07, expected a value with |r| <= 1e+06 (replay.max_abs_reward, by "
         "default from env.reward_bound)"},
        {3,
         "replay writer append: priorities[1]: got 2e+06, expected a finite value in [0, 1e+06] "
         "(replay.max_priority, by default from env.reward_bound)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cols_make(&c, 8, 0);
        if (cases[i].what == 0) c.obs[2 * OBS_DIM + 1] = NAN;
        if (cases[i].what == 1) c.next_obs[0] = INFINITY;
        if (cases[i].what == 2) c.rewards[5] = 1e7f;
        if (cases[i].what == 3) c.priorities[1] = 2e6f;
        fl_err_init(&e);
        fl_status st =
            fl_replay_writer_append(w, c.n, c.obs, c.actions, c.rewards, c.discounts, c.next_obs, c.priorities, &e);
        if (st != FL_INVALID_ARGUMENT || strcmp(e.msg, cases[i].msg) != 0)
            fail_msg("case %zu: status %d, message '%s', expected '%s'", i, (int)st, e.msg, cases[i].msg);
    }
    /* The shard's own bounds, when the actor passes them on. */
    fl_replay_writer_set_limits(w, 10, 5);
    cols_make(&c, 8, 0);
    c.rewards[0] = 11;
    assert_int_equal(
        fl_replay_writer_append(w, c.n, c.obs, c.actions, c.rewards, c.discounts, c.next_obs, c.priorities, &e),
        FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "|r| <= 10 (replay.max_abs_reward, by default from env.reward_bound)"));
    assert_int_equal(fl_replay_writer_pending(w), 0);
    cols_make(&c, 8, 0);
    assert_int_equal(
        fl_replay_writer_append(w, c.n, c.obs, c.actions, c.rewards, c.discounts, c.next_obs, c.priorities, &e), FL_OK);
    if (fl_replay_writer_flush(w, 20000, &e) != FL_OK) fail_msg("flush: %s", e.msg);
    assert_int_equal(info_of(&s).inserted, 8);
    assert_int_equal(info_of(&s).rejected, 0);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(cl);
    replay_fixture_stop(&s);
}

/* ---- streams belong to their writer ------------------------------------------ */

static void append_n(fl_replay_writer_t *w, size_t n, uint64_t base) {
    cols_t c;
    cols_make(&c, n, base);
    fl_err_t e;
    fl_err_init(&e);
    if (fl_replay_writer_append(w, n, c.obs, c.actions, c.rewards, c.discounts, c.next_obs, c.priorities, &e) != FL_OK)
        fail_msg("append: %s", e.msg);
}

static void test_forged_acknowledgement_refused(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(1);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    fl_err_t e;
    fl_err_init(&e);
    fl_replay_client_t *cl = NULL;
    assert_int_equal(fl_replay_client_create(s.addr, &cl, &e), FL_OK);
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(cl, 42, &SPEC, 4, &w, &e), FL_OK);
    append_n(w, 10, 0);
    append_n(w, 10, 10);
    if (fl_replay_writer_flush(w, 20000, &e) != FL_OK) fail_msg("flush: %s", e.msg);

    /* Another client claims the writer's stream with sequence 2^63: refused, nothing
     * changes. */
    cols_t c;
    cols_make(&c, 5, 0);
    req_msg_t m;
    req_make(&m, 42, 0x1234567890abcdefULL, UINT64_C(1) << 63, &c);
    assert_int_equal(insert_one(s.addr, &m, NULL, NULL, &e), FL_PERMISSION_DENIED);
    assert_non_null(strstr(e.msg, "stream 42 belongs to another writer"));
    /* The writer's later batches are stored, not "acknowledged" empty. */
    for (int b = 2; b < 6; b++) append_n(w, 10, (uint64_t)b * 10);
    if (fl_replay_writer_flush(w, 20000, &e) != FL_OK) fail_msg("flush: %s", e.msg);
    assert_int_equal(fl_replay_writer_acked(w), 60);
    assert_int_equal(info_of(&s).inserted, 60);
    assert_int_equal(info_of(&s).size, 60);

    /* A message without a key is refused. */
    req_make(&m, 43, 0, 1, &c);
    assert_int_equal(insert_one(s.addr, &m, NULL, NULL, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "stream_key: got 0, expected the writer's random nonzero key"));

    /* A new stream may start at any sequence (its writer's shard may have lost its
     * record); afterwards a new batch may run at most FL_REPLAY_MAX_SEQUENCE_STEP past the
     * last one. */
    req_make(&m, 44, 99, 1000, &c);
    uint64_t items = 0, last = 0;
    assert_int_equal(insert_one(s.addr, &m, &items, &last, &e), FL_OK);
    assert_int_equal(items, 5);
    req_make(&m, 44, 99, 1001 + FL_REPLAY_MAX_SEQUENCE_STEP, &c);
    assert_int_equal(insert_one(s.addr, &m, NULL, NULL, &e), FL_INVALID_ARGUMENT);
    char want[200];
    snprintf(want, sizeof want,
             "sequence: got %" PRIu64 ", expected 1 .. %" PRIu64
             " (the stream's last batch is 1000: resends up to "
             "it, new batches at most %" PRIu64 " past it)",
             1001 + FL_REPLAY_MAX_SEQUENCE_STEP, 1000 + FL_REPLAY_MAX_SEQUENCE_STEP, FL_REPLAY_MAX_SEQUENCE_STEP);
    assert_non_null(strstr(e.msg, want));
    req_make(&m, 44, 99, 1001, &c);
    assert_int_equal(insert_one(s.addr, &m, &items, &last, &e), FL_OK);
    assert_int_equal(items, 5);
    assert_int_equal(last, 1001);

    /* Two writers never share a stream id: a second writer on the first one's id is
     * refused at the shard, and its batches stay pending with it. */
    fl_replay_writer_t *w2 = NULL;
    assert_int_equal(fl_replay_writer_create(cl, 42, &SPEC, 4, &w2, &e), FL_OK);
    append_n(w2, 10, 1000);
    assert_int_equal(fl_replay_writer_flush(w2, 20000, &e), FL_PERMISSION_DENIED);
    assert_non_null(strstr(e.msg, "stream 42 belongs to another writer"));
    assert_int_equal(fl_replay_writer_pending(w2), 10);
    assert_int_equal(info_of(&s).inserted, 70);
    fl_replay_writer_destroy(w2);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(cl);
    still_serving(&s);
    replay_fixture_stop(&s);
}

/* ---- stream records: capped, idle ones reclaimed, the least used pushed out ------ */

static void test_stream_records_capped(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(1);
    opts.max_streams = 3;
    opts.stream_idle_s = 0.3;
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    fl_err_t e;
    fl_err_init(&e);

    /* Three streams with calls in flight hold every record: a fourth is refused. */
    open_call_t c1, c2, c3;
    open_call_start(&c1, &s, 1, 101, 1);
    open_call_start(&c2, &s, 2, 102, 1);
    open_call_start(&c3, &s, 3, 103, 1);
    cols_t c;
    cols_make(&c, 4, 0);
    req_msg_t m;
    req_make(&m, 4, 104, 1, &c);
    assert_int_equal(insert_one(s.addr, &m, NULL, NULL, &e), FL_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(e.msg,
                           "stream 4 refused: replay shard 0 holds the records of 3 insert streams, as many "
                           "as replay.max_streams = 3 allows, and every one has an Insert call open"));
    /* Streams 2 and 3 end their calls and stay unused past the idle limit; stream 1's
     * call is still open. Then their records make room. */
    assert_int_equal(open_call_finish(&c2), 1);
    assert_int_equal(open_call_finish(&c3), 1);
    fl_sleep_sec(0.6);
    open_call_t c4, c5;
    open_call_start(&c4, &s, 4, 104, 1);
    open_call_start(&c5, &s, 5, 105, 1);
    req_make(&m, 6, 106, 1, &c);
    assert_int_equal(insert_one(s.addr, &m, NULL, NULL, &e), FL_RESOURCE_EXHAUSTED);
    /* The record in use all along kept its stream: its resend is skipped. */
    cols_make(&c, 3, 1);
    req_make(&m, 1, 101, 1, &c);
    assert_int_equal(fl_rpc_stream_send_pb(c1.s, &m.req.base, &e), FL_OK);
    assert_int_equal(open_call_finish(&c1), 1);
    assert_int_equal(open_call_finish(&c4), 1);
    assert_int_equal(open_call_finish(&c5), 1);
    assert_int_equal(info_of(&s).inserted, 5 * 3);
    /* A reclaimed stream starts afresh: stream 2's batch 1 goes in again (why
     * replay.stream_idle_s must exceed any writer's outage). */
    fl_sleep_sec(0.6);
    uint64_t items = 0;
    cols_make(&c, 3, 1);
    req_make(&m, 2, 102, 1, &c);
    assert_int_equal(insert_one(s.addr, &m, &items, NULL, &e), FL_OK);
    assert_int_equal(items, 3);
    still_serving(&s);
    replay_fixture_stop(&s);
}

/* A flood of one-batch streams with fresh ids, far more than replay.max_streams, long
 * before any record is idle for replay.stream_idle_s: it pushes out its own records (one
 * batch each, least recently used) and never the record of a real writer between its
 * calls, and a writer that starts afterwards (a restarted actor) is taken at once.
 * (Before, every new stream was refused for stream_idle_s once the flood had filled the
 * map.) */
static void test_stream_flood_locks_nobody_out(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(1);
    opts.max_streams = 64;
    opts.stream_idle_s = 3600;
    opts.capacity = 100000;
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    fl_err_t e;
    fl_err_init(&e);
    /* A real writer's stream (key 77): four calls of a batch each, then idle. */
    cols_t c;
    cols_make(&c, 5, 0);
    req_msg_t m;
    for (uint64_t seq = 1; seq <= 4; seq++) {
        req_make(&m, 7, 77, seq, &c);
        assert_int_equal(insert_one(s.addr, &m, NULL, NULL, &e), FL_OK);
    }
    /* 640 one-row streams with fresh ids: ten times the map, in well under an hour. */
    cols_t one;
    cols_make(&one, 1, 0);
    for (uint64_t id = 1000; id < 1640; id++) {
        req_make(&m, id, id * 7 + 1, 1, &one);
        if (insert_one(s.addr, &m, NULL, NULL, &e) != FL_OK) fail_msg("flood stream %" PRIu64 ": %s", id, e.msg);
    }
    assert_int_equal(info_of(&s).inserted, 4 * 5 + 640);
    /* The writer's record survived: its resend of batch 4 (applied) is skipped, and its
     * batch 5 goes in. */
    req_make(&m, 7, 77, 4, &c);
    uint64_t last = 0;
    assert_int_equal(insert_one(s.addr, &m, NULL, &last, &e), FL_OK);
    assert_int_equal(last, 4);
    assert_int_equal(info_of(&s).inserted, 4 * 5 + 640);
    req_make(&m, 7, 77, 5, &c);
    assert_int_equal(insert_one(s.addr, &m, NULL, &last, &e), FL_OK);
    assert_int_equal(info_of(&s).inserted, 5 * 5 + 640);
    /* A new writer (a restarted actor's fresh stream) is taken at once. */
    fl_replay_client_t *cl = NULL;
    assert_int_equal(fl_replay_client_create(s.addr, &cl, &e), FL_OK);
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(cl, 8, &SPEC, 1, &w, &e), FL_OK);
    append_n(w, 3, 0);
    assert_int_equal(fl_replay_writer_flush(w, 20000, &e), FL_OK);
    assert_int_equal(fl_replay_writer_acked(w), 3);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(cl);
    still_serving(&s);
    replay_fixture_stop(&s);
}

/* ---- waiting Sample calls per client ----------------------------------------- */

typedef struct sampler {
    fl_replay_client_t *c;
    pthread_t th;
    fl_status st;
    char msg[FL_ERR_MSG_MAX];
} sampler_t;

static void *sample_thread(void *arg) {
    sampler_t *sm = arg;
    fl_err_t e;
    fl_err_init(&e);
    fl_replay_batch_t b;
    assert_int_equal(fl_replay_batch_init(&b, 4, OBS_BYTES), FL_OK);
    sm->st = fl_replay_sample(sm->c, 4, 0.4, 60000, &b, &e);
    snprintf(sm->msg, sizeof sm->msg, "%s", e.msg);
    fl_replay_batch_free(&b);
    return NULL;
}

static int waiters_are(replay_fixture_t *s, int n) {
    for (int i = 0; i < 3000 && fl_replay_service_sample_waiters(s->svc) != n; i++) fl_sleep_sec(0.01);
    return fl_replay_service_sample_waiters(s->svc) == n;
}

static void test_sample_waiters_per_client(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(100);
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    fl_err_t e;
    fl_err_init(&e);
    /* Client a (one connection) parks as many calls as it may. */
    fl_replay_client_t *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    assert_int_equal(fl_replay_client_create(s.addr, &a, &e), FL_OK);
    sampler_t sm[4];
    for (int i = 0; i < FL_REPLAY_MAX_SAMPLE_WAITERS_PER_CLIENT; i++) {
        sm[i].c = a;
        assert_int_equal(pthread_create(&sm[i].th, NULL, sample_thread, &sm[i]), 0);
    }
    assert_true(waiters_are(&s, FL_REPLAY_MAX_SAMPLE_WAITERS_PER_CLIENT));
    /* Its next one is refused at once ... */
    fl_replay_batch_t batch;
    assert_int_equal(fl_replay_batch_init(&batch, 4, OBS_BYTES), FL_OK);
    assert_int_equal(fl_replay_sample(a, 4, 0.4, 60000, &batch, &e), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(e.msg,
                           "replay holds 0 of the 100 transitions needed to sample; not waiting: this client "
                           "already has 2 Sample calls waiting (at most 2 per client)"));
    /* ... while another client still waits for data (here until its own timeout). */
    assert_int_equal(fl_replay_client_create(s.addr, &b, &e), FL_OK);
    assert_int_equal(fl_replay_sample(b, 4, 0.4, 2000, &batch, &e), FL_FAILED_PRECONDITION);
    if (!strstr(e.msg, "transitions needed to sample (waited ") || strstr(e.msg, "not waiting"))
        fail_msg("client b: %s", e.msg);
    /* Every waiting place taken (by clients a, b and c): the next client is refused. */
    assert_int_equal(fl_replay_client_create(s.addr, &c, &e), FL_OK);
    sm[2].c = b;
    sm[3].c = c;
    for (int i = 2; i < 4; i++) assert_int_equal(pthread_create(&sm[i].th, NULL, sample_thread, &sm[i]), 0);
    assert_true(waiters_are(&s, FL_REPLAY_MAX_SAMPLE_WAITERS));
    assert_int_equal(fl_replay_client_create(s.addr, &d, &e), FL_OK);
    assert_int_equal(fl_replay_sample(d, 4, 0.4, 60000, &batch, &e), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(e.msg, "not waiting: 4 Sample calls already wait (at most 4 at once)"));
    /* Data arrives: every waiting call is answered with a batch. */
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(d, 77, &SPEC, 8, &w, &e), FL_OK);
    for (int i = 0; i < 4; i++) append_n(w, 30, (uint64_t)i * 30);
    if (fl_replay_writer_flush(w, 20000, &e) != FL_OK) fail_msg("flush: %s", e.msg);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(sm[i].th, NULL), 0);
        if (sm[i].st != FL_OK) fail_msg("waiting sampler %d: %s", i, sm[i].msg);
    }
    assert_int_equal(fl_replay_service_sample_waiters(s.svc), 0);
    fl_replay_batch_free(&batch);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(a);
    fl_replay_client_destroy(b);
    fl_replay_client_destroy(c);
    fl_replay_client_destroy(d);
    replay_fixture_stop(&s);
}

/* ---- waiting inserts, in order and shared among clients ---------------------- */

/* An Insert call on channel ch of one batch of 10 rows (stream id, key id), sent. */
static fl_rpc_stream_t *insert_sent(fl_rpc_channel_t *ch, uint64_t id) {
    fl_err_t e;
    fl_err_init(&e);
    fl_rpc_stream_t *st = NULL;
    assert_int_equal(fl_rpc_stream_open(ch, "/fleet.Replay/Insert", 60000, FL_RPC_WAIT_FOR_READY, &st, &e), FL_OK);
    cols_t c;
    cols_make(&c, 10, id * 10);
    req_msg_t m;
    req_make(&m, id, id, 1, &c);
    assert_int_equal(fl_rpc_stream_send_pb(st, &m.req.base, &e), FL_OK);
    return st;
}

/* The call's status (its message in e). */
static fl_status insert_finish(fl_rpc_stream_t *st, fl_err_t *e) {
    ProtobufCMessage *resp = NULL;
    fl_status r = fl_rpc_stream_finish_pb(st, &fleet__insert_response__descriptor, &resp, e);
    if (resp) fleet__insert_response__free_unpacked((Fleet__InsertResponse *)resp, NULL);
    return r;
}

static int inserts_waiting_are(replay_fixture_t *s, uint32_t n) {
    for (int i = 0; i < 3000 && info_of(s).inserts_waiting != n; i++) fl_sleep_sec(0.01);
    return info_of(s).inserts_waiting == n;
}

/* One Sample call of n rows (the learner's draw that makes room for held inserts). */
static void sample_rows(fl_replay_client_t *c, size_t n) {
    fl_err_t e;
    fl_err_init(&e);
    fl_replay_batch_t b;
    assert_int_equal(fl_replay_batch_init(&b, n, OBS_BYTES), FL_OK);
    if (fl_replay_sample(c, n, 0.4, 10000, &b, &e) != FL_OK) fail_msg("sample %zu: %s", n, e.msg);
    fl_replay_batch_free(&b);
}

/* Inserts the rate limiter holds wait in at most max_insert_waiters places (6 with 4
 * actors): one client (here one connection on loopback, as each of a fleet's actors)
 * that takes them all is refused its next one, another client's insert takes the newest
 * place of the client holding the most until the two hold about as many (that place's
 * call ends RESOURCE_EXHAUSTED, to be sent again), and the held inserts go in the order
 * they came. Before, the first client kept every place (the other refused until it let
 * go), and the smallest held insert went first. */
static void test_insert_places_shared_in_order(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = make_opts(10);
    opts.actors = 4;
    opts.samples_per_insert = 1;
    opts.rate_error_buffer = 5; /* inserts may lead samples by at most 15 rows */
    replay_fixture_t s;
    replay_fixture_start(&s, &opts);
    fl_err_t e;
    fl_err_init(&e);
    insert_ok(s.addr, 1, 1, 1, 10); /* the table holds its 10: every later insert of 10 waits */
    fl_rpc_channel_t *a = NULL, *b = NULL;
    assert_int_equal(fl_rpc_channel_create(s.addr, 0, &a, &e), FL_OK);
    assert_int_equal(fl_rpc_channel_create(s.addr, 0, &b, &e), FL_OK);
    enum { PLACES = 6 };
    fl_rpc_stream_t *as[PLACES + 1], *bs[4];
    for (int i = 0; i < PLACES; i++) {
        as[i] = insert_sent(a, 100 + (uint64_t)i);
        assert_true(inserts_waiting_are(&s, (uint32_t)i + 1));
    }
    /* a's seventh is refused at once. */
    as[PLACES] = insert_sent(a, 100 + PLACES);
    assert_int_equal(insert_finish(as[PLACES], &e), FL_RESOURCE_EXHAUSTED);
    if (!strstr(e.msg,
                "rate limited: 6 inserts already wait for the learner to sample (samples_per_insert 1; at most "
                "6 wait, shared among clients, and 6 of them are this client's)"))
        fail_msg("a's seventh: %s", e.msg);
    /* b's first three each take a's newest place: a 3, b 3. */
    for (int i = 0; i < 3; i++) {
        bs[i] = insert_sent(b, 200 + (uint64_t)i);
        assert_int_equal(insert_finish(as[PLACES - 1 - i], &e), FL_RESOURCE_EXHAUSTED);
        if (!strstr(e.msg,
                    "rate limited: this insert gave its waiting place to another client's (at most 6 wait, "
                    "shared among clients)"))
            fail_msg("a's insert %d: %s", PLACES - 1 - i, e.msg);
        assert_true(inserts_waiting_are(&s, PLACES));
    }
    /* Shared evenly: b's fourth is refused. */
    bs[3] = insert_sent(b, 203);
    assert_int_equal(insert_finish(bs[3], &e), FL_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(e.msg, "and 3 of them are this client's"));
    /* Samples make room for one at a time: they go in the order they came (a's three,
     * then b's), each call answered OK. */
    fl_replay_client_t *learner = NULL;
    assert_int_equal(fl_replay_client_create(s.addr, &learner, &e), FL_OK);
    sample_rows(learner, 5); /* 5 rows behind: room for the first held insert */
    fl_rpc_stream_t *order[PLACES] = {as[0], as[1], as[2], bs[0], bs[1], bs[2]};
    for (int i = 0; i < PLACES; i++) {
        if (insert_finish(order[i], &e) != FL_OK) fail_msg("held insert %d: %s", i, e.msg);
        if (!inserts_waiting_are(&s, (uint32_t)(PLACES - 1 - i)))
            fail_msg("after %d: %u waiting, %lu inserted", i, info_of(&s).inserts_waiting,
                     (unsigned long)info_of(&s).inserted);
        assert_int_equal(info_of(&s).inserted, 10 * (uint64_t)(i + 2));
        if (i + 1 < PLACES) sample_rows(learner, 10);
    }
    /* Nothing held, nothing lost: what was refused was never acknowledged. */
    assert_int_equal(info_of(&s).inserts_waiting, 0);
    fl_replay_client_destroy(learner);
    fl_rpc_channel_destroy(a);
    fl_rpc_channel_destroy(b);
    still_serving(&s);
    replay_fixture_stop(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkpoint_names),          cmocka_unit_test(test_values_refused),
        cmocka_unit_test(test_writer_refuses_values),     cmocka_unit_test(test_forged_acknowledgement_refused),
        cmocka_unit_test(test_stream_records_capped),     cmocka_unit_test(test_stream_flood_locks_nobody_out),
        cmocka_unit_test(test_sample_waiters_per_client), cmocka_unit_test(test_insert_places_shared_in_order),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
