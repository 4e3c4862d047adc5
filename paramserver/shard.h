/* shard: how the flat parameter vector is cut into paramserver.shards contiguous slices.
 *
 * Shard s of P owns [offset, offset + n) of a total-element vector. Slices are
 * contiguous, in shard order, and balanced: the first total % P shards get one element
 * more than the others (so sizes differ by at most one, and a shard may be empty when
 * total < P). Servers use it to check that a publish or push is theirs; clients use it
 * to cut the vector. Pure function, thread-safe. */
#ifndef FL_PARAMSERVER_SHARD_H
#define FL_PARAMSERVER_SHARD_H

#include <stdint.h>

/* P >= 1 and 0 <= s < P (asserted). */
void fl_param_shard_range(uint64_t total, int P, int s, uint64_t *offset, uint64_t *n);

#endif
