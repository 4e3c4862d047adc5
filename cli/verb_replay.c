/* `fleet replay`: serve one prioritized replay shard until SIGINT/SIGTERM.
 *
 * The table's observation signature is env.name's (built-in, or env.plugin's); its size and
 * priorities come from the [replay] section. Once serving, the bound address is logged
 * and written, with a newline, to --ready-fd (the launcher's pipe), which is then
 * closed. With --restore PATH the table starts from that checkpoint (see replay/server.h);
 * replay.checkpoint_dir and replay.checkpoint_every enable the Checkpoint call (which
 * writes only inside that folder: the default file, or a plain file name the call gives)
 * and periodic checkpoints. With replay.wal = 1 the shard logs every insert before it
 * acknowledges it and recovers at start from replay.checkpoint_dir by itself (its
 * checkpoint shard-<id>.ckpt, if any, then its log; see docs/replay-durability.md), so a
 * shard killed with kill -9 is restarted with the same command line; --restore is then
 * refused (exit 2): put the checkpoint at replay.checkpoint_dir/shard-<id>.ckpt instead.
 * The verb is the replay service's callbacks for cli/service_main.h, which owns the
 * skeleton. Exit codes: 0 after a requested stop, 1 when serving fails, 2 for usage and
 * configuration errors (and a checkpoint that cannot be restored). One thread. */
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/stop.h"
#include "envs/factory.h"
#include "cli/cli.h"
#include "launcher/options.h"
#include "cli/service_main.h"
#include "cli/verbs.h"
#include "replay/server.h"

typedef struct replay_verb {
    char restore[256]; /* --restore */
    fl_obs_spec_t obs; /* the table's observation signature (the env's) */
    int num_actions;
    int shard;
    fl_replay_service_t *svc;
} replay_verb_t;

static int check_shard(const fl_service_args_t *a) {
    if (a->shard >= 0 && a->shard < a->cfg.replay_shards) return 0;
    fprintf(stderr,
            "fleet replay: --shard %" PRId64 " is out of range (expected 0 .. %" PRId64 ", replay.shards = %" PRId64
            ")\n",
            a->shard, a->cfg.replay_shards - 1, a->cfg.replay_shards);
    return 2;
}

static void default_listen(const fl_service_args_t *a, char *buf, size_t len) {
    snprintf(buf, len, "%.250s:0", a->cfg.run_bind_host);
}

/* Refuses --restore with the write-ahead log, then reads the signature from the env (and
 * replay.frame_stack = 0 from its wrappers). */
static int prepare(void *ctx, fl_service_args_t *a) {
    replay_verb_t *rv = ctx;
    fl_config_t *cfg = &a->cfg;
    rv->shard = (int)a->shard;
    if (fl_options_replay_wal(cfg) && rv->restore[0]) {
        fprintf(stderr,
                "fleet replay: --restore cannot be combined with replay.wal = 1: with the write-ahead log the shard "
                "recovers from replay.checkpoint_dir by itself (copy the checkpoint to %s/shard-%" PRId64
                ".ckpt instead)\n",
                cfg->replay_checkpoint_dir[0] ? cfg->replay_checkpoint_dir : "<replay.checkpoint_dir>", a->shard);
        return 2;
    }
    fl_err_t err;
    fl_err_init(&err);
    fl_wrapped_env_t *wenv = NULL;
    if (fl_options_open_env(cfg, &wenv, &err) != FL_OK) {
        fprintf(stderr, "fleet replay: %s\n", err.msg);
        return 2;
    }
    const fl_env_def_t *env = fl_wrapped_env_info(wenv);
    rv->obs = env->obs;
    rv->num_actions = env->num_actions;
    if (cfg->replay_frame_stack == 0) cfg->replay_frame_stack = fl_wrapped_env_frame_stack(wenv);
    fl_wrapped_env_destroy(wenv);
    return 0;
}

static int create(void *ctx, const fl_service_args_t *a) {
    replay_verb_t *rv = ctx;
    fl_err_t err;
    fl_err_init(&err);
    fl_replay_service_opts_t ro;
    fl_status st = fl_options_replay(&a->cfg, rv->shard, &ro, &err);
    ro.obs = rv->obs;
    ro.num_actions = rv->num_actions;
    ro.restore_path = rv->restore;
    if (st == FL_OK) st = fl_replay_service_create(&ro, &rv->svc, &err);
    if (st == FL_OK) return 0;
    FL_ERROR("cannot %s replay shard %d: %s", rv->restore[0] ? "restore" : "create", rv->shard, err.msg);
    return st == FL_INVALID_ARGUMENT || st == FL_NOT_FOUND ? 2 : 1;
}

static int start(void *ctx, const fl_service_args_t *a, char *addr, size_t len) {
    replay_verb_t *rv = ctx;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_replay_service_start(rv->svc, a->listen, addr, len, &err) != FL_OK) {
        FL_ERROR("cannot serve replay shard %d on %s: %s", rv->shard, a->listen, err.msg);
        return -1;
    }
    fl_replay_info_t info;
    fl_replay_service_info(rv->svc, &info);
    char shape[64];
    fl_obs_spec_format_shape(&rv->obs, shape, sizeof shape);
    FL_INFO("replay shard %d serving on %s (capacity %" PRIu64 ", obs %s %s, sampling from %" PRIu64 ")", rv->shard,
            addr, info.capacity, fl_dtype_name(rv->obs.dtype), shape, fl_replay_service_min_size(rv->svc));
    if (a->control[0]) FL_DEBUG("--control %s: the launcher polls this shard's Info; no reports are sent", a->control);
    return 0;
}

/* After a requested stop: stops serving and logs the shard's last figures. (After a
 * failure the shard is only destroyed.) */
static void stop(void *ctx, int clean) {
    replay_verb_t *rv = ctx;
    if (!clean) return;
    FL_INFO("replay shard %d stopping (signal %d)", rv->shard, fl_stop_signal());
    fl_replay_service_stop(rv->svc);
    fl_replay_info_t info;
    fl_replay_service_info(rv->svc, &info);
    FL_INFO("replay shard %d final: size %" PRIu64 "/%" PRIu64 ", inserted %" PRIu64 " in %" PRIu64
            " batches, rejected %" PRIu64 ", sampled %" PRIu64 " in %" PRIu64 " calls, priority updates %" PRIu64
            " applied %" PRIu64
            " stale, up %.1f s; the rate limiter held inserts %.1f s and samples %.1f s (summed "
            "over the calls it held)",
            rv->shard, info.size, info.capacity, info.inserted, info.insert_batches, info.rejected, info.sampled,
            info.sample_calls, info.updates_applied, info.updates_stale, info.uptime_s, info.insert_blocked_s,
            info.sample_blocked_s);
}

static void destroy(void *ctx) {
    replay_verb_t *rv = ctx;
    fl_replay_service_destroy(rv->svc);
}

int fl_verb_replay(int argc, char **argv) {
    /* One malloc arena for the whole shard: its serving threads allocate frame chunks
     * that live until evicted and are freed by whichever thread evicts them; with an arena
     * per thread the free space scattered over the arenas grew a full shard's resident
     * memory by tens of MB in its first half hour, with one (and the service's periodic
     * trims) it stays within a few MB of the data it holds. */
    mallopt(M_ARENA_MAX, 1);
    replay_verb_t rv;
    memset(&rv, 0, sizeof rv);
    const fl_opt_t opts[] = {{"--restore", FL_OPT_STRING, rv.restore}};
    const fl_service_def_t def = {
        .verb = "replay",
        .ready_what = "bound address",
        .opts = opts,
        .nopts = (int)(sizeof opts / sizeof opts[0]),
        .ctx = &rv,
        .check_shard = check_shard,
        .default_listen = default_listen,
        .prepare = prepare,
        .create = create,
        .start = start,
        .stop = stop,
        .destroy = destroy,
    };
    return fl_service_main(&def, argc, argv);
}
