// elementwise: the CUDA backend's elementwise kernels (see cuda.h). Grid-stride loops,
// 256 threads a block; every launch is followed by a check of cudaGetLastError.
#include <cuda_runtime.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/launch.cuh"

namespace {

// No __restrict__: the callers may run them in place (kernels/cuda/cuda.h).
__global__ void relu_forward_kernel(const float *x, float *y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = x[i] < 0.0f ? 0.0f : x[i];  // as kernels/ops.c: NaN and -0 pass through
}

__global__ void relu_backward_kernel(const float *y, const float *dy, float *dx, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

}  // namespace

extern "C" fl_status fl_cuda_relu_forward(const float *d_x, float *d_y, size_t n, void *stream, fl_err_t *err) {
    if (n == 0) return FL_OK;
    relu_forward_kernel<<<fl__cuda_grid_for(n), FL__CUDA_THREADS, 0, (cudaStream_t)stream>>>(d_x, d_y, n);
    return fl__cuda_launched("relu_forward", err);
}

extern "C" fl_status fl_cuda_relu_backward(const float *d_y, const float *d_dy, float *d_dx, size_t n, void *stream,
                                           fl_err_t *err) {
    if (n == 0) return FL_OK;
    relu_backward_kernel<<<fl__cuda_grid_for(n), FL__CUDA_THREADS, 0, (cudaStream_t)stream>>>(d_y, d_dy, d_dx, n);
    return fl__cuda_launched("relu_backward", err);
}
