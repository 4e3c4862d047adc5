/* rng: see rng.h. The draws are the inline generator of <fleet/env.h>. */
#include "common/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void fl_rng_init(fl_rng_t *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

void fl_rng_init_stream(fl_rng_t *r, uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ 0x6a09e667f3bcc909ULL;
    uint64_t a = splitmix64(&x);
    uint64_t y = stream + 0xbb67ae8584caa73bULL;
    uint64_t b = splitmix64(&y);
    fl_rng_init(r, a ^ (b * 0x9e3779b97f4a7c15ULL));
}

uint64_t fl_rng_u64(fl_rng_t *r) {
    return fl_env_rng_u64(r);
}

double fl_rng_double(fl_rng_t *r) {
    return fl_env_rng_double(r);
}

float fl_rng_float(fl_rng_t *r) {
    return fl_env_rng_float(r);
}

double fl_rng_uniform(fl_rng_t *r, double lo, double hi) {
    return fl_env_rng_uniform(r, lo, hi);
}

uint64_t fl_rng_below(fl_rng_t *r, uint64_t n) {
    return fl_env_rng_below(r, n);
}

double fl_rng_normal(fl_rng_t *r) {
    double u1 = fl_rng_double(r), u2 = fl_rng_double(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
