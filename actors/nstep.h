/* nstep: turns each env's stream of steps into n-step transitions (Ape-X actors).
 *
 * For the step taken at time t in one env, the transition is
 *     (obs_t, a_t, R_t = sum_{k<m} gamma^k r_{t+k}, discount_t, next_obs = obs_{t+m})
 * with m = n, or fewer when the episode ends first (m = the steps left in it). On
 * termination discount_t = 0 (next_obs is the final observation, unused by the target);
 * otherwise, including truncation by a time limit, discount_t = gamma^m and next_obs is
 * the observation the target bootstraps from (for truncation: the final observation).
 * So the learner's target is R_t + discount_t * max_a Q(next_obs, a) in every case.
 *
 * Each env keeps a ring of its last n-1 (obs, action, reward); a transition is emitted
 * as soon as its n-th step is seen, and every pending one is flushed when the episode
 * ends. Emitted transitions accumulate in columnar output arrays until fl_nstep_clear;
 * within one push they appear env by env, oldest first.
 *
 * Memory: create allocates the rings and an output buffer of 2 * num_envs * n
 * transitions. A push never allocates unless the output holds more than that many
 * minus num_envs * n un-cleared transitions, in which case the buffer doubles (an actor
 * that clears after each send never grows it). Not thread-safe: one owner. */
#ifndef FL_ACTORS_NSTEP_H
#define FL_ACTORS_NSTEP_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct fl_nstep fl_nstep_t;

/* A read-only view of the ready transitions (K = count), valid until the next push,
 * clear or destroy. */
typedef struct fl_nstep_batch {
    size_t count; /* K */
    size_t obs_bytes;
    const void *obs;       /* (K, obs_bytes) observation the action was taken in */
    const int32_t *action; /* (K) */
    const float *reward;   /* (K) R_t, discounted sum of m rewards */
    const float *discount; /* (K) gamma^m, or 0 if the episode terminated within the m steps */
    const void *next_obs;  /* (K, obs_bytes) observation m steps later (the final one at an episode end) */
    const int32_t *env;    /* (K) env index the transition came from */
    const int32_t *steps;  /* (K) m, the number of rewards summed, 1..n */
} fl_nstep_batch_t;

/* num_envs >= 1, n >= 1, 0 <= gamma <= 1, obs_bytes >= 1. */
fl_status fl_nstep_create(int num_envs, int n, float gamma, size_t obs_bytes, fl_nstep_t **out, fl_err_t *err);
void fl_nstep_destroy(fl_nstep_t *t);

/* Feeds one vector step of all num_envs envs.
 *   obs         (N, obs_bytes)  the observation each action was taken in
 *   actions     (N)
 *   rewards     (N)
 *   terminated  (N)             episode reached a terminal state at this step
 *   truncated   (N)             episode was cut by a time limit at this step
 *   next_obs    (N, obs_bytes)  the observation after the step; for an env whose
 *                               episode ended, the final observation (vecenv's
 *                               final_obs), not the first of the next episode
 * FL_NO_MEMORY if the output buffer had to grow and could not (nothing consumed). */
fl_status fl_nstep_push(fl_nstep_t *t, const void *obs, const int32_t *actions, const float *rewards,
                        const uint8_t *terminated, const uint8_t *truncated, const void *next_obs);

/* Number of ready transitions. */
size_t fl_nstep_ready(const fl_nstep_t *t);
/* The ready transitions (columns). */
void fl_nstep_view(const fl_nstep_t *t, fl_nstep_batch_t *out);
/* Drops the ready transitions (after they were sent). Pending ones are kept. */
void fl_nstep_clear(fl_nstep_t *t);
/* Steps of env i seen but not yet emitted (0..n-1). */
int fl_nstep_pending(const fl_nstep_t *t, int env);
/* Forgets the pending steps of every env without emitting them, for when the caller
 * restarts all episodes (e.g. fl_vecenv_reset) mid-way. */
void fl_nstep_discard_pending(fl_nstep_t *t);

int fl_nstep_n(const fl_nstep_t *t);
float fl_nstep_gamma(const fl_nstep_t *t);

#endif
