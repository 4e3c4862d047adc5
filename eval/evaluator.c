/* evaluator: the evaluator role of evaluator.h. */
#include "eval/evaluator.h"

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/control.h"
#include "common/log.h"
#include "common/retry.h"
#include "common/rng.h"
#include "common/statefile.h"
#include "common/stop.h"
#include "envs/core/wrappers.h"
#include "eval/evaluate.h"
#include "kernels/qnet.h"
#include "paramserver/client.h"
#include "replay/client.h"

#define FETCH_TIMEOUT_MS 2000
#define POLL_S 0.1
#define ROUND_POLL_S 0.002 /* run.deterministic: between fetches while waiting for a round's version */
#define TICK_STEPS 256     /* agent steps between reporter ticks inside an evaluation */

const char *const fl_evaluator_result_names[FL_EVALUATOR_RESULT_COUNT] = {FL_EVALUATOR_RESULT(FL__EVALUATOR_NAME)};

struct fl_evaluator {
    fl_evaluator_opts_t o;
    char *model_spec, *env_name, *env_plugin, *env_wrappers, *env_args, *state_dir; /* copies */
    char state_path[1100]; /* state_dir/evaluator-<index>.state, or "" */
    char best_path[1100];  /* state_dir/best-<index>.safetensors, or "" */
    double best_return;    /* the best evaluation's mean return so far (-inf: none) */
    int index;
    fl_wrapped_env_t *wenv;
    fl_env_options_t env_opts;
    fl_evaluation_t *ev;
    fl_qnet_t *net;
    fl_param_client_t *params;
    fl_replay_client_t *replay; /* run.deterministic: the Round calls */
    fl_reporter_t *reporter;
    fl_rng_t seeder;
    uint64_t version; /* held by net (0 = none yet) */
    int fetch_failing;
    uint64_t steps_in_round;
    atomic_int stop;
    int ran;
    fl_evaluator_stats_t st;
};

void fl_evaluator_opts_init(fl_evaluator_opts_t *o) {
    memset(o, 0, sizeof *o);
    fl_env_factory_opts_init(&o->env);
    o->model_spec = "dense(128) relu dense(128) relu dueling";
    o->input_scale = 1.0;
    o->backend = fl_qnet_default_backend();
    o->every = 1;
    o->episodes = 10;
    o->max_episode_steps = 27000;
    o->parallel = 16;
    o->count = 1;
    o->seed = 1;
    o->progress_every = 1.0;
    o->state_dir = "";
    o->state_every = 300;
}

void fl_evaluator_destroy(fl_evaluator_t *e) {
    if (!e) return;
    fl_reporter_destroy(e->reporter);
    fl_param_client_destroy(e->params);
    fl_qnet_destroy(e->net);
    fl_evaluation_destroy(e->ev);
    fl_wrapped_env_destroy(e->wenv);
    fl_replay_client_destroy(e->replay);
    free(e->model_spec);
    free(e->env_name);
    free(e->env_plugin);
    free(e->env_wrappers);
    free(e->env_args);
    free(e->state_dir);
    free(e);
}

static int dup_str(const char *s, char **out) {
    *out = strdup(s ? s : "");
    return *out != NULL;
}

static fl_status check_opts(const fl_evaluator_opts_t *o, int index, const char *param_addr, const char *control_addr,
                            fl_err_t *err) {
    if (o->count < 1 || index < 0 || index >= o->count)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "evaluator: index %d is out of range (expected 0 <= I < run.evaluators = %d)", index,
                          o->count);
    if (!param_addr || !*param_addr)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "evaluator: the parameter server's address is required");
    if (!(o->every > 0)) return fl_err_set(err, FL_INVALID_ARGUMENT, "eval.every = %g: expected a value > 0", o->every);
    if (o->episodes < 1 || o->parallel < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "eval.episodes = %d, eval.parallel = %d: expected >= 1 each",
                          o->episodes, o->parallel);
    if (!(o->epsilon >= 0 && o->epsilon <= 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "eval.epsilon = %g: expected a value in [0, 1]", o->epsilon);
    if (o->deterministic && !(o->replay_addr && *o->replay_addr))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "evaluator: run.deterministic needs the replay shard's address (--replay), where the "
                          "evaluator marks its rounds");
    if (o->deterministic && (o->round_every < 1 || o->round_updates < 1 || o->round_env_steps < 1 || o->actors < 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "evaluator: deterministic rounds need round_every, round_updates, "
                          "round_env_steps and actors >= 1");
    if (!o->deterministic && o->every_learner_steps && !(control_addr && *control_addr))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "eval.every_unit = learner_steps needs the launcher's Control address (--control), which "
                          "tells the fleet's learner steps; use eval.every_unit = seconds to run alone");
    return FL_OK;
}

/* Copies the options and their strings (the caller's may go away). */
static fl_status copy_opts(fl_evaluator_t *e, const fl_evaluator_opts_t *o, fl_err_t *err) {
    e->o = *o;
    /* Evaluations play whole games and report their scores: no training-only wrappers. */
    size_t wl = strlen(o->env.wrappers ? o->env.wrappers : "") + 1;
    e->env_wrappers = malloc(wl);
    if (e->env_wrappers) fl_wrappers_for_evaluation(o->env.wrappers, e->env_wrappers, wl);
    if (!e->env_wrappers || !dup_str(o->model_spec, &e->model_spec) || !dup_str(o->env.name, &e->env_name) ||
        !dup_str(o->env.plugin, &e->env_plugin) || !dup_str(o->env.args, &e->env_args) ||
        !dup_str(o->state_dir, &e->state_dir))
        return fl_err_set(err, FL_NO_MEMORY, "evaluator: out of memory");
    e->o.state_dir = e->state_dir;
    if (e->state_dir[0]) snprintf(e->state_path, sizeof e->state_path, "%s/evaluator-%d.state", e->state_dir, e->index);
    if (e->state_dir[0]) snprintf(e->best_path, sizeof e->best_path, "%s/best-%d.safetensors", e->state_dir, e->index);
    e->best_return = -INFINITY;
    e->o.model_spec = e->model_spec;
    e->o.env.name = e->env_name;
    e->o.env.plugin = e->env_plugin;
    e->o.env.wrappers = e->env_wrappers;
    e->o.env.args = e->env_args;
    return FL_OK;
}

static fl_status open_all(fl_evaluator_t *e, const char *param_addr, const char *control_addr, fl_err_t *err) {
    const fl_evaluator_opts_t *o = &e->o;
    FL_TRY(fl_env_create_wrapped(&o->env, &e->wenv, err));
    const fl_env_def_t *def = fl_wrapped_env_info(e->wenv);
    fl_env_instance_options(&o->env, &e->env_opts);
    int parallel = o->parallel < o->episodes ? o->parallel : o->episodes;
    FL_TRY(fl_evaluation_create(e->wenv, &e->env_opts, parallel, &e->ev, err));
    fl_status s =
        fl_qnet_create_for_obs(o->model_spec, def->obs.rank, def->obs.shape, def->num_actions, parallel, &e->net, err);
    if (s != FL_OK) {
        fl_err_prefix(err, "model.spec");
        return s;
    }
    if ((s = fl_qnet_set_backend(e->net, o->backend, err)) != FL_OK) {
        fl_err_prefix(err, "model.cpu_kernels");
        return s;
    }
    fl_qnet_set_input_scale(e->net, (float)o->input_scale);
    fl_qnet_set_inference(e->net, 1);
    fl_rng_init_stream(&e->seeder, o->seed, FL_EVALUATOR_SEED_STREAM + (uint64_t)e->index);
    FL_TRY(fl_param_client_create(param_addr, &e->params, err));
    if (o->deterministic) FL_TRY(fl_replay_client_create(o->replay_addr, &e->replay, err));
    return fl_reporter_create(control_addr, "evaluator", (uint32_t)e->index, o->progress_every / 2, &e->reporter, err);
}

/* Writes evaluator-<index>.state; a failure is logged. */
static void save_state(fl_evaluator_t *e) {
    if (!e->state_path[0]) return;
    fl_state_out_t w;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_state_begin(&w, e->state_path, "evaluator", &err) == FL_OK) {
        fl_state_put_u64(&w, "rounds", e->st.rounds);
        fl_state_put_u64(&w, "episodes", e->st.episodes);
        fl_state_put_u64(&w, "steps", e->st.steps);
        fl_state_put_u64(&w, "last_version", e->st.last_version);
        fl_state_put_double(&w, "last_return_mean", e->st.last_return_mean);
        fl_state_put_rng(&w, "seeder", &e->seeder);
        if (fl_state_commit(&w, &err) == FL_OK) return;
    }
    FL_WARN("evaluator state not saved: %s", err.msg);
}

/* fleet run --resume: the rounds, totals and seed generator of evaluator-<index>.state. */
static fl_status load_state(fl_evaluator_t *e, fl_err_t *err) {
    if (!e->o.resume || !e->state_path[0]) return FL_OK;
    fl_state_t *st = NULL;
    fl_status s = fl_state_load(e->state_path, "evaluator", &st, err);
    if (s == FL_NOT_FOUND) {
        FL_WARN("no state to resume from (%s): the evaluations start again at round 1", e->state_path);
        return FL_OK;
    }
    FL_TRY(s);
    int ok = fl_state_get_u64(st, "rounds", &e->st.rounds) && fl_state_get_u64(st, "episodes", &e->st.episodes) &&
             fl_state_get_u64(st, "steps", &e->st.steps) && fl_state_get_u64(st, "last_version", &e->st.last_version) &&
             fl_state_get_double(st, "last_return_mean", &e->st.last_return_mean) &&
             fl_state_get_rng(st, "seeder", &e->seeder);
    fl_state_free(st);
    if (!ok) return fl_err_set(err, FL_INVALID_ARGUMENT, "evaluator state %s: incomplete", e->state_path);
    FL_INFO("resumed from %s after %llu evaluations", e->state_path, (unsigned long long)e->st.rounds);
    return FL_OK;
}

/* fleet run --resume: the best return so far is the one its file holds. */
static void load_best(fl_evaluator_t *e) {
    if (!e->o.resume || !e->best_path[0]) return;
    fl_safetensors_t *f = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_safetensors_read(e->best_path, &f, &err) != FL_OK) return;
    const char *r = fl_safetensors_meta(f, "eval.return_mean");
    if (r) e->best_return = strtod(r, NULL);
    fl_safetensors_free(f);
}

fl_status fl_evaluator_create(const fl_evaluator_opts_t *opts, int index, const char *param_addr,
                              const char *control_addr, fl_evaluator_t **out, fl_err_t *err) {
    *out = NULL;
    FL_TRY(check_opts(opts, index, param_addr, control_addr, err));
    /* one thread for its network's kernels, as an actor: it shares the cores with the
     * fleet, and spare OpenMP threads would spin after every call */
    openblas_set_num_threads(1);
    fl_evaluator_t *e = calloc(1, sizeof *e);
    if (!e) return fl_err_set(err, FL_NO_MEMORY, "evaluator: out of memory");
    e->index = index;
    fl_status s = copy_opts(e, opts, err);
    if (s == FL_OK) s = open_all(e, param_addr, control_addr, err);
    if (s == FL_OK) s = load_state(e, err);
    if (s == FL_OK) load_best(e);
    if (s != FL_OK) {
        fl_evaluator_destroy(e);
        return s;
    }
    *out = e;
    return FL_OK;
}

static int should_stop(fl_evaluator_t *e) {
    return fl_stop_requested() || atomic_load(&e->stop) || fl_reporter_should_stop(e->reporter);
}

/* A report: the totals, and the result of an evaluation when values is not NULL (forced
 * then). Without one it keeps the launcher's answer, and its stop request, fresh. */
static void send_report(fl_evaluator_t *e, const double *values, int force) {
    fl_report_t r;
    memset(&r, 0, sizeof r);
    r.env_steps = e->st.steps;
    r.episodes = e->st.episodes;
    r.param_version = e->st.last_version;
    r.epsilon = e->o.epsilon;
    if (values) {
        r.n_extra = FL_EVALUATOR_RESULT_COUNT;
        r.extra_names = fl_evaluator_result_names;
        r.extra_values = values;
    }
    fl_reporter_tick(e->reporter, &r, force || values);
}

static void report(fl_evaluator_t *e, int force) {
    send_report(e, NULL, force);
}

/* Fetches the server's parameters into the network when it holds a newer version than
 * the network; *newer = 1 then. Parameters of another size are fatal; an unreachable
 * server is retried later. */
static fl_status fetch_newer(fl_evaluator_t *e, int *newer, fl_err_t *err) {
    *newer = 0;
    fl_err_t fe;
    fl_err_init(&fe);
    uint64_t version = e->version;
    int updated = 0;
    fl_status s = fl_param_fetch(e->params, &version, fl_qnet_params(e->net), fl_qnet_num_params(e->net), &updated,
                                 FETCH_TIMEOUT_MS, &fe);
    if (s == FL_INVALID_ARGUMENT || s == FL_UNIMPLEMENTED)
        return fl_err_set(err, s, "parameter server: %s (model.spec \"%s\" has %zu parameters)", fe.msg,
                          e->o.model_spec, fl_qnet_num_params(e->net));
    if (s != FL_OK) {
        if (!e->fetch_failing) FL_WARN("parameter fetch failed (will retry): %s", fe.msg);
        e->fetch_failing = 1;
        return FL_OK;
    }
    if (e->fetch_failing) FL_INFO("parameter server reachable again");
    e->fetch_failing = 0;
    if (updated && version > e->version) {
        e->version = version;
        *newer = 1;
    }
    return FL_OK;
}

static int on_step(void *user, int episode, const void *state, int64_t step, float reward) {
    (void)episode, (void)state, (void)step, (void)reward;
    fl_evaluator_t *e = user;
    if (++e->steps_in_round % TICK_STEPS == 0) report(e, 0);
    return should_stop(e);
}

/* Sends one evaluation's result in a forced report. */
static void report_result(fl_evaluator_t *e, const fl_eval_stats_t *s, uint64_t at_env, uint64_t at_learner) {
    double values[FL_EVALUATOR_RESULT_COUNT];
    values[FL_EVAL_RESULT_round] = (double)e->st.rounds;
    values[FL_EVAL_RESULT_return_mean] = s->return_mean;
    values[FL_EVAL_RESULT_return_std] = s->return_std;
    values[FL_EVAL_RESULT_return_ci95] = s->return_ci95;
    values[FL_EVAL_RESULT_return_min] = s->return_min;
    values[FL_EVAL_RESULT_return_max] = s->return_max;
    values[FL_EVAL_RESULT_length_mean] = s->length_mean;
    values[FL_EVAL_RESULT_length_min] = s->length_min;
    values[FL_EVAL_RESULT_length_max] = s->length_max;
    values[FL_EVAL_RESULT_episodes] = s->episodes;
    values[FL_EVAL_RESULT_truncated] = s->truncated;
    values[FL_EVAL_RESULT_epsilon] = e->o.epsilon;
    values[FL_EVAL_RESULT_seconds] = s->seconds;
    values[FL_EVAL_RESULT_at_env_steps] = (double)at_env;
    values[FL_EVAL_RESULT_at_learner_steps] = (double)at_learner;
    send_report(e, values, 1);
}

/* The parameters of an evaluation that beat every earlier one of this evaluator, as
 * state_dir/best-<index>.safetensors (written whole, then renamed): the online network's
 * tensors and what `fleet eval` names it by (format fleet.policy, model.spec, the version,
 * the return, the steps). A failure is logged; the run goes on. */
static void save_best(fl_evaluator_t *e, const fl_eval_stats_t *s, uint64_t at_env, uint64_t at_learner) {
    if (!e->best_path[0] || !(s->return_mean > e->best_return)) return;
    e->best_return = s->return_mean;
    const int nv = fl_qnet_num_views(e->net);
    fl_st_tensor_t *t = calloc((size_t)nv, sizeof *t);
    if (!t) return;
    fl_qnet_st_tensors(e->net, "online", t);
    char version[32], ret[40], episodes[32], steps[32], env[32];
    snprintf(version, sizeof version, "%llu", (unsigned long long)e->version);
    snprintf(ret, sizeof ret, "%.17g", s->return_mean);
    snprintf(episodes, sizeof episodes, "%d", s->episodes);
    snprintf(steps, sizeof steps, "%llu", (unsigned long long)at_learner);
    snprintf(env, sizeof env, "%llu", (unsigned long long)at_env);
    const char *keys[] = {"format",           "format_version", "model.spec",    "param_version",
                          "eval.return_mean", "eval.episodes",  "learner.steps", "env_steps"};
    const char *vals[] = {FL_POLICY_FORMAT, "1", e->model_spec, version, ret, episodes, steps, env};
    fl_err_t err;
    fl_err_init(&err);
    if (fl_safetensors_write(e->best_path, t, nv, keys, vals, (int)(sizeof keys / sizeof keys[0]), &err) != FL_OK)
        FL_WARN("best policy not saved: %s", err.msg);
    free(t);
}

/* One evaluation of the network's parameters (version e->version). */
static fl_status evaluate(fl_evaluator_t *e, uint64_t at_env, uint64_t at_learner, fl_err_t *err) {
    fl_eval_stats_t s;
    uint64_t seed = fl_rng_u64(&e->seeder);
    e->steps_in_round = 0;
    fl_status st = fl_evaluation_run(e->ev, e->net, e->o.episodes, e->o.epsilon, seed, e->o.max_episode_steps, on_step,
                                     e, NULL, NULL, &s, err);
    if (st == FL_CANCELLED) return FL_OK; /* asked to stop: the partial evaluation is dropped */
    FL_TRY(st);
    e->st.rounds++;
    e->st.episodes += (uint64_t)s.episodes;
    e->st.steps += s.steps;
    e->st.last_version = e->version;
    e->st.last_return_mean = s.return_mean;
    FL_INFO(
        "evaluation %llu of version %llu: return %.2f +- %.2f (min %.2f, max %.2f) over %d episodes, "
        "length %.1f, %.2f s",
        (unsigned long long)e->st.rounds, (unsigned long long)e->version, s.return_mean, s.return_ci95, s.return_min,
        s.return_max, s.episodes, s.length_mean, s.seconds);
    report_result(e, &s, at_env, at_learner);
    save_best(e, &s, at_env, at_learner);
    save_state(e);
    return FL_OK;
}

/* 1 when the schedule says the next evaluation is due. */
static int due(fl_evaluator_t *e, double next_t, uint64_t next_steps) {
    if (!e->o.every_learner_steps) return fl_clock_sec() >= next_t;
    uint64_t env, learner;
    fl_reporter_fleet_steps(e->reporter, &env, &learner);
    return learner >= next_steps;
}

/* run.deterministic: marks rounds round .. through done (the fleet goes on without this
 * evaluator until `through`); *a receives the shard's answer. Retried through an outage. */
static fl_status mark_rounds(fl_evaluator_t *e, uint64_t round, uint64_t through, fl_replay_round_answer_t *a,
                             fl_err_t *err) {
    const uint32_t participant = (uint32_t)(e->o.actors + 1 + e->index);
    for (int logged = 0;;) {
        fl_err_t re;
        fl_err_init(&re);
        fl_status s = fl_replay_round(e->replay, participant, round, through, NULL, NULL, 0, a, &re);
        if (s == FL_OK) return FL_OK;
        if (!fl_retry_transient(s))
            return fl_err_set(err, s, "round %llu: replay: %s", (unsigned long long)round, re.msg);
        if (!logged++) FL_WARN("round %llu: replay unreachable (%s); retrying", (unsigned long long)round, re.msg);
        if (should_stop(e)) return fl_err_set(err, FL_CANCELLED, "evaluator: stopped");
        fl_sleep_sec(POLL_S);
    }
}

/* run.deterministic: evaluates parameter version r for r = 1, 1 + round_every, ...: waits
 * until the server holds exactly r (the fleet cannot pass it: round r is not committed
 * before this evaluator marks it), marks rounds r .. r + round_every - 1 done, then plays.
 * A newer version breaks the lockstep: FL_ABORTED. */
static fl_status run_rounds(fl_evaluator_t *e, fl_err_t *err) {
    const fl_evaluator_opts_t *o = &e->o;
    for (uint64_t r = 1; !should_stop(e); r += (uint64_t)o->round_every) {
        while (e->version < r && !should_stop(e)) {
            int newer = 0;
            FL_TRY(fetch_newer(e, &newer, err));
            if (e->version < r) {
                report(e, 0);
                fl_sleep_sec(ROUND_POLL_S);
            }
        }
        if (should_stop(e)) break;
        if (e->version != r)
            return fl_err_set(err, FL_ABORTED,
                              "run.deterministic: the evaluation of round %llu needs parameter version %llu, the "
                              "parameter server holds %llu (another publisher, or a learner restarted mid-run)",
                              (unsigned long long)r, (unsigned long long)r, (unsigned long long)e->version);
        fl_replay_round_answer_t a;
        fl_status s = mark_rounds(e, r, r + (uint64_t)o->round_every - 1, &a, err);
        if (s == FL_CANCELLED) break;
        FL_TRY(s);
        /* The steps behind version r: every actor's rounds 1 .. r - 1, and the learner's
         * updates in the rounds of those it trained in (from first_full_round on). */
        const uint64_t trained = a.first_full_round && a.first_full_round < r ? r - a.first_full_round : 0;
        FL_TRY(evaluate(e, (r - 1) * (uint64_t)o->round_env_steps, trained * (uint64_t)o->round_updates, err));
    }
    report(e, 1);
    return FL_OK;
}

fl_status fl_evaluator_run(fl_evaluator_t *e, fl_err_t *err) {
    if (e->ran) return fl_err_set(err, FL_FAILED_PRECONDITION, "evaluator: run called twice");
    e->ran = 1;
    if (e->o.deterministic) return run_rounds(e, err);
    double next_t = fl_clock_sec();
    uint64_t next_steps = 0;
    int waiting_logged = 0;
    while (!should_stop(e)) {
        if (!due(e, next_t, next_steps)) {
            report(e, 0);
            fl_sleep_sec(POLL_S);
            continue;
        }
        int newer = 0;
        FL_TRY(fetch_newer(e, &newer, err));
        if (!newer) {
            if (!e->version && !waiting_logged) FL_INFO("waiting for the first parameters");
            waiting_logged = 1;
            report(e, 0);
            fl_sleep_sec(POLL_S);
            continue;
        }
        /* The fleet's step counts now, a few milliseconds after the fetch. */
        report(e, 1);
        uint64_t at_env, at_learner;
        fl_reporter_fleet_steps(e->reporter, &at_env, &at_learner);
        FL_TRY(evaluate(e, at_env, at_learner, err));
        if (e->o.every_learner_steps)
            next_steps = at_learner + (uint64_t)fmax(1.0, e->o.every);
        else
            next_t = fl_clock_sec() + e->o.every;
    }
    report(e, 1);
    return FL_OK;
}

void fl_evaluator_stop(fl_evaluator_t *e) {
    atomic_store(&e->stop, 1);
}

void fl_evaluator_stats(const fl_evaluator_t *e, fl_evaluator_stats_t *out) {
    *out = e->st;
}
