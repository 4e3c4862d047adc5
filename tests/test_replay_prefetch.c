/* Tests of the learner's Sample prefetcher (replay/prefetch.h) against a real replay
 * shard on loopback: batches come back valid, several Sample calls are in flight while
 * the learner holds a batch, refusals are handed over with their message, and destroy
 * stops threads that are waiting for the replay to fill. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "replay/client.h"
#include "replay/prefetch.h"
#include "replay/server.h"
#include "replay/sharded.h"
#include "replay/writer.h"
#include "tests/replay_fixture.h"

#define OBS_DIM 4
#define OBS_BYTES (OBS_DIM * sizeof(float))
#define N_ITEMS 600
static const fl_obs_spec_t SPEC = {FL_DTYPE_FLOAT32, 1, {OBS_DIM}};

/* A shard of 10000 items that samples from min_size, on loopback. */
static void start(replay_fixture_t *f, int64_t min_size) {
    fl_replay_service_opts_t opts = replay_fixture_opts(SPEC, 3, 10000, min_size);
    replay_fixture_start(f, &opts);
}

/* Item i: obs (i, 1, 2, 3), next_obs (-i, ...), reward i; one writer stream of that id. */
static void fill(const char *addr, int n, uint64_t stream) {
    float *obs = malloc((size_t)n * OBS_BYTES), *next = malloc((size_t)n * OBS_BYTES);
    float *r = malloc((size_t)n * sizeof(float)), *d = malloc((size_t)n * sizeof(float));
    float *p = malloc((size_t)n * sizeof(float));
    int32_t *a = malloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < OBS_DIM; k++) {
            obs[i * OBS_DIM + k] = k ? (float)k : (float)i;
            next[i * OBS_DIM + k] = k ? (float)k : -(float)i;
        }
        r[i] = (float)i;
        d[i] = 0.9f;
        p[i] = 1.0f + (float)(i % 7);
        a[i] = i % 3;
    }
    fl_replay_client_t *c = NULL;
    fl_replay_writer_t *w = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(addr, &c, &e), FL_OK);
    assert_int_equal(fl_replay_writer_create(c, stream, &SPEC, 4, &w, &e), FL_OK);
    assert_int_equal(fl_replay_writer_append(w, (size_t)n, obs, a, r, d, next, p, &e), FL_OK);
    assert_int_equal(fl_replay_writer_flush(w, 20000, &e), FL_OK);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    free(obs);
    free(next);
    free(r);
    free(d);
    free(p);
    free(a);
}

static uint64_t sample_calls(fl_replay_service_t *svc) {
    fl_replay_info_t in;
    fl_replay_service_info(svc, &in);
    return in.sample_calls;
}

/* per_call batches per Sample call: each of DEPTH threads makes one call, whose batches
 * are handed over one by one; no thread calls again before all of its batches are back. */
static void batches_and_depth(int per_call) {
    replay_fixture_t f;
    start(&f, 100);
    fill(f.addr, N_ITEMS, 1);
    fl_replay_sharded_t *rs = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_sharded_create(f.addr, 3, &rs, &e), FL_OK);
    enum { DEPTH = 3, B = 64 };
    fl_replay_prefetch_t *p = NULL;
    assert_int_equal(fl_replay_prefetch_create(rs, DEPTH, per_call, B, OBS_BYTES, 0.4, 5000, &p, &e), FL_OK);

    /* Hold one batch: the other threads still sample, so DEPTH calls get answered. */
    fl_replay_prefetched_t *held = NULL;
    assert_int_equal(fl_replay_prefetch_next(p, 10000, &held), 1);
    assert_int_equal(held->status, FL_OK);
    double until = fl_clock_sec() + 20;
    while (sample_calls(f.svc) < DEPTH && fl_clock_sec() < until) usleep(2000);
    assert_int_equal(sample_calls(f.svc), DEPTH);
    /* ... and no more than DEPTH while every buffer is taken or ready */
    usleep(50000);
    assert_int_equal(sample_calls(f.svc), DEPTH);

    /* Every batch is a valid sample: rows match the items their keys name. */
    fl_replay_prefetched_t *r = held;
    int first_of_call = 0;
    for (int k = 0; k < 40; k++) {
        if (k > 0) assert_int_equal(fl_replay_prefetch_next(p, 10000, &r), 1);
        assert_int_equal(r->status, FL_OK);
        first_of_call += r->sample_s > 0;
        const fl_replay_batch_t *b = r->batch;
        assert_int_equal(b->count, B);
        assert_int_equal(b->table_size, N_ITEMS);
        for (size_t j = 0; j < b->count; j++) {
            uint64_t id = fl_table_key_seq(b->keys[j]);
            float o[OBS_DIM], n[OBS_DIM];
            memcpy(o, b->obs + j * OBS_BYTES, OBS_BYTES);
            memcpy(n, b->next_obs + j * OBS_BYTES, OBS_BYTES);
            assert_true(o[0] == (float)id && n[0] == -(float)id && o[3] == 3.0f);
            assert_true(b->rewards[j] == (float)id && b->actions[j] == (int32_t)(id % 3));
            assert_true(b->weights[j] > 0.0f && b->weights[j] <= 1.0f);
        }
        fl_replay_prefetch_release(p, r);
    }
    /* 40 batches came from about 40 / per_call calls (each call's time is on its first) */
    assert_true(first_of_call >= 40 / per_call && first_of_call <= 40 / per_call + DEPTH);
    assert_true(sample_calls(f.svc) <= (uint64_t)(40 / per_call + 2 * DEPTH));
    /* Destroy with batches in flight and one ready. */
    fl_replay_prefetch_destroy(p);
    fl_replay_sharded_destroy(rs);
    replay_fixture_stop(&f);
}

static void test_batches_and_depth(void **state) {
    (void)state;
    batches_and_depth(1);
    batches_and_depth(3);
}

/* A replay below min_size_to_sample: each result is the shard's refusal, handed over
 * with its message; once the replay fills, batches flow. */
static void test_refusals_then_data(void **state) {
    (void)state;
    replay_fixture_t f;
    start(&f, 300);
    fill(f.addr, 100, 1);
    fl_replay_sharded_t *rs = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_sharded_create(f.addr, 3, &rs, &e), FL_OK);
    fl_replay_prefetch_t *p = NULL;
    assert_int_equal(fl_replay_prefetch_create(rs, 2, 1, 16, OBS_BYTES, 0.4, 1000, &p, &e), FL_OK);
    fl_replay_prefetched_t *r = NULL;
    assert_int_equal(fl_replay_prefetch_next(p, 20000, &r), 1);
    assert_int_equal(r->status, FL_FAILED_PRECONDITION);
    assert_non_null(strstr(r->err.msg, "300"));
    fl_replay_prefetch_release(p, r);
    fill(f.addr, 400, 2); /* a new stream: the same id would be a resend */
    int ok = 0;
    for (int k = 0; k < 50 && !ok; k++) {
        assert_int_equal(fl_replay_prefetch_next(p, 20000, &r), 1);
        ok = r->status == FL_OK && r->batch->count == 16;
        if (!ok && k > 45) print_message("result %d: %s\n", (int)r->status, r->err.msg);
        fl_replay_prefetch_release(p, r);
    }
    assert_true(ok);
    fl_replay_prefetch_destroy(p);
    fl_replay_sharded_destroy(rs);
    replay_fixture_stop(&f);
}

/* Priority updates riding on Sample calls: applied before the draw, stale keys counted
 * out, bad priorities refused before anything is sent; and through the prefetcher. */
static void test_updates_ride_on_sample(void **state) {
    (void)state;
    replay_fixture_t f;
    start(&f, 100);
    fill(f.addr, N_ITEMS, 1);
    fl_replay_client_t *c = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_client_create(f.addr, &c, &e), FL_OK);
    fl_replay_batch_t b;
    assert_int_equal(fl_replay_batch_init(&b, 32, OBS_BYTES), FL_OK);
    assert_int_equal(fl_replay_sample(c, 32, 0.4, 5000, &b, &e), FL_OK);
    uint64_t keys[33];
    float prio[33];
    for (int j = 0; j < 32; j++) {
        keys[j] = b.keys[j];
        prio[j] = 100.0f + (float)j;
    }
    keys[32] = fl_table_key_make(0, 1u << 30); /* never issued: stale */
    prio[32] = 1.0f;
    fl_replay_updates_t upd = {33, keys, prio, 0};
    assert_int_equal(fl_replay_sample_updating(c, 32, 0.4, 5000, &upd, &b, &e), FL_OK);
    /* a key drawn twice in the first batch is applied twice: count distinct keys */
    size_t distinct = 0;
    for (int j = 0; j < 32; j++) {
        int seen = 0;
        for (int k = 0; k < j; k++) seen |= keys[k] == keys[j];
        distinct += !seen;
    }
    assert_true(upd.applied >= distinct && upd.applied <= 32);
    for (int j = 0; j < 32; j++) {
        double q = 0;
        assert_int_equal(fl_table_priority(fl_replay_service_table(f.svc), keys[j], &q, &e), FL_OK);
        int last = j;
        for (int k = j + 1; k < 32; k++)
            if (keys[k] == keys[j]) last = k;
        assert_true(fabs(q - pow(100.0 + last + 1e-6, 0.6)) < 1e-6 * q);
    }
    fl_replay_info_t in;
    fl_replay_service_info(f.svc, &in);
    assert_int_equal(in.updates_stale, 1);
    /* a NaN priority: refused by the client, nothing sent */
    prio[3] = NAN;
    uint64_t calls = sample_calls(f.svc);
    assert_int_equal(fl_replay_sample_updating(c, 32, 0.4, 5000, &upd, &b, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "update priorities[3]"));
    assert_int_equal(sample_calls(f.svc), calls);
    fl_replay_batch_free(&b);
    fl_replay_client_destroy(c);

    /* Through the prefetcher: every released batch's updates get applied, the last ones at
     * stop; with 2 and 3 batches per call too, the learner holding two batches at a time
     * and giving them back newest first, and some with fewer priorities than rows. */
    fl_replay_sharded_t *rs = NULL;
    assert_int_equal(fl_replay_sharded_create(f.addr, 3, &rs, &e), FL_OK);
    float ones[16];
    for (int j = 0; j < 16; j++) ones[j] = 2.0f;
    for (int per_call = 1; per_call <= 3; per_call++) {
        fl_replay_prefetch_t *p = NULL;
        assert_int_equal(fl_replay_prefetch_create(rs, 3, per_call, 16, OBS_BYTES, 0.4, 5000, &p, &e), FL_OK);
        fl_replay_service_info(f.svc, &in);
        uint64_t before = in.updates_applied + in.updates_stale, sent = 0;
        for (int k = 0; k < 10; k++) {
            fl_replay_prefetched_t *r1 = NULL, *r2 = NULL;
            assert_int_equal(fl_replay_prefetch_next(p, 10000, &r1), 1);
            assert_int_equal(fl_replay_prefetch_next(p, 10000, &r2), 1);
            assert_int_equal(r1->status, FL_OK);
            assert_int_equal(r2->status, FL_OK);
            const size_t n2 = k % 3 == 0 ? 5 : 16;
            fl_replay_prefetch_release_updating(p, r2, n2, ones);
            fl_replay_prefetch_release_updating(p, r1, 16, ones);
            sent += 16 + n2;
        }
        assert_int_equal(fl_replay_prefetch_stop(p, &e), FL_OK);
        fl_replay_service_info(f.svc, &in);
        assert_int_equal(in.updates_applied + in.updates_stale - before, sent);
        assert_int_equal(fl_replay_prefetch_updates_applied(p), sent);
        fl_replay_prefetch_destroy(p);
    }
    fl_replay_sharded_destroy(rs);
    replay_fixture_stop(&f);
}

static void test_bad_arguments(void **state) {
    (void)state;
    fl_replay_prefetch_t *p = (fl_replay_prefetch_t *)1;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_prefetch_create(NULL, 0, 1, 16, 4, 0.4, 100, &p, &e), FL_INVALID_ARGUMENT);
    assert_null(p);
    assert_non_null(strstr(e.msg, "depth 0"));
    assert_int_equal(fl_replay_prefetch_create(NULL, 2, 1, 16, 4, 1.5, 100, &p, &e), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_replay_prefetch_create(NULL, 2, 0, 16, 4, 0.4, 100, &p, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "0 batches per Sample call"));
    assert_int_equal(fl_replay_prefetch_create(NULL, 2, FL_REPLAY_PREFETCH_MAX_PER_CALL + 1, 16, 4, 0.4, 100, &p, &e),
                     FL_INVALID_ARGUMENT);
    fl_replay_prefetch_destroy(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batches_and_depth),
        cmocka_unit_test(test_refusals_then_data),
        cmocka_unit_test(test_updates_ride_on_sample),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
