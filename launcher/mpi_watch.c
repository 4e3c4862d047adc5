/* mpi_watch: the launcher rank of `fleet run` under mpirun (launcher/mpi.c describes the
 * whole): it runs the evaluators on its own host, and the progress loop of launcher/launch.h
 * with the other ranks as its roles: their DONE and EVENT messages, their hang checks
 * (TAG_KILL to the rank of a hung role), the ordered stop (TAG_STOP) and the end (FINISH,
 * or MPI_Abort when a rank does not stop). */
#ifdef FLEET_HAVE_MPI
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/stop.h"
#include "launcher/mpi_internal.h"

static void describe_rank(const mpi_state_t *m, int r, char *buf, size_t len) {
    snprintf(buf, len, "%s %d (rank %d on %s, pid %d)", fl__mpi_kind_names[m->kind[r]], m->index[r], r, m->ids[r].host,
             m->msg[r].pid);
}

/* An evaluator's supervision on the launcher rank. */
typedef struct eval_sup {
    fl_restart_t rule;
    int restarts, waiting; /* waiting: it died and restarts at restart_at */
    double restart_at;
} eval_sup_t;

/* What the launcher rank watches: the other ranks, and the evaluator processes it runs
 * itself on its own host (run.evaluators; they need no rank of their own). */
typedef struct launcher_ctx {
    mpi_state_t *m;
    rank_run_t *X; /* its evaluators' options */
    fl_launch_t *L;
    fl_child_t *evals;
    eval_sup_t *esup;
    int n_evals;
    /* hang checks (check_hangs_mpi): per rank, then per evaluator */
    double *hang_kill_at; /* when its restart was asked for (a silence counts from then) */
    unsigned char *hang_warned;
    double next_hang_look, hang_t0; /* hang_t0: the first look (a silence counts from it at the earliest) */
} launcher_ctx_t;

/* Receives every supervision EVENT that has arrived and records it (events.log, and the
 * restart counts of the progress line and summary.txt). */
static void poll_events(launcher_ctx_t *lx) {
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_EVENT, MPI_COMM_WORLD, &flag, &st);
        if (!flag) return;
        event_msg_t e;
        MPI_Recv(&e, (int)sizeof e, MPI_BYTE, st.MPI_SOURCE, TAG_EVENT, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        e.role[sizeof e.role - 1] = '\0';
        e.text[sizeof e.text - 1] = '\0';
        fl_launch_event(lx->L, e.role[0] ? e.role : NULL, "%s", e.text);
    }
}

/* Receives every EVENT, then every DONE that has arrived; returns the first rank that
 * ended, or -1. */
static int poll_done(launcher_ctx_t *lx) {
    mpi_state_t *m = lx->m;
    poll_events(lx);
    int first = -1;
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_DONE, MPI_COMM_WORLD, &flag, &st);
        if (!flag) return first;
        int r = st.MPI_SOURCE;
        MPI_Recv(&m->msg[r], (int)sizeof m->msg[r], MPI_BYTE, r, TAG_DONE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        m->done[r] = 1;
        if (first < 0) first = r;
    }
}

/* "evaluator 0 (pid 12) exited with status 1 (log: ...)" */
static void describe_eval(const fl_child_t *c, char *reason, size_t len) {
    char st[128];
    fl_proc_describe_status(c->status, st, sizeof st);
    snprintf(reason, len, "evaluator %d (pid %d, on the launcher's host) %s%s%s%s", c->index, (int)c->pid, st,
             c->log[0] ? " (log: " : "", c->log, c->log[0] ? ")" : "");
}

static int spawn_eval(launcher_ctx_t *lx, int i, int restart);

/* Evaluator i died on its own: schedules its restart (1), or writes why the fleet must
 * stop (0). The restart rule of launcher/proc.h, as on one machine. */
static int supervise_eval(launcher_ctx_t *lx, int i, char *reason, size_t len) {
    fl_launch_t *L = lx->L;
    eval_sup_t *s = &lx->esup[i];
    char what[900];
    fl_proc_echo_logs(lx->evals, lx->n_evals); /* its last words first */
    describe_eval(&lx->evals[i], what, sizeof what);
    const char *why = NULL;
    double now = fl_clock_sec();
    double wait = fl_restart_after(&s->rule, now, fl_launch_config(L)->run_max_restarts, lx->evals[i].status, &why);
    if (why) {
        snprintf(reason, len, "%s; not restarted: %s", what, why);
        return 0;
    }
    s->waiting = 1;
    s->restart_at = now + wait;
    fl_launch_event(L, NULL, "%s; restarting it in %.1f s (restart %d)", what, wait, s->restarts + 1);
    return 1;
}

/* Restarts the evaluators whose wait is over; one that fails to start is seen dead on
 * the next look. */
static void restart_evals(launcher_ctx_t *lx) {
    double now = fl_clock_sec();
    for (int i = 0; i < lx->n_evals; i++) {
        eval_sup_t *s = &lx->esup[i];
        if (!s->waiting || now < s->restart_at || fl_stop_requested()) continue;
        s->waiting = 0;
        s->restarts++;
        if (spawn_eval(lx, i, s->restarts) == 0)
            fl_launch_event(lx->L, "evaluator", "restarted evaluator %d (pid %d, on the launcher's host)", i,
                            (int)lx->evals[i].pid);
    }
}

/* A role's silence at now (its reports; a service's answers to the launcher's Info, one
 * due every progress period with a 1 s deadline), from when it was last asked to restart;
 * -1 before its first sign of life. */
static double silence_of(launcher_ctx_t *lx, const char *role, int index, int slot, double now) {
    const fl_config_t *cfg = fl_launch_config(lx->L);
    double seen = fl_launch_last_report(lx->L, role, index);
    if (seen < 0) return -1; /* a role without reports */
    if (strcmp(role, "replay") == 0 || strcmp(role, "paramserver") == 0) seen += cfg->run_progress_every + 1.0;
    /* from the first look at the latest (a role that has not reported yet reads 0) */
    return now - fmax(fmax(seen, lx->hang_t0), lx->hang_kill_at[slot]);
}

/* The hang checks of a job (what launcher/local.c's check_hangs does on one machine, without
 * /proc, which a remote rank's processes are not in): a role silent for run.hang_s is
 * reported at half of it, and at run.hang_s its rank is asked to kill it (TAG_KILL),
 * which restarts it as a death; an evaluator is killed here. A silence counts only while
 * what the role waits on is well: learners while every service answers, actors and
 * evaluators while the learners report too. A learner runs inside its rank's process and
 * cannot be restarted: a hung learner stops the fleet (1, with why). */
static int check_hangs_mpi(launcher_ctx_t *lx, char *reason, size_t len) {
    const fl_config_t *cfg = fl_launch_config(lx->L);
    mpi_state_t *m = lx->m;
    const double hang_s = cfg->run_hang_s, now = fl_clock_sec();
    if (hang_s <= 0 || now < lx->next_hang_look || !lx->hang_kill_at) return 0;
    lx->next_hang_look = now + 0.5;
    if (lx->hang_t0 == 0) lx->hang_t0 = now;
    int services_well = 1, learners_well = 1;
    for (int r = 0; r < m->size; r++) {
        if (r == m->launcher || m->done[r]) continue;
        double sil = silence_of(lx, fl__mpi_kind_names[m->kind[r]], m->index[r], r, now);
        if ((m->kind[r] == K_REPLAY || m->kind[r] == K_PARAMSERVER) && sil > 0) services_well = 0;
        if (m->kind[r] == K_LEARNER && sil >= hang_s / 2) learners_well = 0;
    }
    for (int k = 0; k < m->size + lx->n_evals; k++) {
        const int is_eval = k >= m->size, r = k;
        if (!is_eval && (r == m->launcher || m->done[r])) continue;
        if (is_eval && (!lx->evals[k - m->size].running || lx->esup[k - m->size].waiting)) continue;
        const int kind = is_eval ? -1 : m->kind[r];
        const char *role = is_eval ? "evaluator" : fl__mpi_kind_names[kind];
        const int index = is_eval ? k - m->size : m->index[r];
        const int service = kind == K_REPLAY || kind == K_PARAMSERVER;
        double sil = silence_of(lx, role, index, k, now);
        if (sil < hang_s / 2 || (!service && !services_well) || ((kind == K_ACTOR || is_eval) && !learners_well)) {
            lx->hang_warned[k] = 0;
            continue;
        }
        char who[200];
        if (is_eval)
            snprintf(who, sizeof who, "evaluator %d (pid %d, on the launcher's host)", index,
                     (int)lx->evals[index].pid);
        else
            snprintf(who, sizeof who, "%s %d (rank %d on %s)", role, index, r, m->ids[r].host);
        if (sil < hang_s) {
            if (!lx->hang_warned[k])
                fl_launch_event(lx->L, NULL, "%s gave no sign of life for %.0f s; run.hang_s = %g s ends it", who, sil,
                                hang_s);
            lx->hang_warned[k] = 1;
            continue;
        }
        fl_launch_note_hang(lx->L);
        lx->hang_warned[k] = 0;
        lx->hang_kill_at[k] = now;
        if (kind == K_LEARNER) {
            snprintf(reason, len,
                     "%s hung: no sign of life for %.0f s, run.hang_s (a learner runs in its rank's "
                     "process under mpirun and cannot be restarted)",
                     who, sil);
            return 1;
        }
        fl_launch_event(lx->L, NULL,
                        "%s hung: no sign of life for %.0f s, run.hang_s; killing it (SIGKILL) to restart "
                        "it",
                        who, sil);
        if (is_eval) {
            kill(lx->evals[index].pid, SIGKILL);
        } else {
            int one = 1;
            MPI_Send(&one, 1, MPI_INT, r, TAG_KILL, MPI_COMM_WORLD);
        }
    }
    return 0;
}

static int mpi_dead(void *ctx, char *reason, size_t len) {
    launcher_ctx_t *lx = ctx;
    mpi_state_t *m = lx->m;
    if (check_hangs_mpi(lx, reason, len)) return 1;
    restart_evals(lx);
    fl_proc_reap(lx->evals, lx->n_evals);
    for (int i = 0; i < lx->n_evals; i++) {
        const fl_child_t *c = &lx->evals[i];
        if (!c->pid || c->running || lx->esup[i].waiting) continue;
        if (!supervise_eval(lx, i, reason, len)) return 1;
    }
    int r = poll_done(lx);
    if (r < 0) return 0;
    const fl_config_t *cfg = fl_launch_config(lx->L);
    if (m->kind[r] == K_LEARNER && m->msg[r].clean && cfg->learner_max_steps > 0) { /* the end of the work */
        snprintf(reason, len, "learner %d took learner.max_steps = %lld steps", m->index[r],
                 (long long)cfg->learner_max_steps);
        return 2;
    }
    char who[160];
    describe_rank(m, r, who, sizeof who);
    snprintf(reason, len, "%s %s", who, m->msg[r].what);
    return 1;
}

static void mpi_stop(void *ctx, const char *roles, double grace_s) {
    launcher_ctx_t *lx = ctx;
    mpi_state_t *m = lx->m;
    if (strstr(roles, "evaluator")) fl_proc_stop_roles(lx->evals, lx->n_evals, "evaluator", grace_s);
    for (int r = 0; r < m->size; r++) {
        if (r == m->launcher || m->done[r] || !strstr(roles, fl__mpi_kind_names[m->kind[r]])) continue;
        int one = 1;
        MPI_Send(&one, 1, MPI_INT, r, TAG_STOP, MPI_COMM_WORLD);
    }
    double until = fl_clock_sec() + grace_s;
    for (;;) {
        poll_done(lx);
        int left = 0;
        for (int r = 0; r < m->size; r++)
            left += r != m->launcher && !m->done[r] && strstr(roles, fl__mpi_kind_names[m->kind[r]]) != NULL;
        if (!left || fl_clock_sec() > until) return;
        fl_sleep_sec(0.02);
    }
}

static int mpi_unclean(void *ctx, char *reason, size_t len) {
    launcher_ctx_t *lx = ctx;
    mpi_state_t *m = lx->m;
    for (int i = 0; i < lx->n_evals; i++) /* one waiting for its restart was reported then */
        if (lx->evals[i].pid && !lx->esup[i].waiting && !fl_proc_clean_exit(lx->evals[i].status)) {
            describe_eval(&lx->evals[i], reason, len);
            return 1;
        }
    poll_done(lx);
    for (int r = 0; r < m->size; r++) {
        if (r == m->launcher || (m->done[r] && m->msg[r].clean)) continue;
        char who[160];
        describe_rank(m, r, who, sizeof who);
        snprintf(reason, len, "%s %s", who, m->done[r] ? m->msg[r].what : "did not stop");
        return 1;
    }
    return 0;
}

static void mpi_pids(void *ctx, FILE *f) {
    launcher_ctx_t *lx = ctx;
    mpi_state_t *m = lx->m;
    int first = 1;
    for (int r = 0; r < m->size; r++) {
        int pid = r == m->launcher ? (int)getpid() : m->msg[r].pid;
        if (pid <= 0) continue;
        fprintf(f, "%s%d", first ? "" : ",", pid);
        first = 0;
    }
    for (int i = 0; i < lx->n_evals; i++)
        if (lx->evals[i].pid) {
            fprintf(f, "%s%d", first ? "" : ",", (int)lx->evals[i].pid);
            first = 0;
        }
}

static void mpi_echo_logs(void *ctx) {
    launcher_ctx_t *lx = ctx;
    fl_proc_echo_logs(lx->evals, lx->n_evals);
}

/* Starts evaluator i, or restarts it (restart: its restarts so far, >= 1), with --resume
 * when its state file exists: its rounds go on. 0 or -1. */
static int spawn_eval(launcher_ctx_t *lx, int i, int restart) {
    const rank_run_t *X = lx->X;
    const char *dir = fl_launch_config(lx->L)->run_checkpoint_dir;
    char idx[32], file[FL_CONFIG_STRING_MAX + 32];
    snprintf(idx, sizeof idx, "%d", i);
    snprintf(file, sizeof file, "%s/evaluator-%d.state", dir, i);
    int resume = (restart || X->resume_dir[0]) && dir[0] && access(file, R_OK) == 0;
    /* --replay: where a deterministic evaluator marks its rounds (unused otherwise) */
    char *args[] = {"--config",
                    (char *)X->tmp_cfg,
                    "--index",
                    idx,
                    "--paramserver",
                    (char *)X->ps_arg,
                    "--control",
                    (char *)X->control,
                    "--set",
                    (char *)X->tls_set,
                    "--replay",
                    (char *)X->replay_arg,
                    resume ? "--resume" : NULL,
                    NULL};
    lx->esup[i].rule.started_at = fl_clock_sec();
    return fl_proc_spawn(&lx->evals[i], "evaluator", i, args, 0, 0);
}

/* The launcher rank's evaluators: `fleet evaluator --index i` children on its host,
 * logging to the run's logs/ folder. 0, or 1 after printing why. */
static int start_evaluators(rank_run_t *X, launcher_ctx_t *lx) {
    const int n = (int)X->cfg.run_evaluators;
    lx->evals = n ? calloc((size_t)n, sizeof *lx->evals) : NULL;
    lx->esup = n ? calloc((size_t)n, sizeof *lx->esup) : NULL;
    if (n && (!lx->evals || !lx->esup)) {
        fprintf(stderr, "fleet run: out of memory for %d evaluators\n", n);
        return 1;
    }
    lx->n_evals = n;
    char logs[700];
    snprintf(logs, sizeof logs, "%s/logs", fl_launch_dir(X->L));
    if (n && fl_proc_mkdir_p(logs) == 0) fl_proc_set_log_dir(logs);
    for (int i = 0; i < n; i++) {
        if (spawn_eval(lx, i, 0) != 0) {
            fprintf(stderr, "fleet run: cannot start evaluator %d: %s\n", i, strerror(errno));
            return 1;
        }
    }
    if (n) printf("  evaluators   %d on the launcher's host, logs in %s/\n", n, logs);
    fflush(stdout);
    return 0;
}

/* The launcher: the progress loop, then FINISH to every rank, or MPI_Abort when a rank
 * did not stop. Returns the exit code. */
int fl__mpi_run_launcher(rank_run_t *X) {
    mpi_state_t *m = &X->m;
    static const fl_launch_ops_t ops = {mpi_dead, mpi_stop, mpi_unclean, mpi_pids, mpi_echo_logs};
    launcher_ctx_t lx = {m, X, X->L, NULL, NULL, 0, NULL, NULL, 0, 0};
    int failed = start_evaluators(X, &lx);
    const size_t slots = (size_t)m->size + (size_t)lx.n_evals;
    lx.hang_kill_at = calloc(slots, sizeof *lx.hang_kill_at);
    lx.hang_warned = calloc(slots, sizeof *lx.hang_warned);
    if (!lx.hang_kill_at || !lx.hang_warned) { /* no hang checks, the rest goes on */
        free(lx.hang_kill_at);
        free(lx.hang_warned);
        lx.hang_kill_at = NULL;
        lx.hang_warned = NULL;
    }
    int rc = fl_launch_monitor(X->L, X->replay_list, X->ps_list, &ops, &lx, failed,
                               failed ? "evaluators did not start" : "");
    free(lx.evals);
    free(lx.esup);
    free(lx.hang_kill_at);
    free(lx.hang_warned);
    int left = 0;
    char who[160] = "";
    for (int r = 0; r < m->size; r++)
        if (r != m->launcher && !m->done[r]) {
            if (!left) describe_rank(m, r, who, sizeof who);
            left++;
        }
    if (left) {
        fprintf(stderr, "fleet run: %d rank%s did not stop (first: %s); ending the job\n", left, left == 1 ? "" : "s",
                who);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, rc ? rc : 1);
    }
    for (int r = 0; r < m->size; r++) {
        if (r == m->launcher) continue;
        int one = 1;
        MPI_Send(&one, 1, MPI_INT, r, TAG_FINISH, MPI_COMM_WORLD);
    }
    return rc;
}
#endif
