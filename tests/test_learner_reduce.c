/* Tests of learner/reduce (the ring all-reduce) and fl_dqn_step_group (several learners
 * in step), over an in-process transport: one thread per group member, a one-message
 * mailbox per ordered pair of members. The MPI transport is exercised under mpirun by
 * tests/integration_mpi.c. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/rng.h"
#include "learner/dqn.h"
#include "learner/reduce.h"
#include "seed_util.h"

#define MAXP 6

/* ---- the thread transport ---- */

typedef struct box {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int full;
    unsigned char *data;
    size_t bytes;
} box_t;

typedef struct group {
    int p;
    box_t box[MAXP][MAXP]; /* [from][to] */
} group_t;

typedef struct member {
    group_t *g;
    int me;
} member_t;

static void box_put(box_t *b, const void *data, size_t bytes) {
    pthread_mutex_lock(&b->mu);
    while (b->full) pthread_cond_wait(&b->cv, &b->mu);
    b->data = malloc(bytes ? bytes : 1);
    memcpy(b->data, data, bytes);
    b->bytes = bytes;
    b->full = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void box_take(box_t *b, void *data, size_t bytes) {
    pthread_mutex_lock(&b->mu);
    while (!b->full) pthread_cond_wait(&b->cv, &b->mu);
    assert_int_equal(b->bytes, bytes); /* the ring's chunk arithmetic agrees on both ends */
    memcpy(data, b->data, bytes);
    free(b->data);
    b->full = 0;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static fl_status t_sendrecv(void *ctx, const float *send, size_t ns, int dest, float *recv, size_t nr, int src,
                            fl_err_t *err) {
    (void)err;
    member_t *m = ctx;
    box_put(&m->g->box[m->me][dest], send, ns * sizeof(float));
    box_take(&m->g->box[src][m->me], recv, nr * sizeof(float));
    return FL_OK;
}

static fl_status t_broadcast(void *ctx, void *buf, size_t bytes, int root, fl_err_t *err) {
    (void)err;
    member_t *m = ctx;
    if (m->me == root) {
        for (int r = 0; r < m->g->p; r++)
            if (r != root) box_put(&m->g->box[root][r], buf, bytes);
    } else {
        box_take(&m->g->box[root][m->me], buf, bytes);
    }
    return FL_OK;
}

static const fl_reduce_ops_t thread_ops = {t_sendrecv, t_broadcast, free};

static group_t *group_new(int p) {
    group_t *g = calloc(1, sizeof *g);
    g->p = p;
    for (int i = 0; i < MAXP; i++)
        for (int j = 0; j < MAXP; j++) {
            pthread_mutex_init(&g->box[i][j].mu, NULL);
            pthread_cond_init(&g->box[i][j].cv, NULL);
        }
    return g;
}

static fl_reduce_t *member_new(group_t *g, int me) {
    member_t *m = malloc(sizeof *m);
    m->g = g;
    m->me = me;
    fl_reduce_t *r = NULL;
    assert_int_equal(fl_reduce_create(me, g->p, &thread_ops, m, &r, NULL), FL_OK);
    return r;
}

/* Runs fn(arg_i) on p threads and joins them. */
static void run_threads(int p, void *(*fn)(void *), void *args, size_t arg_size) {
    pthread_t t[MAXP];
    for (int i = 0; i < p; i++) pthread_create(&t[i], NULL, fn, (char *)args + (size_t)i * arg_size);
    for (int i = 0; i < p; i++) pthread_join(t[i], NULL);
}

/* ---- the ring ---- */

typedef struct sum_job {
    fl_reduce_t *r;
    float *buf;
    size_t n;
    fl_status s;
} sum_job_t;

static void *sum_thread(void *arg) {
    sum_job_t *j = arg;
    j->s = fl_reduce_sum(j->r, j->buf, j->n, NULL);
    return NULL;
}

static void test_ring_sum(void **state) {
    (void)state;
    fl_rng_t rng;
    fl_rng_init(&rng, g_seed);
    const size_t sizes[] = {1, 2, 3, 5, 7, 64, 1000, 4099};
    for (int p = 1; p <= 5; p++) {
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            size_t n = sizes[si];
            group_t *g = group_new(p);
            sum_job_t jobs[MAXP];
            double *want = calloc(n, sizeof *want);
            for (int r = 0; r < p; r++) {
                jobs[r].r = member_new(g, r);
                jobs[r].n = n;
                jobs[r].buf = malloc(n * sizeof(float));
                for (size_t i = 0; i < n; i++) {
                    jobs[r].buf[i] = (float)fl_rng_uniform(&rng, -2.0, 2.0);
                    want[i] += jobs[r].buf[i];
                }
            }
            run_threads(p, sum_thread, jobs, sizeof jobs[0]);
            for (int r = 0; r < p; r++) {
                assert_int_equal(jobs[r].s, FL_OK);
                for (size_t i = 0; i < n; i++) {
                    CHECK_CLOSE(jobs[r].buf[i], want[i], 1e-5, 1e-5, "p %d n %zu member %d element %zu", p, n, r, i);
                }
                /* every member holds the same bits: finished chunks are copied */
                assert_memory_equal(jobs[r].buf, jobs[0].buf, n * sizeof(float));
                /* each member sends 2 (p - 1) chunks: 2 (p - 1) / p of the vector, rounded */
                size_t sent = fl_reduce_bytes_sent(jobs[r].r) / sizeof(float);
                if (p > 1) {
                    assert_true(sent >= 2 * (p - 1) * (n / (size_t)p));
                    assert_true(sent <= 2 * (p - 1) * (n / (size_t)p + 1));
                } else {
                    assert_int_equal(sent, 0);
                }
            }
            for (int r = 0; r < p; r++) {
                fl_reduce_destroy(jobs[r].r);
                free(jobs[r].buf);
            }
            free(want);
            free(g);
        }
    }
}

typedef struct bcast_job {
    fl_reduce_t *r;
    int root;
    uint64_t value[3];
    fl_status s;
} bcast_job_t;

static void *bcast_thread(void *arg) {
    bcast_job_t *j = arg;
    j->s = fl_reduce_broadcast(j->r, j->value, sizeof j->value, j->root, NULL);
    return NULL;
}

static void test_broadcast_and_errors(void **state) {
    (void)state;
    const int p = 3;
    group_t *g = group_new(p);
    bcast_job_t jobs[MAXP];
    for (int r = 0; r < p; r++) {
        jobs[r].r = member_new(g, r);
        jobs[r].root = 1;
        for (int k = 0; k < 3; k++) jobs[r].value[k] = (uint64_t)(100 * r + k);
    }
    run_threads(p, bcast_thread, jobs, sizeof jobs[0]);
    for (int r = 0; r < p; r++) {
        assert_int_equal(jobs[r].s, FL_OK);
        for (int k = 0; k < 3; k++) assert_int_equal(jobs[r].value[k], 100 + k);
    }
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_reduce_broadcast(jobs[0].r, jobs[0].value, 8, 3, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "group of 3"));
    for (int r = 0; r < p; r++) fl_reduce_destroy(jobs[r].r);
    free(g);
    fl_reduce_t *bad = NULL;
    member_t *m = malloc(sizeof *m);
    assert_int_equal(fl_reduce_create(2, 2, &thread_ops, m, &bad, &e), FL_INVALID_ARGUMENT); /* frees m */
    assert_null(bad);
    assert_non_null(strstr(e.msg, "rank 2 of a group of 2"));
#ifndef FLEET_HAVE_MPI
    assert_int_equal(fl_reduce_create_mpi(NULL, &bad, &e), FL_UNIMPLEMENTED);
#endif
}

/* ---- several learners against one ---- */

#define OBS 4
#define ACTS 3
#define BATCH 12
#define SPEC "dense(16) relu dense(8) relu dueling"

typedef struct batch_data {
    float obs[BATCH * OBS], next[BATCH * OBS], rewards[BATCH], discounts[BATCH], weights[BATCH];
    int32_t actions[BATCH];
} batch_data_t;

static void fill_batch(batch_data_t *d, fl_rng_t *rng) {
    for (int i = 0; i < BATCH * OBS; i++) {
        d->obs[i] = (float)fl_rng_uniform(rng, -1.0, 1.0);
        d->next[i] = (float)fl_rng_uniform(rng, -1.0, 1.0);
    }
    for (int i = 0; i < BATCH; i++) {
        d->rewards[i] = (float)fl_rng_uniform(rng, -0.5, 1.5);
        d->discounts[i] = i % 5 == 4 ? 0.0f : 0.97f;
        d->weights[i] = (float)fl_rng_uniform(rng, 0.2, 1.2);
        d->actions[i] = (int32_t)fl_rng_below(rng, ACTS);
    }
}

static fl_dqn_batch_t slice(const batch_data_t *d, int from, int count) {
    fl_dqn_batch_t b = {.size = count,
                        .obs = d->obs + (size_t)from * OBS,
                        .actions = d->actions + from,
                        .rewards = d->rewards + from,
                        .discounts = d->discounts + from,
                        .next_obs = d->next + (size_t)from * OBS,
                        .weights = d->weights + from};
    return b;
}

typedef struct learner_job {
    fl_reduce_t *r;
    fl_dqn_t *dqn;
    fl_qnet_t *online, *target;
    fl_optim_t *opt;
    float *rbuf;
    const batch_data_t *batches; /* one per step */
    int steps, from, count;
    int stop_at_step; /* this member wants to stop at this step (-1 = never) */
    float prio[BATCH];
    fl_dqn_stats_t stats[8];
    fl_status s[8];
    int stopped[8];
} learner_job_t;

static void *learner_thread(void *arg) {
    learner_job_t *j = arg;
    for (int t = 0; t < j->steps; t++) {
        fl_dqn_batch_t b = slice(&j->batches[t], j->from, j->count);
        j->s[t] = fl_dqn_step_group(j->dqn, j->online, j->target, j->opt, j->r, j->rbuf, &b, t == j->stop_at_step,
                                    j->prio, &j->stats[t], &j->stopped[t], NULL);
    }
    return NULL;
}

/* Adam with eps 1e-3: with the default (1e-8) a parameter whose gradient is ~0 moves by
 * about lr * sign(g) a step, so a gradient summed in another order (a few ulps apart, of
 * either sign) could move it by a whole lr the other way; with 1e-3 tiny gradients make
 * tiny steps and the group and the one learner stay within float tolerance. */
static fl_optim_t *make_adam(size_t n) {
    fl_optim_config_t oc = fl_optim_config_default(FL_OPTIM_ADAM);
    oc.lr = 0.01f;
    oc.eps = 1e-3f;
    fl_optim_t *o = NULL;
    assert_int_equal(fl_optim_create(&oc, n, &o, NULL), FL_OK);
    return o;
}

/* L members with B/L each against one learner with B: same loss, priorities and
 * parameters after several steps (the sums run in another order: float tolerance). */
static void check_group(int L, int steps, int stop_member, int stop_step, int poison_step) {
    fl_rng_t rng;
    fl_rng_init(&rng, g_seed + (uint64_t)L);
    batch_data_t batches[8];
    for (int t = 0; t < steps; t++) fill_batch(&batches[t], &rng);
    if (poison_step >= 0) batches[poison_step].rewards[BATCH - 1] = NAN;
    fl_dqn_config_t dc = {BATCH, ACTS, 1.0f, 0.5f}; /* clipping on: the mean gradient is clipped */

    fl_qnet_t *ref = NULL, *ref_t = NULL;
    assert_int_equal(fl_qnet_create(SPEC, OBS, ACTS, BATCH, &ref, NULL), FL_OK);
    assert_int_equal(fl_qnet_create(SPEC, OBS, ACTS, BATCH, &ref_t, NULL), FL_OK);
    fl_qnet_init(ref, &rng);
    fl_qnet_init(ref_t, &rng); /* a target different from the online network */
    const size_t n = fl_qnet_num_params(ref);
    float *start = malloc(n * sizeof(float));
    memcpy(start, fl_qnet_params(ref), n * sizeof(float));
    fl_optim_t *ref_opt = make_adam(n);
    fl_dqn_t *ref_dqn = NULL;
    assert_int_equal(fl_dqn_create(&dc, &ref_dqn, NULL), FL_OK);
    float ref_prio[8][BATCH], ref_loss[8];
    int ref_steps = 0;
    for (int t = 0; t < steps; t++) {
        if (t == stop_step) break; /* the group stops here without stepping */
        fl_dqn_batch_t b = slice(&batches[t], 0, BATCH);
        fl_dqn_stats_t st;
        fl_status s = fl_dqn_step(ref_dqn, ref, ref_t, ref_opt, &b, ref_prio[t], &st, NULL);
        assert_int_equal(s, t == poison_step ? FL_OUT_OF_RANGE : FL_OK);
        ref_loss[t] = st.loss;
        ref_steps++;
    }

    group_t *g = group_new(L);
    learner_job_t jobs[MAXP];
    memset(jobs, 0, sizeof jobs);
    for (int r = 0; r < L; r++) {
        learner_job_t *j = &jobs[r];
        j->r = member_new(g, r);
        assert_int_equal(fl_dqn_create(&dc, &j->dqn, NULL), FL_OK);
        assert_int_equal(fl_qnet_create(SPEC, OBS, ACTS, BATCH, &j->online, NULL), FL_OK);
        assert_int_equal(fl_qnet_create(SPEC, OBS, ACTS, BATCH, &j->target, NULL), FL_OK);
        fl_qnet_set_params(j->online, start, n, NULL);
        fl_qnet_copy_params(j->target, ref_t);
        j->opt = make_adam(n);
        j->rbuf = malloc((n + 2) * sizeof(float));
        j->batches = batches;
        j->steps = stop_step >= 0 ? stop_step + 1 : steps;
        j->from = r * (BATCH / L);
        j->count = BATCH / L;
        j->stop_at_step = r == stop_member ? stop_step : -1;
    }
    run_threads(L, learner_thread, jobs, sizeof jobs[0]);
    for (int r = 0; r < L; r++) {
        learner_job_t *j = &jobs[r];
        for (int t = 0; t < j->steps; t++) {
            if (t == stop_step) {
                assert_int_equal(j->s[t], FL_OK);
                assert_int_equal(j->stopped[t], 1);
                continue;
            }
            assert_int_equal(j->stopped[t], 0);
            if (t == poison_step) {
                assert_int_equal(j->s[t], FL_OUT_OF_RANGE); /* every member skips */
                continue;
            }
            assert_int_equal(j->s[t], FL_OK);
            CHECK_CLOSE(j->stats[t].loss, ref_loss[t], 1e-5, 1e-5, "L %d member %d step %d loss", L, r, t);
        }
        /* the last step's priorities are this member's rows of the reference's */
        int last = ref_steps - 1;
        if (last >= 0 && last != poison_step && stop_step < 0)
            for (int i = 0; i < j->count; i++)
                CHECK_CLOSE(j->prio[i], ref_prio[last][j->from + i], 1e-5, 1e-5, "L %d member %d priority %d", L, r, i);
        const float *p = fl_qnet_params(j->online), *q = fl_qnet_params(ref);
        for (size_t i = 0; i < n; i++) {
            CHECK_CLOSE(p[i], q[i], 2e-5, 2e-5, "L %d member %d parameter %zu", L, r, i);
            assert_memory_equal(&p[i], &fl_qnet_params(jobs[0].online)[i], sizeof(float)); /* in step */
        }
        assert_int_equal(fl_optim_steps(j->opt), fl_optim_steps(ref_opt));
    }
    for (int r = 0; r < L; r++) {
        learner_job_t *j = &jobs[r];
        fl_reduce_destroy(j->r);
        fl_dqn_destroy(j->dqn);
        fl_qnet_destroy(j->online);
        fl_qnet_destroy(j->target);
        fl_optim_destroy(j->opt);
        free(j->rbuf);
    }
    free(g);
    fl_dqn_destroy(ref_dqn);
    fl_optim_destroy(ref_opt);
    fl_qnet_destroy(ref);
    fl_qnet_destroy(ref_t);
    free(start);
}

static void test_group_equals_one_learner(void **state) {
    (void)state;
    check_group(2, 4, -1, -1, -1);
    check_group(3, 4, -1, -1, -1);
    check_group(4, 3, -1, -1, -1);
}

static void test_group_stop_is_collective(void **state) {
    (void)state;
    check_group(3, 4, 1, 2, -1); /* member 1 stops at step 2: nobody steps there */
}

static void test_group_skips_non_finite_together(void **state) {
    (void)state;
    check_group(2, 4, -1, -1, 1); /* a NaN reward in member 1's half at step 1 */
}

int main(void) {
    pick_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_sum),
        cmocka_unit_test(test_broadcast_and_errors),
        cmocka_unit_test(test_group_equals_one_learner),
        cmocka_unit_test(test_group_stop_is_collective),
        cmocka_unit_test(test_group_skips_non_finite_together),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
