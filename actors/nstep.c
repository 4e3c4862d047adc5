/* nstep: n-step transition builder (see nstep.h).
 *
 * Env e's ring holds up to n steps (obs, action, reward) starting at head[e]; a push
 * appends one step, then either flushes the whole ring (episode ended) or, when the ring
 * is full, emits its oldest step. Returns are summed back to front in double
 * (R = r_0 + gamma * (r_1 + gamma * (...))) and stored as float. */
#include "actors/nstep.h"

#include <stdlib.h>
#include <string.h>

struct fl_nstep {
    int num_envs;
    int n;
    float gamma;
    size_t obs_bytes;
    double *gamma_pow; /* (n + 1) gamma^m */

    /* rings: (num_envs, n) */
    unsigned char *ring_obs; /* (num_envs, n, obs_bytes) */
    int32_t *ring_action;
    float *ring_reward;
    int *head;  /* (num_envs) slot of the oldest pending step */
    int *count; /* (num_envs) pending steps */

    /* output columns, capacity `cap` */
    size_t ready, cap;
    unsigned char *out_obs, *out_next_obs;
    int32_t *out_action, *out_env, *out_steps;
    float *out_reward, *out_discount;
};

static void free_outputs(fl_nstep_t *t) {
    free(t->out_obs);
    free(t->out_next_obs);
    free(t->out_action);
    free(t->out_env);
    free(t->out_steps);
    free(t->out_reward);
    free(t->out_discount);
}

/* Grows the output columns to hold at least `need` transitions; on failure nothing
 * changes. */
static fl_status reserve(fl_nstep_t *t, size_t need) {
    if (need <= t->cap) return FL_OK;
    size_t cap = t->cap ? t->cap : 1;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return FL_NO_MEMORY;
        cap *= 2;
    }
    if (cap > SIZE_MAX / t->obs_bytes) return FL_NO_MEMORY;
    fl_nstep_t grown = *t;
    grown.out_obs = malloc(cap * t->obs_bytes);
    grown.out_next_obs = malloc(cap * t->obs_bytes);
    grown.out_action = malloc(cap * sizeof(int32_t));
    grown.out_env = malloc(cap * sizeof(int32_t));
    grown.out_steps = malloc(cap * sizeof(int32_t));
    grown.out_reward = malloc(cap * sizeof(float));
    grown.out_discount = malloc(cap * sizeof(float));
    if (!grown.out_obs || !grown.out_next_obs || !grown.out_action || !grown.out_env || !grown.out_steps ||
        !grown.out_reward || !grown.out_discount) {
        free_outputs(&grown);
        return FL_NO_MEMORY;
    }
    if (t->ready) {
        memcpy(grown.out_obs, t->out_obs, t->ready * t->obs_bytes);
        memcpy(grown.out_next_obs, t->out_next_obs, t->ready * t->obs_bytes);
        memcpy(grown.out_action, t->out_action, t->ready * sizeof(int32_t));
        memcpy(grown.out_env, t->out_env, t->ready * sizeof(int32_t));
        memcpy(grown.out_steps, t->out_steps, t->ready * sizeof(int32_t));
        memcpy(grown.out_reward, t->out_reward, t->ready * sizeof(float));
        memcpy(grown.out_discount, t->out_discount, t->ready * sizeof(float));
    }
    free_outputs(t);
    grown.cap = cap;
    *t = grown;
    return FL_OK;
}

fl_status fl_nstep_create(int num_envs, int n, float gamma, size_t obs_bytes, fl_nstep_t **out, fl_err_t *err) {
    *out = NULL;
    if (num_envs < 1) return fl_err_set(err, FL_INVALID_ARGUMENT, "nstep: num_envs is %d, expected >= 1", num_envs);
    if (n < 1) return fl_err_set(err, FL_INVALID_ARGUMENT, "nstep: n is %d, expected >= 1", n);
    if (!(gamma >= 0.0f && gamma <= 1.0f))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "nstep: gamma is %g, expected 0..1", (double)gamma);
    if (obs_bytes < 1) return fl_err_set(err, FL_INVALID_ARGUMENT, "nstep: obs_bytes is 0, expected >= 1");
    size_t slots = (size_t)num_envs * (size_t)n;
    if (slots > SIZE_MAX / 4 / obs_bytes)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "nstep: %d envs x %d steps x %zu bytes overflow", num_envs, n,
                          obs_bytes);

    fl_nstep_t *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->num_envs = num_envs;
    t->n = n;
    t->gamma = gamma;
    t->obs_bytes = obs_bytes;
    t->gamma_pow = malloc(((size_t)n + 1) * sizeof(double));
    t->ring_obs = malloc(slots * obs_bytes);
    t->ring_action = malloc(slots * sizeof(int32_t));
    t->ring_reward = malloc(slots * sizeof(float));
    t->head = calloc((size_t)num_envs, sizeof(int));
    t->count = calloc((size_t)num_envs, sizeof(int));
    if (!t->gamma_pow || !t->ring_obs || !t->ring_action || !t->ring_reward || !t->head || !t->count) goto oom;
    t->gamma_pow[0] = 1.0;
    for (int m = 1; m <= n; m++) t->gamma_pow[m] = t->gamma_pow[m - 1] * (double)gamma;
    if (reserve(t, 2 * slots) != FL_OK) goto oom;
    *out = t;
    return FL_OK;

oom:
    fl_nstep_destroy(t);
    return fl_err_set(err, FL_NO_MEMORY, "nstep: out of memory for %d envs x %d steps x %zu bytes", num_envs, n,
                      obs_bytes);
}

void fl_nstep_destroy(fl_nstep_t *t) {
    if (!t) return;
    free(t->gamma_pow);
    free(t->ring_obs);
    free(t->ring_action);
    free(t->ring_reward);
    free(t->head);
    free(t->count);
    free_outputs(t);
    free(t);
}

/* Emits the step in env e's ring slot `first` (ring-relative index 0..count-1 from head)
 * summing the rewards of the following `m` steps, with next_obs and terminal flag. */
static void emit(fl_nstep_t *t, int e, int first, int m, const unsigned char *next_obs, int terminal) {
    const int n = t->n;
    const size_t base = (size_t)e * (size_t)n;
    double ret = 0.0;
    for (int k = m - 1; k >= 0; k--) {
        int slot = (t->head[e] + first + k) % n;
        ret = (double)t->ring_reward[base + (size_t)slot] + (double)t->gamma * ret;
    }
    int slot0 = (t->head[e] + first) % n;
    size_t j = t->ready++;
    memcpy(t->out_obs + j * t->obs_bytes, t->ring_obs + (base + (size_t)slot0) * t->obs_bytes, t->obs_bytes);
    memcpy(t->out_next_obs + j * t->obs_bytes, next_obs, t->obs_bytes);
    t->out_action[j] = t->ring_action[base + (size_t)slot0];
    t->out_reward[j] = (float)ret;
    t->out_discount[j] = terminal ? 0.0f : (float)t->gamma_pow[m];
    t->out_env[j] = e;
    t->out_steps[j] = m;
}

fl_status fl_nstep_push(fl_nstep_t *t, const void *obs, const int32_t *actions, const float *rewards,
                        const uint8_t *terminated, const uint8_t *truncated, const void *next_obs) {
    const int n = t->n;
    const size_t ob = t->obs_bytes;
    if (reserve(t, t->ready + (size_t)t->num_envs * (size_t)n) != FL_OK) return FL_NO_MEMORY;
    const unsigned char *o = obs, *no = next_obs;
    for (int e = 0; e < t->num_envs; e++) {
        const size_t base = (size_t)e * (size_t)n;
        int slot = (t->head[e] + t->count[e]) % n;
        memcpy(t->ring_obs + (base + (size_t)slot) * ob, o + (size_t)e * ob, ob);
        t->ring_action[base + (size_t)slot] = actions[e];
        t->ring_reward[base + (size_t)slot] = rewards[e];
        t->count[e]++;

        const unsigned char *nxt = no + (size_t)e * ob;
        if (terminated[e] || truncated[e]) {
            int c = t->count[e];
            for (int first = 0; first < c; first++) emit(t, e, first, c - first, nxt, terminated[e] != 0);
            t->head[e] = 0;
            t->count[e] = 0;
        } else if (t->count[e] == n) {
            emit(t, e, 0, n, nxt, 0);
            t->head[e] = (t->head[e] + 1) % n;
            t->count[e]--;
        }
    }
    return FL_OK;
}

size_t fl_nstep_ready(const fl_nstep_t *t) {
    return t->ready;
}

void fl_nstep_view(const fl_nstep_t *t, fl_nstep_batch_t *out) {
    out->count = t->ready;
    out->obs_bytes = t->obs_bytes;
    out->obs = t->out_obs;
    out->action = t->out_action;
    out->reward = t->out_reward;
    out->discount = t->out_discount;
    out->next_obs = t->out_next_obs;
    out->env = t->out_env;
    out->steps = t->out_steps;
}

void fl_nstep_clear(fl_nstep_t *t) {
    t->ready = 0;
}

int fl_nstep_pending(const fl_nstep_t *t, int env) {
    return env >= 0 && env < t->num_envs ? t->count[env] : 0;
}

void fl_nstep_discard_pending(fl_nstep_t *t) {
    for (int e = 0; e < t->num_envs; e++) t->head[e] = t->count[e] = 0;
}

int fl_nstep_n(const fl_nstep_t *t) {
    return t->n;
}
float fl_nstep_gamma(const fl_nstep_t *t) {
    return t->gamma;
}
