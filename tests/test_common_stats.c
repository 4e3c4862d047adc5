/* Tests of common/stats: the mean, sample standard deviation and Student's-t 95%
 * confidence interval of a sample, for doubles and floats alike; one value and none;
 * the median; and the t quantiles against the tables. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/stats.h"

static void test_sample(void **unused) {
    (void)unused;
    const double v[] = {1, 2, 3, 4, 10};
    const float f[] = {1, 2, 3, 4, 10};
    fl_stats_t s = fl_stats_of(v, 5), sf = fl_stats_of_floats(f, 5);
    assert_int_equal(s.n, 5);
    assert_float_equal(s.mean, 4.0, 1e-12);
    assert_float_equal(s.std, sqrt(50.0 / 4), 1e-12); /* squares 9+4+1+0+36 */
    assert_float_equal(s.ci95, 2.776 * sqrt(50.0 / 4) / sqrt(5.0), 1e-12);
    assert_true(sf.mean == s.mean && sf.std == s.std && sf.ci95 == s.ci95);
}

static void test_one_and_none(void **unused) {
    (void)unused;
    const double v[] = {-3.5};
    fl_stats_t s = fl_stats_of(v, 1);
    assert_float_equal(s.mean, -3.5, 0);
    assert_float_equal(s.std, 0, 0);
    assert_float_equal(s.ci95, 0, 0);
    s = fl_stats_of(v, 0);
    assert_int_equal(s.n, 0);
    assert_true(isnan(s.mean) && isnan(s.std) && isnan(s.ci95));
}

static void test_median(void **unused) {
    (void)unused;
    double odd[] = {5, 1, 3}, even[] = {4, 1, 3, 2};
    assert_float_equal(fl_stats_median(odd, 3), 3, 0);
    assert_float_equal(fl_stats_median(even, 4), 2.5, 0);
    assert_true(isnan(fl_stats_median(odd, 0)));
}

static void test_t95(void **unused) {
    (void)unused;
    assert_float_equal(fl_stats_t95(0), 0, 0);
    assert_float_equal(fl_stats_t95(1), 12.706, 1e-9);
    assert_float_equal(fl_stats_t95(30), 2.042, 1e-9);
    assert_float_equal(fl_stats_t95(60), 2.000, 2e-3); /* tables: 2.000 */
    assert_float_equal(fl_stats_t95(120), 1.980, 2e-3);
    assert_float_equal(fl_stats_t95(100000), 1.960, 1e-3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample),
        cmocka_unit_test(test_one_and_none),
        cmocka_unit_test(test_median),
        cmocka_unit_test(test_t95),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
