/* test_replay_selectors: the replay table's selectors (prioritized, uniform, fifo), removal
 * after max_times_sampled, key generations across slot reuse, periodic sum-tree rebuilds
 * and the validation of the new configuration fields. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/rng.h"
#include "replay/table.h"

/* A table of int32 obs of shape (2); alpha 1 and eps 0 unless told, so that the stored
 * sampling priority is the |TD| priority itself. */
static fl_table_t *make_table(uint64_t capacity, fl_selector sel, int64_t mts, double alpha, double eps,
                              uint64_t seed) {
    fl_table_config_t cfg;
    fl_table_config_init(&cfg);
    cfg.capacity = capacity;
    cfg.obs.dtype = FL_DTYPE_INT32;
    cfg.obs.rank = 1;
    cfg.obs.shape[0] = 2;
    cfg.alpha = alpha;
    cfg.priority_eps = eps;
    cfg.seed = seed;
    cfg.selector = sel;
    cfg.max_times_sampled = mts;
    fl_table_t *t = NULL;
    fl_err_t err = {0};
    if (fl_table_create(&cfg, &t, &err) != FL_OK) fail_msg("create: %s", err.msg);
    return t;
}

/* Every column of item seq derives from seq. */
static void item_obs(uint64_t seq, int32_t *o) {
    o[0] = (int32_t)seq;
    o[1] = (int32_t)(seq * 7 + 1);
}

/* Inserts items first_seq .. first_seq + n - 1 with priority prios[i] (or `prio`). */
static void insert_items(fl_table_t *t, uint64_t first_seq, size_t n, float prio, const float *prios, uint64_t *keys) {
    int32_t *obs = malloc(n * 2 * sizeof(int32_t) + 1), *next = malloc(n * 2 * sizeof(int32_t) + 1);
    int32_t *act = malloc(n * sizeof(int32_t) + 1);
    float *rew = malloc(n * sizeof(float) + 1), *disc = malloc(n * sizeof(float) + 1);
    float *pr = malloc(n * sizeof(float) + 1);
    assert_true(obs && next && act && rew && disc && pr);
    for (size_t i = 0; i < n; i++) {
        uint64_t seq = first_seq + i;
        item_obs(seq, obs + 2 * i);
        item_obs(seq + 1, next + 2 * i);
        act[i] = (int32_t)(seq % 5);
        rew[i] = (float)seq;
        disc[i] = 0.5f;
        pr[i] = prios ? prios[i] : prio;
    }
    fl_err_t err = {0};
    if (fl_table_insert(t, n, obs, act, rew, disc, next, pr, keys, &err) != FL_OK) fail_msg("insert: %s", err.msg);
    free(obs);
    free(next);
    free(act);
    free(rew);
    free(disc);
    free(pr);
}

static void verify_ok(fl_table_t *t) {
    fl_err_t err = {0};
    if (fl_table_verify(t, &err) != FL_OK) fail_msg("verify: %s", err.msg);
}

static fl_table_info_t info_of(fl_table_t *t) {
    fl_table_info_t info;
    fl_table_info(t, &info);
    return info;
}

/* Samples B keys (and checks every column against the key). */
static fl_status sample_keys(fl_table_t *t, size_t B, uint64_t *keys, double *probs, float *weights, fl_err_t *err) {
    int32_t *obs = malloc(B * 2 * sizeof(int32_t)), *next = malloc(B * 2 * sizeof(int32_t));
    int32_t *act = malloc(B * sizeof(int32_t));
    float *rew = malloc(B * sizeof(float)), *disc = malloc(B * sizeof(float));
    assert_true(obs && next && act && rew && disc);
    fl_status s = fl_table_sample(t, B, 0.4, keys, probs, weights, obs, act, rew, disc, next, err);
    if (s == FL_OK)
        for (size_t j = 0; j < B; j++) {
            uint64_t seq = fl_table_key_seq(keys[j]);
            int32_t want[2], want_next[2];
            item_obs(seq, want);
            item_obs(seq + 1, want_next);
            assert_memory_equal(obs + 2 * j, want, sizeof(want));
            assert_memory_equal(next + 2 * j, want_next, sizeof(want_next));
            assert_int_equal(act[j], (int32_t)(seq % 5));
            assert_true(rew[j] == (float)seq);
            assert_true(disc[j] == 0.5f);
        }
    free(obs);
    free(next);
    free(act);
    free(rew);
    free(disc);
    return s;
}

static double chi_square(const uint64_t *counts, const double *p, size_t n, uint64_t draws) {
    double chi = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = p[i] * (double)draws, d = (double)counts[i] - e;
        chi += d * d / e;
    }
    return chi;
}

/* ---- configuration -------------------------------------------------------------------- */

static void test_selector_names(void **state) {
    (void)state;
    const fl_selector all[3] = {FL_SELECTOR_PRIORITIZED, FL_SELECTOR_UNIFORM, FL_SELECTOR_FIFO};
    const char *names[3] = {"prioritized", "uniform", "fifo"};
    for (int i = 0; i < 3; i++) {
        assert_string_equal(fl_selector_name(all[i]), names[i]);
        fl_selector s = (fl_selector)99;
        assert_int_equal(fl_selector_parse(names[i], &s, NULL), FL_OK);
        assert_int_equal(s, all[i]);
    }
    assert_string_equal(fl_selector_name((fl_selector)7), "invalid");
    const char *bad[] = {"Uniform", "", "lifo", "prioritized ", NULL};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fl_selector s = FL_SELECTOR_UNIFORM;
        fl_err_t err = {0};
        assert_int_equal(fl_selector_parse(bad[i], &s, &err), FL_INVALID_ARGUMENT);
        assert_int_equal(s, FL_SELECTOR_UNIFORM);
        if (!strstr(err.msg, "selector") || !strstr(err.msg, "prioritized, uniform or fifo"))
            fail_msg("parse '%s': message '%s' does not name the accepted values", bad[i] ? bad[i] : "NULL", err.msg);
    }
}

/* The strategy table (replay/selector.h): every row is complete and reachable by its
 * name, and the built-in selectors keep their checkpoint ids and properties. */
static void test_selector_table(void **state) {
    (void)state;
    int n = 0;
    for (const fl_selector_ops_t *ops; (ops = fl_selector_ops((fl_selector)n)) != NULL; n++) {
        assert_non_null(ops->name);
        assert_true(ops->name[0] != '\0');
        assert_non_null(ops->select);
        assert_string_equal(fl_selector_name((fl_selector)n), ops->name);
        fl_selector s = (fl_selector)99;
        assert_int_equal(fl_selector_parse(ops->name, &s, NULL), FL_OK);
        assert_int_equal((int)s, n);
    }
    assert_true(n >= 3);
    assert_null(fl_selector_ops((fl_selector)-1));
    assert_null(fl_selector_ops((fl_selector)n));
    const struct {
        fl_selector id;
        int prioritized, live_list, verify;
    } builtin[] = {{FL_SELECTOR_PRIORITIZED, 1, 0, 0}, {FL_SELECTOR_UNIFORM, 0, 1, 0}, {FL_SELECTOR_FIFO, 0, 0, 1}};
    assert_int_equal(FL_SELECTOR_PRIORITIZED, 0); /* checkpoint ids */
    assert_int_equal(FL_SELECTOR_UNIFORM, 1);
    assert_int_equal(FL_SELECTOR_FIFO, 2);
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) {
        const fl_selector_ops_t *ops = fl_selector_ops(builtin[i].id);
        assert_int_equal(ops->prioritized, builtin[i].prioritized);
        assert_int_equal(ops->live_list, builtin[i].live_list);
        assert_int_equal(ops->verify != NULL, builtin[i].verify);
    }
    char list[128];
    fl_selector_list(list, sizeof list, 1);
    assert_string_equal(list, "prioritized (0), uniform (1) or fifo (2)");
    /* Every selector of the table samples only live items, and the table stays
     * consistent, with and without removal (a new row gets this for free). */
    for (int id = 0; id < n; id++) {
        fl_table_t *t = make_table(16, (fl_selector)id, 0, 1.0, 0.0, 5);
        fl_table_t *q = make_table(16, (fl_selector)id, 1, 1.0, 0.0, 6);
        float prios[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        insert_items(t, 0, 8, 0.0f, prios, NULL);
        insert_items(q, 0, 8, 0.0f, prios, NULL);
        uint64_t keys[8];
        fl_err_t err = {0};
        if (sample_keys(t, 8, keys, NULL, NULL, &err) != FL_OK) fail_msg("%s: %s", fl_selector_name(id), err.msg);
        if (sample_keys(q, 8, keys, NULL, NULL, &err) != FL_OK) fail_msg("%s: %s", fl_selector_name(id), err.msg);
        assert_int_equal(info_of(q).size, 0); /* max_times_sampled 1: each drawn once, then removed */
        assert_int_equal(sample_keys(q, 1, keys, NULL, NULL, &err), FL_FAILED_PRECONDITION);
        verify_ok(t);
        verify_ok(q);
        fl_table_destroy(t);
        fl_table_destroy(q);
    }
}

static void test_config_defaults_and_validation(void **state) {
    (void)state;
    fl_table_config_t good;
    fl_table_config_init(&good);
    assert_int_equal(good.selector, FL_SELECTOR_PRIORITIZED);
    assert_int_equal(good.max_times_sampled, 0);
    assert_int_equal(good.rebuild_every, UINT64_C(1) << 20);
    good.capacity = 10;
    good.obs.dtype = FL_DTYPE_FLOAT32;
    good.obs.rank = 1;
    good.obs.shape[0] = 4;
    struct {
        fl_selector selector;
        int64_t mts;
        const char *field, *accepted;
    } bad[] = {
        {(fl_selector)3, 0, "selector", "prioritized (0), uniform (1) or fifo (2)"},
        {(fl_selector)-1, 0, "selector", "prioritized (0), uniform (1) or fifo (2)"},
        {FL_SELECTOR_FIFO, -1, "max_times_sampled", "0 (unlimited) or 1 .. 2147483647"},
        {FL_SELECTOR_UNIFORM, INT64_C(2147483648), "max_times_sampled", "0 (unlimited) or 1 .. 2147483647"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fl_table_config_t c = good;
        c.selector = bad[i].selector;
        c.max_times_sampled = bad[i].mts;
        fl_table_t *t = (fl_table_t *)1;
        fl_err_t err = {0};
        assert_int_equal(fl_table_create(&c, &t, &err), FL_INVALID_ARGUMENT);
        assert_null(t);
        if (!strstr(err.msg, bad[i].field) || !strstr(err.msg, bad[i].accepted))
            fail_msg("case %zu: message '%s' does not name %s and %s", i, err.msg, bad[i].field, bad[i].accepted);
    }
    /* The edges of the accepted ranges. */
    fl_selector sels[3] = {FL_SELECTOR_PRIORITIZED, FL_SELECTOR_UNIFORM, FL_SELECTOR_FIFO};
    int64_t mts[3] = {0, 1, 2147483647};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            fl_table_config_t c = good;
            c.selector = sels[a];
            c.max_times_sampled = mts[b];
            c.rebuild_every = (uint64_t)b;
            fl_table_t *t = NULL;
            assert_int_equal(fl_table_create(&c, &t, NULL), FL_OK);
            assert_int_equal(fl_table_config(t)->selector, sels[a]);
            assert_int_equal(fl_table_config(t)->max_times_sampled, mts[b]);
            fl_table_destroy(t);
        }
}

/* ---- uniform -------------------------------------------------------------------------- */

/* Uniform ignores priorities: 100 live items (the window of 150 inserts, so it wraps the
 * ring) with priorities from 0 to ~4000 are drawn equally often. 99 degrees of freedom:
 * the 1e-6 upper quantile is ~181 (as in test_replay); the same counts against the
 * prioritized distribution must fail that bound by far. probs are 1/N, weights 1. */
static void test_uniform_frequencies(void **state) {
    (void)state;
    enum { N = 100 };
    fl_table_t *t = make_table(N, FL_SELECTOR_UNIFORM, 0, 0.6, 0.0, 31);
    float prios[150];
    double uniform[N], prop[N], total = 0.0;
    for (int i = 0; i < 150; i++) prios[i] = (float)((i * i) % 4001) * (i % 7 == 0 ? 0.0f : 1.0f);
    for (int i = 0; i < N; i++) {
        uniform[i] = 1.0 / N;
        prop[i] = pow((double)prios[50 + i], 0.6);
        total += prop[i];
    }
    for (int i = 0; i < N; i++) prop[i] /= total;
    insert_items(t, 0, 150, 0.0f, prios, NULL);
    size_t batches[] = {1, 7, 64};
    for (size_t b = 0; b < 3; b++) {
        size_t B = batches[b];
        uint64_t draws = 128000 / B * B, counts[N] = {0}, keys[64];
        double probs[64];
        float w[64];
        for (uint64_t c = 0; c < draws / B; c++) {
            assert_int_equal(fl_table_sample(t, B, 0.4, keys, probs, w, NULL, NULL, NULL, NULL, NULL, NULL), FL_OK);
            for (size_t j = 0; j < B; j++) {
                uint64_t seq = fl_table_key_seq(keys[j]);
                assert_true(seq >= 50 && seq < 150);
                assert_true(probs[j] == 1.0 / N);
                assert_true(w[j] == 1.0f);
                counts[seq - 50]++;
            }
        }
        double chi = chi_square(counts, uniform, N, draws);
        if (chi > 181.0) fail_msg("B=%zu: chi-square %.1f > 181", B, chi);
        /* items of priority 0 under prop have p = 0: leave them out of the wrong fit */
        uint64_t c2[N];
        double p2[N];
        size_t m = 0;
        for (int i = 0; i < N; i++)
            if (prop[i] > 0.0) {
                c2[m] = counts[i];
                p2[m++] = prop[i];
            }
        double chi_wrong = chi_square(c2, p2, m, draws);
        if (chi_wrong < 1810.0) fail_msg("B=%zu: chi-square against prioritized only %.1f", B, chi_wrong);
    }
    verify_ok(t);
    fl_table_destroy(t);
}

/* Uniform with max_times_sampled = 1 draws without replacement: half of 20000 items drawn
 * in batches must be a uniform subset (counts per tenth of the sequence numbers, 9 degrees
 * of freedom, 1e-6 quantile ~44 for independent draws; without replacement the variance is
 * only smaller), every probability is 1 / (the live size at that draw), and no item comes
 * out twice. */
static void test_uniform_without_replacement(void **state) {
    (void)state;
    enum { N = 20000, B = 100 };
    fl_table_t *t = make_table(N, FL_SELECTOR_UNIFORM, 1, 1.0, 0.0, 32);
    insert_items(t, 0, N, 1.0f, NULL, NULL);
    uint8_t *seen = calloc(N, 1);
    assert_non_null(seen);
    uint64_t keys[B], counts[10] = {0}, drawn = 0;
    double probs[B], tenth[10];
    for (int i = 0; i < 10; i++) tenth[i] = 0.1;
    while (drawn < N / 2) {
        assert_int_equal(sample_keys(t, B, keys, probs, NULL, NULL), FL_OK);
        for (int j = 0; j < B; j++) {
            uint64_t seq = fl_table_key_seq(keys[j]);
            assert_true(seq < N);
            assert_int_equal(seen[seq], 0);
            seen[seq] = 1;
            assert_true(probs[j] == 1.0 / (double)(N - drawn));
            counts[seq * 10 / N]++;
            drawn++;
        }
    }
    fl_table_info_t info = info_of(t);
    assert_int_equal(info.size, N - drawn);
    assert_int_equal(info.removed, drawn);
    double chi = chi_square(counts, tenth, 10, drawn);
    if (chi > 44.0) fail_msg("chi-square %.1f > 44", chi);
    verify_ok(t);
    free(seen);
    fl_table_destroy(t);
}

/* ---- fifo ----------------------------------------------------------------------------- */

/* Without max_times_sampled a draw is always the oldest live item, whatever the
 * priorities (the oldest here has priority 0), so a batch repeats it; eviction moves it. */
static void test_fifo_returns_oldest(void **state) {
    (void)state;
    fl_table_t *t = make_table(10, FL_SELECTOR_FIFO, 0, 0.6, 0.0, 33);
    float prios[7] = {0.0f, 5.0f, 1.0f, 9.0f, 2.0f, 0.0f, 3.0f};
    insert_items(t, 0, 7, 0.0f, prios, NULL);
    uint64_t keys[5];
    double probs[5];
    float w[5];
    for (int round = 0; round < 3; round++) {
        assert_int_equal(sample_keys(t, 5, keys, probs, w, NULL), FL_OK);
        for (int j = 0; j < 5; j++) {
            assert_int_equal(fl_table_key_seq(keys[j]), 0);
            assert_true(probs[j] == 1.0);
            assert_true(w[j] == 1.0f);
        }
    }
    insert_items(t, 7, 6, 1.0f, NULL, NULL); /* 13 inserted: 0 .. 2 evicted */
    assert_int_equal(sample_keys(t, 5, keys, probs, w, NULL), FL_OK);
    for (int j = 0; j < 5; j++) assert_int_equal(fl_table_key_seq(keys[j]), 3);
    fl_table_info_t info = info_of(t);
    assert_int_equal(info.size, 10);
    assert_int_equal(info.removed, 0);
    assert_int_equal(info.sampled, 20);
    verify_ok(t);
    fl_table_destroy(t);
}

/* max_times_sampled = 1 makes a queue: draws come out in insertion order, each once. */
static void test_fifo_queue(void **state) {
    (void)state;
    fl_table_t *t = make_table(8, FL_SELECTOR_FIFO, 1, 1.0, 0.0, 34);
    insert_items(t, 0, 7, 1.0f, NULL, NULL);
    uint64_t keys[8];
    double probs[8];
    assert_int_equal(sample_keys(t, 3, keys, probs, NULL, NULL), FL_OK);
    for (int j = 0; j < 3; j++) assert_int_equal(fl_table_key_seq(keys[j]), j);
    fl_table_info_t info = info_of(t);
    assert_int_equal(info.size, 4);
    assert_int_equal(info.removed, 3);
    verify_ok(t);

    /* Asking for more than is left fails and changes nothing. */
    fl_err_t err = {0};
    assert_int_equal(sample_keys(t, 5, keys, probs, NULL, &err), FL_FAILED_PRECONDITION);
    if (!strstr(err.msg, "4 more draws") || !strstr(err.msg, "max_times_sampled 1")) fail_msg("message '%s'", err.msg);
    fl_table_info_t after = info_of(t);
    assert_int_equal(after.size, 4);
    assert_int_equal(after.sampled, 3);
    assert_int_equal(after.removed, 3);
    verify_ok(t);

    /* Inserts wrap the ring into the slots the queue freed (no live item is evicted). */
    insert_items(t, 7, 4, 1.0f, NULL, NULL);
    info = info_of(t);
    assert_int_equal(info.size, 8);
    assert_int_equal(sample_keys(t, 8, keys, probs, NULL, NULL), FL_OK);
    for (int j = 0; j < 8; j++) {
        assert_int_equal(fl_table_key_seq(keys[j]), 3 + j);
        assert_true(probs[j] == 1.0);
    }
    info = info_of(t);
    assert_int_equal(info.size, 0);
    assert_int_equal(info.removed, 11);
    assert_int_equal(sample_keys(t, 1, keys, probs, NULL, &err), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "empty"));
    verify_ok(t);
    fl_table_destroy(t);

    /* max_times_sampled = 2: every item twice in a row. */
    t = make_table(8, FL_SELECTOR_FIFO, 2, 1.0, 0.0, 35);
    insert_items(t, 0, 3, 1.0f, NULL, NULL);
    assert_int_equal(sample_keys(t, 5, keys, probs, NULL, NULL), FL_OK);
    const uint64_t want[5] = {0, 0, 1, 1, 2};
    for (int j = 0; j < 5; j++) assert_int_equal(fl_table_key_seq(keys[j]), want[j]);
    info = info_of(t);
    assert_int_equal(info.size, 1);
    assert_int_equal(info.removed, 2);
    assert_int_equal(sample_keys(t, 2, keys, probs, NULL, &err), FL_FAILED_PRECONDITION);
    assert_int_equal(sample_keys(t, 1, keys, probs, NULL, NULL), FL_OK);
    assert_int_equal(fl_table_key_seq(keys[0]), 2);
    assert_int_equal(info_of(t).size, 0);
    verify_ok(t);
    fl_table_destroy(t);
}

/* ---- max_times_sampled ---------------------------------------------------------------- */

/* An item sampled k times disappears: the size drops, its key is no longer live, a
 * priority update for it is skipped and counted as stale, and the total no longer holds
 * its priority. */
static void test_removed_after_k_samples(void **state) {
    (void)state;
    const int k = 3;
    fl_table_t *t = make_table(16, FL_SELECTOR_PRIORITIZED, k, 1.0, 0.0, 36);
    uint64_t key[2];
    float prios[2] = {1e6f, 1e-30f}; /* item 0 is drawn with probability ~1 - 1e-36 */
    insert_items(t, 0, 2, 0.0f, prios, key);
    uint64_t sk[1];
    for (int i = 0; i < k; i++) {
        fl_table_info_t info = info_of(t);
        assert_int_equal(info.size, 2);
        assert_int_equal(sample_keys(t, 1, sk, NULL, NULL, NULL), FL_OK);
        assert_int_equal(sk[0], key[0]);
        verify_ok(t);
    }
    fl_table_info_t info = info_of(t);
    assert_int_equal(info.size, 1);
    assert_int_equal(info.removed, 1);
    assert_int_equal(info.sampled, k);
    assert_true(info.total_priority == (double)1e-30f);
    double q;
    fl_err_t err = {0};
    assert_int_equal(fl_table_priority(t, key[0], &q, &err), FL_NOT_FOUND);
    assert_non_null(strstr(err.msg, "not live"));
    float np[2] = {5.0f, 2.0f};
    size_t applied = 9;
    assert_int_equal(fl_table_update_priorities(t, 2, key, np, &applied, NULL), FL_OK);
    assert_int_equal(applied, 1);
    info = info_of(t);
    assert_int_equal(info.updates_stale, 1);
    assert_int_equal(info.updates_applied, 1);
    assert_true(info.total_priority == 2.0);
    verify_ok(t);
    /* Only item 1 is left, with its k draws. */
    uint64_t three[3];
    assert_int_equal(sample_keys(t, 3, three, NULL, NULL, NULL), FL_OK);
    for (int j = 0; j < 3; j++) assert_int_equal(three[j], key[1]);
    assert_int_equal(info_of(t).size, 0);
    assert_int_equal(sample_keys(t, 1, sk, NULL, NULL, &err), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "empty"));
    verify_ok(t);
    fl_table_destroy(t);
}

/* Prioritized draws of one batch never exceed max_times_sampled: with 2 items and m = 1
 * a batch of 2 is both items, however unequal their priorities (the second draw, if it
 * lands on the first item again, is drawn again from what remains). A batch of 3 is
 * refused, and items of priority 0 give no draws until their priority rises. */
static void test_prioritized_batch_respects_limit(void **state) {
    (void)state;
    fl_table_t *t = make_table(64, FL_SELECTOR_PRIORITIZED, 1, 1.0, 0.0, 37);
    for (uint64_t round = 0; round < 200; round++) {
        uint64_t key[2], sk[2];
        float prios[2] = {round % 2 ? 1000.0f : 1.0f, round % 2 ? 1.0f : 1000.0f};
        insert_items(t, 2 * round, 2, 0.0f, prios, key);
        fl_err_t err = {0};
        assert_int_equal(sample_keys(t, 3, sk, NULL, NULL, &err), FL_FAILED_PRECONDITION);
        assert_non_null(strstr(err.msg, "2 more draws"));
        double probs[2];
        float w[2];
        assert_int_equal(fl_table_sample(t, 2, 1.0, sk, probs, w, NULL, NULL, NULL, NULL, NULL, NULL), FL_OK);
        assert_true((sk[0] == key[0] && sk[1] == key[1]) || (sk[0] == key[1] && sk[1] == key[0]));
        for (int j = 0; j < 2; j++) {
            assert_true(probs[j] > 0.0 && probs[j] <= 1.0);
            assert_true(w[j] > 0.0f && w[j] <= 1.0f);
        }
        assert_int_equal(info_of(t).size, 0);
    }
    verify_ok(t);

    uint64_t key[2], sk[2];
    float prios[2] = {0.0f, 1.0f};
    insert_items(t, 400, 2, 0.0f, prios, key);
    fl_err_t err = {0};
    assert_int_equal(sample_keys(t, 2, sk, NULL, NULL, &err), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "1 more draws"));
    verify_ok(t);
    float up = 3.0f;
    assert_int_equal(fl_table_update_priorities(t, 1, &key[0], &up, NULL, NULL), FL_OK);
    verify_ok(t);
    assert_int_equal(sample_keys(t, 2, sk, NULL, NULL, NULL), FL_OK);
    assert_true(sk[0] != sk[1]);
    /* And back: a live item whose priority drops to 0 stops counting. */
    insert_items(t, 402, 2, 1.0f, NULL, key);
    float zero = 0.0f;
    assert_int_equal(fl_table_update_priorities(t, 1, &key[1], &zero, NULL, NULL), FL_OK);
    verify_ok(t);
    assert_int_equal(sample_keys(t, 2, sk, NULL, NULL, &err), FL_FAILED_PRECONDITION);
    assert_int_equal(sample_keys(t, 1, sk, NULL, NULL, NULL), FL_OK);
    assert_int_equal(sk[0], key[0]);
    fl_table_info_t info = info_of(t);
    assert_int_equal(info.size, 1); /* key[1], priority 0 */
    fl_err_t e2 = {0};
    assert_int_equal(sample_keys(t, 1, sk, NULL, NULL, &e2), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(e2.msg, "priority 0"));
    verify_ok(t);
    fl_table_destroy(t);
}

/* Keys of removed items never come back, not even once an insert reuses their slot; a
 * removed slot stays empty until the ring comes round to it, and reusing it evicts
 * nothing live. */
static void test_removed_keys_never_resurrect(void **state) {
    (void)state;
    fl_table_t *t = make_table(4, FL_SELECTOR_FIFO, 1, 1.0, 0.0, 38);
    uint64_t k[12], sk[4];
    insert_items(t, 0, 4, 1.0f, NULL, k);
    assert_int_equal(sample_keys(t, 2, sk, NULL, NULL, NULL), FL_OK); /* removes 0, 1 */
    assert_int_equal(info_of(t).size, 2);
    insert_items(t, 4, 4, 2.0f, NULL, k + 4); /* slots 0 .. 3: 2, 3 evicted */
    fl_table_info_t info = info_of(t);
    assert_int_equal(info.size, 4);
    float pr[6] = {9.0f, 9.0f, 9.0f, 9.0f, 9.0f, 9.0f};
    size_t applied = 7;
    assert_int_equal(fl_table_update_priorities(t, 4, k, pr, &applied, NULL), FL_OK);
    assert_int_equal(applied, 0);
    assert_int_equal(info_of(t).updates_stale, 4);
    double q;
    for (int i = 0; i < 4; i++) assert_int_equal(fl_table_priority(t, k[i], &q, NULL), FL_NOT_FOUND);
    for (int i = 4; i < 8; i++) {
        assert_int_equal(fl_table_priority(t, k[i], &q, NULL), FL_OK);
        assert_true(q == 2.0);
    }
    assert_true(info_of(t).total_priority == 8.0);
    verify_ok(t);

    assert_int_equal(sample_keys(t, 2, sk, NULL, NULL, NULL), FL_OK); /* removes 4, 5 (slots 0, 1) */
    assert_int_equal(fl_table_key_seq(sk[0]), 4);
    assert_int_equal(fl_table_key_seq(sk[1]), 5);
    insert_items(t, 8, 1, 3.0f, NULL, k + 8); /* slot 0: window 5 .. 8, 5 removed */
    info = info_of(t);
    assert_int_equal(info.size, 3);
    insert_items(t, 9, 1, 3.0f, NULL, k + 9); /* slot 1, empty: nothing live evicted */
    info = info_of(t);
    assert_int_equal(info.size, 4);
    assert_int_equal(info.removed, 4);
    for (int i = 0; i < 6; i++) assert_int_equal(fl_table_priority(t, k[i], &q, NULL), FL_NOT_FOUND);
    for (int i = 6; i < 10; i++) assert_int_equal(fl_table_priority(t, k[i], &q, NULL), FL_OK);
    assert_int_equal(fl_table_update_priorities(t, 6, k, pr, &applied, NULL), FL_OK);
    assert_int_equal(applied, 0);
    verify_ok(t);
    assert_int_equal(sample_keys(t, 4, sk, NULL, NULL, NULL), FL_OK);
    for (int j = 0; j < 4; j++) assert_int_equal(fl_table_key_seq(sk[j]), 6 + j);
    fl_table_destroy(t);
}

/* ---- a model of the table, for random operation sequences ---------------------------- */

enum { LIVE = 0, REMOVED = 1, EVICTED = 2 };

typedef struct {
    uint64_t capacity, inserted;
    int64_t mts;
    fl_selector sel;
    uint8_t *state; /* per sequence number */
    uint32_t *times;
    double *q;
} model_t;

static uint64_t model_live(const model_t *m) {
    uint64_t n = 0;
    for (uint64_t s = 0; s < m->inserted; s++) n += m->state[s] == LIVE;
    return n;
}

/* Whether a batch of B can be drawn: the model's version of the table's precondition. */
static int model_can_sample(const model_t *m, size_t B) {
    uint64_t live = 0, positive = 0, draws = 0;
    for (uint64_t s = 0; s < m->inserted; s++) {
        if (m->state[s] != LIVE) continue;
        live++;
        int sampleable = m->sel != FL_SELECTOR_PRIORITIZED || m->q[s] > 0.0;
        positive += m->q[s] > 0.0;
        if (sampleable && m->mts > 0) draws += (uint64_t)m->mts - m->times[s];
    }
    if (live == 0 || (m->sel == FL_SELECTOR_PRIORITIZED && positive == 0)) return 0;
    return m->mts == 0 || draws >= B;
}

/* Random inserts (some larger than the capacity), samples, and priority updates of keys
 * old and new, checked after every step against the model: which keys are live, the
 * size, that every draw is live (fifo: the oldest live; prioritized: of positive
 * priority), that no item exceeds max_times_sampled, and fl_table_verify. */
static void run_model(fl_selector sel, int64_t mts, uint64_t seed) {
    const uint64_t cap = 37;
    const int ops = 1500;
    model_t m = {.capacity = cap, .mts = mts, .sel = sel};
    size_t max_seq = (size_t)ops * 60;
    m.state = calloc(max_seq, 1);
    m.times = calloc(max_seq, sizeof(uint32_t));
    m.q = calloc(max_seq, sizeof(double));
    assert_true(m.state && m.times && m.q);
    fl_table_t *t = make_table(cap, sel, mts, 1.0, 0.0, seed);
    fl_rng_t r;
    fl_rng_init(&r, seed + 1000);
    uint64_t keys[64];
    float prios[64];
    for (int op = 0; op < ops; op++) {
        uint64_t what = fl_rng_below(&r, 10);
        if (what < 3) {
            size_t n = (size_t)fl_rng_below(&r, op % 97 == 0 ? 60 : 12);
            for (size_t i = 0; i < n; i++)
                prios[i] = fl_rng_below(&r, 4) == 0 ? 0.0f : (float)(1 + fl_rng_below(&r, 9));
            if (n > 0) insert_items(t, m.inserted, n, 0.0f, prios, NULL);
            for (size_t i = 0; i < n; i++) {
                m.state[m.inserted + i] = LIVE;
                m.q[m.inserted + i] = prios[i];
            }
            m.inserted += n;
            for (uint64_t s = 0; s + cap < m.inserted; s++)
                if (m.state[s] == LIVE) m.state[s] = EVICTED;
        } else if (what < 7) {
            size_t B = 1 + (size_t)fl_rng_below(&r, 12);
            int can = model_can_sample(&m, B);
            fl_err_t err = {0};
            fl_status s = sample_keys(t, B, keys, NULL, NULL, &err);
            if (!can) {
                if (s != FL_FAILED_PRECONDITION) fail_msg("op %d: sample of %zu: expected a refusal, got %d", op, B, s);
                continue;
            }
            if (s != FL_OK) fail_msg("op %d: sample of %zu: %s", op, B, err.msg);
            for (size_t j = 0; j < B; j++) {
                uint64_t seq = fl_table_key_seq(keys[j]);
                assert_true(seq < m.inserted);
                if (m.state[seq] != LIVE)
                    fail_msg("op %d: draw %zu is seq %llu, not live", op, j, (unsigned long long)seq);
                if (sel == FL_SELECTOR_FIFO)
                    for (uint64_t older = 0; older < seq; older++)
                        if (m.state[older] == LIVE)
                            fail_msg("op %d: fifo drew %llu before %llu", op, (unsigned long long)seq,
                                     (unsigned long long)older);
                if (sel == FL_SELECTOR_PRIORITIZED) assert_true(m.q[seq] > 0.0);
                m.times[seq]++;
                if (mts > 0 && m.times[seq] == (uint32_t)mts) m.state[seq] = REMOVED;
            }
        } else {
            size_t n = 1 + (size_t)fl_rng_below(&r, 16);
            size_t want = 0;
            for (size_t i = 0; i < n; i++) {
                uint64_t seq = m.inserted ? m.inserted - 1 - fl_rng_below(&r, m.inserted < 80 ? m.inserted : 80) : 0;
                keys[i] = fl_table_key_make(fl_rng_below(&r, 20) == 0 ? 1 : 0, seq);
                prios[i] = fl_rng_below(&r, 3) == 0 ? 0.0f : (float)(1 + fl_rng_below(&r, 9));
                if (fl_table_key_shard(keys[i]) == 0 && seq < m.inserted && m.state[seq] == LIVE) {
                    m.q[seq] = prios[i];
                    want++;
                }
            }
            size_t applied = 0;
            assert_int_equal(fl_table_update_priorities(t, n, keys, prios, &applied, NULL), FL_OK);
            assert_int_equal(applied, want);
        }
        fl_table_info_t info = info_of(t);
        if (info.size != model_live(&m))
            fail_msg("op %d: size %llu, model %llu", op, (unsigned long long)info.size,
                     (unsigned long long)model_live(&m));
        uint64_t from = m.inserted > 3 * cap ? m.inserted - 3 * cap : 0;
        for (uint64_t seq = from; seq < m.inserted; seq++) {
            double q = -1.0;
            fl_status s = fl_table_priority(t, fl_table_key_make(0, seq), &q, NULL);
            if ((s == FL_OK) != (m.state[seq] == LIVE))
                fail_msg("op %d: seq %llu live in the table %d, in the model %d", op, (unsigned long long)seq,
                         s == FL_OK, m.state[seq] == LIVE);
            if (s == FL_OK) assert_true(q == m.q[seq]);
        }
        if (op % 10 == 0) verify_ok(t);
    }
    verify_ok(t);
    free(m.state);
    free(m.times);
    free(m.q);
    fl_table_destroy(t);
}

static void test_model_prioritized(void **state) {
    (void)state;
    for (int64_t mts = 0; mts <= 3; mts++) run_model(FL_SELECTOR_PRIORITIZED, mts, 40 + (uint64_t)mts);
}

static void test_model_uniform(void **state) {
    (void)state;
    for (int64_t mts = 0; mts <= 3; mts++) run_model(FL_SELECTOR_UNIFORM, mts, 50 + (uint64_t)mts);
}

static void test_model_fifo(void **state) {
    (void)state;
    for (int64_t mts = 0; mts <= 3; mts++) run_model(FL_SELECTOR_FIFO, mts, 60 + (uint64_t)mts);
}

/* ---- rebuilds ------------------------------------------------------------------------- */

static void test_periodic_and_on_demand_rebuild(void **state) {
    (void)state;
    fl_table_config_t cfg;
    fl_table_config_init(&cfg);
    cfg.capacity = 50;
    cfg.obs.dtype = FL_DTYPE_INT32;
    cfg.obs.rank = 1;
    cfg.obs.shape[0] = 2;
    cfg.rebuild_every = 100;
    fl_table_t *t = NULL;
    assert_int_equal(fl_table_create(&cfg, &t, NULL), FL_OK);
    uint64_t keys[50];
    insert_items(t, 0, 50, 1.0f, NULL, keys);
    float pr[50];
    for (int i = 0; i < 50; i++) pr[i] = (float)i * 0.25f;
    for (int round = 0; round < 5; round++)
        assert_int_equal(fl_table_update_priorities(t, 50, keys, pr, NULL, NULL), FL_OK);
    fl_table_info_t info = info_of(t);
    assert_int_equal(info.updates_applied, 250);
    assert_int_equal(info.rebuilds, 2); /* at 100 and 200 */
    double total = info.total_priority;
    fl_table_rebuild(t);
    info = info_of(t);
    assert_int_equal(info.rebuilds, 3);
    assert_true(info.total_priority == total);
    verify_ok(t);
    /* the count restarts after an on-demand rebuild: 50 + 50 more reach 100 */
    assert_int_equal(fl_table_update_priorities(t, 50, keys, pr, NULL, NULL), FL_OK);
    assert_int_equal(info_of(t).rebuilds, 3);
    assert_int_equal(fl_table_update_priorities(t, 50, keys, pr, NULL, NULL), FL_OK);
    assert_int_equal(info_of(t).rebuilds, 4);
    fl_table_destroy(t);

    cfg.rebuild_every = 0; /* never */
    assert_int_equal(fl_table_create(&cfg, &t, NULL), FL_OK);
    insert_items(t, 0, 50, 1.0f, NULL, keys);
    for (int round = 0; round < 10; round++)
        assert_int_equal(fl_table_update_priorities(t, 50, keys, pr, NULL, NULL), FL_OK);
    assert_int_equal(info_of(t).rebuilds, 0);
    verify_ok(t);
    fl_table_destroy(t);
}

/* ---- concurrency ---------------------------------------------------------------------- */

#define THREADS 4
#define ITERS 300
#define INS 20
#define SMP 8
#define MTS 2

typedef struct {
    fl_table_t *table;
    int id;
    _Atomic uint32_t *times; /* per sequence number, over all threads */
    uint64_t failures;
} worker_t;

/* Inserts, samples (a refusal for lack of draws is fine) and updates from several
 * threads: no item may ever be drawn more than max_times_sampled times in all. */
static void *worker(void *arg) {
    worker_t *w = arg;
    fl_rng_t r;
    fl_rng_init_stream(&r, 91, (uint64_t)w->id);
    int32_t obs[INS * 2], act[INS];
    float rew[INS], disc[INS], pr[INS];
    uint64_t sk[SMP];
    float npr[SMP];
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < INS; i++) {
            obs[2 * i] = obs[2 * i + 1] = w->id;
            act[i] = 0;
            rew[i] = 0.0f;
            disc[i] = 0.9f;
            pr[i] = (float)fl_rng_double(&r) + 0.01f;
        }
        if (fl_table_insert(w->table, INS, obs, act, rew, disc, obs, pr, NULL, NULL) != FL_OK) w->failures++;
        fl_status s = fl_table_sample(w->table, SMP, 0.4, sk, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
        if (s == FL_FAILED_PRECONDITION) continue;
        if (s != FL_OK) {
            w->failures++;
            continue;
        }
        for (int j = 0; j < SMP; j++) {
            atomic_fetch_add(&w->times[fl_table_key_seq(sk[j])], 1);
            npr[j] = (float)fl_rng_double(&r);
        }
        if (fl_table_update_priorities(w->table, SMP, sk, npr, NULL, NULL) != FL_OK) w->failures++;
        if (it % 100 == 99 && fl_table_verify(w->table, NULL) != FL_OK) w->failures++;
    }
    return NULL;
}

static void test_concurrent_max_times_sampled(void **state) {
    (void)state;
    fl_selector sels[3] = {FL_SELECTOR_PRIORITIZED, FL_SELECTOR_UNIFORM, FL_SELECTOR_FIFO};
    for (int k = 0; k < 3; k++) {
        fl_table_t *t = make_table(500, sels[k], MTS, 0.6, 1e-6, 70 + (uint64_t)k);
        size_t n = THREADS * ITERS * INS;
        _Atomic uint32_t *times = calloc(n, sizeof(*times));
        assert_non_null(times);
        pthread_t th[THREADS];
        worker_t w[THREADS];
        for (int i = 0; i < THREADS; i++) {
            w[i] = (worker_t){.table = t, .id = i, .times = times};
            assert_int_equal(pthread_create(&th[i], NULL, worker, &w[i]), 0);
        }
        for (int i = 0; i < THREADS; i++) {
            assert_int_equal(pthread_join(th[i], NULL), 0);
            assert_int_equal(w[i].failures, 0);
        }
        uint64_t drawn = 0, exhausted = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t c = atomic_load(&times[i]);
            if (c > MTS) fail_msg("%s: seq %zu drawn %u times", fl_selector_name(sels[k]), i, c);
            drawn += c;
            exhausted += c == MTS;
        }
        fl_table_info_t info = info_of(t);
        assert_int_equal(info.inserted, n);
        assert_int_equal(info.sampled, drawn);
        assert_int_equal(info.removed, exhausted);
        verify_ok(t);
        free(times);
        fl_table_destroy(t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selector_names),
        cmocka_unit_test(test_selector_table),
        cmocka_unit_test(test_config_defaults_and_validation),
        cmocka_unit_test(test_uniform_frequencies),
        cmocka_unit_test(test_uniform_without_replacement),
        cmocka_unit_test(test_fifo_returns_oldest),
        cmocka_unit_test(test_fifo_queue),
        cmocka_unit_test(test_removed_after_k_samples),
        cmocka_unit_test(test_prioritized_batch_respects_limit),
        cmocka_unit_test(test_removed_keys_never_resurrect),
        cmocka_unit_test(test_model_prioritized),
        cmocka_unit_test(test_model_uniform),
        cmocka_unit_test(test_model_fifo),
        cmocka_unit_test(test_periodic_and_on_demand_rebuild),
        cmocka_unit_test(test_concurrent_max_times_sampled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
