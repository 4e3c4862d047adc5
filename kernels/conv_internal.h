/* conv_internal: what the convolution kernels' files share (kernels/conv_fwd.h is the
 * interface): conv_fwd.c (the set-up, the weights' packing and the choice of path at run
 * time), conv_avx2.c (the AVX2 + FMA tiles), conv_avx512.c (the AVX-512 tiles and the
 * first convolution over images on them) and conv_amx.c (that convolution on AMX's
 * tiles). Not for use outside kernels/conv_*.c. */
#ifndef FL_KERNELS_CONV_INTERNAL_H
#define FL_KERNELS_CONV_INTERNAL_H

#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/conv_fwd.h"

/* The AVX2 and AVX-512 kernels are built where GCC's target attributes are (x86-64); the
 * AMX ones also need Linux, which grants the tile state (conv_fwd.c, amx_ready). */
#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_AVX2_VERSION 1
#endif
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#define HAVE_AMX_VERSION 1
#endif

#ifdef _OPENMP
#define PAR_FOR _Pragma("omp parallel for schedule(static)")
#else
#define PAR_FOR
#endif

struct fl_conv_fwd {
    fl_conv_fwd_geom_t g;
    int n; /* segments */
    long *off;
    int *len;
    long *xoff, *yoff; /* each output pixel's first input and first output, in floats */
    int panels_outer;  /* the weights outweigh the inputs: panel after panel */
    int wide;          /* the forward runs on AVX-512 (few input channels) */
    int np;            /* AVX-512, many input channels: panels per tile (4 or 2); 0: one */
    /* the inputs of a pixel in the order above, flattened (for packing the weights and
     * for their gradient) */
    long K;
    long *kofs;  /* input e of segment j: its offset past the pixel's first input */
    long *kidx;  /* its place in an output channel's weights (cin, k, k) */
    float *wacc; /* the gradient's tiles while they sum: (row tiles, panels, 6, 16) */
};

struct fl_conv_img {
    fl_conv_fwd_geom_t g;
    int np, R, tpr;              /* panels per tile, pixels per tile, tiles per output row */
    long rowlen, K;              /* floats of one converted input row; inputs per output */
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

/* Pixels per tile of the AVX-512 tiles over many input channels: 6 with 4 panels a tile,
 * 10 with 2 or 1. */
#define MULTI_ROWS(np) ((np) == 4 ? 6 : 10)

/* Pixels are taken in chunks of WGRAD_CHUNK: each chunk's inputs and output gradients
 * are read by every tile while they are in the core's cache (128 measured faster than 32,
 * 64 and whole images of 256 pixels or more on the Nature CNN at batch 512). Each thread
 * sums its own tiles over the chunks in order, so the sums do not depend on the thread
 * count. */
#define WGRAD_CHUNK 128

/* The calling thread's share [*t0, *t1) of n tiles, in its OpenMP team (all of them
 * outside one). */
static inline void team_share(long n, long *t0, long *t1) {
#ifdef _OPENMP
    const long th = omp_get_thread_num(), nth = omp_get_num_threads();
#else
    const long th = 0, nth = 1;
#endif
    *t0 = n * th / nth, *t1 = n * (th + 1) / nth;
}

/* The weight gradient's tiles (ni inputs x gw outputs each, tile t of input tile t /
 * groups and output group t % groups, in c->wacc) into dw (cout, cin, k, k). */
static inline void tiles_to_dw(const fl_conv_fwd_t *c, int ni, int gw, long groups, float *dw) {
    const long tiles = (c->K + ni - 1) / ni * groups;
    for (long t = 0; t < tiles; t++) {
        const long rt = t / groups, p = t % groups;
        const int nr = c->K - ni * rt < ni ? (int)(c->K - ni * rt) : ni;
        for (int r = 0; r < nr; r++)
            for (int o = 0; o < gw; o++)
                dw[(size_t)(gw * p + o) * c->K + c->kidx[ni * rt + r]] = c->wacc[(size_t)ni * gw * t + gw * r + o];
    }
}

/* Where each panel's 16 channels lie past a pixel's first output. */
static inline void panel_offsets(const fl_conv_fwd_geom_t *g, long *yc) {
    for (int p = 0; p < g->cout / 16; p++) yc[p] = 16L * p / g->out.blk * g->out.st[1] + 16L * p % g->out.blk;
}

/* Each instruction set's entry points, chosen by conv_fwd.c. */
#ifdef HAVE_AVX2_VERSION
/* conv_avx2.c: tiles of 6 pixels x 16 output channels, and the gradients on them */
void fl__conv_run_avx2(const fl_conv_fwd_t *c, const float *x, const float *wt, const float *bias, float *y, int relu);
void fl__conv_wgrad_avx2(const fl_conv_fwd_t *c, const float *x, const float *dy, float *dw, float *db);
/* conv_avx512.c: tiles of 8 pixels x 16 channels (few input channels), of 6 x 64 or 10 x
 * 32 (many: c->np), their gradients, and fl_conv_img on them */
void fl__conv_run_avx512(const fl_conv_fwd_t *c, const float *x, const float *wt, const float *bias, float *y,
                         int relu);
void fl__conv_run_multi(const fl_conv_fwd_t *c, const float *x, const float *wt, const float *bias, float *y, int relu);
void fl__conv_wgrad_avx512(const fl_conv_fwd_t *c, const float *x, const float *dy, float *dw, float *db);
void fl__conv_img_run_avx512(const fl_conv_img_t *c, const unsigned char *u8, const float *f, float scale,
                             const float *wt, const float *bias, float *y, int relu);
int fl__conv_img_wgrad_avx512(fl_conv_img_t *c, const unsigned char *u8, const float *f, float scale, const float *dy,
                              const float *relu_y, float *dw, float *db);
#endif
#ifdef HAVE_AMX_VERSION
/* conv_amx.c: fl_conv_img over uint8 images on AMX's tiles; -1 where memory ran out (the
 * caller takes the AVX-512 tiles) */
int fl__conv_amx_run(const fl_conv_img_t *c, const unsigned char *u8, float scale, const float *wt, const float *bias,
                     float *y, int relu);
int fl__conv_amx_wgrad(fl_conv_img_t *c, const unsigned char *u8, float scale, const float *dy, const float *relu_y,
                       float *dw, float *db);
#endif

#endif
