/* blas_cuda: the context (cuBLAS + cuDNN handles, workspaces), dense layers through
 * cuBLAS and convolutions through cuDNN's legacy API (see ops_cuda.h).
 *
 * Dense, row-major x (B, in), W (out, in), y (B, out); cuBLAS sees each row-major
 * buffer as its column-major transpose:
 *   y  = x W^T : Sgemm(T, N, out, B, in,  W, in, x,  in,  y,  out)
 *   dx = dy W  : Sgemm(N, N, in,  B, out, W, in, dy, out, dx, in)
 *   dW = dy^T x: Sgemm(N, T, in, out, B,  x, in, dy, out, dW, in)
 * Biases are own kernels (bias_add, bias_grad in ops_cuda.cu).
 *
 * Convolutions: channels-last (NHWC) float activations, the filter in PyTorch's layout
 * (Cout, Cin, K, K) on both sides of the API and as (Cout, K, K, Cin) for cuDNN
 * (transposed on the stream into the layer's own buffer for every forward and backward-
 * data call, and the filter gradient back), cross-correlation with symmetric zero padding,
 * i.e. PyTorch's Conv2d and kernels/ops.c on channels-last tensors. cuDNN's fast kernels
 * on tensor cores read NHWC: with NCHW tensors it converted every input and output
 * around them, which took a third of the Nature CNN's update on an H100. Biases (own
 * kernels) are per-column over the (B Ho Wo, Cout) rows. Each of the
 * three operations has its own convolution descriptor, so that each carries the math
 * type of the algorithm picked for it. With tf32 off every descriptor is pinned to
 * CUDNN_FMA_MATH (no tensor cores, plain float32 FMAs). */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <stdlib.h>

#include "kernels/cuda/ops_cuda.h"

#define CUBLAS_WORKSPACE_BYTES ((size_t)32 << 20) /* NVIDIA's recommendation for Hopper */
#define CONV_WORKSPACE_LIMIT ((size_t)1 << 30)    /* never pick an algorithm that wants more */

struct fl_cuda_ctx {
    int tf32;
    int benchmark; /* pick convolution algorithms by timing them (cudnnFind*) */
    cudaStream_t stream;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    void *blas_ws;
    void *ws; /* convolution workspace */
    size_t ws_bytes;
    unsigned ws_gen;
    float *reduce; /* FL_CUDA_REDUCE_FLOATS: the bias gradients' partial sums */
};

struct fl_cuda_conv {
    int cin, h, w, cout, k, stride, pad, ho, wo;
    int batch;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t f;
    cudnnConvolutionDescriptor_t cf, cd, cw; /* forward, backward data, backward filter */
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
    size_t fwd_ws, bwd_data_ws, bwd_filter_ws;
    float *w_t, *dw_t; /* (Cout, K, K, Cin): the filter and its gradient as cuDNN's NHWC kernels take them */
};

static fl_status cuda_check(cudaError_t e, const char *what, fl_err_t *err) {
    if (e == cudaSuccess) return FL_OK;
    (void)cudaGetLastError(); /* a failed call's error must not fail the next launch's check */
    return fl_err_set(err, FL_INTERNAL, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

static fl_status blas_check(cublasStatus_t s, const char *what, fl_err_t *err) {
    if (s == CUBLAS_STATUS_SUCCESS) return FL_OK;
    return fl_err_set(err, FL_INTERNAL, "%s: %s (cuBLAS status %d)", what, cublasGetStatusString(s), (int)s);
}

static fl_status dnn_check(cudnnStatus_t s, const char *what, fl_err_t *err) {
    if (s == CUDNN_STATUS_SUCCESS) return FL_OK;
    return fl_err_set(err, FL_INTERNAL, "%s: %s (cuDNN status %d)", what, cudnnGetErrorString(s), (int)s);
}

/* ---- context ----------------------------------------------------------------------- */

fl_status fl_cuda_ctx_create(int tf32, void *stream, fl_cuda_ctx_t **out, fl_err_t *err) {
    *out = NULL;
    fl_status st = FL_OK;
    fl_cuda_ctx_t *c = calloc(1, sizeof *c);
    if (!c) return fl_err_set(err, FL_NO_MEMORY, "cuda context: out of memory");
    c->tf32 = tf32 != 0;
    c->stream = (cudaStream_t)stream;
    if ((st = blas_check(cublasCreate(&c->blas), "cublasCreate", err)) != FL_OK) goto fail;
    if ((st = blas_check(cublasSetStream(c->blas, c->stream), "cublasSetStream", err)) != FL_OK) goto fail;
    if ((st = blas_check(cublasSetMathMode(c->blas, c->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                         "cublasSetMathMode", err)) != FL_OK)
        goto fail;
    if ((st = cuda_check(cudaMalloc(&c->blas_ws, CUBLAS_WORKSPACE_BYTES), "cudaMalloc (cuBLAS workspace)", err)) !=
        FL_OK)
        goto fail;
    if ((st = blas_check(cublasSetWorkspace(c->blas, c->blas_ws, CUBLAS_WORKSPACE_BYTES), "cublasSetWorkspace", err)) !=
        FL_OK)
        goto fail;
    if ((st = cuda_check(cudaMalloc((void **)&c->reduce, FL_CUDA_REDUCE_FLOATS * sizeof(float)),
                         "cudaMalloc (reduction scratch)", err)) != FL_OK)
        goto fail;
    if ((st = dnn_check(cudnnCreate(&c->dnn), "cudnnCreate", err)) != FL_OK) goto fail;
    if ((st = dnn_check(cudnnSetStream(c->dnn, c->stream), "cudnnSetStream", err)) != FL_OK) goto fail;
    *out = c;
    return FL_OK;
fail:
    fl_cuda_ctx_destroy(c);
    return st;
}

void fl_cuda_ctx_destroy(fl_cuda_ctx_t *c) {
    if (!c) return;
    if (c->stream || c->blas || c->dnn) cudaStreamSynchronize(c->stream);
    if (c->dnn) cudnnDestroy(c->dnn);
    if (c->blas) cublasDestroy(c->blas);
    cudaFree(c->blas_ws);
    cudaFree(c->ws);
    cudaFree(c->reduce);
    free(c);
}

void *fl_cuda_ctx_stream(const fl_cuda_ctx_t *c) {
    return c->stream;
}
unsigned fl_cuda_ctx_workspace_generation(const fl_cuda_ctx_t *c) {
    return c->ws_gen;
}
void fl_cuda_ctx_set_benchmark(fl_cuda_ctx_t *c, int on) {
    c->benchmark = on != 0;
}

/* At least `bytes` of convolution workspace. */
static fl_status reserve(fl_cuda_ctx_t *c, size_t bytes, fl_err_t *err) {
    if (bytes <= c->ws_bytes) return FL_OK;
    FL_TRY(cuda_check(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize (workspace)", err));
    cudaFree(c->ws);
    c->ws = NULL;
    c->ws_bytes = 0;
    c->ws_gen++;
    FL_TRY(cuda_check(cudaMalloc(&c->ws, bytes), "cudaMalloc (cuDNN workspace)", err));
    c->ws_bytes = bytes;
    return FL_OK;
}

/* ---- dense ------------------------------------------------------------------------- */

fl_status fl_cuda_dense_forward(fl_cuda_ctx_t *c, const float *d_x, const float *d_w, const float *d_b, int B, int in,
                                int out, float *d_y, fl_err_t *err) {
    const float one = 1.0f, zero = 0.0f;
    FL_TRY(
        blas_check(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, B, in, &one, d_w, in, d_x, in, &zero, d_y, out),
                   "cublasSgemm (dense forward)", err));
    if (d_b) FL_TRY(fl__cuda_bias_add(d_y, d_b, (size_t)B, out, c->stream, err));
    return FL_OK;
}

fl_status fl_cuda_dense_backward(fl_cuda_ctx_t *c, const float *d_x, const float *d_w, const float *d_dy, int B, int in,
                                 int out, float *d_dx, float *d_dw, float *d_db, fl_err_t *err) {
    const float one = 1.0f, zero = 0.0f;
    if (d_dx)
        FL_TRY(blas_check(
            cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, B, out, &one, d_w, in, d_dy, out, &zero, d_dx, in),
            "cublasSgemm (dense backward, dx)", err));
    if (d_dw)
        FL_TRY(blas_check(
            cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, B, &one, d_x, in, d_dy, out, &zero, d_dw, in),
            "cublasSgemm (dense backward, dw)", err));
    if (d_db) FL_TRY(fl__cuda_bias_grad(d_dy, (size_t)B, out, d_db, c->reduce, c->stream, err));
    return FL_OK;
}

/* ---- conv2d ------------------------------------------------------------------------ */

fl_status fl_cuda_conv_create(fl_cuda_ctx_t *c, int cin, int h, int w, int cout, int k, int stride, int pad,
                              fl_cuda_conv_t **out, fl_err_t *err) {
    (void)c;
    *out = NULL;
    if (cin < 1 || h < 1 || w < 1 || cout < 1 || k < 1 || stride < 1 || pad < 0 || k > h + 2 * pad || k > w + 2 * pad)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "cuda conv: input (%d, %d, %d), conv(%d,%d,%d,%d): the kernel does not fit the padded input",
                          cin, h, w, cout, k, stride, pad);
    if ((size_t)cout * (size_t)cin * (size_t)k * (size_t)k > (size_t)1 << 30)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "cuda conv: conv(%d,%d) on %d channels: over 2^30 weights", cout, k,
                          cin);
    fl_status st = FL_OK;
    fl_cuda_conv_t *v = calloc(1, sizeof *v);
    if (!v) return fl_err_set(err, FL_NO_MEMORY, "cuda conv: out of memory");
    v->cin = cin;
    v->h = h;
    v->w = w;
    v->cout = cout;
    v->k = k;
    v->stride = stride;
    v->pad = pad;
    v->ho = (h + 2 * pad - k) / stride + 1;
    v->wo = (w + 2 * pad - k) / stride + 1;
    if ((st = dnn_check(cudnnCreateTensorDescriptor(&v->x), "cudnnCreateTensorDescriptor", err)) != FL_OK ||
        (st = dnn_check(cudnnCreateTensorDescriptor(&v->y), "cudnnCreateTensorDescriptor", err)) != FL_OK ||
        (st = dnn_check(cudnnCreateFilterDescriptor(&v->f), "cudnnCreateFilterDescriptor", err)) != FL_OK ||
        (st = dnn_check(cudnnCreateConvolutionDescriptor(&v->cf), "cudnnCreateConvolutionDescriptor", err)) != FL_OK ||
        (st = dnn_check(cudnnCreateConvolutionDescriptor(&v->cd), "cudnnCreateConvolutionDescriptor", err)) != FL_OK ||
        (st = dnn_check(cudnnCreateConvolutionDescriptor(&v->cw), "cudnnCreateConvolutionDescriptor", err)) != FL_OK)
        goto fail;
    if ((st = dnn_check(cudnnSetFilter4dDescriptor(v->f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, cout, cin, k, k),
                        "cudnnSetFilter4dDescriptor", err)) != FL_OK)
        goto fail;
    const size_t wbytes = (size_t)cout * (size_t)cin * (size_t)k * (size_t)k * sizeof(float);
    if ((st = cuda_check(cudaMalloc((void **)&v->w_t, wbytes), "cudaMalloc (conv filter)", err)) != FL_OK ||
        (st = cuda_check(cudaMalloc((void **)&v->dw_t, wbytes), "cudaMalloc (conv filter gradient)", err)) != FL_OK)
        goto fail;
    cudnnConvolutionDescriptor_t descs[3] = {v->cf, v->cd, v->cw};
    for (int i = 0; i < 3; i++)
        if ((st = dnn_check(cudnnSetConvolution2dDescriptor(descs[i], pad, pad, stride, stride, 1, 1,
                                                            CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                            "cudnnSetConvolution2dDescriptor", err)) != FL_OK)
            goto fail;
    *out = v;
    return FL_OK;
fail:
    fl_cuda_conv_destroy(v);
    return st;
}

void fl_cuda_conv_destroy(fl_cuda_conv_t *v) {
    if (!v) return;
    cudaFree(v->w_t);
    cudaFree(v->dw_t);
    if (v->x) cudnnDestroyTensorDescriptor(v->x);
    if (v->y) cudnnDestroyTensorDescriptor(v->y);
    if (v->f) cudnnDestroyFilterDescriptor(v->f);
    if (v->cf) cudnnDestroyConvolutionDescriptor(v->cf);
    if (v->cd) cudnnDestroyConvolutionDescriptor(v->cd);
    if (v->cw) cudnnDestroyConvolutionDescriptor(v->cw);
    free(v);
}

int fl_cuda_conv_batch(const fl_cuda_conv_t *v) {
    return v->batch;
}

/* The math type to try an algorithm with: its own with TF32 allowed, FMA otherwise.
 * CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION would let cuDNN convert our float32 data down to
 * half precision, below what "TF32 on" promises: it becomes the default math (TF32). */
static cudnnMathType_t math_for(const fl_cuda_ctx_t *c, cudnnMathType_t suggested) {
    if (!c->tf32) return CUDNN_FMA_MATH;
    return suggested == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ? CUDNN_DEFAULT_MATH : suggested;
}

/* The three operations of a convolution. Each has its own descriptor (cf, cd, cw), its
 * own algorithm enum and perf type, and its own cuDNN calls (rank_algos,
 * workspace_size); pick_algo is the one search over them. */
typedef enum { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER } conv_op;

static const struct {
    const char *name; /* in error messages */
    int algo_count;   /* the operation's *_ALGO_COUNT */
} CONV_OPS[] = {
    [CONV_FWD] = {"forward", CUDNN_CONVOLUTION_FWD_ALGO_COUNT},
    [CONV_BWD_DATA] = {"backward-data", CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT},
    [CONV_BWD_FILTER] = {"backward-filter", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT},
};

#define MAX_CONV_ALGOS 16
_Static_assert(CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= MAX_CONV_ALGOS &&
                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT <= MAX_CONV_ALGOS &&
                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT <= MAX_CONV_ALGOS,
               "MAX_CONV_ALGOS is below one of cuDNN's algorithm counts");

/* One entry of cuDNN's ranking (heuristic or timed), whichever operation's perf type it came in. */
typedef struct {
    int algo;
    cudnnMathType_t math;
    cudnnStatus_t status;
} ranked_algo;

static cudnnConvolutionDescriptor_t conv_desc(const fl_cuda_conv_t *v, conv_op op) {
    return op == CONV_FWD ? v->cf : op == CONV_BWD_DATA ? v->cd : v->cw;
}

/* cuDNN's ranking for op, best first: *got entries of r. The _v7 heuristics, or with the
 * context's benchmark flag cudnnFind*, which times every algorithm on scratch buffers of
 * its own (synchronizing; never inside a graph capture). */
static fl_status rank_algos(fl_cuda_ctx_t *c, fl_cuda_conv_t *v, conv_op op, ranked_algo *r, int *got, fl_err_t *err) {
    switch (op) {
    case CONV_FWD: {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        FL_TRY(dnn_check(
            (c->benchmark ? cudnnFindConvolutionForwardAlgorithm : cudnnGetConvolutionForwardAlgorithm_v7)(
                c->dnn, v->x, v->f, v->cf, v->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, got, perf),
            c->benchmark ? "cudnnFindConvolutionForwardAlgorithm" : "cudnnGetConvolutionForwardAlgorithm_v7", err));
        for (int i = 0; i < *got; i++) r[i] = (ranked_algo){(int)perf[i].algo, perf[i].mathType, perf[i].status};
        return FL_OK;
    }
    case CONV_BWD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        FL_TRY(dnn_check(
            (c->benchmark ? cudnnFindConvolutionBackwardDataAlgorithm : cudnnGetConvolutionBackwardDataAlgorithm_v7)(
                c->dnn, v->f, v->y, v->cd, v->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, got, perf),
            c->benchmark ? "cudnnFindConvolutionBackwardDataAlgorithm" : "cudnnGetConvolutionBackwardDataAlgorithm_v7",
            err));
        for (int i = 0; i < *got; i++) r[i] = (ranked_algo){(int)perf[i].algo, perf[i].mathType, perf[i].status};
        return FL_OK;
    }
    case CONV_BWD_FILTER: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        FL_TRY(dnn_check((c->benchmark ? cudnnFindConvolutionBackwardFilterAlgorithm
                                       : cudnnGetConvolutionBackwardFilterAlgorithm_v7)(
                             c->dnn, v->x, v->y, v->cw, v->f, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, got, perf),
                         c->benchmark ? "cudnnFindConvolutionBackwardFilterAlgorithm"
                                      : "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                         err));
        for (int i = 0; i < *got; i++) r[i] = (ranked_algo){(int)perf[i].algo, perf[i].mathType, perf[i].status};
        return FL_OK;
    }
    }
    return fl_err_set(err, FL_INTERNAL, "cuda conv: unknown operation %d", (int)op);
}

/* The workspace op needs with algorithm algo (and the math type set on its descriptor). */
static cudnnStatus_t workspace_size(const fl_cuda_ctx_t *c, const fl_cuda_conv_t *v, conv_op op, int algo,
                                    size_t *bytes) {
    switch (op) {
    case CONV_FWD:
        return cudnnGetConvolutionForwardWorkspaceSize(c->dnn, v->x, v->f, v->cf, v->y, (cudnnConvolutionFwdAlgo_t)algo,
                                                       bytes);
    case CONV_BWD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(c->dnn, v->f, v->y, v->cd, v->x,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    case CONV_BWD_FILTER:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(c->dnn, v->x, v->y, v->cw, v->f,
                                                              (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
    }
    return CUDNN_STATUS_BAD_PARAM;
}

/* Walks cuDNN's ranking for op, heuristic or timed (then, if nothing there works, every algorithm
 * in enum order) and takes the first one whose workspace can be queried for the math type
 * we allow and fits CONV_WORKSPACE_LIMIT: its number in *algo, its workspace in *ws. The
 * op's descriptor keeps that algorithm's math type. */
static fl_status pick_algo(fl_cuda_ctx_t *c, fl_cuda_conv_t *v, conv_op op, int *algo, size_t *ws, fl_err_t *err) {
    const cudnnConvolutionDescriptor_t desc = conv_desc(v, op);
    ranked_algo perf[MAX_CONV_ALGOS];
    int got = 0;
    FL_TRY(dnn_check(cudnnSetConvolutionMathType(desc, c->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH),
                     "cudnnSetConvolutionMathType", err));
    FL_TRY(rank_algos(c, v, op, perf, &got, err));
    for (int pass = 0; pass < 2; pass++) {
        const int count = pass == 0 ? got : CONV_OPS[op].algo_count;
        for (int i = 0; i < count; i++) {
            if (pass == 0 && perf[i].status != CUDNN_STATUS_SUCCESS) continue;
            const int a = pass == 0 ? perf[i].algo : i;
            const cudnnMathType_t math = math_for(c, pass == 0 ? perf[i].math : CUDNN_DEFAULT_MATH);
            size_t bytes = 0;
            if (cudnnSetConvolutionMathType(desc, math) != CUDNN_STATUS_SUCCESS) continue;
            if (workspace_size(c, v, op, a, &bytes) != CUDNN_STATUS_SUCCESS || bytes > CONV_WORKSPACE_LIMIT) continue;
            *algo = a;
            *ws = bytes;
            return FL_OK;
        }
    }
    return fl_err_set(err, FL_INTERNAL, "cuDNN: no %s algorithm for conv(%d,%d,%d,%d) on (%d, %d, %d, %d)",
                      CONV_OPS[op].name, v->cout, v->k, v->stride, v->pad, v->batch, v->cin, v->h, v->w);
}

fl_status fl_cuda_conv_set_batch(fl_cuda_ctx_t *c, fl_cuda_conv_t *v, int B, fl_err_t *err) {
    if (B < 1) return fl_err_set(err, FL_INVALID_ARGUMENT, "cuda conv: batch %d (expected >= 1)", B);
    if (v->batch == B) return FL_OK;
    v->batch = 0;
    FL_TRY(dnn_check(cudnnSetTensor4dDescriptor(v->x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, B, v->cin, v->h, v->w),
                     "cudnnSetTensor4dDescriptor (x)", err));
    FL_TRY(dnn_check(cudnnSetTensor4dDescriptor(v->y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, B, v->cout, v->ho, v->wo),
                     "cudnnSetTensor4dDescriptor (y)", err));
    int n = 0, ch = 0, oh = 0, ow = 0;
    FL_TRY(dnn_check(cudnnGetConvolution2dForwardOutputDim(v->cf, v->x, v->f, &n, &ch, &oh, &ow),
                     "cudnnGetConvolution2dForwardOutputDim", err));
    if (n != B || ch != v->cout || oh != v->ho || ow != v->wo)
        return fl_err_set(err, FL_INTERNAL, "cuDNN: conv output (%d, %d, %d, %d), expected (%d, %d, %d, %d)", n, ch, oh,
                          ow, B, v->cout, v->ho, v->wo);
    v->batch = B;
    fl_status st;
    int fwd = 0, bwd_data = 0, bwd_filter = 0;
    if ((st = pick_algo(c, v, CONV_FWD, &fwd, &v->fwd_ws, err)) != FL_OK ||
        (st = pick_algo(c, v, CONV_BWD_DATA, &bwd_data, &v->bwd_data_ws, err)) != FL_OK ||
        (st = pick_algo(c, v, CONV_BWD_FILTER, &bwd_filter, &v->bwd_filter_ws, err)) != FL_OK) {
        v->batch = 0;
        return st;
    }
    v->fwd_algo = (cudnnConvolutionFwdAlgo_t)fwd;
    v->bwd_data_algo = (cudnnConvolutionBwdDataAlgo_t)bwd_data;
    v->bwd_filter_algo = (cudnnConvolutionBwdFilterAlgo_t)bwd_filter;
    size_t need = v->fwd_ws;
    if (v->bwd_data_ws > need) need = v->bwd_data_ws;
    if (v->bwd_filter_ws > need) need = v->bwd_filter_ws;
    if ((st = reserve(c, need, err)) != FL_OK) {
        v->batch = 0;
        return st;
    }
    return FL_OK;
}

/* The filter (Cout, Cin, K, K) as (Cout, K, K, Cin) into v->w_t, on the context's stream:
 * a forward or backward-data call makes its own copy, so that a call with other weights
 * (the target network's) in between changes nothing. */
static fl_status filter_to_nhwc(fl_cuda_ctx_t *c, const fl_cuda_conv_t *v, const float *d_w, fl_err_t *err) {
    return fl__cuda_transpose(d_w, v->cout, v->cin, v->k * v->k, v->w_t, c->stream, err);
}

fl_status fl_cuda_conv_forward(fl_cuda_ctx_t *c, const fl_cuda_conv_t *v, const float *d_x, const float *d_w,
                               const float *d_b, float *d_y, fl_err_t *err) {
    if (v->batch < 1) return fl_err_set(err, FL_FAILED_PRECONDITION, "cuda conv: forward before set_batch");
    const float one = 1.0f, zero = 0.0f;
    FL_TRY(filter_to_nhwc(c, v, d_w, err));
    FL_TRY(dnn_check(cudnnConvolutionForward(c->dnn, &one, v->x, d_x, v->f, v->w_t, v->cf, v->fwd_algo, c->ws,
                                             v->fwd_ws, &zero, v->y, d_y),
                     "cudnnConvolutionForward", err));
    if (d_b) FL_TRY(fl__cuda_bias_add(d_y, d_b, (size_t)v->batch * (size_t)(v->ho * v->wo), v->cout, c->stream, err));
    return FL_OK;
}

fl_status fl_cuda_conv_backward(fl_cuda_ctx_t *c, const fl_cuda_conv_t *v, const float *d_x, const float *d_w,
                                const float *d_dy, float *d_dx, float *d_dw, float *d_db, fl_err_t *err) {
    if (v->batch < 1) return fl_err_set(err, FL_FAILED_PRECONDITION, "cuda conv: backward before set_batch");
    const float one = 1.0f, zero = 0.0f;
    if (d_db)
        FL_TRY(fl__cuda_bias_grad(d_dy, (size_t)v->batch * (size_t)(v->ho * v->wo), v->cout, d_db, c->reduce, c->stream,
                                  err));
    if (d_dw) {
        FL_TRY(dnn_check(cudnnConvolutionBackwardFilter(c->dnn, &one, v->x, d_x, v->y, d_dy, v->cw, v->bwd_filter_algo,
                                                        c->ws, v->bwd_filter_ws, &zero, v->f, v->dw_t),
                         "cudnnConvolutionBackwardFilter", err));
        /* (Cout, K K, Cin) -> (Cout, Cin, K K) */
        FL_TRY(fl__cuda_transpose(v->dw_t, v->cout, v->k * v->k, v->cin, d_dw, c->stream, err));
    }
    if (d_dx) {
        FL_TRY(filter_to_nhwc(c, v, d_w, err));
        FL_TRY(dnn_check(cudnnConvolutionBackwardData(c->dnn, &one, v->f, v->w_t, v->y, d_dy, v->cd, v->bwd_data_algo,
                                                      c->ws, v->bwd_data_ws, &zero, v->x, d_dx),
                         "cudnnConvolutionBackwardData", err));
    }
    return FL_OK;
}
