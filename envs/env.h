/* env: the environment API every fleet environment implements, built-in or plugin.
 *
 * An environment is a definition (fl_env_def_t): a plain, constant struct of metadata and
 * function pointers. It owns no memory. The caller allocates `state_size` bytes of state
 * per instance, one fl_rng_t per instance, and the observation buffers; the env's
 * functions only read and write those. This keeps stepping allocation-free, lets a vector
 * of envs live in a few flat arrays (see envs/vecenv.h), and lets a shared object loaded
 * with dlopen provide an environment by exporting one function
 *
 *     const fl_env_def_t *fl_env_plugin(void);   (see FL_ENV_PLUGIN_SYMBOL)
 *
 * whose result has abi_version == FL_ENV_ABI_VERSION. A plugin is built against the
 * installed, self-contained copy of these types, <fleet/env.h> (envs/fleet_env.h, which
 * mirrors this header exactly; tests/test_envs_plugin.c checks it), and is loaded by
 * envs/plugin.h. The fl_env_rng_* helpers below are inline, so a plugin links against no
 * fleet symbol, and they draw exactly the same numbers as fl_rng_* in common/rng.h.
 *
 * Contracts for implementers:
 *  - reset writes the first observation of a new episode into obs (fl_env_obs_size bytes)
 *    and must fully initialize the state (the state memory is zeroed once at creation,
 *    but an instance is reset many times).
 *  - step applies a valid action (0 <= action < num_actions; the caller checks it) and
 *    writes the next observation, the reward and whether the episode terminated (a
 *    terminal state of the MDP). Time limits are not the env's business: the caller
 *    truncates at max_episode_steps. step must not allocate and must not keep pointers.
 *  - All randomness comes from the rng argument (the instance's own generator, seeded
 *    from the run seed and the instance index). No rand(), no globals, no static state:
 *    any number of instances may run in parallel on different threads.
 *  - render (optional, NULL if unsupported) writes an RGB image of the current state
 *    (after reset or step; it only reads the state). `fleet env play` and `fleet env
 *    record` show it.
 *  - action_name (optional) names the actions for people and tools.
 *
 * Thread-safety: definitions are immutable; functions here are pure. */
#ifndef FL_ENVS_ENV_H
#define FL_ENVS_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/rng.h"
#include "common/status.h"

/* Bumped whenever fl_env_def_t or a function signature changes incompatibly. */
#define FL_ENV_ABI_VERSION 2
/* The function a plugin exports: `const fl_env_def_t *fl_env_plugin(void)`. */
#define FL_ENV_PLUGIN_SYMBOL "fl_env_plugin"
#define FL_ENV_MAX_RANK 4

/* reset: start a new episode; writes the first observation into obs. */
typedef void (*fl_env_reset_fn)(void *state, fl_rng_t *rng, void *obs);
/* step: apply action (valid), write the next observation into obs, the reward into
 * *reward and 1 into *terminated if the new state is terminal, else 0. */
typedef void (*fl_env_step_fn)(void *state, fl_rng_t *rng, int action, void *obs, float *reward,
                               int *terminated);
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

typedef struct fl_env_def {
    int abi_version;          /* FL_ENV_ABI_VERSION */
    const char *name;         /* registry key, e.g. "cartpole" */
    const char *description;  /* one line for listings; may be NULL */
    fl_dtype obs_dtype;       /* element type of an observation */
    int obs_rank;             /* 1..FL_ENV_MAX_RANK */
    int obs_shape[FL_ENV_MAX_RANK]; /* first obs_rank entries used, each > 0 */
    int num_actions;          /* discrete actions 0..num_actions-1 */
    int max_episode_steps;    /* the env's own time limit (truncation); 0 = none */
    size_t state_size;        /* bytes of one instance's state, allocated by the caller */
    fl_env_reset_fn reset;
    fl_env_step_fn step;
    fl_env_render_fn render;  /* optional; NULL if the env cannot render */
    int render_height;        /* image size of render; 0 when render is NULL */
    int render_width;
    fl_env_configure_fn configure; /* optional; NULL when the env takes no options */
    fl_env_action_name_fn action_name; /* optional; NULL when actions are only numbered */
} fl_env_def_t;

/* Bytes of one observation (dtype size times the product of the shape); 0 if the
 * definition's dtype or shape is invalid. */
size_t fl_env_obs_size(const fl_env_def_t *def);
/* Number of elements of one observation; 0 if the shape is invalid. */
size_t fl_env_obs_count(const fl_env_def_t *def);

/* Checks a definition (from a plugin, say) before anything calls into it: ABI version,
 * name, dtype, shape, actions, limits and required functions. FL_INVALID_ARGUMENT (or
 * FL_FAILED_PRECONDITION for an ABI mismatch) with a message naming the field. */
fl_status fl_env_validate(const fl_env_def_t *def, fl_err_t *err);

/* Calls def->configure (when set) on one zeroed instance state; instance is its index in
 * a vector, for the message. FL_INVALID_ARGUMENT naming the env, the instance and every
 * option when the env rejects them. */
fl_status fl_env_configure(const fl_env_def_t *def, void *state, const fl_env_options_t *opts, int instance,
                           fl_err_t *err);

/* ---- Inline random helpers for env implementations --------------------------------
 * Bit-identical to fl_rng_u64 / fl_rng_double / fl_rng_float / fl_rng_uniform /
 * fl_rng_below on the same fl_rng_t, but need no linking (for plugins). */

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

#endif
