/* run.deterministic through the real binary: the CartPole fleet of configs/cartpole.ini
 * (replay shard, parameter server, learner, two actors and an evaluator, each its own
 * process on gRPC over loopback) run twice with seed 1 and once with seed 2, stopped by
 * learner.max_steps. The two seed-1 runs leave byte-identical learner checkpoints and
 * rounds.csv, and the same evaluations (every column of evals.csv but the wall-clock
 * ones); seed 2 does not.
 * Under mpirun (where fleet has MPI) a seed-1 run gives the same checkpoint again. Two
 * seed-1 runs stopped at a target return stop at the same evaluation, the first to reach
 * it. What the rounds cannot make deterministic is refused before anything starts, by
 * name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/proc_util.h"
#include "tests/run_util.h"

static char g_tmp[256], g_mpirun[512];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-det-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_tmp);
    return 0;
}

static const char *const DET_SETS[] = {"run.deterministic=true", "eval.every_unit=learner_steps",
                                       "eval.every=100",         "learner.max_steps=600",
                                       "run.checkpoint_every=0", "run.max_seconds=300"};
#define NDET (sizeof DET_SETS / sizeof DET_SETS[0])

/* Runs NAME with the deterministic settings and run.seed = seed (mpirun -np 6 when
 * mpi); it must end normally at learner.max_steps. */
static void run_det(const char *name, int seed, int mpi) {
    const char *sets[NDET + 1];
    for (size_t i = 0; i < NDET; i++) sets[i] = DET_SETS[i];
    char seed_set[64];
    snprintf(seed_set, sizeof seed_set, "run.seed=%d", seed);
    sets[NDET] = seed_set;
    const char *launcher[] = {g_mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "6"};
    char *log = NULL;
    int rc = run_fleet_at(g_tmp, launcher, mpi ? 7 : 0, name, sets, (int)NDET + 1, 400, &log);
    assert_int_equal(rc, 0);
    assert_no_error_lines(log);
    assert_non_null(strstr(log, "deterministic rounds"));
    free(log);
    char *sum = summary_at(g_tmp, name);
    assert_non_null(sum);
    char v[256];
    assert_non_null(kv_get(sum, "reason", v, sizeof v));
    assert_non_null(strstr(v, "learner.max_steps = 600"));
    free(sum);
}

/* The bytes of a file (*len), or NULL. */
static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    *len = b && n > 0 ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    return b;
}

/* 1 when run a's and run b's file `rel` (under the run folder) have the same bytes. */
static int same_file(const char *a, const char *b, const char *rel) {
    char pa[700], pb[700];
    snprintf(pa, sizeof pa, "%s/%s/%s", g_tmp, a, rel);
    snprintf(pb, sizeof pb, "%s/%s/%s", g_tmp, b, rel);
    size_t na = 0, nb = 0;
    unsigned char *x = slurp(pa, &na), *y = slurp(pb, &nb);
    if (!x || !y || na == 0) fail_msg("missing or empty: %s or %s", pa, pb);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* Run NAME's evals.csv without its wall-clock columns (time_s, seconds); *rows gets the
 * evaluations. */
static char *evals_without_clock(const char *name, int *rows) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s/evals.csv", g_tmp, name);
    char *text = read_file(path);
    assert_non_null(text);
    /* the header names the columns dropped */
    assert_true(strncmp(text, "time_s,", 7) == 0);
    assert_non_null(strstr(text, ",seconds,"));
    char *out = calloc(strlen(text) + 1, 1);
    assert_non_null(out);
    int seconds_col = -1, col = 0;
    for (const char *h = text; *h != '\n'; h++)
        if (*h == ',' && ++col && strncmp(h + 1, "seconds,", 8) == 0) seconds_col = col;
    assert_true(seconds_col > 0);
    *rows = -1;
    size_t o = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        col = 0;
        for (char *f = line;; col++) {
            char *comma = strchr(f, ',');
            size_t n = comma ? (size_t)(comma - f) : strlen(f);
            if (col != 0 && col != seconds_col) {
                memcpy(out + o, f, n);
                o += n;
                out[o++] = ',';
            }
            if (!comma) break;
            f = comma + 1;
        }
        out[o++] = '\n';
        (*rows)++;
    }
    free(text);
    return out;
}

static void test_same_seed_same_run(void **state) {
    (void)state;
    run_det("a", 1, 0);
    run_det("b", 1, 0);
    run_det("c", 2, 0);
    assert_true(same_file("a", "b", "checkpoints/learner-0.safetensors"));
    assert_true(same_file("a", "b", "checkpoints/learner-0.step-600.safetensors"));
    assert_false(same_file("a", "c", "checkpoints/learner-0.safetensors"));
    /* rounds.csv: one row per round (learner steps, loss, replay size, the actors'
     * episodes), no clock: the same file */
    assert_true(same_file("a", "b", "rounds.csv"));
    assert_false(same_file("a", "c", "rounds.csv"));
    char path[600];
    snprintf(path, sizeof path, "%s/a/rounds.csv", g_tmp);
    char *rounds = read_file(path);
    assert_non_null(rounds);
    assert_true(strncmp(rounds, "round,env_steps,learner_steps,updates,replay_size,loss,episodes,", 64) == 0);
    assert_non_null(strstr(rounds, "\n12,9600,550,50,")); /* 400 env steps x 2 actors per round, 50 updates */
    free(rounds);
    int ra = 0, rb = 0, rc = 0;
    char *ea = evals_without_clock("a", &ra), *eb = evals_without_clock("b", &rb), *ec = evals_without_clock("c", &rc);
    assert_true(ra >= 3); /* version 1, then every 2 rounds of 50 updates */
    assert_int_equal(ra, rb);
    assert_string_equal(ea, eb);
    assert_true(strcmp(ea, ec) != 0);
    free(ea);
    free(eb);
    free(ec);
    /* a deterministic run is not resumed (its rounds lived in its processes) */
    char dir[400], *out = NULL;
    snprintf(dir, sizeof dir, "%s/a", g_tmp);
    char *argv[] = {(char *)fleet_bin(), "run", "--resume", dir, NULL};
    assert_int_equal(run_capture(argv, 60, &out), 2);
    assert_non_null(strstr(out, "a deterministic run (run.deterministic = true) cannot be resumed"));
    free(out);
    if (!find_mpirun(g_mpirun, sizeof g_mpirun)) {
        print_message("SKIP the mpirun run: this build has no MPI or there is no mpirun\n");
        return;
    }
    run_det("m", 1, 1);
    assert_true(same_file("a", "m", "checkpoints/learner-0.safetensors"));
    assert_true(same_file("a", "m", "rounds.csv"));
    int rm = 0;
    char *em = evals_without_clock("m", &rm);
    ea = evals_without_clock("a", &ra);
    assert_string_equal(ea, em);
    free(ea);
    free(em);
}

/* The parameter version of the first row of run NAME's evals.csv whose mean return is
 * at least target (0: none). */
static unsigned long long first_version_at(const char *name, double target) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s/evals.csv", g_tmp, name);
    char *text = read_file(path);
    assert_non_null(text);
    unsigned long long found = 0;
    for (char *line = strtok(text, "\n"); line && !found; line = strtok(NULL, "\n")) {
        double t, env, learner, episodes, eps, ret;
        unsigned long long version;
        if (sscanf(line, "%lf,%lf,%lf,%llu,%lf,%lf,%lf", &t, &env, &learner, &version, &episodes, &eps, &ret) == 7 &&
            ret >= target)
            found = version;
    }
    free(text);
    return found;
}

/* Stopped at the target: the same evaluation stops both seed-1 runs, and it is the first
 * that reached the target (several evaluations may come in one progress period). */
static void test_target_stop(void **state) {
    (void)state;
    const char *sets[] = {"run.deterministic=true", "eval.every_unit=learner_steps", "eval.every=50",
                          "run.max_seconds=300", "run.target_return=300"};
    char *reason[2];
    const char *names[2] = {"t1", "t2"};
    for (int i = 0; i < 2; i++) {
        char *log = NULL;
        assert_int_equal(run_fleet_at(g_tmp, NULL, 0, names[i], sets, 5, 400, &log), 0);
        free(log);
        char *sum = summary_at(g_tmp, names[i]);
        assert_non_null(sum);
        char v[512];
        assert_non_null(kv_get(sum, "reason", v, sizeof v));
        reason[i] = strdup(v);
        free(sum);
        char want[64];
        snprintf(want, sizeof want, "parameter version %llu)", first_version_at(names[i], 300));
        if (!strstr(v, "target reached") || !strstr(v, want))
            fail_msg("%s: reason \"%s\", expected the first evaluation at the target (%s)", names[i], v, want);
    }
    assert_string_equal(reason[0], reason[1]);
    free(reason[0]);
    free(reason[1]);
}

/* What the rounds cannot make deterministic is refused by a dry run, naming it. */
static void test_refusals(void **state) {
    (void)state;
    static const char *const cases[][3] = {
        {"replay.shards=2", "eval.every_unit=learner_steps", "run.deterministic needs replay.shards = 1"},
        {"learner.count=2", "eval.every_unit=learner_steps", "run.deterministic needs one apex learner"},
        {"learner.device=cuda", "eval.every_unit=learner_steps", "run.deterministic needs learner.device = cpu"},
        {"replay.samples_per_insert=0", "eval.every_unit=learner_steps", "needs replay.samples_per_insert > 0"},
        {"eval.every_unit=seconds", "run.evaluators=1", "needs eval.every_unit = learner_steps"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[] = {(char *)fleet_bin(), "run",   "--dry-run",         "--set", "run.deterministic=true", "--set",
                        (char *)cases[i][0], "--set", (char *)cases[i][1], NULL};
        char *out = NULL;
        int rc = run_capture(argv, 60, &out);
        if (rc != 2 || !strstr(out, cases[i][2]))
            fail_msg("%s: exit %d, expected 2 and \"%s\" in:\n%s", cases[i][0], rc, cases[i][2], out);
        free(out);
    }
}

int main(void) {
    no_leak_checks_under_mpirun();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_same_seed_same_run),
        cmocka_unit_test(test_target_stop),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
