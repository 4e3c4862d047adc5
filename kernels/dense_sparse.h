/* dense_sparse: a dense layer over inputs that are mostly zeros, for the oneDNN backend's
 * first layer (kernels/dnnl.c). MinAtar's observations are 0/1 planes with a few percent
 * of their values set (Breakout: at most 33 of 400), and an MLP's first layer over them
 * holds most of its arithmetic; its forward and weight gradient need only the inputs
 * that are not 0. The batch's nonzero inputs are listed row by row once per forward
 * (fl_sparse_rows); the forward then adds, per row, the weight rows of its listed inputs
 * to the bias, and the weight gradient sums, per input, its listed rows' output
 * gradients.
 *
 * Each output is one sum in a fixed order (the bias, then the listed inputs in input
 * order; a weight gradient over the rows in row order), so the results do not depend
 * on the thread count. They differ from a dense product's only by rounding: the terms
 * left out are exact zeros (x = 0 or -0; a NaN or an infinity is listed like any value
 * that is not 0, so it still reaches the outputs; an infinite weight times an input of 0,
 * NaN in a dense product, is skipped here).
 *
 * Work runs on the calling thread's OpenMP team (rows of the forward, inputs of the
 * weight gradient). With AVX-512 the sums run 128 outputs at a time in vector registers,
 * with AVX2 and FMA 64; elsewhere in plain C. */
#ifndef FL_KERNELS_DENSE_SPARSE_H
#define FL_KERNELS_DENSE_SPARSE_H

#include <stddef.h>

/* The nonzero inputs of x (B, in) row-major: for row r, entries start[r] .. start[r + 1]
 * - 1 of col (the input's index, increasing) and val (its value). start has B + 1
 * entries; col and val room for cap. Returns the number of entries, or -1 (start, col
 * and val then undefined) when there are more than cap: the caller's sign to take the
 * dense product instead. */
int fl_sparse_rows(const float *x, int B, int in, int cap, int *start, int *col, float *val);

/* fl_sparse_rows over the planar floats (B, C, hw) that uint8 images x (B, hw, C), as
 * environments give them, become with each value v as scale x (v x 1/255) (the float
 * rounding of the oneDNN backend's copy of them): the same entries, in the same order,
 * with the same values, made without the copy. tmp: the caller's scratch, hw x C ints.
 * Returns the number of entries, -1 when there are more than cap, or -2 where it does not
 * apply (scale not finite, C over 64, or hw x C of 2^24 or more): then the caller copies
 * and lists. */
int fl_sparse_rows_u8(const unsigned char *x, int B, int hw, int C, float scale, int cap, int *start, int *col,
                      float *val, int *tmp);

/* wt (in, out) row-major = the transpose of the layer's weights w (out, in): the rows the
 * forward adds. */
void fl_dense_sparse_weights(const float *w, float *wt, int in, int out);

/* y (B, out) row-major: y[r][o] = bias[o] + sum over row r's entries j of val[j] x
 * wt[col[j]][o]; relu != 0 applies max(0, .). */
void fl_dense_sparse_forward(const int *start, const int *col, const float *val, const float *wt, const float *bias,
                             float *y, int B, int out, int relu);

/* The weight and bias gradients of that layer for dy (B, out) row-major, the gradient of
 * its outputs (after relu's mask, where it has one): dw (out, in) row-major (the layer's
 * own layout, overwritten; inputs no row lists get 0) with dw[o][k] = sum over rows r
 * listing input k, in row order, of x[r][k] dy[r][o]; db (out) = sum over rows in order
 * of dy[r][o]. nnz is fl_sparse_rows' count; the column lists are made in cstart (in + 1
 * entries), crow and cval (nnz entries each), the caller's scratch. */
void fl_dense_sparse_wgrad(const int *start, const int *col, const float *val, int nnz, const float *dy, float *dw,
                           float *db, int B, int in, int out, int *cstart, int *crow, float *cval);

/* For tests: the most these kernels use of the CPU: 0 the plain-C versions, 1 AVX2 and
 * FMA, 2 (the default) AVX-512 too, each where the CPU has it (process-wide; not
 * thread-safe against calls running at the same time). */
void fl_dense_sparse_set_level(int level);

#endif
