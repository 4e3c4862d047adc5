/* minatar_games2: MinAtar Asterix and Space Invaders on a 10x10 grid (docs/minatar.md,
 * sections 2 and 6).
 *
 * Asterix: the player (channel 0) moves in rows 1..8 while gold (channel 3) and enemies
 * (channel 1) cross the rows, one entity per row, leaving a trail (channel 2) behind
 * them. Touching gold pays +1, touching an enemy ends the episode. Spawns draw from the
 * instance's generator: side, then kind, then the free row.
 *
 * Space Invaders: the cannon (channel 0) on row 9 shoots a formation of aliens (channel
 * 1; channels 2 and 3 repeat it when it heads left or right); friendly bullets are
 * channel 4, enemy bullets channel 5. +1 per alien killed; the episode ends when an
 * enemy bullet or an alien reaches the cannon, or the formation must descend past row 9.
 * The game draws no random numbers: it is a function of the executed actions.
 *
 * Observations are uint8 (10, 10, C) laid out [row][col][channel], values in {0, 1}.
 * Four definitions: "minatar-asterix" and "minatar-space_invaders" take the 6 full
 * actions; the "-v1" variants the minimal sets (Asterix: noop, left, up, right, down;
 * Space Invaders: noop, left, right, fire). Sticky actions, the generator choice and
 * the difficulty-ramping switch come from the env options through the common MinAtar
 * layer (envs/minatar.h).
 *
 * The games are also exposed as plain value types so that tests and tools can put a game
 * into a chosen state and step it without the wrapper, with full action indices (0..5).
 * Nothing here allocates; functions are pure over the state (and generator) they are
 * given, so instances may run on any threads. */
#ifndef FL_ENVS_MINATAR_GAMES2_H
#define FL_ENVS_MINATAR_GAMES2_H

#include <stdint.h>

#include "envs/env.h"
#include "envs/minatar.h"

extern const fl_env_def_t fl_env_minatar_asterix;
extern const fl_env_def_t fl_env_minatar_asterix_v1;
extern const fl_env_def_t fl_env_minatar_space_invaders;
extern const fl_env_def_t fl_env_minatar_space_invaders_v1;

/* ---- Asterix (spec 2) ------------------------------------------------------------------- */

#define FL_ASTERIX_CHANNELS 4
#define FL_ASTERIX_SLOTS 8

/* One entity slot; slot s is row s + 1. */
typedef struct fl_asterix_entity {
    int8_t active; /* 0 = empty slot */
    int8_t x;      /* column 0..9 */
    int8_t dir;    /* heading: +1 right, -1 left */
    int8_t gold;   /* 1 = gold (treasure), 0 = enemy */
} fl_asterix_entity_t;

typedef struct fl_asterix {
    int player_x, player_y; /* player_y in 1..8 */
    fl_asterix_entity_t slots[FL_ASTERIX_SLOTS];
    int spawn_interval; /* S: 10 down to 1 */
    int spawn_timer;    /* global timer, reload S */
    int move_interval;  /* M: 5 down to 1 */
    int move_timer;     /* global timer, reload M, shared by every entity */
    int ramp_counter;   /* R: steps until the next ramp, 100 at reset */
    int ramp_index;     /* number of ramps so far */
    int ramping;        /* difficulty ramping switch (not touched by reset) */
    int terminal;
} fl_asterix_t;

/* Puts the game in its initial state (no draws). Keeps g->ramping. */
void fl_asterix_reset(fl_asterix_t *g);
/* One game step with a full action index (0..5), drawing spawns from gen. Returns the
 * reward and sets g->terminal; stepping an ended game returns 0 and changes nothing. */
int fl_asterix_step(fl_asterix_t *g, int action, fl_minatar_gen_t *gen);
/* Writes the observation, uint8 (10, 10, 4) [row][col][channel]. */
void fl_asterix_obs(const fl_asterix_t *g, uint8_t *obs);

/* The state of one "minatar-asterix" instance (state_size == sizeof of it): the common
 * MinAtar layer's part, then the game. A caller may edit game between steps; reset
 * copies common.ramping into game.ramping. */
typedef struct fl_asterix_env_state {
    fl_minatar_common_t common;
    fl_asterix_t game;
} fl_asterix_env_state_t;

/* ---- Space Invaders (spec 6) ------------------------------------------------------------ */

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

/* The state of one "minatar-space_invaders" instance, laid out as for Asterix. */
typedef struct fl_space_invaders_env_state {
    fl_minatar_common_t common;
    fl_space_invaders_t game;
} fl_space_invaders_env_state_t;

#endif
