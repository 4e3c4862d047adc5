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
#include "fleet/launch.h"
#include "fleet/proc.h"
#include "fleet/verbs.h"
#include "paramserver/client.h"
#include "replay/client.h"
#include "replay/sharded.h"

#define RETURN_WINDOW 100
/* The parameter servers' staleness histogram (fl_param_info_t.staleness_hist). */
#define STALENESS_BUCKETS 8
static const char *const staleness_names[STALENESS_BUCKETS] = {"0", "1", "2", "3-4", "5-8", "9-16", "17-32", "33+"};

/* What the roles report, aggregated under a lock by the Control handler. */
typedef struct role_state {
    int seen;
    uint64_t env_steps, episodes, acked, version, learner_steps, samples;
    double loss, wait_fraction, epsilon;
    uint64_t last_env, last_steps, last_samples; /* at the previous progress line */
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

void fl_launch_print_plan(const fl_config_t *cfg, const char *cfg_file, const fl_env_def_t *env) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", cfg->run_out_dir, cfg->run_name);
    print_plan(cfg, cfg_file, dir, env);
}

/* ------------------------------------------------------------ the launch ---- */

struct fl_launch {
    fl_config_t cfg;
    char cfg_file[256];
    char dir[600], cfg_path[700], csv_path[700], roles_path[700], summary_path[700];
    fleet_state_t fs;
    fl_rpc_server_t *control;
    char control_addr[300];
    double t_start;
};

const fl_config_t *fl_launch_config(const fl_launch_t *L) { return &L->cfg; }
const char *fl_launch_config_path(const fl_launch_t *L) { return L->cfg_path; }
const char *fl_launch_control_addr(const fl_launch_t *L) { return L->control_addr; }
const char *fl_launch_dir(const fl_launch_t *L) { return L->dir; }

void fl_launch_destroy(fl_launch_t *L) {
    if (!L) return;
    fl_rpc_server_destroy(L->control);
    free(L->fs.actors);
    free(L->fs.learners);
    pthread_mutex_destroy(&L->fs.mu);
    free(L);
}

int fl_launch_create(const fl_config_t *cfg, const char *cfg_file, const char *control_host, fl_launch_t **out) {
    *out = NULL;
    /* The env every role will open (plugin, wrappers): checked here so that a mistake
     * stops the run before any process starts. */
    fl_wrapped_env_t *wenv = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_env_from_config(cfg, &wenv, &err) != FL_OK) {
        fprintf(stderr, "fleet run: %s\n", err.msg);
        return 2;
    }
    fl_launch_t *L = calloc(1, sizeof *L);
    if (!L) {
        fl_wrapped_env_destroy(wenv);
        fprintf(stderr, "fleet run: out of memory\n");
        return 1;
    }
    L->cfg = *cfg;
    snprintf(L->cfg_file, sizeof L->cfg_file, "%s", cfg_file);
    pthread_mutex_init(&L->fs.mu, NULL);
    snprintf(L->dir, sizeof L->dir, "%s/%s", cfg->run_out_dir, cfg->run_name);
    print_plan(cfg, cfg_file, L->dir, fl_wrapped_env_info(wenv));
    fl_wrapped_env_destroy(wenv);
    L->fs.n_actors = (int)cfg->actor_count;
    L->fs.n_learners = (int)cfg->learner_count;
    L->fs.actors = calloc((size_t)L->fs.n_actors, sizeof *L->fs.actors);
    L->fs.learners = calloc((size_t)L->fs.n_learners, sizeof *L->fs.learners);
    if (!L->fs.actors || !L->fs.learners) {
        fprintf(stderr, "fleet run: out of memory\n");
        fl_launch_destroy(L);
        return 1;
    }
    if (fl_proc_mkdir_p(L->dir) != 0) {
        fprintf(stderr, "fleet run: cannot create the run folder '%s': %s\n", L->dir, strerror(errno));
        fl_launch_destroy(L);
        return 1;
    }
    snprintf(L->cfg_path, sizeof L->cfg_path, "%s/config.ini", L->dir);
    snprintf(L->csv_path, sizeof L->csv_path, "%s/metrics.csv", L->dir);
    snprintf(L->roles_path, sizeof L->roles_path, "%s/roles.csv", L->dir);
    snprintf(L->summary_path, sizeof L->summary_path, "%s/summary.txt", L->dir);
    if (fl_config_write_file(cfg, L->cfg_path, &err) != FL_OK) {
        fprintf(stderr, "fleet run: %s\n", err.msg);
        fl_launch_destroy(L);
        return 1;
    }
    /* Control service for the roles' reports. */
    int port = 0;
    char bind[300];
    snprintf(bind, sizeof bind, "%s:0", control_host);
    fl_rpc_server_opts_t so = {.threads = 2, .prepost = 16};
    if (fl_rpc_server_create(&so, &L->control, &err) != FL_OK ||
        fl_rpc_server_add_unary(L->control, "/fleet.Control/Report", on_report, &L->fs) != FL_OK ||
        fl_rpc_server_bind(L->control, bind, &port, &err) != FL_OK || fl_rpc_server_start(L->control, &err) != FL_OK) {
        fprintf(stderr, "fleet run: cannot start the control service on %s: %s\n", bind, err.msg);
        fl_launch_destroy(L);
        return 1;
    }
    snprintf(L->control_addr, sizeof L->control_addr, "%s:%d", control_host, port);
    L->t_start = fl_clock_sec();
    *out = L;
    return 0;
}

/* Sums the parameter servers' Info (versions: the minimum over shards). */
static void param_info_all(fl_param_client_t *ps, fl_param_info_t *sum) {
    if (!ps) return;
    int P = fl_param_num_shards(ps);
    fl_param_info_t acc;
    memset(&acc, 0, sizeof acc);
    for (int s = 0; s < P; s++) {
        fl_param_info_t in;
        if (fl_param_info_shard(ps, s, 1000, &in, NULL) != FL_OK) return; /* keep the last complete figures */
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
    *sum = acc;
}

int fl_launch_monitor(fl_launch_t *L, const char *replay_list, const char *ps_list, const fl_launch_ops_t *ops,
                      void *ctx, int exit_code, const char *reason_in) {
    const fl_config_t *cfg = &L->cfg;
    fleet_state_t *fs = &L->fs;
    char reason[512];
    snprintf(reason, sizeof reason, "%s", reason_in ? reason_in : "");
    const int R = (int)cfg->replay_shards;
    int gorila = strcmp(cfg->learner_mode, "gorila") == 0;
    fl_replay_sharded_t *rc_client = NULL;
    fl_replay_info_t *shard_info = calloc((size_t)R, sizeof *shard_info);
    fl_param_client_t *ps_client = NULL;
    FILE *csv = NULL, *roles = NULL;
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
        fl_param_client_create(ps_list, &ps_client, NULL);
        csv = fopen(L->csv_path, "w");
        if (csv) {
            fprintf(csv, "time_s,env_steps,env_steps_per_s,episodes,mean_return_100,replay_size,replay_inserted,"
                         "replay_inserts_per_s,learner_steps,learner_steps_per_s,samples_per_s,loss,wait_fraction,"
                         "param_version,version_lag,pushes_applied,pushes_dropped");
            for (int b = 0; b < STALENESS_BUCKETS; b++)
                fprintf(csv, ",staleness_%s", staleness_names[b]);
            fprintf(csv, "\n");
            fflush(csv);
        }
        roles = fopen(L->roles_path, "w");
        if (roles) {
            fprintf(roles, "time_s,role,index,env_steps,env_steps_per_s,param_version,version_lag,learner_steps,"
                           "learner_steps_per_s,samples_per_s,loss\n");
            fflush(roles);
        }
        double next = fl_clock_sec() + cfg->run_progress_every;
        while (!exit_code) {
            if (fl_stop_requested()) {
                snprintf(reason, sizeof reason, "interrupted (signal %d)", fl_stop_signal());
                break;
            }
            if (ops->dead(ctx, reason, sizeof reason)) {
                FL_ERROR("%s: stopping the fleet", reason);
                exit_code = 1;
                break;
            }
            double now = fl_clock_sec();
            if (now < next) {
                fl_sleep_sec(fmin(0.05, next - now));
                continue;
            }
            next += cfg->run_progress_every;
            if (next < now) next = now + cfg->run_progress_every;
            if (rc_client) fl_replay_sharded_info(rc_client, 1000, &rinfo, shard_info, NULL);
            param_info_all(ps_client, &pinfo);
            double dt = now - last_t, el = now - L->t_start;
            pthread_mutex_lock(&fs->mu);
            uint64_t env = 0, min_version = UINT64_MAX;
            for (int a = 0; a < fs->n_actors; a++) {
                role_state_t *A = &fs->actors[a];
                env += A->env_steps;
                if (A->version < min_version) min_version = A->version;
                if (roles && A->seen) {
                    uint64_t alag = pinfo.version > A->version ? pinfo.version - A->version : 0;
                    fprintf(roles, "%.3f,actor,%d,%llu,%.1f,%llu,%llu,,,,\n", el, a, (unsigned long long)A->env_steps,
                            (double)(A->env_steps - A->last_env) / dt, (unsigned long long)A->version,
                            (unsigned long long)alag);
                }
                A->last_env = A->env_steps;
            }
            /* Learners: apex learners step together (learner 0's count); gorila learners
             * each push their own gradients (the sum). Samples add up either way. */
            uint64_t lsteps = 0, lsamples = 0;
            double loss = 0, wait = 0;
            int seen = 0;
            for (int i = 0; i < fs->n_learners; i++) {
                role_state_t *Ln = &fs->learners[i];
                if (!Ln->seen) continue;
                seen++;
                lsteps = gorila ? lsteps + Ln->learner_steps : (i == 0 ? Ln->learner_steps : lsteps);
                lsamples += Ln->samples;
                loss += Ln->loss;
                wait += Ln->wait_fraction;
                if (roles)
                    fprintf(roles, "%.3f,learner,%d,,,%llu,,%llu,%.2f,%.1f,%.6g\n", el, i,
                            (unsigned long long)Ln->version, (unsigned long long)Ln->learner_steps,
                            (double)(Ln->learner_steps - Ln->last_steps) / dt,
                            (double)(Ln->samples - Ln->last_samples) / dt, Ln->loss);
                Ln->last_steps = Ln->learner_steps;
                Ln->last_samples = Ln->samples;
            }
            if (seen) {
                loss /= seen;
                wait /= seen;
            }
            mret = mean_return(fs, &ep_count);
            uint64_t episodes = fs->n_returns;
            pthread_mutex_unlock(&fs->mu);
            if (roles) fflush(roles);
            double env_rate = (double)(env - last_env) / dt;
            double ins_rate = (double)(rinfo.inserted - last_inserted) / dt;
            double upd_rate = (double)(lsteps - last_learner) / dt;
            double smp_rate = (double)(lsamples - last_samples) / dt;
            uint64_t lag = (min_version == UINT64_MAX || pinfo.version < min_version) ? 0 : pinfo.version - min_version;
            printf("[%6.1fs] env %7.0f steps/s | replay %8llu (+%6.0f/s) | learner %6.1f upd/s %8.0f smp/s loss %8.4f "
                   "| return %7.1f (%llu ep) | version %llu lag %llu",
                   el, env_rate, (unsigned long long)rinfo.size, ins_rate, upd_rate, smp_rate, loss, mret,
                   (unsigned long long)episodes, (unsigned long long)pinfo.version, (unsigned long long)lag);
            if (gorila)
                printf(" | pushes %llu applied %llu dropped", (unsigned long long)pinfo.pushes_applied,
                       (unsigned long long)pinfo.pushes_dropped);
            printf("\n");
            fflush(stdout);
            if (csv) {
                fprintf(csv, "%.3f,%llu,%.1f,%llu,%.3f,%llu,%llu,%.1f,%llu,%.2f,%.1f,%.6g,%.4f,%llu,%llu,%llu,%llu", el,
                        (unsigned long long)env, env_rate, (unsigned long long)episodes, mret,
                        (unsigned long long)rinfo.size, (unsigned long long)rinfo.inserted, ins_rate,
                        (unsigned long long)lsteps, upd_rate, smp_rate, loss, wait, (unsigned long long)pinfo.version,
                        (unsigned long long)lag, (unsigned long long)pinfo.pushes_applied,
                        (unsigned long long)pinfo.pushes_dropped);
                for (int b = 0; b < STALENESS_BUCKETS; b++)
                    fprintf(csv, ",%llu", (unsigned long long)pinfo.staleness_hist[b]);
                fprintf(csv, "\n");
                fflush(csv);
            }
            last_t = now;
            last_env = env;
            last_inserted = rinfo.inserted;
            last_learner = lsteps;
            last_samples = lsamples;
            if (cfg->run_stop_at_target && ep_count >= RETURN_WINDOW && mret >= cfg->run_target_return) {
                snprintf(reason, sizeof reason, "target reached: mean return %.1f >= %g over the last %d episodes",
                         mret, cfg->run_target_return, RETURN_WINDOW);
                break;
            }
            if (cfg->run_max_seconds > 0 && el >= cfg->run_max_seconds) {
                snprintf(reason, sizeof reason, "time limit: %.0f s", cfg->run_max_seconds);
                break;
            }
        }
    }
    double elapsed = fl_clock_sec() - L->t_start;

    /* Ordered stop: actors first, while the learners still sample (with a rate limit, an
     * actor's last inserts may wait for the learners' samples), then learners, then the
     * services. Each kind is asked through Control, then by the launcher's own means. */
    pthread_mutex_lock(&fs->mu);
    fs->stop_actors = 1;
    pthread_mutex_unlock(&fs->mu);
    ops->stop(ctx, "actor", 15);
    pthread_mutex_lock(&fs->mu);
    fs->stop_learners = 1;
    pthread_mutex_unlock(&fs->mu);
    ops->stop(ctx, "learner", 15);
    pthread_mutex_lock(&fs->mu);
    fs->stop_services = 1;
    pthread_mutex_unlock(&fs->mu);
    if (rc_client) fl_replay_sharded_info(rc_client, 2000, &rinfo, shard_info, NULL);
    param_info_all(ps_client, &pinfo);
    ops->stop(ctx, "replay paramserver", 10);
    fl_replay_sharded_destroy(rc_client);
    fl_param_client_destroy(ps_client);
    if (csv) fclose(csv);
    if (roles) fclose(roles);

    /* A role that ended with an error while stopping is a failure too. */
    char why[512];
    if (ops->unclean(ctx, why, sizeof why) && exit_code == 0) {
        FL_ERROR("%s", why);
        exit_code = 1;
        if (!reason[0]) snprintf(reason, sizeof reason, "%s", why);
    }
    uint64_t acked = 0, env = 0, lsteps = 0;
    pthread_mutex_lock(&fs->mu);
    for (int a = 0; a < fs->n_actors; a++) {
        acked += fs->actors[a].acked;
        env += fs->actors[a].env_steps;
    }
    for (int i = 0; i < fs->n_learners; i++)
        lsteps = gorila ? lsteps + fs->learners[i].learner_steps : (i == 0 ? fs->learners[i].learner_steps : lsteps);
    mret = mean_return(fs, &ep_count);
    uint64_t episodes = fs->n_returns;
    double best = fs->best_return;
    pthread_mutex_unlock(&fs->mu);

    FILE *sf = fopen(L->summary_path, "w");
    if (sf) {
        fprintf(sf, "reason=%s\nexit_code=%d\nelapsed_s=%.3f\nepisodes=%llu\nmean_return_100=%.3f\nbest_return=%.3f\n"
                    "env_steps=%llu\nlearner_steps=%llu\nreplay_inserted=%llu\nreplay_size=%llu\nactors_acked=%llu\n"
                    "param_version=%llu\nlearner_mode=%s\nlearners=%d\nparamserver_shards=%lld\n"
                    "pushes_applied=%llu\npushes_dropped=%llu\npush_waits=%llu\npush_wait_timeouts=%llu\npush_bytes=%llu\n"
                    "staleness_hist=",
                reason, exit_code, elapsed, (unsigned long long)episodes, mret, best, (unsigned long long)env,
                (unsigned long long)lsteps, (unsigned long long)rinfo.inserted, (unsigned long long)rinfo.size,
                (unsigned long long)acked, (unsigned long long)pinfo.version, cfg->learner_mode, fs->n_learners,
                (long long)cfg->paramserver_shards, (unsigned long long)pinfo.pushes_applied,
                (unsigned long long)pinfo.pushes_dropped, (unsigned long long)pinfo.waits,
                (unsigned long long)pinfo.wait_timeouts, (unsigned long long)pinfo.push_bytes);
        for (int b = 0; b < STALENESS_BUCKETS; b++)
            fprintf(sf, "%s%s:%llu", b ? "," : "", staleness_names[b],
                    (unsigned long long)pinfo.staleness_hist[b]);
        fprintf(sf, "\n");
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
        ops->pids(ctx, sf);
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
        (unsigned long long)acked, per_shard, L->dir);
    fflush(stdout);
    free(shard_info);
    return exit_code;
}

/* ------------------------------------------------------ on one machine ---- */

typedef struct local {
    fl_child_t *kids;
    int n;
} local_t;

static int local_dead(void *ctx, char *reason, size_t len) {
    local_t *lc = ctx;
    fl_child_t *dead = fl_proc_reap(lc->kids, lc->n);
    if (!dead) return 0;
    char st[128];
    fl_proc_describe_status(dead->status, st, sizeof st);
    snprintf(reason, len, "%s %d (pid %d) %s", dead->role, dead->index, (int)dead->pid, st);
    return 1;
}

static void local_stop(void *ctx, const char *roles, double grace_s) {
    local_t *lc = ctx;
    fl_proc_stop_roles(lc->kids, lc->n, roles, grace_s);
}

static int local_unclean(void *ctx, char *reason, size_t len) {
    local_t *lc = ctx;
    for (int i = 0; i < lc->n; i++) {
        if (!lc->kids[i].pid || fl_proc_clean_exit(lc->kids[i].status)) continue;
        char d[128];
        fl_proc_describe_status(lc->kids[i].status, d, sizeof d);
        snprintf(reason, len, "%s %d (pid %d) %s", lc->kids[i].role, lc->kids[i].index, (int)lc->kids[i].pid, d);
        return 1;
    }
    return 0;
}

static void local_pids(void *ctx, FILE *f) {
    local_t *lc = ctx;
    int first = 1;
    for (int i = 0; i < lc->n; i++)
        if (lc->kids[i].pid) {
            fprintf(f, "%s%d", first ? "" : ",", (int)lc->kids[i].pid);
            first = 0;
        }
}

/* The comma-separated list of kids[from .. from+n)'s addresses (malloc'd), or NULL. */
static char *address_list(const fl_child_t *kids, int from, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(kids[from + i].addr) + 1;
    char *list = calloc(len, 1);
    if (!list) return NULL;
    for (int i = 0; i < n; i++) {
        if (i) strcat(list, ",");
        strcat(list, kids[from + i].addr);
    }
    return list;
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

static int run_local(fl_launch_t *L) {
    const fl_config_t *cfg = &L->cfg;
    const int R = (int)cfg->replay_shards, P = (int)cfg->paramserver_shards;
    const int NL = (int)cfg->learner_count, NS = R + P;
    int nkids = NS + NL + (int)cfg->actor_count;
    fl_child_t *kids = calloc((size_t)nkids, sizeof *kids);
    int *ready = malloc((size_t)NS * sizeof *ready);
    if (!kids || !ready) {
        fprintf(stderr, "fleet run: out of memory for %d children\n", nkids);
        free(ready);
        free(kids);
        return 1;
    }
    int exit_code = 0;
    char reason[512] = "";
    /* Services first: replay shards 0 .. R-1, then parameter-server shards 0 .. P-1; all
     * start at once (each argv is copied by fork), then their addresses are read in order. */
    char idx[32];
    char *svc_args[] = {"--config", (char *)L->cfg_path, "--shard", idx, "--control", (char *)L->control_addr, NULL};
    int failed_start = 0, failed_at = 0;
    for (int r = 0; r < NS; r++) ready[r] = -1;
    for (int r = 0; r < NS && !failed_start; r++) {
        snprintf(idx, sizeof idx, "%d", r < R ? r : r - R);
        if (fl_proc_spawn_start(&kids[r], r < R ? "replay" : "paramserver", r < R ? r : r - R, svc_args, 1,
                                &ready[r]) != 0) {
            failed_start = 1;
            failed_at = r;
        }
    }
    double ready_until = fl_clock_sec() + 60;
    for (int r = 0; r < NS; r++) {
        if (ready[r] < 0) continue;
        if (!failed_start) {
            double left = ready_until - fl_clock_sec();
            if (fl_proc_spawn_wait(&kids[r], ready[r], left > 0 ? left : 0) != 0) {
                failed_start = 1;
                failed_at = r;
            }
        } else {
            close(ready[r]);
        }
    }
    free(ready);
    if (failed_start) {
        fl_child_t *c = &kids[failed_at];
        /* A role that closed its ready pipe without an address is usually exiting: give
         * it a moment so that its exit status, not a guess, is reported. */
        for (int w = 0; w < 100; w++) {
            fl_proc_reap(kids, nkids);
            int any_dead = 0;
            for (int i = 0; i < nkids; i++) any_dead |= kids[i].pid && !kids[i].running;
            if (any_dead) break;
            fl_sleep_sec(0.02);
        }
        char st[128] = "did not report its address";
        for (int i = 0; i < nkids; i++)
            if (kids[i].pid && !kids[i].running) {
                c = &kids[i];
                fl_proc_describe_status(c->status, st, sizeof st);
            }
        if (fl_stop_requested())
            snprintf(reason, sizeof reason, "interrupted while starting");
        else
            snprintf(reason, sizeof reason, "%s %d (pid %d) %s while starting", c->role, c->index, (int)c->pid, st);
        exit_code = fl_stop_requested() ? 130 : 1;
    }
    char *replay_list = address_list(kids, 0, R), *ps_list = address_list(kids, R, P);
    char replay_arg[256] = "", ps_arg[256] = "", path[800];
    if (!exit_code && (!replay_list || !ps_list)) {
        snprintf(reason, sizeof reason, "out of memory for the service addresses");
        exit_code = 1;
    }
    if (!exit_code) {
        snprintf(path, sizeof path, "%s/replay_addrs.txt", L->dir);
        if (fl_launch_address_arg(replay_list, path, replay_arg, sizeof replay_arg) != 0) {
            snprintf(reason, sizeof reason, "cannot pass the replay addresses in %.200s", path);
            exit_code = 1;
        }
        if (strlen(ps_list) >= sizeof ps_arg) {
            snprintf(reason, sizeof reason, "the %d parameter-server addresses do not fit in one option", P);
            exit_code = 1;
        } else {
            snprintf(ps_arg, sizeof ps_arg, "%s", ps_list);
        }
    }
    if (!exit_code) {
        if (R == 1)
            printf("  services     replay %s, paramserver %s, control %s\n", replay_arg, ps_arg, L->control_addr);
        else if (replay_arg[0] != '@')
            printf("  services     replay shards %s, paramserver %s, control %s\n", replay_arg, ps_arg,
                   L->control_addr);
        else
            printf("  services     replay %d shards (addresses in %s), paramserver %s, control %s\n", R,
                   replay_arg + 1, ps_arg, L->control_addr);
        fflush(stdout);
        /* Learners, then actors: `fleet ROLE --index i` with the services' addresses. */
        int k = NS;
        for (int i = 0; i < NL + cfg->actor_count; i++) {
            int learner = i < NL, index = learner ? i : i - NL;
            char iarg[32];
            snprintf(iarg, sizeof iarg, "%d", index);
            char *args[] = {"--config",      (char *)L->cfg_path, "--index",   iarg,
                            "--replay",      replay_arg,          "--paramserver", ps_arg,
                            "--control",     (char *)L->control_addr, NULL};
            fl_proc_spawn(&kids[k++], learner ? "learner" : "actor", index, args, 0, 0);
        }
    }
    local_t lc = {kids, nkids};
    static const fl_launch_ops_t ops = {local_dead, local_stop, local_unclean, local_pids};
    exit_code = fl_launch_monitor(L, replay_list ? replay_list : "", ps_list ? ps_list : "", &ops, &lc, exit_code,
                                  reason);
    free(replay_list);
    free(ps_list);
    free(kids);
    return exit_code;
}

int fl_verb_run(int argc, char **argv) {
    fl_config_t cfg;
    fl_config_defaults(&cfg);
    char cfg_file[256], hostfile[256] = "", role[256] = "";
    int dry_run = 0, print_mpirun = 0;
    fl_opt_t opts[] = {{"--dry-run", FL_OPT_FLAG, &dry_run},
                       {"--print-mpirun", FL_OPT_FLAG, &print_mpirun},
                       {"--hostfile", FL_OPT_STRING, hostfile},
                       {"--role", FL_OPT_STRING, role}};
    int rc = fl_cli_parse("run", argc, argv, &cfg, opts, (int)(sizeof opts / sizeof opts[0]), cfg_file,
                          sizeof cfg_file);
    if (rc) return rc;
    fl_cli_setup_logging(&cfg, "run", -1);
    if (print_mpirun) {
        fl_mpi_print_command(&cfg, cfg_file, hostfile, stdout);
        return 0;
    }
    if (fl_mpi_launched() && !dry_run) {
#ifdef FLEET_HAVE_MPI
        return fl_mpi_run(&cfg, cfg_file, role);
#else
        fprintf(stderr, "fleet run: started by mpirun, but this fleet was built without MPI (install "
                        "libopenmpi-dev and rebuild)\n");
        return 2;
#endif
    }
    if (role[0]) {
        fprintf(stderr, "fleet run: --role names a rank's role in an MPMD mpirun job (see docs/multi-host.md); "
                        "this process was not started by mpirun\n");
        return 2;
    }
    if (strcmp(cfg.learner_mode, "apex") == 0 && cfg.learner_count > 1) {
        fprintf(stderr,
                "fleet run: learner.count = %lld in apex mode averages gradients over MPI: start the fleet under "
                "mpirun; `fleet run%s%s --print-mpirun` prints the command\n",
                (long long)cfg.learner_count, cfg_file[0] ? " " : "", cfg_file);
        return 2;
    }
    if (dry_run) {
        fl_wrapped_env_t *wenv = NULL;
        fl_err_t err;
        fl_err_init(&err);
        if (fl_env_from_config(&cfg, &wenv, &err) != FL_OK) {
            fprintf(stderr, "fleet run: %s\n", err.msg);
            return 2;
        }
        fl_launch_print_plan(&cfg, cfg_file, fl_wrapped_env_info(wenv));
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
    rc = fl_launch_create(&cfg, cfg_file, cfg.run_bind_host, &L);
    if (rc) return rc;
    rc = run_local(L);
    fl_launch_destroy(L);
    return rc;
}
