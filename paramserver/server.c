/* server: fleet.ParamServer handlers over the store (see server.h).
 *
 * Fetch is the hot path: many actors ask for the same version. The answer for a version
 * is encoded once by the store (per dtype); a fetch takes a reference to the snapshot
 * and hands its bytes to gRPC by reference, the reference being dropped when gRPC is
 * done with them: no copy and no lock while sending. Up-to-date fetches encode a few
 * bytes and never touch the lock.
 *
 * Large requests (server.h) take a slot under large_mu before their handler runs; the
 * last one out trims the heap. */
#include "paramserver/server.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/dtype.h"
#include "common/log.h"
#include "common/methods.h"
#include "common/procmem.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "paramserver/checkpoint.h"
#include "paramserver/quantize.h"

struct fl_paramserver_service {
    fl_rpc_server_t *rpc;
    fl_param_store_t *store;
    int shard;
    int gorila;
    int started;
    pthread_mutex_t large_mu; /* guards large_busy; large_cv signals a freed slot */
    pthread_cond_t large_cv;
    int large_slots, large_busy;
};

/* ---------------------------------------------------------------- replies ---- */

/* Where a handler's answer goes: to gRPC (rpc, the service's path) or into a
 * fl__paramserver_reply_t (local, fl__paramserver_service_call). */
typedef struct sink {
    fl_rpc_reply_t *rpc;
    fl__paramserver_reply_t *local;
} sink;

static fl_status sink_error(sink *r, fl_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static fl_status sink_error(sink *r, fl_status code, const char *fmt, ...) {
    char msg[FL_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->rpc) return fl_rpc_reply_error(r->rpc, code, "%s", msg);
    r->local->code = code;
    snprintf(r->local->msg, sizeof r->local->msg, "%s", msg);
    return code;
}

static void local_drop_payload(fl__paramserver_reply_t *l) {
    if (l->release)
        l->release(l->release_user);
    else
        free(l->data);
    l->data = NULL, l->len = 0, l->release = NULL, l->release_user = NULL;
}

static fl_status sink_pb(sink *r, const ProtobufCMessage *msg) {
    if (r->rpc) return fl_rpc_reply_pb(r->rpc, msg);
    fl__paramserver_reply_t *l = r->local;
    local_drop_payload(l);
    size_t n = protobuf_c_message_get_packed_size(msg);
    if (!(l->data = malloc(n ? n : 1))) return FL_NO_MEMORY;
    l->len = protobuf_c_message_pack(msg, l->data);
    return FL_OK;
}

static fl_status sink_ref(sink *r, const uint8_t *data, size_t len, void (*release)(void *), void *user) {
    if (r->rpc) return fl_rpc_reply_ref(r->rpc, data, len, release, user);
    fl__paramserver_reply_t *l = r->local;
    local_drop_payload(l);
    l->data = (uint8_t *)(uintptr_t)data, l->len = len, l->release = release, l->release_user = user;
    return FL_OK;
}

/* ------------------------------------------------------------ handlers ---- */

static fl_status on_publish(fl_paramserver_service_t *svc, const uint8_t *req, size_t len, sink *reply) {
    Fleet__PublishRequest *m = fleet__publish_request__unpack(NULL, len, req);
    if (!m) return sink_error(reply, FL_INVALID_ARGUMENT, "PublishRequest: cannot decode the message (%zu bytes)", len);
    fl_status st = FL_OK;
    const Fleet__ParamSlice *p = m->params;
    const Fleet__Tensor *t = p ? p->values : NULL;
    if (!p) {
        st = sink_error(reply, FL_INVALID_ARGUMENT, "params: missing (expected a ParamSlice)");
    } else if (!t) {
        st = sink_error(reply, FL_INVALID_ARGUMENT, "params.values: missing (expected a float32 tensor of shape (n,))");
    } else if (t->dtype != FLEET__DTYPE__DTYPE_FLOAT32) {
        st = sink_error(reply, FL_INVALID_ARGUMENT, "params.values.dtype: %s (%d), expected float32",
                        fl_dtype_name((fl_dtype)t->dtype), (int)t->dtype);
    } else if (t->n_shape != 1 || t->shape[0] < 0) {
        st = sink_error(reply, FL_INVALID_ARGUMENT,
                        "params.values.shape: %zu dimension(s)%s, expected one dimension (n,)", t->n_shape,
                        t->n_shape == 1 ? " with a negative size" : "");
    } else if ((uint64_t)t->shape[0] > SIZE_MAX / 4 || t->data.len != 4 * (size_t)t->shape[0]) {
        st = sink_error(reply, FL_INVALID_ARGUMENT,
                        "params.values.data: %zu bytes, expected 4 * %" PRId64 " for float32 of shape (%" PRId64 ",)",
                        t->data.len, t->shape[0], t->shape[0]);
    } else {
        fl_err_t err;
        fl_err_init(&err);
        st = fl_param_store_publish(svc->store, p->version, p->offset, p->total, t->data.data, (size_t)t->shape[0],
                                    &err);
        if (st != FL_OK) {
            sink_error(reply, st, "%s", err.msg);
        } else {
            Fleet__PublishResponse r = FLEET__PUBLISH_RESPONSE__INIT;
            r.version = p->version;
            st = sink_pb(reply, &r.base);
            FL_DEBUG("published version %" PRIu64 " (%" PRId64 " parameters)", p->version, t->shape[0]);
        }
    }
    fleet__publish_request__free_unpacked(m, NULL);
    return st;
}

static void release_snapshot(void *p) {
    fl_param_snapshot_release(p);
}

static fl_status on_fetch(fl_paramserver_service_t *svc, const uint8_t *req, size_t len, sink *reply) {
    Fleet__FetchRequest *m = fleet__fetch_request__unpack(NULL, len, req);
    if (!m) return sink_error(reply, FL_INVALID_ARGUMENT, "FetchRequest: cannot decode the message (%zu bytes)", len);
    uint64_t if_newer_than = m->if_newer_than;
    int dtype = (int)m->dtype;
    fleet__fetch_request__free_unpacked(m, NULL);
    if (dtype != FLEET__DTYPE__DTYPE_FLOAT32 && dtype != FLEET__DTYPE__DTYPE_INVALID &&
        dtype != FLEET__DTYPE__DTYPE_BFLOAT16)
        return sink_error(reply, FL_INVALID_ARGUMENT, "dtype: %s (%d), expected float32 (or unset) or bfloat16",
                          fl_dtype_name((fl_dtype)dtype), dtype);

    uint64_t held = 0;
    const fl_param_snapshot_t *snap = fl_param_store_fetch(svc->store, if_newer_than, &held);
    if (!snap) {
        if (held > if_newer_than)
            return sink_error(reply, FL_RESOURCE_EXHAUSTED, "Fetch: out of memory encoding version %" PRIu64, held);
        Fleet__FetchResponse r = FLEET__FETCH_RESPONSE__INIT;
        r.version = held;
        r.has_params = 0;
        return sink_pb(reply, &r.base);
    }
    /* The reply refers to the snapshot's encoded bytes (no copy); gRPC releases the
     * reference when it has sent them. */
    const uint8_t *out = snap->response;
    size_t n = snap->response_len;
    if (dtype == FLEET__DTYPE__DTYPE_BFLOAT16) {
        if (fl_param_snapshot_bf16(snap, &out, &n) != FL_OK) {
            fl_param_snapshot_release(snap);
            return sink_error(reply, FL_RESOURCE_EXHAUSTED,
                              "Fetch: out of memory encoding version %" PRIu64 " as bfloat16", held);
        }
        fl_param_store_count_bf16(svc->store);
    }
    return sink_ref(reply, out, n, release_snapshot, (void *)(uintptr_t)snap);
}

/* Checks a float32 gradient slice; returns its elements in *n. */
static fl_status check_grads(const Fleet__ParamSlice *p, size_t *n, sink *reply) {
    const Fleet__Tensor *t = p->values;
    if (!t)
        return sink_error(reply, FL_INVALID_ARGUMENT,
                          "grads.values: missing (expected a float32 tensor of shape (n,))");
    if (t->dtype != FLEET__DTYPE__DTYPE_FLOAT32)
        return sink_error(reply, FL_INVALID_ARGUMENT, "grads.values.dtype: %s (%d), expected float32",
                          fl_dtype_name((fl_dtype)t->dtype), (int)t->dtype);
    if (t->n_shape != 1 || t->shape[0] < 0)
        return sink_error(reply, FL_INVALID_ARGUMENT,
                          "grads.values.shape: %zu dimension(s)%s, expected one dimension (n,)", t->n_shape,
                          t->n_shape == 1 ? " with a negative size" : "");
    if ((uint64_t)t->shape[0] > SIZE_MAX / 4 || t->data.len != 4 * (size_t)t->shape[0])
        return sink_error(reply, FL_INVALID_ARGUMENT,
                          "grads.values.data: %zu bytes, expected 4 * %" PRId64 " for float32 of shape (%" PRId64 ",)",
                          t->data.len, t->shape[0], t->shape[0]);
    *n = (size_t)t->shape[0];
    return FL_OK;
}

/* Decodes 1-bit gradients into a new buffer (*out, n floats). */
static fl_status decode_quantized(const Fleet__QuantizedGradients *q, float **out, sink *reply) {
    *out = NULL;
    if (q->count > SIZE_MAX / 8)
        return sink_error(reply, FL_INVALID_ARGUMENT, "quantized.count: %" PRIu64 " is too large", q->count);
    size_t n = (size_t)q->count;
    if (q->sign_bits.len != fl_q1_bytes(n))
        return sink_error(reply, FL_INVALID_ARGUMENT,
                          "quantized.sign_bits: %zu bytes, expected ceil(count / 8) = %zu for count %zu",
                          q->sign_bits.len, fl_q1_bytes(n), n);
    if (!isfinite(q->scale_pos) || !isfinite(q->scale_neg) || q->scale_pos < 0 || q->scale_neg < 0)
        return sink_error(reply, FL_INVALID_ARGUMENT,
                          "quantized.scale_pos/scale_neg: %g/%g, expected finite values >= 0", (double)q->scale_pos,
                          (double)q->scale_neg);
    *out = malloc(n ? 4 * n : 1);
    if (!*out) return sink_error(reply, FL_RESOURCE_EXHAUSTED, "PushGradients: out of memory for %zu gradients", n);
    fl_q1_decode(q->sign_bits.data, n, q->scale_pos, q->scale_neg, *out);
    return FL_OK;
}

static fl_status on_push_gradients(fl_paramserver_service_t *svc, const uint8_t *req, size_t len, sink *reply) {
    Fleet__PushGradientsRequest *m = fleet__push_gradients_request__unpack(NULL, len, req);
    if (!m)
        return sink_error(reply, FL_INVALID_ARGUMENT, "PushGradientsRequest: cannot decode the message (%zu bytes)",
                          len);
    fl_param_store_count_push_bytes(svc->store, len);
    fl_status st = FL_OK;
    float *decoded = NULL;
    const void *grads = NULL;
    size_t n = 0;
    uint64_t offset = 0, total = 0;
    if (!svc->gorila) {
        st = sink_error(reply, FL_FAILED_PRECONDITION,
                        "PushGradients: this shard runs learner.mode = apex, where learners apply their own "
                        "optimizer and publish parameters; gradients are pushed only with learner.mode = gorila");
    } else if (m->grads && m->quantized) {
        st = sink_error(reply, FL_INVALID_ARGUMENT, "grads and quantized: both set, expected exactly one");
    } else if (m->grads) {
        st = check_grads(m->grads, &n, reply);
        grads = m->grads->values ? m->grads->values->data.data : NULL;
        offset = m->grads->offset, total = m->grads->total;
    } else if (m->quantized) {
        st = decode_quantized(m->quantized, &decoded, reply);
        grads = decoded;
        n = (size_t)m->quantized->count;
        offset = m->quantized->offset, total = m->quantized->total;
    } else {
        st = sink_error(reply, FL_INVALID_ARGUMENT,
                        "grads: missing (expected a float32 ParamSlice in grads, or quantized)");
    }
    if (st == FL_OK) {
        fl_err_t err;
        fl_err_init(&err);
        fl_param_push_outcome_t o;
        st = fl_param_store_push(svc->store, m->learner, m->based_on_version, offset, total, grads, n, &o, &err);
        if (st != FL_OK) {
            sink_error(reply, st, "%s", err.msg);
        } else {
            Fleet__PushGradientsResponse r = FLEET__PUSH_GRADIENTS_RESPONSE__INIT;
            r.applied = o.applied;
            r.version = o.version;
            r.staleness = o.staleness;
            r.waited = o.waited;
            r.wait_timed_out = o.wait_timed_out;
            st = sink_pb(reply, &r.base);
        }
    }
    free(decoded);
    fleet__push_gradients_request__free_unpacked(m, NULL);
    return st;
}

static fl_status on_info(fl_paramserver_service_t *svc, const uint8_t *req, size_t len, sink *reply) {
    Fleet__ParamInfoRequest *m = fleet__param_info_request__unpack(NULL, len, req);
    if (!m)
        return sink_error(reply, FL_INVALID_ARGUMENT, "ParamInfoRequest: cannot decode the message (%zu bytes)", len);
    fleet__param_info_request__free_unpacked(m, NULL);
    fl_param_store_info_t in;
    fl_param_store_info(svc->store, &in);
    Fleet__ParamInfo r = FLEET__PARAM_INFO__INIT;
    r.shard_id = in.shard_id;
    r.version = in.version;
    r.offset = in.offset;
    r.size = in.size;
    r.total = in.total;
    r.publishes = in.publishes;
    r.fetches = in.fetches;
    r.fetches_with_params = in.fetches_with_params;
    r.uptime_s = in.uptime_s;
    r.num_shards = in.num_shards;
    r.mode = (char *)(in.gorila ? "gorila" : "apex");
    r.pushes_applied = in.pushes_applied;
    r.pushes_dropped = in.pushes_dropped;
    r.waits = in.waits;
    r.wait_timeouts = in.wait_timeouts;
    r.n_staleness_hist = FL_PARAM_STALENESS_BUCKETS;
    r.staleness_hist = in.staleness_hist;
    r.fetches_bf16 = in.fetches_bf16;
    r.push_bytes = in.push_bytes;
    fl_procmem(&r.rss_bytes, &r.private_bytes);
    r.cpu_s = fl_proc_cpu_s();
    return sink_pb(reply, &r.base);
}

/* Takes a large-message slot for a request of len bytes, waiting up to
 * FL_PARAMSERVER_LARGE_WAIT_S; RESOURCE_EXHAUSTED naming the limit when none frees. */
static fl_status large_acquire(fl_paramserver_service_t *svc, const char *method, size_t len, sink *reply) {
    pthread_mutex_lock(&svc->large_mu);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)FL_PARAMSERVER_LARGE_WAIT_S;
    until.tv_nsec += (long)((FL_PARAMSERVER_LARGE_WAIT_S - (double)(time_t)FL_PARAMSERVER_LARGE_WAIT_S) * 1e9);
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    int timed_out = 0;
    while (svc->large_busy >= svc->large_slots && !timed_out)
        timed_out = pthread_cond_timedwait(&svc->large_cv, &svc->large_mu, &until) == ETIMEDOUT &&
                    svc->large_busy >= svc->large_slots;
    if (timed_out) {
        int busy = svc->large_busy;
        pthread_mutex_unlock(&svc->large_mu);
        return sink_error(reply, FL_RESOURCE_EXHAUSTED,
                          "%s: a request of %zu bytes needs one of the %d large-message slots "
                          "(paramserver.max_large_messages; requests of %u bytes or more), and %d are taken after "
                          "%g s of waiting: send it again later",
                          method, len, svc->large_slots, FL_PARAMSERVER_LARGE_MESSAGE, busy,
                          FL_PARAMSERVER_LARGE_WAIT_S);
    }
    svc->large_busy++;
    pthread_mutex_unlock(&svc->large_mu);
    return FL_OK;
}

/* Frees a slot; the last large request out gives the heap's free memory back. */
static void large_release(fl_paramserver_service_t *svc) {
    pthread_mutex_lock(&svc->large_mu);
    int last = --svc->large_busy == 0;
    pthread_cond_signal(&svc->large_cv);
    pthread_mutex_unlock(&svc->large_mu);
    if (last) malloc_trim(0);
}

/* The gRPC entry points: the handlers above, answering through gRPC; large requests
 * hold a slot while they are handled. */
#define FL__PS_RPC(name, method)                                                                     \
    static fl_status rpc_##name(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply) { \
        fl_paramserver_service_t *svc = user;                                                        \
        sink r = {reply, NULL};                                                                      \
        if (len < FL_PARAMSERVER_LARGE_MESSAGE) return on_##name(svc, req, len, &r);                 \
        FL_TRY(large_acquire(svc, method, len, &r));                                                 \
        fl_status st = on_##name(svc, req, len, &r);                                                 \
        large_release(svc);                                                                          \
        return st;                                                                                   \
    }
FL__PS_RPC(publish, "Publish")
FL__PS_RPC(fetch, "Fetch")
FL__PS_RPC(push_gradients, "PushGradients")
FL__PS_RPC(info, "Info")
#undef FL__PS_RPC

fl_status fl__paramserver_service_call(fl_paramserver_service_t *svc, const char *method, const uint8_t *req,
                                       size_t len, fl__paramserver_reply_t *out) {
    memset(out, 0, sizeof *out);
    fl_status (*fn)(fl_paramserver_service_t *, const uint8_t *, size_t, sink *) = NULL;
    switch (fl_method_find("fleet.ParamServer", method)) {
    case FL_METHOD_PARAM_PUBLISH: fn = on_publish; break;
    case FL_METHOD_PARAM_FETCH: fn = on_fetch; break;
    case FL_METHOD_PARAM_PUSH_GRADIENTS: fn = on_push_gradients; break;
    case FL_METHOD_PARAM_INFO: fn = on_info; break;
    default: break;
    }
    sink r = {NULL, out};
    if (!fn) return sink_error(&r, FL_UNIMPLEMENTED, "%s: no such method of fleet.ParamServer", method);
    static const uint8_t empty[1];
    fl_status st = fn(svc, req ? req : empty, len, &r);
    out->code = st;
    if (st != FL_OK) local_drop_payload(out); /* as gRPC drops the reply of a failed call */
    return st;
}

void fl__paramserver_reply_free(fl__paramserver_reply_t *r) {
    if (r) local_drop_payload(r);
}

fl_status fl__paramserver_large_slot_take(fl_paramserver_service_t *svc, fl_err_t *err) {
    fl__paramserver_reply_t local;
    memset(&local, 0, sizeof local);
    sink r = {NULL, &local};
    fl_status st = large_acquire(svc, "test", 0, &r);
    if (st != FL_OK) fl_err_set(err, st, "%s", local.msg);
    return st;
}

void fl__paramserver_large_slot_give(fl_paramserver_service_t *svc) {
    large_release(svc);
}

/* ----------------------------------------------------------- lifecycle ---- */

void fl_paramserver_service_opts_init(fl_paramserver_service_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->mode = FL_PARAMSERVER_APEX;
    o->shards = 1;
    o->optim = fl_optim_config_default(FL_OPTIM_ADAM);
    o->optim.lr = 0.003f;
    o->learners = 1;
    o->max_staleness = 0;
    o->stale_policy = FL_PARAMSERVER_STALE_DROP;
    o->staleness_lr = 0;
    o->wait_timeout_s = 30.0;
    o->max_version_step = FL_PARAM_DEFAULT_MAX_VERSION_STEP;
    o->max_large_messages = 2;
    o->threads = 0;
}

static fl_status service_new(const fl_paramserver_service_opts_t *opts, int shard, int with_rpc,
                             fl_paramserver_service_t **out, fl_err_t *err) {
    *out = NULL;
    fl_paramserver_service_opts_t defaults;
    if (!opts) {
        fl_paramserver_service_opts_init(&defaults);
        opts = &defaults;
    }
    int64_t shards = opts->shards;
    if (shard < 0 || shard >= shards)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "paramserver: shard %d is out of range [0, %" PRId64 ") (paramserver.shards = %" PRId64 ")",
                          shard, shards, shards);
    if (opts->max_large_messages < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "paramserver.max_large_messages = %d: expected >= 1",
                          opts->max_large_messages);
    fl_param_store_opts_t so;
    fl_param_store_opts_init(&so);
    so.shard_id = (uint32_t)shard;
    so.num_shards = (int)shards;
    so.gorila = opts->mode == FL_PARAMSERVER_GORILA;
    so.max_version_step = opts->max_version_step;
    if (so.gorila) {
        so.optim = opts->optim;
        so.learners = opts->learners;
        so.max_staleness = opts->max_staleness;
        so.stale_wait = opts->stale_policy == FL_PARAMSERVER_STALE_WAIT;
        so.staleness_lr = opts->staleness_lr != 0;
        so.wait_timeout_s = opts->wait_timeout_s;
    }
    fl_paramserver_service_t *svc = calloc(1, sizeof *svc);
    if (!svc) return fl_err_set(err, FL_NO_MEMORY, "paramserver: out of memory");
    svc->shard = shard;
    svc->gorila = so.gorila;
    pthread_mutex_init(&svc->large_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&svc->large_cv, &ca);
    pthread_condattr_destroy(&ca);
    svc->large_slots = opts->max_large_messages;
    /* Held push replies keep their slots: the slowest learner must still find one. */
    if (so.gorila && so.stale_wait && svc->large_slots < so.learners) svc->large_slots = so.learners;
    fl_status st = fl_param_store_create(&so, &svc->store, err);
    if (st != FL_OK) goto fail;
    if (!with_rpc) goto done;

    /* Fetch handlers spend their time copying the encoded vector: one thread per core
     * (within reason) lets concurrent fetchers proceed in parallel. Under the wait
     * policy up to learner.count - 1 handlers may be held at once (the slowest learner
     * is never held): two more keep fetches, publishes and Info flowing. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    fl_rpc_server_opts_t ro = {0};
    ro.threads = opts->threads > 0 ? opts->threads : cores < 2 ? 2 : cores > 8 ? 8 : (int)cores;
    if (so.gorila && so.stale_wait && ro.threads < so.learners + 2) ro.threads = so.learners + 2;
    ro.prepost = 64;
    st = fl_rpc_server_create(&ro, &svc->rpc, err);
    if (st != FL_OK) goto fail;
    if ((st = fl_rpc_server_add_unary(svc->rpc, fl_method_path(FL_METHOD_PARAM_PUBLISH), rpc_publish, svc)) != FL_OK ||
        (st = fl_rpc_server_add_unary(svc->rpc, fl_method_path(FL_METHOD_PARAM_FETCH), rpc_fetch, svc)) != FL_OK ||
        (st = fl_rpc_server_add_unary(svc->rpc, fl_method_path(FL_METHOD_PARAM_PUSH_GRADIENTS), rpc_push_gradients,
                                      svc)) != FL_OK ||
        (st = fl_rpc_server_add_unary(svc->rpc, fl_method_path(FL_METHOD_PARAM_INFO), rpc_info, svc)) != FL_OK ||
        /* With TLS, only a learner's token may change the parameters. */
        (st = fl_rpc_server_learner_only(svc->rpc, fl_method_path(FL_METHOD_PARAM_PUBLISH))) != FL_OK ||
        (st = fl_rpc_server_learner_only(svc->rpc, fl_method_path(FL_METHOD_PARAM_PUSH_GRADIENTS))) != FL_OK) {
        fl_err_set(err, st, "paramserver: cannot register the service's methods");
        goto fail;
    }
done:
    *out = svc;
    return FL_OK;
fail:
    fl_paramserver_service_destroy(svc);
    return st;
}

fl_status fl_paramserver_service_create(const fl_paramserver_service_opts_t *opts, int shard,
                                        fl_paramserver_service_t **out, fl_err_t *err) {
    return service_new(opts, shard, 1, out, err);
}

fl_status fl__paramserver_service_create_local(const fl_paramserver_service_opts_t *opts, int shard,
                                               fl_paramserver_service_t **out, fl_err_t *err) {
    return service_new(opts, shard, 0, out, err);
}

/* The address clients dial: listen_addr with the bound port in place of its port. */
static fl_status dial_address(const char *listen_addr, int port, char *out, size_t len, fl_err_t *err) {
    int n;
    const char *colon = strrchr(listen_addr, ':');
    if (strncmp(listen_addr, "unix:", 5) == 0 || port <= 0 || !colon)
        n = snprintf(out, len, "%s", listen_addr);
    else
        n = snprintf(out, len, "%.*s:%d", (int)(colon - listen_addr), listen_addr, port);
    if (n < 0 || (size_t)n >= len)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "paramserver: the bound address of '%s' does not fit in %zu bytes",
                          listen_addr, len);
    return FL_OK;
}

fl_status fl_paramserver_service_start(fl_paramserver_service_t *svc, const char *listen_addr, char *bound_addr_out,
                                       size_t len, fl_err_t *err) {
    if (svc->started) return fl_err_set(err, FL_FAILED_PRECONDITION, "paramserver: already started");
    if (!svc->rpc)
        return fl_err_set(err, FL_FAILED_PRECONDITION,
                          "paramserver: this service was created without gRPC (fl__paramserver_service_create_local)");
    if (!listen_addr || !*listen_addr) return fl_err_set(err, FL_INVALID_ARGUMENT, "paramserver: empty listen address");
    int port = 0;
    FL_TRY(fl_rpc_server_bind(svc->rpc, listen_addr, &port, err));
    FL_TRY(fl_rpc_server_start(svc->rpc, err));
    svc->started = 1;
    if (bound_addr_out && len) FL_TRY(dial_address(listen_addr, port, bound_addr_out, len, err));
    return FL_OK;
}

void fl_paramserver_service_stop(fl_paramserver_service_t *svc) {
    if (!svc) return;
    fl_param_store_stop(svc->store); /* held push replies go out before the server drains */
    if (svc->rpc && svc->started) fl_rpc_server_shutdown(svc->rpc);
}

void fl_paramserver_service_destroy(fl_paramserver_service_t *svc) {
    if (!svc) return;
    fl_param_store_stop(svc->store);
    fl_rpc_server_destroy(svc->rpc);
    fl_param_store_destroy(svc->store);
    pthread_cond_destroy(&svc->large_cv);
    pthread_mutex_destroy(&svc->large_mu);
    free(svc);
}

void fl_paramserver_service_info(fl_paramserver_service_t *svc, fl_param_store_info_t *out) {
    fl_param_store_info(svc->store, out);
}

fl_status fl_paramserver_service_checkpoint(fl_paramserver_service_t *svc, const char *path, int *saved,
                                            fl_err_t *err) {
    return fl_param_checkpoint_save(svc->store, path, saved, err);
}

fl_status fl_paramserver_service_restore(fl_paramserver_service_t *svc, const char *path, uint64_t *version,
                                         fl_err_t *err) {
    return fl_param_checkpoint_load(svc->store, path, version, err);
}
