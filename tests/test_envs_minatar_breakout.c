/* Unit tests for MinAtar Breakout (envs/minatar/breakout.c, spec section 3): the
 * deterministic facts of spec Appendix D, hand-checked mechanics (reset draw, wall,
 * ceiling and corner bounces, brick rewards and the strike rule, refills, paddle moves
 * and landings, loss), observation channels, deterministic replay and options. Sticky
 * actions are off (p = 0) unless a test says otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/rng.h"
#include "envs/core/env.h"
#include "envs/minatar/breakout.h"

#define C FL_BREAKOUT_CHANNELS
#define OBS_BYTES (10 * 10 * C)

typedef struct env {
    const fl_env_def_t *def;
    fl_breakout_state_t *s;
    fl_rng_t rng;
    uint8_t obs[OBS_BYTES];
    float reward;
    int term;
} env_t;

static void env_open(env_t *e, const fl_env_def_t *def, float sticky, int reference, const char *args, uint64_t seed) {
    memset(e, 0, sizeof *e);
    e->def = def;
    e->s = calloc(1, def->state_size);
    assert_non_null(e->s);
    fl_env_options_t o = {.sticky_prob = sticky, .difficulty_ramping = 1, .reference_rng = reference, .args = args};
    assert_int_equal(def->configure(e->s, &o), 0);
    fl_rng_init(&e->rng, seed);
    def->reset(e->s, &e->rng, e->obs);
}

static void env_close(env_t *e) {
    free(e->s);
}

static void env_step(env_t *e, int action) {
    e->def->step(e->s, &e->rng, action, e->obs, &e->reward, &e->term);
}

/* Puts the ball at (y, x) with heading (dx, dy) and no trail of its own. */
static void put_ball(env_t *e, int y, int x, int dx, int dy) {
    e->s->ball_y = y;
    e->s->ball_x = x;
    e->s->dx = dx;
    e->s->dy = dy;
    e->s->last_y = y;
    e->s->last_x = x;
}

static int count_bricks(const fl_breakout_state_t *s) {
    int n = 0;
    for (int y = 0; y < 10; y++)
        for (int x = 0; x < 10; x++) n += s->bricks[y][x];
    return n;
}

static int obs_at(const env_t *e, int y, int x, int ch) {
    return e->obs[FL_MINATAR_OBS_AT(y, x, ch, C)];
}

static int channel_count(const env_t *e, int ch) {
    int n = 0;
    for (int y = 0; y < 10; y++)
        for (int x = 0; x < 10; x++) n += obs_at(e, y, x, ch);
    return n;
}

static void test_definitions(void **st) {
    (void)st;
    const fl_env_def_t *d = &fl_env_minatar_breakout;
    assert_string_equal(d->name, "minatar-breakout");
    assert_int_equal(d->num_actions, 6);
    assert_int_equal(d->obs.dtype, FL_DTYPE_UINT8);
    assert_int_equal(d->obs.rank, 3);
    assert_int_equal(d->obs.shape[0], 10);
    assert_int_equal(d->obs.shape[1], 10);
    assert_int_equal(d->obs.shape[2], 4);
    assert_int_equal(d->max_episode_steps, 0);
    assert_int_equal(d->state_size, sizeof(fl_breakout_state_t));
    assert_non_null(d->configure);
    assert_int_equal(fl_env_validate(d, NULL), FL_OK);
    d = &fl_env_minatar_breakout_v1;
    assert_string_equal(d->name, "minatar-breakout-v1");
    assert_int_equal(d->num_actions, 3);
    assert_int_equal(d->obs.shape[2], 4);
    assert_int_equal(fl_env_validate(d, NULL), FL_OK);
}

static void test_reset_state_and_obs(void **st) {
    (void)st;
    int seen[2] = {0, 0};
    for (uint64_t seed = 0; seed < 400; seed++) {
        env_t e;
        env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", seed);
        fl_breakout_state_t *s = e.s;
        assert_int_equal(s->paddle, 4);
        assert_int_equal(s->ball_y, 3);
        assert_true(s->ball_x == 0 || s->ball_x == 9);
        assert_int_equal(s->dx, s->ball_x == 0 ? 1 : -1);
        assert_int_equal(s->dy, 1);
        assert_int_equal(s->last_y, 3);
        assert_int_equal(s->last_x, s->ball_x);
        assert_int_equal(s->strike, 0);
        seen[s->ball_x == 9]++;
        for (int y = 0; y < 10; y++)
            for (int x = 0; x < 10; x++) {
                int brick = y >= 1 && y <= 3;
                assert_int_equal(s->bricks[y][x], brick);
                assert_int_equal(obs_at(&e, y, x, 3), brick);
                assert_int_equal(obs_at(&e, y, x, 0), y == 9 && x == 4);
                assert_int_equal(obs_at(&e, y, x, 1), y == 3 && x == s->ball_x);
                assert_int_equal(obs_at(&e, y, x, 2), y == 3 && x == s->ball_x);
            }
        env_close(&e);
    }
    /* I(0, 1): both sides, roughly half each (400 draws, 6 sd ~ 60). */
    assert_true(abs(seen[0] - 200) < 60);
}

/* With the reference generator the start side is NumPy RandomState(seed).randint(0, 2):
 * seeds 0..5 give 0, 1, 0, 0, 0, 1. */
static void test_reset_reference_draw(void **st) {
    (void)st;
    const int want_col[6] = {0, 9, 0, 0, 0, 9};
    for (int seed = 0; seed < 6; seed++) {
        char args[32];
        snprintf(args, sizeof args, "seed=%d", seed);
        env_t e;
        env_open(&e, &fl_env_minatar_breakout, 0.1f, 1, args, 999);
        assert_int_equal(e.s->ball_x, want_col[seed]);
        env_close(&e);
    }
}

/* Appendix D, noop only: from column 0 the episode lasts 6 steps with return 0. */
static void test_noop_from_left(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", 1);
    put_ball(&e, 3, 0, 1, 1);
    float ret = 0;
    int steps = 0;
    do {
        env_step(&e, FL_MINATAR_NOOP);
        ret += e.reward;
        steps++;
        assert_true(steps <= 6);
    } while (!e.term);
    assert_int_equal(steps, 6);
    assert_true(ret == 0.0f);
    assert_int_equal(e.s->ball_y, 9); /* lost: placed on the paddle row at (9, 6) */
    assert_int_equal(e.s->ball_x, 6);
    assert_int_equal(obs_at(&e, 9, 6, 1), 1);
    assert_int_equal(obs_at(&e, 8, 5, 2), 1);
    env_close(&e);
}

/* Appendix D, noop only: from column 9, 16 steps with return 1: paddle bounce on step 6,
 * left wall on step 10, brick (3, 1) on step 11, lost on step 16. */
static void test_noop_from_right(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", 1);
    put_ball(&e, 3, 9, -1, 1);
    float ret = 0;
    int steps = 0;
    do {
        env_step(&e, FL_MINATAR_NOOP);
        ret += e.reward;
        steps++;
        if (steps == 5) {
            assert_int_equal(e.s->ball_y, 8);
            assert_int_equal(e.s->ball_x, 4);
        }
        if (steps == 6) { /* directly above the paddle: up, same horizontal direction */
            assert_int_equal(e.s->ball_y, 8);
            assert_int_equal(e.s->ball_x, 3);
            assert_int_equal(e.s->dy, -1);
            assert_int_equal(e.s->dx, -1);
        }
        if (steps == 9) {
            assert_int_equal(e.s->ball_y, 5);
            assert_int_equal(e.s->ball_x, 0);
        }
        if (steps == 10) { /* wall: straight up one row, dx flipped */
            assert_int_equal(e.s->ball_y, 4);
            assert_int_equal(e.s->ball_x, 0);
            assert_int_equal(e.s->dx, 1);
        }
        if (steps == 11) {
            assert_true(e.reward == 1.0f);
            assert_int_equal(e.s->bricks[3][1], 0);
            assert_int_equal(obs_at(&e, 3, 1, 3), 0);
            assert_int_equal(count_bricks(e.s), 29);
            assert_int_equal(e.s->ball_y, 4);
            assert_int_equal(e.s->ball_x, 1);
            assert_int_equal(e.s->dy, 1);
        } else {
            assert_true(e.reward == 0.0f);
        }
        assert_true(steps <= 16);
    } while (!e.term);
    assert_int_equal(steps, 16);
    assert_true(ret == 1.0f);
    env_close(&e);
}

/* Appendix D strike rule. */
static void test_strike_rule(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", 1);
    e.s->bricks[2][5] = 0;
    put_ball(&e, 2, 5, 1, -1);
    env_step(&e, FL_MINATAR_NOOP);
    assert_true(e.reward == 1.0f);
    assert_int_equal(e.s->bricks[1][6], 0);
    assert_int_equal(e.s->ball_y, 2);
    assert_int_equal(e.s->ball_x, 6);
    assert_int_equal(e.s->bricks[2][6], 1); /* sitting inside a brick */
    assert_int_equal(e.s->dx, 1);
    assert_int_equal(e.s->dy, 1);
    assert_int_equal(e.s->strike, 1);
    assert_int_equal(obs_at(&e, 2, 6, 1), 1);
    assert_int_equal(obs_at(&e, 2, 6, 3), 1);
    assert_int_equal(obs_at(&e, 2, 5, 2), 1);
    env_step(&e, FL_MINATAR_NOOP);
    assert_true(e.reward == 0.0f);
    assert_int_equal(e.s->ball_y, 3);
    assert_int_equal(e.s->ball_x, 7);
    assert_int_equal(e.s->bricks[3][7], 1);
    assert_int_equal(e.s->strike, 1);
    env_step(&e, FL_MINATAR_NOOP);
    assert_true(e.reward == 0.0f);
    assert_int_equal(e.s->ball_y, 4);
    assert_int_equal(e.s->ball_x, 8);
    assert_int_equal(e.s->strike, 0);
    assert_int_equal(count_bricks(e.s), 28);
    env_close(&e);
}

/* Ceiling: the ball slides along row 0; in the corner both flips apply. */
static void test_ceiling_and_corner(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", 1);
    memset(e.s->bricks, 0, sizeof e.s->bricks);
    e.s->bricks[5][5] = 1; /* keep the map non-empty */
    put_ball(&e, 1, 2, -1, -1);
    env_step(&e, FL_MINATAR_NOOP);
    assert_int_equal(e.s->ball_y, 0);
    assert_int_equal(e.s->ball_x, 1);
    env_step(&e, FL_MINATAR_NOOP); /* ceiling: row 0, one column left, dy flips */
    assert_int_equal(e.s->ball_y, 0);
    assert_int_equal(e.s->ball_x, 0);
    assert_int_equal(e.s->dy, 1);
    assert_int_equal(e.s->dx, -1);
    env_step(&e, FL_MINATAR_NOOP); /* wall: straight down */
    assert_int_equal(e.s->ball_y, 1);
    assert_int_equal(e.s->ball_x, 0);
    assert_int_equal(e.s->dx, 1);

    put_ball(&e, 0, 0, -1, -1); /* corner */
    env_step(&e, FL_MINATAR_NOOP);
    assert_int_equal(e.s->ball_y, 0);
    assert_int_equal(e.s->ball_x, 0);
    assert_int_equal(e.s->dx, 1);
    assert_int_equal(e.s->dy, 1);
    env_step(&e, FL_MINATAR_NOOP);
    assert_int_equal(e.s->ball_y, 1);
    assert_int_equal(e.s->ball_x, 1);

    put_ball(&e, 0, 9, 1, -1); /* the other corner */
    env_step(&e, FL_MINATAR_NOOP);
    assert_int_equal(e.s->ball_y, 0);
    assert_int_equal(e.s->ball_x, 9);
    assert_int_equal(e.s->dx, -1);
    assert_int_equal(e.s->dy, 1);
    assert_int_equal(e.term, 0);
    env_close(&e);
}

/* Landings on the paddle row: directly below, diagonal, wall plus paddle, and losses. */
static void test_paddle_landings(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", 1);
    e.s->paddle = 4;
    put_ball(&e, 8, 3, 1, 1); /* would land diagonally on the paddle */
    env_step(&e, FL_MINATAR_NOOP);
    assert_int_equal(e.term, 0);
    assert_int_equal(e.s->ball_y, 8);
    assert_int_equal(e.s->ball_x, 4);
    assert_int_equal(e.s->dx, -1);
    assert_int_equal(e.s->dy, -1);

    e.s->paddle = 9;
    put_ball(&e, 8, 9, 1, 1); /* wall plus paddle, pc == 9: directly below */
    env_step(&e, FL_MINATAR_NOOP);
    assert_int_equal(e.term, 0);
    assert_int_equal(e.s->ball_y, 8);
    assert_int_equal(e.s->ball_x, 9);
    assert_int_equal(e.s->dx, -1);
    assert_int_equal(e.s->dy, -1);
    env_step(&e, FL_MINATAR_NOOP);
    assert_int_equal(e.s->ball_y, 7);
    assert_int_equal(e.s->ball_x, 8);
    env_close(&e);

    env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", 1);
    e.s->paddle = 8;
    put_ball(&e, 8, 9, 1, 1); /* wall plus paddle, pc == 8: lost at the clamped column */
    env_step(&e, FL_MINATAR_NOOP);
    assert_int_equal(e.term, 1);
    assert_int_equal(e.s->ball_y, 9);
    assert_int_equal(e.s->ball_x, 9);
    env_close(&e);

    /* The paddle moves before the ball: moving under it in the landing step saves it. */
    env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", 1);
    e.s->paddle = 4;
    put_ball(&e, 8, 6, 1, 1);
    env_step(&e, FL_MINATAR_RIGHT);
    assert_int_equal(e.s->paddle, 5);
    assert_int_equal(e.term, 1); /* tx = 7, bx = 6: neither is 5 */
    env_close(&e);
    env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", 1);
    e.s->paddle = 5;
    put_ball(&e, 8, 6, 1, 1);
    env_step(&e, FL_MINATAR_RIGHT);
    assert_int_equal(e.s->paddle, 6);
    assert_int_equal(e.term, 0);
    assert_int_equal(e.s->ball_y, 8);
    assert_int_equal(e.s->ball_x, 7);
    env_close(&e);
}

static void test_refill(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", 1);
    memset(e.s->bricks, 0, sizeof e.s->bricks);
    put_ball(&e, 7, 2, 1, 1);
    env_step(&e, FL_MINATAR_NOOP); /* to row 8: no refill yet */
    assert_int_equal(count_bricks(e.s), 0);
    assert_int_equal(channel_count(&e, 3), 0);
    e.s->paddle = 3;
    env_step(&e, FL_MINATAR_NOOP); /* down to the paddle row: refill, then bounce */
    assert_int_equal(count_bricks(e.s), 30);
    assert_int_equal(channel_count(&e, 3), 30);
    assert_int_equal(e.term, 0);
    env_close(&e);

    env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", 1);
    memset(e.s->bricks, 0, sizeof e.s->bricks);
    e.s->paddle = 0;
    put_ball(&e, 8, 5, 1, 1); /* refill happens even on the losing step */
    env_step(&e, FL_MINATAR_NOOP);
    assert_int_equal(e.term, 1);
    assert_int_equal(count_bricks(e.s), 30);
    env_close(&e);

    env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", 1);
    memset(e.s->bricks, 0, sizeof e.s->bricks);
    e.s->bricks[1][0] = 1; /* one brick left: no refill */
    e.s->paddle = 5;
    put_ball(&e, 8, 5, 1, 1);
    env_step(&e, FL_MINATAR_NOOP);
    assert_int_equal(count_bricks(e.s), 1);
    env_close(&e);
}

static void test_paddle_moves(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", 1);
    memset(e.s->bricks, 0, sizeof e.s->bricks);
    e.s->bricks[1][0] = 1;
    const int expect_after[] = {4, 3, 4, 4, 4, 4};
    for (int a = 0; a < 6; a++) {
        e.s->paddle = a == FL_MINATAR_RIGHT ? 3 : 4;
        put_ball(&e, 0, 5, 1, -1); /* harmlessly at the top */
        env_step(&e, a);
        assert_int_equal(e.s->paddle, expect_after[a]);
        assert_int_equal(obs_at(&e, 9, e.s->paddle, 0), 1);
        assert_int_equal(channel_count(&e, 0), 1);
    }
    e.s->paddle = 0;
    put_ball(&e, 0, 5, 1, -1);
    env_step(&e, FL_MINATAR_LEFT);
    assert_int_equal(e.s->paddle, 0);
    e.s->paddle = 9;
    put_ball(&e, 0, 5, 1, -1);
    env_step(&e, FL_MINATAR_RIGHT);
    assert_int_equal(e.s->paddle, 9);
    env_close(&e);

    /* v1: agent actions 0, 1, 2 are noop, left, right. */
    env_open(&e, &fl_env_minatar_breakout_v1, 0.0f, 0, "", 1);
    const int v1_delta[3] = {0, -1, 1};
    for (int a = 0; a < 3; a++) {
        e.s->paddle = 4;
        put_ball(&e, 0, 5, 1, -1);
        env_step(&e, a);
        assert_int_equal(e.s->paddle, 4 + v1_delta[a]);
    }
    env_close(&e);
}

/* Observation: exactly one paddle, one ball and one trail cell, at the state's cells,
 * bricks equal to the map, all values 0/1, over random play. */
static void test_obs_matches_state(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_breakout, 0.1f, 0, "", 7);
    fl_rng_t pick;
    fl_rng_init(&pick, 8);
    for (int i = 0; i < 3000; i++) {
        env_step(&e, (int)fl_rng_below(&pick, 6));
        for (int k = 0; k < OBS_BYTES; k++) assert_true(e.obs[k] <= 1);
        assert_int_equal(channel_count(&e, 0), 1);
        assert_int_equal(channel_count(&e, 1), 1);
        assert_int_equal(channel_count(&e, 2), 1);
        assert_int_equal(obs_at(&e, 9, e.s->paddle, 0), 1);
        assert_int_equal(obs_at(&e, e.s->ball_y, e.s->ball_x, 1), 1);
        assert_int_equal(obs_at(&e, e.s->last_y, e.s->last_x, 2), 1);
        int dy = e.s->ball_y - e.s->last_y, dx = e.s->ball_x - e.s->last_x;
        assert_true(abs(dy) <= 1 && abs(dx) <= 1);
        for (int y = 0; y < 10; y++)
            for (int x = 0; x < 10; x++) assert_int_equal(obs_at(&e, y, x, 3), e.s->bricks[y][x]);
        assert_true(e.reward == 0.0f || e.reward == 1.0f);
        if (e.term) e.def->reset(e.s, &e.rng, e.obs);
    }
    env_close(&e);
}

/* Same seed and actions: same observations, rewards and terminals; ramping is ignored. */
static void test_deterministic_replay(void **st) {
    (void)st;
    for (int reference = 0; reference <= 1; reference++) {
        env_t a, b;
        env_open(&a, &fl_env_minatar_breakout, 0.1f, reference, "", 42);
        env_open(&b, &fl_env_minatar_breakout, 0.1f, reference, "", 42);
        b.s->common.ramping = 0;
        assert_memory_equal(a.obs, b.obs, OBS_BYTES);
        fl_rng_t pick;
        fl_rng_init(&pick, 43);
        int episodes = 0;
        for (int i = 0; i < 5000; i++) {
            int act = (int)fl_rng_below(&pick, 6);
            env_step(&a, act);
            env_step(&b, act);
            assert_memory_equal(a.obs, b.obs, OBS_BYTES);
            assert_true(a.reward == b.reward);
            assert_int_equal(a.term, b.term);
            if (a.term) {
                episodes++;
                a.def->reset(a.s, &a.rng, a.obs);
                b.def->reset(b.s, &b.rng, b.obs);
                assert_memory_equal(a.obs, b.obs, OBS_BYTES);
            }
        }
        assert_true(episodes > 10);
        env_close(&a);
        env_close(&b);
    }
}

/* A different seed gives a different game somewhere (the start side). */
static void test_seeds_differ(void **st) {
    (void)st;
    int sides[2] = {0, 0};
    for (uint64_t seed = 1; seed <= 20; seed++) {
        env_t e;
        env_open(&e, &fl_env_minatar_breakout, 0.0f, 0, "", seed);
        for (int ep = 0; ep < 5; ep++) {
            sides[e.s->ball_x == 9]++;
            e.def->reset(e.s, &e.rng, e.obs);
        }
        env_close(&e);
    }
    assert_true(sides[0] > 0 && sides[1] > 0);
}

/* configure: bad options are refused; sticky p = 1 keeps executing the initial noop. */
static void test_configure(void **st) {
    (void)st;
    fl_breakout_state_t *s = calloc(1, sizeof *s);
    fl_env_options_t o = {.sticky_prob = 2.0f, .difficulty_ramping = 1, .reference_rng = 0, .args = ""};
    assert_int_equal(fl_env_minatar_breakout.configure(s, &o), -1);
    o.sticky_prob = 0.1f;
    o.args = "seed=x";
    assert_int_equal(fl_env_minatar_breakout_v1.configure(s, &o), -1);
    free(s);

    env_t e;
    env_open(&e, &fl_env_minatar_breakout, 1.0f, 0, "", 3);
    for (int i = 0; i < 3; i++) {
        env_step(&e, FL_MINATAR_LEFT);
        assert_int_equal(e.s->paddle, 4);
    }
    env_close(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_definitions),
        cmocka_unit_test(test_reset_state_and_obs),
        cmocka_unit_test(test_reset_reference_draw),
        cmocka_unit_test(test_noop_from_left),
        cmocka_unit_test(test_noop_from_right),
        cmocka_unit_test(test_strike_rule),
        cmocka_unit_test(test_ceiling_and_corner),
        cmocka_unit_test(test_paddle_landings),
        cmocka_unit_test(test_refill),
        cmocka_unit_test(test_paddle_moves),
        cmocka_unit_test(test_obs_matches_state),
        cmocka_unit_test(test_deterministic_replay),
        cmocka_unit_test(test_seeds_differ),
        cmocka_unit_test(test_configure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
