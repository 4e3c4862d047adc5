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

#include <stdlib.h>
#include <string.h>

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
    /* the inputs of a pixel in the order above, flattened (for packing the weights and
     * for their gradient) */
    long K;
    long *kofs;   /* input e of segment j: its offset past the pixel's first input */
    long *kidx;   /* its place in an output channel's weights (cin, k, k) */
    float *wacc;  /* the gradient's tiles while they sum: (row tiles, panels, 6, 16) */
    /* the input gradient (0 dpanels where not supported): the output gradient's channels
     * in dn runs (doff, dlen), and where column 8 h of panel q (kernel row, kernel column,
     * 16 input channels) lies past a pixel's first input: dcol[2 q + h] */
    int dpanels, dn, dgroup;
    long *doff, *dcol;
    int *dlen;
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

static int supported(const fl_conv_fwd_geom_t *g) {
    if (!fl_dense_small_preferred()) return 0;
    if (g->batch < 1 || g->cin < 1 || g->k < 1 || g->stride < 1 || g->cout < 16 || g->cout % 16 ||
        g->cout > 16 * FL_CONV_FWD_MAX_PANELS)
        return 0;
    if (g->in_h < g->k || g->in_w < g->k || g->out_h != (g->in_h - g->k) / g->stride + 1 ||
        g->out_w != (g->in_w - g->k) / g->stride + 1)
        return 0;
    const fl_conv_layout_t *o = &g->out;
    return (o->blk >= 8 && o->blk % 8 == 0) || (o->blk == 1 && o->st[1] == 1);
}

/* The input gradient's tiles: input channels in whole runs of 16 (a multiple of 16, in
 * blocks of 8 or 16 or channels last), each image one contiguous span of the input (so
 * that it is zeroed at once), and the output gradient's channels in whole blocks. */
static int dgrad_supported(const fl_conv_fwd_geom_t *g) {
    const fl_conv_layout_t *i = &g->in, *o = &g->out;
    if (g->cin % 16 || !((i->blk == 1 && i->st[1] == 1) || (i->blk % 8 == 0 && g->cin % i->blk == 0))) return 0;
    if ((o->blk > 1 && g->cout % o->blk) || g->cout > FL_CONV_FWD_DGRAD_MAX_COUT) return 0;
    const long span = (g->cin / i->blk - 1) * i->st[1] + (g->in_h - 1) * i->st[2] + (g->in_w - 1) * i->st[3] + i->blk;
    return i->st[0] == (long)g->cin * g->in_h * g->in_w && span == i->st[0];
}

static int dgrad_setup(fl_conv_fwd_t *c) {
    const fl_conv_fwd_geom_t *g = &c->g;
    const fl_conv_layout_t *I = &g->in, *O = &g->out;
    const int runs = O->blk > 1 ? g->cout / (int)O->blk : 1, cb = g->cin / 16;
    c->dpanels = g->k * g->k * cb;
    c->doff = malloc((size_t)runs * sizeof *c->doff);
    c->dlen = malloc((size_t)runs * sizeof *c->dlen);
    c->dcol = malloc((size_t)2 * c->dpanels * sizeof *c->dcol);
    if (!c->doff || !c->dlen || !c->dcol) return 0;
    for (c->dn = 0; c->dn < runs; c->dn++) {
        c->doff[c->dn] = c->dn * O->st[1];
        c->dlen[c->dn] = runs > 1 ? (int)O->blk : g->cout;
    }
    /* Images in groups of up to 6 whose pixels fill the tiles best (the Nature CNN's 9 x 9
     * pixels in twos, its 7 x 7 in sixes), at least 16 groups to share out. */
    const long hw = (long)g->out_h * g->out_w;
    long best = -1;
    for (int G = 1; G <= 6 && (G == 1 || g->batch / G >= 16); G++) {
        const long waste = ((G * hw + 5) / 6 * 6 - G * hw) * 6 / G; /* short tiles' rows, per 6 images */
        if (best < 0 || waste < best) best = waste, c->dgroup = G;
    }
    for (int q = 0; q < c->dpanels; q++) {
        const int kh = q / cb / g->k, kw = q / cb % g->k;
        for (int h = 0; h < 2; h++) {
            const long ch = 16L * (q % cb) + 8 * h;
            c->dcol[2 * q + h] = kh * I->st[2] + kw * I->st[3] + ch / I->blk * I->st[1] + ch % I->blk;
        }
    }
    return 1;
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
    c->off = malloc(max * sizeof *c->off);
    c->len = malloc(max * sizeof *c->len);
    const long hw = (long)g->out_h * g->out_w, M = g->batch * hw;
    c->xoff = malloc((size_t)M * sizeof *c->xoff);
    c->yoff = malloc((size_t)M * sizeof *c->yoff);
    c->K = (long)g->cin * g->k * g->k;
    c->kofs = malloc((size_t)c->K * sizeof *c->kofs);
    c->kidx = malloc((size_t)c->K * sizeof *c->kidx);
    c->wacc = malloc((size_t)(c->K + 5) / 6 * 6 * g->cout * sizeof *c->wacc);
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
    if (dgrad_supported(g) && !dgrad_setup(c)) {
        fl_conv_fwd_destroy(c);
        return NULL;
    }
    return c;
}

void fl_conv_fwd_destroy(fl_conv_fwd_t *c) {
    if (!c) return;
    free(c->off), free(c->len);
    free(c->xoff), free(c->yoff), free(c->kofs), free(c->kidx), free(c->wacc);
    free(c->doff), free(c->dlen), free(c->dcol);
    free(c);
}

size_t fl_conv_fwd_weights_size(const fl_conv_fwd_t *c) {
    return (size_t)c->g.cout * c->g.cin * c->g.k * c->g.k;
}

void fl_conv_fwd_weights(const fl_conv_fwd_t *c, const float *w, float *wt) {
    const long K = c->K;
    PAR_FOR for (int p = 0; p < c->g.cout / 16; p++) {
        float *panel = wt + (size_t)p * 16 * K;
        for (long i = 0; i < K; i++)
            for (int o = 0; o < 16; o++) panel[16 * i + o] = w[(size_t)(16 * p + o) * K + c->kidx[i]];
    }
}

int fl_conv_fwd_dgrad_supported(const fl_conv_fwd_t *c) { return c->dpanels > 0; }

void fl_conv_fwd_dweights(const fl_conv_fwd_t *c, const float *w, float *wt) {
    const int cb = c->g.cin / 16, k = c->g.k, cout = c->g.cout;
    const long K = c->K;
    PAR_FOR for (int q = 0; q < c->dpanels; q++) {
        float *panel = wt + (size_t)q * 16 * cout;
        const int kh = q / cb / k, kw = q / cb % k;
        for (int o = 0; o < cout; o++)
            for (int i = 0; i < 16; i++)
                panel[16 * o + i] = w[(size_t)o * K + ((long)(16 * (q % cb) + i) * k + kh) * k + kw];
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

/* One tile: 6 rows (xr: each row's first input) x the 16 columns of one weight panel
 * (wp), over the nseg segments (off, len) of a row's inputs, into the 16 values at yr[r]
 * + yc0 (columns 0-7) and yr[r] + yc1 (8-15) of each of the first nr rows (the rest
 * repeat the last one and are not stored). mode TILE_STORE: the sums start at init (the
 * bias) and are stored, through max(0, .) where relu; TILE_ADD: they start at 0 and are
 * added to what is there. Inlined into each caller with its mode constant. */
enum { TILE_STORE, TILE_ADD };

static inline __attribute__((always_inline, target("avx2,fma"))) void
tile_avx2(const float *const xr[6], int nseg, const long *offs, const int *lens, const float *wp, float *const yr[6],
          int nr, long yc0, long yc1, int mode, const float *init, int relu) {
    __m256 a00 = _mm256_setzero_ps(), a01 = a00;
    if (mode == TILE_STORE) a00 = _mm256_loadu_ps(init), a01 = _mm256_loadu_ps(init + 8);
    __m256 a10 = a00, a11 = a01, a20 = a00, a21 = a01, a30 = a00, a31 = a01, a40 = a00, a41 = a01, a50 = a00,
           a51 = a01;
    for (int j = 0; j < nseg; j++) {
        const long off = offs[j];
        const float *p0 = xr[0] + off, *p1 = xr[1] + off, *p2 = xr[2] + off, *p3 = xr[3] + off, *p4 = xr[4] + off,
                    *p5 = xr[5] + off;
        const int len = lens[j];
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
    for (int r = 0; r < nr; r++) {
        __m256 v0 = acc[r][0], v1 = acc[r][1];
        float *y0 = yr[r] + yc0, *y1 = yr[r] + yc1;
        if (mode == TILE_ADD) {
            v0 = _mm256_add_ps(_mm256_loadu_ps(y0), v0), v1 = _mm256_add_ps(_mm256_loadu_ps(y1), v1);
        } else if (relu) {
            v0 = _mm256_max_ps(v0, zero), v1 = _mm256_max_ps(v1, zero);
        }
        _mm256_storeu_ps(y0, v0);
        _mm256_storeu_ps(y1, v1);
    }
}

/* The forward's tile: output pixels m0.. (nr of them) x the 16 output channels of one
 * panel. */
__attribute__((target("avx2,fma"))) static void fwd_tile_avx2(const fl_conv_fwd_t *c, long m0, int nr, const float *x,
                                                              const float *wp, const float *bias, float *y, long yc0,
                                                              long yc1, int relu) {
    const float *xr[6];
    float *yr[6];
    for (int r = 0; r < 6; r++) {
        const long m = m0 + (r < nr ? r : nr - 1);
        xr[r] = x + c->xoff[m], yr[r] = y + c->yoff[m];
    }
    tile_avx2(xr, c->n, c->off, c->len, wp, yr, nr, yc0, yc1, TILE_STORE, bias, relu);
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
            fwd_tile_avx2(c, 6 * t, nr, x, wt + (size_t)p * 16 * K, bias + 16 * p, y, yc[2 * p], yc[2 * p + 1], relu);
        }
        return;
    }
    PAR_FOR for (long t = 0; t < tiles; t++) {
        const int nr = M - 6 * t < 6 ? (int)(M - 6 * t) : 6;
        for (int p = 0; p < panels; p++)
            fwd_tile_avx2(c, 6 * t, nr, x, wt + (size_t)p * 16 * K, bias + 16 * p, y, yc[2 * p], yc[2 * p + 1], relu);
    }
}

/* The input gradient, a product with one row per output pixel again: the pixel's output
 * gradient (cout values) times the transposed weights, one column per input it read
 * (kernel row, kernel column, input channel), each added where that input lies. The
 * images go in fixed groups of dgroup (chosen by the batch alone) to the threads, and a
 * group's tiles (6 of its pixels, the last one short) run in order over every panel, so
 * each input's gradient sums the same terms in the same order whatever the thread count. */
__attribute__((target("avx2,fma"))) static void dgrad_avx2(const fl_conv_fwd_t *c, const float *dy, const float *wt,
                                                           float *dx) {
    const fl_conv_fwd_geom_t *g = &c->g;
    const long hw = (long)g->out_h * g->out_w, img = g->in.st[0], G = c->dgroup;
    const long groups = (g->batch + G - 1) / G, zero = 0;
    const int cout = g->cout;
    PAR_FOR for (long gi = 0; gi < groups; gi++) {
        const long n0 = gi * G, nimg = g->batch - n0 < G ? g->batch - n0 : G, M = nimg * hw;
        memset(dx + n0 * img, 0, (size_t)(nimg * img) * sizeof *dx);
        for (long t = 0; 6 * t < M; t++) {
            const long m0 = n0 * hw + 6 * t;
            const int nr = M - 6 * t < 6 ? (int)(M - 6 * t) : 6;
            float rows[6 * FL_CONV_FWD_DGRAD_MAX_COUT]; /* the tile's output gradients, one run each */
            const float *dr[6];
            float *xr[6];
            for (int r = 0; r < 6; r++) {
                const long m = m0 + (r < nr ? r : nr - 1);
                dr[r] = rows + r * cout, xr[r] = dx + c->xoff[m];
                for (int j = 0, at = 0; j < c->dn; at += c->dlen[j++])
                    memcpy(rows + r * cout + at, dy + c->yoff[m] + c->doff[j], (size_t)c->dlen[j] * sizeof *rows);
            }
            for (int q = 0; q < c->dpanels; q++)
                tile_avx2(dr, 1, &zero, &cout, wt + (size_t)q * 16 * cout, xr, nr, c->dcol[2 * q], c->dcol[2 * q + 1],
                          TILE_ADD, NULL, 0);
        }
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
#ifdef _OPENMP
        const long th = omp_get_thread_num(), nth = omp_get_num_threads();
#else
        const long th = 0, nth = 1;
#endif
        const long t0 = tiles * th / nth, t1 = tiles * (th + 1) / nth;
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
    for (long t = 0; t < tiles; t++) { /* the tiles into (cout, cin, k, k) */
        const long rt = t / panels;
        const int p = (int)(t % panels), nr = c->K - 6 * rt < 6 ? (int)(c->K - 6 * rt) : 6;
        for (int r = 0; r < nr; r++)
            for (int o = 0; o < 16; o++)
                dw[(size_t)(16 * p + o) * c->K + c->kidx[6 * rt + r]] = c->wacc[96 * t + 16 * r + o];
    }
}
#define HAVE_AVX2_VERSION 1
#endif

void fl_conv_fwd_wgrad(const fl_conv_fwd_t *c, const float *x, const float *dy, float *dw, float *db) {
#ifdef HAVE_AVX2_VERSION
    wgrad_avx2(c, x, dy, dw, db);
#else
    (void)c, (void)x, (void)dy, (void)dw, (void)db;
#endif
}

void fl_conv_fwd_dgrad(const fl_conv_fwd_t *c, const float *dy, const float *wt, float *dx) {
#ifdef HAVE_AVX2_VERSION
    dgrad_avx2(c, dy, wt, dx);
#else
    (void)c, (void)dy, (void)wt, (void)dx;
#endif
}

void fl_conv_fwd_run(const fl_conv_fwd_t *c, const float *x, const float *wt, const float *bias, float *y, int relu) {
#ifdef HAVE_AVX2_VERSION
    run_avx2(c, x, wt, bias, y, relu);
#else
    (void)c, (void)x, (void)wt, (void)bias, (void)y, (void)relu;
#endif
}
