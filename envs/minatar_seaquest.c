/* minatar_seaquest: the Seaquest game of specs/minatar.md, section 5.
 *
 * Each object kind lives in a fixed-capacity list kept in creation order; the step
 * visits them in the order the spec gives (bullets, divers, subs newest first, enemy
 * bullets, fish newest first), deleting in place, so ties between overlapping objects
 * resolve exactly as specified (oldest fish first, then oldest sub). Random draws happen
 * only for enemy and diver spawns, in the order: enemy side, enemy kind, enemy row, then
 * diver side, diver row. The wrapper (sticky actions, action sets, generator) is the
 * common MinAtar layer's. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/minatar_seaquest.h"

#define GRID 10
#define SPAWN_INTERVAL0 20
#define DIVER_SPAWN_INTERVAL 30
#define MOVE_INTERVAL0 5
#define MIN_MOVE_INTERVAL 2
#define DIVER_MOVE_INTERVAL 5
#define SHOT_COOLDOWN 5
#define ENEMY_SHOT_INTERVAL 10

enum {
    A_NOOP = FL_MINATAR_NOOP,
    A_LEFT = FL_MINATAR_LEFT,
    A_UP = FL_MINATAR_UP,
    A_RIGHT = FL_MINATAR_RIGHT,
    A_DOWN = FL_MINATAR_DOWN,
    A_FIRE = FL_MINATAR_FIRE
};

/* ---- Lists ----------------------------------------------------------------------------- */

static void list_push(fl_seaquest_list_t *l, fl_seaquest_obj_t o) {
    /* Spec 1.7 bounds every list well below the capacity: overflow is a bug, never a drop. */
    if (l->n < 0 || l->n >= FL_SEAQUEST_MAX_LIST) {
        fprintf(stderr, "minatar-seaquest: object list overflow (%d of %d): internal error\n", l->n,
                FL_SEAQUEST_MAX_LIST);
        abort();
    }
    l->items[l->n++] = o;
}

static void list_del(fl_seaquest_list_t *l, int i) {
    assert(i >= 0 && i < l->n);
    memmove(&l->items[i], &l->items[i + 1], (size_t)(l->n - i - 1) * sizeof(l->items[0]));
    l->n--;
}

/* Index of the oldest item at (x, y), or -1. */
static int list_find(const fl_seaquest_list_t *l, int x, int y) {
    for (int i = 0; i < l->n; i++)
        if (l->items[i].x == x && l->items[i].y == y) return i;
    return -1;
}

static int off_grid(int x) {
    return x < 0 || x >= GRID;
}

/* ---- Reset ----------------------------------------------------------------------------- */

void fl_seaquest_reset(fl_seaquest_t *g) {
    int ramping = g->ramping;
    memset(g, 0, sizeof(*g));
    g->ramping = ramping;
    g->sub_x = 5;
    g->sub_y = 0;
    g->sub_dir = -1;
    g->oxygen = FL_SEAQUEST_MAX_OXYGEN;
    g->divers = 0;
    g->at_surface = 1;
    g->shot_cooldown = 0;
    g->spawn_interval = SPAWN_INTERVAL0;
    g->spawn_timer = SPAWN_INTERVAL0;
    g->diver_timer = DIVER_SPAWN_INTERVAL;
    g->move_interval = MOVE_INTERVAL0;
    g->ramp_index = 0;
    g->terminal = 0;
}

/* ---- Spawns (spec 5.5) ----------------------------------------------------------------- */

static void spawn_enemy(fl_seaquest_t *g, fl_minatar_gen_t *gen) {
    int from_left = fl_minatar_u(gen) < 1.0 / 2.0;
    int is_sub = fl_minatar_u(gen) < 1.0 / 3.0;
    int row = fl_minatar_int(gen, 1, 8);
    int dir = from_left ? 1 : -1;
    for (int i = 0; i < g->subs.n; i++)
        if (g->subs.items[i].y == row && g->subs.items[i].dir == -dir) return;
    for (int i = 0; i < g->fish.n; i++)
        if (g->fish.items[i].y == row && g->fish.items[i].dir == -dir) return;
    fl_seaquest_obj_t o = {.x = (int8_t)(from_left ? 0 : GRID - 1),
                           .y = (int8_t)row,
                           .dir = (int8_t)dir,
                           .move_timer = (int8_t)g->move_interval,
                           .shot_timer = ENEMY_SHOT_INTERVAL};
    list_push(is_sub ? &g->subs : &g->fish, o);
}

static void spawn_diver(fl_seaquest_t *g, fl_minatar_gen_t *gen) {
    int from_left = fl_minatar_u(gen) < 1.0 / 2.0;
    int row = fl_minatar_int(gen, 1, 8);
    fl_seaquest_obj_t o = {.x = (int8_t)(from_left ? 0 : GRID - 1),
                           .y = (int8_t)row,
                           .dir = (int8_t)(from_left ? 1 : -1),
                           .move_timer = DIVER_MOVE_INTERVAL};
    list_push(&g->divers_list, o);
}

/* ---- Step phases (spec 5.3) ------------------------------------------------------------ */

static void player_action(fl_seaquest_t *g, int action) {
    switch (action) {
    case A_FIRE:
        if (g->shot_cooldown == 0) {
            fl_seaquest_obj_t b = {.x = (int8_t)g->sub_x, .y = (int8_t)g->sub_y, .dir = (int8_t)g->sub_dir};
            list_push(&g->f_bullets, b);
            g->shot_cooldown = SHOT_COOLDOWN;
        }
        break;
    case A_LEFT:
        if (g->sub_x > 0) g->sub_x--;
        g->sub_dir = -1;
        break;
    case A_RIGHT:
        if (g->sub_x < GRID - 1) g->sub_x++;
        g->sub_dir = 1;
        break;
    case A_UP:
        if (g->sub_y > 0) g->sub_y--;
        break;
    case A_DOWN:
        if (g->sub_y < GRID - 2) g->sub_y++;
        break;
    default: break;
    }
}

/* Friendly bullets, newest first: move, then hit the oldest fish, else the oldest sub. */
static int move_friendly_bullets(fl_seaquest_t *g) {
    int reward = 0;
    for (int i = g->f_bullets.n - 1; i >= 0; i--) {
        fl_seaquest_obj_t *b = &g->f_bullets.items[i];
        b->x = (int8_t)(b->x + b->dir);
        if (off_grid(b->x)) {
            list_del(&g->f_bullets, i);
            continue;
        }
        int k = list_find(&g->fish, b->x, b->y);
        if (k >= 0) {
            list_del(&g->fish, k);
        } else {
            k = list_find(&g->subs, b->x, b->y);
            if (k < 0) continue;
            list_del(&g->subs, k);
        }
        list_del(&g->f_bullets, i);
        reward++;
    }
    return reward;
}

static int at_player(const fl_seaquest_t *g, int x, int y) {
    return x == g->sub_x && y == g->sub_y;
}

/* Divers, newest first: collected in the sub's front cell while fewer than 6 are aboard. */
static void update_divers(fl_seaquest_t *g) {
    for (int i = g->divers_list.n - 1; i >= 0; i--) {
        fl_seaquest_obj_t *d = &g->divers_list.items[i];
        if (at_player(g, d->x, d->y) && g->divers < FL_SEAQUEST_MAX_DIVERS) {
            list_del(&g->divers_list, i);
            g->divers++;
            continue;
        }
        if (d->move_timer > 0) {
            d->move_timer--;
            continue;
        }
        d->move_timer = DIVER_MOVE_INTERVAL;
        d->x = (int8_t)(d->x + d->dir);
        if (off_grid(d->x)) {
            list_del(&g->divers_list, i);
        } else if (at_player(g, d->x, d->y) && g->divers < FL_SEAQUEST_MAX_DIVERS) {
            list_del(&g->divers_list, i);
            g->divers++;
        }
    }
}

/* One enemy's move (steps 7 and 9). Deletes the enemy (index i of l) when it leaves the
 * grid or meets a friendly bullet; returns the reward. e is a copy the caller keeps. */
static int move_enemy(fl_seaquest_t *g, fl_seaquest_list_t *l, int i, fl_seaquest_obj_t *e) {
    if (at_player(g, e->x, e->y)) g->terminal = 1;
    if (e->move_timer > 0) {
        e->move_timer--;
        l->items[i] = *e;
        return 0;
    }
    e->move_timer = (int8_t)g->move_interval;
    e->x = (int8_t)(e->x + e->dir);
    l->items[i] = *e;
    if (off_grid(e->x)) {
        list_del(l, i);
        return 0;
    }
    if (at_player(g, e->x, e->y)) {
        g->terminal = 1;
        return 0;
    }
    int k = list_find(&g->f_bullets, e->x, e->y);
    if (k < 0) return 0;
    list_del(&g->f_bullets, k);
    list_del(l, i);
    return 1;
}

static int update_subs(fl_seaquest_t *g) {
    int reward = 0;
    for (int i = g->subs.n - 1; i >= 0; i--) {
        fl_seaquest_obj_t e = g->subs.items[i];
        int before = g->subs.n;
        reward += move_enemy(g, &g->subs, i, &e);
        int alive = g->subs.n == before;
        /* The shot timer runs even for a sub deleted just now (the "dying shot"). */
        if (e.shot_timer > 0) {
            e.shot_timer--;
        } else {
            e.shot_timer = ENEMY_SHOT_INTERVAL;
            fl_seaquest_obj_t b = {.x = e.x, .y = e.y, .dir = e.dir};
            list_push(&g->e_bullets, b);
        }
        if (alive) g->subs.items[i].shot_timer = e.shot_timer;
    }
    return reward;
}

static void update_enemy_bullets(fl_seaquest_t *g) {
    for (int i = g->e_bullets.n - 1; i >= 0; i--) {
        fl_seaquest_obj_t *b = &g->e_bullets.items[i];
        if (at_player(g, b->x, b->y)) g->terminal = 1;
        b->x = (int8_t)(b->x + b->dir);
        if (off_grid(b->x)) {
            list_del(&g->e_bullets, i);
        } else if (at_player(g, b->x, b->y)) {
            g->terminal = 1;
        }
    }
}

static int update_fish(fl_seaquest_t *g) {
    int reward = 0;
    for (int i = g->fish.n - 1; i >= 0; i--) {
        fl_seaquest_obj_t e = g->fish.items[i];
        reward += move_enemy(g, &g->fish, i, &e);
    }
    return reward;
}

/* Spec 5.7: one ramp per surfacing event, when ramping is on. */
static void ramp(fl_seaquest_t *g) {
    if (!g->ramping) return;
    if (g->spawn_interval <= 1 && g->move_interval <= MIN_MOVE_INTERVAL) return;
    if (g->move_interval > MIN_MOVE_INTERVAL && g->ramp_index % 2 == 1) g->move_interval--;
    if (g->spawn_interval > 1) g->spawn_interval--;
    g->ramp_index++;
}

/* Step 11: the oxygen check, then oxygen use below the surface or a surfacing event. */
static int oxygen_and_surface(fl_seaquest_t *g) {
    int reward = 0;
    if (g->oxygen <= 0) g->terminal = 1;
    if (g->sub_y > 0) {
        g->oxygen--;
        g->at_surface = 0;
    } else if (!g->at_surface) {
        if (g->divers == 0) {
            g->terminal = 1;
        } else {
            if (g->divers == FL_SEAQUEST_MAX_DIVERS) {
                reward = g->oxygen * 10 / FL_SEAQUEST_MAX_OXYGEN;
                g->divers = 0;
            }
            g->oxygen = FL_SEAQUEST_MAX_OXYGEN;
            g->divers--;
            ramp(g);
            g->at_surface = 1;
        }
    }
    return reward;
}

int fl_seaquest_step(fl_seaquest_t *g, int action, fl_minatar_gen_t *gen) {
    if (g->terminal) return 0;
    int reward = 0;
    if (g->spawn_timer == 0) {
        spawn_enemy(g, gen);
        g->spawn_timer = g->spawn_interval;
    }
    if (g->diver_timer == 0) {
        spawn_diver(g, gen);
        g->diver_timer = DIVER_SPAWN_INTERVAL;
    }
    player_action(g, action);
    reward += move_friendly_bullets(g);
    update_divers(g);
    reward += update_subs(g);
    update_enemy_bullets(g);
    reward += update_fish(g);
    if (g->spawn_timer > 0) g->spawn_timer--;
    if (g->diver_timer > 0) g->diver_timer--;
    if (g->shot_cooldown > 0) g->shot_cooldown--;
    reward += oxygen_and_surface(g);
    return reward;
}

/* ---- Observation (spec 5.2) ------------------------------------------------------------ */

static void set_cell(uint8_t *obs, int y, int x, int ch) {
    if (y < 0 || y >= GRID || x < 0 || x >= GRID) return;
    obs[(y * GRID + x) * FL_SEAQUEST_CHANNELS + ch] = 1;
}

static void draw_list(uint8_t *obs, const fl_seaquest_list_t *l, int ch, int trail) {
    for (int i = 0; i < l->n; i++) {
        const fl_seaquest_obj_t *o = &l->items[i];
        set_cell(obs, o->y, o->x, ch);
        if (trail) set_cell(obs, o->y, o->x - o->dir, 3);
    }
}

/* Sets the 1s of the observation on an all-zero buffer. */
static void draw(const fl_seaquest_t *g, uint8_t *obs) {
    set_cell(obs, g->sub_y, g->sub_x, 0);
    set_cell(obs, g->sub_y, g->sub_x - g->sub_dir, 1);
    draw_list(obs, &g->f_bullets, 2, 0);
    draw_list(obs, &g->e_bullets, 4, 0);
    draw_list(obs, &g->fish, 5, 1);
    draw_list(obs, &g->subs, 6, 1);
    draw_list(obs, &g->divers_list, 9, 1);
    int oxy = g->oxygen > 0 ? g->oxygen : 0;
    for (int x = 0; x < oxy * 10 / FL_SEAQUEST_MAX_OXYGEN; x++) set_cell(obs, GRID - 1, x, 7);
    for (int k = 0; k < g->divers && k < FL_SEAQUEST_MAX_DIVERS; k++) set_cell(obs, GRID - 1, GRID - 2 - k, 8);
}

void fl_seaquest_obs(const fl_seaquest_t *g, uint8_t *obs) {
    memset(obs, 0, GRID * GRID * FL_SEAQUEST_CHANNELS);
    draw(g, obs);
}

/* ---- Env definitions (common MinAtar layer) -------------------------------------------- */

static void game_reset(fl_minatar_common_t *c, fl_minatar_gen_t *gen) {
    (void)gen;
    fl_seaquest_env_state_t *s = (fl_seaquest_env_state_t *)c;
    s->game.ramping = c->ramping;
    fl_seaquest_reset(&s->game);
}

static int game_step(fl_minatar_common_t *c, fl_minatar_gen_t *gen, int action, int *terminal) {
    fl_seaquest_env_state_t *s = (fl_seaquest_env_state_t *)c;
    s->game.ramping = c->ramping;
    int r = fl_seaquest_step(&s->game, action, gen);
    *terminal = s->game.terminal;
    return r;
}

static void game_obs(const fl_minatar_common_t *c, uint8_t *obs) {
    const fl_seaquest_env_state_t *s = (const fl_seaquest_env_state_t *)c;
    draw(&s->game, obs); /* the layer has zeroed obs */
}

static const fl_minatar_game_t seaquest_game = {
    .channels = FL_SEAQUEST_CHANNELS, .reset = game_reset, .step = game_step, .obs = game_obs};
/* Seaquest's minimal set is all six actions, in order (spec 1.2). */
static const uint8_t seaquest_minimal[] = {A_NOOP, A_LEFT, A_UP, A_RIGHT, A_DOWN, A_FIRE};

FL_MINATAR_DEFINE_ENVS(seaquest, "seaquest", "Seaquest: shoot, rescue divers, surface for oxygen",
                       fl_seaquest_env_state_t, seaquest_game, FL_SEAQUEST_CHANNELS, seaquest_minimal, 6);
