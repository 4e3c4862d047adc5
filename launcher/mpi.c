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
 *      rank learns every rank's role and host (MPI_Allgather), then greets the launcher,
 *      paced by rank (greet_launcher: MPI's connection to it made while all is quiet).
 *   2. Addresses. A fleet on one host binds run.bind_host (loopback by default). Across
 *      hosts each rank binds its own host's address: run.interface's IPv4 address, or
 *      the first interface that is up and not loopback (common/netif.h), never 0.0.0.0.
 *   2b. TLS. With run.tls_dir every rank and role uses it. Without it, when services bind
 *      an interface's address (across hosts, or run.interface) and run.insecure is false,
 *      the launcher makes per-job credentials (launcher/security.h) for every rank's host name
 *      and address and sends the files to every rank (MPI_Bcast); each keeps them in a
 *      0700 folder of its own (the launcher in the run folder's tls/) and hands that
 *      folder to its roles as run.tls_dir. On one host's loopback: plaintext, as alone.
 *   3. The launcher writes the effective config and starts fleet.Control (launcher/launch.h);
 *      the config text and Control's address go to every rank (MPI_Bcast), which keeps a
 *      copy in a temporary file for its role.
 *   4. Service ranks start `fleet replay|paramserver --listen HOST:0` as a child process,
 *      read its address, and every rank gathers all addresses (MPI_Allgather).
 *   5. Actor ranks start `fleet actor` as a child with those addresses. Learner ranks
 *      run the learner in their own process (it needs MPI): a communicator of the
 *      learners (MPI_Comm_split) carries their gradient all-reduce (learner/reduce.h).
 *   6. The launcher starts run.evaluators `fleet evaluator` children on its own host
 *      (they need only the parameter servers' and Control's addresses, and no rank),
 *      logging to the run's logs/ folder, and runs the progress loop of launcher/launch.h;
 *      its evaluators stop with the actors. A service or actor rank restarts its child
 *      when it dies on its own, by the rule of launcher/proc.h and with the arguments of one
 *      machine (launcher/local.c), and sends the launcher an EVENT for each death and restart
 *      (events.log, the restart counts); the launcher restarts its evaluators the same
 *      way (a gorila-mode parameter-server shard from its checkpoint, with --restore).
 *      A learner rank is not restarted.
 *      A rank whose role ends (asked to, cleanly, or past the restart rule)
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
 * launcher (or by the rank that found it, naming its host) and every rank exits 2.
 *
 * Files: this one (what every rank runs: 1, 2, 4, 5, the service and actor ranks'
 * supervision, the end), launcher/mpi_job.c (2b and 3), launcher/mpi_watch.c (6: the
 * launcher rank's watch and its evaluators); launcher/mpi_internal.h is what they share. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/stop.h"
#include "launcher/launch.h"
#include "launcher/options.h"
#include "launcher/proc.h"
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
            FL_CONFIG_ENUM_STR(c, learner, mode), (long long)c->actor_count);
    fprintf(f,
            "# on one host add --oversubscribe when it has fewer than %lld slots; as root add --allow-run-as-root;\n"
            "# the binary and the config must be at the same path on every host (docs/multi-host.md)\n",
            K);
    fprintf(f, "mpirun%s%s --bind-to none -np %lld %s run%s%s\n", hostfile && hostfile[0] ? " --hostfile " : "",
            hostfile && hostfile[0] ? hostfile : "", K, self, cfg_file && cfg_file[0] ? " " : "",
            cfg_file && cfg_file[0] ? cfg_file : "");
}

#ifdef FLEET_HAVE_MPI
#include <mpi.h>

#include "common/netif.h"
#include "launcher/mpi_internal.h"

const char *const fl__mpi_kind_names[K_COUNT] = {"launcher", "replay", "paramserver", "learner", "actor"};

static int kind_from_name(const char *s) {
    for (int k = 0; k < K_COUNT; k++)
        if (strcmp(s, fl__mpi_kind_names[k]) == 0) return k;
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

int fl__mpi_any_rank(int bad) {
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

/* 1. Who is where, and which role. 0, or the exit code (the same on every rank). */
static int gather_roles(rank_run_t *X, const char *role) {
    mpi_state_t *m = &X->m;
    snprintf(X->me.role, sizeof X->me.role, "%s", role);
    gethostname(X->me.host, sizeof X->me.host - 1);
    m->ids = calloc((size_t)m->size, sizeof *m->ids);
    m->kind = calloc((size_t)m->size, sizeof *m->kind);
    m->index = calloc((size_t)m->size, sizeof *m->index);
    m->done = calloc((size_t)m->size, sizeof *m->done);
    m->msg = calloc((size_t)m->size, sizeof *m->msg);
    X->addrs = calloc((size_t)m->size, ADDR_LEN);
    if (fl__mpi_any_rank(!m->ids || !m->kind || !m->index || !m->done || !m->msg || !X->addrs)) {
        fprintf(stderr, "fleet run (rank %d): out of memory\n", m->me);
        return 1;
    }
    MPI_Allgather(&X->me, (int)sizeof X->me, MPI_BYTE, m->ids, (int)sizeof X->me, MPI_BYTE, MPI_COMM_WORLD);
    char why[600] = "";
    if (make_plan(&X->cfg, m, why, sizeof why) != 0) {
        if (m->me == 0) fprintf(stderr, "fleet run: %s\n", why);
        return 2;
    }
    X->kind = m->kind[m->me];
    X->index = m->index[m->me];
    return 0;
}

/* 2. The address this rank's services bind: run.bind_host when the whole fleet is on one
 * host (and run.interface is unset), else this host's interface address. */
static int choose_address(rank_run_t *X) {
    const mpi_state_t *m = &X->m;
    int one_host = 1;
    for (int r = 1; r < m->size; r++) one_host &= strcmp(m->ids[r].host, m->ids[0].host) == 0;
    int bad = 0;
    X->netif = !(one_host && !X->cfg.run_interface[0]);
    if (!X->netif) {
        snprintf(X->host, sizeof X->host, "%s", X->cfg.run_bind_host);
    } else {
        fl_err_t e;
        fl_err_init(&e);
        if (fl_netif_ipv4(X->cfg.run_interface, X->host, sizeof X->host, &e) != FL_OK) {
            fprintf(stderr, "fleet run (rank %d on %s): %s\n", m->me, X->me.host, e.msg);
            bad = 1;
        }
    }
    if (!one_host && strcmp(X->cfg.run_bind_host, "127.0.0.1") != 0 && m->me == 0)
        FL_WARN("run.bind_host = %s is ignored across hosts: each host binds its own address (run.interface)",
                X->cfg.run_bind_host);
    return fl__mpi_any_rank(bad) ? 2 : 0;
}

/* SIGTERM to this rank's child, if it runs, and waits for it. */
static void stop_child(rank_run_t *X) {
    if (X->child.running) {
        kill(X->child.pid, SIGTERM);
        waitpid(X->child.pid, NULL, 0);
    }
}

/* A service's checkpoint to start from (into file): a gorila parameter-server shard's, or
 * a replay shard's without the write-ahead log (with it, the shard recovers from
 * run.checkpoint_dir by itself); 1 when it should and the file is there. */
static int service_checkpoint(const rank_run_t *X, char *file, size_t len) {
    const char *dir = X->cfg.run_checkpoint_dir;
    int gorila_ps = X->kind == K_PARAMSERVER && X->cfg.learner_mode == FL_CFG_MODE_GORILA;
    if (gorila_ps)
        snprintf(file, len, "%s/paramserver-%d.safetensors", dir, X->index);
    else
        snprintf(file, len, "%s/shard-%d.ckpt", dir, X->index);
    return (gorila_ps || (X->kind == K_REPLAY && !fl_options_replay_wal(&X->cfg))) && dir[0] && access(file, R_OK) == 0;
}

/* A service rank's `fleet replay|paramserver --listen HOST:0`; its address into addr. 0, or
 * 1 after printing why (the child, if it still runs, is killed). */
static int spawn_service(rank_run_t *X, char *addr) {
    fl_child_t *c = &X->child;
    const char *name = fl__mpi_kind_names[X->kind];
    char idx[32], listen[FL_CONFIG_STRING_MAX + 8];
    snprintf(idx, sizeof idx, "%d", X->index);
    snprintf(listen, sizeof listen, "%s:0", X->host);
    char file[FL_CONFIG_STRING_MAX + 32];
    const int restore = X->resume_dir[0] && service_checkpoint(X, file, sizeof file);
    char *args[] = {"--config",
                    X->tmp_cfg,
                    "--shard",
                    idx,
                    "--listen",
                    listen,
                    "--control",
                    X->control,
                    "--set",
                    X->tls_set,
                    restore ? "--restore" : NULL,
                    file,
                    NULL};
    X->rule.started_at = fl_clock_sec();
    if (fl_proc_spawn(c, name, X->index, args, 1, 60) == 0) {
        snprintf(addr, ADDR_LEN, "%s", c->addr);
        return 0;
    }
    char st[128] = "did not report its address";
    for (int w = 0; w < 100 && c->pid; w++) {
        if (fl_proc_reap(c, 1)) {
            fl_proc_describe_status(c->status, st, sizeof st);
            break;
        }
        fl_sleep_sec(0.02);
    }
    fprintf(stderr, "fleet run: %s %d (rank %d on %s) %s while starting\n", name, X->index, X->m.me, X->me.host, st);
    if (c->running) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        c->running = 0;
    }
    return 1;
}

/* 4. Services start and every rank gathers their addresses (then share_addresses). */
static int start_services(rank_run_t *X) {
    char my_addr[ADDR_LEN] = "";
    int bad = 0;
    if (X->kind == K_REPLAY || X->kind == K_PARAMSERVER) bad = spawn_service(X, my_addr);
    MPI_Allgather(my_addr, ADDR_LEN, MPI_CHAR, X->addrs, ADDR_LEN, MPI_CHAR, MPI_COMM_WORLD);
    if (fl__mpi_any_rank(bad)) {
        stop_child(X);
        return 1;
    }
    return 0;
}

/* The services' addresses as the learners' and actors' options; the launcher prints them. */
static int share_addresses(rank_run_t *X) {
    const mpi_state_t *m = &X->m;
    X->replay_list = kind_list(m, X->addrs, K_REPLAY);
    X->ps_list = kind_list(m, X->addrs, K_PARAMSERVER);
    int bad = !X->replay_list || !X->ps_list;
    if (!bad) {
        char path[300];
        snprintf(path, sizeof path, "%s.replay_addrs", X->tmp_cfg);
        bad = fl_launch_address_arg(X->replay_list, path, X->replay_arg, sizeof X->replay_arg) != 0 ||
              strlen(X->ps_list) >= sizeof X->ps_arg;
        if (!bad) snprintf(X->ps_arg, sizeof X->ps_arg, "%s", X->ps_list);
        if (bad && m->me == m->launcher)
            fprintf(stderr, "fleet run: the service addresses do not fit in an option (%zu parameter-server bytes)\n",
                    strlen(X->ps_list));
    }
    if (fl__mpi_any_rank(bad)) {
        stop_child(X);
        return 1;
    }
    if (m->me == m->launcher) {
        printf("  services     replay %s, paramserver %s, control %s\n", X->replay_arg, X->ps_arg, X->control);
        fflush(stdout);
    }
    return 0;
}

/* A learner rank runs the learner in this process, with the learners' all-reduce. */
static void run_learner(rank_run_t *X) {
    fl_reduce_t *reduce = NULL;
    fl_err_t e;
    fl_err_init(&e);
    int lr = 0;
    if (fl_reduce_create_mpi(&X->learners, &reduce, &e) != FL_OK) {
        fprintf(stderr, "fleet run: learner %d: %s\n", X->index, e.msg);
        lr = 1;
    } else {
        char idx[32], file[FL_CONFIG_STRING_MAX + 32];
        snprintf(idx, sizeof idx, "%d", X->index);
        /* resuming: learner 0's checkpoint, as on one machine (every learner starts from it) */
        snprintf(file, sizeof file, "%s/learner-0.safetensors", X->cfg.run_checkpoint_dir);
        char *args[] = {"learner",     "--config",
                        X->tmp_cfg,    "--index",
                        idx,           "--replay",
                        X->replay_arg, "--paramserver",
                        X->ps_arg,     "--control",
                        X->control,    "--set",
                        X->tls_set,    X->resume_dir[0] ? "--resume" : NULL,
                        file,          NULL};
        int argc = 0;
        while (args[argc]) argc++;
        lr = X->learner_main(argc, args, reduce);
    }
    fl_reduce_destroy(reduce);
    char what[64];
    snprintf(what, sizeof what, "exited with status %d", lr);
    report_done_and_wait(&X->m, lr == 0, (int)getpid(), what);
}

/* An actor rank's `fleet actor`; a restart (restart = restarts so far, >= 1) runs it as
 * `--incarnation restart`. 0 or -1. */
static int spawn_actor(rank_run_t *X, int restart) {
    char idx[32], inc[32];
    snprintf(idx, sizeof idx, "%d", X->index);
    snprintf(inc, sizeof inc, "%d", restart);
    /* resuming: from its state file (actor-<i>.state); a restarted one starts afresh */
    const char *how = restart ? "--incarnation" : X->resume_dir[0] ? "--resume" : NULL;
    char *args[] = {"--config", X->tmp_cfg,  "--index",  idx,     "--replay", X->replay_arg, "--paramserver",
                    X->ps_arg,  "--control", X->control, "--set", X->tls_set, (char *)how,   restart ? inc : NULL,
                    NULL};
    X->rule.started_at = fl_clock_sec();
    return fl_proc_spawn(&X->child, "actor", X->index, args, 0, 0);
}

/* Sends the launcher a supervision event for its events.log: role "" for a death, the
 * role for a restart (counted as one). */
static void send_event(const mpi_state_t *m, const char *role, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void send_event(const mpi_state_t *m, const char *role, const char *fmt, ...) {
    event_msg_t e;
    memset(&e, 0, sizeof e);
    snprintf(e.role, sizeof e.role, "%s", role);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.text, sizeof e.text, fmt, ap);
    va_end(ap);
    MPI_Send(&e, (int)sizeof e, MPI_BYTE, m->launcher, TAG_EVENT, MPI_COMM_WORLD);
}

/* A service rank's child again after its death, on the address it first bound (its
 * clients know no other); a replay shard recovers from its checkpoint folder (or
 * --restore of its checkpoint without the write-ahead log), a gorila parameter-server
 * shard gets --restore of its paramserver-<shard>.safetensors, as on one machine. 0, or -1
 * (a child that came up elsewhere is killed, and seen dead on the next look). */
static int respawn_service(rank_run_t *X) {
    fl_child_t *c = &X->child;
    const char *name = fl__mpi_kind_names[X->kind];
    char idx[32], listen[ADDR_LEN], file[FL_CONFIG_STRING_MAX + 32];
    snprintf(idx, sizeof idx, "%d", X->index);
    snprintf(listen, sizeof listen, "%s", X->addrs + (size_t)X->m.me * ADDR_LEN);
    const int restore = service_checkpoint(X, file, sizeof file);
    char *args[] = {"--config",
                    X->tmp_cfg,
                    "--shard",
                    idx,
                    "--listen",
                    listen,
                    "--control",
                    X->control,
                    "--set",
                    X->tls_set,
                    restore ? "--restore" : NULL,
                    file,
                    NULL};
    X->rule.started_at = fl_clock_sec();
    if (fl_proc_spawn(c, name, X->index, args, 1, 120) == 0) {
        if (strcmp(c->addr, listen) == 0) return 0;
        send_event(&X->m, "", "%s %d (rank %d on %s) came back on %s, not on %s where its clients look: stopping it",
                   name, X->index, X->m.me, X->me.host, c->addr, listen);
    }
    if (c->pid > 0 && c->running) kill(c->pid, SIGKILL); /* reaped, and seen dead, on the next look */
    return -1;
}

/* A child asked to be killed as hung (TAG_KILL) that used CPU this recently is starved
 * (an oversubscribed host), not hung: it is left running (an event says so). */
#define STARVED_WINDOW_S 15.0

/* Watches this rank's child until it ends, forwarding STOP (and a signal to this rank)
 * as SIGTERM: 1 when it was asked to end, 0 when it ended on its own. */
static int watch_child(mpi_state_t *m, fl_child_t *c) {
    int termed = 0;
    /* the child's CPU time, sampled every second: when it last moved */
    double cpu_seen = -1, cpu_moved_at = fl_clock_sec(), next_cpu_look = 0;
    while (c->running) {
        const double now = fl_clock_sec();
        if (now >= next_cpu_look) {
            const double cpu = fl_proc_cpu_of(c->pid);
            if (cpu > cpu_seen + 0.005) cpu_moved_at = now;
            if (cpu >= 0) cpu_seen = cpu;
            next_cpu_look = now + 1.0;
        }
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(m->launcher, TAG_STOP, MPI_COMM_WORLD, &flag, &st);
        if (flag) {
            int dummy = 0;
            MPI_Recv(&dummy, 1, MPI_INT, m->launcher, TAG_STOP, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        if ((flag || fl_stop_requested()) && !termed) {
            fl_proc_unidle(c->pid); /* an actor under SCHED_IDLE gets the CPU to flush and exit */
            kill(c->pid, SIGTERM);
            termed = 1;
        }
        int hung = 0; /* the launcher found the child hung: a death, restarted as one */
        MPI_Iprobe(m->launcher, TAG_KILL, MPI_COMM_WORLD, &hung, &st);
        if (hung) {
            int dummy = 0;
            MPI_Recv(&dummy, 1, MPI_INT, m->launcher, TAG_KILL, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            /* silent but using CPU (within the last STARVED_WINDOW_S): starved of the cores
             * by the processes beside it, not hung; a stopped or blocked one is killed */
            if (!termed && now - cpu_moved_at < STARVED_WINDOW_S)
                send_event(m, "",
                           "%s %d (rank %d on %s) is silent but used CPU %.0f s ago: starved, not hung; left "
                           "running",
                           c->role, c->index, m->me, m->ids[m->me].host, now - cpu_moved_at);
            else if (!termed)
                kill(c->pid, SIGKILL);
        }
        if (fl_proc_reap(c, 1)) break;
        fl_sleep_sec(0.02);
    }
    return termed;
}

/* Waits s seconds before a restart: 1 when STOP (or a signal to this rank) came meanwhile. */
static int wait_restart(mpi_state_t *m, double s) {
    double until = fl_clock_sec() + s;
    while (fl_clock_sec() < until) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(m->launcher, TAG_STOP, MPI_COMM_WORLD, &flag, &st);
        if (flag) {
            int dummy = 0;
            MPI_Recv(&dummy, 1, MPI_INT, m->launcher, TAG_STOP, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            return 1;
        }
        if (fl_stop_requested()) return 1;
        MPI_Iprobe(m->launcher, TAG_KILL, MPI_COMM_WORLD, &flag, &st);
        if (flag) { /* meant for the child that already died: not for its successor */
            int dummy = 0;
            MPI_Recv(&dummy, 1, MPI_INT, m->launcher, TAG_KILL, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        fl_sleep_sec(0.02);
    }
    return 0;
}

/* A service or actor rank: watches its child and restarts it when it dies on its own (an
 * end other than exit 0 or SIGTERM), by the rule of launcher/proc.h and with the arguments of
 * one machine (launcher/local.c): a service on the address it first bound (a gorila-mode
 * parameter-server shard from its checkpoint), an actor with --incarnation k. Each death and restart goes to the
 * launcher as EVENT; the end of its role (asked for, clean, or past the rule) as DONE. */
static void supervise_child(rank_run_t *X) {
    mpi_state_t *m = &X->m;
    fl_child_t *c = &X->child;
    const char *name = fl__mpi_kind_names[X->kind];
    int restarts = 0;
    char what[128], msg[256];
    for (;;) {
        int asked = watch_child(m, c);
        fl_proc_describe_status(c->status, what, sizeof what);
        if (asked || fl_stop_requested() || fl_proc_clean_exit(c->status)) break;
        const char *why = NULL;
        double wait = fl_restart_after(&X->rule, fl_clock_sec(), X->cfg.run_max_restarts, c->status, &why);
        if (why) {
            snprintf(msg, sizeof msg, "%s; not restarted: %s", what, why);
            report_done_and_wait(m, 0, (int)c->pid, msg);
            return;
        }
        if (X->rule.quick)
            send_event(m, "",
                       "%s %d (rank %d on %s, pid %d) %s; restarting it in %.1f s (restart %d; %d in a row "
                       "within 10 s of its start, of run.max_restarts = %lld)",
                       name, X->index, m->me, X->me.host, (int)c->pid, what, wait, restarts + 1, X->rule.quick,
                       (long long)X->cfg.run_max_restarts);
        else
            send_event(m, "", "%s %d (rank %d on %s, pid %d) %s; restarting it in %.1f s (restart %d)", name, X->index,
                       m->me, X->me.host, (int)c->pid, what, wait, restarts + 1);
        if (wait_restart(m, wait)) {
            report_done_and_wait(m, 1, (int)c->pid, "was waiting for its restart when the fleet stopped");
            return;
        }
        restarts++;
        if ((X->kind == K_ACTOR ? spawn_actor(X, restarts) : respawn_service(X)) == 0)
            send_event(m, name, "restarted %s %d (rank %d on %s, pid %d)", name, X->index, m->me, X->me.host,
                       (int)c->pid);
    }
    report_done_and_wait(m, fl_proc_clean_exit(c->status), (int)c->pid, what);
}

/* An actor rank starts `fleet actor` and supervises it. */
static void run_actor(rank_run_t *X) {
    if (spawn_actor(X, 0) != 0)
        report_done_and_wait(&X->m, 0, 0, "could not be started");
    else
        supervise_child(X);
}

/* 5 and 6. The learners' communicator (collective over the world), then the roles run.
 * Returns the launcher's exit code, 0 on the other ranks. */
static int run_role(rank_run_t *X) {
    MPI_Comm_split(MPI_COMM_WORLD, X->kind == K_LEARNER ? 0 : MPI_UNDEFINED, X->index, &X->learners);
    switch (X->kind) {
    case K_LAUNCHER: return fl__mpi_run_launcher(X);
    case K_LEARNER: run_learner(X); return 0;
    case K_ACTOR: run_actor(X); return 0;
    default: supervise_child(X); return 0;
    }
}

/* Frees what the phases made, removes a rank's config copy and ends MPI. */
static void finish(rank_run_t *X) {
    mpi_state_t *m = &X->m;
    if (X->learners != MPI_COMM_NULL) MPI_Comm_free(&X->learners);
    if (m->me != m->launcher && X->tmp_cfg[0]) {
        unlink(X->tmp_cfg);
        char path[300];
        snprintf(path, sizeof path, "%s.replay_addrs", X->tmp_cfg);
        unlink(path);
    }
    fl_launch_destroy(X->L);
    if (X->tls_own) fl__mpi_remove_job_dir(X->tls_dir);
    for (int i = 0; i < 5; i++) free(X->job_files[i]);
    free(X->replay_list);
    free(X->ps_list);
    free(X->addrs);
    free(m->ids);
    free(m->kind);
    free(m->index);
    free(m->done);
    free(m->msg);
    MPI_Finalize();
}

/* Rank r greets the launcher HELLO_PACE_S x r after the start; the launcher waits for
 * every greeting up to HELLO_WAIT_S past the last one's turn. */
#define HELLO_PACE_S 0.005
#define HELLO_WAIT_S 30.0

/* Every rank's link to the launcher, made at the start while the machine is quiet. Open
 * MPI connects two ranks at their first message, and every rank's first message to the
 * launcher used to be its DONE at the stop: a wave of hundreds of connections at once,
 * while the machine was at its busiest, which timed out on an overloaded one (264 ranks on
 * 2 cores: 77 never connected, their DONE never came, and the stop ended in MPI_Abort).
 * Now each rank sends one greeting right after the roles are known, paced by its rank, and
 * the launcher takes them; one it does not hear in time is named, and the run goes on
 * (that rank may still connect later). */
static void greet_launcher(const mpi_state_t *m) {
    if (m->me != m->launcher) {
        fl_sleep_sec(HELLO_PACE_S * m->me);
        int one = 1;
        MPI_Send(&one, 1, MPI_INT, m->launcher, TAG_HELLO, MPI_COMM_WORLD);
        return;
    }
    int heard = 0;
    const double until = fl_clock_sec() + HELLO_PACE_S * m->size + HELLO_WAIT_S;
    while (heard < m->size - 1 && fl_clock_sec() < until) {
        int flag = 0, v;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_HELLO, MPI_COMM_WORLD, &flag, &st);
        if (!flag) {
            fl_sleep_sec(0.001);
            continue;
        }
        MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, TAG_HELLO, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        heard++;
    }
    if (heard < m->size - 1)
        fprintf(stderr,
                "fleet run: %d of %d ranks did not reach the launcher's rank in %.0f s at the start (MPI's "
                "connections); the run goes on\n",
                m->size - 1 - heard, m->size - 1, HELLO_PACE_S * m->size + HELLO_WAIT_S);
}

int fl_mpi_run(const fl_config_t *cfg_in, const char *cfg_file, const char *role, const char *resume_dir,
               fl_learner_main_fn learner_main) {
    int provided = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    rank_run_t X;
    memset(&X, 0, sizeof X);
    MPI_Comm_rank(MPI_COMM_WORLD, &X.m.me);
    MPI_Comm_size(MPI_COMM_WORLD, &X.m.size);
    X.cfg = *cfg_in;
    X.cfg_file = cfg_file;
    X.resume_dir = resume_dir ? resume_dir : "";
    X.learner_main = learner_main;
    X.learners = MPI_COMM_NULL;
    fl_proc_init();
    fl_stop_install();
    int rc = gather_roles(&X, role);
    if (!rc) greet_launcher(&X.m);
    if (!rc) rc = choose_address(&X);
    if (!rc) rc = fl__mpi_job_security(&X);
    if (!rc) rc = fl__mpi_start_control(&X);
    if (!rc) rc = fl__mpi_broadcast_config(&X);
    snprintf(X.tls_set, sizeof X.tls_set, "run.tls_dir=%s", X.tls_dir);
    if (!rc) rc = start_services(&X);
    if (!rc) rc = share_addresses(&X);
    if (!rc) rc = run_role(&X);
    finish(&X);
    return rc;
}
#endif
