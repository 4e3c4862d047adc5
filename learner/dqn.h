/* dqn: one double-DQN n-step update on the CPU, the arithmetic core of the learner.
 *
 * A batch holds B transitions already converted to float: obs and next_obs (B, D), the
 * action taken, the n-step discounted return R and the discount gamma^m applied to the
 * bootstrap (0 when the episode terminated inside the n steps), and the importance
 * weights from prioritized replay. One update computes
 *     a*_b = argmax_a Q_online(next_obs_b, a)                   (ties: the lowest a)
 *     y_b  = R_b + discount_b * Q_target(next_obs_b, a*_b)      (y_b = R_b when discount_b == 0)
 *     q_b  = Q_online(obs_b, action_b)
 *     L    = (1/B) sum_b w_b huber(q_b - y_b; delta)            (see kernels/loss.h)
 * the new priorities |y_b - q_b| (before the update), the gradient dL/dtheta of the
 * online network (the target y is a constant), the global gradient norm (before
 * clipping), clipping to grad_clip (0 = off), and one optimizer step on the online
 * network. The forwards run in the order online(next_obs), target(next_obs),
 * online(obs), so that the activations kept for the backward are those of
 * Q_online(obs). Terminal items never read their next_obs row's Q-values, so whatever
 * those rows hold does not reach y.
 *
 * fl_dqn_compute stops after the gradient (no clipping, no step): the learner's
 * multi-learner reduce and the tests use it. All workspace is allocated at create for
 * max_batch transitions; compute and step never allocate.
 *
 * Failure: create answers FL_INVALID_ARGUMENT naming the bad field, or FL_NO_MEMORY.
 * compute/step answer FL_INVALID_ARGUMENT for a batch size outside 1..max_batch, a NULL
 * column, networks of different shapes or an action outside [0, num_actions) (naming
 * the item); FL_OUT_OF_RANGE when the loss or the gradient norm is not finite, in which
 * case step leaves the parameters and the optimizer untouched (the outputs are still
 * written, so a caller can log them).
 * Thread-safety: one owner per fl_dqn_t, and the networks and optimizer it is given are
 * used without locks for the duration of a call. */
#ifndef FL_LEARNER_DQN_H
#define FL_LEARNER_DQN_H

#include <stdint.h>

#include "common/status.h"
#include "kernels/optim.h"
#include "kernels/qnet.h"
#include "learner/reduce.h"

typedef struct fl_dqn_config {
    int max_batch;     /* >= 1: the largest B (learner.batch_size) */
    int num_actions;   /* >= 1 */
    float huber_delta; /* > 0 (learner.huber_delta) */
    float grad_clip;   /* >= 0, 0 = no clipping (learner.grad_clip) */
} fl_dqn_config_t;

/* One batch, caller-owned; nothing is kept after the call. */
typedef struct fl_dqn_batch {
    int size;               /* B */
    const float *obs;       /* (B, obs_dim) */
    const int32_t *actions; /* (B) */
    const float *rewards;   /* (B) n-step discounted returns */
    const float *discounts; /* (B) gamma^m, 0 at terminal */
    const float *next_obs;  /* (B, obs_dim) */
    const float *weights;   /* (B) importance weights, or NULL for all ones */
    /* Optional: the observations as replay stores them, used instead of obs and next_obs
     * when obs_raw is not NULL (fl_qnet_forward_obs: the oneDNN backend converts uint8
     * on the way into its layout, with the bits of converting them first). */
    fl_dtype raw_dtype;
    const void *obs_raw, *next_raw; /* (B, obs_dim) of raw_dtype each */
} fl_dqn_batch_t;

typedef struct fl_dqn_stats {
    float loss;      /* L above, before the update */
    float grad_norm; /* global L2 norm of dL/dtheta, before clipping */
    float mean_q;    /* mean of q_b (a diagnostic) */
} fl_dqn_stats_t;

typedef struct fl_dqn fl_dqn_t;

fl_status fl_dqn_create(const fl_dqn_config_t *cfg, fl_dqn_t **out, fl_err_t *err);
void fl_dqn_destroy(fl_dqn_t *d); /* NULL is a no-op */
const fl_dqn_config_t *fl_dqn_config(const fl_dqn_t *d);

/* The forwards, targets, loss, priorities (B) (may be NULL) and the gradient, left in
 * fl_qnet_grads(online) unclipped. stats (may be NULL) gets loss and grad_norm. */
fl_status fl_dqn_compute(fl_dqn_t *d, fl_qnet_t *online, fl_qnet_t *target, const fl_dqn_batch_t *b, float *priorities,
                         fl_dqn_stats_t *stats, fl_err_t *err);

/* fl_dqn_compute, then clipping and one optimizer step on online's parameters. */
fl_status fl_dqn_step(fl_dqn_t *d, fl_qnet_t *online, fl_qnet_t *target, fl_optim_t *opt, const fl_dqn_batch_t *b,
                      float *priorities, fl_dqn_stats_t *stats, fl_err_t *err);

/* One synchronous step of a group of learners (apex mode, learner.count > 1): every
 * member calls it the same number of times, each with its own batch. It computes this
 * member's gradient (fl_dqn_compute), replaces it by the mean over the group with one
 * all-reduce of rbuf = [gradient (n), wants-to-stop, loss] (n + 2 floats, caller-owned,
 * n = fl_qnet_num_params), then clips it to grad_clip and takes one optimizer step, so
 * that members that started equal stay bit-identical. b == NULL or want_stop != 0: this
 * member has no batch (or is stopping); it contributes zeros and its stop flag.
 *   *stopped = 1 and FL_OK: some member wants to stop; no one stepped.
 *   FL_OUT_OF_RANGE: the mean gradient is not finite (some member's loss or gradient
 *     was not); no one stepped, the outputs are still written.
 *   FL_OK: stepped; priorities (B) are this member's, stats->loss the mean over the
 *     group, stats->grad_norm the mean gradient's norm before clipping.
 * A local failure (a bad batch) is sent as a stop and then returned; a transport
 * failure of the reduce is returned (with *stopped = 1). */
fl_status fl_dqn_step_group(fl_dqn_t *d, fl_qnet_t *online, fl_qnet_t *target, fl_optim_t *opt, fl_reduce_t *reduce,
                            float *rbuf, const fl_dqn_batch_t *b, int want_stop, float *priorities,
                            fl_dqn_stats_t *stats, int *stopped, fl_err_t *err);

/* The all-reduce of fl_dqn_step_group, for callers that compute gradients elsewhere (the
 * GPU learner): rbuf[0..n) holds this member's gradient when `have` (ignored and zeroed
 * otherwise); rbuf gets [mean gradient, -, -] and *mean_loss (may be NULL) the mean loss,
 * unless some member wants to stop (*stopped = 1, FL_OK). A transport failure is
 * returned with *stopped = 1. */
fl_status fl_dqn_group_mean(fl_reduce_t *reduce, float *rbuf, size_t n, int have, int want_stop, float loss,
                            int *stopped, float *mean_loss, fl_err_t *err);

/* The last call's targets y (B) and taken-action values q (B); valid until the next
 * call (for tests and diagnostics). */
const float *fl_dqn_targets(const fl_dqn_t *d);
const float *fl_dqn_q_taken(const fl_dqn_t *d);

#endif
