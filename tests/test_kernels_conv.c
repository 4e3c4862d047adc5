/* Tests of conv2d (kernels/ops.h) and of convolutional Q-networks (kernels/qnet.h):
 * forward against a direct convolution in double, every gradient (weights, bias, input)
 * against central differences of that reference, for several kernel / stride / padding
 * combinations and non-square inputs; a whole image network (HWC observations, conv,
 * relu, flatten, dense, dueling) against a double reference of the same network; spec
 * errors. Inputs are random from a fresh seed each run (FLEET_TEST_SEED replays one). */
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
#include "kernels/ops.h"
#include "kernels/qnet.h"

#include "seed_util.h"

/* Direct convolution in double: y (B, Cout, Ho, Wo). */
static void ref_conv(const fl_conv2d_shape_t *s, const double *x, const double *w, const double *b, int B, double *y) {
    for (int n = 0; n < B; n++)
        for (int o = 0; o < s->cout; o++)
            for (int oy = 0; oy < s->ho; oy++)
                for (int ox = 0; ox < s->wo; ox++) {
                    double acc = b ? b[o] : 0.0;
                    for (int c = 0; c < s->cin; c++)
                        for (int ky = 0; ky < s->k; ky++)
                            for (int kx = 0; kx < s->k; kx++) {
                                int iy = oy * s->stride + ky - s->pad, ix = ox * s->stride + kx - s->pad;
                                if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) continue;
                                acc += w[((o * s->cin + c) * s->k + ky) * s->k + kx] *
                                       x[((n * s->cin + c) * s->h + iy) * s->w + ix];
                            }
                    y[((n * s->cout + o) * s->ho + oy) * s->wo + ox] = acc;
                }
}

static double ref_conv_loss(const fl_conv2d_shape_t *s, const double *x, const double *w, const double *b, int B,
                            const double *R, double *ybuf) {
    ref_conv(s, x, w, b, B, ybuf);
    size_t ny = (size_t)B * s->cout * s->ho * s->wo;
    double l = 0;
    for (size_t i = 0; i < ny; i++) l += ybuf[i] * R[i];
    return l;
}

static void test_conv_op(void **state) {
    (void)state;
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 1);
    /* cin, h, w, cout, k, stride, pad */
    const int cases[][7] = {{1, 5, 5, 1, 1, 1, 0},   {2, 7, 6, 3, 3, 1, 0},   {3, 8, 9, 2, 3, 2, 1},
                            {2, 10, 10, 4, 4, 2, 0}, {1, 12, 11, 2, 8, 4, 0}, {3, 6, 5, 2, 3, 1, 2}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        fl_conv2d_shape_t s = {
            cases[t][0], cases[t][1], cases[t][2], cases[t][3], cases[t][4], cases[t][5], cases[t][6], 0, 0};
        assert_int_equal(fl_conv2d_shape_init(&s), 0);
        const int B = 1 + (int)fl_rng_below(&r, 3);
        const size_t nx = (size_t)B * s.cin * s.h * s.w, nw = (size_t)s.cout * s.cin * s.k * s.k,
                     ny = (size_t)B * s.cout * s.ho * s.wo;
        float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc((size_t)s.cout * 4), *y = malloc(ny * 4);
        float *col = malloc(fl_conv2d_col_floats(&s, B) * 4), *dy = malloc(ny * 4);
        float *dx = malloc(nx * 4), *dw = malloc(nw * 4), *db = malloc((size_t)s.cout * 4);
        double *xd = malloc(nx * 8), *wd = malloc(nw * 8), *bd = malloc((size_t)s.cout * 8), *yd = malloc(ny * 8),
               *R = malloc(ny * 8);
        for (size_t i = 0; i < nx; i++) xd[i] = x[i] = (float)fl_rng_uniform(&r, -1, 1);
        for (size_t i = 0; i < nw; i++) wd[i] = w[i] = (float)fl_rng_uniform(&r, -1, 1);
        for (int i = 0; i < s.cout; i++) bd[i] = b[i] = (float)fl_rng_uniform(&r, -1, 1);
        for (size_t i = 0; i < ny; i++) R[i] = dy[i] = (float)fl_rng_uniform(&r, -1, 1);

        fl_conv2d_forward(&s, x, w, b, B, col, y);
        ref_conv(&s, xd, wd, bd, B, yd);
        for (size_t i = 0; i < ny; i++) CHECK_CLOSE(y[i], yd[i], 1e-5, 1e-5, "case %zu y[%zu]", t, i);

        for (size_t i = 0; i < nw; i++) dw[i] = NAN; /* overwritten, not accumulated */
        fl_conv2d_backward(&s, x, w, dy, B, col, dx, dw, db, 0);
        const double h = 1e-6;
        for (size_t i = 0; i < nw; i++) {
            double o = wd[i];
            wd[i] = o + h;
            double lp = ref_conv_loss(&s, xd, wd, bd, B, R, yd);
            wd[i] = o - h;
            double lm = ref_conv_loss(&s, xd, wd, bd, B, R, yd);
            wd[i] = o;
            CHECK_CLOSE(dw[i], (lp - lm) / (2 * h), 1e-4, 1e-4, "case %zu dw[%zu]", t, i);
        }
        for (int i = 0; i < s.cout; i++) {
            double o = bd[i];
            bd[i] = o + h;
            double lp = ref_conv_loss(&s, xd, wd, bd, B, R, yd);
            bd[i] = o - h;
            double lm = ref_conv_loss(&s, xd, wd, bd, B, R, yd);
            bd[i] = o;
            CHECK_CLOSE(db[i], (lp - lm) / (2 * h), 1e-4, 1e-4, "case %zu db[%d]", t, i);
        }
        for (size_t i = 0; i < nx; i++) {
            double o = xd[i];
            xd[i] = o + h;
            double lp = ref_conv_loss(&s, xd, wd, bd, B, R, yd);
            xd[i] = o - h;
            double lm = ref_conv_loss(&s, xd, wd, bd, B, R, yd);
            xd[i] = o;
            CHECK_CLOSE(dx[i], (lp - lm) / (2 * h), 1e-4, 1e-4, "case %zu dx[%zu]", t, i);
        }
        /* accumulate = 1 adds */
        float *dw2 = malloc(nw * 4);
        memcpy(dw2, dw, nw * 4);
        fl_conv2d_backward(&s, x, w, dy, B, col, NULL, dw2, NULL, 1);
        for (size_t i = 0; i < nw; i++) CHECK_CLOSE(dw2[i], 2.0 * dw[i], 1e-5, 1e-5, "case %zu accumulated dw", t);
        free(dw2);
        free(x), free(w), free(b), free(y), free(col), free(dy), free(dx), free(dw), free(db);
        free(xd), free(wd), free(bd), free(yd), free(R);
    }
}

/* A batch larger than one chunk of im2col (the Nature torso's first layer: 40 samples a
 * chunk) gives what the samples give one at a time. */
static void test_conv_chunks(void **state) {
    (void)state;
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 3);
    fl_conv2d_shape_t s = {4, 84, 84, 32, 8, 4, 0, 0, 0};
    assert_int_equal(fl_conv2d_shape_init(&s), 0);
    const int B = 45;
    const size_t nx = (size_t)B * 4 * 84 * 84, nw = (size_t)32 * 4 * 64, per_y = (size_t)32 * 20 * 20;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(32 * 4), *y = malloc(B * per_y * 4);
    float *y1 = malloc(per_y * 4), *dy = malloc(B * per_y * 4), *dw = malloc(nw * 4), *dw1 = malloc(nw * 4);
    float *dx = malloc(nx * 4), *dx1 = malloc(nx / B * 4), *db = malloc(32 * 4), *db1 = malloc(32 * 4);
    float *scratch = malloc(fl_conv2d_col_floats(&s, B) * 4);
    for (size_t i = 0; i < nx; i++) x[i] = (float)fl_rng_uniform(&r, 0, 1);
    for (size_t i = 0; i < nw; i++) w[i] = (float)fl_rng_uniform(&r, -0.1, 0.1);
    for (int i = 0; i < 32; i++) b[i] = (float)fl_rng_uniform(&r, -0.1, 0.1);
    for (size_t i = 0; i < B * per_y; i++) dy[i] = (float)fl_rng_uniform(&r, -1, 1);
    fl_conv2d_forward(&s, x, w, b, B, scratch, y);
    fl_conv2d_backward(&s, x, w, dy, B, scratch, dx, dw, db, 0);
    memset(dw1, 0, nw * 4);
    memset(db1, 0, 32 * 4);
    memset(dx1, 0, nx / B * 4);
    for (int n = 0; n < B; n++) {
        fl_conv2d_forward(&s, x + (size_t)n * (nx / B), w, b, 1, scratch, y1);
        for (size_t i = 0; i < per_y; i++) CHECK_CLOSE(y[n * per_y + i], y1[i], 1e-5, 1e-5, "chunked y[%d][%zu]", n, i);
        fl_conv2d_backward(&s, x + (size_t)n * (nx / B), w, dy + (size_t)n * per_y, 1, scratch, dx1, dw1, db1, 1);
        for (size_t i = 0; i < nx / B; i++)
            CHECK_CLOSE(dx[n * (nx / B) + i], dx1[i], 1e-5, 1e-5, "chunked dx[%d][%zu]", n, i);
        memset(dx1, 0, nx / B * 4); /* accumulate = 1 adds into dx1 too */
    }
    for (size_t i = 0; i < nw; i++) CHECK_CLOSE(dw[i], dw1[i], 1e-3, 1e-4, "chunked dw[%zu]", i);
    for (int i = 0; i < 32; i++) CHECK_CLOSE(db[i], db1[i], 1e-3, 1e-4, "chunked db[%d]", i);
    free(x), free(w), free(b), free(y), free(y1), free(dy), free(dw), free(dw1), free(dx), free(dx1), free(db),
        free(db1), free(scratch);
}

/* ---- a whole image network against a double reference --------------------------------- */

#define IH 7
#define IW 6
#define IC 2
#define NA 3
#define SPEC "conv(4,3,1,1) relu conv(3,3,2) relu flatten dense(6) relu dueling"

/* The network above in double, from the qnet's own parameter views; obs (B, H, W, C). */
static void ref_net(const fl_qnet_t *n, const double *P, const double *obs, int B, double *q) {
    fl_conv2d_shape_t c1 = {IC, IH, IW, 4, 3, 1, 1, 0, 0}, c2 = {4, 0, 0, 3, 3, 2, 0, 0, 0};
    fl_conv2d_shape_init(&c1);
    c2.h = c1.ho, c2.w = c1.wo;
    fl_conv2d_shape_init(&c2);
    const size_t n0 = (size_t)IC * IH * IW, n1 = (size_t)4 * c1.ho * c1.wo, n2 = (size_t)3 * c2.ho * c2.wo;
    double *x = malloc(B * n0 * 8), *a1 = malloc(B * n1 * 8), *a2 = malloc(B * n2 * 8);
    for (int b = 0; b < B; b++) /* HWC -> CHW */
        for (int y = 0; y < IH; y++)
            for (int xx = 0; xx < IW; xx++)
                for (int c = 0; c < IC; c++)
                    x[b * n0 + ((size_t)c * IH + y) * IW + xx] = obs[b * n0 + ((size_t)y * IW + xx) * IC + c];
    const fl_param_view_t *w1 = fl_qnet_find_view(n, "0.conv.weight"), *b1 = fl_qnet_find_view(n, "0.conv.bias");
    const fl_param_view_t *w2 = fl_qnet_find_view(n, "2.conv.weight"), *b2 = fl_qnet_find_view(n, "2.conv.bias");
    const fl_param_view_t *w3 = fl_qnet_find_view(n, "5.dense.weight"), *b3 = fl_qnet_find_view(n, "5.dense.bias");
    const fl_param_view_t *vw = fl_qnet_find_view(n, "head.value.weight"),
                          *vb = fl_qnet_find_view(n, "head.value.bias");
    const fl_param_view_t *aw = fl_qnet_find_view(n, "head.advantage.weight");
    const fl_param_view_t *ab = fl_qnet_find_view(n, "head.advantage.bias");
    assert_non_null(w1 && b1 && w2 && b2 && w3 && b3 && vw && vb && aw && ab);
    ref_conv(&c1, x, P + w1->offset, P + b1->offset, B, a1);
    for (size_t i = 0; i < B * n1; i++) a1[i] = a1[i] > 0 ? a1[i] : 0;
    ref_conv(&c2, a1, P + w2->offset, P + b2->offset, B, a2);
    for (size_t i = 0; i < B * n2; i++) a2[i] = a2[i] > 0 ? a2[i] : 0;
    for (int b = 0; b < B; b++) {
        double h[6], adv[NA], v = P[vb->offset], mean = 0;
        for (int o = 0; o < 6; o++) {
            double acc = P[b3->offset + o];
            for (size_t i = 0; i < n2; i++) acc += P[w3->offset + o * n2 + i] * a2[b * n2 + i];
            h[o] = acc > 0 ? acc : 0;
        }
        for (int i = 0; i < 6; i++) v += P[vw->offset + i] * h[i];
        for (int a = 0; a < NA; a++) {
            adv[a] = P[ab->offset + a];
            for (int i = 0; i < 6; i++) adv[a] += P[aw->offset + a * 6 + i] * h[i];
            mean += adv[a] / NA;
        }
        for (int a = 0; a < NA; a++) q[b * NA + a] = v + adv[a] - mean;
    }
    free(x), free(a1), free(a2);
}

static double ref_net_loss(const fl_qnet_t *n, const double *P, const double *obs, int B, const double *R) {
    double q[4 * NA], l = 0;
    ref_net(n, P, obs, B, q);
    for (int i = 0; i < B * NA; i++) l += q[i] * R[i];
    return l;
}

static void test_image_qnet(void **state) {
    (void)state;
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 2);
    fl_qnet_t *n = NULL;
    fl_err_t err;
    fl_err_init(&err);
    const int shape[3] = {IH, IW, IC};
    if (fl_qnet_create_for_obs(SPEC, 3, shape, NA, 4, &n, &err) != FL_OK) fail_msg("create: %s", err.msg);
    assert_int_equal(fl_qnet_obs_dim(n), IH * IW * IC);
    const fl_param_view_t *w1 = fl_qnet_find_view(n, "0.conv.weight");
    assert_non_null(w1);
    assert_int_equal(w1->rank, 4);
    assert_true(w1->shape[0] == 4 && w1->shape[1] == IC && w1->shape[2] == 3 && w1->shape[3] == 3);
    fl_qnet_init(n, &r);
    /* PyTorch's Conv2d bound: 1 / sqrt(Cin K K) */
    const float *p = fl_qnet_params(n);
    for (size_t i = 0; i < w1->numel; i++) assert_true(fabsf(p[w1->offset + i]) <= 1.0f / sqrtf(IC * 9.0f));

    const int B = 3;
    const size_t np = fl_qnet_num_params(n), nobs = (size_t)B * IH * IW * IC;
    float obs[3 * IH * IW * IC], q[3 * NA], R[3 * NA], dobs[3 * IH * IW * IC];
    double obs_d[3 * IH * IW * IC], q_ref[3 * NA], R_d[3 * NA];
    for (size_t i = 0; i < nobs; i++) obs_d[i] = obs[i] = (float)fl_rng_uniform(&r, -1, 1);
    for (int i = 0; i < B * NA; i++) R_d[i] = R[i] = (float)fl_rng_uniform(&r, -1, 1);
    double *P = malloc(np * 8);
    for (size_t i = 0; i < np; i++) P[i] = p[i];
    assert_int_equal(fl_qnet_forward(n, obs, B, q), FL_OK);
    ref_net(n, P, obs_d, B, q_ref);
    for (int i = 0; i < B * NA; i++) CHECK_CLOSE(q[i], q_ref[i], 1e-5, 1e-5, "q[%d]", i);

    assert_int_equal(fl_qnet_backward_input(n, R, B, dobs), FL_OK);
    const float *g = fl_qnet_grads(n);
    const double h = 1e-6;
    for (size_t i = 0; i < np; i++) {
        double o = P[i];
        P[i] = o + h;
        double lp = ref_net_loss(n, P, obs_d, B, R_d);
        P[i] = o - h;
        double lm = ref_net_loss(n, P, obs_d, B, R_d);
        P[i] = o;
        CHECK_CLOSE(g[i], (lp - lm) / (2 * h), 1e-4, 1e-3, "dparam[%zu]", i);
    }
    for (size_t i = 0; i < nobs; i++) { /* in the observation's own (H, W, C) layout */
        double o = obs_d[i];
        obs_d[i] = o + h;
        double lp = ref_net_loss(n, P, obs_d, B, R_d);
        obs_d[i] = o - h;
        double lm = ref_net_loss(n, P, obs_d, B, R_d);
        obs_d[i] = o;
        CHECK_CLOSE(dobs[i], (lp - lm) / (2 * h), 1e-4, 1e-3, "dobs[%zu]", i);
    }
    free(P);
    fl_qnet_destroy(n);
}

static void test_nature_and_minatar_shapes(void **state) {
    (void)state;
    fl_qnet_t *n = NULL;
    fl_err_t err;
    fl_err_init(&err);
    /* The Nature DQN: 84x84x4 -> 20x20x32 -> 9x9x64 -> 7x7x64 = 3136 -> 512 -> dueling */
    assert_int_equal(fl_qnet_create_image("conv(32,8,4) relu conv(64,4,2) relu conv(64,3,1) relu flatten dense(512) "
                                          "relu dueling",
                                          84, 84, 4, 18, 2, &n, &err),
                     FL_OK);
    const fl_param_view_t *d = fl_qnet_find_view(n, "7.dense.weight");
    assert_non_null(d);
    assert_true(d->shape[0] == 512 && d->shape[1] == 3136);
    /* 32*4*64+32 + 64*32*16+64 + 64*64*9+64 + 512*3136+512 + 19*512+19 */
    assert_int_equal(fl_qnet_num_params(n), 8224 + 32832 + 36928 + 1606144 + 9747);
    fl_qnet_destroy(n);
    /* MinAtar: 10x10x4 -> conv 16 3x3 -> 8x8x16 = 1024 -> 128 */
    assert_int_equal(fl_qnet_create_image("conv(16,3,1) relu flatten dense(128) relu", 10, 10, 4, 6, 2, &n, &err),
                     FL_OK);
    d = fl_qnet_find_view(n, "3.dense.weight");
    assert_non_null(d);
    assert_int_equal(d->shape[1], 1024);
    fl_qnet_destroy(n);
}

/* model.input_scale: a network with scale s sees s * obs, and its dobs is s times the
 * gradient with respect to what it saw. */
static void test_input_scale(void **state) {
    (void)state;
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 4);
    fl_qnet_t *a = NULL, *b = NULL;
    fl_err_t err;
    fl_err_init(&err);
    for (int img = 0; img <= 1; img++) {
        const char *spec = img ? "conv(3,3,1) relu dense(4) relu dueling" : "dense(5) relu dueling";
        const int shape[3] = {5, 4, 2}, dimshape[1] = {40};
        assert_int_equal(fl_qnet_create_for_obs(spec, img ? 3 : 1, img ? shape : dimshape, 3, 2, &a, &err), FL_OK);
        assert_int_equal(fl_qnet_create_for_obs(spec, img ? 3 : 1, img ? shape : dimshape, 3, 2, &b, &err), FL_OK);
        fl_qnet_init(a, &r);
        fl_qnet_copy_params(b, a);
        fl_qnet_set_input_scale(a, 255.0f);
        assert_true(fl_qnet_input_scale(a) == 255.0f && fl_qnet_input_scale(b) == 1.0f);
        float obs[80], big[80], qa[6], qb[6], R[6], da[80], db[80];
        for (int i = 0; i < 80; i++) {
            obs[i] = (float)fl_rng_below(&r, 2) / 255.0f; /* uint8 0/1 planes after fl_dtype_to_float */
            big[i] = 255.0f * obs[i];
        }
        for (int i = 0; i < 6; i++) R[i] = (float)fl_rng_uniform(&r, -1, 1);
        assert_int_equal(fl_qnet_forward(a, obs, 2, qa), FL_OK);
        assert_int_equal(fl_qnet_forward(b, big, 2, qb), FL_OK);
        for (int i = 0; i < 6; i++) CHECK_CLOSE(qa[i], qb[i], 1e-5, 1e-5, "scaled q[%d]", i);
        assert_int_equal(fl_qnet_backward_input(a, R, 2, da), FL_OK);
        assert_int_equal(fl_qnet_backward_input(b, R, 2, db), FL_OK);
        for (int i = 0; i < 80; i++) CHECK_CLOSE(da[i], 255.0 * db[i], 1e-3, 1e-4, "scaled dobs[%d]", i);
        fl_qnet_destroy(a);
        fl_qnet_destroy(b);
    }
}

static void test_conv_spec_errors(void **state) {
    (void)state;
    fl_qnet_t *n = (fl_qnet_t *)1;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_qnet_create_image("conv(4,9,1)", 5, 5, 1, 2, 2, &n, &err), FL_INVALID_ARGUMENT);
    assert_null(n);
    assert_non_null(strstr(err.msg, "0.conv"));
    assert_non_null(strstr(err.msg, "(1, 5, 5)"));
    const char *bad[] = {"conv(4,3)", "conv(0,3,1)", "conv(4,3,0)", "conv(4,3,1,1,1)", "conv(4,x,1)", "conv"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(fl_qnet_create_image(bad[i], 8, 8, 1, 2, 2, &n, &err), FL_INVALID_ARGUMENT);
        assert_non_null(strstr(err.msg, "conv(C,K,S)"));
    }
    assert_int_equal(fl_qnet_create_image("relu", 0, 8, 1, 2, 2, &n, &err), FL_INVALID_ARGUMENT);
}

int main(void) {
    openblas_set_num_threads(1);
    pick_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_op),     cmocka_unit_test(test_conv_chunks),
        cmocka_unit_test(test_image_qnet),  cmocka_unit_test(test_nature_and_minatar_shapes),
        cmocka_unit_test(test_input_scale), cmocka_unit_test(test_conv_spec_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
