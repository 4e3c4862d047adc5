/* Tests of a sharded parameter service: P shard services (paramserver.shards = P) on
 * 127.0.0.1:0, driven by the multi-address client and by raw fleet.ParamServer
 * messages: round trips over 2 and 3 shards, the MINIMUM version rule, errors that name
 * the shard, bfloat16 fetches, and malformed requests answered while the shards keep
 * serving. */
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

#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "paramserver/client.h"
#include "paramserver/quantize.h"
#include "paramserver/server.h"
#include "paramserver/store.h"

#define TIMEOUT_MS 20000

#include "paramserver_test_util.h"

/* P shards (paramserver.shards = P, defaults otherwise) and c->cl, a client over all of
 * them with opts. */
static cluster *start(int P, const fl_param_client_opts_t *opts) {
    fl_paramserver_service_opts_t so;
    fl_paramserver_service_opts_init(&so);
    so.shards = P;
    cluster *c = cluster_start(&so);
    fl_err_t err;
    fl_err_init(&err);
    if (fl_param_client_create_opts(c->addrs, opts, &c->cl, &err) != FL_OK) fail_msg("client: %s", err.msg);
    assert_int_equal(fl_param_num_shards(c->cl), P);
    return c;
}

static void fill(float *v, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = (float)(int32_t)seed * 1e-9f;
    }
}

/* A raw float32 Publish of data[0, n) as the slice at offset of a total-element vector. */
static fl_status raw_publish(fl_rpc_channel_t *ch, uint64_t version, uint64_t offset, uint64_t total, const float *data,
                             size_t n, fl_err_t *err) {
    int64_t shape = (int64_t)n;
    return raw_publish_ch(ch, version, offset, total, FLEET__DTYPE__DTYPE_FLOAT32, &shape, 1, data, 4 * n, NULL, err);
}

static void roundtrip(int P, size_t n) {
    cluster *c = start(P, NULL);
    float *v = malloc(n * sizeof *v), *dst = malloc(n * sizeof *dst);
    fill(v, n, 7);
    v[0] = -0.0f;
    v[n - 1] = 1e-45f;
    for (size_t i = 0; i < n; i++) dst[i] = 99.0f;
    publish_ok(c->cl, 1, v, n);
    uint64_t version = 0;
    int updated = 0;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_fetch(c->cl, &version, dst, n, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(updated, 1);
    assert_int_equal(version, 1);
    assert_memory_equal(dst, v, n * sizeof *v);
    /* each shard holds exactly its balanced slice */
    uint64_t next = 0;
    for (int s = 0; s < P; s++) {
        fl_param_info_t in;
        assert_int_equal(fl_param_info_shard(c->cl, s, TIMEOUT_MS, &in, &err), FL_OK);
        assert_int_equal(in.shard_id, s);
        assert_int_equal(in.num_shards, P);
        assert_int_equal(in.offset, next);
        assert_int_equal(in.size, n / (size_t)P + ((size_t)s < n % (size_t)P));
        assert_int_equal(in.total, n);
        assert_int_equal(in.version, 1);
        next += in.size;
    }
    assert_int_equal(next, n);
    /* up to date: nothing written */
    for (size_t i = 0; i < n; i++) dst[i] = 42.0f;
    assert_int_equal(fl_param_fetch(c->cl, &version, dst, n, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(updated, 0);
    assert_int_equal(version, 1);
    for (size_t i = 0; i < n; i++) assert_true(dst[i] == 42.0f);
    /* a new version everywhere */
    fill(v, n, 8);
    publish_ok(c->cl, 2, v, n);
    assert_int_equal(fl_param_fetch(c->cl, &version, dst, n, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(updated, 1);
    assert_int_equal(version, 2);
    assert_memory_equal(dst, v, n * sizeof *v);

    /* one shard moves ahead: only its slice is sent, and the version reported is the
     * minimum over shards */
    fl_param_info_t in1;
    assert_int_equal(fl_param_info_shard(c->cl, 1, TIMEOUT_MS, &in1, &err), FL_OK);
    float *w = malloc(in1.size * sizeof *w);
    for (size_t i = 0; i < in1.size; i++) w[i] = -5.0f;
    assert_int_equal(raw_publish(c->ch[1], 3, in1.offset, n, w, in1.size, &err), FL_OK);
    for (size_t i = 0; i < n; i++) dst[i] = 42.0f;
    assert_int_equal(fl_param_fetch(c->cl, &version, dst, n, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(updated, 1);
    assert_int_equal(version, 2);
    for (size_t i = 0; i < n; i++) {
        int in_1 = i >= in1.offset && i < in1.offset + in1.size;
        assert_true(dst[i] == (in_1 ? -5.0f : 42.0f));
    }
    /* *version == 0 resets the records: everything again */
    version = 0;
    assert_int_equal(fl_param_fetch(c->cl, &version, dst, n, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(version, 2);
    for (size_t i = 0; i < n; i++) {
        int in_1 = i >= in1.offset && i < in1.offset + in1.size;
        assert_true(dst[i] == (in_1 ? -5.0f : v[i]));
    }
    /* bytes are counted both ways */
    uint64_t sent = 0, recv = 0;
    fl_param_client_bytes(c->cl, &sent, &recv);
    assert_true(sent > 2 * 4 * n); /* two publishes */
    assert_true(recv > 3 * 4 * n); /* three whole fetches and one slice */
    free(w);
    free(v);
    free(dst);
    cluster_stop(c);
}

static void test_roundtrip_2_shards(void **state) {
    (void)state;
    roundtrip(2, 100001);
}

static void test_roundtrip_3_shards(void **state) {
    (void)state;
    roundtrip(3, 1000);
    roundtrip(3, 2); /* shard 2 owns nothing */
}

static void test_errors_name_the_shard(void **state) {
    (void)state;
    cluster *c = start(3, NULL);
    enum { N = 30 };
    float v[N], dst[N];
    fill(v, N, 3);
    publish_ok(c->cl, 1, v, N);
    fl_err_t err;
    fl_err_init(&err);
    /* a shard that is not in its place */
    char swapped[sizeof c->addrs];
    snprintf(swapped, sizeof swapped, "%s,%s,%s", c->addr[1], c->addr[0], c->addr[2]);
    fl_param_client_t *bad;
    assert_int_equal(fl_param_client_create(swapped, &bad, &err), FL_OK);
    for (int i = 0; i < N; i++) dst[i] = 7.0f;
    uint64_t version = 0;
    int updated = -1;
    assert_int_equal(fl_param_fetch(bad, &version, dst, N, &updated, TIMEOUT_MS, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "shard 0 (");
    assert_contains(err.msg, "expected [0, 10)");
    assert_contains(err.msg, "2 of 3 shards failed");
    assert_int_equal(version, 0);
    assert_int_equal(updated, 0);
    for (int i = 0; i < N; i++) assert_true(dst[i] == 7.0f); /* all or nothing */
    assert_int_equal(fl_param_publish(bad, 2, v, N, TIMEOUT_MS, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "publish: shard 0 (");
    assert_contains(err.msg, "shard 1 of 3 owns [10, 20)");
    fl_param_client_destroy(bad);
    /* a buffer of the wrong size */
    float big[N + 3];
    assert_int_equal(fl_param_fetch(c->cl, &version, big, N + 3, &updated, TIMEOUT_MS, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "vector of 30 parameters, the caller's buffer holds 33");
    /* a shard that is down: every shard is attempted, the error names the one */
    fl_paramserver_service_stop(c->svc[2]);
    fill(v, N, 4);
    assert_int_equal(fl_param_publish(c->cl, 2, v, N, 500, &err) != FL_OK, 1);
    assert_contains(err.msg, "publish: shard 2 (");
    assert_contains(err.msg, c->addr[2]);
    fl_param_info_t in;
    assert_int_equal(fl_param_info_shard(c->cl, 0, TIMEOUT_MS, &in, &err), FL_OK);
    assert_int_equal(in.version, 2); /* the others got it */
    assert_int_equal(fl_param_info_shard(c->cl, 1, TIMEOUT_MS, &in, &err), FL_OK);
    assert_int_equal(in.version, 2);
    assert_int_equal(fl_param_info_shard(c->cl, 3, TIMEOUT_MS, &in, &err), FL_INVALID_ARGUMENT);
    /* address lists that are no lists */
    assert_int_equal(fl_param_client_create("127.0.0.1:1,,127.0.0.1:2", &bad, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "address 1");
    assert_int_equal(fl_param_client_create("", &bad, &err), FL_INVALID_ARGUMENT);
    cluster_stop(c);
}

static void test_malformed_requests(void **state) {
    (void)state;
    cluster *c = start(2, NULL);
    enum { N = 9 };
    float v[N], dst[N];
    fill(v, N, 5);
    publish_ok(c->cl, 1, v, N);
    fl_err_t err;
    /* the wrong slice for shard 1 (owns [5, 9)) */
    assert_int_equal(raw_publish(c->ch[1], 2, 4, N, v, 4, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "got the slice [4, 8) of a 9-element vector, but shard 1 of 2 owns [5, 9)");
    assert_int_equal(raw_publish(c->ch[1], 2, 5, N, v, 3, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "owns [5, 9)");
    /* a vector of another length */
    assert_int_equal(raw_publish(c->ch[0], 2, 0, 10, v, 5, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.total: 10, but the held vector has 9");
    /* a non-finite value */
    float nan_v[4] = {1, 2, NAN, 4};
    assert_int_equal(raw_publish(c->ch[1], 2, 5, N, nan_v, 4, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "params.values[2]: NaN");
    /* a fetch of an unknown dtype */
    Fleet__FetchRequest fr = FLEET__FETCH_REQUEST__INIT;
    fr.dtype = FLEET__DTYPE__DTYPE_INT64;
    ProtobufCMessage *resp = NULL;
    assert_int_equal(fl_rpc_unary_pb(c->ch[0], "/fleet.ParamServer/Fetch", &fr.base, &fleet__fetch_response__descriptor,
                                     &resp, TIMEOUT_MS, 0, &err),
                     FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "dtype: int64");
    assert_contains(err.msg, "float32 (or unset) or bfloat16");
    /* the shards kept serving version 1 */
    uint64_t version = 0;
    int updated = 0;
    assert_int_equal(fl_param_fetch(c->cl, &version, dst, N, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(version, 1);
    assert_memory_equal(dst, v, sizeof v);
    cluster_stop(c);
}

static void test_bf16_fetch(void **state) {
    (void)state;
    fl_param_client_opts_t o = {.bf16 = 1};
    cluster *c = start(2, &o);
    fl_param_client_t *fp32;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_client_create(c->addrs, &fp32, &err), FL_OK);
    enum { N = 200001 };
    float *v = malloc(N * sizeof *v), *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    fill(v, N, 11);
    v[0] = 1.00390625f; /* a tie: rounds to even (1.0) */
    v[1] = 1.01171875f; /* a tie: rounds to even (1.015625) */
    v[2] = -0.0f;
    v[3] = 3.0e38f;
    publish_ok(fp32, 1, v, N);
    uint64_t version = 0;
    int updated = 0;
    assert_int_equal(fl_param_fetch(c->cl, &version, a, N, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(updated, 1);
    assert_int_equal(version, 1);
    for (int i = 0; i < N; i++) {
        float want = fl_bf16_to_float(fl_bf16_from_float(v[i]));
        if (memcmp(&a[i], &want, 4) != 0) fail_msg("element %d: %g, expected %g", i, (double)a[i], (double)want);
    }
    assert_true(a[0] == 1.0f);
    assert_true(a[1] == 1.015625f);
    assert_true(signbit(a[2]));
    uint64_t r16 = 0, r32 = 0;
    fl_param_client_bytes(c->cl, NULL, &r16);
    version = 0;
    assert_int_equal(fl_param_fetch(fp32, &version, b, N, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_memory_equal(b, v, N * sizeof *v);
    fl_param_client_bytes(fp32, NULL, &r32);
    double ratio = (double)r16 / (double)r32;
    if (ratio < 0.49 || ratio > 0.51)
        fail_msg("bf16 / fp32 bytes = %.4f (%llu / %llu)", ratio, (unsigned long long)r16, (unsigned long long)r32);
    /* again: the same bytes (the encoded response of a version is reused) */
    version = 0;
    assert_int_equal(fl_param_fetch(c->cl, &version, b, N, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_memory_equal(a, b, N * sizeof *a);
    fl_param_info_t in;
    assert_int_equal(fl_param_info_shard(c->cl, 1, TIMEOUT_MS, &in, &err), FL_OK);
    assert_int_equal(in.fetches_bf16, 2);
    assert_int_equal(in.fetches_with_params, 3);
    fl_param_client_destroy(fp32);
    free(v), free(a), free(b);
    cluster_stop(c);
}

/* Finite values beyond the largest bfloat16 (found by fuzz_paramserver,
 * tests/fuzz/findings-paramserver/bf16-overflow-inf): a shard holding -3.4e38 served -inf
 * to bfloat16 fetchers. They get the largest finite bfloat16 of the value's sign; values
 * that round to a finite bfloat16 are rounded as before. */
static void test_bf16_fetch_saturates(void **state) {
    (void)state;
    fl_param_client_opts_t o = {.bf16 = 1};
    cluster *c = start(2, &o);
    fl_param_client_t *fp32;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_client_create(c->addrs, &fp32, &err), FL_OK);
    enum { N = 8 };
    const float bf16_max = 0x1.fep127f; /* 0x7f7f: 3.3895314e38 */
    float v[N] = {3.4e38f, -3.4e38f, 0x1.fffffep127f, 3.0e38f, -0x1.feffffp127f, 1.5f, -0x1.ff8p127f, 0x1.ff7ffep127f};
    float want[N] = {bf16_max,  -bf16_max, bf16_max,  fl_bf16_to_float(fl_bf16_from_float(3.0e38f)),
                     -bf16_max, 1.5f,      -bf16_max, bf16_max};
    publish_ok(fp32, 1, v, N);
    float a[N];
    uint64_t version = 0;
    int updated = 0;
    assert_int_equal(fl_param_fetch(c->cl, &version, a, N, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_int_equal(version, 1);
    for (int i = 0; i < N; i++) {
        if (!isfinite(a[i])) fail_msg("element %d: %g (published %g)", i, (double)a[i], (double)v[i]);
        if (memcmp(&a[i], &want[i], 4) != 0) fail_msg("element %d: %a, expected %a", i, (double)a[i], (double)want[i]);
    }
    /* float32 fetches are exact as ever */
    version = 0;
    assert_int_equal(fl_param_fetch(fp32, &version, a, N, &updated, TIMEOUT_MS, &err), FL_OK);
    assert_memory_equal(a, v, sizeof v);
    fl_param_client_destroy(fp32);
    cluster_stop(c);
}

/* The bfloat16 response of a version is built once and shared. */
static void test_bf16_built_once(void **state) {
    (void)state;
    fl_param_store_opts_t o;
    fl_param_store_opts_init(&o);
    fl_param_store_t *s;
    assert_int_equal(fl_param_store_create(&o, &s, NULL), FL_OK);
    float v[3] = {1.5f, -2.25f, 1.00390625f};
    assert_int_equal(fl_param_store_publish(s, 1, 0, 3, v, 3, NULL), FL_OK);
    const fl_param_snapshot_t *a = fl_param_store_fetch(s, 0, NULL), *b = fl_param_store_fetch(s, 0, NULL);
    const uint8_t *ra, *rb;
    size_t la, lb;
    assert_int_equal(fl_param_snapshot_bf16(a, &ra, &la), FL_OK);
    assert_int_equal(fl_param_snapshot_bf16(b, &rb, &lb), FL_OK);
    assert_ptr_equal(ra, rb);
    assert_int_equal(la, lb);
    Fleet__FetchResponse *r = fleet__fetch_response__unpack(NULL, la, ra);
    assert_non_null(r);
    assert_int_equal(r->params->values->dtype, FLEET__DTYPE__DTYPE_BFLOAT16);
    assert_int_equal(r->params->values->data.len, 6);
    const uint8_t *d = r->params->values->data.data;
    assert_int_equal(d[0] | d[1] << 8, 0x3fc0);
    assert_int_equal(d[2] | d[3] << 8, 0xc010);
    assert_int_equal(d[4] | d[5] << 8, 0x3f80);
    fleet__fetch_response__free_unpacked(r, NULL);
    fl_param_snapshot_release(a);
    fl_param_snapshot_release(b);
    fl_param_store_destroy(s);
}

/* Threads sharing one 3-shard client (its fan-out pool) while versions are published:
 * every fetch delivers, per slice, one whole version (slices of different shards may be
 * at different versions: shards are independent), and never an older one than the
 * version it reports. */
enum { SH_N = 30001, SH_THREADS = 6, SH_VERSIONS = 40 };

typedef struct {
    fl_param_client_t *cl;
    atomic_int *done;
    int ok, fetches;
    char why[FL_ERR_MSG_MAX + 64];
} sharer;

static void *share_fetcher(void *p) {
    sharer *a = p;
    float *dst = malloc(SH_N * sizeof *dst);
    uint64_t off[3], n[3];
    for (int s = 0; s < 3; s++) fl_param_shard_range(SH_N, 3, s, &off[s], &n[s]);
    for (;;) {
        int done = atomic_load(a->done);
        uint64_t version = 0;
        int updated = 0;
        fl_err_t err;
        fl_err_init(&err);
        if (fl_param_fetch(a->cl, &version, dst, SH_N, &updated, TIMEOUT_MS, &err) != FL_OK) {
            snprintf(a->why, sizeof a->why, "fetch: %s", err.msg);
            goto out;
        }
        if (updated) {
            for (int s = 0; s < 3; s++) {
                float v = dst[off[s]];
                if (v < (float)version) {
                    snprintf(a->why, sizeof a->why, "slice %d at %g, below the reported version %llu", s, (double)v,
                             (unsigned long long)version);
                    goto out;
                }
                for (uint64_t i = 0; i < n[s]; i++)
                    if (dst[off[s] + i] != v) {
                        snprintf(a->why, sizeof a->why, "slice %d mixes versions %g and %g", s, (double)v,
                                 (double)dst[off[s] + i]);
                        goto out;
                    }
            }
            a->fetches++;
        }
        if (done) break;
    }
    a->ok = 1;
out:
    free(dst);
    return NULL;
}

static void test_shared_client_concurrent(void **state) {
    (void)state;
    cluster *c = start(3, NULL);
    float *v = malloc(SH_N * sizeof *v);
    for (int i = 0; i < SH_N; i++) v[i] = 1.0f;
    publish_ok(c->cl, 1, v, SH_N);
    fl_param_client_t *pub;
    assert_int_equal(fl_param_client_create(c->addrs, &pub, NULL), FL_OK);
    atomic_int done;
    atomic_init(&done, 0);
    sharer a[SH_THREADS];
    pthread_t th[SH_THREADS];
    for (int t = 0; t < SH_THREADS; t++) {
        a[t] = (sharer){.cl = c->cl, .done = &done};
        pthread_create(&th[t], NULL, share_fetcher, &a[t]);
    }
    for (int k = 2; k <= SH_VERSIONS; k++) {
        for (int i = 0; i < SH_N; i++) v[i] = (float)k;
        publish_ok(pub, (uint64_t)k, v, SH_N);
    }
    atomic_store(&done, 1);
    for (int t = 0; t < SH_THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < SH_THREADS; t++) {
        if (!a[t].ok) fail_msg("thread %d: %s", t, a[t].why);
        assert_true(a[t].fetches > 0);
    }
    fl_param_client_destroy(pub);
    free(v);
    cluster_stop(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_2_shards),
        cmocka_unit_test(test_roundtrip_3_shards),
        cmocka_unit_test(test_errors_name_the_shard),
        cmocka_unit_test(test_malformed_requests),
        cmocka_unit_test(test_bf16_fetch),
        cmocka_unit_test(test_bf16_fetch_saturates),
        cmocka_unit_test(test_bf16_built_once),
        cmocka_unit_test(test_shared_client_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
