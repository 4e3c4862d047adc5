/* evaluator: the evaluator role, as in the Ape-X paper. A separate process that takes the
 * latest parameters from the parameter server every eval.every (seconds, or learner steps
 * of the fleet as the launcher reports them), plays eval.episodes episodes with
 * eval.epsilon on env seeds of its own (eval/evaluate.h) and reports the result to the
 * launcher: mean, standard deviation, 95% confidence interval, minimum and maximum of the
 * return and the length, with the parameter version evaluated and the fleet's env and
 * learner steps when those parameters were taken.
 *
 * The loop: wait for the first published parameters; then, whenever an evaluation is
 * due and the server holds a version newer than the last one evaluated: fetch it, ask the
 * launcher for the fleet's step counts (a report), evaluate, and send the result in a
 * forced report (Report.extra, the names below). A version already evaluated is not
 * evaluated again: a fleet whose learner has stopped publishing is not re-measured.
 *
 * The env is env.* without its training-only wrappers (episodiclife, clipreward:
 * fl_wrappers_for_evaluation), so that an evaluation's returns are whole games' scores.
 *
 * Seeds: evaluation round r of evaluator i uses the r-th draw of stream
 * FL_EVALUATOR_SEED_STREAM + i of run.seed, so evaluators never share env seeds with one
 * another or with the actors (streams 0 .. actor.count - 1), and a run is reproducible.
 * With state_dir set, an evaluation that beats every earlier one of this evaluator writes
 * its parameters to state_dir/best-<index>.safetensors (format fleet.policy: the online
 * network's tensors, as a learner checkpoint names them, with model.spec, param_version,
 * eval.return_mean, eval.episodes, learner.steps and env_steps), which `fleet eval RUN_DIR`
 * plays by default; with resume the best so far is that file's.
 * With state_dir set, the round count, the totals and the seed generator are written to
 * state_dir/evaluator-<index>.state after every evaluation; with resume they are read
 * back, so a resumed experiment's evaluations continue the rounds and the seeds.
 *
 * Stop: on fl_stop_requested(), fl_evaluator_stop or the launcher's request, also in the
 * middle of an evaluation (checked at every step; the partial evaluation is dropped).
 * Lifecycle and threads as for actors (actors/actor.h). */
#ifndef FL_EVAL_EVALUATOR_H
#define FL_EVAL_EVALUATOR_H

#include <stdint.h>

#include "common/status.h"
#include "envs/factory.h"
#include "kernels/qnet.h"

#define FL_EVALUATOR_SEED_STREAM (1ull << 40)

/* The Report.extra names of an evaluation result, in this order. */
/* clang-format off */
#define FL_EVALUATOR_RESULT(X)                                                                          \
    X(round)                                                                                            \
    X(return_mean) X(return_std) X(return_ci95) X(return_min) X(return_max)                             \
    X(length_mean) X(length_min) X(length_max)                                                          \
    X(episodes) X(truncated) X(epsilon) X(seconds) X(at_env_steps) X(at_learner_steps)
/* clang-format on */
#define FL__EVALUATOR_NAME(n) "eval_" #n,
#define FL__EVALUATOR_ENUM(n) FL_EVAL_RESULT_##n,
/* FL_EVAL_RESULT_round, FL_EVAL_RESULT_return_mean, ...: the results' indices. */
enum { FL_EVALUATOR_RESULT(FL__EVALUATOR_ENUM) FL_EVALUATOR_RESULT_COUNT };
/* "eval_round", "eval_return_mean", ...: index i's Report.extra name. */
extern const char *const fl_evaluator_result_names[FL_EVALUATOR_RESULT_COUNT];

typedef struct fl_evaluator_opts {
    fl_env_factory_opts_t env;    /* env.*: the env evaluated (env.num_envs is not used) */
    const char *model_spec;       /* model.spec */
    double input_scale;           /* model.input_scale */
    fl_qnet_backend_kind backend; /* model.cpu_kernels: the network's kernels */
    double every;                 /* eval.every */
    int every_learner_steps;      /* eval.every_unit = learner_steps (else seconds) */
    int episodes;                 /* eval.episodes */
    double epsilon;               /* eval.epsilon */
    int64_t max_episode_steps;    /* eval.max_episode_steps (0 = the env's own limits) */
    int parallel;                 /* eval.parallel */
    int count;                    /* run.evaluators (index < count) */
    uint64_t seed;                /* run.seed */
    double progress_every;        /* run.progress_every: reports while waiting, every progress_every / 2 s */
    const char *state_dir;        /* run.checkpoint_dir: evaluator-<index>.state is kept there ("" = none) */
    double state_every;           /* run.checkpoint_every (the state is written after every evaluation) */
    int resume;                   /* start from state_dir's file (fleet run --resume) */
    /* run.deterministic: lockstep rounds. The evaluator is Round participant
     * actors + 1 + index: it evaluates parameter version r for r = 1, 1 + round_every, ...
     * (fetched exactly: the fleet waits for it), marking rounds r .. r + round_every - 1
     * done. The Round calls go to replay_addr. Its results carry the env and learner steps
     * of the version: (r - 1) * round_env_steps, and round_updates per round the learner
     * trained in before r (from the shard's first_full_round). */
    int deterministic;
    int64_t actors;          /* actor.count */
    int64_t round_every;     /* eval.every learner steps in rounds (fl_options_round_updates), >= 1 */
    int64_t round_updates;   /* the learner's updates per round */
    int64_t round_env_steps; /* actor.count * actor.sync_every */
    const char *replay_addr; /* the replay shard ("" = none) */
} fl_evaluator_opts_t;

void fl_evaluator_opts_init(fl_evaluator_opts_t *o);

/* What an evaluator did; final once fl_evaluator_run has returned. */
typedef struct fl_evaluator_stats {
    uint64_t rounds;          /* evaluations completed */
    uint64_t episodes, steps; /* in all */
    uint64_t last_version;    /* parameter version of the last evaluation (0 = none) */
    double last_return_mean;
} fl_evaluator_stats_t;

typedef struct fl_evaluator fl_evaluator_t;

/* Evaluator `index` of opts->count: opens the envs, builds the network, connects the
 * parameter client (param_addr, required) and the reporter (control_addr, NULL or "" =
 * none: then eval.every_unit = learner_steps is refused, as nothing tells the steps).
 * Errors name the key or option at fault. */
fl_status fl_evaluator_create(const fl_evaluator_opts_t *opts, int index, const char *param_addr,
                              const char *control_addr, fl_evaluator_t **out, fl_err_t *err);
/* Runs until it stops; FL_OK on a clean stop. Errors: parameters of another size on the
 * server, the envs' and the network's errors. */
fl_status fl_evaluator_run(fl_evaluator_t *e, fl_err_t *err);
void fl_evaluator_stop(fl_evaluator_t *e); /* any thread */
void fl_evaluator_stats(const fl_evaluator_t *e, fl_evaluator_stats_t *out);
void fl_evaluator_destroy(fl_evaluator_t *e); /* NULL is a no-op */

#endif
