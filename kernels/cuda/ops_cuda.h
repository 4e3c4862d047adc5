/* ops_cuda: the CUDA ops of the Q-network and the DQN update, one per CPU reference op.
 *
 * These are the building blocks of learner/dqn_cuda (the whole GPU update) and what the GPU
 * tests compare, one by one, against kernels/ops.h, loss.h and optim.h. All pointers
 * named d_* are device memory; shapes and layouts are exactly those of the CPU
 * reference (row-major, batch first, PyTorch weight layouts), except that convolutions
 * take channels-last (NHWC) activations, as cuDNN's fastest kernels do.
 *
 *   - a context (fl_cuda_ctx_t) owns a cuBLAS and a cuDNN handle bound to one stream,
 *     the cuBLAS workspace (so that graph capture never allocates), one cuDNN
 *     workspace shared by every convolution and the bias gradients' scratch
 *     (FL_CUDA_REDUCE_FLOATS); its `tf32` flag selects TF32 tensor-core math
 *     (cublasSetMathMode, cuDNN math types) or plain FMA float32, its benchmark flag
 *     timed convolution algorithms;
 *   - dense layers are cuBLAS SGEMMs (row-major buffers mapped as in blas_cuda.c) plus a bias kernel;
 *   - convolutions are cuDNN's legacy API on channels-last tensors (one fl_cuda_conv_t
 *     per layer: descriptors, algorithms by the _v7 heuristics or timed, workspace
 *     sizes, the transposed filter), plus own bias kernels;
 *   - everything else is an own kernel (ops_cuda.cu).
 * The elementwise kernels are compiled without FMA contraction (--fmad=false), so they
 * round exactly as the CPU reference does: given the same inputs, relu, the dueling
 * combine, the input conversion, the optimizers and the clipping agree bit for bit;
 * GEMMs, convolutions and sums differ only in summation order.
 *
 * Every launch is checked (cudaGetLastError) and every library call's status turned into
 * an fl_status (FL_INTERNAL) with the library's message. Launchers only enqueue work on
 * the stream they are given: nothing here synchronizes unless it says so.
 * Thread-safety: a context is used by one thread at a time; launchers are stateless. */
#ifndef FL_KERNELS_CUDA_OPS_CUDA_H
#define FL_KERNELS_CUDA_OPS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- scalars of one update, resident in device memory ----------------------------------
 * Graph replay re-runs the same kernels with the same arguments, so anything that changes
 * from step to step (the step count, the clip factor, the skip decision, the learning
 * rate) lives here and is read by the kernels. */
typedef struct fl_cuda_optim_hyper {
    int kind; /* fl_optim_kind */
    float lr, beta1, beta2, eps, decay, momentum;
    float grad_clip; /* > 0: clip the global norm to this; 0: no clipping */
} fl_cuda_optim_hyper_t;

typedef struct fl_cuda_step_scalars {
    double sumsq;       /* sum of squared gradients (fl_cuda_sumsq accumulates; zero it first) */
    float loss;         /* head kernel: the weighted Huber loss */
    float mean_q;       /* head kernel: mean of Q(obs, action) */
    float grad_norm;    /* finalize: sqrt(sumsq) as float */
    float clip_scale;   /* finalize: grad_clip / norm when clipping, else 1 */
    float step_size;    /* finalize (Adam): lr / (1 - beta1^t) */
    float inv_sqrt_bc2; /* finalize (Adam): 1 / sqrt(1 - beta2^t) */
    int bad;            /* finalize: 1 when the loss (if checked) or the norm is not finite */
    int skip;           /* finalize: 1 when the optimizer kernel must leave everything alone */
    long long steps;    /* optimizer step count t; finalize increments it unless skip */
} fl_cuda_step_scalars_t;

/* ---- context ----------------------------------------------------------------------- */

typedef struct fl_cuda_ctx fl_cuda_ctx_t;

/* Handles on `stream` (a cudaStream_t; NULL = the legacy default stream) on the current
 * device. tf32 != 0 allows TF32 tensor cores in GEMMs and convolutions. */
fl_status fl_cuda_ctx_create(int tf32, void *stream, fl_cuda_ctx_t **out, fl_err_t *err);
void fl_cuda_ctx_destroy(fl_cuda_ctx_t *c); /* NULL is a no-op */
void *fl_cuda_ctx_stream(const fl_cuda_ctx_t *c);
/* The convolution workspace grows (synchronizing the stream) when a layer needs more;
 * the generation changes whenever its address does (captured graphs must be redone). */
unsigned fl_cuda_ctx_workspace_generation(const fl_cuda_ctx_t *c);
/* on != 0: convolutions set up from now on (fl_cuda_conv_set_batch) pick their
 * algorithms by timing every one on this GPU (cudnnFind*, PyTorch's
 * cudnn.benchmark), instead of by cuDNN's heuristics; the same workspace limit and math
 * rules apply. Costs a search per layer each time a layer is set up for another batch
 * size (a layer keeps the last size's algorithms only), synchronizing the device. */
void fl_cuda_ctx_set_benchmark(fl_cuda_ctx_t *c, int on);

/* ---- dense: y = x W^T + b (kernels/ops.h fl_dense_*) ------------------------------------ */

fl_status fl_cuda_dense_forward(fl_cuda_ctx_t *c, const float *d_x, /* (B, in) */
                                const float *d_w,                   /* (out, in) */
                                const float *d_b,                   /* (out) or NULL */
                                int B, int in, int out, float *d_y, /* (B, out) */
                                fl_err_t *err);
/* Overwrites (never accumulates) dx (B, in), dw (out, in), db (out); each may be NULL. */
fl_status fl_cuda_dense_backward(fl_cuda_ctx_t *c, const float *d_x, const float *d_w, const float *d_dy, int B, int in,
                                 int out, float *d_dx, float *d_dw, float *d_db, fl_err_t *err);

/* ---- conv2d (kernels/ops.h fl_conv2d_*), cuDNN legacy API ------------------------------
 * Shapes as fl_conv2d_shape_t (cin, h, w, cout, k, stride, pad; ho, wo are checked
 * against cuDNN's). set_batch sets the descriptors for batch B and picks algorithms
 * (cuDNN's _v7 heuristics, or timed with the context's benchmark flag; restricted to
 * FMA math unless the context allows TF32),
 * growing the context's workspace if needed; forward/backward use the last B set.
 * Activations are channels-last: x (B, H, W, Cin), y (B, Ho, Wo, Cout); the filter and its
 * gradient are PyTorch's (Cout, Cin, K, K) (the layer transposes them for cuDNN into
 * buffers of its own, so one layer serves one stream at a time). */
typedef struct fl_cuda_conv fl_cuda_conv_t;

fl_status fl_cuda_conv_create(fl_cuda_ctx_t *c, int cin, int h, int w, int cout, int k, int stride, int pad,
                              fl_cuda_conv_t **out, fl_err_t *err);
void fl_cuda_conv_destroy(fl_cuda_conv_t *v); /* NULL is a no-op */
fl_status fl_cuda_conv_set_batch(fl_cuda_ctx_t *c, fl_cuda_conv_t *v, int B, fl_err_t *err);
int fl_cuda_conv_batch(const fl_cuda_conv_t *v); /* the B last set, 0 before */
fl_status fl_cuda_conv_forward(fl_cuda_ctx_t *c, const fl_cuda_conv_t *v, const float *d_x, /* (B, H, W, Cin) */
                               const float *d_w,                                            /* (Cout, Cin, K, K) */
                               const float *d_b,                                            /* (Cout) or NULL */
                               float *d_y,                                                  /* (B, Ho, Wo, Cout) */
                               fl_err_t *err);
/* Overwrites dx (B, H, W, Cin), dw (Cout, Cin, K, K), db; each may be NULL. */
fl_status fl_cuda_conv_backward(fl_cuda_ctx_t *c, const fl_cuda_conv_t *v, const float *d_x, const float *d_w,
                                const float *d_dy, float *d_dx, float *d_dw, float *d_db, fl_err_t *err);

/* ---- own kernels (ops_cuda.cu); stream is a cudaStream_t or NULL ------------------------ */

/* dst[i] = input_scale * convert(src[i]) for total elements, layout unchanged (images
 * stay (B, H, W, C): channels-last is what the convolutions take). convert: float32 as is;
 * uint8 as (float)u * obs_scale (the learner's fl_dtype_to_float with 1/255), multiplied
 * by input_scale afterwards, as the CPU does. */
fl_status fl__cuda_obs_to_input(const void *d_src, int is_uint8, size_t total, float obs_scale, float input_scale,
                                float *d_dst, void *stream, fl_err_t *err);
/* y (R, C) += b (C) on every row: a dense layer's (B, out), a channels-last
 * convolution's (B Ho Wo, Cout). */
fl_status fl__cuda_bias_add(float *d_y, const float *d_b, size_t R, int C, void *stream, fl_err_t *err);
/* db (C) = the column sums of dy (R, C), in two passes: partial sums over
 * fl__cuda_bias_grad_chunks(R, C) chunks of rows into d_scratch (chunks x C floats, at most
 * FL_CUDA_REDUCE_FLOATS; unused when there is one chunk), then their sums in chunk order.
 * The summation order depends only on R and C: the same result on every run. */
#define FL_CUDA_REDUCE_FLOATS ((size_t)65536)
int fl__cuda_bias_grad_chunks(size_t R, int C);
fl_status fl__cuda_bias_grad(const float *d_dy, size_t R, int C, float *d_db, float *d_scratch, void *stream,
                             fl_err_t *err);
/* dst (N, Q, P) from src (N, P, Q), e.g. NCHW (B, C, HW) to NHWC (B, HW, C) and back.
 * P and Q up to FL_CUDA_TRANSPOSE_MAX_P (the grid's 65535 tiles of 32 on P; the same
 * bound on Q, for symmetry); FL_INVALID_ARGUMENT beyond (fl__cuda_transpose_fits says). */
#define FL_CUDA_TRANSPOSE_MAX_P (65535 * 32)
int fl__cuda_transpose_fits(int P, int Q);
fl_status fl__cuda_transpose(const float *d_src, int N, int P, int Q, float *d_dst, void *stream, fl_err_t *err);
/* q (B, A) = V + A - mean(A) from va (B, 1 + A); the backward writes dva (B, 1 + A). */
fl_status fl_cuda_dueling_combine_forward(const float *d_va, int B, int A, float *d_q, void *stream, fl_err_t *err);
fl_status fl_cuda_dueling_combine_backward(const float *d_dq, int B, int A, float *d_dva, void *stream, fl_err_t *err);

/* The double-DQN head (learner/dqn.c): per item i,
 *   a* = argmax_a q_next_online[i] (ties: lowest a), y = R + disc * q_next_target[i, a*]
 *   (y = R when disc == 0), q = q_obs[i, action], priority = |y - q|,
 *   dpred = w * huber'(q - y) / B, dq[i, :] = 0 except dq[i, action] = dpred,
 * and sc->loss = (1/B) sum w huber(q - y), sc->mean_q = mean q (both summed in double).
 * d_y and d_q_taken (B) may be NULL. Actions must be in range (the caller checks). */
fl_status fl_cuda_dqn_head(const float *d_q_next_online, const float *d_q_next_target, const float *d_q_obs,
                           const int32_t *d_actions, const float *d_rewards, const float *d_discounts,
                           const float *d_weights, int B, int A, float huber_delta, float *d_priorities, float *d_dq,
                           float *d_y, float *d_q_taken, fl_cuda_step_scalars_t *d_sc, void *stream, fl_err_t *err);

/* sc->sumsq += sum of x^2 over n floats, in double. */
fl_status fl_cuda_sumsq(const float *d_x, size_t n, fl_cuda_step_scalars_t *d_sc, void *stream, fl_err_t *err);
/* One thread: grad_norm, bad (check_loss: the loss counts too), clip_scale from
 * hyper->grad_clip, skip = bad || !apply, and when !skip: steps++ and Adam's bias
 * corrections for the new step count (computed in double, as optim.c does). */
fl_status fl_cuda_step_finalize(const fl_cuda_optim_hyper_t *d_hyper, fl_cuda_step_scalars_t *d_sc, int check_loss,
                                int apply, void *stream, fl_err_t *err);
/* Unless sc->skip: params (n) updated from grads (n) * sc->clip_scale by the rule of the
 * optimizer whose fused kernel is `kind` (fl_optim_cuda_kernel: kernels/optim.c's table
 * names the kernel of each optimizer that has one), state = `slots` vectors of n floats
 * as fl_optim_state. */
fl_status fl_cuda_optim_apply(int kind, size_t n, float *d_params, const float *d_grads, float *d_state,
                              const fl_cuda_optim_hyper_t *d_hyper, const fl_cuda_step_scalars_t *d_sc, void *stream,
                              fl_err_t *err);

#ifdef __cplusplus
}
#endif

#endif
