/* launch: the launch.h implementation shared by `fleet run` on one machine (cli/run.c)
 * and under mpirun (cli/mpi.c): the plan, the run folder with config.ini, the
 * fleet.Control service and what the roles report to it, the progress loop with its
 * metrics files (metrics.csv, roles.csv), the ordered stop and summary.txt.
 *
 * Ownership: an fl_launch_t owns its copy of the config, the Control server and the
 * report tables; fl_launch_destroy frees them. fl_launch_monitor owns the clients and
 * files it opens and closes them before it returns.
 * Failure: fl_launch_create prints why and returns the exit code; a metrics or summary
 * file that cannot be opened is skipped (the run goes on), and a service whose Info
 * fails keeps its last figures.
 * Threads: one owner thread; Control's handler (on_report) runs on the server's threads
 * and shares the report tables with the monitor under fleet_state_t.mu. */
#include "cli/launch.h"
#include "cli/options.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/credential.h"
#include "common/log.h"
#include "common/methods.h"
#include "common/procmem.h"
#include "common/rpc.h"
#include "common/stop.h"
#include "common/tfevents.h"
#include "envs/plugin.h"
#include "kernels/qnet.h"
#include "fleet.pb-c.h"
#include "cli/curve.h"
#include "cli/fleet_state.h"
#include "cli/proc.h"
#include "cli/progress.h"
#include "paramserver/client.h"
#include "replay/table.h"
#include "learner/learner.h"
#include "replay/client.h"
#include "replay/server.h"
#include "replay/sharded.h"

/* The parameter servers' staleness histogram (fl_param_info_t.staleness_hist). */
#define STALENESS_BUCKETS 8
static const char *const staleness_names[STALENESS_BUCKETS] = {"0", "1", "2", "3-4", "5-8", "9-16", "17-32", "33+"};

/* 1 when run.target_return applies to the evaluators' return. */
static int target_on_eval(const fl_config_t *c) {
    return c->run_target_on == FL_CFG_TARGET_EVAL && c->run_evaluators > 0;
}

/* The replay's memory when full, and a warning when it will not fit in this machine's
 * (MemAvailable of /proc/meminfo: what can be had without swapping). */
static void print_replay_memory(const fl_config_t *c, const fl_wrapped_env_t *w) {
    const fl_env_def_t *env = fl_wrapped_env_info(w);
    int stack = c->replay_frame_stack > 0 ? (int)c->replay_frame_stack : fl_wrapped_env_frame_stack(w);
    /* an actor's insert of actor.local_buffer transitions comes from env.num_envs streams */
    int64_t per_stream = c->actor_local_buffer / (c->env_num_envs > 0 ? c->env_num_envs : 1);
    double need = (double)fl_table_bytes_estimate((uint64_t)c->replay_capacity, fl_env_obs_size(env), stack,
                                                  per_stream > 1 ? (int)per_stream : 1, (int)c->learner_n_step);
    double avail = -1;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        long long kb;
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) avail = (double)kb * 1024.0;
    }
    if (f) fclose(f);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (need < 0.25 * gib && (avail < 0 || need < 0.5 * avail)) return; /* nothing worth a line */
    printf("  memory       replay holds about %.1f GiB when full (%lld transitions of %s%s)", need / gib,
           (long long)c->replay_capacity, stack > 1 ? "one distinct frame each" : "one observation each",
           c->replay_zstd_level > 0 ? ", before zstd" : "");
    if (avail > 0) printf("; %.1f GiB available here", avail / gib);
    printf("\n");
    if (avail > 0 && need > 0.8 * avail && c->replay_zstd_level == 0)
        printf("  WARNING      the replay will not fit in this machine's memory beside the other roles: lower "
               "replay.capacity (to about %.0f), or compress frames with replay.zstd_level = 1\n",
               (double)c->replay_capacity * 0.6 * avail / need);
}

static void print_plan(const fl_config_t *c, const char *cfg_file, const char *dir, const fl_wrapped_env_t *w) {
    const fl_env_def_t *env = fl_wrapped_env_info(w);
    printf("fleet run: experiment '%s'%s%s%s, seed %lld, output %s/\n", c->run_name, cfg_file[0] ? " (" : "",
           cfg_file, cfg_file[0] ? ")" : "", (long long)c->run_seed, dir);
    printf("  replay       %lld shard%s   capacity %lld, alpha %g, beta %g, sampling from %lld transitions\n",
           (long long)c->replay_shards, c->replay_shards > 1 ? "s" : " ", (long long)c->replay_capacity,
           c->replay_alpha, c->replay_beta, (long long)c->replay_min_size_to_sample);
    if (c->actor_count < c->replay_shards)
        printf(
            "  note         %lld replay shards but %lld actors: shards %lld .. %lld get no inserts (the learner "
            "samples the others)\n",
            (long long)c->replay_shards, (long long)c->actor_count, (long long)c->actor_count,
            (long long)c->replay_shards - 1);
    print_replay_memory(c, w);
    printf("  paramserver  %lld shard%s\n", (long long)c->paramserver_shards, c->paramserver_shards > 1 ? "s" : "");
    printf(
        "  learner      %lld (%s)   batch %lld, %s lr %g, %lld-step double DQN, gamma %g, target every %lld, "
        "publish every %lld\n",
        (long long)c->learner_count, FL_CONFIG_ENUM_STR(c, learner, device), (long long)c->learner_batch_size,
        FL_CONFIG_ENUM_STR(c, learner, optimizer), c->learner_lr, (long long)c->learner_n_step, c->learner_gamma,
        (long long)c->learner_target_update, (long long)c->learner_publish_every);
    printf("  actors       %lld         env %s x %lld each, epsilons", (long long)c->actor_count, c->env_name,
           (long long)c->env_num_envs);
    for (int i = 0; i < c->actor_count && i < 8; i++) {
        double e = c->actor_count > 1
                       ? pow(c->actor_eps_base, 1.0 + c->actor_eps_alpha * i / (double)(c->actor_count - 1))
                       : c->actor_eps_base;
        printf(" %.3g", e);
    }
    if (c->actor_count > 8) printf(" ...");
    printf(", buffer %lld, sync every %lld steps", (long long)c->actor_local_buffer, (long long)c->actor_sync_every);
    if (c->actor_nice > 0) printf(", nice +%lld", (long long)c->actor_nice);
    if (c->actor_sched_idle) printf(", SCHED_IDLE");
    printf("\n");
    char shape[64] = "";
    size_t n = 0;
    for (int i = 0; i < env->obs.rank && n < sizeof shape; i++)
        n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%d", i ? "x" : "", env->obs.shape[i]);
    char limit[32] = "none";
    if (env->max_episode_steps > 0) snprintf(limit, sizeof limit, "%d steps", env->max_episode_steps);
    printf("  env          %s: obs %s %s, %d actions, episode limit %s\n", env->name, fl_dtype_name(env->obs.dtype),
           shape, env->num_actions, limit);
    printf("  model        %s\n", c->model_spec);
    if (c->run_deterministic) {
        const int64_t k = fl_options_round_updates(c);
        printf("  rounds       deterministic rounds: %lld env steps per actor with parameter version r, then %lld "
               "learner updates (once the replay holds %lld) and version r + 1",
               (long long)c->actor_sync_every, (long long)k, (long long)c->replay_min_size_to_sample);
        if (c->run_evaluators > 0) printf("; evaluations every %lld rounds", (long long)fl_options_round_every(c));
        printf("\n");
    }
    if (c->run_evaluators > 0) {
        printf("  evaluators   %lld         %lld episodes with epsilon %g every %g %s, each cut at %lld steps",
               (long long)c->run_evaluators, (long long)c->eval_episodes, c->eval_epsilon, c->eval_every,
               c->eval_every_unit == FL_CFG_EVERY_SECONDS ? "s" : "learner steps", (long long)c->eval_max_episode_steps);
        if (c->eval_nice > 0) printf(", nice +%lld", (long long)c->eval_nice);
        printf("\n");
    }
    printf("  stop         ");
    if (c->run_stop_at_target && target_on_eval(c))
        printf("at evaluation return >= %g (mean of %lld episodes), or ", c->run_target_return,
               (long long)c->eval_episodes);
    else if (c->run_stop_at_target)
        printf("at mean training return >= %g over the last %d episodes, or ", c->run_target_return,
               FL_FLEET_RETURN_WINDOW);
    if (c->run_max_env_steps > 0) printf("after %lld env steps, or ", (long long)c->run_max_env_steps);
    if (c->run_max_learner_steps > 0) printf("after %lld learner steps, or ", (long long)c->run_max_learner_steps);
    if (c->run_max_seconds > 0)
        printf("after %g s\n", c->run_max_seconds);
    else
        printf("on Ctrl-C\n");
    fflush(stdout);
}

void fl_launch_print_plan(const fl_config_t *cfg, const char *cfg_file, const fl_wrapped_env_t *env) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", cfg->run_out_dir, cfg->run_name);
    print_plan(cfg, cfg_file, dir, env);
}

/* ------------------------------------------------------------ the launch ---- */

struct fl_launch {
    fl_config_t cfg;
    char cfg_file[256];
    char dir[600], cfg_path[700], csv_path[700], roles_path[700], summary_path[700], evals_path[700], rounds_path[700],
        returns_path[700];
    fl_fleet_state_t fs;
    int fs_ready;
    fl_rpc_server_t *control;
    char control_addr[300];
    double t_start;
    int lock_fd;            /* run.lock, held while the launcher lives */
    int resuming;           /* fl_launch_resume */
    fl_fleet_totals_t prev; /* a resumed run's figures at its last stop */
    char state_path[800];   /* run.checkpoint_dir/launcher.state, or "" */
    FILE *events;           /* events.log (opened at the first event) */
    uint64_t restarts;      /* roles restarted by the supervision */
    uint64_t role_restarts[FL_LAUNCH_ROLES];
    uint64_t crashes, hangs; /* role processes that died of a fault signal; that the launcher found hung */
    uint64_t role_crashes[FL_LAUNCH_ROLES];
    char last_crash[160];    /* "actor 0: signal 11 (Segmentation fault)" */
    char sock_dir[120];      /* the folder of the services' unix sockets (mode 0700), or "" (TCP) */
    int frame_skip;         /* emulator frames per env step (the wrappers' frameskip; 1 without) */
    /* When each replay shard [0] and parameter-server shard [1] last answered the monitor's
     * Info (fl_clock_sec; 0: never): a service's sign of life, as a report is a role's. */
    _Atomic double service_seen[2][256];
};

static const char *const role_names[FL_LAUNCH_ROLES] = {"replay", "paramserver", "learner", "actor", "evaluator"};

void fl_launch_event(fl_launch_t *L, const char *restarted_role, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (restarted_role) {
        L->restarts++;
        for (int r = 0; r < FL_LAUNCH_ROLES; r++)
            if (strcmp(restarted_role, role_names[r]) == 0) L->role_restarts[r]++;
    }
    FL_WARN("%s", text);
    if (!L->events) {
        char path[700];
        snprintf(path, sizeof path, "%s/events.log", L->dir);
        L->events = fopen(path, "a");
        if (!L->events) return;
    }
    time_t now = time(NULL);
    struct tm tm;
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    fprintf(L->events, "%s +%.1fs %s\n", stamp, fl_clock_sec() - L->t_start, text);
    fflush(L->events);
}

uint64_t fl_launch_restarts(const fl_launch_t *L) { return L->restarts; }

int fl_launch_fault_signal(int sig) {
    return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGABRT || sig == SIGSYS ||
           sig == SIGTRAP;
}

void fl_launch_note_death(fl_launch_t *L, const char *role, int index, int status) {
    if (!WIFSIGNALED(status) || !fl_launch_fault_signal(WTERMSIG(status))) return;
    L->crashes++;
    for (int r = 0; r < FL_LAUNCH_ROLES; r++)
        if (strcmp(role, role_names[r]) == 0) L->role_crashes[r]++;
    snprintf(L->last_crash, sizeof L->last_crash, "%s %d: signal %d (%s)", role, index, WTERMSIG(status),
             strsignal(WTERMSIG(status)));
}

void fl_launch_note_hang(fl_launch_t *L) { L->hangs++; }

double fl_launch_last_report(fl_launch_t *L, const char *role, int index) {
    const int service = strcmp(role, "replay") == 0 ? 0 : strcmp(role, "paramserver") == 0 ? 1 : -1;
    if (service >= 0) {
        double t = index >= 0 && index < 256 ? atomic_load(&L->service_seen[service][index]) : 0.0;
        return t > 0 ? t : -1.0;
    }
    return fl_fleet_state_last_report(&L->fs, role, index);
}

const fl_config_t *fl_launch_config(const fl_launch_t *L) { return &L->cfg; }
const char *fl_launch_config_path(const fl_launch_t *L) { return L->cfg_path; }
const char *fl_launch_control_addr(const fl_launch_t *L) { return L->control_addr; }
const fl_fleet_state_t *fl_launch_fleet_state(const fl_launch_t *L) { return &L->fs; }
const char *fl_launch_dir(const fl_launch_t *L) { return L->dir; }

void fl_launch_destroy(fl_launch_t *L) {
    if (!L) return;
    fl_rpc_server_destroy(L->control);
    if (L->fs_ready) fl_fleet_state_destroy(&L->fs);
    if (L->lock_fd >= 0) close(L->lock_fd); /* releases the lock */
    if (L->events) fclose(L->events);
    free(L);
}

/* What replay shard 0 and learner 0 would refuse about cfg with this env: the options
 * their create functions check first. 0, or 2 after printing why. */
static int check_services(const fl_config_t *cfg, const fl_env_def_t *env) {
    fl_err_t err;
    fl_err_init(&err);
    fl_replay_service_opts_t ro;
    fl_replay_service_opts_init(&ro);
    fl_status s = fl_options_replay(cfg, 0, &ro, &err);
    ro.obs = env->obs;
    ro.num_actions = env->num_actions;
    if (s == FL_OK) s = fl_replay_service_check_opts(&ro, &err);
    if (s != FL_OK) {
        fprintf(stderr, "fleet run: the replay shards would refuse this config: %s\n", err.msg);
        return 2;
    }
    fl_learner_opts_t lo;
    memset(&lo, 0, sizeof lo);
    s = fl_options_learner(cfg, &lo, &err);
    lo.obs = env->obs;
    lo.num_actions = env->num_actions;
    lo.replay_addr = lo.paramserver_addr = "127.0.0.1:1"; /* the real ones exist only once services run */
    if (lo.mode == FL_LEARNER_APEX) lo.count = 1;         /* an apex group is checked by the launchers */
    if (s == FL_OK) s = fl_learner_check_opts(&lo, &err);
    if (s != FL_OK) {
        fprintf(stderr, "fleet run: the learners would refuse this config: %s\n", err.msg);
        return 2;
    }
    return 0;
}

int fl_launch_check_roles(const fl_config_t *cfg, const fl_env_def_t *env) {
    fl_qnet_t *q = NULL;
    fl_err_t err;
    fl_err_init(&err);
    fl_status s = fl_qnet_create_for_obs(cfg->model_spec, env->obs.rank, env->obs.shape, env->num_actions, 1, &q, &err);
    fl_qnet_destroy(q);
    if (s != FL_OK) {
        fprintf(stderr, "fleet run: model.spec \"%s\" for env %s (obs %s, %d actions): %s\n", cfg->model_spec,
                env->name, fl_dtype_name(env->obs.dtype), env->num_actions, err.msg);
        return 2;
    }
    return check_services(cfg, env);
}

/* Claims the run folder: out_dir/name, or out_dir/name-2, name-3, ... when that exists,
 * so that a run never writes into another run's folder (mkdir claims it atomically, also
 * against a run starting at the same time). L->cfg.run_name becomes the folder's name, so
 * that config.ini says where its run lives. 0, or -1 after printing why. */
static int claim_run_dir(fl_launch_t *L) {
    const fl_config_t *c = &L->cfg;
    if (fl_proc_mkdir_p(c->run_out_dir) != 0) {
        fprintf(stderr, "fleet run: cannot create the output folder '%s' (run.out_dir): %s\n", c->run_out_dir,
                strerror(errno));
        return -1;
    }
    char name[FL_CONFIG_STRING_MAX];
    for (int k = 1; k <= 9999; k++) {
        if (k == 1)
            snprintf(name, sizeof name, "%s", c->run_name);
        else if (snprintf(name, sizeof name, "%s-%d", c->run_name, k) >= (int)sizeof name)
            break;
        snprintf(L->dir, sizeof L->dir, "%s/%s", c->run_out_dir, name);
        if (mkdir(L->dir, 0777) == 0) {
            if (k > 1) snprintf(L->cfg.run_name, sizeof L->cfg.run_name, "%s", name);
            return 0;
        }
        if (errno != EEXIST) {
            fprintf(stderr, "fleet run: cannot create the run folder '%s': %s\n", L->dir, strerror(errno));
            return -1;
        }
    }
    fprintf(stderr, "fleet run: every run folder '%s/%s' .. '%s-9999' exists; choose another run.name\n",
            c->run_out_dir, c->run_name, c->run_name);
    return -1;
}

/* Holds an exclusive lock on dir/run.lock while the launcher lives, so that a run folder
 * is never driven by two launchers (a --resume of a run that still goes is refused). */
static int lock_run_dir(fl_launch_t *L) {
    char path[700];
    snprintf(path, sizeof path, "%s/run.lock", L->dir);
    L->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (L->lock_fd >= 0 && flock(L->lock_fd, LOCK_EX | LOCK_NB) == 0) return 0;
    if (L->lock_fd >= 0 && errno == EWOULDBLOCK)
        fprintf(stderr, "fleet run: %s is in use by another fleet run (it holds %s); stop that one first\n", L->dir,
                path);
    else
        fprintf(stderr, "fleet run: cannot lock %s: %s\n", path, strerror(errno));
    return -1;
}

/* A new run: its own folder, and with run.checkpoints its checkpoint folder. */
static int prepare_new(fl_launch_t *L) {
    if (claim_run_dir(L) != 0 || lock_run_dir(L) != 0) return -1;
    fl_config_t *c = &L->cfg;
    if (c->run_checkpoints && !c->run_checkpoint_dir[0] &&
        snprintf(c->run_checkpoint_dir, sizeof c->run_checkpoint_dir, "%s/checkpoints", L->dir) >=
            (int)sizeof c->run_checkpoint_dir) {
        fprintf(stderr, "fleet run: the checkpoint folder %s/checkpoints is too long a path\n", L->dir);
        return -1;
    }
    if (c->run_checkpoint_dir[0] && fl_proc_mkdir_p(c->run_checkpoint_dir) != 0) {
        fprintf(stderr, "fleet run: cannot create run.checkpoint_dir %s: %s\n", c->run_checkpoint_dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* A resumed run: its folder, locked, with the checkpoints a resume needs. */
static int prepare_resume(fl_launch_t *L, const char *dir) {
    snprintf(L->dir, sizeof L->dir, "%s", dir);
    for (size_t n = strlen(L->dir); n > 1 && L->dir[n - 1] == '/'; n--) L->dir[n - 1] = '\0';
    if (lock_run_dir(L) != 0) return -1;
    const fl_config_t *c = &L->cfg;
    if (!c->run_checkpoint_dir[0]) {
        fprintf(stderr, "fleet run: %s ran with run.checkpoints = false: it has no checkpoints to resume from\n",
                L->dir);
        return -1;
    }
    char path[800];
    snprintf(path, sizeof path, "%s/learner-0.safetensors", c->run_checkpoint_dir);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "fleet run: cannot resume %s: no learner checkpoint %s (%s); the run stopped before its "
                        "first checkpoint\n", L->dir, path, strerror(errno));
        return -1;
    }
    snprintf(L->state_path, sizeof L->state_path, "%s/launcher.state", c->run_checkpoint_dir);
    if (access(L->state_path, R_OK) != 0) {
        fprintf(stderr, "fleet run: cannot resume %s: no %s (%s)\n", L->dir, L->state_path, strerror(errno));
        return -1;
    }
    L->resuming = 1;
    return 0;
}

/* The supervision's counters in launcher.state's layout (fl_fleet_totals_t.supervision):
 * restarts, crashes, hangs, then restarts and crashes per role. */
_Static_assert(3 + 2 * FL_LAUNCH_ROLES <= FL_FLEET_SUPERVISION_COUNTERS, "launcher.state holds every counter");
static void pack_supervision(const fl_launch_t *L, uint64_t *c) {
    c[0] = L->restarts;
    c[1] = L->crashes;
    c[2] = L->hangs;
    for (int r = 0; r < FL_LAUNCH_ROLES; r++) {
        c[3 + r] = L->role_restarts[r];
        c[3 + FL_LAUNCH_ROLES + r] = L->role_crashes[r];
    }
}

static void unpack_supervision(fl_launch_t *L, const uint64_t *c) {
    L->restarts = c[0];
    L->crashes = c[1];
    L->hangs = c[2];
    for (int r = 0; r < FL_LAUNCH_ROLES; r++) {
        L->role_restarts[r] = c[3 + r];
        L->role_crashes[r] = c[3 + FL_LAUNCH_ROLES + r];
    }
}

/* Restores the launcher's figures of a resumed run and prints where it continues. */
static int restore_figures(fl_launch_t *L) {
    fl_err_t err;
    fl_err_init(&err);
    if (fl_fleet_state_restore(&L->fs, &L->prev, L->state_path, &err) != FL_OK) {
        fprintf(stderr, "fleet run: cannot resume: %s\n", err.msg);
        return -1;
    }
    L->t_start = fl_clock_sec() - L->prev.elapsed_s;
    L->fs.t_start = L->t_start;
    unpack_supervision(L, L->prev.supervision);
    printf("  resume       %s at %.1f s: %llu env steps, %llu learner steps, %llu episodes", L->dir,
           L->prev.elapsed_s, (unsigned long long)L->prev.env_steps, (unsigned long long)L->prev.learner_steps,
           (unsigned long long)L->fs.n_returns);
    if (L->prev.n_evals)
        printf(", evaluation return %.1f", L->prev.eval.v[FL_EVAL_RESULT_return_mean]);
    printf("\n");
    fflush(stdout);
    return 0;
}

/* The folder of the services' unix sockets: <run>/sock, mode 0700 (only this user may
 * connect to a socket in it), or, when that path is too long for a socket address
 * (108 bytes), a fresh /tmp/fleet-sock-XXXXXX (mkdtemp: 0700). 0, or -1 after saying why. */
static int make_sock_dir(fl_launch_t *L) {
    char dir[sizeof L->dir + 8];
    snprintf(dir, sizeof dir, "%s/sock", L->dir);
    const size_t longest = strlen("/paramserver-9999.sock") + 1;
    if (strlen(dir) + longest <= sizeof L->sock_dir && strlen(dir) + longest <= 107) {
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "fleet run: cannot create the socket folder '%s': %s\n", dir, strerror(errno));
            return -1;
        }
        if (chmod(dir, 0700) != 0) {
            fprintf(stderr, "fleet run: cannot make the socket folder '%s' private (chmod 0700): %s\n", dir,
                    strerror(errno));
            return -1;
        }
        snprintf(L->sock_dir, sizeof L->sock_dir, "%s", dir);
        return 0;
    }
    snprintf(L->sock_dir, sizeof L->sock_dir, "/tmp/fleet-sock-XXXXXX");
    if (!mkdtemp(L->sock_dir)) {
        fprintf(stderr, "fleet run: cannot create a socket folder in /tmp: %s\n", strerror(errno));
        return -1;
    }
    printf("  sockets      %s (the run folder's path is too long for unix socket addresses)\n", L->sock_dir);
    return 0;
}

const char *fl_launch_socket_dir(const fl_launch_t *L) { return L->sock_dir; }

/* The Control service for the roles' reports, on control_host:0, or on a unix socket in
 * the run's socket folder when control_host is FL_LAUNCH_UNIX. */
static int start_control(fl_launch_t *L, const char *control_host) {
    fl_err_t err;
    fl_err_init(&err);
    int port = 0;
    char bind[300];
    const int unix_socket = strcmp(control_host, FL_LAUNCH_UNIX) == 0;
    if (unix_socket && make_sock_dir(L) != 0) return -1;
    if (unix_socket)
        snprintf(bind, sizeof bind, "unix:%s/control.sock", L->sock_dir);
    else
        snprintf(bind, sizeof bind, "%s:0", control_host);
    fl_rpc_server_opts_t so = {.threads = 2, .prepost = 16, .quiet_refusals = 1}; /* fleet_state logs them */
    if (fl_rpc_server_create(&so, &L->control, &err) != FL_OK ||
        fl_rpc_server_add_unary(L->control, fl_method_path(FL_METHOD_CONTROL_REPORT), fl_fleet_state_on_report,
                                &L->fs) != FL_OK ||
        fl_rpc_server_add_unary(L->control, fl_method_path(FL_METHOD_CONTROL_JOIN), fl_fleet_state_on_join, &L->fs) !=
            FL_OK ||
        fl_rpc_server_bind(L->control, bind, &port, &err) != FL_OK || fl_rpc_server_start(L->control, &err) != FL_OK) {
        fprintf(stderr, "fleet run: cannot start the control service on %s: %s\n", bind, err.msg);
        return -1;
    }
    if (unix_socket)
        snprintf(L->control_addr, sizeof L->control_addr, "%s", bind);
    else
        snprintf(L->control_addr, sizeof L->control_addr, "%s:%d", control_host, port);
    /* Where `fleet actor --join runs/<name>` finds Control (docs/multi-host.md) */
    char path[sizeof L->dir + 16];
    snprintf(path, sizeof path, "%s/control.addr", L->dir);
    FILE *f = fopen(path, "w");
    int ok = f && fprintf(f, "%s\n", L->control_addr) > 0;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) {
        fprintf(stderr, "fleet run: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* The run's access token (common/rpc.h): drawn from the run secret (so it names no
 * role's key), set for this process's Control and clients, handed to every role it starts
 * in FL_RPC_ACCESS_ENV, and written to <run>/access.token (0600) for the user's own
 * tools. With TLS the run token guards the services instead, and the access token goes
 * unused. 0, or -1 after printing why. */
static int open_access(fl_launch_t *L) {
    uint8_t key[FL_CRED_KEY_BYTES];
    char token[FL_CRED_TOKEN_CHARS + 1], path[sizeof L->dir + 16];
    fl_cred_role_key(L->fs.secret, "access", 0, key);
    fl_cred_token(key, 0, token);
    fl_err_t err;
    fl_err_init(&err);
    if (fl_rpc_set_access_token(token, &err) != FL_OK || setenv(FL_RPC_ACCESS_ENV, token, 1) != 0) {
        fprintf(stderr, "fleet run: cannot set the run's access token: %s\n", err.msg[0] ? err.msg : strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s/access.token", L->dir);
    unlink(path); /* a resumed run's old token: the file is made anew with mode 0600 */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int ok = fd >= 0 && write(fd, token, strlen(token)) == (ssize_t)strlen(token) && write(fd, "\n", 1) == 1;
    if (fd >= 0 && close(fd) != 0) ok = 0;
    if (!ok) {
        fprintf(stderr, "fleet run: cannot write the run's access token to %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* The run's files, its figures (restored when resuming), config.ini and Control. */
static int open_run(fl_launch_t *L, const char *cfg_file, const fl_wrapped_env_t *env, const char *control_host) {
    const fl_config_t *cfg = &L->cfg;
    print_plan(cfg, cfg_file, L->dir, env);
    L->t_start = fl_clock_sec();
    L->fs_ready = 1;
    if (fl_fleet_state_init(&L->fs, (int)cfg->actor_count, (int)cfg->actor_max_joined, (int)cfg->learner_count,
                            (int)cfg->run_evaluators, cfg->learner_mode == FL_CFG_MODE_GORILA, L->t_start) != 0) {
        fprintf(stderr, "fleet run: out of memory, or no random bytes for the run secret (getrandom)\n");
        return -1;
    }
    /* What a report's returns may claim a step: replay.max_abs_reward where set, else the
     * env's bound through the training and the evaluation wrappers (1e-4 of slack for
     * sums in single precision), else 1e6. */
    const double train_bound = fl_options_step_reward_bound(cfg, 0), eval_bound = fl_options_step_reward_bound(cfg, 1);
    L->fs.max_abs_reward = cfg->replay_max_abs_reward > 0           ? cfg->replay_max_abs_reward
                           : train_bound > 0 && eval_bound > 0 ? fmax(train_bound, eval_bound) * (1.0 + 1e-4)
                                                                 : 1e6;
    fl_proc_set_secret(L->fs.secret); /* the roles this process starts report with its credentials */
    if (open_access(L) != 0) return -1;
    if (L->resuming && restore_figures(L) != 0) return -1;
    if (!L->resuming && cfg->run_checkpoint_dir[0])
        snprintf(L->state_path, sizeof L->state_path, "%s/launcher.state", cfg->run_checkpoint_dir);
    snprintf(L->cfg_path, sizeof L->cfg_path, "%s/config.ini", L->dir);
    snprintf(L->csv_path, sizeof L->csv_path, "%s/metrics.csv", L->dir);
    snprintf(L->roles_path, sizeof L->roles_path, "%s/roles.csv", L->dir);
    snprintf(L->summary_path, sizeof L->summary_path, "%s/summary.txt", L->dir);
    snprintf(L->evals_path, sizeof L->evals_path, "%s/evals.csv", L->dir);
    snprintf(L->rounds_path, sizeof L->rounds_path, "%s/rounds.csv", L->dir);
    snprintf(L->returns_path, sizeof L->returns_path, "%s/returns.csv", L->dir);
    fl_err_t err;
    fl_err_init(&err);
    if (fl_config_write_file(cfg, L->cfg_path, &err) != FL_OK) {
        fprintf(stderr, "fleet run: %s\n", err.msg);
        return -1;
    }
    return start_control(L, control_host);
}

/* fl_launch_create and fl_launch_resume (resume_dir != NULL). */
static int launch_open(const fl_config_t *cfg, const char *cfg_file, const char *control_host, const char *resume_dir,
                       fl_launch_t **out) {
    *out = NULL;
    /* The env every role will open (plugin, wrappers): checked here so that a mistake
     * stops the run before any process starts. */
    fl_wrapped_env_t *wenv = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_options_open_env(cfg, &wenv, &err) != FL_OK) {
        fprintf(stderr, "fleet run: %s\n", err.msg);
        return 2;
    }
    if (fl_launch_check_roles(cfg, fl_wrapped_env_info(wenv)) != 0) {
        fl_wrapped_env_destroy(wenv);
        return 2;
    }
    fl_launch_t *L = calloc(1, sizeof *L);
    if (!L) {
        fl_wrapped_env_destroy(wenv);
        fprintf(stderr, "fleet run: out of memory\n");
        return 1;
    }
    L->cfg = *cfg;
    L->lock_fd = -1;
    snprintf(L->cfg_file, sizeof L->cfg_file, "%s", cfg_file);
    int rc = resume_dir ? prepare_resume(L, resume_dir) : prepare_new(L);
    L->frame_skip = fl_wrapped_env_frame_skip(wenv);
    if (rc == 0) rc = open_run(L, cfg_file, wenv, control_host);
    fl_wrapped_env_destroy(wenv);
    if (rc != 0) {
        fl_launch_destroy(L);
        return resume_dir ? 2 : 1;
    }
    *out = L;
    return 0;
}

int fl_launch_create(const fl_config_t *cfg, const char *cfg_file, const char *control_host, fl_launch_t **out) {
    return launch_open(cfg, cfg_file, control_host, NULL, out);
}

int fl_launch_resume(const fl_config_t *cfg, const char *run_dir, const char *control_host, fl_launch_t **out) {
    return launch_open(cfg, "", control_host, run_dir, out);
}

int fl_launch_resuming(const fl_launch_t *L) { return L->resuming; }

/* Sums the parameter servers' Info (versions: the minimum over shards); each shard's
 * own into per_shard (NULL: not kept; a shard that does not answer keeps its last). */
static void param_info_all(fl_launch_t *L, fl_param_client_t *ps, fl_param_info_t *sum, fl_param_info_t *per_shard) {
    if (!ps) return;
    int P = fl_param_num_shards(ps);
    fl_param_info_t acc;
    memset(&acc, 0, sizeof acc);
    int complete = 1;
    for (int s = 0; s < P; s++) {
        fl_param_info_t in;
        if (fl_param_info_shard(ps, s, 1000, &in, NULL) != FL_OK) {
            complete = 0; /* keep the last complete figures; ask the other shards still (signs of life) */
            continue;
        }
        if (s < 256) atomic_store(&L->service_seen[1][s], fl_clock_sec());
        if (per_shard) per_shard[s] = in;
        acc.version = s == 0 || in.version < acc.version ? in.version : acc.version;
        acc.publishes += in.publishes;
        acc.fetches += in.fetches;
        acc.fetches_with_params += in.fetches_with_params;
        acc.pushes_applied += in.pushes_applied;
        acc.pushes_dropped += in.pushes_dropped;
        acc.waits += in.waits;
        acc.push_bytes += in.push_bytes;
        acc.wait_timeouts += in.wait_timeouts;
        for (int b = 0; b < STALENESS_BUCKETS; b++) acc.staleness_hist[b] += in.staleness_hist[b];
    }
    if (complete) *sum = acc;
}

/* Every replay shard's Info into M->shard_info and their sum into M->rinfo (a shard that
 * does not answer keeps its last figures), noting which answered (service_seen). */
static int replay_info_all(fl_launch_t *L, fl_replay_sharded_t *replay, int R, fl_replay_info_t *sum,
                           fl_replay_info_t *per_shard, int64_t timeout_ms) {
    if (!replay) return 0;
    fl_replay_info_t *fresh = per_shard ? calloc((size_t)R, sizeof *fresh) : NULL;
    fl_replay_sharded_info(replay, timeout_ms, sum, fresh ? fresh : per_shard, NULL);
    if (!fresh) return 0;
    const double now = fl_clock_sec();
    int answered = 0;
    for (int r = 0; r < R; r++)
        if (fresh[r].uptime_s > 0) { /* answered */
            per_shard[r] = fresh[r];
            answered++;
            if (r < 256) atomic_store(&L->service_seen[0][r], now);
        }
    free(fresh);
    return answered;
}

/* ------------------------------------------------------------ the monitor ---- */

/* The kinds of process whose memory and CPU the run reports (the launcher last). */
enum { KIND_ACTOR, KIND_LEARNER, KIND_EVALUATOR, KIND_REPLAY, KIND_PARAMSERVER, KIND_LAUNCHER, N_KINDS };

/* What fl_launch_monitor works with, from the first progress line to the summary. */
typedef struct monitor {
    fl_launch_t *L;
    const fl_launch_ops_t *ops;
    void *ctx;
    int R;      /* replay shards */
    int gorila; /* learner.mode = gorila: the learners' steps add up */
    int exit_code;
    char reason[512];
    fl_replay_sharded_t *replay;
    fl_replay_info_t rinfo;       /* summed over the shards */
    int replay_final;             /* every shard answered the last Info, after the actors stopped */
    fl_replay_info_t *shard_info; /* per shard, R of them (NULL when out of memory) */
    fl_param_client_t *ps;
    fl_param_info_t pinfo;
    /* The largest resident and private memory (bytes) a process of each kind had at a
     * progress line (kinds: KIND_*), and of the whole fleet. */
    uint64_t mem_peak[N_KINDS][2], mem_total_peak[2];
    double cpu_sum[N_KINDS]; /* the CPU seconds of each kind's processes, as they last told them */
    int P;                    /* parameter-server shards */
    fl_param_info_t *ps_info; /* per shard, P of them (NULL when out of memory) */
    /* metrics.csv, roles.csv, evals.csv, returns.csv (NULL when they could not be opened) */
    FILE *csv, *roles, *evals, *returns;
    FILE *rounds; /* run.deterministic: rounds.csv */
    fl_tfevents_t *tb;   /* events.out.tfevents.* (NULL when it could not be written) */
    fl_curve_t *curve;   /* curve.png */
    double next_curve;   /* when curve.png is redrawn next */
    double next_state;   /* when launcher.state is written next */
    /* The fleet's figures at the previous progress line. */
    double last_t;
    uint64_t last_inserted, last_env, last_learner, last_samples, last_fetches;
    /* The evaluations so far: the latest (the headline), how many, the best mean. */
    fl_eval_result_t eval;
    uint64_t n_evals;
    double best_eval;
    /* The first evaluation that reached run.target_return: the stop looks at every
     * evaluation, not only at the latest when a progress period ends (several may come
     * in one period). */
    int target_hit;
    fl_eval_result_t target_eval;
} monitor_t;

/* One period's figures from the roles' reports. */
typedef struct figures {
    uint64_t env, min_version; /* actors: env steps (sum), oldest parameter version */
    uint64_t lsteps, lsamples; /* learners: steps (see learner_figures), samples (sum) */
    double loss, wait;         /* learners' means */
    double mret;               /* mean training return over the last ep_count (<= 100) episodes */
    uint64_t ep_count, episodes;
    uint64_t rss, private_bytes; /* memory: every process's that told it, the launcher's own too */
    int joined_ever, joined_live; /* actors that joined: any yet; those at work now */
} figures_t;

/* A counter's rate over dt seconds; 0 when it went back (a role restarted from a
 * checkpoint counts from there again). */
static double per_s(uint64_t now, uint64_t before, double dt) {
    return now >= before ? (double)(now - before) / dt : 0.0;
}

/* The fleet's figures at the end, for summary.txt and the last line. */
typedef struct totals {
    uint64_t acked, env, lsteps, episodes, ep_count;
    uint64_t pending, dropped, lost; /* actors' unacknowledged: still pending, dropped for the bound, lost
                                        with a replaced incarnation */
    double mret, best;
} totals_t;

/* A metrics file with its header; a resumed run appends to the file it has (a missing
 * or empty one gets the header). */
static FILE *open_csv(const char *path, const char *header, int append) {
    struct stat st;
    int has_rows = append && stat(path, &st) == 0 && st.st_size > 0;
    FILE *f = fopen(path, append ? "a" : "w");
    if (!f) {
        FL_WARN("cannot write %s: %s (the run goes on without it)", path, strerror(errno));
        return NULL;
    }
    if (!has_rows) fprintf(f, "%s\n", header);
    fflush(f);
    return f;
}

/* One column of metrics.csv and its TensorBoard tag ("" = not sent to TensorBoard: the
 * x axis itself, and the evaluation columns, which go as eval/ at their own steps). */
typedef struct metric {
    const char *column, *tag;
    int decimals; /* -1: an integer */
    double value;
    int empty; /* no value (an empty field) */
} metric_t;

#define N_METRICS (27 + STALENESS_BUCKETS) /* the table of period_metrics, checked there */
/* Seconds between redrawings of curve.png while the run goes (and after an evaluation). */
#define CURVE_EVERY_S 10.0

/* This period's metrics.csv row, in column order (f: the figures; rates per second). */
static int period_metrics(const monitor_t *M, double el, const figures_t *f, const double rate[5], uint64_t lag,
                          metric_t out[N_METRICS]) {
    static char stale_col[STALENESS_BUCKETS][32], stale_tag[STALENESS_BUCKETS][40];
    const fl_replay_info_t *ri = &M->rinfo;
    const fl_param_info_t *pi = &M->pinfo;
    const int have = M->n_evals > 0;
    metric_t m[] = {
        {"time_s", "time/seconds", 3, el, 0},
        {"env_steps", "", -1, (double)f->env, 0},
        {"env_steps_per_s", "env/steps_per_s", 1, rate[0], 0},
        {"episodes", "train/episodes", -1, (double)f->episodes, 0},
        {"mean_return_100", "train/mean_return_100", 3, f->mret, 0},
        {"replay_size", "replay/size", -1, (double)ri->size, 0},
        {"replay_inserted", "replay/inserted", -1, (double)ri->inserted, 0},
        {"replay_inserts_per_s", "replay/inserts_per_s", 1, rate[1], 0},
        {"replay_storage_mb", "replay/storage_mb", 3, (double)ri->storage_bytes / 1048576.0, 0},
        {"replay_frames", "replay/frames", -1, (double)ri->frames, 0},
        {"learner_steps", "learner/steps", -1, (double)f->lsteps, 0},
        {"learner_steps_per_s", "learner/steps_per_s", 2, rate[2], 0},
        {"samples_per_s", "learner/samples_per_s", 1, rate[3], 0},
        {"loss", "learner/loss", 6, f->loss, 0},
        {"wait_fraction", "learner/wait_fraction", 4, f->wait, 0},
        {"param_version", "params/version", -1, (double)pi->version, 0},
        {"version_lag", "params/version_lag", -1, (double)lag, 0},
        {"pushes_applied", "params/pushes_applied", -1, (double)pi->pushes_applied, 0},
        {"pushes_dropped", "params/pushes_dropped", -1, (double)pi->pushes_dropped, 0},
    };
    /* the fixed columns, the staleness buckets and the 5 columns below */
    _Static_assert(sizeof m / sizeof m[0] + STALENESS_BUCKETS + 8 == N_METRICS, "N_METRICS: the columns' count");
    int n = 0;
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) out[n++] = m[i];
    for (int b = 0; b < STALENESS_BUCKETS; b++) {
        snprintf(stale_col[b], sizeof stale_col[b], "staleness_%s", staleness_names[b]);
        snprintf(stale_tag[b], sizeof stale_tag[b], "params/staleness_%s", staleness_names[b]);
        out[n++] = (metric_t){stale_col[b], stale_tag[b], -1, (double)pi->staleness_hist[b], 0};
    }
    out[n++] = (metric_t){"eval_return_mean", "", 6, M->eval.v[FL_EVAL_RESULT_return_mean], !have};
    out[n++] = (metric_t){"eval_return_ci95", "", 6, M->eval.v[FL_EVAL_RESULT_return_ci95], !have};
    out[n++] = (metric_t){"eval_param_version", "", -1, (double)M->eval.version, !have};
    out[n++] = (metric_t){"evaluations", "", -1, (double)M->n_evals, 0};
    /* new columns go last: readers that count columns keep working */
    out[n++] = (metric_t){"frames", "env/frames", -1, (double)f->env * M->L->frame_skip, 0};
    out[n++] = (metric_t){"memory_rss_mb", "memory/rss_mb", 1, (double)f->rss / 1048576.0, 0};
    out[n++] = (metric_t){"memory_private_mb", "memory/private_mb", 1, (double)f->private_bytes / 1048576.0, 0};
    out[n++] = (metric_t){"fetches_per_s", "params/fetches_per_s", 1, rate[4], 0};
    return n;
}

/* The evaluation figures sent to TensorBoard (eval/<name>), at the env steps of the
 * evaluated parameters. */
static const struct {
    int index;
    const char *tag;
} eval_tags[] = {{FL_EVAL_RESULT_return_mean, "eval/return_mean"}, {FL_EVAL_RESULT_return_std, "eval/return_std"},
                 {FL_EVAL_RESULT_return_ci95, "eval/return_ci95"}, {FL_EVAL_RESULT_return_min, "eval/return_min"},
                 {FL_EVAL_RESULT_return_max, "eval/return_max"},   {FL_EVAL_RESULT_length_mean, "eval/length_mean"},
                 {FL_EVAL_RESULT_at_learner_steps, "eval/learner_steps"}};
#define N_EVAL_TAGS ((int)(sizeof eval_tags / sizeof eval_tags[0]))

/* Opens the services' clients, the metrics files with their headers, the TensorBoard
 * event file and the curve. */
static void open_outputs(monitor_t *M, const char *replay_list, const char *ps_list) {
    fl_replay_sharded_create(replay_list, 0, &M->replay, NULL);
    fl_param_client_create(ps_list, &M->ps, NULL);
    metric_t m[N_METRICS];
    const double zero[5] = {0, 0, 0, 0, 0};
    figures_t f;
    memset(&f, 0, sizeof f);
    int n = period_metrics(M, 0, &f, zero, 0, m);
    char header[2048];
    size_t used = 0;
    for (int i = 0; i < n && used < sizeof header; i++)
        used += (size_t)snprintf(header + used, sizeof header - used, "%s%s", i ? "," : "", m[i].column);
    const int append = M->L->resuming;
    M->csv = open_csv(M->L->csv_path, header, append);
    M->roles = open_csv(M->L->roles_path, "time_s,role,index,env_steps,env_steps_per_s,param_version,version_lag,"
                                          "learner_steps,learner_steps_per_s,samples_per_s,loss,epsilon,episodes,"
                                          "return_mean,rss_mb,private_mb,transitions_acked,cpu_s", append);
    M->evals = open_csv(M->L->evals_path, "time_s,env_steps,learner_steps,param_version,episodes,epsilon,return_mean,"
                                          "return_std,return_min,return_max,return_ci95,length_mean,length_min,"
                                          "length_max,evaluator,seconds,truncated,frames", append);
    M->returns = open_csv(M->L->returns_path, "time_s,env_steps,actor,epsilon,episodes,return_mean", append);
    if (M->L->cfg.run_deterministic)
        M->rounds = open_csv(M->L->rounds_path, "round,env_steps,learner_steps,updates,replay_size,loss,episodes,"
                                                "return_mean,length_mean", append);
    fl_err_t err;
    fl_err_init(&err);
    if (fl_tfevents_open(M->L->dir, &M->tb, &err) != FL_OK)
        FL_WARN("no TensorBoard events for this run: %s", err.msg);
    M->curve = fl_curve_create(M->L->dir);
    M->next_curve = fl_clock_sec() + CURVE_EVERY_S;
}

/* Sends tags[0..n) = values at step to TensorBoard; a failure is logged and ends the
 * event file (the run goes on). */
static void tb_write(monitor_t *M, int64_t step, double wall, int n, const char *const *tags, const double *values) {
    if (!M->tb || n == 0) return;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_tfevents_scalars(M->tb, step, wall, n, tags, values, &err) == FL_OK) return;
    FL_WARN("TensorBoard events: %s; no more are written for this run", err.msg);
    fl_tfevents_close(M->tb);
    M->tb = NULL;
}

/* A roles.csv row's memory columns (MB; empty where the process has not told). */
static void memory_cols(FILE *f, uint64_t rss, uint64_t private_bytes) {
    if (rss)
        fprintf(f, ",%.1f,%.1f", (double)rss / 1048576.0, (double)private_bytes / 1048576.0);
    else
        fprintf(f, ",,");
}

/* A roles.csv row's end: an actor's transitions acknowledged (has_acked), the process's
 * CPU seconds (empty where it has not told). */
static void row_end(FILE *f, int has_acked, uint64_t acked, double cpu_s) {
    if (has_acked)
        fprintf(f, ",%llu", (unsigned long long)acked);
    else
        fputc(',', f);
    if (cpu_s > 0)
        fprintf(f, ",%.3f\n", cpu_s);
    else
        fprintf(f, ",\n");
}

static const char *const kind_names[N_KINDS] = {"actor", "learner", "evaluator", "replay", "paramserver", "launcher"};

/* Notes a process of kind k's memory in the peaks and f's sums, and its CPU seconds in the
 * kind's sum. */
static void proc_note(monitor_t *M, int k, uint64_t rss, uint64_t private_bytes, double cpu_s, figures_t *f) {
    M->cpu_sum[k] += cpu_s;
    if (rss > M->mem_peak[k][0]) M->mem_peak[k][0] = rss;
    if (private_bytes > M->mem_peak[k][1]) M->mem_peak[k][1] = private_bytes;
    f->rss += rss;
    f->private_bytes += private_bytes;
}

/* A roles.csv row of a process that reports its memory only (role, index, the two
 * memory columns; the 11 figure columns between them empty), added to f's sums. */
static void proc_row(monitor_t *M, double el, int k, int index, uint64_t rss, uint64_t private_bytes, double cpu_s,
                       figures_t *f) {
    proc_note(M, k, rss, private_bytes, cpu_s, f);
    if (!M->roles || !rss) return;
    fprintf(M->roles, "%.3f,%s,%d,,,,,,,,,,,", el, kind_names[k], index);
    memory_cols(M->roles, rss, private_bytes);
    row_end(M->roles, 0, 0, cpu_s);
}

/* f's memory sums and each kind's CPU seconds: the actors' and learners' (their rows carry their own), and the rows
 * of the evaluators, the services (from their Info) and the launcher. Under fs->mu. */
static void proc_figures(monitor_t *M, double el, figures_t *f) {
    fl_fleet_state_t *fs = &M->L->fs;
    f->rss = f->private_bytes = 0;
    for (int k = 0; k < N_KINDS; k++) M->cpu_sum[k] = 0;
    for (int a = 0; a < fs->n_actors; a++) { /* a joined actor that is gone holds no memory, but it spent its CPU */
        const fl_role_state_t *A = &fs->actors[a];
        proc_note(M, KIND_ACTOR, A->gone ? 0 : A->rss, A->gone ? 0 : A->private_bytes, A->cpu_s, f);
    }
    for (int i = 0; i < fs->n_learners; i++)
        proc_note(M, KIND_LEARNER, fs->learners[i].rss, fs->learners[i].private_bytes, fs->learners[i].cpu_s, f);
    for (int i = 0; i < fs->n_evaluators; i++)
        proc_row(M, el, KIND_EVALUATOR, i, fs->evaluators[i].rss, fs->evaluators[i].private_bytes,
                 fs->evaluators[i].cpu_s, f);
    for (int r = 0; r < M->R && M->shard_info; r++)
        proc_row(M, el, KIND_REPLAY, r, M->shard_info[r].rss_bytes, M->shard_info[r].private_bytes,
                 M->shard_info[r].cpu_s, f);
    for (int s = 0; s < M->P && M->ps_info; s++)
        proc_row(M, el, KIND_PARAMSERVER, s, M->ps_info[s].rss_bytes, M->ps_info[s].private_bytes,
                 M->ps_info[s].cpu_s, f);
    uint64_t rss, priv;
    if (fl_procmem(&rss, &priv) == 0) proc_row(M, el, KIND_LAUNCHER, 0, rss, priv, fl_proc_cpu_s(), f);
    if (f->rss > M->mem_total_peak[0]) M->mem_total_peak[0] = f->rss;
    if (f->private_bytes > M->mem_total_peak[1]) M->mem_total_peak[1] = f->private_bytes;
}

/* The actors' part of f, and their roles.csv and returns.csv rows (el: seconds since the
 * start, dt: since the previous line). Under fs->mu. */
static void actor_figures(monitor_t *M, double el, double dt, figures_t *f) {
    fl_fleet_state_t *fs = &M->L->fs;
    f->env = fl_fleet_state_env_steps(fs);
    f->min_version = UINT64_MAX;
    f->joined_live = 0;
    f->joined_ever = fs->n_actors > fs->n_started;
    for (int a = 0; a < fs->n_actors; a++) {
        fl_role_state_t *A = &fs->actors[a];
        if (A->gone) continue; /* a joined actor that left or is lost: its figures stay in the sums */
        f->joined_live += A->joined;
        if (A->version < f->min_version) f->min_version = A->version;
        uint64_t n_ret;
        double ret = fl_fleet_state_actor_return(fs, a, &n_ret);
        if (M->roles && A->seen) {
            uint64_t alag = M->pinfo.version > A->version ? M->pinfo.version - A->version : 0;
            fprintf(M->roles, "%.3f,actor,%d,%llu,%.1f,%llu,%llu,,,,,%.6g,%llu,", el, a,
                    (unsigned long long)A->env_steps, per_s(A->env_steps, A->last_env, dt),
                    (unsigned long long)A->version, (unsigned long long)alag, A->epsilon,
                    (unsigned long long)A->n_recent);
            if (n_ret) fprintf(M->roles, "%.4f", ret);
            memory_cols(M->roles, A->rss, A->private_bytes);
            row_end(M->roles, 1, A->acked, A->cpu_s);
        }
        if (M->returns && n_ret)
            fprintf(M->returns, "%.3f,%llu,%d,%.6g,%llu,%.4f\n", el, (unsigned long long)f->env, a, A->epsilon,
                    (unsigned long long)A->n_recent, ret);
        if (M->tb && n_ret) {
            char tag[48];
            snprintf(tag, sizeof tag, "train/return_actor_%d", a);
            const char *tags[] = {tag};
            tb_write(M, (int64_t)f->env, fl_clock_wall(), 1, tags, &ret);
        }
        A->last_env = A->env_steps;
    }
}

/* The learners' part of f, and their roles.csv rows. Apex learners step together
 * (learner 0's count); gorila learners each push their own gradients (the sum). Samples
 * add up either way. Under fs->mu. */
static void learner_figures(monitor_t *M, double el, double dt, figures_t *f) {
    fl_fleet_state_t *fs = &M->L->fs;
    f->lsteps = fl_fleet_state_learner_steps(fs);
    f->lsamples = 0;
    f->loss = f->wait = 0;
    int seen = 0;
    for (int i = 0; i < fs->n_learners; i++) {
        fl_role_state_t *Ln = &fs->learners[i];
        if (!Ln->seen) continue;
        seen++;
        f->lsamples += Ln->samples;
        f->loss += Ln->loss;
        f->wait += Ln->wait_fraction;
        if (M->roles)
            fprintf(M->roles, "%.3f,learner,%d,,,%llu,,%llu,%.2f,%.1f,%.6g,,,", el, i,
                    (unsigned long long)Ln->version, (unsigned long long)Ln->learner_steps,
                    per_s(Ln->learner_steps, Ln->last_steps, dt), per_s(Ln->samples, Ln->last_samples, dt),
                    Ln->loss);
        if (M->roles) {
            memory_cols(M->roles, Ln->rss, Ln->private_bytes);
            row_end(M->roles, 0, 0, Ln->cpu_s);
        }
        Ln->last_steps = Ln->learner_steps;
        Ln->last_samples = Ln->samples;
    }
    if (seen) {
        f->loss /= seen;
        f->wait /= seen;
    }
}

/* This period's figures from the reports (and roles.csv's and returns.csv's rows). */
static void collect_figures(monitor_t *M, double el, double dt, figures_t *f) {
    fl_fleet_state_t *fs = &M->L->fs;
    pthread_mutex_lock(&fs->mu);
    actor_figures(M, el, dt, f);
    learner_figures(M, el, dt, f);
    proc_figures(M, el, f);
    f->mret = fl_fleet_state_mean_return(fs, &f->ep_count);
    f->episodes = fs->n_returns;
    pthread_mutex_unlock(&fs->mu);
    if (M->roles) fflush(M->roles);
    if (M->returns) fflush(M->returns);
}

/* run.deterministic: rounds.csv's rows of the rounds complete since the last call. Every
 * column is exact for a config and seed (no clock): env steps are the rounds' own. */
static void take_rounds(monitor_t *M) {
    if (!M->rounds) return;
    fl_round_row_t got[FL_FLEET_ROUND_SLOTS];
    int n = fl_fleet_state_take_rounds(&M->L->fs, got, FL_FLEET_ROUND_SLOTS);
    const fl_config_t *c = &M->L->cfg;
    for (int i = 0; i < n; i++) {
        const fl_round_row_t *r = &got[i];
        fprintf(M->rounds, "%llu,%llu,%llu,%llu,%llu,%.9g,%llu,", (unsigned long long)r->round,
                (unsigned long long)(r->round * (uint64_t)c->actor_count * (uint64_t)c->actor_sync_every),
                (unsigned long long)r->learner_steps, (unsigned long long)r->updates,
                (unsigned long long)r->replay_size, r->loss, (unsigned long long)r->episodes);
        if (r->episodes)
            fprintf(M->rounds, "%.9g,%.9g\n", r->return_sum / (double)r->episodes,
                    (double)r->length_sum / (double)r->episodes);
        else
            fprintf(M->rounds, ",\n");
    }
    if (n) fflush(M->rounds);
}

/* The evaluations that arrived since the last period: evals.csv rows, the headline. */
static void take_evals(monitor_t *M) {
    fl_eval_result_t got[FL_FLEET_EVAL_QUEUE];
    int n = fl_fleet_state_take_evals(&M->L->fs, got, FL_FLEET_EVAL_QUEUE);
    for (int i = 0; i < n; i++) {
        const double *v = got[i].v;
        if (M->evals)
            fprintf(M->evals, "%.3f,%.0f,%.0f,%llu,%.0f,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.0f,%.0f,%d,%.3f,%.0f,%.0f\n",
                    got[i].received_s, v[FL_EVAL_RESULT_at_env_steps], v[FL_EVAL_RESULT_at_learner_steps],
                    (unsigned long long)got[i].version, v[FL_EVAL_RESULT_episodes], v[FL_EVAL_RESULT_epsilon],
                    v[FL_EVAL_RESULT_return_mean], v[FL_EVAL_RESULT_return_std], v[FL_EVAL_RESULT_return_min],
                    v[FL_EVAL_RESULT_return_max], v[FL_EVAL_RESULT_return_ci95], v[FL_EVAL_RESULT_length_mean],
                    v[FL_EVAL_RESULT_length_min], v[FL_EVAL_RESULT_length_max], got[i].evaluator,
                    v[FL_EVAL_RESULT_seconds], v[FL_EVAL_RESULT_truncated],
                    v[FL_EVAL_RESULT_at_env_steps] * M->L->frame_skip);
        const char *tags[N_EVAL_TAGS];
        double values[N_EVAL_TAGS];
        for (int k = 0; k < N_EVAL_TAGS; k++) {
            tags[k] = eval_tags[k].tag;
            values[k] = v[eval_tags[k].index];
        }
        tb_write(M, (int64_t)v[FL_EVAL_RESULT_at_env_steps], fl_clock_wall(), N_EVAL_TAGS, tags, values);
        if (M->L->frame_skip > 1) { /* Atari papers' x axis: emulator frames */
            const char *ftag[] = {"eval_by_frames/return_mean"};
            tb_write(M, (int64_t)(v[FL_EVAL_RESULT_at_env_steps] * M->L->frame_skip), fl_clock_wall(), 1, ftag,
                     &v[FL_EVAL_RESULT_return_mean]);
        }
        if (!M->n_evals || v[FL_EVAL_RESULT_return_mean] > M->best_eval) M->best_eval = v[FL_EVAL_RESULT_return_mean];
        M->n_evals++;
        M->eval = got[i];
        if (!M->target_hit && v[FL_EVAL_RESULT_return_mean] >= M->L->cfg.run_target_return) {
            M->target_hit = 1;
            M->target_eval = got[i];
        }
    }
    if (n && M->evals) fflush(M->evals);
    if (n) M->next_curve = 0; /* redraw with the new evaluation */
}

/* How far the run is through its nearest budget (run.max_seconds, run.max_env_steps,
 * run.max_learner_steps), as a fraction in [0, 1]; -1 when it has none. */
static double budget_done(const fl_config_t *c, double el, const figures_t *f) {
    double done = -1.0;
    if (c->run_max_seconds > 0) done = fmax(done, el / c->run_max_seconds);
    if (c->run_max_env_steps > 0) done = fmax(done, (double)f->env / (double)c->run_max_env_steps);
    if (c->run_max_learner_steps > 0) done = fmax(done, (double)f->lsteps / (double)c->run_max_learner_steps);
    return done > 1.0 ? 1.0 : done;
}

/* The progress line on stdout (cli/progress.h). */
static void print_progress(monitor_t *M, double el, const figures_t *f, double env_rate, double upd_rate,
                           uint64_t lag) {
    const fl_config_t *c = &M->L->cfg;
    fl_progress_t p;
    memset(&p, 0, sizeof p);
    p.elapsed_s = el;
    p.evaluators = (int)c->run_evaluators;
    p.have_eval = M->n_evals > 0;
    p.eval_mean = M->eval.v[FL_EVAL_RESULT_return_mean];
    p.eval_ci95 = M->eval.v[FL_EVAL_RESULT_return_ci95];
    p.have_train = f->ep_count > 0;
    p.train_return = f->mret;
    p.env_rate = env_rate;
    p.frames = M->L->frame_skip > 1 ? f->env * (uint64_t)M->L->frame_skip : 0;
    p.warmup_need = (uint64_t)c->replay_min_size_to_sample;
    p.upd_rate = upd_rate;
    p.loss = f->loss;
    p.replay_size = M->rinfo.size;
    p.lag = lag;
    p.gorila = M->gorila;
    p.pushes_applied = M->pinfo.pushes_applied;
    p.pushes_dropped = M->pinfo.pushes_dropped;
    p.restarts = M->L->restarts;
    p.crashes = M->L->crashes;
    p.hangs = M->L->hangs;
    p.joined_ever = f->joined_ever;
    p.actors_started = (uint64_t)M->L->fs.n_started;
    p.actors_joined = (uint64_t)f->joined_live;
    p.budget_done = budget_done(c, el, f);
    p.eta_s = p.budget_done > 0 ? el * (1.0 - p.budget_done) / p.budget_done : -1;
    char line[FL_PROGRESS_COLUMNS + 1];
    fl_progress_format(&p, line, sizeof line);
    printf("%s\n", line);
    fflush(stdout);
}

/* The progress line and its metrics.csv row. */
static void report_period(monitor_t *M, double el, double dt, const figures_t *f) {
    const fl_replay_info_t *ri = &M->rinfo;
    const fl_param_info_t *pi = &M->pinfo;
    double env_rate = per_s(f->env, M->last_env, dt);
    double ins_rate = per_s(ri->inserted, M->last_inserted, dt);
    double upd_rate = per_s(f->lsteps, M->last_learner, dt);
    double smp_rate = per_s(f->lsamples, M->last_samples, dt);
    uint64_t lag = (f->min_version == UINT64_MAX || pi->version < f->min_version) ? 0 : pi->version - f->min_version;
    print_progress(M, el, f, env_rate, upd_rate, lag);
    const double rate[5] = {env_rate, ins_rate, upd_rate, smp_rate, per_s(pi->fetches, M->last_fetches, dt)};
    metric_t m[N_METRICS];
    int n = period_metrics(M, el, f, rate, lag, m);
    const char *tags[N_METRICS];
    double values[N_METRICS];
    int nt = 0;
    for (int i = 0; i < n; i++) {
        if (M->csv) {
            if (i) fputc(',', M->csv);
            if (!m[i].empty && m[i].decimals < 0) fprintf(M->csv, "%llu", (unsigned long long)m[i].value);
            if (!m[i].empty && m[i].decimals >= 0) fprintf(M->csv, "%.*f", m[i].decimals, m[i].value);
        }
        if (m[i].tag[0] && !m[i].empty) {
            tags[nt] = m[i].tag;
            values[nt++] = m[i].value;
        }
    }
    if (M->csv) {
        fputc('\n', M->csv);
        fflush(M->csv);
    }
    tb_write(M, (int64_t)f->env, fl_clock_wall(), nt, tags, values);
}

/* Writes run.checkpoint_dir/launcher.state: the figures a resumed run continues from
 * (f: this period's, NULL: the roles' final reports). A failure is logged. */
static void save_figures(monitor_t *M, const figures_t *f) {
    fl_launch_t *L = M->L;
    if (!L->state_path[0]) return;
    fl_fleet_totals_t t;
    memset(&t, 0, sizeof t);
    t.elapsed_s = fl_clock_sec() - L->t_start;
    if (f) {
        t.env_steps = f->env;
        t.learner_steps = f->lsteps;
        t.samples = f->lsamples;
    } else { /* at the end: the roles' final reports */
        pthread_mutex_lock(&L->fs.mu);
        t.env_steps = fl_fleet_state_env_steps(&L->fs);
        t.learner_steps = fl_fleet_state_learner_steps(&L->fs);
        for (int i = 0; i < L->fs.n_learners; i++) t.samples += L->fs.learners[i].samples;
        pthread_mutex_unlock(&L->fs.mu);
    }
    t.replay_inserted = M->rinfo.inserted;
    t.n_evals = M->n_evals;
    t.best_eval = M->best_eval;
    t.eval = M->eval;
    pack_supervision(L, t.supervision);
    fl_err_t err;
    fl_err_init(&err);
    if (fl_fleet_state_save(&L->fs, &t, L->state_path, &err) != FL_OK) FL_WARN("launcher state not saved: %s", err.msg);
}

/* 1, with the reason, when the headline return has reached run.target_return. */
static int target_reached(monitor_t *M, const figures_t *f) {
    const fl_config_t *cfg = &M->L->cfg;
    if (!cfg->run_stop_at_target) return 0;
    if (target_on_eval(cfg)) {
        if (!M->target_hit) return 0;
        const fl_eval_result_t *e = &M->target_eval;
        snprintf(M->reason, sizeof M->reason,
                 "target reached: evaluation return %.1f >= %g (mean of %.0f episodes, parameter version %llu)",
                 e->v[FL_EVAL_RESULT_return_mean], cfg->run_target_return, e->v[FL_EVAL_RESULT_episodes],
                 (unsigned long long)e->version);
        return 1;
    }
    if (f->ep_count < FL_FLEET_RETURN_WINDOW || f->mret < cfg->run_target_return) return 0;
    snprintf(M->reason, sizeof M->reason, "target reached: mean training return %.1f >= %g over the last %d episodes",
             f->mret, cfg->run_target_return, FL_FLEET_RETURN_WINDOW);
    return 1;
}

/* How long a joined actor may stay silent before it counts as lost: half of run.hang_s
 * (30 s with hang_s off), and at least three of its report periods (run.progress_every / 2). */
static double join_timeout(const fl_config_t *cfg) {
    return fmax(cfg->run_hang_s > 0 ? cfg->run_hang_s / 2 : 30.0, 1.5 * cfg->run_progress_every);
}

/* Opens the fleet to joining actors (fleet actor --join) now that its services serve:
 * they get the services' addresses and config.ini as every role of this run reads it. */
static void open_joins(monitor_t *M, const char *replay_list, const char *ps_list) {
    fl_launch_t *L = M->L;
    const fl_config_t *cfg = &L->cfg;
    const char *refused = cfg->run_deterministic ? "run.deterministic steps a fixed set of actors in lockstep rounds"
                          : cfg->actor_max_joined == 0 ? "actor.max_joined = 0"
                                                       : NULL;
    char *text = fl_proc_read_file(L->cfg_path, 1 << 20, NULL);
    if (!text) refused = "its config.ini cannot be read";
    if (fl_fleet_state_open_joins(&L->fs, cfg->actor_eps_base, cfg->actor_eps_alpha, replay_list, ps_list,
                                  text ? text : "", cfg->run_name, refused) != 0)
        FL_WARN("out of memory: actors cannot join this run");
    free(text);
}

/* One progress period at time now: polls the services, prints and records the figures.
 * Returns 1, with the reason, when the run is over (target return, a budget: env steps,
 * learner steps or time). */
static int progress(monitor_t *M, double now) {
    const fl_config_t *cfg = &M->L->cfg;
    replay_info_all(M->L, M->replay, M->R, &M->rinfo, M->shard_info, 1000);
    param_info_all(M->L, M->ps, &M->pinfo, M->ps_info);
    double dt = now - M->last_t, el = now - M->L->t_start;
    figures_t f;
    fl_fleet_state_check_joined(&M->L->fs, join_timeout(cfg));
    collect_figures(M, el, dt, &f);
    take_evals(M);
    take_rounds(M);
    report_period(M, el, dt, &f);
    M->last_t = now;
    M->last_env = f.env;
    M->last_inserted = M->rinfo.inserted;
    M->last_fetches = M->pinfo.fetches;
    M->last_learner = f.lsteps;
    M->last_samples = f.lsamples;
    if (cfg->run_checkpoint_every > 0 && fl_clock_sec() >= M->next_state) {
        save_figures(M, &f);
        M->next_state = fl_clock_sec() + cfg->run_checkpoint_every;
    }
    if (M->curve && fl_clock_sec() >= M->next_curve) {
        fl_curve_refresh(M->curve);
        M->next_curve = fl_clock_sec() + CURVE_EVERY_S;
    }
    if (target_reached(M, &f)) return 1;
    if (cfg->run_max_env_steps > 0 && f.env >= (uint64_t)cfg->run_max_env_steps) {
        snprintf(M->reason, sizeof M->reason, "env-step budget: %llu of %lld env steps",
                 (unsigned long long)f.env, (long long)cfg->run_max_env_steps);
        return 1;
    }
    if (cfg->run_max_learner_steps > 0 && f.lsteps >= (uint64_t)cfg->run_max_learner_steps) {
        snprintf(M->reason, sizeof M->reason, "learner-step budget: %llu of %lld learner steps",
                 (unsigned long long)f.lsteps, (long long)cfg->run_max_learner_steps);
        return 1;
    }
    if (cfg->run_max_seconds > 0 && el >= cfg->run_max_seconds) {
        snprintf(M->reason, sizeof M->reason, "time limit: %.0f s", cfg->run_max_seconds);
        return 1;
    }
    return 0;
}

/* Watches the fleet, a progress period at a time, until a signal, a dead role or the end
 * of the run. */
static void watch(monitor_t *M) {
    const fl_config_t *cfg = &M->L->cfg;
    double next = fl_clock_sec() + cfg->run_progress_every, next_echo = 0;
    while (!M->exit_code) {
        if (M->ops->echo_logs && fl_clock_sec() >= next_echo) {
            M->ops->echo_logs(M->ctx);
            next_echo = fl_clock_sec() + 0.25;
        }
        if (fl_stop_requested()) {
            snprintf(M->reason, sizeof M->reason, "interrupted (signal %d)", fl_stop_signal());
            return;
        }
        int dead = M->ops->dead(M->ctx, M->reason, sizeof M->reason);
        if (dead == 2) return; /* the roles' own budgets are spent: a normal end */
        if (dead) {
            FL_ERROR("%s: stopping the fleet", M->reason);
            M->exit_code = 1;
            return;
        }
        double now = fl_clock_sec();
        if (now < next) {
            fl_sleep_sec(fmin(0.05, next - now));
            continue;
        }
        next += cfg->run_progress_every;
        if (next < now) next = now + cfg->run_progress_every;
        if (progress(M, now)) return;
    }
}

static void set_flag(fl_fleet_state_t *fs, int *flag) {
    pthread_mutex_lock(&fs->mu);
    *flag = 1;
    pthread_mutex_unlock(&fs->mu);
}

static void close_file(FILE **f) {
    if (*f) fclose(*f);
    *f = NULL;
}

/* The stop of the actors that joined: they hear it at their next report, flush and send
 * their last one; this waits for those while the learners still sample (up to a report
 * period and the actors' flush, at least 15 s), then counts the silent ones lost. */
static void wait_joined(monitor_t *M) {
    fl_fleet_state_t *fs = &M->L->fs;
    const double pe = M->L->cfg.run_progress_every, until = fl_clock_sec() + fmax(15.0, pe + 12.0);
    int live;
    while ((live = fl_fleet_state_check_joined(fs, join_timeout(&M->L->cfg))) > 0 && fl_clock_sec() < until)
        fl_sleep_sec(0.1);
    if (live > 0) fl_fleet_state_check_joined(fs, 0); /* what did not answer in time is lost */
}

/* Ordered stop: actors and evaluators first, while the learners still sample (with a
 * rate limit, an actor's last inserts may wait for the learners' samples), then learners,
 * then the services, whose last figures are read first. Each kind is asked through
 * Control, then by the launcher's own means. Closes the clients and the metrics files. */
static void stop_in_order(monitor_t *M) {
    fl_fleet_state_t *fs = &M->L->fs;
    set_flag(fs, &fs->stop_actors);
    M->ops->stop(M->ctx, "actor evaluator", 15);
    wait_joined(M);
    set_flag(fs, &fs->stop_learners);
    M->ops->stop(M->ctx, "learner", 15);
    set_flag(fs, &fs->stop_services);
    M->replay_final = replay_info_all(M->L, M->replay, M->R, &M->rinfo, M->shard_info, 2000) == M->R;
    param_info_all(M->L, M->ps, &M->pinfo, M->ps_info);
    /* Replay shards write their last checkpoint as they stop: they get time for it. */
    M->ops->stop(M->ctx, "replay paramserver", M->L->cfg.run_checkpoint_dir[0] ? 300 : 10);
    fl_replay_sharded_destroy(M->replay);
    fl_param_client_destroy(M->ps);
    M->replay = NULL;
    M->ps = NULL;
    take_evals(M); /* the last results, sent while stopping */
    take_rounds(M);
    close_file(&M->csv);
    close_file(&M->rounds);
    close_file(&M->roles);
    close_file(&M->evals);
    close_file(&M->returns);
    fl_tfevents_close(M->tb);
    M->tb = NULL;
}

/* The final curve.png, after every file it reads is complete. */
static void finish_curve(monitor_t *M) {
    if (!M->curve) return;
    if (fl_curve_available(M->curve)) fl_curve_finish(M->curve, 30); /* a failure: logs/curve.log says why */
    fl_curve_destroy(M->curve);
    M->curve = NULL;
}

/* A role that ended with an error while stopping is a failure too. */
static void check_unclean(monitor_t *M) {
    char why[512];
    if (M->ops->unclean(M->ctx, why, sizeof why) && M->exit_code == 0) {
        FL_ERROR("%s", why);
        M->exit_code = 1;
        if (!M->reason[0]) snprintf(M->reason, sizeof M->reason, "%s", why);
    }
}

static void final_totals(monitor_t *M, totals_t *t) {
    fl_fleet_state_t *fs = &M->L->fs;
    memset(t, 0, sizeof *t);
    pthread_mutex_lock(&fs->mu);
    for (int a = 0; a < fs->n_actors; a++) {
        t->acked += fs->actors[a].acked;
        t->pending += fs->actors[a].pending;
        t->dropped += fs->actors[a].dropped;
        t->lost += fs->actors[a].lost_unacked;
    }
    t->env = fl_fleet_state_env_steps(fs);
    t->lsteps = fl_fleet_state_learner_steps(fs);
    t->mret = fl_fleet_state_mean_return(fs, &t->ep_count);
    t->episodes = fs->n_returns;
    t->best = fs->best_return;
    pthread_mutex_unlock(&fs->mu);
}

/* summary.txt's per-shard replay lines, in shard order (what each shard last reported). */
static void write_per_shard(const monitor_t *M, FILE *sf) {
    static const char *const per_shard_keys[] = {"replay_inserted_per_shard", "replay_sampled_per_shard",
                                                 "replay_size_per_shard"};
    fprintf(sf, "replay_shards=%d\n", M->R);
    for (int key = 0; key < 3; key++) {
        fprintf(sf, "%s=", per_shard_keys[key]);
        for (int r = 0; r < M->R && M->shard_info; r++) {
            const fl_replay_info_t *in = &M->shard_info[r];
            uint64_t v = key == 0 ? in->inserted : key == 1 ? in->sampled : in->size;
            fprintf(sf, "%s%llu", r ? "," : "", (unsigned long long)v);
        }
        fprintf(sf, "\n");
    }
}

/* summary.txt's evaluation lines: the last evaluation (the headline) and the best mean. */
static void write_eval_summary(const monitor_t *M, FILE *sf) {
    const double *v = M->eval.v;
    fprintf(sf, "evaluations=%llu\n", (unsigned long long)M->n_evals);
    if (!M->n_evals) return;
    fprintf(sf,
            "eval_return_mean=%.6g\neval_return_std=%.6g\neval_return_ci95=%.6g\neval_return_min=%.6g\n"
            "eval_return_max=%.6g\neval_length_mean=%.6g\neval_episodes=%.0f\neval_epsilon=%.6g\n"
            "eval_param_version=%llu\neval_env_steps=%.0f\neval_learner_steps=%.0f\nbest_eval_return=%.6g\n",
            v[FL_EVAL_RESULT_return_mean], v[FL_EVAL_RESULT_return_std], v[FL_EVAL_RESULT_return_ci95],
            v[FL_EVAL_RESULT_return_min], v[FL_EVAL_RESULT_return_max], v[FL_EVAL_RESULT_length_mean],
            v[FL_EVAL_RESULT_episodes], v[FL_EVAL_RESULT_epsilon], (unsigned long long)M->eval.version,
            v[FL_EVAL_RESULT_at_env_steps], v[FL_EVAL_RESULT_at_learner_steps], M->best_eval);
}

static void write_summary(const monitor_t *M, double elapsed, const totals_t *t) {
    const fl_config_t *cfg = &M->L->cfg;
    const fl_param_info_t *pi = &M->pinfo;
    FILE *sf = fopen(M->L->summary_path, "w");
    if (!sf) return;
    /* replay_final=0: a shard did not answer the last Info round (it stopped on its own
     * signal, as under scancel): the replay figures are its last answer's */
    fprintf(sf, "replay_final=%d\n", M->replay_final);
    fprintf(sf, "reason=%s\nexit_code=%d\nelapsed_s=%.3f\nepisodes=%llu\nmean_return_100=%.3f\nbest_return=%.3f\n"
                "env_steps=%llu\nframes=%llu\nlearner_steps=%llu\nreplay_inserted=%llu\nreplay_size=%llu\nactors_acked=%llu\n"
                "param_version=%llu\nlearner_mode=%s\nlearners=%d\nparamserver_shards=%lld\n"
                "pushes_applied=%llu\npushes_dropped=%llu\npush_waits=%llu\npush_wait_timeouts=%llu\npush_bytes=%llu\n"
                "staleness_hist=",
            M->reason, M->exit_code, elapsed, (unsigned long long)t->episodes, t->mret, t->best,
            (unsigned long long)t->env, (unsigned long long)t->env * (unsigned long long)M->L->frame_skip,
            (unsigned long long)t->lsteps, (unsigned long long)M->rinfo.inserted,
            (unsigned long long)M->rinfo.size, (unsigned long long)t->acked, (unsigned long long)pi->version,
            FL_CONFIG_ENUM_STR(cfg, learner, mode), M->L->fs.n_learners, (long long)cfg->paramserver_shards,
            (unsigned long long)pi->pushes_applied, (unsigned long long)pi->pushes_dropped,
            (unsigned long long)pi->waits, (unsigned long long)pi->wait_timeouts, (unsigned long long)pi->push_bytes);
    for (int b = 0; b < STALENESS_BUCKETS; b++)
        fprintf(sf, "%s%s:%llu", b ? "," : "", staleness_names[b], (unsigned long long)pi->staleness_hist[b]);
    fprintf(sf, "\n");
    write_per_shard(M, sf);
    write_eval_summary(M, sf);
    fprintf(sf, "actors_pending=%llu\nactors_dropped=%llu\nactors_lost_unacked=%llu\nrestarts=%llu\n",
            (unsigned long long)t->pending, (unsigned long long)t->dropped, (unsigned long long)t->lost,
            (unsigned long long)M->L->restarts);
    for (int r = 0; r < FL_LAUNCH_ROLES; r++)
        fprintf(sf, "restarts_%s=%llu\n", role_names[r], (unsigned long long)M->L->role_restarts[r]);
    /* Deaths by a fault signal (cli/launch.h: fl_launch_note_death) and hangs found. */
    fprintf(sf, "crashes=%llu\n", (unsigned long long)M->L->crashes);
    for (int r = 0; r < FL_LAUNCH_ROLES; r++)
        fprintf(sf, "crashes_%s=%llu\n", role_names[r], (unsigned long long)M->L->role_crashes[r]);
    fprintf(sf, "last_crash=%s\nhangs=%llu\n", M->L->last_crash, (unsigned long long)M->L->hangs);
    pthread_mutex_lock(&M->L->fs.mu);
    /* Actors that joined (fleet actor --join) in this sitting, left, or were lost; the
     * actor slots of the whole run (actor.count and every join) */
    fprintf(sf, "actors_joined=%llu\nactors_left=%llu\nactors_lost=%llu\nactor_slots=%d\n",
            (unsigned long long)M->L->fs.joins, (unsigned long long)M->L->fs.leaves,
            (unsigned long long)M->L->fs.losses, M->L->fs.n_actors);
    const unsigned long long refused = M->L->fs.refused;
    pthread_mutex_unlock(&M->L->fs.mu);
    fprintf(sf, "reports_refused=%llu\n", refused); /* Control's refusals (cli/fleet_state.h) */
    /* Memory: the largest a process of each kind had at a progress line (MB), and the fleet's. */
    for (int k = 0; k < N_KINDS; k++)
        fprintf(sf, "memory_%s_rss_mb=%.1f\nmemory_%s_private_mb=%.1f\n", kind_names[k],
                (double)M->mem_peak[k][0] / 1048576.0, kind_names[k], (double)M->mem_peak[k][1] / 1048576.0);
    fprintf(sf, "memory_rss_mb=%.1f\nmemory_private_mb=%.1f\n", (double)M->mem_total_peak[0] / 1048576.0,
            (double)M->mem_total_peak[1] / 1048576.0);
    /* CPU seconds: the launcher's own (its threads, not the roles'), and each kind's at the
     * last progress row (the processes as they last told them) */
    fprintf(sf, "launcher_cpu_s=%.3f\nparam_fetches=%llu\n", fl_proc_cpu_s(), (unsigned long long)pi->fetches);
    for (int k = 0; k < KIND_LAUNCHER; k++) fprintf(sf, "cpu_%s_s=%.3f\n", kind_names[k], M->cpu_sum[k]);
    fprintf(sf, "pids=");
    M->ops->pids(M->ctx, sf);
    fprintf(sf, "\n");
    fclose(sf);
}

/* The last line on stdout. */
static void print_outcome(const monitor_t *M, double elapsed, const totals_t *t) {
    char per_shard[512] = "", eval[160] = "";
    if (M->R > 1 && M->shard_info) {
        size_t used = (size_t)snprintf(per_shard, sizeof per_shard, "; per shard inserted/sampled");
        for (int r = 0; r < M->R && used < sizeof per_shard; r++)
            used += (size_t)snprintf(per_shard + used, sizeof per_shard - used, " %llu/%llu",
                                     (unsigned long long)M->shard_info[r].inserted,
                                     (unsigned long long)M->shard_info[r].sampled);
    }
    if (M->n_evals)
        snprintf(eval, sizeof eval, "evaluation return %.1f +- %.1f (%.0f episodes, version %llu), ",
                 M->eval.v[FL_EVAL_RESULT_return_mean], M->eval.v[FL_EVAL_RESULT_return_ci95],
                 M->eval.v[FL_EVAL_RESULT_episodes], (unsigned long long)M->eval.version);
    printf(
        "fleet run: %s after %.1f s: %s%llu episodes, mean training return %.1f (last %llu), %llu env steps, "
        "%llu learner steps, replay inserted %llu (actors saw %llu acknowledged%s). Output in %s/\n",
        M->reason[0] ? M->reason : "stopped", elapsed, eval, (unsigned long long)t->episodes, t->mret,
        (unsigned long long)t->ep_count, (unsigned long long)t->env, (unsigned long long)t->lsteps,
        (unsigned long long)M->rinfo.inserted, (unsigned long long)t->acked, per_shard, M->L->dir);
    fflush(stdout);
}

int fl_launch_monitor(fl_launch_t *L, const char *replay_list, const char *ps_list, const fl_launch_ops_t *ops,
                      void *ctx, int exit_code, const char *reason_in) {
    monitor_t M;
    memset(&M, 0, sizeof M);
    M.L = L;
    M.ops = ops;
    M.ctx = ctx;
    M.exit_code = exit_code;
    snprintf(M.reason, sizeof M.reason, "%s", reason_in ? reason_in : "");
    M.R = (int)L->cfg.replay_shards;
    M.gorila = L->cfg.learner_mode == FL_CFG_MODE_GORILA;
    M.shard_info = calloc((size_t)M.R, sizeof *M.shard_info);
    M.P = (int)L->cfg.paramserver_shards;
    M.ps_info = calloc((size_t)M.P, sizeof *M.ps_info);
    M.last_t = fl_clock_sec();
    M.next_state = M.last_t; /* at the first look: a run is resumable from its start (a launcher crash) */
    if (L->resuming) { /* the first rates count from where the run stopped */
        M.last_env = L->prev.env_steps;
        M.last_learner = L->prev.learner_steps;
        M.last_samples = L->prev.samples;
        M.last_inserted = L->prev.replay_inserted;
        M.rinfo.inserted = L->prev.replay_inserted;
        M.n_evals = L->prev.n_evals;
        M.best_eval = L->prev.best_eval;
        M.eval = L->prev.eval;
    }
    if (!M.exit_code) {
        open_outputs(&M, replay_list, ps_list);
        open_joins(&M, replay_list, ps_list);
        watch(&M);
    }
    double elapsed = fl_clock_sec() - L->t_start;
    printf("fleet run: stopping the fleet (%s)\n", M.reason[0] ? M.reason : "stopped");
    fflush(stdout);
    stop_in_order(&M);
    if (ops->echo_logs) ops->echo_logs(ctx);
    finish_curve(&M);
    check_unclean(&M);
    /* the run ended as it should, but roles crashed on the way (in this sitting: the
     * counts of earlier ones, carried over a resume, are in summary.txt) */
    const uint64_t crashed_now = L->crashes - L->prev.supervision[1];
    if (M.exit_code == 0 && crashed_now > 0) {
        M.exit_code = FL_LAUNCH_EXIT_CRASHED;
        FL_WARN("%llu role process%s died of a fault signal during the run (the last: %s); exit status %d",
                (unsigned long long)crashed_now, crashed_now == 1 ? "" : "es", L->last_crash, FL_LAUNCH_EXIT_CRASHED);
    }
    totals_t t;
    final_totals(&M, &t);
    if (!M.exit_code || M.last_env) save_figures(&M, NULL);
    write_summary(&M, elapsed, &t);
    print_outcome(&M, elapsed, &t);
    free(M.shard_info);
    free(M.ps_info);
    return M.exit_code;
}

int fl_launch_address_arg(const char *list, const char *path, char *arg, size_t len) {
    if (strlen(list) < len) {
        snprintf(arg, len, "%s", list);
        return 0;
    }
    FILE *af = fopen(path, "w");
    int ok = af && fprintf(af, "%s\n", list) > 0;
    if (af && fclose(af) != 0) ok = 0;
    if (!ok || strlen(path) + 2 > len) return -1;
    snprintf(arg, len, "@%s", path);
    return 0;
}
