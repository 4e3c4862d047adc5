/* family: lookups over a list of env families (see family.h). */
#include "envs/core/family.h"

#include <stdio.h>
#include <string.h>

#include "common/suggest.h"

int fl_env_families_count(const fl_env_family_t *const *families, int n) {
    int total = 0;
    for (int f = 0; f < n; f++) total += families[f]->num_rows + (families[f]->count ? families[f]->count() : 0);
    return total;
}

const fl_env_def_t *fl_env_families_at(const fl_env_family_t *const *families, int n, int i) {
    if (i < 0) return NULL;
    for (int f = 0; f < n; f++) {
        const fl_env_family_t *fam = families[f];
        if (i < fam->num_rows) return fam->rows[i].def;
        i -= fam->num_rows;
        if (!fam->count) continue;
        int listed = fam->count();
        if (i < listed) return fam->at(i);
        i -= listed;
    }
    return NULL;
}

const fl_env_def_t *fl_env_families_find(const fl_env_family_t *const *families, int n, const char *name) {
    if (!name) return NULL;
    for (int f = 0; f < n; f++) {
        const fl_env_family_t *fam = families[f];
        for (int r = 0; r < fam->num_rows; r++)
            if (strcmp(fam->rows[r].def->name, name) == 0) return fam->rows[r].def;
        const fl_env_def_t *d = fam->find ? fam->find(name) : NULL;
        if (d) return d;
    }
    return NULL;
}

double fl_env_families_reward_bound(const fl_env_family_t *const *families, int n, const char *name) {
    if (!name) return 0.0;
    for (int f = 0; f < n; f++)
        for (int r = 0; r < families[f]->num_rows; r++)
            if (strcmp(families[f]->rows[r].def->name, name) == 0) return families[f]->rows[r].reward_bound;
    return 0.0;
}

fl_status fl_env_families_lookup(const fl_env_family_t *const *families, int n, const char *name,
                                 const fl_env_def_t **out, fl_err_t *err) {
    const fl_env_def_t *def = fl_env_families_find(families, n, name);
    if (out) *out = def;
    if (def) return FL_OK;
    /* The fixed rows by name, as many as fit; the dynamic families' envs are too many to
     * list, but the closest of every name is suggested. */
    char known[256];
    size_t used = 0;
    known[0] = '\0';
    int listed = 0;
    for (int f = 0; f < n; f++)
        for (int r = 0; r < families[f]->num_rows && used < sizeof known; r++) {
            int w = snprintf(known + used, sizeof known - used, "%s%s", listed++ ? ", " : "",
                             families[f]->rows[r].def->name);
            if (w < 0) break;
            used += (size_t)w;
        }
    fl_suggest_t sg;
    fl_suggest_init(&sg, name, name && strlen(name) >= 6 ? strlen(name) / 3 : 2);
    for (int f = 0; f < n; f++)
        for (int r = 0; r < families[f]->num_rows; r++) fl_suggest_consider(&sg, families[f]->rows[r].def->name);
    char names[FL_ENV_FAMILY_MAX_SUGGEST][80]; /* `best` may point into them */
    int named = 0;
    for (int f = 0; f < n; f++) {
        const fl_env_family_t *fam = families[f];
        if (!fam->count) continue;
        int c = fam->count();
        for (int i = 0; i < c && named < FL_ENV_FAMILY_MAX_SUGGEST; i++)
            if (fam->env_name(i, names[named], sizeof names[named]) == 0) fl_suggest_consider(&sg, names[named++]);
    }
    return fl_err_set(err, FL_NOT_FOUND, "unknown env '%s' (known: %s%s%s%s)", name ? name : "(null)", known,
                      sg.best ? "; did you mean '" : "", sg.best ? sg.best : "", sg.best ? "'?" : "");
}
