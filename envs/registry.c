/* registry: the table of built-in environments (see registry.h). */
#include "envs/registry.h"

#include <stdio.h>
#include <string.h>

#include "common/suggest.h"
#include "envs/atari.h"
#include "envs/classic.h"
#include "envs/minatar.h"
#include "envs/minatar_games2.h"
#include "envs/minatar_seaquest.h"

static const fl_env_def_t *const builtins[] = {
    &fl_env_cartpole,
    &fl_env_mountaincar,
    &fl_env_acrobot,
    &fl_env_minatar_asterix,
    &fl_env_minatar_asterix_v1,
    &fl_env_minatar_breakout,
    &fl_env_minatar_breakout_v1,
    &fl_env_minatar_freeway,
    &fl_env_minatar_freeway_v1,
    &fl_env_minatar_seaquest,
    &fl_env_minatar_seaquest_v1,
    &fl_env_minatar_space_invaders,
    &fl_env_minatar_space_invaders_v1,
};

#define NUM_BUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

/* The compiled-in envs, then the Atari games of the build's ROMs (envs/atari.h; their
 * -full and -rgb variants are found by name but not listed). */
int fl_env_count(void) { return NUM_BUILTINS + fl_atari_count(); }

const fl_env_def_t *fl_env_at(int i) {
    if (i >= 0 && i < NUM_BUILTINS) return builtins[i];
    return fl_atari_at(i - NUM_BUILTINS);
}

const fl_env_def_t *fl_env_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < NUM_BUILTINS; i++)
        if (strcmp(builtins[i]->name, name) == 0) return builtins[i];
    return fl_atari_find(name);
}

/* Each bound is what the step code can produce at most in one step:
 *   cartpole 1 (every step), mountaincar and acrobot |-1|;
 *   MinAtar breakout and freeway 1 (the reward is set, not added), asterix 2 (one
 *   contact check before and one after the entities move, 1 for gold each);
 *   space_invaders 100: one per alien hit this step, at most one alien per cell of the
 *   10x10 grid; seaquest 110: one per enemy killed (by a bullet, or by moving into
 *   one), at most one per cell, plus at most 10 for surfacing with six divers. */
static const struct {
    const char *name; /* a prefix: "minatar-breakout" covers its -v1 */
    double bound;
} reward_bounds[] = {
    {"cartpole", 1},           {"mountaincar", 1},          {"acrobot", 1},
    {"minatar-breakout", 1},   {"minatar-freeway", 1},      {"minatar-asterix", 2},
    {"minatar-space_invaders", 100}, {"minatar-seaquest", 110},
};

double fl_env_reward_bound(const char *name) {
    if (!name) return 0.0;
    for (size_t i = 0; i < sizeof reward_bounds / sizeof reward_bounds[0]; i++) {
        size_t n = strlen(reward_bounds[i].name);
        if (strncmp(name, reward_bounds[i].name, n) == 0 && (name[n] == '\0' || strcmp(name + n, "-v1") == 0))
            return reward_bounds[i].bound;
    }
    return 0.0;
}

fl_status fl_env_lookup(const char *name, const fl_env_def_t **out, fl_err_t *err) {
    const fl_env_def_t *def = fl_env_find(name);
    if (out) *out = def;
    if (def) return FL_OK;
    char known[256];
    size_t used = 0;
    known[0] = '\0';
    for (int i = 0; i < NUM_BUILTINS && used < sizeof known; i++) {
        int n = snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "", builtins[i]->name);
        if (n < 0) break;
        used += (size_t)n;
    }
    fl_suggest_t sg;
    fl_suggest_init(&sg, name, name && strlen(name) >= 6 ? strlen(name) / 3 : 2);
    for (int i = 0; i < NUM_BUILTINS; i++) fl_suggest_consider(&sg, builtins[i]->name);
    static char atari[FL_ATARI_MAX_GAMES][80]; /* `best` points into them */
    for (int i = 0; i < fl_atari_count() && i < FL_ATARI_MAX_GAMES; i++) {
        snprintf(atari[i], sizeof atari[i], "atari-%s", fl_atari_game_name(i));
        fl_suggest_consider(&sg, atari[i]);
    }
    return fl_err_set(err, FL_NOT_FOUND, "unknown env '%s' (known: %s%s%s%s)", name ? name : "(null)", known,
                      sg.best ? "; did you mean '" : "", sg.best ? sg.best : "", sg.best ? "'?" : "");
}
