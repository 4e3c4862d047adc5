/* backend_load: the GPU learner's library, loaded when a learner asks for it (see
 * backend.h). Thread-safety: fl__learner_backend_cuda_load may be called from any
 * thread; it loads once. */
#include "learner/backend.h"

#include <stdio.h>
#include <string.h>

#ifdef FLEET_HAVE_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef FLEET_CUDA_LIBDIR
#define FLEET_CUDA_LIBDIR "lib"
#endif
#define LIB_NAME "libfleet_cuda.so"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const fl__learner_backend_t *g_backend;
static char g_why[1024];

/* Tries one path; 1 when it loaded and held the backend. */
static int try_path(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        size_t used = strlen(g_why);
        snprintf(g_why + used, sizeof g_why - used, "%s%s", used ? "; " : "", e ? e : path);
        return 0;
    }
    g_backend = (const fl__learner_backend_t *)dlsym(h, "fl__learner_backend_cuda");
    if (!g_backend) {
        size_t used = strlen(g_why);
        snprintf(g_why + used, sizeof g_why - used, "%s%s has no fl__learner_backend_cuda", used ? "; " : "", path);
        dlclose(h);
        return 0;
    }
    return 1;
}

static void load_once(void) {
    const char *env = getenv("FLEET_CUDA_LIB");
    if (env && *env) {
        try_path(env);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            const char *rel[] = {"../lib", "../" FLEET_CUDA_LIBDIR, "."};
            for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
                if (i == 1 && strcmp(FLEET_CUDA_LIBDIR, "lib") == 0) continue; /* tried as ../lib */
                char path[PATH_MAX + 64];
                snprintf(path, sizeof path, "%s/%s/" LIB_NAME, exe, rel[i]);
                if (access(path, F_OK) == 0 && try_path(path)) return;
            }
        }
    }
    if (try_path(LIB_NAME)) return;
}

const fl__learner_backend_t *fl__learner_backend_cuda_load(char *why, size_t why_size) {
    pthread_once(&g_once, load_once);
    if (!g_backend && why && why_size)
        snprintf(why, why_size,
                 "the GPU learner's library " LIB_NAME
                 " did not load (%s; expected in the lib/ folder beside the "
                 "program's bin/, or named by FLEET_CUDA_LIB)",
                 g_why);
    return g_backend;
}

#else

const fl__learner_backend_t *fl__learner_backend_cuda_load(char *why, size_t why_size) {
    if (why && why_size)
        snprintf(why, why_size,
                 "fleet was built without CUDA (nvcc and cuDNN under /usr/local/cuda; expected cpu, or auto)");
    return NULL;
}

#endif
