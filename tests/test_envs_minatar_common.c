/* Unit tests for the MinAtar common layer (envs/minatar/common.h): MT19937 against published
 * outputs, the reference draws of spec Appendix A against values NumPy's legacy
 * RandomState gives for the same seeds, options, sticky actions (spec 1.4) and the
 * episode-ended rule (1.3). A small probe game defined here records what the layer hands
 * it, so the layer is tested apart from any real game. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/rng.h"
#include "envs/core/env.h"
#include "envs/minatar/common.h"

/* ---- Probe game ------------------------------------------------------------------------ */

typedef struct probe_state {
    fl_minatar_common_t common;
    int resets;
    int steps;       /* game steps taken this episode */
    int end_after;   /* terminal on this game step (0 = never) */
    int last_action; /* full action the game saw */
} probe_state_t;

static void probe_reset(fl_minatar_common_t *c, fl_minatar_gen_t *gen) {
    (void)gen;
    probe_state_t *s = (probe_state_t *)c;
    s->resets++;
    s->steps = 0;
}

static int probe_step(fl_minatar_common_t *c, fl_minatar_gen_t *gen, int action, int *terminal) {
    (void)gen;
    probe_state_t *s = (probe_state_t *)c;
    s->steps++;
    s->last_action = action;
    if (s->end_after && s->steps >= s->end_after) *terminal = 1;
    return 2;
}

static void probe_obs(const fl_minatar_common_t *c, uint8_t *obs) {
    const probe_state_t *s = (const probe_state_t *)c;
    obs[FL_MINATAR_OBS_AT(s->steps % 10, s->last_action, 1, 2)] = 1;
}

static const fl_minatar_game_t probe_game = {.channels = 2, .reset = probe_reset, .step = probe_step, .obs = probe_obs};
static const uint8_t probe_minimal[] = {FL_MINATAR_NOOP, FL_MINATAR_FIRE};

FL_MINATAR_DEFINE_ENVS(probe, "probe", "probe", probe_state_t, probe_game, 2, probe_minimal, 2);

static probe_state_t *probe_new(float sticky, int reference, const char *args) {
    probe_state_t *s = calloc(1, sizeof *s);
    assert_non_null(s);
    fl_env_options_t o = {.sticky_prob = sticky, .difficulty_ramping = 1, .reference_rng = reference, .args = args};
    assert_int_equal(fl_env_minatar_probe.configure(s, &o), 0);
    return s;
}

/* ---- MT19937 ------------------------------------------------------------------------- */

static void test_mt19937_published_outputs(void **st) {
    (void)st;
    fl_mt19937_t m;
    fl_mt19937_seed(&m, 5489);
    assert_int_equal(fl_mt19937_next(&m), 3499211612u);
    for (int i = 2; i < 10000; i++) fl_mt19937_next(&m);
    assert_int_equal(fl_mt19937_next(&m), 4123659995u);
    fl_mt19937_seed(&m, 0);
    assert_int_equal(fl_mt19937_next(&m), 2357136044u);
}

/* NumPy RandomState(5489): random_sample() = 0.8147236863931789, then
 * randint(1, 6, size=8) = 2 5 2 3 4 4 5 3, random_sample(3) = 0.5468815192049838,
 * 0.9575068354342976, 0.9648885351992765, randint(0, 8) = 1, randint(3, 4) = 3 (uses no
 * output), random_sample() = 0.7258389664485512. RandomState(0).random_sample() =
 * 0.5488135039273248. */
static void test_reference_draws(void **st) {
    (void)st;
    fl_mt19937_t m;
    fl_mt19937_seed(&m, 5489);
    assert_true(fl_mt19937_double(&m) == 0.8147236863931789);
    const int ints[8] = {2, 5, 2, 3, 4, 4, 5, 3};
    for (int i = 0; i < 8; i++) assert_int_equal(fl_mt19937_int(&m, 1, 5), ints[i]);
    assert_true(fl_mt19937_double(&m) == 0.5468815192049838);
    assert_true(fl_mt19937_double(&m) == 0.9575068354342976);
    assert_true(fl_mt19937_double(&m) == 0.9648885351992765);
    assert_int_equal(fl_mt19937_int(&m, 0, 7), 1);
    assert_int_equal(fl_mt19937_int(&m, 3, 3), 3);
    assert_true(fl_mt19937_double(&m) == 0.7258389664485512);
    fl_mt19937_seed(&m, 0);
    assert_true(fl_mt19937_double(&m) == 0.5488135039273248);
}

/* U() from two raw outputs and I() by masked rejection, recomputed from a twin generator. */
static void test_reference_draws_from_raw_outputs(void **st) {
    (void)st;
    fl_mt19937_t m, raw;
    fl_mt19937_seed(&m, 20240611);
    fl_mt19937_seed(&raw, 20240611);
    for (int k = 0; k < 200; k++) {
        uint32_t a = fl_mt19937_next(&raw), b = fl_mt19937_next(&raw);
        double want = ((double)(a >> 5) * 67108864.0 + (double)(b >> 6)) / 9007199254740992.0;
        assert_true(fl_mt19937_double(&m) == want);
        uint32_t v;
        do v = fl_mt19937_next(&raw) & 7u;
        while (v > 4); /* I(1, 5): r = 4, mask 7 */
        assert_int_equal(fl_mt19937_int(&m, 1, 5), 1 + (int)v);
        v = fl_mt19937_next(&raw) & 1u; /* I(0, 1): mask 1, never rejects */
        assert_int_equal(fl_mt19937_int(&m, 0, 1), (int)v);
        do v = fl_mt19937_next(&raw) & 7u;
        while (v > 7); /* I(0, 7): mask 7 */
        assert_int_equal(fl_mt19937_int(&m, 0, 7), (int)v);
        do v = fl_mt19937_next(&raw) & 15u;
        while (v > 8); /* I(-4, 4): r = 8, mask 15 */
        assert_int_equal(fl_mt19937_int(&m, -4, 4), -4 + (int)v);
    }
    /* Both generators used the same number of outputs. */
    assert_int_equal(fl_mt19937_next(&m), fl_mt19937_next(&raw));
}

static void test_fleet_gen_int_range_and_uniformity(void **st) {
    (void)st;
    fl_rng_t r;
    fl_rng_init(&r, 3);
    fl_minatar_gen_t g = {.rng = &r, .mt = NULL};
    int counts[5] = {0};
    const int n = 50000;
    for (int i = 0; i < n; i++) {
        int v = fl_minatar_int(&g, 1, 5);
        assert_true(v >= 1 && v <= 5);
        counts[v - 1]++;
        double u = fl_minatar_u(&g);
        assert_true(u >= 0.0 && u < 1.0);
    }
    /* Each bin ~ n/5 = 10000, sd ~ 89; 6 sd tolerance. */
    for (int k = 0; k < 5; k++) assert_true(abs(counts[k] - n / 5) < 540);
    fl_rng_t before = r;
    assert_int_equal(fl_minatar_int(&g, 7, 7), 7);
    assert_memory_equal(&before, &r, sizeof r); /* lo == hi: no draw */
}

/* ---- Options ------------------------------------------------------------------------- */

static void test_configure_options(void **st) {
    (void)st;
    probe_state_t s;
    memset(&s, 0, sizeof s);
    fl_env_options_t o = {.sticky_prob = 0.1f, .difficulty_ramping = 0, .reference_rng = 1, .args = "seed=5489"};
    assert_int_equal(fl_minatar_configure(&s, &o), 0);
    assert_true(s.common.sticky_prob == 0.1); /* the decimal, not 0.1f widened */
    assert_int_equal(s.common.ramping, 0);
    assert_int_equal(s.common.reference_rng, 1);
    assert_int_equal(s.common.mt_seeded, 1);
    assert_int_equal(fl_mt19937_next(&s.common.mt), 3499211612u);

    o.args = "";
    assert_int_equal(fl_minatar_configure(&s, &o), 0);
    o.args = NULL;
    assert_int_equal(fl_minatar_configure(&s, &o), 0);
    const char *bad_args[] = {"seed=", "seed=abc", "seed=4294967296", "speed=3", "seed=12x", "hello"};
    for (size_t i = 0; i < sizeof bad_args / sizeof *bad_args; i++) {
        o.args = bad_args[i];
        assert_int_equal(fl_minatar_configure(&s, &o), -1);
    }
    o.args = "";
    o.sticky_prob = -0.01f;
    assert_int_equal(fl_minatar_configure(&s, &o), -1);
    o.sticky_prob = 1.5f;
    assert_int_equal(fl_minatar_configure(&s, &o), -1);
    o.sticky_prob = NAN;
    assert_int_equal(fl_minatar_configure(&s, &o), -1);
    o.sticky_prob = 0.25f;
    assert_int_equal(fl_minatar_configure(&s, &o), 0);
    assert_true(s.common.sticky_prob == 0.25);
}

static void test_defaults_without_configure(void **st) {
    (void)st;
    probe_state_t *s = calloc(1, sizeof *s);
    fl_rng_t r;
    fl_rng_init(&r, 1);
    uint8_t obs[200];
    fl_env_minatar_probe.reset(s, &r, obs);
    assert_int_equal(s->common.configured, 1);
    assert_true(s->common.sticky_prob == 0.1);
    assert_int_equal(s->common.ramping, 1);
    assert_int_equal(s->common.reference_rng, 0);
    free(s);
}

static void test_definitions(void **st) {
    (void)st;
    const fl_env_def_t *d = &fl_env_minatar_probe;
    assert_string_equal(d->name, "minatar-probe");
    assert_int_equal(d->num_actions, 6);
    assert_int_equal(d->obs.dtype, FL_DTYPE_UINT8);
    assert_int_equal(d->obs.rank, 3);
    assert_int_equal(d->obs.shape[0], 10);
    assert_int_equal(d->obs.shape[1], 10);
    assert_int_equal(d->obs.shape[2], 2);
    assert_int_equal(d->max_episode_steps, 0);
    assert_int_equal(d->state_size, sizeof(probe_state_t));
    assert_int_equal(fl_env_validate(d, NULL), FL_OK);
    d = &fl_env_minatar_probe_v1;
    assert_string_equal(d->name, "minatar-probe-v1");
    assert_int_equal(d->num_actions, 2);
    assert_int_equal(fl_env_validate(d, NULL), FL_OK);
}

/* ---- Sticky actions ------------------------------------------------------------------ */

static void test_action_map_before_sticky(void **st) {
    (void)st;
    probe_state_t *s = probe_new(0.0f, 0, "");
    fl_rng_t r;
    fl_rng_init(&r, 2);
    uint8_t obs[200];
    float rew;
    int term;
    fl_env_minatar_probe_v1.reset(s, &r, obs);
    fl_env_minatar_probe_v1.step(s, &r, 1, obs, &rew, &term);
    assert_int_equal(s->last_action, FL_MINATAR_FIRE);
    assert_int_equal(s->common.prev_action, FL_MINATAR_FIRE); /* memory holds the full index */
    assert_true(rew == 2.0f);
    assert_int_equal(obs[FL_MINATAR_OBS_AT(1, 5, 1, 2)], 1);
    fl_env_minatar_probe_v1.step(s, &r, 0, obs, &rew, &term);
    assert_int_equal(s->last_action, FL_MINATAR_NOOP);
    free(s);
}

/* Choices alternate 1, 3, 1, ... An executed action differs from the choice only after a
 * sticky draw, and then unless the repeat chain lands back on the same choice: the
 * fraction is p * sum_{j even} (1-p) p^j = p / (1 + p). */
static void test_sticky_fraction_alternating(void **st) {
    (void)st;
    const float p = 0.1f;
    probe_state_t *s = probe_new(p, 0, "");
    fl_rng_t r;
    fl_rng_init(&r, 77);
    uint8_t obs[200];
    float rew;
    int term;
    fl_env_minatar_probe.reset(s, &r, obs);
    const int n = 100000;
    int differ = 0;
    for (int i = 0; i < n; i++) {
        int a = (i & 1) ? FL_MINATAR_RIGHT : FL_MINATAR_LEFT;
        fl_env_minatar_probe.step(s, &r, a, obs, &rew, &term);
        if (s->last_action != a) differ++;
    }
    double want = 0.1 / 1.1, got = (double)differ / n;
    double sd = sqrt(want * (1 - want) / n);
    print_message("sticky p=0.1, alternating choices: differing fraction %.4f (expected %.4f)\n", got, want);
    assert_true(fabs(got - want) < 5 * sd);
    free(s);
}

/* Choosing, every step, an action different from the last executed one makes every sticky
 * draw visible: the fraction is p itself. Checked for several p. */
static void test_sticky_fraction_fresh_choice(void **st) {
    (void)st;
    const float ps[] = {0.0f, 0.1f, 0.25f, 0.5f, 1.0f};
    for (size_t k = 0; k < sizeof ps / sizeof *ps; k++) {
        probe_state_t *s = probe_new(ps[k], 0, "");
        fl_rng_t r;
        fl_rng_init(&r, 100 + k);
        uint8_t obs[200];
        float rew;
        int term;
        fl_env_minatar_probe.reset(s, &r, obs);
        const int n = 40000;
        int stuck = 0;
        for (int i = 0; i < n; i++) {
            int a = (s->common.prev_action + 1 + (i % 5)) % 6;
            if (a == s->common.prev_action) a = (a + 1) % 6;
            int before = s->common.prev_action;
            fl_env_minatar_probe.step(s, &r, a, obs, &rew, &term);
            if (s->last_action == before)
                stuck++;
            else
                assert_int_equal(s->last_action, a);
        }
        double want = ps[k], got = (double)stuck / n;
        double sd = sqrt(want * (1 - want) / n);
        assert_true(fabs(got - want) <= 5 * sd + 1e-12);
        free(s);
    }
}

static void test_prev_starts_noop_and_carries_across_reset(void **st) {
    (void)st;
    probe_state_t *s = probe_new(1.0f, 0, "");
    fl_rng_t r;
    fl_rng_init(&r, 5);
    uint8_t obs[200];
    float rew;
    int term;
    fl_env_minatar_probe.reset(s, &r, obs);
    fl_env_minatar_probe.step(s, &r, FL_MINATAR_FIRE, obs, &rew, &term);
    assert_int_equal(s->last_action, FL_MINATAR_NOOP); /* p = 1 repeats the initial noop */

    s->common.sticky_prob = 0.0;
    fl_env_minatar_probe.step(s, &r, FL_MINATAR_RIGHT, obs, &rew, &term);
    assert_int_equal(s->last_action, FL_MINATAR_RIGHT);
    fl_env_minatar_probe.reset(s, &r, obs);
    assert_int_equal(s->resets, 2);
    assert_int_equal(s->common.prev_action, FL_MINATAR_RIGHT);
    s->common.sticky_prob = 1.0;
    fl_env_minatar_probe.step(s, &r, FL_MINATAR_LEFT, obs, &rew, &term);
    assert_int_equal(s->last_action, FL_MINATAR_RIGHT);
    free(s);
}

/* One U() per step, first, also when p = 0 (fleet generator: one fl_rng_double). */
static void test_sticky_draw_every_step_fleet(void **st) {
    (void)st;
    probe_state_t *s = probe_new(0.0f, 0, "");
    fl_rng_t r, twin;
    fl_rng_init(&r, 9);
    uint8_t obs[200];
    float rew;
    int term;
    fl_env_minatar_probe.reset(s, &r, obs);
    twin = r;
    fl_env_minatar_probe.step(s, &r, 2, obs, &rew, &term);
    fl_rng_double(&twin);
    assert_memory_equal(&r, &twin, sizeof r);
    free(s);
}

/* After the end: (0, terminal), the game is not stepped, and the sticky draw still
 * happens (two MT outputs with the reference generator). */
static void test_step_after_end(void **st) {
    (void)st;
    for (int reference = 0; reference <= 1; reference++) {
        probe_state_t *s = probe_new(0.1f, reference, "seed=42");
        s->end_after = 2;
        fl_rng_t r;
        fl_rng_init(&r, 11);
        uint8_t obs[200], obs_end[200];
        float rew;
        int term;
        fl_env_minatar_probe.reset(s, &r, obs);
        fl_env_minatar_probe.step(s, &r, 0, obs, &rew, &term);
        assert_int_equal(term, 0);
        fl_env_minatar_probe.step(s, &r, 0, obs_end, &rew, &term);
        assert_int_equal(term, 1);
        assert_true(rew == 2.0f);
        for (int k = 0; k < 3; k++) {
            fl_rng_t twin = r;
            fl_mt19937_t mt_twin = s->common.mt;
            fl_env_minatar_probe.step(s, &r, 5, obs, &rew, &term);
            assert_true(rew == 0.0f);
            assert_int_equal(term, 1);
            assert_int_equal(s->steps, 2);
            assert_memory_equal(obs, obs_end, sizeof obs);
            if (reference) {
                assert_memory_equal(&r, &twin, sizeof r);
                fl_mt19937_double(&mt_twin);
                assert_memory_equal(&s->common.mt, &mt_twin, sizeof mt_twin);
            } else {
                fl_rng_double(&twin);
                assert_memory_equal(&r, &twin, sizeof r);
            }
        }
        fl_env_minatar_probe.reset(s, &r, obs);
        fl_env_minatar_probe.step(s, &r, 0, obs, &rew, &term);
        assert_int_equal(term, 0);
        assert_true(rew == 2.0f);
        free(s);
    }
}

/* The reference generator: seeded from args, or else from the instance's fleet stream at
 * the first reset (so instances differ), and never from the fleet stream afterwards. */
static void test_reference_seeding(void **st) {
    (void)st;
    probe_state_t *s = probe_new(0.1f, 1, "seed=5489");
    fl_rng_t r, twin;
    fl_rng_init(&r, 1);
    twin = r;
    uint8_t obs[200];
    float rew;
    int term;
    fl_env_minatar_probe.reset(s, &r, obs);
    fl_env_minatar_probe.step(s, &r, 0, obs, &rew, &term);
    assert_memory_equal(&r, &twin, sizeof r); /* fleet stream untouched */
    fl_mt19937_t m;
    fl_mt19937_seed(&m, 5489);
    fl_mt19937_double(&m); /* the sticky draw of step 1 */
    assert_int_equal(fl_mt19937_next(&s->common.mt), fl_mt19937_next(&m));
    free(s);

    probe_state_t *a = probe_new(0.1f, 1, ""), *b = probe_new(0.1f, 1, "");
    fl_rng_t ra, rb;
    fl_rng_init_stream(&ra, 1, 0);
    fl_rng_init_stream(&rb, 1, 1);
    fl_env_minatar_probe.reset(a, &ra, obs);
    fl_env_minatar_probe.reset(b, &rb, obs);
    assert_int_equal(a->common.mt_seeded, 1);
    assert_int_not_equal(fl_mt19937_next(&a->common.mt), fl_mt19937_next(&b->common.mt));
    fl_rng_t ra2 = ra;
    fl_env_minatar_probe.reset(a, &ra, obs);
    assert_memory_equal(&ra, &ra2, sizeof ra); /* seeded once only */
    free(a);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mt19937_published_outputs),
        cmocka_unit_test(test_reference_draws),
        cmocka_unit_test(test_reference_draws_from_raw_outputs),
        cmocka_unit_test(test_fleet_gen_int_range_and_uniformity),
        cmocka_unit_test(test_configure_options),
        cmocka_unit_test(test_defaults_without_configure),
        cmocka_unit_test(test_definitions),
        cmocka_unit_test(test_action_map_before_sticky),
        cmocka_unit_test(test_sticky_fraction_alternating),
        cmocka_unit_test(test_sticky_fraction_fresh_choice),
        cmocka_unit_test(test_prev_starts_noop_and_carries_across_reset),
        cmocka_unit_test(test_sticky_draw_every_step_fleet),
        cmocka_unit_test(test_step_after_end),
        cmocka_unit_test(test_reference_seeding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
