/* A whole fleet under Open MPI's mpirun on one machine (--oversubscribe): ranks mapped
 * to roles by the config's plan (SPMD) or by --role per app context (MPMD), service
 * addresses exchanged through MPI, two apex learners averaging gradients by the ring
 * all-reduce over MPI, two replay and two parameter-server shards. An actor that dies is
 * restarted by its rank (events.log, summary.txt's restarts); with run.max_restarts = 0
 * a role that dies is reported with its role, rank and host, and the job ends instead of
 * hanging. Services on
 * an interface's address without run.tls_dir get per-job TLS credentials. Skips
 * where fleet was built without MPI or mpirun is missing. */
#include <dirent.h>
#include <sys/stat.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/proc_util.h"
#include "tests/run_util.h"

static char g_tmp[256];
static char g_mpirun[512]; /* its path, found on PATH */
static const char *const MPIRUN[] = {g_mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np"};
#define NMPIRUN 6

static int have_mpirun(void) {
    return find_mpirun(g_mpirun, sizeof g_mpirun);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-mpi-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_tmp);
    return 0;
}

#define SKIP_WITHOUT_MPI()                                                                    \
    do {                                                                                      \
        if (!have_mpirun()) {                                                                 \
            fprintf(stderr, "SKIP: fleet built without MPI, or no mpirun on this machine\n"); \
            skip();                                                                           \
        }                                                                                     \
    } while (0)

/* The config's path, the run.out_dir override and the log path of a run NAME. */
typedef struct paths {
    char cfg[1024], out_dir[512], out[512];
} paths_t;

static void paths_for(const char *name, paths_t *p) {
    snprintf(p->cfg, sizeof p->cfg, "%s/configs/cartpole.ini", fleet_source_dir());
    snprintf(p->out_dir, sizeof p->out_dir, "run.out_dir=%s", g_tmp);
    snprintf(p->out, sizeof p->out, "%s/%s.log", g_tmp, name);
}

/* mpirun -np NP fleet run ... */
static int run_mpi(const char *np, const char *name, const char *const *sets, int nsets, double timeout_s, char **log) {
    const char *launcher[NMPIRUN + 1];
    for (int i = 0; i < NMPIRUN; i++) launcher[i] = MPIRUN[i];
    launcher[NMPIRUN] = np;
    return run_fleet_at(g_tmp, launcher, NMPIRUN + 1, name, sets, nsets, timeout_s, log);
}

static void check_fleet(const char *name, const char *log, int learners) {
    char host[128];
    gethostname(host, sizeof host);
    assert_non_null(strstr(log, "  ranks        0:launcher@"));
    assert_non_null(strstr(log, host));
    assert_non_null(strstr(log, "replay shard 1 serving"));
    assert_non_null(strstr(log, "[paramserver 1]"));
    if (learners > 1) assert_non_null(strstr(log, "training with 2 learners"));
    assert_no_error_lines(log);
    char *sum = summary_at(g_tmp, name);
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "exit_code"), 0);
    assert_int_equal(summary_u64(sum, "learners"), (unsigned long long)learners);
    assert_int_equal(summary_u64(sum, "paramserver_shards"), 2);
    assert_true(summary_u64(sum, "learner_steps") > 0);
    assert_true(summary_u64(sum, "param_version") > 1);
    unsigned long long ins[4];
    assert_int_equal(summary_list(sum, "replay_inserted_per_shard", ins, 4), 2);
    assert_true(ins[0] > 0 && ins[1] > 0);
    assert_true(summary_u64(sum, "replay_inserted") >= summary_u64(sum, "actors_acked"));
    /* The launcher rank's own evaluator process reported (every 2 s in cartpole.ini). */
    assert_non_null(strstr(log, "  evaluators   1 on the launcher's host"));
    assert_true(summary_u64(sum, "evaluations") >= 1);
    assert_children_gone(sum, 9);
    free(sum);
}

/* 9 ranks: the launcher, 2 replay, 2 parameter-server, 2 apex learners, 2 actors. */
static void test_spmd_fleet(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    const char *sets[] = {"replay.shards=2", "paramserver.shards=2", "learner.count=2",
                          "actor.count=2",   "run.max_seconds=20",   "run.stop_at_target=false"};
    char *log = NULL;
    int rc = run_mpi("9", "spmd", sets, 6, 300, &log);
    assert_non_null(log);
    assert_int_equal(rc, 0);
    check_fleet("spmd", log, 2);
    free(log);
}

/* Mode and existence of path (-1 when missing). */
static int mode_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (int)(st.st_mode & 0777) : -1;
}

/* Services on an interface's address (run.interface, here the loopback one) without
 * run.tls_dir: the launcher makes per-job credentials, every rank gets them over MPI, and
 * the fleet runs with TLS and tokens (the learner's publishes need its learner token); the
 * run folder keeps them in a private tls/, the other ranks' copies are removed. */
static void test_per_job_credentials(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    const char *sets[] = {"run.interface=lo", "run.max_learner_steps=300", "run.max_seconds=120"};
    char *log = NULL;
    int rc = run_mpi("6", "tls", sets, 3, 300, &log);
    assert_non_null(log);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(log, "  tls          per-job credentials for 6 ranks in "));
    assert_no_error_lines(log);
    char *sum = summary_at(g_tmp, "tls");
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "exit_code"), 0);
    assert_true(summary_u64(sum, "learner_steps") > 0);
    assert_true(summary_u64(sum, "actors_acked") > 0);
    assert_true(summary_u64(sum, "param_version") > 1);
    free(sum);
    char path[600];
    snprintf(path, sizeof path, "%s/tls/tls", g_tmp);
    assert_int_equal(mode_of(path), 0700);
    static const char *const files[][2] = {
        {"ca.pem", "644"}, {"fleet.pem", "644"}, {"fleet.key", "600"}, {"token", "600"}, {"learner.token", "600"}};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/tls/tls/%s", g_tmp, files[i][0]);
        assert_int_equal(mode_of(path), (int)strtol(files[i][1], NULL, 8));
    }
    /* The per-job CA's key is not kept: no one can make more certificates for the job. */
    snprintf(path, sizeof path, "%s/tls/tls/ca.key", g_tmp);
    assert_int_equal(mode_of(path), -1);
    free(log);
}

/* The same fleet with one app context per role; counts come from the ranks. */
static void test_mpmd_fleet(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    paths_t p;
    paths_for("mpmd", &p);
    static const char *const roles[][2] = {
        {"launcher", "1"}, {"replay", "2"}, {"paramserver", "2"}, {"learner", "1"}, {"actor", "2"}};
    char *argv[128];
    int n = 0;
    argv[n++] = g_mpirun;
    argv[n++] = "--allow-run-as-root";
    argv[n++] = "--oversubscribe";
    argv[n++] = "--bind-to";
    argv[n++] = "none";
    for (int r = 0; r < 5; r++) {
        if (r) argv[n++] = ":";
        argv[n++] = "-np";
        argv[n++] = (char *)roles[r][1];
        argv[n++] = (char *)fleet_bin();
        argv[n++] = "run";
        argv[n++] = p.cfg;
        argv[n++] = "--role";
        argv[n++] = (char *)roles[r][0];
        argv[n++] = "--set";
        argv[n++] = p.out_dir;
        argv[n++] = "--set";
        argv[n++] = "run.name=mpmd";
        argv[n++] = "--set";
        argv[n++] = "run.max_seconds=12";
        argv[n++] = "--set";
        argv[n++] = "run.stop_at_target=false";
    }
    argv[n] = NULL;
    int status = wait_process(start_process(argv, p.out), 300);
    char *log = read_file(p.out);
    assert_non_null(log);
    fprintf(stderr, "---- mpmd (tail) ----\n%s\n", strlen(log) > 4000 ? log + strlen(log) - 4000 : log);
    assert_true(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* the config says one replay and one paramserver shard; the ranks say two */
    assert_non_null(strstr(log, "replay       2 shards"));
    check_fleet("mpmd", log, 1);
    free(log);
}

static void test_wrong_rank_count(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    char *log = NULL;
    int rc = run_mpi("3", "wrong", NULL, 0, 120, &log);
    assert_non_null(log);
    assert_true(rc != 0);
    assert_non_null(strstr(log, "the role plan needs 6 ranks"));
    assert_non_null(strstr(log, "-np 6"));
    free(log);
}

/* --print-mpirun: the rank count of the plan, the hostfile, and the config. */
static void test_print_mpirun(void **state) {
    (void)state;
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%s/configs/cartpole.ini", fleet_source_dir());
    char *argv[] = {
        (char *)fleet_bin(), "run",        cfg,       "--set", "replay.shards=3", "--set", "learner.count=2",
        "--print-mpirun",    "--hostfile", "myhosts", NULL};
    char *out = NULL;
    assert_int_equal(run_capture(argv, 30, &out), 0);
    assert_non_null(out);
    assert_non_null(
        strstr(out, "# 9 ranks: rank 0 the launcher, 3 replay, 1 parameter-server, 2 learner (apex), 2 actor"));
    assert_non_null(strstr(out, "mpirun --hostfile myhosts --bind-to none -np 9 "));
    assert_non_null(strstr(out, " run "));
    assert_non_null(strstr(out, "configs/cartpole.ini\n"));
    free(out);
}

/* The pid of the process running `fleet actor --index 1` whose parent's command line
 * names run.name=NAME, or 0. */
static pid_t find_actor(const char *name) {
    char want[300];
    snprintf(want, sizeof want, "run.name=%s", name);
    DIR *d = opendir("/proc");
    if (!d) return 0;
    pid_t found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0) continue;
        char path[64], buf[4096];
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        /* argv: fleet actor --config F --index 1 ... */
        const char *a1 = buf + strlen(buf) + 1;
        if (a1 >= buf + len || strcmp(a1, "actor") != 0) continue;
        int index1 = 0;
        for (const char *p = a1; p < buf + len; p += strlen(p) + 1)
            if (strcmp(p, "--index") == 0 && p + strlen(p) + 1 < buf + len)
                index1 = strcmp(p + strlen(p) + 1, "1") == 0;
        if (!index1) continue;
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        f = fopen(path, "r");
        if (!f) continue;
        int ppid = 0;
        if (fscanf(f, "%*d (%*[^)]) %*c %d", &ppid) != 1) ppid = 0;
        fclose(f);
        snprintf(path, sizeof path, "/proc/%d/cmdline", ppid);
        f = fopen(path, "rb");
        if (!f) continue;
        len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < len; i++)
            if (!buf[i]) buf[i] = ' ';
        buf[len] = '\0';
        if (strstr(buf, want)) found = pid;
    }
    closedir(d);
    return found;
}

/* Starts `mpirun -np 6 fleet run cartpole.ini` as run `name` with run.max_seconds =
 * max_seconds and run.max_restarts = max_restarts, waits until it trains and SIGKILLs
 * actor 1's process; returns the job's pid, and the actor's in *actor. */
static pid_t start_and_kill_actor(const char *name, const char *max_seconds, const char *max_restarts, paths_t *p,
                                  pid_t *actor) {
    char run_name[300], secs[64], restarts[64];
    paths_for(name, p);
    snprintf(run_name, sizeof run_name, "run.name=%s", name);
    snprintf(secs, sizeof secs, "run.max_seconds=%s", max_seconds);
    snprintf(restarts, sizeof restarts, "run.max_restarts=%s", max_restarts);
    char *argv[] = {g_mpirun,
                    "--allow-run-as-root",
                    "--oversubscribe",
                    "--bind-to",
                    "none",
                    "-np",
                    "6",
                    (char *)fleet_bin(),
                    "run",
                    p->cfg,
                    "--set",
                    p->out_dir,
                    "--set",
                    run_name,
                    "--set",
                    secs,
                    "--set",
                    restarts,
                    "--set",
                    "run.stop_at_target=false",
                    NULL};
    pid_t job = start_process(argv, p->out);
    *actor = 0;
    for (int i = 0; i < 600 && !*actor; i++) {
        char *log = read_file(p->out);
        int training = log && strstr(log, "training") != NULL;
        free(log);
        if (training) *actor = find_actor(name);
        if (!*actor) usleep(100000);
    }
    assert_true(*actor > 0);
    fprintf(stderr, "killing actor 1 (pid %d)\n", (int)*actor);
    assert_int_equal(kill(*actor, SIGKILL), 0);
    return job;
}

/* kill -9 of actor 1's process: its rank restarts it (`--incarnation 1`) and tells the
 * launcher, which writes the death and the restart to events.log and counts the restart;
 * the job runs on to its time budget and ends cleanly. */
static void test_dead_actor_restarted(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    paths_t p;
    pid_t actor = 0;
    pid_t job = start_and_kill_actor("revive", "25", "10", &p, &actor);
    int status = wait_process(job, 240);
    char *log = read_file(p.out);
    assert_non_null(log);
    fprintf(stderr, "---- revive (tail) ----\n%s\n", strlen(log) > 4000 ? log + strlen(log) - 4000 : log);
    assert_true(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_null(strstr(log, "not restarted"));
    char host[128], want[300], path[700];
    gethostname(host, sizeof host);
    snprintf(path, sizeof path, "%s/revive/events.log", g_tmp);
    char *events = read_file(path);
    assert_non_null(events);
    fprintf(stderr, "---- events.log ----\n%s\n", events ? events : "");
    snprintf(want, sizeof want, "actor 1 (rank 5 on %s, pid %d) was killed by signal 9 (Killed); restarting it in",
             host, (int)actor);
    assert_non_null(strstr(events, want));
    snprintf(want, sizeof want, "restarted actor 1 (rank 5 on %s, pid ", host);
    assert_non_null(strstr(events, want));
    free(events);
    char *sum = summary_at(g_tmp, "revive");
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "exit_code"), 0);
    assert_true(summary_u64(sum, "restarts") >= 1);
    assert_true(summary_u64(sum, "restarts_actor") >= 1);
    assert_true(summary_u64(sum, "actors_acked") > 0);
    free(sum);
    free(log);
}

/* A role hung under mpirun: actor 1's process stopped (SIGSTOP) gives no sign of life;
 * the launcher reports it at half run.hang_s and at run.hang_s asks its rank to kill it
 * (TAG_KILL), which restarts it as a death; the job runs on to its time budget and ends
 * cleanly, with the hang counted (before: the job ran on without the actor, silent). */
static void test_hung_actor_restarted(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    paths_t p;
    paths_for("hung", &p);
    char *argv[] = {g_mpirun,
                    "--allow-run-as-root",
                    "--oversubscribe",
                    "--bind-to",
                    "none",
                    "-np",
                    "6",
                    (char *)fleet_bin(),
                    "run",
                    p.cfg,
                    "--set",
                    p.out_dir,
                    "--set",
                    "run.name=hung",
                    "--set",
                    "run.max_seconds=40",
                    "--set",
                    "run.hang_s=6",
                    "--set",
                    "run.stop_at_target=false",
                    NULL};
    pid_t job = start_process(argv, p.out);
    pid_t actor = 0;
    for (int i = 0; i < 600 && !actor; i++) {
        char *log = read_file(p.out);
        int training = log && strstr(log, "training") != NULL;
        free(log);
        if (training) actor = find_actor("hung");
        if (!actor) usleep(100000);
    }
    assert_true(actor > 0);
    fprintf(stderr, "stopping actor 1 (pid %d)\n", (int)actor);
    assert_int_equal(kill(actor, SIGSTOP), 0);
    int status = wait_process(job, 240);
    char *log = read_file(p.out);
    assert_non_null(log);
    fprintf(stderr, "---- hung (tail) ----\n%s\n", strlen(log) > 4000 ? log + strlen(log) - 4000 : log);
    assert_true(status != -1 && WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    char host[128], want[300], path[700];
    gethostname(host, sizeof host);
    snprintf(path, sizeof path, "%s/hung/events.log", g_tmp);
    char *events = read_file(path);
    assert_non_null(events);
    fprintf(stderr, "---- events.log ----\n%s\n", events ? events : "");
    snprintf(want, sizeof want, "actor 1 (rank 5 on %s) gave no sign of life for", host);
    assert_non_null(strstr(events, want));
    snprintf(want, sizeof want, "actor 1 (rank 5 on %s) hung: no sign of life for", host);
    assert_non_null(strstr(events, want));
    snprintf(want, sizeof want, "restarted actor 1 (rank 5 on %s, pid ", host);
    assert_non_null(strstr(events, want));
    free(events);
    char *sum = summary_at(g_tmp, "hung");
    assert_non_null(sum);
    assert_true(summary_u64(sum, "hangs") >= 1);
    assert_true(summary_u64(sum, "restarts_actor") >= 1);
    free(sum);
    free(log);
}

/* With run.max_restarts = 0, kill -9 of actor 1's process: its rank reports the end, the
 * launcher names the role, rank and host, stops the others and the job ends with an
 * error, not a hang. */
static void test_dead_role_ends_job(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    paths_t p;
    pid_t actor = 0;
    pid_t job = start_and_kill_actor("die", "120", "0", &p, &actor);
    int status = wait_process(job, 120);
    char *log = read_file(p.out);
    assert_non_null(log);
    fprintf(stderr, "---- die (tail) ----\n%s\n", strlen(log) > 4000 ? log + strlen(log) - 4000 : log);
    assert_true(status != -1);                                  /* ended, did not hang */
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 0); /* and says it failed */
    char host[128], want[256];
    gethostname(host, sizeof host);
    snprintf(want, sizeof want,
             "actor 1 (rank 5 on %s, pid %d) was killed by signal 9 (Killed); not restarted: "
             "run.max_restarts = 0",
             host, (int)actor);
    assert_non_null(strstr(log, want));
    char *sum = summary_at(g_tmp, "die");
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "exit_code"), 1);
    free(sum);
    free(log);
}

int main(void) {
    no_leak_checks_under_mpirun();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spmd_fleet),           cmocka_unit_test(test_mpmd_fleet),
        cmocka_unit_test(test_per_job_credentials),  cmocka_unit_test(test_wrong_rank_count),
        cmocka_unit_test(test_print_mpirun),         cmocka_unit_test(test_dead_role_ends_job),
        cmocka_unit_test(test_dead_actor_restarted), cmocka_unit_test(test_hung_actor_restarted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
