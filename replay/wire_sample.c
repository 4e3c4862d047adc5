/* wire_sample: the Sample reply, written with its observations in place by the shard and
 * read in place by the client (see wire.h). */
#include "replay/wire.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- a SampleResponse with its observations in place ------------------------------ */

#define LEN5 5 /* bytes of a fixed-width length prefix */

/* v as a 5-byte varint (v < 2^32): four bytes with the continuation bit, then the rest. */
static void put_len5(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    p[4] = (uint8_t)v;
}

/* Key of a length-delimited field (wire type 2); every field here is numbered below 16. */
static uint8_t len_key(unsigned field) {
    return (uint8_t)((field << 3) | 2u);
}

/* A tensor's bytes without its data: dtype and shape (count, *obs.shape). */
static size_t tensor_head(const fl_obs_spec_t *obs, size_t count, uint8_t *out) {
    int64_t shape[FL_OBS_MAX_RANK + 1];
    Fleet__Tensor t = FLEET__TENSOR__INIT;
    t.dtype = (Fleet__DType)obs->dtype;
    t.n_shape = (size_t)obs->rank + 1;
    t.shape = shape;
    shape[0] = (int64_t)count;
    for (int d = 0; d < obs->rank; d++) shape[d + 1] = obs->shape[d];
    return out ? fleet__tensor__pack(&t, out) : fleet__tensor__get_packed_size(&t);
}

fl_status fl_wire_sample_reply_begin(fl_wire_sample_reply_t *r, const fl_obs_spec_t *obs, size_t count, fl_err_t *err) {
    memset(r, 0, sizeof *r);
    const size_t ob = fl_obs_spec_bytes(obs);
    if (count == 0 || ob == 0 || count > (size_t)UINT32_MAX / ob)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "sample reply: %zu observations of %zu bytes (expected at least one, under 4 GB)", count, ob);
    const size_t head = tensor_head(obs, count, NULL);
    const size_t data = count * ob, tensor = head + 1 + LEN5 + data; /* + the data field's key and length */
    /* after the two tensors: count (key + 10), actions (key + 5 + up to 10 each), rewards
     * and discounts (key + 5 + 4 each); the response's keys (8), weights (4) and
     * probabilities (8) with key and length each, and its seven scalars (key + up to 10) */
    const size_t tail_max = 11 + 3 * (1 + LEN5) + count * 18 + 3 * (1 + LEN5) + count * 20 + 7 * 11;
    const size_t at_tail = 1 + LEN5 + 2 * (1 + LEN5 + tensor);
    r->cap = at_tail + tail_max;
    if (r->cap > UINT32_MAX) /* every length prefix below fits 32 bits */
        return fl_err_set(err, FL_INVALID_ARGUMENT, "sample reply: %zu observations of %zu bytes: over 4 GB", count,
                          ob);
    r->buf = malloc(r->cap);
    if (!r->buf) return fl_err_set(err, FL_NO_MEMORY, "sample reply: cannot allocate %zu bytes", r->cap);
    r->count = count;
    r->obs_bytes = ob;
    uint8_t *p = r->buf + 1 + LEN5; /* the batch's key and length are written last */
    for (int k = 0; k < 2; k++) {
        *p++ = len_key(k == 0 ? 2 : 6); /* TransitionBatch.obs, .next_obs */
        put_len5(p, (uint32_t)tensor);
        p += LEN5;
        p += tensor_head(obs, count, p);
        *p++ = len_key(3); /* Tensor.data */
        put_len5(p, (uint32_t)data);
        p += LEN5;
        if (k == 0)
            r->obs = p;
        else
            r->next_obs = p;
        p += data;
    }
    r->tail = (size_t)(p - r->buf);
    return FL_OK;
}

fl_status fl_wire_sample_reply_finish(fl_wire_sample_reply_t *r, const int32_t *actions, const float *rewards,
                                      const float *discounts, const Fleet__SampleResponse *resp, size_t *len,
                                      fl_err_t *err) {
    Fleet__TransitionBatch b = FLEET__TRANSITION_BATCH__INIT;
    b.count = (uint32_t)r->count;
    b.n_actions = b.n_rewards = b.n_discounts = r->count;
    b.actions = (int32_t *)actions;
    b.rewards = (float *)rewards;
    b.discounts = (float *)discounts;
    const size_t cols = fleet__transition_batch__get_packed_size(&b);
    const size_t rest = resp->batch ? 0 : fleet__sample_response__get_packed_size(resp);
    const size_t batch = r->tail - (1 + LEN5) + cols;
    if (resp->batch || r->tail + cols + rest > r->cap || batch > UINT32_MAX)
        return fl_err_set(err, FL_INTERNAL, "sample reply: %zu + %zu bytes after the observations, room for %zu", cols,
                          rest, r->cap - r->tail);
    r->buf[0] = len_key(1); /* SampleResponse.batch */
    put_len5(r->buf + 1, (uint32_t)batch);
    fleet__transition_batch__pack(&b, r->buf + r->tail);
    fleet__sample_response__pack(resp, r->buf + r->tail + cols);
    *len = r->tail + cols + rest;
    return FL_OK;
}

/* ---- a SampleResponse read in place ----------------------------------------------- */

/* A repeated scalar column being filled: values appended at n, up to room. */
typedef struct col {
    const char *name;
    uint8_t *base;
    size_t es; /* bytes per value: 4 or 8 */
    size_t n, room;
    int varint; /* int32 values as varints (else fixed32 / fixed64 bits) */
} col;

typedef struct tensor_view {
    int seen;
    fl_pb_tensor_t t;
} tensor_view;

typedef struct reader {
    fl_err_t *err;
    fl_status st;
    int seen_batch;
    uint32_t count;
    tensor_view obs, next_obs;
    col actions, rewards, discounts, keys, weights, probs;
    fl_wire_sample_info_t info;
} reader;

/* Ends the walk with st (an error already set). */
static int fail(reader *r, fl_status st) {
    r->st = st;
    return 1;
}

static int wrong_type(reader *r, const char *field, int wt, int want) {
    return fail(r, fl_err_set(r->err, FL_DATA_LOSS, "%s: wire type %d, expected %d", field, wt, want));
}

static int too_many(reader *r, const col *k) {
    return fail(r, fl_err_set(r->err, FL_DATA_LOSS, "%s: more than %zu values (room for %zu transitions)", k->name,
                              k->room, k->room));
}

static int twice(reader *r, const char *field) {
    return fail(r, fl_err_set(r->err, FL_DATA_LOSS, "%s: sent twice, expected once", field));
}

/* One value of a repeated field, or a packed run of them. */
static int append(reader *r, col *k, fl_pb_cur_t *c, const fl_pb_field_t *f) {
    const int single = k->varint ? 0 : k->es == 4 ? 5 : 1;
    if (f->wt == single) {
        if (k->n == k->room) return too_many(r, k);
        if (k->varint) {
            int32_t v = (int32_t)(uint32_t)f->v;
            memcpy(k->base + 4 * k->n, &v, 4);
        } else if (k->es == 4) {
            uint32_t v = (uint32_t)f->v;
            memcpy(k->base + 4 * k->n, &v, 4);
        } else {
            memcpy(k->base + 8 * k->n, &f->v, 8);
        }
        k->n++;
        return 0;
    }
    if (f->wt != 2) return wrong_type(r, k->name, f->wt, single);
    const size_t end = f->pos + (size_t)f->v;
    if (k->varint) {
        while (c->pos < end) {
            uint64_t v;
            if (fl_pb_read_varint(c, end, &v)) return -1;
            if (k->n == k->room) return too_many(r, k);
            int32_t a = (int32_t)(uint32_t)v;
            memcpy(k->base + 4 * k->n, &a, 4);
            k->n++;
        }
        return 0;
    }
    if (f->v % k->es)
        return fail(r, fl_err_set(r->err, FL_DATA_LOSS, "%s: %zu bytes of packed values, expected a multiple of %zu",
                                  k->name, (size_t)f->v, k->es));
    const size_t n = (size_t)f->v / k->es;
    if (n > k->room - k->n) return too_many(r, k);
    if (fl_pb_read(c, end, k->base + k->es * k->n, (size_t)f->v)) return -1;
    k->n += n;
    return 0;
}

static int read_tensor(reader *r, tensor_view *t, const char *name, fl_pb_cur_t *c, const fl_pb_field_t *f) {
    if (f->wt != 2) return wrong_type(r, name, f->wt, 2);
    if (t->seen++) return twice(r, name);
    const int w = fl_pb_read_tensor(c, f, &t->t);
    if (w == 0 || w == FL_PB_FIELD_ZERO) return w; /* field 0 is reported as such, where it is */
    return fail(r, fl_err_set(r->err, FL_DATA_LOSS, "%s: not a valid Tensor (%zu bytes)", name, (size_t)f->v));
}

static int on_batch(void *ctx, fl_pb_cur_t *c, const fl_pb_field_t *f) {
    reader *r = ctx;
    switch (f->num) {
    case 1:
        if (f->wt != 0) return wrong_type(r, "batch.count", f->wt, 0);
        r->count = (uint32_t)f->v;
        return 0;
    case 2: return read_tensor(r, &r->obs, "batch.obs", c, f);
    case 3: return append(r, &r->actions, c, f);
    case 4: return append(r, &r->rewards, c, f);
    case 5: return append(r, &r->discounts, c, f);
    case 6: return read_tensor(r, &r->next_obs, "batch.next_obs", c, f);
    default: return 0; /* priorities (insert only) and unknown fields */
    }
}

static int scalar(reader *r, const char *name, const fl_pb_field_t *f, int wt, void *dst, size_t size) {
    if (f->wt != wt) return wrong_type(r, name, f->wt, wt);
    if (size == 4) {
        uint32_t v = (uint32_t)f->v;
        memcpy(dst, &v, 4);
    } else {
        memcpy(dst, &f->v, 8);
    }
    return 0;
}

static int on_response(void *ctx, fl_pb_cur_t *c, const fl_pb_field_t *f) {
    reader *r = ctx;
    fl_wire_sample_info_t *i = &r->info;
    switch (f->num) {
    case 1:
        if (f->wt != 2) return wrong_type(r, "batch", f->wt, 2);
        if (r->seen_batch++) return twice(r, "batch");
        return fl_pb_walk(c, f->pos + (size_t)f->v, on_batch, r);
    case 2: return append(r, &r->keys, c, f);
    case 3: return append(r, &r->weights, c, f);
    case 4: return append(r, &r->probs, c, f);
    case 5: return scalar(r, "table_size", f, 0, &i->table_size, 8);
    case 6: return scalar(r, "total_priority", f, 1, &i->total_priority, 8);
    case 7: return scalar(r, "min_priority", f, 1, &i->min_priority, 8);
    case 8: return scalar(r, "shard_id", f, 0, &i->shard_id, 4);
    case 9: return scalar(r, "sampling_mass", f, 1, &i->sampling_mass, 8);
    case 10: return scalar(r, "updates_applied", f, 0, &i->updates_applied, 8);
    case 11: return scalar(r, "updates_stale", f, 0, &i->updates_stale, 8);
    default: return 0;
    }
}

/* The tensor as protobuf-c would have unpacked it, without its data (only its length is
 * checked). */
static Fleet__Tensor *as_tensor(const tensor_view *v, Fleet__Tensor *t, const uint8_t *nonnull) {
    if (!v->seen) return NULL;
    fleet__tensor__init(t);
    t->dtype = (Fleet__DType)v->t.dtype;
    t->n_shape = v->t.n_shape;
    t->shape = (int64_t *)v->t.shape;
    t->data.len = v->t.data_len;
    t->data.data = (uint8_t *)nonnull;
    return t;
}

static fl_status copy_obs(fl_pb_cur_t *c, const tensor_view *v, uint8_t *dst, fl_err_t *err) {
    fl_pb_seek(c, v->t.data_pos);
    if (fl_pb_read(c, c->len, dst, v->t.data_len))
        return fl_err_set(err, FL_INTERNAL, "sample reply: observations past the end of the reply");
    return FL_OK;
}

fl_status fl_wire_read_sample_reply(const fl_pb_seg_t *seg, size_t nseg, const fl_wire_sample_cols_t *cols,
                                    fl_wire_sample_info_t *info, fl_err_t *err) {
    memset(info, 0, sizeof *info);
    reader r;
    memset(&r, 0, sizeof r);
    r.err = err;
    r.st = FL_OK;
    const size_t room = cols->room;
    r.actions = (col){"batch.actions", (uint8_t *)cols->actions, 4, 0, room, 1};
    r.rewards = (col){"batch.rewards", (uint8_t *)cols->rewards, 4, 0, room, 0};
    r.discounts = (col){"batch.discounts", (uint8_t *)cols->discounts, 4, 0, room, 0};
    r.keys = (col){"keys", (uint8_t *)cols->keys, 8, 0, room, 0};
    r.weights = (col){"weights", (uint8_t *)cols->weights, 4, 0, room, 0};
    r.probs = (col){"probabilities", (uint8_t *)cols->probs, 8, 0, room, 0};
    fl_pb_cur_t c;
    fl_pb_cur_init(&c, seg, nseg);
    int w = fl_pb_walk(&c, c.len, on_response, &r);
    if (w > 0) return r.st;
    if (w == FL_PB_FIELD_ZERO)
        return fl_err_set(err, FL_DATA_LOSS, "field number 0 at byte %zu of %zu (protobuf reserves it)", c.pos, c.len);
    if (w < 0)
        return fl_err_set(err, FL_DATA_LOSS, "not a valid SampleResponse (malformed at byte %zu of %zu)", c.pos, c.len);

    Fleet__TransitionBatch m = FLEET__TRANSITION_BATCH__INIT;
    Fleet__Tensor obs, next_obs;
    m.count = r.count;
    m.obs = as_tensor(&r.obs, &obs, cols->obs);
    m.next_obs = as_tensor(&r.next_obs, &next_obs, cols->next_obs);
    m.n_actions = r.actions.n;
    m.actions = cols->actions;
    m.n_rewards = r.rewards.n;
    m.rewards = cols->rewards;
    m.n_discounts = r.discounts.n;
    m.discounts = cols->discounts;
    fl_wire_batch_t b;
    if (r.count > room)
        return fl_err_set(err, FL_DATA_LOSS, "batch.count: got %" PRIu32 ", expected at most %zu (the room left)",
                          r.count, room);
    fl_status st = fl_wire_decode_batch_bytes(r.seen_batch ? &m : NULL, cols->obs_bytes, 0, &b, err);
    if (st != FL_OK) {
        if (err) err->code = FL_DATA_LOSS;
        return FL_DATA_LOSS;
    }
    if (r.keys.n != b.count || r.weights.n != b.count || r.probs.n != b.count)
        return fl_err_set(err, FL_DATA_LOSS, "%zu transitions with %zu keys, %zu weights, %zu probabilities", b.count,
                          r.keys.n, r.weights.n, r.probs.n);
    FL_TRY(copy_obs(&c, &r.obs, cols->obs, err));
    FL_TRY(copy_obs(&c, &r.next_obs, cols->next_obs, err));
    *info = r.info;
    info->count = b.count;
    return FL_OK;
}
