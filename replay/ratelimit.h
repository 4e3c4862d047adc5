/* ratelimit: the samples-per-insert rate limiter of a replay shard (Reverb's
 * SampleToInsertRatio), so that a learner cannot over-sample a slow fleet and a fast
 * fleet cannot run away from the learner.
 *
 * With spi = samples_per_insert and diff = inserted * spi - sampled (items, not calls):
 *   - sampling needs size >= min_size and diff - n >= min_diff
 *   - inserting is free until min_size items were inserted, then needs
 *     diff + n * spi <= max_diff
 * where min_diff = min_size * spi - error_buffer and max_diff = min_size * spi +
 * error_buffer. spi <= 0 turns the limiter off (only min_size applies). The limiter is
 * plain arithmetic over counters: the caller holds the lock and does the waiting.
 * Not thread-safe by itself. */
#ifndef FL_REPLAY_RATELIMIT_H
#define FL_REPLAY_RATELIMIT_H

#include <stdint.h>

typedef struct fl_ratelimit {
    double spi, error_buffer;
    uint64_t min_size;
    double min_diff, max_diff;
    uint64_t inserted, sampled;
} fl_ratelimit_t;

void fl_ratelimit_init(fl_ratelimit_t *r, double samples_per_insert, double error_buffer, uint64_t min_size);
/* May n more items be inserted now? */
int fl_ratelimit_can_insert(const fl_ratelimit_t *r, uint64_t n);
/* May n items be sampled now from a table holding `size` items? */
int fl_ratelimit_can_sample(const fl_ratelimit_t *r, uint64_t n, uint64_t size);
void fl_ratelimit_inserted(fl_ratelimit_t *r, uint64_t n);
void fl_ratelimit_sampled(fl_ratelimit_t *r, uint64_t n);
/* After a restart from a checkpoint and the write-ahead log: the log holds the inserts
 * since the checkpoint but not the samples, so inserted * spi - sampled may lie far past
 * the window, which would hold every insert back until the learner re-sampled all of
 * it. Moves `sampled` so that the difference is within [min_diff, max_diff]. */
void fl_ratelimit_clamp(fl_ratelimit_t *r);
/* inserted * spi - sampled. */
double fl_ratelimit_diff(const fl_ratelimit_t *r);

#endif
