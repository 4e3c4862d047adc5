/* gnuplot: the one way fleet runs gnuplot, for a run's curve.png (launcher/curve.c, also
 * through `fleet plot`) and a suite's curves.png (cli/verb_suite.c).
 *
 * A drawing runs gnuplot on a script in a folder, in the background: a "drawer" process
 * moves into the folder and its own process group (a terminal's Ctrl-C reaches only the
 * caller), restores default signal dispositions, takes stdin from /dev/null and appends
 * stdout and stderr to the log file (relative to the folder; /dev/null when it cannot be
 * opened, e.g. its folder is missing), starts `gnuplot -e "out='TMP'" SCRIPT` and waits for
 * it; when gnuplot succeeded and wrote TMP, TMP is renamed over the picture, so a reader
 * never sees a half-written one. The script must send its output to the gnuplot variable
 * `out` (`if (!exists("out")) out = 'curve.png'` then `set output out` lets it run by hand
 * too). TMP is named after this process and drawing object, so two callers drawing in one
 * folder (a `fleet plot` beside a running launcher) do not share it. The drawer gets
 * SIGTERM, and gnuplot SIGKILL, when their parent ends; between fork and exec only
 * async-signal-safe calls are made (callers have threads), and both forks are _Fork, which
 * runs no atfork handlers. The drawer is reaped with waitpid on its own pid only.
 *
 * Ownership: an fl_gnuplot_t owns its paths and its running drawer (fl_gnuplot_destroy
 * kills and reaps it). Threads: one owner thread for every call (the drawer gets SIGTERM
 * when the thread that started it ends). */
#ifndef FL_LAUNCHER_GNUPLOT_H
#define FL_LAUNCHER_GNUPLOT_H

/* A drawing's exit code besides 0 (the picture was written), gnuplot's own status and
 * 128 + a signal's number. */
enum {
    FL_GNUPLOT_EXIT_CHDIR = 120,  /* the drawer could not enter the folder */
    FL_GNUPLOT_EXIT_FORK = 121,   /* nor fork gnuplot, or wait for it */
    FL_GNUPLOT_EXIT_RESULT = 122, /* gnuplot succeeded but wrote no picture */
    FL_GNUPLOT_EXIT_EXEC = 127,   /* gnuplot could not be executed */
};

typedef struct fl_gnuplot fl_gnuplot_t;

/* Drawings of dir/png from dir/script with gnuplot's messages appended to dir/log (each a
 * name relative to dir). Finds gnuplot on PATH once. Never NULL except out of memory. */
fl_gnuplot_t *fl_gnuplot_create(const char *dir, const char *script, const char *png, const char *log);
/* 1 when gnuplot was found on PATH; its path ("" when not). */
int fl_gnuplot_available(const fl_gnuplot_t *g);
const char *fl_gnuplot_program(const fl_gnuplot_t *g);
/* Starts a drawing in the background: 0, or -1 with errno (no gnuplot: ENOENT; one is
 * running already: EBUSY). */
int fl_gnuplot_start(fl_gnuplot_t *g);
/* 1 while a drawing runs. */
int fl_gnuplot_running(const fl_gnuplot_t *g);
/* Looks at the running drawing without waiting: 1 still running, 0 it wrote the picture,
 * -1 it failed (fl_gnuplot_code says how). Without one running: the last result. */
int fl_gnuplot_poll(fl_gnuplot_t *g);
/* Waits for the running drawing until the monotonic deadline (fl_clock_sec): 0 it wrote
 * the picture, -1 it failed, -2 time ran out (it is killed, no new picture). */
int fl_gnuplot_wait(fl_gnuplot_t *g, double deadline);
/* The last finished drawing's exit code (see above; -1 before the first ends, and when
 * its status is unknown: another waitpid reaped it; then the picture's change decided). */
int fl_gnuplot_code(const fl_gnuplot_t *g);
/* Kills a running drawing's process group and reaps it; removes its temporary file. */
void fl_gnuplot_kill(fl_gnuplot_t *g);
/* fl_gnuplot_kill, then frees g; NULL is a no-op. */
void fl_gnuplot_destroy(fl_gnuplot_t *g);

#endif
