/* options: from a configuration to the modules' options (see options.h). */
#include "cli/options.h"

#include <string.h>

fl_status fl_options_optimizer(const fl_config_t *c, fl_optim_config_t *out, fl_err_t *err) {
    fl_optim_kind kind;
    FL_TRY(fl_optim_kind_from_name(c->learner_optimizer, &kind, err));
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
    out->mode = strcmp(c->learner_mode, "gorila") == 0 ? FL_PARAMSERVER_GORILA : FL_PARAMSERVER_APEX;
    out->shards = (int)c->paramserver_shards;
    out->learners = (int)c->learner_count;
    out->max_staleness = (uint64_t)c->paramserver_max_staleness;
    out->stale_policy = strcmp(c->paramserver_stale_policy, "wait") == 0 ? FL_PARAMSERVER_STALE_WAIT
                                                                         : FL_PARAMSERVER_STALE_DROP;
    out->staleness_lr = c->paramserver_staleness_lr != 0;
    out->wait_timeout_s = c->paramserver_wait_timeout_s;
    /* Only gorila shards run the optimizer (apex ones keep the default, unused). */
    if (out->mode == FL_PARAMSERVER_GORILA) FL_TRY(fl_options_optimizer(c, &out->optim, err));
    return FL_OK;
}
