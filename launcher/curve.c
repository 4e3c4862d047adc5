/* curve: the learning-curve picture of a run folder, drawn by gnuplot (see curve.h).
 *
 * Each drawing is one background process, the "drawer": it moves into the run folder and
 * its own process group, starts gnuplot on curve.gp with the output set to a temporary
 * file, waits for it, and renames the file over curve.png when gnuplot succeeded. The
 * drawer's exit status is the drawing's result; a timeout or fl_curve_destroy kills the
 * whole group. Between fork and exec the processes call only async-signal-safe functions
 * (the launcher has threads), and both forks are _Fork, which runs no atfork handlers.
 *
 * To know what to plot, evals.csv and returns.csv are read incrementally: the rows seen
 * so far, and for returns.csv the actors with their latest epsilon. Only complete lines
 * count; a file that shrank (rewritten) is read again from the start. */
#include "launcher/curve.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "launcher/proc.h"

#define CURVE_PNG "curve.png"
#define CURVE_GP "curve.gp"
#define CURVE_LOG "logs/curve.log"
#define MAX_SHOWN 8          /* actor lines drawn at most */
#define MAX_ACTOR_INDEX 65535 /* rows naming a larger index are ignored */

/* The drawer's exit statuses besides 0 (curve.png written) and gnuplot's own. */
#define DRAW_EXIT_CHDIR 120
#define DRAW_EXIT_FORK 121
#define DRAW_EXIT_RESULT 122
#define DRAW_EXIT_EXEC 127

/* An incremental reader of one CSV file of the run folder. */
typedef struct csv_scan {
    char path[PATH_MAX + 32];
    long offset;      /* bytes consumed: whole lines only */
    int have_header;
    int col_actor, col_eps; /* returns.csv: the columns' indices (-1: absent) */
    int col_env, col_frames; /* evals.csv: env_steps and frames (-1: absent) */
    long rows;
} csv_scan_t;

typedef struct actor {
    int seen;
    double eps;
} actor_t;

struct fl_curve {
    char dir[PATH_MAX];
    char name[256];          /* the folder's name: the picture's title */
    char gnuplot[PATH_MAX];  /* "" when none was found */
    char gp_path[PATH_MAX + 32], gp_tmp[PATH_MAX + 64], png_path[PATH_MAX + 32], tmp_path[PATH_MAX + 64];
    /* gnuplot's output before the rename, in dir: named after this process and curve, so
     * that a `fleet plot` beside a running launcher does not share it */
    char tmp_name[48], out_arg[64];
    csv_scan_t evals, returns;
    actor_t *actors; /* indexed by actor index, n_actors entries allocated */
    int n_actors;
    pid_t pid; /* the running drawer, or 0 */
    struct stat png_before; /* curve.png when the drawer started (st_ino 0: absent) */
    int warned;             /* a failed drawing was logged */
    long frame_skip;        /* frames / env_steps of evals.csv (0: not known yet; 1: no frame skip) */
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
    fprintf(f, "', written by fleet each time it redraws\n"
               "# curve.png. Paths are relative to the run folder: `cd` there and `gnuplot curve.gp`\n"
               "# (fleet rewrites this file while the run goes on: restyle a copy).\n"
               "# x: the whole fleet's env steps (times the frame skip: frames); y: return.\n"
               "# evals.csv: greedy evaluations;\n"
               "# returns.csv: each actor's recent training episodes, at its exploration epsilon.\n"
               "if (!exists(\"out\")) out = '" CURVE_PNG "'\n"
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
    fprintf(f, "set ylabel 'return'\n"
               "set format x '%%.1s%%c'\n"
               "set grid\n"
               "set key outside right top vertical Left reverse noenhanced samplen 2\n");
    if (n_shown < n_seen)
        fprintf(f, "set key title '%d of %d actors shown' left\n", n_shown, n_seen);
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

/* ---- the drawer --------------------------------------------------------- */

static void say(int fd, const char *msg) {
    ssize_t r = write(fd, msg, strlen(msg));
    (void)r;
}

/* In the forked drawer: only async-signal-safe calls, then _exit. */
static void drawer(const char *dir, const char *tmp, char *const argv[]) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    setpgid(0, 0);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++) sigaction(s, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (chdir(dir) != 0) _exit(DRAW_EXIT_CHDIR);
    int in = open("/dev/null", O_RDONLY);
    int out = open(CURVE_LOG, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (out < 0) out = open("/dev/null", O_WRONLY);
    if (in >= 0) dup2(in, 0);
    if (out >= 0) {
        dup2(out, 1);
        dup2(out, 2);
    }
    close_range(3, ~0U, 0);
    unlink(tmp);
    pid_t g = _Fork();
    if (g < 0) _exit(DRAW_EXIT_FORK);
    if (g == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(argv[0], argv);
        say(2, "fleet curve: cannot run gnuplot\n");
        _exit(DRAW_EXIT_EXEC);
    }
    int st;
    while (waitpid(g, &st, 0) < 0)
        if (errno != EINTR) _exit(DRAW_EXIT_FORK);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        unlink(tmp);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WTERMSIG(st) & 127));
    }
    struct stat ps;
    if (stat(tmp, &ps) != 0 || ps.st_size == 0 || rename(tmp, CURVE_PNG) != 0) {
        say(2, "fleet curve: gnuplot wrote no picture\n");
        unlink(tmp);
        _exit(DRAW_EXIT_RESULT);
    }
    _exit(0);
}

/* Starts a drawing of what was read so far; 0, or -1 (logged once). */
static int start_drawing(fl_curve_t *c) {
    if (write_script(c) != 0) {
        if (!c->warned) FL_WARN("curve: cannot write %s: %s (no curve.png)", c->gp_path, strerror(errno));
        c->warned = 1;
        return -1;
    }
    if (stat(c->png_path, &c->png_before) != 0) memset(&c->png_before, 0, sizeof c->png_before);
    char *argv[] = {c->gnuplot, "-e", c->out_arg, CURVE_GP, NULL};
    pid_t pid = _Fork();
    if (pid < 0) {
        if (!c->warned) FL_WARN("curve: cannot start gnuplot: %s", strerror(errno));
        c->warned = 1;
        return -1;
    }
    if (pid == 0) drawer(c->dir, c->tmp_name, argv);
    setpgid(pid, pid); /* also here, so that a kill of the group right away reaches it */
    c->pid = pid;
    return 0;
}

/* The drawer's result: 0 when curve.png was written, else -1 (logged once). */
static int drawing_result(fl_curve_t *c, int status) {
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (c->warned) return -1;
    c->warned = 1;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == DRAW_EXIT_CHDIR) {
        FL_WARN("curve: cannot enter %s: no curve.png", c->dir);
    } else if (code == DRAW_EXIT_FORK || code == DRAW_EXIT_EXEC) {
        FL_WARN("curve: cannot run %s: no curve.png", c->gnuplot);
    } else if (code == DRAW_EXIT_RESULT) {
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
            FL_WARN("curve: gnuplot %s: %s not updated (`gnuplot " CURVE_GP "` in %s shows why)", what,
                    c->png_path, c->dir);
    }
    return -1;
}

/* Someone else reaped the drawer (a waitpid(-1) elsewhere): curve.png tells whether it
 * was replaced. */
static int inferred_result(fl_curve_t *c) {
    struct stat now;
    if (stat(c->png_path, &now) != 0) return -1;
    int replaced = now.st_ino != c->png_before.st_ino || now.st_dev != c->png_before.st_dev ||
                   now.st_mtim.tv_sec != c->png_before.st_mtim.tv_sec ||
                   now.st_mtim.tv_nsec != c->png_before.st_mtim.tv_nsec;
    return replaced ? 0 : -1;
}

/* Checks the drawer without waiting: 1 still running, 0 it ended well, -1 it failed. */
static int poll_drawer(fl_curve_t *c) {
    int status;
    pid_t r = waitpid(c->pid, &status, WNOHANG);
    if (r == 0) return 1;
    c->pid = 0;
    if (r < 0) return inferred_result(c);
    return drawing_result(c, status);
}

/* Kills the drawer's process group and reaps it. */
static void kill_drawer(fl_curve_t *c) {
    if (c->pid <= 0) return;
    if (kill(-c->pid, SIGKILL) != 0) kill(c->pid, SIGKILL);
    int status;
    while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR) {
    }
    c->pid = 0;
    unlink(c->tmp_path);
}

/* Waits until the monotonic deadline for the drawer: 0 it ended well, -1 it failed or
 * time ran out (then it is killed). */
static int wait_drawer(fl_curve_t *c, double deadline) {
    for (;;) {
        int r = poll_drawer(c);
        if (r != 1) return r;
        if (fl_clock_sec() >= deadline) {
            FL_WARN("curve: gnuplot did not finish in time: killed it (no new curve.png)");
            kill_drawer(c);
            return -1;
        }
        fl_sleep_sec(0.01);
    }
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
    snprintf(c->tmp_name, sizeof c->tmp_name, ".curve-%d-%d.png.tmp", (int)getpid(), id);
    snprintf(c->out_arg, sizeof c->out_arg, "out='%s'", c->tmp_name);
    snprintf(c->gp_tmp, sizeof c->gp_tmp, "%s/.curve-%d-%d.gp.tmp", c->dir, (int)getpid(), id);
    snprintf(c->png_path, sizeof c->png_path, "%s/" CURVE_PNG, c->dir);
    snprintf(c->tmp_path, sizeof c->tmp_path, "%s/%s", c->dir, c->tmp_name);
    snprintf(c->evals.path, sizeof c->evals.path, "%s/evals.csv", c->dir);
    snprintf(c->returns.path, sizeof c->returns.path, "%s/returns.csv", c->dir);
    scan_reset(&c->evals);
    scan_reset(&c->returns);
    if (fl_proc_find_on_path("gnuplot", c->gnuplot, sizeof c->gnuplot) != 0) {
        c->gnuplot[0] = '\0';
        FL_INFO("curve: no gnuplot on PATH, so no %s (install gnuplot-nox on Debian)", c->png_path);
    }
    return c;
}

int fl_curve_available(const fl_curve_t *c) {
    return c && c->gnuplot[0] != '\0';
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
    if (c->pid > 0 && poll_drawer(c) == 1) return;
    if (!has_rows(c)) return;
    start_drawing(c);
}

int fl_curve_finish(fl_curve_t *c, double timeout_s) {
    if (!fl_curve_available(c)) return -1;
    double deadline = fl_clock_sec() + (timeout_s > 0 ? timeout_s : 0);
    if (c->pid > 0) {
        wait_drawer(c, deadline);
        if (fl_clock_sec() >= deadline) return -1;
    }
    if (!has_rows(c)) return -1;
    if (start_drawing(c) != 0) return -1;
    return wait_drawer(c, deadline);
}

void fl_curve_destroy(fl_curve_t *c) {
    if (!c) return;
    kill_drawer(c);
    free(c->actors);
    free(c);
}
