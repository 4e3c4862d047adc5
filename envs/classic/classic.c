/* classic: the classic-control family's rows in the registry (see classic.h).
 *
 * Reward bounds, what one step can give at most: cartpole 1 (every step), mountaincar
 * and acrobot |-1|. */
#include "envs/classic/classic.h"

static const fl_env_row_t rows[] = {
    /* The Gymnasium ids name the same envs (Gymnasium-exact); a CartPole episode returns
     * at most its 500 steps of 1, MountainCar's and Acrobot's at most 0 (-1 a step until
     * the goal, 0 at it). */
    {.def = &fl_env_cartpole, .reward_bound = 1, .gym_id = "CartPole-v1", .has_return_max = 1, .return_max = 500},
    {.def = &fl_env_mountaincar, .reward_bound = 1, .gym_id = "MountainCar-v0", .has_return_max = 1, .return_max = 0},
    {.def = &fl_env_acrobot, .reward_bound = 1, .gym_id = "Acrobot-v1", .has_return_max = 1, .return_max = 0},
};

const fl_env_family_t fl_env_family_classic = {
    .name = "classic",
    .rows = rows,
    .num_rows = (int)(sizeof rows / sizeof rows[0]),
};
