/* Tests of common/crc32c and common/tfevents: CRC-32C against published check values and
 * a bit-by-bit reference (one-shot, incremental, every alignment), TFRecord's mask; event
 * files read back by a small reader here that checks both CRCs of every record and
 * unpacks the Events with the generated code (the file_version record first, then steps,
 * wall times, tags and float32 values bit for bit, NaN and inf included), the exact bytes
 * of one Event, the refusal of bad arguments naming what was wrong, distinct files for
 * writers opened in the same second, a failed write (file size limit) that leaves the
 * file whole and the writer usable, and the text and hparams plugins' records (checks,
 * then their messages read back). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/tfevents.h"
#include "tensorboard.pb-c.h"

static char g_dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fl_tfev_test_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A fresh empty folder under g_dir for one test. */
static void subdir(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", g_dir, name);
    assert_int_equal(mkdir(out, 0755), 0);
}

/* ---- CRC-32C --------------------------------------------------------------------- */

/* Bit by bit, straight from the definition. */
static uint32_t crc_ref(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

static void test_crc32c_vectors(void **state) {
    (void)state;
    unsigned char b[32];
    assert_int_equal(fl_crc32c("123456789", 9), 0xE3069283u);
    assert_int_equal(fl_crc32c(NULL, 0), 0);
    memset(b, 0, sizeof b);
    assert_int_equal(fl_crc32c(b, 32), 0x8A9136AAu);
    memset(b, 0xff, sizeof b);
    assert_int_equal(fl_crc32c(b, 32), 0x62A8AB43u);
    /* RFC 3720 (iSCSI), B.4: ascending and descending bytes. */
    for (int i = 0; i < 32; i++) b[i] = (unsigned char)i;
    assert_int_equal(fl_crc32c(b, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++) b[i] = (unsigned char)(31 - i);
    assert_int_equal(fl_crc32c(b, 32), 0x113FDB5Cu);
}

static void test_crc32c_incremental_and_aligned(void **state) {
    (void)state;
    unsigned char buf[300];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof buf; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (unsigned char)(x >> 16);
    }
    /* Every start offset (alignment) and length up to 80 against the reference. */
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n <= 80; n++) assert_int_equal(fl_crc32c(buf + off, n), crc_ref(buf + off, n));
    uint32_t whole = fl_crc32c(buf, sizeof buf);
    assert_int_equal(whole, crc_ref(buf, sizeof buf));
    for (size_t cut = 0; cut <= sizeof buf; cut += 7)
        assert_int_equal(fl_crc32c_extend(fl_crc32c(buf, cut), buf + cut, sizeof buf - cut), whole);
    /* Three pieces, and byte by byte. */
    assert_int_equal(fl_crc32c_extend(fl_crc32c_extend(fl_crc32c(buf, 5), buf + 5, 100), buf + 105, 195), whole);
    uint32_t c = 0;
    for (size_t i = 0; i < sizeof buf; i++) c = fl_crc32c_extend(c, buf + i, 1);
    assert_int_equal(c, whole);
}

static void test_crc32c_mask(void **state) {
    (void)state;
    assert_int_equal(fl_crc32c_mask(0), 0xa282ead8u);
    /* ((c >> 15) | (c << 17)) + 0xa282ead8, worked by hand for c = 0xE3069283 ("123456789"):
     * rotr 15 = 0x2507C60D, plus the delta = 0xC78AB0E5. */
    assert_int_equal(fl_crc32c_mask(0xE3069283u), 0xC78AB0E5u);
    assert_int_equal(fl_crc32c_mask(0xffffffffu), 0xa282ead7u); /* wraps mod 2^32 */
    uint32_t vals[] = {0, 1, 0x80000000u, 0xE3069283u, 0xdeadbeefu, 0xffffffffu};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        assert_int_equal(fl_crc32c_unmask(fl_crc32c_mask(vals[i])), vals[i]);
}

/* ---- a reader of event files ------------------------------------------------------ */

typedef struct {
    Tensorboard__Event *ev[64];
    unsigned char *data[64]; /* each record's data bytes */
    size_t len[64];
    int n;
} events_t;

static uint64_t get_le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Reads every record of path, checking the framing and both CRCs, and unpacks each. */
static void read_events(const char *path, events_t *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)size + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    size_t at = 0;
    while (at < (size_t)size) {
        if ((size_t)size - at < 12) fail_msg("%s: %zu stray bytes at offset %zu", path, (size_t)size - at, at);
        uint64_t len = get_le(b + at, 8);
        if (fl_crc32c_mask(crc_ref(b + at, 8)) != (uint32_t)get_le(b + at + 8, 4))
            fail_msg("%s: record %d: bad length CRC", path, out->n);
        if (len > (uint64_t)size - at - 16)
            fail_msg("%s: record %d: length %llu past the end", path, out->n, (unsigned long long)len);
        const unsigned char *d = b + at + 12;
        if (fl_crc32c_mask(crc_ref(d, len)) != (uint32_t)get_le(d + len, 4))
            fail_msg("%s: record %d: bad data CRC", path, out->n);
        assert_true(out->n < 64);
        out->ev[out->n] = tensorboard__event__unpack(NULL, len, d);
        if (!out->ev[out->n]) fail_msg("%s: record %d does not unpack as an Event", path, out->n);
        out->data[out->n] = malloc(len ? len : 1);
        memcpy(out->data[out->n], d, len);
        out->len[out->n] = len;
        out->n++;
        at += 16 + len;
    }
    free(b);
}

static void free_events(events_t *e) {
    for (int i = 0; i < e->n; i++) {
        tensorboard__event__free_unpacked(e->ev[i], NULL);
        free(e->data[i]);
    }
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- the writer ------------------------------------------------------------------- */

static void test_file_name_and_version_record(void **state) {
    (void)state;
    char dir[128];
    subdir(dir, sizeof dir, "name");
    fl_err_t err;
    fl_err_init(&err);
    fl_tfevents_t *w = NULL;
    double t0 = (double)time(NULL);
    if (fl_tfevents_open(dir, &w, &err) != FL_OK) fail_msg("open: %s", err.msg);
    double t1 = (double)time(NULL) + 1;
    const char *p = fl_tfevents_path(w);
    char host[128] = {0};
    gethostname(host, sizeof host - 1);
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s/events.out.tfevents.", dir);
    assert_memory_equal(p, prefix, strlen(prefix));
    long long secs = 0;
    int used = 0;
    assert_int_equal(sscanf(p + strlen(prefix), "%lld%n", &secs, &used), 1);
    assert_true(secs >= (long long)t0 && secs < (long long)t1);
    char rest[256];
    snprintf(rest, sizeof rest, ".%s.%ld.", host, (long)getpid());
    const char *q = p + strlen(prefix) + used;
    assert_memory_equal(q, rest, strlen(rest));
    q += strlen(rest);
    assert_true(*q >= '0' && *q <= '9');
    while (*q >= '0' && *q <= '9') q++;
    assert_int_equal(*q, '\0');

    /* Readable at once, before close: the version record is already in the file. */
    events_t e;
    read_events(p, &e);
    assert_int_equal(e.n, 1);
    assert_int_equal(e.ev[0]->what_case, TENSORBOARD__EVENT__WHAT_FILE_VERSION);
    assert_string_equal(e.ev[0]->file_version, "brain.Event:2");
    assert_int_equal(e.ev[0]->step, 0);
    /* time() reads the kernel's coarse clock, the writer a precise one: they may
     * disagree by a tick either way across a second boundary. */
    assert_true(e.ev[0]->wall_time >= t0 - 1 && e.ev[0]->wall_time <= t1 + 1);
    free_events(&e);
    fl_tfevents_close(w);
    fl_tfevents_close(NULL);
}

static void test_scalars_read_back(void **state) {
    (void)state;
    char dir[128];
    subdir(dir, sizeof dir, "scalars");
    fl_err_t err;
    fl_err_init(&err);
    fl_tfevents_t *w = NULL;
    assert_int_equal(fl_tfevents_open(dir, &w, &err), FL_OK);
    const char *tags[] = {"eval/return_mean", "env/steps_per_s", "loss/td", "x/\xc3\xbc\xe2\x82\xac"};
    /* Each row: step, wall time, 4 values (0.1 and 1/3 are not float32 numbers; 16777217 is
     * 2^24 + 1, which rounds to 2^24; 1e300 and -1e39 are past float32's range). */
    struct {
        int64_t step;
        double wall;
        double v[4];
    } rows[] = {
        {0, 1700000000.25, {0.1, -1.0 / 3.0, 16777217.0, 0.0}},
        {1, 1700000000.5, {-0.0, 1e300, -1e39, FLT_MAX}},
        {4294967296LL + 7, 1700000123.000001, {NAN, INFINITY, -INFINITY, 1e-50}},
        {INT64_MAX, 1.5, {-123.456, 1e-40, -2.5, 65504.0}},
        {-3, 0.0, {3.0e38, -7.0, 0.5, 1.0}},
    };
    int nrows = (int)(sizeof rows / sizeof rows[0]);
    for (int r = 0; r < nrows; r++)
        if (fl_tfevents_scalars(w, rows[r].step, rows[r].wall, 4, tags, rows[r].v, &err) != FL_OK)
            fail_msg("row %d: %s", r, err.msg);
    assert_int_equal(fl_tfevents_scalar(w, "single", 99, 2.0, 0.75, &err), FL_OK);

    events_t e;
    read_events(fl_tfevents_path(w), &e);
    assert_int_equal(e.n, 1 + nrows + 1);
    assert_int_equal(e.ev[0]->what_case, TENSORBOARD__EVENT__WHAT_FILE_VERSION);
    for (int r = 0; r < nrows; r++) {
        const Tensorboard__Event *ev = e.ev[1 + r];
        assert_int_equal(ev->what_case, TENSORBOARD__EVENT__WHAT_SUMMARY);
        assert_true(ev->step == rows[r].step);
        assert_memory_equal(&ev->wall_time, &rows[r].wall, sizeof(double));
        assert_int_equal(ev->summary->n_value, 4);
        for (int i = 0; i < 4; i++) {
            const Tensorboard__Summary__Value *v = ev->summary->value[i];
            assert_string_equal(v->tag, tags[i]);
            assert_int_equal(v->value_case, TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
            double d = rows[r].v[i];
            /* past FLT_MAX + half its ulp, round to nearest gives inf */
            float want = isnan(d) ? NAN : fabs(d) >= 0x1.ffffffp127 ? (d > 0 ? INFINITY : -INFINITY) : (float)d;
            if (isnan(d))
                assert_true(isnan(v->simple_value));
            else if (f32_bits(v->simple_value) != f32_bits(want))
                fail_msg("row %d tag %s: got %a, expected %a", r, tags[i], (double)v->simple_value, (double)want);
        }
    }
    /* The points the rows were chosen for, spelled out. */
    assert_true(e.ev[1]->summary->value[0]->simple_value == 0.1f);
    assert_true((double)e.ev[1]->summary->value[0]->simple_value != 0.1);
    assert_true(e.ev[1]->summary->value[2]->simple_value == 16777216.0f);
    assert_int_equal(f32_bits(e.ev[2]->summary->value[0]->simple_value), 0x80000000u); /* -0 */
    assert_true(isinf(e.ev[2]->summary->value[1]->simple_value) && e.ev[2]->summary->value[1]->simple_value > 0);
    assert_true(isinf(e.ev[2]->summary->value[2]->simple_value) && e.ev[2]->summary->value[2]->simple_value < 0);
    assert_true(e.ev[2]->summary->value[3]->simple_value == FLT_MAX);
    assert_true(isinf(e.ev[3]->summary->value[1]->simple_value));
    assert_int_equal(f32_bits(e.ev[3]->summary->value[3]->simple_value), 0);
    const Tensorboard__Event *last = e.ev[nrows + 1];
    assert_int_equal(last->step, 99);
    assert_int_equal(last->summary->n_value, 1);
    assert_string_equal(last->summary->value[0]->tag, "single");
    assert_true(last->summary->value[0]->simple_value == 0.75f);
    free_events(&e);
    fl_tfevents_close(w);
}

/* The wire bytes of one Event, by hand from the field numbers of TensorBoard's
 * event.proto and summary.proto: a zero value is present (it is a oneof member). */
static void test_event_bytes(void **state) {
    (void)state;
    char dir[128];
    subdir(dir, sizeof dir, "bytes");
    fl_err_t err;
    fl_err_init(&err);
    fl_tfevents_t *w = NULL;
    assert_int_equal(fl_tfevents_open(dir, &w, &err), FL_OK);
    assert_int_equal(fl_tfevents_scalar(w, "a", 300, 2.0, 0.0, &err), FL_OK);
    static const unsigned char want[] = {
        0x09, 0,    0,    0, 0, 0, 0, 0, 0x40, /* field 1 wall_time, fixed64: 2.0 */
        0x10, 0xac, 0x02,                      /* field 2 step, varint: 300 */
        0x2a, 0x0a,                            /* field 5 summary, 10 bytes */
        0x0a, 0x08,                            /*   field 1 value, 8 bytes */
        0x0a, 0x01, 'a',                       /*     field 1 tag */
        0x15, 0,    0,    0, 0,                /*     field 2 simple_value, fixed32: 0.0f */
    };
    events_t e;
    read_events(fl_tfevents_path(w), &e);
    assert_int_equal(e.n, 2);
    assert_int_equal(e.len[1], sizeof want);
    assert_memory_equal(e.data[1], want, sizeof want);
    free_events(&e);
    fl_tfevents_close(w);
}

static void expect_invalid(fl_status s, const fl_err_t *err, const char *frag) {
    if (s != FL_INVALID_ARGUMENT) fail_msg("status %d (%s), expected FL_INVALID_ARGUMENT", (int)s, err->msg);
    if (!strstr(err->msg, frag)) fail_msg("message '%s' lacks '%s'", err->msg, frag);
}

static void test_bad_arguments(void **state) {
    (void)state;
    char dir[128], path[256];
    subdir(dir, sizeof dir, "bad");
    fl_err_t err;
    fl_err_init(&err);
    fl_tfevents_t *w = NULL;
    assert_int_equal(fl_tfevents_open(dir, &w, &err), FL_OK);
    snprintf(path, sizeof path, "%s", fl_tfevents_path(w));
    long size = file_size(path);
    double v[4097] = {0};
    const char *tags[4097];
    for (int i = 0; i < 4097; i++) tags[i] = "t";

    expect_invalid(fl_tfevents_scalars(w, 1, 1.0, 0, tags, v, &err), &err, "0 values in one event; expected 1 to 4096");
    assert_non_null(strstr(err.msg, path));
    expect_invalid(fl_tfevents_scalars(w, 1, 1.0, -1, tags, v, &err), &err, "-1 values");
    expect_invalid(fl_tfevents_scalars(w, 1, 1.0, 4097, tags, v, &err), &err, "4097 values");
    expect_invalid(fl_tfevents_scalars(w, 1, 1.0, 2, NULL, v, &err), &err, "no tag list");
    expect_invalid(fl_tfevents_scalars(w, 1, 1.0, 2, tags, NULL, &err), &err, "no value list");
    const char *empty[] = {"ok", ""};
    expect_invalid(fl_tfevents_scalars(w, 1, 1.0, 2, empty, v, &err), &err, "tag 1 is empty; expected 1 to 256 bytes");
    const char *null_tag[] = {NULL};
    expect_invalid(fl_tfevents_scalars(w, 1, 1.0, 1, null_tag, v, &err), &err, "tag 0 is NULL");
    char long_tag[258];
    memset(long_tag, 'x', 257);
    long_tag[257] = '\0';
    expect_invalid(fl_tfevents_scalar(w, long_tag, 1, 1.0, 0.0, &err), &err, "longer than 256 bytes");
    const char *bad_utf8[] = {"\xff", "a\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xf4\x90\x80\x80"};
    for (size_t i = 0; i < sizeof bad_utf8 / sizeof bad_utf8[0]; i++)
        expect_invalid(fl_tfevents_scalar(w, bad_utf8[i], 1, 1.0, 0.0, &err), &err, "tag 0 is not valid UTF-8");
    expect_invalid(fl_tfevents_scalar(NULL, "t", 1, 1.0, 0.0, &err), &err, "no writer");
    assert_int_equal(file_size(path), size); /* nothing written */

    /* The limits themselves are fine. */
    long_tag[256] = '\0';
    assert_int_equal(fl_tfevents_scalar(w, long_tag, 1, 1.0, 0.0, &err), FL_OK);
    assert_int_equal(fl_tfevents_scalars(w, 2, 1.0, 4096, tags, v, &err), FL_OK);
    events_t e;
    read_events(path, &e);
    assert_int_equal(e.n, 3);
    assert_int_equal(strlen(e.ev[1]->summary->value[0]->tag), 256);
    assert_int_equal(e.ev[2]->summary->n_value, 4096);
    free_events(&e);
    fl_tfevents_close(w);

    /* open */
    expect_invalid(fl_tfevents_open(NULL, &w, &err), &err, "empty folder");
    assert_null(w);
    expect_invalid(fl_tfevents_open("", &w, &err), &err, "empty folder");
    snprintf(path, sizeof path, "%s/missing", g_dir);
    assert_int_equal(fl_tfevents_open(path, &w, &err), FL_NOT_FOUND);
    assert_null(w);
    assert_non_null(strstr(err.msg, "missing/events.out.tfevents."));
    snprintf(path, sizeof path, "%s/a_file", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(fl_tfevents_open(path, &w, &err), FL_NOT_FOUND);
    assert_non_null(strstr(err.msg, "a_file/events.out.tfevents."));
}

/* Text and hparams records: what is refused names what was wrong and writes nothing;
 * what is written reads back as TensorBoard's messages (the plugins' metadata, the
 * tensors, the hparams plugin's data with a bool's domain and a string's choices). */
static void test_text_and_hparams(void **state) {
    (void)state;
    char dir[128], path[256];
    subdir(dir, sizeof dir, "plugins");
    fl_err_t err;
    fl_err_init(&err);
    fl_tfevents_t *w = NULL;
    assert_int_equal(fl_tfevents_open(dir, &w, &err), FL_OK);
    snprintf(path, sizeof path, "%s", fl_tfevents_path(w));
    long size = file_size(path);
    expect_invalid(fl_tfevents_text(w, "t", 0, 1.0, "\xff", &err), &err, "the text of t is not valid UTF-8");
    expect_invalid(fl_tfevents_text(w, "t", 0, 1.0, NULL, &err), &err, "the text of t is NULL");
    expect_invalid(fl_tfevents_text(w, "", 0, 1.0, "x", &err), &err, "tag 0 is empty");
    expect_invalid(fl_tfevents_text(NULL, "t", 0, 1.0, "x", &err), &err, "no writer");
    const char *const modes[] = {"apex", "gorila"};
    fl_tfevents_hparam_t hp[3] = {
        {.name = "learner.lr", .description = "learning rate", .kind = FL_TFEVENTS_HP_NUMBER, .number = 0.003},
        {.name = "learner.mode",
         .kind = FL_TFEVENTS_HP_STRING,
         .string = "gorila",
         .choices = modes,
         .n_choices = 2,
         .differs = 1},
        {.name = "run.deterministic", .kind = FL_TFEVENTS_HP_BOOL, .boolean = 1},
    };
    const fl_tfevents_metric_t mt[] = {{"eval/return_mean", "evaluation return", NULL, 1}};
    expect_invalid(fl_tfevents_hparams(w, 1.0, NULL, 0, hp, 1, mt, &err), &err, "0 hparams and 1 metrics");
    expect_invalid(fl_tfevents_hparams(w, 1.0, NULL, 3, hp, 1, NULL, &err), &err, "3 hparams and 1 metrics");
    hp[1].string = "\xc0\xaf";
    expect_invalid(fl_tfevents_hparams(w, 1.0, NULL, 3, hp, 1, mt, &err), &err, "hparam learner.mode: its value");
    hp[1].string = "gorila";
    hp[0].name = "";
    expect_invalid(fl_tfevents_hparams(w, 1.0, NULL, 3, hp, 1, mt, &err), &err, "hparam 0 is empty");
    hp[0].name = "learner.lr";
    const fl_tfevents_metric_t bad_metric[] = {{"", NULL, NULL, 0}};
    expect_invalid(fl_tfevents_hparams(w, 1.0, NULL, 3, hp, 1, bad_metric, &err), &err, "metric 0 is empty");
    assert_int_equal(file_size(path), size); /* nothing written */

    assert_int_equal(fl_tfevents_text(w, "run/config", 7, 2.0, "| a | b |", &err), FL_OK);
    assert_int_equal(fl_tfevents_hparams(w, 3.0, "group", 3, hp, 1, mt, &err), FL_OK);
    assert_int_equal(fl_tfevents_session_end(w, 4.0, 0, &err), FL_OK);
    events_t e;
    read_events(path, &e);
    assert_int_equal(e.n, 5);
    const Tensorboard__Summary__Value *t = e.ev[1]->summary->value[0];
    assert_int_equal(e.ev[1]->step, 7);
    assert_string_equal(t->metadata->plugin_data->plugin_name, "text");
    assert_int_equal(t->metadata->plugin_data->content.len, 0);
    assert_int_equal(t->tensor->dtype, TENSORBOARD__DATA_TYPE__DT_STRING);
    assert_int_equal(t->tensor->string_val[0].len, 9);
    assert_memory_equal(t->tensor->string_val[0].data, "| a | b |", 9);
    Tensorboard__HParamsPluginData *d[3];
    for (int i = 0; i < 3; i++) {
        const Tensorboard__Summary__Value *v = e.ev[2 + i]->summary->value[0];
        assert_string_equal(v->metadata->plugin_data->plugin_name, "hparams");
        d[i] = tensorboard__hparams_plugin_data__unpack(NULL, v->metadata->plugin_data->content.len,
                                                        v->metadata->plugin_data->content.data);
        assert_non_null(d[i]);
    }
    const Tensorboard__Experiment *x = d[0]->experiment;
    assert_int_equal(d[0]->data_case, TENSORBOARD__HPARAMS_PLUGIN_DATA__DATA_EXPERIMENT);
    assert_int_equal(x->n_hparam_infos, 3);
    assert_string_equal(x->hparam_infos[0]->description, "learning rate");
    assert_int_equal(x->hparam_infos[0]->type, TENSORBOARD__HPARAM_DATA_TYPE__DATA_TYPE_FLOAT64);
    assert_int_equal(x->hparam_infos[0]->domain_case, TENSORBOARD__HPARAM_INFO__DOMAIN__NOT_SET);
    assert_int_equal(x->hparam_infos[1]->type, TENSORBOARD__HPARAM_DATA_TYPE__DATA_TYPE_STRING);
    assert_true(x->hparam_infos[1]->differs);
    assert_int_equal(x->hparam_infos[1]->domain_discrete->n_values, 2);
    assert_string_equal(x->hparam_infos[1]->domain_discrete->values[1]->string_value, "gorila");
    assert_int_equal(x->hparam_infos[2]->type, TENSORBOARD__HPARAM_DATA_TYPE__DATA_TYPE_BOOL);
    assert_int_equal(x->hparam_infos[2]->domain_discrete->n_values, 2);
    assert_int_equal(x->hparam_infos[2]->domain_discrete->values[1]->bool_value, 1);
    assert_int_equal(x->metric_infos[0]->dataset_type, TENSORBOARD__DATASET_TYPE__DATASET_VALIDATION);
    assert_string_equal(x->metric_infos[0]->display_name, "evaluation return");
    const Tensorboard__SessionStartInfo *st = d[1]->session_start_info;
    assert_string_equal(st->group_name, "group");
    assert_true(st->start_time_secs == 3.0);
    assert_int_equal(st->n_hparams, 3);
    assert_true(st->hparams[0]->value->number_value == 0.003);
    assert_string_equal(st->hparams[1]->value->string_value, "gorila");
    assert_int_equal(st->hparams[2]->value->bool_value, 1);
    assert_int_equal(d[2]->session_end_info->status, TENSORBOARD__STATUS__STATUS_FAILURE);
    for (int i = 0; i < 3; i++) tensorboard__hparams_plugin_data__free_unpacked(d[i], NULL);
    free_events(&e);
    fl_tfevents_close(w);
}

static void test_writers_get_distinct_files(void **state) {
    (void)state;
    char dir[128];
    subdir(dir, sizeof dir, "distinct");
    fl_err_t err;
    fl_err_init(&err);
    fl_tfevents_t *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(fl_tfevents_open(dir, &a, &err), FL_OK);
    /* Whatever the next two names in this second and the next one will be, they exist
     * already (empty files of someone else): the writer must go past them. */
    const char *pa = fl_tfevents_path(a);
    const char *dot = strrchr(pa, '.');
    unsigned long seq = strtoul(dot + 1, NULL, 10);
    long long secs = 0;
    sscanf(strstr(pa, "tfevents.") + 9, "%lld", &secs);
    char host[128] = {0};
    gethostname(host, sizeof host - 1);
    char taken[4][512];
    for (int k = 0; k < 4; k++) {
        snprintf(taken[k], sizeof taken[k], "%s/events.out.tfevents.%lld.%s.%ld.%lu", dir, secs + k / 2, host,
                 (long)getpid(), seq + 1 + k % 2);
        FILE *f = fopen(taken[k], "w");
        assert_non_null(f);
        fputs("theirs", f);
        fclose(f);
    }
    assert_int_equal(fl_tfevents_open(dir, &b, &err), FL_OK);
    assert_int_equal(fl_tfevents_open(dir, &c, &err), FL_OK);
    assert_string_not_equal(fl_tfevents_path(a), fl_tfevents_path(b));
    assert_string_not_equal(fl_tfevents_path(b), fl_tfevents_path(c));
    assert_string_not_equal(fl_tfevents_path(a), fl_tfevents_path(c));
    for (int k = 0; k < 4; k++) {
        assert_string_not_equal(fl_tfevents_path(b), taken[k]);
        assert_string_not_equal(fl_tfevents_path(c), taken[k]);
        assert_int_equal(file_size(taken[k]), 6); /* untouched */
    }
    /* Each file holds its own writer's records. */
    assert_int_equal(fl_tfevents_scalar(a, "w", 1, 1.0, 1.0, &err), FL_OK);
    assert_int_equal(fl_tfevents_scalar(b, "w", 1, 1.0, 2.0, &err), FL_OK);
    assert_int_equal(fl_tfevents_scalar(c, "w", 1, 1.0, 3.0, &err), FL_OK);
    fl_tfevents_t *ws[] = {a, b, c};
    for (int k = 0; k < 3; k++) {
        events_t e;
        read_events(fl_tfevents_path(ws[k]), &e);
        assert_int_equal(e.n, 2);
        assert_true(e.ev[1]->summary->value[0]->simple_value == (float)(k + 1));
        free_events(&e);
        fl_tfevents_close(ws[k]);
    }
}

/* A write that fails half way (the file size limit stands in for a full disk) is
 * FL_IO_ERROR naming the file; the partial record is cut off and later writes work. */
static void test_write_error_keeps_file_whole(void **state) {
    (void)state;
    char dir[128], path[256];
    subdir(dir, sizeof dir, "full");
    fl_err_t err;
    fl_err_init(&err);
    fl_tfevents_t *w = NULL;
    assert_int_equal(fl_tfevents_open(dir, &w, &err), FL_OK);
    snprintf(path, sizeof path, "%s", fl_tfevents_path(w));
    assert_int_equal(fl_tfevents_scalar(w, "before", 1, 1.0, 1.0, &err), FL_OK);
    long size = file_size(path);

    enum { N = 200 };
    char names[N][40];
    const char *tags[N];
    double v[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "group/a_rather_long_tag_name_%03d", i);
        tags[i] = names[i];
        v[i] = i;
    }
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = (rlim_t)size + 100; /* the record needs several kB */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    fl_status s = fl_tfevents_scalars(w, 2, 2.0, N, tags, v, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    if (s != FL_IO_ERROR) fail_msg("status %d (%s), expected FL_IO_ERROR", (int)s, err.msg);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "cannot write"));
    assert_int_equal(file_size(path), size);

    assert_int_equal(fl_tfevents_scalars(w, 3, 3.0, N, tags, v, &err), FL_OK);
    events_t e;
    read_events(path, &e);
    assert_int_equal(e.n, 3);
    assert_int_equal(e.ev[1]->step, 1);
    assert_int_equal(e.ev[2]->step, 3);
    assert_int_equal(e.ev[2]->summary->n_value, N);
    assert_string_equal(e.ev[2]->summary->value[N - 1]->tag, "group/a_rather_long_tag_name_199");
    free_events(&e);
    fl_tfevents_close(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vectors),
        cmocka_unit_test(test_crc32c_incremental_and_aligned),
        cmocka_unit_test(test_crc32c_mask),
        cmocka_unit_test(test_file_name_and_version_record),
        cmocka_unit_test(test_scalars_read_back),
        cmocka_unit_test(test_event_bytes),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_text_and_hparams),
        cmocka_unit_test(test_writers_get_distinct_files),
        cmocka_unit_test(test_write_error_keeps_file_whole),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
