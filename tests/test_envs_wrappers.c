/* Unit tests for envs/core/wrappers: every wrapper on small synthetic envs defined here.
 *
 *  - counter: int32 (3,) = [t, 100 - t, last executed action], reward t, terminates at
 *    t == 10; a variant with its own limit of 6 steps.
 *  - rewards: float32 (1,), the reward of action a is a fixed table entry.
 *  - rgb4: uint8 (4,4,3) with R = 40y + 12x + t, G = 255 - R, B = 7 (t = steps taken);
 *    linear in x and y, so area and bilinear resize values follow by hand.
 *  - colors: uint8 (1,6,3) with hand-picked pixels for the grayscale weights.
 *  - lives: int32 (1,) = [t], a life lost every 4th step out of 3, its lives declared to
 *    the core (fl_env_declare_lives) as the Atari family declares its games'. */
#include <math.h>
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
#include "envs/core/wrappers.h"

/* ---- Synthetic envs ------------------------------------------------------------------- */

typedef struct counter_state {
    int t;
    int start; /* set by configure (counter_cfg only), kept across resets */
} counter_state_t;

static void counter_reset(void *state, fl_rng_t *rng, void *obs) {
    (void)rng;
    counter_state_t *s = state;
    s->t = s->start;
    int32_t *o = obs;
    o[0] = s->t;
    o[1] = 100 - s->t;
    o[2] = 0;
}

static void counter_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    (void)rng;
    counter_state_t *s = state;
    s->t++;
    int32_t *o = obs;
    o[0] = s->t;
    o[1] = 100 - s->t;
    o[2] = action;
    *reward = (float)s->t;
    *terminated = s->t >= 10;
}

static const fl_env_def_t counter_env = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "counter",
    .obs = {.dtype = FL_DTYPE_INT32, .rank = 1, .shape = {3}},
    .num_actions = 4,
    .max_episode_steps = 0,
    .state_size = sizeof(counter_state_t),
    .reset = counter_reset,
    .step = counter_step,
};

static const fl_env_def_t counter6_env = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "counter6",
    .obs = {.dtype = FL_DTYPE_INT32, .rank = 1, .shape = {3}},
    .num_actions = 4,
    .max_episode_steps = 6,
    .state_size = sizeof(counter_state_t),
    .reset = counter_reset,
    .step = counter_step,
};

/* args = "start=N" makes episodes start at t = N; anything else is rejected. */
static int counter_configure(void *state, const fl_env_options_t *opts) {
    int start;
    if (!opts->args || sscanf(opts->args, "start=%d", &start) != 1) return -1;
    ((counter_state_t *)state)->start = start;
    return 0;
}

static const fl_env_def_t counter_cfg_env = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "counter_cfg",
    .obs = {.dtype = FL_DTYPE_INT32, .rank = 1, .shape = {3}},
    .num_actions = 4,
    .state_size = sizeof(counter_state_t),
    .reset = counter_reset,
    .step = counter_step,
    .configure = counter_configure,
};

static const float reward_table[5] = {-2.5f, 0.0f, 0.3f, 7.0f, -0.0001f};

static void rewards_reset(void *state, fl_rng_t *rng, void *obs) {
    (void)state;
    (void)rng;
    *(float *)obs = 0.0f;
}

static void rewards_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    (void)state;
    (void)rng;
    *reward = reward_table[action];
    *(float *)obs = reward_table[action];
    *terminated = 0;
}

static const fl_env_def_t rewards_env = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "rewards",
    .obs = {.dtype = FL_DTYPE_FLOAT32, .rank = 1, .shape = {1}},
    .num_actions = 5,
    .state_size = sizeof(int),
    .reset = rewards_reset,
    .step = rewards_step,
};

static int rgb4_r(int y, int x, int t) {
    return 40 * y + 12 * x + t;
}

static void rgb4_draw(int t, uint8_t *img) {
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++) {
            uint8_t *p = img + (y * 4 + x) * 3;
            p[0] = (uint8_t)rgb4_r(y, x, t);
            p[1] = (uint8_t)(255 - rgb4_r(y, x, t));
            p[2] = 7;
        }
}

static void rgb4_reset(void *state, fl_rng_t *rng, void *obs) {
    (void)rng;
    counter_state_t *s = state;
    s->t = 0;
    rgb4_draw(0, obs);
}

static void rgb4_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    (void)rng;
    (void)action;
    counter_state_t *s = state;
    s->t++;
    rgb4_draw(s->t, obs);
    *reward = 0.0f;
    *terminated = 0;
}

static const fl_env_def_t rgb4_env = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "rgb4",
    .obs = {.dtype = FL_DTYPE_UINT8, .rank = 3, .shape = {4, 4, 3}},
    .num_actions = 2,
    .state_size = sizeof(counter_state_t),
    .reset = rgb4_reset,
    .step = rgb4_step,
};

static const uint8_t colors_img[6][3] = {{255, 0, 0},  {0, 255, 0},     {0, 0, 255},
                                         {10, 20, 30}, {100, 150, 200}, {255, 255, 255}};
/* round(0.299 R + 0.587 G + 0.114 B): 76.245, 149.685, 29.07, 18.15, 140.75, 255 */
static const uint8_t colors_gray[6] = {76, 150, 29, 18, 141, 255};

static void colors_reset(void *state, fl_rng_t *rng, void *obs) {
    (void)state;
    (void)rng;
    memcpy(obs, colors_img, sizeof colors_img);
}

static void colors_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    colors_reset(state, rng, obs);
    (void)action;
    *reward = 0.0f;
    *terminated = 0;
}

static const fl_env_def_t colors_env = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "colors",
    .obs = {.dtype = FL_DTYPE_UINT8, .rank = 3, .shape = {1, 6, 3}},
    .num_actions = 1,
    .state_size = sizeof(int),
    .reset = colors_reset,
    .step = colors_step,
};

/* ---- Helpers -------------------------------------------------------------------------- */

/* One wrapped instance with its own state, generator and observation buffer. */
typedef struct inst {
    fl_wrapped_env_t *w;
    void *state;
    fl_rng_t rng;
    void *obs;
    float reward;
    int term, trunc;
} inst_t;

static void inst_open(inst_t *in, const fl_env_def_t *def, const char *spec, uint64_t seed) {
    fl_err_t err;
    fl_err_init(&err);
    memset(in, 0, sizeof *in);
    if (fl_wrapped_env_create(def, spec, &in->w, &err) != FL_OK) fail_msg("create '%s': %s", spec, err.msg);
    in->state = calloc(1, fl_wrapped_env_state_size(in->w));
    in->obs = calloc(1, fl_wrapped_env_obs_size(in->w));
    assert_non_null(in->state);
    assert_non_null(in->obs);
    fl_rng_init(&in->rng, seed);
    fl_wrapped_env_reset(in->w, in->state, &in->rng, in->obs);
}

static void inst_step(inst_t *in, int action) {
    fl_wrapped_env_step(in->w, in->state, &in->rng, action, in->obs, &in->reward, &in->term, &in->trunc);
}

static void inst_close(inst_t *in) {
    free(in->state);
    free(in->obs);
    fl_wrapped_env_destroy(in->w);
}

static void assert_i32(const int32_t *got, const int32_t *want, int n) {
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) fail_msg("element %d is %d, expected %d", i, (int)got[i], (int)want[i]);
}

static void expect_spec_error(const fl_env_def_t *def, const char *spec, const char *needle1, const char *needle2) {
    fl_err_t err;
    fl_err_init(&err);
    fl_wrapped_env_t *w = (fl_wrapped_env_t *)1;
    fl_status st = fl_wrapped_env_create(def, spec, &w, &err);
    if (st != FL_INVALID_ARGUMENT)
        fail_msg("spec '%s': status %s, expected FL_INVALID_ARGUMENT", spec, fl_status_name(st));
    assert_null(w);
    if (!strstr(err.msg, needle1)) fail_msg("spec '%s': message '%s' does not name '%s'", spec, err.msg, needle1);
    if (needle2 && !strstr(err.msg, needle2))
        fail_msg("spec '%s': message '%s' does not say '%s'", spec, err.msg, needle2);
}

/* ---- Tests ---------------------------------------------------------------------------- */

static void test_empty_spec_is_identity(void **unused) {
    (void)unused;
    inst_t a;
    inst_open(&a, &counter_env, "", 1);
    const fl_env_def_t *d = fl_wrapped_env_info(a.w);
    assert_string_equal(d->name, "counter");
    assert_int_equal(d->obs.dtype, FL_DTYPE_INT32);
    assert_int_equal(d->obs.rank, 1);
    assert_int_equal(d->obs.shape[0], 3);
    assert_int_equal(d->num_actions, 4);
    assert_ptr_equal(fl_wrapped_env_inner(a.w), &counter_env);
    assert_null(d->reset);
    int32_t want0[3] = {0, 100, 0};
    assert_i32(a.obs, want0, 3);
    inst_step(&a, 2);
    int32_t want1[3] = {1, 99, 2};
    assert_i32(a.obs, want1, 3);
    assert_true(a.reward == 1.0f);
    assert_int_equal(((counter_state_t *)fl_wrapped_env_inner_state(a.w, a.state))->t, 1);
    inst_close(&a);
}

static void test_framestack_order_and_reset_fill(void **unused) {
    (void)unused;
    inst_t a;
    inst_open(&a, &counter_env, "framestack(3)", 1);
    const fl_env_def_t *d = fl_wrapped_env_info(a.w);
    assert_int_equal(d->obs.rank, 1);
    assert_int_equal(d->obs.shape[0], 9);
    assert_int_equal(fl_wrapped_env_obs_size(a.w), 9 * sizeof(int32_t));
    int32_t r0[9] = {0, 100, 0, 0, 100, 0, 0, 100, 0};
    assert_i32(a.obs, r0, 9);
    inst_step(&a, 1);
    int32_t s1[9] = {0, 100, 0, 0, 100, 0, 1, 99, 1};
    assert_i32(a.obs, s1, 9);
    inst_step(&a, 2);
    inst_step(&a, 3);
    int32_t s3[9] = {1, 99, 1, 2, 98, 2, 3, 97, 3};
    assert_i32(a.obs, s3, 9);
    /* a new episode refills the stack with its first frame */
    fl_wrapped_env_reset(a.w, a.state, &a.rng, a.obs);
    assert_i32(a.obs, r0, 9);
    inst_close(&a);
}

static void test_framestack_images_on_last_axis(void **unused) {
    (void)unused;
    inst_t s, g;
    inst_open(&s, &rgb4_env, "grayscale framestack(2)", 1);
    inst_open(&g, &rgb4_env, "grayscale", 1);
    const fl_env_def_t *d = fl_wrapped_env_info(s.w);
    assert_int_equal(d->obs.rank, 3);
    assert_int_equal(d->obs.shape[0], 4);
    assert_int_equal(d->obs.shape[1], 4);
    assert_int_equal(d->obs.shape[2], 2);
    uint8_t prev[16];
    memcpy(prev, g.obs, 16);
    for (int p = 0; p < 16; p++) {
        assert_int_equal(((uint8_t *)s.obs)[2 * p], prev[p]);
        assert_int_equal(((uint8_t *)s.obs)[2 * p + 1], prev[p]);
    }
    for (int k = 0; k < 3; k++) {
        inst_step(&s, 0);
        inst_step(&g, 0);
        const uint8_t *so = s.obs, *go = g.obs;
        for (int p = 0; p < 16; p++) {
            if (so[2 * p] != prev[p]) fail_msg("step %d pixel %d: oldest %d, expected %d", k, p, so[2 * p], prev[p]);
            if (so[2 * p + 1] != go[p])
                fail_msg("step %d pixel %d: newest %d, expected %d", k, p, so[2 * p + 1], go[p]);
        }
        assert_memory_not_equal(prev, go, 16);
        memcpy(prev, go, 16);
    }
    inst_close(&s);
    inst_close(&g);
}

static void test_frameskip_sum_and_maxpool(void **unused) {
    (void)unused;
    inst_t a;
    inst_open(&a, &counter_env, "frameskip(4)", 1);
    inst_step(&a, 1);
    /* inner steps t = 1..4: reward 1+2+3+4; obs = max of frames 3 and 4 */
    assert_true(a.reward == 10.0f);
    int32_t w1[3] = {4, 97, 1};
    assert_i32(a.obs, w1, 3);
    assert_int_equal(a.term, 0);
    inst_step(&a, 2);
    assert_true(a.reward == 5.0f + 6 + 7 + 8);
    int32_t w2[3] = {8, 93, 2};
    assert_i32(a.obs, w2, 3);
    inst_close(&a);

    inst_t l;
    inst_open(&l, &counter_env, "frameskip(4, last)", 1);
    inst_step(&l, 1);
    int32_t wl[3] = {4, 96, 1};
    assert_i32(l.obs, wl, 3);
    assert_true(l.reward == 10.0f);
    inst_close(&l);
}

static void test_frameskip_termination_inside_skip(void **unused) {
    (void)unused;
    inst_t a;
    inst_open(&a, &counter_env, "frameskip(4)", 1);
    inst_step(&a, 0);
    inst_step(&a, 0);
    assert_int_equal(a.term, 0);
    /* t = 9, 10: terminates on the second inner step; the other two are not taken */
    inst_step(&a, 3);
    assert_int_equal(a.term, 1);
    assert_int_equal(a.trunc, 0);
    assert_true(a.reward == 19.0f);
    int32_t w[3] = {10, 91, 3};
    assert_i32(a.obs, w, 3);
    assert_int_equal(((counter_state_t *)a.state)->t, 10);
    inst_close(&a);

    /* the only frame of a step that ends on its first inner step */
    inst_t b;
    inst_open(&b, &counter_env, "frameskip(3)", 1);
    inst_step(&b, 0);
    inst_step(&b, 0);
    inst_step(&b, 0);
    assert_int_equal(b.term, 0);
    inst_step(&b, 2);
    assert_int_equal(b.term, 1);
    assert_true(b.reward == 10.0f);
    int32_t wb[3] = {10, 90, 2};
    assert_i32(b.obs, wb, 3);
    inst_close(&b);

    /* the inner env's own limit (6 inner steps) truncates inside a skip */
    inst_t c;
    inst_open(&c, &counter6_env, "frameskip(4)", 1);
    inst_step(&c, 0);
    assert_int_equal(c.trunc, 0);
    inst_step(&c, 0);
    assert_int_equal(c.term, 0);
    assert_int_equal(c.trunc, 1);
    assert_true(c.reward == 11.0f);
    inst_close(&c);
}

static void test_sticky_statistics(void **unused) {
    (void)unused;
    const int n = 20000;
    const double ps[3] = {0.0, 0.25, 1.0};
    for (int k = 0; k < 3; k++) {
        char spec[32];
        snprintf(spec, sizeof spec, "sticky(%g)", ps[k]);
        inst_t a;
        inst_open(&a, &counter_env, spec, 42 + (uint64_t)k);
        int repeats = 0;
        for (int i = 0; i < n; i++) {
            /* always ask for an action other than the previous executed one (obs[2]; 0 after
             * reset, which is also the sticky layer's previous action then) */
            int prev = ((int32_t *)a.obs)[2];
            int want = (prev + 1) % 4;
            inst_step(&a, want);
            int executed = ((int32_t *)a.obs)[2];
            if (executed != want) {
                assert_int_equal(executed, prev);
                repeats++;
            }
            if (a.term) fl_wrapped_env_reset(a.w, a.state, &a.rng, a.obs);
        }
        double mean = n * ps[k], sd = sqrt(n * ps[k] * (1.0 - ps[k]));
        if (fabs(repeats - mean) > 5.0 * sd + 0.5)
            fail_msg("p = %g: %d repeats in %d steps, expected %.0f +- %.0f", ps[k], repeats, n, mean, 5.0 * sd);
        inst_close(&a);
    }
}

static void test_noop_starts_range(void **unused) {
    (void)unused;
    inst_t a;
    inst_open(&a, &counter_env, "noop(5)", 7);
    int seen[6] = {0};
    const int resets = 3000;
    for (int i = 0; i < resets; i++) {
        fl_wrapped_env_reset(a.w, a.state, &a.rng, a.obs);
        const int32_t *o = a.obs;
        if (o[0] < 1 || o[0] > 5) fail_msg("reset %d: %d no-ops, expected 1..5", i, (int)o[0]);
        assert_int_equal(o[2], 0); /* no-ops are action 0 */
        assert_int_equal(fl_wrapped_env_noops(a.w, a.state), o[0]);
        seen[o[0]]++;
    }
    for (int k = 1; k <= 5; k++)
        if (seen[k] < resets / 5 * 7 / 10) fail_msg("%d no-ops seen %d times in %d resets", k, seen[k], resets);
    inst_close(&a);

    /* an episode that ends during the no-ops starts again */
    inst_t b;
    inst_open(&b, &counter_env, "noop(30)", 9);
    int max_t = 0;
    for (int i = 0; i < 500; i++) {
        fl_wrapped_env_reset(b.w, b.state, &b.rng, b.obs);
        int t = ((int32_t *)b.obs)[0];
        assert_true(t >= 0 && t <= 9);
        if (t > max_t) max_t = t;
    }
    assert_int_equal(max_t, 9);
    inst_close(&b);

    /* noop(0) takes none */
    inst_t c;
    inst_open(&c, &counter_env, "noop(0)", 9);
    assert_int_equal(((int32_t *)c.obs)[0], 0);
    assert_int_equal(fl_wrapped_env_noops(c.w, c.state), 0);
    inst_close(&c);
    inst_open(&c, &counter_env, "frameskip(2)", 9);
    assert_int_equal(fl_wrapped_env_noops(c.w, c.state), -1);
    inst_close(&c);
}

/* Every wrapper, alone and in a chain, passes steps through to the env: after a reset, k
 * agent steps move the inner counter by k times the frame skip (and no more: no-ops are
 * taken at reset only), the reward is the inner env's (summed over a skip), and the
 * inner termination at t == 10 reaches the agent. A wrapper whose step did nothing (the
 * env frozen) fails the first check. */
static void test_every_wrapper_steps_the_env(void **unused) {
    (void)unused;
    static const struct {
        const char *spec;
        int skip;
    } cases[] = {
        {"sticky(0)", 1},
        {"sticky(0.5)", 1},
        {"noop(0)", 1},
        {"noop(3)", 1},
        {"frameskip(2)", 2},
        {"frameskip(3, last)", 3},
        {"clipreward", 1},
        {"maxsteps(50)", 1},
        {"framestack(2)", 1},
        {"noop(3) frameskip(2) clipreward maxsteps(50) framestack(3)", 2},
        {"sticky(0.25) noop(30) frameskip(2) clipreward maxsteps(50) framestack(4)", 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int episode = 0; episode < 20; episode++) {
            inst_t a;
            inst_open(&a, &counter_env, cases[c].spec, 100 + (uint64_t)episode);
            const counter_state_t *in = fl_wrapped_env_inner_state(a.w, a.state);
            int t0 = in->t, steps = 0;
            if (t0 < 0 || t0 > 9) fail_msg("'%s': the episode starts at t = %d, expected 0..9", cases[c].spec, t0);
            while (!a.term && !a.trunc && steps < 100) {
                int before = in->t;
                inst_step(&a, steps % 4);
                steps++;
                int moved = in->t - before;
                int want = cases[c].skip < 10 - before ? cases[c].skip : 10 - before;
                if (moved != want)
                    fail_msg("'%s' step %d: the inner env moved %d steps (t %d -> %d), expected %d", cases[c].spec,
                             steps, moved, before, in->t, want);
                float r = 0.0f; /* the counter's reward is t: summed over the skip, clipped or not */
                for (int t = before + 1; t <= in->t; t++) r += (float)t;
                if (strstr(cases[c].spec, "clipreward")) r = 1.0f;
                if (a.reward != r) fail_msg("'%s' step %d: reward %g, expected %g", cases[c].spec, steps, a.reward, r);
            }
            if (!a.term || a.trunc || in->t != 10)
                fail_msg("'%s': after %d steps term %d trunc %d at t = %d, expected the env's own end at t = 10",
                         cases[c].spec, steps, a.term, a.trunc, in->t);
            inst_close(&a);
        }
    }
}

static void test_clipreward(void **unused) {
    (void)unused;
    inst_t a;
    inst_open(&a, &rewards_env, "clipreward", 1);
    const float want[5] = {-1.0f, 0.0f, 1.0f, 1.0f, -1.0f};
    for (int k = 0; k < 5; k++) {
        inst_step(&a, k);
        if (a.reward != want[k]) fail_msg("action %d: reward %g, expected %g", k, (double)a.reward, (double)want[k]);
        assert_true(*(float *)a.obs == reward_table[k]); /* the observation is untouched */
    }
    inst_close(&a);

    /* clipping applies to the summed reward of a skipped step */
    inst_t b;
    inst_open(&b, &rewards_env, "frameskip(4) clipreward", 1);
    inst_step(&b, 4); /* 4 * -0.0001 */
    assert_true(b.reward == -1.0f);
    inst_close(&b);
}

static void test_maxsteps_truncation_vs_termination(void **unused) {
    (void)unused;
    inst_t a;
    inst_open(&a, &counter_env, "maxsteps(5)", 1);
    assert_int_equal(fl_wrapped_env_info(a.w)->max_episode_steps, 5);
    for (int i = 1; i <= 5; i++) {
        inst_step(&a, 0);
        assert_int_equal(a.term, 0);
        assert_int_equal(a.trunc, i == 5);
    }
    fl_wrapped_env_reset(a.w, a.state, &a.rng, a.obs);
    for (int i = 1; i <= 5; i++) inst_step(&a, 0);
    assert_int_equal(a.trunc, 1); /* the counter restarts at reset */
    inst_close(&a);

    /* the limit and termination on the same step: terminated only */
    inst_t b;
    inst_open(&b, &counter_env, "maxsteps(10)", 1);
    for (int i = 1; i <= 10; i++) inst_step(&b, 0);
    assert_int_equal(b.term, 1);
    assert_int_equal(b.trunc, 0);
    inst_close(&b);

    /* the limit counts agent steps above a frame skip */
    inst_t c;
    inst_open(&c, &rewards_env, "maxsteps(3) frameskip(4)", 1);
    inst_step(&c, 1);
    inst_step(&c, 1);
    assert_int_equal(c.trunc, 0);
    inst_step(&c, 1);
    assert_int_equal(c.trunc, 1);
    inst_close(&c);
}

static void test_grayscale_values(void **unused) {
    (void)unused;
    inst_t a;
    inst_open(&a, &colors_env, "grayscale", 1);
    const fl_env_def_t *d = fl_wrapped_env_info(a.w);
    assert_int_equal(d->obs.dtype, FL_DTYPE_UINT8);
    assert_int_equal(d->obs.rank, 3);
    assert_int_equal(d->obs.shape[0], 1);
    assert_int_equal(d->obs.shape[1], 6);
    assert_int_equal(d->obs.shape[2], 1);
    assert_memory_equal(a.obs, colors_gray, 6);
    inst_step(&a, 0);
    assert_memory_equal(a.obs, colors_gray, 6);
    inst_close(&a);
}

static void test_resize_values(void **unused) {
    (void)unused;
    /* area 4x4 -> 2x2: means of 2x2 blocks, centers at 0.5 and 2.5 */
    inst_t a;
    inst_open(&a, &rgb4_env, "resize(2,2)", 1);
    const uint8_t want_a[2][2][3] = {{{26, 229, 7}, {50, 205, 7}}, {{106, 149, 7}, {130, 125, 7}}};
    assert_memory_equal(a.obs, want_a, sizeof want_a);
    inst_close(&a);

    /* area 4x4 -> 3x3: coverage weights (3/4,1/4), (1/2,1/2), (1/4,3/4): mean
     * coordinates 0.25, 1.5, 2.75, so R = 40 * {10/40, 60/40, 110/40} + 12 * {...} */
    inst_t b;
    inst_open(&b, &rgb4_env, "resize(3,3,area)", 1);
    const int ry[3] = {10, 60, 110}, rx[3] = {3, 18, 33};
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 3; x++) {
            const uint8_t *p = (const uint8_t *)b.obs + (y * 3 + x) * 3;
            int r = ry[y] + rx[x];
            if (p[0] != r || p[1] != 255 - r || p[2] != 7)
                fail_msg("area (%d,%d) = (%d,%d,%d), expected (%d,%d,7)", y, x, p[0], p[1], p[2], r, 255 - r);
        }
    inst_close(&b);

    /* bilinear 4x4 -> 3x3: sources at 1/6, 3/2, 17/6; R = 40 sy + 12 sx rounded */
    inst_t c;
    inst_open(&c, &rgb4_env, "resize(3,3,bilinear)", 1);
    const uint8_t want_r[3][3] = {{9, 25, 41}, {62, 78, 94}, {115, 131, 147}};
    const uint8_t want_g[3][3] = {{246, 230, 214}, {193, 177, 161}, {140, 124, 108}};
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 3; x++) {
            const uint8_t *p = (const uint8_t *)c.obs + (y * 3 + x) * 3;
            if (p[0] != want_r[y][x] || p[1] != want_g[y][x] || p[2] != 7)
                fail_msg("bilinear (%d,%d) = (%d,%d,%d), expected (%d,%d,7)", y, x, p[0], p[1], p[2], want_r[y][x],
                         want_g[y][x]);
        }
    inst_close(&c);

    /* identity size is exact; enlarging 4 -> 8 interpolates between neighbours */
    inst_t e;
    inst_open(&e, &rgb4_env, "resize(4,4)", 1);
    uint8_t img[48];
    rgb4_draw(0, img);
    assert_memory_equal(e.obs, img, sizeof img);
    inst_close(&e);
    inst_t u;
    inst_open(&u, &rgb4_env, "resize(1,8,bilinear)", 1);
    /* one row from rows at source y = 1.5 (R = 60 + 12 sx), sx = (x + 0.5)/2 - 0.5 clamped */
    const uint8_t want_u[8] = {60, 63, 69, 75, 81, 87, 93, 96};
    for (int x = 0; x < 8; x++) assert_int_equal(((uint8_t *)u.obs)[x * 3], want_u[x]);
    inst_close(&u);
}

static void test_chained_spaces(void **unused) {
    (void)unused;
    fl_err_t err;
    fl_err_init(&err);
    fl_wrapped_env_t *w = NULL;
    /* the written order does not matter: grayscale and resize always run under framestack */
    assert_int_equal(fl_wrapped_env_create(&rgb4_env,
                                           "sticky(0.25) frameskip(4,maxpool) framestack(4) maxsteps(27000) "
                                           "clipreward noop(30) grayscale resize(2,2)",
                                           &w, &err),
                     FL_OK);
    const fl_env_def_t *d = fl_wrapped_env_info(w);
    assert_int_equal(d->obs.dtype, FL_DTYPE_UINT8);
    assert_int_equal(d->obs.rank, 3);
    assert_int_equal(d->obs.shape[0], 2);
    assert_int_equal(d->obs.shape[1], 2);
    assert_int_equal(d->obs.shape[2], 4);
    assert_int_equal(d->num_actions, 2);
    assert_int_equal(d->max_episode_steps, 27000);
    assert_int_equal(fl_wrapped_env_obs_size(w), 16);
    assert_int_equal(d->state_size, fl_wrapped_env_state_size(w));
    assert_non_null(strstr(d->name, "rgb4["));
    fl_wrapped_env_destroy(w);

    assert_int_equal(fl_wrapped_env_create(&rgb4_env, "resize(3,2) grayscale", &w, &err), FL_OK);
    d = fl_wrapped_env_info(w);
    assert_int_equal(d->obs.shape[0], 3);
    assert_int_equal(d->obs.shape[1], 2);
    assert_int_equal(d->obs.shape[2], 1);
    fl_wrapped_env_destroy(w);

    assert_int_equal(fl_wrapped_env_create(&rgb4_env, "resize(3,5)", &w, &err), FL_OK);
    d = fl_wrapped_env_info(w);
    assert_int_equal(d->obs.shape[0], 3);
    assert_int_equal(d->obs.shape[1], 5);
    assert_int_equal(d->obs.shape[2], 3);
    fl_wrapped_env_destroy(w);

    assert_int_equal(fl_wrapped_env_create(&counter_env, "framestack(4) frameskip(2) noop(3)", &w, &err), FL_OK);
    d = fl_wrapped_env_info(w);
    assert_int_equal(d->obs.dtype, FL_DTYPE_INT32);
    assert_int_equal(d->obs.rank, 1);
    assert_int_equal(d->obs.shape[0], 12);
    assert_int_equal(fl_wrapped_env_obs_size(w), 48);
    fl_wrapped_env_destroy(w);
    fl_wrapped_env_destroy(NULL);
}

static void test_spec_errors(void **unused) {
    (void)unused;
    expect_spec_error(&counter_env, "frameskip(0)", "frameskip(0)", ">= 1");
    expect_spec_error(&counter_env, "frameskip(4,avg)", "frameskip(4,avg)", "maxpool");
    expect_spec_error(&counter_env, "bogus(3)", "bogus(3)", "known: sticky");
    expect_spec_error(&counter_env, "sticky(1.5)", "sticky(1.5)", "[0, 1]");
    expect_spec_error(&counter_env, "sticky", "sticky", "sticky(p)");
    expect_spec_error(&counter_env, "framestack(4", "framestack(4", "')'");
    expect_spec_error(&counter_env, "framestack(x)", "framestack(x)", "integer");
    expect_spec_error(&counter_env, "framestack(2) framestack(3)", "framestack(3)", "once");
    expect_spec_error(&counter_env, "clipreward(1)", "clipreward(1)", "no arguments");
    expect_spec_error(&counter_env, "maxsteps(-3)", "maxsteps(-3)", ">= 1");
    expect_spec_error(&counter_env, "noop(2,3)", "noop(2,3)", "noop(N)");
    expect_spec_error(&counter_env, "resize(84)", "resize(84)", "resize(h, w)");
    expect_spec_error(&rgb4_env, "resize(8,8,cubic)", "resize(8,8,cubic)", "bilinear");
    expect_spec_error(&counter_env, "grayscale", "grayscale", "uint8 (H,W,3)");
    expect_spec_error(&counter_env, "resize(2,2)", "resize(2,2)", "got int32 (3)");
    expect_spec_error(&rgb4_env, "resize(2,2) grayscale sticky(2)", "sticky(2)", NULL);
    expect_spec_error(&counter_env, "noop(3)x", "noop(3)x", "whitespace");
    expect_spec_error(&counter_env, "-", "-", "wrapper name");
    fl_err_t err;
    fl_wrapped_env_t *w;
    assert_int_equal(fl_wrapped_env_create(NULL, "", &w, &err), FL_INVALID_ARGUMENT);
    assert_null(w);
    /* whitespace inside the parentheses is fine */
    assert_int_equal(fl_wrapped_env_create(&counter_env, "  frameskip( 2 , last )\tnoop(1) ", &w, &err), FL_OK);
    fl_wrapped_env_destroy(w);
}

static void test_wrapvec_auto_reset(void **unused) {
    (void)unused;
    enum { N = 2 };
    fl_err_t err;
    fl_err_init(&err);
    fl_wrapped_env_t *w;
    assert_int_equal(fl_wrapped_env_create(&counter_env, "frameskip(4)", &w, &err), FL_OK);
    fl_wrapvec_t *v;
    assert_int_equal(fl_wrapvec_create(w, 0, 1, &v, &err), FL_INVALID_ARGUMENT);
    assert_null(v);
    assert_int_equal(fl_wrapvec_create(w, N, 1, &v, &err), FL_OK);
    assert_int_equal(fl_wrapvec_num_envs(v), N);
    assert_ptr_equal(fl_wrapvec_env(v), w);
    assert_null(fl_wrapvec_state(v, N));

    int32_t obs[N][3], fin[N][3];
    float rew[N];
    uint8_t te[N], tr[N];
    fl_episode_stats_t stats[N];
    int32_t act[N] = {1, 2};
    assert_int_equal(fl_wrapvec_step(v, act, obs, rew, te, tr, fin, stats, &err), FL_FAILED_PRECONDITION);
    fl_wrapvec_reset(v, obs);
    int32_t bad[N] = {1, 4};
    assert_int_equal(fl_wrapvec_step(v, bad, obs, rew, te, tr, fin, stats, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "env 1"));
    assert_int_equal(((counter_state_t *)fl_wrapvec_state(v, 0))->t, 0); /* nothing stepped */

    memset(fin, 0x55, sizeof fin);
    for (int s = 0; s < 2; s++) {
        assert_int_equal(fl_wrapvec_step(v, act, obs, rew, te, tr, fin, stats, &err), FL_OK);
        assert_int_equal(te[0] | tr[0] | te[1] | tr[1], 0);
        assert_int_equal(stats[0].length, 0);
    }
    assert_int_equal(fl_wrapvec_step(v, act, obs, rew, te, tr, fin, stats, &err), FL_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(te[i], 1);
        assert_int_equal(tr[i], 0);
        assert_true(rew[i] == 19.0f);
        int32_t last[3] = {10, 91, act[i]}, first[3] = {0, 100, 0};
        assert_i32(fin[i], last, 3);
        assert_i32(obs[i], first, 3);
        assert_int_equal(stats[i].length, 3);
        assert_true(stats[i].episode_return == 55.0);
    }
    fl_wrapvec_destroy(v);
    fl_wrapvec_destroy(NULL);
    fl_wrapped_env_destroy(w);
}

static void test_wrapvec_seeded_streams(void **unused) {
    (void)unused;
    enum { N = 3, STEPS = 200 };
    fl_err_t err;
    fl_wrapped_env_t *w;
    assert_int_equal(fl_wrapped_env_create(&counter_env, "sticky(0.5) noop(8) maxsteps(7)", &w, &err), FL_OK);
    fl_wrapvec_t *a, *b;
    assert_int_equal(fl_wrapvec_create(w, N, 99, &a, &err), FL_OK);
    assert_int_equal(fl_wrapvec_create(w, N, 99, &b, &err), FL_OK);
    int32_t oa[N][3], ob[N][3];
    float ra[N], rb[N];
    uint8_t ta[N], tb[N], ua[N], ub[N];
    fl_wrapvec_reset(a, oa);
    fl_wrapvec_reset(b, ob);
    assert_memory_equal(oa, ob, sizeof oa);
    int differ = 0, truncs = 0;
    for (int s = 0; s < STEPS; s++) {
        int32_t act[N];
        for (int i = 0; i < N; i++) act[i] = (s * 7 + i) % 4;
        assert_int_equal(fl_wrapvec_step(a, act, oa, ra, ta, ua, NULL, NULL, &err), FL_OK);
        assert_int_equal(fl_wrapvec_step(b, act, ob, rb, tb, ub, NULL, NULL, &err), FL_OK);
        assert_memory_equal(oa, ob, sizeof oa);
        assert_memory_equal(ta, tb, sizeof ta);
        assert_memory_equal(ua, ub, sizeof ua);
        for (int i = 0; i < N; i++) truncs += ua[i];
        if (memcmp(oa[0], oa[1], sizeof oa[0]) != 0) differ = 1;
    }
    assert_true(differ);     /* instances draw from different streams */
    assert_true(truncs > 0); /* maxsteps(7) applies inside the vector */
    fl_wrapvec_destroy(a);
    fl_wrapvec_destroy(b);
    fl_wrapped_env_destroy(w);
}

static void test_configure_reaches_inner(void **unused) {
    (void)unused;
    enum { N = 2 };
    fl_err_t err;
    fl_err_init(&err);
    fl_wrapped_env_t *w;
    assert_int_equal(fl_wrapped_env_create(&counter_cfg_env, "framestack(2)", &w, &err), FL_OK);
    fl_wrapvec_t *v;
    assert_int_equal(fl_wrapvec_create(w, N, 1, &v, &err), FL_OK);
    fl_env_options_t bad = {.args = "nonsense"};
    assert_int_equal(fl_wrapvec_configure(v, &bad, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "counter_cfg"));
    assert_non_null(strstr(err.msg, "nonsense"));
    fl_env_options_t good = {.args = "start=5"};
    assert_int_equal(fl_wrapvec_configure(v, &good, &err), FL_OK);
    int32_t obs[N][6];
    fl_wrapvec_reset(v, obs);
    int32_t want[6] = {5, 95, 0, 5, 95, 0};
    for (int i = 0; i < N; i++) assert_i32(obs[i], want, 6);
    assert_int_equal(fl_wrapvec_configure(v, &good, &err), FL_FAILED_PRECONDITION);
    fl_wrapvec_destroy(v);

    /* an env without configure accepts anything */
    fl_wrapped_env_t *w2;
    assert_int_equal(fl_wrapped_env_create(&counter_env, "", &w2, &err), FL_OK);
    counter_state_t st = {0, 0};
    assert_int_equal(fl_wrapped_env_configure(w2, &st, &bad, &err), FL_OK);
    fl_wrapped_env_destroy(w2);
    fl_wrapped_env_destroy(w);
}

/* ---- episodiclife on an env whose lives are declared ---------------------------------- */

typedef struct lives_state {
    int t, lives;
} lives_state_t;

static void lives_reset(void *state, fl_rng_t *rng, void *obs) {
    (void)rng;
    lives_state_t *s = state;
    s->t = 0;
    s->lives = 3;
    *(int32_t *)obs = 0;
}

static void lives_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    (void)rng, (void)action;
    lives_state_t *s = state;
    s->t++;
    if (s->t % 4 == 0) s->lives--;
    *(int32_t *)obs = s->t;
    *reward = 1.0f;
    *terminated = s->lives == 0;
}

static int lives_read(void *state) {
    return ((lives_state_t *)state)->lives;
}

static const fl_env_def_t lives_env = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "lives",
    .obs = {.dtype = FL_DTYPE_INT32, .rank = 1, .shape = {1}},
    .num_actions = 2,
    .state_size = sizeof(lives_state_t),
    .reset = lives_reset,
    .step = lives_step,
};

/* The wrapper takes an env's lives from what its family declared, and refuses an env
 * without: a lost life ends the agent's episode, the reset after it goes on with a no-op
 * step, and only the game's end starts a new game. */
static void test_episodiclife_declared_lives(void **unused) {
    (void)unused;
    fl_wrapped_env_t *w;
    fl_err_t err = {0};
    assert_null(fl_env_lives_of(&lives_env));
    assert_int_equal(fl_wrapped_env_create(&lives_env, "episodiclife", &w, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "expected an env with lives"));
    assert_int_equal(fl_env_declare_lives(lives_reset, lives_read), 0);
    assert_int_equal(fl_env_declare_lives(lives_reset, lives_read), 0); /* again: nothing new */
    assert_ptr_equal(fl_env_lives_of(&lives_env), lives_read);
    assert_null(fl_env_lives_of(&counter_env));
    assert_null(fl_env_lives_of(NULL));
    assert_int_equal(fl_wrapped_env_create(&lives_env, "episodiclife", &w, &err), FL_OK);
    void *st = calloc(1, fl_wrapped_env_state_size(w));
    assert_non_null(st);
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    int32_t obs = -1;
    float r;
    int term, trunc;
    const int starts[3] = {0, 5, 9}; /* t after each agent reset: a new game, then no-op steps */
    for (int life = 0; life < 3; life++) {
        fl_wrapped_env_reset(w, st, &rng, &obs);
        assert_int_equal(obs, starts[life]);
        do {
            fl_wrapped_env_step(w, st, &rng, 1, &obs, &r, &term, &trunc);
            assert_int_equal(trunc, 0);
            assert_int_equal(term, obs % 4 == 0);
        } while (!term);
        assert_int_equal(obs, 4 * (life + 1));
    }
    fl_wrapped_env_reset(w, st, &rng, &obs); /* the game is over: a new one */
    assert_int_equal(obs, 0);
    fl_wrapped_env_close(w, st);
    free(st);
    fl_wrapped_env_destroy(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_spec_is_identity),
        cmocka_unit_test(test_framestack_order_and_reset_fill),
        cmocka_unit_test(test_framestack_images_on_last_axis),
        cmocka_unit_test(test_frameskip_sum_and_maxpool),
        cmocka_unit_test(test_frameskip_termination_inside_skip),
        cmocka_unit_test(test_sticky_statistics),
        cmocka_unit_test(test_noop_starts_range),
        cmocka_unit_test(test_every_wrapper_steps_the_env),
        cmocka_unit_test(test_clipreward),
        cmocka_unit_test(test_maxsteps_truncation_vs_termination),
        cmocka_unit_test(test_grayscale_values),
        cmocka_unit_test(test_resize_values),
        cmocka_unit_test(test_chained_spaces),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_wrapvec_auto_reset),
        cmocka_unit_test(test_wrapvec_seeded_streams),
        cmocka_unit_test(test_configure_reaches_inner),
        cmocka_unit_test(test_episodiclife_declared_lives),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
