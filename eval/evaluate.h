/* evaluate: plays whole episodes with a Q-network's epsilon-greedy policy and sums them
 * up. The one episode loop of the evaluator role (eval/evaluator.h), `fleet eval` and
 * `fleet env record --checkpoint`.
 *
 * Episode k (k = 0, 1, ...) of a call runs on an instance seeded with stream k of the
 * call's seed and draws its exploration from stream FL_EVAL_EXPLORE_STREAM + k, so its
 * trace does not depend on how many episodes run side by side (`parallel`): the same
 * network, seed and epsilon give the same episodes (up to ties between Q-values that a
 * different batch size rounds differently). `parallel` instances step together with one
 * batched forward per step; an instance that finishes starts the next episode not yet
 * started. Each episode begins on a zeroed, configured, freshly reset instance (an
 * Atari instance takes the emulator the last one left, restarted as a new one: envs/atari/atari.h).
 *
 * An episode ends when the wrapped env terminates or truncates (its own step limit, the
 * wrappers' `maxsteps`, env.max_episode_steps), or after max_episode_steps agent steps
 * when that is > 0 (counted as truncated).
 *
 * Ownership: an fl_evaluation_t owns its instances and buffers (allocated by create; a
 * run allocates nothing); it borrows the wrapped env and the options, which must outlive
 * it, and the network of each run. One owner thread. */
#ifndef FL_EVAL_EVALUATE_H
#define FL_EVAL_EVALUATE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "envs/core/wrappers.h"
#include "kernels/qnet.h"

#define FL_EVAL_EXPLORE_STREAM (1ull << 32)

/* What a set of episodes gave. ci95: half-width of the 95% confidence interval of the
 * mean return (Student's t with episodes - 1 degrees of freedom, times std / sqrt(n));
 * 0 for one episode. std is the sample standard deviation (n - 1), 0 for one episode
 * (both as common/stats.h defines them). */
typedef struct fl_eval_stats {
    int episodes;
    int truncated; /* episodes that ended by a step limit, not by termination */
    double return_mean, return_std, return_min, return_max, return_ci95;
    double length_mean, length_min, length_max;
    uint64_t steps; /* agent steps in all */
    double seconds; /* wall time of the run */
} fl_eval_stats_t;

/* Called after every agent step of episode `episode` with the instance's state (for
 * fl_wrapped_env_inner_state and the inner env's render), the step's number in the
 * episode (1, 2, ...) and its reward; and once with step 0 after the reset. Returning
 * nonzero stops the run (FL_CANCELLED). */
typedef int (*fl_eval_step_fn)(void *user, int episode, const void *state, int64_t step, float reward);

typedef struct fl_evaluation fl_evaluation_t;

/* Up to `parallel` (>= 1) instances of w with the per-instance options opts (may be
 * NULL: nothing to configure). FL_INVALID_ARGUMENT when the env's observations have no
 * float conversion or the env refuses opts (tried here on one instance, so that a bad
 * option fails the evaluator's creation, not its first episode); FL_NO_MEMORY. */
fl_status fl_evaluation_create(const fl_wrapped_env_t *w, const fl_env_options_t *opts, int parallel,
                               fl_evaluation_t **out, fl_err_t *err);
void fl_evaluation_destroy(fl_evaluation_t *e); /* NULL is a no-op */

/* Plays `episodes` (>= 1) episodes of net's policy with exploration epsilon in [0, 1].
 * net: built for w's observations and actions with max_batch >= parallel.
 * returns, lengths: NULL, or `episodes` slots that get each episode's return and length
 * in episode order. on_step: NULL, or called as described above.
 * Errors: FL_INVALID_ARGUMENT for bad arguments or a network of another shape (naming
 * both), the network's and the env's errors, FL_CANCELLED when on_step asked to stop. */
fl_status fl_evaluation_run(fl_evaluation_t *e, fl_qnet_t *net, int episodes, double epsilon, uint64_t seed,
                            int64_t max_episode_steps, fl_eval_step_fn on_step, void *user, float *returns,
                            uint32_t *lengths, fl_eval_stats_t *stats, fl_err_t *err);

/* The statistics of n returns and lengths (as fl_evaluation_run fills them; steps and
 * seconds are left 0, truncated too). n >= 1. */
void fl_eval_summarize(const float *returns, const uint32_t *lengths, int n, fl_eval_stats_t *out);

#endif
