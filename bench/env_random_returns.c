/* env_random_returns: the mean episode return of a uniformly random policy on each
 * built-in env (the baseline a learning curve must beat), with the experiment defaults
 * env.sticky_actions = 0.1 and env.difficulty_ramping = on, each env's own time limit,
 * over K episodes from fixed seeds. Prints name, episodes, mean, standard error.
 *
 * Usage: env_random_returns [NAME...] [--episodes K] [--json] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rng.h"
#include "envs/registry.h"
#include "envs/core/vecenv.h"

#define NUM_ENVS 16

static int measure(const fl_env_def_t *def, int episodes, double *mean, double *sem) {
    fl_err_t err;
    fl_err_init(&err);
    fl_vecenv_t *ve = NULL;
    fl_env_options_t opts = {.sticky_prob = 0.1f, .difficulty_ramping = 1, .reference_rng = 0, .args = ""};
    if (fl_vecenv_create(def, NUM_ENVS, 2024, 0, &ve, &err) != FL_OK || fl_vecenv_configure(ve, &opts, &err) != FL_OK) {
        fprintf(stderr, "env_random_returns: %s\n", err.msg);
        fl_vecenv_destroy(ve);
        return -1;
    }
    size_t ob = fl_env_obs_size(def);
    unsigned char *obs = malloc(NUM_ENVS * ob);
    float rew[NUM_ENVS];
    uint8_t term[NUM_ENVS], trunc[NUM_ENVS];
    int32_t act[NUM_ENVS];
    fl_episode_stats_t done[NUM_ENVS];
    fl_rng_t rng;
    fl_rng_init(&rng, 7);
    fl_vecenv_reset(ve, obs);
    double sum = 0, sum2 = 0;
    int n = 0;
    while (n < episodes) {
        for (int i = 0; i < NUM_ENVS; i++) act[i] = (int32_t)fl_rng_below(&rng, (uint64_t)def->num_actions);
        if (fl_vecenv_step(ve, act, obs, rew, term, trunc, NULL, done, &err) != FL_OK) {
            fprintf(stderr, "env_random_returns: %s\n", err.msg);
            break;
        }
        for (int i = 0; i < NUM_ENVS && n < episodes; i++)
            if (term[i] || trunc[i]) {
                sum += done[i].episode_return;
                sum2 += done[i].episode_return * done[i].episode_return;
                n++;
            }
    }
    free(obs);
    fl_vecenv_destroy(ve);
    *mean = n ? sum / n : 0;
    double var = n > 1 ? (sum2 - n * *mean * *mean) / (n - 1) : 0;
    *sem = n > 1 ? sqrt(var > 0 ? var : 0) / sqrt(n) : 0;
    return n;
}

int main(int argc, char **argv) {
    int episodes = 1000, json = 0;
    const char *names[64];
    int nn = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--episodes") == 0 && i + 1 < argc) {
            episodes = atoi(argv[++i]);
            if (episodes < 1) {
                fprintf(stderr, "env_random_returns: --episodes expects a positive integer\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (argv[i][0] != '-' && nn < 64) {
            names[nn++] = argv[i];
        } else {
            fprintf(stderr, "usage: env_random_returns [NAME...] [--episodes K] [--json]\n");
            return 2;
        }
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (!json)
        printf(
            "env_random_returns: uniformly random actions, sticky 0.1, ramping on, %d episodes per env, %ld cores\n"
            "%-26s %9s %10s %8s\n",
            episodes, cores, "env", "episodes", "mean", "sem");
    int total = nn ? nn : fl_env_count();
    for (int k = 0; k < total; k++) {
        const fl_env_def_t *def = nn ? fl_env_find(names[k]) : fl_env_at(k);
        if (!def) {
            fprintf(stderr, "env_random_returns: unknown env '%s'\n", names[k]);
            return 2;
        }
        double mean, sem;
        int n = measure(def, episodes, &mean, &sem);
        if (n < 0) return 1;
        if (json)
            printf(
                "{\"bench\":\"env_random_returns\",\"case\":\"%s\",\"value\":%.4f,\"unit\":\"return\",\"sem\":%.4f,"
                "\"episodes\":%d,\"cores\":%ld}\n",
                def->name, mean, sem, n, cores);
        else
            printf("%-26s %9d %10.3f %8.3f\n", def->name, n, mean, sem);
    }
    return 0;
}
