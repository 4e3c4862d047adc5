/* dnnl: the Q-network on oneDNN primitives (see dnnl.h).
 *
 * A plan is compiled once per batch size into step lists that run in order: `fwd` (the
 * forward), `bwd` (the backward down to the parameter gradients of the first layer) and
 * `ibwd` (the rest of the first layer's backward, for the input gradient). A step is a
 * oneDNN primitive with its arguments bound, or one of fleet's own ops over plan
 * buffers. Building a step list only appends; nothing is bound to a call's buffers, so
 * running a list is a loop over its steps.
 *
 * Edges. Edge i is layer i's input, edge L the network's output. Each edge is a tensor:
 * a memory descriptor (B, C, H, W), a value buffer and, once the backward is built, a
 * gradient buffer in the same layout. A relu fused into the layer before it and a
 * flatten add no tensor: a flatten's output edge is its plain (NCHW) input seen as (B,
 * C H W, 1, 1), or an input that is not plain itself (the dense layer after it reads it
 * as it lies, with its weights' columns in that order, or copies it to the plain order:
 * lplan_t's perm).
 * Where a primitive wants another layout than its input edge has, a converted tensor
 * is made by a reorder (and in the backward the gradient goes back by the reverse
 * reorder).
 *
 * Space-to-depth. A first convolution with stride f > 1 dividing its kernel k and no
 * padding (the Nature CNN's 8x8 stride-4 one over 4 channels) runs as the stride-1
 * convolution with kernel k / f over the input cut into f x f tiles, each tile's f f C
 * values made channels: (H, W, C) becomes (H / f, W / f, f f C), input element (Y f + dy,
 * X f + dx, c) going to channel (dy f + dx) C + c of pixel (Y, X), and weight (o, c, y f +
 * dy, x f + dx) to (o, (dy f + dx) C + c, y, x). It is the same sum of the same products,
 * but 64 input channels instead of 4 let oneDNN's kernels fill their vectors. The copy of
 * the observations into the input edge writes this layout directly (in the blocked
 * layout the convolution chose), fleet's ops rearrange the weights before the
 * convolution and the weight gradient after it, and an input gradient is copied back
 * the other way (rows and columns the convolution does not reach get 0).
 *
 * Sparse inputs. A dense layer whose input edge is the observations' own (directly or
 * through a flatten), on oneDNN's product, with rows of SPARSE_MIN_IN inputs or more,
 * gets one step (ST_SPARSE_FWD) that lists the batch's nonzero inputs and, when they are
 * at most 1 / SPARSE_SHARE of its values, runs kernels/dense_sparse.h's forward over
 * them, else the primitive; its weight gradient step (ST_SPARSE_WGRAD) goes the way the
 * plan's last forward went, from the same lists (held in the layer's lplan).
 *
 * Fleet's own ops (relu forward and backward, the observations' copy in and out) run on
 * the same OpenMP threads as the primitives, in fixed spans, so their results do not
 * depend on the thread count.
 *
 * Every object a plan creates is registered in it at once (steps own their primitives;
 * memory objects, buffers, tensors and kept primitive descriptors sit in lists), so a
 * failure anywhere is cleaned up by destroying the plan. */
#include "kernels/dnnl.h"
#include "kernels/conv_fwd.h"
#include "kernels/dense_small.h"
#include "kernels/dense_sparse.h"

#ifdef FL_HAVE_DNNL

#include <assert.h>
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif

#include "common/log.h"
#include "kernels/ops.h"

#define BUF_ALIGN 64

typedef enum {
    ST_PRIM,
    ST_RELU_FWD,
    ST_RELU_BWD,
    ST_COMBINE_FWD,
    ST_COMBINE_BWD,
    ST_S2D_WEIGHTS, /* the first convolution's weights, rearranged for its space-to-depth input */
    ST_S2D_WGRAD,   /* their gradient, back to the layer's own layout */
    ST_DENSE_SMALL, /* a dense layer's forward on a small batch (kernels/dense_small.h) */
    ST_THIN_WEIGHTS, /* a dense layer's weights, packed in panels of 16 outputs for dense_thin */
    ST_DENSE_THIN,   /* a dense layer's forward on short rows (kernels/dense_small.h) */
    ST_TILE_WEIGHTS, /* a layer's weights, packed for its forward on fleet's tiles */
    ST_TILE_FWD,     /* a convolution's or a large dense layer's forward on fleet's tiles (kernels/conv_fwd.h) */
    ST_TILE_WGRAD,   /* a convolution's weight and bias gradients on the same tiles */
    ST_IMG_WEIGHTS,  /* the first convolution's weights, packed for its forward on the images */
    ST_IMG_FWD,      /* the first convolution's forward on the observations as they came (fl_conv_img) */
    ST_IMG_WGRAD,    /* its weight and bias gradients over the same observations */
    ST_SPARSE_FWD,   /* the first dense layer's forward: over the nonzero inputs when they are few, else prim */
    ST_SPARSE_WGRAD  /* its weight and bias gradients: the same way as the last forward went */
} step_kind;

/* A first dense layer's sparse inputs (kernels/dense_sparse.h): the nonzero inputs the
 * last forward listed (nnz -1: too many, that forward ran the dense product; -2: no
 * forward yet) and the weight gradient's column lists. (The transposed weights are the
 * net's, shared by its plans.) */
typedef struct sparse_in {
    int cap, nnz;
    int *start, *col, *cstart, *crow;
    float *val, *cval;
    int pre; /* this forward's lists: 0 made by its step from the input edge; 1 made already
              * from uint8 observations (net_forward); -1 too many values set (the product) */
} sparse_in_t;

typedef struct step {
    step_kind kind;
    const char *layer; /* the layer's view prefix, for describe and errors */
    const char *what;  /* "fwd", "bwd data", "bwd weights", "reorder", ... */
    dnnl_primitive_t prim;
    int nargs;
    dnnl_exec_arg_t args[8];
    const float *a, *b; /* fleet ops: inputs */
    float *c;           /* fleet ops: output */
    float *c2;          /* tile weight gradient: the bias's gradient */
    size_t n;           /* relu: floats */
    int batch, actions; /* dueling combine */
    int cout, cin, k, f; /* space-to-depth weights: the layer's shape and stride; dense small:
                            out, in and relu (k) */
    const float *bias;   /* dense small, tiles */
    const fl_conv_fwd_t *tiles; /* tiles: the forward's set-up */
    fl_conv_img_t *img;         /* image forward and gradient: the set-up (the observations: the plan's img_in) */
    const struct img_in *in;
    sparse_in_t *sp;            /* sparse steps: the layer's lists (in its lplan) */
    int cached;               /* reads the parameters only: skipped while params_gen stays at seen */
    unsigned long long seen;  /* params_gen when it last ran */
    int ran;
} step_t;

typedef struct steplist {
    step_t *v;
    int n, cap;
} steplist_t;

typedef struct plist {
    void **v;
    int n, cap;
} plist_t;

/* Where element (n, c, h, w) of a 4-D tensor lies (kernels/conv_fwd.h's layout, which
 * fleet's tiles take as they are). */
typedef fl_conv_layout_t layout_t;

typedef struct tensor {
    dnnl_memory_desc_t md; /* 4-D (B, C, H, W) */
    float *val, *grad;
    dnnl_memory_t vmem, gmem;
} tensor_t;

/* What the forward build leaves for the backward build, per layer. */
typedef struct lplan {
    int fused;                    /* conv/dense: the next layer is a relu run as a post-op */
    int skip;                     /* a relu fused into the layer before */
    tensor_t *src;                /* conv: what the primitive read (the input edge or its reorder);
                                     dense, dueling: the plain input, or with perm the input edge;
                                     flatten: the plain input, or the input edge where that is not
                                     plain (it passes through) */
    dnnl_primitive_desc_t fwd_pd; /* conv, dense, dueling: the backward's hint */
    dnnl_memory_t src2d;          /* dense, dueling: the plain input as (B, in), or with perm the
                                     input edge as (B, in), its values in the edge's order */
    float *va;                    /* dueling: the stream outputs (B, 1 + A) */
    dnnl_memory_t va_mem;
    float *dva;                   /* dueling: their gradient */
    dnnl_memory_t dva_mem;
    fl_conv_fwd_t *tiles;         /* conv: the forward ran on fleet's tiles, set up here */
    int sparse;                   /* dense: the forward may take the sparse inputs (sp) */
    sparse_in_t sp;
    /* dense on oneDNN's product over a flattened edge that is not plain but holds each
     * sample's values in one run (a convolution's output, channels-last or blocked): the
     * edge is read as it lies, as (B, in) with its values in another order, and the
     * weights' columns are put in that order (wperm, a cached reorder), their gradient
     * back from dwperm; no reorder of the activations, forward or backward */
    int perm;
    float *wperm, *dwperm;
} lplan_t;

/* The observations of a plan's last forward, where its first convolution reads them as
 * they came (fl_conv_img): its weight gradient reads them again in the backward. */
typedef struct img_in {
    const unsigned char *u8;
    const float *f;
    float scale;
} img_in_t;

typedef struct plan {
    int batch, threads;
    unsigned long long used; /* the net's call counter at the last use */
    int forwarded;           /* a forward ran; its activations are in the buffers */
    int bwd_built, ibwd_built;
    int input_nhwc; /* the first convolution reads the observations channels-last, (H, W, C) */
    int s2d;        /* > 1: the first convolution's stride, run on the space-to-depth input */
    layout_t in;    /* the input edge's layout, for the observations' copy in and dobs's out */
    float *s2d_w, *s2d_g; /* space-to-depth: the first convolution's weights and their gradient */
    steplist_t fwd, bwd, ibwd;
    tensor_t **edge; /* num_layers + 1 */
    lplan_t *lp;     /* num_layers */
    plist_t tensors, mems, bufs, pds;
    plist_t tiles; /* fl_conv_fwd_t */
    fl_conv_img_t *img; /* the first convolution's forward on the observations, or NULL */
    int img_masked;     /* its weight gradient applies relu's mask itself (the bwd list has no mask step) */
    img_in_t img_in;
    plist_t scratch_mems; /* user scratchpads, all on one buffer */
    void *scratch;
    size_t scratch_bytes;
} plan_t;

struct fl_dnnl_net {
    fl_qnet_layer_t *layers;
    int num_layers;
    int img_h, img_w, img_c, obs_dim, num_actions, max_batch;
    float *params, *grads;
    const unsigned long long *params_gen;
    const int *inference; /* may be NULL */
    const int *prims_only; /* may be NULL: fl_dnnl_net_desc_t */
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    plan_t *plans[FL_DNNL_MAX_PLANS];
    unsigned long long calls;
    /* the sparse first layer's transposed weights (kernels/dense_sparse.h), one copy for
     * every plan: made again when the parameters may have changed (wt_gen: params_gen
     * when they were made) */
    float *wt;
    int wt_ok;
    unsigned long long wt_gen;
};

/* The context of one plan build: where errors go and which layer is being built. */
typedef struct bld {
    fl_dnnl_net_t *n;
    plan_t *p;
    const char *layer;
    fl_err_t *err;
} bld_t;

int fl_dnnl_available(void) { return 1; }

static fl_status dn_fail(bld_t *b, const char *call, dnnl_status_t st) {
    return fl_err_set(b->err, st == dnnl_out_of_memory ? FL_NO_MEMORY : FL_INTERNAL,
                      "dnnl: layer %s: %s failed (oneDNN status %d); expected oneDNN to take this layer", b->layer,
                      call, (int)st);
}

#define DN(b, call)                                                  \
    do {                                                             \
        dnnl_status_t dn_st_ = (call);                               \
        if (dn_st_ != dnnl_success) return dn_fail((b), #call, dn_st_); \
    } while (0)

/* The OpenMP thread count of the calling thread follows OpenBLAS's (see dnnl.h). */
static int sync_threads(void) {
    int t = openblas_get_num_threads();
    if (t < 1) t = 1;
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
    if (omp_get_max_threads() != t) omp_set_num_threads(t);
#endif
    return t;
}

/* ---- registration ------------------------------------------------------------------ */

static int plist_reserve(plist_t *l) {
    if (l->n < l->cap) return 0;
    int cap = l->cap ? 2 * l->cap : 16;
    void **v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    l->v = v;
    l->cap = cap;
    return 0;
}

static fl_status nomem(bld_t *b) {
    return fl_err_set(b->err, FL_NO_MEMORY, "dnnl: layer %s: out of memory building the plan for batch %d", b->layer,
                      b->p->batch);
}

static fl_status new_buf(bld_t *b, size_t bytes, float **out) {
    if (plist_reserve(&b->p->bufs)) return nomem(b);
    size_t size = (bytes + BUF_ALIGN - 1) / BUF_ALIGN * BUF_ALIGN;
    void *p = aligned_alloc(BUF_ALIGN, size ? size : BUF_ALIGN);
    if (!p) return nomem(b);
    memset(p, 0, size); /* blocked layouts' padding stays zero */
    b->p->bufs.v[b->p->bufs.n++] = p;
    *out = p;
    return FL_OK;
}

static fl_status new_mem(bld_t *b, const dnnl_memory_desc_t *md, void *ptr, dnnl_memory_t *out) {
    if (plist_reserve(&b->p->mems)) return nomem(b);
    DN(b, dnnl_memory_create(out, md, b->n->engine, ptr ? ptr : DNNL_MEMORY_NONE));
    b->p->mems.v[b->p->mems.n++] = *out;
    return FL_OK;
}

static fl_status keep_pd(bld_t *b, dnnl_primitive_desc_t pd) {
    if (plist_reserve(&b->p->pds)) {
        dnnl_primitive_desc_destroy(pd);
        return nomem(b);
    }
    b->p->pds.v[b->p->pds.n++] = pd;
    return FL_OK;
}

/* A buffer for the values of t, made without one. */
static fl_status tensor_alloc(bld_t *b, tensor_t *t) {
    FL_TRY(new_buf(b, dnnl_memory_desc_get_size(&t->md), &t->val));
    return new_mem(b, &t->md, t->val, &t->vmem);
}

/* A tensor of layout md; with_val: its value buffer too. */
static fl_status new_tensor(bld_t *b, const dnnl_memory_desc_t *md, int with_val, tensor_t **out) {
    if (plist_reserve(&b->p->tensors)) return nomem(b);
    tensor_t *t = calloc(1, sizeof *t);
    if (!t) return nomem(b);
    b->p->tensors.v[b->p->tensors.n++] = t;
    t->md = *md;
    *out = t;
    return with_val ? tensor_alloc(b, t) : FL_OK;
}

static fl_status ensure_grad(bld_t *b, tensor_t *t) {
    if (t->grad) return FL_OK;
    FL_TRY(new_buf(b, dnnl_memory_desc_get_size(&t->md), &t->grad));
    return new_mem(b, &t->md, t->grad, &t->gmem);
}

static fl_status add_step(bld_t *b, steplist_t *l, const step_t *s) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        step_t *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return nomem(b);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n] = *s;
    l->v[l->n].layer = b->layer;
    l->n++;
    return FL_OK;
}

/* Scratchpads are the caller's (dnnl_scratchpad_mode_user): every primitive of a plan
 * gets a memory object on the plan's one scratch buffer, grown to the largest need. */
static fl_status fit_scratch(bld_t *b, size_t bytes) {
    plan_t *p = b->p;
    if (bytes <= p->scratch_bytes) return FL_OK;
    size_t size = (bytes + BUF_ALIGN - 1) / BUF_ALIGN * BUF_ALIGN;
    void *s = aligned_alloc(BUF_ALIGN, size);
    if (!s) return nomem(b);
    for (int i = 0; i < p->scratch_mems.n; i++) {
        dnnl_status_t st = dnnl_memory_set_data_handle(p->scratch_mems.v[i], s);
        if (st != dnnl_success) {
            free(s);
            return dn_fail(b, "dnnl_memory_set_data_handle", st);
        }
    }
    free(p->scratch);
    p->scratch = s;
    p->scratch_bytes = size;
    return FL_OK;
}

/* Appends a primitive step for pd with args (nargs <= 7; the scratchpad is added). */
static fl_status add_prim(bld_t *b, steplist_t *l, const_dnnl_primitive_desc_t pd, const char *what, int nargs,
                          const dnnl_exec_arg_t *args) {
    step_t s = {.kind = ST_PRIM, .what = what, .nargs = nargs};
    memcpy(s.args, args, (size_t)nargs * sizeof *args);
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (smd && dnnl_memory_desc_get_size(smd) > 0) {
        dnnl_memory_t sm;
        if (plist_reserve(&b->p->scratch_mems)) return nomem(b);
        FL_TRY(new_mem(b, smd, NULL, &sm));
        b->p->scratch_mems.v[b->p->scratch_mems.n++] = sm;
        DN(b, dnnl_memory_set_data_handle(sm, b->p->scratch));
        FL_TRY(fit_scratch(b, dnnl_memory_desc_get_size(smd)));
        s.args[s.nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, sm};
    }
    DN(b, dnnl_primitive_create(&s.prim, pd));
    fl_status st = add_step(b, l, &s);
    if (st != FL_OK) dnnl_primitive_destroy(s.prim);
    return st;
}

static fl_status new_attr(bld_t *b, int relu, dnnl_primitive_attr_t *out) {
    DN(b, dnnl_primitive_attr_create(out));
    dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(*out, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && relu) {
        dnnl_post_ops_t po;
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) {
            st = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
            if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(*out, po);
            dnnl_post_ops_destroy(po);
        }
    }
    if (st != dnnl_success) {
        dnnl_primitive_attr_destroy(*out);
        return dn_fail(b, "setting the primitive attributes", st);
    }
    return FL_OK;
}

/* dst = src in another layout. */
static fl_status add_reorder(bld_t *b, steplist_t *l, dnnl_memory_t src, dnnl_memory_t dst) {
    const dnnl_memory_desc_t *smd, *dmd;
    DN(b, dnnl_memory_get_memory_desc(src, &smd));
    DN(b, dnnl_memory_get_memory_desc(dst, &dmd));
    dnnl_primitive_attr_t attr;
    FL_TRY(new_attr(b, 0, &attr));
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, smd, b->n->engine, dmd, b->n->engine, attr);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return dn_fail(b, "dnnl_reorder_primitive_desc_create", st);
    const dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    fl_status fs = add_prim(b, l, pd, "reorder", 2, args);
    dnnl_primitive_desc_destroy(pd);
    return fs;
}

/* A step just appended to l that reads the parameters only (a weight reorder or the
 * space-to-depth weights): run() skips it while the parameters have not changed. */
static void mark_cached(steplist_t *l) { l->v[l->n - 1].cached = 1; }

/* ---- descriptors ------------------------------------------------------------------- */

static fl_status md4(bld_t *b, dnnl_memory_desc_t *md, int n, int c, int h, int w, dnnl_format_tag_t tag) {
    const dnnl_dims_t d = {n, c, h, w};
    DN(b, dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, tag));
    return FL_OK;
}

static fl_status md2(bld_t *b, dnnl_memory_desc_t *md, int r, int c) {
    const dnnl_dims_t d = {r, c};
    DN(b, dnnl_memory_desc_init_by_tag(md, 2, d, dnnl_f32, dnnl_ab));
    return FL_OK;
}

static fl_status md1(bld_t *b, dnnl_memory_desc_t *md, int n) {
    const dnnl_dims_t d = {n};
    DN(b, dnnl_memory_desc_init_by_tag(md, 1, d, dnnl_f32, dnnl_x));
    return FL_OK;
}

/* The NCHW layout of md's dims. */
static fl_status plain_md(bld_t *b, const dnnl_memory_desc_t *md, dnnl_memory_desc_t *out) {
    return md4(b, out, (int)md->dims[0], (int)md->dims[1], (int)md->dims[2], (int)md->dims[3], dnnl_nchw);
}

static int is_ref(const_dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl ||
           strncmp(impl, "ref", 3) == 0;
}

/* pd for op_desc (the error unset: callers that can do without it try again). */
static dnnl_status_t raw_pd(bld_t *b, const void *op_desc, int relu, const_dnnl_primitive_desc_t hint,
                            dnnl_primitive_desc_t *out) {
    dnnl_primitive_attr_t attr;
    if (new_attr(b, relu, &attr) != FL_OK) return dnnl_runtime_error;
    dnnl_status_t st = dnnl_primitive_desc_create(out, op_desc, attr, b->n->engine, hint);
    dnnl_primitive_attr_destroy(attr);
    return st;
}

static fl_status make_pd(bld_t *b, const void *op_desc, int relu, const_dnnl_primitive_desc_t hint,
                         dnnl_primitive_desc_t *out) {
    DN(b, raw_pd(b, op_desc, relu, hint, out));
    return FL_OK;
}

/* attempt 0's pd when oneDNN has more than its reference implementation for it; NULL
 * otherwise (the caller then tries its second choice). */
static void try_pd(bld_t *b, const void *op_desc, int relu, const_dnnl_primitive_desc_t hint,
                   dnnl_primitive_desc_t *out) {
    if (raw_pd(b, op_desc, relu, hint, out) != dnnl_success) {
        *out = NULL;
    } else if (is_ref(*out)) {
        dnnl_primitive_desc_destroy(*out);
        *out = NULL;
    }
}

/* t itself when it has layout md, else a new tensor with md and a reorder into it. */
static fl_status tensor_as(bld_t *b, steplist_t *l, tensor_t *t, const dnnl_memory_desc_t *md, tensor_t **out) {
    if (dnnl_memory_desc_equal(&t->md, md)) {
        *out = t;
        return FL_OK;
    }
    FL_TRY(new_tensor(b, md, 1, out));
    return add_reorder(b, l, t->vmem, (*out)->vmem);
}

/* t's gradient in layout md: t's own when the layouts agree, else a reorder of it. */
static fl_status grad_as(bld_t *b, steplist_t *l, tensor_t *t, const dnnl_memory_desc_t *md, dnnl_memory_t *out) {
    if (dnnl_memory_desc_equal(&t->md, md)) {
        *out = t->gmem;
        return FL_OK;
    }
    float *buf;
    FL_TRY(new_buf(b, dnnl_memory_desc_get_size(md), &buf));
    FL_TRY(new_mem(b, md, buf, out));
    return add_reorder(b, l, t->gmem, *out);
}

/* Where a primitive writes t's gradient when it produces layout md: t's own gradient, or
 * a buffer that *back (then not NULL) reorders into it once the primitive ran. */
static fl_status grad_out(bld_t *b, tensor_t *t, const dnnl_memory_desc_t *md, dnnl_memory_t *out,
                          dnnl_memory_t *back) {
    FL_TRY(ensure_grad(b, t));
    *back = NULL;
    if (dnnl_memory_desc_equal(&t->md, md)) {
        *out = t->gmem;
        return FL_OK;
    }
    float *buf;
    FL_TRY(new_buf(b, dnnl_memory_desc_get_size(md), &buf));
    FL_TRY(new_mem(b, md, buf, out));
    *back = *out;
    return FL_OK;
}

/* *out: the memory a primitive takes for the tensor at base + off of a flat buffer
 * (parameters or gradients) whose layout is `flat`: over the buffer itself when the
 * primitive wants that layout (*flat_out = NULL), else a plan buffer of the layout it
 * wants, with *flat_out the flat buffer's memory for the caller's reorder. */
static fl_status flat_mem(bld_t *b, const dnnl_memory_desc_t *flat, float *base, size_t off,
                          const dnnl_memory_desc_t *want, dnnl_memory_t *out, dnnl_memory_t *flat_out) {
    dnnl_memory_t fm;
    FL_TRY(new_mem(b, flat, base + off, &fm));
    if (dnnl_memory_desc_equal(flat, want)) {
        *out = fm;
        *flat_out = NULL;
        return FL_OK;
    }
    float *buf;
    FL_TRY(new_buf(b, dnnl_memory_desc_get_size(want), &buf));
    FL_TRY(new_mem(b, want, buf, out));
    *flat_out = fm;
    return FL_OK;
}

/* ---- forward build ----------------------------------------------------------------- */

/* The geometry a convolution runs with: the layer's own, or for the first convolution
 * on the space-to-depth input (see the top of this file) the stride-1 one it becomes:
 * kernel k / f over (C f f, out_h + k / f - 1, out_w + k / f - 1). */
typedef struct cgeom {
    int in_c, in_h, in_w, k, stride, pad;
} cgeom_t;

static cgeom_t conv_geom(const plan_t *p, const fl_qnet_layer_t *l, int i) {
    cgeom_t g = {l->in_c, l->in_h, l->in_w, l->k, l->stride, l->pad};
    if (i == 0 && p->s2d > 1) {
        const int f = p->s2d;
        g.k = l->k / f;
        g.in_c = l->in_c * f * f;
        g.in_h = l->out_h + g.k - 1;
        g.in_w = l->out_w + g.k - 1;
        g.stride = 1;
    }
    return g;
}

/* The first convolution runs space-to-depth when it can: an image input, no padding, a
 * stride f > 1 that divides the kernel. */
static int s2d_factor(const fl_dnnl_net_t *n) {
    const fl_qnet_layer_t *l = &n->layers[0];
    if (!n->img_c || l->kind != FL_QNET_CONV || l->pad != 0 || l->stride < 2 || l->k % l->stride) return 0;
    return l->stride;
}

/* md's layout as a layout_t; 0 when it is none of those (then a reorder converts). */
static int layout_of(const dnnl_memory_desc_t *md, layout_t *out) {
    if (md->ndims != 4 || md->format_kind != dnnl_blocked || md->offset0 != 0) return 0;
    const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
    if (bd->inner_nblks > 1 || (bd->inner_nblks == 1 && bd->inner_idxs[0] != 1)) return 0;
    for (int d = 0; d < 4; d++) out->st[d] = bd->strides[d];
    out->blk = bd->inner_nblks ? bd->inner_blks[0] : 1;
    return 1;
}

/* 1 when the net takes oneDNN's primitives alone (FL_QNET_BACKEND_ONEDNN). */
static int prims_only(const fl_dnnl_net_t *n) { return n->prims_only && *n->prims_only; }

/* Fleet's tiles (kernels/conv_fwd.h) set up for g, registered in the plan: NULL in *out
 * where they do not run it (the caller takes oneDNN). */
static fl_status new_tiles(bld_t *b, const fl_conv_fwd_geom_t *g, fl_conv_fwd_t **out) {
    *out = NULL;
    if (prims_only(b->n)) return FL_OK;
    if (plist_reserve(&b->p->tiles)) return nomem(b);
    if ((*out = fl_conv_fwd_create(g))) b->p->tiles.v[b->p->tiles.n++] = *out;
    return FL_OK;
}

/* A forward on tiles c: the cached step that packs the weights w (cout, cin, k, k) when
 * the parameters change, and the forward from x to y. */
static fl_status add_tile_steps(bld_t *b, const fl_conv_fwd_t *c, const char *what, const float *w, const float *x,
                                const float *bias, float *y, int relu) {
    float *wt;
    FL_TRY(new_buf(b, fl_conv_fwd_weights_size(c) * sizeof(float), &wt));
    const step_t t = {.kind = ST_TILE_WEIGHTS, .what = "weights (tiles)", .tiles = c, .a = w, .c = wt};
    FL_TRY(add_step(b, &b->p->fwd, &t));
    mark_cached(&b->p->fwd);
    const step_t s = {.kind = ST_TILE_FWD, .what = what, .tiles = c, .a = x, .b = wt, .bias = bias, .c = y,
                      .k = relu};
    return add_step(b, &b->p->fwd, &s);
}

/* The space-to-depth weights step (fwd) or gradient step (bwd) of layer l into list. */
static fl_status add_s2d_step(bld_t *b, steplist_t *list, const fl_qnet_layer_t *l, int grad) {
    fl_dnnl_net_t *n = b->n;
    const step_t s = {.kind = grad ? ST_S2D_WGRAD : ST_S2D_WEIGHTS,
                      .what = grad ? "space-to-depth weights bwd" : "space-to-depth weights",
                      .a = grad ? b->p->s2d_g : n->params + l->w_off,
                      .c = grad ? n->grads + l->w_off : b->p->s2d_w,
                      .cout = l->cout,
                      .cin = l->in_c,
                      .k = l->k,
                      .f = b->p->s2d};
    return add_step(b, list, &s);
}

/* The memory a convolution primitive takes for its weights (or their gradient, grad) in
 * layout want, with *flat the flat buffer's memory when a reorder must convert (else
 * NULL): the layer's slice of the parameters (gradients), or the plan's space-to-depth
 * copy of it. */
static fl_status conv_wmem(bld_t *b, int i, int grad, const dnnl_memory_desc_t *want, dnnl_memory_t *out,
                           dnnl_memory_t *flat) {
    const fl_qnet_layer_t *l = &b->n->layers[i];
    const cgeom_t g = conv_geom(b->p, l, i);
    dnnl_memory_desc_t wflat;
    FL_TRY(md4(b, &wflat, l->cout, g.in_c, g.k, g.k, dnnl_oihw));
    float *base = grad ? b->n->grads : b->n->params;
    size_t off = l->w_off;
    if (i == 0 && b->p->s2d > 1) {
        base = grad ? b->p->s2d_g : b->p->s2d_w;
        off = 0;
    }
    return flat_mem(b, &wflat, base, off, want, out, flat);
}

static fl_status fwd_conv(bld_t *b, int i) {
    fl_dnnl_net_t *n = b->n;
    plan_t *p = b->p;
    const fl_qnet_layer_t *l = &n->layers[i];
    lplan_t *lp = &p->lp[i];
    const int B = p->batch, s2d = i == 0 && p->s2d > 1;
    const cgeom_t g = conv_geom(p, l, i);
    /* The first convolution reads the observations channels-last as they come; oneDNN's
     * choice for its input, blocked, would need a transposition of every observation
     * and has a slow weight gradient for few input channels. On the space-to-depth input
     * (written by fleet's copy of the observations anyway) it takes oneDNN's choice. */
    const int nhwc = i == 0 && p->input_nhwc && !s2d;
    dnnl_memory_desc_t src, wei, bia, dst;
    const dnnl_dims_t strides = {g.stride, g.stride}, pad = {g.pad, g.pad};
    dnnl_primitive_desc_t pd = NULL;
    for (int attempt = nhwc ? 0 : 1; attempt < 2 && !pd; attempt++) {
        const dnnl_format_tag_t act = attempt == 0 ? dnnl_nhwc : dnnl_format_tag_any;
        FL_TRY(md4(b, &src, B, g.in_c, g.in_h, g.in_w, act));
        FL_TRY(md4(b, &wei, l->cout, g.in_c, g.k, g.k, dnnl_format_tag_any));
        FL_TRY(md1(b, &bia, l->cout));
        FL_TRY(md4(b, &dst, B, l->out_c, l->out_h, l->out_w, act));
        dnnl_convolution_desc_t cd;
        DN(b, dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, &src, &wei,
                                                 &bia, &dst, strides, pad, pad));
        if (attempt == 0) try_pd(b, &cd, lp->fused, NULL, &pd);
        else FL_TRY(make_pd(b, &cd, lp->fused, NULL, &pd));
    }
    FL_TRY(keep_pd(b, pd));
    lp->fwd_pd = pd;
    const dnnl_memory_desc_t *S = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0),
                             *W = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0),
                             *D = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    if (s2d) {
        /* The input edge: in the primitive's layout where fleet's copy can write it (its
         * buffer made below unless fl_conv_img takes the observations as they come, in
         * the forward and in the weight gradient). */
        layout_t lay;
        dnnl_memory_desc_t nhwc_md;
        FL_TRY(md4(b, &nhwc_md, B, g.in_c, g.in_h, g.in_w, dnnl_nhwc));
        const int lay_ok = layout_of(S, &lay);
        FL_TRY(new_tensor(b, lay_ok ? S : &nhwc_md, !lay_ok, &p->edge[0]));
        FL_TRY(new_buf(b, (size_t)l->cout * g.in_c * g.k * g.k * sizeof(float), &p->s2d_w));
    }
    FL_TRY(tensor_as(b, &p->fwd, p->edge[i], S, &lp->src));
    tensor_t *out;
    FL_TRY(new_tensor(b, D, 1, &out));
    p->edge[i + 1] = out;
    layout_t in_lay, out_lay;
    if (s2d && lp->src == p->edge[0] && layout_of(D, &out_lay)) {
        /* On AVX-512 the first convolution reads the observations as they came, and so
         * does its weight gradient (fl_conv_img_wgrad, from the last forward's
         * observations): no space-to-depth copy is made, and the input edge has no
         * buffer. */
        const fl_conv_fwd_geom_t ig = {B, l->in_c, l->in_h, l->in_w, l->cout, l->out_h, l->out_w, l->k, l->stride,
                                       {{0}, 0}, out_lay};
        if (!prims_only(n) && (p->img = fl_conv_img_create(&ig))) {
            float *wt;
            FL_TRY(new_buf(b, fl_conv_img_weights_size(p->img) * sizeof(float), &wt));
            const step_t t = {.kind = ST_IMG_WEIGHTS, .what = "weights (images)", .img = p->img,
                              .a = n->params + l->w_off, .c = wt};
            FL_TRY(add_step(b, &p->fwd, &t));
            mark_cached(&p->fwd);
            const step_t st = {.kind = ST_IMG_FWD, .what = "fwd (images)", .img = p->img, .in = &p->img_in, .b = wt,
                               .bias = n->params + l->b_off, .c = out->val, .k = lp->fused};
            return add_step(b, &p->fwd, &st);
        }
    }
    if (s2d) { /* the copy's buffer, and the weights in its layout (an input gradient makes its own) */
        if (!p->edge[0]->val) FL_TRY(tensor_alloc(b, p->edge[0]));
        FL_TRY(add_s2d_step(b, &p->fwd, l, 0));
        mark_cached(&p->fwd);
    }
    /* Fleet's tiles where they run this convolution (on AVX2 CPUs without AVX-512; with
     * AVX-512, few input channels), in the layouts oneDNN chose (the backward stays
     * oneDNN's, with pd as its hint). */
    if (l->pad == 0 && layout_of(S, &in_lay) && layout_of(D, &out_lay)) {
        const fl_conv_fwd_geom_t tg = {B, g.in_c, g.in_h, g.in_w, l->cout, l->out_h, l->out_w, g.k, g.stride,
                                       in_lay, out_lay};
        fl_conv_fwd_t *c;
        FL_TRY(new_tiles(b, &tg, &c));
        lp->tiles = c;
        if (c)
            return add_tile_steps(b, c, s2d ? "fwd (space-to-depth, tiles)" : "fwd (tiles)",
                                  s2d ? p->s2d_w : n->params + l->w_off, lp->src->val, n->params + l->b_off, out->val,
                                  lp->fused);
    }
    dnnl_memory_t wm, wfrom, bm;
    FL_TRY(conv_wmem(b, i, 0, W, &wm, &wfrom));
    if (wfrom) {
        FL_TRY(add_reorder(b, &p->fwd, wfrom, wm));
        mark_cached(&p->fwd);
    }
    FL_TRY(new_mem(b, &bia, n->params + l->b_off, &bm));
    const dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, lp->src->vmem}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, out->vmem}};
    return add_prim(b, &p->fwd, pd, s2d ? "fwd (space-to-depth)" : "fwd", 4, args);
}

/* The plain (NCHW) version of edge t: t itself or a reorder of it. */
static fl_status plain_of(bld_t *b, tensor_t *t, tensor_t **out) {
    dnnl_memory_desc_t pm;
    FL_TRY(plain_md(b, &t->md, &pm));
    return tensor_as(b, &b->p->fwd, t, &pm, out);
}

#define DENSE_ANY_WEIGHTS (64 * 1024) /* weights of a dense layer that get oneDNN's layout */
#define DENSE_SMALL_BATCH 16          /* from 4 up to this batch such a layer runs dense_small (where tiles do not) */
#define DENSE_SMALL_IN 1024           /* when its rows are this long at least */
#define DENSE_HEAD_OUT 32             /* and one with up to this many outputs (a dueling head) */
#define DENSE_THIN_IN 16              /* a dense layer's forward with rows up to this long is fleet's own */
#define DENSE_TILE_BATCH 6            /* from this batch a large layer's forward runs on fleet's tiles */
#define DENSE_MID_BATCH 128           /* from this batch, on AVX-512, a mid-sized one too */
#define SPARSE_MIN_IN 64              /* a first dense layer with rows this long at least may go sparse */
#define SPARSE_SHARE 4                /* when at most 1 / this of its inputs are not 0 */

/* The lists of a first dense layer's sparse inputs at batch B (sparse_in_t). */
static fl_status new_sparse(bld_t *b, sparse_in_t *sp, int B, int in, int out) {
    const size_t cap = (size_t)B * in / SPARSE_SHARE;
    float *start, *col, *cstart, *crow;
    FL_TRY(new_buf(b, ((size_t)B + 1) * sizeof(int), &start));
    FL_TRY(new_buf(b, cap * sizeof(int), &col));
    FL_TRY(new_buf(b, cap * sizeof(float), &sp->val));
    FL_TRY(new_buf(b, ((size_t)in + 1) * sizeof(int), &cstart));
    FL_TRY(new_buf(b, cap * sizeof(int), &crow));
    FL_TRY(new_buf(b, cap * sizeof(float), &sp->cval));
    if (!b->n->wt && !(b->n->wt = aligned_alloc(BUF_ALIGN, ((size_t)in * out * sizeof(float) + BUF_ALIGN - 1) /
                                                             BUF_ALIGN * BUF_ALIGN)))
        return nomem(b);
    sp->start = (int *)(void *)start, sp->col = (int *)(void *)col;
    sp->cstart = (int *)(void *)cstart, sp->crow = (int *)(void *)crow;
    sp->cap = (int)cap;
    sp->nnz = -2; /* no forward yet */
    return FL_OK;
}

/* For edge layout e (B, C, H, W): the weights (out_n, C, H, W) laid out as e lays out a
 * sample, in *out. Seen as (out_n, C H W) they are the plain weights with their columns
 * in the order in which a sample's values lie in e. 0 where e does not hold each sample's
 * values in one run of C H W floats (padded channel blocks, the batch blocked). */
static int perm_wmd(const dnnl_memory_desc_t *e, int out_n, dnnl_memory_desc_t *out) {
    if (e->ndims != 4 || e->format_kind != dnnl_blocked || e->offset0 != 0) return 0;
    const dnnl_blocking_desc_t *bd = &e->format_desc.blocking;
    for (int k = 0; k < bd->inner_nblks; k++)
        if (bd->inner_idxs[k] == 0) return 0;
    for (int d = 0; d < 4; d++)
        if (e->padded_dims[d] != e->dims[d] || e->padded_offsets[d] != 0) return 0;
    if (bd->strides[0] != e->dims[1] * e->dims[2] * e->dims[3] ||
        dnnl_memory_desc_get_size(e) != (size_t)(e->dims[0] * bd->strides[0]) * sizeof(float))
        return 0;
    *out = *e;
    out->dims[0] = out->padded_dims[0] = out_n;
    return 1;
}

/* dense (units outputs) and the dueling head (1 + A stream outputs) as an inner product
 * over the plain input seen as (B, in), or over a flattened edge as it lies (perm, see
 * lplan_t). */
static fl_status fwd_dense(bld_t *b, int i) {
    fl_dnnl_net_t *n = b->n;
    plan_t *p = b->p;
    const fl_qnet_layer_t *l = &n->layers[i];
    lplan_t *lp = &p->lp[i];
    const int B = p->batch, dueling = l->kind == FL_QNET_DUELING;
    const int in = l->in_c * l->in_h * l->in_w, out_n = dueling ? l->units + 1 : l->units;
    tensor_t *e = p->edge[i];
    dnnl_memory_desc_t e_plain;
    FL_TRY(plain_md(b, &e->md, &e_plain));
    const int plain = dnnl_memory_desc_equal(&e->md, &e_plain);
    /* A large layer with long rows: from batch 6 on fleet's tiles (kernels/conv_fwd.h),
     * on a batch of 4 or 5 on dense_small, which reads the plain weights once per 4 rows,
     * where oneDNN's GEMM packs them at every call (at batch 1 oneDNN's own matrix-vector
     * path does as well; on short rows the per-output sums of dense_small cost more than
     * they save). Only on AVX2 CPUs without AVX-512, where they were measured against
     * oneDNN. On the same CPUs, at any batch: a layer
     * with rows of up to 16 inputs runs dense_thin (its weights packed when the
     * parameters changed). On any CPU with AVX2 and FMA, AVX-512 too, at any batch: a
     * layer with up to 32 outputs (a dueling head) runs dense_small's tiles, where
     * oneDNN's GEMM spends more on its set-up than on their few products (the Nature
     * CNN's head of 19 outputs, 18 actions, at batch 512 on AVX-512: 0.73 ms in oneDNN,
     * 0.09 ms). On AVX-512, from batch DENSE_MID_BATCH (a learner's), a layer with
     * rows of 9 to 1,023 inputs and a multiple of 32 outputs, more than a head's, that
     * does not read the observations (those may go sparse): fleet's AVX-512 tiles (the
     * MinAtar MLP's 128 x 128 layer at batch 128: that update 4-6% faster; at actors'
     * batches of 16 and 64 they were slower than oneDNN for a 256 x 256 layer).
     * The backward still takes oneDNN's primitives, with pd as their hint. */
    const int large = in >= DENSE_SMALL_IN && (long)in * out_n >= DENSE_ANY_WEIGHTS && fl_dense_small_preferred();
    /* the observations as they were copied in (directly or through a flatten) */
    const int reads_obs = p->edge[0] && p->edge[0]->val && plain && e->val == p->edge[0]->val;
    const int mid = !fl_dense_small_preferred() && B >= DENSE_MID_BATCH && in > FL_CONV_FWD_WIDE_CIN &&
                    in < DENSE_SMALL_IN && out_n % 32 == 0 && out_n > DENSE_HEAD_OUT && !reads_obs;
    fl_conv_fwd_t *tiles = NULL;
    if ((large && B >= DENSE_TILE_BATCH) || mid) { /* the layer as a 1 x 1 convolution over (B, in, 1, 1) */
        const fl_conv_layout_t rows_in = {{in, 1, in, in}, 1}, rows_out = {{out_n, 1, out_n, out_n}, 1};
        const fl_conv_fwd_geom_t tg = {B, in, 1, 1, out_n, 1, 1, 1, 1, rows_in, rows_out};
        FL_TRY(new_tiles(b, &tg, &tiles));
    }
    const int own = !prims_only(n); /* fleet's own forwards allowed */
    const int small = own && !tiles && large && B >= 4 && B <= DENSE_SMALL_BATCH;
    const int thin = own && in <= DENSE_THIN_IN && fl_dense_small_preferred();
    const int head = own && !thin && out_n <= DENSE_HEAD_OUT && fl_dense_small_supported();
    /* fleet's own forwards read the plain input; oneDNN's product reads an edge that is
     * not plain as it lies where it can (perm), in an inference network (its weights
     * permuted once per change of the parameters) or where the batch has as many rows as
     * the layer has outputs: a training step then permutes out_n x in weights twice
     * (forward, and the gradient back) where it saved 3-4 reorders of B x in activations
     * (the Nature CNN's 3136 x 512 layer at batch 32: 1.0 ms more a step on a 2-core AMD
     * EPYC; the MinAtar network's 1024 x 128 one at batch 512: 0.34 ms less, 10% of the
     * update) */
    dnnl_memory_desc_t wp;
    const int prim = !tiles && !small && !thin && !head, inference = n->inference && *n->inference;
    lp->perm = prim && !plain && (inference || B >= out_n) && perm_wmd(&e->md, out_n, &wp);
    if (lp->perm)
        lp->src = e;
    else
        FL_TRY(plain_of(b, e, &lp->src));
    dnnl_memory_desc_t src, wei, bia, dst;
    FL_TRY(md2(b, &src, B, in));
    /* A large layer takes its weights in the layout oneDNN picks (converted only when
     * the parameters changed): the plain one makes its GEMM pack them at every call. */
    dnnl_memory_desc_t wany;
    FL_TRY(md2(b, &wei, out_n, in));
    const dnnl_dims_t wd = {out_n, in};
    DN(b, dnnl_memory_desc_init_by_tag(&wany, 2, wd, dnnl_f32,
                                       (long)in * out_n >= DENSE_ANY_WEIGHTS ? dnnl_format_tag_any : dnnl_ab));
    FL_TRY(md1(b, &bia, out_n));
    FL_TRY(md2(b, &dst, B, out_n));
    dnnl_inner_product_desc_t ipd;
    DN(b, dnnl_inner_product_forward_desc_init(&ipd, dnnl_forward_training, &src, &wany, &bia, &dst));
    dnnl_primitive_desc_t pd;
    FL_TRY(make_pd(b, &ipd, lp->fused, NULL, &pd));
    FL_TRY(keep_pd(b, pd));
    lp->fwd_pd = pd;
    dnnl_memory_t wm = NULL, bm, dm, wfrom = NULL;
    FL_TRY(new_mem(b, &src, lp->src->val, &lp->src2d));
    /* A dense layer that reads the observations as they were copied in (directly or
     * through a flatten) on oneDNN's product: its forward lists the batch's nonzero
     * inputs, and where they are at most 1 / SPARSE_SHARE of them it adds up only their
     * weights (kernels/dense_sparse.h), as its weight gradient then does; otherwise the
     * primitive runs. */
    lp->sparse = own && !tiles && !small && !thin && !head && !dueling && in >= SPARSE_MIN_IN && reads_obs;
    if (lp->sparse) FL_TRY(new_sparse(b, &lp->sp, B, in, out_n));
    if (prim) {
        float *w = n->params + l->w_off;
        if (lp->perm) { /* the plain weights, (out_n, C, H, W), into the edge's order */
            dnnl_memory_desc_t w4;
            dnnl_memory_t from, to;
            FL_TRY(md4(b, &w4, out_n, (int)e->md.dims[1], (int)e->md.dims[2], (int)e->md.dims[3], dnnl_nchw));
            FL_TRY(new_buf(b, (size_t)out_n * in * sizeof(float), &lp->wperm));
            FL_TRY(new_mem(b, &w4, w, &from));
            FL_TRY(new_mem(b, &wp, lp->wperm, &to));
            FL_TRY(add_reorder(b, &p->fwd, from, to));
            mark_cached(&p->fwd);
            p->fwd.v[p->fwd.n - 1].what = "weights (edge order)";
            w = lp->wperm;
        }
        FL_TRY(flat_mem(b, &wei, w, 0, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), &wm, &wfrom));
    }
    if (wfrom) {
        FL_TRY(add_reorder(b, &p->fwd, wfrom, wm));
        mark_cached(&p->fwd);
    }
    FL_TRY(new_mem(b, &bia, n->params + l->b_off, &bm));
    dnnl_memory_desc_t omd;
    FL_TRY(md4(b, &omd, B, l->out_c, 1, 1, dnnl_nchw));
    tensor_t *out;
    FL_TRY(new_tensor(b, &omd, 1, &out));
    if (dueling) {
        FL_TRY(new_buf(b, (size_t)B * out_n * sizeof(float), &lp->va));
        FL_TRY(new_mem(b, &dst, lp->va, &dm));
        lp->va_mem = dm;
    } else {
        FL_TRY(new_mem(b, &dst, out->val, &dm));
    }
    if (tiles) {
        FL_TRY(add_tile_steps(b, tiles, "fwd (tiles)", n->params + l->w_off, lp->src->val, n->params + l->b_off,
                              dueling ? lp->va : out->val, lp->fused));
    } else if (thin) {
        float *wt;
        FL_TRY(new_buf(b, fl_dense_thin_weights_size(in, out_n) * sizeof(float), &wt));
        const step_t t = {.kind = ST_THIN_WEIGHTS, .what = "weights (short rows)", .a = n->params + l->w_off,
                          .c = wt, .cin = in, .cout = out_n};
        FL_TRY(add_step(b, &p->fwd, &t));
        mark_cached(&p->fwd);
        const step_t s = {.kind = ST_DENSE_THIN, .what = "fwd (short rows)", .a = lp->src->val, .b = wt,
                          .bias = n->params + l->b_off, .c = dueling ? lp->va : out->val, .batch = B, .cin = in,
                          .cout = out_n, .k = lp->fused};
        FL_TRY(add_step(b, &p->fwd, &s));
    } else if (small || head) {
        const step_t s = {.kind = ST_DENSE_SMALL, .what = "fwd (small batch)", .a = lp->src->val,
                          .b = n->params + l->w_off, .bias = n->params + l->b_off, .c = dueling ? lp->va : out->val,
                          .batch = B, .cin = in, .cout = out_n, .k = lp->fused};
        FL_TRY(add_step(b, &p->fwd, &s));
    } else {
        const dnnl_exec_arg_t args[4] = {
            {DNNL_ARG_SRC, lp->src2d}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dm}};
        FL_TRY(add_prim(b, &p->fwd, pd, lp->sparse ? "fwd (sparse inputs)" : "fwd", 4, args));
        if (lp->sparse) { /* the same step, the primitive its dense case */
            step_t *s = &p->fwd.v[p->fwd.n - 1];
            s->kind = ST_SPARSE_FWD;
            s->sp = &lp->sp;
            s->a = lp->src->val, s->b = n->params + l->w_off, s->bias = n->params + l->b_off, s->c = out->val;
            s->batch = B, s->cin = in, s->cout = out_n, s->k = lp->fused;
        }
    }
    if (dueling) {
        const step_t s = {.kind = ST_COMBINE_FWD, .what = "combine", .a = lp->va, .c = out->val, .batch = B,
                          .actions = l->units};
        FL_TRY(add_step(b, &p->fwd, &s));
    }
    p->edge[i + 1] = out;
    return FL_OK;
}

static fl_status fwd_relu(bld_t *b, int i) {
    plan_t *p = b->p;
    tensor_t *in = p->edge[i], *out;
    FL_TRY(new_tensor(b, &in->md, 1, &out));
    const step_t s = {.kind = ST_RELU_FWD, .what = "relu", .a = in->val, .c = out->val,
                      .n = dnnl_memory_desc_get_size(&in->md) / sizeof(float)};
    FL_TRY(add_step(b, &p->fwd, &s));
    p->edge[i + 1] = out;
    return FL_OK;
}

/* flatten: a plain input seen as (B, C H W, 1, 1), no copy; one that is not plain (a
 * convolution's output, channels-last or blocked) passes through as it is: the dense
 * layer after it reads it as it lies (perm) or makes the plain copy itself. */
static fl_status fwd_flatten(bld_t *b, int i) {
    plan_t *p = b->p;
    const fl_qnet_layer_t *l = &b->n->layers[i];
    lplan_t *lp = &p->lp[i];
    dnnl_memory_desc_t pm;
    FL_TRY(plain_md(b, &p->edge[i]->md, &pm));
    lp->src = p->edge[i];
    if (!dnnl_memory_desc_equal(&p->edge[i]->md, &pm)) {
        p->edge[i + 1] = p->edge[i];
        return FL_OK;
    }
    dnnl_memory_desc_t md;
    FL_TRY(md4(b, &md, p->batch, l->out_c, 1, 1, dnnl_nchw));
    tensor_t *out;
    FL_TRY(new_tensor(b, &md, 0, &out));
    out->val = lp->src->val;
    FL_TRY(new_mem(b, &md, out->val, &out->vmem));
    p->edge[i + 1] = out;
    return FL_OK;
}

static fl_status build_fwd(fl_dnnl_net_t *n, plan_t *p, fl_err_t *err) {
    bld_t b = {.n = n, .p = p, .layer = "input", .err = err};
    const int B = p->batch;
    p->input_nhwc = n->img_c && n->layers[0].kind == FL_QNET_CONV;
    p->s2d = prims_only(n) ? 1 : s2d_factor(n);
    if (p->s2d <= 1) { /* else the first convolution makes the input edge */
        dnnl_memory_desc_t imd;
        const fl_qnet_layer_t *l0 = &n->layers[0];
        FL_TRY(md4(&b, &imd, B, l0->in_c, l0->in_h, l0->in_w, p->input_nhwc ? dnnl_nhwc : dnnl_nchw));
        FL_TRY(new_tensor(&b, &imd, 1, &p->edge[0]));
    }
    for (int i = 0; i < n->num_layers; i++) {
        const fl_qnet_layer_t *l = &n->layers[i];
        b.layer = l->prefix;
        if (p->lp[i].skip) {
            p->edge[i + 1] = p->edge[i];
            continue;
        }
        switch (l->kind) {
        case FL_QNET_CONV: FL_TRY(fwd_conv(&b, i)); break;
        case FL_QNET_DENSE:
        case FL_QNET_DUELING: FL_TRY(fwd_dense(&b, i)); break;
        case FL_QNET_RELU: FL_TRY(fwd_relu(&b, i)); break;
        case FL_QNET_FLATTEN: FL_TRY(fwd_flatten(&b, i)); break;
        }
    }
    if (n->img_c && !layout_of(&p->edge[0]->md, &p->in))
        return fl_err_set(err, FL_INTERNAL, "dnnl: the input edge has a layout fleet cannot write");
    return FL_OK;
}

/* ---- backward build ------------------------------------------------------------------
 * Per layer two parts: the parameter gradients (and what they need first: relu's mask of
 * the incoming gradient, the dueling combine's backward) into `bwd`, and the input
 * gradient into `bwd` too, except for the first layer, whose input gradient goes into
 * `ibwd` (only wanted with dobs). */

static fl_status relu_mask(bld_t *b, steplist_t *l, tensor_t *out) {
    const step_t s = {.kind = ST_RELU_BWD, .what = "relu bwd", .a = out->val, .b = out->grad, .c = out->grad,
                      .n = dnnl_memory_desc_get_size(&out->md) / sizeof(float)};
    return add_step(b, l, &s);
}

static fl_status bwd_conv_weights(bld_t *b, int i, steplist_t *l) {
    fl_dnnl_net_t *n = b->n;
    const fl_qnet_layer_t *ly = &n->layers[i];
    lplan_t *lp = &b->p->lp[i];
    tensor_t *out = b->p->edge[i + 1];
    const cgeom_t g = conv_geom(b->p, ly, i);
    const int s2d = i == 0 && b->p->s2d > 1;
    assert(out->grad); /* the consumer's backward made it */
    if (s2d && b->p->img) {
        /* the forward read the observations as they came: so does the gradient, with no
         * space-to-depth copy of them, and relu's mask of the output gradient applied
         * a chunk at a time as it runs (not written back: an input gradient, build_ibwd,
         * masks it first) */
        const step_t t = {.kind = ST_IMG_WGRAD, .what = "bwd weights (images)", .img = b->p->img,
                          .in = &b->p->img_in, .a = lp->fused ? out->val : NULL, .b = out->grad,
                          .c = n->grads + ly->w_off, .c2 = n->grads + ly->b_off};
        b->p->img_masked = lp->fused;
        return add_step(b, l, &t);
    }
    if (lp->fused) FL_TRY(relu_mask(b, l, out));
    if (s2d && !b->p->s2d_g) FL_TRY(new_buf(b, (size_t)ly->cout * g.in_c * g.k * g.k * sizeof(float), &b->p->s2d_g));
    if (lp->tiles && fl_conv_fwd_has_wgrad(lp->tiles)) {
        /* the forward ran on the AVX2 tiles, or on AVX-512 ones over many input channels
         * (for the first convolution, fl_conv_img, they were made for this): so do the
         * parameter gradients, on its inputs as it read them */
        const step_t t = {.kind = ST_TILE_WGRAD,
                          .what = s2d ? "bwd weights (space-to-depth, tiles)" : "bwd weights (tiles)",
                          .tiles = lp->tiles, .a = lp->src->val, .b = out->grad,
                          .c = s2d ? b->p->s2d_g : n->grads + ly->w_off, .c2 = n->grads + ly->b_off};
        FL_TRY(add_step(b, l, &t));
        return s2d ? add_s2d_step(b, l, ly, 1) : FL_OK;
    }
    const dnnl_dims_t strides = {g.stride, g.stride}, pad = {g.pad, g.pad};
    dnnl_memory_desc_t wany, bia, sany, dany;
    FL_TRY(md4(b, &wany, ly->cout, g.in_c, g.k, g.k, dnnl_format_tag_any));
    FL_TRY(md1(b, &bia, ly->cout));
    FL_TRY(md4(b, &sany, b->p->batch, g.in_c, g.in_h, g.in_w, dnnl_format_tag_any));
    FL_TRY(md4(b, &dany, b->p->batch, ly->out_c, ly->out_h, ly->out_w, dnnl_format_tag_any));
    dnnl_primitive_desc_t pd = NULL;
    /* First the forward's layouts (no reorders); where oneDNN has only its reference
     * implementation for them, its own choice. */
    for (int attempt = 0; attempt < 2 && !pd; attempt++) {
        dnnl_convolution_desc_t cd;
        DN(b, dnnl_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct,
                                                          attempt ? &sany : &lp->src->md, &wany, &bia,
                                                          attempt ? &dany : &out->md, strides, pad, pad));
        if (attempt == 0) try_pd(b, &cd, 0, lp->fwd_pd, &pd);
        else FL_TRY(make_pd(b, &cd, 0, lp->fwd_pd, &pd));
    }
    const dnnl_memory_desc_t *S = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0),
                             *W = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0),
                             *D = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0);
    fl_status st;
    tensor_t *src;
    dnnl_memory_t dd, wm, wflat_m, bm;
    if ((st = tensor_as(b, l, lp->src, S, &src)) != FL_OK || (st = grad_as(b, l, out, D, &dd)) != FL_OK ||
        (st = conv_wmem(b, i, 1, W, &wm, &wflat_m)) != FL_OK ||
        (st = new_mem(b, &bia, n->grads + ly->b_off, &bm)) != FL_OK)
        goto done;
    const dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src->vmem},
                                     {DNNL_ARG_DIFF_DST, dd},
                                     {DNNL_ARG_DIFF_WEIGHTS, wm},
                                     {DNNL_ARG_DIFF_BIAS, bm}};
    if ((st = add_prim(b, l, pd, "bwd weights", 4, args)) != FL_OK) goto done;
    if (wflat_m && (st = add_reorder(b, l, wm, wflat_m)) != FL_OK) goto done;
    if (s2d) st = add_s2d_step(b, l, ly, 1);
done:
    dnnl_primitive_desc_destroy(pd);
    return st;
}

static fl_status bwd_conv_data(bld_t *b, int i, steplist_t *l) {
    fl_dnnl_net_t *n = b->n;
    const fl_qnet_layer_t *ly = &n->layers[i];
    lplan_t *lp = &b->p->lp[i];
    tensor_t *out = b->p->edge[i + 1], *in = b->p->edge[i];
    const cgeom_t g = conv_geom(b->p, ly, i);
    const dnnl_dims_t strides = {g.stride, g.stride}, pad = {g.pad, g.pad};
    dnnl_memory_desc_t wany, sany, dany;
    FL_TRY(md4(b, &wany, ly->cout, g.in_c, g.k, g.k, dnnl_format_tag_any));
    FL_TRY(md4(b, &sany, b->p->batch, g.in_c, g.in_h, g.in_w, dnnl_format_tag_any));
    FL_TRY(md4(b, &dany, b->p->batch, ly->out_c, ly->out_h, ly->out_w, dnnl_format_tag_any));
    /* the weights as they are now (the parameters may have changed since the forward) */
    if (i == 0 && b->p->s2d > 1) FL_TRY(add_s2d_step(b, l, ly, 0));
    dnnl_primitive_desc_t pd = NULL;
    for (int attempt = 0; attempt < 2 && !pd; attempt++) {
        dnnl_convolution_desc_t cd;
        DN(b, dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, attempt ? &sany : &lp->src->md,
                                                       &wany, attempt ? &dany : &out->md, strides, pad, pad));
        if (attempt == 0) try_pd(b, &cd, 0, lp->fwd_pd, &pd);
        else FL_TRY(make_pd(b, &cd, 0, lp->fwd_pd, &pd));
    }
    const dnnl_memory_desc_t *S = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_src_md, 0),
                             *W = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0),
                             *D = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0);
    fl_status st;
    dnnl_memory_t wm, wflat_m, dd, ds, back;
    if ((st = conv_wmem(b, i, 0, W, &wm, &wflat_m)) != FL_OK ||
        (wflat_m && (st = add_reorder(b, l, wflat_m, wm)) != FL_OK) || (st = grad_as(b, l, out, D, &dd)) != FL_OK ||
        (st = grad_out(b, lp->src, S, &ds, &back)) != FL_OK)
        goto done;
    const dnnl_exec_arg_t args[3] = {{DNNL_ARG_DIFF_DST, dd}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, ds}};
    if ((st = add_prim(b, l, pd, "bwd data", 3, args)) != FL_OK) goto done;
    if (back && (st = add_reorder(b, l, back, lp->src->gmem)) != FL_OK) goto done;
    if (lp->src != in) {
        if ((st = ensure_grad(b, in)) != FL_OK) goto done;
        st = add_reorder(b, l, lp->src->gmem, in->gmem);
    }
done:
    dnnl_primitive_desc_destroy(pd);
    return st;
}

/* The gradient of a dense layer's or dueling head's outputs, as (B, out). */
static fl_status dense_dy(bld_t *b, int i, steplist_t *l, dnnl_memory_t *out_mem) {
    const fl_qnet_layer_t *ly = &b->n->layers[i];
    lplan_t *lp = &b->p->lp[i];
    tensor_t *out = b->p->edge[i + 1];
    const int B = b->p->batch;
    if (ly->kind == FL_QNET_DUELING) {
        if (!lp->dva) {
            const dnnl_memory_desc_t *vmd;
            DN(b, dnnl_memory_get_memory_desc(lp->va_mem, &vmd));
            FL_TRY(new_buf(b, dnnl_memory_desc_get_size(vmd), &lp->dva));
            FL_TRY(new_mem(b, vmd, lp->dva, &lp->dva_mem));
            const step_t s = {.kind = ST_COMBINE_BWD, .what = "combine bwd", .a = out->grad, .c = lp->dva,
                              .batch = B, .actions = ly->units};
            FL_TRY(add_step(b, l, &s));
        }
        *out_mem = lp->dva_mem;
        return FL_OK;
    }
    dnnl_memory_desc_t md;
    FL_TRY(md2(b, &md, B, ly->units));
    return new_mem(b, &md, out->grad, out_mem);
}

/* A perm layer's weight gradient, in dwperm in the edge's order, reordered into dw in the
 * plain order (out_n, C, H, W). */
static fl_status perm_back(bld_t *b, steplist_t *l, const lplan_t *lp, int out_n, float *dw) {
    const dnnl_memory_desc_t *e = &lp->src->md;
    dnnl_memory_desc_t wp, w4;
    dnnl_memory_t from, to;
    if (!perm_wmd(e, out_n, &wp)) return fl_err_set(b->err, FL_INTERNAL, "dnnl: %s: no permuted layout", b->layer);
    FL_TRY(md4(b, &w4, out_n, (int)e->dims[1], (int)e->dims[2], (int)e->dims[3], dnnl_nchw));
    FL_TRY(new_mem(b, &wp, lp->dwperm, &from));
    FL_TRY(new_mem(b, &w4, dw, &to));
    FL_TRY(add_reorder(b, l, from, to));
    l->v[l->n - 1].what = "bwd weights (plain order)";
    return FL_OK;
}

static fl_status bwd_dense_weights(bld_t *b, int i, steplist_t *l) {
    fl_dnnl_net_t *n = b->n;
    const fl_qnet_layer_t *ly = &n->layers[i];
    lplan_t *lp = &b->p->lp[i];
    const int B = b->p->batch, in = ly->in_c * ly->in_h * ly->in_w;
    const int out_n = ly->kind == FL_QNET_DUELING ? ly->units + 1 : ly->units;
    if (lp->fused) FL_TRY(relu_mask(b, l, b->p->edge[i + 1]));
    dnnl_memory_t dy, wm, bm;
    FL_TRY(dense_dy(b, i, l, &dy));
    dnnl_memory_desc_t src, wei, bia, dst;
    FL_TRY(md2(b, &src, B, in));
    FL_TRY(md2(b, &wei, out_n, in));
    FL_TRY(md1(b, &bia, out_n));
    FL_TRY(md2(b, &dst, B, out_n));
    dnnl_inner_product_desc_t ipd;
    DN(b, dnnl_inner_product_backward_weights_desc_init(&ipd, &src, &wei, &bia, &dst));
    dnnl_primitive_desc_t pd;
    FL_TRY(make_pd(b, &ipd, 0, lp->fwd_pd, &pd));
    fl_status st = FL_OK;
    if (lp->perm) st = new_buf(b, (size_t)out_n * in * sizeof(float), &lp->dwperm);
    if (st == FL_OK && (st = new_mem(b, &wei, lp->perm ? lp->dwperm : n->grads + ly->w_off, &wm)) == FL_OK &&
        (st = new_mem(b, &bia, n->grads + ly->b_off, &bm)) == FL_OK) {
        const dnnl_exec_arg_t args[4] = {
            {DNNL_ARG_SRC, lp->src2d}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, wm}, {DNNL_ARG_DIFF_BIAS, bm}};
        st = add_prim(b, l, pd, lp->sparse ? "bwd weights (sparse inputs)" : "bwd weights", 4, args);
        if (st == FL_OK && lp->perm) /* the gradient's columns back into the plain order */
            st = perm_back(b, l, lp, out_n, n->grads + ly->w_off);
        if (st == FL_OK && lp->sparse) { /* the same step, the primitive its dense case */
            step_t *s = &l->v[l->n - 1];
            s->kind = ST_SPARSE_WGRAD;
            s->sp = &lp->sp;
            s->b = b->p->edge[i + 1]->grad, s->c = n->grads + ly->w_off, s->c2 = n->grads + ly->b_off;
            s->batch = B, s->cin = in, s->cout = out_n;
        }
    }
    dnnl_primitive_desc_destroy(pd);
    return st;
}

static fl_status bwd_dense_data(bld_t *b, int i, steplist_t *l) {
    fl_dnnl_net_t *n = b->n;
    const fl_qnet_layer_t *ly = &n->layers[i];
    lplan_t *lp = &b->p->lp[i];
    tensor_t *in = b->p->edge[i];
    const int B = b->p->batch, inn = ly->in_c * ly->in_h * ly->in_w;
    const int out_n = ly->kind == FL_QNET_DUELING ? ly->units + 1 : ly->units;
    dnnl_memory_t dy, wm, dx;
    FL_TRY(dense_dy(b, i, l, &dy));
    FL_TRY(ensure_grad(b, lp->src));
    dnnl_memory_desc_t src, wei, dst;
    FL_TRY(md2(b, &src, B, inn));
    FL_TRY(md2(b, &wei, out_n, inn));
    FL_TRY(md2(b, &dst, B, out_n));
    FL_TRY(new_mem(b, &wei, lp->perm ? lp->wperm : n->params + ly->w_off, &wm));
    FL_TRY(new_mem(b, &src, lp->src->grad, &dx));
    dnnl_inner_product_desc_t ipd;
    DN(b, dnnl_inner_product_backward_data_desc_init(&ipd, &src, &wei, &dst));
    dnnl_primitive_desc_t pd;
    FL_TRY(make_pd(b, &ipd, 0, lp->fwd_pd, &pd));
    const dnnl_exec_arg_t args[3] = {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, dx}};
    fl_status st = add_prim(b, l, pd, "bwd data", 3, args);
    dnnl_primitive_desc_destroy(pd);
    FL_TRY(st);
    if (lp->src != in) {
        FL_TRY(ensure_grad(b, in));
        FL_TRY(add_reorder(b, l, lp->src->gmem, in->gmem));
    }
    return FL_OK;
}

static fl_status bwd_relu_data(bld_t *b, int i, steplist_t *l) {
    tensor_t *in = b->p->edge[i], *out = b->p->edge[i + 1];
    FL_TRY(ensure_grad(b, in));
    const step_t s = {.kind = ST_RELU_BWD, .what = "relu bwd", .a = out->val, .b = out->grad, .c = in->grad,
                      .n = dnnl_memory_desc_get_size(&out->md) / sizeof(float)};
    return add_step(b, l, &s);
}

/* flatten: a plain input's gradient is the output's (the same buffer); an input that
 * passed through is the output, gradient and all. */
static fl_status bwd_flatten_data(bld_t *b, int i) {
    lplan_t *lp = &b->p->lp[i];
    tensor_t *out = b->p->edge[i + 1];
    if (out == lp->src || lp->src->grad) return FL_OK;
    lp->src->grad = out->grad;
    return new_mem(b, &lp->src->md, lp->src->grad, &lp->src->gmem);
}

static fl_status bwd_layer(bld_t *b, int i, steplist_t *l, int weights, int data) {
    const fl_qnet_layer_t *ly = &b->n->layers[i];
    b->layer = ly->prefix;
    if (b->p->lp[i].skip) return FL_OK;
    switch (ly->kind) {
    case FL_QNET_CONV:
        if (weights) FL_TRY(bwd_conv_weights(b, i, l));
        if (data) FL_TRY(bwd_conv_data(b, i, l));
        break;
    case FL_QNET_DENSE:
    case FL_QNET_DUELING:
        if (weights) FL_TRY(bwd_dense_weights(b, i, l));
        if (data) FL_TRY(bwd_dense_data(b, i, l));
        break;
    case FL_QNET_RELU:
        if (data) FL_TRY(bwd_relu_data(b, i, l));
        break;
    case FL_QNET_FLATTEN:
        if (data) FL_TRY(bwd_flatten_data(b, i));
        break;
    }
    return FL_OK;
}

static fl_status build_bwd(fl_dnnl_net_t *n, plan_t *p, fl_err_t *err) {
    bld_t b = {.n = n, .p = p, .layer = "output", .err = err};
    FL_TRY(ensure_grad(&b, p->edge[n->num_layers]));
    for (int i = n->num_layers - 1; i >= 0; i--) FL_TRY(bwd_layer(&b, i, &p->bwd, 1, i > 0));
    p->bwd_built = 1;
    return FL_OK;
}

static fl_status build_ibwd(fl_dnnl_net_t *n, plan_t *p, fl_err_t *err) {
    bld_t b = {.n = n, .p = p, .layer = "input", .err = err};
    if (p->img_masked) FL_TRY(relu_mask(&b, &p->ibwd, p->edge[1])); /* the weight gradient did not write it */
    FL_TRY(bwd_layer(&b, 0, &p->ibwd, 0, 1));
    b.layer = "input";
    FL_TRY(ensure_grad(&b, p->edge[0]));
    p->ibwd_built = 1;
    return FL_OK;
}

/* ---- plans ------------------------------------------------------------------------- */

static void free_steps(steplist_t *l) {
    for (int i = 0; i < l->n; i++)
        if (l->v[i].prim) dnnl_primitive_destroy(l->v[i].prim);
    free(l->v);
}

static void plan_destroy(plan_t *p) {
    if (!p) return;
    free_steps(&p->fwd);
    free_steps(&p->bwd);
    free_steps(&p->ibwd);
    for (int i = 0; i < p->pds.n; i++) dnnl_primitive_desc_destroy(p->pds.v[i]);
    for (int i = 0; i < p->mems.n; i++) dnnl_memory_destroy(p->mems.v[i]);
    for (int i = 0; i < p->bufs.n; i++) free(p->bufs.v[i]);
    for (int i = 0; i < p->tiles.n; i++) fl_conv_fwd_destroy(p->tiles.v[i]);
    fl_conv_img_destroy(p->img);
    for (int i = 0; i < p->tensors.n; i++) free(p->tensors.v[i]);
    free(p->pds.v);
    free(p->mems.v);
    free(p->bufs.v);
    free(p->tiles.v);
    free(p->tensors.v);
    free(p->scratch_mems.v);
    free(p->scratch);
    free(p->edge);
    free(p->lp);
    free(p);
}

static fl_status plan_create(fl_dnnl_net_t *n, int B, int threads, plan_t **out, fl_err_t *err) {
    plan_t *p = calloc(1, sizeof *p);
    if (p) {
        p->edge = calloc((size_t)n->num_layers + 1, sizeof *p->edge);
        p->lp = calloc((size_t)n->num_layers, sizeof *p->lp);
    }
    if (!p || !p->edge || !p->lp) {
        plan_destroy(p);
        return fl_err_set(err, FL_NO_MEMORY, "dnnl: out of memory creating the plan for batch %d", B);
    }
    p->batch = B;
    p->threads = threads;
    for (int i = 0; i + 1 < n->num_layers; i++) {
        const fl_qnet_layer_kind k = n->layers[i].kind;
        if ((k == FL_QNET_CONV || k == FL_QNET_DENSE) && n->layers[i + 1].kind == FL_QNET_RELU && !p->lp[i].skip) {
            p->lp[i].fused = 1;
            p->lp[i + 1].skip = 1;
        }
    }
    fl_status st = build_fwd(n, p, err);
    if (st != FL_OK) {
        plan_destroy(p);
        return st;
    }
    *out = p;
    return FL_OK;
}

static size_t describe_list(const steplist_t *l, char *out, size_t cap, size_t len) {
    for (int i = 0; i < l->n; i++) {
        const step_t *s = &l->v[i];
        const char *impl = NULL;
        const int tile = s->kind == ST_TILE_FWD || s->kind == ST_TILE_WGRAD;
        if ((s->kind == ST_IMG_FWD || s->kind == ST_IMG_WGRAD) && fl_conv_img_amx(s->img)) {
            impl = "fleet:amx (uint8 observations; avx512 for float)";
        } else if (s->kind == ST_IMG_FWD || s->kind == ST_IMG_WGRAD || (tile && fl_conv_fwd_wide(s->tiles))) {
            impl = "fleet:avx512";
        } else if (s->kind == ST_DENSE_SMALL || s->kind == ST_DENSE_THIN || tile) {
            impl = "fleet:avx2";
        } else if (s->kind == ST_PRIM || s->kind == ST_SPARSE_FWD || s->kind == ST_SPARSE_WGRAD) {
            const_dnnl_primitive_desc_t pd = NULL;
            if (dnnl_primitive_get_primitive_desc(s->prim, &pd) != dnnl_success ||
                dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success)
                impl = "?";
        } else {
            continue;
        }
        const int sparse = s->kind == ST_SPARSE_FWD || s->kind == ST_SPARSE_WGRAD;
        char last[96] = "";
        if (s->kind == ST_SPARSE_FWD && s->sp->nnz >= 0)
            snprintf(last, sizeof last, " (last forward: sparse, %d of %ld inputs not 0)", s->sp->nnz,
                     (long)s->batch * s->cin);
        else if (s->kind == ST_SPARSE_FWD && s->sp->nnz == -1)
            snprintf(last, sizeof last, " (last forward: dense, over %d of %ld inputs not 0)", s->sp->cap,
                     (long)s->batch * s->cin);
        int w = snprintf(len < cap ? out + len : NULL, len < cap ? cap - len : 0, "%s %s: %s%s%s\n", s->layer,
                         s->what, sparse ? "fleet:sparse, else " : "", impl, last);
        if (w > 0) len += (size_t)w;
    }
    return len;
}

static plan_t *find_plan(const fl_dnnl_net_t *n, int B) {
    for (int i = 0; i < FL_DNNL_MAX_PLANS; i++)
        if (n->plans[i] && n->plans[i]->batch == B) return n->plans[i];
    return NULL;
}

/* The plan for B at the current thread count, built when missing or stale. */
static fl_status get_plan(fl_dnnl_net_t *n, int B, plan_t **out, fl_err_t *err) {
    const int threads = sync_threads();
    int slot = -1;
    for (int i = 0; i < FL_DNNL_MAX_PLANS; i++) {
        plan_t *p = n->plans[i];
        if (p && p->batch == B) {
            if (p->threads == threads) {
                p->used = ++n->calls;
                *out = p;
                return FL_OK;
            }
            slot = i;
            break;
        }
    }
    for (int i = 0; slot < 0 && i < FL_DNNL_MAX_PLANS; i++)
        if (!n->plans[i]) slot = i;
    if (slot < 0) {
        slot = 0;
        for (int i = 1; i < FL_DNNL_MAX_PLANS; i++)
            if (n->plans[i]->used < n->plans[slot]->used) slot = i;
    }
    plan_destroy(n->plans[slot]);
    n->plans[slot] = NULL;
    plan_t *p = NULL;
    FL_TRY(plan_create(n, B, threads, &p, err));
    p->used = ++n->calls;
    n->plans[slot] = p;
    if (fl_log_get_level() <= FL_LOG_DEBUG) {
        char buf[2048];
        describe_list(&p->fwd, buf, sizeof buf, 0);
        fl_log(FL_LOG_DEBUG, "dnnl: forward plan for batch %d, %d threads:\n%s", B, threads, buf);
    }
    *out = p;
    return FL_OK;
}

/* ---- running ----------------------------------------------------------------------- */

/* oneDNN's generated GEMM kernels (x64:gemm:jit, in the 2.x releases and up to 3.11)
 * point the stack pointer into a heap buffer while they run. A signal handled on that
 * thread then has its frame written by the kernel below that pointer, into the heap:
 * glibc aborts on a later free ("corrupted size vs. prev_size"), or data changes. So
 * every call holds the asynchronous signals on its thread and they are delivered when
 * it returns. The OpenMP threads oneDNN starts inherit the held mask (they are created
 * inside a call) and never take a signal. The fault signals stay open: a fault in a
 * kernel still stops the process. */
static void hold_signals(sigset_t *old) {
    sigset_t held;
    sigfillset(&held);
    const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) sigdelset(&held, faults[i]);
    pthread_sigmask(SIG_BLOCK, &held, old);
}

static void release_signals(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

/* Fleet's own elementwise ops run on the plan's OpenMP threads, in spans of PAR_SPAN
 * floats (each span the same op, so the results do not depend on the thread count). */
#define PAR_SPAN 16384
#ifdef _OPENMP
#define PAR_FOR _Pragma("omp parallel for schedule(static)")
#else
#define PAR_FOR
#endif

static void par_relu_forward(const float *x, float *y, size_t n) {
    const long spans = (long)((n + PAR_SPAN - 1) / PAR_SPAN);
    PAR_FOR
    for (long k = 0; k < spans; k++) {
        const size_t i = (size_t)k * PAR_SPAN;
        fl_relu_forward(x + i, y + i, n - i < PAR_SPAN ? n - i : PAR_SPAN);
    }
}

static void par_relu_backward(const float *y, const float *dy, float *dx, size_t n) {
    const long spans = (long)((n + PAR_SPAN - 1) / PAR_SPAN);
    PAR_FOR
    for (long k = 0; k < spans; k++) {
        const size_t i = (size_t)k * PAR_SPAN;
        fl_relu_backward(y + i, dy + i, dx + i, n - i < PAR_SPAN ? n - i : PAR_SPAN);
    }
}

/* Space-to-depth weights: w' (cout, cin f f, k / f, k / f) from w (cout, cin, k, k), with
 * w'[o][(dy f + dx) cin + c][y][x] = w[o][c][y f + dy][x f + dx]; grad: the reverse. */
static void s2d_weights(const step_t *s, int grad) {
    const int f = s->f, C = s->cin, k = s->k, kk = k / f, C2 = C * f * f;
    for (int o = 0; o < s->cout; o++)
        for (int c = 0; c < C; c++)
            for (int dy = 0; dy < f; dy++)
                for (int dx = 0; dx < f; dx++)
                    for (int y = 0; y < kk; y++)
                        for (int x = 0; x < kk; x++) {
                            const size_t w = (((size_t)o * C + c) * k + (size_t)y * f + dy) * k + (size_t)x * f + dx;
                            const size_t w2 = (((size_t)o * C2 + (size_t)(dy * f + dx) * C + c) * kk + y) * kk + x;
                            if (grad) s->c[w] = s->a[w2];
                            else s->c[w2] = s->a[w];
                        }
}

static fl_status exec_prim(fl_dnnl_net_t *n, const step_t *s, fl_err_t *err) {
    dnnl_status_t st = dnnl_primitive_execute(s->prim, n->stream, s->nargs, s->args);
    if (st != dnnl_success)
        return fl_err_set(err, FL_INTERNAL, "dnnl: layer %s: %s failed to run (oneDNN status %d)", s->layer, s->what,
                          (int)st);
    return FL_OK;
}

/* A first dense layer's forward: the nonzero inputs listed, then the sparse sums (the
 * transposed weights made again when the parameters may have changed), or, with too
 * many of them, the primitive (1 returned: it is pending on the stream). */
static int sparse_forward(fl_dnnl_net_t *n, const step_t *s, unsigned long long gen) {
    sparse_in_t *sp = s->sp;
    if (sp->pre == 0) sp->nnz = fl_sparse_rows(s->a, s->batch, s->cin, sp->cap, sp->start, sp->col, sp->val);
    else if (sp->pre < 0) sp->nnz = -1;
    sp->pre = 0;
    if (sp->nnz < 0) return 1;
    if (!n->wt_ok || n->wt_gen != gen) {
        fl_dense_sparse_weights(s->b, n->wt, s->cin, s->cout);
        n->wt_ok = 1;
        n->wt_gen = gen;
    }
    fl_dense_sparse_forward(sp->start, sp->col, sp->val, n->wt, s->bias, s->c, s->batch, s->cout, s->k);
    return 0;
}

static fl_status run(fl_dnnl_net_t *n, steplist_t *l, fl_err_t *err) {
    int pending = 0;
    const unsigned long long gen = *n->params_gen;
    for (int i = 0; i < l->n; i++) {
        step_t *s = &l->v[i];
        if (s->cached) {
            if (s->ran && s->seen == gen) continue; /* its output still holds these parameters */
            s->ran = 1;
            s->seen = gen;
        }
        if (s->kind == ST_PRIM) {
            FL_TRY(exec_prim(n, s, err));
            pending = 1;
            continue;
        }
        if (pending) {
            dnnl_stream_wait(n->stream);
            pending = 0;
        }
        switch (s->kind) {
        case ST_RELU_FWD: par_relu_forward(s->a, s->c, s->n); break;
        case ST_RELU_BWD: par_relu_backward(s->a, s->b, s->c, s->n); break;
        case ST_COMBINE_FWD: fl_dueling_combine_forward(s->a, s->batch, s->actions, s->c); break;
        case ST_COMBINE_BWD: fl_dueling_combine_backward(s->a, s->batch, s->actions, s->c); break;
        case ST_S2D_WEIGHTS: s2d_weights(s, 0); break;
        case ST_S2D_WGRAD: s2d_weights(s, 1); break;
        case ST_DENSE_SMALL: fl_dense_small_forward(s->a, s->b, s->bias, s->c, s->batch, s->cin, s->cout, s->k); break;
        case ST_THIN_WEIGHTS: fl_dense_thin_weights(s->a, s->c, s->cin, s->cout); break;
        case ST_DENSE_THIN: fl_dense_thin_forward(s->a, s->b, s->bias, s->c, s->batch, s->cin, s->cout, s->k); break;
        case ST_TILE_WEIGHTS: fl_conv_fwd_weights(s->tiles, s->a, s->c); break;
        case ST_TILE_FWD: fl_conv_fwd_run(s->tiles, s->a, s->b, s->bias, s->c, s->k); break;
        case ST_TILE_WGRAD: fl_conv_fwd_wgrad(s->tiles, s->a, s->b, s->c, s->c2); break;
        case ST_IMG_WEIGHTS: fl_conv_img_weights(s->img, s->a, s->c); break;
        case ST_IMG_FWD: fl_conv_img_run(s->img, s->in->u8, s->in->f, s->in->scale, s->b, s->bias, s->c, s->k); break;
        case ST_IMG_WGRAD:
            if (fl_conv_img_wgrad(s->img, s->in->u8, s->in->f, s->in->scale, s->b, s->a, s->c, s->c2))
                return fl_err_set(err, FL_NO_MEMORY, "dnnl: out of memory for the first convolution's gradient");
            break;
        case ST_SPARSE_FWD:
            if (sparse_forward(n, s, gen)) {
                FL_TRY(exec_prim(n, s, err));
                pending = 1;
            }
            break;
        case ST_SPARSE_WGRAD:
            if (s->sp->nnz < 0) {
                FL_TRY(exec_prim(n, s, err));
                pending = 1;
            } else {
                fl_dense_sparse_wgrad(s->sp->start, s->sp->col, s->sp->val, s->sp->nnz, s->b, s->c, s->c2, s->batch,
                                      s->cin, s->cout, s->sp->cstart, s->sp->crow, s->sp->cval);
            }
            break;
        case ST_PRIM: break;
        }
    }
    if (pending) dnnl_stream_wait(n->stream);
    return FL_OK;
}

#ifdef _OPENMP
#define SIMD _Pragma("omp simd")
#else
#define SIMD
#endif

static inline void scale_copy(float *restrict dst, const float *restrict src, float scale, dnnl_dim_t n) {
    SIMD
    for (dnnl_dim_t t = 0; t < n; t++) dst[t] = scale * src[t];
}

/* uint8 observations as fl_dtype_to_float converts them (v x 1/255), then the scale: the
 * same two roundings as a conversion first and scale_copy after. */
static inline void scale_copy_u8(float *restrict dst, const unsigned char *restrict src, float scale,
                                 dnnl_dim_t n) {
    SIMD
    for (dnnl_dim_t t = 0; t < n; t++) dst[t] = scale * ((float)src[t] * (1.0f / 255.0f));
}

/* One block of N channels between an observation (obs, or u8 when not NULL) and the edge
 * x, as scale_copy and scale_copy_u8 copy them (out: x back into obs), at a length the
 * compiler sees: block_copy8 (AVX2's blocked layout) and block_copy16 (AVX-512's). */
#define BLOCK_COPY(N)                                                                                        \
    static inline void block_copy##N(float *restrict x, float *restrict obs, const unsigned char *restrict u8, \
                                     float scale, int out) {                                                 \
        if (out)                                                                                             \
            for (int t = 0; t < (N); t++) obs[t] = scale * x[t];                                             \
        else if (u8)                                                                                         \
            for (int t = 0; t < (N); t++) x[t] = scale * ((float)u8[t] * (1.0f / 255.0f));                   \
        else                                                                                                 \
            for (int t = 0; t < (N); t++) x[t] = scale * obs[t];                                             \
    }
BLOCK_COPY(8)
BLOCK_COPY(16)

#define PLANAR_TILE 2048 /* floats */

/* dst[t] = scale * src[t * stride] (uint8 as scale_copy_u8 converts them), and the
 * scatter back: dst[t * stride] = scale * src[t]. */
static inline void scale_gather(float *restrict dst, const float *restrict src, dnnl_dim_t stride, float scale,
                                dnnl_dim_t n) {
    SIMD
    for (dnnl_dim_t t = 0; t < n; t++) dst[t] = scale * src[t * stride];
}

static inline void scale_gather_u8(float *restrict dst, const unsigned char *restrict src, dnnl_dim_t stride,
                                   float scale, dnnl_dim_t n) {
    SIMD
    for (dnnl_dim_t t = 0; t < n; t++) dst[t] = scale * ((float)src[t * stride] * (1.0f / 255.0f));
}

static inline void scale_scatter(float *restrict dst, dnnl_dim_t stride, const float *restrict src, float scale,
                                 dnnl_dim_t n) {
    SIMD
    for (dnnl_dim_t t = 0; t < n; t++) dst[t * stride] = scale * src[t];
}

/* 1 when the input edge holds each image planar, (C, H, W) (a dense first layer), 2 as the
 * observation does, (H, W, C); else 0. */
static int input_whole(const fl_dnnl_net_t *n, const plan_t *p) {
    const int H = n->img_h, W = n->img_w, C = n->img_c;
    const layout_t *L = &p->in;
    const dnnl_dim_t HW = (dnnl_dim_t)H * W;
    if (p->s2d > 1 || L->blk != 1 || p->edge[0]->md.dims[2] != H || p->edge[0]->md.dims[3] != W) return 0;
    if (L->st[1] == 1 && L->st[3] == C && L->st[2] == (dnnl_dim_t)W * C) return 2;
    return L->st[3] == 1 && L->st[2] == W && L->st[1] == HW ? 1 : 0;
}

/* Image observations (B, H, W, C) * scale into the input edge x (layout p->in), or with
 * out set the input edge's gradient back into them (every element written: the rows and
 * columns a space-to-depth convolution does not reach get 0). With f = p->s2d > 1 the
 * edge is (B, C f f, H2, W2) and element (b, (dy f + dx) C + c, Y, X) is the
 * observation's (Y f + dy, X f + dx, c); with f = 1 it is the observations themselves,
 * (B, C, H, W) in whatever order p->in says. */
static void copy_images(const fl_dnnl_net_t *n, const plan_t *p, float *obs, const unsigned char *u8, float *x,
                        float scale, int B, int out) {
    const int H = n->img_h, W = n->img_w, C = n->img_c, f = p->s2d > 1 ? p->s2d : 1;
    const int H2 = (int)p->edge[0]->md.dims[2], W2 = (int)p->edge[0]->md.dims[3], run = f * C;
    const layout_t *L = &p->in;
    /* Two whole-image cases: the edge holds each image as the observation does (H, W, C),
     * one copy; or planar (C, H, W), one strided copy per channel (a dense first layer). */
    const dnnl_dim_t HW = (dnnl_dim_t)H * W;
    const int whole = input_whole(n, p), same = whole == 2, planar = whole == 1;
    PAR_FOR
    for (int b = 0; b < B; b++) {
        const size_t img = (size_t)b * n->obs_dim;
        float *xb = x + b * L->st[0];
        if (same) {
            if (out) scale_copy(obs + img, xb, scale, HW * C);
            else if (u8) scale_copy_u8(xb, u8 + img, scale, HW * C);
            else scale_copy(xb, obs + img, scale, HW * C);
            continue;
        }
        if (planar && u8 && !out && C <= PLANAR_TILE) {
            /* uint8: tiles of pixels converted in one contiguous pass, then spread over
             * the channel planes (a strided byte read per element is 2.7x slower) */
            float tmp[PLANAR_TILE];
            const dnnl_dim_t tile = PLANAR_TILE / C;
            for (dnnl_dim_t p0 = 0; p0 < HW; p0 += tile) {
                const dnnl_dim_t np = HW - p0 < tile ? HW - p0 : tile;
                scale_copy_u8(tmp, u8 + img + p0 * C, scale, np * C);
                for (int c = 0; c < C; c++) scale_gather(xb + c * HW + p0, tmp + c, C, 1.0f, np);
            }
            continue;
        }
        if (planar) {
            for (int c = 0; c < C; c++) {
                if (out) scale_scatter(obs + img + c, C, xb + c * HW, scale, HW);
                else if (u8) scale_gather_u8(xb + c * HW, u8 + img + c, C, scale, HW);
                else scale_gather(xb + c * HW, obs + img + c, C, scale, HW);
            }
            continue;
        }
        if (out && (H2 * f < H || W2 * f < W)) memset(obs + img, 0, (size_t)n->obs_dim * sizeof(float));
        for (int Y = 0; Y < H2; Y++)
            for (int dy = 0; dy < f; dy++) {
                const size_t row = img + (size_t)(Y * f + dy) * W * C;
                const dnnl_dim_t c0 = (dnnl_dim_t)dy * run; /* the edge channel of (dy, dx = 0, c = 0) */
                for (int X = 0; X < W2; X++) {
                    const size_t src = row + (size_t)X * run;
                    dnnl_dim_t o = b * L->st[0] + (c0 / L->blk) * L->st[1] + Y * L->st[2] + X * L->st[3],
                               ci = c0 % L->blk;
                    if ((L->blk == 8 || L->blk == 16) && run % L->blk == 0) {
                        /* whole blocks (ci stays 0) */
                        for (int j = 0; j < run; j += (int)L->blk, o += L->st[1]) {
                            float *ob = obs ? obs + src + j : NULL;
                            const unsigned char *ub = u8 ? u8 + src + j : NULL;
                            if (L->blk == 8) block_copy8(x + o, ob, ub, scale, out);
                            else block_copy16(x + o, ob, ub, scale, out);
                        }
                        continue;
                    }
                    /* in stretches of channels that lie side by side in x */
                    for (int j = 0; j < run;) {
                        dnnl_dim_t len = run - j;
                        if (L->blk > 1 && len > L->blk - ci) len = L->blk - ci;
                        else if (L->blk == 1 && L->st[1] != 1) len = 1;
                        if (out) scale_copy(obs + src + j, x + o + ci, scale, len);
                        else if (u8) scale_copy_u8(x + o + ci, u8 + src + j, scale, len);
                        else scale_copy(x + o + ci, obs + src + j, scale, len);
                        j += (int)len;
                        if (L->blk == 1) {
                            o += len * L->st[1];
                        } else if ((ci += len) == L->blk) {
                            ci = 0;
                            o += L->st[1];
                        }
                    }
                }
            }
    }
}

/* Vector observations: x = scale * obs (or obs = scale * x, out set; u8 instead of obs
 * when not NULL). */
static void copy_vectors(float *obs, const unsigned char *u8, float *x, float scale, size_t total, int out) {
    const long spans = (long)((total + PAR_SPAN - 1) / PAR_SPAN);
    PAR_FOR
    for (long k = 0; k < spans; k++) {
        const size_t i0 = (size_t)k * PAR_SPAN, i1 = total - i0 < PAR_SPAN ? total : i0 + PAR_SPAN;
        if (out) scale_copy(obs + i0, x + i0, scale, (dnnl_dim_t)(i1 - i0));
        else if (u8) scale_copy_u8(x + i0, u8 + i0, scale, (dnnl_dim_t)(i1 - i0));
        else scale_copy(x + i0, obs + i0, scale, (dnnl_dim_t)(i1 - i0));
    }
}

/* obs (floats) or u8 (uint8, x 1/255) */
static fl_status net_forward(fl_dnnl_net_t *n, const float *obs, const unsigned char *u8, float scale, int B, float *q,
                             fl_err_t *err) {
    if (!n || (!obs && !u8) || !q || B < 1 || B > n->max_batch)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dnnl: forward: batch %d (expected 1..%d) and non-NULL buffers",
                          B, n ? n->max_batch : 0);
    plan_t *p = NULL;
    FL_TRY(get_plan(n, B, &p, err));
    /* obs is only read (copy_* write the other side) */
    if (n->img_c) {
        /* A sparse first layer over planar uint8 images lists their set values from the
         * bytes; the float copy is made only when that fails. */
        sparse_in_t *sp = NULL;
        for (int i = 0; i < n->num_layers && !sp; i++)
            if (p->lp[i].sparse) sp = &p->lp[i].sp;
        if (sp) sp->pre = 0;
        if (sp && u8 && input_whole(n, p) == 1) {
            const int nnz = fl_sparse_rows_u8(u8, B, n->img_h * n->img_w, n->img_c, scale, sp->cap, sp->start,
                                              sp->col, sp->val, sp->cstart);
            sp->nnz = nnz;
            sp->pre = nnz >= 0 ? 1 : nnz == -1 ? -1 : 0;
        }
        if (p->img) p->img_in = (img_in_t){.u8 = u8, .f = obs, .scale = scale};
        else if (!sp || sp->pre != 1) copy_images(n, p, (float *)obs, u8, p->edge[0]->val, scale, B, 0);
    } else {
        copy_vectors((float *)obs, u8, p->edge[0]->val, scale, (size_t)B * n->obs_dim, 0);
    }
    p->forwarded = 0;
    FL_TRY(run(n, &p->fwd, err));
    memcpy(q, p->edge[n->num_layers]->val, (size_t)B * n->num_actions * sizeof(float));
    p->forwarded = 1;
    return FL_OK;
}

static fl_status net_backward(fl_dnnl_net_t *n, const float *dq, int B, float *dobs, float scale,
                              fl_err_t *err) {
    if (!n || !dq || B < 1 || B > n->max_batch)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dnnl: backward: batch %d (expected 1..%d) and non-NULL dq", B,
                          n ? n->max_batch : 0);
    plan_t *p = find_plan(n, B);
    if (!p || !p->forwarded || p->used != n->calls)
        return fl_err_set(err, FL_FAILED_PRECONDITION, "dnnl: backward at batch %d: the last forward was not at it", B);
    sync_threads();
    if (!p->bwd_built) FL_TRY(build_bwd(n, p, err));
    if (dobs && !p->ibwd_built) FL_TRY(build_ibwd(n, p, err));
    memcpy(p->edge[n->num_layers]->grad, dq, (size_t)B * n->num_actions * sizeof(float));
    FL_TRY(run(n, &p->bwd, err));
    if (!dobs) return FL_OK;
    FL_TRY(run(n, &p->ibwd, err));
    if (n->img_c) copy_images(n, p, dobs, NULL, p->edge[0]->grad, scale, B, 1);
    else copy_vectors(dobs, NULL, p->edge[0]->grad, scale, (size_t)B * n->obs_dim, 1);
    return FL_OK;
}

fl_status fl_dnnl_net_forward(fl_dnnl_net_t *n, const float *obs, float scale, int B, float *q, fl_err_t *err) {
    sigset_t old;
    hold_signals(&old);
    const fl_status st = net_forward(n, obs, NULL, scale, B, q, err);
    release_signals(&old);
    return st;
}

fl_status fl_dnnl_net_forward_u8(fl_dnnl_net_t *n, const unsigned char *obs, float scale, int B, float *q,
                                 fl_err_t *err) {
    if (!obs) return fl_err_set(err, FL_INVALID_ARGUMENT, "dnnl: forward: NULL observations");
    sigset_t old;
    hold_signals(&old);
    const fl_status st = net_forward(n, NULL, obs, scale, B, q, err);
    release_signals(&old);
    return st;
}

fl_status fl_dnnl_net_backward(fl_dnnl_net_t *n, const float *dq, int B, float *dobs, float scale, fl_err_t *err) {
    sigset_t old;
    hold_signals(&old);
    const fl_status st = net_backward(n, dq, B, dobs, scale, err);
    release_signals(&old);
    return st;
}

size_t fl_dnnl_net_describe(const fl_dnnl_net_t *n, int B, char *out, size_t cap) {
    if (cap) out[0] = '\0';
    const plan_t *p = n ? find_plan(n, B) : NULL;
    if (!p) return 0;
    size_t len = describe_list(&p->fwd, out, cap, 0);
    len = describe_list(&p->bwd, out, cap, len);
    len = describe_list(&p->ibwd, out, cap, len);
    if (cap) out[len < cap ? len : cap - 1] = '\0';
    return len;
}

/* ---- create / destroy -------------------------------------------------------------- */

fl_status fl_dnnl_net_create(const fl_dnnl_net_desc_t *d, fl_dnnl_net_t **out, fl_err_t *err) {
    if (!out) return fl_err_set(err, FL_INVALID_ARGUMENT, "dnnl: out must not be NULL");
    *out = NULL;
    if (!d || !d->layers || d->num_layers < 1 || d->obs_dim < 1 || d->num_actions < 1 || d->max_batch < 1 ||
        !d->params || !d->grads || !d->params_gen)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "dnnl: a network needs layers, obs_dim, num_actions, max_batch >= 1, its parameter and "
                          "gradient buffers and their change counter");
    fl_dnnl_net_t *n = calloc(1, sizeof *n);
    if (!n) return fl_err_set(err, FL_NO_MEMORY, "dnnl: out of memory");
    n->layers = malloc((size_t)d->num_layers * sizeof *n->layers);
    if (!n->layers) {
        free(n);
        return fl_err_set(err, FL_NO_MEMORY, "dnnl: out of memory");
    }
    memcpy(n->layers, d->layers, (size_t)d->num_layers * sizeof *n->layers);
    n->num_layers = d->num_layers;
    n->img_h = d->img_h;
    n->img_w = d->img_w;
    n->img_c = d->img_c;
    n->obs_dim = d->obs_dim;
    n->num_actions = d->num_actions;
    n->max_batch = d->max_batch;
    n->params = d->params;
    n->params_gen = d->params_gen;
    n->inference = d->inference;
    n->prims_only = d->prims_only;
    n->grads = d->grads;
    dnnl_status_t st = dnnl_engine_create(&n->engine, dnnl_cpu, 0);
    if (st == dnnl_success) st = dnnl_stream_create(&n->stream, n->engine, dnnl_stream_default_flags);
    if (st != dnnl_success) {
        fl_dnnl_net_destroy(n);
        return fl_err_set(err, FL_INTERNAL, "dnnl: creating the CPU engine and stream failed (oneDNN status %d)",
                          (int)st);
    }
    *out = n;
    return FL_OK;
}

void fl_dnnl_net_destroy(fl_dnnl_net_t *n) {
    if (!n) return;
    for (int i = 0; i < FL_DNNL_MAX_PLANS; i++) plan_destroy(n->plans[i]);
    free(n->wt);
    if (n->stream) dnnl_stream_destroy(n->stream);
    if (n->engine) dnnl_engine_destroy(n->engine);
    free(n->layers);
    free(n);
}

#else /* built without oneDNN */

int fl_dnnl_available(void) { return 0; }

fl_status fl_dnnl_net_create(const fl_dnnl_net_desc_t *d, fl_dnnl_net_t **out, fl_err_t *err) {
    (void)d;
    if (out) *out = NULL;
    return fl_err_set(err, FL_UNIMPLEMENTED, "dnnl: fleet was built without oneDNN (FLEET_DNNL=OFF or not found)");
}

void fl_dnnl_net_destroy(fl_dnnl_net_t *n) { (void)n; }

fl_status fl_dnnl_net_forward(fl_dnnl_net_t *n, const float *obs, float scale, int B, float *q, fl_err_t *err) {
    return fl_err_set(err, FL_UNIMPLEMENTED, "dnnl: fleet was built without oneDNN");
}

fl_status fl_dnnl_net_forward_u8(fl_dnnl_net_t *n, const unsigned char *obs, float scale, int B, float *q,
                                 fl_err_t *err) {
    return fl_err_set(err, FL_UNIMPLEMENTED, "dnnl: fleet was built without oneDNN");
}

fl_status fl_dnnl_net_backward(fl_dnnl_net_t *n, const float *dq, int B, float *dobs, float scale, fl_err_t *err) {
    return fl_err_set(err, FL_UNIMPLEMENTED, "dnnl: fleet was built without oneDNN");
}

size_t fl_dnnl_net_describe(const fl_dnnl_net_t *n, int B, char *out, size_t cap) {
    if (cap) out[0] = '\0';
    return 0;
}

#endif
