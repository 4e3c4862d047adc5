/* proc: role processes started by fork + exec (see proc.h). */
#include "launcher/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/credential.h"
#include "common/log.h"
#include "common/stop.h"

extern char **environ;

static char g_self[4096];
static char g_log_dir[512];
/* FLEET_CREDENTIAL's source: the run secret (any role), or one role's key */
static int g_cred_kind; /* 0 none, 1 secret, 2 role key */
static uint8_t g_cred_key[FL_CRED_KEY_BYTES];
static char g_cred_role[16];
static int g_cred_index;

void fl_proc_set_secret(const unsigned char secret[16]) {
    memcpy(g_cred_key, secret, FL_CRED_KEY_BYTES);
    g_cred_kind = 1;
}

void fl_proc_set_role_key(const char *role, int index, const unsigned char key[16]) {
    memcpy(g_cred_key, key, FL_CRED_KEY_BYTES);
    snprintf(g_cred_role, sizeof g_cred_role, "%s", role);
    g_cred_index = index;
    g_cred_kind = 2;
}

/* "FLEET_CREDENTIAL=N:TOKEN" for the next start of c into out, or "" without a source. */
static void credential_var(const fl_child_t *c, char *out, size_t len) {
    out[0] = '\0';
    uint8_t key[FL_CRED_KEY_BYTES];
    if (g_cred_kind == 1)
        fl_cred_role_key(g_cred_key, c->role, (uint32_t)c->index, key);
    else if (g_cred_kind == 2 && strcmp(g_cred_role, c->role) == 0 && g_cred_index == c->index)
        memcpy(key, g_cred_key, sizeof key);
    else
        return;
    char tok[FL_CRED_TOKEN_CHARS + 1];
    fl_cred_token(key, c->incarnation, tok);
    snprintf(out, len, "%s=%llu:%s", FL_CRED_ENV, c->incarnation, tok);
}

void fl_proc_set_log_dir(const char *dir) {
    snprintf(g_log_dir, sizeof g_log_dir, "%s", dir ? dir : "");
}

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
int fl_proc_spawn_start(fl_child_t *c, const char *role, int index, char *const extra[], int want_ready,
                        int *ready_fd) {
    snprintf(c->role, sizeof c->role, "%s", role);
    c->index = index;
    c->addr[0] = '\0';
    c->log[0] = '\0';
    c->log_seen = 0;
    if (g_log_dir[0]) snprintf(c->log, sizeof c->log, "%s/%s-%d.log", g_log_dir, role, index);
    struct stat st; /* a restarted role appends: what its predecessor wrote was seen already */
    if (c->log[0] && stat(c->log, &st) == 0) c->log_seen = (long)st.st_size;
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
    /* the environment: ours without any FLEET_CREDENTIAL, and the child's own */
    c->incarnation++;
    char cred[96];
    credential_var(c, cred, sizeof cred);
    size_t ne = 0;
    while (environ && environ[ne]) ne++;
    char **envp = malloc((ne + 2) * sizeof *envp);
    if (!envp) {
        if (want_ready) {
            close(fds[0]);
            close(fds[1]);
        }
        return -1;
    }
    size_t k = 0;
    const size_t var_len = strlen(FL_CRED_ENV);
    for (size_t i = 0; i < ne; i++)
        if (!(strncmp(environ[i], FL_CRED_ENV, var_len) == 0 && environ[i][var_len] == '=')) envp[k++] = environ[i];
    if (cred[0]) envp[k++] = cred;
    envp[k] = NULL;
    pid_t pid = fork();
    if (pid < 0) {
        free(envp);
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
        if (c->log[0]) {
            int lf = open(c->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (lf >= 0) {
                dup2(lf, STDOUT_FILENO);
                dup2(lf, STDERR_FILENO);
            }
        }
        if (want_ready) {
            if (fds[1] != 3) {
                dup2(fds[1], 3);
            }
            close_range(4, ~0U, 0);
        } else {
            close_range(3, ~0U, 0);
        }
        execve(g_self, argv, envp);
        _exit(127);
    }
    free(envp);
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

/* Reaps exited children; returns the first one that exited (or NULL). Each child is
 * waited for by its pid, so that other children of the process (a plot being drawn) are
 * left to whoever started them. */
fl_child_t *fl_proc_reap(fl_child_t *kids, int n) {
    fl_child_t *first = NULL;
    for (int i = 0; i < n; i++) {
        if (!kids[i].pid || !kids[i].running) continue;
        int status;
        pid_t pid = waitpid(kids[i].pid, &status, WNOHANG);
        if (pid != kids[i].pid) continue;
        kids[i].running = 0;
        kids[i].status = status;
        if (!first) first = &kids[i];
    }
    return first;
}

/* SIGTERM to every running child whose role is in `roles`, then waits up to grace_s. */
char *fl_proc_read_file(const char *path, size_t max, long long *len) {
    if (len) *len = -1;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
    const int bad = !buf || ferror(f) || n == 0 || n > max;
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    if (len) *len = (long long)n;
    return buf;
}

double fl_proc_cpu_of(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ut = 0, st = 0;
    /* after the name: state (3), then fields 4-13, utime (14) and stime (15) */
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return -1;
    const long hz = sysconf(_SC_CLK_TCK);
    return (double)(ut + st) / (double)(hz > 0 ? hz : 100);
}

void fl_proc_unidle(pid_t pid) {
#ifdef SCHED_IDLE
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (!d) return;
    const struct sched_param p = {.sched_priority = 0};
    for (struct dirent *e; (e = readdir(d));) {
        const pid_t tid = (pid_t)atoi(e->d_name);
        if (tid > 0 && sched_getscheduler(tid) == SCHED_IDLE) sched_setscheduler(tid, SCHED_OTHER, &p);
    }
    closedir(d);
#else
    (void)pid;
#endif
}

void fl_proc_stop_roles(fl_child_t *kids, int n, const char *roles, double grace_s) {
    for (int i = 0; i < n; i++)
        if (kids[i].running && strstr(roles, kids[i].role)) {
            fl_proc_unidle(kids[i].pid);
            kill(kids[i].pid, SIGTERM);
        }
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

/* 1 for a line a reader of the terminal must see (see fl_proc_echo_logs). */
static int worth_echoing(const char *line) {
    /* "HH:MM:SS.mmm L ..." */
    int is_log =
        strlen(line) > 15 && line[2] == ':' && line[5] == ':' && line[8] == '.' && line[12] == ' ' && line[14] == ' ';
    return !is_log || line[13] == 'W' || line[13] == 'E';
}

/* Echoes the complete lines of buf[0..n) worth it; returns the bytes they take (a
 * partial last line waits, unless it fills the buffer). */
static size_t echo_lines(char *buf, size_t n, size_t cap) {
    size_t used = 0;
    while (used < n) {
        char *nl = memchr(buf + used, '\n', n - used);
        if (!nl && n < cap) break;
        size_t end = nl ? (size_t)(nl - buf) : n;
        char keep = buf[end];
        buf[end] = '\0';
        if (worth_echoing(buf + used)) fprintf(stderr, "%s\n", buf + used);
        buf[end] = keep;
        used = nl ? end + 1 : end;
    }
    return used;
}

void fl_proc_echo_logs(fl_child_t *kids, int n) {
    enum { CHUNK = 64 * 1024 };
    static char buf[CHUNK];
    for (int i = 0; i < n; i++) {
        fl_child_t *c = &kids[i];
        struct stat st;
        if (!c->log[0] || stat(c->log, &st) != 0 || st.st_size <= c->log_seen) continue;
        int fd = open(c->log, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        for (;;) {
            ssize_t got = pread(fd, buf, CHUNK, c->log_seen);
            if (got <= 0) break;
            size_t used = echo_lines(buf, (size_t)got, CHUNK);
            c->log_seen += (long)used;
            if (used == 0 || got < CHUNK) break;
        }
        close(fd);
    }
    fflush(stderr);
}

void fl_proc_log_tail(const fl_child_t *c, int lines, char *buf, size_t len) {
    buf[0] = '\0';
    FILE *f = c->log[0] ? fopen(c->log, "r") : NULL;
    if (!f) return;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    long from = size > (long)len - 1 ? size - (long)len + 1 : 0;
    if (size < 0 || fseek(f, from, SEEK_SET) != 0) {
        fclose(f);
        return;
    }
    size_t got = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[got] = '\0';
    /* keep the last `lines` lines */
    int seen = 0;
    for (size_t k = got; k-- > 0;) {
        if (buf[k] == '\n' && k + 1 < got && ++seen == lines) {
            memmove(buf, buf + k + 1, got - k);
            return;
        }
    }
}

int fl_proc_find_on_path(const char *prog, char *out, size_t len) {
    const char *path = getenv("PATH");
    if (!path) return -1;
    const char *p = path;
    for (;;) {
        size_t n = strcspn(p, ":");
        char cand[PATH_MAX];
        int k = n == 0 ? snprintf(cand, sizeof cand, "./%s", prog)
                       : snprintf(cand, sizeof cand, "%.*s/%s", (int)n, p, prog);
        struct stat st;
        if (k > 0 && (size_t)k < sizeof cand && stat(cand, &st) == 0 && S_ISREG(st.st_mode) &&
            access(cand, X_OK) == 0) {
            /* absolute, so that it holds after a chdir */
            if (cand[0] != '/') {
                char *abs = realpath(cand, NULL);
                if (!abs) return -1;
                snprintf(out, len, "%s", abs);
                free(abs);
            } else {
                snprintf(out, len, "%s", cand);
            }
            return 0;
        }
        if (p[n] == '\0') break;
        p += n + 1;
    }
    return -1;
}

double fl_restart_after(fl_restart_t *r, double now, long long max_restarts, int status, const char **why) {
    if (now - r->started_at >= FL_RESTART_STABLE_S) {
        r->quick = 0;
        r->delay = FL_RESTART_FIRST_DELAY_S;
    } else {
        r->quick++;
    }
    *why = NULL;
    if (WIFEXITED(status) && WEXITSTATUS(status) == FL_EXIT_CONFIG)
        *why =
            "exit status 2 is a usage or configuration error (its message is above): a restart would fail the "
            "same way";
    else if (max_restarts <= 0)
        *why = "run.max_restarts = 0";
    else if (r->quick > max_restarts)
        *why = "it died run.max_restarts + 1 times in a row within 10 s of its start";
    if (*why) return -1;
    if (r->delay <= 0) r->delay = FL_RESTART_FIRST_DELAY_S;
    double wait = r->delay;
    r->delay = r->delay * 2 < FL_RESTART_MAX_DELAY_S ? r->delay * 2 : FL_RESTART_MAX_DELAY_S;
    return wait;
}
