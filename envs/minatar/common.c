/* common: the shared MinAtar layer (envs/minatar/common.h): MT19937 and the draws of
 * the reference generator (spec Appendix A), options, sticky actions (1.4) and the
 * episode-ended rule (1.3). The games live in envs/minatar/<game>.c. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/core/render.h"
#include "envs/minatar/common.h"

/* ---- MT19937 ------------------------------------------------------------------------- */

#define MT_M 397
#define MT_UPPER 0x80000000u
#define MT_LOWER 0x7fffffffu
#define MT_MATRIX_A 0x9908b0dfu

void fl_mt19937_seed(fl_mt19937_t *m, uint32_t seed) {
    m->mt[0] = seed;
    for (int i = 1; i < FL_MT19937_N; i++) {
        uint32_t prev = m->mt[i - 1];
        m->mt[i] = 1812433253u * (prev ^ (prev >> 30)) + (uint32_t)i;
    }
    m->mti = FL_MT19937_N;
}

static void mt_twist(fl_mt19937_t *m) {
    uint32_t *mt = m->mt;
    int k;
    for (k = 0; k < FL_MT19937_N - MT_M; k++) {
        uint32_t y = (mt[k] & MT_UPPER) | (mt[k + 1] & MT_LOWER);
        mt[k] = mt[k + MT_M] ^ (y >> 1) ^ ((y & 1u) ? MT_MATRIX_A : 0u);
    }
    for (; k < FL_MT19937_N - 1; k++) {
        uint32_t y = (mt[k] & MT_UPPER) | (mt[k + 1] & MT_LOWER);
        mt[k] = mt[k + (MT_M - FL_MT19937_N)] ^ (y >> 1) ^ ((y & 1u) ? MT_MATRIX_A : 0u);
    }
    uint32_t y = (mt[FL_MT19937_N - 1] & MT_UPPER) | (mt[0] & MT_LOWER);
    mt[FL_MT19937_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ ((y & 1u) ? MT_MATRIX_A : 0u);
    m->mti = 0;
}

uint32_t fl_mt19937_next(fl_mt19937_t *m) {
    if (m->mti >= FL_MT19937_N) mt_twist(m);
    uint32_t y = m->mt[m->mti++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

double fl_mt19937_double(fl_mt19937_t *m) {
    uint32_t a = fl_mt19937_next(m) >> 5;
    uint32_t b = fl_mt19937_next(m) >> 6;
    return ((double)a * 67108864.0 + (double)b) / 9007199254740992.0;
}

int64_t fl_mt19937_int(fl_mt19937_t *m, int64_t lo, int64_t hi) {
    uint32_t r = (uint32_t)(hi - lo);
    if (r == 0) return lo;
    uint32_t mask = r;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    uint32_t v;
    do {
        v = fl_mt19937_next(m) & mask;
    } while (v > r);
    return lo + (int64_t)v;
}

/* ---- Options ------------------------------------------------------------------------- */

static void take_defaults(fl_minatar_common_t *c) {
    c->sticky_prob = FL_MINATAR_DEFAULT_STICKY;
    c->ramping = 1;
    c->reference_rng = 0;
    c->configured = 1;
}

/* args: "" or whitespace/comma separated tokens, of which only seed=<uint32> is known. */
static int parse_args(const char *args, int *has_seed, uint32_t *seed) {
    *has_seed = 0;
    if (!args) return 0;
    const char *p = args;
    for (;;) {
        while (*p && (isspace((unsigned char)*p) || *p == ',')) p++;
        if (!*p) return 0;
        if (strncmp(p, "seed=", 5) != 0) return -1;
        p += 5;
        if (!isdigit((unsigned char)*p)) return -1;
        errno = 0;
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (errno || v > 0xffffffffull) return -1;
        if (*end && !isspace((unsigned char)*end) && *end != ',') return -1;
        *has_seed = 1;
        *seed = (uint32_t)v;
        p = end;
    }
}

int fl_minatar_configure(void *state, const fl_env_options_t *opts) {
    fl_minatar_common_t *c = state;
    take_defaults(c);
    if (!opts) return 0;
    float p = opts->sticky_prob;
    if (!(p >= 0.0f && p <= 1.0f)) return -1;
    int has_seed;
    uint32_t seed = 0;
    if (parse_args(opts->args, &has_seed, &seed) != 0) return -1;
    /* The option arrives as a float; recover the decimal the user wrote (0.1, not
     * 0.100000001...) so coin comparisons match a double-precision reference. */
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", (double)p);
    c->sticky_prob = strtod(buf, NULL);
    c->ramping = opts->difficulty_ramping != 0;
    c->reference_rng = opts->reference_rng != 0;
    if (has_seed) fl_minatar_seed_reference(c, seed);
    return 0;
}

void fl_minatar_seed_reference(fl_minatar_common_t *c, uint32_t seed) {
    fl_mt19937_seed(&c->mt, seed);
    c->mt_seeded = 1;
}

/* ---- Reset and step ------------------------------------------------------------------ */

void fl__minatar_settle(fl_minatar_common_t *c, fl_rng_t *rng) {
    if (!c->configured) take_defaults(c);
    if (c->reference_rng && !c->mt_seeded) fl_minatar_seed_reference(c, (uint32_t)(fl_env_rng_u64(rng) >> 32));
}

void fl_minatar_env_reset(const fl_minatar_game_t *game, void *state, fl_rng_t *rng, void *obs) {
    fl__minatar_reset(game, state, rng, obs);
}

void fl_minatar_env_step(const fl_minatar_game_t *game, const uint8_t *action_map, void *state, fl_rng_t *rng,
                         int action, void *obs, float *reward, int *terminated) {
    fl__minatar_step(game, action_map, state, rng, action, obs, reward, terminated);
}

/* ---- Rendering ----------------------------------------------------------------------- */

const uint8_t *fl_minatar_channel_rgb(int ch) {
    static const uint8_t colours[10][3] = {
        {255, 214, 0},  {0, 200, 255},  {255, 90, 90},   {110, 220, 90},  {200, 120, 255},
        {255, 150, 40}, {80, 130, 255}, {255, 120, 200}, {180, 180, 180}, {170, 110, 60},
    };
    return colours[ch < 0 ? 0 : ch % 10];
}

void fl_minatar_render(const fl_minatar_game_t *game, const void *state, uint8_t *rgb) {
    static const uint8_t black[3] = {0, 0, 0}, grid[3] = {40, 40, 40};
    uint8_t obs[FL_MINATAR_ROWS * FL_MINATAR_COLS * FL_MINATAR_MAX_CHANNELS];
    fl__minatar_write_obs(game, state, obs);
    fl_canvas_t c = {rgb, FL_MINATAR_RENDER_SIZE, FL_MINATAR_RENDER_SIZE};
    fl_canvas_clear(&c, grid);
    for (int y = 0; y < FL_MINATAR_ROWS; y++)
        for (int x = 0; x < FL_MINATAR_COLS; x++) {
            const uint8_t *cell = obs + (y * FL_MINATAR_COLS + x) * game->channels, *colour = black;
            for (int ch = game->channels - 1; ch >= 0; ch--)
                if (cell[ch]) colour = fl_minatar_channel_rgb(ch);
            int x0 = x * FL_MINATAR_RENDER_CELL, y0 = y * FL_MINATAR_RENDER_CELL;
            fl_canvas_rect(&c, x0 + 1, y0 + 1, x0 + FL_MINATAR_RENDER_CELL, y0 + FL_MINATAR_RENDER_CELL, colour);
        }
}

const char *fl_minatar_action_name(int full_action) {
    static const char *const names[FL_MINATAR_NUM_ACTIONS] = {"noop", "left", "up", "right", "down", "fire"};
    return names[full_action];
}
