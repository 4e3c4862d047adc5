/* test_replay_sumtree: the sum-tree against an independent shadow array of leaf values. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/rng.h"
#include "replay/sumtree.h"

/* Around the fan-out of 8 and its powers (8, 64, 512, 4096), and odd sizes. */
static const uint64_t k_capacities[] = {1,   2,   3,   5,    7,    8,    9,    63,   64,  65,
                                        100, 511, 513, 1000, 1023, 1025, 4096, 4097, 5000};
#define N_CAPACITIES (sizeof(k_capacities) / sizeof(k_capacities[0]))

/* Kahan sum of the shadow leaves, in index order (not the tree's pairing). */
static double shadow_sum(const double *v, uint64_t n) {
    double s = 0.0, c = 0.0;
    for (uint64_t i = 0; i < n; i++) {
        double y = v[i] - c, z = s + y;
        c = (z - s) - y;
        s = z;
    }
    return s;
}

static double shadow_min(const double *v, uint64_t n) {
    double m = INFINITY;
    for (uint64_t i = 0; i < n; i++)
        if (v[i] > 0.0 && v[i] < m) m = v[i];
    return m;
}

/* Linear prefix-sum search over the shadow (exact when all values are small integers). */
static uint64_t shadow_find(const double *v, uint64_t n, double u) {
    double acc = 0.0;
    uint64_t last_pos = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (v[i] > 0.0) {
            if (u < acc + v[i]) return i;
            last_pos = i;
        }
        acc += v[i];
    }
    return last_pos;
}

/* A random leaf value: zeros, tiny, ordinary and large values, so sums span many
 * magnitudes. */
static double random_value(fl_rng_t *r) {
    switch (fl_rng_below(r, 5)) {
    case 0: return 0.0;
    case 1: return fl_rng_double(r) * 1e-6;
    case 2: return fl_rng_double(r) * 1e3;
    default: return fl_rng_double(r);
    }
}

static void check_against_shadow(const fl_sumtree_t *t, const double *shadow, uint64_t n) {
    fl_err_t err = {0};
    if (fl_sumtree_verify(t, &err) != FL_OK) fail_msg("%s", err.msg);
    double want = shadow_sum(shadow, n);
    double got = fl_sumtree_total(t);
    /* Both are sums of the same non-negative doubles in different orders; pairwise and
     * compensated summation each err by a few ulps times log2(n) at most. */
    assert_true(fabs(got - want) <= 64.0 * 2.220446049250313e-16 * want);
    assert_true(fl_sumtree_min(t) == shadow_min(shadow, n));
    for (uint64_t i = 0; i < n; i++) assert_true(fl_sumtree_get(t, i) == shadow[i]);
}

static void test_create_rejects_bad_capacity(void **state) {
    (void)state;
    fl_sumtree_t *t = (fl_sumtree_t *)1;
    fl_err_t err = {0};
    assert_int_equal(fl_sumtree_create(0, &t, &err), FL_INVALID_ARGUMENT);
    assert_null(t);
    assert_non_null(strstr(err.msg, "capacity"));
    assert_int_equal(fl_sumtree_create(FL_SUMTREE_MAX_CAPACITY + 1, &t, NULL), FL_INVALID_ARGUMENT);
    fl_sumtree_destroy(NULL);
}

static void test_empty_tree(void **state) {
    (void)state;
    fl_sumtree_t *t = NULL;
    assert_int_equal(fl_sumtree_create(5, &t, NULL), FL_OK);
    assert_int_equal(fl_sumtree_capacity(t), 5);
    assert_true(fl_sumtree_total(t) == 0.0);
    assert_true(isinf(fl_sumtree_min(t)));
    assert_int_equal(fl_sumtree_verify(t, NULL), FL_OK);
    fl_sumtree_destroy(t);
}

static void test_random_updates_keep_invariants(void **state) {
    (void)state;
    fl_rng_t r;
    fl_rng_init(&r, 11);
    for (size_t c = 0; c < N_CAPACITIES; c++) {
        uint64_t n = k_capacities[c];
        fl_sumtree_t *t = NULL;
        assert_int_equal(fl_sumtree_create(n, &t, NULL), FL_OK);
        double *shadow = calloc(n, sizeof(double));
        assert_non_null(shadow);
        for (int op = 1; op <= 5000; op++) {
            uint64_t i = fl_rng_below(&r, n);
            double v = random_value(&r);
            fl_sumtree_set(t, i, v);
            shadow[i] = v;
            if (op % 500 == 0) check_against_shadow(t, shadow, n);
        }
        /* Back to all zeros: total 0 exactly, no positive minimum. */
        for (uint64_t i = 0; i < n; i++) fl_sumtree_set(t, i, 0.0);
        assert_true(fl_sumtree_total(t) == 0.0);
        assert_true(isinf(fl_sumtree_min(t)));
        free(shadow);
        fl_sumtree_destroy(t);
    }
}

static void test_set_range_matches_set(void **state) {
    (void)state;
    fl_rng_t r;
    fl_rng_init(&r, 12);
    for (size_t c = 0; c < N_CAPACITIES; c++) {
        uint64_t n = k_capacities[c];
        fl_sumtree_t *a = NULL, *b = NULL;
        assert_int_equal(fl_sumtree_create(n, &a, NULL), FL_OK);
        assert_int_equal(fl_sumtree_create(n, &b, NULL), FL_OK);
        double *shadow = calloc(n, sizeof(double));
        double *vals = calloc(n, sizeof(double));
        assert_non_null(shadow);
        assert_non_null(vals);
        for (int round = 0; round < 50; round++) {
            uint64_t first = fl_rng_below(&r, n);
            size_t len = (size_t)fl_rng_below(&r, n - first + 1);
            for (size_t k = 0; k < len; k++) {
                vals[k] = random_value(&r);
                fl_sumtree_set(a, first + k, vals[k]);
                shadow[first + k] = vals[k];
            }
            fl_sumtree_set_range(b, first, len, vals);
            assert_true(fl_sumtree_total(a) == fl_sumtree_total(b));
            assert_true(fl_sumtree_min(a) == fl_sumtree_min(b));
            check_against_shadow(b, shadow, n);
        }
        free(vals);
        free(shadow);
        fl_sumtree_destroy(a);
        fl_sumtree_destroy(b);
    }
}

/* set_many with repeated indices equals the same calls of set in order. */
static void test_set_many_matches_set(void **state) {
    (void)state;
    fl_rng_t r;
    fl_rng_init(&r, 17);
    for (size_t c = 0; c < N_CAPACITIES; c++) {
        uint64_t n = k_capacities[c];
        fl_sumtree_t *a = NULL, *b = NULL;
        assert_int_equal(fl_sumtree_create(n, &a, NULL), FL_OK);
        assert_int_equal(fl_sumtree_create(n, &b, NULL), FL_OK);
        double *shadow = calloc(n, sizeof(double));
        assert_non_null(shadow);
        uint64_t idx[600];
        double vals[600];
        for (int round = 0; round < 20; round++) {
            size_t m = (size_t)fl_rng_below(&r, 600);
            for (size_t k = 0; k < m; k++) {
                /* a small index range forces repeats */
                idx[k] = fl_rng_below(&r, round % 2 ? n : (n + 3) / 4);
                vals[k] = random_value(&r);
                fl_sumtree_set(a, idx[k], vals[k]);
                shadow[idx[k]] = vals[k];
            }
            fl_sumtree_set_many(b, m, idx, vals, NULL);
            assert_true(fl_sumtree_total(a) == fl_sumtree_total(b));
            assert_true(fl_sumtree_min(a) == fl_sumtree_min(b));
            check_against_shadow(b, shadow, n);
        }
        free(shadow);
        fl_sumtree_destroy(a);
        fl_sumtree_destroy(b);
    }
}

/* A parent is recomputed from its children, never adjusted by a delta: after a million
 * updates the tree must be bit-identical to one built directly from the final leaves. */
static void test_no_drift_after_many_updates(void **state) {
    (void)state;
    const uint64_t n = 1000;
    fl_rng_t r;
    fl_rng_init(&r, 13);
    fl_sumtree_t *t = NULL, *fresh = NULL;
    assert_int_equal(fl_sumtree_create(n, &t, NULL), FL_OK);
    assert_int_equal(fl_sumtree_create(n, &fresh, NULL), FL_OK);
    double *shadow = calloc(n, sizeof(double));
    assert_non_null(shadow);
    for (int op = 0; op < 1000000; op++) {
        uint64_t i = fl_rng_below(&r, n);
        double v = fl_rng_double(&r) * (op % 2 ? 1e4 : 1e-4);
        fl_sumtree_set(t, i, v);
        shadow[i] = v;
    }
    fl_sumtree_set_range(fresh, 0, n, shadow);
    assert_true(fl_sumtree_total(t) == fl_sumtree_total(fresh));
    assert_true(fl_sumtree_min(t) == fl_sumtree_min(fresh));
    check_against_shadow(t, shadow, n);
    free(shadow);
    fl_sumtree_destroy(t);
    fl_sumtree_destroy(fresh);
}

/* With small integer leaves every prefix sum is exact, so find must agree with a linear
 * scan at every point, including the boundaries between leaves. */
static void test_find_matches_linear_scan(void **state) {
    (void)state;
    fl_rng_t r;
    fl_rng_init(&r, 14);
    for (size_t c = 0; c < N_CAPACITIES; c++) {
        uint64_t n = k_capacities[c];
        fl_sumtree_t *t = NULL;
        assert_int_equal(fl_sumtree_create(n, &t, NULL), FL_OK);
        double *shadow = calloc(n, sizeof(double));
        assert_non_null(shadow);
        for (uint64_t i = 0; i < n; i++) {
            shadow[i] = (double)fl_rng_below(&r, 4); /* 0 .. 3, a quarter zeros */
            fl_sumtree_set(t, i, shadow[i]);
        }
        if (fl_sumtree_total(t) == 0.0) {
            shadow[n - 1] = 1.0;
            fl_sumtree_set(t, n - 1, 1.0);
        }
        double total = fl_sumtree_total(t);
        for (double u = 0.0; u < total; u += 0.5) {
            uint64_t got = fl_sumtree_find(t, u);
            assert_int_equal(got, shadow_find(shadow, n, u));
            assert_true(shadow[got] > 0.0);
        }
        /* Out-of-range points clamp to the first / last positive leaf. */
        uint64_t first_pos = 0, last_pos = 0;
        while (shadow[first_pos] == 0.0) first_pos++;
        for (uint64_t i = 0; i < n; i++)
            if (shadow[i] > 0.0) last_pos = i;
        assert_int_equal(fl_sumtree_find(t, -1.0), first_pos);
        assert_int_equal(fl_sumtree_find(t, NAN), first_pos);
        assert_int_equal(fl_sumtree_find(t, total), last_pos);
        assert_int_equal(fl_sumtree_find(t, total * 2.0 + 5.0), last_pos);
        free(shadow);
        fl_sumtree_destroy(t);
    }
}

/* Zero leaves are never found, even when u sits at an interval's edge or beyond the total
 * after rounding. */
static void test_find_never_returns_zero_leaf(void **state) {
    (void)state;
    const uint64_t n = 777;
    fl_rng_t r;
    fl_rng_init(&r, 15);
    fl_sumtree_t *t = NULL;
    assert_int_equal(fl_sumtree_create(n, &t, NULL), FL_OK);
    double *shadow = calloc(n, sizeof(double));
    assert_non_null(shadow);
    for (uint64_t i = 0; i < n; i++) {
        shadow[i] = (i % 3 == 1) ? 0.1 + fl_rng_double(&r) : 0.0; /* zeros at both ends */
        fl_sumtree_set(t, i, shadow[i]);
    }
    double total = fl_sumtree_total(t);
    for (int k = 0; k < 100000; k++) {
        double u = fl_rng_double(&r) * total;
        if (k % 10 == 0) u = nextafter(total, 0.0);
        uint64_t i = fl_sumtree_find(t, u);
        assert_true(i < n);
        assert_true(shadow[i] > 0.0);
    }
    free(shadow);
    fl_sumtree_destroy(t);
}

/* Stratified sampling draws one point per segment: with n equal leaves and n samples each
 * leaf comes out exactly once, in order; with random leaves, sample j's leaf interval
 * must overlap segment j. */
static void test_stratified_one_per_segment(void **state) {
    (void)state;
    fl_rng_t r;
    fl_rng_init(&r, 16);
    const uint64_t n = 37;
    fl_sumtree_t *t = NULL;
    assert_int_equal(fl_sumtree_create(n, &t, NULL), FL_OK);
    for (uint64_t i = 0; i < n; i++) fl_sumtree_set(t, i, 2.0);
    uint64_t out[1000];
    for (int round = 0; round < 100; round++) {
        fl_sumtree_sample_stratified(t, &r, n, out, NULL);
        for (uint64_t j = 0; j < n; j++) assert_int_equal(out[j], j);
    }

    double shadow[37], prefix[38];
    for (int round = 0; round < 100; round++) {
        prefix[0] = 0.0;
        for (uint64_t i = 0; i < n; i++) {
            shadow[i] = random_value(&r);
            fl_sumtree_set(t, i, shadow[i]);
            prefix[i + 1] = prefix[i] + shadow[i];
        }
        if (fl_sumtree_total(t) == 0.0) continue;
        size_t batches[] = {1, 3, 64, 1000};
        for (size_t b = 0; b < 4; b++) {
            size_t B = batches[b];
            double values[1000];
            fl_sumtree_sample_stratified(t, &r, B, out, values);
            double seg = prefix[n] / (double)B, tol = 1e-9 * prefix[n];
            for (size_t j = 0; j < B; j++) {
                uint64_t i = out[j];
                assert_true(shadow[i] > 0.0);
                assert_true(values[j] == shadow[i]);
                assert_true(prefix[i] <= (double)(j + 1) * seg + tol);
                assert_true(prefix[i + 1] >= (double)j * seg - tol);
                if (j > 0) assert_true(out[j] >= out[j - 1]);
            }
        }
    }
    fl_sumtree_destroy(t);
}

/* set_many reports the value each entry overwrote: for a repeated index, the value of its
 * previous entry. */
static void test_set_many_reports_old_values(void **state) {
    (void)state;
    fl_sumtree_t *t = NULL;
    assert_int_equal(fl_sumtree_create(20, &t, NULL), FL_OK);
    fl_sumtree_set(t, 3, 1.5);
    fl_sumtree_set(t, 17, 2.5);
    uint64_t idx[5] = {3, 17, 3, 9, 3};
    double vals[5] = {4.0, 0.0, 5.0, 6.0, 7.0}, old[5];
    fl_sumtree_set_many(t, 5, idx, vals, old);
    const double want[5] = {1.5, 2.5, 4.0, 0.0, 5.0};
    for (int k = 0; k < 5; k++) assert_true(old[k] == want[k]);
    assert_true(fl_sumtree_get(t, 3) == 7.0);
    assert_true(fl_sumtree_get(t, 17) == 0.0);
    assert_true(fl_sumtree_total(t) == 13.0);
    assert_true(fl_sumtree_min(t) == 6.0);
    assert_int_equal(fl_sumtree_verify(t, NULL), FL_OK);
    fl_sumtree_destroy(t);
}

/* A rebuild from the leaves changes nothing: the incremental tree is already the tree of
 * its leaves, bit for bit. */
static void test_rebuild_is_identity(void **state) {
    (void)state;
    fl_rng_t r;
    fl_rng_init(&r, 18);
    for (size_t c = 0; c < N_CAPACITIES; c++) {
        uint64_t n = k_capacities[c];
        fl_sumtree_t *t = NULL;
        assert_int_equal(fl_sumtree_create(n, &t, NULL), FL_OK);
        for (int op = 0; op < 3000; op++) fl_sumtree_set(t, fl_rng_below(&r, n), random_value(&r) * 1e6);
        double total = fl_sumtree_total(t), mn = fl_sumtree_min(t);
        fl_sumtree_rebuild(t);
        assert_true(fl_sumtree_total(t) == total);
        assert_true(fl_sumtree_min(t) == mn);
        assert_int_equal(fl_sumtree_verify(t, NULL), FL_OK);
        fl_sumtree_destroy(t);
    }
}

/* Updates for the long-run test: FLEET_SUMTREE_UPDATES if set, else 2 * 10^6 under CI
 * (CI set, and not "false" or "0"), else 10^8. */
static uint64_t long_run_updates(void) {
    const char *e = getenv("FLEET_SUMTREE_UPDATES");
    if (e && *e) {
        char *end = NULL;
        double v = strtod(e, &end);
        if (*end != '\0' || !(v >= 1.0 && v <= 1e15)) fail_msg("FLEET_SUMTREE_UPDATES=%s: expected a count >= 1", e);
        return (uint64_t)v;
    }
    const char *ci = getenv("CI");
    if (ci && *ci && strcmp(ci, "false") != 0 && strcmp(ci, "0") != 0) return 2000000;
    return 100000000;
}

/* Sum of the leaves in extended precision with compensation: the exact reference. */
static long double exact_sum(const double *v, uint64_t n) {
    long double s = 0.0L, c = 0.0L;
    for (uint64_t i = 0; i < n; i++) {
        long double y = (long double)v[i] - c, z = s + y;
        c = (z - s) - y;
        s = z;
    }
    return s;
}

/* Rounding drift over a long run. Leaves swing between huge (~1e12) and tiny (~1e-6)
 * values, alternately, so that a tree that added deltas to its ancestors would lose
 * ~ulp(1e15) of the total at almost every step and drift by a random walk of those. The
 * root must stay within 1e-12 (relative) of an exact sum of the leaves throughout; at the
 * end every leaf is set, one at a time, to a small value (1 .. 4, and three tracked items
 * of 50, 20 and 10), and then both the total and the sampling frequencies must match:
 * 10^6 draws by find, binned as the three items and the four value classes of the rest,
 * against a chi-square bound (6 degrees of freedom, ~1e-6 upper quantile ~40; the seed
 * is fixed). */
static void test_long_run_no_drift(void **state) {
    (void)state;
    const uint64_t n = 1000, updates = long_run_updates();
    print_message("sumtree long run: %llu updates\n", (unsigned long long)updates);
    fl_rng_t r;
    fl_rng_init(&r, 19);
    fl_sumtree_t *t = NULL;
    assert_int_equal(fl_sumtree_create(n, &t, NULL), FL_OK);
    double *shadow = calloc(n, sizeof(double));
    assert_non_null(shadow);
    uint64_t checks = 8, next_check = updates / checks;
    uint64_t idx[64];
    double vals[64];
    for (uint64_t op = 0; op < updates;) {
        if (op % 1024 < 960) { /* mostly single updates, some batches */
            uint64_t i = fl_rng_below(&r, n);
            double v = op % 2 ? 1e12 * (0.5 + fl_rng_double(&r)) : 1e-6 * fl_rng_double(&r);
            fl_sumtree_set(t, i, v);
            shadow[i] = v;
            op++;
        } else {
            for (int k = 0; k < 64; k++) {
                idx[k] = fl_rng_below(&r, n);
                vals[k] = k % 2 ? 1e12 * fl_rng_double(&r) : 0.0;
                shadow[idx[k]] = vals[k];
            }
            fl_sumtree_set_many(t, 64, idx, vals, NULL);
            op += 64;
        }
        if (op >= next_check) {
            long double want = exact_sum(shadow, n);
            double got = fl_sumtree_total(t);
            if (fabsl((long double)got - want) > 1e-12L * want)
                fail_msg("after %llu updates: root %.17g, exact sum %.17Lg", (unsigned long long)op, got, want);
            next_check += updates / checks;
        }
    }
    const uint64_t tracked[3] = {3, 500, 999};
    const double tracked_value[3] = {50.0, 20.0, 10.0};
    for (uint64_t i = 0; i < n; i++) {
        double v = (double)(i % 4 + 1);
        for (int k = 0; k < 3; k++)
            if (i == tracked[k]) v = tracked_value[k];
        fl_sumtree_set(t, i, v);
        shadow[i] = v;
    }
    long double want = exact_sum(shadow, n);
    double total = fl_sumtree_total(t);
    if (fabsl((long double)total - want) > 1e-12L * want) fail_msg("final root %.17g, exact sum %.17Lg", total, want);
    assert_int_equal(fl_sumtree_verify(t, NULL), FL_OK);

    /* bins 0..2: the tracked items; 3..6: the value classes 1..4 of the others */
    double p[7] = {0};
    for (uint64_t i = 0; i < n; i++) {
        int bin = 3 + (int)(i % 4);
        for (int k = 0; k < 3; k++)
            if (i == tracked[k]) bin = k;
        p[bin] += shadow[i] / (double)want;
    }
    const uint64_t draws = 1000000;
    uint64_t counts[7] = {0};
    for (uint64_t d = 0; d < draws; d++) {
        uint64_t i = fl_sumtree_find(t, fl_rng_double(&r) * total);
        int bin = 3 + (int)(i % 4);
        for (int k = 0; k < 3; k++)
            if (i == tracked[k]) bin = k;
        counts[bin]++;
    }
    /* The same counts against frequencies by item count (what a sampler that ignored the
     * values would give) must fail the bound by far: the test can tell them apart. */
    double p_items[7] = {0};
    for (uint64_t i = 0; i < n; i++) {
        int bin = 3 + (int)(i % 4);
        for (int k = 0; k < 3; k++)
            if (i == tracked[k]) bin = k;
        p_items[bin] += 1.0 / (double)n;
    }
    double chi = 0.0, chi_wrong = 0.0;
    for (int b = 0; b < 7; b++) {
        double e = p[b] * (double)draws, dd = (double)counts[b] - e;
        chi += dd * dd / e;
        e = p_items[b] * (double)draws;
        dd = (double)counts[b] - e;
        chi_wrong += dd * dd / e;
    }
    if (chi > 40.0) fail_msg("sampling frequencies: chi-square %.1f > 40", chi);
    if (chi_wrong < 400.0) fail_msg("sampling frequencies: chi-square against item counts only %.1f", chi_wrong);
    free(shadow);
    fl_sumtree_destroy(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_rejects_bad_capacity),
        cmocka_unit_test(test_empty_tree),
        cmocka_unit_test(test_random_updates_keep_invariants),
        cmocka_unit_test(test_set_range_matches_set),
        cmocka_unit_test(test_set_many_matches_set),
        cmocka_unit_test(test_no_drift_after_many_updates),
        cmocka_unit_test(test_find_matches_linear_scan),
        cmocka_unit_test(test_find_never_returns_zero_leaf),
        cmocka_unit_test(test_stratified_one_per_segment),
        cmocka_unit_test(test_set_many_reports_old_values),
        cmocka_unit_test(test_rebuild_is_identity),
        cmocka_unit_test(test_long_run_no_drift),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
