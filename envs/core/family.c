/* family: lookups over a list of env families (see family.h). */
#include "envs/core/family.h"

#include <stdio.h>
#include <string.h>

#include "common/suggest.h"

/* Whether row r answers to name: its env's name or its Gymnasium id. */
static int row_named(const fl_env_row_t *r, const char *name) {
    return strcmp(r->def->name, name) == 0 || (r->gym_id && strcmp(r->gym_id, name) == 0);
}

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
            if (row_named(&fam->rows[r], name)) return fam->rows[r].def;
        const fl_env_def_t *d = fam->find ? fam->find(name) : NULL;
        if (d) return d;
    }
    return NULL;
}

double fl_env_families_reward_bound(const fl_env_family_t *const *families, int n, const char *name) {
    if (!name) return 0.0;
    for (int f = 0; f < n; f++)
        for (int r = 0; r < families[f]->num_rows; r++)
            if (row_named(&families[f]->rows[r], name)) return families[f]->rows[r].reward_bound;
    return 0.0;
}

int fl_env_families_return_max(const fl_env_family_t *const *families, int n, const char *name, double *max) {
    if (!name) return -1;
    for (int f = 0; f < n; f++) {
        const fl_env_family_t *fam = families[f];
        for (int r = 0; r < fam->num_rows; r++)
            if (row_named(&fam->rows[r], name)) {
                if (!fam->rows[r].has_return_max) return -1;
                *max = fam->rows[r].return_max;
                return 0;
            }
        if (fam->return_max && fam->return_max(name, max) == 0) return 0;
    }
    return -1;
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
    /* the dynamic families, counted: "and 104 Atari games: atari-<game>" */
    char dyn[160] = "";
    for (int f = 0; f < n; f++) {
        const fl_env_family_t *fam = families[f];
        int c = fam->count ? fam->count() : 0;
        if (c <= 0) continue;
        char one[32] = "";
        if (fam->env_name(0, one, sizeof one) == 0) {
            char *dash = strchr(one, '-');
            if (dash) dash[1] = '\0';
        }
        size_t u = strlen(dyn);
        snprintf(dyn + u, sizeof dyn - u, ", and %d envs of the %s family: %s<game>", c, fam->name, one);
    }
    /* another library's id that a family maps to its own name */
    char own[96] = "";
    for (int f = 0; f < n && !own[0] && name; f++)
        if (families[f]->suggest && families[f]->suggest(name, own, sizeof own) != 0) own[0] = '\0';
    if (own[0])
        return fl_err_set(err, FL_NOT_FOUND,
                          "unknown env '%s': fleet's name for it is '%s' (its wrappers, frame "
                          "skip and sticky actions are the config's env.* keys: `fleet help config env`)",
                          name, own);
    if (!known[0] && !dyn[0])
        return fl_err_set(err, FL_NOT_FOUND, "unknown env '%s' (no env is registered)", name ? name : "(null)");
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
    return fl_err_set(err, FL_NOT_FOUND, "unknown env '%s' (known: %s%s; `fleet env list` lists them all)%s%s%s",
                      name ? name : "(null)", known, dyn, sg.best ? "; did you mean '" : "", sg.best ? sg.best : "",
                      sg.best ? "'?" : "");
}
