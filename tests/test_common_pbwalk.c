/* common/pbwalk.h: protobuf wire format read in place, over one buffer or segments.
 * A message protobuf-c packed walks to the same fields and values (its Tensor through
 * fl_pb_read_tensor) however its bytes are cut (single bytes, empty segments between them); copies and seeks across
 * segment boundaries, forward and back; malformed input (an unterminated or 11-byte varint, a length past the end, wire
 * types 3, 4, 6 and 7, a key over 5 bytes, field number 0, a nested message past its parent) is refused without reading
 * out of bounds; a 5-byte key holds a 32-bit field number, as protobuf-c reads it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/pbwalk.h"
#include "common/rng.h"
#include "fleet.pb-c.h"

/* What a walk of a FetchResponse met (fields 1, 2 and 3 > 1, 2, 3 and 4 > 1, 2, 3). */
typedef struct seen {
    uint64_t version, p_version, offset, total;
    int has_params, dtype;
    int64_t shape[4];
    size_t n_shape;
    uint8_t data[64];
    size_t data_len;
} seen;

static int on_slice(void *ctx, fl_pb_cur_t *c, const fl_pb_field_t *f) {
    seen *s = ctx;
    if (f->num == 1) s->p_version = f->v;
    if (f->num == 2) s->offset = f->v;
    if (f->num == 3) s->total = f->v;
    if (f->num == 4) { /* the Tensor reader, then its data copied out */
        fl_pb_tensor_t t;
        if (fl_pb_read_tensor(c, f, &t)) return -1;
        s->dtype = t.dtype;
        for (size_t d = 0; d < t.n_shape && d < 4; d++) s->shape[d] = t.shape[d];
        s->n_shape = t.n_shape;
        assert_true(t.data_len <= sizeof s->data);
        s->data_len = t.data_len;
        fl_pb_seek(c, t.data_pos);
        return fl_pb_read(c, t.data_pos + t.data_len, s->data, t.data_len);
    }
    return 0;
}

static int on_response(void *ctx, fl_pb_cur_t *c, const fl_pb_field_t *f) {
    seen *s = ctx;
    if (f->num == 1) s->version = f->v;
    if (f->num == 2) s->has_params = (int)f->v;
    if (f->num == 3) return fl_pb_walk(c, f->pos + (size_t)f->v, on_slice, s);
    return 0;
}

static int walk_segs(const fl_pb_seg_t *seg, size_t n, seen *s) {
    memset(s, 0, sizeof *s);
    fl_pb_cur_t c;
    fl_pb_cur_init(&c, seg, n);
    int r = fl_pb_walk(&c, c.len, on_response, s);
    if (r == 0) assert_int_equal(c.pos, c.len);
    return r;
}

static size_t packed_fetch(uint8_t *buf, const float *values, size_t n) {
    int64_t shape[1] = {(int64_t)n};
    Fleet__Tensor t = FLEET__TENSOR__INIT;
    t.dtype = FLEET__DTYPE__DTYPE_FLOAT32;
    t.n_shape = 1;
    t.shape = shape;
    t.data = (ProtobufCBinaryData){4 * n, (uint8_t *)values};
    Fleet__ParamSlice sl = FLEET__PARAM_SLICE__INIT;
    sl.version = 1ull << 63;
    sl.offset = 300;
    sl.total = 123456789;
    sl.values = &t;
    Fleet__FetchResponse r = FLEET__FETCH_RESPONSE__INIT;
    r.version = 1ull << 63;
    r.has_params = 1;
    r.params = &sl;
    return fleet__fetch_response__pack(&r, buf);
}

static void test_walk_any_cut(void **state) {
    (void)state;
    float v[9];
    for (int i = 0; i < 9; i++) v[i] = (float)i * 1.5f - 3;
    uint8_t buf[256];
    size_t len = packed_fetch(buf, v, 9);
    fl_pb_seg_t seg[2 * 256 + 1];
    seen s;
    /* one segment */
    seg[0] = (fl_pb_seg_t){buf, len};
    assert_int_equal(walk_segs(seg, 1, &s), 0);
    const seen one = s;
    assert_true(one.version == 1ull << 63 && one.p_version == 1ull << 63 && one.has_params == 1);
    assert_true(one.offset == 300 && one.total == 123456789 && one.dtype == FLEET__DTYPE__DTYPE_FLOAT32);
    assert_int_equal(one.n_shape, 1);
    assert_int_equal(one.shape[0], 9);
    assert_int_equal(one.data_len, sizeof v);
    assert_memory_equal(one.data, v, sizeof v);
    /* single bytes with an empty segment before each */
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        seg[n++] = (fl_pb_seg_t){buf + i, 0};
        seg[n++] = (fl_pb_seg_t){buf + i, 1};
    }
    seg[n++] = (fl_pb_seg_t){buf + len, 0};
    assert_int_equal(walk_segs(seg, n, &s), 0);
    assert_memory_equal(&s, &one, sizeof s);
    /* random cuts */
    fl_rng_t rng;
    fl_rng_init(&rng, 3);
    for (int it = 0; it < 500; it++) {
        n = 0;
        for (size_t at = 0; at < len;) {
            size_t k = fl_rng_below(&rng, 12);
            if (k > len - at) k = len - at;
            seg[n++] = (fl_pb_seg_t){buf + at, k};
            at += k;
        }
        assert_int_equal(walk_segs(seg, n, &s), 0);
        assert_memory_equal(&s, &one, sizeof s);
    }
}

static void test_cursor_reads_and_seeks(void **state) {
    (void)state;
    uint8_t bytes[40];
    for (int i = 0; i < 40; i++) bytes[i] = (uint8_t)(i + 1);
    const fl_pb_seg_t seg[] = {{bytes, 3}, {bytes + 3, 0}, {bytes + 3, 10}, {bytes + 13, 27}};
    fl_pb_cur_t c;
    fl_pb_cur_init(&c, seg, 4);
    assert_int_equal(c.len, 40);
    uint8_t out[40];
    assert_int_equal(fl_pb_read(&c, 40, out, 20), 0);
    assert_memory_equal(out, bytes, 20);
    assert_int_equal(c.pos, 20);
    fl_pb_seek(&c, 2); /* back */
    assert_int_equal(fl_pb_read(&c, 40, out, 12), 0);
    assert_memory_equal(out, bytes + 2, 12);
    fl_pb_seek(&c, 39);
    assert_int_equal(fl_pb_read(&c, 40, out, 2), -1); /* one past the end */
    assert_int_equal(fl_pb_read(&c, 39, out, 1), -1); /* past the given end */
    assert_int_equal(fl_pb_read(&c, 40, out, 1), 0);
    assert_int_equal(out[0], 40);
    assert_int_equal(fl_pb_read(&c, 40, NULL, 0), 0);
    /* spans: within one segment only */
    assert_ptr_equal(fl_pb_span(&c, 3, 10), bytes + 3);
    assert_ptr_equal(fl_pb_span(&c, 13, 27), bytes + 13);
    assert_null(fl_pb_span(&c, 12, 2));
    assert_null(fl_pb_span(&c, 13, 28));
    assert_non_null(fl_pb_span(&c, 40, 0));
    /* a varint across three segments: 0x81 | 0x80 0x80 | 0x01 = 1 + 2^21 */
    const uint8_t a[] = {0x81}, b[] = {0x80, 0x80}, d[] = {0x01, 0x05};
    const fl_pb_seg_t vs[] = {{a, 1}, {b, 2}, {d, 2}};
    fl_pb_cur_init(&c, vs, 3);
    uint64_t v;
    assert_int_equal(fl_pb_read_varint(&c, c.len, &v), 0);
    assert_true(v == 1 + (1ull << 21));
    assert_int_equal(fl_pb_read_varint(&c, c.len, &v), 0);
    assert_int_equal(v, 5);
    assert_int_equal(fl_pb_read_varint(&c, c.len, &v), -1); /* at the end */
    /* the largest value: 10 bytes */
    const uint8_t max[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    const fl_pb_seg_t ms = {max, sizeof max};
    fl_pb_cur_init(&c, &ms, 1);
    assert_int_equal(fl_pb_read_varint(&c, c.len, &v), 0);
    assert_true(v == UINT64_MAX);
}

static int count_fields(void *ctx, fl_pb_cur_t *c, const fl_pb_field_t *f) {
    (void)c;
    (void)f;
    ++*(int *)ctx;
    return 0;
}

/* A callback that reads one byte past its field. */
static int overread(void *ctx, fl_pb_cur_t *c, const fl_pb_field_t *f) {
    (void)ctx;
    if (f->wt == 2) return fl_pb_read(c, c->len, NULL, (size_t)f->v + 1);
    return 0;
}

static int walk_bytes(const uint8_t *p, size_t len, fl_pb_field_fn on) {
    uint8_t *copy = malloc(len ? len : 1); /* exactly len bytes: ASan catches a read past them */
    memcpy(copy, p, len);
    fl_pb_seg_t seg = {copy, len};
    fl_pb_cur_t c;
    fl_pb_cur_init(&c, &seg, 1);
    int n = 0;
    int r = fl_pb_walk(&c, c.len, on, &n);
    free(copy);
    return r;
}

static void test_malformed_is_refused(void **state) {
    (void)state;
    const uint8_t ok[] = {0x08, 0x96, 0x01, 0x12, 0x02, 0xaa, 0xbb, 0x1d, 1, 2, 3, 4, 0x21, 1, 2, 3, 4, 5, 6, 7, 8};
    assert_int_equal(walk_bytes(ok, sizeof ok, count_fields), 0);
    /* every truncation of it */
    const size_t ends[] = {0, 3, 7, 12, 21}; /* field boundaries: a walk there is whole */
    for (size_t n = 0; n < sizeof ok; n++) {
        int whole = 0;
        for (size_t k = 0; k < 5; k++) whole |= ends[k] == n;
        assert_int_equal(walk_bytes(ok, n, count_fields), whole ? 0 : -1);
    }
    const uint8_t unterminated[] = {0x08, 0x80};
    assert_int_equal(walk_bytes(unterminated, sizeof unterminated, count_fields), -1);
    const uint8_t eleven[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    assert_int_equal(walk_bytes(eleven, sizeof eleven, count_fields), -1);
    const uint8_t past[] = {0x12, 0x05, 1, 2};
    assert_int_equal(walk_bytes(past, sizeof past, count_fields), -1);
    const uint8_t huge[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    assert_int_equal(walk_bytes(huge, sizeof huge, count_fields), -1);
    for (uint8_t wt = 3; wt < 8; wt++) {
        if (wt == 5) continue;
        const uint8_t bad[] = {(uint8_t)(0x08 | wt), 0, 0, 0, 0, 0, 0, 0, 0};
        assert_int_equal(walk_bytes(bad, sizeof bad, count_fields), -1);
    }
    const uint8_t zero[] = {0x00, 0x01}, zero2[] = {0x80, 0x00, 0x01}; /* field 0, in one key byte and two */
    assert_int_equal(walk_bytes(zero, sizeof zero, count_fields), FL_PB_FIELD_ZERO);
    assert_int_equal(walk_bytes(zero2, sizeof zero2, count_fields), FL_PB_FIELD_ZERO);
    const uint8_t wide_key[] = {0xa8, 0x80, 0x80, 0x80, 0x10, 0x01}; /* 5 bytes, bit 32: field 2^29 + 5 */
    assert_int_equal(walk_bytes(wide_key, sizeof wide_key, count_fields), 0);
    const uint8_t long_key[] = {0xa8, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01}; /* field 5 in 6 bytes */
    assert_int_equal(walk_bytes(long_key, sizeof long_key, count_fields), -1);
    const uint8_t max_field[] = {0xf8, 0xff, 0xff, 0xff, 0x0f, 0x01}; /* 2^29 - 1 */
    assert_int_equal(walk_bytes(max_field, sizeof max_field, count_fields), 0);
    assert_int_equal(walk_bytes(ok, sizeof ok, overread), -1);
    /* a nested message longer than its parent: FetchResponse.params (3) of 2 bytes
     * holding a field whose length runs past them */
    seen s;
    /* a Tensor whose shape comes as fixed32 (wire type 5): not fleet.proto's Tensor */
    const uint8_t bad_tensor[] = {0x1a, 0x07, 0x22, 0x05, 0x15, 1, 2, 3, 4};
    fl_pb_seg_t bt = {bad_tensor, sizeof bad_tensor};
    assert_int_equal(walk_segs(&bt, 1, &s), -1);
    const uint8_t nested[] = {0x1a, 0x02, 0x22, 0x05, 1, 2, 3, 4, 5};
    fl_pb_seg_t seg = {nested, sizeof nested};
    assert_int_equal(walk_segs(&seg, 1, &s), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walk_any_cut),
        cmocka_unit_test(test_cursor_reads_and_seeks),
        cmocka_unit_test(test_malformed_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
