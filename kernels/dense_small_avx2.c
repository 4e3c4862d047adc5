/* dense_small_avx2: fleet's small dense forwards in AVX2 + FMA (see dense_small.h):
 * dense_small, blocks of 3 outputs x 4 rows (12 accumulators, 3 weight rows and 1 input
 * row in AVX2's 16 registers; the rows past a multiple of 4 in blocks of 3 outputs x 1
 * row), and dense_thin, tiles of up to 6 rows x 16 outputs along the vector lanes. The
 * oneDNN backend takes dense_small for a large layer at batches of 4 to 16 (where the AVX2
 * tiles of conv_avx2.c do not take it) and dense_thin for rows of up to 16 inputs on CPUs
 * with AVX2 and FMA but no AVX-512, and dense_small
 * for a layer of up to 32 outputs (a dueling head) on any CPU with AVX2 and FMA
 * (kernels/dnnl_fwd.c, fwd_dense; dense_small.c says whether the CPU has them).
 *
 * Reference op: the reference backend's fl_dense_forward (kernels/ops.c, OpenBLAS's
 * sgemm); in the oneDNN backend they replace oneDNN's inner product forward.
 *
 * Tests: tests/test_kernels_dnnl.c, test_dense_small and test_dense_thin (networks on
 * them against the reference backend, the plans saying they ran, every tail of rows,
 * inputs and outputs), test_dense_small_sums and test_dense_thin_sums (against sums in
 * double; a row's results do not depend on the rows beside it).
 *
 * Measured gain (docs/benchmarks-log.md, the sections named): on the AMD EPYC Zen 3 (2
 * cores), dense_small for large layers at small batches (4ab1520, 2026-11-26) made the
 * Nature CNN's actor step 29% faster at batch 4 and 20% at 16; dense_thin and the heads
 * on dense_small (9c431bd, 928b57b, 2026-11-26/27) the MLP's actor step at 64 9% faster
 * (best windows), its update at 128 12%, and the MinAtar Breakout fleet 5-7% (the head)
 * ("Actor inference against PyTorch"; "MinAtar Breakout on the AMD machine"). On the Intel
 * Xeon with AMX (2026-11-28), the Nature CNN's head of 19 outputs at batch 512 took 0.09
 * ms on dense_small against 0.73 ms in oneDNN's GEMM ("The first convolution's weight
 * gradient over the frames, and dueling heads on dense_small"). */
#include "kernels/dense_small.h"

#include "kernels/dense_small_internal.h"

#ifdef HAVE_AVX2_VERSION
#include <immintrin.h>
#include <stddef.h>

#ifdef _OPENMP
#define PAR_FOR _Pragma("omp parallel for schedule(static)")
#else
#define PAR_FOR
#endif

#define RELU(v) ((v) > 0.0f ? (v) : 0.0f)

/* The end of one dot product: the 8 lanes of A added pairwise, the inputs past a
 * multiple of 8, the bias, relu; into y (row Bi, output J of the tile). */
#define DOT_FINISH(A, J, Bi)                                                                  \
    do {                                                                                      \
        float l_[8];                                                                          \
        _mm256_storeu_ps(l_, A);                                                              \
        float s_ = ((l_[0] + l_[4]) + (l_[1] + l_[5])) + ((l_[2] + l_[6]) + (l_[3] + l_[7])); \
        for (int t = k; t < in; t++) s_ += w[(size_t)(J)*in + t] * x[(size_t)(Bi)*in + t];    \
        s_ += bias[J];                                                                        \
        y[(size_t)(Bi)*out + (J)] = relu ? RELU(s_) : s_;                                     \
    } while (0)

__attribute__((target("avx2,fma"))) static inline void tile_3x4_avx2(const float *x, const float *w, const float *bias,
                                                                     float *y, int in, int out, int relu) {
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00,
           a20 = a00, a21 = a00, a22 = a00, a23 = a00;
    const float *w0 = w, *w1 = w + in, *w2 = w + 2 * (size_t)in;
    const float *x0 = x, *x1 = x + in, *x2 = x + 2 * (size_t)in, *x3 = x + 3 * (size_t)in;
    int k = 0;
    for (; k + 8 <= in; k += 8) {
        const __m256 v0 = _mm256_loadu_ps(w0 + k), v1 = _mm256_loadu_ps(w1 + k), v2 = _mm256_loadu_ps(w2 + k);
        __m256 xv = _mm256_loadu_ps(x0 + k);
        a00 = _mm256_fmadd_ps(v0, xv, a00), a10 = _mm256_fmadd_ps(v1, xv, a10), a20 = _mm256_fmadd_ps(v2, xv, a20);
        xv = _mm256_loadu_ps(x1 + k);
        a01 = _mm256_fmadd_ps(v0, xv, a01), a11 = _mm256_fmadd_ps(v1, xv, a11), a21 = _mm256_fmadd_ps(v2, xv, a21);
        xv = _mm256_loadu_ps(x2 + k);
        a02 = _mm256_fmadd_ps(v0, xv, a02), a12 = _mm256_fmadd_ps(v1, xv, a12), a22 = _mm256_fmadd_ps(v2, xv, a22);
        xv = _mm256_loadu_ps(x3 + k);
        a03 = _mm256_fmadd_ps(v0, xv, a03), a13 = _mm256_fmadd_ps(v1, xv, a13), a23 = _mm256_fmadd_ps(v2, xv, a23);
    }
    DOT_FINISH(a00, 0, 0);
    DOT_FINISH(a01, 0, 1);
    DOT_FINISH(a02, 0, 2);
    DOT_FINISH(a03, 0, 3);
    DOT_FINISH(a10, 1, 0);
    DOT_FINISH(a11, 1, 1);
    DOT_FINISH(a12, 1, 2);
    DOT_FINISH(a13, 1, 3);
    DOT_FINISH(a20, 2, 0);
    DOT_FINISH(a21, 2, 1);
    DOT_FINISH(a22, 2, 2);
    DOT_FINISH(a23, 2, 3);
}

__attribute__((target("avx2,fma"))) static inline void tile_1x1_avx2(const float *x, const float *w, const float *bias,
                                                                     float *y, int in, int out, int relu) {
    __m256 a = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= in; k += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), a);
    DOT_FINISH(a, 0, 0);
}

__attribute__((target("avx2,fma"))) static inline void tile_3x1_avx2(const float *x, const float *w, const float *bias,
                                                                     float *y, int in, int out, int relu) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0;
    int k = 0;
    for (; k + 8 <= in; k += 8) {
        const __m256 xv = _mm256_loadu_ps(x + k);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), xv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + in + k), xv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + 2 * (size_t)in + k), xv, a2);
    }
    DOT_FINISH(a0, 0, 0);
    DOT_FINISH(a1, 1, 0);
    DOT_FINISH(a2, 2, 0);
}

__attribute__((target("avx2,fma"))) void fl__dense_small_avx2(const float *x, const float *w, const float *bias,
                                                              float *y, int B, int in, int out, int relu) {
    /* Tiles of 3 outputs x up to 4 rows, in parallel over both (a dueling head's few
     * outputs still spread over the threads). */
    const int blocks = (out + 2) / 3, rblocks = (B + 3) / 4;
    PAR_FOR for (int t = 0; t < blocks * rblocks; t++) {
        const int o = t % blocks * 3, no = out - o < 3 ? out - o : 3, b0 = t / blocks * 4, nb = B - b0 < 4 ? B - b0 : 4;
        const float *xb = x + (size_t)b0 * in, *wo = w + (size_t)o * in;
        float *yb = y + (size_t)b0 * out + o;
        if (no == 3 && nb == 4)
            tile_3x4_avx2(xb, wo, bias + o, yb, in, out, relu);
        else
            for (int b = 0; b < nb; b++)
                if (no == 3)
                    tile_3x1_avx2(xb + (size_t)b * in, wo, bias + o, yb + (size_t)b * out, in, out, relu);
                else
                    for (int j = 0; j < no; j++)
                        tile_1x1_avx2(xb + (size_t)b * in, wo + (size_t)j * in, bias + o + j, yb + (size_t)b * out + j,
                                      in, out, relu);
    }
}

/* dense_thin: a tile of up to 6 rows x one panel of 16 outputs, 12 accumulators started
 * at the bias; per input one broadcast of each row's value and two loads of the panel's
 * row. Rows past nr repeat the last one and are not stored; a panel's outputs past out
 * (its weights and bias 0) are not stored either. */
__attribute__((target("avx2,fma"))) static inline void thin_tile_avx2(const float *x, const float *panel,
                                                                      const float *bias, float *y, int in, int out,
                                                                      int nr, int nc, int relu) {
    float b16[16] = {0};
    for (int j = 0; j < nc; j++) b16[j] = bias[j];
    __m256 a00 = _mm256_loadu_ps(b16), a01 = _mm256_loadu_ps(b16 + 8), a10 = a00, a11 = a01, a20 = a00, a21 = a01,
           a30 = a00, a31 = a01, a40 = a00, a41 = a01, a50 = a00, a51 = a01;
    const float *xr[6];
    for (int r = 0; r < 6; r++) xr[r] = x + (size_t)(r < nr ? r : nr - 1) * in;
    const float *x0 = xr[0], *x1 = xr[1], *x2 = xr[2], *x3 = xr[3], *x4 = xr[4], *x5 = xr[5];
    for (int k = 0; k < in; k++) {
        const __m256 w0 = _mm256_loadu_ps(panel + 16 * (size_t)k), w1 = _mm256_loadu_ps(panel + 16 * (size_t)k + 8);
        __m256 xv = _mm256_broadcast_ss(x0 + k);
        a00 = _mm256_fmadd_ps(xv, w0, a00), a01 = _mm256_fmadd_ps(xv, w1, a01);
        xv = _mm256_broadcast_ss(x1 + k);
        a10 = _mm256_fmadd_ps(xv, w0, a10), a11 = _mm256_fmadd_ps(xv, w1, a11);
        xv = _mm256_broadcast_ss(x2 + k);
        a20 = _mm256_fmadd_ps(xv, w0, a20), a21 = _mm256_fmadd_ps(xv, w1, a21);
        xv = _mm256_broadcast_ss(x3 + k);
        a30 = _mm256_fmadd_ps(xv, w0, a30), a31 = _mm256_fmadd_ps(xv, w1, a31);
        xv = _mm256_broadcast_ss(x4 + k);
        a40 = _mm256_fmadd_ps(xv, w0, a40), a41 = _mm256_fmadd_ps(xv, w1, a41);
        xv = _mm256_broadcast_ss(x5 + k);
        a50 = _mm256_fmadd_ps(xv, w0, a50), a51 = _mm256_fmadd_ps(xv, w1, a51);
    }
    const __m256 acc[6][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}, {a40, a41}, {a50, a51}};
    for (int r = 0; r < nr; r++) {
        __m256 v0 = acc[r][0], v1 = acc[r][1];
        if (relu) v0 = _mm256_max_ps(v0, _mm256_setzero_ps()), v1 = _mm256_max_ps(v1, _mm256_setzero_ps());
        float *yr = y + (size_t)r * out;
        if (nc == 16) {
            _mm256_storeu_ps(yr, v0), _mm256_storeu_ps(yr + 8, v1);
        } else {
            float t[16];
            _mm256_storeu_ps(t, v0), _mm256_storeu_ps(t + 8, v1);
            for (int j = 0; j < nc; j++) yr[j] = t[j];
        }
    }
}

__attribute__((target("avx2,fma"))) void fl__dense_thin_avx2(const float *x, const float *wt, const float *bias,
                                                             float *y, int B, int in, int out, int relu) {
    const int rblocks = (B + 5) / 6, panels = (out + 15) / 16;
    PAR_FOR for (int t = 0; t < rblocks * panels; t++) {
        const int c = t % panels, r0 = t / panels * 6, nr = B - r0 < 6 ? B - r0 : 6,
                  nc = out - 16 * c < 16 ? out - 16 * c : 16;
        thin_tile_avx2(x + (size_t)r0 * in, wt + (size_t)c * 16 * in, bias + 16 * c, y + (size_t)r0 * out + 16 * c, in,
                       out, nr, nc, relu);
    }
}
#endif
