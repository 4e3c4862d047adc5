/* The restart rule of supervised role processes (launcher/proc.h fl_restart_after): waits that
 * double over quick deaths up to the cap, a role that ran long enough starting over, the
 * give-up after run.max_restarts + 1 quick deaths in a row, restarts off, and an exit
 * status 2 (a configuration error the role printed) never restarted. The wait statuses
 * are real ones, from children that exit or are killed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher/proc.h"

/* The wait status of a child that exits with `code`, or is killed by `sig` when sig > 0. */
static int status_of(int code, int sig) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (sig > 0) { /* cmocka catches SIGSEGV in the test process, and the child inherits that */
            signal(sig, SIG_DFL);
            raise(sig);
        }
        _exit(code);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void test_quick_deaths_double_the_wait_up_to_the_cap(void **state) {
    (void)state;
    const int crash = status_of(1, 0), killed = status_of(0, SIGKILL);
    fl_restart_t r = {0};
    const char *why = "unset";
    double now = 100.0, want = FL_RESTART_FIRST_DELAY_S;
    for (int i = 0; i < 12; i++) {
        r.started_at = now; /* started again, and died 1 s later */
        now += 1.0;
        const double wait = fl_restart_after(&r, now, 1000, i % 2 ? crash : killed, &why);
        assert_null(why);
        assert_true(wait == want);
        assert_int_equal(r.quick, i + 1);
        want = want * 2 < FL_RESTART_MAX_DELAY_S ? want * 2 : FL_RESTART_MAX_DELAY_S;
        now += wait;
    }
    /* one that ran for FL_RESTART_STABLE_S starts over at the first wait */
    r.started_at = now;
    now += FL_RESTART_STABLE_S;
    assert_true(fl_restart_after(&r, now, 1000, crash, &why) == FL_RESTART_FIRST_DELAY_S);
    assert_null(why);
    assert_int_equal(r.quick, 0);
}

static void test_gives_up_after_max_restarts_quick_deaths(void **state) {
    (void)state;
    const int crash = status_of(1, 0);
    fl_restart_t r = {0};
    const char *why = NULL;
    double now = 50.0;
    for (int i = 0; i < 3; i++) {
        r.started_at = now;
        now += 0.5;
        assert_true(fl_restart_after(&r, now, 3, crash, &why) > 0);
        assert_null(why);
    }
    r.started_at = now;
    assert_true(fl_restart_after(&r, now + 0.5, 3, crash, &why) < 0);
    assert_non_null(why);
    assert_non_null(strstr(why, "in a row"));
    /* restarts off: the first death ends it */
    fl_restart_t off = {0};
    why = NULL;
    assert_true(fl_restart_after(&off, 1000.0, 0, crash, &why) < 0);
    assert_non_null(why);
    assert_non_null(strstr(why, "run.max_restarts = 0"));
}

static void test_configuration_error_is_never_restarted(void **state) {
    (void)state;
    const int config = status_of(FL_EXIT_CONFIG, 0);
    fl_restart_t r = {0};
    const char *why = NULL;
    /* even long after its start, with restarts on */
    assert_true(fl_restart_after(&r, 1000.0, 1000, config, &why) < 0);
    assert_non_null(why);
    assert_non_null(strstr(why, "configuration error"));
    /* other exit statuses and signals are restarted */
    const int others[] = {status_of(1, 0), status_of(3, 0), status_of(0, SIGSEGV), status_of(0, SIGKILL)};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        fl_restart_t s = {0};
        why = NULL;
        assert_true(fl_restart_after(&s, 1000.0, 1000, others[i], &why) > 0);
        assert_null(why);
    }
}

/* A role whose creation fails on what it was given exits FL_EXIT_CONFIG; one whose
 * services did not answer exits 1, and is restarted. */
static void test_exit_status_of_create(void **state) {
    (void)state;
    const fl_status config[] = {FL_INVALID_ARGUMENT, FL_UNIMPLEMENTED, FL_PARSE_ERROR, FL_NO_DEVICE};
    for (size_t i = 0; i < sizeof config / sizeof config[0]; i++)
        assert_int_equal(fl_exit_status_of_create(config[i]), FL_EXIT_CONFIG);
    const fl_status other[] = {FL_UNAVAILABLE, FL_DEADLINE_EXCEEDED, FL_NO_MEMORY, FL_INTERNAL, FL_DATA_LOSS};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) assert_int_equal(fl_exit_status_of_create(other[i]), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quick_deaths_double_the_wait_up_to_the_cap),
        cmocka_unit_test(test_gives_up_after_max_restarts_quick_deaths),
        cmocka_unit_test(test_configuration_error_is_never_restarted),
        cmocka_unit_test(test_exit_status_of_create),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
