/* A whole fleet of separate processes talking gRPC over loopback, through `fleet run`:
 * it learns CartPole with no config file, from the defaults (stopped by the evaluator's greedy return, which
 * metrics.csv, evals.csv and summary.txt record, with each actor's own training return in returns.csv, and each role's
 * log in logs/), the replay holds every acknowledged insert, step budgets end a run normally, a run folder is never
 * overwritten, Ctrl-C leaves no child behind, and a child that dies is reported with its role and status. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "tests/nobody_util.h"
#include "tests/proc_util.h"
#include "tests/run_util.h"
#include "common/methods.h"
#include "common/rpc.h"
#include "replay/client.h"
#include "replay/writer.h"
#include "envs/atari/atari.h"
#include "envs/registry.h"

static char g_tmp[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-itest-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_tmp);
    return 0;
}

/* argv of `fleet run [CONFIG] --set run.out_dir=<tmp> --set run.name=NAME [--set EXTRA...]`;
 * config NULL: no file (the defaults). */
static void fleet_argv_config(char **argv, char sets[][512], const char *config, const char *name, const char *extra1,
                              const char *extra2) {
    int n = 0, s = 0;
    argv[n++] = (char *)fleet_bin();
    argv[n++] = "run";
    if (config) argv[n++] = (char *)config;
    snprintf(sets[s], 512, "run.out_dir=%s", g_tmp);
    argv[n++] = "--set";
    argv[n++] = sets[s++];
    snprintf(sets[s], 512, "run.name=%s", name);
    argv[n++] = "--set";
    argv[n++] = sets[s++];
    if (extra1) {
        argv[n++] = "--set";
        argv[n++] = (char *)extra1;
    }
    if (extra2) {
        argv[n++] = "--set";
        argv[n++] = (char *)extra2;
    }
    argv[n] = NULL;
}

/* The same with configs/cartpole.ini. */
static void fleet_argv(char **argv, char sets[][512], const char *name, const char *extra1, const char *extra2) {
    static char cfg[1024];
    snprintf(cfg, sizeof cfg, "%s/configs/cartpole.ini", fleet_source_dir());
    fleet_argv_config(argv, sets, cfg, name, extra1, extra2);
}

static char *summary_of(const char *name) {
    return summary_at(g_tmp, name);
}

static void test_learns_cartpole(void **state) {
    (void)state;
    char *argv[16];
    char sets[4][512];
    /* No config file: the defaults are the default experiment, which learns. Stop at an
     * evaluation return of 200 (a random policy gets ~22); bounded in time. */
    fleet_argv_config(argv, sets, NULL, "learn", "run.target_return=200", "run.max_seconds=400");
    char out[512];
    snprintf(out, sizeof out, "%s/learn.log", g_tmp);
    pid_t pid = start_process(argv, out);
    int status = wait_process(pid, 480);
    char *log = read_file(out);
    if (log)
        fprintf(stderr, "---- fleet run output (tail) ----\n%s\n", strlen(log) > 6000 ? log + strlen(log) - 6000 : log);
    assert_true(status != -1);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    char *sum = summary_of("learn");
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "reports_refused"), 0); /* every role's reports were taken */
    char v[256];
    /* The stop came from the evaluator's greedy return, the headline everywhere. */
    assert_non_null(kv_get(sum, "reason", v, sizeof v));
    assert_non_null(strstr(v, "evaluation return"));
    /* the evaluation that stopped it (a later one may have come in before the stop) */
    assert_true(atof(strstr(v, "evaluation return") + strlen("evaluation return")) >= 200.0);
    assert_non_null(kv_get(sum, "eval_return_mean", v, sizeof v));
    assert_non_null(kv_get(sum, "evaluations", v, sizeof v));
    assert_true(atoi(v) >= 1);
    assert_non_null(log);
    assert_non_null(strstr(log, "] eval "));           /* the progress line leads with it */
    assert_non_null(strstr(log, "evaluation return")); /* and the last line names it */
    assert_non_null(kv_get(sum, "actors_acked", v, sizeof v));
    unsigned long long acked = strtoull(v, NULL, 10);
    assert_non_null(kv_get(sum, "replay_inserted", v, sizeof v));
    unsigned long long inserted = strtoull(v, NULL, 10);
    assert_true(acked > 0);
    assert_true(inserted >= acked); /* every acknowledged insert is in the table */
    assert_non_null(kv_get(sum, "learner_steps", v, sizeof v));
    assert_true(strtoull(v, NULL, 10) > 0);
    /* An Ape-X run: none of Gorila's push lines, in summary.txt or on the progress line */
    static const char *const gorila_only[] = {"pushes_applied",     "pushes_dropped", "push_waits",
                                              "push_wait_timeouts", "push_bytes",     "staleness_hist"};
    for (size_t k = 0; k < sizeof gorila_only / sizeof gorila_only[0]; k++) {
        if (kv_get(sum, gorila_only[k], v, sizeof v)) fail_msg("apex summary.txt has %s=%s", gorila_only[k], v);
    }
    assert_non_null(kv_get(sum, "learner_mode", v, sizeof v));
    assert_string_equal(v, "apex");
    assert_null(strstr(log, "| push "));
    /* the progress line: the env steps and learner steps so far beside their rates, e.g.
     * "| env 412K 31.2K/s | upd 12.3K 950.0/s loss" */
    char total[32] = "", rate[32] = "";
    const char *line = log; /* the first with learner steps */
    while ((line = strstr(line, " | upd ")) && sscanf(line, " | upd %31s %31s", total, rate) == 2 &&
           strcmp(total, "0") == 0)
        line++;
    assert_non_null(line);
    assert_true(strlen(rate) > 2 && strcmp(rate + strlen(rate) - 2, "/s") == 0);
    assert_true(total[0] >= '1' && total[0] <= '9');
    const char *env = strstr(log, "| env ");
    assert_non_null(env);
    assert_int_equal(sscanf(env, "| env %31s %31s", total, rate), 2);
    assert_true(strlen(rate) > 2 && strcmp(rate + strlen(rate) - 2, "/s") == 0);
    /* Every process told its memory (roles.csv's and metrics.csv's memory columns, the
     * peaks in summary.txt). An actor is light: it loads no GPU library, and CartPole's
     * is within 60 MB resident, 30 MB of them private (a sanitizer's shadow memory aside). */
    static const char *const kinds[] = {"actor", "learner", "evaluator", "replay", "paramserver", "launcher"};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char key[64];
        snprintf(key, sizeof key, "memory_%s_rss_mb", kinds[k]);
        const double rss = summary_f64(sum, key);
        snprintf(key, sizeof key, "memory_%s_private_mb", kinds[k]);
        const double priv = summary_f64(sum, key);
        fprintf(stderr, "%s: %.1f MB resident, %.1f MB private\n", kinds[k], rss, priv);
        assert_true(rss > 1.0);
        assert_true(priv > 0.0 && priv <= rss);
#ifndef __SANITIZE_ADDRESS__
        if (strcmp(kinds[k], "actor") == 0) {
            assert_true(rss <= 60.0);
            assert_true(priv <= 30.0);
        }
#endif
    }
    assert_true(summary_f64(sum, "memory_rss_mb") > 6.0);
    /* and its CPU time: the learner trained, the actors stepped */
    assert_true(summary_f64(sum, "cpu_learner_s") > 0.1);
    assert_true(summary_f64(sum, "cpu_actor_s") > 0.1);
    /* run folder: effective config and metrics */
    char path[512];
    snprintf(path, sizeof path, "%s/learn/config.ini", g_tmp);
    char *cfg = read_file(path);
    assert_non_null(cfg);
    assert_non_null(strstr(cfg, "target_return = 200"));
    snprintf(path, sizeof path, "%s/learn/metrics.csv", g_tmp);
    char *csv = read_file(path);
    assert_non_null(csv);
    assert_non_null(strstr(csv, "mean_return_100"));
    assert_non_null(strstr(csv, "eval_return_mean"));
    assert_non_null(strstr(csv, ",memory_rss_mb,memory_private_mb,fetches_per_s\n"));
    char *roles_csv = run_file_at(g_tmp, "learn", "roles.csv");
    assert_non_null(roles_csv);
    assert_non_null(strstr(roles_csv, ",return_mean,rss_mb,private_mb,transitions_acked,cpu_s\n"));
    assert_non_null(strstr(roles_csv, ",replay,0,,,,,,,,,,,,"));
    assert_non_null(strstr(roles_csv, ",paramserver,0,,,,,,,,,,,,"));
    free(roles_csv);
    /* evals.csv: one row per evaluation, the last one at the target */
    snprintf(path, sizeof path, "%s/learn/evals.csv", g_tmp);
    char *evals = read_file(path);
    assert_non_null(evals);
    assert_true(strncmp(evals, "time_s,env_steps,learner_steps,param_version,episodes,epsilon,return_mean", 72) == 0);
    assert_non_null(strstr(evals, ",truncated,frames\n"));  /* env steps x 1 (CartPole has no frame skip) */
    assert_non_null(strchr(strchr(evals, '\n') + 1, '\n')); /* at least one row */
    /* returns.csv: each actor's training return with its own epsilon (0.4 and 0.4^8) */
    snprintf(path, sizeof path, "%s/learn/returns.csv", g_tmp);
    char *rets = read_file(path);
    assert_non_null(rets);
    assert_non_null(strstr(rets, ",0,0.4,"));
    assert_non_null(strstr(rets, ",1,0.00065536,"));
    /* Each role logs to logs/<role>-<index>.log; only warnings and errors reach the terminal. */
    const char *roles[] = {"replay-0", "paramserver-0", "learner-0", "actor-0", "actor-1", "evaluator-0"};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        snprintf(path, sizeof path, "%s/learn/logs/%s.log", g_tmp, roles[i]);
        char *rl = read_file(path);
        if (!rl) fail_msg("no log %s", path);
        assert_non_null(strstr(rl, " I ["));
        free(rl);
    }
    assert_null(strstr(log, " I [actor 0]"));
    /* TensorBoard's event file, and curve.png where gnuplot is installed. */
    snprintf(path, sizeof path, "%s/learn", g_tmp);
    DIR *d = opendir(path);
    assert_non_null(d);
    int events = 0;
    for (struct dirent *e; (e = readdir(d));) events += strncmp(e->d_name, "events.out.tfevents.", 20) == 0;
    closedir(d);
    assert_int_equal(events, 1);
    snprintf(path, sizeof path, "%s/learn/curve.png", g_tmp);
    if (system("command -v gnuplot >/dev/null 2>&1") == 0) assert_int_equal(access(path, F_OK), 0);
    free(rets);
    free(evals);
    assert_children_gone(sum, 5); /* replay, paramserver, learner, evaluator, >= 1 actor */
    free(csv);
    free(cfg);
    free(sum);
    free(log);
}

/* run.max_env_steps and run.max_learner_steps (and the roles' own actor.max_steps) end a
 * run as a normal stop: exit 0, the budget named in summary.txt, and the counters at or
 * past it. */
static void budget_run(const char *name, const char *budget, const char *reason, const char *counter,
                       unsigned long long at_least) {
    char *argv[20];
    char sets[4][512];
    fleet_argv(argv, sets, name, budget, "run.stop_at_target=false");
    char out[512];
    snprintf(out, sizeof out, "%s/%s.log", g_tmp, name);
    pid_t pid = start_process(argv, out);
    int status = wait_process(pid, 300);
    char *log = read_file(out);
    if (log)
        fprintf(stderr, "---- fleet run output (tail) ----\n%s\n", strlen(log) > 3000 ? log + strlen(log) - 3000 : log);
    assert_true(status != -1);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_non_null(log);
    if (strncmp(budget, "run.", 4) == 0) assert_non_null(strstr(log, "100%")); /* the progress line's budget column */
    char *sum = summary_of(name);
    assert_non_null(sum);
    char v[256];
    assert_non_null(kv_get(sum, "reason", v, sizeof v));
    assert_non_null(strstr(v, reason));
    assert_non_null(kv_get(sum, "exit_code", v, sizeof v));
    assert_int_equal(atoi(v), 0);
    assert_non_null(kv_get(sum, counter, v, sizeof v));
    assert_true(strtoull(v, NULL, 10) >= at_least);
    assert_children_gone(sum, 4);
    free(sum);
    free(log);
}

static void test_budgets_are_normal_stops(void **state) {
    (void)state;
    budget_run("envbudget", "run.max_env_steps=20000", "env-step budget", "env_steps", 20000);
    budget_run("learnerbudget", "run.max_learner_steps=300", "learner-step budget", "learner_steps", 300);
    /* A role's own budget ends the run normally too. */
    budget_run("actorbudget", "actor.max_steps=3000", "every actor took actor.max_steps", "env_steps", 6000);
}

/* A second run with the same name gets its own folder, NAME-2, and its config.ini says so;
 * the first run's files stay as they were. */
static void test_run_folder_is_never_overwritten(void **state) {
    (void)state;
    char path[512];
    for (int i = 0; i < 2; i++) {
        char *argv[20];
        char sets[4][512];
        fleet_argv(argv, sets, "twice", "run.max_env_steps=5000", "run.stop_at_target=false");
        char out[512];
        snprintf(out, sizeof out, "%s/twice-%d.log", g_tmp, i);
        int status = wait_process(start_process(argv, out), 300);
        assert_true(status != -1 && WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        if (i == 0) {
            snprintf(path, sizeof path, "%s/twice/summary.txt", g_tmp);
            assert_int_equal(access(path, F_OK), 0);
        }
    }
    char *first = summary_of("twice"), *second = summary_of("twice-2");
    assert_non_null(first);
    assert_non_null(second);
    snprintf(path, sizeof path, "%s/twice-2/config.ini", g_tmp);
    char *cfg = read_file(path);
    assert_non_null(cfg);
    assert_non_null(strstr(cfg, "name = \"twice-2\""));
    snprintf(path, sizeof path, "%s/twice/config.ini", g_tmp);
    char *cfg1 = read_file(path);
    assert_non_null(cfg1);
    assert_non_null(strstr(cfg1, "name = \"twice\""));
    free(cfg1);
    free(cfg);
    free(second);
    free(first);
}

/* connect(2) to the unix socket at path (as the user nobody: as_nobody): its errno, 0
 * when it connected. */
static int unix_connect_errno(void *arg) {
    const char *path = arg;
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0) return -1;
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%.107s", path);
    return connect(s, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : errno;
}

/* While a one-machine fleet with run.local_sockets runs, its services and Control listen
 * on unix sockets in <run>/sock/ (mode 0700), which another user cannot connect to
 * (EACCES); nothing serves on TCP. */
static void check_private_sockets(const char *name) {
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/%s/sock", g_tmp, name);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(st.st_uid, geteuid());
    static const char *const socks[] = {"replay-0.sock", "paramserver-0.sock", "control.sock"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, socks[i]);
        assert_int_equal(stat(path, &st), 0);
        assert_true(S_ISSOCK(st.st_mode));
        int err = as_nobody(unix_connect_errno, path, -1);
        if (err == -1) {
            fprintf(stderr, "(not root: the connection as another user is not tried)\n");
            continue;
        }
        fprintf(stderr, "%s: another user's connect: %s\n", socks[i], strerror(err));
        assert_int_equal(err, EACCES);
    }
    char logs[600];
    snprintf(logs, sizeof logs, "%s/%s/logs", g_tmp, name);
    char *text = NULL;
    append_dir_files(logs, &text);
    assert_non_null(text);
    assert_non_null(strstr(text, "replay shard 0 serving on unix:"));
    assert_non_null(strstr(text, "serving on unix:"));
    assert_null(strstr(text, "serving on 127.0.0.1"));
    free(text);
}

static void test_sigint_stops_everything(void **state) {
    (void)state;
    char *argv[16];
    char sets[4][512];
    fleet_argv(argv, sets, "sigint", "run.max_seconds=600", "run.stop_at_target=false");
    int n = 0;
    while (argv[n]) n++;
    argv[n++] = "--set";
    argv[n++] = "run.local_sockets=true"; /* checked below: sockets no other user can reach */
    argv[n] = NULL;
    char out[512], csv[512];
    snprintf(out, sizeof out, "%s/sigint.log", g_tmp);
    snprintf(csv, sizeof csv, "%s/sigint/metrics.csv", g_tmp);
    pid_t pid = start_process(argv, out);
    /* wait until the fleet is running: a few progress rows */
    for (int i = 0; i < 600; i++) {
        char *t = read_file(csv);
        int rows = 0;
        for (char *p = t; p && *p; p++) rows += *p == '\n';
        free(t);
        if (rows >= 4) break;
        usleep(100000);
    }
    check_private_sockets("sigint");
    assert_int_equal(kill(pid, SIGINT), 0);
    int status = wait_process(pid, 60);
    assert_true(status != -1);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    char *sum = summary_of("sigint");
    assert_non_null(sum);
    char v[256];
    assert_non_null(kv_get(sum, "reason", v, sizeof v));
    assert_non_null(strstr(v, "interrupted"));
    assert_children_gone(sum, 4); /* replay, paramserver, learner, >= 1 actor */
    assert_non_null(kv_get(sum, "actors_acked", v, sizeof v));
    unsigned long long acked = strtoull(v, NULL, 10);
    assert_non_null(kv_get(sum, "replay_inserted", v, sizeof v));
    assert_true(strtoull(v, NULL, 10) >= acked);
    free(sum);
}

/* Finds a child of `parent` whose command line contains `word`. */
static pid_t find_child(pid_t parent, const char *word) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    pid_t found = 0;
    while (d && (e = readdir(d)) && !found) {
        pid_t p = (pid_t)atoi(e->d_name);
        if (p <= 0) continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        int ppid = 0;
        if (fscanf(f, "%*d %*s %*c %d", &ppid) != 1) ppid = 0;
        fclose(f);
        if (ppid != parent) continue;
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)p);
        f = fopen(path, "r");
        if (!f) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < n; i++)
            if (!buf[i]) buf[i] = ' ';
        buf[n] = '\0';
        if (strstr(buf, word)) found = p;
    }
    if (d) closedir(d);
    return found;
}

/* A process's niceness (/proc/PID/stat, field 19), or -100 when it cannot be read. */
static int nice_of(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -100;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    int nice = -100;
    if (p && sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %d", &nice) != 1)
        nice = -100;
    return nice;
}

/* The output (file out) of the fleet at pid, once a role's death has stopped it (exit 1). */
static char *stopped_run_output(pid_t pid, const char *out) {
    int status = wait_process(pid, 60);
    assert_true(status != -1);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
    char *log = read_file(out);
    assert_non_null(log);
    return log;
}

/* The Info call of the replay shard at addr with the process's access token set to token
 * (NULL: none): its status, with the message in msg. */
static fl_status replay_info_with(const char *addr, const char *token, char *msg, size_t len) {
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_set_access_token(token, &err), FL_OK);
    fl_rpc_channel_t *ch = NULL;
    assert_int_equal(fl_rpc_channel_create(addr, 0, &ch, &err), FL_OK);
    fl_rpc_buf_t resp = {0};
    fl_status st =
        fl_rpc_unary(ch, fl_method_path(FL_METHOD_REPLAY_INFO), "", 0, 10000, FL_RPC_WAIT_FOR_READY, &resp, &err);
    snprintf(msg, len, "%s", err.msg);
    fl_rpc_buf_free(&resp);
    fl_rpc_channel_destroy(ch);
    assert_int_equal(fl_rpc_set_access_token(NULL, &err), FL_OK);
    return st;
}

/* A TCP connection to 127.0.0.1:*port (as the user nobody: as_nobody), 2 s for the
 * service to see it, then 1 when the service has closed it (EOF or reset), 0 when it is
 * still open, -1 when it could not connect. */
static int tcp_closed(void *arg) {
    const int port = *(const int *)arg;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) return -1;
    sleep(2);
    char buf[4096];
    ssize_t k;
    while ((k = recv(s, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
    }
    return k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

/* A peer with the run's access token inserting CartPole rows at the old default maxima
 * (reward and priority 1e6, which sent the loss from 0.2 to ~1,000): the shard refuses
 * them, as the bounds now come from CartPole's reward of 1 a step (3-step reward <=
 * 2.9701). */
static void check_poison_refused(const char *addr, const char *token) {
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_set_access_token(token, &err), FL_OK);
    fl_replay_client_t *cl = NULL;
    assert_int_equal(fl_replay_client_create(addr, &cl, &err), FL_OK);
    const fl_obs_spec_t spec = {FL_DTYPE_FLOAT32, 1, {4}};
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(cl, 424242, &spec, 1, &w, &err), FL_OK);
    fl_replay_writer_set_limits(w, 1e7, 1e7); /* what a hostile peer's own writer would check */
    enum { N = 64 };
    float obs[N * 4] = {0}, rewards[N], discounts[N], prio[N];
    int32_t actions[N] = {0};
    for (int i = 0; i < N; i++) {
        rewards[i] = 1e6f;
        discounts[i] = 0.97f;
        prio[i] = 1e6f;
    }
    fl_status st = fl_replay_writer_append(w, N, obs, actions, rewards, discounts, obs, prio, &err);
    if (st == FL_OK) st = fl_replay_writer_flush(w, 20000, &err);
    fprintf(stderr, "rows at reward 1e6: %s\n", err.msg);
    assert_int_equal(st, FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "|r| <= 2.97"));
    assert_non_null(strstr(err.msg, "replay.max_abs_reward"));
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(cl);
    assert_int_equal(fl_rpc_set_access_token(NULL, &err), FL_OK);
}

/* While a default fleet (loopback TCP) runs, its services take calls only with the run's
 * access token: a local process without it, or with another token, is refused
 * UNAUTHENTICATED with a message that says so and is logged by the service; the token
 * in <run>/access.token (0600, the run's user only) lets the user's own tools in. */
static void check_access_token(const char *name) {
    char path[700], addr[128] = "", msg[FL_ERR_MSG_MAX];
    snprintf(path, sizeof path, "%s/%s/logs/replay-0.log", g_tmp, name);
    char *log = read_file(path);
    assert_non_null(log);
    const char *at = strstr(log, "serving on 127.0.0.1:");
    assert_non_null(at);
    sscanf(at + strlen("serving on "), "%127[^ \n]", addr);
    free(log);
    snprintf(path, sizeof path, "%s/%s/access.token", g_tmp, name);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    char *token = read_file(path);
    assert_non_null(token);
    token[strcspn(token, "\n")] = '\0';
    assert_int_equal(strlen(token), 32);

    assert_int_equal(replay_info_with(addr, NULL, msg, sizeof msg), FL_UNAUTHENTICATED);
    fprintf(stderr, "without the token: %s\n", msg);
    assert_non_null(strstr(msg, "carries no access token"));
    assert_int_equal(replay_info_with(addr, "0123456789abcdef0123456789abcdef", msg, sizeof msg), FL_UNAUTHENTICATED);
    fprintf(stderr, "with another token: %s\n", msg);
    assert_non_null(strstr(msg, "access token is wrong"));
    assert_int_equal(replay_info_with(addr, token, msg, sizeof msg), FL_OK);
    check_poison_refused(addr, token);
    /* and another local user keeps no connection at all to the shard */
    int port = atoi(strrchr(addr, ':') + 1);
    int closed = as_nobody(tcp_closed, &port, -1);
    if (closed == -1)
        fprintf(stderr, "(not root: a connection as another user is not tried)\n");
    else
        assert_int_equal(closed, 1);
    free(token);
    snprintf(path, sizeof path, "%s/%s/logs/replay-0.log", g_tmp, name);
    log = read_file(path);
    assert_non_null(log);
    assert_non_null(strstr(log, "refused /fleet.Replay/Info"));
    free(log);
}

static void test_dead_child_is_reported(void **state) {
    (void)state;
    char *argv[16];
    char sets[4][512];
    /* With restarts off, a dead role ends the run (tests/integration_chaos.c covers them). */
    fleet_argv(argv, sets, "crash", "run.max_restarts=0", "run.stop_at_target=false");
    char out[512];
    snprintf(out, sizeof out, "%s/crash.log", g_tmp);
    pid_t pid = start_process(argv, out);
    pid_t victim = 0;
    for (int i = 0; i < 600 && !victim; i++) {
        victim = find_child(pid, "fleet actor");
        if (!victim) usleep(100000);
    }
    assert_true(victim > 0);
    usleep(500000);
    /* actor.nice (default 10): the actor runs below the launcher and the learner */
    const int base = nice_of(pid), want = base + 10 > 19 ? 19 : base + 10;
    pid_t learner = find_child(pid, "fleet learner");
    assert_true(base > -100 && learner > 0);
    for (int i = 0; i < 50 && nice_of(victim) != want; i++) usleep(100000);
    assert_int_equal(nice_of(victim), want);
    assert_int_equal(nice_of(learner), base);
    check_access_token("crash");
    assert_int_equal(kill(victim, SIGKILL), 0);
    char *log = stopped_run_output(pid, out);
    assert_non_null(strstr(log, "actor"));
    assert_non_null(strstr(log, "killed by signal 9"));
    assert_non_null(strstr(log, "/crash/logs/actor-")); /* where to read what it did */
    char *sum = summary_of("crash");
    assert_non_null(sum);
    assert_children_gone(sum, 4); /* replay, paramserver, learner, >= 1 actor */
    free(sum);
    free(log);
}

/* A role that exits with status 2 (its configuration cannot work: here learner.resume
 * names no file) is not restarted, even with restarts on: the fleet stops at once with
 * the role's own message and why it was not restarted. */
static void test_config_error_is_not_restarted(void **state) {
    (void)state;
    char *argv[16];
    char sets[4][512];
    char resume[600];
    snprintf(resume, sizeof resume, "learner.resume=%s/no-such-checkpoint.safetensors", g_tmp);
    fleet_argv(argv, sets, "badresume", resume, "run.max_restarts=10");
    char out[512];
    snprintf(out, sizeof out, "%s/badresume.log", g_tmp);
    pid_t pid = start_process(argv, out);
    char *log = stopped_run_output(pid, out);
    assert_non_null(strstr(log, "no-such-checkpoint.safetensors: cannot read it"));
    assert_non_null(strstr(log, "exited with status 2"));
    assert_non_null(strstr(log, "not restarted: exit status 2 is a usage or configuration error"));
    assert_null(strstr(log, "restarting it"));
    char *sum = summary_of("badresume");
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "restarts"), 0);
    assert_children_gone(sum, 4);
    free(sum);
    free(log);
}

/* A short run of a game ends episodes and scores like the policy it plays: a MinAtar
 * Breakout fleet and (where ALE and its ROMs are built) an Atari Pong fleet of the shipped
 * configs, cut by an env-step budget without an evaluator. Pong under the Nature preset
 * (no-op starts first in its chain) lost 21-0 in about 850 agent steps a game for a
 * policy that has not learned yet; a chain whose env never advanced ended no episode. */
static void game_run(const char *config, const char *name, const char *budget, const char *extra, int min_episodes,
                     double min_return, double max_return) {
    char cfg[1024], out_dir[512], run_name[256], out[512];
    snprintf(cfg, sizeof cfg, "%s/configs/%s", fleet_source_dir(), config);
    snprintf(out_dir, sizeof out_dir, "run.out_dir=%s", g_tmp);
    snprintf(run_name, sizeof run_name, "run.name=%s", name);
    char *argv[] = {(char *)fleet_bin(),
                    "run",
                    cfg,
                    "--set",
                    out_dir,
                    "--set",
                    run_name,
                    "--set",
                    (char *)budget,
                    "--set",
                    "run.evaluators=0",
                    "--set",
                    "run.max_seconds=240",
                    "--set",
                    "run.stop_at_target=false",
                    "--set",
                    (char *)extra,
                    NULL};
    snprintf(out, sizeof out, "%s/%s.log", g_tmp, name);
    pid_t pid = start_process(argv, out);
    int status = wait_process(pid, 300);
    char *log = read_file(out);
    if (log)
        fprintf(stderr, "---- fleet run output (tail) ----\n%s\n", strlen(log) > 3000 ? log + strlen(log) - 3000 : log);
    assert_true(status != -1 && WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    char *sum = summary_of(name);
    assert_non_null(sum);
    char v[256];
    assert_non_null(kv_get(sum, "reason", v, sizeof v));
    assert_non_null(strstr(v, "env-step budget"));
    assert_non_null(kv_get(sum, "episodes", v, sizeof v));
    int episodes = atoi(v);
    assert_non_null(kv_get(sum, "mean_return_100", v, sizeof v));
    double ret = atof(v);
    if (episodes < min_episodes || ret < min_return || ret > max_return)
        fail_msg("%s: %d episodes with a mean return of %g, expected %d or more episodes and a mean in [%g, %g]",
                 config, episodes, ret, min_episodes, min_return, max_return);
    assert_children_gone(sum, 3);
    free(sum);
    free(log);
}

static void test_games_end_episodes(void **state) {
    (void)state;
    /* MinAtar Breakout: an episode of a near-random policy lasts tens of steps */
    game_run("minatar-breakout.ini", "minatar", "run.max_env_steps=20000", "run.progress_every=1", 100, 0.0, 5.0);
    if (!fl_atari_available() || !fl_env_find("atari-pong")) {
        print_message("SKIP (Pong part): this build has no ALE or no Atari ROMs (scripts/ale.sh builds them)\n");
        return;
    }
    /* Pong: 2 actors of 4 envs, a game ~850 steps: 16,000 steps end about 16 games. The
     * learner does not start (replay holds fewer than min_size_to_sample transitions), so the
     * rate limit (32 samples per insert) does not tie the actors to a learner that a
     * sanitizer build slows down many times */
    game_run("atari-pong.ini", "pong", "run.max_env_steps=16000", "replay.min_size_to_sample=30000", 8, -21.0, -15.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_learns_cartpole),
        cmocka_unit_test(test_games_end_episodes),
        cmocka_unit_test(test_budgets_are_normal_stops),
        cmocka_unit_test(test_run_folder_is_never_overwritten),
        cmocka_unit_test(test_sigint_stops_everything),
        cmocka_unit_test(test_dead_child_is_reported),
        cmocka_unit_test(test_config_error_is_not_restarted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
