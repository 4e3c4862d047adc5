/* pbwalk: reads protobuf's wire format in place, without unpacking it into structs.
 *
 * The bytes may lie in one buffer or in a list of segments (a gRPC response as it
 * arrived, common/rpc.h fl_rpc_unary_segs), so that a large field can be copied once,
 * straight from the received segments to where it is used. A cursor walks a message's
 * fields in order and calls a function for each; the function reads the field (a
 * nested message with another walk, a bytes field with fl_pb_read) or leaves it, and the
 * walk goes on after the field either way.
 *
 * Every read is bounded by the end of the message being walked: malformed input (a
 * varint over 10 bytes, a length past the end, wire types 3, 4, 6 and 7, a key over 5
 * bytes) makes the walk return -1 (FL_PB_FIELD_ZERO for field number 0, which protobuf
 * reserves) with the cursor where it stopped, never read out of bounds. A 5-byte key
 * holds up to 35 bits, a 32-bit field number above its wire type, as protobuf-c reads it
 * (numbers past protobuf's 2^29 - 1 then pass as unknown fields).
 * Nothing allocates; thread-safe per cursor. */
#ifndef FL_COMMON_PBWALK_H
#define FL_COMMON_PBWALK_H

#include <stddef.h>
#include <stdint.h>

/* One contiguous piece of a message's bytes. */
typedef struct fl_pb_seg {
    const uint8_t *p;
    size_t len;
} fl_pb_seg_t;

/* A position in a list of segments (absolute offset `pos`, and where that lies). */
typedef struct fl_pb_cur {
    const fl_pb_seg_t *seg;
    size_t nseg, len; /* segments; their total bytes */
    size_t i, off;    /* segment and offset in it of pos (i == nseg at the end) */
    size_t pos;
} fl_pb_cur_t;

/* A cursor at the start of nseg segments (empty ones allowed). */
void fl_pb_cur_init(fl_pb_cur_t *c, const fl_pb_seg_t *seg, size_t nseg);
/* Moves the cursor to absolute offset pos (<= c->len). */
void fl_pb_seek(fl_pb_cur_t *c, size_t pos);
/* Reads a varint ending before `end`; -1 if it does not. */
int fl_pb_read_varint(fl_pb_cur_t *c, size_t end, uint64_t *v);
/* Copies n bytes ending before `end` to dst (NULL: skips them); -1 if they do not. */
int fl_pb_read(fl_pb_cur_t *c, size_t end, void *dst, size_t n);
/* The n bytes at pos when they lie in one segment (always, for one buffer), else NULL. */
const uint8_t *fl_pb_span(const fl_pb_cur_t *c, size_t pos, size_t n);

/* One field as the walk met it. */
typedef struct fl_pb_field {
    uint32_t num; /* field number */
    int wt;       /* wire type: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
    uint64_t v;   /* the value of wire types 0, 1 (little-endian bits) and 5; 2: the length */
    size_t pos;   /* wire type 2: offset of the field's bytes (the cursor is there at the call) */
} fl_pb_field_t;

#define FL_PB_FIELD_ZERO (-2) /* fl_pb_walk met field number 0 (the cursor at its key) */

/* Called for each field; a non-zero return ends the walk with that value. */
typedef int (*fl_pb_field_fn)(void *ctx, fl_pb_cur_t *c, const fl_pb_field_t *f);

/* Walks the fields from the cursor up to `end` (the message's end). Returns 0, -1 for
 * malformed input, FL_PB_FIELD_ZERO, or what `on` returned (a callback's negative value
 * reads as malformed input). The cursor ends at `end` on success. */
int fl_pb_walk(fl_pb_cur_t *c, size_t end, fl_pb_field_fn on, void *ctx);

/* A fleet.proto Tensor read in place: dtype, shape (every dimension counted in n_shape,
 * the first FL_PB_TENSOR_DIMS kept) and where its data lies (offset and length; 0 and 0
 * when absent). The one Tensor reader of the in-place decoders (replay's Sample reply,
 * the parameter server's Fetch reply). */
#define FL_PB_TENSOR_DIMS 16
typedef struct fl_pb_tensor {
    int dtype;
    size_t n_shape;
    int64_t shape[FL_PB_TENSOR_DIMS];
    size_t data_pos, data_len;
} fl_pb_tensor_t;

/* Reads the Tensor that field f (wire type 2, the cursor at its bytes) holds: 0, or -1
 * when it is malformed or one of its fields has another wire type than fleet.proto's
 * (shape packed or not). Unknown fields are skipped. */
int fl_pb_read_tensor(fl_pb_cur_t *c, const fl_pb_field_t *f, fl_pb_tensor_t *t);

#endif
