/* obs: helpers on the observation signature -- element type and per-item shape -- that
 * envs produce, actors send, replay tables store and check, and learners feed to the
 * network. The type, fl_obs_spec_t, and FL_OBS_MAX_RANK are defined once, in
 * <fleet/env.h> (include/fleet/env.h), because an env definition holds one (its obs
 * member); every module that needs a signature holds an fl_obs_spec_t.
 *
 * A rank-0 signature is one scalar per item. Value type, caller-owned; functions are pure. */
#ifndef FL_COMMON_OBS_H
#define FL_COMMON_OBS_H

#include <stddef.h>

#include "common/dtype.h"
#include "fleet/env.h"

/* Bytes of one observation; 0 when the spec is invalid (unknown dtype, rank out of
 * range, a dimension < 1, or a size that overflows size_t). */
size_t fl_obs_spec_bytes(const fl_obs_spec_t *s);
/* Elements of one observation; 0 when the spec is invalid. */
size_t fl_obs_spec_count(const fl_obs_spec_t *s);
/* 1 when dtype, rank and the first rank dimensions agree. */
int fl_obs_spec_equal(const fl_obs_spec_t *a, const fl_obs_spec_t *b);
/* Builds a spec from a dtype and rank sizes (rank <= FL_OBS_MAX_RANK; unused entries 0). */
fl_obs_spec_t fl_obs_spec_make(fl_dtype dtype, int rank, const int *shape);
/* Writes the shape as "(4)" or "(84, 84, 4)" ("()" for a scalar) into buf. */
void fl_obs_spec_format_shape(const fl_obs_spec_t *s, char *buf, size_t len);

#endif
