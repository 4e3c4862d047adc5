/* atari: the Atari 2600 games of the Arcade Learning Environment as built-in envs (see
 * atari.h), over the C++ shim envs/atari/atari_ale.h. Without ALE (FLEET_HAVE_ALE undefined)
 * there are no Atari envs and these functions say so.
 *
 * The table of games is made once, on first use, from the ROM folder's *.bin files that
 * ALE supports (sorted by name); a definition is made when it is first asked for, from the game's
 * action set (ALE's settings for the ROM, without starting an emulator). The env API's
 * configure and action_name functions take no definition, so each definition has its own
 * pair, generated below for every table slot; they hand the slot to the shared code.
 *
 * Thread-safety: the table is made under a mutex; the definitions never change after. */
#include "envs/atari/atari.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef FLEET_HAVE_ALE
#include "envs/atari/atari_ale.h"

#define VARIANTS 4 /* bit 0: the full action set; bit 1: RGB observations */
#define SLOTS (FL_ATARI_MAX_GAMES * VARIANTS)
#define DEFAULT_MAX_FRAMES 108000

typedef struct game {
    char name[64];  /* "pong" (the ROM file's stem) */
    char rom[1024]; /* its path */
    int height;     /* its screen's rows (0 = not known yet) */
} game_t;

typedef struct slot {
    int made;
    fl_env_def_t def;
    char name[80], description[160];
    int actions[FL_ALE_MAX_ACTIONS]; /* ALE action ids of the env's actions */
} slot_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_scanned;
static game_t g_games[FL_ATARI_MAX_GAMES];
static int g_num_games;
static char g_dir[1024];
static slot_t g_slots[SLOTS];

/* One instance. */
typedef struct atari_state {
    fl_ale_t *ale;
    int slot; /* its definition's slot */
    int configured;
    float repeat;  /* env.sticky_actions: ALE's repeat_action_probability */
    int frameskip; /* env.args frameskip=N: emulator frames per step (rewards summed) */
    int mode, difficulty;
    int has_seed;     /* env.args ale_seed=N given */
    int32_t ale_seed; /* ALE's random_seed N (any int32: Gymnasium's seeds map to negative ones too);
                         without it, a draw from the instance's generator */
} atari_state_t;

/* Emulators of closed instances, kept for the next instance of the same game and options
 * (an evaluator closes its instance after every episode and opens one for the next; a load
 * costs ALE about 0.15 s): fl_ale_restart puts one back as a load with the new seed would
 * leave it, so an instance plays the same frames whether its emulator is new or kept. */
#define POOL_MAX 16
typedef struct pooled {
    fl_ale_t *ale;
    int game;
    float repeat;
    int mode, difficulty;
} pooled_t;
static pthread_mutex_t g_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pooled_t g_pool[POOL_MAX];
static int g_pool_n, g_pool_limit = 8;
static uint64_t g_loads;

/* A kept emulator for s, restarted with seed, or NULL. */
static fl_ale_t *pool_take(const atari_state_t *s, int32_t seed) {
    fl_ale_t *a = NULL;
    pthread_mutex_lock(&g_pool_mu);
    for (int i = g_pool_n - 1; i >= 0 && !a; i--) {
        const pooled_t *p = &g_pool[i];
        if (p->game == s->slot / VARIANTS && p->repeat == s->repeat && p->mode == s->mode &&
            p->difficulty == s->difficulty) {
            a = p->ale;
            g_pool[i] = g_pool[--g_pool_n];
        }
    }
    pthread_mutex_unlock(&g_pool_mu);
    if (a && fl_ale_restart(a, seed) != 0) {
        fl_ale_close(a);
        a = NULL;
    }
    return a;
}

/* Keeps s's emulator for a later instance, or closes it. */
static void pool_put(const atari_state_t *s) {
    pthread_mutex_lock(&g_pool_mu);
    int kept = g_pool_n < g_pool_limit;
    if (kept) g_pool[g_pool_n++] = (pooled_t){s->ale, s->slot / VARIANTS, s->repeat, s->mode, s->difficulty};
    pthread_mutex_unlock(&g_pool_mu);
    if (!kept) fl_ale_close(s->ale);
}

int fl_atari_keep_emulators(int n) {
    if (n < 0) n = 0;
    if (n > POOL_MAX) n = POOL_MAX;
    fl_ale_t *drop[POOL_MAX];
    int nd = 0;
    pthread_mutex_lock(&g_pool_mu);
    int old = g_pool_limit;
    g_pool_limit = n;
    while (g_pool_n > n) drop[nd++] = g_pool[--g_pool_n].ale;
    pthread_mutex_unlock(&g_pool_mu);
    for (int i = 0; i < nd; i++) fl_ale_close(drop[i]);
    return old;
}

uint64_t fl_atari_loads(void) {
    pthread_mutex_lock(&g_pool_mu);
    uint64_t n = g_loads;
    pthread_mutex_unlock(&g_pool_mu);
    return n;
}

const char *fl_atari_roms_dir(void) {
    const char *env = getenv("ALE_ROMS_DIR");
    if (env && *env) return env;
#ifdef FLEET_ALE_ROMS_DIR
    return FLEET_ALE_ROMS_DIR;
#else
    return "";
#endif
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const game_t *)a)->name, ((const game_t *)b)->name);
}

/* Screen heights are known only once the emulator runs the game (PAL games have 250
 * rows, a few others their own count: Carnival, Pooyan, Journey Escape), which takes
 * ~0.15 s a game; so they are kept in the user's cache folder,
 * $XDG_CACHE_HOME/fleet/atari-screens.txt (else ~/.cache/fleet/), one "<ROM path>
 * <height>" line a game, appended as games are first made. Best effort: where it cannot
 * be written the probe runs again; the ROM folder is never written (it may be read-only
 * or shared). */
static int screens_path(char *path, size_t len, int make_dir) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[900];
    if (xdg && xdg[0] == '/')
        snprintf(dir, sizeof dir, "%.880s/fleet", xdg);
    else if (home && home[0] == '/')
        snprintf(dir, sizeof dir, "%.800s/.cache/fleet", home);
    else
        return -1;
    if (make_dir) {
        char parent[900];
        snprintf(parent, sizeof parent, "%s", dir);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) {
            *slash = '\0';
            if (mkdir(parent, 0755) != 0 && errno != EEXIST) return -1;
        }
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
    }
    snprintf(path, len, "%s/atari-screens.txt", dir);
    return 0;
}

static void read_screens(void) {
    char path[1100], rom[1100];
    if (screens_path(path, sizeof path, 0) != 0) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    int h;
    while (fscanf(f, "%1099s %d", rom, &h) == 2)
        for (int i = 0; i < g_num_games; i++)
            if (strcmp(g_games[i].rom, rom) == 0 && h > 0 && h <= 1024) g_games[i].height = h;
    fclose(f);
}

/* Game g's screen height: the cache's, or a probe's (then cached). 0 when the ROM does
 * not load. Under g_mu. */
static int screen_height(game_t *g) {
    if (g->height) return g->height;
    fl_ale_opts_t o = {.rom = g->rom, .seed = 0, .repeat_prob = 0, .mode = -1, .difficulty = -1, .max_frames = 0};
    char err[256];
    fl_ale_t *a = fl_ale_open(&o, err, sizeof err);
    if (!a) return 0;
    int w;
    fl_ale_screen(a, &g->height, &w);
    fl_ale_close(a);
    char path[1100], line[1200];
    if (strchr(g->rom, ' ') || screens_path(path, sizeof path, 1) != 0) return g->height;
    int n = snprintf(line, sizeof line, "%s %d\n", g->rom, g->height);
    FILE *f = fopen(path, "a");
    if (f) {
        fwrite(line, 1, (size_t)n, f);
        fclose(f);
    }
    return g->height;
}

/* The ROM folder's games, once. Under g_mu. */
static void atari_reset(void *state, fl_rng_t *rng, void *obs);
static int atari_lives(void *state);

static void scan(void) {
    if (g_scanned) return;
    g_scanned = 1;
    /* Before any definition is handed out: the episodiclife wrapper reads the games'
     * lives through the core (envs/core/env.h). */
    fl_env_declare_lives(atari_reset, atari_lives);
    snprintf(g_dir, sizeof g_dir, "%s", fl_atari_roms_dir());
    DIR *d = g_dir[0] ? opendir(g_dir) : NULL;
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) && g_num_games < FL_ATARI_MAX_GAMES;) {
        size_t n = strlen(e->d_name);
        if (n < 5 || n - 4 >= sizeof g_games[0].name || strcmp(e->d_name + n - 4, ".bin") != 0) continue;
        game_t *g = &g_games[g_num_games++];
        snprintf(g->name, sizeof g->name, "%.*s", (int)(n - 4), e->d_name);
        snprintf(g->rom, sizeof g->rom, "%.700s/%.255s", g_dir, e->d_name);
    }
    closedir(d);
    qsort(g_games, (size_t)g_num_games, sizeof *g_games, by_name);
    /* Only the ROMs this ALE knows (a few in the folder are multi-player games it lists
     * but does not support). */
    int kept = 0, actions[FL_ALE_MAX_ACTIONS];
    char err[256];
    for (int i = 0; i < g_num_games; i++)
        if (fl_ale_game_actions(g_games[i].rom, 0, actions, err, sizeof err) > 0) g_games[kept++] = g_games[i];
    g_num_games = kept;
    read_screens();
}

/* ---- the env functions ---- */

static int parse_args(atari_state_t *s, const char *args) {
    s->frameskip = 1;
    s->mode = s->difficulty = -1;
    s->has_seed = 0;
    s->ale_seed = 0;
    for (const char *p = args ? args : ""; *p;) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        char key[32];
        long long value;
        int used = 0;
        if (sscanf(p, "%31[a-z_]=%lld%n", key, &value, &used) != 2) return -1;
        if (strcmp(key, "frameskip") == 0 && value >= 1 && value <= 64)
            s->frameskip = (int)value;
        else if (strcmp(key, "mode") == 0 && value >= 0 && value <= INT_MAX)
            s->mode = (int)value;
        else if (strcmp(key, "difficulty") == 0 && value >= 0 && value <= INT_MAX)
            s->difficulty = (int)value;
        else if (strcmp(key, "ale_seed") == 0 && value >= INT32_MIN && value <= INT32_MAX) {
            s->has_seed = 1;
            s->ale_seed = (int32_t)value;
        } else
            return -1;
        p += used;
    }
    return 0;
}

static int configure_slot(int slot, void *state, const fl_env_options_t *opts) {
    atari_state_t *s = state;
    s->slot = slot;
    s->repeat = opts->sticky_prob;
    if (!(s->repeat >= 0.0f && s->repeat <= 1.0f) || parse_args(s, opts->args) != 0) return -1;
    s->configured = 1;
    return 0;
}

static void obs_of(const atari_state_t *s, void *obs) {
    if (g_slots[s->slot].def.obs.shape[2] == 3)
        fl_ale_rgb(s->ale, obs);
    else
        fl_ale_gray(s->ale, obs);
}

static void atari_reset(void *state, fl_rng_t *rng, void *obs) {
    atari_state_t *s = state;
    if (!s->configured) { /* the env API configures every instance before its first reset */
        fprintf(stderr, "atari: an instance was reset before its configure (a caller broke the env API)\n");
        abort();
    }
    if (!s->ale) {
        fl_ale_opts_t o = {.rom = g_games[s->slot / VARIANTS].rom,
                           .seed = s->has_seed ? s->ale_seed : (int32_t)(fl_env_rng_u64(rng) >> 33),
                           .repeat_prob = s->repeat,
                           .mode = s->mode,
                           .difficulty = s->difficulty,
                           .max_frames = 0};
        char err[256] = "";
        s->ale = pool_take(s, o.seed);
        if (!s->ale) {
            pthread_mutex_lock(&g_pool_mu);
            g_loads++;
            pthread_mutex_unlock(&g_pool_mu);
            s->ale = fl_ale_open(&o, err, sizeof err);
        }
        if (!s->ale) {
            fprintf(stderr, "atari-%s: %s\n", g_games[s->slot / VARIANTS].name, err);
            abort(); /* the ROM loaded when the env was made: this is not a configuration error */
        }
    }
    /* Every episode, the first one too, begins with ALE's reset_game, as ale-py's Gymnasium
     * env begins them (loading the ROM already resets the console, and a second reset
     * draws a new power-on state for games that read uninitialised RAM). */
    fl_ale_reset(s->ale);
    obs_of(s, obs);
}

static void atari_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    (void)rng;
    atari_state_t *s = state;
    int id = g_slots[s->slot].actions[action];
    float r = 0;
    int term = 0;
    for (int k = 0; k < s->frameskip && !term; k++) {
        r += fl_ale_act(s->ale, id);
        term = fl_ale_terminal(s->ale);
    }
    *reward = r;
    *terminated = term;
    obs_of(s, obs);
}

static void atari_render(const void *state, uint8_t *rgb) {
    const atari_state_t *s = state;
    if (s->ale)
        fl_ale_rgb(s->ale, rgb);
    else
        memset(rgb, 0, (size_t)g_slots[s->slot].def.render_height * FL_ALE_WIDTH * 3);
}

static void atari_close(void *state) {
    atari_state_t *s = state;
    if (s->ale) pool_put(s);
    s->ale = NULL;
}

static int atari_lives(void *state) {
    atari_state_t *s = state;
    return s->ale ? fl_ale_lives(s->ale) : -1;
}

static const char *action_name_slot(int slot, int action) {
    return action >= 0 && action < g_slots[slot].def.num_actions ? fl_ale_action_name(g_slots[slot].actions[action])
                                                                 : "?";
}

/* configure_<slot> and action_name_<slot> for every slot: slot a*64 + b*16 + c*4 + d
 * (a in 0..7, b, c, d in 0..3), listed in slot order. */
#define FL__SLOT_FNS(a, b, c, d)                                             \
    static int configure_##a##b##c##d(void *st, const fl_env_options_t *o) { \
        return configure_slot(a * 64 + b * 16 + c * 4 + d, st, o);           \
    }                                                                        \
    static const char *action_name_##a##b##c##d(int x) {                     \
        return action_name_slot(a * 64 + b * 16 + c * 4 + d, x);             \
    }
#define FL__R4(f, a, b, c) f(a, b, c, 0) f(a, b, c, 1) f(a, b, c, 2) f(a, b, c, 3)
#define FL__R16(f, a, b) FL__R4(f, a, b, 0) FL__R4(f, a, b, 1) FL__R4(f, a, b, 2) FL__R4(f, a, b, 3)
#define FL__R64(f, a) FL__R16(f, a, 0) FL__R16(f, a, 1) FL__R16(f, a, 2) FL__R16(f, a, 3)
#define FL__R512(f) \
    FL__R64(f, 0) FL__R64(f, 1) FL__R64(f, 2) FL__R64(f, 3) FL__R64(f, 4) FL__R64(f, 5) FL__R64(f, 6) FL__R64(f, 7)
FL__R512(FL__SLOT_FNS)
#define FL__CONF(a, b, c, d) configure_##a##b##c##d,
#define FL__NAME(a, b, c, d) action_name_##a##b##c##d,
static const fl_env_configure_fn g_configure[SLOTS] = {FL__R512(FL__CONF)};
static const fl_env_action_name_fn g_action_name[SLOTS] = {FL__R512(FL__NAME)};
_Static_assert(SLOTS == 512, "one configure and action_name pair per slot");

/* Makes slot's definition (game g, variant v). Under g_mu. 0, or -1 when the ROM is not
 * one this ALE supports. */
static int make(int slot) {
    slot_t *sl = &g_slots[slot];
    if (sl->made) return sl->made > 0 ? 0 : -1;
    game_t *g = &g_games[slot / VARIANTS];
    int full = slot % VARIANTS & 1, rgb = slot % VARIANTS >> 1 & 1;
    char err[256];
    int n = fl_ale_game_actions(g->rom, full, sl->actions, err, sizeof err);
    int height = n > 0 ? screen_height(g) : 0;
    sl->made = n > 0 && height > 0 ? 1 : -1;
    if (sl->made < 0) return -1;
    snprintf(sl->name, sizeof sl->name, "atari-%s%s%s", g->name, full ? "-full" : "", rgb ? "-rgb" : "");
    snprintf(sl->description, sizeof sl->description, "Atari 2600 %s (ALE): %s frames, %s action set", g->name,
             rgb ? "RGB" : "grayscale", full ? "full 18-action" : "minimal");
    sl->def = (fl_env_def_t){.abi_version = FL_ENV_ABI_VERSION,
                             .name = sl->name,
                             .description = sl->description,
                             .obs = {FL_DTYPE_UINT8, 3, {height, FL_ALE_WIDTH, rgb ? 3 : 1, 0}},
                             .num_actions = n,
                             .max_episode_steps = DEFAULT_MAX_FRAMES,
                             .state_size = sizeof(atari_state_t),
                             .reset = atari_reset,
                             .step = atari_step,
                             .render = atari_render,
                             .render_height = height,
                             .render_width = FL_ALE_WIDTH,
                             .configure = g_configure[slot],
                             .action_name = g_action_name[slot],
                             .close = atari_close};
    return 0;
}

/* The slot of "atari-<game>[-full][-rgb]", or -1. Under g_mu. */
static int slot_of(const char *name) {
    if (strncmp(name, "atari-", 6) != 0) return -1;
    char base[80];
    snprintf(base, sizeof base, "%s", name + 6);
    int v = 0;
    size_t n = strlen(base);
    if (n > 4 && strcmp(base + n - 4, "-rgb") == 0) base[n -= 4] = '\0', v |= 2;
    if (n > 5 && strcmp(base + n - 5, "-full") == 0) base[n -= 5] = '\0', v |= 1;
    for (int i = 0; i < g_num_games; i++)
        if (strcmp(g_games[i].name, base) == 0) return i * VARIANTS + v;
    return -1;
}

int fl_atari_count(void) {
    pthread_mutex_lock(&g_mu);
    scan();
    int n = g_num_games;
    pthread_mutex_unlock(&g_mu);
    return n;
}

const fl_env_def_t *fl_atari_at(int i) {
    pthread_mutex_lock(&g_mu);
    scan();
    const fl_env_def_t *d = i >= 0 && i < g_num_games && make(i * VARIANTS) == 0 ? &g_slots[i * VARIANTS].def : NULL;
    pthread_mutex_unlock(&g_mu);
    return d;
}

const fl_env_def_t *fl_atari_find(const char *name) {
    if (!name || strncmp(name, "atari-", 6) != 0) return NULL;
    pthread_mutex_lock(&g_mu);
    scan();
    int slot = slot_of(name);
    const fl_env_def_t *d = slot >= 0 && make(slot) == 0 ? &g_slots[slot].def : NULL;
    pthread_mutex_unlock(&g_mu);
    return d;
}

const char *fl_atari_game_name(int i) {
    pthread_mutex_lock(&g_mu);
    scan();
    const char *n = i >= 0 && i < g_num_games ? g_games[i].name : NULL;
    pthread_mutex_unlock(&g_mu);
    return n;
}

int fl_atari_lives(const fl_env_def_t *def, void *state) {
    if (!def || def->reset != atari_reset) return -1;
    return atari_lives(state);
}

int fl_atari_available(void) {
    return 1;
}

int fl_atari_env(const fl_env_def_t *def) {
    return def && def->reset == atari_reset;
}

#else /* no ALE in this build */

const char *fl_atari_roms_dir(void) {
    return "";
}
int fl_atari_count(void) {
    return 0;
}
const fl_env_def_t *fl_atari_at(int i) {
    (void)i;
    return NULL;
}
const fl_env_def_t *fl_atari_find(const char *name) {
    (void)name;
    return NULL;
}
const char *fl_atari_game_name(int i) {
    (void)i;
    return NULL;
}
int fl_atari_lives(const fl_env_def_t *def, void *state) {
    (void)def, (void)state;
    return -1;
}
int fl_atari_available(void) {
    return 0;
}
int fl_atari_keep_emulators(int n) {
    (void)n;
    return 0;
}
uint64_t fl_atari_loads(void) {
    return 0;
}
int fl_atari_env(const fl_env_def_t *def) {
    (void)def;
    return 0;
}

#endif

/* ---- the family's rows (envs/core/family.h) ---- */

static int atari_env_name(int i, char *buf, size_t len) {
    const char *game = fl_atari_game_name(i);
    if (!game) return -1;
    snprintf(buf, len, "atari-%s", game);
    return 0;
}

/* Gymnasium's and older ids of a game ("ALE/Pong-v5", "PongNoFrameskip-v4", "Pong-v0",
 * "pong", "SpaceInvaders") -> "atari-pong", "atari-space_invaders" when this build has
 * that game. Not accepted as names: Gymnasium's v5 envs skip frames and stick actions
 * by default, fleet's are the raw game with the config's wrappers. */
static int atari_suggest(const char *name, char *buf, size_t len) {
    if (strncmp(name, "atari-", 6) == 0) return -1;
    if (strncmp(name, "ALE/", 4) == 0) name += 4;
    char game[64];
    size_t n = strcspn(name, "-");
    if (n == 0 || n >= sizeof game) return -1;
    memcpy(game, name, n);
    game[n] = '\0';
    static const char *const tails[] = {"NoFrameskip", "Deterministic"};
    for (int t = 0; t < 2; t++) {
        size_t k = strlen(tails[t]), g = strlen(game);
        if (g > k && strcmp(game + g - k, tails[t]) == 0) game[g - k] = '\0';
    }
    char snake[80] = "atari-";
    size_t o = strlen(snake);
    for (size_t i = 0; game[i] && o + 2 < sizeof snake; i++) {
        const unsigned char c = (unsigned char)game[i];
        if (isupper(c) && i > 0 && (islower((unsigned char)game[i - 1]) || isdigit((unsigned char)game[i - 1])))
            snake[o++] = '_';
        snake[o++] = (char)tolower(c);
    }
    snake[o] = '\0';
    if (!fl_atari_find(snake)) return -1;
    snprintf(buf, len, "%s", snake);
    return 0;
}

/* The games whose score is capped: Pong ends at 21 points, Boxing at a knock-out of 100. */
static int atari_return_max(const char *name, double *max) {
    static const struct {
        const char *game;
        double max;
    } capped[] = {{"pong", 21}, {"boxing", 100}};
    if (strncmp(name, "atari-", 6) != 0) return -1;
    const char *game = name + 6;
    const size_t n = strcspn(game, "-"); /* without -full, -rgb */
    for (size_t i = 0; i < sizeof capped / sizeof capped[0]; i++)
        if (strlen(capped[i].game) == n && strncmp(game, capped[i].game, n) == 0) {
            *max = capped[i].max;
            return 0;
        }
    return -1;
}

const fl_env_family_t fl_env_family_atari = {
    .name = "atari",
    .count = fl_atari_count,
    .at = fl_atari_at,
    .env_name = atari_env_name,
    .find = fl_atari_find,
    .suggest = atari_suggest,
    .return_max = atari_return_max,
};
