/* select_fifo: the FIFO selector (replay/selector.h), like Reverb's Fifo: every draw is
 * the oldest live item in insertion order, whatever its priority. The table's fifo_head
 * is a cursor on the oldest sequence number that may be live: draws move it past removed
 * items, and no live item is ever before it (checked by verify).
 *
 * Runs under the table's lock (replay/table_internal.h); no state of its own. */
#include "replay/selector.h"

#include <inttypes.h>

#include "replay/table_internal.h"

static void select_fifo(fl_table_t *t, size_t B, uint64_t *slots, double *q, double *probs) {
    fl__window_t w = fl__table_window_start(t);
    for (size_t j = 0; j < B; j++) {
        if (t->fifo_head < w.seq) t->fifo_head = w.seq;
        uint64_t s = fl__table_seq_slot(t, w, t->fifo_head);
        while (fl__table_slot_gone(t, s)) {
            t->fifo_head++;
            s = s + 1 == t->capacity ? 0 : s + 1;
        }
        slots[j] = s;
        q[j] = fl_sumtree_get(t->tree, s);
        if (probs) probs[j] = 1.0;
        if (t->mts > 0) fl__table_count_draw(t, s);
    }
}

/* No live item of the window comes before the cursor. */
static fl_status verify_fifo(const fl_table_t *t, fl_err_t *err) {
    if (t->size == 0) return FL_OK;
    fl__window_t w = fl__table_window_start(t);
    for (uint64_t seq = w.seq; seq < t->fifo_head; seq++)
        if (!fl__table_slot_gone(t, fl__table_seq_slot(t, w, seq)))
            return fl_err_set(err, FL_INTERNAL, "table: live seq %" PRIu64 " is before the fifo head %" PRIu64, seq,
                              t->fifo_head);
    return FL_OK;
}

const fl_selector_ops_t fl__select_fifo = {
    .name = "fifo",
    .prioritized = 0,
    .live_list = 0,
    .select = select_fifo,
    .verify = verify_fifo,
};
