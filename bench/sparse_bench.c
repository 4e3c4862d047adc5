/* sparse_bench: the learner's update of the MinAtar configs' MLP on observations with few
 * values set. MinAtar's observations are 0/1 planes; the MLP's first layer, which holds
 * most of the network's arithmetic, takes them as sparse inputs (kernels/dense_sparse.h)
 * when at most 1 / 4 of a batch's values are set, and runs oneDNN's dense product
 * otherwise. This prints:
 *
 *   1. the share of values set in each MinAtar game's observations under random play
 *      (full action set, sticky actions 0.1, difficulty ramping): the mean and the
 *      largest over --steps steps;
 *   2. updates/s of `dense(128) relu dense(128) relu dueling` over Breakout's (10, 10, 4)
 *      planes, 6 actions, batch 128, Adam, double DQN (learner/dqn.h), on one thread,
 *      the network's kernels as the learner's (oneDNN's backend where built): on batches
 *      of Breakout observations from random play, then on random planes with each
 *      --densities share of values set (above 1 / 4 the first layer runs the dense
 *      product, so those rows are the dense update's speed). Each row: the whole run's
 *      rate and its best window's (windows of at least 0.1 s and 10 updates). Denormal
 *      floats are flushed to zero as the learner does by default (learner.flush_denormals,
 *      kernels/fpmode.h); --denormals keep computes with them. The observations go in as
 *      the learner takes replay's MinAtar batches: uint8 planes of 0 and 1 with the
 *      network's input scale 255 (model.input_scale in configs/minatar-*.ini), which the
 *      oneDNN backend lists straight from the bytes (--obs float32: planes of 0.0 and 1.0
 *      floats at scale 1, copied into the network's layout first).
 *
 *   sparse_bench [--seconds S] [--steps N] [--densities D1,D2,...] [--denormals flush|keep]
 *                [--obs uint8|float32] [--json]
 *   (defaults: 3 s a row, 20000 steps a game, 0.02,0.05,0.08,0.12,0.2,0.25,0.3,0.5, flush, uint8) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "bench/flops.h"
#include "common/clock.h"
#include "common/rng.h"
#include "envs/core/env.h"
#include "envs/minatar/minatar.h"
#include "kernels/fpmode.h"
#include "kernels/optim.h"
#include "kernels/qnet.h"
#include "learner/dqn.h"

#define SPEC "dense(128) relu dense(128) relu dueling"
#define BATCH 128
#define ACTIONS 6
#define MAX_DENSITIES 16

/* One game under random play: the mean and largest share of observation values set over
 * `steps` steps. With keep, the observations of every `every`-th step go into keep (keep_n
 * of them, as floats), for the update rows. */
static int game_density(const fl_env_def_t *def, long steps, double *mean, double *most, float *keep, int keep_n,
                        int every) {
    void *state = calloc(1, def->state_size);
    const size_t D = fl_env_obs_size(def);
    uint8_t *obs = malloc(D);
    if (!state || !obs) {
        free(state), free(obs);
        return -1;
    }
    fl_env_options_t o = {.sticky_prob = 0.1f, .difficulty_ramping = 1, .args = ""};
    if (def->configure && def->configure(state, &o) != 0) {
        free(state), free(obs);
        return -1;
    }
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    def->reset(state, &rng, obs);
    double sum = 0;
    *most = 0;
    int kept = 0;
    for (long i = 0; i < steps; i++) {
        size_t set = 0;
        for (size_t k = 0; k < D; k++) set += obs[k] != 0;
        const double share = (double)set / (double)D;
        sum += share;
        if (share > *most) *most = share;
        if (keep && kept < keep_n && i % every == 0) {
            for (size_t k = 0; k < D; k++) keep[(size_t)kept * D + k] = (float)obs[k];
            kept++;
        }
        float reward;
        int term;
        def->step(state, &rng, (int)fl_rng_below(&rng, (uint64_t)def->num_actions), obs, &reward, &term);
        if (term) def->reset(state, &rng, obs);
    }
    *mean = sum / (double)steps;
    free(state), free(obs);
    return keep && kept < keep_n ? -1 : 0;
}

typedef struct update {
    fl_dqn_t *dqn;
    fl_qnet_t *online, *target;
    fl_optim_t *opt;
    fl_dqn_batch_t b;
    float prio[BATCH];
} update_t;

/* updates/s (whole run; best window in *best) of the update on obs and next (BATCH x D
 * each); < 0 on failure. */
static double update_rate(update_t *u, double seconds, double *best) {
    fl_err_t e;
    fl_err_init(&e);
    for (int k = 0; k < 20; k++) /* warm-up: plans built, caches filled */
        if (fl_dqn_step(u->dqn, u->online, u->target, u->opt, &u->b, u->prio, NULL, &e) != FL_OK) {
            fprintf(stderr, "sparse_bench: update: %s\n", e.msg);
            return -1;
        }
    fl_bench_rate_t r = {0};
    const double t0 = fl_clock_sec();
    do {
        if (fl_dqn_step(u->dqn, u->online, u->target, u->opt, &u->b, u->prio, NULL, &e) != FL_OK) {
            fprintf(stderr, "sparse_bench: update: %s\n", e.msg);
            return -1;
        }
        fl_bench_rate_step(&r, fl_clock_sec() - t0);
    } while (r.t < seconds || r.n < 2);
    *best = fl_bench_rate_best(&r);
    return fl_bench_rate_whole(&r);
}

/* The batch of obs and next (BATCH x D floats, 0 or 1) as u's: the floats, or (raw) as
 * uint8 in o8 and n8. */
static void set_batch(update_t *u, int raw, const float *obs, const float *next, uint8_t *o8, uint8_t *n8, size_t D) {
    u->b.obs = obs;
    u->b.next_obs = next;
    u->b.obs_raw = u->b.next_raw = NULL;
    if (!raw) return;
    for (size_t i = 0; i < BATCH * D; i++) {
        o8[i] = obs[i] != 0.0f;
        n8[i] = next[i] != 0.0f;
    }
    u->b.raw_dtype = FL_DTYPE_UINT8;
    u->b.obs_raw = o8;
    u->b.next_raw = n8;
}

static double share_set(const float *x, size_t n) {
    size_t set = 0;
    for (size_t i = 0; i < n; i++) set += x[i] != 0.0f;
    return (double)set / (double)n;
}

/* How the online network's first layer ran its last forward, from its plan's description. */
static const char *first_layer(const fl_qnet_t *n) {
    char desc[4096];
    if (fl_qnet_describe_kernels(n, BATCH, desc, sizeof desc) == 0) return "-";
    if (strstr(desc, "last forward: sparse")) return "sparse";
    if (strstr(desc, "last forward: dense")) return "dense";
    return "dense (no sparse step)";
}

static void row(int json, long cores, const char *name, double share, double rate, double best, const char *how,
                int flush, int raw) {
    if (json)
        printf(
            "{\"bench\":\"sparse\",\"case\":\"%s\",\"share_set\":%.4f,\"value\":%.6g,\"best\":%.6g,"
            "\"unit\":\"updates/s\",\"first_layer\":\"%s\",\"denormals\":\"%s\",\"obs\":\"%s\",\"batch\":%d,"
            "\"threads\":1,\"cores\":%ld}\n",
            name, share, rate, best, how, flush ? "flush" : "keep", raw ? "uint8" : "float32", BATCH, cores);
    else
        printf("  %-22s %8.1f%% %12.1f %12.1f  %s\n", name, 100 * share, rate, best, how);
    fflush(stdout);
}

int main(int argc, char **argv) {
    int json = 0;
    double seconds = 3.0;
    long steps = 20000;
    double dens[MAX_DENSITIES] = {0.02, 0.05, 0.08, 0.12, 0.2, 0.25, 0.3, 0.5};
    int nd = 8, flush = 1, raw = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--denormals") == 0 && i + 1 < argc &&
                   (!strcmp(argv[i + 1], "flush") || !strcmp(argv[i + 1], "keep"))) {
            flush = !strcmp(argv[++i], "flush");
        } else if (strcmp(argv[i], "--obs") == 0 && i + 1 < argc &&
                   (!strcmp(argv[i + 1], "uint8") || !strcmp(argv[i + 1], "float32"))) {
            raw = !strcmp(argv[++i], "uint8");
        } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc && atof(argv[i + 1]) > 0) {
            seconds = atof(argv[++i]);
        } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc && atol(argv[i + 1]) >= 2000) {
            steps = atol(argv[++i]);
        } else if (strcmp(argv[i], "--densities") == 0 && i + 1 < argc) {
            nd = 0;
            for (char *s = argv[++i], *end; *s && nd < MAX_DENSITIES; s = *end ? end + 1 : end) {
                dens[nd] = strtod(s, &end);
                if (end == s || !(dens[nd] > 0 && dens[nd] <= 1) || (*end && *end != ',')) {
                    fprintf(stderr, "sparse_bench: --densities wants shares in (0, 1], comma-separated\n");
                    return 2;
                }
                nd++;
            }
        } else {
            fprintf(stderr,
                    "usage: sparse_bench [--seconds S] [--steps N (>= 2000)] [--densities D1,D2,...] "
                    "[--denormals flush|keep] [--obs uint8|float32] [--json]\n");
            return 2;
        }
    }
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    openblas_set_num_threads(1);
    flush = fl_fp_flush_denormals(flush) && flush; /* 0 where the CPU cannot */

    /* 1. the games' observations */
    const fl_env_def_t *games[] = {&fl_env_minatar_breakout, &fl_env_minatar_asterix, &fl_env_minatar_freeway,
                                   &fl_env_minatar_seaquest, &fl_env_minatar_space_invaders};
    const size_t D = fl_env_obs_size(&fl_env_minatar_breakout);
    float *real = malloc(2 * BATCH * D * sizeof(float));
    float *obs = malloc(BATCH * D * sizeof(float)), *next = malloc(BATCH * D * sizeof(float));
    uint8_t *o8 = malloc(BATCH * D), *n8 = malloc(BATCH * D);
    if (!real || !obs || !next || !o8 || !n8) return 1;
    if (!json)
        printf(
            "sparse_bench: MinAtar observations under random play, %ld steps a game; %ld cores online\n"
            "  %-22s %9s %9s\n",
            steps, cores, "game", "mean set", "most set");
    for (size_t g = 0; g < sizeof games / sizeof *games; g++) {
        double mean, most;
        const int breakout = games[g] == &fl_env_minatar_breakout;
        if (game_density(games[g], steps, &mean, &most, breakout ? real : NULL, 2 * BATCH,
                         (int)(steps / (2 * BATCH))) != 0) {
            fprintf(stderr, "sparse_bench: %s: setup failed\n", games[g]->name);
            return 1;
        }
        if (json)
            printf(
                "{\"bench\":\"sparse\",\"case\":\"%s\",\"mean_set\":%.4f,\"most_set\":%.4f,\"steps\":%ld,"
                "\"cores\":%ld}\n",
                games[g]->name, mean, most, steps, cores);
        else
            printf("  %-22s %8.1f%% %8.1f%%\n", games[g]->name, 100 * mean, 100 * most);
    }

    /* 2. updates */
    fl_err_t e;
    fl_err_init(&e);
    update_t u = {0};
    const fl_dqn_config_t dc = {BATCH, ACTIONS, 1.0f, 10.0f};
    fl_optim_config_t oc = fl_optim_config_default(FL_OPTIM_ADAM);
    oc.lr = 0.00025f;
    if (fl_qnet_create_image(SPEC, 10, 10, 4, ACTIONS, BATCH, &u.online, &e) != FL_OK ||
        fl_qnet_create_image(SPEC, 10, 10, 4, ACTIONS, BATCH, &u.target, &e) != FL_OK ||
        fl_bench_apply_backend(u.online, &e) != FL_OK || fl_bench_apply_backend(u.target, &e) != FL_OK ||
        fl_optim_create(&oc, fl_qnet_num_params(u.online), &u.opt, &e) != FL_OK ||
        fl_dqn_create(&dc, &u.dqn, &e) != FL_OK) {
        fprintf(stderr, "sparse_bench: %s\n", e.msg);
        return 1;
    }
    fl_rng_t rng;
    fl_rng_init(&rng, 3);
    fl_qnet_init(u.online, &rng);
    fl_qnet_copy_params(u.target, u.online);
    if (raw) { /* bytes of 0 and 1, x 1/255 as every uint8 observation, then x 255 */
        fl_qnet_set_input_scale(u.online, 255.0f);
        fl_qnet_set_input_scale(u.target, 255.0f);
    }
    float rew[BATCH], disc[BATCH], w[BATCH];
    int32_t act[BATCH];
    for (int b = 0; b < BATCH; b++) {
        act[b] = (int32_t)fl_rng_below(&rng, ACTIONS);
        rew[b] = fl_rng_below(&rng, 10) == 0 ? 1.0f : 0.0f;
        disc[b] = 0.99f * 0.99f * 0.99f;
        w[b] = (float)fl_rng_uniform(&rng, 0.3, 1.0);
    }
    u.b = (fl_dqn_batch_t){.size = BATCH, .actions = act, .rewards = rew, .discounts = disc, .weights = w};
    if (!json)
        printf(
            "updates of \"%s\" over (10, 10, 4) %s, batch %d, Adam, 1 thread, %s kernels, denormals %s, "
            "%.3g s a row:\n"
            "  %-22s %9s %12s %12s  first layer\n",
            SPEC, raw ? "uint8 x 255" : "float32", BATCH, fl_bench_backend_name(), flush ? "flushed to 0" : "kept",
            seconds, "observations", "set", "updates/s", "best window");
    memcpy(obs, real, BATCH * D * sizeof(float));
    memcpy(next, real + BATCH * D, BATCH * D * sizeof(float));
    set_batch(&u, raw, obs, next, o8, n8, D);
    double best, rate = update_rate(&u, seconds, &best);
    if (rate < 0) return 1;
    row(json, cores, "breakout (random play)", (share_set(obs, BATCH * D) + share_set(next, BATCH * D)) / 2, rate, best,
        first_layer(u.online), flush, raw);
    for (int d = 0; d < nd; d++) {
        for (size_t i = 0; i < BATCH * D; i++) {
            obs[i] = fl_rng_double(&rng) < dens[d] ? 1.0f : 0.0f;
            next[i] = fl_rng_double(&rng) < dens[d] ? 1.0f : 0.0f;
        }
        set_batch(&u, raw, obs, next, o8, n8, D);
        if ((rate = update_rate(&u, seconds, &best)) < 0) return 1;
        char name[32];
        snprintf(name, sizeof name, "random, %.0f%% set", 100 * dens[d]);
        row(json, cores, name, (share_set(obs, BATCH * D) + share_set(next, BATCH * D)) / 2, rate, best,
            first_layer(u.online), flush, raw);
    }
    fl_dqn_destroy(u.dqn);
    fl_optim_destroy(u.opt);
    fl_qnet_destroy(u.online);
    fl_qnet_destroy(u.target);
    free(real), free(obs), free(next), free(o8), free(n8);
    return 0;
}
