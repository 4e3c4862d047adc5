/* dnnl_prim: oneDNN's objects for the plans of the oneDNN backend (see the top of dnnl.c
 * and dnnl_internal.h): plan buffers, memory objects, tensors, steps, primitives with the
 * plan's scratchpad, reorders, memory and primitive descriptors. Each is registered in the
 * plan being built as it is made, so that destroying the plan frees it whatever failed
 * after. */
#include "kernels/dnnl.h"

#ifdef FL_HAVE_DNNL

#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dnnl_internal.h"

fl_status fl__dnnl_fail(bld_t *b, const char *call, dnnl_status_t st) {
    return fl_err_set(b->err, st == dnnl_out_of_memory ? FL_NO_MEMORY : FL_INTERNAL,
                      "dnnl: layer %s: %s failed (oneDNN status %d); expected oneDNN to take this layer", b->layer,
                      call, (int)st);
}

/* ---- registration ------------------------------------------------------------------ */

int fl__dnnl_plist_reserve(plist_t *l) {
    if (l->n < l->cap) return 0;
    int cap = l->cap ? 2 * l->cap : 16;
    void **v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    l->v = v;
    l->cap = cap;
    return 0;
}

fl_status fl__dnnl_nomem(bld_t *b) {
    return fl_err_set(b->err, FL_NO_MEMORY, "dnnl: layer %s: out of memory building the plan for batch %d", b->layer,
                      b->p->batch);
}

fl_status fl__dnnl_new_buf(bld_t *b, size_t bytes, float **out) {
    if (fl__dnnl_plist_reserve(&b->p->bufs)) return fl__dnnl_nomem(b);
    size_t size = (bytes + BUF_ALIGN - 1) / BUF_ALIGN * BUF_ALIGN;
    void *p = aligned_alloc(BUF_ALIGN, size ? size : BUF_ALIGN);
    if (!p) return fl__dnnl_nomem(b);
    memset(p, 0, size); /* blocked layouts' padding stays zero */
    b->p->bufs.v[b->p->bufs.n++] = p;
    *out = p;
    return FL_OK;
}

fl_status fl__dnnl_new_mem(bld_t *b, const dnnl_memory_desc_t *md, void *ptr, dnnl_memory_t *out) {
    if (fl__dnnl_plist_reserve(&b->p->mems)) return fl__dnnl_nomem(b);
    DN(b, dnnl_memory_create(out, md, b->n->engine, ptr ? ptr : DNNL_MEMORY_NONE));
    b->p->mems.v[b->p->mems.n++] = *out;
    return FL_OK;
}

fl_status fl__dnnl_keep_pd(bld_t *b, dnnl_primitive_desc_t pd) {
    if (fl__dnnl_plist_reserve(&b->p->pds)) {
        dnnl_primitive_desc_destroy(pd);
        return fl__dnnl_nomem(b);
    }
    b->p->pds.v[b->p->pds.n++] = pd;
    return FL_OK;
}

/* A buffer for the values of t, made without one. */
fl_status fl__dnnl_tensor_alloc(bld_t *b, tensor_t *t) {
    FL_TRY(fl__dnnl_new_buf(b, dnnl_memory_desc_get_size(&t->md), &t->val));
    return fl__dnnl_new_mem(b, &t->md, t->val, &t->vmem);
}

/* A tensor of layout md; with_val: its value buffer too. */
fl_status fl__dnnl_new_tensor(bld_t *b, const dnnl_memory_desc_t *md, int with_val, tensor_t **out) {
    if (fl__dnnl_plist_reserve(&b->p->tensors)) return fl__dnnl_nomem(b);
    tensor_t *t = calloc(1, sizeof *t);
    if (!t) return fl__dnnl_nomem(b);
    b->p->tensors.v[b->p->tensors.n++] = t;
    t->md = *md;
    *out = t;
    return with_val ? fl__dnnl_tensor_alloc(b, t) : FL_OK;
}

fl_status fl__dnnl_ensure_grad(bld_t *b, tensor_t *t) {
    if (t->grad) return FL_OK;
    FL_TRY(fl__dnnl_new_buf(b, dnnl_memory_desc_get_size(&t->md), &t->grad));
    return fl__dnnl_new_mem(b, &t->md, t->grad, &t->gmem);
}

fl_status fl__dnnl_add_step(bld_t *b, steplist_t *l, const step_t *s) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        step_t *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return fl__dnnl_nomem(b);
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
    if (!s) return fl__dnnl_nomem(b);
    for (int i = 0; i < p->scratch_mems.n; i++) {
        dnnl_status_t st = dnnl_memory_set_data_handle(p->scratch_mems.v[i], s);
        if (st != dnnl_success) {
            free(s);
            return fl__dnnl_fail(b, "dnnl_memory_set_data_handle", st);
        }
    }
    free(p->scratch);
    p->scratch = s;
    p->scratch_bytes = size;
    return FL_OK;
}

/* Appends a primitive step for pd with args (nargs <= 7; the scratchpad is added). */
fl_status fl__dnnl_add_prim(bld_t *b, steplist_t *l, const_dnnl_primitive_desc_t pd, const char *what, int nargs,
                            const dnnl_exec_arg_t *args) {
    step_t s = {.kind = ST_PRIM, .what = what, .nargs = nargs};
    memcpy(s.args, args, (size_t)nargs * sizeof *args);
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (smd && dnnl_memory_desc_get_size(smd) > 0) {
        dnnl_memory_t sm;
        if (fl__dnnl_plist_reserve(&b->p->scratch_mems)) return fl__dnnl_nomem(b);
        FL_TRY(fl__dnnl_new_mem(b, smd, NULL, &sm));
        b->p->scratch_mems.v[b->p->scratch_mems.n++] = sm;
        DN(b, dnnl_memory_set_data_handle(sm, b->p->scratch));
        FL_TRY(fit_scratch(b, dnnl_memory_desc_get_size(smd)));
        s.args[s.nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, sm};
    }
    DN(b, dnnl_primitive_create(&s.prim, pd));
    fl_status st = fl__dnnl_add_step(b, l, &s);
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
        return fl__dnnl_fail(b, "setting the primitive attributes", st);
    }
    return FL_OK;
}

/* dst = src in another layout. */
fl_status fl__dnnl_add_reorder(bld_t *b, steplist_t *l, dnnl_memory_t src, dnnl_memory_t dst) {
    const dnnl_memory_desc_t *smd, *dmd;
    DN(b, dnnl_memory_get_memory_desc(src, &smd));
    DN(b, dnnl_memory_get_memory_desc(dst, &dmd));
    dnnl_primitive_attr_t attr;
    FL_TRY(new_attr(b, 0, &attr));
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, smd, b->n->engine, dmd, b->n->engine, attr);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return fl__dnnl_fail(b, "dnnl_reorder_primitive_desc_create", st);
    const dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    fl_status fs = fl__dnnl_add_prim(b, l, pd, "reorder", 2, args);
    dnnl_primitive_desc_destroy(pd);
    return fs;
}

/* A step just appended to l that reads the parameters only (a weight reorder or the
 * space-to-depth weights): run() skips it while the parameters have not changed. */
void fl__dnnl_mark_cached(steplist_t *l) {
    l->v[l->n - 1].cached = 1;
}

/* ---- descriptors ------------------------------------------------------------------- */

fl_status fl__dnnl_md4(bld_t *b, dnnl_memory_desc_t *md, int n, int c, int h, int w, dnnl_format_tag_t tag) {
    const dnnl_dims_t d = {n, c, h, w};
    DN(b, dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, tag));
    return FL_OK;
}

fl_status fl__dnnl_md2(bld_t *b, dnnl_memory_desc_t *md, int r, int c) {
    const dnnl_dims_t d = {r, c};
    DN(b, dnnl_memory_desc_init_by_tag(md, 2, d, dnnl_f32, dnnl_ab));
    return FL_OK;
}

fl_status fl__dnnl_md1(bld_t *b, dnnl_memory_desc_t *md, int n) {
    const dnnl_dims_t d = {n};
    DN(b, dnnl_memory_desc_init_by_tag(md, 1, d, dnnl_f32, dnnl_x));
    return FL_OK;
}

/* The NCHW layout of md's dims. */
fl_status fl__dnnl_plain_md(bld_t *b, const dnnl_memory_desc_t *md, dnnl_memory_desc_t *out) {
    return fl__dnnl_md4(b, out, (int)md->dims[0], (int)md->dims[1], (int)md->dims[2], (int)md->dims[3], dnnl_nchw);
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

fl_status fl__dnnl_make_pd(bld_t *b, const void *op_desc, int relu, const_dnnl_primitive_desc_t hint,
                           dnnl_primitive_desc_t *out) {
    DN(b, raw_pd(b, op_desc, relu, hint, out));
    return FL_OK;
}

/* attempt 0's pd when oneDNN has more than its reference implementation for it; NULL
 * otherwise (the caller then tries its second choice). */
void fl__dnnl_try_pd(bld_t *b, const void *op_desc, int relu, const_dnnl_primitive_desc_t hint,
                     dnnl_primitive_desc_t *out) {
    if (raw_pd(b, op_desc, relu, hint, out) != dnnl_success) {
        *out = NULL;
    } else if (is_ref(*out)) {
        dnnl_primitive_desc_destroy(*out);
        *out = NULL;
    }
}

/* t itself when it has layout md, else a new tensor with md and a reorder into it. */
fl_status fl__dnnl_tensor_as(bld_t *b, steplist_t *l, tensor_t *t, const dnnl_memory_desc_t *md, tensor_t **out) {
    if (dnnl_memory_desc_equal(&t->md, md)) {
        *out = t;
        return FL_OK;
    }
    FL_TRY(fl__dnnl_new_tensor(b, md, 1, out));
    return fl__dnnl_add_reorder(b, l, t->vmem, (*out)->vmem);
}

/* t's gradient in layout md: t's own when the layouts agree, else a reorder of it. */
fl_status fl__dnnl_grad_as(bld_t *b, steplist_t *l, tensor_t *t, const dnnl_memory_desc_t *md, dnnl_memory_t *out) {
    if (dnnl_memory_desc_equal(&t->md, md)) {
        *out = t->gmem;
        return FL_OK;
    }
    float *buf;
    FL_TRY(fl__dnnl_new_buf(b, dnnl_memory_desc_get_size(md), &buf));
    FL_TRY(fl__dnnl_new_mem(b, md, buf, out));
    return fl__dnnl_add_reorder(b, l, t->gmem, *out);
}

/* Where a primitive writes t's gradient when it produces layout md: t's own gradient, or
 * a buffer that *back (then not NULL) reorders into it once the primitive ran. */
fl_status fl__dnnl_grad_out(bld_t *b, tensor_t *t, const dnnl_memory_desc_t *md, dnnl_memory_t *out,
                            dnnl_memory_t *back) {
    FL_TRY(fl__dnnl_ensure_grad(b, t));
    *back = NULL;
    if (dnnl_memory_desc_equal(&t->md, md)) {
        *out = t->gmem;
        return FL_OK;
    }
    float *buf;
    FL_TRY(fl__dnnl_new_buf(b, dnnl_memory_desc_get_size(md), &buf));
    FL_TRY(fl__dnnl_new_mem(b, md, buf, out));
    *back = *out;
    return FL_OK;
}

/* *out: the memory a primitive takes for the tensor at base + off of a flat buffer
 * (parameters or gradients) whose layout is `flat`: over the buffer itself when the
 * primitive wants that layout (*flat_out = NULL), else a plan buffer of the layout it
 * wants, with *flat_out the flat buffer's memory for the caller's reorder. */
fl_status fl__dnnl_flat_mem(bld_t *b, const dnnl_memory_desc_t *flat, float *base, size_t off,
                            const dnnl_memory_desc_t *want, dnnl_memory_t *out, dnnl_memory_t *flat_out) {
    dnnl_memory_t fm;
    FL_TRY(fl__dnnl_new_mem(b, flat, base + off, &fm));
    if (dnnl_memory_desc_equal(flat, want)) {
        *out = fm;
        *flat_out = NULL;
        return FL_OK;
    }
    float *buf;
    FL_TRY(fl__dnnl_new_buf(b, dnnl_memory_desc_get_size(want), &buf));
    FL_TRY(fl__dnnl_new_mem(b, want, buf, out));
    *flat_out = fm;
    return FL_OK;
}

#endif
