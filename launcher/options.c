/* options: from a configuration to the modules' options (see options.h). */
#include "launcher/options.h"

#include <math.h>
#include <string.h>

#include "envs/registry.h"
#include "envs/core/wrappers.h"
#include "replay/selector.h"

_Static_assert(FL_CONFIG_STRING_MAX <= FL_REPLAY_DIR_MAX, "replay.checkpoint_dir must fit the service's paths");

/* The standard Atari protocols (env.preset): envs/core/wrappers.h FL_WRAPPERS_*. Evaluations
 * drop the training-only wrappers. */

/* 1 when env `name` is built in with action 1 named fire (of 3 or more). */
static int fires(const char *name) {
    const fl_env_def_t *d = fl_env_find(name);
    return d && d->num_actions >= 3 && d->action_name && strcmp(d->action_name(1), "fire") == 0;
}

void fl_options_env(const fl_config_t *c, fl_env_factory_opts_t *out) {
    memset(out, 0, sizeof *out);
    out->name = c->env_name;
    out->plugin = c->env_plugin;
    out->wrappers = c->env_wrappers;
    out->max_episode_steps = (int)c->env_max_episode_steps;
    out->num_envs = (int)c->env_num_envs;
    out->sticky_actions = c->env_sticky_actions;
    out->difficulty_ramping = c->env_difficulty_ramping != 0;
    out->rng = c->env_rng == FL_CFG_RNG_REFERENCE ? FL_ENV_RNG_REFERENCE : FL_ENV_RNG_FLEET;
    out->args = c->env_args;
    if (c->env_preset == FL_CFG_PRESET_NATURE) {
        out->wrappers = fires(c->env_name) ? FL_WRAPPERS_NATURE_FIRE : FL_WRAPPERS_NATURE;
        out->sticky_actions = 0.0;
    } else if (c->env_preset == FL_CFG_PRESET_MACHADO) {
        out->wrappers = FL_WRAPPERS_MACHADO;
        out->sticky_actions = 0.25;
    }
}

/* What a preset needs of the rest of [env]. */
static fl_status check_preset(const fl_config_t *c, fl_err_t *err) {
    if (c->env_preset == FL_CFG_PRESET_NONE) return FL_OK;
    const char *preset = FL_CONFIG_ENUM_STR(c, env, preset);
    if (c->env_wrappers[0])
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "env.preset = %s sets the wrappers itself; env.wrappers = \"%s\" as well: give one of them",
                          preset, c->env_wrappers);
    if (strncmp(c->env_name, "atari-", 6) != 0 || c->env_plugin[0])
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "env.preset = %s is an Atari protocol: env.name = %s is not atari-*", preset, c->env_name);
    if (c->env_preset == FL_CFG_PRESET_MACHADO && !strstr(c->env_name, "-full"))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "env.preset = machado plays the full action set: env.name = %s-full instead of %s",
                          c->env_name, c->env_name);
    return FL_OK;
}

fl_status fl_options_open_env(const fl_config_t *c, fl_wrapped_env_t **out, fl_err_t *err) {
    *out = NULL;
    FL_TRY(check_preset(c, err));
    fl_env_factory_opts_t o;
    fl_options_env(c, &o);
    return fl_env_create_wrapped(&o, out, err);
}

double fl_options_step_reward_bound(const fl_config_t *c, int evaluation) {
    fl_env_factory_opts_t o;
    fl_options_env(c, &o);
    double base = c->env_reward_bound > 0 ? c->env_reward_bound
                  : c->env_plugin[0]      ? 0.0
                                          : fl_env_reward_bound(c->env_name);
    if (!evaluation) return fl_wrappers_reward_bound(o.wrappers, base);
    char spec[FL_CONFIG_STRING_MAX];
    fl_wrappers_for_evaluation(o.wrappers ? o.wrappers : "", spec, sizeof spec);
    return fl_wrappers_reward_bound(spec, base);
}

/* The n-step reward's bound and the largest TD error, from the training step's reward
 * bound; 0 each when unknown. */
static void derived_bounds(const fl_config_t *c, double *reward, double *priority) {
    const double r = fl_options_step_reward_bound(c, 0), g = c->learner_gamma;
    *reward = *priority = 0.0;
    if (!(r > 0.0) || !(g >= 0.0 && g < 1.0)) return;
    double sum = 0.0, gk = 1.0;
    for (int64_t k = 0; k < c->learner_n_step; k++, gk *= g) sum += gk;
    /* 1e-4 of slack: an actor sums its n-step rewards in single precision */
    *reward = r * sum * (1.0 + 1e-4);
    *priority = *reward + (1.0 + gk) * r / (1.0 - g);
}

double fl_options_max_abs_reward(const fl_config_t *c) {
    if (c->replay_max_abs_reward > 0) return c->replay_max_abs_reward;
    double r, p;
    derived_bounds(c, &r, &p);
    return r > 0 ? r : 1e6;
}

double fl_options_max_priority(const fl_config_t *c) {
    if (c->replay_max_priority > 0) return c->replay_max_priority;
    double r, p;
    derived_bounds(c, &r, &p);
    return p > 0 ? p : 1e6;
}

void fl_options_actor(const fl_config_t *c, fl_actor_opts_t *out) {
    memset(out, 0, sizeof *out);
    fl_options_env(c, &out->env);
    out->count = (int)c->actor_count;
    out->eps_base = c->actor_eps_base;
    out->eps_alpha = c->actor_eps_alpha;
    out->local_buffer = c->actor_local_buffer;
    out->sync_every = c->actor_sync_every;
    out->fetch_bf16 = c->actor_fetch_bf16 != 0;
    out->max_steps = c->actor_max_steps;
    out->max_backlog_mb = c->actor_max_backlog_mb;
    out->n_step = (int)c->learner_n_step;
    out->gamma = c->learner_gamma;
    out->model_spec = c->model_spec;
    out->input_scale = c->model_input_scale;
    out->backend = fl_options_cpu_kernels(c);
    out->replay_shards = c->replay_shards;
    out->max_abs_reward = fl_options_max_abs_reward(c);
    out->max_priority = fl_options_max_priority(c);
    out->seed = (uint64_t)c->run_seed;
    out->progress_every = c->run_progress_every;
    out->state_dir = c->run_checkpoint_dir;
    out->state_every = c->run_checkpoint_every;
    out->deterministic = c->run_deterministic != 0;
}

int64_t fl_options_round_updates(const fl_config_t *c) {
    double k = c->replay_samples_per_insert * (double)c->actor_count * (double)c->actor_sync_every /
               (double)c->learner_batch_size;
    return k < 1.5 ? 1 : (int64_t)llround(k);
}

int64_t fl_options_round_every(const fl_config_t *c) {
    const double rounds = c->eval_every / (double)fl_options_round_updates(c);
    return rounds < 1.5 ? 1 : (int64_t)llround(rounds);
}

fl_qnet_backend_kind fl_options_cpu_kernels(const fl_config_t *c) {
    switch (c->model_cpu_kernels) {
    case FL_CFG_KERNELS_DNNL: return FL_QNET_BACKEND_DNNL;
    case FL_CFG_KERNELS_REFERENCE: return FL_QNET_BACKEND_REF;
    case FL_CFG_KERNELS_ONEDNN: return FL_QNET_BACKEND_ONEDNN;
    case FL_CFG_KERNELS_AUTO: break;
    }
    return fl_qnet_default_backend();
}

void fl_options_evaluator(const fl_config_t *c, fl_evaluator_opts_t *out) {
    memset(out, 0, sizeof *out);
    fl_options_env(c, &out->env);
    out->model_spec = c->model_spec;
    out->input_scale = c->model_input_scale;
    out->backend = fl_options_cpu_kernels(c);
    out->every = c->eval_every;
    out->every_learner_steps = c->eval_every_unit == FL_CFG_EVERY_LEARNER_STEPS;
    out->episodes = (int)c->eval_episodes;
    out->epsilon = c->eval_epsilon;
    out->max_episode_steps = c->eval_max_episode_steps;
    out->parallel = (int)c->eval_parallel;
    out->count = (int)c->run_evaluators;
    out->seed = (uint64_t)c->run_seed;
    out->progress_every = c->run_progress_every;
    out->state_dir = c->run_checkpoint_dir;
    out->state_every = c->run_checkpoint_every;
    out->deterministic = c->run_deterministic != 0;
    out->actors = c->actor_count;
    out->round_updates = fl_options_round_updates(c);
    out->round_every = fl_options_round_every(c);
    out->round_env_steps = c->actor_count * c->actor_sync_every;
    out->replay_addr = "";
}

fl_status fl_options_optim_settings(const fl_config_t *c, fl_optim_settings_t *out, fl_err_t *err) {
    fl_optim_kind kind;
    fl_status s = fl_optim_kind_from_name(FL_CONFIG_ENUM_STR(c, learner, optimizer), &kind, err);
    if (s != FL_OK) {
        fl_err_prefix(err, "learner.optimizer");
        return s;
    }
    *out = (fl_optim_settings_t){kind,
                                 c->learner_lr,
                                 c->learner_momentum,
                                 c->learner_adam_beta1,
                                 c->learner_adam_beta2,
                                 c->learner_adam_eps,
                                 c->learner_rmsprop_decay,
                                 c->learner_rmsprop_eps};
    return FL_OK;
}

fl_status fl_options_optimizer(const fl_config_t *c, fl_optim_config_t *out, fl_err_t *err) {
    fl_optim_settings_t os;
    FL_TRY(fl_options_optim_settings(c, &os, err));
    *out = fl_optim_config_from(&os);
    return FL_OK;
}

fl_status fl_options_replay(const fl_config_t *c, int shard, fl_replay_service_opts_t *out, fl_err_t *err) {
    fl_replay_service_opts_init(out);
    out->shard = shard;
    out->shards = (int)c->replay_shards;
    out->capacity = c->replay_capacity;
    out->alpha = c->replay_alpha;
    out->priority_eps = c->replay_priority_eps;
    if (fl_selector_parse(FL_CONFIG_ENUM_STR(c, replay, selector), &out->selector, err) != FL_OK) {
        fl_err_prefix(err, "replay shard %d", shard);
        return FL_INVALID_ARGUMENT;
    }
    out->max_times_sampled = c->replay_max_times_sampled;
    out->tree_rebuild_every = c->replay_tree_rebuild_every;
    out->frame_stack = (int)c->replay_frame_stack;
    out->zstd_level = (int)c->replay_zstd_level;
    out->seed = (uint64_t)c->run_seed;
    out->min_size_to_sample = c->replay_min_size_to_sample;
    out->samples_per_insert = c->replay_samples_per_insert;
    out->rate_error_buffer = c->replay_rate_error_buffer;
    out->actors = c->actor_count;
    out->round_participants = c->run_deterministic ? c->actor_count + c->run_evaluators : 0;
    /* The experiment's checkpoints (run.checkpoint_dir) unless replay.* names its own. */
    int own = c->replay_checkpoint_dir[0] != '\0';
    out->checkpoint_dir = own ? c->replay_checkpoint_dir : c->run_checkpoint_dir;
    out->checkpoint_every = own || c->replay_checkpoint_every > 0 ? c->replay_checkpoint_every
                            : c->run_checkpoint_dir[0]            ? c->run_checkpoint_every
                                                                  : 0;
    out->checkpoint_at_stop = !own && c->run_checkpoint_dir[0] != '\0';
    out->wal = fl_options_replay_wal(c);
    out->wal_fsync = c->replay_wal_fsync;
    out->max_abs_reward = fl_options_max_abs_reward(c);
    out->max_priority = fl_options_max_priority(c);
    out->max_streams = c->replay_max_streams;
    out->stream_idle_s = c->replay_stream_idle_s;
    return FL_OK;
}

int fl_options_replay_wal(const fl_config_t *c) {
    return c->replay_wal && !c->run_deterministic && (c->replay_checkpoint_dir[0] || c->run_checkpoint_dir[0]);
}

fl_status fl_options_learner(const fl_config_t *c, fl_learner_opts_t *o, fl_err_t *err) {
    if (!c || !o) return fl_err_set(err, FL_INVALID_ARGUMENT, "learner options: NULL argument");
    switch (c->learner_mode) {
    case FL_CFG_MODE_APEX: o->mode = FL_LEARNER_APEX; break;
    case FL_CFG_MODE_GORILA: o->mode = FL_LEARNER_GORILA; break;
    default:
        return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: learner.mode = %d (expected apex or gorila)",
                          (int)c->learner_mode);
    }
    switch (c->learner_device) {
    case FL_CFG_DEVICE_CPU: o->device = FL_LEARNER_CPU; break;
    case FL_CFG_DEVICE_CUDA: o->device = FL_LEARNER_CUDA; break;
    case FL_CFG_DEVICE_AUTO: o->device = FL_LEARNER_AUTO; break;
    default:
        return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: learner.device = %d (expected cpu, cuda or auto)",
                          (int)c->learner_device);
    }
    fl_status s = fl_options_optim_settings(c, &o->optim, err);
    if (s != FL_OK) {
        fl_err_prefix(err, "learner");
        return s;
    }
    o->count = c->learner_count;
    o->threads = (int)c->learner_threads;
    o->flush_denormals = c->learner_flush_denormals != 0;
    o->tf32 = c->learner_tf32 != 0;
    o->cuda_graphs = c->learner_cuda_graphs != 0;
    o->cudnn_benchmark = c->learner_cudnn_benchmark != 0;
    o->batch_size = (int)c->learner_batch_size;
    o->grad_clip = c->learner_grad_clip;
    o->huber_delta = c->learner_huber_delta;
    o->target_update = c->learner_target_update;
    o->publish_every = c->learner_publish_every;
    o->checkpoint_dir = c->learner_checkpoint_dir[0] ? c->learner_checkpoint_dir : c->run_checkpoint_dir;
    o->checkpoint_every = c->learner_checkpoint_every;
    o->checkpoint_every_s = c->learner_checkpoint_dir[0] ? 0 : c->run_checkpoint_every;
    o->keep_checkpoints = (int)c->run_keep_checkpoints;
    o->max_steps = c->learner_max_steps;
    o->deterministic = c->run_deterministic != 0;
    o->round_updates = fl_options_round_updates(c);
    o->prefetch = o->deterministic ? 0 : (int)c->learner_prefetch; /* rounds sample synchronously */
    o->batches_per_call = (int)c->learner_batches_per_call;
    o->fetch_every = c->learner_fetch_every;
    o->push_1bit = c->learner_push_1bit != 0;
    o->slow_push_ms = c->learner_slow_push_ms;
    o->model_spec = c->model_spec;
    o->input_scale = c->model_input_scale;
    o->backend = fl_options_cpu_kernels(c);
    o->beta = c->replay_beta;
    o->max_priority = fl_options_max_priority(c);
    o->replay_shards = c->replay_shards;
    o->paramserver_wait_timeout_s = c->paramserver_wait_timeout_s;
    o->seed = (uint64_t)c->run_seed;
    o->progress_every = c->run_progress_every;
    return FL_OK;
}

fl_status fl_options_paramserver(const fl_config_t *c, fl_paramserver_service_opts_t *out, fl_err_t *err) {
    fl_paramserver_service_opts_init(out);
    out->mode = c->learner_mode == FL_CFG_MODE_GORILA ? FL_PARAMSERVER_GORILA : FL_PARAMSERVER_APEX;
    out->shards = (int)c->paramserver_shards;
    out->learners = (int)c->learner_count;
    out->max_staleness = (uint64_t)c->paramserver_max_staleness;
    out->stale_policy =
        c->paramserver_stale_policy == FL_CFG_STALE_WAIT ? FL_PARAMSERVER_STALE_WAIT : FL_PARAMSERVER_STALE_DROP;
    out->staleness_lr = c->paramserver_staleness_lr != 0;
    out->wait_timeout_s = c->paramserver_wait_timeout_s;
    out->max_version_step = (uint64_t)c->paramserver_max_version_step;
    out->max_large_messages = (int)c->paramserver_max_large_messages;
    out->checkpoint_dir = c->run_checkpoint_dir;
    out->checkpoint_every_s = c->run_checkpoint_every;
    /* Only gorila shards run the optimizer (apex ones keep the default, unused). */
    if (out->mode == FL_PARAMSERVER_GORILA) FL_TRY(fl_options_optimizer(c, &out->optim, err));
    return FL_OK;
}
