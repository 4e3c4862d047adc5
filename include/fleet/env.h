/* fleet/env.h: the one header a custom environment plugin needs.
 *
 * This file is installed as <fleet/env.h> (`cmake --install`); a plugin is one C file
 * that includes it and exports
 *
 *     FL_ENV_EXPORT const fl_env_def_t *fl_env_plugin(void);
 *
 * returning a constant definition with abi_version == FL_ENV_ABI_VERSION. `fleet run
 * --set env.plugin=./libmygame.so --set env.name=mygame` loads the shared object with
 * dlopen, checks the ABI version and the declared spaces, and steps the env in every
 * actor (docs/custom-envs.md walks through it, examples/gridgame/ is a complete one).
 *
 * The header is self-contained: it includes only <stddef.h> and <stdint.h>, and a plugin
 * links against no fleet symbol (the fl_env_rng_* helpers are inline). It is also the one
 * definition of these types inside the fleet tree: envs/core/env.h, common/dtype.h and
 * common/rng.h include it (the tree puts include/ on the include path), so the
 * generator's step exists once, here, and fleet's own fl_rng_* draw through it.
 *
 * Contracts for implementers:
 *  - state: the caller allocates state_size bytes per instance, zeroed once at creation;
 *    reset must fully initialize the episode state; step must not allocate or keep
 *    pointers; no globals, no static state, no rand(): all randomness comes from the rng
 *    argument, so any number of instances may run in parallel.
 *  - reset writes the first observation into obs; step applies a valid action
 *    (0 <= action < num_actions, checked by the caller) and writes the next observation,
 *    the reward and whether the new state is terminal. Time limits are the caller's:
 *    episodes are truncated at max_episode_steps.
 *  - configure (optional) receives the experiment's [env] options once per instance
 *    before the first reset; it returns 0, or -1 to reject them.
 *  - render (optional) writes an RGB image of the current state (`fleet env play`
 *    and `fleet env record` show it); action_name (optional) names the actions. */
#ifndef FLEET_ENV_H
#define FLEET_ENV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever fl_env_def_t or a function signature changes. 3 added `close` at the
 * end of fl_env_def_t; definitions of version 2 (which end before it) still load and are
 * read as having no close function. */
#define FL_ENV_ABI_VERSION 3
/* The oldest version this header's users still load. */
#define FL_ENV_ABI_VERSION_MIN 2
/* The function a plugin exports: `const fl_env_def_t *fl_env_plugin(void)`. */
#define FL_ENV_PLUGIN_SYMBOL "fl_env_plugin"
#define FL_ENV_MAX_RANK 4
/* Keeps fl_env_plugin visible when a plugin is built with -fvisibility=hidden. */
#define FL_ENV_EXPORT __attribute__((visibility("default")))

/* Element types of observations (the values are fleet's wire values). */
typedef enum {
    FL_DTYPE_INVALID = 0,
    FL_DTYPE_FLOAT32 = 1,
    FL_DTYPE_UINT8 = 2,
    FL_DTYPE_INT32 = 3,
    FL_DTYPE_INT64 = 4,
    FL_DTYPE_BFLOAT16 = 5,
} fl_dtype;

/* An instance's random generator (xoshiro256**), owned and seeded by the caller. */
typedef struct fl_rng {
    uint64_t s[4];
} fl_rng_t;

/* Ranks of an observation signature (the same bound as FL_ENV_MAX_RANK). */
#define FL_OBS_MAX_RANK FL_ENV_MAX_RANK

/* An observation signature: element type and per-item shape. This is the one definition
 * in the fleet tree (common/obs.h adds the helpers); envs declare theirs in
 * fl_env_def_t.obs, and actors, replay tables and learners carry the same type. */
typedef struct fl_obs_spec {
    fl_dtype dtype;
    int rank;                   /* 0 .. FL_OBS_MAX_RANK (0: a scalar per item; an env's is 1..) */
    int shape[FL_OBS_MAX_RANK]; /* first rank entries, each >= 1; the rest 0 */
} fl_obs_spec_t;

/* reset: start a new episode; writes the first observation into obs. */
typedef void (*fl_env_reset_fn)(void *state, fl_rng_t *rng, void *obs);
/* step: apply action (valid), write the next observation into obs, the reward into
 * *reward and 1 into *terminated if the new state is terminal, else 0. */
typedef void (*fl_env_step_fn)(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated);
/* render: write the current state as an image, rgb is (render_height, render_width, 3). */
typedef void (*fl_env_render_fn)(const void *state, uint8_t *rgb);

/* Per-instance settings from the experiment's [env] section. Envs use what applies to
 * them and ignore the rest. */
typedef struct fl_env_options {
    float sticky_prob;      /* env.sticky_actions: probability that the previous action repeats */
    int difficulty_ramping; /* env.difficulty_ramping: 1 = games speed up over an episode */
    int reference_rng;      /* env.rng = reference: draw from the reference-compatible generator */
    const char *args;       /* env.args: free text for the env (plugins), may be "" */
} fl_env_options_t;

/* configure (optional, may be NULL): called once per instance after the state is zeroed
 * and before the first reset; returns 0, or -1 when an option is unusable (then the
 * caller reports the env and the options). */
typedef int (*fl_env_configure_fn)(void *state, const fl_env_options_t *opts);

/* action_name (optional, may be NULL): a short lower-case name of action a
 * (0 <= a < num_actions), e.g. "left" or "fire", for tools such as `fleet env play`,
 * whose keys find actions by these names (arrows: left/right/up/down, space: fire). */
typedef const char *(*fl_env_action_name_fn)(int action);
/* close (ABI 3, optional, may be NULL): releases what configure or reset acquired for one
 * instance (an emulator, a file); called once before the instance's state is freed or
 * zeroed for reuse, also for a state that was only zeroed (then it must do nothing).
 * Callers go through fl_env_close (envs/core/env.h), which does not read the member of a
 * version-2 definition. */
typedef void (*fl_env_close_fn)(void *state);

typedef struct fl_env_def {
    int abi_version;         /* FL_ENV_ABI_VERSION */
    const char *name;        /* the env.name that selects this env (the registry key), e.g. "cartpole" */
    const char *description; /* one line for listings; may be NULL */
    /* The observation signature: obs.dtype, obs.rank (1..FL_ENV_MAX_RANK) and obs.shape
     * (the first obs.rank entries used, each > 0), e.g. `.obs = {FL_DTYPE_FLOAT32, 1, {4}}`.
     * Earlier headers declared three loose members here instead (fl_dtype obs_dtype,
     * int obs_rank, int obs_shape[FL_ENV_MAX_RANK]); the struct has the same layout (an
     * enum-sized dtype, an int, int[4] at the same offsets; envs/core/env.c asserts it), so
     * FL_ENV_ABI_VERSION stays 2 and plugins built against the old header keep loading. */
    fl_obs_spec_t obs;
    int num_actions;       /* discrete actions 0..num_actions-1 */
    int max_episode_steps; /* the env's own time limit (truncation); 0 = none */
    size_t state_size;     /* bytes of one instance's state, allocated by the caller */
    fl_env_reset_fn reset;
    fl_env_step_fn step;
    fl_env_render_fn render; /* optional; NULL if the env cannot render */
    int render_height;       /* image size of render; 0 when render is NULL */
    int render_width;
    fl_env_configure_fn configure;     /* optional; NULL when the env takes no options */
    fl_env_action_name_fn action_name; /* optional; NULL when actions are only numbered */
    fl_env_close_fn close;             /* ABI 3; optional; NULL when an instance holds nothing outside its state */
} fl_env_def_t;

/* ---- Inline random helpers ------------------------------------------------------------
 * xoshiro256**: the one implementation of fleet's generator. fl_rng_u64 / fl_rng_double /
 * fl_rng_float / fl_rng_uniform / fl_rng_below (common/rng.h) call these, so an env draws
 * the same numbers built in or as a plugin. */

static inline uint64_t fl_env_rng_u64(fl_rng_t *r) {
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [0, 1), 53 random bits. */
static inline double fl_env_rng_double(fl_rng_t *r) {
    return (double)(fl_env_rng_u64(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [0, 1), 24 random bits. */
static inline float fl_env_rng_float(fl_rng_t *r) {
    return (float)(fl_env_rng_u64(r) >> 40) * 0x1.0p-24f;
}

/* Uniform in [lo, hi). */
static inline double fl_env_rng_uniform(fl_rng_t *r, double lo, double hi) {
    return lo + (hi - lo) * fl_env_rng_double(r);
}

/* Uniform integer in [0, n), unbiased (n > 0). */
static inline uint64_t fl_env_rng_below(fl_rng_t *r, uint64_t n) {
    __extension__ typedef unsigned __int128 fl__u128;
    fl__u128 m = (fl__u128)fl_env_rng_u64(r) * n;
    uint64_t l = (uint64_t)m;
    if (l < n) {
        uint64_t t = -n % n;
        while (l < t) {
            m = (fl__u128)fl_env_rng_u64(r) * n;
            l = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

#ifdef __cplusplus
}
#endif

#endif
