/* Tests of the sharded replay client (replay/client.h, fl_replay_sharded_*) against four
 * real replay services (replay/server) on 127.0.0.1 port 0, compared with one
 * in-process table (replay/table) that holds exactly the same items and priorities:
 * per-item sampling frequencies, P(i), importance weights, priority-update routing,
 * and the failures (empty shards, a shard that is down, addresses out of order).
 *
 * Items are identified by an id stored in their reward (exact in a float), so that an
 * item can be matched across the sharded service and the single table whatever its
 * keys. Everything is seeded; the statistical bounds are set so that a correct
 * sampler passes with a wide margin and a per-shard-uniform split (checked here as a
 * negative control) fails by orders of magnitude. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "replay/client.h"
#include "replay/server.h"
#include "replay/sharded.h"
#include "replay/table.h"
#include "replay/wire.h"
#include "replay/writer.h"
#include "tests/replay_fixture.h"

#define OBS_DIM 2
#define OBS_BYTES (OBS_DIM * sizeof(float))
#define NUM_ACTIONS 3
#define SHARDS 4
#define MAX_ITEMS 512
#define ALPHA 0.6
#define BETA 0.4

static const fl_wire_sig_t SIG = {{FL_DTYPE_FLOAT32, 1, {OBS_DIM}}, NUM_ACTIONS, 0, 0};
static const fl_obs_spec_t SPEC = {FL_DTYPE_FLOAT32, 1, {OBS_DIM}};

/* ---- fixture ------------------------------------------------------------------------ */

typedef struct fixture {
    fl_replay_service_opts_t opts;
    replay_fixture_t shard[SHARDS];
    char list[SHARDS * 300 + 8];
    fl_table_t *single; /* the same items in one table */
    int n_items;
    int shard_of[MAX_ITEMS];        /* id -> shard */
    uint64_t shard_key[MAX_ITEMS];  /* id -> key in its shard */
    uint64_t single_key[MAX_ITEMS]; /* id -> key in the single table */
    double q[MAX_ITEMS];            /* id -> stored priority (p + eps)^alpha */
    double q_total, q_min;
} fixture_t;

static void die(const char *what, const fl_err_t *e) {
    fail_msg("%s: %s", what, e->msg);
}

/* min_size: replay.min_size_to_sample over all shards (each needs min_size / 4). */
static void fixture_start_sel(fixture_t *f, int64_t min_size, fl_selector selector) {
    memset(f, 0, sizeof *f);
    f->opts = replay_fixture_opts(SIG.obs, SIG.num_actions, 4096, min_size); /* 1024 per shard */
    f->opts.selector = selector;
    f->opts.shards = SHARDS;
    f->opts.alpha = ALPHA;
    f->opts.samples_per_insert = 0;
    f->opts.seed = 11;
    fl_err_t e;
    fl_err_init(&e);
    size_t used = 0;
    for (int s = 0; s < SHARDS; s++) {
        f->opts.shard = s;
        replay_fixture_start(&f->shard[s], &f->opts);
        used += (size_t)snprintf(f->list + used, sizeof f->list - used, "%s%s", s ? "," : "", f->shard[s].addr);
    }
    fl_table_config_t tc;
    fl_table_config_init(&tc);
    tc.capacity = 4096;
    tc.obs.dtype = FL_DTYPE_FLOAT32;
    tc.obs.rank = 1;
    tc.obs.shape[0] = OBS_DIM;
    tc.alpha = ALPHA;
    tc.priority_eps = f->opts.priority_eps;
    tc.seed = 99;
    if (fl_table_create(&tc, &f->single, &e) != FL_OK) die("table", &e);
}

static void fixture_start_min(fixture_t *f, int64_t min_size) {
    fixture_start_sel(f, min_size, FL_SELECTOR_PRIORITIZED);
}

static void fixture_start(fixture_t *f) {
    fixture_start_min(f, SHARDS);
}

static void fixture_stop(fixture_t *f) {
    for (int s = 0; s < SHARDS; s++) replay_fixture_stop(&f->shard[s]);
    fl_table_destroy(f->single);
}

/* Inserts n items into shard s (through a writer, as an actor would) and into the single
 * table, with sampling priorities q[k] (the |TD| sent is q^(1/alpha) - eps). */
static void add_items(fixture_t *f, int s, int n, const double *q) {
    assert_true(f->n_items + n <= MAX_ITEMS);
    float obs[MAX_ITEMS * OBS_DIM], next_obs[MAX_ITEMS * OBS_DIM], rew[MAX_ITEMS], disc[MAX_ITEMS], prio[MAX_ITEMS];
    int32_t act[MAX_ITEMS];
    int base = f->n_items;
    for (int k = 0; k < n; k++) {
        int id = base + k;
        obs[k * OBS_DIM] = (float)id;
        obs[k * OBS_DIM + 1] = 0.5f;
        next_obs[k * OBS_DIM] = -(float)id;
        next_obs[k * OBS_DIM + 1] = -0.5f;
        rew[k] = (float)id;
        disc[k] = 0.9f;
        act[k] = id % NUM_ACTIONS;
        double p = pow(q[k], 1.0 / ALPHA) - f->opts.priority_eps;
        prio[k] = (float)(p > 0 ? p : 0);
        f->shard_of[id] = s;
    }
    fl_err_t e;
    fl_err_init(&e);
    /* Shard keys are consecutive from the shard's current insert count. */
    fl_replay_info_t in;
    fl_replay_service_info(f->shard[s].svc, &in);
    uint64_t first_seq = in.inserted;
    fl_replay_client_t *c = NULL;
    fl_replay_writer_t *w = NULL;
    if (fl_replay_client_create(f->shard[s].addr, &c, &e) != FL_OK) die("client", &e);
    if (fl_replay_writer_create(c, 1000 + (uint64_t)s + 10 * (uint64_t)base, &SPEC, 4, &w, &e) != FL_OK)
        die("writer", &e);
    if (fl_replay_writer_append(w, (size_t)n, obs, act, rew, disc, next_obs, prio, &e) != FL_OK) die("append", &e);
    if (fl_replay_writer_flush(w, 20000, &e) != FL_OK) die("flush", &e);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    uint64_t keys[MAX_ITEMS];
    if (fl_table_insert(f->single, (size_t)n, obs, act, rew, disc, next_obs, prio, keys, &e) != FL_OK)
        die("single insert", &e);
    for (int k = 0; k < n; k++) {
        int id = base + k;
        f->shard_key[id] = fl_table_key_make(s, first_seq + (uint64_t)k);
        f->single_key[id] = keys[k];
        double qs = 0, qt = 0;
        if (fl_table_priority(fl_replay_service_table(f->shard[s].svc), f->shard_key[id], &qs, &e) != FL_OK)
            die("shard priority", &e);
        if (fl_table_priority(f->single, keys[k], &qt, &e) != FL_OK) die("single priority", &e);
        assert_true(qs == qt); /* the same float |TD| gives the same stored priority */
        f->q[id] = qt;
    }
    f->n_items += n;
    f->q_total = 0;
    f->q_min = INFINITY;
    for (int id = 0; id < f->n_items; id++) {
        f->q_total += f->q[id];
        if (f->q[id] > 0 && f->q[id] < f->q_min) f->q_min = f->q[id];
    }
}

/* Shard s gets n items whose priorities sum to mass, varied within the shard. */
static void add_shard_mass(fixture_t *f, int s, int n, double mass) {
    double r[MAX_ITEMS], sum = 0;
    for (int k = 0; k < n; k++) sum += r[k] = 1.0 + (double)((k * 5 + s) % 9);
    for (int k = 0; k < n; k++) r[k] *= mass / sum;
    add_items(f, s, n, r);
}

static int id_of(const fl_replay_batch_t *b, size_t r) {
    return (int)b->rewards[r];
}

static double rel(double a, double b) {
    return fabs(a - b) / fmax(fabs(b), 1e-300);
}

/* Pearson's statistic of counts against the expected share q_i / total of n draws. */
static double chi_square(const fixture_t *f, const uint64_t *counts, double n) {
    double chi = 0;
    for (int id = 0; id < f->n_items; id++) {
        double e = n * f->q[id] / f->q_total;
        double d = (double)counts[id] - e;
        chi += d * d / e;
    }
    return chi;
}

static double tv_distance(const fixture_t *f, const uint64_t *a, double na, const uint64_t *b, double nb) {
    double tv = 0;
    for (int id = 0; id < f->n_items; id++) tv += fabs((double)a[id] / na - (double)b[id] / nb);
    return tv / 2;
}

static double tv_expected(const fixture_t *f, const uint64_t *a, double na) {
    double tv = 0;
    for (int id = 0; id < f->n_items; id++) tv += fabs((double)a[id] / na - f->q[id] / f->q_total);
    return tv / 2;
}

/* A bound on chi-square with dof degrees of freedom that a correct sampler never reaches
 * (mean dof, standard deviation sqrt(2 dof): this is 8 deviations above the mean). */
static double chi_bound(int items) {
    double dof = items - 1;
    return dof + 8.0 * sqrt(2.0 * dof);
}

/* ---- sampling equals one table ---------------------------------------------------------- */

static void test_sampling_matches_single_table(void **state) {
    (void)state;
    static fixture_t f;
    fixture_start(&f);
    /* Uneven masses 1:2:3:10 and uneven sizes; the smallest priorities are in shard 0, so
     * the other shards' weights must be renormalised to them. */
    const int sizes[SHARDS] = {30, 40, 50, 60};
    const double masses[SHARDS] = {1, 2, 3, 10};
    for (int s = 0; s < SHARDS; s++) add_shard_mass(&f, s, sizes[s], masses[s]);
    assert_int_equal(f.n_items, 180);

    fl_err_t e;
    fl_err_init(&e);
    fl_replay_sharded_t *rs = NULL;
    if (fl_replay_sharded_create(f.list, 5, &rs, &e) != FL_OK) die("sharded create", &e);
    assert_int_equal(fl_replay_sharded_count(rs), SHARDS);
    for (int s = 0; s < SHARDS; s++) assert_string_equal(fl_replay_sharded_addr(rs, s), f.shard[s].addr);

    enum { BATCHES = 2000, B = 64 };
    fl_replay_batch_t b;
    assert_int_equal(fl_replay_batch_init(&b, B, OBS_BYTES), FL_OK);
    static uint64_t cnt_sharded[MAX_ITEMS], cnt_single[MAX_ITEMS], cnt_even[MAX_ITEMS];
    static float w_single[MAX_ITEMS];
    memset(cnt_sharded, 0, sizeof cnt_sharded);
    memset(cnt_single, 0, sizeof cnt_single);
    memset(cnt_even, 0, sizeof cnt_even);

    /* The single table: frequencies and the weight it gives each item. */
    {
        uint64_t keys[B];
        double probs[B];
        float weights[B], rewards[B];
        for (int it = 0; it < BATCHES; it++) {
            if (fl_table_sample(f.single, B, BETA, keys, probs, weights, NULL, NULL, rewards, NULL, NULL, &e) != FL_OK)
                die("single sample", &e);
            for (int r = 0; r < B; r++) {
                int id = (int)rewards[r];
                cnt_single[id]++;
                w_single[id] = weights[r];
                assert_true(rel(probs[r], f.q[id] / f.q_total) < 1e-9);
            }
        }
    }

    /* The sharded service. */
    double worst_w = 0, worst_p = 0;
    uint64_t per_shard_rows[SHARDS] = {0};
    for (int it = 0; it < BATCHES; it++) {
        if (fl_replay_sharded_sample(rs, B, BETA, 5000, &b, &e) != FL_OK) die("sharded sample", &e);
        assert_int_equal(b.count, B);
        assert_int_equal(b.table_size, (uint64_t)f.n_items);
        assert_true(rel(b.total_priority, f.q_total) < 1e-9);
        assert_true(rel(b.min_priority, f.q_min) < 1e-5);
        for (int r = 0; r < B; r++) {
            int id = id_of(&b, (size_t)r);
            assert_true(id >= 0 && id < f.n_items);
            cnt_sharded[id]++;
            int s = f.shard_of[id];
            per_shard_rows[s]++;
            assert_int_equal(b.keys[r], f.shard_key[id]);
            float o0; /* rows are complete: obs matches the id */
            memcpy(&o0, b.obs + (size_t)r * OBS_BYTES, sizeof o0);
            assert_true(o0 == (float)id);
            /* P(i) against the whole service, as in one table. */
            double rp = rel(b.probs[r], f.q[id] / f.q_total);
            worst_p = fmax(worst_p, rp);
            /* The weight one table holding every item gives: (q_min / q_i)^beta. */
            double want = pow(f.q_min / f.q[id], BETA);
            double rw = rel(b.weights[r], want);
            worst_w = fmax(worst_w, rw);
            if (cnt_single[id]) assert_true(rel(b.weights[r], w_single[id]) < 1e-5);
        }
    }
    print_message("sharded: worst relative error of P(i) %.3g, of weights %.3g\n", worst_p, worst_w);
    assert_true(worst_p < 1e-9);
    assert_true(worst_w < 1e-5);

    const double n = (double)BATCHES * B;
    double chi_sh = chi_square(&f, cnt_sharded, n), chi_si = chi_square(&f, cnt_single, n);
    double tv_sh = tv_expected(&f, cnt_sharded, n), tv_si = tv_expected(&f, cnt_single, n);
    double tv_pair = tv_distance(&f, cnt_sharded, n, cnt_single, n);
    print_message(
        "chi-square (bound %.0f): sharded %.1f, single %.1f; TV to P: sharded %.4f single %.4f, "
        "sharded vs single %.4f\n",
        chi_bound(f.n_items), chi_sh, chi_si, tv_sh, tv_si, tv_pair);
    assert_true(chi_sh < chi_bound(f.n_items));
    assert_true(chi_si < chi_bound(f.n_items));
    assert_true(tv_pair < 0.03);
    /* Each shard's share of the rows follows its mass (systematic split: within one row
     * per batch of B T_s / T). */
    for (int s = 0; s < SHARDS; s++) {
        double want = (double)BATCHES * B * masses[s] / 16.0;
        assert_true(fabs((double)per_shard_rows[s] - want) <= BATCHES);
    }

    /* Negative control: the same statistics reject a batch split evenly across shards
     * (each shard sampling B / 4 from its own tree), i.e. per-shard, not global,
     * distributions. */
    enum { EVEN_BATCHES = 500 };
    fl_replay_batch_t q4;
    assert_int_equal(fl_replay_batch_init(&q4, B / SHARDS, OBS_BYTES), FL_OK);
    for (int it = 0; it < EVEN_BATCHES; it++)
        for (int s = 0; s < SHARDS; s++) {
            if (fl_replay_sample(fl_replay_sharded_client(rs, s), B / SHARDS, BETA, 5000, &q4, &e) != FL_OK)
                die("per-shard sample", &e);
            for (size_t r = 0; r < q4.count; r++) cnt_even[id_of(&q4, r)]++;
        }
    double ne = (double)EVEN_BATCHES * B;
    double chi_even = chi_square(&f, cnt_even, ne), tv_even = tv_expected(&f, cnt_even, ne);
    print_message("even split (negative control): chi-square %.0f, TV to P %.3f\n", chi_even, tv_even);
    assert_true(chi_even > 10 * chi_bound(f.n_items));
    assert_true(tv_even > 0.2);

    fl_replay_batch_free(&q4);
    fl_replay_batch_free(&b);
    fl_replay_sharded_destroy(rs);
    fixture_stop(&f);
}

/* A shard too light to get a row in most batches is still sampled at its rate, its mass
 * is refreshed by Info, and weights are exact once every shard was seen. */
static void test_light_shard(void **state) {
    (void)state;
    static fixture_t f;
    fixture_start(&f);
    add_shard_mass(&f, 0, 3, 1.0); /* the globally smallest priorities, 1/3001 of the mass */
    for (int s = 1; s < SHARDS; s++) add_shard_mass(&f, s, 50, 1000.0);
    fl_err_t e;
    fl_err_init(&e);
    fl_replay_sharded_t *rs = NULL;
    if (fl_replay_sharded_create(f.list, 6, &rs, &e) != FL_OK) die("sharded create", &e);
    enum { BATCHES = 4000, B = 8 };
    fl_replay_batch_t b;
    assert_int_equal(fl_replay_batch_init(&b, B, OBS_BYTES), FL_OK);
    uint64_t light = 0;
    int seen_light = 0, before_light = 0;
    for (int it = 0; it < BATCHES; it++) {
        if (fl_replay_sharded_sample(rs, B, BETA, 5000, &b, &e) != FL_OK) die("sharded sample", &e);
        int light_now = 0;
        for (size_t r = 0; r < b.count; r++) light_now += f.shard_of[id_of(&b, r)] == 0;
        light += (uint64_t)light_now;
        seen_light |= light_now > 0;
        before_light += !seen_light;
        for (size_t r = 0; r < b.count; r++) {
            int id = id_of(&b, r);
            assert_true(rel(b.probs[r], f.q[id] / f.q_total) < 1e-9);
            assert_true(b.weights[r] > 0.0f && b.weights[r] <= 1.0f);
            /* Exact from the first batch on: shard 0 (holding the global minimum) reports
             * it in its Info answers even while it gets no rows. */
            assert_true(rel(b.weights[r], pow(f.q_min / f.q[id], BETA)) < 1e-5);
        }
    }
    double want = (double)BATCHES * B / 3001.0; /* ~10.7 */
    print_message("light shard: %llu rows, expected %.1f; %d batches before its first row\n", (unsigned long long)light,
                  want, before_light);
    assert_true(seen_light);
    assert_true(light >= 2 && light <= 30);
    fl_replay_batch_free(&b);
    fl_replay_sharded_destroy(rs);
    fixture_stop(&f);
}

/* A shard that refuses (here: below its share of min_size_to_sample) is left out: the
 * batch is drawn from the others, with P(i) and weights of that draw, and once the
 * shard can serve it is back in the global draw. */
static void test_refusing_shard_left_out(void **state) {
    (void)state;
    static fixture_t f;
    fixture_start_min(&f, 40); /* 10 per shard */
    for (int s = 0; s < SHARDS; s++) add_shard_mass(&f, s, s == 2 ? 5 : 20, s == 2 ? 4.0 : 1.0 + s);
    fl_err_t e;
    fl_err_init(&e);
    fl_replay_sharded_t *rs = NULL;
    if (fl_replay_sharded_create(f.list, 8, &rs, &e) != FL_OK) die("sharded create", &e);
    fl_replay_batch_t b;
    assert_int_equal(fl_replay_batch_init(&b, 32, OBS_BYTES), FL_OK);
    double t_others = 0, q_min_others = INFINITY;
    for (int id = 0; id < f.n_items; id++)
        if (f.shard_of[id] != 2) {
            t_others += f.q[id];
            q_min_others = fmin(q_min_others, f.q[id]);
        }
    for (int it = 0; it < 50; it++) {
        if (fl_replay_sharded_sample(rs, 32, BETA, 2000, &b, &e) != FL_OK) die("sample", &e);
        assert_int_equal(b.count, 32);
        assert_true(rel(b.total_priority, t_others) < 1e-9);
        for (size_t r = 0; r < b.count; r++) {
            int id = id_of(&b, r);
            assert_true(f.shard_of[id] != 2);
            assert_int_equal(b.keys[r], f.shard_key[id]);
            assert_true(rel(b.probs[r], f.q[id] / t_others) < 1e-9);
            assert_true(rel(b.weights[r], pow(q_min_others / f.q[id], BETA)) < 1e-5);
        }
    }
    /* Shard 2 reaches its threshold: it serves again and the draw is global. */
    add_shard_mass(&f, 2, 10, 2.0);
    int seen2 = 0;
    for (int it = 0; it < 50; it++) {
        if (fl_replay_sharded_sample(rs, 32, BETA, 2000, &b, &e) != FL_OK) die("sample", &e);
        if (it == 0) continue; /* the first call may still split by the old masses */
        assert_true(rel(b.total_priority, f.q_total) < 1e-9);
        for (size_t r = 0; r < b.count; r++) {
            int id = id_of(&b, r);
            seen2 |= f.shard_of[id] == 2;
            assert_true(rel(b.probs[r], f.q[id] / f.q_total) < 1e-9);
            assert_true(rel(b.weights[r], pow(f.q_min / f.q[id], BETA)) < 1e-5);
        }
    }
    assert_true(seen2);
    fl_replay_sharded_destroy(rs);
    fl_replay_batch_free(&b);
    fixture_stop(&f);

    /* Every shard below its threshold: the call fails with the shards' answer. */
    fixture_start_min(&f, 400);
    for (int s = 0; s < SHARDS; s++) add_shard_mass(&f, s, 5, 1.0);
    if (fl_replay_sharded_create(f.list, 9, &rs, &e) != FL_OK) die("sharded create", &e);
    assert_int_equal(fl_replay_batch_init(&b, 8, OBS_BYTES), FL_OK);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(fl_replay_sharded_sample(rs, 8, BETA, 400, &b, &e), FL_FAILED_PRECONDITION);
        assert_non_null(strstr(e.msg, "transitions needed to sample"));
        assert_non_null(strstr(e.msg, "replay shard"));
    }
    fl_replay_sharded_destroy(rs);
    fl_replay_batch_free(&b);
    fixture_stop(&f);
}

/* With the uniform selector the shards' sampling mass is their size: every item of the
 * service is drawn with probability 1/N, whatever its priority, and weights are 1. */
static void test_uniform_selector(void **state) {
    (void)state;
    static fixture_t f;
    fixture_start_sel(&f, SHARDS, FL_SELECTOR_UNIFORM);
    const int sizes[SHARDS] = {10, 20, 30, 40};
    const double masses[SHARDS] = {10, 1, 1, 1}; /* priorities that must not matter */
    for (int s = 0; s < SHARDS; s++) add_shard_mass(&f, s, sizes[s], masses[s]);
    fl_err_t e;
    fl_err_init(&e);
    fl_replay_sharded_t *rs = NULL;
    if (fl_replay_sharded_create(f.list, 4, &rs, &e) != FL_OK) die("sharded create", &e);
    enum { BATCHES = 1000, B = 32 };
    fl_replay_batch_t b;
    assert_int_equal(fl_replay_batch_init(&b, B, OBS_BYTES), FL_OK);
    static uint64_t cnt[MAX_ITEMS];
    memset(cnt, 0, sizeof cnt);
    for (int it = 0; it < BATCHES; it++) {
        if (fl_replay_sharded_sample(rs, B, BETA, 5000, &b, &e) != FL_OK) die("sample", &e);
        assert_int_equal(b.table_size, (uint64_t)f.n_items);
        assert_true(b.min_priority == 0.0);
        for (size_t r = 0; r < b.count; r++) {
            cnt[id_of(&b, r)]++;
            assert_true(rel(b.probs[r], 1.0 / f.n_items) < 1e-12);
            assert_true(b.weights[r] == 1.0f);
        }
    }
    double n = (double)BATCHES * B, e_i = n / f.n_items, chi = 0;
    for (int id = 0; id < f.n_items; id++) chi += ((double)cnt[id] - e_i) * ((double)cnt[id] - e_i) / e_i;
    print_message("uniform: chi-square %.1f (bound %.0f)\n", chi, chi_bound(f.n_items));
    assert_true(chi < chi_bound(f.n_items));
    fl_replay_info_t total;
    if (fl_replay_sharded_info(rs, 5000, &total, NULL, &e) != FL_OK) die("info", &e);
    assert_true(total.sampling_mass == (double)f.n_items);
    fl_replay_batch_free(&b);
    fl_replay_sharded_destroy(rs);
    fixture_stop(&f);
}

/* ---- priority updates ------------------------------------------------------------------ */

static void test_updates_route_by_key(void **state) {
    (void)state;
    static fixture_t f;
    fixture_start(&f);
    for (int s = 0; s < SHARDS; s++) add_shard_mass(&f, s, 20, 1.0 + s);
    fl_err_t e;
    fl_err_init(&e);
    fl_replay_sharded_t *rs = NULL;
    if (fl_replay_sharded_create(f.list, 7, &rs, &e) != FL_OK) die("sharded create", &e);

    /* Every item once, in an order that interleaves shards, plus one duplicate (the later
     * entry wins). */
    int n = f.n_items;
    uint64_t keys[MAX_ITEMS + 1];
    float prios[MAX_ITEMS + 1];
    for (int k = 0; k < n; k++) {
        int id = (k * 37) % n;
        keys[k] = f.shard_key[id];
        prios[k] = 0.25f + 0.01f * (float)id;
    }
    keys[n] = f.shard_key[3];
    prios[n] = 7.0f;
    uint64_t before[SHARDS];
    for (int s = 0; s < SHARDS; s++) {
        fl_replay_info_t in;
        fl_replay_service_info(f.shard[s].svc, &in);
        before[s] = in.updates_applied;
    }
    uint64_t applied = 0;
    if (fl_replay_sharded_update_priorities(rs, (size_t)n + 1, keys, prios, &applied, &e) != FL_OK) die("update", &e);
    /* Every key reached its own shard (a duplicate may count once or twice). */
    assert_true(applied == (uint64_t)n || applied == (uint64_t)n + 1);
    uint64_t sum = 0;
    for (int s = 0; s < SHARDS; s++) {
        fl_replay_info_t in;
        fl_replay_service_info(f.shard[s].svc, &in);
        uint64_t mine = 0;
        for (int k = 0; k < n; k++) mine += fl_table_key_shard(keys[k]) == s;
        uint64_t got = in.updates_applied - before[s];
        assert_true(got == mine || (s == f.shard_of[3] && got == mine + 1));
        assert_int_equal(in.updates_stale, 0);
        sum += got;
    }
    assert_int_equal(sum, applied);
    for (int id = 0; id < n; id++) {
        double q = 0;
        int s = f.shard_of[id];
        if (fl_table_priority(fl_replay_service_table(f.shard[s].svc), f.shard_key[id], &q, &e) != FL_OK)
            die("priority", &e);
        float p = id == 3 ? 7.0f : 0.25f + 0.01f * (float)id;
        assert_true(rel(q, pow((double)p + f.opts.priority_eps, ALPHA)) < 1e-12);
    }

    /* A key naming a shard that does not exist: nothing is sent anywhere. */
    uint64_t bad[2] = {f.shard_key[0], fl_table_key_make(7, 1)};
    float bp[2] = {1.0f, 1.0f};
    assert_int_equal(fl_replay_sharded_update_priorities(rs, 2, bad, bp, &applied, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "shard 7"));
    fl_replay_info_t in0;
    fl_replay_service_info(f.shard[0].svc, &in0);
    uint64_t after0 = in0.updates_applied;
    float negative[1] = {-1.0f};
    assert_int_equal(fl_replay_sharded_update_priorities(rs, 1, bad, negative, &applied, &e), FL_INVALID_ARGUMENT);
    fl_replay_service_info(f.shard[0].svc, &in0);
    assert_int_equal(in0.updates_applied, after0);
    assert_int_equal(fl_replay_sharded_update_priorities(rs, 0, NULL, NULL, &applied, &e), FL_OK);
    assert_int_equal(applied, 0);

    /* Sampling follows the new priorities: compare with the expected shares again. */
    double total = 0;
    for (int id = 0; id < n; id++) {
        float p = id == 3 ? 7.0f : 0.25f + 0.01f * (float)id;
        total += f.q[id] = pow((double)p + f.opts.priority_eps, ALPHA);
    }
    f.q_total = total;
    fl_replay_batch_t b;
    assert_int_equal(fl_replay_batch_init(&b, 32, OBS_BYTES), FL_OK);
    static uint64_t cnt[MAX_ITEMS];
    memset(cnt, 0, sizeof cnt);
    for (int it = 0; it < 1000; it++) {
        if (fl_replay_sharded_sample(rs, 32, BETA, 5000, &b, &e) != FL_OK) die("sample", &e);
        for (size_t r = 0; r < b.count; r++) cnt[id_of(&b, r)]++;
    }
    double chi = chi_square(&f, cnt, 32000.0);
    print_message("after updates: chi-square %.1f (bound %.0f)\n", chi, chi_bound(n));
    assert_true(chi < chi_bound(n));

    /* Aggregated Info sums the shards. */
    fl_replay_info_t total_info, per[SHARDS];
    if (fl_replay_sharded_info(rs, 5000, &total_info, per, &e) != FL_OK) die("info", &e);
    uint64_t size = 0, sampled = 0;
    for (int s = 0; s < SHARDS; s++) {
        assert_int_equal(per[s].shard_id, (uint32_t)s);
        size += per[s].size;
        sampled += per[s].sampled;
    }
    assert_int_equal(total_info.size, (uint64_t)n);
    assert_int_equal(total_info.size, size);
    assert_int_equal(total_info.sampled, sampled);
    assert_int_equal(total_info.inserted, (uint64_t)n);

    fl_replay_batch_free(&b);
    fl_replay_sharded_destroy(rs);
    fixture_stop(&f);
}

/* ---- failures ---------------------------------------------------------------------------- */

static void test_empty_down_and_misordered(void **state) {
    (void)state;
    static fixture_t f;
    fixture_start(&f);
    fl_err_t e;
    fl_err_init(&e);
    fl_replay_batch_t b;
    assert_int_equal(fl_replay_batch_init(&b, 16, OBS_BYTES), FL_OK);

    /* All shards empty: the sampler polls their Info until its deadline. */
    fl_replay_sharded_t *rs = NULL;
    if (fl_replay_sharded_create(f.list, 1, &rs, &e) != FL_OK) die("sharded create", &e);
    assert_int_equal(fl_replay_sharded_sample(rs, 16, BETA, 300, &b, &e), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(e.msg, "4 shards"));
    assert_int_equal(fl_replay_sharded_sample(rs, 17, BETA, 300, &b, &e), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_replay_sharded_sample(rs, 16, 1.5, 300, &b, &e), FL_INVALID_ARGUMENT);

    /* Data in shards 1 and 3 only: everything comes from them. */
    add_shard_mass(&f, 1, 10, 1.0);
    add_shard_mass(&f, 3, 10, 3.0);
    if (fl_replay_sharded_sample(rs, 16, BETA, 5000, &b, &e) != FL_OK) die("sample", &e);
    for (size_t r = 0; r < b.count; r++) {
        int s = fl_table_key_shard(b.keys[r]);
        assert_true(s == 1 || s == 3);
    }
    fl_replay_sharded_destroy(rs);

    /* Addresses out of shard order. */
    char swapped[sizeof f.list];
    snprintf(swapped, sizeof swapped, "%s,%s,%s,%s", f.shard[0].addr, f.shard[3].addr, f.shard[2].addr,
             f.shard[1].addr);
    if (fl_replay_sharded_create(swapped, 1, &rs, &e) != FL_OK) die("sharded create", &e);
    assert_int_equal(fl_replay_sharded_sample(rs, 16, BETA, 5000, &b, &e), FL_DATA_LOSS);
    assert_non_null(strstr(e.msg, "shard order"));
    fl_replay_sharded_destroy(rs);

    /* Shard 2 down: the call waits for it until the deadline, then names it. */
    char down_addr[300];
    snprintf(down_addr, sizeof down_addr, "%s", f.shard[2].addr);
    replay_fixture_stop(&f.shard[2]);
    if (fl_replay_sharded_create(f.list, 1, &rs, &e) != FL_OK) die("sharded create", &e);
    fl_replay_sharded_set_timeout(rs, 400);
    double t0 = fl_clock_sec();
    fl_status st = fl_replay_sharded_sample(rs, 16, BETA, 400, &b, &e);
    assert_true(st == FL_DEADLINE_EXCEEDED || st == FL_UNAVAILABLE);
    assert_non_null(strstr(e.msg, "replay shard 2"));
    assert_non_null(strstr(e.msg, down_addr));
    (void)t0;
    uint64_t key2 = fl_table_key_make(2, 0), applied = 0;
    float one = 1.0f;
    st = fl_replay_sharded_update_priorities(rs, 1, &key2, &one, &applied, &e);
    assert_true(st == FL_DEADLINE_EXCEEDED || st == FL_UNAVAILABLE);
    assert_non_null(strstr(e.msg, "replay shard 2"));
    fl_replay_info_t total;
    memset(&total, 0, sizeof total);
    total.size = 12345;
    st = fl_replay_sharded_info(rs, 400, &total, NULL, &e);
    assert_true(st != FL_OK);
    assert_int_equal(total.size, 12345); /* left as it was */
    fl_replay_sharded_destroy(rs);

    fl_replay_batch_free(&b);
    fixture_stop(&f);
}

/* ---- addresses, one shard ------------------------------------------------------------------ */

static void test_addresses(void **state) {
    (void)state;
    fl_err_t e;
    fl_err_init(&e);
    fl_replay_addrs_t a;
    assert_int_equal(fl_replay_addrs_parse("127.0.0.1:1,unix:/tmp/x,h:3", &a, &e), FL_OK);
    assert_int_equal(a.count, 3);
    assert_string_equal(a.addr[1], "unix:/tmp/x");
    fl_replay_addrs_free(&a);
    assert_int_equal(fl_replay_addrs_parse("a,,b", &a, &e), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_replay_addrs_parse("a,", &a, &e), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_replay_addrs_parse("", &a, &e), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_replay_addrs_parse("@/nonexistent/fleet-addrs", &a, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "/nonexistent/fleet-addrs"));

    char path[] = "/tmp/fleet-addrs-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *fp = fdopen(fd, "w");
    for (int i = 0; i < 300; i++) fprintf(fp, "127.0.0.1:%d%s", 1000 + i, i % 3 ? "\n" : ", ");
    fclose(fp);
    char spec[64];
    snprintf(spec, sizeof spec, "@%s", path);
    assert_int_equal(fl_replay_addrs_parse(spec, &a, &e), FL_INVALID_ARGUMENT); /* more than 256 */
    fp = fopen(path, "w");
    for (int i = 0; i < 200; i++) fprintf(fp, "127.0.0.1:%d%s", 1000 + i, i % 3 ? "\n" : ", ");
    fclose(fp);
    assert_int_equal(fl_replay_addrs_parse(spec, &a, &e), FL_OK);
    assert_int_equal(a.count, 200);
    assert_string_equal(a.addr[199], "127.0.0.1:1199");
    fl_replay_addrs_free(&a);
    unlink(path);

    assert_int_equal(fl_replay_shard_for_actor(0, 1), 0);
    assert_int_equal(fl_replay_shard_for_actor(5, 1), 0);
    assert_int_equal(fl_replay_shard_for_actor(5, 4), 1);
    assert_int_equal(fl_replay_shard_for_actor(7, 4), 3);
}

/* One shard: the sharded client is the plain client, and Sample reports the table's
 * minimum priority. */
static void test_one_shard_min_priority(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = replay_fixture_opts(SIG.obs, SIG.num_actions, 1000, 1);
    opts.shards = 1;
    opts.alpha = ALPHA;
    fl_err_t e;
    fl_err_init(&e);
    replay_fixture_t f;
    replay_fixture_start(&f, &opts);
    float obs[40 * OBS_DIM] = {0}, rew[40], disc[40], prio[40];
    int32_t act[40];
    for (int i = 0; i < 40; i++) {
        rew[i] = (float)i;
        disc[i] = 0.5f;
        act[i] = 0;
        prio[i] = 0.05f + 0.1f * (float)((i * 7) % 40);
    }
    if (fl_table_insert(fl_replay_service_table(f.svc), 40, obs, act, rew, disc, obs, prio, NULL, &e) != FL_OK)
        die("insert", &e);
    double qmin = INFINITY;
    for (int i = 0; i < 40; i++) qmin = fmin(qmin, pow((double)prio[i] + opts.priority_eps, ALPHA));
    fl_replay_sharded_t *rs = NULL;
    if (fl_replay_sharded_create(f.addr, 3, &rs, &e) != FL_OK) die("sharded create", &e);
    fl_replay_batch_t b;
    assert_int_equal(fl_replay_batch_init(&b, 8, OBS_BYTES), FL_OK);
    const double betas[] = {0.4, 1.0, 0.05};
    for (int k = 0; k < 3; k++) {
        if (fl_replay_sharded_sample(rs, 8, betas[k], 2000, &b, &e) != FL_OK) die("sample", &e);
        assert_int_equal(b.count, 8);
        assert_true(rel(b.min_priority, qmin) < 1e-5);
    }
    if (fl_replay_sharded_sample(rs, 8, 0.0, 2000, &b, &e) != FL_OK) die("sample", &e);
    assert_true(b.min_priority == 0.0);
    for (size_t r = 0; r < b.count; r++) assert_true(b.weights[r] == 1.0f);
    fl_replay_batch_free(&b);
    fl_replay_sharded_destroy(rs);
    replay_fixture_stop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addresses),
        cmocka_unit_test(test_one_shard_min_priority),
        cmocka_unit_test(test_sampling_matches_single_table),
        cmocka_unit_test(test_light_shard),
        cmocka_unit_test(test_refusing_shard_left_out),
        cmocka_unit_test(test_uniform_selector),
        cmocka_unit_test(test_updates_route_by_key),
        cmocka_unit_test(test_empty_down_and_misordered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
