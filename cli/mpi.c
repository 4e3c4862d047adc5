/* mpi: `fleet run` under Open MPI's mpirun (or Slurm's srun), across one or many hosts.
 *
 * MPI is the launcher and the learners' collective channel; the data plane stays gRPC,
 * exactly as on one machine. Every rank runs this file:
 *
 *   1. Roles. SPMD (`mpirun -np K fleet run x.ini`): rank 0 is the launcher, then
 *      replay.shards replay ranks, paramserver.shards parameter-server ranks,
 *      learner.count learners and actor.count actors, in that order; K must be their sum
 *      plus one. MPMD (`mpirun -np 1 fleet run x.ini --role launcher : -np 4 fleet run
 *      x.ini --role actor : ...`): each app context names its role, the counts come from
 *      the ranks (overriding the config's) and there must be exactly one launcher. Every
 *      rank learns every rank's role and host (MPI_Allgather).
 *   2. Addresses. A fleet on one host binds run.bind_host (loopback by default). Across
 *      hosts each rank binds its own host's address: run.interface's IPv4 address, or
 *      the first interface that is up and not loopback (common/netif.h), never 0.0.0.0.
 *   3. The launcher writes the effective config and starts fleet.Control (cli/launch.h);
 *      the config text and Control's address go to every rank (MPI_Bcast), which keeps a
 *      copy in a temporary file for its role.
 *   4. Service ranks start `fleet replay|paramserver --listen HOST:0` as a child process,
 *      read its address, and every rank gathers all addresses (MPI_Allgather).
 *   5. Actor ranks start `fleet actor` as a child with those addresses. Learner ranks
 *      run the learner in their own process (it needs MPI): a communicator of the
 *      learners (MPI_Comm_split) carries their gradient all-reduce (learner/reduce.h).
 *   6. The launcher runs the progress loop of cli/launch.h. A rank whose role ends
 *      sends it DONE (exit status, pid, host); an end the launcher did not ask for is
 *      reported with role, index, rank and host, and the fleet is stopped in order
 *      (actors, learners, services): STOP messages make the ranks SIGTERM their children,
 *      and Control asks every role to finish. When every rank is DONE the launcher sends
 *      FINISH and all ranks call MPI_Finalize. A rank that does not end within the grace
 *      periods (a learner stuck in an all-reduce with a dead peer, a role that hangs) is
 *      named, and the launcher ends the job with MPI_Abort: the job never hangs. A rank
 *      that dies outright (its process killed) is reported by mpirun, which ends the job;
 *      the plan printed at the start maps ranks to roles.
 *
 * Failure: a configuration error (rank count, roles, interface) is printed once by the
 * launcher (or by the rank that found it, naming its host) and every rank exits 2. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/stop.h"
#include "cli/launch.h"
#include "cli/proc.h"
#include "cli/verbs.h"
#include "learner/reduce.h"

int fl_mpi_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMIX_RANK") != NULL || getenv("PMI_RANK") != NULL;
}

static long long plan_ranks(const fl_config_t *c) {
    return 1 + c->replay_shards + c->paramserver_shards + c->learner_count + c->actor_count;
}

void fl_mpi_print_command(const fl_config_t *c, const char *cfg_file, const char *hostfile, FILE *f) {
    char self[4096] = "fleet";
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) self[n] = '\0';
    long long K = plan_ranks(c);
    fprintf(f, "# %lld ranks: rank 0 the launcher, %lld replay, %lld parameter-server, %lld learner (%s), %lld actor\n",
            K, (long long)c->replay_shards, (long long)c->paramserver_shards, (long long)c->learner_count,
            c->learner_mode, (long long)c->actor_count);
    fprintf(f, "# on one host add --oversubscribe when it has fewer than %lld slots; as root add --allow-run-as-root;\n"
               "# the binary and the config must be at the same path on every host (docs/multi-host.md)\n",
            K);
    fprintf(f, "mpirun%s%s --bind-to none -np %lld %s run%s%s\n", hostfile && hostfile[0] ? " --hostfile " : "",
            hostfile && hostfile[0] ? hostfile : "", K, self, cfg_file && cfg_file[0] ? " " : "",
            cfg_file && cfg_file[0] ? cfg_file : "");
}

#ifdef FLEET_HAVE_MPI
#include <mpi.h>

#include "common/netif.h"

enum { K_LAUNCHER, K_REPLAY, K_PARAMSERVER, K_LEARNER, K_ACTOR, K_COUNT };
static const char *const kind_names[K_COUNT] = {"launcher", "replay", "paramserver", "learner", "actor"};

enum { TAG_DONE = 7201, TAG_STOP = 7202, TAG_FINISH = 7203 };
#define ADDR_LEN 256

typedef struct rank_id {
    char role[16]; /* --role, "" in SPMD */
    char host[64];
} rank_id_t;

typedef struct done_msg {
    int clean; /* exit 0 or SIGTERM */
    int pid;
    char what[160]; /* "exited with status 1" */
} done_msg_t;

typedef struct mpi_state {
    int size, me, launcher;
    rank_id_t *ids;
    int *kind, *index;
    int *done; /* launcher: DONE received */
    done_msg_t *msg;
    int stopping;
} mpi_state_t;

static int kind_from_name(const char *s) {
    for (int k = 0; k < K_COUNT; k++)
        if (strcmp(s, kind_names[k]) == 0) return k;
    return -1;
}

/* Assigns every rank a role and an index (the same on every rank). 0, or -1 with why. */
static int make_plan(fl_config_t *c, mpi_state_t *m, char *why, size_t len) {
    int mpmd = 0, counts[K_COUNT] = {0};
    for (int r = 0; r < m->size; r++) mpmd |= m->ids[r].role[0] != '\0';
    if (mpmd) {
        for (int r = 0; r < m->size; r++) {
            int k = kind_from_name(m->ids[r].role);
            if (k < 0) {
                snprintf(why, len,
                         "rank %d (host %s) has --role '%s' (expected launcher, replay, paramserver, learner or "
                         "actor; in an MPMD job every app context names its role)",
                         r, m->ids[r].host, m->ids[r].role);
                return -1;
            }
            m->kind[r] = k;
            m->index[r] = counts[k]++;
        }
        if (counts[K_LAUNCHER] != 1 || counts[K_REPLAY] < 1 || counts[K_PARAMSERVER] < 1 || counts[K_LEARNER] < 1 ||
            counts[K_ACTOR] < 1) {
            snprintf(why, len,
                     "the MPMD job has %d launcher, %d replay, %d paramserver, %d learner and %d actor ranks "
                     "(expected exactly one launcher and at least one of every other role)",
                     counts[0], counts[1], counts[2], counts[3], counts[4]);
            return -1;
        }
        c->replay_shards = counts[K_REPLAY];
        c->paramserver_shards = counts[K_PARAMSERVER];
        c->learner_count = counts[K_LEARNER];
        c->actor_count = counts[K_ACTOR];
    } else {
        long long want = plan_ranks(c);
        if (want != m->size) {
            snprintf(why, len,
                     "the role plan needs %lld ranks (1 launcher + %lld replay + %lld paramserver + %lld learner + "
                     "%lld actor), mpirun started %d: run with -np %lld (fleet run --print-mpirun), or change "
                     "actor.count",
                     want, (long long)c->replay_shards, (long long)c->paramserver_shards, (long long)c->learner_count,
                     (long long)c->actor_count, m->size, want);
            return -1;
        }
        const long long n[K_COUNT] = {1, c->replay_shards, c->paramserver_shards, c->learner_count, c->actor_count};
        int r = 0;
        for (int k = 0; k < K_COUNT; k++)
            for (long long i = 0; i < n[k]; i++, r++) {
                m->kind[r] = k;
                m->index[r] = (int)i;
            }
    }
    for (int r = 0; r < m->size; r++)
        if (m->kind[r] == K_LAUNCHER) m->launcher = r;
    return 0;
}

/* Every rank agrees on failure: returns 1 on every rank when `bad` is set on any. */
static int any_rank(int bad) {
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return all;
}

/* Sends DONE for this rank's role, then answers STOPs until the launcher's FINISH. */
static void report_done_and_wait(mpi_state_t *m, int clean, int pid, const char *what) {
    done_msg_t d;
    memset(&d, 0, sizeof d);
    d.clean = clean;
    d.pid = pid;
    snprintf(d.what, sizeof d.what, "%s", what);
    MPI_Send(&d, (int)sizeof d, MPI_BYTE, m->launcher, TAG_DONE, MPI_COMM_WORLD);
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(m->launcher, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
        if (!flag) {
            fl_sleep_sec(0.01);
            continue;
        }
        int dummy = 0;
        MPI_Recv(&dummy, 1, MPI_INT, m->launcher, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (st.MPI_TAG == TAG_FINISH) return;
    }
}

/* A service or actor rank: watches its child, forwards STOP (and a signal to this rank)
 * as SIGTERM, and reports its end. */
static void supervise_child(mpi_state_t *m, fl_child_t *c) {
    int termed = 0;
    while (c->running) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(m->launcher, TAG_STOP, MPI_COMM_WORLD, &flag, &st);
        if (flag) {
            int dummy = 0;
            MPI_Recv(&dummy, 1, MPI_INT, m->launcher, TAG_STOP, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        if ((flag || fl_stop_requested()) && !termed) {
            kill(c->pid, SIGTERM);
            termed = 1;
        }
        if (fl_proc_reap(c, 1)) break;
        fl_sleep_sec(0.02);
    }
    char what[128];
    fl_proc_describe_status(c->status, what, sizeof what);
    report_done_and_wait(m, fl_proc_clean_exit(c->status), (int)c->pid, what);
}

/* ---- the launcher's view of the ranks (cli/launch.h ops) ---- */

static void describe_rank(const mpi_state_t *m, int r, char *buf, size_t len) {
    snprintf(buf, len, "%s %d (rank %d on %s, pid %d)", kind_names[m->kind[r]], m->index[r], r, m->ids[r].host,
             m->msg[r].pid);
}

/* Receives every DONE that has arrived; returns the first rank that ended, or -1. */
static int poll_done(mpi_state_t *m) {
    int first = -1;
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_DONE, MPI_COMM_WORLD, &flag, &st);
        if (!flag) return first;
        int r = st.MPI_SOURCE;
        MPI_Recv(&m->msg[r], (int)sizeof m->msg[r], MPI_BYTE, r, TAG_DONE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        m->done[r] = 1;
        if (first < 0) first = r;
    }
}

static int mpi_dead(void *ctx, char *reason, size_t len) {
    mpi_state_t *m = ctx;
    int r = poll_done(m);
    if (r < 0) return 0;
    char who[160];
    describe_rank(m, r, who, sizeof who);
    snprintf(reason, len, "%s %s", who, m->msg[r].what);
    return 1;
}

static void mpi_stop(void *ctx, const char *roles, double grace_s) {
    mpi_state_t *m = ctx;
    for (int r = 0; r < m->size; r++) {
        if (r == m->launcher || m->done[r] || !strstr(roles, kind_names[m->kind[r]])) continue;
        int one = 1;
        MPI_Send(&one, 1, MPI_INT, r, TAG_STOP, MPI_COMM_WORLD);
    }
    double until = fl_clock_sec() + grace_s;
    for (;;) {
        poll_done(m);
        int left = 0;
        for (int r = 0; r < m->size; r++)
            left += r != m->launcher && !m->done[r] && strstr(roles, kind_names[m->kind[r]]) != NULL;
        if (!left || fl_clock_sec() > until) return;
        fl_sleep_sec(0.02);
    }
}

static int mpi_unclean(void *ctx, char *reason, size_t len) {
    mpi_state_t *m = ctx;
    poll_done(m);
    for (int r = 0; r < m->size; r++) {
        if (r == m->launcher || (m->done[r] && m->msg[r].clean)) continue;
        char who[160];
        describe_rank(m, r, who, sizeof who);
        snprintf(reason, len, "%s %s", who, m->done[r] ? m->msg[r].what : "did not stop");
        return 1;
    }
    return 0;
}

static void mpi_pids(void *ctx, FILE *f) {
    mpi_state_t *m = ctx;
    int first = 1;
    for (int r = 0; r < m->size; r++) {
        int pid = r == m->launcher ? (int)getpid() : m->msg[r].pid;
        if (pid <= 0) continue;
        fprintf(f, "%s%d", first ? "" : ",", pid);
        first = 0;
    }
}

static void print_ranks(const mpi_state_t *m) {
    printf("  ranks       ");
    for (int r = 0; r < m->size && r < 64; r++) {
        if (m->kind[r] == K_LAUNCHER)
            printf(" %d:launcher@%s", r, m->ids[r].host);
        else
            printf(" %d:%s %d@%s", r, kind_names[m->kind[r]], m->index[r], m->ids[r].host);
    }
    if (m->size > 64) printf(" ...");
    printf("\n");
    fflush(stdout);
}

/* The comma-separated addresses of the ranks of `kind`, in index order (malloc'd). */
static char *kind_list(const mpi_state_t *m, const char *addrs, int kind) {
    size_t len = 1;
    for (int r = 0; r < m->size; r++)
        if (m->kind[r] == kind) len += strnlen(addrs + (size_t)r * ADDR_LEN, ADDR_LEN) + 1;
    char *list = calloc(len, 1);
    if (!list) return NULL;
    for (int i = 0;; i++) {
        int found = 0;
        for (int r = 0; r < m->size; r++)
            if (m->kind[r] == kind && m->index[r] == i) {
                if (i) strcat(list, ",");
                strncat(list, addrs + (size_t)r * ADDR_LEN, ADDR_LEN - 1);
                found = 1;
            }
        if (!found) break;
    }
    return list;
}

int fl_mpi_run(const fl_config_t *cfg_in, const char *cfg_file, const char *role) {
    int provided = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    mpi_state_t m;
    memset(&m, 0, sizeof m);
    MPI_Comm_rank(MPI_COMM_WORLD, &m.me);
    MPI_Comm_size(MPI_COMM_WORLD, &m.size);
    fl_config_t cfg = *cfg_in;
    int rc = 0;
    char why[600] = "";
    char tmp_cfg[256] = "";
    fl_launch_t *L = NULL;
    char *addrs = NULL, *replay_list = NULL, *ps_list = NULL;
    MPI_Comm learners = MPI_COMM_NULL;
    fl_proc_init();
    fl_stop_install();

    /* 1. Who is where, and which role. */
    rank_id_t me;
    memset(&me, 0, sizeof me);
    snprintf(me.role, sizeof me.role, "%s", role);
    gethostname(me.host, sizeof me.host - 1);
    m.ids = calloc((size_t)m.size, sizeof *m.ids);
    m.kind = calloc((size_t)m.size, sizeof *m.kind);
    m.index = calloc((size_t)m.size, sizeof *m.index);
    m.done = calloc((size_t)m.size, sizeof *m.done);
    m.msg = calloc((size_t)m.size, sizeof *m.msg);
    addrs = calloc((size_t)m.size, ADDR_LEN);
    if (any_rank(!m.ids || !m.kind || !m.index || !m.done || !m.msg || !addrs)) {
        fprintf(stderr, "fleet run (rank %d): out of memory\n", m.me);
        rc = 1;
        goto finalize;
    }
    MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, m.ids, (int)sizeof me, MPI_BYTE, MPI_COMM_WORLD);
    if (make_plan(&cfg, &m, why, sizeof why) != 0) {
        if (m.me == 0) fprintf(stderr, "fleet run: %s\n", why);
        rc = 2;
        goto finalize;
    }
    const int kind = m.kind[m.me], index = m.index[m.me];
    int one_host = 1;
    for (int r = 1; r < m.size; r++) one_host &= strcmp(m.ids[r].host, m.ids[0].host) == 0;

    /* 2. The address this rank's services bind. */
    char host[FL_CONFIG_STRING_MAX];
    int bad = 0;
    if (one_host && !cfg.run_interface[0]) {
        snprintf(host, sizeof host, "%s", cfg.run_bind_host);
    } else {
        fl_err_t e;
        fl_err_init(&e);
        if (fl_netif_ipv4(cfg.run_interface, host, sizeof host, &e) != FL_OK) {
            fprintf(stderr, "fleet run (rank %d on %s): %s\n", m.me, me.host, e.msg);
            bad = 1;
        }
    }
    if (!one_host && strcmp(cfg.run_bind_host, "127.0.0.1") != 0 && m.me == 0)
        FL_WARN("run.bind_host = %s is ignored across hosts: each host binds its own address (run.interface)",
                cfg.run_bind_host);
    if (any_rank(bad)) {
        rc = 2;
        goto finalize;
    }

    /* 3. The launcher's run folder and Control; the config text and Control's address
     * to everyone. */
    char control[300] = "";
    if (m.me == m.launcher) {
        rc = fl_launch_create(&cfg, cfg_file, host, &L);
        if (!rc) {
            snprintf(control, sizeof control, "%s", fl_launch_control_addr(L));
            print_ranks(&m);
        }
    }
    int lrc = rc;
    MPI_Bcast(&lrc, 1, MPI_INT, m.launcher, MPI_COMM_WORLD);
    if (lrc) {
        rc = lrc;
        goto finalize;
    }
    MPI_Bcast(control, (int)sizeof control, MPI_CHAR, m.launcher, MPI_COMM_WORLD);
    {
        long long len = 0;
        char *text = NULL;
        if (m.me == m.launcher) {
            FILE *f = fopen(fl_launch_config_path(L), "rb");
            if (f && fseek(f, 0, SEEK_END) == 0) len = ftell(f);
            text = len > 0 ? malloc((size_t)len) : NULL;
            if (!f || !text || fseek(f, 0, SEEK_SET) != 0 || fread(text, 1, (size_t)len, f) != (size_t)len) len = -1;
            if (f) fclose(f);
            snprintf(tmp_cfg, sizeof tmp_cfg, "%s", fl_launch_config_path(L));
        }
        MPI_Bcast(&len, 1, MPI_LONG_LONG, m.launcher, MPI_COMM_WORLD);
        if (len <= 0) {
            if (m.me == m.launcher) fprintf(stderr, "fleet run: cannot read back %s\n", fl_launch_config_path(L));
            free(text);
            rc = 1;
            goto finalize;
        }
        if (m.me != m.launcher) text = malloc((size_t)len);
        if (any_rank(!text)) {
            free(text);
            rc = 1;
            goto finalize;
        }
        MPI_Bcast(text, (int)len, MPI_CHAR, m.launcher, MPI_COMM_WORLD);
        bad = 0;
        if (m.me != m.launcher) {
            snprintf(tmp_cfg, sizeof tmp_cfg, "/tmp/fleet-rank%d-XXXXXX.ini", m.me);
            int fd = mkstemps(tmp_cfg, 4);
            bad = fd < 0 || write(fd, text, (size_t)len) != (ssize_t)len;
            if (fd >= 0) close(fd);
            fl_err_t e;
            fl_err_init(&e);
            fl_config_t got;
            fl_config_defaults(&got);
            if (!bad && fl_config_load_file(&got, tmp_cfg, &e) != FL_OK) {
                fprintf(stderr, "fleet run (rank %d on %s): %s\n", m.me, me.host, e.msg);
                bad = 1;
            }
            if (!bad) cfg = got;
            if (bad && fd < 0) fprintf(stderr, "fleet run (rank %d on %s): cannot write %s\n", m.me, me.host, tmp_cfg);
        }
        free(text);
        if (any_rank(bad)) {
            rc = 1;
            goto finalize;
        }
    }

    /* 4. Services start and their addresses go round. */
    fl_child_t child;
    memset(&child, 0, sizeof child);
    char my_addr[ADDR_LEN] = "";
    bad = 0;
    if (kind == K_REPLAY || kind == K_PARAMSERVER) {
        char idx[32], listen[FL_CONFIG_STRING_MAX + 8];
        snprintf(idx, sizeof idx, "%d", index);
        snprintf(listen, sizeof listen, "%s:0", host);
        char *args[] = {"--config", tmp_cfg, "--shard", idx, "--listen", listen, "--control", control, NULL};
        if (fl_proc_spawn(&child, kind_names[kind], index, args, 1, 60) != 0) {
            char st[128] = "did not report its address";
            for (int w = 0; w < 100 && child.pid; w++) {
                if (fl_proc_reap(&child, 1)) {
                    fl_proc_describe_status(child.status, st, sizeof st);
                    break;
                }
                fl_sleep_sec(0.02);
            }
            fprintf(stderr, "fleet run: %s %d (rank %d on %s) %s while starting\n", kind_names[kind], index, m.me,
                    me.host, st);
            if (child.running) {
                kill(child.pid, SIGKILL);
                waitpid(child.pid, NULL, 0);
                child.running = 0;
            }
            bad = 1;
        } else {
            snprintf(my_addr, sizeof my_addr, "%s", child.addr);
        }
    }
    MPI_Allgather(my_addr, ADDR_LEN, MPI_CHAR, addrs, ADDR_LEN, MPI_CHAR, MPI_COMM_WORLD);
    if (any_rank(bad)) {
        if (child.running) {
            kill(child.pid, SIGTERM);
            waitpid(child.pid, NULL, 0);
        }
        rc = 1;
        goto finalize;
    }
    replay_list = kind_list(&m, addrs, K_REPLAY);
    ps_list = kind_list(&m, addrs, K_PARAMSERVER);
    char replay_arg[256] = "", ps_arg[256] = "";
    bad = !replay_list || !ps_list;
    if (!bad) {
        char path[300];
        snprintf(path, sizeof path, "%s.replay_addrs", tmp_cfg);
        bad = fl_launch_address_arg(replay_list, path, replay_arg, sizeof replay_arg) != 0 ||
              strlen(ps_list) >= sizeof ps_arg;
        if (!bad) snprintf(ps_arg, sizeof ps_arg, "%s", ps_list);
        if (bad && m.me == m.launcher)
            fprintf(stderr, "fleet run: the service addresses do not fit in an option (%zu parameter-server bytes)\n",
                    strlen(ps_list));
    }
    if (any_rank(bad)) {
        rc = 1;
        goto stop_child;
    }
    if (m.me == m.launcher) {
        printf("  services     replay %s, paramserver %s, control %s\n", replay_arg, ps_arg, control);
        fflush(stdout);
    }

    /* 5. The learners' communicator (collective over the world), then the roles run. */
    MPI_Comm_split(MPI_COMM_WORLD, kind == K_LEARNER ? 0 : MPI_UNDEFINED, index, &learners);
    char idx[32];
    snprintf(idx, sizeof idx, "%d", index);
    if (kind == K_LAUNCHER) {
        static const fl_launch_ops_t ops = {mpi_dead, mpi_stop, mpi_unclean, mpi_pids};
        rc = fl_launch_monitor(L, replay_list, ps_list, &ops, &m, 0, "");
        int left = 0;
        char who[160] = "";
        for (int r = 0; r < m.size; r++)
            if (r != m.launcher && !m.done[r]) {
                if (!left) describe_rank(&m, r, who, sizeof who);
                left++;
            }
        if (left) {
            fprintf(stderr, "fleet run: %d rank%s did not stop (first: %s); ending the job\n", left,
                    left == 1 ? "" : "s", who);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, rc ? rc : 1);
        }
        for (int r = 0; r < m.size; r++) {
            if (r == m.launcher) continue;
            int one = 1;
            MPI_Send(&one, 1, MPI_INT, r, TAG_FINISH, MPI_COMM_WORLD);
        }
    } else if (kind == K_LEARNER) {
        fl_reduce_t *reduce = NULL;
        fl_err_t e;
        fl_err_init(&e);
        int lr = 0;
        if (fl_reduce_create_mpi(&learners, &reduce, &e) != FL_OK) {
            fprintf(stderr, "fleet run: learner %d: %s\n", index, e.msg);
            lr = 1;
        } else {
            char *args[] = {"learner",   "--config",    tmp_cfg, "--index", idx, "--replay", replay_arg,
                            "--paramserver", ps_arg, "--control", control, NULL};
            lr = fl_learner_main((int)(sizeof args / sizeof args[0]) - 1, args, reduce);
        }
        fl_reduce_destroy(reduce);
        char what[64];
        snprintf(what, sizeof what, "exited with status %d", lr);
        report_done_and_wait(&m, lr == 0, (int)getpid(), what);
    } else if (kind == K_ACTOR) {
        char *args[] = {"--config", tmp_cfg,  "--index",   idx,     "--replay", replay_arg,
                        "--paramserver", ps_arg, "--control", control, NULL};
        if (fl_proc_spawn(&child, "actor", index, args, 0, 0) != 0) {
            report_done_and_wait(&m, 0, 0, "could not be started");
        } else {
            supervise_child(&m, &child);
        }
    } else {
        supervise_child(&m, &child);
    }
    goto finalize;

stop_child:
    if (child.running) {
        kill(child.pid, SIGTERM);
        waitpid(child.pid, NULL, 0);
    }
finalize:
    if (learners != MPI_COMM_NULL) MPI_Comm_free(&learners);
    if (m.me != m.launcher && tmp_cfg[0]) {
        unlink(tmp_cfg);
        char path[300];
        snprintf(path, sizeof path, "%s.replay_addrs", tmp_cfg);
        unlink(path);
    }
    fl_launch_destroy(L);
    free(replay_list);
    free(ps_list);
    free(addrs);
    free(m.ids);
    free(m.kind);
    free(m.index);
    free(m.done);
    free(m.msg);
    MPI_Finalize();
    return rc;
}
#endif
