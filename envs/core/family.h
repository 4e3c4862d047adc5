/* family: the registry's mechanism. A family of built-in environments (classic control,
 * MinAtar, Atari) is a table of rows, each a definition and its reward bound; a family
 * whose envs are only known at run time (Atari: the games of the ROMs present) gives
 * functions that list and find them instead of, or after, fixed rows.
 *
 * Each family's folder defines its own fl_env_family_t (envs/classic/classic.c,
 * envs/minatar/minatar.c, envs/atari/atari.c); envs/registry.c lists the families in the
 * order `fleet env list` shows them and answers the public lookups (envs/registry.h) with
 * the functions below. The core knows no family: families include this header, never
 * the reverse.
 *
 * The functions take the list of families and are pure over it (a dynamic family's
 * functions must be thread-safe); an env's index runs over every family's fixed rows,
 * then its listed dynamic envs, family after family. */
#ifndef FL_ENVS_FAMILY_H
#define FL_ENVS_FAMILY_H

#include <stddef.h>

#include "common/status.h"
#include "envs/core/env.h"

/* One registry row: a definition and the largest |reward| one step of it can give (a
 * bound its code guarantees, not the usual value), 0 where none is declared; the
 * Gymnasium id of the same env, accepted as its name ("CartPole-v1"), where the env is
 * that one exactly (NULL otherwise); and the most an episode can return where the game
 * caps it (has_return_max: CartPole's 500 steps of 1), for the plan's warning about a
 * target that cannot be reached. */
typedef struct fl_env_row {
    const fl_env_def_t *def;
    double reward_bound;
    const char *gym_id;
    int has_return_max;
    double return_max;
} fl_env_row_t;

typedef struct fl_env_family {
    const char *name;         /* "classic", "minatar", "atari" */
    const fl_env_row_t *rows; /* the fixed rows, listed in this order; may be NULL */
    int num_rows;
    /* A family whose envs are found at run time sets all four (NULL otherwise): count
     * and at list them after the fixed rows (at may answer NULL for an entry it cannot
     * build); env_name writes entry i's env name into buf without building its definition
     * (for "did you mean"), 0 or -1; find also answers names that are not listed
     * (variants such as Atari's -full and -rgb), or NULL. Their reward bound is 0. */
    int (*count)(void);
    const fl_env_def_t *(*at)(int i);
    int (*env_name)(int i, char *buf, size_t len);
    const fl_env_def_t *(*find)(const char *name);
    /* Optional (NULL: none): the family's own name for another library's name of one of
     * its envs ("ALE/Pong-v5", "PongNoFrameskip-v4" or "pong" -> "atari-pong") into buf,
     * 0, or -1 when it has none; suggested, not accepted, by an unknown name's message. */
    int (*suggest)(const char *name, char *buf, size_t len);
    /* Optional (NULL: none): the most an episode of the (dynamic) env `name` can return
     * where its game caps it, 0 with *max, or -1 when not known. */
    int (*return_max)(const char *name, double *max);
} fl_env_family_t;

/* Dynamic entries "did you mean" considers at most, over all families. */
#define FL_ENV_FAMILY_MAX_SUGGEST 128

/* The number of envs listed by the n families. */
int fl_env_families_count(const fl_env_family_t *const *families, int n);
/* Env i of that listing, NULL out of range. */
const fl_env_def_t *fl_env_families_at(const fl_env_family_t *const *families, int n, int i);
/* The definition named `name` (exact, case-sensitive): the first family's fixed row of
 * that name or Gymnasium id, else its find; NULL when none has it. */
const fl_env_def_t *fl_env_families_find(const fl_env_family_t *const *families, int n, const char *name);
/* Like find, but an unknown name is FL_NOT_FOUND with a message that lists the fixed rows'
 * names and the dynamic families' counts ("and 104 Atari games: atari-<game>"), and
 * suggests a family's own name for another library's id, else the closest of every name
 * listed. */
fl_status fl_env_families_lookup(const fl_env_family_t *const *families, int n, const char *name,
                                 const fl_env_def_t **out, fl_err_t *err);
/* The reward bound of the fixed row named `name` (or its Gymnasium id), 0 when none is. */
double fl_env_families_reward_bound(const fl_env_family_t *const *families, int n, const char *name);
/* The most an episode of env `name` can return, where its family declares it: 0 with
 * *max, or -1. */
int fl_env_families_return_max(const fl_env_family_t *const *families, int n, const char *name, double *max);

#endif
