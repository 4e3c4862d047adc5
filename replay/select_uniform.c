/* select_uniform: the uniform selector (replay/selector.h). Every live item with
 * probability 1/N whatever its priority, B independent draws: a window offset, or, when
 * items can be removed (max_times_sampled), an entry of the table's dense list of live
 * slots (kept with swap-removal, so the selector asks for it: live_list).
 *
 * Runs under the table's lock (replay/table_internal.h); no state of its own. */
#include "replay/selector.h"
#include "replay/table_internal.h"

static void select_uniform(fl_table_t *t, size_t B, uint64_t *slots, double *q, double *probs) {
    fl__window_t w = fl__table_window_start(t);
    for (size_t j = 0; j < B; j++) {
        if (t->live_list) {
            slots[j] = t->live_list[fl_rng_below(&t->rng, t->size)];
        } else {
            uint64_t s = w.slot + fl_rng_below(&t->rng, t->window);
            slots[j] = s >= t->capacity ? s - t->capacity : s;
        }
        q[j] = fl_sumtree_get(t->tree, slots[j]);
        if (probs) probs[j] = 1.0 / (double)t->size;
        if (t->mts > 0) fl__table_count_draw(t, slots[j]);
    }
}

const fl_selector_ops_t fl__select_uniform = {
    .name = "uniform",
    .prioritized = 0,
    .live_list = 1,
    .select = select_uniform,
    .verify = NULL,
};
