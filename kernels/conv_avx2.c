/* conv_avx2: fleet's convolution tiles in AVX2 + FMA (see conv_fwd.h and the top of
 * conv_fwd.c), taken on CPUs with AVX2 and FMA but no AVX-512 (conv_fwd.c, avx2_tiles;
 * on any such CPU with fl_conv_fwd_force_avx2): a convolution's forward and its weight
 * and bias gradients, and a large dense layer's forward as a 1 x 1 convolution.
 *
 * Reference op: the reference backend's fl_conv2d_forward and fl_conv2d_backward
 * (kernels/ops.c, im2col + OpenBLAS's sgemm) and, for a dense layer, fl_dense_forward
 * (kernels/ops.c); in the oneDNN backend they replace oneDNN's convolution and inner
 * product primitives (kernels/dnnl_fwd.c, fwd_conv and fwd_dense; the backward,
 * kernels/dnnl_bwd.c, bwd_conv_weights).
 *
 * Tests: tests/test_kernels_dnnl.c, test_tiles (networks on the tiles against the
 * reference backend, the plans saying the tiles ran) and test_tiles_sums (against sums
 * in double, 1 thread as 2), both forced onto these tiles on any CPU with AVX2 and FMA.
 *
 * Measured gain (AMD EPYC Zen 3, 2 cores, 2026-11-27; docs/benchmarks-log.md, "Actor
 * inference against PyTorch"): the forwards (a8d59bd) made the Nature CNN's actor step at
 * batch 64 19% faster (medians 2,510 -> 2,978) and its update at 512 97.1 -> 103.1
 * GFLOP/s; the weight gradients (e4b35bf) its update at 512 84.0 / 84.3 -> 97.4 / 106.3
 * GFLOP/s. */
#include "kernels/conv_internal.h"

#ifdef HAVE_AVX2_VERSION
#include <immintrin.h>
#include <string.h>

/* Pixel R's input value at P + e times the panel's row (w0, w1), into its accumulators. */
#define FMA2(R, P)                                                                              \
    do {                                                                                        \
        const __m256 v_ = _mm256_broadcast_ss((P) + e);                                         \
        a##R##0 = _mm256_fmadd_ps(v_, w0, a##R##0), a##R##1 = _mm256_fmadd_ps(v_, w1, a##R##1); \
    } while (0)

/* One tile: up to 6 output pixels m0.. (nr of them) x the 16 output channels of one
 * panel (weights wp; channels 0-7 at yc0 past a pixel's first output, 8-15 at yc1), the
 * sums started at the bias. Pixels past nr repeat the last one and are not stored. */
__attribute__((target("avx2,fma"))) static void tile_avx2(const fl_conv_fwd_t *c, long m0, int nr, const float *x,
                                                          const float *wp, const float *bias, float *y, long yc0,
                                                          long yc1, int relu) {
    __m256 a00 = _mm256_loadu_ps(bias), a01 = _mm256_loadu_ps(bias + 8), a10 = a00, a11 = a01, a20 = a00, a21 = a01,
           a30 = a00, a31 = a01, a40 = a00, a41 = a01, a50 = a00, a51 = a01;
    const float *xr[6];
    for (int r = 0; r < 6; r++) xr[r] = x + c->xoff[m0 + (r < nr ? r : nr - 1)];
    for (int j = 0; j < c->n; j++) {
        const long off = c->off[j];
        const float *p0 = xr[0] + off, *p1 = xr[1] + off, *p2 = xr[2] + off, *p3 = xr[3] + off, *p4 = xr[4] + off,
                    *p5 = xr[5] + off;
        const int len = c->len[j];
        for (int e = 0; e < len; e++, wp += 16) {
            const __m256 w0 = _mm256_loadu_ps(wp), w1 = _mm256_loadu_ps(wp + 8);
            FMA2(0, p0);
            FMA2(1, p1);
            FMA2(2, p2);
            FMA2(3, p3);
            FMA2(4, p4);
            FMA2(5, p5);
        }
    }
    const __m256 acc[6][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}, {a40, a41}, {a50, a51}};
    const __m256 zero = _mm256_setzero_ps();
    const long *yoff = c->yoff + m0;
    for (int r = 0; r < nr; r++) {
        __m256 v0 = acc[r][0], v1 = acc[r][1];
        if (relu) v0 = _mm256_max_ps(v0, zero), v1 = _mm256_max_ps(v1, zero);
        _mm256_storeu_ps(y + yoff[r] + yc0, v0);
        _mm256_storeu_ps(y + yoff[r] + yc1, v1);
    }
}

__attribute__((target("avx2,fma"))) void fl__conv_run_avx2(const fl_conv_fwd_t *c, const float *x, const float *wt,
                                                           const float *bias, float *y, int relu) {
    const fl_conv_fwd_geom_t *g = &c->g;
    const fl_conv_layout_t *O = &g->out;
    const long M = (long)g->batch * g->out_h * g->out_w, K = (long)g->cin * g->k * g->k, tiles = (M + 5) / 6;
    const int panels = g->cout / 16;
    /* where output channel 16 p + 8 h of a pixel lies past the pixel's first output */
    long yc[2 * FL_CONV_FWD_MAX_PANELS];
    for (int i = 0; i < 2 * panels; i++) yc[i] = 8L * i / O->blk * O->st[1] + 8L * i % O->blk;
    if (c->panels_outer) {
        PAR_FOR for (int p = 0; p < panels; p++) for (long t = 0; t < tiles; t++) {
            const int nr = M - 6 * t < 6 ? (int)(M - 6 * t) : 6;
            tile_avx2(c, 6 * t, nr, x, wt + (size_t)p * 16 * K, bias + 16 * p, y, yc[2 * p], yc[2 * p + 1], relu);
        }
        return;
    }
    PAR_FOR for (long t = 0; t < tiles; t++) {
        const int nr = M - 6 * t < 6 ? (int)(M - 6 * t) : 6;
        for (int p = 0; p < panels; p++)
            tile_avx2(c, 6 * t, nr, x, wt + (size_t)p * 16 * K, bias + 16 * p, y, yc[2 * p], yc[2 * p + 1], relu);
    }
}

/* The weights' gradient, one tile: inputs r0.. (nr of them, in the order of kofs) x the
 * 16 output channels of one panel, summed over pixels m0 to m1 into acc (6 x 16, which
 * holds the sums so far). Inputs past nr repeat the last one. The bases x + kofs[r] and
 * dy + yc are folded into six and two pointers, so that the loop indexes them with the
 * pixel's two table offsets alone. */
#define WFMA(R)                                                                                 \
    do {                                                                                        \
        const __m256 v_ = _mm256_broadcast_ss(x##R + xo);                                       \
        a##R##0 = _mm256_fmadd_ps(v_, d0, a##R##0), a##R##1 = _mm256_fmadd_ps(v_, d1, a##R##1); \
    } while (0)

__attribute__((target("avx2,fma"))) static void wgrad_tile_avx2(const fl_conv_fwd_t *c, long r0, int nr, long m0,
                                                                long m1, const float *x, const float *dy, long yc0,
                                                                long yc1, float *acc) {
    __m256 a00 = _mm256_loadu_ps(acc), a01 = _mm256_loadu_ps(acc + 8), a10 = _mm256_loadu_ps(acc + 16),
           a11 = _mm256_loadu_ps(acc + 24), a20 = _mm256_loadu_ps(acc + 32), a21 = _mm256_loadu_ps(acc + 40),
           a30 = _mm256_loadu_ps(acc + 48), a31 = _mm256_loadu_ps(acc + 56), a40 = _mm256_loadu_ps(acc + 64),
           a41 = _mm256_loadu_ps(acc + 72), a50 = _mm256_loadu_ps(acc + 80), a51 = _mm256_loadu_ps(acc + 88);
    const float *xr[6];
    for (int r = 0; r < 6; r++) xr[r] = x + c->kofs[r0 + (r < nr ? r : nr - 1)];
    const float *x0 = xr[0], *x1 = xr[1], *x2 = xr[2], *x3 = xr[3], *x4 = xr[4], *x5 = xr[5];
    const float *dy0 = dy + yc0, *dy1 = dy + yc1;
    const long *xoff = c->xoff + m0, *yoff = c->yoff + m0;
    for (long i = m1 - m0; i > 0; i--) {
        const long xo = *xoff++, yo = *yoff++;
        const __m256 d0 = _mm256_loadu_ps(dy0 + yo), d1 = _mm256_loadu_ps(dy1 + yo);
        WFMA(0);
        WFMA(1);
        WFMA(2);
        WFMA(3);
        WFMA(4);
        WFMA(5);
    }
    _mm256_storeu_ps(acc, a00), _mm256_storeu_ps(acc + 8, a01), _mm256_storeu_ps(acc + 16, a10);
    _mm256_storeu_ps(acc + 24, a11), _mm256_storeu_ps(acc + 32, a20), _mm256_storeu_ps(acc + 40, a21);
    _mm256_storeu_ps(acc + 48, a30), _mm256_storeu_ps(acc + 56, a31), _mm256_storeu_ps(acc + 64, a40);
    _mm256_storeu_ps(acc + 72, a41), _mm256_storeu_ps(acc + 80, a50), _mm256_storeu_ps(acc + 88, a51);
}

/* The bias's gradient of output channels 8 h to 8 h + 7: the sum over every pixel, in
 * pixel order. */
__attribute__((target("avx2,fma"))) static void bias_grad_avx2(const fl_conv_fwd_t *c, const float *dy, long yc, long M,
                                                               float *db) {
    __m256 a = _mm256_setzero_ps();
    for (long m = 0; m < M; m++) a = _mm256_add_ps(a, _mm256_loadu_ps(dy + c->yoff[m] + yc));
    _mm256_storeu_ps(db, a);
}

__attribute__((target("avx2,fma"))) void fl__conv_wgrad_avx2(const fl_conv_fwd_t *c, const float *x, const float *dy,
                                                             float *dw, float *db) {
    const fl_conv_fwd_geom_t *g = &c->g;
    const fl_conv_layout_t *O = &g->out;
    const long hw = (long)g->out_h * g->out_w, M = g->batch * hw, rtiles = (c->K + 5) / 6;
    const int panels = g->cout / 16;
    const long tiles = rtiles * panels, chunk = WGRAD_CHUNK;
    long yc[2 * FL_CONV_FWD_MAX_PANELS];
    for (int i = 0; i < 2 * panels; i++) yc[i] = 8L * i / O->blk * O->st[1] + 8L * i % O->blk;
    memset(c->wacc, 0, (size_t)tiles * 96 * sizeof(float));
#ifdef _OPENMP
#pragma omp parallel
#endif
    {
        long t0, t1;
        team_share(tiles, &t0, &t1);
        for (long m0 = 0; m0 < M; m0 += chunk) {
            const long m1 = M - m0 < chunk ? M : m0 + chunk;
            for (long t = t0; t < t1; t++) {
                const long rt = t / panels;
                const int p = (int)(t % panels), nr = c->K - 6 * rt < 6 ? (int)(c->K - 6 * rt) : 6;
                wgrad_tile_avx2(c, 6 * rt, nr, m0, m1, x, dy, yc[2 * p], yc[2 * p + 1], c->wacc + 96 * t);
            }
        }
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int i = 0; i < 2 * panels; i++) bias_grad_avx2(c, dy, yc[i], M, db + 8 * i);
    }
    tiles_to_dw(c, 6, 16, panels, dw);
}
#endif
