/* Gorila mode end to end on one machine: `fleet run` with learner.mode = gorila starts
 * two learners that push gradients to two parameter-server shards, which own the
 * optimizer. The staleness rules are checked with a deliberately slow learner
 * (learner.slow_push_ms): with a bound, `drop` throws its stale pushes away and `wait`
 * holds the fast learner back instead; 1-bit pushes cut the bytes ~32x. A parameter-
 * server shard killed with SIGKILL is restarted from its checkpoint
 * (paramserver-<shard>.safetensors) and the learners' pushes go on. Several apex
 * learners need mpirun (tests/integration_mpi.c); without it `fleet run` says so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/safetensors.h"
#include "tests/chaos_util.h"
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

/* The pid of parent's `fleet paramserver` child, or 0. */
static pid_t paramserver_child(pid_t parent) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    pid_t found = 0;
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;) {
        char role[16];
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid > 0 && chaos_role_of(pid, parent, role, sizeof role) && strcmp(role, "paramserver") == 0) found = pid;
    }
    closedir(d);
    return found;
}

/* The version metadata of a shard checkpoint, or 0 while there is none. */
static unsigned long long checkpoint_version(const char *path) {
    fl_safetensors_t *f = NULL;
    if (fl_safetensors_read(path, &f, NULL) != FL_OK) return 0;
    const char *v = fl_safetensors_meta(f, "version");
    unsigned long long x = v ? strtoull(v, NULL, 10) : 0;
    fl_safetensors_free(f);
    return x;
}

/* Shard 0 checkpoints every second; once it has a checkpoint of a trained slice it is
 * killed with SIGKILL. The launcher restarts it with --restore, the learners push on and
 * the run ends at its budget. */
static void test_killed_shard_restored(void **state) {
    (void)state;
    char cfg[1024], out_dir[512], out[512], ckpt[700], path[700];
    snprintf(cfg, sizeof cfg, "%s/configs/cartpole.ini", fleet_source_dir());
    snprintf(out_dir, sizeof out_dir, "run.out_dir=%s", g_tmp);
    snprintf(out, sizeof out, "%s/kill.log", g_tmp);
    snprintf(ckpt, sizeof ckpt, "%s/kill/checkpoints/paramserver-0.safetensors", g_tmp);
    char *argv[] = {(char *)fleet_bin(),
                    "run",
                    cfg,
                    "--set",
                    out_dir,
                    "--set",
                    "run.name=kill",
                    "--set",
                    "learner.mode=gorila",
                    "--set",
                    "learner.count=2",
                    "--set",
                    "paramserver.shards=2",
                    "--set",
                    "run.stop_at_target=false",
                    "--set",
                    "run.checkpoint_every=1",
                    "--set",
                    "run.max_seconds=25",
                    NULL};
    pid_t pid = start_process(argv, out);
    assert_true(pid > 0);
    int status = 0, done = 0;
    unsigned long long at_kill = 0;
    pid_t victim = 0;
    for (int i = 0; i < 2400 && !done && !victim; i++) { /* up to 120 s */
        usleep(50000);
        done = waitpid(pid, &status, WNOHANG) == pid;
        if (done || checkpoint_version(ckpt) < 20) continue;
        pid_t ps = paramserver_child(pid);
        at_kill = checkpoint_version(ckpt);
        if (ps && kill(ps, SIGKILL) == 0) victim = ps;
    }
    if (!done) status = wait_process(pid, 240);
    char *log = read_file(out);
    if (log) fprintf(stderr, "---- fleet run (tail) ----\n%s\n", strlen(log) > 6000 ? log + strlen(log) - 6000 : log);
    snprintf(path, sizeof path, "%s/kill/logs", g_tmp);
    append_dir_files(path, &log);
    assert_true(victim > 0);
    assert_true(status != -1 && WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    snprintf(path, sizeof path, "%s/kill/events.log", g_tmp);
    char *events = read_file(path);
    assert_non_null(events);
    fprintf(stderr, "events.log:\n%s\n", events ? events : "");
    assert_non_null(strstr(events, "killed by signal 9"));
    assert_non_null(strstr(events, "restarted paramserver"));
    assert_non_null(strstr(log, "restored from"));
    assert_null(strstr(log, "not restarted"));
    char *sum = summary_at(g_tmp, "kill");
    assert_non_null(sum);
    assert_true(summary_u64(sum, "restarts") >= 1);
    fprintf(stderr, "checkpoint version at the kill %llu, final param_version %llu, pushes_applied %llu\n", at_kill,
            summary_u64(sum, "param_version"), summary_u64(sum, "pushes_applied"));
    assert_true(summary_u64(sum, "param_version") > at_kill);
    assert_true(checkpoint_version(ckpt) > at_kill); /* its final checkpoint, after more pushes */
    assert_children_gone(sum, 6);
    free(sum);
    free(events);
    free(log);
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
        cmocka_unit_test(test_two_learners_two_shards), cmocka_unit_test(test_slow_learner_dropped),
        cmocka_unit_test(test_slow_learner_waited_for), cmocka_unit_test(test_one_bit_pushes),
        cmocka_unit_test(test_killed_shard_restored),   cmocka_unit_test(test_apex_learners_need_mpirun),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
