/* test_kernels: the layer ops and losses of kernels/ops.h and kernels/loss.h.
 *
 * Forward results are compared with naive double-precision loops; gradients with
 * central finite differences of L = sum(output * R) for a random R. The ops are linear
 * (dense, dueling), piecewise linear with inputs kept away from the kink (relu) or
 * piecewise quadratic with inputs kept away from the switch (huber, mse) in what is
 * perturbed, so central differences are exact up to rounding and the tolerances can be
 * tight. Inputs are random and fresh each run; the seed is printed on failure and
 * FLEET_TEST_SEED=<seed> replays a run. */
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
#include "kernels/ops.h"

#include "seed_util.h"

static void test_rng(fl_rng_t *r, uint64_t stream) {
    fl_rng_init_stream(r, g_seed, stream);
}

static void fill_uniform(fl_rng_t *r, float *a, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) a[i] = (float)fl_rng_uniform(r, lo, hi);
}

/* Uniform in +-[lo, hi): magnitude at least lo, random sign (never zero). */
static void fill_away_from_zero(fl_rng_t *r, float *a, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) {
        double m = fl_rng_uniform(r, lo, hi);
        a[i] = (float)(fl_rng_below(r, 2) ? m : -m);
    }
}

static int rand_int(fl_rng_t *r, int lo, int hi) {
    return lo + (int)fl_rng_below(r, (uint64_t)(hi - lo + 1));
}

static double dot_d(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}

/* ---- finite differences ------------------------------------------------------------ */

typedef double (*loss_fn)(void *ctx);

/* Central difference of f with respect to x[i]; the step actually taken in float is
 * used as the denominator. */
static double central_diff(float *x, size_t i, float eps, loss_fn f, void *ctx) {
    const float old = x[i];
    const float hi = old + eps, lo = old - eps;
    x[i] = hi;
    const double fp = f(ctx);
    x[i] = lo;
    const double fm = f(ctx);
    x[i] = old;
    return (fp - fm) / ((double)hi - (double)lo);
}

static void check_grad(const char *what, float *x, size_t n, const float *analytic, float eps, double atol, double rtol,
                       loss_fn f, void *ctx) {
    for (size_t i = 0; i < n; i++) {
        const double num = central_diff(x, i, eps, f, ctx);
        CHECK_CLOSE(analytic[i], num, atol, rtol, "%s[%zu]", what, i);
    }
}

/* ---- dense ------------------------------------------------------------------------- */

typedef struct dense_case {
    int B, in, out;
    float *x, *w, *b, *y, *r;
} dense_case_t;

static double dense_loss(void *ctx) {
    dense_case_t *c = ctx;
    fl_dense_forward(c->x, c->w, c->b, c->B, c->in, c->out, c->y);
    return dot_d(c->y, c->r, (size_t)c->B * c->out);
}

static void dense_case_alloc(dense_case_t *c, fl_rng_t *r, int B, int in, int out) {
    c->B = B, c->in = in, c->out = out;
    c->x = malloc(sizeof(float) * B * in);
    c->w = malloc(sizeof(float) * out * in);
    c->b = malloc(sizeof(float) * out);
    c->y = malloc(sizeof(float) * B * out);
    c->r = malloc(sizeof(float) * B * out);
    fill_uniform(r, c->x, (size_t)B * in, -1, 1);
    fill_uniform(r, c->w, (size_t)out * in, -1, 1);
    fill_uniform(r, c->b, (size_t)out, -1, 1);
    fill_uniform(r, c->r, (size_t)B * out, -1, 1);
}

static void dense_case_free(dense_case_t *c) {
    free(c->x), free(c->w), free(c->b), free(c->y), free(c->r);
}

static void test_dense_forward_matches_naive(void **state) {
    fl_rng_t r;
    test_rng(&r, 1);
    const int batches[] = {1, 2, 7, 64, 130};
    for (size_t t = 0; t < sizeof batches / sizeof batches[0]; t++) {
        dense_case_t c;
        dense_case_alloc(&c, &r, batches[t], rand_int(&r, 1, 70), rand_int(&r, 1, 70));
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            /* garbage (NaN) in the output must not matter */
            for (int i = 0; i < c.B * c.out; i++) c.y[i] = NAN;
            fl_dense_forward(c.x, c.w, with_bias ? c.b : NULL, c.B, c.in, c.out, c.y);
            for (int b = 0; b < c.B; b++) {
                for (int o = 0; o < c.out; o++) {
                    double s = with_bias ? c.b[o] : 0.0, mag = fabs(s);
                    for (int i = 0; i < c.in; i++) {
                        s += (double)c.x[b * c.in + i] * c.w[o * c.in + i];
                        mag += fabs((double)c.x[b * c.in + i] * c.w[o * c.in + i]);
                    }
                    CHECK_CLOSE(c.y[b * c.out + o], s, 1e-6 * mag + 1e-7, 0, "dense y[%d,%d] B=%d in=%d out=%d", b, o,
                                c.B, c.in, c.out);
                }
            }
        }
        dense_case_free(&c);
    }
}

static void test_dense_gradients(void **state) {
    fl_rng_t r;
    test_rng(&r, 2);
    const int batches[] = {1, 3, rand_int(&r, 2, 9)};
    for (size_t t = 0; t < sizeof batches / sizeof batches[0]; t++) {
        dense_case_t c;
        dense_case_alloc(&c, &r, batches[t], rand_int(&r, 1, 12), rand_int(&r, 1, 12));
        float *dx = malloc(sizeof(float) * c.B * c.in), *dw = malloc(sizeof(float) * c.out * c.in),
              *db = malloc(sizeof(float) * c.out);
        for (int i = 0; i < c.B * c.in; i++) dx[i] = NAN; /* overwritten, not accumulated */
        for (int i = 0; i < c.out * c.in; i++) dw[i] = NAN;
        for (int i = 0; i < c.out; i++) db[i] = NAN;
        fl_dense_forward(c.x, c.w, c.b, c.B, c.in, c.out, c.y);
        fl_dense_backward(c.x, c.w, c.r, c.B, c.in, c.out, dx, dw, db, 0);
        check_grad("dense dx", c.x, (size_t)c.B * c.in, dx, 1e-2f, 1e-4, 1e-4, dense_loss, &c);
        check_grad("dense dw", c.w, (size_t)c.out * c.in, dw, 1e-2f, 1e-4, 1e-4, dense_loss, &c);
        check_grad("dense db", c.b, (size_t)c.out, db, 1e-2f, 1e-4, 1e-4, dense_loss, &c);

        /* accumulate = 1 adds to what is there */
        float *dx2 = malloc(sizeof(float) * c.B * c.in), *dw2 = malloc(sizeof(float) * c.out * c.in),
              *db2 = malloc(sizeof(float) * c.out);
        float *base_x = malloc(sizeof(float) * c.B * c.in), *base_w = malloc(sizeof(float) * c.out * c.in),
              *base_b = malloc(sizeof(float) * c.out);
        fill_uniform(&r, base_x, (size_t)c.B * c.in, -1, 1);
        fill_uniform(&r, base_w, (size_t)c.out * c.in, -1, 1);
        fill_uniform(&r, base_b, (size_t)c.out, -1, 1);
        memcpy(dx2, base_x, sizeof(float) * c.B * c.in);
        memcpy(dw2, base_w, sizeof(float) * c.out * c.in);
        memcpy(db2, base_b, sizeof(float) * c.out);
        fl_dense_backward(c.x, c.w, c.r, c.B, c.in, c.out, dx2, dw2, db2, 1);
        for (int i = 0; i < c.B * c.in; i++)
            CHECK_CLOSE(dx2[i], (double)base_x[i] + dx[i], 1e-5, 1e-5, "accumulated dx[%d]", i);
        for (int i = 0; i < c.out * c.in; i++)
            CHECK_CLOSE(dw2[i], (double)base_w[i] + dw[i], 1e-5, 1e-5, "accumulated dw[%d]", i);
        for (int i = 0; i < c.out; i++)
            CHECK_CLOSE(db2[i], (double)base_b[i] + db[i], 1e-5, 1e-5, "accumulated db[%d]", i);

        /* NULL outputs are skipped */
        fl_dense_backward(c.x, c.w, c.r, c.B, c.in, c.out, NULL, dw2, NULL, 0);
        for (int i = 0; i < c.out * c.in; i++) CHECK_CLOSE(dw2[i], dw[i], 1e-6, 1e-6, "dw with NULL dx[%d]", i);

        free(dx), free(dw), free(db), free(dx2), free(dw2), free(db2), free(base_x), free(base_w), free(base_b);
        dense_case_free(&c);
    }
}

/* ---- relu -------------------------------------------------------------------------- */

typedef struct relu_case {
    size_t n;
    float *x, *y, *r;
} relu_case_t;

static double relu_loss(void *ctx) {
    relu_case_t *c = ctx;
    fl_relu_forward(c->x, c->y, c->n);
    return dot_d(c->y, c->r, c->n);
}

static void test_relu(void **state) {
    fl_rng_t r;
    test_rng(&r, 3);
    relu_case_t c = {.n = (size_t)rand_int(&r, 20, 200)};
    c.x = malloc(sizeof(float) * c.n), c.y = malloc(sizeof(float) * c.n), c.r = malloc(sizeof(float) * c.n);
    float *dx = malloc(sizeof(float) * c.n);
    fill_away_from_zero(&r, c.x, c.n, 0.05, 2.0); /* |x| >= 0.05 > eps: no kink crossed */
    fill_uniform(&r, c.r, c.n, -1, 1);
    fl_relu_forward(c.x, c.y, c.n);
    int pos = 0;
    for (size_t i = 0; i < c.n; i++) {
        CHECK_CLOSE(c.y[i], c.x[i] > 0 ? c.x[i] : 0.0, 0, 0, "relu y[%zu]", i);
        pos += c.x[i] > 0;
    }
    assert_true(pos > 0 && pos < (int)c.n); /* both sides exercised (fails with prob 2^-19 at most) */
    fl_relu_backward(c.y, c.r, dx, c.n);
    check_grad("relu dx", c.x, c.n, dx, 1e-2f, 1e-6, 1e-5, relu_loss, &c);

    /* in place */
    fl_relu_forward(c.x, c.y, c.n);
    float *z = malloc(sizeof(float) * c.n);
    memcpy(z, c.x, sizeof(float) * c.n);
    fl_relu_forward(z, z, c.n);
    assert_memory_equal(z, c.y, sizeof(float) * c.n);
    float *d = malloc(sizeof(float) * c.n);
    memcpy(d, c.r, sizeof(float) * c.n);
    fl_relu_backward(c.y, d, d, c.n);
    assert_memory_equal(d, dx, sizeof(float) * c.n);
    free(d);
    /* NaN propagates instead of being hidden as 0 */
    float nan_in = NAN, nan_out = 0.0f;
    fl_relu_forward(&nan_in, &nan_out, 1);
    assert_true(isnan(nan_out));
    free(c.x), free(c.y), free(c.r), free(dx), free(z);
}

/* ---- dueling ----------------------------------------------------------------------- */

typedef struct dueling_case {
    int B, H, A;
    float *h, *w, *b, *va, *q, *r;
} dueling_case_t;

static double dueling_loss(void *ctx) {
    dueling_case_t *c = ctx;
    fl_dueling_forward(c->h, c->w, c->b, c->B, c->H, c->A, c->va, c->q);
    return dot_d(c->q, c->r, (size_t)c->B * c->A);
}

static void test_dueling(void **state) {
    fl_rng_t r;
    test_rng(&r, 4);
    const int actions[] = {1, 2, rand_int(&r, 3, 9)};
    for (size_t t = 0; t < sizeof actions / sizeof actions[0]; t++) {
        dueling_case_t c = {.B = rand_int(&r, 1, 6), .H = rand_int(&r, 1, 12), .A = actions[t]};
        const int B = c.B, H = c.H, A = c.A;
        c.h = malloc(sizeof(float) * B * H), c.w = malloc(sizeof(float) * (A + 1) * H);
        c.b = malloc(sizeof(float) * (A + 1)), c.va = malloc(sizeof(float) * B * (A + 1));
        c.q = malloc(sizeof(float) * B * A), c.r = malloc(sizeof(float) * B * A);
        float *dh = malloc(sizeof(float) * B * H), *dw = malloc(sizeof(float) * (A + 1) * H);
        float *db = malloc(sizeof(float) * (A + 1)), *dva = malloc(sizeof(float) * B * (A + 1));
        fill_uniform(&r, c.h, (size_t)B * H, -1, 1);
        fill_uniform(&r, c.w, (size_t)(A + 1) * H, -1, 1);
        fill_uniform(&r, c.b, (size_t)A + 1, -1, 1);
        fill_uniform(&r, c.r, (size_t)B * A, -1, 1);

        /* forward against the definition, in double */
        fl_dueling_forward(c.h, c.w, c.b, B, H, A, c.va, c.q);
        for (int s = 0; s < B; s++) {
            double v = c.b[0], adv[16], mean = 0.0;
            for (int k = 0; k < H; k++) v += (double)c.h[s * H + k] * c.w[k];
            for (int a = 0; a < A; a++) {
                adv[a] = c.b[1 + a];
                for (int k = 0; k < H; k++) adv[a] += (double)c.h[s * H + k] * c.w[(1 + a) * H + k];
                mean += adv[a] / A;
            }
            CHECK_CLOSE(c.va[s * (A + 1)], v, 1e-5, 1e-5, "dueling V[%d]", s);
            for (int a = 0; a < A; a++)
                CHECK_CLOSE(c.q[s * A + a], v + adv[a] - mean, 1e-5, 1e-5, "dueling q[%d,%d] A=%d", s, a, A);
        }

        fl_dueling_backward(c.h, c.w, c.r, B, H, A, dva, dh, dw, db, 0);
        check_grad("dueling dh", c.h, (size_t)B * H, dh, 1e-2f, 1e-4, 1e-4, dueling_loss, &c);
        check_grad("dueling dw", c.w, (size_t)(A + 1) * H, dw, 1e-2f, 1e-4, 1e-4, dueling_loss, &c);
        check_grad("dueling db", c.b, (size_t)A + 1, db, 1e-2f, 1e-4, 1e-4, dueling_loss, &c);
        free(c.h), free(c.w), free(c.b), free(c.va), free(c.q), free(c.r);
        free(dh), free(dw), free(db), free(dva);
    }
}

/* ---- losses ------------------------------------------------------------------------ */

typedef struct loss_case {
    int B;
    float delta;
    int huber;
    float *pred, *target, *weights;
} loss_case_t;

static double loss_value(void *ctx) {
    loss_case_t *c = ctx;
    return c->huber ? fl_loss_huber(c->pred, c->target, c->weights, c->B, c->delta, NULL)
                    : fl_loss_mse(c->pred, c->target, c->weights, c->B, NULL);
}

static void test_huber(void **state) {
    fl_rng_t r;
    test_rng(&r, 5);
    loss_case_t c = {.B = rand_int(&r, 8, 40), .delta = (float)fl_rng_uniform(&r, 0.5, 2.0), .huber = 1};
    c.pred = malloc(sizeof(float) * c.B), c.target = malloc(sizeof(float) * c.B);
    c.weights = malloc(sizeof(float) * c.B);
    float *dpred = malloc(sizeof(float) * c.B), *dpred1 = malloc(sizeof(float) * c.B);
    float *ones = malloc(sizeof(float) * c.B);
    /* half of the samples inside |x| < delta, half outside, all >= 0.1 delta from the switch */
    int inside = 0;
    for (int i = 0; i < c.B; i++) {
        const double mag =
            (i % 2 == 0) ? fl_rng_uniform(&r, 0.05, 0.9) * c.delta : fl_rng_uniform(&r, 1.1, 4.0) * c.delta;
        const double x = fl_rng_below(&r, 2) ? mag : -mag;
        c.target[i] = (float)fl_rng_uniform(&r, -3, 3);
        c.pred[i] = (float)(c.target[i] + x);
        c.weights[i] = (float)fl_rng_uniform(&r, 0.1, 2.0);
        ones[i] = 1.0f;
    }
    const float loss = fl_loss_huber(c.pred, c.target, c.weights, c.B, c.delta, dpred);
    double want = 0.0;
    for (int i = 0; i < c.B; i++) {
        const double x = (double)c.pred[i] - c.target[i], ax = fabs(x);
        inside += ax <= c.delta;
        want += c.weights[i] * (ax <= c.delta ? 0.5 * x * x : c.delta * (ax - 0.5 * c.delta));
        const double g = ax <= c.delta ? x : (x > 0 ? c.delta : -c.delta);
        CHECK_CLOSE(dpred[i], c.weights[i] * g / c.B, 1e-7, 1e-5, "huber dpred[%d]", i);
    }
    assert_true(inside > 0 && inside < c.B);
    CHECK_CLOSE(loss, want / c.B, 1e-7, 1e-5, "huber loss");
    /* the loss comes back as a float: its rounding over 2 eps bounds the absolute tolerance */
    check_grad("huber dpred", c.pred, (size_t)c.B, dpred, 1e-2f * c.delta, 5e-5, 1e-3, loss_value, &c);

    /* NULL weights mean ones */
    const float loss1 = fl_loss_huber(c.pred, c.target, NULL, c.B, c.delta, dpred);
    const float loss2 = fl_loss_huber(c.pred, c.target, ones, c.B, c.delta, dpred1);
    assert_true(loss1 == loss2);
    assert_memory_equal(dpred, dpred1, sizeof(float) * c.B);

    /* by hand: delta 1, x = 0.5 (w 1) and -3 (w 2): (0.125 + 2 * 2.5) / 2 */
    const float p[2] = {1.5f, -1.0f}, tg[2] = {1.0f, 2.0f}, w[2] = {1.0f, 2.0f};
    float d[2];
    CHECK_CLOSE(fl_loss_huber(p, tg, w, 2, 1.0f, d), 2.5625, 1e-7, 1e-6, "huber by hand");
    CHECK_CLOSE(d[0], 0.25, 1e-7, 1e-6, "huber by hand d0");
    CHECK_CLOSE(d[1], -1.0, 1e-7, 1e-6, "huber by hand d1");
    free(c.pred), free(c.target), free(c.weights), free(dpred), free(dpred1), free(ones);
}

static void test_mse(void **state) {
    fl_rng_t r;
    test_rng(&r, 6);
    loss_case_t c = {.B = rand_int(&r, 4, 40), .huber = 0};
    c.pred = malloc(sizeof(float) * c.B), c.target = malloc(sizeof(float) * c.B);
    c.weights = malloc(sizeof(float) * c.B);
    float *dpred = malloc(sizeof(float) * c.B);
    fill_uniform(&r, c.pred, (size_t)c.B, -3, 3);
    fill_uniform(&r, c.target, (size_t)c.B, -3, 3);
    fill_uniform(&r, c.weights, (size_t)c.B, 0.1, 2.0);
    const float loss = fl_loss_mse(c.pred, c.target, c.weights, c.B, dpred);
    double want = 0.0;
    for (int i = 0; i < c.B; i++) {
        const double x = (double)c.pred[i] - c.target[i];
        want += c.weights[i] * x * x;
        CHECK_CLOSE(dpred[i], 2.0 * c.weights[i] * x / c.B, 1e-7, 1e-5, "mse dpred[%d]", i);
    }
    CHECK_CLOSE(loss, want / c.B, 1e-7, 1e-5, "mse loss");
    check_grad("mse dpred", c.pred, (size_t)c.B, dpred, 0.1f, 1e-4, 1e-3, loss_value, &c);

    /* by hand: x = 0.5 (w 1), x = -3 (w 2): (0.25 + 18) / 2 */
    const float p[2] = {1.5f, -1.0f}, tg[2] = {1.0f, 2.0f}, w[2] = {1.0f, 2.0f};
    float d[2];
    CHECK_CLOSE(fl_loss_mse(p, tg, w, 2, d), 9.125, 1e-7, 1e-6, "mse by hand");
    CHECK_CLOSE(d[0], 0.5, 1e-7, 1e-6, "mse by hand d0");
    CHECK_CLOSE(d[1], -6.0, 1e-7, 1e-6, "mse by hand d1");
    free(c.pred), free(c.target), free(c.weights), free(dpred);
}

int main(void) {
    openblas_set_num_threads(1);
    pick_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_forward_matches_naive),
        cmocka_unit_test(test_dense_gradients),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_dueling),
        cmocka_unit_test(test_huber),
        cmocka_unit_test(test_mse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
