/* learner_opts_util: a learner's options as the learner tests build them, without a run
 * configuration (the mapping from one is launcher/options.c's, tested in
 * tests/test_launcher_options.c).
 *
 * learner_run_defaults fills the run's part of fl_learner_opts_t (learner/learner.h)
 * with what a configuration of defaults (common/config_keys.h: env cartpole, one apex
 * learner on the CPU, Adam) maps to through fl_options_learner; the process's part
 * (index, addresses, control_addr, obs, num_actions, resume_path, reduce) is left as
 * the caller set it. Tests then change the fields they mean, as they would set a key.
 * Header-only. */
#ifndef FL_TESTS_LEARNER_OPTS_UTIL_H
#define FL_TESTS_LEARNER_OPTS_UTIL_H

#include <stdint.h>

#include "kernels/optim.h"
#include "kernels/qnet.h"
#include "learner/learner.h"

/* CartPole's reward bound (1 a step) through learner.n_step = 3 and learner.gamma = 0.99:
 * the largest priority a learner sends back (replay.max_priority = 0: derived, as
 * launcher/options.c derives it: the n-step reward bound with its 1e-4 of slack, plus
 * (1 + gamma^n) R / (1 - gamma)). */
static inline double learner_default_max_priority(void) {
    const double r = 1.0, g = 0.99;
    const double reward = r * (1.0 + g + g * g) * (1.0 + 1e-4);
    return reward + (1.0 + g * g * g) * r / (1.0 - g);
}

static inline void learner_run_defaults(fl_learner_opts_t *o) {
    o->count = 1;               /* learner.count */
    o->mode = FL_LEARNER_APEX;  /* learner.mode */
    o->device = FL_LEARNER_CPU; /* learner.device */
    o->threads = 1;             /* learner.threads */
    o->flush_denormals = 1;     /* learner.flush_denormals */
    o->tf32 = 1;                /* learner.tf32 */
    o->cuda_graphs = 1;         /* learner.cuda_graphs */
    o->cudnn_benchmark = 0;     /* learner.cudnn_benchmark */
    o->batch_size = 128;        /* learner.batch_size */
    /* learner.optimizer and its keys */
    o->optim = (fl_optim_settings_t){.kind = FL_OPTIM_ADAM,
                                     .lr = 0.003,
                                     .momentum = 0.9,
                                     .adam_beta1 = 0.9,
                                     .adam_beta2 = 0.999,
                                     .adam_eps = 1e-8,
                                     .rmsprop_decay = 0.95,
                                     .rmsprop_eps = 1.5e-7};
    o->grad_clip = 10;           /* learner.grad_clip */
    o->huber_delta = 1.0;        /* learner.huber_delta */
    o->target_update = 200;      /* learner.target_update */
    o->publish_every = 10;       /* learner.publish_every */
    o->checkpoint_dir = "";      /* learner.checkpoint_dir, run.checkpoint_dir: none */
    o->checkpoint_every = 0;     /* learner.checkpoint_every */
    o->checkpoint_every_s = 300; /* run.checkpoint_every (without learner.checkpoint_dir) */
    o->keep_checkpoints = 3;     /* run.keep_checkpoints */
    o->max_steps = 0;            /* learner.max_steps */
    o->deterministic = 0;        /* run.deterministic */
    o->round_updates = 50;       /* 8 samples per insert x 2 actors x 400 steps / 128 */
    o->prefetch = 2;             /* learner.prefetch */
    o->batches_per_call = 1;     /* learner.batches_per_call */
    o->fetch_every = 1;          /* learner.fetch_every */
    o->push_1bit = 0;            /* learner.push_1bit */
    o->slow_push_ms = 0;         /* learner.slow_push_ms */
    /* model.spec */
    o->model_spec = "dense(128) relu dense(128) relu dueling";
    o->input_scale = 1;                               /* model.input_scale */
    o->backend = fl_qnet_default_backend();           /* model.cpu_kernels = auto */
    o->beta = 0.4;                                    /* replay.beta */
    o->max_priority = learner_default_max_priority(); /* replay.max_priority */
    o->replay_shards = 1;                             /* replay.shards */
    o->paramserver_wait_timeout_s = 30;               /* paramserver.wait_timeout_s */
    o->seed = 1;                                      /* run.seed */
    o->progress_every = 1.0;                          /* run.progress_every */
}

#endif
