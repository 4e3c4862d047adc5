/* A whole fleet with TLS and tokens on loopback: `fleet certs` makes the credentials,
 * `fleet run` with run.tls_dir starts every role with them, and the fleet makes progress
 * to its step budget: actors' inserts are acknowledged, the learner trains and publishes
 * (apex: Publish with the learner token) or pushes gradients (gorila: PushGradients with
 * the learner token), and evaluators and actors fetch the new parameters. A run.tls_dir
 * that does not hold credentials stops the run before anything starts, naming the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/proc_util.h"
#include "tests/run_util.h"

static char g_tmp[256], g_creds[300], g_tls_set[400];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-tls-itest-XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    snprintf(g_creds, sizeof g_creds, "%s/creds", g_tmp);
    snprintf(g_tls_set, sizeof g_tls_set, "run.tls_dir=%s", g_creds);
    char *argv[] = {(char *)fleet_bin(), "certs", g_creds, NULL};
    char *out = NULL;
    int rc = run_capture(argv, 120, &out);
    if (out) fprintf(stderr, "%s", out);
    free(out);
    return rc == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_tmp);
    return 0;
}

static void check_progress(const char *name, const char *log) {
    assert_no_error_lines(log);
    char *sum = summary_at(g_tmp, name);
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "exit_code"), 0);
    assert_true(summary_u64(sum, "learner_steps") >= 200);
    assert_true(summary_u64(sum, "actors_acked") > 0);
    assert_true(summary_u64(sum, "replay_inserted") >= summary_u64(sum, "actors_acked"));
    /* Parameters changed hands over TLS: versions past the first. */
    assert_true(summary_u64(sum, "param_version") > 1);
    free(sum);
}

static void test_apex_fleet_with_tls(void **state) {
    (void)state;
    const char *sets[] = {g_tls_set, "run.max_learner_steps=200", "run.max_seconds=240", "run.stop_at_target=false"};
    char *log = NULL;
    int rc = run_fleet_at(g_tmp, NULL, 0, "apex", sets, 4, 400, &log);
    assert_non_null(log);
    assert_int_equal(rc, 0);
    check_progress("apex", log);
    free(log);
}

static void test_gorila_fleet_with_tls(void **state) {
    (void)state;
    const char *sets[] = {g_tls_set, "learner.mode=gorila", "run.max_learner_steps=200", "run.max_seconds=240",
                          "run.stop_at_target=false"};
    char *log = NULL;
    int rc = run_fleet_at(g_tmp, NULL, 0, "gorila", sets, 5, 400, &log);
    assert_non_null(log);
    assert_int_equal(rc, 0);
    check_progress("gorila", log);
    char *sum = summary_at(g_tmp, "gorila");
    assert_non_null(sum);
    assert_true(summary_u64(sum, "pushes_applied") > 0);
    free(sum);
    free(log);
}

static void test_tls_dir_without_credentials(void **state) {
    (void)state;
    char set[400];
    snprintf(set, sizeof set, "run.tls_dir=%s/empty", g_tmp);
    const char *sets[] = {set};
    char *log = NULL;
    int rc = run_fleet_at(g_tmp, NULL, 0, "nocreds", sets, 1, 120, &log);
    assert_non_null(log);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(log, "/empty/ca.pem"));
    assert_non_null(strstr(log, "fleet certs"));
    free(log);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_apex_fleet_with_tls),
        cmocka_unit_test(test_gorila_fleet_with_tls),
        cmocka_unit_test(test_tls_dir_without_credentials),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
