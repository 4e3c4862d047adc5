/* cuda: the CUDA backend of kernels/ — device discovery, device memory, and its
 * elementwise kernels. Built only when CMake finds nvcc and cuDNN (FLEET_HAVE_CUDA);
 * the CPU backend in kernels/ is the reference every op here is tested against.
 *
 * Pointers named d_* are device memory. Every CUDA call and kernel launch is checked:
 * failures come back as fl_status with CUDA's own message. With no GPU (or no driver),
 * fl_cuda_device_count answers FL_NO_DEVICE, and callers (tests included) skip.
 * The layer ops (cuBLAS, cuDNN, own kernels) are in ops_cuda.h, the learner's whole
 * double-DQN update (a learner algorithm) in learner/dqn_cuda.h.
 * Thread-safety: functions are stateless; streams belong to their caller. */
#ifndef FL_KERNELS_CUDA_H
#define FL_KERNELS_CUDA_H

#include <stddef.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable GPUs; FL_NO_DEVICE (count 0) when there is none or no driver. */
fl_status fl_cuda_device_count(int *count, fl_err_t *err);
/* Name and compute capability of GPU `device`, e.g. "NVIDIA H200 (sm_90)". */
fl_status fl_cuda_device_name(int device, char *buf, size_t len, fl_err_t *err);

fl_status fl_cuda_malloc(void **d_ptr, size_t bytes, fl_err_t *err);
void fl_cuda_free(void *d_ptr); /* NULL is a no-op */
fl_status fl_cuda_to_device(void *d_dst, const void *src, size_t bytes, fl_err_t *err);
fl_status fl_cuda_to_host(void *dst, const void *d_src, size_t bytes, fl_err_t *err);
fl_status fl_cuda_synchronize(fl_err_t *err);
/* Page-locks bytes at ptr (cudaHostRegister, portable) so that copies from it to the GPU
 * are DMA transfers that may run asynchronously; unregister before freeing it. */
fl_status fl_cuda_host_register(void *ptr, size_t bytes, fl_err_t *err);
void fl_cuda_host_unregister(void *ptr); /* NULL is a no-op */

/* y = max(x, 0) elementwise, n elements (y may equal x). stream: a cudaStream_t or NULL. */
fl_status fl_cuda_relu_forward(const float *d_x, float *d_y, size_t n, void *stream, fl_err_t *err);
/* dx = dy where y > 0 else 0 (y is the forward's output; dx may equal dy). */
fl_status fl_cuda_relu_backward(const float *d_y, const float *d_dy, float *d_dx, size_t n, void *stream,
                                fl_err_t *err);

#ifdef __cplusplus
}
#endif

#endif
