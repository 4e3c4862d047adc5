/* Interoperability of fleet's TensorBoard event files with TensorBoard itself: a file
 * written by common/tfevents is loaded by the `tensorboard` Python package
 * (event_accumulator.EventAccumulator with every scalar kept, and the accumulator of
 * TensorBoard's server) and checked tag by tag, step by step, against float32 rounding
 * of the values done by NumPy (tests/py/tensorboard_interop.py holds the shared pattern
 * and checks the records' CRCs with TensorBoard's own code).
 *
 * Pattern (the script's docstring says the same): K = 300 events, k = 0 .. K-1, float64
 * arithmetic left to right:
 *   step(k) = 97 k for k < 250, 2^32 - 5 + (k - 250) 2^35 from k = 250 (past 2^32)
 *   wall(k) = 1700000000.0 + k * 0.37 + 0.001
 *   one Event at (step(k), wall(k)): "env/steps_per_s" = 1000.0 + k * 0.1,
 *     "loss/td" = (k % 7 - 3) / 3.0, "replay/size" = k * 16777217.0
 *   for k % 10 == 0 another at (step(k), wall(k) + 0.5): "eval/return_mean" = -200.0 + k * 1.37
 *
 * The Python side needs numpy and tensorboard: when the interpreter lacks them they are
 * installed from PyPI with pip into <build>/pydeps (once; tensorboard brings numpy);
 * where that is impossible (no pip, no network) the test is skipped with a message
 * saying so. TensorBoard warns that TensorFlow is missing; it needs none here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/py_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/tfevents.h"
#include "tests/proc_util.h"
#include "tests/run_util.h"

static char g_dir[64];
static char g_env[2048]; /* "PYTHONPATH=... " prefix for commands */
static const char *g_python;

static int run_cmd(const char *cmd) {
    return py_shell(cmd);
}

/* Finds a python3 that imports tensorboard, installing them if it must. */
static int find_python(void) {
    return py_find("numpy, tensorboard.backend.event_processing.event_accumulator", "tensorboard", g_env, sizeof g_env,
                   &g_python);
}

enum { K = 300, EVAL_EVERY = 10 };

static int64_t step_of(int k) {
    return k < 250 ? 97 * (int64_t)k : ((int64_t)1 << 32) - 5 + (int64_t)(k - 250) * ((int64_t)1 << 35);
}
static double wall_of(int k) {
    return 1700000000.0 + k * 0.37 + 0.001;
}

static void test_tensorboard_reads_fleet(void **state) {
    (void)state;
    if (!find_python()) {
        print_message("SKIP: no python3 with numpy and tensorboard, and pip could not install them\n");
        skip();
    }
    const char *src = getenv("FLEET_SOURCE_DIR");
    assert_non_null(src);
    char run_dir[128], cmd[4096];
    snprintf(run_dir, sizeof run_dir, "%s/run", g_dir);
    assert_int_equal(mkdir(run_dir, 0755), 0);
    fl_err_t err;
    fl_err_init(&err);
    fl_tfevents_t *w = NULL;
    if (fl_tfevents_open(run_dir, &w, &err) != FL_OK) fail_msg("open: %s", err.msg);
    const char *tags[] = {"env/steps_per_s", "loss/td", "replay/size"};
    for (int k = 0; k < K; k++) {
        double v[3] = {1000.0 + k * 0.1, (k % 7 - 3) / 3.0, k * 16777217.0};
        if (fl_tfevents_scalars(w, step_of(k), wall_of(k), 3, tags, v, &err) != FL_OK)
            fail_msg("event %d: %s", k, err.msg);
        if (k % EVAL_EVERY == 0 &&
            fl_tfevents_scalar(w, "eval/return_mean", step_of(k), wall_of(k) + 0.5, -200.0 + k * 1.37, &err) != FL_OK)
            fail_msg("eval event %d: %s", k, err.msg);
    }
    /* Read while the writer is still open, as TensorBoard reads a live run. */
    snprintf(cmd, sizeof cmd, "%s %s %s/tests/py/tensorboard_interop.py check %s", g_env, g_python, src, run_dir);
    assert_int_equal(run_cmd(cmd), 0);
    fl_tfevents_close(w);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fl_tb_py_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A real run (CartPole, a few seconds, an evaluation every second): its event file holds
 * every metrics.csv column (Gorila's pushes and staleness not, in this Ape-X run), the
 * evaluations and each actor's training return, point for point with the CSV files; and
 * the configuration: the text summary (every config.ini key) and the hparams plugin's
 * records, read by the text and hparams plugins and the HPARAMS tab's handlers, with
 * the last evaluation return as the run's metric (tensorboard_interop.py, check_config). */
static void test_a_run_writes_tensorboard_events(void **state) {
    (void)state;
    if (!find_python()) {
        print_message("SKIP: no python3 with numpy and tensorboard, and pip could not install them\n");
        skip();
    }
    const char *sets[] = {"run.max_seconds=8", "run.stop_at_target=false", "eval.every=1"};
    char *log = NULL;
    int rc = run_fleet_at(g_dir, NULL, 0, "tbrun", sets, 3, 120, &log);
    free(log);
    assert_int_equal(rc, 0);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s %s/tests/py/tensorboard_interop.py run %s/tbrun", g_env, g_python,
             getenv("FLEET_SOURCE_DIR"), g_dir);
    assert_int_equal(run_cmd(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_tensorboard_reads_fleet),
                                       cmocka_unit_test(test_a_run_writes_tensorboard_events)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
