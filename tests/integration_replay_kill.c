/* A replay shard killed with kill -9 in the middle of inserts loses no acknowledged item:
 * a real `fleet replay` process on 127.0.0.1 with replay.wal = 1 (and periodic
 * checkpoints every 0.5 s, so that the log rotates during the test), writer threads in
 * this process appending batches whose observations name each transition, the shard
 * killed twice while they run and restarted on the same port, the writers resending what
 * was not acknowledged (and back within seconds of the shard serving again), and at the
 * end every appended transition in the shard's table exactly once (read from a
 * Checkpoint call's file, drained as a queue). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>

#include "common/clock.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "replay/client.h"
#include "replay/table.h"
#include "replay/writer.h"
#include "tests/proc_util.h"

#define WRITERS 3
#define MAX_BATCHES 20000 /* per writer; the test stops them long before */
#define OBS_DIM 4         /* cartpole's observation: float32 (4) */

static char g_tmp[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-kill-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_tmp);
    return 0;
}

/* ---- the shard process ------------------------------------------------------ */

typedef struct shard {
    pid_t pid;
    char addr[300];
    char log[512];
} shard_t;

static char g_listen[300], g_ckpt_dir[300];

static void dump_log(const char *path) {
    char *text = read_file(path);
    if (!text) return;
    size_t n = strlen(text);
    fprintf(stderr, "---- %s (tail) ----\n%s\n", path, n > 4000 ? text + n - 4000 : text);
    free(text);
}

/* Starts `fleet replay` (output to a log file of incarnation `run`) and waits for the
 * address it writes to --ready-fd. */
static void shard_start(shard_t *s, int run) {
    snprintf(s->log, sizeof s->log, "%s/shard-run%d.log", g_tmp, run);
    char listen[320], fd_arg[16], dir_set[400];
    snprintf(listen, sizeof listen, "%s", g_listen);
    snprintf(dir_set, sizeof dir_set, "replay.checkpoint_dir=%s", g_ckpt_dir);
    char *argv[] = {(char *)fleet_bin(),
                    "replay",
                    "--listen",
                    listen,
                    "--shard",
                    "0",
                    "--ready-fd",
                    fd_arg,
                    "--set",
                    "replay.wal=1",
                    "--set",
                    dir_set,
                    "--set",
                    "replay.checkpoint_every=0.5",
                    "--set",
                    "replay.capacity=1000000",
                    "--set",
                    "replay.selector=fifo",
                    "--set",
                    "replay.max_times_sampled=1",
                    "--set",
                    "replay.min_size_to_sample=1",
                    "--set",
                    "replay.samples_per_insert=0", /* writers only: no rate limit */
                    NULL};
    /* Wait (generously: a loaded machine, a sanitizer build) for the address line. */
    s->pid = start_service_process(argv, fd_arg, s->log, 120, s->addr, sizeof s->addr);
    assert_true(s->pid > 0);
    if (!s->addr[0]) {
        dump_log(s->log);
        fail_msg("fleet replay (run %d) exited, or was not ready after 120 s", run);
    }
}

static void shard_kill9(shard_t *s) {
    assert_int_equal(kill(s->pid, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(s->pid, &status, 0), s->pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/* The number of items the shard's start-up log says it recovered. */
static uint64_t recovered_items(const shard_t *s) {
    char *text = read_file(s->log);
    assert_non_null(text);
    const char *hit = strstr(text, "recovered ");
    if (!hit) {
        dump_log(s->log);
        fail_msg("no \"recovered\" line in %s", s->log);
    }
    uint64_t n = strtoull(hit + strlen("recovered "), NULL, 10);
    free(text);
    return n;
}

/* ---- the writers ------------------------------------------------------------ */

typedef struct writer_arg {
    int index;
    const char *addr;
    atomic_int *stop;
    atomic_uint_fast64_t acked;    /* published after every append */
    atomic_uint_fast64_t appended; /* transitions appended */
    atomic_int appending;          /* 0 once it stopped appending (told to, or MAX_BATCHES) */
    fl_status flush_st;
    char err[FL_ERR_MSG_MAX];
} writer_arg_t;

/* Appends batches of 1..8 transitions until told to stop, then flushes until every one
 * is acknowledged. Transition n of writer w has obs (w, n, -n, 0.5). */
static void *writer_main(void *p) {
    writer_arg_t *a = p;
    fl_err_t e;
    fl_err_init(&e);
    fl_replay_client_t *c = NULL;
    fl_replay_writer_t *w = NULL;
    const fl_obs_spec_t spec = {.dtype = FL_DTYPE_FLOAT32, .rank = 1, .shape = {OBS_DIM}};
    a->flush_st = fl_replay_client_create(a->addr, &c, &e);
    if (a->flush_st == FL_OK) a->flush_st = fl_replay_writer_create(c, 1000 + (uint64_t)a->index, &spec, 4, &w, &e);
    uint64_t n = 0;
    for (int b = 0; a->flush_st == FL_OK && b < MAX_BATCHES && !atomic_load(a->stop); b++) {
        size_t cnt = 1 + (size_t)(b * 5 + a->index) % 8;
        float obs[8 * OBS_DIM], next[8 * OBS_DIM], rew[8], disc[8], pri[8];
        int32_t act[8];
        for (size_t i = 0; i < cnt; i++) {
            float id = (float)(n + i);
            obs[i * OBS_DIM + 0] = (float)a->index;
            obs[i * OBS_DIM + 1] = id;
            obs[i * OBS_DIM + 2] = -id;
            obs[i * OBS_DIM + 3] = 0.5f;
            for (int d = 0; d < OBS_DIM; d++) next[i * OBS_DIM + d] = obs[i * OBS_DIM + d] + 1.0f;
            act[i] = (int32_t)((n + i) % 2);
            rew[i] = 1.0f;
            disc[i] = 0.99f;
            pri[i] = 1.0f;
        }
        a->flush_st = fl_replay_writer_append(w, cnt, obs, act, rew, disc, next, pri, &e);
        n += cnt;
        atomic_store(&a->appended, n);
        atomic_store(&a->acked, fl_replay_writer_acked(w));
        fl_sleep_sec(0.002);
    }
    atomic_store(&a->appending, 0);
    /* The shard may be down right now: flush until everything is acknowledged. */
    double t0 = fl_clock_sec();
    while (a->flush_st == FL_OK) {
        fl_status st = fl_replay_writer_flush(w, 30000, &e);
        if (st == FL_OK) break;
        if (fl_clock_sec() - t0 > 180) {
            a->flush_st = st;
            break;
        }
    }
    if (w) atomic_store(&a->acked, fl_replay_writer_acked(w));
    snprintf(a->err, sizeof a->err, "%s", e.msg);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    return NULL;
}

static uint64_t acked_sum(writer_arg_t *a) {
    uint64_t s = 0;
    for (int i = 0; i < WRITERS; i++) s += atomic_load(&a[i].acked);
    return s;
}

static int appending(writer_arg_t *a) {
    int n = 0;
    for (int i = 0; i < WRITERS; i++) n += atomic_load(&a[i].appending);
    return n;
}

/* Waits until the writers' acknowledged transitions reach `target` (or, on a machine so
 * slow that the writers ran out of batches, until they stopped appending). */
static void wait_acked(writer_arg_t *a, uint64_t target, const shard_t *s) {
    double t0 = fl_clock_sec();
    while (acked_sum(a) < target && appending(a) > 0) {
        if (fl_clock_sec() - t0 > 120) {
            dump_log(s->log);
            fail_msg("writers acknowledged %" PRIu64 " of %" PRIu64 " transitions after 120 s", acked_sum(a), target);
        }
        fl_sleep_sec(0.01);
    }
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- the test --------------------------------------------------------------- */

static void test_kill9_loses_no_acknowledged_item(void **state) {
    (void)state;
    /* TCP on loopback, as a fleet's shards serve: a port of the kernel's choice, then
     * the same port for every restart. */
    snprintf(g_listen, sizeof g_listen, "127.0.0.1:0");
    snprintf(g_ckpt_dir, sizeof g_ckpt_dir, "%s/ckpt", g_tmp);
    assert_int_equal(mkdir(g_ckpt_dir, 0755), 0);
    shard_t s;
    shard_start(&s, 0);
    fprintf(stderr, "shard serving on %s (pid %d)\n", s.addr, (int)s.pid);
    snprintf(g_listen, sizeof g_listen, "%s", s.addr);

    static writer_arg_t wa[WRITERS];
    static char addr[300];
    snprintf(addr, sizeof addr, "%s", s.addr);
    atomic_int stop;
    atomic_init(&stop, 0);
    pthread_t th[WRITERS];
    for (int i = 0; i < WRITERS; i++) {
        wa[i].index = i;
        wa[i].addr = addr;
        wa[i].stop = &stop;
        atomic_init(&wa[i].acked, 0);
        atomic_init(&wa[i].appended, 0);
        atomic_init(&wa[i].appending, 1);
        assert_int_equal(pthread_create(&th[i], NULL, writer_main, &wa[i]), 0);
    }

    /* Let a periodic checkpoint happen first, so that recovery reads a checkpoint and
     * the log segments after it. */
    char ckpt[400];
    snprintf(ckpt, sizeof ckpt, "%s/shard-0.ckpt", g_ckpt_dir);
    wait_acked(wa, 400, &s);
    double t0 = fl_clock_sec();
    while (!file_exists(ckpt)) {
        if (fl_clock_sec() - t0 > 60) fail_msg("no periodic checkpoint %s after 60 s", ckpt);
        fl_sleep_sec(0.02);
    }

    for (int k = 1; k <= 2; k++) {
        /* Kill in the middle of the inserts: the writers are appending right now. */
        wait_acked(wa, acked_sum(wa) + 400, &s);
        shard_kill9(&s);
        uint64_t acked_before = acked_sum(wa);
        fprintf(stderr, "kill -9 #%d: %" PRIu64 " transitions acknowledged before it\n", k, acked_before);
        for (int i = 0; i < WRITERS; i++)
            fprintf(stderr, "  writer %d: %" PRIu64 " appended, %" PRIu64 " acknowledged\n", i,
                    (uint64_t)atomic_load(&wa[i].appended), (uint64_t)atomic_load(&wa[i].acked));
        fl_sleep_sec(0.3); /* the writers keep appending; their batches wait */
        shard_start(&s, k);
        /* The writers are back within seconds of the shard serving. */
        double t_up = fl_clock_sec();
        while (acked_sum(wa) <= acked_before && fl_clock_sec() - t_up < 60) fl_sleep_sec(0.005);
        double back = fl_clock_sec() - t_up;
        fprintf(stderr, "restart #%d: the writers' first acknowledgement %.2f s after the shard served\n", k, back);
        /* A liveness bound (it takes a fraction of a second): gRPC's channel by itself,
         * after refused connection attempts, went on failing calls for ~20 s. */
        if (back > 10) fail_msg("the writers came back %.1f s after the shard served (expected within seconds)", back);
        uint64_t rec = recovered_items(&s);
        fprintf(stderr, "restart #%d: the shard recovered %" PRIu64 " transitions\n", k, rec);
        assert_true(rec >= acked_before);
    }
    wait_acked(wa, acked_sum(wa) + 400, &s);
    atomic_store(&stop, 1);
    uint64_t total = 0, appended[WRITERS];
    for (int i = 0; i < WRITERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        if (wa[i].flush_st != FL_OK) {
            dump_log(s.log);
            fail_msg("writer %d: %s", i, wa[i].err);
        }
        appended[i] = atomic_load(&wa[i].appended);
        assert_int_equal(atomic_load(&wa[i].acked), appended[i]);
        total += appended[i];
    }
    fprintf(stderr, "%" PRIu64 " transitions appended and acknowledged\n", total);

    /* The shard's table, through a Checkpoint call to a file of our own (in the shard's
     * checkpoint folder, where every Checkpoint call writes). */
    char final[400];
    snprintf(final, sizeof final, "%s/final.ckpt", g_ckpt_dir);
    fl_err_t e;
    fl_err_init(&e);
    fl_rpc_channel_t *ch = NULL;
    assert_int_equal(fl_rpc_channel_create(s.addr, 0, &ch, &e), FL_OK);
    Fleet__CheckpointRequest creq = FLEET__CHECKPOINT_REQUEST__INIT;
    creq.name = "final.ckpt";
    ProtobufCMessage *m = NULL;
    if (fl_rpc_unary_pb(ch, "/fleet.Replay/Checkpoint", &creq.base, &fleet__checkpoint_response__descriptor, &m, 60000,
                        0, &e) != FL_OK)
        fail_msg("Checkpoint: %s", e.msg);
    Fleet__CheckpointResponse *cr = (Fleet__CheckpointResponse *)m;
    assert_int_equal(cr->items, total);
    fleet__checkpoint_response__free_unpacked(cr, NULL);
    fl_rpc_channel_destroy(ch);

    fl_table_t *t = NULL;
    if (fl_table_load(final, NULL, &t, &e) != FL_OK) fail_msg("load: %s", e.msg);
    fl_table_info_t ti;
    fl_table_info(t, &ti);
    assert_int_equal(ti.inserted, total); /* nothing twice */
    assert_int_equal(ti.size, total);     /* nothing evicted */
    /* Drain the queue: every item, oldest first. */
    uint64_t *keys = malloc(total * sizeof *keys);
    float *obs = malloc(total * OBS_DIM * sizeof(float));
    assert_non_null(keys);
    assert_non_null(obs);
    if (fl_table_sample(t, total, 0.0, keys, NULL, NULL, obs, NULL, NULL, NULL, NULL, &e) != FL_OK)
        fail_msg("sample: %s", e.msg);
    uint8_t *seen[WRITERS];
    for (int i = 0; i < WRITERS; i++) seen[i] = calloc(appended[i] + 1, 1);
    uint64_t next_id[WRITERS] = {0};
    for (uint64_t j = 0; j < total; j++) {
        assert_int_equal(keys[j], fl_table_key_make(0, j));
        const float *o = obs + j * OBS_DIM;
        int w = (int)o[0];
        assert_true(w >= 0 && w < WRITERS && (float)w == o[0]);
        uint64_t id = (uint64_t)o[1];
        assert_true((float)id == o[1] && o[2] == -o[1] && o[3] == 0.5f);
        if (id >= appended[w]) fail_msg("writer %d: transition %" PRIu64 " was never appended", w, id);
        if (seen[w][id]) fail_msg("writer %d: transition %" PRIu64 " is in the table twice", w, id);
        seen[w][id] = 1;
        /* Each writer's transitions are in the table in the order it appended them. */
        if (id != next_id[w])
            fail_msg("writer %d: transition %" PRIu64 " where %" PRIu64 " was expected", w, id, next_id[w]);
        next_id[w]++;
    }
    for (int i = 0; i < WRITERS; i++) {
        assert_int_equal(next_id[i], appended[i]);
        free(seen[i]);
    }
    free(keys);
    free(obs);
    fl_table_destroy(t);

    /* A clean stop. */
    kill(s.pid, SIGTERM);
    int status = wait_process(s.pid, 60);
    assert_true(status != -1 && WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    char *text = read_file(s.log);
    assert_non_null(text);
    const char *err_line = strstr(text, " E [");
    if (err_line) fail_msg("the shard logged an error: %.200s", err_line);
    free(text);
}

/* --restore with the log on is refused: the shard recovers from its folder itself. */
static void test_restore_with_wal_refused(void **state) {
    (void)state;
    char dir_set[400], restore[400];
    snprintf(dir_set, sizeof dir_set, "replay.checkpoint_dir=%s", g_tmp);
    snprintf(restore, sizeof restore, "%s/x.ckpt", g_tmp);
    char *argv[] = {(char *)fleet_bin(), "replay", "--restore", restore, "--set",
                    "replay.wal=1",      "--set",  dir_set,     NULL};
    char *out = NULL;
    int rc = run_capture(argv, 60, &out);
    fprintf(stderr, "%s", out);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "--restore cannot be combined with replay.wal"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill9_loses_no_acknowledged_item),
        cmocka_unit_test(test_restore_with_wal_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
