/* asterix: MinAtar Asterix on a 10x10 grid (docs/minatar.md, section 2).
 *
 * The player (channel 0) moves in rows 1..8 while gold (channel 3) and enemies
 * (channel 1) cross the rows, one entity per row, leaving a trail (channel 2) behind
 * them. Touching gold pays +1, touching an enemy ends the episode. Spawns draw from the
 * instance's generator: side, then kind, then the free row.
 *
 * Observations are uint8 (10, 10, 4) laid out [row][col][channel], values in {0, 1}.
 * Two definitions: "minatar-asterix" takes the 6 full actions, "minatar-asterix-v1" the
 * minimal set (noop, left, up, right, down). Sticky actions, the generator choice and
 * the difficulty-ramping switch come from the env options through the common MinAtar
 * layer (envs/minatar/common.h).
 *
 * The game is also exposed as a plain value type so that tests and tools can put it into
 * a chosen state and step it without the wrapper, with full action indices (0..5).
 * Nothing here allocates; functions are pure over the state (and generator) they are
 * given, so instances may run on any threads. */
#ifndef FL_ENVS_MINATAR_ASTERIX_H
#define FL_ENVS_MINATAR_ASTERIX_H

#include <stdint.h>

#include "envs/core/env.h"
#include "envs/minatar/common.h"

extern const fl_env_def_t fl_env_minatar_asterix;
extern const fl_env_def_t fl_env_minatar_asterix_v1;

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

#endif
