/* Tests for launcher/fleet_state (the launcher's Control handler) together with the evaluator
 * role (eval/evaluator): real in-process services on 127.0.0.1, a parameter server with
 * published parameters and a Control server running the launcher's own handler. The
 * evaluator's first result, queued by the handler, equals an independent evaluation of
 * the same parameters with the seed the evaluator documents; a newer version is evaluated
 * and an unchanged one is not; the handler answers the fleet's step counts, keeps
 * per-actor training returns, ignores a repeated or incomplete result and refuses an
 * unknown role; the stop request reaches the evaluator. Reports are accepted only with the
 * credential of their role, index and incarnation, from no older incarnation, and with
 * figures that can be true (forged evaluations, NaN and huge returns, counters that jump
 * or go back are refused and change nothing). Actors join through fleet.Control/Join: each
 * gets the next index, a credential its reports are accepted with, an epsilon between the
 * started actors', the services' addresses and the config; joins are refused before the
 * services serve, for a run that takes none, while the fleet stops and past
 * actor.max_joined; a joined actor's last report marks it left, silence marks it lost
 * (and a report brings it back); a resumed launcher keeps the joined slots' figures. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "launcher/fleet_state.h"
#include "common/clock.h"
#include "common/control.h"
#include "common/credential.h"
#include "common/methods.h"
#include "common/rng.h"
#include "common/rpc.h"
#include "eval/evaluate.h"
#include "eval/evaluator.h"
#include "fleet.pb-c.h"
#include "kernels/qnet.h"
#include "paramserver/client.h"
#include "paramserver/server.h"

#define SPEC "dense(16) relu"

typedef struct fixture {
    fl_fleet_state_t fs;
    fl_rpc_server_t *control;
    char control_addr[64];
    fl_paramserver_service_t *ps;
    char ps_addr[128];
    fl_qnet_t *net;
    fl_evaluator_opts_t opts;
} fixture_t;

/* The FLEET_CREDENTIAL that `fleet run` would give incarnation n of (role, index), set in
 * this process's environment for the reporters created next. */
static void set_cred(const fl_fleet_state_t *fs, const char *role, int index, uint64_t n) {
    uint8_t key[FL_CRED_KEY_BYTES];
    char tok[FL_CRED_TOKEN_CHARS + 1], var[64];
    fl_cred_role_key(fs->secret, role, (uint32_t)index, key);
    fl_cred_token(key, n, tok);
    snprintf(var, sizeof var, "%llu:%s", (unsigned long long)n, tok);
    setenv(FL_CRED_ENV, var, 1);
}

static void publish(fixture_t *f, uint64_t version, uint64_t init_seed) {
    fl_rng_t rng;
    fl_rng_init(&rng, init_seed);
    fl_qnet_init(f->net, &rng);
    fl_param_client_t *pc = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_param_client_create(f->ps_addr, &pc, &err) != FL_OK ||
        fl_param_publish(pc, version, fl_qnet_params(f->net), fl_qnet_num_params(f->net), 5000, &err) != FL_OK)
        fail_msg("publish: %s", err.msg);
    fl_param_client_destroy(pc);
}

static void fixture_start(fixture_t *f, int n_actors, int n_learners, int n_evaluators) {
    memset(f, 0, sizeof *f);
    assert_int_equal(fl_fleet_state_init(&f->fs, n_actors, 8, n_learners, n_evaluators, 0, fl_clock_sec()), 0);
    fl_err_t err;
    fl_err_init(&err);
    fl_rpc_server_opts_t so = {.threads = 2, .prepost = 8};
    int port = 0;
    if (fl_rpc_server_create(&so, &f->control, &err) != FL_OK ||
        fl_rpc_server_add_unary(f->control, fl_method_path(FL_METHOD_CONTROL_REPORT), fl_fleet_state_on_report,
                                &f->fs) != FL_OK ||
        fl_rpc_server_add_unary(f->control, fl_method_path(FL_METHOD_CONTROL_JOIN), fl_fleet_state_on_join, &f->fs) !=
            FL_OK ||
        fl_rpc_server_bind(f->control, "127.0.0.1:0", &port, &err) != FL_OK ||
        fl_rpc_server_start(f->control, &err) != FL_OK)
        fail_msg("control: %s", err.msg);
    snprintf(f->control_addr, sizeof f->control_addr, "127.0.0.1:%d", port);
    if (fl_paramserver_service_create(NULL, 0, &f->ps, &err) != FL_OK ||
        fl_paramserver_service_start(f->ps, "127.0.0.1:0", f->ps_addr, sizeof f->ps_addr, &err) != FL_OK)
        fail_msg("paramserver: %s", err.msg);
    if (fl_qnet_create(SPEC, 4, 2, 16, &f->net, &err) != FL_OK) fail_msg("net: %s", err.msg);
    fl_evaluator_opts_init(&f->opts);
    f->opts.env.name = "cartpole";
    f->opts.model_spec = SPEC;
    f->opts.every = 0.05;
    f->opts.episodes = 6;
    f->opts.parallel = 4;
    f->opts.count = n_evaluators;
    f->opts.seed = 11;
    f->opts.progress_every = 0.1;
}

static void fixture_stop(fixture_t *f) {
    fl_qnet_destroy(f->net);
    fl_paramserver_service_destroy(f->ps);
    fl_rpc_server_destroy(f->control);
    fl_fleet_state_destroy(&f->fs);
}

typedef struct runner {
    fl_evaluator_t *ev;
    fl_status status;
    fl_err_t err;
} runner_t;

static void *run_thread(void *p) {
    runner_t *r = p;
    fl_err_init(&r->err);
    r->status = fl_evaluator_run(r->ev, &r->err);
    return NULL;
}

/* Waits up to 30 s for n queued results and takes them. */
static int wait_results(fixture_t *f, fl_eval_result_t *out, int n) {
    int got = 0;
    for (double until = fl_clock_sec() + 30; got < n && fl_clock_sec() < until;) {
        got += fl_fleet_state_take_evals(&f->fs, out + got, n - got);
        if (got < n) fl_sleep_sec(0.02);
    }
    return got;
}

static void test_evaluator_reports_the_real_evaluation(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_start(&f, 1, 1, 2);
    publish(&f, 3, 77);
    /* What the evaluator must find: evaluator 1, round 1 uses the first draw of its stream. */
    fl_rng_t seeder;
    fl_rng_init_stream(&seeder, 11, FL_EVALUATOR_SEED_STREAM + 1);
    uint64_t seed = fl_rng_u64(&seeder);
    fl_wrapped_env_t *w = NULL;
    fl_evaluation_t *ev = NULL;
    fl_env_options_t eopts;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_env_create_wrapped(&f.opts.env, &w, &err), FL_OK);
    fl_env_instance_options(&f.opts.env, &eopts);
    assert_int_equal(fl_evaluation_create(w, &eopts, 4, &ev, &err), FL_OK);
    fl_eval_stats_t want;
    assert_int_equal(
        fl_evaluation_run(ev, f.net, 6, 0, seed, f.opts.max_episode_steps, NULL, NULL, NULL, NULL, &want, &err), FL_OK);

    runner_t r = {0};
    set_cred(&f.fs, "evaluator", 1, 1);
    assert_int_equal(fl_evaluator_create(&f.opts, 1, f.ps_addr, f.control_addr, &r.ev, &err), FL_OK);
    pthread_t th;
    pthread_create(&th, NULL, run_thread, &r);
    fl_eval_result_t res[2];
    assert_int_equal(wait_results(&f, res, 1), 1);
    assert_int_equal(res[0].evaluator, 1);
    assert_int_equal(res[0].version, 3);
    assert_float_equal(res[0].v[FL_EVAL_RESULT_round], 1, 0);
    assert_float_equal(res[0].v[FL_EVAL_RESULT_return_mean], want.return_mean, 1e-9);
    assert_float_equal(res[0].v[FL_EVAL_RESULT_return_std], want.return_std, 1e-9);
    assert_float_equal(res[0].v[FL_EVAL_RESULT_return_ci95], want.return_ci95, 1e-9);
    assert_float_equal(res[0].v[FL_EVAL_RESULT_return_min], want.return_min, 0);
    assert_float_equal(res[0].v[FL_EVAL_RESULT_return_max], want.return_max, 0);
    assert_float_equal(res[0].v[FL_EVAL_RESULT_length_mean], want.length_mean, 1e-9);
    assert_float_equal(res[0].v[FL_EVAL_RESULT_episodes], 6, 0);
    /* Version 3 is not evaluated again; version 4 is. */
    fl_sleep_sec(0.5);
    assert_int_equal(fl_fleet_state_take_evals(&f.fs, res, 2), 0);
    publish(&f, 4, 78);
    assert_int_equal(wait_results(&f, res, 1), 1);
    assert_int_equal(res[0].version, 4);
    assert_float_equal(res[0].v[FL_EVAL_RESULT_round], 2, 0);
    /* The launcher's stop request ends the run cleanly. */
    pthread_mutex_lock(&f.fs.mu);
    f.fs.stop_actors = 1;
    pthread_mutex_unlock(&f.fs.mu);
    pthread_join(th, NULL);
    if (r.status != FL_OK) fail_msg("run: %s", r.err.msg);
    fl_evaluator_stats_t st;
    fl_evaluator_stats(r.ev, &st);
    assert_int_equal(st.rounds, 2);
    assert_int_equal(st.last_version, 4);
    fl_evaluator_destroy(r.ev);
    fl_evaluation_destroy(ev);
    fl_wrapped_env_destroy(w);
    fixture_stop(&f);
}

static void test_learner_step_schedule_needs_control(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_start(&f, 1, 1, 1);
    f.opts.every_learner_steps = 1;
    fl_evaluator_t *ev = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_evaluator_create(&f.opts, 0, f.ps_addr, NULL, &ev, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "eval.every_unit"));
    assert_int_equal(fl_evaluator_create(&f.opts, 1, f.ps_addr, f.control_addr, &ev, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "run.evaluators"));
    f.opts.model_spec = "dense(";
    assert_int_equal(fl_evaluator_create(&f.opts, 0, f.ps_addr, f.control_addr, &ev, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "model.spec"));
    fixture_stop(&f);
}

/* One hand-made report through a reporter, with incarnation 1's credential; returns the
 * launcher's answer of steps. */
static void send_as(const fl_fleet_state_t *fs, const char *addr, const char *role, int index, const fl_report_t *rep,
                    const float *returns, int n, uint64_t *env, uint64_t *learner) {
    set_cred(fs, role, index, 1);
    fl_reporter_t *r = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_reporter_create(addr, role, (uint32_t)index, 0, &r, &err), FL_OK);
    for (int i = 0; i < n; i++) fl_reporter_episode(r, returns[i], 10);
    fl_reporter_tick(r, rep, 1);
    fl_reporter_fleet_steps(r, env, learner);
    fl_reporter_destroy(r);
}

static void test_handler_tables(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_start(&f, 2, 1, 1);
    uint64_t env, learner;
    fl_report_t a = {.env_steps = 100, .epsilon = 0.4};
    const float ret0[] = {1, 2, 3};
    send_as(&f.fs, f.control_addr, "actor", 0, &a, ret0, 3, &env, &learner);
    assert_int_equal(env, 100);
    fl_report_t b = {.env_steps = 50, .epsilon = 0.01};
    const float ret1[] = {10};
    send_as(&f.fs, f.control_addr, "actor", 1, &b, ret1, 1, &env, &learner);
    fl_report_t l = {.learner_steps = 77};
    send_as(&f.fs, f.control_addr, "learner", 0, &l, NULL, 0, &env, &learner);
    assert_int_equal(env, 150);
    assert_int_equal(learner, 77);
    pthread_mutex_lock(&f.fs.mu);
    uint64_t n;
    assert_float_equal(fl_fleet_state_actor_return(&f.fs, 0, &n), 2.0, 1e-9);
    assert_int_equal(n, 3);
    assert_float_equal(fl_fleet_state_actor_return(&f.fs, 1, &n), 10.0, 1e-9);
    assert_float_equal(fl_fleet_state_mean_return(&f.fs, &n), 4.0, 1e-9);
    assert_int_equal(n, 4);
    assert_float_equal(f.fs.actors[1].epsilon, 0.01, 1e-12);
    pthread_mutex_unlock(&f.fs.mu);

    /* Results: complete ones queue once per round; incomplete ones are ignored. */
    double values[FL_EVALUATOR_RESULT_COUNT];
    for (int i = 0; i < FL_EVALUATOR_RESULT_COUNT; i++) values[i] = i + 0.5;
    values[FL_EVAL_RESULT_round] = 1;
    values[FL_EVAL_RESULT_return_min] = values[FL_EVAL_RESULT_return_mean] - 1; /* figures that can be true */
    values[FL_EVAL_RESULT_return_max] = values[FL_EVAL_RESULT_return_mean] + 1;
    fl_report_t e = {.param_version = 9,
                     .n_extra = FL_EVALUATOR_RESULT_COUNT,
                     .extra_names = fl_evaluator_result_names,
                     .extra_values = values};
    send_as(&f.fs, f.control_addr, "evaluator", 0, &e, NULL, 0, &env, &learner);
    send_as(&f.fs, f.control_addr, "evaluator", 0, &e, NULL, 0, &env, &learner); /* the same round again */
    e.n_extra = FL_EVALUATOR_RESULT_COUNT - 1;
    values[FL_EVAL_RESULT_round] = 2;
    send_as(&f.fs, f.control_addr, "evaluator", 0, &e, NULL, 0, &env, &learner); /* a name missing */
    fl_eval_result_t res[4];
    assert_int_equal(fl_fleet_state_take_evals(&f.fs, res, 4), 1);
    assert_int_equal(res[0].version, 9);
    assert_float_equal(res[0].v[FL_EVAL_RESULT_return_mean], FL_EVAL_RESULT_return_mean + 0.5, 0);

    /* An unknown role or an index out of range is refused, and nothing changes. */
    fl_rpc_channel_t *ch = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_channel_create(f.control_addr, 0, &ch, &err), FL_OK);
    Fleet__Report m = FLEET__REPORT__INIT;
    m.role = "evaluator";
    m.index = 5;
    ProtobufCMessage *resp = NULL;
    assert_int_equal(fl_rpc_unary_pb(ch, fl_method_path(FL_METHOD_CONTROL_REPORT), &m.base,
                                     &fleet__report_response__descriptor, &resp, 2000, 0, &err),
                     FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "unknown role"));
    m.role = "pirate";
    m.index = 0;
    assert_int_equal(fl_rpc_unary_pb(ch, fl_method_path(FL_METHOD_CONTROL_REPORT), &m.base,
                                     &fleet__report_response__descriptor, &resp, 2000, 0, &err),
                     FL_INVALID_ARGUMENT);
    fl_rpc_channel_destroy(ch);
    fixture_stop(&f);
}

/* A Report sent as it is (no reporter): the call's status, the message in err. */
static fl_status raw_report(fl_rpc_channel_t *ch, Fleet__Report *m, fl_err_t *err) {
    ProtobufCMessage *resp = NULL;
    fl_status s = fl_rpc_unary_pb(ch, fl_method_path(FL_METHOD_CONTROL_REPORT), &m->base,
                                  &fleet__report_response__descriptor, &resp, 2000, 0, err);
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
    return s;
}

/* m's credential for incarnation n of its role and index under the fixture's secret. */
static void credential(const fixture_t *f, Fleet__Report *m, uint64_t n, char tok[FL_CRED_TOKEN_CHARS + 1]) {
    uint8_t key[FL_CRED_KEY_BYTES];
    fl_cred_role_key(f->fs.secret, m->role, m->index, key);
    fl_cred_token(key, n, tok);
    m->incarnation = n;
    m->credential = tok;
}

static void test_reports_that_cannot_lie(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_start(&f, 2, 1, 1);
    f.fs.max_abs_reward = 1.0;
    fl_rpc_channel_t *ch = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_channel_create(f.control_addr, 0, &ch, &err), FL_OK);
    char tok[FL_CRED_TOKEN_CHARS + 1];

    /* A forged evaluation that would end the run at its target: no credential, then one
     * of another role and of another run. */
    Fleet__Metric mv[FL_EVALUATOR_RESULT_COUNT], *mp[FL_EVALUATOR_RESULT_COUNT];
    for (int i = 0; i < FL_EVALUATOR_RESULT_COUNT; i++) {
        fleet__metric__init(&mv[i]);
        mv[i].name = (char *)fl_evaluator_result_names[i];
        mv[i].value = 1;
        mp[i] = &mv[i];
    }
    mv[FL_EVAL_RESULT_return_mean].value = mv[FL_EVAL_RESULT_return_min].value = mv[FL_EVAL_RESULT_return_max].value =
        1e9;
    mv[FL_EVAL_RESULT_length_max].value = 500;
    Fleet__Report e = FLEET__REPORT__INIT;
    e.role = "evaluator";
    e.index = 0;
    e.n_extra = FL_EVALUATOR_RESULT_COUNT;
    e.extra = mp;
    e.param_version = 5;
    assert_int_equal(raw_report(ch, &e, &err), FL_PERMISSION_DENIED);
    assert_non_null(strstr(err.msg, "evaluator 0: no credential"));
    assert_non_null(strstr(err.msg, FL_CRED_ENV));
    Fleet__Report other = e;
    other.role = "actor";
    credential(&f, &other, 1, tok);
    e.incarnation = 1;
    e.credential = tok; /* actor 0's token */
    assert_int_equal(raw_report(ch, &e, &err), FL_PERMISSION_DENIED);
    assert_non_null(strstr(err.msg, "a wrong credential"));
    /* The right credential, but a return of 1e9 in at most 500 steps at 1 a step. */
    credential(&f, &e, 1, tok);
    assert_int_equal(raw_report(ch, &e, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "max_abs_reward"));
    mv[FL_EVAL_RESULT_return_mean].value = 300, mv[FL_EVAL_RESULT_return_min].value = 400;
    mv[FL_EVAL_RESULT_return_max].value = 450;
    assert_int_equal(raw_report(ch, &e, &err), FL_INVALID_ARGUMENT); /* mean below min */
    assert_non_null(strstr(err.msg, "min <= mean <= max"));
    mv[FL_EVAL_RESULT_return_std].value = NAN;
    mv[FL_EVAL_RESULT_return_min].value = 200;
    assert_int_equal(raw_report(ch, &e, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "return_std"));
    fl_eval_result_t res[2];
    assert_int_equal(fl_fleet_state_take_evals(&f.fs, res, 2), 0); /* none of them counted */
    mv[FL_EVAL_RESULT_return_std].value = 10;
    assert_int_equal(raw_report(ch, &e, &err), FL_OK); /* a true one */
    assert_int_equal(fl_fleet_state_take_evals(&f.fs, res, 2), 1);
    assert_float_equal(res[0].v[FL_EVAL_RESULT_return_mean], 300, 0);

    /* Actor returns: NaN, infinite and beyond 1 a step are refused. */
    Fleet__Report a = FLEET__REPORT__INIT;
    a.role = "actor";
    a.index = 1;
    a.epsilon = 0.1;
    a.env_steps = 100;
    float rets[1] = {NAN};
    uint32_t lens[1] = {10};
    a.n_episode_returns = a.n_episode_lengths = 1;
    a.episode_returns = rets;
    a.episode_lengths = lens;
    credential(&f, &a, 1, tok);
    assert_int_equal(raw_report(ch, &a, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "episode_returns[0]"));
    rets[0] = INFINITY;
    assert_int_equal(raw_report(ch, &a, &err), FL_INVALID_ARGUMENT);
    rets[0] = 10.5f;
    assert_int_equal(raw_report(ch, &a, &err), FL_INVALID_ARGUMENT);
    a.epsilon = 2;
    rets[0] = 7;
    assert_int_equal(raw_report(ch, &a, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "epsilon"));
    a.epsilon = 0.1;
    assert_int_equal(raw_report(ch, &a, &err), FL_OK);
    pthread_mutex_lock(&f.fs.mu);
    assert_int_equal(f.fs.n_returns, 1);
    assert_true(f.fs.best_return == 7);
    pthread_mutex_unlock(&f.fs.mu);

    /* Incarnations: a restarted actor counts from zero on top of its predecessor; the
     * predecessor cannot report any more; counters cannot jump or go back. */
    a.n_episode_returns = a.n_episode_lengths = 0;
    credential(&f, &a, 2, tok);
    a.env_steps = 50;
    assert_int_equal(raw_report(ch, &a, &err), FL_OK);
    pthread_mutex_lock(&f.fs.mu);
    assert_int_equal(f.fs.actors[1].env_steps, 150);
    pthread_mutex_unlock(&f.fs.mu);
    credential(&f, &a, 1, tok);
    a.env_steps = 10000;
    assert_int_equal(raw_report(ch, &a, &err), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "incarnation 1 was replaced by incarnation 2"));
    credential(&f, &a, 2, tok);
    a.env_steps = 1000000000000ULL; /* 10^12 env steps in a moment: a budget stop if believed */
    assert_int_equal(raw_report(ch, &a, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "env_steps grew by"));
    a.env_steps = 40;
    assert_int_equal(raw_report(ch, &a, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "went back"));
    a.env_steps = 60;
    assert_int_equal(raw_report(ch, &a, &err), FL_OK);
    pthread_mutex_lock(&f.fs.mu);
    assert_int_equal(f.fs.actors[1].env_steps, 160);
    assert_int_equal(fl_fleet_state_env_steps(&f.fs), 160);
    assert_int_equal(f.fs.refused, 12);
    pthread_mutex_unlock(&f.fs.mu);

    /* A learner's steps likewise; services need their credential too. */
    Fleet__Report l = FLEET__REPORT__INIT;
    l.role = "learner";
    l.learner_steps = 10;
    credential(&f, &l, 1, tok);
    assert_int_equal(raw_report(ch, &l, &err), FL_OK);
    l.learner_steps = 5000000000ULL;
    assert_int_equal(raw_report(ch, &l, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "learner_steps"));
    l.learner_steps = 20;
    l.wait_fraction = NAN;
    assert_int_equal(raw_report(ch, &l, &err), FL_INVALID_ARGUMENT);
    /* Memory: private at most resident, resident at most 2^50 bytes; a true figure is kept. */
    l.wait_fraction = 0.5;
    l.rss_bytes = 100u << 20;
    l.private_bytes = 101u << 20;
    assert_int_equal(raw_report(ch, &l, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "private_bytes"));
    l.rss_bytes = UINT64_MAX;
    l.private_bytes = 1;
    assert_int_equal(raw_report(ch, &l, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "rss_bytes"));
    l.rss_bytes = 100u << 20;
    l.private_bytes = 20u << 20;
    l.cpu_s = NAN;
    assert_int_equal(raw_report(ch, &l, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "cpu_s"));
    l.cpu_s = 2.5;
    assert_int_equal(raw_report(ch, &l, &err), FL_OK);
    pthread_mutex_lock(&f.fs.mu);
    assert_int_equal(f.fs.learners[0].rss, 100u << 20);
    assert_int_equal(f.fs.learners[0].private_bytes, 20u << 20);
    assert_float_equal(f.fs.learners[0].cpu_s, 2.5, 0);
    pthread_mutex_unlock(&f.fs.mu);
    l.learner_steps = 20;
    Fleet__Report sv = FLEET__REPORT__INIT;
    sv.role = "replay";
    assert_int_equal(raw_report(ch, &sv, &err), FL_PERMISSION_DENIED);
    credential(&f, &sv, 1, tok);
    assert_int_equal(raw_report(ch, &sv, &err), FL_OK);
    pthread_mutex_lock(&f.fs.mu);
    assert_int_equal(fl_fleet_state_learner_steps(&f.fs), 20);
    pthread_mutex_unlock(&f.fs.mu);
    fl_rpc_channel_destroy(ch);
    fixture_stop(&f);
}

/* launcher.state: the windows, the roles' counters and the totals come back exactly; the
 * progress baselines are the saved counters; other role counts are refused. */
static void test_save_restore(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_start(&f, 2, 1, 1);
    uint64_t env, learner;
    float rets[150];
    for (int i = 0; i < 150; i++) rets[i] = (float)i * 0.37f;
    fl_report_t a = {.env_steps = 1000, .epsilon = 0.4};
    send_as(&f.fs, f.control_addr, "actor", 0, &a, rets, 150, &env, &learner);
    fl_report_t l = {.learner_steps = 77, .samples = 9856};
    send_as(&f.fs, f.control_addr, "learner", 0, &l, NULL, 0, &env, &learner);
    fl_fleet_totals_t t = {.elapsed_s = 12.5,
                           .env_steps = 1000,
                           .learner_steps = 77,
                           .samples = 9856,
                           .replay_inserted = 990,
                           .n_evals = 3,
                           .best_eval = 41.5};
    t.eval.version = 9;
    for (int i = 0; i < FL_EVALUATOR_RESULT_COUNT; i++) t.eval.v[i] = i * 1.1;
    for (int i = 0; i < FL_FLEET_SUPERVISION_COUNTERS; i++) t.supervision[i] = (uint64_t)(3 * i + 1);
    char path[128];
    snprintf(path, sizeof path, "/tmp/fl_launcher_state_%d", (int)getpid());
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_fleet_state_save(&f.fs, &t, path, &err), FL_OK);

    fl_fleet_state_t back;
    assert_int_equal(fl_fleet_state_init(&back, 2, 8, 1, 1, 0, 0), 0);
    fl_fleet_totals_t tb;
    assert_int_equal(fl_fleet_state_restore(&back, &tb, path, &err), FL_OK);
    assert_true(tb.elapsed_s == t.elapsed_s);
    assert_int_equal(tb.env_steps, t.env_steps);
    assert_int_equal(tb.learner_steps, t.learner_steps);
    assert_int_equal(tb.samples, t.samples);
    assert_int_equal(tb.replay_inserted, t.replay_inserted);
    assert_int_equal(tb.n_evals, t.n_evals);
    assert_true(tb.best_eval == t.best_eval);
    assert_int_equal(tb.eval.version, t.eval.version);
    assert_memory_equal(tb.eval.v, t.eval.v, sizeof t.eval.v);
    assert_memory_equal(tb.supervision, t.supervision, sizeof t.supervision); /* restarts, crashes, hangs */
    uint64_t n1, n2;
    assert_true(fl_fleet_state_mean_return(&back, &n1) == fl_fleet_state_mean_return(&f.fs, &n2));
    assert_int_equal(n1, n2);
    assert_int_equal(back.n_returns, 150);
    assert_true(fl_fleet_state_actor_return(&back, 0, &n1) == fl_fleet_state_actor_return(&f.fs, 0, &n2));
    assert_int_equal(back.actors[0].env_steps, 1000);
    assert_int_equal(back.actors[0].last_env, 1000);
    assert_int_equal(back.learners[0].last_steps, 77);
    assert_int_equal(back.learners[0].last_samples, 9856);
    assert_true(back.best_return == f.fs.best_return);
    fl_fleet_state_destroy(&back);

    assert_int_equal(fl_fleet_state_init(&back, 3, 8, 1, 1, 0, 0), 0);
    assert_int_equal(fl_fleet_state_restore(&back, &tb, path, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "actor.count = 3"));
    fl_fleet_state_destroy(&back);
    unlink(path);
    fixture_stop(&f);
}

/* A join through the real client, as `fleet actor --join` makes it. */
static fl_status join_as(const char *addr, const char *host, fl_join_grant_t *g, fl_err_t *err) {
    fl_err_init(err);
    return fl_control_join(addr, host, 0, g, err);
}

/* One report of a joined actor with its granted credential (leaving: its last). */
static void report_joined(const char *addr, const fl_join_grant_t *g, uint64_t env_steps, int leaving,
                          uint64_t *stop_env) {
    char var[64];
    snprintf(var, sizeof var, "1:%s", g->credential);
    setenv(FL_CRED_ENV, var, 1);
    fl_reporter_t *r = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_reporter_create(addr, "actor", g->index, 0, &r, &err), FL_OK);
    fl_report_t rep = {
        .env_steps = env_steps, .transitions_acked = env_steps / 2, .epsilon = g->epsilon, .leaving = leaving};
    fl_reporter_tick(r, &rep, 1);
    uint64_t learner;
    fl_reporter_fleet_steps(r, stop_env, &learner);
    fl_reporter_destroy(r);
}

static void test_join(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_start(&f, 2, 1, 0);
    f.fs.max_actors = f.fs.n_started + 3; /* actor.max_joined = 3 */
    fl_join_grant_t g[4];
    fl_err_t err;
    /* before the services serve: UNAVAILABLE (a joiner waits and asks again) */
    assert_int_equal(join_as(f.control_addr, "h1", &g[0], &err), FL_UNAVAILABLE);
    assert_non_null(strstr(err.msg, "still starting"));
    assert_int_equal(fl_fleet_state_open_joins(&f.fs, 0.4, 7, "127.0.0.1:5001,127.0.0.1:5002", "127.0.0.1:6001",
                                               "[run]\nname = x\n", "x", NULL),
                     0);
    assert_int_equal(join_as(f.control_addr, "h1", &g[0], &err), FL_OK);
    assert_int_equal(join_as(f.control_addr, "h2", &g[1], &err), FL_OK);
    assert_int_equal(g[0].index, 2);
    assert_int_equal(g[1].index, 3);
    assert_string_equal(g[0].replay, "127.0.0.1:5001,127.0.0.1:5002");
    assert_string_equal(g[0].paramserver, "127.0.0.1:6001");
    assert_string_equal(g[0].config, "[run]\nname = x\n");
    assert_string_equal(g[0].run_name, "x");
    /* epsilons: 0.4^(1 + 7/2), then 0.4^(1 + 7/4), between the started 0.4 and 0.4^8 */
    assert_true(fabs(g[0].epsilon - pow(0.4, 4.5)) < 1e-12);
    assert_true(fabs(g[1].epsilon - pow(0.4, 2.75)) < 1e-12);
    assert_true(fabs(fl_fleet_state_join_epsilon(0.4, 7, 2) - pow(0.4, 1 + 7 * 0.75)) < 1e-12);
    assert_true(fabs(fl_fleet_state_join_epsilon(0.4, 7, 3) - pow(0.4, 1 + 7 * 0.125)) < 1e-12);
    /* their reports count with the granted credential, and not with another index's */
    uint64_t env = 0;
    report_joined(f.control_addr, &g[0], 300, 0, &env);
    assert_int_equal(env, 300);
    fl_join_grant_t forged = g[1];
    forged.index = 0; /* actor 3's credential used for actor 0 */
    report_joined(f.control_addr, &forged, 999, 0, &env);
    assert_int_equal(f.fs.actors[0].env_steps, 0);
    report_joined(f.control_addr, &g[1], 200, 0, &env);
    assert_int_equal(env, 500);
    pthread_mutex_lock(&f.fs.mu);
    assert_int_equal(f.fs.n_actors, 4);
    assert_true(f.fs.actors[2].joined && !f.fs.actors[2].gone);
    assert_string_equal(f.fs.actors[2].host, "h1");
    pthread_mutex_unlock(&f.fs.mu);
    /* a host name that cannot be a host's, another role: refused */
    char longhost[100];
    memset(longhost, 'a', sizeof longhost - 1);
    longhost[sizeof longhost - 1] = '\0';
    assert_int_equal(join_as(f.control_addr, longhost, &g[2], &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "host name"));
    /* actor 2 leaves: its last report; its figures stay in the fleet's sums */
    report_joined(f.control_addr, &g[0], 350, 1, &env);
    assert_int_equal(env, 550);
    assert_int_equal(fl_fleet_state_check_joined(&f.fs, 60), 1);
    pthread_mutex_lock(&f.fs.mu);
    assert_int_equal(f.fs.actors[2].gone, FL_JOINED_LEFT);
    assert_int_equal(f.fs.leaves, 1);
    pthread_mutex_unlock(&f.fs.mu);
    /* actor 3 falls silent: lost; it reports again: back */
    fl_sleep_sec(0.05);
    assert_int_equal(fl_fleet_state_check_joined(&f.fs, 0.01), 0);
    assert_int_equal(f.fs.actors[3].gone, FL_JOINED_LOST);
    assert_int_equal(f.fs.losses, 1);
    report_joined(f.control_addr, &g[1], 260, 0, &env);
    assert_int_equal(fl_fleet_state_check_joined(&f.fs, 60), 1);
    assert_int_equal(f.fs.losses, 0);
    assert_int_equal(env, 610);
    /* the third join fills actor.max_joined; a fourth is refused */
    assert_int_equal(join_as(f.control_addr, "h3", &g[2], &err), FL_OK);
    assert_int_equal(g[2].index, 4);
    assert_int_equal(join_as(f.control_addr, "h4", &g[3], &err), FL_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.msg, "actor.max_joined"));

    /* a resumed launcher keeps the joined slots (gone with their sitting) and their figures */
    fl_fleet_totals_t t = {.elapsed_s = 1, .env_steps = 610};
    char path[128];
    snprintf(path, sizeof path, "/tmp/fl_launcher_join_%d", (int)getpid());
    fl_err_init(&err);
    assert_int_equal(fl_fleet_state_save(&f.fs, &t, path, &err), FL_OK);
    fl_fleet_state_t back;
    fl_fleet_totals_t tb;
    assert_int_equal(fl_fleet_state_init(&back, 2, 2, 1, 0, 0, 0), 0); /* room for 2 joins: 3 made */
    assert_int_equal(fl_fleet_state_restore(&back, &tb, path, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "actor.max_joined"));
    fl_fleet_state_destroy(&back);
    assert_int_equal(fl_fleet_state_init(&back, 2, 8, 1, 0, 0, 0), 0);
    assert_int_equal(fl_fleet_state_restore(&back, &tb, path, &err), FL_OK);
    assert_int_equal(back.n_actors, 5);
    assert_int_equal(fl_fleet_state_env_steps(&back), 610);
    assert_true(back.actors[3].joined && back.actors[3].gone == FL_JOINED_LEFT);
    assert_int_equal(back.actors[2].acked, 175); /* what the joined actors had acknowledged */
    assert_int_equal(back.actors[3].acked, 130);
    assert_int_equal(fl_fleet_state_check_joined(&back, 0), 0);
    fl_fleet_state_destroy(&back);
    unlink(path);

    /* while the fleet stops, and for a run that takes none: FAILED_PRECONDITION */
    pthread_mutex_lock(&f.fs.mu);
    f.fs.stop_actors = 1;
    pthread_mutex_unlock(&f.fs.mu);
    assert_int_equal(join_as(f.control_addr, "h5", &g[3], &err), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "stopping"));
    assert_int_equal(fl_fleet_state_open_joins(&f.fs, 0.4, 7, "a", "b", "c", "x", "run.deterministic rounds"), 0);
    assert_int_equal(join_as(f.control_addr, "h5", &g[3], &err), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "run.deterministic"));
    for (int i = 0; i < 3; i++) fl_join_grant_free(&g[i]);
    fixture_stop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_evaluator_reports_the_real_evaluation),
        cmocka_unit_test(test_learner_step_schedule_needs_control),
        cmocka_unit_test(test_handler_tables),
        cmocka_unit_test(test_reports_that_cannot_lie),
        cmocka_unit_test(test_save_restore),
        cmocka_unit_test(test_join),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
