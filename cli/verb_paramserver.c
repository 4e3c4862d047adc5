/* verb_paramserver: `fleet paramserver`, one parameter-server shard as a process.
 *
 * Holds slice --shard of paramserver.shards (paramserver/shard.h) of the flat vector, in
 * learner.mode apex (learners publish) or gorila (learners push gradients and this shard
 * applies learner.optimizer; see paramserver/server.h). Serves fleet.ParamServer until
 * SIGINT/SIGTERM or until the launcher's Control service asks it to stop, reporting the
 * held version to the launcher when --control is given. --ready-fd lets a launcher learn
 * the bound address (useful with port 0). The verb is the parameter server's callbacks
 * for cli/service_main.h, which owns the skeleton. Exit codes: 0 after a requested stop,
 * 1 when serving fails, 2 for usage and configuration errors. One thread. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "common/control.h"
#include "common/log.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "cli/service_main.h"
#include "cli/verbs.h"
#include "paramserver/server.h"

typedef struct ps_verb {
    fl_paramserver_service_t *svc;
    fl_reporter_t *rep; /* to the launcher's Control */
    int64_t shard;
} ps_verb_t;

static uint64_t held_version(fl_paramserver_service_t *svc) {
    fl_param_store_info_t in;
    fl_paramserver_service_info(svc, &in);
    return in.version;
}

static int check_shard(const fl_service_args_t *a) {
    if (a->shard >= 0 && a->shard < a->cfg.paramserver_shards) return 0;
    fprintf(stderr, "fleet paramserver: --shard %" PRId64 " is out of range [0, %" PRId64
                    ") (paramserver.shards = %" PRId64 ")\n",
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
    if (st == FL_OK) return 0;
    FL_ERROR("%s", err.msg);
    return st == FL_INVALID_ARGUMENT ? 2 : 1;
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
    const fl_service_def_t def = {
        .verb = "paramserver",
        .ready_what = "address",
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
