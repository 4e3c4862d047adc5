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
 * failure anywhere is cleaned up by destroying the plan.
 *
 * Files: this one holds the network, its plans per batch size and describe (and, in a
 * build without oneDNN, the answers that say so); dnnl_prim.c makes oneDNN's objects and
 * registers them in a plan; dnnl_fwd.c builds the forward (where each layer's kernel is
 * chosen: fleet's own or oneDNN's, with the thresholds), dnnl_bwd.c the backward;
 * dnnl_run.c runs a plan's steps, copies the observations in and out and holds the
 * signals. They share dnnl_internal.h (the plan's types). */
#include "kernels/dnnl.h"

#ifdef FL_HAVE_DNNL

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif

#include "common/log.h"
#include "kernels/conv_fwd.h"
#include "kernels/dnnl_internal.h"

int fl_dnnl_available(void) {
    return 1;
}

/* The OpenMP thread count of the calling thread follows OpenBLAS's (see dnnl.h). */
int fl__dnnl_sync_threads(void) {
    int t = openblas_get_num_threads();
    if (t < 1) t = 1;
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
    if (omp_get_max_threads() != t) omp_set_num_threads(t);
#endif
    return t;
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
    fl_status st = fl__dnnl_build_fwd(n, p, err);
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
        int w = snprintf(len < cap ? out + len : NULL, len < cap ? cap - len : 0, "%s %s: %s%s%s\n", s->layer, s->what,
                         sparse ? "fleet:sparse, else " : "", impl, last);
        if (w > 0) len += (size_t)w;
    }
    return len;
}

plan_t *fl__dnnl_find_plan(const fl_dnnl_net_t *n, int B) {
    for (int i = 0; i < FL_DNNL_MAX_PLANS; i++)
        if (n->plans[i] && n->plans[i]->batch == B) return n->plans[i];
    return NULL;
}

/* The plan for B at the current thread count, built when missing or stale. */
fl_status fl__dnnl_get_plan(fl_dnnl_net_t *n, int B, plan_t **out, fl_err_t *err) {
    const int threads = fl__dnnl_sync_threads();
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

size_t fl_dnnl_net_describe(const fl_dnnl_net_t *n, int B, char *out, size_t cap) {
    if (cap) out[0] = '\0';
    const plan_t *p = n ? fl__dnnl_find_plan(n, B) : NULL;
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

int fl_dnnl_available(void) {
    return 0;
}

fl_status fl_dnnl_net_create(const fl_dnnl_net_desc_t *d, fl_dnnl_net_t **out, fl_err_t *err) {
    (void)d;
    if (out) *out = NULL;
    return fl_err_set(err, FL_UNIMPLEMENTED, "dnnl: fleet was built without oneDNN (FLEET_DNNL=OFF or not found)");
}

void fl_dnnl_net_destroy(fl_dnnl_net_t *n) {
    (void)n;
}

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
