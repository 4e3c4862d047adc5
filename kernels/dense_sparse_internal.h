/* dense_sparse_internal: what the sparse layer's files share (kernels/dense_sparse.h is
 * the interface): dense_sparse.c (the plain-C versions, the column lists and the choice of
 * version at run time), dense_sparse_avx2.c and dense_sparse_avx512.c (each instruction
 * set's versions). Not for use outside kernels/dense_sparse*.c. */
#ifndef FL_KERNELS_DENSE_SPARSE_INTERNAL_H
#define FL_KERNELS_DENSE_SPARSE_INTERNAL_H

#include <stddef.h>

/* The AVX2 and AVX-512 versions are built where GCC's target attributes are (x86-64). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_VERSION 1
#endif

#ifdef _OPENMP
#define PAR_FOR _Pragma("omp parallel for schedule(static)")
#else
#define PAR_FOR
#endif

#define BLOCK 64

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

/* The bytes of xr (in of them) of at least t (1 .. 255) as masks of 32 bytes each (bit j
 * of mask[b]: byte 32 b + j); their count. */
static inline int masks_plain(const unsigned char *xr, int in, unsigned t, unsigned *mask) {
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
/* The sums of a block of 8 vectors of W floats (8 W outputs) in eight accumulators that
 * stay in registers, one pair of functions per instruction set (P: its intrinsics'
 * prefix, V: its vector type).
 *   NAME_fwd   one row's outputs o0 .. o0 + 8 W - 1 from its entries: the bias, then
 *              each entry's value times its weight row, in order; relu != 0: max(0, .)
 *   NAME_wgrad input k's gradient for those outputs into t: its rows' value times output
 *              gradient, in row order */
#define SPARSE_BLOCKS(NAME, TARGET, V, P, W)                                                                           \
    __attribute__((target(TARGET))) static inline void NAME##_fwd(                                                     \
        const int *col, const float *val, int n, const float *wt, const float *bias, float *y, int out, int relu) {    \
        V a[8];                                                                                                        \
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) a[q] = P##_loadu_ps(bias + W * q);                         \
        for (int j = 0; j < n; j++) {                                                                                  \
            const V v = P##_set1_ps(val[j]);                                                                           \
            const float *w = wt + (size_t)col[j] * out;                                                                \
            _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) a[q] = P##_fmadd_ps(v, P##_loadu_ps(w + W * q), a[q]); \
        }                                                                                                              \
        if (relu) {                                                                                                    \
            const V z = P##_setzero_ps();                                                                              \
            _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) a[q] = P##_max_ps(a[q], z);                            \
        }                                                                                                              \
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) P##_storeu_ps(y + W * q, a[q]);                            \
    }                                                                                                                  \
    __attribute__((target(TARGET))) static inline void NAME##_wgrad(const int *rows, const float *v, int n,            \
                                                                    const float *dy, float *t, int out) {              \
        V a[8];                                                                                                        \
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) a[q] = P##_setzero_ps();                                   \
        for (int p = 0; p < n; p++) {                                                                                  \
            const V sv = P##_set1_ps(v[p]);                                                                            \
            const float *d = dy + (size_t)rows[p] * out;                                                               \
            _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) a[q] =                                                 \
                P##_fmadd_ps(sv, P##_loadu_ps(d + W * q), a[q]);                                                       \
        }                                                                                                              \
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) P##_storeu_ps(t + W * q, a[q]);                            \
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

/* Each instruction set's versions, chosen by dense_sparse.c. dense_sparse_avx2.c: */
int fl__sparse_rows_avx2(const float *x, int B, int in, int cap, int *start, int *col, float *val);
int fl__sparse_masks_avx2(const unsigned char *xr, int in, unsigned t, unsigned *mask);
void fl__sparse_weights_avx2(const float *w, float *wt, int in, int out);
void fl__sparse_row_avx2(const int *c, const float *v, int n, const float *wt, const float *bias, float *yr, int out,
                         int relu);
void fl__sparse_wgrad_avx2(const int *cstart, const int *crow, const float *cval, const float *dy, float *dw, int in,
                           int out);
/* dense_sparse_avx512.c: */
int fl__sparse_rows_u8_c4_avx512(const unsigned char *x, int B, int hw, float scale, int cap, int *start, int *col,
                                 float *val);
void fl__sparse_row_avx512(const int *c, const float *v, int n, const float *wt, const float *bias, float *yr, int out,
                           int relu);
void fl__sparse_wgrad_avx512(const int *cstart, const int *crow, const float *cval, const float *dy, float *dw, int in,
                             int out);
#endif

#endif
