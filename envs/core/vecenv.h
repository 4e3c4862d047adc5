/* vecenv: N instances of one environment stepped together, with time limits and
 * automatic reset.
 *
 * The vecenv owns the instances' state (one flat block), their generators (instance i is
 * seeded with fl_rng_init_stream(seed, i), so a run is reproducible and instances
 * differ), per-instance step counters and running returns. Every observation, reward and
 * flag buffer is the caller's, laid out struct-of-arrays with the instance index first.
 * fl_vecenv_step allocates nothing.
 *
 * Episode ends: an instance whose step terminated (the env says so) or hit the step
 * limit (truncated: time limit reached without termination; a step that does both is
 * terminated only) is reset inside the same fl_vecenv_step call. Its slot in `obs` then
 * holds the first observation of the new episode, and its slot in `final_obs` the last
 * observation of the finished one, which is what n-step targets bootstrap from.
 *
 * Failure: create answers errors with a message; step rejects out-of-range actions
 * before stepping any instance. Not thread-safe: one owner per vecenv (use one vecenv
 * per thread). */
#ifndef FL_ENVS_VECENV_H
#define FL_ENVS_VECENV_H

#include <stddef.h>
#include <stdint.h>

#include "envs/core/env.h"

typedef struct fl_vecenv fl_vecenv_t;

/* The return and length of an episode that ended at this step; zero where none did. */
typedef struct fl_episode_stats {
    double episode_return; /* sum of the episode's rewards */
    int64_t length;        /* number of steps in the episode */
} fl_episode_stats_t;

/* Creates num_envs instances of def (validated with fl_env_validate). max_episode_steps
 * overrides the definition's limit when > 0; 0 keeps def->max_episode_steps (which may
 * itself be 0 = no limit). The instances need fl_vecenv_reset before the first step.
 * def must outlive the vecenv. */
fl_status fl_vecenv_create(const fl_env_def_t *def, int num_envs, uint64_t seed, int max_episode_steps,
                           fl_vecenv_t **out, fl_err_t *err);
void fl_vecenv_destroy(fl_vecenv_t *ve);

/* Hands the experiment's [env] options to every instance through the definition's
 * configure function (nothing happens when it is NULL: the env takes no options). Must
 * come after create and before the first fl_vecenv_reset: FL_FAILED_PRECONDITION
 * otherwise. FL_INVALID_ARGUMENT, naming the env, the instance and the options, when
 * configure rejects them. opts (and opts->args) must outlive the vecenv. */
fl_status fl_vecenv_configure(fl_vecenv_t *ve, const fl_env_options_t *opts, fl_err_t *err);

/* Starts a new episode in every instance (continuing each instance's random stream) and
 * writes the first observations. obs: (N, obs_size) bytes. */
void fl_vecenv_reset(fl_vecenv_t *ve, void *obs);

/* One step of every instance.
 *   actions     (N)            action of each instance, 0 <= a < num_actions
 *   obs         (N, obs_size)  next observation; for an instance whose episode ended,
 *                              the first observation of its new episode
 *   rewards     (N)
 *   terminated  (N)            1 if the episode reached a terminal state
 *   truncated   (N)            1 if the episode hit the step limit without terminating
 *   final_obs   (N, obs_size)  where terminated|truncated: the last observation of the
 *                              finished episode; elsewhere left unchanged. May be NULL.
 *   done_stats  (N)            where terminated|truncated: the finished episode's return
 *                              and length; zero elsewhere. May be NULL.
 * FL_INVALID_ARGUMENT (nothing stepped) if an action is out of range, naming the
 * instance, the action and the valid range; FL_FAILED_PRECONDITION before the first
 * fl_vecenv_reset. */
fl_status fl_vecenv_step(fl_vecenv_t *ve, const int32_t *actions, void *obs, float *rewards, uint8_t *terminated,
                         uint8_t *truncated, void *final_obs, fl_episode_stats_t *done_stats, fl_err_t *err);

const fl_env_def_t *fl_vecenv_def(const fl_vecenv_t *ve);
int fl_vecenv_num_envs(const fl_vecenv_t *ve);
/* Bytes of one observation (fl_env_obs_size of the definition). */
size_t fl_vecenv_obs_size(const fl_vecenv_t *ve);
/* The step limit in effect (0 = none). */
int fl_vecenv_max_episode_steps(const fl_vecenv_t *ve);
/* Steps taken so far in instance i's current episode. */
int64_t fl_vecenv_elapsed(const fl_vecenv_t *ve, int i);
/* Instance i's state (def->state_size bytes), for rendering, inspection, or putting an
 * instance into a chosen state between steps (layouts of built-ins: their families'
 * headers, e.g. envs/classic/classic.h). */
void *fl_vecenv_state(fl_vecenv_t *ve, int i);
/* Instance i's random generator (NULL out of range): what a checkpoint saves and a
 * resumed run sets before its first reset, so that the instances' streams continue. */
fl_rng_t *fl_vecenv_rng(fl_vecenv_t *ve, int i);

/* ---- Internal: vectors of instances that are not a plain definition ---------------------
 * envs/core/wrappers.c steps wrapper chains with this loop. def names the instances (name,
 * num_actions); reset and step act on one instance (step reports truncation itself: the
 * vector adds no time limit); configure_def's configure receives the options. */
typedef struct fl__vec_instances {
    const fl_env_def_t *def;
    const fl_env_def_t *configure_def;
    const void *ctx;
    size_t state_size, obs_size;
    void (*reset)(const void *ctx, void *state, fl_rng_t *rng, void *obs);
    void (*step)(const void *ctx, void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated,
                 int *truncated);
} fl__vec_instances_t;

/* inst must outlive the vector; messages name it "wrapvec '<name>'". */
fl_status fl__vecenv_create_instances(const fl__vec_instances_t *inst, int num_envs, uint64_t seed, fl_vecenv_t **out,
                                      fl_err_t *err);

#endif
