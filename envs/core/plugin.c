/* plugin: loading environment definitions from shared objects (see plugin.h).
 *
 * The ABI version is the first member of fl_env_def_t in every ABI, so it is read and
 * compared before any other field: a plugin built against another layout is rejected
 * without touching the rest. Handles are never closed once a definition was handed out. */
#include "envs/core/plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_mutex_t g_load_lock = PTHREAD_MUTEX_INITIALIZER;

typedef const fl_env_def_t *(*plugin_fn)(void);

/* The absolute path of an existing regular file, or an error naming what was tried. */
static fl_status resolve_path(const char *path, char *abs, fl_err_t *err) {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "(unknown: %s)", strerror(errno));
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        if (path[0] == '/')
            return fl_err_set(err, e == ENOENT || e == ENOTDIR ? FL_NOT_FOUND : FL_IO_ERROR, "env.plugin '%s': %s",
                              path, strerror(e));
        return fl_err_set(err, e == ENOENT || e == ENOTDIR ? FL_NOT_FOUND : FL_IO_ERROR,
                          "env.plugin '%s': %s (relative to the working directory %s)", path, strerror(e), cwd);
    }
    if (!S_ISREG(sb.st_mode))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "env.plugin '%s': not a regular file (expected a shared object)",
                          path);
    if (!realpath(path, abs))
        return fl_err_set(err, FL_IO_ERROR, "env.plugin '%s': cannot resolve the path: %s", path, strerror(errno));
    return FL_OK;
}

static fl_status load_locked(const char *path, const char *expected_name, const fl_env_def_t **out, fl_err_t *err) {
    char abs[PATH_MAX];
    FL_TRY(resolve_path(path, abs, err));
    dlerror();
    void *h = dlopen(abs, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return fl_err_set(err, FL_FAILED_PRECONDITION, "env.plugin '%s': dlopen failed: %s", path,
                          why ? why : "unknown error");
    }
    dlerror();
    void *sym = dlsym(h, FL_ENV_PLUGIN_SYMBOL);
    const char *why = dlerror();
    if (!sym || why) {
        fl_status s = fl_err_set(err, FL_NOT_FOUND,
                                 "env.plugin '%s': no symbol %s (a plugin exports `const fl_env_def_t "
                                 "*" FL_ENV_PLUGIN_SYMBOL "(void)`; check that it is not static or hidden)",
                                 path, FL_ENV_PLUGIN_SYMBOL);
        dlclose(h);
        return s;
    }
    plugin_fn fn;
    memcpy(&fn, &sym, sizeof fn); /* object pointer to function pointer, as POSIX allows */
    const fl_env_def_t *def = fn();
    fl_status s = FL_OK;
    if (!def) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "env.plugin '%s': %s() returned NULL", path, FL_ENV_PLUGIN_SYMBOL);
        goto fail;
    }
    if (def->abi_version < FL_ENV_ABI_VERSION_MIN || def->abi_version > FL_ENV_ABI_VERSION) {
        s = fl_err_set(err, FL_FAILED_PRECONDITION,
                       "env.plugin '%s': abi_version is %d, this fleet expects %d..%d (rebuild the plugin against "
                       "this fleet's <fleet/env.h>)",
                       path, def->abi_version, FL_ENV_ABI_VERSION_MIN, FL_ENV_ABI_VERSION);
        goto fail;
    }
    s = fl_env_validate(def, err);
    if (s != FL_OK) {
        fl_err_prefix(err, "env.plugin '%s'", path);
        goto fail;
    }
    if (expected_name && expected_name[0] && strcmp(def->name, expected_name) != 0) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT,
                       "env.plugin '%s' provides env '%s', but env.name is '%s' (set env.name = %s)", path, def->name,
                       expected_name, def->name);
        goto fail;
    }
    *out = def;
    return FL_OK;

fail:
    dlclose(h);
    return s;
}

fl_status fl_env_load_plugin(const char *path, const char *expected_name, const fl_env_def_t **out, fl_err_t *err) {
    const fl_env_def_t *dummy;
    if (!out) out = &dummy;
    *out = NULL;
    if (!path || !path[0]) return fl_err_set(err, FL_INVALID_ARGUMENT, "env.plugin: empty path");
    pthread_mutex_lock(&g_load_lock);
    fl_status s = load_locked(path, expected_name, out, err);
    pthread_mutex_unlock(&g_load_lock);
    return s;
}
