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

__device__ __forceinline__ float to_float(float v, float) {
    return v;
}
__device__ __forceinline__ float to_float(uint8_t v, float scale) {
    return (float)v * scale;
}

// dst[i] = input_scale * convert(src[i]): the same layout (images stay (H, W, C)).
template <typename T>
__global__ void obs_to_input_kernel(const T *__restrict__ src, size_t total, float obs_scale, float input_scale,
                                    float *__restrict__ dst) {
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < total; o += (size_t)gridDim.x * blockDim.x)
        dst[o] = input_scale * to_float(src[o], obs_scale);
}

// Blocks of (ROW_TILE_X, ROW_TILE_Y) threads over a row-major (R, C) matrix: x runs along
// a row's columns (coalesced), y over rows.
constexpr int ROW_TILE_X = 32, ROW_TILE_Y = 8;

// y (R, C) += b (C) on every row.
__global__ void bias_add_kernel(float *__restrict__ y, const float *__restrict__ b, size_t R, int C) {
    for (size_t r = blockIdx.x * (size_t)ROW_TILE_Y + threadIdx.y; r < R; r += (size_t)gridDim.x * ROW_TILE_Y) {
        float *row = y + r * (size_t)C;
        for (int c = (int)threadIdx.x; c < C; c += ROW_TILE_X) row[c] += b[c];
    }
}

// Column sums of dy (R, C) over the rows of chunk blockIdx.y ([k R / chunks, (k + 1) R /
// chunks)), for the columns of tile blockIdx.x, into out[k * C + c]. The order of the sums
// depends only on R, C and chunks: the result is the same on every run.
__global__ void column_sums_kernel(const float *__restrict__ dy, size_t R, int C, int chunks, float *__restrict__ out) {
    __shared__ float sh[ROW_TILE_Y][ROW_TILE_X];
    const int c = (int)(blockIdx.x * ROW_TILE_X + threadIdx.x);
    const size_t k = blockIdx.y, r0 = k * R / (size_t)chunks, r1 = (k + 1) * R / (size_t)chunks;
    float acc = 0.0f;
    if (c < C)
        for (size_t r = r0 + threadIdx.y; r < r1; r += ROW_TILE_Y) acc += dy[r * (size_t)C + (size_t)c];
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s = sh[0][threadIdx.x];
        for (int j = 1; j < ROW_TILE_Y; j++) s += sh[j][threadIdx.x];
        out[k * (size_t)C + (size_t)c] = s;
    }
}

// db[c] = sum over k of part[k * C + c], k in order.
__global__ void chunk_sums_kernel(const float *__restrict__ part, int C, int chunks, float *__restrict__ db) {
    for (int c = (int)(blockIdx.x * blockDim.x + threadIdx.x); c < C; c += (int)(gridDim.x * blockDim.x)) {
        float s = 0.0f;
        for (int k = 0; k < chunks; k++) s += part[(size_t)k * (size_t)C + (size_t)c];
        db[c] = s;
    }
}

// dst (N, Q, P) from src (N, P, Q): TILE x TILE tiles through shared memory, both sides
// coalesced; blockIdx.z runs over n (grid-stride beyond 65535).
constexpr int TILE = 32;
__global__ void transpose_kernel(const float *__restrict__ src, int N, int P, int Q, float *__restrict__ dst) {
    __shared__ float t[TILE][TILE + 1];
    const size_t plane = (size_t)P * (size_t)Q;
    for (int n = (int)blockIdx.z; n < N; n += (int)gridDim.z) {
        const float *s = src + (size_t)n * plane;
        float *o = dst + (size_t)n * plane;
        const int p0 = (int)blockIdx.y * TILE, q0 = (int)blockIdx.x * TILE;
        for (int j = (int)threadIdx.y; j < TILE; j += ROW_TILE_Y) {
            const int p = p0 + j, q = q0 + (int)threadIdx.x;
            if (p < P && q < Q) t[j][threadIdx.x] = s[(size_t)p * (size_t)Q + (size_t)q];
        }
        __syncthreads();
        for (int j = (int)threadIdx.y; j < TILE; j += ROW_TILE_Y) {
            const int q = q0 + j, p = p0 + (int)threadIdx.x;
            if (p < P && q < Q) o[(size_t)q * (size_t)P + (size_t)p] = t[threadIdx.x][j];
        }
        __syncthreads();
    }
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
                                const float *__restrict__ weights, int B, int A, float delta, float *__restrict__ prio,
                                float *__restrict__ dq, float *__restrict__ y_out, float *__restrict__ q_out,
                                fl_cuda_step_scalars_t *sc) {
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
                            float *__restrict__ v, const fl_cuda_optim_hyper_t *hp, const fl_cuda_step_scalars_t *sc) {
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

__global__ void rmsprop_kernel(size_t n, float *__restrict__ p, const float *__restrict__ grads, float *__restrict__ ms,
                               float *__restrict__ mg, float *__restrict__ mom, const fl_cuda_optim_hyper_t *hp,
                               const fl_cuda_step_scalars_t *sc) {
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

extern "C" fl_status fl__cuda_obs_to_input(const void *d_src, int is_uint8, size_t total, float obs_scale,
                                           float input_scale, float *d_dst, void *stream, fl_err_t *err) {
    if (total == 0) return FL_OK;
    if (is_uint8)
        obs_to_input_kernel<uint8_t><<<fl__cuda_grid_for(total), THREADS, 0, (cudaStream_t)stream>>>(
            (const uint8_t *)d_src, total, obs_scale, input_scale, d_dst);
    else
        obs_to_input_kernel<float><<<fl__cuda_grid_for(total), THREADS, 0, (cudaStream_t)stream>>>(
            (const float *)d_src, total, obs_scale, input_scale, d_dst);
    return fl__cuda_launched("obs_to_input", err);
}

extern "C" fl_status fl__cuda_bias_add(float *d_y, const float *d_b, size_t R, int C, void *stream, fl_err_t *err) {
    if (R == 0 || C < 1) return FL_OK;
    size_t blocks = (R + ROW_TILE_Y - 1) / ROW_TILE_Y;
    if (blocks > 65535) blocks = 65535;
    bias_add_kernel<<<(unsigned)blocks, dim3(ROW_TILE_X, ROW_TILE_Y), 0, (cudaStream_t)stream>>>(d_y, d_b, R, C);
    return fl__cuda_launched("bias_add", err);
}

extern "C" int fl__cuda_bias_grad_chunks(size_t R, int C) {
    if (R == 0 || C < 1) return 1;
    size_t chunks = R / 64; /* at least 64 rows a chunk */
    if (chunks > 1024) chunks = 1024;
    if (chunks > FL_CUDA_REDUCE_FLOATS / (size_t)C) chunks = FL_CUDA_REDUCE_FLOATS / (size_t)C;
    return chunks < 1 ? 1 : (int)chunks;
}

extern "C" fl_status fl__cuda_bias_grad(const float *d_dy, size_t R, int C, float *d_db, float *d_scratch, void *stream,
                                        fl_err_t *err) {
    if (C < 1) return FL_OK;
    if (R == 0) { /* no rows: the sums are zero */
        const cudaError_t e = cudaMemsetAsync(d_db, 0, (size_t)C * sizeof(float), (cudaStream_t)stream);
        if (e == cudaSuccess) return FL_OK;
        return fl_err_set(err, FL_INTERNAL, "bias_grad: cudaMemsetAsync: %s", cudaGetErrorString(e));
    }
    const int chunks = fl__cuda_bias_grad_chunks(R, C);
    const dim3 grid((unsigned)((C + ROW_TILE_X - 1) / ROW_TILE_X), (unsigned)chunks);
    column_sums_kernel<<<grid, dim3(ROW_TILE_X, ROW_TILE_Y), 0, (cudaStream_t)stream>>>(d_dy, R, C, chunks,
                                                                                        chunks > 1 ? d_scratch : d_db);
    FL_TRY(fl__cuda_launched("bias_grad (column sums)", err));
    if (chunks == 1) return FL_OK;
    chunk_sums_kernel<<<fl__cuda_grid_for((size_t)C), THREADS, 0, (cudaStream_t)stream>>>(d_scratch, C, chunks, d_db);
    return fl__cuda_launched("bias_grad (chunk sums)", err);
}

extern "C" int fl__cuda_transpose_fits(int P, int Q) {
    return P <= FL_CUDA_TRANSPOSE_MAX_P && Q <= FL_CUDA_TRANSPOSE_MAX_P;
}

extern "C" fl_status fl__cuda_transpose(const float *d_src, int N, int P, int Q, float *d_dst, void *stream,
                                        fl_err_t *err) {
    if (N < 1 || P < 1 || Q < 1) return FL_OK;
    if (!fl__cuda_transpose_fits(P, Q))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "transpose: (%d, %d, %d): P and Q must be at most %d", N, P, Q,
                          FL_CUDA_TRANSPOSE_MAX_P);
    const dim3 grid((unsigned)((Q + TILE - 1) / TILE), (unsigned)((P + TILE - 1) / TILE),
                    (unsigned)(N < 65535 ? N : 65535));
    transpose_kernel<<<grid, dim3(TILE, ROW_TILE_Y), 0, (cudaStream_t)stream>>>(d_src, N, P, Q, d_dst);
    return fl__cuda_launched("transpose", err);
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

extern "C" fl_status fl_cuda_dqn_head(const float *d_q_next_online, const float *d_q_next_target, const float *d_q_obs,
                                      const int32_t *d_actions, const float *d_rewards, const float *d_discounts,
                                      const float *d_weights, int B, int A, float huber_delta, float *d_priorities,
                                      float *d_dq, float *d_y, float *d_q_taken, fl_cuda_step_scalars_t *d_sc,
                                      void *stream, fl_err_t *err) {
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
