/* shard: the balanced contiguous split of the parameter vector (see shard.h). */
#include "paramserver/shard.h"

#include <assert.h>

void fl_param_shard_range(uint64_t total, int P, int s, uint64_t *offset, uint64_t *n) {
    assert(P >= 1 && s >= 0 && s < P);
    uint64_t p = (uint64_t)P, i = (uint64_t)s;
    uint64_t base = total / p, extra = total % p;
    *n = base + (i < extra ? 1 : 0);
    *offset = i * base + (i < extra ? i : extra);
}
