/* minatar: the MinAtar family's rows in the registry (see minatar.h).
 *
 * Reward bounds, what one step can give at most: breakout and freeway 1 (the reward is
 * set, not added); asterix 2 (one contact check before and one after the entities move,
 * 1 for gold each); space_invaders 100: one per alien hit this step, at most one alien
 * per cell of the 10x10 grid; seaquest 110: one per enemy killed (by a bullet, or by
 * moving into one), at most one per cell, plus at most 10 for surfacing with six divers.
 * A game's -v1 has the bound of its full-action env. */
#include "envs/minatar/minatar.h"

static const fl_env_row_t rows[] = {
    {&fl_env_minatar_asterix, 2},          {&fl_env_minatar_asterix_v1, 2},
    {&fl_env_minatar_breakout, 1},         {&fl_env_minatar_breakout_v1, 1},
    {&fl_env_minatar_freeway, 1},          {&fl_env_minatar_freeway_v1, 1},
    {&fl_env_minatar_seaquest, 110},       {&fl_env_minatar_seaquest_v1, 110},
    {&fl_env_minatar_space_invaders, 100}, {&fl_env_minatar_space_invaders_v1, 100},
};

const fl_env_family_t fl_env_family_minatar = {
    .name = "minatar",
    .rows = rows,
    .num_rows = (int)(sizeof rows / sizeof rows[0]),
};
