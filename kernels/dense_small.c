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
    const int blocks = (out + 2) / 3;
    PAR_FOR for (int ob = 0; ob < blocks; ob++) {
        const int o = ob * 3, no = out - o < 3 ? out - o : 3;
        int b = 0;
        if (no == 3)
            for (; b + 4 <= B; b += 4)
                tile_3x4_avx2(x + (size_t)b * in, w + (size_t)o * in, bias + o, y + (size_t)b * out + o, in, out, relu);
        for (; b < B; b++)
            if (no == 3)
                tile_3x1_avx2(x + (size_t)b * in, w + (size_t)o * in, bias + o, y + (size_t)b * out + o, in, out, relu);
            else
                for (int j = 0; j < no; j++)
                    tile_1x1_avx2(x + (size_t)b * in, w + (size_t)(o + j) * in, bias + o + j,
                                  y + (size_t)b * out + o + j, in, out, relu);
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
