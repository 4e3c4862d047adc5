/* monitor: a fleet's watch, shared by the launcher on one machine (launcher/local.c) and
 * under mpirun (launcher/mpi.c): the progress loop with its metrics files (metrics.csv,
 * roles.csv, evals.csv, TensorBoard), the services' Info, joins and losses, the ordered
 * stop and summary.txt (fl_launch_monitor).
 *
 * Ownership: fl_launch_monitor owns the clients and files it opens and closes them before
 * it returns. Failure: a metrics or summary file that cannot be opened is skipped (the run
 * goes on), and a service whose Info fails keeps its last figures.
 * Threads: the owner thread; Control's handler shares the report tables with it under
 * fleet_state_t.mu. */
#include "launcher/launch.h"
#include "launcher/launch_internal.h"
#include "launcher/options.h"

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
#include "kernels/qnet.h"
#include "fleet.pb-c.h"
#include "launcher/curve.h"
#include "launcher/fleet_state.h"
#include "launcher/hparams.h"
#include "launcher/proc.h"
#include "launcher/progress.h"
#include "paramserver/client.h"
#include "replay/table.h"
#include "learner/learner.h"
#include "replay/client.h"
#include "replay/server.h"
#include "replay/sharded.h"

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
        for (int b = 0; b < FL_PARAM_STALENESS_BUCKETS; b++) acc.staleness_hist[b] += in.staleness_hist[b];
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

/* A counter's rate over dt seconds; 0 when it went back (a role restarted from a
 * checkpoint counts from there again). */
static double per_s(uint64_t now, uint64_t before, double dt) {
    return now >= before ? (double)(now - before) / dt : 0.0;
}

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
 * x axis itself, the evaluation columns, which go as eval/ at their own steps, and
 * Gorila's pushes and staleness in an apex run, where they are always 0). */
typedef struct metric {
    const char *column, *tag;
    int decimals; /* -1: an integer */
    double value;
    int empty; /* no value (an empty field) */
} metric_t;

#define N_METRICS (27 + FL_PARAM_STALENESS_BUCKETS) /* the table of period_metrics, checked there */
/* Seconds between redrawings of curve.png while the run goes (and after an evaluation). */
#define CURVE_EVERY_S 10.0

/* This period's metrics.csv row, in column order (f: the figures; rates per second). */
static int period_metrics(const monitor_t *M, double el, const figures_t *f, const double rate[5], uint64_t lag,
                          metric_t out[N_METRICS]) {
    static char stale_col[FL_PARAM_STALENESS_BUCKETS][32], stale_tag[FL_PARAM_STALENESS_BUCKETS][40];
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
        {"pushes_applied", M->gorila ? "params/pushes_applied" : "", -1, (double)pi->pushes_applied, 0},
        {"pushes_dropped", M->gorila ? "params/pushes_dropped" : "", -1, (double)pi->pushes_dropped, 0},
    };
    /* the fixed columns, the staleness buckets and the 5 columns below */
    _Static_assert(sizeof m / sizeof m[0] + FL_PARAM_STALENESS_BUCKETS + 8 == N_METRICS,
                   "N_METRICS: the columns' count");
    int n = 0;
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) out[n++] = m[i];
    for (int b = 0; b < FL_PARAM_STALENESS_BUCKETS; b++) {
        snprintf(stale_col[b], sizeof stale_col[b], "staleness_%s", fl_param_staleness_names[b]);
        snprintf(stale_tag[b], sizeof stale_tag[b], "params/staleness_%s", fl_param_staleness_names[b]);
        out[n++] = (metric_t){stale_col[b], M->gorila ? stale_tag[b] : "", -1, (double)pi->staleness_hist[b], 0};
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
} eval_tags[] = {
    {FL_EVAL_RESULT_return_mean, "eval/return_mean"},       {FL_EVAL_RESULT_return_std, "eval/return_std"},
    {FL_EVAL_RESULT_return_ci95, "eval/return_ci95"},       {FL_EVAL_RESULT_return_min, "eval/return_min"},
    {FL_EVAL_RESULT_return_max, "eval/return_max"},         {FL_EVAL_RESULT_length_mean, "eval/length_mean"},
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
    M->roles = open_csv(M->L->roles_path,
                        "time_s,role,index,env_steps,env_steps_per_s,param_version,version_lag,"
                        "learner_steps,learner_steps_per_s,samples_per_s,loss,epsilon,episodes,"
                        "return_mean,rss_mb,private_mb,transitions_acked,cpu_s",
                        append);
    M->evals = open_csv(M->L->evals_path,
                        "time_s,env_steps,learner_steps,param_version,episodes,epsilon,return_mean,"
                        "return_std,return_min,return_max,return_ci95,length_mean,length_min,"
                        "length_max,evaluator,seconds,truncated,frames",
                        append);
    M->returns = open_csv(M->L->returns_path, "time_s,env_steps,actor,epsilon,episodes,return_mean", append);
    if (M->L->cfg.run_deterministic)
        M->rounds = open_csv(M->L->rounds_path,
                             "round,env_steps,learner_steps,updates,replay_size,loss,episodes,"
                             "return_mean,length_mean",
                             append);
    fl_err_t err;
    fl_err_init(&err);
    if (fl_tfevents_open(M->L->dir, &M->tb, &err) != FL_OK) FL_WARN("no TensorBoard events for this run: %s", err.msg);
    /* the effective config (TEXT), at the step the run starts from; the hyperparameters
     * (HPARAMS) once, from the first sitting: TensorBoard reads a run's first record */
    if (M->tb && fl_hparams_write(M->tb, &M->L->cfg, append ? (int64_t)M->L->prev.env_steps : 0, fl_clock_wall(),
                                  !append, &err) != FL_OK)
        FL_WARN("TensorBoard: no configuration summary: %s", err.msg);
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
    fprintf(M->roles, "%.3f,%s,%d,,,,,,,,,,,", el, fl__monitor_kind_names[k], index);
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
        proc_row(M, el, KIND_PARAMSERVER, s, M->ps_info[s].rss_bytes, M->ps_info[s].private_bytes, M->ps_info[s].cpu_s,
                 f);
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
            fprintf(M->roles, "%.3f,learner,%d,,,%llu,,%llu,%.2f,%.1f,%.6g,,,", el, i, (unsigned long long)Ln->version,
                    (unsigned long long)Ln->learner_steps, per_s(Ln->learner_steps, Ln->last_steps, dt),
                    per_s(Ln->samples, Ln->last_samples, dt), Ln->loss);
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
            fprintf(
                M->evals, "%.3f,%.0f,%.0f,%llu,%.0f,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.0f,%.0f,%d,%.3f,%.0f,%.0f\n",
                got[i].received_s, v[FL_EVAL_RESULT_at_env_steps], v[FL_EVAL_RESULT_at_learner_steps],
                (unsigned long long)got[i].version, v[FL_EVAL_RESULT_episodes], v[FL_EVAL_RESULT_epsilon],
                v[FL_EVAL_RESULT_return_mean], v[FL_EVAL_RESULT_return_std], v[FL_EVAL_RESULT_return_min],
                v[FL_EVAL_RESULT_return_max], v[FL_EVAL_RESULT_return_ci95], v[FL_EVAL_RESULT_length_mean],
                v[FL_EVAL_RESULT_length_min], v[FL_EVAL_RESULT_length_max], got[i].evaluator, v[FL_EVAL_RESULT_seconds],
                v[FL_EVAL_RESULT_truncated], v[FL_EVAL_RESULT_at_env_steps] * M->L->frame_skip);
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

/* The progress line on stdout (launcher/progress.h). */
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
    p.env_steps = f->env;
    p.learner_steps = f->lsteps;
    p.env_rate = env_rate;
    p.frames = M->L->frame_skip > 1 ? f->env * (uint64_t)M->L->frame_skip : 0;
    p.warmup_need = (uint64_t)c->replay_min_size_to_sample;
    p.upd_rate = upd_rate;
    if (!M->lsteps_first_set) M->lsteps_first = f->lsteps, M->lsteps_first_set = 1;
    M->upd_seen |= f->lsteps != M->lsteps_first;
    p.have_upd = M->upd_seen;
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
    fl__launch_pack_supervision(L, t.supervision);
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
        snprintf(M->reason, sizeof M->reason, "env-step budget: %llu of %lld env steps", (unsigned long long)f.env,
                 (long long)cfg->run_max_env_steps);
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

/* The hparams plugin's end of the session: success when the run ended normally so far
 * (exit 0), failure otherwise; nothing when a signal stopped a run that can be resumed,
 * so that the sitting that ends it says how it ended. */
static void end_session(monitor_t *M) {
    const fl_config_t *c = &M->L->cfg;
    if (!M->tb || (fl_stop_signal() && c->run_checkpoints && !c->run_deterministic)) return;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_tfevents_session_end(M->tb, fl_clock_wall(), M->exit_code == 0, &err) != FL_OK)
        FL_WARN("TensorBoard events: %s", err.msg);
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
    end_session(M);
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
    if (L->resuming) {       /* the first rates count from where the run stopped */
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
    fl__monitor_final_totals(&M, &t);
    if (!M.exit_code || M.last_env) save_figures(&M, NULL);
    fl__monitor_write_summary(&M, elapsed, &t);
    fl__monitor_print_outcome(&M, elapsed, &t);
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
