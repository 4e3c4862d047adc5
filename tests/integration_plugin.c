/* A custom environment end to end: fleet's header is installed into a temp prefix
 * (`cmake --install`), examples/gridgame is configured, built and tested out of tree
 * against it, and `fleet run --set env.plugin=./libgridgame.so --set env.name=gridgame`
 * trains on it from the folder that holds the plugin (a path relative to the working
 * directory, which every role the launcher starts shares). The fleet must clearly beat
 * a random policy, whose mean return this test measures itself through the same loader,
 * and the summary must show acknowledged transitions. Bad plugins must stop the launcher
 * with the loader's message in its output, and options the plugin rejects (env.args) stop
 * it with the actor's message. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/rng.h"
#include "envs/core/plugin.h"
#include "envs/core/vecenv.h"
#include "tests/proc_util.h"

static char g_tmp[256];
static char g_old_cwd[PATH_MAX];

static const char *compiler(void) {
    const char *c = getenv("FLEET_CC");
    return c && c[0] ? c : "cc";
}

/* Runs a shell command, printing its output when it fails; returns its exit status. */
static int sh(const char *cmd) {
    char log[512], full[4096];
    snprintf(log, sizeof log, "%s/sh.log", g_tmp);
    snprintf(full, sizeof full, "(%s) >%s 2>&1", cmd, log);
    int rc = system(full);
    if (rc != 0) {
        fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
        char *out = read_file(log);
        if (out) fprintf(stderr, "%s\n", out);
        free(out);
    }
    return rc;
}

/* Installs the header, builds and tests the example, copies the plugin into g_tmp. */
static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-plugin-itest-XXXXXX");
    if (!mkdtemp(g_tmp) || !getcwd(g_old_cwd, sizeof g_old_cwd)) return -1;
    const char *bin_dir = getenv("FLEET_BINARY_DIR");
    if (!bin_dir) {
        fprintf(stderr, "FLEET_BINARY_DIR is not set (CTest sets it)\n");
        return -1;
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cmake --install %s --prefix %s/prefix", bin_dir, g_tmp);
    if (sh(cmd) != 0) return -1;
    snprintf(cmd, sizeof cmd,
             "cmake -S %s/examples/gridgame -B %s/gridgame-build -DFLEET_INCLUDE_DIR=%s/prefix/include "
             "-DCMAKE_C_COMPILER=%s -DCMAKE_C_FLAGS=-Werror && cmake --build %s/gridgame-build && "
             "ctest --test-dir %s/gridgame-build --output-on-failure && cp %s/gridgame-build/libgridgame.so %s/",
             fleet_source_dir(), g_tmp, g_tmp, compiler(), g_tmp, g_tmp, g_tmp, g_tmp);
    if (sh(cmd) != 0) return -1;
    return chdir(g_tmp) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    if (chdir(g_old_cwd) != 0) return -1;
    rm_rf(g_tmp);
    return 0;
}

/* Mean return of uniformly random actions over `episodes` finished episodes. */
static double random_policy_return(const fl_env_def_t *def, int episodes) {
    enum { N = 8 };
    fl_vecenv_t *ve = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_vecenv_create(def, N, 99, 0, &ve, &err), FL_OK);
    size_t os = fl_vecenv_obs_size(ve);
    unsigned char *obs = malloc(N * os);
    assert_non_null(obs);
    fl_vecenv_reset(ve, obs);
    fl_rng_t rng;
    fl_rng_init(&rng, 123);
    int32_t act[N];
    float rew[N];
    uint8_t term[N], trunc[N];
    fl_episode_stats_t done[N];
    int finished = 0;
    double sum = 0.0;
    while (finished < episodes) {
        for (int i = 0; i < N; i++) act[i] = (int32_t)fl_rng_below(&rng, (uint64_t)def->num_actions);
        assert_int_equal(fl_vecenv_step(ve, act, obs, rew, term, trunc, NULL, done, &err), FL_OK);
        for (int i = 0; i < N; i++)
            if (term[i] || trunc[i]) {
                sum += done[i].episode_return;
                finished++;
            }
    }
    free(obs);
    fl_vecenv_destroy(ve);
    return sum / finished;
}

/* `fleet run` on the plugin with the CartPole experiment's learner settings. */
static int run_fleet(const char *name, const char *plugin, const char *env_name, const char *extra, double timeout_s,
                     char **log) {
    char cfg[1024], sets[8][512];
    snprintf(cfg, sizeof cfg, "%s/configs/cartpole.ini", fleet_source_dir());
    const char *kv[] = {"env.plugin=%s", "env.name=%s", "run.out_dir=%s", "run.name=%s"};
    const char *vals[] = {plugin, env_name, g_tmp, name};
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)fleet_bin();
    argv[n++] = "run";
    argv[n++] = cfg;
    for (int i = 0; i < 4; i++) {
        snprintf(sets[i], sizeof sets[i], kv[i], vals[i]);
        argv[n++] = "--set";
        argv[n++] = sets[i];
    }
    static char *fixed[] = {"replay.capacity=20000", "replay.min_size_to_sample=500", "run.target_return=0.55",
                            "run.max_seconds=120", "env.num_envs=4"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        argv[n++] = "--set";
        argv[n++] = fixed[i];
    }
    if (extra) {
        argv[n++] = "--set";
        argv[n++] = (char *)extra;
    }
    argv[n] = NULL;
    int rc = run_capture(argv, timeout_s, log);
    fprintf(stderr, "---- fleet run %s: exit %d, output (tail) ----\n%s\n", name, rc,
            strlen(*log) > 4000 ? *log + strlen(*log) - 4000 : *log);
    return rc;
}

static void test_learns_gridgame(void **state) {
    (void)state;
    const fl_env_def_t *def = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_env_load_plugin("./libgridgame.so", "gridgame", &def, &err), FL_OK);
    double random_return = random_policy_return(def, 4000);
    fprintf(stderr, "random policy: mean return %.3f over 4000 episodes\n", random_return);
    assert_true(random_return < 0.0);

    char *log = NULL;
    int rc = run_fleet("grid", "./libgridgame.so", "gridgame", NULL, 300, &log);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(log, "gridgame x 4")); /* the actors stepped the plugin's env */
    char path[512];
    snprintf(path, sizeof path, "%s/grid/summary.txt", g_tmp);
    char *sum = read_file(path);
    assert_non_null(sum);
    char v[256];
    assert_non_null(kv_get(sum, "eval_return_mean", v, sizeof v));
    double eret = atof(v);
    assert_non_null(kv_get(sum, "mean_return_100", v, sizeof v));
    fprintf(stderr,
            "fleet: greedy evaluation return %.3f, training return %s (last 100 episodes, with exploration; "
            "random %.3f, best possible ~0.68)\n",
            eret, v, random_return);
    assert_true(eret >= random_return + 2.5);
    /* The run stopped because the evaluator's greedy return (10 episodes) reached
     * run.target_return (0.55, near the best possible 0.68); the training episodes'
     * return, with the actors' exploration, may still be far below it then. */
    assert_non_null(kv_get(sum, "reason", v, sizeof v));
    assert_non_null(strstr(v, "target reached"));
    assert_non_null(kv_get(sum, "actors_acked", v, sizeof v));
    unsigned long long acked = strtoull(v, NULL, 10);
    assert_true(acked > 0);
    assert_non_null(kv_get(sum, "replay_inserted", v, sizeof v));
    assert_true(strtoull(v, NULL, 10) >= acked);
    assert_non_null(kv_get(sum, "learner_steps", v, sizeof v));
    assert_true(strtoull(v, NULL, 10) > 0);
    free(sum);
    free(log);
}

static void test_missing_plugin_is_reported(void **state) {
    (void)state;
    char *log = NULL;
    int rc = run_fleet("missing", "./libnothere.so", "gridgame", NULL, 120, &log);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(log, "env.plugin './libnothere.so'"));
    assert_non_null(strstr(log, "No such file"));
    free(log);
}

static void test_name_mismatch_is_reported(void **state) {
    (void)state;
    char *log = NULL;
    int rc = run_fleet("mismatch", "./libgridgame.so", "mygame", NULL, 120, &log);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(log, "provides env 'gridgame', but env.name is 'mygame'"));
    free(log);
}

/* env.args reaches the plugin's configure in every actor; a rejected value stops the run
 * at once: a configuration error (exit status 2), which a restart would not cure. */
static void test_bad_env_args_are_reported(void **state) {
    (void)state;
    char *log = NULL;
    int rc = run_fleet("badargs", "./libgridgame.so", "gridgame", "env.args=slip=5", 120, &log);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(log, "env 'gridgame' (instance 0) rejected its options"));
    assert_non_null(strstr(log, "args = \"slip=5\""));
    assert_non_null(strstr(log, "not restarted: exit status 2 is a usage or configuration error"));
    assert_null(strstr(log, "[run] restarted "));  /* no role was restarted */
    assert_null(strstr(log, "lists the options")); /* the role's hint is for commands typed by hand */
    free(log);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_learns_gridgame),
        cmocka_unit_test(test_missing_plugin_is_reported),
        cmocka_unit_test(test_name_mismatch_is_reported),
        cmocka_unit_test(test_bad_env_args_are_reported),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
