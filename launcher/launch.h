/* launch: the launcher role's interface (docs/design.md, "The launcher"), shared by the
 * fleet on one machine (launcher/local.c) and under mpirun (launcher/mpi.c): opening the
 * run folder and the fleet.Control service the roles report to (open.c), the progress
 * loop with its metrics files, the ordered stop and the summary (monitor.c).
 *
 * How roles are started, watched and stopped differs (child processes here, MPI ranks
 * there), so the launcher hands the monitor a table of functions (fl_launch_ops_t).
 *
 * Files under run.out_dir/run.name/: config.ini (the effective config every role reads),
 * metrics.csv (one row per progress period: the fleet's figures), roles.csv (one row per
 * role per period: env steps/s, parameter version and lag of each actor; steps/s,
 * samples/s and loss of each learner), summary.txt (key=value lines at the end).
 * On one machine the roles' logs go to logs/<role>-<index>.log (their warnings and errors
 * are echoed to the terminal).
 * One owner thread; the Control service runs on its own threads. */
#ifndef FL_LAUNCHER_LAUNCH_H
#define FL_LAUNCHER_LAUNCH_H

#include <stddef.h>
#include <stdio.h>

#include "launcher/fleet_state.h"
#include "common/config.h"
#include "envs/factory.h"
#include "envs/core/wrappers.h"

typedef struct fl_launch fl_launch_t;

/* The kinds of role, for the restart counts of summary.txt. */
#define FL_LAUNCH_ROLES 5

typedef struct fl_launch_ops {
    /* A role that ended while the fleet runs: writes why ("actor 3 (pid 12) exited with
     * status 1") and returns 1; returns 2, with the reason, when roles ended cleanly on
     * their own budgets (actor.max_steps, learner.max_steps: a normal end); 0 otherwise. */
    int (*dead)(void *ctx, char *reason, size_t len);
    /* Stops the roles named in `roles` ("actor", "learner", "replay paramserver") and
     * waits up to grace_s for them to end. They were asked through Control already. */
    void (*stop)(void *ctx, const char *roles, double grace_s);
    /* After the stop: the first role that did not end cleanly (1, with why), or 0. */
    int (*unclean)(void *ctx, char *reason, size_t len);
    /* The value of summary.txt's "pids=" line (e.g. "12,13,14"). */
    void (*pids)(void *ctx, FILE *f);
    /* Shows what the roles' logs gained that the terminal must see (NULL: nothing to do,
     * the roles write to the terminal themselves). Called a few times a second. */
    void (*echo_logs)(void *ctx);
} fl_launch_ops_t;

/* Validates the run, prints the plan (to stdout), creates the run folder (with
 * run.checkpoints: sets run.checkpoint_dir to its checkpoints/ folder), writes config.ini
 * and starts Control on control_host:0. 0, or the exit code (2 for a
 * configuration error, 1 otherwise) after printing why. */
int fl_launch_create(const fl_config_t *cfg, const char *cfg_file, const char *control_host, fl_launch_t **out);
/* Continues the run in run_dir (fleet run --resume): cfg is its config.ini with the
 * command line's overrides. Checks that the run is not going and has its checkpoints
 * (run.checkpoint_dir: the learner's and launcher.state), restores the launcher's figures
 * (counters, return windows, the latest evaluation, the elapsed time) and appends to the
 * run's files. 0, or the exit code after printing why. */
int fl_launch_resume(const fl_config_t *cfg, const char *run_dir, const char *control_host, fl_launch_t **out);
/* 1 for a resumed run. */
int fl_launch_resuming(const fl_launch_t *L);
void fl_launch_destroy(fl_launch_t *L); /* NULL is a no-op */
const fl_config_t *fl_launch_config(const fl_launch_t *L);
const char *fl_launch_config_path(const fl_launch_t *L);
const char *fl_launch_control_addr(const fl_launch_t *L);
/* The roles' record behind Control (its run secret: launcher/fleet_state.h). */
const fl_fleet_state_t *fl_launch_fleet_state(const fl_launch_t *L);
const char *fl_launch_dir(const fl_launch_t *L);
/* control_host for fl_launch_create / fl_launch_resume: Control (and, by the caller, the
 * services) on unix sockets in the run's socket folder (fl_launch_socket_dir). */
#define FL_LAUNCH_UNIX "unix"
/* The folder of the run's unix sockets (mode 0700), or "" when the fleet uses TCP. */
const char *fl_launch_socket_dir(const fl_launch_t *L);
/* What every role would refuse about cfg and its env before any process starts: the
 * Q-network of model.spec for the env's observations and actions (the actors' and the
 * learners' network). 0, or 2 after printing the error naming model.spec. (The env
 * itself, its plugin and wrappers, are checked by opening it.) */
int fl_launch_check_roles(const fl_config_t *cfg, const fl_env_def_t *env);

/* The seed-S/ runs (each with its config.ini) of a `fleet suite` folder dir: how many, and
 * their names in seed order ("seed-1, seed-2", the first 8, then "... (N in all)") into
 * names; 0 when dir is no suite's folder. */
int fl_launch_suite_runs(const char *dir, char *names, size_t len);

/* Supervision (launcher/local.c, launcher/mpi.c): appends "TIME +ELAPSED text" to the run's
 * events.log and logs it as a warning. restarted_role ("actor", "replay", ...; NULL for
 * an event that is not a restart) counts a restart for the progress line and
 * summary.txt (restarts=, restarts_<role>=). Owner thread only. */
void fl_launch_event(fl_launch_t *L, const char *restarted_role, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
uint64_t fl_launch_restarts(const fl_launch_t *L);

/* `fleet run`'s exit status when the run ended as it should (a budget, the target, a
 * stop) but a role process died of a fault signal on the way (fl_launch_note_death);
 * 1 is a run that failed, 2 a usage or configuration error. */
#define FL_LAUNCH_EXIT_CRASHED 3
/* 1 for the signals of a program fault: SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS,
 * SIGTRAP (not SIGKILL nor SIGTERM: an operator's, the OOM killer's or the launcher's). */
int fl_launch_fault_signal(int sig);
/* Supervision: a role process died with waitpid status `status`; a fault signal counts
 * as a crash (summary.txt crashes=, crashes_<role>=, last_crash=; the progress line; the
 * exit status FL_LAUNCH_EXIT_CRASHED). Owner thread only. */
void fl_launch_note_death(fl_launch_t *L, const char *role, int index, int status);
/* Supervision: a role found hung and killed (summary.txt hangs=). */
void fl_launch_note_hang(fl_launch_t *L);
/* fl_clock_sec() of the latest report Control accepted from role `index` (an actor, a
 * learner or an evaluator: they report every run.progress_every or more often), 0 when
 * none yet, < 0 for a role that does not report (the services). */
double fl_launch_last_report(fl_launch_t *L, const char *role, int index);

/* Prints the role plan of cfg (what fl_launch_create prints), e.g. for --dry-run. */
void fl_launch_print_plan(const fl_config_t *cfg, const char *cfg_file, const fl_wrapped_env_t *env);

/* Watches the fleet until a stop (signal, run.max_seconds, target return, a dead role,
 * or exit_code != 0 on entry with `reason` already set), then stops actors, learners and
 * services in that order and writes summary.txt. replay_list and ps_list: the services'
 * addresses, comma-separated in shard order (for Info). Returns the exit code. */
int fl_launch_monitor(fl_launch_t *L, const char *replay_list, const char *ps_list, const fl_launch_ops_t *ops,
                      void *ctx, int exit_code, const char *reason);

#ifdef FLEET_HAVE_MPI
/* `fleet run` under mpirun (launcher/mpi.c): every rank calls this with its parsed config;
 * role: --role of this rank's app context ("" = by the plan); resume_dir: `fleet run
 * --resume DIR` ("" = a new run): the launcher resumes the run and every role starts
 * from its checkpoints, on the same hosts or others (DIR and run.checkpoint_dir must be
 * readable where the roles run). Returns the exit code. */
struct fl_reduce;
/* The learner's main (cli's `fleet learner`), which the learner's rank runs in its own
 * process with the all-reduce over MPI: the verb hands it in, as the launcher is below
 * the verbs. */
typedef int (*fl_learner_main_fn)(int argc, char **argv, struct fl_reduce *reduce);
int fl_mpi_run(const fl_config_t *cfg, const char *cfg_file, const char *role, const char *resume_dir,
               fl_learner_main_fn learner_main);
#endif
/* `fleet run` on one machine: starts every role of the opened run L as its own process
 * and watches them (launcher/local.c, then fl_launch_monitor). Returns the exit code. */
int fl_launch_run_local(fl_launch_t *L);
/* Writes list into arg when it fits (len bytes), else into the file path and arg = "@path".
 * 0 or -1. */
int fl_launch_address_arg(const char *list, const char *path, char *arg, size_t len);
/* 1 when this process was started by mpirun (Open MPI's or PMIx's environment). */
int fl_mpi_launched(void);
/* The mpirun command line for cfg (hostfile may be NULL or ""). */
void fl_mpi_print_command(const fl_config_t *cfg, const char *cfg_file, const char *hostfile, FILE *f);

#endif
