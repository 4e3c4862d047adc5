/* Fleets across hosts under mpirun: two hosts, and 32 actors on four. The hosts are network namespaces made by the
 * test (iproute2: `ip netns`, a bridge and veth pairs on a private /24), each with its
 * own host name (`unshare --uts`); Open MPI starts its daemons in them through an rsh
 * agent that enters the namespace, exactly as ssh would log in to another machine. So
 * the ranks see two hosts whose loopbacks are separate, and everything crosses the
 * bridge: every service must bind its own host's address (never loopback, never
 * 0.0.0.0), the roles must find each other through the addresses gathered over MPI,
 * and the two apex learners, one per host, average their gradients over MPI between
 * the hosts; the gRPC calls use TLS and tokens with per-job credentials. Skips where it cannot make namespaces (not
 * root, no iproute2 or unshare, a container without the capability) or fleet has no MPI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/proc_util.h"
#include "tests/run_util.h"

#define NHOSTS 4 /* hostA .. hostD; the two-host tests use the first two */
static char g_tmp[256], g_ns[NHOSTS][32], g_br[16], g_net[32], g_mpirun[512], g_agent[400], g_hosts[400], g_hosts4[400];
static int g_ready;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

static void remove_hosts(void) {
    for (int h = 0; h < NHOSTS; h++) sh("ip netns del %s > /dev/null 2>&1", g_ns[h]);
    sh("ip link del %s > /dev/null 2>&1", g_br);
}

/* Four namespaces on a bridge: 10.N.0.1 here, 10.N.0.11 (hostA), .12 (hostB), .13
 * (hostC) and .14 (hostD). */
static int make_hosts(void) {
    int p = (int)getpid();
    for (int h = 0; h < NHOSTS; h++) snprintf(g_ns[h], sizeof g_ns[h], "fleet%d-%c", p, 'a' + h);
    snprintf(g_br, sizeof g_br, "flbr%d", p % 100000);
    snprintf(g_net, sizeof g_net, "10.%d.0", 100 + p % 150);
    if (sh("ip link add %s type bridge && ip addr add %s.1/24 dev %s && ip link set %s up", g_br, g_net, g_br, g_br))
        return -1;
    for (int h = 0; h < NHOSTS; h++) {
        if (sh("ip netns add %s && ip link add %sv%d type veth peer name eth0 netns %s && "
               "ip link set %sv%d master %s && ip link set %sv%d up && "
               "ip -n %s addr add %s.1%d/24 dev eth0 && ip -n %s link set eth0 up && ip -n %s link set lo up",
               g_ns[h], g_br, h, g_ns[h], g_br, h, g_br, g_br, h, g_ns[h], g_net, h + 1, g_ns[h], g_ns[h]))
            return -1;
    }
    snprintf(g_agent, sizeof g_agent, "%s/agent.sh", g_tmp);
    FILE *f = fopen(g_agent, "w");
    if (!f) return -1;
    fprintf(f,
            "#!/bin/sh\n"
            "# rsh agent: runs Open MPI's daemon in the namespace that plays host $1\n"
            "host=$1; shift\n"
            "case $host in\n");
    for (int h = 0; h < NHOSTS; h++) fprintf(f, "  %s.1%d) ns=%s; name=host%c ;;\n", g_net, h + 1, g_ns[h], 'A' + h);
    fprintf(f,
            "  *) echo \"agent: unknown host $host\" >&2; exit 1 ;;\n"
            "esac\n"
            "exec ip netns exec $ns unshare --uts sh -c \"hostname $name; $*\"\n");
    fclose(f);
    chmod(g_agent, 0755);
    snprintf(g_hosts, sizeof g_hosts, "%s/hosts", g_tmp);
    f = fopen(g_hosts, "w");
    if (!f) return -1;
    fprintf(f, "%s.11 slots=8\n%s.12 slots=8\n", g_net, g_net);
    fclose(f);
    snprintf(g_hosts4, sizeof g_hosts4, "%s/hosts4", g_tmp);
    f = fopen(g_hosts4, "w");
    if (!f) return -1;
    for (int h = 0; h < NHOSTS; h++) fprintf(f, "%s.1%d slots=16\n", g_net, h + 1);
    fclose(f);
    /* A daemon must start on each host and reach mpirun over the bridge. */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s --allow-run-as-root --hostfile %s --mca plm_rsh_agent %s --mca oob_tcp_if_include %s.0/24 "
             "--map-by node -np 2 hostname 2>&1",
             g_mpirun, g_hosts, g_agent, g_net);
    FILE *pf = popen(cmd, "r");
    if (!pf) return -1;
    char out[256] = "";
    size_t n = fread(out, 1, sizeof out - 1, pf);
    out[n] = '\0';
    int rc = pclose(pf);
    return rc == 0 && strstr(out, "hostA") && strstr(out, "hostB") ? 0 : -1;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-hosts-XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    g_ready = geteuid() == 0 && find_mpirun(g_mpirun, sizeof g_mpirun) &&
              sh("command -v ip > /dev/null && command -v unshare > /dev/null") == 0;
    if (g_ready && make_hosts() != 0) {
        fprintf(stderr, "cannot make four network namespaces here; the hosts tests will skip\n");
        remove_hosts();
        g_ready = 0;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (g_ready) remove_hosts();
    rm_rf(g_tmp);
    return 0;
}

/* mpirun's words for np ranks spread over the hosts of hostfile, through the rsh agent,
 * with Open MPI's own traffic on the bridge, into argv (room for HOSTS_ARGC); returns
 * their count. */
#define HOSTS_ARGC 19
static char g_oob[64];
static int hosts_launcher(const char *hostfile, const char *np, const char **argv) {
    snprintf(g_oob, sizeof g_oob, "%s.0/24", g_net);
    const char *words[HOSTS_ARGC] = {g_mpirun,
                                     "--allow-run-as-root",
                                     "--hostfile",
                                     hostfile,
                                     "--mca",
                                     "plm_rsh_agent",
                                     g_agent,
                                     "--mca",
                                     "oob_tcp_if_include",
                                     g_oob,
                                     "--mca",
                                     "btl_tcp_if_include",
                                     g_oob,
                                     "--map-by",
                                     "node",
                                     "--bind-to",
                                     "none",
                                     "-np",
                                     np};
    memcpy(argv, words, sizeof words);
    return HOSTS_ARGC;
}

/* `fleet run` under mpirun with np ranks spread over the hosts of hostfile. */
static int run_on_hosts(const char *hostfile, const char *np, const char *name, const char *const *sets, int nsets,
                        char **log) {
    const char *launcher[HOSTS_ARGC];
    const int nl = hosts_launcher(hostfile, np, launcher);
    return run_fleet_at(g_tmp, launcher, nl, name, sets, nsets, 400, log);
}

static int run_two_hosts(const char *name, const char *const *sets, int nsets, char **log) {
    return run_on_hosts(g_hosts, "7", name, sets, nsets, log);
}

/* 7 ranks alternating between the hosts: the launcher, replay, learner 1 and actor 1 on
 * hostA, the parameter server, learner 0 and actor 0 on hostB. */
static void test_fleet_across_two_hosts(void **state) {
    (void)state;
    if (!g_ready) {
        fprintf(stderr, "SKIP: no MPI, not root, or no network namespaces here\n");
        skip();
    }
    const char *sets[] = {"learner.count=2", "run.max_seconds=15", "run.stop_at_target=false"};
    char *log = NULL;
    int rc = run_two_hosts("two", sets, 3, &log);
    assert_non_null(log);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(log,
                           "0:launcher@hostA 1:replay 0@hostB 2:paramserver 0@hostA 3:learner 0@hostB "
                           "4:learner 1@hostA 5:actor 0@hostB 6:actor 1@hostA"));
    char want[128];
    snprintf(want, sizeof want, "replay shard 0 serving on %s.12:", g_net); /* hostB's own address */
    assert_non_null(strstr(log, want));
    snprintf(want, sizeof want, "paramserver shard 0 of 1 serving on %s.11:", g_net); /* hostA's */
    assert_non_null(strstr(log, want));
    snprintf(want, sizeof want, "control %s.11:", g_net);
    assert_non_null(strstr(log, want));
    assert_null(strstr(log, "127.0.0.1"));
    assert_null(strstr(log, "0.0.0.0"));
    assert_non_null(strstr(log, "training with 2 learners"));
    /* No run.tls_dir: every call crossed the bridge with TLS and a token, per-job
     * credentials that the launcher made and sent to the ranks over MPI. */
    assert_non_null(strstr(log, "  tls          per-job credentials for 7 ranks in "));
    assert_no_error_lines(log);
    char *sum = summary_at(g_tmp, "two");
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "exit_code"), 0);
    assert_int_equal(summary_u64(sum, "learners"), 2);
    assert_true(summary_u64(sum, "learner_steps") > 0);
    assert_true(summary_u64(sum, "actors_acked") > 0);
    assert_true(summary_u64(sum, "param_version") > 1);
    free(sum);
    free(log);
}

/* run.interface names an interface the hosts do not have: every rank stops, and the
 * message names the interface, the host and what it has. */
static void test_missing_interface(void **state) {
    (void)state;
    if (!g_ready) {
        fprintf(stderr, "SKIP: no MPI, not root, or no network namespaces here\n");
        skip();
    }
    const char *sets[] = {"learner.count=2", "run.interface=ib7"};
    char *log = NULL;
    int rc = run_two_hosts("noif", sets, 2, &log);
    assert_non_null(log);
    assert_true(rc != 0);
    assert_non_null(strstr(log, "run.interface = ib7: no such interface"));
    assert_non_null(strstr(log, " on hostA): "));
    assert_non_null(strstr(log, "eth0 ("));
    free(log);
}

/* 32 actors on four hosts (40 ranks: the launcher, 4 replay shards, 2 parameter servers,
 * the learner and the actors, dealt round the hosts), under SCHED_IDLE on this machine's
 * cores: every actor gets transitions acknowledged, none acknowledged is lost, and every
 * process, on whichever host, tells its memory. */
static void test_32_actors_on_four_hosts(void **state) {
    (void)state;
    if (!g_ready) {
        fprintf(stderr, "SKIP: no MPI, not root, or no network namespaces here\n");
        skip();
    }
    const char *sets[] = {"actor.count=32",     "replay.shards=4",          "paramserver.shards=2",
                          "env.num_envs=1",     "actor.sched_idle=true",    "run.evaluators=0",
                          "run.max_seconds=40", "run.stop_at_target=false", "run.checkpoints=false"};
    char *log = NULL;
    int rc = run_on_hosts(g_hosts4, "40", "many", sets, (int)(sizeof sets / sizeof sets[0]), &log);
    assert_non_null(log);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(log, "39:actor 31@host"));
    assert_non_null(strstr(log, "@hostD"));
    assert_null(strstr(log, "127.0.0.1"));
    assert_no_error_lines(log);
    char *sum = summary_at(g_tmp, "many");
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "exit_code"), 0);
    const unsigned long long acked = summary_u64(sum, "actors_acked");
    assert_true(acked > 0);
    assert_true(summary_u64(sum, "replay_inserted") >= acked); /* nothing acknowledged lost */
    assert_int_equal(summary_u64(sum, "actors_lost_unacked"), 0);
    assert_true(summary_f64(sum, "memory_actor_rss_mb") > 1.0);
    assert_true(summary_f64(sum, "memory_replay_rss_mb") > 1.0);
    /* roles.csv: each of the 32 actors had transitions acknowledged */
    char *roles = run_file_at(g_tmp, "many", "roles.csv");
    assert_non_null(roles);
    int col = -1, acked_actors[32] = {0}; /* the header's transitions_acked column */
    for (const char *c = roles, *start = roles; c && *c && *c != '\n'; c++) {
        if (*c != ',') continue;
        col++;
        start = c + 1;
        if (strncmp(start, "transitions_acked,", 18) == 0) {
            col++;
            break;
        }
    }
    assert_true(col > 0);
    for (char *line = strchr(roles, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
        int index;
        double t;
        if (sscanf(line + 1, "%lf,actor,%d,", &t, &index) != 2 || index < 0 || index >= 32) continue;
        const char *field = line + 1;
        for (int k = 0; k < col && field; k++) {
            field = strchr(field, ',');
            if (field) field++;
        }
        if (field && strtoull(field, NULL, 10) > 0) acked_actors[index] = 1;
    }
    for (int a = 0; a < 32; a++)
        if (!acked_actors[a]) fail_msg("actor %d: no acknowledged transitions in roles.csv", a);
    free(roles);
    free(sum);
    free(log);
}

/* Actors that join from hosts outside the MPI job: a fleet runs under mpirun on hostA and
 * hostB; an actor on hostC joins it through the run folder (its control.addr and the
 * job's credentials in tls/), one on hostD through the launcher's address and a copy of
 * the credentials; both act over TLS with the run token. The one on hostD is killed and
 * counts as lost; the fleet goes on and stops the one on hostC at its end. */
/* argv that runs sh -c cmd in host h's namespace under its own host name. */
static char g_ip[64];
static void on_host(int h, char *cmd, char **argv) {
    snprintf(g_ip, sizeof g_ip, access("/usr/sbin/ip", X_OK) == 0 ? "/usr/sbin/ip" : "/sbin/ip");
    char *words[] = {g_ip, "netns", "exec", g_ns[h], "unshare", "--uts", "sh", "-c", cmd, NULL};
    memcpy(argv, words, sizeof words);
}

/* Actor hosts that come and go, as docs/multi-host.md runs them: the services, the
 * learner and one actor under one mpirun on hostA and hostB; hostC and hostD each start
 * two joined actors with an mpirun of their own (`fleet actor --join`, by the run folder
 * on hostC, by HOST:PORT and a copy of the TLS folder on hostD). Every process of hostD
 * (its mpirun and both actors) is killed with SIGKILL, as when the machine is lost: the
 * fleet counts them lost and goes on; hostD then joins again with two new actors. The
 * run ends with exit 0: 6 joined, 4 left at the stop, 2 lost. */
static void test_actors_join_from_other_hosts(void **state) {
    (void)state;
    if (!g_ready) {
        fprintf(stderr, "SKIP: no MPI, not root, or no network namespaces here\n");
        skip();
    }
    const char *launcher[HOSTS_ARGC];
    const int nl = hosts_launcher(g_hosts, "5", launcher);
    const char *sets[] = {"actor.count=1", "run.evaluators=0",     "run.max_seconds=50", "run.stop_at_target=false",
                          "run.hang_s=16", "run.checkpoints=false"};
    pid_t fleet = start_fleet_at(g_tmp, launcher, nl, "joins", sets, (int)(sizeof sets / sizeof sets[0]));
    char run_dir[400], addr_file[450], tls_copy[450];
    snprintf(run_dir, sizeof run_dir, "%s/joins", g_tmp);
    snprintf(addr_file, sizeof addr_file, "%s/control.addr", run_dir);
    snprintf(tls_copy, sizeof tls_copy, "%s/tls-copy", g_tmp);
    assert_true(wait_file(addr_file, 60));
    char ca[500]; /* the tls/ folder is written right after Control starts */
    snprintf(ca, sizeof ca, "%s/tls/ca.pem", run_dir);
    assert_true(wait_file(ca, 5));
    assert_int_equal(sh("cp -r %s/tls %s && chmod 700 %s", run_dir, tls_copy, tls_copy), 0);
    char *a = read_file(addr_file);
    assert_non_null(a);
    a[strcspn(a, "\n")] = '\0';
    char cmd_c[1400], cmd_d[1600], out_c[450], out_d[450], out_d2[450];
    snprintf(out_c, sizeof out_c, "%s/joiner-c.log", g_tmp);
    snprintf(out_d, sizeof out_d, "%s/joiner-d.log", g_tmp);
    snprintf(out_d2, sizeof out_d2, "%s/joiner-d2.log", g_tmp);
    snprintf(cmd_c, sizeof cmd_c,
             "hostname hostC; exec %s --allow-run-as-root --oversubscribe --bind-to none -np 2 %s actor --join %s",
             g_mpirun, fleet_bin(), run_dir);
    snprintf(cmd_d, sizeof cmd_d,
             "hostname hostD; exec %s --allow-run-as-root --oversubscribe --bind-to none -np 2 %s actor --join %s "
             "--set run.tls_dir=%s",
             g_mpirun, fleet_bin(), a, tls_copy);
    char *argv_c[10], *argv_d[10];
    on_host(2, cmd_c, argv_c);
    on_host(3, cmd_d, argv_d);
    pid_t c = start_process(argv_c, out_c);
    pid_t d = start_process(argv_d, out_d);
    sleep(15);
    /* hostD is lost: every process in its namespace, mpirun and the actors alike */
    assert_int_equal(sh("ip netns pids %s | xargs -r kill -9", g_ns[3]), 0);
    waitpid(d, NULL, 0);
    sleep(12);                                /* past half of run.hang_s: the two are counted lost */
    pid_t d2 = start_process(argv_d, out_d2); /* the host is back, its actors join again */
    int sc = wait_process(c, 120);
    int sd2 = wait_process(d2, 120);
    int sf = wait_process(fleet, 120);
    char path[512];
    snprintf(path, sizeof path, "%s/joins.log", g_tmp);
    char *log = read_file(path), *lc = read_file(out_c), *ld = read_file(out_d), *ld2 = read_file(out_d2);
    fprintf(stderr, "---- fleet ----\n%s\n---- hostC ----\n%s\n---- hostD ----\n%s\n---- hostD again ----\n%s\n",
            log ? log : "", lc ? lc : "", ld ? ld : "", ld2 ? ld2 : "");
    assert_true(sf != -1 && WIFEXITED(sf) && WEXITSTATUS(sf) == 0);
    assert_true(sc != -1 && WIFEXITED(sc) && WEXITSTATUS(sc) == 0);
    assert_true(sd2 != -1 && WIFEXITED(sd2) && WEXITSTATUS(sd2) == 0);
    assert_non_null(strstr(lc, "joined run joins as actor "));
    assert_non_null(strstr(ld, "joined run joins as actor "));
    assert_non_null(strstr(ld2, "joined run joins as actor "));
    assert_non_null(strstr(log, "joined from hostC"));
    assert_non_null(strstr(log, "joined from hostD"));
    assert_non_null(strstr(log, "lost: no report for"));
    assert_non_null(strstr(lc, "the launcher asks this role to stop"));
    assert_non_null(strstr(ld2, "the launcher asks this role to stop"));
    char *sum = summary_at(g_tmp, "joins");
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "actors_joined"), 6);
    assert_int_equal(summary_u64(sum, "actors_left"), 4);
    assert_int_equal(summary_u64(sum, "actors_lost"), 2);
    assert_true(summary_u64(sum, "replay_inserted") >= summary_u64(sum, "actors_acked"));
    /* the joined actors' transitions reached replay across the bridge, the rejoined ones' too */
    char *roles = run_file_at(g_tmp, "joins", "roles.csv");
    assert_non_null(roles);
    for (int i = 1; i <= 6; i++) {
        char row[32];
        snprintf(row, sizeof row, ",actor,%d,", i);
        assert_non_null(strstr(roles, row));
    }
    free(roles);
    free(sum);
    free(a);
    free(lc);
    free(ld);
    free(ld2);
    free(log);
}

/* The host that holds the replay shard (and the learner) is lost: every process in its
 * namespace is killed, which ends the mpirun job; the checkpoints written until then are
 * on the shared file system, and `fleet run --resume` under mpirun continues the run on
 * the same hosts: the launcher from its state, the learner from its checkpoint, the
 * replay shard from its checkpoint and write-ahead log, the actors from their state. */
static void test_lost_replay_host_then_resume(void **state) {
    (void)state;
    if (!g_ready) {
        fprintf(stderr, "SKIP: no MPI, not root, or no network namespaces here\n");
        skip();
    }
    const char *launcher[HOSTS_ARGC];
    const int nl = hosts_launcher(g_hosts, "6", launcher);
    const char *sets[] = {"run.evaluators=0", "run.max_seconds=300", "run.stop_at_target=false",
                          "run.checkpoint_every=3"};
    pid_t fleet = start_fleet_at(g_tmp, launcher, nl, "lost", sets, (int)(sizeof sets / sizeof sets[0]));
    char run_dir[400], metrics[450], path[600];
    snprintf(run_dir, sizeof run_dir, "%s/lost", g_tmp);
    snprintf(metrics, sizeof metrics, "%s/metrics.csv", run_dir);
    const int rows = wait_csv_rows(metrics, 12, 180); /* 12 s of progress rows: checkpoints written */
    assert_true(rows >= 12);
    /* hostB holds the replay shard (rank 1), the learner (rank 3) and actor 1 (rank 5) */
    assert_int_equal(sh("ip netns pids %s | xargs -r kill -9", g_ns[1]), 0);
    int st = wait_process(fleet, 120);
    assert_true(st != -1); /* the job ended (mpirun reports the lost ranks) */
    snprintf(path, sizeof path, "%s/lost.log", g_tmp);
    char *log1 = read_file(path);
    fprintf(stderr, "---- first sitting ----\n%s\n", log1 ? log1 : "");
    snprintf(path, sizeof path, "%s/checkpoints/launcher.state", run_dir);
    assert_int_equal(access(path, R_OK), 0);

    /* resume on the same hosts, for about 20 s more (the budget counts the first sitting's
     * time, about `rows` seconds, as its state file kept it) */
    char budget[64], out[500];
    snprintf(budget, sizeof budget, "run.max_seconds=%d", rows + 25);
    snprintf(out, sizeof out, "%s/resume.log", g_tmp);
    char *argv[64];
    int n = 0;
    for (int i = 0; i < nl; i++) argv[n++] = (char *)launcher[i];
    argv[n++] = (char *)fleet_bin();
    argv[n++] = "run";
    argv[n++] = "--resume";
    argv[n++] = run_dir;
    argv[n++] = "--set";
    argv[n++] = budget;
    argv[n] = NULL;
    pid_t again = start_process(argv, out);
    int st2 = wait_process(again, 300);
    char *log2 = read_file(out);
    fprintf(stderr, "---- resumed ----\n%s\n", log2 ? log2 : "");
    assert_true(st2 != -1 && WIFEXITED(st2) && WEXITSTATUS(st2) == 0);
    assert_non_null(strstr(log2, "  resume       "));
    assert_non_null(strstr(log2, "resumed from")); /* the actors, from their state files */
    assert_non_null(strstr(log2, "recovered"));    /* the replay shard, from its checkpoint and log */
    char *sum = summary_at(g_tmp, "lost");
    assert_non_null(sum);
    assert_int_equal(summary_u64(sum, "exit_code"), 0);
    assert_true(summary_u64(sum, "replay_inserted") >= summary_u64(sum, "actors_acked"));
    assert_true(summary_u64(sum, "learner_steps") > 0);
    free(sum);
    free(log1);
    free(log2);
}

int main(void) {
    no_leak_checks_under_mpirun();
    if (getenv("FLEET_TEST_FILTER")) cmocka_set_test_filter(getenv("FLEET_TEST_FILTER")); /* e.g. "*join*" */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fleet_across_two_hosts),
        cmocka_unit_test(test_32_actors_on_four_hosts),
        cmocka_unit_test(test_actors_join_from_other_hosts),
        cmocka_unit_test(test_lost_replay_host_then_resume),
        cmocka_unit_test(test_missing_interface),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
