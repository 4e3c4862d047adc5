/* Unit tests for actors/nstep: n-step transitions checked against sums worked out by
 * hand for gamma = 0.9 (gamma^2 = 0.81, gamma^3 = 0.729).
 *
 * An observation here is 12 bytes: three int32 derived from an id (id, 7 * id, -id), so
 * that each emitted obs / next_obs can be traced back to the step it came from. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "actors/nstep.h"

#define OBS_BYTES 12
#define MAXN 8

static void make_obs(int32_t id, int32_t out[3]) {
    out[0] = id;
    out[1] = 7 * id;
    out[2] = -id;
}

static fl_nstep_t *make(int num_envs, int n, float gamma) {
    fl_nstep_t *t = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_nstep_create(num_envs, n, gamma, OBS_BYTES, &t, &err) != FL_OK) fail_msg("fl_nstep_create: %s", err.msg);
    return t;
}

/* One vector step: env e was in observation obs_id[e], took action act[e], got rew[e],
 * and moved to next_id[e] (the final observation where the episode ended). */
static void push(fl_nstep_t *t, int num_envs, const int32_t *obs_id, const int32_t *act, const float *rew,
                 const uint8_t *term, const uint8_t *trunc, const int32_t *next_id) {
    int32_t obs[MAXN][3], next[MAXN][3];
    for (int e = 0; e < num_envs; e++) {
        make_obs(obs_id[e], obs[e]);
        make_obs(next_id[e], next[e]);
    }
    assert_int_equal(fl_nstep_push(t, obs, act, rew, term, trunc, next), FL_OK);
}

/* Single-env shorthand. */
static void push1(fl_nstep_t *t, int32_t obs_id, int32_t act, float rew, int term, int trunc, int32_t next_id) {
    uint8_t te = (uint8_t)term, tr = (uint8_t)trunc;
    push(t, 1, &obs_id, &act, &rew, &te, &tr, &next_id);
}

static void expect(const fl_nstep_t *t, size_t k, int env, int32_t obs_id, int32_t action, double ret, double discount,
                   int32_t next_id, int m) {
    fl_nstep_batch_t b;
    fl_nstep_view(t, &b);
    if (k >= b.count) fail_msg("transition %zu expected, only %zu ready", k, b.count);
    assert_int_equal(b.obs_bytes, OBS_BYTES);
    int32_t want[3];
    make_obs(obs_id, want);
    const unsigned char *obs = (const unsigned char *)b.obs + k * OBS_BYTES;
    const unsigned char *next = (const unsigned char *)b.next_obs + k * OBS_BYTES;
    if (memcmp(obs, want, OBS_BYTES) != 0)
        fail_msg("transition %zu: obs id %d, expected %d", k, ((const int32_t *)obs)[0], obs_id);
    make_obs(next_id, want);
    if (memcmp(next, want, OBS_BYTES) != 0)
        fail_msg("transition %zu: next_obs id %d, expected %d", k, ((const int32_t *)next)[0], next_id);
    assert_int_equal(b.env[k], env);
    assert_int_equal(b.action[k], action);
    assert_int_equal(b.steps[k], m);
    assert_float_equal(b.reward[k], ret, 1e-5);
    assert_float_equal(b.discount[k], discount, 1e-6);
    if (discount == 0.0 && b.discount[k] != 0.0f) fail_msg("transition %zu: discount must be exactly 0", k);
}

static void test_create_errors(void **unused) {
    (void)unused;
    fl_nstep_t *t = (fl_nstep_t *)&t;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_nstep_create(0, 3, 0.9f, 4, &t, &err), FL_INVALID_ARGUMENT);
    assert_null(t);
    assert_non_null(strstr(err.msg, "num_envs"));
    assert_int_equal(fl_nstep_create(1, 0, 0.9f, 4, &t, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "n is 0"));
    assert_int_equal(fl_nstep_create(1, 3, 1.5f, 4, &t, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "gamma"));
    assert_int_equal(fl_nstep_create(1, 3, -0.1f, 4, &t, &err), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_nstep_create(1, 3, 0.9f, 0, &t, &err), FL_INVALID_ARGUMENT);
    fl_nstep_destroy(NULL);
    t = make(2, 3, 0.9f);
    assert_int_equal(fl_nstep_n(t), 3);
    assert_true(fl_nstep_gamma(t) == 0.9f);
    assert_int_equal(fl_nstep_ready(t), 0);
    fl_nstep_destroy(t);
}

/* Rewards 1, 2, 3, ... at t = 0, 1, 2, ...; obs id at time t is t, action 10 + t. */
static void test_long_episode(void **unused) {
    (void)unused;
    fl_nstep_t *t = make(1, 3, 0.9f);
    push1(t, 0, 10, 1.0f, 0, 0, 1);
    assert_int_equal(fl_nstep_ready(t), 0);
    assert_int_equal(fl_nstep_pending(t, 0), 1);
    push1(t, 1, 11, 2.0f, 0, 0, 2);
    assert_int_equal(fl_nstep_ready(t), 0);
    push1(t, 2, 12, 3.0f, 0, 0, 3);
    assert_int_equal(fl_nstep_ready(t), 1);
    assert_int_equal(fl_nstep_pending(t, 0), 2);
    /* R_0 = 1 + 0.9*2 + 0.81*3 = 5.23, next obs 3 steps ahead */
    expect(t, 0, 0, 0, 10, 5.23, 0.729, 3, 3);
    push1(t, 3, 13, 4.0f, 0, 0, 4);
    /* R_1 = 2 + 0.9*3 + 0.81*4 = 7.94 */
    expect(t, 1, 0, 1, 11, 7.94, 0.729, 4, 3);
    push1(t, 4, 14, 5.0f, 0, 0, 5);
    /* R_2 = 3 + 0.9*4 + 0.81*5 = 10.65 */
    expect(t, 2, 0, 2, 12, 10.65, 0.729, 5, 3);
    assert_int_equal(fl_nstep_ready(t), 3);

    /* clear drops the emitted ones but keeps the two pending steps */
    fl_nstep_clear(t);
    assert_int_equal(fl_nstep_ready(t), 0);
    push1(t, 5, 15, 6.0f, 0, 0, 6);
    assert_int_equal(fl_nstep_ready(t), 1);
    /* R_3 = 4 + 0.9*5 + 0.81*6 = 13.36 */
    expect(t, 0, 0, 3, 13, 13.36, 0.729, 6, 3);
    fl_nstep_destroy(t);
}

/* 5-step episode, rewards 1..5, terminated at its 5th step (final obs id 99). */
static void test_terminated_inside_window(void **unused) {
    (void)unused;
    fl_nstep_t *t = make(1, 3, 0.9f);
    push1(t, 0, 10, 1.0f, 0, 0, 1);
    push1(t, 1, 11, 2.0f, 0, 0, 2);
    push1(t, 2, 12, 3.0f, 0, 0, 3);
    push1(t, 3, 13, 4.0f, 0, 0, 4);
    assert_int_equal(fl_nstep_ready(t), 2);
    push1(t, 4, 14, 5.0f, 1, 0, 99);
    assert_int_equal(fl_nstep_ready(t), 5);
    assert_int_equal(fl_nstep_pending(t, 0), 0);
    expect(t, 0, 0, 0, 10, 5.23, 0.729, 3, 3);
    expect(t, 1, 0, 1, 11, 7.94, 0.729, 4, 3);
    /* the window of step 2 reaches the terminal step: discount 0 */
    expect(t, 2, 0, 2, 12, 3 + 0.9 * 4 + 0.81 * 5, 0.0, 99, 3); /* 10.65 */
    expect(t, 3, 0, 3, 13, 8.5, 0.0, 99, 2);                    /* 4 + 0.9*5 */
    expect(t, 4, 0, 4, 14, 5.0, 0.0, 99, 1);

    /* the next episode starts from scratch: no reward of the old one leaks in */
    push1(t, 100, 20, 7.0f, 0, 0, 101);
    push1(t, 101, 21, 0.0f, 0, 0, 102);
    push1(t, 102, 22, 1.0f, 0, 0, 103);
    assert_int_equal(fl_nstep_ready(t), 6);
    expect(t, 5, 0, 100, 20, 7.81, 0.729, 103, 3); /* 7 + 0 + 0.81*1 */
    fl_nstep_destroy(t);
}

/* The same episode cut by a time limit: bootstrapped, discount gamma^m, next obs final. */
static void test_truncated_inside_window(void **unused) {
    (void)unused;
    fl_nstep_t *t = make(1, 3, 0.9f);
    push1(t, 0, 10, 1.0f, 0, 0, 1);
    push1(t, 1, 11, 2.0f, 0, 0, 2);
    push1(t, 2, 12, 3.0f, 0, 0, 3);
    push1(t, 3, 13, 4.0f, 0, 0, 4);
    push1(t, 4, 14, 5.0f, 0, 1, 99);
    assert_int_equal(fl_nstep_ready(t), 5);
    assert_int_equal(fl_nstep_pending(t, 0), 0);
    expect(t, 0, 0, 0, 10, 5.23, 0.729, 3, 3);
    expect(t, 1, 0, 1, 11, 7.94, 0.729, 4, 3);
    expect(t, 2, 0, 2, 12, 10.65, 0.729, 99, 3);
    expect(t, 3, 0, 3, 13, 8.5, 0.81, 99, 2);
    expect(t, 4, 0, 4, 14, 5.0, 0.9, 99, 1);
    fl_nstep_destroy(t);
}

static void test_n1(void **unused) {
    (void)unused;
    fl_nstep_t *t = make(1, 1, 0.9f);
    push1(t, 0, 3, 1.5f, 0, 0, 1);
    assert_int_equal(fl_nstep_ready(t), 1);
    assert_int_equal(fl_nstep_pending(t, 0), 0);
    expect(t, 0, 0, 0, 3, 1.5, 0.9, 1, 1);
    push1(t, 1, 4, -2.0f, 0, 0, 2);
    expect(t, 1, 0, 1, 4, -2.0, 0.9, 2, 1);
    push1(t, 2, 5, 3.0f, 1, 0, 77);
    expect(t, 2, 0, 2, 5, 3.0, 0.0, 77, 1);
    push1(t, 10, 6, 0.25f, 0, 1, 88);
    expect(t, 3, 0, 10, 6, 0.25, 0.9, 88, 1);
    assert_int_equal(fl_nstep_ready(t), 4);
    fl_nstep_destroy(t);
}

/* Episodes of 2 steps (terminated), 1 step (terminated) and 2 steps (truncated), n = 3. */
static void test_episode_shorter_than_n(void **unused) {
    (void)unused;
    fl_nstep_t *t = make(1, 3, 0.9f);
    push1(t, 0, 1, 2.0f, 0, 0, 1);
    push1(t, 1, 2, 3.0f, 1, 0, 50);
    assert_int_equal(fl_nstep_ready(t), 2);
    expect(t, 0, 0, 0, 1, 4.7, 0.0, 50, 2); /* 2 + 0.9*3 */
    expect(t, 1, 0, 1, 2, 3.0, 0.0, 50, 1);

    push1(t, 60, 3, 4.0f, 1, 0, 61);
    assert_int_equal(fl_nstep_ready(t), 3);
    expect(t, 2, 0, 60, 3, 4.0, 0.0, 61, 1);

    push1(t, 70, 4, 1.0f, 0, 0, 71);
    push1(t, 71, 5, 1.0f, 0, 1, 72);
    assert_int_equal(fl_nstep_ready(t), 5);
    expect(t, 3, 0, 70, 4, 1.9, 0.81, 72, 2);
    expect(t, 4, 0, 71, 5, 1.0, 0.9, 72, 1);
    fl_nstep_destroy(t);
}

/* Env 0: a 2-step episode that terminates at t=1 (rewards 1, 2), then one with rewards
 * 10, 20, 30 from t=2. Env 1: rewards 0.5, truncated at t=3. Obs ids: 100*env + t. */
static void test_two_envs_interleaved(void **unused) {
    (void)unused;
    fl_nstep_t *t = make(2, 3, 0.9f);
    const float rew[5][2] = {{1, 0.5f}, {2, 0.5f}, {10, 0.5f}, {20, 0.5f}, {30, 0.5f}};
    const uint8_t term[5][2] = {{0, 0}, {1, 0}, {0, 0}, {0, 0}, {0, 0}};
    const uint8_t trunc[5][2] = {{0, 0}, {0, 0}, {0, 0}, {0, 1}, {0, 0}};
    const size_t ready_after[5] = {0, 2, 3, 6, 7};
    for (int s = 0; s < 5; s++) {
        int32_t obs[2] = {s, 100 + s}, act[2] = {s, 10 + s}, next[2] = {s + 1, 100 + s + 1};
        if (term[s][0]) next[0] = 999;  /* env 0's final obs */
        if (trunc[s][1]) next[1] = 888; /* env 1's final obs */
        push(t, 2, obs, act, rew[s], term[s], trunc[s], next);
        assert_int_equal(fl_nstep_ready(t), ready_after[s]);
    }
    /* t=1: env 0 terminated, both of its steps flushed */
    expect(t, 0, 0, 0, 0, 2.8, 0.0, 999, 2); /* 1 + 0.9*2 */
    expect(t, 1, 0, 1, 1, 2.0, 0.0, 999, 1);
    /* t=2: env 1's first step completes its 3-step window */
    expect(t, 2, 1, 100, 10, 1.355, 0.729, 103, 3); /* 0.5 * (1 + 0.9 + 0.81) */
    /* t=3: env 1 truncated, three pending steps flushed with bootstrap discounts */
    expect(t, 3, 1, 101, 11, 1.355, 0.729, 888, 3);
    expect(t, 4, 1, 102, 12, 0.95, 0.81, 888, 2);
    expect(t, 5, 1, 103, 13, 0.5, 0.9, 888, 1);
    /* t=4: env 0's second episode emits its first step */
    expect(t, 6, 0, 2, 2, 52.3, 0.729, 5, 3); /* 10 + 0.9*20 + 0.81*30 */
    assert_int_equal(fl_nstep_pending(t, 0), 2);
    assert_int_equal(fl_nstep_pending(t, 1), 1);
    fl_nstep_destroy(t);
}

/* Many pushes without clearing: the output grows and keeps every transition intact. */
static void test_output_grows(void **unused) {
    (void)unused;
    enum { N = 3, T = 1000 };
    fl_nstep_t *t = make(N, 2, 0.5f);
    for (int s = 0; s < T; s++) {
        int32_t obs[N], act[N], next[N];
        float rew[N];
        uint8_t te[N] = {0}, tr[N] = {0};
        for (int e = 0; e < N; e++) {
            obs[e] = 10000 * e + s;
            next[e] = obs[e] + 1;
            act[e] = e;
            rew[e] = (float)(s % 4);
        }
        push(t, N, obs, act, rew, te, tr, next);
    }
    assert_int_equal(fl_nstep_ready(t), (size_t)N * (T - 1));
    for (size_t k = 0; k < (size_t)N * (T - 1); k++) {
        int s = (int)(k / N), e = (int)(k % N);
        expect(t, k, e, 10000 * e + s, e, (s % 4) + 0.5 * ((s + 1) % 4), 0.25, 10000 * e + s + 2, 2);
    }
    /* discarding pending steps: the next push starts a fresh window */
    fl_nstep_clear(t);
    fl_nstep_discard_pending(t);
    for (int e = 0; e < N; e++) assert_int_equal(fl_nstep_pending(t, e), 0);
    int32_t obs[N] = {1, 2, 3}, act[N] = {0, 0, 0}, next[N] = {4, 5, 6};
    float rew[N] = {1, 1, 1};
    uint8_t te[N] = {0}, tr[N] = {0};
    push(t, N, obs, act, rew, te, tr, next);
    assert_int_equal(fl_nstep_ready(t), 0);
    fl_nstep_destroy(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_long_episode),
        cmocka_unit_test(test_terminated_inside_window),
        cmocka_unit_test(test_truncated_inside_window),
        cmocka_unit_test(test_n1),
        cmocka_unit_test(test_episode_shorter_than_n),
        cmocka_unit_test(test_two_envs_interleaved),
        cmocka_unit_test(test_output_grows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
