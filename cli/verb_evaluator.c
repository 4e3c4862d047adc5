/* `fleet evaluator`: one evaluator process (eval/evaluator.h). Options are parsed here;
 * the loop lives in eval/evaluator.c. Exit codes: 0 on a clean stop (SIGINT/SIGTERM or
 * the launcher's request), 1 on a runtime failure (printed), 2 on a usage or
 * configuration error. */
#include <stdint.h>
#include <stdio.h>

#include "common/log.h"
#include "common/stop.h"
#include "eval/evaluator.h"
#include "cli/cli.h"
#include "launcher/options.h"
#include "launcher/proc.h"
#include "cli/verbs.h"

int fl_verb_evaluator(int argc, char **argv) {
    fl_config_t cfg;
    int64_t index = 0;
    char params[256] = "", control[256] = "", replay[256] = "";
    int resume = 0;
    const fl_opt_t opts[] = {
        {"--index", FL_OPT_INT, &index},          {"--resume", FL_OPT_FLAG, &resume},
        {"--paramserver", FL_OPT_STRING, params}, {"--control", FL_OPT_STRING, control},
        {"--replay", FL_OPT_STRING, replay},
    };
    int rc = fl_cli_parse("evaluator", argc, argv, &cfg, opts, (int)(sizeof opts / sizeof opts[0]), NULL, 0);
    if (rc != 0) return rc;
    int count = cfg.run_evaluators > 0 ? (int)cfg.run_evaluators : 1;
    if (index < 0 || index >= count) {
        fprintf(stderr, "fleet evaluator: --index %lld is out of range (expected 0 <= I < run.evaluators = %d)\n",
                (long long)index, count);
        return 2;
    }
    if (!params[0]) {
        fprintf(stderr, "fleet evaluator: --paramserver ADDR[,ADDR...] is required\n");
        return 2;
    }
    fl_stop_install();
    fl_cli_setup_logging(&cfg, "evaluator", (int)index);
    /* eval.nice: an evaluator shares the cores with the actors, not ahead of them (a long
     * evaluation of an agent that has not learned yet must not slow the fleet down) */
    fl_cli_nice(cfg.eval_nice, "eval.nice");
    fl_evaluator_opts_t eo;
    fl_options_evaluator(&cfg, &eo);
    eo.resume = resume;
    eo.count = count;
    eo.replay_addr = replay;
    fl_evaluator_t *ev = NULL;
    fl_err_t err;
    fl_err_init(&err);
    fl_status s = fl_evaluator_create(&eo, (int)index, params, control[0] ? control : NULL, &ev, &err);
    if (s != FL_OK) {
        fprintf(stderr, "fleet evaluator: %s\n", err.msg[0] ? err.msg : fl_status_str(s));
        return fl_exit_status_of_create(s); /* an env that rejects its options is not restarted */
    }
    s = fl_evaluator_run(ev, &err);
    fl_evaluator_destroy(ev);
    if (s != FL_OK) {
        fprintf(stderr, "fleet evaluator: %s\n", err.msg[0] ? err.msg : fl_status_str(s));
        return 1;
    }
    return 0;
}
