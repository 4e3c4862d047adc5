/* dqn_cuda: the learner's double-DQN update on one GPU, equivalent to learner/dqn.h's
 * fl_dqn_step over networks built by kernels/qnet.c; it runs on the ops of kernels/cuda.
 *
 * Same network (the layer table of a CPU fl_qnet_t built from the same model.spec,
 * read with fl_qnet_layer: every layer's geometry and parameter offsets), same flat
 * parameter layout (one float vector in qnet's view order, so set/get_params exchange
 * exactly fl_qnet_params), same math (double-DQN targets with ties to the lowest action,
 * y = R when the discount is 0, weighted Huber loss divided by B, priorities |y - q|
 * before the update, global grad-norm clipping, the optimizers of kernels/optim.h with
 * the same state layout and step count), same observation handling: uint8 observations
 * become input_scale * ((float)u * obs_scale), float ones input_scale * v, which is
 * exactly what the CPU learner computes with fl_dtype_to_float (obs_scale 1/255) and
 * qnet's input_scale. Image observations (rank 3) arrive (H, W, C), and the convolutions
 * run on them channels-last (cuDNN's fast layout); the first layer after them that reads
 * pixels and channels together (flatten, dense, dueling) reads them transposed to qnet's
 * (C, H, W), so every weight means what it means on the CPU. Such a layer takes at most
 * FL_CUDA_TRANSPOSE_MAX_P pixels (create answers FL_INVALID_ARGUMENT beyond).
 *
 * Data path: the object owns `num_slots` input slots of pinned host memory. A prefetch
 * thread decodes a sampled batch straight into a slot (fl_cuda_dqn_slot gives the
 * pointers); fl_cuda_dqn_step(slot) copies it to the GPU on a copy stream, then runs on
 * the compute stream: online(next_obs), target(next_obs), online(obs), targets, loss,
 * dL/dq, the backward (cuBLAS SGEMM, cuDNN convolutions, own kernels), the global
 * gradient norm, clipping and one fused optimizer kernel, and copies priorities and
 * statistics back. A non-finite loss or norm is detected on the device: the optimizer
 * kernel then changes nothing and the call answers FL_OUT_OF_RANGE, as fl_dqn_step does.
 * With use_graph, everything after the input copy is captured once per batch size and
 * kind of call (up to FL_CUDA_DQN_MAX_GRAPHS; others run eagerly) on its second
 * occurrence (the first runs eagerly, as the warm-up) and replayed from then on; the
 * step count and every per-step scalar live in device memory, so replays stay exact.
 *
 * Ownership: the caller owns the config strings; the object owns all device memory,
 * streams, handles, graphs and pinned buffers. A slot is the caller's to fill between
 * calls; it must not be written while a step or compute call that reads it runs.
 * Failure: create answers FL_NO_DEVICE without a usable GPU, FL_INVALID_ARGUMENT naming
 * the bad field (the spec's errors come from fl_qnet_create), FL_NO_MEMORY, or
 * FL_INTERNAL with CUDA's, cuBLAS's or cuDNN's message. After an FL_INTERNAL from a
 * step the object's device state is unspecified (destroy it).
 * Thread-safety: one thread drives an object (all calls but fl_cuda_dqn_slot, whose
 * pointers any thread may write into under the rule above). The calls switch the
 * calling thread's current device to config.device. */
#ifndef FL_LEARNER_DQN_CUDA_H
#define FL_LEARNER_DQN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C headers without their own extern "C" */
#include "common/dtype.h"
#include "common/obs.h"
#include "kernels/optim.h"

#define FL_CUDA_DQN_MAX_SLOTS 8
#define FL_CUDA_DQN_MAX_GRAPHS 8

typedef struct fl_cuda_dqn_config {
    const char *spec;  /* model.spec (qnet.h grammar) */
    fl_obs_spec_t obs; /* rank 1..4 (3 is an image (H, W, C), any other rank a vector), the first
                        * rank shape sizes >= 1, dtype FL_DTYPE_FLOAT32 or FL_DTYPE_UINT8 (the
                        * slots' obs/next_obs) */
    float obs_scale;   /* uint8 only: (float)u * obs_scale (the learner uses 1.0f / 255.0f) */
    float input_scale; /* model.input_scale, applied after the conversion */
    int num_actions;   /* >= 1 */
    int max_batch;     /* >= 1 */
    float huber_delta; /* > 0 */
    float grad_clip;   /* >= 0, 0 = no clipping */
    fl_optim_config_t optim;
    int tf32;            /* 1: TF32 tensor cores in GEMMs and convolutions; 0: plain float32 FMA */
    int use_graph;       /* 1: capture and replay CUDA graphs */
    int cudnn_benchmark; /* 1: convolution algorithms timed on the GPU (fl_cuda_ctx_set_benchmark) whenever
                          * the convolutions are set up for a batch size other than the last one (a
                          * captured graph keeps its own); 0: cuDNN's heuristics */
    int device;          /* CUDA device index */
    int num_slots;       /* 1..FL_CUDA_DQN_MAX_SLOTS pinned input slots */
} fl_cuda_dqn_config_t;

/* Defaults: no spec, obs float32 (1), obs_scale 1/255, input_scale 1, huber_delta 1, grad_clip 40, the
 * Ape-X centered RMSProp, tf32 1, use_graph 1, cudnn_benchmark 0, device 0, 2 slots. */
void fl_cuda_dqn_config_init(fl_cuda_dqn_config_t *cfg);

/* Pinned host buffers of one slot, each for max_batch items. */
typedef struct fl_cuda_dqn_slot {
    void *obs;        /* (max_batch, obs_dim) of obs.dtype, (H, W, C) per item for images */
    void *next_obs;   /* (max_batch, obs_dim) of obs.dtype */
    int32_t *actions; /* (max_batch) in [0, num_actions) */
    float *rewards;   /* (max_batch) n-step returns */
    float *discounts; /* (max_batch) gamma^m, 0 at terminal */
    float *weights;   /* (max_batch) importance weights (write ones for none) */
} fl_cuda_dqn_slot_t;

/* Statistics, the same as fl_dqn_stats_t (learner/dqn.h). */
typedef struct fl_cuda_dqn_stats {
    float loss;      /* before the update */
    float grad_norm; /* before clipping */
    float mean_q;    /* mean Q(obs, action) */
} fl_cuda_dqn_stats_t;

typedef struct fl_cuda_dqn fl_cuda_dqn_t;

/* Parameters start at zero (set them with set_params), the optimizer fresh (step 0). */
fl_status fl_cuda_dqn_create(const fl_cuda_dqn_config_t *cfg, fl_cuda_dqn_t **out, fl_err_t *err);
void fl_cuda_dqn_destroy(fl_cuda_dqn_t *d); /* NULL is a no-op; waits for the GPU */

size_t fl_cuda_dqn_num_params(const fl_cuda_dqn_t *d); /* == fl_qnet_num_params of the spec */
int fl_cuda_dqn_obs_dim(const fl_cuda_dqn_t *d);
int fl_cuda_dqn_num_slots(const fl_cuda_dqn_t *d);
fl_status fl_cuda_dqn_slot(fl_cuda_dqn_t *d, int slot, fl_cuda_dqn_slot_t *out, fl_err_t *err);

/* Host -> device: online (count floats, fl_qnet_params layout); target may be NULL for
 * target = online. count must equal num_params. Synchronous. */
fl_status fl_cuda_dqn_set_params(fl_cuda_dqn_t *d, const float *online, const float *target, size_t count,
                                 fl_err_t *err);
/* Device -> host: the online (target = 0) or target (1) parameters. Synchronous. */
fl_status fl_cuda_dqn_get_params(fl_cuda_dqn_t *d, int target, float *dst, size_t count, fl_err_t *err);
/* target = online, on the device (enqueued on the compute stream). */
fl_status fl_cuda_dqn_sync_target(fl_cuda_dqn_t *d, fl_err_t *err);

/* Optimizer state, laid out as fl_optim_state (slots * num_params floats, slot i at
 * i * num_params) plus fl_optim_steps, so checkpoints move between the backends. */
size_t fl_cuda_dqn_optim_state_size(const fl_cuda_dqn_t *d);
fl_status fl_cuda_dqn_get_optim_state(fl_cuda_dqn_t *d, float *state, size_t count, int64_t *steps, fl_err_t *err);
fl_status fl_cuda_dqn_set_optim_state(fl_cuda_dqn_t *d, const float *state, size_t count, int64_t steps, fl_err_t *err);
/* Learning rate from the next step on (fl_optim_set_lr); graphs stay valid. */
fl_status fl_cuda_dqn_set_lr(fl_cuda_dqn_t *d, float lr, fl_err_t *err);

/* One update from slot `slot` with B items (1..max_batch). priorities (B, host) may be
 * NULL; stats may be NULL. FL_INVALID_ARGUMENT for a bad slot, B or action (naming the
 * item; nothing runs); FL_OUT_OF_RANGE when the loss or gradient norm is not finite:
 * parameters and optimizer untouched, priorities and stats still written. */
fl_status fl_cuda_dqn_step(fl_cuda_dqn_t *d, int slot, int B, float *priorities, fl_cuda_dqn_stats_t *stats,
                           fl_err_t *err);
/* The same from a batch the caller holds in page-locked memory of its own (e.g. a replay
 * batch registered with fl_cuda_host_register, decoded there by the prefetch thread): no
 * copy into a slot. The pointers follow fl_cuda_dqn_slot_t's layout for B items and
 * must stay untouched until the call returns. */
fl_status fl_cuda_dqn_step_from(fl_cuda_dqn_t *d, const fl_cuda_dqn_slot_t *batch, int B, float *priorities,
                                fl_cuda_dqn_stats_t *stats, fl_err_t *err);
fl_status fl_cuda_dqn_compute_from(fl_cuda_dqn_t *d, const fl_cuda_dqn_slot_t *batch, int B, float *grads,
                                   float *priorities, fl_cuda_dqn_stats_t *stats, fl_err_t *err);

/* A pipelined update in three calls, so that a batch's copy to the GPU overlaps the
 * previous update's compute:
 *   upload   enqueues the copy of a batch (pinned or registered host memory, B items)
 *            into one of FL_CUDA_DQN_STAGES device staging buffers on the copy stream and
 *            returns its stage; the host memory must stay untouched until the update
 *            that launches it has finished. FL_FAILED_PRECONDITION when every stage
 *            holds a batch not launched yet.
 *   launch   enqueues the update of a staged batch on the compute stream (after its
 *            copy; a device-to-device move into the network's input, so that captured
 *            graphs stay valid) and the copies of its outputs; returns at once.
 *   finish   waits for the launched update; outputs and statuses as fl_cuda_dqn_step.
 * One launch may be in flight: upload(k+1) while k runs, then finish(k), launch(k+1).
 * step/compute calls are refused while a launch is not finished. */
#define FL_CUDA_DQN_STAGES 2
fl_status fl_cuda_dqn_upload(fl_cuda_dqn_t *d, const fl_cuda_dqn_slot_t *batch, int B, int *stage, fl_err_t *err);
fl_status fl_cuda_dqn_launch(fl_cuda_dqn_t *d, int stage, fl_err_t *err);
fl_status fl_cuda_dqn_finish(fl_cuda_dqn_t *d, float *priorities, fl_cuda_dqn_stats_t *stats, fl_err_t *err);

/* The same forwards, loss and backward, without clipping or an optimizer step: the
 * unclipped gradient (num_params floats) is copied into grads (host) for a
 * multi-learner all-reduce. FL_OUT_OF_RANGE as above (outputs still written). */
fl_status fl_cuda_dqn_compute(fl_cuda_dqn_t *d, int slot, int B, float *grads, float *priorities,
                              fl_cuda_dqn_stats_t *stats, fl_err_t *err);
/* Given a (reduced) gradient (num_params floats, host): its global norm (into
 * *grad_norm when not NULL), clipping to grad_clip and one optimizer step.
 * FL_OUT_OF_RANGE (nothing changed) when the norm is not finite. */
fl_status fl_cuda_dqn_apply(fl_cuda_dqn_t *d, const float *grads, float *grad_norm, fl_err_t *err);

/* Asynchronous snapshot of the online parameters for publishing: enqueues, after the
 * work already on the compute stream, a device copy into a shadow buffer and from there
 * a copy into a pinned host buffer, both on a side stream; the compute stream only
 * waits for the device-to-device copy (microseconds) before it may change the
 * parameters again. poll answers *ready = 1 and *host (num_params floats, valid until
 * the next snapshot_begin) once the copy has landed, *ready = 0 while it is in flight;
 * FL_FAILED_PRECONDITION before any begin. Neither call blocks. */
fl_status fl_cuda_dqn_snapshot_begin(fl_cuda_dqn_t *d, fl_err_t *err);
fl_status fl_cuda_dqn_snapshot_poll(fl_cuda_dqn_t *d, const float **host, int *ready, fl_err_t *err);

/* How many CUDA graphs have been captured and are kept (0 without use_graph): one per
 * batch size and kind of call (step or compute) seen at least twice, at most
 * FL_CUDA_DQN_MAX_GRAPHS. */
int fl_cuda_dqn_graphs(const fl_cuda_dqn_t *d);

/* The last step/compute's targets y and taken-action values q (B each) copied to the
 * host, for tests and diagnostics. Synchronous. */
fl_status fl_cuda_dqn_last_targets(fl_cuda_dqn_t *d, float *y, float *q_taken, int B, fl_err_t *err);

#ifdef __cplusplus
}
#endif

#endif
