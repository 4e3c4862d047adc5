/* Tests of actor.sched_idle (fl_cli_sched_idle, cli/cli.h), which `fleet actor` applies
 * to itself, and of its undoing by the launcher when it stops a child (fl_proc_unidle,
 * launcher/proc.h): each in a child process, whose scheduling policy it changes. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli/cli.h"
#include "launcher/proc.h"

static void *policy_of_thread(void *out) {
    *(int *)out = sched_getscheduler(0);
    return NULL;
}

/* actor.sched_idle: off leaves the policy alone; on puts the process's thread under
 * SCHED_IDLE, and the threads it starts afterwards inherit it (in a child process). */
static void test_sched_idle(void **unused) {
    (void)unused;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        const int before = sched_getscheduler(0);
        fl_cli_sched_idle(0, "actor.sched_idle");
        if (sched_getscheduler(0) != before) _exit(1);
        fl_cli_sched_idle(1, "actor.sched_idle");
        if (sched_getscheduler(0) != SCHED_IDLE) _exit(2);
        pthread_t t;
        int got = -1;
        if (pthread_create(&t, NULL, policy_of_thread, &got) != 0 || pthread_join(t, NULL) != 0) _exit(3);
        _exit(got == SCHED_IDLE ? 0 : 4);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static int g_release[2]; /* the child's main thread to its waiting thread in test_unidle */

static void *wait_for_release(void *tid) {
    *(volatile pid_t *)tid = (pid_t)syscall(SYS_gettid);
    char c;
    if (read(g_release[0], &c, 1) != 1) return NULL;
    return NULL;
}

/* fl_proc_unidle: a stopping process's threads under SCHED_IDLE (its first and one it
 * started) go back to SCHED_OTHER. */
static void test_unidle(void **unused) {
    (void)unused;
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(g_release), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        fl_cli_sched_idle(1, "actor.sched_idle");
        pthread_t t;
        volatile pid_t tid = 0;
        if (pthread_create(&t, NULL, wait_for_release, (void *)&tid) != 0) _exit(3);
        while (!tid) usleep(1000);
        if (sched_getscheduler(0) != SCHED_IDLE || sched_getscheduler(tid) != SCHED_IDLE) _exit(4);
        char c;
        if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1) _exit(5); /* the parent unidles us */
        const int main_policy = sched_getscheduler(0), thread_policy = sched_getscheduler(tid);
        if (write(g_release[1], "x", 1) != 1) _exit(6);
        pthread_join(t, NULL);
        _exit(main_policy == SCHED_OTHER && thread_policy == SCHED_OTHER ? 0 : 8);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    fl_proc_unidle(pid);
    assert_int_equal(write(go[1], "g", 1), 1);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    int fds[] = {ready[0], ready[1], go[0], go[1], g_release[0], g_release[1]};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) close(fds[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unidle),
        cmocka_unit_test(test_sched_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
