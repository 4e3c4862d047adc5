/* Tests for common/statefile: every value reads back exactly (doubles, floats, 64-bit
 * counters, generators), the file is replaced atomically (no temporary left, an aborted
 * writer leaves the old file), and a missing, foreign or malformed file is refused with a
 * message naming it. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/rng.h"
#include "common/statefile.h"

static char g_dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fl_state_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_round_trip(void **unused) {
    (void)unused;
    char path[128];
    snprintf(path, sizeof path, "%s/a.state", g_dir);
    fl_rng_t r;
    fl_rng_init(&r, 12345);
    fl_rng_u64(&r);
    const double d[] = {0.1, -1e-300, DBL_MAX, 1.0 / 3.0};
    const float f[] = {0.1f, -FLT_MIN, FLT_MAX, 16777217.0f, -0.0f};
    fl_state_out_t w;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_state_begin(&w, path, "test", &err), FL_OK);
    fl_state_put_u64(&w, "big", UINT64_MAX);
    fl_state_put_double(&w, "third", 1.0 / 3.0);
    fl_state_put_rng(&w, "rng", &r);
    fl_state_put_doubles(&w, "ds", d, 4);
    fl_state_put_floats(&w, "fs", f, 5);
    fl_state_put_floats(&w, "empty", f, 0);
    assert_int_equal(fl_state_commit(&w, &err), FL_OK);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(access(tmp, F_OK), 0);

    fl_state_t *st = NULL;
    assert_int_equal(fl_state_load(path, "test", &st, &err), FL_OK);
    uint64_t u = 0;
    assert_true(fl_state_get_u64(st, "big", &u));
    assert_true(u == UINT64_MAX);
    double x = 0;
    assert_true(fl_state_get_double(st, "third", &x));
    assert_true(x == 1.0 / 3.0);
    fl_rng_t back;
    assert_true(fl_state_get_rng(st, "rng", &back));
    assert_memory_equal(&back, &r, sizeof r);
    double dd[8];
    assert_int_equal(fl_state_get_doubles(st, "ds", dd, 8), 4);
    assert_memory_equal(dd, d, sizeof d);
    float ff[8];
    assert_int_equal(fl_state_get_floats(st, "fs", ff, 8), 5);
    assert_memory_equal(ff, f, sizeof f);
    assert_int_equal(fl_state_get_floats(st, "fs", ff, 2), 5); /* the count, only 2 stored */
    assert_int_equal(fl_state_get_floats(st, "empty", ff, 8), 0);
    /* Missing keys and wrong types. */
    assert_false(fl_state_get_u64(st, "nope", &u));
    assert_false(fl_state_get_u64(st, "third", &u));
    assert_false(fl_state_get_rng(st, "big", &back));
    fl_state_free(st);
}

static void test_abort_keeps_the_old_file(void **unused) {
    (void)unused;
    char path[128];
    snprintf(path, sizeof path, "%s/b.state", g_dir);
    fl_state_out_t w;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_state_begin(&w, path, "test", &err), FL_OK);
    fl_state_put_u64(&w, "v", 1);
    assert_int_equal(fl_state_commit(&w, &err), FL_OK);
    assert_int_equal(fl_state_begin(&w, path, "test", &err), FL_OK);
    fl_state_put_u64(&w, "v", 2);
    fl_state_abort(&w);
    fl_state_t *st = NULL;
    assert_int_equal(fl_state_load(path, "test", &st, &err), FL_OK);
    uint64_t v = 0;
    assert_true(fl_state_get_u64(st, "v", &v));
    assert_int_equal(v, 1);
    fl_state_free(st);
}

static void test_refusals(void **unused) {
    (void)unused;
    char path[128];
    fl_state_t *st = NULL;
    fl_err_t err;
    fl_err_init(&err);
    snprintf(path, sizeof path, "%s/missing.state", g_dir);
    assert_int_equal(fl_state_load(path, "test", &st, &err), FL_NOT_FOUND);
    assert_non_null(strstr(err.msg, path));
    snprintf(path, sizeof path, "%s/other.state", g_dir);
    FILE *f = fopen(path, "w");
    fputs("# fleet state actor 1\nv = 1\n", f);
    fclose(f);
    assert_int_equal(fl_state_load(path, "evaluator", &st, &err), FL_PARSE_ERROR);
    assert_non_null(strstr(err.msg, "expected \"# fleet state evaluator 1\""));
    f = fopen(path, "w");
    fputs("# fleet state actor 1\nv = 1\ngarbage line\n", f);
    fclose(f);
    assert_int_equal(fl_state_load(path, "actor", &st, &err), FL_PARSE_ERROR);
    assert_non_null(strstr(err.msg, ":3:"));
    assert_null(st);
    snprintf(path, sizeof path, "%s/no-such-dir/x.state", g_dir);
    fl_state_out_t w;
    assert_int_equal(fl_state_begin(&w, path, "test", &err), FL_IO_ERROR);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_abort_keeps_the_old_file),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
