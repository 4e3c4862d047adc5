/* registry: the built-in environments, found by name.
 *
 * The registry is a constant table of definitions compiled into fl_envs; lookups are
 * pure and thread-safe. Each built-in's definition is also exported by symbol so code
 * (and tests) can name it directly, and where an env's state layout is part of its
 * contract (for tests that set a state, or tools that inspect one) it is declared here. */
#ifndef FL_ENVS_REGISTRY_H
#define FL_ENVS_REGISTRY_H

#include "envs/env.h"

/* The definition named `name` (exact, case-sensitive), or NULL. */
const fl_env_def_t *fl_env_find(const char *name);
/* Like fl_env_find, but an unknown name is FL_NOT_FOUND with a message listing the
 * known names. */
fl_status fl_env_lookup(const char *name, const fl_env_def_t **out, fl_err_t *err);
/* Iteration: fl_env_at(i) for 0 <= i < fl_env_count(); NULL out of range. */
int fl_env_count(void);
const fl_env_def_t *fl_env_at(int i);
/* The largest |reward| one step of the built-in env `name` can give (a bound the code
 * guarantees, not the usual value), or 0 where none is declared: the Atari games (whose
 * raw scores per frame vary by game; the presets clip them) and every plugin. It bounds
 * the rewards and priorities the replay takes by default (docs/security.md). */
double fl_env_reward_bound(const char *name);

/* ---- Built-in environments ----------------------------------------------------------- */

/* "cartpole": CartPole-v1, identical to Gymnasium's CartPoleEnv (Euler integration).
 * Observation float32 (4,): x, x_dot, theta, theta_dot; actions 0 (push left), 1 (push
 * right); reward 1 every step including the terminating one; terminates when |x| > 2.4
 * or |theta| > 12 degrees; truncated at 500 steps. The dynamics run in double precision
 * and the observation is the state rounded to float, as Gymnasium does. */
extern const fl_env_def_t fl_env_cartpole;

/* The state of one cartpole instance (state_size == sizeof(fl_cartpole_state_t)). A
 * caller may overwrite it between steps to put the system into a chosen state. */
typedef struct fl_cartpole_state {
    double x, x_dot, theta, theta_dot;
} fl_cartpole_state_t;

#endif
