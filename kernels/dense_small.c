/* dense_small: see dense_small.h. Blocks of 3 outputs x 4 rows: 12 accumulators, 3
 * weight rows and 1 input row in AVX2's 16 registers; the rows past a multiple of 4 in
 * blocks of 3 outputs x 1 row. */
#include "kernels/dense_small.h"

#include <stddef.h>

#ifdef _OPENMP
#define PAR_FOR _Pragma("omp parallel for schedule(static)")
#else
#define PAR_FOR
#endif

#define RELU(v) ((v) > 0.0f ? (v) : 0.0f)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

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

__attribute__((target("avx2,fma"))) static void forward_avx2(const float *x, const float *w, const float *bias,
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

/* dense_thin: 4 rows x 16 outputs, 8 accumulators started at the bias; per input one
 * broadcast of each row's value and two loads of the transposed weights' row. */
__attribute__((target("avx2,fma"))) static inline void thin_4x16_avx2(const float *x, const float *wt,
                                                                      const float *bias, float *y, int in, int out,
                                                                      int relu) {
    __m256 a00 = _mm256_loadu_ps(bias), a01 = _mm256_loadu_ps(bias + 8), a10 = a00, a11 = a01, a20 = a00, a21 = a01,
           a30 = a00, a31 = a01;
    for (int k = 0; k < in; k++) {
        const __m256 w0 = _mm256_loadu_ps(wt + (size_t)k * out), w1 = _mm256_loadu_ps(wt + (size_t)k * out + 8);
        __m256 xv = _mm256_broadcast_ss(x + k);
        a00 = _mm256_fmadd_ps(xv, w0, a00), a01 = _mm256_fmadd_ps(xv, w1, a01);
        xv = _mm256_broadcast_ss(x + in + k);
        a10 = _mm256_fmadd_ps(xv, w0, a10), a11 = _mm256_fmadd_ps(xv, w1, a11);
        xv = _mm256_broadcast_ss(x + 2 * (size_t)in + k);
        a20 = _mm256_fmadd_ps(xv, w0, a20), a21 = _mm256_fmadd_ps(xv, w1, a21);
        xv = _mm256_broadcast_ss(x + 3 * (size_t)in + k);
        a30 = _mm256_fmadd_ps(xv, w0, a30), a31 = _mm256_fmadd_ps(xv, w1, a31);
    }
    if (relu) {
        const __m256 z = _mm256_setzero_ps();
        a00 = _mm256_max_ps(a00, z), a01 = _mm256_max_ps(a01, z), a10 = _mm256_max_ps(a10, z);
        a11 = _mm256_max_ps(a11, z), a20 = _mm256_max_ps(a20, z), a21 = _mm256_max_ps(a21, z);
        a30 = _mm256_max_ps(a30, z), a31 = _mm256_max_ps(a31, z);
    }
    _mm256_storeu_ps(y, a00), _mm256_storeu_ps(y + 8, a01);
    _mm256_storeu_ps(y + out, a10), _mm256_storeu_ps(y + out + 8, a11);
    _mm256_storeu_ps(y + 2 * (size_t)out, a20), _mm256_storeu_ps(y + 2 * (size_t)out + 8, a21);
    _mm256_storeu_ps(y + 3 * (size_t)out, a30), _mm256_storeu_ps(y + 3 * (size_t)out + 8, a31);
}

/* One row, outputs o0 up to o1, in the same order of sums as the tile: 8 at a time, then
 * one at a time. */
__attribute__((target("avx2,fma"))) static inline void thin_row_avx2(const float *x, const float *wt,
                                                                     const float *bias, float *y, int in, int out,
                                                                     int relu, int o0, int o1) {
    int o = o0;
    for (; o + 8 <= o1; o += 8) {
        __m256 a = _mm256_loadu_ps(bias + o);
        for (int k = 0; k < in; k++)
            a = _mm256_fmadd_ps(_mm256_broadcast_ss(x + k), _mm256_loadu_ps(wt + (size_t)k * out + o), a);
        if (relu) a = _mm256_max_ps(a, _mm256_setzero_ps());
        _mm256_storeu_ps(y + o, a);
    }
    for (; o < o1; o++) {
        float s = bias[o];
        for (int k = 0; k < in; k++) s = __builtin_fmaf(x[k], wt[(size_t)k * out + o], s);
        y[o] = relu ? RELU(s) : s;
    }
}

__attribute__((target("avx2,fma"))) static void thin_avx2(const float *x, const float *wt, const float *bias,
                                                          float *y, int B, int in, int out, int relu) {
    const int rblocks = (B + 3) / 4, full = out / 16;
    PAR_FOR for (int rb = 0; rb < rblocks; rb++) {
        const int r0 = rb * 4, nr = B - r0 < 4 ? B - r0 : 4;
        const float *xr = x + (size_t)r0 * in;
        float *yr = y + (size_t)r0 * out;
        if (nr == 4)
            for (int c = 0; c < full; c++) thin_4x16_avx2(xr, wt + 16 * c, bias + 16 * c, yr + 16 * c, in, out, relu);
        for (int r = 0; r < nr; r++)
            thin_row_avx2(xr + (size_t)r * in, wt, bias, yr + (size_t)r * out, in, out, relu, nr == 4 ? 16 * full : 0,
                          out);
    }
}
#define HAVE_AVX2_VERSION 1
#endif

int fl_dense_small_preferred(void) {
#ifdef HAVE_AVX2_VERSION
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !__builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

void fl_dense_small_forward(const float *x, const float *w, const float *bias, float *y, int B, int in, int out,
                            int relu) {
#ifdef HAVE_AVX2_VERSION
    forward_avx2(x, w, bias, y, B, in, out, relu);
#else
    (void)x, (void)w, (void)bias, (void)y, (void)B, (void)in, (void)out, (void)relu;
#endif
}

void fl_dense_thin_weights(const float *w, float *wt, int in, int out) {
    for (int o = 0; o < out; o++)
        for (int k = 0; k < in; k++) wt[(size_t)k * out + o] = w[(size_t)o * in + k];
}

void fl_dense_thin_forward(const float *x, const float *wt, const float *bias, float *y, int B, int in, int out,
                           int relu) {
#ifdef HAVE_AVX2_VERSION
    thin_avx2(x, wt, bias, y, B, in, out, relu);
#else
    (void)x, (void)wt, (void)bias, (void)y, (void)B, (void)in, (void)out, (void)relu;
#endif
}
