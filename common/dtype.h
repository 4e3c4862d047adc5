/* dtype: element types of observations and tensors, shared by envs, replay and the wire.
 * The numeric values are the wire values of fleet.proto's DType. */
#ifndef FL_COMMON_DTYPE_H
#define FL_COMMON_DTYPE_H

#include <stddef.h>

/* fl_dtype itself is defined in the installed env header, the one source of the types
 * that plugins share with the tree. */
#include "fleet/env.h"

/* Bytes per element; 0 for FL_DTYPE_INVALID or unknown values. */
static inline size_t fl_dtype_size(fl_dtype d) {
    switch (d) {
    case FL_DTYPE_FLOAT32: return 4;
    case FL_DTYPE_UINT8: return 1;
    case FL_DTYPE_INT32: return 4;
    case FL_DTYPE_INT64: return 8;
    case FL_DTYPE_BFLOAT16: return 2;
    default: return 0;
    }
}

static inline const char *fl_dtype_name(fl_dtype d) {
    switch (d) {
    case FL_DTYPE_FLOAT32: return "float32";
    case FL_DTYPE_UINT8: return "uint8";
    case FL_DTYPE_INT32: return "int32";
    case FL_DTYPE_INT64: return "int64";
    case FL_DTYPE_BFLOAT16: return "bfloat16";
    default: return "invalid";
    }
}

/* Converts n elements of type d at src into floats at dst: float32 is copied, uint8 is
 * scaled by 1/255 (pixels and bit planes into [0, 1]), int32 is cast. Returns 0, or -1
 * for a dtype that has no float conversion here. */
static inline int fl_dtype_to_float(fl_dtype d, const void *src, size_t n, float *dst) {
    switch (d) {
    case FL_DTYPE_FLOAT32: {
        const float *s = (const float *)src;
        for (size_t i = 0; i < n; i++) dst[i] = s[i];
        return 0;
    }
    case FL_DTYPE_UINT8: {
        const unsigned char *s = (const unsigned char *)src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i] * (1.0f / 255.0f);
        return 0;
    }
    case FL_DTYPE_INT32: {
        const int *s = (const int *)src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
        return 0;
    }
    default: return -1;
    }
}

#endif
