/* GPU tests of the whole double-DQN update (learner/dqn_cuda.h) against the CPU
 * learner's fl_dqn_step (learner/dqn.h) on networks from kernels/qnet.c: the same
 * parameters and batches on both sides, then the same targets, priorities, loss,
 * gradient norm, gradient, updated parameters and optimizer state, over several steps
 * and two batch sizes, for the MLP, MinAtar, Nature, a padded convolutional spec and the
 * specs whose layers read channels-last images transposed,
 * with CUDA graphs on and off, uint8 and float observations; plus the skipped update on
 * a non-finite loss (also through a replayed graph), compute + apply == step, the
 * asynchronous snapshot, checkpoint interchange of the optimizer state, and argument
 * errors. Inputs are random from a fresh seed each run (FLEET_TEST_SEED replays one).
 *
 * Tolerances (TF32 off, so every GEMM and convolution is float32 FMA and differs from
 * OpenBLAS only in summation order): Q-values, targets and the loss come out of dot
 * products of length <= 3136 and agree to ~1e-6 relative; we allow rel 1e-4 and an
 * absolute 1e-5 of the batch's largest value (priorities |y - q| cancel, so they get
 * 1e-4 of |y| + |q|). Batches are redrawn where the online network's best two actions
 * on next_obs are within 1e-4 of each other, so that both backends pick the same a*.
 * Gradients, parameter updates and optimizer state are compared per tensor by the
 * relative L2 error ||gpu - cpu|| / ||cpu|| (for updates and state: of what moved) <=
 * 5e-2, not element by element: a relu unit whose pre-activation lies within rounding
 * distance of 0 (about one per few hundred thousand units and forward) is on for one
 * backend and off for the other, which moves one sample's contribution in one row or
 * channel by O(1) while the tensor as a whole stays within a few 1e-3; a layout, index
 * or transpose error moves a tensor by O(1). The per-op tests (test_kernels_cuda_gpu.c)
 * check every op element by element with tight tolerances. The gradient norm gets rel
 * 1e-2 for the same reason.
 *
 * Skips cleanly when fleet was built without CUDA or no GPU is present. CTest label: gpu. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/dtype.h"
#include "common/rng.h"
#include "kernels/optim.h"
#include "kernels/qnet.h"
#ifdef FLEET_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#include "learner/dqn_cuda.h"
#include "learner/dqn.h"
#include "replay/client.h"
#endif

#include "seed_util.h"

#ifdef FLEET_HAVE_CUDA

#include "cuda_test_util.h"

/* ---- one configuration on both backends ---------------------------------------------- */

typedef struct dcase {
    const char *name, *spec;
    int rank, shape[3], actions;
    int B;     /* max_batch and the first batch size; then B / 2 + 1 */
    int uint8; /* observations as uint8 (0..255, or 0/1 planes with input_scale 255) */
    float input_scale;
    int graph;
    fl_optim_kind kind;
    float grad_clip;
} dcase_t;

typedef struct pair {
    const dcase_t *c;
    fl_qnet_t *online, *target;
    fl_optim_t *opt;
    fl_dqn_t *dqn;
    fl_cuda_dqn_t *gpu;
    size_t n, D;
    float *obs_f, *next_f; /* the CPU's float batch */
    fl_rng_t rng;
} pair_t;

static fl_optim_config_t optim_config(fl_optim_kind kind) {
    fl_optim_config_t oc = fl_optim_config_default(kind);
    if (kind == FL_OPTIM_RMSPROP) oc.lr = 1e-3f, oc.momentum = 0.5f;
    if (kind == FL_OPTIM_ADAM) oc.lr = 1e-3f;
    return oc;
}

static void pair_create(pair_t *p, const dcase_t *c, uint64_t stream) {
    memset(p, 0, sizeof *p);
    p->c = c;
    fl_rng_init_stream(&p->rng, g_seed, stream);
    OK(fl_qnet_create_for_obs(c->spec, c->rank, c->shape, c->actions, c->B, &p->online, E));
    OK(fl_qnet_create_for_obs(c->spec, c->rank, c->shape, c->actions, c->B, &p->target, E));
    fl_qnet_init(p->online, &p->rng);
    p->n = fl_qnet_num_params(p->online);
    /* a target network that differs from the online one, so that double-Q matters */
    float *t = fl_qnet_params(p->target);
    const float *o = fl_qnet_params(p->online);
    for (size_t i = 0; i < p->n; i++) t[i] = o[i] * (float)fl_rng_uniform(&p->rng, 0.8, 1.2);
    fl_qnet_set_input_scale(p->online, c->input_scale);
    fl_qnet_set_input_scale(p->target, c->input_scale);
    const fl_optim_config_t oc = optim_config(c->kind);
    OK(fl_optim_create(&oc, p->n, &p->opt, E));
    const fl_dqn_config_t dc = {c->B, c->actions, 1.0f, c->grad_clip};
    OK(fl_dqn_create(&dc, &p->dqn, E));

    fl_cuda_dqn_config_t g;
    fl_cuda_dqn_config_init(&g);
    g.spec = c->spec;
    g.obs = fl_obs_spec_make(c->uint8 ? FL_DTYPE_UINT8 : FL_DTYPE_FLOAT32, c->rank, c->shape);
    g.obs_scale = 1.0f / 255.0f;
    g.input_scale = c->input_scale;
    g.num_actions = c->actions;
    g.max_batch = c->B;
    g.huber_delta = 1.0f;
    g.grad_clip = c->grad_clip;
    g.optim = oc;
    g.tf32 = 0;
    g.use_graph = c->graph;
    OK(fl_cuda_dqn_create(&g, &p->gpu, E));
    assert_int_equal(fl_cuda_dqn_num_params(p->gpu), p->n);
    p->D = (size_t)fl_qnet_obs_dim(p->online);
    assert_int_equal(fl_cuda_dqn_obs_dim(p->gpu), (int)p->D);
    OK(fl_cuda_dqn_set_params(p->gpu, fl_qnet_params(p->online), fl_qnet_params(p->target), p->n, E));
    p->obs_f = host((size_t)c->B * p->D);
    p->next_f = host((size_t)c->B * p->D);
}

static void pair_destroy(pair_t *p) {
    fl_cuda_dqn_destroy(p->gpu);
    fl_dqn_destroy(p->dqn);
    fl_optim_destroy(p->opt);
    fl_qnet_destroy(p->online);
    fl_qnet_destroy(p->target);
    free(p->obs_f);
    free(p->next_f);
}

/* Item i's observation: raw (obs.dtype) and the CPU's float conversion of it (the
 * learner's fl_dtype_to_float). */
static void draw_obs(pair_t *p, void *raw, float *f, int i) {
    const size_t D = p->D, at = (size_t)i * D;
    if (p->c->uint8) {
        uint8_t *u = (uint8_t *)raw + at;
        const uint64_t levels = p->c->input_scale > 1.0f ? 2 : 256; /* 0/1 planes, or pixels */
        for (size_t j = 0; j < D; j++) u[j] = (uint8_t)fl_rng_below(&p->rng, levels);
        fl_dtype_to_float(FL_DTYPE_UINT8, u, D, f + at);
    } else {
        float *x = (float *)raw + at;
        for (size_t j = 0; j < D; j++) x[j] = (float)fl_rng_uniform(&p->rng, -1.0, 1.0);
        fl_dtype_to_float(FL_DTYPE_FLOAT32, x, D, f + at);
    }
}

/* Draws a batch of B into GPU slot `slot` and its float conversion for the CPU, and
 * returns the CPU's view of it. next_obs rows where the online network's two best
 * actions are nearly tied are redrawn (see the tolerances above). */
static fl_dqn_batch_t make_batch(pair_t *p, int slot, int B, fl_cuda_dqn_slot_t *s) {
    const dcase_t *c = p->c;
    const int A = c->actions;
    OK(fl_cuda_dqn_slot(p->gpu, slot, s, E));
    for (int i = 0; i < B; i++) {
        draw_obs(p, s->obs, p->obs_f, i);
        draw_obs(p, s->next_obs, p->next_f, i);
        s->actions[i] = (int32_t)fl_rng_below(&p->rng, (uint64_t)A);
        s->rewards[i] = (float)(2.0 * fl_rng_normal(&p->rng));
        s->discounts[i] = i % 4 == 3 ? 0.0f : 0.970299f;
        s->weights[i] = (float)fl_rng_uniform(&p->rng, 0.1, 1.0);
    }
    float *q = host((size_t)B * A);
    for (int round = 0;; round++) {
        assert_true(round < 100);
        OK(fl_qnet_forward(p->online, p->next_f, B, q));
        int redrawn = 0;
        for (int i = 0; i < B && A > 1; i++) {
            const float *r = q + (size_t)i * A;
            float best = -INFINITY, second = -INFINITY;
            for (int a = 0; a < A; a++) {
                if (r[a] > best)
                    second = best, best = r[a];
                else if (r[a] > second)
                    second = r[a];
            }
            if (s->discounts[i] != 0.0f && best - second <= 1e-4f * (1.0f + fabsf(best))) {
                draw_obs(p, s->next_obs, p->next_f, i);
                redrawn = 1;
            }
        }
        if (!redrawn) break;
    }
    free(q);
    return (fl_dqn_batch_t){.size = B,
                            .obs = p->obs_f,
                            .actions = s->actions,
                            .rewards = s->rewards,
                            .discounts = s->discounts,
                            .next_obs = p->next_f,
                            .weights = s->weights};
}

/* Per parameter tensor (view) of the layout: ||got - want|| <= tol ||want - base||
 * over the tensor's floats at offset `at` + the view's offset (base NULL: zero). */
static void check_views(pair_t *p, const char *what, const float *got, const float *want, const float *base, size_t at,
                        double tol) {
    for (int v = 0; v < fl_qnet_num_views(p->online); v++) {
        const fl_param_view_t *w = fl_qnet_view(p->online, v);
        const size_t o = at + w->offset;
        double num = 0, den = 0;
        for (size_t i = 0; i < w->numel; i++) {
            const double d = (double)got[o + i] - want[o + i], r = (double)want[o + i] - (base ? base[o + i] : 0.0);
            num += d * d;
            den += r * r;
        }
        if (!(sqrt(num) <= tol * sqrt(den)) && !(num == 0 && den == 0)) {
            SEED_NOTE();
            print_error("%s: %s %s: relative L2 error %.3g (allowed %.3g; ||reference|| %.3g)\n", p->c->name, what,
                        w->name, den > 0 ? sqrt(num / den) : INFINITY, tol, sqrt(den));
            fail();
        }
    }
}

static void check_gradients(pair_t *p, const float *g_gpu, const float *g_cpu) {
    check_views(p, "gradient", g_gpu, g_cpu, NULL, 0, 5e-2);
}

static void check_step_outputs(pair_t *p, int B, const float *prio_gpu, const float *prio_cpu,
                               const fl_cuda_dqn_stats_t *sg, const fl_dqn_stats_t *sc) {
    const char *name = p->c->name;
    float *y = host((size_t)B), *q = host((size_t)B);
    OK(fl_cuda_dqn_last_targets(p->gpu, y, q, B, E));
    const float *y_cpu = fl_dqn_targets(p->dqn), *q_cpu = fl_dqn_q_taken(p->dqn);
    const double ymax = max_abs(y_cpu, (size_t)B), qmax = max_abs(q_cpu, (size_t)B);
    for (int i = 0; i < B; i++) {
        CHECK_CLOSE(y[i], y_cpu[i], 1e-5 * ymax, 1e-4, "%s: target y[%d] (B %d)", name, i, B);
        CHECK_CLOSE(q[i], q_cpu[i], 1e-5 * qmax, 1e-4, "%s: q[%d] (B %d)", name, i, B);
        CHECK_CLOSE(prio_gpu[i], prio_cpu[i], 1e-5 + 1e-4 * (fabs(y_cpu[i]) + fabs(q_cpu[i])), 0.0,
                    "%s: priority[%d] (B %d)", name, i, B);
    }
    CHECK_CLOSE(sg->loss, sc->loss, 0.0, 1e-4, "%s: loss (B %d)", name, B);
    CHECK_CLOSE(sg->grad_norm, sc->grad_norm, 0.0, 1e-2, "%s: gradient norm (B %d)", name, B);
    CHECK_CLOSE(sg->mean_q, sc->mean_q, 1e-5 * qmax, 1e-4, "%s: mean q (B %d)", name, B);
    free(y);
    free(q);
}

static void check_params(pair_t *p, const float *start) {
    float *g = host(p->n);
    OK(fl_cuda_dqn_get_params(p->gpu, 0, g, p->n, E));
    const float *c = fl_qnet_params(p->online);
    double moved = 0;
    for (size_t i = 0; i < p->n; i++)
        if (fabs((double)c[i] - start[i]) > moved) moved = fabs((double)c[i] - start[i]);
    assert_true(moved > 0); /* the CPU update did something, so a GPU without one fails */
    check_views(p, "update of", g, c, start, 0, 5e-2);
    free(g);
}

static void check_optim_state(pair_t *p) {
    const size_t total = fl_optim_state_size(p->opt);
    assert_int_equal(fl_cuda_dqn_optim_state_size(p->gpu), total);
    float *s = host(total), *init = host(total);
    int64_t steps = -1;
    OK(fl_cuda_dqn_get_optim_state(p->gpu, s, total, &steps, E));
    assert_int_equal(steps, fl_optim_steps(p->opt));
    if (p->c->kind == FL_OPTIM_RMSPROP)
        for (size_t i = 0; i < p->n; i++) init[i] = 1.0f; /* ms starts at one */
    for (int k = 0; k < fl_optim_num_slots(p->opt); k++) {
        char what[96];
        snprintf(what, sizeof what, "optimizer slot %s of", fl_optim_slot_name(p->opt, k));
        check_views(p, what, s, fl_optim_state(p->opt), init, (size_t)k * p->n, 5e-2);
    }
    free(s);
    free(init);
}

static void run_case(const dcase_t *c, uint64_t stream) {
    pair_t p;
    pair_create(&p, c, stream);
    const int sizes[] = {c->B, c->B / 2 + 1, c->B};
    float *prio_gpu = host((size_t)c->B), *prio_cpu = host((size_t)c->B);
    float *g_gpu = host(p.n), *start = host(p.n);

    /* the gradient alone, on the first batch */
    fl_cuda_dqn_slot_t s;
    fl_dqn_batch_t b = make_batch(&p, 0, c->B, &s);
    fl_dqn_stats_t sc;
    fl_cuda_dqn_stats_t sg;
    OK(fl_dqn_compute(p.dqn, p.online, p.target, &b, prio_cpu, &sc, E));
    OK(fl_cuda_dqn_compute(p.gpu, 0, c->B, g_gpu, prio_gpu, &sg, E));
    check_step_outputs(&p, c->B, prio_gpu, prio_cpu, &sg, &sc);
    check_gradients(&p, g_gpu, fl_qnet_grads(p.online));

    /* three updates, the middle one with another batch size (another graph) */
    memcpy(start, fl_qnet_params(p.online), p.n * sizeof(float));
    for (int k = 0; k < 3; k++) {
        const int B = sizes[k], slot = k % fl_cuda_dqn_num_slots(p.gpu);
        b = make_batch(&p, slot, B, &s);
        OK(fl_dqn_step(p.dqn, p.online, p.target, p.opt, &b, prio_cpu, &sc, E));
        OK(fl_cuda_dqn_step(p.gpu, slot, B, prio_gpu, &sg, E));
        check_step_outputs(&p, B, prio_gpu, prio_cpu, &sg, &sc);
        check_params(&p, start);
    }
    check_optim_state(&p);
    /* graphs are captured on the second call of a kind and size: only step at B so far */
    assert_int_equal(fl_cuda_dqn_graphs(p.gpu), c->graph ? 1 : 0);

    /* target sync on both: target == online on the device, exactly */
    fl_qnet_copy_params(p.target, p.online);
    OK(fl_cuda_dqn_sync_target(p.gpu, E));
    float *on = host(p.n), *tg = host(p.n);
    OK(fl_cuda_dqn_get_params(p.gpu, 0, on, p.n, E));
    OK(fl_cuda_dqn_get_params(p.gpu, 1, tg, p.n, E));
    check_exact("target after sync", tg, on, p.n);
    /* and one more update that reads the new target */
    b = make_batch(&p, 0, c->B, &s);
    OK(fl_dqn_step(p.dqn, p.online, p.target, p.opt, &b, prio_cpu, &sc, E));
    OK(fl_cuda_dqn_step(p.gpu, 0, c->B, prio_gpu, &sg, E));
    check_step_outputs(&p, c->B, prio_gpu, prio_cpu, &sg, &sc); /* a replay, with graphs */
    check_params(&p, start);
    check_optim_state(&p);
    assert_int_equal(fl_cuda_dqn_graphs(p.gpu), c->graph ? 1 : 0);

    free(on), free(tg), free(prio_gpu), free(prio_cpu), free(g_gpu), free(start);
    pair_destroy(&p);
}

#define MLP "dense(64) relu dense(64) relu dueling"
#define MINATAR "conv(16,3,1) relu flatten dense(128) relu dueling"
#define NATURE "conv(32,8,4) relu conv(64,4,2) relu conv(64,3,1) relu flatten dense(512) relu dueling"

static const dcase_t CASES[] = {
    {"mlp float eager rmsprop", MLP, 1, {4}, 2, 32, 0, 1.0f, 0, FL_OPTIM_RMSPROP, 40.0f},
    {"mlp float graph sgd clip", MLP, 1, {4}, 2, 32, 0, 1.0f, 1, FL_OPTIM_SGD, 0.5f},
    {"plain head graph rmsprop", "dense(32) relu", 1, {7}, 3, 24, 0, 2.0f, 1, FL_OPTIM_RMSPROP, 0.0f},
    {"minatar uint8 graph", MINATAR, 3, {10, 10, 4}, 6, 32, 1, 255.0f, 1, FL_OPTIM_RMSPROP, 40.0f},
    {"minatar float eager clip", MINATAR, 3, {10, 10, 4}, 6, 32, 0, 1.0f, 0, FL_OPTIM_SGD, 0.5f},
    {"nature uint8 graph", NATURE, 3, {84, 84, 4}, 18, 16, 1, 1.0f, 1, FL_OPTIM_RMSPROP, 40.0f},
    {"nature uint8 eager", NATURE, 3, {84, 84, 4}, 18, 16, 1, 1.0f, 0, FL_OPTIM_RMSPROP, 1.0f},
    {"padded conv float graph",
     "conv(8,3,2,1) relu conv(8,3,1) relu dense(32) relu dueling",
     3,
     {9, 11, 3},
     5,
     12,
     0,
     1.0f,
     1,
     FL_OPTIM_SGD,
     40.0f},
    /* the layers that read channels-last pixels transposed (learner/dqn_cuda.h): a
     * flatten and a dense layer first, on the image itself, and the dueling head straight
     * after a convolution (its input gradient transposed back) */
    {"image flatten first uint8 graph",
     "flatten dense(16) relu dueling",
     3,
     {5, 6, 3},
     4,
     10,
     1,
     1.0f,
     1,
     FL_OPTIM_RMSPROP,
     40.0f},
    {"image dense first float eager", "dense(16) relu dueling", 3, {5, 6, 3}, 4, 10, 0, 1.0f, 0, FL_OPTIM_SGD, 0.5f},
    {"conv then dueling uint8 graph",
     "conv(6,3,1) relu dueling",
     3,
     {7, 8, 2},
     3,
     10,
     1,
     1.0f,
     1,
     FL_OPTIM_RMSPROP,
     40.0f},
};
#define NUM_CASES (int)(sizeof CASES / sizeof CASES[0])

static void test_step_matches_cpu(void **state) {
    const dcase_t *c = *state;
    if (!have_gpu()) skip();
    print_message("case: %s\n", c->name);
    run_case(c, 100 + (uint64_t)(c - CASES));
}

/* A NaN reward makes the loss NaN: both backends answer FL_OUT_OF_RANGE and leave the
 * parameters and the optimizer alone; on the GPU this goes through a replayed graph. */
static void test_nonfinite_skips(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    static const dcase_t c = {"nan skip", MLP, 1, {4}, 2, 16, 0, 1.0f, 1, FL_OPTIM_RMSPROP, 40.0f};
    pair_t p;
    pair_create(&p, &c, 200);
    float *prio_gpu = host(16), *prio_cpu = host(16), *before = host(p.n), *after = host(p.n);
    fl_cuda_dqn_slot_t s;
    fl_dqn_stats_t sc;
    fl_cuda_dqn_stats_t sg;
    for (int k = 0; k < 2; k++) { /* two good steps first: the warm-up, then the capture */
        fl_dqn_batch_t g = make_batch(&p, 0, 16, &s);
        OK(fl_dqn_step(p.dqn, p.online, p.target, p.opt, &g, prio_cpu, &sc, E));
        OK(fl_cuda_dqn_step(p.gpu, 0, 16, prio_gpu, &sg, E));
    }
    assert_int_equal(fl_cuda_dqn_graphs(p.gpu), 1);
    fl_dqn_batch_t b;
    b = make_batch(&p, 1, 16, &s);
    s.rewards[3] = NAN;
    OK(fl_cuda_dqn_get_params(p.gpu, 0, before, p.n, E));
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_dqn_step(p.dqn, p.online, p.target, p.opt, &b, prio_cpu, &sc, &e), FL_OUT_OF_RANGE);
    assert_int_equal(fl_cuda_dqn_step(p.gpu, 1, 16, prio_gpu, &sg, &e), FL_OUT_OF_RANGE);
    assert_true(isnan(sg.loss));
    assert_int_equal(fl_cuda_dqn_graphs(p.gpu), 1); /* the skip came from a replayed graph */
    OK(fl_cuda_dqn_get_params(p.gpu, 0, after, p.n, E));
    check_exact("parameters after a skipped step", after, before, p.n);
    int64_t steps = 0;
    float *st = host(fl_cuda_dqn_optim_state_size(p.gpu));
    OK(fl_cuda_dqn_get_optim_state(p.gpu, st, fl_cuda_dqn_optim_state_size(p.gpu), &steps, E));
    assert_int_equal(steps, 2);
    /* and the next good step matches the CPU again */
    b = make_batch(&p, 0, 16, &s);
    OK(fl_dqn_step(p.dqn, p.online, p.target, p.opt, &b, prio_cpu, &sc, E));
    OK(fl_cuda_dqn_step(p.gpu, 0, 16, prio_gpu, &sg, E));
    check_step_outputs(&p, 16, prio_gpu, prio_cpu, &sg, &sc);
    check_optim_state(&p);
    free(prio_gpu), free(prio_cpu), free(before), free(after), free(st);
    pair_destroy(&p);
}

/* compute (gradient to the host) + apply (clip + optimizer) == step, on twin objects;
 * and step_from a page-locked replay batch (the learner's path) == step from a slot. */
static void test_compute_apply_equals_step(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    static const dcase_t c = {"compute+apply", MLP, 1, {4}, 2, 32, 0, 1.0f, 1, FL_OPTIM_ADAM, 0.5f};
    pair_t p, q, r;
    pair_create(&p, &c, 300);
    pair_create(&q, &c, 300); /* same stream: the same parameters */
    pair_create(&r, &c, 300);
    float *g = host(p.n), *a = host(p.n), *bb = host(p.n), *cc = host(p.n), *prio = host(32);
    fl_replay_batch_t rb;
    assert_int_equal(fl_replay_batch_init(&rb, 32, 4 * sizeof(float)), FL_OK);
    OK(fl_cuda_host_register(rb.block, rb.block_bytes, E));
    fl_cuda_dqn_slot_t s, t, u;
    for (int k = 0; k < 3; k++) {
        make_batch(&p, 0, 32, &s);
        make_batch(&q, 0, 32, &t); /* the same draws */
        make_batch(&r, 0, 32, &u);
        memcpy(rb.obs, u.obs, 32 * rb.obs_bytes);
        memcpy(rb.next_obs, u.next_obs, 32 * rb.obs_bytes);
        memcpy(rb.actions, u.actions, 32 * sizeof(int32_t));
        memcpy(rb.rewards, u.rewards, 32 * sizeof(float));
        memcpy(rb.discounts, u.discounts, 32 * sizeof(float));
        memcpy(rb.weights, u.weights, 32 * sizeof(float));
        const fl_cuda_dqn_slot_t from = {rb.obs, rb.next_obs, rb.actions, rb.rewards, rb.discounts, rb.weights};
        fl_cuda_dqn_stats_t s1, s2, s3;
        OK(fl_cuda_dqn_step(p.gpu, 0, 32, prio, &s1, E));
        OK(fl_cuda_dqn_compute(q.gpu, 0, 32, g, prio, &s2, E));
        OK(fl_cuda_dqn_step_from(r.gpu, &from, 32, prio, &s3, E));
        float norm = 0;
        OK(fl_cuda_dqn_apply(q.gpu, g, &norm, E));
        CHECK_CLOSE(norm, s1.grad_norm, 0.0, 1e-6, "norm of apply vs step %d", k);
        CHECK_CLOSE(s3.loss, s1.loss, 0.0, 1e-6, "loss of step_from vs step %d", k);
        OK(fl_cuda_dqn_get_params(p.gpu, 0, a, p.n, E));
        OK(fl_cuda_dqn_get_params(q.gpu, 0, bb, p.n, E));
        OK(fl_cuda_dqn_get_params(r.gpu, 0, cc, p.n, E));
        check_close_all("compute+apply vs step", bb, a, p.n, 1e-7, 1e-6);
        check_close_all("step_from vs step", cc, a, p.n, 1e-7, 1e-6);
    }
    fl_cuda_host_unregister(rb.block);
    fl_replay_batch_free(&rb);
    free(cc);
    pair_destroy(&r);
    /* a non-finite gradient is refused and changes nothing */
    g[0] = INFINITY;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_cuda_dqn_apply(q.gpu, g, NULL, &e), FL_OUT_OF_RANGE);
    OK(fl_cuda_dqn_get_params(q.gpu, 0, a, p.n, E));
    check_exact("parameters after a refused apply", a, bb, p.n);
    free(g), free(a), free(bb), free(prio);
    pair_destroy(&p);
    pair_destroy(&q);
}

/* upload(k+1) while update k runs, then finish(k), launch(k+1): the same updates as
 * step after step, in the same order. */
static void test_pipeline_equals_steps(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    static const dcase_t c = {"pipeline", MLP, 1, {4}, 2, 32, 0, 1.0f, 1, FL_OPTIM_RMSPROP, 0.5f};
    pair_t p, r;
    pair_create(&p, &c, 301);
    pair_create(&r, &c, 301);
    float *a = host(p.n), *b = host(p.n), *prio_p = host(4 * 32), *prio_r = host(32);
    fl_cuda_dqn_stats_t sp[4], sr;
    fl_cuda_dqn_slot_t s, u;
    for (int k = 0; k < 4; k++) {
        make_batch(&p, 0, 32, &s);
        OK(fl_cuda_dqn_step(p.gpu, 0, 32, prio_p + 32 * k, &sp[k], E));
    }
    int stage = -1;
    make_batch(&r, 0, 32, &u);
    OK(fl_cuda_dqn_upload(r.gpu, &u, 32, &stage, E));
    OK(fl_cuda_dqn_launch(r.gpu, stage, E));
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_cuda_dqn_step(r.gpu, 0, 32, NULL, NULL, &e), FL_FAILED_PRECONDITION); /* one in flight */
    assert_int_equal(fl_cuda_dqn_apply(r.gpu, a, NULL, &e), FL_FAILED_PRECONDITION);          /* nor an apply */
    for (int k = 1; k <= 4; k++) {
        if (k < 4) {
            make_batch(&r, k % 2, 32, &u);
            OK(fl_cuda_dqn_upload(r.gpu, &u, 32, &stage, E));
        }
        OK(fl_cuda_dqn_finish(r.gpu, prio_r, &sr, E));
        CHECK_CLOSE(sr.loss, sp[k - 1].loss, 0.0, 1e-6, "loss of pipelined update %d", k - 1);
        check_close_all("pipelined priorities", prio_r, prio_p + 32 * (k - 1), 32, 1e-7, 1e-6);
        if (k < 4) OK(fl_cuda_dqn_launch(r.gpu, stage, E));
    }
    assert_int_equal(fl_cuda_dqn_finish(r.gpu, prio_r, &sr, &e), FL_FAILED_PRECONDITION); /* nothing launched */
    OK(fl_cuda_dqn_get_params(p.gpu, 0, a, p.n, E));
    OK(fl_cuda_dqn_get_params(r.gpu, 0, b, p.n, E));
    check_close_all("pipelined vs stepped parameters", b, a, p.n, 1e-7, 1e-6);
    free(a), free(b), free(prio_p), free(prio_r);
    pair_destroy(&p);
    pair_destroy(&r);
}

static void test_snapshot(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    static const dcase_t c = {"snapshot", MINATAR, 3, {10, 10, 4}, 6, 8, 1, 255.0f, 1, FL_OPTIM_RMSPROP, 40.0f};
    pair_t p;
    pair_create(&p, &c, 400);
    const float *h = NULL;
    int ready = 0;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_cuda_dqn_snapshot_poll(p.gpu, &h, &ready, &e), FL_FAILED_PRECONDITION);
    fl_cuda_dqn_slot_t s;
    make_batch(&p, 0, 8, &s);
    OK(fl_cuda_dqn_step(p.gpu, 0, 8, NULL, NULL, E));
    OK(fl_cuda_dqn_snapshot_begin(p.gpu, E));
    float *want = host(p.n);
    OK(fl_cuda_dqn_get_params(p.gpu, 0, want, p.n, E));
    /* a step after begin must not leak into the snapshot */
    make_batch(&p, 1, 8, &s);
    OK(fl_cuda_dqn_step(p.gpu, 1, 8, NULL, NULL, E));
    const time_t t0 = time(NULL);
    do {
        OK(fl_cuda_dqn_snapshot_poll(p.gpu, &h, &ready, E));
    } while (!ready && time(NULL) - t0 < 30);
    assert_true(ready);
    assert_non_null(h);
    check_exact("snapshot", h, want, p.n);
    free(want);
    pair_destroy(&p);
}

/* Optimizer state and parameters from CPU training load into the GPU object (the
 * checkpoint path), and the next update matches the CPU's. */
static void test_optim_state_interchange(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    static const dcase_t c = {"interchange", MLP, 1, {4}, 2, 32, 0, 1.0f, 1, FL_OPTIM_ADAM, 40.0f};
    pair_t p;
    pair_create(&p, &c, 500);
    fl_cuda_dqn_slot_t s;
    fl_dqn_stats_t sc;
    for (int k = 0; k < 4; k++) { /* CPU-only training */
        fl_dqn_batch_t b = make_batch(&p, 0, 32, &s);
        OK(fl_dqn_step(p.dqn, p.online, p.target, p.opt, &b, NULL, &sc, E));
    }
    OK(fl_cuda_dqn_set_params(p.gpu, fl_qnet_params(p.online), fl_qnet_params(p.target), p.n, E));
    OK(fl_cuda_dqn_set_optim_state(p.gpu, fl_optim_state(p.opt), fl_optim_state_size(p.opt), fl_optim_steps(p.opt), E));
    check_optim_state(&p);
    float *start = host(p.n), *prio_gpu = host(32), *prio_cpu = host(32);
    memcpy(start, fl_qnet_params(p.online), p.n * sizeof(float));
    fl_dqn_batch_t b = make_batch(&p, 1, 32, &s);
    fl_cuda_dqn_stats_t sg;
    OK(fl_dqn_step(p.dqn, p.online, p.target, p.opt, &b, prio_cpu, &sc, E));
    OK(fl_cuda_dqn_step(p.gpu, 1, 32, prio_gpu, &sg, E));
    check_step_outputs(&p, 32, prio_gpu, prio_cpu, &sg, &sc);
    check_params(&p, start);
    check_optim_state(&p);
    /* the learning-rate schedule hook: lr 0 freezes the parameters, also in the graph
     * captured (second step) and replayed (third) after the change */
    OK(fl_cuda_dqn_set_lr(p.gpu, 0.0f, E));
    float *x = host(p.n), *y = host(p.n);
    OK(fl_cuda_dqn_get_params(p.gpu, 0, x, p.n, E));
    for (int k = 0; k < 2; k++) {
        make_batch(&p, 0, 32, &s);
        OK(fl_cuda_dqn_step(p.gpu, 0, 32, NULL, NULL, E));
    }
    assert_int_equal(fl_cuda_dqn_graphs(p.gpu), 1);
    OK(fl_cuda_dqn_get_params(p.gpu, 0, y, p.n, E));
    check_exact("parameters with lr 0", y, x, p.n);
    free(start), free(prio_gpu), free(prio_cpu), free(x), free(y);
    pair_destroy(&p);
}

static void test_bad_arguments(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    static const dcase_t c = {"errors", MLP, 1, {4}, 2, 8, 0, 1.0f, 0, FL_OPTIM_SGD, 40.0f};
    pair_t p;
    pair_create(&p, &c, 600);
    fl_cuda_dqn_slot_t s;
    make_batch(&p, 0, 8, &s);
    fl_err_t e;
    fl_err_init(&e);
    s.actions[5] = 2;
    assert_int_equal(fl_cuda_dqn_step(p.gpu, 0, 8, NULL, NULL, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "actions[5]"));
    s.actions[5] = 0;
    assert_int_equal(fl_cuda_dqn_step(p.gpu, 0, 9, NULL, NULL, &e), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_cuda_dqn_step(p.gpu, 0, 0, NULL, NULL, &e), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_cuda_dqn_step(p.gpu, 2, 8, NULL, NULL, &e), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_cuda_dqn_slot(p.gpu, -1, &s, &e), FL_INVALID_ARGUMENT);
    float one = 0;
    assert_int_equal(fl_cuda_dqn_set_params(p.gpu, &one, NULL, 1, &e), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_cuda_dqn_get_params(p.gpu, 0, &one, 1, &e), FL_INVALID_ARGUMENT);
    pair_destroy(&p);

    fl_cuda_dqn_config_t g;
    fl_cuda_dqn_config_init(&g);
    g.spec = "dense(4) conv(3,3,1)";
    g.num_actions = 2;
    fl_cuda_dqn_t *d = (fl_cuda_dqn_t *)&g; /* must be reset to NULL */
    assert_int_equal(fl_cuda_dqn_create(&g, &d, &e), FL_INVALID_ARGUMENT);
    assert_null(d);
    g.spec = "dense(4)";
    g.obs.dtype = FL_DTYPE_INT64;
    assert_int_equal(fl_cuda_dqn_create(&g, &d, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "obs_dtype"));
    fl_cuda_dqn_destroy(NULL);
}

#endif /* FLEET_HAVE_CUDA */

/* Runs everywhere: without a GPU, create must say so (FL_NO_DEVICE), not crash. */
static void test_create_without_gpu(void **state) {
    (void)state;
#ifdef FLEET_HAVE_CUDA
    int n = 0;
    fl_err_t e;
    fl_err_init(&e);
    if (fl_cuda_device_count(&n, &e) == FL_OK) {
        print_message("SKIP: a GPU is present; this test covers machines without one\n");
        skip();
    }
    /* create builds its layer table from qnet's before it looks for a device: a
     * disagreement would answer FL_INTERNAL here */
    static const struct {
        const char *spec;
        int rank, shape[3];
    } specs[] = {{"dense(8) relu dueling", 1, {4}},
                 {"", 1, {3}},
                 {"dense(32) relu", 1, {7}},
                 {MLP, 1, {4}},
                 {MINATAR, 3, {10, 10, 4}},
                 {NATURE, 3, {84, 84, 4}},
                 {"conv(8,3,2,1) relu conv(8,3,1) relu dense(32) relu dueling", 3, {9, 11, 3}},
                 {"relu conv(4,3,1) dense(8) relu", 3, {5, 6, 2}},
                 {"flatten dense(6) relu dueling", 3, {4, 4, 2}},
                 {"dense(16) relu dueling", 3, {5, 6, 3}},
                 {"conv(6,3,1) relu dueling", 3, {7, 8, 2}}};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        fl_cuda_dqn_config_t g;
        fl_cuda_dqn_config_init(&g);
        g.spec = specs[i].spec;
        g.obs = fl_obs_spec_make(FL_DTYPE_UINT8, specs[i].rank, specs[i].shape);
        g.num_actions = 3;
        g.max_batch = 4;
        fl_cuda_dqn_t *d = (fl_cuda_dqn_t *)&g;
        fl_err_init(&e);
        const fl_status st = fl_cuda_dqn_create(&g, &d, &e);
        if (st != FL_NO_DEVICE) fail_msg("spec \"%s\": %s (%s)", specs[i].spec, fl_status_name(st), e.msg);
        assert_null(d);
        assert_true(strlen(e.msg) > 0);
    }
    fl_cuda_dqn_destroy(NULL);
#else
    print_message("SKIP: fleet was built without CUDA\n");
    skip();
#endif
}

int main(void) {
    openblas_set_num_threads(1);
#ifdef FLEET_HAVE_CUDA
    if (!have_gpu()) return 77; /* CTest's SKIP_RETURN_CODE (tests/CMakeLists.txt): skipped */
#else
    print_message("SKIP: fleet was built without CUDA (FLEET_CUDA=OFF or nvcc/cuDNN not found)\n");
    return 77;
#endif
    pick_seed();
    print_message("seed %llu (set FLEET_TEST_SEED to repeat)\n", (unsigned long long)g_seed);
#ifdef FLEET_HAVE_CUDA
    struct CMUnitTest tests[NUM_CASES + 7];
    int k = 0;
    for (int i = 0; i < NUM_CASES; i++) {
        tests[k] = (struct CMUnitTest)cmocka_unit_test_prestate(test_step_matches_cpu, (void *)&CASES[i]);
        tests[k].name = CASES[i].name;
        k++;
    }
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_nonfinite_skips);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_compute_apply_equals_step);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_pipeline_equals_steps);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_snapshot);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_optim_state_interchange);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_bad_arguments);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_create_without_gpu);
    return _cmocka_run_group_tests("test_learner_cuda_gpu", tests, (size_t)k, NULL, NULL);
#else
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_create_without_gpu)};
    return cmocka_run_group_tests(tests, NULL, NULL);
#endif
}
