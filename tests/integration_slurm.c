/* Slurm, for real: the test brings up a one-node Slurm cluster from Debian's slurm-wlm
 * and munge (tests/slurm_cluster.sh: munged, slurmctld and slurmd as root, all state in
 * a temporary folder) and submits the sbatch script of docs/multi-host.md ("Slurm"), with
 * `srun --mpi=pmix` starting the ranks:
 *  - a CartPole fleet learns: the run ends with its target reached by evaluation, exit 0;
 *  - `scancel` of a running fleet stops it cleanly: the ranks stop in order within
 *    Slurm's KillWait, the launcher writes its summary (exit 0, "interrupted"), replay
 *    holds every transition the actors saw acknowledged, and the checkpoints are there.
 * Skips, saying why, where it cannot run: not root, slurm-wlm or munge not installed
 * (scripts/setup.sh installs them), fleet built without MPI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/proc_util.h"
#include "tests/run_util.h"

static char g_tmp[256], g_cluster[300], g_conf[400], g_skip[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-slurm-XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    chmod(g_tmp, 0755);
    char mpirun[512];
    if (geteuid() != 0) {
        snprintf(g_skip, sizeof g_skip, "not root (the test starts slurmctld, slurmd and munged)");
        return 0;
    }
    if (!find_mpirun(mpirun, sizeof mpirun)) {
        snprintf(g_skip, sizeof g_skip, "fleet was built without MPI");
        return 0;
    }
    if (system("command -v munged && command -v slurmctld && command -v slurmd && command -v sbatch > /dev/null") !=
        0) {
        snprintf(g_skip, sizeof g_skip, "slurm-wlm and munge are not installed (scripts/setup.sh installs them)");
        return 0;
    }
    snprintf(g_cluster, sizeof g_cluster, "%s/cluster", g_tmp);
    snprintf(g_conf, sizeof g_conf, "%s/slurm.conf", g_cluster);
    char *out = NULL;
    int rc = shell_in(g_tmp, &out, "bash \"$S/tests/slurm_cluster.sh\" up '%s' 8", g_cluster);
    free(out);
    if (rc != 0) {
        snprintf(g_skip, sizeof g_skip, "the one-node Slurm cluster did not come up (see the output above)");
        return 0;
    }
    setenv("SLURM_CONF", g_conf, 1);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (g_cluster[0]) {
        char *out = NULL;
        shell_in(g_tmp, &out, "bash \"$S/tests/slurm_cluster.sh\" down '%s'", g_cluster);
        free(out);
    }
    rm_rf(g_tmp);
    return 0;
}

/* Writes TMP/NAME.sh, the docs' sbatch script for a CartPole fleet of 6 ranks (the
 * launcher, a replay shard, a parameter server, a learner, 2 actors) with extra --set
 * options, and submits it; returns the job id (0 on failure). */
static long submit(const char *name, const char *extra) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.sh", g_tmp, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "#!/bin/bash\n"
            "#SBATCH --job-name=fleet-%s\n"
            "#SBATCH --nodes=1\n"
            "#SBATCH --ntasks=6\n"
            "#SBATCH --output=%s/%s.out\n"
            "srun --mpi=pmix %s run %s/configs/cartpole.ini \\\n"
            "     --set run.out_dir=%s --set run.name=%s --set actor.count=2 %s\n",
            name, g_tmp, name, fleet_bin(), fleet_source_dir(), g_tmp, name, extra);
    fclose(f);
    char *out = NULL;
    int rc = shell_in(g_tmp, &out, "sbatch --parsable '%s'", path);
    long id = rc == 0 ? atol(out) : 0;
    free(out);
    return id;
}

/* 1 while the job is queued or running. */
static int job_alive(long id) {
    char *out = NULL;
    int rc = shell_in(g_tmp, &out, "squeue -h -j %ld -o %%T", id);
    int alive = rc == 0 && out[0] != '\0';
    free(out);
    return alive;
}

/* Waits up to timeout_s for the job to leave the queue; 1 when it did. */
static int wait_job(long id, double timeout_s) {
    for (int i = 0; i < (int)timeout_s; i++) {
        if (!job_alive(id)) return 1;
        sleep(1);
    }
    return 0;
}

static char *job_output(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.out", g_tmp, name);
    char *t = read_file(path);
    fprintf(stderr, "---- sbatch output of %s ----\n%s\n", name, t ? t : "(none)");
    return t;
}

static void test_sbatch_learns_cartpole(void **unused) {
    (void)unused;
    if (g_skip[0]) {
        fprintf(stderr, "SKIP: %s\n", g_skip);
        skip();
    }
    long id = submit("learn", "--set run.max_seconds=240");
    assert_true(id > 0);
    assert_true(wait_job(id, 400));
    char *out = job_output("learn");
    assert_non_null(out);
    assert_non_null(strstr(out, "0:launcher@"));
    assert_non_null(strstr(out, "target reached: evaluation return"));
    assert_no_error_lines(out);
    char *sum = summary_at(g_tmp, "learn");
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "exit_code"), 0);
    assert_true(summary_f64(sum, "eval_return_mean") >= 475.0);
    free(sum);
    free(out);
}

static void test_scancel_stops_cleanly(void **unused) {
    (void)unused;
    if (g_skip[0]) {
        fprintf(stderr, "SKIP: %s\n", g_skip);
        skip();
    }
    long id = submit("cancel", "--set run.max_seconds=600 --set run.stop_at_target=false");
    assert_true(id > 0);
    /* running: the progress rows come */
    char metrics[512];
    snprintf(metrics, sizeof metrics, "%s/cancel/metrics.csv", g_tmp);
    assert_true(wait_csv_rows(metrics, 6, 120) >= 6);
    char *o = NULL;
    assert_int_equal(shell_in(g_tmp, &o, "scancel %ld", id), 0);
    free(o);
    assert_true(wait_job(id, 90)); /* within KillWait (30 s) and the step's own grace */
    char *out = job_output("cancel");
    assert_non_null(out);
    assert_non_null(strstr(out, "fleet run: stopping the fleet (interrupted (signal 15))"));
    assert_null(strstr(out, "MPI_ABORT"));
    char *sum = summary_at(g_tmp, "cancel");
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "exit_code"), 0);
    char reason[128];
    assert_non_null(kv_get(sum, "reason", reason, sizeof reason));
    assert_string_equal(reason, "interrupted (signal 15)");
    const unsigned long long acked = summary_u64(sum, "actors_acked");
    assert_true(acked > 0);
    /* nothing acknowledged lost: the shard's last words (it stopped on its own SIGTERM, so
     * the launcher's replay figures may be those of its last progress row: replay_final) */
    const char *fin = strstr(out, "replay shard 0 final: size ");
    assert_non_null(fin);
    const char *ins = strstr(fin, "inserted ");
    assert_non_null(ins);
    assert_true(strtoull(ins + 9, NULL, 10) >= acked);
    if (summary_u64(sum, "replay_final")) assert_true(summary_u64(sum, "replay_inserted") >= acked);
    const char *files[] = {"launcher.state", "learner-0.safetensors", "shard-0.ckpt", "actor-0.state"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/cancel/checkpoints/%s", g_tmp, files[i]);
        if (access(path, R_OK) != 0) fail_msg("no checkpoint %s after scancel", path);
    }
    free(sum);
    free(out);
}

int main(void) {
    no_leak_checks_under_mpirun();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sbatch_learns_cartpole),
        cmocka_unit_test(test_scancel_stops_cleanly),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
