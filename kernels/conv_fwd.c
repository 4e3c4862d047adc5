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
 * core's cache for all the tiles.
 *
 * This file sets a convolution up, packs its weights for each path and chooses the path
 * at run time (the CPU, as __builtin_cpu_supports and cpuid say, and the geometry); each
 * instruction set's kernels are in a file of their own: conv_avx2.c (AVX2 + FMA),
 * conv_avx512.c (AVX-512, fl_conv_img's too) and conv_amx.c (fl_conv_img on AMX's tiles),
 * sharing conv_internal.h. */
#include "kernels/conv_fwd.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_internal.h"
#include "kernels/dense_small.h"

#ifdef HAVE_AMX_VERSION
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

void fl_conv_fwd_force_avx2(int on) {
    g_force_avx2 = on;
}

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
    c->wacc =
        malloc((size_t)(c->K + 16) * g->cout * sizeof *c->wacc); /* tiles of 6, 8 or 16 inputs, the last partial */
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

int fl_conv_fwd_wide(const fl_conv_fwd_t *c) {
    return c->wide;
}

int fl_conv_fwd_has_wgrad(const fl_conv_fwd_t *c) {
    return !c->wide || c->np;
}

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

void fl_conv_fwd_wgrad(const fl_conv_fwd_t *c, const float *x, const float *dy, float *dw, float *db) {
#ifdef HAVE_AVX2_VERSION
    if (c->np)
        fl__conv_wgrad_avx512(c, x, dy, dw, db);
    else
        fl__conv_wgrad_avx2(c, x, dy, dw, db);
#else
    (void)c, (void)x, (void)dy, (void)dw, (void)db;
#endif
}

void fl_conv_fwd_run(const fl_conv_fwd_t *c, const float *x, const float *wt, const float *bias, float *y, int relu) {
#ifdef HAVE_AVX2_VERSION
    if (c->np)
        fl__conv_run_multi(c, x, wt, bias, y, relu);
    else if (c->wide)
        fl__conv_run_avx512(c, x, wt, bias, y, relu);
    else
        fl__conv_run_avx2(c, x, wt, bias, y, relu);
#else
    (void)c, (void)x, (void)wt, (void)bias, (void)y, (void)relu;
#endif
}

/* ---- fl_conv_img ---- */

/* AMX (conv_amx.c): the first convolution over uint8 images on the bf16 tile unit, with
 * fp32's accuracy. An image's values (0 to 255) are exact in bf16; each weight w is cut
 * into three bf16 pieces (its 24 significant bits, 8 at a time: w = hi + mid + lo
 * exactly), so each product value x piece is exact in fp32, and the tile unit sums them
 * in fp32: the products of fp32's x * w, the sum as fp32 sums it (in another order). */
static int g_amx_off;

void fl_conv_img_disable_amx(int off) {
    g_amx_off = off;
}

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

fl_conv_img_t *fl_conv_img_create(const fl_conv_fwd_geom_t *g) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (!__builtin_cpu_supports("avx512f")) return NULL;
#else
    return NULL;
#endif
    if (g->batch < 1 || g->cin < 1 || g->k < 1 || g->k > FL_CONV_IMG_MAX_K || g->stride < 1 ||
        (g->cout % 32 && g->cout != 16) || g->cout < 16 || g->cout > 16 * FL_CONV_FWD_MAX_PANELS || g->in_h < g->k ||
        g->in_w < g->k || g->out_h != (g->in_h - g->k) / g->stride + 1 || g->out_w != (g->in_w - g->k) / g->stride + 1)
        return NULL;
    const fl_conv_layout_t *o = &g->out;
    if (!(o->blk % 16 == 0 || (o->blk == 1 && o->st[1] == 1))) return NULL;
    const int np = g->cout % 64 == 0   ? 4
                   : g->cout % 32 == 0 ? 2
                                       : 1,
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

int fl_conv_img_amx(const fl_conv_img_t *c) {
    return c->amx;
}

int fl_conv_img_amx_available(void) {
    return amx_ready();
}

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

size_t fl_conv_img_weights_size(const fl_conv_img_t *c) {
    return (size_t)c->g.cout * c->K + amx_pack_floats(c);
}

/* The AMX tiles' weights (see amx_pack_floats): weight w of output o, kernel row kh,
 * value e of that row (kernel column e / cin, channel e % cin) in its three pieces, each
 * the top 8 significant bits of what the ones before left (so the last is exact); 0 past
 * the row's k x cin values. */
static void amx_weights(const fl_conv_img_t *c, const float *w, float *pack) {
    const int k = c->g.k, C = c->g.cin, kc = k * C, steps = k * c->aks;
    uint16_t *t = (uint16_t *)pack;
    PAR_FOR for (int o16 = 0; o16 < c->g.cout / 16; o16++) for (int st = 0; st < steps; st++) {
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

int fl_conv_img_wgrad(fl_conv_img_t *c, const unsigned char *u8, const float *f, float scale, const float *dy,
                      const float *relu_y, float *dw, float *db) {
#ifdef HAVE_AMX_VERSION
    if (c->amx && u8 && fl__conv_amx_wgrad(c, u8, scale, dy, relu_y, dw, db) == 0) return 0;
#endif
#ifdef HAVE_AVX2_VERSION
    return fl__conv_img_wgrad_avx512(c, u8, f, scale, dy, relu_y, dw, db);
#else
    (void)c, (void)u8, (void)f, (void)scale, (void)dy, (void)relu_y, (void)dw, (void)db;
    return -1;
#endif
}

void fl_conv_img_run(const fl_conv_img_t *c, const unsigned char *u8, const float *f, float scale, const float *wt,
                     const float *bias, float *y, int relu) {
#ifdef HAVE_AMX_VERSION
    if (c->amx && u8 && fl__conv_amx_run(c, u8, scale, wt, bias, y, relu) == 0) return;
#endif
#ifdef HAVE_AVX2_VERSION
    fl__conv_img_run_avx512(c, u8, f, scale, wt, bias, y, relu);
#else
    (void)c, (void)u8, (void)f, (void)scale, (void)wt, (void)bias, (void)y, (void)relu;
#endif
}
