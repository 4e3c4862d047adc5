/* options: the one place where a configuration (common/config.h) becomes the options of
 * the modules the roles run. Every module takes its own options struct, declared in its
 * own header, and none of them reads fl_config_t; the functions below say which key
 * goes where, and turn the config's enum keys (env.rng, learner.mode, learner.device,
 * learner.optimizer, paramserver.stale_policy) into the modules' own C enums.
 *
 * Strings in the filled structs point into the config, which must outlive them (a
 * module that keeps a string copies it, see each header). */
#ifndef FL_LAUNCHER_OPTIONS_H
#define FL_LAUNCHER_OPTIONS_H

#include "actors/actor.h"
#include "common/config.h"
#include "common/status.h"
#include "envs/factory.h"
#include "eval/evaluator.h"
#include "envs/core/wrappers.h"
#include "learner/learner.h"
#include "paramserver/server.h"
#include "replay/server.h"

/* env.*: the environment every role opens (envs/factory.h). */
void fl_options_env(const fl_config_t *c, fl_env_factory_opts_t *out);

/* fl_options_env, then fl_env_create_wrapped: the wrapped env of the config. Errors name
 * the key (env.name, env.plugin or env.wrappers). */
fl_status fl_options_open_env(const fl_config_t *c, fl_wrapped_env_t **out, fl_err_t *err);

/* What an actor reads (actors/actor.h): env.*, actor.*, learner.n_step and
 * learner.gamma, model.spec and model.input_scale, replay.shards, run.seed and
 * run.progress_every. */
/* The largest |reward| of one agent step of the configured env: env.reward_bound or the
 * built-in's own (envs/registry.h), through the training wrappers (evaluation = 0) or
 * the evaluation's (1); 0 when unknown. */
double fl_options_step_reward_bound(const fl_config_t *c, int evaluation);
/* replay.max_abs_reward and replay.max_priority as every role applies them: the keys
 * when set (> 0), else derived from the step's reward bound R (training wrappers), the
 * discount gamma and n-step n: R (1 + gamma + ... + gamma^(n-1)) for the n-step reward,
 * and that plus (1 + gamma^n) R / (1 - gamma) for priorities (|TD error| with values
 * within their bound R / (1 - gamma)); 1e6 each when R is unknown or gamma >= 1. */
double fl_options_max_abs_reward(const fl_config_t *c);
double fl_options_max_priority(const fl_config_t *c);
void fl_options_actor(const fl_config_t *c, fl_actor_opts_t *out);

/* model.cpu_kernels as a backend (auto: fl_qnet_default_backend). */
fl_qnet_backend_kind fl_options_cpu_kernels(const fl_config_t *c);

/* run.deterministic: the learner's updates per round, round(replay.samples_per_insert *
 * actor.count * actor.sync_every / learner.batch_size), at least 1 (a round is
 * actor.sync_every env steps of every actor, one transition each). */
int64_t fl_options_round_updates(const fl_config_t *c);
/* run.deterministic: rounds between an evaluator's evaluations, eval.every learner steps
 * in rounds of fl_options_round_updates, at least 1. */
int64_t fl_options_round_every(const fl_config_t *c);

/* What an evaluator reads (eval/evaluator.h): env.*, eval.*, model.spec and
 * model.input_scale, run.evaluators, run.seed and run.progress_every. */
void fl_options_evaluator(const fl_config_t *c, fl_evaluator_opts_t *out);

/* What a parameter-server shard reads (paramserver/server.h): learner.mode,
 * paramserver.*, learner.count, run.checkpoint_dir and run.checkpoint_every (its gorila
 * checkpoints) and, with learner.mode = gorila, the optimizer
 * (fl_options_optimizer; apex shards run none and keep the default). FL_INVALID_ARGUMENT
 * for an unknown learner.optimizer (which a loaded config cannot hold). */
fl_status fl_options_paramserver(const fl_config_t *c, fl_paramserver_service_opts_t *out, fl_err_t *err);

/* What replay shard `shard` reads (replay/server.h): the replay.* keys, run.seed and
 * actor.count. The observation signature, the action count (the env's) and the
 * checkpoint to restore from (a command-line option) are left as
 * fl_replay_service_opts_init leaves them, for the caller to set; replay.frame_stack is
 * taken as it stands (the caller resolves 0, the env's frame stack, first).
 * FL_INVALID_ARGUMENT, naming the shard, when replay.selector names no selector. */
fl_status fl_options_replay(const fl_config_t *c, int shard, fl_replay_service_opts_t *out, fl_err_t *err);
/* 1 when a shard keeps the write-ahead log: replay.wal and a checkpoint folder
 * (replay.checkpoint_dir, else run.checkpoint_dir) to keep it in. */
int fl_options_replay_wal(const fl_config_t *c);

/* A learner's run settings (the second part of fl_learner_opts_t: everything but
 * index, addresses, obs, num_actions, resume_path and reduce, which the caller sets and
 * this leaves as they are). FL_INVALID_ARGUMENT naming the key when an enum key holds a
 * value outside its choices (possible only in a struct written by hand). */
fl_status fl_options_learner(const fl_config_t *c, fl_learner_opts_t *o, fl_err_t *err);

/* The optimizer settings of the learner.* keys (kernels/optim.h), which the learners and
 * the Gorila shards turn into the same fl_optim_config_t with fl_optim_config_from. */
fl_status fl_options_optim_settings(const fl_config_t *c, fl_optim_settings_t *out, fl_err_t *err);

/* The optimizer of the learner.* keys: learner.optimizer with learner.lr, and
 * learner.momentum (sgd), learner.adam_beta1/beta2/eps (adam) or
 * learner.rmsprop_decay/eps (rmsprop, centered, without momentum). */
fl_status fl_options_optimizer(const fl_config_t *c, fl_optim_config_t *out, fl_err_t *err);

#endif
