/* seaquest: MinAtar Seaquest on a 10x10 grid (docs/minatar.md, section 5).
 *
 * The player's submarine shoots fish and enemy subs, collects divers and must surface
 * before its oxygen runs out; surfacing with six divers pays the remaining oxygen as a
 * bonus, surfacing with none ends the episode. Observation uint8 (10, 10, 10) laid out
 * [row][col][channel] with channels: 0 sub front, 1 sub back, 2 friendly bullet, 3 trail
 * (behind cell of fish, enemy subs and divers), 4 enemy bullet, 5 fish, 6 enemy sub,
 * 7 oxygen gauge, 8 diver gauge, 9 diver.
 *
 * Two definitions: "minatar-seaquest" (the 6 full actions) and "minatar-seaquest-v1"
 * (the minimal set, which for Seaquest is the same 6 actions in the same order). Sticky
 * actions, the generator choice (fleet's or the reference-compatible one) and the
 * difficulty-ramping switch come from the env options through the common MinAtar layer
 * (envs/minatar/common.h).
 *
 * The game itself is also exposed below as a plain value type so that tests and tools can
 * put a game into a chosen state and step it without the wrapper. Every list has a fixed
 * capacity (FL_SEAQUEST_MAX_LIST); the rules keep each list far below it (spec 1.7), and
 * an overflow is an internal bug caught by an assert. Nothing here allocates; functions are
 * pure over the state and generator they are given, so instances may run on any threads. */
#ifndef FL_ENVS_MINATAR_SEAQUEST_H
#define FL_ENVS_MINATAR_SEAQUEST_H

#include <stdint.h>

#include "envs/core/env.h"
#include "envs/minatar/common.h"

extern const fl_env_def_t fl_env_minatar_seaquest;
extern const fl_env_def_t fl_env_minatar_seaquest_v1;

#define FL_SEAQUEST_CHANNELS 10
#define FL_SEAQUEST_MAX_LIST 64
#define FL_SEAQUEST_MAX_OXYGEN 200
#define FL_SEAQUEST_MAX_DIVERS 6

/* One mover: column x, row y, heading dir (+1 right, -1 left), move timer (entity timer)
 * and, for enemy subs only, the shot timer. Bullets use only x, y and dir. */
typedef struct fl_seaquest_obj {
    int8_t x, y, dir;
    int8_t move_timer;
    int8_t shot_timer;
} fl_seaquest_obj_t;

/* A list in creation order: items[0] is the oldest. */
typedef struct fl_seaquest_list {
    int n;
    fl_seaquest_obj_t items[FL_SEAQUEST_MAX_LIST];
} fl_seaquest_list_t;

/* The whole game state (spec 5.1). */
typedef struct fl_seaquest {
    int sub_x, sub_y;   /* front cell; sub_y in 0..8, row 0 is the surface */
    int sub_dir;        /* facing: -1 left, +1 right */
    int oxygen;         /* 0..200 */
    int divers;         /* signed: goes to -1 after a full surfacing (spec 5.9) */
    int at_surface;     /* 1 until the sub has ended a step below row 0 */
    int shot_cooldown;  /* global timer, 0 = may fire */
    int spawn_interval; /* enemy spawn interval, 20 down to 1 */
    int spawn_timer;    /* enemy spawn global timer */
    int diver_timer;    /* diver spawn global timer (reload 30) */
    int move_interval;  /* enemy move interval, 5 down to 2 */
    int ramp_index;     /* number of ramps so far */
    int ramping;        /* difficulty ramping switch (not touched by reset) */
    int terminal;
    fl_seaquest_list_t f_bullets, divers_list, subs, fish, e_bullets;
} fl_seaquest_t;

/* One env instance (state_size of both definitions): the common MinAtar part first, as
 * envs/minatar/common.h requires, then the game. Tests may overwrite `game` between steps. */
typedef struct fl_seaquest_env_state {
    fl_minatar_common_t common;
    fl_seaquest_t game;
} fl_seaquest_env_state_t;

/* Puts the game in its initial state (no draws). Keeps g->ramping (the env wrapper copies
 * the instance's ramping option into it before every reset and step). */
void fl_seaquest_reset(fl_seaquest_t *g);
/* One game step with a full action index (0..5), drawing from gen. Returns the reward
 * and sets g->terminal; stepping an ended game returns 0 and changes nothing. */
int fl_seaquest_step(fl_seaquest_t *g, int action, fl_minatar_gen_t *gen);
/* Writes the observation, uint8 (10, 10, 10) [row][col][channel]. */
void fl_seaquest_obs(const fl_seaquest_t *g, uint8_t *obs);

#endif
