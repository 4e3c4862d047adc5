/* options: from a configuration to the modules' options (see options.h). */
#include "cli/options.h"

#include <string.h>

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
}

fl_status fl_options_open_env(const fl_config_t *c, fl_wrapped_env_t **out, fl_err_t *err) {
    fl_env_factory_opts_t o;
    fl_options_env(c, &o);
    return fl_env_create_wrapped(&o, out, err);
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
    out->n_step = (int)c->learner_n_step;
    out->gamma = c->learner_gamma;
    out->model_spec = c->model_spec;
    out->input_scale = c->model_input_scale;
    out->replay_shards = c->replay_shards;
    out->seed = (uint64_t)c->run_seed;
    out->progress_every = c->run_progress_every;
}

fl_status fl_options_optimizer(const fl_config_t *c, fl_optim_config_t *out, fl_err_t *err) {
    fl_optim_kind kind;
    FL_TRY(fl_optim_kind_from_name(FL_CONFIG_ENUM_STR(c, learner, optimizer), &kind, err));
    *out = fl_optim_config_default(kind);
    out->lr = (float)c->learner_lr;
    switch (kind) {
    case FL_OPTIM_SGD: out->momentum = (float)c->learner_momentum; break;
    case FL_OPTIM_ADAM:
        out->beta1 = (float)c->learner_adam_beta1;
        out->beta2 = (float)c->learner_adam_beta2;
        out->eps = (float)c->learner_adam_eps;
        break;
    case FL_OPTIM_RMSPROP:
        out->decay = (float)c->learner_rmsprop_decay;
        out->eps = (float)c->learner_rmsprop_eps;
        out->momentum = 0.0f; /* learner.momentum is SGD's */
        break;
    }
    return FL_OK;
}

fl_status fl_options_paramserver(const fl_config_t *c, fl_paramserver_service_opts_t *out, fl_err_t *err) {
    fl_paramserver_service_opts_init(out);
    out->mode = c->learner_mode == FL_CFG_MODE_GORILA ? FL_PARAMSERVER_GORILA : FL_PARAMSERVER_APEX;
    out->shards = (int)c->paramserver_shards;
    out->learners = (int)c->learner_count;
    out->max_staleness = (uint64_t)c->paramserver_max_staleness;
    out->stale_policy = c->paramserver_stale_policy == FL_CFG_STALE_WAIT ? FL_PARAMSERVER_STALE_WAIT
                                                                         : FL_PARAMSERVER_STALE_DROP;
    out->staleness_lr = c->paramserver_staleness_lr != 0;
    out->wait_timeout_s = c->paramserver_wait_timeout_s;
    /* Only gorila shards run the optimizer (apex ones keep the default, unused). */
    if (out->mode == FL_PARAMSERVER_GORILA) FL_TRY(fl_options_optimizer(c, &out->optim, err));
    return FL_OK;
}
