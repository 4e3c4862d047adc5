/* mpi_internal: what the three files of `fleet run` under mpirun share (launcher/mpi.c
 * describes the whole): mpi.c runs on every rank (the plan, the addresses, the services,
 * the learner and actor ranks, the end), mpi_job.c sets the job up (its TLS credentials,
 * Control, the config sent to every rank) and mpi_watch.c is the launcher rank's watch of
 * the other ranks and of its evaluators. Not for use outside launcher/. */
#ifndef FL_MPI_INTERNAL_H
#define FL_MPI_INTERNAL_H

#ifdef FLEET_HAVE_MPI
#include <mpi.h>

#include "common/config.h"
#include "launcher/launch.h"
#include "launcher/proc.h"

enum { K_LAUNCHER, K_REPLAY, K_PARAMSERVER, K_LEARNER, K_ACTOR, K_COUNT };
extern const char *const fl__mpi_kind_names[K_COUNT]; /* "launcher", "replay", ... */

enum { TAG_DONE = 7201, TAG_STOP = 7202, TAG_FINISH = 7203, TAG_EVENT = 7204, TAG_KILL = 7205, TAG_HELLO = 7206 };
#define ADDR_LEN 256

typedef struct rank_id {
    char role[16]; /* --role, "" in SPMD */
    char host[64];
} rank_id_t;

typedef struct done_msg {
    int clean; /* exit 0 or SIGTERM */
    int pid;
    char what[256]; /* "exited with status 1" */
} done_msg_t;

/* A rank's supervision event for the launcher's events.log: its child's death, or its
 * restart (role set: counted as a restart of that role). */
typedef struct event_msg {
    char role[16]; /* "" for a death */
    char text[480];
} event_msg_t;

typedef struct mpi_state {
    int size, me, launcher;
    rank_id_t *ids;
    int *kind, *index;
    int *done; /* launcher: DONE received */
    done_msg_t *msg;
    int stopping;
} mpi_state_t;

/* One rank's run of the fleet: what fl_mpi_run's phases share. */
typedef struct rank_run {
    mpi_state_t m;
    fl_config_t cfg;
    const char *cfg_file;
    const char
        *resume_dir; /* fleet run --resume DIR: every rank's roles continue from the checkpoints ("" = a new run) */
    fl_learner_main_fn learner_main; /* the learner rank's main (the verb's) */
    rank_id_t me;
    int kind, index;                 /* this rank's role */
    char host[FL_CONFIG_STRING_MAX]; /* the address this rank's services bind */
    char control[300];               /* Control's address */
    char tmp_cfg[256];               /* the config this rank's role reads (the launcher's: config.ini) */
    fl_launch_t *L;                  /* the launcher's */
    char *addrs;                     /* every rank's service address, ADDR_LEN each ("" for none) */
    char *replay_list, *ps_list;     /* the services' addresses in shard order (malloc'd) */
    char replay_arg[256], ps_arg[256];
    fl_child_t child;  /* a service rank's or an actor rank's process */
    fl_restart_t rule; /* the child's restart rule (launcher/proc.h) */
    MPI_Comm learners;
    int netif;                               /* services bind an interface's address (across hosts, or run.interface) */
    char tls_dir[FL_CONFIG_STRING_MAX];      /* the credentials this rank's roles use ("" = none) */
    char tls_set[FL_CONFIG_STRING_MAX + 16]; /* "run.tls_dir=<tls_dir>", the roles' --set */
    int tls_own;                             /* tls_dir is this rank's per-job copy (removed at the end) */
    char *job_files[5];                      /* the launcher's per-job credentials, until they are in the run folder */
    long long job_len[5];
} rank_run_t;

/* mpi.c: every rank agrees on failure: 1 on every rank when `bad` is set on any. */
int fl__mpi_any_rank(int bad);

/* mpi_job.c: 2b, TLS for the job; 3a, the run folder and Control, their address to every
 * rank; 3b, the effective config's text to every rank. Each returns 0, or the exit code
 * (the same on every rank). */
int fl__mpi_job_security(rank_run_t *X);
int fl__mpi_start_control(rank_run_t *X);
int fl__mpi_broadcast_config(rank_run_t *X);
/* Removes a credentials folder this job made. */
void fl__mpi_remove_job_dir(const char *dir);

/* mpi_watch.c: the launcher rank: its evaluators, the progress loop (launcher/launch.h)
 * with the other ranks watched, then FINISH to every rank, or MPI_Abort when a rank did
 * not stop. Returns the exit code. */
int fl__mpi_run_launcher(rank_run_t *X);

#endif
#endif
