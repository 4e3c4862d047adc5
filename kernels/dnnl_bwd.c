/* dnnl_bwd: the backward part of a plan of the oneDNN backend (see the top of dnnl.c),
 * built at the first backward at a batch size: oneDNN's backward primitives with the
 * forward's as their hint, and fleet's own gradients where the forward ran on fleet's
 * kernels that have them (the tiles' and fl_conv_img's weight gradients, the sparse
 * layer's). */
#include "kernels/dnnl.h"

#ifdef FL_HAVE_DNNL

#include <assert.h>
#include <oneapi/dnnl/dnnl.h>

#include "kernels/conv_fwd.h"
#include "kernels/dnnl_internal.h"

/* ---- backward build ------------------------------------------------------------------
 * Per layer two parts: the parameter gradients (and what they need first: relu's mask of
 * the incoming gradient, the dueling combine's backward) into `bwd`, and the input
 * gradient into `bwd` too, except for the first layer, whose input gradient goes into
 * `ibwd` (only wanted with dobs). */

static fl_status relu_mask(bld_t *b, steplist_t *l, tensor_t *out) {
    const step_t s = {.kind = ST_RELU_BWD,
                      .what = "relu bwd",
                      .a = out->val,
                      .b = out->grad,
                      .c = out->grad,
                      .n = dnnl_memory_desc_get_size(&out->md) / sizeof(float)};
    return fl__dnnl_add_step(b, l, &s);
}

static fl_status bwd_conv_weights(bld_t *b, int i, steplist_t *l) {
    fl_dnnl_net_t *n = b->n;
    const fl_qnet_layer_t *ly = &n->layers[i];
    lplan_t *lp = &b->p->lp[i];
    tensor_t *out = b->p->edge[i + 1];
    const cgeom_t g = fl__dnnl_conv_geom(b->p, ly, i);
    const int s2d = i == 0 && b->p->s2d > 1;
    assert(out->grad); /* the consumer's backward made it */
    if (s2d && b->p->img) {
        /* the forward read the observations as they came: so does the gradient, with no
         * space-to-depth copy of them, and relu's mask of the output gradient applied
         * a chunk at a time as it runs (not written back: an input gradient, fl__dnnl_build_ibwd,
         * masks it first) */
        const step_t t = {.kind = ST_IMG_WGRAD,
                          .what = "bwd weights (images)",
                          .img = b->p->img,
                          .in = &b->p->img_in,
                          .a = lp->fused ? out->val : NULL,
                          .b = out->grad,
                          .c = n->grads + ly->w_off,
                          .c2 = n->grads + ly->b_off};
        b->p->img_masked = lp->fused;
        return fl__dnnl_add_step(b, l, &t);
    }
    if (lp->fused) FL_TRY(relu_mask(b, l, out));
    if (s2d && !b->p->s2d_g)
        FL_TRY(fl__dnnl_new_buf(b, (size_t)ly->cout * g.in_c * g.k * g.k * sizeof(float), &b->p->s2d_g));
    if (lp->tiles && fl_conv_fwd_has_wgrad(lp->tiles)) {
        /* the forward ran on the AVX2 tiles, or on AVX-512 ones over many input channels
         * (for the first convolution, fl_conv_img, they were made for this): so do the
         * parameter gradients, on its inputs as it read them */
        const step_t t = {.kind = ST_TILE_WGRAD,
                          .what = s2d ? "bwd weights (space-to-depth, tiles)" : "bwd weights (tiles)",
                          .tiles = lp->tiles,
                          .a = lp->src->val,
                          .b = out->grad,
                          .c = s2d ? b->p->s2d_g : n->grads + ly->w_off,
                          .c2 = n->grads + ly->b_off};
        FL_TRY(fl__dnnl_add_step(b, l, &t));
        return s2d ? fl__dnnl_add_s2d_step(b, l, ly, 1) : FL_OK;
    }
    const dnnl_dims_t strides = {g.stride, g.stride}, pad = {g.pad, g.pad};
    dnnl_memory_desc_t wany, bia, sany, dany;
    FL_TRY(fl__dnnl_md4(b, &wany, ly->cout, g.in_c, g.k, g.k, dnnl_format_tag_any));
    FL_TRY(fl__dnnl_md1(b, &bia, ly->cout));
    FL_TRY(fl__dnnl_md4(b, &sany, b->p->batch, g.in_c, g.in_h, g.in_w, dnnl_format_tag_any));
    FL_TRY(fl__dnnl_md4(b, &dany, b->p->batch, ly->out_c, ly->out_h, ly->out_w, dnnl_format_tag_any));
    dnnl_primitive_desc_t pd = NULL;
    /* First the forward's layouts (no reorders); where oneDNN has only its reference
     * implementation for them, its own choice. */
    for (int attempt = 0; attempt < 2 && !pd; attempt++) {
        dnnl_convolution_desc_t cd;
        DN(b, dnnl_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, attempt ? &sany : &lp->src->md,
                                                          &wany, &bia, attempt ? &dany : &out->md, strides, pad, pad));
        if (attempt == 0)
            fl__dnnl_try_pd(b, &cd, 0, lp->fwd_pd, &pd);
        else
            FL_TRY(fl__dnnl_make_pd(b, &cd, 0, lp->fwd_pd, &pd));
    }
    const dnnl_memory_desc_t *S = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0),
                             *W = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0),
                             *D = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0);
    fl_status st;
    tensor_t *src;
    dnnl_memory_t dd, wm, wflat_m, bm;
    if ((st = fl__dnnl_tensor_as(b, l, lp->src, S, &src)) != FL_OK ||
        (st = fl__dnnl_grad_as(b, l, out, D, &dd)) != FL_OK ||
        (st = fl__dnnl_conv_wmem(b, i, 1, W, &wm, &wflat_m)) != FL_OK ||
        (st = fl__dnnl_new_mem(b, &bia, n->grads + ly->b_off, &bm)) != FL_OK)
        goto done;
    const dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, src->vmem}, {DNNL_ARG_DIFF_DST, dd}, {DNNL_ARG_DIFF_WEIGHTS, wm}, {DNNL_ARG_DIFF_BIAS, bm}};
    if ((st = fl__dnnl_add_prim(b, l, pd, "bwd weights", 4, args)) != FL_OK) goto done;
    if (wflat_m && (st = fl__dnnl_add_reorder(b, l, wm, wflat_m)) != FL_OK) goto done;
    if (s2d) st = fl__dnnl_add_s2d_step(b, l, ly, 1);
done:
    dnnl_primitive_desc_destroy(pd);
    return st;
}

static fl_status bwd_conv_data(bld_t *b, int i, steplist_t *l) {
    fl_dnnl_net_t *n = b->n;
    const fl_qnet_layer_t *ly = &n->layers[i];
    lplan_t *lp = &b->p->lp[i];
    tensor_t *out = b->p->edge[i + 1], *in = b->p->edge[i];
    const cgeom_t g = fl__dnnl_conv_geom(b->p, ly, i);
    const dnnl_dims_t strides = {g.stride, g.stride}, pad = {g.pad, g.pad};
    dnnl_memory_desc_t wany, sany, dany;
    FL_TRY(fl__dnnl_md4(b, &wany, ly->cout, g.in_c, g.k, g.k, dnnl_format_tag_any));
    FL_TRY(fl__dnnl_md4(b, &sany, b->p->batch, g.in_c, g.in_h, g.in_w, dnnl_format_tag_any));
    FL_TRY(fl__dnnl_md4(b, &dany, b->p->batch, ly->out_c, ly->out_h, ly->out_w, dnnl_format_tag_any));
    /* the weights as they are now (the parameters may have changed since the forward) */
    if (i == 0 && b->p->s2d > 1) FL_TRY(fl__dnnl_add_s2d_step(b, l, ly, 0));
    dnnl_primitive_desc_t pd = NULL;
    for (int attempt = 0; attempt < 2 && !pd; attempt++) {
        dnnl_convolution_desc_t cd;
        DN(b, dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, attempt ? &sany : &lp->src->md,
                                                       &wany, attempt ? &dany : &out->md, strides, pad, pad));
        if (attempt == 0)
            fl__dnnl_try_pd(b, &cd, 0, lp->fwd_pd, &pd);
        else
            FL_TRY(fl__dnnl_make_pd(b, &cd, 0, lp->fwd_pd, &pd));
    }
    const dnnl_memory_desc_t *S = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_src_md, 0),
                             *W = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0),
                             *D = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0);
    fl_status st;
    dnnl_memory_t wm, wflat_m, dd, ds, back;
    if ((st = fl__dnnl_conv_wmem(b, i, 0, W, &wm, &wflat_m)) != FL_OK ||
        (wflat_m && (st = fl__dnnl_add_reorder(b, l, wflat_m, wm)) != FL_OK) ||
        (st = fl__dnnl_grad_as(b, l, out, D, &dd)) != FL_OK ||
        (st = fl__dnnl_grad_out(b, lp->src, S, &ds, &back)) != FL_OK)
        goto done;
    const dnnl_exec_arg_t args[3] = {{DNNL_ARG_DIFF_DST, dd}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, ds}};
    if ((st = fl__dnnl_add_prim(b, l, pd, "bwd data", 3, args)) != FL_OK) goto done;
    if (back && (st = fl__dnnl_add_reorder(b, l, back, lp->src->gmem)) != FL_OK) goto done;
    if (lp->src != in) {
        if ((st = fl__dnnl_ensure_grad(b, in)) != FL_OK) goto done;
        st = fl__dnnl_add_reorder(b, l, lp->src->gmem, in->gmem);
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
            FL_TRY(fl__dnnl_new_buf(b, dnnl_memory_desc_get_size(vmd), &lp->dva));
            FL_TRY(fl__dnnl_new_mem(b, vmd, lp->dva, &lp->dva_mem));
            const step_t s = {.kind = ST_COMBINE_BWD,
                              .what = "combine bwd",
                              .a = out->grad,
                              .c = lp->dva,
                              .batch = B,
                              .actions = ly->units};
            FL_TRY(fl__dnnl_add_step(b, l, &s));
        }
        *out_mem = lp->dva_mem;
        return FL_OK;
    }
    dnnl_memory_desc_t md;
    FL_TRY(fl__dnnl_md2(b, &md, B, ly->units));
    return fl__dnnl_new_mem(b, &md, out->grad, out_mem);
}

/* A perm layer's weight gradient, in dwperm in the edge's order, reordered into dw in the
 * plain order (out_n, C, H, W). */
static fl_status perm_back(bld_t *b, steplist_t *l, const lplan_t *lp, int out_n, float *dw) {
    const dnnl_memory_desc_t *e = &lp->src->md;
    dnnl_memory_desc_t wp, w4;
    dnnl_memory_t from, to;
    if (!fl__dnnl_perm_wmd(e, out_n, &wp))
        return fl_err_set(b->err, FL_INTERNAL, "dnnl: %s: no permuted layout", b->layer);
    FL_TRY(fl__dnnl_md4(b, &w4, out_n, (int)e->dims[1], (int)e->dims[2], (int)e->dims[3], dnnl_nchw));
    FL_TRY(fl__dnnl_new_mem(b, &wp, lp->dwperm, &from));
    FL_TRY(fl__dnnl_new_mem(b, &w4, dw, &to));
    FL_TRY(fl__dnnl_add_reorder(b, l, from, to));
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
    FL_TRY(fl__dnnl_md2(b, &src, B, in));
    FL_TRY(fl__dnnl_md2(b, &wei, out_n, in));
    FL_TRY(fl__dnnl_md1(b, &bia, out_n));
    FL_TRY(fl__dnnl_md2(b, &dst, B, out_n));
    dnnl_inner_product_desc_t ipd;
    DN(b, dnnl_inner_product_backward_weights_desc_init(&ipd, &src, &wei, &bia, &dst));
    dnnl_primitive_desc_t pd;
    FL_TRY(fl__dnnl_make_pd(b, &ipd, 0, lp->fwd_pd, &pd));
    fl_status st = FL_OK;
    if (lp->perm) st = fl__dnnl_new_buf(b, (size_t)out_n * in * sizeof(float), &lp->dwperm);
    if (st == FL_OK && (st = fl__dnnl_new_mem(b, &wei, lp->perm ? lp->dwperm : n->grads + ly->w_off, &wm)) == FL_OK &&
        (st = fl__dnnl_new_mem(b, &bia, n->grads + ly->b_off, &bm)) == FL_OK) {
        const dnnl_exec_arg_t args[4] = {
            {DNNL_ARG_SRC, lp->src2d}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, wm}, {DNNL_ARG_DIFF_BIAS, bm}};
        st = fl__dnnl_add_prim(b, l, pd, lp->sparse ? "bwd weights (sparse inputs)" : "bwd weights", 4, args);
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
    FL_TRY(fl__dnnl_ensure_grad(b, lp->src));
    dnnl_memory_desc_t src, wei, dst;
    FL_TRY(fl__dnnl_md2(b, &src, B, inn));
    FL_TRY(fl__dnnl_md2(b, &wei, out_n, inn));
    FL_TRY(fl__dnnl_md2(b, &dst, B, out_n));
    FL_TRY(fl__dnnl_new_mem(b, &wei, lp->perm ? lp->wperm : n->params + ly->w_off, &wm));
    FL_TRY(fl__dnnl_new_mem(b, &src, lp->src->grad, &dx));
    dnnl_inner_product_desc_t ipd;
    DN(b, dnnl_inner_product_backward_data_desc_init(&ipd, &src, &wei, &dst));
    dnnl_primitive_desc_t pd;
    FL_TRY(fl__dnnl_make_pd(b, &ipd, 0, lp->fwd_pd, &pd));
    const dnnl_exec_arg_t args[3] = {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, dx}};
    fl_status st = fl__dnnl_add_prim(b, l, pd, "bwd data", 3, args);
    dnnl_primitive_desc_destroy(pd);
    FL_TRY(st);
    if (lp->src != in) {
        FL_TRY(fl__dnnl_ensure_grad(b, in));
        FL_TRY(fl__dnnl_add_reorder(b, l, lp->src->gmem, in->gmem));
    }
    return FL_OK;
}

static fl_status bwd_relu_data(bld_t *b, int i, steplist_t *l) {
    tensor_t *in = b->p->edge[i], *out = b->p->edge[i + 1];
    FL_TRY(fl__dnnl_ensure_grad(b, in));
    const step_t s = {.kind = ST_RELU_BWD,
                      .what = "relu bwd",
                      .a = out->val,
                      .b = out->grad,
                      .c = in->grad,
                      .n = dnnl_memory_desc_get_size(&out->md) / sizeof(float)};
    return fl__dnnl_add_step(b, l, &s);
}

/* flatten: a plain input's gradient is the output's (the same buffer); an input that
 * passed through is the output, gradient and all. */
static fl_status bwd_flatten_data(bld_t *b, int i) {
    lplan_t *lp = &b->p->lp[i];
    tensor_t *out = b->p->edge[i + 1];
    if (out == lp->src || lp->src->grad) return FL_OK;
    lp->src->grad = out->grad;
    return fl__dnnl_new_mem(b, &lp->src->md, lp->src->grad, &lp->src->gmem);
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

fl_status fl__dnnl_build_bwd(fl_dnnl_net_t *n, plan_t *p, fl_err_t *err) {
    bld_t b = {.n = n, .p = p, .layer = "output", .err = err};
    FL_TRY(fl__dnnl_ensure_grad(&b, p->edge[n->num_layers]));
    for (int i = n->num_layers - 1; i >= 0; i--) FL_TRY(bwd_layer(&b, i, &p->bwd, 1, i > 0));
    p->bwd_built = 1;
    return FL_OK;
}

fl_status fl__dnnl_build_ibwd(fl_dnnl_net_t *n, plan_t *p, fl_err_t *err) {
    bld_t b = {.n = n, .p = p, .layer = "input", .err = err};
    if (p->img_masked) FL_TRY(relu_mask(&b, &p->ibwd, p->edge[1])); /* the weight gradient did not write it */
    FL_TRY(bwd_layer(&b, 0, &p->ibwd, 0, 1));
    b.layer = "input";
    FL_TRY(fl__dnnl_ensure_grad(&b, p->edge[0]));
    p->ibwd_built = 1;
    return FL_OK;
}

#endif
