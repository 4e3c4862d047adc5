/* options: the one place where a configuration (common/config.h) becomes the options of
 * the modules the roles run. Every module takes its own options struct, declared in its
 * own header, and none of them reads fl_config_t; the functions below say which key
 * goes where, and turn the config's enum strings (learner.mode,
 * paramserver.stale_policy) into the modules' C enums.
 *
 * Strings in the filled structs point into the config, which must outlive them (a
 * module that keeps a string copies it, see each header). */
#ifndef FL_CLI_OPTIONS_H
#define FL_CLI_OPTIONS_H

#include "common/config.h"
#include "common/status.h"
#include "paramserver/server.h"

/* What a parameter-server shard reads (paramserver/server.h): learner.mode,
 * paramserver.*, learner.count and, with learner.mode = gorila, the optimizer
 * (fl_options_optimizer; apex shards run none and keep the default). FL_INVALID_ARGUMENT
 * for an unknown learner.optimizer (which a loaded config cannot hold). */
fl_status fl_options_paramserver(const fl_config_t *c, fl_paramserver_service_opts_t *out, fl_err_t *err);

/* The optimizer of the learner.* keys: learner.optimizer with learner.lr, and
 * learner.momentum (sgd), learner.adam_beta1/beta2/eps (adam) or
 * learner.rmsprop_decay/eps (rmsprop, centered, without momentum). */
fl_status fl_options_optimizer(const fl_config_t *c, fl_optim_config_t *out, fl_err_t *err);

#endif
