/* curve: the learning-curve pictures drawn by gnuplot (see curve.h): a run folder's
 * curve.png and a suite's curves.png; the drawing itself is launcher/gnuplot.c's.
 *
 * To know what to plot, a run's evals.csv and returns.csv are read incrementally: the rows
 * seen so far, and for returns.csv the actors with their latest epsilon. Only complete
 * lines count; a file that shrank (rewritten) is read again from the start. */
#include "launcher/curve.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/stats.h"
#include "launcher/gnuplot.h"

#define CURVE_PNG "curve.png"
#define CURVE_GP "curve.gp"
#define CURVE_LOG "logs/curve.log"
#define MAX_SHOWN 8           /* actor lines drawn at most */
#define MAX_ACTOR_INDEX 65535 /* rows naming a larger index are ignored */

/* An incremental reader of one CSV file of the run folder. */
typedef struct csv_scan {
    char path[PATH_MAX + 32];
    long offset; /* bytes consumed: whole lines only */
    int have_header;
    int col_actor, col_eps;  /* returns.csv: the columns' indices (-1: absent) */
    int col_env, col_frames; /* evals.csv: env_steps and frames (-1: absent) */
    long rows;
} csv_scan_t;

typedef struct actor {
    int seen;
    double eps;
} actor_t;

struct fl_curve {
    char dir[PATH_MAX];
    char name[256]; /* the folder's name: the picture's title */
    char gp_path[PATH_MAX + 32], gp_tmp[PATH_MAX + 64], png_path[PATH_MAX + 32];
    fl_gnuplot_t *plot; /* the drawings of curve.png */
    csv_scan_t evals, returns;
    actor_t *actors; /* indexed by actor index, n_actors entries allocated */
    int n_actors;
    int warned;      /* a failed drawing was logged */
    long frame_skip; /* frames / env_steps of evals.csv (0: not known yet; 1: no frame skip) */
};

/* ---- reading the CSV files ---------------------------------------------- */

static void scan_reset(csv_scan_t *s) {
    s->offset = 0;
    s->have_header = 0;
    s->col_actor = s->col_eps = s->col_env = s->col_frames = -1;
    s->rows = 0;
}

/* Field i of a comma-separated line (no quoting in fleet's files) into buf. */
static int csv_field(const char *line, int i, char *buf, size_t len) {
    const char *p = line;
    for (int k = 0; k < i; k++) {
        p = strchr(p, ',');
        if (!p) return -1;
        p++;
    }
    size_t n = strcspn(p, ",\r\n");
    if (n >= len) n = len - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return 0;
}

static int csv_column(const char *header, const char *name) {
    char f[64];
    for (int i = 0; csv_field(header, i, f, sizeof f) == 0; i++) {
        char *s = f;
        while (*s == ' ') s++;
        size_t n = strlen(s);
        while (n > 0 && s[n - 1] == ' ') s[--n] = '\0';
        if (strcmp(s, name) == 0) return i;
    }
    return -1;
}

static int note_actor(fl_curve_t *c, long index, double eps) {
    if (index < 0 || index > MAX_ACTOR_INDEX) return 0;
    if (index >= c->n_actors) {
        int n = c->n_actors ? c->n_actors : 8;
        while (n <= index) n *= 2;
        actor_t *a = realloc(c->actors, sizeof *a * (size_t)n);
        if (!a) return -1;
        memset(a + c->n_actors, 0, sizeof *a * (size_t)(n - c->n_actors));
        c->actors = a;
        c->n_actors = n;
    }
    c->actors[index].seen = 1;
    c->actors[index].eps = eps;
    return 0;
}

/* Forgets what was read of s's file (gone, or rewritten). */
static void scan_forget(fl_curve_t *c, csv_scan_t *s, int is_returns) {
    scan_reset(s);
    if (is_returns)
        for (int i = 0; i < c->n_actors; i++) c->actors[i].seen = 0;
}

static int actors_seen(const fl_curve_t *c) {
    int n = 0;
    for (int i = 0; i < c->n_actors; i++) n += c->actors[i].seen;
    return n;
}

/* Reads the lines of s's file added since the last call. */
static void scan(fl_curve_t *c, csv_scan_t *s, int is_returns) {
    FILE *f = fopen(s->path, "r");
    if (!f) {
        scan_forget(c, s, is_returns);
        return;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && st.st_size < s->offset) scan_forget(c, s, is_returns);
    if (fseek(f, s->offset, SEEK_SET) != 0) {
        fclose(f);
        return;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] != '\n') break; /* being written: read it next time */
        s->offset += n;
        if (!s->have_header) {
            s->have_header = 1;
            if (is_returns) {
                s->col_actor = csv_column(line, "actor");
                s->col_eps = csv_column(line, "epsilon");
            } else {
                s->col_env = csv_column(line, "env_steps");
                s->col_frames = csv_column(line, "frames");
            }
            continue;
        }
        if (strspn(line, " \r\n") == (size_t)n) continue;
        s->rows++;
        if (!is_returns && !c->frame_skip && s->col_env >= 0 && s->col_frames >= 0) {
            char e[64], fr[64];
            if (csv_field(line, s->col_env, e, sizeof e) == 0 && csv_field(line, s->col_frames, fr, sizeof fr) == 0) {
                double env = strtod(e, NULL), frames = strtod(fr, NULL);
                if (env > 0 && frames >= env) c->frame_skip = lround(frames / env);
            }
        }
        if (is_returns && s->col_actor >= 0) {
            char a[32], e[64] = "";
            if (csv_field(line, s->col_actor, a, sizeof a) != 0) continue;
            char *end;
            long idx = strtol(a, &end, 10);
            if (end == a) continue;
            double eps = -1.0;
            if (s->col_eps >= 0 && csv_field(line, s->col_eps, e, sizeof e) == 0 && e[0]) eps = strtod(e, NULL);
            if (note_actor(c, idx, eps) != 0) break;
        }
    }
    free(line);
    fclose(f);
}

/* ---- the gnuplot script --------------------------------------------------- */

/* s as the inside of a gnuplot single-quoted string ('' for a quote). */
static void gp_quote(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
}

/* Colours of the actor lines (the evaluation is blue). */
static const char *const actor_colours[MAX_SHOWN] = {"#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                                     "#8c564b", "#e377c2", "#bcbd22", "#17becf"};

/* Writes dir/curve.gp for the rows read so far (via a temporary file); 0 or -1. */
static int write_script(fl_curve_t *c) {
    int shown[MAX_SHOWN], n_shown = 0, n_seen = actors_seen(c);
    if (n_seen > 0) {
        /* evenly spaced among the actors seen, the first and the last included (the
         * ranks wanted increase strictly since want <= n_seen) */
        int want = n_seen < MAX_SHOWN ? n_seen : MAX_SHOWN, rank = 0;
        for (int i = 0; i < c->n_actors && n_shown < want; i++) {
            if (!c->actors[i].seen) continue;
            int target = want == 1 ? 0 : (int)((long)n_shown * (n_seen - 1) / (want - 1));
            if (rank++ == target) shown[n_shown++] = i;
        }
    }
    FILE *f = fopen(c->gp_tmp, "w");
    if (!f) return -1;
    fprintf(f, "# curve.gp: the learning curve of run '");
    gp_quote(f, c->name);
    fprintf(f,
            "', written by fleet each time it redraws\n"
            "# curve.png. Paths are relative to the run folder: `cd` there and `gnuplot curve.gp`\n"
            "# (fleet rewrites this file while the run goes on: restyle a copy).\n"
            "# x: the whole fleet's env steps (times the frame skip: frames); y: return.\n"
            "# evals.csv: greedy evaluations;\n"
            "# returns.csv: each actor's recent training episodes, at its exploration epsilon.\n"
            "if (!exists(\"out\")) out = '" CURVE_PNG
            "'\n"
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
            "    set terminal pngcairo size 1000,600 font 'sans,10' noenhanced\n"
            "} else {\n"
            "    set terminal png size 1000,600 noenhanced\n"
            "}\n"
            "set output out\n"
            "set datafile separator ','\n");
    fprintf(f, "set title '");
    gp_quote(f, c->name);
    /* x: the whole fleet's env steps, or with a frame skip the emulator frames (Atari
     * papers' axis), from the env_steps column of both files */
    char x[64] = "'env_steps'";
    if (c->frame_skip > 1) snprintf(x, sizeof x, "(column('env_steps')*%ld)", c->frame_skip);
    fprintf(f, "' font ',12' noenhanced\n");
    if (c->frame_skip > 1)
        fprintf(f, "set xlabel 'frames (env steps x %ld, whole fleet)'\n", c->frame_skip);
    else
        fprintf(f, "set xlabel 'env steps (whole fleet)'\n");
    fprintf(f,
            "set ylabel 'return'\n"
            "set format x '%%.1s%%c'\n"
            "set grid\n"
            "set key outside right top vertical Left reverse noenhanced samplen 2\n");
    if (n_shown < n_seen) fprintf(f, "set key title '%d of %d actors shown' left\n", n_shown, n_seen);
    if (n_shown > 0) fprintf(f, "# one data block per actor shown: its rows of returns.csv\n");
    for (int j = 0; j < n_shown; j++)
        fprintf(f,
                "set table $actor%d separator comma\n"
                "plot 'returns.csv' using %s:'return_mean' with table if (column('actor') == %d)\n",
                shown[j], x, shown[j]);
    if (n_shown > 0) fprintf(f, "unset table\n");
    fprintf(f, "plot \\\n");
    int first = 1;
    if (c->evals.rows > 1) {
        fprintf(f,
                "  'evals.csv' using %s:'return_min':'return_max' with filledcurves \\\n"
                "    fs transparent solid 0.18 noborder lc rgb '#1f77b4' title 'greedy eval: min..max'",
                x);
        first = 0;
    } else if (c->evals.rows == 1) { /* a band needs two evaluations: a bar */
        fprintf(f,
                "  'evals.csv' using %s:'return_mean':'return_min':'return_max' with yerrorbars \\\n"
                "    pt -1 lw 1 lc rgb '#1f77b4' title 'greedy eval: min..max'",
                x);
        first = 0;
    }
    for (int j = 0; j < n_shown; j++) {
        const actor_t *a = &c->actors[shown[j]];
        char eps[32];
        if (a->eps >= 0)
            snprintf(eps, sizeof eps, " (eps %.3g)", a->eps);
        else
            eps[0] = '\0';
        fprintf(f, "%s  $actor%d using 1:2 with lines lw 1 lc rgb '%s' title 'actor %d%s'", first ? "" : ", \\\n",
                shown[j], actor_colours[j], shown[j], eps);
        first = 0;
    }
    if (c->evals.rows > 0)
        fprintf(f,
                ", \\\n  'evals.csv' using %s:'return_mean' with linespoints lw 3 pt 7 ps 0.8 \\\n"
                "    lc rgb '#1f77b4' title 'greedy eval: mean'",
                x);
    fprintf(f, "\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        unlink(c->gp_tmp);
        return -1;
    }
    if (rename(c->gp_tmp, c->gp_path) != 0) {
        unlink(c->gp_tmp);
        return -1;
    }
    return 0;
}

/* ---- the drawing ---------------------------------------------------------- */

/* Starts a drawing of what was read so far; 0, or -1 (logged once). */
static int start_drawing(fl_curve_t *c) {
    if (write_script(c) != 0) {
        if (!c->warned) FL_WARN("curve: cannot write %s: %s (no curve.png)", c->gp_path, strerror(errno));
        c->warned = 1;
        return -1;
    }
    if (fl_gnuplot_start(c->plot) != 0) {
        if (!c->warned) FL_WARN("curve: cannot start gnuplot: %s", strerror(errno));
        c->warned = 1;
        return -1;
    }
    return 0;
}

/* A drawing's result r (fl_gnuplot_poll, _wait) said once in the log: 0 when curve.png
 * was written, else -1. */
static int drawing_result(fl_curve_t *c, int r) {
    if (r == 0) return 0;
    if (c->warned) return -1;
    c->warned = 1;
    int code = fl_gnuplot_code(c->plot);
    if (r == -2) {
        FL_WARN("curve: gnuplot did not finish in time: killed it (no new curve.png)");
    } else if (code == FL_GNUPLOT_EXIT_CHDIR) {
        FL_WARN("curve: cannot enter %s: no curve.png", c->dir);
    } else if (code == FL_GNUPLOT_EXIT_FORK || code == FL_GNUPLOT_EXIT_EXEC) {
        FL_WARN("curve: cannot run %s: no curve.png", fl_gnuplot_program(c->plot));
    } else if (code == FL_GNUPLOT_EXIT_RESULT || code < 0) {
        FL_WARN("curve: gnuplot wrote no picture: %s not updated", c->png_path);
    } else {
        char what[64], logs[PATH_MAX + 32];
        if (code > 128)
            snprintf(what, sizeof what, "was killed by signal %d", code - 128);
        else
            snprintf(what, sizeof what, "exited with status %d", code);
        struct stat ls;
        snprintf(logs, sizeof logs, "%s/logs", c->dir);
        if (stat(logs, &ls) == 0 && S_ISDIR(ls.st_mode))
            FL_WARN("curve: gnuplot %s: %s not updated (its messages are in %s/" CURVE_LOG ")", what, c->png_path,
                    c->dir);
        else
            FL_WARN("curve: gnuplot %s: %s not updated (`gnuplot " CURVE_GP "` in %s shows why)", what, c->png_path,
                    c->dir);
    }
    return -1;
}

/* ---- the API ---------------------------------------------------------------- */

fl_curve_t *fl_curve_create(const char *dir) {
    fl_curve_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    snprintf(c->dir, sizeof c->dir, "%s", dir && dir[0] ? dir : ".");
    /* the title: the folder's own name, also for "." or a trailing slash */
    char *abs = realpath(c->dir, NULL);
    const char *base = abs ? abs : c->dir;
    size_t n = strlen(base);
    while (n > 1 && base[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && base[b - 1] != '/') b--;
    snprintf(c->name, sizeof c->name, "%.*s", (int)(n - b), base + b);
    free(abs);
    snprintf(c->gp_path, sizeof c->gp_path, "%s/" CURVE_GP, c->dir);
    static int serial; /* one owner thread per curve; distinct curves of one process */
    int id = __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED);
    snprintf(c->gp_tmp, sizeof c->gp_tmp, "%s/.curve-%d-%d.gp.tmp", c->dir, (int)getpid(), id);
    snprintf(c->png_path, sizeof c->png_path, "%s/" CURVE_PNG, c->dir);
    snprintf(c->evals.path, sizeof c->evals.path, "%s/evals.csv", c->dir);
    snprintf(c->returns.path, sizeof c->returns.path, "%s/returns.csv", c->dir);
    scan_reset(&c->evals);
    scan_reset(&c->returns);
    c->plot = fl_gnuplot_create(c->dir, CURVE_GP, CURVE_PNG, CURVE_LOG);
    if (!c->plot) {
        free(c);
        return NULL;
    }
    if (!fl_gnuplot_available(c->plot))
        FL_INFO("curve: no gnuplot on PATH, so no %s (install gnuplot-nox on Debian)", c->png_path);
    return c;
}

int fl_curve_available(const fl_curve_t *c) {
    return c && fl_gnuplot_available(c->plot);
}

/* Reads what was added to both files; 1 when there is something to draw: an evaluation,
 * or an actor's training return. */
static int has_rows(fl_curve_t *c) {
    scan(c, &c->evals, 0);
    scan(c, &c->returns, 1);
    return c->evals.rows > 0 || actors_seen(c) > 0;
}

void fl_curve_refresh(fl_curve_t *c) {
    if (!fl_curve_available(c)) return;
    if (fl_gnuplot_running(c->plot)) {
        int r = fl_gnuplot_poll(c->plot);
        if (r == 1) return;
        drawing_result(c, r);
    }
    if (!has_rows(c)) return;
    start_drawing(c);
}

int fl_curve_finish(fl_curve_t *c, double timeout_s) {
    if (!fl_curve_available(c)) return -1;
    double deadline = fl_clock_sec() + (timeout_s > 0 ? timeout_s : 0);
    if (fl_gnuplot_running(c->plot)) {
        drawing_result(c, fl_gnuplot_wait(c->plot, deadline));
        if (fl_clock_sec() >= deadline) return -1;
    }
    if (!has_rows(c)) return -1;
    if (start_drawing(c) != 0) return -1;
    return drawing_result(c, fl_gnuplot_wait(c->plot, deadline));
}

void fl_curve_destroy(fl_curve_t *c) {
    if (!c) return;
    fl_gnuplot_destroy(c->plot);
    free(c->actors);
    free(c);
}

/* ---- a suite's curves.png ------------------------------------------------------ */

typedef struct point {
    double x, y;
} point_t;

static int cmp_point(const void *a, const void *b) {
    const point_t *p = a, *q = b;
    return (p->x > q->x) - (p->x < q->x);
}

static int cmp_x(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Series s's value at x, from its points sorted by x (p[0..n)): 0 before the first. */
static int value_at(const point_t *p, int n, double x, double *y) {
    if (n < 1 || x < p[0].x) return 0;
    int lo = 0, hi = n - 1; /* the last point at or before x */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (p[mid].x <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo == n - 1 || p[lo].x == x) {
        *y = p[lo].y;
        return 1;
    }
    const point_t *a = &p[lo], *b = &p[lo + 1];
    *y = a->y + (b->y - a->y) * (x - a->x) / (b->x - a->x);
    return 1;
}

int fl_curve_band(const fl_curve_series_t *series, int n, double *x, double *mean, double *ci95, int *count, int max) {
    int total = 0;
    for (int i = 0; i < n; i++) total += series[i].n > 0 ? series[i].n : 0;
    if (total == 0 || max < 1) return 0;
    point_t **sorted = calloc((size_t)n, sizeof *sorted);
    double *xs = malloc((size_t)total * sizeof *xs), *vals = malloc((size_t)n * sizeof *vals);
    int m = 0, ok = sorted && xs && vals;
    for (int i = 0; ok && i < n; i++) {
        if (series[i].n < 1) continue;
        sorted[i] = malloc((size_t)series[i].n * sizeof *sorted[i]);
        if (!sorted[i]) {
            ok = 0;
            break;
        }
        for (int k = 0; k < series[i].n; k++) {
            sorted[i][k] = (point_t){series[i].x[k], series[i].y[k]};
            xs[m++] = series[i].x[k];
        }
        /* of points at one x, value_at takes the one that sorts last there */
        qsort(sorted[i], (size_t)series[i].n, sizeof *sorted[i], cmp_point);
    }
    int out = 0;
    if (ok) {
        qsort(xs, (size_t)m, sizeof *xs, cmp_x);
        for (int k = 0; k < m && out < max; k++) {
            if (k > 0 && xs[k] == xs[k - 1]) continue;
            int c = 0;
            for (int i = 0; i < n; i++)
                if (series[i].n > 0 && value_at(sorted[i], series[i].n, xs[k], &vals[c])) c++;
            fl_stats_t st = fl_stats_of(vals, c);
            x[out] = xs[k];
            mean[out] = st.mean;
            ci95[out] = st.ci95;
            count[out++] = c;
        }
    }
    for (int i = 0; sorted && i < n; i++) free(sorted[i]);
    free(sorted);
    free(xs);
    free(vals);
    return out;
}

/* The env_steps and return_mean columns of an evals.csv (complete lines only), malloc'd
 * into *x and *y; the number of rows, or -1 (no file, no such columns, out of memory). */
static int read_evals(const char *path, double **x, double **y) {
    *x = *y = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int cx = -1, cy = -1, n = 0, room = 0, rc = 0;
    if ((len = getline(&line, &cap, f)) > 0) {
        cx = csv_column(line, "env_steps");
        cy = csv_column(line, "return_mean");
    }
    if (cx < 0 || cy < 0) rc = -1;
    while (rc == 0 && (len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] != '\n') break;
        char a[64], b[64];
        if (csv_field(line, cx, a, sizeof a) != 0 || csv_field(line, cy, b, sizeof b) != 0 || !a[0] || !b[0]) continue;
        if (n == room) {
            room = room ? 2 * room : 64;
            double *nx = realloc(*x, (size_t)room * sizeof *nx);
            if (nx) *x = nx;
            double *ny = nx ? realloc(*y, (size_t)room * sizeof *ny) : NULL;
            if (ny) *y = ny;
            if (!nx || !ny) rc = -1;
            if (rc) break;
        }
        (*x)[n] = strtod(a, NULL);
        (*y)[n++] = strtod(b, NULL);
    }
    free(line);
    fclose(f);
    if (rc) {
        free(*x);
        free(*y);
        *x = *y = NULL;
        return -1;
    }
    return n;
}

/* curves.csv: the band's rows. 0 or -1. */
static int write_band(const char *path, const double *x, const double *mean, const double *ci95, const int *count,
                      int m, double most) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "env_steps,mean,ci95,low,high,seeds\n");
    for (int i = 0; i < m; i++) { /* the band ends where an episode's return can go no higher */
        const double high = isnan(most) ? mean[i] + ci95[i] : fmin(mean[i] + ci95[i], most);
        fprintf(f, "%.0f,%.9g,%.9g,%.9g,%.9g,%d\n", x[i], mean[i], ci95[i], mean[i] - ci95[i], high, count[i]);
    }
    int bad = ferror(f);
    return fclose(f) != 0 || bad ? -1 : 0;
}

/* curves.gp for the seeds with points (has[i]); 0 or -1. */
static int write_suite_script(const char *path, const char *title, const char *const *names, const char *const *labels,
                              const int *has, int n, double target) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "# curves.gp: a suite's greedy evaluation returns over its seeds, written by `fleet suite`;\n"
            "# `gnuplot curves.gp` in the suite folder redraws curves.png.\n"
            "# Thin lines: each seed's evaluations (seed-S/evals.csv); thick: their mean, over\n"
            "# the 95%% confidence interval of the mean (Student's t) from curves.csv.\n"
            "if (!exists(\"out\")) out = 'curves.png'\n"
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
            "    set terminal pngcairo size 1000,600 font 'sans,10' noenhanced\n"
            "} else {\n"
            "    set terminal png size 1000,600 noenhanced\n"
            "}\n"
            "set output out\n"
            "set datafile separator ','\n"
            "set title '");
    gp_quote(f, title);
    fprintf(f,
            "' font ',12' noenhanced\n"
            "set xlabel 'env steps (whole fleet)'\n"
            "set ylabel 'greedy evaluation return (mean of the episodes)'\n"
            "set format x '%%.1s%%c'\n"
            "set grid\n"
            "set key outside right top vertical Left reverse noenhanced samplen 2\n");
    int seeds = 0;
    for (int i = 0; i < n; i++) seeds += has[i] != 0;
    fprintf(f,
            "plot \\\n"
            "  'curves.csv' using 'env_steps':'low':'high' with filledcurves \\\n"
            "    fs transparent solid 0.2 noborder lc rgb '#1f77b4' title '95%% CI of the mean (Student t)'");
    for (int i = 0, k = 0; i < n; i++) {
        if (!has[i]) continue;
        fprintf(f, ", \\\n  '");
        gp_quote(f, names[i]);
        fprintf(f, "/evals.csv' using 'env_steps':'return_mean' with lines lw 1 lc rgb '%s' title '",
                actor_colours[k++ % MAX_SHOWN]);
        gp_quote(f, labels[i]);
        fprintf(f, "'");
    }
    fprintf(f,
            ", \\\n  'curves.csv' using 'env_steps':'mean' with lines lw 3 lc rgb '#1f77b4' title 'mean of %d seed%s'",
            seeds, seeds == 1 ? "" : "s");
    if (!isnan(target)) fprintf(f, ", \\\n  %.17g with lines dashtype 2 lc rgb 'gray' title 'target'", target);
    fprintf(f, "\n");
    int bad = ferror(f);
    return fclose(f) != 0 || bad ? -1 : 0;
}

int fl_curve_suite(const char *dir, const char *title, const char *const *names, const char *const *labels, int n,
                   double target, double most, double timeout_s, char *why, size_t why_len) {
    snprintf(why, why_len, "out of memory");
    fl_gnuplot_t *g = fl_gnuplot_create(dir, "curves.gp", "curves.png", "curves.log");
    if (!g) return -1;
    if (!fl_gnuplot_available(g)) {
        snprintf(why, why_len, "no gnuplot on PATH (scripts/setup.sh installs gnuplot-nox)");
        fl_gnuplot_destroy(g);
        return -1;
    }
    fl_curve_series_t *s = calloc((size_t)(n > 0 ? n : 1), sizeof *s);
    int *has = calloc((size_t)(n > 0 ? n : 1), sizeof *has);
    int rc = -1, total = 0;
    char path[PATH_MAX + 300];
    for (int i = 0; s && has && i < n; i++) {
        double *x, *y;
        snprintf(path, sizeof path, "%s/%s/evals.csv", dir, names[i]);
        int k = read_evals(path, &x, &y);
        if (k <= 0) continue;
        s[i] = (fl_curve_series_t){x, y, k};
        has[i] = 1;
        total += k;
    }
    double *x = NULL, *mean = NULL, *ci95 = NULL;
    int *count = NULL, m = 0;
    if (s && has && total > 0) {
        x = malloc((size_t)total * sizeof *x);
        mean = malloc((size_t)total * sizeof *mean);
        ci95 = malloc((size_t)total * sizeof *ci95);
        count = malloc((size_t)total * sizeof *count);
        if (x && mean && ci95 && count) m = fl_curve_band(s, n, x, mean, ci95, count, total);
    }
    char gp[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/curves.csv", dir);
    snprintf(gp, sizeof gp, "%s/curves.gp", dir);
    if (s && has && total == 0) {
        snprintf(why, why_len, "no seed has an evaluation (seed-S/evals.csv)");
    } else if (m == 0) { /* out of memory: why says so */
    } else if (write_band(path, x, mean, ci95, count, m, most) != 0 ||
               write_suite_script(gp, title, names, labels, has, n, target) != 0) {
        snprintf(why, why_len, "cannot write %s/curves.csv and curves.gp: %s", dir, strerror(errno));
    } else if (fl_gnuplot_start(g) != 0) {
        snprintf(why, why_len, "cannot start gnuplot: %s", strerror(errno));
    } else {
        int r = fl_gnuplot_wait(g, fl_clock_sec() + timeout_s);
        if (r == 0)
            rc = 0;
        else if (r == -2)
            snprintf(why, why_len, "gnuplot took longer than %.0f s (killed)", timeout_s);
        else
            snprintf(why, why_len, "gnuplot failed (exit %d; its messages are in %s/curves.log)", fl_gnuplot_code(g),
                     dir);
    }
    for (int i = 0; s && i < n; i++) {
        free((void *)s[i].x);
        free((void *)s[i].y);
    }
    free(s);
    free(has);
    free(x);
    free(mean);
    free(ci95);
    free(count);
    fl_gnuplot_destroy(g);
    return rc;
}
