/* gnuplot: drawings by a gnuplot child (see gnuplot.h). */
#include "launcher/gnuplot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "launcher/proc.h"

struct fl_gnuplot {
    char gnuplot[PATH_MAX]; /* "" when none was found */
    char dir[PATH_MAX];
    char script[256], png[256], log[256];
    char png_path[PATH_MAX + 260], tmp_path[PATH_MAX + 64];
    char tmp_name[48], out_arg[64]; /* the temporary picture, in dir; gnuplot's -e argument */
    pid_t pid;                      /* the running drawer, or 0 */
    struct stat png_before;         /* the picture when the drawer started (st_ino 0: absent) */
    int code;                       /* the last drawing's exit code, -1 unknown */
};

fl_gnuplot_t *fl_gnuplot_create(const char *dir, const char *script, const char *png, const char *log) {
    fl_gnuplot_t *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    snprintf(g->dir, sizeof g->dir, "%s", dir && dir[0] ? dir : ".");
    snprintf(g->script, sizeof g->script, "%s", script);
    snprintf(g->png, sizeof g->png, "%s", png);
    snprintf(g->log, sizeof g->log, "%s", log);
    snprintf(g->png_path, sizeof g->png_path, "%s/%s", g->dir, g->png);
    static int serial; /* distinct drawing objects of one process */
    int id = __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED);
    snprintf(g->tmp_name, sizeof g->tmp_name, ".%.12s-%d-%d.tmp", g->png, (int)getpid(), id);
    snprintf(g->out_arg, sizeof g->out_arg, "out='%s'", g->tmp_name);
    snprintf(g->tmp_path, sizeof g->tmp_path, "%s/%s", g->dir, g->tmp_name);
    g->code = -1;
    if (fl_proc_find_on_path("gnuplot", g->gnuplot, sizeof g->gnuplot) != 0) g->gnuplot[0] = '\0';
    return g;
}

int fl_gnuplot_available(const fl_gnuplot_t *g) {
    return g && g->gnuplot[0] != '\0';
}

const char *fl_gnuplot_program(const fl_gnuplot_t *g) {
    return g ? g->gnuplot : "";
}

int fl_gnuplot_running(const fl_gnuplot_t *g) {
    return g && g->pid > 0;
}

int fl_gnuplot_code(const fl_gnuplot_t *g) {
    return g ? g->code : -1;
}

static void say(int fd, const char *msg) {
    ssize_t r = write(fd, msg, strlen(msg));
    (void)r;
}

/* In the forked drawer: only async-signal-safe calls, then _exit. */
static void drawer(const fl_gnuplot_t *g, char *const argv[]) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    setpgid(0, 0);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++) sigaction(s, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (chdir(g->dir) != 0) _exit(FL_GNUPLOT_EXIT_CHDIR);
    int in = open("/dev/null", O_RDONLY);
    int out = open(g->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (out < 0) out = open("/dev/null", O_WRONLY);
    if (in >= 0) dup2(in, 0);
    if (out >= 0) {
        dup2(out, 1);
        dup2(out, 2);
    }
    close_range(3, ~0U, 0);
    unlink(g->tmp_name);
    pid_t c = _Fork();
    if (c < 0) _exit(FL_GNUPLOT_EXIT_FORK);
    if (c == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(argv[0], argv);
        say(2, "fleet: cannot run gnuplot\n");
        _exit(FL_GNUPLOT_EXIT_EXEC);
    }
    int st;
    while (waitpid(c, &st, 0) < 0)
        if (errno != EINTR) _exit(FL_GNUPLOT_EXIT_FORK);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        unlink(g->tmp_name);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WTERMSIG(st) & 127));
    }
    struct stat ps;
    if (stat(g->tmp_name, &ps) != 0 || ps.st_size == 0 || rename(g->tmp_name, g->png) != 0) {
        say(2, "fleet: gnuplot wrote no picture\n");
        unlink(g->tmp_name);
        _exit(FL_GNUPLOT_EXIT_RESULT);
    }
    _exit(0);
}

int fl_gnuplot_start(fl_gnuplot_t *g) {
    if (!fl_gnuplot_available(g)) {
        errno = ENOENT;
        return -1;
    }
    if (g->pid > 0) {
        errno = EBUSY;
        return -1;
    }
    if (stat(g->png_path, &g->png_before) != 0) memset(&g->png_before, 0, sizeof g->png_before);
    char *argv[] = {g->gnuplot, "-e", g->out_arg, g->script, NULL};
    pid_t pid = _Fork();
    if (pid < 0) return -1;
    if (pid == 0) drawer(g, argv);
    setpgid(pid, pid); /* also here, so that a kill of the group right away reaches it */
    g->pid = pid;
    return 0;
}

/* Someone else reaped the drawer (a waitpid(-1) elsewhere): the picture tells whether it
 * was replaced. */
static int inferred_result(const fl_gnuplot_t *g) {
    struct stat now;
    if (stat(g->png_path, &now) != 0) return -1;
    int replaced = now.st_ino != g->png_before.st_ino || now.st_dev != g->png_before.st_dev ||
                   now.st_mtim.tv_sec != g->png_before.st_mtim.tv_sec ||
                   now.st_mtim.tv_nsec != g->png_before.st_mtim.tv_nsec;
    return replaced ? 0 : -1;
}

int fl_gnuplot_poll(fl_gnuplot_t *g) {
    if (!g) return -1;
    if (g->pid <= 0) return g->code == 0 ? 0 : -1;
    int status;
    pid_t r = waitpid(g->pid, &status, WNOHANG);
    if (r == 0) return 1;
    g->pid = 0;
    if (r < 0) {
        int ok = inferred_result(g);
        g->code = ok == 0 ? 0 : -1;
        return ok;
    }
    g->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return g->code == 0 ? 0 : -1;
}

void fl_gnuplot_kill(fl_gnuplot_t *g) {
    if (!g || g->pid <= 0) return;
    if (kill(-g->pid, SIGKILL) != 0) kill(g->pid, SIGKILL);
    int status;
    while (waitpid(g->pid, &status, 0) < 0 && errno == EINTR) {
    }
    g->pid = 0;
    g->code = 128 + SIGKILL;
    unlink(g->tmp_path);
}

int fl_gnuplot_wait(fl_gnuplot_t *g, double deadline) {
    for (;;) {
        int r = fl_gnuplot_poll(g);
        if (r != 1) return r;
        if (fl_clock_sec() >= deadline) {
            fl_gnuplot_kill(g);
            return -2;
        }
        fl_sleep_sec(0.01);
    }
}

void fl_gnuplot_destroy(fl_gnuplot_t *g) {
    if (!g) return;
    fl_gnuplot_kill(g);
    free(g);
}
