/* test_kernels_optim: optimizers and gradient clipping of kernels/optim.h.
 *
 * The update rules are checked against steps worked out by hand (in double) for three
 * elements over two steps; clipping and checkpoint round trips use random vectors that
 * are fresh each run (the seed is printed on failure; FLEET_TEST_SEED replays it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cblas.h>
#include <float.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/rng.h"
#include "kernels/fpmode.h"
#include "kernels/optim.h"

#include "seed_util.h"

static void fill_uniform(fl_rng_t *r, float *a, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) a[i] = (float)fl_rng_uniform(r, lo, hi);
}

static double norm_d(const float *g, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return sqrt(s);
}

/* The same three parameters and two gradients for every optimizer. */
static const float P0[3] = {1.0f, -2.0f, 0.5f};
static const float G1[3] = {0.5f, -1.0f, 2.0f};
static const float G2[3] = {0.1f, 0.3f, -4.0f};

/* The three hand-worked elements repeated over 35 parameters, so that both the blocked
 * body and the tail of the update loops are checked. */
enum { REP = 35 };

static void run_two_steps(const fl_optim_config_t *cfg, const double want1[3], const double want2[3]) {
    fl_optim_t *o = NULL;
    fl_err_t err = {0};
    assert_int_equal(fl_optim_create(cfg, REP, &o, &err), FL_OK);
    float p[REP], g1[REP], g2[REP];
    for (int i = 0; i < REP; i++) p[i] = P0[i % 3], g1[i] = G1[i % 3], g2[i] = G2[i % 3];
    fl_optim_step(o, p, g1);
    for (int i = 0; i < REP; i++)
        CHECK_CLOSE(p[i], want1[i % 3], 1e-7, 2e-6, "%s step 1 p[%d]", fl_optim_kind_name(cfg->kind), i);
    fl_optim_step(o, p, g2);
    for (int i = 0; i < REP; i++)
        CHECK_CLOSE(p[i], want2[i % 3], 1e-7, 2e-6, "%s step 2 p[%d]", fl_optim_kind_name(cfg->kind), i);
    assert_int_equal(fl_optim_steps(o), 2);
    fl_optim_destroy(o);
}

static void test_sgd_momentum(void **state) {
    /* lr 0.1, momentum 0.9: buf1 = g1, p1 = p0 - 0.1 g1 = (0.95, -1.9, 0.3);
     * buf2 = 0.9 g1 + g2 = (0.55, -0.6, -2.2), p2 = p1 - 0.1 buf2 = (0.895, -1.84, 0.52) */
    fl_optim_config_t cfg = {.kind = FL_OPTIM_SGD, .lr = 0.1f, .momentum = 0.9f};
    const double w1[3] = {0.95, -1.9, 0.3}, w2[3] = {0.895, -1.84, 0.52};
    run_two_steps(&cfg, w1, w2);
}

static void test_adam(void **state) {
    /* lr 0.1, betas 0.9/0.999, eps 1e-8.
     * step 1: m = 0.1 g, v = 0.001 g^2, bias-corrected m/sqrt(v) = sign(g): p -= 0.1 sign(g)
     *         (less the eps term, ~1e-9).
     * step 2, element 0: m = 0.9*0.05 + 0.1*0.1 = 0.055; v = 0.999*0.00025 + 0.001*0.01 = 0.00025975;
     *         lr/(1-0.9^2) = 0.526316; sqrt(v)/sqrt(1-0.999^2) = 0.360473; p = 0.9 - 0.080304. */
    fl_optim_config_t cfg = {.kind = FL_OPTIM_ADAM, .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    const double w1[3] = {0.900000002, -1.900000001, 0.4000000005};
    const double w2[3] = {0.8196959063846517, -1.8572151424292265, 0.4366103530878296};
    run_two_steps(&cfg, w1, w2);
}

static void test_rmsprop_centered(void **state) {
    /* lr 0.01, decay 0.9, eps 1e-6, ms starts at 1 (TensorFlow), mg and mom at 0.
     * step 1, element 0: ms = 0.9 + 0.1*0.25 = 0.925; mg = 0.05; ms - mg^2 = 0.9225;
     *         mom = 0.01*0.5/sqrt(0.922501) = 0.0052058; p = 1 - 0.0052058. */
    fl_optim_config_t cfg = {.kind = FL_OPTIM_RMSPROP, .lr = 0.01f, .decay = 0.9f, .eps = 1e-6f, .momentum = 0.0f};
    const double w1[3] = {0.9947942107586116, -1.9899496269233525, 0.48218259094290405};
    const double w2[3] = {0.9936968827691102, -1.9931024584878239, 0.5064290187369044};
    run_two_steps(&cfg, w1, w2);
    /* with momentum 0.5 the second step also carries half of the first */
    cfg.momentum = 0.5f;
    const double m2[3] = {0.991093988148416, -1.9880772719495001, 0.4975203142083564};
    run_two_steps(&cfg, w1, m2);
}

static void test_rmsprop_state_layout(void **state) {
    fl_optim_config_t cfg = fl_optim_config_default(FL_OPTIM_RMSPROP);
    CHECK_CLOSE(cfg.lr, 0.00025 / 4, 1e-12, 1e-6, "ape-x lr");
    CHECK_CLOSE(cfg.decay, 0.95, 0, 1e-6, "ape-x decay");
    CHECK_CLOSE(cfg.eps, 1.5e-7, 0, 1e-6, "ape-x eps");
    assert_true(cfg.momentum == 0.0f);
    fl_optim_t *o = NULL;
    assert_int_equal(fl_optim_create(&cfg, 5, &o, NULL), FL_OK);
    assert_int_equal(fl_optim_num_slots(o), 3);
    assert_int_equal(fl_optim_state_size(o), 15);
    assert_string_equal(fl_optim_slot_name(o, 0), "ms");
    assert_string_equal(fl_optim_slot_name(o, 2), "mom");
    assert_null(fl_optim_slot_name(o, 3));
    const float *s = fl_optim_state(o);
    for (int i = 0; i < 5; i++) assert_true(s[i] == 1.0f); /* ms */
    for (int i = 5; i < 15; i++) assert_true(s[i] == 0.0f);
    fl_optim_destroy(o);
    fl_optim_destroy(NULL);
}

/* A restored optimizer (state buffer + step count) continues exactly like the original. */
static void test_state_round_trip(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 11);
    const fl_optim_kind kinds[] = {FL_OPTIM_SGD, FL_OPTIM_ADAM, FL_OPTIM_RMSPROP};
    enum { N = 37 };
    for (int k = 0; k < 3; k++) {
        fl_optim_config_t cfg = fl_optim_config_default(kinds[k]);
        fl_optim_t *a = NULL, *b = NULL;
        assert_int_equal(fl_optim_create(&cfg, N, &a, NULL), FL_OK);
        assert_int_equal(fl_optim_create(&cfg, N, &b, NULL), FL_OK);
        float pa[N], pb[N], g[N];
        fill_uniform(&r, pa, N, -1, 1);
        for (int s = 0; s < 3; s++) {
            fill_uniform(&r, g, N, -1, 1);
            fl_optim_step(a, pa, g);
        }
        memcpy(pb, pa, sizeof pa);
        assert_int_equal(fl_optim_state_size(a), fl_optim_state_size(b));
        memcpy(fl_optim_state(b), fl_optim_state(a), fl_optim_state_size(a) * sizeof(float));
        fl_optim_set_steps(b, fl_optim_steps(a));
        fill_uniform(&r, g, N, -1, 1);
        fl_optim_step(a, pa, g);
        fl_optim_step(b, pb, g);
        assert_memory_equal(pa, pb, sizeof pa);
        assert_int_equal(fl_optim_steps(b), 4);
        fl_optim_destroy(a);
        fl_optim_destroy(b);
    }
}

/* The step functions are compiled for several vector widths (kernels/optim.c), and the
 * loader picks the widest this CPU has. Whatever it picked must round exactly as the rules
 * written one element at a time: the same float operations in the same order, so the
 * same bits (no FMA contraction in ISO C; vector square root and division are IEEE). */
static void reference_step(const fl_optim_config_t *c, int64_t t, float *p, const float *g, float *st, size_t n) {
    if (c->kind == FL_OPTIM_SGD) {
        for (size_t j = 0; j < n; j++) {
            st[j] = c->momentum * st[j] + g[j];
            p[j] -= c->lr * st[j];
        }
    } else if (c->kind == FL_OPTIM_ADAM) {
        float *m = st, *v = st + n;
        const float step_size = (float)(c->lr / (1.0 - pow(c->beta1, (double)t)));
        const float inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow(c->beta2, (double)t)));
        for (size_t j = 0; j < n; j++) {
            m[j] = c->beta1 * m[j] + (1.0f - c->beta1) * g[j];
            v[j] = c->beta2 * v[j] + (1.0f - c->beta2) * g[j] * g[j];
            p[j] -= step_size * m[j] / (sqrtf(v[j]) * inv_sqrt_bc2 + c->eps);
        }
    } else {
        float *ms = st, *mg = st + n, *mom = st + 2 * n;
        for (size_t j = 0; j < n; j++) {
            ms[j] = c->decay * ms[j] + (1.0f - c->decay) * g[j] * g[j];
            mg[j] = c->decay * mg[j] + (1.0f - c->decay) * g[j];
            const float d = ms[j] - mg[j] * mg[j];
            const float var = d < 0.0f ? 0.0f : d;
            mom[j] = c->momentum * mom[j] + c->lr * g[j] / sqrtf(var + c->eps);
            p[j] -= mom[j];
        }
    }
}

static void test_bit_exact_vectors(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 12);
    enum { N = 1000 + 13 }; /* whole vectors of every width, and a tail */
    static float p[N], want[N], g[N], st[3 * N];
    for (int k = 0; k < fl_optim_num_kinds(); k++) {
        fl_optim_config_t cfg = fl_optim_config_default((fl_optim_kind)k);
        if (k == FL_OPTIM_SGD) cfg.momentum = 0.9f;
        if (k == FL_OPTIM_RMSPROP) cfg.momentum = 0.5f;
        fl_optim_t *o = NULL;
        assert_int_equal(fl_optim_create(&cfg, N, &o, NULL), FL_OK);
        fill_uniform(&r, p, N, -1, 1);
        memcpy(want, p, sizeof p);
        memcpy(st, fl_optim_state(o), fl_optim_state_size(o) * sizeof(float));
        for (int t = 1; t <= 4; t++) {
            fill_uniform(&r, g, N, -2, 2);
            g[t] = 0.0f; /* a zero gradient: RMSProp's clamp of a negative variance */
            fl_optim_step(o, p, g);
            reference_step(&cfg, t, want, g, st, N);
            if (memcmp(p, want, sizeof p) != 0)
                for (int i = 0; i < N; i++)
                    if (p[i] != want[i])
                        fail_msg("%s step %d p[%d] = %.9g, one element at a time %.9g (seed %llu)",
                                 fl_optim_kind_name(cfg.kind), t, i, (double)p[i], (double)want[i],
                                 (unsigned long long)g_seed);
            assert_memory_equal(fl_optim_state(o), st, fl_optim_state_size(o) * sizeof(float));
        }
        fl_optim_destroy(o);
    }
}

/* Vectors long enough to run in parts on several threads (optim.h): the same bits as one
 * element at a time, and the same norm, at 1, 2 and 3 OpenBLAS threads. */
static void test_threads_same_bits(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 13);
    enum { N = 3 * 32768 + 1001 };
    float *p0 = malloc(N * sizeof(float)), *p = malloc(N * sizeof(float)), *want = malloc(N * sizeof(float));
    float *g = malloc(N * sizeof(float)), *st = malloc(3 * (size_t)N * sizeof(float));
    float *g2 = malloc(N * sizeof(float));
    assert_non_null(p0), assert_non_null(p), assert_non_null(want), assert_non_null(g), assert_non_null(st);
    assert_non_null(g2);
    const int before = openblas_get_num_threads();
    fill_uniform(&r, p0, N, -1, 1);
    for (int k = 0; k < fl_optim_num_kinds(); k++) {
        fl_optim_config_t cfg = fl_optim_config_default((fl_optim_kind)k);
        if (k == FL_OPTIM_SGD) cfg.momentum = 0.9f;
        for (int threads = 1; threads <= 3; threads++) {
            openblas_set_num_threads(threads);
            fl_optim_t *o = NULL;
            assert_int_equal(fl_optim_create(&cfg, N, &o, NULL), FL_OK);
            memcpy(p, p0, N * sizeof(float));
            memcpy(want, p0, N * sizeof(float));
            memcpy(st, fl_optim_state(o), fl_optim_state_size(o) * sizeof(float));
            fl_rng_t gr;
            fl_rng_init_stream(&gr, g_seed, 14); /* the same gradients at every thread count */
            for (int t = 1; t <= 2; t++) {
                fill_uniform(&gr, g, N, -2, 2);
                fl_optim_step(o, p, g);
                reference_step(&cfg, t, want, g, st, N);
            }
            if (memcmp(p, want, N * sizeof(float)) != 0)
                fail_msg("%s at %d threads: not the bits of one element at a time (seed %llu)",
                         fl_optim_kind_name(cfg.kind), threads, (unsigned long long)g_seed);
            assert_memory_equal(fl_optim_state(o), st, fl_optim_state_size(o) * sizeof(float));
            fl_optim_destroy(o);
        }
    }
    float norms[3];
    double ss = 0;
    for (int i = 0; i < N; i++) ss += (double)g[i] * g[i];
    for (int threads = 1; threads <= 3; threads++) {
        openblas_set_num_threads(threads);
        memcpy(g2, g, N * sizeof(float));
        norms[threads - 1] = fl_clip_grad_norm(g2, N, 1.0f);
        CHECK_CLOSE(norms[threads - 1], sqrt(ss), 0, 1e-6, "norm at %d threads", threads);
        if (threads > 1) {
            assert_memory_equal(&norms[threads - 1], &norms[0], sizeof(float));
            assert_memory_equal(g2, want, N * sizeof(float)); /* the clipped vector: the same bits too */
        }
        memcpy(want, g2, N * sizeof(float));
    }
    openblas_set_num_threads(before);
    free(p0), free(p), free(want), free(g), free(st), free(g2);
}

static void test_config_errors(void **state) {
    fl_optim_t *o = (fl_optim_t *)(uintptr_t)1; /* must come back NULL */
    fl_err_t err = {0};
    fl_optim_config_t cfg = fl_optim_config_default(FL_OPTIM_ADAM);
    cfg.beta1 = 1.0f;
    assert_int_equal(fl_optim_create(&cfg, 4, &o, &err), FL_INVALID_ARGUMENT);
    assert_null(o);
    assert_non_null(strstr(err.msg, "beta1"));
    cfg = fl_optim_config_default(FL_OPTIM_RMSPROP);
    cfg.lr = -1.0f;
    assert_int_equal(fl_optim_create(&cfg, 4, &o, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "lr"));
    cfg = fl_optim_config_default(FL_OPTIM_RMSPROP);
    cfg.decay = NAN;
    assert_int_equal(fl_optim_create(&cfg, 4, &o, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "decay"));
    cfg = fl_optim_config_default(FL_OPTIM_SGD);
    assert_int_equal(fl_optim_create(&cfg, 0, &o, &err), FL_INVALID_ARGUMENT);

    fl_optim_kind kind;
    assert_int_equal(fl_optim_kind_from_name("rmsprop", &kind, NULL), FL_OK);
    assert_int_equal(kind, FL_OPTIM_RMSPROP);
    assert_int_equal(fl_optim_kind_from_name("adamw", &kind, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "adamw"));
}

/* The one mapping from a run's optimizer settings: each kind takes its own fields (as
 * float) and keeps its defaults for the rest; RMSProp runs without momentum. Every kind
 * has a fresh state as create makes it, a name that parses back, and a GPU kernel. */
static void test_config_from_settings(void **state) {
    const fl_optim_settings_t base = {FL_OPTIM_SGD, 0.125, 0.5, 0.8, 0.99, 1e-6, 0.9, 1e-5};
    fl_optim_settings_t s = base;
    fl_optim_config_t c = fl_optim_config_from(&s);
    fl_optim_config_t d = fl_optim_config_default(FL_OPTIM_SGD);
    assert_int_equal(c.kind, FL_OPTIM_SGD);
    assert_true(c.lr == 0.125f && c.momentum == 0.5f);
    assert_true(c.beta1 == d.beta1 && c.beta2 == d.beta2 && c.eps == d.eps && c.decay == d.decay);
    s.kind = FL_OPTIM_ADAM;
    c = fl_optim_config_from(&s);
    d = fl_optim_config_default(FL_OPTIM_ADAM);
    assert_true(c.lr == 0.125f && c.beta1 == 0.8f && c.beta2 == 0.99f && c.eps == (float)1e-6);
    assert_true(c.momentum == d.momentum && c.decay == d.decay);
    s.kind = FL_OPTIM_RMSPROP;
    c = fl_optim_config_from(&s);
    d = fl_optim_config_default(FL_OPTIM_RMSPROP);
    assert_true(c.lr == 0.125f && c.decay == 0.9f && c.eps == (float)1e-5 && c.momentum == 0.0f);
    assert_true(c.beta1 == d.beta1 && c.beta2 == d.beta2);

    assert_int_equal(fl_optim_num_kinds(), 3);
    for (int k = 0; k < fl_optim_num_kinds(); k++) {
        fl_optim_kind back;
        assert_int_equal(fl_optim_kind_from_name(fl_optim_kind_name((fl_optim_kind)k), &back, NULL), FL_OK);
        assert_int_equal(back, k);
        assert_true(fl_optim_cuda_kernel((fl_optim_kind)k) >= 0);
        fl_optim_t *o = NULL;
        const fl_optim_config_t oc = fl_optim_config_default((fl_optim_kind)k);
        assert_int_equal(fl_optim_create(&oc, 5, &o, NULL), FL_OK);
        float fresh[FL_OPTIM_MAX_SLOTS * 5];
        memset(fresh, 0xff, sizeof fresh);
        fl_optim_state_init((fl_optim_kind)k, fresh, 5);
        assert_memory_equal(fresh, fl_optim_state(o), fl_optim_state_size(o) * sizeof(float));
        fl_optim_destroy(o);
    }
    assert_string_equal(fl_optim_kind_name((fl_optim_kind)fl_optim_num_kinds()), "invalid");
    assert_int_equal(fl_optim_cuda_kernel((fl_optim_kind)fl_optim_num_kinds()), -1);
    fl_err_t err = {0};
    fl_optim_kind kind;
    assert_int_equal(fl_optim_kind_from_name("lion", &kind, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "expected sgd, adam or rmsprop"));
}

static void test_clip_grad_norm(void **state) {
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 12);
    enum { N = 1000 };
    float g[N], orig[N];
    fill_uniform(&r, orig, N, -2, 2);
    const double norm = norm_d(orig, N);

    /* clipped: returns the norm before, leaves a vector of norm max_norm in the same direction */
    memcpy(g, orig, sizeof g);
    const float max_norm = (float)(norm * fl_rng_uniform(&r, 0.1, 0.9));
    CHECK_CLOSE(fl_clip_grad_norm(g, N, max_norm), norm, 0, 1e-6, "norm before clipping");
    CHECK_CLOSE(norm_d(g, N), max_norm, 0, 1e-6, "norm after clipping");
    for (int i = 0; i < N; i++) CHECK_CLOSE(g[i], orig[i] * (max_norm / norm), 1e-7, 1e-5, "clipped g[%d]", i);

    /* below the threshold: untouched */
    memcpy(g, orig, sizeof g);
    CHECK_CLOSE(fl_clip_grad_norm(g, N, (float)(norm * 1.5)), norm, 0, 1e-6, "norm, not clipped");
    assert_memory_equal(g, orig, sizeof g);

    /* max_norm <= 0: no clipping, still the norm */
    CHECK_CLOSE(fl_clip_grad_norm(g, N, 0.0f), norm, 0, 1e-6, "norm, clipping off");
    assert_memory_equal(g, orig, sizeof g);

    /* a non-finite gradient is reported, not smeared over the others */
    g[7] = INFINITY;
    assert_true(isinf(fl_clip_grad_norm(g, N, 1.0f)));
    assert_true(g[8] == orig[8]);
}

static void *flushed_in_thread(void *arg) {
    *(int *)arg = fl_fp_denormals_flushed();
    return NULL;
}

/* Adam's first moments after one gradient of 1e-3 on every element and then 800 steps of
 * 0 (each step multiplies them by beta1 = 0.9: below FLT_MIN from about step 740, 0 after
 * about 890), over a vector of two parts that run on two threads: 1 when one is a
 * denormal, 0 when all are 0. */
static int adam_leaves_denormals(void) {
    enum { N = 2 * 32768 + 16 };
    fl_optim_config_t c = {.kind = FL_OPTIM_ADAM, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    fl_optim_t *o = NULL;
    assert_int_equal(fl_optim_create(&c, N, &o, NULL), FL_OK);
    float *p = calloc(N, sizeof *p), *g = malloc(N * sizeof *g);
    assert_non_null(p);
    assert_non_null(g);
    for (int i = 0; i < N; i++) g[i] = 1e-3f;
    fl_optim_step(o, p, g);
    memset(g, 0, N * sizeof *g);
    for (int s = 0; s < 800; s++) fl_optim_step(o, p, g);
    /* read as bits: with denormals flushed, comparing one to 0 would say equal */
    const float *m = fl_optim_state(o);
    int denormal = 0, first = -1, last = -1;
    for (int i = 0; i < N; i++) {
        uint32_t b;
        memcpy(&b, &m[i], sizeof b);
        const int d = (b & 0x7f800000u) == 0 && (b & 0x007fffffu) != 0;
        denormal |= d;
        if (i == 0) first = d;
        if (i == N - 1) last = d;
    }
    assert_int_equal(first, last); /* the first part, on the calling thread, and the last one alike */
    free(p);
    free(g);
    fl_optim_destroy(o);
    return denormal;
}

/* Flushing denormals to zero (kernels/fpmode.h): off, a product below FLT_MIN is a
 * denormal and Adam's decaying moments pass through them; on (where the CPU has the
 * mode), the product is 0, a denormal input counts as 0, a thread started afterwards
 * inherits the mode, and Adam's moments on both of the step's threads go straight to 0. */
static void test_flush_denormals(void **state) {
    (void)state;
    const int threads = openblas_get_num_threads();
    openblas_set_num_threads(2);
    volatile float tiny = FLT_MIN, half = 0.5f, big = 1073741824.0f; /* 2^30 */
    uint32_t one_bit = 1;
    float smallest;
    memcpy(&smallest, &one_bit, sizeof smallest); /* 1.4e-45, the smallest denormal */
    volatile float den = smallest;

    fl_fp_flush_denormals(0);
    assert_false(fl_fp_denormals_flushed());
    assert_true(tiny * half > 0.0f);
    assert_true(den * big > 0.0f);
    assert_int_equal(adam_leaves_denormals(), 1);

    if (!fl_fp_flush_denormals(1)) {
        openblas_set_num_threads(threads);
        skip();
    }
    assert_true(fl_fp_denormals_flushed());
    assert_true(tiny * half == 0.0f);
    assert_true(den * big == 0.0f);
    int inherited = -1;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, flushed_in_thread, &inherited), 0);
    pthread_join(th, NULL);
    assert_int_equal(inherited, 1);
    assert_int_equal(adam_leaves_denormals(), 0);

    fl_fp_flush_denormals(0);
    assert_false(fl_fp_denormals_flushed());
    assert_true(tiny * half > 0.0f);
    openblas_set_num_threads(threads);
}

int main(void) {
    openblas_set_num_threads(1);
    pick_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_momentum),         cmocka_unit_test(test_adam),
        cmocka_unit_test(test_rmsprop_centered),     cmocka_unit_test(test_rmsprop_state_layout),
        cmocka_unit_test(test_state_round_trip),     cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_config_from_settings), cmocka_unit_test(test_clip_grad_norm),
        cmocka_unit_test(test_bit_exact_vectors),    cmocka_unit_test(test_threads_same_bits),
        cmocka_unit_test(test_flush_denormals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
