/* breakout: MinAtar Breakout on a 10x10 grid (docs/minatar.md, section 3).
 *
 * A paddle on the bottom row keeps a diagonally moving ball in play; the ball breaks
 * bricks in rows 1..3 for +1 each. Observation uint8 (10, 10, 4) laid out
 * [row][col][channel]. Two definitions: "minatar-breakout" (the 6 full actions) and
 * "minatar-breakout-v1" (the minimal set). Sticky actions, the generator choice and the
 * difficulty-ramping switch come from the env options through the common MinAtar layer
 * (envs/minatar/common.h).
 *
 * The state layout is part of the contract: tests and tools may put an instance into a
 * chosen state between steps. */
#ifndef FL_ENVS_MINATAR_BREAKOUT_H
#define FL_ENVS_MINATAR_BREAKOUT_H

#include <stdint.h>

#include "envs/core/env.h"
#include "envs/minatar/common.h"

/* ---- Breakout (spec 3) ---------------------------------------------------------------
 * Channels: 0 paddle, 1 ball, 2 trail (previous ball cell), 3 bricks. Minimal set:
 * noop, left, right. */
#define FL_BREAKOUT_CHANNELS 4

typedef struct fl_breakout_state {
    fl_minatar_common_t common;
    int paddle;         /* column of the paddle on row 9 */
    int ball_y, ball_x; /* ball cell */
    int dx, dy;         /* heading, each -1 or +1 */
    int last_y, last_x; /* previous ball cell (trail) */
    int strike;         /* a brick broke and no step without brick contact since */
    uint8_t bricks[FL_MINATAR_ROWS][FL_MINATAR_COLS];
} fl_breakout_state_t;

extern const fl_env_def_t fl_env_minatar_breakout;
extern const fl_env_def_t fl_env_minatar_breakout_v1;

#endif
