/* dense_sparse: see dense_sparse.h. Outputs go in blocks of 64 (eight AVX2 accumulators
 * that stay in registers over a row's entries or an input's rows), then of 8, then one
 * by one; with AVX-512 in blocks of 128, then of 16 under a mask; the plain-C versions
 * keep the same blocks and order in a small array. */
#include "kernels/dense_sparse.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef _OPENMP
#define PAR_FOR _Pragma("omp parallel for schedule(static)")
#else
#define PAR_FOR
#endif

#define BLOCK 64

static int g_level = 2; /* fl_dense_sparse_set_level */

void fl_dense_sparse_set_level(int level) { g_level = level < 0 ? 0 : level > 2 ? 2 : level; }

/* Appends the nonzero inputs xr[k .. in - 1] to the lists at entry n: the new count, or
 * -1 past cap. */
static inline int list_from(const float *xr, int k, int in, int cap, int n, int *col, float *val) {
    for (; k < in; k++)
        if (xr[k] != 0.0f) {
            if (n == cap) return -1;
            col[n] = k;
            val[n++] = xr[k];
        }
    return n;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_VERSION 1

static int use_avx2(void) { return g_level >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
static int use_avx512(void) { return g_level >= 2 && __builtin_cpu_supports("avx512f") && use_avx2(); }

__attribute__((target("avx2"))) static int rows_avx2(const float *x, int B, int in, int cap, int *start, int *col,
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

/* The sums of a block of 8 vectors of W floats (8 W outputs) in eight accumulators that
 * stay in registers, one pair of functions per instruction set (P: its intrinsics'
 * prefix, V: its vector type).
 *   NAME_fwd   one row's outputs o0 .. o0 + 8 W - 1 from its entries: the bias, then
 *              each entry's value times its weight row, in order; relu != 0: max(0, .)
 *   NAME_wgrad input k's gradient for those outputs into t: its rows' value times output
 *              gradient, in row order */
#define SPARSE_BLOCKS(NAME, TARGET, V, P, W)                                                                    \
    __attribute__((target(TARGET))) static inline void NAME##_fwd(const int *col, const float *val, int n,     \
                                                                  const float *wt, const float *bias, float *y, \
                                                                  int out, int relu) {                          \
        V a[8];                                                                                                 \
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) a[q] = P##_loadu_ps(bias + W * q);                 \
        for (int j = 0; j < n; j++) {                                                                           \
            const V v = P##_set1_ps(val[j]);                                                                    \
            const float *w = wt + (size_t)col[j] * out;                                                         \
            _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) a[q] = P##_fmadd_ps(v, P##_loadu_ps(w + W * q), a[q]); \
        }                                                                                                       \
        if (relu) {                                                                                             \
            const V z = P##_setzero_ps();                                                                       \
            _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) a[q] = P##_max_ps(a[q], z);                     \
        }                                                                                                       \
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) P##_storeu_ps(y + W * q, a[q]);                    \
    }                                                                                                           \
    __attribute__((target(TARGET))) static inline void NAME##_wgrad(const int *rows, const float *v, int n,    \
                                                                    const float *dy, float *t, int out) {       \
        V a[8];                                                                                                 \
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) a[q] = P##_setzero_ps();                           \
        for (int p = 0; p < n; p++) {                                                                           \
            const V sv = P##_set1_ps(v[p]);                                                                     \
            const float *d = dy + (size_t)rows[p] * out;                                                        \
            _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) a[q] = P##_fmadd_ps(sv, P##_loadu_ps(d + W * q), a[q]); \
        }                                                                                                       \
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) P##_storeu_ps(t + W * q, a[q]);                    \
    }

SPARSE_BLOCKS(block64, "avx2,fma", __m256, _mm256, 8)

/* One row's outputs yr from its n entries (c, v): fl_dense_sparse_forward's per row. */
__attribute__((target("avx2,fma"))) static void row_avx2(const int *c, const float *v, int n, const float *wt,
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

/* wt's 8 x 8 block at (k0, o0) from w's at (o0, k0): eight rows in, unpacked and
 * shuffled to columns. */
__attribute__((target("avx2"))) static inline void transpose8_avx2(const float *w, float *wt, int in, int out) {
    __m256 r0 = _mm256_loadu_ps(w), r1 = _mm256_loadu_ps(w + in), r2 = _mm256_loadu_ps(w + 2 * (size_t)in),
           r3 = _mm256_loadu_ps(w + 3 * (size_t)in), r4 = _mm256_loadu_ps(w + 4 * (size_t)in),
           r5 = _mm256_loadu_ps(w + 5 * (size_t)in), r6 = _mm256_loadu_ps(w + 6 * (size_t)in),
           r7 = _mm256_loadu_ps(w + 7 * (size_t)in);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
                 t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
                 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
                 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
                 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
                 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r0 = _mm256_permute2f128_ps(u0, u4, 0x20), r1 = _mm256_permute2f128_ps(u1, u5, 0x20);
    r2 = _mm256_permute2f128_ps(u2, u6, 0x20), r3 = _mm256_permute2f128_ps(u3, u7, 0x20);
    r4 = _mm256_permute2f128_ps(u0, u4, 0x31), r5 = _mm256_permute2f128_ps(u1, u5, 0x31);
    r6 = _mm256_permute2f128_ps(u2, u6, 0x31), r7 = _mm256_permute2f128_ps(u3, u7, 0x31);
    _mm256_storeu_ps(wt, r0), _mm256_storeu_ps(wt + out, r1), _mm256_storeu_ps(wt + 2 * (size_t)out, r2);
    _mm256_storeu_ps(wt + 3 * (size_t)out, r3), _mm256_storeu_ps(wt + 4 * (size_t)out, r4);
    _mm256_storeu_ps(wt + 5 * (size_t)out, r5), _mm256_storeu_ps(wt + 6 * (size_t)out, r6);
    _mm256_storeu_ps(wt + 7 * (size_t)out, r7);
}

__attribute__((target("avx2"))) static void weights_avx2(const float *w, float *wt, int in, int out) {
    const int o8 = out / 8 * 8, k8 = in / 8 * 8;
    for (int o0 = 0; o0 < o8; o0 += 8)
        for (int k0 = 0; k0 < k8; k0 += 8) transpose8_avx2(w + (size_t)o0 * in + k0, wt + (size_t)k0 * out + o0, in, out);
    for (int o = 0; o < out; o++) /* the edges: outputs past o8 in every column, inputs past k8 */
        for (int k = o < o8 ? k8 : 0; k < in; k++) wt[(size_t)k * out + o] = w[(size_t)o * in + k];
}

__attribute__((target("avx2,fma"))) static void wgrad_avx2(const int *cstart, const int *crow, const float *cval,
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

/* AVX-512: outputs in blocks of 128 (eight accumulators in registers), then of 16, then
 * the rest under a mask; the weight gradient of eight inputs at a time goes through a
 * small buffer and 8 x 8 transposes into dw's rows (whole runs of eight instead of one
 * value per row). Every output keeps the same sum in the same order as above. */
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

__attribute__((target("avx512f"))) static void row_avx512(const int *c, const float *v, int n, const float *wt,
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
                                                                     const float *dy, float *t, int out,
                                                                     __mmask16 m) {
    __m512 a = _mm512_setzero_ps();
    for (int p = 0; p < n; p++)
        a = _mm512_fmadd_ps(_mm512_set1_ps(v[p]), _mm512_maskz_loadu_ps(m, dy + (size_t)rows[p] * out), a);
    _mm512_mask_storeu_ps(t, m, a);
}

__attribute__((target("avx512f"))) static void wgrad_avx512(const int *cstart, const int *crow, const float *cval,
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
#endif

/* The bytes of xr (in of them) of at least t (1 .. 255) as masks of 32 bytes each (bit j
 * of mask[b]: byte 32 b + j); their count. */
static int masks_plain(const unsigned char *xr, int in, unsigned t, unsigned *mask) {
    int m = 0;
    for (int b = 0; 32 * b < in; b++) {
        const int e = in - 32 * b < 32 ? in - 32 * b : 32;
        unsigned bits = 0;
        for (int j = 0; j < e; j++) bits |= (unsigned)(xr[32 * b + j] >= t) << j;
        mask[b] = bits;
        m += __builtin_popcount(bits);
    }
    return m;
}

#ifdef HAVE_AVX2_VERSION
__attribute__((target("avx2"))) static int masks_avx2(const unsigned char *xr, int in, unsigned t, unsigned *mask) {
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

#ifdef HAVE_AVX2_VERSION
/* fl_sparse_rows_u8 for images of 4 channels where every byte but 0 is set, with
 * AVX-512: a pixel's 4 bytes are one 32-bit lane, so a test per channel gives the mask of
 * 16 pixels that have it set, and their planar indices and values are compressed into
 * the lists in order, without a branch per entry. */
__attribute__((target("avx512f"))) static int rows_u8_c4_avx512(const unsigned char *x, int B, int hw, float scale,
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
                    ks, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * c),
                                                                          _mm512_set1_epi32(0xFF))),
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

int fl_sparse_rows_u8(const unsigned char *x, int B, int hw, int C, float scale, int cap, int *start, int *col,
                      float *val, int *tmp) {
    enum { MAX_C = 64 };
    const long in = (long)hw * C;
    if (!isfinite(scale) || C < 1 || C > MAX_C || hw < 1 || in >= (1L << 24)) return -2;
    /* Values that round to 0 are not set (a float copy holds 0 there): as |scale x (v x
     * 1/255)| grows with v, the bytes set are those of at least t. */
    unsigned t = 1;
    while (t < 256 && scale * ((float)t * (1.0f / 255.0f)) == 0.0f) t++;
#ifdef HAVE_AVX2_VERSION
    if (C == 4 && t == 1 && use_avx512()) return rows_u8_c4_avx512(x, B, hw, scale, cap, start, col, val);
#endif
    /* i / C as a multiply: exact for i < 2^32 / C */
    const uint64_t inv = ((1ULL << 32) + (uint64_t)C - 1) / (uint64_t)C;
    /* Channel c's bytes in mask b are those at bits j = c - 32 b (mod C): the bits at 0, C,
     * 2 C, ... shifted by that. */
    unsigned every = 0;
    for (int j = 0; j < 32; j += C) every |= 1u << j;
    const int nb = (int)((in + 31) / 32), step = 32 % C;
    unsigned *mask = (unsigned *)tmp; /* nb <= in entries */
    int n = 0;
    for (int r = 0; r < B; r++) {
        const unsigned char *xr = x + (size_t)r * (size_t)in;
        start[r] = n;
        int m = 0;
        if (t > 255) continue;
#ifdef HAVE_AVX2_VERSION
        if (use_avx2()) m = masks_avx2(xr, (int)in, t, mask);
        else
#endif
            m = masks_plain(xr, (int)in, t, mask);
        if (m > cap - n) return -1;
        /* planar order: channel by channel, pixels in order within each */
        for (int c = 0; c < C; c++)
            for (int b = 0, sh = c; b < nb; b++) {
                unsigned bits = sh < 32 ? mask[b] & (every << sh) : 0;
                while (bits) {
                    const int i = 32 * b + __builtin_ctz(bits), p = (int)((uint64_t)i * inv >> 32);
                    bits &= bits - 1;
                    col[n] = c * hw + p;
                    val[n++] = scale * ((float)xr[i] * (1.0f / 255.0f));
                }
                if ((sh -= step) < 0) sh += C;
            }
    }
    start[B] = n;
    return n;
}

int fl_sparse_rows(const float *x, int B, int in, int cap, int *start, int *col, float *val) {
#ifdef HAVE_AVX2_VERSION
    if (use_avx2()) return rows_avx2(x, B, in, cap, start, col, val);
#endif
    int n = 0;
    for (int r = 0; r < B; r++) {
        start[r] = n;
        if ((n = list_from(x + (size_t)r * in, 0, in, cap, n, col, val)) < 0) return -1;
    }
    start[B] = n;
    return n;
}

void fl_dense_sparse_weights(const float *w, float *wt, int in, int out) {
#ifdef HAVE_AVX2_VERSION
    if (use_avx2()) {
        weights_avx2(w, wt, in, out);
        return;
    }
#endif
    /* in tiles of 16 x 16, so that neither side is read with a long stride for long */
    for (int o0 = 0; o0 < out; o0 += 16)
        for (int k0 = 0; k0 < in; k0 += 16)
            for (int o = o0; o < o0 + 16 && o < out; o++)
                for (int k = k0; k < k0 + 16 && k < in; k++) wt[(size_t)k * out + o] = w[(size_t)o * in + k];
}

static void row_plain(const int *c, const float *v, int n, const float *wt, const float *bias, float *yr, int out,
                      int relu) {
    for (int o = 0; o < out; o++) yr[o] = bias[o];
    for (int j = 0; j < n; j++) {
        const float *w = wt + (size_t)c[j] * out;
        for (int o = 0; o < out; o++) yr[o] += v[j] * w[o];
    }
    if (relu)
        for (int o = 0; o < out; o++) yr[o] = yr[o] > 0.0f ? yr[o] : 0.0f;
}

void fl_dense_sparse_forward(const int *start, const int *col, const float *val, const float *wt,
                             const float *bias, float *y, int B, int out, int relu) {
    void (*row)(const int *, const float *, int, const float *, const float *, float *, int, int) = row_plain;
#ifdef HAVE_AVX2_VERSION
    if (use_avx512()) row = row_avx512;
    else if (use_avx2()) row = row_avx2;
#endif
    PAR_FOR for (int r = 0; r < B; r++)
        row(col + start[r], val + start[r], start[r + 1] - start[r], wt, bias, y + (size_t)r * out, out, relu);
}

void fl_dense_sparse_wgrad(const int *start, const int *col, const float *val, int nnz, const float *dy, float *dw,
                           float *db, int B, int in, int out, int *cstart, int *crow, float *cval) {
    /* The column lists by a counting sort that keeps the rows in order: counts, then
     * their prefix sums as each input's cursor, then the cursors (each now its input's
     * end) shifted back to starts. */
    for (int k = 0; k <= in; k++) cstart[k] = 0;
    for (int j = 0; j < nnz; j++) cstart[col[j] + 1]++;
    for (int k = 0; k < in; k++) cstart[k + 1] += cstart[k];
    for (int r = 0; r < B; r++)
        for (int j = start[r]; j < start[r + 1]; j++) {
            const int p = cstart[col[j]]++;
            crow[p] = r;
            cval[p] = val[j];
        }
    for (int k = in; k > 0; k--) cstart[k] = cstart[k - 1];
    cstart[0] = 0;

    for (int o = 0; o < out; o++) db[o] = 0.0f;
    for (int r = 0; r < B; r++)
        for (int o = 0; o < out; o++) db[o] += dy[(size_t)r * out + o];

#ifdef HAVE_AVX2_VERSION
    if (use_avx512()) {
        wgrad_avx512(cstart, crow, cval, dy, dw, in, out);
        return;
    }
    if (use_avx2()) {
        wgrad_avx2(cstart, crow, cval, dy, dw, in, out);
        return;
    }
#endif
    PAR_FOR for (int k = 0; k < in; k++) {
        for (int o0 = 0; o0 < out; o0 += BLOCK) {
            const int nb = out - o0 < BLOCK ? out - o0 : BLOCK;
            float acc[BLOCK] = {0};
            for (int p = cstart[k]; p < cstart[k + 1]; p++) {
                const float v = cval[p], *d = dy + (size_t)crow[p] * out + o0;
                for (int t = 0; t < nb; t++) acc[t] += v * d[t];
            }
            for (int t = 0; t < nb; t++) dw[(size_t)(o0 + t) * in + k] = acc[t];
        }
    }
}
