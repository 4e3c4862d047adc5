/* test_replay: the prioritized replay table (keys, FIFO eviction, sampling distribution,
 * importance weights, validation, data integrity, concurrent use). */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/rng.h"
#include "replay/table.h"

/* A table of uint8 obs of shape (3, 5) = 15 bytes. */
static fl_table_t *make_table(uint64_t capacity, double alpha, double eps, int shard, uint64_t seed) {
    fl_table_config_t cfg;
    fl_table_config_init(&cfg);
    cfg.capacity = capacity;
    cfg.obs.dtype = FL_DTYPE_UINT8;
    cfg.obs.rank = 2;
    cfg.obs.shape[0] = 3;
    cfg.obs.shape[1] = 5;
    cfg.alpha = alpha;
    cfg.priority_eps = eps;
    cfg.shard_id = shard;
    cfg.seed = seed;
    fl_table_t *t = NULL;
    fl_err_t err = {0};
    if (fl_table_create(&cfg, &t, &err) != FL_OK) fail_msg("create: %s", err.msg);
    assert_int_equal(fl_table_obs_bytes(t), 15);
    return t;
}

/* The content of the item with sequence number seq: every column derives from it. */
static void item_obs(uint64_t seq, uint8_t *obs, size_t bytes) {
    for (size_t k = 0; k < bytes; k++) obs[k] = (uint8_t)(seq * 31 + k * 7 + 3);
}
static void item_next_obs(uint64_t seq, uint8_t *obs, size_t bytes) {
    for (size_t k = 0; k < bytes; k++) obs[k] = (uint8_t)(seq * 17 + k * 3 + 101);
}
static int32_t item_action(uint64_t seq) {
    return (int32_t)(seq * 3 % 18);
}
static float item_reward(uint64_t seq) {
    return (float)seq * 0.5f - 7.0f;
}
static float item_discount(uint64_t seq) {
    return seq % 5 == 0 ? 0.0f : 0.970299f;
}

/* Inserts n items whose content derives from their sequence numbers (first_seq ..), all
 * with priority `prio`, or prios[i] when prios is not NULL. */
static void insert_items(fl_table_t *t, uint64_t first_seq, size_t n, float prio, const float *prios, uint64_t *keys) {
    size_t ob = fl_table_obs_bytes(t);
    uint8_t *obs = malloc(n * ob), *next = malloc(n * ob);
    int32_t *act = malloc(n * sizeof(int32_t));
    float *rew = malloc(n * sizeof(float)), *disc = malloc(n * sizeof(float)), *pr = malloc(n * sizeof(float));
    assert_true(obs && next && act && rew && disc && pr);
    for (size_t i = 0; i < n; i++) {
        uint64_t seq = first_seq + i;
        item_obs(seq, obs + i * ob, ob);
        item_next_obs(seq, next + i * ob, ob);
        act[i] = item_action(seq);
        rew[i] = item_reward(seq);
        disc[i] = item_discount(seq);
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

/* Pearson chi-square of counts against probabilities p over `draws` draws. */
static double chi_square(const uint64_t *counts, const double *p, size_t n, uint64_t draws) {
    double chi = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = p[i] * (double)draws, d = (double)counts[i] - e;
        chi += d * d / e;
    }
    return chi;
}

static void test_create_validates_config(void **state) {
    (void)state;
    fl_table_config_t good;
    fl_table_config_init(&good);
    good.capacity = 10;
    good.obs.dtype = FL_DTYPE_FLOAT32;
    good.obs.rank = 1;
    good.obs.shape[0] = 4;
    fl_table_config_t bad[9];
    const char *field[9] = {"capacity",     "obs_dtype", "obs_rank", "obs_shape", "alpha",
                            "priority_eps", "shard_id",  "shard_id", "alpha"};
    for (int i = 0; i < 9; i++) bad[i] = good;
    bad[0].capacity = 0;
    bad[1].obs.dtype = FL_DTYPE_INVALID;
    bad[2].obs.rank = 5;
    bad[3].obs.shape[0] = 0;
    bad[4].alpha = NAN;
    bad[5].priority_eps = -1e-6;
    bad[6].shard_id = 256;
    bad[7].shard_id = -1;
    bad[8].alpha = -0.5;
    for (int i = 0; i < 9; i++) {
        fl_table_t *t = (fl_table_t *)1;
        fl_err_t err = {0};
        assert_int_equal(fl_table_create(&bad[i], &t, &err), FL_INVALID_ARGUMENT);
        assert_null(t);
        if (!strstr(err.msg, field[i])) fail_msg("case %d: message '%s' does not name %s", i, err.msg, field[i]);
    }
    fl_table_t *t = NULL;
    assert_int_equal(fl_table_create(&good, &t, NULL), FL_OK);
    assert_int_equal(fl_table_obs_bytes(t), 16);
    assert_int_equal(fl_table_config(t)->obs.shape[0], 4);
    assert_true(fl_table_config(t)->alpha == 0.6);
    fl_table_destroy(t);
    fl_table_destroy(NULL);
}

static void test_keys_encode_shard_and_sequence(void **state) {
    (void)state;
    fl_table_t *t = make_table(16, 0.6, 1e-6, 7, 1);
    uint64_t keys[5];
    insert_items(t, 0, 5, 1.0f, NULL, keys);
    for (uint64_t i = 0; i < 5; i++) {
        assert_int_equal(keys[i] >> 56, 7);
        assert_int_equal(keys[i] & ((UINT64_C(1) << 56) - 1), i);
        assert_int_equal(fl_table_key_shard(keys[i]), 7);
        assert_int_equal(fl_table_key_seq(keys[i]), i);
    }
    insert_items(t, 5, 3, 1.0f, NULL, NULL); /* keys_out may be NULL */
    uint64_t more[2];
    insert_items(t, 8, 2, 1.0f, NULL, more);
    assert_int_equal(more[0], fl_table_key_make(7, 8));
    assert_int_equal(more[1], fl_table_key_make(7, 9));

    /* The same sequence number in another shard, and a never-issued one, are stale. */
    uint64_t foreign[3] = {fl_table_key_make(8, 2), fl_table_key_make(0, 2), fl_table_key_make(7, 10)};
    float pr[3] = {5.0f, 5.0f, 5.0f};
    size_t applied = 99;
    assert_int_equal(fl_table_update_priorities(t, 3, foreign, pr, &applied, NULL), FL_OK);
    assert_int_equal(applied, 0);
    double q = 0.0;
    assert_int_equal(fl_table_priority(t, keys[2], &q, NULL), FL_OK);
    assert_true(q == pow(1.0 + 1e-6, 0.6));
    fl_err_t err = {0};
    assert_int_equal(fl_table_priority(t, foreign[0], &q, &err), FL_NOT_FOUND);
    assert_non_null(strstr(err.msg, "not live"));
    fl_table_info_t info;
    fl_table_info(t, &info);
    assert_int_equal(info.updates_stale, 3);
    assert_int_equal(info.updates_applied, 0);

    uint64_t sk[8];
    assert_int_equal(fl_table_sample(t, 8, 0.4, sk, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), FL_OK);
    for (int j = 0; j < 8; j++) assert_int_equal(fl_table_key_shard(sk[j]), 7);
    fl_table_destroy(t);

    t = make_table(4, 0.6, 1e-6, 255, 1);
    insert_items(t, 0, 1, 1.0f, NULL, keys);
    assert_int_equal(keys[0], UINT64_C(0xff00000000000000));
    fl_table_destroy(t);
}

static void test_fifo_eviction(void **state) {
    (void)state;
    const uint64_t cap = 10, k = 3;
    fl_table_t *t = make_table(cap, 1.0, 0.0, 2, 3);
    uint64_t keys[13];
    insert_items(t, 0, 7, 1.0f, NULL, keys);
    insert_items(t, 7, 6, 1.0f, NULL, keys + 7); /* wraps: seqs 10..12 reuse slots 0..2 */
    verify_ok(t);
    fl_table_info_t info;
    fl_table_info(t, &info);
    assert_int_equal(info.size, cap);
    assert_int_equal(info.capacity, cap);
    assert_int_equal(info.inserted, cap + k);

    double q;
    for (uint64_t i = 0; i < k; i++) assert_int_equal(fl_table_priority(t, keys[i], &q, NULL), FL_NOT_FOUND);
    for (uint64_t i = k; i < cap + k; i++) assert_int_equal(fl_table_priority(t, keys[i], &q, NULL), FL_OK);

    /* Updates: the evicted keys are skipped and counted; the live ones apply. The items
     * now in the evicted keys' slots keep their priorities. */
    uint64_t upd[5] = {keys[0], keys[1], keys[2], keys[5], keys[12]};
    float pr[5] = {100.0f, 100.0f, 100.0f, 4.0f, 9.0f};
    size_t applied = 0;
    assert_int_equal(fl_table_update_priorities(t, 5, upd, pr, &applied, NULL), FL_OK);
    assert_int_equal(applied, 2);
    fl_table_info(t, &info);
    assert_int_equal(info.updates_applied, 2);
    assert_int_equal(info.updates_stale, 3);
    assert_true(info.max_priority == 9.0);
    assert_int_equal(fl_table_priority(t, keys[10], &q, NULL), FL_OK);
    assert_true(q == 1.0);
    assert_int_equal(fl_table_priority(t, keys[11], &q, NULL), FL_OK);
    assert_true(q == 1.0);
    assert_int_equal(fl_table_priority(t, keys[5], &q, NULL), FL_OK);
    assert_true(q == 4.0);
    assert_int_equal(fl_table_priority(t, keys[12], &q, NULL), FL_OK);
    assert_true(q == 9.0);
    /* total = 8 items at 1 + 4 + 9 */
    assert_true(info.total_priority == 21.0);
    verify_ok(t);

    /* Only live keys come out of sample. */
    uint64_t sk[64];
    for (int round = 0; round < 50; round++) {
        assert_int_equal(fl_table_sample(t, 64, 0.4, sk, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), FL_OK);
        for (int j = 0; j < 64; j++) {
            uint64_t seq = fl_table_key_seq(sk[j]);
            assert_true(seq >= k && seq < cap + k);
        }
    }
    fl_table_destroy(t);
}

/* One call inserting more than capacity items keeps the last `capacity` of them. */
static void test_insert_more_than_capacity(void **state) {
    (void)state;
    fl_table_t *t = make_table(10, 1.0, 0.0, 0, 4);
    uint64_t keys[25];
    insert_items(t, 0, 3, 1.0f, NULL, keys);
    insert_items(t, 3, 22, 2.0f, NULL, keys + 3);
    verify_ok(t);
    fl_table_info_t info;
    fl_table_info(t, &info);
    assert_int_equal(info.size, 10);
    assert_int_equal(info.inserted, 25);
    assert_true(info.total_priority == 20.0);
    double q;
    for (uint64_t i = 0; i < 25; i++)
        assert_int_equal(fl_table_priority(t, keys[i], &q, NULL), i < 15 ? FL_NOT_FOUND : FL_OK);
    uint8_t obs[10 * 15], want[15];
    uint64_t sk[10];
    assert_int_equal(fl_table_sample(t, 10, 0.4, sk, NULL, NULL, obs, NULL, NULL, NULL, NULL, NULL), FL_OK);
    for (int j = 0; j < 10; j++) {
        item_obs(fl_table_key_seq(sk[j]), want, 15);
        assert_memory_equal(obs + j * 15, want, 15);
    }
    fl_table_destroy(t);
}

/* What comes out of sample is byte-identical to what went in under that key, across
 * wrap-around and batches of every size. */
static void test_data_integrity(void **state) {
    (void)state;
    const uint64_t cap = 101;
    fl_table_t *t = make_table(cap, 0.6, 1e-6, 3, 5);
    fl_rng_t r;
    fl_rng_init(&r, 99);
    uint64_t seq = 0;
    enum { B = 64 };
    uint64_t keys[B];
    double probs[B];
    float weights[B], rew[B], disc[B];
    int32_t act[B];
    uint8_t obs[B * 15], next[B * 15], want[15];
    for (int round = 0; round < 200; round++) {
        size_t n = 1 + (size_t)fl_rng_below(&r, 40);
        float prios[40];
        for (size_t i = 0; i < n; i++) prios[i] = (float)(fl_rng_double(&r) * 3.0);
        insert_items(t, seq, n, 0.0f, prios, NULL);
        seq += n;
        assert_int_equal(fl_table_sample(t, B, 0.4, keys, probs, weights, obs, act, rew, disc, next, NULL), FL_OK);
        for (int j = 0; j < B; j++) {
            uint64_t s = fl_table_key_seq(keys[j]);
            assert_true(s < seq && s + cap >= seq);
            item_obs(s, want, 15);
            assert_memory_equal(obs + j * 15, want, 15);
            item_next_obs(s, want, 15);
            assert_memory_equal(next + j * 15, want, 15);
            assert_int_equal(act[j], item_action(s));
            assert_true(rew[j] == item_reward(s));
            assert_true(disc[j] == item_discount(s));
            assert_true(probs[j] > 0.0 && probs[j] <= 1.0);
            assert_true(weights[j] > 0.0f && weights[j] <= 1.0f);
        }
    }
    verify_ok(t);
    fl_table_info_t info;
    fl_table_info(t, &info);
    assert_int_equal(info.sampled, 200 * B);
    fl_table_destroy(t);
}

/* Sampling frequencies follow P(i) = (p_i + eps)^alpha / sum_j (p_j + eps)^alpha.
 *
 * 100 items, 128k draws per batch size. Under multinomial sampling the Pearson statistic
 * is chi-square with 99 degrees of freedom, whose 1e-6 upper quantile is ~181
 * (Wilson-Hilferty); stratified sampling keeps every item's expected count and only
 * lowers the variance, so 181 is a conservative bound that a correct sampler exceeds with
 * probability < 1e-6 (and the seed is fixed). The same counts tested against the
 * distribution a sampler that ignored alpha (or eps) would follow must fail the bound by
 * far, which shows the test can tell the two apart. Each item is also held to 5 binomial
 * standard deviations. */
static void test_sampling_frequencies(void **state) {
    (void)state;
    enum { N = 100 };
    const double alpha = 0.6, eps = 0.01, bound = 181.0;
    fl_table_t *t = make_table(N, alpha, eps, 0, 20240601);
    fl_rng_t r;
    fl_rng_init(&r, 7);
    float prios[N];
    double p[N], p_no_alpha[N], total = 0.0, total_no_alpha = 0.0;
    for (int i = 0; i < N; i++) {
        prios[i] = (float)(i % 10 == 0 ? 0.0 : 0.05 + 4.0 * fl_rng_double(&r));
        p[i] = pow((double)prios[i] + eps, alpha);
        p_no_alpha[i] = (double)prios[i] + eps;
        total += p[i];
        total_no_alpha += p_no_alpha[i];
    }
    for (int i = 0; i < N; i++) {
        p[i] /= total;
        p_no_alpha[i] /= total_no_alpha;
    }
    uint64_t keys[N];
    insert_items(t, 0, N, 0.0f, prios, keys);

    size_t batches[] = {1, 7, 64};
    for (size_t b = 0; b < 3; b++) {
        size_t B = batches[b];
        uint64_t draws = 128000 / B * B, counts[N] = {0};
        uint64_t sk[64];
        double probs[64];
        for (uint64_t c = 0; c < draws / B; c++) {
            assert_int_equal(fl_table_sample(t, B, 0.4, sk, probs, NULL, NULL, NULL, NULL, NULL, NULL, NULL), FL_OK);
            for (size_t j = 0; j < B; j++) {
                uint64_t i = fl_table_key_seq(sk[j]);
                assert_true(i < N);
                assert_true(fabs(probs[j] - p[i]) <= 1e-12 * p[i]);
                counts[i]++;
            }
        }
        double chi = chi_square(counts, p, N, draws);
        if (chi > bound) fail_msg("B=%zu: chi-square %.1f > %.1f", B, chi, bound);
        double chi_wrong = chi_square(counts, p_no_alpha, N, draws);
        if (chi_wrong < 10.0 * bound) fail_msg("B=%zu: chi-square against alpha=1 only %.1f", B, chi_wrong);
        for (int i = 0; i < N; i++) {
            double e = p[i] * (double)draws, sd = sqrt(e * (1.0 - p[i]));
            if (fabs((double)counts[i] - e) > 5.0 * sd)
                fail_msg("B=%zu item %d: %llu draws, expected %.1f", B, i, (unsigned long long)counts[i], e);
        }
    }
    fl_table_destroy(t);
}

/* alpha = 0: every live item has probability 1/N whatever its priority, and weight 1. The
 * chi-square bound is the one of test_sampling_frequencies (99 degrees of freedom). */
static void test_alpha_zero_is_uniform(void **state) {
    (void)state;
    enum { N = 100, B = 50 };
    fl_table_t *t = make_table(N, 0.0, 1e-6, 0, 8);
    float prios[N];
    double uniform[N];
    for (int i = 0; i < N; i++) {
        prios[i] = (float)(i * i) * 0.37f;
        uniform[i] = 1.0 / N;
    }
    insert_items(t, 0, N, 0.0f, prios, NULL);
    uint64_t counts[N] = {0}, draws = 0, sk[B];
    double probs[B];
    float w[B];
    for (int c = 0; c < 2000; c++) {
        assert_int_equal(fl_table_sample(t, B, 0.4, sk, probs, w, NULL, NULL, NULL, NULL, NULL, NULL), FL_OK);
        for (int j = 0; j < B; j++) {
            assert_true(probs[j] == 1.0 / N);
            assert_true(w[j] == 1.0f);
            counts[fl_table_key_seq(sk[j])]++;
            draws++;
        }
    }
    assert_true(chi_square(counts, uniform, N, draws) <= 181.0);
    fl_table_destroy(t);
}

/* Weights worked out by hand: w_i = (N P(i))^-beta / (N P_min)^-beta. */
static void test_importance_weights_by_hand(void **state) {
    (void)state;
    /* alpha 1, eps 0: priorities 1, 2, 4 -> P = 1/7, 2/7, 4/7, N = 3. */
    fl_table_t *t = make_table(4, 1.0, 0.0, 0, 9);
    float prios[3] = {1.0f, 2.0f, 4.0f};
    insert_items(t, 0, 3, 0.0f, prios, NULL);
    const double P[3] = {1.0 / 7, 2.0 / 7, 4.0 / 7};
    /* beta 0.5: (3/7)^-0.5 / (3/7)^-0.5 = 1, (6/7)^-0.5 / (3/7)^-0.5 = 2^-0.5, (12/7)^-0.5 / (3/7)^-0.5 = 1/2 */
    const float w_half[3] = {1.0f, 0.70710678f, 0.5f};
    const float w_one[3] = {1.0f, 0.5f, 0.25f};
    uint64_t sk[3];
    double probs[3];
    float w[3];
    int seen[3] = {0};
    for (int c = 0; c < 100; c++) {
        double beta = c % 2 ? 1.0 : 0.5;
        assert_int_equal(fl_table_sample(t, 3, beta, sk, probs, w, NULL, NULL, NULL, NULL, NULL, NULL), FL_OK);
        for (int j = 0; j < 3; j++) {
            uint64_t i = fl_table_key_seq(sk[j]);
            assert_true(i < 3);
            seen[i] = 1;
            assert_true(fabs(probs[j] - P[i]) <= 1e-15);
            assert_true(fabsf(w[j] - (c % 2 ? w_one[i] : w_half[i])) <= 1e-6f);
        }
        /* beta 0: all weights 1 */
        assert_int_equal(fl_table_sample(t, 3, 0.0, NULL, NULL, w, NULL, NULL, NULL, NULL, NULL, NULL), FL_OK);
        for (int j = 0; j < 3; j++) assert_true(w[j] == 1.0f);
    }
    assert_true(seen[0] && seen[1] && seen[2]);
    fl_table_info_t info;
    fl_table_info(t, &info);
    assert_true(info.total_priority == 7.0);
    assert_true(info.max_priority == 4.0);
    fl_table_destroy(t);

    /* alpha 0.5, eps 0.5: priorities 0.5, 3.5, 1.5 -> q = 1, 2, sqrt 2. beta 1 gives
     * w = q_min / q_i = 1, 1/2, 1/sqrt 2. Raising item 0 to 7.5 (q = sqrt 8) moves the
     * minimum to item 2: w = sqrt(2/8) = 1/2, sqrt 2 / 2, 1. */
    t = make_table(8, 0.5, 0.5, 0, 10);
    float prios2[3] = {0.5f, 3.5f, 1.5f};
    uint64_t keys[3];
    insert_items(t, 0, 3, 0.0f, prios2, keys);
    const float before[3] = {1.0f, 0.5f, 0.70710678f}, after[3] = {0.5f, 0.70710678f, 1.0f};
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1) {
            float np = 7.5f;
            size_t applied = 0;
            assert_int_equal(fl_table_update_priorities(t, 1, &keys[0], &np, &applied, NULL), FL_OK);
            assert_int_equal(applied, 1);
        }
        const double total = phase ? sqrt(8.0) + 2.0 + sqrt(2.0) : 1.0 + 2.0 + sqrt(2.0);
        const double q[3] = {phase ? sqrt(8.0) : 1.0, 2.0, sqrt(2.0)};
        for (int c = 0; c < 50; c++) {
            assert_int_equal(fl_table_sample(t, 3, 1.0, sk, probs, w, NULL, NULL, NULL, NULL, NULL, NULL), FL_OK);
            for (int j = 0; j < 3; j++) {
                uint64_t i = fl_table_key_seq(sk[j]);
                assert_true(fabs(probs[j] - q[i] / total) <= 1e-15);
                assert_true(fabsf(w[j] - (phase ? after[i] : before[i])) <= 1e-6f);
                /* the paper's formula, N = 3 */
                double wp = pow(3.0 * probs[j], -1.0) / pow(3.0 * (phase ? sqrt(2.0) : 1.0) / total, -1.0);
                assert_true(fabs((double)w[j] - wp) <= 1e-6);
            }
        }
    }
    fl_table_destroy(t);
}

/* Stratified: with N equal priorities and B = N, each live item comes out exactly once. */
static void test_stratified_batch_covers_every_segment(void **state) {
    (void)state;
    enum { CAP = 10 };
    fl_table_t *t = make_table(CAP, 0.6, 1e-6, 0, 11);
    insert_items(t, 0, 25, 3.0f, NULL, NULL); /* live: 15 .. 24, wrapped in the ring */
    uint64_t sk[CAP];
    for (int c = 0; c < 200; c++) {
        assert_int_equal(fl_table_sample(t, CAP, 0.4, sk, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), FL_OK);
        int seen[CAP] = {0};
        for (int j = 0; j < CAP; j++) {
            uint64_t s = fl_table_key_seq(sk[j]);
            assert_true(s >= 15 && s < 25);
            seen[s - 15]++;
        }
        for (int i = 0; i < CAP; i++) assert_int_equal(seen[i], 1);
    }
    fl_table_destroy(t);
}

static void test_invalid_priority_rejected_nothing_applied(void **state) {
    (void)state;
    fl_table_t *t = make_table(16, 0.6, 1e-6, 0, 12);
    uint8_t obs[5 * 15] = {0}, next[5 * 15] = {0};
    int32_t act[5] = {0};
    float rew[5] = {0}, disc[5] = {0.99f, 0.99f, 0.99f, 0.99f, 0.99f};
    uint64_t keys[5] = {0};
    struct {
        int index;
        float value;
    } bad[] = {{3, NAN}, {0, -1.0f}, {4, INFINITY}, {2, -INFINITY}};
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
        float pr[5] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
        pr[bad[b].index] = bad[b].value;
        fl_err_t err = {0};
        assert_int_equal(fl_table_insert(t, 5, obs, act, rew, disc, next, pr, keys, &err), FL_INVALID_ARGUMENT);
        char want[32];
        snprintf(want, sizeof(want), "priorities[%d]", bad[b].index);
        if (!strstr(err.msg, want)) fail_msg("message '%s' does not name %s", err.msg, want);
        assert_int_equal(err.code, FL_INVALID_ARGUMENT);
    }
    float pr[5] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
    float bad_rew[5] = {0, 0, NAN, 0, 0}, bad_disc[5] = {0.99f, 1.5f, 0.99f, 0.99f, 0.99f};
    fl_err_t err = {0};
    assert_int_equal(fl_table_insert(t, 5, obs, act, bad_rew, disc, next, pr, keys, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "rewards[2]"));
    assert_int_equal(fl_table_insert(t, 5, obs, act, rew, bad_disc, next, pr, keys, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "discounts[1]"));
    assert_int_equal(fl_table_insert(t, 5, NULL, act, rew, disc, next, pr, keys, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "obs"));

    fl_table_info_t info;
    fl_table_info(t, &info);
    assert_int_equal(info.inserted, 0);
    assert_int_equal(info.size, 0);
    assert_true(info.total_priority == 0.0);
    assert_true(info.max_priority == 0.0);
    verify_ok(t);

    /* Updates: one bad value rejects the whole call. */
    assert_int_equal(fl_table_insert(t, 5, obs, act, rew, disc, next, pr, keys, NULL), FL_OK);
    double before[5];
    for (int i = 0; i < 5; i++) assert_int_equal(fl_table_priority(t, keys[i], &before[i], NULL), FL_OK);
    float np[5] = {9.0f, 9.0f, 9.0f, 9.0f, -0.5f};
    size_t applied = 77;
    assert_int_equal(fl_table_update_priorities(t, 5, keys, np, &applied, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "priorities[4]"));
    assert_int_equal(applied, 0);
    for (int i = 0; i < 5; i++) {
        double q;
        assert_int_equal(fl_table_priority(t, keys[i], &q, NULL), FL_OK);
        assert_true(q == before[i]);
    }
    fl_table_info(t, &info);
    assert_int_equal(info.updates_applied, 0);
    assert_int_equal(info.updates_stale, 0);
    assert_true(info.max_priority == 5.0);
    verify_ok(t);
    /* A key given twice: the later entry wins. */
    uint64_t dup[3] = {keys[1], keys[2], keys[1]};
    float dpr[3] = {3.0f, 6.0f, 8.0f};
    assert_int_equal(fl_table_update_priorities(t, 3, dup, dpr, &applied, NULL), FL_OK);
    assert_int_equal(applied, 3);
    double q1, q2;
    assert_int_equal(fl_table_priority(t, keys[1], &q1, NULL), FL_OK);
    assert_int_equal(fl_table_priority(t, keys[2], &q2, NULL), FL_OK);
    assert_true(q1 == pow(8.0 + 1e-6, 0.6));
    assert_true(q2 == pow(6.0 + 1e-6, 0.6));
    /* Zero priority is valid. */
    np[4] = 0.0f;
    assert_int_equal(fl_table_update_priorities(t, 5, keys, np, &applied, NULL), FL_OK);
    assert_int_equal(applied, 5);
    verify_ok(t);
    fl_table_destroy(t);
}

static void test_sample_empty_and_bad_arguments(void **state) {
    (void)state;
    fl_table_t *t = make_table(8, 0.6, 0.0, 0, 13);
    uint64_t sk[4] = {42, 42, 42, 42};
    float w[4] = {-1, -1, -1, -1};
    fl_err_t err = {0};
    assert_int_equal(fl_table_sample(t, 4, 0.4, sk, NULL, w, NULL, NULL, NULL, NULL, NULL, &err),
                     FL_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "empty"));
    for (int j = 0; j < 4; j++) {
        assert_int_equal(sk[j], 42);
        assert_true(w[j] == -1.0f);
    }
    /* eps 0 and all priorities 0: nothing can be sampled. */
    insert_items(t, 0, 3, 0.0f, NULL, NULL);
    assert_int_equal(fl_table_sample(t, 4, 0.4, sk, NULL, w, NULL, NULL, NULL, NULL, NULL, &err),
                     FL_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "priority 0"));
    insert_items(t, 3, 1, 1.0f, NULL, NULL);
    assert_int_equal(fl_table_sample(t, 0, 0.4, sk, NULL, w, NULL, NULL, NULL, NULL, NULL, &err), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_table_sample(t, 4, NAN, sk, NULL, w, NULL, NULL, NULL, NULL, NULL, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "beta"));
    assert_int_equal(fl_table_sample(t, 4, -0.1, sk, NULL, w, NULL, NULL, NULL, NULL, NULL, NULL), FL_INVALID_ARGUMENT);
    /* Only the item with positive priority is ever drawn. */
    assert_int_equal(fl_table_sample(t, 4, 0.4, sk, NULL, w, NULL, NULL, NULL, NULL, NULL, &err), FL_OK);
    for (int j = 0; j < 4; j++) {
        assert_int_equal(fl_table_key_seq(sk[j]), 3);
        assert_true(w[j] == 1.0f);
    }
    fl_table_info_t info;
    fl_table_info(t, &info);
    assert_int_equal(info.sampled, 4);
    fl_table_destroy(t);
}

/* Large batches go through heap scratch space. */
static void test_large_batches(void **state) {
    (void)state;
    enum { CAP = 3000, B = 2000 };
    fl_table_t *t = make_table(CAP, 0.6, 1e-6, 1, 14);
    float *prios = malloc(CAP * sizeof(float));
    uint64_t *keys = malloc(CAP * sizeof(uint64_t));
    assert_true(prios && keys);
    for (int i = 0; i < CAP; i++) prios[i] = (float)(i % 17) * 0.25f;
    insert_items(t, 0, CAP, 0.0f, prios, keys);
    uint64_t *sk = malloc(B * sizeof(uint64_t));
    uint8_t *obs = malloc(B * 15);
    uint8_t want[15];
    assert_true(sk && obs);
    assert_int_equal(fl_table_sample(t, B, 0.4, sk, NULL, NULL, obs, NULL, NULL, NULL, NULL, NULL), FL_OK);
    for (int j = 0; j < B; j++) {
        item_obs(fl_table_key_seq(sk[j]), want, 15);
        assert_memory_equal(obs + j * 15, want, 15);
    }
    for (int i = 0; i < CAP; i++) prios[i] = 1.0f;
    size_t applied = 0;
    assert_int_equal(fl_table_update_priorities(t, CAP, keys, prios, &applied, NULL), FL_OK);
    assert_int_equal(applied, CAP);
    fl_table_info_t info;
    fl_table_info(t, &info);
    assert_true(fabs(info.total_priority - CAP * pow(1.0 + 1e-6, 0.6)) <= 1e-9 * CAP);
    verify_ok(t);
    free(prios);
    free(keys);
    free(sk);
    free(obs);
    fl_table_destroy(t);
}

/* ---- concurrency ---------------------------------------------------------------------- */

#define THREADS 4
#define ITERS 300
#define INS 50
#define SMP 32

typedef struct {
    fl_table_t *table;
    int id;
    uint64_t bad_rows, failures, applied;
} worker_t;

/* Rows are self-describing (int32 obs of 4: thread, counter, checksum, ~counter), so a
 * sampled row torn between two writers would not check out. */
static void make_row(int tid, int32_t counter, int32_t *obs, int32_t *next, int32_t *act, float *rew) {
    obs[0] = tid;
    obs[1] = counter;
    obs[2] = counter * 7 + tid;
    obs[3] = ~counter;
    for (int k = 0; k < 4; k++) next[k] = obs[k] + 1;
    *act = counter ^ tid;
    *rew = (float)(counter % 1000);
}

static void *worker(void *arg) {
    worker_t *w = arg;
    fl_rng_t r;
    fl_rng_init_stream(&r, 77, (uint64_t)w->id);
    int32_t obs[INS * 4], next[INS * 4], act[INS];
    float rew[INS], disc[INS], pr[INS];
    uint64_t sk[SMP];
    int32_t sobs[SMP * 4], snext[SMP * 4], sact[SMP];
    float srew[SMP], sdisc[SMP], sw[SMP], npr[SMP];
    double sprob[SMP];
    int32_t counter = 0;
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < INS; i++) {
            make_row(w->id, counter++, obs + 4 * i, next + 4 * i, &act[i], &rew[i]);
            disc[i] = 0.99f;
            pr[i] = (float)fl_rng_double(&r) * 2.0f;
        }
        if (fl_table_insert(w->table, INS, obs, act, rew, disc, next, pr, NULL, NULL) != FL_OK) w->failures++;
        if (fl_table_sample(w->table, SMP, 0.4, sk, sprob, sw, sobs, sact, srew, sdisc, snext, NULL) != FL_OK) {
            w->failures++;
            continue;
        }
        for (int j = 0; j < SMP; j++) {
            int32_t eo[4], en[4], ea;
            float er;
            make_row(sobs[4 * j], sobs[4 * j + 1], eo, en, &ea, &er);
            if (memcmp(eo, sobs + 4 * j, sizeof(eo)) || memcmp(en, snext + 4 * j, sizeof(en)) || ea != sact[j] ||
                er != srew[j] || sdisc[j] != 0.99f || !(sw[j] > 0.0f && sw[j] <= 1.0f) || !(sprob[j] > 0.0))
                w->bad_rows++;
            npr[j] = (float)fl_rng_double(&r) * 2.0f;
        }
        size_t applied = 0;
        if (fl_table_update_priorities(w->table, SMP, sk, npr, &applied, NULL) != FL_OK) w->failures++;
        w->applied += applied;
        if (it % 100 == 99 && fl_table_verify(w->table, NULL) != FL_OK) w->failures++;
    }
    return NULL;
}

static void test_concurrent_insert_sample_update(void **state) {
    (void)state;
    fl_table_config_t cfg;
    fl_table_config_init(&cfg);
    cfg.capacity = 1000; /* small, so writers constantly overwrite what readers sample */
    cfg.obs.dtype = FL_DTYPE_INT32;
    cfg.obs.rank = 1;
    cfg.obs.shape[0] = 4;
    cfg.seed = 21;
    fl_table_t *t = NULL;
    assert_int_equal(fl_table_create(&cfg, &t, NULL), FL_OK);
    /* Seed the table so that no sampler finds it empty. */
    int32_t o[4], n[4], a;
    float rw, d = 0.99f, p = 1.0f;
    make_row(THREADS, 0, o, n, &a, &rw);
    assert_int_equal(fl_table_insert(t, 1, o, &a, &rw, &d, n, &p, NULL, NULL), FL_OK);

    pthread_t th[THREADS];
    worker_t w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker_t){.table = t, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &w[i]), 0);
    }
    uint64_t applied = 0;
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(w[i].failures, 0);
        assert_int_equal(w[i].bad_rows, 0);
        applied += w[i].applied;
    }
    verify_ok(t);
    fl_table_info_t info;
    fl_table_info(t, &info);
    assert_int_equal(info.inserted, 1 + THREADS * ITERS * INS);
    assert_int_equal(info.size, 1000);
    assert_int_equal(info.sampled, THREADS * ITERS * SMP);
    assert_int_equal(info.updates_applied, applied);
    assert_int_equal(info.updates_applied + info.updates_stale, THREADS * ITERS * SMP);
    assert_true(info.total_priority > 0.0);
    fl_table_destroy(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_validates_config),
        cmocka_unit_test(test_keys_encode_shard_and_sequence),
        cmocka_unit_test(test_fifo_eviction),
        cmocka_unit_test(test_insert_more_than_capacity),
        cmocka_unit_test(test_data_integrity),
        cmocka_unit_test(test_sampling_frequencies),
        cmocka_unit_test(test_alpha_zero_is_uniform),
        cmocka_unit_test(test_importance_weights_by_hand),
        cmocka_unit_test(test_stratified_batch_covers_every_segment),
        cmocka_unit_test(test_invalid_priority_rejected_nothing_applied),
        cmocka_unit_test(test_sample_empty_and_bad_arguments),
        cmocka_unit_test(test_large_batches),
        cmocka_unit_test(test_concurrent_insert_sample_update),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
