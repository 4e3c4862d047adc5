/* open: the launcher's opening of a run, shared by `fleet run` on one machine
 * (launcher/local.c) and under mpirun (launcher/mpi.c): the plan, the run folder with
 * config.ini and its lock, a resumed run's state, the fleet.Control service and what the
 * roles report to it, and the events log. The watch that follows is monitor.c.
 *
 * Ownership: an fl_launch_t owns its copy of the config, the Control server and the
 * report tables; fl_launch_destroy frees them.
 * Failure: fl_launch_create prints why and returns the exit code.
 * Threads: one owner thread; Control's handler (on_report) runs on the server's threads
 * and shares the report tables with the monitor under fleet_state_t.mu. */
#include "launcher/launch.h"
#include "launcher/launch_internal.h"
#include "launcher/options.h"

#include <dirent.h>
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
#include "envs/factory.h"
#include "envs/registry.h"
#include "kernels/qnet.h"
#include "fleet.pb-c.h"
#include "launcher/curve.h"
#include "launcher/fleet_state.h"
#include "launcher/proc.h"
#include "launcher/progress.h"
#include "paramserver/client.h"
#include "replay/table.h"
#include "learner/learner.h"
#include "replay/client.h"
#include "replay/server.h"
#include "replay/sharded.h"

const char *const fl__launch_role_names[FL_LAUNCH_ROLES] = {"replay", "paramserver", "learner", "actor", "evaluator"};
const char *const fl__monitor_kind_names[N_KINDS] = {"actor",  "learner",     "evaluator",
                                                     "replay", "paramserver", "launcher"};

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
        printf(
            "  WARNING      the replay will not fit in this machine's memory beside the other roles: lower "
            "replay.capacity (to about %.0f), or compress frames with replay.zstd_level = 1\n",
            (double)c->replay_capacity * 0.6 * avail / need);
}

static void print_plan(const fl_config_t *c, const char *cfg_file, const char *dir, const fl_wrapped_env_t *w) {
    const fl_env_def_t *env = fl_wrapped_env_info(w);
    printf("fleet run: experiment '%s'%s%s%s, seed %lld, output %s/\n", c->run_name, cfg_file[0] ? " (" : "", cfg_file,
           cfg_file[0] ? ")" : "", (long long)c->run_seed, dir);
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
    if (env->obs.rank == 3 && !strstr(c->model_spec, "conv") && env->obs.shape[0] * env->obs.shape[1] >= 32 * 32)
        printf(
            "  warning      model.spec has no convolution, on images of %dx%dx%d: a dense network on raw pixels "
            "learns slowly if at all (configs/atari-pong.ini's: conv(16,8,4) relu conv(32,4,2) relu flatten "
            "dense(256) relu dueling)\n",
            env->obs.shape[0], env->obs.shape[1], env->obs.shape[2]);
    if (c->run_deterministic) {
        const int64_t k = fl_options_round_updates(c);
        printf(
            "  rounds       deterministic rounds: %lld env steps per actor with parameter version r, then %lld "
            "learner updates (once the replay holds %lld) and version r + 1",
            (long long)c->actor_sync_every, (long long)k, (long long)c->replay_min_size_to_sample);
        if (c->run_evaluators > 0) printf("; evaluations every %lld rounds", (long long)fl_options_round_every(c));
        printf("\n");
    }
    if (c->run_evaluators > 0) {
        printf("  evaluators   %lld         %lld episodes with epsilon %g every %g %s, each cut at %lld steps",
               (long long)c->run_evaluators, (long long)c->eval_episodes, c->eval_epsilon, c->eval_every,
               c->eval_every_unit == FL_CFG_EVERY_SECONDS ? "s" : "learner steps",
               (long long)c->eval_max_episode_steps);
        if (c->eval_nice > 0) printf(", nice +%lld", (long long)c->eval_nice);
        printf("\n");
    }
    double most = 0;
    if (c->run_stop_at_target && !c->env_plugin[0] && fl_env_return_max(c->env_name, &most) == 0 &&
        c->run_target_return > most)
        printf(
            "  warning      run.target_return = %g cannot be reached: an episode of %s returns at most %g, so "
            "the run ends only by its other limits (set run.target_return to %g or less)\n",
            c->run_target_return, c->env_name, most, most);
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

void fl_launch_event(fl_launch_t *L, const char *restarted_role, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (restarted_role) {
        L->restarts++;
        for (int r = 0; r < FL_LAUNCH_ROLES; r++)
            if (strcmp(restarted_role, fl__launch_role_names[r]) == 0) L->role_restarts[r]++;
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

uint64_t fl_launch_restarts(const fl_launch_t *L) {
    return L->restarts;
}

int fl_launch_fault_signal(int sig) {
    return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGABRT || sig == SIGSYS ||
           sig == SIGTRAP;
}

void fl_launch_note_death(fl_launch_t *L, const char *role, int index, int status) {
    if (!WIFSIGNALED(status) || !fl_launch_fault_signal(WTERMSIG(status))) return;
    L->crashes++;
    for (int r = 0; r < FL_LAUNCH_ROLES; r++)
        if (strcmp(role, fl__launch_role_names[r]) == 0) L->role_crashes[r]++;
    snprintf(L->last_crash, sizeof L->last_crash, "%s %d: signal %d (%s)", role, index, WTERMSIG(status),
             strsignal(WTERMSIG(status)));
}

void fl_launch_note_hang(fl_launch_t *L) {
    L->hangs++;
}

double fl_launch_last_report(fl_launch_t *L, const char *role, int index) {
    const int service = strcmp(role, "replay") == 0 ? 0 : strcmp(role, "paramserver") == 0 ? 1 : -1;
    if (service >= 0) {
        double t = index >= 0 && index < 256 ? atomic_load(&L->service_seen[service][index]) : 0.0;
        return t > 0 ? t : -1.0;
    }
    return fl_fleet_state_last_report(&L->fs, role, index);
}

const fl_config_t *fl_launch_config(const fl_launch_t *L) {
    return &L->cfg;
}
const char *fl_launch_config_path(const fl_launch_t *L) {
    return L->cfg_path;
}
const char *fl_launch_control_addr(const fl_launch_t *L) {
    return L->control_addr;
}
const fl_fleet_state_t *fl_launch_fleet_state(const fl_launch_t *L) {
    return &L->fs;
}
const char *fl_launch_dir(const fl_launch_t *L) {
    return L->dir;
}

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
int fl_launch_suite_runs(const char *dir, char *names, size_t len) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    names[0] = '\0';
    int seeds[64];
    for (struct dirent *e; (e = readdir(d));) {
        char *end = NULL;
        if (strncmp(e->d_name, "seed-", 5) != 0) continue;
        long s = strtol(e->d_name + 5, &end, 10);
        char path[4400];
        snprintf(path, sizeof path, "%s/%s/config.ini", dir, e->d_name);
        if (end == e->d_name + 5 || *end || access(path, R_OK) != 0) continue;
        if (n < 64) seeds[n] = (int)s;
        n++;
    }
    closedir(d);
    const int k = n < 64 ? n : 64;
    for (int i = 1; i < k; i++) /* in seed order */
        for (int j = i; j > 0 && seeds[j - 1] > seeds[j]; j--) {
            int t = seeds[j];
            seeds[j] = seeds[j - 1];
            seeds[j - 1] = t;
        }
    for (int i = 0; i < k && i < 8; i++) {
        size_t used = strlen(names);
        snprintf(names + used, len - used, "%sseed-%d", i ? ", " : "", seeds[i]);
    }
    if (n > 8) {
        size_t used = strlen(names);
        snprintf(names + used, len - used, ", ... (%d in all)", n);
    }
    return n;
}

static int prepare_resume(fl_launch_t *L, const char *dir) {
    snprintf(L->dir, sizeof L->dir, "%s", dir);
    for (size_t n = strlen(L->dir); n > 1 && L->dir[n - 1] == '/'; n--) L->dir[n - 1] = '\0';
    char runs[256], seed[32] = "seed-1";
    if (fl_launch_suite_runs(L->dir, runs, sizeof runs) > 0) {
        sscanf(runs, "%31[^,]", seed);
        fprintf(stderr,
                "fleet run: %s is a suite folder (`fleet suite`): resume one of its runs, e.g. `fleet run "
                "--resume %s/%s`\n",
                L->dir, L->dir, seed);
        return -1;
    }
    if (lock_run_dir(L) != 0) return -1;
    const fl_config_t *c = &L->cfg;
    if (!c->run_checkpoint_dir[0] && c->run_checkpoints) {
        fprintf(stderr,
                "fleet run: %s has no checkpoint folder (its config.ini has no run.checkpoint_dir, which `fleet "
                "run` writes there): not the folder of a run\n",
                L->dir);
        return -1;
    }
    if (!c->run_checkpoint_dir[0]) {
        fprintf(stderr, "fleet run: %s ran with run.checkpoints = false: it has no checkpoints to resume from\n",
                L->dir);
        return -1;
    }
    char path[800];
    snprintf(path, sizeof path, "%s/learner-0.safetensors", c->run_checkpoint_dir);
    if (access(path, R_OK) != 0) {
        fprintf(stderr,
                "fleet run: cannot resume %s: no learner checkpoint %s (%s); the run stopped before its "
                "first checkpoint\n",
                L->dir, path, strerror(errno));
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
void fl__launch_pack_supervision(const fl_launch_t *L, uint64_t *c) {
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
    printf("  resume       %s at %.1f s: %llu env steps, %llu learner steps, %llu episodes", L->dir, L->prev.elapsed_s,
           (unsigned long long)L->prev.env_steps, (unsigned long long)L->prev.learner_steps,
           (unsigned long long)L->fs.n_returns);
    if (L->prev.n_evals) printf(", evaluation return %.1f", L->prev.eval.v[FL_EVAL_RESULT_return_mean]);
    printf("\n");
    fflush(stdout);
    return 0;
}

/* A resumed run whose earlier sittings spent its budget (or reached its target) would
 * stop as soon as its roles were up: refused here, before any process starts, naming
 * the limit and the --set that raises it. 0, or -1 after saying why. */
static int check_budget_left(fl_launch_t *L) {
    const fl_config_t *c = &L->cfg;
    const fl_fleet_totals_t *p = &L->prev;
    char why[400] = "", set[160] = "";
    uint64_t n = 0;
    const double mret = fl_fleet_state_mean_return(&L->fs, &n);
    if (c->run_max_seconds > 0 && p->elapsed_s >= c->run_max_seconds) {
        snprintf(why, sizeof why, "it has run %.1f s of run.max_seconds = %g", p->elapsed_s, c->run_max_seconds);
        snprintf(set, sizeof set, "run.max_seconds=%.0f", ceil(p->elapsed_s + c->run_max_seconds)); /* as much again */
    } else if (c->run_max_env_steps > 0 && p->env_steps >= (uint64_t)c->run_max_env_steps) {
        snprintf(why, sizeof why, "it has taken %llu env steps of run.max_env_steps = %lld",
                 (unsigned long long)p->env_steps, (long long)c->run_max_env_steps);
        snprintf(set, sizeof set, "run.max_env_steps=%llu",
                 (unsigned long long)(p->env_steps + (uint64_t)c->run_max_env_steps));
    } else if (c->run_max_learner_steps > 0 && p->learner_steps >= (uint64_t)c->run_max_learner_steps) {
        snprintf(why, sizeof why, "it has taken %llu learner steps of run.max_learner_steps = %lld",
                 (unsigned long long)p->learner_steps, (long long)c->run_max_learner_steps);
        snprintf(set, sizeof set, "run.max_learner_steps=%llu",
                 (unsigned long long)(p->learner_steps + (uint64_t)c->run_max_learner_steps));
    } else if (c->run_stop_at_target && target_on_eval(c) && p->n_evals > 0 &&
               p->eval.v[FL_EVAL_RESULT_return_mean] >= c->run_target_return) {
        snprintf(why, sizeof why, "its last evaluation returned %.1f >= run.target_return = %g (run.stop_at_target)",
                 p->eval.v[FL_EVAL_RESULT_return_mean], c->run_target_return);
        snprintf(set, sizeof set, "run.stop_at_target=false");
    } else if (c->run_stop_at_target && !target_on_eval(c) && n >= FL_FLEET_RETURN_WINDOW &&
               mret >= c->run_target_return) {
        snprintf(why, sizeof why, "its mean training return %.1f >= run.target_return = %g (run.stop_at_target)", mret,
                 c->run_target_return);
        snprintf(set, sizeof set, "run.stop_at_target=false");
    }
    if (!why[0]) return 0;
    fprintf(stderr,
            "fleet run: not resuming %s: %s, so it would stop as soon as it started. To go on, %s: "
            "`fleet run --resume %s --set %s`\n",
            L->dir, why,
            strstr(set, "stop_at_target") ? "let it run past its target" : "raise it (here by as much again)", L->dir,
            set);
    return -1;
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

const char *fl_launch_socket_dir(const fl_launch_t *L) {
    return L->sock_dir;
}

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
    L->fs.max_abs_reward = cfg->replay_max_abs_reward > 0      ? cfg->replay_max_abs_reward
                           : train_bound > 0 && eval_bound > 0 ? fmax(train_bound, eval_bound) * (1.0 + 1e-4)
                                                               : 1e6;
    fl_proc_set_secret(L->fs.secret); /* the roles this process starts report with its credentials */
    if (open_access(L) != 0) return -1;
    if (L->resuming && (restore_figures(L) != 0 || check_budget_left(L) != 0)) return -1;
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

int fl_launch_resuming(const fl_launch_t *L) {
    return L->resuming;
}
