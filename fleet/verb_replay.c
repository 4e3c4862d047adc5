/* `fleet replay`: serve one prioritized replay shard until SIGINT/SIGTERM.
 *
 * The table's observation signature is env.name's (built-in, or env.plugin's); its size and
 * priorities come from the [replay] section. Once serving, the bound address is logged
 * and written, with a newline, to --ready-fd (the launcher's pipe), which is then
 * closed. With --restore PATH the table starts from that checkpoint (see replay/server.h);
 * replay.checkpoint_dir and replay.checkpoint_every enable the Checkpoint call's default
 * file and periodic checkpoints. With replay.wal = 1 the shard logs every insert before it
 * acknowledges it and recovers at start from replay.checkpoint_dir by itself (its
 * checkpoint shard-<id>.ckpt, if any, then its log; see docs/replay-durability.md), so a
 * shard killed with kill -9 is restarted with the same command line; --restore is then
 * refused (exit 2): put the checkpoint at replay.checkpoint_dir/shard-<id>.ckpt instead.
 * Exit codes: 0 after a requested stop, 1 when serving fails, 2 for usage and
 * configuration errors. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/log.h"
#include "common/stop.h"
#include "envs/plugin.h"
#include "fleet/cli.h"
#include "fleet/config_replay.h"
#include "fleet/verbs.h"
#include "replay/server.h"

/* Writes all of buf to fd; 0 on success. */
static int write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

int fl_verb_replay(int argc, char **argv) {
    fl_config_t cfg;
    char listen[256] = "", control[256] = "", restore[256] = "";
    int64_t shard = 0, ready_fd = -1;
    const fl_opt_t opts[] = {
        {"--listen", FL_OPT_STRING, listen},
        {"--shard", FL_OPT_INT, &shard},
        {"--ready-fd", FL_OPT_INT, &ready_fd},
        {"--control", FL_OPT_STRING, control},
        {"--restore", FL_OPT_STRING, restore},
    };
    int rc = fl_cli_parse("replay", argc, argv, &cfg, opts, (int)(sizeof opts / sizeof opts[0]), NULL, 0);
    if (rc != 0) return rc;
    if (shard < 0 || shard >= cfg.replay_shards) {
        fprintf(stderr, "fleet replay: --shard %" PRId64 " is out of range (expected 0 .. %" PRId64
                        ", replay.shards = %" PRId64 ")\n",
                shard, cfg.replay_shards - 1, cfg.replay_shards);
        return 2;
    }
    if (ready_fd < -1 || ready_fd > 1 << 20) {
        fprintf(stderr, "fleet replay: --ready-fd %" PRId64 " is not a file descriptor\n", ready_fd);
        return 2;
    }
    if (cfg.replay_wal && restore[0]) {
        fprintf(stderr,
                "fleet replay: --restore cannot be combined with replay.wal = 1: with the write-ahead log the shard "
                "recovers from replay.checkpoint_dir by itself (copy the checkpoint to %s/shard-%" PRId64
                ".ckpt instead)\n",
                cfg.replay_checkpoint_dir[0] ? cfg.replay_checkpoint_dir : "<replay.checkpoint_dir>", shard);
        return 2;
    }
    if (!listen[0]) snprintf(listen, sizeof listen, "%.250s:0", cfg.run_bind_host);
    fl_cli_setup_logging(&cfg, "replay", (int)shard);

    const fl_env_def_t *env = NULL;
    fl_err_t err;
    fl_err_init(&err);
    fl_wrapped_env_t *wenv = NULL;
    if (fl_env_from_config(&cfg, &wenv, &err) != FL_OK) {
        fprintf(stderr, "fleet replay: %s\n", err.msg);
        return 2;
    }
    env = fl_wrapped_env_info(wenv);
    if (cfg.replay_frame_stack == 0) cfg.replay_frame_stack = fl_wrapped_env_frame_stack(wenv);
    fl_replay_service_opts_t ro;
    fl_status st = fl_config_replay_opts(&cfg, (int)shard, &ro, &err);
    ro.obs = fl_obs_spec_make(env->obs_dtype, env->obs_rank, env->obs_shape);
    ro.num_actions = env->num_actions;
    ro.restore_path = restore;
    fl_wrapped_env_destroy(wenv);

    fl_stop_install();
    fl_replay_service_t *svc = NULL;
    if (st == FL_OK) st = fl_replay_service_create(&ro, &svc, &err);
    if (st != FL_OK) {
        FL_ERROR("cannot %s replay shard %d: %s", restore[0] ? "restore" : "create", (int)shard, err.msg);
        return st == FL_INVALID_ARGUMENT || st == FL_NOT_FOUND ? 2 : 1;
    }
    char bound[300];
    if (fl_replay_service_start(svc, listen, bound, sizeof bound, &err) != FL_OK) {
        FL_ERROR("cannot serve replay shard %d on %s: %s", (int)shard, listen, err.msg);
        fl_replay_service_destroy(svc);
        return 1;
    }
    fl_replay_info_t info;
    fl_replay_service_info(svc, &info);
    char shape[64];
    fl_obs_spec_format_shape(&ro.obs, shape, sizeof shape);
    FL_INFO("replay shard %d serving on %s (capacity %" PRIu64 ", obs %s %s, sampling from %" PRIu64 ")", (int)shard,
            bound, info.capacity, fl_dtype_name(ro.obs.dtype), shape, fl_replay_service_min_size(svc));
    if (control[0]) FL_DEBUG("--control %s: the launcher polls this shard's Info; no reports are sent", control);

    if (ready_fd >= 0) {
        char line[310];
        int n = snprintf(line, sizeof line, "%s\n", bound);
        int bad = write_all((int)ready_fd, line, (size_t)n) != 0;
        int e = errno;
        close((int)ready_fd);
        if (bad) {
            FL_ERROR("cannot write the bound address to --ready-fd %" PRId64 ": %s", ready_fd, strerror(e));
            fl_replay_service_destroy(svc);
            return 1;
        }
    }

    while (!fl_stop_requested()) fl_sleep_sec(0.05);

    FL_INFO("replay shard %d stopping (signal %d)", (int)shard, fl_stop_signal());
    fl_replay_service_stop(svc);
    fl_replay_service_info(svc, &info);
    FL_INFO("replay shard %d final: size %" PRIu64 "/%" PRIu64 ", inserted %" PRIu64 " in %" PRIu64
            " batches, rejected %" PRIu64 ", sampled %" PRIu64 " in %" PRIu64 " calls, priority updates %" PRIu64
            " applied %" PRIu64 " stale, up %.1f s",
            (int)shard, info.size, info.capacity, info.inserted, info.insert_batches, info.rejected, info.sampled,
            info.sample_calls, info.updates_applied, info.updates_stale, info.uptime_s);
    fl_replay_service_destroy(svc);
    return 0;
}
