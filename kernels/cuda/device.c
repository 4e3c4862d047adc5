/* cuda device: discovery and memory, through the CUDA runtime API (see cuda.h). */
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "kernels/cuda/cuda.h"

static fl_status check(cudaError_t e, const char *what, fl_err_t *err) {
    if (e == cudaSuccess) return FL_OK;
    (void)cudaGetLastError(); /* a failed call (e.g. memory already registered) must not fail the next launch check */
    return fl_err_set(err, FL_INTERNAL, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

fl_status fl_cuda_device_count(int *count, fl_err_t *err) {
    *count = 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        cudaGetLastError(); /* clear the sticky error */
        return fl_err_set(err, FL_NO_DEVICE, "no usable GPU: %s",
                          e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
    }
    *count = n;
    return FL_OK;
}

fl_status fl_cuda_device_name(int device, char *buf, size_t len, fl_err_t *err) {
    struct cudaDeviceProp p;
    FL_TRY(check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties", err));
    snprintf(buf, len, "%s (sm_%d%d)", p.name, p.major, p.minor);
    return FL_OK;
}

fl_status fl_cuda_malloc(void **d_ptr, size_t bytes, fl_err_t *err) {
    *d_ptr = NULL;
    return check(cudaMalloc(d_ptr, bytes), "cudaMalloc", err);
}

void fl_cuda_free(void *d_ptr) {
    if (d_ptr) cudaFree(d_ptr);
}

fl_status fl_cuda_to_device(void *d_dst, const void *src, size_t bytes, fl_err_t *err) {
    return check(cudaMemcpy(d_dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device", err);
}

fl_status fl_cuda_to_host(void *dst, const void *d_src, size_t bytes, fl_err_t *err) {
    return check(cudaMemcpy(dst, d_src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host", err);
}

fl_status fl_cuda_synchronize(fl_err_t *err) {
    return check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", err);
}

fl_status fl_cuda_host_register(void *ptr, size_t bytes, fl_err_t *err) {
    return check(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable), "cudaHostRegister", err);
}

void fl_cuda_host_unregister(void *ptr) {
    if (ptr) cudaHostUnregister(ptr);
}
