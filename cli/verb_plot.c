/* `fleet plot RUN_DIR`: draws RUN_DIR/curve.png now, the learning curve that `fleet run`
 * keeps up to date while it runs (launcher/curve.h: the evaluations' mean and min..max band and
 * one line per actor's training returns, against env steps), and writes RUN_DIR/curve.gp,
 * the gnuplot script that drew it. Prints the picture's path.
 *
 * Exit codes: 0 the picture was written; 1 no gnuplot on PATH, RUN_DIR is not a run folder
 * (neither evals.csv nor returns.csv), nothing to plot yet, or gnuplot failed or took
 * longer than PLOT_TIMEOUT_S (its messages are in RUN_DIR/logs/curve.log when that folder
 * exists); 2 usage. One thread; owns its fl_curve_t. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "launcher/curve.h"
#include "launcher/launch.h"
#include "cli/verbs.h"
#include "common/log.h"

#define PLOT_TIMEOUT_S 60.0

/* 1 when the file exists, *rows set to 1 when it has a line after its header. */
static int csv_state(const char *dir, const char *name, int *rows) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int line = 0, ch, any = 0;
    while ((ch = fgetc(f)) != EOF) {
        if (ch == '\n') {
            if (line > 0 && any) break;
            line++;
            any = 0;
        } else if (line > 0 && ch != ' ' && ch != '\r') {
            any = 1;
        }
    }
    if (line > 0 && any) *rows = 1;
    fclose(f);
    return 1;
}

int fl_verb_plot(int argc, char **argv) {
    const char *arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "fleet plot: unknown option '%s'\n", argv[i]);
            return 2;
        }
        if (arg) {
            fprintf(stderr, "fleet plot: one run folder expected, got '%s' and '%s'\n", arg, argv[i]);
            return 2;
        }
        arg = argv[i];
    }
    if (!arg) {
        fprintf(stderr, "fleet plot: missing RUN_DIR (usage: fleet plot RUN_DIR, e.g. fleet plot runs/cartpole)\n");
        return 2;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", arg);
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--) dir[n - 1] = '\0';
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "fleet plot: %s: no such folder\n", dir);
        return 1;
    }
    int rows = 0;
    int has_evals = csv_state(dir, "evals.csv", &rows), has_returns = csv_state(dir, "returns.csv", &rows);
    char curves[4200], runs[256];
    snprintf(curves, sizeof curves, "%s/curves.png", dir);
    if (!has_evals && !has_returns && fl_launch_suite_runs(dir, runs, sizeof runs) > 0) {
        fprintf(stderr,
                "fleet plot: %s is a suite folder (`fleet suite`): its picture of every seed is %s (drawn when the "
                "suite ended; `gnuplot curves.gp` in the folder redraws it); one seed's curve is `fleet plot "
                "%s/seed-S`\n",
                dir, curves, dir);
        return 1;
    }
    if (!has_evals && !has_returns) {
        fprintf(stderr,
                "fleet plot: %s has neither evals.csv nor returns.csv: not the folder of a `fleet run` "
                "(runs/NAME)\n",
                dir);
        return 1;
    }
    fl_log_set_level(FL_LOG_WARN); /* the module's notes; its warnings stay */
    fl_curve_t *c = fl_curve_create(dir);
    if (!c) {
        fprintf(stderr, "fleet plot: out of memory\n");
        return 1;
    }
    int rc = 1;
    if (!fl_curve_available(c)) {
        fprintf(stderr,
                "fleet plot: gnuplot is not installed (not on PATH): install gnuplot-nox (Debian, "
                "`apt-get install gnuplot-nox`; scripts/setup.sh does) or your system's gnuplot\n");
    } else if (!rows) {
        fprintf(stderr, "fleet plot: nothing to plot yet: %s/evals.csv and returns.csv have no rows\n", dir);
    } else if (fl_curve_finish(c, PLOT_TIMEOUT_S) != 0) {
        fprintf(stderr, "fleet plot: gnuplot could not draw %s/curve.png (`cd %s && gnuplot curve.gp` shows why)\n",
                dir, dir);
    } else {
        printf("%s/curve.png\n", dir);
        rc = 0;
    }
    fl_curve_destroy(c);
    return rc;
}
