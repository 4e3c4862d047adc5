/* Unit tests for envs: the env API, the registry (its mechanism on families made here,
 * and how it combines the built-in families), vecenv and CartPole-v1.
 *
 * CartPole's dynamics are checked against an independent double-precision transcription
 * of Gymnasium's equations with the constants typed in here, plus values known from the
 * published environment (from the zero state, pushing right gives x_dot = 0.19512196 and
 * theta_dot = -0.29268292). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/rng.h"
#include "envs/atari/atari.h"
#include "envs/classic/classic.h"
#include "envs/core/env.h"
#include "envs/core/family.h"
#include "envs/minatar/minatar.h"
#include "envs/registry.h"
#include "envs/core/vecenv.h"

/* ---- Independent reference ------------------------------------------------------------ */

/* One Euler step of the cart-pole equations (Gymnasium CartPoleEnv.step). */
static void ref_step(double s[4], int action) {
    const double gravity = 9.8, masscart = 1.0, masspole = 0.1, half_length = 0.5;
    const double force_mag = 10.0, tau = 0.02;
    const double total_mass = masscart + masspole;
    const double polemass_length = masspole * half_length;
    double x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
    double force = action == 1 ? force_mag : -force_mag;
    double c = cos(theta), sn = sin(theta);
    double temp = (force + polemass_length * theta_dot * theta_dot * sn) / total_mass;
    double thetaacc = (gravity * sn - c * temp) / (half_length * (4.0 / 3.0 - masspole * c * c / total_mass));
    double xacc = temp - polemass_length * thetaacc * c / total_mass;
    s[0] = x + tau * x_dot;
    s[1] = x_dot + tau * xacc;
    s[2] = theta + tau * theta_dot;
    s[3] = theta_dot + tau * thetaacc;
}

static int ref_terminal(const double s[4]) {
    const double theta_threshold = 12.0 * 2.0 * 3.14159265358979323846 / 360.0;
    return s[0] < -2.4 || s[0] > 2.4 || s[2] < -theta_threshold || s[2] > theta_threshold;
}

static void set_state(fl_cartpole_state_t *st, const double s[4]) {
    st->x = s[0];
    st->x_dot = s[1];
    st->theta = s[2];
    st->theta_dot = s[3];
}

static void assert_obs_matches(const float *obs, const double s[4]) {
    for (int k = 0; k < 4; k++) {
        float want = (float)s[k];
        if (fabsf(obs[k] - want) > 1e-6f * (1.0f + fabsf(want)))
            fail_msg("obs[%d] = %.9g, expected %.9g", k, (double)obs[k], (double)want);
    }
}

static void assert_in_start_range(const float *obs) {
    for (int k = 0; k < 4; k++)
        if (!(obs[k] >= -0.05f && obs[k] <= 0.05f))
            fail_msg("reset obs[%d] = %g outside [-0.05, 0.05]", k, (double)obs[k]);
}

/* ---- API and registry ----------------------------------------------------------------- */

static void test_registry(void **unused) {
    (void)unused;
    const fl_env_def_t *def = fl_env_find("cartpole");
    assert_ptr_equal(def, &fl_env_cartpole);
    assert_null(fl_env_find("CartPole"));
    assert_null(fl_env_find(""));
    assert_null(fl_env_find(NULL));

    int found = 0;
    assert_true(fl_env_count() >= 1);
    for (int i = 0; i < fl_env_count(); i++) {
        const fl_env_def_t *d = fl_env_at(i);
        assert_non_null(d);
        assert_int_equal(fl_env_validate(d, NULL), FL_OK);
        assert_ptr_equal(fl_env_find(d->name), d);
        if (d == &fl_env_cartpole) found++;
    }
    assert_int_equal(found, 1);
    assert_null(fl_env_at(-1));
    assert_null(fl_env_at(fl_env_count()));

    fl_err_t err;
    fl_err_init(&err);
    const fl_env_def_t *out = &fl_env_cartpole;
    assert_int_equal(fl_env_lookup("pong", &out, &err), FL_NOT_FOUND);
    assert_null(out);
    assert_non_null(strstr(err.msg, "'pong'"));
    if (fl_atari_available()) {
        assert_non_null(strstr(err.msg, "fleet's name for it is 'atari-pong'"));
    } else {
        assert_non_null(strstr(err.msg, "cartpole"));
        assert_null(strstr(err.msg, "did you mean")); /* nothing is close to "pong" */
    }
    /* A typo gets the closest name. */
    assert_int_equal(fl_env_lookup("minatar-breakuot", &out, &err), FL_NOT_FOUND);
    assert_non_null(strstr(err.msg, "did you mean 'minatar-breakout'?"));
    assert_int_equal(fl_env_lookup("cartpol", &out, &err), FL_NOT_FOUND);
    assert_non_null(strstr(err.msg, "did you mean 'cartpole'?"));
    assert_int_equal(fl_env_lookup("cartpole", &out, &err), FL_OK);
    assert_ptr_equal(out, &fl_env_cartpole);
}

/* The registry lists the families in order, classic, MinAtar, Atari, each family's
 * listing whole: its fixed rows, then what it finds at run time. */
static void test_registry_combines_families(void **unused) {
    (void)unused;
    const fl_env_family_t *fams[] = {&fl_env_family_classic, &fl_env_family_minatar, &fl_env_family_atari};
    int i = 0;
    for (int f = 0; f < 3; f++) {
        for (int r = 0; r < fams[f]->num_rows; r++, i++) assert_ptr_equal(fl_env_at(i), fams[f]->rows[r].def);
        int listed = fams[f]->count ? fams[f]->count() : 0;
        for (int k = 0; k < listed; k++, i++) assert_ptr_equal(fl_env_at(i), fams[f]->at(k));
    }
    assert_int_equal(i, fl_env_count());
    assert_int_equal(fl_env_families_count(fams, 3), fl_env_count());
}

/* ---- The registry's mechanism (envs/core/family.h) on families made here -------------- */

static fl_env_def_t g_defs[6]; /* alpha, beta, gamma (fixed); dyn-one, dyn-two; dyn-one-x (found only) */
static const char *const g_def_names[6] = {"alpha", "beta", "gamma", "dyn-one", "dyn-two", "dyn-one-x"};

static int dyn_count(void) {
    return 2;
}
static const fl_env_def_t *dyn_at(int i) {
    return i >= 0 && i < 2 ? &g_defs[3 + i] : NULL;
}
static int dyn_name(int i, char *buf, size_t len) {
    if (i < 0 || i >= 2) return -1;
    snprintf(buf, len, "%s", g_def_names[3 + i]);
    return 0;
}
static const fl_env_def_t *dyn_find(const char *name) {
    for (int i = 3; i < 6; i++)
        if (strcmp(name, g_def_names[i]) == 0) return &g_defs[i];
    return NULL;
}

static void test_family_mechanism(void **unused) {
    (void)unused;
    for (int i = 0; i < 6; i++) {
        g_defs[i] = fl_env_cartpole;
        g_defs[i].name = g_def_names[i];
    }
    const fl_env_row_t rows_a[] = {{.def = &g_defs[0], .reward_bound = 2.0}, {.def = &g_defs[1], .reward_bound = 0.5}},
                       rows_b[] = {{.def = &g_defs[2], .reward_bound = 3.0}};
    const fl_env_family_t a = {.name = "a", .rows = rows_a, .num_rows = 2};
    const fl_env_family_t b = {.name = "b", .rows = rows_b, .num_rows = 1};
    const fl_env_family_t d = {.name = "d", .count = dyn_count, .at = dyn_at, .env_name = dyn_name, .find = dyn_find};
    const fl_env_family_t *fams[] = {&a, &d, &b};
    /* Each family's listing whole, family after family: a's rows, d's entries, b's rows. */
    const int order[] = {0, 1, 3, 4, 2};
    assert_int_equal(fl_env_families_count(fams, 3), 5);
    for (int i = 0; i < 5; i++) assert_ptr_equal(fl_env_families_at(fams, 3, i), &g_defs[order[i]]);
    assert_null(fl_env_families_at(fams, 3, -1));
    assert_null(fl_env_families_at(fams, 3, 5));
    for (int i = 0; i < 6; i++) assert_ptr_equal(fl_env_families_find(fams, 3, g_def_names[i]), &g_defs[i]);
    assert_null(fl_env_families_find(fams, 3, "delta"));
    assert_null(fl_env_families_find(fams, 3, NULL));
    assert_true(fl_env_families_reward_bound(fams, 3, "alpha") == 2.0);
    assert_true(fl_env_families_reward_bound(fams, 3, "beta") == 0.5);
    assert_true(fl_env_families_reward_bound(fams, 3, "gamma") == 3.0);
    assert_true(fl_env_families_reward_bound(fams, 3, "dyn-one") == 0.0); /* found at run time: none */
    assert_true(fl_env_families_reward_bound(fams, 3, "alpha-v1") == 0.0);
    assert_true(fl_env_families_reward_bound(fams, 3, NULL) == 0.0);

    fl_err_t err;
    fl_err_init(&err);
    const fl_env_def_t *out = &g_defs[0];
    assert_int_equal(fl_env_families_lookup(fams, 3, "dyn-onee", &out, &err), FL_NOT_FOUND);
    assert_null(out);
    /* The fixed rows are listed, the dynamic families counted; every name, listed or found
     * at run time, may be suggested. */
    assert_string_equal(err.msg,
                        "unknown env 'dyn-onee' (known: alpha, beta, gamma, and 2 envs of the d family: "
                        "dyn-<game>; `fleet env list` lists them all); did you mean 'dyn-one'?");
    assert_int_equal(fl_env_families_lookup(fams, 3, "betta", &out, &err), FL_NOT_FOUND);
    assert_string_equal(err.msg,
                        "unknown env 'betta' (known: alpha, beta, gamma, and 2 envs of the d family: "
                        "dyn-<game>; `fleet env list` lists them all); did you mean 'beta'?");
    assert_int_equal(fl_env_families_lookup(fams, 3, "dyn-one-x", &out, &err), FL_OK);
    assert_ptr_equal(out, &g_defs[5]);
    /* No family: nothing is found, nothing is known. */
    assert_int_equal(fl_env_families_count(fams, 0), 0);
    assert_null(fl_env_families_at(fams, 0, 0));
    assert_int_equal(fl_env_families_lookup(fams, 0, "alpha", &out, &err), FL_NOT_FOUND);
    assert_string_equal(err.msg, "unknown env 'alpha' (no env is registered)");
}

static void test_cartpole_definition(void **unused) {
    (void)unused;
    const fl_env_def_t *d = &fl_env_cartpole;
    assert_int_equal(d->abi_version, FL_ENV_ABI_VERSION);
    assert_string_equal(d->name, "cartpole");
    assert_int_equal(d->obs.dtype, FL_DTYPE_FLOAT32);
    assert_int_equal(d->obs.rank, 1);
    assert_int_equal(d->obs.shape[0], 4);
    assert_int_equal(d->num_actions, 2);
    assert_int_equal(d->max_episode_steps, 500);
    assert_int_equal(d->state_size, sizeof(fl_cartpole_state_t));
    assert_int_equal(fl_env_obs_size(d), 16);
    assert_int_equal(fl_env_obs_count(d), 4);
}

static void test_validate(void **unused) {
    (void)unused;
    fl_err_t err;
    fl_err_init(&err);
    fl_env_def_t d = fl_env_cartpole;
    assert_int_equal(fl_env_validate(&d, &err), FL_OK);

    d.abi_version = FL_ENV_ABI_VERSION + 1;
    assert_int_equal(fl_env_validate(&d, &err), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "abi_version"));

    d = fl_env_cartpole;
    d.num_actions = 0;
    assert_int_equal(fl_env_validate(&d, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "num_actions"));

    d = fl_env_cartpole;
    d.obs.rank = 5;
    assert_int_equal(fl_env_validate(&d, &err), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_env_obs_size(&d), 0);

    d = fl_env_cartpole;
    d.obs.shape[0] = 0;
    assert_int_equal(fl_env_validate(&d, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "obs_shape[0]"));

    d = fl_env_cartpole;
    d.obs.dtype = FL_DTYPE_INVALID;
    assert_int_equal(fl_env_validate(&d, &err), FL_INVALID_ARGUMENT);

    d = fl_env_cartpole;
    d.step = NULL;
    assert_int_equal(fl_env_validate(&d, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "step"));

    d = fl_env_cartpole;
    d.max_episode_steps = -1;
    assert_int_equal(fl_env_validate(&d, &err), FL_INVALID_ARGUMENT);

    /* A MinAtar-shaped uint8 observation: 10 x 10 x 4 bytes. */
    d = fl_env_cartpole;
    d.obs.dtype = FL_DTYPE_UINT8;
    d.obs.rank = 3;
    d.obs.shape[0] = 10;
    d.obs.shape[1] = 10;
    d.obs.shape[2] = 4;
    assert_int_equal(fl_env_validate(&d, &err), FL_OK);
    assert_int_equal(fl_env_obs_size(&d), 400);

    assert_int_equal(fl_env_validate(NULL, &err), FL_INVALID_ARGUMENT);
}

static void test_inline_rng_matches_common(void **unused) {
    (void)unused;
    fl_rng_t a, b;
    fl_rng_init_stream(&a, 1234, 7);
    b = a;
    for (int i = 0; i < 1000; i++) {
        switch (i % 5) {
        case 0: assert_true(fl_env_rng_u64(&a) == fl_rng_u64(&b)); break;
        case 1: assert_true(fl_env_rng_double(&a) == fl_rng_double(&b)); break;
        case 2: assert_true(fl_env_rng_float(&a) == fl_rng_float(&b)); break;
        case 3: assert_true(fl_env_rng_uniform(&a, -0.05, 0.05) == fl_rng_uniform(&b, -0.05, 0.05)); break;
        default: assert_true(fl_env_rng_below(&a, 18) == fl_rng_below(&b, 18)); break;
        }
    }
    assert_memory_equal(a.s, b.s, sizeof a.s);
}

/* ---- CartPole dynamics ----------------------------------------------------------------- */

static void test_cartpole_known_values(void **unused) {
    (void)unused;
    fl_cartpole_state_t st = {0};
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    float obs[4], r = 0.0f;
    int term = -1;
    fl_env_cartpole.step(&st, &rng, 1, obs, &r, &term);
    assert_true(obs[0] == 0.0f);
    assert_float_equal(obs[1], 0.19512196f, 1e-7);
    assert_true(obs[2] == 0.0f);
    assert_float_equal(obs[3], -0.29268292f, 1e-7);
    assert_int_equal(term, 0);
    assert_true(r == 1.0f);

    fl_cartpole_state_t st2 = {0};
    fl_env_cartpole.step(&st2, &rng, 0, obs, &r, &term);
    assert_float_equal(obs[1], -0.19512196f, 1e-7);
    assert_float_equal(obs[3], 0.29268292f, 1e-7);
}

static void test_cartpole_matches_reference(void **unused) {
    (void)unused;
    const double start[4] = {0.03, -0.02, 0.04, 0.01};
    const int actions[12] = {1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 0};
    double ref[4];
    memcpy(ref, start, sizeof ref);
    fl_cartpole_state_t st;
    set_state(&st, start);
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    for (int t = 0; t < 12; t++) {
        float obs[4], r = 0.0f;
        int term = -1;
        fl_env_cartpole.step(&st, &rng, actions[t], obs, &r, &term);
        ref_step(ref, actions[t]);
        assert_obs_matches(obs, ref);
        assert_float_equal(st.x, ref[0], 1e-12);
        assert_float_equal(st.x_dot, ref[1], 1e-12);
        assert_float_equal(st.theta, ref[2], 1e-12);
        assert_float_equal(st.theta_dot, ref[3], 1e-12);
        assert_int_equal(term, ref_terminal(ref));
        assert_int_equal(term, 0);
        assert_true(r == 1.0f);
    }
}

/* Steps once from state s with action a; checks terminated against the expectation. */
static void check_termination(const double s[4], int action, int expect_terminal) {
    fl_cartpole_state_t st;
    set_state(&st, s);
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    float obs[4], r = 0.0f;
    int term = -1;
    fl_env_cartpole.step(&st, &rng, action, obs, &r, &term);
    double ref[4];
    memcpy(ref, s, sizeof ref);
    ref_step(ref, action);
    assert_obs_matches(obs, ref);
    assert_int_equal(ref_terminal(ref), expect_terminal);
    assert_int_equal(term, expect_terminal);
    assert_true(r == 1.0f); /* reward 1 on the terminating step too */
}

static void test_cartpole_termination(void **unused) {
    (void)unused;
    /* x crosses 2.4 (x' = x + 0.02 * x_dot) */
    check_termination((double[4]){2.39, 1.0, 0.0, 0.0}, 1, 1);
    check_termination((double[4]){-2.39, -1.0, 0.0, 0.0}, 0, 1);
    check_termination((double[4]){2.39, 0.4, 0.0, 0.0}, 1, 0); /* 2.398 */
    check_termination((double[4]){-2.39, -0.4, 0.0, 0.0}, 0, 0);
    /* theta crosses 12 degrees = 0.20944 rad */
    check_termination((double[4]){0.0, 0.0, 0.205, 0.5}, 1, 1); /* 0.215 */
    check_termination((double[4]){0.0, 0.0, -0.205, -0.5}, 0, 1);
    check_termination((double[4]){0.0, 0.0, 0.205, 0.2}, 1, 0); /* 0.209 < 0.20944 */
    check_termination((double[4]){0.0, 0.0, -0.205, -0.2}, 0, 0);
}

/* ---- vecenv ----------------------------------------------------------------------------- */

static fl_vecenv_t *make_cartpole(int n, uint64_t seed, int max_steps) {
    fl_vecenv_t *ve = NULL;
    fl_err_t err;
    fl_err_init(&err);
    fl_status s = fl_vecenv_create(&fl_env_cartpole, n, seed, max_steps, &ve, &err);
    if (s != FL_OK) fail_msg("fl_vecenv_create: %s", err.msg);
    return ve;
}

static void test_vecenv_create_errors(void **unused) {
    (void)unused;
    fl_vecenv_t *ve = (fl_vecenv_t *)&ve;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_vecenv_create(&fl_env_cartpole, 0, 1, 0, &ve, &err), FL_INVALID_ARGUMENT);
    assert_null(ve);
    assert_non_null(strstr(err.msg, "num_envs"));
    assert_int_equal(fl_vecenv_create(&fl_env_cartpole, 2, 1, -3, &ve, &err), FL_INVALID_ARGUMENT);
    fl_env_def_t bad = fl_env_cartpole;
    bad.abi_version = 99;
    assert_int_equal(fl_vecenv_create(&bad, 2, 1, 0, &ve, &err), FL_FAILED_PRECONDITION);
    assert_null(ve);
    fl_vecenv_destroy(NULL);

    ve = make_cartpole(3, 5, 0);
    assert_int_equal(fl_vecenv_num_envs(ve), 3);
    assert_int_equal(fl_vecenv_obs_size(ve), 16);
    assert_int_equal(fl_vecenv_max_episode_steps(ve), 500);
    assert_ptr_equal(fl_vecenv_def(ve), &fl_env_cartpole);
    assert_null(fl_vecenv_state(ve, 3));
    /* stepping before the first reset is refused */
    int32_t a[3] = {0, 1, 0};
    float obs[12], rew[3];
    uint8_t te[3], tr[3];
    assert_int_equal(fl_vecenv_step(ve, a, obs, rew, te, tr, NULL, NULL, &err), FL_FAILED_PRECONDITION);
    fl_vecenv_destroy(ve);

    ve = make_cartpole(1, 5, 25);
    assert_int_equal(fl_vecenv_max_episode_steps(ve), 25);
    fl_vecenv_destroy(ve);
}

static void test_vecenv_reset_range_and_streams(void **unused) {
    (void)unused;
    enum { N = 8 };
    fl_vecenv_t *a = make_cartpole(N, 42, 0), *b = make_cartpole(N, 42, 0), *c = make_cartpole(N, 43, 0);
    float oa[N * 4], ob[N * 4], oc[N * 4];
    fl_vecenv_reset(a, oa);
    fl_vecenv_reset(b, ob);
    fl_vecenv_reset(c, oc);
    assert_memory_equal(oa, ob, sizeof oa);
    for (int i = 0; i < N; i++) {
        assert_in_start_range(oa + 4 * i);
        const fl_cartpole_state_t *st = fl_vecenv_state(a, i);
        assert_obs_matches(oa + 4 * i, (double[4]){st->x, st->x_dot, st->theta, st->theta_dot});
        for (int j = 0; j < i; j++)
            if (memcmp(oa + 4 * i, oa + 4 * j, 16) == 0) fail_msg("envs %d and %d start identically", i, j);
        if (memcmp(oa + 4 * i, oc + 4 * i, 16) == 0) fail_msg("env %d starts identically under seeds 42, 43", i);
    }
    /* instance i draws from fl_rng_init_stream(seed, i) in the order x, x_dot, theta, theta_dot */
    fl_rng_t r;
    fl_rng_init_stream(&r, 42, 5);
    for (int k = 0; k < 4; k++) assert_true(oa[4 * 5 + k] == (float)fl_rng_uniform(&r, -0.05, 0.05));
    fl_vecenv_destroy(a);
    fl_vecenv_destroy(b);
    fl_vecenv_destroy(c);
}

static void test_vecenv_determinism(void **unused) {
    (void)unused;
    enum { N = 4, T = 3000 };
    fl_vecenv_t *a = make_cartpole(N, 7, 0), *b = make_cartpole(N, 7, 0);
    float oa[N * 4], ob[N * 4], fa[N * 4], fb[N * 4], ra[N], rb[N];
    uint8_t ta[N], tb[N], ua[N], ub[N];
    fl_episode_stats_t sa[N], sb[N];
    int32_t act[N];
    fl_rng_t pol;
    fl_rng_init(&pol, 99);
    fl_vecenv_reset(a, oa);
    fl_vecenv_reset(b, ob);
    int episodes = 0;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < N; i++) act[i] = (int32_t)fl_rng_below(&pol, 2);
        assert_int_equal(fl_vecenv_step(a, act, oa, ra, ta, ua, fa, sa, NULL), FL_OK);
        assert_int_equal(fl_vecenv_step(b, act, ob, rb, tb, ub, fb, sb, NULL), FL_OK);
        assert_memory_equal(oa, ob, sizeof oa);
        assert_memory_equal(ra, rb, sizeof ra);
        assert_memory_equal(ta, tb, sizeof ta);
        assert_memory_equal(ua, ub, sizeof ua);
        for (int i = 0; i < N; i++) {
            if (ta[i] || ua[i]) {
                episodes++;
                assert_memory_equal(fa + 4 * i, fb + 4 * i, 16);
                assert_true(sa[i].episode_return == sb[i].episode_return);
                assert_true(sa[i].length == sb[i].length);
            }
        }
    }
    assert_true(episodes > 10); /* random play ends episodes, so resets were exercised */
    fl_vecenv_destroy(a);
    fl_vecenv_destroy(b);
}

/* Random play: rewards are 1, every episode's stats equal its counted length, the
 * final obs of a terminated episode is terminal, and the next obs is a fresh start. */
static void test_vecenv_episode_stats(void **unused) {
    (void)unused;
    enum { N = 5, T = 2000 };
    fl_vecenv_t *ve = make_cartpole(N, 3, 0);
    float obs[N * 4], prev[N * 4], fin[N * 4], rew[N];
    uint8_t te[N], tr[N];
    fl_episode_stats_t st[N];
    int32_t act[N];
    int64_t len[N] = {0};
    fl_rng_t pol;
    fl_rng_init(&pol, 5);
    fl_vecenv_reset(ve, obs);
    int ended = 0;
    for (int t = 0; t < T; t++) {
        memcpy(prev, obs, sizeof obs);
        double before[N][4];
        for (int i = 0; i < N; i++) {
            const fl_cartpole_state_t *s = fl_vecenv_state(ve, i);
            before[i][0] = s->x, before[i][1] = s->x_dot, before[i][2] = s->theta, before[i][3] = s->theta_dot;
            act[i] = (int32_t)fl_rng_below(&pol, 2);
        }
        assert_int_equal(fl_vecenv_step(ve, act, obs, rew, te, tr, fin, st, NULL), FL_OK);
        for (int i = 0; i < N; i++) {
            len[i]++;
            assert_true(rew[i] == 1.0f);
            assert_int_equal(tr[i], 0); /* random play never lasts 500 steps */
            ref_step(before[i], act[i]);
            if (te[i]) {
                ended++;
                assert_int_equal(ref_terminal(before[i]), 1);
                assert_obs_matches(fin + 4 * i, before[i]);
                assert_in_start_range(obs + 4 * i);
                assert_int_equal(st[i].length, len[i]);
                assert_true(st[i].episode_return == (double)len[i]);
                assert_int_equal(fl_vecenv_elapsed(ve, i), 0);
                len[i] = 0;
            } else {
                assert_int_equal(ref_terminal(before[i]), 0);
                assert_obs_matches(obs + 4 * i, before[i]);
                assert_int_equal(st[i].length, 0);
                assert_true(st[i].episode_return == 0.0);
                assert_int_equal(fl_vecenv_elapsed(ve, i), len[i]);
            }
        }
    }
    assert_true(ended > 20);
    fl_vecenv_destroy(ve);
}

/* Pins env 1's state before every step so it never terminates; env 0 plays freely. */
static void test_vecenv_truncation_at_500(void **unused) {
    (void)unused;
    enum { N = 2 };
    const double pin[4] = {0.01, -0.02, 0.03, 0.04};
    fl_vecenv_t *ve = make_cartpole(N, 11, 0);
    float obs[N * 4], fin[N * 4], rew[N];
    uint8_t te[N], tr[N];
    fl_episode_stats_t st[N];
    fl_vecenv_reset(ve, obs);
    for (int t = 1; t <= 500; t++) {
        int32_t act[N] = {t % 2, t % 3 == 0};
        set_state(fl_vecenv_state(ve, 1), pin);
        memset(fin + 4, 0xff, 16);
        assert_int_equal(fl_vecenv_step(ve, act, obs, rew, te, tr, fin, st, NULL), FL_OK);
        assert_true(rew[1] == 1.0f);
        assert_int_equal(te[1], 0);
        double want[4];
        memcpy(want, pin, sizeof want);
        ref_step(want, act[1]);
        if (t < 500) {
            assert_int_equal(tr[1], 0);
            assert_obs_matches(obs + 4, want);
            assert_int_equal(st[1].length, 0);
            assert_int_equal(fl_vecenv_elapsed(ve, 1), t);
        } else {
            assert_int_equal(tr[1], 1);
            assert_obs_matches(fin + 4, want); /* the 500th observation */
            assert_in_start_range(obs + 4);    /* already a new episode */
            assert_int_equal(st[1].length, 500);
            assert_true(st[1].episode_return == 500.0);
            assert_int_equal(fl_vecenv_elapsed(ve, 1), 0);
        }
    }
    fl_vecenv_destroy(ve);
}

/* An episode that terminates exactly on its 500th step is terminated, not truncated. */
static void test_vecenv_terminal_on_last_step(void **unused) {
    (void)unused;
    const double pin[4] = {0.0, 0.0, 0.0, 0.0};
    const double edge[4] = {2.39, 1.0, 0.0, 0.0};
    fl_vecenv_t *ve = make_cartpole(1, 2, 0);
    float obs[4], fin[4], rew[1];
    uint8_t te[1], tr[1];
    fl_episode_stats_t st[1];
    int32_t act[1] = {1};
    fl_vecenv_reset(ve, obs);
    for (int t = 1; t <= 500; t++) {
        set_state(fl_vecenv_state(ve, 0), t < 500 ? pin : edge);
        assert_int_equal(fl_vecenv_step(ve, act, obs, rew, te, tr, fin, st, NULL), FL_OK);
        if (t < 500) assert_int_equal(te[0] | tr[0], 0);
    }
    assert_int_equal(te[0], 1);
    assert_int_equal(tr[0], 0);
    assert_int_equal(st[0].length, 500);
    double want[4] = {2.39, 1.0, 0.0, 0.0};
    ref_step(want, 1);
    assert_obs_matches(fin, want);
    fl_vecenv_destroy(ve);
}

static void test_vecenv_limit_override(void **unused) {
    (void)unused;
    fl_vecenv_t *ve = make_cartpole(1, 2, 10);
    float obs[4], fin[4], rew[1];
    uint8_t te[1], tr[1];
    fl_episode_stats_t st[1];
    int32_t act[1] = {0};
    fl_vecenv_reset(ve, obs);
    for (int t = 1; t <= 10; t++) {
        set_state(fl_vecenv_state(ve, 0), (double[4]){0, 0, 0, 0});
        assert_int_equal(fl_vecenv_step(ve, act, obs, rew, te, tr, fin, st, NULL), FL_OK);
        assert_int_equal(te[0], 0);
        assert_int_equal(tr[0], t == 10);
    }
    assert_int_equal(st[0].length, 10);
    fl_vecenv_destroy(ve);
}

static void test_vecenv_invalid_action(void **unused) {
    (void)unused;
    enum { N = 4 };
    fl_vecenv_t *a = make_cartpole(N, 8, 0), *b = make_cartpole(N, 8, 0);
    float oa[N * 4], ob[N * 4], rew[N];
    uint8_t te[N], tr[N];
    fl_err_t err;
    fl_err_init(&err);
    fl_vecenv_reset(a, oa);
    fl_vecenv_reset(b, ob);

    int32_t bad[N] = {1, 0, 1, 2};
    memcpy(ob, oa, sizeof oa);
    assert_int_equal(fl_vecenv_step(a, bad, oa, rew, te, tr, NULL, NULL, &err), FL_INVALID_ARGUMENT);
    assert_int_equal(err.code, FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "env 3"));
    assert_non_null(strstr(err.msg, "action 2"));
    assert_non_null(strstr(err.msg, "0..1"));
    assert_memory_equal(oa, ob, sizeof oa); /* nothing written */
    for (int i = 0; i < N; i++) assert_int_equal(fl_vecenv_elapsed(a, i), 0);

    int32_t neg[N] = {0, -1, 0, 0};
    assert_int_equal(fl_vecenv_step(a, neg, oa, rew, te, tr, NULL, NULL, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "env 1"));
    assert_non_null(strstr(err.msg, "action -1"));

    /* after the refusals, a and its twin b are still in step */
    int32_t ok[N] = {1, 0, 1, 1};
    assert_int_equal(fl_vecenv_step(a, ok, oa, rew, te, tr, NULL, NULL, &err), FL_OK);
    assert_int_equal(fl_vecenv_step(b, ok, ob, rew, te, tr, NULL, NULL, &err), FL_OK);
    assert_memory_equal(oa, ob, sizeof oa);
    assert_memory_equal(fl_vecenv_state(a, 0), fl_vecenv_state(b, 0), sizeof(fl_cartpole_state_t));
    fl_vecenv_destroy(a);
    fl_vecenv_destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_registry_combines_families),
        cmocka_unit_test(test_family_mechanism),
        cmocka_unit_test(test_cartpole_definition),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_inline_rng_matches_common),
        cmocka_unit_test(test_cartpole_known_values),
        cmocka_unit_test(test_cartpole_matches_reference),
        cmocka_unit_test(test_cartpole_termination),
        cmocka_unit_test(test_vecenv_create_errors),
        cmocka_unit_test(test_vecenv_reset_range_and_streams),
        cmocka_unit_test(test_vecenv_determinism),
        cmocka_unit_test(test_vecenv_episode_stats),
        cmocka_unit_test(test_vecenv_truncation_at_500),
        cmocka_unit_test(test_vecenv_terminal_on_last_step),
        cmocka_unit_test(test_vecenv_limit_override),
        cmocka_unit_test(test_vecenv_invalid_action),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
