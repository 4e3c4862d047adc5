/* `fleet learner`: one learner process (learner/learner.h). --resume FILE (or the key
 * learner.resume) continues from a checkpoint of fl_learner_save. Options are parsed,
 * the configuration becomes the learner's options (launcher/options.h) and env.name
 * is resolved here (the learner library depends on neither);
 * learner.checkpoint_dir is created when missing (e.g. runs/NAME/checkpoints, inside the
 * run folder that the launcher has just made);
 * the loop, its stop conditions and the final publish live in fl_learner_run. Exit
 * codes: 0 on a clean stop (SIGINT/SIGTERM, the launcher's request, or
 * learner.max_steps), 1 on a runtime failure (printed), 2 on a usage or configuration
 * error. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/stop.h"
#include "envs/factory.h"
#include "cli/cli.h"
#include "launcher/options.h"
#include "launcher/proc.h"
#include "cli/verbs.h"
#include "learner/learner.h"

int fl_verb_learner(int argc, char **argv) {
    return fl_learner_main(argc, argv, NULL);
}

int fl_learner_main(int argc, char **argv, fl_reduce_t *reduce) {
    fl_config_t cfg;
    int64_t index = 0;
    char replay[256] = "", params[256] = "", control[256] = "", resume[256] = "";
    const fl_opt_t opts[] = {
        {"--index", FL_OPT_INT, &index},       {"--resume", FL_OPT_STRING, resume},
        {"--replay", FL_OPT_STRING, replay},   {"--paramserver", FL_OPT_STRING, params},
        {"--control", FL_OPT_STRING, control},
    };
    int rc = fl_cli_parse("learner", argc, argv, &cfg, opts, (int)(sizeof opts / sizeof opts[0]), NULL, 0);
    if (rc != 0) return rc;
    if (index < 0 || index >= cfg.learner_count) {
        fprintf(stderr, "fleet learner: --index %lld is out of range (expected 0 <= I < learner.count = %lld)\n",
                (long long)index, (long long)cfg.learner_count);
        return 2;
    }
    if (!replay[0]) {
        fprintf(stderr,
                "fleet learner: --replay ADDR[,ADDR...] is required (one address per replay shard, shard 0 "
                "first, or @FILE)\n");
        return 2;
    }
    if (!params[0]) {
        fprintf(stderr,
                "fleet learner: --paramserver ADDR[,ADDR...] is required (one address per parameter-server "
                "shard, shard 0 first)\n");
        return 2;
    }

    fl_err_t err;
    fl_err_init(&err);
    const fl_env_def_t *env = NULL;
    fl_wrapped_env_t *wenv = NULL;
    if (fl_options_open_env(&cfg, &wenv, &err) != FL_OK) {
        fprintf(stderr, "fleet learner: %s\n", err.msg);
        return 2;
    }
    env = fl_wrapped_env_info(wenv);
    if (env->obs.rank < 1 || env->obs.rank > 4) {
        fprintf(stderr, "fleet learner: env %s has observations of rank %d (expected 1..4)\n", env->name,
                env->obs.rank);
        fl_wrapped_env_destroy(wenv);
        return 2;
    }
    fl_learner_opts_t lo = {
        .index = (int)index,
        .replay_addr = replay,
        .paramserver_addr = params,
        .control_addr = control[0] ? control : NULL,
        .obs = env->obs,
        .num_actions = env->num_actions,
        .resume_path = resume[0] ? resume : cfg.learner_resume,
        .reduce = reduce,
    };
    fl_wrapped_env_destroy(wenv);

    fl_stop_install();
    fl_cli_setup_logging(&cfg, "learner", (int)index);
    if (cfg.learner_checkpoint_dir[0] && fl_proc_mkdir_p(cfg.learner_checkpoint_dir) != 0) {
        fprintf(stderr, "fleet learner: learner.checkpoint_dir = %s: cannot create the folder: %s\n",
                cfg.learner_checkpoint_dir, strerror(errno));
        return 1;
    }
    if (lo.resume_path && lo.resume_path[0] && access(lo.resume_path, R_OK) != 0) {
        fprintf(stderr,
                "fleet learner: %s %s: cannot read it: %s (expected a learner checkpoint, a run's "
                "checkpoints/learner-N.safetensors)\n",
                resume[0] ? "--resume" : "learner.resume =", lo.resume_path, strerror(errno));
        return 2;
    }
    fl_learner_t *l = NULL;
    fl_status s = fl_options_learner(&cfg, &lo, &err);
    if (s == FL_OK) s = fl_learner_create(&lo, &l, &err);
    if (s != FL_OK) {
        fprintf(stderr, "fleet learner: %s\n", err.msg[0] ? err.msg : fl_status_str(s));
        return fl_exit_status_of_create(s); /* FL_EXIT_CONFIG is not restarted */
    }
    s = fl_learner_run(l, &err);
    fl_learner_destroy(l);
    if (s != FL_OK) {
        fprintf(stderr, "fleet learner: %s\n", err.msg[0] ? err.msg : fl_status_str(s));
        return 1;
    }
    return 0;
}
