#include "replay/ratelimit.h"

void fl_ratelimit_init(fl_ratelimit_t *r, double samples_per_insert, double error_buffer, uint64_t min_size) {
    r->spi = samples_per_insert > 0 ? samples_per_insert : 0;
    r->error_buffer = error_buffer > 0 ? error_buffer : 0;
    r->min_size = min_size;
    r->min_diff = (double)min_size * r->spi - r->error_buffer;
    r->max_diff = (double)min_size * r->spi + r->error_buffer;
    r->inserted = 0;
    r->sampled = 0;
}

double fl_ratelimit_diff(const fl_ratelimit_t *r) {
    return (double)r->inserted * r->spi - (double)r->sampled;
}

int fl_ratelimit_can_insert(const fl_ratelimit_t *r, uint64_t n) {
    if (r->spi <= 0 || r->inserted < r->min_size) return 1;
    return fl_ratelimit_diff(r) + (double)n * r->spi <= r->max_diff;
}

int fl_ratelimit_can_sample(const fl_ratelimit_t *r, uint64_t n, uint64_t size) {
    if (size < r->min_size) return 0;
    if (r->spi <= 0) return 1;
    return fl_ratelimit_diff(r) - (double)n >= r->min_diff;
}

void fl_ratelimit_clamp(fl_ratelimit_t *r) {
    if (r->spi <= 0 || r->inserted < r->min_size) return;
    double diff = fl_ratelimit_diff(r), want = diff > r->max_diff   ? r->max_diff
                                               : diff < r->min_diff ? r->min_diff
                                                                    : diff;
    double sampled = (double)r->inserted * r->spi - want;
    r->sampled = sampled > 0 ? (uint64_t)sampled : 0;
}

void fl_ratelimit_inserted(fl_ratelimit_t *r, uint64_t n) {
    r->inserted += n;
}
void fl_ratelimit_sampled(fl_ratelimit_t *r, uint64_t n) {
    r->sampled += n;
}
