/* dnnl_fwd: the forward part of a plan of the oneDNN backend (see the top of dnnl.c):
 * layer by layer, the kernel that takes it, fleet's own where it was measured to win
 * (kernels/conv_fwd.h's tiles and first convolution over images, kernels/dense_small.h,
 * kernels/dense_sparse.h; docs/cpu-kernels.md, "Which kernel takes which layer") and
 * oneDNN's primitives otherwise (all of them with FL_QNET_BACKEND_ONEDNN), space-to-depth
 * for the first convolution, and the layouts of the edges between them. The thresholds
 * are the #defines beside fwd_dense. */
#include "kernels/dnnl.h"

#ifdef FL_HAVE_DNNL

#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_fwd.h"
#include "kernels/dense_small.h"
#include "kernels/dnnl_internal.h"

/* ---- forward build ----------------------------------------------------------------- */

/* The geometry a convolution runs with (cgeom_t, dnnl_internal.h). */
cgeom_t fl__dnnl_conv_geom(const plan_t *p, const fl_qnet_layer_t *l, int i) {
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
static int prims_only(const fl_dnnl_net_t *n) {
    return n->prims_only && *n->prims_only;
}

/* Fleet's tiles (kernels/conv_fwd.h) set up for g, registered in the plan: NULL in *out
 * where they do not run it (the caller takes oneDNN). */
static fl_status new_tiles(bld_t *b, const fl_conv_fwd_geom_t *g, fl_conv_fwd_t **out) {
    *out = NULL;
    if (prims_only(b->n)) return FL_OK;
    if (fl__dnnl_plist_reserve(&b->p->tiles)) return fl__dnnl_nomem(b);
    if ((*out = fl_conv_fwd_create(g))) b->p->tiles.v[b->p->tiles.n++] = *out;
    return FL_OK;
}

/* A forward on tiles c: the cached step that packs the weights w (cout, cin, k, k) when
 * the parameters change, and the forward from x to y. */
static fl_status add_tile_steps(bld_t *b, const fl_conv_fwd_t *c, const char *what, const float *w, const float *x,
                                const float *bias, float *y, int relu) {
    float *wt;
    FL_TRY(fl__dnnl_new_buf(b, fl_conv_fwd_weights_size(c) * sizeof(float), &wt));
    const step_t t = {.kind = ST_TILE_WEIGHTS, .what = "weights (tiles)", .tiles = c, .a = w, .c = wt};
    FL_TRY(fl__dnnl_add_step(b, &b->p->fwd, &t));
    fl__dnnl_mark_cached(&b->p->fwd);
    const step_t s = {.kind = ST_TILE_FWD, .what = what, .tiles = c, .a = x, .b = wt, .bias = bias, .c = y, .k = relu};
    return fl__dnnl_add_step(b, &b->p->fwd, &s);
}

/* The space-to-depth weights step (fwd) or gradient step (bwd) of layer l into list. */
fl_status fl__dnnl_add_s2d_step(bld_t *b, steplist_t *list, const fl_qnet_layer_t *l, int grad) {
    fl_dnnl_net_t *n = b->n;
    const step_t s = {.kind = grad ? ST_S2D_WGRAD : ST_S2D_WEIGHTS,
                      .what = grad ? "space-to-depth weights bwd" : "space-to-depth weights",
                      .a = grad ? b->p->s2d_g : n->params + l->w_off,
                      .c = grad ? n->grads + l->w_off : b->p->s2d_w,
                      .cout = l->cout,
                      .cin = l->in_c,
                      .k = l->k,
                      .f = b->p->s2d};
    return fl__dnnl_add_step(b, list, &s);
}

/* The memory a convolution primitive takes for its weights (or their gradient, grad) in
 * layout want, with *flat the flat buffer's memory when a reorder must convert (else
 * NULL): the layer's slice of the parameters (gradients), or the plan's space-to-depth
 * copy of it. */
fl_status fl__dnnl_conv_wmem(bld_t *b, int i, int grad, const dnnl_memory_desc_t *want, dnnl_memory_t *out,
                             dnnl_memory_t *flat) {
    const fl_qnet_layer_t *l = &b->n->layers[i];
    const cgeom_t g = fl__dnnl_conv_geom(b->p, l, i);
    dnnl_memory_desc_t wflat;
    FL_TRY(fl__dnnl_md4(b, &wflat, l->cout, g.in_c, g.k, g.k, dnnl_oihw));
    float *base = grad ? b->n->grads : b->n->params;
    size_t off = l->w_off;
    if (i == 0 && b->p->s2d > 1) {
        base = grad ? b->p->s2d_g : b->p->s2d_w;
        off = 0;
    }
    return fl__dnnl_flat_mem(b, &wflat, base, off, want, out, flat);
}

static fl_status fwd_conv(bld_t *b, int i) {
    fl_dnnl_net_t *n = b->n;
    plan_t *p = b->p;
    const fl_qnet_layer_t *l = &n->layers[i];
    lplan_t *lp = &p->lp[i];
    const int B = p->batch, s2d = i == 0 && p->s2d > 1;
    const cgeom_t g = fl__dnnl_conv_geom(p, l, i);
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
        FL_TRY(fl__dnnl_md4(b, &src, B, g.in_c, g.in_h, g.in_w, act));
        FL_TRY(fl__dnnl_md4(b, &wei, l->cout, g.in_c, g.k, g.k, dnnl_format_tag_any));
        FL_TRY(fl__dnnl_md1(b, &bia, l->cout));
        FL_TRY(fl__dnnl_md4(b, &dst, B, l->out_c, l->out_h, l->out_w, act));
        dnnl_convolution_desc_t cd;
        DN(b, dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, &src, &wei, &bia,
                                                 &dst, strides, pad, pad));
        if (attempt == 0)
            fl__dnnl_try_pd(b, &cd, lp->fused, NULL, &pd);
        else
            FL_TRY(fl__dnnl_make_pd(b, &cd, lp->fused, NULL, &pd));
    }
    FL_TRY(fl__dnnl_keep_pd(b, pd));
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
        FL_TRY(fl__dnnl_md4(b, &nhwc_md, B, g.in_c, g.in_h, g.in_w, dnnl_nhwc));
        const int lay_ok = layout_of(S, &lay);
        FL_TRY(fl__dnnl_new_tensor(b, lay_ok ? S : &nhwc_md, !lay_ok, &p->edge[0]));
        FL_TRY(fl__dnnl_new_buf(b, (size_t)l->cout * g.in_c * g.k * g.k * sizeof(float), &p->s2d_w));
    }
    FL_TRY(fl__dnnl_tensor_as(b, &p->fwd, p->edge[i], S, &lp->src));
    tensor_t *out;
    FL_TRY(fl__dnnl_new_tensor(b, D, 1, &out));
    p->edge[i + 1] = out;
    layout_t in_lay, out_lay;
    if (s2d && lp->src == p->edge[0] && layout_of(D, &out_lay)) {
        /* On AVX-512 the first convolution reads the observations as they came, and so
         * does its weight gradient (fl_conv_img_wgrad, from the last forward's
         * observations): no space-to-depth copy is made, and the input edge has no
         * buffer. */
        const fl_conv_fwd_geom_t ig = {B,        l->in_c, l->in_h,   l->in_w,  l->cout, l->out_h,
                                       l->out_w, l->k,    l->stride, {{0}, 0}, out_lay};
        if (!prims_only(n) && (p->img = fl_conv_img_create(&ig))) {
            float *wt;
            FL_TRY(fl__dnnl_new_buf(b, fl_conv_img_weights_size(p->img) * sizeof(float), &wt));
            const step_t t = {
                .kind = ST_IMG_WEIGHTS, .what = "weights (images)", .img = p->img, .a = n->params + l->w_off, .c = wt};
            FL_TRY(fl__dnnl_add_step(b, &p->fwd, &t));
            fl__dnnl_mark_cached(&p->fwd);
            const step_t st = {.kind = ST_IMG_FWD,
                               .what = "fwd (images)",
                               .img = p->img,
                               .in = &p->img_in,
                               .b = wt,
                               .bias = n->params + l->b_off,
                               .c = out->val,
                               .k = lp->fused};
            return fl__dnnl_add_step(b, &p->fwd, &st);
        }
    }
    if (s2d) { /* the copy's buffer, and the weights in its layout (an input gradient makes its own) */
        if (!p->edge[0]->val) FL_TRY(fl__dnnl_tensor_alloc(b, p->edge[0]));
        FL_TRY(fl__dnnl_add_s2d_step(b, &p->fwd, l, 0));
        fl__dnnl_mark_cached(&p->fwd);
    }
    /* Fleet's tiles where they run this convolution (on AVX2 CPUs without AVX-512; with
     * AVX-512, few input channels), in the layouts oneDNN chose (the backward stays
     * oneDNN's, with pd as its hint). */
    if (l->pad == 0 && layout_of(S, &in_lay) && layout_of(D, &out_lay)) {
        const fl_conv_fwd_geom_t tg = {B,        g.in_c, g.in_h,   g.in_w, l->cout, l->out_h,
                                       l->out_w, g.k,    g.stride, in_lay, out_lay};
        fl_conv_fwd_t *c;
        FL_TRY(new_tiles(b, &tg, &c));
        lp->tiles = c;
        if (c)
            return add_tile_steps(b, c, s2d ? "fwd (space-to-depth, tiles)" : "fwd (tiles)",
                                  s2d ? p->s2d_w : n->params + l->w_off, lp->src->val, n->params + l->b_off, out->val,
                                  lp->fused);
    }
    dnnl_memory_t wm, wfrom, bm;
    FL_TRY(fl__dnnl_conv_wmem(b, i, 0, W, &wm, &wfrom));
    if (wfrom) {
        FL_TRY(fl__dnnl_add_reorder(b, &p->fwd, wfrom, wm));
        fl__dnnl_mark_cached(&p->fwd);
    }
    FL_TRY(fl__dnnl_new_mem(b, &bia, n->params + l->b_off, &bm));
    const dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, lp->src->vmem}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, out->vmem}};
    return fl__dnnl_add_prim(b, &p->fwd, pd, s2d ? "fwd (space-to-depth)" : "fwd", 4, args);
}

/* The plain (NCHW) version of edge t: t itself or a reorder of it. */
static fl_status plain_of(bld_t *b, tensor_t *t, tensor_t **out) {
    dnnl_memory_desc_t pm;
    FL_TRY(fl__dnnl_plain_md(b, &t->md, &pm));
    return fl__dnnl_tensor_as(b, &b->p->fwd, t, &pm, out);
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
    FL_TRY(fl__dnnl_new_buf(b, ((size_t)B + 1) * sizeof(int), &start));
    FL_TRY(fl__dnnl_new_buf(b, cap * sizeof(int), &col));
    FL_TRY(fl__dnnl_new_buf(b, cap * sizeof(float), &sp->val));
    FL_TRY(fl__dnnl_new_buf(b, ((size_t)in + 1) * sizeof(int), &cstart));
    FL_TRY(fl__dnnl_new_buf(b, cap * sizeof(int), &crow));
    FL_TRY(fl__dnnl_new_buf(b, cap * sizeof(float), &sp->cval));
    if (!b->n->wt && !(b->n->wt = aligned_alloc(
                           BUF_ALIGN, ((size_t)in * out * sizeof(float) + BUF_ALIGN - 1) / BUF_ALIGN * BUF_ALIGN)))
        return fl__dnnl_nomem(b);
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
int fl__dnnl_perm_wmd(const dnnl_memory_desc_t *e, int out_n, dnnl_memory_desc_t *out) {
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
    FL_TRY(fl__dnnl_plain_md(b, &e->md, &e_plain));
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
    lp->perm = prim && !plain && (inference || B >= out_n) && fl__dnnl_perm_wmd(&e->md, out_n, &wp);
    if (lp->perm)
        lp->src = e;
    else
        FL_TRY(plain_of(b, e, &lp->src));
    dnnl_memory_desc_t src, wei, bia, dst;
    FL_TRY(fl__dnnl_md2(b, &src, B, in));
    /* A large layer takes its weights in the layout oneDNN picks (converted only when
     * the parameters changed): the plain one makes its GEMM pack them at every call. */
    dnnl_memory_desc_t wany;
    FL_TRY(fl__dnnl_md2(b, &wei, out_n, in));
    const dnnl_dims_t wd = {out_n, in};
    DN(b, dnnl_memory_desc_init_by_tag(&wany, 2, wd, dnnl_f32,
                                       (long)in * out_n >= DENSE_ANY_WEIGHTS ? dnnl_format_tag_any : dnnl_ab));
    FL_TRY(fl__dnnl_md1(b, &bia, out_n));
    FL_TRY(fl__dnnl_md2(b, &dst, B, out_n));
    dnnl_inner_product_desc_t ipd;
    DN(b, dnnl_inner_product_forward_desc_init(&ipd, dnnl_forward_training, &src, &wany, &bia, &dst));
    dnnl_primitive_desc_t pd;
    FL_TRY(fl__dnnl_make_pd(b, &ipd, lp->fused, NULL, &pd));
    FL_TRY(fl__dnnl_keep_pd(b, pd));
    lp->fwd_pd = pd;
    dnnl_memory_t wm = NULL, bm, dm, wfrom = NULL;
    FL_TRY(fl__dnnl_new_mem(b, &src, lp->src->val, &lp->src2d));
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
            FL_TRY(fl__dnnl_md4(b, &w4, out_n, (int)e->md.dims[1], (int)e->md.dims[2], (int)e->md.dims[3], dnnl_nchw));
            FL_TRY(fl__dnnl_new_buf(b, (size_t)out_n * in * sizeof(float), &lp->wperm));
            FL_TRY(fl__dnnl_new_mem(b, &w4, w, &from));
            FL_TRY(fl__dnnl_new_mem(b, &wp, lp->wperm, &to));
            FL_TRY(fl__dnnl_add_reorder(b, &p->fwd, from, to));
            fl__dnnl_mark_cached(&p->fwd);
            p->fwd.v[p->fwd.n - 1].what = "weights (edge order)";
            w = lp->wperm;
        }
        FL_TRY(
            fl__dnnl_flat_mem(b, &wei, w, 0, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), &wm, &wfrom));
    }
    if (wfrom) {
        FL_TRY(fl__dnnl_add_reorder(b, &p->fwd, wfrom, wm));
        fl__dnnl_mark_cached(&p->fwd);
    }
    FL_TRY(fl__dnnl_new_mem(b, &bia, n->params + l->b_off, &bm));
    dnnl_memory_desc_t omd;
    FL_TRY(fl__dnnl_md4(b, &omd, B, l->out_c, 1, 1, dnnl_nchw));
    tensor_t *out;
    FL_TRY(fl__dnnl_new_tensor(b, &omd, 1, &out));
    if (dueling) {
        FL_TRY(fl__dnnl_new_buf(b, (size_t)B * out_n * sizeof(float), &lp->va));
        FL_TRY(fl__dnnl_new_mem(b, &dst, lp->va, &dm));
        lp->va_mem = dm;
    } else {
        FL_TRY(fl__dnnl_new_mem(b, &dst, out->val, &dm));
    }
    if (tiles) {
        FL_TRY(add_tile_steps(b, tiles, "fwd (tiles)", n->params + l->w_off, lp->src->val, n->params + l->b_off,
                              dueling ? lp->va : out->val, lp->fused));
    } else if (thin) {
        float *wt;
        FL_TRY(fl__dnnl_new_buf(b, fl_dense_thin_weights_size(in, out_n) * sizeof(float), &wt));
        const step_t t = {.kind = ST_THIN_WEIGHTS,
                          .what = "weights (short rows)",
                          .a = n->params + l->w_off,
                          .c = wt,
                          .cin = in,
                          .cout = out_n};
        FL_TRY(fl__dnnl_add_step(b, &p->fwd, &t));
        fl__dnnl_mark_cached(&p->fwd);
        const step_t s = {.kind = ST_DENSE_THIN,
                          .what = "fwd (short rows)",
                          .a = lp->src->val,
                          .b = wt,
                          .bias = n->params + l->b_off,
                          .c = dueling ? lp->va : out->val,
                          .batch = B,
                          .cin = in,
                          .cout = out_n,
                          .k = lp->fused};
        FL_TRY(fl__dnnl_add_step(b, &p->fwd, &s));
    } else if (small || head) {
        const step_t s = {.kind = ST_DENSE_SMALL,
                          .what = "fwd (small batch)",
                          .a = lp->src->val,
                          .b = n->params + l->w_off,
                          .bias = n->params + l->b_off,
                          .c = dueling ? lp->va : out->val,
                          .batch = B,
                          .cin = in,
                          .cout = out_n,
                          .k = lp->fused};
        FL_TRY(fl__dnnl_add_step(b, &p->fwd, &s));
    } else {
        const dnnl_exec_arg_t args[4] = {
            {DNNL_ARG_SRC, lp->src2d}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dm}};
        FL_TRY(fl__dnnl_add_prim(b, &p->fwd, pd, lp->sparse ? "fwd (sparse inputs)" : "fwd", 4, args));
        if (lp->sparse) { /* the same step, the primitive its dense case */
            step_t *s = &p->fwd.v[p->fwd.n - 1];
            s->kind = ST_SPARSE_FWD;
            s->sp = &lp->sp;
            s->a = lp->src->val, s->b = n->params + l->w_off, s->bias = n->params + l->b_off, s->c = out->val;
            s->batch = B, s->cin = in, s->cout = out_n, s->k = lp->fused;
        }
    }
    if (dueling) {
        const step_t s = {
            .kind = ST_COMBINE_FWD, .what = "combine", .a = lp->va, .c = out->val, .batch = B, .actions = l->units};
        FL_TRY(fl__dnnl_add_step(b, &p->fwd, &s));
    }
    p->edge[i + 1] = out;
    return FL_OK;
}

static fl_status fwd_relu(bld_t *b, int i) {
    plan_t *p = b->p;
    tensor_t *in = p->edge[i], *out;
    FL_TRY(fl__dnnl_new_tensor(b, &in->md, 1, &out));
    const step_t s = {.kind = ST_RELU_FWD,
                      .what = "relu",
                      .a = in->val,
                      .c = out->val,
                      .n = dnnl_memory_desc_get_size(&in->md) / sizeof(float)};
    FL_TRY(fl__dnnl_add_step(b, &p->fwd, &s));
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
    FL_TRY(fl__dnnl_plain_md(b, &p->edge[i]->md, &pm));
    lp->src = p->edge[i];
    if (!dnnl_memory_desc_equal(&p->edge[i]->md, &pm)) {
        p->edge[i + 1] = p->edge[i];
        return FL_OK;
    }
    dnnl_memory_desc_t md;
    FL_TRY(fl__dnnl_md4(b, &md, p->batch, l->out_c, 1, 1, dnnl_nchw));
    tensor_t *out;
    FL_TRY(fl__dnnl_new_tensor(b, &md, 0, &out));
    out->val = lp->src->val;
    FL_TRY(fl__dnnl_new_mem(b, &md, out->val, &out->vmem));
    p->edge[i + 1] = out;
    return FL_OK;
}

fl_status fl__dnnl_build_fwd(fl_dnnl_net_t *n, plan_t *p, fl_err_t *err) {
    bld_t b = {.n = n, .p = p, .layer = "input", .err = err};
    const int B = p->batch;
    p->input_nhwc = n->img_c && n->layers[0].kind == FL_QNET_CONV;
    p->s2d = prims_only(n) ? 1 : s2d_factor(n);
    if (p->s2d <= 1) { /* else the first convolution makes the input edge */
        dnnl_memory_desc_t imd;
        const fl_qnet_layer_t *l0 = &n->layers[0];
        FL_TRY(fl__dnnl_md4(&b, &imd, B, l0->in_c, l0->in_h, l0->in_w, p->input_nhwc ? dnnl_nhwc : dnnl_nchw));
        FL_TRY(fl__dnnl_new_tensor(&b, &imd, 1, &p->edge[0]));
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

#endif
