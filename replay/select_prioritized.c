/* select_prioritized: the prioritized selector (replay/selector.h). P(i) = q_i / sum_j q_j
 * over the live items, q_i = (p_i + priority_eps)^alpha: a batch of B splits the tree's
 * total into B equal segments and draws one item from each (stratified, with replacement
 * across segments; replay/sumtree.h). With max_times_sampled, a draw that lands on an
 * item removed earlier in the same call is drawn again from what remains.
 *
 * Runs under the table's lock (replay/table_internal.h); no state of its own. */
#include "replay/selector.h"
#include "replay/table_internal.h"

static void select_prioritized(fl_table_t *t, size_t B, uint64_t *slots, double *q, double *probs) {
    double total = fl_sumtree_total(t->tree);
    fl_sumtree_sample_stratified(t->tree, &t->rng, B, slots, q);
    if (t->mts == 0) {
        if (probs)
            for (size_t j = 0; j < B; j++) probs[j] = q[j] / total;
        return;
    }
    for (size_t j = 0; j < B; j++) {
        double tot = total;
        if (fl__table_slot_gone(t, slots[j])) {
            tot = fl_sumtree_total(t->tree);
            slots[j] = fl_sumtree_find(t->tree, fl_rng_double(&t->rng) * tot);
        }
        q[j] = fl_sumtree_get(t->tree, slots[j]);
        if (probs) probs[j] = q[j] / tot;
        fl__table_count_draw(t, slots[j]);
    }
}

const fl_selector_ops_t fl__select_prioritized = {
    .name = "prioritized",
    .prioritized = 1,
    .live_list = 0,
    .select = select_prioritized,
    .verify = NULL,
};
