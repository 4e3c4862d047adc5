/* selector: how a replay table picks the items of a sample, as one table of strategies.
 *
 * Adding a selector touches two files: a new replay/select_<name>.c that defines its
 * `const fl_selector_ops_t fl__select_<name>` (name, select function, properties), and
 * one row X(<name>) appended to FL__SELECTORS in replay/selector.c (the fuzz targets
 * take every replay/select_*.c). Then add a test to tests/test_replay_selectors.c. Nothing else names a selector:
 * fl_selector_name, fl_selector_parse, the table's configuration check, sampling, priority updates, fl_table_verify,
 * checkpoints and the replay service all ask the ops. (To offer it as replay.selector in a run configuration, also add
 * its name to that key's choices in common/config_keys.h.)
 *
 * A selector's fl_selector value is its row's index in that table, and it is the id a
 * checkpoint stores (replay/table.h): rows are only ever appended, never reordered or
 * removed. The enum names the built-in ids; a new selector is reached by its name
 * (fl_selector_parse) and needs no enum constant.
 *
 * Ownership: the ops are static constants. Failure: fl_selector_parse says what it
 * accepts. Thread-safety: every function here is pure. */
#ifndef FL_REPLAY_SELECTOR_H
#define FL_REPLAY_SELECTOR_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

/* The built-in selectors (what each does: replay/table.h, fl_table_sample, and
 * docs/design.md, "A sample, from the table to the learner and back", step 5). */
typedef enum fl_selector {
    FL_SELECTOR_PRIORITIZED = 0,
    FL_SELECTOR_UNIFORM = 1,
    FL_SELECTOR_FIFO = 2,
} fl_selector;

struct fl_table;

/* One selector's strategy and properties. */
typedef struct fl_selector_ops {
    const char *name; /* as fl_selector_name gives it and fl_selector_parse takes it */
    /* Draws are proportional to the items' sampling priorities: a sample needs a positive
     * total priority, items of priority 0 give no draws (they do not count towards the
     * draws left of max_times_sampled), importance weights are (q_min / q_i)^beta, and
     * the service reports the table's total priority as its sampling mass and its
     * smallest positive priority. Otherwise draws ignore priorities: the sampling mass
     * is the live size and weights are 1. */
    int prioritized;
    /* With max_times_sampled, the table keeps a dense list of the live slots (swap
     * removal), which select may draw from and which checkpoints store. */
    int live_list;
    /* Draws B >= 1 items under the table's lock: slots (B) receives their slots, q (B)
     * their sampling priorities and probs (B; may be NULL) the probability with which
     * each was chosen at its draw. With max_times_sampled it counts every draw
     * (fl__table_count_draw). The table has checked that the draws can be given: it is
     * not empty, has a positive total priority when `prioritized`, and has at least B
     * draws left with max_times_sampled. */
    void (*select)(struct fl_table *t, size_t B, uint64_t *slots, double *q, double *probs);
    /* The selector's own invariants, checked by fl_table_verify under the lock
     * (FL_INTERNAL with a message); NULL when it has none. */
    fl_status (*verify)(const struct fl_table *t, fl_err_t *err);
} fl_selector_ops_t;

/* The ops of selector s; NULL when s names no selector. */
const fl_selector_ops_t *fl_selector_ops(fl_selector s);

/* "prioritized", "uniform", "fifo", ...; "invalid" for a value that names no selector. */
const char *fl_selector_name(fl_selector s);
/* The selector named `name` (exactly one of the names above). FL_INVALID_ARGUMENT with a
 * message naming the accepted values otherwise; *out is then unchanged. */
fl_status fl_selector_parse(const char *name, fl_selector *out, fl_err_t *err);

/* Writes the accepted names as "prioritized, uniform or fifo", or with with_ids as
 * "prioritized (0), uniform (1) or fifo (2)", into buf (len bytes). */
void fl_selector_list(char *buf, size_t len, int with_ids);

#endif
