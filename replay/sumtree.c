/* sumtree: an implicit 8-ary tree of sums (and mins) stored level by level.
 *
 * Level 0 is the leaves, len[0] = capacity rounded up to a multiple of 8. Entry p of level
 * l + 1 is the node over entries 8p .. 8p + 7 of level l, so the children of a node are
 * one aligned cache line. Every level except the top one is padded to a multiple of 8
 * entries (sum 0, min +INFINITY); the top level `levels` holds the root alone. Level 0
 * has no min array: the min of a leaf is its value, or +INFINITY for a 0 leaf, so that
 * the root's min is the smallest positive leaf. */
#include "replay/sumtree.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define F FL_SUMTREE_FANOUT
/* log8(FL_SUMTREE_MAX_CAPACITY) rounded up, plus one for the root. */
#define MAX_LEVELS 16

struct fl_sumtree {
    uint64_t capacity;
    int levels;               /* levels above the leaves; level `levels` is the root */
    uint64_t len[MAX_LEVELS]; /* entries of each level (a multiple of 8, except 1 at the top) */
    double *sum[MAX_LEVELS];  /* (len[l]) sums; sum[0] are the leaves */
    double *min[MAX_LEVELS];  /* (len[l]) mins, l >= 1; min[0] is NULL */
    double *block;            /* one allocation holding every level */
};

void *fl__replay_alloc_big(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    size_t align = bytes >= huge ? huge : 64;
    if (bytes > SIZE_MAX - align) return NULL;
    size_t rounded = (bytes + align - 1) / align * align;
    void *p = aligned_alloc(align, rounded ? rounded : align);
#ifdef MADV_HUGEPAGE
    /* Random access over hundreds of MiB otherwise misses the TLB on almost every item. */
    if (p && align == huge) (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
}

static inline double leaf_min(double v) {
    return v > 0.0 ? v : INFINITY;
}

static inline double min2(double a, double b) {
    return a < b ? a : b;
}

/* Sums of a group in a fixed pairwise order (the same everywhere, so that a node always
 * equals the value recomputed from its children). */
static inline double group_sum(const double *c) {
    return ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]));
}

static inline double group_min(const double *m) {
    return min2(min2(min2(m[0], m[1]), min2(m[2], m[3])), min2(min2(m[4], m[5]), min2(m[6], m[7])));
}

static inline double group_min_leaves(const double *c) {
    return min2(min2(min2(leaf_min(c[0]), leaf_min(c[1])), min2(leaf_min(c[2]), leaf_min(c[3]))),
                min2(min2(leaf_min(c[4]), leaf_min(c[5])), min2(leaf_min(c[6]), leaf_min(c[7]))));
}

/* Recomputes node p of level l >= 1 from its 8 children. */
static inline void repair(fl_sumtree_t *t, int l, uint64_t p) {
    const double *c = t->sum[l - 1] + F * p;
    t->sum[l][p] = group_sum(c);
    t->min[l][p] = l == 1 ? group_min_leaves(c) : group_min(t->min[l - 1] + F * p);
}

fl_status fl_sumtree_create(uint64_t capacity, fl_sumtree_t **out, fl_err_t *err) {
    *out = NULL;
    if (capacity < 1 || capacity > FL_SUMTREE_MAX_CAPACITY)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "sumtree capacity %llu: expected 1 .. %llu",
                          (unsigned long long)capacity, (unsigned long long)FL_SUMTREE_MAX_CAPACITY);
    fl_sumtree_t *t = calloc(1, sizeof(*t));
    if (!t) goto no_memory;
    t->capacity = capacity;
    t->len[0] = (capacity + F - 1) / F * F;
    int l = 0;
    for (;;) {
        uint64_t nodes = t->len[l] / F;
        l++;
        assert(l < MAX_LEVELS);
        if (nodes == 1) {
            t->len[l] = 1;
            break;
        }
        t->len[l] = (nodes + F - 1) / F * F;
    }
    t->levels = l;

    /* Every level starts on a 64-byte boundary: its length is rounded up to 8 doubles. */
    uint64_t doubles = 0;
    for (int k = 0; k <= t->levels; k++) doubles += (k == 0 ? 1 : 2) * ((t->len[k] + F - 1) / F * F);
    if (doubles > (uint64_t)SIZE_MAX / sizeof(double)) goto no_memory;
    t->block = fl__replay_alloc_big((size_t)doubles * sizeof(double));
    if (!t->block) goto no_memory;
    double *p = t->block;
    for (int k = 0; k <= t->levels; k++) {
        uint64_t n = (t->len[k] + F - 1) / F * F;
        t->sum[k] = p;
        memset(p, 0, (size_t)n * sizeof(double));
        p += n;
        if (k > 0) {
            t->min[k] = p;
            for (uint64_t i = 0; i < n; i++) p[i] = INFINITY;
            p += n;
        }
    }
    *out = t;
    return FL_OK;

no_memory:
    fl_sumtree_destroy(t);
    return fl_err_set(err, FL_NO_MEMORY, "sumtree: cannot allocate %llu leaves", (unsigned long long)capacity);
}

void fl_sumtree_destroy(fl_sumtree_t *t) {
    if (!t) return;
    free(t->block);
    free(t);
}

uint64_t fl_sumtree_capacity(const fl_sumtree_t *t) {
    return t->capacity;
}

uint64_t fl_sumtree_bytes(const fl_sumtree_t *t) {
    uint64_t doubles = 0;
    for (int k = 0; k <= t->levels; k++) doubles += (k == 0 ? 1 : 2) * ((t->len[k] + F - 1) / F * F);
    return doubles * sizeof(double);
}

void fl_sumtree_set(fl_sumtree_t *t, uint64_t index, double value) {
    assert(index < t->capacity);
    assert(isfinite(value) && value >= 0.0);
    t->sum[0][index] = value;
    for (int l = 1; l <= t->levels; l++) {
        index /= F;
        repair(t, l, index);
    }
}

void fl_sumtree_set_range(fl_sumtree_t *t, uint64_t first, size_t n, const double *values) {
    if (n == 0) return;
    assert(first < t->capacity && n <= t->capacity - first);
    double *leaf = t->sum[0];
    for (size_t k = 0; k < n; k++) {
        assert(isfinite(values[k]) && values[k] >= 0.0);
        leaf[first + k] = values[k];
    }
    uint64_t lo = first, hi = first + n - 1;
    for (int l = 1; l <= t->levels; l++) {
        lo /= F;
        hi /= F;
        for (uint64_t p = lo; p <= hi; p++) repair(t, l, p);
    }
}

void fl_sumtree_set_many(fl_sumtree_t *t, size_t n, const uint64_t *index, const double *values, double *old) {
    double *leaf = t->sum[0];
    for (size_t k = 0; k < n; k++) {
        assert(index[k] < t->capacity);
        assert(isfinite(values[k]) && values[k] >= 0.0);
        if (old) old[k] = leaf[index[k]];
        leaf[index[k]] = values[k];
    }
    /* Level by level, so that the repairs of one level (independent memory accesses) can
     * overlap. A node is repaired from children that are already final; one shared by
     * consecutive entries (sorted keys share most upper nodes) is repaired once. */
    for (int l = 1; l <= t->levels; l++) {
        int shift = 3 * l;
        uint64_t prev = UINT64_MAX;
        for (size_t k = 0; k < n; k++) {
            uint64_t p = index[k] >> shift;
            if (p != prev) repair(t, l, p);
            prev = p;
        }
    }
}

double fl_sumtree_get(const fl_sumtree_t *t, uint64_t index) {
    assert(index < t->capacity);
    return t->sum[0][index];
}

double fl_sumtree_total(const fl_sumtree_t *t) {
    return t->sum[t->levels][0];
}

double fl_sumtree_min(const fl_sumtree_t *t) {
    return t->min[t->levels][0];
}

/* One step of the prefix-sum descent: the child (0 .. 7) of the node whose children are
 * c[0..7] that holds residual *u, which becomes the residual within that child. The child
 * is the first whose running prefix sum exceeds u; prefix sums never decrease, so that is
 * the count of prefixes <= u, and it always has a positive sum (zero children are
 * stepped over). When u is at or past the end of the node (rounding, or u >= total), the
 * count reaches 8 and the last positive child is taken instead, whose last positive leaf
 * the rest of the descent then finds. The node's sum is positive, so it has one.
 *
 * The prefix sums are formed pairwise, pre[2i+1] = c[2i] + pre[2i] and
 * pre[2i+2] = (c[2i] + c[2i+1]) + pre[2i], so that two SSE2 lanes compute them; the
 * scalar fallback uses the same order and finds the same child. Branch-free: the
 * direction is a coin flip the predictor cannot learn. */
#if defined(__SSE2__)
static inline uint64_t pick(const double *c, double *u) {
    const __m128d z = _mm_setzero_pd();
    __m128d v0 = _mm_load_pd(c), v1 = _mm_load_pd(c + 2), v2 = _mm_load_pd(c + 4), v3 = _mm_load_pd(c + 6);
    __m128d p0 = _mm_add_pd(v0, _mm_unpacklo_pd(z, v0)); /* (c0, c0 + c1) */
    __m128d p1 = _mm_add_pd(v1, _mm_unpacklo_pd(z, v1));
    __m128d p2 = _mm_add_pd(v2, _mm_unpacklo_pd(z, v2));
    __m128d p3 = _mm_add_pd(v3, _mm_unpacklo_pd(z, v3));
    p1 = _mm_add_pd(p1, _mm_unpackhi_pd(p0, p0));
    p2 = _mm_add_pd(p2, _mm_unpackhi_pd(p1, p1));
    p3 = _mm_add_pd(p3, _mm_unpackhi_pd(p2, p2));
    __m128d x = _mm_set1_pd(*u);
    /* le: bit k set iff pre[k + 1] <= u; pos: bit k set iff c[k] > 0 */
    unsigned le = (unsigned)_mm_movemask_pd(_mm_cmple_pd(p0, x)) | (unsigned)_mm_movemask_pd(_mm_cmple_pd(p1, x)) << 2 |
                  (unsigned)_mm_movemask_pd(_mm_cmple_pd(p2, x)) << 4 |
                  (unsigned)_mm_movemask_pd(_mm_cmple_pd(p3, x)) << 6;
    unsigned pos =
        (unsigned)_mm_movemask_pd(_mm_cmpgt_pd(v0, z)) | (unsigned)_mm_movemask_pd(_mm_cmpgt_pd(v1, z)) << 2 |
        (unsigned)_mm_movemask_pd(_mm_cmpgt_pd(v2, z)) << 4 | (unsigned)_mm_movemask_pd(_mm_cmpgt_pd(v3, z)) << 6;
    unsigned cnt = (unsigned)__builtin_ctz(~le); /* le is 1s up to the count: prefixes never decrease */
    unsigned last = 31u - (unsigned)__builtin_clz(pos);
    unsigned k = cnt < last ? cnt : last;
    double pre[F + 1];
    pre[0] = 0.0;
    _mm_storeu_pd(pre + 1, p0);
    _mm_storeu_pd(pre + 3, p1);
    _mm_storeu_pd(pre + 5, p2);
    _mm_storeu_pd(pre + 7, p3);
    *u -= pre[k];
    return k;
}
#else
static inline uint64_t pick(const double *c, double *u) {
    double pre[F + 1];
    double x = *u;
    int cnt = 0, last = 0;
    pre[0] = 0.0;
    for (int k = 0; k < F; k += 2) {
        pre[k + 1] = c[k] + pre[k];
        pre[k + 2] = (c[k] + c[k + 1]) + pre[k];
    }
    for (int k = 0; k < F; k++) {
        cnt += pre[k + 1] <= x;
        last = c[k] > 0.0 ? k : last;
    }
    int k = cnt < last ? cnt : last;
    *u = x - pre[k];
    return (uint64_t)k;
}
#endif

uint64_t fl_sumtree_find(const fl_sumtree_t *t, double u) {
    assert(fl_sumtree_total(t) > 0.0);
    if (!(u > 0.0)) u = 0.0; /* also maps NaN to the first positive leaf */
    uint64_t node = 0;
    for (int l = t->levels - 1; l >= 0; l--) node = F * node + pick(t->sum[l] + F * node, &u);
    assert(node < t->capacity);
    return node;
}

/* Descents run in groups of LANES, one tree level at a time for the whole group, so the
 * cache misses of different descents overlap instead of queueing one behind another. */
#define LANES 32

void fl_sumtree_sample_stratified(const fl_sumtree_t *t, fl_rng_t *rng, size_t n, uint64_t *out, double *values) {
    assert(n > 0 && fl_sumtree_total(t) > 0.0);
    double segment = fl_sumtree_total(t) / (double)n;
    for (size_t base = 0; base < n; base += LANES) {
        size_t m = n - base < LANES ? n - base : LANES;
        uint64_t node[LANES];
        double u[LANES];
        for (size_t k = 0; k < m; k++) {
            node[k] = 0;
            u[k] = ((double)(base + k) + fl_rng_double(rng)) * segment;
        }
        for (int l = t->levels - 1; l >= 0; l--) {
            const double *level = t->sum[l];
            /* All of this level's lines are requested before the first is needed. */
            for (size_t k = 0; k < m; k++) __builtin_prefetch(level + F * node[k]);
            for (size_t k = 0; k < m; k++) node[k] = F * node[k] + pick(level + F * node[k], &u[k]);
        }
        for (size_t k = 0; k < m; k++) {
            assert(node[k] < t->capacity);
            out[base + k] = node[k];
        }
        if (values)
            for (size_t k = 0; k < m; k++) values[base + k] = t->sum[0][node[k]];
    }
}

void fl_sumtree_rebuild(fl_sumtree_t *t) {
    for (int l = 1; l <= t->levels; l++)
        for (uint64_t p = 0; p < t->len[l - 1] / F; p++) repair(t, l, p);
}

fl_status fl_sumtree_verify(const fl_sumtree_t *t, fl_err_t *err) {
    const double *leaf = t->sum[0];
    for (uint64_t j = 0; j < t->len[0]; j++) {
        if (j >= t->capacity && leaf[j] != 0.0)
            return fl_err_set(err, FL_INTERNAL, "sumtree: padding leaf %llu holds %g", (unsigned long long)j, leaf[j]);
        if (!isfinite(leaf[j]) || leaf[j] < 0.0)
            return fl_err_set(err, FL_INTERNAL, "sumtree: leaf %llu holds %g, expected finite >= 0",
                              (unsigned long long)j, leaf[j]);
    }
    for (int l = 1; l <= t->levels; l++) {
        uint64_t nodes = t->len[l - 1] / F;
        for (uint64_t p = 0; p < t->len[l]; p++) {
            double want_sum = 0.0, want_min = INFINITY;
            if (p < nodes) {
                const double *c = t->sum[l - 1] + F * p;
                want_sum = group_sum(c);
                want_min = l == 1 ? group_min_leaves(c) : group_min(t->min[l - 1] + F * p);
            }
            if (t->sum[l][p] != want_sum)
                return fl_err_set(err, FL_INTERNAL, "sumtree: level %d node %llu sum %.17g, children give %.17g", l,
                                  (unsigned long long)p, t->sum[l][p], want_sum);
            if (t->min[l][p] != want_min)
                return fl_err_set(err, FL_INTERNAL, "sumtree: level %d node %llu min %.17g, children give %.17g", l,
                                  (unsigned long long)p, t->min[l][p], want_min);
        }
    }
    return FL_OK;
}
