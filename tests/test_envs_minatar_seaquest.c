/* Unit tests for MinAtar Seaquest (docs/minatar.md, section 5 and Appendix D).
 *
 * Most tests drive the game directly (fl_seaquest_t), putting it into a chosen state,
 * because the spec's facts are about the game with sticky actions off. Spawn draws are
 * checked by replaying the expected draws on a copy of the generator and comparing both
 * the generator state and the spawned object. The wrapper tests cover the definitions,
 * the reset observation and deterministic replay. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "envs/core/env.h"
#include "envs/minatar/seaquest.h"

enum { NOOP = 0, LEFT = 1, UP = 2, RIGHT = 3, DOWN = 4, FIRE = 5 };
#define OBS_BYTES (10 * 10 * FL_SEAQUEST_CHANNELS)

/* ---- Helpers --------------------------------------------------------------------------- */

/* A test generator: a value (copyable, comparable with memcmp) holding both kinds of
 * stream; G() makes the view the game draws from. */
typedef struct tgen {
    fl_rng_t rng;
    fl_mt19937_t mt;
    int use_mt;
} tgen_t;
#define G(t) (&(fl_minatar_gen_t){&(t)->rng, (t)->use_mt ? &(t)->mt : NULL})

static void gen_init(tgen_t *gen, uint64_t seed) {
    memset(gen, 0, sizeof(*gen));
    fl_rng_init(&gen->rng, seed);
    fl_mt19937_seed(&gen->mt, (uint32_t)seed);
}

static void new_game(fl_seaquest_t *g, int ramping) {
    memset(g, 0, sizeof(*g));
    g->ramping = ramping;
    fl_seaquest_reset(g);
}

/* A game with no spawns for a long time, so that mechanics can be checked alone. */
static void quiet_game(fl_seaquest_t *g) {
    new_game(g, 1);
    g->spawn_timer = 1000;
    g->diver_timer = 1000;
}

static fl_seaquest_obj_t obj(int x, int y, int dir, int move_timer, int shot_timer) {
    fl_seaquest_obj_t o = {(int8_t)x, (int8_t)y, (int8_t)dir, (int8_t)move_timer, (int8_t)shot_timer};
    return o;
}

static void push(fl_seaquest_list_t *l, fl_seaquest_obj_t o) {
    l->items[l->n++] = o;
}

static int cell(const uint8_t *obs, int y, int x, int ch) {
    return obs[(y * 10 + x) * FL_SEAQUEST_CHANNELS + ch];
}

static int count_channel(const uint8_t *obs, int ch) {
    int n = 0;
    for (int y = 0; y < 10; y++)
        for (int x = 0; x < 10; x++) n += cell(obs, y, x, ch);
    return n;
}

static int gauge_cells(int oxygen, int divers, int ch) {
    fl_seaquest_t g;
    uint8_t obs[OBS_BYTES];
    quiet_game(&g);
    g.oxygen = oxygen;
    g.divers = divers;
    fl_seaquest_obs(&g, obs);
    return count_channel(obs, ch);
}

/* ---- Reset and observation --------------------------------------------------------------- */

static void test_reset_state_and_obs(void **st) {
    (void)st;
    fl_seaquest_t g;
    uint8_t obs[OBS_BYTES];
    new_game(&g, 1);
    assert_int_equal(g.sub_x, 5);
    assert_int_equal(g.sub_y, 0);
    assert_int_equal(g.sub_dir, -1);
    assert_int_equal(g.oxygen, 200);
    assert_int_equal(g.divers, 0);
    assert_int_equal(g.spawn_interval, 20);
    assert_int_equal(g.move_interval, 5);
    fl_seaquest_obs(&g, obs);
    assert_int_equal(cell(obs, 0, 5, 0), 1);
    assert_int_equal(cell(obs, 0, 6, 1), 1); /* back cell: behind a sub facing left */
    for (int x = 0; x < 10; x++) assert_int_equal(cell(obs, 9, x, 7), 1);
    int total = 0;
    for (int i = 0; i < OBS_BYTES; i++) total += obs[i];
    assert_int_equal(total, 12);
}

static void test_obs_all_channels(void **st) {
    (void)st;
    fl_seaquest_t g;
    uint8_t obs[OBS_BYTES];
    quiet_game(&g);
    g.sub_x = 3, g.sub_y = 4, g.sub_dir = 1;
    g.oxygen = 100; /* 5 cells */
    g.divers = 2;   /* columns 7, 8 */
    push(&g.f_bullets, obj(6, 4, 1, 0, 0));
    push(&g.e_bullets, obj(2, 7, -1, 0, 0));
    push(&g.fish, obj(0, 2, 1, 3, 0));        /* trail off-grid at column -1 */
    push(&g.subs, obj(8, 6, -1, 3, 10));      /* trail at (6, 9) */
    push(&g.divers_list, obj(5, 1, 1, 5, 0)); /* trail at (1, 4) */
    fl_seaquest_obs(&g, obs);
    struct {
        int y, x, ch;
    } want[] = {{4, 3, 0}, {4, 2, 1}, {4, 6, 2}, {6, 9, 3}, {1, 4, 3}, {7, 2, 4}, {2, 0, 5}, {6, 8, 6},
                {1, 5, 9}, {9, 0, 7}, {9, 1, 7}, {9, 2, 7}, {9, 3, 7}, {9, 4, 7}, {9, 7, 8}, {9, 8, 8}};
    int n = (int)(sizeof(want) / sizeof(want[0]));
    uint8_t expect[OBS_BYTES] = {0};
    for (int i = 0; i < n; i++) expect[(want[i].y * 10 + want[i].x) * FL_SEAQUEST_CHANNELS + want[i].ch] = 1;
    for (int i = 0; i < OBS_BYTES; i++)
        if (obs[i] != expect[i])
            fail_msg("obs mismatch at row %d col %d channel %d: %d, expected %d", i / 100, (i / 10) % 10, i % 10,
                     obs[i], expect[i]);
}

static void test_oxygen_gauge_appendix_d(void **st) {
    (void)st;
    assert_int_equal(gauge_cells(200, 0, 7), 10);
    assert_int_equal(gauge_cells(199, 0, 7), 9);
    assert_int_equal(gauge_cells(180, 0, 7), 9);
    assert_int_equal(gauge_cells(179, 0, 7), 8);
    assert_int_equal(gauge_cells(20, 0, 7), 1);
    assert_int_equal(gauge_cells(19, 0, 7), 0);
    assert_int_equal(gauge_cells(0, 0, 7), 0);
    assert_int_equal(gauge_cells(-1, 0, 7), 0);
}

static void test_diver_gauge(void **st) {
    (void)st;
    uint8_t obs[OBS_BYTES];
    fl_seaquest_t g;
    for (int k = -3; k <= 6; k++) assert_int_equal(gauge_cells(200, k, 8), k > 0 ? k : 0);
    quiet_game(&g);
    g.divers = 6;
    fl_seaquest_obs(&g, obs);
    for (int x = 0; x < 10; x++) assert_int_equal(cell(obs, 9, x, 8), x >= 3 && x <= 8);
}

/* ---- Appendix D ---------------------------------------------------------------------------- */

/* Staying on the surface: draws happen exactly on enemy spawn steps 21, 41, ... (3 draws:
 * side, kind, row) and diver spawn steps 31, 61, ... (2 draws: side, row), enemy first. */
static void spawn_schedule(int use_mt) {
    fl_seaquest_t g;
    tgen_t gen, expect;
    new_game(&g, 1);
    gen_init(&gen, 7);
    gen.use_mt = use_mt;
    int enemy_steps = 0, diver_steps = 0;
    for (int k = 1; k <= 300; k++) {
        expect = gen;
        int is_enemy = k >= 21 && (k - 21) % 20 == 0;
        int is_diver = k >= 31 && (k - 31) % 30 == 0;
        int e_left = 0, e_sub = 0, e_row = 0, d_left = 0, d_row = 0;
        if (is_enemy) {
            e_left = fl_minatar_u(G(&expect)) < 0.5;
            e_sub = fl_minatar_u(G(&expect)) < 1.0 / 3.0;
            e_row = fl_minatar_int(G(&expect), 1, 8);
        }
        if (is_diver) {
            d_left = fl_minatar_u(G(&expect)) < 0.5;
            d_row = fl_minatar_int(G(&expect), 1, 8);
        }
        int subs = g.subs.n, fish = g.fish.n, divers = g.divers_list.n;
        int blocked = 0;
        for (int i = 0; i < g.subs.n; i++)
            if (g.subs.items[i].y == e_row && g.subs.items[i].dir == (e_left ? -1 : 1)) blocked = 1;
        for (int i = 0; i < g.fish.n; i++)
            if (g.fish.items[i].y == e_row && g.fish.items[i].dir == (e_left ? -1 : 1)) blocked = 1;
        assert_int_equal(fl_seaquest_step(&g, NOOP, G(&gen)), 0);
        assert_false(g.terminal);
        if (memcmp(&gen, &expect, sizeof(gen)) != 0) fail_msg("generator use differs on step %d", k);
        if (is_enemy && !blocked) {
            enemy_steps++;
            fl_seaquest_list_t *l = e_sub ? &g.subs : &g.fish;
            /* The newest enemy is last in its list (an old one may have left the grid). */
            assert_true(l->n >= 1 && l->n >= (e_sub ? subs : fish));
            fl_seaquest_obj_t e = l->items[l->n - 1];
            assert_int_equal(e.y, e_row);
            assert_int_equal(e.dir, e_left ? 1 : -1);
            assert_int_equal(e.x, e_left ? 0 : 9);
            assert_int_equal(e.move_timer, g.move_interval - 1); /* visited once on its spawn step */
            if (e_sub) assert_int_equal(e.shot_timer, 9);
        } else if (!is_enemy || blocked) {
            /* Enemies only leave lists (off-grid) here: none may appear. */
            assert_true(g.subs.n <= subs && g.fish.n <= fish);
        }
        if (is_diver) {
            diver_steps++;
            assert_int_equal(g.divers_list.n, divers + 1);
            fl_seaquest_obj_t d = g.divers_list.items[g.divers_list.n - 1];
            assert_int_equal(d.y, d_row);
            assert_int_equal(d.x, d_left ? 0 : 9);
            assert_int_equal(d.dir, d_left ? 1 : -1);
            assert_int_equal(d.move_timer, 4);
        } else {
            assert_true(g.divers_list.n <= divers);
        }
    }
    assert_true(enemy_steps >= 1);
    assert_int_equal(diver_steps, 9);
}

static void test_spawn_schedule_and_draws(void **st) {
    (void)st;
    spawn_schedule(0);
}

static void test_spawn_schedule_and_draws_reference_rng(void **st) {
    (void)st;
    spawn_schedule(1);
}

static void test_dive_and_stay_ends_on_step_201(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    uint8_t obs[OBS_BYTES];
    gen_init(&gen, 1);
    quiet_game(&g);
    assert_int_equal(fl_seaquest_step(&g, DOWN, G(&gen)), 0);
    assert_int_equal(g.sub_y, 1);
    assert_int_equal(g.oxygen, 199);
    for (int k = 2; k <= 200; k++) {
        fl_seaquest_step(&g, NOOP, G(&gen));
        if (g.terminal) fail_msg("terminal on step %d", k);
    }
    assert_int_equal(g.oxygen, 0);
    fl_seaquest_step(&g, NOOP, G(&gen));
    assert_true(g.terminal);
    fl_seaquest_obs(&g, obs);
    assert_int_equal(count_channel(obs, 7), 0);
}

/* Down on step 1, then no action, with the real spawn schedule: the sub sits at (1, 5)
 * and the run ends by step 201 at the latest (either a collision or the oxygen). */
static void test_dive_with_spawns_ends_by_201(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 3);
    new_game(&g, 1);
    int k = 0;
    while (!g.terminal && k < 1000) fl_seaquest_step(&g, k++ == 0 ? DOWN : NOOP, G(&gen));
    assert_true(g.terminal);
    assert_true(k <= 201);
}

static void test_surface_with_six_divers(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    g.sub_y = 1;
    g.at_surface = 0;
    g.divers = 6;
    g.oxygen = 150;
    assert_int_equal(fl_seaquest_step(&g, UP, G(&gen)), 7);
    assert_false(g.terminal);
    assert_int_equal(g.divers, -1);
    assert_int_equal(g.oxygen, 200);
    assert_int_equal(g.ramp_index, 1);
    assert_int_equal(g.spawn_interval, 19);
    assert_int_equal(g.move_interval, 5);
    /* Surfacing again at once: no reward, not terminal, count -2. */
    assert_int_equal(fl_seaquest_step(&g, DOWN, G(&gen)), 0);
    assert_int_equal(g.oxygen, 199);
    assert_int_equal(fl_seaquest_step(&g, UP, G(&gen)), 0);
    assert_false(g.terminal);
    assert_int_equal(g.divers, -2);
    assert_int_equal(g.oxygen, 200);
    assert_int_equal(g.ramp_index, 2);
    assert_int_equal(g.spawn_interval, 18);
    assert_int_equal(g.move_interval, 4);
    /* Staying on the surface afterwards uses no oxygen and does nothing more. */
    for (int k = 0; k < 5; k++) assert_int_equal(fl_seaquest_step(&g, NOOP, G(&gen)), 0);
    assert_int_equal(g.oxygen, 200);
    assert_int_equal(g.ramp_index, 2);
    assert_int_equal(g.divers, -2);
}

static void test_surface_with_no_divers_is_terminal(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    /* Staying on the surface from reset is safe. */
    for (int k = 0; k < 10; k++) fl_seaquest_step(&g, NOOP, G(&gen));
    assert_false(g.terminal);
    fl_seaquest_step(&g, DOWN, G(&gen));
    assert_false(g.terminal);
    assert_int_equal(fl_seaquest_step(&g, UP, G(&gen)), 0);
    assert_true(g.terminal);
    assert_int_equal(g.ramp_index, 0);
    /* An ended game changes nothing and gives nothing. */
    fl_seaquest_t before = g;
    assert_int_equal(fl_seaquest_step(&g, FIRE, G(&gen)), 0);
    assert_memory_equal(&g, &before, sizeof(g));
}

static void test_surface_with_some_divers(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    for (int d = 1; d <= 5; d++) {
        quiet_game(&g);
        g.sub_y = 2;
        g.at_surface = 0;
        g.divers = d;
        g.oxygen = 60;
        assert_int_equal(fl_seaquest_step(&g, UP, G(&gen)), 0);
        assert_int_equal(g.oxygen, 59); /* still below the surface at the end of the step */
        assert_int_equal(fl_seaquest_step(&g, UP, G(&gen)), 0);
        assert_false(g.terminal);
        assert_int_equal(g.divers, d - 1);
        assert_int_equal(g.oxygen, 200);
        assert_int_equal(g.ramp_index, 1);
    }
}

/* Oxygen reached 0 on the previous step and the sub surfaces with divers now: the step
 * is terminal and the surfacing still runs, for a reward of 0. */
static void test_oxygen_out_while_surfacing(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    g.sub_y = 2;
    g.at_surface = 0;
    g.divers = 6;
    g.oxygen = 2;
    fl_seaquest_step(&g, UP, G(&gen));
    assert_int_equal(g.oxygen, 1);
    assert_false(g.terminal);
    fl_seaquest_step(&g, NOOP, G(&gen));
    assert_int_equal(g.oxygen, 0);
    assert_false(g.terminal);
    assert_int_equal(fl_seaquest_step(&g, UP, G(&gen)), 0);
    assert_true(g.terminal);
    assert_int_equal(g.divers, -1);
    assert_int_equal(g.oxygen, 200);
    assert_int_equal(g.ramp_index, 1);
}

static void test_ramping_schedule_and_off(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    for (int n = 1; n <= 25; n++) {
        g.divers = 3;
        fl_seaquest_step(&g, DOWN, G(&gen));
        fl_seaquest_step(&g, UP, G(&gen));
        g.spawn_timer = g.diver_timer = 1000;
        assert_false(g.terminal);
        int m = n < 19 ? n : 19;
        assert_int_equal(g.ramp_index, m);
        assert_int_equal(g.spawn_interval, 20 - m > 1 ? 20 - m : 1);
        assert_int_equal(g.move_interval, 5 - m / 2 > 2 ? 5 - m / 2 : 2);
    }
    /* Ramping off: nothing changes on surfacing. */
    new_game(&g, 0);
    g.spawn_timer = g.diver_timer = 1000;
    for (int n = 1; n <= 5; n++) {
        g.divers = 3;
        fl_seaquest_step(&g, DOWN, G(&gen));
        fl_seaquest_step(&g, UP, G(&gen));
        assert_int_equal(g.divers, 2);
        assert_int_equal(g.ramp_index, 0);
        assert_int_equal(g.spawn_interval, 20);
        assert_int_equal(g.move_interval, 5);
    }
    /* reset keeps the switch. */
    fl_seaquest_reset(&g);
    assert_int_equal(g.ramping, 0);
}

/* ---- Movement and shooting ----------------------------------------------------------------- */

static void test_movement(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    fl_seaquest_step(&g, UP, G(&gen)); /* already at the top */
    assert_int_equal(g.sub_y, 0);
    for (int k = 0; k < 12; k++) fl_seaquest_step(&g, DOWN, G(&gen));
    assert_int_equal(g.sub_y, 8);
    fl_seaquest_step(&g, UP, G(&gen));
    assert_int_equal(g.sub_y, 7);
    for (int k = 0; k < 12; k++) fl_seaquest_step(&g, RIGHT, G(&gen));
    assert_int_equal(g.sub_x, 9);
    assert_int_equal(g.sub_dir, 1);
    fl_seaquest_step(&g, LEFT, G(&gen));
    assert_int_equal(g.sub_x, 8);
    assert_int_equal(g.sub_dir, -1);
    for (int k = 0; k < 12; k++) fl_seaquest_step(&g, LEFT, G(&gen));
    assert_int_equal(g.sub_x, 0);
    /* Blocked moves still turn the sub. */
    fl_seaquest_step(&g, RIGHT, G(&gen));
    fl_seaquest_step(&g, LEFT, G(&gen));
    fl_seaquest_step(&g, LEFT, G(&gen));
    assert_int_equal(g.sub_x, 0);
    assert_int_equal(g.sub_dir, -1);
    g.sub_x = 9;
    g.sub_dir = -1;
    fl_seaquest_step(&g, RIGHT, G(&gen));
    assert_int_equal(g.sub_x, 9);
    assert_int_equal(g.sub_dir, 1);
    /* noop and fire do not move. */
    fl_seaquest_step(&g, NOOP, G(&gen));
    fl_seaquest_step(&g, FIRE, G(&gen));
    assert_int_equal(g.sub_x, 9);
    assert_int_equal(g.sub_y, 7);
}

static void test_fire_cadence(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    /* Step 1: the bullet appears one cell in front at once (at (0, 4), facing left). */
    fl_seaquest_step(&g, FIRE, G(&gen));
    assert_int_equal(g.f_bullets.n, 1);
    assert_int_equal(g.f_bullets.items[0].x, 4);
    assert_int_equal(g.f_bullets.items[0].y, 0);
    assert_int_equal(g.f_bullets.items[0].dir, -1);
    int fired_on[40] = {0};
    int nfired = 1;
    fired_on[0] = 1;
    int max_alive = 1;
    for (int k = 2; k <= 30; k++) {
        int before = g.f_bullets.n;
        int newest_x = before ? g.f_bullets.items[before - 1].x : -100;
        fl_seaquest_step(&g, FIRE, G(&gen));
        /* A new bullet sits at column 4 right after its firing step. */
        if (g.f_bullets.n && g.f_bullets.items[g.f_bullets.n - 1].x == 4 && newest_x != 5) fired_on[nfired++] = k;
        if (g.f_bullets.n > max_alive) max_alive = g.f_bullets.n;
    }
    assert_int_equal(nfired, 6);
    for (int i = 0; i < nfired; i++) assert_int_equal(fired_on[i], 1 + 5 * i);
    assert_true(max_alive <= 2);
    /* Firing toward the wall from the edge column: the bullet disappears at once. */
    quiet_game(&g);
    g.sub_x = 0;
    fl_seaquest_step(&g, FIRE, G(&gen));
    assert_int_equal(g.f_bullets.n, 0);
    assert_int_equal(g.shot_cooldown, 4);
    /* Fire during the cooldown does nothing: no move, no bullet. */
    g.sub_x = 4;
    fl_seaquest_step(&g, FIRE, G(&gen));
    assert_int_equal(g.f_bullets.n, 0);
    assert_int_equal(g.sub_x, 4);
    assert_int_equal(g.shot_cooldown, 3);
}

static void test_bullet_kills_oldest_fish_then_sub(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    g.sub_y = 3, g.sub_x = 2, g.sub_dir = 1, g.at_surface = 0;
    push(&g.subs, obj(5, 3, -1, 9, 100));
    push(&g.fish, obj(5, 3, -1, 9, 0)); /* oldest fish */
    push(&g.fish, obj(5, 3, -1, 8, 0));
    /* Bullet: (3,3) on step 1, (3,4) on step 2, (3,5) on step 3 -> hits the oldest fish. */
    assert_int_equal(fl_seaquest_step(&g, FIRE, G(&gen)), 0);
    assert_int_equal(fl_seaquest_step(&g, NOOP, G(&gen)), 0);
    assert_int_equal(fl_seaquest_step(&g, NOOP, G(&gen)), 1);
    assert_int_equal(g.fish.n, 1);
    assert_int_equal(g.fish.items[0].move_timer, 5); /* the younger one: 8 - 3 */
    assert_int_equal(g.subs.n, 1);
    assert_int_equal(g.f_bullets.n, 0);
    /* Next bullet: hits the remaining fish first, then the sub. */
    for (int k = 0; k < 2; k++) fl_seaquest_step(&g, NOOP, G(&gen));
    int r = 0;
    r += fl_seaquest_step(&g, FIRE, G(&gen)); /* step 6: cooldown is over */
    r += fl_seaquest_step(&g, NOOP, G(&gen));
    r += fl_seaquest_step(&g, NOOP, G(&gen));
    assert_int_equal(r, 1);
    assert_int_equal(g.fish.n, 0);
    assert_int_equal(g.subs.n, 1);
    for (int k = 0; k < 2; k++) fl_seaquest_step(&g, NOOP, G(&gen));
    r = fl_seaquest_step(&g, FIRE, G(&gen)) + fl_seaquest_step(&g, NOOP, G(&gen)) + fl_seaquest_step(&g, NOOP, G(&gen));
    assert_int_equal(r, 1);
    assert_int_equal(g.subs.n, 0);
    assert_false(g.terminal);
}

/* A bullet and a fish moving toward each other never pass through one another. */
static void test_bullet_and_enemy_cannot_cross(void **st) {
    (void)st;
    tgen_t gen;
    gen_init(&gen, 1);
    for (int gap = 1; gap <= 5; gap++) {
        for (int timer = 0; timer <= 5; timer++) {
            fl_seaquest_t g;
            quiet_game(&g);
            g.sub_y = 4, g.sub_x = 0, g.sub_dir = 1, g.at_surface = 0;
            push(&g.fish, obj(1 + gap, 4, -1, timer, 0));
            int r = fl_seaquest_step(&g, FIRE, G(&gen));
            for (int k = 0; k < 12 && !g.terminal && g.fish.n; k++) r += fl_seaquest_step(&g, NOOP, G(&gen));
            assert_false(g.terminal);
            assert_int_equal(r, 1);
            assert_int_equal(g.fish.n, 0);
        }
    }
}

/* ---- Collisions (5.4) --------------------------------------------------------------------- */

static void test_enemy_moves_into_front_is_terminal(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    g.sub_y = 4, g.sub_x = 5, g.at_surface = 0;
    push(&g.fish, obj(3, 4, 1, 1, 0));
    fl_seaquest_step(&g, NOOP, G(&gen));
    assert_false(g.terminal);
    fl_seaquest_step(&g, NOOP, G(&gen)); /* the fish moves to (4, 4), next to the front cell */
    assert_false(g.terminal);
    assert_int_equal(g.fish.items[0].x, 4);
    /* Its next move, 6 steps later, lands on the front cell (4, 5). */
    for (int k = 0; k < 5; k++) {
        fl_seaquest_step(&g, NOOP, G(&gen));
        assert_false(g.terminal);
    }
    fl_seaquest_step(&g, NOOP, G(&gen));
    assert_true(g.terminal);
    assert_int_equal(g.fish.items[0].x, 5);
}

static void test_back_cell_is_never_hit(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    g.sub_y = 4, g.sub_x = 5, g.sub_dir = -1, g.at_surface = 0; /* back cell (4, 6) */
    push(&g.subs, obj(6, 4, -1, 5, 100));
    push(&g.e_bullets, obj(7, 4, -1, 0, 0)); /* moves to (4, 6) */
    fl_seaquest_step(&g, NOOP, G(&gen));
    assert_false(g.terminal);
    assert_int_equal(g.e_bullets.n, 1);
    assert_int_equal(g.e_bullets.items[0].x, 6);
    fl_seaquest_step(&g, NOOP, G(&gen)); /* bullet reaches the front */
    assert_true(g.terminal);
}

static void test_player_walks_into_enemy(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    g.sub_y = 4, g.sub_x = 5, g.at_surface = 0;
    push(&g.subs, obj(4, 4, 1, 3, 100));
    fl_seaquest_step(&g, LEFT, G(&gen));
    assert_true(g.terminal);
    /* The same for a fish and for an enemy bullet already in the front cell. */
    quiet_game(&g);
    g.sub_y = 4, g.sub_x = 5, g.at_surface = 0;
    push(&g.fish, obj(5, 5, 1, 3, 0));
    fl_seaquest_step(&g, DOWN, G(&gen));
    assert_true(g.terminal);
    quiet_game(&g);
    g.sub_y = 4, g.sub_x = 5, g.at_surface = 0;
    push(&g.e_bullets, obj(5, 3, 1, 0, 0));
    fl_seaquest_step(&g, UP, G(&gen));
    assert_true(g.terminal);
}

/* Once terminal, the rest of the step still runs and its rewards count. */
static void test_rest_of_terminal_step_runs(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    g.sub_y = 4, g.sub_x = 5, g.at_surface = 0;
    push(&g.subs, obj(5, 4, 1, 3, 100));    /* in the front cell: terminal in step 7 */
    push(&g.f_bullets, obj(1, 7, 1, 0, 0)); /* moves to (7, 2) in step 5 */
    push(&g.fish, obj(3, 7, -1, 0, 0));     /* moves onto the bullet in step 9 */
    assert_int_equal(fl_seaquest_step(&g, NOOP, G(&gen)), 1);
    assert_true(g.terminal);
    assert_int_equal(g.fish.n, 0);
    assert_int_equal(g.oxygen, 199);
}

/* ---- Enemy subs, fish and divers: timers and shots ------------------------------------- */

static void test_enemy_sub_shots_and_moves(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    /* As spawned from the right on row 6 (spawn step = visit 1 is step 1 here). */
    push(&g.subs, obj(9, 6, -1, 5, 10));
    int moves[8], nm = 0, shots[4], ns = 0;
    for (int k = 1; k <= 30; k++) {
        int x = g.subs.items[0].x;
        int nb = g.e_bullets.n;
        fl_seaquest_step(&g, NOOP, G(&gen));
        assert_false(g.terminal);
        if (g.subs.items[0].x != x && nm < 8) moves[nm++] = k;
        if (g.e_bullets.n > nb && ns < 4) {
            /* New bullet: created in the sub's cell and moved one column on the same step. */
            fl_seaquest_obj_t b = g.e_bullets.items[g.e_bullets.n - 1];
            assert_int_equal(b.x, g.subs.items[0].x - 1);
            assert_int_equal(b.y, 6);
            assert_int_equal(b.dir, -1);
            shots[ns++] = k;
        }
    }
    assert_true(nm >= 4);
    assert_int_equal(moves[0], 6);
    assert_int_equal(moves[1], 12);
    assert_int_equal(moves[2], 18);
    assert_int_equal(ns, 2);
    assert_int_equal(shots[0], 11);
    assert_int_equal(shots[1], 22);
}

static void test_dying_shot(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    /* Shot by a bullet in step 7 with the shot timer at 0: the bullet appears where it died
     * and moves on. */
    quiet_game(&g);
    g.sub_y = 8, g.sub_x = 0, g.sub_dir = -1, g.at_surface = 0;
    push(&g.subs, obj(5, 3, -1, 0, 0));
    push(&g.f_bullets, obj(3, 3, 1, 0, 0)); /* moves to (3, 4) in step 5; the sub moves onto it */
    assert_int_equal(fl_seaquest_step(&g, NOOP, G(&gen)), 1);
    assert_int_equal(g.subs.n, 0);
    assert_int_equal(g.f_bullets.n, 0);
    assert_int_equal(g.e_bullets.n, 1);
    assert_int_equal(g.e_bullets.items[0].x, 3);
    assert_int_equal(g.e_bullets.items[0].y, 3);
    /* Leaving the grid with the shot timer at 0: the bullet is made off-grid and is gone. */
    quiet_game(&g);
    g.sub_y = 8, g.at_surface = 0;
    push(&g.subs, obj(0, 3, -1, 0, 0));
    fl_seaquest_step(&g, NOOP, G(&gen));
    assert_int_equal(g.subs.n, 0);
    assert_int_equal(g.e_bullets.n, 0);
    /* With the shot timer above 0 nothing is fired. */
    quiet_game(&g);
    g.sub_y = 8, g.at_surface = 0;
    push(&g.subs, obj(5, 3, -1, 0, 3));
    push(&g.f_bullets, obj(3, 3, 1, 0, 0));
    assert_int_equal(fl_seaquest_step(&g, NOOP, G(&gen)), 1);
    assert_int_equal(g.e_bullets.n, 0);
}

/* An enemy spawned with move interval m first moves m steps after its spawn step, then
 * every m' + 1 steps with m' the interval at each reload. */
static void test_enemy_move_timer_follows_interval(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    g.move_interval = 3;
    push(&g.fish, obj(0, 5, 1, 3, 0)); /* created this step with timer 3 */
    int moves[4], nm = 0;
    for (int k = 1; k <= 12 && nm < 4; k++) {
        int x = g.fish.items[0].x;
        if (k == 5) g.move_interval = 2;
        fl_seaquest_step(&g, NOOP, G(&gen));
        if (g.fish.items[0].x != x) moves[nm++] = k;
    }
    /* Visits 1..4 -> first move on step 4 (3 steps after the spawn step 1), reload 3
     * -> step 8; the interval became 2 before that reload, so then step 11. */
    assert_int_equal(moves[0], 4);
    assert_int_equal(moves[1], 8);
    assert_int_equal(moves[2], 11);
}

static void test_divers_move_and_collect(void **st) {
    (void)st;
    fl_seaquest_t g;
    tgen_t gen;
    gen_init(&gen, 1);
    quiet_game(&g);
    g.sub_y = 2, g.sub_x = 4, g.at_surface = 0;
    push(&g.divers_list, obj(0, 2, 1, 5, 0)); /* as spawned on step 1 */
    int moves[4], nm = 0;
    for (int k = 1; k <= 30 && g.divers_list.n; k++) {
        int x = g.divers_list.items[0].x;
        fl_seaquest_step(&g, NOOP, G(&gen));
        assert_false(g.terminal);
        if (g.divers_list.n && g.divers_list.items[0].x != x && nm < 4) moves[nm++] = k;
        if (!g.divers_list.n) moves[nm++] = k;
    }
    assert_int_equal(nm, 4);
    assert_int_equal(moves[0], 6);
    assert_int_equal(moves[1], 12);
    assert_int_equal(moves[2], 18);
    assert_int_equal(moves[3], 24); /* moves into the sub's cell (2, 4) and is collected */
    assert_int_equal(g.divers, 1);

    /* Divers spawned into the player's cell are collected at once (step 6). */
    quiet_game(&g);
    g.sub_y = 3, g.sub_x = 0, g.at_surface = 0;
    g.divers = -1;
    push(&g.divers_list, obj(0, 3, 1, 5, 0));
    fl_seaquest_step(&g, NOOP, G(&gen));
    assert_int_equal(g.divers_list.n, 0);
    assert_int_equal(g.divers, 0); /* from -1: the gauge still shows nothing */
    uint8_t obs[OBS_BYTES];
    fl_seaquest_obs(&g, obs);
    assert_int_equal(count_channel(obs, 8), 0);

    /* With 6 aboard a diver passes through the sub and stays visible on top of it. */
    quiet_game(&g);
    g.sub_y = 3, g.sub_x = 0, g.at_surface = 0;
    g.divers = 6;
    push(&g.divers_list, obj(0, 3, 1, 5, 0));
    fl_seaquest_step(&g, NOOP, G(&gen));
    assert_int_equal(g.divers_list.n, 1);
    assert_int_equal(g.divers, 6);
    fl_seaquest_obs(&g, obs);
    assert_int_equal(cell(obs, 3, 0, 0), 1);
    assert_int_equal(cell(obs, 3, 0, 9), 1);
    /* Divers are not harmed by bullets or enemies. */
    quiet_game(&g);
    g.sub_y = 8, g.at_surface = 0;
    push(&g.divers_list, obj(5, 3, 1, 5, 0));
    push(&g.f_bullets, obj(4, 3, 1, 0, 0));
    push(&g.fish, obj(5, 3, 1, 3, 0));
    assert_int_equal(fl_seaquest_step(&g, NOOP, G(&gen)), 1);
    assert_int_equal(g.divers_list.n, 1);
    assert_int_equal(g.fish.n, 0); /* the bullet took the fish, not the diver */
}

static void test_spawn_blocked_by_opposite_heading(void **st) {
    (void)st;
    /* Find a seed whose first enemy draw gives row r and side s, then put an enemy with
     * the opposite heading on row r: nothing spawns but the three draws are used. */
    for (uint64_t seed = 1; seed < 50; seed++) {
        fl_seaquest_t g;
        tgen_t gen, probe;
        gen_init(&gen, seed);
        probe = gen;
        int left = fl_minatar_u(G(&probe)) < 0.5;
        (void)fl_minatar_u(G(&probe));
        int row = fl_minatar_int(G(&probe), 1, 8);
        quiet_game(&g);
        g.spawn_timer = 0;
        int opposite = left ? -1 : 1;
        push(&g.fish, obj(opposite > 0 ? 0 : 9, row, opposite, 50, 0));
        push(&g.subs, obj(opposite > 0 ? 0 : 9, row == 1 ? 2 : 1, -opposite, 50, 50));
        fl_seaquest_step(&g, NOOP, G(&gen));
        assert_int_equal(g.fish.n, 1);
        assert_int_equal(g.subs.n, 1);
        assert_memory_equal(&gen, &probe, sizeof(gen));
        assert_int_equal(g.spawn_timer, 19);
        /* Same heading on that row does not block. */
        quiet_game(&g);
        gen_init(&gen, seed);
        g.spawn_timer = 0;
        push(&g.fish, obj(opposite > 0 ? 0 : 9, row, -opposite, 50, 0));
        fl_seaquest_step(&g, NOOP, G(&gen));
        assert_int_equal(g.fish.n + g.subs.n, 2);
    }
}

/* An enemy spawned into the player's cell kills at once; a diver spawned there is
 * collected at once. The seed is chosen so the draws put the spawn on the sub's row. */
static void test_spawn_into_player_cell(void **st) {
    (void)st;
    int checked_enemy = 0, checked_diver = 0;
    for (uint64_t seed = 1; seed < 40; seed++) {
        fl_seaquest_t g;
        tgen_t gen, probe;
        gen_init(&gen, seed);
        probe = gen;
        int left = fl_minatar_u(G(&probe)) < 0.5;
        (void)fl_minatar_u(G(&probe));
        int row = fl_minatar_int(G(&probe), 1, 8);
        quiet_game(&g);
        g.spawn_timer = 0;
        g.sub_y = row, g.sub_x = left ? 0 : 9, g.sub_dir = left ? -1 : 1, g.at_surface = 0;
        fl_seaquest_step(&g, NOOP, G(&gen));
        assert_true(g.terminal);
        assert_int_equal(g.subs.n + g.fish.n, 1);
        checked_enemy++;

        gen_init(&gen, seed);
        probe = gen;
        left = fl_minatar_u(G(&probe)) < 0.5;
        row = fl_minatar_int(G(&probe), 1, 8);
        quiet_game(&g);
        g.diver_timer = 0;
        g.divers = 2;
        g.sub_y = row, g.sub_x = left ? 0 : 9, g.sub_dir = left ? -1 : 1, g.at_surface = 0;
        fl_seaquest_step(&g, NOOP, G(&gen));
        assert_false(g.terminal);
        assert_int_equal(g.divers_list.n, 0);
        assert_int_equal(g.divers, 3);
        checked_diver++;
    }
    assert_int_equal(checked_enemy + checked_diver, 78);
}

/* ---- Env definitions through the common layer ---------------------------------------- */

static fl_seaquest_env_state_t *make_env(const fl_env_def_t *def, float sticky, int ramping, int reference,
                                         const char *args) {
    assert_int_equal(def->state_size, sizeof(fl_seaquest_env_state_t));
    fl_seaquest_env_state_t *s = test_calloc(1, def->state_size);
    fl_env_options_t opts = {
        .sticky_prob = sticky, .difficulty_ramping = ramping, .reference_rng = reference, .args = args};
    assert_int_equal(def->configure(s, &opts), 0);
    return s;
}

static void test_definitions(void **st) {
    (void)st;
    const fl_env_def_t *defs[2] = {&fl_env_minatar_seaquest, &fl_env_minatar_seaquest_v1};
    assert_string_equal(defs[0]->name, "minatar-seaquest");
    assert_string_equal(defs[1]->name, "minatar-seaquest-v1");
    for (int i = 0; i < 2; i++) {
        fl_err_t err;
        assert_int_equal(fl_env_validate(defs[i], &err), FL_OK);
        assert_int_equal(defs[i]->obs.dtype, FL_DTYPE_UINT8);
        assert_int_equal(defs[i]->obs.rank, 3);
        assert_int_equal(defs[i]->obs.shape[0], 10);
        assert_int_equal(defs[i]->obs.shape[1], 10);
        assert_int_equal(defs[i]->obs.shape[2], 10);
        assert_int_equal(defs[i]->num_actions, 6);
        assert_int_equal(defs[i]->max_episode_steps, 0);
        assert_int_equal(fl_env_obs_size(defs[i]), OBS_BYTES);
    }
}

static void test_env_reset_and_step(void **st) {
    (void)st;
    for (int v = 0; v < 2; v++) {
        const fl_env_def_t *def = v ? &fl_env_minatar_seaquest_v1 : &fl_env_minatar_seaquest;
        fl_seaquest_env_state_t *s = make_env(def, 0.0f, 1, 0, "");
        fl_rng_t rng;
        fl_rng_init(&rng, 11);
        uint8_t obs[OBS_BYTES], want[OBS_BYTES];
        float r;
        int term;
        def->reset(s, &rng, obs);
        fl_seaquest_obs(&s->game, want);
        assert_memory_equal(obs, want, OBS_BYTES);
        assert_int_equal(cell(obs, 0, 5, 0), 1);
        /* Each action index reaches the game unchanged (the minimal set is the full set). */
        def->step(s, &rng, DOWN, obs, &r, &term);
        assert_int_equal(s->game.sub_y, 1);
        def->step(s, &rng, RIGHT, obs, &r, &term);
        assert_int_equal(s->game.sub_x, 6);
        def->step(s, &rng, FIRE, obs, &r, &term);
        assert_int_equal(s->game.f_bullets.n, 1);
        def->step(s, &rng, LEFT, obs, &r, &term);
        assert_int_equal(s->game.sub_x, 5);
        def->step(s, &rng, UP, obs, &r, &term); /* surfaces with no divers: terminal */
        assert_int_equal(term, 1);
        assert_true(r == 0.0f);
        fl_seaquest_obs(&s->game, want);
        assert_memory_equal(obs, want, OBS_BYTES);
        /* Stepping an ended episode: (0, terminal), nothing changes. */
        fl_seaquest_t before = s->game;
        def->step(s, &rng, DOWN, obs, &r, &term);
        assert_int_equal(term, 1);
        assert_true(r == 0.0f);
        assert_memory_equal(&s->game, &before, sizeof(before));
        def->reset(s, &rng, obs);
        assert_int_equal(s->game.sub_y, 0);
        assert_int_equal(s->game.terminal, 0);
        test_free(s);
    }
}

/* The ramping option reaches the game through the layer. */
static void test_env_ramping_option(void **st) {
    (void)st;
    for (int ramping = 0; ramping <= 1; ramping++) {
        fl_seaquest_env_state_t *s = make_env(&fl_env_minatar_seaquest, 0.0f, ramping, 0, "");
        fl_rng_t rng;
        fl_rng_init(&rng, 3);
        uint8_t obs[OBS_BYTES];
        float r;
        int term;
        fl_env_minatar_seaquest.reset(s, &rng, obs);
        s->game.divers = 6;
        s->game.spawn_timer = s->game.diver_timer = 1000;
        fl_env_minatar_seaquest.step(s, &rng, DOWN, obs, &r, &term);
        fl_env_minatar_seaquest.step(s, &rng, UP, obs, &r, &term);
        assert_int_equal(term, 0);
        assert_true(r == 9.0f); /* oxygen 199 -> 9 */
        assert_int_equal(s->game.ramp_index, ramping);
        assert_int_equal(s->game.spawn_interval, ramping ? 19 : 20);
        assert_int_equal(s->game.divers, -1);
        test_free(s);
    }
}

/* Same seed and actions through the env API: identical trajectories, on both generators;
 * sticky actions on (default-like 0.1). Different seeds diverge. */
static void run_env(const char *args, int reference, uint64_t seed, uint8_t *trace, float *ret) {
    fl_seaquest_env_state_t *s = make_env(&fl_env_minatar_seaquest, 0.1f, 1, reference, args);
    fl_rng_t rng, act;
    fl_rng_init(&rng, seed);
    fl_rng_init(&act, 1234);
    uint8_t obs[OBS_BYTES];
    float r;
    int term;
    *ret = 0.0f;
    fl_env_minatar_seaquest.reset(s, &rng, obs);
    for (int k = 0; k < 400; k++) {
        fl_env_minatar_seaquest.step(s, &rng, (int)fl_rng_below(&act, 6), obs, &r, &term);
        *ret += r;
        uint32_t h = 2166136261u; /* FNV-1a over the observation and the flags */
        for (int i = 0; i < OBS_BYTES; i++) h = (h ^ obs[i]) * 16777619u;
        h = (h ^ (uint32_t)term) * 16777619u;
        trace[k] = (uint8_t)(h ^ (h >> 8) ^ (h >> 16) ^ (h >> 24));
        if (term) fl_env_minatar_seaquest.reset(s, &rng, obs);
    }
    test_free(s);
}

static void test_env_deterministic_replay(void **st) {
    (void)st;
    uint8_t a[400], b[400];
    float ra, rb;
    for (int reference = 0; reference <= 1; reference++) {
        const char *args = reference ? "seed=42" : "";
        run_env(args, reference, 9, a, &ra);
        run_env(args, reference, 9, b, &rb);
        assert_memory_equal(a, b, sizeof(a));
        assert_true(ra == rb);
    }
    run_env("", 0, 9, a, &ra);
    run_env("", 0, 10, b, &rb);
    assert_memory_not_equal(a, b, sizeof(a));
}

/* ---- Determinism --------------------------------------------------------------------------- */

static void test_deterministic_replay(void **st) {
    (void)st;
    fl_seaquest_t a, b;
    tgen_t ga, gb, act;
    uint8_t oa[OBS_BYTES], ob[OBS_BYTES];
    gen_init(&act, 99);
    gen_init(&ga, 5);
    gen_init(&gb, 5);
    new_game(&a, 1);
    new_game(&b, 1);
    int steps = 0, ret = 0;
    for (int k = 0; k < 3000; k++) {
        int action = fl_minatar_int(G(&act), 0, 5);
        int ra = fl_seaquest_step(&a, action, G(&ga));
        int rb = fl_seaquest_step(&b, action, G(&gb));
        assert_int_equal(ra, rb);
        fl_seaquest_obs(&a, oa);
        fl_seaquest_obs(&b, ob);
        assert_memory_equal(oa, ob, OBS_BYTES);
        assert_int_equal(a.terminal, b.terminal);
        ret += ra;
        steps++;
        if (a.terminal) {
            fl_seaquest_reset(&a);
            fl_seaquest_reset(&b);
        }
    }
    assert_memory_equal(&ga, &gb, sizeof(ga));
    assert_int_equal(steps, 3000);
    (void)ret;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reset_state_and_obs),
        cmocka_unit_test(test_obs_all_channels),
        cmocka_unit_test(test_oxygen_gauge_appendix_d),
        cmocka_unit_test(test_diver_gauge),
        cmocka_unit_test(test_spawn_schedule_and_draws),
        cmocka_unit_test(test_spawn_schedule_and_draws_reference_rng),
        cmocka_unit_test(test_dive_and_stay_ends_on_step_201),
        cmocka_unit_test(test_dive_with_spawns_ends_by_201),
        cmocka_unit_test(test_surface_with_six_divers),
        cmocka_unit_test(test_surface_with_no_divers_is_terminal),
        cmocka_unit_test(test_surface_with_some_divers),
        cmocka_unit_test(test_oxygen_out_while_surfacing),
        cmocka_unit_test(test_ramping_schedule_and_off),
        cmocka_unit_test(test_movement),
        cmocka_unit_test(test_fire_cadence),
        cmocka_unit_test(test_bullet_kills_oldest_fish_then_sub),
        cmocka_unit_test(test_bullet_and_enemy_cannot_cross),
        cmocka_unit_test(test_enemy_moves_into_front_is_terminal),
        cmocka_unit_test(test_back_cell_is_never_hit),
        cmocka_unit_test(test_player_walks_into_enemy),
        cmocka_unit_test(test_rest_of_terminal_step_runs),
        cmocka_unit_test(test_enemy_sub_shots_and_moves),
        cmocka_unit_test(test_dying_shot),
        cmocka_unit_test(test_enemy_move_timer_follows_interval),
        cmocka_unit_test(test_divers_move_and_collect),
        cmocka_unit_test(test_spawn_blocked_by_opposite_heading),
        cmocka_unit_test(test_spawn_into_player_cell),
        cmocka_unit_test(test_deterministic_replay),
        cmocka_unit_test(test_definitions),
        cmocka_unit_test(test_env_reset_and_step),
        cmocka_unit_test(test_env_ramping_option),
        cmocka_unit_test(test_env_deterministic_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
