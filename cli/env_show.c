/* `fleet env play` and `fleet env record`: looking at an environment.
 *
 * Both run one instance of a built-in or plugin env (seeded like env 0 of a run with
 * --seed) and draw it with the env's render function; play shows the observation as
 * text instead for an env without one (numbers, or a character a cell: print_obs).
 *
 * play is turn-based: every key press is one step. Keys find actions by their names
 * (fl_env_def_t.action_name): the arrows, WASD and hjkl move (left/right/up/down), space
 * fires, '.' or Enter is noop, and a digit picks an action by index; r resets, q quits.
 * The frame is drawn with 24-bit-colour half blocks (two pixel rows per text row) when
 * stdout is a terminal, else (or with --plain) as characters by brightness. When stdin is
 * not a terminal its bytes are the keys, so a session can be scripted:
 *     printf 'aaad q' | fleet env play minatar-breakout --plain
 *
 * record writes an episode through the recorder (cli/recorder.h, the same path as `fleet
 * eval --record`): an animated GIF, an MP4 video (with ffmpeg) or, for a .png path, a strip
 * of frames evenly spaced over the episode, made in two passes that play the same
 * seeds, so memory stays at a few frames. The episode is random actions, or with
 * --checkpoint RUN_DIR|FILE the trained agent's (cli/agent.h: the run's config, with
 * --config, --set and the env options given here as overrides; greedy unless --epsilon),
 * seeded with --seed (default run.seed) as `fleet eval` seeds its episode 0.
 * Exit codes: 0; 1 for runtime failures (recording an env that cannot render, a failed
 * recording, MP4 without ffmpeg); 2 for usage and configuration errors.
 *
 * The env options these verbs share with `fleet env check` (--plugin, --args, --seed,
 * --sticky, --ramping, --rng) are parsed here, by fl_env_cli_opt (cli/verbs.h). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "common/config.h"
#include "common/obs.h"
#include "common/rng.h"
#include "envs/factory.h"
#include "envs/registry.h"
#include "cli/agent.h"
#include "cli/recorder.h"
#include "cli/verbs.h"

#define ACTION_RNG_STREAM (1u << 20)

#define MAX_SETS 64

typedef struct show_opts {
    const char *name, *out;
    fl_env_cli_opts_t e;               /* --plugin, --seed and the env's options */
    int plain, width;                  /* play */
    int64_t max_steps;                 /* record: steps of an episode */
    int frames, columns, scale, delay; /* record */
    /* record --checkpoint: the agent's run, its config and overrides (--set, and the
     * env options given, as env.* keys) */
    const char *checkpoint, *config;
    double epsilon;
    int epsilon_given;
    const char *sets[MAX_SETS];
    char env_sets[5][300];
    int nsets, user_sets;
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
    fl_env_close(in->def, in->state);
    free(in->state);
    free(in->obs);
    free(in->rgb);
    memset(in, 0, sizeof *in);
}

static fl_status instance_open(instance_t *in, const fl_env_def_t *def, const show_opts_t *o, fl_err_t *err) {
    memset(in, 0, sizeof *in);
    in->def = def;
    in->state = calloc(1, def->state_size ? def->state_size : 1);
    in->obs = malloc(fl_env_obs_size(def));
    if (def->render) in->rgb = malloc((size_t)def->render_width * (size_t)def->render_height * 3);
    if (!in->state || !in->obs || (def->render && !in->rgb)) {
        instance_free(in);
        return fl_err_set(err, FL_NO_MEMORY, "env '%s': out of memory", def->name);
    }
    fl_status st = fl_env_configure(def, in->state, &o->e.env, 0, err);
    if (st != FL_OK) {
        instance_free(in);
        return st;
    }
    fl_rng_init_stream(&in->rng, o->e.seed, 0);
    fl_rng_init_stream(&in->act_rng, o->e.seed, ACTION_RNG_STREAM);
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

/* Adds one override "section.key=value" for the agent's config; returns 0 or 2. */
static int add_set(show_opts_t *o, const char *kv) {
    if (o->nsets >= MAX_SETS) {
        fprintf(stderr, "fleet env record: more than %d overrides\n", MAX_SETS);
        return 2;
    }
    o->sets[o->nsets++] = kv;
    return 0;
}

/* An env option given on the command line, also as the env.* key that overrides the
 * agent's config with it. Returns 0, or 2 after printing what was wrong. */
static int env_set(show_opts_t *o, int slot, const char *key, const char *v) {
    snprintf(o->env_sets[slot], sizeof o->env_sets[slot], "%s=%s", key, v);
    return add_set(o, o->env_sets[slot]);
}

int fl_env_cli_opt(const char *verb, const char *a, const char *v, fl_env_cli_opts_t *o, const char **key) {
    int64_t n = 0;
    const char *k = NULL;
    if (strcmp(a, "--plugin") == 0) {
        o->plugin = v;
        k = "env.plugin";
    } else if (strcmp(a, "--args") == 0) {
        o->env.args = v;
        k = "env.args";
    } else if (strcmp(a, "--seed") == 0) {
        if (fl_env_opt_int(verb, a, v, 0, INT64_MAX, &n)) return 2;
        o->seed = (uint64_t)n;
        o->seed_given = 1;
    } else if (strcmp(a, "--sticky") == 0) {
        char *end = NULL;
        double p = strtod(v, &end);
        if (end == v || *end || !(p >= 0 && p <= 1)) {
            fprintf(stderr, "fleet env %s: --sticky expects a probability in [0, 1], got '%s'\n", verb, v);
            return 2;
        }
        o->env.sticky_prob = (float)p;
        k = "env.sticky_actions";
    } else if (strcmp(a, "--ramping") == 0) {
        if (fl_env_opt_int(verb, a, v, 0, 1, &n)) return 2;
        o->env.difficulty_ramping = (int)n;
        k = "env.difficulty_ramping";
    } else if (strcmp(a, "--rng") == 0) {
        if (strcmp(v, "fleet") != 0 && strcmp(v, "reference") != 0) {
            fprintf(stderr, "fleet env %s: --rng expects 'fleet' or 'reference', got '%s'\n", verb, v);
            return 2;
        }
        o->env.reference_rng = strcmp(v, "reference") == 0;
        k = "env.rng";
    } else {
        return 1;
    }
    if (key) *key = k;
    return 0;
}

fl_status fl_env_cli_resolve(const fl_env_cli_opts_t *o, const char *name, const fl_env_def_t **def, fl_err_t *err) {
    const char *plugin = o->plugin && *o->plugin ? o->plugin : NULL;
    if (!plugin && (!name || !*name)) {
        *def = NULL;
        return fl_err_set(err, FL_INVALID_ARGUMENT, "missing env name (see `fleet env list`)");
    }
    return fl_env_resolve(plugin, name, def, err);
}

/* The env options of play and record (a with value v): 0 taken, 1 not one of them, 2
 * after printing what was wrong. Each but --seed is also the env.* key that overrides
 * the agent's config with it (record --checkpoint). */
static int parse_env_opt(const char *verb, const char *a, const char *v, show_opts_t *o) {
    static const char *const keys[5] = {"env.plugin", "env.args", "env.sticky_actions", "env.difficulty_ramping",
                                        "env.rng"};
    const char *key = NULL;
    int rc = fl_env_cli_opt(verb, a, v, &o->e, &key);
    if (rc || !key) return rc;
    for (int slot = 0; slot < 5; slot++)
        if (strcmp(key, keys[slot]) == 0) return env_set(o, slot, key, v);
    return 0;
}

/* record's own options: 0 taken, 1 not one of them, 2 after printing what was wrong. */
static int parse_record_opt(const char *a, const char *v, show_opts_t *o) {
    int64_t n = 0;
    const char *verb = "record";
    if (strcmp(a, "--out") == 0) {
        o->out = v;
    } else if (strcmp(a, "--checkpoint") == 0) {
        o->checkpoint = v;
    } else if (strcmp(a, "--config") == 0) {
        o->config = v;
    } else if (strcmp(a, "--set") == 0) {
        o->user_sets++;
        return add_set(o, v);
    } else if (strcmp(a, "--epsilon") == 0) {
        char *end = NULL;
        o->epsilon = strtod(v, &end);
        if (end == v || *end || !(o->epsilon >= 0 && o->epsilon <= 1)) {
            fprintf(stderr, "fleet env record: --epsilon expects a probability in [0, 1], got '%s'\n", v);
            return 2;
        }
        o->epsilon_given = 1;
    } else if (strcmp(a, "--steps") == 0) {
        if (fl_env_opt_int(verb, a, v, 1, 1000000, &n)) return 2;
        o->max_steps = n;
    } else if (strcmp(a, "--frames") == 0) {
        if (fl_env_opt_int(verb, a, v, 1, FL_RECORD_MAX_STRIP, &n)) return 2;
        o->frames = (int)n;
    } else if (strcmp(a, "--columns") == 0) {
        if (fl_env_opt_int(verb, a, v, 1, 64, &n)) return 2;
        o->columns = (int)n;
    } else if (strcmp(a, "--scale") == 0) {
        if (fl_env_opt_int(verb, a, v, 1, 8, &n)) return 2;
        o->scale = (int)n;
    } else if (strcmp(a, "--delay") == 0) {
        if (fl_env_opt_int(verb, a, v, 0, 1000, &n)) return 2;
        o->delay = (int)n;
    } else {
        return 1;
    }
    return 0;
}

/* Checks what goes together: --config, --set and --epsilon need --checkpoint, and an env
 * name is needed without it (with it, the run's env.name). Returns 0 or 2. */
static int check_combination(const char *verb, const show_opts_t *o) {
    if (!o->checkpoint && (o->config || o->epsilon_given || o->user_sets)) {
        fprintf(stderr, "fleet env %s: --config, --set and --epsilon go with --checkpoint RUN_DIR|FILE\n", verb);
        return 2;
    }
    if (!o->name && !o->checkpoint) {
        fprintf(stderr, "fleet env %s: missing env name (see `fleet env list`)\n", verb);
        return 2;
    }
    return 0;
}

/* Parses the options shared by play and record and the verb's own; returns 0, or 2 after
 * printing what was wrong. */
static int parse_opts(const char *verb, int argc, char **argv, show_opts_t *o) {
    const int is_play = strcmp(verb, "play") == 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
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
        int rc = parse_env_opt(verb, a, v, o);
        if (rc == 1 && is_play && strcmp(a, "--width") == 0) {
            int64_t n = 0;
            if (fl_env_opt_int(verb, a, v, 8, 1000, &n)) return 2;
            o->width = (int)n;
            rc = 0;
        }
        if (rc == 1 && !is_play) rc = parse_record_opt(a, v, o);
        if (rc == 1) fprintf(stderr, "fleet env %s: unknown option '%s' (see `fleet help env`)\n", verb, a);
        if (rc) return 2;
    }
    return check_combination(verb, o);
}

static fl_status resolve(const show_opts_t *o, const fl_env_def_t **def, fl_err_t *err) {
    return fl_env_cli_resolve(&o->e, o->name, def, err);
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

/* ---- Observations as text (play, for an env without render) ------------------------- */

/* Element i of an observation as a double (bfloat16 widened; 0 for unknown dtypes). */
static double obs_value(fl_dtype dt, const void *obs, size_t i) {
    switch (dt) {
    case FL_DTYPE_FLOAT32: return ((const float *)obs)[i];
    case FL_DTYPE_UINT8: return ((const uint8_t *)obs)[i];
    case FL_DTYPE_INT32: return ((const int32_t *)obs)[i];
    case FL_DTYPE_INT64: return (double)((const int64_t *)obs)[i];
    case FL_DTYPE_BFLOAT16: {
        uint32_t bits = (uint32_t)((const uint16_t *)obs)[i] << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    default: return 0.0;
    }
}

#define OBS_NUMBERS_MAX 256 /* a vector longer than this prints its first numbers only */

/* Prints the observation as text, at most `cols` characters wide: a vector (or any
 * observation of up to 16 numbers) as its numbers; a small (H, W) grid as a matrix of
 * numbers; a larger grid or an image (H, W, C...) as one character a cell (up to cols x
 * 40 cells; a bigger one sampled down, two rows of cells a line): for one channel a ramp
 * from the minimum to the maximum ('?' for a value that is not finite), for several the
 * lowest non-zero channel's index (0-9, a-z; '.' when all are 0), as MinAtar's pictures
 * colour a cell. A line of minimum, maximum and mean comes first. */
static void print_obs(FILE *f, const fl_env_def_t *def, const void *obs, int cols) {
    const fl_dtype dt = def->obs.dtype;
    const size_t n = fl_env_obs_count(def);
    char shape[64];
    fl_obs_spec_format_shape(&def->obs, shape, sizeof shape);
    double lo = 0, hi = 0, sum = 0;
    size_t finite = 0;
    for (size_t i = 0; i < n; i++) {
        double v = obs_value(dt, obs, i);
        if (!isfinite(v)) continue; /* shown as they are, or as '?' in a picture */
        if (!finite || v < lo) lo = v;
        if (!finite || v > hi) hi = v;
        sum += v;
        finite++;
    }
    fprintf(f, "obs %s %s: min %g max %g mean %g", fl_dtype_name(dt), shape, lo, hi,
            finite ? sum / (double)finite : 0.0);
    if (finite < n) fprintf(f, " (of the %zu finite values; %zu are not)", finite, n - finite);
    fputc('\n', f);
    const int rank = def->obs.rank;
    const int h = rank >= 2 ? def->obs.shape[0] : 1, w = rank >= 2 ? def->obs.shape[1] : (int)n;
    const size_t c = rank >= 2 ? n / ((size_t)h * (size_t)w) : 1;
    if (rank < 2 || n <= 16) { /* numbers, wrapped */
        int used = 0;
        size_t shown = n < OBS_NUMBERS_MAX ? n : OBS_NUMBERS_MAX;
        for (size_t i = 0; i < shown; i++) {
            char num[32];
            int len = snprintf(num, sizeof num, "%.6g", obs_value(dt, obs, i));
            if (used && used + 1 + len > cols) {
                fputc('\n', f);
                used = 0;
            }
            used += fprintf(f, "%s%s", used ? " " : "", num);
        }
        if (shown < n) fprintf(f, "%s... (%zu more)", used ? " " : "", n - shown);
        fputc('\n', f);
        return;
    }
    if (c == 1 && w * 8 <= cols && h <= 24) { /* a matrix of numbers */
        for (int y = 0; y < h; y++) {
            for (int x = 0; x < w; x++) fprintf(f, "%8.3g", obs_value(dt, obs, (size_t)y * (size_t)w + (size_t)x));
            fputc('\n', f);
        }
        return;
    }
    /* One character a cell, sampled down to fit. */
    static const char ramp[] = " .:-=+*#%@";
    static const char chan[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    int ow = w, oh = h; /* a cell a character up to cols x 40; beyond, sampled with text's 1:2 aspect */
    if (w > cols || h > 40) {
        double sx = (double)w / cols > (double)h / 80 ? (double)w / cols : (double)h / 80;
        ow = (int)(w / sx);
        oh = (int)(h / (2 * sx));
    }
    if (ow < 1) ow = 1;
    if (oh < 1) oh = 1;
    for (int oy = 0; oy < oh; oy++) {
        fputc('|', f);
        for (int ox = 0; ox < ow; ox++) {
            size_t y = (size_t)oy * (size_t)h / (size_t)oh, x = (size_t)ox * (size_t)w / (size_t)ow;
            size_t base = (y * (size_t)w + x) * c;
            char ch;
            if (c == 1) {
                double v = obs_value(dt, obs, base);
                int k = hi > lo && isfinite(v) ? (int)((v - lo) / (hi - lo) * (double)(sizeof ramp - 2) + 0.5) : 0;
                ch = isfinite(v) ? ramp[k < 0 ? 0 : k > (int)sizeof ramp - 2 ? (int)sizeof ramp - 2 : k] : '?';
            } else {
                ch = '.';
                for (size_t k = 0; k < c; k++)
                    if (obs_value(dt, obs, base + k) != 0) {
                        ch = k < sizeof chan - 1 ? chan[k] : '+';
                        break;
                    }
            }
            fputc(ch, f);
        }
        fputs("|\n", f);
    }
    if (c == 1)
        fprintf(f, "(%d x %d%s; ' .:-=+*#%%@' from min to max)\n", h, w, ow < w || oh < h ? ", sampled" : "");
    else
        fprintf(f, "(%d x %d x %zu%s; a cell shows its lowest non-zero channel, '.' none)\n", h, w, c,
                ow < w || oh < h ? ", sampled" : "");
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
    case 256 + 'D':
    case 'a':
    case 'h': return find_action(def, "left");
    case 256 + 'C':
    case 'd':
    case 'l': return find_action(def, "right");
    case 256 + 'A':
    case 'w':
    case 'k': return find_action(def, "up");
    case 256 + 'B':
    case 's':
    case 'j': return find_action(def, "down");
    case ' ': return find_action(def, "fire");
    case '.':
    case '\n':
    case '\r': return find_action(def, "noop");
    default: return KEY_NONE;
    }
}

static void print_keys(FILE *f, const fl_env_def_t *def) {
    fprintf(f, "actions:");
    for (int a = 0; a < def->num_actions; a++) fprintf(f, " %d=%s", a, def->action_name ? def->action_name(a) : "?");
    fprintf(f, "\nkeys: digits pick an action; arrows/wasd move, space fires, '.' or Enter noop; r reset, q quit\n");
}

static int env_play(int argc, char **argv) {
    show_opts_t o = {.e = {.seed = 1, .env = {.sticky_prob = 0.0f, .difficulty_ramping = 1, .args = ""}}};
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
    if (!cols && !def->render) { /* the observation as text, as wide as the terminal allows */
        struct winsize ws;
        int have = tty_out && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 8;
        cols = have && ws.ws_col - 1 < 80 ? ws.ws_col - 1 : 80;
    } else if (!cols) {
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
        if (!plain) fputs("\x1b[H\x1b[2J", stdout);
        printf("%s  episode %d  step %lld  reward %g  return %g%s\n", def->name, episodes, (long long)in.steps,
               (double)reward, in.ret, ended);
        if (def->render) {
            render(&in);
            draw_frame(stdout, in.rgb, def->render_width, def->render_height, cols, plain);
        } else {
            print_obs(stdout, def, in.obs, cols);
        }
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
        if (over)
            ended = term ? "  [terminated: any action key starts a new episode]"
                         : "  [truncated: any action key starts a new episode]";
    }
    restore_terminal();
    printf("played %d episode(s); last return %g after %lld steps\n", episodes, in.ret, (long long)in.steps);
    instance_free(&in);
    return 0;
}

/* ---- record ------------------------------------------------------------------------ */

typedef struct random_play {
    const fl_env_def_t *def;
    const show_opts_t *o;
    double ret;
} random_play_t;

/* Renders the instance's frame of `step` into rec when it wants it. */
static fl_status offer(fl_recorder_t *rec, instance_t *in, int64_t step, fl_err_t *err) {
    if (!fl_recorder_wants(rec, step)) return FL_OK;
    render(in);
    return fl_recorder_add(rec, step, in->rgb, err);
}

/* A recorder play function (cli/recorder.h): one episode of random actions from a fresh
 * instance (the same seeds every call), at most max_steps steps. */
static fl_status play_random(void *user, fl_recorder_t *rec, int64_t *length, fl_err_t *err) {
    random_play_t *p = user;
    instance_t in;
    FL_TRY(instance_open(&in, p->def, p->o, err));
    instance_reset(&in);
    fl_status st = offer(rec, &in, 0, err);
    while (st == FL_OK && in.steps < p->o->max_steps) {
        float r;
        int term;
        int a = (int)fl_rng_below(&in.act_rng, (uint64_t)p->def->num_actions);
        int over = instance_step(&in, a, &r, &term);
        st = offer(rec, &in, in.steps, err);
        if (over) break;
    }
    *length = in.steps;
    p->ret = in.ret;
    instance_free(&in);
    return st;
}

static fl_record_opts_t record_opts(const show_opts_t *o, int width, int height) {
    return (fl_record_opts_t){.path = o->out,
                              .width = width,
                              .height = height,
                              .scale = o->scale,
                              .delay_cs = o->delay,
                              .frames = o->frames,
                              .columns = o->columns};
}

static void print_recorded(const char *name, const char *who, const fl_record_result_t *r, double ret,
                           const char *out) {
    printf("recorded %s%s: %lld steps, return %g, %d frames (%d x %d) -> %s\n", name, who, (long long)r->length, ret,
           r->frames, r->width, r->height, out);
}

static int record_random(const show_opts_t *o) {
    fl_err_t err;
    fl_err_init(&err);
    const fl_env_def_t *def = NULL;
    if (resolve(o, &def, &err) != FL_OK) {
        fprintf(stderr, "fleet env record: %s\n", err.msg);
        return 1;
    }
    if (!def->render) {
        fprintf(stderr, "fleet env record: env '%s' has no render function, so it cannot be recorded\n", def->name);
        return 1;
    }
    random_play_t p = {.def = def, .o = o};
    fl_record_opts_t ro = record_opts(o, def->render_width, def->render_height);
    fl_record_result_t res;
    if (fl_record_episode(&ro, play_random, &p, &res, &err) != FL_OK) {
        fprintf(stderr, "fleet env record: %s\n", err.msg);
        return 1;
    }
    print_recorded(def->name, "", &res, p.ret, o->out);
    return 0;
}

/* The agent's config: its run's config.ini (or --config), then the overrides. Returns 0,
 * or 2 after printing what was wrong. */
static int agent_config(const show_opts_t *o, fl_config_t *cfg, char *path, size_t len) {
    fl_err_t err;
    fl_err_init(&err);
    if (o->config)
        snprintf(path, len, "%s", o->config);
    else if (fl_agent_find_config(o->checkpoint, path, len, &err) != FL_OK) {
        fprintf(stderr, "fleet env record: --checkpoint %s\n", err.msg);
        return 2;
    }
    char *args[MAX_SETS * 2 + 4];
    int n = 0;
    args[n++] = "record";
    args[n++] = "--config";
    args[n++] = path;
    for (int i = 0; i < o->nsets; i++) {
        args[n++] = "--set";
        args[n++] = (char *)o->sets[i];
    }
    args[n] = NULL;
    if (fl_config_from_args(cfg, &n, args, &err) != FL_OK) {
        fprintf(stderr, "fleet env record: %s\n", err.msg);
        return 2;
    }
    if (o->name && strcmp(o->name, cfg->env_name) != 0) {
        fprintf(stderr,
                "fleet env record: the checkpoint's run plays env.name = %s, not '%s' (leave the name out "
                "with --checkpoint)\n",
                cfg->env_name, o->name);
        return 2;
    }
    return 0;
}

/* --checkpoint: one episode of the trained agent (cli/agent.h) as `fleet eval` plays its
 * episode 0 with --seed and --epsilon (defaults run.seed and eval.epsilon). */
static int record_agent(const show_opts_t *o) {
    fl_config_t cfg;
    char config[4096], checkpoint[4096 + 64];
    int rc = agent_config(o, &cfg, config, sizeof config);
    if (rc) return rc;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_agent_find_checkpoint(o->checkpoint, &cfg, 0, checkpoint, sizeof checkpoint, &err) != FL_OK) {
        fprintf(stderr, "fleet env record: %s\n", err.msg);
        return 2;
    }
    fl_agent_settings_t s = {.episodes = 1,
                             .epsilon = o->epsilon_given ? o->epsilon : cfg.eval_epsilon,
                             .seed = o->e.seed_given ? o->e.seed : (uint64_t)cfg.run_seed,
                             .max_steps = o->max_steps,
                             .parallel = 1};
    fl_agent_t *a = NULL;
    fl_status st = fl_agent_open(&cfg, checkpoint, &s, &a, &err);
    if (st != FL_OK) {
        fprintf(stderr, "fleet env record: %s\n", err.msg);
        return st == FL_INVALID_ARGUMENT || st == FL_NOT_FOUND ? 2 : 1;
    }
    int w = 0, h = 0;
    fl_record_result_t res;
    if (!fl_agent_frame_size(a, &w, &h))
        st = fl_err_set(&err, FL_FAILED_PRECONDITION, "env '%s' has no render function, so it cannot be recorded",
                        fl_agent_env(a)->name);
    fl_record_opts_t ro = record_opts(o, w, h);
    if (st == FL_OK) st = fl_record_episode(&ro, fl_agent_play, a, &res, &err);
    if (st == FL_OK) {
        char who[4096 + 128];
        snprintf(who, sizeof who, " (agent of %s, epsilon %g, seed %llu)", checkpoint, s.epsilon,
                 (unsigned long long)s.seed);
        print_recorded(fl_agent_env(a)->name, who, &res, (double)fl_agent_returns(a)[0], o->out);
    } else {
        fprintf(stderr, "fleet env record: %s\n", err.msg);
    }
    fl_agent_close(a);
    return st == FL_OK ? 0 : 1;
}

static int env_record(int argc, char **argv) {
    show_opts_t o = {.e = {.seed = 1, .env = {.sticky_prob = 0.1f, .difficulty_ramping = 1, .args = ""}},
                     .max_steps = 1000,
                     .frames = 16,
                     .columns = 8,
                     .scale = 1,
                     .delay = 8};
    int rc = parse_opts("record", argc, argv, &o);
    if (rc) return rc;
    if (!o.out) {
        fprintf(stderr,
                "fleet env record: missing --out FILE (.gif for an animation, .mp4 for a video, .png for a "
                "strip)\n");
        return 2;
    }
    fl_err_t err;
    fl_err_init(&err);
    fl_status st = fl_record_check(o.out, &err);
    if (st != FL_OK) {
        fprintf(stderr, "fleet env record: %s%s\n", st == FL_INVALID_ARGUMENT ? "--out " : "", err.msg);
        return st == FL_INVALID_ARGUMENT ? 2 : 1;
    }
    return o.checkpoint ? record_agent(&o) : record_random(&o);
}

int fl_env_show(int argc, char **argv) {
    if (strcmp(argv[1], "play") == 0) return env_play(argc, argv);
    return env_record(argc, argv);
}
