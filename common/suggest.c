/* suggest: see suggest.h. */
#include "common/suggest.h"

#include <stdint.h>
#include <string.h>

size_t fl_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return SIZE_MAX;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

void fl_suggest_init(fl_suggest_t *s, const char *given, size_t limit) {
    s->given = given;
    s->limit = limit;
    s->best = NULL;
    s->best_dist = SIZE_MAX;
}

void fl_suggest_consider(fl_suggest_t *s, const char *candidate) {
    if (!s->given || !candidate) return;
    size_t d = fl_edit_distance(s->given, candidate);
    if (d <= s->limit && d < s->best_dist) {
        s->best = candidate;
        s->best_dist = d;
    }
}
