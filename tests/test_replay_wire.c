/* The SampleResponse written with its observations in place (replay/wire.h
 * fl_wire_sample_reply_*): whatever protobuf-c unpacks from it is what was put in —
 * every column, the tensors' dtype and shape, every field of the response — for images,
 * vectors, one transition and large batches, actions at the ends of int32's range; and
 * what it refuses. The client's reader (fl_wire_read_sample_reply) reads the same into
 * its columns from the reply cut into segments anyhow (one, random sizes, single bytes),
 * reads protobuf-c's own encoding and one with every repeated field unpacked, and refuses
 * what is wrong (naming the field) without reading out of bounds: every truncation, random
 * corruption, a batch past the room, columns of other lengths, wrong wire types, a message
 * field sent twice, a negative action. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "replay/wire.h"

/* Segments of len bytes: one, single bytes, or random sizes (0 .. 2 * mean) */
static size_t cut(const uint8_t *p, size_t len, int how, fl_rng_t *rng, fl_pb_seg_t *seg, size_t max) {
    size_t n = 0, at = 0;
    while (at < len && n < max - 1) {
        size_t k = how == 0 ? len : how == 1 ? 1 : (size_t)fl_rng_below(rng, 2 * (len / 50 + 2));
        if (k > len - at) k = len - at;
        seg[n++] = (fl_pb_seg_t){p + at, k};
        at += k;
    }
    if (at < len) seg[n++] = (fl_pb_seg_t){p + at, len - at};
    return n;
}

/* Columns for room transitions of ob bytes (one block, freed with cols_free). */
static fl_wire_sample_cols_t cols_make(size_t room, size_t ob) {
    fl_wire_sample_cols_t c = {.room = room, .obs_bytes = ob};
    c.obs = malloc(room * ob);
    c.next_obs = malloc(room * ob);
    c.actions = malloc(room * 4);
    c.rewards = malloc(room * 4);
    c.discounts = malloc(room * 4);
    c.weights = malloc(room * 4);
    c.keys = malloc(room * 8);
    c.probs = malloc(room * 8);
    assert_true(c.obs && c.next_obs && c.actions && c.rewards && c.discounts && c.weights && c.keys && c.probs);
    return c;
}

static void cols_free(fl_wire_sample_cols_t *c) {
    free(c->obs), free(c->next_obs), free(c->actions), free(c->rewards), free(c->discounts), free(c->weights);
    free(c->keys), free(c->probs);
}

/* What a reply should read back to. */
typedef struct want {
    size_t count, ob;
    const uint8_t *obs, *next_obs;
    const int32_t *actions;
    const float *rewards, *discounts, *weights;
    const uint64_t *keys;
    const double *probs;
    const Fleet__SampleResponse *resp; /* its scalars */
} want;

static void check_read(const uint8_t *buf, size_t len, const want *w, fl_rng_t *rng) {
    fl_pb_seg_t *seg = malloc(sizeof *seg * 4096);
    assert_non_null(seg);
    for (int how = 0; how < 3; how++) {
        if (how == 1 && len > 8192) continue;
        size_t nseg = cut(buf, len, how, rng, seg, 4096);
        fl_wire_sample_cols_t c = cols_make(w->count + 3, w->ob);
        fl_wire_sample_info_t info;
        fl_err_t e;
        fl_err_init(&e);
        fl_status st = fl_wire_read_sample_reply(seg, nseg, &c, &info, &e);
        if (st != FL_OK) fail_msg("cut %d into %zu segments: %s", how, nseg, e.msg);
        assert_int_equal(info.count, w->count);
        assert_memory_equal(c.obs, w->obs, w->count * w->ob);
        assert_memory_equal(c.next_obs, w->next_obs, w->count * w->ob);
        assert_memory_equal(c.actions, w->actions, w->count * 4);
        assert_memory_equal(c.rewards, w->rewards, w->count * 4);
        assert_memory_equal(c.discounts, w->discounts, w->count * 4);
        assert_memory_equal(c.weights, w->weights, w->count * 4);
        assert_memory_equal(c.keys, w->keys, w->count * 8);
        assert_memory_equal(c.probs, w->probs, w->count * 8);
        assert_true(info.table_size == w->resp->table_size && info.shard_id == w->resp->shard_id);
        assert_true(info.total_priority == w->resp->total_priority && info.min_priority == w->resp->min_priority);
        assert_true(info.sampling_mass == w->resp->sampling_mass);
        assert_true(info.updates_applied == w->resp->updates_applied);
        assert_true(info.updates_stale == w->resp->updates_stale);
        cols_free(&c);
    }
    free(seg);
}

/* Reads buf[0 .. len) as one segment into columns with room for `room`; the status. */
static fl_status read_one(const uint8_t *buf, size_t len, size_t room, size_t ob, fl_err_t *e) {
    fl_pb_seg_t seg = {buf, len};
    fl_wire_sample_cols_t c = cols_make(room, ob);
    fl_wire_sample_info_t info;
    fl_err_init(e);
    fl_status st = fl_wire_read_sample_reply(&seg, 1, &c, &info, e);
    cols_free(&c);
    return st;
}

static void check_case(const fl_obs_spec_t *obs, size_t count, fl_rng_t *rng) {
    fl_err_t e;
    fl_err_init(&e);
    fl_wire_sample_reply_t r;
    assert_int_equal(fl_wire_sample_reply_begin(&r, obs, count, &e), FL_OK);
    const size_t ob = fl_obs_spec_bytes(obs), n = count * ob;
    assert_int_equal(r.obs_bytes, ob);
    uint8_t *want_obs = malloc(n), *want_next = malloc(n);
    int32_t *actions = malloc(count * sizeof *actions);
    float *rewards = malloc(count * sizeof(float)), *discounts = malloc(count * sizeof(float));
    float *weights = malloc(count * sizeof(float));
    uint64_t *keys = malloc(count * sizeof *keys);
    double *probs = malloc(count * sizeof *probs);
    assert_true(want_obs && want_next && actions && rewards && discounts && weights && keys && probs);
    for (size_t i = 0; i < n; i++) {
        want_obs[i] = (uint8_t)fl_rng_below(rng, 256);
        want_next[i] = (uint8_t)fl_rng_below(rng, 256);
    }
    memcpy(r.obs, want_obs, n); /* what the table's draw does */
    memcpy(r.next_obs, want_next, n);
    for (size_t i = 0; i < count; i++) {
        /* INT32_MIN (a 10-byte varint) where count is 2: protobuf-c reads it, the client refuses it */
        actions[i] = i == 0 && count == 2 ? INT32_MIN : i == 1 ? INT32_MAX : (int32_t)fl_rng_below(rng, 18);
        rewards[i] = (float)fl_rng_normal(rng);
        discounts[i] = fl_rng_float(rng);
        weights[i] = fl_rng_float(rng);
        keys[i] = fl_rng_u64(rng);
        probs[i] = fl_rng_float(rng) * 1e-6;
    }
    Fleet__SampleResponse resp = FLEET__SAMPLE_RESPONSE__INIT;
    resp.n_keys = resp.n_weights = resp.n_probabilities = count;
    resp.keys = keys;
    resp.weights = weights;
    resp.probabilities = probs;
    resp.table_size = UINT64_MAX - 1;
    resp.total_priority = 12345.5;
    resp.min_priority = 1e-9;
    resp.shard_id = 255;
    resp.sampling_mass = 3.25;
    resp.updates_applied = 7;
    resp.updates_stale = 1u << 30;
    size_t len = 0;
    assert_int_equal(fl_wire_sample_reply_finish(&r, actions, rewards, discounts, &resp, &len, &e), FL_OK);
    assert_true(len <= r.cap && len > 2 * n);

    Fleet__SampleResponse *m = fleet__sample_response__unpack(NULL, len, r.buf);
    assert_non_null(m);
    assert_non_null(m->batch);
    assert_int_equal(m->batch->count, count);
    const Fleet__Tensor *t[2] = {m->batch->obs, m->batch->next_obs};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(t[k]->dtype, (int)obs->dtype);
        assert_int_equal(t[k]->n_shape, (size_t)obs->rank + 1);
        assert_int_equal(t[k]->shape[0], (int64_t)count);
        for (int d = 0; d < obs->rank; d++) assert_int_equal(t[k]->shape[d + 1], obs->shape[d]);
        assert_int_equal(t[k]->data.len, n);
    }
    assert_memory_equal(t[0]->data.data, want_obs, n);
    assert_memory_equal(t[1]->data.data, want_next, n);
    assert_int_equal(m->batch->n_actions, count);
    assert_memory_equal(m->batch->actions, actions, count * sizeof *actions);
    assert_int_equal(m->batch->n_rewards, count);
    assert_memory_equal(m->batch->rewards, rewards, count * sizeof(float));
    assert_int_equal(m->batch->n_discounts, count);
    assert_memory_equal(m->batch->discounts, discounts, count * sizeof(float));
    assert_int_equal(m->batch->n_priorities, 0);
    assert_int_equal(m->n_keys, count);
    assert_memory_equal(m->keys, keys, count * sizeof *keys);
    assert_int_equal(m->n_weights, count);
    assert_memory_equal(m->weights, weights, count * sizeof(float));
    assert_int_equal(m->n_probabilities, count);
    assert_memory_equal(m->probabilities, probs, count * sizeof *probs);
    assert_true(m->table_size == UINT64_MAX - 1);
    assert_true(m->total_priority == 12345.5 && m->min_priority == 1e-9 && m->sampling_mass == 3.25);
    assert_int_equal(m->shard_id, 255);
    assert_int_equal(m->updates_applied, 7);
    assert_int_equal(m->updates_stale, 1u << 30);
    fleet__sample_response__free_unpacked(m, NULL);

    if (count == 2) {
        assert_int_equal(read_one(r.buf, len, count, ob, &e), FL_DATA_LOSS);
        assert_non_null(strstr(e.msg, "batch.actions[0]: got -2147483648, expected >= 0"));
    } else {
        const want w = {count, ob, want_obs, want_next, actions, rewards, discounts, weights, keys, probs, &resp};
        check_read(r.buf, len, &w, rng);
    }
    free(r.buf);
    free(want_obs), free(want_next), free(actions), free(rewards), free(discounts), free(weights), free(keys);
    free(probs);
}

static void test_sample_reply_unpacks_to_what_was_written(void **state) {
    (void)state;
    fl_rng_t rng;
    fl_rng_init(&rng, 7);
    const int atari[] = {84, 84, 4}, minatar[] = {10, 10, 4}, vec[] = {4}, mat[] = {3, 5};
    const fl_obs_spec_t specs[] = {
        fl_obs_spec_make(FL_DTYPE_UINT8, 3, atari), fl_obs_spec_make(FL_DTYPE_UINT8, 3, minatar),
        fl_obs_spec_make(FL_DTYPE_FLOAT32, 1, vec), fl_obs_spec_make(FL_DTYPE_FLOAT32, 2, mat)};
    const size_t counts[] = {2, 512, 1, 7, 300};
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            if (!(k == 0 && counts[c] > 64)) check_case(&specs[k], counts[c], &rng); /* Atari: up to 7 */
}

static void test_sample_reply_refusals(void **state) {
    (void)state;
    const int vec[] = {4};
    const fl_obs_spec_t spec = fl_obs_spec_make(FL_DTYPE_FLOAT32, 1, vec);
    fl_err_t e;
    fl_err_init(&e);
    fl_wire_sample_reply_t r;
    assert_int_equal(fl_wire_sample_reply_begin(&r, &spec, 0, &e), FL_INVALID_ARGUMENT);
    assert_null(r.buf);
    assert_int_equal(fl_wire_sample_reply_begin(&r, &spec, (size_t)1 << 31, &e), FL_INVALID_ARGUMENT);
    assert_null(r.buf);
    assert_non_null(strstr(e.msg, "4 GB"));
    /* a response that still carries a batch of its own */
    assert_int_equal(fl_wire_sample_reply_begin(&r, &spec, 3, &e), FL_OK);
    Fleet__TransitionBatch other = FLEET__TRANSITION_BATCH__INIT;
    Fleet__SampleResponse resp = FLEET__SAMPLE_RESPONSE__INIT;
    resp.batch = &other;
    const int32_t a[3] = {0, 1, 2};
    const float f[3] = {0, 0, 0};
    size_t len = 0;
    assert_int_equal(fl_wire_sample_reply_finish(&r, a, f, f, &resp, &len, &e), FL_INTERNAL);
    free(r.buf);
}

/* ---- the client's reader on other encodings, and what it refuses ------------------ */

/* A small protobuf writer for hand-made replies. */
typedef struct enc {
    uint8_t b[4096];
    size_t n;
} enc;

static void put_varint(enc *e, uint64_t v) {
    do {
        e->b[e->n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
}
static void put_key(enc *e, unsigned field, unsigned wt) {
    put_varint(e, (uint64_t)field << 3 | wt);
}
static void put_bytes(enc *e, unsigned field, const void *p, size_t len) {
    put_key(e, field, 2);
    put_varint(e, len);
    memcpy(e->b + e->n, p, len);
    e->n += len;
}
static void put_fixed(enc *e, unsigned field, const void *p, size_t size) {
    put_key(e, field, size == 4 ? 5 : 1);
    memcpy(e->b + e->n, p, size);
    e->n += size;
}

/* A vector tensor (float32, shape [3, 2] as two unpacked values) holding v. */
static void put_tensor(enc *e, unsigned field, const float *v) {
    enc t = {.n = 0};
    put_key(&t, 1, 0);
    put_varint(&t, FLEET__DTYPE__DTYPE_FLOAT32);
    put_key(&t, 2, 0);
    put_varint(&t, 3);
    put_key(&t, 2, 0);
    put_varint(&t, 2);
    put_key(&t, 99, 0); /* unknown: skipped */
    put_varint(&t, 5);
    put_bytes(&t, 3, v, 6 * sizeof(float));
    put_bytes(e, field, t.b, t.n);
}

static const float OBS[6] = {1, 2, 3, 4, 5, 6}, NEXT[6] = {-1, -2, -3, -4, -5, -6};
static const int32_t ACT[3] = {0, 300, 2};
static const float REW[3] = {1.5f, -2, 0}, DISC[3] = {0.99f, 0, 1}, WEI[3] = {1, 0.5f, 0.25f};
static const uint64_t KEYS[3] = {1, UINT64_MAX, 1ull << 40};
static const double PROBS[3] = {0.5, 0.25, 1e-300};

/* A 3-transition reply with every repeated field unpacked (but discounts, in two packed
 * runs) and its fields out of order; `mutate` changes one thing (0: none). */
static size_t unpacked_reply(uint8_t *out, int mutate) {
    enc b = {.n = 0}, r = {.n = 0};
    put_tensor(&b, 6, NEXT);
    for (int i = 0; i < 3; i++) {
        put_key(&b, 3, 0);
        put_varint(&b, (uint64_t)(uint32_t)ACT[i]);
        put_fixed(&b, 4, &REW[i], 4);
    }
    put_bytes(&b, 5, DISC, 4);
    put_bytes(&b, 5, DISC + 1, mutate == 3 ? 7 : 8);
    if (mutate == 3) b.b[b.n++] = 0; /* 7 + 1 bytes: not a run of floats */
    put_tensor(&b, 2, OBS);
    if (mutate == 4) put_tensor(&b, 2, OBS);
    put_key(&b, 1, 0);
    put_varint(&b, mutate == 5 ? 4 : 3);
    put_bytes(&r, 1000, "skip me", 7);
    put_key(&r, 5, mutate == 1 ? 2 : 0);
    if (mutate == 1) put_varint(&r, 1);
    put_varint(&r, 42);
    for (int i = 0; i < (mutate == 2 ? 2 : 3); i++) {
        put_fixed(&r, 2, &KEYS[i], 8);
        put_fixed(&r, 4, &PROBS[i], 8);
    }
    put_bytes(&r, 3, WEI, sizeof WEI);
    put_bytes(&r, 1, b.b, b.n);
    if (mutate == 6) put_bytes(&r, 1, b.b, b.n);
    double total = 7.5;
    put_fixed(&r, 6, &total, 8);
    put_key(&r, 8, 0);
    put_varint(&r, 3);
    memcpy(out, r.b, r.n);
    return r.n;
}

static void test_reader_other_encodings(void **state) {
    (void)state;
    fl_rng_t rng;
    fl_rng_init(&rng, 11);
    Fleet__SampleResponse scalars = FLEET__SAMPLE_RESPONSE__INIT;
    scalars.table_size = 42;
    scalars.total_priority = 7.5;
    scalars.shard_id = 3;
    const want w = {3, 8, (const uint8_t *)OBS, (const uint8_t *)NEXT, ACT, REW, DISC, WEI, KEYS, PROBS, &scalars};
    uint8_t buf[4096];
    size_t len = unpacked_reply(buf, 0);
    check_read(buf, len, &w, &rng);

    /* protobuf-c's own encoding: fields in order, every repeated field packed */
    int64_t shape[2] = {3, 2};
    Fleet__Tensor to = FLEET__TENSOR__INIT, tn = FLEET__TENSOR__INIT;
    to.dtype = tn.dtype = FLEET__DTYPE__DTYPE_FLOAT32;
    to.n_shape = tn.n_shape = 2;
    to.shape = tn.shape = shape;
    to.data = (ProtobufCBinaryData){sizeof OBS, (uint8_t *)OBS};
    tn.data = (ProtobufCBinaryData){sizeof NEXT, (uint8_t *)NEXT};
    Fleet__TransitionBatch b = FLEET__TRANSITION_BATCH__INIT;
    b.count = 3;
    b.obs = &to;
    b.next_obs = &tn;
    b.n_actions = b.n_rewards = b.n_discounts = 3;
    b.actions = (int32_t *)ACT;
    b.rewards = (float *)REW;
    b.discounts = (float *)DISC;
    Fleet__SampleResponse resp = scalars;
    resp.batch = &b;
    resp.n_keys = resp.n_weights = resp.n_probabilities = 3;
    resp.keys = (uint64_t *)KEYS;
    resp.weights = (float *)WEI;
    resp.probabilities = (double *)PROBS;
    assert_true(fleet__sample_response__get_packed_size(&resp) <= sizeof buf);
    len = fleet__sample_response__pack(&resp, buf);
    check_read(buf, len, &w, &rng);

    /* the observations one byte short */
    to.data.len--;
    len = fleet__sample_response__pack(&resp, buf);
    fl_err_t e;
    assert_int_equal(read_one(buf, len, 3, 8, &e), FL_DATA_LOSS);
    assert_non_null(strstr(e.msg, "batch.obs.data: got 23 bytes, expected 24"));
}

static void test_reader_refusals(void **state) {
    (void)state;
    uint8_t buf[4096];
    fl_err_t e;
    const struct {
        int mutate;
        size_t room;
        const char *msg;
    } cases[] = {
        {0, 2, "keys: more than 2 values (room for 2 transitions)"},
        {1, 3, "table_size: wire type 2, expected 0"},
        {2, 3, "3 transitions with 2 keys, 3 weights, 2 probabilities"},
        {3, 3, "batch.discounts: 7 bytes of packed values, expected a multiple of 4"},
        {4, 3, "batch.obs: sent twice, expected once"},
        {5, 3, "batch.count: got 4, expected at most 3"},
        {6, 3, "batch: sent twice, expected once"},
        {0, 3, NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t len = unpacked_reply(buf, cases[k].mutate);
        fl_status st = read_one(buf, len, cases[k].room, 8, &e);
        if (!cases[k].msg) {
            assert_int_equal(st, FL_OK);
            continue;
        }
        assert_int_equal(st, FL_DATA_LOSS);
        if (!strstr(e.msg, cases[k].msg)) fail_msg("case %zu: got \"%s\", expected \"%s\"", k, e.msg, cases[k].msg);
    }
    /* a count the columns do not match, within the room: the first column checked is named */
    size_t len = unpacked_reply(buf, 5);
    assert_int_equal(read_one(buf, len, 4, 8, &e), FL_DATA_LOSS);
    assert_non_null(strstr(e.msg, "batch.obs.shape: got [3, 2] of float32, expected [4, ...] with 8 bytes per item"));
    /* every truncation of the reply is refused (its last two fields are the scalars
     * total_priority and shard_id: 11 bytes) and none reads out of bounds (run under ASan) */
    len = unpacked_reply(buf, 0);
    for (size_t cutlen = 0; cutlen < len; cutlen++) {
        uint8_t *p = malloc(cutlen ? cutlen : 1); /* exactly cutlen bytes, so ASan sees a read past them */
        memcpy(p, buf, cutlen);
        fl_status st = read_one(p, cutlen, 3, 8, &e);
        if (cutlen < len - 11 && st != FL_DATA_LOSS) fail_msg("a reply cut at %zu of %zu bytes was read", cutlen, len);
        free(p);
    }
    /* random corruption: refused or read, never out of bounds */
    fl_rng_t rng;
    fl_rng_init(&rng, 5);
    for (int it = 0; it < 20000; it++) {
        uint8_t *p = malloc(len);
        memcpy(p, buf, len);
        for (int f = 0, nf = 1 + (int)fl_rng_below(&rng, 4); f < nf; f++)
            p[fl_rng_below(&rng, len)] = (uint8_t)fl_rng_below(&rng, 256);
        fl_status st = read_one(p, len, 3, 8, &e);
        assert_true(st == FL_OK || (st == FL_DATA_LOSS && e.msg[0]));
        free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_reply_unpacks_to_what_was_written),
        cmocka_unit_test(test_sample_reply_refusals),
        cmocka_unit_test(test_reader_other_encodings),
        cmocka_unit_test(test_reader_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
