/* Sharded replay end to end: `fleet run` with replay.shards > 1 starts one `fleet replay`
 * process per shard on loopback, every actor streams to its shard (actor index % R), the
 * learner samples across all of them and routes priority updates back, and the launcher
 * sums the shards' Info and writes per-shard figures to summary.txt. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/proc_util.h"
#include "tests/run_util.h"

static char g_tmp[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-shards-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_tmp);
    return 0;
}

static int run_fleet(const char *name, const char *const *sets, int nsets, double timeout_s, char **log) {
    return run_fleet_at(g_tmp, NULL, 0, name, sets, nsets, timeout_s, log);
}

static char *summary_of(const char *name) {
    return summary_at(g_tmp, name);
}

/* Two shards, two actors: each shard gets one actor's inserts and serves the learner. */
static void test_two_shards_train(void **state) {
    (void)state;
    const char *sets[] = {"replay.shards=2", "run.max_seconds=20", "run.stop_at_target=false"};
    char *log = NULL;
    int rc = run_fleet("two", sets, 3, 240, &log);
    assert_non_null(log);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(log, "replay       2 shards"));
    assert_non_null(strstr(log, "replay shard 0 serving"));
    assert_non_null(strstr(log, "replay shard 1 serving"));
    assert_non_null(strstr(log, "streaming to replay shard 0 of 2"));
    assert_non_null(strstr(log, "streaming to replay shard 1 of 2"));
    assert_no_error_lines(log);

    char *sum = summary_of("two");
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "exit_code"), 0);
    assert_int_equal(summary_u64(sum, "replay_shards"), 2);
    unsigned long long ins[4], smp[4], size[4];
    assert_int_equal(summary_list(sum, "replay_inserted_per_shard", ins, 4), 2);
    assert_int_equal(summary_list(sum, "replay_sampled_per_shard", smp, 4), 2);
    assert_int_equal(summary_list(sum, "replay_size_per_shard", size, 4), 2);
    for (int s = 0; s < 2; s++) {
        fprintf(stderr, "shard %d: inserted %llu sampled %llu size %llu\n", s, ins[s], smp[s], size[s]);
        assert_true(ins[s] > 0);
        assert_true(smp[s] > 0);
        assert_true(size[s] > 0);
    }
    /* The launcher's totals are the shards' sums; every acknowledged insert is held. */
    unsigned long long inserted = summary_u64(sum, "replay_inserted");
    assert_int_equal(inserted, ins[0] + ins[1]);
    assert_int_equal(summary_u64(sum, "replay_size"), size[0] + size[1]);
    unsigned long long acked = summary_u64(sum, "actors_acked");
    assert_true(acked > 0);
    assert_true(inserted >= acked);
    assert_true(summary_u64(sum, "learner_steps") > 0);
    assert_children_gone(sum, 5); /* 2 replay shards, paramserver, learner, 2 actors */
    free(sum);
    free(log);
}

/* More shards than actors: the shard without an actor stays empty and is never asked
 * for rows, and training goes on from the others. */
static void test_more_shards_than_actors(void **state) {
    (void)state;
    const char *sets[] = {"replay.shards=3", "run.max_seconds=12", "run.stop_at_target=false"};
    char *log = NULL;
    int rc = run_fleet("three", sets, 3, 240, &log);
    assert_non_null(log);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(log, "shards 2 .. 2 get no inserts"));
    assert_no_error_lines(log);
    char *sum = summary_of("three");
    assert_non_null(sum);
    unsigned long long ins[4], smp[4];
    assert_int_equal(summary_list(sum, "replay_inserted_per_shard", ins, 4), 3);
    assert_int_equal(summary_list(sum, "replay_sampled_per_shard", smp, 4), 3);
    assert_true(ins[0] > 0 && ins[1] > 0);
    assert_true(smp[0] > 0 && smp[1] > 0);
    assert_int_equal(ins[2], 0);
    assert_int_equal(smp[2], 0);
    assert_true(summary_u64(sum, "learner_steps") > 0);
    assert_children_gone(sum, 6);
    free(sum);
    free(log);
}

/* Enough shards that their addresses do not fit in one 255-byte option: the launcher
 * passes them in runs/<name>/replay_addrs.txt (as @FILE). */
static void test_address_file(void **state) {
    (void)state;
    const char *sets[] = {"replay.shards=18", "actor.count=2", "run.max_seconds=20", "run.stop_at_target=false",
                          "replay.min_size_to_sample=200"};
    char *log = NULL;
    int rc = run_fleet("many", sets, 5, 240, &log);
    assert_non_null(log);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(log, "replay 18 shards (addresses in"));
    assert_no_error_lines(log);
    char path[512];
    snprintf(path, sizeof path, "%s/many/replay_addrs.txt", g_tmp);
    char *addrs = read_file(path);
    assert_non_null(addrs);
    int commas = 0;
    for (const char *p = addrs; *p; p++) commas += *p == ',';
    assert_int_equal(commas, 17);
    char *sum = summary_of("many");
    assert_non_null(sum);
    unsigned long long ins[32];
    assert_int_equal(summary_list(sum, "replay_inserted_per_shard", ins, 32), 18);
    assert_true(ins[0] > 0 && ins[1] > 0);
    for (int s = 2; s < 18; s++) assert_int_equal(ins[s], 0);
    assert_true(summary_u64(sum, "learner_steps") > 0);
    assert_children_gone(sum, 22);
    free(addrs);
    free(sum);
    free(log);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_shards_train),
        cmocka_unit_test(test_more_shards_than_actors),
        cmocka_unit_test(test_address_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
