/* `fleet env play` and `fleet env record`: looking at an environment.
 *
 * Both run one instance of a built-in or plugin env (seeded like env 0 of a run with
 * --seed) and draw it with the env's render function.
 *
 * play is turn-based: every key press is one step. Keys find actions by their names
 * (fl_env_def_t.action_name): the arrows, WASD and hjkl move (left/right/up/down), space
 * fires, '.' or Enter is noop, and a digit picks an action by index; r resets, q quits.
 * The frame is drawn with 24-bit-colour half blocks (two pixel rows per text row) when
 * stdout is a terminal, else (or with --plain) as characters by brightness. When stdin is
 * not a terminal its bytes are the keys, so a session can be scripted:
 *     printf 'aaad q' | fleet env play minatar-breakout --plain
 *
 * record writes an episode (random actions) as an animated GIF, or, for a .png path, a
 * strip of frames evenly spaced over the episode. The strip is made in two passes: the
 * first runs the episode to learn its length, the second replays the same seeds and
 * actions and keeps the chosen frames, so memory stays at a few frames. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "common/image.h"
#include "common/rng.h"
#include "envs/plugin.h"
#include "envs/registry.h"
#include "cli/verbs.h"

#define ACTION_RNG_STREAM (1u << 20)

typedef struct show_opts {
    const char *name, *plugin, *out;
    uint64_t seed;
    fl_env_options_t env;
    int plain, width;                  /* play */
    int64_t max_steps;                 /* record: frames of a GIF / steps of an episode */
    int frames, columns, scale, delay; /* record */
} show_opts_t;

/* One instance with its generator, and an action generator for random play. */
typedef struct instance {
    const fl_env_def_t *def;
    void *state, *obs;
    uint8_t *rgb;
    fl_rng_t rng, act_rng;
    int64_t steps;
    double ret;
} instance_t;

static void instance_free(instance_t *in) {
    free(in->state);
    free(in->obs);
    free(in->rgb);
    memset(in, 0, sizeof *in);
}

static fl_status instance_open(instance_t *in, const fl_env_def_t *def, const show_opts_t *o, fl_err_t *err) {
    memset(in, 0, sizeof *in);
    in->def = def;
    if (!def->render)
        return fl_err_set(err, FL_FAILED_PRECONDITION, "env '%s' has no render function, so it cannot be shown",
                          def->name);
    in->state = calloc(1, def->state_size ? def->state_size : 1);
    in->obs = malloc(fl_env_obs_size(def));
    in->rgb = malloc((size_t)def->render_width * (size_t)def->render_height * 3);
    if (!in->state || !in->obs || !in->rgb) {
        instance_free(in);
        return fl_err_set(err, FL_NO_MEMORY, "env '%s': out of memory", def->name);
    }
    fl_status st = fl_env_configure(def, in->state, &o->env, 0, err);
    if (st != FL_OK) {
        instance_free(in);
        return st;
    }
    fl_rng_init_stream(&in->rng, o->seed, 0);
    fl_rng_init_stream(&in->act_rng, o->seed, ACTION_RNG_STREAM);
    return FL_OK;
}

static void instance_reset(instance_t *in) {
    in->def->reset(in->state, &in->rng, in->obs);
    in->steps = 0;
    in->ret = 0;
}

/* Steps once; returns 1 when the episode ended (terminated or hit the step limit). */
static int instance_step(instance_t *in, int action, float *reward, int *terminated) {
    in->def->step(in->state, &in->rng, action, in->obs, reward, terminated);
    in->steps++;
    in->ret += *reward;
    int limit = in->def->max_episode_steps;
    return *terminated || (limit > 0 && in->steps >= limit);
}

static void render(instance_t *in) {
    in->def->render(in->state, in->rgb);
}

/* ---- Options ----------------------------------------------------------------------- */

int fl_env_opt_int(const char *verb, const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "fleet env %s: %s expects an integer in [%lld, %lld], got '%s'\n", verb, opt, (long long)lo,
                (long long)hi, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

/* Parses the options shared by play and record and the verb's own; returns 0, or 2 after
 * printing what was wrong. */
static int parse_opts(const char *verb, int argc, char **argv, show_opts_t *o) {
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n = 0;
        int is_play = strcmp(verb, "play") == 0;
        if (a[0] != '-') {
            if (o->name) {
                fprintf(stderr, "fleet env %s: one env name expected, got '%s' and '%s'\n", verb, o->name, a);
                return 2;
            }
            o->name = a;
            continue;
        }
        if (strcmp(a, "--plain") == 0 && is_play) {
            o->plain = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "fleet env %s: %s needs a value\n", verb, a);
            return 2;
        }
        i++;
        if (strcmp(a, "--plugin") == 0) {
            o->plugin = v;
        } else if (strcmp(a, "--args") == 0) {
            o->env.args = v;
        } else if (strcmp(a, "--seed") == 0) {
            if (fl_env_opt_int(verb, a, v, 0, INT64_MAX, &n)) return 2;
            o->seed = (uint64_t)n;
        } else if (strcmp(a, "--sticky") == 0) {
            char *end = NULL;
            double p = strtod(v, &end);
            if (end == v || *end || !(p >= 0 && p <= 1)) {
                fprintf(stderr, "fleet env %s: --sticky expects a probability in [0, 1], got '%s'\n", verb, v);
                return 2;
            }
            o->env.sticky_prob = (float)p;
        } else if (strcmp(a, "--ramping") == 0) {
            if (fl_env_opt_int(verb, a, v, 0, 1, &n)) return 2;
            o->env.difficulty_ramping = (int)n;
        } else if (strcmp(a, "--rng") == 0) {
            if (strcmp(v, "fleet") != 0 && strcmp(v, "reference") != 0) {
                fprintf(stderr, "fleet env %s: --rng expects 'fleet' or 'reference', got '%s'\n", verb, v);
                return 2;
            }
            o->env.reference_rng = strcmp(v, "reference") == 0;
        } else if (strcmp(a, "--width") == 0 && is_play) {
            if (fl_env_opt_int(verb, a, v, 8, 1000, &n)) return 2;
            o->width = (int)n;
        } else if (strcmp(a, "--out") == 0 && !is_play) {
            o->out = v;
        } else if (strcmp(a, "--steps") == 0 && !is_play) {
            if (fl_env_opt_int(verb, a, v, 1, 1000000, &n)) return 2;
            o->max_steps = n;
        } else if (strcmp(a, "--frames") == 0 && !is_play) {
            if (fl_env_opt_int(verb, a, v, 1, 256, &n)) return 2;
            o->frames = (int)n;
        } else if (strcmp(a, "--columns") == 0 && !is_play) {
            if (fl_env_opt_int(verb, a, v, 1, 64, &n)) return 2;
            o->columns = (int)n;
        } else if (strcmp(a, "--scale") == 0 && !is_play) {
            if (fl_env_opt_int(verb, a, v, 1, 8, &n)) return 2;
            o->scale = (int)n;
        } else if (strcmp(a, "--delay") == 0 && !is_play) {
            if (fl_env_opt_int(verb, a, v, 0, 1000, &n)) return 2;
            o->delay = (int)n;
        } else {
            fprintf(stderr, "fleet env %s: unknown option '%s' (see `fleet help env`)\n", verb, a);
            return 2;
        }
    }
    if (!o->name) {
        fprintf(stderr, "fleet env %s: missing env name (see `fleet env list`)\n", verb);
        return 2;
    }
    return 0;
}

static fl_status resolve(const show_opts_t *o, const fl_env_def_t **def, fl_err_t *err) {
    return fl_env_resolve(o->plugin && *o->plugin ? o->plugin : NULL, o->name, def, err);
}

/* ---- Terminal drawing ---------------------------------------------------------------- */

/* Mean colour of the pixels in [x0, x1) x [y0, y1) (clipped; black when empty). */
static void box_mean(const uint8_t *rgb, int w, int h, double x0, double y0, double x1, double y1, int out[3]) {
    int xa = (int)floor(x0), xb = (int)ceil(x1), ya = (int)floor(y0), yb = (int)ceil(y1);
    if (xb <= xa) xb = xa + 1;
    if (yb <= ya) yb = ya + 1;
    if (xa < 0) xa = 0;
    if (ya < 0) ya = 0;
    if (xb > w) xb = w;
    if (yb > h) yb = h;
    long s[3] = {0, 0, 0}, n = 0;
    for (int y = ya; y < yb; y++)
        for (int x = xa; x < xb; x++, n++)
            for (int k = 0; k < 3; k++) s[k] += rgb[((size_t)y * (size_t)w + (size_t)x) * 3 + (size_t)k];
    for (int k = 0; k < 3; k++) out[k] = n ? (int)(s[k] / n) : 0;
}

/* Draws the image `cols` characters wide; a character covers px x 2px pixels. */
static void draw_frame(FILE *f, const uint8_t *rgb, int w, int h, int cols, int plain) {
    double px = (double)w / cols;
    int rows = (int)ceil(h / (2 * px));
    double mean_lum = 0;
    if (plain) {
        int m[3];
        box_mean(rgb, w, h, 0, 0, w, h, m);
        mean_lum = 0.299 * m[0] + 0.587 * m[1] + 0.114 * m[2];
    }
    static const char ramp[] = " .:-=+*#%@";
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) {
            int top[3], bot[3];
            box_mean(rgb, w, h, c * px, 2 * r * px, (c + 1) * px, (2 * r + 1) * px, top);
            box_mean(rgb, w, h, c * px, (2 * r + 1) * px, (c + 1) * px, (2 * r + 2) * px, bot);
            if (plain) {
                double lum = (0.299 * (top[0] + bot[0]) + 0.587 * (top[1] + bot[1]) + 0.114 * (top[2] + bot[2])) / 2;
                /* Light backgrounds: ink is what is darker than the page. */
                double ink = mean_lum > 127 ? 255 - lum : lum;
                int k = (int)(ink * (sizeof ramp - 1) / 256.0);
                fputc(ramp[k < 0 ? 0 : k > 9 ? 9 : k], f);
            } else {
                fprintf(f, "\x1b[38;2;%d;%d;%dm\x1b[48;2;%d;%d;%dm\xe2\x96\x80", top[0], top[1], top[2], bot[0], bot[1],
                        bot[2]);
            }
        }
        fputs(plain ? "\n" : "\x1b[0m\n", f);
    }
}

/* ---- play -------------------------------------------------------------------------- */

static struct termios g_saved_tio;
static int g_raw;

static void restore_terminal(void) {
    if (g_raw) {
        tcsetattr(STDIN_FILENO, TCSANOW, &g_saved_tio);
        g_raw = 0;
    }
}

static void on_signal(int sig) {
    restore_terminal();
    signal(sig, SIG_DFL);
    raise(sig);
}

enum { KEY_QUIT = -1, KEY_RESET = -2, KEY_NONE = -3, KEY_EOF = -4 };

/* Reads one key; arrows come as ESC [ A..D. Returns a byte, an arrow as 'A'..'D' + 256,
 * or KEY_EOF. */
static int read_key(void) {
    unsigned char ch;
    if (read(STDIN_FILENO, &ch, 1) != 1) return KEY_EOF;
    if (ch != 0x1b) return ch;
    unsigned char seq[2];
    if (read(STDIN_FILENO, &seq[0], 1) != 1 || seq[0] != '[') return 0x1b;
    if (read(STDIN_FILENO, &seq[1], 1) != 1) return 0x1b;
    return 256 + seq[1];
}

static int find_action(const fl_env_def_t *def, const char *name) {
    if (!def->action_name) return KEY_NONE;
    for (int a = 0; a < def->num_actions; a++)
        if (strcmp(def->action_name(a), name) == 0) return a;
    return KEY_NONE;
}

/* The action a key stands for, or KEY_QUIT / KEY_RESET / KEY_NONE. */
static int key_action(const fl_env_def_t *def, int key) {
    if (key == 'q' || key == 'Q' || key == 3 /* ctrl-c in raw mode */) return KEY_QUIT;
    if (key == 'r' || key == 'R') return KEY_RESET;
    if (key >= '0' && key <= '9') return key - '0' < def->num_actions ? key - '0' : KEY_NONE;
    switch (key) {
    case 256 + 'D': case 'a': case 'h': return find_action(def, "left");
    case 256 + 'C': case 'd': case 'l': return find_action(def, "right");
    case 256 + 'A': case 'w': case 'k': return find_action(def, "up");
    case 256 + 'B': case 's': case 'j': return find_action(def, "down");
    case ' ': return find_action(def, "fire");
    case '.': case '\n': case '\r': return find_action(def, "noop");
    default: return KEY_NONE;
    }
}

static void print_keys(FILE *f, const fl_env_def_t *def) {
    fprintf(f, "actions:");
    for (int a = 0; a < def->num_actions; a++)
        fprintf(f, " %d=%s", a, def->action_name ? def->action_name(a) : "?");
    fprintf(f, "\nkeys: digits pick an action; arrows/wasd move, space fires, '.' or Enter noop; r reset, q quit\n");
}

static int env_play(int argc, char **argv) {
    show_opts_t o = {.seed = 1, .env = {.sticky_prob = 0.0f, .difficulty_ramping = 1, .args = ""}};
    int rc = parse_opts("play", argc, argv, &o);
    if (rc) return rc;
    fl_err_t err;
    fl_err_init(&err);
    const fl_env_def_t *def = NULL;
    instance_t in;
    if (resolve(&o, &def, &err) != FL_OK || instance_open(&in, def, &o, &err) != FL_OK) {
        fprintf(stderr, "fleet env play: %s\n", err.msg);
        return 1;
    }
    int tty_in = isatty(STDIN_FILENO), tty_out = isatty(STDOUT_FILENO);
    int plain = o.plain || !tty_out;
    int cols = o.width;
    if (!cols) {
        struct winsize ws;
        int have = tty_out && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 8;
        cols = have ? ws.ws_col - 1 : 40;
        /* Fit the height too: the picture takes h * cols / (2 w) rows, plus 4 of text. */
        if (have && ws.ws_row > 12) {
            int fit = (int)((double)(ws.ws_row - 4) * 2 * def->render_width / def->render_height);
            if (cols > fit) cols = fit;
        }
        if (cols > def->render_width) cols = def->render_width;
        if (cols > 80) cols = 80;
    }
    if (tty_in) {
        struct termios raw;
        tcgetattr(STDIN_FILENO, &g_saved_tio);
        raw = g_saved_tio;
        raw.c_lflag &= (tcflag_t) ~(ICANON | ECHO | ISIG);
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        tcsetattr(STDIN_FILENO, TCSANOW, &raw);
        g_raw = 1;
        atexit(restore_terminal);
        signal(SIGTERM, on_signal);
        signal(SIGHUP, on_signal);
    }
    instance_reset(&in);
    int episodes = 1, over = 0;
    float reward = 0;
    const char *ended = "";
    for (;;) {
        render(&in);
        if (!plain) fputs("\x1b[H\x1b[2J", stdout);
        printf("%s  episode %d  step %lld  reward %g  return %g%s\n", def->name, episodes, (long long)in.steps,
               (double)reward, in.ret, ended);
        draw_frame(stdout, in.rgb, def->render_width, def->render_height, cols, plain);
        print_keys(stdout, def);
        fflush(stdout);
        int key, action;
        do {
            key = read_key();
            action = key == KEY_EOF ? KEY_QUIT : key_action(def, key);
        } while (action == KEY_NONE);
        if (action == KEY_QUIT) break;
        if (action == KEY_RESET || over) {
            if (over) episodes++;
            instance_reset(&in);
            over = 0;
            reward = 0;
            ended = "";
            continue;
        }
        int term = 0;
        over = instance_step(&in, action, &reward, &term);
        if (over) ended = term ? "  [terminated: any action key starts a new episode]"
                               : "  [truncated: any action key starts a new episode]";
    }
    restore_terminal();
    printf("played %d episode(s); last return %g after %lld steps\n", episodes, in.ret, (long long)in.steps);
    instance_free(&in);
    return 0;
}

/* ---- record ------------------------------------------------------------------------ */

/* Copies rgb (w, h) scaled up by an integer factor into out. */
static void upscale(const uint8_t *rgb, int w, int h, int k, uint8_t *out) {
    for (int y = 0; y < h * k; y++)
        for (int x = 0; x < w * k; x++)
            memcpy(out + ((size_t)y * (size_t)(w * k) + (size_t)x) * 3, rgb + ((size_t)(y / k) * (size_t)w + (size_t)(x / k)) * 3, 3);
}

/* Runs one episode of random actions from a fresh instance (same seeds every call),
 * calling keep(step) for every frame (step 0 is the reset); stops after max_steps. */
typedef int (*keep_fn)(void *ctx, instance_t *in, int64_t step);

static fl_status run_episode(const fl_env_def_t *def, const show_opts_t *o, keep_fn keep, void *ctx, int64_t *len,
                             double *ret, fl_err_t *err) {
    instance_t in;
    FL_TRY(instance_open(&in, def, o, err));
    instance_reset(&in);
    fl_status st = FL_OK;
    if (keep && keep(ctx, &in, 0) != 0) st = FL_IO_ERROR;
    while (st == FL_OK && in.steps < o->max_steps) {
        float r;
        int term;
        int a = (int)fl_rng_below(&in.act_rng, (uint64_t)def->num_actions);
        int over = instance_step(&in, a, &r, &term);
        if (keep && keep(ctx, &in, in.steps) != 0) st = FL_IO_ERROR;
        if (over) break;
    }
    *len = in.steps;
    *ret = in.ret;
    instance_free(&in);
    return st;
}

typedef struct record_ctx {
    fl_gif_t *gif;
    fl_err_t *err;
    int scale;
    uint8_t *scaled;
    /* strip */
    const int64_t *pick;
    int npick, have;
    uint8_t **frames;
} record_ctx_t;

static int keep_gif(void *p, instance_t *in, int64_t step) {
    (void)step;
    record_ctx_t *c = p;
    render(in);
    const uint8_t *img = in->rgb;
    if (c->scale > 1) {
        upscale(in->rgb, in->def->render_width, in->def->render_height, c->scale, c->scaled);
        img = c->scaled;
    }
    return fl_gif_add(c->gif, img, c->err) != FL_OK;
}

static int keep_strip(void *p, instance_t *in, int64_t step) {
    record_ctx_t *c = p;
    while (c->have < c->npick && c->pick[c->have] == step) {
        render(in);
        if (c->scale > 1)
            upscale(in->rgb, in->def->render_width, in->def->render_height, c->scale, c->frames[c->have]);
        else
            memcpy(c->frames[c->have], in->rgb, (size_t)in->def->render_width * (size_t)in->def->render_height * 3);
        c->have++;
    }
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

static int env_record(int argc, char **argv) {
    show_opts_t o = {.seed = 1,
                     .env = {.sticky_prob = 0.1f, .difficulty_ramping = 1, .args = ""},
                     .max_steps = 1000,
                     .frames = 16,
                     .columns = 8,
                     .scale = 1,
                     .delay = 8};
    int rc = parse_opts("record", argc, argv, &o);
    if (rc) return rc;
    if (!o.out) {
        fprintf(stderr, "fleet env record: missing --out FILE (.gif for an animation, .png for a strip)\n");
        return 2;
    }
    int gif = ends_with(o.out, ".gif");
    if (!gif && !ends_with(o.out, ".png")) {
        fprintf(stderr, "fleet env record: --out '%s' must end in .gif (animation) or .png (strip of frames)\n",
                o.out);
        return 2;
    }
    fl_err_t err;
    fl_err_init(&err);
    const fl_env_def_t *def = NULL;
    if (resolve(&o, &def, &err) != FL_OK) {
        fprintf(stderr, "fleet env record: %s\n", err.msg);
        return 1;
    }
    if (!def->render) {
        fprintf(stderr, "fleet env record: env '%s' has no render function, so it cannot be recorded\n", def->name);
        return 1;
    }
    int w = def->render_width * o.scale, h = def->render_height * o.scale;
    record_ctx_t ctx = {.err = &err, .scale = o.scale};
    int64_t len = 0;
    double ret = 0;
    fl_status st = FL_OK;
    int nframes = 0;
    if (gif) {
        ctx.scaled = malloc((size_t)w * (size_t)h * 3);
        st = ctx.scaled ? fl_gif_open(&ctx.gif, o.out, w, h, o.delay, &err)
                        : fl_err_set(&err, FL_NO_MEMORY, "out of memory");
        if (st == FL_OK) st = run_episode(def, &o, keep_gif, &ctx, &len, &ret, &err);
        nframes = fl_gif_frames(ctx.gif);
        fl_status cst = fl_gif_close(ctx.gif, &err);
        if (st == FL_OK) st = cst;
        free(ctx.scaled);
    } else {
        /* Pass 1: the episode's length. Pass 2: the same episode, keeping evenly spaced
         * frames from the reset to the last step. */
        st = run_episode(def, &o, NULL, NULL, &len, &ret, &err);
        int64_t pick[256];
        int n = (int64_t)o.frames < len + 1 ? o.frames : (int)(len + 1);
        for (int i = 0; i < n; i++) pick[i] = n == 1 ? 0 : (int64_t)((double)i * (double)len / (n - 1) + 0.5);
        uint8_t *frames[256] = {0};
        for (int i = 0; i < n && st == FL_OK; i++)
            if (!(frames[i] = malloc((size_t)w * (size_t)h * 3))) st = fl_err_set(&err, FL_NO_MEMORY, "out of memory");
        ctx.pick = pick;
        ctx.npick = n;
        ctx.frames = frames;
        int64_t len2 = 0;
        double ret2 = 0;
        if (st == FL_OK) st = run_episode(def, &o, keep_strip, &ctx, &len2, &ret2, &err);
        if (st == FL_OK && (len2 != len || ctx.have != n))
            st = fl_err_set(&err, FL_INTERNAL,
                            "env '%s' is not deterministic: replaying the same seeds gave %lld steps, then %lld",
                            def->name, (long long)len, (long long)len2);
        if (st == FL_OK) {
            static const uint8_t gap[3] = {255, 255, 255};
            int sw = 0, sh = 0;
            uint8_t *strip = fl_image_tile((const uint8_t *const *)frames, n, w, h, o.columns, 4, gap, &sw, &sh);
            st = strip ? fl_png_write(o.out, strip, sw, sh, &err) : fl_err_set(&err, FL_NO_MEMORY, "out of memory");
            free(strip);
        }
        for (int i = 0; i < n; i++) free(frames[i]);
        nframes = n;
    }
    if (st != FL_OK) {
        fprintf(stderr, "fleet env record: %s\n", err.msg);
        return 1;
    }
    printf("recorded %s: %lld steps, return %g, %d frames (%d x %d) -> %s\n", def->name, (long long)len, ret, nframes,
           w, h, o.out);
    return 0;
}

int fl_env_show(int argc, char **argv) {
    if (strcmp(argv[1], "play") == 0) return env_play(argc, argv);
    return env_record(argc, argv);
}
