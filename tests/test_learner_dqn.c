/* test_learner_dqn: the double-DQN update of learner/dqn.h, and the learner loop.
 *
 * The update is checked against an independent double-precision reference that reads
 * the parameters through the network's named views: the targets y and priorities for a
 * hand-built batch (double-Q action choice, terminal items), the gradient against
 * central differences of the reference loss, the SGD step with and without clipping,
 * the scaling by importance weights, and that Adam fits a fixed batch. The learner loop
 * runs in-process against real replay and parameter services on loopback.
 * Parameters and inputs are random and fresh each run; the seed is printed on failure
 * and FLEET_TEST_SEED=<seed> replays a run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/rng.h"
#include "common/stop.h"
#include "kernels/optim.h"
#include "kernels/qnet.h"
#include "learner/dqn.h"
#include "learner/learner.h"
#ifdef FLEET_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif
#include "paramserver/client.h"
#include "paramserver/server.h"
#include "replay/client.h"
#include "replay/server.h"
#include "replay/writer.h"

#include "learner_opts_util.h"
#include "replay_fixture.h"
#include "seed_util.h"

static void fill_uniform(fl_rng_t *r, float *a, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) a[i] = (float)fl_rng_uniform(r, lo, hi);
}

/* ---- reference: "dense(H) relu" + the appended dense head, in double ------------------- */

enum { D = 4, H = 5, A = 3, MAX_B = 16 };
#define SPEC "dense(5) relu"

static size_t view_offset(const fl_qnet_t *n, const char *name, int64_t d0, int64_t d1) {
    const fl_param_view_t *v = fl_qnet_find_view(n, name);
    if (!v) {
        print_error("view %s missing\n", name);
        fail();
    }
    assert_int_equal(v->shape[0], d0);
    if (v->rank == 2) assert_int_equal(v->shape[1], d1);
    return v->offset;
}

/* q (A) = head(relu(W0 x + b0)) for one observation x (D), parameters P in the flat layout. */
static void ref_q(const fl_qnet_t *n, const double *P, const float *x, double *q) {
    const double *W0 = P + view_offset(n, "0.dense.weight", H, D);
    const double *b0 = P + view_offset(n, "0.dense.bias", H, 1);
    const double *Wq = P + view_offset(n, "head.q.weight", A, H);
    const double *bq = P + view_offset(n, "head.q.bias", A, 1);
    double h[H];
    for (int o = 0; o < H; o++) {
        double s = b0[o];
        for (int i = 0; i < D; i++) s += W0[o * D + i] * (double)x[i];
        h[o] = s > 0 ? s : 0.0;
    }
    for (int a = 0; a < A; a++) {
        double s = bq[a];
        for (int o = 0; o < H; o++) s += Wq[a * H + o] * h[o];
        q[a] = s;
    }
}

static double *params_double(const fl_qnet_t *n) {
    const size_t np = fl_qnet_num_params(n);
    double *P = malloc(np * sizeof *P);
    assert_non_null(P);
    const float *p = fl_qnet_params((fl_qnet_t *)n);
    for (size_t i = 0; i < np; i++) P[i] = p[i];
    return P;
}

typedef struct ref_batch {
    int B;
    float obs[MAX_B * D], next_obs[MAX_B * D], rewards[MAX_B], discounts[MAX_B], weights[MAX_B];
    int32_t actions[MAX_B];
} ref_batch_t;

static fl_dqn_batch_t as_dqn(const ref_batch_t *rb, const float *weights) {
    fl_dqn_batch_t b = {.size = rb->B,
                        .obs = rb->obs,
                        .actions = rb->actions,
                        .rewards = rb->rewards,
                        .discounts = rb->discounts,
                        .next_obs = rb->next_obs,
                        .weights = weights};
    return b;
}

static double huber(double x, double delta) {
    return fabs(x) <= delta ? 0.5 * x * x : delta * (fabs(x) - 0.5 * delta);
}

/* Targets y (B), taken-action values q (B) and the weighted mean Huber loss, by hand:
 * online parameters Po choose a* on next_obs, target parameters Pt evaluate it. */
static double ref_update(const fl_qnet_t *n, const double *Po, const double *Pt, const ref_batch_t *rb,
                         const float *weights, double delta, double *y, double *q) {
    double loss = 0.0;
    for (int b = 0; b < rb->B; b++) {
        double qo[A], qt[A], qs[A];
        y[b] = rb->rewards[b];
        if (rb->discounts[b] != 0.0f) {
            ref_q(n, Po, rb->next_obs + b * D, qo);
            ref_q(n, Pt, rb->next_obs + b * D, qt);
            int best = 0;
            for (int a = 1; a < A; a++)
                if (qo[a] > qo[best]) best = a;
            y[b] += (double)rb->discounts[b] * qt[best];
        }
        ref_q(n, Po, rb->obs + b * D, qs);
        q[b] = qs[rb->actions[b]];
        loss += (weights ? weights[b] : 1.0) * huber(q[b] - y[b], delta);
    }
    return loss / rb->B;
}

static void random_batch(fl_rng_t *r, ref_batch_t *rb, int B) {
    memset(rb, 0, sizeof *rb);
    rb->B = B;
    fill_uniform(r, rb->obs, (size_t)B * D, -2, 2);
    fill_uniform(r, rb->next_obs, (size_t)B * D, -2, 2);
    fill_uniform(r, rb->rewards, (size_t)B, -3, 3);
    fill_uniform(r, rb->weights, (size_t)B, 0.2, 1.0);
    for (int b = 0; b < B; b++) {
        rb->actions[b] = (int32_t)fl_rng_below(r, A);
        rb->discounts[b] = (float)pow(0.99, 1 + (int)fl_rng_below(r, 3));
    }
}

typedef struct nets {
    fl_qnet_t *online, *target;
    fl_dqn_t *dqn;
} nets_t;

static void nets_create(nets_t *t, fl_rng_t *r, float delta, float clip) {
    fl_err_t err = {0};
    assert_int_equal(fl_qnet_create(SPEC, D, A, MAX_B, &t->online, &err), FL_OK);
    assert_int_equal(fl_qnet_create(SPEC, D, A, MAX_B, &t->target, &err), FL_OK);
    fl_qnet_init(t->online, r);
    fl_qnet_init(t->target, r); /* independent of online, so that the roles are told apart */
    fl_dqn_config_t cfg = {MAX_B, A, delta, clip};
    assert_int_equal(fl_dqn_create(&cfg, &t->dqn, &err), FL_OK);
}

static void nets_destroy(nets_t *t) {
    fl_dqn_destroy(t->dqn);
    fl_qnet_destroy(t->online);
    fl_qnet_destroy(t->target);
}

/* Adds `v` to the head bias of action a, so that a dominates the argmax everywhere. */
static void bias_action(fl_qnet_t *n, int a, float v) {
    const fl_param_view_t *bq = fl_qnet_find_view(n, "head.q.bias");
    assert_non_null(bq);
    fl_qnet_params(n)[bq->offset + (size_t)a] += v;
}

/* ---- (a) targets and priorities ------------------------------------------------------- */

static void check_targets(nets_t *t, const ref_batch_t *rb, double delta, const char *what) {
    fl_err_t err = {0};
    float prio[MAX_B];
    fl_dqn_stats_t st;
    fl_dqn_batch_t b = as_dqn(rb, rb->weights);
    assert_int_equal(fl_dqn_compute(t->dqn, t->online, t->target, &b, prio, &st, &err), FL_OK);
    double *Po = params_double(t->online), *Pt = params_double(t->target);
    double y[MAX_B], q[MAX_B];
    double loss = ref_update(t->online, Po, Pt, rb, rb->weights, delta, y, q);
    for (int i = 0; i < rb->B; i++) {
        CHECK_CLOSE(fl_dqn_targets(t->dqn)[i], y[i], 1e-4, 1e-5, "%s: y[%d]", what, i);
        CHECK_CLOSE(fl_dqn_q_taken(t->dqn)[i], q[i], 1e-4, 1e-5, "%s: q[%d]", what, i);
        CHECK_CLOSE(prio[i], fabs(y[i] - q[i]), 1e-4, 1e-5, "%s: priority[%d]", what, i);
    }
    CHECK_CLOSE(st.loss, loss, 1e-5, 1e-5, "%s: loss", what);
    free(Po);
    free(Pt);
}

static void test_targets_and_priorities(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 1);
    nets_t t;
    nets_create(&t, &r, 1.0f, 0.0f);
    ref_batch_t rb;
    random_batch(&r, &rb, 8);
    /* Terminal items: y = R whatever next_obs holds (NaN would poison any use of it). */
    rb.discounts[2] = 0.0f;
    rb.discounts[5] = 0.0f;
    for (int i = 0; i < D; i++) rb.next_obs[2 * D + i] = NAN, rb.next_obs[5 * D + i] = 1e30f;
    check_targets(&t, &rb, 1.0, "random parameters");
    assert_true(fl_dqn_targets(t.dqn)[2] == rb.rewards[2]);
    assert_true(fl_dqn_targets(t.dqn)[5] == rb.rewards[5]);

    /* Double Q: online prefers action 0 everywhere, target prefers action 2. y must use
     * Q_target(s', 0), not max_a Q_target(s', a) nor Q_online(s', 0). */
    bias_action(t.online, 0, 50.0f);
    bias_action(t.target, 2, 50.0f);
    check_targets(&t, &rb, 1.0, "double-Q choice");
    double *Pt = params_double(t.target);
    for (int b = 0; b < rb.B; b++) {
        if (rb.discounts[b] == 0.0f) continue;
        double qt[A];
        ref_q(t.target, Pt, rb.next_obs + b * D, qt);
        CHECK_CLOSE(fl_dqn_targets(t.dqn)[b], rb.rewards[b] + rb.discounts[b] * qt[0], 1e-4, 1e-5,
                    "y[%d] uses the online argmax", b);
        assert_true(fabs(fl_dqn_targets(t.dqn)[b] - (rb.rewards[b] + rb.discounts[b] * qt[2])) > 10.0);
    }
    free(Pt);

    /* A small hand-computed case: linear model, one action column each. */
    fl_qnet_t *lin = NULL, *lin_t = NULL;
    fl_dqn_t *d = NULL;
    fl_err_t err = {0};
    assert_int_equal(fl_qnet_create("", 2, 2, 2, &lin, &err), FL_OK);
    assert_int_equal(fl_qnet_create("", 2, 2, 2, &lin_t, &err), FL_OK);
    /* head.q.weight (2, 2) then head.q.bias (2): Q(x) = W x + b */
    const float po[] = {1, 0, 0, 1, 0, 0.5f}, pt[] = {2, 0, 0, 3, 1, 0};
    assert_int_equal(fl_qnet_set_params(lin, po, 6, &err), FL_OK);
    assert_int_equal(fl_qnet_set_params(lin_t, pt, 6, &err), FL_OK);
    fl_dqn_config_t cfg = {2, 2, 1.0f, 0.0f};
    assert_int_equal(fl_dqn_create(&cfg, &d, &err), FL_OK);
    /* item 0: s = (1, 2), a = 1, R = 1, disc = 0.5, s' = (3, 1):
     *   Q_online(s') = (3, 1.5) -> a* = 0; Q_target(s', 0) = 2*3 + 1 = 7; y = 1 + 3.5 = 4.5
     *   q = Q_online(s, 1) = 2 + 0.5 = 2.5; priority 2.0
     * item 1: terminal, s = (-1, 0), a = 0, R = -2 -> y = -2; q = -1; priority 1.0
     * loss = (w0 * huber(-2) + w1 * huber(1)) / 2 = (1 * 1.5 + 2 * 0.5) / 2 = 1.25 */
    const float obs[] = {1, 2, -1, 0}, nobs[] = {3, 1, NAN, NAN}, rew[] = {1, -2}, disc[] = {0.5f, 0}, w[] = {1, 2};
    const int32_t act[] = {1, 0};
    fl_dqn_batch_t b = {
        .size = 2, .obs = obs, .actions = act, .rewards = rew, .discounts = disc, .next_obs = nobs, .weights = w};
    float prio[2];
    fl_dqn_stats_t st;
    assert_int_equal(fl_dqn_compute(d, lin, lin_t, &b, prio, &st, &err), FL_OK);
    assert_true(fl_dqn_targets(d)[0] == 4.5f && fl_dqn_targets(d)[1] == -2.0f);
    assert_true(prio[0] == 2.0f && prio[1] == 1.0f);
    assert_true(st.loss == 1.25f);
    /* dL/dq = w * clamp(q - y) / B = (-0.5, 1); only the taken action's row gets gradient:
     * dW[1,:] = -0.5 * s0 = (-0.5, -1), db[1] = -0.5; dW[0,:] = 1 * s1 = (-1, 0), db[0] = 1 */
    const float want[] = {-1, 0, -0.5f, -1, 1, -0.5f};
    for (int i = 0; i < 6; i++) CHECK_CLOSE(fl_qnet_grads(lin)[i], want[i], 1e-6, 0, "linear grad[%d]", i);

    /* Bad input is refused, naming the item. */
    const int32_t bad[] = {0, 2};
    b.actions = bad;
    assert_int_equal(fl_dqn_compute(d, lin, lin_t, &b, prio, &st, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "actions[1]"));
    b.actions = act;
    b.size = 3;
    assert_int_equal(fl_dqn_compute(d, lin, lin_t, &b, prio, &st, &err), FL_INVALID_ARGUMENT);
    b.size = 0;
    assert_int_equal(fl_dqn_compute(d, lin, lin_t, &b, prio, &st, &err), FL_INVALID_ARGUMENT);
    b.size = 2;
    assert_int_equal(fl_dqn_compute(d, lin, t.target, &b, prio, &st, &err), FL_INVALID_ARGUMENT);
    /* A non-finite loss: the step is refused and leaves the parameters alone. */
    const float inf_rew[] = {INFINITY, 0};
    b.rewards = inf_rew;
    fl_optim_config_t oc = fl_optim_config_default(FL_OPTIM_SGD);
    fl_optim_t *opt = NULL;
    assert_int_equal(fl_optim_create(&oc, 6, &opt, &err), FL_OK);
    assert_int_equal(fl_dqn_step(d, lin, lin_t, opt, &b, prio, &st, &err), FL_OUT_OF_RANGE);
    assert_memory_equal(fl_qnet_params(lin), po, sizeof po);
    assert_int_equal(fl_optim_steps(opt), 0);

    fl_optim_destroy(opt);
    fl_dqn_destroy(d);
    fl_qnet_destroy(lin);
    fl_qnet_destroy(lin_t);
    nets_destroy(&t);
}

/* ---- (b) gradient vs finite differences; the SGD step with and without clipping -------- */

static void test_gradient_and_step(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 2);
    const double delta = 0.7;
    nets_t t;
    nets_create(&t, &r, (float)delta, 0.0f);
    ref_batch_t rb;
    random_batch(&r, &rb, MAX_B);
    rb.discounts[3] = 0.0f;
    fl_err_t err = {0};
    fl_dqn_batch_t b = as_dqn(&rb, rb.weights);
    fl_dqn_stats_t st;
    /* Move two returns so that both Huber regions are exercised: y is R plus a constant. */
    assert_int_equal(fl_dqn_compute(t.dqn, t.online, t.target, &b, NULL, &st, &err), FL_OK);
    rb.rewards[0] += (fl_dqn_q_taken(t.dqn)[0] - fl_dqn_targets(t.dqn)[0]) + 0.3f;
    rb.rewards[1] += (fl_dqn_q_taken(t.dqn)[1] - fl_dqn_targets(t.dqn)[1]) - 2.0f;
    assert_int_equal(fl_dqn_compute(t.dqn, t.online, t.target, &b, NULL, &st, &err), FL_OK);
    int small = 0, large = 0;
    for (int i = 0; i < rb.B; i++) {
        double x = fabs(fl_dqn_q_taken(t.dqn)[i] - fl_dqn_targets(t.dqn)[i]);
        small += x<delta, large += x> delta;
    }
    assert_true(small > 0 && large > 0);

    const size_t np = fl_qnet_num_params(t.online);
    float *g = malloc(np * sizeof *g);
    memcpy(g, fl_qnet_grads(t.online), np * sizeof *g);
    double *Po = params_double(t.online), *Pt = params_double(t.target);
    double y[MAX_B], q[MAX_B], gmax = 0, norm2 = 0;
    for (size_t i = 0; i < np; i++) gmax = fmax(gmax, fabs(g[i])), norm2 += (double)g[i] * g[i];
    assert_true(gmax > 0);
    CHECK_CLOSE(st.grad_norm, sqrt(norm2), 1e-6, 1e-5, "grad_norm");
    /* The target is a constant of the update: perturb the online parameters in the
     * prediction only, keeping y (and a*) from the unperturbed parameters. */
    double y0[MAX_B], q0[MAX_B];
    ref_update(t.online, Po, Pt, &rb, rb.weights, delta, y0, q0);
    const double h = 1e-6;
    for (size_t i = 0; i < np; i++) {
        const double old = Po[i];
        double lp = 0, lm = 0;
        Po[i] = old + h;
        ref_update(t.online, Po, Pt, &rb, rb.weights, delta, y, q);
        for (int k = 0; k < rb.B; k++) lp += rb.weights[k] * huber(q[k] - y0[k], delta);
        Po[i] = old - h;
        ref_update(t.online, Po, Pt, &rb, rb.weights, delta, y, q);
        for (int k = 0; k < rb.B; k++) lm += rb.weights[k] * huber(q[k] - y0[k], delta);
        Po[i] = old;
        CHECK_CLOSE(g[i], (lp - lm) / (2 * h * rb.B), 1e-5 * (1 + gmax), 1e-3, "dL/dparam[%zu]", i);
    }

    /* SGD (momentum 0): p1 = p0 - lr * g, then with clipping at half the norm:
     * p1 = p0 - lr * g * (clip / norm). */
    for (int clipped = 0; clipped < 2; clipped++) {
        fl_dqn_t *d = NULL;
        const float clip = clipped ? 0.5f * st.grad_norm : 0.0f;
        fl_dqn_config_t cfg = {MAX_B, A, (float)delta, clip};
        assert_int_equal(fl_dqn_create(&cfg, &d, &err), FL_OK);
        fl_optim_config_t oc = fl_optim_config_default(FL_OPTIM_SGD);
        oc.lr = 0.125f;
        oc.momentum = 0.0f;
        fl_optim_t *opt = NULL;
        assert_int_equal(fl_optim_create(&oc, np, &opt, &err), FL_OK);
        float prio[MAX_B];
        fl_dqn_stats_t st2;
        assert_int_equal(fl_dqn_step(d, t.online, t.target, opt, &b, prio, &st2, &err), FL_OK);
        CHECK_CLOSE(st2.grad_norm, st.grad_norm, 0, 1e-6, "grad_norm reported before clipping");
        const double scale = clipped ? 0.5 : 1.0;
        const float *p1 = fl_qnet_params(t.online);
        for (size_t i = 0; i < np; i++)
            CHECK_CLOSE(p1[i], Po[i] - oc.lr * scale * g[i], 1e-6, 1e-5, "clip %d: param[%zu] after SGD", clipped, i);
        /* The priorities are those before the update. */
        for (int i = 0; i < rb.B; i++) CHECK_CLOSE(prio[i], fabs(y0[i] - q0[i]), 1e-4, 1e-5, "priority[%d]", i);
        assert_int_equal(fl_optim_steps(opt), 1);
        float *p = fl_qnet_params(t.online);
        for (size_t i = 0; i < np; i++) p[i] = (float)Po[i];
        fl_optim_destroy(opt);
        fl_dqn_destroy(d);
    }
    free(g);
    free(Po);
    free(Pt);
    nets_destroy(&t);
}

/* ---- (c) importance weights scale the gradient ----------------------------------------- */

static void test_weights_scale_gradient(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 3);
    nets_t t;
    nets_create(&t, &r, 1.0f, 0.0f);
    ref_batch_t rb;
    random_batch(&r, &rb, 12);
    fl_err_t err = {0};
    const size_t np = fl_qnet_num_params(t.online);
    float *g1 = malloc(np * sizeof *g1), *g0 = malloc(np * sizeof *g0);
    float w2[MAX_B], ones[MAX_B];
    for (int i = 0; i < rb.B; i++) w2[i] = 2 * rb.weights[i], ones[i] = 1.0f;
    fl_dqn_stats_t s1, s2, s0;

    fl_dqn_batch_t b = as_dqn(&rb, rb.weights);
    assert_int_equal(fl_dqn_compute(t.dqn, t.online, t.target, &b, NULL, &s1, &err), FL_OK);
    memcpy(g1, fl_qnet_grads(t.online), np * sizeof *g1);
    b.weights = w2;
    assert_int_equal(fl_dqn_compute(t.dqn, t.online, t.target, &b, NULL, &s2, &err), FL_OK);
    const float *g2 = fl_qnet_grads(t.online);
    double gmax = 0;
    for (size_t i = 0; i < np; i++) gmax = fmax(gmax, fabs(g1[i]));
    assert_true(gmax > 0);
    for (size_t i = 0; i < np; i++) CHECK_CLOSE(g2[i], 2.0 * g1[i], 1e-7 * gmax, 1e-5, "2w: grad[%zu]", i);
    CHECK_CLOSE(s2.loss, 2.0 * s1.loss, 0, 1e-5, "2w: loss");
    CHECK_CLOSE(s2.grad_norm, 2.0 * s1.grad_norm, 0, 1e-5, "2w: grad_norm");

    /* NULL weights mean all ones; non-uniform weights change the direction. */
    b.weights = NULL;
    assert_int_equal(fl_dqn_compute(t.dqn, t.online, t.target, &b, NULL, &s0, &err), FL_OK);
    memcpy(g0, fl_qnet_grads(t.online), np * sizeof *g0);
    b.weights = ones;
    assert_int_equal(fl_dqn_compute(t.dqn, t.online, t.target, &b, NULL, &s2, &err), FL_OK);
    assert_memory_equal(g0, fl_qnet_grads(t.online), np * sizeof *g0);
    double dot = 0, n0 = 0, n1 = 0;
    for (size_t i = 0; i < np; i++) {
        dot += (double)g0[i] * g1[i];
        n0 += (double)g0[i] * g0[i];
        n1 += (double)g1[i] * g1[i];
    }
    assert_true(dot / sqrt(n0 * n1) < 1 - 1e-4);

    free(g0);
    free(g1);
    nets_destroy(&t);
}

/* ---- (d) Adam fits a fixed batch --------------------------------------------------------- */

static void test_adam_reduces_loss(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 4);
    enum { B = 64, DIM = 4, NA = 2 };
    fl_err_t err = {0};
    fl_qnet_t *online = NULL, *target = NULL;
    fl_dqn_t *d = NULL;
    fl_optim_t *opt = NULL;
    assert_int_equal(fl_qnet_create("dense(64) relu", DIM, NA, B, &online, &err), FL_OK);
    assert_int_equal(fl_qnet_create("dense(64) relu", DIM, NA, B, &target, &err), FL_OK);
    fl_qnet_init(online, &r);
    fl_qnet_copy_params(target, online);
    fl_dqn_config_t cfg = {B, NA, 1.0f, 40.0f};
    assert_int_equal(fl_dqn_create(&cfg, &d, &err), FL_OK);
    fl_optim_config_t oc = fl_optim_config_default(FL_OPTIM_ADAM);
    oc.lr = 1e-2f;
    assert_int_equal(fl_optim_create(&oc, fl_qnet_num_params(online), &opt, &err), FL_OK);

    /* Fixed targets (discount 0): a smooth function of the observation and action. */
    static float obs[B * DIM], next_obs[B * DIM], rew[B], disc[B], w[B];
    int32_t act[B];
    fill_uniform(&r, obs, B * DIM, -1, 1);
    fill_uniform(&r, next_obs, B * DIM, -1, 1);
    fill_uniform(&r, w, B, 0.3, 1.0);
    for (int i = 0; i < B; i++) {
        act[i] = (int32_t)fl_rng_below(&r, NA);
        const float *x = obs + i * DIM;
        rew[i] = 2.0f * x[0] - x[1] + 0.5f * x[2] * x[3] + (act[i] ? 1.0f : -1.0f);
        disc[i] = 0.0f;
    }
    fl_dqn_batch_t b = {
        .size = B, .obs = obs, .actions = act, .rewards = rew, .discounts = disc, .next_obs = next_obs, .weights = w};
    float prio[B];
    fl_dqn_stats_t st;
    assert_int_equal(fl_dqn_step(d, online, target, opt, &b, prio, &st, &err), FL_OK);
    const float first = st.loss;
    assert_true(first > 0);
    for (int i = 1; i < 200; i++) assert_int_equal(fl_dqn_step(d, online, target, opt, &b, prio, &st, &err), FL_OK);
    assert_int_equal(fl_dqn_compute(d, online, target, &b, prio, &st, &err), FL_OK);
    if (!(st.loss * 10 < first)) {
        SEED_NOTE();
        print_error("loss %g after 200 Adam steps, %g at the start (expected a 10x reduction)\n", (double)st.loss,
                    (double)first);
        fail();
    }
    fl_optim_destroy(opt);
    fl_dqn_destroy(d);
    fl_qnet_destroy(online);
    fl_qnet_destroy(target);
}

static void test_create_errors(void **state) {
    fl_err_t err = {0};
    fl_dqn_t *d = (fl_dqn_t *)&err;
    fl_dqn_config_t cfg = {0, 2, 1.0f, 0.0f};
    assert_int_equal(fl_dqn_create(&cfg, &d, &err), FL_INVALID_ARGUMENT);
    assert_null(d);
    assert_non_null(strstr(err.msg, "max_batch"));
    cfg = (fl_dqn_config_t){4, 0, 1.0f, 0.0f};
    assert_int_equal(fl_dqn_create(&cfg, &d, &err), FL_INVALID_ARGUMENT);
    cfg = (fl_dqn_config_t){4, 2, 0.0f, 0.0f};
    assert_int_equal(fl_dqn_create(&cfg, &d, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "huber_delta"));
    cfg = (fl_dqn_config_t){4, 2, 1.0f, -1.0f};
    assert_int_equal(fl_dqn_create(&cfg, &d, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "grad_clip"));
    fl_dqn_destroy(NULL);
}

/* ---- (e) the learner loop against in-process replay and parameter services ------------- */

enum { CP_DIM = 4, CP_ACTIONS = 2 };

typedef struct services {
    uint64_t min_size, seed; /* the replay shard's replay.min_size_to_sample and run.seed */
    replay_fixture_t replay; /* the replay shard (tests/replay_fixture.h) */
    fl_paramserver_service_t *params;
    char param_addr[300];
} services_t;

static void replay_start(services_t *sv, const char *listen) {
    /* A CartPole shard of 20000 transitions. */
    const fl_obs_spec_t obs = {.dtype = FL_DTYPE_FLOAT32, .rank = 1, .shape = {CP_DIM}};
    fl_replay_service_opts_t ro = replay_fixture_opts(obs, CP_ACTIONS, 20000, (int64_t)sv->min_size);
    ro.seed = sv->seed;
    replay_fixture_start_at(&sv->replay, &ro, listen);
}

static void services_start_at(services_t *sv, uint64_t min_size, const char *replay_listen) {
    fl_err_t err = {0};
    sv->min_size = min_size;
    sv->seed = g_seed % 2147483647ULL;
    replay_start(sv, replay_listen);
    assert_int_equal(fl_paramserver_service_create(NULL, 0, &sv->params, &err), FL_OK);
    assert_int_equal(
        fl_paramserver_service_start(sv->params, "127.0.0.1:0", sv->param_addr, sizeof sv->param_addr, &err), FL_OK);
}

static void services_start(services_t *sv, uint64_t min_size) {
    services_start_at(sv, min_size, "127.0.0.1:0");
}

static void services_stop(services_t *sv) {
    fl_paramserver_service_destroy(sv->params);
    replay_fixture_stop(&sv->replay);
}

static const fl_obs_spec_t CP_OBS = {FL_DTYPE_FLOAT32, 1, {CP_DIM, 0, 0, 0}};

/* Inserts n random CartPole-shaped transitions (some terminal) and waits for the ack. */
static void insert_random(const services_t *sv, fl_rng_t *r, int n) {
    fl_err_t err = {0};
    fl_replay_client_t *c = NULL;
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_client_create(sv->replay.addr, &c, &err), FL_OK);
    static uint64_t stream_id; /* a writer's stream is its own: one id per writer */
    assert_int_equal(fl_replay_writer_create(c, ++stream_id, &CP_OBS, 8, &w, &err), FL_OK);
    enum { CHUNK = 100 };
    static float obs[CHUNK * CP_DIM], next_obs[CHUNK * CP_DIM], rew[CHUNK], disc[CHUNK], prio[CHUNK];
    int32_t act[CHUNK];
    for (int done = 0; done < n; done += CHUNK) {
        fill_uniform(r, obs, CHUNK * CP_DIM, -0.2, 0.2);
        fill_uniform(r, next_obs, CHUNK * CP_DIM, -0.2, 0.2);
        fill_uniform(r, prio, CHUNK, 0.1, 2.0);
        for (int i = 0; i < CHUNK; i++) {
            act[i] = (int32_t)fl_rng_below(r, CP_ACTIONS);
            int terminal = fl_rng_below(r, 20) == 0;
            rew[i] = terminal ? 1.0f : 1.0f + 0.99f + 0.99f * 0.99f;
            disc[i] = terminal ? 0.0f : 0.99f * 0.99f * 0.99f;
        }
        assert_int_equal(fl_replay_writer_append(w, CHUNK, obs, act, rew, disc, next_obs, prio, &err), FL_OK);
    }
    if (fl_replay_writer_flush(w, 30000, &err) != FL_OK) {
        print_error("flush: %s\n", err.msg);
        fail();
    }
    assert_int_equal(fl_replay_writer_acked(w), (uint64_t)n);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
}

/* A learner's options for sv: this process's part, and the run's part as a run of
 * default settings with sv's seed gives it (tests/learner_opts_util.h). */
static fl_learner_opts_t learner_opts(const services_t *sv) {
    fl_learner_opts_t o = {.index = 0,
                           .replay_addr = sv->replay.addr,
                           .paramserver_addr = sv->param_addr,
                           .control_addr = NULL,
                           .obs = CP_OBS,
                           .num_actions = CP_ACTIONS};
    learner_run_defaults(&o);
    o.seed = sv->seed;
    return o;
}

/* per_call: learner.batches_per_call (each prefetched Sample call draws that many
 * batches; every batch still gets its priorities back). */
static void learner_loop(int per_call) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 5);
    services_t sv;
    services_start(&sv, 1000);
    insert_random(&sv, &r, 3000);

    enum { STEPS = 50, BATCH = 32, PUBLISH_EVERY = 10 };
    fl_learner_opts_t o = learner_opts(&sv);
    o.max_steps = STEPS;
    o.batch_size = BATCH;
    o.publish_every = PUBLISH_EVERY;
    o.target_update = 20;
    o.optim.kind = FL_OPTIM_ADAM;
    o.optim.lr = 0.001;
    o.model_spec = "dense(16) relu dueling";
    o.batches_per_call = per_call;
    fl_learner_t *l = NULL;
    fl_err_t err = {0};
    assert_int_equal(fl_learner_create(&o, &l, &err), FL_OK);
    const size_t np = fl_qnet_num_params(fl_learner_online(l));
    float *initial = malloc(np * sizeof *initial), *fetched = malloc(np * sizeof *fetched);
    memcpy(initial, fl_qnet_params(fl_learner_online(l)), np * sizeof *initial);

    if (fl_learner_run(l, &err) != FL_OK) {
        print_error("learner: %s\n", err.msg);
        fail();
    }
    const fl_learner_stats_t *st = fl_learner_stats(l);
    assert_int_equal(st->steps, STEPS);
    assert_int_equal(st->samples, STEPS * BATCH);
    assert_int_equal(st->skipped_steps, 0);
    assert_int_equal(st->priorities_sent, STEPS * BATCH);
    assert_int_equal(st->target_updates, STEPS / 20);

    /* Version 1 at start, then one per publish_every steps; the last step published. */
    fl_param_store_info_t pinfo;
    fl_paramserver_service_info(sv.params, &pinfo);
    assert_true(pinfo.version >= 2);
    assert_int_equal(pinfo.version, 1 + STEPS / PUBLISH_EVERY);
    assert_int_equal(pinfo.version, st->param_version);
    assert_int_equal(pinfo.publishes, 1 + STEPS / PUBLISH_EVERY);

    fl_replay_info_t rinfo;
    fl_replay_service_info(sv.replay.svc, &rinfo);
    assert_int_equal(rinfo.updates_applied, STEPS * BATCH);
    assert_int_equal(rinfo.updates_stale, 0);
    /* Trained on STEPS batches; up to learner.prefetch calls more were drawn ahead. */
    assert_true(rinfo.sampled >= (uint64_t)STEPS * BATCH);
    assert_true(rinfo.sampled <= (uint64_t)(STEPS + o.prefetch * per_call) * BATCH);
    assert_int_equal(o.prefetch, 2);

    /* What the server holds is the learner's final network, and it moved. */
    fl_param_client_t *pc = NULL;
    assert_int_equal(fl_param_client_create(sv.param_addr, &pc, &err), FL_OK);
    uint64_t version = 0;
    int updated = 0;
    assert_int_equal(fl_param_fetch(pc, &version, fetched, np, &updated, 10000, &err), FL_OK);
    assert_int_equal(updated, 1);
    assert_int_equal(version, pinfo.version);
    assert_memory_equal(fetched, fl_qnet_params(fl_learner_online(l)), np * sizeof *fetched);
    double moved = 0;
    for (size_t i = 0; i < np; i++) moved = fmax(moved, fabs((double)fetched[i] - initial[i]));
    assert_true(moved > 1e-4);

    fl_param_client_destroy(pc);
    free(initial);
    free(fetched);
    fl_learner_destroy(l);
    services_stop(&sv);
}

static void test_learner_loop(void **state) {
    (void)state;
    learner_loop(1);
    learner_loop(3);
}

/* A bad configuration is refused at create, naming the key. */
static void test_learner_create_errors(void **state) {
    services_t sv;
    services_start(&sv, 100);
    fl_learner_opts_t o = learner_opts(&sv);
    fl_learner_t *l = NULL;
    fl_err_t err = {0};
    o.count = 2; /* apex with two learners needs the all-reduce group */
    assert_int_equal(fl_learner_create(&o, &l, &err), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "mpirun"));
    o.index = 2;
    assert_int_equal(fl_learner_create(&o, &l, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "learner.count = 2"));
    o = learner_opts(&sv);
    o.device = FL_LEARNER_CUDA; /* without a GPU (or CUDA): refused, saying why */
    fl_status ds = fl_learner_create(&o, &l, &err);
#ifdef FLEET_HAVE_CUDA
    int gpus = 0;
    if (fl_cuda_device_count(&gpus, NULL) == FL_OK) {
        assert_int_equal(ds, FL_OK);
        fl_learner_destroy(l);
        l = NULL;
    } else {
        assert_int_equal(ds, FL_NO_DEVICE);
        assert_non_null(strstr(err.msg, "learner.device = cuda"));
    }
#else
    assert_int_equal(ds, FL_UNIMPLEMENTED);
    assert_non_null(strstr(err.msg, "built without CUDA"));
#endif
    o = learner_opts(&sv);
    o.model_spec = "dense(x)";
    assert_int_equal(fl_learner_create(&o, &l, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "model.spec"));
    o = learner_opts(&sv);
    o.replay_addr = "";
    assert_int_equal(fl_learner_create(&o, &l, &err), FL_INVALID_ARGUMENT);
    o = learner_opts(&sv);
    o.obs.dtype = FL_DTYPE_INT64;
    assert_int_equal(fl_learner_create(&o, &l, &err), FL_INVALID_ARGUMENT);
    assert_null(l);
    fl_learner_destroy(NULL);
    services_stop(&sv);
}

/* (f) Before replay holds enough, the learner has published version 1 and waits in
 * Sample; it trains once data arrives, rides out a restart of the replay shard (same
 * unix socket, fresh table) and trains on the new one, and a stop request ends it
 * cleanly with a final publish. Runs last: the stop request is process-wide and stays
 * set. Waits have no time bound of their own: CTest's timeout is the bound. */
typedef struct bg_run {
    fl_learner_t *l;
    fl_status status;
    fl_err_t err;
} bg_run_t;

static void *run_learner(void *arg) {
    bg_run_t *w = arg;
    w->status = fl_learner_run(w->l, &w->err);
    return NULL;
}

static uint64_t replay_sampled(services_t *sv) {
    fl_replay_info_t info;
    fl_replay_service_info(sv->replay.svc, &info);
    return info.sampled;
}

/* A checkpoint (safetensors) holds both networks, the optimizer and the counters: a
 * learner resumed from it starts from the same step, parameters and optimizer state
 * (bit-exact), trains on from there at the same loss level, and publishes the next
 * version; a checkpoint of another model or a damaged file is refused, naming why. */
static void test_learner_checkpoint_resume(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 9);
    services_t sv;
    services_start(&sv, 1000);
    insert_random(&sv, &r, 3000);
    char dir[] = "/tmp/fleet-learner-ckpt-XXXXXX";
    assert_non_null(mkdtemp(dir));
    fl_learner_opts_t o = learner_opts(&sv);
    o.max_steps = 60;
    o.batch_size = 32;
    o.optim.kind = FL_OPTIM_RMSPROP;
    o.optim.lr = 0.0005;
    o.checkpoint_every = 25;
    o.model_spec = "dense(16) relu dueling";
    o.checkpoint_dir = dir; /* learner.checkpoint_dir: by steps only, without run.checkpoint_every's seconds */
    o.checkpoint_every_s = 0;
    fl_learner_t *l = NULL;
    fl_err_t err = {0};
    assert_int_equal(fl_learner_create(&o, &l, &err), FL_OK);
    if (fl_learner_run(l, &err) != FL_OK) fail_msg("learner: %s", err.msg);
    const fl_learner_stats_t *st = fl_learner_stats(l);
    assert_int_equal(st->steps, 60);
    const double loss_a = st->last_loss;
    char path[128];
    snprintf(path, sizeof path, "%s/learner-0.safetensors", dir);
    assert_int_equal(access(path, R_OK), 0); /* written at the end of the run */

    /* resume: the same state */
    fl_learner_opts_t o2 = o;
    o2.max_steps = 90;
    o2.checkpoint_dir = ""; /* no checkpoints */
    o2.resume_path = path;
    fl_learner_t *m = NULL;
    if (fl_learner_create(&o2, &m, &err) != FL_OK) fail_msg("resume: %s", err.msg);
    const fl_learner_stats_t *sm = fl_learner_stats(m);
    assert_int_equal(sm->steps, 60);
    assert_int_equal(sm->param_version, st->param_version);
    const size_t np = fl_qnet_num_params(fl_learner_online(l));
    assert_memory_equal(fl_qnet_params(fl_learner_online(m)), fl_qnet_params(fl_learner_online(l)), np * 4);
    assert_memory_equal(fl_qnet_params(fl_learner_target(m)), fl_qnet_params(fl_learner_target(l)), np * 4);
    if (fl_learner_run(m, &err) != FL_OK) fail_msg("resumed learner: %s", err.msg);
    assert_int_equal(sm->steps, 90);
    assert_true(sm->param_version > st->param_version);
    assert_true(isfinite(sm->last_loss) && sm->last_loss < 10.0 * loss_a + 1.0);
    fl_param_store_info_t pinfo;
    fl_paramserver_service_info(sv.params, &pinfo);
    assert_int_equal(pinfo.version, sm->param_version);

    /* another model: refused, naming the key */
    fl_learner_opts_t o3 = o2;
    o3.model_spec = "dense(8) relu dueling";
    fl_learner_t *x = NULL;
    assert_int_equal(fl_learner_create(&o3, &x, &err), FL_INVALID_ARGUMENT);
    assert_null(x);
    assert_non_null(strstr(err.msg, "model.spec"));
    assert_non_null(strstr(err.msg, path));
    /* another optimizer */
    o3 = o2;
    o3.optim.kind = FL_OPTIM_ADAM;
    assert_int_equal(fl_learner_create(&o3, &x, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "learner.optimizer"));
    /* a damaged file: one byte of the header changed */
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    fseek(fp, 9, SEEK_SET);
    fputc('#', fp);
    fclose(fp);
    assert_int_equal(fl_learner_create(&o2, &x, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "safetensors"));
    /* a missing file */
    o2.resume_path = "/nonexistent/learner.safetensors";
    assert_int_equal(fl_learner_create(&o2, &x, &err), FL_NOT_FOUND);

    fl_learner_destroy(l);
    fl_learner_destroy(m);
    services_stop(&sv);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* fl_learner_stop ends a run that has no step limit, from another thread, as a process
 * stop does: a clean return after the step in progress, with the final publish. */
static void test_learner_stop(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 10);
    services_t sv;
    services_start(&sv, 500);
    insert_random(&sv, &r, 1000);
    fl_learner_opts_t o = learner_opts(&sv);
    o.batch_size = 16;
    o.model_spec = "dense(8) relu";
    bg_run_t w = {0};
    assert_int_equal(fl_learner_create(&o, &w.l, &w.err), FL_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_learner, &w), 0);
    uint64_t steps = 0;
    while (steps < 5) {
        fl_learner_counters(w.l, &steps, NULL);
        fl_sleep_sec(0.01);
    }
    fl_learner_stop(w.l);
    assert_int_equal(pthread_join(th, NULL), 0);
    if (w.status != FL_OK) fail_msg("learner: %s", w.err.msg);
    assert_false(fl_stop_requested());
    const fl_learner_stats_t *st = fl_learner_stats(w.l);
    assert_true(st->steps >= 5);
    fl_param_store_info_t pinfo;
    fl_paramserver_service_info(sv.params, &pinfo);
    assert_int_equal(pinfo.version, st->param_version);
    fl_learner_destroy(w.l);
    fl_learner_stop(NULL);
    services_stop(&sv);
}

/* Another publisher ahead of the learner: the learner logs it and publishes past it (at
 * most paramserver.max_version_step ahead, so that it always can). A parameter server
 * that holds 2^64 - 1 (possible only without that bound) fails the publish at once,
 * instead of a loop of warnings. */
static void test_learner_version_past_ours(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 11);
    services_t sv;
    services_start(&sv, 500);
    insert_random(&sv, &r, 1000);
    fl_learner_opts_t o = learner_opts(&sv);
    o.batch_size = 16;
    o.max_steps = 30;
    o.publish_every = 10;
    o.model_spec = "dense(8) relu";
    fl_learner_t *l = NULL;
    fl_err_t err = {0};
    assert_int_equal(fl_learner_create(&o, &l, &err), FL_OK);
    const size_t np = fl_qnet_num_params(fl_learner_online(l));
    float *zeros = calloc(np, sizeof *zeros);
    fl_param_client_t *pc = NULL;
    assert_int_equal(fl_param_client_create(sv.param_addr, &pc, &err), FL_OK);
    assert_int_equal(fl_param_publish(pc, 1000, zeros, np, 10000, &err), FL_OK);
    /* A lone learner without a checkpoint of its own takes the held parameters (a learner
     * restarted before its first checkpoint) and publishes past them. */
    if (fl_learner_run(l, &err) != FL_OK) fail_msg("learner: %s", err.msg);
    const fl_learner_stats_t *st = fl_learner_stats(l);
    fl_param_store_info_t pinfo;
    fl_paramserver_service_info(sv.params, &pinfo);
    assert_int_equal(st->adopted_version, 1000);
    assert_int_equal(st->param_version, 1000 + 30 / 10);
    assert_int_equal(pinfo.version, st->param_version);
    /* trained from zeros: 30 Adam steps of lr 0.003 leave the parameters' mean magnitude
     * near 0.05, where the seed's draw (U(-1/2, 1/2) and U(-0.35, 0.35)) has about 0.2 */
    const float *p = fl_qnet_params(fl_learner_online(l));
    double mean_abs = 0;
    for (size_t i = 0; i < np; i++) mean_abs += fabsf(p[i]) / (double)np;
    if (!(mean_abs < 0.12)) fail_msg("mean |parameter| %g: not trained from the held zeros", mean_abs);
    fl_learner_destroy(l);
    fl_paramserver_service_destroy(sv.params);

    /* A parameter server without the bound, at 2^64 - 1. */
    fl_paramserver_service_opts_t po;
    fl_paramserver_service_opts_init(&po);
    po.max_version_step = 0;
    assert_int_equal(fl_paramserver_service_create(&po, 0, &sv.params, &err), FL_OK);
    assert_int_equal(fl_paramserver_service_start(sv.params, "127.0.0.1:0", sv.param_addr, sizeof sv.param_addr, &err),
                     FL_OK);
    fl_param_client_destroy(pc);
    assert_int_equal(fl_param_client_create(sv.param_addr, &pc, &err), FL_OK);
    assert_int_equal(fl_param_publish(pc, UINT64_MAX, zeros, np, 10000, &err), FL_OK);
    /* the same options: o.paramserver_addr is sv.param_addr, now the new server's */
    assert_int_equal(fl_learner_create(&o, &l, &err), FL_OK);
    assert_int_equal(fl_learner_run(l, &err), FL_OUT_OF_RANGE);
    if (!strstr(err.msg, "the parameter server holds version 18446744073709551615, the largest there is"))
        fail_msg("learner: %s", err.msg);
    assert_int_equal(fl_learner_stats(l)->steps, 0);
    fl_learner_destroy(l);
    fl_param_client_destroy(pc);
    free(zeros);
    services_stop(&sv);
}

static void test_learner_waits_restarts_stops(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 6);
    char dir[] = "/tmp/fleet-learner-test-XXXXXX", listen[128];
    assert_non_null(mkdtemp(dir));
    snprintf(listen, sizeof listen, "unix:%s/replay.sock", dir);
    services_t sv;
    services_start_at(&sv, 2000, listen);
    insert_random(&sv, &r, 200);
    fl_learner_opts_t o = learner_opts(&sv);
    o.batch_size = 16;
    o.model_spec = "dense(8) relu";
    bg_run_t w = {0};
    assert_int_equal(fl_learner_create(&o, &w.l, &w.err), FL_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_learner, &w), 0);

    /* Version 1 is out before any data, and the learner waits in Sample. */
    fl_param_store_info_t pinfo;
    for (;;) {
        fl_paramserver_service_info(sv.params, &pinfo);
        if (pinfo.version >= 1 && fl_replay_service_sample_waiters(sv.replay.svc) > 0) break;
        fl_sleep_sec(0.01);
    }
    assert_int_equal(pinfo.version, 1);
    assert_int_equal(replay_sampled(&sv), 0);

    /* Enough data: it trains. */
    insert_random(&sv, &r, 2000);
    while (replay_sampled(&sv) == 0) fl_sleep_sec(0.01);

    /* The shard goes away and comes back empty on the same address: the learner waits
     * for data again, then trains on the new table. */
    replay_fixture_stop(&sv.replay);
    uint64_t retries = 0;
    while (retries == 0) {
        fl_learner_counters(w.l, NULL, &retries);
        fl_sleep_sec(0.01);
    }
    replay_start(&sv, listen);
    insert_random(&sv, &r, 2200);
    while (replay_sampled(&sv) == 0) fl_sleep_sec(0.01);

    fl_stop_request();
    assert_int_equal(pthread_join(th, NULL), 0);
    if (w.status != FL_OK) {
        print_error("learner: %s\n", w.err.msg);
        fail();
    }
    const fl_learner_stats_t *st = fl_learner_stats(w.l);
    assert_true(st->steps > 0);
    assert_true(st->retries > 0);
    assert_int_equal(st->skipped_steps, 0);
    uint64_t steps = 0;
    fl_learner_counters(w.l, &steps, &retries);
    assert_int_equal(steps, st->steps);
    assert_int_equal(retries, st->retries);
    /* The final parameters are published. */
    fl_paramserver_service_info(sv.params, &pinfo);
    assert_int_equal(pinfo.version, st->param_version);
    assert_int_equal(pinfo.publishes, st->publishes);
    assert_true(pinfo.version >= 2);
    fl_learner_destroy(w.l);
    services_stop(&sv);
    char sock[160];
    snprintf(sock, sizeof sock, "%s/replay.sock", dir);
    unlink(sock);
    rmdir(dir);
}

int main(void) {
    pick_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_targets_and_priorities),
        cmocka_unit_test(test_gradient_and_step),
        cmocka_unit_test(test_weights_scale_gradient),
        cmocka_unit_test(test_adam_reduces_loss),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_learner_create_errors),
        cmocka_unit_test(test_learner_loop),
        cmocka_unit_test(test_learner_checkpoint_resume),
        cmocka_unit_test(test_learner_stop),
        cmocka_unit_test(test_learner_version_past_ours),
        cmocka_unit_test(test_learner_waits_restarts_stops), /* last: sets the process-wide stop */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
