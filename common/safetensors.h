/* safetensors: reading and writing files in the safetensors format (the format of
 * Hugging Face's `safetensors` package, which PyTorch, NumPy and JAX users load directly).
 *
 * Layout: an 8-byte little-endian unsigned header length N, then N bytes of JSON, then
 * the tensors' bytes. The JSON is one object: for each tensor
 *   "name": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
 * with offsets into the byte buffer after the header (row-major, little-endian), and an
 * optional "__metadata__": {"key": "value", ...} of strings. The writer pads the header
 * with spaces to a multiple of 8 bytes and lays the data out by decreasing element size,
 * as the reference implementation does, so that every tensor is aligned.
 *
 * Dtypes here: F32, F64, BF16, U8, I32, I64 (fl_dtype has F32, BF16, U8, I32, I64; F64
 * is read as raw bytes with elem_bytes 8).
 *
 * Writing is atomic: PATH.tmp.<pid>.<n>, fsync, rename over PATH, fsync of the folder.
 * Reading validates everything before it returns: the header length against the file,
 * the JSON (strict: strings, integers, arrays and objects; no duplicate names), every
 * dtype, shape and offset pair (end - begin = the element count times the dtype size,
 * inside the buffer, tensors not overlapping and together covering the whole buffer);
 * any problem is FL_INVALID_ARGUMENT naming the file and what was wrong (FL_NOT_FOUND
 * for a missing file). The whole file is read into memory; tensor data pointers point
 * into it (8-byte aligned when the header length is a multiple of 8).
 * Thread-safety: a loaded file is immutable; any number of threads may read it. */
#ifndef FL_COMMON_SAFETENSORS_H
#define FL_COMMON_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define FL_ST_MAX_RANK 8
#define FL_ST_NAME_MAX 128
#define FL_ST_MAX_HEADER (100u << 20)

typedef enum fl_st_dtype { FL_ST_F32, FL_ST_F64, FL_ST_BF16, FL_ST_U8, FL_ST_I32, FL_ST_I64 } fl_st_dtype;

typedef struct fl_st_tensor {
    char name[FL_ST_NAME_MAX];
    fl_st_dtype dtype;
    int rank;
    int64_t shape[FL_ST_MAX_RANK];
    const void *data; /* writing: the caller's bytes; reading: inside the loaded file */
    size_t bytes;     /* element count times the dtype size */
} fl_st_tensor_t;

/* "F32", ...; the bytes of one element. */
const char *fl_st_dtype_name(fl_st_dtype d);
size_t fl_st_dtype_size(fl_st_dtype d);

/* Writes n tensors (names unique and non-empty, JSON-safe: printable ASCII without '"'
 * and '\\'; data of exactly the shape's bytes) and nmeta metadata pairs (same rules for
 * keys and values) to path. FL_INVALID_ARGUMENT naming a bad tensor or pair; FL_INTERNAL
 * naming the failed step on an I/O error. */
fl_status fl_safetensors_write(const char *path, const fl_st_tensor_t *tensors, int n, const char *const *meta_keys,
                               const char *const *meta_values, int nmeta, fl_err_t *err);

typedef struct fl_safetensors fl_safetensors_t;

fl_status fl_safetensors_read(const char *path, fl_safetensors_t **out, fl_err_t *err);
/* The same from bytes in memory (copied); `what` names them in messages. */
fl_status fl_safetensors_parse(const void *bytes, size_t len, const char *what, fl_safetensors_t **out, fl_err_t *err);
void fl_safetensors_free(fl_safetensors_t *f); /* NULL is a no-op */

int fl_safetensors_count(const fl_safetensors_t *f);
const fl_st_tensor_t *fl_safetensors_at(const fl_safetensors_t *f, int i); /* in file order of their offsets */
const fl_st_tensor_t *fl_safetensors_find(const fl_safetensors_t *f, const char *name);
/* The metadata value of key, or NULL. */
const char *fl_safetensors_meta(const fl_safetensors_t *f, const char *key);

#endif
