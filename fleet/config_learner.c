/* config_learner: a run's configuration as the learner's options (see config_learner.h). */
#include "fleet/config_learner.h"

#include <string.h>

#include "kernels/optim.h"

static fl_status mode_of(const char *name, fl_learner_mode *out, fl_err_t *err) {
    if (strcmp(name, "apex") == 0) *out = FL_LEARNER_APEX;
    else if (strcmp(name, "gorila") == 0) *out = FL_LEARNER_GORILA;
    else return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: learner.mode = %s (expected apex or gorila)", name);
    return FL_OK;
}

static fl_status device_of(const char *name, fl_learner_device *out, fl_err_t *err) {
    if (strcmp(name, "cpu") == 0) *out = FL_LEARNER_CPU;
    else if (strcmp(name, "cuda") == 0) *out = FL_LEARNER_CUDA;
    else if (strcmp(name, "auto") == 0) *out = FL_LEARNER_AUTO;
    else
        return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: learner.device = %s (expected cpu, cuda or auto)",
                          name);
    return FL_OK;
}

fl_status fl_config_learner_options(const fl_config_t *cfg, fl_learner_options_t *o, fl_err_t *err) {
    if (!cfg || !o) return fl_err_set(err, FL_INVALID_ARGUMENT, "learner options: NULL argument");
    FL_TRY(mode_of(cfg->learner_mode, &o->mode, err));
    FL_TRY(device_of(cfg->learner_device, &o->device, err));
    fl_optim_kind kind;
    fl_status s = fl_optim_kind_from_name(cfg->learner_optimizer, &kind, err);
    if (s != FL_OK) {
        fl_err_prefix(err, "learner: learner.optimizer");
        return s;
    }
    o->optim = (fl_optim_settings_t){kind,
                                     cfg->learner_lr,
                                     cfg->learner_momentum,
                                     cfg->learner_adam_beta1,
                                     cfg->learner_adam_beta2,
                                     cfg->learner_adam_eps,
                                     cfg->learner_rmsprop_decay,
                                     cfg->learner_rmsprop_eps};
    o->count = cfg->learner_count;
    o->threads = (int)cfg->learner_threads;
    o->tf32 = cfg->learner_tf32 != 0;
    o->cuda_graphs = cfg->learner_cuda_graphs != 0;
    o->batch_size = (int)cfg->learner_batch_size;
    o->grad_clip = cfg->learner_grad_clip;
    o->huber_delta = cfg->learner_huber_delta;
    o->target_update = cfg->learner_target_update;
    o->publish_every = cfg->learner_publish_every;
    o->checkpoint_dir = cfg->learner_checkpoint_dir;
    o->checkpoint_every = cfg->learner_checkpoint_every;
    o->max_steps = cfg->learner_max_steps;
    o->prefetch = (int)cfg->learner_prefetch;
    o->fetch_every = cfg->learner_fetch_every;
    o->push_1bit = cfg->learner_push_1bit != 0;
    o->slow_push_ms = cfg->learner_slow_push_ms;
    o->model_spec = cfg->model_spec;
    o->input_scale = cfg->model_input_scale;
    o->beta = cfg->replay_beta;
    o->replay_shards = cfg->replay_shards;
    o->paramserver_wait_timeout_s = cfg->paramserver_wait_timeout_s;
    o->seed = (uint64_t)cfg->run_seed;
    o->progress_every = cfg->run_progress_every;
    return FL_OK;
}
