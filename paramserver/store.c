/* store: versioned parameter snapshots with pre-encoded fetch responses (see store.h).
 *
 * A snapshot is one allocation: the header below and the packed float32 FetchResponse.
 * Its values are the tail of that response, because protobuf-c writes fields in
 * field-number order and the tensor data is the last field of the last nested message.
 * The bfloat16 response is a second allocation hung on the snapshot by the first
 * bfloat16 fetch.
 *
 * Locks: `live_mu` guards the gorila state (live parameters, optimizer, learner clocks)
 * and serializes whatever changes the version; `mu` guards the snapshot pointer. Order:
 * live_mu, then mu. The held version is mirrored in an atomic so that up-to-date
 * fetches take no lock. In apex mode a publish sets the snapshot and the version
 * together, so the snapshot is always current; in gorila mode a push only bumps the
 * version and the next fetch that wants it builds the snapshot from the live parameters
 * (under live_mu, so no push changes them meanwhile). */
#include "paramserver/store.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "fleet.pb-c.h"
#include "paramserver/quantize.h"
#include "paramserver/shard.h"

typedef struct snap {
    fl_param_snapshot_t pub; /* first: a fl_param_snapshot_t* is a snap* */
    atomic_long refs;
    pthread_mutex_t bf_mu;
    uint8_t *_Atomic bf_resp; /* NULL until the first bfloat16 fetch */
    size_t bf_len;
} snap;

struct fl_param_store {
    fl_param_store_opts_t o;
    double t0;
    pthread_mutex_t mu, live_mu;
    pthread_cond_t clock_cv;  /* with live_mu: a learner clock advanced, or stop */
    snap *cur;                /* guarded by mu; NULL until the first publish */
    _Atomic uint64_t version; /* changed with mu held (and live_mu in gorila mode) */
    /* gorila, guarded by live_mu */
    float *live; /* (n) the parameters; NULL until the first publish */
    size_t n;
    uint64_t offset, total;
    fl_optim_t *opt;
    uint64_t *clocks; /* (learners) applied pushes per learner */
    float *scratch;   /* (n) aligned copy of unaligned gradients */
    float *backup;    /* (n + optimizer state) the values before a step, restored when the step
                         made one of them non-finite; NULL for an empty slice */
    int stopping;
    int restored; /* from a checkpoint: a push from a lost version is taken (store.h) */
    atomic_uint_fast64_t publishes, fetches, fetches_with_params, fetches_bf16, push_bytes;
    atomic_uint_fast64_t pushes_applied, pushes_dropped, waits, wait_timeouts;
    atomic_uint_fast64_t hist[FL_PARAM_STALENESS_BUCKETS];
};

static void snap_unref(snap *p) {
    if (p && atomic_fetch_sub(&p->refs, 1) == 1) {
        free(atomic_load(&p->bf_resp));
        pthread_mutex_destroy(&p->bf_mu);
        free(p);
    }
}

void fl_param_snapshot_release(const fl_param_snapshot_t *s) {
    snap_unref((snap *)(uintptr_t)s);
}

void fl_param_store_opts_init(fl_param_store_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->num_shards = 1;
    o->optim = fl_optim_config_default(FL_OPTIM_RMSPROP);
    o->learners = 1;
    o->wait_timeout_s = 30;
    o->max_version_step = FL_PARAM_DEFAULT_MAX_VERSION_STEP;
}

fl_status fl_param_store_create(const fl_param_store_opts_t *o, fl_param_store_t **out, fl_err_t *err) {
    *out = NULL;
    if (o->num_shards < 1 || o->shard_id >= (uint32_t)o->num_shards)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "paramserver store: shard %" PRIu32 " of %d is out of range",
                          o->shard_id, o->num_shards);
    if (o->gorila && (o->learners < 1 || !(o->wait_timeout_s >= 0)))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "paramserver store: learners = %d, wait_timeout_s = %g (expected >= 1 and >= 0)", o->learners,
                          o->wait_timeout_s);
    if (o->gorila) { /* a bad optimizer config fails here, not at the first publish */
        fl_optim_t *probe = NULL;
        FL_TRY(fl_optim_create(&o->optim, 1, &probe, err));
        fl_optim_destroy(probe);
    }
    fl_param_store_t *s = calloc(1, sizeof *s);
    if (!s) return fl_err_set(err, FL_NO_MEMORY, "paramserver store: out of memory");
    s->o = *o;
    if (o->gorila && !(s->clocks = calloc((size_t)o->learners, sizeof *s->clocks))) {
        free(s);
        return fl_err_set(err, FL_NO_MEMORY, "paramserver store: out of memory");
    }
    s->t0 = fl_clock_sec();
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->live_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->clock_cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&s->version, 0);
    atomic_init(&s->publishes, 0);
    atomic_init(&s->fetches, 0);
    atomic_init(&s->fetches_with_params, 0);
    atomic_init(&s->fetches_bf16, 0);
    atomic_init(&s->push_bytes, 0);
    atomic_init(&s->pushes_applied, 0);
    atomic_init(&s->pushes_dropped, 0);
    atomic_init(&s->waits, 0);
    atomic_init(&s->wait_timeouts, 0);
    for (int i = 0; i < FL_PARAM_STALENESS_BUCKETS; i++) atomic_init(&s->hist[i], 0);
    *out = s;
    return FL_OK;
}

void fl_param_store_stop(fl_param_store_t *s) {
    if (!s) return;
    pthread_mutex_lock(&s->live_mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->clock_cv);
    pthread_mutex_unlock(&s->live_mu);
}

void fl_param_store_destroy(fl_param_store_t *s) {
    if (!s) return;
    snap_unref(s->cur);
    fl_optim_destroy(s->opt);
    free(s->live);
    free(s->scratch);
    free(s->backup);
    free(s->clocks);
    pthread_cond_destroy(&s->clock_cv);
    pthread_mutex_destroy(&s->live_mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Checks that [offset, offset + n) of total is this shard's slice. */
static fl_status check_slice(const fl_param_store_t *s, const char *field, uint64_t offset, uint64_t total, size_t n,
                             fl_err_t *err) {
    if (total == 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "%s.values: empty (expected a vector of at least one element)",
                          field);
    uint64_t eo, en; /* a shard owns nothing when total < num_shards: then n == 0 is right */
    fl_param_shard_range(total, s->o.num_shards, (int)s->o.shard_id, &eo, &en);
    if (offset == eo && (uint64_t)n == en) return FL_OK;
    if (s->o.num_shards == 1) {
        if (offset != 0)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "%s.offset: %" PRIu64 ", but this shard holds the whole vector, so it must be 0", field,
                              offset);
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "%s.total: %" PRIu64 ", expected offset + n = %zu (this shard holds the whole vector)", field,
                          total, n);
    }
    return fl_err_set(err, FL_INVALID_ARGUMENT,
                      "%s: got the slice [%" PRIu64 ", %" PRIu64 ") of a %" PRIu64 "-element vector, but shard %" PRIu32
                      " of %d owns [%" PRIu64 ", %" PRIu64 ") of it",
                      field, offset, offset + (uint64_t)n, total, s->o.shard_id, s->o.num_shards, eo, eo + en);
}

/* Checks a slice against the held geometry (fixed by the first publish); mu held. */
static fl_status check_geometry(const fl_param_store_t *s, const char *field, uint64_t offset, uint64_t total, size_t n,
                                fl_err_t *err) {
    const snap *c = s->cur;
    if (!c) return FL_OK;
    if (n != c->pub.n)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "%s.values: %zu elements, but the held slice has %zu (the first publish fixes the length)",
                          field, n, c->pub.n);
    if (offset != c->pub.offset)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "%s.offset: %" PRIu64 ", but the held slice starts at %" PRIu64,
                          field, offset, c->pub.offset);
    if (total != c->pub.total)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "%s.total: %" PRIu64 ", but the held vector has %" PRIu64 " elements in total", field, total,
                          c->pub.total);
    return FL_OK;
}

/* Checks a publish against the held snapshot; mu must be held. */
static fl_status check_held(const fl_param_store_t *s, uint64_t version, uint64_t offset, uint64_t total, size_t n,
                            fl_err_t *err) {
    FL_TRY(check_geometry(s, "params", offset, total, n, err));
    const snap *c = s->cur;
    if (c && s->o.gorila)
        return fl_err_set(
            err, FL_FAILED_PRECONDITION,
            "params.version: %" PRIu64
            " refused: in gorila mode (learner.mode = gorila) the first "
            "publish sets the initial parameters and only PushGradients changes them (held version %" PRIu64 ")",
            version, atomic_load(&s->version));
    uint64_t held = c ? c->pub.version : 0, step = s->o.max_version_step;
    uint64_t hi = step == 0 || held > UINT64_MAX - step ? UINT64_MAX : held + step;
    if (c && version <= held && held == UINT64_MAX)
        return fl_err_set(err, FL_FAILED_PRECONDITION,
                          "params.version: %" PRIu64 " is not newer than the held version %" PRIu64
                          ", the largest there is (restart the parameter server)",
                          version, held);
    if (c && version <= held)
        return fl_err_set(err, FL_FAILED_PRECONDITION,
                          "params.version: %" PRIu64 " is not newer than the held version %" PRIu64
                          " (expected %" PRIu64 " .. %" PRIu64 ")",
                          version, held, held + 1, hi);
    if (version > hi)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "params.version: %" PRIu64 " is too far past the held version %" PRIu64 ": expected %" PRIu64
                          " .. %" PRIu64 " (paramserver.max_version_step = %" PRIu64 ")",
                          version, held, held + 1, hi, step);
    return FL_OK;
}

/* Index of the first non-finite float32 in values[0..n), or n. */
static size_t first_non_finite(const uint8_t *values, size_t n, uint32_t *bits) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, values + 4 * i, 4);
        if ((u & 0x7f800000u) == 0x7f800000u) {
            *bits = u;
            return i;
        }
    }
    return n;
}

static const char *non_finite_name(uint32_t bits) {
    return (bits & 0x007fffffu) ? "NaN" : (bits >> 31) ? "-inf" : "inf";
}

/* Packs a FetchResponse for version of values (data_len bytes of dtype, n elements)
 * into a fresh buffer of *len bytes placed `header` bytes into its allocation. */
static uint8_t *pack_response(size_t header, uint64_t version, uint64_t offset, uint64_t total, Fleet__DType dtype,
                              const void *data, size_t data_len, size_t n, size_t *len) {
    int64_t shape = (int64_t)n;
    Fleet__Tensor t = FLEET__TENSOR__INIT;
    t.dtype = dtype;
    t.n_shape = 1;
    t.shape = &shape;
    t.data.len = data_len;
    t.data.data = (uint8_t *)(uintptr_t)data;
    Fleet__ParamSlice ps = FLEET__PARAM_SLICE__INIT;
    ps.version = version;
    ps.offset = offset;
    ps.total = total;
    ps.values = &t;
    Fleet__FetchResponse r = FLEET__FETCH_RESPONSE__INIT;
    r.version = version;
    r.has_params = 1;
    r.params = &ps;
    *len = fleet__fetch_response__get_packed_size(&r);
    uint8_t *p = malloc(header + *len);
    if (!p) return NULL;
    size_t packed = fleet__fetch_response__pack(&r, p + header);
    assert(packed == *len);
    (void)packed;
    return p;
}

static snap *build_snapshot(uint64_t version, uint64_t offset, uint64_t total, const void *values, size_t n) {
    size_t len;
    snap *p = (snap *)pack_response(sizeof(snap), version, offset, total, FLEET__DTYPE__DTYPE_FLOAT32, values, 4 * n, n,
                                    &len);
    if (!p) return NULL;
    uint8_t *buf = (uint8_t *)(p + 1);
    p->pub.version = version;
    p->pub.offset = offset;
    p->pub.total = total;
    p->pub.n = n;
    p->pub.response = buf;
    p->pub.response_len = len;
    p->pub.values = buf + len - 4 * n;
    assert(n == 0 || memcmp(p->pub.values, values, 4 * n < 64 ? 4 * n : 64) == 0);
    atomic_init(&p->refs, 1);
    pthread_mutex_init(&p->bf_mu, NULL);
    atomic_init(&p->bf_resp, NULL);
    p->bf_len = 0;
    return p;
}

/* The held values are finite, but one beyond the largest bfloat16 (about 3.39e38) rounds
 * to infinity (quantize.h): send the largest finite bfloat16 of its sign instead, so that
 * a bfloat16 fetch is as finite as a float32 one. */
static void bf16_saturate(uint8_t *h, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((h[2 * i + 1] & 0x7f) == 0x7f && h[2 * i] == 0x80) h[2 * i] = 0x7f; /* +-inf -> +-0x7f7f */
}

fl_status fl_param_snapshot_bf16(const fl_param_snapshot_t *snapshot, const uint8_t **response, size_t *len) {
    snap *p = (snap *)(uintptr_t)snapshot;
    uint8_t *r = atomic_load(&p->bf_resp);
    if (!r) {
        pthread_mutex_lock(&p->bf_mu);
        r = atomic_load(&p->bf_resp);
        if (!r) {
            size_t n = p->pub.n;
            uint8_t *h = malloc(n ? 2 * n : 1);
            float *tmp = malloc(n ? 4 * n : 1); /* values may be unaligned */
            if (h && tmp) {
                if (n) memcpy(tmp, p->pub.values, 4 * n);
                fl_bf16_encode(tmp, n, h);
                bf16_saturate(h, n);
                r = pack_response(0, p->pub.version, p->pub.offset, p->pub.total, FLEET__DTYPE__DTYPE_BFLOAT16, h,
                                  2 * n, n, &p->bf_len);
            }
            free(h);
            free(tmp);
            if (r) atomic_store(&p->bf_resp, r);
        }
        pthread_mutex_unlock(&p->bf_mu);
        if (!r) return FL_NO_MEMORY;
    }
    *response = r;
    *len = p->bf_len; /* written before the atomic store that published r */
    return FL_OK;
}

fl_status fl_param_store_publish(fl_param_store_t *s, uint64_t version, uint64_t offset, uint64_t total,
                                 const void *values, size_t n, fl_err_t *err) {
    if (n && !values) return fl_err_set(err, FL_INVALID_ARGUMENT, "params.values: missing");
    if (version == 0)
        return fl_err_set(err, FL_FAILED_PRECONDITION,
                          "params.version: 0 is not newer than the held version %" PRIu64 " (0 means no parameters)",
                          fl_param_store_version(s));
    FL_TRY(check_slice(s, "params", offset, total, n, err));
    /* Cheap checks against the held version first, so that a stale publish costs nothing. */
    pthread_mutex_lock(&s->mu);
    fl_status st = check_held(s, version, offset, total, n, err);
    pthread_mutex_unlock(&s->mu);
    if (st != FL_OK) return st;

    uint32_t bits = 0;
    size_t bad = first_non_finite(values, n, &bits);
    if (bad < n)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "params.values[%zu]: %s (every value must be finite)", bad,
                          non_finite_name(bits));

    snap *p = build_snapshot(version, offset, total, values, n);
    if (!p) return fl_err_set(err, FL_NO_MEMORY, "paramserver store: out of memory for a %zu-element snapshot", n);
    float *live = NULL, *scratch = NULL, *backup = NULL;
    fl_optim_t *opt = NULL;
    if (s->o.gorila) {
        live = malloc(n ? 4 * n : 1);
        scratch = malloc(n ? 4 * n : 1);
        st = live && scratch ? FL_OK
                             : fl_err_set(err, FL_NO_MEMORY, "paramserver store: out of memory for %zu parameters", n);
        if (st == FL_OK && n) st = fl_optim_create(&s->o.optim, n, &opt, err);
        if (st == FL_OK && n && !(backup = malloc(4 * (n + fl_optim_state_size(opt)))))
            st = fl_err_set(err, FL_NO_MEMORY, "paramserver store: out of memory for %zu parameters", n);
        if (st != FL_OK) {
            free(live);
            free(scratch);
            fl_optim_destroy(opt);
            snap_unref(p);
            return st;
        }
        if (n) memcpy(live, values, 4 * n);
        pthread_mutex_lock(&s->live_mu);
    }
    snap *old = NULL;
    pthread_mutex_lock(&s->mu);
    st = check_held(s, version, offset, total, n, err); /* another publish may have won meanwhile */
    if (st == FL_OK) {
        old = s->cur;
        s->cur = p;
        atomic_store(&s->version, version);
        atomic_fetch_add(&s->publishes, 1);
    }
    pthread_mutex_unlock(&s->mu);
    if (s->o.gorila) {
        if (st == FL_OK) {
            s->live = live, s->scratch = scratch, s->backup = backup, s->opt = opt;
            s->n = n, s->offset = offset, s->total = total;
            live = scratch = backup = NULL, opt = NULL;
        }
        pthread_mutex_unlock(&s->live_mu);
        free(live);
        free(scratch);
        free(backup);
        fl_optim_destroy(opt);
    }
    snap_unref(st == FL_OK ? old : p);
    return st;
}

/* The smallest clock among learners that have pushed; live_mu held. */
static uint64_t min_active_clock(const fl_param_store_t *s) {
    uint64_t m = UINT64_MAX;
    for (int j = 0; j < s->o.learners; j++)
        if (s->clocks[j] >= 1 && s->clocks[j] < m) m = s->clocks[j];
    return m;
}

/* What a push can be refused for before any lock: the mode, the learner, the slice and
 * non-finite gradients. */
static fl_status check_push(const fl_param_store_t *s, uint32_t learner, uint64_t offset, uint64_t total,
                            const void *grads, size_t n, fl_err_t *err) {
    if (!s->o.gorila)
        return fl_err_set(err, FL_FAILED_PRECONDITION,
                          "PushGradients: this shard runs learner.mode = apex, where learners apply their own "
                          "optimizer and publish parameters; gradients are pushed only with learner.mode = gorila");
    if (learner >= (uint32_t)s->o.learners)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: %" PRIu32 " is out of range [0, %d) (learner.count = %d)",
                          learner, s->o.learners, s->o.learners);
    if (n && !grads) return fl_err_set(err, FL_INVALID_ARGUMENT, "grads.values: missing");
    FL_TRY(check_slice(s, "grads", offset, total, n, err));
    uint32_t bits = 0;
    size_t bad = first_non_finite(grads, n, &bits);
    if (bad < n)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "grads.values[%zu]: %s (every gradient must be finite; nothing was applied)", bad,
                          non_finite_name(bits));
    return FL_OK;
}

/* One optimizer step over the live slice (live_mu held). Finite gradients can still
 * overflow a step (g * g in Adam's and RMSProp's averages, a large lr or momentum): such
 * a step would leave non-finite parameters, or state that turns them NaN later, for good.
 * The values before the step are kept and put back when it made one non-finite, and the
 * push is refused. */
static fl_status apply_step(fl_param_store_t *s, const float *g, size_t n, uint64_t staleness, fl_err_t *err) {
    if (!s->opt) return FL_OK; /* NULL for an empty slice */
    float *state = fl_optim_state(s->opt);
    size_t ns = fl_optim_state_size(s->opt);
    int64_t steps = fl_optim_steps(s->opt);
    memcpy(s->backup, s->live, 4 * n);
    memcpy(s->backup + n, state, 4 * ns);
    float lr = fl_optim_config(s->opt)->lr;
    if (s->o.staleness_lr && staleness > 1) fl_optim_set_lr(s->opt, (float)((double)lr / (double)staleness));
    fl_optim_step(s->opt, s->live, g);
    fl_optim_set_lr(s->opt, lr);
    uint32_t nf_bits = 0;
    size_t nf = first_non_finite((const uint8_t *)s->live, n, &nf_bits);
    size_t nf_state = nf < n ? ns : first_non_finite((const uint8_t *)state, ns, &nf_bits);
    if (nf == n && nf_state == ns) return FL_OK;
    memcpy(s->live, s->backup, 4 * n);
    memcpy(state, s->backup + n, 4 * ns);
    fl_optim_set_steps(s->opt, steps);
    if (nf < n)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "grads: this push would turn parameter %zu of the slice into %s (the optimizer step "
                          "overflows float32: gradients too large?); nothing was applied",
                          nf, non_finite_name(nf_bits));
    return fl_err_set(err, FL_INVALID_ARGUMENT,
                      "grads: this push would turn the optimizer's %s of parameter %zu of the slice into %s "
                      "(the optimizer step overflows float32: gradients too large?); nothing was applied",
                      fl_optim_slot_name(s->opt, (int)(nf_state / n)), nf_state % n, non_finite_name(nf_bits));
}

/* Stale-synchronous wait (live_mu held): while this learner is more than max_staleness
 * pushes ahead of the slowest active one, its reply waits, up to wait_timeout_s. */
static void wait_for_slowest(fl_param_store_t *s, uint32_t learner, fl_param_push_outcome_t *out) {
    if (!s->o.stale_wait || s->o.max_staleness == 0 || s->clocks[learner] - min_active_clock(s) <= s->o.max_staleness ||
        s->stopping)
        return;
    out->waited = 1;
    atomic_fetch_add(&s->waits, 1);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    double secs = s->o.wait_timeout_s;
    time_t whole = (time_t)secs;
    until.tv_sec += whole;
    until.tv_nsec += (long)((secs - (double)whole) * 1e9);
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    while (s->clocks[learner] - min_active_clock(s) > s->o.max_staleness) {
        if (s->stopping || pthread_cond_timedwait(&s->clock_cv, &s->live_mu, &until) == ETIMEDOUT) {
            if (s->clocks[learner] - min_active_clock(s) <= s->o.max_staleness) break;
            out->wait_timed_out = 1;
            atomic_fetch_add(&s->wait_timeouts, 1);
            break;
        }
    }
}

fl_status fl_param_store_push(fl_param_store_t *s, uint32_t learner, uint64_t based_on_version, uint64_t offset,
                              uint64_t total, const void *grads, size_t n, fl_param_push_outcome_t *out,
                              fl_err_t *err) {
    memset(out, 0, sizeof *out);
    FL_TRY(check_push(s, learner, offset, total, grads, n, err));

    pthread_mutex_lock(&s->live_mu);
    fl_status st = FL_OK;
    uint64_t held = atomic_load(&s->version);
    if (!s->live) {
        st = fl_err_set(err, FL_FAILED_PRECONDITION,
                        "PushGradients: no parameters yet (learner 0 publishes the initial parameters first)");
        goto out;
    }
    pthread_mutex_lock(&s->mu);
    st = check_geometry(s, "grads", offset, total, n, err);
    pthread_mutex_unlock(&s->mu);
    if (st != FL_OK) goto out;
    if (based_on_version > held && s->restored &&
        (s->o.max_version_step == 0 || based_on_version - held <= s->o.max_version_step)) {
        /* a version this shard made before its restart and lost: go on from there */
        pthread_mutex_lock(&s->mu);
        atomic_store(&s->version, based_on_version);
        pthread_mutex_unlock(&s->mu);
        held = based_on_version;
    }
    if (based_on_version > held) {
        st = fl_err_set(err, FL_FAILED_PRECONDITION,
                        "based_on_version: %" PRIu64 " is newer than the held version %" PRIu64
                        " (was the parameter server restarted?)",
                        based_on_version, held);
        goto out;
    }
    uint64_t staleness = held - based_on_version;
    out->staleness = staleness;
    if (!s->o.stale_wait && s->o.max_staleness > 0 && staleness > s->o.max_staleness) {
        atomic_fetch_add(&s->hist[fl_param_staleness_bucket(staleness)], 1);
        atomic_fetch_add(&s->pushes_dropped, 1);
        out->version = held;
        goto out;
    }
    const float *g = grads;
    if ((uintptr_t)grads % _Alignof(float) != 0) {
        memcpy(s->scratch, grads, 4 * n);
        g = s->scratch;
    }
    if ((st = apply_step(s, g, n, staleness, err)) != FL_OK) goto out;
    atomic_fetch_add(&s->hist[fl_param_staleness_bucket(staleness)], 1);
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->version, held + 1);
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add(&s->pushes_applied, 1);
    out->applied = 1;
    s->clocks[learner]++;
    pthread_cond_broadcast(&s->clock_cv);
    wait_for_slowest(s, learner, out);
    out->version = atomic_load(&s->version);
out:
    pthread_mutex_unlock(&s->live_mu);
    return st;
}

const fl_param_snapshot_t *fl_param_store_fetch(fl_param_store_t *s, uint64_t if_newer_than, uint64_t *held_version) {
    atomic_fetch_add(&s->fetches, 1);
    uint64_t v = atomic_load(&s->version);
    snap *c = NULL;
    if (v > if_newer_than) {
        pthread_mutex_lock(&s->mu);
        v = atomic_load(&s->version);
        if (s->cur->pub.version == v) {
            c = s->cur;
            atomic_fetch_add(&c->refs, 1);
        }
        pthread_mutex_unlock(&s->mu);
        if (!c) {
            /* gorila: pushes made a newer version than the snapshot; encode it (once) */
            pthread_mutex_lock(&s->live_mu);
            v = atomic_load(&s->version); /* stable while live_mu is held */
            pthread_mutex_lock(&s->mu);
            if (s->cur->pub.version == v) {
                c = s->cur;
                atomic_fetch_add(&c->refs, 1);
            }
            pthread_mutex_unlock(&s->mu);
            if (!c) {
                snap *p = build_snapshot(v, s->offset, s->total, s->live, s->n);
                if (p) {
                    atomic_fetch_add(&p->refs, 1);
                    pthread_mutex_lock(&s->mu);
                    snap *old = s->cur;
                    s->cur = p;
                    pthread_mutex_unlock(&s->mu);
                    snap_unref(old);
                    c = p;
                }
            }
            pthread_mutex_unlock(&s->live_mu);
        }
        if (c) atomic_fetch_add(&s->fetches_with_params, 1);
    }
    if (held_version) *held_version = v;
    return c ? &c->pub : NULL;
}

void fl_param_store_count_bf16(fl_param_store_t *s) {
    atomic_fetch_add(&s->fetches_bf16, 1);
}
void fl_param_store_count_push_bytes(fl_param_store_t *s, uint64_t bytes) {
    atomic_fetch_add(&s->push_bytes, bytes);
}

uint64_t fl_param_store_version(const fl_param_store_t *s) {
    return atomic_load(&((fl_param_store_t *)(uintptr_t)s)->version);
}

void fl_param_store_info(fl_param_store_t *s, fl_param_store_info_t *out) {
    memset(out, 0, sizeof *out);
    out->shard_id = s->o.shard_id;
    out->num_shards = (uint32_t)s->o.num_shards;
    out->gorila = s->o.gorila;
    pthread_mutex_lock(&s->mu);
    if (s->cur) {
        out->version = atomic_load(&s->version);
        out->offset = s->cur->pub.offset;
        out->size = s->cur->pub.n;
        out->total = s->cur->pub.total;
    }
    out->publishes = atomic_load(&s->publishes);
    pthread_mutex_unlock(&s->mu);
    out->fetches = atomic_load(&s->fetches);
    out->fetches_with_params = atomic_load(&s->fetches_with_params);
    out->fetches_bf16 = atomic_load(&s->fetches_bf16);
    out->push_bytes = atomic_load(&s->push_bytes);
    out->pushes_applied = atomic_load(&s->pushes_applied);
    out->pushes_dropped = atomic_load(&s->pushes_dropped);
    out->waits = atomic_load(&s->waits);
    out->wait_timeouts = atomic_load(&s->wait_timeouts);
    for (int i = 0; i < FL_PARAM_STALENESS_BUCKETS; i++) out->staleness_hist[i] = atomic_load(&s->hist[i]);
    out->uptime_s = fl_clock_sec() - s->t0;
}

const fl_param_store_opts_t *fl_param_store_opts(const fl_param_store_t *s) {
    return &s->o;
}

void fl_param_store_state_free(fl_param_store_state_t *st) {
    if (!st) return;
    free(st->params);
    free(st->optim);
    free(st->clocks);
    st->params = st->optim = NULL;
    st->clocks = NULL;
}

fl_status fl_param_store_capture(fl_param_store_t *s, fl_param_store_state_t *out, int *have, fl_err_t *err) {
    memset(out, 0, sizeof *out);
    *have = 0;
    if (!s->o.gorila)
        return fl_err_set(err, FL_FAILED_PRECONDITION,
                          "paramserver checkpoint: only a gorila shard (learner.mode = gorila) keeps state of its own");
    pthread_mutex_lock(&s->live_mu);
    if (!s->live) {
        pthread_mutex_unlock(&s->live_mu);
        return FL_OK;
    }
    size_t n = s->n, ns = s->opt ? fl_optim_state_size(s->opt) : 0;
    out->params = malloc(n ? 4 * n : 1);
    out->optim = ns ? malloc(4 * ns) : NULL;
    out->clocks = malloc(sizeof *out->clocks * (size_t)s->o.learners);
    if (!out->params || (ns && !out->optim) || !out->clocks) {
        pthread_mutex_unlock(&s->live_mu);
        fl_param_store_state_free(out);
        return fl_err_set(err, FL_NO_MEMORY, "paramserver checkpoint: out of memory for a copy of %zu parameters", n);
    }
    if (n) memcpy(out->params, s->live, 4 * n);
    if (ns) memcpy(out->optim, fl_optim_state(s->opt), 4 * ns);
    memcpy(out->clocks, s->clocks, sizeof *out->clocks * (size_t)s->o.learners);
    out->optim_size = ns;
    out->optim_steps = s->opt ? fl_optim_steps(s->opt) : 0;
    out->learners = s->o.learners;
    out->version = atomic_load(&s->version); /* stable while live_mu is held */
    out->offset = s->offset, out->total = s->total, out->n = n;
    out->publishes = atomic_load(&s->publishes);
    out->pushes_applied = atomic_load(&s->pushes_applied);
    out->pushes_dropped = atomic_load(&s->pushes_dropped);
    out->waits = atomic_load(&s->waits);
    out->wait_timeouts = atomic_load(&s->wait_timeouts);
    for (int i = 0; i < FL_PARAM_STALENESS_BUCKETS; i++) out->staleness_hist[i] = atomic_load(&s->hist[i]);
    pthread_mutex_unlock(&s->live_mu);
    *have = 1;
    return FL_OK;
}

fl_status fl_param_store_restore(fl_param_store_t *s, const fl_param_store_state_t *in, fl_err_t *err) {
    if (!s->o.gorila)
        return fl_err_set(err, FL_FAILED_PRECONDITION,
                          "paramserver restore: an apex shard (learner.mode = apex) is not restored: the learner "
                          "publishes its parameters again");
    if (in->version == 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "paramserver restore: version 0 (expected a published version)");
    if (in->learners != s->o.learners)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "paramserver restore: %d learner clocks, expected learner.count = %d", in->learners,
                          s->o.learners);
    FL_TRY(check_slice(s, "params", in->offset, in->total, in->n, err));
    size_t n = in->n;
    uint32_t bits = 0;
    size_t bad = first_non_finite((const uint8_t *)in->params, n, &bits);
    if (bad < n)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "paramserver restore: parameter %zu of the slice is %s", bad,
                          non_finite_name(bits));
    fl_status st = FL_OK;
    fl_optim_t *opt = NULL;
    float *live = malloc(n ? 4 * n : 1), *scratch = malloc(n ? 4 * n : 1), *backup = NULL;
    snap *p = build_snapshot(in->version, in->offset, in->total, in->params, n);
    if (!live || !scratch || !p) {
        st = fl_err_set(err, FL_NO_MEMORY, "paramserver restore: out of memory for %zu parameters", n);
        goto fail;
    }
    if (n) {
        if ((st = fl_optim_create(&s->o.optim, n, &opt, err)) != FL_OK) goto fail;
        if (in->optim_size != fl_optim_state_size(opt) || !in->optim) {
            st = fl_err_set(err, FL_INVALID_ARGUMENT,
                            "paramserver restore: %zu optimizer state values, expected %zu (%s over %zu parameters)",
                            in->optim_size, fl_optim_state_size(opt), fl_optim_kind_name(s->o.optim.kind), n);
            goto fail;
        }
        if (!(backup = malloc(4 * (n + in->optim_size)))) {
            st = fl_err_set(err, FL_NO_MEMORY, "paramserver restore: out of memory for %zu parameters", n);
            goto fail;
        }
        memcpy(live, in->params, 4 * n);
        memcpy(fl_optim_state(opt), in->optim, 4 * in->optim_size);
        fl_optim_set_steps(opt, in->optim_steps);
    }
    pthread_mutex_lock(&s->live_mu);
    pthread_mutex_lock(&s->mu);
    if (s->cur) {
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_unlock(&s->live_mu);
        st = fl_err_set(err, FL_FAILED_PRECONDITION,
                        "paramserver restore: this shard already holds version %" PRIu64 " (restore before serving)",
                        atomic_load(&s->version));
        goto fail;
    }
    s->cur = p;
    atomic_store(&s->version, in->version);
    atomic_store(&s->publishes, in->publishes);
    pthread_mutex_unlock(&s->mu);
    s->live = live, s->scratch = scratch, s->backup = backup, s->opt = opt;
    s->n = n, s->offset = in->offset, s->total = in->total;
    memcpy(s->clocks, in->clocks, sizeof *s->clocks * (size_t)s->o.learners);
    s->restored = 1;
    atomic_store(&s->pushes_applied, in->pushes_applied);
    atomic_store(&s->pushes_dropped, in->pushes_dropped);
    atomic_store(&s->waits, in->waits);
    atomic_store(&s->wait_timeouts, in->wait_timeouts);
    for (int i = 0; i < FL_PARAM_STALENESS_BUCKETS; i++) atomic_store(&s->hist[i], in->staleness_hist[i]);
    pthread_mutex_unlock(&s->live_mu);
    return FL_OK;
fail:
    free(live);
    free(scratch);
    free(backup);
    fl_optim_destroy(opt);
    snap_unref(p);
    return st;
}
