/* run_util: running `fleet run` (alone or under mpirun) from integration tests, and
 * reading its summary.txt. Include after <cmocka.h> and tests/proc_util.h. */
#ifndef FL_TESTS_RUN_UTIL_H
#define FL_TESTS_RUN_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The text of every file in dir (sorted by name), each after a "==> NAME <==" line,
 * appended to *text (malloc'd; *text may be NULL). */
static inline void append_dir_files(const char *dir, char **text) {
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        char path[1400];
        snprintf(path, sizeof path, "%.1000s/%.255s", dir, names[i]->d_name);
        char *body = names[i]->d_name[0] == '.' ? NULL : read_file(path);
        if (body) {
            size_t old = *text ? strlen(*text) : 0, add = strlen(body) + strlen(path) + 16;
            char *t = realloc(*text, old + add);
            if (t) {
                snprintf(t + old, add, "==> %s <==\n%s", path, body);
                *text = t;
            }
            free(body);
        }
        free(names[i]);
    }
    free(names);
}

/* Starts `[launcher...] fleet run configs/cartpole.ini --set run.out_dir=TMP --set
 * run.name=NAME [--set S]...` with its output in TMP/NAME.log; returns its pid. */
static inline pid_t start_fleet_at(const char *tmp, const char *const *launcher, int nlauncher, const char *name,
                                   const char *const *sets, int nsets) {
    char cfg[1024], out_dir[512], run_name[256], out[512];
    snprintf(cfg, sizeof cfg, "%s/configs/cartpole.ini", fleet_source_dir());
    snprintf(out_dir, sizeof out_dir, "run.out_dir=%s", tmp);
    snprintf(run_name, sizeof run_name, "run.name=%s", name);
    snprintf(out, sizeof out, "%s/%s.log", tmp, name);
    char *argv[80];
    int n = 0;
    for (int i = 0; i < nlauncher && n < 40; i++) argv[n++] = (char *)launcher[i];
    argv[n++] = (char *)fleet_bin();
    argv[n++] = "run";
    argv[n++] = cfg;
    argv[n++] = "--set";
    argv[n++] = out_dir;
    argv[n++] = "--set";
    argv[n++] = run_name;
    for (int i = 0; i < nsets && n < 78; i++) {
        argv[n++] = "--set";
        argv[n++] = (char *)sets[i];
    }
    argv[n] = NULL;
    return start_process(argv, out);
}

/* start_fleet_at, then waits for its end: returns its exit status (-1 on timeout or a
 * signal) and in *log the output (printed, its tail, to stderr) followed by every role's
 * log (TMP/NAME/logs/). */
static inline int run_fleet_at(const char *tmp, const char *const *launcher, int nlauncher, const char *name,
                               const char *const *sets, int nsets, double timeout_s, char **log) {
    char out[512];
    snprintf(out, sizeof out, "%s/%s.log", tmp, name);
    pid_t pid = start_fleet_at(tmp, launcher, nlauncher, name, sets, nsets);
    int status = wait_process(pid, timeout_s);
    *log = read_file(out);
    if (*log)
        fprintf(stderr, "---- fleet run %s (tail) ----\n%s\n", name,
                strlen(*log) > 5000 ? *log + strlen(*log) - 5000 : *log);
    char logs[800];
    snprintf(logs, sizeof logs, "%s/%s/logs", tmp, name);
    append_dir_files(logs, log);
    if (status == -1 || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

/* A file of run folder tmp/name (NULL when it cannot be read). */
static inline char *run_file_at(const char *tmp, const char *name, const char *file) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", tmp, name, file);
    return read_file(path);
}

static inline char *summary_at(const char *tmp, const char *name) {
    return run_file_at(tmp, name, "summary.txt");
}

/* The comma-separated unsigned values of `key` in the summary; returns how many. */
static inline int summary_list(const char *sum, const char *key, unsigned long long *v, int max) {
    char buf[4096];
    if (!kv_get(sum, key, buf, sizeof buf)) return -1;
    int n = 0;
    for (char *tok = strtok(buf, ","); tok && n < max; tok = strtok(NULL, ",")) v[n++] = strtoull(tok, NULL, 10);
    return n;
}

static inline unsigned long long summary_u64(const char *sum, const char *key) {
    char v[256];
    assert_non_null(kv_get(sum, key, v, sizeof v));
    return strtoull(v, NULL, 10);
}

static inline double summary_f64(const char *sum, const char *key) {
    char v[256];
    assert_non_null(kv_get(sum, key, v, sizeof v));
    return atof(v);
}

/* Every pid of the summary's pids= line is gone, and there are at least `at_least`. */
static inline void assert_children_gone(const char *summary, int at_least) {
    char pids[4096];
    assert_non_null(kv_get(summary, "pids", pids, sizeof pids));
    int count = 0;
    for (char *tok = strtok(pids, ","); tok; tok = strtok(NULL, ",")) {
        pid_t pid = (pid_t)atoi(tok);
        assert_true(pid > 0);
        errno = 0;
        assert_int_equal(kill(pid, 0), -1);
        assert_int_equal(errno, ESRCH);
        count++;
    }
    assert_true(count >= at_least);
}

/* No role logged an error (log lines look like "12:00:00.000 E [role i] ..."). */
static inline void assert_no_error_lines(const char *log) {
    const char *hit = strstr(log, " E [");
    if (hit) {
        const char *eol = strchr(hit, '\n');
        fail_msg("an error was logged: %.*s", eol ? (int)(eol - hit) : 200, hit);
    }
}

/* Waits up to timeout_s for path to exist; 1 when it does. */
static inline int wait_file(const char *path, double timeout_s) {
    for (int i = 0; i < (int)(timeout_s * 20); i++) {
        if (access(path, F_OK) == 0) return 1;
        usleep(50000);
    }
    return access(path, F_OK) == 0;
}

/* Waits up to timeout_s for the CSV file at path to hold `want` rows besides its header;
 * returns the rows it holds then. */
static inline int wait_csv_rows(const char *path, int want, double timeout_s) {
    int rows = 0;
    for (int i = 0; i <= (int)(timeout_s * 10); i++) {
        char *t = read_file(path);
        rows = -1;
        for (const char *c = t; c && *c; c++) rows += *c == '\n';
        free(t);
        if (rows >= want) break;
        usleep(100000);
    }
    return rows < 0 ? 0 : rows;
}

/* Finds mpirun on PATH (out gets its path); 0 when fleet was built without MPI or there
 * is none. */
static inline int find_mpirun(char *out, size_t len) {
#ifndef FLEET_HAVE_MPI
    (void)out;
    (void)len;
    return 0;
#else
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", path ? path : "/usr/bin:/bin");
    for (char *d = strtok(dirs, ":"); d; d = strtok(NULL, ":")) {
        snprintf(out, len, "%s/mpirun", d);
        if (access(out, X_OK) == 0) return 1;
    }
    out[0] = '\0';
    return 0;
#endif
}

/* Under AddressSanitizer: Open MPI leaks ~120 KB per rank (allocations of its dlopened
 * components, never freed), which LeakSanitizer would turn into a failed exit of every
 * rank. Leak checks stay off for the processes mpirun starts (call this first in main:
 * the test's own sanitizer has read its options already); the same role code is
 * leak-checked without MPI by the other integration tests. */
static inline void no_leak_checks_under_mpirun(void) {
    const char *asan = getenv("ASAN_OPTIONS");
    char opts[512];
    snprintf(opts, sizeof opts, "%s%sdetect_leaks=0", asan ? asan : "", asan && asan[0] ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
}

#endif
