/* optim: first-order optimizers over one flat parameter vector, and global gradient-norm
 * clipping.
 *
 * A network keeps all its parameters in one float buffer and its gradients in another
 * of the same length (see qnet.h); an optimizer updates that buffer in place from the
 * gradient buffer. Its state is one contiguous float buffer of `slots` vectors of n
 * floats each, plus a step count, so that a checkpoint stores it as it is.
 *
 * Exact update rules, per element, g = gradient, p = parameter, t = step count after
 * the increment (1 on the first step):
 *
 *   FL_OPTIM_SGD (PyTorch SGD, dampening 0, not Nesterov)
 *     slots: buf (zeros)
 *     buf = momentum * buf + g;  p -= lr * buf
 *
 *   FL_OPTIM_ADAM (PyTorch Adam, bias-corrected, no weight decay)
 *     slots: m, v (zeros)
 *     m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
 *     p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *
 *   FL_OPTIM_RMSPROP (centered RMSProp of TensorFlow's RMSPropOptimizer(centered=True),
 *   as used by DQN and Ape-X)
 *     slots: ms (initialised to ONES, as TensorFlow does), mg (zeros), mom (zeros)
 *     ms  = decay ms + (1 - decay) g^2
 *     mg  = decay mg + (1 - decay) g
 *     mom = momentum mom + lr g / sqrt(max(ms - mg^2, 0) + eps)
 *     p  -= mom
 *   (ms - mg^2 is a variance and never negative in exact arithmetic; the max() only
 *   keeps float rounding from turning it into a NaN.)
 *
 * fl_clip_grad_norm scales the gradient by max_norm / ||g|| when ||g|| > max_norm
 * (TensorFlow's clip_by_global_norm: afterwards ||g|| == max_norm).
 *
 * Threads: a step and the norm of a vector of more than 32,768 elements run in parts on as
 * many OpenMP threads as OpenBLAS is set to (openblas_set_num_threads: learner.threads in
 * a learner), when fleet is built with oneDNN (which brings OpenMP). The parts depend on
 * the vector's length alone, so the results are the same at any thread count.
 *
 * Every optimizer is one row of the table in optim.c: its name (the config's
 * learner.optimizer), state slots (names and initial values), defaults, config checks,
 * which fields of fl_optim_settings_t it takes, its step function, and the id of its
 * fused GPU kernel, if any. fl_optim_config_from is the one mapping from a run's
 * optimizer settings to an fl_optim_config_t: the CPU learner, the GPU learner (which
 * takes the CPU optimizer's config) and the Gorila parameter-server shards all use it.
 *
 * Adding an optimizer that takes the existing hyperparameters touches:
 *   kernels/optim.c        its row of the table (at the end) and its step function;
 *   tests/test_kernels_optim.c  its exact update rule;
 *   common/config_keys.h   its name among learner.optimizer's choices and its enumerator
 *                          in fl_cfg_learner_optimizer (the config checks enum keys), so
 *                          that learners can choose it;
 * and only if it has a GPU version (the row's `cuda` id; without one the GPU learner
 * refuses it at create): kernels/cuda/ops_cuda.cu (its fused kernel, a case of
 * fl_cuda_optim_apply) and tests/test_kernels_cuda_gpu.c. A new hyperparameter also
 * adds a field to fl_optim_config_t and fl_optim_settings_t, a config key, its copy in
 * launcher/options.c (fl_options_optim_settings), and for the GPU a field of
 * kernels/cuda/ops_cuda.h's fl_cuda_optim_hyper_t filled in learner/dqn_cuda.c.
 *
 * Failure: create validates the config (FL_INVALID_ARGUMENT naming the field) and
 * allocation (FL_NO_MEMORY); step cannot fail. A NaN/inf gradient makes the parameters
 * NaN/inf, as in the reference implementations: check the norm from fl_clip_grad_norm
 * and skip the step if it is not finite.
 * Thread-safety: one owner per fl_optim_t; different optimizers are independent. */
#ifndef FL_KERNELS_OPTIM_H
#define FL_KERNELS_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

/* An optimizer is a row of optim.c's table, and its kind is the row's index; these name
 * the first three rows for code that picks one directly (a row added later is reached by
 * its name, fl_optim_kind_from_name). fl_optim_num_kinds() rows in all. */
typedef enum { FL_OPTIM_SGD, FL_OPTIM_ADAM, FL_OPTIM_RMSPROP } fl_optim_kind;

/* The most state slots an optimizer has. */
#define FL_OPTIM_MAX_SLOTS 4

/* Which fields matter: SGD lr, momentum; Adam lr, beta1, beta2, eps;
 * RMSProp lr, decay, momentum, eps. The others are ignored. */
typedef struct fl_optim_config {
    fl_optim_kind kind;
    float lr, beta1, beta2, eps, decay, momentum;
} fl_optim_config_t;

/* A run's optimizer settings as its configuration holds them (learner.optimizer,
 * learner.lr, learner.momentum, learner.adam_*, learner.rmsprop_*). */
typedef struct fl_optim_settings {
    fl_optim_kind kind;
    double lr;
    double momentum; /* SGD's (RMSProp runs without momentum) */
    double adam_beta1, adam_beta2, adam_eps;
    double rmsprop_decay, rmsprop_eps;
} fl_optim_settings_t;

typedef struct fl_optim fl_optim_t;

/* Defaults per kind: SGD lr 0.01 momentum 0.9; Adam lr 1e-3 betas 0.9/0.999 eps 1e-8;
 * RMSProp the Ape-X settings, lr 0.00025/4, decay 0.95, eps 1.5e-7, momentum 0. */
fl_optim_config_t fl_optim_config_default(fl_optim_kind kind);
/* The optimizer of settings->kind with its defaults, and the fields of the settings
 * that kind takes (as float): SGD lr, momentum; Adam lr, beta1, beta2, eps; RMSProp lr,
 * decay, eps, and momentum 0. Validation is fl_optim_create's. */
fl_optim_config_t fl_optim_config_from(const fl_optim_settings_t *settings);
/* The rows of the table: kinds are 0 .. fl_optim_num_kinds() - 1. */
int fl_optim_num_kinds(void);
/* "sgd", "adam", "rmsprop"; "invalid" for a value outside the table */
const char *fl_optim_kind_name(fl_optim_kind kind);
/* Parses a kind name (the config's learner.optimizer); FL_INVALID_ARGUMENT otherwise. */
fl_status fl_optim_kind_from_name(const char *name, fl_optim_kind *out, fl_err_t *err);
/* The id of the kind's fused GPU kernel (kernels/cuda/ops_cuda.h fl_cuda_optim_apply),
 * or -1 when it has none. */
int fl_optim_cuda_kernel(fl_optim_kind kind);
/* Writes a fresh state of the kind for n parameters (num_slots * n floats, as
 * fl_optim_state): every slot at its initial value (RMSProp's ms at one, the rest zero).
 * For backends that keep the state elsewhere (the GPU learner). */
void fl_optim_state_init(fl_optim_kind kind, float *state, size_t n);

/* An optimizer for n >= 1 parameters, state initialised as documented above. */
fl_status fl_optim_create(const fl_optim_config_t *cfg, size_t n, fl_optim_t **out, fl_err_t *err);
void fl_optim_destroy(fl_optim_t *o); /* NULL is a no-op */

/* One update: params (n) -= f(grads (n)). Increments the step count. No allocation. */
void fl_optim_step(fl_optim_t *o, float *params, const float *grads);

size_t fl_optim_size(const fl_optim_t *o); /* n */
const fl_optim_config_t *fl_optim_config(const fl_optim_t *o);
/* Changes the learning rate from the next step on (schedules). */
void fl_optim_set_lr(fl_optim_t *o, float lr);

/* State for checkpoints: fl_optim_state_size() floats = num_slots * n, slot i at
 * state + i * n, named fl_optim_slot_name(o, i) (SGD "momentum_buffer"; Adam "exp_avg",
 * "exp_avg_sq"; RMSProp "ms", "mg", "mom"). Restore by writing the buffer and calling
 * fl_optim_set_steps. */
size_t fl_optim_state_size(const fl_optim_t *o);
float *fl_optim_state(fl_optim_t *o);
int fl_optim_num_slots(const fl_optim_t *o);
const char *fl_optim_slot_name(const fl_optim_t *o, int i); /* NULL when out of range */
int64_t fl_optim_steps(const fl_optim_t *o);
void fl_optim_set_steps(fl_optim_t *o, int64_t steps);

/* Global L2 norm of grads (n), computed in double, returned as it was before clipping.
 * If max_norm > 0 and the norm exceeds it, grads are scaled by max_norm / norm.
 * max_norm <= 0: no clipping. A non-finite norm is returned and grads are left alone. */
float fl_clip_grad_norm(float *grads, size_t n, float max_norm);

#endif
