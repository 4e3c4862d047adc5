/* selector: the table of selectors (see selector.h). */
#include "replay/selector.h"

#include <stdio.h>
#include <string.h>

/* One row per selector, in id order (a row's index is its fl_selector value and the id
 * checkpoints store): append new rows, never reorder or remove one. Row <name> is the
 * fl__select_<name> defined in replay/select_<name>.c. */
#define FL__SELECTORS(X) \
    X(prioritized)       \
    X(uniform)           \
    X(fifo)

#define DECLARE(name) extern const fl_selector_ops_t fl__select_##name;
FL__SELECTORS(DECLARE)
#undef DECLARE

#define ROW(name) &fl__select_##name,
static const fl_selector_ops_t *const selectors[] = {FL__SELECTORS(ROW)};
#undef ROW

#define NSELECTORS ((int)(sizeof(selectors) / sizeof(selectors[0])))

const fl_selector_ops_t *fl_selector_ops(fl_selector s) {
    int i = (int)s;
    return i >= 0 && i < NSELECTORS ? selectors[i] : NULL;
}

const char *fl_selector_name(fl_selector s) {
    const fl_selector_ops_t *ops = fl_selector_ops(s);
    return ops ? ops->name : "invalid";
}

void fl_selector_list(char *buf, size_t len, int with_ids) {
    size_t used = 0;
    if (len == 0) return;
    buf[0] = '\0';
    for (int i = 0; i < NSELECTORS && used < len; i++) {
        const char *sep = i == 0 ? "" : i == NSELECTORS - 1 ? " or " : ", ";
        int n = with_ids ? snprintf(buf + used, len - used, "%s%s (%d)", sep, selectors[i]->name, i)
                         : snprintf(buf + used, len - used, "%s%s", sep, selectors[i]->name);
        if (n < 0) return;
        used += (size_t)n;
    }
}

fl_status fl_selector_parse(const char *name, fl_selector *out, fl_err_t *err) {
    for (int i = 0; name && i < NSELECTORS; i++)
        if (strcmp(name, selectors[i]->name) == 0) {
            *out = (fl_selector)i;
            return FL_OK;
        }
    char names[256];
    fl_selector_list(names, sizeof names, 0);
    return fl_err_set(err, FL_INVALID_ARGUMENT, "selector '%s': expected %s", name ? name : "(null)", names);
}
