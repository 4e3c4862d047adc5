/* Tests of launcher/curve: the learning-curve picture of a run folder drawn by gnuplot.
 *
 * With the real gnuplot (the cases skip when it is not installed): synthetic evals.csv and
 * returns.csv (3 actors, 20 rows) and a folder with training returns only give a
 * curve.png that is a PNG of a plausible size, and a background refresh alone replaces it.
 * With a stand-in "gnuplot" (a shell script put first on PATH) that records each start:
 * two quick refreshes start one drawing and do not wait for it; the drawing runs in its own
 * process group in the run folder with its output in logs/curve.log; a failing or hanging
 * gnuplot leaves curve.png alone and finish returns -1 (in time); many actors show 8, the
 * first and the last among them; rows added later are drawn. Folders with headers only
 * draw nothing, and without gnuplot on PATH the module is inert. A suite's band over seeds
 * (fl_curve_band) interpolates, holds and counts as documented, and its curves.png
 * (fl_curve_suite) has the experiment's name as title, the seeds, their mean and band. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <math.h>

#include "launcher/curve.h"
#include "common/clock.h"
#include "tests/proc_util.h"

#define EVALS_HEADER                                                                                              \
    "time_s,env_steps,learner_steps,param_version,episodes,epsilon,return_mean,return_std,return_min,return_max," \
    "return_ci95,length_mean,length_min,length_max,evaluator,seconds,truncated,frames\n"
#define RETURNS_HEADER "time_s,env_steps,actor,epsilon,episodes,return_mean\n"

/* The stand-in gnuplot: records its start (and its process group and folder), says
 * something on stdout and stderr, then per $FAKE_GNUPLOT: "fail" exits 1, "hang" sleeps,
 * otherwise sleeps a second and writes a file starting with the PNG signature to the
 * output that `-e out='...'` names. */
static const char fake_gnuplot[] =
    "#!/bin/sh\n"
    "PATH=/usr/bin:/bin\n"
    "echo \"start $(cut -d' ' -f5 /proc/$$/stat) $(pwd)\" >> starts.log\n"
    "echo 'fake gnuplot stdout'\n"
    "echo 'fake gnuplot stderr' >&2\n"
    "eval \"$2\"\n"
    "case \"$FAKE_GNUPLOT\" in\n"
    "  fail) exit 1 ;;\n"
    "  hang) exec sleep 60 ;;\n"
    "esac\n"
    "sleep 1\n"
    "printf '\\211PNG\\r\\n\\032\\nfake' > \"$out\"\n";

static void write_text(const char *dir, const char *name, const char *text, const char *mode) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, mode);
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *make_dir(void) {
    char tmpl[] = "/tmp/fleet-curve-XXXXXX";
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

static int g_frame_skip = 1; /* frames per env step in the evals.csv that write_run writes */

/* evals.csv with n_evals rows (0: header only) and returns.csv with n_periods rows for
 * each of n_actors actors. */
static void write_run(const char *dir, int n_evals, int n_actors, int n_periods) {
    char path[512];
    snprintf(path, sizeof path, "%s/evals.csv", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(EVALS_HEADER, f);
    for (int i = 0; i < n_evals; i++) {
        double m = 10.0 * (1.0 - 1.0 / (1.0 + i));
        fprintf(f, "%d.0,%d,%d,%d,10,0,%.3f,1.2,%.3f,%.3f,0.7,120,80,200,0,1.5,0,%d\n", 10 * i, 40000 * i, 500 * i,
                5 * i, m, m - 2.0, m + 1.5, 40000 * i * g_frame_skip);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/returns.csv", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(RETURNS_HEADER, f);
    for (int t = 0; t < n_periods; t++)
        for (int a = 0; a < n_actors; a++) {
            double eps = 0.4 / (1.0 + 7.0 * a);
            fprintf(f, "%d.5,%d,%d,%.6g,%d,%.4f\n", 5 * t, 20000 * t, a, eps, 3 * t + a,
                    (1.0 - eps) * 9.0 * (1.0 - 1.0 / (1.0 + 0.3 * t)) + 0.1 * a);
        }
    fclose(f);
}

static int exists(const char *dir, const char *name) {
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* 1 when dir holds a temporary file of a drawing (.curve-*). */
static int has_temporary(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, ".curve", 6) == 0) found = 1;
    closedir(d);
    return found;
}

static char *slurp(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return read_file(path);
}

/* Lines of dir/starts.log: the stand-in's starts. */
static int starts(const char *dir) {
    char *t = slurp(dir, "starts.log");
    if (!t) return 0;
    int n = 0;
    for (char *p = t; (p = strstr(p, "start ")); p++) n++;
    free(t);
    return n;
}

/* Checks that dir/curve.png is a PNG of at least min_size bytes. */
static void assert_png(const char *dir, long min_size) {
    char path[512];
    snprintf(path, sizeof path, "%s/curve.png", dir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char sig[8] = {0};
    assert_int_equal(fread(sig, 1, 8, f), 8);
    assert_memory_equal(sig, "\x89PNG\r\n\x1a\n", 8);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    assert_true(size >= min_size);
    assert_true(size < 8L * 1024 * 1024);
}

/* ---- with the real gnuplot -------------------------------------------------------- */

static int have_gnuplot(void) {
    fl_curve_t *c = fl_curve_create("/tmp");
    assert_non_null(c);
    int ok = fl_curve_available(c);
    fl_curve_destroy(c);
    return ok;
}

/* Draws dir's curve once (a fresh fl_curve_t, refreshed and finished): checks curve.png
 * and returns curve.gp's text. */
static char *draw_once(const char *dir) {
    fl_curve_t *c = fl_curve_create(dir);
    assert_non_null(c);
    fl_curve_refresh(c);
    assert_int_equal(fl_curve_finish(c, 60), 0);
    assert_png(dir, 10000);
    fl_curve_destroy(c);
    char *gp = slurp(dir, "curve.gp");
    assert_non_null(gp);
    return gp;
}

static void test_draws_evals_and_returns(void **unused) {
    (void)unused;
    if (!have_gnuplot()) {
        print_message("gnuplot is not installed (Debian: gnuplot-nox): skipping the drawing\n");
        skip();
    }
    char *dir = make_dir();
    write_run(dir, 20, 3, 20);
    fl_curve_t *c = fl_curve_create(dir);
    assert_non_null(c);
    assert_int_equal(fl_curve_available(c), 1);
    /* the background drawing alone replaces curve.png */
    fl_curve_refresh(c);
    double until = fl_clock_sec() + 60;
    while (!exists(dir, "curve.png") && fl_clock_sec() < until) fl_sleep_sec(0.02);
    assert_png(dir, 10000);
    assert_int_equal(fl_curve_finish(c, 60), 0);
    assert_png(dir, 10000);
    assert_false(has_temporary(dir));
    char *gp = slurp(dir, "curve.gp");
    assert_non_null(gp);
    assert_non_null(strstr(gp, "'evals.csv'"));
    assert_non_null(strstr(gp, "title 'actor 0 (eps 0.4)'"));
    assert_non_null(strstr(gp, "title 'actor 2 (eps 0.0267)'"));
    assert_null(strstr(gp, "actor 3"));
    assert_null(strstr(gp, "actors shown"));
    assert_non_null(strstr(gp, "min..max"));
    assert_non_null(strstr(gp, "set xlabel 'env steps (whole fleet)'"));
    assert_null(strstr(gp, "column('env_steps')*"));
    free(gp);
    fl_curve_destroy(c);
    rm_rf(dir);
    free(dir);
}

/* An Atari run (evals.csv's frames 4 x its env steps): x is the emulator frames, for the
 * evaluations and the actors' lines alike. */
static void test_frames_axis(void **unused) {
    (void)unused;
    if (!have_gnuplot()) {
        print_message("gnuplot is not installed (Debian: gnuplot-nox): skipping the drawing\n");
        skip();
    }
    char *dir = make_dir();
    g_frame_skip = 4;
    write_run(dir, 5, 2, 10);
    g_frame_skip = 1;
    char *gp = draw_once(dir);
    assert_non_null(strstr(gp, "set xlabel 'frames (env steps x 4, whole fleet)'"));
    assert_non_null(strstr(gp, "'returns.csv' using (column('env_steps')*4):'return_mean'"));
    assert_non_null(strstr(gp, "'evals.csv' using (column('env_steps')*4):'return_mean' with linespoints"));
    assert_null(strstr(gp, "using 'env_steps'"));
    free(gp);
    rm_rf(dir);
    free(dir);
}

/* evals.csv with its header only (no evaluation yet): the actors' lines alone. */
static void test_draws_returns_only(void **unused) {
    (void)unused;
    if (!have_gnuplot()) {
        print_message("gnuplot is not installed (Debian: gnuplot-nox): skipping the drawing\n");
        skip();
    }
    char *dir = make_dir();
    write_run(dir, 0, 3, 20);
    char *gp = draw_once(dir);
    assert_null(strstr(gp, "'evals.csv'"));
    assert_non_null(strstr(gp, "title 'actor 1 (eps 0.05)'"));
    free(gp);
    /* and a single evaluation (no band yet) draws too */
    write_run(dir, 1, 2, 5);
    fl_curve_t *c = fl_curve_create(dir);
    assert_int_equal(fl_curve_finish(c, 60), 0);
    assert_png(dir, 5000);
    fl_curve_destroy(c);
    rm_rf(dir);
    free(dir);
}

/* ---- with a stand-in gnuplot -------------------------------------------------------- */

typedef struct fake {
    char *bin;  /* the folder put on PATH */
    char *path; /* the PATH to restore */
} fake_t;

static void fake_install(fake_t *f, const char *mode) {
    f->bin = make_dir();
    write_text(f->bin, "gnuplot", fake_gnuplot, "w");
    char exe[512];
    snprintf(exe, sizeof exe, "%s/gnuplot", f->bin);
    assert_int_equal(chmod(exe, 0755), 0);
    const char *p = getenv("PATH");
    f->path = strdup(p ? p : "/usr/bin:/bin");
    setenv("PATH", f->bin, 1);
    if (mode)
        setenv("FAKE_GNUPLOT", mode, 1);
    else
        unsetenv("FAKE_GNUPLOT");
}

/* Restores PATH once the curves are created (the module looks gnuplot up once). */
static void fake_restore_path(fake_t *f) {
    setenv("PATH", f->path, 1);
}

static void fake_remove(fake_t *f) {
    setenv("PATH", f->path, 1);
    unsetenv("FAKE_GNUPLOT");
    rm_rf(f->bin);
    free(f->bin);
    free(f->path);
}

static void test_refresh_starts_one_drawing(void **unused) {
    (void)unused;
    fake_t fk;
    fake_install(&fk, NULL);
    char *dir = make_dir();
    char logs[512];
    snprintf(logs, sizeof logs, "%s/logs", dir);
    assert_int_equal(mkdir(logs, 0755), 0);
    write_run(dir, 4, 3, 5);
    fl_curve_t *c = fl_curve_create(dir);
    fake_restore_path(&fk);
    assert_non_null(c);
    assert_int_equal(fl_curve_available(c), 1);
    /* the stand-in takes a second: neither refresh waits for it, the second does nothing */
    double t0 = fl_clock_sec();
    fl_curve_refresh(c);
    fl_curve_refresh(c);
    assert_true(fl_clock_sec() - t0 < 0.5);
    double until = fl_clock_sec() + 10;
    while (starts(dir) < 1 && fl_clock_sec() < until) fl_sleep_sec(0.01);
    fl_sleep_sec(0.2);
    fl_curve_refresh(c);
    assert_int_equal(starts(dir), 1);
    assert_false(exists(dir, "curve.png"));
    /* finish waits for that drawing, then draws once more */
    assert_int_equal(fl_curve_finish(c, 30), 0);
    assert_int_equal(starts(dir), 2);
    assert_png(dir, 8);
    assert_false(has_temporary(dir));
    /* in the run folder, in a process group of its own, its output in logs/curve.log */
    char *log = slurp(dir, "starts.log");
    assert_non_null(log);
    char where[600];
    snprintf(where, sizeof where, " %s\n", dir);
    assert_non_null(strstr(log, where));
    long pgid = strtol(log + strlen("start "), NULL, 10);
    assert_true(pgid > 0);
    assert_true(pgid != (long)getpgrp());
    free(log);
    char *out = slurp(dir, "logs/curve.log");
    assert_non_null(out);
    assert_non_null(strstr(out, "fake gnuplot stdout"));
    assert_non_null(strstr(out, "fake gnuplot stderr"));
    free(out);
    fl_curve_destroy(c);
    fake_remove(&fk);
    rm_rf(dir);
    free(dir);
}

/* A gnuplot that fails keeps the previous picture; one that hangs is killed at the
 * deadline. Without logs/ the output goes nowhere (and no logs/ appears). */
static void test_failure_and_timeout(void **unused) {
    (void)unused;
    fake_t fk;
    fake_install(&fk, "fail");
    char *dir = make_dir();
    write_run(dir, 3, 2, 3);
    write_text(dir, "curve.png", "previous", "w");
    fl_curve_t *c = fl_curve_create(dir);
    fake_restore_path(&fk);
    assert_int_equal(fl_curve_finish(c, 30), -1);
    assert_int_equal(starts(dir), 1);
    char *prev = slurp(dir, "curve.png");
    assert_string_equal(prev, "previous");
    free(prev);
    assert_false(exists(dir, "logs"));
    assert_false(has_temporary(dir));

    setenv("FAKE_GNUPLOT", "hang", 1);
    double t0 = fl_clock_sec();
    assert_int_equal(fl_curve_finish(c, 0.5), -1);
    assert_true(fl_clock_sec() - t0 < 5);
    prev = slurp(dir, "curve.png");
    assert_string_equal(prev, "previous");
    free(prev);
    /* a hanging drawing started by refresh is killed by destroy, which does not wait */
    fl_curve_refresh(c);
    t0 = fl_clock_sec();
    fl_curve_destroy(c);
    assert_true(fl_clock_sec() - t0 < 5);
    fake_remove(&fk);
    rm_rf(dir);
    free(dir);
}

/* More than 8 actors: 8 are drawn, the first and the last among them; rows and actors
 * that appear later are drawn by the next refresh. */
static void test_many_actors_and_new_rows(void **unused) {
    (void)unused;
    fake_t fk;
    fake_install(&fk, NULL);
    char *dir = make_dir();
    write_run(dir, 2, 20, 3);
    fl_curve_t *c = fl_curve_create(dir);
    fake_restore_path(&fk);
    assert_int_equal(fl_curve_finish(c, 30), 0);
    char *gp = slurp(dir, "curve.gp");
    assert_non_null(strstr(gp, "8 of 20 actors shown"));
    assert_non_null(strstr(gp, "title 'actor 0 (eps 0.4)'"));
    assert_non_null(strstr(gp, "title 'actor 19 ("));
    int lines = 0;
    for (char *p = gp; (p = strstr(p, "using 1:2 with lines")); p++) lines++;
    assert_int_equal(lines, 8);
    free(gp);
    /* a 21st actor joins (with a row whose end is still being written) */
    write_text(dir, "returns.csv", "20.5,90000,20,0.001,4,3.5\n21.0,95000,3", "a");
    assert_int_equal(fl_curve_finish(c, 30), 0);
    gp = slurp(dir, "curve.gp");
    assert_non_null(strstr(gp, "8 of 21 actors shown"));
    assert_non_null(strstr(gp, "title 'actor 20 (eps 0.001)'"));
    assert_null(strstr(gp, "title 'actor 19 ("));
    free(gp);
    fl_curve_destroy(c);
    fake_remove(&fk);
    rm_rf(dir);
    free(dir);
}

/* Headers only, or no files at all: nothing is drawn, nothing started, and finish
 * answers -1 at once. */
static void test_nothing_to_plot(void **unused) {
    (void)unused;
    fake_t fk;
    fake_install(&fk, NULL);
    char *dir = make_dir();
    fl_curve_t *empty = fl_curve_create(dir);
    write_run(dir, 0, 3, 0);
    fl_curve_t *c = fl_curve_create(dir);
    fake_restore_path(&fk);
    assert_int_equal(fl_curve_available(c), 1);
    fl_curve_refresh(c);
    double t0 = fl_clock_sec();
    assert_int_equal(fl_curve_finish(c, 30), -1);
    assert_true(fl_clock_sec() - t0 < 1.0);
    fl_curve_destroy(c);
    fl_sleep_sec(0.1);
    assert_int_equal(starts(dir), 0);
    assert_false(exists(dir, "curve.png"));
    assert_false(exists(dir, "curve.gp"));
    /* a folder without the files */
    char *bare = make_dir();
    c = fl_curve_create(bare);
    assert_int_equal(fl_curve_finish(c, 30), -1);
    fl_curve_destroy(c);
    assert_false(exists(bare, "curve.gp"));
    fl_curve_destroy(empty);
    fl_curve_destroy(NULL);
    fake_remove(&fk);
    rm_rf(bare);
    rm_rf(dir);
    free(bare);
    free(dir);
}

/* ---- a suite's band over seeds ---------------------------------------------------- */

/* The band: the union of the seeds' x, each seed linear between its points and held after
 * its last, none before its first; the mean and Student's t interval over those there. */
static void test_band(void **unused) {
    (void)unused;
    const double x1[] = {0, 100, 200}, y1[] = {0, 10, 20};
    const double x2[] = {150, 50, 250}, y2[] = {30, 10, 50}; /* out of order: sorted by x */
    const fl_curve_series_t s[] = {{x1, y1, 3}, {x2, y2, 3}, {NULL, NULL, 0}};
    double x[16], mean[16], ci[16];
    int count[16];
    int m = fl_curve_band(s, 3, x, mean, ci, count, 16);
    assert_int_equal(m, 6);
    const double want_x[] = {0, 50, 100, 150, 200, 250};
    const int want_n[] = {1, 2, 2, 2, 2, 2};
    /* seed 1 at 50: 5; seed 2 at 100: 20; seed 1 at 150: 15; seed 2 at 200: 40; seed 1 at
     * 250: held at 20 */
    const double a[] = {0, 5, 10, 15, 20, 20}, b[] = {NAN, 10, 20, 30, 40, 50};
    for (int i = 0; i < m; i++) {
        assert_float_equal(x[i], want_x[i], 0);
        assert_int_equal(count[i], want_n[i]);
        if (count[i] == 1) {
            assert_float_equal(mean[i], a[i], 1e-12);
            assert_float_equal(ci[i], 0, 0);
        } else {
            double mu = (a[i] + b[i]) / 2, sd = fabs(a[i] - b[i]) / sqrt(2.0);
            assert_float_equal(mean[i], mu, 1e-12);
            assert_float_equal(ci[i], 12.706 * sd / sqrt(2.0), 1e-9); /* t(1) = 12.706 */
        }
    }
    /* max cuts the points; no points at all: none */
    assert_int_equal(fl_curve_band(s, 3, x, mean, ci, count, 2), 2);
    assert_float_equal(x[1], 50, 0);
    assert_int_equal(fl_curve_band(s + 2, 1, x, mean, ci, count, 16), 0);
    /* three seeds at one x: the interval of three values */
    const double xs[] = {7}, ya[] = {1}, yb[] = {2}, yc[] = {6};
    const fl_curve_series_t t[] = {{xs, ya, 1}, {xs, yb, 1}, {xs, yc, 1}};
    assert_int_equal(fl_curve_band(t, 3, x, mean, ci, count, 16), 1);
    assert_int_equal(count[0], 3);
    assert_float_equal(mean[0], 3, 1e-12);
    assert_float_equal(ci[0], 4.303 * sqrt(7.0) / sqrt(3.0), 1e-9); /* std sqrt((4+1+9)/2) */
}

/* seed-S/evals.csv of a suite folder: n rows, return_mean = slope * row. */
static void write_seed(const char *dir, int seed, int n, double slope) {
    char sub[600];
    snprintf(sub, sizeof sub, "%s/seed-%d", dir, seed);
    assert_int_equal(mkdir(sub, 0755), 0);
    char path[700];
    snprintf(path, sizeof path, "%s/evals.csv", sub);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(EVALS_HEADER, f);
    for (int i = 0; i < n; i++)
        fprintf(f, "%d.0,%d,%d,%d,10,0,%.3f,1.2,0,500,0.7,120,80,200,0,1.5,0,%d\n", i, 1000 * i + 13 * seed, 50 * i, i,
                slope * i, 1000 * i + 13 * seed);
    fclose(f);
}

/* A suite's curves.png: titled with the experiment's name, each seed's line, the mean of
 * the seeds with evaluations over its band (curves.csv), the target; a seed without
 * evaluations is left out. With a stand-in gnuplot, then the real one when installed. */
static void test_suite_picture(void **unused) {
    (void)unused;
    char *dir = make_dir();
    write_seed(dir, 1, 5, 10);
    write_seed(dir, 2, 4, 20);
    const char *names[] = {"seed-1", "seed-2", "seed-3"}, *labels[] = {"seed 1", "seed 2", "seed 3"};
    char why[256] = "";
    fake_t fk;
    fake_install(&fk, NULL);
    assert_int_equal(fl_curve_suite(dir, "cartpole", names, labels, 3, 475, NAN, 30, why, sizeof why), 0);
    fake_restore_path(&fk);
    char png[600];
    snprintf(png, sizeof png, "%s/curves.png", dir);
    assert_true(exists(dir, "curves.png"));
    char *gp = slurp(dir, "curves.gp");
    assert_non_null(gp);
    assert_non_null(strstr(gp, "set title 'cartpole'"));
    assert_non_null(strstr(gp, "'seed-1/evals.csv' using 'env_steps':'return_mean'"));
    assert_non_null(strstr(gp, "title 'seed 2'"));
    assert_null(strstr(gp, "seed-3"));
    assert_non_null(strstr(gp, "'curves.csv' using 'env_steps':'low':'high' with filledcurves"));
    assert_non_null(strstr(gp, "title 'mean of 2 seeds'"));
    assert_non_null(strstr(gp, "475 with lines"));
    free(gp);
    char *band = slurp(dir, "curves.csv");
    assert_non_null(band);
    assert_true(strncmp(band, "env_steps,mean,ci95,low,high,seeds\n", 35) == 0);
    /* x 13: seed 1 alone; 26: both, seed 1 at 0.13 between its first two points, seed 2 at 0 */
    assert_non_null(strstr(band, "\n13,0,0,0,0,1\n"));
    assert_non_null(strstr(band, "\n26,0.065,"));
    int rows = 0;
    for (char *p = band; (p = strchr(p, '\n')); p++) rows++;
    assert_int_equal(rows, 1 + 9); /* the header and the 9 distinct x */
    /* the band's top stops at the most an episode can return */
    fake_install(&fk, NULL);
    assert_int_equal(fl_curve_suite(dir, "cartpole", names, labels, 3, 475, 0.1, 30, why, sizeof why), 0);
    fake_restore_path(&fk);
    char *capped = slurp(dir, "curves.csv");
    assert_non_null(capped);
    int over = 0, capped_rows = 0;
    for (char *line = strchr(capped, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
        double xs, m, ci, lo, hi;
        int seeds;
        if (sscanf(line + 1, "%lf,%lf,%lf,%lf,%lf,%d", &xs, &m, &ci, &lo, &hi, &seeds) == 6) {
            capped_rows++;
            over += hi > 0.1;
        }
    }
    assert_int_equal(capped_rows, 9);
    assert_int_equal(over, 0);
    free(capped);
    free(band);
    fake_remove(&fk);
    /* no evaluations at all: no picture, and why */
    char *empty = make_dir();
    assert_int_equal(fl_curve_suite(empty, "x", names, labels, 3, NAN, NAN, 30, why, sizeof why), -1);
    assert_non_null(strstr(why, "no seed has an evaluation"));
    rm_rf(empty);
    free(empty);
    if (have_gnuplot()) { /* the real picture */
        unlink(png);
        assert_int_equal(fl_curve_suite(dir, "cartpole", names, labels, 3, NAN, NAN, 60, why, sizeof why), 0);
        FILE *f = fopen(png, "rb");
        assert_non_null(f);
        unsigned char sig[8] = {0};
        assert_int_equal(fread(sig, 1, 8, f), 8);
        assert_memory_equal(sig, "\x89PNG\r\n\x1a\n", 8);
        fclose(f);
        assert_false(has_temporary(dir));
    }
    rm_rf(dir);
    free(dir);
}

/* No gnuplot on PATH: inert, and finish answers -1 at once. */
static void test_no_gnuplot(void **unused) {
    (void)unused;
    char *dir = make_dir();
    char *empty = make_dir();
    write_run(dir, 5, 3, 5);
    const char *p = getenv("PATH");
    char *saved = strdup(p ? p : "/usr/bin:/bin");
    setenv("PATH", empty, 1);
    fl_curve_t *c = fl_curve_create(dir);
    setenv("PATH", saved, 1);
    assert_non_null(c);
    assert_int_equal(fl_curve_available(c), 0);
    fl_curve_refresh(c);
    double t0 = fl_clock_sec();
    assert_int_equal(fl_curve_finish(c, 30), -1);
    assert_true(fl_clock_sec() - t0 < 0.5);
    assert_false(exists(dir, "curve.png"));
    assert_false(exists(dir, "curve.gp"));
    fl_curve_destroy(c);
    rm_rf(empty);
    rm_rf(dir);
    free(saved);
    free(empty);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_draws_evals_and_returns),
        cmocka_unit_test(test_frames_axis),
        cmocka_unit_test(test_draws_returns_only),
        cmocka_unit_test(test_refresh_starts_one_drawing),
        cmocka_unit_test(test_failure_and_timeout),
        cmocka_unit_test(test_many_actors_and_new_rows),
        cmocka_unit_test(test_nothing_to_plot),
        cmocka_unit_test(test_no_gnuplot),
        cmocka_unit_test(test_band),
        cmocka_unit_test(test_suite_picture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
