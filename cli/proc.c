/* proc: role processes started by fork + exec (see proc.h). */
#include "cli/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/stop.h"

static char g_self[4096];

int fl_proc_init(void) {
    ssize_t sl = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (sl <= 0) return -1;
    g_self[sl] = '\0';
    return 0;
}

int fl_proc_clean_exit(int status) {
    return (WIFEXITED(status) && WEXITSTATUS(status) == 0) || (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
}

/* Starts `fleet ROLE args...`; with want_ready, *ready_fd gets the pipe on which the
 * child writes its address (its fd 3). */
int fl_proc_spawn_start(fl_child_t *c, const char *role, int index, char *const extra[], int want_ready, int *ready_fd) {
    snprintf(c->role, sizeof c->role, "%s", role);
    c->index = index;
    c->addr[0] = '\0';
    *ready_fd = -1;
    int fds[2] = {-1, -1};
    if (want_ready && pipe(fds) != 0) return -1;
    char *argv[32];
    int n = 0;
    argv[n++] = "fleet";
    argv[n++] = (char *)role;
    for (int i = 0; extra[i] && n < 28; i++) argv[n++] = extra[i];
    if (want_ready) {
        argv[n++] = "--ready-fd";
        argv[n++] = "3";
    }
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) {
        if (want_ready) {
            close(fds[0]);
            close(fds[1]);
        }
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        setpgid(0, 0);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (want_ready) {
            if (fds[1] != 3) {
                dup2(fds[1], 3);
            }
            close_range(4, ~0U, 0);
        } else {
            close_range(3, ~0U, 0);
        }
        execv(g_self, argv);
        _exit(127);
    }
    c->pid = pid;
    c->running = 1;
    if (!want_ready) return 0;
    close(fds[1]);
    *ready_fd = fds[0];
    return 0;
}

/* Waits (up to timeout_s) for the child to write its address on ready_fd, which it
 * closes. */
int fl_proc_spawn_wait(fl_child_t *c, int ready_fd, double timeout_s) {
    size_t got = 0;
    double until = fl_clock_sec() + timeout_s;
    int ok = 0;
    while (fl_clock_sec() < until && !fl_stop_requested()) {
        struct pollfd p = {ready_fd, POLLIN, 0};
        int r = poll(&p, 1, 100);
        if (r < 0 && errno != EINTR) break;
        if (r <= 0) continue;
        ssize_t k = read(ready_fd, c->addr + got, sizeof c->addr - 1 - got);
        if (k <= 0) break; /* EOF: the child closed the pipe or died */
        got += (size_t)k;
        c->addr[got] = '\0';
        char *nl = strchr(c->addr, '\n');
        if (nl) {
            *nl = '\0';
            ok = 1;
            break;
        }
    }
    close(ready_fd);
    return ok ? 0 : -1;
}

/* Starts `fleet ROLE args...`; with want_ready, waits (up to timeout_s) for the child to
 * write its address on fd 3. */
int fl_proc_spawn(fl_child_t *c, const char *role, int index, char *const extra[], int want_ready, double timeout_s) {
    int fd = -1;
    if (fl_proc_spawn_start(c, role, index, extra, want_ready, &fd) != 0) return -1;
    return want_ready ? fl_proc_spawn_wait(c, fd, timeout_s) : 0;
}

void fl_proc_describe_status(int status, char *buf, size_t len) {
    if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "stopped (status 0x%x)", status);
}

/* Reaps exited children, each by its own pid (never waitpid(-1): other children of the
 * launcher, e.g. cli/curve's gnuplot, are reaped by their owners); returns the first one
 * that exited (or NULL). */
fl_child_t *fl_proc_reap(fl_child_t *kids, int n) {
    fl_child_t *first = NULL;
    for (int i = 0; i < n; i++) {
        if (!kids[i].running || kids[i].pid <= 0) continue;
        int status;
        pid_t pid = waitpid(kids[i].pid, &status, WNOHANG);
        if (pid == kids[i].pid) {
            kids[i].running = 0;
            kids[i].status = status;
            if (!first) first = &kids[i];
        }
    }
    return first;
}

/* SIGTERM to every running child whose role is in `roles`, then waits up to grace_s. */
void fl_proc_stop_roles(fl_child_t *kids, int n, const char *roles, double grace_s) {
    for (int i = 0; i < n; i++)
        if (kids[i].running && strstr(roles, kids[i].role)) kill(kids[i].pid, SIGTERM);
    double until = fl_clock_sec() + grace_s;
    for (;;) {
        fl_proc_reap(kids, n);
        int left = 0;
        for (int i = 0; i < n; i++)
            if (kids[i].running && strstr(roles, kids[i].role)) left++;
        if (!left) return;
        if (fl_clock_sec() > until) break;
        fl_sleep_sec(0.02);
    }
    for (int i = 0; i < n; i++) {
        if (kids[i].running && strstr(roles, kids[i].role)) {
            FL_WARN("%s %d (pid %d) did not stop within %.0f s: killing it", kids[i].role, kids[i].index,
                    (int)kids[i].pid, grace_s);
            kill(kids[i].pid, SIGKILL);
            int status;
            waitpid(kids[i].pid, &status, 0);
            kids[i].running = 0;
            kids[i].status = status;
        }
    }
}

int fl_proc_mkdir_p(const char *path) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}
