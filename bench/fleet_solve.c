/* fleet_solve: wall time for the default fleet to solve CartPole-v1 (mean return of the
 * last 100 episodes >= 475), over several seeds, each a real `fleet run` of separate
 * processes. Prints one row per seed and the median.
 *
 * Usage: fleet_solve [--json] [--seeds N] [--fleet PATH] [--config FILE] [--limit S] [--chaos S]
 *                    [--set KEY=VALUE]...
 *   --set     passed on to every `fleet run` (up to 16), after the config
 *   --fleet   the fleet binary (default: ../bin/fleet next to this program)
 *   --config  the experiment (default: configs/cartpole.ini of the source tree)
 *   --limit   run.max_seconds of each run (default 300); a run that hits it counts as
 *             not solved
 *   --chaos   every S seconds (0.5 S .. 1.5 S, at random) a random role of the fleet gets
 *             SIGKILL while it runs, until the launcher starts stopping the fleet (the
 *             launcher restarts it); each row then also
 *             prints the kills and the restarts summary.txt counted. Learner checkpoints
 *             every 2 s (run.checkpoint_every), as a restarted learner resumes from its
 *             latest one.
 *   --faults  what each --chaos event does, drawn at random from the list (default kill):
 *             kill (SIGKILL a role), stop (SIGSTOP a role for S/2 s, then SIGCONT),
 *             poison (1,024 rows at the shard's own reward and priority bounds, with real
 *             observations), forge (an evaluator's report of return 1e9 without a role's
 *             credential), flood (2,000 one-row inserts on fresh streams), connections
 *             (500 idle TCP connections to the shard, held S/2 s); tests/chaos_faults.h.
 *             Each row counts the events and what summary.txt says of the run. */
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "tests/chaos_faults.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int kv(const char *path, const char *key, char *out, size_t len) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    size_t kl = strlen(key);
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) == 0 && line[kl] == '=') {
            snprintf(out, len, "%s", line + kl + 1);
            out[strcspn(out, "\n")] = '\0';
            found = 0;
            break;
        }
    }
    fclose(f);
    return found;
}

/* 1 once the launcher's output says the fleet is being stopped. */
static int stopping(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, "fleet run: stopping the fleet") != NULL;
    fclose(f);
    return found;
}

enum { F_KILL, F_STOP, F_POISON, F_FORGE, F_FLOOD, F_CONNECTIONS, F_COUNT };
static const char *const fault_names[F_COUNT] = {"kill", "stop", "poison", "forge", "flood", "connections"};

/* The faults named in list (comma-separated) into on[]; 0, or -1 naming the unknown one. */
static int parse_faults(const char *list, int on[F_COUNT]) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    memset(on, 0, F_COUNT * sizeof on[0]);
    int any = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < F_COUNT && strcmp(t, fault_names[k]) != 0) k++;
        if (k == F_COUNT) {
            fprintf(stderr,
                    "fleet_solve: unknown fault '%s' (expected kill, stop, poison, forge, flood, connections)\n", t);
            return -1;
        }
        on[k] = any = 1;
    }
    return any ? 0 : -1;
}

/* One chaos event of kind k on the launcher pid's run in run_dir; 1 when it acted. What a
 * poison found goes to *rb and *pb. */
static int do_fault(int k, pid_t pid, const char *run_dir, double chaos, uint64_t *rng, double *rb, double *pb) {
    char role[16];
    switch (k) {
    case F_KILL: return chaos_kill_one(pid, rng, role, sizeof role) != 0;
    case F_STOP: return chaos_stop_one(pid, rng, chaos / 2, role, sizeof role) != 0;
    case F_POISON: return chaos_poison(run_dir, 1024, rb, pb) > 0;
    case F_FORGE: return chaos_forge_report(pid, run_dir) == 0;
    case F_FLOOD: return chaos_stream_flood(run_dir, 2000) > 0;
    case F_CONNECTIONS: return chaos_connection_flood(pid, run_dir, 500, chaos / 2) > 0;
    default: return 0;
    }
}

int main(int argc, char **argv) {
    int json = 0, seeds = 3;
    double limit = 300, chaos = 0;
    char fleet[PATH_MAX] = "", config[PATH_MAX] = "", faults[256] = "kill";
    const char *sets[16];
    int nsets = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--seeds") == 0 && i + 1 < argc)
            seeds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--fleet") == 0 && i + 1 < argc)
            snprintf(fleet, sizeof fleet, "%s", argv[++i]);
        else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            snprintf(config, sizeof config, "%s", argv[++i]);
        else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc)
            limit = atof(argv[++i]);
        else if (strcmp(argv[i], "--chaos") == 0 && i + 1 < argc)
            chaos = atof(argv[++i]);
        else if (strcmp(argv[i], "--faults") == 0 && i + 1 < argc)
            snprintf(faults, sizeof faults, "%s", argv[++i]);
        else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc && nsets < 16)
            sets[nsets++] = argv[++i];
        else {
            fprintf(stderr,
                    "usage: fleet_solve [--json] [--seeds N] [--fleet PATH] [--config FILE] [--limit S] "
                    "[--chaos S] [--faults kill,stop,poison,forge,flood,connections] [--set KEY=VALUE]... (at most "
                    "16)\n");
            return 2;
        }
    }
    int on[F_COUNT], kinds[F_COUNT], nkinds = 0;
    if (parse_faults(faults, on) != 0) return 2;
    for (int k = 0; k < F_COUNT; k++)
        if (on[k]) kinds[nkinds++] = k;
    fl_log_set_level(FL_LOG_OFF); /* the faults' own clients: their refusals are the point */
    if (seeds < 1 || seeds > 100) seeds = 3;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = '\0';
    char *dir = dirname(self);
    if (!fleet[0]) snprintf(fleet, sizeof fleet, "%s/../bin/fleet", dir);
    if (!config[0]) {
        /* the source tree is recorded by CMake in the build folder's cache */
        char cache[PATH_MAX + 32], src[PATH_MAX] = "";
        snprintf(cache, sizeof cache, "%s/../CMakeCache.txt", dir);
        FILE *f = fopen(cache, "r");
        char line[4096];
        while (f && fgets(line, sizeof line, f))
            if (strncmp(line, "fleet_SOURCE_DIR:STATIC=", 24) == 0) {
                snprintf(src, sizeof src, "%s", line + 24);
                src[strcspn(src, "\n")] = '\0';
            }
        if (f) fclose(f);
        snprintf(config, sizeof config, "%s/configs/cartpole.ini", src[0] ? src : ".");
    }
    char tmp[] = "/tmp/fleet-solve-XXXXXX";
    if (!mkdtemp(tmp)) return 1;
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    double times[100];
    int solved = 0;
    if (!json) {
        printf("fleet_solve: %s, %d seeds, %d cores", config, seeds, cores);
        if (chaos > 0) printf(", a fault (%s) every %.1f s on average", faults, chaos);
        for (int k = 0; k < nsets; k++) printf(", --set %s", sets[k]);
        printf("\n");
    }
    for (int s = 1; s <= seeds; s++) {
        char set_dir[PATH_MAX + 32], set_name[64], set_seed[64], set_limit[64];
        snprintf(set_dir, sizeof set_dir, "run.out_dir=%s", tmp);
        snprintf(set_name, sizeof set_name, "run.name=seed%d", s);
        snprintf(set_seed, sizeof set_seed, "run.seed=%d", s);
        snprintf(set_limit, sizeof set_limit, "run.max_seconds=%g", limit);
        char out_path[PATH_MAX + 32];
        snprintf(out_path, sizeof out_path, "%s/seed%d.out", tmp, s);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            FILE *devnull = freopen(out_path, "w", stdout);
            (void)devnull;
            devnull = freopen("/dev/null", "w", stderr);
            const char *args[3 + 2 * (5 + 16) + 1] = {"fleet", "run", config};
            int na = 3;
            const char *fixed[5] = {set_dir, set_name, set_seed, set_limit,
                                    chaos > 0 ? "run.checkpoint_every=2" : "run.checkpoints=1"};
            for (int k = 0; k < nsets + 5; k++) {
                args[na++] = "--set";
                args[na++] = k < nsets ? sets[k] : fixed[k - nsets];
            }
            args[na] = NULL;
            execv(fleet, (char *const *)args);
            _exit(127);
        }
        int status = 0, kills = 0, done[F_COUNT] = {0};
        double rb = 0, pb = 0;
        char run_dir[PATH_MAX + 32];
        snprintf(run_dir, sizeof run_dir, "%s/seed%d", tmp, s);
        uint64_t rng = 0x9e3779b97f4a7c15ULL ^ (uint64_t)s;
        while (chaos > 0 && waitpid(pid, &status, WNOHANG) == 0) {
            double wait = chaos * (0.5 + (double)(rng % 1000) / 1000.0);
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            for (double w = 0; w < wait && waitpid(pid, &status, WNOHANG) == 0; w += 0.05) usleep(50000);
            if (kill(pid, 0) != 0) break;
            if (stopping(out_path)) continue; /* a role killed now would be an unclean end */
            int k = kinds[(rng >> 11) % (uint64_t)nkinds];
            done[k] += do_fault(k, pid, run_dir, chaos, &rng, &rb, &pb);
            kills = done[F_KILL];
        }
        if (chaos <= 0 || kill(pid, 0) == 0) waitpid(pid, &status, 0);
        char summary[PATH_MAX + 64], reason[512] = "", elapsed[64] = "0", restarts[64] = "0", hangs[64] = "0",
                                     refused[64] = "0";
        snprintf(summary, sizeof summary, "%s/seed%d/summary.txt", tmp, s);
        kv(summary, "reason", reason, sizeof reason);
        kv(summary, "elapsed_s", elapsed, sizeof elapsed);
        kv(summary, "restarts", restarts, sizeof restarts);
        kv(summary, "hangs", hangs, sizeof hangs);
        kv(summary, "reports_refused", refused, sizeof refused);
        char events[512] = "";
        for (int k = 0, used = 0; k < F_COUNT; k++)
            if (done[k] && used < (int)sizeof events)
                used += snprintf(events + used, sizeof events - (size_t)used, "%s%s %d", used ? ", " : "",
                                 fault_names[k], done[k]);
        if (done[F_POISON])
            snprintf(events + strlen(events), sizeof events - strlen(events), " (rows at |r| %.4g, priority %.4g)", rb,
                     pb);
        int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && strncmp(reason, "target reached", 14) == 0;
        double t = atof(elapsed);
        times[s - 1] = ok ? t : 1e9;
        solved += ok;
        if (json)
            printf(
                "{\"bench\":\"fleet_solve\",\"case\":\"cartpole/seed%d\",\"value\":%.1f,\"unit\":\"s\",\"cores\":%d,"
                "\"solved\":%s,\"kills\":%d,\"restarts\":%s}\n",
                s, t, cores, ok ? "true" : "false", kills, restarts);
        else if (chaos > 0)
            printf("  seed %-3d %8.1f s  %s  (%s; %s restarts, %s hangs, %s reports refused)\n", s, t,
                   ok ? "solved" : reason, events[0] ? events : "no fault acted", restarts, hangs, refused);
        else
            printf("  seed %-3d %8.1f s  %s\n", s, t, ok ? "solved" : reason);
        fflush(stdout);
    }
    qsort(times, (size_t)seeds, sizeof times[0], cmp_double);
    double med = times[seeds / 2];
    if (seeds % 2 == 0) med = 0.5 * (times[seeds / 2 - 1] + times[seeds / 2]);
    if (json)
        printf(
            "{\"bench\":\"fleet_solve\",\"case\":\"cartpole/median\",\"value\":%.1f,\"unit\":\"s\",\"cores\":%d,"
            "\"solved\":%d,\"seeds\":%d}\n",
            med >= 1e9 ? -1.0 : med, cores, solved, seeds);
    else if (med >= 1e9)
        printf("median: not solved by most seeds (%d of %d solved)\n", solved, seeds);
    else
        printf("median: %.1f s (%d of %d seeds solved)\n", med, solved, seeds);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "fleet_solve: could not remove %s\n", tmp);
    return 0;
}
