/* freeway: MinAtar Freeway on a 10x10 grid (docs/minatar.md, section 4).
 *
 * A chicken in column 4 crosses eight lanes of traffic from row 9 to row 0 for +1 per
 * crossing; a car hitting it only sends it back to row 9. Observation uint8 (10, 10, 7)
 * laid out [row][col][channel]. Two definitions: "minatar-freeway" (the 6 full actions)
 * and "minatar-freeway-v1" (the minimal set). Sticky actions, the generator choice and
 * the difficulty-ramping switch come from the env options through the common MinAtar
 * layer (envs/minatar/common.h).
 *
 * The state layout is part of the contract: tests and tools may put an instance into a
 * chosen state between steps. */
#ifndef FL_ENVS_MINATAR_FREEWAY_H
#define FL_ENVS_MINATAR_FREEWAY_H

#include "envs/core/env.h"
#include "envs/minatar/common.h"

/* ---- Freeway (spec 4) ----------------------------------------------------------------
 * Channels: 0 chicken, 1 car, 2..6 trail of a car with |v| = 1..5 (wrapping). Minimal
 * set: noop, up, down. Every episode is exactly 2501 steps (a true terminal). */
#define FL_FREEWAY_CHANNELS 7
#define FL_FREEWAY_NUM_CARS 8
#define FL_FREEWAY_BUDGET 2500
#define FL_FREEWAY_COOLDOWN 3

typedef struct fl_freeway_state {
    fl_minatar_common_t common;
    int chicken_y;                      /* row of the chicken (always column 4) */
    int cooldown;                       /* move cooldown */
    int budget;                         /* steps left before the terminal */
    int car_x[FL_FREEWAY_NUM_CARS];     /* car i is on row i + 1 */
    int car_v[FL_FREEWAY_NUM_CARS];     /* signed speed in -5..-1, 1..5 */
    int car_timer[FL_FREEWAY_NUM_CARS]; /* entity timer, reload |v| */
} fl_freeway_state_t;

extern const fl_env_def_t fl_env_minatar_freeway;
extern const fl_env_def_t fl_env_minatar_freeway_v1;

#endif
