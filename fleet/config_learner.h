/* config_learner: the one mapping from a run's configuration (common/config.h) to the
 * learner's options (learner/learner.h), so that the learner library never reads the
 * configuration itself: `fleet learner` and the tests that build learners go through it.
 *
 * Config enum keys become C enums here (learner.mode, learner.device,
 * learner.optimizer); every other key is copied as it is.
 * Failure: FL_INVALID_ARGUMENT naming the key when an enum key holds a value outside its
 * choices (only possible when a caller wrote the struct by hand: the config parser checks
 * them); *o is then partly written.
 * Thread-safety: a pure function of its arguments. */
#ifndef FL_FLEET_CONFIG_LEARNER_H
#define FL_FLEET_CONFIG_LEARNER_H

#include "common/config.h"
#include "common/status.h"
#include "learner/learner.h"

/* Fills the run's settings of *o from cfg (the second part of fl_learner_options_t) and
 * leaves this process's part (index, addresses, obs, num_actions, resume_path, reduce)
 * as it is. The strings point into cfg. */
fl_status fl_config_learner_options(const fl_config_t *cfg, fl_learner_options_t *o, fl_err_t *err);

#endif
