/* proc: the role processes a launcher starts on its own machine (fork + exec of this
 * binary), for `fleet run` and for the ranks of an MPI fleet (launcher/mpi.c).
 *
 * A child runs `fleet ROLE args...` in its own process group (a terminal's Ctrl-C
 * reaches only the launcher, which stops children in order) and gets SIGTERM when its
 * parent dies. A service child writes its bound address and a newline on its fd 3
 * ("ready pipe"). Exit statuses are described in words for reports; fl_restart_after is
 * the restart rule both launchers share. One owner thread. */
#ifndef FL_LAUNCHER_PROC_H
#define FL_LAUNCHER_PROC_H

#include <stddef.h>
#include <sys/types.h>

#include "common/status.h"

typedef struct fl_child {
    char role[16];
    int index;
    pid_t pid;
    char addr[256]; /* a service's address, once ready */
    int running;
    int status;                     /* waitpid status once it exited */
    char log[640];                  /* its log file ("" = it writes to the launcher's stdout and stderr) */
    long log_seen;                  /* bytes of the log already looked at by fl_proc_echo_logs */
    unsigned long long incarnation; /* processes started in this slot (its FLEET_CREDENTIAL's N) */
} fl_child_t;

/* Children started from now on write their stdout and stderr to DIR/<role>-<index>.log
 * (appending), instead of the launcher's terminal; NULL or "" = the terminal. The folder
 * must exist. */
void fl_proc_set_log_dir(const char *dir);
/* Echoes to stderr the lines that kids' logs gained since the last call and that a
 * reader must see: warnings and errors ("HH:MM:SS.mmm W ..." and "... E ..."), and
 * anything that is not a log line (a role's last words on failure). Info and debug lines
 * stay in the files. Reads only logs that grew. */
void fl_proc_echo_logs(fl_child_t *kids, int n);
/* The last `lines` lines of c's log, into buf (""), for a report of its death. */
void fl_proc_log_tail(const fl_child_t *c, int lines, char *buf, size_t len);

/* Children started from now on get FLEET_CREDENTIAL (common/credential.h) for their role,
 * index and incarnation (the slot's count of starts): from the run secret (a launcher),
 * or, with fl_proc_set_role_key, for that one role and index only (an MPI rank that
 * starts its role for a launcher elsewhere; other roles then get none). The secret or key
 * is copied. */
void fl_proc_set_secret(const unsigned char secret[16]);
void fl_proc_set_role_key(const char *role, int index, const unsigned char key[16]);

/* Finds this process's own executable (for exec); 0 or -1 with errno. Call once first. */
int fl_proc_init(void);
/* Starts `fleet ROLE extra...`; with want_ready, *ready_fd gets the pipe on which the
 * child writes its address. 0 or -1. */
int fl_proc_spawn_start(fl_child_t *c, const char *role, int index, char *const extra[], int want_ready, int *ready_fd);
/* Waits up to timeout_s for the address on ready_fd (closed here): 0, or -1 when the
 * child closed it without one, or time ran out. */
int fl_proc_spawn_wait(fl_child_t *c, int ready_fd, double timeout_s);
/* Both of the above. */
int fl_proc_spawn(fl_child_t *c, const char *role, int index, char *const extra[], int want_ready, double timeout_s);
/* "exited with status 1", "was killed by signal 9 (Killed)". */
void fl_proc_describe_status(int status, char *buf, size_t len);
/* Reaps exited children among kids[0..n), each by its pid (other children of the process
 * are left to their owners); returns the first that exited, or NULL. */
fl_child_t *fl_proc_reap(fl_child_t *kids, int n);
/* The whole file at path (malloc'd and NUL-terminated; its length in *len when len is not
 * NULL), or NULL (*len = -1) when it cannot be read, is empty or holds more than max bytes. */
char *fl_proc_read_file(const char *path, size_t max, long long *len);
/* The CPU seconds process pid has used (all its threads, /proc/PID/stat), or -1. */
double fl_proc_cpu_of(pid_t pid);
/* Moves every thread of process pid that runs under SCHED_IDLE (actor.sched_idle) back
 * to SCHED_OTHER, its niceness kept: a process being stopped must get the CPU to flush
 * and exit even while the learner keeps every core busy. Best effort: a thread this
 * process may not change (no CAP_SYS_NICE and RLIMIT_NICE too low) stays as it is. */
void fl_proc_unidle(pid_t pid);
/* SIGTERM (after fl_proc_unidle) to every running child whose role is named in `roles`
 * (e.g. "replay paramserver"), waits up to grace_s, then SIGKILLs whatever is left (logged). */
void fl_proc_stop_roles(fl_child_t *kids, int n, const char *roles, double grace_s);
/* 1 if the status is a clean end: exit 0 or SIGTERM. */
int fl_proc_clean_exit(int status);
/* The first executable regular file named prog in PATH's folders (an empty entry is the
 * working directory), as an absolute path into out: 0, or -1 when there is none (or no
 * PATH). For helper programs (gnuplot, ffmpeg), checked before they are needed. */
int fl_proc_find_on_path(const char *prog, char *out, size_t len);
/* mkdir -p; 0 or -1 with errno. */
int fl_proc_mkdir_p(const char *path);

/* The restart rule of a supervised role process (launcher/local.c, launcher/mpi.c): one that dies
 * within FL_RESTART_STABLE_S of its start died quickly; the first restart waits
 * FL_RESTART_FIRST_DELAY_S, each one after a quick death twice as long up to
 * FL_RESTART_MAX_DELAY_S, and run.max_restarts + 1 quick deaths in a row give up (a role
 * that cannot come up). One that ran longer starts over, with no limit on how often. */
#define FL_RESTART_FIRST_DELAY_S 0.2
#define FL_RESTART_MAX_DELAY_S 30.0
#define FL_RESTART_STABLE_S 10.0

typedef struct fl_restart {
    double started_at; /* of its current incarnation (set at each start) */
    int quick;         /* deaths in a row, each within FL_RESTART_STABLE_S of its start */
    double delay;      /* the wait before its next restart (0 = the first) */
} fl_restart_t;

/* A role's exit status for a usage or configuration error (a bad option, a value the
 * role cannot work with, an env that does not load, learner.device = cuda without a
 * usable GPU): the role printed what was wrong, and a restart would fail the same way. */
#define FL_EXIT_CONFIG 2

/* A role's exit status when creating it failed with st: FL_EXIT_CONFIG for what it was
 * given (an invalid or unparsable value, something not built in, no usable device), 1
 * for the rest (a service that does not answer, say), which a restart may cure. */
static inline int fl_exit_status_of_create(fl_status st) {
    return st == FL_INVALID_ARGUMENT || st == FL_UNIMPLEMENTED || st == FL_PARSE_ERROR || st == FL_NO_DEVICE
               ? FL_EXIT_CONFIG
               : 1;
}

/* The process died at `now` with wait status `status`: the wait in seconds before its
 * restart, or -1 with *why when it must not be restarted (it exited with FL_EXIT_CONFIG,
 * max_restarts <= 0, or max_restarts + 1 quick deaths in a row). */
double fl_restart_after(fl_restart_t *r, double now, long long max_restarts, int status, const char **why);

#endif
