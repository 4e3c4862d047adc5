/* client: fleet.ParamServer calls over common/rpc, fanned out over P shards (see
 * client.h).
 *
 * Every call waits for its server to come up (until its deadline), so a role started
 * before its parameter servers simply waits. Fetch runs in two passes: the calls (in
 * parallel), each reply parsed in place and checked against the caller's buffer; then,
 * only if every shard answered well, the copies into dst (in parallel too). Fetch
 * replies are read in place (common/pbwalk.h) instead of with protobuf-c's unpack,
 * which would copy the values once more. */
#include "paramserver/client.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/fanout.h"
#include "common/methods.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "paramserver/quantize.h"

#define MAX_SHARDS 256

typedef struct shard {
    fl_rpc_channel_t *ch;
    char *addr;
    uint64_t version; /* the record: version of this slice the caller holds; guarded by mu */
} shard;

struct fl_param_client {
    int P;
    shard *sh;
    fl_param_client_opts_t o;
    fl_fanout_t *pool; /* P - 1 workers */
    pthread_mutex_t mu;
    pthread_mutex_t push_mu; /* quantized pushes: the residual */
    float *residual;         /* (residual_n) error feedback, zero at first */
    size_t residual_n;
    atomic_uint_fast64_t sent, received;
};

/* Per-shard outcome of one fanned-out call. */
typedef struct job {
    fl_status st;
    fl_err_t err;
    uint64_t offset, n; /* the shard's slice of the caller's vector */
} job;

fl_status fl_param_client_create(const char *addr, fl_param_client_t **out, fl_err_t *err) {
    return fl_param_client_create_opts(addr, NULL, out, err);
}

fl_status fl_param_client_create_opts(const char *addrs, const fl_param_client_opts_t *opts, fl_param_client_t **out,
                                      fl_err_t *err) {
    *out = NULL;
    if (!addrs || !*addrs) return fl_err_set(err, FL_INVALID_ARGUMENT, "paramserver client: empty address");
    if (opts && (opts->quantize < 0 || opts->quantize > 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "paramserver client: quantize = %d, expected 0 or 1",
                          opts->quantize);
    int P = 1;
    for (const char *p = addrs; *p; p++) P += *p == ',';
    if (P > MAX_SHARDS)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "paramserver client: %d addresses, at most %d shards", P,
                          MAX_SHARDS);
    fl_param_client_t *c = calloc(1, sizeof *c);
    if (!c || !(c->sh = calloc((size_t)P, sizeof *c->sh))) {
        free(c);
        return fl_err_set(err, FL_NO_MEMORY, "paramserver client: out of memory");
    }
    if (opts) c->o = *opts;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->push_mu, NULL);
    atomic_init(&c->sent, 0);
    atomic_init(&c->received, 0);
    fl_status st = FL_OK;
    const char *p = addrs;
    for (int s = 0; s < P; s++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && (*p == ' ' || *p == '\t')) p++, len--;
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
        c->P = s + 1; /* for the cleanup */
        if (len == 0) {
            st = fl_err_set(err, FL_INVALID_ARGUMENT, "paramserver client: address %d of \"%s\" is empty", s, addrs);
            goto fail;
        }
        if (!(c->sh[s].addr = strndup(p, len))) {
            st = fl_err_set(err, FL_NO_MEMORY, "paramserver client: out of memory");
            goto fail;
        }
        if ((st = fl_rpc_channel_create(c->sh[s].addr, 0, &c->sh[s].ch, err)) != FL_OK) goto fail;
        p = e ? e + 1 : p + len;
    }
    if (P > 1 && (st = fl_fanout_create(P - 1, &c->pool, err)) != FL_OK) goto fail;
    *out = c;
    return FL_OK;
fail:
    fl_param_client_destroy(c);
    return st;
}

void fl_param_client_destroy(fl_param_client_t *c) {
    if (!c) return;
    fl_fanout_destroy(c->pool);
    for (int s = 0; s < c->P; s++) {
        fl_rpc_channel_destroy(c->sh[s].ch);
        free(c->sh[s].addr);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->push_mu);
    free(c->residual);
    free(c->sh);
    free(c);
}

int fl_param_num_shards(const fl_param_client_t *c) {
    return c->P;
}

void fl_param_client_bytes(const fl_param_client_t *c, uint64_t *sent, uint64_t *received) {
    fl_param_client_t *m = (fl_param_client_t *)(uintptr_t)c;
    if (sent) *sent = atomic_load(&m->sent);
    if (received) *received = atomic_load(&m->received);
}

static void init_jobs(const fl_param_client_t *c, job *jobs, size_t n) {
    for (int s = 0; s < c->P; s++) {
        jobs[s].st = FL_OK;
        fl_err_init(&jobs[s].err);
        fl_param_shard_range(n, c->P, s, &jobs[s].offset, &jobs[s].n);
    }
}

/* The first failure among the shards, prefixed with the shard when P > 1. */
static fl_status first_failure(const fl_param_client_t *c, const job *jobs, const char *what, fl_err_t *err) {
    int failed = 0, first = -1;
    for (int s = 0; s < c->P; s++)
        if (jobs[s].st != FL_OK) {
            failed++;
            if (first < 0) first = s;
        }
    if (first < 0) return FL_OK;
    if (c->P == 1) return fl_err_set(err, jobs[0].st, "%s", jobs[0].err.msg);
    if (failed > 1)
        return fl_err_set(err, jobs[first].st, "%s: shard %d (%s): %s (%d of %d shards failed)", what, first,
                          c->sh[first].addr, jobs[first].err.msg, failed, c->P);
    return fl_err_set(err, jobs[first].st, "%s: shard %d (%s): %s", what, first, c->sh[first].addr,
                      jobs[first].err.msg);
}

/* Packs, sends and unpacks one protobuf-c unary call, counting bytes; flags added to
 * FL_RPC_WAIT_FOR_READY. */
static fl_status call_pb(fl_param_client_t *c, int s, const char *method, const ProtobufCMessage *req,
                         const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp, int64_t timeout_ms,
                         unsigned flags, uint64_t *sent, fl_err_t *err) {
    size_t len = protobuf_c_message_get_packed_size(req);
    atomic_fetch_add(&c->sent, len);
    if (sent) *sent = len;
    fl_status st =
        fl_rpc_unary_pb(c->sh[s].ch, method, req, desc, resp, timeout_ms, FL_RPC_WAIT_FOR_READY | flags, err);
    if (st == FL_OK) atomic_fetch_add(&c->received, protobuf_c_message_get_packed_size(*resp));
    return st;
}

/* The float32 ParamSlice values[0, n) at offset of a total-element vector, in *ps over
 * *t and *shape (the caller's storage, alive until the request is sent). */
static void f32_slice(Fleet__ParamSlice *ps, Fleet__Tensor *t, int64_t *shape, uint64_t version, uint64_t offset,
                      uint64_t total, const float *values, size_t n) {
    *shape = (int64_t)n;
    t->dtype = FLEET__DTYPE__DTYPE_FLOAT32;
    t->n_shape = 1;
    t->shape = shape;
    t->data.len = 4 * n;
    t->data.data = (uint8_t *)(uintptr_t)values;
    ps->version = version;
    ps->offset = offset;
    ps->total = total;
    ps->values = t;
}

/* ---------------------------------------------------------------- publish ---- */

typedef struct publish_ctx {
    fl_param_client_t *c;
    job *jobs;
    uint64_t version;
    const float *params;
    size_t total;
    int64_t timeout_ms;
} publish_ctx;

static void publish_one(void *arg, int s) {
    publish_ctx *x = arg;
    job *j = &x->jobs[s];
    int64_t shape;
    Fleet__Tensor t = FLEET__TENSOR__INIT;
    Fleet__ParamSlice ps = FLEET__PARAM_SLICE__INIT;
    f32_slice(&ps, &t, &shape, x->version, j->offset, x->total, x->params + j->offset, j->n);
    Fleet__PublishRequest req = FLEET__PUBLISH_REQUEST__INIT;
    req.params = &ps;
    ProtobufCMessage *resp = NULL;
    j->st = call_pb(x->c, s, fl_method_path(FL_METHOD_PARAM_PUBLISH), &req.base, &fleet__publish_response__descriptor,
                    &resp, x->timeout_ms, 0, NULL, &j->err);
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
}

fl_status fl_param_publish(fl_param_client_t *c, uint64_t version, const float *params, size_t n, int64_t timeout_ms,
                           fl_err_t *err) {
    if (n > SIZE_MAX / 4 || (n && !params))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "publish: invalid parameter buffer (%zu elements)", n);
    job jobs[MAX_SHARDS];
    init_jobs(c, jobs, n);
    publish_ctx x = {c, jobs, version, params, n, timeout_ms};
    fl_fanout_run(c->pool, c->P, publish_one, &x);
    return first_failure(c, jobs, "publish", err);
}

/* ------------------------------------------------------------------ fetch ---- */

/* A FetchResponse read in place: the values stay in the reply buffer. */
typedef struct fetch_view {
    uint64_t version;
    int has_params, has_slice, has_values;
    uint64_t p_version, offset, total;
    int dtype;
    size_t n_shape;
    int64_t shape0;
    const uint8_t *data;
    size_t data_len;
} fetch_view;

static int on_slice(void *ctx, fl_pb_cur_t *c, const fl_pb_field_t *f) {
    fetch_view *x = ctx;
    if (f->wt == 0 && f->num == 1) x->p_version = f->v;
    if (f->wt == 0 && f->num == 2) x->offset = f->v;
    if (f->wt == 0 && f->num == 3) x->total = f->v;
    if (f->wt == 2 && f->num == 4) {
        fl_pb_tensor_t t;
        if (fl_pb_read_tensor(c, f, &t)) return -1;
        x->has_values = 1;
        x->dtype = t.dtype;
        x->n_shape = t.n_shape;
        x->shape0 = t.n_shape ? t.shape[0] : 0;
        x->data = fl_pb_span(c, t.data_pos, t.data_len);
        x->data_len = t.data_len;
    }
    return 0;
}

static int on_response(void *ctx, fl_pb_cur_t *c, const fl_pb_field_t *f) {
    fetch_view *x = ctx;
    if (f->wt == 0 && f->num == 1) x->version = f->v;
    if (f->wt == 0 && f->num == 2) x->has_params = f->v != 0;
    if (f->wt == 2 && f->num == 3) {
        x->has_slice = 1;
        return fl_pb_walk(c, f->pos + (size_t)f->v, on_slice, x);
    }
    return 0;
}

/* Reads a FetchResponse in place (one buffer: every field's bytes are in it). */
static int read_fetch(const fl_rpc_buf_t *b, fetch_view *v) {
    fl_pb_seg_t seg = {b->data, b->len};
    fl_pb_cur_t c;
    fl_pb_cur_init(&c, &seg, 1);
    memset(v, 0, sizeof *v);
    return fl_pb_walk(&c, c.len, on_response, v);
}

typedef struct fetch_ctx {
    fl_param_client_t *c;
    job *jobs;
    uint64_t *if_newer; /* (P) */
    fl_rpc_buf_t *bufs; /* (P) */
    fetch_view *views;  /* (P) */
    size_t total;
    float *dst;
    int64_t timeout_ms;
} fetch_ctx;

/* Checks a reply that carries values against the caller's buffer. */
static fl_status check_fetched(const fetch_ctx *x, int s, fl_err_t *err) {
    const fetch_view *r = &x->views[s];
    const job *j = &x->jobs[s];
    int want = x->c->o.bf16 ? FLEET__DTYPE__DTYPE_BFLOAT16 : FLEET__DTYPE__DTYPE_FLOAT32;
    size_t es = x->c->o.bf16 ? 2 : 4;
    if (!r->has_slice || !r->has_values)
        return fl_err_set(err, FL_DATA_LOSS, "fetch: the server set has_params but sent no params.values");
    if (r->dtype != want)
        return fl_err_set(err, FL_DATA_LOSS, "fetch: params.values.dtype is %s, expected %s",
                          fl_dtype_name((fl_dtype)r->dtype), fl_dtype_name((fl_dtype)want));
    if (r->n_shape != 1 || r->shape0 < 0 || (uint64_t)r->shape0 > SIZE_MAX / 4 || r->data_len != es * (size_t)r->shape0)
        return fl_err_set(err, FL_DATA_LOSS,
                          "fetch: params.values is not a %s vector (%zu dimension(s), %zu data bytes)",
                          fl_dtype_name((fl_dtype)want), r->n_shape, r->data_len);
    uint64_t got = (uint64_t)r->shape0;
    if (x->c->P == 1) {
        if (r->offset != 0 || r->total != got)
            return fl_err_set(err, FL_UNIMPLEMENTED,
                              "fetch: the server holds the slice [%" PRIu64 ", %" PRIu64 ") of a %" PRIu64
                              "-element vector; give the client every shard's address",
                              r->offset, r->offset + got, r->total);
        if (got != x->total)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "fetch: the server holds %" PRIu64 " parameters, the caller's buffer holds %zu", got,
                              x->total);
    } else if (r->total != x->total) {
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "fetch: the servers hold a vector of %" PRIu64 " parameters, the caller's buffer holds %zu",
                          r->total, x->total);
    } else if (r->offset != j->offset || got != j->n) {
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "fetch: the server holds the slice [%" PRIu64 ", %" PRIu64 "), expected [%" PRIu64
                          ", %" PRIu64 ") for shard %d of %d (are the addresses in shard order?)",
                          r->offset, r->offset + got, j->offset, j->offset + j->n, s, x->c->P);
    }
    if (r->p_version <= x->if_newer[s] || r->p_version != r->version)
        return fl_err_set(err, FL_DATA_LOSS,
                          "fetch: the server sent version %" PRIu64 " (reply version %" PRIu64
                          "), not newer than %" PRIu64,
                          r->p_version, r->version, x->if_newer[s]);
    return FL_OK;
}

static void fetch_one(void *arg, int s) {
    fetch_ctx *x = arg;
    job *j = &x->jobs[s];
    uint8_t req[32];
    Fleet__FetchRequest m = FLEET__FETCH_REQUEST__INIT;
    m.if_newer_than = x->if_newer[s];
    m.dtype = x->c->o.bf16 ? FLEET__DTYPE__DTYPE_BFLOAT16 : FLEET__DTYPE__DTYPE_FLOAT32;
    size_t len = fleet__fetch_request__pack(&m, req);
    atomic_fetch_add(&x->c->sent, len);
    j->st = fl_rpc_unary(x->c->sh[s].ch, fl_method_path(FL_METHOD_PARAM_FETCH), req, len, x->timeout_ms,
                         FL_RPC_WAIT_FOR_READY, &x->bufs[s], &j->err);
    if (j->st != FL_OK) return;
    atomic_fetch_add(&x->c->received, x->bufs[s].len);
    fetch_view *v = &x->views[s];
    if (read_fetch(&x->bufs[s], v)) {
        j->st = fl_err_set(&j->err, FL_DATA_LOSS, "%s: the response is not a valid FetchResponse",
                           fl_method_path(FL_METHOD_PARAM_FETCH));
        return;
    }
    if (v->has_params) j->st = check_fetched(x, s, &j->err);
}

static void copy_one(void *arg, int s) {
    fetch_ctx *x = arg;
    const fetch_view *v = &x->views[s];
    if (!v->has_params) return;
    float *d = x->dst + x->jobs[s].offset;
    if (x->c->o.bf16)
        fl_bf16_decode(v->data, x->jobs[s].n, d);
    else if (x->jobs[s].n)
        memcpy(d, v->data, 4 * x->jobs[s].n);
}

fl_status fl_param_fetch(fl_param_client_t *c, uint64_t *version, float *dst, size_t n, int *updated,
                         int64_t timeout_ms, fl_err_t *err) {
    *updated = 0;
    job jobs[MAX_SHARDS];
    uint64_t if_newer[MAX_SHARDS];
    fl_rpc_buf_t bufs[MAX_SHARDS];
    fetch_view views[MAX_SHARDS];
    init_jobs(c, jobs, n);
    memset(bufs, 0, sizeof(bufs[0]) * (size_t)c->P);
    memset(views, 0, sizeof(views[0]) * (size_t)c->P);
    pthread_mutex_lock(&c->mu);
    for (int s = 0; s < c->P; s++) {
        if (*version == 0) c->sh[s].version = 0;
        if_newer[s] = c->P == 1 ? *version : c->sh[s].version;
    }
    pthread_mutex_unlock(&c->mu);
    fetch_ctx x = {c, jobs, if_newer, bufs, views, n, dst, timeout_ms};
    fl_fanout_run(c->pool, c->P, fetch_one, &x);
    fl_status st = first_failure(c, jobs, "fetch", err);
    if (st == FL_OK) {
        fl_fanout_run(c->pool, c->P, copy_one, &x);
        uint64_t min = UINT64_MAX;
        pthread_mutex_lock(&c->mu);
        for (int s = 0; s < c->P; s++) {
            if (views[s].has_params) {
                *updated = 1;
                c->sh[s].version = views[s].p_version;
            }
            if (c->sh[s].version < min) min = c->sh[s].version;
        }
        pthread_mutex_unlock(&c->mu);
        if (*updated || c->P > 1) *version = min;
    }
    for (int s = 0; s < c->P; s++) fl_rpc_buf_free(&bufs[s]);
    return st;
}

/* ------------------------------------------------------------------- push ---- */

typedef struct push_ctx {
    fl_param_client_t *c;
    job *jobs;
    const float *grads;
    size_t total;
    uint64_t *based_on;
    Fleet__PushGradientsResponse **resp;
    uint64_t *sent;
    uint8_t **bits; /* quantized: (P) sign bits of each slice */
    float *scales;  /* quantized: (P, 2) */
    int64_t timeout_ms;
} push_ctx;

static void push_one(void *arg, int s) {
    push_ctx *x = arg;
    job *j = &x->jobs[s];
    int64_t shape = 0;
    Fleet__Tensor t = FLEET__TENSOR__INIT;
    Fleet__ParamSlice ps = FLEET__PARAM_SLICE__INIT;
    Fleet__QuantizedGradients q = FLEET__QUANTIZED_GRADIENTS__INIT;
    Fleet__PushGradientsRequest req = FLEET__PUSH_GRADIENTS_REQUEST__INIT;
    req.based_on_version = x->based_on[s];
    req.learner = x->c->o.learner;
    if (x->bits) {
        q.offset = j->offset;
        q.total = x->total;
        q.count = j->n;
        q.sign_bits.data = x->bits[s];
        q.sign_bits.len = fl_q1_bytes(j->n);
        q.scale_pos = x->scales[2 * s];
        q.scale_neg = x->scales[2 * s + 1];
        req.quantized = &q;
    } else {
        f32_slice(&ps, &t, &shape, x->based_on[s], j->offset, x->total, x->grads + j->offset, j->n);
        req.grads = &ps;
    }
    ProtobufCMessage *resp = NULL;
    j->st = call_pb(x->c, s, fl_method_path(FL_METHOD_PARAM_PUSH_GRADIENTS), &req.base,
                    &fleet__push_gradients_response__descriptor, &resp, x->timeout_ms, FL_RPC_STOPPABLE, &x->sent[s],
                    &j->err);
    x->resp[s] = (Fleet__PushGradientsResponse *)resp;
}

fl_status fl_param_push(fl_param_client_t *c, const float *grads, size_t n, fl_param_push_result_t *res,
                        int64_t timeout_ms, fl_err_t *err) {
    fl_param_push_result_t local;
    if (!res) res = &local;
    memset(res, 0, sizeof *res);
    if (n == 0 || n > SIZE_MAX / 4 || !grads)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "push: invalid gradient buffer (%zu elements)", n);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(grads[i]))
            return fl_err_set(err, FL_INVALID_ARGUMENT, "push: grads[%zu] is %s (every gradient must be finite)", i,
                              isnan(grads[i]) ? "NaN"
                              : grads[i] > 0  ? "inf"
                                              : "-inf");
    job jobs[MAX_SHARDS];
    uint64_t based_on[MAX_SHARDS], sent[MAX_SHARDS];
    Fleet__PushGradientsResponse *resp[MAX_SHARDS];
    uint8_t *bits[MAX_SHARDS];
    float scales[2 * MAX_SHARDS];
    init_jobs(c, jobs, n);
    memset(resp, 0, sizeof(resp[0]) * (size_t)c->P);
    memset(sent, 0, sizeof(sent[0]) * (size_t)c->P);
    pthread_mutex_lock(&c->mu);
    for (int s = 0; s < c->P; s++) based_on[s] = c->sh[s].version;
    pthread_mutex_unlock(&c->mu);

    push_ctx x = {c, jobs, grads, n, based_on, resp, sent, NULL, scales, timeout_ms};
    uint8_t *bitbuf = NULL;
    if (c->o.quantize) {
        pthread_mutex_lock(&c->push_mu);
        if (c->residual_n != n) { /* a new vector length starts a new residual */
            free(c->residual);
            c->residual = calloc(n, sizeof *c->residual);
            c->residual_n = c->residual ? n : 0;
        }
        size_t nb = 0;
        for (int s = 0; s < c->P; s++) nb += fl_q1_bytes(jobs[s].n);
        bitbuf = malloc(nb ? nb : 1);
        if (!c->residual || !bitbuf) {
            pthread_mutex_unlock(&c->push_mu);
            free(bitbuf);
            return fl_err_set(err, FL_NO_MEMORY, "push: out of memory for the 1-bit codes of %zu gradients", n);
        }
        uint8_t *b = bitbuf;
        for (int s = 0; s < c->P; s++) {
            bits[s] = b;
            fl_q1_encode(grads + jobs[s].offset, c->residual + jobs[s].offset, jobs[s].n, b, &scales[2 * s],
                         &scales[2 * s + 1]);
            b += fl_q1_bytes(jobs[s].n);
        }
        x.bits = bits;
    }
    fl_fanout_run(c->pool, c->P, push_one, &x);
    for (int s = 0; s < c->P; s++) {
        res->bytes_sent += sent[s];
        if (jobs[s].st != FL_OK) {
            if (c->o.quantize) { /* not delivered: the residual keeps the whole value v = e + d */
                float *e = c->residual + jobs[s].offset;
                for (uint64_t i = 0; i < jobs[s].n; i++)
                    e[i] += (bits[s][i >> 3] >> (i & 7)) & 1u ? scales[2 * s] : -scales[2 * s + 1];
            }
            continue;
        }
        const Fleet__PushGradientsResponse *r = resp[s];
        if (r->applied)
            res->applied++;
        else
            res->dropped++;
        res->waited += r->waited != 0;
        res->wait_timed_out += r->wait_timed_out != 0;
        if (r->staleness > res->max_staleness) res->max_staleness = r->staleness;
        protobuf_c_message_free_unpacked(&resp[s]->base, NULL);
    }
    if (c->o.quantize) pthread_mutex_unlock(&c->push_mu);
    free(bitbuf);
    return first_failure(c, jobs, "push", err);
}

/* ------------------------------------------------------------------- info ---- */

fl_status fl_param_info_shard(fl_param_client_t *c, int s, int64_t timeout_ms, fl_param_info_t *out, fl_err_t *err) {
    if (s < 0 || s >= c->P)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "info: shard %d is out of range [0, %d)", s, c->P);
    Fleet__ParamInfoRequest req = FLEET__PARAM_INFO_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    fl_err_t e;
    fl_err_init(&e);
    fl_status st = call_pb(c, s, fl_method_path(FL_METHOD_PARAM_INFO), &req.base, &fleet__param_info__descriptor, &m,
                           timeout_ms, 0, NULL, &e);
    if (st != FL_OK) {
        if (c->P == 1) return fl_err_set(err, st, "%s", e.msg);
        return fl_err_set(err, st, "info: shard %d (%s): %s", s, c->sh[s].addr, e.msg);
    }
    const Fleet__ParamInfo *r = (const Fleet__ParamInfo *)m;
    memset(out, 0, sizeof *out);
    out->shard_id = r->shard_id;
    out->version = r->version;
    out->offset = r->offset;
    out->size = r->size;
    out->total = r->total;
    out->publishes = r->publishes;
    out->fetches = r->fetches;
    out->fetches_with_params = r->fetches_with_params;
    out->uptime_s = r->uptime_s;
    out->num_shards = r->num_shards;
    out->gorila = r->mode && strcmp(r->mode, "gorila") == 0;
    out->pushes_applied = r->pushes_applied;
    out->pushes_dropped = r->pushes_dropped;
    out->waits = r->waits;
    out->wait_timeouts = r->wait_timeouts;
    for (size_t i = 0; i < r->n_staleness_hist && i < FL_PARAM_STALENESS_BUCKETS; i++)
        out->staleness_hist[i] = r->staleness_hist[i];
    out->fetches_bf16 = r->fetches_bf16;
    out->push_bytes = r->push_bytes;
    out->rss_bytes = r->rss_bytes;
    out->private_bytes = r->private_bytes;
    out->cpu_s = r->cpu_s;
    protobuf_c_message_free_unpacked(m, NULL);
    return FL_OK;
}

fl_status fl_param_info(fl_param_client_t *c, int64_t timeout_ms, fl_param_info_t *out, fl_err_t *err) {
    return fl_param_info_shard(c, 0, timeout_ms, out, err);
}
