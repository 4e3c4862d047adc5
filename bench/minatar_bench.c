/* minatar_bench: raw single-core step rate of the MinAtar games (one instance, one
 * thread, no vecenv). Every step takes a random full action, writes the observation and
 * resets on a terminal; sticky actions at the default 0.1. Measured with fleet's
 * generator and with the reference-compatible MT19937. Action choices are drawn before
 * the clock starts.
 *
 *   minatar_bench [--json] [--scale X]   (--scale multiplies the number of steps) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/rng.h"
#include "envs/core/env.h"
#include "envs/minatar/minatar.h"

#define ACTION_TABLE 65536

static double run_case(const fl_env_def_t *def, int reference, long steps, const uint8_t *actions) {
    void *state = calloc(1, def->state_size);
    uint8_t *obs = malloc(fl_env_obs_size(def));
    if (!state || !obs) {
        free(state);
        free(obs);
        return -1.0;
    }
    fl_env_options_t o = {.sticky_prob = 0.1f, .difficulty_ramping = 1, .reference_rng = reference, .args = ""};
    if (def->configure(state, &o) != 0) {
        free(state);
        free(obs);
        return -1.0;
    }
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    def->reset(state, &rng, obs);
    float reward;
    int term;
    double t0 = fl_clock_sec();
    for (long i = 0; i < steps; i++) {
        def->step(state, &rng, actions[i & (ACTION_TABLE - 1)] % def->num_actions, obs, &reward, &term);
        if (term) def->reset(state, &rng, obs);
    }
    double dt = fl_clock_sec() - t0;
    free(state);
    free(obs);
    return dt > 0 ? (double)steps / dt : 0.0;
}

int main(int argc, char **argv) {
    int json = 0;
    double scale = 1.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc) {
            scale = atof(argv[++i]);
            if (!(scale > 0)) {
                fprintf(stderr, "minatar_bench: --scale wants a positive number\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: minatar_bench [--json] [--scale X]\n");
            return 2;
        }
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long steps = (long)(2000000 * scale);
    if (steps < 1) steps = 1;
    static uint8_t actions[ACTION_TABLE];
    fl_rng_t pick;
    fl_rng_init(&pick, 7);
    for (int i = 0; i < ACTION_TABLE; i++) actions[i] = (uint8_t)fl_rng_below(&pick, 6);

    const fl_env_def_t *defs[] = {&fl_env_minatar_breakout, &fl_env_minatar_freeway};
    if (!json)
        printf("minatar: %ld steps per case, 1 thread, random actions, obs written every step, %ld cores online\n",
               steps, cores);
    for (size_t d = 0; d < sizeof defs / sizeof *defs; d++) {
        for (int reference = 0; reference <= 1; reference++) {
            double rate = run_case(defs[d], reference, steps, actions);
            if (rate < 0) {
                fprintf(stderr, "minatar_bench: %s: setup failed\n", defs[d]->name);
                return 1;
            }
            char name[96];
            snprintf(name, sizeof name, "%s/%s", defs[d]->name, reference ? "mt19937" : "fleet_rng");
            if (json)
                printf("{\"bench\":\"minatar\",\"case\":\"%s\",\"value\":%.6g,\"unit\":\"steps/s\",\"cores\":%ld}\n",
                       name, rate, cores);
            else
                printf("  %-34s %14.0f  steps/s\n", name, rate);
            fflush(stdout);
        }
    }
    return 0;
}
