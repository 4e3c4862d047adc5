/* classic: the classic-control family's rows in the registry (see classic.h).
 *
 * Reward bounds, what one step can give at most: cartpole 1 (every step), mountaincar
 * and acrobot |-1|. */
#include "envs/classic/classic.h"

static const fl_env_row_t rows[] = {
    {&fl_env_cartpole, 1},
    {&fl_env_mountaincar, 1},
    {&fl_env_acrobot, 1},
};

const fl_env_family_t fl_env_family_classic = {
    .name = "classic",
    .rows = rows,
    .num_rows = (int)(sizeof rows / sizeof rows[0]),
};
