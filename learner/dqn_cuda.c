/* dqn_cuda: the learner's double-DQN update on the GPU (see dqn_cuda.h).
 *
 * The network is the layer table of a CPU fl_qnet_t built from the same spec
 * (fl_qnet_layer: kinds, shapes, parameter offsets and view names), so the spec is
 * parsed once, by kernels/qnet.c. Activations live in one device
 * buffer per layer for max_batch samples (flatten aliases its input, or a transposing
 * flatten's xt, setup_layers); the three
 * forwards of an update share them, so the last one (online on obs) leaves the
 * activations the backward needs, as on the CPU. Gradients flow backward through two
 * ping-pong buffers.
 *
 * Streams: `cs` computes, `copy` carries the input slot to the device, `side` makes
 * parameter snapshots. Every call that returns results synchronizes `cs` before it
 * returns, so the device input buffers are free again when the next copy starts.
 *
 * Per-step scalars (loss, norm, clip factor, skip flag, step count, Adam's bias
 * corrections) stay on the device (fl_cuda_step_scalars_t): the finalize kernel decides,
 * the optimizer kernel obeys, and a captured graph replays correctly. */
#include "learner/dqn_cuda.h"
#include "learner/dqn_cuda_internal.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/qnet.h"

void fl_cuda_dqn_config_init(fl_cuda_dqn_config_t *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->obs.rank = 1;
    cfg->obs.shape[0] = 1;
    cfg->obs.dtype = FL_DTYPE_FLOAT32;
    cfg->obs_scale = 1.0f / 255.0f;
    cfg->input_scale = 1.0f;
    cfg->num_actions = 1;
    cfg->max_batch = 1;
    cfg->huber_delta = 1.0f;
    cfg->grad_clip = 40.0f;
    cfg->optim = fl_optim_config_default(FL_OPTIM_RMSPROP);
    cfg->tf32 = 1;
    cfg->use_graph = 1;
    cfg->device = 0;
    cfg->num_slots = 2;
}

/* ---- the layer table ---------------------------------------------------------------- */

/* Builds d->layers from the CPU network q's layer table (kernels/qnet.h): the same
 * layers, shapes and parameter offsets, from the one parse of the spec. */
static fl_status build_layers(fl_cuda_dqn_t *d, const fl_qnet_t *q, fl_err_t *err) {
    const int count = fl_qnet_num_layers(q);
    if (count < 1 || count > FL_QNET_MAX_LAYERS)
        return fl_err_set(err, FL_INTERNAL, "dqn_cuda: qnet has %d layers (expected 1..%d)", count, FL_QNET_MAX_LAYERS);
    d->widest = (size_t)d->obs_dim;
    for (int i = 0; i < count; i++) {
        fl_qnet_layer_t ql;
        if (fl_qnet_layer(q, i, &ql) != 0) return fl_err_set(err, FL_INTERNAL, "dqn_cuda: qnet layer %d missing", i);
        glayer_t *l = &d->layers[i];
        memset(l, 0, sizeof *l);
        l->kind = ql.kind;
        l->units = ql.units;
        l->in_c = ql.in_c, l->in_h = ql.in_h, l->in_w = ql.in_w;
        l->out_c = ql.out_c, l->out_h = ql.out_h, l->out_w = ql.out_w;
        l->cout = ql.cout, l->k = ql.k, l->stride = ql.stride, l->pad = ql.pad;
        l->w_off = ql.w_off, l->b_off = ql.b_off;
        snprintf(l->prefix, sizeof l->prefix, "%s", ql.prefix);
        l->in_size = (size_t)l->in_c * (size_t)l->in_h * (size_t)l->in_w;
        l->out_size = (size_t)l->out_c * (size_t)l->out_h * (size_t)l->out_w;
        if (l->out_size > d->widest) d->widest = l->out_size;
    }
    d->num_layers = count;
    if (d->layers[count - 1].out_size != (size_t)d->A)
        return fl_err_set(err, FL_INTERNAL, "dqn_cuda: the head has %zu outputs, expected %d",
                          d->layers[count - 1].out_size, d->A);
    d->n = fl_qnet_num_params(q);
    return FL_OK;
}

/* ---- create / destroy --------------------------------------------------------------- */

static fl_status dev_alloc(fl_cuda_dqn_t *d, void **p, size_t bytes, fl_err_t *err) {
    *p = NULL;
    if (d->num_allocs >= (int)(sizeof d->allocs / sizeof d->allocs[0]))
        return fl_err_set(err, FL_INTERNAL, "dqn_cuda: too many device buffers");
    FL_TRY(cuda_check(cudaMalloc(p, bytes ? bytes : 4), "cudaMalloc", err));
    d->allocs[d->num_allocs++] = *p;
    return cuda_check(cudaMemsetAsync(*p, 0, bytes ? bytes : 4, d->cs), "cudaMemsetAsync", err);
}

static fl_status check_config(const fl_cuda_dqn_config_t *c, fl_err_t *err) {
    if (!c->spec) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: spec must not be NULL");
    if (c->obs.rank < 1 || c->obs.rank > 4)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: obs_rank = %d (expected 1..4)", c->obs.rank);
    for (int i = 0; i < c->obs.rank; i++)
        if (c->obs.shape[i] < 1)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: obs_shape[%d] = %d (expected >= 1)", i,
                              c->obs.shape[i]);
    if (c->obs.dtype != FL_DTYPE_FLOAT32 && c->obs.dtype != FL_DTYPE_UINT8)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: obs_dtype %s (expected float32 or uint8)",
                          fl_dtype_name(c->obs.dtype));
    if (!(c->obs_scale == c->obs_scale) || !(c->input_scale == c->input_scale))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: obs_scale and input_scale must not be NaN");
    if (c->num_actions < 1 || c->num_actions > FL_QNET_MAX_UNITS)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: num_actions = %d (expected 1..%d)", c->num_actions,
                          FL_QNET_MAX_UNITS);
    if (c->max_batch < 1 || c->max_batch > (1 << 20))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: max_batch = %d (expected 1..%d)", c->max_batch, 1 << 20);
    if (!(c->huber_delta > 0) || c->huber_delta > 3.0e38f)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: huber_delta = %g (expected a finite value > 0)",
                          (double)c->huber_delta);
    if (!(c->grad_clip >= 0) || c->grad_clip > 3.0e38f)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: grad_clip = %g (expected a finite value >= 0)",
                          (double)c->grad_clip);
    if (c->num_slots < 1 || c->num_slots > FL_CUDA_DQN_MAX_SLOTS)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: num_slots = %d (expected 1..%d)", c->num_slots,
                          FL_CUDA_DQN_MAX_SLOTS);
    if (c->device < 0) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: device = %d (expected >= 0)", c->device);
    return FL_OK;
}

/* A fresh optimizer state on the device (kernels/optim.c's initial values: RMSProp's ms
 * starts at one) and step 0. */
static fl_status reset_optim(fl_cuda_dqn_t *d, fl_err_t *err) {
    const size_t total = (size_t)d->opt_slots * d->n;
    float *h = calloc(total, sizeof(float));
    if (!h) return fl_err_set(err, FL_NO_MEMORY, "dqn_cuda: out of memory");
    fl_optim_state_init(d->cfg.optim.kind, h, d->n);
    fl_status st = fl_cuda_dqn_set_optim_state(d, h, total, 0, err);
    free(h);
    return st;
}

/* Streams, events and the cuBLAS/cuDNN context on config.device. */
static fl_status create_streams(fl_cuda_dqn_t *d, fl_err_t *err) {
    fl_status st = FL_OK;
    if ((st = cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err)) != FL_OK ||
        (st = cuda_check(cudaStreamCreateWithFlags(&d->cs, cudaStreamNonBlocking), "cudaStreamCreate", err)) != FL_OK ||
        (st = cuda_check(cudaStreamCreateWithFlags(&d->copy, cudaStreamNonBlocking), "cudaStreamCreate", err)) !=
            FL_OK ||
        (st = cuda_check(cudaStreamCreateWithFlags(&d->side, cudaStreamNonBlocking), "cudaStreamCreate", err)) !=
            FL_OK ||
        (st = cuda_check(cudaEventCreateWithFlags(&d->ev_copied, cudaEventDisableTiming), "cudaEventCreate", err)) !=
            FL_OK ||
        (st = cuda_check(cudaEventCreateWithFlags(&d->ev_params, cudaEventDisableTiming), "cudaEventCreate", err)) !=
            FL_OK ||
        (st = cuda_check(cudaEventCreateWithFlags(&d->ev_shadow, cudaEventDisableTiming), "cudaEventCreate", err)) !=
            FL_OK ||
        (st = cuda_check(cudaEventCreateWithFlags(&d->ev_snap, cudaEventDisableTiming), "cudaEventCreate", err)) !=
            FL_OK)
        return st;
    for (int k = 0; k < FL_CUDA_DQN_STAGES; k++)
        if ((st = cuda_check(cudaEventCreateWithFlags(&d->ev_staged[k], cudaEventDisableTiming), "cudaEventCreate",
                             err)) != FL_OK ||
            (st = cuda_check(cudaEventCreateWithFlags(&d->ev_stage_free[k], cudaEventDisableTiming), "cudaEventCreate",
                             err)) != FL_OK)
            return st;
    FL_TRY(fl_cuda_ctx_create(d->cfg.tf32, d->cs, &d->ctx, err));
    fl_cuda_ctx_set_benchmark(d->ctx, d->cfg.cudnn_benchmark);
    return FL_OK;
}

/* Device buffers: parameters, gradients, optimizer state, the batch and its staging
 * copies, the head's buffers, the per-step scalars. */
static fl_status alloc_device(fl_cuda_dqn_t *d, fl_err_t *err) {
    fl_status st = FL_OK;
    const size_t B = (size_t)d->max_batch, D = (size_t)d->obs_dim, A = (size_t)d->A, F = sizeof(float);
    const size_t N = d->n;
    if ((st = dev_alloc(d, (void **)&d->d_params, N * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_target, N * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_grads, N * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_shadow, N * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_state, (size_t)d->opt_slots * N * F, err)) != FL_OK ||
        (st = dev_alloc(d, &d->d_obs, B * D * d->obs_elem, err)) != FL_OK ||
        (st = dev_alloc(d, &d->d_next, B * D * d->obs_elem, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_actions, B * sizeof(int32_t), err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_rewards, B * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_discounts, B * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_weights, B * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_x0, B * D * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_va, B * (A + 1) * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_dva, B * (A + 1) * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_qno, B * A * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_qnt, B * A * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_qo, B * A * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_dq, B * A * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_prio, B * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_y, B * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_qt, B * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_g[0], B * d->widest * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_g[1], B * d->widest * F, err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_hyper, sizeof(fl_cuda_optim_hyper_t), err)) != FL_OK ||
        (st = dev_alloc(d, (void **)&d->d_sc, sizeof(fl_cuda_step_scalars_t), err)) != FL_OK)
        return st;
    for (int k = 0; k < FL_CUDA_DQN_STAGES; k++) {
        slot_mem_t *m = &d->stage[k];
        if ((st = dev_alloc(d, &m->obs, B * D * d->obs_elem, err)) != FL_OK ||
            (st = dev_alloc(d, &m->next_obs, B * D * d->obs_elem, err)) != FL_OK ||
            (st = dev_alloc(d, (void **)&m->actions, B * sizeof(int32_t), err)) != FL_OK ||
            (st = dev_alloc(d, (void **)&m->rewards, B * F, err)) != FL_OK ||
            (st = dev_alloc(d, (void **)&m->discounts, B * F, err)) != FL_OK ||
            (st = dev_alloc(d, (void **)&m->weights, B * F, err)) != FL_OK)
            return st;
    }
    return FL_OK;
}

/* Activations and convolution descriptors for max_batch samples. Images and the
 * convolutions' outputs are channels-last (relu keeps whatever it gets); the first other
 * layer to read such a tensor with more than one pixel and channel reads it transposed
 * (from_nhwc), as (C, H, W), the order of qnet's flatten and dense weights. */
static fl_status setup_layers(fl_cuda_dqn_t *d, fl_err_t *err) {
    fl_status st = FL_OK;
    const size_t B = (size_t)d->max_batch, F = sizeof(float);
    const float *x = d->d_x0;
    int nhwc = d->image; /* the layout of x */
    for (int i = 0; i < d->num_layers; i++) {
        glayer_t *l = &d->layers[i];
        l->x = x;
        const int mixed = l->in_c > 1 && l->in_h * l->in_w > 1; /* (C, H, W) and (H, W, C) differ */
        if (nhwc && mixed && l->kind != FL_QNET_CONV && l->kind != FL_QNET_RELU) {
            if (!fl__cuda_transpose_fits(l->in_h * l->in_w, l->in_c))
                return fl_err_set(err, FL_INVALID_ARGUMENT,
                                  "dqn_cuda: layer %d (%s) reads %d x %d pixels of %d channels: over the GPU "
                                  "transpose's %d pixels (use a convolution first, or learner.device = cpu)",
                                  i, l->prefix, l->in_h, l->in_w, l->in_c, FL_CUDA_TRANSPOSE_MAX_P);
            l->from_nhwc = 1;
            if ((st = dev_alloc(d, (void **)&l->xt, B * l->in_size * F, err)) != FL_OK) return st;
        }
        if (l->kind == FL_QNET_FLATTEN) {
            l->y = l->from_nhwc ? l->xt : (float *)x; /* the same (C H W) floats, read as a vector */
        } else if (i < d->num_layers - 1) {
            if ((st = dev_alloc(d, (void **)&l->y, B * l->out_size * F, err)) != FL_OK) return st;
        }
        if (l->kind == FL_QNET_CONV)
            nhwc = 1;
        else if (l->kind != FL_QNET_RELU)
            nhwc = 0;
        x = l->y;
        if (l->kind == FL_QNET_CONV) {
            if ((st = fl_cuda_conv_create(d->ctx, l->in_c, l->in_h, l->in_w, l->cout, l->k, l->stride, l->pad, &l->conv,
                                          err)) != FL_OK ||
                (st = fl_cuda_conv_set_batch(d->ctx, l->conv, d->max_batch, err)) != FL_OK)
                return st;
        }
    }
    d->cur_batch = d->max_batch;
    d->ws_gen = fl_cuda_ctx_workspace_generation(d->ctx);
    return FL_OK;
}

/* Pinned host memory: the input slots, priorities, scalars and the snapshot. */
static fl_status alloc_pinned(fl_cuda_dqn_t *d, fl_err_t *err) {
    fl_status st = FL_OK;
    const size_t B = (size_t)d->max_batch, D = (size_t)d->obs_dim, F = sizeof(float);
    const size_t N = d->n;
    for (int s = 0; s < d->num_slots; s++) {
        slot_mem_t *m = &d->slots[s];
        if ((st = cuda_check(cudaHostAlloc(&m->obs, B * D * d->obs_elem, cudaHostAllocPortable), "cudaHostAlloc",
                             err)) != FL_OK ||
            (st = cuda_check(cudaHostAlloc(&m->next_obs, B * D * d->obs_elem, cudaHostAllocPortable), "cudaHostAlloc",
                             err)) != FL_OK ||
            (st = cuda_check(cudaHostAlloc((void **)&m->actions, B * sizeof(int32_t), cudaHostAllocPortable),
                             "cudaHostAlloc", err)) != FL_OK ||
            (st = cuda_check(cudaHostAlloc((void **)&m->rewards, B * F, cudaHostAllocPortable), "cudaHostAlloc",
                             err)) != FL_OK ||
            (st = cuda_check(cudaHostAlloc((void **)&m->discounts, B * F, cudaHostAllocPortable), "cudaHostAlloc",
                             err)) != FL_OK ||
            (st = cuda_check(cudaHostAlloc((void **)&m->weights, B * F, cudaHostAllocPortable), "cudaHostAlloc",
                             err)) != FL_OK)
            return st;
        memset(m->actions, 0, B * sizeof(int32_t));
        for (size_t i = 0; i < B; i++) m->weights[i] = 1.0f;
    }
    if ((st = cuda_check(cudaHostAlloc((void **)&d->h_prio, B * F, cudaHostAllocPortable), "cudaHostAlloc", err)) !=
            FL_OK ||
        (st = cuda_check(cudaHostAlloc((void **)&d->h_sc, sizeof *d->h_sc, cudaHostAllocPortable), "cudaHostAlloc",
                         err)) != FL_OK ||
        (st = cuda_check(cudaHostAlloc((void **)&d->h_snap, N * F, cudaHostAllocPortable), "cudaHostAlloc", err)) !=
            FL_OK)
        return st;
    return FL_OK;
}

/* The optimizer's hyperparameters and the clipping bound, to the device. */
static fl_status upload_hyper(fl_cuda_dqn_t *d, fl_err_t *err) {
    const fl_optim_config_t *o = &d->cfg.optim;
    d->hyper = (fl_cuda_optim_hyper_t){.kind = (int)o->kind,
                                       .lr = o->lr,
                                       .beta1 = o->beta1,
                                       .beta2 = o->beta2,
                                       .eps = o->eps,
                                       .decay = o->decay,
                                       .momentum = o->momentum,
                                       .grad_clip = d->cfg.grad_clip};
    return cuda_check(cudaMemcpyAsync(d->d_hyper, &d->hyper, sizeof d->hyper, cudaMemcpyHostToDevice, d->cs),
                      "cudaMemcpyAsync (hyperparameters)", err);
}

fl_status fl_cuda_dqn_create(const fl_cuda_dqn_config_t *cfg, fl_cuda_dqn_t **out, fl_err_t *err) {
    if (!cfg || !out) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL config or output");
    *out = NULL;
    FL_TRY(check_config(cfg, err));
    fl_optim_t *probe = NULL; /* validates the optimizer config with optim.c's own rules */
    FL_TRY(fl_optim_create(&cfg->optim, 1, &probe, err));
    const int opt_slots = fl_optim_num_slots(probe);
    fl_optim_destroy(probe);
    const int opt_kernel = fl_optim_cuda_kernel(cfg->optim.kind);
    if (opt_kernel < 0)
        return fl_err_set(err, FL_UNIMPLEMENTED,
                          "dqn_cuda: optimizer %s has no GPU version (expected one of "
                          "kernels/optim.c's optimizers with a fused kernel)",
                          fl_optim_kind_name(cfg->optim.kind));
    fl_qnet_t *q = NULL;
    FL_TRY(fl_qnet_create_for_obs(cfg->spec, cfg->obs.rank, cfg->obs.shape, cfg->num_actions, 1, &q, err));

    fl_status st = FL_OK;
    fl_cuda_dqn_t *d = calloc(1, sizeof *d);
    if (!d) {
        fl_qnet_destroy(q);
        return fl_err_set(err, FL_NO_MEMORY, "dqn_cuda: out of memory");
    }
    d->cfg = *cfg;
    d->spec = strdup(cfg->spec);
    d->cfg.spec = d->spec;
    d->A = cfg->num_actions;
    d->max_batch = cfg->max_batch;
    d->opt_slots = opt_slots;
    d->opt_kernel = opt_kernel;
    d->obs_dim = fl_qnet_obs_dim(q);
    d->obs_elem = cfg->obs.dtype == FL_DTYPE_UINT8 ? 1 : 4;
    d->num_slots = cfg->num_slots;
    d->image = cfg->obs.rank == 3;
    if (!d->spec) {
        st = fl_err_set(err, FL_NO_MEMORY, "dqn_cuda: out of memory");
        goto fail;
    }
    if ((st = build_layers(d, q, err)) != FL_OK) goto fail;
    fl_qnet_destroy(q);
    q = NULL;
    /* the layer table is checked before the device, so machines without one test it too */
    int ndev = 0;
    if ((st = fl_cuda_device_count(&ndev, err)) != FL_OK) goto fail;
    if (cfg->device >= ndev) {
        st = fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: device %d (expected 0..%d)", cfg->device, ndev - 1);
        goto fail;
    }

    if ((st = create_streams(d, err)) != FL_OK || (st = alloc_device(d, err)) != FL_OK ||
        (st = setup_layers(d, err)) != FL_OK || (st = alloc_pinned(d, err)) != FL_OK ||
        (st = upload_hyper(d, err)) != FL_OK || (st = reset_optim(d, err)) != FL_OK) /* reset synchronizes cs */
        goto fail;
    *out = d;
    return FL_OK;
fail:
    fl_qnet_destroy(q);
    fl_cuda_dqn_destroy(d);
    return st;
}

/* The captured graphs destroyed; the entries kept (which (B, kind) had its eager warm-up,
 * which runs eagerly for good), so that the next call of each is captured again. */
static void drop_captures(fl_cuda_dqn_t *d) {
    for (int i = 0; i < d->num_graphs; i++)
        if (d->graphs[i].exec) {
            cudaGraphExecDestroy(d->graphs[i].exec);
            d->graphs[i].exec = NULL;
        }
}

void fl_cuda_dqn_destroy(fl_cuda_dqn_t *d) {
    if (!d) return;
    if (cudaSetDevice(d->cfg.device) != cudaSuccess) cudaGetLastError(); /* e.g. no device: nothing to free there */
    if (d->cs) cudaStreamSynchronize(d->cs);
    if (d->copy) cudaStreamSynchronize(d->copy);
    if (d->side) cudaStreamSynchronize(d->side);
    drop_captures(d);
    for (int i = 0; i < d->num_layers; i++) fl_cuda_conv_destroy(d->layers[i].conv);
    fl_cuda_ctx_destroy(d->ctx);
    for (int i = 0; i < d->num_allocs; i++) cudaFree(d->allocs[i]);
    for (int s = 0; s < FL_CUDA_DQN_MAX_SLOTS; s++) {
        slot_mem_t *m = &d->slots[s];
        if (m->obs) cudaFreeHost(m->obs);
        if (m->next_obs) cudaFreeHost(m->next_obs);
        if (m->actions) cudaFreeHost(m->actions);
        if (m->rewards) cudaFreeHost(m->rewards);
        if (m->discounts) cudaFreeHost(m->discounts);
        if (m->weights) cudaFreeHost(m->weights);
    }
    if (d->h_prio) cudaFreeHost(d->h_prio);
    if (d->h_sc) cudaFreeHost(d->h_sc);
    if (d->h_snap) cudaFreeHost(d->h_snap);
    if (d->ev_copied) cudaEventDestroy(d->ev_copied);
    if (d->ev_params) cudaEventDestroy(d->ev_params);
    if (d->ev_shadow) cudaEventDestroy(d->ev_shadow);
    if (d->ev_snap) cudaEventDestroy(d->ev_snap);
    for (int k = 0; k < FL_CUDA_DQN_STAGES; k++) {
        if (d->ev_staged[k]) cudaEventDestroy(d->ev_staged[k]);
        if (d->ev_stage_free[k]) cudaEventDestroy(d->ev_stage_free[k]);
    }
    if (d->cs) cudaStreamDestroy(d->cs);
    if (d->copy) cudaStreamDestroy(d->copy);
    if (d->side) cudaStreamDestroy(d->side);
    free(d->spec);
    free(d);
}

size_t fl_cuda_dqn_num_params(const fl_cuda_dqn_t *d) {
    return d->n;
}
int fl_cuda_dqn_obs_dim(const fl_cuda_dqn_t *d) {
    return d->obs_dim;
}
int fl_cuda_dqn_num_slots(const fl_cuda_dqn_t *d) {
    return d->num_slots;
}
int fl_cuda_dqn_graphs(const fl_cuda_dqn_t *d) {
    int n = 0;
    for (int i = 0; i < d->num_graphs; i++) n += d->graphs[i].exec != NULL;
    return n;
}

fl_status fl_cuda_dqn_slot(fl_cuda_dqn_t *d, int slot, fl_cuda_dqn_slot_t *out, fl_err_t *err) {
    if (!d || !out) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL argument");
    if (slot < 0 || slot >= d->num_slots)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: slot %d (expected 0..%d)", slot, d->num_slots - 1);
    const slot_mem_t *m = &d->slots[slot];
    *out = (fl_cuda_dqn_slot_t){m->obs, m->next_obs, m->actions, m->rewards, m->discounts, m->weights};
    return FL_OK;
}

/* ---- the update ----------------------------------------------------------------------- */

/* Q(x0) of the network with parameters p into q (B, A); keeps every activation. */
static fl_status forward(fl_cuda_dqn_t *d, const float *p, int B, float *q, fl_err_t *err) {
    for (int i = 0; i < d->num_layers; i++) {
        glayer_t *l = &d->layers[i];
        float *y = i == d->num_layers - 1 ? q : l->y;
        const float *x = l->x;
        if (l->from_nhwc) { /* (B, HW, C) -> (B, C, HW) */
            FL_TRY(fl__cuda_transpose(l->x, B, l->in_h * l->in_w, l->in_c, l->xt, d->cs, err));
            x = l->xt;
        }
        switch (l->kind) {
        case FL_QNET_DENSE:
            FL_TRY(fl_cuda_dense_forward(d->ctx, x, p + l->w_off, p + l->b_off, B, (int)l->in_size, l->units, y, err));
            break;
        case FL_QNET_RELU: FL_TRY(fl_cuda_relu_forward(l->x, y, (size_t)B * l->out_size, d->cs, err)); break;
        case FL_QNET_CONV:
            FL_TRY(fl_cuda_conv_forward(d->ctx, l->conv, l->x, p + l->w_off, p + l->b_off, y, err));
            break;
        case FL_QNET_FLATTEN: break; /* y aliases x (or xt) */
        case FL_QNET_DUELING:
            FL_TRY(fl_cuda_dense_forward(d->ctx, x, p + l->w_off, p + l->b_off, B, (int)l->in_size, l->units + 1,
                                         d->d_va, err));
            FL_TRY(fl_cuda_dueling_combine_forward(d->d_va, B, l->units, y, d->cs, err));
            break;
        }
    }
    return FL_OK;
}

/* A dense layer's (or the dueling head's, out = A + 1) backward from dy (B, out): its
 * weight and bias gradients into g, its input gradient into dx unless NULL. A layer that
 * read its input transposed (from_nhwc) computes dx in (C, H, W) order into xt, once the
 * weight gradient no longer needs xt, and transposes it back to (H, W, C). */
static fl_status dense_backward(fl_cuda_dqn_t *d, const glayer_t *l, const float *p, const float *dy, int B, int out,
                                float *dx, float *g, fl_err_t *err) {
    if (!l->from_nhwc)
        return fl_cuda_dense_backward(d->ctx, l->x, p + l->w_off, dy, B, (int)l->in_size, out, dx, g + l->w_off,
                                      g + l->b_off, err);
    FL_TRY(fl_cuda_dense_backward(d->ctx, l->xt, p + l->w_off, dy, B, (int)l->in_size, out, NULL, g + l->w_off,
                                  g + l->b_off, err));
    if (!dx) return FL_OK;
    FL_TRY(fl_cuda_dense_backward(d->ctx, NULL, p + l->w_off, dy, B, (int)l->in_size, out, l->xt, NULL, NULL, err));
    return fl__cuda_transpose(l->xt, B, l->in_c, l->in_h * l->in_w, dx, d->cs, err);
}

/* d_grads = dLoss/dparams of the online network from d_dq (B, A) and the activations of
 * the last forward. The first layer computes no input gradient, as on the CPU. */
static fl_status backward(fl_cuda_dqn_t *d, int B, fl_err_t *err) {
    const float *p = d->d_params;
    float *g = d->d_grads;
    const float *dy = d->d_dq;
    int which = 0;
    for (int i = d->num_layers - 1; i >= 0; i--) {
        glayer_t *l = &d->layers[i];
        /* flatten: the gradient passes through unchanged, or transposed back */
        if (l->kind == FL_QNET_FLATTEN && !l->from_nhwc) continue;
        float *dx = i > 0 ? d->d_g[which] : NULL;
        switch (l->kind) {
        case FL_QNET_DENSE: FL_TRY(dense_backward(d, l, p, dy, B, l->units, dx, g, err)); break;
        case FL_QNET_RELU:
            if (dx) FL_TRY(fl_cuda_relu_backward(l->y, dy, dx, (size_t)B * l->out_size, d->cs, err));
            break;
        case FL_QNET_CONV:
            FL_TRY(fl_cuda_conv_backward(d->ctx, l->conv, l->x, p + l->w_off, dy, dx, g + l->w_off, g + l->b_off, err));
            break;
        case FL_QNET_DUELING:
            FL_TRY(fl_cuda_dueling_combine_backward(dy, B, l->units, d->d_dva, d->cs, err));
            FL_TRY(dense_backward(d, l, p, d->d_dva, B, l->units + 1, dx, g, err));
            break;
        case FL_QNET_FLATTEN: /* from_nhwc: (B, C, HW) -> (B, HW, C) */
            if (dx) FL_TRY(fl__cuda_transpose(dy, B, l->in_c, l->in_h * l->in_w, dx, d->cs, err));
            break;
        }
        dy = dx;
        which ^= 1;
    }
    return FL_OK;
}

static fl_status to_input(fl_cuda_dqn_t *d, const void *src, int B, fl_err_t *err) {
    const int is_u8 = d->cfg.obs.dtype == FL_DTYPE_UINT8;
    /* images stay (H, W, C): the convolutions take channels-last tensors */
    return fl__cuda_obs_to_input(src, is_u8, (size_t)B * (size_t)d->obs_dim, d->cfg.obs_scale, d->cfg.input_scale,
                                 d->d_x0, d->cs, err);
}

/* Everything after the input copy, enqueued on cs (captured into a graph or not). */
static fl_status enqueue_update(fl_cuda_dqn_t *d, int B, int apply, fl_err_t *err) {
    FL_TRY(cuda_check(cudaMemsetAsync(&d->d_sc->sumsq, 0, sizeof(double), d->cs), "cudaMemsetAsync", err));
    FL_TRY(to_input(d, d->d_next, B, err));
    FL_TRY(forward(d, d->d_params, B, d->d_qno, err));
    FL_TRY(forward(d, d->d_target, B, d->d_qnt, err));
    FL_TRY(to_input(d, d->d_obs, B, err));
    FL_TRY(forward(d, d->d_params, B, d->d_qo, err));
    FL_TRY(fl_cuda_dqn_head(d->d_qno, d->d_qnt, d->d_qo, d->d_actions, d->d_rewards, d->d_discounts, d->d_weights, B,
                            d->A, d->cfg.huber_delta, d->d_prio, d->d_dq, d->d_y, d->d_qt, d->d_sc, d->cs, err));
    FL_TRY(backward(d, B, err));
    FL_TRY(fl_cuda_sumsq(d->d_grads, d->n, d->d_sc, d->cs, err));
    FL_TRY(fl_cuda_step_finalize(d->d_hyper, d->d_sc, 1, apply, d->cs, err));
    if (apply)
        FL_TRY(fl_cuda_optim_apply(d->opt_kernel, d->n, d->d_params, d->d_grads, d->d_state, d->d_hyper, d->d_sc, d->cs,
                                   err));
    return FL_OK;
}

/* Convolutions set up for B; the captured graphs dropped if the workspace moved (they
 * hold its old address). */
static fl_status prepare_batch(fl_cuda_dqn_t *d, int B, fl_err_t *err) {
    if (d->cur_batch != B) {
        d->cur_batch = 0; /* until every layer is set for B: a failure half way leaves no layer trusted */
        for (int i = 0; i < d->num_layers; i++)
            if (d->layers[i].conv) FL_TRY(fl_cuda_conv_set_batch(d->ctx, d->layers[i].conv, B, err));
        d->cur_batch = B;
    }
    const unsigned gen = fl_cuda_ctx_workspace_generation(d->ctx);
    if (gen != d->ws_gen) {
        drop_captures(d);
        d->ws_gen = gen;
    }
    return FL_OK;
}

/* A graph replays what it captured (the convolutions' algorithms included), so only
 * eager runs and captures need the descriptors set for B. The first call for a (B,
 * kind) runs eagerly and only the second is captured: the eager run is the warm-up that
 * lets cuBLAS, cuDNN and the driver do their lazy first-use work (plans, module loading)
 * outside the capture, where allocation and synchronization are not allowed. */
static fl_status run_update(fl_cuda_dqn_t *d, int B, int apply, fl_err_t *err) {
    graph_entry_t *g = NULL;
    for (int i = 0; d->cfg.use_graph && i < d->num_graphs; i++)
        if (d->graphs[i].B == B && d->graphs[i].apply == apply) g = &d->graphs[i];
    if (g && g->exec) return cuda_check(cudaGraphLaunch(g->exec, d->cs), "cudaGraphLaunch", err);
    FL_TRY(prepare_batch(d, B, err)); /* may drop every captured graph (the workspace moved) */
    if (!d->cfg.use_graph) return enqueue_update(d, B, apply, err);
    g = NULL;
    for (int i = 0; i < d->num_graphs; i++)
        if (d->graphs[i].B == B && d->graphs[i].apply == apply) g = &d->graphs[i];
    if (!g) { /* first call: eager warm-up, remembered if there is room */
        if (d->num_graphs < FL_CUDA_DQN_MAX_GRAPHS)
            d->graphs[d->num_graphs++] = (graph_entry_t){.B = B, .apply = apply, .exec = NULL};
        return enqueue_update(d, B, apply, err);
    }
    if (g->eager) return enqueue_update(d, B, apply, err);
    FL_TRY(cuda_check(cudaStreamBeginCapture(d->cs, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture", err));
    fl_err_t cap_err = {0};
    fl_status st = enqueue_update(d, B, apply, &cap_err);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(d->cs, &graph);
    cudaGraphExec_t exec = NULL;
    if (st == FL_OK && e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (st != FL_OK || e != cudaSuccess) {
        /* Nothing captured has run: the same update runs eagerly, now and for every later
         * call of this (B, kind). A real fault fails the eager run too, and is reported. */
        (void)cudaGetLastError();
        FL_WARN("dqn_cuda: capturing the update (batch %d) as a CUDA graph failed (%s); it runs without one", B,
                st != FL_OK ? cap_err.msg : cudaGetErrorString(e));
        g->eager = 1;
        return enqueue_update(d, B, apply, err);
    }
    g->exec = exec;
    return cuda_check(cudaGraphLaunch(g->exec, d->cs), "cudaGraphLaunch", err);
}

/* Host-side checks of a batch before it goes to the device. */
static fl_status check_batch(const fl_cuda_dqn_t *d, const slot_mem_t *m, int B, fl_err_t *err) {
    if (B < 1 || B > d->max_batch)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: batch size %d (expected 1..%d)", B, d->max_batch);
    if (!m->obs || !m->next_obs || !m->actions || !m->rewards || !m->discounts || !m->weights)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: a NULL batch column");
    for (int i = 0; i < B; i++)
        if (m->actions[i] < 0 || m->actions[i] >= d->A)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: actions[%d] = %d (expected 0..%d)", i,
                              (int)m->actions[i], d->A - 1);
    return FL_OK;
}

/* The six column copies of a batch of B items from src to dst (either side host or
 * device) on `stream`. */
static fl_status copy_batch(const fl_cuda_dqn_t *d, const slot_mem_t *dst, const slot_mem_t *src, int B,
                            enum cudaMemcpyKind kind, cudaStream_t stream, fl_err_t *err) {
    const size_t ob = (size_t)B * (size_t)d->obs_dim * d->obs_elem, fb = (size_t)B * sizeof(float);
    const struct {
        void *dst;
        const void *src;
        size_t bytes;
    } copies[6] = {{dst->obs, src->obs, ob},
                   {dst->next_obs, src->next_obs, ob},
                   {dst->actions, src->actions, (size_t)B * sizeof(int32_t)},
                   {dst->rewards, src->rewards, fb},
                   {dst->discounts, src->discounts, fb},
                   {dst->weights, src->weights, fb}};
    for (int i = 0; i < 6; i++)
        FL_TRY(cuda_check(cudaMemcpyAsync(copies[i].dst, copies[i].src, copies[i].bytes, kind, stream),
                          "cudaMemcpyAsync (batch)", err));
    return FL_OK;
}

/* Copies a batch from pinned (or registered) host memory to the device and runs the
 * update. */
static fl_status update_from(fl_cuda_dqn_t *d, const slot_mem_t *m, int B, int apply, fl_err_t *err) {
    FL_TRY(check_batch(d, m, B, err));
    if (d->launched_B) return fl_err_set(err, FL_FAILED_PRECONDITION, "dqn_cuda: a launched update was not finished");
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    const slot_mem_t in = {d->d_obs, d->d_next, d->d_actions, d->d_rewards, d->d_discounts, d->d_weights};
    FL_TRY(copy_batch(d, &in, m, B, cudaMemcpyHostToDevice, d->copy, err));
    FL_TRY(cuda_check(cudaEventRecord(d->ev_copied, d->copy), "cudaEventRecord", err));
    FL_TRY(cuda_check(cudaStreamWaitEvent(d->cs, d->ev_copied, 0), "cudaStreamWaitEvent", err));
    return run_update(d, B, apply, err);
}

/* Validates the slot and updates from it. */
static fl_status update(fl_cuda_dqn_t *d, int slot, int B, int apply, fl_err_t *err) {
    if (slot < 0 || slot >= d->num_slots)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: slot %d (expected 0..%d)", slot, d->num_slots - 1);
    return update_from(d, &d->slots[slot], B, apply, err);
}

/* Enqueues the copies of priorities, scalars (and the gradient) back to pinned host
 * memory on the compute stream. */
static fl_status enqueue_outputs(fl_cuda_dqn_t *d, int B, float *grads, fl_err_t *err) {
    FL_TRY(cuda_check(cudaMemcpyAsync(d->h_prio, d->d_prio, (size_t)B * sizeof(float), cudaMemcpyDeviceToHost, d->cs),
                      "cudaMemcpyAsync (priorities)", err));
    FL_TRY(cuda_check(cudaMemcpyAsync(d->h_sc, d->d_sc, sizeof *d->h_sc, cudaMemcpyDeviceToHost, d->cs),
                      "cudaMemcpyAsync (statistics)", err));
    if (grads)
        FL_TRY(cuda_check(cudaMemcpyAsync(grads, d->d_grads, d->n * sizeof(float), cudaMemcpyDeviceToHost, d->cs),
                          "cudaMemcpyAsync (gradient)", err));
    return FL_OK;
}

/* Waits for the compute stream and fills the caller's outputs. */
static fl_status collect(fl_cuda_dqn_t *d, int B, float *priorities, fl_cuda_dqn_stats_t *stats, fl_err_t *err) {
    FL_TRY(sync_cs(d, err));
    if (priorities) memcpy(priorities, d->h_prio, (size_t)B * sizeof(float));
    const fl_cuda_step_scalars_t *sc = d->h_sc;
    if (stats) {
        stats->loss = sc->loss;
        stats->grad_norm = sc->grad_norm;
        stats->mean_q = sc->mean_q;
    }
    if (sc->bad)
        return fl_err_set(err, FL_OUT_OF_RANGE, "dqn_cuda: non-finite loss %g or gradient norm %g", (double)sc->loss,
                          (double)sc->grad_norm);
    return FL_OK;
}

/* Copies priorities and scalars back, waits, and fills the caller's outputs. */
static fl_status finish(fl_cuda_dqn_t *d, int B, float *priorities, fl_cuda_dqn_stats_t *stats, float *grads,
                        fl_err_t *err) {
    FL_TRY(enqueue_outputs(d, B, grads, err));
    return collect(d, B, priorities, stats, err);
}

fl_status fl_cuda_dqn_upload(fl_cuda_dqn_t *d, const fl_cuda_dqn_slot_t *batch, int B, int *stage, fl_err_t *err) {
    if (!d || !batch || !stage) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL argument");
    const slot_mem_t m = {batch->obs,     batch->next_obs,  batch->actions,
                          batch->rewards, batch->discounts, batch->weights};
    FL_TRY(check_batch(d, &m, B, err));
    const int k = d->next_stage;
    if (d->stage_B[k])
        return fl_err_set(err, FL_FAILED_PRECONDITION,
                          "dqn_cuda: both upload stages hold batches not launched yet (launch one first)");
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    /* the stage is free once the launch that read it has copied it out */
    FL_TRY(cuda_check(cudaStreamWaitEvent(d->copy, d->ev_stage_free[k], 0), "cudaStreamWaitEvent", err));
    FL_TRY(copy_batch(d, &d->stage[k], &m, B, cudaMemcpyHostToDevice, d->copy, err));
    FL_TRY(cuda_check(cudaEventRecord(d->ev_staged[k], d->copy), "cudaEventRecord", err));
    d->stage_B[k] = B;
    d->next_stage = (k + 1) % FL_CUDA_DQN_STAGES;
    *stage = k;
    return FL_OK;
}

fl_status fl_cuda_dqn_launch(fl_cuda_dqn_t *d, int stage, fl_err_t *err) {
    if (!d) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL object");
    if (stage < 0 || stage >= FL_CUDA_DQN_STAGES || !d->stage_B[stage])
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: stage %d holds no uploaded batch", stage);
    if (d->launched_B) return fl_err_set(err, FL_FAILED_PRECONDITION, "dqn_cuda: the previous launch was not finished");
    const int B = d->stage_B[stage];
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    FL_TRY(cuda_check(cudaStreamWaitEvent(d->cs, d->ev_staged[stage], 0), "cudaStreamWaitEvent", err));
    const slot_mem_t in = {d->d_obs, d->d_next, d->d_actions, d->d_rewards, d->d_discounts, d->d_weights};
    FL_TRY(copy_batch(d, &in, &d->stage[stage], B, cudaMemcpyDeviceToDevice, d->cs, err));
    FL_TRY(cuda_check(cudaEventRecord(d->ev_stage_free[stage], d->cs), "cudaEventRecord", err));
    d->stage_B[stage] = 0;
    FL_TRY(run_update(d, B, 1, err));
    FL_TRY(enqueue_outputs(d, B, NULL, err));
    d->launched_B = B;
    return FL_OK;
}

fl_status fl_cuda_dqn_finish(fl_cuda_dqn_t *d, float *priorities, fl_cuda_dqn_stats_t *stats, fl_err_t *err) {
    if (!d) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL object");
    if (!d->launched_B) return fl_err_set(err, FL_FAILED_PRECONDITION, "dqn_cuda: nothing launched");
    const int B = d->launched_B;
    d->launched_B = 0;
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    return collect(d, B, priorities, stats, err);
}

fl_status fl_cuda_dqn_step(fl_cuda_dqn_t *d, int slot, int B, float *priorities, fl_cuda_dqn_stats_t *stats,
                           fl_err_t *err) {
    if (!d) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL object");
    FL_TRY(update(d, slot, B, 1, err));
    return finish(d, B, priorities, stats, NULL, err);
}

fl_status fl_cuda_dqn_step_from(fl_cuda_dqn_t *d, const fl_cuda_dqn_slot_t *batch, int B, float *priorities,
                                fl_cuda_dqn_stats_t *stats, fl_err_t *err) {
    if (!d || !batch) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL object or batch");
    const slot_mem_t m = {batch->obs,     batch->next_obs,  batch->actions,
                          batch->rewards, batch->discounts, batch->weights};
    FL_TRY(update_from(d, &m, B, 1, err));
    return finish(d, B, priorities, stats, NULL, err);
}

fl_status fl_cuda_dqn_compute_from(fl_cuda_dqn_t *d, const fl_cuda_dqn_slot_t *batch, int B, float *grads,
                                   float *priorities, fl_cuda_dqn_stats_t *stats, fl_err_t *err) {
    if (!d || !batch || !grads)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL object, batch or gradient buffer");
    const slot_mem_t m = {batch->obs,     batch->next_obs,  batch->actions,
                          batch->rewards, batch->discounts, batch->weights};
    FL_TRY(update_from(d, &m, B, 0, err));
    return finish(d, B, priorities, stats, grads, err);
}

fl_status fl_cuda_dqn_compute(fl_cuda_dqn_t *d, int slot, int B, float *grads, float *priorities,
                              fl_cuda_dqn_stats_t *stats, fl_err_t *err) {
    if (!d || !grads) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL object or gradient buffer");
    FL_TRY(update(d, slot, B, 0, err));
    return finish(d, B, priorities, stats, grads, err);
}

fl_status fl_cuda_dqn_apply(fl_cuda_dqn_t *d, const float *grads, float *grad_norm, fl_err_t *err) {
    if (!d || !grads) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL object or gradient");
    if (d->launched_B) /* its gradient buffer and statistics are still in use */
        return fl_err_set(err, FL_FAILED_PRECONDITION, "dqn_cuda: a launched update was not finished");
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    FL_TRY(cuda_check(cudaMemcpyAsync(d->d_grads, grads, d->n * sizeof(float), cudaMemcpyHostToDevice, d->cs),
                      "cudaMemcpyAsync (gradient to device)", err));
    FL_TRY(cuda_check(cudaMemsetAsync(&d->d_sc->sumsq, 0, sizeof(double), d->cs), "cudaMemsetAsync", err));
    FL_TRY(fl_cuda_sumsq(d->d_grads, d->n, d->d_sc, d->cs, err));
    FL_TRY(fl_cuda_step_finalize(d->d_hyper, d->d_sc, 0, 1, d->cs, err));
    FL_TRY(
        fl_cuda_optim_apply(d->opt_kernel, d->n, d->d_params, d->d_grads, d->d_state, d->d_hyper, d->d_sc, d->cs, err));
    FL_TRY(cuda_check(cudaMemcpyAsync(d->h_sc, d->d_sc, sizeof *d->h_sc, cudaMemcpyDeviceToHost, d->cs),
                      "cudaMemcpyAsync (statistics)", err));
    FL_TRY(sync_cs(d, err));
    if (grad_norm) *grad_norm = d->h_sc->grad_norm;
    if (d->h_sc->bad)
        return fl_err_set(err, FL_OUT_OF_RANGE, "dqn_cuda: non-finite gradient norm %g", (double)d->h_sc->grad_norm);
    return FL_OK;
}

fl_status fl_cuda_dqn_last_targets(fl_cuda_dqn_t *d, float *y, float *q_taken, int B, fl_err_t *err) {
    if (!d) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL object");
    if (B < 1 || B > d->max_batch)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: batch size %d (expected 1..%d)", B, d->max_batch);
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    if (y)
        FL_TRY(cuda_check(cudaMemcpyAsync(y, d->d_y, (size_t)B * sizeof(float), cudaMemcpyDeviceToHost, d->cs),
                          "cudaMemcpyAsync (targets)", err));
    if (q_taken)
        FL_TRY(cuda_check(cudaMemcpyAsync(q_taken, d->d_qt, (size_t)B * sizeof(float), cudaMemcpyDeviceToHost, d->cs),
                          "cudaMemcpyAsync (q taken)", err));
    return sync_cs(d, err);
}
