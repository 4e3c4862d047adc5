/* chaos_util: the kills of a chaos run, shared by tests/integration_chaos.c and
 * bench/fleet_solve.c (--chaos): a random role process of a `fleet run` launcher (one of
 * its children running `fleet replay|paramserver|learner|actor|evaluator`) gets SIGKILL.
 * Reads /proc; no cmocka. */
#ifndef FL_TESTS_CHAOS_UTIL_H
#define FL_TESTS_CHAOS_UTIL_H

#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* The role of process pid when it is a fleet role whose parent is `parent` (into role),
 * else 0. */
static inline int chaos_role_of(pid_t pid, pid_t parent, char *role, size_t len) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')'); /* the name may hold spaces */
    char state;
    int ppid;
    if (!close_paren || sscanf(close_paren + 1, " %c %d", &state, &ppid) != 2 || ppid != (int)parent || state == 'Z')
        return 0;
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    f = fopen(path, "r");
    if (!f) return 0;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *arg1 = memchr(buf, '\0', n); /* argv[1] */
    if (!arg1 || arg1 + 1 >= buf + n) return 0;
    arg1++;
    static const char *const roles[] = {"replay", "paramserver", "learner", "actor", "evaluator"};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strcmp(arg1, roles[i]) == 0) {
            snprintf(role, len, "%s", arg1);
            return 1;
        }
    return 0;
}

/* The pid of parent's first role process (in /proc order) running `fleet ROLE`, or 0. */
static inline pid_t chaos_find_role(pid_t parent, const char *want) {
    pid_t found = 0;
    DIR *d = opendir("/proc");
    if (!d) return 0;
    struct dirent *e;
    char role[16];
    while (!found && (e = readdir(d)) != NULL) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid > 0 && chaos_role_of(pid, parent, role, sizeof role) && strcmp(role, want) == 0) found = pid;
    }
    closedir(d);
    return found;
}

/* One of parent's role processes, chosen with *rng (xorshift state, != 0): its pid and
 * role, or 0 when it has none running. */
static inline pid_t chaos_pick_role(pid_t parent, uint64_t *rng, char *role, size_t len) {
    pid_t pids[256];
    char roles[256][16];
    int n = 0;
    DIR *d = opendir("/proc");
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 256) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid > 0 && chaos_role_of(pid, parent, roles[n], sizeof roles[n])) pids[n++] = pid;
    }
    closedir(d);
    if (!n) return 0;
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    int k = (int)(*rng % (uint64_t)n);
    snprintf(role, len, "%s", roles[k]);
    return pids[k];
}

/* SIGKILLs one of parent's role processes (chaos_pick_role); its pid and role, or 0. */
static inline pid_t chaos_kill_one(pid_t parent, uint64_t *rng, char *role, size_t len) {
    pid_t pid = chaos_pick_role(parent, rng, role, len);
    return pid && kill(pid, SIGKILL) == 0 ? pid : 0;
}

#endif
