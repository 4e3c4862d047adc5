/* Interoperability of fleet's safetensors files with the tools users load them with: a
 * file written by common/safetensors is loaded by the reference Python package
 * (`safetensors.numpy.load_file`, `safe_open(...).metadata()`) and checked value by value
 * with NumPy; a file the package writes (`save_file`) is read back by fleet and checked
 * the same way (tests/py/safetensors_interop.py holds the shared pattern).
 *
 * The Python side needs numpy and safetensors: when the interpreter lacks them they are
 * installed from PyPI with pip into <build>/pydeps (once); where that is impossible (no
 * pip, no network) the test is skipped with a message saying so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/py_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/safetensors.h"

static char g_dir[64];
static char g_env[2048]; /* "PYTHONPATH=... " prefix for commands */
static const char *g_python;

static int run(const char *cmd) {
    return py_shell(cmd);
}

/* Finds a python3 that imports numpy and safetensors, installing them if it must. */
static int find_python(void) {
    return py_find("numpy, safetensors.numpy", "numpy safetensors", g_env, sizeof g_env, &g_python);
}

static int64_t pattern(int64_t k, int unsigned_type) {
    int64_t v = (k * 7 + 3) % 251;
    return unsigned_type ? v : v - 100;
}

static void test_python_reads_fleet_and_fleet_reads_python(void **state) {
    (void)state;
    if (!find_python()) {
        print_message("SKIP: no python3 with numpy and safetensors, and pip could not install them\n");
        skip();
    }
    const char *src = getenv("FLEET_SOURCE_DIR");
    assert_non_null(src);
    float f32[12];
    double f64[5];
    uint8_t u8[12];
    int32_t i32[7];
    int64_t i64[4];
    for (int k = 0; k < 12; k++) f32[k] = (float)pattern(k, 0), u8[k] = (uint8_t)pattern(k, 1);
    for (int k = 0; k < 5; k++) f64[k] = (double)pattern(k, 0);
    for (int k = 0; k < 7; k++) i32[k] = (int32_t)pattern(k, 0);
    for (int k = 0; k < 4; k++) i64[k] = pattern(k, 0);
    fl_st_tensor_t t[] = {
        {.name = "t.float32", .dtype = FL_ST_F32, .rank = 2, .shape = {3, 4}, .data = f32, .bytes = sizeof f32},
        {.name = "t.float64", .dtype = FL_ST_F64, .rank = 1, .shape = {5}, .data = f64, .bytes = sizeof f64},
        {.name = "t.uint8", .dtype = FL_ST_U8, .rank = 3, .shape = {2, 3, 2}, .data = u8, .bytes = sizeof u8},
        {.name = "t.int32", .dtype = FL_ST_I32, .rank = 1, .shape = {7}, .data = i32, .bytes = sizeof i32},
        {.name = "t.int64", .dtype = FL_ST_I64, .rank = 2, .shape = {2, 2}, .data = i64, .bytes = sizeof i64},
    };
    const char *mk[] = {"format", "answer"}, *mv[] = {"fleet.interop", "42"};
    char ours[128], theirs[128], cmd[4096];
    snprintf(ours, sizeof ours, "%s/fleet.safetensors", g_dir);
    snprintf(theirs, sizeof theirs, "%s/python.safetensors", g_dir);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_safetensors_write(ours, t, 5, mk, mv, 2, &err), FL_OK);
    snprintf(cmd, sizeof cmd, "%s %s %s/tests/py/safetensors_interop.py check %s", g_env, g_python, src, ours);
    assert_int_equal(run(cmd), 0);

    snprintf(cmd, sizeof cmd, "%s %s %s/tests/py/safetensors_interop.py write %s", g_env, g_python, src, theirs);
    assert_int_equal(run(cmd), 0);
    fl_safetensors_t *f = NULL;
    if (fl_safetensors_read(theirs, &f, &err) != FL_OK) fail_msg("reading the package's file: %s", err.msg);
    assert_int_equal(fl_safetensors_count(f), 5);
    assert_string_equal(fl_safetensors_meta(f, "answer"), "42");
    for (size_t i = 0; i < 5; i++) {
        const fl_st_tensor_t *g = fl_safetensors_find(f, t[i].name);
        assert_non_null(g);
        assert_int_equal(g->dtype, t[i].dtype);
        assert_int_equal(g->rank, t[i].rank);
        for (int d = 0; d < g->rank; d++) assert_int_equal(g->shape[d], t[i].shape[d]);
        assert_int_equal(g->bytes, t[i].bytes);
        assert_memory_equal(g->data, t[i].data, t[i].bytes);
    }
    fl_safetensors_free(f);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fl_st_py_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_python_reads_fleet_and_fleet_reads_python)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
