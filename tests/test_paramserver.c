/* Tests of paramserver/: the store on its own, and the service with a real gRPC server
 * on loopback TCP (port 0) or a unix socket, driven by the real client and by raw
 * fleet.ParamServer messages for what the client never sends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "paramserver/client.h"
#include "paramserver/server.h"
#include "paramserver/store.h"

#define TIMEOUT_MS 20000

#include "paramserver_test_util.h"

/* ---- fixture: a service on 127.0.0.1:0, a client and a raw channel ------------------- */

typedef struct {
    fl_paramserver_service_t *svc;
    fl_param_client_t *cl;
    fl_rpc_channel_t *ch;
    char addr[256];
} fixture;

static fixture *start_on(const char *listen, const fl_paramserver_service_opts_t *opts, int shard) {
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    fl_err_t err;
    fl_err_init(&err);
    if (fl_paramserver_service_create(opts, shard, &f->svc, &err) != FL_OK) fail_msg("create: %s", err.msg);
    assert_int_equal(fl_paramserver_service_start(f->svc, listen, f->addr, sizeof f->addr, &err), FL_OK);
    assert_int_equal(fl_param_client_create(f->addr, &f->cl, &err), FL_OK);
    assert_int_equal(fl_rpc_channel_create(f->addr, 0, &f->ch, &err), FL_OK);
    return f;
}

static int setup(void **state) {
    *state = start_on("127.0.0.1:0", NULL, 0);
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    fl_rpc_channel_destroy(f->ch);
    fl_param_client_destroy(f->cl);
    fl_paramserver_service_destroy(f->svc);
    free(f);
    return 0;
}

/* A raw Publish; returns the status and leaves the server's message in err. */
static fl_status raw_publish(fixture *f, uint64_t version, uint64_t offset, uint64_t total, Fleet__DType dtype,
                             const int64_t *shape, size_t n_shape, const void *data, size_t len, fl_err_t *err) {
    uint64_t got = version;
    fl_status st = raw_publish_ch(f->ch, version, offset, total, dtype, shape, n_shape, data, len, &got, err);
    assert_int_equal(got, version);
    return st;
}

static Fleet__FetchResponse *raw_fetch(fixture *f, uint64_t if_newer_than, Fleet__DType dtype, fl_status *st,
                                       fl_err_t *err) {
    Fleet__FetchRequest req = FLEET__FETCH_REQUEST__INIT;
    req.if_newer_than = if_newer_than;
    req.dtype = dtype;
    ProtobufCMessage *resp = NULL;
    fl_err_init(err);
    *st = fl_rpc_unary_pb(f->ch, "/fleet.ParamServer/Fetch", &req.base, &fleet__fetch_response__descriptor, &resp,
                          TIMEOUT_MS, FL_RPC_WAIT_FOR_READY, err);
    return (Fleet__FetchResponse *)resp;
}

static fl_status store_create(uint32_t shard, int shards, fl_param_store_t **s, fl_err_t *err) {
    fl_param_store_opts_t o;
    fl_param_store_opts_init(&o);
    o.shard_id = shard;
    o.num_shards = shards;
    return fl_param_store_create(&o, s, err);
}

static fl_param_info_t info_of(fixture *f) {
    fl_param_info_t in;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_info(f->cl, TIMEOUT_MS, &in, &err), FL_OK);
    return in;
}

/* ---- store ---------------------------------------------------------------------------- */

static void test_store_snapshots(void **state) {
    (void)state;
    fl_param_store_t *s;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(store_create(7, 8, &s, &err), FL_OK);
    uint64_t held = 99;
    assert_null(fl_param_store_fetch(s, 0, &held));
    assert_int_equal(held, 0);

    float v1[5] = {1.0f, -2.5f, 0.0f, -0.0f, 1e-40f};
    assert_int_equal(fl_param_store_publish(s, 1, 35, 40, v1, 5, &err), FL_OK); /* shard 7 of 8 */
    const fl_param_snapshot_t *a = fl_param_store_fetch(s, 0, &held);
    const fl_param_snapshot_t *b = fl_param_store_fetch(s, 0, NULL);
    assert_non_null(a);
    assert_int_equal(held, 1);
    /* every fetch of a version shares the one encoded response */
    assert_ptr_equal(a, b);
    assert_ptr_equal(a->response, b->response);
    assert_int_equal(a->n, 5);
    assert_memory_equal(a->values, v1, sizeof v1);
    Fleet__FetchResponse *r = fleet__fetch_response__unpack(NULL, a->response_len, a->response);
    assert_non_null(r);
    assert_int_equal(r->version, 1);
    assert_true(r->has_params);
    assert_int_equal(r->params->version, 1);
    assert_int_equal(r->params->offset, 35);
    assert_int_equal(r->params->total, 40);
    assert_int_equal(r->params->values->dtype, FLEET__DTYPE__DTYPE_FLOAT32);
    assert_int_equal(r->params->values->n_shape, 1);
    assert_int_equal(r->params->values->shape[0], 5);
    assert_int_equal(r->params->values->data.len, sizeof v1);
    assert_memory_equal(r->params->values->data.data, v1, sizeof v1);
    fleet__fetch_response__free_unpacked(r, NULL);
    assert_null(fl_param_store_fetch(s, 1, &held));
    assert_int_equal(held, 1);

    /* a newer version replaces the held one; references to the old stay valid */
    float v2[5] = {2, 2, 2, 2, 2};
    assert_int_equal(fl_param_store_publish(s, 2, 35, 40, v2, 5, &err), FL_OK);
    assert_int_equal(fl_param_store_version(s), 2);
    assert_memory_equal(a->values, v1, sizeof v1);
    const fl_param_snapshot_t *c = fl_param_store_fetch(s, 1, NULL);
    assert_non_null(c);
    assert_int_equal(c->version, 2);
    fl_param_store_info_t in;
    fl_param_store_info(s, &in);
    assert_int_equal(in.shard_id, 7);
    assert_int_equal(in.version, 2);
    assert_int_equal(in.size, 5);
    assert_int_equal(in.publishes, 2);
    assert_int_equal(in.fetches, 5);
    assert_int_equal(in.fetches_with_params, 3);
    fl_param_store_destroy(s);
    /* ... even after the store is gone */
    assert_memory_equal(a->values, v1, sizeof v1);
    assert_memory_equal(c->values, v2, sizeof v2);
    fl_param_snapshot_release(a);
    fl_param_snapshot_release(b);
    fl_param_snapshot_release(c);
    fl_param_snapshot_release(NULL);
    fl_param_store_destroy(NULL);
}

static void test_store_geometry(void **state) {
    (void)state;
    fl_param_store_t *s;
    fl_err_t err;
    float v[4] = {1, 2, 3, 4};
    assert_int_equal(store_create(0, 1, &s, &err), FL_OK);
    assert_int_equal(fl_param_store_publish(s, 1, 0, 4, v, 0, &err), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_param_store_publish(s, 0, 0, 4, v, 4, &err), FL_FAILED_PRECONDITION);
    assert_int_equal(fl_param_store_publish(s, 1, 1, 5, v, 4, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.offset");
    assert_int_equal(fl_param_store_publish(s, 1, 0, 8, v, 4, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.total");
    assert_int_equal(fl_param_store_version(s), 0);
    fl_param_store_destroy(s);

    /* a shard that holds a slice: the slice must fit and keep its place */
    assert_int_equal(store_create(1, 2, &s, &err), FL_OK);
    assert_int_equal(fl_param_store_publish(s, 1, 6, 8, v, 4, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "got the slice [6, 10) of a 8-element vector, but shard 1 of 2 owns [4, 8)");
    assert_int_equal(fl_param_store_publish(s, 1, 4, 8, v, 4, &err), FL_OK);
    assert_int_equal(fl_param_store_publish(s, 2, 0, 8, v, 4, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "got the slice [0, 4) of a 8-element vector, but shard 1 of 2 owns [4, 8)");
    /* balanced: the first total % P shards get one more element */
    assert_int_equal(fl_param_store_publish(s, 2, 4, 9, v, 4, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "owns [5, 9)");
    /* this shard's slice of a vector of another length is still refused */
    assert_int_equal(fl_param_store_publish(s, 2, 5, 9, v, 4, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.offset: 5, but the held slice starts at 4");
    assert_int_equal(fl_param_store_publish(s, 2, 4, 8, v, 4, &err), FL_OK);
    fl_param_store_info_t in;
    fl_param_store_info(s, &in);
    assert_int_equal(in.offset, 4);
    assert_int_equal(in.size, 4);
    assert_int_equal(in.total, 8);
    assert_int_equal(in.publishes, 2);
    fl_param_store_destroy(s);
}

/* Publishers racing over the same versions: each version is applied at most once and
 * the counter matches the successes. */
typedef struct {
    fl_param_store_t *s;
    int wins[101];
} race_arg;

static void *race_publisher(void *p) {
    race_arg *a = p;
    float v[64];
    for (uint64_t k = 1; k <= 100; k++) {
        for (int i = 0; i < 64; i++) v[i] = (float)k;
        if (fl_param_store_publish(a->s, k, 0, 64, v, 64, NULL) == FL_OK) a->wins[k]++;
    }
    return NULL;
}

static void test_store_racing_publishers(void **state) {
    (void)state;
    enum { T = 8 };
    fl_param_store_t *s;
    assert_int_equal(store_create(0, 1, &s, NULL), FL_OK);
    pthread_t th[T];
    race_arg *args = calloc(T, sizeof *args);
    for (int t = 0; t < T; t++) {
        args[t].s = s;
        pthread_create(&th[t], NULL, race_publisher, &args[t]);
    }
    for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
    uint64_t total = 0;
    for (int k = 1; k <= 100; k++) {
        int w = 0;
        for (int t = 0; t < T; t++) w += args[t].wins[k];
        assert_true(w <= 1);
        total += (uint64_t)w;
    }
    fl_param_store_info_t in;
    fl_param_store_info(s, &in);
    assert_int_equal(in.publishes, total);
    assert_int_equal(in.version, 100);
    const fl_param_snapshot_t *snap = fl_param_store_fetch(s, 0, NULL);
    float v;
    memcpy(&v, snap->values + 4 * 63, 4);
    assert_true(v == 100.0f);
    fl_param_snapshot_release(snap);
    free(args);
    fl_param_store_destroy(s);
}

/* ---- service --------------------------------------------------------------------------- */

static void test_fetch_before_publish(void **state) {
    fixture *f = *state;
    float dst[8];
    for (int i = 0; i < 8; i++) dst[i] = -7.0f;
    uint64_t version = 0;
    int updated = -1;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, 8, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(updated, 0);
    assert_int_equal(version, 0);
    for (int i = 0; i < 8; i++) assert_true(dst[i] == -7.0f);
    fl_status st;
    Fleet__FetchResponse *r = raw_fetch(f, 0, FLEET__DTYPE__DTYPE_INVALID, &st, &err);
    assert_int_equal(st, FL_OK);
    assert_int_equal(r->version, 0);
    assert_false(r->has_params);
    assert_null(r->params);
    fleet__fetch_response__free_unpacked(r, NULL);
}

static void test_publish_fetch_versions(void **state) {
    fixture *f = *state;
    enum { N = 1000 };
    float v1[N], dst[N];
    /* bit patterns that a lossy path would change: -0, subnormals, extremes */
    for (int i = 0; i < N; i++) v1[i] = (float)i * 0.37f - 100.0f;
    v1[0] = -0.0f;
    v1[1] = 1e-45f;
    v1[2] = 3.4e38f;
    v1[3] = -1.17e-38f;
    publish_ok(f->cl, 1, v1, N);

    uint64_t version = 0;
    int updated = 0;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, N, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(updated, 1);
    assert_int_equal(version, 1);
    assert_memory_equal(dst, v1, sizeof v1);

    /* up to date: nothing sent, dst untouched */
    for (int i = 0; i < N; i++) dst[i] = 42.0f;
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, N, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(updated, 0);
    assert_int_equal(version, 1);
    for (int i = 0; i < N; i++) assert_true(dst[i] == 42.0f);
    fl_status st;
    Fleet__FetchResponse *r = raw_fetch(f, 1, FLEET__DTYPE__DTYPE_FLOAT32, &st, &err);
    assert_int_equal(st, FL_OK);
    assert_int_equal(r->version, 1);
    assert_false(r->has_params);
    assert_null(r->params);
    fleet__fetch_response__free_unpacked(r, NULL);
    /* a caller ahead of the server (e.g. after a server restart) is "up to date" too */
    uint64_t ahead = 5;
    assert_int_equal(fl_param_fetch(f->cl, &ahead, dst, N, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(updated, 0);
    assert_int_equal(ahead, 5);

    float v2[N];
    for (int i = 0; i < N; i++) v2[i] = -(float)i;
    publish_ok(f->cl, 2, v2, N);
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, N, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(updated, 1);
    assert_int_equal(version, 2);
    assert_memory_equal(dst, v2, sizeof v2);
    /* a caller two versions behind jumps straight to the latest */
    uint64_t old = 0;
    assert_int_equal(fl_param_fetch(f->cl, &old, dst, N, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(old, 2);
}

static void test_stale_version_rejected(void **state) {
    fixture *f = *state;
    float v[16], dst[16];
    for (int i = 0; i < 16; i++) v[i] = 3.0f;
    publish_ok(f->cl, 1234567, v, 16);
    float w[16];
    for (int i = 0; i < 16; i++) w[i] = 9.0f;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_publish(f->cl, 1234000, w, 16, TIMEOUT_MS, &err), FL_FAILED_PRECONDITION);
    assert_contains(err.msg, "1234000");
    assert_contains(err.msg, "1234567");
    fl_err_init(&err);
    assert_int_equal(fl_param_publish(f->cl, 1234567, w, 16, TIMEOUT_MS, &err), FL_FAILED_PRECONDITION);
    assert_contains(err.msg, "1234567 is not newer than the held version 1234567");
    assert_int_equal(fl_param_publish(f->cl, 0, w, 16, TIMEOUT_MS, &err), FL_FAILED_PRECONDITION);
    /* the held version is intact */
    uint64_t version = 0;
    int updated = 0;
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, 16, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(version, 1234567);
    assert_memory_equal(dst, v, sizeof v);
    assert_int_equal(info_of(f).publishes, 1);
}

static void test_invalid_publishes(void **state) {
    fixture *f = *state;
    enum { N = 100 };
    float v[N + 1];
    for (int i = 0; i <= N; i++) v[i] = 0.5f;
    publish_ok(f->cl, 1, v, N);
    fl_err_t err;
    fl_err_init(&err);

    /* the first publish fixed the length */
    assert_int_equal(fl_param_publish(f->cl, 2, v, N + 1, TIMEOUT_MS, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "101");
    assert_contains(err.msg, "100");
    assert_int_equal(fl_param_publish(f->cl, 2, v, N - 1, TIMEOUT_MS, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "99");

    /* non-finite values name the first bad index */
    v[37] = NAN;
    v[60] = INFINITY;
    assert_int_equal(fl_param_publish(f->cl, 2, v, N, TIMEOUT_MS, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.values[37]");
    assert_contains(err.msg, "NaN");
    v[37] = 0.5f;
    assert_int_equal(fl_param_publish(f->cl, 2, v, N, TIMEOUT_MS, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.values[60]");
    assert_contains(err.msg, "inf");
    v[60] = 0.5f;
    v[0] = -INFINITY;
    assert_int_equal(fl_param_publish(f->cl, 2, v, N, TIMEOUT_MS, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.values[0]: -inf");
    v[0] = 0.5f;

    /* what the client never sends */
    int64_t shape = N;
    assert_int_equal(raw_publish(f, 2, 0, N, FLEET__DTYPE__DTYPE_BFLOAT16, &shape, 1, v, 2 * N, &err),
                     FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.values.dtype");
    assert_contains(err.msg, "bfloat16");
    assert_int_equal(raw_publish(f, 2, 0, N, FLEET__DTYPE__DTYPE_INT32, &shape, 1, v, 4 * N, &err),
                     FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.values.dtype");
    assert_int_equal(raw_publish(f, 2, 0, N, FLEET__DTYPE__DTYPE_INVALID, &shape, 1, v, 4 * N, &err),
                     FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.values.dtype");
    assert_int_equal(raw_publish(f, 2, 0, N, FLEET__DTYPE__DTYPE_FLOAT32, &shape, 1, v, 4 * N - 4, &err),
                     FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.values.data");
    int64_t shape2[2] = {10, 10};
    assert_int_equal(raw_publish(f, 2, 0, N, FLEET__DTYPE__DTYPE_FLOAT32, shape2, 2, v, 4 * N, &err),
                     FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.values.shape");
    int64_t neg = -1;
    assert_int_equal(raw_publish(f, 2, 0, N, FLEET__DTYPE__DTYPE_FLOAT32, &neg, 1, v, 0, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.values.shape");
    assert_int_equal(raw_publish(f, 2, 0, N + 5, FLEET__DTYPE__DTYPE_FLOAT32, &shape, 1, v, 4 * N, &err),
                     FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.total");
    assert_int_equal(raw_publish(f, 2, 3, N + 3, FLEET__DTYPE__DTYPE_FLOAT32, &shape, 1, v, 4 * N, &err),
                     FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.offset");

    /* a request without params, and bytes that are no message at all */
    Fleet__PublishRequest empty = FLEET__PUBLISH_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    assert_int_equal(fl_rpc_unary_pb(f->ch, "/fleet.ParamServer/Publish", &empty.base,
                                     &fleet__publish_response__descriptor, &resp, TIMEOUT_MS, 0, &err),
                     FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params: missing");
    fl_rpc_buf_t raw;
    static const uint8_t garbage[] = {0x0a, 0xff, 0xff, 0xff, 0x0f, 0x01};
    assert_int_equal(
        fl_rpc_unary(f->ch, "/fleet.ParamServer/Publish", garbage, sizeof garbage, TIMEOUT_MS, 0, &raw, &err),
        FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "PublishRequest");
    assert_int_equal(
        fl_rpc_unary(f->ch, "/fleet.ParamServer/Fetch", garbage, sizeof garbage, TIMEOUT_MS, 0, &raw, &err),
        FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "FetchRequest");

    /* the server kept serving version 1, untouched */
    float dst[N];
    uint64_t version = 0;
    int updated = 0;
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, N, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(version, 1);
    for (int i = 0; i < N; i++) assert_true(dst[i] == 0.5f);
    assert_int_equal(info_of(f).publishes, 1);
    /* and accepts a valid version 2 */
    v[5] = 6.0f;
    publish_ok(f->cl, 2, v, N);
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, N, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(version, 2);
    assert_true(dst[5] == 6.0f);
}

static void test_unsupported_calls(void **state) {
    fixture *f = *state;
    float v[4] = {1, 2, 3, 4};
    publish_ok(f->cl, 1, v, 4);
    fl_err_t err;
    fl_status st;
    Fleet__FetchResponse *r = raw_fetch(f, 0, FLEET__DTYPE__DTYPE_UINT8, &st, &err);
    assert_null(r);
    assert_int_equal(st, FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "dtype: uint8");
    assert_contains(err.msg, "expected float32 (or unset) or bfloat16");
    r = raw_fetch(f, 0, (Fleet__DType)77, &st, &err);
    assert_null(r);
    assert_int_equal(st, FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "(77)");

    /* apex mode: pushes are refused with the reason */
    Fleet__PushGradientsRequest pg = FLEET__PUSH_GRADIENTS_REQUEST__INIT;
    pg.based_on_version = 1;
    ProtobufCMessage *resp = NULL;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_unary_pb(f->ch, "/fleet.ParamServer/PushGradients", &pg.base,
                                     &fleet__push_gradients_response__descriptor, &resp, TIMEOUT_MS, 0, &err),
                     FL_FAILED_PRECONDITION);
    assert_contains(err.msg, "learner.mode = apex");
    assert_contains(err.msg, "learner.mode = gorila");
    float g[4] = {0};
    assert_int_equal(fl_param_push(f->cl, g, 4, NULL, TIMEOUT_MS, &err), FL_FAILED_PRECONDITION);
    /* failed fetches are not counted as answered */
    fl_param_info_t in = info_of(f);
    assert_int_equal(in.fetches, 0);
    assert_false(in.gorila);
    assert_int_equal(in.num_shards, 1);
    assert_int_equal(in.pushes_applied, 0);
}

static void test_fetch_size_mismatch(void **state) {
    fixture *f = *state;
    float v[64];
    for (int i = 0; i < 64; i++) v[i] = (float)i;
    publish_ok(f->cl, 3, v, 64);
    float dst[65];
    for (int i = 0; i < 65; i++) dst[i] = -1.0f;
    uint64_t version = 0;
    int updated = -1;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, 65, &updated, TIMEOUT_MS, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "64");
    assert_contains(err.msg, "65");
    assert_int_equal(updated, 0);
    assert_int_equal(version, 0);
    for (int i = 0; i < 65; i++) assert_true(dst[i] == -1.0f);
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, 63, &updated, TIMEOUT_MS, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "63");
    assert_int_equal(version, 0);
}

static void test_large_vector(void **state) {
    fixture *f = *state;
    const size_t n = 1700000;
    float *v = malloc(n * sizeof *v), *dst = malloc(n * sizeof *dst);
    assert_non_null(v);
    assert_non_null(dst);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        v[i] = (float)(int32_t)x * 1e-9f;
    }
    memset(dst, 0, n * sizeof *dst);
    publish_ok(f->cl, 1, v, n);
    uint64_t version = 0;
    int updated = 0;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, n, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(updated, 1);
    assert_int_equal(version, 1);
    assert_memory_equal(dst, v, n * sizeof *v);
    fl_param_info_t in = info_of(f);
    assert_int_equal(in.size, n);
    assert_int_equal(in.total, n);
    free(v);
    free(dst);
}

/* 16 fetchers, each with its own client, while version k = (k, k, ..., k) is published
 * for k = 1..50: every fetch must see one whole version, and versions only grow. */
enum { CONC_N = 65536, CONC_VERSIONS = 50, CONC_FETCHERS = 16 };

typedef struct {
    const char *addr;
    atomic_int *publisher_done;
    int ok;
    uint64_t last;
    int updates;
    char why[FL_ERR_MSG_MAX + 64];
} fetcher_arg;

static void *fetcher(void *p) {
    fetcher_arg *a = p;
    fl_param_client_t *cl;
    float *dst = malloc(CONC_N * sizeof *dst);
    if (!dst || fl_param_client_create(a->addr, &cl, NULL) != FL_OK) {
        snprintf(a->why, sizeof a->why, "setup failed");
        free(dst);
        return NULL;
    }
    uint64_t version = 0;
    for (;;) {
        int done = atomic_load(a->publisher_done); /* read before the fetch: the last fetch sees the end */
        int updated = 0;
        uint64_t before = version;
        fl_err_t err;
        fl_err_init(&err);
        if (fl_param_fetch(cl, &version, dst, CONC_N, &updated, TIMEOUT_MS, &err) != FL_OK) {
            snprintf(a->why, sizeof a->why, "fetch: %s", err.msg);
            goto out;
        }
        if (updated) {
            if (version <= before) {
                snprintf(a->why, sizeof a->why, "version went from %llu to %llu", (unsigned long long)before,
                         (unsigned long long)version);
                goto out;
            }
            for (size_t i = 0; i < CONC_N; i++) {
                if (dst[i] != (float)version) {
                    snprintf(a->why, sizeof a->why, "version %llu: element %zu is %g", (unsigned long long)version, i,
                             (double)dst[i]);
                    goto out;
                }
            }
            a->updates++;
        } else if (version != before) {
            snprintf(a->why, sizeof a->why, "version changed without an update");
            goto out;
        }
        if (done) break;
    }
    a->last = version;
    a->ok = 1;
out:
    fl_param_client_destroy(cl);
    free(dst);
    return NULL;
}

static void test_concurrent_fetchers(void **state) {
    fixture *f = *state;
    atomic_int done;
    atomic_init(&done, 0);
    pthread_t th[CONC_FETCHERS];
    fetcher_arg args[CONC_FETCHERS];
    for (int i = 0; i < CONC_FETCHERS; i++) {
        args[i] = (fetcher_arg){.addr = f->addr, .publisher_done = &done};
        pthread_create(&th[i], NULL, fetcher, &args[i]);
    }
    float *v = malloc(CONC_N * sizeof *v);
    assert_non_null(v);
    fl_status pub = FL_OK;
    for (int k = 1; k <= CONC_VERSIONS && pub == FL_OK; k++) {
        for (size_t i = 0; i < CONC_N; i++) v[i] = (float)k;
        fl_err_t err;
        fl_err_init(&err);
        pub = fl_param_publish(f->cl, (uint64_t)k, v, CONC_N, TIMEOUT_MS, &err);
        if (pub != FL_OK) print_error("publish %d: %s\n", k, err.msg);
    }
    atomic_store(&done, 1);
    for (int i = 0; i < CONC_FETCHERS; i++) pthread_join(th[i], NULL);
    free(v);
    assert_int_equal(pub, FL_OK);
    uint64_t updates = 0;
    for (int i = 0; i < CONC_FETCHERS; i++) {
        if (!args[i].ok) fail_msg("fetcher %d: %s", i, args[i].why);
        assert_int_equal(args[i].last, CONC_VERSIONS);
        updates += (uint64_t)args[i].updates;
    }
    fl_param_info_t in = info_of(f);
    assert_int_equal(in.publishes, CONC_VERSIONS);
    assert_int_equal(in.version, CONC_VERSIONS);
    assert_int_equal(in.fetches_with_params, updates);
}

static void test_info_counters(void **state) {
    fixture *f = *state;
    fl_param_info_t in = info_of(f);
    assert_int_equal(in.shard_id, 0);
    assert_int_equal(in.version, 0);
    assert_int_equal(in.size, 0);
    assert_int_equal(in.publishes, 0);
    assert_int_equal(in.fetches, 0);
    assert_true(in.uptime_s >= 0);

    float v[10] = {0}, dst[10];
    uint64_t version = 0;
    int updated;
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, 10, &updated, TIMEOUT_MS, NULL), FL_OK); /* nothing yet */
    publish_ok(f->cl, 4, v, 10);
    assert_int_equal(fl_param_publish(f->cl, 4, v, 10, TIMEOUT_MS, NULL), FL_FAILED_PRECONDITION);
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, 10, &updated, TIMEOUT_MS, NULL), FL_OK); /* with */
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, 10, &updated, TIMEOUT_MS, NULL), FL_OK); /* up to date */
    version = 0;
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, 10, &updated, TIMEOUT_MS, NULL), FL_OK); /* with */
    publish_ok(f->cl, 9, v, 10);
    double up0 = in.uptime_s;
    in = info_of(f);
    assert_int_equal(in.shard_id, 0);
    assert_int_equal(in.version, 9);
    assert_int_equal(in.offset, 0);
    assert_int_equal(in.size, 10);
    assert_int_equal(in.total, 10);
    assert_int_equal(in.publishes, 2);
    assert_int_equal(in.fetches, 4);
    assert_int_equal(in.fetches_with_params, 2);
    assert_true(in.uptime_s >= up0);
    fl_param_store_info_t local;
    fl_paramserver_service_info(f->svc, &local);
    assert_int_equal(local.version, 9);
    assert_int_equal(local.fetches, 4);
}

static void test_unix_socket_and_shard(void **state) {
    (void)state;
    char listen[128];
    snprintf(listen, sizeof listen, "unix:/tmp/fleet-test-ps-%d.sock", (int)getpid());
    fl_paramserver_service_opts_t o;
    fl_paramserver_service_opts_init(&o);
    o.shards = 3;
    fixture *f = start_on(listen, &o, 2);
    assert_string_equal(f->addr, listen);
    /* shard 2 of 3 owns [2, 3) of a 3-element vector: the whole vector is refused */
    float v[3] = {1.5f, 2.5f, 3.5f}, dst[3];
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_publish(f->cl, 1, v, 3, TIMEOUT_MS, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "got the slice [0, 3) of a 3-element vector, but shard 2 of 3 owns [2, 3)");
    int64_t shape = 1;
    assert_int_equal(raw_publish(f, 1, 2, 3, FLEET__DTYPE__DTYPE_FLOAT32, &shape, 1, &v[2], 4, &err), FL_OK);
    /* a one-address client cannot read a slice */
    uint64_t version = 0;
    int updated = 0;
    assert_int_equal(fl_param_fetch(f->cl, &version, dst, 3, &updated, TIMEOUT_MS, &err), FL_UNIMPLEMENTED);
    assert_contains(err.msg, "[2, 3) of a 3-element vector");
    fl_param_info_t in = info_of(f);
    assert_int_equal(in.shard_id, 2);
    assert_int_equal(in.num_shards, 3);
    assert_int_equal(in.offset, 2);
    assert_int_equal(in.size, 1);
    void *p = f;
    teardown(&p);
    unlink(listen + 5);
}

static void test_create_and_start_errors(void **state) {
    (void)state;
    fl_paramserver_service_t *svc = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_paramserver_service_create(NULL, 1, &svc, &err), FL_INVALID_ARGUMENT);
    assert_null(svc);
    assert_contains(err.msg, "paramserver.shards");
    assert_int_equal(fl_paramserver_service_create(NULL, -1, &svc, &err), FL_INVALID_ARGUMENT);
    /* a port that is taken */
    fixture *f = start_on("127.0.0.1:0", NULL, 0);
    assert_int_equal(fl_paramserver_service_create(NULL, 0, &svc, &err), FL_OK);
    char bound[8];
    assert_int_not_equal(fl_paramserver_service_start(svc, f->addr, NULL, 0, &err), FL_OK);
    fl_paramserver_service_destroy(svc);
    /* too small a buffer for the bound address */
    assert_int_equal(fl_paramserver_service_create(NULL, 0, &svc, &err), FL_OK);
    assert_int_equal(fl_paramserver_service_start(svc, "127.0.0.1:0", bound, sizeof bound, &err), FL_INVALID_ARGUMENT);
    fl_paramserver_service_stop(svc);
    fl_paramserver_service_stop(svc);
    fl_paramserver_service_destroy(svc);
    fl_paramserver_service_destroy(NULL);
    void *p = f;
    teardown(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_snapshots),
        cmocka_unit_test(test_store_geometry),
        cmocka_unit_test(test_store_racing_publishers),
        cmocka_unit_test_setup_teardown(test_fetch_before_publish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish_fetch_versions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_version_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_publishes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsupported_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fetch_size_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_vector, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_fetchers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_info_counters, setup, teardown),
        cmocka_unit_test(test_unix_socket_and_shard),
        cmocka_unit_test(test_create_and_start_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
