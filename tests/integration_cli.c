/* The `fleet` command's usage and configuration errors, through the real binary. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/proc_util.h"

static int fleet(char **out, const char *a1, const char *a2, const char *a3, const char *a4) {
    char *argv[] = {(char *)fleet_bin(), (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
    return run_capture(argv, 60, out);
}

static void test_usage(void **state) {
    (void)state;
    char *out;
    assert_int_equal(fleet(&out, NULL, NULL, NULL, NULL), 2);
    assert_non_null(strstr(out, "usage: fleet VERB"));
    free(out);
    assert_int_equal(fleet(&out, "frobnicate", NULL, NULL, NULL), 2);
    assert_non_null(strstr(out, "unknown verb 'frobnicate'"));
    free(out);
    assert_int_equal(fleet(&out, "version", NULL, NULL, NULL), 0);
    assert_non_null(strstr(out, "fleet "));
    free(out);
    const char *verbs[] = {"run", "replay", "paramserver", "actor", "learner", "env", "version", "help"};
    for (int i = 0; i < 8; i++) {
        assert_int_equal(fleet(&out, "help", verbs[i], NULL, NULL), 0);
        assert_non_null(strstr(out, "usage: fleet"));
        free(out);
    }
    assert_int_equal(fleet(&out, "help", "config", NULL, NULL), 0);
    assert_non_null(strstr(out, "learner.batch_size"));
    free(out);
    assert_int_equal(fleet(&out, "replay", "--bogus", NULL, NULL), 2);
    assert_non_null(strstr(out, "unknown option '--bogus'"));
    free(out);
    assert_int_equal(fleet(&out, "env", "list", NULL, NULL), 0);
    assert_non_null(strstr(out, "cartpole"));
    free(out);
}

static void test_config_errors(void **state) {
    (void)state;
    char *out;
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "nosuch.key=1"), 2);
    assert_non_null(strstr(out, "nosuch"));
    free(out);
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "learner.batch_size=0"), 2);
    assert_non_null(strstr(out, "learner.batch_size"));
    assert_non_null(strstr(out, "[1, 65536]"));
    free(out);
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "replay.alpha=abc"), 2);
    assert_non_null(strstr(out, "replay.alpha"));
    free(out);
    char path[] = "/tmp/fleet-bad-XXXXXX.ini";
    int fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    const char *bad = "[run]\nname = x\nthis line is not ini\n";
    assert_int_equal(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
    close(fd);
    assert_int_equal(fleet(&out, "run", path, "--dry-run", NULL), 2);
    assert_non_null(strstr(out, path));
    assert_non_null(strstr(out, ":3"));
    free(out);
    unlink(path);
    assert_int_equal(fleet(&out, "run", "/nonexistent/x.ini", "--dry-run", NULL), 2);
    assert_non_null(strstr(out, "/nonexistent/x.ini"));
    free(out);
    /* what a role would refuse is refused before any process starts: a network that does
     * not fit the env's observations, a misspelt env name (with a suggestion) */
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "model.spec=conv(16,3,1) relu flatten dueling"), 2);
    assert_non_null(strstr(out, "model.spec"));
    assert_non_null(strstr(out, "env cartpole"));
    free(out);
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "env.name=cartpol"), 2);
    assert_non_null(strstr(out, "did you mean 'cartpole'?"));
    free(out);
    /* a good dry run prints the plan and the effective config */
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "actor.count=3"), 0);
    assert_non_null(strstr(out, "actors       3"));
    assert_non_null(strstr(out, "[learner]"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
