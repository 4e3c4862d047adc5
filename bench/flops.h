/* flops: what the benches need to turn a rate into FLOP/s and set it against the machine:
 * the floating-point operations of a Q-network's forward and of one DQN update, counted
 * from the network's layers, and the CPU's peak FP32 FLOP/s, measured.
 *
 * What is counted: 2 FLOP per multiply-add of the layers that hold weights (dense:
 * in x N per sample; conv(C,K,S,P): C x out_h x out_w x Cin x K x K; the dueling head:
 * features x (actions + 1)). Not counted: biases, relu, the dueling combination
 * (V + A - mean A), the uint8 conversion, the loss, argmax, the gradient norm and clip,
 * the optimizer step (about 10 FLOP per parameter per update, once per batch, not per
 * sample). With F the forward FLOP of one sample and F1 its first layer's share, one
 * double-DQN update of a batch of B (learner/dqn.h) counts
 *   forward:  3 F  (the online network on s_t; the online and the target network on s_{t+n})
 *   backward: 2 F - F1  (the weight gradient of every layer, F; the input gradient of every
 *             layer but the first, F - F1: nothing needs the observations' gradient)
 * so 5 F - F1 per sample, B (5 F - F1) per update.
 *
 * Peak FP32 FLOP/s = cores x FMA units x vector width (floats) x 2 x clock:
 *   vector width from the CPU's features (__builtin_cpu_supports): avx512f -> 16 floats, avx2 with fma
 *     -> 8; anything else (or a CPU other than x86-64) has no measurement here;
 *   one core's FLOP/s measured directly: a timed loop of independent vector FMAs (16
 *     chains of _mm512_fmadd_ps, or 12 of _mm256_fmadd_ps; functions compiled for those
 *     instructions alone, so the rest of the program keeps the default target), the best
 *     of 8 runs of about 10 ms on the calling thread;
 *   FMA units per core from a check: the vector FMAs per cycle that loop reached, with the
 *     cycles counted by a chain of dependent register adds (one per cycle on every x86-64
 *     core), run in alternation with it (the best of each): about 2 with two FMA pipes
 *     (server AVX-512 parts, AVX2 cores since Haswell), about 1 where a core has one for
 *     512-bit vectors or runs each as two 256-bit halves (AMD's Zen 4). Below
 *     FL_FLOPS_ONE_UNIT_BELOW it is taken as 1, else 2; it only splits the measured
 *     FLOP/s into units and a clock in the printed formula, the peak is the measurement;
 *   the clock is implied: one core's FLOP/s / (FMA units x width x 2), the clock the core
 *     held under that load (which may sit below the scalar loop's on parts that slow
 *     down for wide vectors);
 *   the peak is cores x one core's FLOP/s: an upper bound, as all cores busy may run slower.
 *
 * Failure: nothing fails; a peak that cannot be measured has ok = 0 and a reason in isa.
 * Thread-safety: the counts only read the network; the measurement keeps its calling thread
 * busy for a fraction of a second (about 0.2 s) and shares nothing. */
#ifndef FL_BENCH_FLOPS_H
#define FL_BENCH_FLOPS_H

#include <stddef.h>

#include "kernels/qnet.h"

/* FLOP of one sample's forward through n (F above). */
double fl_flops_count_forward(const fl_qnet_t *n);
/* FLOP of one double-DQN update of a batch of B through n: B (5 F - F1). */
double fl_flops_count_dqn_update(const fl_qnet_t *n, int B);

#define FL_FLOPS_ONE_UNIT_BELOW 1.41 /* vector FMAs per cycle under which a core counts one unit */

typedef struct fl_flops_peak {
    int ok;               /* 1: measured; 0: no measurement here (isa says why) */
    char isa[64];         /* "avx512f", "avx2+fma", or why nothing was measured */
    int vector_floats;    /* 16 or 8 */
    int fma_units;        /* per core, as used in the formula: 1 or 2, by the check */
    double fma_per_cycle; /* the check: vector FMAs per cycle of the scalar add chain's clock */
    double add_clock_hz;  /* dependent scalar adds per second */
    double core_flops;    /* one core, measured */
    double clock_hz;      /* implied: core_flops / (fma_units x vector_floats x 2) */
    long cores;
    double peak_flops; /* cores x core_flops */
} fl_flops_peak_t;

/* Measures the peak of a machine of `cores` cores (see above) into *out. */
void fl_flops_measure_peak(long cores, fl_flops_peak_t *out);
/* One line that says how p's peak was derived (the formula with its figures). */
void fl_flops_describe_peak(const fl_flops_peak_t *p, char *buf, size_t len);

/* The CPU kernels the benches run (--backend): -1 = oneDNN when built with it, else the
 * reference; or an fl_qnet_backend_kind. */
extern int fl_bench_backend;
/* Parses --backend's value ("dnnl" or "reference"); 0 when it is neither. */
int fl_bench_parse_backend(const char *v);
/* Puts n on fl_bench_backend (nothing at -1). */
fl_status fl_bench_apply_backend(fl_qnet_t *n, fl_err_t *err);
/* The name of the backend the benches put networks on. */
const char *fl_bench_backend_name(void);
/* A line on the first convolution over uint8 frames on AMX's tiles where the oneDNN
 * backend runs it so (its FLOP counted as fp32's), or NULL. */
const char *fl_bench_amx_note(void);

/* The environment settings PyTorch's side of a bench needs to run at its best on this
 * CPU, as "NAME=value NAME=value " (or ""), into buf; why, one phrase, into why:
 *   OPENBLAS_CORETYPE: OpenBLAS picks its kernels by CPU model, and a model newer than
 *     the OpenBLAS build (Debian 12's 0.3.21 on a 5th-generation Xeon, say) gets its
 *     oldest x86-64 kernels (SSE3, "Prescott"): when this process's OpenBLAS reports a
 *     core below the CPU's vector ISA, SkylakeX (AVX-512) or Haswell (AVX2) is named;
 *   ATEN_CPU_CAPABILITY=avx512 on an AVX-512 CPU: PyTorch's own kernels stop at AVX2
 *     unless told;
 *   MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_: the heap settings fleet's
 *     processes set for themselves (cli/heap.h), which spare PyTorch a mapping and
 *     unmapping of each large tensor at every step. */
void fl_bench_torch_env(char *buf, size_t len, char *why, size_t why_len);

/* A timed loop's rates: the whole run's, and its best window's. The run is cut into
 * consecutive windows of at least FL_BENCH_WINDOW_S seconds and FL_BENCH_WINDOW_STEPS
 * steps (the PyTorch scripts' report_rate, bench/learner_bench_torch.py, cuts its runs
 * the same way). On a machine shared with other work the whole run's rate moves with the
 * neighbours' load; the best window shows what the code does while the cores are its own.
 * Zero the struct at the start; fl_bench_rate_step after each step. */
#define FL_BENCH_WINDOW_S 0.1
#define FL_BENCH_WINDOW_STEPS 10
typedef struct fl_bench_rate {
    long n, wn;   /* steps done; steps when the current window began */
    double t, wt; /* seconds since the start at the last step; when the window began */
    double best;  /* the best closed window's steps/s; 0 while none */
} fl_bench_rate_t;
/* One more step done, t seconds after the run started. */
void fl_bench_rate_step(fl_bench_rate_t *r, double t);
/* The whole run's steps/s (0 before any step). */
double fl_bench_rate_whole(const fl_bench_rate_t *r);
/* The best window's steps/s; the whole run's when the run holds no full window. */
double fl_bench_rate_best(const fl_bench_rate_t *r);

/* Runs cmd, a PyTorch script's command line that prints "RATE VERSION THREADS BEST" (its
 * report_rate: steps/s of the whole run, torch's version, its threads, the best window's
 * steps/s). Returns RATE, BEST into *best (unless NULL) and VERSION into version; < 0 when the command
 * cannot run, fails or prints no such line (a message on stderr, prefixed by prog). */
double fl_bench_script_rate(const char *prog, const char *cmd, char *version, size_t len, double *best);

#endif
