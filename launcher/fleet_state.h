/* fleet_state: what the roles report to the launcher's fleet.Control service, kept for
 * the monitor (launcher/monitor.c): each actor's and learner's latest counters, the training
 * returns (a window over the whole fleet and one per actor) and the evaluators' results.
 *
 * The Control handler (fl_fleet_state_on_report) runs on the server's threads; the
 * monitor reads and updates the tables under mu. An evaluator's result (Report.extra with
 * every name of eval/evaluator.h) is queued once per evaluation round; the monitor takes
 * the queue with fl_fleet_state_take_evals. The answer to every report carries the stop
 * flag of the role's kind and the fleet's env and learner steps.
 * Memory: fixed at init (the queue keeps the newest FL_FLEET_EVAL_QUEUE results). */
#ifndef FL_LAUNCHER_FLEET_STATE_H
#define FL_LAUNCHER_FLEET_STATE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rpc.h"
#include "common/status.h"
#include "eval/evaluator.h"

#define FL_FLEET_RETURN_WINDOW 100 /* training episodes in the fleet's mean return */
#define FL_FLEET_ACTOR_WINDOW 20   /* an actor's recent episodes in its own mean */
#define FL_FLEET_EVAL_QUEUE 64
#define FL_FLEET_ROUND_SLOTS 64                 /* run.deterministic: rounds being gathered, and rows queued */
#define FL_FLEET_MAX_PROCESS_BYTES (1ull << 50) /* a report's memory figures above this cannot be true */

/* run.deterministic: one round's figures, gathered from the learner's and every actor's
 * report of it (Report.extra FL_REPORT_ROUND_*, common/control.h), each exact for a
 * given config and seed. */
typedef struct fl_round_row {
    uint64_t round;
    int learner_in, actors_in;
    uint64_t learner_steps, updates, replay_size; /* the learner's, after the round */
    double loss;                                  /* its mean loss over the round's updates */
    uint64_t episodes, length_sum;                /* the actors' episodes ended in the round */
    double return_sum;
} fl_round_row_t;

typedef struct fl_role_state {
    int seen;
    uint64_t env_steps, episodes, acked, version, learner_steps, samples;
    double loss, wait_fraction, epsilon;
    uint64_t rss, private_bytes;                 /* the process's memory (Report.rss_bytes, private_bytes) */
    double cpu_s;                                /* its CPU seconds so far (Report.cpu_s) */
    uint64_t last_env, last_steps, last_samples; /* the monitor's, at the previous progress line */
    float recent[FL_FLEET_ACTOR_WINDOW];         /* actors: their latest returns (a ring) */
    uint64_t n_recent;                           /* episodes reported in total */
    /* Actors: an actor restarted by the launcher counts from zero again, so what its
     * predecessors reported is kept as a base that its own counters add to; a report
     * from a newer incarnation moves the totals so far into the base. */
    uint64_t incarnation; /* of the latest report (0 = none yet): a newer one
                             is a restarted process (Report.incarnation) */
    double last_report_s; /* fl_clock_sec() at the latest accepted report */
    uint64_t base_env, base_episodes, base_acked, base_dropped;
    uint64_t pending, dropped; /* actors: the writer's backlog, totals with the base */
    uint64_t lost_unacked;     /* actors: pending when an incarnation was replaced */
    /* Actors that joined (`fleet actor --join`, fl_fleet_state_on_join): where from, and
     * whether they are gone (FL_JOINED_LEFT: sent their last report, or joined in an earlier
     * sitting of a resumed run; FL_JOINED_LOST: silent for longer than the launcher waits). */
    int joined, gone;
    char host[64];
    int64_t pid;
} fl_role_state_t;

#define FL_JOINED_LEFT 1
#define FL_JOINED_LOST 2

/* One evaluation as an evaluator reported it (values indexed by FL_EVAL_RESULT_*). */
typedef struct fl_eval_result {
    int evaluator;
    uint64_t version;
    double received_s; /* seconds since the launch when it arrived */
    double v[FL_EVALUATOR_RESULT_COUNT];
} fl_eval_result_t;

typedef struct fl_fleet_state {
    pthread_mutex_t mu;
    double t_start;
    int gorila; /* learner steps add up over learners (else learner 0's) */
    fl_role_state_t *actors, *learners, *evaluators;
    /* Actor slots in use: the n_started the launcher started (actor.count), then those that
     * joined, in the order they joined (over a resumed run's sittings), up to max_actors. */
    int n_actors, n_learners, n_evaluators;
    int n_started, max_actors;
    /* Joins (fl_fleet_state_open_joins): closed until the services are up; then what a
     * newcomer is given. joins_refused: why joins are refused for the whole run ("" = they
     * are not). */
    int joins_open;
    char joins_refused[160];
    double eps_base, eps_alpha;
    char *join_replay, *join_params, *join_config, *join_run;
    uint64_t joins, leaves, losses; /* this sitting's joins and leaves; the joined actors lost now */
    float returns[FL_FLEET_RETURN_WINDOW];
    uint64_t n_returns; /* training episodes reported in total */
    double best_return;
    fl_eval_result_t queue[FL_FLEET_EVAL_QUEUE];
    int queued;
    uint64_t *eval_round; /* per evaluator: the last round queued */
    /* run.deterministic: rounds being gathered (slot round % FL_FLEET_ROUND_SLOTS), each
     * actor's last round counted, and complete rows in round order of completion */
    fl_round_row_t round_slots[FL_FLEET_ROUND_SLOTS];
    uint64_t *actor_round;
    fl_round_row_t rounds_done[FL_FLEET_ROUND_SLOTS];
    int n_rounds_done;
    /* Stop requests answered to each kind of role: actors and evaluators first, then
     * learners, then the services, the same order as the signals. */
    int stop_actors, stop_learners, stop_services;
    /* Reports are accepted only from the processes the launcher started: each carries its
     * role's credential (common/credential.h) under this run secret, drawn at init; and
     * only figures that can be true (fl_fleet_state_on_report). */
    unsigned char secret[16];
    double max_abs_reward; /* replay.max_abs_reward: an episode's return is at most this a step */
    uint64_t refused;      /* reports refused */
} fl_fleet_state_t;

/* n_actors: those the launcher starts; max_joined: how many more may join over the run
 * (actor.max_joined). 0, or -1 when out of memory or without a random secret. */
int fl_fleet_state_init(fl_fleet_state_t *fs, int n_actors, int max_joined, int n_learners, int n_evaluators,
                        int gorila, double t_start);

/* Opens the fleet to joining actors, once its services serve: each is given the replay
 * shards' and parameter servers' addresses (comma-separated), the effective config's INI
 * text, the run's name and an epsilon from eps_base and eps_alpha (fl_fleet_state_join_epsilon).
 * refused: non-NULL, joins stay refused for the run with that reason (e.g. the lockstep
 * rounds of run.deterministic). Copies the strings. 0, or -1 when out of memory. Locks mu. */
int fl_fleet_state_open_joins(fl_fleet_state_t *fs, double eps_base, double eps_alpha, const char *replay,
                              const char *params, const char *config_text, const char *run_name, const char *refused);

/* The epsilon of the run's j-th joined actor (j = 0, 1, ...): eps_base^(1 + eps_alpha * p)
 * at p = 1/2, 1/4, 3/4, 1/8, ... (the base-2 van der Corput sequence), so that newcomers
 * fill the gaps of the ladder that the started actors' epsilons span (fl_actor_epsilon at
 * p = i / (count - 1)), finest where it is widest. */
double fl_fleet_state_join_epsilon(double eps_base, double eps_alpha, uint64_t j);

/* The fleet.Control/Join handler (user: the fl_fleet_state_t): a JoinRequest for role
 * "actor" gets the next actor index (actor.count and up), incarnation 1, the credential of
 * that index, its epsilon and what fl_fleet_state_open_joins holds; every join is logged.
 * Refused: another role or a host name longer than 63 bytes (INVALID_ARGUMENT), before the
 * services serve (UNAVAILABLE: try again), while the fleet stops or when joins are
 * refused for the run (FAILED_PRECONDITION), past max_joined (RESOURCE_EXHAUSTED). */
fl_status fl_fleet_state_on_join(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply);

/* Marks every joined actor silent for more than timeout_s (since its last report, or
 * its join) lost, logging each once; a lost actor that reports again is back. Returns
 * how many joined actors are neither gone nor lost. Locks mu. */
int fl_fleet_state_check_joined(fl_fleet_state_t *fs, double timeout_s);
void fl_fleet_state_destroy(fl_fleet_state_t *fs);

/* The fleet.Control/Report handler (user: the fl_fleet_state_t). A report is refused,
 * and logged (the first 10, then every 1,000th), unless
 *   - its role and index are the run's (INVALID_ARGUMENT, "unknown role");
 *   - it carries the credential of that role, index and incarnation (PERMISSION_DENIED);
 *   - its incarnation is no older than the newest seen for that role and index
 *     (FAILED_PRECONDITION: a replaced process);
 *   - its figures can be true (INVALID_ARGUMENT naming the figure): memory private <=
 *     resident <= FL_FLEET_MAX_PROCESS_BYTES, CPU seconds finite in [0, 1e12], returns finite and at
 *     most max_abs_reward a step in magnitude, epsilon and wait fraction in [0, 1], an
 *     evaluation's values finite with min <= mean <= max, and within an incarnation
 *     counters that do not go back nor grow faster than any env or learner can (env steps
 *     by 1e8 a second, learner steps by 1e6 a second, samples by 1e9 a second, plus as
 *     much again at once).
 * A newer incarnation of an actor counts from zero again on top of its predecessors. */
fl_status fl_fleet_state_on_report(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply);

/* fl_clock_sec() of the latest accepted report of an actor, learner or evaluator (0: none
 * yet); < 0 for any other role or index. Locks mu. */
double fl_fleet_state_last_report(fl_fleet_state_t *fs, const char *role, int index);

/* Moves up to max queued results, oldest first, into out; returns how many. Locks mu. */
int fl_fleet_state_take_evals(fl_fleet_state_t *fs, fl_eval_result_t *out, int max);
/* The same for complete rounds (run.deterministic). */
int fl_fleet_state_take_rounds(fl_fleet_state_t *fs, fl_round_row_t *out, int max);

/* Under mu: the mean of the fleet's last (<= FL_FLEET_RETURN_WINDOW) training returns,
 * their count in *count; the learners' steps (apex: learner 0's, gorila: the sum); the
 * actors' env steps. */
double fl_fleet_state_mean_return(const fl_fleet_state_t *fs, uint64_t *count);
uint64_t fl_fleet_state_learner_steps(const fl_fleet_state_t *fs);
uint64_t fl_fleet_state_env_steps(const fl_fleet_state_t *fs);
/* Under mu: actor a's mean over its recent episodes (count in *count, 0 = none yet). */
double fl_fleet_state_actor_return(const fl_fleet_state_t *fs, int a, uint64_t *count);

/* The launcher's figures that a resumed experiment continues from (with the tables). */
#define FL_FLEET_SUPERVISION_COUNTERS 16
typedef struct fl_fleet_totals {
    double elapsed_s;
    uint64_t env_steps, learner_steps, samples, replay_inserted;
    uint64_t n_evals;
    double best_eval;
    fl_eval_result_t eval; /* the latest evaluation (when n_evals > 0) */
    /* The supervision's counters (restarts, crashes, hangs, per role: the launcher's
     * layout, launcher/open.c), carried over a resume; 0 from a state file without them. */
    uint64_t supervision[FL_FLEET_SUPERVISION_COUNTERS];
} fl_fleet_totals_t;

/* Writes the tables' resumable part (the training-return windows, the actors' env steps,
 * joined actors' included, the learners' steps and samples) and t to path (common/statefile.h). Locks mu. */
fl_status fl_fleet_state_save(fl_fleet_state_t *fs, const fl_fleet_totals_t *t, const char *path, fl_err_t *err);
/* Reads what fl_fleet_state_save wrote into fs (made with the same role counts; other
 * counts are refused, naming both) and *t. The actors that joined earlier sittings keep
 * their slots and figures, marked FL_JOINED_LEFT (newcomers get the indices after theirs). The roles' progress-line
 * baselines become the saved counters, so that the first rates after a resume are true. Locks mu. */
fl_status fl_fleet_state_restore(fl_fleet_state_t *fs, fl_fleet_totals_t *t, const char *path, fl_err_t *err);

#endif
