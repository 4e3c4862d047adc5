/* paramserver_bench: how fast P parameter-server shards serve a parameter vector to many
 * actors, and what a gradient push costs in bytes.
 *
 * Everything runs in this process over loopback TCP (127.0.0.1, port 0): P = 1 and 2
 * shard services (paramserver.shards = P, fl_paramserver_service_create as `fleet
 * paramserver` does), one publisher thread that publishes a new version of a --n-float
 * vector (1.7M, 6.8 MB: a Nature CNN) every --publish-ms (100) through a P-address
 * client, and C actor threads (C = 1, 2, 4, 8, 16, 32, 64; --max-actors), each with its
 * own client (its own connection to every shard) fetching in a loop with *version = 0,
 * i.e. if_newer_than = 0 on every shard, so that every fetch carries the whole vector.
 * Each case is run with float32 and with bfloat16 transfer (opts.bf16: half the bytes,
 * widened to float by the client).
 *
 * Figures, over a window of --seconds (1) per case after every actor has finished one
 * fetch: fetches/s (whole vectors delivered into the actors' buffers, all actors) and
 * MB/s (serialized response bytes the actors' clients received, fl_param_client_bytes;
 * 1 MB = 1e6 bytes). Then, for gorila shards (learner.mode = gorila, SGD) holding the
 * same vector: serialized request bytes of one push, float32 and 1-bit.
 *
 * Usage: paramserver_bench [--json] [--seconds S] [--n ELEMENTS] [--publish-ms MS]
 *                          [--max-actors C] [--actors C (only that case)]
 *                          [--dtype fp32|bf16|both] [--shards 1|2|both] */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "paramserver/client.h"
#include "paramserver/server.h"

static int g_json = 0;
static double g_seconds = 1.0;
static size_t g_n = 1700000;
static double g_publish_ms = 100;
static int g_max_actors = 64;
static int g_only_actors = 0; /* --actors C: only that case */
static int g_dtypes = 3;      /* bit 0 fp32, bit 1 bf16 */
static int g_cores = 1;

#define TIMEOUT_MS 60000
#define MAXP 2
#define MAX_ACTORS 256

static void report(const char *cs, double value, const char *unit) {
    if (g_json)
        printf("{\"bench\":\"paramserver\",\"case\":\"%s\",\"value\":%.1f,\"unit\":\"%s\",\"cores\":%d}\n", cs, value,
               unit, g_cores);
    else
        printf("  %-34s %14.1f %s\n", cs, value, unit);
    fflush(stdout);
}

static void die(const char *what, const fl_err_t *err) {
    fprintf(stderr, "paramserver_bench: %s: %s\n", what, err ? err->msg : "failed");
    exit(1);
}

typedef struct {
    int P;
    fl_paramserver_service_t *svc[MAXP];
    char addrs[MAXP * 130];
} cluster;

static void cluster_start(cluster *c, int P, int gorila) {
    memset(c, 0, sizeof *c);
    c->P = P;
    fl_paramserver_service_opts_t so;
    fl_paramserver_service_opts_init(&so);
    so.shards = P;
    if (gorila) { /* sgd with the learner.lr and learner.momentum defaults */
        so.mode = FL_PARAMSERVER_GORILA;
        so.optim = fl_optim_config_default(FL_OPTIM_SGD);
        so.optim.lr = (float)6.25e-5;
        so.optim.momentum = (float)0.9;
    }
    fl_err_t err;
    fl_err_init(&err);
    for (int s = 0; s < P; s++) {
        char addr[128];
        if (fl_paramserver_service_create(&so, s, &c->svc[s], &err) != FL_OK ||
            fl_paramserver_service_start(c->svc[s], "127.0.0.1:0", addr, sizeof addr, &err) != FL_OK)
            die("shard", &err);
        strcat(c->addrs, s ? "," : "");
        strcat(c->addrs, addr);
    }
}

static void cluster_stop(cluster *c) {
    for (int s = 0; s < c->P; s++) fl_paramserver_service_destroy(c->svc[s]);
}

/* ---- the publisher ---- */

typedef struct {
    fl_param_client_t *cl;
    float *v;
    uint64_t version;
    atomic_int stop;
    int failed;
} publisher;

static void *publish_loop(void *p) {
    publisher *x = p;
    double next = fl_clock_sec();
    while (!atomic_load(&x->stop)) {
        double now = fl_clock_sec();
        if (now < next) {
            fl_sleep_sec(next - now < 0.01 ? next - now : 0.01);
            continue;
        }
        next += g_publish_ms / 1000.0;
        if (next < now) next = now;
        x->v[0] = (float)(x->version + 1);
        fl_err_t err;
        fl_err_init(&err);
        if (fl_param_publish(x->cl, x->version + 1, x->v, g_n, TIMEOUT_MS, &err) != FL_OK) {
            fprintf(stderr, "paramserver_bench: publish: %s\n", err.msg);
            x->failed = 1;
            return NULL;
        }
        x->version++;
    }
    return NULL;
}

/* ---- the actors ---- */

typedef struct {
    fl_param_client_t *cl;
    float *dst;
    atomic_int *go, *stop;
    uint64_t fetches;
    int failed;
} actor;

static void *fetch_loop(void *p) {
    actor *a = p;
    while (!atomic_load(a->go)) fl_sleep_sec(0.001);
    while (!atomic_load(a->stop)) {
        uint64_t version = 0; /* if_newer_than = 0 everywhere: the whole vector every time */
        int updated = 0;
        fl_err_t err;
        fl_err_init(&err);
        if (fl_param_fetch(a->cl, &version, a->dst, g_n, &updated, TIMEOUT_MS, &err) != FL_OK || !updated) {
            fprintf(stderr, "paramserver_bench: fetch: %s\n", updated ? err.msg : "no values");
            a->failed = 1;
            return NULL;
        }
        a->fetches++;
    }
    return NULL;
}

/* C actors fetching from the cluster for g_seconds; fetches/s and MB/s. */
static void bench_fetch(const cluster *c, int C, int bf16, double *fps, double *mbps) {
    static actor as[MAX_ACTORS];
    static pthread_t th[MAX_ACTORS];
    atomic_int go, stop;
    atomic_init(&go, 0);
    atomic_init(&stop, 0);
    fl_param_client_opts_t o = {.bf16 = bf16};
    for (int i = 0; i < C; i++) {
        fl_err_t err;
        fl_err_init(&err);
        memset(&as[i], 0, sizeof as[i]);
        as[i].go = &go;
        as[i].stop = &stop;
        as[i].dst = malloc(g_n * sizeof(float));
        if (!as[i].dst || fl_param_client_create_opts(c->addrs, &o, &as[i].cl, &err) != FL_OK) die("actor", &err);
        /* connect, and touch dst, before the clock starts */
        uint64_t v = 0;
        int updated;
        if (fl_param_fetch(as[i].cl, &v, as[i].dst, g_n, &updated, TIMEOUT_MS, &err) != FL_OK) die("fetch", &err);
        pthread_create(&th[i], NULL, fetch_loop, &as[i]);
    }
    uint64_t r0 = 0, r1 = 0, f1 = 0;
    for (int i = 0; i < C; i++) {
        uint64_t r;
        fl_param_client_bytes(as[i].cl, NULL, &r);
        r0 += r;
    }
    double t0 = fl_clock_sec();
    atomic_store(&go, 1);
    fl_sleep_sec(g_seconds);
    atomic_store(&stop, 1);
    for (int i = 0; i < C; i++) pthread_join(th[i], NULL);
    double dt = fl_clock_sec() - t0;
    for (int i = 0; i < C; i++) {
        if (as[i].failed) exit(1);
        uint64_t r;
        fl_param_client_bytes(as[i].cl, NULL, &r);
        r1 += r;
        f1 += as[i].fetches;
        fl_param_client_destroy(as[i].cl);
        free(as[i].dst);
    }
    *fps = (double)f1 / dt;
    *mbps = (double)(r1 - r0) / dt / 1e6;
}

static void bench_shards(int P, float *v) {
    cluster c;
    cluster_start(&c, P, 0);
    publisher pub = {.v = v};
    atomic_init(&pub.stop, 0);
    fl_err_t err;
    fl_err_init(&err);
    if (fl_param_client_create(c.addrs, &pub.cl, &err) != FL_OK) die("publisher", &err);
    if (fl_param_publish(pub.cl, 1, v, g_n, TIMEOUT_MS, &err) != FL_OK) die("publish", &err);
    pub.version = 1;
    pthread_t pt;
    pthread_create(&pt, NULL, publish_loop, &pub);
    if (!g_json) printf("P = %d shard%s:\n", P, P > 1 ? "s" : "");
    for (int bf16 = 0; bf16 <= 1; bf16++)
        for (int C = g_only_actors ? g_only_actors : 1; C <= (g_only_actors ? g_only_actors : g_max_actors); C *= 2) {
            if (!(g_dtypes & (1 << bf16))) break;
            double fps, mbps;
            bench_fetch(&c, C, bf16, &fps, &mbps);
            char name[96];
            snprintf(name, sizeof name, "P%d/%s/fetch_%d_actors", P, bf16 ? "bf16" : "fp32", C);
            report(name, fps, "fetches/s");
            snprintf(name, sizeof name, "P%d/%s/fetch_%d_actors_mb", P, bf16 ? "bf16" : "fp32", C);
            report(name, mbps, "MB/s");
        }
    atomic_store(&pub.stop, 1);
    pthread_join(pt, NULL);
    if (pub.failed) exit(1);
    char name[96];
    snprintf(name, sizeof name, "P%d/versions_published", P);
    report(name, (double)pub.version, "versions");
    fl_param_client_destroy(pub.cl);
    cluster_stop(&c);
}

/* Serialized request bytes of one push of the whole vector, float32 and 1-bit. */
static void bench_push_bytes(int P, float *v) {
    cluster c;
    cluster_start(&c, P, 1);
    float *g = malloc(g_n * sizeof *g);
    for (size_t i = 0; i < g_n; i++) g[i] = (float)((i * 2654435761u) % 1000) * 1e-6f - 5e-4f;
    for (int q = 0; q <= 1; q++) {
        fl_param_client_opts_t o = {.quantize = q};
        fl_param_client_t *cl;
        fl_err_t err;
        fl_err_init(&err);
        if (fl_param_client_create_opts(c.addrs, &o, &cl, &err) != FL_OK) die("pusher", &err);
        if (q == 0 && fl_param_publish(cl, 1, v, g_n, TIMEOUT_MS, &err) != FL_OK) die("publish", &err);
        fl_param_push_result_t r;
        double t0 = fl_clock_sec();
        if (fl_param_push(cl, g, g_n, &r, TIMEOUT_MS, &err) != FL_OK) die("push", &err);
        double dt = fl_clock_sec() - t0;
        char name[96];
        snprintf(name, sizeof name, "P%d/push_bytes_%s", P, q ? "1bit" : "fp32");
        report(name, (double)r.bytes_sent, "bytes");
        snprintf(name, sizeof name, "P%d/push_ms_%s", P, q ? "1bit" : "fp32");
        report(name, dt * 1e3, "ms");
        fl_param_client_destroy(cl);
    }
    free(g);
    cluster_stop(&c);
}

int main(int argc, char **argv) {
    int shards_mask = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            g_json = 1;
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            g_seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
            g_n = (size_t)strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--publish-ms") == 0 && i + 1 < argc)
            g_publish_ms = atof(argv[++i]);
        else if (strcmp(argv[i], "--max-actors") == 0 && i + 1 < argc)
            g_max_actors = atoi(argv[++i]);
        else if (strcmp(argv[i], "--actors") == 0 && i + 1 < argc)
            g_only_actors = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            const char *d = argv[++i];
            g_dtypes = strcmp(d, "fp32") == 0 ? 1 : strcmp(d, "bf16") == 0 ? 2 : strcmp(d, "both") == 0 ? 3 : 0;
        } else if (strcmp(argv[i], "--shards") == 0 && i + 1 < argc) {
            const char *s = argv[++i];
            shards_mask = strcmp(s, "1") == 0 ? 1 : strcmp(s, "2") == 0 ? 2 : strcmp(s, "both") == 0 ? 3 : 0;
        } else {
            fprintf(stderr,
                    "usage: paramserver_bench [--json] [--seconds S] [--n ELEMENTS] [--publish-ms MS] "
                    "[--max-actors C] [--actors C] [--dtype fp32|bf16|both] [--shards 1|2|both]\n");
            return 2;
        }
    }
    if (g_seconds <= 0 || g_n < 2 || g_publish_ms <= 0 || g_max_actors < 1 || g_max_actors > MAX_ACTORS ||
        g_only_actors < 0 || g_only_actors > MAX_ACTORS || !g_dtypes || !shards_mask) {
        fprintf(stderr, "paramserver_bench: bad arguments\n");
        return 2;
    }
    g_cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    fl_log_set_level(FL_LOG_WARN);
    if (!g_json)
        printf(
            "paramserver_bench: %zu floats (%.1f MB) per vector, %d cores, a new version every %.0f ms, "
            "%.1f s per case, loopback TCP, everything in one process\n",
            g_n, (double)g_n * 4 / 1e6, g_cores, g_publish_ms, g_seconds);
    float *v = malloc(g_n * sizeof *v);
    if (!v) return 1;
    for (size_t i = 0; i < g_n; i++) v[i] = (float)i * 1e-6f;
    for (int P = 1; P <= MAXP; P++)
        if (shards_mask & P) bench_shards(P, v);
    if (!g_json) printf("gradient pushes (gorila shards):\n");
    for (int P = 1; P <= MAXP; P++)
        if (shards_mask & P) bench_push_bytes(P, v);
    free(v);
    return 0;
}
