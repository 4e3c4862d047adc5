/* test_gridgame: loads libgridgame.so the way fleet does (dlopen + fl_env_plugin) and
 * checks the game's rules: the declared spaces, a reset, walls, the goal, the options
 * and that walking straight to the goal beats a random policy. Usage:
 * test_gridgame path/to/libgridgame.so; exit status 0 when every check passes. */
#include <fleet/env.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                              \
        }                                                                            \
    } while (0)

/* The agent's cell in a (5, 5) one-hot observation, or -1 if it is not one-hot. */
static int agent_cell(const float *obs) {
    int cell = -1, ones = 0;
    for (int i = 0; i < 25; i++) {
        if (obs[i] == 1.0f)
            cell = i, ones++;
        else if (obs[i] != 0.0f)
            return -1;
    }
    return ones == 1 ? cell : -1;
}

/* Mean return over `episodes` episodes of a policy: random, or straight to the goal. */
static double mean_return(const fl_env_def_t *def, void *state, fl_rng_t *rng, int greedy, int episodes) {
    float obs[25];
    double total = 0.0;
    for (int e = 0; e < episodes; e++) {
        def->reset(state, rng, obs);
        for (int t = 0; t < def->max_episode_steps; t++) {
            int cell = agent_cell(obs);
            int a = greedy ? (cell / 5 < 4 ? 1 : 3) : (int)fl_env_rng_below(rng, 4);
            float r;
            int term;
            def->step(state, rng, a, obs, &r, &term);
            total += r;
            if (term) break;
        }
    }
    return total / episodes;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s path/to/libgridgame.so\n", argv[0]);
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    const fl_env_def_t *(*plugin)(void);
    void *sym = dlsym(h, FL_ENV_PLUGIN_SYMBOL);
    CHECK(sym != NULL);
    if (!sym) return 1;
    memcpy(&plugin, &sym, sizeof plugin);
    const fl_env_def_t *def = plugin();
    CHECK(def != NULL);
    if (!def) return 1;

    CHECK(def->abi_version == FL_ENV_ABI_VERSION);
    CHECK(strcmp(def->name, "gridgame") == 0);
    CHECK(def->obs.dtype == FL_DTYPE_FLOAT32);
    CHECK(def->obs.rank == 2 && def->obs.shape[0] == 5 && def->obs.shape[1] == 5);
    CHECK(def->num_actions == 4);
    CHECK(def->max_episode_steps == 50);
    CHECK(def->reset && def->step && def->configure);

    void *state = calloc(1, def->state_size);
    fl_rng_t rng = {{0x243f6a8885a308d3ULL, 0x13198a2e03707344ULL, 0xa4093822299f31d0ULL, 0x082efa98ec4e6c89ULL}};
    fl_env_options_t opts = {0.0f, 0, 0, ""};
    CHECK(def->configure(state, &opts) == 0);

    /* Resets land on every non-goal cell and never on the goal. */
    float obs[25];
    int seen[25] = {0};
    for (int i = 0; i < 2000; i++) {
        def->reset(state, &rng, obs);
        int cell = agent_cell(obs);
        CHECK(cell >= 0 && cell != 24);
        if (cell >= 0) seen[cell]++;
    }
    for (int c = 0; c < 24; c++) CHECK(seen[c] > 0);

    /* Walls: from row 0, "up" stays; walking down then right reaches the goal. */
    def->reset(state, &rng, obs);
    int cell = agent_cell(obs);
    float r;
    int term = 0;
    for (int k = 0; k < 5; k++) def->step(state, &rng, 0, obs, &r, &term);
    CHECK(agent_cell(obs) == cell % 5); /* top row, same column */
    CHECK(r == -0.1f && term == 0);
    for (int k = 0; k < 4; k++) def->step(state, &rng, 1, obs, &r, &term);
    CHECK(agent_cell(obs) / 5 == 4 && term == 0);
    for (int k = 0; k < 4 && !term; k++) def->step(state, &rng, 3, obs, &r, &term);
    CHECK(agent_cell(obs) == 24);
    CHECK(term == 1 && r == 1.0f);

    /* Options: only "" and "slip=P" with P in [0, 1]. */
    const char *bad[] = {"slip=2", "slip=", "slip=0.5x", "speed=3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        opts.args = bad[i];
        CHECK(def->configure(state, &opts) == -1);
    }
    opts.args = "slip=0.25";
    CHECK(def->configure(state, &opts) == 0);
    opts.args = "";
    CHECK(def->configure(state, &opts) == 0);

    /* The straight path is close to the best mean return (0.68); random is far below. */
    double best = mean_return(def, state, &rng, 1, 4000);
    double rnd = mean_return(def, state, &rng, 0, 4000);
    printf("gridgame: straight-to-goal mean return %.3f, random policy %.3f\n", best, rnd);
    CHECK(best > 0.6 && best < 0.75);
    CHECK(rnd < -1.0);

    free(state);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
