/* dnnl_util: what the tests of the oneDNN backend share (tests/test_kernels_dnnl.c, the
 * backend against the reference op by op; tests/test_learner_dnnl.c, whole double-DQN
 * updates on it): the tolerance, the benchmark networks, networks of integer parameters
 * (so both backends see the same relu masks), observations and the checks. Header-only;
 * the including test seeds g_rng (tests/seed_util.h). */
#ifndef FL_TESTS_DNNL_UTIL_H
#define FL_TESTS_DNNL_UTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/rng.h"
#include "kernels/dnnl.h"
#include "kernels/qnet.h"
#include "seed_util.h"

#define TOL 1e-4
#define ATOL 1e-7

#define NATURE "conv(32,8,4) relu conv(64,4,2) relu conv(64,3,1) relu flatten dense(512) relu dueling"
#define MINATAR "conv(16,3,1) relu flatten dense(128) relu dueling"
#define MLP "dense(256) relu dense(256) relu dueling"

static fl_rng_t g_rng;

/* Every test starts with it: nothing to test in a build without oneDNN. */
#define NEED_DNNL()                       \
    do {                                  \
        (void)state;                      \
        if (!fl_dnnl_available()) skip(); \
    } while (0)

static inline void fill(float *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = (float)fl_rng_uniform(&g_rng, lo, hi);
}

static inline double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* Fails (naming the network, the tensor and the batch) unless got is within TOL of want:
 * max |got - want| <= TOL max |want| + ATOL. */
static inline void expect_close(const float *got, const float *want, size_t n, const char *spec, const char *what,
                                int B) {
    double worst = 0, top = max_abs(want, n);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= worst)) { /* NaN counts as worst */
            worst = d;
            at = i;
        }
    }
    if (!(worst <= TOL * top + ATOL)) {
        SEED_NOTE();
        print_error("\"%s\" batch %d: %s[%zu]: dnnl %.9g, reference %.9g (max |ref| %.6g, allowed %.3g)\n", spec, B,
                    what, at, got[at], want[at], top, TOL * top + ATOL);
        fail();
    }
}

/* One network, both backends: forward, backward_input (and a plain backward) at each
 * batch in turn, with fresh inputs each time. */
typedef struct net_case {
    const char *spec;
    int h, w, c; /* image observations (H, W, C); h = 0: vectors of c floats */
    int actions;
    float scale; /* model.input_scale; 0 means 1 */
} net_case_t;

/* relu's ties: where a unit's input is within rounding of 0 the two backends can give it
 * different relu masks, and its gradient then differs by a whole term. So parameters are
 * -1, 0 or 1 (0 for half of them) and observations (times the input scale) 0 or 1 for
 * images, -1, 0 or 1 for vectors: every forward sum is of integers below 2^24, exact in
 * any order, and both backends see the same units at 0. Any mix-up of which input meets
 * which weight still shows, and the gradients are random reals. */
static inline void integerize(fl_qnet_t *n) {
    float *p = fl_qnet_params(n);
    for (size_t i = 0; i < fl_qnet_num_params(n); i++)
        p[i] = fl_rng_below(&g_rng, 2) ? 0.0f : fl_rng_below(&g_rng, 2) ? 1.0f : -1.0f;
}

/* density: the share of values that are not 0 (MinAtar's planes: a few set); 0 means
 * 1/2 for images, 2/3 for vectors. */
static inline void fill_obs(float *x, size_t n, int image, float scale, float density) {
    for (size_t i = 0; i < n; i++) {
        int v;
        if (density > 0) /* MinAtar's planes: a few values set */
            v = fl_rng_uniform(&g_rng, 0, 1) < density ? (image || fl_rng_below(&g_rng, 2) ? 1 : -1) : 0;
        else
            v = image ? (int)fl_rng_below(&g_rng, 2) : (int)fl_rng_below(&g_rng, 3) - 1;
        x[i] = (float)v / scale;
    }
}

static inline fl_qnet_t *make_net(const net_case_t *t, int max_batch) {
    fl_qnet_t *n = NULL;
    fl_err_t err;
    fl_err_init(&err);
    fl_status s = t->h ? fl_qnet_create_image(t->spec, t->h, t->w, t->c, t->actions, max_batch, &n, &err)
                       : fl_qnet_create(t->spec, t->c, t->actions, max_batch, &n, &err);
    if (s != FL_OK) print_error("%s: %s\n", t->spec, err.msg);
    assert_int_equal(s, FL_OK);
    assert_int_equal(fl_qnet_backend(n), FL_QNET_BACKEND_REF); /* the default */
    if (fl_dnnl_available()) assert_int_equal(fl_qnet_set_backend(n, FL_QNET_BACKEND_DNNL, &err), FL_OK);
    fl_qnet_init(n, &g_rng);
    if (t->scale) fl_qnet_set_input_scale(n, t->scale);
    integerize(n);
    return n;
}

/* The plan at B has a first dense layer that may take sparse inputs (in its weight
 * gradient too when bwd), and its last forward went the way `want` says
 * (fl_dnnl_net_describe). */
static inline void expect_sparse(const fl_qnet_t *n, int B, const char *spec, int bwd, const char *want) {
    char desc[4096];
    assert_true(fl_qnet_describe_kernels(n, B, desc, sizeof desc) > 0);
    if (!strstr(desc, "fwd (sparse inputs): fleet:sparse") ||
        (bwd && !strstr(desc, "bwd weights (sparse inputs): fleet:sparse")) || !strstr(desc, want)) {
        print_error("\"%s\" batch %d: wanted a sparse first layer, %s:\n%s", spec, B, want, desc);
        fail();
    }
}

#endif
