/* rpc_bench: throughput of fleet's gRPC layer over loopback TCP and a unix socket.
 *
 * The server runs in a child process (fork), the clients in this one, so that every
 * figure crosses a real process boundary. Cases:
 *   unary round trips/s with 1 and 8 concurrent clients (64-byte echo);
 *   client-streamed messages/s and MB/s for 64 B, 4 KB and 1 MB messages.
 * Each case runs --repeat times for --seconds each; the table shows the median with the
 * minimum and maximum (shared machines are noisy: the median is the figure to quote).
 * Usage: rpc_bench [--json] [--seconds S] [--repeat N] [--server-threads N] [--transport tcp|unix|both] */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/rpc.h"

static int g_json = 0;
static double g_seconds = 1.0;
static int g_repeat = 5;
static int g_server_threads = 2;

static fl_status echo(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply) {
    (void)user;
    return fl_rpc_reply_bytes(reply, req, len);
}

static void *count_open(void *user) {
    (void)user;
    return calloc(1, sizeof(uint64_t) * 2);
}

static fl_status count_message(void *user, void *state, const uint8_t *msg, size_t len, fl_rpc_reply_t *r) {
    (void)user;
    (void)r;
    uint64_t *c = state;
    c[0]++;
    c[1] += len + (len ? msg[0] : 0) * 0;
    return FL_OK;
}

static fl_status count_close(void *user, void *state, fl_status why, fl_rpc_reply_t *r) {
    (void)user;
    uint64_t *c = state;
    fl_status st = FL_OK;
    if (why == FL_OK) st = fl_rpc_reply_bytes(r, c, 2 * sizeof(uint64_t));
    free(c);
    return st;
}

/* Runs a server in a child; returns its pid and writes the address to addr. */
static pid_t spawn_server(const char *bind, char *addr, size_t addrlen) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        fl_rpc_server_t *s;
        fl_rpc_server_opts_t o = {.threads = g_server_threads, .prepost = 32};
        static const fl_rpc_stream_handler_t h = {count_open, count_message, count_close};
        if (fl_rpc_server_create(&o, &s, NULL) != FL_OK) _exit(1);
        fl_rpc_server_add_unary(s, "/bench.B/Echo", echo, NULL);
        fl_rpc_server_add_stream(s, "/bench.B/Stream", &h, NULL);
        int port = 0;
        fl_err_t err;
        if (fl_rpc_server_bind(s, bind, &port, &err) != FL_OK || fl_rpc_server_start(s, &err) != FL_OK) {
            fprintf(stderr, "rpc_bench server: %s\n", err.msg);
            _exit(1);
        }
        if (write(fds[1], &port, sizeof port) != (ssize_t)sizeof port) _exit(1);
        close(fds[1]);
        pause(); /* until SIGTERM */
        _exit(0);
    }
    close(fds[1]);
    int port = -1;
    if (read(fds[0], &port, sizeof port) != (ssize_t)sizeof port) {
        close(fds[0]);
        return -1;
    }
    close(fds[0]);
    if (strncmp(bind, "unix:", 5) == 0)
        snprintf(addr, addrlen, "%s", bind);
    else
        snprintf(addr, addrlen, "127.0.0.1:%d", port);
    return pid;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Reports the median of n runs (sorted in place). */
static void report(const char *transport, const char *cs, double *v, int n, const char *unit, int cores) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    if (g_json)
        printf(
            "{\"bench\":\"rpc\",\"case\":\"%s/%s\",\"value\":%.1f,\"unit\":\"%s\",\"cores\":%d,\"min\":%.1f,"
            "\"max\":%.1f,\"runs\":%d}\n",
            transport, cs, med, unit, cores, v[0], v[n - 1], n);
    else
        printf("%-6s %-20s %12.1f %-8s (min %.1f, max %.1f, %d runs)\n", transport, cs, med, unit, v[0], v[n - 1], n);
    fflush(stdout);
}

typedef struct {
    const char *addr;
    fl_rpc_channel_t *ch;
    double until;
    uint64_t calls;
    int failed;
} unary_arg;

static void *unary_worker(void *p) {
    unary_arg *a = p;
    uint8_t msg[64];
    memset(msg, 7, sizeof msg);
    while (fl_clock_sec() < a->until) {
        for (int i = 0; i < 64; i++) {
            fl_rpc_buf_t resp;
            if (fl_rpc_unary(a->ch, "/bench.B/Echo", msg, sizeof msg, 10000, FL_RPC_WAIT_FOR_READY, &resp, NULL) !=
                FL_OK) {
                a->failed = 1;
                return NULL;
            }
            fl_rpc_buf_free(&resp);
            a->calls++;
        }
    }
    return NULL;
}

static double bench_unary(const char *addr, int clients) {
    pthread_t th[64];
    unary_arg args[64];
    /* warm up: connect */
    for (int i = 0; i < clients; i++) {
        args[i] = (unary_arg){.addr = addr};
        fl_rpc_channel_create(addr, 0, &args[i].ch, NULL);
        fl_rpc_buf_t resp;
        fl_rpc_unary(args[i].ch, "/bench.B/Echo", "x", 1, 10000, FL_RPC_WAIT_FOR_READY, &resp, NULL);
        fl_rpc_buf_free(&resp);
    }
    double t0 = fl_clock_sec();
    for (int i = 0; i < clients; i++) {
        args[i].until = t0 + g_seconds;
        pthread_create(&th[i], NULL, unary_worker, &args[i]);
    }
    uint64_t total = 0;
    for (int i = 0; i < clients; i++) {
        pthread_join(th[i], NULL);
        total += args[i].calls;
        if (args[i].failed) fprintf(stderr, "rpc_bench: a unary client failed\n");
        fl_rpc_channel_destroy(args[i].ch);
    }
    return (double)total / (fl_clock_sec() - t0);
}

static int bench_stream(const char *addr, size_t msg_size, double *msgs_per_s, double *mb_per_s) {
    fl_rpc_channel_t *ch;
    fl_err_t err;
    if (fl_rpc_channel_create(addr, 0, &ch, &err) != FL_OK) return -1;
    uint8_t *msg = malloc(msg_size);
    for (size_t i = 0; i < msg_size; i++) msg[i] = (uint8_t)i;
    fl_rpc_stream_t *s;
    /* warm up the connection */
    fl_rpc_buf_t resp;
    fl_rpc_unary(ch, "/bench.B/Echo", "x", 1, 10000, FL_RPC_WAIT_FOR_READY, &resp, NULL);
    fl_rpc_buf_free(&resp);
    double t0 = fl_clock_sec();
    if (fl_rpc_stream_open(ch, "/bench.B/Stream", 0, FL_RPC_WAIT_FOR_READY | FL_RPC_BUFFERED, &s, &err) != FL_OK)
        return -1;
    uint64_t sent = 0;
    double until = t0 + g_seconds;
    while (fl_clock_sec() < until) {
        for (int i = 0; i < 256; i++) {
            if (fl_rpc_stream_send(s, msg, msg_size, &err) != FL_OK) break;
            sent++;
        }
    }
    if (fl_rpc_stream_finish(s, &resp, &err) != FL_OK) {
        fprintf(stderr, "rpc_bench: stream failed: %s\n", err.msg);
        free(msg);
        fl_rpc_channel_destroy(ch);
        return -1;
    }
    double dt = fl_clock_sec() - t0;
    uint64_t counts[2] = {0, 0};
    if (resp.len == sizeof counts) memcpy(counts, resp.data, sizeof counts);
    fl_rpc_buf_free(&resp);
    if (counts[0] != sent)
        fprintf(stderr, "rpc_bench: server counted %llu of %llu messages\n", (unsigned long long)counts[0],
                (unsigned long long)sent);
    *msgs_per_s = (double)counts[0] / dt;
    *mb_per_s = (double)counts[1] / dt / 1e6;
    free(msg);
    fl_rpc_channel_destroy(ch);
    return 0;
}

static void run_transport(const char *name, const char *addr, int cores) {
    double v[64];
    int n = g_repeat;
    for (int r = 0; r < n; r++) v[r] = bench_unary(addr, 1);
    report(name, "unary_1_client", v, n, "calls/s", cores);
    for (int r = 0; r < n; r++) v[r] = bench_unary(addr, 8);
    report(name, "unary_8_clients", v, n, "calls/s", cores);
    const size_t sizes[] = {64, 4096, 1 << 20};
    const char *labels[] = {"64B", "4KB", "1MB"};
    for (int i = 0; i < 3; i++) {
        double mps[64], mbps[64];
        int ok = 0;
        for (int r = 0; r < n; r++)
            if (bench_stream(addr, sizes[i], &mps[ok], &mbps[ok]) == 0) ok++;
        if (!ok) continue;
        char c[64];
        snprintf(c, sizeof c, "stream_%s", labels[i]);
        report(name, c, mps, ok, "msgs/s", cores);
        snprintf(c, sizeof c, "stream_%s", labels[i]);
        report(name, c, mbps, ok, "MB/s", cores);
    }
}

int main(int argc, char **argv) {
    const char *transport = "both";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            g_json = 1;
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            g_seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
            g_repeat = atoi(argv[++i]);
            if (g_repeat < 1 || g_repeat > 64) g_repeat = 5;
        } else if (strcmp(argv[i], "--server-threads") == 0 && i + 1 < argc) {
            g_server_threads = atoi(argv[++i]);
            if (g_server_threads < 1 || g_server_threads > 64) g_server_threads = 2;
        } else if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc)
            transport = argv[++i];
        else {
            fprintf(stderr,
                    "usage: rpc_bench [--json] [--seconds S] [--repeat N] [--server-threads N] [--transport "
                    "tcp|unix|both]\n");
            return 2;
        }
    }
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (!g_json)
        printf("rpc_bench: %d cores, %d runs of %.1f s per case (median shown), server in a child process\n", cores,
               g_repeat, g_seconds);
    /* Both servers are forked before this process touches gRPC (fork after gRPC's
     * threads exist is not safe). */
    char tcp_addr[256], unix_addr[256], path[128];
    snprintf(path, sizeof path, "unix:/tmp/fleet-rpc-bench-%d.sock", (int)getpid());
    pid_t tcp_pid = spawn_server("127.0.0.1:0", tcp_addr, sizeof tcp_addr);
    pid_t unix_pid = spawn_server(path, unix_addr, sizeof unix_addr);
    if (tcp_pid <= 0 || unix_pid <= 0) {
        fprintf(stderr, "rpc_bench: cannot start the servers\n");
        return 1;
    }
    if (strcmp(transport, "unix") != 0) run_transport("tcp", tcp_addr, cores);
    if (strcmp(transport, "tcp") != 0) run_transport("unix", unix_addr, cores);
    kill(tcp_pid, SIGTERM);
    kill(unix_pid, SIGTERM);
    waitpid(tcp_pid, NULL, 0);
    waitpid(unix_pid, NULL, 0);
    unlink(path + 5);
    return 0;
}
