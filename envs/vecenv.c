/* vecenv: a vector of env instances with time limits and auto-reset (see vecenv.h).
 *
 * Instance states live in one zeroed block with a cache-line stride, so neighbouring
 * instances never share a line; generators, step counters and running returns are
 * parallel arrays indexed by instance. */
#include "envs/vecenv.h"

#include <stdlib.h>
#include <string.h>

#define STATE_ALIGN 64

struct fl_vecenv {
    const fl_env_def_t *def;
    int num_envs;
    int max_steps;
    size_t obs_size;
    size_t state_stride;
    int needs_reset;
    unsigned char *states; /* (N, state_stride) */
    fl_rng_t *rngs;        /* (N) */
    int64_t *elapsed;      /* (N) steps in the current episode */
    double *returns;       /* (N) sum of rewards in the current episode */
};

fl_status fl_vecenv_create(const fl_env_def_t *def, int num_envs, uint64_t seed, int max_episode_steps,
                           fl_vecenv_t **out, fl_err_t *err) {
    *out = NULL;
    FL_TRY(fl_env_validate(def, err));
    if (num_envs < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "vecenv '%s': num_envs is %d, expected >= 1", def->name,
                          num_envs);
    if (max_episode_steps < 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "vecenv '%s': max_episode_steps is %d, expected >= 0 (0 = the env's own %d)", def->name,
                          max_episode_steps, def->max_episode_steps);
    size_t stride = (def->state_size + STATE_ALIGN - 1) / STATE_ALIGN * STATE_ALIGN;
    if (stride == 0) stride = STATE_ALIGN;
    if (stride < def->state_size || (size_t)num_envs > SIZE_MAX / stride)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "vecenv '%s': %d instances of %zu bytes overflow", def->name,
                          num_envs, def->state_size);

    fl_vecenv_t *ve = calloc(1, sizeof *ve);
    if (!ve) goto oom;
    ve->def = def;
    ve->num_envs = num_envs;
    ve->max_steps = max_episode_steps > 0 ? max_episode_steps : def->max_episode_steps;
    ve->obs_size = fl_env_obs_size(def);
    ve->state_stride = stride;
    ve->needs_reset = 1;
    ve->states = aligned_alloc(STATE_ALIGN, stride * (size_t)num_envs);
    ve->rngs = calloc((size_t)num_envs, sizeof *ve->rngs);
    ve->elapsed = calloc((size_t)num_envs, sizeof *ve->elapsed);
    ve->returns = calloc((size_t)num_envs, sizeof *ve->returns);
    if (!ve->states || !ve->rngs || !ve->elapsed || !ve->returns) goto oom;
    memset(ve->states, 0, stride * (size_t)num_envs);
    for (int i = 0; i < num_envs; i++) fl_rng_init_stream(&ve->rngs[i], seed, (uint64_t)i);
    *out = ve;
    return FL_OK;

oom:
    fl_vecenv_destroy(ve);
    return fl_err_set(err, FL_NO_MEMORY, "vecenv '%s': out of memory for %d instances", def->name, num_envs);
}

void fl_vecenv_destroy(fl_vecenv_t *ve) {
    if (!ve) return;
    free(ve->states);
    free(ve->rngs);
    free(ve->elapsed);
    free(ve->returns);
    free(ve);
}

static inline void *state_at(const fl_vecenv_t *ve, int i) {
    return ve->states + (size_t)i * ve->state_stride;
}

fl_status fl_vecenv_configure(fl_vecenv_t *ve, const fl_env_options_t *opts, fl_err_t *err) {
    const fl_env_def_t *def = ve->def;
    if (!opts) return fl_err_set(err, FL_INVALID_ARGUMENT, "vecenv '%s': configure without options", def->name);
    if (!ve->needs_reset)
        return fl_err_set(err, FL_FAILED_PRECONDITION,
                          "vecenv '%s': fl_vecenv_configure must come before the first fl_vecenv_reset", def->name);
    for (int i = 0; i < ve->num_envs; i++) FL_TRY(fl_env_configure(def, state_at(ve, i), opts, i, err));
    return FL_OK;
}

void fl_vecenv_reset(fl_vecenv_t *ve, void *obs) {
    unsigned char *o = obs;
    for (int i = 0; i < ve->num_envs; i++) {
        ve->def->reset(state_at(ve, i), &ve->rngs[i], o + (size_t)i * ve->obs_size);
        ve->elapsed[i] = 0;
        ve->returns[i] = 0.0;
    }
    ve->needs_reset = 0;
}

fl_status fl_vecenv_step(fl_vecenv_t *ve, const int32_t *actions, void *obs, float *rewards, uint8_t *terminated,
                         uint8_t *truncated, void *final_obs, fl_episode_stats_t *done_stats, fl_err_t *err) {
    const fl_env_def_t *def = ve->def;
    if (ve->needs_reset)
        return fl_err_set(err, FL_FAILED_PRECONDITION, "vecenv '%s': fl_vecenv_reset must come before the first step",
                          def->name);
    for (int i = 0; i < ve->num_envs; i++)
        if (actions[i] < 0 || actions[i] >= def->num_actions)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "vecenv '%s': env %d: action %d is out of range, expected 0..%d", def->name, i,
                              (int)actions[i], def->num_actions - 1);

    unsigned char *o = obs, *fo = final_obs;
    const size_t os = ve->obs_size;
    for (int i = 0; i < ve->num_envs; i++) {
        void *state = state_at(ve, i);
        unsigned char *oi = o + (size_t)i * os;
        float r = 0.0f;
        int term = 0;
        def->step(state, &ve->rngs[i], (int)actions[i], oi, &r, &term);
        ve->elapsed[i]++;
        ve->returns[i] += (double)r;
        int trunc = !term && ve->max_steps > 0 && ve->elapsed[i] >= ve->max_steps;
        rewards[i] = r;
        terminated[i] = (uint8_t)(term != 0);
        truncated[i] = (uint8_t)trunc;
        if (term || trunc) {
            if (fo) memcpy(fo + (size_t)i * os, oi, os);
            if (done_stats) {
                done_stats[i].episode_return = ve->returns[i];
                done_stats[i].length = ve->elapsed[i];
            }
            def->reset(state, &ve->rngs[i], oi);
            ve->elapsed[i] = 0;
            ve->returns[i] = 0.0;
        } else if (done_stats) {
            done_stats[i].episode_return = 0.0;
            done_stats[i].length = 0;
        }
    }
    return FL_OK;
}

const fl_env_def_t *fl_vecenv_def(const fl_vecenv_t *ve) { return ve->def; }
int fl_vecenv_num_envs(const fl_vecenv_t *ve) { return ve->num_envs; }
size_t fl_vecenv_obs_size(const fl_vecenv_t *ve) { return ve->obs_size; }
int fl_vecenv_max_episode_steps(const fl_vecenv_t *ve) { return ve->max_steps; }
int64_t fl_vecenv_elapsed(const fl_vecenv_t *ve, int i) {
    return i >= 0 && i < ve->num_envs ? ve->elapsed[i] : -1;
}
void *fl_vecenv_state(fl_vecenv_t *ve, int i) { return i >= 0 && i < ve->num_envs ? state_at(ve, i) : NULL; }
