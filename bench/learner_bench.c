/* learner_bench: updates/s of the full DQN update (learner/dqn.h: double DQN, dueling
 * head, 3-step returns, importance weights, Huber loss, gradient-norm clipping to 40,
 * one centered RMSProp step) on the CPU, and the same update in PyTorch measured in the
 * same run, side by side.
 *
 * Networks (the learner issue's list):
 *   mlp      CartPole: float32 (4) -> dense(256) relu dense(256) relu dueling, 2 actions
 *   minatar  MinAtar: (10, 10, 4) -> conv(16,3,1) relu flatten dense(128) relu dueling, 6 actions
 *   nature   Atari: (84, 84, 4) -> conv(32,8,4) relu conv(64,4,2) relu conv(64,3,1) relu flatten
 *            dense(512) relu dueling, 18 actions (the Nature DQN torso)
 * Batches: 128 and 512 for mlp, 32 and 512 for minatar and nature. Inputs are random,
 * made before the clock starts: floats in [0, 1), but the Nature CNN's, uint8 pixels as
 * replay stores Atari frames (fleet's update takes them as the learner hands them over,
 * PyTorch's converts them, --obs-dtype uint8); each configuration of each case runs
 * --seconds after a short warm-up (at least 2 updates).
 *
 * PyTorch: bench/learner_bench_torch.py (found next to this file's source, or given with
 * --torch-script) run with /usr/bin/python3 (or --python PATH; Debian's python3-torch
 * belongs to the system interpreter) for the same case, one process per configuration;
 * skipped with a note when it cannot import torch (Debian: apt-get install python3-torch).
 *
 * Best against best. Each case (network x batch) runs every configuration of each side,
 * one per entry T of --threads (default 1,2):
 *   fleet    T BLAS threads (openblas_set_num_threads(T));
 *   PyTorch  torch.set_num_threads(T) with OMP_NUM_THREADS=T, run twice: with
 *            OPENBLAS_NUM_THREADS=1 and with one OpenBLAS thread per core (Debian's torch
 *            calls OpenBLAS for its dense layers: beside T torch threads, one thread can be
 *            better, or one per core), and for the image networks in both of its memory
 *            formats (--memory-format contiguous and channels_last), the fastest
 *            counting (columns blas and layout). Every run also gets the
 *            settings of fl_bench_torch_env (bench/flops.h): where OpenBLAS does not know
 *            the CPU and falls back to its SSE3 kernels, OPENBLAS_CORETYPE names the
 *            CPU's vector ISA, and on AVX-512 ATEN_CPU_CAPABILITY=avx512.
 * A row per configuration (threads T on both sides; its ratio is fleet's updates/s over
 * PyTorch's), then per case fleet's best configuration, PyTorch's best and the ratio of the
 * bests. FLOP per update are counted from the network's layers (bench/flops.h says exactly
 * what is counted: 5 F - F1 per sample for a forward of F FLOP and a first layer of F1)
 * and give each best's GFLOP/s, next to the machine's peak FP32 FLOP/s, measured at the
 * start (bench/flops.h: cores x FMA units x vector width x 2 x clock, one core timed on
 * independent vector FMAs). Then per case each side's best window over its
 * configurations (bench/flops.h: windows of at least 0.1 s and 10 updates, cut the same
 * way in PyTorch's script), fleet's as a share of the peak too, and their ratio: on a
 * machine shared with other work the whole-run rates move with the neighbours' load.
 *
 * GPU rows (when fleet was built with CUDA and a GPU is present; one line says they are
 * skipped otherwise, or with --no-gpu): the same cases through learner/dqn_cuda.h
 * (cuBLAS, cuDNN, own kernels, CUDA graphs), observations float32 except the Nature
 * CNN's, which are uint8 pixels as replay stores them (converted on the GPU). Each update
 * includes the copy of the batch from pinned host memory to the GPU and the priorities
 * coming back, as in the learner. TF32 on and off; convolution algorithms by cuDNN's
 * heuristics or timed on the GPU (convs heuristic / timed: PyTorch's cudnn.benchmark
 * False / True on its side; networks without convolutions: heuristic only). PyTorch eager on the same GPU runs
 * the same update (the script's --device cuda: batch copied from pinned memory, uint8
 * converted on the GPU, priorities to the host every update).
 *
 *   learner_bench [--json] [--seconds S] [--case mlp|minatar|nature|all] [--batch N] [--spec SPEC] [--threads 1,2]
 *                 [--no-torch] [--no-gpu] [--no-cpu] [--backend dnnl|onednn|reference] [--torch-script PATH] [--python
 * PATH]
 * --batch: every case at batch N only, instead of its two batch sizes.
 * --spec: the nature case's network replaced by SPEC (a model.spec over the same Atari
 *         input), to size a network for a machine; PyTorch has no such network (--no-torch).
 * --backend: the CPU kernels (kernels/qnet.h); default oneDNN when built with it.
 * --no-cpu: the GPU rows alone. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/flops.h"
#include "common/clock.h"
#include "common/rng.h"
#include "kernels/optim.h"
#include "kernels/qnet.h"
#include "learner/dqn.h"
#ifdef FLEET_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#include "learner/dqn_cuda.h"
#endif

#ifndef FL_SOURCE_DIR
#define FL_SOURCE_DIR "."
#endif

typedef struct netcase {
    const char *name, *spec;
    int rank, shape[3], actions;
    int batches[2];
    const char *obs; /* the observations' dtype, as replay hands them to the learner */
} netcase_t;

static netcase_t CASES[] = {
    /* --spec replaces the nature case's network */
    {"mlp", "dense(256) relu dense(256) relu dueling", 1, {4, 0, 0}, 2, {128, 512}, "float32"},
    {"minatar", "conv(16,3,1) relu flatten dense(128) relu dueling", 3, {10, 10, 4}, 6, {32, 512}, "float32"},
    {"nature",
     "conv(32,8,4) relu conv(64,4,2) relu conv(64,3,1) relu flatten dense(512) relu dueling",
     3,
     {84, 84, 4},
     18,
     {32, 512},
     "uint8"},
};
#define NUM_CASES (int)(sizeof CASES / sizeof CASES[0])

typedef struct opts {
    int json, torch, gpu, cpu;
    double seconds;
    int only;  /* case index or -1 */
    int batch; /* --batch: every case at this batch size alone (0: each case's own two) */
    int threads[4], n_threads;
    char script[1024];
    char python[1024];
    long cores;
    char torch_env[384]; /* fl_bench_torch_env's settings for every PyTorch run */
    char torch_why[384];
} opts_t;

static int die(const char *what, const fl_err_t *e) {
    fprintf(stderr, "learner_bench: %s: %s\n", what, e->msg);
    return 1;
}

/* The scalars of B random transitions (in the order the rows draw them): rewards in
 * [0, 1), the discount of 3 steps of 0.99, weights in [0.1, 1), actions below `actions`. */
static void fill_transitions(fl_rng_t *rng, int B, int actions, float *rewards, float *discounts, float *weights,
                             int32_t *acts) {
    for (int i = 0; i < B; i++) {
        rewards[i] = (float)fl_rng_double(rng);
        discounts[i] = 0.970299f;
        weights[i] = 0.1f + 0.9f * (float)fl_rng_double(rng);
        acts[i] = (int32_t)fl_rng_below(rng, (uint64_t)actions);
    }
}

/* n observations each into obs and next: uint8 pixels (u8) or floats in [0, 1). */
static void fill_observations(fl_rng_t *rng, int u8, void *obs, void *next, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (u8) {
            ((uint8_t *)obs)[i] = (uint8_t)fl_rng_below(rng, 256);
            ((uint8_t *)next)[i] = (uint8_t)fl_rng_below(rng, 256);
        } else {
            ((float *)obs)[i] = (float)fl_rng_double(rng);
            ((float *)next)[i] = (float)fl_rng_double(rng);
        }
    }
}

/* One update of a timed run; k counts the updates of the run from 0 (warm-up first). */
typedef fl_status (*update_fn)(void *arg, long k);

/* Runs `warmup` updates, then times updates until `seconds` have passed (at least 2);
 * updates/s in *rate, and the best window's (bench/flops.h) in *best where best is not
 * NULL. Stops at the first update that fails and returns its status. */
static fl_status timed_updates(update_fn update, void *arg, int warmup, double seconds, double *rate, double *best) {
    fl_status st;
    for (int k = 0; k < warmup; k++)
        if ((st = update(arg, k)) != FL_OK) return st;
    fl_bench_rate_t r = {0};
    const double t0 = fl_clock_sec();
    do {
        if ((st = update(arg, r.n)) != FL_OK) return st;
        fl_bench_rate_step(&r, fl_clock_sec() - t0);
    } while (r.t < seconds || r.n < 2);
    *rate = fl_bench_rate_whole(&r);
    if (best) *best = fl_bench_rate_best(&r);
    return FL_OK;
}

typedef struct cpu_update {
    fl_dqn_t *dqn;
    fl_qnet_t *online, *target;
    fl_optim_t *opt;
    const fl_dqn_batch_t *b;
    float *prio;
    fl_err_t *e;
} cpu_update_t;

static fl_status cpu_update(void *arg, long k) {
    (void)k;
    cpu_update_t *u = arg;
    return fl_dqn_step(u->dqn, u->online, u->target, u->opt, u->b, u->prio, NULL, u->e);
}

/* fleet's updates/s for one case, batch and thread count (its best window's in *best); < 0
 * on failure. */
static double fleet_rate(const netcase_t *c, int B, int threads, double seconds, double *best) {
    openblas_set_num_threads(threads);
    fl_err_t e;
    fl_err_init(&e);
    fl_qnet_t *online = NULL, *target = NULL;
    fl_optim_t *opt = NULL;
    fl_dqn_t *dqn = NULL;
    double rate = -1;
    float *obs = NULL, *next = NULL, *ret = NULL, *disc = NULL, *w = NULL, *prio = NULL;
    int32_t *act = NULL;
    const int u8 = strcmp(c->obs, "uint8") == 0;
    if (fl_qnet_create_for_obs(c->spec, c->rank, c->shape, c->actions, B, &online, &e) != FL_OK ||
        fl_qnet_create_for_obs(c->spec, c->rank, c->shape, c->actions, B, &target, &e) != FL_OK ||
        fl_bench_apply_backend(online, &e) != FL_OK || fl_bench_apply_backend(target, &e) != FL_OK) {
        die("network", &e);
        goto done;
    }
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    fl_qnet_init(online, &rng);
    fl_qnet_copy_params(target, online);
    fl_optim_config_t oc = fl_optim_config_default(FL_OPTIM_RMSPROP);
    oc.lr = 6.25e-5f;
    if (fl_optim_create(&oc, fl_qnet_num_params(online), &opt, &e) != FL_OK) {
        die("optimizer", &e);
        goto done;
    }
    fl_dqn_config_t dc = {B, c->actions, 1.0f, 40.0f};
    if (fl_dqn_create(&dc, &dqn, &e) != FL_OK) {
        die("dqn", &e);
        goto done;
    }
    size_t D = (size_t)fl_qnet_obs_dim(online);
    obs = malloc((size_t)B * D * (u8 ? 1 : sizeof(float)));
    next = malloc((size_t)B * D * (u8 ? 1 : sizeof(float)));
    ret = malloc((size_t)B * sizeof(float));
    disc = malloc((size_t)B * sizeof(float));
    w = malloc((size_t)B * sizeof(float));
    prio = malloc((size_t)B * sizeof(float));
    act = malloc((size_t)B * sizeof(int32_t));
    if (!obs || !next || !ret || !disc || !w || !prio || !act) goto done;
    fill_observations(&rng, u8, obs, next, (size_t)B * D);
    fill_transitions(&rng, B, c->actions, ret, disc, w, act);
    fl_dqn_batch_t b = {.size = B, .actions = act, .rewards = ret, .discounts = disc, .weights = w};
    if (u8) { /* as the learner hands replay's uint8 batches over (learner/backend_cpu.c) */
        b.raw_dtype = FL_DTYPE_UINT8;
        b.obs_raw = obs;
        b.next_raw = next;
    } else {
        b.obs = obs;
        b.next_obs = next;
    }
    cpu_update_t u = {dqn, online, target, opt, &b, prio, &e};
    if (timed_updates(cpu_update, &u, 2, seconds, &rate, best) != FL_OK) die("update", &e);
done:
    free(obs), free(next), free(ret), free(disc), free(w), free(prio), free(act);
    fl_dqn_destroy(dqn);
    fl_optim_destroy(opt);
    fl_qnet_destroy(online);
    fl_qnet_destroy(target);
    return rate;
}

/* PyTorch's updates/s from the script at `threads` torch threads (OMP_NUM_THREADS the
 * same) and OpenBLAS at `blas` threads, in the environment o->torch_env, its best
 * window's in *best (unless NULL); < 0 when it cannot run. version gets torch's. extra: more arguments
 * for the script ("" for the CPU rows). */
static double torch_rate(const opts_t *o, const netcase_t *c, int B, int threads, int blas, const char *extra,
                         char *version, size_t len, double *best) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%sOMP_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d '%s' '%s' --case %s --batch %d --threads %d --seconds %g%s",
             o->torch_env, threads, blas, o->python, o->script, c->name, B, threads, o->seconds, extra);
    return fl_bench_script_rate("learner_bench", cmd, version, len, best);
}

/* PyTorch's layouts of images in memory (the script's --memory-format) */
static const char *const MEMORY_FORMATS[] = {"contiguous", "channels_last"};

/* PyTorch at `threads` torch threads, the fastest of OpenBLAS at 1 thread and at one per
 * core (see the header), and for the image networks of both memory formats; its OpenBLAS
 * threads in *blas, its memory format in *fmt; the best window of them all in *best. */
static double torch_best(const opts_t *o, const netcase_t *c, int B, int threads, int *blas, const char **fmt,
                         char *version, size_t len, double *best) {
    double rate = -1;
    *best = -1;
    *blas = 1;
    *fmt = MEMORY_FORMATS[0];
    for (int m = 0; m < (c->rank == 3 ? 2 : 1); m++)
        for (int bl = 1; bl <= (o->cores > 1 ? 2 : 1); bl++) {
            const int nb = bl == 1 ? 1 : (int)o->cores;
            char extra[128];
            snprintf(extra, sizeof extra, " --obs-dtype %s --memory-format %s", c->obs, MEMORY_FORMATS[m]);
            double w = -1;
            const double r = torch_rate(o, c, B, threads, nb, extra, version, len, &w);
            if (r > rate) {
                rate = r;
                *blas = nb;
                *fmt = MEMORY_FORMATS[m];
            }
            if (r > 0 && w > *best) *best = w;
        }
    return rate;
}

/* The batch sizes case c runs at into out: --batch's alone, or the case's two; the count. */
static int case_batches(const opts_t *o, const netcase_t *c, int out[2]) {
    if (o->batch) {
        out[0] = o->batch;
        return 1;
    }
    out[0] = c->batches[0];
    out[1] = c->batches[1];
    return 2;
}

/* ---- GPU rows ---------------------------------------------------------------------- */

#ifdef FLEET_HAVE_CUDA
typedef struct gpu_update {
    fl_cuda_dqn_t *d;
    int B, slots;
    float *prio;
    fl_err_t *e;
    int inflight; /* an update is launched and not finished */
} gpu_update_t;

/* Update k, from slot k % slots, pipelined as the learner runs them: its batch's copy
 * to the GPU overlaps update k - 1, which is then finished (priorities to the host)
 * before k is launched. */
static fl_status gpu_update(void *arg, long k) {
    gpu_update_t *u = arg;
    fl_cuda_dqn_slot_t s;
    int stage = -1;
    FL_TRY(fl_cuda_dqn_slot(u->d, (int)(k % u->slots), &s, u->e));
    FL_TRY(fl_cuda_dqn_upload(u->d, &s, u->B, &stage, u->e));
    if (u->inflight) {
        u->inflight = 0;
        FL_TRY(fl_cuda_dqn_finish(u->d, u->prio, NULL, u->e));
    }
    FL_TRY(fl_cuda_dqn_launch(u->d, stage, u->e));
    u->inflight = 1;
    return FL_OK;
}

/* fleet's GPU updates/s for one case, batch, TF32 setting and convolution algorithm
 * search (heuristics or timed); < 0 on failure. */
static double gpu_rate(const netcase_t *c, int B, int tf32, int cudnn_benchmark, double seconds) {
    fl_err_t e;
    fl_err_init(&e);
    fl_qnet_t *net = NULL;
    fl_cuda_dqn_t *d = NULL;
    float *prio = NULL;
    double rate = -1;
    const int u8 = strcmp(c->obs, "uint8") == 0;
    if (fl_qnet_create_for_obs(c->spec, c->rank, c->shape, c->actions, 1, &net, &e) != FL_OK) {
        die("network", &e);
        goto done;
    }
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    fl_qnet_init(net, &rng);
    fl_cuda_dqn_config_t g;
    fl_cuda_dqn_config_init(&g);
    g.spec = c->spec;
    g.obs = fl_obs_spec_make(u8 ? FL_DTYPE_UINT8 : FL_DTYPE_FLOAT32, c->rank, c->shape);
    g.num_actions = c->actions;
    g.max_batch = B;
    g.huber_delta = 1.0f;
    g.grad_clip = 40.0f;
    g.optim = fl_optim_config_default(FL_OPTIM_RMSPROP);
    g.optim.lr = 6.25e-5f;
    g.tf32 = tf32;
    g.cudnn_benchmark = cudnn_benchmark;
    g.use_graph = 1;
    if (fl_cuda_dqn_create(&g, &d, &e) != FL_OK ||
        fl_cuda_dqn_set_params(d, fl_qnet_params(net), NULL, fl_qnet_num_params(net), &e) != FL_OK) {
        die("GPU learner", &e);
        goto done;
    }
    const size_t D = (size_t)fl_cuda_dqn_obs_dim(d);
    prio = malloc((size_t)B * sizeof(float));
    if (!prio) goto done;
    for (int k = 0; k < fl_cuda_dqn_num_slots(d); k++) {
        fl_cuda_dqn_slot_t s;
        if (fl_cuda_dqn_slot(d, k, &s, &e) != FL_OK) {
            die("slot", &e);
            goto done;
        }
        fill_observations(&rng, u8, s.obs, s.next_obs, (size_t)B * D);
        fill_transitions(&rng, B, c->actions, s.rewards, s.discounts, s.weights, s.actions);
    }
    gpu_update_t u = {d, B, fl_cuda_dqn_num_slots(d), prio, &e, 0};
    /* 3 warm-up updates: the second captures the graph */
    if (timed_updates(gpu_update, &u, 3, seconds, &rate, NULL) != FL_OK) die("GPU update", &e);
    if (u.inflight && fl_cuda_dqn_finish(d, prio, NULL, &e) != FL_OK) die("GPU update", &e);
done:
    free(prio);
    fl_cuda_dqn_destroy(d);
    fl_qnet_destroy(net);
    return rate;
}
#endif

/* The GPU rows; 0, or 1 when a GPU update failed. */
static int gpu_rows(const opts_t *o, int have_torch) {
#ifdef FLEET_HAVE_CUDA
    int ndev = 0;
    fl_err_t e;
    fl_err_init(&e);
    if (fl_cuda_device_count(&ndev, &e) != FL_OK) {
        fprintf(o->json ? stderr : stdout, "learner_bench: GPU rows skipped: %s\n", e.msg);
        return 0;
    }
    char name[256] = "";
    fl_cuda_device_name(0, name, sizeof name, &e);
    char version[64] = "";
    if (!o->json) {
        printf("\nGPU: %s (fleet: cuBLAS + cuDNN + own kernels, CUDA graphs; PyTorch eager on the same GPU)\n", name);
        printf("%-8s %6s %5s %5s %9s %14s %14s %14s %8s\n", "network", "batch", "obs", "tf32", "convs", "fleet upd/s",
               "fleet smp/s", "torch upd/s", "ratio");
    }
    for (int k = 0; k < NUM_CASES; k++) {
        if (o->only >= 0 && o->only != k) continue;
        const netcase_t *c = &CASES[k];
        const char *dtype = c->obs;
        int batches[2];
        const int nb = case_batches(o, c, batches);
        for (int bi = 0; bi < nb; bi++)
            for (int tf32 = 1; tf32 >= 0; tf32--)
                for (int search = 0; search < 2; search++) {
                    if (search && !strstr(c->spec, "conv")) continue; /* no convolution to time */
                    const int B = batches[bi];
                    const char *convs = search ? "timed" : "heuristic";
                    const double f = gpu_rate(c, B, tf32, search, o->seconds);
                    if (f < 0) return 1;
                    char extra[128];
                    snprintf(extra, sizeof extra, " --device cuda --tf32 %d --obs-dtype %s --cudnn-benchmark %d", tf32,
                             dtype, search);
                    const double t = have_torch ? torch_rate(o, c, B, 1, 1, extra, version, sizeof version, NULL) : -1;
                    if (o->json) {
                        printf(
                            "{\"bench\":\"learner_gpu\",\"case\":\"%s\",\"batch\":%d,\"obs\":\"%s\",\"tf32\":%d,"
                            "\"convs\":\"%s\",\"fleet_updates_per_s\":%.4g,\"fleet_samples_per_s\":%.4g,"
                            "\"torch_updates_per_s\":%.4g,\"ratio\":%.4g,\"gpu\":\"%s\",\"cores\":%ld}\n",
                            c->name, B, dtype, tf32, convs, f, f * B, t, t > 0 ? f / t : 0.0, name, o->cores);
                    } else {
                        char tb[32] = "-", rb[32] = "-";
                        if (t > 0) {
                            snprintf(tb, sizeof tb, "%.1f", t);
                            snprintf(rb, sizeof rb, "%.2fx", f / t);
                        }
                        printf("%-8s %6d %5s %5s %9s %14.1f %14.0f %14s %8s\n", c->name, B, dtype, tf32 ? "on" : "off",
                               convs, f, f * B, tb, rb);
                    }
                    fflush(stdout);
                }
    }
    return 0;
#else
    (void)have_torch;
    fprintf(o->json ? stderr : stdout, "learner_bench: GPU rows skipped: fleet was built without CUDA\n");
    return 0;
#endif
}

/* ---- CPU rows: every configuration, then best against best ------------------------- */

/* FLOP of one update of case c at batch B (bench/flops.h); < 0 when the network cannot
 * be built. */
static double update_flops(const netcase_t *c, int B) {
    fl_err_t e;
    fl_err_init(&e);
    fl_qnet_t *n = NULL;
    if (fl_qnet_create_for_obs(c->spec, c->rank, c->shape, c->actions, 1, &n, &e) != FL_OK) {
        die("network", &e);
        return -1;
    }
    const double f = fl_flops_count_dqn_update(n, B);
    fl_qnet_destroy(n);
    return f;
}

static void print_peak(const opts_t *o, const fl_flops_peak_t *p) {
    if (o->json) {
        if (!p->ok) {
            printf("{\"bench\":\"peak_fp32\",\"case\":\"cpu\",\"measured\":0,\"why\":\"%s\",\"cores\":%ld}\n", p->isa,
                   o->cores);
            return;
        }
        printf(
            "{\"bench\":\"peak_fp32\",\"case\":\"cpu\",\"measured\":1,\"isa\":\"%s\",\"vector_floats\":%d,"
            "\"fma_units\":%d,\"fma_per_cycle\":%.4g,\"add_clock_ghz\":%.4g,"
            "\"core_gflops\":%.4g,\"clock_ghz\":%.4g,\"peak_gflops\":%.4g,\"cores\":%ld}\n",
            p->isa, p->vector_floats, p->fma_units, p->fma_per_cycle, p->add_clock_hz / 1e9, p->core_flops / 1e9,
            p->clock_hz / 1e9, p->peak_flops / 1e9, o->cores);
        return;
    }
    char line[1024];
    fl_flops_describe_peak(p, line, sizeof line);
    printf("learner_bench: %s\n", line);
    if (fl_bench_amx_note()) printf("learner_bench: %s\n", fl_bench_amx_note());
}

/* The best of n rates (the index; -1 when none is > 0). */
static int best_of(const double *rate, int n) {
    int b = -1;
    for (int i = 0; i < n; i++)
        if (rate[i] > 0 && (b < 0 || rate[i] > rate[b])) b = i;
    return b;
}

/* One case's figures for the closing table. */
typedef struct best_row {
    const netcase_t *c;
    int B;
    double flop;             /* per update */
    double fleet, torch;     /* best updates/s; <= 0: none */
    int fleet_t, torch_t;    /* their threads */
    int torch_blas;          /* PyTorch's best: OpenBLAS's threads */
    const char *torch_fmt;   /* and its memory format */
    double fleet_w, torch_w; /* the best windows' updates/s over each side's configurations */
    int fleet_wt, torch_wt;  /* their threads */
} best_row_t;

static void format_rate(char *buf, size_t len, double rate, int threads, double flop) {
    if (rate > 0)
        snprintf(buf, len, "%11.1f %3d %8.1f", rate, threads, rate * flop / 1e9);
    else
        snprintf(buf, len, "%11s %3s %8s", "-", "-", "-");
}

/* a / b where both were measured (> 0), else 0 */
static double ratio_of(double a, double b) {
    return a > 0 && b > 0 ? a / b : 0.0;
}

static void print_best(const opts_t *o, const best_row_t *r, const fl_flops_peak_t *peak) {
    const double ratio = ratio_of(r->fleet, r->torch), wratio = ratio_of(r->fleet_w, r->torch_w);
    if (o->json) {
        printf(
            "{\"bench\":\"learner_best\",\"case\":\"%s\",\"batch\":%d,\"flop_per_update\":%.6g,"
            "\"fleet_best_updates_per_s\":%.4g,\"fleet_best_threads\":%d,\"fleet_best_gflops\":%.4g,"
            "\"torch_best_updates_per_s\":%.4g,\"torch_best_threads\":%d,\"torch_best_openblas_threads\":%d,"
            "\"torch_best_memory_format\":\"%s\","
            "\"torch_best_gflops\":%.4g,\"ratio_of_bests\":%.4g,\"fleet_window_updates_per_s\":%.4g,"
            "\"fleet_window_threads\":%d,\"fleet_window_gflops\":%.4g,\"torch_window_updates_per_s\":%.4g,"
            "\"torch_window_threads\":%d,\"window_ratio\":%.4g,\"peak_gflops\":%.4g,\"core_peak_gflops\":%.4g,"
            "\"cores\":%ld}\n",
            r->c->name, r->B, r->flop, r->fleet, r->fleet_t, r->fleet * r->flop / 1e9, r->torch, r->torch_t,
            r->torch_blas, r->torch_fmt, r->torch > 0 ? r->torch * r->flop / 1e9 : 0.0, ratio, r->fleet_w, r->fleet_wt,
            r->fleet_w * r->flop / 1e9, r->torch_w, r->torch_wt, wratio, peak->ok ? peak->peak_flops / 1e9 : 0.0,
            peak->ok ? peak->core_flops / 1e9 : 0.0, o->cores);
        return;
    }
    char fb[64], tb[64], rb[32] = "-", pb[32] = "-";
    format_rate(fb, sizeof fb, r->fleet, r->fleet_t, r->flop);
    format_rate(tb, sizeof tb, r->torch, r->torch_t, r->flop);
    if (ratio > 0) snprintf(rb, sizeof rb, "%.2fx", ratio);
    if (peak->ok) snprintf(pb, sizeof pb, "%.1f", peak->peak_flops / 1e9);
    printf("%-8s %6d %10.2f %s %s %8s %10s\n", r->c->name, r->B, r->flop / 1e6, fb, tb, rb, pb);
}

/* The same case's best windows, a row of the second closing table. */
static void print_window(const best_row_t *r, const fl_flops_peak_t *peak) {
    const double wratio = ratio_of(r->fleet_w, r->torch_w);
    char fb[64], tb[64], rb[32] = "-", pb[32] = "-";
    format_rate(fb, sizeof fb, r->fleet_w, r->fleet_wt, r->flop);
    format_rate(tb, sizeof tb, r->torch_w, r->torch_wt, r->flop);
    if (wratio > 0) snprintf(rb, sizeof rb, "%.2fx", wratio);
    if (peak->ok && r->fleet_w > 0) snprintf(pb, sizeof pb, "%.1f%%", 100 * r->fleet_w * r->flop / peak->peak_flops);
    printf("%-8s %6d %s %7s %s %8s\n", r->c->name, r->B, fb, pb, tb, rb);
}

/* Every configuration of every case, a row each, then the bests; 0, or 1 when a fleet
 * update failed. */
static int cpu_rows(const opts_t *o, int have_torch, const fl_flops_peak_t *peak) {
    char version[64] = "";
    best_row_t best[NUM_CASES * 2];
    int n_best = 0;
    if (!o->json) {
        printf(
            "PyTorch at T threads: torch.set_num_threads(T), OMP_NUM_THREADS=T, the fastest of "
            "OPENBLAS_NUM_THREADS=1 and =%ld (column blas) and, for images, of its memory formats contiguous "
            "and channels_last (column layout); %s\n",
            o->cores, o->torch_why);
        printf("%-8s %6s %7s %7s %14s %14s %14s %4s %13s %8s\n", "network", "batch", "obs", "threads", "fleet upd/s",
               "fleet smp/s", "torch upd/s", "blas", "layout", "ratio");
    }
    for (int k = 0; k < NUM_CASES; k++) {
        if (o->only >= 0 && o->only != k) continue;
        const netcase_t *c = &CASES[k];
        int batches[2];
        const int nb = case_batches(o, c, batches);
        for (int bi = 0; bi < nb; bi++) {
            const int B = batches[bi];
            const double flop = update_flops(c, B);
            if (flop < 0) return 1;
            double f[4], t[4], fw[4], tw[4] = {-1, -1, -1, -1};
            int tb_blas[4] = {1, 1, 1, 1};
            const char *tb_fmt[4] = {"-", "-", "-", "-"};
            for (int ti = 0; ti < o->n_threads; ti++) {
                const int T = o->threads[ti];
                f[ti] = fleet_rate(c, B, T, o->seconds, &fw[ti]);
                if (f[ti] < 0) return 1;
                t[ti] = have_torch ? torch_best(o, c, B, T, &tb_blas[ti], &tb_fmt[ti], version, sizeof version, &tw[ti])
                                   : -1;
                if (o->json) {
                    printf(
                        "{\"bench\":\"learner\",\"case\":\"%s\",\"batch\":%d,\"threads\":%d,"
                        "\"fleet_updates_per_s\":%.4g,\"fleet_samples_per_s\":%.4g,\"torch_updates_per_s\":%.4g,"
                        "\"ratio\":%.4g,"
                        "\"torch_openblas_threads\":%d,\"torch_memory_format\":\"%s\",\"obs\":\"%s\","
                        "\"flop_per_update\":%.6g,\"fleet_gflops\":%.4g,"
                        "\"torch_gflops\":%.4g,\"fleet_window_updates_per_s\":%.4g,"
                        "\"torch_window_updates_per_s\":%.4g,\"cores\":%ld}\n",
                        c->name, B, T, f[ti], f[ti] * B, t[ti], t[ti] > 0 ? f[ti] / t[ti] : 0.0, tb_blas[ti],
                        tb_fmt[ti], c->obs, flop, f[ti] * flop / 1e9, t[ti] > 0 ? t[ti] * flop / 1e9 : 0.0, fw[ti],
                        t[ti] > 0 ? tw[ti] : -1.0, o->cores);
                } else {
                    char tb[32] = "-", rb[32] = "-";
                    if (t[ti] > 0) {
                        snprintf(tb, sizeof tb, "%.1f", t[ti]);
                        snprintf(rb, sizeof rb, "%.2fx", f[ti] / t[ti]);
                    }
                    printf("%-8s %6d %7s %7d %14.1f %14.0f %14s %4d %13s %8s\n", c->name, B, c->obs, T, f[ti],
                           f[ti] * B, tb, tb_blas[ti], tb_fmt[ti], rb);
                }
                fflush(stdout);
            }
            const int fi = best_of(f, o->n_threads), ti = best_of(t, o->n_threads);
            const int fwi = best_of(fw, o->n_threads), twi = best_of(tw, o->n_threads);
            best_row_t r = {.c = c,
                            .B = B,
                            .flop = flop,
                            .fleet = f[fi],
                            .torch = ti >= 0 ? t[ti] : -1,
                            .fleet_t = o->threads[fi],
                            .torch_t = ti >= 0 ? o->threads[ti] : 0,
                            .torch_blas = ti >= 0 ? tb_blas[ti] : 0,
                            .torch_fmt = ti >= 0 ? tb_fmt[ti] : "-",
                            .fleet_w = fw[fwi],
                            .torch_w = twi >= 0 ? tw[twi] : -1,
                            .fleet_wt = o->threads[fwi],
                            .torch_wt = twi >= 0 ? o->threads[twi] : 0};
            if (o->json) print_best(o, &r, peak);
            best[n_best++] = r;
        }
    }
    if (o->json) return 0;
    printf(
        "\nbest against best (each side's fastest configuration; GFLOP/s = updates/s x FLOP per update, counted as "
        "bench/flops.h says; peak: the machine's, all cores)\n");
    printf("%-8s %6s %10s %11s %3s %8s %11s %3s %8s %8s %10s\n", "network", "batch", "MFLOP/upd", "fleet upd/s", "thr",
           "GFLOP/s", "torch upd/s", "thr", "GFLOP/s", "ratio", "peak GF/s");
    for (int i = 0; i < n_best; i++) print_best(o, &best[i], peak);
    printf(
        "\nbest windows (each side's fastest window of at least %.1f s and %d updates, over its configurations; "
        "%% peak: fleet's GFLOP/s over the machine's peak)\n",
        FL_BENCH_WINDOW_S, FL_BENCH_WINDOW_STEPS);
    printf("%-8s %6s %11s %3s %8s %7s %11s %3s %8s %8s\n", "network", "batch", "fleet upd/s", "thr", "GFLOP/s",
           "% peak", "torch upd/s", "thr", "GFLOP/s", "ratio");
    for (int i = 0; i < n_best; i++) print_window(&best[i], peak);
    return 0;
}

static int parse_threads(const char *s, opts_t *o) {
    o->n_threads = 0;
    while (*s && o->n_threads < 4) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 256) return 0;
        o->threads[o->n_threads++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 0;
    }
    return o->n_threads > 0;
}

int main(int argc, char **argv) {
    opts_t o = {.seconds = 3.0, .only = -1, .threads = {1, 2}, .n_threads = 2, .torch = 1, .gpu = 1, .cpu = 1};
    snprintf(o.script, sizeof o.script, "%s/bench/learner_bench_torch.py", FL_SOURCE_DIR);
    /* Debian's python3-torch belongs to the system interpreter, which a user's PATH may
     * shadow (pyenv, a venv). */
    snprintf(o.python, sizeof o.python, "%s", access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json"))
            o.json = 1;
        else if (!strcmp(a, "--no-torch"))
            o.torch = 0;
        else if (!strcmp(a, "--no-gpu"))
            o.gpu = 0;
        else if (!strcmp(a, "--no-cpu"))
            o.cpu = 0;
        else if (!strcmp(a, "--backend") && v) {
            if (!fl_bench_parse_backend(argv[++i])) goto usage;
        } else if (!strcmp(a, "--seconds") && v)
            o.seconds = atof(argv[++i]);
        else if (!strcmp(a, "--batch") && v) {
            o.batch = atoi(argv[++i]);
            if (o.batch < 1) goto usage;
        } else if (!strcmp(a, "--spec") && v)
            CASES[2].spec = argv[++i];
        else if (!strcmp(a, "--torch-script") && v)
            snprintf(o.script, sizeof o.script, "%s", argv[++i]);
        else if (!strcmp(a, "--python") && v)
            snprintf(o.python, sizeof o.python, "%s", argv[++i]);
        else if (!strcmp(a, "--threads") && v) {
            if (!parse_threads(argv[++i], &o)) goto usage;
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
    if (o.torch && strstr(CASES[2].spec, "conv(32,8,4) relu conv(64,4,2)") != CASES[2].spec) {
        fprintf(stderr, "learner_bench: --spec: PyTorch's side has the Nature CNN only; add --no-torch\n");
        return 2;
    }
    o.cores = sysconf(_SC_NPROCESSORS_ONLN);
    fl_bench_torch_env(o.torch_env, sizeof o.torch_env, o.torch_why, sizeof o.torch_why);
    char version[64] = "";
    int have_torch = o.torch && torch_rate(&o, &CASES[0], 8, 1, 1, "", version, sizeof version, NULL) >= 0;
    fl_flops_peak_t peak;
    fl_flops_measure_peak(o.cores, &peak);
    print_peak(&o, &peak);
    if (!o.json)
        printf(
            "learner_bench: %ld cores, full DQN update (double, dueling, 3-step, weights, Huber, clip 40, centered "
            "RMSProp), CPU kernels %s, %g s per configuration; PyTorch %s\n",
            o.cores, fl_bench_backend_name(), o.seconds,
            have_torch ? version
            : o.torch  ? "not available (cannot import torch)"
                       : "not run (--no-torch)");
    if (!o.cpu)
        fprintf(o.json ? stderr : stdout, "learner_bench: CPU rows skipped (--no-cpu)\n");
    else if (cpu_rows(&o, have_torch, &peak) != 0)
        return 1;
    if (!o.gpu) {
        fprintf(o.json ? stderr : stdout, "learner_bench: GPU rows skipped (--no-gpu)\n");
        return 0;
    }
    return gpu_rows(&o, have_torch);
usage:
    fprintf(stderr,
            "usage: learner_bench [--json] [--seconds S] [--case mlp|minatar|nature|all] [--batch N] "
            "[--spec SPEC] [--threads 1,2] [--no-torch] [--no-gpu] [--no-cpu] [--backend dnnl|onednn|reference] "
            "[--torch-script PATH] [--python PATH]\n");
    return 2;
}
