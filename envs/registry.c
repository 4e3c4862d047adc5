/* registry: the families of built-in environments combined (see registry.h).
 *
 * The one file that knows every family: each family's folder defines its rows
 * (fl_env_family_t, envs/core/family.h) and the core's functions answer over this list.
 * A new family is one line here. */
#include "envs/registry.h"

#include "envs/atari/atari.h"
#include "envs/classic/classic.h"
#include "envs/core/family.h"
#include "envs/minatar/minatar.h"

/* The compiled-in families, then the Atari games of the build's ROMs (their -full and
 * -rgb variants are found by name but not listed). */
static const fl_env_family_t *const families[] = {
    &fl_env_family_classic,
    &fl_env_family_minatar,
    &fl_env_family_atari,
};

#define NUM_FAMILIES ((int)(sizeof families / sizeof families[0]))

int fl_env_count(void) {
    return fl_env_families_count(families, NUM_FAMILIES);
}

const fl_env_def_t *fl_env_at(int i) {
    return fl_env_families_at(families, NUM_FAMILIES, i);
}

const fl_env_def_t *fl_env_find(const char *name) {
    return fl_env_families_find(families, NUM_FAMILIES, name);
}

int fl_env_return_max(const char *name, double *max) {
    return fl_env_families_return_max(families, NUM_FAMILIES, name, max);
}

double fl_env_reward_bound(const char *name) {
    return fl_env_families_reward_bound(families, NUM_FAMILIES, name);
}

fl_status fl_env_lookup(const char *name, const fl_env_def_t **out, fl_err_t *err) {
    return fl_env_families_lookup(families, NUM_FAMILIES, name, out, err);
}
