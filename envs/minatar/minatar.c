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
    /* MinAtar's Gymnasium ids ("MinAtar/Breakout-v1", the minimal action set) name the
     * -v1 envs; "-v0" (the full set) the others. */
    {.def = &fl_env_minatar_asterix, .reward_bound = 2, .gym_id = "MinAtar/Asterix-v0"},
    {.def = &fl_env_minatar_asterix_v1, .reward_bound = 2, .gym_id = "MinAtar/Asterix-v1"},
    {.def = &fl_env_minatar_breakout, .reward_bound = 1, .gym_id = "MinAtar/Breakout-v0"},
    {.def = &fl_env_minatar_breakout_v1, .reward_bound = 1, .gym_id = "MinAtar/Breakout-v1"},
    {.def = &fl_env_minatar_freeway, .reward_bound = 1, .gym_id = "MinAtar/Freeway-v0"},
    {.def = &fl_env_minatar_freeway_v1, .reward_bound = 1, .gym_id = "MinAtar/Freeway-v1"},
    {.def = &fl_env_minatar_seaquest, .reward_bound = 110, .gym_id = "MinAtar/Seaquest-v0"},
    {.def = &fl_env_minatar_seaquest_v1, .reward_bound = 110, .gym_id = "MinAtar/Seaquest-v1"},
    {.def = &fl_env_minatar_space_invaders, .reward_bound = 100, .gym_id = "MinAtar/SpaceInvaders-v0"},
    {.def = &fl_env_minatar_space_invaders_v1, .reward_bound = 100, .gym_id = "MinAtar/SpaceInvaders-v1"},
};

const fl_env_family_t fl_env_family_minatar = {
    .name = "minatar",
    .rows = rows,
    .num_rows = (int)(sizeof rows / sizeof rows[0]),
};
