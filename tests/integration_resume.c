/* Whole-experiment resume through real processes: a CartPole fleet is stopped with Ctrl-C
 * (SIGINT to `fleet run`), then `fleet run --resume` continues it:
 *  - no acknowledged transition is lost: the replay shard restores every item the actors
 *    saw acknowledged, and its insert counter goes on from there;
 *  - every counter continues exactly: the learner from its step, each actor from its env
 *    steps and episodes (summing to the launcher's totals), the launcher's episodes and
 *    evaluations; the metrics files are appended, with time going on;
 *  - the first progress row after the resume shows true rates (counted from the stop, not
 *    from zero);
 *  - a run that is going cannot be resumed by a second launcher, and a folder without
 *    checkpoints (or not a run) is refused with a clear message;
 *  - a launcher killed (SIGKILL) seconds after its start, long before run.checkpoint_every,
 *    leaves a run that `--resume` continues. */
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
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-resume-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_tmp);
    return 0;
}

/* Lines of the metrics file (rows, header excluded). */
static int csv_rows(const char *path) {
    char *t = read_file(path);
    int n = -1;
    for (const char *c = t; c && *c; c++) n += *c == '\n';
    free(t);
    return n < 0 ? 0 : n;
}

/* Sums X and Y of the "resumed from DIR/actor-I.state at X env steps, Y episodes" lines. */
static void sum_resumed(const char *text, unsigned long long *a, unsigned long long *b, int *n) {
    *a = *b = 0;
    *n = 0;
    for (const char *p = text; (p = strstr(p, "resumed from ")); p++) {
        const char *eol = strchr(p, '\n'), *at = strstr(p, ".state at ");
        unsigned long long x, y;
        if (!at || (eol && at > eol) || !strstr(p, "/actor-") || strstr(p, "/actor-") > at) continue;
        if (sscanf(at, ".state at %llu env steps, %llu episodes", &x, &y) == 2) {
            *a += x;
            *b += y;
            ++*n;
        }
    }
}

/* Field `col` (0-based) of CSV line `line`. */
static double field(const char *line, int col) {
    for (int i = 0; i < col && line; i++) {
        line = strchr(line, ',');
        if (line) line++;
    }
    return line ? atof(line) : -1;
}

/* The index of column `name` in the csv header line `header`; fails the test when absent. */
static int column(const char *header, const char *name) {
    size_t len = strlen(name);
    int col = 0;
    for (const char *p = header; p && *p && *p != '\n'; col++) {
        if (strncmp(p, name, len) == 0 && (p[len] == ',' || p[len] == '\n' || p[len] == '\0')) return col;
        p = strchr(p, ',');
        if (p) p++;
    }
    fail_msg("metrics.csv has no column %s", name);
    return -1;
}

static void test_ctrl_c_then_resume(void **state) {
    (void)state;
    char cfg[1024], dir[512], path[700], out[600];
    snprintf(cfg, sizeof cfg, "%s/configs/cartpole.ini", fleet_source_dir());
    snprintf(dir, sizeof dir, "%s/exp", g_tmp);
    char od[600], nm[64] = "run.name=exp";
    snprintf(od, sizeof od, "run.out_dir=%s", g_tmp);
    char *argv1[] = {
        (char *)fleet_bin(),   "run", cfg, "--set", od, "--set", nm, "--set", "run.stop_at_target=false", "--set",
        "run.max_seconds=120", NULL};
    snprintf(out, sizeof out, "%s/first.log", g_tmp);
    pid_t pid = start_process(argv1, out);
    /* Until a few progress rows and an evaluation are written. */
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    char evals[700];
    snprintf(evals, sizeof evals, "%s/evals.csv", dir);
    for (int i = 0; i < 600 && (csv_rows(path) < 5 || csv_rows(evals) < 1); i++) usleep(100000);
    assert_true(csv_rows(path) >= 5);

    /* A second launcher cannot take the folder while the run goes. */
    char *busy_argv[] = {(char *)fleet_bin(), "run", "--resume", dir, NULL};
    char *busy = NULL;
    assert_int_equal(run_capture(busy_argv, 60, &busy), 2);
    assert_non_null(strstr(busy, "in use by another fleet run"));
    free(busy);

    assert_int_equal(kill(pid, SIGINT), 0);
    int status = wait_process(pid, 400);
    assert_true(status != -1 && WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    char *log1 = read_file(out), hint[700];
    assert_non_null(log1);
    snprintf(hint, sizeof hint, "fleet run: continue it with `fleet run --resume %s`", dir);
    assert_non_null(strstr(log1, hint)); /* the stop says how to go on */
    free(log1);
    char *sum1 = summary_at(g_tmp, "exp");
    assert_non_null(sum1);
    unsigned long long env1 = summary_u64(sum1, "env_steps"), lsteps1 = summary_u64(sum1, "learner_steps"),
                       inserted1 = summary_u64(sum1, "replay_inserted"), acked1 = summary_u64(sum1, "actors_acked"),
                       episodes1 = summary_u64(sum1, "episodes"), evals1 = summary_u64(sum1, "evaluations");
    assert_true(env1 > 0 && lsteps1 > 0 && acked1 > 0 && evals1 > 0);
    int rows1 = csv_rows(path);
    char *m1 = read_file(path);
    const char *last1 = m1 + strlen(m1) - 1;
    while (last1 > m1 && last1[-1] != '\n') last1--;
    double time1 = field(last1, 0);
    free(m1);

    /* Resume for 20,000 more env steps. */
    char budget[128];
    snprintf(budget, sizeof budget, "run.max_env_steps=%llu", env1 + 20000);
    char *argv2[] = {(char *)fleet_bin(), "run", "--resume", dir, "--set", budget, NULL};
    snprintf(out, sizeof out, "%s/second.log", g_tmp);
    status = wait_process(start_process(argv2, out), 400);
    char *log2 = read_file(out);
    if (log2) fprintf(stderr, "---- resumed run ----\n%s\n", log2);
    assert_true(status != -1 && WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_non_null(strstr(log2, "resume       "));

    /* What the roles restored: every acknowledged transition, the learner's step, the actors'
     * counters. */
    char logs[700];
    snprintf(logs, sizeof logs, "%s/logs", dir);
    char *rl = NULL;
    append_dir_files(logs, &rl);
    assert_non_null(rl);
    char want[1024];
    /* (the write-ahead log is on: the shard recovers from its checkpoint and log) */
    snprintf(want, sizeof want, "recovered %llu items in ", inserted1);
    assert_non_null(strstr(rl, want));
    assert_int_equal(acked1, inserted1);
    snprintf(want, sizeof want, "resumed from %s/checkpoints/learner-0.safetensors at step %llu", dir, lsteps1);
    assert_non_null(strstr(rl, want));
    unsigned long long env_sum, ep_sum;
    int actors;
    sum_resumed(rl, &env_sum, &ep_sum, &actors);
    assert_int_equal(actors, 2);
    assert_int_equal(env_sum, env1);
    assert_int_equal(ep_sum, episodes1);
    snprintf(want, sizeof want, "after %llu evaluations", evals1);
    assert_non_null(strstr(rl, want));

    /* The counters went on. */
    char *sum2 = summary_at(g_tmp, "exp");
    assert_non_null(sum2);
    assert_true(summary_u64(sum2, "env_steps") >= env1 + 20000);
    assert_true(summary_u64(sum2, "learner_steps") > lsteps1);
    assert_true(summary_u64(sum2, "replay_inserted") > inserted1);
    assert_true(summary_u64(sum2, "actors_acked") > acked1);
    assert_true(summary_u64(sum2, "episodes") > episodes1);
    assert_true(summary_u64(sum2, "evaluations") > evals1);

    /* metrics.csv was appended: time goes on, and the first resumed row's rates count from
     * the stop. */
    assert_true(csv_rows(path) > rows1);
    char *m2 = read_file(path);
    const char *row = m2;
    for (int i = 0; i <= rows1; i++) row = strchr(row, '\n') + 1;
    assert_true(field(row, column(m2, "time_s")) > time1);
    double env_row = field(row, column(m2, "env_steps")), env_rate = field(row, column(m2, "env_steps_per_s"));
    double l_row = field(row, column(m2, "learner_steps")), l_rate = field(row, column(m2, "learner_steps_per_s"));
    assert_true(env_row >= (double)env1);
    assert_true(env_rate <= 3.0 * (env_row - (double)env1) + 1.0);
    assert_true(l_rate <= 3.0 * (l_row - (double)lsteps1) + 1.0);
    free(m2);
    free(sum2);
    free(rl);
    free(log2);
    free(sum1);
}

/* The launcher dies with SIGKILL 2 s into a run whose checkpoints come every 600 s: its
 * state was saved at the start, so --resume continues the run (exit 0, at its time limit). */
static void test_launcher_killed_early(void **state) {
    (void)state;
    char dir[700];
    snprintf(dir, sizeof dir, "%s/early", g_tmp);
    const char *sets[] = {"run.stop_at_target=false", "run.max_seconds=60", "run.checkpoint_every=600"};
    pid_t pid = start_fleet_at(g_tmp, NULL, 0, "early", sets, 3);
    char metrics[760];
    snprintf(metrics, sizeof metrics, "%s/metrics.csv", dir);
    for (int i = 0; i < 600 && csv_rows(metrics) < 2; i++) usleep(50000);
    assert_true(csv_rows(metrics) >= 2);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    /* its roles get SIGTERM as their parent dies; wait until they are gone */
    char *out = NULL;
    for (int i = 0; i < 200; i++) {
        int rc = shell_in(g_tmp, &out, "pgrep -f '%s/config.ini' > /dev/null", dir);
        free(out);
        out = NULL;
        if (rc != 0) break;
        usleep(100000);
    }
    char *argv2[] = {(char *)fleet_bin(), "run", "--resume", dir, "--set", "run.max_seconds=5", NULL};
    int rc = run_capture(argv2, 120, &out);
    if (rc != 0) fail_msg("--resume after a launcher killed at 2 s: exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "time limit"));
    free(out);
}

static void test_refusals(void **state) {
    (void)state;
    char *out = NULL;
    char missing[600];
    snprintf(missing, sizeof missing, "%s/nothing-here", g_tmp);
    char *argv1[] = {(char *)fleet_bin(), "run", "--resume", missing, NULL};
    assert_int_equal(run_capture(argv1, 60, &out), 2);
    assert_non_null(strstr(out, "not a run folder"));
    free(out);
    /* A run without checkpoints. */
    const char *sets[] = {"run.checkpoints=false", "run.max_env_steps=3000", "run.stop_at_target=false"};
    char *log = NULL;
    assert_int_equal(run_fleet_at(g_tmp, NULL, 0, "nockpt", sets, 3, 120, &log), 0);
    free(log);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/nockpt", g_tmp);
    char *argv2[] = {(char *)fleet_bin(), "run", "--resume", dir, NULL};
    assert_int_equal(run_capture(argv2, 60, &out), 2);
    assert_non_null(strstr(out, "run.checkpoints = false"));
    free(out);
    /* A run whose budget is spent: refused before anything starts, saying how to raise it;
     * with the limit raised it goes on. */
    const char *spent[] = {"run.max_env_steps=3000", "run.stop_at_target=false"};
    assert_int_equal(run_fleet_at(g_tmp, NULL, 0, "spent", spent, 2, 120, &log), 0);
    free(log);
    snprintf(dir, sizeof dir, "%s/spent", g_tmp);
    char *argv4[] = {(char *)fleet_bin(), "run", "--resume", dir, NULL};
    assert_int_equal(run_capture(argv4, 60, &out), 2);
    assert_non_null(strstr(out, "of run.max_env_steps = 3000, so it would stop as soon as it started"));
    const char *raise = strstr(out, "--set run.max_env_steps=");
    assert_non_null(raise); /* the steps taken and as many again (the budget is checked each second) */
    const long long more = strtoll(raise + strlen("--set run.max_env_steps="), NULL, 10);
    assert_true(more >= 6000);
    assert_null(strstr(out, "started actor")); /* nothing started */
    free(out);
    char set5[64];
    snprintf(set5, sizeof set5, "run.max_env_steps=%lld", more);
    char *argv5[] = {(char *)fleet_bin(), "run", "--resume", dir, "--set", set5, NULL};
    assert_int_equal(run_capture(argv5, 120, &out), 0);
    assert_null(strstr(out, "not resuming"));
    free(out);
    char *sum = summary_at(g_tmp, "spent");
    assert_non_null(sum);
    assert_true(summary_u64(sum, "env_steps") >= (unsigned long long)more);
    free(sum);
    /* A suite's folder: one of its runs is named, and nothing is written there. */
    char suite[700], cmd[4000];
    snprintf(suite, sizeof suite, "%s/su-suite", g_tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/seed-1 && cp %s/spent/config.ini %s/ && cp %s/spent/config.ini %s/seed-1/",
             suite, g_tmp, suite, g_tmp, suite);
    assert_int_equal(system(cmd), 0);
    char *argv6[] = {(char *)fleet_bin(), "run", "--resume", suite, NULL};
    assert_int_equal(run_capture(argv6, 60, &out), 2);
    assert_non_null(strstr(out, "is a suite folder (`fleet suite`): resume one of its runs"));
    assert_non_null(strstr(out, "/su-suite/seed-1`"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s/run.lock", suite);
    assert_int_not_equal(access(cmd, F_OK), 0);
    /* A config file and --resume together. */
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%s/configs/cartpole.ini", fleet_source_dir());
    char *argv3[] = {(char *)fleet_bin(), "run", cfg, "--resume", dir, NULL};
    assert_int_equal(run_capture(argv3, 60, &out), 2);
    assert_non_null(strstr(out, "not both"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ctrl_c_then_resume),
        cmocka_unit_test(test_launcher_killed_early),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
