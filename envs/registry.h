/* registry: the built-in environments, found by name.
 *
 * The built-ins come in families, each with its own folder and its own rows (envs/core/
 * family.h): classic control (envs/classic/), MinAtar (envs/minatar/) and, when the build
 * has ALE, Atari (envs/atari/). This registry lists them in that order; `fleet env list`
 * shows them so. Lookups are pure and thread-safe. Each built-in's definition is also
 * exported by symbol from its family's headers (envs/classic/classic.h, the MinAtar game
 * headers, envs/atari/atari.h), with its state layout where that is part of the contract
 * (for tests that set a state, or tools that inspect one). */
#ifndef FL_ENVS_REGISTRY_H
#define FL_ENVS_REGISTRY_H

#include "envs/core/env.h"

/* The definition named `name` (exact, case-sensitive; a Gymnasium id that names the
 * same env, such as "CartPole-v1" or "MinAtar/Breakout-v1", too), or NULL. */
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
 * the rewards and priorities the replay takes by default (docs/security.md). Each
 * family's rows declare their bounds. */
double fl_env_reward_bound(const char *name);
/* The most an episode of the built-in env `name` can return, where its game caps it
 * (CartPole's 500, Pong's 21): 0 with *max, or -1 where it is not declared. */
int fl_env_return_max(const char *name, double *max);

#endif
