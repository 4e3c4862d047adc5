/* sumtree: a sum-tree with a parallel min-tree over non-negative leaf values, the index
 * behind proportional prioritized replay.
 *
 * Leaf i holds the sampling priority of storage slot i (for the replay table,
 * (|TD| + eps)^alpha). The tree answers, in O(log n): the total of all leaves, the
 * smallest positive leaf (which gives the largest importance weight), and find(u), the
 * leaf whose prefix-sum interval [sum of leaves before it, that + its value) holds u.
 *
 * Layout: an implicit tree with a fan-out of 8, stored level by level. The leaves are one
 * array of doubles (padded to a multiple of 8); above them every level holds one sum per
 * group of 8 entries of the level below, so the 8 children of a node are one 64-byte
 * cache line and a descent over 2^21 leaves reads 7 lines instead of the 21 of a binary
 * tree. Internal levels also hold the min of each group; a leaf's min is its value (or
 * +INFINITY when it is 0), computed on the fly. The padding entries hold 0 and are never
 * found.
 *
 * Exactness: a node is always recomputed from its 8 children in one fixed order, never
 * adjusted by a delta, so after any sequence of updates the tree is bit-identical to one
 * built from the current leaves (fl_sumtree_verify checks exactly that, and
 * fl_sumtree_rebuild recomputes every node from the leaves on demand). Rounding error
 * therefore cannot accumulate over a long run: the root errs from the exact sum of the
 * leaves by at most about 3 ulps per level (a few 1e-15 relative).
 *
 * Leaves equal to 0 are never returned by find and do not count towards min (an item
 * that can never be sampled never needs a weight). Memory: about 8.3 bytes per leaf
 * (8 for the leaf, 2/7 for the sums and mins above), in one allocation that asks for
 * transparent huge pages when it is large. Not thread-safe: the owner (the replay table)
 * serializes access. */
#ifndef FL_REPLAY_SUMTREE_H
#define FL_REPLAY_SUMTREE_H

#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"
#include "common/status.h"

/* Largest supported capacity (keeps the padded node count far from overflow). */
#define FL_SUMTREE_MAX_CAPACITY (UINT64_C(1) << 40)
/* Children per internal node. */
#define FL_SUMTREE_FANOUT 8

typedef struct fl_sumtree fl_sumtree_t;

/* A tree of `capacity` leaves (1 .. FL_SUMTREE_MAX_CAPACITY, any value), all 0.
 * FL_INVALID_ARGUMENT for a bad capacity, FL_NO_MEMORY if allocation fails. */
fl_status fl_sumtree_create(uint64_t capacity, fl_sumtree_t **out, fl_err_t *err);
void fl_sumtree_destroy(fl_sumtree_t *t);

uint64_t fl_sumtree_capacity(const fl_sumtree_t *t);
/* Bytes the tree occupies (its node block). */
uint64_t fl_sumtree_bytes(const fl_sumtree_t *t);

/* Sets leaf `index` (< capacity) to `value` (finite, >= 0; asserted). O(log n). */
void fl_sumtree_set(fl_sumtree_t *t, uint64_t index, double value);
/* Sets leaves first .. first+n-1 (first + n <= capacity) to values[0..n-1] and repairs
 * the ancestors level by level: O(n + log capacity), for contiguous ring inserts. */
void fl_sumtree_set_range(fl_sumtree_t *t, uint64_t first, size_t n, const double *values);
/* Sets leaves index[k] to values[k] for k < n, as n calls of fl_sumtree_set would (a later
 * entry for the same index wins), repairing all paths level by level so that their memory
 * accesses overlap (a parent shared by consecutive entries is repaired once). If `old` is
 * not NULL, old[k] receives the value leaf index[k] held just before entry k was written
 * (for a repeated index: the value of its previous entry). O(n log capacity). */
void fl_sumtree_set_many(fl_sumtree_t *t, size_t n, const uint64_t *index, const double *values, double *old);
double fl_sumtree_get(const fl_sumtree_t *t, uint64_t index);

/* Sum of all leaves. */
double fl_sumtree_total(const fl_sumtree_t *t);
/* Smallest positive leaf; +INFINITY when every leaf is 0. */
double fl_sumtree_min(const fl_sumtree_t *t);

/* The leaf i with prefix(i) <= u < prefix(i) + leaf(i), where prefix(i) is the sum of the
 * leaves before i. Requires total > 0 (asserted). u outside [0, total) is clamped to the
 * first / last positive leaf, as is a u that rounding pushes past the end of a subtree, so
 * the result is always a positive leaf. */
uint64_t fl_sumtree_find(const fl_sumtree_t *t, double u);

/* Stratified proportional sampling: splits [0, total) into n equal segments and writes to
 * out[j] the leaf found for one uniform point of segment j (so out is ordered by prefix
 * sum), and to values[j] (values may be NULL) that leaf's value. Requires total > 0 and
 * n > 0 (asserted). */
void fl_sumtree_sample_stratified(const fl_sumtree_t *t, fl_rng_t *rng, size_t n, uint64_t *out, double *values);

/* Recomputes every internal sum and min from the leaves, bottom-up: O(capacity). The
 * result is bit-identical to the incrementally maintained tree (see Exactness above); it
 * is a safety net for long runs and the reference that fl_sumtree_verify compares with. */
void fl_sumtree_rebuild(fl_sumtree_t *t);

/* Full O(capacity) consistency check: leaves finite and >= 0, padding leaves 0, every
 * internal node's sum and min equal to those recomputed from its children. FL_INTERNAL
 * naming the first bad node otherwise. For tests and debugging. */
fl_status fl_sumtree_verify(const fl_sumtree_t *t, fl_err_t *err);

/* Internal, shared with replay/table.c: `bytes` of 64-byte aligned memory, backed by
 * transparent huge pages where the OS offers them (large sizes only); NULL on failure.
 * Release with free(). */
void *fl__replay_alloc_big(size_t bytes);

#endif
