/* Tests of gorila mode (learner.mode = gorila): P shard services on 127.0.0.1:0 that
 * apply pushed gradients with their own optimizer. Checked against fl_optim_step on the
 * CPU over the same vector, with deliberately stale pushers for the drop policy and the
 * staleness-scaled learning rate, threads for the wait policy (ordering and counters
 * only, never durations), 1-bit pushes against the codec, malformed pushes, and the
 * Info counters and staleness histogram. */
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
#include "common/stop.h"
#include "fleet.pb-c.h"
#include "kernels/optim.h"
#include "paramserver/client.h"
#include "paramserver/quantize.h"
#include "paramserver/server.h"

#define TIMEOUT_MS 60000

#include "paramserver_test_util.h"

/* P gorila shards for `learners` learners, running `optimizer` with its defaults, lr
 * and no momentum. */
static fl_paramserver_service_opts_t gorila_opts(int P, const char *optimizer, double lr, int learners) {
    fl_paramserver_service_opts_t o;
    fl_paramserver_service_opts_init(&o);
    o.mode = FL_PARAMSERVER_GORILA;
    o.shards = P;
    fl_optim_kind kind;
    assert_int_equal(fl_optim_kind_from_name(optimizer, &kind, NULL), FL_OK);
    o.optim = fl_optim_config_default(kind);
    o.optim.lr = (float)lr;
    o.optim.momentum = 0.0f;
    o.learners = learners;
    return o;
}

/* Two sgd learners (lr 0.1) under the wait policy with max_staleness 1: the reply to a
 * push two versions ahead of the slowest learner is held for up to timeout_s. */
static fl_paramserver_service_opts_t wait_opts(int P, double timeout_s) {
    fl_paramserver_service_opts_t o = gorila_opts(P, "sgd", 0.1, 2);
    o.max_staleness = 1;
    o.stale_policy = FL_PARAMSERVER_STALE_WAIT;
    o.wait_timeout_s = timeout_s;
    return o;
}

static fl_param_client_t *client(cluster *c, uint32_t learner, int quantize) {
    fl_param_client_opts_t o = {.learner = learner, .quantize = quantize};
    fl_param_client_t *cl;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_param_client_create_opts(c->addrs, &o, &cl, &err) != FL_OK) fail_msg("client: %s", err.msg);
    return cl;
}

static void fill(float *v, size_t n, uint32_t seed, float scale) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * scale;
    }
}

static uint64_t fetch_ok(fl_param_client_t *cl, float *dst, size_t n, int *updated) {
    uint64_t version = 0;
    int u = 0;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_param_fetch(cl, &version, dst, n, &u, TIMEOUT_MS, &err) != FL_OK) fail_msg("fetch: %s", err.msg);
    if (updated) *updated = u;
    return version;
}

/* Publishes p as version 1 through a; a and b fetch it, so their pushes are based on it. */
static void publish_v1(fl_param_client_t *a, fl_param_client_t *b, const float *p, float *dst, size_t n) {
    publish_ok(a, 1, p, n);
    fetch_ok(a, dst, n, NULL);
    fetch_ok(b, dst, n, NULL);
}

static fl_param_push_result_t push_ok(fl_param_client_t *cl, const float *g, size_t n) {
    fl_param_push_result_t r;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_param_push(cl, g, n, &r, TIMEOUT_MS, &err) != FL_OK) fail_msg("push: %s", err.msg);
    return r;
}

static fl_param_info_t info(fl_param_client_t *cl, int s) {
    fl_param_info_t in;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_param_info_shard(cl, s, TIMEOUT_MS, &in, &err) != FL_OK) fail_msg("info: %s", err.msg);
    return in;
}

/* The shards' step with plain SGD at learning rate lr. */
static void sgd_ref(float *p, const float *g, size_t n, float lr) {
    for (size_t i = 0; i < n; i++) p[i] -= lr * g[i];
}

static void assert_close_vec(const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fabsf(got[i] - want[i]) > 1e-6f * fmaxf(1.0f, fabsf(want[i])))
            fail_msg("element %zu: %.9g, expected %.9g", i, (double)got[i], (double)want[i]);
}

/* The same optimizer as the shards. */
static fl_optim_t *reference_optimizer(const fl_paramserver_service_opts_t *so, size_t n) {
    fl_optim_t *o;
    assert_int_equal(fl_optim_create(&so->optim, n, &o, NULL), FL_OK);
    return o;
}

/* Pushes apply exactly the optimizer's step (elementwise, so one optimizer over the
 * whole vector is the reference for every shard's slice), one version per push. */
static void optimizer_matches(int P, const char *optimizer, double lr, size_t n) {
    fl_paramserver_service_opts_t opts = gorila_opts(P, optimizer, lr, 1);
    if (opts.optim.kind == FL_OPTIM_SGD) opts.optim.momentum = 0.5f;
    cluster *c = cluster_start(&opts);
    fl_param_client_t *cl = client(c, 0, 0);
    float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *dst = malloc(n * sizeof *dst);
    fill(p, n, 1, 2.0f);
    fl_optim_t *ref = reference_optimizer(&opts, n);
    publish_ok(cl, 1, p, n);
    assert_int_equal(fetch_ok(cl, dst, n, NULL), 1);
    for (int k = 1; k <= 4; k++) {
        fill(g, n, 100 + (uint32_t)k, 0.5f);
        fl_param_push_result_t r = push_ok(cl, g, n);
        assert_int_equal(r.applied, P);
        assert_int_equal(r.dropped, 0);
        assert_int_equal(r.max_staleness, 0);
        assert_true(r.bytes_sent > 4 * n);
        fl_optim_step(ref, p, g);
        int updated = 0;
        uint64_t version = k;
        fl_err_t err;
        fl_err_init(&err);
        assert_int_equal(fl_param_fetch(cl, &version, dst, n, &updated, TIMEOUT_MS, &err), FL_OK);
        assert_int_equal(updated, 1);
        assert_int_equal(version, 1 + (uint64_t)k);
        assert_close_vec(dst, p, n);
    }
    for (int s = 0; s < P; s++) {
        fl_param_info_t in = info(cl, s);
        assert_true(in.gorila);
        assert_int_equal(in.version, 5);
        assert_int_equal(in.publishes, 1);
        assert_int_equal(in.pushes_applied, 4);
        assert_int_equal(in.pushes_dropped, 0);
        assert_int_equal(in.staleness_hist[0], 4);
    }
    /* later publishes are refused: pushes own the parameters now */
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_publish(cl, 9, p, n, TIMEOUT_MS, &err), FL_FAILED_PRECONDITION);
    assert_contains(err.msg, "gorila");
    fl_optim_destroy(ref);
    fl_param_client_destroy(cl);
    free(p), free(g), free(dst);
    cluster_stop(c);
}

static void test_optimizer_adam_2_shards(void **state) {
    (void)state;
    optimizer_matches(2, "adam", 1e-2, 1001);
}

static void test_optimizer_rmsprop_3_shards(void **state) {
    (void)state;
    optimizer_matches(3, "rmsprop", 1e-3, 1000);
}

static void test_optimizer_sgd_1_shard(void **state) {
    (void)state;
    optimizer_matches(1, "sgd", 0.1, 777);
}

/* max_staleness = 1, drop: a pusher three versions behind is dropped, one version
 * behind is applied; the histogram sees both. */
static void test_drop_policy(void **state) {
    (void)state;
    enum { N = 101 };
    fl_paramserver_service_opts_t opts = gorila_opts(2, "sgd", 0.1, 2);
    opts.max_staleness = 1;
    cluster *c = cluster_start(&opts);
    fl_param_client_t *a = client(c, 0, 0), *b = client(c, 1, 0);
    float p[N], g[N], dst[N];
    fill(p, N, 3, 1.0f);
    publish_v1(a, b, p, dst, N);
    for (int k = 0; k < 3; k++) {
        fill(g, N, 10 + (uint32_t)k, 1.0f);
        fl_param_push_result_t r = push_ok(b, g, N);
        assert_int_equal(r.applied, 2);
        assert_int_equal(r.max_staleness, 0);
        sgd_ref(p, g, N, 0.1f);
        uint64_t v = 2 + (uint64_t)k, want = v;
        int updated;
        v--;
        assert_int_equal(fl_param_fetch(b, &v, dst, N, &updated, TIMEOUT_MS, NULL), FL_OK);
        assert_int_equal(v, want);
    }
    /* a computed from version 1, the shards hold 4: staleness 3 > 1 */
    fill(g, N, 20, 1.0f);
    fl_param_push_result_t r = push_ok(a, g, N);
    assert_int_equal(r.applied, 0);
    assert_int_equal(r.dropped, 2);
    assert_int_equal(r.max_staleness, 3);
    assert_int_equal(fetch_ok(b, dst, N, NULL), 4);
    assert_close_vec(dst, p, N);
    /* b pushes twice without fetching: the second is one version behind, still applied */
    fill(g, N, 21, 1.0f);
    r = push_ok(b, g, N);
    assert_int_equal(r.applied, 2);
    assert_int_equal(r.max_staleness, 0);
    sgd_ref(p, g, N, 0.1f);
    fill(g, N, 22, 1.0f);
    r = push_ok(b, g, N);
    assert_int_equal(r.applied, 2);
    assert_int_equal(r.max_staleness, 1);
    sgd_ref(p, g, N, 0.1f);
    assert_int_equal(fetch_ok(a, dst, N, NULL), 6);
    assert_close_vec(dst, p, N);
    for (int s = 0; s < 2; s++) {
        fl_param_info_t in = info(a, s);
        assert_int_equal(in.pushes_applied, 5);
        assert_int_equal(in.pushes_dropped, 1);
        const uint64_t hist[8] = {4, 1, 0, 1, 0, 0, 0, 0}; /* 0 x4, 1, and 3 in the 3-4 bucket */
        for (int k = 0; k < 8; k++) assert_int_equal(in.staleness_hist[k], hist[k]);
    }
    fl_param_client_destroy(a);
    fl_param_client_destroy(b);
    cluster_stop(c);
}

/* staleness_lr: a push of staleness s steps with lr / max(1, s). */
static void test_staleness_lr(void **state) {
    (void)state;
    enum { N = 64 };
    fl_paramserver_service_opts_t opts = gorila_opts(1, "sgd", 0.1, 2);
    opts.staleness_lr = 1;
    cluster *c = cluster_start(&opts);
    fl_param_client_t *a = client(c, 0, 0), *b = client(c, 1, 0);
    float p[N], g[N], dst[N];
    fill(p, N, 5, 1.0f);
    publish_v1(a, b, p, dst, N);
    fill(g, N, 30, 1.0f);
    assert_int_equal(push_ok(b, g, N).max_staleness, 0); /* lr 0.1 */
    sgd_ref(p, g, N, 0.1f);
    fill(g, N, 31, 1.0f);
    assert_int_equal(push_ok(b, g, N).max_staleness, 1); /* lr 0.1 / 1 */
    sgd_ref(p, g, N, 0.1f);
    fill(g, N, 32, 1.0f);
    assert_int_equal(push_ok(a, g, N).max_staleness, 2); /* lr 0.1 / 2 */
    sgd_ref(p, g, N, 0.1f / 2.0f);
    fill(g, N, 33, 1.0f);
    assert_int_equal(push_ok(a, g, N).max_staleness, 3); /* lr 0.1 / 3 */
    sgd_ref(p, g, N, (float)(0.1 / 3.0));
    assert_int_equal(fetch_ok(a, dst, N, NULL), 5);
    assert_close_vec(dst, p, N);
    fl_param_client_destroy(a);
    fl_param_client_destroy(b);
    cluster_stop(c);
}

typedef struct {
    fl_param_client_t *cl;
    const float *g;
    size_t n;
    fl_param_push_result_t r;
    fl_status st;
    atomic_int done;
} pusher;

static void *push_thread(void *p) {
    pusher *x = p;
    x->st = fl_param_push(x->cl, x->g, x->n, &x->r, TIMEOUT_MS, NULL);
    atomic_store(&x->done, 1);
    return NULL;
}

/* Starts a thread that pushes g[0, n) through cl into *x. */
static void start_pusher(pusher *x, pthread_t *th, fl_param_client_t *cl, const float *g, size_t n) {
    memset(x, 0, sizeof *x);
    x->cl = cl;
    x->g = g;
    x->n = n;
    atomic_init(&x->done, 0);
    pthread_create(th, NULL, push_thread, x);
}

/* Publishes p (filled here) as version 1 through fast, then pushes g (filled here) so
 * that the clocks of fast and slow are (2, 1): under wait_opts the next push of fast is
 * held. */
static void reach_the_bound(fl_param_client_t *fast, fl_param_client_t *slow, float *p, float *g, size_t n) {
    fill(p, n, 9, 1.0f);
    fill(g, n, 10, 0.1f);
    publish_ok(fast, 1, p, n);
    push_ok(slow, g, n);
    push_ok(fast, g, n);
    assert_int_equal(push_ok(fast, g, n).waited, 0); /* 2, 1 */
}

/* Waits (polling, without any bound on time other than the test's) until every shard
 * reports `waits` held replies. */
static void await_waits(fl_param_client_t *cl, int P, uint64_t waits) {
    for (int tries = 0; tries < 6000; tries++) {
        int ok = 1;
        for (int s = 0; s < P; s++) ok &= info(cl, s).waits >= waits;
        if (ok) return;
        usleep(10000);
    }
    fail_msg("the shards never held a reply");
}

/* wait: the fast learner's reply is held until the slow learner pushes. */
static void test_wait_policy(void **state) {
    (void)state;
    enum { N = 50 };
    fl_paramserver_service_opts_t opts = wait_opts(2, 120);
    cluster *c = cluster_start(&opts);
    fl_param_client_t *fast = client(c, 0, 0), *slow = client(c, 1, 0), *obs = client(c, 0, 0);
    float p[N], g[N], dst[N];
    fill(p, N, 7, 1.0f);
    fill(g, N, 8, 0.1f);
    publish_ok(fast, 1, p, N);
    fl_param_push_result_t r = push_ok(fast, g, N); /* clocks 1, 0: the slow one has not started */
    assert_int_equal(r.waited, 0);
    r = push_ok(slow, g, N); /* 1, 1 */
    assert_int_equal(r.waited, 0);
    r = push_ok(fast, g, N); /* 2, 1: within the bound */
    assert_int_equal(r.waited, 0);
    assert_int_equal(r.applied, 2);
    pusher x;
    pthread_t th;
    start_pusher(&x, &th, fast, g, N); /* 3, 1: held */
    await_waits(obs, 2, 1);
    /* the push is applied, its reply held */
    assert_int_equal(atomic_load(&x.done), 0);
    assert_int_equal(info(obs, 0).pushes_applied, 4);
    assert_int_equal(fetch_ok(obs, dst, N, NULL), 5);
    assert_int_equal(atomic_load(&x.done), 0);
    r = push_ok(slow, g, N); /* 3, 2: releases the fast one */
    assert_int_equal(r.waited, 0);
    pthread_join(th, NULL);
    assert_int_equal(x.st, FL_OK);
    assert_int_equal(x.r.applied, 2);
    assert_int_equal(x.r.waited, 2);
    assert_int_equal(x.r.wait_timed_out, 0);
    for (int s = 0; s < 2; s++) {
        fl_param_info_t in = info(obs, s);
        assert_int_equal(in.waits, 1);
        assert_int_equal(in.wait_timeouts, 0);
        assert_int_equal(in.pushes_applied, 5);
        assert_int_equal(in.pushes_dropped, 0);
        assert_int_equal(in.version, 6);
    }
    fl_param_client_destroy(fast);
    fl_param_client_destroy(slow);
    fl_param_client_destroy(obs);
    cluster_stop(c);
}

/* wait: a slow learner that never comes back; the reply goes out at the timeout. */
static void test_wait_timeout(void **state) {
    (void)state;
    enum { N = 10 };
    fl_paramserver_service_opts_t opts = wait_opts(1, 0.2);
    cluster *c = cluster_start(&opts);
    fl_param_client_t *fast = client(c, 0, 0), *slow = client(c, 1, 0);
    float p[N], g[N];
    reach_the_bound(fast, slow, p, g, N);
    fl_param_push_result_t r = push_ok(fast, g, N); /* 3, 1: held until the timeout */
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.waited, 1);
    assert_int_equal(r.wait_timed_out, 1);
    fl_param_info_t in = info(slow, 0);
    assert_int_equal(in.waits, 1);
    assert_int_equal(in.wait_timeouts, 1);
    assert_int_equal(in.pushes_applied, 4);
    assert_int_equal(in.version, 5);
    fl_param_client_destroy(fast);
    fl_param_client_destroy(slow);
    cluster_stop(c);
}

/* One shard under wait_opts(1, timeout_s), the fast learner's push held; release(c) is
 * called while it is held, then the pusher joined: its outcome in *x and, when `after`
 * is not NULL, the shard's counters then. */
static void held_push(double timeout_s, void (*release)(cluster *), pusher *x, fl_param_info_t *after) {
    enum { N = 10 };
    fl_paramserver_service_opts_t opts = wait_opts(1, timeout_s);
    cluster *c = cluster_start(&opts);
    fl_param_client_t *fast = client(c, 0, 0), *slow = client(c, 1, 0);
    float p[N], g[N];
    reach_the_bound(fast, slow, p, g, N);
    pthread_t th;
    start_pusher(x, &th, fast, g, N);
    await_waits(slow, 1, 1);
    release(c);
    pthread_join(th, NULL);
    if (after) *after = info(slow, 0);
    fl_param_client_destroy(fast);
    fl_param_client_destroy(slow);
    cluster_stop(c);
}

static void stop_shard(cluster *c) {
    fl_paramserver_service_stop(c->svc[0]);
}

static void stop_process(cluster *c) {
    (void)c;
    fl_stop_request();
}

/* wait: stopping the shard releases a held reply. */
static void test_wait_released_by_stop(void **state) {
    (void)state;
    pusher x;
    held_push(600, stop_shard, &x, NULL);
    assert_int_equal(x.st, FL_OK);
    assert_int_equal(x.r.wait_timed_out, 1);
}

/* wait: a learner asked to stop does not sit out the hold (its slow peer may have gone
 * for good): the held push ends CANCELLED. The stop request is process-wide and
 * permanent, so this test runs last. */
static void test_held_push_cancelled_by_stop(void **state) {
    (void)state;
    pusher x;
    fl_param_info_t after;
    held_push(30, stop_process, &x, &after);
    /* without the cancel: FL_OK with wait_timed_out after the 30 s */
    assert_int_equal(x.st, FL_CANCELLED);
    assert_int_equal(after.wait_timeouts, 0);
}

static fl_status raw_push(fl_rpc_channel_t *ch, uint32_t learner, uint64_t based_on, uint64_t offset, uint64_t total,
                          const float *g, int64_t n, size_t bytes, const Fleet__QuantizedGradients *q, fl_err_t *err) {
    Fleet__Tensor t = FLEET__TENSOR__INIT;
    t.dtype = FLEET__DTYPE__DTYPE_FLOAT32;
    t.n_shape = 1;
    t.shape = &n;
    t.data.len = bytes;
    t.data.data = (uint8_t *)(uintptr_t)g;
    Fleet__ParamSlice ps = FLEET__PARAM_SLICE__INIT;
    ps.offset = offset;
    ps.total = total;
    ps.values = &t;
    Fleet__PushGradientsRequest req = FLEET__PUSH_GRADIENTS_REQUEST__INIT;
    req.based_on_version = based_on;
    req.learner = learner;
    if (g) req.grads = &ps;
    req.quantized = (Fleet__QuantizedGradients *)(uintptr_t)q;
    ProtobufCMessage *resp = NULL;
    fl_err_init(err);
    fl_status st =
        fl_rpc_unary_pb(ch, "/fleet.ParamServer/PushGradients", &req.base, &fleet__push_gradients_response__descriptor,
                        &resp, TIMEOUT_MS, FL_RPC_WAIT_FOR_READY, err);
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
    return st;
}

static void test_malformed_pushes(void **state) {
    (void)state;
    enum { N = 10 };
    fl_paramserver_service_opts_t opts = gorila_opts(2, "sgd", 0.1, 2);
    cluster *c = cluster_start(&opts);
    fl_param_client_t *cl = client(c, 0, 0);
    float p[N], g[N], dst[N];
    fill(p, N, 11, 1.0f);
    fill(g, N, 12, 1.0f);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_push(cl, g, N, NULL, TIMEOUT_MS, &err), FL_FAILED_PRECONDITION);
    assert_contains(err.msg, "no parameters yet");
    publish_ok(cl, 1, p, N);
    fetch_ok(cl, dst, N, NULL);
    /* shard 0 owns [0, 5) */
    float bad[5] = {1, 2, 3, NAN, 5};
    assert_int_equal(raw_push(c->ch[0], 0, 1, 0, N, bad, 5, 20, NULL, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "grads.values[3]: NaN");
    assert_contains(err.msg, "nothing was applied");
    bad[3] = -INFINITY;
    assert_int_equal(raw_push(c->ch[0], 0, 1, 0, N, bad, 5, 20, NULL, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "grads.values[3]: -inf");
    assert_int_equal(raw_push(c->ch[0], 0, 1, 5, N, g, 5, 20, NULL, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "got the slice [5, 10) of a 10-element vector, but shard 0 of 2 owns [0, 5)");
    assert_int_equal(raw_push(c->ch[0], 0, 1, 0, N, g, 5, 16, NULL, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "grads.values.data: 16 bytes, expected 4 * 5");
    assert_int_equal(raw_push(c->ch[0], 0, 1, 0, N + 2, g, 6, 24, NULL, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "grads.values: 6 elements, but the held slice has 5");
    assert_int_equal(raw_push(c->ch[0], 5, 1, 0, N, g, 5, 20, NULL, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "learner: 5 is out of range [0, 2)");
    assert_int_equal(raw_push(c->ch[0], 0, 9, 0, N, g, 5, 20, NULL, &err), FL_FAILED_PRECONDITION);
    assert_contains(err.msg, "based_on_version: 9 is newer than the held version 1");
    assert_int_equal(raw_push(c->ch[0], 0, 1, 0, N, NULL, 0, 0, NULL, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "grads: missing");
    uint8_t bits[2] = {0x1f, 0};
    Fleet__QuantizedGradients q = FLEET__QUANTIZED_GRADIENTS__INIT;
    q.offset = 0, q.total = N, q.count = 5, q.scale_pos = 1, q.scale_neg = 1;
    q.sign_bits.data = bits;
    q.sign_bits.len = 2;
    assert_int_equal(raw_push(c->ch[0], 0, 1, 0, 0, NULL, 0, 0, &q, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "quantized.sign_bits: 2 bytes, expected ceil(count / 8) = 1");
    q.sign_bits.len = 1;
    q.scale_neg = NAN;
    assert_int_equal(raw_push(c->ch[0], 0, 1, 0, 0, NULL, 0, 0, &q, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "quantized.scale_pos/scale_neg");
    q.scale_neg = 1;
    assert_int_equal(raw_push(c->ch[0], 0, 1, 0, N, g, 5, 20, &q, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "both set");
    /* the client checks before sending anything */
    uint64_t sent0 = 0, sent1 = 0;
    fl_param_client_bytes(cl, &sent0, NULL);
    g[7] = NAN;
    assert_int_equal(fl_param_push(cl, g, N, NULL, TIMEOUT_MS, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "grads[7] is NaN");
    fl_param_client_bytes(cl, &sent1, NULL);
    assert_int_equal(sent0, sent1);
    g[7] = 0.5f;
    /* nothing was applied, and the shards keep serving */
    for (int s = 0; s < 2; s++) {
        fl_param_info_t in = info(cl, s);
        assert_int_equal(in.version, 1);
        assert_int_equal(in.pushes_applied, 0);
    }
    assert_int_equal(push_ok(cl, g, N).applied, 2);
    assert_int_equal(fetch_ok(cl, dst, N, NULL), 2);
    for (int i = 0; i < N; i++) assert_float_equal(dst[i], p[i] - 0.1f * g[i], 1e-6);
    fl_param_client_destroy(cl);
    cluster_stop(c);
}

/* 1-bit pushes: the shards apply exactly the decoded gradient of the codec with the
 * client's error feedback, at about 1/32 of the bytes. */
static void test_quantized_push(void **state) {
    (void)state;
    enum { N = 20003, P = 2 };
    fl_paramserver_service_opts_t opts = gorila_opts(P, "sgd", 1.0, 2);
    cluster *c = cluster_start(&opts);
    fl_param_client_t *q = client(c, 0, 1), *f = client(c, 1, 0);
    float *p = malloc(N * sizeof *p), *g = malloc(N * sizeof *g), *dst = malloc(N * sizeof *dst);
    float *resid = calloc(N, sizeof *resid), *d = malloc(N * sizeof *d);
    uint8_t bits[N / 8 + 1];
    fill(p, N, 13, 1.0f);
    publish_ok(q, 1, p, N);
    fetch_ok(q, dst, N, NULL);
    uint64_t qbytes = 0;
    for (int k = 0; k < 3; k++) {
        fill(g, N, 40 + (uint32_t)k, 0.2f);
        fl_param_push_result_t r = push_ok(q, g, N);
        assert_int_equal(r.applied, P);
        qbytes += r.bytes_sent;
        for (int s = 0; s < P; s++) {
            uint64_t off, n;
            fl_param_shard_range(N, P, s, &off, &n);
            float sp, sn;
            fl_q1_encode(g + off, resid + off, n, bits, &sp, &sn);
            fl_q1_decode(bits, n, sp, sn, d + off);
        }
        for (int i = 0; i < N; i++) p[i] -= d[i];
        assert_int_equal(fetch_ok(q, dst, N, NULL), 2 + (uint64_t)k);
        assert_close_vec(dst, p, N);
    }
    fl_param_push_result_t r = push_ok(f, g, N);
    double ratio = (double)qbytes / 3.0 / (double)r.bytes_sent;
    if (ratio > 1.0 / 25 || ratio < 1.0 / 40) fail_msg("1-bit / float32 push bytes = %.4f", ratio);
    /* the shards counted what the clients sent */
    uint64_t on_servers = 0, fsent = 0, qsent = 0;
    for (int s = 0; s < P; s++) on_servers += info(f, s).push_bytes;
    assert_int_equal(on_servers, qbytes + r.bytes_sent);
    fl_param_client_bytes(f, &fsent, NULL);
    fl_param_client_bytes(q, &qsent, NULL);
    assert_true(fsent >= r.bytes_sent && qsent >= qbytes);
    fl_param_client_destroy(q);
    fl_param_client_destroy(f);
    free(p), free(g), free(dst), free(resid), free(d);
    cluster_stop(c);
}

/* Finite gradients whose optimizer step overflows float32 (found by fuzz_paramserver,
 * tests/fuzz/findings-paramserver/rmsprop-overflow-nan): RMSProp's g * g of a 1-bit push
 * with scale 2^126 made the slice NaN, and every later fetch served NaN. Such a push is
 * refused (INVALID_ARGUMENT, nothing applied, nor counted) for every optimizer and both
 * forms, the parameters and optimizer state stay as they were, and the shards keep
 * applying ordinary pushes exactly as before. */
static void overflow_refused(const char *optimizer, double lr, float big, const char *what) {
    enum { N = 8, P = 2 };
    fl_paramserver_service_opts_t opts = gorila_opts(P, optimizer, lr, 1);
    cluster *c = cluster_start(&opts);
    fl_param_client_t *cl = client(c, 0, 0);
    float p[N], g[N], dst[N];
    fill(p, N, 21, 1.0f);
    fill(g, N, 22, 1.0f);
    publish_ok(cl, 1, p, N);
    fetch_ok(cl, dst, N, NULL);
    fl_optim_t *ref = reference_optimizer(&opts, N);
    float ref_p[N];
    memcpy(ref_p, p, sizeof p);
    /* one ordinary push first, so that the optimizer has state to keep */
    assert_int_equal(push_ok(cl, g, N).applied, P);
    fl_optim_step(ref, ref_p, g);
    fl_err_t err;
    fl_err_init(&err);
    /* shard 1 owns [4, 8): a float32 push with one huge (finite) gradient */
    float huge[4] = {0.5f, -big, 0.25f, 1.0f};
    assert_int_equal(raw_push(c->ch[1], 0, 2, 4, N, huge, 4, 16, NULL, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "grads: this push would turn");
    assert_contains(err.msg, what);
    assert_contains(err.msg, "nothing was applied");
    /* the same as a 1-bit push: every element decodes to +-big */
    uint8_t bits[1] = {0x05};
    Fleet__QuantizedGradients q = FLEET__QUANTIZED_GRADIENTS__INIT;
    q.offset = 4, q.total = N, q.count = 4, q.scale_pos = big, q.scale_neg = big;
    q.sign_bits.data = bits;
    q.sign_bits.len = 1;
    assert_int_equal(raw_push(c->ch[1], 0, 2, 0, 0, NULL, 0, 0, &q, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "nothing was applied");
    /* nothing applied or counted; the values are those of version 2 */
    fl_param_info_t in = info(cl, 1);
    assert_int_equal(in.version, 2);
    assert_int_equal(in.pushes_applied, 1);
    assert_int_equal(in.pushes_dropped, 0);
    uint64_t hist = 0;
    for (int b = 0; b < 8; b++) hist += in.staleness_hist[b];
    assert_int_equal(hist, 1);
    assert_int_equal(fetch_ok(cl, dst, N, NULL), 2);
    assert_close_vec(dst, ref_p, N);
    /* and ordinary pushes go on from the state before the refused ones */
    for (int k = 0; k < 2; k++) {
        fill(g, N, 30 + (uint32_t)k, 1.0f);
        assert_int_equal(push_ok(cl, g, N).applied, P);
        fl_optim_step(ref, ref_p, g);
    }
    assert_int_equal(fetch_ok(cl, dst, N, NULL), 4);
    assert_close_vec(dst, ref_p, N);
    for (int i = 0; i < N; i++) assert_true(isfinite(dst[i]));
    fl_optim_destroy(ref);
    fl_param_client_destroy(cl);
    cluster_stop(c);
}

static void test_overflowing_push_refused(void **state) {
    (void)state;
    /* g * g overflows in the squared averages (state, then NaN parameters) */
    overflow_refused("rmsprop", 0.01, 0x1p126f, "NaN");
    overflow_refused("adam", 0.001, 0x1p126f, "exp_avg_sq");
    /* a large step overflows the parameter itself */
    overflow_refused("sgd", 10.0, 3.0e38f, "inf");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_optimizer_adam_2_shards),
        cmocka_unit_test(test_optimizer_rmsprop_3_shards),
        cmocka_unit_test(test_optimizer_sgd_1_shard),
        cmocka_unit_test(test_drop_policy),
        cmocka_unit_test(test_staleness_lr),
        cmocka_unit_test(test_wait_policy),
        cmocka_unit_test(test_wait_timeout),
        cmocka_unit_test(test_wait_released_by_stop),
        cmocka_unit_test(test_malformed_pushes),
        cmocka_unit_test(test_quantized_push),
        cmocka_unit_test(test_overflowing_push_refused),
        cmocka_unit_test(test_held_push_cancelled_by_stop), /* last: it requests the process's stop */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
