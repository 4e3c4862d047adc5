/* Unit tests for the MinAtar family's registry rows (envs/minatar/minatar.c): the ten
 * definitions in order, each game's two, their reward bounds, what the registry answers
 * for them, and random play within the bounds. The games themselves are tested in
 * tests/test_envs_minatar_<game>.c, the common layer in tests/test_envs_minatar_common.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/rng.h"
#include "envs/classic/classic.h"
#include "envs/core/vecenv.h"
#include "envs/minatar/minatar.h"
#include "envs/registry.h"

static const struct {
    const char *game;
    int channels, minimal_actions;
    double bound;
} games[] = {
    {"asterix", FL_ASTERIX_CHANNELS, 5, 2},
    {"breakout", FL_BREAKOUT_CHANNELS, 3, 1},
    {"freeway", FL_FREEWAY_CHANNELS, 3, 1},
    {"seaquest", FL_SEAQUEST_CHANNELS, 6, 110},
    {"space_invaders", FL_SPACE_INVADERS_CHANNELS, 4, 100},
};
#define NUM_GAMES ((int)(sizeof games / sizeof games[0]))

/* Every game's full-action env, then its -v1, by game name; the registry lists them right
 * after the classic family and finds them by name with the rows' bounds. */
static void test_family_rows(void **unused) {
    (void)unused;
    const fl_env_family_t *f = &fl_env_family_minatar;
    assert_string_equal(f->name, "minatar");
    assert_null(f->count);
    assert_null(f->at);
    assert_null(f->env_name);
    assert_null(f->find);
    assert_int_equal(f->num_rows, 2 * NUM_GAMES);
    for (int g = 0; g < NUM_GAMES; g++)
        for (int v = 0; v < 2; v++) {
            const fl_env_row_t *row = &f->rows[2 * g + v];
            char name[64];
            snprintf(name, sizeof name, "minatar-%s%s", games[g].game, v ? "-v1" : "");
            assert_string_equal(row->def->name, name);
            fl_err_t err = {0};
            assert_int_equal(fl_env_validate(row->def, &err), FL_OK);
            assert_int_equal(row->def->obs.dtype, FL_DTYPE_UINT8);
            assert_int_equal(row->def->obs.rank, 3);
            assert_int_equal(row->def->obs.shape[0], FL_MINATAR_ROWS);
            assert_int_equal(row->def->obs.shape[1], FL_MINATAR_COLS);
            assert_int_equal(row->def->obs.shape[2], games[g].channels);
            assert_int_equal(row->def->num_actions, v ? games[g].minimal_actions : FL_MINATAR_NUM_ACTIONS);
            assert_int_equal(row->def->state_size, f->rows[2 * g].def->state_size);
            assert_true(row->reward_bound == games[g].bound);
            assert_ptr_equal(fl_env_at(fl_env_family_classic.num_rows + 2 * g + v), row->def);
            assert_ptr_equal(fl_env_find(name), row->def);
            assert_true(fl_env_reward_bound(name) == games[g].bound);
        }
    assert_true(fl_env_reward_bound("minatar-breakout-v2") == 0.0);
    /* MinAtar's Gymnasium ids: -v0 the full action set, -v1 the minimal one */
    assert_ptr_equal(fl_env_find("MinAtar/Breakout-v1"), &fl_env_minatar_breakout_v1);
    assert_ptr_equal(fl_env_find("MinAtar/Breakout-v0"), &fl_env_minatar_breakout);
    assert_ptr_equal(fl_env_find("MinAtar/SpaceInvaders-v1"), &fl_env_minatar_space_invaders_v1);
    assert_true(fl_env_reward_bound("MinAtar/Seaquest-v0") == 110.0);
    double m;
    assert_int_equal(fl_env_return_max("minatar-breakout", &m), -1); /* no cap declared */
}

/* Random play, with sticky actions and on either generator, never gives a step's reward
 * beyond the row's bound. */
static void test_rewards_within_bounds(void **unused) {
    (void)unused;
    const fl_env_family_t *f = &fl_env_family_minatar;
    for (int r = 0; r < f->num_rows; r++)
        for (int reference = 0; reference < 2; reference++) {
            const fl_env_def_t *d = f->rows[r].def;
            fl_vecenv_t *ve;
            fl_err_t err = {0};
            assert_int_equal(fl_vecenv_create(d, 4, 11, 0, &ve, &err), FL_OK);
            fl_env_options_t o = {.sticky_prob = 0.1f, .difficulty_ramping = 1, .reference_rng = reference, .args = ""};
            assert_int_equal(fl_vecenv_configure(ve, &o, &err), FL_OK);
            uint8_t obs[4 * FL_MINATAR_ROWS * FL_MINATAR_COLS * FL_MINATAR_MAX_CHANNELS];
            float rewards[4];
            uint8_t term[4], trunc[4];
            int32_t actions[4];
            fl_rng_t act;
            fl_rng_init(&act, 5);
            fl_vecenv_reset(ve, obs);
            for (int t = 0; t < 3000; t++) {
                for (int i = 0; i < 4; i++) actions[i] = (int32_t)fl_rng_below(&act, (uint64_t)d->num_actions);
                assert_int_equal(fl_vecenv_step(ve, actions, obs, rewards, term, trunc, NULL, NULL, &err), FL_OK);
                for (int i = 0; i < 4; i++) assert_true(fabs(rewards[i]) <= f->rows[r].reward_bound);
            }
            fl_vecenv_destroy(ve);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_rows),
        cmocka_unit_test(test_rewards_within_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
