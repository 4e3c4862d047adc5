/* conv_fwd: a convolution's forward (no padding), and its parameter gradients, as
 * fleet's own AVX2 + FMA tiles, for the oneDNN backend on CPUs without AVX-512
 * (kernels/dnnl.c), where oneDNN's AVX2 convolutions leave a third of the core's FMA
 * throughput unused; and on CPUs with AVX-512, the forward of a convolution of at most
 * FL_CONV_FWD_WIDE_CIN input channels (a first layer over a few planes, as MinAtar's),
 * on AVX-512 tiles of 8 output pixels x 16 output channels, where oneDNN's kernels for
 * so few channels leave most of each vector idle, and of more input channels and a
 * multiple of 32 output channels on tiles of 6 pixels x 64 channels or 10 x 32 (24 or 20
 * of the 32 vector registers accumulating: 5-10% faster than oneDNN 2.6's forward on the
 * Nature CNN's second and third convolutions); fl_conv_img (below) also 16 output
 * channels, on tiles of 10 pixels x 16. Its input and output
 * are in whatever 4-D layout the oneDNN primitives around it chose (channels blocked
 * by 8 or 16, or channels last), so the backward and the layers after it are unchanged.
 *
 * The product is a matrix product with one row per output pixel: tiles of 6 output
 * pixels x 16 output channels, 12 accumulators started at the bias, one broadcast of
 * each pixel's input value and two loads of a weight panel's row per input value. The
 * input values of a pixel are read where they lie, in runs of channels contiguous in
 * the layout (along the kernel's width too where the stride is 1), so nothing is
 * copied. Each output is the bias plus the products in one fixed order, the same in
 * every tile, so a result does not depend on its neighbours or on the thread count. */
#ifndef FL_KERNELS_CONV_FWD_H
#define FL_KERNELS_CONV_FWD_H

#include <stddef.h>

/* Where element (n, c, h, w) of a 4-D tensor lies, in floats: n st[0] + (c / blk) st[1]
 * + h st[2] + w st[3] + c % blk. blk 1 is a plain layout (any order of dimensions). */
typedef struct fl_conv_layout {
    long st[4];
    long blk;
} fl_conv_layout_t;

typedef struct fl_conv_fwd_geom {
    int batch, cin, in_h, in_w;
    int cout, out_h, out_w;
    int k, stride; /* square kernel and stride; no padding */
    fl_conv_layout_t in, out;
} fl_conv_fwd_geom_t;

/* A convolution's forward set up for one geometry (its segments, see conv_fwd.c). NULL
 * where this geometry or CPU is not supported, or memory ran out: the caller takes
 * another path. Supported: fl_dense_small_preferred() (AVX2 + FMA, no AVX-512), or
 * AVX-512 with at most FL_CONV_FWD_WIDE_CIN input channels, or more and cout a multiple of
 * 32, and an output whose runs of 16 channels are contiguous (fl_conv_fwd_wide says
 * which); cout a
 * multiple of 16 up to 16 x FL_CONV_FWD_MAX_PANELS, out_h = (in_h - k) / stride + 1 and the same for the width, an
 * input whose channels come in contiguous runs (blocked, or plain with a channel stride of 1) and an output whose runs
 * of 8 channels are contiguous. */
typedef struct fl_conv_fwd fl_conv_fwd_t;
#define FL_CONV_FWD_MAX_PANELS 256
#define FL_CONV_FWD_WIDE_CIN 8
fl_conv_fwd_t *fl_conv_fwd_create(const fl_conv_fwd_geom_t *g);
/* on != 0: later creates take the AVX2 tiles on any CPU with AVX2 and FMA, AVX-512 too
 * (for tests: the AVX2 tiles are otherwise only reached on CPUs without AVX-512). */
void fl_conv_fwd_force_avx2(int on);
void fl_conv_fwd_destroy(fl_conv_fwd_t *c);

/* The weights as fl_conv_fwd_run reads them: fl_conv_fwd_weights_size(c) floats, made by
 * fl_conv_fwd_weights from the layer's own (cout, cin, k, k) (parallel over panels on the
 * calling thread's OpenMP team). */
size_t fl_conv_fwd_weights_size(const fl_conv_fwd_t *c);

/* 1 when c's forward runs on AVX-512 tiles, 0 on the AVX2 ones. */
int fl_conv_fwd_wide(const fl_conv_fwd_t *c);
/* 1 when fl_conv_fwd_wgrad runs c's parameter gradients: on the AVX2 tiles, or on the
 * AVX-512 ones for many input channels (6 inputs x 64 output channels, or 8 x 32); 0 for
 * the AVX-512 tiles of few input channels (their gradients stay oneDNN's). */
int fl_conv_fwd_has_wgrad(const fl_conv_fwd_t *c);
void fl_conv_fwd_weights(const fl_conv_fwd_t *c, const float *w, float *wt);

/* y = conv(x, w) + bias, then max(0, .) where relu != 0, with x and y in the geometry's
 * layouts. Parallel over tiles on the calling thread's OpenMP team. */
void fl_conv_fwd_run(const fl_conv_fwd_t *c, const float *x, const float *wt, const float *bias, float *y, int relu);

/* The same convolution's parameter gradients for the output gradient dy (in the output's
 * layout) and the input x it ran on: dw (cout, cin, k, k) and db (cout), overwritten
 * (where fl_conv_fwd_has_wgrad). The same tiles with the roles turned: 6 of a pixel's
 * inputs x 16 output channels (AVX2), 6 x 64 or 8 x 32 (AVX-512), summed over the pixels
 * in order, each tile on one thread of the calling thread's OpenMP team, so the sums do
 * not depend on the thread count. Not thread-safe on one c (it sums in c's own buffer). */
void fl_conv_fwd_wgrad(const fl_conv_fwd_t *c, const float *x, const float *dy, float *dw, float *db);

/* A first convolution over images as the observations come, (B, H, W, C) (uint8 x
 * 1/255, or float), each times a scale: no copy of the observations into another layout.
 * (Over uint8 images, its forward runs on AMX's tiles where it can: fl_conv_img_amx.)
 * AVX-512 only; cout 16 or a multiple of 32 up to 16 x FL_CONV_FWD_MAX_PANELS, a kernel of at
 * most FL_CONV_IMG_MAX_K, no padding, and
 * a tile's input rows (up to 10 output pixels' worth) within FL_CONV_IMG_BUF floats. A
 * tile converts the input rows its pixels read into a buffer on its thread's stack and
 * runs the AVX-512 tiles of fl_conv_fwd over it, each output the bias plus the products
 * in the order (kernel row, kernel column, channel). g->in is not read; g->out is the
 * output's layout. NULL where not supported (the caller takes another path). */
typedef struct fl_conv_img fl_conv_img_t;
#define FL_CONV_IMG_BUF 4096
#define FL_CONV_IMG_MAX_K 64
fl_conv_img_t *fl_conv_img_create(const fl_conv_fwd_geom_t *g);
void fl_conv_img_destroy(fl_conv_img_t *c);
size_t fl_conv_img_weights_size(const fl_conv_img_t *c);
/* 1 where c's forward and weight gradient over uint8 images run on AMX's bf16 tiles
 * (x86-64 Linux, a CPU with AMX-BF16): each weight (forward) or output gradient (weight
 * gradient) cut into three bf16 pieces that sum to it exactly, each image value exact in
 * bf16, so every product is exact and the tiles sum them in fp32 (in their own order;
 * the scale applied to each sum). Float images, or a failed allocation, run the AVX-512
 * tiles. The packed weights (fl_conv_img_weights) are read fastest 64-byte aligned. */
int fl_conv_img_amx(const fl_conv_img_t *c);
/* 1 where convolutions created now would use AMX (the CPU, Linux and the switches below
 * allowing). */
int fl_conv_img_amx_available(void);
/* off != 0: convolutions created from now on do not use AMX (as FLEET_AMX=0 in the
 * environment); 0: they do where they can. */
void fl_conv_img_disable_amx(int off);
/* The layer's weights (cout, cin, k, k) packed as fl_conv_img_run reads them (wt best
 * 64-byte aligned). */
void fl_conv_img_weights(const fl_conv_img_t *c, const float *w, float *wt);
/* y = conv(scale x, w) + bias (then max(0, .) where relu != 0) for the g->batch images x:
 * u8 when not NULL, else f. Parallel over tiles on the calling thread's OpenMP team. */
void fl_conv_img_run(const fl_conv_img_t *c, const unsigned char *u8, const float *f, float scale, const float *wt,
                     const float *bias, float *y, int relu);
/* The same convolution's parameter gradients for the output gradient dy (in g->out's
 * layout) over the images it ran on (u8 or f, and scale, as fl_conv_img_run took them):
 * dw (cout, cin, k, k) and db (cout), overwritten. With relu_y (the forward's outputs,
 * relu fused, in the same layout) not NULL, the gradient is relu's backward of dy first:
 * dy where relu_y > 0, else 0 (dy is only read). Each thread converts each image as the
 * forward does into a buffer of its own (kept in c, grown with the thread count) and
 * runs fl_conv_fwd_wgrad's AVX-512 tiles (6 inputs x 64 outputs or 8 x 32) over that
 * image's pixels; each tile is summed on one thread in pixel order, so the sums do not
 * depend on the thread count. Over uint8 images where fl_conv_img_amx, AMX's tiles
 * instead: 16 outputs x 16 inputs a tile, summed over each image's pixels 32 at a time,
 * each tile on one thread over every pixel in order (the same bits at any thread count).
 * The first call makes the tables and buffers it needs (a forward-only c never has
 * them). 0, or -1 where memory ran out. Not thread-safe on one c. */
int fl_conv_img_wgrad(fl_conv_img_t *c, const unsigned char *u8, const float *f, float scale, const float *dy,
                      const float *relu_y, float *dw, float *db);

#endif
