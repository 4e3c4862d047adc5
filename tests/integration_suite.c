/* `fleet suite` through the real binary: configs/cartpole.ini over seeds 1 and 2, two at
 * a time, each run cut at 4 s (budget) with an evaluation every 0.5 s:
 *   - exit 0; the suite folder holds config.ini, seed-1/ and seed-2/ (each a whole run
 *     folder with its summary.txt and evals.csv, its run.seed the seed) and seed-S.log;
 *   - results.csv has a row per seed whose outcome, env steps and final return are the
 *     run's own summary.txt's (outcome budget, or target where a seed solved it);
 *   - summary.md has the table, the mean +- 95% CI line and the target line, and its mean
 *     final return is the mean of the two runs';
 *   - curves.png is a PNG when gnuplot is installed, titled with the experiment's name,
 *     each seed's curve and their mean over its 95% band (curves.csv);
 *   - a second suite of the same name gets <name>-suite-2 and leaves the first alone;
 *   - errors: bad --seeds (a reversed range, a repeat, a word), --parallel 0 and a
 *     missing config file exit 2 and name what was wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "tests/proc_util.h"
#include "tests/run_util.h"

static char g_tmp[256];

/* A shell command line in g_tmp (tests/proc_util.h, shell_in). */
#define shell(out, ...) shell_in(g_tmp, out, __VA_ARGS__)

static char *file_at(const char *fmt, const char *a) {
    char path[1024];
    snprintf(path, sizeof path, fmt, g_tmp, a);
    return read_file(path);
}

/* The value of key= in a summary.txt text. */
static double summary_num(const char *sum, const char *key) {
    char pat[80];
    snprintf(pat, sizeof pat, "\n%s=", key);
    const char *p = strstr(sum, pat);
    if (!p) fail_msg("no %s in summary.txt", key);
    return strtod(p + strlen(pat), NULL);
}

#define SUITE_SETS                                                                                       \
    "--set run.out_dir=out --set run.max_seconds=4 --set run.stop_at_target=false --set eval.every=0.5 " \
    "--set run.checkpoints=false"

static void test_two_seeds(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(shell(&out, "$F suite $S/configs/cartpole.ini --seeds 1,2 --parallel 2 " SUITE_SETS), 0);
    assert_non_null(strstr(out, "seed 1 started"));
    assert_non_null(strstr(out, "seed 2 started"));
    assert_non_null(strstr(out, "out/cartpole-suite/summary.md"));
    free(out);

    char *cfg = file_at("%s/out/cartpole-suite/%s", "config.ini");
    assert_non_null(cfg);
    assert_non_null(strstr(cfg, "max_seconds = 4"));
    free(cfg);
    char *results = file_at("%s/out/cartpole-suite/%s", "results.csv");
    assert_non_null(results);
    assert_non_null(strstr(results, "seed,outcome,exit_code,"));
    double finals[2];
    for (int s = 1; s <= 2; s++) {
        char name[64];
        snprintf(name, sizeof name, "seed-%d/summary.txt", s);
        char *sum = file_at("%s/out/cartpole-suite/%s", name);
        assert_non_null(sum);
        snprintf(name, sizeof name, "seed-%d/config.ini", s);
        char *rc = file_at("%s/out/cartpole-suite/%s", name);
        assert_non_null(rc);
        char want[64];
        snprintf(want, sizeof want, "seed = %d\n", s);
        assert_non_null(strstr(rc, want));
        free(rc);
        snprintf(name, sizeof name, "seed-%d.log", s);
        char *log = file_at("%s/out/cartpole-suite/%s", name);
        assert_non_null(log);
        assert_non_null(strstr(log, "fleet run:"));
        free(log);
        /* its row: seed,outcome,exit_code,wall_s,elapsed_s,env_steps,learner_steps,evaluations,final_return,... */
        char key[16];
        snprintf(key, sizeof key, "\n%d,", s);
        const char *row = strstr(results, key);
        assert_non_null(row);
        row += strlen(key);
        const int solved = strstr(sum, "reason=target reached") != NULL;
        assert_int_equal(strncmp(row, solved ? "target," : "budget,", 7), 0);
        double f[8];
        const char *p = strchr(row, ',') + 1;
        for (int k = 0; k < 7; k++) {
            f[k] = strtod(p, NULL);
            p = strchr(p, ',') + 1;
        }
        assert_true(f[0] == 0);                                          /* exit_code */
        assert_true(fabs(f[3] - summary_num(sum, "env_steps")) < 0.5);   /* env_steps */
        assert_true(fabs(f[5] - summary_num(sum, "evaluations")) < 0.5); /* evaluations */
        assert_true(summary_num(sum, "evaluations") >= 1);
        assert_true(fabs(f[6] - summary_num(sum, "eval_return_mean")) < 0.01); /* final_return */
        finals[s - 1] = f[6];
        free(sum);
    }
    free(results);

    char *md = file_at("%s/out/cartpole-suite/%s", "summary.md");
    assert_non_null(md);
    assert_non_null(strstr(md, "over 2 seeds"));
    assert_non_null(strstr(md, "| seed | outcome |"));
    const char *mean = strstr(md, "final return **");
    assert_non_null(mean);
    assert_true(fabs(strtod(mean + strlen("final return **"), NULL) - (finals[0] + finals[1]) / 2) < 0.01);
    assert_non_null(strstr(md, "(mean +- 95% CI)"));
    assert_non_null(strstr(md, "Reached the target:"));
    free(md);

    /* fleet plot on the suite's folder points to its picture and to one seed's */
    assert_int_equal(shell(&out, "$F plot out/cartpole-suite"), 1);
    assert_non_null(strstr(out,
                           "is a suite folder (`fleet suite`): its picture of every seed is "
                           "out/cartpole-suite/curves.png"));
    assert_non_null(strstr(out, "`fleet plot out/cartpole-suite/seed-S`"));
    free(out);

    if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
        char *png = file_at("%s/out/cartpole-suite/%s", "curves.png");
        assert_non_null(png);
        assert_int_equal(memcmp(png, "\x89PNG", 4), 0);
        free(png);
        /* titled with the experiment's name; both seeds, their mean and its band */
        char *gp = file_at("%s/out/cartpole-suite/%s", "curves.gp");
        assert_non_null(gp);
        assert_non_null(strstr(gp, "set title 'cartpole'"));
        assert_non_null(strstr(gp, "'seed-1/evals.csv'"));
        assert_non_null(strstr(gp, "'seed-2/evals.csv'"));
        assert_non_null(strstr(gp, "title 'mean of 2 seeds'"));
        assert_non_null(strstr(gp, "95% CI of the mean"));
        free(gp);
        char *band = file_at("%s/out/cartpole-suite/%s", "curves.csv");
        assert_non_null(band);
        assert_true(strncmp(band, "env_steps,mean,ci95,low,high,seeds\n", 35) == 0);
        assert_non_null(strstr(band, ",2\n")); /* points where both seeds count */
        free(band);
    }

    /* The same name again: a new folder, the first untouched. */
    assert_int_equal(shell(&out, "$F suite $S/configs/cartpole.ini --seeds 3 " SUITE_SETS " --set run.max_seconds=2"),
                     0);
    assert_non_null(strstr(out, "out/cartpole-suite-2/"));
    free(out);
    char *second = file_at("%s/out/cartpole-suite-2/%s", "seed-3/summary.txt");
    assert_non_null(second);
    free(second);
    char *first = file_at("%s/out/cartpole-suite/%s", "results.csv");
    assert_null(strstr(first, "\n3,"));
    free(first);
}

static void test_errors(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(shell(&out, "$F suite $S/configs/cartpole.ini --seeds 3-1"), 2);
    assert_non_null(strstr(out, "--seeds '3-1': expected seeds and ranges"));
    free(out);
    assert_int_equal(shell(&out, "$F suite $S/configs/cartpole.ini --seeds 1,2,1"), 2);
    assert_non_null(strstr(out, "seed 1 twice"));
    free(out);
    assert_int_equal(shell(&out, "$F suite $S/configs/cartpole.ini --seeds one"), 2);
    assert_non_null(strstr(out, "--seeds 'one'"));
    free(out);
    assert_int_equal(shell(&out, "$F suite $S/configs/cartpole.ini --parallel 0"), 2);
    assert_non_null(strstr(out, "--parallel 0: expected 1..64"));
    free(out);
    assert_int_equal(shell(&out, "$F suite nowhere.ini"), 2);
    assert_non_null(strstr(out, "nowhere.ini"));
    free(out);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-suite-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_two_seeds),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
