/* factory: the environment an experiment's roles open, and the one place roles resolve
 * env.name: a built-in of the registry's families (envs/registry.h) or the env of a
 * plugin (envs/core/plugin.h), wrapped as env.wrappers says (envs/core/wrappers.h). */
#ifndef FL_ENVS_FACTORY_H
#define FL_ENVS_FACTORY_H

#include "envs/core/env.h"
#include "envs/core/plugin.h"
#include "envs/core/wrappers.h"

/* The environment a config selects: the plugin at plugin_path when plugin_path is
 * non-empty (its env must be called `name`), else the built-in `name` (fl_env_lookup). */
fl_status fl_env_resolve(const char *plugin_path, const char *name, const fl_env_def_t **out, fl_err_t *err);

/* env.rng: the random generator of games that offer a reference-compatible one. */
typedef enum fl_env_rng {
    FL_ENV_RNG_FLEET = 0,     /* fleet's own generator */
    FL_ENV_RNG_REFERENCE = 1, /* the reference-compatible one */
} fl_env_rng;

/* The environment an experiment's roles open, and the settings of every instance: what
 * a config's [env] section says (launcher/options.c fills it from one). Strings are borrowed
 * (NULL reads as ""); args is handed on to the envs by fl_env_instance_options, so it
 * must outlive the envs configured with it. */
typedef struct fl_env_factory_opts {
    const char *name;       /* env.name: a built-in env, or the one the plugin provides */
    const char *plugin;     /* env.plugin: path of a shared object ("" = built-in) */
    const char *wrappers;   /* env.wrappers: wrapper spec (envs/core/wrappers.h), "" = none */
    int max_episode_steps;  /* env.max_episode_steps: replaces the env's own limit when > 0 */
    int num_envs;           /* env.num_envs: instances an actor steps together */
    double sticky_actions;  /* env.sticky_actions: probability that the previous action repeats */
    int difficulty_ramping; /* env.difficulty_ramping: 1 = games speed up over an episode */
    fl_env_rng rng;         /* env.rng */
    const char *args;       /* env.args: free text for the env (plugins) */
} fl_env_factory_opts_t;

/* The defaults of the [env] keys: cartpole, built in, no wrappers, the env's own step
 * limit, one env, sticky actions 0.1, difficulty ramping on, fleet's generator, no args. */
void fl_env_factory_opts_init(fl_env_factory_opts_t *o);

/* The per-instance settings of o (sticky actions, difficulty ramping, rng, args) as the
 * env API's fl_env_options_t, for fl_vecenv_configure / fl_wrapvec_configure. out->args
 * points to o->args (or to ""). */
void fl_env_instance_options(const fl_env_factory_opts_t *o, fl_env_options_t *out);

/* The environment an experiment's roles run: o->plugin / o->name (fl_env_resolve),
 * wrapped with o->wrappers (envs/core/wrappers.h), with o->max_episode_steps replacing the
 * env's own step limit when > 0. Actors step it with fl_wrapvec; replay and learners take
 * the observation space and action count from fl_wrapped_env_info. Errors name the key
 * (env.name, env.plugin or env.wrappers) and what was wrong. */
fl_status fl_env_create_wrapped(const fl_env_factory_opts_t *o, fl_wrapped_env_t **out, fl_err_t *err);

#endif
