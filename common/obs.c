/* obs: see obs.h. */
#include "common/obs.h"

#include <stdint.h>
#include <stdio.h>

size_t fl_obs_spec_count(const fl_obs_spec_t *s) {
    if (s->rank < 0 || s->rank > FL_OBS_MAX_RANK) return 0;
    size_t n = 1;
    for (int d = 0; d < s->rank; d++) {
        if (s->shape[d] < 1 || n > SIZE_MAX / (size_t)s->shape[d]) return 0;
        n *= (size_t)s->shape[d];
    }
    return n;
}

size_t fl_obs_spec_bytes(const fl_obs_spec_t *s) {
    size_t el = fl_dtype_size(s->dtype), n = fl_obs_spec_count(s);
    if (el == 0 || n == 0 || n > SIZE_MAX / el) return 0;
    return n * el;
}

int fl_obs_spec_equal(const fl_obs_spec_t *a, const fl_obs_spec_t *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return 0;
    for (int d = 0; d < a->rank && d < FL_OBS_MAX_RANK; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

fl_obs_spec_t fl_obs_spec_make(fl_dtype dtype, int rank, const int *shape) {
    fl_obs_spec_t s = {.dtype = dtype, .rank = rank};
    for (int d = 0; d < rank && d < FL_OBS_MAX_RANK; d++) s.shape[d] = shape[d];
    return s;
}

void fl_obs_spec_format_shape(const fl_obs_spec_t *s, char *buf, size_t len) {
    if (len == 0) return;
    int n = snprintf(buf, len, "(");
    size_t used = n > 0 ? (size_t)n : 0;
    for (int d = 0; d < s->rank && d < FL_OBS_MAX_RANK && used < len; d++) {
        n = snprintf(buf + used, len - used, "%s%d", d ? ", " : "", s->shape[d]);
        if (n < 0) return;
        used += (size_t)n;
    }
    if (used < len) snprintf(buf + used, len - used, ")");
}
