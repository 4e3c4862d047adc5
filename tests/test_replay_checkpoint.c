/* Tests of replay checkpoints: fl_table_save / fl_table_load (bit-exact roundtrips of
 * tables of every selector, with removed items and a wrapped ring; sampling after a load
 * continues exactly as the saved table would have; malformed files are refused with a
 * message naming what is wrong) and the service's Checkpoint call, restore and periodic
 * checkpoints over a real gRPC server on 127.0.0.1 port 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/clock.h"
#include "common/rng.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "replay/server.h"
#include "replay/table.h"
#include "tests/replay_fixture.h"

#define OBS_H 3
#define OBS_W 5
#define OBS_BYTES (OBS_H * OBS_W)

static char g_dir[64];

static int setup_dir(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fl_ckpt_test_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_in_dir(char *out, size_t len, const char *name) {
    snprintf(out, len, "%s/%s", g_dir, name);
}

static fl_table_config_t make_cfg(uint64_t capacity, fl_selector sel, int64_t mts) {
    fl_table_config_t c;
    fl_table_config_init(&c);
    c.capacity = capacity;
    c.obs.dtype = FL_DTYPE_UINT8;
    c.obs.rank = 2;
    c.obs.shape[0] = OBS_H;
    c.obs.shape[1] = OBS_W;
    c.alpha = 0.6;
    c.priority_eps = 1e-3;
    c.shard_id = 3;
    c.seed = 1234;
    c.selector = sel;
    c.max_times_sampled = mts;
    c.rebuild_every = 50;
    return c;
}

/* Inserts n items numbered from seq with priorities drawn from rng (some 0). */
static void insert_n(fl_table_t *t, fl_rng_t *rng, uint64_t seq, size_t n) {
    uint8_t *obs = malloc(n * OBS_BYTES), *next = malloc(n * OBS_BYTES);
    int32_t *a = malloc(n * sizeof *a);
    float *r = malloc(n * sizeof *r), *d = malloc(n * sizeof *d), *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        for (size_t b = 0; b < OBS_BYTES; b++) {
            obs[i * OBS_BYTES + b] = (uint8_t)(seq + i + b);
            next[i * OBS_BYTES + b] = (uint8_t)(3 * (seq + i) + b);
        }
        a[i] = (int32_t)((seq + i) % 7);
        r[i] = (float)(seq + i) * 0.25f - 3.0f;
        d[i] = (seq + i) % 4 == 0 ? 0.0f : 0.99f;
        p[i] = fl_rng_below(rng, 10) == 0 ? 0.0f : (float)fl_rng_uniform(rng, 0.0, 5.0);
    }
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_table_insert(t, n, obs, a, r, d, next, p, NULL, &e), FL_OK);
    free(obs);
    free(next);
    free(a);
    free(r);
    free(d);
    free(p);
}

/* Fills a table with a history: batches of varied size (wrapping the ring when
 * `wrap`), priority updates (stale ones too), samples (which remove items with
 * max_times_sampled), and a rebuild. */
static fl_table_t *build_table(const fl_table_config_t *cfg, int wrap) {
    fl_table_t *t = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_table_create(cfg, &t, &e), FL_OK);
    fl_rng_t rng;
    fl_rng_init(&rng, 99);
    uint64_t seq = 0;
    size_t total = wrap ? 3 * cfg->capacity + 5 : cfg->capacity / 2;
    while (seq < total) {
        size_t n = 1 + fl_rng_below(&rng, 9);
        if (seq + n > total) n = total - seq;
        insert_n(t, &rng, seq, n);
        seq += n;
        /* priority updates on recent and on evicted keys */
        uint64_t keys[6];
        float pr[6];
        for (int i = 0; i < 6; i++) {
            keys[i] = fl_table_key_make(cfg->shard_id, fl_rng_below(&rng, seq));
            pr[i] = i == 0 ? 0.0f : (float)fl_rng_uniform(&rng, 0.0, 3.0);
        }
        assert_int_equal(fl_table_update_priorities(t, 6, keys, pr, NULL, &e), FL_OK);
        uint64_t sk[4];
        fl_status s =
            fl_table_sample(t, 1 + fl_rng_below(&rng, 4), 0.4, sk, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &e);
        assert_true(s == FL_OK || s == FL_FAILED_PRECONDITION);
    }
    fl_table_rebuild(t);
    assert_int_equal(fl_table_verify(t, &e), FL_OK);
    return t;
}

static void assert_info_equal(fl_table_t *a, fl_table_t *b) {
    fl_table_info_t ia, ib;
    fl_table_info(a, &ia);
    fl_table_info(b, &ib);
    assert_int_equal(ia.size, ib.size);
    assert_int_equal(ia.capacity, ib.capacity);
    assert_int_equal(ia.inserted, ib.inserted);
    assert_int_equal(ia.sampled, ib.sampled);
    assert_int_equal(ia.removed, ib.removed);
    assert_int_equal(ia.updates_applied, ib.updates_applied);
    assert_int_equal(ia.updates_stale, ib.updates_stale);
    assert_int_equal(ia.rebuilds, ib.rebuilds);
    assert_memory_equal(&ia.total_priority, &ib.total_priority, sizeof(double));
    assert_memory_equal(&ia.max_priority, &ib.max_priority, sizeof(double));
}

/* Every key of the last two windows is live in both or in neither, with the same
 * priority bits. */
static void assert_keys_equal(fl_table_t *a, fl_table_t *b) {
    fl_table_info_t ia;
    fl_table_info(a, &ia);
    const fl_table_config_t *c = fl_table_config(a);
    uint64_t lo = ia.inserted > 2 * c->capacity ? ia.inserted - 2 * c->capacity : 0;
    fl_err_t e;
    fl_err_init(&e);
    for (uint64_t seq = lo; seq < ia.inserted + 2; seq++) {
        uint64_t key = fl_table_key_make(c->shard_id, seq);
        double pa = -1, pb = -1;
        fl_status sa = fl_table_priority(a, key, &pa, &e), sb = fl_table_priority(b, key, &pb, &e);
        assert_int_equal(sa, sb);
        assert_memory_equal(&pa, &pb, sizeof(double));
    }
}

/* Samples, updates and inserts the same way on both tables and checks every output. */
static void assert_same_future(fl_table_t *a, fl_table_t *b, int rounds) {
    fl_rng_t ra, rb;
    fl_rng_init(&ra, 5);
    fl_rng_init(&rb, 5);
    fl_err_t ea, eb;
    fl_err_init(&ea);
    fl_err_init(&eb);
    enum { B = 4 };
    for (int round = 0; round < rounds; round++) {
        uint64_t ka[B], kb[B];
        double pa[B], pb[B];
        float wa[B], wb[B], rwa[B], rwb[B], da[B], db[B];
        int32_t aa[B], ab[B];
        uint8_t oa[B * OBS_BYTES], ob[B * OBS_BYTES], na[B * OBS_BYTES], nb[B * OBS_BYTES];
        fl_status sa = fl_table_sample(a, B, 0.4, ka, pa, wa, oa, aa, rwa, da, na, &ea);
        fl_status sb = fl_table_sample(b, B, 0.4, kb, pb, wb, ob, ab, rwb, db, nb, &eb);
        assert_int_equal(sa, sb);
        if (sa == FL_OK) {
            assert_memory_equal(ka, kb, sizeof ka);
            assert_memory_equal(pa, pb, sizeof pa);
            assert_memory_equal(wa, wb, sizeof wa);
            assert_memory_equal(aa, ab, sizeof aa);
            assert_memory_equal(rwa, rwb, sizeof rwa);
            assert_memory_equal(da, db, sizeof da);
            assert_memory_equal(oa, ob, sizeof oa);
            assert_memory_equal(na, nb, sizeof na);
            float np[B];
            for (int j = 0; j < B; j++) np[j] = (float)j * 0.5f;
            assert_int_equal(fl_table_update_priorities(a, B, ka, np, NULL, &ea), FL_OK);
            assert_int_equal(fl_table_update_priorities(b, B, kb, np, NULL, &eb), FL_OK);
        } else {
            assert_string_equal(ea.msg, eb.msg);
        }
        if (round % 3 == 2) {
            fl_table_info_t ia;
            fl_table_info(a, &ia);
            insert_n(a, &ra, ia.inserted, 3);
            insert_n(b, &rb, ia.inserted, 3);
        }
    }
    assert_info_equal(a, b);
    assert_int_equal(fl_table_verify(a, &ea), FL_OK);
    assert_int_equal(fl_table_verify(b, &eb), FL_OK);
}

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void write_all(const char *path, const void *b, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, len, f), len);
    fclose(f);
}

/* ---- roundtrips --------------------------------------------------------------------- */

static void roundtrip(fl_selector sel, int64_t mts, uint64_t capacity, int wrap) {
    fl_table_config_t cfg = make_cfg(capacity, sel, mts);
    fl_table_t *t = build_table(&cfg, wrap);
    char p1[128], p2[128];
    path_in_dir(p1, sizeof p1, "a.ckpt");
    path_in_dir(p2, sizeof p2, "b.ckpt");
    fl_err_t e;
    fl_err_init(&e);
    fl_table_save_info_t si;
    assert_int_equal(fl_table_save(t, p1, &si, &e), FL_OK);
    fl_table_info_t it;
    fl_table_info(t, &it);
    assert_int_equal(si.items, it.size);
    if (mts > 0 && wrap) assert_true(it.removed > 0); /* removed items are part of the state */
    if (wrap) assert_true(it.inserted > capacity);
    struct stat st;
    assert_int_equal(stat(p1, &st), 0);
    assert_int_equal(si.bytes, (uint64_t)st.st_size);

    fl_table_t *u = NULL;
    if (fl_table_load(p1, &cfg, &u, &e) != FL_OK) fail_msg("load: %s", e.msg);
    assert_int_equal(fl_table_verify(u, &e), FL_OK);
    assert_info_equal(t, u);
    assert_keys_equal(t, u);
    assert_int_equal(fl_table_config(u)->seed, cfg.seed);

    /* Saving the loaded table gives the same bytes. */
    assert_int_equal(fl_table_save(u, p2, NULL, &e), FL_OK);
    size_t l1, l2;
    unsigned char *b1 = read_all(p1, &l1), *b2 = read_all(p2, &l2);
    assert_int_equal(l1, l2);
    assert_memory_equal(b1, b2, l1);
    free(b1);
    free(b2);

    /* Loading without an expected config works too. */
    fl_table_t *v = NULL;
    assert_int_equal(fl_table_load(p2, NULL, &v, &e), FL_OK);
    assert_info_equal(t, v);
    fl_table_destroy(v);

    assert_same_future(t, u, 12);
    fl_table_destroy(t);
    fl_table_destroy(u);
}

static void test_roundtrip_prioritized(void **state) {
    (void)state;
    roundtrip(FL_SELECTOR_PRIORITIZED, 0, 37, 1);
    roundtrip(FL_SELECTOR_PRIORITIZED, 0, 100, 0);
    roundtrip(FL_SELECTOR_PRIORITIZED, 2, 37, 1);
    roundtrip(FL_SELECTOR_PRIORITIZED, 1, 130, 1);
}

static void test_roundtrip_uniform(void **state) {
    (void)state;
    roundtrip(FL_SELECTOR_UNIFORM, 0, 37, 1);
    roundtrip(FL_SELECTOR_UNIFORM, 0, 64, 0);
    roundtrip(FL_SELECTOR_UNIFORM, 3, 37, 1);
    roundtrip(FL_SELECTOR_UNIFORM, 1, 65, 1);
}

static void test_roundtrip_fifo(void **state) {
    (void)state;
    roundtrip(FL_SELECTOR_FIFO, 0, 37, 1);
    roundtrip(FL_SELECTOR_FIFO, 1, 37, 1);
    roundtrip(FL_SELECTOR_FIFO, 2, 50, 0);
}

static void test_roundtrip_empty(void **state) {
    (void)state;
    fl_table_config_t cfg = make_cfg(10, FL_SELECTOR_UNIFORM, 1);
    fl_table_t *t = NULL, *u = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_table_create(&cfg, &t, &e), FL_OK);
    char p[128];
    path_in_dir(p, sizeof p, "empty.ckpt");
    fl_table_save_info_t si;
    assert_int_equal(fl_table_save(t, p, &si, &e), FL_OK);
    assert_int_equal(si.items, 0);
    assert_int_equal(si.bytes, FL_TABLE_CKPT_HEADER_BYTES + 8 + 8 + 4); /* chunk count, extra length, CRC */
    assert_int_equal(fl_table_load(p, &cfg, &u, &e), FL_OK);
    assert_info_equal(t, u);
    assert_same_future(t, u, 6);
    fl_table_destroy(t);
    fl_table_destroy(u);
}

/* A snapshot written with an extra section gives the section back, bit-exactly, and the
 * table as fl_table_save would; a changed extra byte fails the CRC. */
static void test_snapshot_extra(void **state) {
    (void)state;
    fl_table_config_t cfg = make_cfg(64, FL_SELECTOR_PRIORITIZED, 0);
    fl_table_t *t = NULL, *u = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_table_create(&cfg, &t, &e), FL_OK);
    fl_rng_t rng;
    fl_rng_init(&rng, 7);
    insert_n(t, &rng, 0, 100);
    fl_table_snapshot_t *sn = NULL;
    assert_int_equal(fl_table_snapshot_take(t, &sn, &e), FL_OK);
    insert_n(t, &rng, 100, 10); /* after the snapshot: not in the file */
    unsigned char extra[1000];
    for (size_t i = 0; i < sizeof extra; i++) extra[i] = (unsigned char)(i * 37 + 11);
    char p[128];
    path_in_dir(p, sizeof p, "extra.ckpt");
    fl_table_save_info_t si;
    assert_int_equal(fl_table_snapshot_write(sn, p, extra, sizeof extra, &si, &e), FL_OK);
    fl_table_snapshot_free(sn);
    void *got = NULL;
    size_t got_len = 0;
    if (fl_table_load_extra(p, &cfg, &u, &got, &got_len, &e) != FL_OK) fail_msg("load: %s", e.msg);
    assert_int_equal(got_len, sizeof extra);
    assert_memory_equal(got, extra, sizeof extra);
    free(got);
    fl_table_info_t iu;
    fl_table_info(u, &iu);
    assert_int_equal(iu.inserted, 100);
    fl_table_destroy(u);
    /* too large an extra section is refused before anything is written */
    assert_int_equal(fl_table_snapshot_take(t, &sn, &e), FL_OK);
    assert_int_equal(fl_table_snapshot_write(sn, p, extra, (size_t)FL_TABLE_CKPT_MAX_EXTRA + 1, NULL, &e),
                     FL_INVALID_ARGUMENT);
    fl_table_snapshot_free(sn);
    /* a flipped byte in the section */
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)(si.bytes - 4 - 500), SEEK_SET), 0);
    fputc(0x5a ^ extra[sizeof extra - 500], f);
    fclose(f);
    assert_int_equal(fl_table_load_extra(p, &cfg, &u, &got, &got_len, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "CRC"));
    assert_null(got);
    fl_table_destroy(t);
}

/* ---- malformed files ---------------------------------------------------------------- */

/* Loads `bytes` written to a file and expects `code` with every fragment in err. */
static void expect_load_error(const void *bytes, size_t len, const fl_table_config_t *cfg, fl_status code,
                              const char *frag1, const char *frag2) {
    char p[128];
    path_in_dir(p, sizeof p, "bad.ckpt");
    write_all(p, bytes, len);
    fl_table_t *u = (fl_table_t *)(uintptr_t)1;
    fl_err_t e;
    fl_err_init(&e);
    fl_status s = fl_table_load(p, cfg, &u, &e);
    if (s != code) {
        fl_table_destroy(u);
        fail_msg("load of %zu bytes (expecting %s): status %d, expected %d: %s", len, frag1 ? frag1 : "", (int)s,
                 (int)code, e.msg);
    }
    assert_null(u);
    assert_non_null(strstr(e.msg, p));
    if (frag1 && !strstr(e.msg, frag1)) fail_msg("'%s' lacks '%s'", e.msg, frag1);
    if (frag2 && !strstr(e.msg, frag2)) fail_msg("'%s' lacks '%s'", e.msg, frag2);
}

static void put32(unsigned char *b, size_t at, uint32_t v) {
    memcpy(b + at, &v, 4);
}

/* Recomputes the trailing CRC after an edit, so that later checks are reached. */
static void fix_crc(unsigned char *b, size_t len) {
    uint32_t c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, (uInt)(len - 4));
    memcpy(b + len - 4, &c, 4);
}

static void test_malformed(void **state) {
    (void)state;
    fl_table_config_t cfg = make_cfg(37, FL_SELECTOR_PRIORITIZED, 2);
    fl_table_t *t = build_table(&cfg, 1);
    char p[128];
    path_in_dir(p, sizeof p, "good.ckpt");
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_table_save(t, p, NULL, &e), FL_OK);
    size_t len;
    unsigned char *good = read_all(p, &len);
    unsigned char *b = malloc(len);
    const size_t H = FL_TABLE_CKPT_HEADER_BYTES;

    /* Missing file. */
    fl_table_t *u = NULL;
    char missing[160];
    path_in_dir(missing, sizeof missing, "nope.ckpt");
    assert_int_equal(fl_table_load(missing, &cfg, &u, &e), FL_NOT_FOUND);
    assert_null(u);
    assert_non_null(strstr(e.msg, "nope.ckpt"));

    /* Truncated at several offsets. */
    const size_t cuts[] = {0, 5, 15, 16, 100, H - 1, H, H + 1, H + 40, len / 2, len - 5, len - 4, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        const char *frag = cuts[i] < 16 ? "too short" : "truncated";
        expect_load_error(good, cuts[i], &cfg, FL_INVALID_ARGUMENT, frag, NULL);
    }
    /* A trailing byte. */
    unsigned char *longer = malloc(len + 1);
    memcpy(longer, good, len);
    longer[len] = 0;
    expect_load_error(longer, len + 1, &cfg, FL_INVALID_ARGUMENT, "extra section", NULL);
    free(longer);

    /* Bad magic, wrong version, wrong header length. */
    memcpy(b, good, len);
    b[1] ^= 0x20;
    expect_load_error(b, len, &cfg, FL_INVALID_ARGUMENT, "bad magic", NULL);
    memcpy(b, good, len);
    put32(b, 8, FL_TABLE_CKPT_VERSION + 1);
    {
        char f1[32], f2[32];
        snprintf(f1, sizeof f1, "format version %u", FL_TABLE_CKPT_VERSION + 1);
        snprintf(f2, sizeof f2, "reads version %u", FL_TABLE_CKPT_VERSION);
        expect_load_error(b, len, &cfg, FL_INVALID_ARGUMENT, f1, f2);
    }
    memcpy(b, good, len);
    put32(b, 12, H + 8);
    expect_load_error(b, len, &cfg, FL_INVALID_ARGUMENT, "header length", NULL);

    /* Signature mismatch against the shard's configuration, naming both values. */
    fl_table_config_t other = cfg;
    other.capacity = 40;
    expect_load_error(good, len, &other, FL_INVALID_ARGUMENT, "capacity 37 in the file", "40 configured");
    other = cfg;
    other.obs.shape[1] = 6;
    expect_load_error(good, len, &other, FL_INVALID_ARGUMENT, "obs_shape 5 in the file", "6 configured");
    other = cfg;
    other.obs.dtype = FL_DTYPE_FLOAT32;
    expect_load_error(good, len, &other, FL_INVALID_ARGUMENT, "obs_dtype", "configured");
    other = cfg;
    other.selector = FL_SELECTOR_UNIFORM;
    expect_load_error(good, len, &other, FL_INVALID_ARGUMENT, "selector prioritized in the file", "uniform configured");
    other = cfg;
    other.max_times_sampled = 0;
    expect_load_error(good, len, &other, FL_INVALID_ARGUMENT, "max_times_sampled 2 in the file", "0 configured");
    other = cfg;
    other.alpha = 0.5;
    expect_load_error(good, len, &other, FL_INVALID_ARGUMENT, "alpha 0.59", "0.5 configured");
    other = cfg;
    other.shard_id = 4;
    expect_load_error(good, len, &other, FL_INVALID_ARGUMENT, "shard_id 3 in the file", "4 configured");
    /* A different rebuild_every or seed is not a mismatch. */
    other = cfg;
    other.rebuild_every = 7;
    other.seed = 1;
    assert_int_equal(fl_table_load(p, &other, &u, &e), FL_OK);
    assert_int_equal(fl_table_config(u)->rebuild_every, 7);
    assert_int_equal(fl_table_config(u)->seed, cfg.seed);
    fl_table_destroy(u);

    /* Corruption: a payload byte, a header byte, the CRC itself. */
    memcpy(b, good, len);
    b[H + 17] ^= 0x01;
    expect_load_error(b, len, &cfg, FL_INVALID_ARGUMENT, "CRC-32", "corrupted");
    memcpy(b, good, len);
    b[H - 3] ^= 0x80; /* the RNG state */
    expect_load_error(b, len, &cfg, FL_INVALID_ARGUMENT, "CRC-32", NULL);
    memcpy(b, good, len);
    b[len - 1] ^= 0xff;
    expect_load_error(b, len, &cfg, FL_INVALID_ARGUMENT, "CRC-32", NULL);

    /* A valid CRC over inconsistent contents: the header's size (offset 120) off by one,
     * a priority made negative, the configuration invalid. */
    memcpy(b, good, len);
    uint64_t size;
    memcpy(&size, b + 120, 8);
    size -= 1;
    memcpy(b + 120, &size, 8);
    fix_crc(b, len);
    expect_load_error(b, len, &cfg, FL_INVALID_ARGUMENT, "size", NULL);
    memcpy(b, good, len);
    size_t rows = 37 * (16 + 8 + 2 * 2); /* head, chunk number, two frame indices */
    double neg = -1.0;
    memcpy(b + H + rows, &neg, 8);
    fix_crc(b, len);
    expect_load_error(b, len, &cfg, FL_INVALID_ARGUMENT, "priority", NULL);
    memcpy(b, good, len);
    put32(b, 24, 9); /* selector */
    fix_crc(b, len);
    expect_load_error(b, len, NULL, FL_INVALID_ARGUMENT, "bad configuration", "selector");

    free(b);
    free(good);
    fl_table_destroy(t);
}

static void test_save_errors(void **state) {
    (void)state;
    fl_table_config_t cfg = make_cfg(8, FL_SELECTOR_PRIORITIZED, 0);
    fl_table_t *t = build_table(&cfg, 1);
    fl_err_t e;
    fl_err_init(&e);
    char p[160];
    path_in_dir(p, sizeof p, "no/such/dir/x.ckpt");
    assert_int_equal(fl_table_save(t, p, NULL, &e), FL_INTERNAL);
    assert_non_null(strstr(e.msg, "x.ckpt"));
    assert_int_equal(fl_table_save(t, "", NULL, &e), FL_INVALID_ARGUMENT);
    /* Overwriting an existing checkpoint replaces it and leaves no temporary file. */
    path_in_dir(p, sizeof p, "over.ckpt");
    write_all(p, "old", 3);
    assert_int_equal(fl_table_save(t, p, NULL, &e), FL_OK);
    fl_table_t *u = NULL;
    assert_int_equal(fl_table_load(p, &cfg, &u, &e), FL_OK);
    fl_table_destroy(u);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q tmp", g_dir);
    assert_int_not_equal(system(cmd), 0);
    fl_table_destroy(t);
}

/* ---- the service -------------------------------------------------------------------- */

static const fl_obs_spec_t SERVICE_OBS = {FL_DTYPE_UINT8, 2, {OBS_H, OBS_W}};

static fl_replay_service_opts_t service_opts(void) {
    fl_replay_service_opts_t o = replay_fixture_opts(SERVICE_OBS, 4, 50, 1);
    o.shards = 1;
    o.max_times_sampled = 3;
    o.seed = 11;
    o.checkpoint_dir = g_dir;
    return o;
}

static Fleet__ReplayInfo *rpc_info(fl_rpc_channel_t *ch) {
    fl_err_t e;
    fl_err_init(&e);
    Fleet__ReplayInfoRequest req = FLEET__REPLAY_INFO_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    if (fl_rpc_unary_pb(ch, "/fleet.Replay/Info", &req.base, &fleet__replay_info__descriptor, &m, 5000, 0, &e) != FL_OK)
        fail_msg("Info: %s", e.msg);
    return (Fleet__ReplayInfo *)m;
}

static Fleet__SampleResponse *rpc_sample(fl_rpc_channel_t *ch, uint32_t B) {
    fl_err_t e;
    fl_err_init(&e);
    Fleet__SampleRequest req = FLEET__SAMPLE_REQUEST__INIT;
    req.batch_size = B;
    req.beta = 0.4;
    ProtobufCMessage *m = NULL;
    if (fl_rpc_unary_pb(ch, "/fleet.Replay/Sample", &req.base, &fleet__sample_response__descriptor, &m, 5000, 0, &e) !=
        FL_OK)
        fail_msg("Sample: %s", e.msg);
    return (Fleet__SampleResponse *)m;
}

/* A shard of opts restored from `restore` (NULL: none) on loopback, and a raw channel to
 * it into *ch (when ch is not NULL). */
static fl_replay_service_t *start_service(replay_fixture_t *f, const fl_replay_service_opts_t *opts,
                                          const char *restore, fl_rpc_channel_t **ch) {
    fl_replay_service_opts_t o = *opts;
    o.restore_path = restore;
    replay_fixture_start(f, &o);
    fl_err_t e;
    fl_err_init(&e);
    if (ch) assert_int_equal(fl_rpc_channel_create(f->addr, 0, ch, &e), FL_OK);
    return f->svc;
}

static void test_service_checkpoint_restore(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = service_opts();
    fl_rpc_channel_t *ch = NULL;
    replay_fixture_t f1, f2;
    fl_replay_service_t *s1 = start_service(&f1, &opts, NULL, &ch);
    fl_table_t *t1 = fl_replay_service_table(s1);
    fl_rng_t rng;
    fl_rng_init(&rng, 3);
    insert_n(t1, &rng, 0, 70); /* wraps the 50 slots */
    Fleet__SampleResponse *r0 = rpc_sample(ch, 8);
    fleet__sample_response__free_unpacked(r0, NULL);

    /* Checkpoint over gRPC to the default file. */
    fl_err_t e;
    fl_err_init(&e);
    Fleet__CheckpointRequest creq = FLEET__CHECKPOINT_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    if (fl_rpc_unary_pb(ch, "/fleet.Replay/Checkpoint", &creq.base, &fleet__checkpoint_response__descriptor, &m, 10000,
                        0, &e) != FL_OK)
        fail_msg("Checkpoint: %s", e.msg);
    Fleet__CheckpointResponse *cr = (Fleet__CheckpointResponse *)m;
    char want[160];
    path_in_dir(want, sizeof want, "shard-0.ckpt");
    assert_string_equal(cr->path, want);
    Fleet__ReplayInfo *i1 = rpc_info(ch);
    assert_int_equal(cr->items, i1->size);
    struct stat st;
    assert_int_equal(stat(want, &st), 0);
    assert_int_equal(cr->bytes, (uint64_t)st.st_size);
    fleet__checkpoint_response__free_unpacked(cr, NULL);

    /* And to a file named in the request, inside the checkpoint folder (which also holds
     * the other tests' files: those that count as named checkpoints go first, as a shard
     * keeps at most FL_REPLAY_MAX_NAMED_CKPTS). */
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t n = strlen(de->d_name);
        if (n > 5 && strcmp(de->d_name + n - 5, ".ckpt") == 0 && strncmp(de->d_name, "shard-", 6) != 0) {
            char old[400];
            snprintf(old, sizeof old, "%s/%s", g_dir, de->d_name);
            unlink(old);
        }
    }
    closedir(d);
    char named[160];
    path_in_dir(named, sizeof named, "named.ckpt");
    creq.name = "named.ckpt";
    assert_int_equal(fl_rpc_unary_pb(ch, "/fleet.Replay/Checkpoint", &creq.base,
                                     &fleet__checkpoint_response__descriptor, &m, 10000, 0, &e),
                     FL_OK);
    cr = (Fleet__CheckpointResponse *)m;
    assert_string_equal(cr->path, named);
    assert_int_equal(stat(named, &st), 0);
    fleet__checkpoint_response__free_unpacked(cr, NULL);
    /* A name with a folder is refused (tests/test_replay_limits.c has the other rules). */
    creq.name = "missing-dir/x.ckpt";
    assert_int_equal(fl_rpc_unary_pb(ch, "/fleet.Replay/Checkpoint", &creq.base,
                                     &fleet__checkpoint_response__descriptor, &m, 10000, 0, &e),
                     FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "'/'"));
    /* A file that cannot be written fails the call and names it: a folder in its way. */
    char blocked[160];
    path_in_dir(blocked, sizeof blocked, "blocked.ckpt");
    assert_int_equal(mkdir(blocked, 0755), 0);
    creq.name = "blocked.ckpt";
    assert_int_equal(fl_rpc_unary_pb(ch, "/fleet.Replay/Checkpoint", &creq.base,
                                     &fleet__checkpoint_response__descriptor, &m, 10000, 0, &e),
                     FL_INTERNAL);
    assert_non_null(strstr(e.msg, "blocked.ckpt"));
    assert_int_equal(rmdir(blocked), 0);

    /* A second service restored from the file answers Info and Sample the same. */
    fl_rpc_channel_t *ch2 = NULL;
    fl_replay_service_t *s2 = start_service(&f2, &opts, want, &ch2);
    Fleet__ReplayInfo *i2 = rpc_info(ch2);
    assert_int_equal(i1->size, i2->size);
    assert_int_equal(i1->capacity, i2->capacity);
    assert_int_equal(i1->inserted, i2->inserted);
    assert_int_equal(i1->sampled, i2->sampled);
    assert_int_equal(i1->updates_applied, i2->updates_applied);
    assert_int_equal(i1->updates_stale, i2->updates_stale);
    assert_memory_equal(&i1->total_priority, &i2->total_priority, sizeof(double));
    assert_memory_equal(&i1->max_priority, &i2->max_priority, sizeof(double));
    assert_memory_equal(&i1->sampling_mass, &i2->sampling_mass, sizeof(double));
    fleet__replay_info__free_unpacked(i1, NULL);
    fleet__replay_info__free_unpacked(i2, NULL);
    for (int round = 0; round < 5; round++) {
        Fleet__SampleResponse *a = rpc_sample(ch, 6), *b = rpc_sample(ch2, 6);
        assert_int_equal(a->n_keys, b->n_keys);
        assert_memory_equal(a->keys, b->keys, a->n_keys * sizeof(uint64_t));
        assert_memory_equal(a->weights, b->weights, a->n_weights * sizeof(float));
        assert_int_equal(a->batch->obs->data.len, b->batch->obs->data.len);
        assert_memory_equal(a->batch->obs->data.data, b->batch->obs->data.data, a->batch->obs->data.len);
        fleet__sample_response__free_unpacked(a, NULL);
        fleet__sample_response__free_unpacked(b, NULL);
    }
    fl_table_t *t2 = fl_replay_service_table(s2);
    assert_int_equal(fl_table_verify(t2, &e), FL_OK);
    assert_info_equal(t1, t2);

    /* A shard configured differently refuses the file, naming both values. */
    fl_replay_service_opts_t other = opts;
    other.capacity = 60;
    other.restore_path = want;
    fl_replay_service_t *s3 = NULL;
    assert_int_equal(fl_replay_service_create(&other, &s3, &e), FL_INVALID_ARGUMENT);
    assert_null(s3);
    assert_non_null(strstr(e.msg, "capacity 50 in the file"));
    assert_non_null(strstr(e.msg, "60 configured"));
    char nope[160];
    path_in_dir(nope, sizeof nope, "nope.ckpt");
    other = opts;
    other.restore_path = nope;
    assert_int_equal(fl_replay_service_create(&other, &s3, &e), FL_NOT_FOUND);

    fl_rpc_channel_destroy(ch);
    fl_rpc_channel_destroy(ch2);
    replay_fixture_stop(&f1);
    replay_fixture_stop(&f2);
}

static void test_service_periodic(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = service_opts();
    char dir[128];
    snprintf(dir, sizeof dir, "%s/periodic", g_dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    opts.checkpoint_dir = dir;
    opts.checkpoint_every = 0.1;
    replay_fixture_t f;
    fl_replay_service_t *s = start_service(&f, &opts, NULL, NULL);
    fl_rng_t rng;
    fl_rng_init(&rng, 4);
    insert_n(fl_replay_service_table(s), &rng, 0, 20);
    char p[300];
    snprintf(p, sizeof p, "%s/shard-0.ckpt", dir);
    /* Wait for a checkpoint that holds the 20 items. */
    fl_table_t *u = NULL;
    fl_err_t e;
    fl_err_init(&e);
    double t0 = fl_clock_sec();
    for (;;) {
        if (fl_table_load(p, NULL, &u, &e) == FL_OK) {
            fl_table_info_t ti;
            fl_table_info(u, &ti);
            if (ti.inserted == 20) break;
            fl_table_destroy(u);
            u = NULL;
        }
        if (fl_clock_sec() - t0 > 30) fail_msg("no periodic checkpoint with 20 items in 30 s: %s", e.msg);
        fl_sleep_sec(0.05);
    }
    assert_info_equal(fl_replay_service_table(s), u);
    fl_table_destroy(u);
    replay_fixture_stop(&f);

    /* checkpoint_every without a folder is a configuration error. */
    opts.checkpoint_dir = "";
    fl_replay_service_t *s2 = NULL;
    assert_int_equal(fl_replay_service_create(&opts, &s2, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "replay.checkpoint_dir"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_prioritized), cmocka_unit_test(test_roundtrip_uniform),
        cmocka_unit_test(test_roundtrip_fifo),        cmocka_unit_test(test_roundtrip_empty),
        cmocka_unit_test(test_snapshot_extra),        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_save_errors),           cmocka_unit_test(test_service_checkpoint_restore),
        cmocka_unit_test(test_service_periodic),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
