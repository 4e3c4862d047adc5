/* ops: the CPU reference layer ops of the Q-network, forward and backward.
 *
 * Plain functions over caller-owned float32 buffers, row-major, batch first. Matrix
 * products go through cblas_sgemm/sgemv (OpenBLAS); everything else is plain C. Weights
 * use PyTorch's Linear layout, W (out, in), so a network's parameters load unchanged in
 * PyTorch. Nothing here allocates, keeps state or touches BLAS settings (thread counts
 * are the caller's business).
 *
 * Backward functions take `accumulate`: 0 overwrites dx/dw/db, 1 adds into them (the
 * dueling head and gradient accumulation use this). Any gradient output may be NULL
 * when it is not wanted (e.g. dx of the first layer).
 *
 * Preconditions (asserted, never data-dependent): sizes >= 1, non-NULL inputs.
 * Thread-safe: yes, as long as concurrent calls do not share output buffers. */
#ifndef FL_KERNELS_OPS_H
#define FL_KERNELS_OPS_H

#include <stddef.h>

/* Each parameter on its line with its shape: */
/* clang-format off */

/* ---- dense: y = x W^T + b ------------------------------------------------------------ */

void fl_dense_forward(const float *x, /* (B, in) */
                      const float *w, /* (out, in) */
                      const float *b, /* (out) or NULL for no bias */
                      int B, int in, int out,
                      float *y); /* (B, out) */

/* dx = dy W, dw = dy^T x, db = sum_b dy. */
void fl_dense_backward(const float *x,  /* (B, in) input of the forward */
                       const float *w,  /* (out, in) */
                       const float *dy, /* (B, out) */
                       int B, int in, int out,
                       float *dx, /* (B, in) or NULL */
                       float *dw, /* (out, in) or NULL */
                       float *db, /* (out) or NULL */
                       int accumulate);

/* ---- relu: y = max(x, 0) (NaN propagates); y == x (in place) or no overlap ------------- */

void fl_relu_forward(const float *x, float *y, size_t n);
/* dx = dy where y > 0, else 0. Uses the forward's output, so in-place forward is fine;
 * dx == dy (in place) or no overlap. */
void fl_relu_backward(const float *y, const float *dy, float *dx, size_t n);

/* ---- dueling head --------------------------------------------------------------------
 * From features h (B, H): value V = h wv^T + bv (one output) and advantages
 * A = h Wa^T + ba (num_actions outputs), Q = V + A - mean_a(A).
 * The two streams are stored stacked so that they run as one GEMM:
 *   w (1 + A, H): row 0 is the value stream's weight, rows 1..A the advantage stream's;
 *   b (1 + A):    b[0] is the value bias, b[1..A] the advantage biases.
 * va (B, 1 + A) receives the stream outputs [V, A_1..A_A] per sample (scratch the caller
 * owns; useful for logging V). */
void fl_dueling_forward(const float *h, /* (B, H) */
                        const float *w, /* (1 + A, H) */
                        const float *b, /* (1 + A) */
                        int B, int H, int A,
                        float *va, /* (B, 1 + A) scratch, out: [V, A] */
                        float *q); /* (B, A) */

/* The combine step alone: q = V + A - mean(A) from va (B, 1 + A). */
void fl_dueling_combine_forward(const float *va, int B, int A, float *q);
/* Its backward: dva[:,0] = sum_a dq, dva[:,1+a] = dq_a - mean_a(dq). Overwrites dva. */
void fl_dueling_combine_backward(const float *dq, int B, int A, float *dva);

void fl_dueling_backward(const float *h,  /* (B, H) */
                         const float *w,  /* (1 + A, H) */
                         const float *dq, /* (B, A) */
                         int B, int H, int A,
                         float *dva, /* (B, 1 + A) scratch */
                         float *dh,  /* (B, H) or NULL */
                         float *dw,  /* (1 + A, H) or NULL */
                         float *db,  /* (1 + A) or NULL */
                         int accumulate);

/* ---- conv2d (NCHW): y = W * x + b, cross-correlation as PyTorch's Conv2d ----------------
 * Per sample, x (Cin, H, W) and y (Cout, Ho, Wo) with Ho = (H + 2P - K) / S + 1 (and Wo
 * likewise); weights w (Cout, Cin, K, K), bias b (Cout). Zero padding P on every side.
 * Samples go through in chunks (up to 16 MiB of im2col matrix): one GEMM per chunk over
 * the chunk's im2col columns side by side. The caller provides the scratch:
 * fl_conv2d_col_floats(s, B) floats for batches of up to B. */
typedef struct fl_conv2d_shape {
    int cin, h, w;   /* input */
    int cout, k, stride, pad;
    int ho, wo;      /* output, from fl_conv2d_shape_init */
} fl_conv2d_shape_t;

/* Fills ho, wo; 0, or -1 when the kernel does not fit the padded input or a size is < 1. */
int fl_conv2d_shape_init(fl_conv2d_shape_t *s);
size_t fl_conv2d_col_floats(const fl_conv2d_shape_t *s, int max_batch);

void fl_conv2d_forward(const fl_conv2d_shape_t *s,
                       const float *x, /* (B, Cin, H, W) */
                       const float *w, /* (Cout, Cin, K, K) */
                       const float *b, /* (Cout) or NULL */
                       int B,
                       float *scratch, /* fl_conv2d_col_floats(s, >= B) */
                       float *y);      /* (B, Cout, Ho, Wo) */

/* dw = sum_b dy_b col_b^T, db = sum over b, y, x of dy, dx = col2im(W^T dy_b); the
 * im2col columns are recomputed from x in the scratch. */
void fl_conv2d_backward(const fl_conv2d_shape_t *s,
                        const float *x,  /* (B, Cin, H, W) input of the forward */
                        const float *w,  /* (Cout, Cin, K, K) */
                        const float *dy, /* (B, Cout, Ho, Wo) */
                        int B,
                        float *scratch, /* fl_conv2d_col_floats(s, >= B) */
                        float *dx,  /* (B, Cin, H, W) or NULL */
                        float *dw,  /* (Cout, Cin, K, K) or NULL */
                        float *db,  /* (Cout) or NULL */
                        int accumulate);

/* clang-format on */

#endif
