/* flops: FLOP counts of a Q-network and the CPU's measured peak (see flops.h). */
#include "bench/flops.h"

#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "cli/heap.h"
#include "kernels/conv_fwd.h"
#include "kernels/dnnl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FL_FLOPS_X86 1
#else
#define FL_FLOPS_X86 0
#endif

/* FLOP of one sample through layer l: 2 per multiply-add; 0 for a layer without weights. */
static double layer_flops(const fl_qnet_layer_t *l) {
    const double in = (double)l->in_c * l->in_h * l->in_w;
    switch (l->kind) {
    case FL_QNET_DENSE: return 2.0 * in * l->units;
    case FL_QNET_DUELING: return 2.0 * in * (l->units + 1);
    case FL_QNET_CONV: return 2.0 * l->cout * l->out_h * l->out_w * (double)l->in_c * l->k * l->k;
    default: return 0;
    }
}

double fl_flops_count_forward(const fl_qnet_t *n) {
    double f = 0;
    fl_qnet_layer_t l;
    for (int i = 0; fl_qnet_layer(n, i, &l) == 0; i++) f += layer_flops(&l);
    return f;
}

double fl_flops_count_dqn_update(const fl_qnet_t *n, int B) {
    double f1 = 0;
    fl_qnet_layer_t l;
    for (int i = 0; fl_qnet_layer(n, i, &l) == 0; i++)
        if ((f1 = layer_flops(&l)) > 0) break;
    return (double)B * (5.0 * fl_flops_count_forward(n) - f1);
}

#if FL_FLOPS_X86
/* The loops: `iters` rounds of one operation on each of several independent chains. */
typedef float (*loop_fn)(long iters);

#define FL_REP12(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11)
#define FL_REP16(F) FL_REP12(F) F(12) F(13) F(14) F(15)

/* 16 chains: two FMA pipes of latency 4 keep 8 in flight; 16 of the 32 registers leave room. */
#define FMA512_CHAINS 16
#define FMA512_DECL(i) __m512 a##i = _mm512_set1_ps(0.01f * (float)(i));
#define FMA512_STEP(i) a##i = _mm512_fmadd_ps(a##i, m, c);
#define FMA512_SUM(i) s = _mm512_add_ps(s, a##i);
__attribute__((target("avx512f"))) static float fma_loop_512(long iters) {
    /* a = a * m + c converges to c / (1 - m) = 1: no overflow, no denormals */
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
    FL_REP16(FMA512_DECL)
    for (long i = 0; i < iters; i++) {
        FL_REP16(FMA512_STEP)
    }
    __m512 s = _mm512_setzero_ps();
    FL_REP16(FMA512_SUM)
    return _mm512_reduce_add_ps(s);
}

/* 12 chains: 16 registers, two of them the constants. */
#define FMA256_CHAINS 12
#define FMA256_DECL(i) __m256 a##i = _mm256_set1_ps(0.01f * (float)(i));
#define FMA256_STEP(i) a##i = _mm256_fmadd_ps(a##i, m, c);
#define FMA256_SUM(i) s = _mm256_add_ps(s, a##i);
__attribute__((target("avx2,fma"))) static float fma_loop_256(long iters) {
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
    FL_REP12(FMA256_DECL)
    for (long i = 0; i < iters; i++) {
        FL_REP12(FMA256_STEP)
    }
    __m256 s = _mm256_setzero_ps();
    FL_REP12(FMA256_SUM)
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

/* 100 dependent scalar adds per round: one cycle each. Register operands: an add of an
 * immediate may be folded away at rename (Golden Cove and later). */
#define ADD_CHAIN_LEN 100
static float add_chain(long iters) {
    uint64_t x = 0, one = 1;
    for (long i = 0; i < iters; i++) __asm__ volatile(".rept 100\n\taddq %1, %0\n\t.endr" : "+r"(x) : "r"(one));
    return (float)x;
}

static volatile float sink; /* keeps every loop's result alive */

/* Rounds x per_round per second of one run of `iters` rounds. */
static double run_rate(loop_fn loop, long iters, double per_round) {
    const double t0 = fl_clock_sec();
    sink = loop(iters);
    const double t = fl_clock_sec() - t0;
    return t > 0 ? (double)iters * per_round / t : 0;
}

/* The rounds of a run of about 10 ms. */
static long calibrate(loop_fn loop) {
    long iters = 1024;
    for (;;) {
        const double t0 = fl_clock_sec();
        sink = loop(iters);
        if (fl_clock_sec() - t0 >= 0.01 || iters > (1L << 40)) return iters;
        iters *= 2;
    }
}

/* The best rates of 8 runs of each loop, alternating, so that both see the same
 * conditions. */
#define PEAK_RUNS 8
static void best_rates(loop_fn a, double per_a, double *rate_a, loop_fn b, double per_b, double *rate_b) {
    const long ia = calibrate(a), ib = calibrate(b);
    *rate_a = *rate_b = 0;
    for (int r = 0; r < PEAK_RUNS; r++) {
        const double ra = run_rate(a, ia, per_a), rb = run_rate(b, ib, per_b);
        if (ra > *rate_a) *rate_a = ra;
        if (rb > *rate_b) *rate_b = rb;
    }
}
#endif

void fl_flops_measure_peak(long cores, fl_flops_peak_t *out) {
    memset(out, 0, sizeof *out);
    out->cores = cores;
#if FL_FLOPS_X86
    loop_fn loop;
    int chains;
    if (__builtin_cpu_supports("avx512f")) {
        snprintf(out->isa, sizeof out->isa, "avx512f");
        out->vector_floats = 16;
        loop = fma_loop_512;
        chains = FMA512_CHAINS;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        snprintf(out->isa, sizeof out->isa, "avx2+fma");
        out->vector_floats = 8;
        loop = fma_loop_256;
        chains = FMA256_CHAINS;
    } else {
        snprintf(out->isa, sizeof out->isa, "the CPU has neither avx512f nor avx2 with fma");
        return;
    }
    const double per_fma = 2.0 * out->vector_floats;
    best_rates(loop, chains * per_fma, &out->core_flops, add_chain, ADD_CHAIN_LEN, &out->add_clock_hz);
    out->fma_per_cycle = out->core_flops / per_fma / out->add_clock_hz;
    out->fma_units = out->fma_per_cycle < FL_FLOPS_ONE_UNIT_BELOW ? 1 : 2;
    out->clock_hz = out->core_flops / (out->fma_units * per_fma);
    out->peak_flops = (double)cores * out->core_flops;
    out->ok = 1;
#else
    snprintf(out->isa, sizeof out->isa, "not an x86-64 CPU");
#endif
}

void fl_flops_describe_peak(const fl_flops_peak_t *p, char *buf, size_t len) {
    if (!p->ok) {
        snprintf(buf, len, "peak FP32 not measured: %s", p->isa);
        return;
    }
    char units[160];
    snprintf(units, sizeof units, "%.2f vector FMAs per cycle of a dependent scalar add chain at %.2f GHz",
             p->fma_per_cycle, p->add_clock_hz / 1e9);
    snprintf(buf, len,
             "peak FP32 %.1f GFLOP/s = %ld cores x %d FMA units x %d floats (%s) x 2 x %.2f GHz; one core measured "
             "%.1f GFLOP/s (independent vector FMAs), the clock implied by it; FMA units: %d by the check (%s%s)",
             p->peak_flops / 1e9, p->cores, p->fma_units, p->vector_floats, p->isa, p->clock_hz / 1e9,
             p->core_flops / 1e9, p->fma_units, units,
             p->fma_units == 1 ? ": one vector FMA a cycle, as where a core runs each as two halves" : "");
}

int fl_bench_backend = -1;

int fl_bench_parse_backend(const char *v) {
    if (strcmp(v, "dnnl") == 0)
        fl_bench_backend = FL_QNET_BACKEND_DNNL;
    else if (strcmp(v, "reference") == 0)
        fl_bench_backend = FL_QNET_BACKEND_REF;
    else if (strcmp(v, "onednn") == 0)
        fl_bench_backend = FL_QNET_BACKEND_ONEDNN; /* fleet's own kernels off */
    else
        return 0;
    return 1;
}

static fl_qnet_backend_kind bench_backend(void) {
    if (fl_bench_backend >= 0) return (fl_qnet_backend_kind)fl_bench_backend;
    return fl_dnnl_available() ? FL_QNET_BACKEND_DNNL : FL_QNET_BACKEND_REF;
}

fl_status fl_bench_apply_backend(fl_qnet_t *n, fl_err_t *err) {
    return fl_qnet_set_backend(n, bench_backend(), err);
}

const char *fl_bench_backend_name(void) {
    return fl_qnet_backend_name(bench_backend());
}

const char *fl_bench_amx_note(void) {
    if (bench_backend() != FL_QNET_BACKEND_DNNL || !fl_conv_img_amx_available()) return NULL;
    return "the Nature CNN's first convolution over uint8 frames runs on AMX's bf16 tiles (weights or output "
           "gradients in three exact bf16 pieces: exact products, fp32 sums), counted as fp32 FLOP against the FMA "
           "peak; FLEET_AMX=0 keeps it on the AVX-512 FMAs";
}

/* OpenBLAS core names whose kernels use AVX-512, and those that use at least AVX2. */
static int name_in(const char *name, const char *const *list) {
    for (; *list; list++)
        if (strcasecmp(name, *list) == 0) return 1;
    return 0;
}

void fl_bench_torch_env(char *buf, size_t len, char *why, size_t why_len) {
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    static const char *const avx2[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    const char *core = openblas_get_corename();
    if (!core) core = "";
    const char *want = NULL;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f") && !name_in(core, avx512))
        want = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !name_in(core, avx2))
        want = "Haswell";
    const int aten512 = __builtin_cpu_supports("avx512f");
#else
    const int aten512 = 0;
#endif
    /* fleet's heap settings (cli/heap.h): without them glibc maps and unmaps each of
     * PyTorch's activation tensors at every step (the Nature CNN's actor step at batch 64
     * ran 1.4x as fast with them, 2026-11-28) */
    snprintf(buf, len, "MALLOC_MMAP_THRESHOLD_=%u MALLOC_TRIM_THRESHOLD_=%u %s%s%s", FL_MALLOC_KEEP, FL_MALLOC_KEEP,
             want ? "OPENBLAS_CORETYPE=" : "", want ? want : "", want ? " " : "");
    if (aten512) snprintf(buf + strlen(buf), len - strlen(buf), "ATEN_CPU_CAPABILITY=avx512 ");
    if (want)
        snprintf(why, why_len,
                 "OpenBLAS picked its %s kernels for this CPU; PyTorch gets OPENBLAS_CORETYPE=%s%s, and fleet's heap "
                 "settings (MALLOC_MMAP_THRESHOLD_=MALLOC_TRIM_THRESHOLD_=%u)",
                 core, want, aten512 ? ", ATEN_CPU_CAPABILITY=avx512" : "", FL_MALLOC_KEEP);
    else
        snprintf(why, why_len,
                 "OpenBLAS runs its %s kernels; PyTorch gets %sfleet's heap settings "
                 "(MALLOC_MMAP_THRESHOLD_=MALLOC_TRIM_THRESHOLD_=%u)",
                 core, aten512 ? "ATEN_CPU_CAPABILITY=avx512 and " : "", FL_MALLOC_KEEP);
}

void fl_bench_rate_step(fl_bench_rate_t *r, double t) {
    r->n++;
    r->t = t;
    if (r->n - r->wn >= FL_BENCH_WINDOW_STEPS && t - r->wt >= FL_BENCH_WINDOW_S) {
        const double w = (double)(r->n - r->wn) / (t - r->wt);
        if (w > r->best) r->best = w;
        r->wn = r->n, r->wt = t;
    }
}

double fl_bench_rate_whole(const fl_bench_rate_t *r) {
    return r->n > 0 && r->t > 0 ? (double)r->n / r->t : 0;
}

double fl_bench_rate_best(const fl_bench_rate_t *r) {
    return r->best > 0 ? r->best : fl_bench_rate_whole(r);
}

double fl_bench_script_rate(const char *prog, const char *cmd, char *version, size_t len, double *best) {
    FILE *p = popen(cmd, "r");
    if (!p) {
        fprintf(stderr, "%s: %s: cannot start it\n", prog, cmd);
        return -1;
    }
    double rate = -1, b = -1;
    char v[64] = "", line[256] = "";
    int got = 0, threads = 0;
    while (fgets(line, sizeof line, p)) /* read everything, so that the script never writes into a closed pipe */
        if (got != 4) got = sscanf(line, "%lf %63s %d %lf", &rate, v, &threads, &b);
    const int rc = pclose(p);
    if (got != 4 || rc != 0) {
        fprintf(stderr, "%s: %s: got %d of its 4 fields, exit status %d\n", prog, cmd, got, rc);
        return -1;
    }
    snprintf(version, len, "%s", v);
    if (best) *best = b;
    return rate;
}
