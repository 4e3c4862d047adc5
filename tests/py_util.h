/* py_util: the Python side of the interoperability tests. A python3 that imports what a
 * test needs, with <build>/pydeps (FLEET_BINARY_DIR) on PYTHONPATH; when none does, the
 * pip packages are installed there once (then the test goes on), and where that cannot
 * work (no pip, no network) the caller skips with a message saying so. */
#ifndef FL_TESTS_PY_UTIL_H
#define FL_TESTS_PY_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

/* The exit status of a shell command (-1 when it could not run). */
static inline int py_shell(const char *cmd) {
    int rc = system(cmd);
    return rc == -1 ? -1 : WEXITSTATUS(rc);
}

/* Finds a python3 that runs `import <imports>`, installing `packages` with pip into
 * <build>/pydeps when it must. 1 with env ("PYTHONPATH=... ", to put before a command)
 * and *python set, else 0. */
static inline int py_find(const char *imports, const char *packages, char *env, size_t env_len, const char **python) {
    const char *bin = getenv("FLEET_BINARY_DIR");
    snprintf(env, env_len, "PYTHONPATH=%s/pydeps${PYTHONPATH:+:$PYTHONPATH}", bin ? bin : "/tmp/fleet");
    static const char *const cands[] = {"python3", "/usr/bin/python3"};
    char cmd[4096];
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
            snprintf(cmd, sizeof cmd, "%s %s -c 'import %s' >/dev/null 2>&1", env, cands[i], imports);
            if (py_shell(cmd) == 0) {
                *python = cands[i];
                return 1;
            }
            if (pass == 0) {
                snprintf(cmd, sizeof cmd,
                         "timeout 300 %s -m pip install --quiet --disable-pip-version-check --target '%s/pydeps' "
                         "%s >/dev/null 2>&1",
                         cands[i], bin ? bin : "/tmp/fleet", packages);
                (void)py_shell(cmd);
            }
        }
    return 0;
}

#endif
