/* factory: the environment a config names, resolved and wrapped (see factory.h). */
#include "envs/factory.h"

#include <string.h>

#include "envs/registry.h"

void fl_env_factory_opts_init(fl_env_factory_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->name = "cartpole";
    o->plugin = "";
    o->wrappers = "";
    o->max_episode_steps = 0;
    o->num_envs = 4;
    o->sticky_actions = 0.1;
    o->difficulty_ramping = 1;
    o->rng = FL_ENV_RNG_FLEET;
    o->args = "";
}

void fl_env_instance_options(const fl_env_factory_opts_t *o, fl_env_options_t *out) {
    memset(out, 0, sizeof *out);
    out->sticky_prob = (float)o->sticky_actions;
    out->difficulty_ramping = o->difficulty_ramping != 0;
    out->reference_rng = o->rng == FL_ENV_RNG_REFERENCE;
    out->args = o->args ? o->args : "";
}

fl_status fl_env_resolve(const char *plugin_path, const char *name, const fl_env_def_t **out, fl_err_t *err) {
    if (plugin_path && plugin_path[0]) return fl_env_load_plugin(plugin_path, name, out, err);
    return fl_env_lookup(name, out, err);
}

fl_status fl_env_create_wrapped(const fl_env_factory_opts_t *o, fl_wrapped_env_t **out, fl_err_t *err) {
    *out = NULL;
    const char *plugin = o->plugin ? o->plugin : "";
    const char *name = o->name ? o->name : "";
    const char *wrappers = o->wrappers ? o->wrappers : "";
    const fl_env_def_t *def = NULL;
    fl_status st = fl_env_resolve(plugin, name, &def, err);
    if (st != FL_OK) return plugin[0] ? st : fl_err_prefix(err, "env.name");
    st = fl_wrapped_env_create_limited(def, wrappers, o->max_episode_steps, out, err);
    if (st != FL_OK) fl_err_prefix(err, "env.wrappers = \"%s\"", wrappers);
    return st;
}
