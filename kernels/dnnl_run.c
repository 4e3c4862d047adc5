/* dnnl_run: running the plans of the oneDNN backend (see the top of dnnl.c): each step
 * list in order (oneDNN's primitives on the network's stream, fleet's own ops and
 * kernels between them), the observations copied into the input edge and the input
 * gradient out of it, and the forward and backward calls with the asynchronous signals
 * held. */
#include "kernels/dnnl.h"

#ifdef FL_HAVE_DNNL

#include <oneapi/dnnl/dnnl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_fwd.h"
#include "kernels/dense_small.h"
#include "kernels/dense_sparse.h"
#include "kernels/dnnl_internal.h"
#include "kernels/ops.h"

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

static void release_signals(const sigset_t *old) {
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

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
                            if (grad)
                                s->c[w] = s->a[w2];
                            else
                                s->c[w2] = s->a[w];
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
    if (sp->pre == 0)
        sp->nnz = fl_sparse_rows(s->a, s->batch, s->cin, sp->cap, sp->start, sp->col, sp->val);
    else if (sp->pre < 0)
        sp->nnz = -1;
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
    SIMD for (dnnl_dim_t t = 0; t < n; t++) dst[t] = scale * src[t];
}

/* uint8 observations as fl_dtype_to_float converts them (v x 1/255), then the scale: the
 * same two roundings as a conversion first and scale_copy after. */
static inline void scale_copy_u8(float *restrict dst, const unsigned char *restrict src, float scale, dnnl_dim_t n) {
    SIMD for (dnnl_dim_t t = 0; t < n; t++) dst[t] = scale * ((float)src[t] * (1.0f / 255.0f));
}

/* One block of N channels between an observation (obs, or u8 when not NULL) and the edge
 * x, as scale_copy and scale_copy_u8 copy them (out: x back into obs), at a length the
 * compiler sees: block_copy8 (AVX2's blocked layout) and block_copy16 (AVX-512's). */
#define BLOCK_COPY(N)                                                                                          \
    static inline void block_copy##N(float *restrict x, float *restrict obs, const unsigned char *restrict u8, \
                                     float scale, int out) {                                                   \
        if (out)                                                                                               \
            for (int t = 0; t < (N); t++) obs[t] = scale * x[t];                                               \
        else if (u8)                                                                                           \
            for (int t = 0; t < (N); t++) x[t] = scale * ((float)u8[t] * (1.0f / 255.0f));                     \
        else                                                                                                   \
            for (int t = 0; t < (N); t++) x[t] = scale * obs[t];                                               \
    }
BLOCK_COPY(8)
BLOCK_COPY(16)

#define PLANAR_TILE 2048 /* floats */

/* dst[t] = scale * src[t * stride] (uint8 as scale_copy_u8 converts them), and the
 * scatter back: dst[t * stride] = scale * src[t]. */
static inline void scale_gather(float *restrict dst, const float *restrict src, dnnl_dim_t stride, float scale,
                                dnnl_dim_t n) {
    SIMD for (dnnl_dim_t t = 0; t < n; t++) dst[t] = scale * src[t * stride];
}

static inline void scale_gather_u8(float *restrict dst, const unsigned char *restrict src, dnnl_dim_t stride,
                                   float scale, dnnl_dim_t n) {
    SIMD for (dnnl_dim_t t = 0; t < n; t++) dst[t] = scale * ((float)src[t * stride] * (1.0f / 255.0f));
}

static inline void scale_scatter(float *restrict dst, dnnl_dim_t stride, const float *restrict src, float scale,
                                 dnnl_dim_t n) {
    SIMD for (dnnl_dim_t t = 0; t < n; t++) dst[t * stride] = scale * src[t];
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
            if (out)
                scale_copy(obs + img, xb, scale, HW * C);
            else if (u8)
                scale_copy_u8(xb, u8 + img, scale, HW * C);
            else
                scale_copy(xb, obs + img, scale, HW * C);
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
                if (out)
                    scale_scatter(obs + img + c, C, xb + c * HW, scale, HW);
                else if (u8)
                    scale_gather_u8(xb + c * HW, u8 + img + c, C, scale, HW);
                else
                    scale_gather(xb + c * HW, obs + img + c, C, scale, HW);
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
                            if (L->blk == 8)
                                block_copy8(x + o, ob, ub, scale, out);
                            else
                                block_copy16(x + o, ob, ub, scale, out);
                        }
                        continue;
                    }
                    /* in stretches of channels that lie side by side in x */
                    for (int j = 0; j < run;) {
                        dnnl_dim_t len = run - j;
                        if (L->blk > 1 && len > L->blk - ci)
                            len = L->blk - ci;
                        else if (L->blk == 1 && L->st[1] != 1)
                            len = 1;
                        if (out)
                            scale_copy(obs + src + j, x + o + ci, scale, len);
                        else if (u8)
                            scale_copy_u8(x + o + ci, u8 + src + j, scale, len);
                        else
                            scale_copy(x + o + ci, obs + src + j, scale, len);
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
        if (out)
            scale_copy(obs + i0, x + i0, scale, (dnnl_dim_t)(i1 - i0));
        else if (u8)
            scale_copy_u8(x + i0, u8 + i0, scale, (dnnl_dim_t)(i1 - i0));
        else
            scale_copy(x + i0, obs + i0, scale, (dnnl_dim_t)(i1 - i0));
    }
}

/* obs (floats) or u8 (uint8, x 1/255) */
static fl_status net_forward(fl_dnnl_net_t *n, const float *obs, const unsigned char *u8, float scale, int B, float *q,
                             fl_err_t *err) {
    if (!n || (!obs && !u8) || !q || B < 1 || B > n->max_batch)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dnnl: forward: batch %d (expected 1..%d) and non-NULL buffers", B,
                          n ? n->max_batch : 0);
    plan_t *p = NULL;
    FL_TRY(fl__dnnl_get_plan(n, B, &p, err));
    /* obs is only read (copy_* write the other side) */
    if (n->img_c) {
        /* A sparse first layer over planar uint8 images lists their set values from the
         * bytes; the float copy is made only when that fails. */
        sparse_in_t *sp = NULL;
        for (int i = 0; i < n->num_layers && !sp; i++)
            if (p->lp[i].sparse) sp = &p->lp[i].sp;
        if (sp) sp->pre = 0;
        if (sp && u8 && input_whole(n, p) == 1) {
            const int nnz = fl_sparse_rows_u8(u8, B, n->img_h * n->img_w, n->img_c, scale, sp->cap, sp->start, sp->col,
                                              sp->val, sp->cstart);
            sp->nnz = nnz;
            sp->pre = nnz >= 0 ? 1 : nnz == -1 ? -1 : 0;
        }
        if (p->img)
            p->img_in = (img_in_t){.u8 = u8, .f = obs, .scale = scale};
        else if (!sp || sp->pre != 1)
            copy_images(n, p, (float *)obs, u8, p->edge[0]->val, scale, B, 0);
    } else {
        copy_vectors((float *)obs, u8, p->edge[0]->val, scale, (size_t)B * n->obs_dim, 0);
    }
    p->forwarded = 0;
    FL_TRY(run(n, &p->fwd, err));
    memcpy(q, p->edge[n->num_layers]->val, (size_t)B * n->num_actions * sizeof(float));
    p->forwarded = 1;
    return FL_OK;
}

static fl_status net_backward(fl_dnnl_net_t *n, const float *dq, int B, float *dobs, float scale, fl_err_t *err) {
    if (!n || !dq || B < 1 || B > n->max_batch)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dnnl: backward: batch %d (expected 1..%d) and non-NULL dq", B,
                          n ? n->max_batch : 0);
    plan_t *p = fl__dnnl_find_plan(n, B);
    if (!p || !p->forwarded || p->used != n->calls)
        return fl_err_set(err, FL_FAILED_PRECONDITION, "dnnl: backward at batch %d: the last forward was not at it", B);
    fl__dnnl_sync_threads();
    if (!p->bwd_built) FL_TRY(fl__dnnl_build_bwd(n, p, err));
    if (dobs && !p->ibwd_built) FL_TRY(fl__dnnl_build_ibwd(n, p, err));
    memcpy(p->edge[n->num_layers]->grad, dq, (size_t)B * n->num_actions * sizeof(float));
    FL_TRY(run(n, &p->bwd, err));
    if (!dobs) return FL_OK;
    FL_TRY(run(n, &p->ibwd, err));
    if (n->img_c)
        copy_images(n, p, dobs, NULL, p->edge[0]->grad, scale, B, 1);
    else
        copy_vectors(dobs, NULL, p->edge[0]->grad, scale, (size_t)B * n->obs_dim, 1);
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

#endif
