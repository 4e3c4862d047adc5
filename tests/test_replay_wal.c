/* Tests of the replay write-ahead log: the log itself (replay/wal: record framing,
 * rotation, the reader across segments, a torn tail reported and cut, corruption
 * elsewhere refused with file and offset, deletion of old segments) and the service's
 * recovery (replay/server with replay.wal = 1): inserts over real gRPC on 127.0.0.1
 * port 0, the service destroyed without a checkpoint, or after a checkpoint and more
 * inserts, and a new service on the same folder that holds every item with its key,
 * skips resent batches and answers their original keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "replay/client.h"
#include "replay/server.h"
#include "replay/table.h"
#include "replay/wal.h"
#include "replay/wire.h"
#include "replay/writer.h"
#include "tests/replay_fixture.h"

#define OBS_DIM 4
#define OBS_BYTES (OBS_DIM * sizeof(float))
#define NUM_ACTIONS 3

static const fl_wire_sig_t SIG = {.obs = {.dtype = FL_DTYPE_FLOAT32, .rank = 1, .shape = {OBS_DIM}},
                                  .num_actions = NUM_ACTIONS};
static const fl_obs_spec_t SPEC = {.dtype = FL_DTYPE_FLOAT32, .rank = 1, .shape = {OBS_DIM}};

static char g_dir[64];

static int setup_dir(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fl_wal_test_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A fresh sub-folder of the test folder. */
static void subdir(char *out, size_t len, const char *name) {
    snprintf(out, len, "%s/%s", g_dir, name);
    assert_int_equal(mkdir(out, 0755), 0);
}

static uint64_t file_size(const char *path) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Appends raw bytes to a file (to fake damage). */
static void append_bytes(const char *path, const void *p, size_t n) {
    int fd = open(path, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, p, n), (ssize_t)n);
    close(fd);
}

/* Overwrites one byte of a file. */
static void poke_byte(const char *path, uint64_t off, uint8_t v) {
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, &v, 1, (off_t)off), 1);
    close(fd);
}

/* Payload i: a recognizable pattern of 1 + (i * 37) % 300 bytes. */
static size_t payload(int i, uint8_t *buf) {
    size_t n = 1 + (size_t)(i * 37) % 300;
    for (size_t b = 0; b < n; b++) buf[b] = (uint8_t)(i * 7 + (int)b);
    return n;
}

static void append_ok(fl_wal_t *w, int i) {
    uint8_t buf[512];
    size_t n = payload(i, buf);
    fl_err_t e;
    fl_err_init(&e);
    if (fl_wal_append(w, buf, n, &e) != FL_OK) fail_msg("append %d: %s", i, e.msg);
}

/* Reads the log of `dir` from segment `first` and checks that it holds payloads
 * from .. to-1 in order; returns the reader (for torn-tail checks; the caller closes). */
static fl_wal_reader_t *expect_records(const char *dir, uint64_t first, int from, int to) {
    fl_wal_reader_t *r = NULL;
    fl_err_t e;
    fl_err_init(&e);
    if (fl_wal_reader_open(dir, 0, first, &r, &e) != FL_OK) fail_msg("reader: %s", e.msg);
    for (int i = from; i <= to; i++) {
        const void *p;
        size_t n;
        if (fl_wal_reader_next(r, &p, &n, NULL, NULL, &e) != FL_OK) fail_msg("next %d: %s", i, e.msg);
        if (i == to) {
            assert_null(p);
            break;
        }
        assert_non_null(p);
        uint8_t want[512];
        size_t wn = payload(i, want);
        assert_int_equal(n, wn);
        assert_memory_equal(p, want, n);
    }
    return r;
}

/* ---- the log -------------------------------------------------------------- */

static void test_framing(void **state) {
    (void)state;
    char dir[128];
    subdir(dir, sizeof dir, "framing");
    fl_wal_t *w = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_wal_open(dir, 0, 0, 0, &w, &e), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_wal_open(dir, 0, 1, 0, &w, &e), FL_OK);
    assert_int_equal(fl_wal_segment(w), 1);
    assert_int_equal(fl_wal_append(w, "x", 0, &e), FL_INVALID_ARGUMENT);
    for (int i = 0; i < 3; i++) append_ok(w, i);
    size_t total = 0;
    uint8_t buf[512];
    for (int i = 0; i < 3; i++) total += FL_WAL_HEADER_BYTES + payload(i, buf);
    assert_int_equal(fl_wal_segment_bytes(w), total);
    assert_int_equal(fl_wal_appended_records(w), 3);
    assert_int_equal(fl_wal_appended_bytes(w), total);
    fl_wal_close(w);

    /* The file: u32 length, u32 CRC-32 of the payload, the payload, back to back. */
    char path[256];
    fl_wal_segment_path(path, sizeof path, dir, 0, 1);
    assert_non_null(strstr(path, "/shard-0.wal.00000001"));
    assert_int_equal(file_size(path), total);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    for (int i = 0; i < 3; i++) {
        uint8_t h[8], p[512];
        size_t n = payload(i, buf);
        assert_int_equal(fread(h, 1, 8, f), 8);
        uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        uint32_t crc = (uint32_t)h[4] | (uint32_t)h[5] << 8 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 24;
        assert_int_equal(len, n);
        assert_int_equal(fread(p, 1, n, f), n);
        assert_memory_equal(p, buf, n);
        assert_int_equal(crc, (uint32_t)crc32(crc32(0L, Z_NULL, 0), buf, (uInt)n));
    }
    fclose(f);

    /* Reopening appends to the same segment. */
    assert_int_equal(fl_wal_open(dir, 0, 1, 1, &w, &e), FL_OK);
    assert_int_equal(fl_wal_segment_bytes(w), total);
    append_ok(w, 3);
    fl_wal_close(w);
    fl_wal_reader_t *r = expect_records(dir, 1, 0, 4);
    assert_false(fl_wal_reader_torn(r, NULL));
    assert_int_equal(fl_wal_reader_first_segment(r), 1);
    assert_int_equal(fl_wal_reader_last_segment(r), 1);
    fl_wal_reader_close(r);
}

static void test_rotation_and_reader(void **state) {
    (void)state;
    char dir[128];
    subdir(dir, sizeof dir, "rotation");
    fl_err_t e;
    fl_err_init(&e);
    /* An empty folder is an empty log. */
    fl_wal_reader_t *r = expect_records(dir, 1, 0, 0);
    assert_int_equal(fl_wal_reader_last_segment(r), 0);
    fl_wal_reader_close(r);

    fl_wal_t *w = NULL;
    assert_int_equal(fl_wal_open(dir, 0, 1, 0, &w, &e), FL_OK);
    int i = 0;
    for (; i < 4; i++) append_ok(w, i); /* segment 1: 0..3 */
    assert_int_equal(fl_wal_rotate(w, &e), FL_OK);
    assert_int_equal(fl_wal_segment(w), 2);
    assert_int_equal(fl_wal_segment_bytes(w), 0);
    for (; i < 9; i++) append_ok(w, i);            /* segment 2: 4..8 */
    assert_int_equal(fl_wal_rotate(w, &e), FL_OK); /* segment 3: empty */
    assert_int_equal(fl_wal_rotate(w, &e), FL_OK);
    for (; i < 12; i++) append_ok(w, i); /* segment 4: 9..11 */
    fl_wal_close(w);

    /* Another shard's log in the same folder is not read. */
    fl_wal_t *o = NULL;
    assert_int_equal(fl_wal_open(dir, 1, 1, 0, &o, &e), FL_OK);
    append_ok(o, 99);
    fl_wal_close(o);

    uint64_t *segs = NULL;
    size_t n = 0;
    assert_int_equal(fl_wal_list(dir, 0, &segs, &n, &e), FL_OK);
    assert_int_equal(n, 4);
    for (size_t k = 0; k < n; k++) assert_int_equal(segs[k], k + 1);
    free(segs);

    r = expect_records(dir, 1, 0, 12);
    assert_int_equal(fl_wal_reader_first_segment(r), 1);
    assert_int_equal(fl_wal_reader_last_segment(r), 4);
    fl_wal_reader_close(r);
    fl_wal_reader_close(expect_records(dir, 2, 4, 12));
    fl_wal_reader_close(expect_records(dir, 3, 9, 12));
    fl_wal_reader_close(expect_records(dir, 5, 0, 0));

    /* Where each record starts. */
    assert_int_equal(fl_wal_reader_open(dir, 0, 2, &r, &e), FL_OK);
    const void *p;
    size_t len;
    uint64_t seg, off, want_off = 0;
    for (int k = 4; k < 9; k++) {
        assert_int_equal(fl_wal_reader_next(r, &p, &len, &seg, &off, &e), FL_OK);
        assert_int_equal(seg, 2);
        assert_int_equal(off, want_off);
        want_off += FL_WAL_HEADER_BYTES + len;
    }
    assert_int_equal(fl_wal_reader_next(r, &p, &len, &seg, &off, &e), FL_OK);
    assert_int_equal(seg, 4);
    assert_int_equal(off, 0);
    fl_wal_reader_close(r);

    /* Deleting old segments. */
    size_t deleted = 0;
    assert_int_equal(fl_wal_delete_before(dir, 0, 3, &deleted, &e), FL_OK);
    assert_int_equal(deleted, 2);
    assert_int_equal(fl_wal_list(dir, 0, &segs, &n, &e), FL_OK);
    assert_int_equal(n, 2);
    assert_int_equal(segs[0], 3);
    assert_int_equal(segs[1], 4);
    free(segs);
    assert_int_equal(fl_wal_list(dir, 1, &segs, &n, &e), FL_OK);
    assert_int_equal(n, 1);
    free(segs);
    fl_wal_reader_close(expect_records(dir, 3, 9, 12));
    /* Reading from a segment that was deleted while later ones exist is refused. */
    assert_int_equal(fl_wal_reader_open(dir, 0, 1, &r, &e), FL_DATA_LOSS);
    assert_non_null(strstr(e.msg, "shard-0.wal.00000001"));
    assert_non_null(strstr(e.msg, "missing"));
    /* So is a gap between segments. */
    char path[256];
    fl_wal_segment_path(path, sizeof path, dir, 0, 6);
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(fl_wal_reader_open(dir, 0, 3, &r, &e), FL_DATA_LOSS);
    assert_non_null(strstr(e.msg, "shard-0.wal.00000005"));
    /* A missing directory is an error naming it. */
    char nodir[160];
    snprintf(nodir, sizeof nodir, "%s/nope", g_dir);
    assert_int_equal(fl_wal_list(nodir, 0, &segs, &n, &e), FL_INTERNAL);
    assert_non_null(strstr(e.msg, "nope"));
    assert_int_equal(fl_wal_open(nodir, 0, 1, 0, &w, &e), FL_INTERNAL);
    assert_non_null(strstr(e.msg, "nope/shard-0.wal.00000001"));
}

/* Appends roll over to a new segment past FL_WAL_SEGMENT_BYTES. */
static void test_segment_rollover(void **state) {
    (void)state;
    char dir[128];
    subdir(dir, sizeof dir, "rollover");
    size_t big = 1u << 20;
    uint8_t *buf = malloc(big);
    assert_non_null(buf);
    memset(buf, 0xab, big);
    fl_wal_t *w = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_wal_open(dir, 0, 1, 0, &w, &e), FL_OK);
    int n = (int)(FL_WAL_SEGMENT_BYTES / big) + 6;
    for (int i = 0; i < n; i++) {
        memcpy(buf, &i, sizeof i);
        assert_int_equal(fl_wal_append(w, buf, big, &e), FL_OK);
    }
    assert_int_equal(fl_wal_segment(w), 2);
    fl_wal_close(w);
    char seg1[256];
    fl_wal_segment_path(seg1, sizeof seg1, dir, 0, 1);
    assert_true(file_size(seg1) <= FL_WAL_SEGMENT_BYTES);
    fl_wal_reader_t *r = NULL;
    assert_int_equal(fl_wal_reader_open(dir, 0, 1, &r, &e), FL_OK);
    uint64_t want_seg = 1, size = 0;
    for (int i = 0; i < n; i++) {
        if (size > 0 && size + FL_WAL_HEADER_BYTES + big > FL_WAL_SEGMENT_BYTES) {
            want_seg++;
            size = 0;
        }
        size += FL_WAL_HEADER_BYTES + big;
        const void *p;
        size_t len;
        uint64_t seg;
        assert_int_equal(fl_wal_reader_next(r, &p, &len, &seg, NULL, &e), FL_OK);
        assert_non_null(p);
        assert_int_equal(len, big);
        int got;
        memcpy(&got, p, sizeof got);
        assert_int_equal(got, i);
        assert_int_equal(seg, want_seg);
    }
    fl_wal_reader_close(r);
    free(buf);
}

/* Writes records 0..3 into segment 1 and 4..6 into segment 2 of a fresh folder. */
static void two_segments(char *dir, size_t len, const char *name, char *seg1, char *seg2, size_t plen) {
    subdir(dir, len, name);
    fl_wal_t *w = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_wal_open(dir, 0, 1, 0, &w, &e), FL_OK);
    for (int i = 0; i < 4; i++) append_ok(w, i);
    assert_int_equal(fl_wal_rotate(w, &e), FL_OK);
    for (int i = 4; i < 7; i++) append_ok(w, i);
    fl_wal_close(w);
    fl_wal_segment_path(seg1, plen, dir, 0, 1);
    fl_wal_segment_path(seg2, plen, dir, 0, 2);
}

/* Damage at the end of the last segment is a torn tail: reported, cut off, and the log
 * reads clean (and appends) afterwards. */
static void check_torn(const char *name, const void *junk, size_t junk_len, const char *why) {
    char dir[128], s1[256], s2[256];
    two_segments(dir, sizeof dir, name, s1, s2, sizeof s1);
    uint64_t good = file_size(s2);
    append_bytes(s2, junk, junk_len);
    fl_wal_reader_t *r = expect_records(dir, 1, 0, 7);
    fl_wal_torn_t t;
    assert_true(fl_wal_reader_torn(r, &t));
    assert_string_equal(t.path, s2);
    assert_int_equal(t.offset, good);
    assert_int_equal(t.bytes, junk_len);
    if (!strstr(t.why, why)) fail_msg("%s: torn tail reason \"%s\", expected \"%s\"", name, t.why, why);
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_wal_reader_truncate_torn(r, &e), FL_OK);
    fl_wal_reader_close(r);
    assert_int_equal(file_size(s2), good);
    r = expect_records(dir, 1, 0, 7);
    assert_false(fl_wal_reader_torn(r, NULL));
    fl_wal_reader_close(r);
    fl_wal_t *w = NULL;
    assert_int_equal(fl_wal_open(dir, 0, 2, 0, &w, &e), FL_OK);
    append_ok(w, 7);
    fl_wal_close(w);
    fl_wal_reader_close(expect_records(dir, 1, 0, 8));
}

static void test_torn_tail(void **state) {
    (void)state;
    /* A header cut short. */
    check_torn("torn-header", "\x05\x00\x00", 3, "header cut short: 3 of 8");
    /* A payload cut short: the header promises 100 bytes, 10 follow. */
    uint8_t cut[18] = {100, 0, 0, 0, 1, 2, 3, 4};
    check_torn("torn-payload", cut, sizeof cut, "payload cut short: 10 of 100");
    /* A whole last record with a wrong CRC. */
    uint8_t bad[8 + 5] = {5, 0, 0, 0, 0, 0, 0, 0, 'h', 'e', 'l', 'l', 'o'};
    check_torn("torn-crc", bad, sizeof bad, "CRC-32");
    /* A zero-filled tail (a machine crash after the file grew). */
    uint8_t zeros[4096] = {0};
    check_torn("torn-zeros", zeros, sizeof zeros, "length 0");
}

static void test_corruption_refused(void **state) {
    (void)state;
    char dir[128], s1[256], s2[256];
    fl_err_t e;
    fl_err_init(&e);
    uint8_t buf[512];

    /* A flipped byte in the first record of the last segment, with records after it. */
    two_segments(dir, sizeof dir, "corrupt-mid", s1, s2, sizeof s1);
    poke_byte(s2, FL_WAL_HEADER_BYTES + 2, 0xee);
    fl_wal_reader_t *r = NULL;
    assert_int_equal(fl_wal_reader_open(dir, 0, 1, &r, &e), FL_OK);
    const void *p;
    size_t n;
    for (int i = 0; i < 4; i++) assert_int_equal(fl_wal_reader_next(r, &p, &n, NULL, NULL, &e), FL_OK);
    assert_int_equal(fl_wal_reader_next(r, &p, &n, NULL, NULL, &e), FL_DATA_LOSS);
    assert_non_null(strstr(e.msg, s2));
    assert_non_null(strstr(e.msg, "offset 0 "));
    assert_non_null(strstr(e.msg, "CRC-32"));
    assert_false(fl_wal_reader_torn(r, NULL));
    fl_wal_reader_close(r);

    /* A flipped byte in the second record of a segment that is not the last. */
    two_segments(dir, sizeof dir, "corrupt-old", s1, s2, sizeof s1);
    uint64_t off1 = FL_WAL_HEADER_BYTES + payload(0, buf);
    poke_byte(s1, off1 + FL_WAL_HEADER_BYTES, 0x5a ^ (uint8_t)(7 * 1));
    assert_int_equal(fl_wal_reader_open(dir, 0, 1, &r, &e), FL_OK);
    assert_int_equal(fl_wal_reader_next(r, &p, &n, NULL, NULL, &e), FL_OK);
    assert_int_equal(fl_wal_reader_next(r, &p, &n, NULL, NULL, &e), FL_DATA_LOSS);
    char want[64];
    snprintf(want, sizeof want, "offset %" PRIu64 " ", off1);
    assert_non_null(strstr(e.msg, s1));
    assert_non_null(strstr(e.msg, want));
    fl_wal_reader_close(r);

    /* A torn end of a segment that is not the last one is corruption, not a torn tail. */
    two_segments(dir, sizeof dir, "corrupt-cut", s1, s2, sizeof s1);
    uint64_t size1 = file_size(s1);
    assert_int_equal(truncate(s1, (off_t)(size1 - 3)), 0);
    assert_int_equal(fl_wal_reader_open(dir, 0, 1, &r, &e), FL_OK);
    fl_status st;
    while ((st = fl_wal_reader_next(r, &p, &n, NULL, NULL, &e)) == FL_OK && p) {
    }
    assert_int_equal(st, FL_DATA_LOSS);
    assert_non_null(strstr(e.msg, s1));
    assert_non_null(strstr(e.msg, "not the last segment"));
    fl_wal_reader_close(r);

    /* A zero length followed by non-zero data in the last segment. */
    two_segments(dir, sizeof dir, "corrupt-zero", s1, s2, sizeof s1);
    for (int b = 0; b < 4; b++) poke_byte(s2, (uint64_t)b, 0);
    assert_int_equal(fl_wal_reader_open(dir, 0, 2, &r, &e), FL_OK);
    assert_int_equal(fl_wal_reader_next(r, &p, &n, NULL, NULL, &e), FL_DATA_LOSS);
    assert_non_null(strstr(e.msg, "length 0"));
    assert_non_null(strstr(e.msg, "followed by more data"));
    fl_wal_reader_close(r);
}

/* ---- the service ---------------------------------------------------------- */

/* dir: the log's folder, which must outlive the options' use. */
static fl_replay_service_opts_t wal_opts(const char *dir) {
    fl_replay_service_opts_t o = replay_fixture_opts(SIG.obs, SIG.num_actions, 10000, 1);
    o.shards = 1;
    o.seed = 7;
    /* A queue: sampling `size` items returns every item, oldest first. */
    o.selector = FL_SELECTOR_FIFO;
    o.max_times_sampled = 1;
    o.wal = 1;
    o.checkpoint_dir = dir;
    return o;
}

/* Columns of n transitions whose values derive from the id base + i. */
typedef struct cols {
    size_t n;
    float *obs, *next_obs, *rewards, *discounts, *priorities;
    int32_t *actions;
} cols_t;

static void cols_make(cols_t *c, size_t n, uint64_t base) {
    c->n = n;
    c->obs = malloc(n * OBS_BYTES);
    c->next_obs = malloc(n * OBS_BYTES);
    c->rewards = malloc(n * sizeof(float));
    c->discounts = malloc(n * sizeof(float));
    c->priorities = malloc(n * sizeof(float));
    c->actions = malloc(n * sizeof(int32_t));
    assert_non_null(c->actions);
    for (size_t i = 0; i < n; i++) {
        uint64_t id = base + i;
        for (int d = 0; d < OBS_DIM; d++) {
            c->obs[i * OBS_DIM + d] = (float)id + 0.125f * (float)d;
            c->next_obs[i * OBS_DIM + d] = -(float)id - 0.25f * (float)d;
        }
        c->actions[i] = (int32_t)(id % NUM_ACTIONS);
        c->rewards[i] = 0.5f * (float)id;
        c->discounts[i] = 0.99f;
        c->priorities[i] = 1.0f + (float)(id % 5);
    }
}

static void cols_free(cols_t *c) {
    free(c->obs);
    free(c->next_obs);
    free(c->rewards);
    free(c->discounts);
    free(c->priorities);
    free(c->actions);
}

/* One batch of a stream: its sequence, its items' ids (base .. base + n - 1), and the
 * first key the shard answered for it. */
typedef struct batch {
    uint64_t stream, seq, base;
    size_t n;
    uint64_t first_key;
} batch_t;

/* Sends batches[0 .. nb) on one raw Insert call, each with the stream key `key` (0: the
 * stream's own, 2 * stream + 1); returns the call's status, *resp the response (caller
 * frees) and e the error. */
static fl_status raw_insert_key(const char *addr, batch_t *batches, size_t nb, uint64_t key,
                                Fleet__InsertResponse **resp, fl_err_t *ep) {
    fl_err_t e;
    fl_err_init(&e);
    fl_rpc_channel_t *ch = NULL;
    assert_int_equal(fl_rpc_channel_create(addr, 0, &ch, &e), FL_OK);
    fl_rpc_stream_t *s = NULL;
    assert_int_equal(fl_rpc_stream_open(ch, "/fleet.Replay/Insert", 10000, FL_RPC_WAIT_FOR_READY, &s, &e), FL_OK);
    for (size_t i = 0; i < nb; i++) {
        cols_t c;
        cols_make(&c, batches[i].n, batches[i].base);
        fl_wire_batch_t b = {.count = c.n,
                             .obs_bytes = OBS_BYTES,
                             .obs = c.obs,
                             .actions = c.actions,
                             .rewards = c.rewards,
                             .discounts = c.discounts,
                             .next_obs = c.next_obs,
                             .priorities = c.priorities};
        fl_wire_batch_msg_t bm;
        fl_wire_encode_batch(&bm, &SIG.obs, &b);
        Fleet__InsertRequest req = FLEET__INSERT_REQUEST__INIT;
        req.stream_id = batches[i].stream;
        req.stream_key = key ? key : 2 * batches[i].stream + 1; /* one key per stream, as its writer keeps */
        req.sequence = batches[i].seq;
        req.batch = &bm.batch;
        fl_status st = fl_rpc_stream_send_pb(s, &req.base, &e);
        cols_free(&c);
        if (st != FL_OK) fail_msg("send: %s", e.msg);
    }
    ProtobufCMessage *m = NULL;
    fl_status st = fl_rpc_stream_finish_pb(s, &fleet__insert_response__descriptor, &m, &e);
    fl_rpc_channel_destroy(ch);
    *resp = (Fleet__InsertResponse *)m;
    *ep = e;
    return st;
}

static fl_status raw_insert_status(const char *addr, batch_t *batches, size_t nb, Fleet__InsertResponse **resp,
                                   fl_err_t *ep) {
    return raw_insert_key(addr, batches, nb, 0, resp, ep);
}

/* The same for a call that must succeed. */
static Fleet__InsertResponse *raw_insert(const char *addr, batch_t *batches, size_t nb) {
    Fleet__InsertResponse *r = NULL;
    fl_err_t e;
    if (raw_insert_status(addr, batches, nb, &r, &e) != FL_OK) fail_msg("insert: %s", e.msg);
    assert_int_equal(r->n_first_keys, nb);
    return r;
}

/* Inserts new batches and records their first keys. */
static void insert_new(const char *addr, batch_t *batches, size_t nb) {
    Fleet__InsertResponse *r = raw_insert(addr, batches, nb);
    size_t items = 0;
    for (size_t i = 0; i < nb; i++) {
        batches[i].first_key = r->first_keys[i];
        items += batches[i].n;
    }
    assert_int_equal(r->items, items);
    fleet__insert_response__free_unpacked(r, NULL);
}

/* Expected content of the table: items ordered by key, each an id. */
typedef struct expect {
    uint64_t key[4096];
    uint64_t id[4096];
    size_t n;
} expect_t;

static void expect_batches(expect_t *x, const batch_t *b, size_t nb) {
    for (size_t i = 0; i < nb; i++)
        for (size_t k = 0; k < b[i].n; k++) {
            assert_true(x->n < 4096);
            x->key[x->n] = b[i].first_key + k;
            x->id[x->n] = b[i].base + k;
            x->n++;
        }
}

/* Drains the (fifo, sampled-once) table and checks that it holds exactly the expected
 * items with their keys, oldest first. */
static void check_table(fl_table_t *t, const expect_t *x) {
    fl_err_t e;
    fl_err_init(&e);
    if (fl_table_verify(t, &e) != FL_OK) fail_msg("verify: %s", e.msg);
    fl_table_info_t ti;
    fl_table_info(t, &ti);
    assert_int_equal(ti.size, x->n);
    assert_int_equal(ti.inserted, x->n);
    uint64_t *keys = malloc(x->n * sizeof *keys);
    float *obs = malloc(x->n * OBS_BYTES), *next = malloc(x->n * OBS_BYTES), *rew = malloc(x->n * sizeof(float));
    int32_t *act = malloc(x->n * sizeof *act);
    if (fl_table_sample(t, x->n, 0.0, keys, NULL, NULL, obs, act, rew, NULL, next, &e) != FL_OK)
        fail_msg("sample: %s", e.msg);
    for (size_t i = 0; i < x->n; i++) {
        assert_int_equal(keys[i], x->key[i]);
        assert_int_equal(keys[i], fl_table_key_make(0, i));
        float id = (float)x->id[i];
        assert_true(obs[i * OBS_DIM] == id && obs[i * OBS_DIM + 3] == id + 0.375f);
        assert_true(next[i * OBS_DIM + 1] == -id - 0.25f);
        assert_int_equal(act[i], (int32_t)(x->id[i] % NUM_ACTIONS));
        assert_true(rew[i] == 0.5f * id);
    }
    free(keys);
    free(obs);
    free(next);
    free(rew);
    free(act);
}

static void append_cols(fl_replay_writer_t *w, size_t n, uint64_t base) {
    cols_t c;
    cols_make(&c, n, base);
    fl_err_t e;
    fl_err_init(&e);
    fl_status st =
        fl_replay_writer_append(w, n, c.obs, c.actions, c.rewards, c.discounts, c.next_obs, c.priorities, &e);
    cols_free(&c);
    if (st != FL_OK) fail_msg("append: %s", e.msg);
}

/* Inserts over gRPC (raw calls and the real writer), destroys the service without a
 * checkpoint, and recovers everything from the log alone. */
static void test_service_recovers_from_log(void **state) {
    (void)state;
    char dir[128];
    subdir(dir, sizeof dir, "svc-log");
    fl_replay_service_opts_t opts = wal_opts(dir);
    replay_fixture_t a;
    replay_fixture_start(&a, &opts);
    static expect_t x;
    memset(&x, 0, sizeof x);
    batch_t s77[3] = {{77, 1, 1000, 8, 0}, {77, 2, 1100, 5, 0}, {77, 3, 1200, 7, 0}};
    insert_new(a.addr, s77, 3);
    expect_batches(&x, s77, 3);
    batch_t s78[1] = {{78, 1, 2000, 4, 0}};
    insert_new(a.addr, s78, 1);
    expect_batches(&x, s78, 1);
    /* The real writer: 6 batches, 4 per call. */
    fl_err_t e;
    fl_err_init(&e);
    fl_replay_client_t *c = NULL;
    assert_int_equal(fl_replay_client_create(a.addr, &c, &e), FL_OK);
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(c, 500, &SPEC, 4, &w, &e), FL_OK);
    batch_t wb[6];
    for (int i = 0; i < 6; i++) {
        wb[i] = (batch_t){500, (uint64_t)i + 1, 3000 + 100 * (uint64_t)i, (size_t)(3 + i), x.n};
        append_cols(w, wb[i].n, wb[i].base);
        expect_batches(&x, &wb[i], 1);
    }
    if (fl_replay_writer_flush(w, 20000, &e) != FL_OK) fail_msg("flush: %s", e.msg);
    fl_replay_writer_destroy(w);
    fl_replay_client_destroy(c);
    fl_replay_info_t in;
    fl_replay_service_info(a.svc, &in);
    assert_int_equal(in.inserted, x.n);
    /* Nothing but the log: no checkpoint file. */
    char ckpt[256];
    snprintf(ckpt, sizeof ckpt, "%s/shard-0.ckpt", dir);
    assert_false(file_exists(ckpt));
    replay_fixture_stop(&a);

    replay_fixture_t b;
    replay_fixture_start(&b, &opts);
    fl_replay_service_info(b.svc, &in);
    assert_int_equal(in.inserted, x.n);
    assert_int_equal(in.size, x.n);
    /* Resends are skipped and answered with their keys; sequence 4 is new. */
    batch_t again[3] = {{77, 2, 1100, 5, 0}, {77, 3, 1200, 7, 0}, {77, 4, 1300, 6, 0}};
    Fleet__InsertResponse *r = raw_insert(b.addr, again, 3);
    assert_int_equal(r->last_sequence, 4);
    assert_int_equal(r->items, 6);
    assert_int_equal(r->first_keys[0], s77[1].first_key);
    assert_int_equal(r->first_keys[1], s77[2].first_key);
    again[2].first_key = r->first_keys[2];
    assert_int_equal(again[2].first_key, fl_table_key_make(0, x.n));
    fleet__insert_response__free_unpacked(r, NULL);
    expect_batches(&x, &again[2], 1);
    /* The writer's stream is still its writer's: its key came back with the log, so a
     * batch with another key is refused and nothing goes in. */
    batch_t wagain[1] = {{500, 7, 3500, 8, 0}};
    r = NULL;
    assert_int_equal(raw_insert_status(b.addr, wagain, 1, &r, &e), FL_PERMISSION_DENIED);
    assert_null(r);
    assert_non_null(strstr(e.msg, "stream 500 belongs to another writer"));
    fl_replay_service_info(b.svc, &in);
    assert_int_equal(in.inserted, x.n);
    replay_fixture_stop(&b);

    /* A third incarnation recovers the second one's inserts as well. */
    replay_fixture_t c3;
    replay_fixture_start(&c3, &opts);
    check_table(fl_replay_service_table(c3.svc), &x);
    replay_fixture_stop(&c3);

    /* Damage in a segment that is not the last fails create, naming file and offset. */
    char seg1[256];
    fl_wal_segment_path(seg1, sizeof seg1, dir, 0, 1);
    poke_byte(seg1, FL_WAL_HEADER_BYTES + 3, 0xa5);
    fl_replay_service_t *bad = NULL;
    assert_int_equal(fl_replay_service_create(&opts, &bad, &e), FL_DATA_LOSS);
    assert_null(bad);
    assert_non_null(strstr(e.msg, seg1));
    assert_non_null(strstr(e.msg, "offset 0 "));
}

/* A checkpoint in the middle: inserts, checkpoint (log rotated, covered segments
 * deleted), more inserts, then recovery from the checkpoint plus the log. */
static void test_service_checkpoint_then_log(void **state) {
    (void)state;
    char dir[128];
    subdir(dir, sizeof dir, "svc-ckpt");
    fl_replay_service_opts_t opts = wal_opts(dir);
    opts.wal_fsync = 1; /* the same, with fdatasync per record */
    replay_fixture_t a;
    replay_fixture_start(&a, &opts);
    static expect_t x;
    memset(&x, 0, sizeof x);
    batch_t first[3] = {{5, 1, 100, 4, 0}, {5, 2, 200, 6, 0}, {5, 3, 300, 3, 0}};
    insert_new(a.addr, first, 3);
    expect_batches(&x, first, 3);
    char seg1[256], seg2[256], ckpt[256];
    fl_wal_segment_path(seg1, sizeof seg1, dir, 0, 1);
    fl_wal_segment_path(seg2, sizeof seg2, dir, 0, 2);
    snprintf(ckpt, sizeof ckpt, "%s/shard-0.ckpt", dir);
    assert_true(file_exists(seg1));
    fl_err_t e;
    fl_err_init(&e);
    fl_table_save_info_t si;
    if (fl_replay_service_checkpoint(a.svc, NULL, &si, NULL, 0, &e) != FL_OK) fail_msg("checkpoint: %s", e.msg);
    assert_int_equal(si.items, x.n);
    assert_true(file_exists(ckpt));
    assert_false(file_exists(seg1));
    assert_true(file_exists(seg2));
    assert_int_equal(file_size(seg2), 0);
    /* The checkpoint alone is a valid table file for fl_table_load. */
    fl_table_t *t = NULL;
    assert_int_equal(fl_table_load(ckpt, NULL, &t, &e), FL_OK);
    fl_table_destroy(t);
    /* A checkpoint to another path does not touch the log. */
    char other[256];
    snprintf(other, sizeof other, "%s/other.ckpt", dir);
    assert_int_equal(fl_replay_service_checkpoint(a.svc, other, NULL, NULL, 0, &e), FL_OK);
    assert_true(file_exists(seg2));

    batch_t more[2] = {{5, 4, 400, 5, 0}, {5, 5, 500, 2, 0}};
    insert_new(a.addr, more, 2);
    expect_batches(&x, more, 2);
    batch_t s6[1] = {{6, 1, 600, 7, 0}};
    insert_new(a.addr, s6, 1);
    expect_batches(&x, s6, 1);
    assert_true(file_size(seg2) > 0);
    replay_fixture_stop(&a);

    replay_fixture_t b;
    replay_fixture_start(&b, &opts);
    fl_replay_info_t in;
    fl_replay_service_info(b.svc, &in);
    assert_int_equal(in.inserted, x.n);
    /* Resends of batches from before the checkpoint (stream records from its extra
     * section) and after it (from the log) are skipped with their keys. */
    batch_t again[6] = {{5, 1, 100, 4, 0}, {5, 2, 200, 6, 0}, {5, 3, 300, 3, 0},
                        {5, 4, 400, 5, 0}, {5, 5, 500, 2, 0}, {5, 6, 700, 3, 0}};
    Fleet__InsertResponse *r = raw_insert(b.addr, again, 6);
    assert_int_equal(r->items, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(r->first_keys[i], first[i].first_key);
    for (int i = 0; i < 2; i++) assert_int_equal(r->first_keys[3 + i], more[i].first_key);
    again[5].first_key = r->first_keys[5];
    fleet__insert_response__free_unpacked(r, NULL);
    expect_batches(&x, &again[5], 1);
    /* Stream 5's key came back from the checkpoint too (its first batches' segment is
     * gone): another key is refused. */
    batch_t forged[1] = {{5, 7, 800, 2, 0}};
    r = NULL;
    assert_int_equal(raw_insert_key(b.addr, forged, 1, 12345, &r, &e), FL_PERMISSION_DENIED);
    assert_non_null(strstr(e.msg, "stream 5 belongs to another writer"));
    /* A checkpoint right before the end: recovery from the file alone. */
    assert_int_equal(fl_replay_service_checkpoint(b.svc, NULL, NULL, NULL, 0, &e), FL_OK);
    replay_fixture_stop(&b);

    /* A torn tail on the last segment is cut, and nothing acknowledged is lost. */
    uint64_t *segs = NULL;
    size_t nseg = 0;
    assert_int_equal(fl_wal_list(dir, 0, &segs, &nseg, &e), FL_OK);
    assert_int_equal(nseg, 1);
    char last[256];
    fl_wal_segment_path(last, sizeof last, dir, 0, segs[0]);
    free(segs);
    append_bytes(last, "\x40\x00\x00\x00\x01", 5);
    replay_fixture_t c;
    replay_fixture_start(&c, &opts);
    assert_int_equal(file_size(last), 0);
    r = raw_insert(c.addr, again, 6);
    assert_int_equal(r->items, 0);
    fleet__insert_response__free_unpacked(r, NULL);
    check_table(fl_replay_service_table(c.svc), &x);

    /* The folder is locked while a service uses it. */
    fl_replay_service_t *dup = NULL;
    assert_int_equal(fl_replay_service_create(&opts, &dup, &e), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(e.msg, "shard-0.wal.lock"));
    replay_fixture_stop(&c);
}

/* A checkpoint whose stream records are of version 1 ("FLWALST1", before streams had
 * keys) still loads: its streams keep their sequences and remembered keys, and the first
 * batch after the load binds a stream's key. */
static void test_service_reads_v1_stream_records(void **state) {
    (void)state;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/v1", g_dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    fl_replay_service_opts_t opts = wal_opts(dir);
    replay_fixture_t a;
    replay_fixture_start(&a, &opts);
    batch_t first[3] = {{9, 1, 100, 4, 0}, {9, 2, 200, 5, 0}, {9, 3, 300, 6, 0}};
    insert_new(a.addr, first, 3);
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_service_checkpoint(a.svc, NULL, NULL, NULL, 0, &e), FL_OK);
    replay_fixture_stop(&a);

    /* Rewrite the file's stream records as version 1: the same without the key. */
    char ckpt[256];
    snprintf(ckpt, sizeof ckpt, "%s/shard-0.ckpt", dir);
    fl_table_t *t = NULL;
    void *x2 = NULL;
    size_t n2 = 0;
    assert_int_equal(fl_table_load_extra(ckpt, NULL, &t, &x2, &n2, &e), FL_OK);
    const uint8_t *v2 = x2;
    assert_memory_equal(v2, "FLWALST2", 8);
    assert_int_equal(v2[16], 1); /* one stream */
    uint8_t v1[24 + 20 + 64 * 16];
    memcpy(v1, "FLWALST1", 8);
    memcpy(v1 + 8, v2 + 8, 16);          /* resume segment, streams */
    memcpy(v1 + 24, v2 + 24, 16);        /* id, last sequence */
    assert_int_equal(v2[40], 2 * 9 + 1); /* the key, dropped */
    memcpy(v1 + 40, v2 + 48, n2 - 48);   /* ring count and entries */
    size_t n1 = n2 - 8;
    fl_table_snapshot_t *sn = NULL;
    assert_int_equal(fl_table_snapshot_take(t, &sn, &e), FL_OK);
    assert_int_equal(fl_table_snapshot_write(sn, ckpt, v1, n1, NULL, &e), FL_OK);
    fl_table_snapshot_free(sn);
    fl_table_destroy(t);
    free(x2);

    replay_fixture_t b;
    replay_fixture_start(&b, &opts);
    /* A resend is still recognised, answered with its key. */
    Fleet__InsertResponse *r = NULL;
    batch_t again[1] = {{9, 2, 200, 5, 0}};
    assert_int_equal(raw_insert_key(b.addr, again, 1, 777, &r, &e), FL_OK);
    assert_int_equal(r->items, 0);
    assert_int_equal(r->first_keys[0], first[1].first_key);
    fleet__insert_response__free_unpacked(r, NULL);
    /* The first new batch binds the stream to its key, whatever it is ... */
    batch_t next[1] = {{9, 4, 400, 2, 0}};
    assert_int_equal(raw_insert_key(b.addr, next, 1, 777, &r, &e), FL_OK);
    assert_int_equal(r->items, 2);
    fleet__insert_response__free_unpacked(r, NULL);
    /* ... and from then on the stream is that writer's. */
    batch_t other[1] = {{9, 5, 500, 2, 0}};
    r = NULL;
    assert_int_equal(raw_insert_key(b.addr, other, 1, 2 * 9 + 1, &r, &e), FL_PERMISSION_DENIED);
    assert_null(r);
    /* The checkpoint the shard writes now is version 2 again, with the new key. */
    assert_int_equal(fl_replay_service_checkpoint(b.svc, NULL, NULL, NULL, 0, &e), FL_OK);
    replay_fixture_stop(&b);
    assert_int_equal(fl_table_load_extra(ckpt, NULL, &t, &x2, &n2, &e), FL_OK);
    assert_memory_equal(x2, "FLWALST2", 8);
    assert_int_equal(((const uint8_t *)x2)[40], 777 % 256);
    assert_int_equal(((const uint8_t *)x2)[41], 777 / 256);
    fl_table_destroy(t);
    free(x2);
}

static void test_service_config_errors(void **state) {
    (void)state;
    fl_replay_service_opts_t opts = wal_opts("");
    fl_replay_service_t *s = NULL;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_replay_service_create(&opts, &s, &e), FL_INVALID_ARGUMENT);
    assert_null(s);
    assert_non_null(strstr(e.msg, "replay.wal needs replay.checkpoint_dir"));

    char dir[128];
    subdir(dir, sizeof dir, "svc-cfg");
    opts = wal_opts(dir);
    char ckpt[256];
    snprintf(ckpt, sizeof ckpt, "%s/x.ckpt", dir);
    opts.restore_path = ckpt;
    assert_int_equal(fl_replay_service_create(&opts, &s, &e), FL_INVALID_ARGUMENT);
    opts.restore_path = NULL;
    assert_non_null(strstr(e.msg, "replay.wal"));

    /* A checkpoint written without the log is accepted when there is no log ... */
    fl_replay_service_opts_t plain = opts;
    plain.wal = 0;
    fl_replay_service_t *p = NULL;
    assert_int_equal(fl_replay_service_create(&plain, &p, &e), FL_OK);
    cols_t c;
    cols_make(&c, 3, 10);
    assert_int_equal(fl_table_insert(fl_replay_service_table(p), 3, c.obs, c.actions, c.rewards, c.discounts,
                                     c.next_obs, c.priorities, NULL, &e),
                     FL_OK);
    cols_free(&c);
    assert_int_equal(fl_replay_service_checkpoint(p, NULL, NULL, NULL, 0, &e), FL_OK);
    fl_replay_service_destroy(p);
    assert_int_equal(fl_replay_service_create(&opts, &s, &e), FL_OK);
    fl_replay_info_t in;
    fl_replay_service_info(s, &in);
    assert_int_equal(in.inserted, 3);
    fl_replay_service_destroy(s);
    /* ... and refused once log segments exist beside it (which position is unknown). */
    assert_int_equal(fl_replay_service_create(&plain, &p, &e), FL_OK);
    assert_int_equal(fl_replay_service_checkpoint(p, NULL, NULL, NULL, 0, &e), FL_OK);
    fl_replay_service_destroy(p);
    assert_int_equal(fl_replay_service_create(&opts, &s, &e), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(e.msg, "without replay.wal"));

    /* A folder that does not exist. */
    char nodir[160];
    snprintf(nodir, sizeof nodir, "%s/missing", g_dir);
    opts = wal_opts(nodir);
    assert_int_equal(fl_replay_service_create(&opts, &s, &e), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(e.msg, "missing"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_framing),
        cmocka_unit_test(test_rotation_and_reader),
        cmocka_unit_test(test_torn_tail),
        cmocka_unit_test(test_segment_rollover),
        cmocka_unit_test(test_corruption_refused),
        cmocka_unit_test(test_service_recovers_from_log),
        cmocka_unit_test(test_service_checkpoint_then_log),
        cmocka_unit_test(test_service_reads_v1_stream_records),
        cmocka_unit_test(test_service_config_errors),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
