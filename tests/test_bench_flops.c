/* test_bench_flops: the FLOP counts, the peak measurement, the rates of a timed loop and
 * the PyTorch scripts' line, as bench/flops.h has them.
 *
 * The counts are checked against the multiply-adds of each network written out by hand
 * (the benches' three networks, a linear model, a padded strided convolution). The peak's
 * figures depend on the machine and its load, so only their consistency is checked: the
 * formula's parts multiply to the peak, and the description names them. The rates are
 * fed made-up step times; the script's line comes from sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench/flops.h"
#include "kernels/qnet.h"

static fl_qnet_t *make(const char *spec, int rank, const int *shape, int actions) {
    fl_qnet_t *n = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_qnet_create_for_obs(spec, rank, shape, actions, 1, &n, &e), FL_OK);
    return n;
}

/* forward F and first layer F1 of a network; the update of B is B (5 F - F1) */
static void check(const char *spec, int rank, const int *shape, int actions, double F, double F1) {
    fl_qnet_t *n = make(spec, rank, shape, actions);
    assert_true(fl_flops_count_forward(n) == F);
    assert_true(fl_flops_count_dqn_update(n, 1) == 5 * F - F1);
    assert_true(fl_flops_count_dqn_update(n, 32) == 32 * (5 * F - F1));
    fl_qnet_destroy(n);
}

static void test_mlp(void **state) {
    (void)state;
    const int shape[1] = {4};
    const double dense0 = 2.0 * 4 * 256, dense1 = 2.0 * 256 * 256, head = 2.0 * 256 * (2 + 1);
    check("dense(256) relu dense(256) relu dueling", 1, shape, 2, dense0 + dense1 + head, dense0);
    /* the docs' figure: ~86 MFLOP per update at batch 128 */
    fl_qnet_t *n = make("dense(256) relu dense(256) relu dueling", 1, shape, 2);
    assert_true(fl_flops_count_dqn_update(n, 128) == 85917696.0);
    fl_qnet_destroy(n);
}

static void test_minatar(void **state) {
    (void)state;
    const int shape[3] = {10, 10, 4};
    /* conv(16,3,1) on 4 x 10 x 10 -> 16 x 8 x 8; dense(128) of 1024; dueling of 6 */
    const double conv = 2.0 * 16 * 8 * 8 * 4 * 3 * 3, dense = 2.0 * 1024 * 128, head = 2.0 * 128 * 7;
    check("conv(16,3,1) relu flatten dense(128) relu dueling", 3, shape, 6, conv + dense + head, conv);
}

static void test_nature(void **state) {
    (void)state;
    const int shape[3] = {84, 84, 4};
    /* 4 x 84 x 84 -> 32 x 20 x 20 -> 64 x 9 x 9 -> 64 x 7 x 7 -> 512 -> dueling of 18 */
    const double c1 = 2.0 * 32 * 20 * 20 * 4 * 8 * 8, c2 = 2.0 * 64 * 9 * 9 * 32 * 4 * 4,
                 c3 = 2.0 * 64 * 7 * 7 * 64 * 3 * 3, d = 2.0 * 3136 * 512, head = 2.0 * 512 * 19;
    check("conv(32,8,4) relu conv(64,4,2) relu conv(64,3,1) relu flatten dense(512) relu dueling", 3, shape, 18,
          c1 + c2 + c3 + d + head, c1);
}

static void test_linear_and_padding(void **state) {
    (void)state;
    /* "" is a linear model: only the appended head, which is also the first layer */
    const int vec[1] = {10};
    check("", 1, vec, 3, 2.0 * 10 * 3, 2.0 * 10 * 3);
    /* conv(8,3,2,1) on 2 x 9 x 9 -> 8 x 5 x 5; the head of 200 inputs */
    const int img[3] = {9, 9, 2};
    const double conv = 2.0 * 8 * 5 * 5 * 2 * 3 * 3, head = 2.0 * 200 * 4;
    check("conv(8,3,2,1) relu", 3, img, 4, conv + head, conv);
}

static void test_peak_is_consistent(void **state) {
    (void)state;
    fl_flops_peak_t p;
    fl_flops_measure_peak(3, &p);
    char line[1024];
    fl_flops_describe_peak(&p, line, sizeof line);
    if (!p.ok) {
        assert_true(strlen(p.isa) > 0);
        assert_non_null(strstr(line, "not measured"));
        return;
    }
    assert_true(p.vector_floats == 16 || p.vector_floats == 8);
    assert_int_equal(p.fma_units, p.fma_per_cycle < FL_FLOPS_ONE_UNIT_BELOW ? 1 : 2);
    assert_int_equal(p.cores, 3);
    assert_true(p.core_flops > 0 && p.add_clock_hz > 0 && p.clock_hz > 0);
    assert_true(fabs(p.peak_flops - 3 * p.core_flops) <= 1e-9 * p.peak_flops);
    const double formula = (double)p.cores * p.fma_units * p.vector_floats * 2 * p.clock_hz;
    assert_true(fabs(formula - p.peak_flops) <= 1e-9 * p.peak_flops);
    assert_true(fabs(p.fma_per_cycle - p.core_flops / (2.0 * p.vector_floats) / p.add_clock_hz) <=
                1e-9 * p.fma_per_cycle);
    char units[32];
    snprintf(units, sizeof units, "3 cores x %d FMA units", p.fma_units);
    assert_non_null(strstr(line, units));
    assert_non_null(strstr(line, p.isa));
}

static fl_bench_rate_t steps(const double *dt, int n) {
    fl_bench_rate_t r = {0};
    double t = 0;
    for (int i = 0; i < n; i++) fl_bench_rate_step(&r, t += dt[i]);
    return r;
}

/* Windows close after 10 steps and 0.1 s both; the best is the fastest closed one, the
 * whole run's rate where none closed. */
static void test_rates(void **state) {
    (void)state;
    double dt[200];
    for (int i = 0; i < 100; i++) dt[i] = i < 50 ? 0.02 : 0.005; /* 50 steps at 50/s, then 50 at 200/s */
    fl_bench_rate_t r = steps(dt, 100);
    assert_true(fabs(fl_bench_rate_whole(&r) - 100 / 1.25) < 1e-9);
    assert_true(fabs(fl_bench_rate_best(&r) - 200) < 1e-6);      /* windows of 20 steps over 0.1 s at the end */
    for (int i = 0; i < 100; i++) dt[i] = i < 50 ? 0.005 : 0.02; /* the other way round */
    r = steps(dt, 100);
    assert_true(fabs(fl_bench_rate_best(&r) - 200) < 1e-6);
    r = steps(dt, 9); /* no window: fewer than 10 steps */
    assert_true(fl_bench_rate_best(&r) == fl_bench_rate_whole(&r));
    for (int i = 0; i < 200; i++) dt[i] = 0.001; /* 1000/s: a window needs 100 steps to last 0.1 s */
    r = steps(dt, 99);
    assert_true(r.best == 0);
    r = steps(dt, 200);
    assert_true(fabs(fl_bench_rate_best(&r) - 1000) < 1e-6);
    for (int i = 0; i < 30; i++) dt[i] = i == 14 ? 2.0 : 0.05; /* a stall inside the second window */
    r = steps(dt, 30);
    assert_true(fabs(fl_bench_rate_best(&r) - 20) < 1e-6);
    assert_true(fl_bench_rate_whole(&r) < 20);
    fl_bench_rate_t none = {0};
    assert_true(fl_bench_rate_whole(&none) == 0 && fl_bench_rate_best(&none) == 0);
}

/* "RATE VERSION THREADS BEST", after any other lines; anything else, or a failed command,
 * is -1. */
static void test_script_rate(void **state) {
    (void)state;
    char v[64] = "";
    double best = 0;
    assert_true(fl_bench_script_rate("test", "echo starting; echo 12.5 1.13.0 2 15.25", v, sizeof v, &best) == 12.5);
    assert_true(best == 15.25);
    assert_string_equal(v, "1.13.0");
    assert_true(fl_bench_script_rate("test", "echo 3 2.1 1 4", v, sizeof v, NULL) == 3); /* no best wanted */
    assert_true(fl_bench_script_rate("test", "echo 12.5 1.13.0 2", v, sizeof v, &best) < 0);
    assert_true(fl_bench_script_rate("test", "echo 12.5 1.13.0 2 15; exit 3", v, sizeof v, &best) < 0);
    assert_true(fl_bench_script_rate("test", "true", v, sizeof v, &best) < 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rates),
        cmocka_unit_test(test_script_rate),
        cmocka_unit_test(test_mlp),
        cmocka_unit_test(test_minatar),
        cmocka_unit_test(test_nature),
        cmocka_unit_test(test_linear_and_padding),
        cmocka_unit_test(test_peak_is_consistent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
