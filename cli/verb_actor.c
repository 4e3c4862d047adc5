/* `fleet actor`: one Ape-X actor process (actors/actor.h). Options are parsed here; the
 * loop, its stop conditions and the final flush live in actors/actor.c. Exit codes: 0 on
 * a clean stop (SIGINT/SIGTERM, the launcher's request, or actor.max_steps), 1 on a
 * runtime failure (printed), 2 on a usage or configuration error. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "actors/actor.h"
#include "common/log.h"
#include "common/stop.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "cli/proc.h"
#include "cli/verbs.h"

int fl_verb_actor(int argc, char **argv) {
    fl_config_t cfg;
    int64_t index = -1;
    char replay[256] = "", params[256] = "", control[256] = "";
    int resume = 0;
    int64_t incarnation = 0;
    const fl_opt_t opts[] = {
        {"--index", FL_OPT_INT, &index},
        {"--incarnation", FL_OPT_INT, &incarnation},
        {"--resume", FL_OPT_FLAG, &resume},
        {"--replay", FL_OPT_STRING, replay},
        {"--paramserver", FL_OPT_STRING, params},
        {"--control", FL_OPT_STRING, control},
    };
    int rc = fl_cli_parse("actor", argc, argv, &cfg, opts, (int)(sizeof opts / sizeof opts[0]), NULL, 0);
    if (rc != 0) return rc;
    if (index < 0) {
        fprintf(stderr, "fleet actor: --index is required (expected an integer in [0, %lld))\n",
                (long long)cfg.actor_count);
        return 2;
    }
    if (index >= cfg.actor_count) {
        fprintf(stderr, "fleet actor: --index %lld is out of range (expected 0 <= I < actor.count = %lld)\n",
                (long long)index, (long long)cfg.actor_count);
        return 2;
    }
    if (!replay[0]) {
        fprintf(stderr, "fleet actor: --replay ADDR[,ADDR...] is required (one address per replay shard, shard 0 "
                        "first, or @FILE)\n");
        return 2;
    }
    if (!params[0]) {
        fprintf(stderr, "fleet actor: --paramserver ADDR is required\n");
        return 2;
    }

    fl_stop_install();
    fl_cli_setup_logging(&cfg, "actor", (int)index);
    /* actor.nice: where the roles share cores, the learner sets the fleet's pace (the
     * actors wait on its sampling through the replay's rate limit), so it runs first */
    fl_cli_nice(cfg.actor_nice, "actor.nice");
    fl_cli_sched_idle((int)cfg.actor_sched_idle, "actor.sched_idle");
    fl_actor_opts_t ao;
    fl_options_actor(&cfg, &ao);
    ao.resume = resume;
    ao.incarnation = (int)incarnation;
    fl_actor_t *actor = NULL;
    fl_err_t err;
    fl_err_init(&err);
    fl_status s = fl_actor_create(&ao, (int)index, replay, params, control[0] ? control : NULL, &actor, &err);
    if (s != FL_OK) {
        fprintf(stderr, "fleet actor: %s\n", err.msg[0] ? err.msg : fl_status_str(s));
        return fl_exit_status_of_create(s); /* an env that rejects its options is not restarted */
    }
    s = fl_actor_run(actor, &err);
    fl_actor_destroy(actor);
    if (s != FL_OK) {
        fprintf(stderr, "fleet actor: %s\n", err.msg[0] ? err.msg : fl_status_str(s));
        return 1;
    }
    return 0;
}
