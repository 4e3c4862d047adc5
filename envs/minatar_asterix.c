/* minatar_asterix: the Asterix game of specs/minatar.md, section 2.
 *
 * Eight fixed slots, slot s tied to row s + 1, hold at most one entity per row, so the
 * state is a small value with no lists. Two global timers drive the game: spawns every S
 * steps and one shared group move every M steps; ramping lowers S and M every 102 steps.
 * A spawn draws, in order, the entry side (1/2 coin), the kind (1/3 coin for gold) and,
 * if a row is free, the row among the free ones (uniform index into the free slots in
 * increasing order). Contact is checked after the player moves and again after each
 * entity's move, so nothing can pass through the player. The wrapper (sticky actions,
 * action sets, generator) is the common MinAtar layer's. */
#include <string.h>

#include "envs/minatar_games2.h"

#define GRID 10
#define SPAWN_INTERVAL0 10
#define MOVE_INTERVAL0 5
#define RAMP_STEPS 100

enum { A_NOOP = 0, A_LEFT = 1, A_UP = 2, A_RIGHT = 3, A_DOWN = 4, A_FIRE = 5 };

void fl_asterix_reset(fl_asterix_t *g) {
    int ramping = g->ramping;
    memset(g, 0, sizeof(*g));
    g->ramping = ramping;
    g->player_x = 5;
    g->player_y = 5;
    g->spawn_interval = SPAWN_INTERVAL0;
    g->spawn_timer = SPAWN_INTERVAL0;
    g->move_interval = MOVE_INTERVAL0;
    g->move_timer = MOVE_INTERVAL0;
    g->ramp_counter = RAMP_STEPS;
    g->ramp_index = 0;
    g->terminal = 0;
}

/* Spec 2.4: side, kind, then the free slot; the first two draws happen even when every
 * row is taken. */
static void spawn(fl_asterix_t *g, fl_minatar_gen_t *gen) {
    int from_left = fl_minatar_u(gen) < 1.0 / 2.0;
    int gold = fl_minatar_u(gen) < 1.0 / 3.0;
    int free_slots[FL_ASTERIX_SLOTS];
    int n_free = 0;
    for (int s = 0; s < FL_ASTERIX_SLOTS; s++)
        if (!g->slots[s].active) free_slots[n_free++] = s;
    if (n_free == 0) return;
    int s = free_slots[fl_minatar_int(gen, 0, n_free - 1)];
    g->slots[s].active = 1;
    g->slots[s].x = (int8_t)(from_left ? 0 : GRID - 1);
    g->slots[s].dir = (int8_t)(from_left ? 1 : -1);
    g->slots[s].gold = (int8_t)gold;
}

/* Contact between slot s and the player: gold is collected (+1), an enemy ends the
 * episode and stays where it is. */
static int contact(fl_asterix_t *g, int s) {
    fl_asterix_entity_t *e = &g->slots[s];
    if (!e->active || e->x != g->player_x || s + 1 != g->player_y) return 0;
    if (e->gold) {
        e->active = 0;
        return 1;
    }
    g->terminal = 1;
    return 0;
}

static void ramp(fl_asterix_t *g) {
    if (g->spawn_interval <= 1 && g->move_interval <= 1) return;
    if (g->ramp_counter >= 0) {
        g->ramp_counter--;
        return;
    }
    if (g->move_interval > 1 && g->ramp_index % 2 == 1) g->move_interval--;
    if (g->spawn_interval > 1) g->spawn_interval--;
    g->ramp_index++;
    g->ramp_counter = RAMP_STEPS;
}

int fl_asterix_step(fl_asterix_t *g, int action, fl_minatar_gen_t *gen) {
    if (g->terminal) return 0;
    int reward = 0;
    if (g->spawn_timer == 0) {
        spawn(g, gen);
        g->spawn_timer = g->spawn_interval;
    }
    switch (action) {
    case A_LEFT:
        if (g->player_x > 0) g->player_x--;
        break;
    case A_RIGHT:
        if (g->player_x < GRID - 1) g->player_x++;
        break;
    case A_UP:
        if (g->player_y > 1) g->player_y--;
        break;
    case A_DOWN:
        if (g->player_y < GRID - 2) g->player_y++;
        break;
    default: break;
    }
    /* Only the slot on the player's row can touch the player. */
    int ps = g->player_y - 1;
    if (ps >= 0 && ps < FL_ASTERIX_SLOTS) reward += contact(g, ps);
    if (g->move_timer == 0) {
        g->move_timer = g->move_interval;
        for (int s = 0; s < FL_ASTERIX_SLOTS; s++) {
            fl_asterix_entity_t *e = &g->slots[s];
            if (!e->active) continue;
            e->x = (int8_t)(e->x + e->dir);
            if (e->x < 0 || e->x >= GRID)
                e->active = 0;
            else
                reward += contact(g, s);
        }
    }
    if (g->spawn_timer > 0) g->spawn_timer--;
    if (g->move_timer > 0) g->move_timer--;
    if (g->ramping) ramp(g);
    return reward;
}

/* Entities write without branching on their state (the branches mispredict at random):
 * slot s owns channels 1..3 of row s + 1, so an empty slot, or a cell off the grid, may
 * harmlessly write a 0 to column 0 of its own row instead of skipping. */
void fl_asterix_obs(const fl_asterix_t *g, uint8_t *obs) {
    const int C = FL_ASTERIX_CHANNELS;
    fl__minatar_zero(obs, GRID * GRID * FL_ASTERIX_CHANNELS);
    if (g->player_y >= 0 && g->player_y < GRID && g->player_x >= 0 && g->player_x < GRID)
        obs[FL_MINATAR_OBS_AT(g->player_y, g->player_x, 0, C)] = 1;
    for (int s = 0; s < FL_ASTERIX_SLOTS; s++) {
        const fl_asterix_entity_t *e = &g->slots[s];
        int active = e->active != 0;
        int x = e->x, tx = e->x - e->dir;
        int on = active & ((unsigned)x < GRID), trail_on = active & ((unsigned)tx < GRID);
        obs[FL_MINATAR_OBS_AT(s + 1, on ? x : 0, e->gold ? 3 : 1, C)] = (uint8_t)on;
        obs[FL_MINATAR_OBS_AT(s + 1, trail_on ? tx : 0, 2, C)] = (uint8_t)trail_on;
    }
}

/* ---- Env definitions (the common MinAtar layer drives these) ---------------------------- */

static void game_reset(fl_minatar_common_t *c, fl_minatar_gen_t *gen) {
    (void)gen;
    fl_asterix_env_state_t *s = (fl_asterix_env_state_t *)c;
    s->game.ramping = c->ramping;
    fl_asterix_reset(&s->game);
}

static int game_step(fl_minatar_common_t *c, fl_minatar_gen_t *gen, int action, int *terminal) {
    fl_asterix_env_state_t *s = (fl_asterix_env_state_t *)c;
    int r = fl_asterix_step(&s->game, action, gen);
    *terminal = s->game.terminal;
    return r;
}

static void game_obs(const fl_minatar_common_t *c, uint8_t *obs) {
    const fl_asterix_env_state_t *s = (const fl_asterix_env_state_t *)c;
    fl_asterix_obs(&s->game, obs);
}

static const fl_minatar_game_t asterix_game = {
    .channels = FL_ASTERIX_CHANNELS, .obs_writes_all = 1, .reset = game_reset, .step = game_step, .obs = game_obs};
static const uint8_t asterix_minimal[] = {A_NOOP, A_LEFT, A_UP, A_RIGHT, A_DOWN};

FL_MINATAR_DEFINE_ENVS(asterix, "asterix", "Asterix: collect gold, dodge enemies", fl_asterix_env_state_t, asterix_game,
                       FL_ASTERIX_CHANNELS, asterix_minimal, 5);
