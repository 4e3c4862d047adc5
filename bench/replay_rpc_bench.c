/* replay_rpc_bench: throughput of one replay shard over real loopback gRPC, in one process.
 *
 * Each case starts a fresh shard (fl_replay_service_create + fl_replay_service_start) on
 * 127.0.0.1 port 0 (or, with --unix, on unix:/tmp/fleet-replay-rpc-bench-<pid>.sock):
 * capacity --capacity (2,000,000, Ape-X), prioritized selector, alpha 0.6,
 * min_size_to_sample 1000, no rate limit, actor.count = K (so the shard sizes its thread
 * pool as `fleet replay` would for K actors). Then, all in this process but every call
 * through gRPC:
 *  - K actor streams (K = 1, 4, 16; --streams), each a thread with its own
 *    fl_replay_client_t and fl_replay_writer_t (distinct stream ids), appending batches of
 *    --insert-batch transitions (50, the Ape-X actor buffer) as fast as they can, with
 *    --batches-per-call batches per Insert call (default fl_actor_batches_per_call for the
 *    shape and batch, what the actor uses: 32 for CartPole, 25 for MinAtar and 1 for
 *    Atari at 50). Inputs are generated before any clock starts: a pool of 8 batches
 *    per shape, reused round robin (each stream starts at another one), priorities in
 *    [0.1, 2.1). Each batch is cut from one random trajectory as the actor's 3-step
 *    buffer does: next_obs of transition i is obs of transition i + 3, so the table's
 *    frame sharing (replay/frames.h) sees what real actor data gives it;
 *  - with and without a learner (see --prefetch below) calling fl_replay_sample (batch 512,
 *    beta 0.4) and then fl_replay_update_priorities with the returned keys and
 *    pre-generated priorities (--no-updates: samples only);
 *  - for CartPole-shaped (float32 [4], 2 actions), MinAtar-shaped (uint8 [10, 10, 4],
 *    6 actions, binary planes) and Atari-shaped (uint8 [84, 84, 4], 6 actions: four
 *    stacked 84 x 84 frames, replay.frame_stack = 4, so the table stores each frame once
 *    and a Sample reply carries 2 x 28,224 bytes a transition) observations (--shape).
 *    The Atari cases run at capacity ATARI_CAPACITY (100,000: about 0.7 GB of frames)
 *    unless --capacity is given.
 * Warm-up: the threads start, and the window opens once the table holds min_size items,
 * the learner (if any) has finished a Sample call and at least 0.5 s have passed (with
 * --fill: once the table is full, see below). The window lasts --seconds (3) of the
 * monotonic clock.
 * Fill phase vs steady state: the table's memory is touched for the first time while it
 * fills, and those page faults cost a large share of the CPU (a MinAtar observation is
 * 400 bytes: about a gigabyte for 2,000,000). With the default capacity the window
 * mostly falls in the fill phase; --fill waits until the ring is full (a few seconds per
 * case) so that the window measures the wrapped, steady state, and so does a small
 * --capacity (e.g. 100000).
 *
 * What the figures are: deltas over the window of the shard's own counters, read in
 * process with fl_replay_service_info (the counters the Info RPC reports, read without an
 * RPC) at the window's start and end, divided by the window's length:
 *   insert tr/s   Info.inserted: transitions inserted into the table. A transition is
 *                 counted when the shard inserts it, which precedes its acknowledgement
 *                 (at the end of its Insert call) by less than one call; so the figure
 *                 differs from "acknowledged inside the window" by at most K calls'
 *                 worth of transitions at each end of the window.
 *   sampled tr/s  Info.sampled: transitions drawn by Sample calls.
 *   sample/s      Info.sample_calls: Sample calls answered.
 *   updates/s     Info.updates_applied: priorities updated.
 * After the window the threads stop, every writer flushes (so nothing stays pending) and
 * the case fails unless the table's final inserted counter equals the sum of the writers'
 * fl_replay_writer_acked, and that equals what they appended: nothing is lost or doubled.
 * Wall-clock throughput on a shared machine is noisy; quote it with the core count.
 *
 *   replay_rpc_bench [--json] [--seconds S] [--capacity N] [--insert-batch N]
 *                    [--batches-per-call N] [--streams 1,4,16] [--shape cartpole|minatar|atari|all]
 *                    [--learner both|on|off] [--prefetch D] [--insert-rate R] [--no-updates] [--unix] [--fill]
 * --wal DIR: the shard runs with its write-ahead log on (replay.wal = 1, the log in a
 * fresh folder under DIR per case, removed afterwards), to measure what durability costs.
 * --insert-rate R: the writers together insert about R transitions/s (each paces its
 * share by sleeping), so that a learner's sample rate can be measured next to a given
 * insert rate rather than against writers that take every cycle; 0 (default): no pacing.
 * --prefetch D (default 2, learner.prefetch's default): the learner keeps D Sample calls
 * in flight (replay/prefetch.h), each batch's priority updates riding on the next Sample
 * call, as fleet's learner does; 0: one thread, Sample then UpdatePriorities in turn.
 * Exit status: 0, 1 on any failure (the status and its message are printed), 2 for bad
 * usage. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/actor.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/rng.h"
#include "common/status.h"
#include "replay/client.h"
#include "replay/prefetch.h"
#include "replay/server.h"
#include "replay/sharded.h"
#include "replay/wire.h"
#include "replay/writer.h"

#define POOL 8   /* distinct input batches per shape, reused round robin */
#define N_STEP 3 /* learner.n_step: next_obs of transition i is obs of i + N_STEP */
#define MAX_INSERT_BATCH 4096
#define MAX_STREAMS 64
#define SAMPLE_BATCH 512 /* the learner batch */
#define SAMPLE_BETA 0.4
#define MIN_SIZE 1000           /* replay.min_size_to_sample */
#define SAMPLE_TIMEOUT_MS 10000 /* a Sample call waits this long for min_size */
#define FLUSH_TIMEOUT_MS 30000
#define WARMUP_MIN_S 0.5
#define WARMUP_MAX_S 120.0
#define ATARI_CAPACITY 100000 /* the Atari cases' capacity unless --capacity is given */

typedef struct shape {
    const char *name;
    fl_dtype dtype;
    int rank;
    int dims[3];
    int num_actions;
    int frame_stack; /* replay.frame_stack: an observation is this many frames on its last axis */
} shape_t;

static const shape_t SHAPES[] = {
    {"cartpole", FL_DTYPE_FLOAT32, 1, {4, 0, 0}, 2, 1},
    {"minatar", FL_DTYPE_UINT8, 3, {10, 10, 4}, 6, 1},
    {"atari", FL_DTYPE_UINT8, 3, {84, 84, 4}, 6, 4},
};
#define NUM_SHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

typedef struct opts {
    int json, unix_socket, updates, fill;
    double seconds;
    uint64_t capacity;
    int capacity_set; /* --capacity given: the Atari cases use it too */
    size_t insert_batch;
    int batches_per_call;
    int streams[16], n_streams;
    int shape; /* index into SHAPES, or -1 for all */
    int learner_on, learner_off;
    int prefetch;         /* the learner's Sample calls in flight (learner.prefetch); 0: one call at a time */
    double insert_rate;   /* transitions/s all writers together aim for (paced); 0: as fast as they can */
    char wal_parent[256]; /* --wal DIR: replay.wal on, a log folder per case under DIR; "" = off */
    long cores;
} opts_t;

/* Pre-generated inputs of one shape. */
typedef struct inputs {
    size_t n, obs_bytes;
    uint8_t *obs[POOL], *next_obs[POOL]; /* (n, obs_bytes) */
    int32_t *actions[POOL];              /* (n) */
    float *rewards[POOL];                /* (n) */
    float *discounts[POOL];              /* (n) */
    float *priorities[POOL];             /* (n) */
    float *new_priorities[POOL];         /* (SAMPLE_BATCH) the learner's updates */
} inputs_t;

/* What every thread of a case shares. */
typedef struct shared {
    const opts_t *o;
    const inputs_t *in;
    fl_obs_spec_t spec;
    char addr[320];
    atomic_int stop;
    atomic_int failed;
    int streams; /* writers of this case */
    int bpc;     /* batches per Insert call of this case */
} shared_t;

typedef struct worker {
    shared_t *sh;
    pthread_t th;
    int started;
    int index;
    uint64_t stream_id;
    uint64_t appended, acked; /* transitions (writers) */
    uint64_t calls;           /* Sample calls (learner) */
    const char *what;         /* the failed operation, NULL while all is well */
    fl_status st;
    fl_err_t err;
} worker_t;

typedef struct result {
    double seconds;
    double insert_rate, sample_rate, sample_calls_rate, update_rate;
    uint64_t size;
    int batches_per_call;
} result_t;

static void fail_worker(worker_t *w, const char *what, fl_status st) {
    w->what = what;
    w->st = st;
    atomic_store(&w->sh->failed, 1);
    atomic_store(&w->sh->stop, 1);
}

static void *writer_main(void *p) {
    worker_t *w = p;
    shared_t *sh = w->sh;
    const inputs_t *in = sh->in;
    fl_replay_client_t *c = NULL;
    fl_replay_writer_t *wr = NULL;
    fl_status st = fl_replay_client_create(sh->addr, &c, &w->err);
    if (st != FL_OK) {
        fail_worker(w, "writer: client_create", st);
        goto out;
    }
    st = fl_replay_writer_create(c, w->stream_id, &sh->spec, sh->bpc, &wr, &w->err);
    if (st != FL_OK) {
        fail_worker(w, "writer: create", st);
        goto out;
    }
    /* Pacing: this writer's share of --insert-rate, by sleeping until each batch's time. */
    double per_batch = sh->o->insert_rate > 0 ? (double)in->n * (double)sh->streams / sh->o->insert_rate : 0.0;
    double t_next = fl_clock_sec();
    for (size_t k = (size_t)w->index; !atomic_load_explicit(&sh->stop, memory_order_relaxed); k++) {
        size_t j = k % POOL;
        if (per_batch > 0) {
            t_next += per_batch;
            double ahead = t_next - fl_clock_sec();
            if (ahead > 0)
                usleep((useconds_t)(ahead * 1e6));
            else if (ahead < -0.5)
                t_next = fl_clock_sec(); /* fell behind: do not burst */
        }
        st = fl_replay_writer_append(wr, in->n, in->obs[j], in->actions[j], in->rewards[j], in->discounts[j],
                                     in->next_obs[j], in->priorities[j], &w->err);
        if (st != FL_OK) {
            fail_worker(w, "writer: append", st);
            goto out;
        }
        w->appended += in->n;
    }
    if (atomic_load(&sh->failed)) goto out;
    st = fl_replay_writer_flush(wr, FLUSH_TIMEOUT_MS, &w->err);
    if (st != FL_OK) {
        fail_worker(w, "writer: flush", st);
        goto out;
    }
    w->acked = fl_replay_writer_acked(wr);
out:
    fl_replay_writer_destroy(wr);
    fl_replay_client_destroy(c);
    return NULL;
}

/* The learner with learner.prefetch = D > 0: D sampler threads (replay/prefetch.h) keep
 * Sample calls in flight; this thread takes each batch and gives the buffer back with
 * the batch's new priorities, which its thread sends along with its next Sample call,
 * as fleet's learner does around its training step. */
static void learner_prefetch(worker_t *w) {
    shared_t *sh = w->sh;
    const inputs_t *in = sh->in;
    fl_replay_sharded_t *rs = NULL;
    fl_replay_prefetch_t *pf = NULL;
    fl_status st = fl_replay_sharded_create(sh->addr, 1, &rs, &w->err);
    if (st != FL_OK) {
        fail_worker(w, "learner: sharded_create", st);
        goto out;
    }
    st = fl_replay_prefetch_create(rs, sh->o->prefetch, 1, SAMPLE_BATCH, in->obs_bytes, SAMPLE_BETA, SAMPLE_TIMEOUT_MS,
                                   &pf, &w->err);
    if (st != FL_OK) {
        fail_worker(w, "learner: prefetch_create", st);
        goto out;
    }
    for (size_t k = 0; !atomic_load_explicit(&sh->stop, memory_order_relaxed); k++) {
        fl_replay_prefetched_t *r = NULL;
        if (!fl_replay_prefetch_next(pf, 200, &r)) continue;
        if (r->status == FL_FAILED_PRECONDITION) { /* too many callers waiting for the fill: again */
            fl_replay_prefetch_release(pf, r);
            usleep(10000);
            continue;
        }
        if (r->status != FL_OK) {
            w->err = r->err;
            fail_worker(w, "learner: sample", r->status);
            fl_replay_prefetch_release(pf, r);
            goto out;
        }
        w->calls++;
        /* The batch's new priorities go out with its thread's next Sample call. */
        if (sh->o->updates)
            fl_replay_prefetch_release_updating(pf, r, r->batch->count, in->new_priorities[k % POOL]);
        else
            fl_replay_prefetch_release(pf, r);
    }
    if (pf && (st = fl_replay_prefetch_stop(pf, &w->err)) != FL_OK) fail_worker(w, "learner: last updates", st);
out:
    fl_replay_prefetch_destroy(pf);
    fl_replay_sharded_destroy(rs);
}

static void *learner_main(void *p) {
    worker_t *w = p;
    shared_t *sh = w->sh;
    const inputs_t *in = sh->in;
    if (sh->o->prefetch > 0) {
        learner_prefetch(w);
        return NULL;
    }
    fl_replay_client_t *c = NULL;
    fl_replay_batch_t b;
    memset(&b, 0, sizeof b);
    fl_status st = fl_replay_client_create(sh->addr, &c, &w->err);
    if (st != FL_OK) {
        fail_worker(w, "learner: client_create", st);
        goto out;
    }
    if ((st = fl_replay_batch_init(&b, SAMPLE_BATCH, in->obs_bytes)) != FL_OK) {
        fl_err_set(&w->err, st, "cannot allocate a batch of %d", SAMPLE_BATCH);
        fail_worker(w, "learner: batch_init", st);
        goto out;
    }
    for (size_t k = 0; !atomic_load_explicit(&sh->stop, memory_order_relaxed); k++) {
        st = fl_replay_sample(c, SAMPLE_BATCH, SAMPLE_BETA, SAMPLE_TIMEOUT_MS, &b, &w->err);
        if (st != FL_OK) {
            fail_worker(w, "learner: sample", st);
            goto out;
        }
        w->calls++;
        if (!sh->o->updates) continue;
        uint64_t applied = 0;
        st = fl_replay_update_priorities(c, b.count, b.keys, in->new_priorities[k % POOL], &applied, &w->err);
        if (st != FL_OK) {
            fail_worker(w, "learner: update_priorities", st);
            goto out;
        }
    }
out:
    fl_replay_batch_free(&b);
    fl_replay_client_destroy(c);
    return NULL;
}

static void inputs_free(inputs_t *in) {
    for (int p = 0; p < POOL; p++) {
        free(in->obs[p]);
        free(in->next_obs[p]);
        free(in->actions[p]);
        free(in->rewards[p]);
        free(in->discounts[p]);
        free(in->priorities[p]);
        free(in->new_priorities[p]);
    }
    memset(in, 0, sizeof *in);
}

static fl_status inputs_make(inputs_t *in, const shape_t *s, size_t n, fl_err_t *err) {
    memset(in, 0, sizeof *in);
    size_t ob = fl_dtype_size(s->dtype);
    for (int d = 0; d < s->rank; d++) ob *= (size_t)s->dims[d];
    in->n = n;
    in->obs_bytes = ob;
    fl_rng_t rng;
    fl_rng_init(&rng, 3);
    for (int p = 0; p < POOL; p++) {
        in->obs[p] = malloc(n * ob);
        in->next_obs[p] = malloc(n * ob);
        in->actions[p] = malloc(n * sizeof(int32_t));
        in->rewards[p] = malloc(n * sizeof(float));
        in->discounts[p] = malloc(n * sizeof(float));
        in->priorities[p] = malloc(n * sizeof(float));
        in->new_priorities[p] = malloc(SAMPLE_BATCH * sizeof(float));
        if (!in->obs[p] || !in->next_obs[p] || !in->actions[p] || !in->rewards[p] || !in->discounts[p] ||
            !in->priorities[p] || !in->new_priorities[p]) {
            inputs_free(in);
            return fl_err_set(err, FL_NO_MEMORY, "out of memory for the %s inputs", s->name);
        }
        /* One trajectory of n + N_STEP observations: transition i is (o_i, o_{i + N_STEP}),
         * as the actor's n-step buffer builds them. */
        uint8_t *traj = malloc((n + N_STEP) * ob);
        if (!traj) {
            inputs_free(in);
            return fl_err_set(err, FL_NO_MEMORY, "out of memory for the %s inputs", s->name);
        }
        if (s->frame_stack > 1) { /* o_i[h][w][c] = frame i + c: each frame in `stack` observations */
            const size_t k = (size_t)s->frame_stack, px = ob / k, nf = n + N_STEP + k - 1;
            uint8_t *frames = malloc(nf * px);
            if (!frames) {
                free(traj);
                inputs_free(in);
                return fl_err_set(err, FL_NO_MEMORY, "out of memory for the %s inputs", s->name);
            }
            for (size_t i = 0; i < nf * px; i++) /* a dark screen with a few lit pixels */
                frames[i] = fl_rng_below(&rng, 8) == 0 ? (uint8_t)fl_rng_below(&rng, 256) : 0;
            for (size_t i = 0; i < n + N_STEP; i++)
                for (size_t q = 0; q < px; q++)
                    for (size_t c = 0; c < k; c++) traj[i * ob + q * k + c] = frames[(i + c) * px + q];
            free(frames);
        } else {
            for (size_t i = 0; i < (n + N_STEP) * ob / fl_dtype_size(s->dtype); i++) {
                if (s->dtype == FL_DTYPE_FLOAT32)
                    ((float *)traj)[i] = (float)fl_rng_normal(&rng);
                else
                    traj[i] = fl_rng_below(&rng, 10) == 0; /* MinAtar planes are binary and sparse */
            }
        }
        memcpy(in->obs[p], traj, n * ob);
        memcpy(in->next_obs[p], traj + N_STEP * ob, n * ob);
        free(traj);
        for (size_t i = 0; i < n; i++) {
            in->actions[p][i] = (int32_t)fl_rng_below(&rng, (uint64_t)s->num_actions);
            in->rewards[p][i] = fl_rng_below(&rng, 4) == 0 ? 1.0f : 0.0f;
            in->discounts[p][i] = fl_rng_below(&rng, 20) == 0 ? 0.0f : 0.970299f;
            in->priorities[p][i] = 0.1f + 2.0f * fl_rng_float(&rng);
        }
        for (size_t i = 0; i < SAMPLE_BATCH; i++) in->new_priorities[p][i] = 0.1f + 2.0f * fl_rng_float(&rng);
    }
    return FL_OK;
}

static int sleep_unless_failed(shared_t *sh, double until) {
    while (fl_clock_sec() < until) {
        if (atomic_load(&sh->failed)) return 0;
        fl_sleep_sec(0.005);
    }
    return !atomic_load(&sh->failed);
}

/* The table's capacity for shape s. */
static uint64_t case_capacity(const opts_t *o, const shape_t *s) {
    return s->frame_stack > 1 && !o->capacity_set ? ATARI_CAPACITY : o->capacity;
}

/* Runs one case; 0 on success, 1 after printing what failed. */
static int run_case(const opts_t *o, const shape_t *s, const inputs_t *in, int streams, int learner,
                    uint64_t *next_stream_id, result_t *r) {
    static const char *const prog = "replay_rpc_bench";
    fl_err_t err;
    fl_err_init(&err);
    fl_replay_service_t *svc = NULL;
    worker_t *workers = calloc((size_t)streams + 1, sizeof *workers);
    shared_t sh;
    memset(&sh, 0, sizeof sh);
    sh.o = o;
    sh.in = in;
    sh.streams = streams;
    sh.bpc = o->batches_per_call > 0 ? o->batches_per_call : fl_actor_batches_per_call(in->obs_bytes, (int64_t)in->n);
    r->batches_per_call = sh.bpc;
    sh.spec.dtype = s->dtype;
    sh.spec.rank = s->rank;
    for (int d = 0; d < s->rank; d++) sh.spec.shape[d] = s->dims[d];
    atomic_init(&sh.stop, 0);
    atomic_init(&sh.failed, 0);
    int rc = 1;
    int nthreads = streams + (learner ? 1 : 0);
    char sock[128] = "";
    fl_status st;
    if (!workers) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }

    fl_replay_service_opts_t ro;
    fl_replay_service_opts_init(&ro);
    ro.shards = 1;
    const uint64_t capacity = case_capacity(o, s);
    ro.capacity = (int64_t)capacity;
    ro.min_size_to_sample = (int64_t)(capacity < MIN_SIZE ? capacity : MIN_SIZE);
    ro.frame_stack = s->frame_stack;
    ro.samples_per_insert = 0;
    ro.selector = FL_SELECTOR_PRIORITIZED;
    char wal_dir[FL_REPLAY_DIR_MAX] = "";
    if (o->wal_parent[0]) { /* a fresh log folder per case */
        snprintf(wal_dir, sizeof wal_dir, "%.200s/replay-rpc-bench-XXXXXX", o->wal_parent);
        if (!mkdtemp(wal_dir)) {
            fprintf(stderr, "%s: cannot create a folder under %s\n", prog, o->wal_parent);
            free(workers);
            return 1;
        }
        ro.wal = 1;
        ro.checkpoint_dir = wal_dir;
    }
    ro.actors = streams;
    ro.seed = 1;
    ro.obs = fl_obs_spec_make(s->dtype, s->rank, s->dims);
    ro.num_actions = s->num_actions;
    if ((st = fl_replay_service_create(&ro, &svc, &err)) != FL_OK) {
        fprintf(stderr, "%s: replay service create: %s (%s)\n", prog, fl_status_str(st), err.msg);
        goto done;
    }
    const char *listen = "127.0.0.1:0";
    if (o->unix_socket) {
        snprintf(sock, sizeof sock, "unix:/tmp/fleet-replay-rpc-bench-%d.sock", (int)getpid());
        unlink(sock + 5);
        listen = sock;
    }
    if ((st = fl_replay_service_start(svc, listen, sh.addr, sizeof sh.addr, &err)) != FL_OK) {
        fprintf(stderr, "%s: replay service start on %s: %s (%s)\n", prog, listen, fl_status_str(st), err.msg);
        goto done;
    }

    for (int i = 0; i < nthreads; i++) {
        worker_t *w = &workers[i];
        w->sh = &sh;
        w->index = i;
        w->st = FL_OK;
        fl_err_init(&w->err);
        int is_writer = i < streams;
        if (is_writer) w->stream_id = (*next_stream_id)++;
        if (pthread_create(&w->th, NULL, is_writer ? writer_main : learner_main, w) != 0) {
            fprintf(stderr, "%s: cannot start thread %d\n", prog, i);
            atomic_store(&sh.stop, 1);
            goto join;
        }
        w->started = 1;
    }

    /* Warm-up. */
    double t_start = fl_clock_sec();
    fl_replay_info_t i0, i1;
    for (;;) {
        if (!sleep_unless_failed(&sh, fl_clock_sec() + 0.01)) goto join;
        fl_replay_service_info(svc, &i0);
        double el = fl_clock_sec() - t_start;
        if (i0.size >= fl_replay_service_min_size(svc) && (!learner || i0.sample_calls >= 1) && el >= WARMUP_MIN_S &&
            (!o->fill || i0.inserted >= i0.capacity))
            break;
        if (el > WARMUP_MAX_S) {
            fprintf(stderr,
                    "%s: warm-up: after %.0f s the shard holds %" PRIu64 " transitions (%" PRIu64
                    " needed to sample%s), %" PRIu64 " sample calls answered\n",
                    prog, el, i0.size, fl_replay_service_min_size(svc),
                    o->fill ? ", and --fill waits for a full table" : "", i0.sample_calls);
            atomic_store(&sh.stop, 1);
            goto join;
        }
    }
    /* The window. */
    double t0 = fl_clock_sec();
    fl_replay_service_info(svc, &i0);
    if (!sleep_unless_failed(&sh, t0 + o->seconds)) goto join;
    fl_replay_service_info(svc, &i1);
    double t1 = fl_clock_sec();
    double dt = t1 - t0;
    r->seconds = dt;
    r->insert_rate = (double)(i1.inserted - i0.inserted) / dt;
    r->sample_rate = (double)(i1.sampled - i0.sampled) / dt;
    r->sample_calls_rate = (double)(i1.sample_calls - i0.sample_calls) / dt;
    r->update_rate = (double)(i1.updates_applied - i0.updates_applied) / dt;
    r->size = i1.size;
    atomic_store(&sh.stop, 1);

join:
    for (int i = 0; i < nthreads; i++)
        if (workers[i].started) pthread_join(workers[i].th, NULL);
    if (atomic_load(&sh.failed)) {
        for (int i = 0; i < nthreads; i++)
            if (workers[i].what)
                fprintf(stderr, "%s: %s %s K=%d: %s: %s (%s)\n", prog, s->name, o->unix_socket ? "unix" : "tcp",
                        streams, workers[i].what, fl_status_str(workers[i].st), workers[i].err.msg);
        goto done;
    }
    if (r->seconds <= 0.0) goto done; /* the warm-up or a thread start failed (reported above) */
    {
        /* Every appended transition is acknowledged, and in the table exactly once. */
        uint64_t appended = 0, acked = 0;
        for (int i = 0; i < streams; i++) {
            appended += workers[i].appended;
            acked += workers[i].acked;
        }
        fl_replay_info_t fin;
        fl_replay_service_info(svc, &fin);
        if (acked != appended || fin.inserted != acked) {
            fprintf(stderr,
                    "%s: %s K=%d: writers appended %" PRIu64 " and acknowledged %" PRIu64
                    " transitions, the shard inserted %" PRIu64 " (expected all three equal)\n",
                    prog, s->name, streams, appended, acked, fin.inserted);
            goto done;
        }
    }
    rc = 0;
done:
    fl_replay_service_destroy(svc);
    if (sock[0]) unlink(sock + 5);
    if (wal_dir[0]) { /* the log and lock files of this case */
        char cmd[FL_REPLAY_DIR_MAX + 16];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", wal_dir);
        if (system(cmd) != 0) fprintf(stderr, "%s: could not remove %s\n", prog, wal_dir);
    }
    free(workers);
    return rc;
}

static void print_result(const opts_t *o, const shape_t *s, int streams, int learner, const result_t *r) {
    const char *transport = o->unix_socket ? "unix" : "tcp";
    const char *lname = !learner ? "none" : o->updates ? "sample+update" : "sample";
    if (!o->json) {
        printf("%-9s %-5s %7d  %-13s %14.0f %14.0f %10.1f %12.0f %10" PRIu64 "\n", s->name, transport, streams, lname,
               r->insert_rate, r->sample_rate, r->sample_calls_rate, r->update_rate, r->size);
        fflush(stdout);
        return;
    }
    const char *lcase = !learner ? "nolearner" : o->updates ? "learner" : "learner_noupdates";
    const struct {
        const char *metric, *unit;
        double value;
    } m[] = {
        {"insert", "transitions/s", r->insert_rate},
        {"sample", "transitions/s", r->sample_rate},
        {"sample_calls", "calls/s", r->sample_calls_rate},
        {"updates", "priorities/s", r->update_rate},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        if (!learner && i > 0) break;
        if (i == 3 && !o->updates) break;
        printf(
            "{\"bench\":\"replay_rpc\",\"case\":\"%s/%s/k%d/%s/%s\",\"value\":%.6g,\"unit\":\"%s\",\"cores\":%ld,"
            "\"streams\":%d,\"learner\":%d,\"insert_batch\":%zu,\"batches_per_call\":%d,\"capacity\":%" PRIu64
            ",\"filled\":%d,\"seconds\":%.3f}\n",
            s->name, transport, streams, lcase, m[i].metric, m[i].value, m[i].unit, o->cores, streams, learner,
            o->insert_batch, r->batches_per_call, case_capacity(o, s), o->fill, r->seconds);
    }
    fflush(stdout);
}

static int usage(void) {
    fprintf(stderr,
            "usage: replay_rpc_bench [--json] [--seconds S] [--capacity N] [--insert-batch N]\n"
            "                        [--batches-per-call N] [--streams 1,4,16]\n"
            "                        [--shape cartpole|minatar|atari|all] [--learner both|on|off]\n"
            "                        [--prefetch D] [--no-updates] [--unix] [--fill]\n");
    return 2;
}

/* Parses an integer in [lo, hi]; 0 if s is not one. */
static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *s == '-' || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int parse_streams(const char *s, opts_t *o) {
    o->n_streams = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > MAX_STREAMS || o->n_streams == 16) return 0;
        o->streams[o->n_streams++] = (int)v;
        if (*end == ',')
            end++;
        else if (*end)
            return 0;
        p = end;
    }
    return o->n_streams > 0;
}

int main(int argc, char **argv) {
    opts_t o;
    memset(&o, 0, sizeof o);
    o.updates = 1;
    o.seconds = 3.0;
    o.capacity = 2000000;
    o.insert_batch = 50;
    o.batches_per_call = 0; /* 0: what the actor uses for the shape (fl_actor_batches_per_call) */
    o.streams[0] = 1, o.streams[1] = 4, o.streams[2] = 16, o.n_streams = 3;
    o.shape = -1;
    o.learner_on = o.learner_off = 1;
    o.prefetch = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t u;
        if (strcmp(a, "--json") == 0) {
            o.json = 1;
        } else if (strcmp(a, "--unix") == 0) {
            o.unix_socket = 1;
        } else if (strcmp(a, "--fill") == 0) {
            o.fill = 1;
        } else if (strcmp(a, "--no-updates") == 0) {
            o.updates = 0;
        } else if (!v) {
            return usage();
        } else if (strcmp(a, "--seconds") == 0) {
            char *end;
            o.seconds = strtod(v, &end);
            if (*end || !(o.seconds > 0.0 && o.seconds <= 3600.0)) return usage();
            i++;
        } else if (strcmp(a, "--capacity") == 0) {
            if (!parse_u64(v, 1, UINT64_C(1) << 40, &o.capacity)) return usage();
            o.capacity_set = 1;
            i++;
        } else if (strcmp(a, "--insert-batch") == 0) {
            if (!parse_u64(v, 1, MAX_INSERT_BATCH, &u)) return usage();
            o.insert_batch = (size_t)u;
            i++;
        } else if (strcmp(a, "--batches-per-call") == 0) {
            if (!parse_u64(v, 1, 100000, &u)) return usage();
            o.batches_per_call = (int)u;
            i++;
        } else if (strcmp(a, "--streams") == 0) {
            if (!parse_streams(v, &o)) return usage();
            i++;
        } else if (strcmp(a, "--shape") == 0) {
            o.shape = -2;
            if (strcmp(v, "all") == 0) o.shape = -1;
            for (int k = 0; k < NUM_SHAPES; k++)
                if (strcmp(v, SHAPES[k].name) == 0) o.shape = k;
            if (o.shape == -2) return usage();
            i++;
        } else if (strcmp(a, "--wal") == 0) {
            snprintf(o.wal_parent, sizeof o.wal_parent, "%s", v);
            i++;
        } else if (strcmp(a, "--insert-rate") == 0) {
            char *end;
            o.insert_rate = strtod(v, &end);
            if (*end || !(o.insert_rate >= 0.0 && o.insert_rate <= 1e9)) return usage();
            i++;
        } else if (strcmp(a, "--prefetch") == 0) {
            if (!parse_u64(v, 0, FL_REPLAY_PREFETCH_MAX_DEPTH, &u)) return usage();
            o.prefetch = (int)u;
            i++;
        } else if (strcmp(a, "--learner") == 0) {
            o.learner_on = strcmp(v, "on") == 0 || strcmp(v, "both") == 0;
            o.learner_off = strcmp(v, "off") == 0 || strcmp(v, "both") == 0;
            if (!o.learner_on && !o.learner_off) return usage();
            i++;
        } else {
            return usage();
        }
    }
    o.cores = sysconf(_SC_NPROCESSORS_ONLN);
    fl_log_set_level(FL_LOG_WARN);
    if (!o.json) {
        char bpc[64];
        if (o.batches_per_call > 0)
            snprintf(bpc, sizeof bpc, "%d", o.batches_per_call);
        else
            snprintf(bpc, sizeof bpc, "the actor's (cartpole %d, minatar %d, atari %d)",
                     fl_actor_batches_per_call(4 * sizeof(float), (int64_t)o.insert_batch),
                     fl_actor_batches_per_call(400, (int64_t)o.insert_batch),
                     fl_actor_batches_per_call(84 * 84 * 4, (int64_t)o.insert_batch));
        char cap[64];
        if (o.capacity_set)
            snprintf(cap, sizeof cap, "%" PRIu64, o.capacity);
        else
            snprintf(cap, sizeof cap, "%" PRIu64 " (atari %d)", o.capacity, ATARI_CAPACITY);
        printf(
            "replay_rpc_bench: %ld cores, one shard over %s, capacity %s"
            ", prioritized, insert batch %zu, batches per Insert call %s, learner batch %d beta %.1f%s, "
            "prefetch %d, %.1f s per case%s\n",
            o.cores, o.unix_socket ? "a unix socket" : "loopback TCP", cap, o.insert_batch, bpc, SAMPLE_BATCH,
            SAMPLE_BETA, o.updates ? " + priority updates" : " (no updates)", o.prefetch, o.seconds,
            o.fill ? " after filling the table" : "");
        printf("rates: deltas of the shard's Info counters over the window\n");
        printf("%-9s %-5s %7s  %-13s %14s %14s %10s %12s %10s\n", "shape", "via", "streams", "learner", "insert tr/s",
               "sampled tr/s", "sample/s", "updates/s", "size");
        fflush(stdout);
    }
    uint64_t next_stream_id = 1;
    for (int k = 0; k < NUM_SHAPES; k++) {
        if (o.shape >= 0 && o.shape != k) continue;
        inputs_t in;
        fl_err_t err;
        fl_err_init(&err);
        fl_status st = inputs_make(&in, &SHAPES[k], o.insert_batch, &err);
        if (st != FL_OK) {
            fprintf(stderr, "replay_rpc_bench: inputs: %s (%s)\n", fl_status_str(st), err.msg);
            return 1;
        }
        for (int si = 0; si < o.n_streams; si++) {
            for (int learner = 0; learner < 2; learner++) {
                if ((learner && !o.learner_on) || (!learner && !o.learner_off)) continue;
                result_t r;
                memset(&r, 0, sizeof r);
                if (run_case(&o, &SHAPES[k], &in, o.streams[si], learner, &next_stream_id, &r) != 0) {
                    inputs_free(&in);
                    return 1;
                }
                print_result(&o, &SHAPES[k], o.streams[si], learner, &r);
            }
        }
        inputs_free(&in);
    }
    return 0;
}
