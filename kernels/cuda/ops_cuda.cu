// ops_cuda: the own kernels of the CUDA backend (see ops_cuda.h).
//
// Grid-stride loops of 256 threads a block. The file is compiled with --fmad=false
// (kernels/CMakeLists.txt), so a * b + c rounds twice as in the CPU reference, and each
// expression below keeps the CPU's order of operations (e.g. (1 - b2) * g * g is
// ((1 - b2) * g) * g); sqrtf and '/' are IEEE-rounded (nvcc's default -prec-sqrt and
// -prec-div). Every launch is followed by a check of cudaGetLastError.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops_cuda.h"
extern "C" {
#include "kernels/optim.h"  // a C header without its own extern "C"
}

namespace {

constexpr int THREADS = FL__CUDA_THREADS;

// Sum of v over the block (blockDim.x == THREADS); every thread gets the result. The
// leading barrier lets a block call it twice in a row with the same shared array.
template <typename T>
__device__ T block_sum(T v) {
    __shared__ T sh[THREADS];
    __syncthreads();
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    return sh[0];
}

__device__ __forceinline__ float to_float(float v, float) { return v; }
__device__ __forceinline__ float to_float(uint8_t v, float scale) { return (float)v * scale; }

// dst (B, C, H, W) from src (B, H, W, C) (image) or the same layout (vector).
template <typename T>
__global__ void obs_to_input_kernel(const T *__restrict__ src, size_t total, int C, int HW, int image,
                                    float obs_scale, float input_scale, float *__restrict__ dst) {
    const size_t D = (size_t)C * (size_t)HW;
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < total; o += (size_t)gridDim.x * blockDim.x) {
        size_t si = o;
        if (image) {
            const size_t b = o / D, r = o - b * D;
            const size_t c = r / (size_t)HW, p = r - c * (size_t)HW;
            si = b * D + p * (size_t)C + c;
        }
        dst[o] = input_scale * to_float(src[si], obs_scale);
    }
}

__global__ void bias_add_kernel(float *__restrict__ y, const float *__restrict__ b, size_t total, int C, int HW) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        y[i] += b[(i / (size_t)HW) % (size_t)C];
}

// One block per channel c.
__global__ void bias_grad_kernel(const float *__restrict__ dy, int B, int C, int HW, float *__restrict__ db) {
    const int c = blockIdx.x;
    const size_t count = (size_t)B * (size_t)HW;
    float acc = 0.0f;
    for (size_t j = threadIdx.x; j < count; j += THREADS) {
        const size_t b = j / (size_t)HW, p = j - b * (size_t)HW;
        acc += dy[(b * (size_t)C + (size_t)c) * (size_t)HW + p];
    }
    const float s = block_sum<float>(acc);
    if (threadIdx.x == 0) db[c] = s;
}

// One thread per sample; the sums run over a in order, as the CPU's.
__global__ void dueling_forward_kernel(const float *__restrict__ va, int B, int A, float *__restrict__ q) {
    const float inv_a = 1.0f / (float)A;
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < B; r += gridDim.x * blockDim.x) {
        const float *row = va + (size_t)r * (size_t)(A + 1);
        float *qr = q + (size_t)r * (size_t)A;
        float sum = 0.0f;
        for (int a = 0; a < A; a++) sum += row[1 + a];
        const float base = row[0] - sum * inv_a;
        for (int a = 0; a < A; a++) qr[a] = base + row[1 + a];
    }
}

__global__ void dueling_backward_kernel(const float *__restrict__ dq, int B, int A, float *__restrict__ dva) {
    const float inv_a = 1.0f / (float)A;
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < B; r += gridDim.x * blockDim.x) {
        const float *dqr = dq + (size_t)r * (size_t)A;
        float *row = dva + (size_t)r * (size_t)(A + 1);
        float sum = 0.0f;
        for (int a = 0; a < A; a++) sum += dqr[a];
        const float mean = sum * inv_a;
        row[0] = sum;
        for (int a = 0; a < A; a++) row[1 + a] = dqr[a] - mean;
    }
}

// One block of THREADS threads walks the batch.
__global__ void dqn_head_kernel(const float *__restrict__ qno, const float *__restrict__ qnt,
                                const float *__restrict__ qo, const int32_t *__restrict__ actions,
                                const float *__restrict__ rewards, const float *__restrict__ discounts,
                                const float *__restrict__ weights, int B, int A, float delta,
                                float *__restrict__ prio, float *__restrict__ dq, float *__restrict__ y_out,
                                float *__restrict__ q_out, fl_cuda_step_scalars_t *sc) {
    const double inv_b = 1.0 / (double)B, dd = (double)delta;
    double lsum = 0.0, qsum = 0.0;
    for (int i = threadIdx.x; i < B; i += THREADS) {
        float y = rewards[i];
        if (discounts[i] != 0.0f) {
            const float *row = qno + (size_t)i * (size_t)A;
            int best = 0;
            for (int a = 1; a < A; a++)
                if (row[a] > row[best]) best = a;
            y += discounts[i] * qnt[(size_t)i * (size_t)A + (size_t)best];
        }
        const int act = actions[i];
        const float q = qo[(size_t)i * (size_t)A + (size_t)act];
        prio[i] = fabsf(y - q);
        if (y_out) y_out[i] = y;
        if (q_out) q_out[i] = q;
        // kernels/loss.c fl_loss_huber, in double
        const double x = (double)q - (double)y;
        const double w = (double)weights[i];
        const double ax = fabs(x);
        double l, g;
        if (ax <= dd) {
            l = 0.5 * x * x;
            g = x;
        } else {
            l = dd * (ax - 0.5 * dd);
            g = x > 0 ? dd : (x < 0 ? -dd : x);
        }
        lsum += w * l;
        qsum += (double)q;
        const float dp = (float)(w * g * inv_b);
        float *dr = dq + (size_t)i * (size_t)A;
        for (int a = 0; a < A; a++) dr[a] = a == act ? dp : 0.0f;
    }
    const double ls = block_sum<double>(lsum);
    const double qs = block_sum<double>(qsum);
    if (threadIdx.x == 0) {
        sc->loss = (float)(ls * inv_b);
        sc->mean_q = (float)(qs / (double)B);
    }
}

__global__ void sumsq_kernel(const float *__restrict__ x, size_t n, fl_cuda_step_scalars_t *sc) {
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const double v = (double)x[i];
        acc += v * v;
    }
    const double s = block_sum<double>(acc);
    if (threadIdx.x == 0) atomicAdd(&sc->sumsq, s);
}

__global__ void finalize_kernel(const fl_cuda_optim_hyper_t *hp, fl_cuda_step_scalars_t *sc, int check_loss,
                                int apply) {
    const double norm = sqrt(sc->sumsq);
    const float normf = (float)norm;
    sc->grad_norm = normf;
    const int bad = (check_loss && !isfinite(sc->loss)) || !isfinite(normf);
    sc->bad = bad;
    const float clip = hp->grad_clip;
    sc->clip_scale = (clip > 0.0f && isfinite(norm) && norm > (double)clip) ? (float)((double)clip / norm) : 1.0f;
    sc->skip = bad || !apply;
    if (!sc->skip) {
        sc->steps += 1;
        const double t = (double)sc->steps;
        sc->step_size = (float)((double)hp->lr / (1.0 - pow((double)hp->beta1, t)));
        sc->inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow((double)hp->beta2, t)));
    }
}

__global__ void sgd_kernel(size_t n, float *__restrict__ p, const float *__restrict__ grads, float *__restrict__ buf,
                           const fl_cuda_optim_hyper_t *hp, const fl_cuda_step_scalars_t *sc) {
    if (sc->skip) return;
    const float scale = sc->clip_scale, lr = hp->lr, mu = hp->momentum;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float g = grads[i] * scale;
        const float b = mu * buf[i] + g;
        buf[i] = b;
        p[i] -= lr * b;
    }
}

__global__ void adam_kernel(size_t n, float *__restrict__ p, const float *__restrict__ grads, float *__restrict__ m,
                            float *__restrict__ v, const fl_cuda_optim_hyper_t *hp,
                            const fl_cuda_step_scalars_t *sc) {
    if (sc->skip) return;
    const float scale = sc->clip_scale, b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps;
    const float step_size = sc->step_size, inv_sqrt_bc2 = sc->inv_sqrt_bc2;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float g = grads[i] * scale;
        const float mi = b1 * m[i] + (1.0f - b1) * g;
        const float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        p[i] -= step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}

__global__ void rmsprop_kernel(size_t n, float *__restrict__ p, const float *__restrict__ grads,
                               float *__restrict__ ms, float *__restrict__ mg, float *__restrict__ mom,
                               const fl_cuda_optim_hyper_t *hp, const fl_cuda_step_scalars_t *sc) {
    if (sc->skip) return;
    const float scale = sc->clip_scale, rho = hp->decay, lr = hp->lr, mu = hp->momentum, eps = hp->eps;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float g = grads[i] * scale;
        const float s = rho * ms[i] + (1.0f - rho) * g * g;
        const float a = rho * mg[i] + (1.0f - rho) * g;
        const float d = s - a * a;
        const float var = d < 0.0f ? 0.0f : d;
        const float mo = mu * mom[i] + lr * g / sqrtf(var + eps);
        ms[i] = s;
        mg[i] = a;
        mom[i] = mo;
        p[i] -= mo;
    }
}

}  // namespace

extern "C" fl_status fl__cuda_obs_to_input(const void *d_src, int is_uint8, int B, int C, int H, int W, int image,
                                           float obs_scale, float input_scale, float *d_dst, void *stream,
                                           fl_err_t *err) {
    const size_t total = (size_t)B * (size_t)C * (size_t)H * (size_t)W;
    if (total == 0) return FL_OK;
    const int HW = H * W;
    if (is_uint8)
        obs_to_input_kernel<uint8_t><<<fl__cuda_grid_for(total), THREADS, 0, (cudaStream_t)stream>>>(
            (const uint8_t *)d_src, total, C, HW, image, obs_scale, input_scale, d_dst);
    else
        obs_to_input_kernel<float><<<fl__cuda_grid_for(total), THREADS, 0, (cudaStream_t)stream>>>(
            (const float *)d_src, total, C, HW, image, obs_scale, input_scale, d_dst);
    return fl__cuda_launched("obs_to_input", err);
}

extern "C" fl_status fl__cuda_bias_add(float *d_y, const float *d_b, int B, int C, int HW, void *stream,
                                       fl_err_t *err) {
    const size_t total = (size_t)B * (size_t)C * (size_t)HW;
    if (total == 0) return FL_OK;
    bias_add_kernel<<<fl__cuda_grid_for(total), THREADS, 0, (cudaStream_t)stream>>>(d_y, d_b, total, C, HW);
    return fl__cuda_launched("bias_add", err);
}

extern "C" fl_status fl__cuda_bias_grad(const float *d_dy, int B, int C, int HW, float *d_db, void *stream,
                                        fl_err_t *err) {
    if (C < 1 || B < 1 || HW < 1) return FL_OK;
    bias_grad_kernel<<<(unsigned)C, THREADS, 0, (cudaStream_t)stream>>>(d_dy, B, C, HW, d_db);
    return fl__cuda_launched("bias_grad", err);
}

extern "C" fl_status fl_cuda_dueling_combine_forward(const float *d_va, int B, int A, float *d_q, void *stream,
                                                     fl_err_t *err) {
    if (B < 1 || A < 1) return FL_OK;
    dueling_forward_kernel<<<fl__cuda_grid_for((size_t)B), THREADS, 0, (cudaStream_t)stream>>>(d_va, B, A, d_q);
    return fl__cuda_launched("dueling_forward", err);
}

extern "C" fl_status fl_cuda_dueling_combine_backward(const float *d_dq, int B, int A, float *d_dva, void *stream,
                                                      fl_err_t *err) {
    if (B < 1 || A < 1) return FL_OK;
    dueling_backward_kernel<<<fl__cuda_grid_for((size_t)B), THREADS, 0, (cudaStream_t)stream>>>(d_dq, B, A, d_dva);
    return fl__cuda_launched("dueling_backward", err);
}

extern "C" fl_status fl_cuda_dqn_head(const float *d_q_next_online, const float *d_q_next_target,
                                      const float *d_q_obs, const int32_t *d_actions, const float *d_rewards,
                                      const float *d_discounts, const float *d_weights, int B, int A,
                                      float huber_delta, float *d_priorities, float *d_dq, float *d_y,
                                      float *d_q_taken, fl_cuda_step_scalars_t *d_sc, void *stream, fl_err_t *err) {
    if (B < 1 || A < 1) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn head: B = %d, A = %d (expected >= 1)", B, A);
    dqn_head_kernel<<<1, THREADS, 0, (cudaStream_t)stream>>>(d_q_next_online, d_q_next_target, d_q_obs, d_actions,
                                                             d_rewards, d_discounts, d_weights, B, A, huber_delta,
                                                             d_priorities, d_dq, d_y, d_q_taken, d_sc);
    return fl__cuda_launched("dqn_head", err);
}

extern "C" fl_status fl_cuda_sumsq(const float *d_x, size_t n, fl_cuda_step_scalars_t *d_sc, void *stream,
                                   fl_err_t *err) {
    if (n == 0) return FL_OK;
    unsigned blocks = fl__cuda_grid_for(n);
    if (blocks > 1024) blocks = 1024; /* few atomics; each thread then sums several elements */
    sumsq_kernel<<<blocks, THREADS, 0, (cudaStream_t)stream>>>(d_x, n, d_sc);
    return fl__cuda_launched("sumsq", err);
}

extern "C" fl_status fl_cuda_step_finalize(const fl_cuda_optim_hyper_t *d_hyper, fl_cuda_step_scalars_t *d_sc,
                                           int check_loss, int apply, void *stream, fl_err_t *err) {
    finalize_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(d_hyper, d_sc, check_loss, apply);
    return fl__cuda_launched("step_finalize", err);
}

extern "C" fl_status fl_cuda_optim_apply(int kind, size_t n, float *d_params, const float *d_grads, float *d_state,
                                         const fl_cuda_optim_hyper_t *d_hyper, const fl_cuda_step_scalars_t *d_sc,
                                         void *stream, fl_err_t *err) {
    if (n == 0) return FL_OK;
    cudaStream_t s = (cudaStream_t)stream;
    switch (kind) {
    case FL_OPTIM_SGD:
        sgd_kernel<<<fl__cuda_grid_for(n), THREADS, 0, s>>>(n, d_params, d_grads, d_state, d_hyper, d_sc);
        return fl__cuda_launched("sgd", err);
    case FL_OPTIM_ADAM:
        adam_kernel<<<fl__cuda_grid_for(n), THREADS, 0, s>>>(n, d_params, d_grads, d_state, d_state + n, d_hyper, d_sc);
        return fl__cuda_launched("adam", err);
    case FL_OPTIM_RMSPROP:
        rmsprop_kernel<<<fl__cuda_grid_for(n), THREADS, 0, s>>>(n, d_params, d_grads, d_state, d_state + n,
                                                                 d_state + 2 * n, d_hyper, d_sc);
        return fl__cuda_launched("rmsprop", err);
    default: return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer kind %d: expected sgd, adam or rmsprop", kind);
    }
}
