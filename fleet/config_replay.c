/* config_replay: see config_replay.h. */
#include "fleet/config_replay.h"

#include "replay/selector.h"

_Static_assert(FL_CONFIG_STRING_MAX <= FL_REPLAY_DIR_MAX, "replay.checkpoint_dir must fit the service's paths");

fl_status fl_config_replay_opts(const fl_config_t *cfg, int shard, fl_replay_service_opts_t *opts, fl_err_t *err) {
    fl_replay_service_opts_init(opts);
    opts->shard = shard;
    opts->shards = (int)cfg->replay_shards;
    opts->capacity = cfg->replay_capacity;
    opts->alpha = cfg->replay_alpha;
    opts->priority_eps = cfg->replay_priority_eps;
    if (fl_selector_parse(cfg->replay_selector, &opts->selector, err) != FL_OK) {
        fl_err_prefix(err, "replay shard %d", shard);
        return FL_INVALID_ARGUMENT;
    }
    opts->max_times_sampled = cfg->replay_max_times_sampled;
    opts->tree_rebuild_every = cfg->replay_tree_rebuild_every;
    opts->frame_stack = (int)cfg->replay_frame_stack;
    opts->zstd_level = (int)cfg->replay_zstd_level;
    opts->seed = (uint64_t)cfg->run_seed;
    opts->min_size_to_sample = cfg->replay_min_size_to_sample;
    opts->samples_per_insert = cfg->replay_samples_per_insert;
    opts->rate_error_buffer = cfg->replay_rate_error_buffer;
    opts->actors = cfg->actor_count;
    opts->checkpoint_dir = cfg->replay_checkpoint_dir;
    opts->checkpoint_every = cfg->replay_checkpoint_every;
    opts->wal = cfg->replay_wal;
    opts->wal_fsync = cfg->replay_wal_fsync;
    return FL_OK;
}
