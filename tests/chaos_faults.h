/* chaos_faults: what a hostile or broken peer does to a running `fleet run`, beyond the
 * kills of chaos_util.h, shared by tests/integration_chaos.c and bench/fleet_solve.c
 * (--faults). Each fault acts through the run folder and the services' real gRPC
 * methods, as a process of the run's user (it reads the run's access token) would:
 *   stop         SIGSTOP a random role, SIGCONT it hold_s later;
 *   poison       rows at the shard's own bounds (found by asking it for more), with
 *                real observations sampled from it;
 *   forge        an evaluator's report of return 1e9, without a role's credential;
 *   flood        one-row inserts on thousands of fresh streams;
 *   connections  hundreds of idle TCP connections to the shard, held hold_s.
 * Links fl_replay, fl_eval and fl_common. No cmocka. */
#ifndef FL_TESTS_CHAOS_FAULTS_H
#define FL_TESTS_CHAOS_FAULTS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/control.h"
#include "common/dtype.h"
#include "common/rpc.h"
#include "eval/evaluator.h"
#include "replay/client.h"
#include "replay/writer.h"
#include "tests/chaos_util.h"

/* The address and observation signature of replay shard 0 from its latest "serving on"
 * line in RUN/logs/replay-0.log (a restarted shard serves on a new port). 0, or -1. */
static inline int chaos_replay_addr(const char *run_dir, char *addr, size_t len, fl_obs_spec_t *spec) {
    char path[4400], line[2048];
    snprintf(path, sizeof path, "%s/logs/replay-0.log", run_dir);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        const char *at = strstr(line, " serving on ");
        const char *obs = at ? strstr(at, ", obs ") : NULL;
        if (!obs) continue;
        char a[256], dt[32], shape[128];
        if (sscanf(at + 12, "%255s", a) != 1 || sscanf(obs + 6, "%31s (%127[^)])", dt, shape) != 2) continue;
        fl_obs_spec_t s;
        memset(&s, 0, sizeof s);
        int known = 0;
        for (int d = 0; d < 16 && !known; d++)
            if (fl_dtype_size((fl_dtype)d) && strcmp(fl_dtype_name((fl_dtype)d), dt) == 0) {
                s.dtype = (fl_dtype)d;
                known = 1;
            }
        char *p = shape;
        while (known && *p && s.rank < FL_OBS_MAX_RANK) {
            s.shape[s.rank++] = (int)strtol(p, &p, 10);
            while (*p == ',' || *p == ' ') p++;
        }
        if (!known || s.rank < 1) continue;
        snprintf(addr, len, "%s", a);
        *spec = s;
        found = 0;
    }
    fclose(f);
    return found;
}

/* Sets this process's access token to RUN/access.token's. 0, or -1. */
static inline int chaos_use_access_token(const char *run_dir) {
    char path[4400], tok[128] = "";
    snprintf(path, sizeof path, "%s/access.token", run_dir);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fgets(tok, sizeof tok, f) != NULL;
    fclose(f);
    tok[strcspn(tok, "\n")] = '\0';
    return ok && fl_rpc_set_access_token(tok, NULL) == FL_OK ? 0 : -1;
}

/* The launcher's Control address, from the `--control ADDR` of one of its roles. */
static inline int chaos_control_addr(pid_t launcher, char *addr, size_t len) {
    static const char *const roles[] = {"actor", "learner", "evaluator"};
    for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++) {
        pid_t pid = chaos_find_role(launcher, roles[r]);
        if (!pid) continue;
        char path[64], buf[8192];
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        for (size_t i = 0; i < n;) {
            const char *arg = buf + i;
            size_t al = strlen(arg);
            if (strcmp(arg, "--control") == 0 && i + al + 1 < n) {
                snprintf(addr, len, "%s", arg + al + 1);
                return 0;
            }
            i += al + 1;
        }
    }
    return -1;
}

/* The number after `key` in msg ("|r| <= 2.9704", "[0, 200]"), or 0. */
static inline double chaos_bound_in(const char *msg, const char *key) {
    const char *at = strstr(msg, key);
    return at ? strtod(at + strlen(key), NULL) : 0.0;
}

/* A random first stream id (a peer's streams never meet each other's or an actor's). */
static inline uint64_t chaos_stream_base(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) v = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
    v &= ~UINT64_C(0xffff); /* room for 65,536 streams after it */
    return v ? v : UINT64_C(0x10000);
}

/* One batch of n rows at reward `reward` and priority `prio` on a new stream; its status
 * (the shard's message in err). */
static inline fl_status chaos_insert(fl_replay_client_t *cl, const fl_obs_spec_t *spec, uint64_t stream, size_t n,
                                     const uint8_t *obs, float reward, float prio, fl_err_t *err) {
    fl_replay_writer_t *w = NULL;
    fl_status st = fl_replay_writer_create(cl, stream, spec, 1, &w, err);
    if (st != FL_OK) return st;
    fl_replay_writer_set_limits(w, 0, 0); /* only finite: the shard is what is tried */
    float *col = malloc(3 * n * sizeof *col);
    int32_t *actions = calloc(n, sizeof *actions);
    if (!col || !actions) {
        free(col);
        free(actions);
        fl_replay_writer_destroy(w);
        return fl_err_set(err, FL_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        col[i] = (i % 2 ? -1.0f : 1.0f) * reward; /* rewards at both ends of the bound */
        col[n + i] = 0.99f;                       /* discounts */
        col[2 * n + i] = prio;
        actions[i] = (int32_t)(i % 2);
    }
    st = fl_replay_writer_append(w, n, obs, actions, col, col + n, obs, col + 2 * n, err);
    if (st == FL_OK) st = fl_replay_writer_flush(w, 5000, err);
    fl_replay_writer_destroy(w);
    free(col);
    free(actions);
    return st;
}

/* poison: `rows` rows at the largest reward (both signs) and priority replay shard 0 of
 * the run takes, found from its refusals of 1e30, with observations sampled from it.
 * The rows the shard took, or -1 when it could not be reached; bounds into
 * *reward_bound and *prio_bound. */
static inline long chaos_poison(const char *run_dir, size_t rows, double *reward_bound, double *prio_bound) {
    char addr[256];
    fl_obs_spec_t spec;
    *reward_bound = *prio_bound = 0;
    if (chaos_replay_addr(run_dir, addr, sizeof addr, &spec) != 0 || chaos_use_access_token(run_dir) != 0) return -1;
    fl_replay_client_t *cl = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_replay_client_create(addr, &cl, &err) != FL_OK) return -1;
    const size_t ob = fl_obs_spec_bytes(&spec);
    uint8_t *obs = calloc(rows, ob ? ob : 1);
    fl_replay_batch_t b;
    memset(&b, 0, sizeof b);
    if (obs && fl_replay_sample(cl, 64, 0.0, 5000, &b, &err) == FL_OK && b.count && b.obs_bytes == ob)
        for (size_t i = 0; i < rows; i++) memcpy(obs + i * ob, b.obs + (i % b.count) * ob, ob);
    fl_replay_batch_free(&b);
    uint64_t stream = chaos_stream_base();
    long took = -1;
    if (obs) {
        fl_err_init(&err);
        if (chaos_insert(cl, &spec, stream++, 1, obs, 1e30f, 1.0f, &err) == FL_INVALID_ARGUMENT)
            *reward_bound = chaos_bound_in(err.msg, "|r| <= ");
        fl_err_init(&err);
        if (chaos_insert(cl, &spec, stream++, 1, obs, 0.0f, 1e30f, &err) == FL_INVALID_ARGUMENT)
            *prio_bound = chaos_bound_in(err.msg, "in [0, ");
        if (*reward_bound > 0 && *prio_bound > 0) {
            took = 0;
            for (size_t done = 0; done < rows; done += 64) { /* batches of an actor's size */
                size_t n = rows - done < 64 ? rows - done : 64;
                fl_err_init(&err);
                /* 1e-4 under: the message rounds the bound to 5 digits */
                if (chaos_insert(cl, &spec, stream++, n, obs, (float)(*reward_bound * 0.9999),
                                 (float)(*prio_bound * 0.9999), &err) == FL_OK)
                    took += (long)n;
                else
                    fprintf(stderr, "chaos poison: a batch of %zu rows not taken: %s\n", n, err.msg);
            }
        }
    }
    free(obs);
    fl_replay_client_destroy(cl);
    return took;
}

/* flood: `streams` one-row inserts, each on a fresh stream. The inserts taken, or -1. */
static inline long chaos_stream_flood(const char *run_dir, int streams) {
    char addr[256];
    fl_obs_spec_t spec;
    if (chaos_replay_addr(run_dir, addr, sizeof addr, &spec) != 0 || chaos_use_access_token(run_dir) != 0) return -1;
    fl_replay_client_t *cl = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_replay_client_create(addr, &cl, &err) != FL_OK) return -1;
    uint8_t *obs = calloc(1, fl_obs_spec_bytes(&spec) + 1);
    uint64_t stream = chaos_stream_base();
    long took = 0;
    for (int i = 0; obs && i < streams; i++) {
        fl_err_init(&err);
        if (chaos_insert(cl, &spec, stream + (uint64_t)i, 1, obs, 0.0f, 1.0f, &err) != FL_OK) {
            fprintf(stderr, "chaos flood: stopped after %ld inserts: %s\n", took, err.msg);
            break; /* the shard is away or refuses: the rest would wait as long */
        }
        took++;
    }
    free(obs);
    fl_replay_client_destroy(cl);
    return took;
}

/* forge: an evaluator's report of a 1e9 evaluation, sent to the launcher's Control with
 * the run's access token and no role's credential. 0 once sent, -1 when the launcher's
 * Control could not be found. */
static inline int chaos_forge_report(pid_t launcher, const char *run_dir) {
    char addr[256];
    if (chaos_control_addr(launcher, addr, sizeof addr) != 0 || chaos_use_access_token(run_dir) != 0) return -1;
    unsetenv("FLEET_CREDENTIAL");
    fl_reporter_t *r = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_reporter_create(addr, "evaluator", 0, 0.0, &r, &err) != FL_OK) return -1;
    double v[FL_EVALUATOR_RESULT_COUNT] = {0};
    v[FL_EVAL_RESULT_round] = 1e6;
    v[FL_EVAL_RESULT_return_mean] = v[FL_EVAL_RESULT_return_min] = v[FL_EVAL_RESULT_return_max] = 1e9;
    v[FL_EVAL_RESULT_length_mean] = v[FL_EVAL_RESULT_length_min] = v[FL_EVAL_RESULT_length_max] = 500;
    v[FL_EVAL_RESULT_episodes] = 10;
    fl_report_t rep;
    memset(&rep, 0, sizeof rep);
    rep.n_extra = FL_EVALUATOR_RESULT_COUNT;
    rep.extra_names = fl_evaluator_result_names;
    rep.extra_values = v;
    fl_reporter_tick(r, &rep, 1);
    fl_reporter_destroy(r);
    return 0;
}

/* connections: n TCP connections to replay shard 0 that send nothing, held for hold_s
 * (or until the launcher exits). The connections made, or -1. */
static inline int chaos_connection_flood(pid_t launcher, const char *run_dir, int n, double hold_s) {
    char addr[256];
    fl_obs_spec_t spec;
    if (chaos_replay_addr(run_dir, addr, sizeof addr, &spec) != 0) return -1;
    const char *colon = strrchr(addr, ':');
    if (strncmp(addr, "unix:", 5) == 0 || !colon) return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    char host[64];
    snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) return -1;
    int *fds = malloc((size_t)n * sizeof *fds), made = 0;
    if (!fds) return -1;
    for (int i = 0; i < n; i++) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) break;
        if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
            close(s);
            break;
        }
        fds[made++] = s;
    }
    for (double t = 0; t < hold_s && kill(launcher, 0) == 0; t += 0.1) usleep(100000);
    for (int i = 0; i < made; i++) close(fds[i]);
    free(fds);
    return made;
}

/* stop: SIGSTOP one of the launcher's roles (at random), SIGCONT it hold_s later. Its pid
 * and role, or 0. */
static inline pid_t chaos_stop_one(pid_t launcher, uint64_t *rng, double hold_s, char *role, size_t len) {
    pid_t pid = chaos_pick_role(launcher, rng, role, len);
    if (!pid || kill(pid, SIGSTOP) != 0) return 0;
    for (double t = 0; t < hold_s && kill(launcher, 0) == 0; t += 0.1) usleep(100000);
    kill(pid, SIGCONT);
    return pid;
}

#endif
