/* rng: a small, fast, seeded random number generator with per-object state.
 *
 * xoshiro256** seeded through splitmix64 (the step itself is fl_env_rng_u64 of <fleet/env.h>). Every object that needs
 * randomness (an env, an actor's exploration, a replay table's sampler) owns an fl_rng_t; nothing uses a global
 * generator. fl_rng_split derives independent streams (env i of a vector from the run seed and i). Not thread-safe per
 * object: one owner per fl_rng_t. */
#ifndef FL_COMMON_RNG_H
#define FL_COMMON_RNG_H

#include <stdint.h>

/* fl_rng_t and the generator's step are defined once, in the installed env header
 * (include/fleet/env.h), so that plugins draw the same numbers without linking fleet. */
#include "fleet/env.h"

void fl_rng_init(fl_rng_t *r, uint64_t seed);
/* A generator for stream `stream` of `seed` (e.g. env index), independent of others. */
void fl_rng_init_stream(fl_rng_t *r, uint64_t seed, uint64_t stream);
uint64_t fl_rng_u64(fl_rng_t *r);
/* Uniform in [0, 1) with 53 random bits. */
double fl_rng_double(fl_rng_t *r);
/* Uniform in [0, 1) as float (24 random bits). */
float fl_rng_float(fl_rng_t *r);
/* Uniform in [lo, hi). */
double fl_rng_uniform(fl_rng_t *r, double lo, double hi);
/* Uniform integer in [0, n), unbiased (n > 0). */
uint64_t fl_rng_below(fl_rng_t *r, uint64_t n);
/* Standard normal (Box-Muller, no cached state). */
double fl_rng_normal(fl_rng_t *r);

#endif
