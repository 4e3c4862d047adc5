/* kernels_bench: CPU throughput of the Q-network.
 *
 * Model "dense(256) relu dense(256) relu dueling", obs_dim 4, 2 actions (CartPole-sized),
 * BLAS on one thread as in the actors:
 *   forward_b1     actor inference, one observation per call      (samples/s)
 *   forward_b64    actor inference over a vector of 64 envs       (samples/s)
 *   train_b512     learner step: forward + backward + Adam, B 512 (steps/s)
 * and Adam's step alone over the 68,743 parameters of configs/minatar-breakout.ini's MLP
 * with every gradient 1e-21, whose square (the second moment's input) is a denormal float:
 *   adam_denormal_kept     computed with denormals (IEEE gradual underflow)  (steps/s)
 *   adam_denormal_flushed  denormals flushed to 0, as a learner does by default
 *                          (learner.flush_denormals, kernels/fpmode.h)           (steps/s)
 * Prints a table, or with --json one JSON object per line.
 * Usage: kernels_bench [--json] [--seconds S] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/rng.h"
#include "kernels/fpmode.h"
#include "kernels/optim.h"
#include "kernels/qnet.h"

#define SPEC "dense(256) relu dense(256) relu dueling"
#define OBS_DIM 4
#define ACTIONS 2

typedef struct result {
    const char *name;
    double value;
    const char *unit;
} result_t;

static fl_qnet_t *make_net(int max_batch) {
    fl_qnet_t *n = NULL;
    fl_err_t err = {0};
    if (fl_qnet_create(SPEC, OBS_DIM, ACTIONS, max_batch, &n, &err) != FL_OK) {
        fprintf(stderr, "kernels_bench: %s\n", err.msg);
        exit(1);
    }
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    fl_qnet_init(n, &rng);
    return n;
}

static void fill(float *a, size_t count, fl_rng_t *rng) {
    for (size_t i = 0; i < count; i++) a[i] = (float)fl_rng_uniform(rng, -1, 1);
}

/* Runs `iter` until `seconds` have passed (after a short warm-up); returns calls/s. */
typedef void (*iter_fn)(void *ctx);

static double rate(iter_fn iter, void *ctx, double seconds) {
    const double warm_end = fl_clock_sec() + 0.1 * seconds;
    while (fl_clock_sec() < warm_end) iter(ctx);
    long calls = 0;
    const double t0 = fl_clock_sec();
    double t = t0;
    do {
        for (int k = 0; k < 8; k++) iter(ctx);
        calls += 8;
        t = fl_clock_sec();
    } while (t - t0 < seconds);
    return (double)calls / (t - t0);
}

typedef struct fwd_ctx {
    fl_qnet_t *net;
    const float *obs;
    float *q;
    int B;
} fwd_ctx_t;

static void fwd_iter(void *p) {
    fwd_ctx_t *c = p;
    fl_qnet_forward(c->net, c->obs, c->B, c->q);
}

typedef struct train_ctx {
    fl_qnet_t *net;
    fl_optim_t *opt;
    const float *obs, *dq;
    float *q;
    int B;
} train_ctx_t;

static void train_iter(void *p) {
    train_ctx_t *c = p;
    fl_qnet_forward(c->net, c->obs, c->B, c->q);
    fl_qnet_backward(c->net, c->dq, c->B);
    fl_optim_step(c->opt, fl_qnet_params(c->net), fl_qnet_grads(c->net));
}

typedef struct adam_ctx {
    fl_optim_t *opt;
    float *p;
    const float *g;
} adam_ctx_t;

static void adam_iter(void *p) {
    adam_ctx_t *c = p;
    fl_optim_step(c->opt, c->p, c->g);
}

/* Adam's steps/s over n parameters with gradients of 1e-21, denormals flushed or kept. */
static double adam_denormal_rate(size_t n, int flush, double seconds) {
    fl_optim_config_t cfg = fl_optim_config_default(FL_OPTIM_ADAM);
    fl_optim_t *opt = NULL;
    float *p = calloc(n, sizeof *p), *g = malloc(n * sizeof *g);
    if (!p || !g || fl_optim_create(&cfg, n, &opt, NULL) != FL_OK) {
        fprintf(stderr, "kernels_bench: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) g[i] = 1e-21f;
    const int was = fl_fp_denormals_flushed();
    fl_fp_flush_denormals(flush);
    adam_ctx_t c = {opt, p, g};
    const double r = rate(adam_iter, &c, seconds);
    fl_fp_flush_denormals(was);
    fl_optim_destroy(opt);
    free(p);
    free(g);
    return r;
}

int main(int argc, char **argv) {
    int json = 0;
    double seconds = 1.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            seconds = atof(argv[++i]);
            if (!(seconds > 0)) {
                fprintf(stderr, "kernels_bench: --seconds %s: expected a positive number\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: %s [--json] [--seconds S]\n", argv[0]);
            return 2;
        }
    }
    openblas_set_num_threads(1);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);

    fl_rng_t rng;
    fl_rng_init(&rng, 2);
    enum { BIG = 512 };
    float *obs = malloc(sizeof(float) * BIG * OBS_DIM), *q = malloc(sizeof(float) * BIG * ACTIONS);
    float *dq = malloc(sizeof(float) * BIG * ACTIONS);
    if (!obs || !q || !dq) {
        fprintf(stderr, "kernels_bench: out of memory\n");
        return 1;
    }
    fill(obs, (size_t)BIG * OBS_DIM, &rng);
    fill(dq, (size_t)BIG * ACTIONS, &rng);

    enum { NRES = 5 };
    result_t res[NRES];
    fl_qnet_t *actor = make_net(64);
    fwd_ctx_t f1 = {actor, obs, q, 1}, f64 = {actor, obs, q, 64};
    res[0] = (result_t){"forward_b1", rate(fwd_iter, &f1, seconds) * 1, "samples/s"};
    res[1] = (result_t){"forward_b64", rate(fwd_iter, &f64, seconds) * 64, "samples/s"};

    fl_qnet_t *learner = make_net(BIG);
    fl_optim_t *opt = NULL;
    fl_optim_config_t cfg = fl_optim_config_default(FL_OPTIM_ADAM);
    cfg.lr = 1e-6f; /* keep the parameters (and so the work) steady */
    fl_err_t err = {0};
    if (fl_optim_create(&cfg, fl_qnet_num_params(learner), &opt, &err) != FL_OK) {
        fprintf(stderr, "kernels_bench: %s\n", err.msg);
        return 1;
    }
    train_ctx_t tr = {learner, opt, obs, dq, q, BIG};
    res[2] = (result_t){"train_b512", rate(train_iter, &tr, seconds), "steps/s"};
    /* the parameter count of configs/minatar-breakout.ini's MLP over (10, 10, 4), 6 actions */
    fl_qnet_t *breakout = NULL;
    if (fl_qnet_create("dense(128) relu dense(128) relu dueling", 400, 6, 1, &breakout, &err) != FL_OK) {
        fprintf(stderr, "kernels_bench: %s\n", err.msg);
        return 1;
    }
    const size_t breakout_mlp = fl_qnet_num_params(breakout); /* 68,743 */
    fl_qnet_destroy(breakout);
    res[3] = (result_t){"adam_denormal_kept", adam_denormal_rate(breakout_mlp, 0, seconds), "steps/s"};
    res[4] = (result_t){"adam_denormal_flushed", adam_denormal_rate(breakout_mlp, 1, seconds), "steps/s"};

    if (json) {
        for (int i = 0; i < NRES; i++)
            printf("{\"bench\":\"kernels\",\"case\":\"%s\",\"value\":%.1f,\"unit\":\"%s\",\"cores\":%ld}\n",
                   res[i].name, res[i].value, res[i].unit, cores);
    } else {
        printf("kernels: %s, obs_dim %d, %d actions, %zu params; BLAS threads 1; cores %ld\n", SPEC, OBS_DIM, ACTIONS,
               fl_qnet_num_params(learner), cores);
        printf("%-22s %14s  %s\n", "case", "value", "unit");
        for (int i = 0; i < 3; i++) printf("%-22s %14.1f  %s\n", res[i].name, res[i].value, res[i].unit);
        printf("%-22s %14.1f  %s\n", "(train_b512)", res[2].value * BIG, "samples/s");
        for (int i = 3; i < NRES; i++) printf("%-22s %14.1f  %s\n", res[i].name, res[i].value, res[i].unit);
        printf("(Adam over %zu parameters, every gradient 1e-21)\n", breakout_mlp);
    }
    fl_optim_destroy(opt);
    fl_qnet_destroy(learner);
    fl_qnet_destroy(actor);
    free(obs);
    free(q);
    free(dq);
    return 0;
}
