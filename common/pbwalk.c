/* pbwalk: protobuf wire format read in place (see pbwalk.h). */
#include "common/pbwalk.h"

#include <string.h>

/* Moves past empty segments and the end of the current one. */
static void settle(fl_pb_cur_t *c) {
    while (c->i < c->nseg && c->off >= c->seg[c->i].len) {
        c->off -= c->seg[c->i].len;
        c->i++;
    }
}

void fl_pb_cur_init(fl_pb_cur_t *c, const fl_pb_seg_t *seg, size_t nseg) {
    c->seg = seg;
    c->nseg = nseg;
    c->len = 0;
    for (size_t k = 0; k < nseg; k++) c->len += seg[k].len;
    c->i = c->off = c->pos = 0;
    settle(c);
}

void fl_pb_seek(fl_pb_cur_t *c, size_t pos) {
    if (pos < c->pos) { /* back: from the start */
        c->i = c->off = c->pos = 0;
    }
    c->off += pos - c->pos;
    c->pos = pos;
    settle(c);
}

int fl_pb_read_varint(fl_pb_cur_t *c, size_t end, uint64_t *v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (c->pos >= end || c->i >= c->nseg) return -1;
        uint8_t b = c->seg[c->i].p[c->off];
        c->pos++;
        c->off++;
        settle(c);
        if (shift < 64) r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

int fl_pb_read(fl_pb_cur_t *c, size_t end, void *dst, size_t n) {
    if (end > c->len || c->pos > end || n > end - c->pos) return -1;
    if (!dst) {
        fl_pb_seek(c, c->pos + n);
        return 0;
    }
    uint8_t *d = dst;
    while (n) {
        size_t k = c->seg[c->i].len - c->off;
        if (k > n) k = n;
        memcpy(d, c->seg[c->i].p + c->off, k);
        d += k;
        n -= k;
        c->pos += k;
        c->off += k;
        settle(c);
    }
    return 0;
}

const uint8_t *fl_pb_span(const fl_pb_cur_t *c, size_t pos, size_t n) {
    static const uint8_t none[1];
    if (pos > c->len || n > c->len - pos) return NULL;
    if (n == 0) return none;
    size_t at = 0;
    for (size_t k = 0; k < c->nseg; at += c->seg[k].len, k++) {
        if (pos >= at + c->seg[k].len) continue;
        return n <= at + c->seg[k].len - pos ? c->seg[k].p + (pos - at) : NULL;
    }
    return NULL;
}

int fl_pb_walk(fl_pb_cur_t *c, size_t end, fl_pb_field_fn on, void *ctx) {
    if (end > c->len) return -1;
    while (c->pos < end) {
        uint64_t v64;
        const size_t at = c->pos;
        if (fl_pb_read_varint(c, end, &v64) || c->pos - at > 5) return -1;
        /* up to 35 bits: the field number takes 32, as protobuf-c reads it */
        fl_pb_field_t f = {.num = (uint32_t)(v64 >> 3), .wt = (int)(v64 & 7), .v = 0, .pos = 0};
        if (f.num == 0) {
            fl_pb_seek(c, at);
            return FL_PB_FIELD_ZERO;
        }
        size_t next;
        uint8_t le[8];
        switch (f.wt) {
        case 0:
            if (fl_pb_read_varint(c, end, &f.v)) return -1;
            next = c->pos;
            break;
        case 1:
        case 5: {
            size_t n = f.wt == 1 ? 8 : 4;
            if (fl_pb_read(c, end, le, n)) return -1;
            for (size_t k = n; k-- > 0;) f.v = f.v << 8 | le[k];
            next = c->pos;
            break;
        }
        case 2:
            if (fl_pb_read_varint(c, end, &f.v) || f.v > end - c->pos) return -1;
            f.pos = c->pos;
            next = c->pos + (size_t)f.v;
            break;
        default: return -1;
        }
        int r = on(ctx, c, &f);
        if (r) return r;
        if (c->pos > next) return -1; /* the function read past its field */
        fl_pb_seek(c, next);
    }
    return 0;
}

static int on_tensor(void *ctx, fl_pb_cur_t *c, const fl_pb_field_t *f) {
    fl_pb_tensor_t *t = ctx;
    switch (f->num) {
    case 1:
        if (f->wt != 0) return -1;
        t->dtype = (int)(int32_t)f->v;
        return 0;
    case 2:
        if (f->wt == 0) {
            if (t->n_shape < FL_PB_TENSOR_DIMS) t->shape[t->n_shape] = (int64_t)f->v;
            t->n_shape++;
            return 0;
        }
        if (f->wt != 2) return -1;
        for (size_t end = f->pos + (size_t)f->v; c->pos < end;) { /* packed */
            uint64_t d;
            if (fl_pb_read_varint(c, end, &d)) return -1;
            if (t->n_shape < FL_PB_TENSOR_DIMS) t->shape[t->n_shape] = (int64_t)d;
            t->n_shape++;
        }
        return 0;
    case 3:
        if (f->wt != 2) return -1;
        t->data_pos = f->pos;
        t->data_len = (size_t)f->v;
        return 0;
    default: return 0;
    }
}

int fl_pb_read_tensor(fl_pb_cur_t *c, const fl_pb_field_t *f, fl_pb_tensor_t *t) {
    memset(t, 0, sizeof *t);
    if (f->wt != 2) return -1;
    return fl_pb_walk(c, f->pos + (size_t)f->v, on_tensor, t);
}
