/* Tests of compact observation storage (replay/frames.h) through the table: n-step
 * transitions of one stream share their frames, stacked observations store each frame
 * once, zstd-compressed frames come back bit-exactly, chunks are freed as the ring
 * evicts them, checkpoints keep all of it, and samples copied out without the lock stay
 * intact while inserts evict their chunks.
 *
 * The synthetic stream: frame t of a stream is F bytes that depend on (stream, t) only;
 * episodes last EP steps; the observation at step t is the stack of frames
 * max(t - k, episode start) for k = S-1 .. 0 (reset repeats the first frame, as the
 * framestack wrapper does), laid out on the last axis; transition t is (obs_t, a, r, d,
 * obs_{min(t + N, episode end)}), N-step. Item seq i of the table is transition i of the
 * stream, so every sampled key names the exact observation it must carry. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/rng.h"
#include "replay/frames.h"
#include "replay/table.h"

#define NSTEP 3
#define EP 37 /* steps per episode */

typedef struct {
    int h, w, c; /* one frame: (h, w, c) uint8 */
    int stack;
} shape_t;

static size_t frame_bytes(const shape_t *sh) {
    return (size_t)sh->h * sh->w * sh->c;
}
static size_t obs_bytes(const shape_t *sh) {
    return frame_bytes(sh) * (size_t)sh->stack;
}

/* Frame t: a smooth pattern plus a moving block, so that zstd has something to do. */
static void make_frame(const shape_t *sh, uint64_t t, uint8_t *f) {
    for (int y = 0; y < sh->h; y++)
        for (int x = 0; x < sh->w; x++)
            for (int ch = 0; ch < sh->c; ch++) {
                int v = (y * 3 + ch * 50) & 0xff;
                if (((uint64_t)x + t) % (uint64_t)sh->w < 3 && y % 7 < 4) v = (int)((t * 29 + 7) & 0xff);
                f[((size_t)y * sh->w + x) * sh->c + ch] = (uint8_t)v;
            }
}

/* The observation at step t: frames max(t - k, start) stacked on the last axis. */
static void make_obs(const shape_t *sh, uint64_t t, uint8_t *obs, uint8_t *tmp) {
    uint64_t start = t / EP * EP;
    size_t pos = (size_t)sh->h * sh->w, C = (size_t)sh->c, S = (size_t)sh->stack;
    for (size_t k = 0; k < S; k++) {
        uint64_t ft = t >= start + (S - 1 - k) ? t - (S - 1 - k) : start;
        make_frame(sh, ft, tmp);
        for (size_t p = 0; p < pos; p++) memcpy(obs + (p * S + k) * C, tmp + p * C, C);
    }
}

/* The step whose observation transition t bootstraps from. */
static uint64_t next_step(uint64_t t) {
    uint64_t end = t / EP * EP + EP - 1;
    return t + NSTEP < end ? t + NSTEP : end;
}

static fl_table_config_t make_cfg(const shape_t *sh, uint64_t capacity, int zstd) {
    fl_table_config_t cfg;
    fl_table_config_init(&cfg);
    cfg.capacity = capacity;
    cfg.obs.dtype = FL_DTYPE_UINT8;
    cfg.obs.rank = 3;
    cfg.obs.shape[0] = sh->h;
    cfg.obs.shape[1] = sh->w;
    cfg.obs.shape[2] = sh->c * sh->stack;
    cfg.frame_stack = sh->stack;
    cfg.zstd_level = zstd;
    cfg.seed = 11;
    return cfg;
}

/* Inserts transitions [t0, t0 + n) of the stream in one call. */
static void insert_steps(fl_table_t *t, const shape_t *sh, uint64_t t0, size_t n) {
    size_t ob = obs_bytes(sh);
    uint8_t *obs = malloc(n * ob), *next = malloc(n * ob), *tmp = malloc(frame_bytes(sh));
    int32_t *a = malloc(n * sizeof *a);
    float *r = malloc(n * sizeof *r), *d = malloc(n * sizeof *d), *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        uint64_t step = t0 + i;
        make_obs(sh, step, obs + i * ob, tmp);
        make_obs(sh, next_step(step), next + i * ob, tmp);
        a[i] = (int32_t)(step % 5);
        r[i] = (float)(step % 11);
        d[i] = 0.97f;
        p[i] = 0.5f + (float)(step % 13);
    }
    fl_err_t e;
    fl_err_init(&e);
    if (fl_table_insert(t, n, obs, a, r, d, next, p, NULL, &e) != FL_OK) fail_msg("insert: %s", e.msg);
    free(obs);
    free(next);
    free(tmp);
    free(a);
    free(r);
    free(d);
    free(p);
}

/* Samples B items and checks every column against the stream; returns mismatches. */
static int check_sample(fl_table_t *t, const shape_t *sh, size_t B) {
    size_t ob = obs_bytes(sh);
    uint64_t *keys = malloc(B * sizeof *keys);
    uint8_t *obs = malloc(B * ob), *next = malloc(B * ob), *want = malloc(ob), *tmp = malloc(frame_bytes(sh));
    int32_t *a = malloc(B * sizeof *a);
    float *r = malloc(B * sizeof *r), *d = malloc(B * sizeof *d);
    fl_err_t e;
    fl_err_init(&e);
    if (fl_table_sample(t, B, 0.4, keys, NULL, NULL, obs, a, r, d, next, &e) != FL_OK) fail_msg("sample: %s", e.msg);
    int bad = 0;
    for (size_t j = 0; j < B; j++) {
        uint64_t step = fl_table_key_seq(keys[j]);
        make_obs(sh, step, want, tmp);
        bad += memcmp(obs + j * ob, want, ob) != 0;
        make_obs(sh, next_step(step), want, tmp);
        bad += memcmp(next + j * ob, want, ob) != 0;
        bad += a[j] != (int32_t)(step % 5) || r[j] != (float)(step % 11);
    }
    free(keys);
    free(obs);
    free(next);
    free(want);
    free(tmp);
    free(a);
    free(r);
    free(d);
    return bad;
}

static fl_table_info_t info_of(fl_table_t *t) {
    fl_table_info_t i;
    fl_table_info(t, &i);
    return i;
}

static void assert_verified(fl_table_t *t) {
    fl_err_t e;
    fl_err_init(&e);
    if (fl_table_verify(t, &e) != FL_OK) fail_msg("verify: %s", e.msg);
}

/* Without stacking, s_{t+3} of one transition is s_t of another: a batch of 50 keeps
 * about 53 observations, not 100. */
static void test_shared_next_obs(void **state) {
    (void)state;
    shape_t sh = {4, 4, 1, 1};
    fl_table_config_t cfg = make_cfg(&sh, 10000, 0);
    fl_table_t *t = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_table_create(&cfg, &t, &e), FL_OK);
    for (uint64_t t0 = 0; t0 < 5000; t0 += 50) insert_steps(t, &sh, t0, 50);
    fl_table_info_t in = info_of(t);
    assert_int_equal(in.chunks, 100);
    /* per batch: 50 observations + those past its end that next_obs reach (<= 3), fewer
     * at episode ends (the last observation repeats) */
    assert_true(in.frames <= 100 * 53);
    assert_true(in.frames >= 100 * 50);
    assert_int_equal(check_sample(t, &sh, 512), 0);
    assert_verified(t);
    fl_table_destroy(t);
}

/* Stacked observations (4 frames on the last axis): each frame once per batch. */
static void test_stacked_frames(void **state) {
    (void)state;
    for (int c = 1; c <= 2; c++) {
        shape_t sh = {12, 10, c, 4};
        fl_table_config_t cfg = make_cfg(&sh, 4000, 0);
        fl_table_t *t = NULL;
        fl_err_t e;
        fl_err_init(&e);
        assert_int_equal(fl_table_create(&cfg, &t, &e), FL_OK);
        for (uint64_t t0 = 0; t0 < 3000; t0 += 100) insert_steps(t, &sh, t0, 100);
        fl_table_info_t in = info_of(t);
        /* naive: 8 frames per transition; here <= (100 + 3 + 3) per 100 */
        assert_true(in.frames <= 30 * 106);
        double per_item = (double)in.frame_bytes / (double)in.size;
        assert_true(per_item <= 1.2 * (double)frame_bytes(&sh));
        for (int k = 0; k < 4; k++) assert_int_equal(check_sample(t, &sh, 256), 0);
        assert_verified(t);
        fl_table_destroy(t);
    }
}

/* fl_table_bytes_estimate (what `fleet run` plans a replay's memory with) against a full
 * table's storage_bytes: stacked 84x84 frames and unstacked observations, inserted 25 or
 * 50 transitions of one stream at a time. */
static void test_bytes_estimate(void **state) {
    (void)state;
    const struct {
        shape_t sh;
        int per_insert;
    } cases[] = {{{84, 84, 1, 4}, 25}, {{84, 84, 1, 4}, 50}, {{10, 10, 4, 1}, 50}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const shape_t *sh = &cases[i].sh;
        const uint64_t cap = 2000;
        fl_table_config_t cfg = make_cfg(sh, cap, 0);
        fl_table_t *t = NULL;
        fl_err_t e;
        fl_err_init(&e);
        assert_int_equal(fl_table_create(&cfg, &t, &e), FL_OK);
        for (uint64_t t0 = 0; t0 < 2 * cap; t0 += (uint64_t)cases[i].per_insert)
            insert_steps(t, sh, t0, (size_t)cases[i].per_insert);
        fl_table_info_t in = info_of(t);
        assert_int_equal(in.size, cap);
        double want = (double)fl_table_bytes_estimate(cap, obs_bytes(sh), sh->stack, cases[i].per_insert, NSTEP);
        double got = (double)in.storage_bytes;
        if (want < 0.85 * got || want > 1.25 * got)
            fail_msg("case %zu: estimate %.0f bytes, a full table holds %.0f", i, want, got);
        fl_table_destroy(t);
    }
}

/* zstd: the same observations come back; compressible frames take less room. */
static void test_zstd(void **state) {
    (void)state;
    shape_t sh = {21, 21, 1, 4};
    fl_table_t *raw = NULL, *z = NULL;
    fl_err_t e;
    fl_err_init(&e);
    fl_table_config_t c1 = make_cfg(&sh, 3000, 0), c2 = make_cfg(&sh, 3000, 3);
    assert_int_equal(fl_table_create(&c1, &raw, &e), FL_OK);
    assert_int_equal(fl_table_create(&c2, &z, &e), FL_OK);
    for (uint64_t t0 = 0; t0 < 2000; t0 += 50) {
        insert_steps(raw, &sh, t0, 50);
        insert_steps(z, &sh, t0, 50);
    }
    fl_table_info_t ir = info_of(raw), iz = info_of(z);
    assert_int_equal(ir.frames, iz.frames);
    assert_true(iz.frame_bytes * 2 < ir.frame_bytes);
    for (int k = 0; k < 4; k++) assert_int_equal(check_sample(z, &sh, 300), 0);
    assert_verified(z);
    fl_table_destroy(raw);
    fl_table_destroy(z);
}

/* The ring evicts whole chunks: the counts stay bounded and verify holds throughout,
 * also when one call is larger than the capacity or wraps the ring. */
static void test_eviction(void **state) {
    (void)state;
    shape_t sh = {3, 3, 1, 2};
    fl_table_config_t cfg = make_cfg(&sh, 97, 0);
    fl_table_t *t = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_table_create(&cfg, &t, &e), FL_OK);
    uint64_t step = 0;
    const size_t sizes[] = {10, 33, 1, 50, 96, 97, 98, 250, 7, 64};
    for (int round = 0; round < 30; round++) {
        size_t n = sizes[round % 10];
        insert_steps(t, &sh, step, n);
        step += n;
        assert_verified(t);
        fl_table_info_t in = info_of(t);
        assert_true(in.chunks <= 97);
        assert_int_equal(check_sample(t, &sh, 64), 0);
    }
    fl_table_destroy(t);
}

/* Checkpoints keep chunks (raw and compressed): the loaded table samples the same. */
static void test_checkpoint(void **state) {
    (void)state;
    char dir[] = "/tmp/fl_frames_test_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[96];
    snprintf(path, sizeof path, "%s/t.ckpt", dir);
    for (int zstd = 0; zstd <= 1; zstd++) {
        shape_t sh = {8, 8, 1, 4};
        fl_table_config_t cfg = make_cfg(&sh, 500, zstd);
        fl_table_t *t = NULL, *u = NULL;
        fl_err_t e;
        fl_err_init(&e);
        assert_int_equal(fl_table_create(&cfg, &t, &e), FL_OK);
        for (uint64_t t0 = 0; t0 < 730; t0 += 73) insert_steps(t, &sh, t0, 73); /* wraps */
        assert_int_equal(fl_table_save(t, path, NULL, &e), FL_OK);
        if (fl_table_load(path, &cfg, &u, &e) != FL_OK) fail_msg("load: %s", e.msg);
        fl_table_info_t a = info_of(t), b = info_of(u);
        assert_int_equal(a.chunks, b.chunks);
        assert_int_equal(a.frames, b.frames);
        assert_int_equal(a.frame_bytes, b.frame_bytes);
        assert_verified(u);
        assert_int_equal(check_sample(u, &sh, 200), 0);
        /* another zstd_level is not a mismatch: chunks say whether they are compressed, and
         * a table may hold both kinds (found by the checkpoint fuzzer: a compressed chunk
         * in a table configured without zstd was once read without a decompressor) */
        fl_table_config_t flipped = cfg;
        flipped.zstd_level = zstd ? 0 : 5;
        fl_table_t *w = NULL;
        if (fl_table_load(path, &flipped, &w, &e) != FL_OK) fail_msg("load with zstd flipped: %s", e.msg);
        assert_int_equal(fl_table_config(w)->zstd_level, flipped.zstd_level);
        for (int k = 0; k < 3; k++) assert_int_equal(check_sample(w, &sh, 8), 0);   /* under the lock */
        for (int k = 0; k < 3; k++) assert_int_equal(check_sample(w, &sh, 200), 0); /* copied after it */
        insert_steps(w, &sh, 730, 73); /* new chunks of the other kind next to the loaded ones */
        assert_verified(w);
        for (int k = 0; k < 3; k++) assert_int_equal(check_sample(w, &sh, 8), 0);
        fl_table_destroy(w);
        /* another frame_stack is a signature mismatch */
        fl_table_config_t other = cfg;
        other.frame_stack = 2;
        fl_table_t *v = NULL;
        assert_int_equal(fl_table_load(path, &other, &v, &e), FL_INVALID_ARGUMENT);
        assert_non_null(strstr(e.msg, "frame_stack"));
        fl_table_destroy(t);
        fl_table_destroy(u);
    }
    unlink(path);
    rmdir(dir);
}

/* Bad layouts are refused at create, naming the value. */
static void test_bad_config(void **state) {
    (void)state;
    shape_t sh = {4, 4, 3, 1};
    fl_table_config_t cfg = make_cfg(&sh, 10, 0);
    fl_table_t *t = NULL;
    fl_err_t e;
    fl_err_init(&e);
    cfg.frame_stack = 2; /* last axis 3 */
    assert_int_equal(fl_table_create(&cfg, &t, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "frame_stack 2"));
    cfg.frame_stack = 0;
    assert_int_equal(fl_table_create(&cfg, &t, &e), FL_INVALID_ARGUMENT);
    cfg.frame_stack = 1;
    cfg.zstd_level = 20;
    assert_int_equal(fl_table_create(&cfg, &t, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "zstd_level 20"));
    assert_null(t);
}

/* Large samples are copied out after the lock is released; an inserter evicting their
 * chunks meanwhile must not change what they read. */
typedef struct {
    fl_table_t *t;
    const shape_t *sh;
    _Atomic int stop;
} race_t;

static void *inserter(void *arg) {
    race_t *r = arg;
    uint64_t step = 2000;
    while (!r->stop) {
        insert_steps(r->t, r->sh, step, 40);
        step += 40;
    }
    return NULL;
}

static void test_unlocked_copy_race(void **state) {
    (void)state;
    for (int zstd = 0; zstd <= 1; zstd++) {
        shape_t sh = {16, 16, 1, 4}; /* 1 KiB observations: a batch of 64 is copied unlocked */
        fl_table_config_t cfg = make_cfg(&sh, 300, zstd);
        fl_table_t *t = NULL;
        fl_err_t e;
        fl_err_init(&e);
        assert_int_equal(fl_table_create(&cfg, &t, &e), FL_OK);
        insert_steps(t, &sh, 0, 2000);
        race_t r = {t, &sh, 0};
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, inserter, &r), 0);
        int bad = 0;
        for (int k = 0; k < 150; k++) bad += check_sample(t, &sh, 64);
        r.stop = 1;
        pthread_join(th, NULL);
        assert_int_equal(bad, 0);
        assert_verified(t);
        fl_table_destroy(t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_next_obs),
        cmocka_unit_test(test_stacked_frames),
        cmocka_unit_test(test_zstd),
        cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_checkpoint),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_unlocked_copy_race),
        cmocka_unit_test(test_bytes_estimate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
