/* proc_util: helpers for integration tests that run the real `fleet` binary. */
#ifndef FL_TESTS_PROC_UTIL_H
#define FL_TESTS_PROC_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline const char *fleet_bin(void) {
    const char *b = getenv("FLEET_BIN");
    return b ? b : "fleet";
}

static inline const char *fleet_source_dir(void) {
    const char *s = getenv("FLEET_SOURCE_DIR");
    return s ? s : ".";
}

/* Starts argv with stdout+stderr redirected to out_path; returns the pid. */
static inline pid_t start_process(char *const argv[], const char *out_path) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Starts a service (`fleet replay|paramserver ... --ready-fd FD`) with output to
 * out_path and reads the address it writes on its ready pipe into addr (the newline
 * dropped). argv must hold "--ready-fd" followed by a slot for the descriptor's number,
 * which is filled in here (fd_arg: room for it). Waits up to timeout_s; returns the pid,
 * with addr "" when the service closed the pipe without an address or time ran out
 * (the caller reports it, with the log). */
static inline pid_t start_service_process(char *argv[], char fd_arg[16], const char *out_path, double timeout_s,
                                          char *addr, size_t len) {
    int p[2];
    addr[0] = '\0';
    if (pipe(p) != 0) return -1;
    snprintf(fd_arg, 16, "%d", p[1]);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    size_t got = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct pollfd pf = {p[0], POLLIN, 0};
        int r = poll(&pf, 1, 200);
        if (r > 0) {
            ssize_t k = read(p[0], addr + got, len - 1 - got);
            if (k <= 0) break; /* closed without an address: it failed */
            got += (size_t)k;
            addr[got] = '\0';
            if (strchr(addr, '\n')) break;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 > timeout_s) break;
    }
    close(p[0]);
    char *nl = strchr(addr, '\n');
    if (nl)
        *nl = '\0';
    else
        addr[0] = '\0';
    return pid;
}

/* Waits up to timeout_s for pid; returns its wait status, or -1 on timeout (then kills it). */
static inline int wait_process(pid_t pid, double timeout_s) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        usleep(20000);
    }
}

/* Runs argv to completion; captures combined output (malloc'd, NUL-terminated) and the
 * exit code (-1 on timeout or signal). */
static inline int run_capture(char *const argv[], double timeout_s, char **output) {
    char path[] = "/tmp/fleet-test-out-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    pid_t pid = start_process(argv, path);
    int status = wait_process(pid, timeout_s);
    FILE *f = fopen(path, "rb");
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (f) {
        size_t k;
        while ((k = fread(buf + n, 1, cap - n - 1, f)) > 0) {
            n += k;
            if (n + 1 >= cap) {
                cap *= 2;
                buf = realloc(buf, cap);
            }
        }
        fclose(f);
    }
    buf[n] = '\0';
    unlink(path);
    *output = buf;
    if (status == -1 || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

static inline char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t k = fread(buf, 1, (size_t)n, f);
    buf[k] = '\0';
    fclose(f);
    return buf;
}

/* Runs a shell command line (printf format) in dir, with the fleet binary as $F and the
 * source tree as $S; returns its exit status (-1 when it did not exit) and its combined
 * output in *out (never NULL; the caller frees it), which is also echoed to stderr (the
 * last 3000 bytes) for the test's log. */
static inline int shell_in(const char *dir, char **out, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int shell_in(const char *dir, char **out, const char *fmt, ...) {
    char line[2048], cmd[4096], log[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    snprintf(log, sizeof log, "%s/out.txt", dir);
    snprintf(cmd, sizeof cmd, "cd '%s' && F='%s' S='%s'; (%s) >'%s' 2>&1 </dev/null", dir, fleet_bin(),
             fleet_source_dir(), line, log);
    int rc = system(cmd);
    *out = read_file(log);
    if (!*out) *out = calloc(1, 1);
    fprintf(stderr, "$ %s\n%s", line, strlen(*out) > 3000 ? *out + strlen(*out) - 3000 : *out);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The value of `key=` in a key=value file's text (copied into out), or NULL. */
static inline const char *kv_get(const char *text, const char *key, char *out, size_t len) {
    size_t kl = strlen(key);
    const char *p = text;
    while (p && *p) {
        if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
            const char *v = p + kl + 1;
            size_t n = strcspn(v, "\n");
            if (n >= len) n = len - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return out;
        }
        p = strchr(p, '\n');
        if (p) p++;
    }
    return NULL;
}

static inline void rm_rf(const char *path) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    int rc = system(cmd);
    (void)rc;
}

#endif
