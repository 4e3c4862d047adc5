/* curve: a run's learning-curve picture, runs/NAME/curve.png, drawn by gnuplot from the
 * run folder's evals.csv (greedy evaluations) and returns.csv (each actor's training
 * returns): x the whole fleet's env steps, y the return; the evaluations' mean as a thick
 * line with points over a band from their min to their max return, and one thin line per
 * actor labelled with its epsilon (at most 8 actors, evenly spaced, when there are more).
 *
 * Each drawing writes the gnuplot script dir/curve.gp (paths relative to the folder, so
 * `cd runs/NAME && gnuplot curve.gp` redraws or restyles it by hand) and runs gnuplot in
 * the background, in dir, in its own process group (a terminal's Ctrl-C reaches only the
 * launcher), with default signal dispositions, stdin from /dev/null and stdout/stderr
 * appended to dir/logs/curve.log when dir/logs exists (else /dev/null). gnuplot writes a
 * temporary file that replaces curve.png only when it succeeded, so a reader never sees a
 * half-written picture. The background process is reaped with waitpid on its own pid only.
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

#endif
