/* summary: the end of a run's watch: the fleet's totals, summary.txt (its keys are listed
 * in docs/design.md, "The run folder") and the last line printed. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/procmem.h"
#include "common/stop.h"
#include "launcher/launch_internal.h"
#include "launcher/proc.h"

void fl__monitor_final_totals(monitor_t *M, totals_t *t) {
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

void fl__monitor_write_summary(const monitor_t *M, double elapsed, const totals_t *t) {
    const fl_config_t *cfg = &M->L->cfg;
    const fl_param_info_t *pi = &M->pinfo;
    FILE *sf = fopen(M->L->summary_path, "w");
    if (!sf) return;
    /* replay_final=0: a shard did not answer the last Info round (it stopped on its own
     * signal, as under scancel): the replay figures are its last answer's */
    fprintf(sf, "replay_final=%d\n", M->replay_final);
    fprintf(
        sf,
        "reason=%s\nexit_code=%d\nelapsed_s=%.3f\nepisodes=%llu\nmean_return_100=%.3f\nbest_return=%.3f\n"
        "env_steps=%llu\nframes=%llu\nlearner_steps=%llu\nreplay_inserted=%llu\nreplay_size=%llu\nactors_acked=%llu\n"
        "param_version=%llu\nlearner_mode=%s\nlearners=%d\nparamserver_shards=%lld\n",
        M->reason, M->exit_code, elapsed, (unsigned long long)t->episodes, t->mret, t->best, (unsigned long long)t->env,
        (unsigned long long)t->env * (unsigned long long)M->L->frame_skip, (unsigned long long)t->lsteps,
        (unsigned long long)M->rinfo.inserted, (unsigned long long)M->rinfo.size, (unsigned long long)t->acked,
        (unsigned long long)pi->version, FL_CONFIG_ENUM_STR(cfg, learner, mode), M->L->fs.n_learners,
        (long long)cfg->paramserver_shards);
    if (M->gorila) { /* the learners' pushes to the parameter servers: Gorila's alone */
        fprintf(sf,
                "pushes_applied=%llu\npushes_dropped=%llu\npush_waits=%llu\npush_wait_timeouts=%llu\n"
                "push_bytes=%llu\nstaleness_hist=",
                (unsigned long long)pi->pushes_applied, (unsigned long long)pi->pushes_dropped,
                (unsigned long long)pi->waits, (unsigned long long)pi->wait_timeouts,
                (unsigned long long)pi->push_bytes);
        for (int b = 0; b < FL_PARAM_STALENESS_BUCKETS; b++)
            fprintf(sf, "%s%s:%llu", b ? "," : "", fl_param_staleness_names[b],
                    (unsigned long long)pi->staleness_hist[b]);
        fprintf(sf, "\n");
    }
    write_per_shard(M, sf);
    write_eval_summary(M, sf);
    fprintf(sf, "actors_pending=%llu\nactors_dropped=%llu\nactors_lost_unacked=%llu\nrestarts=%llu\n",
            (unsigned long long)t->pending, (unsigned long long)t->dropped, (unsigned long long)t->lost,
            (unsigned long long)M->L->restarts);
    for (int r = 0; r < FL_LAUNCH_ROLES; r++)
        fprintf(sf, "restarts_%s=%llu\n", fl__launch_role_names[r], (unsigned long long)M->L->role_restarts[r]);
    /* Deaths by a fault signal (launcher/launch.h: fl_launch_note_death) and hangs found. */
    fprintf(sf, "crashes=%llu\n", (unsigned long long)M->L->crashes);
    for (int r = 0; r < FL_LAUNCH_ROLES; r++)
        fprintf(sf, "crashes_%s=%llu\n", fl__launch_role_names[r], (unsigned long long)M->L->role_crashes[r]);
    fprintf(sf, "last_crash=%s\nhangs=%llu\n", M->L->last_crash, (unsigned long long)M->L->hangs);
    pthread_mutex_lock(&M->L->fs.mu);
    /* Actors that joined (fleet actor --join) in this sitting, left, or were lost; the
     * actor slots of the whole run (actor.count and every join) */
    fprintf(sf, "actors_joined=%llu\nactors_left=%llu\nactors_lost=%llu\nactor_slots=%d\n",
            (unsigned long long)M->L->fs.joins, (unsigned long long)M->L->fs.leaves,
            (unsigned long long)M->L->fs.losses, M->L->fs.n_actors);
    const unsigned long long refused = M->L->fs.refused;
    pthread_mutex_unlock(&M->L->fs.mu);
    fprintf(sf, "reports_refused=%llu\n", refused); /* Control's refusals (launcher/fleet_state.h) */
    /* Memory: the largest a process of each kind had at a progress line (MB), and the fleet's. */
    for (int k = 0; k < N_KINDS; k++)
        fprintf(sf, "memory_%s_rss_mb=%.1f\nmemory_%s_private_mb=%.1f\n", fl__monitor_kind_names[k],
                (double)M->mem_peak[k][0] / 1048576.0, fl__monitor_kind_names[k],
                (double)M->mem_peak[k][1] / 1048576.0);
    fprintf(sf, "memory_rss_mb=%.1f\nmemory_private_mb=%.1f\n", (double)M->mem_total_peak[0] / 1048576.0,
            (double)M->mem_total_peak[1] / 1048576.0);
    /* CPU seconds: the launcher's own (its threads, not the roles'), and each kind's at the
     * last progress row (the processes as they last told them) */
    fprintf(sf, "launcher_cpu_s=%.3f\nparam_fetches=%llu\n", fl_proc_cpu_s(), (unsigned long long)pi->fetches);
    for (int k = 0; k < KIND_LAUNCHER; k++) fprintf(sf, "cpu_%s_s=%.3f\n", fl__monitor_kind_names[k], M->cpu_sum[k]);
    fprintf(sf, "pids=");
    M->ops->pids(M->ctx, sf);
    fprintf(sf, "\n");
    fclose(sf);
}

/* The last line on stdout. */
void fl__monitor_print_outcome(const monitor_t *M, double elapsed, const totals_t *t) {
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
    /* Stopped by a signal (Ctrl-C, scancel, kill) with checkpoints on: how to go on. */
    const fl_config_t *c = &M->L->cfg;
    if (fl_stop_signal() && c->run_checkpoints && !c->run_deterministic)
        printf("fleet run: continue it with `fleet run --resume %s`%s\n", M->L->dir,
               fl_mpi_launched() ? " (in the same mpirun command, in place of the config file)" : "");
    fflush(stdout);
}
