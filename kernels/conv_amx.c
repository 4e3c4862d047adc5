/* conv_amx: the first convolution over uint8 images (fl_conv_img, see conv_fwd.h) on
 * AMX's tile unit, its forward and its weight and bias gradients, with fp32's accuracy:
 * an image's values (0 to 255) are exact in bf16, and each weight (forward) or output
 * gradient (weight gradient) is cut into three bf16 pieces that sum to it exactly, so
 * each product is exact and the tiles sum them in fp32 (in their own order). Taken on
 * x86-64 Linux with AMX-TILE, AMX-BF16 and AVX-512 BW and BF16, the tile state granted,
 * and FLEET_AMX not 0 (conv_fwd.c, amx_ready), for a multiple of 32 output channels;
 * float images, 16 output channels and a failed allocation take the AVX-512 tiles
 * (conv_avx512.c). The weights' three pieces are packed by conv_fwd.c (amx_weights).
 *
 * Reference op: the reference backend's fl_conv2d_forward and fl_conv2d_backward
 * (kernels/ops.c, im2col + OpenBLAS's sgemm); in the oneDNN backend it replaces the
 * space-to-depth copy of the observations and oneDNN's convolution primitives for that
 * layer (kernels/dnnl_fwd.c, fwd_conv), and stands beside the AVX-512 fl_conv_img, whose
 * results it matches to a few fp32 roundings (not bit for bit).
 *
 * Tests: tests/test_kernels_dnnl.c, test_image_conv (against sums in double with AMX and
 * without, each image alone giving its bits in the batch, 1 thread those of 2, and every
 * product exact: a lost weight piece would be off by 2^-17, image_conv_exact) and
 * test_forward_obs (networks over uint8 observations close to the float path with AMX on,
 * their plans saying that the forward and the weight gradient ran on AMX).
 *
 * Measured gain (Intel Xeon with AMX, 2 cores, 2026-11-28; docs/benchmarks-log.md, "The
 * first convolution on AMX's tiles"): its forward 3.2 -> 1.12-1.16 ms (the Nature CNN's
 * first convolution at batch 64, one thread, against the AVX-512 tiles), its weight
 * gradient 18.5 -> 9.3-9.6 ms (batch 512, two threads); the Nature CNN's update at batch
 * 512 at 67.7% and 70.8% of the FMA peak against 60.2% and 56.5%. */
#include "kernels/conv_internal.h"

#ifdef HAVE_AMX_VERSION
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

/* ---- the forward on AMX tiles ---- */

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
__attribute__((target("avx512f,amx-tile,amx-bf16"))) int fl__conv_amx_run(const fl_conv_img_t *c,
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
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                         5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
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
int fl__conv_amx_wgrad(fl_conv_img_t *c, const unsigned char *u8, float scale, const float *dy, const float *relu_y,
                       float *dw, float *db) {
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
#else
    const int threads = 1;
#endif
    long ks, img_n, dyt_n;
    int rt, kt;
    amx_wshape(c, &ks, &rt, &kt);
    if (!c->acc &&
        !(c->acc = aligned_alloc(64, (size_t)AMX_LANES * (c->g.cout / 16 * kt * 256 + c->g.cout) * sizeof(float))))
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
