/* fanout: a batch queue served by the pool and by the batch's own caller (see fanout.h).
 *
 * A batch sits in a singly linked queue while it has unclaimed items; whoever claims
 * the last one unlinks it. The caller claims items of its own batch until none is
 * left, then waits for the items that workers are still running. */
#include "common/fanout.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct batch {
    void (*fn)(void *, int);
    void *arg;
    int n, next, running_or_pending; /* next: first unclaimed item; guarded by the pool's mu */
    struct batch *link;
    pthread_cond_t done;
} batch;

struct fl_fanout {
    pthread_mutex_t mu;
    pthread_cond_t work;
    batch *head, *tail;
    int stopping, workers;
    pthread_t *th;
};

/* Claims one item of b (mu held); unlinks b from the queue when it was the last. */
static int claim(fl_fanout_t *f, batch *b) {
    int i = b->next++;
    if (b->next == b->n) {
        batch **pp = &f->head, *prev = NULL;
        while (*pp && *pp != b) prev = *pp, pp = &(*pp)->link;
        if (*pp) {
            *pp = b->link;
            if (f->tail == b) f->tail = prev;
        }
    }
    return i;
}

static void finish_item(batch *b) {
    if (--b->running_or_pending == 0) pthread_cond_broadcast(&b->done);
}

static void *worker(void *p) {
    fl_fanout_t *f = p;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->head && !f->stopping) pthread_cond_wait(&f->work, &f->mu);
        if (!f->head) break;
        batch *b = f->head;
        int i = claim(f, b);
        pthread_mutex_unlock(&f->mu);
        b->fn(b->arg, i);
        pthread_mutex_lock(&f->mu);
        finish_item(b);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

fl_status fl_fanout_create(int workers, fl_fanout_t **out, fl_err_t *err) {
    *out = NULL;
    fl_fanout_t *f = calloc(1, sizeof *f);
    if (!f || (workers > 0 && !(f->th = calloc((size_t)workers, sizeof *f->th)))) {
        free(f);
        return fl_err_set(err, FL_NO_MEMORY, "fanout: out of memory for %d threads", workers);
    }
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->work, NULL);
    for (int i = 0; i < workers; i++) {
        if (pthread_create(&f->th[i], NULL, worker, f) != 0) {
            fl_fanout_destroy(f);
            return fl_err_set(err, FL_RESOURCE_EXHAUSTED, "fanout: cannot start a thread (%d of %d)", i + 1, workers);
        }
        f->workers++;
    }
    *out = f;
    return FL_OK;
}

void fl_fanout_destroy(fl_fanout_t *f) {
    if (!f) return;
    pthread_mutex_lock(&f->mu);
    f->stopping = 1;
    pthread_cond_broadcast(&f->work);
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < f->workers; i++) pthread_join(f->th[i], NULL);
    pthread_cond_destroy(&f->work);
    pthread_mutex_destroy(&f->mu);
    free(f->th);
    free(f);
}

void fl_fanout_run(fl_fanout_t *f, int n, void (*fn)(void *arg, int i), void *arg) {
    if (n <= 0) return;
    if (!f || f->workers == 0 || n == 1) {
        for (int i = 0; i < n; i++) fn(arg, i);
        return;
    }
    batch b = {.fn = fn, .arg = arg, .n = n, .next = 0, .running_or_pending = n, .link = NULL};
    pthread_cond_init(&b.done, NULL);
    pthread_mutex_lock(&f->mu);
    if (f->tail)
        f->tail->link = &b;
    else
        f->head = &b;
    f->tail = &b;
    pthread_cond_broadcast(&f->work);
    while (b.next < b.n) {
        int i = claim(f, &b);
        pthread_mutex_unlock(&f->mu);
        fn(arg, i);
        pthread_mutex_lock(&f->mu);
        finish_item(&b);
    }
    while (b.running_or_pending > 0) pthread_cond_wait(&b.done, &f->mu);
    pthread_mutex_unlock(&f->mu);
    pthread_cond_destroy(&b.done);
}
