/* prefetch: sampler threads and a ready queue (see prefetch.h).
 *
 * Each slot is one thread's buffer and result, in one of three states: SAMPLING (the
 * thread owns it), READY (in the queue), TAKEN (the learner owns it). One mutex guards
 * the states and the queue; condition variables wake the learner (a result is ready)
 * and each thread (its buffer came back, or stop: one per slot, so that a buffer coming
 * back wakes its own thread alone). */
#include "replay/prefetch.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

enum { SAMPLING, READY, TAKEN };

typedef struct slot {
    struct fl_replay_prefetch *p;
    pthread_cond_t back_cv; /* the buffer came back, or stop */
    pthread_t th;
    int started;
    int state;
    fl_replay_batch_t batch;
    fl_replay_prefetched_t result;
    /* priority updates to send with the next call (the thread's while SAMPLING) */
    uint64_t *upd_keys; /* (batch_size) */
    float *upd_prio;    /* (batch_size) */
    size_t upd_n;
} slot_t;

struct fl_replay_prefetch {
    fl_replay_sharded_t *rs;
    int depth;
    size_t batch_size;
    double beta;
    int64_t timeout_ms;
    pthread_mutex_t mu;
    pthread_cond_t ready_cv;
    int stop, stopped;
    atomic_uint_fast64_t updates_applied;
    int *queue; /* (depth) slot numbers of ready results, oldest first */
    int qhead, qlen;
    slot_t *slots;
};

static void *sampler(void *arg) {
    slot_t *sl = arg;
    fl_replay_prefetch_t *p = sl->p;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && sl->state != SAMPLING) pthread_cond_wait(&sl->back_cv, &p->mu);
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        fl_err_init(&sl->result.err);
        double t0 = fl_clock_sec();
        fl_replay_updates_t upd = {sl->upd_n, sl->upd_keys, sl->upd_prio, 0};
        sl->result.status = fl_replay_sharded_sample_updating(p->rs, p->batch_size, p->beta, p->timeout_ms, &upd,
                                                              &sl->batch, &sl->result.err);
        sl->result.sample_s = fl_clock_sec() - t0;
        sl->result.updates_applied = upd.applied;
        atomic_fetch_add(&p->updates_applied, upd.applied);
        /* Sent, unless the call failed before the shard could apply them (a refusal to
         * sample applies them first; a bad priority can never be applied). */
        fl_status us = sl->result.status;
        if (us == FL_OK || us == FL_FAILED_PRECONDITION || us == FL_INVALID_ARGUMENT) sl->upd_n = 0;
        pthread_mutex_lock(&p->mu);
        sl->state = READY;
        p->queue[(p->qhead + p->qlen) % p->depth] = (int)(sl - p->slots);
        p->qlen++;
        pthread_cond_signal(&p->ready_cv);
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

fl_status fl_replay_prefetch_create(fl_replay_sharded_t *rs, int depth, size_t batch_size, size_t obs_bytes,
                                    double beta, int64_t timeout_ms, fl_replay_prefetch_t **out, fl_err_t *err) {
    *out = NULL;
    if (depth < 1 || depth > FL_REPLAY_PREFETCH_MAX_DEPTH)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "prefetch depth %d: expected 1 .. %d", depth,
                          FL_REPLAY_PREFETCH_MAX_DEPTH);
    if (batch_size == 0 || obs_bytes == 0 || !(beta >= 0.0 && beta <= 1.0) || timeout_ms <= 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "prefetch: batch_size %zu, obs_bytes %zu, beta %g, timeout %lld ms: expected >= 1, >= 1, "
                          "[0, 1], > 0",
                          batch_size, obs_bytes, beta, (long long)timeout_ms);
    fl_replay_prefetch_t *p = calloc(1, sizeof(*p));
    if (!p) return fl_err_set(err, FL_NO_MEMORY, "prefetch: out of memory");
    p->rs = rs;
    p->depth = depth;
    p->batch_size = batch_size;
    p->beta = beta;
    p->timeout_ms = timeout_ms;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->ready_cv, NULL);
    atomic_init(&p->updates_applied, 0);
    p->queue = calloc((size_t)depth, sizeof(int));
    p->slots = calloc((size_t)depth, sizeof(slot_t));
    for (int i = 0; p->slots && i < depth; i++) pthread_cond_init(&p->slots[i].back_cv, NULL);
    fl_status s = FL_OK;
    if (!p->queue || !p->slots) {
        s = fl_err_set(err, FL_NO_MEMORY, "prefetch: out of memory");
        goto fail;
    }
    for (int i = 0; i < depth; i++) {
        slot_t *sl = &p->slots[i];
        sl->p = p;
        sl->state = SAMPLING;
        sl->result.batch = &sl->batch;
        sl->upd_keys = malloc(batch_size * sizeof(uint64_t));
        sl->upd_prio = malloc(batch_size * sizeof(float));
        if ((s = fl_replay_batch_init(&sl->batch, batch_size, obs_bytes)) != FL_OK || !sl->upd_keys ||
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
        if (sl->upd_n == 0) continue;
        uint64_t applied = 0;
        fl_status s = fl_replay_sharded_update_priorities(p->rs, sl->upd_n, sl->upd_keys, sl->upd_prio, &applied, err);
        atomic_fetch_add(&p->updates_applied, applied);
        sl->upd_n = 0;
        if (st == FL_OK) st = s;
    }
    return st;
}

uint64_t fl_replay_prefetch_updates_applied(fl_replay_prefetch_t *p) { return atomic_load(&p->updates_applied); }

void fl_replay_prefetch_destroy(fl_replay_prefetch_t *p) {
    if (!p) return;
    fl_err_t e;
    fl_err_init(&e);
    (void)fl_replay_prefetch_stop(p, &e);
    if (p->slots)
        for (int i = 0; i < p->depth; i++) {
            fl_replay_batch_free(&p->slots[i].batch);
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
    slot_t *sl = &p->slots[p->queue[p->qhead]];
    p->qhead = (p->qhead + 1) % p->depth;
    p->qlen--;
    sl->state = TAKEN;
    pthread_mutex_unlock(&p->mu);
    *out = &sl->result;
    return 1;
}

void fl_replay_prefetch_release(fl_replay_prefetch_t *p, fl_replay_prefetched_t *r) {
    fl_replay_prefetch_release_updating(p, r, 0, NULL);
}

void fl_replay_prefetch_release_updating(fl_replay_prefetch_t *p, fl_replay_prefetched_t *r, size_t n,
                                         const float *priorities) {
    slot_t *sl = (slot_t *)((char *)r - offsetof(slot_t, result));
    if (n > sl->batch.count) n = sl->batch.count;
    if (n > 0 && priorities) {
        /* Pending updates of a failed send are replaced: newer priorities of other keys
         * matter more than a retry of stale ones, and the buffer holds one batch. */
        memcpy(sl->upd_keys, sl->batch.keys, n * sizeof(uint64_t));
        memcpy(sl->upd_prio, priorities, n * sizeof(float));
        sl->upd_n = n;
    }
    pthread_mutex_lock(&p->mu);
    sl->state = SAMPLING;
    pthread_cond_signal(&sl->back_cv);
    pthread_mutex_unlock(&p->mu);
}
