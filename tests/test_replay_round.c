/* Tests of a replay shard's deterministic rounds (fleet.Replay/Round, replay/server_round.c)
 * through real gRPC on 127.0.0.1 port 0: a round is committed only when every participant
 * is done with it, its batches go in in participant order whatever order they came in (two
 * shards fed in opposite orders sample the same keys and rows), a waiter sees the commit,
 * resends change nothing, and what breaks the rules is refused with a message that says
 * what was expected. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/rpc.h"
#include "replay/client.h"
#include "replay/server.h"
#include "replay/wire.h"
#include "replay/writer.h"
#include "tests/replay_fixture.h"

#define OBS_DIM 4
#define NUM_ACTIONS 3
#define PARTICIPANTS 3 /* two actors and an evaluator */

static const fl_obs_spec_t SPEC = {FL_DTYPE_FLOAT32, 1, {OBS_DIM}};

/* A shard of rounds of `participants` on loopback, with its client (s->cli). */
static void shard_start_min(replay_fixture_t *s, int64_t participants, int64_t min_size) {
    fl_replay_service_opts_t o = replay_fixture_opts(SPEC, NUM_ACTIONS, 1000, min_size);
    o.seed = 11;
    o.round_participants = participants;
    replay_fixture_start(s, &o);
    replay_fixture_client(s);
}

static void shard_start(replay_fixture_t *s, int64_t participants) {
    shard_start_min(s, participants, 1);
}

/* n transitions whose values all derive from base + i. */
typedef struct rows {
    float obs[64 * OBS_DIM], next_obs[64 * OBS_DIM], rewards[64], discounts[64], prio[64];
    int32_t actions[64];
    fl_wire_batch_t b;
} rows_t;

static void rows_make(rows_t *r, size_t n, int base) {
    assert_true(n <= 64);
    for (size_t i = 0; i < n; i++) {
        for (int d = 0; d < OBS_DIM; d++) {
            r->obs[i * OBS_DIM + d] = (float)(base + (int)i) + 0.25f * (float)d;
            r->next_obs[i * OBS_DIM + d] = -(float)(base + (int)i);
        }
        r->actions[i] = (base + (int)i) % NUM_ACTIONS;
        r->rewards[i] = (float)(base + (int)i);
        r->discounts[i] = 0.99f;
        r->prio[i] = 0.5f + (float)((base + (int)i) % 5);
    }
    r->b = (fl_wire_batch_t){.count = n,
                             .obs_bytes = OBS_DIM * sizeof(float),
                             .obs = r->obs,
                             .actions = r->actions,
                             .rewards = r->rewards,
                             .discounts = r->discounts,
                             .next_obs = r->next_obs,
                             .priorities = r->prio};
}

static fl_status round_call(replay_fixture_t *s, uint32_t p, uint64_t round, uint64_t through, const rows_t *r,
                            uint32_t wait_ms, uint64_t *committed, uint64_t *size, fl_err_t *e) {
    fl_err_init(e);
    fl_replay_round_answer_t a;
    fl_status st = fl_replay_round(s->cli, p, round, through, &SPEC, r ? &r->b : NULL, wait_ms, &a, e);
    if (st == FL_OK && committed) *committed = a.committed_round;
    if (st == FL_OK && size) *size = a.table_size;
    return st;
}

static void round_ok(replay_fixture_t *s, uint32_t p, uint64_t round, uint64_t through, const rows_t *r,
                     uint64_t *committed, uint64_t *size) {
    fl_err_t e;
    if (round_call(s, p, round, through, r, 0, committed, size, &e) != FL_OK)
        fail_msg("participant %u round %llu: %s", p, (unsigned long long)round, e.msg);
}

/* Feeds rounds 1 and 2 to s, the actors' calls in the given order (0: actor 1 first). */
static void feed(replay_fixture_t *s, int reverse) {
    rows_t a, b;
    uint64_t committed = 99, size = 99;
    round_ok(s, 3, 1, 2, NULL, &committed, &size); /* the evaluator: done with rounds 1 and 2 */
    assert_int_equal(committed, 0);
    for (uint64_t round = 1; round <= 2; round++) {
        rows_make(&a, 10 + round, 1000 * (int)round);
        rows_make(&b, 7, 1000 * (int)round + 500);
        round_ok(s, reverse ? 2 : 1, round, 0, reverse ? &b : &a, &committed, &size);
        assert_int_equal(committed, round - 1); /* not before the other actor */
        round_ok(s, reverse ? 1 : 2, round, 0, reverse ? &a : &b, &committed, &size);
        assert_int_equal(committed, round);
    }
    assert_int_equal(size, 11 + 7 + 12 + 7);
}

static void test_commit_order(void **unused) {
    (void)unused;
    replay_fixture_t s1, s2;
    shard_start(&s1, PARTICIPANTS);
    shard_start(&s2, PARTICIPANTS);
    feed(&s1, 0);
    feed(&s2, 1);
    fl_replay_batch_t b1, b2;
    assert_int_equal(fl_replay_batch_init(&b1, 32, OBS_DIM * sizeof(float)), FL_OK);
    assert_int_equal(fl_replay_batch_init(&b2, 32, OBS_DIM * sizeof(float)), FL_OK);
    for (int k = 0; k < 5; k++) {
        fl_err_t e;
        fl_err_init(&e);
        assert_int_equal(fl_replay_sample(s1.cli, 32, 0.4, 30000, &b1, &e), FL_OK);
        assert_int_equal(fl_replay_sample(s2.cli, 32, 0.4, 30000, &b2, &e), FL_OK);
        assert_memory_equal(b1.keys, b2.keys, 32 * sizeof(uint64_t));
        assert_memory_equal(b1.obs, b2.obs, 32 * OBS_DIM * sizeof(float));
        assert_memory_equal(b1.weights, b2.weights, 32 * sizeof(float));
    }
    /* Participant order: actor 1's first row of round 1 got the first key. */
    rows_t a;
    rows_make(&a, 1, 1000);
    int found = 0;
    for (size_t i = 0; i < b1.count; i++)
        if ((b1.keys[i] & ((UINT64_C(1) << 56) - 1)) == 0) {
            assert_memory_equal(b1.obs + i * OBS_DIM * sizeof(float), a.obs, OBS_DIM * sizeof(float));
            found = 1;
        }
    (void)found; /* key 0 need not be among the draws; when it is, it is actor 1's row */
    fl_replay_batch_free(&b1);
    fl_replay_batch_free(&b2);
    replay_fixture_stop(&s1);
    replay_fixture_stop(&s2);
}

typedef struct waiter {
    replay_fixture_t *s;
    uint64_t committed, size;
    fl_status st;
} waiter_t;

static void *wait_thread(void *arg) {
    waiter_t *w = arg;
    fl_err_t e;
    w->st = round_call(w->s, 0, 1, 0, NULL, 20000, &w->committed, &w->size, &e);
    return NULL;
}

/* A learner's wait (participant 0) returns once the last participant finishes. */
static void test_wait(void **unused) {
    (void)unused;
    replay_fixture_t s;
    shard_start(&s, 2);
    uint64_t committed = 0, size = 0;
    fl_err_t e;
    assert_int_equal(round_call(&s, 0, 1, 0, NULL, 50, &committed, &size, &e), FL_OK); /* times out: not yet */
    assert_int_equal(committed, 0);
    waiter_t w = {.s = &s};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_thread, &w), 0);
    rows_t r;
    rows_make(&r, 5, 1);
    round_ok(&s, 1, 1, 0, &r, &committed, &size);
    round_ok(&s, 2, 1, 0, NULL, &committed, &size); /* a participant with nothing to add */
    pthread_join(t, NULL);
    assert_int_equal(w.st, FL_OK);
    assert_int_equal(w.committed, 1);
    assert_int_equal(w.size, 5);
    replay_fixture_stop(&s);
}

/* first_full_round: the first commit after which the table held min_size_to_sample, the
 * round from which the learner trains. */
static void test_first_full_round(void **unused) {
    (void)unused;
    replay_fixture_t s;
    shard_start_min(&s, 1, 12);
    rows_t r;
    rows_make(&r, 5, 1);
    fl_replay_round_answer_t a;
    fl_err_t e;
    fl_err_init(&e);
    for (uint64_t round = 1; round <= 4; round++) {
        assert_int_equal(fl_replay_round(s.cli, 1, round, 0, &SPEC, &r.b, 0, &a, &e), FL_OK);
        assert_int_equal(a.committed_round, round);
        assert_int_equal(a.table_size, 5 * round);
        assert_int_equal(a.first_full_round, round < 3 ? 0 : 3); /* 15 >= 12 after round 3 */
    }
    replay_fixture_stop(&s);
}

static void refused(replay_fixture_t *s, uint32_t p, uint64_t round, uint64_t through, const rows_t *r, fl_status want,
                    const char *msg) {
    fl_err_t e;
    fl_status st = round_call(s, p, round, through, r, 0, NULL, NULL, &e);
    if (st != want || !strstr(e.msg, msg))
        fail_msg("participant %u round %llu: got %s \"%s\", expected %s containing \"%s\"", p,
                 (unsigned long long)round, fl_status_name(st), e.msg, fl_status_name(want), msg);
}

static void test_rules(void **unused) {
    (void)unused;
    replay_fixture_t s;
    shard_start(&s, 2);
    rows_t r;
    rows_make(&r, 4, 1);
    refused(&s, 1, 0, 0, &r, FL_INVALID_ARGUMENT, "round: got 0, expected >= 1");
    refused(&s, 3, 1, 0, &r, FL_INVALID_ARGUMENT, "participant: got 3, expected 0 .. 2");
    refused(&s, 0, 1, 0, &r, FL_INVALID_ARGUMENT, "participant 0 only waits");
    refused(&s, 1, 2, 1, &r, FL_INVALID_ARGUMENT, "through: got 1, expected 0 or >= round 2");
    refused(&s, 1, 2, 0, &r, FL_FAILED_PRECONDITION, "participant 1: round 2, expected round 1");
    refused(&s, 1, 1, 1 + (1 << 20) + 1, NULL, FL_INVALID_ARGUMENT, "through");
    /* a batch that does not fit the table's signature */
    rows_t bad;
    rows_make(&bad, 2, 1);
    bad.actions[1] = NUM_ACTIONS;
    refused(&s, 1, 1, 0, &bad, FL_INVALID_ARGUMENT, "action");
    uint64_t committed = 0, size = 0;
    round_ok(&s, 1, 1, 0, &r, &committed, &size);
    round_ok(&s, 1, 1, 0, &r, &committed, &size); /* a resend: nothing changes */
    round_ok(&s, 2, 1, 5, NULL, &committed, &size);
    assert_int_equal(committed, 1);
    assert_int_equal(size, 4);
    /* participant 1 may run FL__ROUND_AHEAD (2) rounds past the committed one, no more */
    round_ok(&s, 1, 2, 0, &r, &committed, &size);
    round_ok(&s, 1, 3, 0, &r, &committed, &size);
    assert_int_equal(committed, 3);
    round_ok(&s, 1, 4, 0, &r, &committed, &size);
    round_ok(&s, 1, 5, 0, &r, &committed, &size);
    assert_int_equal(committed, 5);
    refused(&s, 1, 6, 7, NULL, FL_OK, ""); /* no batch: a participant may mark rounds done ahead */
    refused(&s, 1, 8, 0, &r, FL_FAILED_PRECONDITION, "more than 2 past the committed round 5");
    assert_int_equal(size, 4 * 5);
    /* Insert is refused on a deterministic shard, Round on an asynchronous one. */
    fl_replay_writer_t *w = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_writer_create(s.cli, 77, &SPEC, 1, &w, &e), FL_OK);
    fl_status fs = fl_replay_writer_append(w, r.b.count, r.obs, r.actions, r.rewards, r.discounts, r.next_obs, r.prio,
                                           &e); /* the writer may send at once */
    if (fs == FL_OK) fs = fl_replay_writer_flush(w, 30000, &e);
    assert_true(fs != FL_OK);
    assert_non_null(strstr(e.msg, "transitions come through Round, not Insert"));
    fl_replay_writer_destroy(w);
    replay_fixture_t a;
    shard_start(&a, 0);
    refused(&a, 1, 1, 0, &r, FL_FAILED_PRECONDITION, "does not run deterministic rounds");
    replay_fixture_stop(&a);
    replay_fixture_stop(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_order),
        cmocka_unit_test(test_wait),
        cmocka_unit_test(test_first_full_round),
        cmocka_unit_test(test_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
