/* inference_bench: the actor's per-step inference on ONE thread, fleet against PyTorch eager.
 *
 * One step is what an actor (actors/actor.c, step()) does with a vector of B envs'
 * observations before it steps them: fl_qnet_forward_obs on the B of them as the envs give
 * them (uint8 x 1/255, float32 as is: the oneDNN backend converts uint8 on the way into
 * its layout, the reference into a float buffer first), and picks the actions
 * (fl_actor_select_actions at epsilon 0: the greedy argmax; it still draws one uniform per
 * env, as the actor does at any epsilon). Not included: the env steps, the n-step builder
 * and the initial priorities (two forwards per transition, run when the actor flushes its
 * local buffer). The same observations are used every step, made before the clock starts.
 *
 * Networks (learner_bench's), with observations as the actor has them:
 *   mlp      CartPole: float32 (4) -> dense(256) relu dense(256) relu dueling, 2 actions
 *   minatar  MinAtar: uint8 0/1 planes (10, 10, 4), model.input_scale 255 as in
 *            configs/minatar-*.ini -> conv(16,3,1) relu flatten dense(128) relu dueling,
 *            6 actions
 *   nature   Atari: uint8 pixels (84, 84, 4) -> the Nature DQN torso, dense(512) relu
 *            dueling, 18 actions
 * Batches (envs per actor) 1, 4, 16, 64. fleet runs with OpenBLAS on 1 thread.
 *
 * PyTorch: bench/inference_bench_torch.py (next to this file's source, or --torch-script)
 * with /usr/bin/python3 (or --python PATH), one process per case, with
 * OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1 in its environment (with the settings of
 * fl_bench_torch_env, bench/flops.h, that let OpenBLAS and PyTorch use the CPU's vector
 * ISA) and torch.set_num_threads(1): float32, torch.inference_mode(); each step takes the numpy
 * batch (torch.from_numpy), converts it (float(), and / 255 for the Nature CNN's pixels;
 * MinAtar's 0/1 planes need no scale), runs the network, takes argmax and hands the
 * actions back as numpy. Images run in both of its memory formats, the faster counting
 * (column layout): contiguous, where they come as (C, H, W), the layout its convolutions
 * take by default, so it pays no transpose (fleet's envs give (H, W, C), and fleet's
 * network takes them as they are); and channels_last, where they come as the envs give
 * them and the network runs PyTorch's channels-last kernels.
 *
 * Columns: steps/s and samples/s (steps/s x B) of each side, the ratio of samples/s
 * (fleet over PyTorch), and GFLOP/s of each: samples/s x one sample's forward FLOP,
 * counted as bench/flops.h says. Then the same from each side's best window (bench/flops.h:
 * consecutive windows of at least 0.1 s and 10 steps, cut the same way on both sides):
 * the samples/s of the fastest window of each side and their ratio. On a machine shared
 * with other work the whole-run rates move with the neighbours' load; the best windows
 * show what each side does when the core is its own.
 *
 *   inference_bench [--json] [--seconds S] [--case mlp|minatar|nature|all] [--batches 1,4,16,64]
 *                   [--backend dnnl|onednn|reference]
 *                   [--no-torch] [--torch-script PATH] [--python PATH] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/actor.h"
#include "bench/flops.h"
#include "common/clock.h"
#include "common/dtype.h"
#include "common/rng.h"
#include "kernels/qnet.h"

#ifndef FL_SOURCE_DIR
#define FL_SOURCE_DIR "."
#endif

typedef struct netcase {
    const char *name, *spec;
    int rank, shape[3], actions;
    fl_dtype dtype;
    float input_scale;
} netcase_t;

static const netcase_t CASES[] = {
    {"mlp", "dense(256) relu dense(256) relu dueling", 1, {4, 0, 0}, 2, FL_DTYPE_FLOAT32, 1.0f},
    {"minatar", "conv(16,3,1) relu flatten dense(128) relu dueling", 3, {10, 10, 4}, 6, FL_DTYPE_UINT8, 255.0f},
    {"nature",
     "conv(32,8,4) relu conv(64,4,2) relu conv(64,3,1) relu flatten dense(512) relu dueling",
     3,
     {84, 84, 4},
     18,
     FL_DTYPE_UINT8,
     1.0f},
};
#define NUM_CASES (int)(sizeof CASES / sizeof CASES[0])
#define MAX_BATCHES 8

typedef struct opts {
    int json, torch;
    double seconds;
    int only; /* case index or -1 */
    int batches[MAX_BATCHES], n_batches;
    char script[1024];
    char python[1024];
    long cores;
    char torch_env[384]; /* fl_bench_torch_env's settings for every PyTorch run */
    char torch_why[384];
} opts_t;

/* One actor step's buffers. */
typedef struct actor_step {
    fl_qnet_t *net;
    fl_dtype dtype;
    int B, A;
    size_t count; /* observation elements of the batch */
    void *obs;    /* (B, obs_dim) of dtype */
    float *q;     /* (B, A) */
    int32_t *actions;
    fl_rng_t rng;
} actor_step_t;

static fl_status actor_step(actor_step_t *s, fl_err_t *e) {
    fl_status st = fl_qnet_forward_obs(s->net, s->dtype, s->obs, s->B, s->q);
    if (st != FL_OK) return fl_err_set(e, st, "Q-network forward of %d observations failed", s->B);
    fl_actor_select_actions(s->q, s->B, s->A, 0.0, &s->rng, s->actions);
    return FL_OK;
}

/* fleet's steps/s for one case and batch (the whole run's; its best window's into *best);
 * < 0 on failure. */
static double fleet_rate(const netcase_t *c, int B, double seconds, double *best) {
    openblas_set_num_threads(1);
    fl_err_t e;
    fl_err_init(&e);
    double rate = -1;
    actor_step_t s = {.dtype = c->dtype, .B = B, .A = c->actions};
    if (fl_qnet_create_for_obs(c->spec, c->rank, c->shape, c->actions, B, &s.net, &e) != FL_OK ||
        fl_bench_apply_backend(s.net, &e) != FL_OK)
        goto fail;
    fl_rng_init(&s.rng, 1);
    fl_qnet_init(s.net, &s.rng);
    fl_qnet_set_input_scale(s.net, c->input_scale);
    fl_qnet_set_inference(s.net, 1); /* as the actors set it */
    s.count = (size_t)B * (size_t)fl_qnet_obs_dim(s.net);
    s.obs = malloc(s.count * fl_dtype_size(c->dtype));
    s.q = malloc((size_t)B * (size_t)c->actions * sizeof(float));
    s.actions = malloc((size_t)B * sizeof(int32_t));
    if (!s.obs || !s.q || !s.actions) {
        fl_err_set(&e, FL_NO_MEMORY, "buffers for a batch of %d", B);
        goto fail;
    }
    for (size_t i = 0; i < s.count; i++) {
        if (c->dtype == FL_DTYPE_FLOAT32)
            ((float *)s.obs)[i] = (float)fl_rng_double(&s.rng);
        else if (c->input_scale > 1)
            ((uint8_t *)s.obs)[i] = fl_rng_double(&s.rng) < 0.1; /* sparse 0/1 planes */
        else
            ((uint8_t *)s.obs)[i] = (uint8_t)fl_rng_below(&s.rng, 256);
    }
    for (int k = 0; k < 10; k++)
        if (actor_step(&s, &e) != FL_OK) goto fail;
    fl_bench_rate_t r = {0};
    const double t0 = fl_clock_sec();
    do {
        if (actor_step(&s, &e) != FL_OK) goto fail;
        fl_bench_rate_step(&r, fl_clock_sec() - t0);
    } while (r.t < seconds || r.n < 10);
    rate = fl_bench_rate_whole(&r);
    *best = fl_bench_rate_best(&r);
    goto done;
fail:
    fprintf(stderr, "inference_bench: %s, batch %d: %s\n", c->name, B, e.msg);
done:
    free(s.obs), free(s.q), free(s.actions);
    fl_qnet_destroy(s.net);
    return rate;
}

/* PyTorch's steps/s from the script in memory format fmt (its best window's into *best);
 * < 0 when it cannot run. version gets torch's. */
static double torch_rate(const opts_t *o, const netcase_t *c, int B, const char *fmt, char *version, size_t len,
                         double *best) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%sOMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 '%s' '%s' --case %s --batch %d --threads 1 --seconds %g "
             "--memory-format %s",
             o->torch_env, o->python, o->script, c->name, B, o->seconds, fmt);
    return fl_bench_script_rate("inference_bench", cmd, version, len, best);
}

/* PyTorch's faster memory format for case c (images: contiguous and channels_last; the
 * rest: contiguous alone) into *fmt; its steps/s, and the best window of both in *best. */
static double torch_best(const opts_t *o, const netcase_t *c, int B, const char **fmt, char *version, size_t len,
                         double *best) {
    static const char *const formats[] = {"contiguous", "channels_last"};
    double rate = -1;
    *best = -1;
    *fmt = formats[0];
    for (int m = 0; m < (c->rank == 3 ? 2 : 1); m++) {
        double w = -1;
        const double r = torch_rate(o, c, B, formats[m], version, len, &w);
        if (r > rate) {
            rate = r;
            *fmt = formats[m];
        }
        if (r > 0 && w > *best) *best = w;
    }
    return rate;
}

/* One sample's forward FLOP of case c; < 0 when the network cannot be built. */
static double forward_flops(const netcase_t *c) {
    fl_err_t e;
    fl_err_init(&e);
    fl_qnet_t *n = NULL;
    if (fl_qnet_create_for_obs(c->spec, c->rank, c->shape, c->actions, 1, &n, &e) != FL_OK) {
        fprintf(stderr, "inference_bench: %s: %s\n", c->name, e.msg);
        return -1;
    }
    const double f = fl_flops_count_forward(n);
    fl_qnet_destroy(n);
    return f;
}

static int parse_batches(const char *s, opts_t *o) {
    o->n_batches = 0;
    while (*s && o->n_batches < MAX_BATCHES) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 65536) return 0;
        o->batches[o->n_batches++] = (int)v;
        if (*end && *end != ',') return 0;
        s = *end == ',' ? end + 1 : end;
    }
    return o->n_batches > 0 && !*s;
}

int main(int argc, char **argv) {
    opts_t o = {.seconds = 2.0, .only = -1, .batches = {1, 4, 16, 64}, .n_batches = 4, .torch = 1};
    snprintf(o.script, sizeof o.script, "%s/bench/inference_bench_torch.py", FL_SOURCE_DIR);
    /* Debian's python3-torch belongs to the system interpreter, which a user's PATH may
     * shadow (pyenv, a venv). */
    snprintf(o.python, sizeof o.python, "%s", access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json"))
            o.json = 1;
        else if (!strcmp(a, "--no-torch"))
            o.torch = 0;
        else if (!strcmp(a, "--seconds") && v)
            o.seconds = atof(argv[++i]);
        else if (!strcmp(a, "--torch-script") && v)
            snprintf(o.script, sizeof o.script, "%s", argv[++i]);
        else if (!strcmp(a, "--python") && v)
            snprintf(o.python, sizeof o.python, "%s", argv[++i]);
        else if (!strcmp(a, "--backend") && v) {
            if (!fl_bench_parse_backend(argv[++i])) goto usage;
        } else if (!strcmp(a, "--batches") && v) {
            if (!parse_batches(argv[++i], &o)) goto usage;
        } else if (!strcmp(a, "--case") && v) {
            i++;
            o.only = -2;
            if (!strcmp(v, "all")) o.only = -1;
            for (int k = 0; k < NUM_CASES; k++)
                if (!strcmp(v, CASES[k].name)) o.only = k;
            if (o.only == -2) goto usage;
        } else {
            goto usage;
        }
    }
    if (!(o.seconds > 0 && o.seconds <= 3600)) goto usage;
    o.cores = sysconf(_SC_NPROCESSORS_ONLN);
    fl_bench_torch_env(o.torch_env, sizeof o.torch_env, o.torch_why, sizeof o.torch_why);
    char version[64] = "";
    double best_unused;
    const int have_torch =
        o.torch && torch_rate(&o, &CASES[0], 1, "contiguous", version, sizeof version, &best_unused) >= 0;
    if (!o.json) {
        printf(
            "inference_bench: %ld cores, one actor step (convert, forward, greedy argmax) on 1 thread, CPU kernels "
            "%s, %g s per case; PyTorch %s\n",
            o.cores, fl_bench_backend_name(), o.seconds,
            have_torch ? version
            : o.torch  ? "not available (cannot import torch or numpy)"
                       : "not run (--no-torch)");
        if (have_torch) printf("inference_bench: %s\n", o.torch_why);
        if (fl_bench_amx_note()) printf("inference_bench: %s\n", fl_bench_amx_note());
        printf("%-8s %6s %7s %12s %12s %8s %12s %8s %13s %8s | %12s %12s %8s\n", "network", "batch", "obs",
               "fleet step/s", "fleet smp/s", "GFLOP/s", "torch smp/s", "GFLOP/s", "layout", "ratio", "best fleet",
               "best torch", "ratio");
    }
    for (int k = 0; k < NUM_CASES; k++) {
        if (o.only >= 0 && o.only != k) continue;
        const netcase_t *c = &CASES[k];
        const double flop = forward_flops(c);
        if (flop < 0) return 1;
        for (int bi = 0; bi < o.n_batches; bi++) {
            const int B = o.batches[bi];
            double fbest = 0, tbest = 0;
            const double f = fleet_rate(c, B, o.seconds, &fbest);
            if (f < 0) return 1;
            const char *fmt = "-";
            const double t = have_torch ? torch_best(&o, c, B, &fmt, version, sizeof version, &tbest) : -1;
            const double fs = f * B, ts = t > 0 ? t * B : -1;
            if (o.json) {
                printf(
                    "{\"bench\":\"inference\",\"case\":\"%s\",\"batch\":%d,\"obs\":\"%s\",\"threads\":1,"
                    "\"torch_memory_format\":\"%s\","
                    "\"fleet_steps_per_s\":%.4g,\"fleet_samples_per_s\":%.4g,\"torch_steps_per_s\":%.4g,"
                    "\"torch_samples_per_s\":%.4g,\"ratio\":%.4g,\"flop_per_sample\":%.6g,\"fleet_gflops\":%.4g,"
                    "\"torch_gflops\":%.4g,\"fleet_best_samples_per_s\":%.4g,\"torch_best_samples_per_s\":%.4g,"
                    "\"best_ratio\":%.4g,\"cores\":%ld}\n",
                    c->name, B, fl_dtype_name(c->dtype), fmt, f, fs, t, ts, t > 0 ? f / t : 0.0, flop, fs * flop / 1e9,
                    t > 0 ? ts * flop / 1e9 : 0.0, fbest * B, t > 0 ? tbest * B : -1, t > 0 ? fbest / tbest : 0.0,
                    o.cores);
            } else {
                char tb[32] = "-", tg[32] = "-", rb[32] = "-", tbb[32] = "-", rbb[32] = "-";
                if (t > 0) {
                    snprintf(tb, sizeof tb, "%.0f", ts);
                    snprintf(tg, sizeof tg, "%.2f", ts * flop / 1e9);
                    snprintf(rb, sizeof rb, "%.2fx", f / t);
                    snprintf(tbb, sizeof tbb, "%.0f", tbest * B);
                    snprintf(rbb, sizeof rbb, "%.2fx", fbest / tbest);
                }
                printf("%-8s %6d %7s %12.1f %12.0f %8.2f %12s %8s %13s %8s | %12.0f %12s %8s\n", c->name, B,
                       fl_dtype_name(c->dtype), f, fs, fs * flop / 1e9, tb, tg, fmt, rb, fbest * B, tbb, rbb);
            }
            fflush(stdout);
        }
    }
    return 0;
usage:
    fprintf(
        stderr,
        "usage: inference_bench [--json] [--seconds S] [--case mlp|minatar|nature|all] "
        "[--batches 1,4,16,64] [--backend dnnl|onednn|reference] [--no-torch] [--torch-script PATH] [--python PATH]\n");
    return 2;
}
