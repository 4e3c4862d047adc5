/* run: `fleet run`, the local launcher and supervisor of a whole fleet.
 *
 * It reads the experiment, writes the effective config to runs/<name>/config.ini (every
 * child reads that file, so --set overrides reach every role), serves fleet.Control for
 * the roles' reports, and starts each role as its own process (fork + exec of this
 * binary): replay shards and parameter servers first (each binds port 0 and writes its
 * address to a pipe), then learners and actors with those addresses. With
 * replay.shards = R it starts R `fleet replay --shard s` processes and gives every
 * learner and actor the list of their addresses in shard order ("a0,a1,...", or
 * "@runs/<name>/replay_addrs.txt" when the list does not fit in an option); each actor
 * streams to shard index % R and the learner samples all of them (replay/client.h).
 * Once a period it polls the services' Info (summed over replay shards), prints a
 * progress line and appends a row to metrics.csv.
 *
 * It stops on SIGINT/SIGTERM, at run.max_seconds, when the mean return of the last 100
 * episodes reaches run.target_return, or when a child dies unexpectedly (reported with
 * its role and exit status). Stopping is ordered so that nothing acknowledged is lost:
 * actors first (they flush their last batches and send a final report; the learner still
 * samples, so rate-limited inserts go through), then learners, then the services;
 * anything still alive after a grace period is killed. Children run in their own
 * process group (a terminal's Ctrl-C reaches only the launcher, which then stops them in
 * order) and get SIGTERM if the launcher itself dies. The outcome goes to
 * runs/<name>/summary.txt as key=value lines, with per-shard replay figures
 * (replay_inserted_per_shard, replay_sampled_per_shard, replay_size_per_shard). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/log.h"
#include "common/rpc.h"
#include "common/stop.h"
#include "envs/plugin.h"
#include "fleet.pb-c.h"
#include "fleet/cli.h"
#include "fleet/verbs.h"
#include "paramserver/client.h"
#include "replay/client.h"

#define RETURN_WINDOW 100

typedef struct child {
    char role[16];
    int index;
    pid_t pid;
    char addr[256];
    int running;
    int status;
} child_t;

/* What the roles report, aggregated under a lock by the Control handler. */
typedef struct role_state {
    int seen;
    uint64_t env_steps, episodes, acked, version, learner_steps, samples;
    double loss, wait_fraction, epsilon;
} role_state_t;

typedef struct fleet_state {
    pthread_mutex_t mu;
    role_state_t *actors;
    int n_actors;
    role_state_t *learners;
    int n_learners;
    float returns[RETURN_WINDOW];
    uint64_t n_returns; /* episodes reported in total */
    double best_return;
    /* Stop requests answered to each kind of role: actors first, then learners, then the
     * services, the same order as the signals. */
    int stop_actors, stop_learners, stop_services;
} fleet_state_t;

static fl_status on_report(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply) {
    fleet_state_t *fs = user;
    Fleet__Report *r = fleet__report__unpack(NULL, len, req);
    if (!r) return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT, "Report: not a valid fleet.Report message");
    pthread_mutex_lock(&fs->mu);
    role_state_t *st = NULL;
    if (strcmp(r->role, "actor") == 0 && (int)r->index < fs->n_actors) st = &fs->actors[r->index];
    if (strcmp(r->role, "learner") == 0 && (int)r->index < fs->n_learners) st = &fs->learners[r->index];
    /* Services report too; their figures come from polling Info, so a report is only
     * answered (with the stop flag). */
    int service = strcmp(r->role, "replay") == 0 || strcmp(r->role, "paramserver") == 0;
    if (st) {
        st->seen = 1;
        st->env_steps = r->env_steps;
        st->episodes = r->episodes;
        st->acked = r->transitions_acked;
        st->version = r->param_version;
        st->learner_steps = r->learner_steps;
        st->samples = r->samples;
        st->loss = r->loss;
        st->wait_fraction = r->wait_fraction;
        st->epsilon = r->epsilon;
    }
    for (size_t i = 0; i < r->n_episode_returns; i++) {
        float ret = r->episode_returns[i];
        fs->returns[fs->n_returns % RETURN_WINDOW] = ret;
        fs->n_returns++;
        if (fs->n_returns == 1 || ret > fs->best_return) fs->best_return = ret;
    }
    int stopping = strcmp(r->role, "actor") == 0     ? fs->stop_actors
                   : strcmp(r->role, "learner") == 0 ? fs->stop_learners
                                                     : fs->stop_services;
    pthread_mutex_unlock(&fs->mu);
    int known = st != NULL || service;
    char role[32];
    snprintf(role, sizeof role, "%s", r->role);
    uint32_t index = r->index;
    fleet__report__free_unpacked(r, NULL);
    if (!known)
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT, "Report: unknown role '%s' index %u", role, index);
    Fleet__ReportResponse resp = FLEET__REPORT_RESPONSE__INIT;
    resp.stop = stopping;
    return fl_rpc_reply_pb(reply, &resp.base);
}

static double mean_return(fleet_state_t *fs, uint64_t *count) {
    uint64_t n = fs->n_returns < RETURN_WINDOW ? fs->n_returns : RETURN_WINDOW;
    *count = n;
    if (!n) return 0;
    double s = 0;
    for (uint64_t i = 0; i < n; i++) s += fs->returns[i];
    return s / (double)n;
}

/* ------------------------------------------------------------ children ---- */

static char g_self[4096];

/* Starts `fleet ROLE args...`; with want_ready, *ready_fd gets the pipe on which the
 * child writes its address (its fd 3). */
static int spawn_start(child_t *c, const char *role, int index, char *const extra[], int want_ready, int *ready_fd) {
    snprintf(c->role, sizeof c->role, "%s", role);
    c->index = index;
    c->addr[0] = '\0';
    *ready_fd = -1;
    int fds[2] = {-1, -1};
    if (want_ready && pipe(fds) != 0) return -1;
    char *argv[32];
    int n = 0;
    argv[n++] = "fleet";
    argv[n++] = (char *)role;
    for (int i = 0; extra[i] && n < 28; i++) argv[n++] = extra[i];
    if (want_ready) {
        argv[n++] = "--ready-fd";
        argv[n++] = "3";
    }
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) {
        if (want_ready) {
            close(fds[0]);
            close(fds[1]);
        }
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        setpgid(0, 0);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (want_ready) {
            if (fds[1] != 3) {
                dup2(fds[1], 3);
            }
            close_range(4, ~0U, 0);
        } else {
            close_range(3, ~0U, 0);
        }
        execv(g_self, argv);
        _exit(127);
    }
    c->pid = pid;
    c->running = 1;
    if (!want_ready) return 0;
    close(fds[1]);
    *ready_fd = fds[0];
    return 0;
}

/* Waits (up to timeout_s) for the child to write its address on ready_fd, which it
 * closes. */
static int spawn_wait(child_t *c, int ready_fd, double timeout_s) {
    size_t got = 0;
    double until = fl_clock_sec() + timeout_s;
    int ok = 0;
    while (fl_clock_sec() < until && !fl_stop_requested()) {
        struct pollfd p = {ready_fd, POLLIN, 0};
        int r = poll(&p, 1, 100);
        if (r < 0 && errno != EINTR) break;
        if (r <= 0) continue;
        ssize_t k = read(ready_fd, c->addr + got, sizeof c->addr - 1 - got);
        if (k <= 0) break; /* EOF: the child closed the pipe or died */
        got += (size_t)k;
        c->addr[got] = '\0';
        char *nl = strchr(c->addr, '\n');
        if (nl) {
            *nl = '\0';
            ok = 1;
            break;
        }
    }
    close(ready_fd);
    return ok ? 0 : -1;
}

/* Starts `fleet ROLE args...`; with want_ready, waits (up to timeout_s) for the child to
 * write its address on fd 3. */
static int spawn(child_t *c, const char *role, int index, char *const extra[], int want_ready, double timeout_s) {
    int fd = -1;
    if (spawn_start(c, role, index, extra, want_ready, &fd) != 0) return -1;
    return want_ready ? spawn_wait(c, fd, timeout_s) : 0;
}

static void describe_status(int status, char *buf, size_t len) {
    if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "stopped (status 0x%x)", status);
}

/* Reaps exited children; returns the first one that exited (or NULL). */
static child_t *reap(child_t *kids, int n) {
    child_t *first = NULL;
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) break;
        for (int i = 0; i < n; i++) {
            if (kids[i].pid == pid && kids[i].running) {
                kids[i].running = 0;
                kids[i].status = status;
                if (!first) first = &kids[i];
            }
        }
    }
    return first;
}

/* SIGTERM to every running child whose role is in `roles`, then waits up to grace_s. */
static void stop_roles(child_t *kids, int n, const char *roles, double grace_s) {
    for (int i = 0; i < n; i++)
        if (kids[i].running && strstr(roles, kids[i].role)) kill(kids[i].pid, SIGTERM);
    double until = fl_clock_sec() + grace_s;
    for (;;) {
        reap(kids, n);
        int left = 0;
        for (int i = 0; i < n; i++)
            if (kids[i].running && strstr(roles, kids[i].role)) left++;
        if (!left) return;
        if (fl_clock_sec() > until) break;
        fl_sleep_sec(0.02);
    }
    for (int i = 0; i < n; i++) {
        if (kids[i].running && strstr(roles, kids[i].role)) {
            FL_WARN("%s %d (pid %d) did not stop within %.0f s: killing it", kids[i].role, kids[i].index,
                    (int)kids[i].pid, grace_s);
            kill(kids[i].pid, SIGKILL);
            int status;
            waitpid(kids[i].pid, &status, 0);
            kids[i].running = 0;
            kids[i].status = status;
        }
    }
}

static int mkdir_p(const char *path) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

static void print_plan(const fl_config_t *c, const char *cfg_file, const char *dir, const fl_env_def_t *env) {
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
    printf("  paramserver  %lld shard%s\n", (long long)c->paramserver_shards, c->paramserver_shards > 1 ? "s" : "");
    printf("  learner      %lld (%s)   batch %lld, %s lr %g, %lld-step double DQN, gamma %g, target every %lld, "
           "publish every %lld\n",
           (long long)c->learner_count, c->learner_device, (long long)c->learner_batch_size, c->learner_optimizer,
           c->learner_lr, (long long)c->learner_n_step, c->learner_gamma, (long long)c->learner_target_update,
           (long long)c->learner_publish_every);
    printf("  actors       %lld         env %s x %lld each, epsilons", (long long)c->actor_count, c->env_name,
           (long long)c->env_num_envs);
    for (int i = 0; i < c->actor_count && i < 8; i++) {
        double e = c->actor_count > 1
                       ? pow(c->actor_eps_base, 1.0 + c->actor_eps_alpha * i / (double)(c->actor_count - 1))
                       : c->actor_eps_base;
        printf(" %.3g", e);
    }
    if (c->actor_count > 8) printf(" ...");
    printf(", buffer %lld, sync every %lld steps\n", (long long)c->actor_local_buffer, (long long)c->actor_sync_every);
    char shape[64] = "";
    size_t n = 0;
    for (int i = 0; i < env->obs_rank && n < sizeof shape; i++)
        n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%d", i ? "x" : "", env->obs_shape[i]);
    char limit[32] = "none";
    if (env->max_episode_steps > 0) snprintf(limit, sizeof limit, "%d steps", env->max_episode_steps);
    printf("  env          %s: obs %s %s, %d actions, episode limit %s\n", env->name, fl_dtype_name(env->obs_dtype),
           shape, env->num_actions, limit);
    printf("  model        %s\n", c->model_spec);
    printf("  stop         ");
    if (c->run_stop_at_target) printf("at mean return >= %g over the last %d episodes, or ", c->run_target_return, RETURN_WINDOW);
    if (c->run_max_seconds > 0)
        printf("after %g s\n", c->run_max_seconds);
    else
        printf("on Ctrl-C\n");
    fflush(stdout);
}

int fl_verb_run(int argc, char **argv) {
    fl_config_t cfg;
    fl_config_defaults(&cfg);
    char cfg_file[256];
    int dry_run = 0;
    fl_opt_t opts[] = {{"--dry-run", FL_OPT_FLAG, &dry_run}};
    int rc = fl_cli_parse("run", argc, argv, &cfg, opts, 1, cfg_file, sizeof cfg_file);
    if (rc) return rc;
    fl_cli_setup_logging(&cfg, "run", -1);
    if (cfg.learner_count != 1 || cfg.paramserver_shards != 1) {
        fprintf(stderr,
                "fleet run: learner.count and paramserver.shards must be 1 on one machine for now (got %lld, %lld)\n",
                (long long)cfg.learner_count, (long long)cfg.paramserver_shards);
        return 2;
    }
    if (strcmp(cfg.learner_mode, "apex") != 0) {
        fprintf(stderr, "fleet run: learner.mode = %s is not built yet (expected apex)\n", cfg.learner_mode);
        return 2;
    }
    /* The env every role will open (plugin, wrappers): checked here so that a mistake
     * stops the run before any process starts. */
    fl_wrapped_env_t *wenv = NULL;
    fl_err_t env_err;
    fl_err_init(&env_err);
    if (fl_env_from_config(&cfg, &wenv, &env_err) != FL_OK) {
        fprintf(stderr, "fleet run: %s\n", env_err.msg);
        return 2;
    }
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", cfg.run_out_dir, cfg.run_name);
    print_plan(&cfg, cfg_file, dir, fl_wrapped_env_info(wenv));
    fl_wrapped_env_destroy(wenv);
    if (dry_run) {
        fl_config_dump(&cfg, stdout);
        return 0;
    }
    if (mkdir_p(dir) != 0) {
        fprintf(stderr, "fleet run: cannot create the run folder '%s': %s\n", dir, strerror(errno));
        return 1;
    }
    char cfg_path[700], csv_path[700], summary_path[700], addrs_path[700];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.ini", dir);
    snprintf(addrs_path, sizeof addrs_path, "%s/replay_addrs.txt", dir);
    snprintf(csv_path, sizeof csv_path, "%s/metrics.csv", dir);
    snprintf(summary_path, sizeof summary_path, "%s/summary.txt", dir);
    fl_err_t err;
    fl_err_init(&err);
    if (fl_config_write_file(&cfg, cfg_path, &err) != FL_OK) {
        fprintf(stderr, "fleet run: %s\n", err.msg);
        return 1;
    }
    ssize_t sl = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (sl <= 0) {
        fprintf(stderr, "fleet run: cannot find its own executable: %s\n", strerror(errno));
        return 1;
    }
    g_self[sl] = '\0';
    fl_stop_install();

    fleet_state_t fs;
    memset(&fs, 0, sizeof fs);
    pthread_mutex_init(&fs.mu, NULL);
    fs.n_actors = (int)cfg.actor_count;
    fs.n_learners = (int)cfg.learner_count;
    fs.actors = calloc((size_t)fs.n_actors, sizeof *fs.actors);
    fs.learners = calloc((size_t)fs.n_learners, sizeof *fs.learners);

    /* Control service for the roles' reports. */
    fl_rpc_server_t *control = NULL;
    char control_addr[300];
    int port = 0;
    char bind[300];
    snprintf(bind, sizeof bind, "%s:0", cfg.run_bind_host);
    fl_rpc_server_opts_t so = {.threads = 1, .prepost = 8};
    if (fl_rpc_server_create(&so, &control, &err) != FL_OK ||
        fl_rpc_server_add_unary(control, "/fleet.Control/Report", on_report, &fs) != FL_OK ||
        fl_rpc_server_bind(control, bind, &port, &err) != FL_OK || fl_rpc_server_start(control, &err) != FL_OK) {
        fprintf(stderr, "fleet run: cannot start the control service: %s\n", err.msg);
        fl_rpc_server_destroy(control);
        return 1;
    }
    snprintf(control_addr, sizeof control_addr, "%s:%d", cfg.run_bind_host, port);

    int nkids = (int)(cfg.replay_shards + cfg.paramserver_shards + cfg.learner_count + cfg.actor_count);
    child_t *kids = calloc((size_t)nkids, sizeof *kids);
    int k = 0;
    int exit_code = 0;
    char reason[256] = "";
    double t_start = fl_clock_sec();

    /* Services first: replay shards 0 .. R-1, then the parameter server; their addresses
     * are the actors' and learners' arguments. */
    const int R = (int)cfg.replay_shards;
    char idx[32];
    char *svc_args[] = {"--config", cfg_path, "--shard", idx, "--control", control_addr, NULL};
    /* All services start at once (each argv is copied by fork); then their addresses are
     * read in order. */
    int failed_start = 0, failed_at = 0;
    int *ready = malloc((size_t)(R + 1) * sizeof *ready);
    if (!kids || !ready) {
        fprintf(stderr, "fleet run: out of memory for %d children\n", nkids);
        free(ready);
        free(kids);
        free(fs.actors);
        free(fs.learners);
        fl_rpc_server_destroy(control);
        return 1;
    }
    for (int r = 0; r <= R; r++) ready[r] = -1;
    for (int r = 0; r <= R && !failed_start; r++) {
        snprintf(idx, sizeof idx, "%d", r < R ? r : 0);
        if (spawn_start(&kids[k++], r < R ? "replay" : "paramserver", r < R ? r : 0, svc_args, 1, &ready[r]) != 0) {
            failed_start = 1;
            failed_at = k - 1;
        }
    }
    double ready_until = fl_clock_sec() + 60;
    for (int r = 0; r <= R; r++) {
        if (ready[r] < 0) continue;
        if (!failed_start) {
            double left = ready_until - fl_clock_sec();
            if (spawn_wait(&kids[r], ready[r], left > 0 ? left : 0) != 0) {
                failed_start = 1;
                failed_at = r;
            }
        } else {
            close(ready[r]);
        }
    }
    free(ready);
    if (failed_start) {
        child_t *c = &kids[failed_at];
        /* A role that closed its ready pipe without an address is usually exiting: give
         * it a moment so that its exit status, not a guess, is reported. */
        for (int w = 0; w < 100; w++) {
            reap(kids, nkids);
            int any_dead = 0;
            for (int i = 0; i < nkids; i++) any_dead |= kids[i].pid && !kids[i].running;
            if (any_dead) break;
            fl_sleep_sec(0.02);
        }
        char st[128] = "did not report its address";
        for (int i = 0; i < nkids; i++)
            if (kids[i].pid && !kids[i].running) {
                c = &kids[i];
                describe_status(c->status, st, sizeof st);
            }
        if (fl_stop_requested())
            snprintf(reason, sizeof reason, "interrupted while starting");
        else
            snprintf(reason, sizeof reason, "%s %d (pid %d) %s while starting", c->role, c->index, (int)c->pid, st);
        exit_code = fl_stop_requested() ? 130 : 1;
    }
    /* The replay shards' addresses in shard order: inline when they fit in an option,
     * else in a file passed as @FILE. */
    size_t list_len = 0;
    for (int r = 0; r < R; r++) list_len += strlen(kids[r].addr) + 1;
    char *replay_list = calloc(list_len + 1, 1);
    char replay_arg[256] = "";
    if (replay_list) {
        for (int r = 0; r < R; r++) {
            if (r) strcat(replay_list, ",");
            strcat(replay_list, kids[r].addr);
        }
    }
    if (!exit_code && !replay_list) {
        snprintf(reason, sizeof reason, "out of memory for the replay addresses");
        exit_code = 1;
    }
    if (!exit_code) {
        if (strlen(replay_list) < sizeof replay_arg) {
            snprintf(replay_arg, sizeof replay_arg, "%s", replay_list);
        } else {
            FILE *af = fopen(addrs_path, "w");
            int ok = af && fprintf(af, "%s\n", replay_list) > 0;
            if (af && fclose(af) != 0) ok = 0;
            if (!ok || strlen(addrs_path) + 1 >= sizeof replay_arg) {
                snprintf(reason, sizeof reason, "cannot pass the replay addresses in %.200s", addrs_path);
                exit_code = 1;
            } else {
                snprintf(replay_arg, sizeof replay_arg, "@%s", addrs_path);
            }
        }
    }
    char *ps_addr = kids[R].addr;
    if (!exit_code) {
        if (R == 1)
            printf("  services     replay %s, paramserver %s, control %s\n", replay_arg, ps_addr, control_addr);
        else if (replay_arg[0] != '@')
            printf("  services     replay shards %s, paramserver %s, control %s\n", replay_arg, ps_addr, control_addr);
        else
            printf("  services     replay %d shards (addresses in %s), paramserver %s, control %s\n", R, addrs_path,
                   ps_addr, control_addr);
        fflush(stdout);
        char lidx[32];
        snprintf(lidx, sizeof lidx, "0");
        char *learner_args[] = {"--config",      cfg_path, "--index",   lidx,         "--replay", replay_arg,
                                "--paramserver", ps_addr,  "--control", control_addr, NULL};
        spawn(&kids[k++], "learner", 0, learner_args, 0, 0);
        for (int a = 0; a < cfg.actor_count; a++) {
            char aidx[32];
            snprintf(aidx, sizeof aidx, "%d", a);
            char *actor_args[] = {"--config",      cfg_path, "--index",   aidx,         "--replay", replay_arg,
                                  "--paramserver", ps_addr,  "--control", control_addr, NULL};
            spawn(&kids[k++], "actor", a, actor_args, 0, 0);
        }
    }

    fl_replay_sharded_t *rc_client = NULL;
    fl_replay_info_t *shard_info = calloc((size_t)R, sizeof *shard_info);
    fl_param_client_t *ps_client = NULL;
    FILE *csv = NULL;
    uint64_t last_inserted = 0, last_env = 0, last_learner = 0, last_samples = 0;
    double last_t = fl_clock_sec();
    fl_replay_info_t rinfo;
    memset(&rinfo, 0, sizeof rinfo);
    fl_param_info_t pinfo;
    memset(&pinfo, 0, sizeof pinfo);
    uint64_t ep_count = 0;
    double mret = 0;
    if (!exit_code) {
        fl_replay_sharded_create(replay_list, 0, &rc_client, NULL);
        fl_param_client_create(ps_addr, &ps_client, NULL);
        csv = fopen(csv_path, "w");
        if (csv) {
            fprintf(csv, "time_s,env_steps,env_steps_per_s,episodes,mean_return_100,replay_size,replay_inserted,"
                         "replay_inserts_per_s,learner_steps,learner_steps_per_s,samples_per_s,loss,wait_fraction,"
                         "param_version,version_lag\n");
            fflush(csv);
        }
        double next = fl_clock_sec() + cfg.run_progress_every;
        while (!exit_code) {
            if (fl_stop_requested()) {
                snprintf(reason, sizeof reason, "interrupted (signal %d)", fl_stop_signal());
                break;
            }
            child_t *dead = reap(kids, nkids);
            if (dead) {
                char st[128];
                describe_status(dead->status, st, sizeof st);
                snprintf(reason, sizeof reason, "%s %d (pid %d) %s", dead->role, dead->index, (int)dead->pid, st);
                FL_ERROR("%s: stopping the fleet", reason);
                exit_code = 1;
                break;
            }
            double now = fl_clock_sec();
            if (now < next) {
                fl_sleep_sec(fmin(0.05, next - now));
                continue;
            }
            next += cfg.run_progress_every;
            if (next < now) next = now + cfg.run_progress_every;
            if (rc_client) fl_replay_sharded_info(rc_client, 1000, &rinfo, shard_info, NULL);
            fl_param_info(ps_client, 1000, &pinfo, NULL);
            pthread_mutex_lock(&fs.mu);
            uint64_t env = 0, min_version = UINT64_MAX;
            for (int a = 0; a < fs.n_actors; a++) {
                env += fs.actors[a].env_steps;
                if (fs.actors[a].version < min_version) min_version = fs.actors[a].version;
            }
            role_state_t L = fs.learners[0];
            mret = mean_return(&fs, &ep_count);
            uint64_t episodes = fs.n_returns;
            pthread_mutex_unlock(&fs.mu);
            double dt = now - last_t, el = now - t_start;
            double env_rate = (double)(env - last_env) / dt;
            double ins_rate = (double)(rinfo.inserted - last_inserted) / dt;
            double upd_rate = (double)(L.learner_steps - last_learner) / dt;
            double smp_rate = (double)(L.samples - last_samples) / dt;
            uint64_t lag = (min_version == UINT64_MAX || pinfo.version < min_version) ? 0 : pinfo.version - min_version;
            printf("[%6.1fs] env %7.0f steps/s | replay %8llu (+%6.0f/s) | learner %6.1f upd/s %8.0f smp/s loss %8.4f "
                   "| return %7.1f (%llu ep) | version %llu lag %llu\n",
                   el, env_rate, (unsigned long long)rinfo.size, ins_rate, upd_rate, smp_rate, L.loss, mret,
                   (unsigned long long)episodes, (unsigned long long)pinfo.version, (unsigned long long)lag);
            fflush(stdout);
            if (csv) {
                fprintf(csv, "%.3f,%llu,%.1f,%llu,%.3f,%llu,%llu,%.1f,%llu,%.2f,%.1f,%.6g,%.4f,%llu,%llu\n", el,
                        (unsigned long long)env, env_rate, (unsigned long long)episodes, mret,
                        (unsigned long long)rinfo.size, (unsigned long long)rinfo.inserted, ins_rate,
                        (unsigned long long)L.learner_steps, upd_rate, smp_rate, L.loss, L.wait_fraction,
                        (unsigned long long)pinfo.version, (unsigned long long)lag);
                fflush(csv);
            }
            last_t = now;
            last_env = env;
            last_inserted = rinfo.inserted;
            last_learner = L.learner_steps;
            last_samples = L.samples;
            if (cfg.run_stop_at_target && ep_count >= RETURN_WINDOW && mret >= cfg.run_target_return) {
                snprintf(reason, sizeof reason, "target reached: mean return %.1f >= %g over the last %d episodes",
                         mret, cfg.run_target_return, RETURN_WINDOW);
                break;
            }
            if (cfg.run_max_seconds > 0 && el >= cfg.run_max_seconds) {
                snprintf(reason, sizeof reason, "time limit: %.0f s", cfg.run_max_seconds);
                break;
            }
        }
    }
    double elapsed = fl_clock_sec() - t_start;

    /* Ordered stop: actors and learners flush and report, then the services go. */
    /* Actors first, while the learner still samples: with a rate limit, an actor's last
     * inserts may wait for the learner's samples. */
    pthread_mutex_lock(&fs.mu);
    fs.stop_actors = 1;
    pthread_mutex_unlock(&fs.mu);
    stop_roles(kids, nkids, "actor", 15);
    pthread_mutex_lock(&fs.mu);
    fs.stop_learners = 1;
    pthread_mutex_unlock(&fs.mu);
    stop_roles(kids, nkids, "learner", 15);
    pthread_mutex_lock(&fs.mu);
    fs.stop_services = 1;
    pthread_mutex_unlock(&fs.mu);
    if (rc_client) fl_replay_sharded_info(rc_client, 2000, &rinfo, shard_info, NULL);
    if (ps_client) fl_param_info(ps_client, 2000, &pinfo, NULL);
    stop_roles(kids, nkids, "replay paramserver", 10);
    fl_replay_sharded_destroy(rc_client);
    fl_param_client_destroy(ps_client);
    fl_rpc_server_destroy(control);
    if (csv) fclose(csv);

    /* A child that exited with an error while stopping is a failure too. */
    for (int i = 0; i < nkids; i++) {
        if (!kids[i].pid) continue;
        int st = kids[i].status;
        int clean = (WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
                    (WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
        if (!clean && exit_code == 0) {
            char d[128];
            describe_status(st, d, sizeof d);
            FL_ERROR("%s %d (pid %d) %s", kids[i].role, kids[i].index, (int)kids[i].pid, d);
            exit_code = 1;
            if (!reason[0]) snprintf(reason, sizeof reason, "%s %d %s", kids[i].role, kids[i].index, d);
        }
    }
    uint64_t acked = 0, env = 0, lsteps = 0;
    pthread_mutex_lock(&fs.mu);
    for (int a = 0; a < fs.n_actors; a++) {
        acked += fs.actors[a].acked;
        env += fs.actors[a].env_steps;
    }
    lsteps = fs.learners[0].learner_steps;
    mret = mean_return(&fs, &ep_count);
    uint64_t episodes = fs.n_returns;
    double best = fs.best_return;
    pthread_mutex_unlock(&fs.mu);
    if (exit_code == 0 && fl_stop_requested() && strncmp(reason, "interrupted", 11) == 0) exit_code = 0;

    FILE *sf = fopen(summary_path, "w");
    if (sf) {
        fprintf(sf, "reason=%s\nexit_code=%d\nelapsed_s=%.3f\nepisodes=%llu\nmean_return_100=%.3f\nbest_return=%.3f\n"
                    "env_steps=%llu\nlearner_steps=%llu\nreplay_inserted=%llu\nreplay_size=%llu\nactors_acked=%llu\n"
                    "param_version=%llu\n",
                reason, exit_code, elapsed, (unsigned long long)episodes, mret, best, (unsigned long long)env,
                (unsigned long long)lsteps, (unsigned long long)rinfo.inserted, (unsigned long long)rinfo.size,
                (unsigned long long)acked, (unsigned long long)pinfo.version);
        /* Per replay shard, in shard order (what each shard last reported). */
        static const char *const per_shard_keys[] = {"replay_inserted_per_shard", "replay_sampled_per_shard",
                                                     "replay_size_per_shard"};
        fprintf(sf, "replay_shards=%d\n", R);
        for (int key = 0; key < 3; key++) {
            fprintf(sf, "%s=", per_shard_keys[key]);
            for (int r = 0; r < R && shard_info; r++) {
                const fl_replay_info_t *in = &shard_info[r];
                uint64_t v = key == 0 ? in->inserted : key == 1 ? in->sampled : in->size;
                fprintf(sf, "%s%llu", r ? "," : "", (unsigned long long)v);
            }
            fprintf(sf, "\n");
        }
        fprintf(sf, "pids=");
        for (int i = 0; i < nkids; i++)
            if (kids[i].pid) fprintf(sf, "%s%d", i ? "," : "", (int)kids[i].pid);
        fprintf(sf, "\n");
        fclose(sf);
    }
    char per_shard[512] = "";
    if (R > 1 && shard_info) {
        size_t used = (size_t)snprintf(per_shard, sizeof per_shard, "; per shard inserted/sampled");
        for (int r = 0; r < R && used < sizeof per_shard; r++)
            used +=
                (size_t)snprintf(per_shard + used, sizeof per_shard - used, " %llu/%llu",
                                 (unsigned long long)shard_info[r].inserted, (unsigned long long)shard_info[r].sampled);
    }
    printf(
        "fleet run: %s after %.1f s: %llu episodes, mean return %.1f (last %llu), %llu env steps, %llu learner "
        "steps, replay inserted %llu (actors saw %llu acknowledged%s). Output in %s/\n",
        reason[0] ? reason : "stopped", elapsed, (unsigned long long)episodes, mret, (unsigned long long)ep_count,
        (unsigned long long)env, (unsigned long long)lsteps, (unsigned long long)rinfo.inserted,
        (unsigned long long)acked, per_shard, dir);
    fflush(stdout);
    free(kids);
    free(replay_list);
    free(shard_info);
    free(fs.actors);
    free(fs.learners);
    pthread_mutex_destroy(&fs.mu);
    return exit_code;
}
