/* paramserver_memory: the resident memory of a parameter-server shard around a burst of
 * large concurrent publishes, and what it keeps afterwards.
 *
 * A child process serves one apex shard (fl_paramserver_service_create as `fleet
 * paramserver` does, paramserver.max_large_messages = --slots) on 127.0.0.1 port 0; the
 * parent publishes a vector of --mb megabytes (float32) from --clients threads at once,
 * each with its own client (its own connection), versions 1 .. clients (so some
 * publishes are refused as not newer, after the shard has received them, as a hostile
 * burst would be), for --rounds rounds. It reads the child's VmRSS and VmHWM from
 * /proc/<pid>/status before the burst, right after the last publish returned, and after
 * --settle seconds of quiet. Figures in MB (1 MB = 2^20 bytes); the publishes' outcomes
 * are counted (applied, refused as not newer, refused for want of a slot).
 *
 * Usage: paramserver_memory [--mb M] [--clients K] [--rounds R] [--slots S] [--settle S]
 *                           [--json] */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "paramserver/client.h"
#include "paramserver/server.h"

#define TIMEOUT_MS 120000
#define MAX_CLIENTS 64

static int g_json;
static double g_mb = 200, g_settle = 2.0;
static int g_clients = 8, g_rounds = 1, g_slots = 2;

static void die(const char *what, const fl_err_t *err) {
    fprintf(stderr, "paramserver_memory: %s: %s\n", what, err ? err->msg : "failed");
    exit(1);
}

/* The child: serve until the parent closes its end of `hold`. */
static void serve(int ready_fd, int hold_fd) {
    fl_log_set_level(FL_LOG_WARN);
    fl_paramserver_service_opts_t o;
    fl_paramserver_service_opts_init(&o);
#ifdef FL_PARAMSERVER_LARGE_MESSAGE
    o.max_large_messages = g_slots;
#endif
    fl_paramserver_service_t *svc = NULL;
    fl_err_t err;
    fl_err_init(&err);
    char addr[128];
    if (fl_paramserver_service_create(&o, 0, &svc, &err) != FL_OK ||
        fl_paramserver_service_start(svc, "127.0.0.1:0", addr, sizeof addr, &err) != FL_OK)
        die("serve", &err);
    if (write(ready_fd, addr, strlen(addr) + 1) < 0) _exit(1);
    close(ready_fd);
    char c;
    while (read(hold_fd, &c, 1) > 0) {
    }
    fl_paramserver_service_destroy(svc);
    _exit(0);
}

/* VmRSS and VmHWM of pid, in MB. */
static void rss_of(pid_t pid, double *rss, double *hwm) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) die("cannot read the server's /proc status", NULL);
    *rss = *hwm = 0;
    while (fgets(line, sizeof line, f)) {
        long kb;
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) *rss = kb / 1024.0;
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) *hwm = kb / 1024.0;
    }
    fclose(f);
}

typedef struct job {
    const char *addr;
    const float *v;
    size_t n;
    uint64_t version;
    fl_status st;
    char msg[FL_ERR_MSG_MAX];
} job_t;

static void *publish_one(void *arg) {
    job_t *j = arg;
    fl_param_client_t *c = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_param_client_create(j->addr, &c, &err) != FL_OK) die("client", &err);
    j->st = fl_param_publish(c, j->version, j->v, j->n, TIMEOUT_MS, &err);
    snprintf(j->msg, sizeof j->msg, "%s", err.msg);
    fl_param_client_destroy(c);
    return NULL;
}

static void report(const char *what, double value, const char *unit) {
    if (g_json)
        printf(
            "{\"bench\":\"paramserver_memory\",\"case\":\"%s\",\"mb\":%g,\"clients\":%d,\"slots\":%d,"
            "\"value\":%.1f,\"unit\":\"%s\"}\n",
            what, g_mb, g_clients, g_slots, value, unit);
    else
        printf("  %-40s %10.1f %s\n", what, value, unit);
    fflush(stdout);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json"))
            g_json = 1;
        else if (!strcmp(a, "--mb") && v)
            g_mb = atof(argv[++i]);
        else if (!strcmp(a, "--clients") && v)
            g_clients = atoi(argv[++i]);
        else if (!strcmp(a, "--rounds") && v)
            g_rounds = atoi(argv[++i]);
        else if (!strcmp(a, "--slots") && v)
            g_slots = atoi(argv[++i]);
        else if (!strcmp(a, "--settle") && v)
            g_settle = atof(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: paramserver_memory [--mb M] [--clients K] [--rounds R] [--slots S] "
                    "[--settle S] [--json]\n");
            return 2;
        }
    }
    if (g_clients < 1 || g_clients > MAX_CLIENTS || g_mb <= 0 || g_rounds < 1 || g_slots < 1) {
        fprintf(stderr, "paramserver_memory: --clients 1 .. %d, --mb > 0, --rounds >= 1, --slots >= 1\n", MAX_CLIENTS);
        return 2;
    }
    int ready[2], hold[2];
    if (pipe(ready) || pipe(hold)) die("pipe", NULL);
    pid_t pid = fork();
    if (pid < 0) die("fork", NULL);
    if (pid == 0) {
        close(ready[0]);
        close(hold[1]);
        serve(ready[1], hold[0]);
    }
    close(ready[1]);
    close(hold[0]);
    char addr[128] = "";
    if (read(ready[0], addr, sizeof addr) <= 0) die("the server did not start", NULL);
    close(ready[0]);
    fl_log_set_level(FL_LOG_WARN);

    size_t n = (size_t)(g_mb * (1 << 20) / 4);
    float *vec = malloc(n * sizeof *vec);
    if (!vec) die("out of memory for the vector", NULL);
    for (size_t i = 0; i < n; i++) vec[i] = (float)(i % 997) * 1e-3f;

    double rss0, hwm0, rss1, hwm1, rss2, hwm2;
    fl_sleep_sec(0.5);
    rss_of(pid, &rss0, &hwm0);
    int applied = 0, stale = 0, busy = 0, other = 0;
    double t0 = fl_clock_sec();
    for (int r = 0; r < g_rounds; r++) {
        job_t jobs[MAX_CLIENTS];
        pthread_t th[MAX_CLIENTS];
        for (int k = 0; k < g_clients; k++) {
            jobs[k] = (job_t){addr, vec, n, (uint64_t)(r * g_clients + k + 1), FL_OK, ""};
            if (pthread_create(&th[k], NULL, publish_one, &jobs[k])) die("thread", NULL);
        }
        for (int k = 0; k < g_clients; k++) {
            pthread_join(th[k], NULL);
            fl_status st = jobs[k].st;
            if (st != FL_OK && !g_json) fprintf(stderr, "  publish %d: %s\n", k, jobs[k].msg);
            applied += st == FL_OK;
            stale += st == FL_FAILED_PRECONDITION;
            busy += st == FL_RESOURCE_EXHAUSTED;
            other += st != FL_OK && st != FL_FAILED_PRECONDITION && st != FL_RESOURCE_EXHAUSTED;
        }
    }
    double secs = fl_clock_sec() - t0;
    rss_of(pid, &rss1, &hwm1);
    fl_sleep_sec(g_settle);
    rss_of(pid, &rss2, &hwm2);

    if (!g_json)
        printf("paramserver_memory: %d x %g MB publishes at once, %d round(s), %d large-message slot(s)\n", g_clients,
               g_mb, g_rounds, g_slots);
    report("server RSS before (MB)", rss0, "MB");
    report("server peak RSS (MB)", hwm2, "MB");
    report("server RSS right after (MB)", rss1, "MB");
    report("server RSS after settling (MB)", rss2, "MB");
    report("publishes applied", applied, "calls");
    report("refused as not newer", stale, "calls");
    report("refused for want of a slot", busy, "calls");
    report("failed otherwise", other, "calls");
    report("burst wall time", secs, "s");

    close(hold[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    free(vec);
    return other ? 1 : 0;
}
