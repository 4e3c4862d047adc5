/* Unit tests for MinAtar Asterix (envs/minatar/asterix.c, docs/minatar.md section 2 and
 * Appendix D).
 *
 * The game is driven directly through its value type, often after putting it into a
 * chosen state. Spawn draws are checked by replaying the expected draws on a copy of the
 * generator (side coin, kind coin, free-slot index) and comparing both the generator
 * state and the spawned entity, on fleet's generator and on the reference MT19937. Spawn
 * and move timing is observed from outside: a spawn is a step that used the generator,
 * a group move is a step in which a probe entity moved. The wrapper tests cover the
 * definitions, the minimal action set and replay. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "envs/minatar/asterix.h"

enum { NOOP = 0, LEFT = 1, UP = 2, RIGHT = 3, DOWN = 4, FIRE = 5 };

#define CH FL_ASTERIX_CHANNELS
#define OBS_BYTES (10 * 10 * CH)

static int at(const uint8_t *obs, int y, int x, int c) {
    return obs[FL_MINATAR_OBS_AT(y, x, c, CH)];
}

static int count_ch(const uint8_t *obs, int c) {
    int n = 0;
    for (int i = 0; i < 100; i++) n += obs[i * CH + c];
    return n;
}

/* A generator view over fleet's xoshiro stream or the reference MT19937. */
typedef struct test_gen {
    fl_rng_t rng;
    fl_mt19937_t mt;
    int reference;
} test_gen_t;

static void tg_init(test_gen_t *t, uint64_t seed, int reference) {
    memset(t, 0, sizeof(*t));
    fl_rng_init(&t->rng, seed);
    fl_mt19937_seed(&t->mt, (uint32_t)seed);
    t->reference = reference;
}

static fl_minatar_gen_t tg_view(test_gen_t *t) {
    fl_minatar_gen_t g = {.rng = &t->rng, .mt = t->reference ? &t->mt : NULL};
    return g;
}

static int tg_equal(const test_gen_t *a, const test_gen_t *b) {
    return memcmp(a, b, sizeof(*a)) == 0;
}

static int step(fl_asterix_t *g, int action, test_gen_t *t) {
    fl_minatar_gen_t v = tg_view(t);
    return fl_asterix_step(g, action, &v);
}

static void new_game(fl_asterix_t *g, int ramping) {
    memset(g, 0, sizeof(*g));
    g->ramping = ramping;
    fl_asterix_reset(g);
}

static void put(fl_asterix_t *g, int row, int x, int dir, int gold) {
    fl_asterix_entity_t *e = &g->slots[row - 1];
    e->active = 1;
    e->x = (int8_t)x;
    e->dir = (int8_t)dir;
    e->gold = (int8_t)gold;
}

static int n_active(const fl_asterix_t *g) {
    int n = 0;
    for (int s = 0; s < FL_ASTERIX_SLOTS; s++) n += g->slots[s].active;
    return n;
}

/* ---- Reset and observation ------------------------------------------------------------- */

static void test_reset_state_and_obs(void **st) {
    (void)st;
    fl_asterix_t g;
    new_game(&g, 1);
    assert_int_equal(g.player_x, 5);
    assert_int_equal(g.player_y, 5);
    assert_int_equal(n_active(&g), 0);
    assert_int_equal(g.spawn_interval, 10);
    assert_int_equal(g.spawn_timer, 10);
    assert_int_equal(g.move_interval, 5);
    assert_int_equal(g.move_timer, 5);
    assert_int_equal(g.ramp_counter, 100);
    assert_int_equal(g.ramp_index, 0);
    assert_int_equal(g.terminal, 0);
    assert_int_equal(g.ramping, 1);

    uint8_t obs[OBS_BYTES];
    fl_asterix_obs(&g, obs);
    assert_int_equal(count_ch(obs, 0), 1);
    assert_int_equal(at(obs, 5, 5, 0), 1);
    for (int c = 1; c < CH; c++) assert_int_equal(count_ch(obs, c), 0);

    /* reset keeps the ramping switch and clears everything else */
    g.ramping = 0;
    g.player_x = 0;
    g.terminal = 1;
    put(&g, 3, 4, 1, 1);
    fl_asterix_reset(&g);
    assert_int_equal(g.ramping, 0);
    assert_int_equal(g.player_x, 5);
    assert_int_equal(g.terminal, 0);
    assert_int_equal(n_active(&g), 0);
}

static void test_obs_channels_and_trails(void **st) {
    (void)st;
    fl_asterix_t g;
    new_game(&g, 1);
    put(&g, 1, 0, 1, 0);  /* enemy entering from the left: no trail */
    put(&g, 2, 9, -1, 1); /* gold entering from the right: no trail */
    put(&g, 3, 4, 1, 0);  /* enemy heading right: trail at (3, 3) */
    put(&g, 4, 4, -1, 1); /* gold heading left: trail at (4, 5) */
    put(&g, 8, 9, 1, 1);  /* gold at the right edge heading right: trail at (8, 8) */
    uint8_t obs[OBS_BYTES];
    fl_asterix_obs(&g, obs);
    for (int i = 0; i < OBS_BYTES; i++) assert_true(obs[i] <= 1);
    assert_int_equal(count_ch(obs, 0), 1);
    assert_int_equal(count_ch(obs, 1), 2);
    assert_int_equal(at(obs, 1, 0, 1), 1);
    assert_int_equal(at(obs, 3, 4, 1), 1);
    assert_int_equal(count_ch(obs, 3), 3);
    assert_int_equal(at(obs, 2, 9, 3), 1);
    assert_int_equal(at(obs, 4, 4, 3), 1);
    assert_int_equal(at(obs, 8, 9, 3), 1);
    assert_int_equal(count_ch(obs, 2), 3);
    assert_int_equal(at(obs, 3, 3, 2), 1);
    assert_int_equal(at(obs, 4, 5, 2), 1);
    assert_int_equal(at(obs, 8, 8, 2), 1);
    for (int x = 0; x < 10; x++)
        for (int c = 0; c < CH; c++) {
            assert_int_equal(at(obs, 0, x, c), 0);
            assert_int_equal(at(obs, 9, x, c), 0);
        }
}

/* ---- Player ----------------------------------------------------------------------------- */

static void test_player_moves_within_rows_1_to_8(void **st) {
    (void)st;
    fl_asterix_t g;
    test_gen_t t;
    tg_init(&t, 1, 0);
    new_game(&g, 1);
    g.spawn_timer = 1000; /* no spawns */
    for (int k = 0; k < 6; k++) step(&g, UP, &t);
    assert_int_equal(g.player_y, 1);
    for (int k = 0; k < 10; k++) step(&g, DOWN, &t);
    assert_int_equal(g.player_y, 8);
    for (int k = 0; k < 7; k++) step(&g, LEFT, &t);
    assert_int_equal(g.player_x, 0);
    for (int k = 0; k < 12; k++) step(&g, RIGHT, &t);
    assert_int_equal(g.player_x, 9);
    step(&g, FIRE, &t);
    step(&g, NOOP, &t);
    assert_int_equal(g.player_x, 9);
    assert_int_equal(g.player_y, 8);
    assert_int_equal(g.terminal, 0);
}

/* ---- Timing (Appendix D) ---------------------------------------------------------------- */

typedef struct timing {
    int spawns[1000], n_spawns;
    int moves[1000], n_moves;
    int ramps[16], n_ramps;
    int s_after[16], m_after[16];
} timing_t;

/* Runs 1000 noop steps with the player kept out of reach: any entity in the player's row
 * is removed after each step (it enters at an edge, at least 4 moves away), and a gold
 * probe in row 1 at column 4 reveals the group moves (it is put back after each move). */
static void run_timing(int ramping, timing_t *out) {
    fl_asterix_t g;
    test_gen_t t;
    tg_init(&t, 11, 0);
    new_game(&g, ramping);
    memset(out, 0, sizeof(*out));
    put(&g, 1, 4, 1, 1);
    int ramp_index = 0;
    for (int k = 1; k <= 1000; k++) {
        test_gen_t before = t;
        assert_int_equal(step(&g, NOOP, &t), 0);
        assert_int_equal(g.terminal, 0);
        if (!tg_equal(&before, &t)) out->spawns[out->n_spawns++] = k;
        if (g.slots[0].x != 4 || !g.slots[0].active) {
            out->moves[out->n_moves++] = k;
            put(&g, 1, 4, 1, 1);
        }
        g.slots[g.player_y - 1].active = 0;
        if (g.ramp_index != ramp_index) {
            assert_int_equal(g.ramp_index, ramp_index + 1);
            ramp_index = g.ramp_index;
            out->ramps[out->n_ramps] = k;
            out->s_after[out->n_ramps] = g.spawn_interval;
            out->m_after[out->n_ramps] = g.move_interval;
            out->n_ramps++;
        }
    }
}

static void test_timing_ramping_off(void **st) {
    (void)st;
    static timing_t tm;
    run_timing(0, &tm);
    assert_int_equal(tm.n_ramps, 0);
    assert_int_equal(tm.n_spawns, 99); /* 11, 21, ..., 991 */
    for (int i = 0; i < tm.n_spawns; i++) assert_int_equal(tm.spawns[i], 11 + 10 * i);
    assert_int_equal(tm.n_moves, 199); /* 6, 11, ..., 996 */
    for (int i = 0; i < tm.n_moves; i++) assert_int_equal(tm.moves[i], 6 + 5 * i);
}

static void test_timing_ramping_on(void **st) {
    (void)st;
    static timing_t tm;
    run_timing(1, &tm);
    /* Ramps on steps 102, 204, ..., 918 with the table of spec 2.6. */
    static const int s_tab[9] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
    static const int m_tab[9] = {5, 4, 4, 3, 3, 2, 2, 1, 1};
    assert_int_equal(tm.n_ramps, 9);
    for (int i = 0; i < 9; i++) {
        assert_int_equal(tm.ramps[i], 102 * (i + 1));
        assert_int_equal(tm.s_after[i], s_tab[i]);
        assert_int_equal(tm.m_after[i], m_tab[i]);
    }
    /* Spawns and moves: first on 11 and 6, then each after the interval in force at the
     * reload (a ramp at the end of step r applies to reloads on steps > r). */
    int expect = 11, i = 0;
    while (expect <= 1000) {
        assert_true(i < tm.n_spawns);
        assert_int_equal(tm.spawns[i], expect);
        int ramps_before = 0;
        for (int r = 0; r < 9; r++) ramps_before += 102 * (r + 1) < expect;
        expect += ramps_before ? s_tab[ramps_before - 1] : 10;
        i++;
    }
    assert_int_equal(tm.n_spawns, i);
    expect = 6;
    i = 0;
    while (expect <= 1000) {
        assert_true(i < tm.n_moves);
        assert_int_equal(tm.moves[i], expect);
        int ramps_before = 0;
        for (int r = 0; r < 9; r++) ramps_before += 102 * (r + 1) < expect;
        expect += ramps_before ? m_tab[ramps_before - 1] : 5;
        i++;
    }
    assert_int_equal(tm.n_moves, i);
    /* At the end both intervals are 1: a spawn attempt and a move every step. */
    assert_int_equal(tm.spawns[tm.n_spawns - 1], 1000);
    assert_int_equal(tm.moves[tm.n_moves - 1], 1000);
}

/* ---- Spawns ----------------------------------------------------------------------------- */

/* Predicts one spawn on a copy of the generator and checks the game against it. */
static void check_spawn(fl_asterix_t *g, test_gen_t *t) {
    test_gen_t expect = *t;
    fl_minatar_gen_t v = tg_view(&expect);
    int from_left = fl_minatar_u(&v) < 0.5;
    int gold = fl_minatar_u(&v) < 1.0 / 3.0;
    int free_slots[8], n_free = 0;
    for (int s = 0; s < 8; s++)
        if (!g->slots[s].active) free_slots[n_free++] = s;
    int slot = n_free ? free_slots[fl_minatar_int(&v, 0, n_free - 1)] : -1;
    fl_asterix_t before = *g;
    g->spawn_timer = 0;
    g->move_timer = 3; /* no move this step */
    g->player_x = 5;
    g->player_y = 5;
    step(g, NOOP, t);
    if (!tg_equal(&expect, t)) fail_msg("generator use differs from the spec's draws");
    assert_int_equal(g->spawn_timer, g->spawn_interval - 1);
    for (int s = 0; s < 8; s++) {
        if (s == slot) {
            assert_int_equal(before.slots[s].active, 0);
            assert_int_equal(g->slots[s].active, 1);
            assert_int_equal(g->slots[s].x, from_left ? 0 : 9);
            assert_int_equal(g->slots[s].dir, from_left ? 1 : -1);
            assert_int_equal(g->slots[s].gold, gold);
        } else {
            assert_memory_equal(&before.slots[s], &g->slots[s], sizeof(g->slots[s]));
        }
    }
}

static void spawn_draws(int reference) {
    fl_asterix_t g;
    test_gen_t t;
    tg_init(&t, 2024, reference);
    new_game(&g, 0);
    int lefts = 0, golds = 0;
    for (int round = 0; round < 200; round++) {
        /* Random-looking occupancy: keep some slots, empty others, sometimes all full. */
        for (int s = 0; s < 8; s++) {
            if (round % 7 == 6)
                put(&g, s + 1, 4, 1, 0);
            else if ((round * 5 + s * 3) % 4 == 0)
                g.slots[s].active = 0;
        }
        check_spawn(&g, &t);
        for (int s = 0; s < 8; s++) {
            if (g.slots[s].active && (g.slots[s].x == 0 || g.slots[s].x == 9)) {
                lefts += g.slots[s].x == 0;
                golds += g.slots[s].gold;
                g.slots[s].x = 4; /* counted once */
            }
        }
        g.terminal = 0;
    }
    /* Both sides and both kinds occur. */
    assert_true(lefts > 0);
    assert_true(golds > 0);
}

static void test_spawn_draws_fleet_generator(void **st) {
    (void)st;
    spawn_draws(0);
}

static void test_spawn_draws_reference_generator(void **st) {
    (void)st;
    spawn_draws(1);
}

/* All rows taken: the two coins are still drawn, nothing spawns, the timer reloads. */
static void test_spawn_with_all_rows_full(void **st) {
    (void)st;
    fl_asterix_t g;
    test_gen_t t;
    tg_init(&t, 5, 1);
    new_game(&g, 0);
    for (int r = 1; r <= 8; r++) put(&g, r, r == 5 ? 1 : 4, 1, 0);
    g.spawn_timer = 0;
    g.move_timer = 3;
    test_gen_t expect = t;
    fl_minatar_gen_t v = tg_view(&expect);
    fl_minatar_u(&v);
    fl_minatar_u(&v);
    fl_asterix_t before = g;
    step(&g, NOOP, &t);
    assert_true(tg_equal(&expect, &t));
    assert_memory_equal(before.slots, g.slots, sizeof(g.slots));
    assert_int_equal(g.spawn_timer, 9);
}

/* With the reference generator seeded with 0, the first spawn (step 11) is fully known
 * from MT19937(0): the draws are made here with the common layer's MT and applied by
 * hand, independently of the game's code path. */
static void test_first_spawn_reference_seed(void **st) {
    (void)st;
    fl_mt19937_t m;
    fl_mt19937_seed(&m, 0);
    int from_left = fl_mt19937_double(&m) < 0.5;
    int gold = fl_mt19937_double(&m) < 1.0 / 3.0;
    int slot = (int)fl_mt19937_int(&m, 0, 7);

    fl_asterix_t g;
    test_gen_t t;
    tg_init(&t, 0, 1);
    new_game(&g, 1);
    for (int k = 1; k <= 11; k++) {
        step(&g, NOOP, &t);
        assert_int_equal(n_active(&g), k == 11);
    }
    /* Step 11 is also a group move (6, 11, ...), which comes after the spawn, so the new
     * entity has already moved one column inward. */
    assert_int_equal(g.slots[slot].active, 1);
    assert_int_equal(g.slots[slot].x, from_left ? 1 : 8);
    assert_int_equal(g.slots[slot].dir, from_left ? 1 : -1);
    assert_int_equal(g.slots[slot].gold, gold);
    uint8_t obs[OBS_BYTES];
    fl_asterix_obs(&g, obs);
    assert_int_equal(at(obs, slot + 1, from_left ? 1 : 8, gold ? 3 : 1), 1);
    assert_int_equal(at(obs, slot + 1, from_left ? 0 : 9, 2), 1);
}

/* ---- Contacts --------------------------------------------------------------------------- */

static void test_player_walks_into_gold_and_enemy(void **st) {
    (void)st;
    fl_asterix_t g;
    test_gen_t t;
    tg_init(&t, 1, 0);
    new_game(&g, 1);
    g.spawn_timer = 1000;
    put(&g, 5, 4, 1, 1);
    assert_int_equal(step(&g, LEFT, &t), 1);
    assert_int_equal(g.slots[4].active, 0);
    assert_int_equal(g.terminal, 0);

    new_game(&g, 1);
    g.spawn_timer = 1000;
    put(&g, 4, 5, -1, 0);
    assert_int_equal(step(&g, UP, &t), 0);
    assert_int_equal(g.terminal, 1);
    assert_int_equal(g.slots[3].active, 1); /* the enemy stays in the final state */
    assert_int_equal(g.slots[3].x, 5);
    uint8_t obs[OBS_BYTES];
    fl_asterix_obs(&g, obs);
    assert_int_equal(at(obs, 4, 5, 0), 1);
    assert_int_equal(at(obs, 4, 5, 1), 1);

    /* An ended game does not change and pays nothing. */
    fl_asterix_t before = g;
    test_gen_t tb = t;
    assert_int_equal(step(&g, DOWN, &t), 0);
    assert_memory_equal(&before, &g, sizeof(g));
    assert_true(tg_equal(&tb, &t));
}

/* Entities moving onto the player (step 5 check), on the first move step (6). */
static void test_entity_moves_onto_player(void **st) {
    (void)st;
    fl_asterix_t g;
    test_gen_t t;
    tg_init(&t, 1, 0);
    new_game(&g, 1);
    g.spawn_timer = 1000;
    put(&g, 5, 3, 1, 1);  /* gold two cells left of the player */
    put(&g, 6, 7, -1, 0); /* enemy in another row */
    int ret = 0;
    for (int k = 1; k <= 5; k++) ret += step(&g, NOOP, &t);
    assert_int_equal(ret, 0);
    assert_int_equal(g.slots[4].x, 3);
    assert_int_equal(step(&g, NOOP, &t), 0); /* step 6: gold to (5, 4) */
    assert_int_equal(g.slots[4].x, 4);
    assert_int_equal(g.slots[5].x, 6);
    for (int k = 7; k <= 10; k++) assert_int_equal(step(&g, NOOP, &t), 0);
    assert_int_equal(step(&g, NOOP, &t), 1); /* step 11: gold onto the player */
    assert_int_equal(g.slots[4].active, 0);
    assert_int_equal(g.terminal, 0);

    /* An enemy moving onto the player ends the episode. */
    new_game(&g, 1);
    g.spawn_timer = 1000;
    put(&g, 5, 6, -1, 0);
    g.move_timer = 0;
    assert_int_equal(step(&g, NOOP, &t), 0);
    assert_int_equal(g.terminal, 1);
    assert_int_equal(g.slots[4].x, 5);
}

/* Swapping cells is caught: the player steps into the entity's cell (step 4 check), or
 * the player and the entity step toward each other into one cell (step 5 check). The
 * enemy that ended the episode is not removed; on a move step it still moves on. */
static void test_no_tunnelling(void **st) {
    (void)st;
    fl_asterix_t g;
    test_gen_t t;
    tg_init(&t, 1, 0);
    /* Enemy at (5, 4) heading right, player at (5, 5) steps left, no move this step:
     * caught after the player's move, the enemy overlaps the player. */
    new_game(&g, 1);
    g.spawn_timer = 1000;
    put(&g, 5, 4, 1, 0);
    g.move_timer = 3;
    step(&g, LEFT, &t);
    assert_int_equal(g.terminal, 1);
    assert_int_equal(g.player_x, 4);
    assert_int_equal(g.slots[4].x, 4);

    /* Same on a move step: caught before the move; the enemy then moves to (5, 5), next
     * to the player, and the episode is still over. */
    new_game(&g, 1);
    g.spawn_timer = 1000;
    put(&g, 5, 4, 1, 0);
    g.move_timer = 0;
    step(&g, LEFT, &t);
    assert_int_equal(g.terminal, 1);
    assert_int_equal(g.player_x, 4);
    assert_int_equal(g.slots[4].active, 1);
    assert_int_equal(g.slots[4].x, 5);

    /* Enemy at (5, 3) heading right, player at (5, 5) steps left to (5, 4) while the enemy
     * moves to (5, 4): caught by the check after the move. */
    new_game(&g, 1);
    g.spawn_timer = 1000;
    put(&g, 5, 3, 1, 0);
    g.move_timer = 0;
    step(&g, LEFT, &t);
    assert_int_equal(g.terminal, 1);
    assert_int_equal(g.slots[4].x, 4);

    /* A gold in the same swap pays once and is gone. */
    new_game(&g, 1);
    g.spawn_timer = 1000;
    put(&g, 5, 4, 1, 1);
    g.move_timer = 0;
    assert_int_equal(step(&g, LEFT, &t), 1);
    assert_int_equal(g.slots[4].active, 0);
    assert_int_equal(g.terminal, 0);
}

/* Entities leave the grid past the edge and free their row. */
static void test_entity_leaves_grid(void **st) {
    (void)st;
    fl_asterix_t g;
    test_gen_t t;
    tg_init(&t, 1, 0);
    new_game(&g, 1);
    g.spawn_timer = 1000;
    put(&g, 2, 9, 1, 0);
    put(&g, 3, 0, -1, 1);
    put(&g, 4, 0, 1, 1);
    g.move_timer = 0;
    assert_int_equal(step(&g, NOOP, &t), 0);
    assert_int_equal(g.slots[1].active, 0);
    assert_int_equal(g.slots[2].active, 0);
    assert_int_equal(g.slots[3].active, 1);
    assert_int_equal(g.slots[3].x, 1);
}

/* ---- Wrapper: definitions, replay ------------------------------------------------------- */

static void test_definitions(void **st) {
    (void)st;
    const fl_env_def_t *defs[2] = {&fl_env_minatar_asterix, &fl_env_minatar_asterix_v1};
    for (int i = 0; i < 2; i++) {
        fl_err_t err;
        assert_int_equal(fl_env_validate(defs[i], &err), FL_OK);
        assert_int_equal(defs[i]->obs.dtype, FL_DTYPE_UINT8);
        assert_int_equal(defs[i]->obs.rank, 3);
        assert_int_equal(defs[i]->obs.shape[0], 10);
        assert_int_equal(defs[i]->obs.shape[1], 10);
        assert_int_equal(defs[i]->obs.shape[2], 4);
        assert_int_equal(defs[i]->max_episode_steps, 0);
        assert_int_equal(defs[i]->state_size, sizeof(fl_asterix_env_state_t));
    }
    assert_string_equal(fl_env_minatar_asterix.name, "minatar-asterix");
    assert_string_equal(fl_env_minatar_asterix_v1.name, "minatar-asterix-v1");
    assert_int_equal(fl_env_minatar_asterix.num_actions, 6);
    assert_int_equal(fl_env_minatar_asterix_v1.num_actions, 5);
}

#define MAX_STEPS 400

typedef struct run {
    uint8_t obs[MAX_STEPS + 1][OBS_BYTES];
    float rewards[MAX_STEPS];
    int terminated[MAX_STEPS];
    int executed[MAX_STEPS];
    int steps;
} run_t;

/* Agent actions 0..4: noop, left, up, right, down in both action sets. */
static int policy(int k) {
    return (k * 7 + k / 3) % 5;
}

/* Runs one episode (at most MAX_STEPS steps) of def through its own functions. */
static void run_episode(const fl_env_def_t *def, const fl_env_options_t *opts, uint64_t seed, run_t *out) {
    fl_asterix_env_state_t state;
    memset(&state, 0, sizeof(state));
    if (opts) assert_int_equal(def->configure(&state, opts), 0);
    fl_rng_t rng;
    fl_rng_init(&rng, seed);
    memset(out, 0, sizeof(*out));
    def->reset(&state, &rng, out->obs[0]);
    int k = 0;
    while (k < MAX_STEPS) {
        def->step(&state, &rng, policy(k), out->obs[k + 1], &out->rewards[k], &out->terminated[k]);
        out->executed[k] = state.common.last_action;
        k++;
        if (out->terminated[k - 1]) break;
    }
    out->steps = k;
}

static void test_replay(void **st) {
    (void)st;
    static run_t a, b, c;
    fl_env_options_t opts = {.sticky_prob = 0.1f, .difficulty_ramping = 1, .reference_rng = 0, .args = ""};
    run_episode(&fl_env_minatar_asterix, &opts, 77, &a);
    run_episode(&fl_env_minatar_asterix, &opts, 77, &b);
    assert_memory_equal(&a, &b, sizeof(a));
    run_episode(&fl_env_minatar_asterix, &opts, 78, &c);
    assert_true(memcmp(&a, &c, sizeof(a)) != 0);

    opts.reference_rng = 1;
    opts.args = "seed=12345";
    run_episode(&fl_env_minatar_asterix, &opts, 1, &a);
    run_episode(&fl_env_minatar_asterix, &opts, 2, &b); /* the seed in args decides */
    assert_memory_equal(&a, &b, sizeof(a));
}

/* The wrapper agrees with the bare game stepped with the executed actions, sharing the
 * generator in the reference order (sticky draw first, then the game's draws). */
static void test_wrapper_matches_game(void **st) {
    (void)st;
    static run_t a;
    fl_env_options_t opts = {.sticky_prob = 0.25f, .difficulty_ramping = 1, .reference_rng = 1, .args = "seed=99"};
    run_episode(&fl_env_minatar_asterix_v1, &opts, 1, &a);
    test_gen_t t;
    tg_init(&t, 99, 1);
    fl_asterix_t g;
    new_game(&g, 1);
    uint8_t obs[OBS_BYTES];
    fl_asterix_obs(&g, obs);
    assert_memory_equal(obs, a.obs[0], OBS_BYTES);
    int prev = 0, n_stuck = 0;
    for (int k = 0; k < a.steps; k++) {
        fl_minatar_gen_t v = tg_view(&t);
        int stuck = fl_minatar_u(&v) < 0.25;
        int executed = stuck ? prev : policy(k); /* the minimal set maps i to full index i */
        n_stuck += stuck && executed != policy(k);
        assert_int_equal(a.executed[k], executed);
        prev = executed;
        int r = fl_asterix_step(&g, executed, &v);
        fl_asterix_obs(&g, obs);
        assert_memory_equal(obs, a.obs[k + 1], OBS_BYTES);
        assert_true(a.rewards[k] == (float)r);
        assert_int_equal(a.terminated[k], g.terminal);
    }
    assert_true(a.steps > 11); /* the game saw at least one spawn */
    assert_true(n_stuck > 0);
}

/* Ramping off through the options reaches the game. */
static void test_ramping_option(void **st) {
    (void)st;
    fl_env_options_t opts = {.sticky_prob = 0.0f, .difficulty_ramping = 0, .reference_rng = 0, .args = ""};
    fl_asterix_env_state_t state;
    memset(&state, 0, sizeof(state));
    assert_int_equal(fl_env_minatar_asterix.configure(&state, &opts), 0);
    fl_rng_t rng;
    fl_rng_init(&rng, 3);
    uint8_t obs[OBS_BYTES];
    fl_env_minatar_asterix.reset(&state, &rng, obs);
    assert_int_equal(state.game.ramping, 0);
    opts.difficulty_ramping = 1;
    assert_int_equal(fl_env_minatar_asterix.configure(&state, &opts), 0);
    fl_env_minatar_asterix.reset(&state, &rng, obs);
    assert_int_equal(state.game.ramping, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reset_state_and_obs),
        cmocka_unit_test(test_obs_channels_and_trails),
        cmocka_unit_test(test_player_moves_within_rows_1_to_8),
        cmocka_unit_test(test_timing_ramping_off),
        cmocka_unit_test(test_timing_ramping_on),
        cmocka_unit_test(test_spawn_draws_fleet_generator),
        cmocka_unit_test(test_spawn_draws_reference_generator),
        cmocka_unit_test(test_spawn_with_all_rows_full),
        cmocka_unit_test(test_first_spawn_reference_seed),
        cmocka_unit_test(test_player_walks_into_gold_and_enemy),
        cmocka_unit_test(test_entity_moves_onto_player),
        cmocka_unit_test(test_no_tunnelling),
        cmocka_unit_test(test_entity_leaves_grid),
        cmocka_unit_test(test_definitions),
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_wrapper_matches_game),
        cmocka_unit_test(test_ramping_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
