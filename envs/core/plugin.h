/* plugin: environments from shared objects.
 *
 * A plugin is a shared object built against <fleet/env.h> (include/fleet/env.h) that
 * exports `const fl_env_def_t *fl_env_plugin(void)` (FL_ENV_PLUGIN_SYMBOL). Loading it
 * means: find the file, dlopen it, find the symbol, call it, check the ABI version
 * before reading anything else of the definition, validate the rest (fl_env_validate)
 * and check that it provides the env that was asked for. Every failure is answered with
 * a message that names the plugin path and what was wrong:
 *   FL_NOT_FOUND           the file does not exist (relative paths name the directory
 *                          they were resolved from), or it lacks the fl_env_plugin symbol
 *   FL_FAILED_PRECONDITION dlopen refused the file (dlerror's text is included), or the
 *                          definition's abi_version differs (both numbers are given)
 *   FL_INVALID_ARGUMENT    fl_env_plugin returned NULL, the definition is invalid (the
 *                          field is named), or its name is not the one asked for
 *
 * Paths: a path with a '/' is used as given (relative to the current directory); a bare
 * file name ("libmygame.so") also means the file in the current directory, not a search
 * of the library path. The resolved absolute path is what dlopen sees, so processes that
 * share the working directory (the roles `fleet run` starts) load the same file.
 *
 * Lifetime: a loaded plugin stays loaded for the rest of the process (its definition
 * and functions are used until exit); loading the same file again returns the same
 * definition. Thread-safe (loads are serialized by a lock). Roles open the env a config
 * names, built-in or plugin, through envs/factory.h. */
#ifndef FL_ENVS_PLUGIN_H
#define FL_ENVS_PLUGIN_H

#include "envs/core/env.h"

/* Loads the plugin at path and stores its validated definition in *out. expected_name,
 * when non-NULL and non-empty, must equal the definition's name. *out is NULL on failure. */
fl_status fl_env_load_plugin(const char *path, const char *expected_name, const fl_env_def_t **out, fl_err_t *err);

#endif
