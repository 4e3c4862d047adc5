/* prefetch: sampler threads and a ready queue (see prefetch.h).
 *
 * Each slot is one thread's buffer (per_call batches long) and its results, one per
 * batch, each a view of its part of the buffer. A slot is SAMPLING (the thread owns it)
 * until its call is answered, then its results are queued; it is SAMPLING again once the
 * learner has given every one of them back (out counts those still queued or taken). One
 * mutex guards the states and the queue; condition variables wake the learner (a result
 * is ready) and each thread (its buffer came back, or stop: one per slot, so that a buffer
 * coming back wakes its own thread alone). */
#include "replay/prefetch.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

enum { SAMPLING, OUT };

struct slot;

/* One batch of a slot's call: what the learner is handed, and the priorities it gave
 * back for it. */
typedef struct part {
    fl_replay_prefetched_t result; /* first: the learner's pointer is the part's */
    fl_replay_batch_t view;        /* rows j * batch_size .. of the slot's buffer */
    struct slot *sl;
    size_t upd_n; /* priorities released for the view's first upd_n rows */
} part_t;

typedef struct slot {
    struct fl_replay_prefetch *p;
    pthread_cond_t back_cv; /* the buffer came back, or stop */
    pthread_t th;
    int started;
    int state;
    int nparts, out;         /* results of the last call; those not given back yet */
    fl_replay_batch_t batch; /* per_call x batch_size rows */
    part_t *parts;           /* (per_call) */
    /* priority updates to send with the next call (the thread's while SAMPLING) */
    uint64_t *upd_keys; /* (per_call x batch_size) */
    float *upd_prio;    /* (per_call x batch_size) */
    size_t upd_n;
} slot_t;

struct fl_replay_prefetch {
    fl_replay_sharded_t *rs;
    int depth, per_call;
    size_t batch_size;
    double beta;
    int64_t timeout_ms;
    pthread_mutex_t mu;
    pthread_cond_t ready_cv;
    int stop, stopped;
    atomic_uint_fast64_t updates_applied;
    part_t **queue; /* (depth x per_call) ready results, oldest first */
    int qhead, qlen;
    slot_t *slots;
};

/* The slot's buffer cut into results of batch_size rows (one result, of its whole
 * count, when the call failed or came back with no rows). */
static void cut(slot_t *sl, fl_status st, const fl_err_t *err, double sample_s, uint64_t applied) {
    const fl_replay_batch_t *b = &sl->batch;
    const size_t B = sl->p->batch_size, ob = b->obs_bytes;
    sl->nparts = st == FL_OK && b->count > 0 ? (int)((b->count + B - 1) / B) : 1;
    for (int j = 0; j < sl->nparts; j++) {
        part_t *pt = &sl->parts[j];
        fl_replay_batch_t *v = &pt->view;
        const size_t at = (size_t)j * B;
        *v = *b;
        v->block = NULL; /* the slot's buffer owns the memory */
        v->block_bytes = 0;
        v->capacity = B;
        v->count = sl->nparts == 1 ? b->count : b->count - at < B ? b->count - at : B;
        v->obs = b->obs + at * ob, v->next_obs = b->next_obs + at * ob;
        v->actions = b->actions + at, v->rewards = b->rewards + at, v->discounts = b->discounts + at;
        v->keys = b->keys + at, v->weights = b->weights + at, v->probs = b->probs + at;
        pt->result.batch = v;
        pt->result.status = st;
        pt->result.err = *err;
        pt->result.sample_s = j == 0 ? sample_s : 0.0;
        pt->result.updates_applied = j == 0 ? applied : 0;
        pt->upd_n = 0;
    }
}

/* The priorities given back with the slot's parts, packed to the front of its update
 * buffer, to go with its next call. Pending updates of a failed send are replaced by any
 * new ones: newer priorities of other keys matter more than a retry of stale ones, and
 * the buffer holds one call's batches. */
static void pack_updates(slot_t *sl) {
    size_t m = 0;
    for (int j = 0; j < sl->nparts; j++) {
        const size_t at = (size_t)j * sl->p->batch_size, k = sl->parts[j].upd_n;
        if (k > 0 && at != m) {
            memmove(sl->upd_keys + m, sl->upd_keys + at, k * sizeof(uint64_t));
            memmove(sl->upd_prio + m, sl->upd_prio + at, k * sizeof(float));
        }
        m += k;
        sl->parts[j].upd_n = 0;
    }
    if (m > 0) sl->upd_n = m;
}

static void *sampler(void *arg) {
    slot_t *sl = arg;
    fl_replay_prefetch_t *p = sl->p;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && sl->state != SAMPLING) pthread_cond_wait(&sl->back_cv, &p->mu);
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        fl_err_t err;
        fl_err_init(&err);
        double t0 = fl_clock_sec();
        fl_replay_updates_t upd = {sl->upd_n, sl->upd_keys, sl->upd_prio, 0};
        const fl_status st = fl_replay_sharded_sample_updating(p->rs, (size_t)p->per_call * p->batch_size, p->beta,
                                                               p->timeout_ms, &upd, &sl->batch, &err);
        atomic_fetch_add(&p->updates_applied, upd.applied);
        /* Sent, unless the call failed before the shard could apply them (a refusal to
         * sample applies them first; a bad priority can never be applied). */
        if (st == FL_OK || st == FL_FAILED_PRECONDITION || st == FL_INVALID_ARGUMENT) sl->upd_n = 0;
        cut(sl, st, &err, fl_clock_sec() - t0, upd.applied);
        pthread_mutex_lock(&p->mu);
        sl->state = OUT;
        sl->out = sl->nparts;
        for (int j = 0; j < sl->nparts; j++)
            p->queue[(p->qhead + p->qlen++) % (p->depth * p->per_call)] = &sl->parts[j];
        pthread_cond_signal(&p->ready_cv);
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

fl_status fl_replay_prefetch_create(fl_replay_sharded_t *rs, int depth, int per_call, size_t batch_size,
                                    size_t obs_bytes, double beta, int64_t timeout_ms, fl_replay_prefetch_t **out,
                                    fl_err_t *err) {
    *out = NULL;
    if (depth < 1 || depth > FL_REPLAY_PREFETCH_MAX_DEPTH)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "prefetch depth %d: expected 1 .. %d", depth,
                          FL_REPLAY_PREFETCH_MAX_DEPTH);
    if (per_call < 1 || per_call > FL_REPLAY_PREFETCH_MAX_PER_CALL)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "prefetch: %d batches per Sample call: expected 1 .. %d", per_call,
                          FL_REPLAY_PREFETCH_MAX_PER_CALL);
    if (batch_size == 0 || obs_bytes == 0 || !(beta >= 0.0 && beta <= 1.0) || timeout_ms <= 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "prefetch: batch_size %zu, obs_bytes %zu, beta %g, timeout %lld ms: expected >= 1, >= 1, "
                          "[0, 1], > 0",
                          batch_size, obs_bytes, beta, (long long)timeout_ms);
    fl_replay_prefetch_t *p = calloc(1, sizeof(*p));
    if (!p) return fl_err_set(err, FL_NO_MEMORY, "prefetch: out of memory");
    p->rs = rs;
    p->depth = depth;
    p->per_call = per_call;
    p->batch_size = batch_size;
    p->beta = beta;
    p->timeout_ms = timeout_ms;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->ready_cv, NULL);
    atomic_init(&p->updates_applied, 0);
    p->queue = calloc((size_t)depth * (size_t)per_call, sizeof(part_t *));
    p->slots = calloc((size_t)depth, sizeof(slot_t));
    for (int i = 0; p->slots && i < depth; i++) pthread_cond_init(&p->slots[i].back_cv, NULL);
    fl_status s = FL_OK;
    if (!p->queue || !p->slots) {
        s = fl_err_set(err, FL_NO_MEMORY, "prefetch: out of memory");
        goto fail;
    }
    for (int i = 0; i < depth; i++) {
        slot_t *sl = &p->slots[i];
        const size_t rows = (size_t)per_call * batch_size;
        sl->p = p;
        sl->state = SAMPLING;
        sl->parts = calloc((size_t)per_call, sizeof(part_t));
        sl->upd_keys = malloc(rows * sizeof(uint64_t));
        sl->upd_prio = malloc(rows * sizeof(float));
        for (int j = 0; sl->parts && j < per_call; j++) sl->parts[j].sl = sl;
        if ((s = fl_replay_batch_init(&sl->batch, rows, obs_bytes)) != FL_OK || !sl->parts || !sl->upd_keys ||
            !sl->upd_prio) {
            s = s != FL_OK ? s : FL_NO_MEMORY;
            s = fl_err_set(err, s, "prefetch: cannot allocate %d batches of %zu transitions", depth, batch_size);
            goto fail;
        }
    }
    for (int i = 0; i < depth; i++) {
        if (pthread_create(&p->slots[i].th, NULL, sampler, &p->slots[i]) != 0) {
            s = fl_err_set(err, FL_INTERNAL, "prefetch: cannot start sampler thread %d", i);
            goto fail;
        }
        p->slots[i].started = 1;
    }
    *out = p;
    return FL_OK;
fail:
    fl_replay_prefetch_destroy(p);
    return s;
}

fl_status fl_replay_prefetch_stop(fl_replay_prefetch_t *p, fl_err_t *err) {
    pthread_mutex_lock(&p->mu);
    int was = p->stopped;
    p->stop = p->stopped = 1;
    for (int i = 0; p->slots && i < p->depth; i++) pthread_cond_signal(&p->slots[i].back_cv);
    pthread_cond_broadcast(&p->ready_cv);
    pthread_mutex_unlock(&p->mu);
    if (was || !p->slots) return FL_OK;
    for (int i = 0; i < p->depth; i++)
        if (p->slots[i].started) pthread_join(p->slots[i].th, NULL);
    fl_status st = FL_OK;
    for (int i = 0; i < p->depth; i++) { /* updates released but never sent */
        slot_t *sl = &p->slots[i];
        if (sl->state == OUT) pack_updates(sl); /* those of a call not all given back */
        if (sl->upd_n == 0) continue;
        uint64_t applied = 0;
        fl_status s = fl_replay_sharded_update_priorities(p->rs, sl->upd_n, sl->upd_keys, sl->upd_prio, &applied, err);
        atomic_fetch_add(&p->updates_applied, applied);
        sl->upd_n = 0;
        if (st == FL_OK) st = s;
    }
    return st;
}

uint64_t fl_replay_prefetch_updates_applied(fl_replay_prefetch_t *p) {
    return atomic_load(&p->updates_applied);
}

void fl_replay_prefetch_destroy(fl_replay_prefetch_t *p) {
    if (!p) return;
    fl_err_t e;
    fl_err_init(&e);
    (void)fl_replay_prefetch_stop(p, &e);
    if (p->slots)
        for (int i = 0; i < p->depth; i++) {
            fl_replay_batch_free(&p->slots[i].batch);
            free(p->slots[i].parts);
            free(p->slots[i].upd_keys);
            free(p->slots[i].upd_prio);
            pthread_cond_destroy(&p->slots[i].back_cv);
        }
    free(p->slots);
    free(p->queue);
    pthread_cond_destroy(&p->ready_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int fl_replay_prefetch_next(fl_replay_prefetch_t *p, int64_t timeout_ms, fl_replay_prefetched_t **out) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_ms > 0) {
        until.tv_sec += (time_t)(timeout_ms / 1000);
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&p->mu);
    while (p->qlen == 0) {
        if (p->stopped) {
            pthread_mutex_unlock(&p->mu);
            return 0;
        }
        int rc = timeout_ms > 0 ? pthread_cond_timedwait(&p->ready_cv, &p->mu, &until)
                                : pthread_cond_wait(&p->ready_cv, &p->mu);
        if (rc == ETIMEDOUT && p->qlen == 0) {
            pthread_mutex_unlock(&p->mu);
            return 0;
        }
    }
    part_t *pt = p->queue[p->qhead];
    p->qhead = (p->qhead + 1) % (p->depth * p->per_call);
    p->qlen--;
    pthread_mutex_unlock(&p->mu);
    *out = &pt->result;
    return 1;
}

void fl_replay_prefetch_release(fl_replay_prefetch_t *p, fl_replay_prefetched_t *r) {
    fl_replay_prefetch_release_updating(p, r, 0, NULL);
}

void fl_replay_prefetch_release_updating(fl_replay_prefetch_t *p, fl_replay_prefetched_t *r, size_t n,
                                         const float *priorities) {
    part_t *pt = (part_t *)(void *)r; /* the result is the part's first member */
    slot_t *sl = pt->sl;
    if (n > pt->view.count) n = pt->view.count;
    if (n > 0 && priorities) {
        /* kept at the part's own rows until the last part is back */
        const size_t at = (size_t)(pt - sl->parts) * p->batch_size;
        memcpy(sl->upd_keys + at, pt->view.keys, n * sizeof(uint64_t));
        memcpy(sl->upd_prio + at, priorities, n * sizeof(float));
        pt->upd_n = n;
    }
    pthread_mutex_lock(&p->mu);
    const int last = --sl->out == 0;
    pthread_mutex_unlock(&p->mu);
    if (!last) return;
    pack_updates(sl);
    pthread_mutex_lock(&p->mu);
    sl->state = SAMPLING;
    pthread_cond_signal(&sl->back_cv);
    pthread_mutex_unlock(&p->mu);
}
