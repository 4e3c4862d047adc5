/* conv_avx512: fleet's convolution tiles in AVX-512 (see conv_fwd.h and the top of
 * conv_fwd.c), taken on CPUs with AVX-512 (conv_fwd.c, wide_for and fl_conv_img_create):
 * - the forward of a convolution over at most FL_CONV_FWD_WIDE_CIN input channels (the
 *   MinAtar network's first), on tiles of 8 pixels x 16 output channels;
 * - the forward of one over more input channels and a multiple of 32 output channels (the
 *   Nature CNN's second and third), on tiles of 6 pixels x 64 channels or 10 x 32, and its
 *   weight and bias gradients on tiles of 6 inputs x 64 outputs or 8 x 32; a mid-sized
 *   dense layer's forward from a learner's batches, as a 1 x 1 convolution;
 * - the first convolution over images as the observations come (fl_conv_img: float
 *   images, uint8 ones where AMX is not taken, and 16 output channels), its forward on
 *   tiles of 10 pixels x 32 or x 16 and its weight and bias gradients over each image
 *   converted into a buffer of the thread's.
 *
 * Reference op: the reference backend's fl_conv2d_forward and fl_conv2d_backward
 * (kernels/ops.c, im2col + OpenBLAS's sgemm) and, for a dense layer, fl_dense_forward
 * (kernels/ops.c); in the oneDNN backend they replace oneDNN's convolution and inner
 * product primitives (kernels/dnnl_fwd.c, fwd_conv and fwd_dense), and for the first
 * convolution also the space-to-depth copy of the observations.
 *
 * Tests: tests/test_kernels_dnnl.c, test_wide_tiles (against sums in double, 1 thread as
 * 2, and the MinAtar network against the reference backend), test_dense_mid (the mid-sized
 * dense layer against the reference backend), test_image_conv (fl_conv_img against sums
 * in double, each image alone giving its bits in the batch, AMX off) and test_forward_obs
 * (uint8 observations give the bits of the float path, AMX off); test_nature and
 * test_minatar run them inside whole networks against the reference backend.
 *
 * Measured gain (Intel Xeon with AMX, 2 cores, 2026-11-28; docs/benchmarks-log.md, the
 * sections named): the tiles over few input channels made the MinAtar network's actor step
 * 5-10% faster at batch 1 and 15-25% from batch 4, its update 7% / 12% at 32 / 512, the
 * MinAtar Asterix fleet 12% ("Actor inference against PyTorch"); the tiles of 6 x 64 and
 * 10 x 32 and fl_conv_img's forward took the second convolution 2.6 -> 2.4 ms and the
 * third 1.75 -> 1.55 ms (batch 64, one thread), the Nature CNN's actor step 6% faster at
 * 16 and 11% at 64, its update at 512 from 53.4-55.8% to 57.6-58.8% of the peak, and
 * their weight gradients that update from 55.8%, 54.6%, 54.2% to 58.1%, 59.3%, 58.1% ("The
 * Nature CNN's forwards on AVX-512 tiles, ..."); fl_conv_img's weight gradient saved the
 * 6.3 ms space-to-depth copy and 58 MB a plan, 1.5 to 3 points of the peak for the Nature
 * CNN at 512 ("The first convolution's weight gradient over the frames, and dueling heads
 * on dense_small"), and the mid-sized dense layers made the MinAtar MLP's update 4-6%
 * faster (the same). On the AMD EPYC Zen 4 (2026-11-29), fl_conv_img for 16 output
 * channels (configs/atari-pong.ini's network) made its update 21% faster (mean 141.2 ->
 * 171.3 updates/s) and the Pong fleet 7% and 9% ("Atari learning throughput: fleet and a
 * PyTorch DQN"). */
#include "kernels/conv_internal.h"

#ifdef HAVE_AVX2_VERSION
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

/* The AVX-512 forward, for few input channels (where oneDNN's kernels leave most of a
 * vector idle): tiles of 8 output pixels x the 16 output channels of a panel, one
 * register each, so 8 independent sums cover the FMA units' latency; each input value
 * broadcast straight from memory into its FMA. Each output is the bias plus the
 * products in the AVX2 tiles' fixed order (conv_avx2.c). */
#define WIDE_ROWS 8
#define FMA16(R) a##R = _mm512_fmadd_ps(_mm512_set1_ps(p##R[e]), w, a##R)

__attribute__((target("avx512f"))) static void tile_avx512(const fl_conv_fwd_t *c, long m0, int nr, const float *x,
                                                           const float *wp, const float *bias, float *y, long yc,
                                                           int relu) {
    __m512 a0 = _mm512_loadu_ps(bias), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    const float *xr[WIDE_ROWS];
    for (int r = 0; r < WIDE_ROWS; r++) xr[r] = x + c->xoff[m0 + (r < nr ? r : nr - 1)];
    for (int j = 0; j < c->n; j++) {
        const long off = c->off[j];
        const float *p0 = xr[0] + off, *p1 = xr[1] + off, *p2 = xr[2] + off, *p3 = xr[3] + off, *p4 = xr[4] + off,
                    *p5 = xr[5] + off, *p6 = xr[6] + off, *p7 = xr[7] + off;
        const int len = c->len[j];
        for (int e = 0; e < len; e++, wp += 16) {
            const __m512 w = _mm512_loadu_ps(wp);
            FMA16(0);
            FMA16(1);
            FMA16(2);
            FMA16(3);
            FMA16(4);
            FMA16(5);
            FMA16(6);
            FMA16(7);
        }
    }
    const __m512 acc[WIDE_ROWS] = {a0, a1, a2, a3, a4, a5, a6, a7};
    const long *yoff = c->yoff + m0;
    for (int r = 0; r < nr; r++)
        _mm512_storeu_ps(y + yoff[r] + yc, relu ? _mm512_max_ps(acc[r], _mm512_setzero_ps()) : acc[r]);
}

__attribute__((target("avx512f"))) void fl__conv_run_avx512(const fl_conv_fwd_t *c, const float *x, const float *wt,
                                                            const float *bias, float *y, int relu) {
    const fl_conv_fwd_geom_t *g = &c->g;
    const long M = (long)g->batch * g->out_h * g->out_w, K = (long)g->cin * g->k * g->k;
    const long tiles = (M + WIDE_ROWS - 1) / WIDE_ROWS;
    const int panels = g->cout / 16;
    long yc[FL_CONV_FWD_MAX_PANELS];
    panel_offsets(g, yc);
    PAR_FOR for (long t = 0; t < tiles; t++) {
        const int nr = M - WIDE_ROWS * t < WIDE_ROWS ? (int)(M - WIDE_ROWS * t) : WIDE_ROWS;
        for (int p = 0; p < panels; p++)
            tile_avx512(c, WIDE_ROWS * t, nr, x, wt + (size_t)p * 16 * K, bias + 16 * p, y, yc[p], relu);
    }
}

/* Many input channels, and images read as they come (fl_conv_img): tiles of 6 output
 * pixels x 4 panels or 10 x 2 (24 or 20 accumulators), one broadcast per pixel and 4 (2)
 * loads of the weights' row per input value. xr: each pixel's first input; segment j is
 * len[j] values from off[j] past it; yo: each pixel's first output, yc: each panel's
 * channels past it. Pixels past nr repeat the last one and are not stored. */
#define MBC(R) const __m512 b##R = _mm512_set1_ps(p##R[e])
#define MF4(R)                                                                                      \
    do {                                                                                            \
        MBC(R);                                                                                     \
        a##R##0 = _mm512_fmadd_ps(b##R, w0, a##R##0), a##R##1 = _mm512_fmadd_ps(b##R, w1, a##R##1); \
        a##R##2 = _mm512_fmadd_ps(b##R, w2, a##R##2), a##R##3 = _mm512_fmadd_ps(b##R, w3, a##R##3); \
    } while (0)
#define MF2(R)                                                                                      \
    do {                                                                                            \
        MBC(R);                                                                                     \
        a##R##0 = _mm512_fmadd_ps(b##R, w0, a##R##0), a##R##1 = _mm512_fmadd_ps(b##R, w1, a##R##1); \
    } while (0)
#define MSTORE(NR, NP, ACC)            \
    for (int r = 0; r < (NR); r++)     \
        for (int q = 0; q < (NP); q++) \
    _mm512_storeu_ps(y + yo[r] + yc[q], relu ? _mm512_max_ps(ACC[r][q], _mm512_setzero_ps()) : ACC[r][q])

__attribute__((target("avx512f"))) static void tile6x4(const float *const *xr, int nr, const long *off, const int *len,
                                                       int nseg, const float *wp, const float *bias, float *y,
                                                       const long *yo, const long *yc, int relu) {
    __m512 a00 = _mm512_loadu_ps(bias), a01 = _mm512_loadu_ps(bias + 16), a02 = _mm512_loadu_ps(bias + 32),
           a03 = _mm512_loadu_ps(bias + 48);
    __m512 a10 = a00, a11 = a01, a12 = a02, a13 = a03, a20 = a00, a21 = a01, a22 = a02, a23 = a03;
    __m512 a30 = a00, a31 = a01, a32 = a02, a33 = a03, a40 = a00, a41 = a01, a42 = a02, a43 = a03;
    __m512 a50 = a00, a51 = a01, a52 = a02, a53 = a03;
    for (int j = 0; j < nseg; j++) {
        const long o = off[j];
        const float *p0 = xr[0] + o, *p1 = xr[1] + o, *p2 = xr[2] + o, *p3 = xr[3] + o, *p4 = xr[4] + o,
                    *p5 = xr[5] + o;
        const int n = len[j];
        for (int e = 0; e < n; e++, wp += 64) {
            const __m512 w0 = _mm512_loadu_ps(wp), w1 = _mm512_loadu_ps(wp + 16), w2 = _mm512_loadu_ps(wp + 32),
                         w3 = _mm512_loadu_ps(wp + 48);
            MF4(0);
            MF4(1);
            MF4(2);
            MF4(3);
            MF4(4);
            MF4(5);
        }
    }
    const __m512 acc[6][4] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23},
                              {a30, a31, a32, a33}, {a40, a41, a42, a43}, {a50, a51, a52, a53}};
    MSTORE(nr, 4, acc);
}

__attribute__((target("avx512f"))) static void tile10x2(const float *const *xr, int nr, const long *off, const int *len,
                                                        int nseg, const float *wp, const float *bias, float *y,
                                                        const long *yo, const long *yc, int relu) {
    __m512 a00 = _mm512_loadu_ps(bias), a01 = _mm512_loadu_ps(bias + 16);
    __m512 a10 = a00, a11 = a01, a20 = a00, a21 = a01, a30 = a00, a31 = a01, a40 = a00, a41 = a01, a50 = a00, a51 = a01,
           a60 = a00, a61 = a01, a70 = a00, a71 = a01, a80 = a00, a81 = a01, a90 = a00, a91 = a01;
    for (int j = 0; j < nseg; j++) {
        const long o = off[j];
        const float *p0 = xr[0] + o, *p1 = xr[1] + o, *p2 = xr[2] + o, *p3 = xr[3] + o, *p4 = xr[4] + o,
                    *p5 = xr[5] + o, *p6 = xr[6] + o, *p7 = xr[7] + o, *p8 = xr[8] + o, *p9 = xr[9] + o;
        const int n = len[j];
        for (int e = 0; e < n; e++, wp += 32) {
            const __m512 w0 = _mm512_loadu_ps(wp), w1 = _mm512_loadu_ps(wp + 16);
            MF2(0);
            MF2(1);
            MF2(2);
            MF2(3);
            MF2(4);
            MF2(5);
            MF2(6);
            MF2(7);
            MF2(8);
            MF2(9);
        }
    }
    const __m512 acc[10][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}, {a40, a41},
                               {a50, a51}, {a60, a61}, {a70, a71}, {a80, a81}, {a90, a91}};
    MSTORE(nr, 2, acc);
}

#define MF1(R) a##R = _mm512_fmadd_ps(_mm512_set1_ps(p##R[e]), w0, a##R)

/* One panel (16 output channels, as the 2013 DQN's first convolution has): 10 pixels x 16
 * channels, 10 accumulators, each weight row loaded once for the 10 pixels. */
__attribute__((target("avx512f"))) static void tile10x1(const float *const *xr, int nr, const long *off, const int *len,
                                                        int nseg, const float *wp, const float *bias, float *y,
                                                        const long *yo, const long *yc, int relu) {
    __m512 a0 = _mm512_loadu_ps(bias), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
    for (int j = 0; j < nseg; j++) {
        const long o = off[j];
        const float *p0 = xr[0] + o, *p1 = xr[1] + o, *p2 = xr[2] + o, *p3 = xr[3] + o, *p4 = xr[4] + o,
                    *p5 = xr[5] + o, *p6 = xr[6] + o, *p7 = xr[7] + o, *p8 = xr[8] + o, *p9 = xr[9] + o;
        const int n = len[j];
        for (int e = 0; e < n; e++, wp += 16) {
            const __m512 w0 = _mm512_loadu_ps(wp);
            MF1(0);
            MF1(1);
            MF1(2);
            MF1(3);
            MF1(4);
            MF1(5);
            MF1(6);
            MF1(7);
            MF1(8);
            MF1(9);
        }
    }
    const __m512 acc[10][1] = {{a0}, {a1}, {a2}, {a3}, {a4}, {a5}, {a6}, {a7}, {a8}, {a9}};
    MSTORE(nr, 1, acc);
}

/* One tile of np panels (4: 6 pixels, 2 or 1: 10) over each group of np panels in turn. */
__attribute__((target("avx512f"))) static void multi_tile(int np, const float *const *xr, int nr, const long *off,
                                                          const int *len, int nseg, long K, int groups, const float *wt,
                                                          const float *bias, float *y, const long *yo, const long *yc,
                                                          int relu) {
    for (int p = 0; p < groups; p++) {
        if (np == 4)
            tile6x4(xr, nr, off, len, nseg, wt + (size_t)p * 64 * K, bias + 64 * p, y, yo, yc + 4 * p, relu);
        else if (np == 2)
            tile10x2(xr, nr, off, len, nseg, wt + (size_t)p * 32 * K, bias + 32 * p, y, yo, yc + 2 * p, relu);
        else
            tile10x1(xr, nr, off, len, nseg, wt + (size_t)p * 16 * K, bias + 16 * p, y, yo, yc + p, relu);
    }
}

__attribute__((target("avx512f"))) void fl__conv_run_multi(const fl_conv_fwd_t *c, const float *x, const float *wt,
                                                           const float *bias, float *y, int relu) {
    const fl_conv_fwd_geom_t *g = &c->g;
    const long M = (long)g->batch * g->out_h * g->out_w;
    const int np = c->np, rows = MULTI_ROWS(np);
    const long tiles = (M + rows - 1) / rows;
    long yc[FL_CONV_FWD_MAX_PANELS];
    panel_offsets(g, yc);
    PAR_FOR for (long t = 0; t < tiles; t++) {
        const long m0 = rows * t;
        const int nr = M - m0 < rows ? (int)(M - m0) : rows;
        const float *xr[10];
        long yo[10];
        for (int r = 0; r < rows; r++) {
            const long m = m0 + (r < nr ? r : nr - 1);
            xr[r] = x + c->xoff[m], yo[r] = c->yoff[m];
        }
        multi_tile(np, xr, nr, c->off, c->len, c->n, c->K, g->cout / (16 * np), wt, bias, y, yo, yc, relu);
    }
}
/* The AVX-512 weight gradient (many input channels): tiles of 6 inputs x 4 panels (24
 * accumulators) or 8 x 2 (16), summed over pixels m0 to m1 into acc (the sums so far,
 * ni x np x 16), as the AVX2 one: each input's value at a pixel broadcast, the pixel's
 * output gradients of the panels loaded once. */
#define WB(R) const __m512 v##R = _mm512_set1_ps(x##R[xo])
#define WF4(R)                                                                                      \
    do {                                                                                            \
        WB(R);                                                                                      \
        a##R##0 = _mm512_fmadd_ps(v##R, d0, a##R##0), a##R##1 = _mm512_fmadd_ps(v##R, d1, a##R##1); \
        a##R##2 = _mm512_fmadd_ps(v##R, d2, a##R##2), a##R##3 = _mm512_fmadd_ps(v##R, d3, a##R##3); \
    } while (0)
#define WF2(R)                                                                                      \
    do {                                                                                            \
        WB(R);                                                                                      \
        a##R##0 = _mm512_fmadd_ps(v##R, d0, a##R##0), a##R##1 = _mm512_fmadd_ps(v##R, d1, a##R##1); \
    } while (0)
#define WLOAD(R, NP) \
    for (int q = 0; q < (NP); q++) A[R][q] = _mm512_loadu_ps(acc + 16 * ((R) * (NP) + q))

__attribute__((target("avx512f"))) static void wtile6x4(const float *const *xr, const long *xoff, const long *yoff,
                                                        long n, const float *const *dq, float *acc) {
    __m512 A[6][4];
    for (int r = 0; r < 6; r++) WLOAD(r, 4);
    __m512 a00 = A[0][0], a01 = A[0][1], a02 = A[0][2], a03 = A[0][3], a10 = A[1][0], a11 = A[1][1], a12 = A[1][2],
           a13 = A[1][3], a20 = A[2][0], a21 = A[2][1], a22 = A[2][2], a23 = A[2][3], a30 = A[3][0], a31 = A[3][1],
           a32 = A[3][2], a33 = A[3][3], a40 = A[4][0], a41 = A[4][1], a42 = A[4][2], a43 = A[4][3], a50 = A[5][0],
           a51 = A[5][1], a52 = A[5][2], a53 = A[5][3];
    const float *x0 = xr[0], *x1 = xr[1], *x2 = xr[2], *x3 = xr[3], *x4 = xr[4], *x5 = xr[5];
    const float *dy0 = dq[0], *dy1 = dq[1], *dy2 = dq[2], *dy3 = dq[3];
    for (long i = n; i > 0; i--) {
        const long xo = *xoff++, yo = *yoff++;
        const __m512 d0 = _mm512_loadu_ps(dy0 + yo), d1 = _mm512_loadu_ps(dy1 + yo), d2 = _mm512_loadu_ps(dy2 + yo),
                     d3 = _mm512_loadu_ps(dy3 + yo);
        WF4(0);
        WF4(1);
        WF4(2);
        WF4(3);
        WF4(4);
        WF4(5);
    }
    const __m512 out[6][4] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23},
                              {a30, a31, a32, a33}, {a40, a41, a42, a43}, {a50, a51, a52, a53}};
    for (int r = 0; r < 6; r++)
        for (int q = 0; q < 4; q++) _mm512_storeu_ps(acc + 16 * (r * 4 + q), out[r][q]);
}

__attribute__((target("avx512f"))) static void wtile8x2(const float *const *xr, const long *xoff, const long *yoff,
                                                        long n, const float *const *dq, float *acc) {
    __m512 A[8][2];
    for (int r = 0; r < 8; r++) WLOAD(r, 2);
    __m512 a00 = A[0][0], a01 = A[0][1], a10 = A[1][0], a11 = A[1][1], a20 = A[2][0], a21 = A[2][1], a30 = A[3][0],
           a31 = A[3][1], a40 = A[4][0], a41 = A[4][1], a50 = A[5][0], a51 = A[5][1], a60 = A[6][0], a61 = A[6][1],
           a70 = A[7][0], a71 = A[7][1];
    const float *x0 = xr[0], *x1 = xr[1], *x2 = xr[2], *x3 = xr[3], *x4 = xr[4], *x5 = xr[5], *x6 = xr[6], *x7 = xr[7];
    const float *dy0 = dq[0], *dy1 = dq[1];
    for (long i = n; i > 0; i--) {
        const long xo = *xoff++, yo = *yoff++;
        const __m512 d0 = _mm512_loadu_ps(dy0 + yo), d1 = _mm512_loadu_ps(dy1 + yo);
        WF2(0);
        WF2(1);
        WF2(2);
        WF2(3);
        WF2(4);
        WF2(5);
        WF2(6);
        WF2(7);
    }
    const __m512 out[8][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31},
                              {a40, a41}, {a50, a51}, {a60, a61}, {a70, a71}};
    for (int r = 0; r < 8; r++)
        for (int q = 0; q < 2; q++) _mm512_storeu_ps(acc + 16 * (r * 2 + q), out[r][q]);
}

/* One panel: 16 inputs x 16 outputs (16 accumulators). The inputs are x[xo + r] past
 * one pointer x (a run of 16 values that lie side by side, as a kernel row's do in an
 * image's channels-last copy), or, where they do not, past one pointer each (xr). */
#define WC1(R) a##R = _mm512_fmadd_ps(_mm512_set1_ps(x[xo + R]), d0, a##R)
#define WP1(R) a##R = _mm512_fmadd_ps(_mm512_set1_ps(xr[R][xo]), d0, a##R)
#define WTILE16(F)                                       \
    do {                                                 \
        for (long i = n; i > 0; i--) {                   \
            const long xo = *xoff++, yo = *yoff++;       \
            const __m512 d0 = _mm512_loadu_ps(dy0 + yo); \
            F(0);                                        \
            F(1);                                        \
            F(2);                                        \
            F(3);                                        \
            F(4);                                        \
            F(5);                                        \
            F(6);                                        \
            F(7);                                        \
            F(8);                                        \
            F(9);                                        \
            F(10);                                       \
            F(11);                                       \
            F(12);                                       \
            F(13);                                       \
            F(14);                                       \
            F(15);                                       \
        }                                                \
    } while (0)
__attribute__((target("avx512f"))) static void wtile16x1(const float *const *xr, const long *xoff, const long *yoff,
                                                         long n, const float *const *dq, float *acc) {
    __m512 a0 = _mm512_loadu_ps(acc), a1 = _mm512_loadu_ps(acc + 16), a2 = _mm512_loadu_ps(acc + 32),
           a3 = _mm512_loadu_ps(acc + 48), a4 = _mm512_loadu_ps(acc + 64), a5 = _mm512_loadu_ps(acc + 80),
           a6 = _mm512_loadu_ps(acc + 96), a7 = _mm512_loadu_ps(acc + 112), a8 = _mm512_loadu_ps(acc + 128),
           a9 = _mm512_loadu_ps(acc + 144), a10 = _mm512_loadu_ps(acc + 160), a11 = _mm512_loadu_ps(acc + 176),
           a12 = _mm512_loadu_ps(acc + 192), a13 = _mm512_loadu_ps(acc + 208), a14 = _mm512_loadu_ps(acc + 224),
           a15 = _mm512_loadu_ps(acc + 240);
    const float *dy0 = dq[0], *x = xr[0];
    int side_by_side = 1;
    for (int r = 1; r < 16; r++) side_by_side &= xr[r] == x + r;
    if (side_by_side)
        WTILE16(WC1);
    else
        WTILE16(WP1);
    const __m512 out[16] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15};
    for (int r = 0; r < 16; r++) _mm512_storeu_ps(acc + 16 * r, out[r]);
}

#define WGRAD_INPUTS(np) ((np) == 4 ? 6 : (np) == 2 ? 8 : 16)
#define WGRAD_MAX_INPUTS 16

/* The parameter gradients on the AVX-512 tiles: as the AVX2 ones (pixels in chunks of
 * WGRAD_CHUNK, each thread its own tiles summed over the chunks in order), the bias's
 * gradient summed per chunk by the team's first thread, from the chunk's output
 * gradients while they are in cache (four running sums, then the chunk's total added in
 * chunk order: the same bits at any thread count). One chunk, pixels m0 to m1, tiles t0
 * to t1 (this thread's); x: where c->xoff counts from; the output gradients at dy +
 * yoff[m - m0] + yc[panel]. */
__attribute__((target("avx512f"))) static void wgrad_chunk(const fl_conv_fwd_t *c, const float *x, const float *dy,
                                                           const long *yoff, const long *yc, long m0, long m1, long t0,
                                                           long t1, int first, float *db) {
    const int np = c->np, ni = WGRAD_INPUTS(np), groups = c->g.cout / (16 * np), panels = c->g.cout / 16;
    const long tsz = (long)ni * np * 16;
    for (long t = t0; t < t1; t++) {
        const long rt = t / groups;
        const int p = (int)(t % groups), nr = c->K - ni * rt < ni ? (int)(c->K - ni * rt) : ni;
        const float *xr[WGRAD_MAX_INPUTS], *dq[4];
        for (int r = 0; r < ni; r++) xr[r] = x + c->kofs[ni * rt + (r < nr ? r : nr - 1)];
        for (int q = 0; q < np; q++) dq[q] = dy + yc[np * p + q];
        if (np == 4)
            wtile6x4(xr, c->xoff + m0, yoff, m1 - m0, dq, c->wacc + tsz * t);
        else if (np == 2)
            wtile8x2(xr, c->xoff + m0, yoff, m1 - m0, dq, c->wacc + tsz * t);
        else
            wtile16x1(xr, c->xoff + m0, yoff, m1 - m0, dq, c->wacc + tsz * t);
    }
    if (first) /* the bias, every panel: the chunk's pixels in four running sums */
        for (int q = 0; q < panels; q++) {
            __m512 s4[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            for (long m = m0; m < m1; m++)
                s4[(m - m0) & 3] = _mm512_add_ps(s4[(m - m0) & 3], _mm512_loadu_ps(dy + yoff[m - m0] + yc[q]));
            const __m512 sum = _mm512_add_ps(_mm512_add_ps(s4[0], s4[1]), _mm512_add_ps(s4[2], s4[3]));
            _mm512_storeu_ps(db + 16 * q, _mm512_add_ps(_mm512_loadu_ps(db + 16 * q), sum));
        }
}

/* The gradient tiles of c (rtiles of inputs x groups of outputs) and their sums zeroed. */
static long wgrad_start(const fl_conv_fwd_t *c, float *db) {
    const int ni = WGRAD_INPUTS(c->np);
    const long tiles = (c->K + ni - 1) / ni * (c->g.cout / (16 * c->np));
    memset(c->wacc, 0, (size_t)tiles * ni * 16 * c->np * sizeof(float));
    memset(db, 0, (size_t)c->g.cout * sizeof(float));
    return tiles;
}

static int team_first(void) {
#ifdef _OPENMP
    return omp_get_thread_num() == 0;
#else
    return 1;
#endif
}

__attribute__((target("avx512f"))) void fl__conv_wgrad_avx512(const fl_conv_fwd_t *c, const float *x, const float *dy,
                                                              float *dw, float *db) {
    const long M = (long)c->g.batch * c->g.out_h * c->g.out_w, tiles = wgrad_start(c, db);
    long yc[FL_CONV_FWD_MAX_PANELS];
    panel_offsets(&c->g, yc);
#ifdef _OPENMP
#pragma omp parallel
#endif
    {
        long t0, t1;
        team_share(tiles, &t0, &t1);
        const int first = team_first();
        for (long m0 = 0; m0 < M; m0 += WGRAD_CHUNK)
            wgrad_chunk(c, x, dy, c->yoff + m0, yc, m0, M - m0 < WGRAD_CHUNK ? M : m0 + WGRAD_CHUNK, t0, t1, first, db);
    }
    tiles_to_dw(c, WGRAD_INPUTS(c->np), 16 * c->np, c->g.cout / (16 * c->np), dw);
}

/* ---- fl_conv_img ---- */

/* n observation values into d as the first convolution reads them: u8 (when not NULL)
 * x 1/255, else f, times scale; the forward and the weight gradient both convert so. */
__attribute__((target("avx512f"))) static void img_convert(float *d, const unsigned char *u8, const float *f,
                                                           float scale, long n) {
    if (u8) {
        const __m512 k255 = _mm512_set1_ps(1.0f / 255.0f), ks = _mm512_set1_ps(scale);
        long i = 0;
        for (; i + 16 <= n; i += 16) {
            const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(u8 + i))));
            _mm512_storeu_ps(d + i, _mm512_mul_ps(ks, _mm512_mul_ps(v, k255)));
        }
        for (; i < n; i++) d[i] = scale * ((float)u8[i] * (1.0f / 255.0f));
    } else {
#pragma omp simd
        for (long i = 0; i < n; i++) d[i] = scale * f[i];
    }
}

__attribute__((target("avx512f"))) void fl__conv_img_run_avx512(const fl_conv_img_t *c, const unsigned char *u8,
                                                                const float *f, float scale, const float *wt,
                                                                const float *bias, float *y, int relu) {
    const fl_conv_fwd_geom_t *g = &c->g;
    const int R = c->R, s = g->stride, C = g->cin, k = g->k;
    const long tiles = (long)g->batch * g->out_h * c->tpr;
    long yc[FL_CONV_FWD_MAX_PANELS];
    panel_offsets(g, yc);
    PAR_FOR for (long t = 0; t < tiles; t++) {
        float buf[FL_CONV_IMG_BUF] __attribute__((aligned(64)));
        const long b = t / ((long)g->out_h * c->tpr), oy = t / c->tpr % g->out_h, ox0 = t % c->tpr * R;
        const int nr = g->out_w - ox0 < R ? (int)(g->out_w - ox0) : R;
        const long n = ((long)(nr - 1) * s + k) * C; /* the values of one input row the tile reads */
        for (int kh = 0; kh < k; kh++) {
            const size_t at = (((size_t)b * g->in_h + oy * s + kh) * g->in_w + ox0 * s) * C;
            img_convert(buf + kh * c->rowlen, u8 ? u8 + at : NULL, u8 ? NULL : f + at, scale, n);
        }
        const float *xr[10];
        long yo[10];
        for (int r = 0; r < MULTI_ROWS(c->np); r++) {
            const int rr = r < nr ? r : nr - 1;
            xr[r] = buf + (long)rr * s * C;
            yo[r] = b * g->out.st[0] + oy * g->out.st[2] + (ox0 + rr) * g->out.st[3];
        }
        multi_tile(c->np, xr, nr, c->off, c->len, k, c->K, g->cout / (16 * c->np), wt, bias, y, yo, yc, relu);
    }
}

/* The floats of one thread's buffers for img_wgrad: a converted image, then a chunk's
 * masked output gradients. */
static long img_wbuf_floats(const fl_conv_img_t *c, long *image) {
    *image = ((long)c->g.in_h * c->g.in_w * c->g.cin + 15) / 16 * 16;
    return *image + (long)WGRAD_CHUNK * c->g.cout;
}

/* The weight gradient over the images: each thread converts each image as the forward does
 * (uint8 x 1/255, or float, times the scale) into a buffer of its own, then runs its tiles
 * over that image's pixels in chunks (none straddles an image) from cache. With relu_y,
 * each chunk's output gradients are first masked where relu_y (the forward's outputs
 * after relu) is not above 0, as relu's backward would (into the thread's chunk buffer,
 * pixel after pixel, its cout channels side by side), and dy itself is not written. */
__attribute__((target("avx512f"))) static void img_wgrad(fl_conv_img_t *ci, const unsigned char *u8, const float *f,
                                                         float scale, const float *dy, const float *relu_y, float *dw,
                                                         float *db) {
    const fl_conv_fwd_t *c = ci->w;
    const fl_conv_fwd_geom_t *g = &ci->g;
    const long hw = (long)g->out_h * g->out_w, nimg = (long)g->in_h * g->in_w * g->cin, cout = g->cout;
    const int panels = g->cout / 16;
    long stride;
    const long per_thread = img_wbuf_floats(ci, &stride);
    const long tiles = wgrad_start(c, db);
    long yc[FL_CONV_FWD_MAX_PANELS], lyc[FL_CONV_FWD_MAX_PANELS], lyoff[WGRAD_CHUNK];
    panel_offsets(g, yc);
    for (int q = 0; q < panels; q++) lyc[q] = 16L * q;
    for (long i = 0; i < WGRAD_CHUNK; i++) lyoff[i] = i * cout;
#ifdef _OPENMP
#pragma omp parallel
#endif
    {
        long t0, t1;
        team_share(tiles, &t0, &t1);
        const int first = team_first();
#ifdef _OPENMP
        float *buf = ci->wbuf + per_thread * omp_get_thread_num();
#else
        float *buf = ci->wbuf;
#endif
        float *dl = buf + stride; /* a chunk's masked output gradients */
        for (long b = 0; b < g->batch; b++) {
            img_convert(buf, u8 ? u8 + b * nimg : NULL, u8 ? NULL : f + b * nimg, scale, nimg);
            for (long m0 = b * hw; m0 < (b + 1) * hw; m0 += WGRAD_CHUNK) {
                const long m1 = (b + 1) * hw - m0 < WGRAD_CHUNK ? (b + 1) * hw : m0 + WGRAD_CHUNK;
                if (!relu_y) {
                    wgrad_chunk(c, buf, dy, c->yoff + m0, yc, m0, m1, t0, t1, first, db);
                    continue;
                }
                for (long m = m0; m < m1; m++)
                    for (int q = 0; q < panels; q++) {
                        const long at = c->yoff[m] + yc[q];
                        const __mmask16 on =
                            _mm512_cmp_ps_mask(_mm512_loadu_ps(relu_y + at), _mm512_setzero_ps(), _CMP_GT_OQ);
                        _mm512_store_ps(dl + (m - m0) * cout + 16 * q,
                                        _mm512_maskz_mov_ps(on, _mm512_loadu_ps(dy + at)));
                    }
                wgrad_chunk(c, buf, dl, lyoff, lyc, m0, m1, t0, t1, first, db);
            }
        }
    }
    tiles_to_dw(c, WGRAD_INPUTS(c->np), 16 * c->np, g->cout / (16 * c->np), dw);
}

/* fl_conv_img_wgrad on the AVX-512 tiles: the tables (a convolution over one image) and
 * the threads' buffers made or grown first; -1 where memory ran out. */
int fl__conv_img_wgrad_avx512(fl_conv_img_t *c, const unsigned char *u8, const float *f, float scale, const float *dy,
                              const float *relu_y, float *dw, float *db) {
    if (!c->w) {
        fl_conv_fwd_geom_t wg = c->g;
        wg.in = (fl_conv_layout_t){{0, 1, (long)c->g.in_w * c->g.cin, c->g.cin}, 1};
        if (!(c->w = fl_conv_fwd_create(&wg))) return -1;
        c->w->np = c->np; /* its AVX-512 gradient tiles, whatever cin is */
    }
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
#else
    const int threads = 1;
#endif
    if (threads > c->wbuf_threads) {
        long image;
        float *buf = aligned_alloc(64, (size_t)img_wbuf_floats(c, &image) * threads * sizeof(float));
        if (!buf) return -1;
        free(c->wbuf);
        c->wbuf = buf, c->wbuf_threads = threads;
    }
    img_wgrad(c, u8, f, scale, dy, relu_y, dw, db);
    return 0;
}
#endif
