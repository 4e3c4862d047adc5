/* `fleet suite`: one experiment over several seeds, and the table a paper cites.
 *
 * It claims a suite folder, out_dir/<run.name>-suite (or -suite-2, -suite-3, ... when that
 * exists: a suite never writes into another's folder), writes the effective configuration
 * there (config.ini, --set included) and runs `fleet run SUITE/config.ini --set
 * run.out_dir=SUITE --set run.name=seed-S --set run.seed=S` once per seed, one after
 * another or --parallel N at a time, each run's terminal output into SUITE/seed-S.log.
 * When they have ended it reads each run's summary.txt and evals.csv and writes:
 *   results.csv  one row per seed (FIELDS below);
 *   summary.md   that table, then over the seeds the final evaluation return's mean, std
 *                and 95% confidence interval (Student's t), the best return's mean, and
 *                how many seeds reached run.target_return with the median and mean time
 *                and env steps to it;
 *   curves.png   titled with the experiment's name (run.name): every seed's greedy
 *                evaluation return against env steps, their mean and its 95% confidence
 *                band (Student's t, as in summary.md; the band's figures in curves.csv),
 *                drawn by gnuplot from curves.gp (`gnuplot curves.gp` in SUITE redraws it;
 *                launcher/curve.h: fl_curve_suite);
 * and prints the table. Ctrl-C (or SIGTERM) starts no further seed and stops the runs under
 * way (SIGTERM, on which `fleet run` stops its fleet in order); the table covers the seeds
 * that ran.
 *
 * Exit codes: 0 every run ended normally (exit 0), 1 one did not or nothing could be
 * written, 2 usage, 130 interrupted. One thread; children are reaped by pid. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/verbs.h"
#include "common/clock.h"
#include "common/stats.h"
#include "common/stop.h"
#include "envs/registry.h"
#include "launcher/curve.h"
#include "launcher/launch.h"
#include "launcher/proc.h"

#define MAX_SEEDS 1000
#define PLOT_TIMEOUT_S 60.0

typedef struct seed_run {
    long seed;
    pid_t pid;
    int started, done, status; /* status: waitpid's */
    double t_start, wall_s;
    /* from summary.txt (has_summary) and evals.csv */
    int has_summary, exit_code, solved;
    char reason[256];
    double elapsed_s, env_steps, learner_steps, final_return, best_return;
    int evaluations;
    double to_target_s, to_target_steps; /* NAN unless solved */
} seed_run_t;

/* ---- seeds ------------------------------------------------------------------------ */

/* "1,2,5-8": numbers and inclusive ranges, each seed in 0..2^31-1, at most MAX_SEEDS,
 * no repeats. 0, or -1 after printing why. */
static int parse_seeds(const char *spec, long *out, int *n) {
    *n = 0;
    const char *p = spec;
    while (*p) {
        char *end;
        errno = 0;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || errno) goto bad;
        if (*end == '-') {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q || errno) goto bad;
        }
        if (a < 0 || b < a || b > 2147483647L) goto bad;
        for (long s = a; s <= b; s++) {
            if (*n >= MAX_SEEDS) {
                fprintf(stderr, "fleet suite: --seeds %s: more than %d seeds\n", spec, MAX_SEEDS);
                return -1;
            }
            for (int i = 0; i < *n; i++)
                if (out[i] == s) {
                    fprintf(stderr, "fleet suite: --seeds %s: seed %ld twice\n", spec, s);
                    return -1;
                }
            out[(*n)++] = s;
        }
        if (*end == ',')
            end++;
        else if (*end)
            goto bad;
        p = end;
    }
    if (*n > 0) return 0;
bad:
    fprintf(stderr,
            "fleet suite: --seeds '%s': expected seeds and ranges separated by commas, e.g. 1,2,3 or 1-5 "
            "(each 0..2147483647)\n",
            spec);
    return -1;
}

/* ---- the folder --------------------------------------------------------------------- */

static int claim_dir(const fl_config_t *c, char *dir, size_t len) {
    if (fl_proc_mkdir_p(c->run_out_dir) != 0) {
        fprintf(stderr, "fleet suite: cannot create the output folder '%s' (run.out_dir): %s\n", c->run_out_dir,
                strerror(errno));
        return -1;
    }
    for (int k = 1; k <= 9999; k++) {
        int w = k == 1 ? snprintf(dir, len, "%s/%s-suite", c->run_out_dir, c->run_name)
                       : snprintf(dir, len, "%s/%s-suite-%d", c->run_out_dir, c->run_name, k);
        if (w < 0 || (size_t)w >= len) break;
        if (mkdir(dir, 0777) == 0) return 0;
        if (errno != EEXIST) {
            fprintf(stderr, "fleet suite: cannot create the suite folder '%s': %s\n", dir, strerror(errno));
            return -1;
        }
    }
    fprintf(stderr, "fleet suite: no free suite folder for '%s/%s-suite'; choose another run.name\n", c->run_out_dir,
            c->run_name);
    return -1;
}

/* ---- running ------------------------------------------------------------------------ */

static int start_seed(seed_run_t *r, const char *dir) {
    char config[PATH_MAX + 16], out_dir[PATH_MAX + 32], name[64], seed[64], log[PATH_MAX + 32];
    snprintf(config, sizeof config, "%s/config.ini", dir);
    snprintf(out_dir, sizeof out_dir, "run.out_dir=%s", dir);
    snprintf(name, sizeof name, "run.name=seed-%ld", r->seed);
    snprintf(seed, sizeof seed, "run.seed=%ld", r->seed);
    snprintf(log, sizeof log, "%s/seed-%ld.log", dir, r->seed);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "fleet suite: cannot start seed %ld: %s\n", r->seed, strerror(errno));
        return -1;
    }
    if (pid == 0) {
        FILE *o = freopen(log, "w", stdout);
        if (o) dup2(fileno(stdout), STDERR_FILENO);
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) _exit(127);
        self[n] = '\0';
        char *argv[] = {self, "run", config, "--set", out_dir, "--set", name, "--set", seed, NULL};
        execv(self, argv);
        _exit(127);
    }
    r->pid = pid;
    r->started = 1;
    r->t_start = fl_clock_sec();
    printf("fleet suite: seed %ld started (%s)\n", r->seed, log);
    fflush(stdout);
    return 0;
}

/* ---- reading a run ------------------------------------------------------------------ */

static void read_summary(seed_run_t *r, const char *dir) {
    char path[PATH_MAX + 64], line[1024];
    snprintf(path, sizeof path, "%s/seed-%ld/summary.txt", dir, r->seed);
    FILE *f = fopen(path, "r");
    if (!f) return;
    r->has_summary = 1;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = '\0';
        const char *k = line, *v = eq + 1;
        if (strcmp(k, "reason") == 0)
            snprintf(r->reason, sizeof r->reason, "%s", v);
        else if (strcmp(k, "exit_code") == 0)
            r->exit_code = atoi(v);
        else if (strcmp(k, "elapsed_s") == 0)
            r->elapsed_s = atof(v);
        else if (strcmp(k, "env_steps") == 0)
            r->env_steps = atof(v);
        else if (strcmp(k, "learner_steps") == 0)
            r->learner_steps = atof(v);
        else if (strcmp(k, "evaluations") == 0)
            r->evaluations = atoi(v);
        else if (strcmp(k, "eval_return_mean") == 0)
            r->final_return = atof(v);
        else if (strcmp(k, "best_eval_return") == 0)
            r->best_return = atof(v);
    }
    fclose(f);
    r->solved = strncmp(r->reason, "target reached", 14) == 0;
}

/* The column of name in a CSV header line, or -1. */
static int column_of(const char *header, const char *name) {
    int col = 0;
    size_t len = strlen(name);
    for (const char *p = header;; col++) {
        const char *end = p + strcspn(p, ",\n\r");
        if ((size_t)(end - p) == len && strncmp(p, name, len) == 0) return col;
        if (*end != ',') return -1;
        p = end + 1;
    }
}

static double field_of(const char *line, int col) {
    const char *p = line;
    for (int i = 0; i < col && p; i++) {
        p = strchr(p, ',');
        if (p) p++;
    }
    return p ? atof(p) : NAN;
}

/* Time and env steps of the first evaluation at or above target (evals.csv). */
static void read_target(seed_run_t *r, const char *dir, double target) {
    r->to_target_s = r->to_target_steps = NAN;
    if (!r->solved) return;
    char path[PATH_MAX + 64], line[4096];
    snprintf(path, sizeof path, "%s/seed-%ld/evals.csv", dir, r->seed);
    FILE *f = fopen(path, "r");
    int ct = -1, cs = -1, cr = -1;
    if (f && fgets(line, sizeof line, f)) {
        ct = column_of(line, "time_s");
        cs = column_of(line, "env_steps");
        cr = column_of(line, "return_mean");
    }
    while (f && ct >= 0 && cs >= 0 && cr >= 0 && fgets(line, sizeof line, f)) {
        if (field_of(line, cr) >= target) {
            r->to_target_s = field_of(line, ct);
            r->to_target_steps = field_of(line, cs);
            break;
        }
    }
    if (f) fclose(f);
    if (isnan(r->to_target_s)) { /* the target was the training return's (run.target_on = train) */
        r->to_target_s = r->elapsed_s;
        r->to_target_steps = r->env_steps;
    }
}

/* ---- statistics --------------------------------------------------------------------- */

typedef struct stats {
    int n;
    double mean, std, ci95, median;
} stats_t;

/* common/stats.h's figures of v[0..n) (which it sorts), and the median; the interval is
 * NAN with fewer than two values (summary.md shows "-"). */
static stats_t stats_of(double *v, int n) {
    fl_stats_t f = fl_stats_of(v, n);
    stats_t s = {.n = n, .mean = f.mean, .std = f.std, .ci95 = n > 1 ? f.ci95 : NAN, .median = fl_stats_median(v, n)};
    return s;
}

/* ---- output ------------------------------------------------------------------------- */

static const char *outcome(const seed_run_t *r) {
    if (!r->started) return "not run";
    if (r->solved) return "target";
    if (!r->has_summary) return "failed";
    /* exit status 3: it ended at its budget, but a role crashed on the way */
    return r->exit_code == 0 ? "budget" : r->exit_code == FL_LAUNCH_EXIT_CRASHED ? "crashed" : "failed";
}

static int write_results(const char *dir, const seed_run_t *runs, int n) {
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/results.csv", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "seed,outcome,exit_code,wall_s,elapsed_s,env_steps,learner_steps,evaluations,final_return,"
            "best_return,to_target_s,to_target_env_steps,reason\n");
    for (int i = 0; i < n; i++) {
        const seed_run_t *r = &runs[i];
        int code = !r->started ? -1 : WIFEXITED(r->status) ? WEXITSTATUS(r->status) : 128 + WTERMSIG(r->status);
        fprintf(f, "%ld,%s,%d,%.3f,%.3f,%.0f,%.0f,%d,%.4f,%.4f,%.3f,%.0f,\"", r->seed, outcome(r), code, r->wall_s,
                r->elapsed_s, r->env_steps, r->learner_steps, r->evaluations, r->final_return, r->best_return,
                r->to_target_s, r->to_target_steps);
        for (const char *p = r->reason; *p; p++) fputs(*p == '"' ? "\"\"" : (char[2]){*p, 0}, f);
        fprintf(f, "\"\n");
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* "12.3" or "-" for NAN */
static const char *num(char *buf, size_t len, const char *fmt, double v) {
    if (isnan(v))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, fmt, v);
    return buf;
}

static int write_summary(const char *dir, const char *config_name, const fl_config_t *c, const seed_run_t *runs, int n,
                         int print) {
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/summary.md", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    double fin[MAX_SEEDS], best[MAX_SEEDS], tt[MAX_SEEDS], ts[MAX_SEEDS];
    int nf = 0, ns = 0;
    char a[32], b[32], d[32], e[32];
    for (int pass = 0; pass < 1 + print; pass++) {
        FILE *o = pass == 0 ? f : stdout;
        fprintf(o, "# %s over %d seeds\n\n", config_name, n);
        fprintf(o,
                "Each seed: `fleet run %s/config.ini --set run.seed=S` (folder `seed-S/`). Final return: the last "
                "greedy evaluation's mean return; target: run.target_return = %g.\n\n",
                dir, c->run_target_return);
        fprintf(o,
                "| seed | outcome | seconds | env steps | final return | best return | to target: s | env steps |\n");
        fprintf(o, "|---|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < n; i++) {
            const seed_run_t *r = &runs[i];
            fprintf(o, "| %ld | %s | %.1f | %.0f | %s | %s | %s | %s |\n", r->seed, outcome(r), r->elapsed_s,
                    r->env_steps, num(a, sizeof a, "%.2f", r->has_summary ? r->final_return : NAN),
                    num(b, sizeof b, "%.2f", r->has_summary ? r->best_return : NAN),
                    num(d, sizeof d, "%.1f", r->to_target_s), num(e, sizeof e, "%.0f", r->to_target_steps));
        }
        nf = ns = 0;
        for (int i = 0; i < n; i++) {
            const seed_run_t *r = &runs[i];
            if (r->has_summary && r->evaluations > 0) {
                fin[nf] = r->final_return;
                best[nf++] = r->best_return;
            }
            if (r->solved) {
                tt[ns] = r->to_target_s;
                ts[ns++] = r->to_target_steps;
            }
        }
        stats_t sf = stats_of(fin, nf), sb = stats_of(best, nf), st = stats_of(tt, ns), ss = stats_of(ts, ns);
        fprintf(o, "\nOver the %d seeds with an evaluation: final return **%s** +- %s (mean +- 95%% CI), std %s; ", nf,
                num(a, sizeof a, "%.2f", sf.mean), num(b, sizeof b, "%.2f", sf.ci95), num(d, sizeof d, "%.2f", sf.std));
        fprintf(o, "best return %s (mean).\n", num(a, sizeof a, "%.2f", sb.mean));
        fprintf(o,
                "Reached the target: %d of %d seeds; time to it median **%s s** (mean %s), env steps median %s "
                "(mean %s).\n",
                ns, n, num(a, sizeof a, "%.1f", st.median), num(b, sizeof b, "%.1f", st.mean),
                num(d, sizeof d, "%.0f", ss.median), num(e, sizeof e, "%.0f", ss.mean));
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* curves.png (launcher/curve.h: fl_curve_suite): each seed's evaluation return, their
 * mean and its 95% band, titled with the experiment's name (run.name). 0 or -1 (said). */
static int plot(const char *dir, const fl_config_t *c, const seed_run_t *runs, int n) {
    const char **names = calloc((size_t)n, sizeof *names), **labels = calloc((size_t)n, sizeof *labels);
    char(*text)[2][32] = calloc((size_t)n, sizeof *text);
    int k = 0, rc = -1;
    char why[512] = "out of memory";
    if (names && labels && text) {
        for (int i = 0; i < n; i++) {
            if (!runs[i].started) continue;
            snprintf(text[k][0], sizeof text[k][0], "seed-%ld", runs[i].seed);
            snprintf(text[k][1], sizeof text[k][1], "seed %ld", runs[i].seed);
            names[k] = text[k][0];
            labels[k] = text[k][1];
            k++;
        }
        /* the target line where the runs stop at it (else it would only squash the curves) */
        double most = NAN; /* where the game caps a return, the band stops there */
        if (!c->env_plugin[0] && fl_env_return_max(c->env_name, &most) != 0) most = NAN;
        rc = fl_curve_suite(dir, c->run_name, names, labels, k, c->run_stop_at_target ? c->run_target_return : NAN,
                            most, PLOT_TIMEOUT_S, why, sizeof why);
    }
    if (rc != 0) fprintf(stderr, "fleet suite: no curves.png: %s\n", why);
    free(names);
    free(labels);
    free(text);
    return rc;
}

/* ---- the verb ----------------------------------------------------------------------- */

int fl_verb_suite(int argc, char **argv) {
    fl_config_t cfg;
    fl_config_defaults(&cfg);
    char seeds_s[256] = "1,2,3", config[PATH_MAX] = "";
    int64_t parallel = 1;
    const fl_opt_t opts[] = {{"--seeds", FL_OPT_STRING, seeds_s}, {"--parallel", FL_OPT_INT, &parallel}};
    int rc = fl_cli_parse("suite", argc, argv, &cfg, opts, 2, config, sizeof config);
    if (rc) return rc;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_config_validate(&cfg, &err) != FL_OK) {
        fprintf(stderr, "fleet suite: %s\n", err.msg);
        return 2;
    }
    static long seeds[MAX_SEEDS];
    int n = 0;
    if (parse_seeds(seeds_s, seeds, &n) != 0) return 2;
    if (parallel < 1 || parallel > 64) {
        fprintf(stderr, "fleet suite: --parallel %lld: expected 1..64 runs at a time\n", (long long)parallel);
        return 2;
    }
    char dir[PATH_MAX];
    if (claim_dir(&cfg, dir, sizeof dir) != 0) return 1;
    char cfg_path[PATH_MAX + 16];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.ini", dir);
    if (fl_config_write_file(&cfg, cfg_path, &err) != FL_OK) {
        fprintf(stderr, "fleet suite: %s\n", err.msg);
        return 1;
    }
    const char *config_name = config[0] ? config : "the default experiment";
    printf("fleet suite: %s, seeds %s (%d runs, %lld at a time), output %s/\n", config_name, seeds_s, n,
           (long long)parallel, dir);
    fflush(stdout);

    seed_run_t *runs = calloc((size_t)n, sizeof *runs);
    if (!runs) return 1;
    for (int i = 0; i < n; i++) runs[i].seed = seeds[i];
    fl_stop_install();
    int next = 0, running = 0, failed = 0, stopping = 0;
    while (next < n || running > 0) {
        if (fl_stop_requested() && !stopping) { /* no further seed; the runs under way stop */
            stopping = 1;
            next = n;
            for (int i = 0; i < n; i++)
                if (runs[i].started && !runs[i].done) kill(runs[i].pid, SIGTERM);
        }
        while (running < parallel && next < n && !fl_stop_requested()) {
            if (start_seed(&runs[next], dir) != 0) {
                failed = 1;
                runs[next].done = 1;
            } else {
                running++;
            }
            next++;
        }
        for (int i = 0; i < n; i++) {
            seed_run_t *r = &runs[i];
            if (!r->started || r->done) continue;
            pid_t w = waitpid(r->pid, &r->status, WNOHANG);
            if (w == 0 || (w < 0 && errno == EINTR)) continue;
            r->done = 1;
            running--;
            r->wall_s = fl_clock_sec() - r->t_start;
            read_summary(r, dir);
            read_target(r, dir, cfg.run_target_return);
            char how[128];
            fl_proc_describe_status(r->status, how, sizeof how);
            printf("fleet suite: seed %ld %s after %.1f s: %s\n", r->seed, how, r->wall_s,
                   r->has_summary ? r->reason : "no summary.txt (see its log)");
            fflush(stdout);
            if (!(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0)) failed = 1;
        }
        if (running > 0) fl_sleep_sec(0.1);
    }
    int ran = 0;
    for (int i = 0; i < n; i++) ran += runs[i].started;
    int out = 0;
    if (write_results(dir, runs, n) != 0 || write_summary(dir, config_name, &cfg, runs, n, 1) != 0) {
        fprintf(stderr, "fleet suite: cannot write results.csv or summary.md in %s: %s\n", dir, strerror(errno));
        out = 1;
    }
    if (ran > 0 && plot(dir, &cfg, runs, n) == 0) printf("fleet suite: curves: %s/curves.png\n", dir);
    printf("fleet suite: table: %s/summary.md, %s/results.csv\n", dir, dir);
    free(runs);
    if (fl_stop_requested()) return 130;
    return out || failed ? 1 : 0;
}
