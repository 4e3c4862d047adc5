/* dense_small: see dense_small.h. This file says whether the CPU runs the kernels and
 * packs dense_thin's weights; the kernels themselves, in AVX2 + FMA, are in
 * dense_small_avx2.c. */
#include "kernels/dense_small.h"

#include <stddef.h>

#include "kernels/dense_small_internal.h"

int fl_dense_small_preferred(void) {
#ifdef HAVE_AVX2_VERSION
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !__builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

int fl_dense_small_supported(void) {
#ifdef HAVE_AVX2_VERSION
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

void fl_dense_small_forward(const float *x, const float *w, const float *bias, float *y, int B, int in, int out,
                            int relu) {
#ifdef HAVE_AVX2_VERSION
    fl__dense_small_avx2(x, w, bias, y, B, in, out, relu);
#else
    (void)x, (void)w, (void)bias, (void)y, (void)B, (void)in, (void)out, (void)relu;
#endif
}

size_t fl_dense_thin_weights_size(int in, int out) {
    return (size_t)(out + 15) / 16 * 16 * (size_t)in;
}

void fl_dense_thin_weights(const float *w, float *wt, int in, int out) {
    for (int c = 0; c < (out + 15) / 16; c++)
        for (int k = 0; k < in; k++)
            for (int j = 0; j < 16; j++) {
                const int o = 16 * c + j;
                wt[((size_t)c * in + k) * 16 + j] = o < out ? w[(size_t)o * in + k] : 0.0f;
            }
}

void fl_dense_thin_forward(const float *x, const float *wt, const float *bias, float *y, int B, int in, int out,
                           int relu) {
#ifdef HAVE_AVX2_VERSION
    fl__dense_thin_avx2(x, wt, bias, y, B, in, out, relu);
#else
    (void)x, (void)wt, (void)bias, (void)y, (void)B, (void)in, (void)out, (void)relu;
#endif
}
