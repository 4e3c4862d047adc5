/* suggest: "did you mean" for names a user typed (config keys and sections, env names).
 *
 * fl_edit_distance is the Levenshtein distance (insertions, deletions, substitutions,
 * each 1). fl_suggest keeps the closest candidate seen so far: feed it every known name,
 * then read `best` (NULL when none was close enough). Pure functions on caller-owned
 * values; thread-safe. */
#ifndef FL_COMMON_SUGGEST_H
#define FL_COMMON_SUGGEST_H

#include <stddef.h>

/* SIZE_MAX when either string is longer than 64 bytes. */
size_t fl_edit_distance(const char *a, const char *b);

typedef struct fl_suggest {
    const char *given;
    size_t limit;     /* candidates farther than this are not suggested */
    const char *best; /* the closest candidate within limit, first one on ties */
    size_t best_dist;
} fl_suggest_t;

/* limit: a typo's distance, e.g. 2, or a third of the name's length. */
void fl_suggest_init(fl_suggest_t *s, const char *given, size_t limit);
void fl_suggest_consider(fl_suggest_t *s, const char *candidate);

#endif
