/* Gorila mode end to end on one machine: `fleet run` with learner.mode = gorila starts
 * two learners that push gradients to two parameter-server shards, which own the
 * optimizer. The staleness rules are checked with a deliberately slow learner
 * (learner.slow_push_ms): with a bound, `drop` throws its stale pushes away and `wait`
 * holds the fast learner back instead; 1-bit pushes cut the bytes ~32x. Several apex
 * learners need mpirun (tests/integration_mpi.c); without it `fleet run` says so. */
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
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-gorila-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_tmp);
    return 0;
}

#define GORILA "learner.mode=gorila", "learner.count=2", "paramserver.shards=2", "run.stop_at_target=false"

/* Runs a gorila fleet and checks what every run must show; returns its summary. */
static char *run_gorila(const char *name, const char *const *sets, int nsets) {
    char *log = NULL;
    int rc = run_fleet_at(g_tmp, NULL, 0, name, sets, nsets, 240, &log);
    assert_non_null(log);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(log, "paramserver  2 shards"));
    assert_non_null(strstr(log, "[learner 1]"));
    assert_no_error_lines(log);
    free(log);
    char *sum = summary_at(g_tmp, name);
    assert_non_null(sum);
    char mode[64];
    assert_non_null(kv_get(sum, "learner_mode", mode, sizeof mode));
    assert_string_equal(mode, "gorila");
    assert_int_equal(summary_u64(sum, "learners"), 2);
    assert_int_equal(summary_u64(sum, "paramserver_shards"), 2);
    assert_true(summary_u64(sum, "learner_steps") > 0);
    assert_true(summary_u64(sum, "pushes_applied") > 0);
    assert_children_gone(sum, 6);
    return sum;
}

/* Applied and dropped pushes by staleness bucket, summed over buckets above `from`. */
static unsigned long long stale_above(const char *sum, int from) {
    char buf[512];
    assert_non_null(kv_get(sum, "staleness_hist", buf, sizeof buf));
    unsigned long long total = 0;
    int b = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","), b++) {
        char *colon = strchr(tok, ':');
        assert_non_null(colon);
        if (b >= from) total += strtoull(colon + 1, NULL, 10);
    }
    assert_int_equal(b, 8);
    return total;
}

static void test_two_learners_two_shards(void **state) {
    (void)state;
    const char *sets[] = {GORILA, "run.max_seconds=15"};
    char *sum = run_gorila("plain", sets, 5);
    /* no bound: nothing is dropped, however stale */
    assert_int_equal(summary_u64(sum, "pushes_dropped"), 0);
    assert_int_equal(summary_u64(sum, "push_waits"), 0);
    /* the actors learn from what the shards hold: versions move with the pushes */
    assert_true(summary_u64(sum, "param_version") > 10);
    char path[512];
    snprintf(path, sizeof path, "%s/plain/roles.csv", g_tmp);
    char *roles = read_file(path);
    assert_non_null(roles);
    assert_non_null(strstr(roles, ",learner,0,"));
    assert_non_null(strstr(roles, ",learner,1,"));
    assert_non_null(strstr(roles, ",actor,1,"));
    free(roles);
    free(sum);
}

/* The slow learner's gradients arrive after the fast one has moved the shards on:
 * with a bound of 4 and `drop`, those pushes are dropped and counted. */
static void test_slow_learner_dropped(void **state) {
    (void)state;
    const char *sets[] = {GORILA, "run.max_seconds=12", "learner.slow_push_ms=40", "paramserver.max_staleness=4"};
    char *sum = run_gorila("drop", sets, 7);
    unsigned long long dropped = summary_u64(sum, "pushes_dropped");
    fprintf(stderr, "dropped %llu of %llu\n", dropped, dropped + summary_u64(sum, "pushes_applied"));
    assert_true(dropped > 0);
    assert_true(stale_above(sum, 4) > 0); /* buckets 5-8 and up: beyond the bound */
    free(sum);
}

/* The same slow learner with `wait`: nothing is dropped; the fast learner's replies are
 * held until the slow one catches up (stale-synchronous parallel). */
static void test_slow_learner_waited_for(void **state) {
    (void)state;
    const char *sets[] = {GORILA, "run.max_seconds=12", "learner.slow_push_ms=40", "paramserver.max_staleness=4",
                          "paramserver.stale_policy=wait"};
    char *sum = run_gorila("wait", sets, 8);
    assert_int_equal(summary_u64(sum, "pushes_dropped"), 0);
    assert_true(summary_u64(sum, "push_waits") > 0);
    free(sum);
}

/* 1-bit pushes: about 32x fewer bytes per push than float32 ones. */
static void test_one_bit_pushes(void **state) {
    (void)state;
    const char *f32[] = {GORILA, "run.max_seconds=8"};
    const char *bit[] = {GORILA, "run.max_seconds=8", "learner.push_1bit=true"};
    char *a = run_gorila("f32", f32, 5);
    char *b = run_gorila("bit", bit, 6);
    double per_a = (double)summary_u64(a, "push_bytes") /
                   (double)(summary_u64(a, "pushes_applied") + summary_u64(a, "pushes_dropped"));
    double per_b = (double)summary_u64(b, "push_bytes") /
                   (double)(summary_u64(b, "pushes_applied") + summary_u64(b, "pushes_dropped"));
    fprintf(stderr, "bytes per shard push: float32 %.0f, 1-bit %.0f (%.1fx)\n", per_a, per_b, per_a / per_b);
    assert_true(per_a / per_b > 20.0);
    free(a);
    free(b);
}

static void test_apex_learners_need_mpirun(void **state) {
    (void)state;
    const char *sets[] = {"learner.count=2"};
    char *log = NULL;
    int rc = run_fleet_at(g_tmp, NULL, 0, "apex2", sets, 1, 60, &log);
    assert_int_equal(rc, 2);
    assert_non_null(log);
    assert_non_null(strstr(log, "start the fleet under mpirun"));
    assert_non_null(strstr(log, "--print-mpirun"));
    free(log);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_learners_two_shards),   cmocka_unit_test(test_slow_learner_dropped),
        cmocka_unit_test(test_slow_learner_waited_for),   cmocka_unit_test(test_one_bit_pushes),
        cmocka_unit_test(test_apex_learners_need_mpirun),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
