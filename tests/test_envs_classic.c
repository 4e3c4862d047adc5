/* Unit tests for the classic-control envs: MountainCar-v0 and Acrobot-v1, and the family's
 * registry rows (CartPole-v1 itself is tested in tests/test_envs.c).
 *
 * The dynamics are checked against independent double-precision transcriptions of
 * Gymnasium's published equations written here with the constants typed in (for Acrobot
 * a separate fourth-order Runge-Kutta step), against values the published environments
 * produce from fixed states, and at the boundaries: MountainCar's walls, speed limit and
 * goal, Acrobot's termination line, velocity limits and angle wrapping. Start states,
 * time limits (through fl_vecenv) and determinism are checked too. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/rng.h"
#include "envs/classic/classic.h"
#include "envs/core/env.h"
#include "envs/core/vecenv.h"
#include "envs/registry.h"

#define PI 3.14159265358979323846

/* ---- Independent references ----------------------------------------------------------- */

/* MountainCarEnv.step on (position, velocity). */
static void mc_ref_step(double s[2], int action) {
    const double force = 0.001, gravity = 0.0025, max_speed = 0.07;
    const double min_position = -1.2, max_position = 0.6;
    double v = s[1] + (action - 1) * force - gravity * cos(3.0 * s[0]);
    v = fmax(-max_speed, fmin(max_speed, v));
    double p = fmax(min_position, fmin(max_position, s[0] + v));
    if (p == min_position && v < 0.0) v = 0.0;
    s[0] = p;
    s[1] = v;
}

static int mc_ref_terminal(const double s[2]) {
    return s[0] >= 0.5 && s[1] >= 0.0;
}

/* Angular accelerations of the acrobot (Sutton & Barto's book equations) with
 * m1 = m2 = 1, l1 = 1, lc1 = lc2 = 0.5, I1 = I2 = 1, g = 9.8; x = (t1, t2, w1, w2). */
static void ac_ref_derivs(const double x[4], double torque, double dx[4]) {
    const double g = 9.8;
    double t1 = x[0], t2 = x[1], w1 = x[2], w2 = x[3];
    double c2 = cos(t2), s2 = sin(t2);
    double d1 = 1.0 * 0.25 + 1.0 * (1.0 + 0.25 + 2.0 * 1.0 * 0.5 * c2) + 1.0 + 1.0; /* 3.25 + c2 */
    double d2 = 1.0 * (0.25 + 1.0 * 0.5 * c2) + 1.0;                                /* 1.25 + c2/2 */
    double phi2 = 1.0 * 0.5 * g * cos(t1 + t2 - PI / 2.0);
    double phi1 = -1.0 * 1.0 * 0.5 * w2 * w2 * s2 - 2.0 * 1.0 * 1.0 * 0.5 * w2 * w1 * s2 +
                  (1.0 * 0.5 + 1.0 * 1.0) * g * cos(t1 - PI / 2.0) + phi2;
    double num = torque + (d2 / d1) * phi1 - 0.5 * w1 * w1 * s2 - phi2;
    double den = 0.25 + 1.0 - d2 * d2 / d1;
    double acc2 = num / den;
    double acc1 = -(d2 * acc2 + phi1) / d1;
    dx[0] = w1;
    dx[1] = w2;
    dx[2] = acc1;
    dx[3] = acc2;
}

/* One Runge-Kutta 4 step of length 0.2 without wrapping or clipping. */
static void ac_ref_integrate(double x[4], int action) {
    const double torque = (double)action - 1.0, h = 0.2;
    double k[4][4], tmp[4];
    ac_ref_derivs(x, torque, k[0]);
    for (int i = 0; i < 4; i++) tmp[i] = x[i] + 0.5 * h * k[0][i];
    ac_ref_derivs(tmp, torque, k[1]);
    for (int i = 0; i < 4; i++) tmp[i] = x[i] + 0.5 * h * k[1][i];
    ac_ref_derivs(tmp, torque, k[2]);
    for (int i = 0; i < 4; i++) tmp[i] = x[i] + h * k[2][i];
    ac_ref_derivs(tmp, torque, k[3]);
    for (int i = 0; i < 4; i++) x[i] += h * (k[0][i] + 2.0 * (k[1][i] + k[2][i]) + k[3][i]) / 6.0;
}

/* Angle into [-pi, pi) (differs from the env's loop only on the boundary and in the
 * last bits). */
static double ref_wrap(double a) {
    return a - 2.0 * PI * floor((a + PI) / (2.0 * PI));
}

static void ac_ref_step(double x[4], int action) {
    ac_ref_integrate(x, action);
    x[0] = ref_wrap(x[0]);
    x[1] = ref_wrap(x[1]);
    x[2] = fmax(-4.0 * PI, fmin(4.0 * PI, x[2]));
    x[3] = fmax(-9.0 * PI, fmin(9.0 * PI, x[3]));
}

static int ac_ref_terminal(const double x[4]) {
    return -cos(x[0]) - cos(x[1] + x[0]) > 1.0;
}

/* ---- Helpers -------------------------------------------------------------------------- */

static void assert_close(double got, double want, double tol, const char *what) {
    if (!(fabs(got - want) <= tol)) fail_msg("%s = %.17g, expected %.17g (tol %g)", what, got, want, tol);
}

static void assert_obs_close(const float *obs, const double *want, int n) {
    for (int k = 0; k < n; k++) {
        float w = (float)want[k];
        if (!(fabsf(obs[k] - w) <= 2e-7f * (1.0f + fabsf(w))))
            fail_msg("obs[%d] = %.9g, expected %.9g", k, (double)obs[k], (double)w);
    }
}

static void ac_obs_of(const double x[4], double o[6]) {
    o[0] = cos(x[0]);
    o[1] = sin(x[0]);
    o[2] = cos(x[1]);
    o[3] = sin(x[1]);
    o[4] = x[2];
    o[5] = x[3];
}

static void ac_set(fl_acrobot_state_t *st, const double x[4]) {
    st->theta1 = x[0];
    st->theta2 = x[1];
    st->dtheta1 = x[2];
    st->dtheta2 = x[3];
}

static void ac_get(const fl_acrobot_state_t *st, double x[4]) {
    x[0] = st->theta1;
    x[1] = st->theta2;
    x[2] = st->dtheta1;
    x[3] = st->dtheta2;
}

static void assert_ac_state(const fl_acrobot_state_t *st, const double x[4], double tol) {
    assert_close(st->theta1, x[0], tol, "theta1");
    assert_close(st->theta2, x[1], tol, "theta2");
    assert_close(st->dtheta1, x[2], tol, "dtheta1");
    assert_close(st->dtheta2, x[3], tol, "dtheta2");
}

static fl_vecenv_t *make(const fl_env_def_t *def, int n, uint64_t seed, int max_steps) {
    fl_vecenv_t *ve = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_vecenv_create(def, n, seed, max_steps, &ve, &err) != FL_OK) fail_msg("fl_vecenv_create: %s", err.msg);
    return ve;
}

/* ---- Definitions ---------------------------------------------------------------------- */

static void test_definitions(void **unused) {
    (void)unused;
    fl_err_t err;
    fl_err_init(&err);
    const fl_env_def_t *mc = &fl_env_mountaincar, *ac = &fl_env_acrobot;
    assert_int_equal(fl_env_validate(mc, &err), FL_OK);
    assert_int_equal(fl_env_validate(ac, &err), FL_OK);

    assert_string_equal(mc->name, "mountaincar");
    assert_int_equal(mc->obs.dtype, FL_DTYPE_FLOAT32);
    assert_int_equal(mc->obs.rank, 1);
    assert_int_equal(mc->obs.shape[0], 2);
    assert_int_equal(mc->num_actions, 3);
    assert_int_equal(mc->max_episode_steps, 200);
    assert_int_equal(mc->state_size, sizeof(fl_mountaincar_state_t));
    assert_int_equal(fl_env_obs_size(mc), 8);

    assert_string_equal(ac->name, "acrobot");
    assert_int_equal(ac->obs.dtype, FL_DTYPE_FLOAT32);
    assert_int_equal(ac->obs.rank, 1);
    assert_int_equal(ac->obs.shape[0], 6);
    assert_int_equal(ac->num_actions, 3);
    assert_int_equal(ac->max_episode_steps, 500);
    assert_int_equal(ac->state_size, sizeof(fl_acrobot_state_t));
    assert_int_equal(fl_env_obs_size(ac), 24);
}

/* ---- MountainCar ---------------------------------------------------------------------- */

static void mc_step(fl_mountaincar_state_t *st, int action, float obs[2], float *r, int *term) {
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    *r = 0.0f;
    *term = -1;
    fl_env_mountaincar.step(st, &rng, action, obs, r, term);
}

/* Values from Gymnasium's MountainCarEnv with state (-0.5, 0): pushing right gives
 * velocity 0.001 - 0.0025 cos(-1.5) = 0.0008231569958307428. */
static void test_mountaincar_known_values(void **unused) {
    (void)unused;
    fl_mountaincar_state_t st = {-0.5, 0.0};
    float obs[2], r;
    int term;
    mc_step(&st, 2, obs, &r, &term);
    assert_close(st.position, -0.49917684300416926, 1e-16, "position");
    assert_close(st.velocity, 0.0008231569958307428, 1e-18, "velocity");
    assert_true(obs[0] == -0.49917683005332947f);
    assert_true(obs[1] == 0.0008231570245698094f);
    assert_int_equal(term, 0);
    assert_true(r == -1.0f);

    st = (fl_mountaincar_state_t){-0.5, 0.0};
    mc_step(&st, 0, obs, &r, &term);
    assert_close(st.position, -0.5011768430041692, 1e-16, "position");
    assert_close(st.velocity, -0.0011768430041692573, 1e-18, "velocity");
}

static void test_mountaincar_matches_reference(void **unused) {
    (void)unused;
    fl_rng_t pol;
    fl_rng_init(&pol, 17);
    int steps = 0;
    for (int ep = 0; ep < 20; ep++) {
        double ref[2] = {fl_rng_uniform(&pol, -1.2, 0.5), fl_rng_uniform(&pol, -0.07, 0.07)};
        fl_mountaincar_state_t st = {ref[0], ref[1]};
        for (int t = 0; t < 100; t++) {
            int a = (int)fl_rng_below(&pol, 3);
            float obs[2], r;
            int term;
            mc_step(&st, a, obs, &r, &term);
            mc_ref_step(ref, a);
            steps++;
            assert_close(st.position, ref[0], 1e-13, "position");
            assert_close(st.velocity, ref[1], 1e-13, "velocity");
            assert_obs_close(obs, ref, 2);
            assert_int_equal(term, mc_ref_terminal(ref));
            assert_true(r == -1.0f);
            if (term) break;
        }
    }
    assert_true(steps > 1000);
}

static void test_mountaincar_boundaries(void **unused) {
    (void)unused;
    float obs[2], r;
    int term;

    /* Left wall: position clipped to -1.2 and the velocity zeroed. */
    fl_mountaincar_state_t st = {-1.19, -0.05};
    mc_step(&st, 0, obs, &r, &term);
    assert_true(st.position == -1.2);
    assert_true(st.velocity == 0.0);
    assert_true(obs[0] == (float)-1.2 && obs[1] == 0.0f);
    assert_int_equal(term, 0);
    assert_true(r == -1.0f);

    /* At the wall with the slope pushing right, the car leaves it. */
    st = (fl_mountaincar_state_t){-1.2, 0.0};
    mc_step(&st, 2, obs, &r, &term);
    double want_v = 0.001 - 0.0025 * cos(-3.6);
    assert_true(want_v > 0.0);
    assert_close(st.velocity, want_v, 1e-15, "velocity");
    assert_close(st.position, -1.2 + want_v, 1e-15, "position");

    /* Speed limit, both signs: at -pi/3 the slope adds 0.0025 to a rightward push. */
    st = (fl_mountaincar_state_t){-1.0, 0.069};
    mc_step(&st, 2, obs, &r, &term);
    assert_true(st.velocity == 0.07);
    assert_close(st.position, -0.93, 1e-15, "position");
    st = (fl_mountaincar_state_t){0.0, -0.069};
    mc_step(&st, 0, obs, &r, &term);
    assert_true(st.velocity == -0.07);
    assert_close(st.position, -0.07, 1e-15, "position");

    /* Right wall: clipped to 0.6, velocity kept, and that is the goal. */
    st = (fl_mountaincar_state_t){0.59, 0.05};
    mc_step(&st, 2, obs, &r, &term);
    assert_true(st.position == 0.6);
    assert_true(st.velocity > 0.04);
    assert_int_equal(term, 1);
    assert_true(r == -1.0f); /* -1 on the terminating step too */

    /* Goal: position >= 0.5 with velocity >= 0 ... */
    st = (fl_mountaincar_state_t){0.49, 0.012};
    mc_step(&st, 1, obs, &r, &term);
    assert_true(st.position >= 0.5 && st.velocity >= 0.0);
    assert_int_equal(term, 1);
    /* ... but not when still short of 0.5, */
    st = (fl_mountaincar_state_t){0.49, 0.009};
    mc_step(&st, 1, obs, &r, &term);
    assert_true(st.position < 0.5);
    assert_int_equal(term, 0);
    /* ... nor when past it but rolling back. */
    st = (fl_mountaincar_state_t){0.55, -0.001};
    mc_step(&st, 0, obs, &r, &term);
    assert_true(st.position >= 0.5 && st.velocity < 0.0);
    assert_int_equal(term, 0);
}

static void test_mountaincar_reset(void **unused) {
    (void)unused;
    enum { N = 64 };
    fl_vecenv_t *ve = make(&fl_env_mountaincar, N, 11, 0);
    float obs[N * 2];
    fl_vecenv_reset(ve, obs);
    double lo = 0.0, hi = -1.0;
    for (int i = 0; i < N; i++) {
        const fl_mountaincar_state_t *st = fl_vecenv_state(ve, i);
        if (!(st->position >= -0.6 && st->position < -0.4)) fail_msg("start position %g", st->position);
        assert_true(st->velocity == 0.0);
        assert_true(obs[2 * i] == (float)st->position);
        assert_true(obs[2 * i + 1] == 0.0f);
        lo = fmin(lo, st->position);
        hi = fmax(hi, st->position);
        /* one draw from the instance's stream */
        fl_rng_t r;
        fl_rng_init_stream(&r, 11, (uint64_t)i);
        assert_true(st->position == fl_rng_uniform(&r, -0.6, -0.4));
    }
    assert_true(lo < -0.55 && hi > -0.45); /* the range is covered, not a point */
    fl_vecenv_destroy(ve);
}

/* ---- Acrobot -------------------------------------------------------------------------- */

static void ac_step(fl_acrobot_state_t *st, int action, float obs[6], float *r, int *term) {
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    *r = 0.0f;
    *term = -1;
    fl_env_acrobot.step(st, &rng, action, obs, r, term);
}

/* States after one step of Gymnasium's AcrobotEnv from fixed float64 states. */
static void test_acrobot_known_values(void **unused) {
    (void)unused;
    static const struct {
        double from[4];
        int action;
        double to[4];
        float obs[6];
    } cases[] = {
        {{0.05, -0.03, 0.02, 0.01},
         2,
         {0.03396426807716706, 0.014028356136744108, -0.175464650251537, 0.4197156022652691},
         {0.9994232654571533f, 0.03395773842930794f, 0.9999015927314758f, 0.014027896337211132f, -0.17546464502811432f,
          0.41971561312675476f}},
        {{1.0, -0.5, 2.0, -3.0},
         0,
         {1.2894397753482252, -0.9914713039163976, 0.8666983673209543, -1.8961094578076934},
         {0.2776591181755066f, 0.9606796503067017f, 0.5474592447280884f, -0.8368323445320129f, 0.8666983842849731f,
          -1.8961094617843628f}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fl_acrobot_state_t st;
        ac_set(&st, cases[c].from);
        float obs[6], r;
        int term;
        ac_step(&st, cases[c].action, obs, &r, &term);
        assert_ac_state(&st, cases[c].to, 1e-13);
        for (int k = 0; k < 6; k++)
            if (fabsf(obs[k] - cases[c].obs[k]) > 1.2e-7f * (1.0f + fabsf(cases[c].obs[k])))
                fail_msg("case %zu obs[%d] = %.9g, expected %.9g", c, k, (double)obs[k], (double)cases[c].obs[k]);
        assert_int_equal(term, 0);
        assert_true(r == -1.0f);
    }

    /* Hanging straight down without torque stays down (up to the rounding of pi/2). */
    fl_acrobot_state_t st = {0};
    float obs[6], r;
    int term;
    ac_step(&st, 1, obs, &r, &term);
    assert_ac_state(&st, (double[4]){0.0, 0.0, 0.0, 0.0}, 1e-15);
    assert_true(obs[0] == 1.0f && obs[2] == 1.0f);
}

/* Along random trajectories, each step from the env's current state matches the
 * reference step from the same state, and a short free-running rollout stays with it. */
static void test_acrobot_matches_reference(void **unused) {
    (void)unused;
    fl_rng_t pol;
    fl_rng_init(&pol, 23);
    int steps = 0, wrapped = 0;
    for (int ep = 0; ep < 10; ep++) {
        double x[4] = {fl_rng_uniform(&pol, -PI, PI), fl_rng_uniform(&pol, -PI, PI), fl_rng_uniform(&pol, -5.0, 5.0),
                       fl_rng_uniform(&pol, -10.0, 10.0)};
        fl_acrobot_state_t st;
        ac_set(&st, x);
        for (int t = 0; t < 200; t++) {
            int a = (int)fl_rng_below(&pol, 3);
            double ref[4];
            ac_get(&st, ref);
            double before = ref[0];
            ac_ref_step(ref, a);
            float obs[6], r;
            int term;
            ac_step(&st, a, obs, &r, &term);
            steps++;
            if (fabs(ref[0] - before) > PI) wrapped++;
            assert_ac_state(&st, ref, 1e-12);
            double o[6];
            ac_obs_of(ref, o);
            assert_obs_close(obs, o, 6);
            assert_int_equal(term, ac_ref_terminal(ref));
            assert_true(r == (term ? 0.0f : -1.0f));
            if (st.theta1 < -PI || st.theta1 > PI || st.theta2 < -PI || st.theta2 > PI)
                fail_msg("angles (%g, %g) not wrapped", st.theta1, st.theta2);
        }
    }
    assert_int_equal(steps, 2000);
    assert_true(wrapped > 0);

    /* 20 free-running steps from a small start (no wrap, no clip, no chaos yet). */
    double ref[4] = {0.05, -0.08, 0.03, -0.02};
    fl_acrobot_state_t st;
    ac_set(&st, ref);
    for (int t = 0; t < 20; t++) {
        int a = t % 3;
        float obs[6], r;
        int term;
        ac_step(&st, a, obs, &r, &term);
        ac_ref_step(ref, a);
        assert_ac_state(&st, ref, 1e-11);
    }
}

static void test_acrobot_termination(void **unused) {
    (void)unused;
    float obs[6], r;
    int term;
    /* Nearly upright: terminal, reward 0. */
    fl_acrobot_state_t st = {PI - 0.1, 0.0, 0.0, 0.0};
    ac_step(&st, 1, obs, &r, &term);
    assert_int_equal(term, 1);
    assert_true(r == 0.0f);
    /* Link 1 horizontal, link 2 pointing up: height exactly 1 is not above the line. */
    st = (fl_acrobot_state_t){0.5, 0.0, 0.0, 0.0};
    ac_step(&st, 1, obs, &r, &term);
    assert_int_equal(term, 0);
    assert_true(r == -1.0f);

    /* Sweep across the line at 1: the env agrees with the reference on every state,
     * and both outcomes occur. */
    int yes = 0, no = 0;
    for (int i = 0; i <= 80; i++) {
        double x[4] = {1.8 + 0.01 * i, 0.3, 1.0, -0.5};
        ac_set(&st, x);
        ac_ref_step(x, 2);
        ac_step(&st, 2, obs, &r, &term);
        assert_int_equal(term, ac_ref_terminal(x));
        assert_true(r == (term ? 0.0f : -1.0f));
        if (term)
            yes++;
        else
            no++;
    }
    assert_true(yes > 0 && no > 0);
}

static void test_acrobot_velocity_clipping(void **unused) {
    (void)unused;
    float obs[6], r;
    int term;
    static const double starts[2][4] = {{0.0, 0.0, 13.0, 29.0}, {0.0, 0.0, -13.0, -29.0}};
    for (int c = 0; c < 2; c++) {
        double sign = c == 0 ? 1.0 : -1.0;
        double raw[4];
        memcpy(raw, starts[c], sizeof raw);
        ac_ref_integrate(raw, 1);
        assert_true(sign * raw[2] > 4.0 * PI && sign * raw[3] > 9.0 * PI); /* the limits bite */
        fl_acrobot_state_t st;
        ac_set(&st, starts[c]);
        ac_step(&st, 1, obs, &r, &term);
        assert_true(st.dtheta1 == sign * 4.0 * PI);
        assert_true(st.dtheta2 == sign * 9.0 * PI);
        assert_true(obs[4] == (float)(sign * 4.0 * PI));
        assert_true(obs[5] == (float)(sign * 9.0 * PI));
    }
    /* Inside the limits nothing is clipped. */
    double x[4] = {0.0, 0.0, 12.0, 27.0}, raw[4];
    memcpy(raw, x, sizeof raw);
    ac_ref_integrate(raw, 1);
    fl_acrobot_state_t st;
    ac_set(&st, x);
    ac_step(&st, 1, obs, &r, &term);
    if (fabs(raw[2]) < 4.0 * PI) assert_close(st.dtheta1, raw[2], 1e-12, "dtheta1");
    if (fabs(raw[3]) < 9.0 * PI) assert_close(st.dtheta2, raw[3], 1e-12, "dtheta2");
    assert_true(fabs(raw[2]) < 4.0 * PI || fabs(raw[3]) < 9.0 * PI);
}

static void test_acrobot_angle_wrapping(void **unused) {
    (void)unused;
    float obs[6], r;
    int term;
    static const double starts[][4] = {
        {3.1, -3.1, 3.0, -3.0},  /* theta1 passes +pi, theta2 passes -pi */
        {-3.1, 3.1, -3.0, 3.0},  /* and the other way round */
        {10.0, -10.0, 0.0, 0.0}, /* set from outside: wrapped more than once */
    };
    for (size_t c = 0; c < sizeof starts / sizeof starts[0]; c++) {
        double raw[4];
        memcpy(raw, starts[c], sizeof raw);
        ac_ref_integrate(raw, 1);
        assert_true(fabs(raw[0]) > PI && fabs(raw[1]) > PI); /* the wrap is exercised */
        fl_acrobot_state_t st;
        ac_set(&st, starts[c]);
        ac_step(&st, 1, obs, &r, &term);
        assert_true(st.theta1 >= -PI && st.theta1 <= PI);
        assert_true(st.theta2 >= -PI && st.theta2 <= PI);
        assert_close(st.theta1, ref_wrap(raw[0]), 1e-12, "theta1");
        assert_close(st.theta2, ref_wrap(raw[1]), 1e-12, "theta2");
        /* wrapping moves by whole turns only */
        double turns = (raw[0] - st.theta1) / (2.0 * PI);
        assert_close(turns, round(turns), 1e-12, "turns");
        assert_true(round(turns) != 0.0);
        assert_close(obs[0], cos(raw[0]), 1e-6, "cos theta1");
        assert_close(obs[1], sin(raw[0]), 1e-6, "sin theta1");
    }
}

/* Angles set from outside far beyond the range still come back wrapped (in one step). */
static void test_acrobot_far_angles(void **unused) {
    (void)unused;
    float obs[6], r;
    int term;
    fl_acrobot_state_t st = {1e300, -1e12, 0.0, 0.0};
    ac_step(&st, 1, obs, &r, &term);
    assert_true(st.theta1 >= -PI && st.theta1 <= PI);
    assert_true(st.theta2 >= -PI && st.theta2 <= PI);
    assert_true(st.dtheta1 >= -4.0 * PI && st.dtheta1 <= 4.0 * PI);
}

static void test_acrobot_reset(void **unused) {
    (void)unused;
    enum { N = 64 };
    fl_vecenv_t *ve = make(&fl_env_acrobot, N, 5, 0);
    float obs[N * 6];
    fl_vecenv_reset(ve, obs);
    double lo = 1.0, hi = -1.0;
    for (int i = 0; i < N; i++) {
        const fl_acrobot_state_t *st = fl_vecenv_state(ve, i);
        double x[4];
        ac_get(st, x);
        /* draws theta1, theta2, dtheta1, dtheta2 from the instance's stream, as float32 */
        fl_rng_t rr;
        fl_rng_init_stream(&rr, 5, (uint64_t)i);
        for (int k = 0; k < 4; k++) {
            if (!(x[k] >= -0.1 && x[k] <= 0.1)) fail_msg("env %d start[%d] = %g", i, k, x[k]);
            assert_true(x[k] == (double)(float)fl_rng_uniform(&rr, -0.1, 0.1));
            lo = fmin(lo, x[k]);
            hi = fmax(hi, x[k]);
        }
        double o[6];
        ac_obs_of(x, o);
        assert_obs_close(obs + 6 * i, o, 6);
        assert_true(obs[6 * i + 4] == (float)x[2] && obs[6 * i + 5] == (float)x[3]);
    }
    assert_true(lo < -0.09 && hi > 0.09);
    fl_vecenv_destroy(ve);
}

/* ---- Through fl_vecenv: time limits, termination, determinism ------------------------- */

/* With one fixed action neither env can end its episode, so every instance is truncated
 * at exactly the step limit with return -limit. */
static void check_truncation(const fl_env_def_t *def, int limit, int32_t action) {
    enum { N = 3, MAXOBS = 6 };
    size_t dim = (size_t)def->obs.shape[0];
    assert_true(dim <= MAXOBS && def->state_size <= sizeof(fl_acrobot_state_t));
    fl_vecenv_t *ve = make(def, N, 9, 0);
    assert_int_equal(fl_vecenv_max_episode_steps(ve), limit);
    float obs[N * MAXOBS], fin[N * MAXOBS], rew[N];
    uint8_t te[N], tr[N];
    fl_episode_stats_t stats[N];
    int32_t act[N] = {action, action, action};
    fl_vecenv_reset(ve, obs);
    for (int t = 1; t <= limit + 5; t++) {
        /* the last step of each episode, replayed on a copy of the state */
        unsigned char copy[N][sizeof(fl_acrobot_state_t)];
        for (int i = 0; i < N; i++) memcpy(copy[i], fl_vecenv_state(ve, i), def->state_size);
        assert_int_equal(fl_vecenv_step(ve, act, obs, rew, te, tr, fin, stats, NULL), FL_OK);
        for (int i = 0; i < N; i++) {
            assert_int_equal(te[i], 0);
            assert_true(rew[i] == -1.0f);
            if (t == limit) {
                assert_int_equal(tr[i], 1);
                assert_true(stats[i].episode_return == -(double)limit);
                assert_int_equal(stats[i].length, limit);
                assert_int_equal(fl_vecenv_elapsed(ve, i), 0);
                float want[MAXOBS], r;
                int term;
                fl_rng_t rng;
                fl_rng_init(&rng, 1);
                def->step(copy[i], &rng, action, want, &r, &term);
                assert_memory_equal(fin + i * dim, want, dim * sizeof(float));
                assert_memory_not_equal(fin + i * dim, obs + i * dim, dim * sizeof(float));
            } else {
                assert_int_equal(tr[i], 0);
                assert_int_equal(stats[i].length, 0);
                assert_int_equal(fl_vecenv_elapsed(ve, i), t % limit);
            }
        }
    }
    fl_vecenv_destroy(ve);
}

static void test_truncation_limits(void **unused) {
    (void)unused;
    check_truncation(&fl_env_mountaincar, 200, 1);
    check_truncation(&fl_env_acrobot, 500, 1);
}

/* Pushing along the velocity pumps energy into the car: it reaches the goal well within
 * 200 steps; the episode ends terminated (not truncated) with return -length. */
static void test_mountaincar_reaches_goal(void **unused) {
    (void)unused;
    enum { N = 4 };
    fl_vecenv_t *ve = make(&fl_env_mountaincar, N, 21, 0);
    float obs[N * 2], fin[N * 2], rew[N];
    uint8_t te[N], tr[N];
    fl_episode_stats_t stats[N];
    int32_t act[N];
    int64_t len[N] = {0};
    int done[N] = {0};
    fl_vecenv_reset(ve, obs);
    for (int t = 0; t < 200; t++) {
        for (int i = 0; i < N; i++) act[i] = obs[2 * i + 1] >= 0.0f ? 2 : 0;
        assert_int_equal(fl_vecenv_step(ve, act, obs, rew, te, tr, fin, stats, NULL), FL_OK);
        for (int i = 0; i < N; i++) {
            assert_true(rew[i] == -1.0f);
            assert_int_equal(tr[i], 0);
            len[i]++;
            if (te[i] && !done[i]) {
                done[i] = 1;
                assert_true(fin[2 * i] >= 0.5f && fin[2 * i + 1] >= 0.0f);
                assert_int_equal(stats[i].length, len[i]);
                assert_true(stats[i].episode_return == -(double)len[i]);
                assert_true(obs[2 * i] >= -0.6f && obs[2 * i] <= -0.4f && obs[2 * i + 1] == 0.0f);
            }
        }
    }
    for (int i = 0; i < N; i++) assert_true(done[i]);
    fl_vecenv_destroy(ve);
}

/* Pushing the elbow along its own velocity pumps energy into the acrobot: the tip rises
 * above the line within the limit; the terminating step pays 0, so the return is
 * -(length - 1). */
static void test_acrobot_swings_up(void **unused) {
    (void)unused;
    enum { N = 4 };
    fl_vecenv_t *ve = make(&fl_env_acrobot, N, 31, 0);
    float obs[N * 6], fin[N * 6], rew[N];
    uint8_t te[N], tr[N];
    fl_episode_stats_t stats[N];
    int32_t act[N];
    int64_t len[N] = {0};
    int done[N] = {0};
    fl_vecenv_reset(ve, obs);
    for (int t = 0; t < 500; t++) {
        for (int i = 0; i < N; i++) act[i] = obs[6 * i + 5] >= 0.0f ? 2 : 0;
        assert_int_equal(fl_vecenv_step(ve, act, obs, rew, te, tr, fin, stats, NULL), FL_OK);
        for (int i = 0; i < N; i++) {
            assert_int_equal(tr[i], 0);
            len[i]++;
            assert_true(rew[i] == (te[i] ? 0.0f : -1.0f));
            if (te[i] && !done[i]) {
                done[i] = 1;
                const float *f = fin + 6 * i; /* cos t1, sin t1, cos t2, sin t2 */
                double height = -f[0] - (f[0] * f[2] - f[1] * f[3]);
                assert_true(height > 1.0 - 1e-6);
                assert_int_equal(stats[i].length, len[i]);
                assert_true(stats[i].episode_return == -(double)(len[i] - 1));
            }
        }
    }
    for (int i = 0; i < N; i++) assert_true(done[i]);
    fl_vecenv_destroy(ve);
}

static void check_determinism(const fl_env_def_t *def) {
    enum { N = 4, T = 1500, MAXOBS = 6 };
    size_t ob = fl_env_obs_size(def);
    fl_vecenv_t *a = make(def, N, 77, 0), *b = make(def, N, 77, 0), *c = make(def, N, 78, 0);
    float oa[N * MAXOBS], obb[N * MAXOBS], oc[N * MAXOBS], fa[N * MAXOBS], fb[N * MAXOBS], ra[N], rb[N], rc[N];
    uint8_t ta[N], tb[N], tc[N], ua[N], ub[N], uc[N];
    fl_episode_stats_t sa[N], sb[N];
    int32_t act[N];
    fl_rng_t pol;
    fl_rng_init(&pol, 4);
    fl_vecenv_reset(a, oa);
    fl_vecenv_reset(b, obb);
    fl_vecenv_reset(c, oc);
    int differs = memcmp(oa, oc, N * ob) != 0, ended = 0;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < N; i++) act[i] = (int32_t)fl_rng_below(&pol, 3);
        assert_int_equal(fl_vecenv_step(a, act, oa, ra, ta, ua, fa, sa, NULL), FL_OK);
        assert_int_equal(fl_vecenv_step(b, act, obb, rb, tb, ub, fb, sb, NULL), FL_OK);
        assert_int_equal(fl_vecenv_step(c, act, oc, rc, tc, uc, NULL, NULL, NULL), FL_OK);
        assert_memory_equal(oa, obb, N * ob);
        assert_memory_equal(ra, rb, sizeof ra);
        assert_memory_equal(ta, tb, sizeof ta);
        assert_memory_equal(ua, ub, sizeof ua);
        for (int i = 0; i < N; i++) {
            if (ta[i] || ua[i]) {
                ended++;
                assert_memory_equal(fa + i * (ob / 4), fb + i * (ob / 4), ob);
                assert_true(sa[i].episode_return == sb[i].episode_return);
                assert_true(sa[i].length == sb[i].length);
            }
        }
        if (memcmp(oa, oc, N * ob) != 0) differs = 1;
    }
    assert_true(ended >= N); /* episodes ended, so resets were exercised */
    assert_true(differs);
    fl_vecenv_destroy(a);
    fl_vecenv_destroy(b);
    fl_vecenv_destroy(c);
}

static void test_determinism(void **unused) {
    (void)unused;
    check_determinism(&fl_env_mountaincar);
    check_determinism(&fl_env_acrobot);
}

/* ---- The family's registry rows ------------------------------------------------------ */

/* The family lists its three envs in order with their reward bounds, and the registry
 * answers for them: first in its listing, by name, with those bounds. */
static void test_family_rows(void **unused) {
    (void)unused;
    const fl_env_family_t *f = &fl_env_family_classic;
    assert_string_equal(f->name, "classic");
    assert_null(f->count);
    assert_null(f->at);
    assert_null(f->env_name);
    assert_null(f->find);
    const fl_env_def_t *want[] = {&fl_env_cartpole, &fl_env_mountaincar, &fl_env_acrobot};
    assert_int_equal(f->num_rows, 3);
    for (int i = 0; i < 3; i++) {
        fl_err_t err = {0};
        assert_ptr_equal(f->rows[i].def, want[i]);
        assert_true(f->rows[i].reward_bound == 1.0);
        assert_int_equal(fl_env_validate(want[i], &err), FL_OK);
        assert_ptr_equal(fl_env_at(i), want[i]);
        assert_ptr_equal(fl_env_find(want[i]->name), want[i]);
        assert_true(fl_env_reward_bound(want[i]->name) == f->rows[i].reward_bound);
    }
    /* Gymnasium's ids name the same envs; the episode's most is declared */
    const char *gym[] = {"CartPole-v1", "MountainCar-v0", "Acrobot-v1"};
    const double most[] = {500, 0, 0};
    for (int i = 0; i < 3; i++) {
        assert_string_equal(f->rows[i].gym_id, gym[i]);
        assert_ptr_equal(fl_env_find(gym[i]), want[i]);
        assert_true(fl_env_reward_bound(gym[i]) == 1.0);
        double m = -1;
        assert_int_equal(fl_env_return_max(want[i]->name, &m), 0);
        assert_true(m == most[i]);
        assert_int_equal(fl_env_return_max(gym[i], &m), 0);
    }
    assert_null(fl_env_find("cartpole-v1")); /* ids are exact, as Gymnasium's are */
    assert_null(fl_env_find("CartPole-v0"));
}

/* Random play never gives a step's reward beyond the row's bound. */
static void test_rewards_within_bounds(void **unused) {
    (void)unused;
    const fl_env_family_t *f = &fl_env_family_classic;
    for (int r = 0; r < f->num_rows; r++) {
        const fl_env_def_t *d = f->rows[r].def;
        fl_vecenv_t *ve;
        fl_err_t err = {0};
        assert_int_equal(fl_vecenv_create(d, 4, 7, 0, &ve, &err), FL_OK);
        float obs[4 * 8], rewards[4];
        uint8_t term[4], trunc[4];
        int32_t actions[4];
        fl_rng_t act;
        fl_rng_init(&act, 3);
        fl_vecenv_reset(ve, obs);
        for (int t = 0; t < 2000; t++) {
            for (int i = 0; i < 4; i++) actions[i] = (int32_t)fl_rng_below(&act, (uint64_t)d->num_actions);
            assert_int_equal(fl_vecenv_step(ve, actions, obs, rewards, term, trunc, NULL, NULL, &err), FL_OK);
            for (int i = 0; i < 4; i++) assert_true(fabs(rewards[i]) <= f->rows[r].reward_bound);
        }
        fl_vecenv_destroy(ve);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_definitions),
        cmocka_unit_test(test_mountaincar_known_values),
        cmocka_unit_test(test_mountaincar_matches_reference),
        cmocka_unit_test(test_mountaincar_boundaries),
        cmocka_unit_test(test_mountaincar_reset),
        cmocka_unit_test(test_acrobot_known_values),
        cmocka_unit_test(test_acrobot_matches_reference),
        cmocka_unit_test(test_acrobot_termination),
        cmocka_unit_test(test_acrobot_velocity_clipping),
        cmocka_unit_test(test_acrobot_angle_wrapping),
        cmocka_unit_test(test_acrobot_far_angles),
        cmocka_unit_test(test_acrobot_reset),
        cmocka_unit_test(test_truncation_limits),
        cmocka_unit_test(test_mountaincar_reaches_goal),
        cmocka_unit_test(test_acrobot_swings_up),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_family_rows),
        cmocka_unit_test(test_rewards_within_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
