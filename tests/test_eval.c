/* Tests for eval/evaluate: the episodes played match an independent step-by-step replay
 * of the same seeds and policy (so the statistics are those of the real episodes), the
 * result does not depend on how many episodes run side by side, epsilon = 1 plays other
 * episodes than the greedy policy, max_episode_steps truncates, on_step sees every step
 * and can stop the run, a network of the wrong shape is refused, and the statistics
 * (std, 95% CI with Student's t) are right on hand-computed data. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "actors/actor.h"
#include "common/dtype.h"
#include "common/rng.h"
#include "envs/factory.h"
#include "eval/evaluate.h"

#define SPEC "dense(16) relu"
#define EPISODES 7

typedef struct fixture {
    fl_env_factory_opts_t eo;
    fl_env_options_t opts;
    fl_wrapped_env_t *w;
    fl_qnet_t *net;
} fixture_t;

static void fixture_open(fixture_t *f, const char *env, const char *wrappers, int max_batch) {
    memset(f, 0, sizeof *f);
    fl_env_factory_opts_init(&f->eo);
    f->eo.name = env;
    f->eo.wrappers = wrappers;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_env_create_wrapped(&f->eo, &f->w, &err) != FL_OK) fail_msg("env: %s", err.msg);
    fl_env_instance_options(&f->eo, &f->opts);
    const fl_env_def_t *d = fl_wrapped_env_info(f->w);
    if (fl_qnet_create_for_obs(SPEC, d->obs.rank, d->obs.shape, d->num_actions, max_batch, &f->net, &err) != FL_OK)
        fail_msg("net: %s", err.msg);
    fl_rng_t rng;
    fl_rng_init(&rng, 3);
    fl_qnet_init(f->net, &rng);
}

static void fixture_close(fixture_t *f) {
    fl_qnet_destroy(f->net);
    fl_wrapped_env_destroy(f->w);
}

/* Episode k replayed by hand: its own instance, stream k of seed, one forward per step. */
static void replay_episode(fixture_t *f, uint64_t seed, int k, double epsilon, int64_t max_steps, float *ret,
                           uint32_t *len) {
    const fl_env_def_t *d = fl_wrapped_env_info(f->w);
    void *state = calloc(1, fl_wrapped_env_state_size(f->w) + 1);
    void *obs = malloc(fl_wrapped_env_obs_size(f->w));
    float *x = malloc(fl_env_obs_count(d) * sizeof *x);
    float *q = malloc((size_t)d->num_actions * sizeof *q);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_wrapped_env_configure(f->w, state, &f->opts, &err), FL_OK);
    fl_rng_t env_rng, explore;
    fl_rng_init_stream(&env_rng, seed, (uint64_t)k);
    fl_rng_init_stream(&explore, seed, FL_EVAL_EXPLORE_STREAM + (uint64_t)k);
    fl_wrapped_env_reset(f->w, state, &env_rng, obs);
    double total = 0;
    uint32_t steps = 0;
    for (;;) {
        fl_dtype_to_float(d->obs.dtype, obs, fl_env_obs_count(d), x);
        assert_int_equal(fl_qnet_forward(f->net, x, 1, q), FL_OK);
        int32_t a;
        fl_actor_select_actions(q, 1, d->num_actions, epsilon, &explore, &a);
        float r = 0;
        int term = 0, trunc = 0;
        fl_wrapped_env_step(f->w, state, &env_rng, a, obs, &r, &term, &trunc);
        total += r;
        steps++;
        if (term || trunc || (max_steps > 0 && steps >= max_steps)) break;
    }
    *ret = (float)total;
    *len = steps;
    free(q);
    free(x);
    free(obs);
    free(state);
}

static void run_eval(fixture_t *f, int parallel, double epsilon, uint64_t seed, int64_t max_steps, float *ret,
                     uint32_t *len, fl_eval_stats_t *st) {
    fl_evaluation_t *e = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_evaluation_create(f->w, &f->opts, parallel, &e, &err) != FL_OK) fail_msg("create: %s", err.msg);
    fl_status s = fl_evaluation_run(e, f->net, EPISODES, epsilon, seed, max_steps, NULL, NULL, ret, len, st, &err);
    if (s != FL_OK) fail_msg("run: %s", err.msg);
    fl_evaluation_destroy(e);
}

static void test_matches_replay_at_any_parallelism(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_open(&f, "cartpole", "", 8);
    for (int eps_case = 0; eps_case < 2; eps_case++) {
        double epsilon = eps_case ? 0.3 : 0.0;
        float want_r[EPISODES];
        uint32_t want_l[EPISODES];
        for (int k = 0; k < EPISODES; k++) replay_episode(&f, 42, k, epsilon, 0, &want_r[k], &want_l[k]);
        const int parallels[] = {1, 3, 8};
        for (int p = 0; p < 3; p++) {
            float r[EPISODES];
            uint32_t l[EPISODES];
            fl_eval_stats_t st;
            run_eval(&f, parallels[p], epsilon, 42, 0, r, l, &st);
            double sum = 0;
            uint64_t steps = 0;
            for (int k = 0; k < EPISODES; k++) {
                if (r[k] != want_r[k] || l[k] != want_l[k])
                    fail_msg("eps %g parallel %d episode %d: return %g length %u, replay %g %u", epsilon, parallels[p],
                             k, r[k], l[k], want_r[k], want_l[k]);
                sum += r[k];
                steps += l[k];
            }
            assert_int_equal(st.episodes, EPISODES);
            assert_float_equal(st.return_mean, sum / EPISODES, 1e-9);
            assert_int_equal(st.steps, steps);
            assert_int_equal(st.truncated, 0); /* a random CartPole net falls long before 500 */
        }
    }
    fixture_close(&f);
}

static void test_seed_and_epsilon_change_the_episodes(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_open(&f, "cartpole", "", 4);
    float a[EPISODES], b[EPISODES], c[EPISODES];
    uint32_t la[EPISODES], lb[EPISODES], lc[EPISODES];
    fl_eval_stats_t st;
    run_eval(&f, 4, 0.0, 1, 0, a, la, &st);
    run_eval(&f, 4, 0.0, 2, 0, b, lb, &st);
    run_eval(&f, 4, 1.0, 1, 0, c, lc, &st);
    assert_true(memcmp(la, lb, sizeof la) != 0); /* other seeds, other start states */
    assert_true(memcmp(la, lc, sizeof la) != 0); /* random actions */
    fixture_close(&f);
}

static void test_max_episode_steps_truncates(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_open(&f, "minatar-breakout", "", 4);
    float r[EPISODES], want;
    uint32_t l[EPISODES], want_l;
    fl_eval_stats_t st;
    run_eval(&f, 4, 0.0, 9, 5, r, l, &st);
    for (int k = 0; k < EPISODES; k++) {
        assert_true(l[k] <= 5);
        replay_episode(&f, 9, k, 0.0, 5, &want, &want_l);
        assert_true(r[k] == want);
        assert_int_equal(l[k], want_l);
    }
    assert_true(st.truncated > 0);
    assert_true(st.length_max <= 5);
    fixture_close(&f);
}

typedef struct counter {
    int64_t steps, resets;
    int stop_after;
} counter_t;

static int count_steps(void *user, int episode, const void *state, int64_t step, float reward) {
    (void)episode, (void)reward;
    counter_t *c = user;
    assert_non_null(state);
    if (step == 0)
        c->resets++;
    else
        c->steps++;
    return c->stop_after > 0 && c->steps >= c->stop_after;
}

static void test_on_step_sees_every_step_and_can_stop(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_open(&f, "cartpole", "", 4);
    fl_evaluation_t *e = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_evaluation_create(f.w, &f.opts, 4, &e, &err), FL_OK);
    counter_t c = {0, 0, 0};
    fl_eval_stats_t st;
    assert_int_equal(fl_evaluation_run(e, f.net, EPISODES, 0.1, 5, 0, count_steps, &c, NULL, NULL, &st, &err), FL_OK);
    assert_int_equal(c.resets, EPISODES);
    assert_int_equal(c.steps, (int64_t)st.steps);
    counter_t stop = {0, 0, 10};
    assert_int_equal(fl_evaluation_run(e, f.net, EPISODES, 0.1, 5, 0, count_steps, &stop, NULL, NULL, &st, &err),
                     FL_CANCELLED);
    assert_int_equal(stop.steps, 10);
    fl_evaluation_destroy(e);
    fixture_close(&f);
}

static void test_bad_arguments(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_open(&f, "cartpole", "", 2);
    fl_evaluation_t *e = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_evaluation_create(f.w, &f.opts, 0, &e, &err), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_evaluation_create(f.w, &f.opts, 4, &e, &err), FL_OK);
    fl_eval_stats_t st;
    /* max_batch 2 < parallel 4 */
    assert_int_equal(fl_evaluation_run(e, f.net, 3, 0, 1, 0, NULL, NULL, NULL, NULL, &st, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "parallel"));
    fl_evaluation_destroy(e);
    assert_int_equal(fl_evaluation_create(f.w, &f.opts, 2, &e, &err), FL_OK);
    assert_int_equal(fl_evaluation_run(e, f.net, 0, 0, 1, 0, NULL, NULL, NULL, NULL, &st, &err), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_evaluation_run(e, f.net, 2, 1.5, 1, 0, NULL, NULL, NULL, NULL, &st, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "epsilon"));
    /* A network for another env: 4 inputs, 3 actions. */
    fl_qnet_t *other = NULL;
    assert_int_equal(fl_qnet_create(SPEC, 4, 3, 4, &other, &err), FL_OK);
    assert_int_equal(fl_evaluation_run(e, other, 2, 0, 1, 0, NULL, NULL, NULL, NULL, &st, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "cartpole"));
    fl_qnet_destroy(other);
    fl_evaluation_destroy(e);
    fixture_close(&f);
    /* options the env refuses fail the creation, with the env's message */
    fixture_open(&f, "minatar-breakout", "", 2);
    f.opts.sticky_prob = 2.0f;
    e = NULL;
    assert_int_equal(fl_evaluation_create(f.w, &f.opts, 2, &e, &err), FL_INVALID_ARGUMENT);
    assert_null(e);
    assert_non_null(strstr(err.msg, "rejected its options: sticky_actions = 2"));
    f.opts.sticky_prob = 0.1f;
    assert_int_equal(fl_evaluation_create(f.w, &f.opts, 2, &e, &err), FL_OK);
    fl_evaluation_destroy(e);
    fixture_close(&f);
}

static void test_statistics(void **unused) {
    (void)unused;
    const float r[] = {1, 2, 3, 4, 10};
    const uint32_t l[] = {5, 6, 7, 8, 9};
    fl_eval_stats_t s;
    fl_eval_summarize(r, l, 5, &s);
    assert_float_equal(s.return_mean, 4.0, 1e-12);
    assert_float_equal(s.return_std, sqrt(50.0 / 4), 1e-12); /* squares 9+4+1+0+36 */
    assert_float_equal(s.return_ci95, 2.776 * sqrt(50.0 / 4) / sqrt(5.0), 1e-12);
    assert_float_equal(s.return_min, 1, 0);
    assert_float_equal(s.return_max, 10, 0);
    assert_float_equal(s.length_mean, 7, 1e-12);
    assert_float_equal(s.length_min, 5, 0);
    assert_float_equal(s.length_max, 9, 0);
    fl_eval_summarize(r, l, 1, &s);
    assert_float_equal(s.return_std, 0, 0);
    assert_float_equal(s.return_ci95, 0, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_replay_at_any_parallelism),
        cmocka_unit_test(test_seed_and_epsilon_change_the_episodes),
        cmocka_unit_test(test_max_episode_steps_truncates),
        cmocka_unit_test(test_on_step_sees_every_step_and_can_stop),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_statistics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
