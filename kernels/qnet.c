/* qnet: spec parsing, parameter layout and the forward/backward walk (see qnet.h).
 *
 * A network is an array of layers. Each kind of layer is one entry of a table of
 * functions (parse its argument, set up shapes and parameter views, initialise,
 * forward, backward); the core below only walks the array. A new kind (conv2d) is a
 * new entry: its setup maps an input shape (C, H, W) to an output shape, and dense
 * already flattens whatever shape it receives.
 *
 * Memory: parameters and gradients are two aligned buffers; everything else the reference
 * backend uses (a copy of the last input, each layer's output for max_batch samples,
 * per-layer scratch, and two ping-pong buffers for gradients flowing backward) is carved
 * out of one arena, allocated when the network first runs on that backend (at create
 * where it is the default). The oneDNN backend (dnnl.h) keeps its own buffers. */
#include "kernels/qnet.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernels/dnnl.h"
#include "kernels/ops.h"

#define MAX_OBS_DIM (1 << 24)
#define MAX_BATCH (1 << 20)
#define ALIGN_FLOATS 16 /* 64 bytes */

typedef struct shape {
    int c, h, w;
} shape_t;

static size_t shape_size(shape_t s) {
    return (size_t)s.c * (size_t)s.h * (size_t)s.w;
}

typedef enum { LAYER_DENSE, LAYER_RELU, LAYER_DUELING, LAYER_CONV, LAYER_FLATTEN, LAYER_KINDS } layer_kind;

typedef struct layer {
    layer_kind kind;
    int units;       /* dense: outputs; dueling: actions */
    shape_t in, out; /* per sample */
    size_t in_size, out_size;
    size_t w_off, b_off;    /* into params/grads, for layers with parameters */
    size_t scratch_floats;  /* per sample */
    size_t scratch_once;    /* floats of scratch shared by the samples of a call (conv's im2col) */
    fl_conv2d_shape_t conv; /* conv: channels, kernel, stride, padding (and the shapes) */
    char prefix[24];        /* view name prefix: "3.dense", "head.q", "head" */
    float *y;               /* (max_batch, out_size) */
    float *scratch;         /* (max_batch, scratch_floats) + scratch_once */
} layer_t;

/* Collects parameter views while layers are set up. */
typedef struct builder {
    fl_param_view_t *views;
    int num_views, cap;
    size_t num_params;
    int max_batch;
} builder_t;

typedef struct layer_ops {
    const char *token; /* name in the spec */
    const char *form;  /* its short form, for the list of known layers */
    const char *usage; /* what a correct token looks like */
    /* args: text between the parentheses, or NULL without parentheses. 0 = accepted. */
    int (*parse)(layer_t *l, const char *args, size_t len);
    /* Sets l->out, l->scratch_floats / scratch_once and registers the parameter views.
     * Nonzero when the layer cannot take its input shape (the message then names it). */
    int (*setup)(layer_t *l, builder_t *b);
    void (*init)(const layer_t *l, float *params, fl_rng_t *rng);
    void (*forward)(const layer_t *l, const float *params, const float *x, int B);
    /* dx may be NULL (first layer without input gradient). */
    void (*backward)(const layer_t *l, const float *params, const float *x, const float *dy, float *dx, float *grads,
                     int B);
} layer_ops_t;

struct fl_qnet {
    char *spec;
    int obs_dim, num_actions, max_batch;
    int img_h, img_w, img_c; /* image input: observations are (H, W, C) and go in as (C, H, W); 0 otherwise */
    float in_scale;          /* observations are multiplied by this on the way in (1 by default) */
    int num_layers;
    layer_t *layers;
    int num_views;
    fl_param_view_t *views;
    size_t num_params;
    float *params, *grads;
    unsigned long long params_gen; /* counts the (possible) changes of params: see fl_qnet_params */
    int inference;                 /* fl_qnet_set_inference */
    int prims_only;                /* FL_QNET_BACKEND_ONEDNN: oneDNN's primitives alone */
    fl_qnet_backend_kind backend;
    fl_dnnl_net_t *dnnl; /* the oneDNN backend's network, made when first chosen */
    size_t arena_floats; /* the reference backend's arena */
    size_t widest;       /* floats of the widest layer output (or the input) */
    float *arena;        /* NULL until the reference backend is first chosen */
    float *input;        /* (max_batch, obs_dim): copy of the last forward's obs */
    float *gbuf[2];      /* (max_batch, widest layer) each */
    int last_batch;      /* B of the last forward; 0 before the first */
    float *obs_f;        /* (max_batch, obs_dim): fl_qnet_forward_obs's conversion, made at its first use */
};

/* ---- views ------------------------------------------------------------------------- */

static size_t add_view_dims(builder_t *b, const char *prefix, const char *suffix, int rank, const int64_t *dims) {
    assert(b->num_views < b->cap && rank >= 1 && rank <= FL_PARAM_MAX_RANK);
    fl_param_view_t *v = &b->views[b->num_views++];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s.%s", prefix, suffix);
    v->offset = b->num_params;
    v->rank = rank;
    v->numel = 1;
    for (int i = 0; i < FL_PARAM_MAX_RANK; i++) {
        v->shape[i] = i < rank ? dims[i] : 1;
        v->numel *= (size_t)v->shape[i];
    }
    b->num_params += v->numel;
    return v->offset;
}

static size_t add_view(builder_t *b, const char *prefix, const char *suffix, int rank, int64_t d0, int64_t d1) {
    const int64_t dims[2] = {d0, d1};
    return add_view_dims(b, prefix, suffix, rank, dims);
}

static void init_uniform(float *p, size_t count, double bound, fl_rng_t *rng) {
    for (size_t i = 0; i < count; i++) p[i] = (float)fl_rng_uniform(rng, -bound, bound);
}

/* ---- dense ------------------------------------------------------------------------- */

static int dense_parse(layer_t *l, const char *args, size_t len) {
    if (!args || len == 0 || len > 9) return -1;
    char buf[16];
    memcpy(buf, args, len);
    buf[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)buf[i])) return -1;
    errno = 0;
    long v = strtol(buf, NULL, 10);
    if (errno || v < 1 || v > FL_QNET_MAX_UNITS) return -1;
    l->units = (int)v;
    return 0;
}

static int dense_setup(layer_t *l, builder_t *b) {
    l->out = (shape_t){l->units, 1, 1};
    l->w_off = add_view(b, l->prefix, "weight", 2, l->units, (int64_t)l->in_size);
    l->b_off = add_view(b, l->prefix, "bias", 1, l->units, 1);
    return 0;
}

static void dense_init(const layer_t *l, float *params, fl_rng_t *rng) {
    const double bound = 1.0 / sqrt((double)l->in_size);
    init_uniform(params + l->w_off, (size_t)l->units * l->in_size, bound, rng);
    init_uniform(params + l->b_off, (size_t)l->units, bound, rng);
}

static void dense_forward(const layer_t *l, const float *params, const float *x, int B) {
    fl_dense_forward(x, params + l->w_off, params + l->b_off, B, (int)l->in_size, l->units, l->y);
}

static void dense_backward(const layer_t *l, const float *params, const float *x, const float *dy, float *dx,
                           float *grads, int B) {
    fl_dense_backward(x, params + l->w_off, dy, B, (int)l->in_size, l->units, dx, grads + l->w_off, grads + l->b_off,
                      0);
}

/* ---- relu -------------------------------------------------------------------------- */

static int no_args(layer_t *l, const char *args, size_t len) {
    return args ? -1 : 0;
}

static int relu_setup(layer_t *l, builder_t *b) {
    (void)b;
    l->out = l->in;
    return 0;
}

static void relu_forward(const layer_t *l, const float *params, const float *x, int B) {
    fl_relu_forward(x, l->y, (size_t)B * l->out_size);
}

static void relu_backward(const layer_t *l, const float *params, const float *x, const float *dy, float *dx,
                          float *grads, int B) {
    if (dx) fl_relu_backward(l->y, dy, dx, (size_t)B * l->out_size);
}

/* ---- dueling head -------------------------------------------------------------------- */

static int dueling_setup(layer_t *l, builder_t *b) {
    const int64_t H = (int64_t)l->in_size, A = l->units;
    l->out = (shape_t){l->units, 1, 1};
    l->scratch_floats = (size_t)A + 1;
    l->w_off = add_view(b, l->prefix, "value.weight", 2, 1, H);
    size_t aw = add_view(b, l->prefix, "advantage.weight", 2, A, H);
    l->b_off = add_view(b, l->prefix, "value.bias", 1, 1, 1);
    size_t ab = add_view(b, l->prefix, "advantage.bias", 1, A, 1);
    assert(aw == l->w_off + (size_t)H && ab == l->b_off + 1); /* stacked as ops.h expects */
    (void)aw;
    (void)ab;
    return 0;
}

static void dueling_init(const layer_t *l, float *params, fl_rng_t *rng) {
    const double bound = 1.0 / sqrt((double)l->in_size);
    init_uniform(params + l->w_off, (size_t)(l->units + 1) * l->in_size, bound, rng);
    init_uniform(params + l->b_off, (size_t)l->units + 1, bound, rng);
}

static void dueling_forward(const layer_t *l, const float *params, const float *x, int B) {
    fl_dueling_forward(x, params + l->w_off, params + l->b_off, B, (int)l->in_size, l->units, l->scratch, l->y);
}

static void dueling_backward(const layer_t *l, const float *params, const float *x, const float *dy, float *dx,
                             float *grads, int B) {
    fl_dueling_backward(x, params + l->w_off, dy, B, (int)l->in_size, l->units, l->scratch, dx, grads + l->w_off,
                        grads + l->b_off, 0);
}

/* ---- conv2d ------------------------------------------------------------------------ */

/* conv(C,K,S) or conv(C,K,S,P): C output channels, a K x K kernel, stride S, zero
 * padding P (default 0). */
static int conv_parse(layer_t *l, const char *args, size_t len) {
    if (!args || len == 0 || len > 40) return -1;
    char buf[48];
    memcpy(buf, args, len);
    buf[len] = '\0';
    long v[4] = {0, 0, 0, 0};
    int n = 0;
    const char *p = buf;
    while (n < 4) {
        if (!isdigit((unsigned char)*p)) return -1;
        char *end;
        errno = 0;
        v[n++] = strtol(p, &end, 10);
        if (errno) return -1;
        p = end;
        if (*p == '\0') break;
        if (*p != ',') return -1;
        p++;
    }
    if (*p != '\0' || n < 3) return -1;
    if (v[0] < 1 || v[0] > 4096 || v[1] < 1 || v[1] > 64 || v[2] < 1 || v[2] > 64 || v[3] < 0 || v[3] > 64) return -1;
    l->conv.cout = (int)v[0];
    l->conv.k = (int)v[1];
    l->conv.stride = (int)v[2];
    l->conv.pad = (int)v[3];
    return 0;
}

static int conv_setup(layer_t *l, builder_t *b) {
    l->conv.cin = l->in.c;
    l->conv.h = l->in.h;
    l->conv.w = l->in.w;
    if (fl_conv2d_shape_init(&l->conv) != 0) return -1;
    l->out = (shape_t){l->conv.cout, l->conv.ho, l->conv.wo};
    l->scratch_once = fl_conv2d_col_floats(&l->conv, b->max_batch);
    const int64_t wd[4] = {l->conv.cout, l->conv.cin, l->conv.k, l->conv.k}, bd[1] = {l->conv.cout};
    l->w_off = add_view_dims(b, l->prefix, "weight", 4, wd);
    l->b_off = add_view_dims(b, l->prefix, "bias", 1, bd);
    return 0;
}

static void conv_init(const layer_t *l, float *params, fl_rng_t *rng) {
    const size_t fan_in = (size_t)l->conv.cin * l->conv.k * l->conv.k;
    const double bound = 1.0 / sqrt((double)fan_in);
    init_uniform(params + l->w_off, (size_t)l->conv.cout * fan_in, bound, rng);
    init_uniform(params + l->b_off, (size_t)l->conv.cout, bound, rng);
}

static void conv_forward(const layer_t *l, const float *params, const float *x, int B) {
    fl_conv2d_forward(&l->conv, x, params + l->w_off, params + l->b_off, B, l->scratch, l->y);
}

static void conv_backward(const layer_t *l, const float *params, const float *x, const float *dy, float *dx,
                          float *grads, int B) {
    fl_conv2d_backward(&l->conv, x, params + l->w_off, dy, B, l->scratch, dx, grads + l->w_off, grads + l->b_off, 0);
}

/* ---- flatten: (C, H, W) -> (C H W) in the same order (PyTorch's flatten of NCHW) ------ */

static int flatten_setup(layer_t *l, builder_t *b) {
    (void)b;
    l->out = (shape_t){(int)l->in_size, 1, 1};
    return 0;
}

static void flatten_forward(const layer_t *l, const float *params, const float *x, int B) {
    (void)params;
    memcpy(l->y, x, (size_t)B * l->out_size * sizeof(float));
}

static void flatten_backward(const layer_t *l, const float *params, const float *x, const float *dy, float *dx,
                             float *grads, int B) {
    (void)params;
    (void)x;
    (void)grads;
    if (dx) memcpy(dx, dy, (size_t)B * l->out_size * sizeof(float));
}

static const layer_ops_t OPS[LAYER_KINDS] = {
    [LAYER_DENSE] = {"dense", "dense(N)", "dense(N) with N an integer in 1..65536", dense_parse, dense_setup,
                     dense_init, dense_forward, dense_backward},
    [LAYER_RELU] = {"relu", "relu", "relu (no arguments)", no_args, relu_setup, NULL, relu_forward, relu_backward},
    [LAYER_DUELING] = {"dueling", "dueling", "dueling (no arguments)", no_args, dueling_setup, dueling_init,
                       dueling_forward, dueling_backward},
    [LAYER_CONV] = {"conv", "conv(C,K,S[,P])",
                    "conv(C,K,S) or conv(C,K,S,P): C output channels in 1..4096, a K x K kernel (K in 1..64), "
                    "stride S in 1..64, zero padding P in 0..64",
                    conv_parse, conv_setup, conv_init, conv_forward, conv_backward},
    [LAYER_FLATTEN] = {"flatten", "flatten", "flatten (no arguments)", no_args, flatten_setup, NULL, flatten_forward,
                       flatten_backward},
};

/* ---- spec parsing ------------------------------------------------------------------ */

/* Splits the spec into layers (without the appended head). Returns the count or -1. */
static int parse_spec(const char *spec, layer_t *layers, int cap, fl_err_t *err) {
    int count = 0, index = 0;
    const char *p = spec;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        const char *tok = p;
        while (*p && !isspace((unsigned char)*p)) p++;
        const int len = (int)(p - tok);
        index++;
        const char *paren = memchr(tok, '(', (size_t)len);
        const size_t name_len = paren ? (size_t)(paren - tok) : (size_t)len;
        int kind = -1;
        for (int k = 0; k < LAYER_KINDS; k++) {
            if (strlen(OPS[k].token) == name_len && memcmp(OPS[k].token, tok, name_len) == 0) kind = k;
        }
        if (kind < 0) {
            char known[128] = "";
            for (int k = 0; k < LAYER_KINDS; k++) {
                const char *sep = k == 0 ? "" : (k == LAYER_KINDS - 1 ? " or " : ", ");
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", sep, OPS[k].form);
            }
            fl_err_set(err, FL_INVALID_ARGUMENT, "model spec \"%.200s\": token %d \"%.*s\": unknown layer; expected %s",
                       spec, index, len > 64 ? 64 : len, tok, known);
            return -1;
        }
        const char *args = NULL;
        size_t args_len = 0;
        int bad = 0;
        if (paren) {
            args = paren + 1;
            args_len = (size_t)(tok + len - args);
            if (args_len == 0 || args[args_len - 1] != ')')
                bad = 1;
            else
                args_len--;
        }
        layer_t tmp = {.kind = (layer_kind)kind};
        if (bad || OPS[kind].parse(&tmp, args, args_len) != 0) {
            fl_err_set(err, FL_INVALID_ARGUMENT, "model spec \"%.200s\": token %d \"%.*s\": expected %s", spec, index,
                       len > 64 ? 64 : len, tok, OPS[kind].usage);
            return -1;
        }
        if (count > 0 && layers[count - 1].kind == LAYER_DUELING) {
            fl_err_set(err, FL_INVALID_ARGUMENT,
                       "model spec \"%.200s\": token %d \"%.*s\": nothing may follow dueling, which is the output "
                       "head and must be the last token",
                       spec, index, len > 64 ? 64 : len, tok);
            return -1;
        }
        if (count == cap) {
            fl_err_set(err, FL_INVALID_ARGUMENT, "model spec \"%.200s\": more than %d layers", spec, cap);
            return -1;
        }
        if (kind == LAYER_DUELING)
            snprintf(tmp.prefix, sizeof tmp.prefix, "head");
        else
            snprintf(tmp.prefix, sizeof tmp.prefix, "%d.%s", index - 1, OPS[kind].token);
        layers[count++] = tmp;
    }
    return count;
}

/* ---- create / destroy -------------------------------------------------------------- */

static size_t round_up(size_t n) {
    return (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
}

static float *alloc_floats(size_t n) {
    size_t bytes = round_up(n ? n : 1) * sizeof(float);
    return aligned_alloc(ALIGN_FLOATS * sizeof(float), bytes);
}

/* The network for observations of shape `in` (C, H, W); img: they arrive as (H, W, C). */
static fl_status create(const char *spec, shape_t in, int img, int num_actions, int max_batch, fl_qnet_t **out,
                        fl_err_t *err) {
    fl_status st = FL_OK;
    const size_t in_floats = shape_size(in);
    const int obs_dim = in_floats <= (size_t)MAX_OBS_DIM ? (int)in_floats : 0;
    if (!out) return fl_err_set(err, FL_INVALID_ARGUMENT, "qnet: out must not be NULL");
    *out = NULL;
    if (!spec) return fl_err_set(err, FL_INVALID_ARGUMENT, "qnet: spec must not be NULL");
    if (obs_dim < 1 || obs_dim > MAX_OBS_DIM)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "qnet: obs_dim = %d: expected 1..%d", obs_dim, MAX_OBS_DIM);
    if (num_actions < 1 || num_actions > FL_QNET_MAX_UNITS)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "qnet: num_actions = %d: expected 1..%d", num_actions,
                          FL_QNET_MAX_UNITS);
    if (max_batch < 1 || max_batch > MAX_BATCH)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "qnet: max_batch = %d: expected 1..%d", max_batch, MAX_BATCH);

    fl_qnet_t *n = calloc(1, sizeof *n);
    if (!n) return fl_err_set(err, FL_NO_MEMORY, "qnet: out of memory");
    n->obs_dim = obs_dim;
    n->in_scale = 1.0f;
    if (img) {
        n->img_h = in.h;
        n->img_w = in.w;
        n->img_c = in.c;
    }
    n->num_actions = num_actions;
    n->max_batch = max_batch;
    n->spec = strdup(spec);
    n->layers = calloc(FL_QNET_MAX_LAYERS, sizeof *n->layers);
    if (!n->spec || !n->layers) {
        st = fl_err_set(err, FL_NO_MEMORY, "qnet: out of memory");
        goto fail;
    }
    int count = parse_spec(spec, n->layers, FL_QNET_MAX_LAYERS - 1, err);
    if (count < 0) {
        st = FL_INVALID_ARGUMENT;
        goto fail;
    }
    if (count == 0 || n->layers[count - 1].kind != LAYER_DUELING) {
        layer_t head = {.kind = LAYER_DENSE, .units = num_actions};
        snprintf(head.prefix, sizeof head.prefix, "head.q");
        n->layers[count++] = head;
    } else {
        n->layers[count - 1].units = num_actions;
    }
    n->num_layers = count;

    /* shapes and parameter views */
    builder_t b = {
        .views = calloc((size_t)count * 4, sizeof(fl_param_view_t)), .cap = count * 4, .max_batch = max_batch};
    if (!b.views) {
        st = fl_err_set(err, FL_NO_MEMORY, "qnet: out of memory");
        goto fail;
    }
    n->views = b.views;
    shape_t shape = in;
    size_t widest = (size_t)obs_dim, arena = round_up((size_t)max_batch * obs_dim);
    for (int i = 0; i < count; i++) {
        layer_t *l = &n->layers[i];
        l->in = shape;
        l->in_size = shape_size(shape);
        if (OPS[l->kind].setup(l, &b) != 0) {
            st = fl_err_set(err, FL_INVALID_ARGUMENT,
                            "model spec \"%.200s\": layer %s cannot take its input of shape (%d, %d, %d) "
                            "(channels, height, width): the kernel is larger than the padded input",
                            spec, l->prefix, shape.c, shape.h, shape.w);
            goto fail;
        }
        l->out_size = shape_size(l->out);
        shape = l->out;
        if (l->out_size > widest) widest = l->out_size;
        arena += round_up((size_t)max_batch * l->out_size) +
                 round_up((size_t)max_batch * l->scratch_floats + l->scratch_once);
    }
    arena += 2 * round_up((size_t)max_batch * widest);
    n->num_views = b.num_views;
    n->num_params = b.num_params;
    n->arena_floats = arena;
    n->widest = widest;

    n->params = alloc_floats(n->num_params);
    n->grads = alloc_floats(n->num_params);
    if (!n->params || !n->grads) {
        st = fl_err_set(err, FL_NO_MEMORY, "qnet: out of memory for %zu parameters", n->num_params);
        goto fail;
    }
    memset(n->params, 0, n->num_params * sizeof(float));
    memset(n->grads, 0, n->num_params * sizeof(float));
    if ((st = fl_qnet_set_backend(n, FL_QNET_BACKEND_REF, err)) != FL_OK) goto fail;
    *out = n;
    return FL_OK;

fail:
    fl_qnet_destroy(n);
    return st;
}

/* The reference backend's arena (see the top of the file). */
static fl_status alloc_arena(fl_qnet_t *n, fl_err_t *err) {
    if (n->arena) return FL_OK;
    const size_t max_batch = (size_t)n->max_batch;
    n->arena = alloc_floats(n->arena_floats);
    if (!n->arena)
        return fl_err_set(err, FL_NO_MEMORY, "qnet: out of memory for %zu activation floats", n->arena_floats);
    memset(n->arena, 0, n->arena_floats * sizeof(float));
    float *p = n->arena;
    n->input = p;
    p += round_up(max_batch * n->obs_dim);
    for (int i = 0; i < n->num_layers; i++) {
        layer_t *l = &n->layers[i];
        l->y = p;
        p += round_up(max_batch * l->out_size);
        l->scratch = l->scratch_floats || l->scratch_once ? p : NULL;
        p += round_up(max_batch * l->scratch_floats + l->scratch_once);
    }
    n->gbuf[0] = p;
    p += round_up(max_batch * n->widest);
    n->gbuf[1] = p;
    p += round_up(max_batch * n->widest);
    assert((size_t)(p - n->arena) == n->arena_floats);
    return FL_OK;
}

static fl_status make_dnnl(fl_qnet_t *n, fl_err_t *err) {
    if (n->dnnl) return FL_OK;
    fl_qnet_layer_t layers[FL_QNET_MAX_LAYERS];
    for (int i = 0; i < n->num_layers; i++) fl_qnet_layer(n, i, &layers[i]);
    const fl_dnnl_net_desc_t d = {.layers = layers,
                                  .num_layers = n->num_layers,
                                  .img_h = n->img_h,
                                  .img_w = n->img_w,
                                  .img_c = n->img_c,
                                  .obs_dim = n->obs_dim,
                                  .num_actions = n->num_actions,
                                  .max_batch = n->max_batch,
                                  .params = n->params,
                                  .grads = n->grads,
                                  .params_gen = &n->params_gen,
                                  .inference = &n->inference,
                                  .prims_only = &n->prims_only};
    return fl_dnnl_net_create(&d, &n->dnnl, err);
}

fl_status fl_qnet_set_backend(fl_qnet_t *n, fl_qnet_backend_kind backend, fl_err_t *err) {
    if (!n) return fl_err_set(err, FL_INVALID_ARGUMENT, "qnet: set_backend: the network must not be NULL");
    switch (backend) {
    case FL_QNET_BACKEND_REF: FL_TRY(alloc_arena(n, err)); break;
    case FL_QNET_BACKEND_DNNL:
    case FL_QNET_BACKEND_ONEDNN:
        FL_TRY(make_dnnl(n, err));
        n->prims_only = backend == FL_QNET_BACKEND_ONEDNN;
        backend = FL_QNET_BACKEND_DNNL;
        break;
    default:
        return fl_err_set(err, FL_INVALID_ARGUMENT, "qnet: backend %d: expected FL_QNET_BACKEND_REF, _DNNL or _ONEDNN",
                          (int)backend);
    }
    n->backend = backend;
    n->last_batch = 0; /* the activations of a last forward are the other backend's */
    return FL_OK;
}

fl_qnet_backend_kind fl_qnet_backend(const fl_qnet_t *n) {
    return n->backend;
}

fl_qnet_backend_kind fl_qnet_default_backend(void) {
    return fl_dnnl_available() ? FL_QNET_BACKEND_DNNL : FL_QNET_BACKEND_REF;
}

size_t fl_qnet_describe_kernels(const fl_qnet_t *n, int B, char *out, size_t cap) {
    if (n->backend == FL_QNET_BACKEND_DNNL) return fl_dnnl_net_describe(n->dnnl, B, out, cap);
    if (cap) out[0] = '\0';
    return 0;
}

const char *fl_qnet_backend_name(fl_qnet_backend_kind backend) {
    switch (backend) {
    case FL_QNET_BACKEND_REF: return "reference";
    case FL_QNET_BACKEND_DNNL: return "dnnl";
    case FL_QNET_BACKEND_ONEDNN: return "onednn";
    }
    return "unknown";
}

fl_status fl_qnet_create(const char *spec, int obs_dim, int num_actions, int max_batch, fl_qnet_t **out,
                         fl_err_t *err) {
    if (obs_dim < 1 || obs_dim > MAX_OBS_DIM) {
        if (out) *out = NULL;
        return fl_err_set(err, FL_INVALID_ARGUMENT, "qnet: obs_dim = %d: expected 1..%d", obs_dim, MAX_OBS_DIM);
    }
    return create(spec, (shape_t){obs_dim, 1, 1}, 0, num_actions, max_batch, out, err);
}

fl_status fl_qnet_create_image(const char *spec, int h, int w, int c, int num_actions, int max_batch, fl_qnet_t **out,
                               fl_err_t *err) {
    if (h < 1 || w < 1 || c < 1 || (double)h * w * c > MAX_OBS_DIM) {
        if (out) *out = NULL;
        return fl_err_set(err, FL_INVALID_ARGUMENT, "qnet: image (%d, %d, %d): expected sizes >= 1, at most %d in all",
                          h, w, c, MAX_OBS_DIM);
    }
    return create(spec, (shape_t){c, h, w}, 1, num_actions, max_batch, out, err);
}

fl_status fl_qnet_create_for_obs(const char *spec, int rank, const int *shape, int num_actions, int max_batch,
                                 fl_qnet_t **out, fl_err_t *err) {
    if (rank == 3) return fl_qnet_create_image(spec, shape[0], shape[1], shape[2], num_actions, max_batch, out, err);
    double dim = 1;
    for (int d = 0; d < rank; d++) dim *= shape[d] > 0 ? shape[d] : 0;
    return fl_qnet_create(spec, dim > MAX_OBS_DIM ? 0 : (int)dim, num_actions, max_batch, out, err);
}

void fl_qnet_destroy(fl_qnet_t *n) {
    if (!n) return;
    fl_dnnl_net_destroy(n->dnnl);
    free(n->arena);
    free(n->grads);
    free(n->obs_f);
    free(n->params);
    free(n->views);
    free(n->layers);
    free(n->spec);
    free(n);
}

/* ---- accessors --------------------------------------------------------------------- */

size_t fl_qnet_num_params(const fl_qnet_t *n) {
    return n->num_params;
}
float *fl_qnet_params(fl_qnet_t *n) {
    n->params_gen++; /* the caller may write them (qnet.h) */
    return n->params;
}
float *fl_qnet_grads(fl_qnet_t *n) {
    return n->grads;
}
int fl_qnet_num_views(const fl_qnet_t *n) {
    return n->num_views;
}
int fl_qnet_st_tensors(fl_qnet_t *n, const char *prefix, fl_st_tensor_t *out) {
    const float *p = fl_qnet_params(n);
    for (int i = 0; i < n->num_views; i++) {
        const fl_param_view_t *v = &n->views[i];
        fl_st_tensor_t *x = &out[i];
        memset(x, 0, sizeof *x);
        snprintf(x->name, sizeof x->name, "%s.%s", prefix, v->name);
        x->dtype = FL_ST_F32;
        x->rank = v->rank;
        for (int d = 0; d < v->rank; d++) x->shape[d] = v->shape[d];
        x->data = p + v->offset;
        x->bytes = v->numel * sizeof(float);
    }
    return n->num_views;
}
int fl_qnet_obs_dim(const fl_qnet_t *n) {
    return n->obs_dim;
}
void fl_qnet_set_input_scale(fl_qnet_t *n, float scale) {
    n->in_scale = scale;
}

void fl_qnet_set_inference(fl_qnet_t *n, int on) {
    n->inference = on != 0;
}
float fl_qnet_input_scale(const fl_qnet_t *n) {
    return n->in_scale;
}
int fl_qnet_num_actions(const fl_qnet_t *n) {
    return n->num_actions;
}
int fl_qnet_max_batch(const fl_qnet_t *n) {
    return n->max_batch;
}
const char *fl_qnet_spec(const fl_qnet_t *n) {
    return n->spec;
}

int fl_qnet_num_layers(const fl_qnet_t *n) {
    return n->num_layers;
}

int fl_qnet_layer(const fl_qnet_t *n, int i, fl_qnet_layer_t *out) {
    static const fl_qnet_layer_kind kinds[LAYER_KINDS] = {
        [LAYER_DENSE] = FL_QNET_DENSE, [LAYER_RELU] = FL_QNET_RELU,       [LAYER_DUELING] = FL_QNET_DUELING,
        [LAYER_CONV] = FL_QNET_CONV,   [LAYER_FLATTEN] = FL_QNET_FLATTEN,
    };
    if (i < 0 || i >= n->num_layers) return -1;
    const layer_t *l = &n->layers[i];
    *out = (fl_qnet_layer_t){
        .kind = kinds[l->kind],
        .units = l->units,
        .in_c = l->in.c,
        .in_h = l->in.h,
        .in_w = l->in.w,
        .out_c = l->out.c,
        .out_h = l->out.h,
        .out_w = l->out.w,
        .cout = l->conv.cout,
        .k = l->conv.k,
        .stride = l->conv.stride,
        .pad = l->conv.pad,
        .w_off = l->w_off,
        .b_off = l->b_off,
        .prefix = l->prefix,
    };
    return 0;
}

const fl_param_view_t *fl_qnet_view(const fl_qnet_t *n, int i) {
    return i >= 0 && i < n->num_views ? &n->views[i] : NULL;
}

const fl_param_view_t *fl_qnet_find_view(const fl_qnet_t *n, const char *name) {
    for (int i = 0; name && i < n->num_views; i++)
        if (strcmp(n->views[i].name, name) == 0) return &n->views[i];
    return NULL;
}

/* ---- parameters -------------------------------------------------------------------- */

void fl_qnet_init(fl_qnet_t *n, fl_rng_t *rng) {
    n->params_gen++;
    for (int i = 0; i < n->num_layers; i++) {
        const layer_t *l = &n->layers[i];
        if (OPS[l->kind].init) OPS[l->kind].init(l, n->params, rng);
    }
}

fl_status fl_qnet_set_params(fl_qnet_t *n, const float *src, size_t count, fl_err_t *err) {
    if (count != n->num_params)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "qnet \"%.200s\": got %zu parameters, expected %zu", n->spec, count,
                          n->num_params);
    if (!src && count) return fl_err_set(err, FL_INVALID_ARGUMENT, "qnet: src must not be NULL");
    memcpy(n->params, src, count * sizeof(float));
    n->params_gen++;
    return FL_OK;
}

/* 1 when both networks have the same parameter views (names, shapes, offsets). */
static int same_layout(const fl_qnet_t *a, const fl_qnet_t *b) {
    if (a->num_params != b->num_params || a->num_views != b->num_views) return 0;
    for (int i = 0; i < a->num_views; i++) {
        const fl_param_view_t *u = &a->views[i], *v = &b->views[i];
        if (strcmp(u->name, v->name) != 0 || u->offset != v->offset || u->rank != v->rank ||
            memcmp(u->shape, v->shape, sizeof u->shape) != 0)
            return 0;
    }
    return 1;
}

void fl_qnet_copy_params(fl_qnet_t *dst, const fl_qnet_t *src) {
    const int same = same_layout(dst, src) && dst->obs_dim == src->obs_dim && dst->num_actions == src->num_actions;
    assert(same);
    (void)same;
    if (dst != src) memcpy(dst->params, src->params, src->num_params * sizeof(float));
    dst->params_gen++;
}

/* ---- forward / backward ------------------------------------------------------------ */

/* A oneDNN failure is a status the caller sees; its message goes to the log. */
static fl_status dnnl_status(fl_qnet_t *n, fl_status st, const fl_err_t *err) {
    if (st != FL_OK) fl_log(FL_LOG_ERROR, "qnet \"%.200s\": %s", n->spec, err->msg);
    return st;
}

/* The oneDNN backend's forward of float (f) or uint8 (u8) observations. */
static fl_status dnnl_forward(fl_qnet_t *n, const float *f, const unsigned char *u8, int B, float *q) {
    fl_err_t err;
    fl_err_init(&err);
    n->last_batch = 0;
    FL_TRY(dnnl_status(n,
                       u8 ? fl_dnnl_net_forward_u8(n->dnnl, u8, n->in_scale, B, q, &err)
                          : fl_dnnl_net_forward(n->dnnl, f, n->in_scale, B, q, &err),
                       &err));
    n->last_batch = B;
    return FL_OK;
}

fl_status fl_qnet_forward_obs(fl_qnet_t *n, fl_dtype d, const void *obs, int B, float *q) {
    if (!n || !obs || !q || B < 1 || B > n->max_batch) return FL_INVALID_ARGUMENT;
    if (d == FL_DTYPE_FLOAT32) return fl_qnet_forward(n, obs, B, q); /* no copy: the backends copy it in */
    if (n->backend == FL_QNET_BACKEND_DNNL && d == FL_DTYPE_UINT8) return dnnl_forward(n, NULL, obs, B, q);
    if (!n->obs_f && !(n->obs_f = alloc_floats((size_t)n->max_batch * n->obs_dim))) return FL_NO_MEMORY;
    if (fl_dtype_to_float(d, obs, (size_t)B * n->obs_dim, n->obs_f) != 0) return FL_INVALID_ARGUMENT;
    return fl_qnet_forward(n, n->obs_f, B, q);
}

fl_status fl_qnet_forward(fl_qnet_t *n, const float *obs, int B, float *q) {
    if (!n || !obs || !q || B < 1 || B > n->max_batch) return FL_INVALID_ARGUMENT;
    if (n->backend == FL_QNET_BACKEND_DNNL) return dnnl_forward(n, obs, NULL, B, q);
    const float sc = n->in_scale;
    if (n->img_c) { /* (B, H, W, C) -> (B, C, H, W) */
        const size_t hw = (size_t)n->img_h * n->img_w, C = (size_t)n->img_c;
        for (int b = 0; b < B; b++) {
            const float *src = obs + (size_t)b * n->obs_dim;
            float *dst = n->input + (size_t)b * n->obs_dim;
            for (size_t p = 0; p < hw; p++)
                for (size_t c = 0; c < C; c++) dst[c * hw + p] = sc * src[p * C + c];
        }
    } else if (sc != 1.0f) {
        const size_t total = (size_t)B * n->obs_dim;
        for (size_t i = 0; i < total; i++) n->input[i] = sc * obs[i];
    } else {
        memcpy(n->input, obs, (size_t)B * n->obs_dim * sizeof(float));
    }
    const float *x = n->input;
    for (int i = 0; i < n->num_layers; i++) {
        const layer_t *l = &n->layers[i];
        OPS[l->kind].forward(l, n->params, x, B);
        x = l->y;
    }
    memcpy(q, x, (size_t)B * n->num_actions * sizeof(float));
    n->last_batch = B;
    return FL_OK;
}

fl_status fl_qnet_backward_input(fl_qnet_t *n, const float *dq, int B, float *dobs) {
    if (!n || !dq || B < 1) return FL_INVALID_ARGUMENT;
    if (n->last_batch == 0) return FL_FAILED_PRECONDITION;
    if (B != n->last_batch) return FL_INVALID_ARGUMENT;
    if (n->backend == FL_QNET_BACKEND_DNNL) {
        fl_err_t err;
        fl_err_init(&err);
        return dnnl_status(n, fl_dnnl_net_backward(n->dnnl, dq, B, dobs, n->in_scale, &err), &err);
    }
    const float *dy = dq;
    int which = 0;
    for (int i = n->num_layers - 1; i >= 0; i--) {
        const layer_t *l = &n->layers[i];
        const float *x = i > 0 ? n->layers[i - 1].y : n->input;
        float *dx = i > 0 ? n->gbuf[which] : dobs && n->img_c ? n->gbuf[which] : dobs;
        OPS[l->kind].backward(l, n->params, x, dy, dx, n->grads, B);
        dy = dx;
        which ^= 1;
    }
    const float sc = n->in_scale;
    if (dobs && n->img_c) { /* (B, C, H, W) -> (B, H, W, C) */
        const size_t hw = (size_t)n->img_h * n->img_w, C = (size_t)n->img_c;
        for (int b = 0; b < B; b++) {
            const float *src = dy + (size_t)b * n->obs_dim;
            float *dst = dobs + (size_t)b * n->obs_dim;
            for (size_t p = 0; p < hw; p++)
                for (size_t c = 0; c < C; c++) dst[p * C + c] = sc * src[c * hw + p];
        }
    } else if (dobs && sc != 1.0f) {
        const size_t total = (size_t)B * n->obs_dim;
        for (size_t i = 0; i < total; i++) dobs[i] *= sc;
    }
    return FL_OK;
}

fl_status fl_qnet_backward(fl_qnet_t *n, const float *dq, int B) {
    return fl_qnet_backward_input(n, dq, B, NULL);
}
