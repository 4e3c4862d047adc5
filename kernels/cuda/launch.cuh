// launch: what the kernel launchers of the CUDA backend share (elementwise.cu,
// ops_cuda.cu): the block size and grid of their grid-stride loops, and the check of
// cudaGetLastError that follows every launch. CUDA sources only; internal to kernels/cuda.
#ifndef FL_KERNELS_CUDA_LAUNCH_CUH
#define FL_KERNELS_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#include "common/status.h"

// Threads a block of every grid-stride kernel.
constexpr int FL__CUDA_THREADS = 256;

// Blocks for n elements at FL__CUDA_THREADS a block: at least 1, at most 65535 (the
// grid-stride loops cover the rest).
static inline unsigned fl__cuda_grid_for(size_t n) {
    size_t blocks = (n + FL__CUDA_THREADS - 1) / FL__CUDA_THREADS;
    if (blocks < 1) blocks = 1;
    if (blocks > 65535) blocks = 65535;
    return (unsigned)blocks;
}

// FL_OK, or FL_INTERNAL with CUDA's message when the launch of `what` just made failed.
static inline fl_status fl__cuda_launched(const char *what, fl_err_t *err) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return FL_OK;
    return fl_err_set(err, FL_INTERNAL, "%s launch: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

#endif
