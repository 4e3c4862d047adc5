/* Tests of a gorila shard's checkpoint (paramserver/checkpoint.h): save and load give
 * back the slice, the optimizer's state, the version and the counters bit for bit, and
 * the restored shard goes on exactly as the original would; a file of another shard,
 * shard count, optimizer, optimizer setting or learner count is refused naming the field
 * and both values; a restored shard takes a push based on a version it lost. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/optim.h"
#include "paramserver/checkpoint.h"
#include "paramserver/shard.h"
#include "paramserver/store.h"

#define TOTAL 103
#define SHARDS 3
#define SHARD 1

static char g_dir[256], g_path[300];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fleet-psckpt-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    fl_param_checkpoint_path(g_dir, SHARD, g_path, sizeof g_path);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(g_path);
    rmdir(g_dir);
    return 0;
}

static fl_param_store_opts_t opts(fl_optim_kind kind) {
    fl_param_store_opts_t o;
    fl_param_store_opts_init(&o);
    o.gorila = 1;
    o.shard_id = SHARD;
    o.num_shards = SHARDS;
    o.optim = fl_optim_config_default(kind);
    o.optim.lr = 0.01f;
    o.learners = 2;
    o.max_staleness = 2; /* drop: some pushes are dropped, so that every counter moves */
    return o;
}

static fl_param_store_t *store(const fl_param_store_opts_t *o) {
    fl_param_store_t *s = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_param_store_create(o, &s, &err) != FL_OK) fail_msg("create: %s", err.msg);
    return s;
}

static void fill(float *v, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
}

static void push(fl_param_store_t *s, uint32_t learner, uint64_t based_on, uint32_t seed, fl_param_push_outcome_t *o) {
    uint64_t off, n;
    fl_param_shard_range(TOTAL, SHARDS, SHARD, &off, &n);
    float g[TOTAL];
    fill(g, (size_t)n, seed);
    fl_err_t err;
    fl_err_init(&err);
    if (fl_param_store_push(s, learner, based_on, off, TOTAL, g, (size_t)n, o, &err) != FL_OK)
        fail_msg("push: %s", err.msg);
}

/* A shard with a published slice and a few pushes (two dropped as too stale). */
static fl_param_store_t *trained(const fl_param_store_opts_t *o) {
    fl_param_store_t *s = store(o);
    uint64_t off, n;
    fl_param_shard_range(TOTAL, SHARDS, SHARD, &off, &n);
    float v[TOTAL];
    fill(v, (size_t)n, 7);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_store_publish(s, 1, off, TOTAL, v, (size_t)n, &err), FL_OK);
    fl_param_push_outcome_t out;
    for (uint32_t k = 0; k < 6; k++) push(s, k % 2, fl_param_store_version(s), 100 + k, &out);
    push(s, 1, 1, 200, &out); /* staleness 6 > 2: dropped */
    assert_int_equal(out.applied, 0);
    return s;
}

static void assert_same_state(fl_param_store_t *a, fl_param_store_t *b) {
    fl_param_store_state_t x, y;
    int hx = 0, hy = 0;
    assert_int_equal(fl_param_store_capture(a, &x, &hx, NULL), FL_OK);
    assert_int_equal(fl_param_store_capture(b, &y, &hy, NULL), FL_OK);
    assert_true(hx && hy);
    assert_int_equal(x.version, y.version);
    assert_int_equal(x.offset, y.offset);
    assert_int_equal(x.total, y.total);
    assert_int_equal(x.n, y.n);
    assert_memory_equal(x.params, y.params, 4 * x.n);
    assert_int_equal(x.optim_size, y.optim_size);
    assert_true(x.optim_size > 0);
    assert_memory_equal(x.optim, y.optim, 4 * x.optim_size);
    assert_int_equal(x.optim_steps, y.optim_steps);
    assert_memory_equal(x.clocks, y.clocks, 8 * (size_t)x.learners);
    assert_int_equal(x.publishes, y.publishes);
    assert_int_equal(x.pushes_applied, y.pushes_applied);
    assert_int_equal(x.pushes_dropped, y.pushes_dropped);
    assert_memory_equal(x.staleness_hist, y.staleness_hist, sizeof x.staleness_hist);
    fl_param_store_state_free(&x);
    fl_param_store_state_free(&y);
}

static void round_trip(fl_optim_kind kind) {
    fl_param_store_opts_t o = opts(kind);
    fl_param_store_t *a = trained(&o);
    fl_err_t err;
    fl_err_init(&err);
    int saved = 0;
    if (fl_param_checkpoint_save(a, g_path, &saved, &err) != FL_OK) fail_msg("save: %s", err.msg);
    assert_true(saved);
    fl_param_store_t *b = store(&o);
    uint64_t version = 0;
    if (fl_param_checkpoint_load(b, g_path, &version, &err) != FL_OK) fail_msg("load: %s", err.msg);
    assert_int_equal(version, 7);
    assert_int_equal(fl_param_store_version(b), 7);
    assert_same_state(a, b);
    fl_param_store_info_t ia, ib;
    fl_param_store_info(a, &ia);
    fl_param_store_info(b, &ib);
    assert_int_equal(ia.pushes_applied, 6);
    assert_int_equal(ib.pushes_applied, 6);
    assert_int_equal(ib.pushes_dropped, 1);
    assert_int_equal(ib.size, ia.size);
    /* both go on alike, bit for bit */
    fl_param_push_outcome_t oa, ob;
    for (uint32_t k = 0; k < 3; k++) {
        push(a, k % 2, fl_param_store_version(a) - 1, 300 + k, &oa);
        push(b, k % 2, fl_param_store_version(b) - 1, 300 + k, &ob);
        assert_int_equal(oa.version, ob.version);
    }
    assert_same_state(a, b);
    /* the restored snapshot is fetched as any other */
    uint64_t held = 0;
    const fl_param_snapshot_t *snap = fl_param_store_fetch(b, 0, &held);
    assert_non_null(snap);
    assert_int_equal(snap->version, 10);
    fl_param_snapshot_release(snap);
    fl_param_store_destroy(a);
    fl_param_store_destroy(b);
}

static void test_round_trip_adam(void **state) {
    (void)state;
    round_trip(FL_OPTIM_ADAM);
}

static void test_round_trip_rmsprop(void **state) {
    (void)state;
    round_trip(FL_OPTIM_RMSPROP);
}

static void test_nothing_to_save_yet(void **state) {
    (void)state;
    fl_param_store_opts_t o = opts(FL_OPTIM_ADAM);
    fl_param_store_t *s = store(&o);
    int saved = 1;
    unlink(g_path);
    assert_int_equal(fl_param_checkpoint_save(s, g_path, &saved, NULL), FL_OK);
    assert_int_equal(saved, 0);
    assert_int_equal(access(g_path, F_OK), -1);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_checkpoint_load(s, g_path, NULL, &err), FL_NOT_FOUND);
    fl_param_store_destroy(s);
}

/* Loads g_path into a store of options o: refused with a message holding every needle. */
static void refused(const fl_param_store_opts_t *o, fl_status code, const char *n1, const char *n2) {
    fl_param_store_t *s = store(o);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_checkpoint_load(s, g_path, NULL, &err), code);
    if (!strstr(err.msg, n1) || (n2 && !strstr(err.msg, n2))) fail_msg("message: %s", err.msg);
    assert_int_equal(fl_param_store_version(s), 0); /* nothing changed */
    fl_param_store_destroy(s);
}

static void test_mismatches_refused(void **state) {
    (void)state;
    fl_param_store_opts_t o = opts(FL_OPTIM_ADAM);
    fl_param_store_t *a = trained(&o);
    int saved = 0;
    assert_int_equal(fl_param_checkpoint_save(a, g_path, &saved, NULL), FL_OK);
    fl_param_store_destroy(a);

    fl_param_store_opts_t x = o;
    x.num_shards = 4;
    refused(&x, FL_INVALID_ARGUMENT, "shards is \"3\"", "4 in this shard's config (paramserver.shards)");
    x = o;
    x.shard_id = 2;
    refused(&x, FL_INVALID_ARGUMENT, "shard is \"1\"", "2 in this shard's config");
    x = o;
    x.optim = fl_optim_config_default(FL_OPTIM_RMSPROP);
    refused(&x, FL_INVALID_ARGUMENT, "optimizer is \"adam\"", "rmsprop");
    x = o;
    x.optim.lr = 0.02f;
    refused(&x, FL_INVALID_ARGUMENT, "optimizer.lr is \"0.00999999978\"", "0.0199999996");
    x = o;
    x.optim.beta2 = 0.99f;
    refused(&x, FL_INVALID_ARGUMENT, "optimizer.beta2", "0.99");
    x = o;
    x.learners = 3;
    refused(&x, FL_INVALID_ARGUMENT, "learners is \"2\"", "3 in this shard's config (learner.count)");
    x = o;
    x.gorila = 0;
    refused(&x, FL_FAILED_PRECONDITION, "apex", NULL);

    /* a shard that already holds parameters is not overwritten */
    fl_param_store_t *b = trained(&o);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_checkpoint_load(b, g_path, NULL, &err), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "already holds version 7"));
    fl_param_store_destroy(b);

    /* not a checkpoint at all */
    FILE *f = fopen(g_path, "w");
    assert_non_null(f);
    fputs("not a safetensors file", f);
    fclose(f);
    refused(&o, FL_INVALID_ARGUMENT, g_path, NULL);
}

/* Learners fetched versions the shard made after its checkpoint: their pushes are
 * taken (staleness 0) and the version goes on past theirs, never back. */
static void test_push_from_lost_version(void **state) {
    (void)state;
    fl_param_store_opts_t o = opts(FL_OPTIM_SGD);
    fl_param_store_t *a = trained(&o);
    int saved = 0;
    assert_int_equal(fl_param_checkpoint_save(a, g_path, &saved, NULL), FL_OK);
    fl_param_store_t *b = store(&o);
    assert_int_equal(fl_param_checkpoint_load(b, g_path, NULL, NULL), FL_OK);
    fl_param_push_outcome_t out;
    push(b, 0, 12, 400, &out); /* version 12 was lost (held 7) */
    assert_int_equal(out.applied, 1);
    assert_int_equal(out.staleness, 0);
    assert_int_equal(out.version, 13);
    /* a store that was never restored still refuses a version from the future */
    uint64_t off, n;
    fl_param_shard_range(TOTAL, SHARDS, SHARD, &off, &n);
    float g[TOTAL] = {0};
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_param_store_push(a, 0, 99, off, TOTAL, g, (size_t)n, &out, &err), FL_FAILED_PRECONDITION);
    fl_param_store_destroy(a);
    fl_param_store_destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_adam),        cmocka_unit_test(test_round_trip_rmsprop),
        cmocka_unit_test(test_nothing_to_save_yet),    cmocka_unit_test(test_mismatches_refused),
        cmocka_unit_test(test_push_from_lost_version),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
