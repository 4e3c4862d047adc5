/* dnnl_internal: what the oneDNN backend's files share (kernels/dnnl.h is the interface):
 * dnnl.c (the network, its plans per batch size, describe), dnnl_prim.c (oneDNN's objects
 * made and registered in a plan: buffers, memory, tensors, steps, primitives, reorders,
 * memory descriptors), dnnl_fwd.c (the forward plan: which kernel, fleet's or oneDNN's,
 * takes each layer), dnnl_bwd.c (the backward plan) and dnnl_run.c (running a plan: its
 * steps, fleet's own ops, the observations' copies in and out, the held signals). The
 * plans are described at the top of dnnl.c. Only in a build with oneDNN (FL_HAVE_DNNL);
 * not for use outside kernels/dnnl*.c. */
#ifndef FL_KERNELS_DNNL_INTERNAL_H
#define FL_KERNELS_DNNL_INTERNAL_H

#include <oneapi/dnnl/dnnl.h>
#include <stddef.h>

#include "common/status.h"
#include "kernels/conv_fwd.h"
#include "kernels/dnnl.h"
#include "kernels/qnet.h"

#define BUF_ALIGN 64

typedef enum {
    ST_PRIM,
    ST_RELU_FWD,
    ST_RELU_BWD,
    ST_COMBINE_FWD,
    ST_COMBINE_BWD,
    ST_S2D_WEIGHTS,  /* the first convolution's weights, rearranged for its space-to-depth input */
    ST_S2D_WGRAD,    /* their gradient, back to the layer's own layout */
    ST_DENSE_SMALL,  /* a dense layer's forward on a small batch (kernels/dense_small.h) */
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
    const float *a, *b;         /* fleet ops: inputs */
    float *c;                   /* fleet ops: output */
    float *c2;                  /* tile weight gradient: the bias's gradient */
    size_t n;                   /* relu: floats */
    int batch, actions;         /* dueling combine */
    int cout, cin, k, f;        /* space-to-depth weights: the layer's shape and stride; dense small:
                                   out, in and relu (k) */
    const float *bias;          /* dense small, tiles */
    const fl_conv_fwd_t *tiles; /* tiles: the forward's set-up */
    fl_conv_img_t *img;         /* image forward and gradient: the set-up (the observations: the plan's img_in) */
    const struct img_in *in;
    sparse_in_t *sp;         /* sparse steps: the layer's lists (in its lplan) */
    int cached;              /* reads the parameters only: skipped while params_gen stays at seen */
    unsigned long long seen; /* params_gen when it last ran */
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
    float *dva; /* dueling: their gradient */
    dnnl_memory_t dva_mem;
    fl_conv_fwd_t *tiles; /* conv: the forward ran on fleet's tiles, set up here */
    int sparse;           /* dense: the forward may take the sparse inputs (sp) */
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
    int input_nhwc;       /* the first convolution reads the observations channels-last, (H, W, C) */
    int s2d;              /* > 1: the first convolution's stride, run on the space-to-depth input */
    layout_t in;          /* the input edge's layout, for the observations' copy in and dobs's out */
    float *s2d_w, *s2d_g; /* space-to-depth: the first convolution's weights and their gradient */
    steplist_t fwd, bwd, ibwd;
    tensor_t **edge; /* num_layers + 1 */
    lplan_t *lp;     /* num_layers */
    plist_t tensors, mems, bufs, pds;
    plist_t tiles;      /* fl_conv_fwd_t */
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
    const int *inference;  /* may be NULL */
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

/* A oneDNN call's failure while building a plan, as an error that names the layer and the
 * call; DN returns it from the caller when call does not succeed. */
fl_status fl__dnnl_fail(bld_t *b, const char *call, dnnl_status_t st);
#define DN(b, call)                                                           \
    do {                                                                      \
        dnnl_status_t dn_st_ = (call);                                        \
        if (dn_st_ != dnnl_success) return fl__dnnl_fail((b), #call, dn_st_); \
    } while (0)

/* The geometry a convolution runs with: the layer's own, or for the first convolution
 * on the space-to-depth input (see the top of dnnl.c) the stride-1 one it becomes:
 * kernel k / f over (C f f, out_h + k / f - 1, out_w + k / f - 1). */
typedef struct cgeom {
    int in_c, in_h, in_w, k, stride, pad;
} cgeom_t;

/* dnnl.c: the calling thread's OpenMP thread count set to OpenBLAS's (returned); the plan
 * at batch B, or NULL; the plan for B at the current thread count, built when missing or
 * stale. */
int fl__dnnl_sync_threads(void);
plan_t *fl__dnnl_find_plan(const fl_dnnl_net_t *n, int B);
fl_status fl__dnnl_get_plan(fl_dnnl_net_t *n, int B, plan_t **out, fl_err_t *err);

/* dnnl_prim.c: each object made is registered in b's plan at once (dnnl_prim.c says what
 * each does). */
int fl__dnnl_plist_reserve(plist_t *l);
fl_status fl__dnnl_nomem(bld_t *b);
fl_status fl__dnnl_new_buf(bld_t *b, size_t bytes, float **out);
fl_status fl__dnnl_new_mem(bld_t *b, const dnnl_memory_desc_t *md, void *ptr, dnnl_memory_t *out);
fl_status fl__dnnl_keep_pd(bld_t *b, dnnl_primitive_desc_t pd);
fl_status fl__dnnl_tensor_alloc(bld_t *b, tensor_t *t);
fl_status fl__dnnl_new_tensor(bld_t *b, const dnnl_memory_desc_t *md, int with_val, tensor_t **out);
fl_status fl__dnnl_ensure_grad(bld_t *b, tensor_t *t);
fl_status fl__dnnl_add_step(bld_t *b, steplist_t *l, const step_t *s);
fl_status fl__dnnl_add_prim(bld_t *b, steplist_t *l, const_dnnl_primitive_desc_t pd, const char *what, int nargs,
                            const dnnl_exec_arg_t *args);
fl_status fl__dnnl_add_reorder(bld_t *b, steplist_t *l, dnnl_memory_t src, dnnl_memory_t dst);
void fl__dnnl_mark_cached(steplist_t *l);
fl_status fl__dnnl_md4(bld_t *b, dnnl_memory_desc_t *md, int n, int c, int h, int w, dnnl_format_tag_t tag);
fl_status fl__dnnl_md2(bld_t *b, dnnl_memory_desc_t *md, int r, int c);
fl_status fl__dnnl_md1(bld_t *b, dnnl_memory_desc_t *md, int n);
fl_status fl__dnnl_plain_md(bld_t *b, const dnnl_memory_desc_t *md, dnnl_memory_desc_t *out);
fl_status fl__dnnl_make_pd(bld_t *b, const void *op_desc, int relu, const_dnnl_primitive_desc_t hint,
                           dnnl_primitive_desc_t *out);
void fl__dnnl_try_pd(bld_t *b, const void *op_desc, int relu, const_dnnl_primitive_desc_t hint,
                     dnnl_primitive_desc_t *out);
fl_status fl__dnnl_tensor_as(bld_t *b, steplist_t *l, tensor_t *t, const dnnl_memory_desc_t *md, tensor_t **out);
fl_status fl__dnnl_grad_as(bld_t *b, steplist_t *l, tensor_t *t, const dnnl_memory_desc_t *md, dnnl_memory_t *out);
fl_status fl__dnnl_grad_out(bld_t *b, tensor_t *t, const dnnl_memory_desc_t *md, dnnl_memory_t *out,
                            dnnl_memory_t *back);
fl_status fl__dnnl_flat_mem(bld_t *b, const dnnl_memory_desc_t *flat, float *base, size_t off,
                            const dnnl_memory_desc_t *want, dnnl_memory_t *out, dnnl_memory_t *flat_out);

/* dnnl_fwd.c: the forward step list of p (plan_create), and what the backward build takes
 * from it (dnnl_fwd.c says what each does). */
fl_status fl__dnnl_build_fwd(fl_dnnl_net_t *n, plan_t *p, fl_err_t *err);
cgeom_t fl__dnnl_conv_geom(const plan_t *p, const fl_qnet_layer_t *l, int i);
fl_status fl__dnnl_add_s2d_step(bld_t *b, steplist_t *list, const fl_qnet_layer_t *l, int grad);
fl_status fl__dnnl_conv_wmem(bld_t *b, int i, int grad, const dnnl_memory_desc_t *want, dnnl_memory_t *out,
                             dnnl_memory_t *flat);
int fl__dnnl_perm_wmd(const dnnl_memory_desc_t *e, int out_n, dnnl_memory_desc_t *out);

/* dnnl_bwd.c: p's backward step lists, `bwd` and (for an input gradient) `ibwd`. */
fl_status fl__dnnl_build_bwd(fl_dnnl_net_t *n, plan_t *p, fl_err_t *err);
fl_status fl__dnnl_build_ibwd(fl_dnnl_net_t *n, plan_t *p, fl_err_t *err);

#endif
