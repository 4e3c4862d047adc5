/* Whole double-DQN updates (learner/dqn.h) on the oneDNN backend of the Q-network against
 * the reference backend: three SGD steps agree in loss, gradient norm, priorities and
 * parameter updates; a batch of raw uint8 observations (as the CPU learner hands replay's
 * batch over) gives the bits of the same batch converted to floats first. The tolerance
 * and the networks are tests/dnnl_util.h's (as in test_kernels_dnnl, which tests the
 * backend op by op). In a build without oneDNN both skip. Inputs are random from a fresh
 * seed each run (FLEET_TEST_SEED replays one). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>

#include "common/dtype.h"
#include "kernels/optim.h"
#include "learner/dqn.h"

#include "dnnl_util.h"

/* ---- whole updates ---------------------------------------------------------------------- */

/* Three double-DQN steps with SGD (momentum) on each backend: the losses, priorities and
 * parameter updates agree. Each step starts both online networks from the same new
 * integer parameters (an update leaves them real, and ties would follow); the optimizer
 * state carries over. (SGD's update is linear in the gradient; Adam's first steps are
 * about lr times the gradient's sign, which rounding can flip where it is near 0.) */
static void test_dqn_steps(void **state) {
    NEED_DNNL();
    const net_case_t t = {MINATAR, 10, 10, 4, 6, 255.0f};
    const int B = 32, A = 6;
    fl_qnet_t *on[2], *tg[2];
    fl_optim_t *opt[2];
    fl_dqn_t *dqn;
    fl_err_t err;
    fl_err_init(&err);
    const fl_dqn_config_t cfg = {.max_batch = B, .num_actions = A, .huber_delta = 1.0f, .grad_clip = 10.0f};
    assert_int_equal(fl_dqn_create(&cfg, &dqn, &err), FL_OK);
    const fl_optim_config_t oc = fl_optim_config_default(FL_OPTIM_SGD);
    for (int k = 0; k < 2; k++) {
        on[k] = make_net(&t, B);
        tg[k] = make_net(&t, B);
        if (k == 1) {
            fl_qnet_copy_params(on[1], on[0]);
            fl_qnet_copy_params(tg[1], tg[0]);
        }
        const fl_qnet_backend_kind be = k == 0 ? FL_QNET_BACKEND_REF : FL_QNET_BACKEND_DNNL;
        assert_int_equal(fl_qnet_set_backend(on[k], be, &err), FL_OK);
        assert_int_equal(fl_qnet_set_backend(tg[k], be, &err), FL_OK);
        assert_int_equal(fl_optim_create(&oc, fl_qnet_num_params(on[k]), &opt[k], &err), FL_OK);
    }
    const size_t D = (size_t)fl_qnet_obs_dim(on[0]), P = fl_qnet_num_params(on[0]);
    float *obs = malloc((size_t)B * D * 4), *next = malloc((size_t)B * D * 4);
    float *before = malloc(2 * P * 4);
    float rew[32], disc[32], w[32], prio[2][32];
    int32_t act[32];
    for (int step = 0; step < 3; step++) {
        integerize(on[0]);
        fl_qnet_copy_params(on[1], on[0]);
        for (size_t i = 0; i < (size_t)B * D; i++) {
            obs[i] = fl_rng_below(&g_rng, 4) == 0 ? 1.0f / 255.0f : 0.0f;
            next[i] = fl_rng_below(&g_rng, 4) == 0 ? 1.0f / 255.0f : 0.0f;
        }
        for (int b = 0; b < B; b++) {
            act[b] = (int32_t)fl_rng_below(&g_rng, A);
            rew[b] = (float)fl_rng_uniform(&g_rng, -1, 1);
            disc[b] = fl_rng_below(&g_rng, 5) == 0 ? 0.0f : 0.97f;
            w[b] = (float)fl_rng_uniform(&g_rng, 0.2, 1);
        }
        const fl_dqn_batch_t batch = {
            .size = B, .obs = obs, .actions = act, .rewards = rew, .discounts = disc, .next_obs = next, .weights = w};
        fl_dqn_stats_t st[2];
        for (int k = 0; k < 2; k++) {
            memcpy(before + k * P, fl_qnet_params(on[k]), P * 4);
            fl_status s = fl_dqn_step(dqn, on[k], tg[k], opt[k], &batch, prio[k], &st[k], &err);
            if (s != FL_OK) print_error("%s\n", err.msg);
            assert_int_equal(s, FL_OK);
        }
        CHECK_CLOSE(st[1].loss, st[0].loss, TOL, TOL, "step %d: loss", step);
        CHECK_CLOSE(st[1].grad_norm, st[0].grad_norm, TOL, TOL, "step %d: gradient norm", step);
        expect_close(prio[1], prio[0], (size_t)B, t.spec, "priorities", B);
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < P; i++) before[k * P + i] = fl_qnet_params(on[k])[i] - before[k * P + i];
        expect_close(before + P, before, P, t.spec, "parameter update", B);
    }
    for (int k = 0; k < 2; k++) {
        fl_optim_destroy(opt[k]);
        fl_qnet_destroy(on[k]);
        fl_qnet_destroy(tg[k]);
    }
    fl_dqn_destroy(dqn);
    free(obs);
    free(next);
    free(before);
}

/* A DQN batch of raw uint8 observations (fl_dqn_batch_t's obs_raw, as the CPU learner
 * hands replay's batch to the oneDNN backend) gives the bits of the same batch converted
 * to floats first: loss, priorities and gradient. density: the share of bytes not 0. */
static void dqn_raw_obs(const net_case_t t, float density) {
    fl_err_t err;
    fl_err_init(&err);
    const int B = 6, A = 5;
    fl_qnet_t *on = make_net(&t, B), *tg = make_net(&t, B);
    fl_qnet_init(tg, &g_rng);
    fl_dqn_t *dqn = NULL;
    const fl_dqn_config_t cfg = {.max_batch = B, .num_actions = A, .huber_delta = 1.0f, .grad_clip = 10.0f};
    assert_int_equal(fl_dqn_create(&cfg, &dqn, &err), FL_OK);
    const size_t D = (size_t)fl_qnet_obs_dim(on), P = fl_qnet_num_params(on);
    unsigned char *u8 = malloc(2 * B * D);
    float *f = malloc(2 * B * D * 4), *g_ref = malloc(P * 4), rew[6], disc[6], prio[2][6];
    int32_t act[6];
    for (size_t i = 0; i < 2 * B * D; i++)
        u8[i] = fl_rng_uniform(&g_rng, 0, 1) < density ? (unsigned char)fl_rng_below(&g_rng, 256) : 0;
    assert_int_equal(fl_dtype_to_float(FL_DTYPE_UINT8, u8, 2 * B * D, f), 0);
    for (int b = 0; b < B; b++) {
        act[b] = (int32_t)fl_rng_below(&g_rng, A);
        rew[b] = (float)fl_rng_uniform(&g_rng, -1, 1);
        disc[b] = b % 3 ? 0.97f : 0.0f;
    }
    fl_dqn_batch_t batch = {
        .size = B, .obs = f, .actions = act, .rewards = rew, .discounts = disc, .next_obs = f + B * D};
    fl_dqn_stats_t st[2];
    assert_int_equal(fl_dqn_compute(dqn, on, tg, &batch, prio[0], &st[0], &err), FL_OK);
    memcpy(g_ref, fl_qnet_grads(on), P * 4);
    batch.obs = batch.next_obs = NULL;
    batch.raw_dtype = FL_DTYPE_UINT8;
    batch.obs_raw = u8;
    batch.next_raw = u8 + B * D;
    assert_int_equal(fl_dqn_compute(dqn, on, tg, &batch, prio[1], &st[1], &err), FL_OK);
    assert_memory_equal(&st[1].loss, &st[0].loss, sizeof(float));
    assert_memory_equal(prio[1], prio[0], sizeof prio[0]);
    assert_memory_equal(fl_qnet_grads(on), g_ref, P * 4);
    if (density < 1) expect_sparse(on, B, t.spec, 1, "last forward: sparse");
    batch.next_raw = NULL; /* a raw batch needs both columns */
    assert_int_equal(fl_dqn_compute(dqn, on, tg, &batch, prio[1], &st[1], &err), FL_INVALID_ARGUMENT);
    free(u8), free(f), free(g_ref);
    fl_dqn_destroy(dqn);
    fl_qnet_destroy(on);
    fl_qnet_destroy(tg);
}

static void test_dqn_raw_obs(void **state) {
    NEED_DNNL();
    dqn_raw_obs((net_case_t){"conv(8,4,2) relu conv(16,3,1) relu flatten dense(512) relu dueling", 14, 14, 4, 5, 0}, 1);
    /* the MinAtar configs' MLP on planes with 8% of their bytes set: the first layer goes sparse */
    dqn_raw_obs((net_case_t){"dense(128) relu dense(128) relu dueling", 10, 10, 4, 5, 255.0f}, 0.08f);
}

int main(void) {
    pick_seed();
    fl_rng_init_stream(&g_rng, g_seed, 7);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dqn_steps),
        cmocka_unit_test(test_dqn_raw_obs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
