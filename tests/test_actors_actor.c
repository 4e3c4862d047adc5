/* Tests for actors/actor: the epsilon schedule, epsilon-greedy selection, initial
 * priorities against hand-computed values and against independent single-row forwards,
 * and the whole actor end to end against real in-process services on 127.0.0.1: a
 * replay shard, a parameter server and a stand-in for the launcher's Control service
 * (fleet.Control/Report) that records what the actor reports and can ask it to stop, and
 * fl_actor_stop before and during a run. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "actors/actor.h"
#include "common/clock.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "kernels/qnet.h"
#include "paramserver/client.h"
#include "paramserver/server.h"
#include "replay/client.h"
#include "replay/server.h"
#include "replay/table.h"
#include "tests/replay_fixture.h"

/* ---- epsilon schedule ------------------------------------------------------------- */

static void test_epsilon(void **unused) {
    (void)unused;
    assert_float_equal(fl_actor_epsilon(0.4, 7, 0, 1), 0.4, 1e-15);
    assert_float_equal(fl_actor_epsilon(0.25, 3, 0, 1), 0.25, 1e-15);
    /* N = 2: the ends of the schedule. */
    assert_float_equal(fl_actor_epsilon(0.4, 7, 0, 2), 0.4, 1e-15);
    assert_float_equal(fl_actor_epsilon(0.4, 7, 1, 2), 0.00065536, 1e-15); /* 0.4^8 */
    /* N = 8: exponent 1 + i, so 0.4^(1+i). */
    assert_float_equal(fl_actor_epsilon(0.4, 7, 0, 8), 0.4, 1e-15);
    assert_float_equal(fl_actor_epsilon(0.4, 7, 1, 8), 0.16, 1e-15);
    assert_float_equal(fl_actor_epsilon(0.4, 7, 3, 8), 0.0256, 1e-15);
    assert_float_equal(fl_actor_epsilon(0.4, 7, 7, 8), 0.00065536, 1e-15);
    /* N = 5, alpha 2: exponent 1 + 2 * 2/4 = 2. */
    assert_float_equal(fl_actor_epsilon(0.5, 2, 2, 5), 0.25, 1e-15);
}

/* ---- epsilon-greedy ------------------------------------------------------------------- */

static void test_select_greedy(void **unused) {
    (void)unused;
    const float q[] = {
        1.0f,  2.0f,  2.0f,  /* tie between 1 and 2 -> 1 */
        5.0f,  5.0f,  5.0f,  /* all tied -> 0 */
        -3.0f, -1.0f, -2.0f, /* 1 */
        NAN,   0.5f,  0.7f,  /* NaN never wins -> 2 */
        0.0f,  NAN,   -1.0f, /* 0 */
    };
    const int32_t want[] = {1, 0, 1, 2, 0};
    int32_t got[5];
    fl_rng_t rng;
    fl_rng_init(&rng, 3);
    fl_actor_select_actions(q, 5, 3, 0.0, &rng, got);
    for (int i = 0; i < 5; i++)
        if (got[i] != want[i]) fail_msg("row %d: action %d, expected %d", i, got[i], want[i]);
}

static void test_select_explores(void **unused) {
    (void)unused;
    enum { B = 4000, A = 4 };
    static float q[B * A];
    static int32_t act[B];
    for (int b = 0; b < B; b++)
        for (int a = 0; a < A; a++) q[b * A + a] = a == 2 ? 1.0f : 0.0f; /* greedy: 2 */
    fl_rng_t rng;
    fl_rng_init(&rng, 11);
    /* epsilon 1: uniform over the 4 actions. */
    fl_actor_select_actions(q, B, A, 1.0, &rng, act);
    int count[A] = {0};
    for (int b = 0; b < B; b++) {
        assert_true(act[b] >= 0 && act[b] < A);
        count[act[b]]++;
    }
    for (int a = 0; a < A; a++)
        if (count[a] < B / A - 150 || count[a] > B / A + 150)
            fail_msg("action %d drawn %d of %d times", a, count[a], B);
    /* epsilon 0.2: non-greedy with probability 0.2 * 3/4 = 0.15. */
    fl_actor_select_actions(q, B, A, 0.2, &rng, act);
    int off = 0;
    for (int b = 0; b < B; b++) off += act[b] != 2;
    if (off < 450 || off > 750) fail_msg("%d of %d actions were not greedy, expected about 600", off, B);
}

/* ---- priorities -------------------------------------------------------------------- */

static fl_qnet_t *make_net(const char *spec, int obs_dim, int A, int max_batch) {
    fl_qnet_t *n = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_qnet_create(spec, obs_dim, A, max_batch, &n, &err) != FL_OK) fail_msg("fl_qnet_create: %s", err.msg);
    return n;
}

/* A linear Q = W x + b with W = [[1, 2], [3, -1]], b = [0.5, -0.5]. */
static void test_priorities_by_hand(void **unused) {
    (void)unused;
    fl_qnet_t *net = make_net("", 2, 2, 8);
    const fl_param_view_t *w = fl_qnet_find_view(net, "head.q.weight");
    const fl_param_view_t *b = fl_qnet_find_view(net, "head.q.bias");
    assert_non_null(w);
    assert_non_null(b);
    assert_int_equal(fl_qnet_num_params(net), 6);
    float *p = fl_qnet_params(net);
    const float W[4] = {1, 2, 3, -1}, bias[2] = {0.5f, -0.5f};
    memcpy(p + w->offset, W, sizeof W);
    memcpy(p + b->offset, bias, sizeof bias);

    /* 0: Q(1,0) = [1.5, 2.5], Q(0,1) = [2.5, -1.5]: |1 + 0.9*2.5 - 1.5| = 1.75
     * 1: terminal: Q(1,1) = [3.5, 1.5]: |0 - 1.5| = 1.5 (next_obs is infinite and unused)
     * 2: Q(0,0) = [0.5, -0.5], Q(2,-1) = [0.5, 6.5]: |-2 + 0.81*6.5 + 0.5| = 3.765 */
    const float obs[] = {1, 0, 1, 1, 0, 0};
    const float next[] = {0, 1, INFINITY, 0, 2, -1};
    const int32_t act[] = {0, 1, 1};
    const float rew[] = {1, 0, -2};
    const float disc[] = {0.9f, 0.0f, 0.81f};
    float *scratch = calloc(fl_actor_priority_scratch_floats(net), sizeof(float));
    assert_non_null(scratch);
    float prio[3];
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_actor_priorities(net, FL_DTYPE_FLOAT32, 3, obs, act, rew, disc, next, scratch, prio, &err),
                     FL_OK);
    assert_float_equal(prio[0], 1.75, 1e-5);
    assert_float_equal(prio[1], 1.5, 1e-5);
    assert_float_equal(prio[2], 3.765, 1e-5);

    /* An action out of range is rejected with its index. */
    const int32_t bad[] = {0, 2, 1};
    assert_int_equal(fl_actor_priorities(net, FL_DTYPE_FLOAT32, 3, obs, bad, rew, disc, next, scratch, prio, &err),
                     FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "transition 1"));
    assert_int_equal(fl_actor_priorities(net, FL_DTYPE_INVALID, 3, obs, act, rew, disc, next, scratch, prio, &err),
                     FL_INVALID_ARGUMENT);
    free(scratch);
    fl_qnet_destroy(net);
}

/* uint8 observations through a two-layer network, more transitions than max_batch (the
 * forwards run in chunks), checked against single-row forwards of a second network with
 * the same parameters. */
static void test_priorities_chunked(void **unused) {
    (void)unused;
    enum { D = 5, A = 3, N = 23 };
    fl_qnet_t *net = make_net("dense(7) relu", D, A, 4);
    fl_qnet_t *ref = make_net("dense(7) relu", D, A, 1);
    fl_rng_t rng;
    fl_rng_init(&rng, 42);
    fl_qnet_init(net, &rng);
    fl_qnet_copy_params(ref, net);

    uint8_t obs[N * D], next[N * D];
    int32_t act[N];
    float rew[N], disc[N], prio[N];
    for (int i = 0; i < N * D; i++) {
        obs[i] = (uint8_t)fl_rng_below(&rng, 256);
        next[i] = (uint8_t)fl_rng_below(&rng, 256);
    }
    for (int k = 0; k < N; k++) {
        act[k] = (int32_t)fl_rng_below(&rng, A);
        rew[k] = (float)fl_rng_uniform(&rng, -2, 2);
        disc[k] = k % 4 == 0 ? 0.0f : powf(0.97f, (float)(1 + k % 3));
    }
    float *scratch = calloc(fl_actor_priority_scratch_floats(net), sizeof(float));
    assert_non_null(scratch);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_actor_priorities(net, FL_DTYPE_UINT8, N, obs, act, rew, disc, next, scratch, prio, &err),
                     FL_OK);
    for (int k = 0; k < N; k++) {
        float x[D], q0[A], q1[A];
        for (int i = 0; i < D; i++) x[i] = obs[k * D + i] / 255.0f;
        assert_int_equal(fl_qnet_forward(ref, x, 1, q0), FL_OK);
        for (int i = 0; i < D; i++) x[i] = next[k * D + i] / 255.0f;
        assert_int_equal(fl_qnet_forward(ref, x, 1, q1), FL_OK);
        double best = q1[0];
        for (int a = 1; a < A; a++) best = q1[a] > best ? q1[a] : best;
        double want = fabs(rew[k] + (disc[k] != 0.0f ? disc[k] * best : 0.0) - q0[act[k]]);
        if (fabs(prio[k] - want) > 1e-5 * (1 + want))
            fail_msg("transition %d: priority %g, expected %g", k, prio[k], want);
    }
    free(scratch);
    fl_qnet_destroy(ref);
    fl_qnet_destroy(net);
}

/* ---- a stand-in for the launcher's Control service ----------------------------------- */

typedef struct control {
    pthread_mutex_t mu;
    fl_rpc_server_t *srv;
    char addr[64];
    int stop_after; /* answer stop = true from this many reports on (0 = never) */
    int reports;
    int bad; /* reports from another role or index */
    uint32_t want_index;
    uint64_t episodes_listed; /* episode returns delivered, over all reports */
    Fleet__Report last;       /* scalar fields of the last report */
    double min_epsilon, max_epsilon;
} control_t;

static fl_status control_report(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply) {
    control_t *c = user;
    Fleet__Report *m = fleet__report__unpack(NULL, len, req);
    if (!m) return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT, "cannot decode Report");
    pthread_mutex_lock(&c->mu);
    if (strcmp(m->role, "actor") != 0 || m->index != c->want_index) c->bad++;
    c->reports++;
    c->episodes_listed += m->n_episode_returns;
    if (m->n_episode_returns != m->n_episode_lengths) c->bad++;
    c->last = *m;
    c->last.role = NULL;
    c->last.episode_returns = NULL;
    c->last.episode_lengths = NULL;
    c->last.extra = NULL;
    if (c->reports == 1 || m->epsilon < c->min_epsilon) c->min_epsilon = m->epsilon;
    if (c->reports == 1 || m->epsilon > c->max_epsilon) c->max_epsilon = m->epsilon;
    Fleet__ReportResponse r = FLEET__REPORT_RESPONSE__INIT;
    r.stop = c->stop_after > 0 && c->reports >= c->stop_after;
    pthread_mutex_unlock(&c->mu);
    fleet__report__free_unpacked(m, NULL);
    return fl_rpc_reply_pb(reply, &r.base);
}

static void control_start(control_t *c, uint32_t index, int stop_after) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->want_index = index;
    c->stop_after = stop_after;
    fl_err_t err;
    fl_err_init(&err);
    int port = 0;
    if (fl_rpc_server_create(NULL, &c->srv, &err) != FL_OK ||
        fl_rpc_server_add_unary(c->srv, "/fleet.Control/Report", control_report, c) != FL_OK ||
        fl_rpc_server_bind(c->srv, "127.0.0.1:0", &port, &err) != FL_OK || fl_rpc_server_start(c->srv, &err) != FL_OK)
        fail_msg("control server: %s", err.msg);
    snprintf(c->addr, sizeof c->addr, "127.0.0.1:%d", port);
}

static void control_stop(control_t *c) {
    fl_rpc_server_destroy(c->srv);
    pthread_mutex_destroy(&c->mu);
}

/* ---- end to end ----------------------------------------------------------------------- */

#define SPEC "dense(32) relu"
#define GAMMA 0.99

typedef struct fixture {
    fl_actor_opts_t actor; /* the actors' */
    replay_fixture_t replay;
    fl_paramserver_service_t *ps;
    char ps_addr[128];
    fl_qnet_t *published; /* the network whose parameters were published */
    uint64_t version;
} fixture_t;

/* CartPole wrapped with `wrappers`, whose observations are obs_len floats. */
static void fixture_start_wrapped(fixture_t *f, int num_envs, int count, const char *wrappers, int obs_len) {
    memset(f, 0, sizeof *f);
    fl_actor_opts_t *o = &f->actor;
    fl_actor_opts_init(o);
    o->env.name = "cartpole";
    o->env.wrappers = wrappers;
    o->env.num_envs = num_envs;
    o->model_spec = SPEC;
    o->count = count;
    o->local_buffer = 50;
    o->sync_every = 100;
    o->n_step = 3;
    o->gamma = GAMMA;
    o->progress_every = 0.05;
    o->seed = 5;

    fl_err_t err;
    fl_err_init(&err);
    /* The shard the actors insert into: CartPole's actions, `count` actors. */
    fl_replay_service_opts_t ro = replay_fixture_opts(fl_obs_spec_make(FL_DTYPE_FLOAT32, 1, &obs_len), 2, 100000, 100);
    ro.samples_per_insert = 0; /* no learner samples here: no rate limit */
    ro.seed = 5;
    ro.actors = count;
    replay_fixture_start(&f->replay, &ro);
    if (fl_paramserver_service_create(NULL, 0, &f->ps, &err) != FL_OK ||
        fl_paramserver_service_start(f->ps, "127.0.0.1:0", f->ps_addr, sizeof f->ps_addr, &err) != FL_OK)
        fail_msg("paramserver service: %s", err.msg);

    /* The learner's part: publish initial parameters of the right size. */
    f->published = make_net(SPEC, obs_len, 2, 64);
    fl_rng_t rng;
    fl_rng_init(&rng, 99);
    fl_qnet_init(f->published, &rng);
    f->version = 7;
    fl_param_client_t *pc = NULL;
    if (fl_param_client_create(f->ps_addr, &pc, &err) != FL_OK ||
        fl_param_publish(pc, f->version, fl_qnet_params(f->published), fl_qnet_num_params(f->published), 5000, &err) !=
            FL_OK)
        fail_msg("publish: %s", err.msg);
    fl_param_client_destroy(pc);
}

static void fixture_start(fixture_t *f, int num_envs, int count) {
    fixture_start_wrapped(f, num_envs, count, "", 4);
}

static void fixture_stop(fixture_t *f) {
    fl_qnet_destroy(f->published);
    fl_paramserver_service_destroy(f->ps);
    replay_fixture_stop(&f->replay);
}

static fl_replay_info_t replay_info(const fixture_t *f) {
    fl_replay_client_t *rc = NULL;
    fl_err_t err;
    fl_err_init(&err);
    fl_replay_info_t info;
    memset(&info, 0, sizeof info);
    if (fl_replay_client_create(f->replay.addr, &rc, &err) != FL_OK || fl_replay_info(rc, 5000, &info, &err) != FL_OK)
        fail_msg("replay info: %s", err.msg);
    fl_replay_client_destroy(rc);
    return info;
}

static fl_actor_t *create_actor(const fixture_t *f, int index, const char *control) {
    fl_err_t err;
    fl_err_init(&err);
    fl_actor_t *a = NULL;
    fl_status s = fl_actor_create(&f->actor, index, f->replay.addr, f->ps_addr, control, &a, &err);
    if (s != FL_OK) fail_msg("fl_actor_create: %s: %s", fl_status_name(s), err.msg);
    return a;
}

static void run_actor(const fixture_t *f, int index, const char *control, fl_actor_stats_t *st) {
    fl_actor_t *a = create_actor(f, index, control);
    fl_err_t err;
    fl_err_init(&err);
    fl_status s = fl_actor_run(a, &err);
    if (s != FL_OK) fail_msg("fl_actor_run: %s: %s", fl_status_name(s), err.msg);
    fl_actor_stats(a, st);
    fl_actor_destroy(a);
}

static int is_discount(float d) {
    if (d == 0.0f) return 1;
    for (int m = 1; m <= 3; m++)
        if (fabs(d - pow(GAMMA, m)) < 1e-6) return 1;
    return 0;
}

/* Samples from the shard and checks every item, including that its stored priority is
 * the one the published network gives (so the actor ran with the fetched parameters). */
static void check_samples(fixture_t *f) {
    fl_replay_client_t *rc = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_replay_client_create(f->replay.addr, &rc, &err) != FL_OK) fail_msg("replay client: %s", err.msg);
    fl_replay_batch_t b;
    enum { B = 256 };
    assert_int_equal(fl_replay_batch_init(&b, B, 16), FL_OK);
    if (fl_replay_sample(rc, B, 0.4, 5000, &b, &err) != FL_OK) fail_msg("sample: %s", err.msg);
    assert_int_equal(b.count, B);
    fl_table_t *table = fl_replay_service_table(f->replay.svc);
    const fl_table_config_t *tc = fl_table_config(table);
    float *scratch = calloc(fl_actor_priority_scratch_floats(f->published), sizeof(float));
    assert_non_null(scratch);
    float prio[B];
    assert_int_equal(fl_actor_priorities(f->published, FL_DTYPE_FLOAT32, B, b.obs, b.actions, b.rewards, b.discounts,
                                         b.next_obs, scratch, prio, &err),
                     FL_OK);
    for (size_t k = 0; k < b.count; k++) {
        if (b.actions[k] != 0 && b.actions[k] != 1) fail_msg("item %zu: action %d", k, b.actions[k]);
        if (!is_discount(b.discounts[k])) fail_msg("item %zu: discount %.9g is not 0 or gamma^1..3", k, b.discounts[k]);
        if (!isfinite(b.weights[k]) || b.weights[k] <= 0 || b.weights[k] > 1)
            fail_msg("item %zu: weight %g", k, b.weights[k]);
        /* cartpole pays 1 per step: R = 1, 1 + g or 1 + g + g^2. */
        double r = b.rewards[k];
        if (fabs(r - 1) > 1e-5 && fabs(r - (1 + GAMMA)) > 1e-5 && fabs(r - (1 + GAMMA + GAMMA * GAMMA)) > 1e-5)
            fail_msg("item %zu: reward %g", k, r);
        const float *o = (const float *)(b.obs + k * 16), *no = (const float *)(b.next_obs + k * 16);
        for (int i = 0; i < 4; i++)
            if (!isfinite(o[i]) || !isfinite(no[i])) fail_msg("item %zu: non-finite observation", k);
        double stored;
        if (fl_table_priority(table, b.keys[k], &stored, &err) != FL_OK)
            fail_msg("priority of item %zu: %s", k, err.msg);
        if (!isfinite(stored) || stored <= 0) fail_msg("item %zu: stored priority %g", k, stored);
        double want = pow((double)prio[k] + tc->priority_eps, tc->alpha);
        if (fabs(stored - want) > 1e-4 * want + 1e-6)
            fail_msg("item %zu: stored priority %.9g, the published network gives %.9g", k, stored, want);
    }
    free(scratch);
    fl_replay_batch_free(&b);
    fl_replay_client_destroy(rc);
}

/* One env, 2000 steps, reporting to a Control service that never asks to stop. */
static void test_end_to_end(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_start(&f, 1, 2);
    f.actor.max_steps = 2000;
    control_t ctl;
    control_start(&ctl, 1, 0);
    fl_actor_stats_t st;
    run_actor(&f, 1, ctl.addr, &st);

    fl_replay_info_t info = replay_info(&f);
    assert_int_equal(st.env_steps, 2000);
    /* Every step makes one transition; at most n - 1 = 2 partial windows are dropped. */
    assert_in_range(info.inserted, 1998, 2000);
    assert_int_equal(info.rejected, 0);
    assert_int_equal(st.transitions_acked, info.inserted);
    assert_int_equal(st.transitions_sent, info.inserted);
    assert_int_equal(st.transitions_unacked, 0);
    assert_int_equal(st.param_version, f.version);
    assert_true(st.param_updates >= 1);
    assert_true(st.episodes >= 1);
    assert_float_equal(st.epsilon, pow(0.4, 8), 1e-12);

    fl_param_store_info_t pinfo;
    fl_paramserver_service_info(f.ps, &pinfo);
    assert_true(pinfo.fetches_with_params >= 1);
    /* A fetch at start and then one per sync_every = 100 steps. */
    assert_true(pinfo.fetches >= 20);

    pthread_mutex_lock(&ctl.mu);
    assert_true(ctl.reports >= 2);
    assert_int_equal(ctl.bad, 0);
    assert_int_equal(ctl.last.transitions_acked, info.inserted);
    assert_int_equal(ctl.last.env_steps, 2000);
    assert_int_equal(ctl.last.episodes, st.episodes);
    assert_int_equal(ctl.episodes_listed, st.episodes);
    assert_int_equal(ctl.last.param_version, f.version);
    assert_float_equal(ctl.min_epsilon, pow(0.4, 8), 1e-12);
    assert_float_equal(ctl.max_epsilon, pow(0.4, 8), 1e-12);
    pthread_mutex_unlock(&ctl.mu);

    check_samples(&f);
    control_stop(&ctl);
    fixture_stop(&f);
}

/* env.wrappers reach the actor: a stack of 2 CartPole frames is 8 floats (the shard only
 * takes that shape), and maxsteps(20) truncates every episode at 20 steps at the latest. */
static void test_wrappers_from_config(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_start_wrapped(&f, 2, 2, "framestack(2) maxsteps(20)", 8);
    f.actor.max_steps = 400;
    fl_actor_stats_t st;
    run_actor(&f, 0, NULL, &st);
    fl_replay_info_t info = replay_info(&f);
    assert_int_equal(info.rejected, 0);
    assert_true(info.inserted >= 390);
    assert_int_equal(st.transitions_acked, info.inserted);
    /* 400 steps over 2 envs: at least 200 / 20 = 10 episodes per env ended. */
    assert_true(st.episodes >= 20);
    fixture_stop(&f);
}

/* A restarted actor (same index, same shard) writes on a new stream: nothing it sends
 * is taken for a resend of its predecessor's batches. Four envs per actor. */
static void test_restart_new_stream(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_start(&f, 4, 1);
    f.actor.max_steps = 400;
    fl_actor_stats_t a, b;
    run_actor(&f, 0, NULL, &a);
    fl_replay_info_t i1 = replay_info(&f);
    run_actor(&f, 0, NULL, &b);
    fl_replay_info_t i2 = replay_info(&f);
    assert_int_not_equal(a.stream_id, b.stream_id);
    assert_int_equal(a.env_steps, 400);
    assert_int_equal(b.env_steps, 400);
    assert_float_equal(a.epsilon, 0.4, 1e-12);
    assert_int_equal(i1.inserted, a.transitions_acked);
    assert_int_equal(i2.inserted, a.transitions_acked + b.transitions_acked);
    /* 4 envs: at most 4 * 2 partial windows dropped. */
    assert_in_range(a.transitions_acked, 392, 400);
    assert_in_range(b.transitions_acked, 392, 400);
    assert_int_equal(a.transitions_unacked + b.transitions_unacked, 0);
    check_samples(&f);
    fixture_stop(&f);
}

/* No step limit: the actor runs until the Control service asks it to stop, then sends
 * what it holds, flushes, and reports the final acknowledged count. */
static void test_stop_from_control(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_start(&f, 2, 4);
    f.actor.max_steps = 0;
    control_t ctl;
    control_start(&ctl, 2, 4);
    fl_actor_stats_t st;
    run_actor(&f, 2, ctl.addr, &st);
    fl_replay_info_t info = replay_info(&f);
    assert_true(st.env_steps > 0);
    assert_int_equal(st.env_steps % 2, 0);
    assert_int_equal(st.transitions_acked, info.inserted);
    assert_int_equal(st.transitions_unacked, 0);
    assert_true(info.inserted + 4 >= st.env_steps);
    pthread_mutex_lock(&ctl.mu);
    /* The stop came with report 4; the forced final report follows it. */
    assert_true(ctl.reports >= 5);
    assert_int_equal(ctl.bad, 0);
    assert_int_equal(ctl.last.transitions_acked, info.inserted);
    assert_int_equal(ctl.last.env_steps, st.env_steps);
    assert_int_equal(ctl.last.param_version, f.version);
    assert_float_equal(ctl.last.epsilon, pow(0.4, 1 + 7 * 2 / 3.0), 1e-12);
    pthread_mutex_unlock(&ctl.mu);
    control_stop(&ctl);
    fixture_stop(&f);
}

/* Parameters of another model on the server are an error that names both sizes (and
 * the spec, which the actor copied: the caller's string may change after create). */
static void test_param_size_mismatch(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_start(&f, 1, 1);
    char spec[32];
    snprintf(spec, sizeof spec, "dense(8) relu");
    f.actor.model_spec = spec;
    f.actor.max_steps = 100;
    fl_actor_t *a = create_actor(&f, 0, NULL);
    snprintf(spec, sizeof spec, "overwritten");
    fl_actor_stats_t st;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_actor_run(a, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dense(8) relu"));
    fl_actor_stats(a, &st);
    assert_int_equal(st.env_steps, 0);
    fl_actor_destroy(a);
    fixture_stop(&f);
}

static void test_bad_arguments(void **unused) {
    (void)unused;
    fl_actor_opts_t o;
    fl_actor_opts_init(&o);
    o.count = 2;
    fl_err_t err;
    fl_err_init(&err);
    fl_actor_t *a = (fl_actor_t *)&o; /* not NULL: a failed create must clear it */
    assert_int_equal(fl_actor_create(&o, 2, "127.0.0.1:1", "127.0.0.1:1", NULL, &a, &err), FL_INVALID_ARGUMENT);
    assert_null(a);
    assert_non_null(strstr(err.msg, "index 2"));
    assert_int_equal(fl_actor_create(&o, -1, "127.0.0.1:1", "127.0.0.1:1", NULL, &a, &err), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_actor_create(&o, 0, "", "127.0.0.1:1", NULL, &a, &err), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_actor_create(&o, 0, "127.0.0.1:1", NULL, NULL, &a, &err), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_actor_create(NULL, 0, "127.0.0.1:1", "127.0.0.1:1", NULL, &a, &err), FL_INVALID_ARGUMENT);
    o.env.name = "no-such-env";
    assert_int_equal(fl_actor_create(&o, 0, "127.0.0.1:1", "127.0.0.1:1", NULL, &a, &err), FL_NOT_FOUND);
    assert_null(a);
    o.env.name = "cartpole";
    o.model_spec = "dense(0)";
    assert_int_equal(fl_actor_create(&o, 0, "127.0.0.1:1", "127.0.0.1:1", NULL, &a, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "model.spec"));
    assert_null(a);
    fl_actor_destroy(NULL);
}

/* fl_actor_stop before fl_actor_run: the run stops at once, cleanly; a second run is
 * refused. */
static void test_stop_before_run(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_start(&f, 1, 1);
    fl_actor_t *a = create_actor(&f, 0, NULL);
    fl_actor_stop(a);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_actor_run(a, &err), FL_OK);
    fl_actor_stats_t st;
    fl_actor_stats(a, &st);
    assert_int_equal(st.env_steps, 0);
    assert_int_equal(st.transitions_sent, 0);
    assert_int_equal(st.param_version, f.version);
    assert_int_equal(fl_actor_run(a, &err), FL_FAILED_PRECONDITION);
    fl_actor_destroy(a);
    fixture_stop(&f);
}

typedef struct {
    fl_actor_t *a;
    fl_status s;
    fl_err_t err;
} runner_t;

static void *run_thread(void *p) {
    runner_t *r = p;
    fl_err_init(&r->err);
    r->s = fl_actor_run(r->a, &r->err);
    return NULL;
}

/* fl_actor_stop from another thread while the actor runs without a step limit: it
 * stops, sends what it holds and flushes. */
static void test_stop_from_thread(void **unused) {
    (void)unused;
    fixture_t f;
    fixture_start(&f, 2, 1);
    f.actor.max_steps = 0;
    runner_t r = {.a = create_actor(&f, 0, NULL)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, run_thread, &r), 0);
    for (int i = 0; i < 500 && replay_info(&f).inserted < 200; i++) fl_sleep_sec(0.02);
    fl_actor_stop(r.a);
    assert_int_equal(pthread_join(t, NULL), 0);
    if (r.s != FL_OK) fail_msg("fl_actor_run: %s", r.err.msg);
    fl_actor_stats_t st;
    fl_actor_stats(r.a, &st);
    fl_replay_info_t info = replay_info(&f);
    assert_true(st.env_steps > 0);
    assert_true(info.inserted >= 200);
    assert_int_equal(st.transitions_acked, info.inserted);
    assert_int_equal(st.transitions_unacked, 0);
    fl_actor_destroy(r.a);
    fixture_stop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epsilon),
        cmocka_unit_test(test_select_greedy),
        cmocka_unit_test(test_select_explores),
        cmocka_unit_test(test_priorities_by_hand),
        cmocka_unit_test(test_priorities_chunked),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_end_to_end),
        cmocka_unit_test(test_wrappers_from_config),
        cmocka_unit_test(test_restart_new_stream),
        cmocka_unit_test(test_stop_from_control),
        cmocka_unit_test(test_param_size_mismatch),
        cmocka_unit_test(test_stop_before_run),
        cmocka_unit_test(test_stop_from_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
