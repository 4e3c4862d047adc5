/* verb_paramserver: `fleet paramserver`, one parameter-server shard as a process.
 *
 * Holds slice --shard of paramserver.shards (paramserver/shard.h) of the flat vector, in
 * learner.mode apex (learners publish) or gorila (learners push gradients and this shard
 * applies learner.optimizer; see paramserver/server.h). Serves fleet.ParamServer until
 * SIGINT/SIGTERM or until the launcher's Control service asks it to stop, reporting the
 * held version to the launcher when --control is given. --ready-fd lets a launcher learn
 * the bound address (useful with port 0). The verb is the parameter server's callbacks
 * for cli/service_main.h, which owns the skeleton.
 *
 * Gorila checkpoints (paramserver/checkpoint.h): a gorila shard writes
 * <run.checkpoint_dir>/paramserver-<shard>.safetensors every run.checkpoint_every seconds
 * (0 = only then) and when it stops; `--restore FILE` loads one before it serves (a file
 * that does not match the config is refused, exit 2), so that `fleet run` can restart a
 * killed shard. A failed periodic checkpoint is logged and the shard serves on.
 *
 * Exit codes: 0 after a requested stop, 1 when serving fails, 2 for usage and
 * configuration errors. One thread. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/config.h"
#include "common/clock.h"
#include "common/control.h"
#include "common/log.h"
#include "cli/cli.h"
#include "launcher/options.h"
#include "cli/service_main.h"
#include "cli/verbs.h"
#include "paramserver/checkpoint.h"
#include "paramserver/server.h"

typedef struct ps_verb {
    fl_paramserver_service_t *svc;
    fl_reporter_t *rep; /* to the launcher's Control */
    int64_t shard;
    char restore[256];    /* --restore FILE ("" = none) */
    char ckpt_path[1100]; /* gorila with run.checkpoint_dir: where its checkpoints go ("" = none) */
    double ckpt_every, last_ckpt;
} ps_verb_t;

/* Writes the gorila checkpoint (when there is a folder); failures are logged. */
static void checkpoint(ps_verb_t *pv) {
    if (!pv->ckpt_path[0]) return;
    pv->last_ckpt = fl_clock_sec();
    fl_err_t err;
    fl_err_init(&err);
    int saved = 0;
    if (fl_paramserver_service_checkpoint(pv->svc, pv->ckpt_path, &saved, &err) != FL_OK)
        FL_WARN("paramserver shard %" PRId64 " checkpoint failed: %s", pv->shard, err.msg);
    else if (saved)
        FL_DEBUG("paramserver shard %" PRId64 " checkpoint %s", pv->shard, pv->ckpt_path);
}

static uint64_t held_version(fl_paramserver_service_t *svc) {
    fl_param_store_info_t in;
    fl_paramserver_service_info(svc, &in);
    return in.version;
}

static int check_shard(const fl_service_args_t *a) {
    if (a->shard >= 0 && a->shard < a->cfg.paramserver_shards) return 0;
    fprintf(stderr,
            "fleet paramserver: --shard %" PRId64 " is out of range [0, %" PRId64 ") (paramserver.shards = %" PRId64
            ")\n",
            a->shard, a->cfg.paramserver_shards, a->cfg.paramserver_shards);
    return 2;
}

static void default_listen(const fl_service_args_t *a, char *buf, size_t len) {
    /* An IPv6 literal needs brackets before the port. */
    const char *h = a->cfg.run_bind_host;
    snprintf(buf, len, strchr(h, ':') && h[0] != '[' ? "[%s]:0" : "%s:0", h);
}

static int create(void *ctx, const fl_service_args_t *a) {
    ps_verb_t *pv = ctx;
    fl_err_t err;
    fl_err_init(&err);
    pv->shard = a->shard;
    fl_paramserver_service_opts_t po;
    fl_status st = fl_options_paramserver(&a->cfg, &po, &err);
    if (st == FL_OK) st = fl_paramserver_service_create(&po, (int)a->shard, &pv->svc, &err);
    if (st != FL_OK) {
        FL_ERROR("%s", err.msg);
        return st == FL_INVALID_ARGUMENT ? 2 : 1;
    }
    int gorila = po.mode == FL_PARAMSERVER_GORILA;
    if (pv->restore[0]) {
        uint64_t version = 0;
        if (!gorila)
            st = fl_err_set(&err, FL_INVALID_ARGUMENT,
                            "--restore %s: only a gorila shard (learner.mode = gorila) is "
                            "restored; an apex shard gets its parameters from the learner again",
                            pv->restore);
        else
            st = fl_paramserver_service_restore(pv->svc, pv->restore, &version, &err);
        if (st != FL_OK) {
            FL_ERROR("%s", err.msg);
            fl_paramserver_service_destroy(pv->svc);
            pv->svc = NULL;
            return st == FL_NO_MEMORY || st == FL_INTERNAL ? 1 : 2;
        }
        FL_INFO("paramserver shard %" PRId64 " restored from %s at version %" PRIu64, pv->shard, pv->restore, version);
    }
    if (gorila && po.checkpoint_dir && po.checkpoint_dir[0]) {
        if (mkdir(po.checkpoint_dir, 0755) != 0 && errno != EEXIST)
            FL_WARN("paramserver: cannot create %s: %s", po.checkpoint_dir, strerror(errno));
        fl_param_checkpoint_path(po.checkpoint_dir, (int)a->shard, pv->ckpt_path, sizeof pv->ckpt_path);
        pv->ckpt_every = po.checkpoint_every_s;
        pv->last_ckpt = fl_clock_sec();
    }
    return 0;
}

/* Serves, and reports to --control. */
static int start(void *ctx, const fl_service_args_t *a, char *addr, size_t len) {
    ps_verb_t *pv = ctx;
    const fl_config_t *cfg = &a->cfg;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_paramserver_service_start(pv->svc, a->listen, addr, len, &err) != FL_OK ||
        fl_reporter_create(a->control, "paramserver", (uint32_t)a->shard, cfg->run_progress_every, &pv->rep, &err) !=
            FL_OK) {
        FL_ERROR("%s", err.msg);
        return -1;
    }
    if (cfg->learner_mode == FL_CFG_MODE_GORILA)
        FL_INFO("paramserver shard %" PRId64 " of %" PRId64 " serving on %s (gorila: %s lr %g, %" PRId64
                " learner(s), max_staleness %" PRId64 " %s%s)",
                a->shard, cfg->paramserver_shards, addr, FL_CONFIG_ENUM_STR(cfg, learner, optimizer), cfg->learner_lr,
                cfg->learner_count, cfg->paramserver_max_staleness, FL_CONFIG_ENUM_STR(cfg, paramserver, stale_policy),
                cfg->paramserver_staleness_lr ? ", staleness-scaled lr" : "");
    else
        FL_INFO("paramserver shard %" PRId64 " of %" PRId64 " serving on %s", a->shard, cfg->paramserver_shards, addr);
    return 0;
}

/* Reports the held version; 1 once Control asked this shard to stop. */
static int tick(void *ctx) {
    ps_verb_t *pv = ctx;
    if (fl_reporter_should_stop(pv->rep)) return 1;
    if (pv->ckpt_every > 0 && fl_clock_sec() - pv->last_ckpt >= pv->ckpt_every) checkpoint(pv);
    fl_report_t r = {0};
    r.param_version = held_version(pv->svc);
    fl_reporter_tick(pv->rep, &r, 0);
    return 0;
}

/* Stops serving; after a requested stop, sends the final report. */
static void stop(void *ctx, int clean) {
    ps_verb_t *pv = ctx;
    if (clean) FL_INFO("paramserver shard %" PRId64 " stopping", pv->shard);
    fl_paramserver_service_stop(pv->svc);
    if (clean) checkpoint(pv);
    if (clean && pv->rep) {
        fl_report_t r = {0};
        r.param_version = held_version(pv->svc);
        fl_reporter_tick(pv->rep, &r, 1);
    }
}

static void destroy(void *ctx) {
    ps_verb_t *pv = ctx;
    fl_reporter_destroy(pv->rep);
    fl_paramserver_service_destroy(pv->svc);
}

int fl_verb_paramserver(int argc, char **argv) {
    ps_verb_t pv;
    memset(&pv, 0, sizeof pv);
    const fl_opt_t opts[] = {{"--restore", FL_OPT_STRING, pv.restore}};
    const fl_service_def_t def = {
        .verb = "paramserver",
        .ready_what = "address",
        .opts = opts,
        .nopts = (int)(sizeof opts / sizeof opts[0]),
        .ctx = &pv,
        .check_shard = check_shard,
        .default_listen = default_listen,
        .create = create,
        .start = start,
        .tick = tick,
        .stop = stop,
        .destroy = destroy,
    };
    return fl_service_main(&def, argc, argv);
}
