/* actor: the Ape-X actor loop (see actor.h). */
#include "actors/actor.h"

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/nstep.h"
#include "common/clock.h"
#include "common/control.h"
#include "common/log.h"
#include "common/retry.h"
#include "common/statefile.h"
#include "common/stop.h"
#include "envs/factory.h"
#include "envs/core/wrappers.h"
#include "paramserver/client.h"
#include "replay/client.h"
#include "replay/sharded.h"
#include "replay/wire.h"
#include "replay/writer.h"

/* Milliseconds one parameter fetch may take (it waits for the server to come up). */
#define FETCH_TIMEOUT_MS 1000
/* Seconds between fetch attempts while the parameter server is failing. */
#define FETCH_RETRY_S 1.0
/* Seconds between fetch attempts while waiting for the first parameters. */
#define PARAM_POLL_S 0.1
/* run.deterministic: seconds between fetches while waiting for a round's parameters. */
#define ROUND_POLL_S 0.002

double fl_actor_epsilon(double eps_base, double eps_alpha, int index, int count) {
    if (count <= 1) return eps_base;
    return pow(eps_base, 1.0 + eps_alpha * (double)index / (double)(count - 1));
}

void fl_actor_select_actions(const float *q, int B, int A, double epsilon, fl_rng_t *rng, int32_t *actions) {
    for (int b = 0; b < B; b++) {
        double u = fl_rng_double(rng);
        if (u < epsilon) {
            actions[b] = (int32_t)fl_rng_below(rng, (uint64_t)A);
            continue;
        }
        const float *row = q + (size_t)b * (size_t)A;
        int best = 0;
        float bestv = row[0];
        for (int a = 1; a < A; a++) {
            /* Strictly greater: ties keep the lowest index; a NaN never wins (and a NaN
             * first entry is replaced by the first number). */
            if (row[a] > bestv || (bestv != bestv && row[a] == row[a])) {
                best = a;
                bestv = row[a];
            }
        }
        actions[b] = best;
    }
}

size_t fl_actor_priority_scratch_floats(const fl_qnet_t *net) {
    return (size_t)fl_qnet_max_batch(net) * 2 * (size_t)fl_qnet_num_actions(net);
}

fl_status fl_actor_priorities(fl_qnet_t *net, fl_dtype obs_dtype, size_t n, const void *obs, const int32_t *actions,
                              const float *rewards, const float *discounts, const void *next_obs, float *scratch,
                              float *priorities, fl_err_t *err) {
    const size_t B = (size_t)fl_qnet_max_batch(net);
    const size_t D = (size_t)fl_qnet_obs_dim(net);
    const int A = fl_qnet_num_actions(net);
    const size_t esz = fl_dtype_size(obs_dtype);
    if (esz == 0 || fl_dtype_to_float(obs_dtype, obs, 0, scratch) != 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "priorities: observation dtype %s has no float conversion",
                          fl_dtype_name(obs_dtype));
    for (size_t k = 0; k < n; k++) {
        if (actions[k] < 0 || actions[k] >= A)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "priorities: transition %zu has action %d (expected 0 <= action < %d)", k,
                              (int)actions[k], A);
    }
    const size_t row_bytes = D * esz;
    float *q0 = scratch;            /* (B, A) Q(obs) */
    float *q1 = q0 + B * (size_t)A; /* (B, A) Q(next_obs) */
    for (size_t start = 0; start < n; start += B) {
        size_t m = n - start < B ? n - start : B;
        /* the observations as they are (the oneDNN backend lists uint8 planes' set values
         * straight from their bytes) */
        fl_status s = fl_qnet_forward_obs(net, obs_dtype, (const unsigned char *)obs + start * row_bytes, (int)m, q0);
        if (s != FL_OK) return fl_err_set(err, s, "priorities: forward of %zu observations failed", m);
        s = fl_qnet_forward_obs(net, obs_dtype, (const unsigned char *)next_obs + start * row_bytes, (int)m, q1);
        if (s != FL_OK) return fl_err_set(err, s, "priorities: forward of %zu next observations failed", m);
        for (size_t j = 0; j < m; j++) {
            size_t k = start + j;
            float target = rewards[k];
            /* A terminal transition (discount 0) does not look at next_obs at all, so
             * an infinite Q there cannot turn its priority into NaN. */
            if (discounts[k] != 0.0f) {
                const float *row = q1 + j * (size_t)A;
                float best = row[0];
                for (int a = 1; a < A; a++)
                    if (row[a] > best) best = row[a];
                target += discounts[k] * best;
            }
            priorities[k] = fabsf(target - q0[j * (size_t)A + (size_t)actions[k]]);
        }
    }
    return FL_OK;
}

/* splitmix64's finaliser: a bijective 64-bit mix. */

int fl_actor_batches_per_call(size_t obs_bytes, int64_t local_buffer) {
    double batch = (double)(local_buffer > 0 ? local_buffer : 1) * (2.0 * (double)obs_bytes + 16.0);
    double n = (double)FL_ACTOR_CALL_BYTES / batch;
    return n < 1.0 ? 1 : n > FL_ACTOR_MAX_BATCHES_PER_CALL ? FL_ACTOR_MAX_BATCHES_PER_CALL : (int)n;
}
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Unique per process incarnation (and per actor within a process, for tests that run
 * several): index, pid, a monotonic and a wall-clock reading, and a process counter. */
static uint64_t make_stream_id(int index) {
    static atomic_uint_fast64_t counter;
    uint64_t c = (uint64_t)atomic_fetch_add(&counter, 1);
    uint64_t h = mix64((uint64_t)(uint32_t)index);
    h = mix64(h ^ (uint64_t)getpid());
    h = mix64(h ^ (uint64_t)fl_clock_ns());
    h = mix64(h ^ (uint64_t)(int64_t)(fl_clock_wall() * 1e9));
    h = mix64(h ^ c);
    return h ? h : 1;
}

/* Everything one actor owns; released by fl_actor_destroy. */
struct fl_actor {
    fl_actor_opts_t o; /* the caller's options; its strings point to the copies below */
    char *env_name, *env_plugin, *env_wrappers, *env_args, *model_spec, *state_dir;
    char state_path[1100]; /* state_dir/actor-<index>.state, or "" */
    uint64_t acked_base;   /* transitions acknowledged before a resume */
    double state_saved_at;
    fl_env_options_t env_opts; /* the envs' settings (the vector keeps a pointer to them) */
    int index, num_envs, num_actions;
    fl_wrapped_env_t *wenv;  /* env.name wrapped with env.wrappers */
    const fl_env_def_t *def; /* its spaces (fl_wrapped_env_info) */
    size_t obs_bytes, obs_count;
    double epsilon;
    fl_rng_t explore;

    fl_wrapvec_t *envs;
    fl_qnet_t *net;
    fl_nstep_t *nstep;
    fl_replay_client_t *replay;
    fl_replay_writer_t *writer;
    fl_param_client_t *params;
    fl_reporter_t *reporter;

    unsigned char *obs, *next, *final_obs, *next_true; /* (N, obs_bytes) each */
    float *q;                                          /* (N, A) */
    int32_t *actions;                                  /* (N) */
    float *rewards;                                    /* (N) */
    uint8_t *terminated, *truncated;                   /* (N) */
    fl_episode_stats_t *done;                          /* (N) */
    float *scratch;                                    /* fl_actor_priority_scratch_floats */
    float *prio;                                       /* (prio_cap) */
    size_t prio_cap;

    atomic_int stop; /* fl_actor_stop */
    int ran;         /* fl_actor_run was called */
    int leaving;     /* the final report is being sent (Report.leaving) */
    int warned_nonfinite, warned_large, fetch_failing;
    uint64_t round_acked; /* run.deterministic: transitions the shard took in Round calls */
    uint64_t length_sum;  /* lengths of the episodes ended so far */
    double fetch_failed_at;
    fl_actor_stats_t st;
};
typedef struct fl_actor actor_t;

void fl_actor_destroy(fl_actor_t *a) {
    if (!a) return;
    fl_reporter_destroy(a->reporter);
    fl_param_client_destroy(a->params);
    fl_replay_writer_destroy(a->writer);
    fl_replay_client_destroy(a->replay);
    fl_nstep_destroy(a->nstep);
    fl_qnet_destroy(a->net);
    fl_wrapvec_destroy(a->envs);
    fl_wrapped_env_destroy(a->wenv);
    free(a->obs);
    free(a->next);
    free(a->final_obs);
    free(a->next_true);
    free(a->q);
    free(a->actions);
    free(a->rewards);
    free(a->terminated);
    free(a->truncated);
    free(a->done);
    free(a->scratch);
    free(a->prio);
    free(a->env_name);
    free(a->env_plugin);
    free(a->env_wrappers);
    free(a->env_args);
    free(a->model_spec);
    free(a->state_dir);
    free(a);
}

static void report(actor_t *a, int force) {
    fl_report_t r;
    memset(&r, 0, sizeof r);
    r.env_steps = a->st.env_steps;
    r.episodes = a->st.episodes;
    r.transitions_acked = a->acked_base + a->round_acked + (a->writer ? fl_replay_writer_acked(a->writer) : 0);
    r.param_version = a->st.param_version;
    r.epsilon = a->epsilon;
    r.leaving = a->leaving;
    /* The writer's backlog: what a supervisor's accounting needs besides the acked. */
    static const char *const names[] = {"transitions_pending", "transitions_dropped"};
    double values[2] = {a->writer ? (double)fl_replay_writer_pending(a->writer) : 0,
                        a->writer ? (double)fl_replay_writer_dropped(a->writer) : 0};
    r.n_extra = 2;
    r.extra_names = names;
    r.extra_values = values;
    fl_reporter_tick(a->reporter, &r, force);
}

static int should_stop(actor_t *a) {
    if (fl_stop_requested() || atomic_load(&a->stop) || fl_reporter_should_stop(a->reporter)) return 1;
    return a->o.max_steps > 0 && a->st.env_steps >= (uint64_t)a->o.max_steps;
}

/* The writer waits for a shard that holds inserts back (rate limited, away): the actor
 * goes on reporting meanwhile, and stops waiting when asked to stop. */
static int writer_waits(void *ctx) {
    actor_t *a = ctx;
    report(a, 0);
    return should_stop(a);
}

/* One fetch-if-newer straight into the network's parameters. Parameters the actor
 * cannot use (another model's size, a sharded vector) are fatal; anything else (the
 * server is down or slow) is transient: logged once, and retried no sooner than
 * FETCH_RETRY_S later so that a missing server does not stall every sync. */
static fl_status fetch_params(actor_t *a, fl_err_t *err) {
    if (a->fetch_failing && fl_clock_sec() - a->fetch_failed_at < FETCH_RETRY_S) return FL_OK;
    fl_err_t e;
    fl_err_init(&e);
    int updated = 0;
    uint64_t version = a->st.param_version;
    fl_status s = fl_param_fetch(a->params, &version, fl_qnet_params(a->net), fl_qnet_num_params(a->net), &updated,
                                 FETCH_TIMEOUT_MS, &e);
    if (s == FL_INVALID_ARGUMENT || s == FL_UNIMPLEMENTED) {
        fl_err_set(err, s, "parameter server: %s (model.spec \"%s\" has %zu parameters)", e.msg, a->o.model_spec,
                   fl_qnet_num_params(a->net));
        return s;
    }
    if (s != FL_OK) {
        if (!a->fetch_failing) FL_WARN("parameter fetch failed (will retry): %s", e.msg);
        a->fetch_failing = 1;
        a->fetch_failed_at = fl_clock_sec();
        return FL_OK;
    }
    if (a->fetch_failing) FL_INFO("parameter server reachable again");
    a->fetch_failing = 0;
    if (updated) {
        FL_DEBUG("parameters: version %llu", (unsigned long long)version);
        a->st.param_version = version;
        a->st.param_updates++;
    }
    return FL_OK;
}

/* Waits (polling) for the learner's first parameters; keeps the local initialisation
 * when none come in time or the actor is asked to stop. */
static fl_status wait_first_params(actor_t *a, fl_err_t *err) {
    double deadline = fl_clock_sec() + FL_ACTOR_PARAM_WAIT_S;
    int waiting_logged = 0;
    for (;;) {
        FL_TRY(fetch_params(a, err));
        if (a->st.param_version > 0) {
            FL_INFO("parameters: version %llu", (unsigned long long)a->st.param_version);
            return FL_OK;
        }
        if (should_stop(a)) return FL_OK;
        if (fl_clock_sec() >= deadline) {
            FL_WARN("no parameters published within %.0f s; going on with a locally initialised network",
                    FL_ACTOR_PARAM_WAIT_S);
            return FL_OK;
        }
        if (!waiting_logged) FL_INFO("waiting for the first parameters");
        waiting_logged = 1;
        report(a, 0);
        fl_sleep_sec(PARAM_POLL_S);
    }
}

/* The complete transitions the builder holds (*b), with their initial priorities in
 * a->prio. */
static fl_status ready_with_priorities(actor_t *a, fl_nstep_batch_t *out, fl_err_t *err) {
    fl_nstep_view(a->nstep, out);
    const fl_nstep_batch_t b = *out;
    if (b.count == 0) return FL_OK;
    if (b.count > a->prio_cap) {
        /* Not reached with the builder drained at local_buffer; kept for safety. */
        float *p = realloc(a->prio, b.count * sizeof *p);
        if (!p) return fl_err_set(err, FL_NO_MEMORY, "priorities: cannot grow to %zu", b.count);
        a->prio = p;
        a->prio_cap = b.count;
    }
    FL_TRY(fl_actor_priorities(a->net, a->def->obs.dtype, b.count, b.obs, b.action, b.reward, b.discount, b.next_obs,
                               a->scratch, a->prio, err));
    const float max_prio = a->o.max_priority > 0 ? (float)a->o.max_priority : HUGE_VALF;
    for (size_t k = 0; k < b.count; k++) {
        if (!isfinite(a->prio[k])) {
            if (!a->warned_nonfinite)
                FL_WARN("non-finite initial priority (Q-values of parameter version %llu); using 1",
                        (unsigned long long)a->st.param_version);
            a->warned_nonfinite = 1;
            a->prio[k] = 1.0f;
        } else if (a->prio[k] > max_prio) {
            if (!a->warned_large)
                FL_WARN(
                    "initial priority %g is above replay.max_priority = %g (Q-values of parameter version %llu); "
                    "sending %g",
                    (double)a->prio[k], a->o.max_priority, (unsigned long long)a->st.param_version, (double)max_prio);
            a->warned_large = 1;
            a->prio[k] = max_prio;
        }
    }
    return FL_OK;
}

/* Sends every complete transition the builder holds as one batch, with priorities. */
static fl_status send_ready(actor_t *a, fl_err_t *err) {
    fl_nstep_batch_t b;
    FL_TRY(ready_with_priorities(a, &b, err));
    if (b.count == 0) return FL_OK;
    /* What remains refused (a non-finite observation, a reward beyond replay.max_abs_reward)
     * came from the env. */
    fl_status s =
        fl_replay_writer_append(a->writer, b.count, b.obs, b.action, b.reward, b.discount, b.next_obs, a->prio, err);
    if (s == FL_INVALID_ARGUMENT) fl_err_prefix(err, "env %s", a->env_name);
    if (s != FL_OK) return s;
    a->st.transitions_sent += b.count;
    fl_nstep_clear(a->nstep);
    return FL_OK;
}

/* One vector step: forward, act, step, feed the builder, record finished episodes. */
static fl_status step(actor_t *a, fl_err_t *err) {
    const int N = a->num_envs;
    fl_status s = fl_qnet_forward_obs(a->net, a->def->obs.dtype, a->obs, N, a->q);
    if (s != FL_OK) return fl_err_set(err, s, "Q-network forward of %d observations failed", N);
    fl_actor_select_actions(a->q, N, a->num_actions, a->epsilon, &a->explore, a->actions);
    FL_TRY(fl_wrapvec_step(a->envs, a->actions, a->next, a->rewards, a->terminated, a->truncated, a->final_obs, a->done,
                           err));
    /* The builder wants the true next observation: the final one where an episode ended. */
    memcpy(a->next_true, a->next, (size_t)N * a->obs_bytes);
    for (int i = 0; i < N; i++) {
        if (!a->terminated[i] && !a->truncated[i]) continue;
        memcpy(a->next_true + (size_t)i * a->obs_bytes, a->final_obs + (size_t)i * a->obs_bytes, a->obs_bytes);
        fl_reporter_episode(a->reporter, (float)a->done[i].episode_return, (uint32_t)a->done[i].length);
        a->st.episodes++;
        a->length_sum += (uint64_t)a->done[i].length;
        a->st.return_sum += a->done[i].episode_return;
    }
    s = fl_nstep_push(a->nstep, a->obs, a->actions, a->rewards, a->terminated, a->truncated, a->next_true);
    if (s != FL_OK) return fl_err_set(err, s, "n-step builder: cannot grow its output buffer");
    unsigned char *t = a->obs;
    a->obs = a->next;
    a->next = t;
    a->st.env_steps += (uint64_t)N;
    return FL_OK;
}

void fl_actor_opts_init(fl_actor_opts_t *o) {
    memset(o, 0, sizeof *o);
    fl_env_factory_opts_init(&o->env);
    o->count = 2;
    o->eps_base = 0.4;
    o->eps_alpha = 7;
    o->local_buffer = 50;
    o->sync_every = 400;
    o->fetch_bf16 = 0;
    o->max_steps = 0;
    o->max_backlog_mb = 64;
    o->n_step = 3;
    o->gamma = 0.99;
    o->model_spec = "dense(128) relu dense(128) relu dueling";
    o->input_scale = 1;
    o->backend = fl_qnet_default_backend();
    o->replay_shards = 1;
    o->max_abs_reward = FL_REPLAY_WRITER_MAX_ABS_REWARD;
    o->max_priority = FL_REPLAY_WRITER_MAX_PRIORITY;
    o->seed = 1;
    o->progress_every = 1.0;
    o->state_dir = "";
    o->state_every = 300;
}

/* A copy of s ("" for NULL) in *out; 0, or -1 when out of memory. */
static int copy_string(const char *s, char **out) {
    *out = strdup(s ? s : "");
    return *out ? 0 : -1;
}

/* The caller's options, with the actor's own copies of the strings. */
static fl_status copy_opts(actor_t *a, const fl_actor_opts_t *o, fl_err_t *err) {
    a->o = *o;
    if (copy_string(o->env.name, &a->env_name) || copy_string(o->env.plugin, &a->env_plugin) ||
        copy_string(o->env.wrappers, &a->env_wrappers) || copy_string(o->env.args, &a->env_args) ||
        copy_string(o->model_spec, &a->model_spec) || copy_string(o->state_dir, &a->state_dir))
        return fl_err_set(err, FL_NO_MEMORY, "actor: out of memory");
    a->o.state_dir = a->state_dir;
    if (a->state_dir[0]) snprintf(a->state_path, sizeof a->state_path, "%s/actor-%d.state", a->state_dir, a->index);
    a->o.env.name = a->env_name;
    a->o.env.plugin = a->env_plugin;
    a->o.env.wrappers = a->env_wrappers;
    a->o.env.args = a->env_args;
    a->o.model_spec = a->model_spec;
    return FL_OK;
}

/* Create, phase 1: the wrapped env and its vector of env.num_envs instances, the
 * epsilon and the seeds (one stream of run.seed per actor; envs, exploration and the
 * local init each take a draw of it; *init_rng gets the last). */
static fl_status open_envs(actor_t *a, fl_rng_t *init_rng, fl_err_t *err) {
    const fl_actor_opts_t *o = &a->o;
    a->num_envs = o->env.num_envs;
    FL_TRY(fl_env_create_wrapped(&o->env, &a->wenv, err));
    a->def = fl_wrapped_env_info(a->wenv);
    a->num_actions = a->def->num_actions;
    a->obs_bytes = fl_env_obs_size(a->def);
    a->obs_count = fl_env_obs_count(a->def);
    if (fl_dtype_to_float(a->def->obs.dtype, NULL, 0, NULL) != 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "actor: env %s has %s observations, which the Q-network cannot read", a->def->name,
                          fl_dtype_name(a->def->obs.dtype));
    a->epsilon = o->joined ? o->epsilon : fl_actor_epsilon(o->eps_base, o->eps_alpha, a->index, o->count);
    a->st.epsilon = a->epsilon;

    fl_rng_t seeder;
    fl_rng_init_stream(&seeder, o->incarnation ? mix64(o->seed ^ mix64((uint64_t)o->incarnation)) : o->seed,
                       (uint64_t)a->index);
    uint64_t env_seed = fl_rng_u64(&seeder);
    fl_rng_init(&a->explore, fl_rng_u64(&seeder));
    fl_rng_init(init_rng, fl_rng_u64(&seeder));

    FL_TRY(fl_wrapvec_create(a->wenv, a->num_envs, env_seed, &a->envs, err));
    fl_env_instance_options(&o->env, &a->env_opts);
    return fl_wrapvec_configure(a->envs, &a->env_opts, err);
}

#define ALLOC(field, count)                                                                            \
    do {                                                                                               \
        a->field = calloc((size_t)(count), sizeof *a->field);                                          \
        if (!a->field)                                                                                 \
            return fl_err_set(err, FL_NO_MEMORY, "actor: cannot allocate a." #field " (%zu elements)", \
                              (size_t)(count));                                                        \
    } while (0)

/* Create, phase 2: the Q-network (locally initialised), the n-step builder and every
 * buffer of the step loop. */
static fl_status build_net(actor_t *a, fl_rng_t *init_rng, fl_err_t *err) {
    const fl_actor_opts_t *o = &a->o;
    const size_t N = (size_t)a->num_envs;
    /* The builder is drained once it holds local_buffer transitions; one push adds at
     * most num_envs * n, so this bounds what a send sees. */
    a->prio_cap = (size_t)o->local_buffer + N * (size_t)o->n_step;
    size_t prio_batch = a->prio_cap < FL_ACTOR_MAX_PRIORITY_BATCH ? a->prio_cap : FL_ACTOR_MAX_PRIORITY_BATCH;
    int max_batch = (int)(prio_batch > N ? prio_batch : N);
    fl_status s = fl_qnet_create_for_obs(o->model_spec, a->def->obs.rank, a->def->obs.shape, a->num_actions, max_batch,
                                         &a->net, err);
    if (s != FL_OK) {
        fl_err_prefix(err, "model.spec");
        return s;
    }
    if ((s = fl_qnet_set_backend(a->net, o->backend, err)) != FL_OK) {
        fl_err_prefix(err, "model.cpu_kernels");
        return s;
    }
    fl_qnet_init(a->net, init_rng);
    fl_qnet_set_input_scale(a->net, (float)o->input_scale);
    fl_qnet_set_inference(a->net, 1);
    FL_TRY(fl_nstep_create(a->num_envs, o->n_step, (float)o->gamma, a->obs_bytes, &a->nstep, err));

    ALLOC(obs, N * a->obs_bytes);
    ALLOC(next, N * a->obs_bytes);
    ALLOC(final_obs, N * a->obs_bytes);
    ALLOC(next_true, N * a->obs_bytes);
    ALLOC(q, N * (size_t)a->num_actions);
    ALLOC(actions, N);
    ALLOC(rewards, N);
    ALLOC(terminated, N);
    ALLOC(truncated, N);
    ALLOC(done, N);
    ALLOC(scratch, fl_actor_priority_scratch_floats(a->net));
    ALLOC(prio, a->prio_cap);
    return FL_OK;
}

#undef ALLOC

/* Create, phase 3: the replay writer on this actor's shard, the parameter client and
 * the reporter. */
static fl_status connect_clients(actor_t *a, const char *replay_addr, const char *param_addr, const char *control_addr,
                                 fl_err_t *err) {
    const fl_actor_opts_t *o = &a->o;
    const int index = a->index;
    const fl_obs_spec_t spec = a->def->obs;
    a->st.stream_id = make_stream_id(index);
    /* replay_addr lists every shard (fl_replay_addrs_parse); this actor's one stream
     * sticks to shard index % shards (fl_replay_shard_for_actor), so its batches and
     * their sequence numbers stay on one shard. */
    fl_replay_addrs_t shards;
    fl_status s = fl_replay_addrs_parse(replay_addr, &shards, err);
    if (s != FL_OK) {
        fl_err_prefix(err, "actor: replay");
        return s;
    }
    int shard = fl_replay_shard_for_actor(index, shards.count);
    if (shards.count != o->replay_shards)
        FL_WARN("actor %d: %d replay address%s given but replay.shards = %lld; streaming to shard %d (%s)", index,
                shards.count, shards.count == 1 ? "" : "es", (long long)o->replay_shards, shard, shards.addr[shard]);
    else if (shards.count > 1)
        FL_INFO("actor %d: streaming to replay shard %d of %d (%s)", index, shard, shards.count, shards.addr[shard]);
    s = fl_replay_client_create(shards.addr[shard], &a->replay, err);
    fl_replay_addrs_free(&shards);
    if (s != FL_OK) return s;
    FL_TRY(fl_replay_writer_create(a->replay, a->st.stream_id, &spec,
                                   fl_actor_batches_per_call(a->obs_bytes, o->local_buffer), &a->writer, err));
    fl_replay_writer_set_backlog(a->writer, (size_t)(o->max_backlog_mb * 1048576.0));
    fl_replay_writer_set_limits(a->writer, o->max_abs_reward, o->max_priority);
    fl_replay_writer_on_wait(a->writer, writer_waits, a);
    fl_param_client_opts_t po = {.bf16 = o->fetch_bf16 != 0};
    FL_TRY(fl_param_client_create_opts(param_addr, &po, &a->params, err));
    return fl_reporter_create(control_addr, "actor", (uint32_t)index, o->progress_every / 2.0, &a->reporter, err);
}

/* Writes actor-<index>.state (see the file comment of actor.h); a failure is logged. */
static void save_state(actor_t *a) {
    a->state_saved_at = fl_clock_sec();
    if (!a->state_path[0]) return;
    fl_state_out_t w;
    fl_err_t e;
    fl_err_init(&e);
    if (fl_state_begin(&w, a->state_path, "actor", &e) == FL_OK) {
        fl_state_put_u64(&w, "num_envs", (uint64_t)a->num_envs);
        fl_state_put_u64(&w, "env_steps", a->st.env_steps);
        fl_state_put_u64(&w, "episodes", a->st.episodes);
        fl_state_put_double(&w, "return_sum", a->st.return_sum);
        fl_state_put_u64(&w, "transitions_sent", a->st.transitions_sent);
        fl_state_put_u64(&w, "transitions_acked", a->acked_base + fl_replay_writer_acked(a->writer));
        fl_state_put_u64(&w, "param_updates", a->st.param_updates);
        fl_state_put_rng(&w, "explore_rng", &a->explore);
        for (int i = 0; i < a->num_envs; i++) {
            char key[32];
            snprintf(key, sizeof key, "env_rng_%d", i);
            fl_state_put_rng(&w, key, fl_wrapvec_rng(a->envs, i));
        }
        if (fl_state_commit(&w, &e) == FL_OK) return;
    }
    FL_WARN("actor state not saved: %s", e.msg);
}

/* Create, phase 4 (fleet run --resume): counters and generators from actor-<index>.state. */
static fl_status load_state(actor_t *a, fl_err_t *err) {
    if (!a->o.resume) return FL_OK;
    if (!a->state_path[0])
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "actor: resuming needs run.checkpoint_dir (the folder of its state)");
    fl_state_t *st = NULL;
    fl_status s = fl_state_load(a->state_path, "actor", &st, err);
    if (s == FL_NOT_FOUND) {
        FL_WARN("no state to resume from (%s): this actor starts afresh", a->state_path);
        return FL_OK;
    }
    FL_TRY(s);
    uint64_t n = 0, acked = 0;
    int ok = fl_state_get_u64(st, "num_envs", &n) && n == (uint64_t)a->num_envs &&
             fl_state_get_u64(st, "env_steps", &a->st.env_steps) && fl_state_get_u64(st, "episodes", &a->st.episodes) &&
             fl_state_get_double(st, "return_sum", &a->st.return_sum) &&
             fl_state_get_u64(st, "transitions_sent", &a->st.transitions_sent) &&
             fl_state_get_u64(st, "transitions_acked", &acked) &&
             fl_state_get_u64(st, "param_updates", &a->st.param_updates) &&
             fl_state_get_rng(st, "explore_rng", &a->explore);
    for (int i = 0; ok && i < a->num_envs; i++) {
        char key[32];
        snprintf(key, sizeof key, "env_rng_%d", i);
        ok = fl_state_get_rng(st, key, fl_wrapvec_rng(a->envs, i));
    }
    fl_state_free(st);
    if (!ok)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "actor state %s: incomplete, or saved with num_envs = %llu where env.num_envs is now %d",
                          a->state_path, (unsigned long long)n, a->num_envs);
    a->acked_base = acked;
    FL_INFO("resumed from %s at %llu env steps, %llu episodes", a->state_path, (unsigned long long)a->st.env_steps,
            (unsigned long long)a->st.episodes);
    return FL_OK;
}

fl_status fl_actor_create(const fl_actor_opts_t *opts, int index, const char *replay_addr, const char *param_addr,
                          const char *control_addr, fl_actor_t **out, fl_err_t *err) {
    *out = NULL;
    if (!opts) return fl_err_set(err, FL_INVALID_ARGUMENT, "actor: no configuration");
    if (index < 0 || (index >= opts->count && !opts->joined))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "actor: index %d is out of range (expected 0 <= index < %lld)",
                          index, (long long)opts->count);
    if (opts->joined && !(opts->epsilon >= 0 && opts->epsilon <= 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "actor: a joined actor's epsilon %g is not in [0, 1]",
                          opts->epsilon);
    if (!replay_addr || !*replay_addr) return fl_err_set(err, FL_INVALID_ARGUMENT, "actor: no replay address");
    if (!param_addr || !*param_addr) return fl_err_set(err, FL_INVALID_ARGUMENT, "actor: no parameter server address");
    openblas_set_num_threads(1);

    actor_t *a = calloc(1, sizeof *a);
    if (!a) return fl_err_set(err, FL_NO_MEMORY, "actor: out of memory");
    atomic_init(&a->stop, 0);
    a->index = index;
    fl_rng_t init_rng;
    fl_status s = copy_opts(a, opts, err);
    if (s == FL_OK) s = open_envs(a, &init_rng, err);
    if (s == FL_OK) s = build_net(a, &init_rng, err);
    if (s == FL_OK) s = connect_clients(a, replay_addr, param_addr, control_addr, err);
    if (s == FL_OK) s = load_state(a, err);
    a->state_saved_at = fl_clock_sec();
    if (s != FL_OK) {
        fl_actor_destroy(a);
        return s;
    }
    *out = a;
    return FL_OK;
}

/* Run, the loop: steps, sends every local_buffer transitions, fetches every sync_every
 * env steps and reports, until should_stop. */
static fl_status step_loop(actor_t *a, fl_err_t *err) {
    fl_wrapvec_reset(a->envs, a->obs);
    uint64_t next_sync = a->st.env_steps + (uint64_t)a->o.sync_every;
    while (!should_stop(a)) {
        FL_TRY(step(a, err));
        if (fl_nstep_ready(a->nstep) >= (size_t)a->o.local_buffer) FL_TRY(send_ready(a, err));
        if (a->st.env_steps >= next_sync) {
            FL_TRY(fetch_params(a, err));
            next_sync = a->st.env_steps + (uint64_t)a->o.sync_every;
        }
        report(a, 0);
        if (a->o.state_every > 0 && fl_clock_sec() - a->state_saved_at >= a->o.state_every) save_state(a);
    }
    return FL_OK;
}

/* run.deterministic: waits until the parameter server holds version `want` and the
 * network has it. A newer version means that the lockstep is broken (another publisher,
 * a restarted learner): FL_ABORTED. FL_CANCELLED when the actor is asked to stop. */
static fl_status round_params(actor_t *a, uint64_t want, fl_err_t *err) {
    double waited_from = fl_clock_sec(), logged = waited_from;
    while (a->st.param_version < want) {
        if (should_stop(a)) return fl_err_set(err, FL_CANCELLED, "actor: stopped");
        FL_TRY(fetch_params(a, err));
        if (a->st.param_version >= want) break;
        report(a, 0);
        if (fl_clock_sec() - logged >= 10) {
            logged = fl_clock_sec();
            FL_INFO("round %llu: waiting %.0f s for parameter version %llu (holding %llu)", (unsigned long long)want,
                    logged - waited_from, (unsigned long long)want, (unsigned long long)a->st.param_version);
        }
        fl_sleep_sec(ROUND_POLL_S);
    }
    if (a->st.param_version != want)
        return fl_err_set(err, FL_ABORTED,
                          "run.deterministic: round %llu needs parameter version %llu, the parameter server holds "
                          "%llu (another publisher, or a learner restarted mid-run: the lockstep is lost)",
                          (unsigned long long)want, (unsigned long long)want, (unsigned long long)a->st.param_version);
    return FL_OK;
}

/* run.deterministic: the round's complete transitions, in one Round call (resent through
 * an outage of the shard; a resend changes nothing there). */
static fl_status send_round(actor_t *a, uint64_t round, fl_err_t *err) {
    fl_nstep_batch_t nb;
    FL_TRY(ready_with_priorities(a, &nb, err));
    const fl_wire_batch_t b = {.count = nb.count,
                               .obs_bytes = a->obs_bytes,
                               .obs = nb.obs,
                               .actions = nb.action,
                               .rewards = nb.reward,
                               .discounts = nb.discount,
                               .next_obs = nb.next_obs,
                               .priorities = a->prio};
    for (int logged = 0;;) {
        fl_err_t e;
        fl_err_init(&e);
        fl_status s = fl_replay_round(a->replay, (uint32_t)a->index + 1, round, 0, &a->def->obs, &b, 0, NULL, &e);
        if (s == FL_OK) break;
        if (!fl_retry_transient(s))
            return fl_err_set(err, s, "round %llu: replay: %s", (unsigned long long)round, e.msg);
        if (!logged++) FL_WARN("round %llu: replay unreachable (%s); retrying", (unsigned long long)round, e.msg);
        if (should_stop(a)) return fl_err_set(err, FL_CANCELLED, "actor: stopped");
        fl_sleep_sec(ROUND_POLL_S);
    }
    a->st.transitions_sent += nb.count;
    a->round_acked += nb.count;
    fl_nstep_clear(a->nstep);
    return FL_OK;
}

/* run.deterministic: the round's episodes for the launcher's rounds.csv (forced). */
static void report_round(actor_t *a, uint64_t round, uint64_t episodes, double return_sum, uint64_t length_sum) {
    static const char *const names[] = {FL_REPORT_ROUND, FL_REPORT_ROUND_EPISODES, FL_REPORT_ROUND_RETURN_SUM,
                                        FL_REPORT_ROUND_LENGTH_SUM};
    const double values[] = {(double)round, (double)episodes, return_sum, (double)length_sum};
    fl_report_t r;
    memset(&r, 0, sizeof r);
    r.env_steps = a->st.env_steps;
    r.episodes = a->st.episodes;
    r.transitions_acked = a->acked_base + a->round_acked;
    r.param_version = a->st.param_version;
    r.epsilon = a->epsilon;
    r.n_extra = 4;
    r.extra_names = names;
    r.extra_values = values;
    fl_reporter_tick(a->reporter, &r, 1);
}

/* run.deterministic, the loop: round r = 1, 2, ... waits for parameter version r, takes
 * actor.sync_every env steps (whole vector steps: up to r * sync_every in all) and sends
 * their transitions. Partial n-step windows carry over to the next round. */
static fl_status round_loop(actor_t *a, fl_err_t *err) {
    fl_wrapvec_reset(a->envs, a->obs);
    fl_status s = FL_OK;
    for (uint64_t round = 1; s == FL_OK && !should_stop(a); round++) {
        if ((s = round_params(a, round, err)) != FL_OK) break;
        const uint64_t until = round * (uint64_t)a->o.sync_every;
        const uint64_t episodes0 = a->st.episodes, lengths0 = a->length_sum;
        const double returns0 = a->st.return_sum;
        while (s == FL_OK && a->st.env_steps < until && !should_stop(a)) {
            s = step(a, err);
            report(a, 0);
        }
        if (s == FL_OK && a->st.env_steps >= until) s = send_round(a, round, err);
        if (s == FL_OK && a->st.env_steps >= until)
            report_round(a, round, a->st.episodes - episodes0, a->st.return_sum - returns0, a->length_sum - lengths0);
    }
    return s == FL_CANCELLED ? FL_OK : s;
}

/* Run, the clean stop: complete transitions go out, partial n-step windows are
 * dropped; the writer is flushed and a final report forced. */
static fl_status finish(actor_t *a, fl_err_t *err) {
    FL_TRY(send_ready(a, err));
    fl_err_t ferr;
    fl_err_init(&ferr);
    fl_status fs = fl_replay_writer_flush(a->writer, FL_ACTOR_FLUSH_TIMEOUT_MS, &ferr);
    uint64_t acked = a->acked_base + fl_replay_writer_acked(a->writer), pending = fl_replay_writer_pending(a->writer);
    if (fs != FL_OK || pending > 0)
        FL_WARN("stopping: %llu transitions acknowledged, %llu NOT acknowledged (%s)", (unsigned long long)acked,
                (unsigned long long)pending, fs != FL_OK ? ferr.msg : "flush incomplete");
    FL_INFO(
        "stopped after %llu env steps, %llu episodes: sent %llu transitions, %llu acknowledged, %llu not; "
        "parameter version %llu",
        (unsigned long long)a->st.env_steps, (unsigned long long)a->st.episodes,
        (unsigned long long)a->st.transitions_sent, (unsigned long long)acked, (unsigned long long)pending,
        (unsigned long long)a->st.param_version);
    save_state(a);
    a->leaving = 1;
    report(a, 1);
    return FL_OK;
}

fl_status fl_actor_run(fl_actor_t *a, fl_err_t *err) {
    if (a->ran) return fl_err_set(err, FL_FAILED_PRECONDITION, "actor: already run");
    a->ran = 1;
    const fl_actor_opts_t *o = &a->o;
    char who[64]; /* a joined actor's index is past actor.count: "actor 5 (joined)", not "actor 5 of 4" */
    if (o->joined)
        snprintf(who, sizeof who, "actor %d (joined)", a->index);
    else
        snprintf(who, sizeof who, "actor %d of %lld", a->index, (long long)o->count);
    FL_INFO("%s: %s x %d, epsilon %.6g, %d-step gamma %g, buffer %lld, sync every %lld steps, stream %016llx", who,
            a->def->name, a->num_envs, a->epsilon, o->n_step, o->gamma, (long long)o->local_buffer,
            (long long)o->sync_every, (unsigned long long)a->st.stream_id);
    fl_status s;
    if (o->deterministic) {
        s = round_loop(a, err);
        if (s == FL_OK) {
            a->leaving = 1;
            report(a, 1);
            FL_INFO("stopped after %llu env steps, %llu episodes, %llu transitions committed in rounds",
                    (unsigned long long)a->st.env_steps, (unsigned long long)a->st.episodes,
                    (unsigned long long)a->round_acked);
        }
        a->st.transitions_acked = a->round_acked;
        return s;
    }
    s = wait_first_params(a, err);
    if (s == FL_OK) s = step_loop(a, err);
    if (s == FL_OK) s = finish(a, err);
    a->st.transitions_acked = a->acked_base + fl_replay_writer_acked(a->writer);
    a->st.transitions_unacked = fl_replay_writer_pending(a->writer);
    a->st.transitions_dropped = fl_replay_writer_dropped(a->writer);
    return s;
}

void fl_actor_stop(fl_actor_t *a) {
    if (a) atomic_store(&a->stop, 1);
}

void fl_actor_stats(const fl_actor_t *a, fl_actor_stats_t *out) {
    *out = a->st;
}
