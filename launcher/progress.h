/* progress: the launcher's progress line, one per run.progress_every, at most
 * FL_PROGRESS_COLUMNS columns:
 *   [  12.3s] eval 475.0+-3.2 | train 187.3 | env 412K 31.2K/s | upd 12.3K 950.0/s loss 0.012 | replay 412K | 42% ETA
 * 3m05s [  30.1s] eval - | train -20.4 | env 32.8K 1.1K/s | frames 131K | warm-up 32.8K/50K | replay 32.8K | lag 0 The
 * headline comes first: the latest evaluation's mean return with its 95% confidence interval ("eval -" before the first
 * one; absent without evaluators), then the training return (the fleet's last 100 episodes, all epsilons), the fleet's
 * env steps so far and per second, the emulator frames so far (env steps x frame skip, as Atari papers count them; only
 * with a frame skip), learner steps so far and updates/s with the loss (while replay fills up to the sampling
 * threshold: how far it is, "warm-up 32.8K/50K"), replay size, the version lag of the oldest actor, Gorila's pushes,
 * the roles restarted so far (once there is one; with how many crashed or hung, once one did), the actors at work once
 * one has joined ("actors 4+2 joined": the launcher's and the joined ones still reporting), and the nearest budget's
 * share and ETA. Totals (steps, frames, replay) have three significant digits (131K, 1.23M), rates and returns are
 * compact (31.2K/s, -20.4). When everything does not fit, the least important parts (pushes, lag, replay, loss, frames,
 * restarts, actors, then updates and env) are left out; time, eval, train and the budget always stay. Pure functions.
 */
#ifndef FL_LAUNCHER_PROGRESS_H
#define FL_LAUNCHER_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#define FL_PROGRESS_COLUMNS 120

typedef struct fl_progress {
    double elapsed_s;
    int evaluators; /* 0: no eval part */
    int have_eval;  /* an evaluation has arrived */
    double eval_mean, eval_ci95;
    int have_train; /* a training episode has ended */
    double train_return;
    uint64_t env_steps;     /* the fleet's env steps so far */
    uint64_t learner_steps; /* learner steps so far (learner 0's with apex, the sum with gorila) */
    double env_rate, upd_rate, loss;
    int have_upd;         /* the learners have reported in this sitting: upd_rate and loss are theirs ("-" before) */
    uint64_t frames;      /* emulator frames (env steps x frame skip); 0: no part */
    uint64_t warmup_need; /* transitions replay needs before sampling: while replay_size is below
                             it (and 0: no part), "warm-up SIZE/NEED" stands for the updates */
    uint64_t replay_size, lag;
    int gorila;
    uint64_t pushes_applied, pushes_dropped;
    uint64_t restarts;                      /* roles restarted by the launcher (0: no part) */
    uint64_t crashes, hangs;                /* of them: died of a fault signal, found hung (shown when nonzero) */
    int joined_ever;                        /* an actor has joined (fleet actor --join): the actors part is shown */
    uint64_t actors_started, actors_joined; /* the launcher's actors; the joined ones still at work */
    double budget_done;                     /* [0, 1], or < 0: no budget */
    double eta_s;                           /* < 0: unknown */
} fl_progress_t;

/* Writes the line (no newline) into buf (len >= FL_PROGRESS_COLUMNS + 1); returns its
 * length, <= FL_PROGRESS_COLUMNS. */
size_t fl_progress_format(const fl_progress_t *p, char *buf, size_t len);

/* v in at most 7 characters: "-999.9", "12.3K", "4.6M", ... ("nan", "inf" as such). */
void fl_progress_compact(double v, char out[16]);
/* A total n in at most 5 characters: exact below 1000, else three significant digits
 * with K, M, G, T, P or E ("131K", "1.23M", "18.4E"). */
void fl_progress_total(uint64_t n, char out[16]);

#endif
