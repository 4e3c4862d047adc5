/* verb_paramserver: `fleet paramserver`, one parameter-server shard as a process.
 *
 * Holds slice --shard of paramserver.shards (paramserver/shard.h) of the flat vector, in
 * learner.mode apex (learners publish) or gorila (learners push gradients and this shard
 * applies learner.optimizer; see paramserver/server.h). Serves fleet.ParamServer until
 * SIGINT/SIGTERM or until the launcher's Control service asks it to stop, reporting the
 * held version to the launcher when --control is given. --ready-fd lets a launcher learn
 * the bound address (useful with port 0). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/control.h"
#include "common/log.h"
#include "common/stop.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "cli/verbs.h"
#include "paramserver/server.h"

/* Writes all of buf to fd; 0 on success. */
static int write_all(int fd, const char *buf, size_t len) {
    while (len) {
        ssize_t k = write(fd, buf, len);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += k;
        len -= (size_t)k;
    }
    return 0;
}

static uint64_t held_version(fl_paramserver_service_t *svc) {
    fl_param_store_info_t in;
    fl_paramserver_service_info(svc, &in);
    return in.version;
}

int fl_verb_paramserver(int argc, char **argv) {
    fl_config_t cfg;
    char listen[256] = "", control[256] = "";
    int64_t shard = 0, ready_fd = -1;
    const fl_opt_t opts[] = {
        {"--listen", FL_OPT_STRING, listen},
        {"--shard", FL_OPT_INT, &shard},
        {"--ready-fd", FL_OPT_INT, &ready_fd},
        {"--control", FL_OPT_STRING, control},
    };
    int rc = fl_cli_parse("paramserver", argc, argv, &cfg, opts, (int)(sizeof opts / sizeof opts[0]), NULL, 0);
    if (rc != 0) return rc;
    if (shard < 0 || shard >= cfg.paramserver_shards) {
        fprintf(stderr, "fleet paramserver: --shard %" PRId64 " is out of range [0, %" PRId64
                        ") (paramserver.shards = %" PRId64 ")\n",
                shard, cfg.paramserver_shards, cfg.paramserver_shards);
        return 2;
    }
    if (ready_fd < -1 || ready_fd > 1 << 20) {
        fprintf(stderr, "fleet paramserver: --ready-fd %" PRId64 " is not a file descriptor\n", ready_fd);
        return 2;
    }
    if (!listen[0]) {
        /* An IPv6 literal needs brackets before the port. */
        const char *h = cfg.run_bind_host;
        snprintf(listen, sizeof listen, strchr(h, ':') && h[0] != '[' ? "[%s]:0" : "%s:0", h);
    }
    fl_cli_setup_logging(&cfg, "paramserver", (int)shard);
    fl_stop_install();

    fl_err_t err;
    fl_err_init(&err);
    fl_paramserver_service_t *svc = NULL;
    fl_reporter_t *rep = NULL;
    char addr[512];
    fl_paramserver_service_opts_t po;
    fl_status st = fl_options_paramserver(&cfg, &po, &err);
    if (st == FL_OK) st = fl_paramserver_service_create(&po, (int)shard, &svc, &err);
    if (st != FL_OK) {
        FL_ERROR("%s", err.msg);
        return st == FL_INVALID_ARGUMENT ? 2 : 1;
    }
    rc = 1;
    if (fl_paramserver_service_start(svc, listen, addr, sizeof addr, &err) != FL_OK) {
        FL_ERROR("%s", err.msg);
        goto done;
    }
    if (fl_reporter_create(control, "paramserver", (uint32_t)shard, cfg.run_progress_every, &rep, &err) != FL_OK) {
        FL_ERROR("%s", err.msg);
        goto done;
    }
    if (strcmp(cfg.learner_mode, "gorila") == 0)
        FL_INFO("paramserver shard %" PRId64 " of %" PRId64 " serving on %s (gorila: %s lr %g, %" PRId64
                " learner(s), max_staleness %" PRId64 " %s%s)",
                shard, cfg.paramserver_shards, addr, cfg.learner_optimizer, cfg.learner_lr, cfg.learner_count,
                cfg.paramserver_max_staleness, cfg.paramserver_stale_policy,
                cfg.paramserver_staleness_lr ? ", staleness-scaled lr" : "");
    else
        FL_INFO("paramserver shard %" PRId64 " of %" PRId64 " serving on %s", shard, cfg.paramserver_shards, addr);
    if (ready_fd >= 0) {
        char line[520];
        int n = snprintf(line, sizeof line, "%s\n", addr);
        int failed = write_all((int)ready_fd, line, (size_t)n) != 0;
        if (failed) FL_ERROR("cannot write the address to --ready-fd %" PRId64 ": %s", ready_fd, strerror(errno));
        close((int)ready_fd);
        if (failed) goto done;
    }

    while (!fl_stop_requested() && !fl_reporter_should_stop(rep)) {
        fl_report_t r = {0};
        r.param_version = held_version(svc);
        fl_reporter_tick(rep, &r, 0);
        fl_sleep_sec(0.05);
    }
    FL_INFO("paramserver shard %" PRId64 " stopping", shard);
    rc = 0;
done:
    fl_paramserver_service_stop(svc);
    if (rc == 0 && rep) {
        fl_report_t r = {0};
        r.param_version = held_version(svc);
        fl_reporter_tick(rep, &r, 1);
    }
    fl_reporter_destroy(rep);
    fl_paramserver_service_destroy(svc);
    return rc;
}
