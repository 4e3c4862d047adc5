/* Tests of the oneDNN backend of the Q-network (kernels/dnnl.h) against the reference
 * backend (kernels/ops.h) on the same network and parameters: every op through small
 * networks (a convolution alone at several shapes with padding and stride, two in a row
 * with and without relu, dense layers, relu and flatten where nothing fuses them, image
 * inputs into a dense layer, the input scale, a first dense layer over inputs mostly 0
 * and its sparse kernels against sums in double), the three benchmark networks (Nature CNN,
 * MinAtar, MLP), batch sizes changing between calls and more of them than a network
 * keeps plans for, and two threads (whole double-DQN updates on it are
 * tests/test_learner_dnnl.c's). Each compares q, every parameter gradient (per view) and
 * the input gradient.
 *
 * Tolerance: the backends sum in different orders, so a tensor passes when
 * max |dnnl - ref| <= TOL max |ref| + ATOL over its elements, TOL = 1e-4, ATOL = 1e-7
 * (q, gradients and parameter updates alike; the sums run over at most a few hundred
 * thousand float terms, and the worst seen is about 1e-5 of max |ref|). In a build
 * without oneDNN only the backend switch is tested (the reference stays the only one).
 * Inputs are random from a fresh seed each run (FLEET_TEST_SEED replays one). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/rng.h"
#include "kernels/dnnl.h"
#include "kernels/optim.h"
#include "kernels/conv_fwd.h"
#include "kernels/dense_small.h"
#include "kernels/dense_sparse.h"
#include "kernels/qnet.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "dnnl_util.h"

/* density and density2: the observations' share of values that are not 0 at the even
 * and odd calls (fill_obs; density2 0: density). With density > 0 the network is one whose
 * first dense layer may go sparse, and each forward goes the way its density says.
 * kind: FL_QNET_BACKEND_DNNL, or _ONEDNN (model.cpu_kernels = onednn), whose plans must
 * name no kernel of fleet's own. */
static void compare_kind(const net_case_t *t, const int *batches, int count, float density, float density2,
                         fl_qnet_backend_kind kind) {
    int max_batch = 1;
    for (int i = 0; i < count; i++) max_batch = batches[i] > max_batch ? batches[i] : max_batch;
    fl_qnet_t *n = make_net(t, max_batch);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_qnet_set_backend(n, kind, &err), FL_OK); /* before the first plan */
    assert_int_equal(fl_qnet_backend(n), FL_QNET_BACKEND_DNNL);
    const size_t D = (size_t)fl_qnet_obs_dim(n), P = fl_qnet_num_params(n), A = (size_t)t->actions;
    float *obs = malloc((size_t)max_batch * D * 4), *dq = malloc((size_t)max_batch * A * 4);
    float *q_ref = malloc((size_t)max_batch * A * 4), *q = malloc((size_t)max_batch * A * 4);
    float *dobs_ref = malloc((size_t)max_batch * D * 4), *dobs = malloc((size_t)max_batch * D * 4);
    float *g_ref = malloc(P * 4), *g = malloc(P * 4);
    for (int k = 0; k < count; k++) {
        const int B = batches[k];
        const float d = k % 2 && density2 ? density2 : density;
        fill_obs(obs, (size_t)B * D, t->h != 0, t->scale ? t->scale : 1.0f, d);
        fill(dq, (size_t)B * A, -1, 1);

        assert_int_equal(fl_qnet_set_backend(n, FL_QNET_BACKEND_REF, &err), FL_OK);
        assert_int_equal(fl_qnet_forward(n, obs, B, q_ref), FL_OK);
        assert_int_equal(fl_qnet_backward_input(n, dq, B, dobs_ref), FL_OK);
        memcpy(g_ref, fl_qnet_grads(n), P * 4);

        assert_int_equal(fl_qnet_set_backend(n, kind, &err), FL_OK);
        assert_int_equal(fl_qnet_backward(n, dq, B), FL_FAILED_PRECONDITION); /* no forward on this backend */
        memset(q, 0xff, (size_t)B * A * 4);
        assert_int_equal(fl_qnet_forward(n, obs, B, q), FL_OK);
        expect_close(q, q_ref, (size_t)B * A, t->spec, "q", B);
        /* without the input gradient first (a learner's backward), then with it */
        memset(fl_qnet_grads(n), 0xff, P * 4);
        assert_int_equal(fl_qnet_backward(n, dq, B), FL_OK);
        memcpy(g, fl_qnet_grads(n), P * 4);
        memset(dobs, 0xff, (size_t)B * D * 4);
        assert_int_equal(fl_qnet_backward_input(n, dq, B, dobs), FL_OK);
        expect_close(dobs, dobs_ref, (size_t)B * D, t->spec, "dobs", B);
        if (density > 0) /* a first dense layer that may go sparse: which way it went */
            expect_sparse(n, B, t->spec, 1, d <= 0.15f ? "last forward: sparse" : "last forward: dense");
        for (int v = 0; v < fl_qnet_num_views(n); v++) {
            const fl_param_view_t *pv = fl_qnet_view(n, v);
            expect_close(g + pv->offset, g_ref + pv->offset, pv->numel, t->spec, pv->name, B);
            expect_close(fl_qnet_grads(n) + pv->offset, g_ref + pv->offset, pv->numel, t->spec, pv->name, B);
        }
        char desc[4096];
        if (kind == FL_QNET_BACKEND_ONEDNN && fl_qnet_describe_kernels(n, B, desc, sizeof desc) > 0 &&
            strstr(desc, "fleet:")) {
            print_error("\"%s\" batch %d, onednn: a kernel of fleet's own in the plan:\n%s", t->spec, B, desc);
            fail();
        }
    }
    free(obs);
    free(dq);
    free(q_ref);
    free(q);
    free(dobs_ref);
    free(dobs);
    free(g_ref);
    free(g);
    fl_qnet_destroy(n);
}

static void compare_at(const net_case_t *t, const int *batches, int count, float density, float density2) {
    compare_kind(t, batches, count, density, density2, FL_QNET_BACKEND_DNNL);
}

static void compare(const net_case_t *t, const int *batches, int count) {
    compare_at(t, batches, count, 0, 0);
}

/* The networks and batches where the dnnl backend takes fleet's own kernels (the first
 * convolution over images, tiles, small-batch and short-row dense layers, space-to-depth)
 * run on oneDNN alone with model.cpu_kernels = onednn. */
static void test_onednn_alone(void **state) {
    NEED_DNNL();
    const net_case_t nets[] = {
        {NATURE, 84, 84, 4, 6, 255.0f},
        {"conv(16,8,4) relu conv(32,4,2) relu flatten dense(256) relu dueling", 84, 84, 4, 6, 255.0f},
        {MINATAR, 10, 10, 4, 6, 255.0f},
        {MLP, 0, 0, 4, 2, 0},
        {"dense(128) relu dense(128) relu dueling", 10, 10, 4, 6, 255.0f},
    };
    const int batches[] = {32, 5, 1};
    for (size_t i = 0; i < sizeof nets / sizeof nets[0]; i++)
        compare_kind(&nets[i], batches, 3, 0, 0, FL_QNET_BACKEND_ONEDNN);
    assert_string_equal(fl_qnet_backend_name(FL_QNET_BACKEND_ONEDNN), "onednn");
}

/* ---- ops, through the smallest networks that hold them ------------------------------- */

static void test_conv_shapes(void **state) {
    NEED_DNNL();
    /* one convolution (then the appended dense head): kernel, stride and padding, odd
     * channel counts (blocked layouts pad them), non-square inputs, a 1x1 output */
    const net_case_t cases[] = {
        {"conv(3,3,1)", 7, 6, 2, 3, 0},   {"conv(5,3,2,1)", 9, 8, 3, 2, 0},  {"conv(16,4,2)", 10, 10, 4, 4, 0},
        {"conv(8,8,4)", 20, 20, 4, 3, 0}, {"conv(20,3,1,2)", 6, 5, 3, 2, 0}, {"conv(7,5,1,1)", 5, 5, 1, 2, 0},
        {"conv(32,1,1)", 4, 4, 17, 2, 0}, {"conv(4,6,3)", 6, 6, 2, 2, 0},
    };
    const int batches[] = {3, 1, 5};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare(&cases[i], batches, 3);
}

static void test_conv_chains(void **state) {
    NEED_DNNL();
    /* activations that stay in oneDNN's layouts between convolutions, with and without
     * relu (fused or not), then flatten or not before the head */
    const net_case_t cases[] = {
        {"conv(16,3,1,1) relu conv(32,3,2) relu flatten dense(10) relu dueling", 12, 12, 4, 5, 0},
        {"conv(8,3,1) conv(12,3,1)", 9, 9, 3, 3, 0},
        {"conv(16,3,2) relu relu conv(16,3,1,1) flatten", 11, 11, 2, 4, 0},
        {"conv(5,2,1) relu conv(6,2,1) relu dense(7)", 6, 7, 3, 2, 0},
    };
    const int batches[] = {4, 2};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare(&cases[i], batches, 2);
}

/* A dense layer after a flatten of a convolution's output, on oneDNN's product, with at
 * least as many rows in the batch as it has outputs, or in an inference network at any
 * batch, reads that output as it lies and its weights with their columns in the same
 * order (kernels/dnnl_fwd.c, perm; the weight gradient put back in the plain order); else
 * the plain copy. Both as the reference computes, in a blocked and a channels-last layout,
 * and again after the parameters change (the permuted weights are made again). */
static void test_flatten_edge_order(void **state) {
    NEED_DNNL();
    const net_case_t t = {"conv(16,3,1,1) relu conv(32,3,2) relu flatten dense(40) relu dueling", 12, 12, 4, 5, 0};
    const int batches[] = {48, 2, 48};
    compare(&t, batches, 3);
    const net_case_t m = {MINATAR, 10, 10, 4, 6, 255.0f};
    const int mb[] = {128, 64};
    compare(&m, mb, 2);

    for (int inference = 0; inference < 2; inference++) {
        const int B = inference ? 2 : 48, A = 5;
        fl_qnet_t *n = make_net(&t, 48);
        fl_qnet_set_inference(n, inference);
        const size_t D = (size_t)fl_qnet_obs_dim(n);
        float *obs = malloc((size_t)B * D * 4), q[48 * 5], q_ref[48 * 5];
        fl_err_t err;
        fl_err_init(&err);
        fill_obs(obs, (size_t)B * D, 1, 1.0f, 0);
        char desc[4096];
        for (int round = 0; round < 2; round++) {
            if (round) { /* new parameters: the permuted weights must follow */
                float *w = fl_qnet_params(n);
                for (size_t i = 0; i < fl_qnet_num_params(n); i++) w[i] = -w[i];
            }
            assert_int_equal(fl_qnet_set_backend(n, FL_QNET_BACKEND_REF, &err), FL_OK);
            assert_int_equal(fl_qnet_forward(n, obs, B, q_ref), FL_OK);
            assert_int_equal(fl_qnet_set_backend(n, FL_QNET_BACKEND_DNNL, &err), FL_OK);
            assert_int_equal(fl_qnet_forward(n, obs, B, q), FL_OK);
            expect_close(q, q_ref, (size_t)B * A, t.spec, round ? "q, new parameters" : "q", B);
        }
        /* no copy of the activations (the convolutions' layouts are oneDNN's blocked or
         * channels-last ones on AVX-512: the weights permuted instead) */
        assert_true(fl_qnet_describe_kernels(n, B, desc, sizeof desc) > 0);
        if (strstr(desc, "dense reorder") || strstr(desc, "flatten reorder") ||
            (__builtin_cpu_supports("avx512f") && !strstr(desc, "dense weights (edge order)"))) {
            print_error("batch %d: the dense layer should read the flattened edge as it lies:\n%s", B, desc);
            fail();
        }
        if (!inference) { /* a training network at a batch of fewer rows than outputs: the copy */
            assert_int_equal(fl_qnet_forward(n, obs, 2, q), FL_OK);
            assert_true(fl_qnet_describe_kernels(n, 2, desc, sizeof desc) > 0);
            assert_null(strstr(desc, "(edge order)"));
        }
        free(obs);
        fl_qnet_destroy(n);
    }
}

/* A first convolution with a stride that divides its kernel and no padding runs as a
 * stride-1 convolution on the space-to-depth input (kernels/dnnl_fwd.c): rows and columns
 * it does not reach (their dobs is 0), one input channel, the input scale, a chain after
 * it, 16 channels per block exactly (the Nature CNN's 4 x 4 x 4) and not. */
static void test_space_to_depth(void **state) {
    NEED_DNNL();
    const net_case_t cases[] = {
        {"conv(6,4,2)", 9, 11, 3, 3, 0},
        {"conv(5,4,4)", 8, 9, 1, 2, 0},
        {"conv(8,4,2) relu dense(9) relu", 8, 8, 3, 3, 255.0f},
        {"conv(8,6,3) relu conv(16,2,1) relu flatten dueling", 12, 12, 2, 3, 0},
        {"conv(32,8,4) relu conv(8,3,1) relu dense(8) relu dueling", 24, 28, 4, 4, 0},
        {"conv(64,4,2) relu conv(32,3,1) relu flatten dense(8) relu dueling", 30, 27, 3, 4, 255.0f},
    };
    const int batches[] = {3, 1, 5};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        compare(&cases[i], batches, 3);
        /* the plan says so; a padded or stride-1 first convolution does not */
        fl_qnet_t *n = make_net(&cases[i], 2);
        float *obs = calloc((size_t)2 * fl_qnet_obs_dim(n), 4), q[2 * 4];
        assert_int_equal(fl_qnet_forward(n, obs, 2, q), FL_OK);
        char desc[2048];
        assert_true(fl_qnet_describe_kernels(n, 2, desc, sizeof desc) > 0);
        /* on AVX-512 with a multiple of 32 output channels the forward reads the
         * observations as they are (fl_conv_img); the backward runs space-to-depth */
        if (!strstr(desc, "0.conv fwd (space-to-depth") && !strstr(desc, "0.conv fwd (images): fleet:avx512") &&
            !strstr(desc, "0.conv fwd (images): fleet:amx")) {
            print_error("\"%s\": expected a space-to-depth first convolution:\n%s", cases[i].spec, desc);
            fail();
        }
        free(obs);
        fl_qnet_destroy(n);
    }
    const net_case_t plain[] = {
        {"conv(5,3,2,1)", 9, 8, 3, 2, 0}, {MINATAR, 10, 10, 4, 6, 0}, {"conv(4,3,2)", 7, 7, 2, 2, 0}};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        fl_qnet_t *n = make_net(&plain[i], 1);
        float *obs = calloc((size_t)fl_qnet_obs_dim(n), 4), q[6];
        assert_int_equal(fl_qnet_forward(n, obs, 1, q), FL_OK);
        char desc[2048];
        assert_true(fl_qnet_describe_kernels(n, 1, desc, sizeof desc) > 0);
        assert_null(strstr(desc, "space-to-depth"));
        free(obs);
        fl_qnet_destroy(n);
    }
}

static void test_dense(void **state) {
    NEED_DNNL();
    const net_case_t cases[] = {
        {"dense(5)", 0, 0, 3, 2, 0},
        {"dense(33) relu dense(17) relu", 0, 0, 9, 4, 0},
        {"relu dense(8) flatten relu dueling", 0, 0, 6, 3, 0},
        {"", 0, 0, 5, 3, 0},               /* a linear model: the head alone */
        {"dueling", 0, 0, 4, 6, 0},        /* a linear dueling head on the input */
        {"dense(12) relu", 5, 4, 3, 3, 0}, /* an image into a dense layer: channel-major as the reference */
        {"flatten dense(6) relu dueling", 3, 3, 2, 2, 0},
        {"conv(4,3,1) relu dense(9) relu", 6, 6, 2, 3, 255.0f}, /* the input scale, on an image */
        {"dense(8) relu", 0, 0, 4, 2, 10.0f},
    };
    const int batches[] = {6, 1, 3};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare(&cases[i], batches, 3);
}

/* ---- the benchmark networks ------------------------------------------------------------ */

static void test_nature(void **state) {
    NEED_DNNL();
    const net_case_t t = {NATURE, 84, 84, 4, 6, 0};
    const int batches[] = {32, 3, 32};
    compare(&t, batches, 3);
}

static void test_minatar(void **state) {
    NEED_DNNL();
    const net_case_t t = {MINATAR, 10, 10, 4, 6, 255.0f};
    const int batches[] = {32, 512, 1, 32};
    compare(&t, batches, 4);
}

static void test_mlp(void **state) {
    NEED_DNNL();
    const net_case_t t = {MLP, 0, 0, 4, 2, 0};
    const int batches[] = {128, 512, 128, 1};
    compare(&t, batches, 4);
}

/* A dense first layer over image observations (the MinAtar configs' MLP): the input edge
 * is planar (C, H, W), written and read back by one strided copy per channel. */
static void test_mlp_image(void **state) {
    NEED_DNNL();
    const net_case_t t = {"dense(128) relu dense(128) relu dueling", 10, 10, 4, 6, 255.0f};
    const int batches[] = {128, 1, 7};
    compare(&t, batches, 3);
}

/* A first dense layer over observations that are mostly 0 (kernels/dense_sparse.h): the
 * MinAtar configs' MLP at about 8% of its inputs set (Breakout sets at most 33 of 400),
 * a flatten before it, outputs past a multiple of 64 and of 8, fewer than 64, no relu,
 * vectors of -1, 0 and 1 (a layer of up to 32 outputs keeps dense_small's tiles); every second call on the same plans
 * at half of its inputs set, where the forward takes oneDNN's product and the weight gradient follows it. The plans say
 * which way each forward went. */
static void test_sparse_inputs(void **state) {
    NEED_DNNL();
    const net_case_t cases[] = {
        {"dense(128) relu dense(128) relu dueling", 10, 10, 4, 6, 255.0f},
        {"flatten dense(71) relu dueling", 10, 10, 7, 5, 255.0f},
        {"dense(130) dueling", 0, 0, 100, 3, 0},
        {"dense(40) relu dueling", 0, 0, 128, 3, 0},
    };
    const float density[] = {0.08f, 0.05f, 0.08f, 0.05f};
    const int batches[] = {128, 128, 1, 1, 7, 64};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare_at(&cases[i], batches, 6, density[i], 0.6f);
}

/* The sparse kernels against sums in double (the transposed weights exactly, inputs and
 * outputs past multiples of 8 included): every output tail (1, 7, 8, 64, 71, 130
 * outputs), rows with no input set, all set, NaN (listed) and -0 (not), with and without
 * relu; the lists' cap (one more entry than allowed gives -1); the weight gradient
 * written over a poisoned buffer (inputs no row lists get 0), and the same bits on one
 * thread and on two; the AVX2 versions and the plain-C ones. */
static void sparse_sums(void) {
    const int shapes[][3] = {{1, 1, 64}, {5, 7, 100}, {3, 8, 9}, {128, 64, 400}, {9, 71, 33}, {16, 130, 257}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int B = shapes[c][0], out = shapes[c][1], in = shapes[c][2];
        const size_t X = (size_t)B * in;
        float *x = calloc(X, 4), *w = malloc((size_t)out * in * 4), *wt = malloc((size_t)out * in * 4);
        float *bias = malloc((size_t)out * 4), *y = malloc((size_t)B * out * 4), *dy = malloc((size_t)B * out * 4);
        float *dw = malloc((size_t)out * in * 4), *dw1 = malloc((size_t)out * in * 4), *db = malloc((size_t)out * 4);
        float *val = malloc(X * 4), *cval = malloc(X * 4);
        int *start = malloc(((size_t)B + 1) * sizeof(int)), *col = malloc(X * sizeof(int));
        int *cstart = malloc(((size_t)in + 1) * sizeof(int)), *crow = malloc(X * sizeof(int));
        for (int r = 0; r < B; r++) /* row 0 empty; row 1 full; the rest about 1 in 8 */
            for (int k = 0; k < in; k++)
                if (r == 1 || (r > 1 && fl_rng_below(&g_rng, 8) == 0))
                    x[(size_t)r * in + k] = (float)fl_rng_uniform(&g_rng, -2, 2);
        if (B > 2) x[(size_t)2 * in] = -0.0f;
        fill(w, (size_t)out * in, -1, 1);
        fill(bias, (size_t)out, -1, 1);
        fill(dy, (size_t)B * out, -1, 1);
        int set = 0;
        for (size_t i = 0; i < X; i++) set += x[i] != 0.0f;
        assert_int_equal(fl_sparse_rows(x, B, in, set - 1, start, col, val), set ? -1 : 0);
        const int nnz = fl_sparse_rows(x, B, in, set, start, col, val);
        assert_int_equal(nnz, set);
        assert_int_equal(start[0], 0);
        assert_int_equal(start[B], nnz);
        for (int r = 0; r < B; r++)
            for (int j = start[r]; j < start[r + 1]; j++) {
                assert_true(j == start[r] || col[j] > col[j - 1]);
                assert_true(val[j] == x[(size_t)r * in + col[j]] && val[j] != 0.0f);
            }
        fl_dense_sparse_weights(w, wt, in, out);
        for (int o = 0; o < out; o++)
            for (int k = 0; k < in; k++) assert_true(wt[(size_t)k * out + o] == w[(size_t)o * in + k]);
        for (int relu = 0; relu < 2; relu++) {
            fl_dense_sparse_forward(start, col, val, wt, bias, y, B, out, relu);
            for (int r = 0; r < B; r++)
                for (int o = 0; o < out; o++) {
                    double s = bias[o];
                    for (int k = 0; k < in; k++) s += (double)w[(size_t)o * in + k] * x[(size_t)r * in + k];
                    if (relu && s < 0) s = 0;
                    assert_true(fabs(y[(size_t)r * out + o] - s) <= 1e-6 * (in + 1) * 2);
                }
        }
        memset(dw, 0xff, (size_t)out * in * 4);
        fl_dense_sparse_wgrad(start, col, val, nnz, dy, dw, db, B, in, out, cstart, crow, cval);
        for (int o = 0; o < out; o++) {
            double sb = 0;
            for (int r = 0; r < B; r++) sb += dy[(size_t)r * out + o];
            assert_true(fabs(db[o] - sb) <= 1e-6 * B);
            for (int k = 0; k < in; k++) {
                double s = 0;
                for (int r = 0; r < B; r++) s += (double)x[(size_t)r * in + k] * dy[(size_t)r * out + o];
                assert_true(fabs(dw[(size_t)o * in + k] - s) <= 1e-6 * B * 2);
            }
        }
#ifdef _OPENMP
        const int before = omp_get_max_threads();
        omp_set_num_threads(before == 1 ? 2 : 1);
        fl_dense_sparse_wgrad(start, col, val, nnz, dy, dw1, db, B, in, out, cstart, crow, cval);
        assert_memory_equal(dw1, dw, (size_t)out * in * 4);
        fl_dense_sparse_forward(start, col, val, wt, bias, dy, B, out, 1);
        assert_memory_equal(dy, y, (size_t)B * out * 4);
        omp_set_num_threads(before);
#endif
        /* NaN is listed (and reaches its row's outputs) */
        const int was_set = x[X - 1] != 0.0f;
        x[X - 1] = NAN;
        assert_int_equal(fl_sparse_rows(x, B, in, (int)X, start, col, val), set + !was_set);
        fl_dense_sparse_forward(start, col, val, wt, bias, y, B, out, 0);
        assert_true(isnan(y[(size_t)(B - 1) * out]));
        free(x), free(w), free(wt), free(bias), free(y), free(dy), free(dw), free(dw1), free(db), free(val), free(cval);
        free(start), free(col), free(cstart), free(crow);
    }
}

/* fl_sparse_rows_u8 against fl_sparse_rows over the planar floats the oneDNN backend's
 * copy makes of the same bytes (scale x (v x 1/255), (H, W, C) to (C, H, W)): the same
 * entries bit for bit, for 1 to 10 channels and 64 (its most), images of fewer and more
 * than 32 bytes, rows empty, full and about 1 in 8 set; scales of 1, 255, -1 (-0 is not
 * set), 0 and 1e-45 (values that round to 0, those of bytes under 128, are not set); the cap (one entry short gives
 * -1); and -2 where it does not apply (a scale not finite, 65 channels). */
static void sparse_rows_u8(void) {
    const int shapes[][3] = {{3, 10, 4}, {4, 37, 4}, {5, 1, 1}, {7, 33, 10}, {4, 9, 3}, {2, 13, 7}, {3, 5, 64}};
    const float scales[] = {1.0f, 255.0f, -1.0f, 0.0f, 1e-45f};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
            const int B = shapes[c][0], hw = shapes[c][1], C = shapes[c][2], in = hw * C;
            const float scale = scales[si];
            const size_t X = (size_t)B * in;
            unsigned char *u8 = calloc(X, 1);
            float *x = malloc(X * 4), *val = malloc(X * 4), *val8 = malloc(X * 4);
            int *start = malloc(((size_t)B + 1) * sizeof(int)), *start8 = malloc(((size_t)B + 1) * sizeof(int));
            int *col = malloc(X * sizeof(int)), *col8 = malloc(X * sizeof(int)),
                *tmp = malloc((size_t)in * sizeof(int));
            for (int r = 0; r < B; r++) /* row 0 empty; row 1 full; the rest about 1 in 8 */
                for (int k = 0; k < in; k++)
                    if (r == 1 || (r > 1 && fl_rng_below(&g_rng, 8) == 0))
                        u8[(size_t)r * in + k] = (unsigned char)(1 + fl_rng_below(&g_rng, 255));
            for (int r = 0; r < B; r++)
                for (int p = 0; p < hw; p++)
                    for (int ch = 0; ch < C; ch++)
                        x[(size_t)r * in + (size_t)ch * hw + p] =
                            scale * ((float)u8[(size_t)r * in + (size_t)p * C + ch] * (1.0f / 255.0f));
            const int nnz = fl_sparse_rows(x, B, in, (int)X, start, col, val);
            assert_int_equal(fl_sparse_rows_u8(u8, B, hw, C, scale, (int)X, start8, col8, val8, tmp), nnz);
            assert_memory_equal(start8, start, ((size_t)B + 1) * sizeof(int));
            assert_memory_equal(col8, col, (size_t)nnz * sizeof(int));
            assert_memory_equal(val8, val, (size_t)nnz * 4);
            if (nnz > 0) assert_int_equal(fl_sparse_rows_u8(u8, B, hw, C, scale, nnz - 1, start8, col8, val8, tmp), -1);
            int high = 0; /* bytes of 128 and more: 1e-45 x (v x 1/255) rounds up for them alone */
            for (size_t i = 0; i < X; i++) high += u8[i] >= 128;
            if (scale == 0.0f) assert_int_equal(nnz, 0);
            if (scale == 1e-45f) assert_int_equal(nnz, high);
            assert_int_equal(fl_sparse_rows_u8(u8, B, hw, C, NAN, (int)X, start8, col8, val8, tmp), -2);
            assert_int_equal(fl_sparse_rows_u8(u8, B, hw, C, INFINITY, (int)X, start8, col8, val8, tmp), -2);
            free(u8), free(x), free(val), free(val8), free(start), free(start8), free(col), free(col8), free(tmp);
        }
    unsigned char u8[65] = {1};
    int start[2], col[65], tmp[65];
    float val[65];
    assert_int_equal(fl_sparse_rows_u8(u8, 1, 1, 65, 1.0f, 65, start, col, val, tmp), -2);
}

static void test_sparse_sums(void **state) {
    (void)state;
    /* AVX-512 (where the CPU has it), AVX2 at most, and the plain-C versions, which CPUs
     * without AVX2 run */
    for (int level = 2; level >= 0; level--) {
        fl_dense_sparse_set_level(level);
        sparse_sums();
        sparse_rows_u8();
    }
    fl_dense_sparse_set_level(2);
}

/* A dense layer of >= 64K weights with long rows on batches of 4 to 16 runs fleet's own
 * forward (kernels/dense_small.h) where fl_dense_small_preferred (AVX2 without AVX-512): blocks of 3 outputs x 4 rows
 * with every tail (1027 inputs, not a multiple of 8; 67 outputs, not of 3; batches 1, 5, 16), relu fused; batch 17
 * takes oneDNN's inner product again. */
static void test_dense_small(void **state) {
    NEED_DNNL();
    const net_case_t t = {"dense(67) relu dense(5) dueling", 13, 79, 1, 4, 0};
    const int batches[] = {1, 5, 16, 17, 3};
    compare(&t, batches, 5);
}

/* dense_small against sums in double, on every tail: rows of 4 and fewer, 3 outputs and
 * fewer, inputs not a multiple of 8, with and without relu. */
static void test_dense_small_sums(void **state) {
    (void)state;
    /* the kernels run on any CPU with AVX2 and FMA (backends pick them only without AVX-512) */
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) skip();
    const int shapes[][3] = {{1, 1, 1}, {4, 3, 8}, {5, 7, 1027}, {16, 67, 1031}, {7, 2, 13}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int B = shapes[c][0], out = shapes[c][1], in = shapes[c][2];
        float *x = malloc((size_t)B * in * 4), *w = malloc((size_t)out * in * 4), *bias = malloc((size_t)out * 4);
        float *y = malloc((size_t)B * out * 4);
        fill(x, (size_t)B * in, -1, 1);
        fill(w, (size_t)out * in, -1, 1);
        fill(bias, (size_t)out, -1, 1);
        for (int relu = 0; relu < 2; relu++) {
            fl_dense_small_forward(x, w, bias, y, B, in, out, relu);
            for (int b = 0; b < B; b++)
                for (int o = 0; o < out; o++) {
                    double s = bias[o];
                    for (int k = 0; k < in; k++) s += (double)w[(size_t)o * in + k] * x[(size_t)b * in + k];
                    if (relu && s < 0) s = 0;
                    assert_true(fabs(y[(size_t)b * out + o] - s) <= 1e-5 * (in + 1));
                }
        }
        free(x), free(w), free(bias), free(y);
    }
}

/* Dense layers with short rows (up to 16 inputs: an MLP's first layer over a vector
 * observation) run fleet's own forward where fl_dense_small_preferred, and ones with up
 * to 32 outputs (a dueling head, 1 + A of them) where fl_dense_small_supported (the plan
 * says so): kernels/dense_small.h's dense_thin and dense_small. Every tail: 1, 4, 16 and 17 inputs (17 takes oneDNN's
 * inner product again), outputs not a multiple of 16 or of 8, relu fused or not, batches
 * not a multiple of 6 (dense_thin's tiles) or of 4 (dense_small's); heads of 32 outputs
 * (31 actions) and of 33 (oneDNN's again). */
static void test_dense_thin(void **state) {
    NEED_DNNL();
    const net_case_t cases[] = {
        {"dense(37) relu dense(16) relu dueling", 0, 0, 4, 3, 0},
        {"dense(8) dense(23) relu", 0, 0, 1, 2, 0},
        {"dense(51) relu dueling", 0, 0, 16, 31, 0},
        {"dense(50) relu dueling", 0, 0, 17, 32, 0},
        {"dense(19) relu", 2, 2, 4, 5, 255.0f}, /* an image of 16 values into a dense layer */
    };
    const int batches[] = {1, 4, 5, 64, 7};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare(&cases[i], batches, 5);
    /* the heads: dense_small on any CPU with AVX2 and FMA, AVX-512 too, up to 32 outputs */
    if (!fl_dense_small_supported()) return;
    for (size_t i = 2; i < 4; i++) {
        fl_qnet_t *n = make_net(&cases[i], 64);
        float *obs = calloc((size_t)64 * fl_qnet_obs_dim(n), 4), *q = malloc((size_t)64 * cases[i].actions * 4);
        assert_int_equal(fl_qnet_forward(n, obs, 64, q), FL_OK);
        char desc[4096];
        assert_true(fl_qnet_describe_kernels(n, 64, desc, sizeof desc) > 0);
        if ((strstr(desc, "head fwd (small batch): fleet:") != NULL) != (i == 2)) {
            print_error("\"%s\": the head %s dense_small:\n%s", cases[i].spec, i == 2 ? "did not run on" : "ran on",
                        desc);
            fail();
        }
        free(obs), free(q);
        fl_qnet_destroy(n);
    }
}

/* On AVX-512, from batch 128 (a learner's) a dense layer of 9 to 1,023 inputs and a
 * multiple of 32 outputs, not a head and not the first over the observations, runs
 * fleet's AVX-512 tiles: against the reference at batches 127, 128, 133 (the last tile of
 * 6 rows partly filled) and 1, and the plan at 133 says so, the one at 127 not. */
static void test_dense_mid(void **state) {
    NEED_DNNL();
    const net_case_t t = {"dense(40) relu dense(64) relu dueling", 0, 0, 12, 5, 0};
    const int batches[] = {127, 128, 133, 1};
    compare(&t, batches, 4);
    if (!__builtin_cpu_supports("avx512f")) return;
    fl_qnet_t *n = make_net(&t, 133);
    float *obs = calloc((size_t)133 * fl_qnet_obs_dim(n), 4), *q = malloc((size_t)133 * 5 * 4);
    for (int B = 127; B <= 133; B += 6) {
        assert_int_equal(fl_qnet_forward(n, obs, B, q), FL_OK);
        char desc[4096];
        assert_true(fl_qnet_describe_kernels(n, B, desc, sizeof desc) > 0);
        if ((strstr(desc, "2.dense fwd (tiles): fleet:avx512") != NULL) != (B == 133)) {
            print_error("batch %d: the second dense layer %s the tiles:\n%s", B, B == 133 ? "did not run on" : "ran on",
                        desc);
            fail();
        }
    }
    free(obs), free(q);
    fl_qnet_destroy(n);
}

/* dense_thin against sums in double: batches in one tile of 6 rows and fewer and in
 * more, outputs past 16 and 8, with and without relu; a row's results do not depend on
 * the rows beside it in its tile (the same sums in the same order when it is alone). */
static void test_dense_thin_sums(void **state) {
    (void)state;
    /* the kernels run on any CPU with AVX2 and FMA (backends pick them only without AVX-512) */
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) skip();
    const int shapes[][3] = {{1, 1, 1}, {4, 16, 4}, {5, 37, 3}, {9, 256, 16}, {3, 7, 2}, {8, 25, 5}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int B = shapes[c][0], out = shapes[c][1], in = shapes[c][2];
        float *x = malloc((size_t)B * in * 4), *w = malloc((size_t)out * in * 4),
              *wt = malloc(fl_dense_thin_weights_size(in, out) * 4);
        float *bias = malloc((size_t)out * 4), *y = malloc((size_t)B * out * 4), *y1 = malloc((size_t)out * 4);
        fill(x, (size_t)B * in, -1, 1);
        fill(w, (size_t)out * in, -1, 1);
        fill(bias, (size_t)out, -1, 1);
        fl_dense_thin_weights(w, wt, in, out);
        for (int relu = 0; relu < 2; relu++) {
            fl_dense_thin_forward(x, wt, bias, y, B, in, out, relu);
            for (int b = 0; b < B; b++) {
                fl_dense_thin_forward(x + (size_t)b * in, wt, bias, y1, 1, in, out, relu);
                assert_memory_equal(y1, y + (size_t)b * out, (size_t)out * 4);
                for (int o = 0; o < out; o++) {
                    double s = bias[o];
                    for (int k = 0; k < in; k++) s += (double)w[(size_t)o * in + k] * x[(size_t)b * in + k];
                    if (relu && s < 0) s = 0;
                    assert_true(fabs(y[(size_t)b * out + o] - s) <= 1e-6 * (in + 1));
                }
            }
        }
        free(x), free(w), free(wt), free(bias), free(y), free(y1);
    }
}

/* Convolutions and large dense layers on fleet's own forward tiles (kernels/conv_fwd.h),
 * on the CPUs that take them: against the reference (the forward on tiles, the
 * convolutions' parameter gradients on tiles, the rest of the backward on oneDNN) with
 * the input read channels-last, blocked by 8 with 16 and with 12 input
 * channels (a padded block), strides 1, 2 and 3, 16 to 48 output channels, relu fused,
 * not fused and absent, the space-to-depth first convolution, a dense layer of 1,024
 * inputs, alone and after a convolution; batches whose pixels fill their 6-pixel tiles
 * and do not. The plans say that the tiles ran. */
static void test_tiles(void **state) {
    NEED_DNNL();
    const struct {
        net_case_t net;
        const char *expect, *expect_bwd; /* lines the plan at batch 7 has where the CPU takes the tiles */
    } cases[] = {
        {{"conv(16,3,1) relu conv(32,3,2) relu flatten dense(10)", 9, 9, 3, 4, 0},
         "2.conv fwd (tiles)",
         "2.conv bwd weights (tiles)"},
        {{"conv(12,3,1) relu conv(16,2,1) relu relu dueling", 7, 8, 2, 3, 0},
         "2.conv fwd (tiles)",
         "2.conv bwd weights (tiles)"},
        {{"conv(48,4,3) conv(16,1,1) relu flatten dense(5)", 10, 10, 2, 2, 0},
         "0.conv fwd (tiles)",
         "0.conv bwd weights (tiles)"},
        {{"conv(32,4,2) relu conv(16,3,1) relu flatten", 14, 14, 2, 3, 255.0f},
         "0.conv fwd (space-to-depth, tiles)",
         "0.conv bwd weights (space-to-depth, tiles)"},
        {{"dense(64) relu dueling", 0, 0, 1024, 3, 0}, "0.dense fwd (tiles)", "0.dense fwd (tiles)"},
        {{"conv(16,3,1) relu flatten dense(64) relu dueling", 10, 10, 4, 5, 0},
         "3.dense fwd (tiles)",
         "0.conv bwd weights (tiles)"},
    };
    const int batches[] = {7, 1, 5, 13, 64};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        compare(&cases[i].net, batches, 5);
        if (!fl_dense_small_preferred()) continue;
        fl_qnet_t *n = make_net(&cases[i].net, 7);
        float *obs = calloc((size_t)7 * fl_qnet_obs_dim(n), 4), q[7 * 5], dq[7 * 5] = {0};
        assert_int_equal(fl_qnet_forward(n, obs, 7, q), FL_OK);
        assert_int_equal(fl_qnet_backward(n, dq, 7), FL_OK);
        char desc[4096];
        assert_true(fl_qnet_describe_kernels(n, 7, desc, sizeof desc) > 0);
        if (!strstr(desc, cases[i].expect) || !strstr(desc, cases[i].expect_bwd)) {
            print_error("\"%s\": expected \"%s\" and \"%s\" in the plan:\n%s", cases[i].net.spec, cases[i].expect,
                        cases[i].expect_bwd, desc);
            fail();
        }
        free(obs);
        fl_qnet_destroy(n);
    }
}

/* A layout of (B, C, H, W): blocked by blk channels, or channels-last (blk 0). */
static fl_conv_layout_t tile_layout(int C, int H, int W, int blk) {
    if (!blk) return (fl_conv_layout_t){{(long)H * W * C, 1, (long)W * C, C}, 1};
    const long CB = (C + blk - 1) / blk;
    return (fl_conv_layout_t){{CB * blk * H * W, (long)blk * H * W, (long)blk * W, blk}, blk};
}

static long tile_at(const fl_conv_layout_t *l, int n, int c, int h, int w) {
    return n * l->st[0] + c / l->blk * l->st[1] + h * l->st[2] + w * l->st[3] + c % l->blk;
}

/* fl_conv_fwd against sums in double, in the layouts the oneDNN backend meets (blocked by
 * 8 or 16, channels-last; a padded input block), strides 1 to 3, a 1 x 1 kernel, with
 * and without relu; every image's outputs the same bits alone as in its batch, and on 1
 * thread as on 2; the parameter gradients (fl_conv_fwd_wgrad) against sums in double
 * too, the same bits on 1 thread as on 2; unsupported geometries refused. */
typedef struct tile_case {
    int B, cin, h, w, cout, k, stride, in_blk, out_blk;
} tile_case_t;

/* One geometry of fl_conv_fwd (case c of a test's list): the forward, and with wgrad the
 * parameter gradients, checked as said above. */
static void tile_case(size_t c, const tile_case_t *tc, int wgrad) {
    const int B = tc->B, C = tc->cin, O = tc->cout, k = tc->k, st = tc->stride;
    const int oh = (tc->h - k) / st + 1, ow = (tc->w - k) / st + 1;
    fl_conv_fwd_geom_t g = {B,
                            C,
                            tc->h,
                            tc->w,
                            O,
                            oh,
                            ow,
                            k,
                            st,
                            tile_layout(C, tc->h, tc->w, tc->in_blk),
                            tile_layout(O, oh, ow, tc->out_blk)};
    fl_conv_fwd_t *t = fl_conv_fwd_create(&g);
    assert_non_null(t);
    g.batch = 1;
    fl_conv_fwd_t *t1 = fl_conv_fwd_create(&g);
    assert_non_null(t1);
    const size_t xn = (size_t)B * g.in.st[0], yn = (size_t)B * g.out.st[0], wn = (size_t)O * C * k * k;
    float *x = calloc(xn, 4), *w = malloc(wn * 4), *wt = malloc(fl_conv_fwd_weights_size(t) * 4);
    float *bias = malloc((size_t)O * 4), *y = malloc(yn * 4), *y1 = malloc(yn * 4), *y2 = malloc(yn * 4);
    fill(x, xn, -1, 1); /* the padding of a block too: the tiles must not read it */
    fill(w, wn, -1, 1);
    fill(bias, (size_t)O, -1, 1);
    fl_conv_fwd_weights(t, w, wt);
    for (int relu = 0; relu < 2; relu++) {
        memset(y, 0, yn * 4);
        fl_conv_fwd_run(t, x, wt, bias, y, relu);
        for (int n = 0; n < B; n++)
            for (int o = 0; o < O; o++)
                for (int i = 0; i < oh; i++)
                    for (int j = 0; j < ow; j++) {
                        double sum = bias[o];
                        for (int ci = 0; ci < C; ci++)
                            for (int a = 0; a < k; a++)
                                for (int b = 0; b < k; b++)
                                    sum += (double)w[(((size_t)o * C + ci) * k + a) * k + b] *
                                           x[tile_at(&g.in, n, ci, i * st + a, j * st + b)];
                        if (relu && sum < 0) sum = 0;
                        const float got = y[tile_at(&g.out, n, o, i, j)];
                        if (!(fabs(got - sum) <= 1e-6 * (C * k * k + 1))) {
                            print_error("case %zu: y(%d, %d, %d, %d) = %.9g, expected %.9g\n", c, n, o, i, j, got, sum);
                            fail();
                        }
                    }
        memset(y1, 0, yn * 4);
        for (int n = 0; n < B; n++) fl_conv_fwd_run(t1, x + n * g.in.st[0], wt, bias, y1 + n * g.out.st[0], relu);
        assert_memory_equal(y1, y, yn * 4);
#ifdef _OPENMP
        const int threads = omp_get_max_threads();
        omp_set_num_threads(threads == 1 ? 2 : 1);
        memset(y2, 0, yn * 4);
        fl_conv_fwd_run(t, x, wt, bias, y2, relu);
        omp_set_num_threads(threads);
        assert_memory_equal(y2, y, yn * 4);
#endif
    }
    /* the parameter gradients for an output gradient dy (y2's buffer) */
    float *dy = y2, *dw = malloc(wn * 4), *db = malloc((size_t)O * 4), *dw2 = malloc(wn * 4),
          *db2 = malloc((size_t)O * 4);
    if (!wgrad) goto done;
    fill(dy, yn, -1, 1);
    fl_conv_fwd_wgrad(t, x, dy, dw, db);
    for (int o = 0; o < O; o++) {
        double sb = 0;
        for (int n = 0; n < B; n++)
            for (int i = 0; i < oh; i++)
                for (int j = 0; j < ow; j++) sb += dy[tile_at(&g.out, n, o, i, j)];
        assert_true(fabs(db[o] - sb) <= 1e-6 * (B * oh * ow + 1));
        for (int ci = 0; ci < C; ci++)
            for (int a = 0; a < k; a++)
                for (int b = 0; b < k; b++) {
                    double sw = 0;
                    for (int n = 0; n < B; n++)
                        for (int i = 0; i < oh; i++)
                            for (int j = 0; j < ow; j++)
                                sw += (double)dy[tile_at(&g.out, n, o, i, j)] *
                                      x[tile_at(&g.in, n, ci, i * st + a, j * st + b)];
                    const float got = dw[(((size_t)o * C + ci) * k + a) * k + b];
                    if (!(fabs(got - sw) <= 1e-6 * (B * oh * ow + 1))) {
                        print_error("case %zu: dw(%d, %d, %d, %d) = %.9g, expected %.9g\n", c, o, ci, a, b, got, sw);
                        fail();
                    }
                }
    }
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
    omp_set_num_threads(threads == 1 ? 2 : 1);
    fl_conv_fwd_wgrad(t, x, dy, dw2, db2);
    omp_set_num_threads(threads);
    assert_memory_equal(dw2, dw, wn * 4);
    assert_memory_equal(db2, db, (size_t)O * 4);
#endif
done:
    fl_conv_fwd_destroy(t);
    fl_conv_fwd_destroy(t1);
    free(x), free(w), free(wt), free(bias), free(y), free(y1), free(y2), free(dw), free(db), free(dw2), free(db2);
}

/* Every test after test_tiles_sums takes the tiles its CPU takes, even if it failed. */
static int unforce_avx2(void **state) {
    (void)state;
    fl_conv_fwd_force_avx2(0);
    return 0;
}

static void test_tiles_sums(void **state) {
    (void)state;
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) skip();
    fl_conv_fwd_force_avx2(1); /* on AVX-512 CPUs too */
    const tile_case_t cases[] = {
        {3, 64, 6, 5, 32, 2, 1, 8, 8},  {2, 12, 7, 7, 16, 3, 2, 8, 16}, {5, 3, 9, 8, 48, 3, 3, 0, 8},
        {1, 16, 4, 4, 16, 4, 1, 16, 0}, {4, 40, 1, 1, 32, 1, 1, 0, 0},  {2, 8, 5, 7, 16, 1, 2, 8, 8},
        {2, 12, 5, 6, 16, 2, 1, 8, 8},  {3, 8, 12, 12, 16, 2, 1, 8, 8}, /* the last: pixels in 3 chunks */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) tile_case(c, &cases[c], 1);
    /* refused: 8 output channels; an output that does not fit; a channels-first input */
    fl_conv_fwd_geom_t bad = {1, 4, 5, 5, 8, 3, 3, 3, 1, tile_layout(4, 5, 5, 0), tile_layout(8, 3, 3, 8)};
    assert_null(fl_conv_fwd_create(&bad));
    bad.cout = 16, bad.out = tile_layout(16, 3, 3, 8), bad.out_h = 4;
    assert_null(fl_conv_fwd_create(&bad));
    bad.out_h = 3, bad.in = (fl_conv_layout_t){{100, 25, 5, 1}, 1};
    assert_null(fl_conv_fwd_create(&bad));
    bad.in = tile_layout(4, 5, 5, 0);
    fl_conv_fwd_t *ok = fl_conv_fwd_create(&bad);
    assert_non_null(ok);
    assert_int_equal(fl_conv_fwd_wide(ok), 0);
    fl_conv_fwd_destroy(ok);
    fl_conv_fwd_force_avx2(0);
}

/* The AVX-512 tiles (kernels/conv_fwd.h), for convolutions of at most 8 input channels,
 * or more and a multiple of 32 output channels, on CPUs with AVX-512: the forward checked
 * as test_tiles_sums checks the AVX2 ones (sums in double, each image alone as in its
 * batch, 1 thread as 2), inputs channels-last and blocked by 16, outputs blocked by 16 and
 * channels-last, 1 to 64 input channels, 16 to 128 output channels, strides 1 to 3, pixels
 * that fill their tiles and do not; with more than 8 input channels the parameter
 * gradients too (sums in double, 1 thread as 2); refused with 9 input channels and 16 or
 * 48 output channels, or outputs blocked by 8. In a network (MinAtar's first
 * layer): the plan runs its forward on the tiles and its weight gradient on oneDNN, and
 * forward and backward match the reference at batches 1 to 64. */
static void test_wide_tiles(void **state) {
    (void)state;
    if (!__builtin_cpu_supports("avx512f")) skip();
    const tile_case_t cases[] = {
        {3, 4, 10, 10, 16, 3, 1, 0, 0},
        {2, 4, 10, 10, 16, 3, 1, 0, 16},
        {5, 1, 9, 8, 48, 3, 3, 0, 16},
        {1, 8, 7, 7, 32, 2, 2, 16, 16},
        {4, 3, 6, 5, 16, 1, 1, 0, 0},
        {3, 6, 12, 11, 16, 4, 2, 16, 0},
        {7, 2, 5, 5, 16, 5, 1, 0, 16}, /* 7 pixels: one partial tile */
        /* more input channels: 6 pixels x 64 channels, 10 x 32; partial tiles */
        {3, 32, 9, 9, 64, 4, 2, 16, 16},
        {2, 64, 9, 9, 64, 3, 1, 16, 16},
        {3, 16, 7, 6, 32, 3, 1, 16, 0},
        {2, 9, 8, 9, 96, 2, 2, 0, 16},
        {1, 48, 5, 5, 128, 1, 1, 16, 16},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const tile_case_t *tc = &cases[c];
        const int oh = (tc->h - tc->k) / tc->stride + 1, ow = (tc->w - tc->k) / tc->stride + 1;
        const fl_conv_fwd_geom_t g = {tc->B,
                                      tc->cin,
                                      tc->h,
                                      tc->w,
                                      tc->cout,
                                      oh,
                                      ow,
                                      tc->k,
                                      tc->stride,
                                      tile_layout(tc->cin, tc->h, tc->w, tc->in_blk),
                                      tile_layout(tc->cout, oh, ow, tc->out_blk)};
        fl_conv_fwd_t *t = fl_conv_fwd_create(&g);
        assert_non_null(t);
        assert_int_equal(fl_conv_fwd_wide(t), !fl_dense_small_preferred());
        const int wgrad = fl_conv_fwd_has_wgrad(t);
        assert_int_equal(wgrad, tc->cin > FL_CONV_FWD_WIDE_CIN || fl_dense_small_preferred());
        fl_conv_fwd_destroy(t);
        tile_case(c, tc, wgrad);
    }
    fl_conv_fwd_geom_t bad = {2, 9, 10, 10, 16, 8, 8, 3, 1, tile_layout(9, 10, 10, 0), tile_layout(16, 8, 8, 0)};
    assert_null(fl_conv_fwd_create(&bad)); /* 9 input channels, 16 output channels */
    bad.cout = 48, bad.out = tile_layout(48, 8, 8, 0);
    assert_null(fl_conv_fwd_create(&bad));
    bad.cin = 8, bad.in = tile_layout(8, 10, 10, 0), bad.out = tile_layout(16, 8, 8, 8);
    assert_null(fl_conv_fwd_create(&bad));

    NEED_DNNL();
    const net_case_t net = {MINATAR, 10, 10, 4, 6, 0};
    const int batches[] = {7, 1, 5, 13, 64};
    compare(&net, batches, 5);
    fl_qnet_t *n = make_net(&net, 7);
    float *obs = calloc((size_t)7 * fl_qnet_obs_dim(n), 4), q[7 * 6], dq[7 * 6] = {0};
    assert_int_equal(fl_qnet_forward(n, obs, 7, q), FL_OK);
    assert_int_equal(fl_qnet_backward(n, dq, 7), FL_OK);
    char desc[4096];
    assert_true(fl_qnet_describe_kernels(n, 7, desc, sizeof desc) > 0);
    if (!strstr(desc, "0.conv fwd (tiles)") || strstr(desc, "0.conv bwd weights (tiles)")) {
        print_error("expected the first convolution's forward on tiles, its weight gradient on oneDNN:\n%s", desc);
        fail();
    }
    free(obs);
    fl_qnet_destroy(n);
}

/* fl_conv_img (kernels/conv_fwd.h), the first convolution over the observations as they
 * come, on CPUs with AVX-512: uint8 (x 1/255) and float images times a scale, against sums
 * in double of the values the observations' copy would make; outputs blocked by 16 and
 * channels-last; 16, 32, 64 and 96 output channels (tiles of 10 pixels x 16 or 32 channels, 6 x
 * 64); output rows that fill their tiles and rows that end in a partial one; each image
 * alone gives the bits it gives in its batch, and 1 thread those of 2. Its parameter
 * gradients over the same images (fl_conv_img_wgrad) against sums in double, 1 thread
 * giving the bits of 2. All of it with the forward on AMX's tiles (where the CPU has them:
 * then the convolution says so) and without; kernel rows of 64 and 40 values too; and
 * the products exact (image_conv_exact); 16 output channels (tiles of 10 pixels x 16).
 * Refused: 48 output channels, a kernel row that does not fit the tile's buffer. */
typedef struct img_case {
    int B, h, w, c, cout, k, stride, out_blk;
    float scale;
} img_case_t;

/* The CPU has AMX-BF16 and AMX-TILE (and AVX-512 BW and BF16), Linux grants this process
 * their state, and FLEET_AMX=0 is not in the environment. */
static int cpu_has_amx(void) {
#if defined(__x86_64__) && defined(__linux__)
    unsigned a, b, c, d;
    const char *env = getenv("FLEET_AMX");
    unsigned a1, b1, c1, d1;
    return !(env && strcmp(env, "0") == 0) && __builtin_cpu_supports("avx512bw") &&
           __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1) &&
           __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 >> 5 & 1) && /* AVX512-BF16 */
           syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return 0;
#endif
}

/* The AMX forward's products are exact: one weight not 0 per output, of 24 significant
 * bits, so that each output is bias + scale/255 x value x w, within a few roundings of
 * fp32 (as the AVX-512 tiles give it): a piece of the weight lost would be off by 2^-17.
 * So are the weight gradient's, with one output gradient not 0 per output. */
static void image_conv_exact(const fl_conv_fwd_geom_t *g, float scale) {
    fl_conv_img_t *t = fl_conv_img_create(g);
    assert_non_null(t);
    const int C = g->cin, k = g->k, O = g->cout;
    const size_t D = (size_t)g->in_h * g->in_w * C, wn = (size_t)O * C * k * k, yn = (size_t)g->batch * g->out.st[0];
    unsigned char *u8 = malloc(D * g->batch);
    float *w = calloc(wn, 4), *wt = malloc(fl_conv_img_weights_size(t) * 4), *bias = calloc((size_t)O, 4);
    float *y = malloc(yn * 4);
    for (size_t i = 0; i < D * g->batch; i++) u8[i] = (unsigned char)fl_rng_below(&g_rng, 256);
    for (int o = 0; o < O; o++) {
        const int c = o % C, a = o / C % k, b = o / C / k % k;
        const float v = ldexpf(1.0f + (float)fl_rng_below(&g_rng, 1u << 23) / (float)(1u << 23), -(o % 7));
        w[(((size_t)o * C + c) * k + a) * k + b] = o % 2 ? -v : v;
    }
    fl_conv_img_weights(t, w, wt);
    fl_conv_img_run(t, u8, NULL, scale, wt, bias, y, 0);
    for (int n = 0; n < g->batch; n++)
        for (int o = 0; o < O; o++)
            for (int i = 0; i < g->out_h; i++)
                for (int j = 0; j < g->out_w; j++) {
                    const int c = o % C, a = o / C % k, b = o / C / k % k;
                    const size_t at =
                        (size_t)n * D + ((size_t)(i * g->stride + a) * g->in_w + j * g->stride + b) * C + c;
                    const double want = (double)scale / 255.0 * u8[at] * w[(((size_t)o * C + c) * k + a) * k + b];
                    const float got = y[tile_at(&g->out, n, o, i, j)];
                    if (!(fabs(got - want) <= ldexp(fabs(want), -21))) {
                        print_error("exact products (%s): y(%d, %d, %d, %d) = %.9g, expected %.9g\n",
                                    fl_conv_img_amx(t) ? "AMX" : "AVX-512", n, o, i, j, got, want);
                        fail();
                    }
                }
    /* the weight gradient's products too: one pixel's output gradient not 0 per output,
     * of 24 significant bits, so that each dw is one product, scale/255 x value x dy */
    float *dy = calloc(yn, 4), *dw = malloc(wn * 4), *db = malloc((size_t)O * 4), *v = malloc((size_t)O * 4);
    const int P = g->out_h * g->out_w;
    for (int o = 0; o < O; o++) {
        v[o] = ldexpf(1.0f + (float)fl_rng_below(&g_rng, 1u << 23) / (float)(1u << 23), -(o % 5));
        dy[tile_at(&g->out, 0, o, o % P / g->out_w, o % P % g->out_w)] = o % 3 ? v[o] : -v[o];
    }
    assert_int_equal(fl_conv_img_wgrad(t, u8, NULL, scale, dy, NULL, dw, db), 0);
    for (int o = 0; o < O; o++)
        for (int c = 0; c < C; c++)
            for (int a = 0; a < k; a++)
                for (int b = 0; b < k; b++) {
                    const int i = o % P / g->out_w, j = o % P % g->out_w;
                    const size_t at = ((size_t)(i * g->stride + a) * g->in_w + j * g->stride + b) * C + c;
                    const double want = (double)scale / 255.0 * u8[at] * (o % 3 ? v[o] : -v[o]);
                    const float got = dw[(((size_t)o * C + c) * k + a) * k + b];
                    if (!(fabs(got - want) <= ldexp(fabs(want), -21))) {
                        print_error("exact products (%s): dw(%d, %d, %d, %d) = %.9g, expected %.9g\n",
                                    fl_conv_img_amx(t) ? "AMX" : "AVX-512", o, c, a, b, got, want);
                        fail();
                    }
                }
    free(dy), free(dw), free(db), free(v);
    free(u8), free(w), free(wt), free(bias), free(y);
    fl_conv_img_destroy(t);
}

static void test_image_conv(void **state) {
    (void)state;
    if (!__builtin_cpu_supports("avx512f")) skip();
    const img_case_t cases[] = {
        {3, 84, 84, 4, 32, 8, 4, 16, 1.0f}, /* the Nature CNN's: 20 x 20 outputs, two tiles a row */
        {2, 30, 27, 4, 32, 4, 2, 0, 2.0f},  /* 13 x 12: a partial tile a row */
        {2, 13, 17, 3, 64, 4, 2, 16, 1.0f},
        {1, 9, 9, 1, 96, 3, 3, 16, 0.5f},
        {4, 11, 40, 2, 64, 5, 1, 0, 1.0f},
        /* for AMX: kernel rows of 64 and of 40 values (two steps of 32, the second part
         * zeros); 22 outputs a row (two blocks of 11), 3 rows (an even count of blocks) */
        {2, 20, 20, 8, 32, 8, 4, 16, 1.0f},
        {1, 12, 50, 5, 32, 8, 2, 0, 3.0f},
        /* 16 output channels (the 2013 DQN's first convolution; tiles of 10 pixels x 16
         * channels, never on AMX): blocked by 16 and channels-last, two tiles a row, a
         * partial one, two whole and a partial one */
        {3, 84, 84, 4, 16, 8, 4, 16, 1.0f},
        {2, 30, 27, 3, 16, 4, 2, 0, 2.0f},
        {1, 12, 100, 2, 16, 8, 4, 16, 1.0f},
    };
    const size_t ncases = sizeof cases / sizeof cases[0];
    for (size_t run = 0; run < 2 * ncases; run++) { /* without AMX, then with it where the CPU has it */
        const int amx = run >= ncases;
        const size_t ci = run % ncases;
        fl_conv_img_disable_amx(!amx);
        const img_case_t *tc = &cases[ci];
        const int B = tc->B, C = tc->c, O = tc->cout, k = tc->k, st = tc->stride;
        const int oh = (tc->h - k) / st + 1, ow = (tc->w - k) / st + 1;
        fl_conv_fwd_geom_t g = {B, C, tc->h, tc->w, O, oh, ow, k, st, {{0}, 0}, tile_layout(O, oh, ow, tc->out_blk)};
        fl_conv_img_t *t = fl_conv_img_create(&g);
        assert_non_null(t);
        assert_int_equal(fl_conv_img_amx(t), amx && cpu_has_amx() && O % 32 == 0);
        image_conv_exact(&g, tc->scale);
        g.batch = 1;
        fl_conv_img_t *t1 = fl_conv_img_create(&g);
        assert_non_null(t1);
        const size_t D = (size_t)tc->h * tc->w * C, xn = (size_t)B * D, yn = (size_t)B * g.out.st[0];
        const size_t wn = (size_t)O * C * k * k;
        unsigned char *u8 = malloc(xn);
        float *f = malloc(xn * 4), *w = malloc(wn * 4), *wt = malloc(fl_conv_img_weights_size(t) * 4);
        float *bias = malloc((size_t)O * 4), *y = malloc(yn * 4), *y1 = malloc(yn * 4), *y2 = malloc(yn * 4);
        for (size_t i = 0; i < xn; i++) u8[i] = (unsigned char)fl_rng_below(&g_rng, 256);
        fill(f, xn, -2, 2);
        fill(w, wn, -1, 1);
        fill(bias, (size_t)O, -1, 1);
        fl_conv_img_weights(t, w, wt);
        for (int kind = 0; kind < 4; kind++) { /* uint8 or float, relu or not */
            const int use_u8 = kind < 2, relu = kind % 2;
            memset(y, 0, yn * 4);
            fl_conv_img_run(t, use_u8 ? u8 : NULL, f, tc->scale, wt, bias, y, relu);
            for (int n = 0; n < B; n++)
                for (int o = 0; o < O; o++)
                    for (int i = 0; i < oh; i++)
                        for (int j = 0; j < ow; j++) {
                            double sum = bias[o];
                            for (int c = 0; c < C; c++)
                                for (int a = 0; a < k; a++)
                                    for (int b = 0; b < k; b++) {
                                        const size_t at =
                                            (size_t)n * D + ((size_t)(i * st + a) * tc->w + j * st + b) * C + c;
                                        const float v =
                                            use_u8 ? tc->scale * ((float)u8[at] * (1.0f / 255.0f)) : tc->scale * f[at];
                                        sum += (double)w[(((size_t)o * C + c) * k + a) * k + b] * v;
                                    }
                            if (relu && sum < 0) sum = 0;
                            const float got = y[tile_at(&g.out, n, o, i, j)];
                            if (!(fabs(got - sum) <= 1e-6 * (C * k * k + 1) * (1 + 2 * tc->scale))) {
                                print_error("case %zu (%s): y(%d, %d, %d, %d) = %.9g, expected %.9g\n", ci,
                                            use_u8 ? "uint8" : "float", n, o, i, j, got, sum);
                                fail();
                            }
                        }
            memset(y1, 0, yn * 4);
            for (int n = 0; n < B; n++)
                fl_conv_img_run(t1, use_u8 ? u8 + n * D : NULL, f + n * D, tc->scale, wt, bias, y1 + n * g.out.st[0],
                                relu);
            assert_memory_equal(y1, y, yn * 4);
#ifdef _OPENMP
            const int threads = omp_get_max_threads();
            omp_set_num_threads(threads == 1 ? 2 : 1);
            memset(y2, 0, yn * 4);
            fl_conv_img_run(t, use_u8 ? u8 : NULL, f, tc->scale, wt, bias, y2, relu);
            omp_set_num_threads(threads);
            assert_memory_equal(y2, y, yn * 4);
#endif
        }
        /* the parameter gradients over the same images, for an output gradient dy (y's
         * buffer), with relu's mask of a forward's outputs ry (y1's buffer, a quarter of
         * them 0) or without: against sums in double, and the same bits on 1 thread as on
         * 2; dy is not written */
        float *dy = y, *ry = y1, *dw = malloc(wn * 4), *db = malloc((size_t)O * 4), *dw2 = malloc(wn * 4),
              *db2 = malloc((size_t)O * 4), *dy0 = malloc(yn * 4);
        fill(dy, yn, -1, 1);
        fill(ry, yn, -1, 1);
        for (size_t i = 0; i < yn; i += 4) ry[i] = 0;
        memcpy(dy0, dy, yn * 4);
        for (int kind = 0; kind < 4; kind++) {
            const int use_u8 = kind % 2;
            const float *mask = kind < 2 ? NULL : ry;
#define DY_EFF(at) (mask && !(mask[at] > 0) ? 0.0 : (double)dy[at])
            assert_int_equal(fl_conv_img_wgrad(t, use_u8 ? u8 : NULL, f, tc->scale, dy, mask, dw, db), 0);
            assert_memory_equal(dy, dy0, yn * 4);
            for (int o = 0; o < O; o++) {
                double sb = 0;
                for (int n = 0; n < B; n++)
                    for (int i = 0; i < oh; i++)
                        for (int j = 0; j < ow; j++) sb += DY_EFF(tile_at(&g.out, n, o, i, j));
                assert_true(fabs(db[o] - sb) <= 1e-6 * (B * oh * ow + 1));
                for (int c = 0; c < C; c++)
                    for (int a = 0; a < k; a++)
                        for (int b = 0; b < k; b++) {
                            double sw = 0;
                            for (int n = 0; n < B; n++)
                                for (int i = 0; i < oh; i++)
                                    for (int j = 0; j < ow; j++) {
                                        const size_t at =
                                            (size_t)n * D + ((size_t)(i * st + a) * tc->w + j * st + b) * C + c;
                                        const float v =
                                            use_u8 ? tc->scale * ((float)u8[at] * (1.0f / 255.0f)) : tc->scale * f[at];
                                        sw += DY_EFF(tile_at(&g.out, n, o, i, j)) * v;
                                    }
                            const float got = dw[(((size_t)o * C + c) * k + a) * k + b];
                            if (!(fabs(got - sw) <= 1e-6 * (B * oh * ow + 1) * (1 + 2 * tc->scale))) {
                                print_error("case %zu (%s%s): dw(%d, %d, %d, %d) = %.9g, expected %.9g\n", ci,
                                            use_u8 ? "uint8" : "float", mask ? ", relu's mask" : "", o, c, a, b, got,
                                            sw);
                                fail();
                            }
                        }
            }
#ifdef _OPENMP
            const int threads = omp_get_max_threads();
            omp_set_num_threads(threads == 1 ? 2 : 1);
            assert_int_equal(fl_conv_img_wgrad(t, use_u8 ? u8 : NULL, f, tc->scale, dy, mask, dw2, db2), 0);
            omp_set_num_threads(threads);
            assert_memory_equal(dw2, dw, wn * 4);
            assert_memory_equal(db2, db, (size_t)O * 4);
#endif
        }
#undef DY_EFF
        free(dw), free(db), free(dw2), free(db2), free(dy0);
        fl_conv_img_destroy(t);
        fl_conv_img_destroy(t1);
        free(u8), free(f), free(w), free(wt), free(bias), free(y), free(y1), free(y2);
    }
    fl_conv_img_disable_amx(0);
    fl_conv_fwd_geom_t bad = {1, 4, 84, 84, 48, 20, 20, 8, 4, {{0}, 0}, tile_layout(48, 20, 20, 16)};
    assert_null(fl_conv_img_create(&bad)); /* 48 output channels: neither 16 nor a multiple of 32 */
    bad = (fl_conv_fwd_geom_t){1, 64, 40, 40, 32, 1, 1, 40, 1, {{0}, 0}, tile_layout(32, 1, 1, 16)};
    assert_null(fl_conv_img_create(&bad)); /* 40 rows of 40 x 64 values: more than the buffer */
}

/* oneDNN's reference implementations are slow: none of them in the benchmark networks
 * (checked where oneDNN has its AVX-512 code). */
static void test_no_reference_impls(void **state) {
    NEED_DNNL();
    if (!__builtin_cpu_supports("avx512f")) skip();
    const net_case_t cases[] = {{NATURE, 84, 84, 4, 6, 0}, {MINATAR, 10, 10, 4, 6, 0}, {MLP, 0, 0, 4, 2, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int B = 32;
        fl_qnet_t *n = make_net(&cases[i], B);
        const size_t D = (size_t)fl_qnet_obs_dim(n);
        float *obs = calloc((size_t)B * D, 4), *q = malloc((size_t)B * 6 * 4), *dq = calloc((size_t)B * 6, 4);
        float *dobs = malloc((size_t)B * D * 4);
        assert_int_equal(fl_qnet_forward(n, obs, B, q), FL_OK);
        assert_int_equal(fl_qnet_backward_input(n, dq, B, dobs), FL_OK);
        char desc[4096];
        assert_true(fl_qnet_describe_kernels(n, B, desc, sizeof desc) > 0);
        assert_true(fl_qnet_describe_kernels(n, B + 1, desc + 2048, 16) == 0); /* no plan at B + 1 */
        if (strstr(desc, "ref:")) {
            print_error("\"%s\" uses a reference implementation:\n%s", cases[i].spec, desc);
            fail();
        }
        free(obs);
        free(q);
        free(dq);
        free(dobs);
        fl_qnet_destroy(n);
    }
}

/* ---- plans ------------------------------------------------------------------------------ */

/* More batch sizes than a network keeps plans for, then the first ones again. */
static void test_plan_eviction(void **state) {
    NEED_DNNL();
    const net_case_t t = {"conv(8,3,1) relu dense(16) relu dueling", 6, 6, 3, 3, 0};
    int batches[2 * FL_DNNL_MAX_PLANS + 2];
    int count = 0;
    for (int i = 0; i < FL_DNNL_MAX_PLANS + 2; i++) batches[count++] = 1 + i;
    for (int i = 0; i < FL_DNNL_MAX_PLANS; i++) batches[count++] = 1 + i;
    compare(&t, batches, count);
}

/* Two threads: a plan is rebuilt for the new count, and the results agree as well. */
static void test_two_threads(void **state) {
    NEED_DNNL();
    const int before = openblas_get_num_threads();
    openblas_set_num_threads(2);
    const net_case_t t = {MINATAR, 10, 10, 4, 6, 0};
    const int batches[] = {32, 64};
    compare(&t, batches, 2);
    const net_case_t u = {"conv(16,3,2) relu conv(32,3,1) relu dense(64) relu dueling", 16, 16, 4, 4, 0};
    compare(&u, batches, 2);
    const net_case_t v = {"conv(16,4,2) relu conv(32,3,1) relu dense(64) relu dueling", 18, 16, 4, 4, 0};
    compare(&v, batches, 2); /* space-to-depth: the input copied in and out on both threads */
    openblas_set_num_threads(before);
}

/* ---- signals ------------------------------------------------------------------------ */

static volatile sig_atomic_t g_handled;
static void on_usr1(int sig) {
    (void)sig;
    g_handled = g_handled + 1;
}

typedef struct storm {
    pthread_t target;
    atomic_int stop;
} storm_t;

/* Signals the target thread about every 20 us until told to stop. */
static void *storm_main(void *arg) {
    storm_t *st = arg;
    const struct timespec gap = {0, 20000};
    while (!atomic_load(&st->stop)) {
        pthread_kill(st->target, SIGUSR1);
        nanosleep(&gap, NULL);
    }
    return NULL;
}

/* A thread that handles signals while it trains: oneDNN's generated GEMM kernels point
 * the stack pointer into a heap buffer while they run, so a signal handled in one would
 * write its frame into the heap (glibc then aborts on a later free, or results change).
 * The backend holds asynchronous signals during its calls and they arrive after: under a
 * storm of them, many forward/backward passes give exactly the results of a quiet run,
 * the heap stays whole through allocations around them, and the handler did run. */
static void storm_case(int threads) {
    const int before = openblas_get_num_threads();
    openblas_set_num_threads(threads);
    const net_case_t t = {"dense(128) relu dense(128) relu dueling", 0, 0, 16, 4, 0};
    const int B = 128, iters = 400;
    fl_qnet_t *n = make_net(&t, B);
    const size_t np = fl_qnet_num_params(n);
    float *obs = malloc((size_t)B * 16 * sizeof *obs), *q = malloc((size_t)B * 4 * sizeof *q),
          *q0 = malloc((size_t)B * 4 * sizeof *q0), *dq = malloc((size_t)B * 4 * sizeof *dq),
          *g0 = malloc(np * sizeof *g0);
    assert_non_null(obs);
    assert_non_null(q);
    assert_non_null(q0);
    assert_non_null(dq);
    assert_non_null(g0);
    fill(obs, (size_t)B * 16, -1, 1);
    fill(dq, (size_t)B * 4, -1, 1);
    assert_int_equal(fl_qnet_forward(n, obs, B, q0), FL_OK);
    assert_int_equal(fl_qnet_backward(n, dq, B), FL_OK);
    memcpy(g0, fl_qnet_grads(n), np * sizeof *g0);

    struct sigaction sa = {.sa_handler = on_usr1}, old;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    g_handled = 0;
    storm_t st = {.target = pthread_self()};
    atomic_init(&st.stop, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, storm_main, &st), 0);
    int same = 1;
    for (int i = 0; i < iters; i++) {
        void *blocks[8];
        for (int k = 0; k < 8; k++) blocks[k] = malloc(64 + 48 * (size_t)k * (size_t)(i % 7));
        assert_int_equal(fl_qnet_forward(n, obs, B, q), FL_OK);
        assert_int_equal(fl_qnet_backward(n, dq, B), FL_OK);
        for (int k = 0; k < 8; k++) free(blocks[k]);
        same &= memcmp(q, q0, (size_t)B * 4 * sizeof *q) == 0 && memcmp(fl_qnet_grads(n), g0, np * sizeof *g0) == 0;
    }
    atomic_store(&st.stop, 1);
    pthread_join(th, NULL);
    sigaction(SIGUSR1, &old, NULL);
    print_message("%d threads: %d signals handled over %d passes\n", threads, (int)g_handled, iters);
    assert_true(g_handled > 0);
    assert_true(same);
    fl_qnet_destroy(n);
    free(obs);
    free(q);
    free(q0);
    free(dq);
    free(g0);
    openblas_set_num_threads(before);
}

static void test_signals(void **state) {
    NEED_DNNL();
    storm_case(1);
    storm_case(2);
}

/* ---- parameters that change ------------------------------------------------------------ */

/* A forward keeps its weights converted between calls (dnnl.h): every way of changing
 * the parameters (a write through fl_qnet_params, fl_qnet_set_params, fl_qnet_copy_params,
 * fl_qnet_init) is seen by the next forward at the same batch, on every layer kind that
 * converts them (space-to-depth convolution, blocked convolution, a dense layer large
 * enough for oneDNN's weight layout: 256 x 512; a dense layer with short rows, its
 * weights transposed for dense_thin; a first dense layer over inputs mostly 0, its
 * weights transposed for the sparse sums). */
static void params_change(const net_case_t t, int B, float density) {
    fl_err_t err;
    fl_err_init(&err);
    fl_qnet_t *n = make_net(&t, B), *other = make_net(&t, B);
    const size_t D = (size_t)fl_qnet_obs_dim(n), P = fl_qnet_num_params(n);
    float *obs = malloc(B * D * 4), *q = malloc(B * 5 * 4), *q_ref = malloc(B * 5 * 4), *saved = malloc(P * 4);
    fill_obs(obs, B * D, 1, 1.0f, density);
    for (int change = 0; change < 5; change++) {
        assert_int_equal(fl_qnet_forward(n, obs, B, q), FL_OK); /* converts the weights as they are */
        switch (change) {
        case 0: /* a write through the pointer, taken for it */
            for (size_t i = 0; i < P; i += 7) fl_qnet_params(n)[i] += 1.0f;
            break;
        case 1:
            memcpy(saved, fl_qnet_params(other), P * 4), assert_int_equal(fl_qnet_set_params(n, saved, P, &err), FL_OK);
            break;
        case 2: fl_qnet_init(other, &g_rng), integerize(other), fl_qnet_copy_params(n, other); break;
        case 3: fl_qnet_init(n, &g_rng); break;
        case 4: break; /* no change: the same results again */
        }
        assert_int_equal(fl_qnet_forward(n, obs, B, q), FL_OK);
        assert_int_equal(fl_qnet_set_backend(n, FL_QNET_BACKEND_REF, &err), FL_OK);
        assert_int_equal(fl_qnet_forward(n, obs, B, q_ref), FL_OK);
        assert_int_equal(fl_qnet_set_backend(n, FL_QNET_BACKEND_DNNL, &err), FL_OK);
        expect_close(q, q_ref, (size_t)B * 5, t.spec, "q after the parameters changed", B);
        if (density > 0) expect_sparse(n, B, t.spec, 0, "last forward: sparse");
    }
    free(obs), free(q), free(q_ref), free(saved);
    fl_qnet_destroy(n);
    fl_qnet_destroy(other);
}

static void test_params_change(void **state) {
    NEED_DNNL();
    params_change((net_case_t){"conv(8,4,2) relu conv(16,3,1) relu flatten dense(512) relu dueling", 14, 14, 4, 5, 0},
                  3, 0);
    params_change((net_case_t){"dense(40) relu dueling", 0, 0, 6, 5, 0}, 3, 0);
    /* the space-to-depth weights, then their tiles' packing; a dense layer's on tiles */
    params_change((net_case_t){"conv(16,4,2) relu flatten dense(64) relu dueling", 34, 34, 4, 5, 0}, 7, 0);
    /* a first dense layer over sparse inputs: its transposed weights */
    params_change((net_case_t){"dense(64) relu dueling", 10, 10, 4, 5, 0}, 32, 0.08f);
}

/* fl_qnet_forward_obs on uint8 observations (converted on the way into the oneDNN plan's
 * layout) gives the bits of fl_dtype_to_float and fl_qnet_forward (AMX's tiles off: with
 * them, whose sums of exact products come in their own order, its outputs are close), on both backends, with
 * the input scale, through a space-to-depth convolution, a plain one and a dense layer (over
 * vectors, and over images: their planar copy, small and in tiles; and into a first
 * layer that goes sparse); a backward follows it as it follows a forward. */
static void test_forward_obs(void **state) {
    fl_err_t err;
    fl_err_init(&err);
    fl_conv_img_disable_amx(1);
    const net_case_t cases[] = {
        {"conv(8,4,2) relu conv(16,3,1) relu flatten dense(512) relu dueling", 14, 14, 4, 5, 0},
        /* space-to-depth by 4 over 4 channels: runs of 16, whole blocks of AVX-512's
         * layout (its own copy there), and rows and columns the convolution does not reach */
        {"conv(16,8,4) relu conv(16,3,1) relu flatten dense(32) relu dueling", 22, 23, 4, 5, 0},
        /* with AVX-512 read as they are by the first convolution (fl_conv_img), copied for
         * the backward from the last forward's observations */
        {"conv(32,8,4) relu conv(64,3,1) relu flatten dense(32) relu dueling", 30, 26, 4, 5, 255.0f},
        {MINATAR, 10, 10, 4, 6, 255.0f},
        {"dense(16) relu dueling", 0, 0, 7, 3, 0},
        {"dense(16) relu dueling", 5, 3, 2, 4, 255.0f},
        {"dense(8) relu dueling", 30, 40, 3, 4, 255.0f}, /* pixels in two tiles */
        /* first dense layers that may go sparse: the bytes converted on the way in, then
         * listed; or over a quarter of them set */
        {"dense(128) relu dense(128) relu dueling", 10, 10, 4, 6, 255.0f},
        {"flatten dense(70) relu dueling", 6, 7, 3, 4, 0},
        {"dense(70) relu dueling", 0, 0, 100, 3, 0},
        {"dense(128) relu dense(128) relu dueling", 10, 10, 4, 6, 255.0f},
    };
    const float density[] = {1, 1, 1, 1, 1, 1, 1, 0.08f, 0.1f, 0.08f, 0.5f}; /* the share of bytes not 0 */
    const int B = 5;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int backend = 0; backend < 2; backend++) {
            if (backend == 1 && !fl_dnnl_available()) continue;
            fl_qnet_t *n = make_net(&cases[c], B);
            assert_int_equal(fl_qnet_set_backend(n, backend ? FL_QNET_BACKEND_DNNL : FL_QNET_BACKEND_REF, &err), FL_OK);
            const size_t D = (size_t)fl_qnet_obs_dim(n), A = (size_t)cases[c].actions;
            unsigned char *u8 = malloc(B * D);
            float *f = malloc(B * D * 4), *q = malloc(B * A * 4), *q_ref = malloc(B * A * 4), *dq = malloc(B * A * 4);
            for (size_t i = 0; i < B * D; i++)
                u8[i] = fl_rng_uniform(&g_rng, 0, 1) < density[c] ? (unsigned char)fl_rng_below(&g_rng, 256) : 0;
            for (size_t i = 0; i < B * A; i++) dq[i] = (float)fl_rng_below(&g_rng, 3) - 1.0f;
            assert_int_equal(fl_dtype_to_float(FL_DTYPE_UINT8, u8, B * D, f), 0);
            assert_int_equal(fl_qnet_forward(n, f, B, q_ref), FL_OK);
            assert_int_equal(fl_qnet_backward(n, dq, B), FL_OK);
            float *g_ref = malloc(fl_qnet_num_params(n) * 4);
            memcpy(g_ref, fl_qnet_grads(n), fl_qnet_num_params(n) * 4);
            /* other observations in between, so that no element of the input edge the
             * uint8 copy missed still holds the float32 copy's value */
            float *other = malloc(B * D * 4);
            for (size_t i = 0; i < B * D; i++) other[i] = 1.0f - f[i];
            assert_int_equal(fl_qnet_forward(n, other, B, q), FL_OK);
            free(other);
            assert_int_equal(fl_qnet_forward_obs(n, FL_DTYPE_UINT8, u8, B, q), FL_OK);
            assert_memory_equal(q, q_ref, B * A * 4);
            assert_int_equal(fl_qnet_backward(n, dq, B), FL_OK);
            assert_memory_equal(fl_qnet_grads(n), g_ref, fl_qnet_num_params(n) * 4);
            if (backend == 1) { /* the same parameters with AMX's tiles where the plan has them: close */
                fl_conv_img_disable_amx(0);
                fl_qnet_t *n2 = make_net(&cases[c], B);
                memcpy(fl_qnet_params(n2), fl_qnet_params(n), fl_qnet_num_params(n) * 4);
                assert_int_equal(fl_qnet_forward_obs(n2, FL_DTYPE_UINT8, u8, B, q), FL_OK);
                expect_close(q, q_ref, B * A, cases[c].spec, "q (uint8, AMX where the plan has it)", B);
                assert_int_equal(fl_qnet_backward(n2, dq, B), FL_OK);
                char desc[4096];
                assert_true(fl_qnet_describe_kernels(n2, B, desc, sizeof desc) > 0);
                int oc = 0; /* AMX's tiles take two 16-channel panels at a time: 32, 64, ... channels */
                const int amx_plan = sscanf(cases[c].spec, "conv(%d", &oc) == 1 && oc % 32 == 0;
                if (strstr(desc, "0.conv fwd (images)") && cpu_has_amx() && amx_plan &&
                    (!strstr(desc, "0.conv fwd (images): fleet:amx") ||
                     !strstr(desc, "0.conv bwd weights (images): fleet:amx"))) {
                    print_error("\"%s\": expected the first convolution on AMX, forward and weight gradient:\n%s",
                                cases[c].spec, desc);
                    fail();
                }
                fl_qnet_destroy(n2);
                fl_conv_img_disable_amx(1);
            }
            if (backend == 1 && density[c] < 1)
                expect_sparse(n, B, cases[c].spec, 1,
                              density[c] <= 0.15f ? "last forward: sparse" : "last forward: dense");
            /* float32 observations as they are */
            assert_int_equal(fl_qnet_forward_obs(n, FL_DTYPE_FLOAT32, f, B, q), FL_OK);
            assert_memory_equal(q, q_ref, B * A * 4);
            assert_int_equal(fl_qnet_forward_obs(n, FL_DTYPE_BFLOAT16, u8, B, q), FL_INVALID_ARGUMENT);
            assert_int_equal(fl_qnet_forward_obs(n, FL_DTYPE_UINT8, u8, B + 1, q), FL_INVALID_ARGUMENT);
            free(u8), free(f), free(q), free(q_ref), free(dq), free(g_ref);
            fl_qnet_destroy(n);
        }
    }
    fl_conv_img_disable_amx(0);
}

/* ---- backend switching ------------------------------------------------------------------- */

static void test_backend_switch(void **state) {
    (void)state;
    fl_err_t err;
    fl_err_init(&err);
    const net_case_t t = {"dense(4) relu", 0, 0, 3, 2, 0};
    fl_qnet_t *n = make_net(&t, 4);
    float obs[12] = {0}, q[8], dq[8] = {0};
    if (!fl_dnnl_available()) { /* the reference is the only backend */
        assert_int_equal(fl_qnet_backend(n), FL_QNET_BACKEND_REF);
        assert_int_equal(fl_qnet_set_backend(n, FL_QNET_BACKEND_DNNL, &err), FL_UNIMPLEMENTED);
        assert_int_equal(fl_qnet_backend(n), FL_QNET_BACKEND_REF);
        assert_int_equal(fl_qnet_forward(n, obs, 4, q), FL_OK);
        fl_qnet_destroy(n);
        return;
    }
    assert_string_equal(fl_qnet_backend_name(fl_qnet_backend(n)), "dnnl");
    assert_int_equal(fl_qnet_forward(n, obs, 4, q), FL_OK);
    assert_int_equal(fl_qnet_set_backend(n, FL_QNET_BACKEND_REF, &err), FL_OK);
    assert_string_equal(fl_qnet_backend_name(fl_qnet_backend(n)), "reference");
    assert_int_equal(fl_qnet_backward(n, dq, 4), FL_FAILED_PRECONDITION); /* the forward was the other backend's */
    assert_int_equal(fl_qnet_set_backend(n, (fl_qnet_backend_kind)7, &err), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_qnet_backend(n), FL_QNET_BACKEND_REF);
    assert_int_equal(fl_qnet_forward(n, obs, 4, q), FL_OK);
    assert_int_equal(fl_qnet_backward(n, dq, 4), FL_OK);
    assert_int_equal(fl_qnet_describe_kernels(n, 4, (char[8]){0}, 8), 0);
    fl_qnet_destroy(n);
}

int main(void) {
    pick_seed();
    fl_rng_init_stream(&g_rng, g_seed, 7);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_shapes),
        cmocka_unit_test(test_conv_chains),
        cmocka_unit_test(test_flatten_edge_order),
        cmocka_unit_test(test_space_to_depth),
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_nature),
        cmocka_unit_test(test_minatar),
        cmocka_unit_test(test_mlp),
        cmocka_unit_test(test_mlp_image),
        cmocka_unit_test(test_sparse_inputs),
        cmocka_unit_test(test_sparse_sums),
        cmocka_unit_test(test_dense_small),
        cmocka_unit_test(test_dense_small_sums),
        cmocka_unit_test(test_dense_thin),
        cmocka_unit_test(test_dense_mid),
        cmocka_unit_test(test_dense_thin_sums),
        cmocka_unit_test(test_tiles),
        cmocka_unit_test_teardown(test_tiles_sums, unforce_avx2),
        cmocka_unit_test(test_wide_tiles),
        cmocka_unit_test(test_image_conv),
        cmocka_unit_test(test_no_reference_impls),
        cmocka_unit_test(test_plan_eviction),
        cmocka_unit_test(test_two_threads),
        cmocka_unit_test(test_signals),
        cmocka_unit_test(test_backend_switch),
        cmocka_unit_test(test_params_change),
        cmocka_unit_test(test_forward_obs),
        cmocka_unit_test(test_onednn_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
