/* conv_fwd: see conv_fwd.h.
 *
 * The inputs of one output pixel, in the order the products are summed: for each block
 * of input channels (the layout's blocks; the whole of a channels-last input), each
 * kernel row, each kernel column, each channel of the block. A "segment" is a run of
 * those that lies contiguous in memory: a block's channels at one kernel position, or,
 * with stride 1 and pixels packed one block apart, a whole kernel row of them. Segment j
 * starts off[j] floats past the pixel's first input and is len[j] long; the weights are
 * packed in the same order, in panels of 16 output channels, (panel, input, 16).
 *
 * Which is read from memory once and then from cache: where the weights are the smaller
 * (a convolution's), the tiles run one after the other, each over every panel, so a
 * tile's inputs stay in cache for all the panels; where they are the larger (a large
 * dense layer's at an actor's batch: the Nature CNN's 3136 x 512 is 6.4 MB), the panels
 * run one after the other, each over every tile, so a panel (200 KB there) stays in the
 * core's cache for all the tiles. */
#include "kernels/conv_fwd.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define HAVE_AMX_VERSION 1
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/dense_small.h"

#ifdef _OPENMP
#define PAR_FOR _Pragma("omp parallel for schedule(static)")
#else
#define PAR_FOR
#endif

struct fl_conv_fwd {
    fl_conv_fwd_geom_t g;
    int n;         /* segments */
    long *off;
    int *len;
    long *xoff, *yoff;       /* each output pixel's first input and first output, in floats */
    int panels_outer;        /* the weights outweigh the inputs: panel after panel */
    int wide;                /* the forward runs on AVX-512 (few input channels) */
    int np;                  /* AVX-512, many input channels: panels per tile (4 or 2); 0: one */
    /* the inputs of a pixel in the order above, flattened (for packing the weights and
     * for their gradient) */
    long K;
    long *kofs;   /* input e of segment j: its offset past the pixel's first input */
    long *kidx;   /* its place in an output channel's weights (cin, k, k) */
    float *wacc;  /* the gradient's tiles while they sum: (row tiles, panels, 6, 16) */
};

/* The channels of the input in contiguous runs: cblk of them, runs cstride apart. */
static int channel_runs(const fl_conv_fwd_geom_t *g, int *cblk, long *cstride) {
    if (g->in.blk > 1) {
        *cblk = (int)g->in.blk;
        *cstride = g->in.st[1];
        return 1;
    }
    if (g->in.st[1] != 1) return 0;
    *cblk = g->cin;
    *cstride = 0;
    return 1;
}

/* fl_conv_fwd_force_avx2: the AVX2 tiles wherever the CPU has AVX2 and FMA. */
static int g_force_avx2;

void fl_conv_fwd_force_avx2(int on) { g_force_avx2 = on; }

static int avx2_tiles(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (g_force_avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return fl_dense_small_preferred();
}

/* 1 where this CPU runs g's forward on AVX-512 tiles: a convolution of at most
 * FL_CONV_FWD_WIDE_CIN input channels (tiles of 8 pixels x one panel), or of more and a
 * multiple of 32 output channels (tiles of 6 pixels x 4 panels, or 10 x 2), whose outputs
 * come 16 channels side by side. */
static int wide_for(const fl_conv_fwd_geom_t *g) {
#if defined(__x86_64__) && defined(__GNUC__)
    const fl_conv_layout_t *o = &g->out;
    return !g_force_avx2 && __builtin_cpu_supports("avx512f") &&
           (g->cin <= FL_CONV_FWD_WIDE_CIN || g->cout % 32 == 0) &&
           (o->blk % 16 == 0 || (o->blk == 1 && o->st[1] == 1));
#else
    (void)g;
    return 0;
#endif
}

static int supported(const fl_conv_fwd_geom_t *g) {
    if (!avx2_tiles() && !wide_for(g)) return 0;
    if (g->batch < 1 || g->cin < 1 || g->k < 1 || g->stride < 1 || g->cout < 16 || g->cout % 16 ||
        g->cout > 16 * FL_CONV_FWD_MAX_PANELS)
        return 0;
    if (g->in_h < g->k || g->in_w < g->k || g->out_h != (g->in_h - g->k) / g->stride + 1 ||
        g->out_w != (g->in_w - g->k) / g->stride + 1)
        return 0;
    const fl_conv_layout_t *o = &g->out;
    return (o->blk >= 8 && o->blk % 8 == 0) || (o->blk == 1 && o->st[1] == 1);
}

fl_conv_fwd_t *fl_conv_fwd_create(const fl_conv_fwd_geom_t *g) {
    int cblk;
    long cstride;
    if (!supported(g) || !channel_runs(g, &cblk, &cstride)) return NULL;
    const int blocks = (g->cin + cblk - 1) / cblk;
    /* a whole kernel row is one run where the next column's block starts right after this one */
    const int row = g->stride == 1 && g->cin % cblk == 0 && g->in.st[3] == cblk;
    const size_t max = (size_t)blocks * g->k * (row ? 1 : g->k);
    fl_conv_fwd_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->g = *g;
    c->wide = wide_for(g);
    if (c->wide && g->cin > FL_CONV_FWD_WIDE_CIN) c->np = g->cout % 64 == 0 ? 4 : 2;
    c->off = malloc(max * sizeof *c->off);
    c->len = malloc(max * sizeof *c->len);
    const long hw = (long)g->out_h * g->out_w, M = g->batch * hw;
    c->xoff = malloc((size_t)M * sizeof *c->xoff);
    c->yoff = malloc((size_t)M * sizeof *c->yoff);
    c->K = (long)g->cin * g->k * g->k;
    c->kofs = malloc((size_t)c->K * sizeof *c->kofs);
    c->kidx = malloc((size_t)c->K * sizeof *c->kidx);
    c->wacc = malloc((size_t)(c->K + 16) * g->cout * sizeof *c->wacc); /* tiles of 6, 8 or 16 inputs, the last partial */
    if (!c->off || !c->len || !c->xoff || !c->yoff || !c->kofs || !c->kidx || !c->wacc) {
        fl_conv_fwd_destroy(c);
        return NULL;
    }
    long at = 0; /* the segments, and each of their inputs */
    for (int b = 0; b < blocks; b++) {
        const int len = g->cin - b * cblk < cblk ? g->cin - b * cblk : cblk;
        for (int kh = 0; kh < g->k; kh++)
            for (int kw = 0; kw < (row ? 1 : g->k); kw++, c->n++) {
                c->off[c->n] = b * cstride + kh * g->in.st[2] + kw * g->in.st[3];
                c->len[c->n] = row ? g->k * cblk : len;
                for (int e = 0; e < c->len[c->n]; e++, at++) {
                    const int x = row ? e / cblk : kw, ch = b * cblk + (row ? e % cblk : e);
                    c->kofs[at] = c->off[c->n] + e;
                    c->kidx[at] = ((long)ch * g->k + kh) * g->k + x;
                }
            }
    }
    /* the weights, cout x K, against the inputs as the tiles read them, M x K */
    c->panels_outer = g->cout > M;
    for (long m = 0; m < M; m++) {
        const long b = m / hw, oy = m % hw / g->out_w, ox = m % g->out_w;
        c->xoff[m] = b * g->in.st[0] + oy * g->stride * g->in.st[2] + ox * g->stride * g->in.st[3];
        c->yoff[m] = b * g->out.st[0] + oy * g->out.st[2] + ox * g->out.st[3];
    }
    return c;
}

void fl_conv_fwd_destroy(fl_conv_fwd_t *c) {
    if (!c) return;
    free(c->off), free(c->len);
    free(c->xoff), free(c->yoff), free(c->kofs), free(c->kidx), free(c->wacc);
    free(c);
}

int fl_conv_fwd_wide(const fl_conv_fwd_t *c) { return c->wide; }

int fl_conv_fwd_has_wgrad(const fl_conv_fwd_t *c) { return !c->wide || c->np; }

size_t fl_conv_fwd_weights_size(const fl_conv_fwd_t *c) {
    return (size_t)c->g.cout * c->g.cin * c->g.k * c->g.k;
}

void fl_conv_fwd_weights(const fl_conv_fwd_t *c, const float *w, float *wt) {
    const long K = c->K;
    if (c->np) {
        const int np = c->np, gw = 16 * np;
        PAR_FOR for (int p = 0; p < c->g.cout / gw; p++) {
            float *grp = wt + (size_t)p * gw * K;
            for (long i = 0; i < K; i++)
                for (int o = 0; o < gw; o++) grp[gw * i + o] = w[(size_t)(gw * p + o) * K + c->kidx[i]];
        }
        return;
    }
    PAR_FOR for (int p = 0; p < c->g.cout / 16; p++) {
        float *panel = wt + (size_t)p * 16 * K;
        for (long i = 0; i < K; i++)
            for (int o = 0; o < 16; o++) panel[16 * i + o] = w[(size_t)(16 * p + o) * K + c->kidx[i]];
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* Pixel R's input value at P + e times the panel's row (w0, w1), into its accumulators. */
#define FMA2(R, P)                                                                              \
    do {                                                                                        \
        const __m256 v_ = _mm256_broadcast_ss((P) + e);                                         \
        a##R##0 = _mm256_fmadd_ps(v_, w0, a##R##0), a##R##1 = _mm256_fmadd_ps(v_, w1, a##R##1); \
    } while (0)

/* One tile: up to 6 output pixels m0.. (nr of them) x the 16 output channels of one
 * panel (weights wp; channels 0-7 at yc0 past a pixel's first output, 8-15 at yc1), the
 * sums started at the bias. Pixels past nr repeat the last one and are not stored. */
__attribute__((target("avx2,fma"))) static void tile_avx2(const fl_conv_fwd_t *c, long m0, int nr, const float *x,
                                                          const float *wp, const float *bias, float *y, long yc0,
                                                          long yc1, int relu) {
    __m256 a00 = _mm256_loadu_ps(bias), a01 = _mm256_loadu_ps(bias + 8), a10 = a00, a11 = a01, a20 = a00, a21 = a01,
           a30 = a00, a31 = a01, a40 = a00, a41 = a01, a50 = a00, a51 = a01;
    const float *xr[6];
    for (int r = 0; r < 6; r++) xr[r] = x + c->xoff[m0 + (r < nr ? r : nr - 1)];
    for (int j = 0; j < c->n; j++) {
        const long off = c->off[j];
        const float *p0 = xr[0] + off, *p1 = xr[1] + off, *p2 = xr[2] + off, *p3 = xr[3] + off, *p4 = xr[4] + off,
                    *p5 = xr[5] + off;
        const int len = c->len[j];
        for (int e = 0; e < len; e++, wp += 16) {
            const __m256 w0 = _mm256_loadu_ps(wp), w1 = _mm256_loadu_ps(wp + 8);
            FMA2(0, p0);
            FMA2(1, p1);
            FMA2(2, p2);
            FMA2(3, p3);
            FMA2(4, p4);
            FMA2(5, p5);
        }
    }
    const __m256 acc[6][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}, {a40, a41}, {a50, a51}};
    const __m256 zero = _mm256_setzero_ps();
    const long *yoff = c->yoff + m0;
    for (int r = 0; r < nr; r++) {
        __m256 v0 = acc[r][0], v1 = acc[r][1];
        if (relu) v0 = _mm256_max_ps(v0, zero), v1 = _mm256_max_ps(v1, zero);
        _mm256_storeu_ps(y + yoff[r] + yc0, v0);
        _mm256_storeu_ps(y + yoff[r] + yc1, v1);
    }
}

__attribute__((target("avx2,fma"))) static void run_avx2(const fl_conv_fwd_t *c, const float *x, const float *wt,
                                                         const float *bias, float *y, int relu) {
    const fl_conv_fwd_geom_t *g = &c->g;
    const fl_conv_layout_t *O = &g->out;
    const long M = (long)g->batch * g->out_h * g->out_w, K = (long)g->cin * g->k * g->k, tiles = (M + 5) / 6;
    const int panels = g->cout / 16;
    /* where output channel 16 p + 8 h of a pixel lies past the pixel's first output */
    long yc[2 * FL_CONV_FWD_MAX_PANELS];
    for (int i = 0; i < 2 * panels; i++) yc[i] = 8L * i / O->blk * O->st[1] + 8L * i % O->blk;
    if (c->panels_outer) {
        PAR_FOR for (int p = 0; p < panels; p++) for (long t = 0; t < tiles; t++) {
            const int nr = M - 6 * t < 6 ? (int)(M - 6 * t) : 6;
            tile_avx2(c, 6 * t, nr, x, wt + (size_t)p * 16 * K, bias + 16 * p, y, yc[2 * p], yc[2 * p + 1], relu);
        }
        return;
    }
    PAR_FOR for (long t = 0; t < tiles; t++) {
        const int nr = M - 6 * t < 6 ? (int)(M - 6 * t) : 6;
        for (int p = 0; p < panels; p++)
            tile_avx2(c, 6 * t, nr, x, wt + (size_t)p * 16 * K, bias + 16 * p, y, yc[2 * p], yc[2 * p + 1], relu);
    }
}

/* The weights' gradient, one tile: inputs r0.. (nr of them, in the order of kofs) x the
 * 16 output channels of one panel, summed over pixels m0 to m1 into acc (6 x 16, which
 * holds the sums so far). Inputs past nr repeat the last one. The bases x + kofs[r] and
 * dy + yc are folded into six and two pointers, so that the loop indexes them with the
 * pixel's two table offsets alone. */
#define WFMA(R)                                                                                 \
    do {                                                                                        \
        const __m256 v_ = _mm256_broadcast_ss(x##R + xo);                                       \
        a##R##0 = _mm256_fmadd_ps(v_, d0, a##R##0), a##R##1 = _mm256_fmadd_ps(v_, d1, a##R##1); \
    } while (0)

__attribute__((target("avx2,fma"))) static void wgrad_tile_avx2(const fl_conv_fwd_t *c, long r0, int nr, long m0,
                                                                long m1, const float *x, const float *dy, long yc0,
                                                                long yc1, float *acc) {
    __m256 a00 = _mm256_loadu_ps(acc), a01 = _mm256_loadu_ps(acc + 8), a10 = _mm256_loadu_ps(acc + 16),
           a11 = _mm256_loadu_ps(acc + 24), a20 = _mm256_loadu_ps(acc + 32), a21 = _mm256_loadu_ps(acc + 40),
           a30 = _mm256_loadu_ps(acc + 48), a31 = _mm256_loadu_ps(acc + 56), a40 = _mm256_loadu_ps(acc + 64),
           a41 = _mm256_loadu_ps(acc + 72), a50 = _mm256_loadu_ps(acc + 80), a51 = _mm256_loadu_ps(acc + 88);
    const float *xr[6];
    for (int r = 0; r < 6; r++) xr[r] = x + c->kofs[r0 + (r < nr ? r : nr - 1)];
    const float *x0 = xr[0], *x1 = xr[1], *x2 = xr[2], *x3 = xr[3], *x4 = xr[4], *x5 = xr[5];
    const float *dy0 = dy + yc0, *dy1 = dy + yc1;
    const long *xoff = c->xoff + m0, *yoff = c->yoff + m0;
    for (long i = m1 - m0; i > 0; i--) {
        const long xo = *xoff++, yo = *yoff++;
        const __m256 d0 = _mm256_loadu_ps(dy0 + yo), d1 = _mm256_loadu_ps(dy1 + yo);
        WFMA(0);
        WFMA(1);
        WFMA(2);
        WFMA(3);
        WFMA(4);
        WFMA(5);
    }
    _mm256_storeu_ps(acc, a00), _mm256_storeu_ps(acc + 8, a01), _mm256_storeu_ps(acc + 16, a10);
    _mm256_storeu_ps(acc + 24, a11), _mm256_storeu_ps(acc + 32, a20), _mm256_storeu_ps(acc + 40, a21);
    _mm256_storeu_ps(acc + 48, a30), _mm256_storeu_ps(acc + 56, a31), _mm256_storeu_ps(acc + 64, a40);
    _mm256_storeu_ps(acc + 72, a41), _mm256_storeu_ps(acc + 80, a50), _mm256_storeu_ps(acc + 88, a51);
}

/* The bias's gradient of output channels 8 h to 8 h + 7: the sum over every pixel, in
 * pixel order. */
__attribute__((target("avx2,fma"))) static void bias_grad_avx2(const fl_conv_fwd_t *c, const float *dy, long yc,
                                                               long M, float *db) {
    __m256 a = _mm256_setzero_ps();
    for (long m = 0; m < M; m++) a = _mm256_add_ps(a, _mm256_loadu_ps(dy + c->yoff[m] + yc));
    _mm256_storeu_ps(db, a);
}

/* Pixels are taken in chunks of WGRAD_CHUNK: each chunk's inputs and output gradients
 * are read by every tile while they are in the core's cache (128 measured faster than 32,
 * 64 and whole images of 256 pixels or more on the Nature CNN at batch 512). Each thread
 * sums its own tiles over the chunks in order, so the sums do not depend on the thread
 * count. */
#define WGRAD_CHUNK 128

/* The calling thread's share [*t0, *t1) of n tiles, in its OpenMP team (all of them
 * outside one). */
static void team_share(long n, long *t0, long *t1) {
#ifdef _OPENMP
    const long th = omp_get_thread_num(), nth = omp_get_num_threads();
#else
    const long th = 0, nth = 1;
#endif
    *t0 = n * th / nth, *t1 = n * (th + 1) / nth;
}

/* The weight gradient's tiles (ni inputs x gw outputs each, tile t of input tile t /
 * groups and output group t % groups, in c->wacc) into dw (cout, cin, k, k). */
static void tiles_to_dw(const fl_conv_fwd_t *c, int ni, int gw, long groups, float *dw) {
    const long tiles = (c->K + ni - 1) / ni * groups;
    for (long t = 0; t < tiles; t++) {
        const long rt = t / groups, p = t % groups;
        const int nr = c->K - ni * rt < ni ? (int)(c->K - ni * rt) : ni;
        for (int r = 0; r < nr; r++)
            for (int o = 0; o < gw; o++)
                dw[(size_t)(gw * p + o) * c->K + c->kidx[ni * rt + r]] = c->wacc[(size_t)ni * gw * t + gw * r + o];
    }
}

__attribute__((target("avx2,fma"))) static void wgrad_avx2(const fl_conv_fwd_t *c, const float *x, const float *dy,
                                                           float *dw, float *db) {
    const fl_conv_fwd_geom_t *g = &c->g;
    const fl_conv_layout_t *O = &g->out;
    const long hw = (long)g->out_h * g->out_w, M = g->batch * hw, rtiles = (c->K + 5) / 6;
    const int panels = g->cout / 16;
    const long tiles = rtiles * panels, chunk = WGRAD_CHUNK;
    long yc[2 * FL_CONV_FWD_MAX_PANELS];
    for (int i = 0; i < 2 * panels; i++) yc[i] = 8L * i / O->blk * O->st[1] + 8L * i % O->blk;
    memset(c->wacc, 0, (size_t)tiles * 96 * sizeof(float));
#ifdef _OPENMP
#pragma omp parallel
#endif
    {
        long t0, t1;
        team_share(tiles, &t0, &t1);
        for (long m0 = 0; m0 < M; m0 += chunk) {
            const long m1 = M - m0 < chunk ? M : m0 + chunk;
            for (long t = t0; t < t1; t++) {
                const long rt = t / panels;
                const int p = (int)(t % panels), nr = c->K - 6 * rt < 6 ? (int)(c->K - 6 * rt) : 6;
                wgrad_tile_avx2(c, 6 * rt, nr, m0, m1, x, dy, yc[2 * p], yc[2 * p + 1], c->wacc + 96 * t);
            }
        }
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int i = 0; i < 2 * panels; i++) bias_grad_avx2(c, dy, yc[i], M, db + 8 * i);
    }
    tiles_to_dw(c, 6, 16, panels, dw);
}

/* The AVX-512 forward, for few input channels (where oneDNN's kernels leave most of a
 * vector idle): tiles of 8 output pixels x the 16 output channels of a panel, one
 * register each, so 8 independent sums cover the FMA units' latency; each input value
 * broadcast straight from memory into its FMA. Each output is the bias plus the
 * products in the AVX2 tiles' fixed order. */
#define WIDE_ROWS 8
#define MULTI_ROWS(np) ((np) == 4 ? 6 : 10)
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

/* Where each panel's 16 channels lie past a pixel's first output. */
static void panel_offsets(const fl_conv_fwd_geom_t *g, long *yc) {
    for (int p = 0; p < g->cout / 16; p++) yc[p] = 16L * p / g->out.blk * g->out.st[1] + 16L * p % g->out.blk;
}

__attribute__((target("avx512f"))) static void run_avx512(const fl_conv_fwd_t *c, const float *x, const float *wt,
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
#define MF4(R)                                                                                       \
    do {                                                                                             \
        MBC(R);                                                                                      \
        a##R##0 = _mm512_fmadd_ps(b##R, w0, a##R##0), a##R##1 = _mm512_fmadd_ps(b##R, w1, a##R##1);     \
        a##R##2 = _mm512_fmadd_ps(b##R, w2, a##R##2), a##R##3 = _mm512_fmadd_ps(b##R, w3, a##R##3);     \
    } while (0)
#define MF2(R)                                                                                       \
    do {                                                                                             \
        MBC(R);                                                                                      \
        a##R##0 = _mm512_fmadd_ps(b##R, w0, a##R##0), a##R##1 = _mm512_fmadd_ps(b##R, w1, a##R##1);     \
    } while (0)
#define MSTORE(NR, NP, ACC)                                                                          \
    for (int r = 0; r < (NR); r++)                                                                   \
        for (int q = 0; q < (NP); q++)                                                               \
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

__attribute__((target("avx512f"))) static void tile10x2(const float *const *xr, int nr, const long *off,
                                                        const int *len, int nseg, const float *wp, const float *bias,
                                                        float *y, const long *yo, const long *yc, int relu) {
    __m512 a00 = _mm512_loadu_ps(bias), a01 = _mm512_loadu_ps(bias + 16);
    __m512 a10 = a00, a11 = a01, a20 = a00, a21 = a01, a30 = a00, a31 = a01, a40 = a00, a41 = a01, a50 = a00,
           a51 = a01, a60 = a00, a61 = a01, a70 = a00, a71 = a01, a80 = a00, a81 = a01, a90 = a00, a91 = a01;
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
__attribute__((target("avx512f"))) static void tile10x1(const float *const *xr, int nr, const long *off,
                                                        const int *len, int nseg, const float *wp, const float *bias,
                                                        float *y, const long *yo, const long *yc, int relu) {
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
                                                          const int *len, int nseg, long K, int groups,
                                                          const float *wt, const float *bias, float *y,
                                                          const long *yo, const long *yc, int relu) {
    for (int p = 0; p < groups; p++) {
        if (np == 4) tile6x4(xr, nr, off, len, nseg, wt + (size_t)p * 64 * K, bias + 64 * p, y, yo, yc + 4 * p, relu);
        else if (np == 2)
            tile10x2(xr, nr, off, len, nseg, wt + (size_t)p * 32 * K, bias + 32 * p, y, yo, yc + 2 * p, relu);
        else tile10x1(xr, nr, off, len, nseg, wt + (size_t)p * 16 * K, bias + 16 * p, y, yo, yc + p, relu);
    }
}

__attribute__((target("avx512f"))) static void run_multi(const fl_conv_fwd_t *c, const float *x, const float *wt,
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
#define WF4(R)                                                                                         \
    do {                                                                                               \
        WB(R);                                                                                         \
        a##R##0 = _mm512_fmadd_ps(v##R, d0, a##R##0), a##R##1 = _mm512_fmadd_ps(v##R, d1, a##R##1);       \
        a##R##2 = _mm512_fmadd_ps(v##R, d2, a##R##2), a##R##3 = _mm512_fmadd_ps(v##R, d3, a##R##3);       \
    } while (0)
#define WF2(R)                                                                                         \
    do {                                                                                               \
        WB(R);                                                                                         \
        a##R##0 = _mm512_fmadd_ps(v##R, d0, a##R##0), a##R##1 = _mm512_fmadd_ps(v##R, d1, a##R##1);       \
    } while (0)
#define WLOAD(R, NP) for (int q = 0; q < (NP); q++) A[R][q] = _mm512_loadu_ps(acc + 16 * ((R) * (NP) + q))

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
#define WTILE16(F)                                                                                     \
    do {                                                                                               \
        for (long i = n; i > 0; i--) {                                                                 \
            const long xo = *xoff++, yo = *yoff++;                                                     \
            const __m512 d0 = _mm512_loadu_ps(dy0 + yo);                                               \
            F(0); F(1); F(2); F(3); F(4); F(5); F(6); F(7);                                            \
            F(8); F(9); F(10); F(11); F(12); F(13); F(14); F(15);                                      \
        }                                                                                              \
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
    if (side_by_side) WTILE16(WC1);
    else WTILE16(WP1);
    const __m512 out[16] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15};
    for (int r = 0; r < 16; r++) _mm512_storeu_ps(acc + 16 * r, out[r]);
}

#define WGRAD_INPUTS(np) ((np) == 4 ? 6 : (np) == 2 ? 8 : 16)
#define WGRAD_MAX_INPUTS 16

/* The parameter gradients on the AVX-512 tiles: as wgrad_avx2 (pixels in chunks of
 * WGRAD_CHUNK, each thread its own tiles summed over the chunks in order), the bias's
 * gradient summed per chunk by the team's first thread, from the chunk's output
 * gradients while they are in cache (four running sums, then the chunk's total added in
 * chunk order: the same bits at any thread count). One chunk, pixels m0 to m1, tiles t0
 * to t1 (this thread's); x: where c->xoff counts from; the output gradients at dy +
 * yoff[m - m0] + yc[panel]. */
__attribute__((target("avx512f"))) static void wgrad_chunk(const fl_conv_fwd_t *c, const float *x, const float *dy,
                                                           const long *yoff, const long *yc, long m0, long m1,
                                                           long t0, long t1, int first, float *db) {
    const int np = c->np, ni = WGRAD_INPUTS(np), groups = c->g.cout / (16 * np), panels = c->g.cout / 16;
    const long tsz = (long)ni * np * 16;
    for (long t = t0; t < t1; t++) {
        const long rt = t / groups;
        const int p = (int)(t % groups), nr = c->K - ni * rt < ni ? (int)(c->K - ni * rt) : ni;
        const float *xr[WGRAD_MAX_INPUTS], *dq[4];
        for (int r = 0; r < ni; r++) xr[r] = x + c->kofs[ni * rt + (r < nr ? r : nr - 1)];
        for (int q = 0; q < np; q++) dq[q] = dy + yc[np * p + q];
        if (np == 4) wtile6x4(xr, c->xoff + m0, yoff, m1 - m0, dq, c->wacc + tsz * t);
        else if (np == 2) wtile8x2(xr, c->xoff + m0, yoff, m1 - m0, dq, c->wacc + tsz * t);
        else wtile16x1(xr, c->xoff + m0, yoff, m1 - m0, dq, c->wacc + tsz * t);
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

__attribute__((target("avx512f"))) static void wgrad_avx512(const fl_conv_fwd_t *c, const float *x, const float *dy,
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
            wgrad_chunk(c, x, dy, c->yoff + m0, yc, m0, M - m0 < WGRAD_CHUNK ? M : m0 + WGRAD_CHUNK, t0, t1, first,
                        db);
    }
    tiles_to_dw(c, WGRAD_INPUTS(c->np), 16 * c->np, c->g.cout / (16 * c->np), dw);
}
#define HAVE_AVX2_VERSION 1
#endif

void fl_conv_fwd_wgrad(const fl_conv_fwd_t *c, const float *x, const float *dy, float *dw, float *db) {
#ifdef HAVE_AVX2_VERSION
    if (c->np) wgrad_avx512(c, x, dy, dw, db);
    else wgrad_avx2(c, x, dy, dw, db);
#else
    (void)c, (void)x, (void)dy, (void)dw, (void)db;
#endif
}

void fl_conv_fwd_run(const fl_conv_fwd_t *c, const float *x, const float *wt, const float *bias, float *y, int relu) {
#ifdef HAVE_AVX2_VERSION
    if (c->np) run_multi(c, x, wt, bias, y, relu);
    else if (c->wide) run_avx512(c, x, wt, bias, y, relu);
    else run_avx2(c, x, wt, bias, y, relu);
#else
    (void)c, (void)x, (void)wt, (void)bias, (void)y, (void)relu;
#endif
}

/* ---- fl_conv_img ---- */

/* AMX: the first convolution's forward over uint8 images on the bf16 tile unit, with
 * fp32's accuracy. An image's values (0 to 255) are exact in bf16; each weight w is cut
 * into three bf16 pieces (its 24 significant bits, 8 at a time: w = hi + mid + lo
 * exactly), so each product value x piece is exact in fp32, and the tile unit sums them
 * in fp32: the products of fp32's x * w, the sum as fp32 sums it (in another order). */
static int g_amx_off;

void fl_conv_img_disable_amx(int off) { g_amx_off = off; }

/* 1 where the CPU has AMX's tiles and bf16 products (and AVX-512 with BW and BF16) and
 * Linux grants this process their state (asked once), unless fl_conv_img_disable_amx or FLEET_AMX=0 in the environment
 * turned them off. */
static int amx_ready(void) {
#ifdef HAVE_AMX_VERSION
    static int state = -1;
    if (g_amx_off) return 0;
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (s < 0) {
        unsigned a, b, cx, d;
        const char *env = getenv("FLEET_AMX");
        unsigned a1, b1, c1, d1; /* leaf 7.1: AVX512-BF16 (EAX bit 5), for the conversions */
        s = !(env && strcmp(env, "0") == 0) && __builtin_cpu_supports("avx512f") &&
            __builtin_cpu_supports("avx512bw") && __get_cpuid_count(7, 0, &a, &b, &cx, &d) && (d >> 22 & 1) &&
            (d >> 24 & 1) && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 >> 5 & 1) &&
            syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
        __atomic_store_n(&state, s, __ATOMIC_RELEASE);
    }
    return s;
#else
    return 0;
#endif
}

struct fl_conv_img {
    fl_conv_fwd_geom_t g;
    int np, R, tpr; /* panels per tile, pixels per tile, tiles per output row */
    long rowlen, K;  /* floats of one converted input row; inputs per output */
    long off[FL_CONV_IMG_MAX_K]; /* segment kh: kernel row kh of every pixel (k x cin values) */
    int len[FL_CONV_IMG_MAX_K];
    /* the weight gradient's tables, made by its first call (fl_conv_img_wgrad): a
     * convolution over one image's (H, W, C) floats, every pixel's input offset within
     * its image (a batch stride of 0), its outputs where they lie in the batch */
    fl_conv_fwd_t *w;
    float *wbuf; /* a converted image per thread, grown as teams grow */
    int wbuf_threads;
    /* the forward over uint8 images on AMX tiles (amx != 0): am output pixels per tile
     * (a block: part of one output row), abr blocks per output row, aks tile steps of 32
     * values per kernel row; its weights at wt + apack (floats), after the AVX-512 ones */
    int amx, am, abr, aks;
    long apack;
    /* the weight gradient on AMX tiles (amx_wgrad): a thread's buffers, grown as teams
     * grow, and the sums of every (panel, tile of 16 inputs), shared */
    uint16_t *abuf;
    float *acc;
    long *xo;
    int abuf_threads;
};

fl_conv_img_t *fl_conv_img_create(const fl_conv_fwd_geom_t *g) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (!__builtin_cpu_supports("avx512f")) return NULL;
#else
    return NULL;
#endif
    if (g->batch < 1 || g->cin < 1 || g->k < 1 || g->k > FL_CONV_IMG_MAX_K || g->stride < 1 ||
        (g->cout % 32 && g->cout != 16) || g->cout < 16 ||
        g->cout > 16 * FL_CONV_FWD_MAX_PANELS || g->in_h < g->k || g->in_w < g->k ||
        g->out_h != (g->in_h - g->k) / g->stride + 1 || g->out_w != (g->in_w - g->k) / g->stride + 1)
        return NULL;
    const fl_conv_layout_t *o = &g->out;
    if (!(o->blk % 16 == 0 || (o->blk == 1 && o->st[1] == 1))) return NULL;
    const int np = g->cout % 64 == 0 ? 4 : g->cout % 32 == 0 ? 2 : 1,
              R = g->out_w < MULTI_ROWS(np) ? g->out_w : MULTI_ROWS(np);
    const long rowlen = ((long)(R - 1) * g->stride + g->k) * g->cin;
    if (rowlen * g->k > FL_CONV_IMG_BUF) return NULL;
    fl_conv_img_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->g = *g;
    c->np = np, c->R = R, c->tpr = (g->out_w + R - 1) / R;
    c->rowlen = rowlen;
    c->K = (long)g->k * g->k * g->cin;
    for (int kh = 0; kh < g->k; kh++) c->off[kh] = kh * rowlen, c->len[kh] = g->k * g->cin;
    if (np > 1 && amx_ready()) { /* AMX's tiles take two panels at a time */
        c->amx = 1;
        c->abr = (g->out_w + 15) / 16, c->am = (g->out_w + c->abr - 1) / c->abr;
        c->aks = (g->k * g->cin + 31) / 32;
        c->apack = (long)g->cout * c->K;
    }
    return c;
}

int fl_conv_img_amx(const fl_conv_img_t *c) { return c->amx; }

int fl_conv_img_amx_available(void) { return amx_ready(); }

void fl_conv_img_destroy(fl_conv_img_t *c) {
    if (c) fl_conv_fwd_destroy(c->w), free(c->wbuf), free(c->abuf), free(c->acc), free(c->xo);
    free(c);
}

/* The AMX weights: for each panel of 16 outputs, tile step (kernel row kh, values 32 j to
 * 32 j + 31 of that row: kernel columns x channels) and piece, a 16 x 32 bf16 tile (1 KB,
 * 256 floats' room): row i holds inputs 2i and 2i + 1 of each output side by side. */
static long amx_pack_floats(const fl_conv_img_t *c) {
    return c->amx ? (long)c->g.cout / 16 * c->g.k * c->aks * 3 * 256 : 0;
}

size_t fl_conv_img_weights_size(const fl_conv_img_t *c) { return (size_t)c->g.cout * c->K + amx_pack_floats(c); }

/* The AMX tiles' weights (see amx_pack_floats): weight w of output o, kernel row kh,
 * value e of that row (kernel column e / cin, channel e % cin) in its three pieces, each
 * the top 8 significant bits of what the ones before left (so the last is exact); 0 past
 * the row's k x cin values. */
static void amx_weights(const fl_conv_img_t *c, const float *w, float *pack) {
    const int k = c->g.k, C = c->g.cin, kc = k * C, steps = k * c->aks;
    uint16_t *t = (uint16_t *)pack;
    PAR_FOR for (int o16 = 0; o16 < c->g.cout / 16; o16++)
        for (int st = 0; st < steps; st++) {
            const int kh = st / c->aks, j = st % c->aks;
            uint16_t *tile = t + (size_t)(o16 * steps + st) * 3 * 512;
            for (int i = 0; i < 16; i++)
                for (int n = 0; n < 16; n++)
                    for (int u = 0; u < 2; u++) {
                        const int e = 32 * j + 2 * i + u;
                        float v = e < kc ? w[(((size_t)(16 * o16 + n) * C + e % C) * k + kh) * k + e / C] : 0.0f;
                        for (int piece = 0; piece < 3; piece++) {
                            uint32_t bits;
                            float top;
                            memcpy(&bits, &v, sizeof bits);
                            bits &= 0xFFFF0000u;
                            memcpy(&top, &bits, sizeof top);
                            tile[piece * 512 + i * 32 + 2 * n + u] = (uint16_t)(bits >> 16);
                            v -= top;
                        }
                    }
        }
}

void fl_conv_img_weights(const fl_conv_img_t *c, const float *w, float *wt) {
    const int k = c->g.k, C = c->g.cin, gw = 16 * c->np;
    const long K = c->K;
    PAR_FOR for (int p = 0; p < c->g.cout / gw; p++) {
        float *grp = wt + (size_t)p * gw * K;
        for (long i = 0; i < K; i++) { /* i = (kh k + kw) C + ch */
            const long ch = i % C, kw = i / C % k, kh = i / C / k;
            for (int o = 0; o < gw; o++) grp[gw * i + o] = w[(((size_t)(gw * p + o) * C + ch) * k + kh) * k + kw];
        }
    }
    if (c->amx) amx_weights(c, w, wt + c->apack);
}

#if defined(__x86_64__) && defined(__GNUC__)
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

__attribute__((target("avx512f"))) static void img_run(const fl_conv_img_t *c, const unsigned char *u8,
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
#endif

#if defined(__x86_64__) && defined(__GNUC__)
/* The floats of one thread's buffers for img_wgrad: a converted image, then a chunk's
 * masked output gradients. */
static long img_wbuf_floats(const fl_conv_img_t *c, long *image) {
    *image = ((long)c->g.in_h * c->g.in_w * c->g.cin + 15) / 16 * 16;
    return *image + (long)WGRAD_CHUNK * c->g.cout;
}

/* The weight gradient over the images: each thread converts each image as img_run does
 * (uint8 x 1/255, or float, times the scale) into a buffer of its own, then runs its tiles
 * over that image's pixels in chunks (none straddles an image) from cache. With relu_y,
 * each chunk's output gradients are first masked where relu_y (the forward's outputs
 * after relu) is not above 0, as relu's backward would (into the thread's chunk buffer,
 * pixel after pixel, its cout channels side by side), and dy itself is not written. */
__attribute__((target("avx512f"))) static void img_wgrad(fl_conv_img_t *ci, const unsigned char *u8, const float *f,
                                                         float scale, const float *dy, const float *relu_y,
                                                         float *dw, float *db) {
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
#endif

#ifdef HAVE_AMX_VERSION
static int amx_wgrad(fl_conv_img_t *c, const unsigned char *u8, float scale, const float *dy, const float *relu_y,
                     float *dw, float *db);
#endif

int fl_conv_img_wgrad(fl_conv_img_t *c, const unsigned char *u8, const float *f, float scale, const float *dy,
                      const float *relu_y, float *dw, float *db) {
#ifdef HAVE_AMX_VERSION
    if (c->amx && u8 && amx_wgrad(c, u8, scale, dy, relu_y, dw, db) == 0) return 0;
#endif
#if defined(__x86_64__) && defined(__GNUC__)
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
#else
    (void)c, (void)u8, (void)f, (void)scale, (void)dy, (void)relu_y, (void)dw, (void)db;
    return -1;
#endif
}

#ifdef HAVE_AMX_VERSION
/* n uint8 values as bf16 (exact: at most 8 significant bits), 32 at a time. */
__attribute__((target("avx512f,avx512bf16"))) static void amx_image(uint16_t *d, const unsigned char *u8, long n) {
    long i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(u8 + i)))),
                     hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(u8 + i + 16))));
        _mm512_storeu_si512(d + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
    for (; i < n; i++) {
        const float v = u8[i];
        uint32_t bits;
        memcpy(&bits, &v, sizeof bits);
        d[i] = (uint16_t)(bits >> 16);
    }
}

typedef struct __attribute__((packed)) {
    uint8_t palette, start_row, zero[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg_t;

/* The calling thread's tiles configured: 0-5 of rows rows, 6 and 7 of 16, each row 64
 * bytes. (ldtilecfg reads all 64 bytes of the configuration: said so here, not through
 * _tile_loadconfig, whose operand tells the compiler of 8 only and lets it drop the
 * stores before.) */
__attribute__((target("amx-tile"))) static void amx_configure(int rows) {
    amx_cfg_t cfg = {.palette = 1};
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = (uint8_t)(t < 6 ? rows : 16);
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}

/* The forward on AMX tiles. A block is am output pixels of one output row, side by side
 * in a tile's rows: the tile of kernel row kh and values 32 j on of a block is read
 * straight from the bf16 image, a pixel's 32 values one tile row, stride x cin values
 * apart. A unit is two blocks (of one image) x two panels of 16 outputs: four
 * accumulating tiles (0-3), the two blocks' input tiles (4, 5), two panels' weight tiles
 * (6, 7), three pieces per step. A row's last block starts where it ends within the row
 * (recomputing a few pixels, bit for bit the same); an odd block count repeats the last.
 * Each thread converts the images of its units into its own buffer. -1 where memory ran
 * out (the caller takes the AVX-512 tiles). */
__attribute__((target("avx512f,amx-tile,amx-bf16"))) static int amx_run(const fl_conv_img_t *c,
                                                                       const unsigned char *u8, float scale,
                                                                       const float *wt, const float *bias, float *y,
                                                                       int relu) {
    const fl_conv_fwd_geom_t *g = &c->g;
    const int m = c->am, s = g->stride, C = g->cin, steps = g->k * c->aks, panels = g->cout / 16;
    const long nimg = (long)g->in_h * g->in_w * C, blocks = (long)g->out_h * c->abr, pairs = (blocks + 1) / 2;
    const long units = (long)g->batch * pairs, per = (nimg + 32 + 31) / 32 * 32; /* 32 values over-read */
    const uint16_t *pack = (const uint16_t *)(wt + c->apack);
    const __m512 f = _mm512_set1_ps(scale * (1.0f / 255.0f));
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
#else
    const int threads = 1;
#endif
    uint16_t *bufs = aligned_alloc(64, (size_t)per * threads * sizeof(uint16_t));
    if (!bufs) return -1;
    long yc[FL_CONV_FWD_MAX_PANELS];
    panel_offsets(g, yc);
#ifdef _OPENMP
#pragma omp parallel
#endif
    {
        long u0, u1;
        team_share(units, &u0, &u1);
#ifdef _OPENMP
        uint16_t *img = bufs + per * omp_get_thread_num();
#else
        uint16_t *img = bufs;
#endif
        if (u0 < u1) {
            amx_configure(m);
            memset(img + nimg, 0, (size_t)(per - nimg) * sizeof(uint16_t));
            float acc[4][16 * 16] __attribute__((aligned(64)));
            long have = -1;
            for (long u = u0; u < u1; u++) {
                const long b = u / pairs, q = u % pairs;
                if (b != have) amx_image(img, u8 + b * nimg, nimg), have = b;
                long oy[2], ox[2];
                const uint16_t *xa[2];
                for (int h = 0; h < 2; h++) {
                    const long blk = 2 * q + h < blocks ? 2 * q + h : blocks - 1;
                    oy[h] = blk / c->abr, ox[h] = blk % c->abr * m;
                    if (ox[h] > g->out_w - m) ox[h] = g->out_w - m;
                    xa[h] = img + (oy[h] * s * g->in_w + ox[h] * s) * C;
                }
                for (int p2 = 0; p2 < panels / 2; p2++) {
                    const uint16_t *w0 = pack + (size_t)(2 * p2) * steps * 3 * 512, *w1 = w0 + (size_t)steps * 3 * 512;
                    _tile_zero(0);
                    _tile_zero(1);
                    _tile_zero(2);
                    _tile_zero(3);
                    for (int st = 0; st < steps; st++) {
                        const long at = (long)(st / c->aks) * g->in_w * C + 32 * (st % c->aks);
                        _tile_loadd(4, xa[0] + at, s * C * 2);
                        _tile_loadd(5, xa[1] + at, s * C * 2);
                        for (int piece = 0; piece < 3; piece++) {
                            _tile_loadd(6, w0 + (size_t)(3 * st + piece) * 512, 64);
                            _tile_loadd(7, w1 + (size_t)(3 * st + piece) * 512, 64);
                            _tile_dpbf16ps(0, 4, 6);
                            _tile_dpbf16ps(1, 4, 7);
                            _tile_dpbf16ps(2, 5, 6);
                            _tile_dpbf16ps(3, 5, 7);
                        }
                    }
                    _tile_stored(0, acc[0], 64);
                    _tile_stored(1, acc[1], 64);
                    _tile_stored(2, acc[2], 64);
                    _tile_stored(3, acc[3], 64);
                    for (int h = 0; h < 2; h++)
                        for (int r = 0; r < m; r++) {
                            const long yo = b * g->out.st[0] + oy[h] * g->out.st[2] + (ox[h] + r) * g->out.st[3];
                            for (int e = 0; e < 2; e++) {
                                const int pn = 2 * p2 + e;
                                __m512 v = _mm512_fmadd_ps(_mm512_load_ps(acc[2 * h + e] + 16 * r), f,
                                                           _mm512_loadu_ps(bias + 16 * pn));
                                if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
                                _mm512_storeu_ps(y + yo + yc[pn], v);
                            }
                        }
                }
            }
            _tile_release();
        }
    }
    free(bufs);
    return 0;
}
#endif

#ifdef HAVE_AMX_VERSION
/* ---- the weight gradient on AMX tiles ----
 * dw[o][k] = scale / 255 x the sum over pixels p of x[p][k] (the image's uint8 values,
 * exact in bf16) x dy[p][o] (after relu's mask; cut into three exact bf16 pieces): exact
 * products, summed in fp32 by the tiles. The sums' tiles: 16 outputs (a panel) x 16 of a
 * kernel row's k x cin values (an input tile; a row's last may run past it: those
 * columns are dropped), summed over an image's pixels 32 at a time (a step). An item is
 * two input tiles x two panels (four accumulating tiles) of one lane (below); a thread
 * takes items of a lane, sums them over the lane's images in order, and for each image
 * makes: the bf16 image, dy's tiles (a panel's 16 outputs x 32 pixels, per piece:
 * transposed from the pixel-major dy) and x's tiles for its input tiles (16 pixel pairs
 * x 16 inputs, each pair side by side). */

/* The batch's images in AMX_LANES lanes (the first half, the second), each summed into
 * sums of its own, then the lanes' sums added in order: two threads work on two images
 * at a time, and the bits do not depend on the thread count. */
#define AMX_LANES 2

/* An image's pixels in steps of 32; a kernel row's input tiles; all of them. */
static void amx_wshape(const fl_conv_img_t *c, long *ks, int *rt, int *kt) {
    *ks = ((long)c->g.out_h * c->g.out_w + 31) / 32;
    *rt = (c->g.k * c->g.cin + 15) / 16;
    *kt = c->g.k * *rt;
}

/* uint16s of one thread's buffers: the bf16 image (32 values over-read), dy's tiles (steps
 * x panels x 3 pieces), x's tiles (steps x input tiles). */
static long amx_wbuf(const fl_conv_img_t *c, long *img, long *dyt) {
    long ks;
    int rt, kt;
    amx_wshape(c, &ks, &rt, &kt);
    *img = ((long)c->g.in_h * c->g.in_w * c->g.cin + 32 + 31) / 32 * 32;
    *dyt = ks * (c->g.cout / 16) * 3 * 512;
    return *img + *dyt + ks * kt * 512;
}

/* 16 vectors of 16 floats transposed in place. */
__attribute__((target("avx512f"))) static void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]),
                      cc = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(cc, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(cc, d));
    }
    /* r[4i + j]: rows 4i..4i+3, column j of each group of 4 columns */
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++) {
            t[8 * h + j] = _mm512_shuffle_f32x4(r[8 * h + j], r[8 * h + 4 + j], 0x88);
            t[8 * h + 4 + j] = _mm512_shuffle_f32x4(r[8 * h + j], r[8 * h + 4 + j], 0xdd);
        }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
    }
}

/* An image's dy tiles (relu's mask applied where relu_y) into dt, pixel p's outputs at
 * dy + yo[p]; with db, its masked dy summed into db as well (per step, in four running
 * sums). */
__attribute__((target("avx512f,avx512bf16"))) static void amx_dy_tiles(const fl_conv_img_t *c, const float *dy,
                                                                      const float *relu_y, const long *yo,
                                                                      const long *yc, uint16_t *dt, float *db) {
    const fl_conv_fwd_geom_t *g = &c->g;
    const long P = (long)g->out_h * g->out_w;
    long ks;
    int rt, kt;
    amx_wshape(c, &ks, &rt, &kt);
    const int panels = g->cout / 16;
    const __m512i top = _mm512_set1_epi32((int)0xFFFF0000u);
    for (long st = 0; st < ks; st++)
        for (int q = 0; q < panels; q++) {
            __m512 v[32];
            for (int j = 0; j < 32; j++) {
                const long p = 32 * st + j;
                if (p >= P) {
                    v[j] = _mm512_setzero_ps();
                    continue;
                }
                const long at = yo[p] + yc[q];
                v[j] = _mm512_loadu_ps(dy + at);
                if (relu_y)
                    v[j] = _mm512_maskz_mov_ps(
                        _mm512_cmp_ps_mask(_mm512_loadu_ps(relu_y + at), _mm512_setzero_ps(), _CMP_GT_OQ), v[j]);
            }
            if (db) {
                __m512 s4[4] = {v[0], v[1], v[2], v[3]};
                for (int j = 4; j < 32; j++) s4[j & 3] = _mm512_add_ps(s4[j & 3], v[j]);
                const __m512 sum = _mm512_add_ps(_mm512_add_ps(s4[0], s4[1]), _mm512_add_ps(s4[2], s4[3]));
                _mm512_storeu_ps(db + 16 * q, _mm512_add_ps(_mm512_loadu_ps(db + 16 * q), sum));
            }
            transpose16(v), transpose16(v + 16); /* v[o]: output o of pixels 0-15, v[16 + o]: of 16-31 */
            uint16_t *t = dt + (st * panels + q) * 3 * 512;
            for (int o = 0; o < 16; o++) {
                __m512 lo = v[o], hi = v[16 + o];
                for (int piece = 0; piece < 3; piece++) {
                    const __m512 tl = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(lo), top)),
                                 th = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(hi), top));
                    _mm512_storeu_si512(t + piece * 512 + o * 32, (__m512i)_mm512_cvtne2ps_pbh(th, tl));
                    lo = _mm512_sub_ps(lo, tl), hi = _mm512_sub_ps(hi, th);
                }
            }
        }
}

/* x's tiles of input tiles k0 to k1 of the bf16 image img into xt: for step st, row i holds
 * pixels 32 st + 2i and + 1, their 16 inputs side by side (0 past the image's pixels);
 * pixel p's first input at img + xo[p]. */
__attribute__((target("avx512f,avx512bw"))) static void amx_x_tiles(const fl_conv_img_t *c, const uint16_t *img,
                                                                    const long *xo, int k0, int k1, uint16_t *xt) {
    const fl_conv_fwd_geom_t *g = &c->g;
    const long P = (long)g->out_h * g->out_w;
    long ks;
    int rt, kt;
    amx_wshape(c, &ks, &rt, &kt);
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int t = k0; t < k1; t++) {
        const long kr = t / rt * g->in_w * g->cin + 16L * (t % rt); /* kernel row t / rt, its value 16 (t % rt) */
        for (long st = 0; st < ks; st++)
            for (int i = 0; i < 16; i++) {
                __m256i seg[2];
                for (int h = 0; h < 2; h++) {
                    const long p = 32 * st + 2 * i + h;
                    seg[h] = p < P ? _mm256_loadu_si256((const __m256i *)(img + xo[p] + kr)) : _mm256_setzero_si256();
                }
                const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(seg[0]), seg[1], 1);
                _mm512_storeu_si512(xt + (st * kt + t) * 512 + i * 32, _mm512_permutexvar_epi16(idx, both));
            }
    }
}

__attribute__((target("avx512f,amx-tile,amx-bf16"))) static void amx_wgrad_run(fl_conv_img_t *c,
                                                                               const unsigned char *u8, float scale,
                                                                               const float *dy, const float *relu_y,
                                                                               float *dw, float *db) {
    const fl_conv_fwd_geom_t *g = &c->g;
    long ks, img_n, dyt_n;
    int rt, kt;
    amx_wshape(c, &ks, &rt, &kt);
    const long per = amx_wbuf(c, &img_n, &dyt_n), nimg = (long)g->in_h * g->in_w * g->cin;
    const int panels = g->cout / 16, pairs = panels / 2, items = (kt + 1) / 2 * pairs, k = g->k, C = g->cin;
    const long lane_acc = (long)panels * kt * 256; /* floats of one lane's sums */
    long yc[FL_CONV_FWD_MAX_PANELS];
    panel_offsets(g, yc);
    memset(c->acc, 0, (size_t)(AMX_LANES * lane_acc + AMX_LANES * g->cout) * sizeof(float));
    float *lane_db = c->acc + AMX_LANES * lane_acc;
    long *xo = c->xo, *yo = c->xo + ks * 32; /* each pixel's first input in its image, output in its image */
    for (long p = 0; p < (long)g->out_h * g->out_w; p++) {
        const long oy = p / g->out_w, ox = p % g->out_w;
        xo[p] = (oy * g->stride * g->in_w + ox * g->stride) * g->cin;
        yo[p] = oy * g->out.st[2] + ox * g->out.st[3];
    }
#ifdef _OPENMP
#pragma omp parallel
#endif
    {
        long u0, u1;
        team_share((long)AMX_LANES * items, &u0, &u1);
#ifdef _OPENMP
        uint16_t *img = c->abuf + per * omp_get_thread_num();
#else
        uint16_t *img = c->abuf;
#endif
        uint16_t *dt = img + img_n, *xt = dt + dyt_n;
        if (u0 < u1) {
            amx_configure(16);
            memset(img + nimg, 0, (size_t)(img_n - nimg) * sizeof(uint16_t));
        }
        for (int lane = (int)(u0 / items); lane < AMX_LANES && (long)lane * items < u1; lane++) {
            /* this thread's items of this lane, i0 to i1, over input tiles k0 to k1 */
            const long i0 = (u0 > (long)lane * items ? u0 : (long)lane * items) - (long)lane * items,
                       i1 = (u1 < (long)(lane + 1) * items ? u1 : (long)(lane + 1) * items) - (long)lane * items;
            const int k0 = (int)(i0 / pairs) * 2, k1 = (int)((i1 - 1) / pairs) * 2 + 2;
            float *acc = c->acc + lane * lane_acc;
            const long bend = g->batch * (lane + 1) / AMX_LANES, iters = (i1 - i0) * ks;
            for (long b = g->batch * lane / AMX_LANES; b < bend; b++) {
                /* the next image's bytes, output gradients and relu's outputs into L2 while
                 * the tiles run (a share of them each step) */
                const char *nx[3] = {(const char *)(u8 + (b + 1) * nimg), (const char *)(dy + (b + 1) * g->out.st[0]),
                                     relu_y ? (const char *)(relu_y + (b + 1) * g->out.st[0]) : NULL};
                const long nlen[3] = {nimg, g->out.st[0] * 4, relu_y ? g->out.st[0] * 4 : 0},
                           lines = b + 1 < bend ? (nlen[0] + nlen[1] + nlen[2]) / 64 + 3 : 0;
                long done = 0, iter = 0;
                amx_image(img, u8 + b * nimg, nimg);
                amx_dy_tiles(c, dy + b * g->out.st[0], relu_y ? relu_y + b * g->out.st[0] : NULL, yo, yc, dt,
                             i0 == 0 ? lane_db + lane * g->cout : NULL);
                amx_x_tiles(c, img, xo, k0, k1 < kt ? k1 : kt, xt);
                for (long it = i0; it < i1; it++) {
                    const int q0 = (int)(it % pairs) * 2, t0 = (int)(it / pairs) * 2,
                              t1 = t0 + 1 < kt ? t0 + 1 : t0; /* an odd count: the last tile twice */
                    float *a00 = acc + ((long)q0 * kt + t0) * 256, *a01 = acc + ((long)q0 * kt + t1) * 256,
                          *a10 = acc + ((long)(q0 + 1) * kt + t0) * 256, *a11 = acc + ((long)(q0 + 1) * kt + t1) * 256;
                    _tile_loadd(0, a00, 64);
                    _tile_loadd(1, a01, 64);
                    _tile_loadd(2, a10, 64);
                    _tile_loadd(3, a11, 64);
                    for (long st = 0; st < ks; st++) {
                        _tile_loadd(4, xt + (st * kt + t0) * 512, 64);
                        _tile_loadd(5, xt + (st * kt + t1) * 512, 64);
                        const uint16_t *d0 = dt + (st * panels + q0) * 3 * 512, *d1 = d0 + 3 * 512;
                        for (int piece = 0; piece < 3; piece++) {
                            _tile_loadd(6, d0 + piece * 512, 64);
                            _tile_loadd(7, d1 + piece * 512, 64);
                            _tile_dpbf16ps(0, 6, 4);
                            _tile_dpbf16ps(1, 6, 5);
                            _tile_dpbf16ps(2, 7, 4);
                            _tile_dpbf16ps(3, 7, 5);
                        }
                        for (const long to = lines * ++iter / iters; done < to; done++) {
                            long at = done * 64;
                            int r = 0;
                            while (r < 2 && at >= nlen[r]) at -= nlen[r], r++;
                            if (at < nlen[r]) _mm_prefetch(nx[r] + at, _MM_HINT_T1);
                        }
                    }
                    _tile_stored(0, a00, 64);
                    _tile_stored(1, a01, 64);
                    _tile_stored(2, a10, 64);
                    _tile_stored(3, a11, 64);
                }
            }
        }
        if (u0 < u1) _tile_release();
    }
    /* the lanes' sums, in lane order, times scale / 255, to dw (cout, cin, k, k) and db */
    const float fs = scale * (1.0f / 255.0f);
    for (int q = 0; q < panels; q++)
        for (int t = 0; t < kt; t++)
            for (int n = 0; n < 16 && 16 * (t % rt) + n < k * C; n++) {
                const int ev = 16 * (t % rt) + n, kh = t / rt;
                for (int o = 0; o < 16; o++) {
                    float sum = 0;
                    for (int lane = 0; lane < AMX_LANES; lane++)
                        sum += c->acc[lane * lane_acc + ((long)q * kt + t) * 256 + o * 16 + n];
                    dw[(((size_t)(16 * q + o) * C + ev % C) * k + kh) * k + ev / C] = fs * sum;
                }
            }
    for (int o = 0; o < g->cout; o++) {
        float sum = 0;
        for (int lane = 0; lane < AMX_LANES; lane++) sum += lane_db[lane * g->cout + o];
        db[o] = sum;
    }
}

/* The weight gradient on AMX tiles (see above): its buffers made or grown first; -1 where
 * memory ran out (the caller takes the AVX-512 tiles). */
static int amx_wgrad(fl_conv_img_t *c, const unsigned char *u8, float scale, const float *dy, const float *relu_y,
                     float *dw, float *db) {
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
#else
    const int threads = 1;
#endif
    long ks, img_n, dyt_n;
    int rt, kt;
    amx_wshape(c, &ks, &rt, &kt);
    if (!c->acc && !(c->acc = aligned_alloc(64, (size_t)AMX_LANES * (c->g.cout / 16 * kt * 256 + c->g.cout) *
                                                    sizeof(float))))
        return -1;
    if (!c->xo && !(c->xo = malloc((size_t)ks * 64 * sizeof(long)))) return -1;
    if (threads > c->abuf_threads) {
        uint16_t *buf = aligned_alloc(64, (size_t)amx_wbuf(c, &img_n, &dyt_n) * threads * sizeof(uint16_t));
        if (!buf) return -1;
        free(c->abuf);
        c->abuf = buf, c->abuf_threads = threads;
    }
    amx_wgrad_run(c, u8, scale, dy, relu_y, dw, db);
    return 0;
}
#endif

void fl_conv_img_run(const fl_conv_img_t *c, const unsigned char *u8, const float *f, float scale, const float *wt,
                     const float *bias, float *y, int relu) {
#ifdef HAVE_AMX_VERSION
    if (c->amx && u8 && amx_run(c, u8, scale, wt, bias, y, relu) == 0) return;
#endif
#if defined(__x86_64__) && defined(__GNUC__)
    img_run(c, u8, f, scale, wt, bias, y, relu);
#else
    (void)c, (void)u8, (void)f, (void)scale, (void)wt, (void)bias, (void)y, (void)relu;
#endif
}
