/* space_invaders: MinAtar Space Invaders on a 10x10 grid (docs/minatar.md, section 6).
 *
 * The cannon (channel 0) on row 9 shoots a formation of aliens (channel 1; channels 2
 * and 3 repeat it when it heads left or right); friendly bullets are channel 4, enemy
 * bullets channel 5. +1 per alien killed; the episode ends when an enemy bullet or an
 * alien reaches the cannon, or the formation must descend past row 9. The game draws no
 * random numbers: it is a function of the executed actions.
 *
 * Observations are uint8 (10, 10, 6) laid out [row][col][channel], values in {0, 1}.
 * Two definitions: "minatar-space_invaders" takes the 6 full actions,
 * "minatar-space_invaders-v1" the minimal set (noop, left, right, fire). Sticky actions,
 * the generator choice and the difficulty-ramping switch come from the env options
 * through the common MinAtar layer (envs/minatar/common.h).
 *
 * The game is also exposed as a plain value type so that tests and tools can put it into
 * a chosen state and step it without the wrapper, with full action indices (0..5).
 * Nothing here allocates; functions are pure over the state they are given, so
 * instances may run on any threads. */
#ifndef FL_ENVS_MINATAR_SPACE_INVADERS_H
#define FL_ENVS_MINATAR_SPACE_INVADERS_H

#include <stdint.h>

#include "envs/core/env.h"
#include "envs/minatar/common.h"

extern const fl_env_def_t fl_env_minatar_space_invaders;
extern const fl_env_def_t fl_env_minatar_space_invaders_v1;

#define FL_SPACE_INVADERS_CHANNELS 6

typedef struct fl_space_invaders {
    int cannon_x;              /* column on row 9 */
    uint8_t aliens[10][10];    /* [row][col], each cell 0 or 1 (as are both bullet maps) */
    uint8_t f_bullets[10][10]; /* friendly bullets, moving up */
    uint8_t e_bullets[10][10]; /* enemy bullets, moving down */
    int alien_dir;             /* formation heading: -1 left, +1 right */
    int move_interval;         /* 12 down to 6 */
    int move_timer;            /* global timer, reload min(alien count, move_interval) */
    int shot_timer;            /* alien shot global timer, reload 10 */
    int shot_cooldown;         /* cannon cooldown, 0 = may fire */
    int ramp_index;            /* number of ramps so far */
    int ramping;               /* difficulty ramping switch (not touched by reset) */
    int terminal;
} fl_space_invaders_t;

/* Puts the game in its initial state. Keeps g->ramping. */
void fl_space_invaders_reset(fl_space_invaders_t *g);
/* One game step with a full action index (0..5). Returns the reward and sets
 * g->terminal; stepping an ended game returns 0 and changes nothing. */
int fl_space_invaders_step(fl_space_invaders_t *g, int action);
/* Writes the observation, uint8 (10, 10, 6) [row][col][channel]: every one of its 600
 * bytes. */
void fl_space_invaders_obs(const fl_space_invaders_t *g, uint8_t *obs);

/* The state of one "minatar-space_invaders" instance (state_size == sizeof of it): the
 * common MinAtar layer's part, then the game. */
typedef struct fl_space_invaders_env_state {
    fl_minatar_common_t common;
    fl_space_invaders_t game;
} fl_space_invaders_env_state_t;

#endif
