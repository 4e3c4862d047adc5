/* Tests of common/control: a reporter talking to a small fleet.Control server on a unix
 * socket or loopback TCP, built here from common/rpc and the generated messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/control.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"

/* ---- a Control server that records every report --------------------------------------- */

enum { MAX_REPORTS = 64 };

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    Fleet__Report *reports[MAX_REPORTS];
    int n;
    int answer_stop;
    int hold;         /* handlers wait until released */
    int released;     /* set by the test */
    int holding;      /* a handler is waiting */
    int hold_gave_up; /* a held handler stopped waiting on its own */
} control_state;

static fl_status on_report(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply) {
    control_state *cs = user;
    Fleet__Report *m = fleet__report__unpack(NULL, len, req);
    if (!m) return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT, "Report: cannot decode");
    pthread_mutex_lock(&cs->mu);
    if (cs->hold) {
        cs->holding = 1;
        pthread_cond_broadcast(&cs->cv);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 30; /* a safety net, so that a broken reporter fails the test instead of hanging it */
        while (!cs->released)
            if (pthread_cond_timedwait(&cs->cv, &cs->mu, &until) != 0) {
                cs->hold_gave_up = 1;
                break;
            }
        cs->holding = 0;
    }
    if (cs->n < MAX_REPORTS)
        cs->reports[cs->n++] = m;
    else
        fleet__report__free_unpacked(m, NULL);
    Fleet__ReportResponse r = FLEET__REPORT_RESPONSE__INIT;
    r.stop = cs->answer_stop;
    r.latest_version = 7;
    pthread_cond_broadcast(&cs->cv);
    pthread_mutex_unlock(&cs->mu);
    return fl_rpc_reply_pb(reply, &r.base);
}

typedef struct {
    fl_rpc_server_t *srv;
    control_state cs;
    char addr[128];
} control_server;

static control_server *control_start(const char *bind) {
    control_server *s = calloc(1, sizeof *s);
    assert_non_null(s);
    pthread_mutex_init(&s->cs.mu, NULL);
    pthread_cond_init(&s->cs.cv, NULL);
    fl_err_t err;
    fl_err_init(&err);
    fl_rpc_server_opts_t o = {.threads = 2, .grace_s = 0.2};
    assert_int_equal(fl_rpc_server_create(&o, &s->srv, &err), FL_OK);
    assert_int_equal(fl_rpc_server_add_unary(s->srv, "/fleet.Control/Report", on_report, &s->cs), FL_OK);
    int port = 0;
    assert_int_equal(fl_rpc_server_bind(s->srv, bind, &port, &err), FL_OK);
    if (port > 0)
        snprintf(s->addr, sizeof s->addr, "127.0.0.1:%d", port);
    else
        snprintf(s->addr, sizeof s->addr, "%s", bind);
    assert_int_equal(fl_rpc_server_start(s->srv, &err), FL_OK);
    return s;
}

static void control_stop(control_server *s) {
    pthread_mutex_lock(&s->cs.mu);
    s->cs.released = 1;
    pthread_cond_broadcast(&s->cs.cv);
    pthread_mutex_unlock(&s->cs.mu);
    fl_rpc_server_destroy(s->srv);
    for (int i = 0; i < s->cs.n; i++) fleet__report__free_unpacked(s->cs.reports[i], NULL);
    pthread_mutex_destroy(&s->cs.mu);
    pthread_cond_destroy(&s->cs.cv);
    free(s);
}

static int report_count(control_server *s) {
    pthread_mutex_lock(&s->cs.mu);
    int n = s->cs.n;
    pthread_mutex_unlock(&s->cs.mu);
    return n;
}

static void unix_path(char *buf, size_t len, const char *what) {
    snprintf(buf, len, "unix:/tmp/fleet-test-control-%d-%s.sock", (int)getpid(), what);
}

/* Runs fn with stderr sent to a temporary file; returns how many lines contained `needle`. */
static int count_stderr_lines(void (*fn)(void *), void *arg, const char *needle) {
    char path[] = "/tmp/fleet-test-control-stderr-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    fn(arg);
    dup2(saved, STDERR_FILENO);
    close(saved);
    FILE *f = fdopen(fd, "r");
    assert_non_null(f);
    rewind(f);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        fputs(line, stderr); /* keep it visible */
        if (strstr(line, needle)) n++;
    }
    fclose(f);
    unlink(path);
    return n;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_no_address_is_a_noop(void **state) {
    (void)state;
    const char *addrs[2] = {NULL, ""};
    for (int i = 0; i < 2; i++) {
        fl_reporter_t *r = NULL;
        fl_err_t err;
        fl_err_init(&err);
        assert_int_equal(fl_reporter_create(addrs[i], "actor", 0, 0.0, &r, &err), FL_OK);
        assert_non_null(r);
        fl_report_t rep = {.env_steps = 1};
        for (int k = 0; k < 10000; k++) fl_reporter_episode(r, 1.0f, 10);
        fl_reporter_tick(r, &rep, 1);
        fl_reporter_tick(r, NULL, 0);
        assert_int_equal(fl_reporter_should_stop(r), 0);
        fl_reporter_destroy(r);
    }
    fl_reporter_destroy(NULL);
    assert_int_equal(fl_reporter_should_stop(NULL), 0);
}

static void test_reports_carry_episodes_in_order(void **state) {
    (void)state;
    char path[128];
    unix_path(path, sizeof path, "order");
    control_server *s = control_start(path);
    fl_reporter_t *r;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_reporter_create(s->addr, "actor", 3, 3600.0, &r, &err), FL_OK);
    fl_reporter_episode(r, 1.5f, 10);
    fl_reporter_episode(r, -2.5f, 20);
    fl_reporter_episode(r, 3.25f, 30);
    fl_report_t rep = {.env_steps = 100,
                       .episodes = 3,
                       .transitions_acked = 90,
                       .param_version = 5,
                       .learner_steps = 6,
                       .samples = 7,
                       .loss = 0.25,
                       .wait_fraction = 0.5,
                       .epsilon = 0.4};
    fl_reporter_tick(r, &rep, 0); /* the first tick always reports */
    assert_int_equal(report_count(s), 1);
    fl_reporter_tick(r, &rep, 0); /* every_s has not passed */
    assert_int_equal(report_count(s), 1);
    fl_reporter_episode(r, 4.5f, 40);
    rep.env_steps = 200;
    fl_reporter_tick(r, &rep, 1);
    assert_int_equal(report_count(s), 2);
    fl_reporter_tick(r, &rep, 1); /* nothing new: an empty list */
    assert_int_equal(report_count(s), 3);
    assert_int_equal(fl_reporter_should_stop(r), 0);

    const Fleet__Report *a = s->cs.reports[0], *b = s->cs.reports[1], *c = s->cs.reports[2];
    assert_string_equal(a->role, "actor");
    assert_int_equal(a->index, 3);
    assert_int_equal(a->pid, (int64_t)getpid());
    assert_int_equal(a->env_steps, 100);
    assert_int_equal(a->episodes, 3);
    assert_int_equal(a->transitions_acked, 90);
    assert_int_equal(a->param_version, 5);
    assert_int_equal(a->learner_steps, 6);
    assert_int_equal(a->samples, 7);
    assert_true(a->loss == 0.25 && a->wait_fraction == 0.5 && a->epsilon == 0.4);
    assert_int_equal(a->n_episode_returns, 3);
    assert_int_equal(a->n_episode_lengths, 3);
    assert_true(a->episode_returns[0] == 1.5f && a->episode_returns[1] == -2.5f && a->episode_returns[2] == 3.25f);
    assert_true(a->episode_lengths[0] == 10 && a->episode_lengths[1] == 20 && a->episode_lengths[2] == 30);
    assert_true(a->uptime_s >= 0);
    assert_int_equal(b->env_steps, 200);
    assert_int_equal(b->n_episode_returns, 1);
    assert_true(b->episode_returns[0] == 4.5f && b->episode_lengths[0] == 40);
    assert_true(b->uptime_s >= a->uptime_s);
    assert_int_equal(c->n_episode_returns, 0);
    fl_reporter_destroy(r);
    control_stop(s);
}

static void test_episode_buffer_keeps_the_latest(void **state) {
    (void)state;
    control_server *s = control_start("127.0.0.1:0");
    fl_reporter_t *r;
    assert_int_equal(fl_reporter_create(s->addr, "actor", 0, 1.0, &r, NULL), FL_OK);
    for (uint32_t i = 0; i < 5000; i++) fl_reporter_episode(r, (float)i, i);
    fl_reporter_tick(r, NULL, 1);
    assert_int_equal(report_count(s), 1);
    const Fleet__Report *a = s->cs.reports[0];
    assert_int_equal(a->n_episode_returns, 4096);
    assert_int_equal(a->n_episode_lengths, 4096);
    for (size_t i = 0; i < 4096; i++) {
        assert_true(a->episode_returns[i] == (float)(5000 - 4096 + i));
        assert_int_equal(a->episode_lengths[i], 5000 - 4096 + i);
    }
    fl_reporter_destroy(r);
    control_stop(s);
}

static void test_stop_request(void **state) {
    (void)state;
    control_server *s = control_start("127.0.0.1:0");
    fl_reporter_t *r;
    assert_int_equal(fl_reporter_create(s->addr, "learner", 0, 0.0, &r, NULL), FL_OK);
    fl_reporter_tick(r, NULL, 0);
    assert_int_equal(report_count(s), 1);
    assert_int_equal(fl_reporter_should_stop(r), 0);
    pthread_mutex_lock(&s->cs.mu);
    s->cs.answer_stop = 1;
    pthread_mutex_unlock(&s->cs.mu);
    fl_reporter_tick(r, NULL, 1);
    assert_int_equal(report_count(s), 2);
    assert_int_equal(fl_reporter_should_stop(r), 1);
    /* a later answer without stop does not take it back */
    pthread_mutex_lock(&s->cs.mu);
    s->cs.answer_stop = 0;
    pthread_mutex_unlock(&s->cs.mu);
    fl_reporter_tick(r, NULL, 1);
    assert_int_equal(fl_reporter_should_stop(r), 1);
    fl_reporter_destroy(r);
    control_stop(s);
}

typedef struct {
    fl_reporter_t *r;
    int ticks;
} ticks_arg;

static void do_ticks(void *p) {
    ticks_arg *a = p;
    for (int i = 0; i < a->ticks; i++) fl_reporter_tick(a->r, NULL, 1);
}

static void test_missing_launcher(void **state) {
    (void)state;
    char path[128];
    unix_path(path, sizeof path, "absent");
    unlink(path + 5);
    fl_reporter_t *r;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_reporter_create(path, "actor", 1, 0.0, &r, &err), FL_OK);
    fl_reporter_episode(r, 11.0f, 1);
    fl_reporter_episode(r, 12.0f, 2);
    /* every send fails; the failure is logged once, not once per tick */
    ticks_arg a = {r, 5};
    assert_int_equal(count_stderr_lines(do_ticks, &a, "control: cannot report"), 1);
    assert_int_equal(fl_reporter_should_stop(r), 0);
    fl_reporter_episode(r, 13.0f, 3);

    /* the launcher appears: the episodes kept meanwhile arrive, in order */
    control_server *s = control_start(path);
    for (int i = 0; i < 400 && report_count(s) == 0; i++) {
        fl_reporter_tick(r, NULL, 1);
        if (report_count(s) == 0) usleep(25000);
    }
    assert_int_equal(report_count(s), 1);
    const Fleet__Report *m = s->cs.reports[0];
    assert_int_equal(m->n_episode_returns, 3);
    assert_true(m->episode_returns[0] == 11.0f && m->episode_returns[1] == 12.0f && m->episode_returns[2] == 13.0f);
    assert_true(m->episode_lengths[0] == 1 && m->episode_lengths[1] == 2 && m->episode_lengths[2] == 3);
    fl_reporter_tick(r, NULL, 1);
    assert_int_equal(report_count(s), 2);
    assert_int_equal(s->cs.reports[1]->n_episode_returns, 0);
    fl_reporter_destroy(r);
    control_stop(s);
    unlink(path + 5);
}

/* A launcher that accepts the call but never answers: the tick gives up at its deadline
 * (while the server still holds the call), and the role goes on. */
static void test_unresponsive_launcher(void **state) {
    (void)state;
    control_server *s = control_start("127.0.0.1:0");
    s->cs.hold = 1;
    fl_reporter_t *r;
    assert_int_equal(fl_reporter_create(s->addr, "actor", 0, 0.0, &r, NULL), FL_OK);
    fl_reporter_episode(r, 5.0f, 50);
    fl_reporter_tick(r, NULL, 1);
    pthread_mutex_lock(&s->cs.mu);
    int held_past_tick = s->cs.holding && !s->cs.hold_gave_up;
    s->cs.hold = 0;
    s->cs.released = 1;
    pthread_cond_broadcast(&s->cs.cv);
    while (s->cs.holding) pthread_cond_wait(&s->cs.cv, &s->cs.mu);
    pthread_mutex_unlock(&s->cs.mu);
    /* the tick returned on its own deadline, not because the server answered */
    assert_true(held_past_tick);
    assert_int_equal(fl_reporter_should_stop(r), 0);
    /* the unacknowledged episode is sent again with the next report */
    int before = report_count(s);
    fl_reporter_tick(r, NULL, 1);
    assert_int_equal(report_count(s), before + 1);
    const Fleet__Report *m = s->cs.reports[before];
    assert_int_equal(m->n_episode_returns, 1);
    assert_true(m->episode_returns[0] == 5.0f);
    fl_reporter_destroy(r);
    control_stop(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_address_is_a_noop),
        cmocka_unit_test(test_reports_carry_episodes_in_order),
        cmocka_unit_test(test_episode_buffer_keeps_the_latest),
        cmocka_unit_test(test_stop_request),
        cmocka_unit_test(test_missing_launcher),
        cmocka_unit_test(test_unresponsive_launcher),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
