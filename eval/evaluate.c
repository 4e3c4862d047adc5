/* evaluate: the episode loop of evaluate.h. */
#include "eval/evaluate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "actors/actor.h"
#include "common/clock.h"
#include "common/dtype.h"
#include "common/rng.h"
#include "common/stats.h"

/* One instance and the episode it plays (-1: idle). */
typedef struct slot {
    void *state;
    fl_rng_t env_rng, explore;
    int episode;
    int64_t steps;
    double ret;
} slot_t;

struct fl_evaluation {
    const fl_wrapped_env_t *w;
    const fl_env_def_t *def;
    const fl_env_options_t *opts;
    int parallel;
    size_t state_size, obs_bytes, obs_count;
    slot_t *slots;
    unsigned char *obs;    /* (parallel, obs_bytes) */
    unsigned char *packed; /* (parallel, obs_bytes): the active instances' rows, packed */
    float *q;              /* (parallel, num_actions) */
    int32_t *actions;      /* (parallel) */
    int *active;           /* (parallel): slot of each packed row */
};

void fl_evaluation_destroy(fl_evaluation_t *e) {
    if (!e) return;
    for (int i = 0; e->slots && i < e->parallel; i++) {
        if (e->slots[i].state) fl_wrapped_env_close(e->w, e->slots[i].state);
        free(e->slots[i].state);
    }
    free(e->slots);
    free(e->obs);
    free(e->packed);
    free(e->q);
    free(e->actions);
    free(e->active);
    free(e);
}

fl_status fl_evaluation_create(const fl_wrapped_env_t *w, const fl_env_options_t *opts, int parallel,
                               fl_evaluation_t **out, fl_err_t *err) {
    *out = NULL;
    if (!w || parallel < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "evaluation: parallel = %d, expected >= 1", parallel);
    const fl_env_def_t *def = fl_wrapped_env_info(w);
    if (fl_dtype_to_float(def->obs.dtype, NULL, 0, NULL) != 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "evaluation: env %s has %s observations, which a Q-network cannot read", def->name,
                          fl_dtype_name(def->obs.dtype));
    fl_evaluation_t *e = calloc(1, sizeof *e);
    if (!e) return fl_err_set(err, FL_NO_MEMORY, "evaluation: out of memory");
    e->w = w;
    e->def = def;
    e->opts = opts;
    e->parallel = parallel;
    e->state_size = fl_wrapped_env_state_size(w);
    e->obs_bytes = fl_wrapped_env_obs_size(w);
    e->obs_count = fl_env_obs_count(def);
    const size_t P = (size_t)parallel;
    e->slots = calloc(P, sizeof *e->slots);
    e->obs = calloc(P, e->obs_bytes ? e->obs_bytes : 1);
    e->packed = calloc(P, e->obs_bytes ? e->obs_bytes : 1);
    e->q = calloc(P * (size_t)def->num_actions, sizeof *e->q);
    e->actions = calloc(P, sizeof *e->actions);
    e->active = calloc(P, sizeof *e->active);
    int ok = e->slots && e->obs && e->packed && e->q && e->actions && e->active;
    for (size_t i = 0; ok && i < P; i++)
        ok = (e->slots[i].state = calloc(1, e->state_size ? e->state_size : 1)) != NULL;
    if (!ok) {
        fl_evaluation_destroy(e);
        return fl_err_set(err, FL_NO_MEMORY, "evaluation: out of memory for %d instances of %s", parallel, def->name);
    }
    if (opts) { /* options the env refuses fail here, not at the first episode */
        fl_status st = fl_wrapped_env_configure(w, e->slots[0].state, opts, err);
        fl_wrapped_env_close(w, e->slots[0].state);
        memset(e->slots[0].state, 0, e->state_size ? e->state_size : 1);
        if (st != FL_OK) {
            fl_evaluation_destroy(e);
            return st;
        }
    }
    *out = e;
    return FL_OK;
}

void fl_eval_summarize(const float *returns, const uint32_t *lengths, int n, fl_eval_stats_t *out) {
    memset(out, 0, sizeof *out);
    out->episodes = n;
    if (n < 1) return;
    double sl = 0;
    out->return_min = out->return_max = returns[0];
    out->length_min = out->length_max = lengths[0];
    for (int k = 0; k < n; k++) {
        sl += lengths[k];
        out->return_min = fmin(out->return_min, returns[k]);
        out->return_max = fmax(out->return_max, returns[k]);
        out->length_min = fmin(out->length_min, lengths[k]);
        out->length_max = fmax(out->length_max, lengths[k]);
    }
    const fl_stats_t rs = fl_stats_of_floats(returns, n);
    out->return_mean = rs.mean;
    out->return_std = rs.std;
    out->return_ci95 = rs.ci95;
    out->length_mean = sl / n;
}

/* Starts episode k on slot s: a zeroed, configured instance reset with stream k. */
static fl_status start_episode(fl_evaluation_t *e, int s, int k, uint64_t seed, unsigned char *obs, fl_err_t *err) {
    slot_t *sl = &e->slots[s];
    fl_wrapped_env_close(e->w, sl->state);
    memset(sl->state, 0, e->state_size ? e->state_size : 1);
    if (e->opts) FL_TRY(fl_wrapped_env_configure(e->w, sl->state, e->opts, err));
    fl_rng_init_stream(&sl->env_rng, seed, (uint64_t)k);
    fl_rng_init_stream(&sl->explore, seed, FL_EVAL_EXPLORE_STREAM + (uint64_t)k);
    sl->episode = k;
    sl->steps = 0;
    sl->ret = 0;
    fl_wrapped_env_reset(e->w, sl->state, &sl->env_rng, obs);
    return FL_OK;
}

static fl_status check_args(const fl_evaluation_t *e, fl_qnet_t *net, int episodes, double epsilon, fl_err_t *err) {
    if (!net) return fl_err_set(err, FL_INVALID_ARGUMENT, "evaluation: no network");
    if (episodes < 1) return fl_err_set(err, FL_INVALID_ARGUMENT, "evaluation: episodes = %d, expected >= 1", episodes);
    if (!(epsilon >= 0 && epsilon <= 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "evaluation: epsilon = %g, expected a value in [0, 1]", epsilon);
    if ((size_t)fl_qnet_obs_dim(net) != e->obs_count || fl_qnet_num_actions(net) != e->def->num_actions)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "evaluation: the network takes %d inputs and has %d actions; env %s has %zu observation "
                          "elements and %d actions",
                          fl_qnet_obs_dim(net), fl_qnet_num_actions(net), e->def->name, e->obs_count,
                          e->def->num_actions);
    if (fl_qnet_max_batch(net) < e->parallel)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "evaluation: the network's batch %d is below parallel = %d",
                          fl_qnet_max_batch(net), e->parallel);
    return FL_OK;
}

/* One batched forward over the n active instances and their epsilon-greedy actions. */
static fl_status act(fl_evaluation_t *e, fl_qnet_t *net, int n, double epsilon, fl_err_t *err) {
    const int A = e->def->num_actions;
    for (int r = 0; r < n; r++)
        memcpy(e->packed + (size_t)r * e->obs_bytes, e->obs + (size_t)e->active[r] * e->obs_bytes, e->obs_bytes);
    fl_status s = fl_qnet_forward_obs(net, e->def->obs.dtype, e->packed, n, e->q);
    if (s != FL_OK) return fl_err_set(err, s, "evaluation: Q-network forward of %d observations failed", n);
    for (int r = 0; r < n; r++)
        fl_actor_select_actions(e->q + (size_t)r * A, 1, A, epsilon, &e->slots[e->active[r]].explore, &e->actions[r]);
    return FL_OK;
}

typedef struct run_ctx {
    fl_eval_step_fn on_step;
    void *user;
    float *returns;
    uint32_t *lengths;
    int64_t max_steps;
    int started, finished, truncated;
    uint64_t steps;
} run_ctx_t;

/* Steps slot s with action a; on the episode's end records it and starts the next one
 * (or leaves the slot idle). */
static fl_status step_slot(fl_evaluation_t *e, run_ctx_t *c, int episodes, uint64_t seed, int s, int a, fl_err_t *err) {
    slot_t *sl = &e->slots[s];
    unsigned char *obs = e->obs + (size_t)s * e->obs_bytes;
    float reward = 0;
    int term = 0, trunc = 0;
    fl_wrapped_env_step(e->w, sl->state, &sl->env_rng, a, obs, &reward, &term, &trunc);
    sl->steps++;
    sl->ret += reward;
    c->steps++;
    if (c->on_step && c->on_step(c->user, sl->episode, sl->state, sl->steps, reward))
        return fl_err_set(err, FL_CANCELLED, "evaluation: stopped during episode %d", sl->episode);
    if (!term && !trunc && c->max_steps > 0 && sl->steps >= c->max_steps) trunc = 1;
    if (!term && !trunc) return FL_OK;
    c->returns[sl->episode] = (float)sl->ret;
    c->lengths[sl->episode] = (uint32_t)(sl->steps > UINT32_MAX ? UINT32_MAX : sl->steps);
    c->truncated += !term;
    c->finished++;
    sl->episode = -1;
    if (c->started >= episodes) return FL_OK;
    FL_TRY(start_episode(e, s, c->started++, seed, obs, err));
    if (c->on_step && c->on_step(c->user, sl->episode, sl->state, 0, 0))
        return fl_err_set(err, FL_CANCELLED, "evaluation: stopped at the start of episode %d", sl->episode);
    return FL_OK;
}

static fl_status play(fl_evaluation_t *e, fl_qnet_t *net, run_ctx_t *c, int episodes, double epsilon, uint64_t seed,
                      fl_err_t *err) {
    for (int s = 0; s < e->parallel; s++) e->slots[s].episode = -1;
    for (int s = 0; s < e->parallel && c->started < episodes; s++) {
        FL_TRY(start_episode(e, s, c->started++, seed, e->obs + (size_t)s * e->obs_bytes, err));
        if (c->on_step && c->on_step(c->user, e->slots[s].episode, e->slots[s].state, 0, 0))
            return fl_err_set(err, FL_CANCELLED, "evaluation: stopped at the start of episode %d", e->slots[s].episode);
    }
    while (c->finished < episodes) {
        int n = 0;
        for (int s = 0; s < e->parallel; s++)
            if (e->slots[s].episode >= 0) e->active[n++] = s;
        FL_TRY(act(e, net, n, epsilon, err));
        for (int r = 0; r < n; r++) FL_TRY(step_slot(e, c, episodes, seed, e->active[r], e->actions[r], err));
    }
    return FL_OK;
}

fl_status fl_evaluation_run(fl_evaluation_t *e, fl_qnet_t *net, int episodes, double epsilon, uint64_t seed,
                            int64_t max_episode_steps, fl_eval_step_fn on_step, void *user, float *returns,
                            uint32_t *lengths, fl_eval_stats_t *stats, fl_err_t *err) {
    FL_TRY(check_args(e, net, episodes, epsilon, err));
    double t0 = fl_clock_sec();
    run_ctx_t c = {.on_step = on_step, .user = user, .max_steps = max_episode_steps};
    c.returns = returns ? returns : malloc((size_t)episodes * sizeof *c.returns);
    c.lengths = lengths ? lengths : malloc((size_t)episodes * sizeof *c.lengths);
    fl_status s = FL_OK;
    if (!c.returns || !c.lengths)
        s = fl_err_set(err, FL_NO_MEMORY, "evaluation: out of memory for %d episodes", episodes);
    else
        s = play(e, net, &c, episodes, epsilon, seed, err);
    if (s == FL_OK && stats) {
        fl_eval_summarize(c.returns, c.lengths, episodes, stats);
        stats->truncated = c.truncated;
        stats->steps = c.steps;
        stats->seconds = fl_clock_sec() - t0;
    }
    if (c.returns != returns) free(c.returns);
    if (c.lengths != lengths) free(c.lengths);
    return s;
}
