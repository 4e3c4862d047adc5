/* verb_run: `fleet run`, the verb: reads the experiment (a config file, or --resume
 * runs/NAME and its config.ini), checks what a run would refuse, and hands it to the
 * launcher (launcher/launch.h): on one machine fl_launch_run_local, under mpirun
 * fl_mpi_run; --dry-run prints the plan and the effective config, --print-mpirun the
 * mpirun command. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/stop.h"
#include "envs/factory.h"
#include "cli/cli.h"
#include "cli/verbs.h"
#include "launcher/launch.h"
#include "launcher/options.h"
#include "launcher/proc.h"
#include "launcher/security.h"

/* `--resume DIR` (or --resume=DIR) taken out of argv into dir, and DIR/config.ini put
 * first as the config (--set overrides still apply after it): 0, 1 when there is none,
 * or 2 after printing why. args holds argc + 2 slots. */
static int take_resume(int *argc, char **argv, char **args, char *dir, size_t dir_len, char *cfg, size_t cfg_len) {
    int n = 0, found = 0;
    args[n++] = argv[0];
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--resume") == 0 && i + 1 < *argc) {
            snprintf(dir, dir_len, "%s", argv[++i]);
            found = 1;
        } else if (strncmp(a, "--resume=", 9) == 0) {
            snprintf(dir, dir_len, "%s", a + 9);
            found = 1;
        } else if (strcmp(a, "--resume") == 0) {
            fprintf(stderr, "fleet run: --resume needs the run's folder (e.g. --resume runs/cartpole)\n");
            return 2;
        } else {
            args[n++] = argv[i];
        }
    }
    if (!found) return 1;
    if (*argc > 1 && argv[1][0] != '-') {
        fprintf(stderr,
                "fleet run: give a config file or --resume %s, not both (a resumed run reads its own "
                "config.ini; change keys with --set)\n",
                dir);
        return 2;
    }
    snprintf(cfg, cfg_len, "%s/config.ini", dir);
    if (access(cfg, R_OK) != 0) {
        fprintf(stderr, "fleet run: --resume %s: cannot read %s (%s): not a run folder of fleet run\n", dir, cfg,
                strerror(errno));
        return 2;
    }
    memmove(args + 3, args + 1, (size_t)(n - 1) * sizeof *args);
    args[1] = "--config";
    args[2] = cfg;
    *argc = n + 2;
    return 0;
}

int fl_verb_run(int argc, char **argv) {
    fl_config_t cfg;
    fl_config_defaults(&cfg);
    char cfg_file[256], hostfile[256] = "", role[256] = "", resume_dir[700] = "", resume_cfg[800];
    int dry_run = 0, print_mpirun = 0;
    fl_opt_t opts[] = {{"--dry-run", FL_OPT_FLAG, &dry_run},
                       {"--print-mpirun", FL_OPT_FLAG, &print_mpirun},
                       {"--hostfile", FL_OPT_STRING, hostfile},
                       {"--role", FL_OPT_STRING, role}};
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) return 1;
    int rc = take_resume(&argc, argv, args, resume_dir, sizeof resume_dir, resume_cfg, sizeof resume_cfg);
    if (rc == 2) {
        free(args);
        return 2;
    }
    rc = fl_cli_parse("run", argc, rc == 0 ? args : argv, &cfg, opts, (int)(sizeof opts / sizeof opts[0]), cfg_file,
                      sizeof cfg_file);
    free(args);
    if (rc) return rc;
    if (resume_dir[0] && cfg.run_deterministic) {
        fprintf(stderr,
                "fleet run: --resume %s: a deterministic run (run.deterministic = true) cannot be resumed: its rounds "
                "live in its processes (the replay shard's commits, the actors' parameter versions). Run it again "
                "with the same seed and a larger budget instead: it repeats itself bit for bit\n",
                resume_dir);
        return 2;
    }
    fl_cli_setup_logging(&cfg, "run", -1);
    if (print_mpirun) {
        fl_mpi_print_command(&cfg, cfg_file, hostfile, stdout);
        return 0;
    }
    if (fl_mpi_launched() && !dry_run) {
#ifdef FLEET_HAVE_MPI
        return fl_mpi_run(&cfg, cfg_file, role, resume_dir, fl_learner_main);
#else
        fprintf(stderr,
                "fleet run: started by mpirun, but this fleet was built without MPI (install "
                "libopenmpi-dev and rebuild)\n");
        return 2;
#endif
    }
    if (role[0]) {
        fprintf(stderr,
                "fleet run: --role names a rank's role in an MPMD mpirun job (see docs/multi-host.md); "
                "this process was not started by mpirun\n");
        return 2;
    }
    if (cfg.learner_mode == FL_CFG_MODE_APEX && cfg.learner_count > 1) {
        fprintf(stderr,
                "fleet run: learner.count = %lld in apex mode averages gradients over MPI: start the fleet under "
                "mpirun; `fleet run%s%s --print-mpirun` prints the command\n",
                (long long)cfg.learner_count, cfg_file[0] ? " " : "", cfg_file);
        return 2;
    }
    /* before the dry run too: it says what the real run would refuse */
    if (strncmp(cfg.run_bind_host, "unix:", 5) == 0 || strchr(cfg.run_bind_host, '/')) {
        fprintf(stderr,
                "fleet run: run.bind_host = %s: expected a host name or an IP address (each service takes a port the "
                "system chooses); for unix sockets in the run folder set run.local_sockets = true\n",
                cfg.run_bind_host);
        return 2;
    }
    if ((rc = fl_security_bind_allowed(&cfg, "run", cfg.run_bind_host)) != 0) return rc;
    if (dry_run) {
        fl_wrapped_env_t *wenv = NULL;
        fl_err_t err;
        fl_err_init(&err);
        if (fl_options_open_env(&cfg, &wenv, &err) != FL_OK) {
            fprintf(stderr, "fleet run: %s\n", err.msg);
            return 2;
        }
        if (fl_launch_check_roles(&cfg, fl_wrapped_env_info(wenv)) != 0) {
            fl_wrapped_env_destroy(wenv);
            return 2;
        }
        fl_launch_print_plan(&cfg, cfg_file, wenv);
        fl_wrapped_env_destroy(wenv);
        fl_config_dump(&cfg, stdout);
        return 0;
    }
    if (fl_proc_init() != 0) {
        fprintf(stderr, "fleet run: cannot find its own executable: %s\n", strerror(errno));
        return 1;
    }
    fl_stop_install();
    fl_launch_t *L = NULL;
    /* run.local_sockets (with the default run.bind_host): the services and Control on unix
     * sockets in the run folder (mode 0700), which no other local user can reach. */
    const char *control_host =
        cfg.run_local_sockets && strcmp(cfg.run_bind_host, "127.0.0.1") == 0 ? FL_LAUNCH_UNIX : cfg.run_bind_host;
    rc = resume_dir[0] ? fl_launch_resume(&cfg, resume_dir, control_host, &L)
                       : fl_launch_create(&cfg, cfg_file, control_host, &L);
    if (rc) return rc;
    rc = fl_launch_run_local(L);
    fl_launch_destroy(L);
    return rc;
}
