/* Unit tests for MinAtar Space Invaders (envs/minatar/space_invaders.c, docs/minatar.md
 * section 6 and Appendix D).
 *
 * The game is driven directly through its value type, often after putting it into a
 * chosen state, and the expected positions, rewards and terminal steps are worked out by
 * hand from the spec. The wrapper tests cover the definitions, the action sets, replay
 * and the fact that the game uses no randomness (different seeds, same executed actions,
 * same trajectory). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "envs/minatar/space_invaders.h"

enum { NOOP = 0, LEFT = 1, UP = 2, RIGHT = 3, DOWN = 4, FIRE = 5 };

#define CH FL_SPACE_INVADERS_CHANNELS
#define OBS_BYTES (10 * 10 * CH)

static int at(const uint8_t *obs, int y, int x, int c) {
    return obs[(y * 10 + x) * CH + c];
}

static int count_ch(const uint8_t *obs, int c) {
    int n = 0;
    for (int i = 0; i < 100; i++) n += obs[i * CH + c];
    return n;
}

static int count_aliens(const fl_space_invaders_t *g) {
    int n = 0;
    for (int y = 0; y < 10; y++)
        for (int x = 0; x < 10; x++) n += g->aliens[y][x];
    return n;
}

/* A reset game with ramping on, as the wrapper's default. */
static void new_game(fl_space_invaders_t *g, int ramping) {
    memset(g, 0, sizeof(*g));
    g->ramping = ramping;
    fl_space_invaders_reset(g);
}

/* A game with no aliens and no bullets, for placing objects by hand. Timers are set far
 * away so nothing fires unless a test asks for it. A test must place at least one alien
 * (or expect the new wave that an empty map brings at the end of the step). */
static void empty_game(fl_space_invaders_t *g) {
    new_game(g, 1);
    memset(g->aliens, 0, sizeof(g->aliens));
    g->move_timer = 50;
    g->shot_timer = 50;
}

/* ---- Reset and observation ------------------------------------------------------------- */

static void test_reset_state_and_channels(void **st) {
    (void)st;
    fl_space_invaders_t g;
    new_game(&g, 1);
    assert_int_equal(g.cannon_x, 5);
    assert_int_equal(g.alien_dir, -1);
    assert_int_equal(g.move_interval, 12);
    assert_int_equal(g.move_timer, 12);
    assert_int_equal(g.shot_timer, 10);
    assert_int_equal(g.shot_cooldown, 0);
    assert_int_equal(g.ramp_index, 0);
    assert_int_equal(g.terminal, 0);
    assert_int_equal(g.ramping, 1);

    uint8_t obs[OBS_BYTES];
    fl_space_invaders_obs(&g, obs);
    for (int y = 0; y < 10; y++) {
        for (int x = 0; x < 10; x++) {
            int alien = y <= 3 && x >= 2 && x <= 7;
            assert_int_equal(at(obs, y, x, 0), y == 9 && x == 5);
            assert_int_equal(at(obs, y, x, 1), alien);
            assert_int_equal(at(obs, y, x, 2), alien); /* heading left */
            assert_int_equal(at(obs, y, x, 3), 0);
            assert_int_equal(at(obs, y, x, 4), 0);
            assert_int_equal(at(obs, y, x, 5), 0);
        }
    }
    /* Every byte is 0 or 1. */
    for (int i = 0; i < OBS_BYTES; i++) assert_true(obs[i] <= 1);

    /* Heading right moves the copy to channel 3; bullets show in 4 and 5. */
    g.alien_dir = 1;
    g.f_bullets[6][1] = 1;
    g.e_bullets[7][8] = 1;
    fl_space_invaders_obs(&g, obs);
    assert_int_equal(count_ch(obs, 2), 0);
    assert_int_equal(count_ch(obs, 3), 24);
    assert_int_equal(at(obs, 0, 2, 3), 1);
    assert_int_equal(count_ch(obs, 4), 1);
    assert_int_equal(at(obs, 6, 1, 4), 1);
    assert_int_equal(count_ch(obs, 5), 1);
    assert_int_equal(at(obs, 7, 8, 5), 1);
}

static void test_reset_keeps_ramping_switch(void **st) {
    (void)st;
    fl_space_invaders_t g;
    new_game(&g, 0);
    g.cannon_x = 0;
    g.terminal = 1;
    g.move_interval = 8;
    fl_space_invaders_reset(&g);
    assert_int_equal(g.ramping, 0);
    assert_int_equal(g.cannon_x, 5);
    assert_int_equal(g.terminal, 0);
    assert_int_equal(g.move_interval, 12);
}

/* ---- Appendix D ------------------------------------------------------------------------- */

/* Noop only: first shot from (3, 5) on step 11, first formation move on step 13, the
 * shot reaches (9, 5) on step 17, terminal with return 0. */
static void test_appendix_d_noop_run(void **st) {
    (void)st;
    fl_space_invaders_t g;
    new_game(&g, 1);
    uint8_t obs[OBS_BYTES];
    int ret = 0;
    for (int k = 1; k <= 17; k++) {
        ret += fl_space_invaders_step(&g, NOOP);
        fl_space_invaders_obs(&g, obs);
        assert_int_equal(g.terminal, k == 17);
        /* Enemy bullets: none before step 11; then one at row 3 + (k - 11), column 5. */
        if (k < 11) {
            assert_int_equal(count_ch(obs, 5), 0);
        } else {
            assert_int_equal(count_ch(obs, 5), 1);
            assert_int_equal(at(obs, 3 + (k - 11), 5, 5), 1);
        }
        /* Formation at columns 2..7 until step 13, then 1..6. */
        int left_col = k < 13 ? 2 : 1;
        assert_int_equal(count_ch(obs, 1), 24);
        for (int y = 0; y <= 3; y++) {
            assert_int_equal(at(obs, y, left_col, 1), 1);
            assert_int_equal(at(obs, y, left_col + 5, 1), 1);
            assert_int_equal(at(obs, y, left_col + 6, 1), 0);
        }
    }
    assert_int_equal(ret, 0);
    fl_space_invaders_obs(&g, obs);
    assert_int_equal(at(obs, 9, 5, 5), 1);
    assert_int_equal(at(obs, 9, 5, 0), 1);

    /* Stepping an ended game changes nothing and returns 0. */
    fl_space_invaders_t before = g;
    assert_int_equal(fl_space_invaders_step(&g, FIRE), 0);
    assert_int_equal(g.terminal, 1);
    assert_memory_equal(&before, &g, sizeof(g));
}

/* The formation moves every 12 steps with 24 aliens: steps 13, 25, 37, ... ; the shot
 * timer fires every 10 steps: 11, 21, 31. Dodging to column 0 early keeps the cannon
 * alive long enough to see both rhythms (the nearest column to 0 is the formation's
 * leftmost, whose bullets fall in columns 2, 1, 0 ... over time). */
static void test_formation_and_shot_rhythm(void **st) {
    (void)st;
    fl_space_invaders_t g;
    new_game(&g, 1);
    int moves[8], n_moves = 0, shots[8], n_shots = 0;
    for (int k = 1; k <= 40 && !g.terminal; k++) {
        uint8_t prev_aliens[10][10];
        memcpy(prev_aliens, g.aliens, sizeof(prev_aliens));
        int prev_shot_timer = g.shot_timer;
        fl_space_invaders_step(&g, k <= 5 ? LEFT : NOOP);
        if (memcmp(prev_aliens, g.aliens, sizeof(prev_aliens)) != 0 && n_moves < 8) moves[n_moves++] = k;
        if (prev_shot_timer == 0 && n_shots < 8) shots[n_shots++] = k;
    }
    assert_int_equal(g.cannon_x, 0);
    assert_true(n_moves >= 3);
    assert_int_equal(moves[0], 13);
    assert_int_equal(moves[1], 25);
    assert_int_equal(moves[2], 37);
    assert_true(n_shots >= 3);
    assert_int_equal(shots[0], 11);
    assert_int_equal(shots[1], 21);
    assert_int_equal(shots[2], 31);
}

/* ---- Cannon ----------------------------------------------------------------------------- */

static void test_cannon_moves_and_stops_at_edges(void **st) {
    (void)st;
    fl_space_invaders_t g;
    empty_game(&g);
    g.aliens[0][0] = 1;
    int expect[] = {4, 3, 2, 1, 0, 0, 0};
    for (int i = 0; i < 7; i++) {
        fl_space_invaders_step(&g, LEFT);
        assert_int_equal(g.cannon_x, expect[i]);
    }
    for (int i = 0; i < 12; i++) fl_space_invaders_step(&g, RIGHT);
    assert_int_equal(g.cannon_x, 9);
    fl_space_invaders_step(&g, UP);
    fl_space_invaders_step(&g, DOWN);
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.cannon_x, 9);
    uint8_t obs[OBS_BYTES];
    fl_space_invaders_obs(&g, obs);
    assert_int_equal(count_ch(obs, 0), 1);
    assert_int_equal(at(obs, 9, 9, 0), 1);
}

/* Fire on step 1 puts a bullet at (8, pc) at once; holding fire shoots on steps 1, 6, 11. */
static void test_fire_cooldown(void **st) {
    (void)st;
    fl_space_invaders_t g;
    empty_game(&g);
    g.aliens[0][0] = 1; /* out of the bullets' way; keeps the wave from refilling */
    int fired[16] = {0};
    for (int k = 1; k <= 12; k++) {
        fl_space_invaders_step(&g, FIRE);
        fired[k] = g.f_bullets[8][5];
        if (k == 1) {
            assert_int_equal(g.f_bullets[8][5], 1);
            assert_int_equal(g.shot_cooldown, 4);
        }
    }
    for (int k = 1; k <= 12; k++) assert_int_equal(fired[k], k == 1 || k == 6 || k == 11);
    /* Bullets rise one row per step and leave past row 0: the one from step 1 was at row 0
     * after step 9 and is gone after step 10. */
    assert_int_equal(g.f_bullets[7][5], 1); /* fired on step 11 */
    assert_int_equal(g.f_bullets[2][5], 1); /* fired on step 6 */
    int n = 0;
    for (int y = 0; y < 10; y++)
        for (int x = 0; x < 10; x++) n += g.f_bullets[y][x];
    assert_int_equal(n, 2);
}

/* A bullet aimed at (3, 5) arrives on step 6 (fired on step 1 from row 9: rows 8..3) and
 * kills; the next alien shot (step 11) then comes from the new lowest alien of column
 * 5, at (2, 5). */
static void test_kill_and_lowest_shooter(void **st) {
    (void)st;
    fl_space_invaders_t g;
    new_game(&g, 1);
    int ret = 0;
    for (int k = 1; k <= 11; k++) {
        int r = fl_space_invaders_step(&g, k == 1 ? FIRE : NOOP);
        assert_int_equal(r, k == 6);
        ret += r;
        if (k == 6) {
            assert_int_equal(g.aliens[3][5], 0);
            assert_int_equal(g.f_bullets[3][5], 0);
            assert_int_equal(count_aliens(&g), 23);
        }
    }
    assert_int_equal(ret, 1);
    assert_int_equal(g.e_bullets[2][5], 1);
    assert_int_equal(g.e_bullets[3][5], 0);
}

/* ---- Alien shots ------------------------------------------------------------------------ */

static void test_shooter_nearest_column_ties_to_smaller(void **st) {
    (void)st;
    fl_space_invaders_t g;
    empty_game(&g);
    g.cannon_x = 5;
    g.aliens[0][3] = 1;
    g.aliens[2][3] = 1;
    g.aliens[1][7] = 1;
    g.aliens[4][0] = 1; /* farther: not chosen although lower */
    g.shot_timer = 0;
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.shot_timer, 9);
    assert_int_equal(g.e_bullets[2][3], 1);
    int n = 0;
    for (int y = 0; y < 10; y++)
        for (int x = 0; x < 10; x++) n += g.e_bullets[y][x];
    assert_int_equal(n, 1);

    /* With the cannon at 6, column 7 is nearer (distance 1 against 3). */
    empty_game(&g);
    g.cannon_x = 6;
    g.aliens[2][3] = 1;
    g.aliens[1][7] = 1;
    g.shot_timer = 0;
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.e_bullets[1][7], 1);
    assert_int_equal(g.e_bullets[2][3], 0);
}

/* The shooter's bullet sits on its own cell for one observation; if the shooter dies in
 * the same step the bullet stays. */
static void test_shot_survives_shooter_kill(void **st) {
    (void)st;
    fl_space_invaders_t g;
    empty_game(&g);
    g.cannon_x = 4;
    g.aliens[5][4] = 1;
    g.aliens[0][0] = 1; /* keeps the wave from refilling */
    g.f_bullets[6][4] = 1;
    g.shot_timer = 0;
    assert_int_equal(fl_space_invaders_step(&g, NOOP), 1);
    assert_int_equal(g.aliens[5][4], 0);
    assert_int_equal(g.e_bullets[5][4], 1);
    uint8_t obs[OBS_BYTES];
    fl_space_invaders_obs(&g, obs);
    assert_int_equal(at(obs, 5, 4, 5), 1);
    assert_int_equal(at(obs, 5, 4, 1), 0);
}

/* Enemy bullets fall one row per step; one reaching (9, pc) is terminal, one reaching
 * row 9 elsewhere leaves on the following step. */
static void test_enemy_bullets(void **st) {
    (void)st;
    fl_space_invaders_t g;
    empty_game(&g);
    g.aliens[0][0] = 1;
    g.e_bullets[7][3] = 1;
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.e_bullets[8][3], 1);
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.e_bullets[9][3], 1);
    assert_int_equal(g.terminal, 0);
    fl_space_invaders_step(&g, NOOP);
    int n = 0;
    for (int y = 0; y < 10; y++)
        for (int x = 0; x < 10; x++) n += g.e_bullets[y][x];
    assert_int_equal(n, 0);
    assert_int_equal(g.terminal, 0);

    /* Stepping under a falling bullet: the cannon moves first, then the bullet lands. */
    empty_game(&g);
    g.aliens[0][0] = 1;
    g.cannon_x = 4;
    g.e_bullets[8][5] = 1;
    assert_int_equal(fl_space_invaders_step(&g, RIGHT), 0);
    assert_int_equal(g.terminal, 1);

    /* Stepping away from it in time survives. */
    empty_game(&g);
    g.aliens[0][0] = 1;
    g.e_bullets[8][5] = 1;
    fl_space_invaders_step(&g, LEFT);
    assert_int_equal(g.terminal, 0);
}

/* A bullet fired by an alien on row 9 leaves the grid before it can hit. */
static void test_row9_shooter_never_hits(void **st) {
    (void)st;
    fl_space_invaders_t g;
    empty_game(&g);
    g.cannon_x = 5;
    g.aliens[9][3] = 1;
    g.shot_timer = 0;
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.e_bullets[9][3], 1);
    fl_space_invaders_step(&g, LEFT); /* cannon to 4 */
    fl_space_invaders_step(&g, LEFT); /* cannon to 3: the bullet already left */
    assert_int_equal(g.cannon_x, 3);
    assert_int_equal(g.terminal, 1); /* but the alien itself is at (9, 3) */
    int n = 0;
    for (int y = 0; y < 10; y++)
        for (int x = 0; x < 10; x++) n += g.e_bullets[y][x];
    assert_int_equal(n, 0);
}

/* ---- Formation movement ----------------------------------------------------------------- */

static void test_edge_reverses_and_descends(void **st) {
    (void)st;
    fl_space_invaders_t g;
    empty_game(&g);
    g.aliens[2][0] = 1;
    g.aliens[2][1] = 1;
    g.aliens[4][3] = 1;
    g.move_timer = 0;
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.alien_dir, 1);
    assert_int_equal(count_aliens(&g), 3);
    assert_int_equal(g.aliens[3][0], 1);
    assert_int_equal(g.aliens[3][1], 1);
    assert_int_equal(g.aliens[5][3], 1);
    assert_int_equal(g.move_timer, 2); /* reload min(3, 12) = 3, lowered to 2 */
    /* Three aliens: the next moves come every 3 steps, sideways to the right. */
    fl_space_invaders_step(&g, NOOP);
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.aliens[3][0], 1);
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.aliens[3][0], 0);
    assert_int_equal(g.aliens[3][1], 1);
    assert_int_equal(g.aliens[3][2], 1);
    assert_int_equal(g.aliens[5][4], 1);
    assert_int_equal(g.alien_dir, 1);

    /* At the right edge heading right: reverse and descend. */
    empty_game(&g);
    g.alien_dir = 1;
    g.aliens[0][9] = 1;
    g.move_timer = 0;
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.alien_dir, -1);
    assert_int_equal(g.aliens[1][9], 1);
    assert_int_equal(count_aliens(&g), 1);

    /* In column 9 but heading left: plain sideways move. */
    empty_game(&g);
    g.alien_dir = -1;
    g.aliens[0][9] = 1;
    g.move_timer = 0;
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.alien_dir, -1);
    assert_int_equal(g.aliens[0][8], 1);
    assert_int_equal(count_aliens(&g), 1);
}

/* A single alien moves every step. */
static void test_single_alien_moves_every_step(void **st) {
    (void)st;
    fl_space_invaders_t g;
    empty_game(&g);
    g.aliens[0][6] = 1;
    g.move_timer = 0;
    for (int k = 0; k < 6; k++) {
        fl_space_invaders_step(&g, NOOP);
        assert_int_equal(g.aliens[0][5 - k], 1);
        assert_int_equal(count_aliens(&g), 1);
    }
    fl_space_invaders_step(&g, NOOP); /* at column 0 heading left: descend */
    assert_int_equal(g.aliens[1][0], 1);
    assert_int_equal(g.alien_dir, 1);
}

/* The descent that would leave the grid is terminal, and row 9's aliens wrap to row 0 in
 * that final observation. */
static void test_terminal_descent_wraps(void **st) {
    (void)st;
    fl_space_invaders_t g;
    empty_game(&g);
    g.cannon_x = 8;
    g.aliens[9][0] = 1;
    g.aliens[8][2] = 1;
    g.move_timer = 0;
    assert_int_equal(fl_space_invaders_step(&g, NOOP), 0);
    assert_int_equal(g.terminal, 1);
    assert_int_equal(g.aliens[0][0], 1);
    assert_int_equal(g.aliens[9][2], 1);
    assert_int_equal(count_aliens(&g), 2);
    uint8_t obs[OBS_BYTES];
    fl_space_invaders_obs(&g, obs);
    assert_int_equal(at(obs, 0, 0, 1), 1);
    assert_int_equal(at(obs, 0, 0, 3), 1); /* heading reversed to right */
}

/* An alien descending or sliding onto (9, pc) is terminal (step 6's check), and the
 * cannon moving into a row-9 alien is terminal (step 5). */
static void test_alien_reaches_cannon(void **st) {
    (void)st;
    fl_space_invaders_t g;
    empty_game(&g);
    g.cannon_x = 4;
    g.aliens[9][5] = 1;
    g.move_timer = 0;
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.aliens[9][4], 1);
    assert_int_equal(g.terminal, 1);

    empty_game(&g);
    g.cannon_x = 4;
    g.aliens[9][6] = 1;
    fl_space_invaders_step(&g, RIGHT);
    assert_int_equal(g.terminal, 0);
    fl_space_invaders_step(&g, RIGHT);
    assert_int_equal(g.terminal, 1);

    empty_game(&g);
    g.cannon_x = 3;
    g.alien_dir = 1;
    g.aliens[8][9] = 1;
    g.aliens[8][3] = 1;
    g.move_timer = 0;
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.aliens[9][3], 1);
    assert_int_equal(g.terminal, 1);
}

/* A friendly bullet one row below an alien swaps with it on a down-step: both survive.
 * The same holds for a sideways swap. */
static void test_crossing_survives(void **st) {
    (void)st;
    fl_space_invaders_t g;
    empty_game(&g);
    g.aliens[4][0] = 1;
    g.f_bullets[5][0] = 1;
    g.move_timer = 0;
    assert_int_equal(fl_space_invaders_step(&g, NOOP), 0);
    assert_int_equal(g.aliens[5][0], 1);
    assert_int_equal(g.f_bullets[4][0], 1);

    empty_game(&g);
    g.aliens[4][5] = 1;
    g.f_bullets[5][4] = 1; /* rises to (4, 4) while the alien slides to (4, 4): a kill */
    g.move_timer = 0;
    assert_int_equal(fl_space_invaders_step(&g, NOOP), 1);
    assert_int_equal(g.f_bullets[4][4], 0);
}

/* Friendly and enemy bullets pass through each other. */
static void test_bullets_pass_through(void **st) {
    (void)st;
    fl_space_invaders_t g;
    empty_game(&g);
    g.aliens[0][0] = 1;
    g.f_bullets[5][7] = 1;
    g.e_bullets[4][7] = 1;
    fl_space_invaders_step(&g, NOOP);
    assert_int_equal(g.f_bullets[4][7], 1);
    assert_int_equal(g.e_bullets[5][7], 1);
}

/* ---- Waves and ramping ------------------------------------------------------------------ */

/* Kills the last alien (placed at (4, 5), a bullet rising from (5, 5)). */
static int clear_wave(fl_space_invaders_t *g) {
    memset(g->aliens, 0, sizeof(g->aliens));
    memset(g->f_bullets, 0, sizeof(g->f_bullets));
    memset(g->e_bullets, 0, sizeof(g->e_bullets));
    g->aliens[4][5] = 1;
    g->f_bullets[5][5] = 1;
    g->move_timer = 7;
    g->shot_timer = 7;
    return fl_space_invaders_step(g, NOOP);
}

static void test_new_wave_ramping_on(void **st) {
    (void)st;
    fl_space_invaders_t g;
    new_game(&g, 1);
    g.alien_dir = 1;
    g.shot_cooldown = 3;
    g.e_bullets[1][1] = 1; /* an enemy bullet in flight stays */
    memset(g.aliens, 0, sizeof(g.aliens));
    g.aliens[4][5] = 1;
    g.f_bullets[5][5] = 1;
    g.move_timer = 7;
    g.shot_timer = 7;
    assert_int_equal(fl_space_invaders_step(&g, NOOP), 1);
    assert_int_equal(count_aliens(&g), 24);
    for (int y = 0; y <= 3; y++)
        for (int x = 2; x <= 7; x++) assert_int_equal(g.aliens[y][x], 1);
    assert_int_equal(g.move_interval, 11);
    assert_int_equal(g.ramp_index, 1);
    assert_int_equal(g.alien_dir, 1);
    assert_int_equal(g.move_timer, 6);
    assert_int_equal(g.shot_timer, 6);
    assert_int_equal(g.shot_cooldown, 2);
    assert_int_equal(g.e_bullets[2][1], 1);

    int expect[] = {10, 9, 8, 7, 6, 6, 6};
    for (int i = 0; i < 7; i++) {
        assert_int_equal(clear_wave(&g), 1);
        assert_int_equal(g.move_interval, expect[i]);
        assert_int_equal(g.ramp_index, i + 2 > 6 ? 6 : i + 2);
    }
}

static void test_new_wave_ramping_off(void **st) {
    (void)st;
    fl_space_invaders_t g;
    new_game(&g, 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(clear_wave(&g), 1);
        assert_int_equal(count_aliens(&g), 24);
        assert_int_equal(g.move_interval, 12);
        assert_int_equal(g.ramp_index, 0);
    }
}

/* The ramped interval applies from the next reload: a full wave with interval 11 moves
 * every 11 steps. After a lone alien's kill the timer already reads 0, so the new wave
 * moves on the very next step. */
static void test_ramped_interval_applies_on_reload(void **st) {
    (void)st;
    fl_space_invaders_t g;
    new_game(&g, 1);
    memset(g.aliens, 0, sizeof(g.aliens));
    g.aliens[4][5] = 1;
    g.f_bullets[5][5] = 1;
    g.move_timer = 1; /* a lone alien's timer: reloads to 1, reads 0 at the end */
    g.shot_timer = 50;
    assert_int_equal(fl_space_invaders_step(&g, NOOP), 1);
    assert_int_equal(g.move_timer, 0);
    assert_int_equal(g.move_interval, 11);
    int moves[3], n = 0;
    for (int k = 1; k <= 23 && n < 3; k++) {
        uint8_t prev[10][10];
        memcpy(prev, g.aliens, sizeof(prev));
        fl_space_invaders_step(&g, k % 2 ? LEFT : RIGHT);
        if (memcmp(prev, g.aliens, sizeof(prev)) != 0) moves[n++] = k;
    }
    assert_int_equal(n, 3);
    assert_int_equal(moves[0], 1);
    assert_int_equal(moves[1], 12);
    assert_int_equal(moves[2], 23);
}

/* ---- Wrapper: definitions, replay, no randomness --------------------------------------- */

static void test_definitions(void **st) {
    (void)st;
    const fl_env_def_t *defs[2] = {&fl_env_minatar_space_invaders, &fl_env_minatar_space_invaders_v1};
    for (int i = 0; i < 2; i++) {
        fl_err_t err;
        assert_int_equal(fl_env_validate(defs[i], &err), FL_OK);
        assert_int_equal(defs[i]->obs.dtype, FL_DTYPE_UINT8);
        assert_int_equal(defs[i]->obs.rank, 3);
        assert_int_equal(defs[i]->obs.shape[0], 10);
        assert_int_equal(defs[i]->obs.shape[1], 10);
        assert_int_equal(defs[i]->obs.shape[2], 6);
        assert_int_equal(defs[i]->max_episode_steps, 0);
    }
    assert_string_equal(fl_env_minatar_space_invaders.name, "minatar-space_invaders");
    assert_string_equal(fl_env_minatar_space_invaders_v1.name, "minatar-space_invaders-v1");
    assert_int_equal(fl_env_minatar_space_invaders.num_actions, 6);
    assert_int_equal(fl_env_minatar_space_invaders_v1.num_actions, 4);
}

typedef struct run {
    uint8_t obs[64][OBS_BYTES];
    float rewards[64];
    int terminated[64];
    int steps;
} run_t;

/* Runs one episode (at most 63 steps) of def through its own functions. */
static void run_episode(const fl_env_def_t *def, const fl_env_options_t *opts, uint64_t seed, const int *actions,
                        run_t *out) {
    fl_space_invaders_env_state_t state;
    assert_int_equal(def->state_size, sizeof(state));
    memset(&state, 0, sizeof(state));
    assert_int_equal(def->configure(&state, opts), 0);
    fl_rng_t rng;
    fl_rng_init(&rng, seed);
    memset(out, 0, sizeof(*out));
    def->reset(&state, &rng, out->obs[0]);
    int k = 0;
    while (k < 63) {
        def->step(&state, &rng, actions[k], out->obs[k + 1], &out->rewards[k], &out->terminated[k]);
        k++;
        if (out->terminated[k - 1]) break;
    }
    out->steps = k;
}

static int actions_full[63];
static int actions_min[63];

static void make_actions(void) {
    /* full indices: fire, left, left, fire, right, noop, ... ; the minimal set maps
     * 0 noop, 1 left, 2 right, 3 fire */
    static const int full_cycle[] = {FIRE, LEFT, LEFT, FIRE, RIGHT, NOOP, UP, DOWN, FIRE, RIGHT};
    static const int min_cycle[] = {3, 1, 1, 3, 2, 0, 0, 0, 3, 2};
    for (int k = 0; k < 63; k++) {
        actions_full[k] = full_cycle[k % 10];
        actions_min[k] = min_cycle[k % 10];
    }
}

static void test_replay_and_no_randomness(void **st) {
    (void)st;
    make_actions();
    static run_t a, b, c, d;
    fl_env_options_t opts = {.sticky_prob = 0.0f, .difficulty_ramping = 1, .reference_rng = 0, .args = ""};
    run_episode(&fl_env_minatar_space_invaders, &opts, 1, actions_full, &a);
    run_episode(&fl_env_minatar_space_invaders, &opts, 1, actions_full, &b);
    assert_int_equal(a.steps, b.steps);
    assert_memory_equal(&a, &b, sizeof(a));
    /* Different seed, same executed actions: same trajectory. */
    run_episode(&fl_env_minatar_space_invaders, &opts, 987654321, actions_full, &c);
    assert_memory_equal(&a, &c, sizeof(a));
    /* The minimal set executes the same full actions. */
    run_episode(&fl_env_minatar_space_invaders_v1, &opts, 5, actions_min, &d);
    assert_memory_equal(&a, &d, sizeof(a));

    /* And the wrapper agrees with the bare game. */
    fl_space_invaders_t g;
    new_game(&g, 1);
    uint8_t obs[OBS_BYTES];
    fl_space_invaders_obs(&g, obs);
    assert_memory_equal(obs, a.obs[0], OBS_BYTES);
    for (int k = 0; k < a.steps; k++) {
        int r = fl_space_invaders_step(&g, actions_full[k]);
        fl_space_invaders_obs(&g, obs);
        assert_memory_equal(obs, a.obs[k + 1], OBS_BYTES);
        assert_true(a.rewards[k] == (float)r);
        assert_int_equal(a.terminated[k], g.terminal);
    }
}

/* With sticky actions on, the same seed replays the same trajectory, with either
 * generator. With probability 1 every step repeats the initial noop, so whatever the
 * agent picks the episode is Appendix D's noop run: terminal on step 17. */
static void test_sticky_replay(void **st) {
    (void)st;
    make_actions();
    static run_t a, b;
    fl_env_options_t opts = {.sticky_prob = 0.5f, .difficulty_ramping = 1, .reference_rng = 0, .args = ""};
    run_episode(&fl_env_minatar_space_invaders, &opts, 42, actions_full, &a);
    run_episode(&fl_env_minatar_space_invaders, &opts, 42, actions_full, &b);
    assert_memory_equal(&a, &b, sizeof(a));
    opts.reference_rng = 1;
    run_episode(&fl_env_minatar_space_invaders, &opts, 42, actions_full, &a);
    run_episode(&fl_env_minatar_space_invaders, &opts, 42, actions_full, &b);
    assert_memory_equal(&a, &b, sizeof(a));

    opts.reference_rng = 0;
    opts.sticky_prob = 1.0f;
    run_episode(&fl_env_minatar_space_invaders, &opts, 3, actions_full, &a);
    assert_int_equal(a.steps, 17);
    assert_int_equal(a.terminated[16], 1);
    for (int k = 0; k < 17; k++) assert_true(a.rewards[k] == 0.0f);
    assert_int_equal(a.obs[17][FL_MINATAR_OBS_AT(9, 5, 0, CH)], 1);
    assert_int_equal(a.obs[17][FL_MINATAR_OBS_AT(9, 5, 5, CH)], 1);
}

/* The ramping option reaches the game at reset. */
static void test_ramping_option(void **st) {
    (void)st;
    fl_env_options_t opts = {.sticky_prob = 0.0f, .difficulty_ramping = 0, .reference_rng = 0, .args = ""};
    fl_space_invaders_env_state_t state;
    memset(&state, 0, sizeof(state));
    assert_int_equal(fl_env_minatar_space_invaders.configure(&state, &opts), 0);
    fl_rng_t rng;
    fl_rng_init(&rng, 3);
    uint8_t obs[OBS_BYTES];
    fl_env_minatar_space_invaders.reset(&state, &rng, obs);
    assert_int_equal(state.game.ramping, 0);
    opts.difficulty_ramping = 1;
    assert_int_equal(fl_env_minatar_space_invaders.configure(&state, &opts), 0);
    fl_env_minatar_space_invaders.reset(&state, &rng, obs);
    assert_int_equal(state.game.ramping, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reset_state_and_channels),
        cmocka_unit_test(test_reset_keeps_ramping_switch),
        cmocka_unit_test(test_appendix_d_noop_run),
        cmocka_unit_test(test_formation_and_shot_rhythm),
        cmocka_unit_test(test_cannon_moves_and_stops_at_edges),
        cmocka_unit_test(test_fire_cooldown),
        cmocka_unit_test(test_kill_and_lowest_shooter),
        cmocka_unit_test(test_shooter_nearest_column_ties_to_smaller),
        cmocka_unit_test(test_shot_survives_shooter_kill),
        cmocka_unit_test(test_enemy_bullets),
        cmocka_unit_test(test_row9_shooter_never_hits),
        cmocka_unit_test(test_edge_reverses_and_descends),
        cmocka_unit_test(test_single_alien_moves_every_step),
        cmocka_unit_test(test_terminal_descent_wraps),
        cmocka_unit_test(test_alien_reaches_cannon),
        cmocka_unit_test(test_crossing_survives),
        cmocka_unit_test(test_bullets_pass_through),
        cmocka_unit_test(test_new_wave_ramping_on),
        cmocka_unit_test(test_new_wave_ramping_off),
        cmocka_unit_test(test_ramped_interval_applies_on_reload),
        cmocka_unit_test(test_definitions),
        cmocka_unit_test(test_replay_and_no_randomness),
        cmocka_unit_test(test_sticky_replay),
        cmocka_unit_test(test_ramping_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
