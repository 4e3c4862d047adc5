/* libFuzzer target: the parameter server's request handling (paramserver/server.c and
 * the store behind it), driven by arbitrary bytes as one shard receives them.
 *
 * Each input makes a fresh shard service without gRPC (fl__paramserver_service_create_local,
 * paramserver/server.h) and runs a sequence of requests through the very handlers gRPC
 * calls (fl__paramserver_service_call), so every input is reproducible on its own.
 *
 * Input layout:
 *   byte 0, byte 1   the shard's options (see make_opts): learner.mode apex or
 *                    gorila; paramserver.shards P in 1..4 and the shard s < P; stale
 *                    policy drop or wait; max_staleness 0, 1, 2 or 5; staleness_lr;
 *                    optimizer sgd, adam or rmsprop; lr; learner.count 1..3. The wait
 *                    policy holds a push reply until slower learners catch up: with
 *                    learner.count = 1 nothing can wait, with more learners the target
 *                    sets paramserver.wait_timeout_s = 0 so that a held reply times out at
 *                    once instead of blocking the (only) thread.
 *   then operations, each [op][len][len bytes]:
 *     op % 8 = 0..3  raw bytes as a Publish / Fetch / PushGradients / Info request
 *              4     a Publish built from the bytes: version relative to the held one,
 *                    total, this shard's slice (or a slightly wrong one), float32 values
 *              5     a PushGradients with float32 grads built from the bytes: learner,
 *                    based_on_version relative to the held one, the held slice (or not)
 *              6     the same with 1-bit `quantized` gradients (sign bits, two scales)
 *              7     a Fetch: if_newer_than relative to the held one, dtype unset,
 *                    float32, bfloat16 or another
 *
 * Invariants (any failure aborts):
 *   - every request is answered OK with bytes that decode as the method's response, or
 *     with FL_INVALID_ARGUMENT / FL_FAILED_PRECONDITION and a non-empty message;
 *   - Publish OK answers the requested version, which is then held; Push OK answers
 *     applied with version = held + 1 and staleness = held - based_on_version, or (drop
 *     policy, staleness > max_staleness) not applied with the held version unchanged;
 *     an apex shard refuses every push;
 *   - the held version never decreases;
 *   - a Fetch answers the held version; with has_params exactly when it is newer than
 *     if_newer_than; its slice is this shard's (offset, n = fl_param_shard_range of the
 *     total), the tensor is (n,) of the requested dtype with 4n / 2n bytes, and every
 *     value is finite, float32 and bfloat16 alike; an apex float32 fetch returns the
 *     published bytes exactly;
 *   - Info: the held version, slice and mode; publishes, fetches, bf16 fetches, pushes
 *     applied / dropped, waits and push bytes equal the target's own counts, and
 *     pushes applied + dropped == the staleness histogram's total.
 * After the sequence a float32 and a bfloat16 fetch and an Info are checked once more.
 *
 * Build: cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DFLEET_FUZZ=ON
 *        cmake --build build-fuzz --target fuzz_paramserver
 * See docs/fuzzing.md. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet.pb-c.h"
#include "kernels/optim.h"
#include "paramserver/quantize.h"
#include "paramserver/server.h"
#include "paramserver/shard.h"

#define FAIL(...)                                          \
    do {                                                   \
        fprintf(stderr, "fuzz_paramserver: " __VA_ARGS__); \
        fputc('\n', stderr);                               \
        abort();                                           \
    } while (0)

enum { MAX_OPS = 64, MAX_ELEMS = 64 };

/* What the target knows of the shard, from the answers it got. */
typedef struct {
    fl_paramserver_service_t *svc;
    int gorila, P, s, learners, wait, staleness_lr;
    uint64_t max_staleness;
    double lr;
    /* held state */
    uint64_t version;
    int has_geom;
    uint64_t offset, total;
    size_t n;
    uint8_t *apex_values; /* apex: the bytes of the last accepted publish (4n) */
    /* counts */
    uint64_t publishes, fetches, fetches_bf16, applied, dropped, waits, wait_timeouts, push_bytes;
} shard_t;

/* ----------------------------------------------------------- options ---- */

static void make_opts(fl_paramserver_service_opts_t *o, uint8_t b0, uint8_t b1, shard_t *sh) {
    fl_paramserver_service_opts_init(o);
    sh->gorila = b0 & 1;
    sh->P = 1 + ((b0 >> 1) & 3);
    sh->s = b1 % sh->P;
    sh->wait = (b0 >> 3) & 1;
    static const int64_t stal[4] = {0, 1, 2, 5};
    sh->max_staleness = (uint64_t)stal[(b0 >> 4) & 3];
    sh->staleness_lr = (b0 >> 6) & 1;
    static const fl_optim_kind opt[3] = {FL_OPTIM_SGD, FL_OPTIM_ADAM, FL_OPTIM_RMSPROP};
    static const double lrs[4] = {6.25e-5, 0.01, 1.0, 10.0}; /* learner.lr is in [0, 10] */
    sh->learners = 1 + (b1 >> 6) % 3;
    o->mode = sh->gorila ? FL_PARAMSERVER_GORILA : FL_PARAMSERVER_APEX;
    o->shards = sh->P;
    o->stale_policy = sh->wait ? FL_PARAMSERVER_STALE_WAIT : FL_PARAMSERVER_STALE_DROP;
    o->max_staleness = sh->max_staleness;
    o->staleness_lr = sh->staleness_lr;
    /* A held reply must not block the fuzzer's thread: with one learner nothing waits;
     * with more, a wait times out at once. */
    o->wait_timeout_s = sh->learners > 1 ? 0.0 : 30.0;
    /* The optimizer's defaults (those of the learner.* keys) with the chosen lr. */
    o->optim = fl_optim_config_default(opt[((b1 >> 2) & 3) % 3]);
    sh->lr = lrs[(b1 >> 4) & 3];
    o->optim.lr = (float)sh->lr;
    o->learners = sh->learners;
}

/* ------------------------------------------------------------- calls ---- */

/* Calls method with req; checks the status invariant. Returns the reply (free it). */
/* FUZZ_PARAMSERVER_TRACE=1 in the environment: one line per request on stderr. */
static int tracing(void) {
    static int t = -1;
    if (t < 0) t = getenv("FUZZ_PARAMSERVER_TRACE") != NULL;
    return t;
}

static fl_status call(shard_t *sh, const char *method, const uint8_t *req, size_t len, fl__paramserver_reply_t *r) {
    fl_status st = fl__paramserver_service_call(sh->svc, method, req, len, r);
    if (tracing())
        fprintf(stderr, "  %-13s %4zu bytes -> %s%s%s\n", method, len, fl_status_name(st), st ? ": " : "",
                st ? r->msg : "");
    if (st != r->code) FAIL("%s: returned %d but the reply says %d", method, (int)st, (int)r->code);
    if (st == FL_OK) {
        if (!r->data && r->len) FAIL("%s: OK with %zu bytes but no data", method, r->len);
        return st;
    }
    if (st != FL_INVALID_ARGUMENT && st != FL_FAILED_PRECONDITION)
        FAIL("%s: answered status %s (%d): \"%s\"", method, fl_status_name(st), (int)st, r->msg);
    if (!r->msg[0]) FAIL("%s: answered %s without a message", method, fl_status_name(st));
    if (r->data) FAIL("%s: an error reply carries data", method);
    return st;
}

static uint64_t held_version(shard_t *sh) {
    fl_param_store_info_t in;
    fl_paramserver_service_info(sh->svc, &in);
    return in.version;
}

static void check_version(shard_t *sh, const char *after) {
    uint64_t v = held_version(sh);
    if (v < sh->version)
        FAIL("after %s the held version went from %llu down to %llu", after, (unsigned long long)sh->version,
             (unsigned long long)v);
    sh->version = v;
}

/* This shard's slice of a total-element vector. */
static void my_slice(const shard_t *sh, uint64_t total, uint64_t *off, uint64_t *n) {
    fl_param_shard_range(total, sh->P, sh->s, off, n);
}

/* ----------------------------------------------------------- publish ---- */

static void after_publish(shard_t *sh, const Fleet__PublishRequest *m, fl_status st, const fl__paramserver_reply_t *r) {
    if (st != FL_OK) {
        check_version(sh, "a refused publish");
        return;
    }
    Fleet__PublishResponse *pr = fleet__publish_response__unpack(NULL, r->len, r->data);
    if (!pr) FAIL("Publish: OK reply does not decode");
    if (!m || !m->params || !m->params->values) FAIL("Publish: OK for a request without params.values");
    const Fleet__ParamSlice *p = m->params;
    if (pr->version != p->version)
        FAIL("Publish: answered version %llu for %llu", (unsigned long long)pr->version,
             (unsigned long long)p->version);
    if (p->version <= sh->version)
        FAIL("Publish: accepted version %llu, not newer than %llu", (unsigned long long)p->version,
             (unsigned long long)sh->version);
    if (sh->gorila && sh->has_geom) FAIL("Publish: gorila accepted a second publish");
    size_t n = p->values->data.len / 4;
    uint64_t eo, en;
    my_slice(sh, p->total, &eo, &en);
    if (p->total == 0 || p->offset != eo || n != en)
        FAIL("Publish: accepted [%llu, +%zu) of %llu; the shard owns [%llu, +%llu)", (unsigned long long)p->offset, n,
             (unsigned long long)p->total, (unsigned long long)eo, (unsigned long long)en);
    if (sh->has_geom && (p->offset != sh->offset || p->total != sh->total || n != sh->n))
        FAIL("Publish: accepted a slice of another geometry");
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, p->values->data.data + 4 * i, 4);
        if (!isfinite(f)) FAIL("Publish: accepted a non-finite value at %zu", i);
    }
    sh->has_geom = 1;
    sh->offset = p->offset, sh->total = p->total, sh->n = n;
    if (!sh->gorila) {
        free(sh->apex_values);
        sh->apex_values = malloc(n ? 4 * n : 1);
        if (!sh->apex_values) FAIL("out of memory");
        if (n) memcpy(sh->apex_values, p->values->data.data, 4 * n);
    }
    sh->publishes++;
    fleet__publish_response__free_unpacked(pr, NULL);
    uint64_t v = held_version(sh);
    if (v != p->version)
        FAIL("Publish: holds %llu after publishing %llu", (unsigned long long)v, (unsigned long long)p->version);
    sh->version = v;
}

static void do_publish_raw(shard_t *sh, const uint8_t *req, size_t len) {
    fl__paramserver_reply_t r;
    fl_status st = call(sh, "Publish", req, len, &r);
    Fleet__PublishRequest *m = fleet__publish_request__unpack(NULL, len, req);
    if (st == FL_OK && !m) FAIL("Publish: OK for bytes that do not decode");
    after_publish(sh, m, st, &r);
    if (m) fleet__publish_request__free_unpacked(m, NULL);
    fl__paramserver_reply_free(&r);
}

static void send_pb(shard_t *sh, const char *method, const ProtobufCMessage *m, uint8_t **buf, size_t *len) {
    *len = protobuf_c_message_get_packed_size(m);
    *buf = malloc(*len ? *len : 1);
    if (!*buf) FAIL("out of memory");
    protobuf_c_message_pack(m, *buf);
    (void)sh, (void)method;
}

/* A value from 4 bytes: mostly small finite floats; b[0] & 0xf0 == 0xf0: the raw bits
 * (any float, NaN and infinities included). */
static float value_of(const uint8_t *b) {
    if ((b[0] & 0xf0) == 0xf0) {
        float f;
        memcpy(&f, b, 4);
        return f;
    }
    int16_t q;
    memcpy(&q, b + 1, 2);
    static const float scale[4] = {1.0f / 1024, 1.0f / 16, 1.0f, 1e6f};
    return (float)q * scale[b[3] & 3];
}

static void do_publish_built(shard_t *sh, const uint8_t *d, size_t len) {
    uint8_t h[4] = {0};
    memcpy(h, d, len < 4 ? len : 4);
    const uint8_t *vals = len > 4 ? d + 4 : NULL;
    size_t nv = len > 4 ? (len - 4) / 4 : 0;
    uint64_t version = h[0] & 0x80 ? (uint64_t)(h[0] & 0x7f) : sh->version + (h[0] & 3); /* +0: not newer */
    uint64_t total = sh->has_geom && !(h[1] & 0x80) ? sh->total : (uint64_t)(h[1] & 0x7f) % (MAX_ELEMS + 1);
    uint64_t off, n;
    my_slice(sh, total, &off, &n);
    switch (h[2] & 7) { /* mostly right; sometimes off by one */
    case 5: off++; break;
    case 6: n++; break;
    case 7:
        if (n) n--;
        break;
    default: break;
    }
    float *v = malloc(n ? 4 * n : 4);
    if (!v) FAIL("out of memory");
    for (size_t i = 0; i < n; i++) v[i] = nv ? value_of(vals + 4 * (i % nv)) : (float)i * 0.25f - 1.0f;
    int64_t shape = (int64_t)n;
    Fleet__Tensor t = FLEET__TENSOR__INIT;
    t.dtype = h[3] == 0xff ? FLEET__DTYPE__DTYPE_BFLOAT16 : FLEET__DTYPE__DTYPE_FLOAT32;
    t.n_shape = 1;
    t.shape = &shape;
    t.data.len = 4 * n;
    t.data.data = (uint8_t *)v;
    Fleet__ParamSlice ps = FLEET__PARAM_SLICE__INIT;
    ps.version = version;
    ps.offset = off;
    ps.total = total;
    ps.values = &t;
    Fleet__PublishRequest req = FLEET__PUBLISH_REQUEST__INIT;
    req.params = &ps;
    uint8_t *buf;
    size_t blen;
    send_pb(sh, "Publish", &req.base, &buf, &blen);
    do_publish_raw(sh, buf, blen);
    free(buf);
    free(v);
}

/* -------------------------------------------------------------- push ---- */

static void do_push_raw(shard_t *sh, const uint8_t *req, size_t len) {
    uint64_t before = sh->version;
    fl__paramserver_reply_t r;
    fl_status st = call(sh, "PushGradients", req, len, &r);
    Fleet__PushGradientsRequest *m = fleet__push_gradients_request__unpack(NULL, len, req);
    if (m) sh->push_bytes += len; /* the service counts every request that decodes */
    if (st == FL_OK) {
        if (!m) FAIL("PushGradients: OK for bytes that do not decode");
        if (!sh->gorila) FAIL("PushGradients: an apex shard accepted a push");
        Fleet__PushGradientsResponse *pr = fleet__push_gradients_response__unpack(NULL, r.len, r.data);
        if (!pr) FAIL("PushGradients: OK reply does not decode");
        if (m->based_on_version > before) FAIL("PushGradients: accepted a push based on a future version");
        uint64_t stal = before - m->based_on_version;
        if (pr->staleness != stal)
            FAIL("PushGradients: staleness %llu, expected %llu", (unsigned long long)pr->staleness,
                 (unsigned long long)stal);
        if (m->learner >= (uint32_t)sh->learners) FAIL("PushGradients: accepted learner %u", m->learner);
        if (pr->applied) {
            if (!sh->wait && sh->max_staleness && stal > sh->max_staleness)
                FAIL("PushGradients: applied a push of staleness %llu > %llu", (unsigned long long)stal,
                     (unsigned long long)sh->max_staleness);
            if (pr->version != before + 1)
                FAIL("PushGradients: applied, version %llu after %llu", (unsigned long long)pr->version,
                     (unsigned long long)before);
            sh->applied++;
            if (pr->waited) sh->waits++;
            if (pr->wait_timed_out) sh->wait_timeouts++;
            if (pr->wait_timed_out && !pr->waited) FAIL("PushGradients: timed out without waiting");
            if (pr->waited && (!sh->wait || sh->learners < 2)) FAIL("PushGradients: waited under drop / one learner");
        } else {
            if (sh->wait || !sh->max_staleness || stal <= sh->max_staleness)
                FAIL("PushGradients: dropped a push of staleness %llu (max %llu, %s)", (unsigned long long)stal,
                     (unsigned long long)sh->max_staleness, sh->wait ? "wait" : "drop");
            if (pr->version != before) FAIL("PushGradients: dropped, but the version moved");
            sh->dropped++;
        }
        /* the slice is the held one */
        uint64_t off = m->grads ? m->grads->offset : m->quantized->offset;
        uint64_t tot = m->grads ? m->grads->total : m->quantized->total;
        if (!sh->has_geom || off != sh->offset || tot != sh->total) FAIL("PushGradients: accepted another slice");
        fleet__push_gradients_response__free_unpacked(pr, NULL);
    }
    if (m) fleet__push_gradients_request__free_unpacked(m, NULL);
    fl__paramserver_reply_free(&r);
    check_version(sh, "a push");
    if (st != FL_OK && sh->version != before) FAIL("PushGradients: a refused push changed the version");
}

static void push_header(shard_t *sh, const uint8_t *h, Fleet__PushGradientsRequest *req, uint64_t *off, uint64_t *total,
                        size_t *n) {
    req->learner = (uint32_t)(h[0] % (sh->learners + 1)); /* sometimes out of range */
    uint64_t back = h[1] & 0x3f;
    req->based_on_version = h[1] & 0x40 ? sh->version + 1 : back > sh->version ? 0 : sh->version - back;
    *off = sh->offset, *total = sh->total, *n = sh->n;
    if (!sh->has_geom) {
        *total = (uint64_t)(h[2] % (MAX_ELEMS + 1));
        uint64_t nn;
        my_slice(sh, *total, off, &nn);
        *n = (size_t)nn;
    }
    switch (h[2] >> 5) {
    case 5: (*off)++; break;
    case 6: (*n)++; break;
    case 7: (*total)++; break;
    default: break;
    }
}

static void do_push_built(shard_t *sh, const uint8_t *d, size_t len) {
    uint8_t h[3] = {0};
    memcpy(h, d, len < 3 ? len : 3);
    const uint8_t *vals = len > 3 ? d + 3 : NULL;
    size_t nv = len > 3 ? (len - 3) / 4 : 0;
    Fleet__PushGradientsRequest req = FLEET__PUSH_GRADIENTS_REQUEST__INIT;
    uint64_t off, total;
    size_t n;
    push_header(sh, h, &req, &off, &total, &n);
    float *g = malloc(n ? 4 * n : 4);
    if (!g) FAIL("out of memory");
    for (size_t i = 0; i < n; i++) g[i] = nv ? value_of(vals + 4 * (i % nv)) : 0.5f - (float)(i & 1);
    int64_t shape = (int64_t)n;
    Fleet__Tensor t = FLEET__TENSOR__INIT;
    t.dtype = FLEET__DTYPE__DTYPE_FLOAT32;
    t.n_shape = 1;
    t.shape = &shape;
    t.data.len = 4 * n;
    t.data.data = (uint8_t *)g;
    Fleet__ParamSlice ps = FLEET__PARAM_SLICE__INIT;
    ps.offset = off;
    ps.total = total;
    ps.values = &t;
    req.grads = &ps;
    uint8_t *buf;
    size_t blen;
    send_pb(sh, "PushGradients", &req.base, &buf, &blen);
    do_push_raw(sh, buf, blen);
    free(buf);
    free(g);
}

static void do_push_quantized(shard_t *sh, const uint8_t *d, size_t len) {
    uint8_t h[11] = {0};
    memcpy(h, d, len < 11 ? len : 11);
    const uint8_t *bits = len > 11 ? d + 11 : NULL;
    size_t nb = len > 11 ? len - 11 : 0;
    Fleet__PushGradientsRequest req = FLEET__PUSH_GRADIENTS_REQUEST__INIT;
    uint64_t off, total;
    size_t n;
    push_header(sh, h, &req, &off, &total, &n);
    Fleet__QuantizedGradients q = FLEET__QUANTIZED_GRADIENTS__INIT;
    q.offset = off;
    q.total = total;
    q.count = n;
    size_t sb = fl_q1_bytes(n) + (h[3] == 0xff); /* sometimes one byte too many */
    uint8_t *sign = calloc(sb ? sb : 1, 1);
    if (!sign) FAIL("out of memory");
    for (size_t i = 0; i < sb && nb; i++) sign[i] = bits[i % nb];
    q.sign_bits.len = sb;
    q.sign_bits.data = sign;
    q.scale_pos = value_of(h + 3);
    q.scale_neg = value_of(h + 7);
    req.quantized = &q;
    if (h[3] == 0xfe) { /* both forms: refused */
        static Fleet__ParamSlice ps = FLEET__PARAM_SLICE__INIT;
        req.grads = &ps;
    }
    uint8_t *buf;
    size_t blen;
    send_pb(sh, "PushGradients", &req.base, &buf, &blen);
    do_push_raw(sh, buf, blen);
    free(buf);
    free(sign);
}

/* ------------------------------------------------------------- fetch ---- */

static void do_fetch_raw(shard_t *sh, const uint8_t *req, size_t len) {
    fl__paramserver_reply_t r;
    fl_status st = call(sh, "Fetch", req, len, &r);
    Fleet__FetchRequest *m = fleet__fetch_request__unpack(NULL, len, req);
    if (st != FL_OK) {
        if (m) {
            int dt = (int)m->dtype;
            if (dt == FLEET__DTYPE__DTYPE_FLOAT32 || dt == FLEET__DTYPE__DTYPE_INVALID ||
                dt == FLEET__DTYPE__DTYPE_BFLOAT16)
                FAIL("Fetch: refused a request with an accepted dtype: %s", r.msg);
            fleet__fetch_request__free_unpacked(m, NULL);
        }
        fl__paramserver_reply_free(&r);
        check_version(sh, "a refused fetch");
        return;
    }
    if (!m) FAIL("Fetch: OK for bytes that do not decode");
    sh->fetches++;
    int bf16 = m->dtype == FLEET__DTYPE__DTYPE_BFLOAT16;
    Fleet__FetchResponse *fr = fleet__fetch_response__unpack(NULL, r.len, r.data);
    if (!fr) FAIL("Fetch: OK reply does not decode");
    check_version(sh, "a fetch");
    if (fr->version != sh->version)
        FAIL("Fetch: answered version %llu, the shard holds %llu", (unsigned long long)fr->version,
             (unsigned long long)sh->version);
    int want = sh->version > m->if_newer_than;
    if (!!fr->has_params != want || !!fr->params != want)
        FAIL("Fetch: has_params %d (params %s) for if_newer_than %llu, held %llu", (int)fr->has_params,
             fr->params ? "set" : "unset", (unsigned long long)m->if_newer_than, (unsigned long long)sh->version);
    if (want) {
        const Fleet__ParamSlice *p = fr->params;
        if (bf16) sh->fetches_bf16++;
        if (p->version != sh->version || p->offset != sh->offset || p->total != sh->total)
            FAIL("Fetch: slice v%llu [%llu of %llu], expected v%llu [%llu of %llu]", (unsigned long long)p->version,
                 (unsigned long long)p->offset, (unsigned long long)p->total, (unsigned long long)sh->version,
                 (unsigned long long)sh->offset, (unsigned long long)sh->total);
        uint64_t eo, en;
        my_slice(sh, p->total, &eo, &en);
        if (eo != p->offset || en != sh->n) FAIL("Fetch: the slice is not this shard's");
        const Fleet__Tensor *t = p->values;
        size_t es = bf16 ? 2 : 4;
        if (!t || t->dtype != (bf16 ? FLEET__DTYPE__DTYPE_BFLOAT16 : FLEET__DTYPE__DTYPE_FLOAT32) || t->n_shape != 1 ||
            t->shape[0] != (int64_t)sh->n || t->data.len != es * sh->n)
            FAIL("Fetch: values are not a (%zu,) %s tensor", sh->n, bf16 ? "bfloat16" : "float32");
        for (size_t i = 0; i < sh->n; i++) {
            float f;
            if (bf16) {
                fl_bf16_decode(t->data.data + 2 * i, 1, &f);
                if (!isfinite(f))
                    FAIL("Fetch: bfloat16 value %zu of %zu is %g (version %llu)", i, sh->n, (double)f,
                         (unsigned long long)sh->version);
            } else {
                memcpy(&f, t->data.data + 4 * i, 4);
                if (!isfinite(f))
                    FAIL("Fetch: float32 value %zu of %zu is %g (version %llu)", i, sh->n, (double)f,
                         (unsigned long long)sh->version);
            }
        }
        if (!bf16 && !sh->gorila && sh->n && memcmp(t->data.data, sh->apex_values, 4 * sh->n) != 0)
            FAIL("Fetch: apex values differ from the published ones");
    }
    fleet__fetch_response__free_unpacked(fr, NULL);
    fleet__fetch_request__free_unpacked(m, NULL);
    fl__paramserver_reply_free(&r);
}

static void do_fetch_built(shard_t *sh, const uint8_t *d, size_t len) {
    uint8_t h[2] = {0};
    memcpy(h, d, len < 2 ? len : 2);
    Fleet__FetchRequest req = FLEET__FETCH_REQUEST__INIT;
    uint64_t back = h[0] & 3;
    req.if_newer_than = h[0] & 4 ? sh->version + back : back > sh->version ? 0 : sh->version - back;
    static const Fleet__DType dts[4] = {FLEET__DTYPE__DTYPE_INVALID, FLEET__DTYPE__DTYPE_FLOAT32,
                                        FLEET__DTYPE__DTYPE_BFLOAT16, FLEET__DTYPE__DTYPE_UINT8};
    req.dtype = (h[1] & 0x80) ? (Fleet__DType)(h[1] & 0x7f) : dts[h[1] & 3];
    uint8_t *buf;
    size_t blen;
    send_pb(sh, "Fetch", &req.base, &buf, &blen);
    do_fetch_raw(sh, buf, blen);
    free(buf);
}

/* -------------------------------------------------------------- info ---- */

static void do_info_raw(shard_t *sh, const uint8_t *req, size_t len) {
    fl__paramserver_reply_t r;
    fl_status st = call(sh, "Info", req, len, &r);
    if (st != FL_OK) {
        fl__paramserver_reply_free(&r);
        return;
    }
    Fleet__ParamInfo *in = fleet__param_info__unpack(NULL, r.len, r.data);
    if (!in) FAIL("Info: OK reply does not decode");
    check_version(sh, "Info");
    if (in->version != sh->version)
        FAIL("Info: version %llu, held %llu", (unsigned long long)in->version, (unsigned long long)sh->version);
    if (in->shard_id != (uint32_t)sh->s || in->num_shards != (uint32_t)sh->P)
        FAIL("Info: shard %u of %u", in->shard_id, in->num_shards);
    if (strcmp(in->mode, sh->gorila ? "gorila" : "apex") != 0) FAIL("Info: mode %s", in->mode);
    if (sh->has_geom && (in->offset != sh->offset || in->size != sh->n || in->total != sh->total))
        FAIL("Info: slice [%llu, +%llu) of %llu, expected [%llu, +%zu) of %llu", (unsigned long long)in->offset,
             (unsigned long long)in->size, (unsigned long long)in->total, (unsigned long long)sh->offset, sh->n,
             (unsigned long long)sh->total);
    if (in->n_staleness_hist != 8) FAIL("Info: %zu staleness buckets", in->n_staleness_hist);
    uint64_t hist = 0;
    for (size_t i = 0; i < in->n_staleness_hist; i++) hist += in->staleness_hist[i];
    if (in->pushes_applied + in->pushes_dropped != hist)
        FAIL("Info: pushes applied %llu + dropped %llu != staleness histogram total %llu",
             (unsigned long long)in->pushes_applied, (unsigned long long)in->pushes_dropped, (unsigned long long)hist);
    if (in->publishes != sh->publishes || in->fetches != sh->fetches || in->fetches_bf16 != sh->fetches_bf16 ||
        in->pushes_applied != sh->applied || in->pushes_dropped != sh->dropped || in->waits != sh->waits ||
        in->wait_timeouts != sh->wait_timeouts || in->push_bytes != sh->push_bytes)
        FAIL(
            "Info: counters publishes %llu/%llu fetches %llu/%llu bf16 %llu/%llu applied %llu/%llu dropped "
            "%llu/%llu waits %llu/%llu timeouts %llu/%llu push_bytes %llu/%llu (reported/expected)",
            (unsigned long long)in->publishes, (unsigned long long)sh->publishes, (unsigned long long)in->fetches,
            (unsigned long long)sh->fetches, (unsigned long long)in->fetches_bf16, (unsigned long long)sh->fetches_bf16,
            (unsigned long long)in->pushes_applied, (unsigned long long)sh->applied,
            (unsigned long long)in->pushes_dropped, (unsigned long long)sh->dropped, (unsigned long long)in->waits,
            (unsigned long long)sh->waits, (unsigned long long)in->wait_timeouts, (unsigned long long)sh->wait_timeouts,
            (unsigned long long)in->push_bytes, (unsigned long long)sh->push_bytes);
    if (in->fetches_with_params > in->fetches || in->fetches_bf16 > in->fetches_with_params ||
        in->wait_timeouts > in->waits || in->waits > in->pushes_applied)
        FAIL("Info: inconsistent counters");
    fleet__param_info__free_unpacked(in, NULL);
    fl__paramserver_reply_free(&r);
}

/* -------------------------------------------------------------- main ---- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    shard_t sh;
    memset(&sh, 0, sizeof sh);
    fl_paramserver_service_opts_t opts;
    make_opts(&opts, data[0], data[1], &sh);
    fl_err_t err;
    fl_err_init(&err);
    if (fl__paramserver_service_create_local(&opts, sh.s, &sh.svc, &err) != FL_OK)
        FAIL("cannot create shard %d of %d: %s", sh.s, sh.P, err.msg);
    if (tracing())
        fprintf(stderr, "shard %d of %d, %s, %s, max_staleness %llu, %s lr %g, %d learner(s)\n", sh.s, sh.P,
                sh.gorila ? "gorila" : "apex", sh.wait ? "wait" : "drop", (unsigned long long)sh.max_staleness,
                fl_optim_kind_name(opts.optim.kind), sh.lr, sh.learners);
    size_t pos = 2;
    for (int ops = 0; ops < MAX_OPS && pos < size; ops++) {
        uint8_t op = data[pos++];
        size_t len = 0;
        if (pos < size) len = data[pos++];
        if (pos < size && (op & 0x80)) len |= (size_t)data[pos++] << 8; /* long payloads: 16-bit length */
        if (len > size - pos) len = size - pos;
        const uint8_t *p = data + pos;
        pos += len;
        switch (op & 7) {
        case 0: do_publish_raw(&sh, p, len); break;
        case 1: do_fetch_raw(&sh, p, len); break;
        case 2: do_push_raw(&sh, p, len); break;
        case 3: do_info_raw(&sh, p, len); break;
        case 4: do_publish_built(&sh, p, len); break;
        case 5: do_push_built(&sh, p, len); break;
        case 6: do_push_quantized(&sh, p, len); break;
        default: do_fetch_built(&sh, p, len); break;
        }
    }
    /* Whatever happened, the shard still answers a full fetch of both dtypes and Info. */
    static const uint8_t fetch_f32[] = {0x10, 0x01};  /* dtype = float32 (if_newer_than 0) */
    static const uint8_t fetch_bf16[] = {0x10, 0x05}; /* dtype = bfloat16 */
    do_fetch_raw(&sh, fetch_f32, sizeof fetch_f32);
    do_fetch_raw(&sh, fetch_bf16, sizeof fetch_bf16);
    do_info_raw(&sh, NULL, 0);
    if (tracing())
        fprintf(stderr,
                "version %llu, publishes %llu, fetches %llu (bf16 %llu), pushes applied %llu dropped %llu, "
                "waits %llu (timed out %llu)\n",
                (unsigned long long)sh.version, (unsigned long long)sh.publishes, (unsigned long long)sh.fetches,
                (unsigned long long)sh.fetches_bf16, (unsigned long long)sh.applied, (unsigned long long)sh.dropped,
                (unsigned long long)sh.waits, (unsigned long long)sh.wait_timeouts);
    fl_paramserver_service_destroy(sh.svc);
    free(sh.apex_values);
    return 0;
}
