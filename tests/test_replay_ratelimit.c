/* Tests of the samples-per-insert rate limiter: its arithmetic, and a real replay
 * service on loopback where an actor-like writer must wait for a sampler. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/stop.h"
#include "replay/client.h"
#include "replay/ratelimit.h"
#include "replay/server.h"
#include "replay/writer.h"
#include "tests/replay_fixture.h"

static void test_arithmetic(void **state) {
    (void)state;
    fl_ratelimit_t r;
    /* off: only min_size matters */
    fl_ratelimit_init(&r, 0, 0, 10);
    assert_true(fl_ratelimit_can_insert(&r, 1000000));
    assert_false(fl_ratelimit_can_sample(&r, 1, 9));
    assert_true(fl_ratelimit_can_sample(&r, 1000000, 10));

    /* spi 2, buffer 10, min 10: diff window [10, 30] */
    fl_ratelimit_init(&r, 2, 10, 10);
    assert_true(r.min_diff == 10 && r.max_diff == 30);
    assert_true(fl_ratelimit_can_insert(&r, 50)); /* free before min_size inserts */
    fl_ratelimit_inserted(&r, 10);                /* diff 20 */
    assert_false(fl_ratelimit_can_sample(&r, 1, 9));
    assert_true(fl_ratelimit_can_sample(&r, 10, 10));  /* 20 - 10 = 10 >= 10 */
    assert_false(fl_ratelimit_can_sample(&r, 11, 10)); /* 9 < 10 */
    assert_true(fl_ratelimit_can_insert(&r, 5));       /* 20 + 10 = 30 <= 30 */
    assert_false(fl_ratelimit_can_insert(&r, 6));      /* 32 > 30 */
    fl_ratelimit_sampled(&r, 10);                      /* diff 10 */
    assert_false(fl_ratelimit_can_sample(&r, 1, 100)); /* must wait for inserts */
    assert_true(fl_ratelimit_can_insert(&r, 10));      /* 10 + 20 = 30 */
    fl_ratelimit_inserted(&r, 10);                     /* diff 30 */
    assert_false(fl_ratelimit_can_insert(&r, 1));
    assert_true(fl_ratelimit_can_sample(&r, 20, 100));
    assert_true(fabs(fl_ratelimit_diff(&r) - 30) < 1e-12);
}

/* A shard recovered from its log has the inserts since the checkpoint but not the
 * samples: the clamp brings the difference back into the window. */
static void test_clamp_after_recovery(void **state) {
    (void)state;
    fl_ratelimit_t r;
    fl_ratelimit_init(&r, 2, 10, 10); /* window [10, 30] */
    r.inserted = 1000;
    r.sampled = 100; /* diff 1900 */
    assert_false(fl_ratelimit_can_insert(&r, 1));
    fl_ratelimit_clamp(&r);
    assert_true(fabs(fl_ratelimit_diff(&r) - 30) < 1e-9);
    assert_true(fl_ratelimit_can_sample(&r, 20, 1000));
    r.sampled = 1995; /* diff 5, below the window */
    fl_ratelimit_clamp(&r);
    assert_true(fabs(fl_ratelimit_diff(&r) - 10) < 1e-9);
    r.sampled = 1980; /* inside: unchanged */
    fl_ratelimit_clamp(&r);
    assert_int_equal(r.sampled, 1980);
}

#define OBS_DIM 4
static const fl_obs_spec_t SPEC = {FL_DTYPE_FLOAT32, 1, {OBS_DIM}};
#define BATCH 50
#define TOTAL 4000

typedef struct {
    const char *addr;
    atomic_int done;
    uint64_t acked;
    fl_status st;
} writer_arg;

static void *writer_thread(void *p) {
    writer_arg *a = p;
    fl_replay_client_t *c = NULL;
    fl_replay_writer_t *w = NULL;
    fl_err_t e;
    fl_err_init(&e);
    a->st = fl_replay_client_create(a->addr, &c, &e);
    if (a->st == FL_OK) a->st = fl_replay_writer_create(c, 99, &SPEC, 4, &w, &e);
    float obs[BATCH * OBS_DIM], rewards[BATCH], discounts[BATCH], prios[BATCH];
    int32_t actions[BATCH];
    for (int i = 0; i < BATCH; i++) {
        for (int d = 0; d < OBS_DIM; d++) obs[i * OBS_DIM + d] = (float)(i + d);
        rewards[i] = 1;
        discounts[i] = 0.9f;
        prios[i] = 1.0f + (float)i;
        actions[i] = i % 2;
    }
    for (int b = 0; a->st == FL_OK && b < TOTAL / BATCH; b++)
        a->st = fl_replay_writer_append(w, BATCH, obs, actions, rewards, discounts, obs, prios, &e);
    if (a->st == FL_OK) a->st = fl_replay_writer_flush(w, 60000, &e);
    a->acked = w ? fl_replay_writer_acked(w) : 0;
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    atomic_store(&a->done, 1);
    return NULL;
}

/* A shard on loopback with 1 sample per insert, sampling from min_size, error buffer
 * `buffer`. */
static void start_rate_limited(replay_fixture_t *f, uint64_t min_size, double buffer) {
    fl_replay_service_opts_t opts = replay_fixture_opts(SPEC, 2, 100000, (int64_t)min_size);
    opts.samples_per_insert = 1.0;
    opts.rate_error_buffer = buffer;
    replay_fixture_start(f, &opts);
}

/* Starts fn(wa) on th and waits until an insert waits inside the shard (nobody samples),
 * with wa's thread still going. */
static void start_blocked_writer(fl_replay_service_t *svc, writer_arg *wa, pthread_t *th, void *(*fn)(void *)) {
    atomic_init(&wa->done, 0);
    pthread_create(th, NULL, fn, wa);
    fl_replay_info_t in;
    int blocked = 0;
    for (int i = 0; i < 3000 && !blocked; i++) {
        fl_replay_service_info(svc, &in);
        blocked = in.inserts_waiting > 0;
        if (!blocked) fl_sleep_sec(0.01);
    }
    assert_true(blocked);
    assert_false(atomic_load(&wa->done));
}

static void test_service_blocks_and_releases(void **state) {
    (void)state;
    replay_fixture_t f;
    start_rate_limited(&f, 200, 100);
    fl_err_t e;
    fl_err_init(&e);
    writer_arg wa = {.addr = f.addr};
    pthread_t th;
    start_blocked_writer(f.svc, &wa, &th, writer_thread);
    fl_replay_info_t in;
    fl_replay_service_info(f.svc, &in);
    /* admitted: min_size inserts free, then up to (max_diff - diff) / spi more (+ one batch) */
    assert_true(in.inserted <= 200 + 100 + BATCH);
    assert_true(in.inserted >= 200);

    /* Sampling releases it: sample until the writer is done. */
    fl_replay_client_t *c;
    assert_int_equal(fl_replay_client_create(f.addr, &c, &e), FL_OK);
    fl_replay_batch_t b;
    assert_int_equal(fl_replay_batch_init(&b, 32, OBS_DIM * sizeof(float)), FL_OK);
    uint64_t sampled = 0;
    for (int i = 0; i < 100000 && !atomic_load(&wa.done); i++) {
        fl_status st = fl_replay_sample(c, 32, 0.4, 2000, &b, &e);
        if (st == FL_OK)
            sampled += 32;
        else
            assert_int_equal(st, FL_FAILED_PRECONDITION); /* rate limited: wait for inserts */
        fl_replay_service_info(f.svc, &in);
        /* the invariant: inserted * spi - sampled within [min_diff - batch, max_diff + batch] */
        double diff = (double)in.inserted - (double)in.sampled;
        assert_true(diff >= 200 - 100 - 32 - 1e-9);
        assert_true(diff <= 200 + 100 + BATCH + 1e-9);
    }
    pthread_join(th, NULL);
    assert_int_equal(wa.st, FL_OK);
    assert_int_equal(wa.acked, TOTAL);
    fl_replay_service_info(f.svc, &in);
    assert_int_equal(in.inserted, TOTAL);
    assert_true(in.insert_blocked_s > 0);
    assert_true(in.samples_per_insert == 1.0);
    assert_true(sampled >= TOTAL - 200 - 100 - 32);

    /* With the fleet drained, Sample is rate limited and says so. */
    fl_status st = FL_OK;
    /* 1 s: the shard waits 3/4 of it for inserts that never come, then answers in time */
    for (int i = 0; i < 1000 && st == FL_OK; i++) st = fl_replay_sample(c, 32, 0.4, 1000, &b, &e);
    assert_int_equal(st, FL_FAILED_PRECONDITION);
    assert_non_null(strstr(e.msg, "rate limited"));

    fl_replay_batch_free(&b);
    fl_replay_client_destroy(c);
    fl_replay_service_stop(f.svc);
    replay_fixture_stop(&f);
}

/* One batch of BATCH transitions, for the writer tests below. */
static fl_status append_one(fl_replay_writer_t *w, fl_err_t *e) {
    float obs[BATCH * OBS_DIM], rewards[BATCH], discounts[BATCH], prios[BATCH];
    int32_t actions[BATCH];
    for (int i = 0; i < BATCH; i++) {
        for (int d = 0; d < OBS_DIM; d++) obs[i * OBS_DIM + d] = (float)(i * d);
        rewards[i] = 0.5f;
        discounts[i] = 0.99f;
        prios[i] = 1.0f;
        actions[i] = i % 2;
    }
    return fl_replay_writer_append(w, BATCH, obs, actions, rewards, discounts, obs, prios, e);
}

/* A shard that went away (its socket refuses): the writer keeps what it cannot send
 * within its backlog bound, dropping the oldest unsent batches and counting them, and
 * sends the rest once a shard serves the address again. */
static void test_writer_backlog_is_bounded(void **state) {
    (void)state;
    char sock[64], addr[80];
    snprintf(sock, sizeof sock, "/tmp/fleet-backlog-%d.sock", (int)getpid());
    snprintf(addr, sizeof addr, "unix:%s", sock);
    fl_replay_service_opts_t opts;
    fl_replay_service_opts_init(&opts);
    opts.obs = SPEC;
    opts.num_actions = 2;
    opts.capacity = 100000;
    replay_fixture_t f;
    replay_fixture_start_at(&f, &opts, addr);
    fl_err_t e;
    fl_err_init(&e);
    fl_replay_client_t *c = NULL;
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_client_create(addr, &c, &e), FL_OK);
    assert_int_equal(fl_replay_writer_create(c, 7, &SPEC, 8, &w, &e), FL_OK);
    const size_t batch_bytes = BATCH * (2 * OBS_DIM * sizeof(float) + 4 * 4);
    fl_replay_writer_set_backlog(w, 3 * batch_bytes); /* three batches */
    assert_int_equal(append_one(w, &e), FL_OK);
    assert_int_equal(fl_replay_writer_flush(w, 10000, &e), FL_OK); /* acknowledged once */
    replay_fixture_stop(&f);                                       /* the shard goes away */
    for (int i = 0; i < 20; i++) assert_int_equal(append_one(w, &e), FL_OK);
    assert_int_equal(fl_replay_writer_acked(w), BATCH);
    assert_true(fl_replay_writer_pending(w) <= 3 * BATCH);
    assert_int_equal(fl_replay_writer_pending(w) + fl_replay_writer_dropped(w), 20 * BATCH);
    assert_true(fl_replay_writer_dropped(w) >= 17 * BATCH);
    /* A shard on the same address takes what is left. */
    replay_fixture_start_at(&f, &opts, addr);
    uint64_t left = fl_replay_writer_pending(w);
    assert_int_equal(fl_replay_writer_flush(w, 30000, &e), FL_OK);
    assert_int_equal(fl_replay_writer_acked(w), BATCH + left);
    fl_replay_info_t in;
    fl_replay_service_info(f.svc, &in);
    assert_int_equal(in.inserted, left);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    replay_fixture_stop(&f);
    unlink(sock);
}

static int count_waits(void *ctx) {
    int *n = ctx;
    return ++*n >= 2;
}

/* No learner samples: the shard holds the writer's insert, and while append waits for it
 * the writer calls its owner's hook (an actor reports there) every 0.1 s; the hook ends
 * the wait; nothing is acknowledged past what the limiter let in, and what was not stays
 * pending. */
static void test_writer_calls_its_hook_while_held(void **state) {
    (void)state;
    replay_fixture_t f;
    start_rate_limited(&f, 100, 50);
    fl_replay_client_t *c = NULL;
    fl_replay_writer_t *w = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(f.addr, &c, &e), FL_OK);
    assert_int_equal(fl_replay_writer_create(c, 13, &SPEC, 2, &w, &e), FL_OK);
    int waits = 0;
    fl_replay_writer_on_wait(w, count_waits, &waits);
    const double t0 = fl_clock_sec();
    int appends = 0;
    while (waits < 2 && fl_clock_sec() - t0 < 60) {
        assert_int_equal(append_one(w, &e), FL_OK);
        appends++;
    }
    assert_true(waits >= 2);
    assert_true(fl_replay_writer_pending(w) > 0);
    assert_int_equal(fl_replay_writer_acked(w) + fl_replay_writer_pending(w), (uint64_t)appends * BATCH);
    fl_replay_info_t in;
    fl_replay_service_info(f.svc, &in);
    assert_true(in.inserted <= 100 + 50 + 2 * BATCH);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    replay_fixture_stop(&f);
}

static void *blocked_writer(void *p) {
    writer_arg *a = p;
    fl_replay_client_t *c = NULL;
    fl_replay_writer_t *w = NULL;
    fl_err_t e;
    fl_err_init(&e);
    a->st = fl_replay_client_create(a->addr, &c, &e);
    if (a->st == FL_OK) a->st = fl_replay_writer_create(c, 11, &SPEC, 2, &w, &e);
    /* Appends until the stop request: the shard's rate limiter holds them back, so
     * this thread ends only because the stop cancels the waiting call. */
    while (a->st == FL_OK && !fl_stop_requested()) a->st = append_one(w, &e);
    a->acked = w ? fl_replay_writer_acked(w) : 0;
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    atomic_store(&a->done, 1);
    return NULL;
}

/* An actor whose inserts wait on a rate-limited shard with no learner stops when the
 * process is asked to: the waiting call is cancelled. (Last: the stop request stays.) */
static void test_stop_cancels_a_waiting_insert(void **state) {
    (void)state;
    replay_fixture_t f;
    start_rate_limited(&f, 100, 50);
    writer_arg wa = {.addr = f.addr};
    pthread_t th;
    start_blocked_writer(f.svc, &wa, &th, blocked_writer);
    fl_stop_request();
    pthread_join(th, NULL); /* returns: the call was cancelled (a hang fails the test) */
    assert_int_equal(wa.st, FL_OK);
    replay_fixture_stop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arithmetic),
        cmocka_unit_test(test_clamp_after_recovery),
        cmocka_unit_test(test_service_blocks_and_releases),
        cmocka_unit_test(test_writer_backlog_is_bounded),
        cmocka_unit_test(test_writer_calls_its_hook_while_held),
        cmocka_unit_test(test_stop_cancels_a_waiting_insert), /* last: it requests the stop */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
