/* dqn_cuda_internal: what the GPU update's two files share: dqn_cuda.c (create, destroy,
 * the update) and dqn_cuda_state.c (parameters, optimizer state, snapshots). The design
 * is at the top of dqn_cuda.c. Not for use outside learner/. */
#ifndef FL_LEARNER_DQN_CUDA_INTERNAL_H
#define FL_LEARNER_DQN_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/qnet.h"
#include "learner/dqn_cuda.h"

typedef struct glayer {
    fl_qnet_layer_kind kind;
    int units;            /* dense: outputs; dueling: actions */
    int in_c, in_h, in_w; /* per-sample input shape (C, H, W) */
    int out_c, out_h, out_w;
    size_t in_size, out_size;
    int cout, k, stride, pad; /* conv */
    size_t w_off, b_off;
    char prefix[24];
    fl_cuda_conv_t *conv;
    const float *x; /* device input (max_batch, in_size): the previous layer's output or the network input */
    float *y;       /* device output (max_batch, out_size); flatten: its input (or xt); the last layer: NULL (q) */
    /* The input arrives channels-last (B, H, W, C) (images and convolutions' outputs are)
     * and this layer reads it in qnet's (C, H, W) order: xt (max_batch, in_size) holds it
     * transposed, and the input gradient is transposed back. */
    int from_nhwc;
    float *xt;
} glayer_t;

typedef struct graph_entry { /* one (batch size, kind of call); exec NULL until captured */
    int B, apply;
    int eager; /* its capture failed: it runs eagerly from then on */
    cudaGraphExec_t exec;
} graph_entry_t;

typedef struct slot_mem {
    void *obs, *next_obs;
    int32_t *actions;
    float *rewards, *discounts, *weights;
} slot_mem_t;

struct fl_cuda_dqn {
    fl_cuda_dqn_config_t cfg;
    char *spec;
    int image; /* rank-3 observations: (H, W, C) images */
    int obs_dim, A, max_batch;
    size_t obs_elem; /* bytes per observation element */
    size_t n;        /* parameters */
    int opt_slots;
    int opt_kernel; /* fl_cuda_optim_apply's id of the optimizer (fl_optim_cuda_kernel) */
    int num_layers;
    glayer_t layers[FL_QNET_MAX_LAYERS];
    size_t widest;

    cudaStream_t cs, copy, side;
    cudaEvent_t ev_copied, ev_params, ev_shadow, ev_snap;
    /* staged uploads (fl_cuda_dqn_upload): device copies of batches on their way in */
    slot_mem_t stage[FL_CUDA_DQN_STAGES];
    int stage_B[FL_CUDA_DQN_STAGES]; /* items uploaded into the stage, 0 = none */
    cudaEvent_t ev_staged[FL_CUDA_DQN_STAGES], ev_stage_free[FL_CUDA_DQN_STAGES];
    int next_stage;
    int launched_B; /* fl_cuda_dqn_launch's batch awaiting fl_cuda_dqn_finish, 0 = none */
    fl_cuda_ctx_t *ctx;
    int cur_batch; /* B the convolutions are set up for */
    unsigned ws_gen;

    /* device */
    void *allocs[64 + 2 * FL_QNET_MAX_LAYERS]; /* fixed buffers, then per layer its output and xt */
    int num_allocs;
    float *d_params, *d_target, *d_grads, *d_state, *d_shadow;
    void *d_obs, *d_next;
    int32_t *d_actions;
    float *d_rewards, *d_discounts, *d_weights;
    float *d_x0;                 /* (max_batch, obs_dim) network input, (H, W, C) per image */
    float *d_va, *d_dva;         /* (max_batch, 1 + A) dueling streams and their gradient */
    float *d_qno, *d_qnt, *d_qo; /* (max_batch, A) */
    float *d_dq;                 /* (max_batch, A) */
    float *d_prio, *d_y, *d_qt;  /* (max_batch) */
    float *d_g[2];               /* (max_batch, widest) */
    fl_cuda_optim_hyper_t *d_hyper;
    fl_cuda_step_scalars_t *d_sc;
    fl_cuda_optim_hyper_t hyper; /* host copy */

    /* pinned host */
    slot_mem_t slots[FL_CUDA_DQN_MAX_SLOTS];
    int num_slots;
    float *h_prio;
    fl_cuda_step_scalars_t *h_sc;
    float *h_snap;
    int snap_started;

    graph_entry_t graphs[FL_CUDA_DQN_MAX_GRAPHS];
    int num_graphs;
};

/* A CUDA call's error as FL_INTERNAL naming the call (and cleared, so that it stays out of
 * the next launch check). */
static inline fl_status cuda_check(cudaError_t e, const char *what, fl_err_t *err) {
    if (e == cudaSuccess) return FL_OK;
    (void)cudaGetLastError(); /* keep a failed call's error out of the next launch check */
    return fl_err_set(err, FL_INTERNAL, "dqn_cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Waits for the compute stream. */
static inline fl_status sync_cs(fl_cuda_dqn_t *d, fl_err_t *err) {
    return cuda_check(cudaStreamSynchronize(d->cs), "cudaStreamSynchronize", err);
}

#endif
