/* dense_sparse_avx2: the sparse first layer's AVX2 versions (see dense_sparse.h and the
 * top of dense_sparse.c): the nonzero inputs listed 8 floats at a time, uint8 planes'
 * set bytes as masks 32 at a time, the weights transposed in 8 x 8 blocks, the forward and
 * the weight gradient over 64 outputs in eight accumulators. Taken on CPUs with AVX2 and
 * FMA (dense_sparse.c, use_avx2), and where AVX-512's versions (dense_sparse_avx512.c)
 * are not taken.
 *
 * Reference op: the reference backend's fl_dense_forward and fl_dense_backward
 * (kernels/ops.c, OpenBLAS's sgemm over every input); in the oneDNN backend they take a
 * first dense layer's forward and weight gradient from oneDNN's inner product where at
 * most a quarter of the batch's inputs are set (kernels/dnnl_fwd.c, fwd_dense; the
 * primitive otherwise). The results differ from a dense product's by rounding only; the
 * plain-C versions (dense_sparse.c) sum in the same order.
 *
 * Tests: tests/test_kernels_dnnl.c, test_sparse_inputs (networks against the reference
 * backend, every second call at half the inputs set taking the dense product, the plans
 * saying which way each forward went), test_sparse_sums (against sums in double at each
 * level, fl_dense_sparse_set_level; fl_sparse_rows_u8 against the copy and list of the
 * same bytes, bit for bit) and test_dqn_raw_obs (uint8 batches give the bits of float
 * ones in whole double-DQN updates).
 *
 * Measured gain (docs/benchmarks-log.md, the sections named): the sparse first layer made
 * the MinAtar Breakout fleet 48% faster (three rounds) and the MinAtar MLP's update about
 * 1.8x the dense one at Breakout's share of values set (AMD EPYC Zen 3, 2 cores,
 * 2026-11-27; "The first layer over sparse inputs"); listing uint8 planes from their bytes
 * (fl_sparse_rows_u8, its masks here) made the MinAtar Breakout fleet 8% faster (Intel
 * Xeon with AMX, 2 cores, 2026-11-28; "MinAtar's uint8 planes listed from their bytes"). */
#include "kernels/dense_sparse.h"

#include "kernels/dense_sparse_internal.h"

#ifdef HAVE_AVX2_VERSION
#include <math.h>
#include <stddef.h>

__attribute__((target("avx2"))) int fl__sparse_rows_avx2(const float *x, int B, int in, int cap, int *start, int *col,
                                                         float *val) {
    int n = 0;
    const __m256 zero = _mm256_setzero_ps();
    for (int r = 0; r < B; r++) {
        const float *xr = x + (size_t)r * in;
        start[r] = n;
        int k = 0;
        for (; k + 8 <= in; k += 8) {
            /* not equal, unordered: NaN counts as set, -0 does not */
            unsigned m = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(xr + k), zero, _CMP_NEQ_UQ));
            if (!m) continue;
            if (n + __builtin_popcount(m) > cap) return -1;
            while (m) {
                const int t = __builtin_ctz(m);
                col[n] = k + t;
                val[n++] = xr[k + t];
                m &= m - 1;
            }
        }
        if ((n = list_from(xr, k, in, cap, n, col, val)) < 0) return -1;
    }
    start[B] = n;
    return n;
}

SPARSE_BLOCKS(block64, "avx2,fma", __m256, _mm256, 8)

/* One row's outputs yr from its n entries (c, v): fl_dense_sparse_forward's per row. */
__attribute__((target("avx2,fma"))) void fl__sparse_row_avx2(const int *c, const float *v, int n, const float *wt,
                                                             const float *bias, float *yr, int out, int relu) {
    int o = 0;
    for (; o + BLOCK <= out; o += BLOCK) block64_fwd(c, v, n, wt + o, bias + o, yr + o, out, relu);
    for (; o + 8 <= out; o += 8) {
        __m256 a = _mm256_loadu_ps(bias + o);
        for (int j = 0; j < n; j++)
            a = _mm256_fmadd_ps(_mm256_broadcast_ss(v + j), _mm256_loadu_ps(wt + (size_t)c[j] * out + o), a);
        if (relu) a = _mm256_max_ps(a, _mm256_setzero_ps());
        _mm256_storeu_ps(yr + o, a);
    }
    for (; o < out; o++) {
        float s = bias[o];
        for (int j = 0; j < n; j++) s = fmaf(v[j], wt[(size_t)c[j] * out + o], s);
        yr[o] = relu && !(s > 0.0f) ? 0.0f : s;
    }
}

__attribute__((target("avx2"))) void fl__sparse_weights_avx2(const float *w, float *wt, int in, int out) {
    const int o8 = out / 8 * 8, k8 = in / 8 * 8;
    for (int o0 = 0; o0 < o8; o0 += 8)
        for (int k0 = 0; k0 < k8; k0 += 8)
            transpose8_avx2(w + (size_t)o0 * in + k0, wt + (size_t)k0 * out + o0, in, out);
    for (int o = 0; o < out; o++) /* the edges: outputs past o8 in every column, inputs past k8 */
        for (int k = o < o8 ? k8 : 0; k < in; k++) wt[(size_t)k * out + o] = w[(size_t)o * in + k];
}

__attribute__((target("avx2,fma"))) void fl__sparse_wgrad_avx2(const int *cstart, const int *crow, const float *cval,
                                                               const float *dy, float *dw, int in, int out) {
    PAR_FOR for (int k = 0; k < in; k++) {
        const int p0 = cstart[k], n = cstart[k + 1] - p0;
        const int *rows = crow + p0;
        const float *v = cval + p0;
        int o = 0;
        for (; o + BLOCK <= out; o += BLOCK) {
            float t[BLOCK];
            block64_wgrad(rows, v, n, dy + o, t, out);
            for (int q = 0; q < BLOCK; q++) dw[(size_t)(o + q) * in + k] = t[q];
        }
        for (; o + 8 <= out; o += 8) {
            __m256 a = _mm256_setzero_ps();
            for (int p = 0; p < n; p++)
                a = _mm256_fmadd_ps(_mm256_broadcast_ss(v + p), _mm256_loadu_ps(dy + (size_t)rows[p] * out + o), a);
            float t[8];
            _mm256_storeu_ps(t, a);
            for (int j = 0; j < 8; j++) dw[(size_t)(o + j) * in + k] = t[j];
        }
        for (; o < out; o++) {
            float s = 0.0f;
            for (int p = 0; p < n; p++) s = fmaf(v[p], dy[(size_t)rows[p] * out + o], s);
            dw[(size_t)o * in + k] = s;
        }
    }
}

/* masks_plain's masks (dense_sparse_internal.h), 32 bytes at a time. */
__attribute__((target("avx2"))) int fl__sparse_masks_avx2(const unsigned char *xr, int in, unsigned t, unsigned *mask) {
    const __m256i tv = _mm256_set1_epi8((char)t);
    int m = 0, b = 0;
    for (; 32 * b + 32 <= in; b++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(xr + 32 * b));
        /* v >= t, unsigned: max(v, t) == v */
        const unsigned bits = (unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(v, tv), v));
        mask[b] = bits;
        m += __builtin_popcount(bits);
    }
    if (32 * b < in) m += masks_plain(xr + 32 * b, in - 32 * b, t, mask + b);
    return m;
}
#endif
