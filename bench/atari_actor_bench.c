/* atari_actor_bench: what an actor's loop makes of Atari on this machine: a vector of
 * atari-<game> instances under the Nature preprocessing (noop(30) frameskip(4)
 * resize(84,84) framestack(4)), one batched forward of the Nature CNN per vector step
 * (conv(32,8,4) relu conv(64,4,2) relu conv(64,3,1) relu flatten dense(512) relu dueling,
 * random weights), epsilon-greedy actions (0.01), as fleet's actors do (without replay).
 * P processes of one thread each run side by side (actors are single-threaded); the
 * figure is their summed agent steps/s and emulator frames/s (4 a step).
 *
 *   build/bench/atari_actor_bench [GAME] [--envs N] [--procs P] [--seconds S]
 *   (defaults: breakout, 16 envs, one process per core, 10 s) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actors/actor.h"
#include "common/clock.h"
#include "common/dtype.h"
#include "common/rng.h"
#include "envs/registry.h"
#include "envs/core/wrappers.h"
#include "kernels/qnet.h"

#define NATURE_CNN "conv(32,8,4) relu conv(64,4,2) relu conv(64,3,1) relu flatten dense(512) relu dueling"
#define SPEC "noop(30) frameskip(4) resize(84,84) framestack(4)"

void openblas_set_num_threads(int);

/* One process's loop; its agent steps per second. */
static double run(const char *game, int n, double seconds, uint64_t seed) {
    openblas_set_num_threads(1);
    char name[96];
    snprintf(name, sizeof name, "atari-%s", game);
    fl_wrapped_env_t *w = NULL;
    fl_wrapvec_t *v = NULL;
    fl_qnet_t *net = NULL;
    fl_err_t err;
    fl_err_init(&err);
    const fl_env_def_t *inner = fl_env_find(name);
    if (!inner || fl_wrapped_env_create(inner, SPEC, &w, &err) != FL_OK ||
        fl_wrapvec_create(w, n, seed, &v, &err) != FL_OK)
        return 0;
    const fl_env_def_t *d = fl_wrapped_env_info(w);
    fl_env_options_t o = {.sticky_prob = 0, .args = ""};
    if (fl_wrapvec_configure(v, &o, &err) != FL_OK ||
        fl_qnet_create_for_obs(NATURE_CNN, d->obs.rank, d->obs.shape, d->num_actions, n, &net, &err) != FL_OK)
        return 0;
    fl_rng_t rng;
    fl_rng_init(&rng, seed);
    fl_qnet_init(net, &rng);
    fl_qnet_set_input_scale(net, 255.0f);
    fl_qnet_set_inference(net, 1);
    size_t ob = fl_env_obs_size(d), oc = fl_env_obs_count(d);
    uint8_t *obs = malloc((size_t)n * ob);
    float *x = malloc((size_t)n * oc * sizeof *x), *q = malloc((size_t)n * (size_t)d->num_actions * sizeof *q);
    int32_t *a = malloc((size_t)n * sizeof *a);
    float *r = malloc((size_t)n * sizeof *r);
    uint8_t *term = malloc((size_t)n), *trunc = malloc((size_t)n);
    fl_wrapvec_reset(v, obs);
    uint64_t steps = 0;
    double t0 = fl_clock_sec(), t = t0;
    while ((t = fl_clock_sec()) - t0 < seconds) {
        fl_dtype_to_float(d->obs.dtype, obs, (size_t)n * oc, x);
        fl_qnet_forward(net, x, n, q);
        fl_actor_select_actions(q, n, d->num_actions, 0.01, &rng, a);
        if (fl_wrapvec_step(v, a, obs, r, term, trunc, NULL, NULL, &err) != FL_OK) break;
        steps += (uint64_t)n;
    }
    fl_wrapvec_destroy(v);
    fl_wrapped_env_destroy(w);
    fl_qnet_destroy(net);
    free(obs), free(x), free(q), free(a), free(r), free(term), free(trunc);
    return steps / (t - t0);
}

int main(int argc, char **argv) {
    const char *game = "breakout";
    int n = 16, procs = (int)sysconf(_SC_NPROCESSORS_ONLN);
    double seconds = 10;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--envs") == 0 && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (strcmp(argv[i], "--procs") == 0 && i + 1 < argc)
            procs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else
            game = argv[i];
    }
    int fds[64][2];
    pid_t pids[64];
    if (procs < 1 || procs > 64) procs = 1;
    for (int p = 0; p < procs; p++) {
        if (pipe(fds[p]) != 0) return 1;
        pids[p] = fork();
        if (pids[p] == 0) {
            double rate = run(game, n, seconds, 100 + (uint64_t)p);
            if (write(fds[p][1], &rate, sizeof rate) != sizeof rate) _exit(1);
            _exit(0);
        }
        close(fds[p][1]);
    }
    double total = 0;
    for (int p = 0; p < procs; p++) {
        double rate = 0;
        if (read(fds[p][0], &rate, sizeof rate) != sizeof rate) rate = 0;
        total += rate;
        waitpid(pids[p], NULL, 0);
    }
    printf(
        "atari actor loop: %s, %d processes x %d envs, Nature preprocessing + Nature CNN forward, %ld cores: "
        "%.0f agent steps/s, %.0f frames/s\n",
        game, procs, n, sysconf(_SC_NPROCESSORS_ONLN), total, 4 * total);
    return total > 0 ? 0 : 1;
}
