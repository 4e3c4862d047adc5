/* dense_small: a dense layer's forward on a few rows, y = x W^T + bias (then relu), for
 * the oneDNN backend's small batches (kernels/dnnl.c): at batches of a few rows oneDNN's
 * inner product packs a large weight matrix at every call, where this reads it once per
 * block of 4 rows. Each output is one dot product in a fixed order, so the results do
 * not depend on the thread count. */
#ifndef FL_KERNELS_DENSE_SMALL_H
#define FL_KERNELS_DENSE_SMALL_H

#include <stddef.h>

/* Whether this CPU runs fl_dense_small_forward, and whether the oneDNN backend should
 * take it for such layers: where it has AVX2 and FMA but not AVX-512 (there oneDNN keeps
 * such weights in a blocked layout its AVX-512 kernels read without packing them). */
int fl_dense_small_preferred(void);
/* Whether this CPU runs fl_dense_small_forward at all (AVX2 and FMA, AVX-512 or not): the
 * oneDNN backend takes it for a dueling head on any such CPU, where oneDNN's product of a
 * few outputs costs more in its set-up than in its sums. */
int fl_dense_small_supported(void);

/* x (B, in) and y (B, out) row-major, w (out, in) row-major (the layer's own layout),
 * bias (out); relu != 0 applies max(0, .) to y. Runs on the calling thread's OpenMP team.
 * Only where fl_dense_small_supported() (AVX2 instructions; elsewhere it does nothing). */
void fl_dense_small_forward(const float *x, const float *w, const float *bias, float *y, int B, int in, int out,
                            int relu);

/* dense_thin: the forward of a dense layer with short rows (a few inputs, as an MLP's
 * first layer on a low-dimensional observation): each output is the bias plus the
 * inputs' products in input order, with the outputs along the vector lanes, in tiles of
 * up to 6 rows x 16 outputs. It reads the weights in panels of 16 outputs, wt (panels,
 * in, 16) with the last panel's missing outputs 0, fl_dense_thin_weights_size(in, out)
 * floats, which fl_dense_thin_weights makes from the layer's own (out, in). x, y, bias
 * and relu as in fl_dense_small_forward; parallel over tiles. Only where
 * fl_dense_small_preferred(). */
size_t fl_dense_thin_weights_size(int in, int out);
void fl_dense_thin_weights(const float *w, float *wt, int in, int out);
void fl_dense_thin_forward(const float *x, const float *wt, const float *bias, float *y, int B, int in, int out,
                           int relu);

#endif
