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

/* Runs `fleet run configs/cartpole.ini` with run.out_dir/run.name and the given --set
 * overrides; returns its exit status (-1 on timeout) and its output in *log. */
static int run_fleet(const char *name, const char *const *sets, int nsets, double timeout_s, char **log) {
    static char cfg[1024], out_dir[512], run_name[256], out[512];
    snprintf(cfg, sizeof cfg, "%s/configs/cartpole.ini", fleet_source_dir());
    snprintf(out_dir, sizeof out_dir, "run.out_dir=%s", g_tmp);
    snprintf(run_name, sizeof run_name, "run.name=%s", name);
    snprintf(out, sizeof out, "%s/%s.log", g_tmp, name);
    char *argv[40];
    int n = 0;
    argv[n++] = (char *)fleet_bin();
    argv[n++] = "run";
    argv[n++] = cfg;
    argv[n++] = "--set";
    argv[n++] = out_dir;
    argv[n++] = "--set";
    argv[n++] = run_name;
    for (int i = 0; i < nsets && n < 38; i++) {
        argv[n++] = "--set";
        argv[n++] = (char *)sets[i];
    }
    argv[n] = NULL;
    pid_t pid = start_process(argv, out);
    int status = wait_process(pid, timeout_s);
    *log = read_file(out);
    if (*log)
        fprintf(stderr, "---- fleet run %s (tail) ----\n%s\n", name,
                strlen(*log) > 5000 ? *log + strlen(*log) - 5000 : *log);
    if (status == -1 || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

static char *summary_of(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/summary.txt", g_tmp, name);
    return read_file(path);
}

/* The comma-separated unsigned values of `key` in the summary; returns how many. */
static int summary_list(const char *sum, const char *key, unsigned long long *v, int max) {
    char buf[4096];
    if (!kv_get(sum, key, buf, sizeof buf)) return -1;
    int n = 0;
    for (char *tok = strtok(buf, ","); tok && n < max; tok = strtok(NULL, ",")) v[n++] = strtoull(tok, NULL, 10);
    return n;
}

static unsigned long long summary_u64(const char *sum, const char *key) {
    char v[256];
    assert_non_null(kv_get(sum, key, v, sizeof v));
    return strtoull(v, NULL, 10);
}

static void assert_children_gone(const char *summary, int at_least) {
    char pids[4096];
    assert_non_null(kv_get(summary, "pids", pids, sizeof pids));
    int count = 0;
    for (char *tok = strtok(pids, ","); tok; tok = strtok(NULL, ",")) {
        pid_t pid = (pid_t)atoi(tok);
        assert_true(pid > 0);
        errno = 0;
        assert_int_equal(kill(pid, 0), -1);
        assert_int_equal(errno, ESRCH);
        count++;
    }
    assert_true(count >= at_least);
}

/* No role logged an error (log lines look like "12:00:00.000 E [role i] ..."). */
static void assert_no_error_lines(const char *log) {
    const char *hit = strstr(log, " E [");
    if (hit) {
        const char *eol = strchr(hit, '\n');
        fail_msg("an error was logged: %.*s", eol ? (int)(eol - hit) : 200, hit);
    }
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
