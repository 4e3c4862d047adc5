/* config_replay: the replay service's options (replay/server.h) from a run's
 * configuration. This is the one place that maps the [replay] keys (and run.seed and
 * actor.count, which the service also reads) to fl_replay_service_opts_t, so that
 * replay/ never sees fl_config_t.
 *
 * Ownership: the options' strings point into cfg, which must outlive their use (create
 * copies what it keeps). Failure: FL_INVALID_ARGUMENT with a message, opts then
 * undefined. Thread-safety: a pure function of its arguments. */
#ifndef FL_FLEET_CONFIG_REPLAY_H
#define FL_FLEET_CONFIG_REPLAY_H

#include "common/config.h"
#include "common/status.h"
#include "replay/server.h"

/* Fills *opts for shard `shard` of the run configured by cfg: every key the service
 * reads. The observation signature, the action count (the env's) and the checkpoint to
 * restore from (a command-line option) are left as fl_replay_service_opts_init leaves
 * them, for the caller to set. replay.frame_stack is taken as it stands: the caller
 * resolves 0 (the env's frame stack) first. FL_INVALID_ARGUMENT, naming the shard, when
 * replay.selector names no selector. */
fl_status fl_config_replay_opts(const fl_config_t *cfg, int shard, fl_replay_service_opts_t *opts, fl_err_t *err);

#endif
