/* minatar_space_invaders: the Space Invaders game of specs/minatar.md, section 6.
 *
 * Aliens and both kinds of bullets are 10x10 bitmaps, so the state is a small value with
 * no lists. Within a step: the cannon acts, friendly bullets rise, enemy bullets fall,
 * the formation moves on its global timer (sideways, or down with a heading reversal at
 * an edge), the alien nearest the cannon by column shoots on a 10-step timer, and only
 * then are alien/bullet overlaps resolved, so a bullet and an alien that swap cells in
 * one step both survive. A cleared wave refills at once and, with ramping, speeds the
 * formation up. Nothing is random: the game is a function of the executed actions. */
#include <string.h>

#include "envs/minatar_games2.h"

#define GRID 10
#define CELLS (GRID * GRID)
#define MOVE_INTERVAL0 12
#define MIN_MOVE_INTERVAL 6
#define ENEMY_SHOT_INTERVAL 10
#define SHOT_COOLDOWN 5

enum { A_NOOP = 0, A_LEFT = 1, A_UP = 2, A_RIGHT = 3, A_DOWN = 4, A_FIRE = 5 };

/* The grids are scanned eight cells at a time: a 100-cell grid is twelve 8-byte words
 * and one 4-byte tail. Cells hold 0 or 1, so byte-wise sums and ANDs of these words never
 * carry from one cell into the next. */
#define WORDS 12
#define TAIL (WORDS * 8)
#define ONES 0x0101010101010101ull

static inline uint64_t load8(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

static inline void store8(uint8_t *p, uint64_t w) {
    memcpy(p, &w, 8);
}

static inline uint64_t load4(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
}

static inline void store4(uint8_t *p, uint64_t w) {
    uint32_t v = (uint32_t)w;
    memcpy(p, &v, 4);
}

static inline uint64_t load2(const uint8_t *p) {
    uint16_t w;
    memcpy(&w, p, 2);
    return w;
}

static inline void store2(uint8_t *p, uint64_t w) {
    uint16_t v = (uint16_t)w;
    memcpy(p, &v, 2);
}

/* Sum of the bytes of w when it is below 256. */
static inline int byte_sum(uint64_t w) {
    return (int)((w * ONES) >> 56);
}

static void fill_wave(fl_space_invaders_t *g) {
    for (int y = 0; y <= 3; y++)
        for (int x = 2; x <= 7; x++) g->aliens[y][x] = 1;
}

void fl_space_invaders_reset(fl_space_invaders_t *g) {
    int ramping = g->ramping;
    memset(g, 0, sizeof(*g));
    g->ramping = ramping;
    g->cannon_x = 5;
    fill_wave(g);
    g->alien_dir = -1;
    g->move_interval = MOVE_INTERVAL0;
    g->move_timer = MOVE_INTERVAL0;
    g->shot_timer = ENEMY_SHOT_INTERVAL;
    g->shot_cooldown = 0;
    g->ramp_index = 0;
    g->terminal = 0;
}

static int alien_count(const fl_space_invaders_t *g) {
    const uint8_t *a = &g->aliens[0][0];
    uint64_t acc = load4(a + TAIL);
    for (int k = 0; k < WORDS; k++) acc += load8(a + 8 * k);
    return byte_sum(acc);
}

/* Row y as an 80-bit value split into columns 0..7 (lo, byte x = column x) and 8..9 (hi). */
static inline void row_load(const uint8_t *grid, int y, uint64_t *lo, uint64_t *hi) {
    *lo = load8(grid + y * GRID);
    *hi = load2(grid + y * GRID + 8);
}

/* Byte x of the result is nonzero when column x holds an alien. */
static void column_occupancy(const fl_space_invaders_t *g, uint64_t *lo, uint64_t *hi) {
    uint64_t l = 0, h = 0;
    for (int y = 0; y < GRID; y++) {
        uint64_t rl, rh;
        row_load(&g->aliens[0][0], y, &rl, &rh);
        l |= rl;
        h |= rh;
    }
    *lo = l;
    *hi = h;
}

static inline int column_set(uint64_t lo, uint64_t hi, int x) {
    return x < 8 ? (int)((lo >> (8 * x)) & 0xff) != 0 : (int)((hi >> (8 * (x - 8))) & 0xff) != 0;
}

/* Moves every row of a grid one row down (row 9 is dropped, row 0 becomes `top`). */
static void rows_down(uint8_t *grid, uint64_t top_lo, uint64_t top_hi) {
    for (int y = GRID - 1; y > 0; y--) {
        uint64_t lo, hi;
        row_load(grid, y - 1, &lo, &hi);
        store8(grid + y * GRID, lo);
        store2(grid + y * GRID + 8, hi);
    }
    store8(grid, top_lo);
    store2(grid + 8, top_hi);
}

/* Moves every row of a grid one row up (row 0 is dropped, row 9 becomes empty). */
static void rows_up(uint8_t *grid) {
    for (int y = 0; y < GRID - 1; y++) {
        uint64_t lo, hi;
        row_load(grid, y + 1, &lo, &hi);
        store8(grid + y * GRID, lo);
        store2(grid + y * GRID + 8, hi);
    }
    store8(grid + (GRID - 1) * GRID, 0);
    store2(grid + (GRID - 1) * GRID + 8, 0);
}

/* Step 6 of spec 6.3: reverse and descend at an edge (cyclically, so that on the terminal
 * descent row 9 reappears on row 0), otherwise shift sideways. */
static void move_aliens(fl_space_invaders_t *g) {
    uint8_t *a = &g->aliens[0][0];
    uint64_t col_lo, col_hi;
    column_occupancy(g, &col_lo, &col_hi);
    int at_edge = (g->alien_dir < 0 && column_set(col_lo, col_hi, 0)) ||
                  (g->alien_dir > 0 && column_set(col_lo, col_hi, GRID - 1));
    if (at_edge) {
        g->alien_dir = -g->alien_dir;
        uint64_t last_lo, last_hi;
        row_load(a, GRID - 1, &last_lo, &last_hi);
        if (last_lo | last_hi) g->terminal = 1;
        rows_down(a, last_lo, last_hi);
    } else {
        /* The edge test guarantees the column the formation leaves from is empty. */
        for (int y = 0; y < GRID; y++) {
            uint64_t lo, hi;
            row_load(a, y, &lo, &hi);
            if (g->alien_dir < 0) {
                lo = (lo >> 8) | (hi << 56);
                hi >>= 8;
            } else {
                hi = ((hi << 8) | (lo >> 56)) & 0xffff;
                lo <<= 8;
            }
            store8(a + y * GRID, lo);
            store2(a + y * GRID + 8, hi);
        }
    }
    if (g->aliens[GRID - 1][g->cannon_x]) g->terminal = 1;
}

/* Step 7 of spec 6.3: the lowest alien of the occupied column nearest the cannon (ties to
 * the smaller column) shoots from its own cell. */
static void alien_shoot(fl_space_invaders_t *g) {
    uint64_t col_lo, col_hi;
    column_occupancy(g, &col_lo, &col_hi);
    if (!(col_lo | col_hi)) return;
    int best_x = -1;
    for (int d = 0; best_x < 0; d++) {
        int left = g->cannon_x - d, right = g->cannon_x + d;
        if (left >= 0 && column_set(col_lo, col_hi, left))
            best_x = left;
        else if (right < GRID && column_set(col_lo, col_hi, right))
            best_x = right;
    }
    for (int y = GRID - 1; y >= 0; y--) {
        if (g->aliens[y][best_x]) {
            g->e_bullets[y][best_x] = 1;
            return;
        }
    }
}

/* Removes every alien that shares a cell with a friendly bullet, and the bullet with it.
 * Returns the number of kills; *left is set to whether any alien remains. */
static int resolve_hits(fl_space_invaders_t *g, int *left) {
    uint8_t *a = &g->aliens[0][0], *f = &g->f_bullets[0][0];
    uint64_t kills = 0, alive = 0;
    for (int k = 0; k < WORDS; k++) {
        uint64_t wa = load8(a + 8 * k), wf = load8(f + 8 * k);
        uint64_t hit = wa & wf;
        if (hit) {
            store8(a + 8 * k, wa ^ hit);
            store8(f + 8 * k, wf ^ hit);
            kills += hit;
        }
        alive |= wa ^ hit;
    }
    uint64_t wa = load4(a + TAIL), wf = load4(f + TAIL);
    uint64_t hit = wa & wf;
    if (hit) {
        store4(a + TAIL, wa ^ hit);
        store4(f + TAIL, wf ^ hit);
        kills += hit;
    }
    alive |= wa ^ hit;
    *left = alive != 0;
    return byte_sum(kills);
}

int fl_space_invaders_step(fl_space_invaders_t *g, int action) {
    if (g->terminal) return 0;

    if (action == A_FIRE) {
        if (g->shot_cooldown == 0) {
            g->f_bullets[GRID - 1][g->cannon_x] = 1;
            g->shot_cooldown = SHOT_COOLDOWN;
        }
    } else if (action == A_LEFT) {
        if (g->cannon_x > 0) g->cannon_x--;
    } else if (action == A_RIGHT) {
        if (g->cannon_x < GRID - 1) g->cannon_x++;
    }

    rows_up(&g->f_bullets[0][0]);
    rows_down(&g->e_bullets[0][0], 0, 0);
    if (g->e_bullets[GRID - 1][g->cannon_x]) g->terminal = 1;

    if (g->aliens[GRID - 1][g->cannon_x]) g->terminal = 1;

    if (g->move_timer == 0) {
        int n = alien_count(g);
        g->move_timer = n < g->move_interval ? n : g->move_interval;
        move_aliens(g);
    }

    if (g->shot_timer == 0) {
        g->shot_timer = ENEMY_SHOT_INTERVAL;
        alien_shoot(g);
    }

    int left;
    int reward = resolve_hits(g, &left);

    if (g->shot_cooldown > 0) g->shot_cooldown--;
    if (g->move_timer > 0) g->move_timer--;
    if (g->shot_timer > 0) g->shot_timer--;

    if (!left) {
        if (g->ramping && g->move_interval > MIN_MOVE_INTERVAL) {
            g->move_interval--;
            g->ramp_index++;
        }
        fill_wave(g);
    }
    return reward;
}

/* 1 in each byte of w that is nonzero, 0 elsewhere. */
static inline uint64_t nonzero_bytes(uint64_t w) {
    const uint64_t low7 = 0x7f7f7f7f7f7f7f7full;
    return ((((w & low7) + low7) | w) >> 7) & ONES;
}

/* Sets the 1s of an all-zero observation. Each cell's six channels come from a table
 * indexed by (alien, friendly bullet, enemy bullet), stored as one 8-byte write whose
 * two spare bytes the next cell overwrites (they are zero either way); the last cell is
 * written in two parts. Runs of eight empty cells are skipped. */
static void draw(const fl_space_invaders_t *g, uint8_t *obs) {
    uint64_t pattern[8];
    int dir_ch = g->alien_dir < 0 ? 2 : 3;
    for (int k = 0; k < 8; k++) {
        uint64_t p = 0;
        if (k & 1) p |= (1ull << 8) | (1ull << (8 * dir_ch));
        if (k & 2) p |= 1ull << 32;
        if (k & 4) p |= 1ull << 40;
        pattern[k] = p;
    }
    const uint8_t *a = &g->aliens[0][0], *f = &g->f_bullets[0][0], *e = &g->e_bullets[0][0];
    for (int k = 0; k < WORDS; k++) {
        uint64_t w = nonzero_bytes(load8(a + 8 * k)) | nonzero_bytes(load8(f + 8 * k)) << 1 |
                     nonzero_bytes(load8(e + 8 * k)) << 2;
        if (!w) continue;
        uint8_t *out = obs + 8 * k * FL_SPACE_INVADERS_CHANNELS;
        for (int j = 0; j < 8; j++) store8(out + j * FL_SPACE_INVADERS_CHANNELS, pattern[(w >> (8 * j)) & 7]);
    }
    uint64_t w =
        nonzero_bytes(load4(a + TAIL)) | nonzero_bytes(load4(f + TAIL)) << 1 | nonzero_bytes(load4(e + TAIL)) << 2;
    uint8_t *out = obs + TAIL * FL_SPACE_INVADERS_CHANNELS;
    for (int j = 0; j < 3; j++) store8(out + j * FL_SPACE_INVADERS_CHANNELS, pattern[(w >> (8 * j)) & 7]);
    uint64_t last = pattern[(w >> 24) & 7];
    store4(out + 3 * FL_SPACE_INVADERS_CHANNELS, last);
    store2(out + 3 * FL_SPACE_INVADERS_CHANNELS + 4, last >> 32);
    obs[((GRID - 1) * GRID + g->cannon_x) * FL_SPACE_INVADERS_CHANNELS + 0] = 1;
}

void fl_space_invaders_obs(const fl_space_invaders_t *g, uint8_t *obs) {
    memset(obs, 0, CELLS * FL_SPACE_INVADERS_CHANNELS);
    draw(g, obs);
}

/* ---- Env definitions (the common MinAtar layer drives these) ---------------------------- */

static void game_reset(fl_minatar_common_t *c, fl_minatar_gen_t *gen) {
    (void)gen;
    fl_space_invaders_env_state_t *s = (fl_space_invaders_env_state_t *)c;
    s->game.ramping = c->ramping;
    fl_space_invaders_reset(&s->game);
}

static int game_step(fl_minatar_common_t *c, fl_minatar_gen_t *gen, int action, int *terminal) {
    (void)gen;
    fl_space_invaders_env_state_t *s = (fl_space_invaders_env_state_t *)c;
    int r = fl_space_invaders_step(&s->game, action);
    *terminal = s->game.terminal;
    return r;
}

static void game_obs(const fl_minatar_common_t *c, uint8_t *obs) {
    const fl_space_invaders_env_state_t *s = (const fl_space_invaders_env_state_t *)c;
    draw(&s->game, obs); /* the layer has zeroed obs */
}

static const fl_minatar_game_t space_invaders_game = {
    .channels = FL_SPACE_INVADERS_CHANNELS, .reset = game_reset, .step = game_step, .obs = game_obs};
static const uint8_t space_invaders_minimal[] = {A_NOOP, A_LEFT, A_RIGHT, A_FIRE};

FL_MINATAR_DEFINE_ENVS(space_invaders, "space_invaders", "Space Invaders: shoot the descending alien formation",
                       fl_space_invaders_env_state_t, space_invaders_game, FL_SPACE_INVADERS_CHANNELS,
                       space_invaders_minimal, 4);
