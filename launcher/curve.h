/* curve: the learning-curve pictures, drawn by gnuplot (launcher/gnuplot.h): a run's
 * runs/NAME/curve.png and a suite's curves.png (fl_curve_suite, at the end).
 *
 * A run's picture comes from the run folder's evals.csv (greedy evaluations) and
 * returns.csv (each actor's training returns): x the whole fleet's env steps, y the
 * return; the evaluations' mean as a thick line with points over a band from their min to
 * their max return, and one thin line per actor labelled with its epsilon (at most 8
 * actors, evenly spaced, when there are more).
 *
 * Each drawing writes the gnuplot script dir/curve.gp (paths relative to the folder, so
 * `cd runs/NAME && gnuplot curve.gp` redraws or restyles it by hand) and runs gnuplot in
 * the background as launcher/gnuplot.h does (in dir, in its own process group, its output
 * appended to dir/logs/curve.log when dir/logs exists, else /dev/null; the picture
 * replaced only when gnuplot succeeded).
 *
 * Ownership: an fl_curve_t owns its paths and its background process (fl_curve_destroy
 * kills and reaps a running one).
 * Failure: never fatal to a run. Without gnuplot on PATH the module is inert (said once
 * through the log); a failed drawing is logged once, keeps the previous curve.png and
 * shows in fl_curve_finish's result.
 * Threads: one owner thread for every call (the background process gets SIGTERM when the
 * thread that started it ends). */
#ifndef FL_LAUNCHER_CURVE_H
#define FL_LAUNCHER_CURVE_H

#include <stddef.h>

typedef struct fl_curve fl_curve_t;

/* For the run folder dir: finds gnuplot on PATH once (none: the module is inert and says
 * so once through the log). Never NULL except out of memory. */
fl_curve_t *fl_curve_create(const char *dir);
/* 1 when gnuplot was found. */
int fl_curve_available(const fl_curve_t *c);
/* Redraws dir/curve.png from evals.csv and returns.csv in the background: starts gnuplot
 * unless the previous drawing is still running (then does nothing); never blocks on
 * gnuplot. Nothing to plot yet (no rows in either file): nothing happens. */
void fl_curve_refresh(fl_curve_t *c);
/* The final picture: waits for a running drawing, then draws once more and waits for it,
 * all within timeout_s. 0 when curve.png was written, -1 otherwise (no gnuplot, nothing
 * to plot, gnuplot failed, time ran out: then the drawing is killed). */
int fl_curve_finish(fl_curve_t *c, double timeout_s);
/* Kills and reaps a running drawing and frees c; NULL is a no-op. */
void fl_curve_destroy(fl_curve_t *c);

/* ---- a suite's curves.png: the mean over seeds and its 95% band ------------------- */

/* One seed's evaluations: n points (x: env steps, y: the evaluation's mean return), in
 * any order. */
typedef struct fl_curve_series {
    const double *x, *y;
    int n;
} fl_curve_series_t;

/* The band over n series: at every x where one of them has a point (their union, in
 * increasing order, at most max of them), the mean over the series that have a value
 * there and the half-width of its 95% confidence interval (common/stats.h: Student's t
 * with count - 1 degrees of freedom; 0 where count is 1). A series has a value from its
 * first point on: linear between its points, and after its last point the last value (a
 * seed that stopped at the target keeps the return it stopped with). Writes x[i],
 * mean[i], ci95[i], count[i] (each max long) and returns how many points; 0 when no
 * series has a point. */
int fl_curve_band(const fl_curve_series_t *series, int n, double *x, double *mean, double *ci95, int *count, int max);

/* Draws dir/curves.png for a suite of n seeds, each in its folder dir/<names[i]> (its
 * evals.csv; seeds without one are left out), labelled labels[i]: each seed's evaluation
 * return against env steps as a thin line, their mean as a thick one over its 95% band
 * (fl_curve_band), and `target` as a dashed line (NAN: none); `title` (the experiment's
 * name) is the picture's title; `most` (NAN: not known) is the most an episode can return,
 * where the band's top stops. Writes dir/curves.csv (the band: env_steps, mean, ci95,
 * low, high, seeds) and dir/curves.gp (`gnuplot curves.gp` in dir redraws it), runs
 * gnuplot (launcher/gnuplot.h; its messages in dir/curves.log) and waits for it up to
 * timeout_s. 0 when curves.png was written; -1 otherwise, with the reason in why. */
int fl_curve_suite(const char *dir, const char *title, const char *const *names, const char *const *labels, int n,
                   double target, double most, double timeout_s, char *why, size_t why_len);

#endif
