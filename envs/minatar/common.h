/* common: the common layer of the MinAtar games (docs/minatar.md, section 1).
 *
 * Every MinAtar game is a 10x10 grid with C boolean channels. This module owns what the
 * games share: the observation layout, the action indices, the per-instance generator
 * (fleet's xoshiro stream or the reference-compatible MT19937 of Appendix A), sticky
 * actions (1.4), the "episode already ended" rule (1.3), the difficulty-ramping switch
 * (1.5) and a macro that turns one game into its two env definitions.
 *
 * Observation: uint8, shape (10, 10, C), laid out [row][col][channel] (channel fastest),
 * values 0/1; FL_MINATAR_OBS_AT gives the byte index. Row 0 is the top, column 0 the left.
 *
 * Actions: the full set is 0 noop, 1 left, 2 up, 3 right, 4 down, 5 fire for every game.
 * "minatar-<game>" exposes the full set (as published); "minatar-<game>-v1" exposes the
 * game's minimal set, agent action i meaning full action minimal[i]. The mapping happens
 * before sticky actions, so the sticky memory always holds a full index.
 *
 * Game-side contract (what a game file provides):
 *  - A state struct whose FIRST member is `fl_minatar_common_t common;` (the env's
 *    state_size is sizeof that struct). The game owns the rest.
 *  - An fl_minatar_game_t with:
 *      reset(common, gen): put the game in its initial state, drawing from gen only.
 *      step(common, gen, full_action, &terminal) -> reward: one game step with a full
 *        action index 0..5 (already mapped and sticky-resolved); sets terminal to 1 when
 *        the episode ends. Never called once the episode has ended: the layer answers
 *        (0, terminal) itself, after making the sticky draw.
 *      obs(common, obs): set the 1s of the observation; the layer has already zeroed
 *        the C * 100 bytes, unless the game sets obs_writes_all, in which case obs
 *        writes every one of the C * 100 bytes itself (0 or 1).
 *    The callbacks reach their game by casting common to their state struct.
 *  - FL_MINATAR_DEFINE_ENVS(...) in the game's .c file, which defines
 *    `const fl_env_def_t fl_env_minatar_<ident>` and `fl_env_minatar_<ident>_v1`.
 *  - All randomness through fl_minatar_u / fl_minatar_int on the gen it is handed.
 *
 * Generator: with options->reference_rng the instance draws from its own MT19937 (kept in
 * the common state), seeded once per instance: from "seed=<uint32>" in options->args when
 * given (to replay a reference trace), else from the first 32 bits the instance's fleet
 * generator gives at its first reset. The sticky draw and the game's draws then share
 * that one stream in the reference's order. Without reference_rng every draw comes from
 * the fl_rng_t the env API hands to reset and step.
 *
 * Defaults when configure is never called before the first reset: sticky probability
 * 0.1, ramping on, fleet generator (the spec's defaults).
 *
 * Nothing here allocates or keeps global state; an instance may run on any thread, one
 * owner at a time. */
#ifndef FL_ENVS_MINATAR_COMMON_H
#define FL_ENVS_MINATAR_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "envs/core/env.h"

#define FL_MINATAR_ROWS 10
#define FL_MINATAR_COLS 10
#define FL_MINATAR_NUM_ACTIONS 6
#define FL_MINATAR_MAX_CHANNELS 10 /* Seaquest has the most */
#define FL_MINATAR_DEFAULT_STICKY 0.1

/* Full action indices (spec 1.2). */
enum {
    FL_MINATAR_NOOP = 0,
    FL_MINATAR_LEFT = 1,
    FL_MINATAR_UP = 2,
    FL_MINATAR_RIGHT = 3,
    FL_MINATAR_DOWN = 4,
    FL_MINATAR_FIRE = 5
};

/* Byte index of (row, col, channel) in an observation with C channels. */
#define FL_MINATAR_OBS_AT(row, col, ch, C) \
    ((((size_t)(row)) * FL_MINATAR_COLS + (size_t)(col)) * (size_t)(C) + (size_t)(ch))

/* ---- MT19937 (Appendix A) ------------------------------------------------------------ */

#define FL_MT19937_N 624

typedef struct fl_mt19937 {
    uint32_t mt[FL_MT19937_N];
    int mti;
} fl_mt19937_t;

/* Standard init_genrand seeding. */
void fl_mt19937_seed(fl_mt19937_t *m, uint32_t seed);
/* Next tempered 32-bit output. */
uint32_t fl_mt19937_next(fl_mt19937_t *m);
/* U(): two outputs a, b -> ((a >> 5) * 2^26 + (b >> 6)) / 2^53, in [0, 1). */
double fl_mt19937_double(fl_mt19937_t *m);
/* I(lo, hi) inclusive by masked rejection: no output used when lo == hi, else one output
 * per attempt. Requires lo <= hi. */
int64_t fl_mt19937_int(fl_mt19937_t *m, int64_t lo, int64_t hi);

/* ---- Per-call generator view --------------------------------------------------------- */

/* What a game draws from: the reference generator when mt is non-NULL, else rng.
 * Built by the layer for each reset/step call; games never construct one. */
typedef struct fl_minatar_gen {
    fl_rng_t *rng;
    fl_mt19937_t *mt;
} fl_minatar_gen_t;

/* U(): uniform double in [0, 1) (53 bits on either generator). */
static inline double fl_minatar_u(fl_minatar_gen_t *g) {
    return g->mt ? fl_mt19937_double(g->mt) : fl_env_rng_double(g->rng);
}

/* I(lo, hi): unbiased uniform integer in lo..hi inclusive (lo <= hi). lo == hi uses no
 * draw on either generator. */
static inline int fl_minatar_int(fl_minatar_gen_t *g, int lo, int hi) {
    if (g->mt) return (int)fl_mt19937_int(g->mt, lo, hi);
    if (hi <= lo) return lo;
    return lo + (int)fl_env_rng_below(g->rng, (uint64_t)(hi - lo) + 1);
}

/* ---- Common instance state ----------------------------------------------------------- */

typedef struct fl_minatar_common {
    fl_mt19937_t mt;    /* the reference generator (used when reference_rng) */
    double sticky_prob; /* probability the previous executed action repeats */
    int ramping;        /* difficulty ramping switch (1.5); games read it at reset/step */
    int reference_rng;  /* 1 = draw from mt */
    int mt_seeded;      /* mt has been seeded */
    int configured;     /* options applied (or defaults taken at first reset) */
    int prev_action;    /* last executed full action; 0 at creation, kept across resets */
    int terminal;       /* the current episode has ended */
    int last_action;    /* full action executed by the latest step (for tests, info) */
} fl_minatar_common_t;

typedef struct fl_minatar_game {
    int channels;
    int obs_writes_all; /* 1: obs writes all C * 100 bytes, so the layer does not zero them */
    void (*reset)(fl_minatar_common_t *c, fl_minatar_gen_t *gen);
    int (*step)(fl_minatar_common_t *c, fl_minatar_gen_t *gen, int full_action, int *terminal);
    void (*obs)(const fl_minatar_common_t *c, uint8_t *obs);
} fl_minatar_game_t;

/* Applies options to an instance whose state starts with fl_minatar_common_t: sticky_prob
 * must be in [0, 1]; args is "" or "seed=<0..4294967295>" (seeds the reference generator;
 * only meaningful with reference_rng). Returns 0, or -1 on an unusable option. */
int fl_minatar_configure(void *state, const fl_env_options_t *opts);
/* Seeds the instance's reference generator explicitly (tests, trace replay). */
void fl_minatar_seed_reference(fl_minatar_common_t *c, uint32_t seed);

/* Renders the game's observation as an FL_MINATAR_RENDER_SIZE square image: each of the
 * 10 x 10 cells a FL_MINATAR_RENDER_CELL-pixel square in the colour of its lowest set
 * channel (fl_minatar_channel_rgb below; the games list the player and the ball first,
 * so they show on top, e.g. Breakout's ball inside a brick), empty cells black, with
 * one-pixel dark grid lines between cells. */
#define FL_MINATAR_RENDER_CELL 16
#define FL_MINATAR_RENDER_SIZE (FL_MINATAR_COLS * FL_MINATAR_RENDER_CELL)
void fl_minatar_render(const fl_minatar_game_t *game, const void *state, uint8_t *rgb);
/* The colour of channel ch (0..9) in MinAtar renders; black is the empty background. */
const uint8_t *fl_minatar_channel_rgb(int ch);

/* Names of the full action set: noop, left, up, right, down, fire. */
const char *fl_minatar_action_name(int full_action);

/* The layer's reset/step. action_map is NULL for the full set, else the minimal set
 * (agent index -> full index). */
void fl_minatar_env_reset(const fl_minatar_game_t *game, void *state, fl_rng_t *rng, void *obs);
void fl_minatar_env_step(const fl_minatar_game_t *game, const uint8_t *action_map, void *state, fl_rng_t *rng,
                         int action, void *obs, float *reward, int *terminated);

/* Internal: the same reset/step inline, so that the wrappers FL_MINATAR_DEFINE_ENVS
 * generates see the game's callbacks as constants and inline them into one function per
 * env (no per-step call through the fl_minatar_game_t pointers). fl__minatar_settle
 * takes the defaults and seeds the reference generator when either is still pending. */
void fl__minatar_settle(fl_minatar_common_t *c, fl_rng_t *rng);

static inline fl_minatar_gen_t fl__minatar_gen(fl_minatar_common_t *c, fl_rng_t *rng) {
    if (__builtin_expect(!c->configured || (c->reference_rng && !c->mt_seeded), 0)) fl__minatar_settle(c, rng);
    fl_minatar_gen_t g = {.rng = rng, .mt = c->reference_rng ? &c->mt : NULL};
    return g;
}

/* Zeroes n >= 16 bytes with 16-byte stores (the last one may overlap the one before).
 * A fixed-size memset of a few hundred bytes compiles to `rep stos`, whose start-up cost
 * is a large share of a MinAtar step; the empty asm hides that z is zero so that the
 * compiler does not turn this loop back into that memset. */
static inline void fl__minatar_zero(uint8_t *p, size_t n) {
#if defined(__SSE2__) && defined(__GNUC__)
    __m128i z = _mm_setzero_si128();
    __asm__("" : "+x"(z));
    for (size_t i = 0; i + 16 <= n; i += 16) _mm_storeu_si128((__m128i *)(p + i), z);
    _mm_storeu_si128((__m128i *)(p + n - 16), z);
#else
    memset(p, 0, n);
#endif
}

static inline void fl__minatar_write_obs(const fl_minatar_game_t *game, const fl_minatar_common_t *c, void *obs) {
    if (!game->obs_writes_all)
        fl__minatar_zero(obs, (size_t)FL_MINATAR_ROWS * FL_MINATAR_COLS * (size_t)game->channels);
    game->obs(c, obs);
}

static inline void fl__minatar_reset(const fl_minatar_game_t *game, void *state, fl_rng_t *rng, void *obs) {
    fl_minatar_common_t *c = state;
    fl_minatar_gen_t gen = fl__minatar_gen(c, rng);
    c->terminal = 0;
    game->reset(c, &gen);
    fl__minatar_write_obs(game, c, obs);
}

/* Sticky draw first (also once the episode has ended), then the game step. */
static inline void fl__minatar_step(const fl_minatar_game_t *game, const uint8_t *action_map, void *state,
                                    fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    fl_minatar_common_t *c = state;
    fl_minatar_gen_t gen = fl__minatar_gen(c, rng);
    int chosen = action_map ? action_map[action] : action;
    double u = fl_minatar_u(&gen);
    int executed = u < c->sticky_prob ? c->prev_action : chosen;
    c->prev_action = executed;
    c->last_action = executed;
    int r = 0;
    if (!c->terminal) {
        int term = 0;
        r = game->step(c, &gen, executed, &term);
        if (term) c->terminal = 1;
    }
    *reward = (float)r;
    *terminated = c->terminal;
    fl__minatar_write_obs(game, c, obs);
}

/* Defines fl_env_minatar_<ident> ("minatar-<name>", 6 actions) and
 * fl_env_minatar_<ident>_v1 ("minatar-<name>-v1", the minimal set).
 *   IDENT     C identifier, e.g. breakout
 *   NAME      string literal, e.g. "breakout"
 *   DESC      string literal, one-line description
 *   STATE_T   the game's state struct (first member fl_minatar_common_t)
 *   GAME      an fl_minatar_game_t object (not a pointer); its .channels must equal NCH
 *   NCH       channel count (integer constant)
 *   MINIMAL   a static const uint8_t array of full indices
 *   NMINIMAL  its length (integer constant)
 * Use it at file scope, followed by a semicolon. */
#define FL_MINATAR_DEFINE_ENVS(IDENT, NAME, DESC, STATE_T, GAME, NCH, MINIMAL, NMINIMAL)                 \
    static void IDENT##_env_reset(void *s, fl_rng_t *r, void *o) {                                       \
        fl__minatar_reset(&(GAME), s, r, o);                                                             \
    }                                                                                                    \
    static void IDENT##_env_step(void *s, fl_rng_t *r, int a, void *o, float *rw, int *t) {              \
        fl__minatar_step(&(GAME), NULL, s, r, a, o, rw, t);                                              \
    }                                                                                                    \
    static void IDENT##_env_step_v1(void *s, fl_rng_t *r, int a, void *o, float *rw, int *t) {           \
        fl__minatar_step(&(GAME), (MINIMAL), s, r, a, o, rw, t);                                         \
    }                                                                                                    \
    static void IDENT##_env_render(const void *s, uint8_t *rgb) {                                        \
        fl_minatar_render(&(GAME), s, rgb);                                                              \
    }                                                                                                    \
    static const char *IDENT##_action_name_v1(int a) {                                                   \
        return fl_minatar_action_name((MINIMAL)[a]);                                                     \
    }                                                                                                    \
    const fl_env_def_t fl_env_minatar_##IDENT = {                                                        \
        .abi_version = FL_ENV_ABI_VERSION,                                                               \
        .name = "minatar-" NAME,                                                                         \
        .description = DESC " (MinAtar, full 6-action set)",                                             \
        .obs = {.dtype = FL_DTYPE_UINT8, .rank = 3, .shape = {FL_MINATAR_ROWS, FL_MINATAR_COLS, (NCH)}}, \
        .num_actions = FL_MINATAR_NUM_ACTIONS,                                                           \
        .max_episode_steps = 0,                                                                          \
        .state_size = sizeof(STATE_T),                                                                   \
        .reset = IDENT##_env_reset,                                                                      \
        .step = IDENT##_env_step,                                                                        \
        .render = IDENT##_env_render,                                                                    \
        .render_height = FL_MINATAR_RENDER_SIZE,                                                         \
        .render_width = FL_MINATAR_RENDER_SIZE,                                                          \
        .configure = fl_minatar_configure,                                                               \
        .action_name = fl_minatar_action_name,                                                           \
    };                                                                                                   \
    const fl_env_def_t fl_env_minatar_##IDENT##_v1 = {                                                   \
        .abi_version = FL_ENV_ABI_VERSION,                                                               \
        .name = "minatar-" NAME "-v1",                                                                   \
        .description = DESC " (MinAtar, minimal action set)",                                            \
        .obs = {.dtype = FL_DTYPE_UINT8, .rank = 3, .shape = {FL_MINATAR_ROWS, FL_MINATAR_COLS, (NCH)}}, \
        .num_actions = (NMINIMAL),                                                                       \
        .max_episode_steps = 0,                                                                          \
        .state_size = sizeof(STATE_T),                                                                   \
        .reset = IDENT##_env_reset,                                                                      \
        .step = IDENT##_env_step_v1,                                                                     \
        .render = IDENT##_env_render,                                                                    \
        .render_height = FL_MINATAR_RENDER_SIZE,                                                         \
        .render_width = FL_MINATAR_RENDER_SIZE,                                                          \
        .configure = fl_minatar_configure,                                                               \
        .action_name = IDENT##_action_name_v1,                                                           \
    }

#endif
