/* Tests for common/procmem: the figures parsed from smaps_rollup and from status (the
 * fallback), malformed texts refused, and this process's own figures moving with the
 * memory it touches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/procmem.h"

static const char ROLLUP[] =
    "55d0c0a00000-7ffd2b1fe000 ---p 00000000 00:00 0                          [rollup]\n"
    "Rss:               30720 kB\n"
    "Pss:               12000 kB\n"
    "Shared_Clean:      23000 kB\n"
    "Shared_Dirty:          0 kB\n"
    "Private_Clean:      1200 kB\n"
    "Private_Dirty:      6520 kB\n";

static const char STATUS[] =
    "Name:\tfleet\nVmPeak:\t  300000 kB\nVmRSS:\t   30720 kB\nRssAnon:\t    7000 kB\n"
    "RssFile:\t   23720 kB\n";

static void test_parse_rollup(void **unused) {
    (void)unused;
    uint64_t rss, priv;
    assert_int_equal(fl_procmem_parse(ROLLUP, NULL, &rss, &priv), 0);
    assert_int_equal(rss, 30720u * 1024);
    assert_int_equal(priv, (1200u + 6520u) * 1024);
}

static void test_parse_status_fallback(void **unused) {
    (void)unused;
    uint64_t rss, priv;
    assert_int_equal(fl_procmem_parse(NULL, STATUS, &rss, &priv), 0);
    assert_int_equal(rss, 30720u * 1024);
    assert_int_equal(priv, 7000u * 1024);
    /* a rollup without its private lines falls back to status */
    assert_int_equal(fl_procmem_parse("Rss: 5 kB\n", STATUS, &rss, &priv), 0);
    assert_int_equal(priv, 7000u * 1024);
}

static void test_parse_refuses(void **unused) {
    (void)unused;
    uint64_t rss = 1, priv = 1;
    assert_int_equal(fl_procmem_parse(NULL, NULL, &rss, &priv), -1);
    assert_int_equal(rss, 0);
    assert_int_equal(priv, 0);
    assert_int_equal(
        fl_procmem_parse("Rss: many kB\nPrivate_Clean: 1 kB\nPrivate_Dirty: 1 kB\n", "Name: x\n", &rss, &priv), -1);
    assert_int_equal(fl_procmem_parse(NULL, "VmRSS:\t-5 kB\n", &rss, &priv), -1);
}

/* 64 MB written shows in both figures (after the cache's second). */
static void test_own_figures(void **unused) {
    (void)unused;
    uint64_t rss0, priv0, rss1, priv1;
    assert_int_equal(fl_procmem(&rss0, &priv0), 0);
    assert_true(rss0 > 0);
    assert_true(priv0 > 0 && priv0 <= rss0);
    const size_t n = 64u << 20;
    volatile char *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i += 4096) p[i] = (char)i;
    usleep((useconds_t)(FL_PROCMEM_CACHE_S * 1e6) + 100000);
    assert_int_equal(fl_procmem(&rss1, &priv1), 0);
    assert_true(rss1 >= rss0 + (48u << 20));
    assert_true(priv1 >= priv0 + (48u << 20));
    free((void *)p);
}

/* CPU seconds grow with work done. */
static void test_cpu_seconds(void **unused) {
    (void)unused;
    const double before = fl_proc_cpu_s();
    assert_true(before >= 0);
    volatile double x = 0;
    while (fl_proc_cpu_s() < before + 0.05) x += 1.0;
    assert_true(fl_proc_cpu_s() >= before + 0.05);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_rollup),  cmocka_unit_test(test_parse_status_fallback),
        cmocka_unit_test(test_parse_refuses), cmocka_unit_test(test_own_figures),
        cmocka_unit_test(test_cpu_seconds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
