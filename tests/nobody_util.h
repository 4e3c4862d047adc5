/* nobody_util: running a piece of a test as another local user (the user nobody, uid and
 * gid 65534), for the checks that another user cannot reach a fleet's services. */
#ifndef FL_TESTS_NOBODY_UTIL_H
#define FL_TESTS_NOBODY_UTIL_H

#include <grp.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* fn(arg) in a child process that has become the user nobody: the int it returns, or
 * `fail` when this process cannot switch users (not root) or the child could not (or
 * could not say what fn returned). */
static inline int as_nobody(int (*fn)(void *), void *arg, int fail) {
    if (geteuid() != 0) return fail;
    int fds[2];
    if (pipe(fds) != 0) return fail;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return fail;
    }
    if (pid == 0) {
        close(fds[0]);
        int r = fail;
        if (setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0) r = fn(arg);
        if (write(fds[1], &r, sizeof r) != (ssize_t)sizeof r) _exit(1);
        _exit(0);
    }
    close(fds[1]);
    int r = fail;
    if (read(fds[0], &r, sizeof r) != (ssize_t)sizeof r) r = fail;
    close(fds[0]);
    waitpid(pid, NULL, 0);
    return r;
}

#endif
