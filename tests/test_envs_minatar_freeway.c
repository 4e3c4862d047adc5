/* Unit tests for MinAtar Freeway (envs/minatar/freeway.c, spec section 4): the
 * deterministic facts of spec Appendix D (2501-step episodes, chicken pace, car paces),
 * the reset and score draws and their order, hits, scoring, wrapping trails in the
 * speed channels, deterministic replay and options. Sticky actions are off (p = 0)
 * unless a test says otherwise. */
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
#include "envs/minatar/freeway.h"

#define C FL_FREEWAY_CHANNELS
#define OBS_BYTES (10 * 10 * C)

typedef struct env {
    const fl_env_def_t *def;
    fl_freeway_state_t *s;
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

static int obs_at(const env_t *e, int y, int x, int ch) {
    return e->obs[FL_MINATAR_OBS_AT(y, x, ch, C)];
}

/* Every car heading right at column 5 with |v| = 5: none reaches column 4 for 54 steps. */
static void clear_road(env_t *e) {
    for (int i = 0; i < 8; i++) {
        e->s->car_x[i] = 5;
        e->s->car_v[i] = 5;
        e->s->car_timer[i] = 5;
    }
}

static void test_definitions(void **st) {
    (void)st;
    const fl_env_def_t *d = &fl_env_minatar_freeway;
    assert_string_equal(d->name, "minatar-freeway");
    assert_int_equal(d->num_actions, 6);
    assert_int_equal(d->obs.dtype, FL_DTYPE_UINT8);
    assert_int_equal(d->obs.rank, 3);
    assert_int_equal(d->obs.shape[0], 10);
    assert_int_equal(d->obs.shape[1], 10);
    assert_int_equal(d->obs.shape[2], 7);
    assert_int_equal(d->max_episode_steps, 0); /* the 2501-step end is a true terminal */
    assert_int_equal(d->state_size, sizeof(fl_freeway_state_t));
    assert_int_equal(fl_env_validate(d, NULL), FL_OK);
    d = &fl_env_minatar_freeway_v1;
    assert_string_equal(d->name, "minatar-freeway-v1");
    assert_int_equal(d->num_actions, 3);
    assert_int_equal(d->max_episode_steps, 0);
    assert_int_equal(fl_env_validate(d, NULL), FL_OK);
}

static void check_obs(const env_t *e) {
    const fl_freeway_state_t *s = e->s;
    uint8_t want[OBS_BYTES];
    memset(want, 0, sizeof want);
    want[FL_MINATAR_OBS_AT(s->chicken_y, 4, 0, C)] = 1;
    for (int i = 0; i < 8; i++) {
        int v = s->car_v[i], sp = abs(v);
        int behind = (s->car_x[i] - (v > 0 ? 1 : -1) + 10) % 10;
        want[FL_MINATAR_OBS_AT(i + 1, s->car_x[i], 1, C)] = 1;
        want[FL_MINATAR_OBS_AT(i + 1, behind, 1 + sp, C)] = 1;
    }
    assert_memory_equal(e->obs, want, OBS_BYTES);
}

static void test_reset_state_and_obs(void **st) {
    (void)st;
    int mag_count[6] = {0}, right = 0, total = 0;
    for (uint64_t seed = 0; seed < 300; seed++) {
        env_t e;
        env_open(&e, &fl_env_minatar_freeway, 0.0f, 0, "", seed);
        assert_int_equal(e.s->chicken_y, 9);
        assert_int_equal(e.s->cooldown, 3);
        assert_int_equal(e.s->budget, 2500);
        for (int i = 0; i < 8; i++) {
            int v = e.s->car_v[i];
            assert_true(v != 0 && abs(v) <= 5);
            assert_int_equal(e.s->car_x[i], 0);
            assert_int_equal(e.s->car_timer[i], abs(v));
            mag_count[abs(v)]++;
            right += v > 0;
            total++;
        }
        check_obs(&e);
        env_close(&e);
    }
    /* 2400 cars: magnitudes ~480 each (sd ~20), headings ~1200 right (sd ~25). */
    for (int m = 1; m <= 5; m++) assert_true(abs(mag_count[m] - total / 5) < 120);
    assert_true(abs(right - total / 2) < 150);
}

/* Reference generator, seed 12345: NumPy RandomState(12345).randint(1, 6, size=8) =
 * 3 2 5 2 3 2 2 4, then random_sample(8) gives headings + - - + - - - +. */
static void test_reset_reference_draws(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_freeway, 0.1f, 1, "seed=12345", 5);
    const int want[8] = {3, -2, -5, 2, -3, -2, -2, 4};
    for (int i = 0; i < 8; i++) assert_int_equal(e.s->car_v[i], want[i]);
    env_close(&e);
}

/* Appendix D: every episode lasts exactly 2501 steps, whatever the actions. */
static void test_episode_length_2501(void **st) {
    (void)st;
    for (int pass = 0; pass < 3; pass++) {
        env_t e;
        env_open(&e, pass == 2 ? &fl_env_minatar_freeway_v1 : &fl_env_minatar_freeway, pass ? 0.1f : 0.0f, 0, "",
                 10 + pass);
        fl_rng_t pick;
        fl_rng_init(&pick, 20 + pass);
        for (int ep = 0; ep < 2; ep++) {
            float ret = 0;
            for (int k = 1; k <= 2501; k++) {
                int a = pass == 0 ? FL_MINATAR_UP : (int)fl_rng_below(&pick, (uint64_t)e.def->num_actions);
                env_step(&e, a);
                ret += e.reward;
                assert_int_equal(e.term, k == 2501);
            }
            assert_true(ret >= 0.0f && ret <= 2501.0f / 28.0f);
            env_step(&e, FL_MINATAR_UP); /* after the end: nothing happens */
            assert_int_equal(e.term, 1);
            assert_true(e.reward == 0.0f);
            e.def->reset(e.s, &e.rng, e.obs);
        }
        env_close(&e);
    }
}

/* Appendix D: holding up, the chicken moves on steps 4, 7, 10, ...; the 9th move scores
 * (step 28): +1, back on row 9, speeds re-drawn in order (8 magnitudes, then 8 coins),
 * positions kept, timers reloaded and visited once in the same step. */
static void test_hold_up_pace_and_score(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_freeway, 0.0f, 0, "", 3);
    clear_road(&e);
    int row = 9;
    for (int k = 1; k <= 27; k++) {
        env_step(&e, FL_MINATAR_UP);
        if (k >= 4 && (k - 4) % 3 == 0) row--;
        assert_int_equal(e.s->chicken_y, row);
        assert_true(e.reward == 0.0f);
        check_obs(&e);
    }
    assert_int_equal(row, 1);
    int x_before[8];
    memcpy(x_before, e.s->car_x, sizeof x_before);
    fl_rng_t twin = e.rng;
    env_step(&e, FL_MINATAR_UP); /* step 28 */
    assert_true(e.reward == 1.0f);
    assert_int_equal(e.s->chicken_y, 9);
    assert_int_equal(obs_at(&e, 0, 4, 0), 0);
    assert_int_equal(obs_at(&e, 9, 4, 0), 1);
    (void)fl_rng_double(&twin); /* the sticky draw */
    int mag[8];
    for (int i = 0; i < 8; i++) mag[i] = 1 + (int)fl_rng_below(&twin, 5);
    for (int i = 0; i < 8; i++) {
        int v = fl_rng_double(&twin) < 0.5 ? -mag[i] : mag[i];
        assert_int_equal(e.s->car_v[i], v);
        assert_int_equal(e.s->car_x[i], x_before[i]); /* no car had a move due */
        assert_int_equal(e.s->car_timer[i], mag[i] - 1);
    }
    assert_memory_equal(&twin, &e.rng, sizeof twin);
    check_obs(&e);
    env_close(&e);
}

/* Appendix D: |v| = 3 first moves on step 4, then every 4 steps; |v| = 1 on steps 2, 4,
 * 6; a heading-left car wraps from 0 to 9. Speeds 2, 4, 5 move every 3, 5, 6 steps. */
static void test_car_pace(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_freeway, 0.0f, 0, "", 4);
    const int v[8] = {3, 1, -1, 2, 4, 5, -3, -5};
    for (int i = 0; i < 8; i++) {
        e.s->car_v[i] = v[i];
        e.s->car_timer[i] = abs(v[i]);
        e.s->car_x[i] = 0;
    }
    for (int k = 1; k <= 60; k++) {
        env_step(&e, FL_MINATAR_NOOP);
        for (int i = 0; i < 8; i++) {
            int p = abs(v[i]) + 1;
            int moves = k / p;
            int want = ((v[i] > 0 ? moves : -moves) % 10 + 10) % 10;
            assert_int_equal(e.s->car_x[i], want);
        }
        check_obs(&e);
    }
    env_close(&e);
}

/* Trails wrap and sit in channel 1 + |v|. */
static void test_trail_channels(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_freeway, 0.0f, 0, "", 5);
    e.s->car_x[0] = 0;
    e.s->car_v[0] = 1; /* heading right at 0: trail at 9, channel 2 */
    e.s->car_x[1] = 9;
    e.s->car_v[1] = -5; /* heading left at 9: trail at 0, channel 6 */
    e.s->car_x[2] = 6;
    e.s->car_v[2] = -3; /* trail at 7, channel 4 */
    for (int i = 0; i < 3; i++) e.s->car_timer[i] = 50;
    env_step(&e, FL_MINATAR_NOOP);
    assert_int_equal(obs_at(&e, 1, 0, 1), 1);
    assert_int_equal(obs_at(&e, 1, 9, 2), 1);
    assert_int_equal(obs_at(&e, 2, 9, 1), 1);
    assert_int_equal(obs_at(&e, 2, 0, 6), 1);
    assert_int_equal(obs_at(&e, 3, 6, 1), 1);
    assert_int_equal(obs_at(&e, 3, 7, 4), 1);
    check_obs(&e);
    env_close(&e);
}

/* Hits: walking into a car, or a car moving into the chicken, sends it to row 9 with no
 * reward; speeds and cooldown are untouched. */
static void test_hits(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_freeway, 0.0f, 0, "", 6);
    clear_road(&e);
    /* Walk into a car at (8, 4) that then moves away in the same step. */
    e.s->car_x[7] = 4;
    e.s->car_v[7] = 1;
    e.s->car_timer[7] = 0;
    e.s->cooldown = 0;
    int v_before[8];
    memcpy(v_before, e.s->car_v, sizeof v_before);
    env_step(&e, FL_MINATAR_UP);
    assert_int_equal(e.s->chicken_y, 9);
    assert_int_equal(e.s->car_x[7], 5);
    assert_int_equal(e.s->cooldown, 2); /* set to 3 by the move, lowered at the end */
    assert_true(e.reward == 0.0f);
    assert_memory_equal(e.s->car_v, v_before, sizeof v_before);

    /* A car moving into the chicken at (5, 4). */
    clear_road(&e);
    e.s->chicken_y = 5;
    e.s->car_x[4] = 3;
    e.s->car_v[4] = 2;
    e.s->car_timer[4] = 0;
    env_step(&e, FL_MINATAR_NOOP);
    assert_int_equal(e.s->chicken_y, 9);
    assert_int_equal(e.s->car_x[4], 4);
    assert_true(e.reward == 0.0f);

    /* A car one step from column 4 whose timer is not due: no hit. */
    clear_road(&e);
    e.s->chicken_y = 5;
    e.s->car_x[4] = 3;
    e.s->car_v[4] = 2;
    e.s->car_timer[4] = 1;
    env_step(&e, FL_MINATAR_NOOP);
    assert_int_equal(e.s->chicken_y, 5);
    assert_int_equal(e.s->car_x[4], 3);
    env_close(&e);
}

static void test_chicken_moves_and_cooldown(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_freeway_v1, 0.0f, 0, "", 7);
    clear_road(&e);
    e.s->cooldown = 0;
    env_step(&e, 2); /* v1 down on row 9: stays, still costs the cooldown */
    assert_int_equal(e.s->chicken_y, 9);
    assert_int_equal(e.s->cooldown, 2);
    env_step(&e, 1); /* up while cooling down: nothing, no queueing */
    env_step(&e, 0);
    assert_int_equal(e.s->chicken_y, 9);
    assert_int_equal(e.s->cooldown, 0);
    env_step(&e, 1); /* v1 up */
    assert_int_equal(e.s->chicken_y, 8);
    e.s->cooldown = 0;
    env_step(&e, 2);
    assert_int_equal(e.s->chicken_y, 9);
    env_close(&e);

    /* Full set: left, right and fire do nothing. */
    env_open(&e, &fl_env_minatar_freeway, 0.0f, 0, "", 7);
    clear_road(&e);
    const int idle[3] = {FL_MINATAR_LEFT, FL_MINATAR_RIGHT, FL_MINATAR_FIRE};
    for (int i = 0; i < 3; i++) {
        e.s->cooldown = 0;
        e.s->chicken_y = 5;
        env_step(&e, idle[i]);
        assert_int_equal(e.s->chicken_y, 5);
        assert_int_equal(e.s->cooldown, 0);
    }
    env_close(&e);
}

/* A score on the last step (2501) still counts, and the step is terminal. */
static void test_score_on_last_step(void **st) {
    (void)st;
    env_t e;
    env_open(&e, &fl_env_minatar_freeway, 0.0f, 0, "", 8);
    clear_road(&e);
    e.s->budget = 0;
    e.s->chicken_y = 1;
    e.s->cooldown = 0;
    env_step(&e, FL_MINATAR_UP);
    assert_true(e.reward == 1.0f);
    assert_int_equal(e.term, 1);
    assert_int_equal(e.s->chicken_y, 9);
    env_close(&e);
}

static void test_deterministic_replay(void **st) {
    (void)st;
    for (int reference = 0; reference <= 1; reference++) {
        env_t a, b;
        env_open(&a, &fl_env_minatar_freeway, 0.1f, reference, "", 99);
        env_open(&b, &fl_env_minatar_freeway, 0.1f, reference, "", 99);
        b.s->common.ramping = 0; /* Freeway ignores ramping */
        assert_memory_equal(a.obs, b.obs, OBS_BYTES);
        fl_rng_t pick;
        fl_rng_init(&pick, 100);
        float ret = 0;
        for (int i = 0; i < 6000; i++) {
            int act = fl_rng_double(&pick) < 0.7 ? FL_MINATAR_UP : (int)fl_rng_below(&pick, 6);
            env_step(&a, act);
            env_step(&b, act);
            assert_memory_equal(a.obs, b.obs, OBS_BYTES);
            assert_true(a.reward == b.reward);
            assert_int_equal(a.term, b.term);
            ret += a.reward;
            if (a.term) {
                a.def->reset(a.s, &a.rng, a.obs);
                b.def->reset(b.s, &b.rng, b.obs);
                assert_memory_equal(a.obs, b.obs, OBS_BYTES);
            }
        }
        assert_true(ret > 0.0f);
        env_close(&a);
        env_close(&b);
    }
    /* Different seeds: different cars. */
    env_t a, b;
    env_open(&a, &fl_env_minatar_freeway, 0.1f, 0, "", 1);
    env_open(&b, &fl_env_minatar_freeway, 0.1f, 0, "", 2);
    assert_memory_not_equal(a.s->car_v, b.s->car_v, sizeof a.s->car_v);
    env_close(&a);
    env_close(&b);
}

static void test_configure(void **st) {
    (void)st;
    fl_freeway_state_t *s = calloc(1, sizeof *s);
    fl_env_options_t o = {.sticky_prob = -1.0f, .difficulty_ramping = 1, .reference_rng = 0, .args = ""};
    assert_int_equal(fl_env_minatar_freeway.configure(s, &o), -1);
    free(s);
    /* Sticky p = 1: the initial noop repeats forever, so holding up never moves. */
    env_t e;
    env_open(&e, &fl_env_minatar_freeway, 1.0f, 0, "", 9);
    for (int i = 0; i < 20; i++) env_step(&e, FL_MINATAR_UP);
    assert_int_equal(e.s->chicken_y, 9);
    env_close(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_definitions),
        cmocka_unit_test(test_reset_state_and_obs),
        cmocka_unit_test(test_reset_reference_draws),
        cmocka_unit_test(test_episode_length_2501),
        cmocka_unit_test(test_hold_up_pace_and_score),
        cmocka_unit_test(test_car_pace),
        cmocka_unit_test(test_trail_channels),
        cmocka_unit_test(test_hits),
        cmocka_unit_test(test_chicken_moves_and_cooldown),
        cmocka_unit_test(test_score_on_last_step),
        cmocka_unit_test(test_deterministic_replay),
        cmocka_unit_test(test_configure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
