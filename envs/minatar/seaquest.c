/* seaquest: the Seaquest game of docs/minatar.md, section 5.
 *
 * Each object kind lives in a fixed-capacity list kept in creation order; the step
 * visits them in the order the spec gives (bullets, divers, subs newest first, enemy
 * bullets, fish newest first), deleting in place, so ties between overlapping objects
 * resolve exactly as specified (oldest fish first, then oldest sub). Random draws happen
 * only for enemy and diver spawns, in the order: enemy side, enemy kind, enemy row, then
 * diver side, diver row. The wrapper (sticky actions, action sets, generator) is the
 * common MinAtar layer's.
 *
 * Speed: the env wrappers reach the step and the observation as static inline functions
 * (not through the exported ones), and the game writes all 1000 observation bytes itself
 * (obs_writes_all): unrolled 16-byte zero stores, the row-9 gauges from two key tables
 * with SSE2 compares, then the objects. Data-dependent branches that random play cannot
 * predict (the action, the facing, off-grid trail cells) are arithmetic instead. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "envs/minatar/seaquest.h"

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

/* Appends an item. Fields are stored one by one: building a struct in a local first and
 * copying it whole stalls store forwarding (byte stores read back as one wider load). */
static inline void list_push(fl_seaquest_list_t *l, int x, int y, int dir, int move_timer, int shot_timer) {
    /* Spec 1.7 bounds every list well below the capacity: overflow is a bug, never a drop. */
    if (l->n < 0 || l->n >= FL_SEAQUEST_MAX_LIST) {
        fprintf(stderr, "minatar-seaquest: object list overflow (%d of %d): internal error\n", l->n,
                FL_SEAQUEST_MAX_LIST);
        abort();
    }
    fl_seaquest_obj_t *o = &l->items[l->n++];
    o->x = (int8_t)x;
    o->y = (int8_t)y;
    o->dir = (int8_t)dir;
    o->move_timer = (int8_t)move_timer;
    o->shot_timer = (int8_t)shot_timer;
}

static void list_del(fl_seaquest_list_t *l, int i) {
    assert(i >= 0 && i < l->n);
    memmove(&l->items[i], &l->items[i + 1], (size_t)(l->n - i - 1) * sizeof(l->items[0]));
    l->n--;
}

/* Index of the oldest item at (x, y), or -1. */
static inline int list_find(const fl_seaquest_list_t *l, int x, int y) {
    for (int i = 0; i < l->n; i++)
        if (l->items[i].x == x && l->items[i].y == y) return i;
    return -1;
}

static inline int off_grid(int x) {
    return (unsigned)x >= GRID;
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
    /* Two calls rather than one on `is_sub ? &g->subs : &g->fish`: GCC's overflow warning
     * (-Wstringop-overflow, with the sanitizers) misreads the stores through that choice. */
    int x = from_left ? 0 : GRID - 1;
    if (is_sub)
        list_push(&g->subs, x, row, dir, g->move_interval, ENEMY_SHOT_INTERVAL);
    else
        list_push(&g->fish, x, row, dir, g->move_interval, ENEMY_SHOT_INTERVAL);
}

static void spawn_diver(fl_seaquest_t *g, fl_minatar_gen_t *gen) {
    int from_left = fl_minatar_u(gen) < 1.0 / 2.0;
    int row = fl_minatar_int(gen, 1, 8);
    list_push(&g->divers_list, from_left ? 0 : GRID - 1, row, from_left ? 1 : -1, DIVER_MOVE_INTERVAL, 0);
}

/* ---- Step phases (spec 5.3) ------------------------------------------------------------ */

/* Step 4. Branch-free apart from firing: with random actions a switch on the action is a
 * mispredicted jump on most steps. Moves stop at the edges exactly as "if (x > 0) x--". */
static inline void player_action(fl_seaquest_t *g, int action) {
    int left = action == A_LEFT, right = action == A_RIGHT;
    if (action == A_FIRE && g->shot_cooldown == 0) {
        list_push(&g->f_bullets, g->sub_x, g->sub_y, g->sub_dir, 0, 0);
        g->shot_cooldown = SHOT_COOLDOWN;
    }
    g->sub_x += (right & (g->sub_x < GRID - 1)) - (left & (g->sub_x > 0));
    g->sub_y += ((action == A_DOWN) & (g->sub_y < GRID - 2)) - ((action == A_UP) & (g->sub_y > 0));
    int turn = -(left | right); /* all ones when the action sets the facing (a ?: here compiles to a branch) */
    g->sub_dir = ((right - left) & turn) | (g->sub_dir & ~turn);
}

/* Friendly bullets, newest first: move, then hit the oldest fish, else the oldest sub. */
static inline int move_friendly_bullets(fl_seaquest_t *g) {
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

static inline int at_player(const fl_seaquest_t *g, int x, int y) {
    return (x == g->sub_x) & (y == g->sub_y); /* one branch at the caller, not two */
}

/* Divers, newest first: collected in the sub's front cell while fewer than 6 are aboard. */
static inline void update_divers(fl_seaquest_t *g) {
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

/* One enemy's move (steps 7 and 9), in place on item i of l. Deletes the enemy when it
 * leaves the grid or meets a friendly bullet, and then clears *alive; returns the reward.
 * *x receives the enemy's column after the move (its last column when deleted). Plain
 * fields rather than a copy of the item: byte stores into a struct copy that is then read
 * back whole stall store forwarding. */
static inline int move_enemy(fl_seaquest_t *g, fl_seaquest_list_t *l, int i, int *x, int *alive) {
    fl_seaquest_obj_t *e = &l->items[i];
    *x = e->x;
    if (at_player(g, e->x, e->y)) g->terminal = 1;
    if (e->move_timer > 0) {
        e->move_timer--;
        return 0;
    }
    e->move_timer = (int8_t)g->move_interval;
    e->x = (int8_t)(e->x + e->dir);
    *x = e->x;
    if (off_grid(e->x)) {
        list_del(l, i);
        *alive = 0;
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
    *alive = 0;
    return 1;
}

static inline int update_subs(fl_seaquest_t *g) {
    int reward = 0;
    for (int i = g->subs.n - 1; i >= 0; i--) {
        /* The shot timer runs even for a sub deleted just now (the "dying shot"): keep what
         * it needs before the move may delete the item. */
        const fl_seaquest_obj_t *e = &g->subs.items[i];
        int y = e->y, dir = e->dir, shot_timer = e->shot_timer, x, alive = 1;
        reward += move_enemy(g, &g->subs, i, &x, &alive);
        if (shot_timer > 0) {
            shot_timer--;
        } else {
            shot_timer = ENEMY_SHOT_INTERVAL;
            list_push(&g->e_bullets, x, y, dir, 0, 0);
        }
        if (alive) g->subs.items[i].shot_timer = (int8_t)shot_timer;
    }
    return reward;
}

static inline void update_enemy_bullets(fl_seaquest_t *g) {
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

static inline int update_fish(fl_seaquest_t *g) {
    int reward = 0;
    for (int i = g->fish.n - 1; i >= 0; i--) {
        int x, alive = 1;
        reward += move_enemy(g, &g->fish, i, &x, &alive);
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
static inline int oxygen_and_surface(fl_seaquest_t *g) {
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

/* The step itself, inlined into both fl_seaquest_step and the env wrappers. */
static inline int step_game(fl_seaquest_t *g, int action, fl_minatar_gen_t *gen) {
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
    g->spawn_timer -= g->spawn_timer > 0;
    g->diver_timer -= g->diver_timer > 0;
    g->shot_cooldown -= g->shot_cooldown > 0;
    reward += oxygen_and_surface(g);
    return reward;
}

int fl_seaquest_step(fl_seaquest_t *g, int action, fl_minatar_gen_t *gen) {
    return step_game(g, action, gen);
}

/* ---- Observation (spec 5.2) ------------------------------------------------------------ */

#define OBS_BYTES (GRID * GRID * FL_SEAQUEST_CHANNELS)

static inline void set_cell(uint8_t *obs, int y, int x, int ch) {
    if (((unsigned)y >= GRID) | ((unsigned)x >= GRID)) return;
    obs[(y * GRID + x) * FL_SEAQUEST_CHANNELS + ch] = 1;
}

/* Sets channel ch at (y, x) and channel behind_ch at (y, x + dx) (the sub's back cell, the
 * trail), each when on the grid. The behind cell is off the grid on every step an enemy or
 * diver spends in its entry column, too often for a well-predicted branch (and a ?: on it
 * compiles to one): an off-grid behind cell masks its offset to 0 and so rewrites the
 * front byte instead. Off-grid front cells only occur in hand-made states and take the
 * generic path. */
static inline void draw_pair(uint8_t *obs, int y, int x, int ch, int dx, int behind_ch) {
    enum { C = FL_SEAQUEST_CHANNELS };
    if (((unsigned)y >= GRID) | ((unsigned)x >= GRID)) {
        set_cell(obs, y, x + dx, behind_ch);
        return;
    }
    int at = (y * GRID + x) * C + ch;
    int on_grid = -(int)((unsigned)(x + dx) < GRID); /* all ones or 0 */
    obs[at] = 1;
    obs[at + ((dx * C + behind_ch - ch) & on_grid)] = 1;
}

/* Every item of l in channel ch; with trail, channel 3 in the cell behind it as well. */
static inline void draw_list(uint8_t *obs, const fl_seaquest_list_t *l, int ch, int trail) {
    for (int i = 0; i < l->n; i++) {
        const fl_seaquest_obj_t *o = &l->items[i];
        if (trail)
            draw_pair(obs, o->y, o->x, ch, -o->dir, 3);
        else
            set_cell(obs, o->y, o->x, ch);
    }
}

/* Lit cells of the gauges on row 9: n oxygen cells from column 0 and k diver cells ending
 * at column 8, both clamped as the spec's drawing loops clamp them (n = oxygen * 10 / 200
 * = oxygen / 20 for 0 <= oxygen <= 200). Branch-free. */
static inline int oxygen_cells(const fl_seaquest_t *g) {
    int o = g->oxygen < 0 ? 0 : g->oxygen;
    return (o < FL_SEAQUEST_MAX_OXYGEN ? o : FL_SEAQUEST_MAX_OXYGEN) / (FL_SEAQUEST_MAX_OXYGEN / GRID);
}

static inline int diver_cells(const fl_seaquest_t *g) {
    int k = g->divers < 0 ? 0 : g->divers;
    return k < FL_SEAQUEST_MAX_DIVERS ? k : FL_SEAQUEST_MAX_DIVERS;
}

#if defined(__SSE2__) && defined(__GNUC__)
/* The tail of the observation from byte OBS_TAIL (the last 4 bytes of row 8, then row 9) is
 * written from two key tables, one byte per observation byte: a byte is 1 exactly when
 * its oxygen key is <= n or its diver key is <= k. Channel 7 of column c has oxygen key
 * c + 1 (lit when c < n); channel 8 of column c <= 8 has diver key 9 - c (lit when
 * c >= 9 - k); every other byte has key 127 in both (never lit, as n <= 10 and k <= 6). */
#define OBS_TAIL 896
#define K_ 127
#define PAD4 K_, K_, K_, K_ /* the last 4 bytes of row 8 */
#define OXY_COL(c) K_, K_, K_, K_, K_, K_, K_, (c) + 1, K_, K_
#define DIVER_COL(c) K_, K_, K_, K_, K_, K_, K_, K_, 9 - (c), K_
#define DARK_COL K_, K_, K_, K_, K_, K_, K_, K_, K_, K_
static const int8_t oxygen_key[OBS_BYTES - OBS_TAIL] = {PAD4,       OXY_COL(0), OXY_COL(1), OXY_COL(2),
                                                        OXY_COL(3), OXY_COL(4), OXY_COL(5), OXY_COL(6),
                                                        OXY_COL(7), OXY_COL(8), OXY_COL(9)};
static const int8_t diver_key[OBS_BYTES - OBS_TAIL] = {PAD4,         DIVER_COL(0), DIVER_COL(1), DIVER_COL(2),
                                                       DIVER_COL(3), DIVER_COL(4), DIVER_COL(5), DIVER_COL(6),
                                                       DIVER_COL(7), DIVER_COL(8), DARK_COL};
#undef PAD4
#undef OXY_COL
#undef DIVER_COL
#undef DARK_COL
#undef K_

static inline __m128i tail_chunk(int o, __m128i n1, __m128i k1, __m128i one) {
    __m128i oxy = _mm_cmpgt_epi8(n1, _mm_loadu_si128((const __m128i *)(oxygen_key + o)));
    __m128i div = _mm_cmpgt_epi8(k1, _mm_loadu_si128((const __m128i *)(diver_key + o)));
    return _mm_and_si128(_mm_or_si128(oxy, div), one);
}
#endif

/* Writes all OBS_BYTES bytes: zeros, the gauges, then the 1s of the objects (after the
 * gauges, whose stores overwrite the whole tail, as hand-made states may put objects on
 * row 9). */
static inline void write_obs(const fl_seaquest_t *g, uint8_t *obs) {
    int n = oxygen_cells(g), k = diver_cells(g);
#if defined(__SSE2__) && defined(__GNUC__)
    /* 56 zero stores up to OBS_TAIL, 7 gauge stores after it (the last overlaps by 8), all
     * unrolled. A plain memset compiles to `rep stos`, slow to start; the empty asm hides
     * that z is zero so that the compiler keeps these stores (as envs/minatar/common.h's zeroing
     * does). */
    __m128i z = _mm_setzero_si128();
    __asm__("" : "+x"(z));
#pragma GCC unroll 56
    for (int i = 0; i < OBS_TAIL; i += 16) _mm_storeu_si128((__m128i *)(obs + i), z);
    const __m128i n1 = _mm_set1_epi8((char)(n + 1)), k1 = _mm_set1_epi8((char)(k + 1)), one = _mm_set1_epi8(1);
#pragma GCC unroll 6
    for (int o = 0; o < 96; o += 16) _mm_storeu_si128((__m128i *)(obs + OBS_TAIL + o), tail_chunk(o, n1, k1, one));
    _mm_storeu_si128((__m128i *)(obs + OBS_BYTES - 16), tail_chunk(OBS_BYTES - OBS_TAIL - 16, n1, k1, one));
#else
    memset(obs, 0, OBS_BYTES);
    for (int x = 0; x < n; x++) set_cell(obs, GRID - 1, x, 7);
    for (int i = 0; i < k; i++) set_cell(obs, GRID - 1, GRID - 2 - i, 8);
#endif
    draw_pair(obs, g->sub_y, g->sub_x, 0, -g->sub_dir, 1);
    draw_list(obs, &g->f_bullets, 2, 0);
    draw_list(obs, &g->e_bullets, 4, 0);
    draw_list(obs, &g->fish, 5, 1);
    draw_list(obs, &g->subs, 6, 1);
    draw_list(obs, &g->divers_list, 9, 1);
}

void fl_seaquest_obs(const fl_seaquest_t *g, uint8_t *obs) {
    write_obs(g, obs);
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
    int r = step_game(&s->game, action, gen);
    *terminal = s->game.terminal;
    return r;
}

static void game_obs(const fl_minatar_common_t *c, uint8_t *obs) {
    const fl_seaquest_env_state_t *s = (const fl_seaquest_env_state_t *)c;
    write_obs(&s->game, obs);
}

static const fl_minatar_game_t seaquest_game = {
    .channels = FL_SEAQUEST_CHANNELS, .obs_writes_all = 1, .reset = game_reset, .step = game_step, .obs = game_obs};
/* Seaquest's minimal set is all six actions, in order (spec 1.2). */
static const uint8_t seaquest_minimal[] = {A_NOOP, A_LEFT, A_UP, A_RIGHT, A_DOWN, A_FIRE};

FL_MINATAR_DEFINE_ENVS(seaquest, "seaquest", "Seaquest: shoot, rescue divers, surface for oxygen",
                       fl_seaquest_env_state_t, seaquest_game, FL_SEAQUEST_CHANNELS, seaquest_minimal, 6);
