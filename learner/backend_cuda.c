/* backend_cuda: the learner's updates on a GPU (see backend.h), with learner/dqn_cuda.h's
 * double-DQN update; built only with the CUDA backend (learner/CMakeLists.txt), and the
 * only learner file besides dqn_cuda.c that includes CUDA's headers.
 *
 * open builds the GPU update from the learner's CPU networks and optimizer (fresh or
 * resumed), which stay the copies that checkpoints and the final publish read (pull
 * refreshes them). A batch goes to the GPU straight from the replay batch (decoded there
 * by the prefetch thread) once that batch is page-locked, which happens the first time
 * each of the prefetcher's batches comes by (at most MAX_PINNED of them); otherwise
 * (registration refused) it is copied into the next pinned input slot. One apex learner
 * pipelines (upload / launch / finish) and publishes from asynchronous snapshots; in an
 * apex group the gradient comes back to the host for the ring all-reduce and the GPU
 * clips and steps; Gorila learners compute the gradient there and push it from the host.
 * Failure: create's errors of dqn_cuda (FL_NO_DEVICE without a GPU when learner.device
 * = cuda; auto then declines), the learner's messages otherwise.
 * Thread-safety: the learner's owner thread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/dtype.h"
#include "common/log.h"
#include "kernels/cuda/cuda.h"
#include "learner/dqn_cuda.h"
#include "learner/learner_internal.h"

/* Replay batches a GPU learner page-locks at most (the prefetcher's, and its own). */
#define MAX_PINNED 70

typedef struct gpu_state {
    fl_cuda_dqn_t *gpu;
    int slot;                 /* the pinned input slot the next copied batch goes into */
    fl_cuda_dqn_slot_t batch; /* prepare's view of l->cur */
    void *pinned[MAX_PINNED]; /* replay batches page-locked for the GPU */
    int n_pinned, pin_failed;
} gpu_state_t;

static gpu_state_t *state_of(fl_learner_t *l) {
    return (gpu_state_t *)l->be_state;
}

static fl_status cuda_check_opts(const fl_learner_opts_t *o, fl_err_t *err) {
    if (o->obs.dtype != FL_DTYPE_FLOAT32 && o->obs.dtype != FL_DTYPE_UINT8)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "learner: learner.device = cuda takes float32 or uint8 observations, not %s",
                          fl_dtype_name(o->obs.dtype));
    return FL_OK;
}

static fl_status cuda_push(fl_learner_t *l, int with_optim, fl_err_t *err) {
    fl_cuda_dqn_t *gpu = state_of(l)->gpu;
    FL_TRY(fl_cuda_dqn_set_params(gpu, fl_qnet_params(l->online), fl_qnet_params(l->target),
                                  fl_qnet_num_params(l->online), err));
    if (!with_optim) return FL_OK;
    return fl_cuda_dqn_set_optim_state(gpu, fl_optim_state(l->opt), fl_optim_state_size(l->opt), fl_optim_steps(l->opt),
                                       err);
}

/* The CPU copies (both networks, optimizer state) from the GPU. Synchronous. */
static fl_status cuda_pull(fl_learner_t *l, fl_err_t *err) {
    fl_cuda_dqn_t *gpu = state_of(l)->gpu;
    const size_t np = fl_qnet_num_params(l->online);
    int64_t steps = 0;
    FL_TRY(fl_cuda_dqn_get_params(gpu, 0, fl_qnet_params(l->online), np, err));
    FL_TRY(fl_cuda_dqn_get_params(gpu, 1, fl_qnet_params(l->target), np, err));
    FL_TRY(fl_cuda_dqn_get_optim_state(gpu, fl_optim_state(l->opt), fl_optim_state_size(l->opt), &steps, err));
    fl_optim_set_steps(l->opt, steps);
    return FL_OK;
}

static fl_status cuda_open(fl_learner_t *l, int required, int *declined, fl_err_t *err) {
    int count = 0;
    fl_err_t de;
    fl_err_init(&de);
    if (fl_cuda_device_count(&count, &de) != FL_OK) {
        if (required) return fl_err_set(err, FL_NO_DEVICE, "learner: learner.device = cuda: %s", de.msg);
        FL_INFO("learner.device = auto: no GPU (%s); training on the CPU", de.msg);
        *declined = 1;
        return FL_OK;
    }
    if (!required && l->obs.dtype != FL_DTYPE_FLOAT32 && l->obs.dtype != FL_DTYPE_UINT8) {
        FL_INFO("learner.device = auto: the GPU trains on float32/uint8 observations; training on the CPU");
        *declined = 1;
        return FL_OK;
    }
    gpu_state_t *st = calloc(1, sizeof *st);
    if (!st) return fl_err_set(err, FL_NO_MEMORY, "learner: out of memory");
    l->be_state = st;
    fl_cuda_dqn_config_t gc;
    fl_cuda_dqn_config_init(&gc);
    gc.spec = l->o.model_spec;
    gc.obs = l->obs;
    gc.obs_scale = 1.0f / 255.0f; /* as fl_dtype_to_float */
    gc.input_scale = (float)l->o.input_scale;
    gc.num_actions = l->num_actions;
    gc.max_batch = l->batch_size;
    gc.huber_delta = (float)l->o.huber_delta;
    gc.grad_clip = (float)l->o.grad_clip;
    gc.optim = *fl_optim_config(l->opt);
    gc.tf32 = l->o.tf32 != 0;
    gc.use_graph = l->o.cuda_graphs != 0;
    gc.cudnn_benchmark = l->o.cudnn_benchmark != 0;
    FL_TRY(fl_cuda_dqn_create(&gc, &st->gpu, err));
    FL_TRY(cuda_push(l, 1, err));
    char name[128] = "";
    fl_cuda_device_name(0, name, sizeof name, NULL);
    FL_INFO("learner: training on %s (TF32 %s, CUDA graphs %s, convolution algorithms %s)", name,
            gc.tf32 ? "on" : "off", gc.use_graph ? "on" : "off", gc.cudnn_benchmark ? "timed" : "by heuristics");
    return FL_OK;
}

static void cuda_close(fl_learner_t *l) {
    gpu_state_t *st = state_of(l);
    if (!st) return;
    fl_cuda_dqn_destroy(st->gpu); /* first: it waits for the copies that may still read the pinned batches */
    for (int i = 0; i < st->n_pinned; i++) fl_cuda_host_unregister(st->pinned[i]); /* before the batches go */
    free(st);
    l->be_state = NULL;
}

/* The batch being trained on as the GPU will read it (st->batch): in place once its
 * block is page-locked, else copied into the next pinned input slot. */
static fl_status cuda_prepare(fl_learner_t *l, fl_err_t *err) {
    gpu_state_t *st = state_of(l);
    const fl_replay_batch_t *cb = l->cur;
    const size_t n = cb->count;
    FL_TRY(fl__learner_check_obs_bytes(l, err));
    int pinned = 0;
    for (int i = 0; i < st->n_pinned && !pinned; i++) pinned = st->pinned[i] == cb->block;
    if (!pinned && !st->pin_failed && st->n_pinned < MAX_PINNED) {
        fl_err_t e;
        fl_err_init(&e);
        if (fl_cuda_host_register(cb->block, cb->block_bytes, &e) == FL_OK) {
            st->pinned[st->n_pinned++] = cb->block;
            pinned = 1;
        } else {
            FL_WARN("learner: cannot page-lock replay batches (%s, %zu bytes at %p): copying them into pinned buffers",
                    e.msg, cb->block_bytes, cb->block);
            st->pin_failed = 1;
        }
    }
    if (pinned) {
        st->batch = (fl_cuda_dqn_slot_t){cb->obs, cb->next_obs, cb->actions, cb->rewards, cb->discounts, cb->weights};
        return FL_OK;
    }
    fl_cuda_dqn_slot_t slot;
    FL_TRY(fl_cuda_dqn_slot(st->gpu, st->slot, &slot, err));
    memcpy(slot.obs, cb->obs, n * l->obs_bytes);
    memcpy(slot.next_obs, cb->next_obs, n * l->obs_bytes);
    memcpy(slot.actions, cb->actions, n * sizeof(int32_t));
    memcpy(slot.rewards, cb->rewards, n * sizeof(float));
    memcpy(slot.discounts, cb->discounts, n * sizeof(float));
    if (cb->weights)
        memcpy(slot.weights, cb->weights, n * sizeof(float));
    else
        for (size_t i = 0; i < n; i++) slot.weights[i] = 1.0f;
    st->slot = (st->slot + 1) % fl_cuda_dqn_num_slots(st->gpu);
    st->batch = slot;
    return FL_OK;
}

static fl_status cuda_step(fl_learner_t *l, float *loss, fl_err_t *e) {
    gpu_state_t *st = state_of(l);
    fl_cuda_dqn_stats_t ds = {0};
    fl_status s = fl_cuda_dqn_step_from(st->gpu, &st->batch, (int)l->cur->count, l->priorities, &ds, e);
    *loss = ds.loss;
    return s;
}

static fl_status cuda_upload(fl_learner_t *l, int *stage, fl_err_t *err) {
    gpu_state_t *st = state_of(l);
    fl_err_t e;
    fl_err_init(&e);
    fl_status s = fl_cuda_dqn_upload(st->gpu, &st->batch, (int)l->cur->count, stage, &e);
    if (s != FL_OK) fl_err_set(err, s, "learner: GPU upload: %s", e.msg);
    return s;
}

static fl_status cuda_launch(fl_learner_t *l, int stage, fl_err_t *err) {
    fl_err_t e;
    fl_err_init(&e);
    fl_status s = fl_cuda_dqn_launch(state_of(l)->gpu, stage, &e);
    if (s != FL_OK) fl_err_set(err, s, "learner: GPU launch: %s", e.msg);
    return s;
}

static fl_status cuda_finish(fl_learner_t *l, float *loss, fl_err_t *e) {
    fl_cuda_dqn_stats_t ds = {0};
    fl_status s = fl_cuda_dqn_finish(state_of(l)->gpu, l->priorities, &ds, e);
    *loss = ds.loss;
    return s;
}

/* The gradient comes back to the host, is averaged over the learners by the ring
 * all-reduce (fl_dqn_group_mean), and the GPU clips and steps. */
static fl_status cuda_group_update(fl_learner_t *l, int have, int *stop, float *loss, fl_err_t *e) {
    gpu_state_t *st = state_of(l);
    const size_t n = fl_qnet_num_params(l->online);
    fl_status result = FL_OK;
    fl_cuda_dqn_stats_t ds = {0};
    if (have) {
        fl_err_t ce;
        fl_err_init(&ce);
        fl_status s =
            fl_cuda_dqn_compute_from(st->gpu, &st->batch, (int)l->cur->count, l->rbuf, l->priorities, &ds, &ce);
        if (s == FL_OUT_OF_RANGE)
            l->rbuf[0] = NAN; /* every learner skips this step */
        else if (s != FL_OK)
            result = fl_err_set(e, s, "learner: GPU update: %s", ce.msg);
        have = result == FL_OK;
    }
    float mean_loss = 0;
    fl_err_t re;
    fl_err_init(&re);
    double t0 = fl_clock_sec();
    fl_status rs = fl_dqn_group_mean(l->reduce, l->rbuf, n, have, !have, ds.loss, stop, &mean_loss, &re);
    l->st.reduce_s += fl_clock_sec() - t0;
    if (result != FL_OK) {
        *stop = 1;
        return result;
    }
    if (rs != FL_OK) return fl_err_set(e, rs, "learner: %s", re.msg);
    if (*stop) return FL_OK;
    fl_err_t ae;
    fl_err_init(&ae);
    fl_status s = fl_cuda_dqn_apply(st->gpu, l->rbuf, NULL, &ae);
    if (s == FL_OUT_OF_RANGE) return fl_err_set(e, s, "non-finite mean gradient over the learners");
    if (s != FL_OK) return fl_err_set(e, s, "learner: GPU update: %s", ae.msg);
    *loss = mean_loss;
    return FL_OK;
}

static fl_status cuda_gradient(fl_learner_t *l, float *loss, fl_err_t *e) {
    gpu_state_t *st = state_of(l);
    fl_cuda_dqn_stats_t gs = {0};
    fl_status s = fl_cuda_dqn_compute_from(st->gpu, &st->batch, (int)l->cur->count, fl_qnet_grads(l->online),
                                           l->priorities, &gs, e);
    *loss = gs.loss;
    return s;
}

static fl_status cuda_sync_target(fl_learner_t *l, fl_err_t *err) {
    return fl_cuda_dqn_sync_target(state_of(l)->gpu, err);
}

static fl_status cuda_snapshot_begin(fl_learner_t *l, fl_err_t *err) {
    return fl_cuda_dqn_snapshot_begin(state_of(l)->gpu, err);
}

static fl_status cuda_snapshot_poll(fl_learner_t *l, int *ready, fl_err_t *err) {
    const float *host = NULL;
    *ready = 0;
    FL_TRY(fl_cuda_dqn_snapshot_poll(state_of(l)->gpu, &host, ready, err));
    if (*ready) memcpy(fl_qnet_params(l->online), host, fl_qnet_num_params(l->online) * sizeof(float));
    return FL_OK;
}

/* what backend_load.c looks up in this library */
extern const fl__learner_backend_t fl__learner_backend_cuda;
const fl__learner_backend_t fl__learner_backend_cuda = {
    .name = "cuda",
    .where = "the GPU",
    .update_what = "GPU update",
    .check = cuda_check_opts,
    .open = cuda_open,
    .close = cuda_close,
    .prepare = cuda_prepare,
    .step = cuda_step,
    .upload = cuda_upload,
    .launch = cuda_launch,
    .finish = cuda_finish,
    .group_update = cuda_group_update,
    .gradient = cuda_gradient,
    .sync_target = cuda_sync_target,
    .snapshot_begin = cuda_snapshot_begin,
    .snapshot_poll = cuda_snapshot_poll,
    .pull = cuda_pull,
    .push = cuda_push,
};
