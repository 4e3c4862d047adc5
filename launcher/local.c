/* local: the launcher of a whole fleet on one machine (fl_launch_run_local).
 *
 * The run is open (launcher/launch.h: the plan printed, runs/<name>/config.ini written,
 * fleet.Control serving); this file starts each role as its own process (fork + exec of
 * this binary, launcher/proc.h): replay shards and parameter servers first (each binds
 * port 0 and writes its address to a pipe), then learners and actors with those
 * addresses. With replay.shards = R it starts R `fleet replay --shard s` processes and
 * gives every learner and actor the list of their addresses in shard order ("a0,a1,...",
 * or "@runs/<name>/replay_addrs.txt" when the list does not fit in an option); each actor
 * streams to shard index % R and the learner samples all of them (replay/client.h). Then
 * the monitor (launcher/monitor.c) runs the progress loop, the ordered stop (actors,
 * learners, services) and the summary; the functions here tell it which child died, stop
 * children by role and list their pids. run.evaluators evaluator processes (`fleet
 * evaluator --index e`) start last, with the parameter servers' and Control's addresses.
 *
 * Children run in their own process group (a terminal's Ctrl-C reaches only the
 * launcher, which then stops them in order) and get SIGTERM if the launcher itself dies.
 * Under mpirun the verb (cli/verb_run.c) hands over to launcher/mpi.c instead.
 * Ownership: fl_launch_run_local owns the child table and the address lists. Failure: a
 * role that does not start is reported with its role and exit status and the fleet is
 * stopped (exit 1, or 130 when interrupted). One thread. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/stop.h"
#include "envs/factory.h"
#include "launcher/launch.h"
#include "launcher/options.h"
#include "launcher/proc.h"
#include "launcher/security.h"

/* ------------------------------------------------------ on one machine ---- */

/* Supervision of one child: its restarts and the one waiting, if any. */
typedef struct sup {
    int restarts; /* restarts so far */
    int waiting;  /* it died and restarts at restart_at */
    double restart_at;
    double stopped_since; /* fl_clock_sec() when it was first seen stopped (SIGSTOP), 0 = running */
    double up_at;         /* fl_clock_sec() when its latest start was done (a service: serving) */
    int hang_warned;      /* its silence was reported (once per incarnation) */
    fl_restart_t rule;    /* its quick deaths and next wait (launcher/proc.h) */
} sup_t;

/* The fleet on this machine: its children and what the learners and actors are given. */
typedef struct local {
    fl_launch_t *L;
    fl_child_t *kids; /* R replay shards, P parameter-server shards, NL learners, actors, NE evaluators */
    sup_t *sup;       /* one per child */
    int n;
    int R, P, NL, NE;
    double next_hang_look; /* check_hangs looks twice a second */
    int exit_code;         /* != 0 once starting failed, with reason */
    char reason[512];
    char *replay_list, *ps_list;       /* the services' addresses (malloc'd) */
    char replay_arg[256], ps_arg[256]; /* the same as options (replay's may be @FILE) */
} local_t;

/* "actor 3 (pid 12) exited with status 1 (log: runs/x/logs/actor-3.log)" */
static void describe_child(const fl_child_t *c, char *reason, size_t len) {
    char st[128];
    fl_proc_describe_status(c->status, st, sizeof st);
    if (c->log[0])
        snprintf(reason, len, "%s %d (pid %d) %s (log: %s)", c->role, c->index, (int)c->pid, st, c->log);
    else
        snprintf(reason, len, "%s %d (pid %d) %s", c->role, c->index, (int)c->pid, st);
}

/* 1 when child c ended cleanly on its own budget: an actor after actor.max_steps, a
 * learner after learner.max_steps. */
static int finished_budget(const local_t *lc, const fl_child_t *c) {
    const fl_config_t *cfg = fl_launch_config(lc->L);
    if (!WIFEXITED(c->status) || WEXITSTATUS(c->status) != 0) return 0;
    return (strcmp(c->role, "actor") == 0 && cfg->actor_max_steps > 0) ||
           (strcmp(c->role, "learner") == 0 && cfg->learner_max_steps > 0);
}

static int spawn_kid(local_t *lc, int i);

/* Why child i cannot be restarted after its death at `now` (a reason), or NULL when it
 * can: the restart rule of launcher/proc.h (fl_restart_after, which sets *wait). (A gorila
 * parameter-server shard restarts from its checkpoint: kid_args.) */
static const char *not_restartable(local_t *lc, int i, double now, double *wait) {
    const fl_config_t *cfg = fl_launch_config(lc->L);
    const char *why = NULL;
    *wait = fl_restart_after(&lc->sup[i].rule, now, cfg->run_max_restarts, lc->kids[i].status, &why);
    return why;
}

/* Child i died on its own: schedules its restart (1) or writes why the fleet must stop (0). */
static int supervise(local_t *lc, int i, char *reason, size_t len) {
    fl_child_t *c = &lc->kids[i];
    sup_t *s = &lc->sup[i];
    fl_proc_echo_logs(lc->kids, lc->n); /* its last words first */
    fl_launch_note_death(lc->L, c->role, c->index, c->status);
    char what[900];
    describe_child(c, what, sizeof what);
    double now = fl_clock_sec(), wait = 0;
    const char *why = not_restartable(lc, i, now, &wait);
    if (why) {
        snprintf(reason, len, "%s; not restarted: %s", what, why);
        return 0;
    }
    s->waiting = 1;
    s->restart_at = now + wait;
    if (s->rule.quick)
        fl_launch_event(lc->L, NULL,
                        "%s; restarting it in %.1f s (restart %d; %d in a row within 10 s of its start, "
                        "of run.max_restarts = %lld)",
                        what, wait, s->restarts + 1, s->rule.quick,
                        (long long)fl_launch_config(lc->L)->run_max_restarts);
    else
        fl_launch_event(lc->L, NULL, "%s; restarting it in %.1f s (restart %d)", what, wait, s->restarts + 1);
    return 1;
}

/* Restarts the children whose wait is over. A restart that fails to start shows up as
 * a death on the next look. */
static void restart_due(local_t *lc) {
    double now = fl_clock_sec();
    for (int i = 0; i < lc->n; i++) {
        sup_t *s = &lc->sup[i];
        if (!s->waiting || now < s->restart_at || fl_stop_requested()) continue;
        s->waiting = 0;
        s->restarts++;
        fl_child_t *c = &lc->kids[i];
        if (spawn_kid(lc, i) == 0)
            fl_launch_event(lc->L, c->role, "restarted %s %d (pid %d)", c->role, c->index, (int)c->pid);
    }
}

/* 1 when process pid is stopped (by SIGSTOP or a debugger: state T or t in /proc). */
static int proc_stopped(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')'); /* the command name may hold spaces */
    char state = 0;
    return close_paren && sscanf(close_paren + 1, " %c", &state) == 1 && (state == 'T' || state == 't');
}

/* Hangs (run.hang_s > 0): an actor, learner or evaluator that has sent no report for
 * run.hang_s (since its start or its last report), or any role stopped (SIGSTOP) that
 * long, is hung. Its silence is reported (events.log, the terminal) at half run.hang_s;
 * at run.hang_s it gets SIGKILL, so that the supervision restarts it (its death is then
 * seen like any other). A role's silence counts only while what it waits on is well:
 * a learner's while the services (replay, parameter server) run and are not stopped
 * nor restarting; an actor's and an evaluator's while the learners are also well (an
 * actor's inserts wait for the learner's samples). A service that stops answering while
 * it runs is not seen here. */
static void check_hangs(local_t *lc) {
    const double hang_s = fl_launch_config(lc->L)->run_hang_s;
    const double pe = fl_launch_config(lc->L)->run_progress_every;
    const double now = fl_clock_sec();
    if (hang_s <= 0 || now < lc->next_hang_look) return;
    lc->next_hang_look = now + 0.5;
    for (int i = 0; i < lc->n; i++) {
        sup_t *s = &lc->sup[i];
        int stopped = lc->kids[i].pid && lc->kids[i].running && proc_stopped(lc->kids[i].pid);
        if (!stopped)
            s->stopped_since = 0;
        else if (!s->stopped_since)
            s->stopped_since = now;
    }
    /* When each group was last all well: the services, then the learners. */
    double back[2] = {0, 0};
    const int first[2] = {0, lc->R + lc->P}, end[2] = {lc->R + lc->P, lc->R + lc->P + lc->NL};
    for (int g = 0; g < 2; g++)
        for (int i = first[g]; i < end[g]; i++) {
            const fl_child_t *c = &lc->kids[i];
            const sup_t *s = &lc->sup[i];
            int unwell = !c->running || s->waiting || s->stopped_since;
            if (!unwell) { /* also when it is silent itself */
                double seen = fl_launch_last_report(lc->L, c->role, c->index);
                if (g == 0) /* a service: from the first Info it missed (one is due every progress period,
                               with a 1 s deadline), so that what waits on it is not blamed */
                    unwell = seen >= 0 && now > fmax(fmax(seen + pe + 1.0, s->rule.started_at), s->up_at);
                else /* a learner: its reports */
                    unwell = seen >= 0 && now - fmax(fmax(seen, s->rule.started_at), back[0]) >= hang_s / 2;
            }
            back[g] = fmax(unwell ? now : back[g], fmax(s->rule.started_at, s->up_at));
        }
    back[1] = fmax(back[1], back[0]);
    for (int i = 0; i < lc->n; i++) {
        fl_child_t *c = &lc->kids[i];
        sup_t *s = &lc->sup[i];
        if (!c->pid || !c->running || s->waiting) continue;
        const int stopped = s->stopped_since > 0;
        double seen = fl_launch_last_report(lc->L, c->role, c->index), silent = 0;
        if (seen >= 0 && i < lc->R + lc->P) /* a service: since it last answered the launcher's Info, which
                                                 asks once a progress period (1 s deadline) */
            silent = now - fmax(fmax(seen + pe + 1.0, s->rule.started_at), s->up_at);
        else if (seen >= 0) /* a reporting role: from what it waits on being well */
            silent = now - fmax(fmax(seen, s->rule.started_at), back[i < lc->R + lc->P + lc->NL ? 0 : 1]);
        if (stopped && now - s->stopped_since > silent) silent = now - s->stopped_since;
        if (silent < hang_s / 2) {
            s->hang_warned = 0;
            continue;
        }
        const char *state = stopped ? "the process is stopped (SIGSTOP?)" : "the process runs";
        if (silent < hang_s) {
            if (!s->hang_warned)
                fl_launch_event(lc->L, NULL,
                                "%s %d (pid %d) gave no sign of life for %.0f s (%s); run.hang_s = %g s "
                                "ends it",
                                c->role, c->index, (int)c->pid, silent, state, hang_s);
            s->hang_warned = 1;
            continue;
        }
        fl_launch_event(lc->L, NULL,
                        "%s %d (pid %d) hung: no sign of life for %.0f s, run.hang_s (%s); killing it "
                        "(SIGKILL) to restart it (log: %s)",
                        c->role, c->index, (int)c->pid, silent, state, c->log[0] ? c->log : "the terminal");
        fl_launch_note_hang(lc->L);
        kill(c->pid, SIGKILL);
        s->stopped_since = 0;
        s->hang_warned = 0;
    }
}

/* Children that ended while the fleet runs: a failure the supervision cannot mend (1,
 * with why), or the end of the work (2: every actor took actor.max_steps, or a learner
 * learner.max_steps), or 0. Dead roles are restarted here (run.max_restarts). */
static int local_dead(void *ctx, char *reason, size_t len) {
    local_t *lc = ctx;
    restart_due(lc);
    check_hangs(lc);
    fl_proc_reap(lc->kids, lc->n);
    int actors = 0, actors_done = 0, learner_done = -1;
    for (int i = 0; i < lc->n; i++) {
        fl_child_t *c = &lc->kids[i];
        int actor = strcmp(c->role, "actor") == 0;
        actors += actor;
        if (!c->pid || c->running || lc->sup[i].waiting) continue;
        if (!finished_budget(lc, c)) {
            if (!supervise(lc, i, reason, len)) return 1;
            continue;
        }
        actors_done += actor;
        if (!actor) learner_done = c->index;
    }
    const fl_config_t *cfg = fl_launch_config(lc->L);
    if (learner_done >= 0) {
        snprintf(reason, len, "learner %d took learner.max_steps = %lld steps", learner_done,
                 (long long)cfg->learner_max_steps);
        return 2;
    }
    if (actors_done < actors) return 0; /* the others go on */
    snprintf(reason, len, "every actor took actor.max_steps = %lld env steps", (long long)cfg->actor_max_steps);
    return 2;
}

static void local_echo_logs(void *ctx) {
    local_t *lc = ctx;
    fl_proc_echo_logs(lc->kids, lc->n);
}

static void local_stop(void *ctx, const char *roles, double grace_s) {
    local_t *lc = ctx;
    fl_proc_stop_roles(lc->kids, lc->n, roles, grace_s);
}

static int local_unclean(void *ctx, char *reason, size_t len) {
    local_t *lc = ctx;
    for (int i = 0; i < lc->n; i++) { /* one waiting for its restart was reported then */
        if (!lc->kids[i].pid || lc->sup[i].waiting || fl_proc_clean_exit(lc->kids[i].status)) continue;
        describe_child(&lc->kids[i], reason, len);
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

/* The role and index of child i. */
static const char *kid_role(const local_t *lc, int i, int *index) {
    int k = i;
    if (k < lc->R) return *index = k, "replay";
    if ((k -= lc->R) < lc->P) return *index = k, "paramserver";
    if ((k -= lc->P) < lc->NL) return *index = k, "learner";
    if ((k -= lc->NL) < lc->n - lc->R - lc->P - lc->NL - lc->NE) return *index = k, "actor";
    return *index = k - (lc->n - lc->R - lc->P - lc->NL - lc->NE), "evaluator";
}

/* The command line of child i (`fleet ROLE` + v): its first start, or its restart
 * number `restart` (>= 1). */
typedef struct kid_args {
    char *v[24];
    char idx[32], file[1100], listen[256], inc[32];
} kid_args_t;

static void kid_args(local_t *lc, int i, int restart, kid_args_t *a) {
    const fl_config_t *cfg = fl_launch_config(lc->L);
    const char *dir = cfg->run_checkpoint_dir;
    const int resume = fl_launch_resuming(lc->L) && !restart;
    const fl_child_t *c = &lc->kids[i];
    int n = 0, index;
    char **v = a->v;
    memset(a, 0, sizeof *a);
    kid_role(lc, i, &index);
    v[n++] = "--config";
    v[n++] = (char *)fl_launch_config_path(lc->L);
    v[n++] = "--control";
    v[n++] = (char *)fl_launch_control_addr(lc->L);
    if (i < lc->R + lc->P) { /* a service: a restart binds the address its clients know */
        int replay = i < lc->R;
        snprintf(a->idx, sizeof a->idx, "%d", replay ? i : i - lc->R);
        v[n++] = "--shard";
        v[n++] = a->idx;
        /* Without the write-ahead log a replay shard starts from its last checkpoint;
         * with it, the shard recovers from the checkpoint folder by itself. A gorila
         * parameter-server shard starts from its last checkpoint (an apex one gets its
         * parameters from the learner again). */
        int gorila = !replay && cfg->learner_mode == FL_CFG_MODE_GORILA;
        if (replay)
            snprintf(a->file, sizeof a->file, "%s/shard-%d.ckpt", dir, i);
        else
            snprintf(a->file, sizeof a->file, "%s/paramserver-%d.safetensors", dir, i - lc->R);
        if ((replay ? !fl_options_replay_wal(cfg) : gorila) && (resume || restart) && dir[0] &&
            access(a->file, R_OK) == 0) {
            v[n++] = "--restore";
            v[n++] = a->file;
        }
        const char *socks = fl_launch_socket_dir(lc->L);
        if (restart && c->addr[0])
            snprintf(a->listen, sizeof a->listen, "%s", c->addr);
        else if (socks[0]) /* one machine: a unix socket only this user can reach */
            snprintf(a->listen, sizeof a->listen, "unix:%s/%s-%d.sock", socks, replay ? "replay" : "paramserver",
                     replay ? i : i - lc->R);
        if (a->listen[0]) {
            v[n++] = "--listen";
            v[n++] = a->listen;
        }
        return;
    }
    int learner = i < lc->R + lc->P + lc->NL, evaluator = i >= lc->n - lc->NE;
    snprintf(a->idx, sizeof a->idx, "%d", index);
    v[n++] = "--index";
    v[n++] = a->idx;
    v[n++] = "--paramserver";
    v[n++] = lc->ps_arg;
    if (!evaluator || cfg->run_deterministic) { /* a deterministic evaluator marks its rounds there */
        v[n++] = "--replay";
        v[n++] = lc->replay_arg;
    }
    if (learner) { /* resuming: learner 0's checkpoint; a restart: its own latest, if any */
        snprintf(a->file, sizeof a->file, "%s/learner-%d.safetensors", dir, restart ? index : 0);
        if (resume || (restart && dir[0] && access(a->file, R_OK) == 0)) {
            v[n++] = "--resume";
            v[n++] = a->file;
        }
    } else if (evaluator) { /* from its state file: its rounds go on */
        snprintf(a->file, sizeof a->file, "%s/evaluator-%d.state", dir, index);
        if (resume || (restart && dir[0] && access(a->file, R_OK) == 0)) v[n++] = "--resume";
    } else if (resume) { /* an actor resumes from its state file; a restarted one starts afresh */
        v[n++] = "--resume";
    } else if (restart) {
        snprintf(a->inc, sizeof a->inc, "%d", restart);
        v[n++] = "--incarnation";
        v[n++] = a->inc;
    }
}

/* Restarts child i (its supervision counted the restart): a service must come back on
 * the address its clients know. 0, or -1 (its death is seen on the next look). */
static int spawn_kid(local_t *lc, int i) {
    kid_args_t a;
    kid_args(lc, i, lc->sup[i].restarts, &a);
    fl_child_t *c = &lc->kids[i];
    int index;
    const char *role = kid_role(lc, i, &index);
    int service = i < lc->R + lc->P;
    lc->sup[i].rule.started_at = fl_clock_sec();
    if (fl_proc_spawn(c, role, index, a.v, service, 120) == 0) {
        lc->sup[i].up_at = fl_clock_sec(); /* a service waits above until it serves (its log recovered) */
        if (!service || strcmp(c->addr, a.listen) == 0) return 0;
        fl_launch_event(lc->L, NULL, "%s %d came back on %s, not on %s where its clients look: stopping it", role,
                        index, c->addr, a.listen);
    }
    if (c->pid > 0 && c->running) kill(c->pid, SIGKILL); /* reaped, and seen dead, on the next look */
    if (service && a.listen[0]) snprintf(c->addr, sizeof c->addr, "%s", a.listen);
    return -1;
}

/* Services first: replay shards 0 .. R-1, then parameter-server shards 0 .. P-1; all
 * start at once (each argv is copied by fork), then their addresses are read in order.
 * ready: R + P slots for the ready pipes. Returns the first that failed, or -1. */
static int start_services(local_t *lc, int *ready) {
    const int NS = lc->R + lc->P;
    int failed_at = -1;
    for (int r = 0; r < NS; r++) ready[r] = -1;
    for (int r = 0; r < NS && failed_at < 0; r++) {
        kid_args_t a;
        kid_args(lc, r, 0, &a);
        int index;
        const char *role = kid_role(lc, r, &index);
        lc->sup[r].rule.started_at = fl_clock_sec();
        if (fl_proc_spawn_start(&lc->kids[r], role, index, a.v, 1, &ready[r]) != 0) failed_at = r;
    }
    double ready_until = fl_clock_sec() + 60;
    for (int r = 0; r < NS; r++) {
        if (ready[r] < 0) continue;
        if (failed_at < 0) {
            double left = ready_until - fl_clock_sec();
            if (fl_proc_spawn_wait(&lc->kids[r], ready[r], left > 0 ? left : 0) != 0) failed_at = r;
        } else {
            close(ready[r]);
        }
    }
    return failed_at;
}

/* Service kids[failed_at] did not start: the reason names the child that exited (a role
 * that closed its ready pipe without an address is usually exiting: it gets a moment so
 * that its exit status, not a guess, is reported). */
static void start_failed(local_t *lc, int failed_at) {
    fl_child_t *kids = lc->kids, *c = &kids[failed_at];
    for (int w = 0; w < 100; w++) {
        fl_proc_reap(kids, lc->n);
        int any_dead = 0;
        for (int i = 0; i < lc->n; i++) any_dead |= kids[i].pid && !kids[i].running;
        if (any_dead) break;
        fl_sleep_sec(0.02);
    }
    char st[700];
    snprintf(st, sizeof st, "%s %d (pid %d) did not report its address", c->role, c->index, (int)c->pid);
    for (int i = 0; i < lc->n; i++)
        if (kids[i].pid && !kids[i].running) {
            c = &kids[i];
            describe_child(c, st, sizeof st);
        }
    fl_proc_echo_logs(kids, lc->n);
    if (fl_stop_requested())
        snprintf(lc->reason, sizeof lc->reason, "interrupted while starting");
    else
        snprintf(lc->reason, sizeof lc->reason, "%.480s while starting", st);
    lc->exit_code = fl_stop_requested() ? 130 : 1;
}

/* The services' addresses as the learners' and actors' options. */
static void pass_addresses(local_t *lc) {
    lc->replay_list = address_list(lc->kids, 0, lc->R);
    lc->ps_list = address_list(lc->kids, lc->R, lc->P);
    if (lc->exit_code) return;
    if (!lc->replay_list || !lc->ps_list) {
        snprintf(lc->reason, sizeof lc->reason, "out of memory for the service addresses");
        lc->exit_code = 1;
        return;
    }
    char path[800];
    snprintf(path, sizeof path, "%s/replay_addrs.txt", fl_launch_dir(lc->L));
    if (fl_launch_address_arg(lc->replay_list, path, lc->replay_arg, sizeof lc->replay_arg) != 0) {
        snprintf(lc->reason, sizeof lc->reason, "cannot pass the replay addresses in %.200s", path);
        lc->exit_code = 1;
    }
    if (strlen(lc->ps_list) >= sizeof lc->ps_arg) {
        snprintf(lc->reason, sizeof lc->reason, "the %d parameter-server addresses do not fit in one option", lc->P);
        lc->exit_code = 1;
    } else {
        snprintf(lc->ps_arg, sizeof lc->ps_arg, "%s", lc->ps_list);
    }
}

/* Prints the services' line, then starts learners and actors: `fleet ROLE --index i`
 * with the services' addresses. */
static void start_workers(local_t *lc) {
    const char *control = fl_launch_control_addr(lc->L);
    if (lc->R == 1)
        printf("  services     replay %s, paramserver %s, control %s\n", lc->replay_arg, lc->ps_arg, control);
    else if (lc->replay_arg[0] != '@')
        printf("  services     replay shards %s, paramserver %s, control %s\n", lc->replay_arg, lc->ps_arg, control);
    else
        printf("  services     replay %d shards (addresses in %s), paramserver %s, control %s\n", lc->R,
               lc->replay_arg + 1, lc->ps_arg, control);
    fflush(stdout);
    for (int i = lc->R + lc->P; i < lc->n; i++) {
        kid_args_t a;
        kid_args(lc, i, 0, &a);
        int index;
        const char *role = kid_role(lc, i, &index);
        lc->sup[i].rule.started_at = fl_clock_sec();
        fl_proc_spawn(&lc->kids[i], role, index, a.v, 0, 0);
    }
}

int fl_launch_run_local(fl_launch_t *L) {
    const fl_config_t *cfg = fl_launch_config(L);
    local_t lc;
    memset(&lc, 0, sizeof lc);
    lc.L = L;
    lc.R = (int)cfg->replay_shards;
    lc.P = (int)cfg->paramserver_shards;
    lc.NL = (int)cfg->learner_count;
    lc.NE = (int)cfg->run_evaluators;
    lc.n = lc.R + lc.P + lc.NL + (int)cfg->actor_count + lc.NE;
    lc.kids = calloc((size_t)lc.n, sizeof *lc.kids);
    lc.sup = calloc((size_t)lc.n, sizeof *lc.sup);
    int *ready = malloc((size_t)(lc.R + lc.P) * sizeof *ready);
    if (!lc.kids || !lc.sup || !ready) {
        fprintf(stderr, "fleet run: out of memory for %d children\n", lc.n);
        free(ready);
        free(lc.kids);
        free(lc.sup);
        return 1;
    }
    char logs[700];
    snprintf(logs, sizeof logs, "%s/logs", fl_launch_dir(L));
    if (fl_proc_mkdir_p(logs) == 0) {
        fl_proc_set_log_dir(logs);
        printf("  logs         %s/ (one per role; their warnings and errors show here)\n", logs);
    } else
        fprintf(stderr, "fleet run: cannot create %s (%s): the roles log to this terminal\n", logs, strerror(errno));
    int failed_at = start_services(&lc, ready);
    free(ready);
    if (failed_at >= 0) start_failed(&lc, failed_at);
    pass_addresses(&lc);
    if (!lc.exit_code) start_workers(&lc);
    static const fl_launch_ops_t ops = {local_dead, local_stop, local_unclean, local_pids, local_echo_logs};
    int rc = fl_launch_monitor(L, lc.replay_list ? lc.replay_list : "", lc.ps_list ? lc.ps_list : "", &ops, &lc,
                               lc.exit_code, lc.reason);
    free(lc.replay_list);
    free(lc.ps_list);
    free(lc.kids);
    free(lc.sup);
    return rc;
}
