/* env: the environment API every fleet environment implements, built-in or plugin.
 *
 * An environment is a definition (fl_env_def_t): a plain, constant struct of metadata and
 * function pointers. It owns no memory. The caller allocates `state_size` bytes of state
 * per instance, one fl_rng_t per instance, and the observation buffers; the env's
 * functions only read and write those. This keeps stepping allocation-free, lets a vector
 * of envs live in a few flat arrays (see envs/core/vecenv.h), and lets a shared object loaded
 * with dlopen provide an environment by exporting one function
 *
 *     const fl_env_def_t *fl_env_plugin(void);   (see FL_ENV_PLUGIN_SYMBOL)
 *
 * whose result has abi_version == FL_ENV_ABI_VERSION. The types and the inline fl_env_rng_*
 * helpers are defined once, in the installed header <fleet/env.h> (include/fleet/env.h),
 * which plugins build against and this header includes; fl_rng_* in common/rng.h draw
 * through the same inline generator. Plugins are loaded by envs/core/plugin.h. This header
 * adds the functions the fleet tree uses on definitions.
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
#include "fleet/env.h"

/* Bytes of one observation (dtype size times the product of the shape); 0 if the
 * definition's dtype or shape is invalid. */
size_t fl_env_obs_size(const fl_env_def_t *def);
/* def's close for one instance's state, when def has one (ABI 3); nothing otherwise. */
void fl_env_close(const fl_env_def_t *def, void *state);
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

/* Lives, for the episodiclife wrapper (envs/core/wrappers.h). fl_env_def_t has no member
 * for them (the plugin ABI stays as it is), so a family whose games have lives declares
 * how to read them: every definition whose reset function is `reset` has lives, and
 * lives(state) gives an instance's (-1 before its first reset). The Atari family declares
 * its own before it hands out any definition (envs/atari/atari.c); the wrappers ask
 * fl_env_lives_of and name no family. Declaring a pair again does nothing; -1 when
 * FL_ENV_MAX_LIVES different ones are declared already. Thread-safe. */
#define FL_ENV_MAX_LIVES 8
typedef int (*fl_env_lives_fn)(void *state);
int fl_env_declare_lives(fl_env_reset_fn reset, fl_env_lives_fn lives);
/* The lives function declared for def's envs; NULL when def has no lives. */
fl_env_lives_fn fl_env_lives_of(const fl_env_def_t *def);

#endif
