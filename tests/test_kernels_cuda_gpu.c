/* GPU tests of the CUDA backend's ops (kernels/cuda/cuda.h, ops_cuda.h) against the CPU
 * reference (kernels/ops.h, loss.h, optim.h), one op at a time, on random non-zero inputs
 * drawn from a fresh seed each run (FLEET_TEST_SEED replays one). TF32 is off
 * everywhere, so GEMMs and convolutions are float32 FMAs that differ from OpenBLAS only
 * in summation order; the elementwise kernels are built without FMA contraction and
 * must match bit for bit (or to the last ulp where a double pow is involved).
 *
 * Tolerances: a float dot product of length K summed in another order differs by about
 * sqrt(K) * 6e-8 of the sum of |terms| (worst case K * 6e-8); with K <= 3136 here,
 * atol = 1e-4 * max|reference| + rtol 1e-4 covers the worst case with margin while a
 * wrong index, layout or transpose gives O(1) relative errors.
 *
 * The tests skip cleanly when fleet was built without CUDA or no GPU is present
 * (cudaGetDeviceCount fails). CTest label: gpu. */
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

#include "common/dtype.h"
#include "common/rng.h"
#include "kernels/loss.h"
#include "kernels/ops.h"
#include "kernels/optim.h"
#ifdef FLEET_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/ops_cuda.h"
#endif

#include "seed_util.h"

#ifdef FLEET_HAVE_CUDA

#include "cuda_test_util.h"

static void *dev(size_t bytes) {
    void *p = NULL;
    OK(fl_cuda_malloc(&p, bytes ? bytes : 4, E));
    return p;
}

static float *up(const float *h, size_t n) {
    float *d = dev(n * sizeof(float));
    OK(fl_cuda_to_device(d, h, n * sizeof(float), E));
    return d;
}

static void down(float *h, const float *d, size_t n) {
    OK(fl_cuda_synchronize(E));
    OK(fl_cuda_to_host(h, d, n * sizeof(float), E));
}

static void fill_normal(fl_rng_t *r, float *a, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) a[i] = (float)(scale * fl_rng_normal(r));
}

/* Every element within atol_frac * max|want| + rtol |want|; names the first that is not. */
static void check_all(const char *what, const float *got, const float *want, size_t n, double atol_frac, double rtol) {
    check_close_all(what, got, want, n, atol_frac * max_abs(want, n) + 1e-30, rtol);
}

/* dst (N, Q, P) from src (N, P, Q) on the host: NCHW (B, C, HW) <-> NHWC (B, HW, C). */
static void host_transpose(const float *src, int N, int P, int Q, float *dst) {
    for (int n = 0; n < N; n++)
        for (int p = 0; p < P; p++)
            for (int q = 0; q < Q; q++) dst[((size_t)n * Q + q) * P + p] = src[((size_t)n * P + p) * Q + q];
}

static fl_cuda_ctx_t *make_ctx(void) {
    fl_cuda_ctx_t *c = NULL;
    OK(fl_cuda_ctx_create(0, NULL, &c, E));
    return c;
}

/* ---- relu ------------------------------------------------------------------------------ */

static void test_relu_matches_cpu(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    const size_t sizes[] = {1, 255, 256, 257, 100003, 1u << 22};
    fl_rng_t rng;
    fl_rng_init_stream(&rng, g_seed, 1);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        float *x = host(n), *dy = host(n), *y_cpu = host(n), *dx_cpu = host(n), *y_gpu = host(n), *dx_gpu = host(n);
        fill_normal(&rng, x, n, 1.0);
        fill_normal(&rng, dy, n, 1.0);
        if (n > 4) {
            x[1] = NAN; /* NaN propagates through relu, as on the CPU */
            x[2] = -0.0f;
        }
        fl_relu_forward(x, y_cpu, n);
        fl_relu_backward(y_cpu, dy, dx_cpu, n);
        float *d_x = up(x, n), *d_dy = up(dy, n), *d_y = dev(n * 4), *d_dx = dev(n * 4);
        OK(fl_cuda_relu_forward(d_x, d_y, n, NULL, E));
        OK(fl_cuda_relu_backward(d_y, d_dy, d_dx, n, NULL, E));
        down(y_gpu, d_y, n);
        down(dx_gpu, d_dx, n);
        /* ReLU is exact in every precision: bit-identical to the reference */
        check_exact("relu y", y_gpu, y_cpu, n);
        check_exact("relu dx", dx_gpu, dx_cpu, n);
        fl_cuda_free(d_x), fl_cuda_free(d_y), fl_cuda_free(d_dy), fl_cuda_free(d_dx);
        free(x), free(dy), free(y_cpu), free(dx_cpu), free(y_gpu), free(dx_gpu);
    }
}

static void test_bad_launch_is_reported(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    /* a host pointer is not device memory: the failure must come back as a status */
    float h[4] = {1, -1, 2, -2};
    fl_err_t e;
    fl_err_init(&e);
    fl_status st = fl_cuda_relu_forward(h, h, 4, NULL, &e);
    if (st == FL_OK) st = fl_cuda_synchronize(&e);
    /* Hosts with unified addressing may accept the pointer; either way nothing crashed
     * and any failure carried CUDA's message. */
    if (st != FL_OK) assert_true(strlen(e.msg) > 0);
}

/* ---- dense ----------------------------------------------------------------------------- */

static void test_dense_matches_cpu(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    const int shapes[][3] = {{1, 4, 3}, {7, 1, 5}, {37, 256, 256}, {64, 3136, 512}, {512, 128, 19}};
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 2);
    fl_cuda_ctx_t *c = make_ctx();
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int B = shapes[k][0], in = shapes[k][1], out = shapes[k][2];
        const size_t nx = (size_t)B * in, nw = (size_t)out * in, ny = (size_t)B * out;
        float *x = host(nx), *w = host(nw), *b = host(out), *dy = host(ny);
        fill_normal(&r, x, nx, 1.0);
        fill_normal(&r, w, nw, 1.0 / sqrt(in));
        fill_normal(&r, b, out, 1.0);
        fill_normal(&r, dy, ny, 1.0);
        float *y = host(ny), *dx = host(nx), *dw = host(nw), *db = host(out);
        fl_dense_forward(x, w, b, B, in, out, y);
        fl_dense_backward(x, w, dy, B, in, out, dx, dw, db, 0);
        float *d_x = up(x, nx), *d_w = up(w, nw), *d_b = up(b, out), *d_dy = up(dy, ny);
        float *d_y = dev(ny * 4), *d_dx = dev(nx * 4), *d_dw = dev(nw * 4), *d_db = dev((size_t)out * 4);
        OK(fl_cuda_dense_forward(c, d_x, d_w, d_b, B, in, out, d_y, E));
        OK(fl_cuda_dense_backward(c, d_x, d_w, d_dy, B, in, out, d_dx, d_dw, d_db, E));
        size_t most = nx > nw ? nx : nw;
        if (ny > most) most = ny;
        float *g = host(most);
        down(g, d_y, ny);
        check_all("dense y", g, y, ny, 1e-4, 1e-4);
        down(g, d_dx, nx);
        check_all("dense dx", g, dx, nx, 1e-4, 1e-4);
        down(g, d_dw, nw);
        check_all("dense dw", g, dw, nw, 1e-4, 1e-4);
        down(g, d_db, (size_t)out);
        check_all("dense db", g, db, (size_t)out, 1e-4, 1e-4);
        /* no bias: y = x W^T only */
        fl_dense_forward(x, w, NULL, B, in, out, y);
        OK(fl_cuda_dense_forward(c, d_x, d_w, NULL, B, in, out, d_y, E));
        down(g, d_y, ny);
        check_all("dense y (no bias)", g, y, ny, 1e-4, 1e-4);
        fl_cuda_free(d_x), fl_cuda_free(d_w), fl_cuda_free(d_b), fl_cuda_free(d_dy);
        fl_cuda_free(d_y), fl_cuda_free(d_dx), fl_cuda_free(d_dw), fl_cuda_free(d_db);
        free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(g);
    }
    fl_cuda_ctx_destroy(c);
}

/* ---- conv2d ---------------------------------------------------------------------------- */

static void test_conv_matches_cpu(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    /* cin, h, w, cout, k, stride, pad, B: the Nature torso (8/4, 4/2, 3/1), MinAtar (3/1),
     * and a padded, non-square one */
    const int geo[][8] = {{4, 84, 84, 32, 8, 4, 0, 3},
                          {32, 20, 20, 64, 4, 2, 0, 3},
                          {64, 9, 9, 64, 3, 1, 0, 4},
                          {4, 10, 10, 16, 3, 1, 0, 16},
                          {3, 7, 9, 5, 3, 2, 1, 5}};
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 3);
    fl_cuda_ctx_t *c = make_ctx();
    for (size_t k = 0; k < sizeof geo / sizeof geo[0]; k++) {
        fl_conv2d_shape_t s = {.cin = geo[k][0],
                               .h = geo[k][1],
                               .w = geo[k][2],
                               .cout = geo[k][3],
                               .k = geo[k][4],
                               .stride = geo[k][5],
                               .pad = geo[k][6]};
        const int B = geo[k][7];
        assert_int_equal(fl_conv2d_shape_init(&s), 0);
        const size_t nx = (size_t)B * s.cin * s.h * s.w, nw = (size_t)s.cout * s.cin * s.k * s.k;
        const size_t ny = (size_t)B * s.cout * s.ho * s.wo;
        float *x = host(nx), *w = host(nw), *b = host((size_t)s.cout), *dy = host(ny);
        fill_normal(&r, x, nx, 1.0);
        fill_normal(&r, w, nw, 1.0 / sqrt((double)s.cin * s.k * s.k));
        fill_normal(&r, b, (size_t)s.cout, 1.0);
        fill_normal(&r, dy, ny, 1.0);
        float *scratch = host(fl_conv2d_col_floats(&s, B));
        float *y = host(ny), *dx = host(nx), *dw = host(nw), *db = host((size_t)s.cout);
        fl_conv2d_forward(&s, x, w, b, B, scratch, y);
        fl_conv2d_backward(&s, x, w, dy, B, scratch, dx, dw, db, 0);

        fl_cuda_conv_t *v = NULL;
        OK(fl_cuda_conv_create(c, s.cin, s.h, s.w, s.cout, s.k, s.stride, s.pad, &v, E));
        OK(fl_cuda_conv_set_batch(c, v, B, E));
        assert_int_equal(fl_cuda_conv_batch(v), B);
        /* the device takes and gives channels-last activations; the filter stays (Cout, Cin, K, K) */
        const int hw = s.h * s.w, ohw = s.ho * s.wo;
        size_t most = nx > nw ? nx : nw;
        if (ny > most) most = ny;
        float *g = host(most), *t = host(most);
        host_transpose(x, B, s.cin, hw, t);
        float *d_x = up(t, nx), *d_w = up(w, nw), *d_b = up(b, (size_t)s.cout);
        host_transpose(dy, B, s.cout, ohw, t);
        float *d_dy = up(t, ny);
        float *d_y = dev(ny * 4), *d_dx = dev(nx * 4), *d_dw = dev(nw * 4), *d_db = dev((size_t)s.cout * 4);
        OK(fl_cuda_conv_forward(c, v, d_x, d_w, d_b, d_y, E));
        OK(fl_cuda_conv_backward(c, v, d_x, d_w, d_dy, d_dx, d_dw, d_db, E));
        char what[64];
        snprintf(what, sizeof what, "conv %zu y", k);
        down(t, d_y, ny);
        host_transpose(t, B, ohw, s.cout, g);
        check_all(what, g, y, ny, 1e-4, 1e-4);
        snprintf(what, sizeof what, "conv %zu dx", k);
        down(t, d_dx, nx);
        host_transpose(t, B, hw, s.cin, g);
        check_all(what, g, dx, nx, 1e-4, 1e-4);
        snprintf(what, sizeof what, "conv %zu dw", k);
        down(g, d_dw, nw);
        check_all(what, g, dw, nw, 1e-4, 1e-4);
        snprintf(what, sizeof what, "conv %zu db", k);
        down(g, d_db, (size_t)s.cout);
        check_all(what, g, db, (size_t)s.cout, 1e-4, 1e-4);
        fl_cuda_conv_destroy(v);
        fl_cuda_free(d_x), fl_cuda_free(d_w), fl_cuda_free(d_b), fl_cuda_free(d_dy);
        fl_cuda_free(d_y), fl_cuda_free(d_dx), fl_cuda_free(d_dw), fl_cuda_free(d_db);
        free(x), free(w), free(b), free(dy), free(scratch), free(y), free(dx), free(dw), free(db), free(g), free(t);
    }
    fl_cuda_ctx_destroy(c);
}

/* ---- transpose and column sums (the channels-last plumbing) ---------------------------- */

static void test_transpose_matches_host(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    /* (N, P, Q): tile edges, a single row or column, N beyond one grid's z */
    const int shapes[][3] = {{3, 37, 70}, {1, 1, 5}, {2, 33, 1}, {512, 64, 49}, {70000, 2, 3}};
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 9);
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int N = shapes[k][0], P = shapes[k][1], Q = shapes[k][2];
        const size_t n = (size_t)N * P * Q;
        float *a = host(n), *want = host(n), *g = host(n);
        fill_normal(&r, a, n, 1.0);
        host_transpose(a, N, P, Q, want);
        float *d_a = up(a, n), *d_t = dev(n * 4);
        OK(fl__cuda_transpose(d_a, N, P, Q, d_t, NULL, E));
        down(g, d_t, n);
        check_exact("transpose", g, want, n);
        fl_cuda_free(d_a), fl_cuda_free(d_t);
        free(a), free(want), free(g);
    }
}

static void test_bias_grad_column_sums(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    /* (R, C): one chunk, many chunks, chunks limited by the scratch, a single column, and
     * the Nature CNN's first layer at batch 512 (204800 rows of 32) */
    const size_t shapes[][2] = {{5, 3}, {100000, 7}, {4096, 1000}, {1000, 1}, {204800, 32}, {0, 4}};
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 10);
    fl_cuda_ctx_t *c = make_ctx();
    float *scratch = dev(FL_CUDA_REDUCE_FLOATS * sizeof(float));
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const size_t R = shapes[k][0];
        const int C = (int)shapes[k][1];
        const size_t n = R * (size_t)C;
        float *dy = host(n), *want = host((size_t)C), *mass = host((size_t)C), *g1 = host((size_t)C);
        float *g2 = host((size_t)C);
        fill_normal(&r, dy, n, 1.0);
        for (int j = 0; j < C; j++) {
            double s = 0, m = 0;
            for (size_t i = 0; i < R; i++) {
                s += dy[i * (size_t)C + (size_t)j];
                m += fabs(dy[i * (size_t)C + (size_t)j]);
            }
            want[j] = (float)s;
            mass[j] = (float)m;
        }
        const int chunks = fl__cuda_bias_grad_chunks(R, C);
        assert_true(chunks >= 1 && (chunks == 1 || (size_t)chunks * (size_t)C <= FL_CUDA_REDUCE_FLOATS));
        float *d_dy = up(dy, n), *d_db = dev((size_t)C * 4);
        OK(fl__cuda_bias_grad(d_dy, R, C, d_db, scratch, NULL, E));
        down(g1, d_db, (size_t)C);
        /* float sums in another order: within 1e-6 of the sum of |terms| (a wrong row or
         * column is off by about sqrt(R)) */
        for (int j = 0; j < C; j++)
            CHECK_CLOSE(g1[j], want[j], 1e-6 * mass[j] + 1e-7, 0.0, "column %d of (%zu, %d)", j, R, C);
        for (int j = 0; j < C; j++) g2[j] = NAN; /* poison: every column must be written again */
        OK(fl_cuda_to_device(d_db, g2, (size_t)C * 4, E));
        OK(fl__cuda_bias_grad(d_dy, R, C, d_db, scratch, NULL, E));
        down(g2, d_db, (size_t)C);
        check_exact("column sums, second run", g2, g1, (size_t)C);
        fl_cuda_free(d_dy), fl_cuda_free(d_db);
        free(dy), free(want), free(mass), free(g1), free(g2);
    }
    fl_cuda_free(scratch);
    fl_cuda_ctx_destroy(c);
}

/* ---- dueling head ---------------------------------------------------------------------- */

static void test_dueling_matches_cpu(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    const int cases[][2] = {{1, 1}, {5, 2}, {512, 18}, {33, 6}};
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 4);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int B = cases[k][0], A = cases[k][1];
        const size_t nva = (size_t)B * (A + 1), nq = (size_t)B * A;
        float *va = host(nva), *dq = host(nq), *q = host(nq), *dva = host(nva), *g = host(nva);
        fill_normal(&r, va, nva, 2.0);
        fill_normal(&r, dq, nq, 1.0);
        fl_dueling_combine_forward(va, B, A, q);
        fl_dueling_combine_backward(dq, B, A, dva);
        float *d_va = up(va, nva), *d_dq = up(dq, nq), *d_q = dev(nq * 4), *d_dva = dev(nva * 4);
        OK(fl_cuda_dueling_combine_forward(d_va, B, A, d_q, NULL, E));
        OK(fl_cuda_dueling_combine_backward(d_dq, B, A, d_dva, NULL, E));
        /* same sums in the same order, no FMA contraction: bit-exact */
        down(g, d_q, nq);
        check_exact("dueling q", g, q, nq);
        down(g, d_dva, nva);
        check_exact("dueling dva", g, dva, nva);
        fl_cuda_free(d_va), fl_cuda_free(d_dq), fl_cuda_free(d_q), fl_cuda_free(d_dva);
        free(va), free(dq), free(q), free(dva), free(g);
    }
}

/* ---- observation conversion ------------------------------------------------------------ */

static void test_obs_conversion_matches_cpu(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 5);
    /* (B, H, W, C) uint8 and float images, and float vectors, against the learner's
     * fl_dtype_to_float (1/255) followed by input_scale; the layout stays (images go to the
     * convolutions channels-last) */
    const int cases[][4] = {{3, 84, 84, 4}, {5, 10, 10, 4}, {4, 7, 5, 3}, {9, 1, 1, 13}};
    const float scales[] = {1.0f, 255.0f, 0.5f, 1.0f};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int B = cases[k][0], H = cases[k][1], W = cases[k][2], C = cases[k][3];
        const size_t D = (size_t)H * W * C, n = (size_t)B * D;
        const float sc = scales[k];
        for (int u8 = 0; u8 < 2; u8++) {
            uint8_t *raw = malloc(n);
            float *f = host(n), *want = host(n), *g = host(n);
            assert_non_null(raw);
            for (size_t i = 0; i < n; i++) raw[i] = (uint8_t)fl_rng_below(&r, 256);
            if (u8)
                fl_dtype_to_float(FL_DTYPE_UINT8, raw, n, f);
            else
                fill_normal(&r, f, n, 1.0);
            for (size_t i = 0; i < n; i++) want[i] = sc * f[i];
            void *d_src = dev(u8 ? n : n * 4);
            OK(fl_cuda_to_device(d_src, u8 ? (const void *)raw : (const void *)f, u8 ? n : n * 4, E));
            float *d_dst = dev(n * 4);
            OK(fl__cuda_obs_to_input(d_src, u8, n, 1.0f / 255.0f, sc, d_dst, NULL, E));
            down(g, d_dst, n);
            check_exact(u8 ? "uint8 obs" : "float obs", g, want, n);
            fl_cuda_free(d_src), fl_cuda_free(d_dst);
            free(raw), free(f), free(want), free(g);
        }
    }
}

/* ---- the DQN head: targets, priorities, Huber loss, dL/dq ------------------------------- */

static void test_dqn_head_matches_cpu(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 6);
    const int cases[][2] = {{1, 1}, {7, 2}, {300, 6}, {512, 18}};
    const float deltas[] = {1.0f, 0.5f, 1.0f, 2.0f};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int B = cases[k][0], A = cases[k][1];
        const size_t nq = (size_t)B * A;
        float *qno = host(nq), *qnt = host(nq), *qo = host(nq), *R = host(B), *disc = host(B), *w = host(B);
        int32_t *act = calloc((size_t)B, sizeof *act);
        assert_non_null(act);
        fill_normal(&r, qno, nq, 1.0);
        fill_normal(&r, qnt, nq, 1.0);
        fill_normal(&r, qo, nq, 1.0);
        fill_normal(&r, R, (size_t)B, 2.0);
        for (int i = 0; i < B; i++) {
            disc[i] = i % 5 == 4 ? 0.0f : 0.970299f; /* terminals */
            w[i] = (float)fl_rng_uniform(&r, 0.1, 1.0);
            act[i] = (int32_t)fl_rng_below(&r, (uint64_t)A);
            if (i % 7 == 3) /* ties: the lowest action wins */
                for (int a = 0; a < A; a++) qno[(size_t)i * A + a] = 0.25f;
            if (i % 11 == 5 && A > 1) qno[(size_t)i * A + A - 1] = qno[(size_t)i * A] = 3.0f;
        }
        /* CPU: learner/dqn.c's loop and kernels/loss.c */
        float *y = host(B), *qt = host(B), *prio = host(B), *dpred = host(B), *dq = host(nq);
        double qsum = 0;
        for (int i = 0; i < B; i++) {
            float yi = R[i];
            if (disc[i] != 0.0f) {
                int best = 0;
                for (int a = 1; a < A; a++)
                    if (qno[(size_t)i * A + a] > qno[(size_t)i * A + best]) best = a;
                yi += disc[i] * qnt[(size_t)i * A + best];
            }
            y[i] = yi;
            qt[i] = qo[(size_t)i * A + act[i]];
            qsum += qt[i];
            prio[i] = fabsf(yi - qt[i]);
        }
        const float loss = fl_loss_huber(qt, y, w, B, deltas[k], dpred);
        for (int i = 0; i < B; i++) dq[(size_t)i * A + act[i]] = dpred[i];

        float *d_qno = up(qno, nq), *d_qnt = up(qnt, nq), *d_qo = up(qo, nq), *d_R = up(R, B), *d_disc = up(disc, B),
              *d_w = up(w, B);
        int32_t *d_act = dev((size_t)B * 4);
        OK(fl_cuda_to_device(d_act, act, (size_t)B * 4, E));
        float *d_prio = dev((size_t)B * 4), *d_dq = dev(nq * 4), *d_y = dev((size_t)B * 4), *d_qt = dev((size_t)B * 4);
        fl_cuda_step_scalars_t *d_sc = dev(sizeof(fl_cuda_step_scalars_t)), sc;
        OK(fl_cuda_dqn_head(d_qno, d_qnt, d_qo, d_act, d_R, d_disc, d_w, B, A, deltas[k], d_prio, d_dq, d_y, d_qt, d_sc,
                            NULL, E));
        OK(fl_cuda_synchronize(E));
        OK(fl_cuda_to_host(&sc, d_sc, sizeof sc, E));
        float *g = host(nq);
        /* elementwise in the same order: exact; the sums (double) within a few ulps */
        down(g, d_y, (size_t)B);
        check_exact("head y", g, y, (size_t)B);
        down(g, d_qt, (size_t)B);
        check_exact("head q_taken", g, qt, (size_t)B);
        down(g, d_prio, (size_t)B);
        check_exact("head priorities", g, prio, (size_t)B);
        down(g, d_dq, nq);
        check_exact("head dq", g, dq, nq);
        CHECK_CLOSE(sc.loss, loss, 0.0, 1e-6, "head loss (B %d)", B);
        CHECK_CLOSE(sc.mean_q, (float)(qsum / B), 1e-9, 1e-6, "head mean_q (B %d)", B);
        fl_cuda_free(d_qno), fl_cuda_free(d_qnt), fl_cuda_free(d_qo), fl_cuda_free(d_R), fl_cuda_free(d_disc);
        fl_cuda_free(d_w), fl_cuda_free(d_act), fl_cuda_free(d_prio), fl_cuda_free(d_dq), fl_cuda_free(d_y);
        fl_cuda_free(d_qt), fl_cuda_free(d_sc);
        free(qno), free(qnt), free(qo), free(R), free(disc), free(w), free(act), free(y), free(qt), free(prio);
        free(dpred), free(dq), free(g);
    }
}

/* ---- optimizers and clipping ------------------------------------------------------------ */

/* Several steps of one optimizer, fresh random gradients each step, on the GPU (sumsq,
 * finalize, apply) and the CPU (fl_clip_grad_norm, fl_optim_step): the same parameters,
 * state, norms and step count. */
static void run_optim(fl_optim_kind kind, float clip, fl_rng_t *r) {
    const size_t n = 10007;
    const int steps = 5;
    fl_optim_config_t oc = fl_optim_config_default(kind);
    if (kind == FL_OPTIM_RMSPROP) {
        oc.lr = 1e-3f;
        oc.momentum = 0.5f;
    }
    fl_optim_t *o = NULL;
    OK(fl_optim_create(&oc, n, &o, E));
    const int slots = fl_optim_num_slots(o);
    float *p = host(n), *gr = host(n), *gpu = host(n * (size_t)slots);
    fill_normal(r, p, n, 1.0);
    float *d_p = up(p, n), *d_g = dev(n * 4), *d_s = up(fl_optim_state(o), n * (size_t)slots);
    fl_cuda_optim_hyper_t hp = {(int)kind, oc.lr, oc.beta1, oc.beta2, oc.eps, oc.decay, oc.momentum, clip};
    fl_cuda_optim_hyper_t *d_hp = dev(sizeof hp);
    OK(fl_cuda_to_device(d_hp, &hp, sizeof hp, E));
    fl_cuda_step_scalars_t sc0, sc;
    memset(&sc0, 0, sizeof sc0);
    fl_cuda_step_scalars_t *d_sc = dev(sizeof sc0);
    OK(fl_cuda_to_device(d_sc, &sc0, sizeof sc0, E));
    for (int t = 0; t < steps; t++) {
        fill_normal(r, gr, n, t == 2 ? 3.0 : 0.3); /* step 2 far above the clip */
        OK(fl_cuda_to_device(d_g, gr, n * 4, E));
        const double zero = 0.0;
        OK(fl_cuda_to_device(&d_sc->sumsq, &zero, sizeof zero, E));
        OK(fl_cuda_sumsq(d_g, n, d_sc, NULL, E));
        OK(fl_cuda_step_finalize(d_hp, d_sc, 0, 1, NULL, E));
        OK(fl_cuda_optim_apply((int)kind, n, d_p, d_g, d_s, d_hp, d_sc, NULL, E));
        OK(fl_cuda_synchronize(E));
        OK(fl_cuda_to_host(&sc, d_sc, sizeof sc, E));

        const float norm = fl_clip_grad_norm(gr, n, clip);
        fl_optim_step(o, p, gr);
        CHECK_CLOSE(sc.grad_norm, norm, 0.0, 1e-6, "%s step %d: grad norm", fl_optim_kind_name(kind), t);
        assert_int_equal(sc.skip, 0);
        assert_int_equal(sc.steps, fl_optim_steps(o));
        /* the norm differs from the CPU's by summation order only, and so may the clip
         * factor (one ulp); Adam's bias corrections come from a device pow: a few ulps */
        down(gpu, d_p, n);
        check_all("optimizer params", gpu, p, n, 1e-6, 2e-6);
        down(gpu, d_s, n * (size_t)slots);
        check_all("optimizer state", gpu, fl_optim_state(o), n * (size_t)slots, 1e-6, 1e-5);
    }
    /* a non-finite gradient: nothing changes, the step count included */
    gr[17] = NAN;
    OK(fl_cuda_to_device(d_g, gr, n * 4, E));
    const double zero = 0.0;
    OK(fl_cuda_to_device(&d_sc->sumsq, &zero, sizeof zero, E));
    float *before = host(n);
    down(before, d_p, n);
    OK(fl_cuda_sumsq(d_g, n, d_sc, NULL, E));
    OK(fl_cuda_step_finalize(d_hp, d_sc, 0, 1, NULL, E));
    OK(fl_cuda_optim_apply((int)kind, n, d_p, d_g, d_s, d_hp, d_sc, NULL, E));
    OK(fl_cuda_synchronize(E));
    OK(fl_cuda_to_host(&sc, d_sc, sizeof sc, E));
    assert_int_equal(sc.bad, 1);
    assert_int_equal(sc.skip, 1);
    assert_int_equal(sc.steps, steps);
    down(gpu, d_p, n);
    check_exact("params after a skipped step", gpu, before, n);
    fl_cuda_free(d_p), fl_cuda_free(d_g), fl_cuda_free(d_s), fl_cuda_free(d_hp), fl_cuda_free(d_sc);
    free(p), free(gr), free(gpu), free(before);
    fl_optim_destroy(o);
}

static void test_optimizers_match_cpu(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 7);
    const fl_optim_kind kinds[] = {FL_OPTIM_SGD, FL_OPTIM_ADAM, FL_OPTIM_RMSPROP};
    for (size_t k = 0; k < 3; k++) {
        run_optim(kinds[k], 0.0f, &r);  /* no clipping */
        run_optim(kinds[k], 40.0f, &r); /* clipping on step 2 (norm ~ 300) */
    }
}

static void test_grad_norm_and_clip(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 8);
    const size_t sizes[] = {1, 255, 256, 1000003};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k];
        float *g = host(n);
        fill_normal(&r, g, n, 1.0);
        const float norm = fl_clip_grad_norm(g, n, 0.0f);
        float *d_g = up(g, n);
        fl_cuda_step_scalars_t sc;
        memset(&sc, 0, sizeof sc);
        fl_cuda_step_scalars_t *d_sc = dev(sizeof sc);
        OK(fl_cuda_to_device(d_sc, &sc, sizeof sc, E));
        /* clip to half the norm: the factor is max_norm / norm, as TensorFlow's */
        fl_cuda_optim_hyper_t hp = {FL_OPTIM_SGD, 0.0f, 0, 0, 0, 0, 0, norm * 0.5f};
        fl_cuda_optim_hyper_t *d_hp = dev(sizeof hp);
        OK(fl_cuda_to_device(d_hp, &hp, sizeof hp, E));
        OK(fl_cuda_sumsq(d_g, n, d_sc, NULL, E));
        OK(fl_cuda_step_finalize(d_hp, d_sc, 0, 0, NULL, E)); /* compute only: no step */
        OK(fl_cuda_synchronize(E));
        OK(fl_cuda_to_host(&sc, d_sc, sizeof sc, E));
        CHECK_CLOSE(sc.grad_norm, norm, 0.0, 1e-6, "grad norm of %zu floats", n);
        CHECK_CLOSE(sc.clip_scale, 0.5, 0.0, 1e-6, "clip factor (n %zu)", n);
        assert_int_equal(sc.skip, 1);
        assert_int_equal(sc.steps, 0);
        fl_cuda_free(d_g), fl_cuda_free(d_sc), fl_cuda_free(d_hp);
        free(g);
    }
}

#else /* built without CUDA */

static void test_no_cuda(void **state) {
    (void)state;
    print_message("SKIP: fleet was built without CUDA (FLEET_CUDA=OFF or nvcc/cuDNN not found)\n");
    skip();
}

#endif

int main(void) {
    openblas_set_num_threads(1);
#ifdef FLEET_HAVE_CUDA
    if (!have_gpu()) return 77; /* CTest's SKIP_RETURN_CODE (tests/CMakeLists.txt): skipped */
#else
    print_message("SKIP: fleet was built without CUDA (FLEET_CUDA=OFF or nvcc/cuDNN not found)\n");
    return 77;
#endif
    pick_seed();
    print_message("seed %llu (set FLEET_TEST_SEED to repeat)\n", (unsigned long long)g_seed);
    const struct CMUnitTest tests[] = {
#ifdef FLEET_HAVE_CUDA
        cmocka_unit_test(test_relu_matches_cpu),
        cmocka_unit_test(test_dense_matches_cpu),
        cmocka_unit_test(test_conv_matches_cpu),
        cmocka_unit_test(test_transpose_matches_host),
        cmocka_unit_test(test_bias_grad_column_sums),
        cmocka_unit_test(test_dueling_matches_cpu),
        cmocka_unit_test(test_obs_conversion_matches_cpu),
        cmocka_unit_test(test_dqn_head_matches_cpu),
        cmocka_unit_test(test_optimizers_match_cpu),
        cmocka_unit_test(test_grad_norm_and_clip),
        /* last: a bad launch may leave a sticky error that ends the process's CUDA context */
        cmocka_unit_test(test_bad_launch_is_reported),
#else
        cmocka_unit_test(test_no_cuda),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
