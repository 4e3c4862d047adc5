/* wire: TransitionBatch <-> columns, with validation against a signature (see wire.h).
 *
 * Checks run in field order (count, obs, actions, rewards, discounts, next_obs, the
 * observations' values, priorities) so that the first thing wrong is the one reported. */
#include "replay/wire.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "[50, 3]" for n values of v. */
static void format_dims(char *buf, size_t len, size_t n, const int64_t *v) {
    size_t used = 0;
    int k = snprintf(buf, len, "[");
    used = k > 0 ? (size_t)k : 0;
    for (size_t i = 0; i < n && used < len; i++) {
        if (i == 8 && n > 9) { /* a hostile shape can be long: keep the message readable */
            k = snprintf(buf + used, len - used, ", ... (%zu dims)", n);
            if (k > 0) used += (size_t)k;
            break;
        }
        k = snprintf(buf + used, len - used, "%s%" PRId64, i ? ", " : "", v[i]);
        if (k < 0) return;
        used += (size_t)k;
    }
    if (used < len) snprintf(buf + used, len - used, "]");
}

static const char *dtype_label(int d, char *buf, size_t len) {
    size_t sz = fl_dtype_size((fl_dtype)d);
    if (sz) return fl_dtype_name((fl_dtype)d);
    snprintf(buf, len, "%d (not a known dtype)", d);
    return buf;
}

/* Checks one observation tensor of `count` items. With sig, dtype and shape must equal
 * the signature's; without, only the bytes per item (obs_bytes) must match. */
static fl_status check_tensor(const char *name, const Fleet__Tensor *t, size_t count, const fl_wire_sig_t *sig,
                              size_t obs_bytes, fl_err_t *err) {
    char got[160], want[160], sigbuf[96], dbuf[48];
    const fl_obs_spec_t *o = sig ? &sig->obs : NULL;
    if (!t) {
        if (o) {
            int64_t dims[FL_OBS_MAX_RANK + 1];
            dims[0] = (int64_t)count;
            for (int d = 0; d < o->rank; d++) dims[d + 1] = o->shape[d];
            format_dims(want, sizeof want, (size_t)o->rank + 1, dims);
            return fl_err_set(err, FL_INVALID_ARGUMENT, "%s: missing, expected a %s tensor of shape %s", name,
                              fl_dtype_name(o->dtype), want);
        }
        return fl_err_set(err, FL_INVALID_ARGUMENT, "%s: missing, expected a tensor of %zu items", name, count);
    }
    size_t elem = fl_dtype_size((fl_dtype)t->dtype);
    if (o) {
        if ((int)t->dtype != (int)o->dtype)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "%s.dtype: got %s, expected %s", name,
                              dtype_label((int)t->dtype, dbuf, sizeof dbuf), fl_dtype_name(o->dtype));
        int64_t dims[FL_OBS_MAX_RANK + 1];
        dims[0] = (int64_t)count;
        for (int d = 0; d < o->rank; d++) dims[d + 1] = o->shape[d];
        size_t want_n = (size_t)o->rank + 1;
        int same = t->n_shape == want_n;
        for (size_t d = 0; same && d < want_n; d++) same = t->shape[d] == dims[d];
        if (!same) {
            format_dims(got, sizeof got, t->n_shape, t->shape);
            format_dims(want, sizeof want, want_n, dims);
            size_t u = (size_t)snprintf(sigbuf, sizeof sigbuf, "(count");
            for (int d = 0; d < o->rank && u < sizeof sigbuf; d++)
                u += (size_t)snprintf(sigbuf + u, sizeof sigbuf - u, ", %d", o->shape[d]);
            if (u < sizeof sigbuf) snprintf(sigbuf + u, sizeof sigbuf - u, ")");
            return fl_err_set(err, FL_INVALID_ARGUMENT, "%s.shape: got %s, expected %s %s", name, got, want, sigbuf);
        }
    } else {
        if (elem == 0)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "%s.dtype: got %s, expected a known dtype", name,
                              dtype_label((int)t->dtype, dbuf, sizeof dbuf));
        size_t item = elem;
        int ok = t->n_shape >= 1 && t->n_shape <= FL_OBS_MAX_RANK + 1 && t->shape[0] == (int64_t)count;
        for (size_t d = 1; ok && d < t->n_shape; d++) {
            ok = t->shape[d] >= 1 && (uint64_t)t->shape[d] <= SIZE_MAX / item;
            if (ok) item *= (size_t)t->shape[d];
        }
        if (!ok || item != obs_bytes) {
            format_dims(got, sizeof got, t->n_shape, t->shape);
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "%s.shape: got %s of %s, expected [%zu, ...] with %zu bytes per item", name, got,
                              fl_dtype_name((fl_dtype)t->dtype), count, obs_bytes);
        }
    }
    size_t want_bytes;
    if (__builtin_mul_overflow(count, obs_bytes, &want_bytes))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "%s: %zu items of %zu bytes overflow", name, count, obs_bytes);
    if (t->data.len != want_bytes || (want_bytes && !t->data.data))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "%s.data: got %zu bytes, expected %zu (%zu x %zu bytes)", name,
                          t->data.len, want_bytes, count, obs_bytes);
    return FL_OK;
}

static fl_status check_len(const char *name, size_t n, size_t count, fl_err_t *err) {
    if (n != count)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "%s: got %zu values, expected %zu (count)", name, n, count);
    return FL_OK;
}

fl_status fl_wire_check_priorities(const char *field, size_t n, const float *p, fl_err_t *err) {
    return fl_wire_check_priorities_max(field, n, p, 0.0, err);
}

fl_status fl_wire_check_priorities_max(const char *field, size_t n, const float *p, double max, fl_err_t *err) {
    const float hi = max > 0.0 ? (float)max : HUGE_VALF;
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= 0.0f && p[i] <= hi && p[i] != HUGE_VALF) continue;
        if (max > 0.0)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "%s[%zu]: got %g, expected a finite value in [0, %g] (replay.max_priority, by default "
                              "from env.reward_bound)",
                              field, i, (double)p[i], max);
        return fl_err_set(err, FL_INVALID_ARGUMENT, "%s[%zu]: got %g, expected a finite value >= 0", field, i,
                          (double)p[i]);
    }
    return FL_OK;
}

fl_status fl_wire_check_rewards(const char *field, size_t n, const float *r, double max, fl_err_t *err) {
    const float hi = max > 0.0 ? (float)max : FLT_MAX;
    for (size_t i = 0; i < n; i++) {
        if (fabsf(r[i]) <= hi) continue;
        if (max > 0.0 && isfinite(r[i]))
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "%s[%zu]: got %g, expected a value with |r| <= %g (replay.max_abs_reward, by default "
                              "from env.reward_bound)",
                              field, i, (double)r[i], max);
        return fl_err_set(err, FL_INVALID_ARGUMENT, "%s[%zu]: got %g, expected a finite value", field, i, (double)r[i]);
    }
    return FL_OK;
}

size_t fl_wire_first_non_finite(const void *values, size_t n) {
    const uint8_t *p = values;
    size_t i = 0;
    /* Blocks with one test each (the loop vectorizes); the exact index only on a hit. */
    for (; i + 16 <= n; i += 16) {
        uint32_t bad = 0;
        for (size_t k = 0; k < 16; k++) {
            uint32_t u;
            memcpy(&u, p + 4 * (i + k), 4);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
        if (bad) break;
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, p + 4 * i, 4);
        if ((u & 0x7f800000u) == 0x7f800000u) return i;
    }
    return n;
}

/* With FL_WIRE_FINITE_OBS: every value of a float32 observation tensor is finite. */
static fl_status check_obs_finite(const char *name, const Fleet__Tensor *t, size_t count, size_t obs_bytes,
                                  fl_err_t *err) {
    if (t->dtype != FLEET__DTYPE__DTYPE_FLOAT32) return FL_OK;
    size_t n = t->data.len / 4, bad = fl_wire_first_non_finite(t->data.data, n);
    if (bad == n) return FL_OK;
    float v;
    memcpy(&v, t->data.data + 4 * bad, 4);
    size_t per = obs_bytes / 4;
    return fl_err_set(err, FL_INVALID_ARGUMENT,
                      "%s[%zu][%zu]: got %g, expected a finite value (float32 observations; of %zu items)", name,
                      bad / per, bad % per, (double)v, count);
}

static fl_status decode(const Fleet__TransitionBatch *m, const fl_wire_sig_t *sig, size_t obs_bytes, unsigned flags,
                        fl_wire_batch_t *out, fl_err_t *err) {
    memset(out, 0, sizeof *out);
    if (!m) return fl_err_set(err, FL_INVALID_ARGUMENT, "batch: missing, expected a TransitionBatch with count >= 1");
    size_t count = m->count;
    if (count == 0) return fl_err_set(err, FL_INVALID_ARGUMENT, "batch.count: got 0, expected >= 1");
    FL_TRY(check_tensor("batch.obs", m->obs, count, sig, obs_bytes, err));
    FL_TRY(check_len("batch.actions", m->n_actions, count, err));
    int num_actions = sig ? sig->num_actions : 0;
    for (size_t i = 0; i < count; i++) {
        int32_t a = m->actions[i];
        if (a < 0 || (num_actions > 0 && a >= num_actions)) {
            if (num_actions > 0)
                return fl_err_set(err, FL_INVALID_ARGUMENT, "batch.actions[%zu]: got %" PRId32 ", expected 0 .. %d", i,
                                  a, num_actions - 1);
            return fl_err_set(err, FL_INVALID_ARGUMENT, "batch.actions[%zu]: got %" PRId32 ", expected >= 0", i, a);
        }
    }
    FL_TRY(check_len("batch.rewards", m->n_rewards, count, err));
    FL_TRY(fl_wire_check_rewards("batch.rewards", count, m->rewards, sig ? sig->max_abs_reward : 0.0, err));
    FL_TRY(check_len("batch.discounts", m->n_discounts, count, err));
    for (size_t i = 0; i < count; i++) {
        float g = m->discounts[i];
        if (!(g >= 0.0f && g <= 1.0f))
            return fl_err_set(err, FL_INVALID_ARGUMENT, "batch.discounts[%zu]: got %g, expected a value in [0, 1]", i,
                              (double)g);
    }
    FL_TRY(check_tensor("batch.next_obs", m->next_obs, count, sig, obs_bytes, err));
    if (flags & FL_WIRE_FINITE_OBS) {
        FL_TRY(check_obs_finite("batch.obs", m->obs, count, obs_bytes, err));
        FL_TRY(check_obs_finite("batch.next_obs", m->next_obs, count, obs_bytes, err));
    }
    if (m->n_priorities || (flags & FL_WIRE_NEED_PRIORITIES)) {
        FL_TRY(check_len("batch.priorities", m->n_priorities, count, err));
        FL_TRY(
            fl_wire_check_priorities_max("batch.priorities", count, m->priorities, sig ? sig->max_priority : 0.0, err));
        out->priorities = m->priorities;
    }
    out->count = count;
    out->obs_bytes = obs_bytes;
    out->obs = m->obs->data.data;
    out->actions = m->actions;
    out->rewards = m->rewards;
    out->discounts = m->discounts;
    out->next_obs = m->next_obs->data.data;
    return FL_OK;
}

fl_status fl_wire_decode_batch(const Fleet__TransitionBatch *m, const fl_wire_sig_t *sig, unsigned flags,
                               fl_wire_batch_t *out, fl_err_t *err) {
    size_t obs_bytes = fl_obs_spec_bytes(&sig->obs);
    if (obs_bytes == 0) {
        memset(out, 0, sizeof *out);
        return fl_err_set(err, FL_INTERNAL, "wire: invalid table signature (dtype %d, rank %d)", (int)sig->obs.dtype,
                          sig->obs.rank);
    }
    return decode(m, sig, obs_bytes, flags, out, err);
}

fl_status fl_wire_decode_batch_bytes(const Fleet__TransitionBatch *m, size_t obs_bytes, unsigned flags,
                                     fl_wire_batch_t *out, fl_err_t *err) {
    return decode(m, NULL, obs_bytes, flags, out, err);
}

void fl_wire_encode_batch(fl_wire_batch_msg_t *m, const fl_obs_spec_t *obs, const fl_wire_batch_t *b) {
    fleet__transition_batch__init(&m->batch);
    fleet__tensor__init(&m->obs);
    fleet__tensor__init(&m->next_obs);
    size_t rank = (size_t)obs->rank + 1;
    m->obs_shape[0] = m->next_obs_shape[0] = (int64_t)b->count;
    for (int d = 0; d < obs->rank; d++) m->obs_shape[d + 1] = m->next_obs_shape[d + 1] = obs->shape[d];
    size_t bytes = b->count * b->obs_bytes;

    m->obs.dtype = (Fleet__DType)obs->dtype;
    m->obs.n_shape = rank;
    m->obs.shape = m->obs_shape;
    m->obs.data.len = bytes;
    m->obs.data.data = (uint8_t *)b->obs;
    m->next_obs.dtype = (Fleet__DType)obs->dtype;
    m->next_obs.n_shape = rank;
    m->next_obs.shape = m->next_obs_shape;
    m->next_obs.data.len = bytes;
    m->next_obs.data.data = (uint8_t *)b->next_obs;

    m->batch.count = (uint32_t)b->count;
    m->batch.obs = &m->obs;
    m->batch.next_obs = &m->next_obs;
    m->batch.n_actions = b->count;
    m->batch.actions = (int32_t *)b->actions;
    m->batch.n_rewards = b->count;
    m->batch.rewards = (float *)b->rewards;
    m->batch.n_discounts = b->count;
    m->batch.discounts = (float *)b->discounts;
    m->batch.n_priorities = b->priorities ? b->count : 0;
    m->batch.priorities = (float *)b->priorities;
}
