/* optim: SGD with momentum, Adam and centered RMSProp over a flat vector (see optim.h).
 *
 * Each optimizer is one row of OPTIMS (name, state slots, defaults, checks, the settings
 * it takes, step function, GPU kernel id); everything else walks the table.
 * The state is allocated once at create as one buffer of num_slots * n floats; a step
 * is a single pass over the elements with the per-step scalars (bias corrections)
 * computed in double beforehand. */
#include "kernels/optim.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fl_optim;

/* One optimizer: a row of OPTIMS below. */
typedef struct optim_ops {
    const char *name;                           /* learner.optimizer */
    int slots;                                  /* state vectors of n floats */
    const char *slot_names[FL_OPTIM_MAX_SLOTS]; /* checkpoint tensor names */
    float slot_init[FL_OPTIM_MAX_SLOTS];        /* each slot's initial value */
    fl_optim_config_t defaults;
    /* The kind's own fields; the common ones (kind, lr) are checked by check_config. */
    fl_status (*check)(const fl_optim_config_t *c, fl_err_t *err);
    /* The settings' fields the kind takes. */
    void (*configure)(const fl_optim_settings_t *s, fl_optim_config_t *c);
    void (*step)(struct fl_optim *o, float *p, const float *g);
    int cuda; /* fused GPU kernel id (fl_cuda_optim_apply), -1 = none */
} optim_ops_t;

struct fl_optim {
    fl_optim_config_t cfg;
    const optim_ops_t *ops;
    size_t n;
    int slots;
    int64_t steps;
    float *state; /* slots * n */
};

/* 1 when lo <= v < hi (hi_open) or lo <= v <= hi, and v is finite. */
static int in_range(float v, float lo, float hi, int hi_open) {
    if (!isfinite(v) || v < lo) return 0;
    return hi_open ? v < hi : v <= hi;
}

/* Each update is written once as a loop over a span of elements, and run over spans of
 * BLOCK elements plus a tail: a span of constant length is what the compiler turns into
 * SIMD code at -O2 (the square root also needs -fno-math-errno, which kernels/CMakeLists.txt
 * gives this file). The arithmetic per element is the same either way.
 *
 * STEP_CLONES compiles a step function three times, for AVX-512, AVX2 and the base ISA,
 * and the loader picks the widest the CPU has (GCC's target_clones, an ifunc): a build
 * runs on any x86-64 and still uses the whole vector width of the machine it runs on.
 * The results are bit-identical across the clones: ISO C mode turns off FMA contraction,
 * and vector square root and division round as the scalar ones do (IEEE). */
#define BLOCK 16
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define STEP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef STEP_CLONES
#define STEP_CLONES
#endif

typedef struct sgd_k {
    float lr, mu;
} sgd_k;

static inline void sgd_span(float *restrict p, const float *restrict g, float *restrict buf, size_t count, sgd_k k) {
    for (size_t j = 0; j < count; j++) {
        buf[j] = k.mu * buf[j] + g[j];
        p[j] -= k.lr * buf[j];
    }
}

STEP_CLONES static void sgd_range(fl_optim_t *o, float *p, const float *g, size_t i, size_t end) {
    const sgd_k k = {o->cfg.lr, o->cfg.momentum};
    float *buf = o->state;
    for (; i + BLOCK <= end; i += BLOCK) sgd_span(p + i, g + i, buf + i, BLOCK, k);
    sgd_span(p + i, g + i, buf + i, end - i, k);
}

typedef struct adam_k {
    float b1, b2, eps, step_size, inv_sqrt_bc2;
} adam_k;

static inline void adam_span(float *restrict p, const float *restrict g, float *restrict m, float *restrict v,
                             size_t count, adam_k k) {
    for (size_t j = 0; j < count; j++) {
        m[j] = k.b1 * m[j] + (1.0f - k.b1) * g[j];
        v[j] = k.b2 * v[j] + (1.0f - k.b2) * g[j] * g[j];
        p[j] -= k.step_size * m[j] / (sqrtf(v[j]) * k.inv_sqrt_bc2 + k.eps);
    }
}

STEP_CLONES static void adam_range(fl_optim_t *o, float *p, const float *g, size_t i, size_t end) {
    const double t = (double)o->steps;
    const adam_k k = {o->cfg.beta1, o->cfg.beta2, o->cfg.eps, (float)(o->cfg.lr / (1.0 - pow(o->cfg.beta1, t))),
                      (float)(1.0 / sqrt(1.0 - pow(o->cfg.beta2, t)))};
    float *m = o->state, *v = o->state + o->n;
    for (; i + BLOCK <= end; i += BLOCK) adam_span(p + i, g + i, m + i, v + i, BLOCK, k);
    adam_span(p + i, g + i, m + i, v + i, end - i, k);
}

typedef struct rmsprop_k {
    float rho, lr, mu, eps;
} rmsprop_k;

static inline void rmsprop_span(float *restrict p, const float *restrict g, float *restrict ms, float *restrict mg,
                                float *restrict mom, size_t count, rmsprop_k k) {
    for (size_t j = 0; j < count; j++) {
        ms[j] = k.rho * ms[j] + (1.0f - k.rho) * g[j] * g[j];
        mg[j] = k.rho * mg[j] + (1.0f - k.rho) * g[j];
        const float d = ms[j] - mg[j] * mg[j];
        const float var = d < 0.0f ? 0.0f : d;
        mom[j] = k.mu * mom[j] + k.lr * g[j] / sqrtf(var + k.eps);
        p[j] -= mom[j];
    }
}

STEP_CLONES static void rmsprop_range(fl_optim_t *o, float *p, const float *g, size_t i, size_t end) {
    const rmsprop_k k = {o->cfg.decay, o->cfg.lr, o->cfg.momentum, o->cfg.eps};
    float *ms = o->state, *mg = o->state + o->n, *mom = o->state + 2 * o->n;
    for (; i + BLOCK <= end; i += BLOCK) rmsprop_span(p + i, g + i, ms + i, mg + i, mom + i, BLOCK, k);
    rmsprop_span(p + i, g + i, ms + i, mg + i, mom + i, end - i, k);
}

/* ---- parts: large vectors on the learner's threads -------------------------------------
 * A vector of n elements is cut into parts that depend on n alone (at most MAX_PARTS, each
 * at least PART_MIN elements and a multiple of BLOCK), and the parts run on as many OpenMP
 * threads as OpenBLAS is set to (learner.threads; the same setting as the networks'
 * kernels). Each element's arithmetic is the same whatever part or thread it falls to,
 * and the gradient norm adds its parts' sums in part order, so results do not depend on
 * the thread count. */
#define PART_MIN 32768
#define MAX_PARTS 1024

static size_t part_size(size_t n, size_t *parts) {
    size_t size = PART_MIN;
    if (n > (size_t)MAX_PARTS * PART_MIN) size = (n + MAX_PARTS - 1) / MAX_PARTS;
    size = (size + BLOCK - 1) / BLOCK * BLOCK;
    *parts = n ? (n + size - 1) / size : 0;
    return size;
}

static int part_threads(size_t parts) {
    int t = openblas_get_num_threads();
    if (t < 1) t = 1;
    return parts < 2 ? 1 : (size_t)t > parts ? (int)parts : t;
}

#ifdef _OPENMP
/* (over a variable `threads` in scope) */
#define PARTS_FOR _Pragma("omp parallel for schedule(static) num_threads(threads) if (threads > 1)")
#else
#define PARTS_FOR
#endif

typedef void (*range_fn)(fl_optim_t *o, float *p, const float *g, size_t i, size_t end);

static void step_parts(fl_optim_t *o, float *p, const float *g, range_fn range) {
    size_t parts;
    const size_t size = part_size(o->n, &parts);
    const int threads = part_threads(parts);
    if (threads == 1) {
        range(o, p, g, 0, o->n);
        return;
    }
    PARTS_FOR
    for (long k = 0; k < (long)parts; k++) {
        const size_t i = (size_t)k * size;
        range(o, p, g, i, o->n - i < size ? o->n : i + size);
    }
}

static void step_sgd(fl_optim_t *o, float *p, const float *g) {
    step_parts(o, p, g, sgd_range);
}
static void step_adam(fl_optim_t *o, float *p, const float *g) {
    step_parts(o, p, g, adam_range);
}
static void step_rmsprop(fl_optim_t *o, float *p, const float *g) {
    step_parts(o, p, g, rmsprop_range);
}

/* ---- the optimizers ------------------------------------------------------------------ */

static fl_status sgd_check(const fl_optim_config_t *c, fl_err_t *err) {
    if (!in_range(c->momentum, 0.0f, 1.0f, 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer sgd: momentum = %g: expected 0 <= momentum < 1",
                          (double)c->momentum);
    return FL_OK;
}

static void sgd_configure(const fl_optim_settings_t *s, fl_optim_config_t *c) {
    c->momentum = (float)s->momentum;
}

static fl_status adam_check(const fl_optim_config_t *c, fl_err_t *err) {
    if (!in_range(c->beta1, 0.0f, 1.0f, 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer adam: beta1 = %g: expected 0 <= beta1 < 1",
                          (double)c->beta1);
    if (!in_range(c->beta2, 0.0f, 1.0f, 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer adam: beta2 = %g: expected 0 <= beta2 < 1",
                          (double)c->beta2);
    if (!in_range(c->eps, 0.0f, INFINITY, 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer adam: eps = %g: expected a finite value >= 0",
                          (double)c->eps);
    return FL_OK;
}

static void adam_configure(const fl_optim_settings_t *s, fl_optim_config_t *c) {
    c->beta1 = (float)s->adam_beta1;
    c->beta2 = (float)s->adam_beta2;
    c->eps = (float)s->adam_eps;
}

static fl_status rmsprop_check(const fl_optim_config_t *c, fl_err_t *err) {
    if (!in_range(c->decay, 0.0f, 1.0f, 0))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer rmsprop: decay = %g: expected 0 <= decay <= 1",
                          (double)c->decay);
    if (!in_range(c->momentum, 0.0f, 1.0f, 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer rmsprop: momentum = %g: expected 0 <= momentum < 1",
                          (double)c->momentum);
    if (!in_range(c->eps, 0.0f, INFINITY, 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer rmsprop: eps = %g: expected a finite value >= 0",
                          (double)c->eps);
    return FL_OK;
}

static void rmsprop_configure(const fl_optim_settings_t *s, fl_optim_config_t *c) {
    c->decay = (float)s->rmsprop_decay;
    c->eps = (float)s->rmsprop_eps;
    c->momentum = 0.0f; /* learner.momentum is SGD's */
}

/* The defaults of the fields a kind ignores: lr 0.01, betas 0.9/0.999, eps 1e-8,
 * decay 0.95, momentum 0. */
#define DEFAULTS(kind_, lr_, eps_, momentum_)                                                        \
    {                                                                                                \
        .kind = (kind_), .lr = (lr_), .beta1 = 0.9f, .beta2 = 0.999f, .eps = (eps_), .decay = 0.95f, \
        .momentum = (momentum_)                                                                      \
    }

/* Indexed by fl_optim_kind (a new optimizer is a new row at the end); the GPU kernel ids
 * are the ones kernels/cuda/ops_cuda.cu dispatches on. */
static const optim_ops_t OPTIMS[] = {
    [FL_OPTIM_SGD] = {"sgd",
                      1,
                      {"momentum_buffer"},
                      {0.0f},
                      DEFAULTS(FL_OPTIM_SGD, 0.01f, 1e-8f, 0.9f),
                      sgd_check,
                      sgd_configure,
                      step_sgd,
                      FL_OPTIM_SGD},
    [FL_OPTIM_ADAM] = {"adam",
                       2,
                       {"exp_avg", "exp_avg_sq"},
                       {0.0f, 0.0f},
                       DEFAULTS(FL_OPTIM_ADAM, 1e-3f, 1e-8f, 0.0f),
                       adam_check,
                       adam_configure,
                       step_adam,
                       FL_OPTIM_ADAM},
    /* ms starts at one, as TensorFlow does */
    [FL_OPTIM_RMSPROP] = {"rmsprop",
                          3,
                          {"ms", "mg", "mom"},
                          {1.0f, 0.0f, 0.0f},
                          DEFAULTS(FL_OPTIM_RMSPROP, 0.00025f / 4.0f, 1.5e-7f, 0.0f),
                          rmsprop_check,
                          rmsprop_configure,
                          step_rmsprop,
                          FL_OPTIM_RMSPROP},
};

enum { KINDS = (int)(sizeof OPTIMS / sizeof OPTIMS[0]) };

int fl_optim_num_kinds(void) {
    return KINDS;
}

static const optim_ops_t *ops_of(fl_optim_kind kind) {
    return (int)kind >= 0 && (int)kind < KINDS ? &OPTIMS[kind] : NULL;
}

/* "sgd, adam or rmsprop": every name in the table, for messages. */
typedef struct names {
    char text[128];
} names_t;

static names_t known_names(void) {
    names_t n = {""};
    for (int k = 0; k < KINDS; k++) {
        const char *sep = k == 0 ? "" : k == KINDS - 1 ? " or " : ", ";
        snprintf(n.text + strlen(n.text), sizeof n.text - strlen(n.text), "%s%s", sep, OPTIMS[k].name);
    }
    return n;
}

fl_optim_config_t fl_optim_config_default(fl_optim_kind kind) {
    const optim_ops_t *ops = ops_of(kind);
    if (ops) return ops->defaults;
    const fl_optim_config_t c = DEFAULTS(kind, 0.01f, 1e-8f, 0.0f);
    return c;
}

fl_optim_config_t fl_optim_config_from(const fl_optim_settings_t *settings) {
    fl_optim_config_t c = fl_optim_config_default(settings->kind);
    c.lr = (float)settings->lr;
    const optim_ops_t *ops = ops_of(settings->kind);
    if (ops) ops->configure(settings, &c);
    return c;
}

const char *fl_optim_kind_name(fl_optim_kind kind) {
    const optim_ops_t *ops = ops_of(kind);
    return ops ? ops->name : "invalid";
}

fl_status fl_optim_kind_from_name(const char *name, fl_optim_kind *out, fl_err_t *err) {
    for (int k = 0; name && k < KINDS; k++) {
        if (strcmp(name, OPTIMS[k].name) == 0) {
            *out = (fl_optim_kind)k;
            return FL_OK;
        }
    }
    return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer \"%s\": expected %s", name ? name : "(null)",
                      known_names().text);
}

int fl_optim_cuda_kernel(fl_optim_kind kind) {
    const optim_ops_t *ops = ops_of(kind);
    return ops ? ops->cuda : -1;
}

void fl_optim_state_init(fl_optim_kind kind, float *state, size_t n) {
    const optim_ops_t *ops = ops_of(kind);
    if (!ops) return;
    memset(state, 0, (size_t)ops->slots * n * sizeof(float));
    for (int sl = 0; sl < ops->slots; sl++) {
        const float v = ops->slot_init[sl];
        if (v != 0.0f)
            for (size_t i = 0; i < n; i++) state[(size_t)sl * n + i] = v;
    }
}

static fl_status check_config(const fl_optim_config_t *c, fl_err_t *err) {
    const optim_ops_t *ops = ops_of(c->kind);
    if (!ops)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer kind %d: expected %s", (int)c->kind, known_names().text);
    if (!in_range(c->lr, 0.0f, INFINITY, 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer %s: lr = %g: expected a finite value >= 0", ops->name,
                          (double)c->lr);
    return ops->check(c, err);
}

/* ---- create / destroy ---------------------------------------------------------------- */

fl_status fl_optim_create(const fl_optim_config_t *cfg, size_t n, fl_optim_t **out, fl_err_t *err) {
    if (!cfg || !out) return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer: config and out must not be NULL");
    *out = NULL;
    FL_TRY(check_config(cfg, err));
    if (n == 0) return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer: n = 0: expected at least one parameter");
    const optim_ops_t *ops = ops_of(cfg->kind);
    const int slots = ops->slots;
    if (n > SIZE_MAX / sizeof(float) / (size_t)slots)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "optimizer: n = %zu is too large", n);
    fl_optim_t *o = calloc(1, sizeof *o);
    if (!o) return fl_err_set(err, FL_NO_MEMORY, "optimizer: out of memory");
    o->cfg = *cfg;
    o->ops = ops;
    o->n = n;
    o->slots = slots;
    o->state = malloc((size_t)slots * n * sizeof(float));
    if (!o->state) {
        free(o);
        return fl_err_set(err, FL_NO_MEMORY, "optimizer: out of memory for %d x %zu floats of state", slots, n);
    }
    fl_optim_state_init(cfg->kind, o->state, n);
    o->steps = 0;
    *out = o;
    return FL_OK;
}

void fl_optim_destroy(fl_optim_t *o) {
    if (!o) return;
    free(o->state);
    free(o);
}

void fl_optim_step(fl_optim_t *o, float *params, const float *grads) {
    o->steps++;
    o->ops->step(o, params, grads);
}

size_t fl_optim_size(const fl_optim_t *o) {
    return o->n;
}
const fl_optim_config_t *fl_optim_config(const fl_optim_t *o) {
    return &o->cfg;
}
void fl_optim_set_lr(fl_optim_t *o, float lr) {
    o->cfg.lr = lr;
}
size_t fl_optim_state_size(const fl_optim_t *o) {
    return (size_t)o->slots * o->n;
}
float *fl_optim_state(fl_optim_t *o) {
    return o->state;
}
int fl_optim_num_slots(const fl_optim_t *o) {
    return o->slots;
}
int64_t fl_optim_steps(const fl_optim_t *o) {
    return o->steps;
}
void fl_optim_set_steps(fl_optim_t *o, int64_t steps) {
    o->steps = steps;
}

const char *fl_optim_slot_name(const fl_optim_t *o, int i) {
    return i >= 0 && i < o->slots ? o->ops->slot_names[i] : NULL;
}

/* The sum of squares of g[0..count) in double, in 8 running sums (element j goes to sum
 * j % 8) added at the end: the same order on every ISA, and a vector of 8 doubles wide. */
STEP_CLONES static double sum_squares(const float *g, size_t count) {
    double acc[8] = {0};
    size_t j = 0;
    for (; j + 8 <= count; j += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)g[j + k] * (double)g[j + k];
    for (int k = 0; j < count; j++, k++) acc[k] += (double)g[j] * (double)g[j];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

STEP_CLONES static void scale_span(float *g, size_t count, float scale) {
    for (size_t j = 0; j < count; j++) g[j] *= scale;
}

float fl_clip_grad_norm(float *grads, size_t n, float max_norm) {
    size_t parts;
    const size_t size = part_size(n, &parts);
    const int threads = part_threads(parts);
    double sums[MAX_PARTS];
    PARTS_FOR
    for (long k = 0; k < (long)parts; k++) {
        const size_t i = (size_t)k * size;
        sums[k] = sum_squares(grads + i, n - i < size ? n - i : size);
    }
    double ss = 0.0;
    for (size_t k = 0; k < parts; k++) ss += sums[k];
    const double norm = sqrt(ss);
    if (max_norm > 0.0f && isfinite(norm) && norm > (double)max_norm) {
        const float scale = (float)((double)max_norm / norm);
        PARTS_FOR
        for (long k = 0; k < (long)parts; k++) {
            const size_t i = (size_t)k * size;
            scale_span(grads + i, n - i < size ? n - i : size, scale);
        }
    }
    return (float)norm;
}
