/* dense_sparse: see dense_sparse.h. Outputs go in blocks of 64 (eight AVX2 accumulators
 * that stay in registers over a row's entries or an input's rows), then of 8, then one
 * by one; with AVX-512 in blocks of 128, then of 16 under a mask; the plain-C versions
 * keep the same blocks and order in a small array.
 *
 * This file holds the plain-C versions, the column lists of the weight gradient and the
 * choice of version at run time (fl_dense_sparse_set_level and the CPU); the AVX2 and
 * AVX-512 versions are in dense_sparse_avx2.c and dense_sparse_avx512.c, sharing
 * dense_sparse_internal.h. */
#include "kernels/dense_sparse.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dense_sparse_internal.h"

static int g_level = 2; /* fl_dense_sparse_set_level */

void fl_dense_sparse_set_level(int level) {
    g_level = level < 0 ? 0 : level > 2 ? 2 : level;
}

#ifdef HAVE_AVX2_VERSION
static int use_avx2(void) {
    return g_level >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
static int use_avx512(void) {
    return g_level >= 2 && __builtin_cpu_supports("avx512f") && use_avx2();
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
    if (C == 4 && t == 1 && use_avx512()) return fl__sparse_rows_u8_c4_avx512(x, B, hw, scale, cap, start, col, val);
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
        if (use_avx2())
            m = fl__sparse_masks_avx2(xr, (int)in, t, mask);
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
    if (use_avx2()) return fl__sparse_rows_avx2(x, B, in, cap, start, col, val);
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
        fl__sparse_weights_avx2(w, wt, in, out);
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

void fl_dense_sparse_forward(const int *start, const int *col, const float *val, const float *wt, const float *bias,
                             float *y, int B, int out, int relu) {
    void (*row)(const int *, const float *, int, const float *, const float *, float *, int, int) = row_plain;
#ifdef HAVE_AVX2_VERSION
    if (use_avx512())
        row = fl__sparse_row_avx512;
    else if (use_avx2())
        row = fl__sparse_row_avx2;
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
        fl__sparse_wgrad_avx512(cstart, crow, cval, dy, dw, in, out);
        return;
    }
    if (use_avx2()) {
        fl__sparse_wgrad_avx2(cstart, crow, cval, dy, dw, in, out);
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
