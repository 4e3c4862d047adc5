/* minatar: the MinAtar family (docs/minatar.md): its five games, each declared in the
 * header named after it over the common layer (envs/minatar/common.h), and its rows in
 * the registry.
 *
 * Every game has two definitions, "minatar-<game>" (the 6 full actions) and
 * "minatar-<game>-v1" (the game's minimal set). */
#ifndef FL_ENVS_MINATAR_H
#define FL_ENVS_MINATAR_H

#include "envs/core/family.h"
#include "envs/minatar/asterix.h"
#include "envs/minatar/breakout.h"
#include "envs/minatar/common.h"
#include "envs/minatar/freeway.h"
#include "envs/minatar/seaquest.h"
#include "envs/minatar/space_invaders.h"

/* The family's rows, in the order `fleet env list` shows them: the games by name, each
 * game's full-action env before its -v1. */
extern const fl_env_family_t fl_env_family_minatar;

#endif
