/* env: sizes and validation of environment definitions, and the declared lives (see
 * env.h). */
#include "envs/core/env.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

/* fl_env_def_t.obs replaced three loose members (fl_dtype obs_dtype, int obs_rank,
 * int obs_shape[FL_ENV_MAX_RANK]) right after description without changing the layout,
 * which is why FL_ENV_ABI_VERSION is still 2: the signature starts where obs_dtype did
 * (after the description pointer), its fields sit where the loose ones did, and it ends
 * where obs_shape did, so num_actions and every later member keep their offsets. */
_Static_assert(offsetof(fl_env_def_t, obs) == offsetof(fl_env_def_t, description) + sizeof(const char *),
               "fl_env_def_t.obs starts where obs_dtype was");
_Static_assert(sizeof(fl_dtype) == sizeof(int), "fl_dtype is int-sized on this ABI");
_Static_assert(offsetof(fl_obs_spec_t, dtype) == 0 && offsetof(fl_obs_spec_t, rank) == sizeof(int) &&
                   offsetof(fl_obs_spec_t, shape) == 2 * sizeof(int),
               "fl_obs_spec_t lays out dtype, rank, shape like the old loose members");
_Static_assert(sizeof(fl_obs_spec_t) == sizeof(int) * (2 + FL_ENV_MAX_RANK),
               "fl_obs_spec_t is as big as obs_dtype, obs_rank and obs_shape were");
_Static_assert(FL_OBS_MAX_RANK == FL_ENV_MAX_RANK, "an env's signature has FL_ENV_MAX_RANK dimensions");
_Static_assert(offsetof(fl_env_def_t, num_actions) == offsetof(fl_env_def_t, obs) + sizeof(fl_obs_spec_t),
               "num_actions follows the signature as it followed obs_shape");

size_t fl_env_obs_count(const fl_env_def_t *def) {
    if (!def || def->obs.rank < 1 || def->obs.rank > FL_ENV_MAX_RANK) return 0;
    size_t n = 1;
    for (int i = 0; i < def->obs.rank; i++) {
        int d = def->obs.shape[i];
        if (d <= 0) return 0;
        if (n > SIZE_MAX / (size_t)d) return 0;
        n *= (size_t)d;
    }
    return n;
}

size_t fl_env_obs_size(const fl_env_def_t *def) {
    if (!def) return 0;
    size_t es = fl_dtype_size(def->obs.dtype);
    size_t n = fl_env_obs_count(def);
    if (es == 0 || n == 0 || n > SIZE_MAX / es) return 0;
    return n * es;
}

fl_status fl_env_validate(const fl_env_def_t *def, fl_err_t *err) {
    if (!def) return fl_err_set(err, FL_INVALID_ARGUMENT, "env definition is NULL");
    const char *name = def->name && def->name[0] ? def->name : "(unnamed)";
    if (def->abi_version < FL_ENV_ABI_VERSION_MIN || def->abi_version > FL_ENV_ABI_VERSION)
        return fl_err_set(err, FL_FAILED_PRECONDITION,
                          "env '%s': abi_version is %d, this fleet expects %d..%d (rebuild the plugin "
                          "against this fleet's include/fleet/env.h)",
                          name, def->abi_version, FL_ENV_ABI_VERSION_MIN, FL_ENV_ABI_VERSION);
    if (!def->name || !def->name[0]) return fl_err_set(err, FL_INVALID_ARGUMENT, "env: name is empty");
    if (fl_dtype_size(def->obs.dtype) == 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': obs_dtype %d is not a known dtype", name,
                          (int)def->obs.dtype);
    if (def->obs.rank < 1 || def->obs.rank > FL_ENV_MAX_RANK)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': obs_rank is %d, expected 1..%d", name, def->obs.rank,
                          FL_ENV_MAX_RANK);
    for (int i = 0; i < def->obs.rank; i++)
        if (def->obs.shape[i] <= 0)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': obs_shape[%d] is %d, expected > 0", name, i,
                              def->obs.shape[i]);
    if (fl_env_obs_size(def) == 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': observation size overflows", name);
    if (def->num_actions < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': num_actions is %d, expected >= 1", name,
                          def->num_actions);
    if (def->max_episode_steps < 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': max_episode_steps is %d, expected >= 0 (0 = none)", name,
                          def->max_episode_steps);
    if (!def->reset) return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': reset function is NULL", name);
    if (!def->step) return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': step function is NULL", name);
    if (def->render && (def->render_height <= 0 || def->render_width <= 0))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "env '%s': render is set but render_height x render_width is %d x %d, expected > 0", name,
                          def->render_height, def->render_width);
    return FL_OK;
}

fl_status fl_env_configure(const fl_env_def_t *def, void *state, const fl_env_options_t *opts, int instance,
                           fl_err_t *err) {
    if (!def->configure || def->configure(state, opts) == 0) return FL_OK;
    return fl_err_set(err, FL_INVALID_ARGUMENT,
                      "env '%s' (instance %d) rejected its options: sticky_actions = %g, difficulty_ramping = %d, "
                      "rng = %s, args = \"%s\"",
                      def->name, instance, (double)opts->sticky_prob, opts->difficulty_ramping,
                      opts->reference_rng ? "reference" : "fleet", opts->args ? opts->args : "");
}

void fl_env_close(const fl_env_def_t *def, void *state) {
    if (def && state && def->abi_version >= 3 && def->close) def->close(state);
}

/* The declared lives functions: written under g_lives_mu, an entry before the count
 * that publishes it, so readers take no lock. */
static pthread_mutex_t g_lives_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    fl_env_reset_fn reset;
    fl_env_lives_fn lives;
} g_lives[FL_ENV_MAX_LIVES];
static _Atomic int g_num_lives;

int fl_env_declare_lives(fl_env_reset_fn reset, fl_env_lives_fn lives) {
    int rc = 0;
    pthread_mutex_lock(&g_lives_mu);
    int n = atomic_load_explicit(&g_num_lives, memory_order_relaxed), i = 0;
    while (i < n && !(g_lives[i].reset == reset && g_lives[i].lives == lives)) i++;
    if (i == n) {
        if (n < FL_ENV_MAX_LIVES) {
            g_lives[n].reset = reset;
            g_lives[n].lives = lives;
            atomic_store_explicit(&g_num_lives, n + 1, memory_order_release);
        } else {
            rc = -1;
        }
    }
    pthread_mutex_unlock(&g_lives_mu);
    return rc;
}

fl_env_lives_fn fl_env_lives_of(const fl_env_def_t *def) {
    if (!def || !def->reset) return NULL;
    int n = atomic_load_explicit(&g_num_lives, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (g_lives[i].reset == def->reset) return g_lives[i].lives;
    return NULL;
}
