/* test_kernels_qnet: the spec-built Q-network of kernels/qnet.h.
 *
 * The network's forward is compared with an independent double-precision reference that
 * reads the parameters through the named views (so names, shapes and layout are checked
 * too), and its backward with central differences of that reference in double
 * (L = sum(q * R) for a random R), for parameters and inputs. Parameters and inputs are
 * random and fresh each run; the seed is printed on failure and FLEET_TEST_SEED=<seed>
 * replays a run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/rng.h"
#include "kernels/loss.h"
#include "kernels/optim.h"
#include "kernels/qnet.h"

#include "seed_util.h"

static void fill_uniform(fl_rng_t *r, float *a, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) a[i] = (float)fl_rng_uniform(r, lo, hi);
}

/* ---- double-precision reference ---------------------------------------------------- */

enum { R_DENSE, R_RELU, R_DUELING };
enum { MAX_W = 32, MAX_B = 8 };

typedef struct ref_layer {
    int kind, units;
    const char *prefix; /* view name prefix */
} ref_layer_t;

typedef struct ref_net {
    const char *spec;
    int num_layers;
    ref_layer_t l[8];
} ref_net_t;

/* Offset of a view that must exist with the given shape. */
static size_t view_at(const fl_qnet_t *n, const char *prefix, const char *suffix, int rank, int64_t d0, int64_t d1) {
    char name[FL_PARAM_NAME_MAX];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    const fl_param_view_t *v = fl_qnet_find_view(n, name);
    if (!v) {
        print_error("view %s missing\n", name);
        fail();
    }
    assert_int_equal(v->rank, rank);
    assert_int_equal(v->shape[0], d0);
    if (rank == 2) assert_int_equal(v->shape[1], d1);
    assert_int_equal(v->numel, (size_t)(d0 * (rank == 2 ? d1 : 1)));
    return v->offset;
}

static void ref_forward(const ref_net_t *rn, const fl_qnet_t *n, const double *P, const double *obs, int B, double *q) {
    static double buf[2][MAX_B * MAX_W];
    const int A = fl_qnet_num_actions(n);
    int width = fl_qnet_obs_dim(n);
    double *cur = buf[0], *nxt = buf[1];
    memcpy(cur, obs, sizeof(double) * B * width);
    for (int li = 0; li < rn->num_layers; li++) {
        const ref_layer_t *L = &rn->l[li];
        if (L->kind == R_DENSE) {
            const double *W = P + view_at(n, L->prefix, "weight", 2, L->units, width);
            const double *bias = P + view_at(n, L->prefix, "bias", 1, L->units, 1);
            for (int b = 0; b < B; b++)
                for (int o = 0; o < L->units; o++) {
                    double s = bias[o];
                    for (int i = 0; i < width; i++) s += W[o * width + i] * cur[b * width + i];
                    nxt[b * L->units + o] = s;
                }
            width = L->units;
        } else if (L->kind == R_RELU) {
            for (int i = 0; i < B * width; i++) nxt[i] = cur[i] > 0 ? cur[i] : 0.0;
        } else {
            const double *wv = P + view_at(n, "head", "value.weight", 2, 1, width);
            const double *wa = P + view_at(n, "head", "advantage.weight", 2, A, width);
            const double *bv = P + view_at(n, "head", "value.bias", 1, 1, 1);
            const double *ba = P + view_at(n, "head", "advantage.bias", 1, A, 1);
            for (int b = 0; b < B; b++) {
                double v = bv[0], adv[MAX_W], mean = 0.0;
                for (int i = 0; i < width; i++) v += wv[i] * cur[b * width + i];
                for (int a = 0; a < A; a++) {
                    adv[a] = ba[a];
                    for (int i = 0; i < width; i++) adv[a] += wa[a * width + i] * cur[b * width + i];
                    mean += adv[a] / A;
                }
                for (int a = 0; a < A; a++) nxt[b * A + a] = v + adv[a] - mean;
            }
            width = A;
        }
        double *t = cur;
        cur = nxt, nxt = t;
    }
    assert_int_equal(width, A);
    memcpy(q, cur, sizeof(double) * B * A);
}

static double ref_loss(const ref_net_t *rn, const fl_qnet_t *n, const double *P, const double *obs, int B,
                       const float *R) {
    double q[MAX_B * MAX_W], s = 0.0;
    ref_forward(rn, n, P, obs, B, q);
    for (int i = 0; i < B * fl_qnet_num_actions(n); i++) s += q[i] * R[i];
    return s;
}

static const ref_net_t REF_NETS[] = {
    {"dense(16) relu dense(12) relu dueling",
     5,
     {{R_DENSE, 16, "0.dense"}, {R_RELU, 0, NULL}, {R_DENSE, 12, "2.dense"}, {R_RELU, 0, NULL}, {R_DUELING, 0, NULL}}},
    {"dense(10) relu", 3, {{R_DENSE, 10, "0.dense"}, {R_RELU, 0, NULL}, {R_DENSE, 3, "head.q"}}},
    {"", 1, {{R_DENSE, 3, "head.q"}}},
    {"  relu\tdense(7) relu relu   dueling ",
     5,
     {{R_RELU, 0, NULL}, {R_DENSE, 7, "1.dense"}, {R_RELU, 0, NULL}, {R_RELU, 0, NULL}, {R_DUELING, 0, NULL}}},
};

/* Forward against the reference, then backward (parameters and inputs) against central
 * differences of the reference in double. */
static void test_qnet_gradients(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 21);
    const int obs_dim = 5, A = 3;
    for (size_t t = 0; t < sizeof REF_NETS / sizeof REF_NETS[0]; t++) {
        const ref_net_t *rn = &REF_NETS[t];
        fl_qnet_t *n = NULL;
        fl_err_t err = {0};
        assert_int_equal(fl_qnet_create(rn->spec, obs_dim, A, MAX_B, &n, &err), FL_OK);
        fl_qnet_init(n, &r);
        const int B = 2 + (int)fl_rng_below(&r, MAX_B - 1);
        const size_t np = fl_qnet_num_params(n);
        float obs[MAX_B * 5], q[MAX_B * 3], R[MAX_B * 3], dobs[MAX_B * 5];
        double obs_d[MAX_B * 5], q_ref[MAX_B * 3];
        fill_uniform(&r, obs, (size_t)B * obs_dim, -2, 2);
        fill_uniform(&r, R, (size_t)B * A, -1, 1);
        for (int i = 0; i < B * obs_dim; i++) obs_d[i] = obs[i];
        double *P = malloc(sizeof(double) * np);
        const float *p = fl_qnet_params(n);
        for (size_t i = 0; i < np; i++) P[i] = p[i];

        assert_int_equal(fl_qnet_forward(n, obs, B, q), FL_OK);
        ref_forward(rn, n, P, obs_d, B, q_ref);
        for (int i = 0; i < B * A; i++) CHECK_CLOSE(q[i], q_ref[i], 1e-5, 1e-5, "spec \"%s\" q[%d]", rn->spec, i);

        float *g = fl_qnet_grads(n);
        for (size_t i = 0; i < np; i++) g[i] = NAN; /* backward overwrites everything */
        assert_int_equal(fl_qnet_backward_input(n, R, B, dobs), FL_OK);

        /* gradient scale for the absolute part of the tolerance */
        double gmax = 0.0;
        for (size_t i = 0; i < np; i++) gmax = fmax(gmax, fabs(g[i]));
        const double h = 1e-6;
        for (size_t i = 0; i < np; i++) {
            const double old = P[i];
            P[i] = old + h;
            const double lp = ref_loss(rn, n, P, obs_d, B, R);
            P[i] = old - h;
            const double lm = ref_loss(rn, n, P, obs_d, B, R);
            P[i] = old;
            CHECK_CLOSE(g[i], (lp - lm) / (2 * h), 1e-5 * (1 + gmax), 1e-3, "spec \"%s\" dparam[%zu]", rn->spec, i);
        }
        for (int i = 0; i < B * obs_dim; i++) {
            const double old = obs_d[i];
            obs_d[i] = old + h;
            const double lp = ref_loss(rn, n, P, obs_d, B, R);
            obs_d[i] = old - h;
            const double lm = ref_loss(rn, n, P, obs_d, B, R);
            obs_d[i] = old;
            CHECK_CLOSE(dobs[i], (lp - lm) / (2 * h), 1e-5 * (1 + gmax), 1e-3, "spec \"%s\" dobs[%d]", rn->spec, i);
        }

        /* plain backward gives the same parameter gradients */
        float *g1 = malloc(sizeof(float) * np);
        memcpy(g1, g, sizeof(float) * np);
        assert_int_equal(fl_qnet_backward(n, R, B), FL_OK);
        assert_memory_equal(g1, fl_qnet_grads(n), sizeof(float) * np);

        /* a batch of one (the actors' path) agrees with the rows of a batch */
        for (int b = 0; b < B; b++) {
            float q1[3];
            assert_int_equal(fl_qnet_forward(n, obs + b * obs_dim, 1, q1), FL_OK);
            for (int a = 0; a < A; a++) CHECK_CLOSE(q1[a], q[b * A + a], 1e-6, 1e-5, "B=1 row %d q[%d]", b, a);
        }
        free(g1);
        free(P);
        fl_qnet_destroy(n);
    }
}

/* ---- layout, names, init ----------------------------------------------------------- */

static void test_views_and_layout(void **state) {
    fl_qnet_t *n = NULL;
    fl_err_t err = {0};
    assert_int_equal(fl_qnet_create("dense(256) relu dense(256) relu dueling", 4, 2, 64, &n, &err), FL_OK);
    static const struct {
        const char *name;
        int rank;
        int64_t d0, d1;
    } want[] = {
        {"0.dense.weight", 2, 256, 4}, {"0.dense.bias", 1, 256, 1},      {"2.dense.weight", 2, 256, 256},
        {"2.dense.bias", 1, 256, 1},   {"head.value.weight", 2, 1, 256}, {"head.advantage.weight", 2, 2, 256},
        {"head.value.bias", 1, 1, 1},  {"head.advantage.bias", 1, 2, 1},
    };
    assert_int_equal(fl_qnet_num_views(n), 8);
    size_t off = 0;
    for (int i = 0; i < 8; i++) {
        const fl_param_view_t *v = fl_qnet_view(n, i);
        assert_string_equal(v->name, want[i].name);
        assert_int_equal(v->rank, want[i].rank);
        assert_int_equal(v->shape[0], want[i].d0);
        assert_int_equal(v->shape[1], want[i].d1);
        assert_int_equal(v->offset, off); /* contiguous, in order */
        off += v->numel;
    }
    assert_null(fl_qnet_view(n, 8));
    assert_null(fl_qnet_view(n, -1));
    assert_int_equal(off, fl_qnet_num_params(n));
    assert_int_equal(fl_qnet_num_params(n), 4 * 256 + 256 + 256 * 256 + 256 + 3 * 256 + 3);
    assert_int_equal(fl_qnet_obs_dim(n), 4);
    assert_int_equal(fl_qnet_num_actions(n), 2);
    assert_int_equal(fl_qnet_max_batch(n), 64);
    assert_string_equal(fl_qnet_spec(n), "dense(256) relu dense(256) relu dueling");
    assert_ptr_equal(fl_qnet_find_view(n, "2.dense.bias"), fl_qnet_view(n, 3));
    assert_null(fl_qnet_find_view(n, "2.dense"));
    fl_qnet_destroy(n);

    /* a non-dueling spec gets a dense(num_actions) head */
    assert_int_equal(fl_qnet_create("dense(8)", 3, 5, 1, &n, &err), FL_OK);
    assert_int_equal(fl_qnet_num_views(n), 4);
    assert_string_equal(fl_qnet_view(n, 2)->name, "head.q.weight");
    assert_int_equal(fl_qnet_view(n, 2)->shape[0], 5);
    assert_int_equal(fl_qnet_view(n, 2)->shape[1], 8);
    assert_string_equal(fl_qnet_view(n, 3)->name, "head.q.bias");
    fl_qnet_destroy(n);
    fl_qnet_destroy(NULL);
}

static void test_init(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 22);
    fl_qnet_t *a = NULL, *b = NULL;
    assert_int_equal(fl_qnet_create("dense(64) relu dueling", 9, 4, 4, &a, NULL), FL_OK);
    assert_int_equal(fl_qnet_create("dense(64) relu dueling", 9, 4, 4, &b, NULL), FL_OK);
    const uint64_t s = fl_rng_u64(&r);
    fl_rng_t ra, rb;
    fl_rng_init(&ra, s);
    fl_rng_init(&rb, s);
    fl_qnet_init(a, &ra);
    fl_qnet_init(b, &rb);
    const size_t np = fl_qnet_num_params(a);
    assert_memory_equal(fl_qnet_params(a), fl_qnet_params(b), np * sizeof(float)); /* same seed, same draw */
    for (int i = 0; i < fl_qnet_num_views(a); i++) {
        const fl_param_view_t *v = fl_qnet_view(a, i);
        const double in = strncmp(v->name, "0.", 2) == 0 ? 9 : 64; /* fan-in of the layer */
        const double bound = 1.0 / sqrt(in);
        double lo = 1e9, hi = -1e9;
        for (size_t k = 0; k < v->numel; k++) {
            const double x = fl_qnet_params(a)[v->offset + k];
            lo = fmin(lo, x), hi = fmax(hi, x);
        }
        if (!(lo >= -bound && hi <= bound)) {
            SEED_NOTE();
            print_error("%s outside U(-%g, %g): [%g, %g]\n", v->name, bound, bound, lo, hi);
            fail();
        }
        if (v->numel >= 64 && !(hi - lo > bound)) { /* spread over the range, P(fail) < 1e-18 */
            SEED_NOTE();
            print_error("%s not spread over U(-%g, %g): [%g, %g]\n", v->name, bound, bound, lo, hi);
            fail();
        }
    }
    fl_rng_init(&rb, s + 1);
    fl_qnet_init(b, &rb);
    assert_true(memcmp(fl_qnet_params(a), fl_qnet_params(b), np * sizeof(float)) != 0);
    fl_qnet_destroy(a);
    fl_qnet_destroy(b);
}

/* ---- errors ------------------------------------------------------------------------ */

static void expect_spec_error(const char *spec, const char *needle1, const char *needle2) {
    fl_qnet_t *n = (fl_qnet_t *)(uintptr_t)1; /* must come back NULL */
    fl_err_t err = {0};
    assert_int_equal(fl_qnet_create(spec, 4, 2, 8, &n, &err), FL_INVALID_ARGUMENT);
    assert_null(n);
    if (!strstr(err.msg, needle1) || (needle2 && !strstr(err.msg, needle2))) {
        print_error("spec \"%s\": message \"%s\" lacks \"%s\" / \"%s\"\n", spec, err.msg, needle1,
                    needle2 ? needle2 : "");
        fail();
    }
}

static void test_spec_errors(void **state) {
    expect_spec_error("dense(256) rleu dueling", "token 2 \"rleu\"",
                      "expected dense(N), relu, dueling, conv(C,K,S[,P]) or flatten");
    expect_spec_error("dense(0)", "token 1 \"dense(0)\"", "expected dense(N) with N an integer in 1..65536");
    expect_spec_error("dense(65537)", "token 1 \"dense(65537)\"", "1..65536");
    expect_spec_error("relu dense(abc)", "token 2 \"dense(abc)\"", "expected dense(N)");
    expect_spec_error("dense(-3)", "token 1 \"dense(-3)\"", "expected dense(N)");
    expect_spec_error("dense(12", "token 1 \"dense(12\"", "expected dense(N)");
    expect_spec_error("dense()", "token 1 \"dense()\"", "expected dense(N)");
    expect_spec_error("dense", "token 1 \"dense\"", "expected dense(N)");
    expect_spec_error("dense(8)x", "token 1 \"dense(8)x\"", "expected dense(N)");
    expect_spec_error("dense (8)", "token 1 \"dense\"", "expected dense(N)");
    expect_spec_error("relu (8)", "token 2 \"(8)\"", "unknown layer");
    expect_spec_error("relu(1)", "token 1 \"relu(1)\"", "expected relu (no arguments)");
    expect_spec_error("dense(4) dueling relu", "token 3 \"relu\"", "last token");
    expect_spec_error("Dense(4)", "token 1 \"Dense(4)\"", "unknown layer");

    char long_spec[64 * 6 + 16] = "";
    for (int i = 0; i < 64; i++) strcat(long_spec, "relu ");
    expect_spec_error(long_spec, "more than", NULL);

    fl_qnet_t *n = NULL;
    fl_err_t err = {0};
    assert_int_equal(fl_qnet_create("relu", 0, 2, 8, &n, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "obs_dim"));
    assert_int_equal(fl_qnet_create("relu", 4, 0, 8, &n, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "num_actions"));
    assert_int_equal(fl_qnet_create("relu", 4, 2, 0, &n, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "max_batch"));
    assert_int_equal(fl_qnet_create(NULL, 4, 2, 8, &n, &err), FL_INVALID_ARGUMENT);
}

static void test_set_params(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 23);
    fl_qnet_t *n = NULL;
    fl_err_t err = {0};
    assert_int_equal(fl_qnet_create("dense(6) relu", 3, 2, 2, &n, &err), FL_OK);
    const size_t np = fl_qnet_num_params(n); /* 3*6+6 + 6*2+2 = 38 */
    assert_int_equal(np, 38);
    float *src = malloc(sizeof(float) * (np + 1));
    fill_uniform(&r, src, np + 1, -1, 1);
    fl_qnet_init(n, &r);
    float *before = malloc(sizeof(float) * np);
    memcpy(before, fl_qnet_params(n), sizeof(float) * np);

    assert_int_equal(fl_qnet_set_params(n, src, np - 1, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "got 37"));
    assert_non_null(strstr(err.msg, "expected 38"));
    assert_int_equal(fl_qnet_set_params(n, src, np + 1, &err), FL_INVALID_ARGUMENT);
    assert_memory_equal(fl_qnet_params(n), before, sizeof(float) * np); /* untouched */

    assert_int_equal(fl_qnet_set_params(n, src, np, &err), FL_OK);
    assert_memory_equal(fl_qnet_params(n), src, sizeof(float) * np);
    free(src);
    free(before);
    fl_qnet_destroy(n);
}

static void test_copy_params(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 24);
    const char *spec = "dense(32) relu dense(16) relu dueling";
    fl_qnet_t *online = NULL, *target = NULL;
    assert_int_equal(fl_qnet_create(spec, 7, 4, 16, &online, NULL), FL_OK);
    assert_int_equal(fl_qnet_create(spec, 7, 4, 3, &target, NULL), FL_OK); /* max_batch may differ */
    fl_qnet_init(online, &r);
    fl_qnet_init(target, &r);
    const size_t np = fl_qnet_num_params(online);
    assert_true(memcmp(fl_qnet_params(online), fl_qnet_params(target), np * sizeof(float)) != 0);
    fl_qnet_copy_params(target, online);
    assert_memory_equal(fl_qnet_params(online), fl_qnet_params(target), np * sizeof(float));
    float obs[3 * 7], q1[3 * 4], q2[3 * 4];
    fill_uniform(&r, obs, 3 * 7, -1, 1);
    assert_int_equal(fl_qnet_forward(online, obs, 3, q1), FL_OK);
    assert_int_equal(fl_qnet_forward(target, obs, 3, q2), FL_OK);
    assert_memory_equal(q1, q2, sizeof q1);
    /* a copy, not an alias */
    fl_qnet_params(online)[0] += 1.0f;
    assert_true(fl_qnet_params(target)[0] != fl_qnet_params(online)[0]);
    fl_qnet_destroy(online);
    fl_qnet_destroy(target);
}

static void test_forward_backward_errors(void **state) {
    fl_qnet_t *n = NULL;
    assert_int_equal(fl_qnet_create("dense(4) relu", 2, 3, 4, &n, NULL), FL_OK);
    float obs[5 * 2] = {0.5f, -1, 2, 1, -0.25f, 3, 1, 1, 2, 2}, q[5 * 3], dq[5 * 3] = {1};
    assert_int_equal(fl_qnet_backward(n, dq, 2), FL_FAILED_PRECONDITION); /* no forward yet */
    assert_int_equal(fl_qnet_forward(n, obs, 0, q), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_qnet_forward(n, obs, 5, q), FL_INVALID_ARGUMENT); /* > max_batch */
    assert_int_equal(fl_qnet_forward(n, NULL, 1, q), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_qnet_forward(n, obs, 1, NULL), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_qnet_forward(n, obs, 4, q), FL_OK);
    assert_int_equal(fl_qnet_backward(n, dq, 3), FL_INVALID_ARGUMENT); /* B differs from the forward */
    assert_int_equal(fl_qnet_backward(n, NULL, 4), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_qnet_backward(n, dq, 4), FL_OK);
    fl_qnet_destroy(n);
}

/* ---- learning sanity --------------------------------------------------------------- */

/* The dueling network fits Q targets from a fixed random linear function of the
 * observation with Adam; the loss must fall at least tenfold. */
static void test_learns_linear_targets(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 25);
    enum { OBS = 6, A = 3, B = 64, STEPS = 600, WINDOW = 20 };
    fl_qnet_t *n = NULL;
    fl_optim_t *opt = NULL;
    assert_int_equal(fl_qnet_create("dense(64) relu dueling", OBS, A, B, &n, NULL), FL_OK);
    fl_qnet_init(n, &r);
    fl_optim_config_t cfg = fl_optim_config_default(FL_OPTIM_ADAM);
    cfg.lr = 3e-3f;
    assert_int_equal(fl_optim_create(&cfg, fl_qnet_num_params(n), &opt, NULL), FL_OK);
    float M[A * OBS], c[A], obs[B * OBS], target[B * A], q[B * A], dq[B * A];
    fill_uniform(&r, M, A * OBS, -1, 1);
    fill_uniform(&r, c, A, -1, 1);
    double first = 0.0, last = 0.0;
    for (int step = 0; step < STEPS; step++) {
        fill_uniform(&r, obs, B * OBS, -1, 1);
        for (int b = 0; b < B; b++)
            for (int a = 0; a < A; a++) {
                double s = c[a];
                for (int i = 0; i < OBS; i++) s += (double)M[a * OBS + i] * obs[b * OBS + i];
                target[b * A + a] = (float)s;
            }
        assert_int_equal(fl_qnet_forward(n, obs, B, q), FL_OK);
        const float loss = fl_loss_mse(q, target, NULL, B * A, dq);
        assert_true(isfinite(loss));
        if (step < WINDOW) first += loss / WINDOW;
        if (step >= STEPS - WINDOW) last += loss / WINDOW;
        assert_int_equal(fl_qnet_backward(n, dq, B), FL_OK);
        fl_clip_grad_norm(fl_qnet_grads(n), fl_qnet_num_params(n), 10.0f);
        fl_optim_step(opt, fl_qnet_params(n), fl_qnet_grads(n));
    }
    if (!(last * 10.0 < first)) {
        SEED_NOTE();
        print_error("loss fell from %g to %g only\n", first, last);
        fail();
    }
    fl_optim_destroy(opt);
    fl_qnet_destroy(n);
}

int main(void) {
    openblas_set_num_threads(1);
    pick_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qnet_gradients),
        cmocka_unit_test(test_views_and_layout),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_set_params),
        cmocka_unit_test(test_copy_params),
        cmocka_unit_test(test_forward_backward_errors),
        cmocka_unit_test(test_learns_linear_targets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
