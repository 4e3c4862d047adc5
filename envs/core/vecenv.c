/* vecenv: a vector of env instances with time limits and auto-reset (see vecenv.h).
 *
 * Instance states live in one zeroed block with a cache-line stride, so neighbouring
 * instances never share a line; generators, step counters and running returns are
 * parallel arrays indexed by instance. This is the one step loop of fleet: vectors of
 * wrapped envs (envs/core/wrappers.h, fl_wrapvec_t) are the same vector, stepping each
 * instance through the wrapper chain instead of the definition. */
#include "envs/core/vecenv.h"

#include <stdlib.h>
#include <string.h>

#define STATE_ALIGN 64

struct fl_vecenv {
    const char *kind;                /* "vecenv" or "wrapvec": the prefix of messages */
    const fl_env_def_t *def;         /* name, actions and, for plain envs, reset/step/configure */
    const fl__vec_instances_t *inst; /* NULL: instances are def's; else stepped through it */
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

/* Allocates the vector; the caller validated def and inst. */
static fl_status create(const char *kind, const fl_env_def_t *def, const fl__vec_instances_t *inst, size_t state_size,
                        size_t obs_size, int num_envs, uint64_t seed, int max_steps, fl_vecenv_t **out, fl_err_t *err) {
    *out = NULL;
    if (num_envs < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "%s '%s': num_envs is %d, expected >= 1", kind, def->name,
                          num_envs);
    size_t stride = (state_size + STATE_ALIGN - 1) / STATE_ALIGN * STATE_ALIGN;
    if (stride == 0) stride = STATE_ALIGN;
    if (stride < state_size || (size_t)num_envs > SIZE_MAX / stride)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "%s '%s': %d instances of %zu bytes overflow", kind, def->name,
                          num_envs, state_size);

    fl_vecenv_t *ve = calloc(1, sizeof *ve);
    if (!ve) goto oom;
    ve->kind = kind;
    ve->def = def;
    ve->inst = inst;
    ve->num_envs = num_envs;
    ve->max_steps = max_steps;
    ve->obs_size = obs_size;
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
    return fl_err_set(err, FL_NO_MEMORY, "%s '%s': out of memory for %d instances", kind, def->name, num_envs);
}

fl_status fl_vecenv_create(const fl_env_def_t *def, int num_envs, uint64_t seed, int max_episode_steps,
                           fl_vecenv_t **out, fl_err_t *err) {
    *out = NULL;
    FL_TRY(fl_env_validate(def, err));
    if (num_envs >= 1 && max_episode_steps < 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "vecenv '%s': max_episode_steps is %d, expected >= 0 (0 = the env's own %d)", def->name,
                          max_episode_steps, def->max_episode_steps);
    return create("vecenv", def, NULL, def->state_size, fl_env_obs_size(def), num_envs, seed,
                  max_episode_steps > 0 ? max_episode_steps : def->max_episode_steps, out, err);
}

fl_status fl__vecenv_create_instances(const fl__vec_instances_t *inst, int num_envs, uint64_t seed, fl_vecenv_t **out,
                                      fl_err_t *err) {
    return create("wrapvec", inst->def, inst, inst->state_size, inst->obs_size, num_envs, seed, 0, out, err);
}

static inline void *state_at(const fl_vecenv_t *ve, int i) {
    return ve->states + (size_t)i * ve->state_stride;
}

void fl_vecenv_destroy(fl_vecenv_t *ve) {
    if (!ve) return;
    /* What the instances hold outside their states (wrapped chains: the inner env's, at
     * the start of each state). */
    const fl_env_def_t *owner = ve->inst ? ve->inst->configure_def : ve->def;
    for (int i = 0; ve->states && i < ve->num_envs; i++) fl_env_close(owner, state_at(ve, i));
    free(ve->states);
    free(ve->rngs);
    free(ve->elapsed);
    free(ve->returns);
    free(ve);
}

fl_status fl_vecenv_configure(fl_vecenv_t *ve, const fl_env_options_t *opts, fl_err_t *err) {
    const fl_env_def_t *def = ve->def;
    if (!opts) return fl_err_set(err, FL_INVALID_ARGUMENT, "%s '%s': configure without options", ve->kind, def->name);
    if (!ve->needs_reset)
        return fl_err_set(err, FL_FAILED_PRECONDITION,
                          "%s '%s': fl_%s_configure must come before the first fl_%s_reset", ve->kind, def->name,
                          ve->kind, ve->kind);
    const fl_env_def_t *inner = ve->inst ? ve->inst->configure_def : def;
    for (int i = 0; i < ve->num_envs; i++) FL_TRY(fl_env_configure(inner, state_at(ve, i), opts, i, err));
    return FL_OK;
}

static inline void reset_one(const fl_vecenv_t *ve, int i, void *obs) {
    if (ve->inst)
        ve->inst->reset(ve->inst->ctx, state_at(ve, i), &ve->rngs[i], obs);
    else
        ve->def->reset(state_at(ve, i), &ve->rngs[i], obs);
    ve->elapsed[i] = 0;
    ve->returns[i] = 0.0;
}

void fl_vecenv_reset(fl_vecenv_t *ve, void *obs) {
    unsigned char *o = obs;
    for (int i = 0; i < ve->num_envs; i++) reset_one(ve, i, o + (size_t)i * ve->obs_size);
    ve->needs_reset = 0;
}

fl_status fl_vecenv_step(fl_vecenv_t *ve, const int32_t *actions, void *obs, float *rewards, uint8_t *terminated,
                         uint8_t *truncated, void *final_obs, fl_episode_stats_t *done_stats, fl_err_t *err) {
    const fl_env_def_t *def = ve->def;
    if (ve->needs_reset)
        return fl_err_set(err, FL_FAILED_PRECONDITION, "%s '%s': fl_%s_reset must come before the first step", ve->kind,
                          def->name, ve->kind);
    for (int i = 0; i < ve->num_envs; i++)
        if (actions[i] < 0 || actions[i] >= def->num_actions)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "%s '%s': env %d: action %d is out of range, expected 0..%d",
                              ve->kind, def->name, i, (int)actions[i], def->num_actions - 1);

    unsigned char *o = obs, *fo = final_obs;
    const size_t os = ve->obs_size;
    for (int i = 0; i < ve->num_envs; i++) {
        void *state = state_at(ve, i);
        unsigned char *oi = o + (size_t)i * os;
        float r = 0.0f;
        int term = 0, trunc = 0;
        if (ve->inst)
            ve->inst->step(ve->inst->ctx, state, &ve->rngs[i], (int)actions[i], oi, &r, &term, &trunc);
        else
            def->step(state, &ve->rngs[i], (int)actions[i], oi, &r, &term);
        ve->elapsed[i]++;
        ve->returns[i] += (double)r;
        if (!term && ve->max_steps > 0 && ve->elapsed[i] >= ve->max_steps) trunc = 1;
        rewards[i] = r;
        terminated[i] = (uint8_t)(term != 0);
        truncated[i] = (uint8_t)(!term && trunc);
        if (term || trunc) {
            if (fo) memcpy(fo + (size_t)i * os, oi, os);
            if (done_stats) {
                done_stats[i].episode_return = ve->returns[i];
                done_stats[i].length = ve->elapsed[i];
            }
            reset_one(ve, i, oi);
        } else if (done_stats) {
            done_stats[i].episode_return = 0.0;
            done_stats[i].length = 0;
        }
    }
    return FL_OK;
}

const fl_env_def_t *fl_vecenv_def(const fl_vecenv_t *ve) {
    return ve->def;
}
int fl_vecenv_num_envs(const fl_vecenv_t *ve) {
    return ve->num_envs;
}
size_t fl_vecenv_obs_size(const fl_vecenv_t *ve) {
    return ve->obs_size;
}
int fl_vecenv_max_episode_steps(const fl_vecenv_t *ve) {
    return ve->max_steps;
}
int64_t fl_vecenv_elapsed(const fl_vecenv_t *ve, int i) {
    return i >= 0 && i < ve->num_envs ? ve->elapsed[i] : -1;
}
void *fl_vecenv_state(fl_vecenv_t *ve, int i) {
    return i >= 0 && i < ve->num_envs ? state_at(ve, i) : NULL;
}

fl_rng_t *fl_vecenv_rng(fl_vecenv_t *ve, int i) {
    return i >= 0 && i < ve->num_envs ? &ve->rngs[i] : NULL;
}
