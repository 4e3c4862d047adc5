/* env: sizes and validation of environment definitions (see env.h). */
#include "envs/env.h"

#include <limits.h>

size_t fl_env_obs_count(const fl_env_def_t *def) {
    if (!def || def->obs_rank < 1 || def->obs_rank > FL_ENV_MAX_RANK) return 0;
    size_t n = 1;
    for (int i = 0; i < def->obs_rank; i++) {
        int d = def->obs_shape[i];
        if (d <= 0) return 0;
        if (n > SIZE_MAX / (size_t)d) return 0;
        n *= (size_t)d;
    }
    return n;
}

size_t fl_env_obs_size(const fl_env_def_t *def) {
    if (!def) return 0;
    size_t es = fl_dtype_size(def->obs_dtype);
    size_t n = fl_env_obs_count(def);
    if (es == 0 || n == 0 || n > SIZE_MAX / es) return 0;
    return n * es;
}

fl_status fl_env_validate(const fl_env_def_t *def, fl_err_t *err) {
    if (!def) return fl_err_set(err, FL_INVALID_ARGUMENT, "env definition is NULL");
    const char *name = def->name && def->name[0] ? def->name : "(unnamed)";
    if (def->abi_version != FL_ENV_ABI_VERSION)
        return fl_err_set(err, FL_FAILED_PRECONDITION,
                          "env '%s': abi_version is %d, this fleet expects %d (rebuild the plugin "
                          "against this envs/env.h)",
                          name, def->abi_version, FL_ENV_ABI_VERSION);
    if (!def->name || !def->name[0]) return fl_err_set(err, FL_INVALID_ARGUMENT, "env: name is empty");
    if (fl_dtype_size(def->obs_dtype) == 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': obs_dtype %d is not a known dtype", name,
                          (int)def->obs_dtype);
    if (def->obs_rank < 1 || def->obs_rank > FL_ENV_MAX_RANK)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': obs_rank is %d, expected 1..%d", name,
                          def->obs_rank, FL_ENV_MAX_RANK);
    for (int i = 0; i < def->obs_rank; i++)
        if (def->obs_shape[i] <= 0)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': obs_shape[%d] is %d, expected > 0", name,
                              i, def->obs_shape[i]);
    if (fl_env_obs_size(def) == 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': observation size overflows", name);
    if (def->num_actions < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': num_actions is %d, expected >= 1", name,
                          def->num_actions);
    if (def->max_episode_steps < 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': max_episode_steps is %d, expected >= 0 (0 = none)",
                          name, def->max_episode_steps);
    if (!def->reset) return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': reset function is NULL", name);
    if (!def->step) return fl_err_set(err, FL_INVALID_ARGUMENT, "env '%s': step function is NULL", name);
    if (def->render && (def->render_height <= 0 || def->render_width <= 0))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "env '%s': render is set but render_height x render_width is %d x %d, expected > 0",
                          name, def->render_height, def->render_width);
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
