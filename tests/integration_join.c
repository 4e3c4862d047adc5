/* Actors that come and go, through real processes: a CartPole fleet of one actor runs;
 * three `fleet actor --join RUN_DIR` processes join it while it runs:
 *  - each is given the next index (1, 2, 3), its own epsilon and the run's config, and
 *    its experience reaches replay (its env steps and acknowledged transitions in
 *    roles.csv);
 *  - one is stopped by SIGTERM: it flushes, reports its last figures and exits 0; the
 *    launcher records it as left;
 *  - one is killed (SIGKILL): the launcher records it as lost once it has been silent
 *    for half of run.hang_s, and the fleet goes on;
 *  - the last stays until the fleet's own stop, which it hears from the launcher;
 *  - the fleet ends as it should (exit 0), its summary counts the joins, nothing the
 *    actors saw acknowledged is missing from replay, and the progress line shows the
 *    joined actors;
 *  - a join with a wrong target, or with the options a launcher gives, is refused with a
 *    message that says what was expected. */
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
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-join-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_tmp);
    return 0;
}

/* Starts `fleet actor --join RUN_DIR` with its output in TMP/joiner-K.log. */
static pid_t start_joiner(const char *run_dir, int k) {
    char out[512];
    snprintf(out, sizeof out, "%s/joiner-%d.log", g_tmp, k);
    char *argv[] = {(char *)fleet_bin(), "actor", "--join", (char *)run_dir, "--set", "run.log_level=info", NULL};
    return start_process(argv, out);
}

static char *joiner_log(int k) {
    char path[512];
    snprintf(path, sizeof path, "%s/joiner-%d.log", g_tmp, k);
    char *t = read_file(path);
    fprintf(stderr, "---- joiner %d ----\n%s\n", k, t ? t : "(none)");
    return t;
}

/* The largest value of column `col` (0-based) over roles.csv rows of actor `index`. */
static unsigned long long roles_max(const char *roles, int index, int col) {
    unsigned long long best = 0;
    char want[32];
    snprintf(want, sizeof want, ",actor,%d,", index);
    for (const char *line = roles; line && *line;) {
        const char *eol = strchr(line, '\n');
        const char *hit = strstr(line, want);
        if (hit && (!eol || hit < eol)) {
            const char *c = line;
            for (int k = 0; k < col && c; k++) {
                c = strchr(c, ',');
                if (c) c++;
            }
            if (c && (!eol || c < eol)) {
                unsigned long long v = strtoull(c, NULL, 10);
                if (v > best) best = v;
            }
        }
        line = eol ? eol + 1 : NULL;
    }
    return best;
}

static void test_actors_come_and_go(void **unused) {
    (void)unused;
    const char *sets[] = {"actor.count=1", "run.max_seconds=45",    "run.stop_at_target=false", "run.evaluators=0",
                          "run.hang_s=16", "run.checkpoints=false", "run.log_level=info"};
    pid_t fleet = start_fleet_at(g_tmp, NULL, 0, "join", sets, (int)(sizeof sets / sizeof sets[0]));
    char run_dir[400], addr_file[450];
    snprintf(run_dir, sizeof run_dir, "%s/join", g_tmp);
    snprintf(addr_file, sizeof addr_file, "%s/control.addr", run_dir);
    assert_true(wait_file(addr_file, 60));
    pid_t a = start_joiner(run_dir, 1);
    usleep(300000);
    pid_t b = start_joiner(run_dir, 2);
    usleep(300000);
    pid_t c = start_joiner(run_dir, 3);
    sleep(12);
    kill(a, SIGTERM); /* leaves */
    kill(b, SIGKILL); /* lost */
    int sa = wait_process(a, 30);
    int sc = wait_process(c, 90); /* stays until the fleet stops */
    waitpid(b, NULL, 0);
    int sf = wait_process(fleet, 60);
    char path[512];
    snprintf(path, sizeof path, "%s/join.log", g_tmp);
    char *log = read_file(path);
    fprintf(stderr, "---- fleet run ----\n%s\n", log ? log : "(none)");
    char *la = joiner_log(1), *lb = joiner_log(2), *lc = joiner_log(3);
    assert_true(sf != -1 && WIFEXITED(sf) && WEXITSTATUS(sf) == 0);
    assert_true(sa != -1 && WIFEXITED(sa) && WEXITSTATUS(sa) == 0);
    assert_true(sc != -1 && WIFEXITED(sc) && WEXITSTATUS(sc) == 0);
    /* each got its own index, in the order they joined */
    int seen[4] = {0};
    const char *logs[3] = {la, lb, lc};
    for (int k = 0; k < 3; k++) {
        assert_non_null(logs[k]);
        const char *j = strstr(logs[k], "joined run join as actor ");
        assert_non_null(j);
        int idx = atoi(j + strlen("joined run join as actor "));
        assert_true(idx >= 1 && idx <= 3);
        seen[idx]++;
    }
    assert_true(seen[1] == 1 && seen[2] == 1 && seen[3] == 1);
    assert_non_null(strstr(la, "stopped after"));
    assert_non_null(strstr(lc, "the launcher asks this role to stop"));
    /* the launcher's records */
    assert_non_null(strstr(log, "left after"));
    assert_non_null(strstr(log, "lost: no report for"));
    assert_non_null(strstr(log, "+3 joined"));
    char *sum = summary_at(g_tmp, "join");
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "actors_joined"), 3);
    assert_int_equal(summary_u64(sum, "actors_left"), 2);
    assert_int_equal(summary_u64(sum, "actors_lost"), 1);
    assert_int_equal(summary_u64(sum, "actor_slots"), 4);
    assert_int_equal(summary_u64(sum, "actors_lost_unacked"), 0);
    /* every transition the actors saw acknowledged is in replay (the killed one's too) */
    assert_true(summary_u64(sum, "replay_inserted") >= summary_u64(sum, "actors_acked"));
    /* the joined actors stepped and their transitions were acknowledged */
    char *roles = run_file_at(g_tmp, "join", "roles.csv");
    assert_non_null(roles);
    for (int i = 1; i <= 3; i++) {
        assert_true(roles_max(roles, i, 3) > 100); /* env_steps */
    }
    free(roles);
    free(sum);
    free(la);
    free(lb);
    free(lc);
    free(log);
}

static void test_join_refusals(void **unused) {
    (void)unused;
    char *out = NULL;
    char *argv1[] = {(char *)fleet_bin(), "actor", "--join", g_tmp, NULL}; /* a folder, not a run's */
    assert_int_equal(run_capture(argv1, 30, &out), 2);
    assert_non_null(strstr(out, "no control.addr"));
    free(out);
    char *argv2[] = {(char *)fleet_bin(), "actor", "--join", "127.0.0.1:1", "--index", "0", NULL};
    assert_int_equal(run_capture(argv2, 30, &out), 2);
    assert_non_null(strstr(out, "expected none of --index"));
    free(out);
    char *argv3[] = {(char *)fleet_bin(), "actor", NULL};
    assert_int_equal(run_capture(argv3, 30, &out), 2);
    assert_non_null(strstr(out, "--join RUN_DIR|HOST:PORT"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_refusals),
        cmocka_unit_test(test_actors_come_and_go),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
