/* dense_sparse_avx512: the sparse first layer's AVX-512 versions (see dense_sparse.h and
 * the top of dense_sparse.c): the forward and the weight gradient over 128 outputs in
 * eight zmm registers (the gradient of eight inputs at a time through a buffer and 8 x 8
 * transposes into its rows), and uint8 images of 4 channels listed 16 pixels at a time
 * with a test per channel and compressed stores. Taken on CPUs with AVX-512 (dense_sparse.c,
 * use_avx512); listing floats and transposing the weights stay AVX2's
 * (dense_sparse_avx2.c).
 *
 * Reference op: the reference backend's fl_dense_forward and fl_dense_backward
 * (kernels/ops.c, OpenBLAS's sgemm over every input); in the oneDNN backend they take a
 * first dense layer's forward and weight gradient from oneDNN's inner product where at
 * most a quarter of the batch's inputs are set (kernels/dnnl_fwd.c, fwd_dense). Every
 * output keeps the AVX2 and plain-C versions' sum in the same order.
 *
 * Tests: tests/test_kernels_dnnl.c, test_sparse_inputs (networks against the reference
 * backend, every second call at half the inputs set taking the dense product),
 * test_sparse_sums (against sums in double at each level, fl_dense_sparse_set_level;
 * fl_sparse_rows_u8 against the copy and list of the same bytes, bit for bit) and
 * test_dqn_raw_obs (uint8 batches give the bits of float ones in whole double-DQN updates).
 *
 * Measured gain (Intel Xeon with AMX, 2 cores, 2026-11-28; docs/benchmarks-log.md, "The
 * sparse layer in AVX-512, fewer page faults, two batches per Sample call"): the MinAtar
 * MLP's update on Breakout's observations 33% faster (1,819 -> 2,417 updates/s,
 * build/bench/sparse_bench), with these kernels and the listing of uint8 planes from mask
 * bytes. */
#include "kernels/dense_sparse.h"

#include "kernels/dense_sparse_internal.h"

#ifdef HAVE_AVX2_VERSION
#include <stddef.h>

/* AVX-512: outputs in blocks of 128 (eight accumulators in registers), then of 16, then
 * the rest under a mask; the weight gradient of eight inputs at a time goes through a
 * small buffer and 8 x 8 transposes into dw's rows (whole runs of eight instead of one
 * value per row). Every output keeps the same sum in the same order as the AVX2 and
 * plain-C versions. */
#define BLOCK512 128

SPARSE_BLOCKS(block128, "avx512f", __m512, _mm512, 16)

/* The outputs of a block of up to 16 (mask m) from a row's entries. */
__attribute__((target("avx512f"))) static inline void fwd_masked16(const int *col, const float *val, int n,
                                                                   const float *wt, const float *bias, float *y,
                                                                   int out, int relu, __mmask16 m) {
    __m512 a = _mm512_maskz_loadu_ps(m, bias);
    for (int j = 0; j < n; j++)
        a = _mm512_fmadd_ps(_mm512_set1_ps(val[j]), _mm512_maskz_loadu_ps(m, wt + (size_t)col[j] * out), a);
    if (relu) a = _mm512_max_ps(a, _mm512_setzero_ps());
    _mm512_mask_storeu_ps(y, m, a);
}

__attribute__((target("avx512f"))) void fl__sparse_row_avx512(const int *c, const float *v, int n, const float *wt,
                                                              const float *bias, float *yr, int out, int relu) {
    int o = 0;
    for (; o + BLOCK512 <= out; o += BLOCK512) block128_fwd(c, v, n, wt + o, bias + o, yr + o, out, relu);
    for (; o < out; o += 16) {
        const __mmask16 m = out - o >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (out - o)) - 1);
        fwd_masked16(c, v, n, wt + o, bias + o, yr + o, out, relu, m);
    }
}

/* Input k's gradient for up to 16 outputs (mask m) into t. */
__attribute__((target("avx512f"))) static inline void wgrad_masked16(const int *rows, const float *v, int n,
                                                                     const float *dy, float *t, int out, __mmask16 m) {
    __m512 a = _mm512_setzero_ps();
    for (int p = 0; p < n; p++)
        a = _mm512_fmadd_ps(_mm512_set1_ps(v[p]), _mm512_maskz_loadu_ps(m, dy + (size_t)rows[p] * out), a);
    _mm512_mask_storeu_ps(t, m, a);
}

__attribute__((target("avx512f"))) void fl__sparse_wgrad_avx512(const int *cstart, const int *crow, const float *cval,
                                                                const float *dy, float *dw, int in, int out) {
    const int groups = (in + 7) / 8;
    PAR_FOR for (int g = 0; g < groups; g++) {
        const int k0 = 8 * g, nk = in - k0 < 8 ? in - k0 : 8;
        float t[8][BLOCK512]; /* t[kk][o - o0]: input k0 + kk's gradient for outputs o0 .. */
        for (int o0 = 0; o0 < out; o0 += BLOCK512) {
            const int w = out - o0 < BLOCK512 ? out - o0 : BLOCK512;
            for (int kk = 0; kk < nk; kk++) {
                const int k = k0 + kk, p0 = cstart[k], n = cstart[k + 1] - p0;
                if (w == BLOCK512) {
                    block128_wgrad(crow + p0, cval + p0, n, dy + o0, t[kk], out);
                    continue;
                }
                for (int o = 0; o < w; o += 16) {
                    const __mmask16 m = w - o >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (w - o)) - 1);
                    wgrad_masked16(crow + p0, cval + p0, n, dy + o0 + o, t[kk] + o, out, m);
                }
            }
            int o = 0;
            if (nk == 8) /* dw[o .. o + 7][k0 .. k0 + 7] from t's columns o - o0 .. */
                for (; o + 8 <= w; o += 8) transpose8_avx2(&t[0][o], dw + (size_t)(o0 + o) * in + k0, BLOCK512, in);
            for (; o < w; o++)
                for (int kk = 0; kk < nk; kk++) dw[(size_t)(o0 + o) * in + k0 + kk] = t[kk][o];
        }
    }
}

/* fl_sparse_rows_u8 for images of 4 channels where every byte but 0 is set, with
 * AVX-512: a pixel's 4 bytes are one 32-bit lane, so a test per channel gives the mask of
 * 16 pixels that have it set, and their planar indices and values are compressed into
 * the lists in order, without a branch per entry. */
__attribute__((target("avx512f"))) int fl__sparse_rows_u8_c4_avx512(const unsigned char *x, int B, int hw, float scale,
                                                                    int cap, int *start, int *col, float *val) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 k255 = _mm512_set1_ps(1.0f / 255.0f), ks = _mm512_set1_ps(scale);
    int n = 0;
    for (int r = 0; r < B; r++) {
        const unsigned char *xr = x + (size_t)r * (size_t)hw * 4;
        start[r] = n;
        for (int c = 0; c < 4; c++) {
            const __m512i byte = _mm512_set1_epi32((int)(0xFFu << (8 * c)));
            for (int p = 0; p < hw; p += 16) {
                const __mmask16 in = hw - p >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (hw - p)) - 1);
                const __m512i v = _mm512_maskz_loadu_epi32(in, xr + 4 * (size_t)p);
                const __mmask16 m = _mm512_test_epi32_mask(v, byte);
                if (!m) continue;
                const int cnt = __builtin_popcount(m);
                if (cnt > cap - n) return -1;
                const __mmask16 first = (__mmask16)((1u << cnt) - 1);
                const __m512i cols = _mm512_add_epi32(lane, _mm512_set1_epi32(c * hw + p));
                const __m512 vals = _mm512_mul_ps(
                    ks, _mm512_mul_ps(
                            _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * c), _mm512_set1_epi32(0xFF))),
                            k255));
                _mm512_mask_storeu_epi32(col + n, first, _mm512_maskz_compress_epi32(m, cols));
                _mm512_mask_storeu_ps(val + n, first, _mm512_maskz_compress_ps(m, vals));
                n += cnt;
            }
        }
    }
    start[B] = n;
    return n;
}
#endif
