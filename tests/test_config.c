/* test_config: defaults, INI loading, --set, error messages, dump round trip, argv handling.
 *
 * Expectations about every key are derived from FL_CONFIG_KEYS directly (not through the
 * module), so a row added later is covered without editing this file. Files are written
 * under a mkdtemp directory that the group teardown removes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"

/* ---- temporary files ------------------------------------------------------------ */

static char g_dir[] = "/tmp/fleet_test_config_XXXXXX";
static char *g_files[256];
static int g_nfiles;

static int group_setup(void **state) {
    (void)state;
    return mkdtemp(g_dir) ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    for (int i = 0; i < g_nfiles; i++) {
        unlink(g_files[i]);
        free(g_files[i]);
    }
    return rmdir(g_dir);
}

/* The path of `name` in the temporary directory (remembered for removal). */
static const char *tmp_path(const char *name) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", g_dir, name);
    for (int i = 0; i < g_nfiles; i++)
        if (strcmp(g_files[i], buf) == 0) return g_files[i];
    assert_true(g_nfiles < 256);
    g_files[g_nfiles] = strdup(buf);
    assert_non_null(g_files[g_nfiles]);
    return g_files[g_nfiles++];
}

static const char *write_tmp(const char *name, const char *text) {
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
    return path;
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 16);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

#define assert_contains(haystack, needle)                                                                \
    do {                                                                                                 \
        if (!strstr((haystack), (needle))) fail_msg("'%s' does not contain '%s'", (haystack), (needle)); \
    } while (0)

/* ---- expectations from the key table -------------------------------------------- */

/* Every field equals its default as written in the table. */
#define EXPECT_DEF_INT(f, n, d) assert_int_equal(c.f, (int64_t)(d));
#define EXPECT_DEF_FLOAT(f, n, d)                      \
    do {                                               \
        double want = (d);                             \
        assert_memory_equal(&c.f, &want, sizeof want); \
    } while (0);
#define EXPECT_DEF_BOOL(f, n, d) assert_int_equal(c.f, (d));
#define EXPECT_DEF_STRING(f, n, d) assert_string_equal(c.f, (d));
#define EXPECT_DEF_ENUM(f, n, d) assert_string_equal(fl_config_enum_name(n, (int)c.f), (d));
#define EXPECT_DEF(s, k, t, d, lo, hi, ch, h) EXPECT_DEF_##t(s##_##k, #s "." #k, d)

/* Two structs hold bit-identical values in every field. */
#define SAME_INT(f) assert_int_equal(a->f, b->f);
#define SAME_FLOAT(f) \
    if (memcmp(&a->f, &b->f, sizeof(double)) != 0) fail_msg("%s differs: %.17g vs %.17g", #f, a->f, b->f);
#define SAME_BOOL(f) assert_int_equal(a->f, b->f);
#define SAME_STRING(f) assert_string_equal(a->f, b->f);
#define SAME_ENUM(f) assert_int_equal(a->f, b->f);
#define SAME(s, k, t, d, lo, hi, ch, h) SAME_##t(s##_##k)

static void assert_same(const fl_config_t *a, const fl_config_t *b) {
    FL_CONFIG_KEYS(SAME)
    assert_true(fl_config_equal(a, b));
}

/* Moves every field away from its default to an awkward but accepted value: INT to its
 * maximum, FLOAT to a full-precision point inside its range, BOOL flipped, ENUM to its last
 * choice, STRING to text with quotes, '=', ':', ';' and '#' and outer spaces. */
static int last_choice(const char *choices) {
    int n = 0;
    for (const char *p = choices; *p; p++) n += *p == '|';
    return n;
}
#define ODD_INT(f, d, lo, hi, ch) c->f = (int64_t)(hi);
#define ODD_FLOAT(f, d, lo, hi, ch) c->f = (lo) + ((double)(hi) - (lo)) * 0.123456789012345678;
#define ODD_BOOL(f, d, lo, hi, ch) c->f = !(d);
#define ODD_STRING(f, d, lo, hi, ch) snprintf(c->f, sizeof c->f, "  \"%s\" a=b: c;d #e '%s'  ", #f, d);
#define ODD_ENUM(f, d, lo, hi, ch) c->f = last_choice(ch);
#define ODD(s, k, t, d, lo, hi, ch, h) ODD_##t(s##_##k, d, lo, hi, ch)

static void set_odd_values(fl_config_t *c) {
    FL_CONFIG_KEYS(ODD)
}

/* ---- defaults ------------------------------------------------------------------- */

static void test_defaults_match_table(void **state) {
    (void)state;
    fl_config_t c;
    memset(&c, 0xA5, sizeof c);
    fl_config_defaults(&c);
    FL_CONFIG_KEYS(EXPECT_DEF)

    /* Spot checks against docs/design.md, "Algorithm defaults", written out: the default
     * experiment's settings (configs/cartpole.ini's), with the Ape-X ones it keeps. */
    assert_int_equal(c.learner_batch_size, 128);
    assert_int_equal(c.replay_capacity, 1000000);
    assert_int_equal(c.replay_min_size_to_sample, 1000);
    assert_true(c.replay_samples_per_insert == 8);
    assert_int_equal(c.actor_sync_every, 400);
    assert_int_equal(c.learner_n_step, 3);
    assert_true(c.learner_lr == 0.003);
    assert_int_equal(c.learner_target_update, 200);
    assert_true(c.replay_alpha == 0.6);
    assert_int_equal(c.run_stop_at_target, 1);
    assert_int_equal(c.learner_mode, FL_CFG_MODE_APEX);
    assert_int_equal(c.learner_optimizer, FL_CFG_OPTIM_ADAM);
    assert_int_equal(c.env_num_envs, 4);
    assert_string_equal(c.env_name, "cartpole");
    assert_string_equal(c.run_name, "default");
    assert_string_equal(c.model_spec, "dense(128) relu dense(128) relu dueling");
}

/* Every default is accepted by its own key (range, choices) and by the cross-key checks. */
static void test_defaults_are_valid(void **state) {
    (void)state;
    fl_config_t c, d;
    fl_config_defaults(&c);
    fl_config_defaults(&d);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_config_validate(&c, &err), FL_OK);
    assert_true(fl_config_key_count() > 40);
    assert_null(fl_config_key_name(fl_config_key_count()));
    for (size_t i = 0; i < fl_config_key_count(); i++) {
        const char *name = fl_config_key_name(i);
        char value[FL_CONFIG_STRING_MAX], section[64];
        assert_int_equal(fl_config_get_string(&c, name, value, sizeof value, &err), FL_OK);
        const char *dot = strchr(name, '.');
        assert_non_null(dot);
        snprintf(section, sizeof section, "%.*s", (int)(dot - name), name);
        fl_status st = fl_config_set_kv(&d, section, dot + 1, value, "default", &err);
        if (st != FL_OK) fail_msg("default of %s rejected: %s", name, err.msg);
    }
    assert_same(&c, &d);
}

/* ---- dump and load -------------------------------------------------------------- */

static void test_dump_round_trip(void **state) {
    (void)state;
    fl_config_t a, b;
    fl_config_defaults(&a);
    set_odd_values(&a);
    a.learner_lr = 6.25e-5;
    a.learner_adam_eps = 1e-8;
    a.replay_priority_eps = 0.1 + 0.2; /* 0.30000000000000004 */
    a.run_target_return = -1e-300;
    a.run_max_seconds = 5e-324; /* the smallest subnormal */
    a.learner_rmsprop_decay = nextafter(1.0, 0.0);
    a.learner_grad_clip = 0.0;
    a.actor_eps_base = 1.0 / 3.0;
    a.run_seed = 0;
    memset(a.model_spec, 'm', FL_CONFIG_STRING_MAX - 1); /* a line of 4 KB and more: no line limit */
    a.model_spec[FL_CONFIG_STRING_MAX - 1] = '\0';
    snprintf(a.env_plugin, sizeof a.env_plugin, "\"quoted\"");
    a.run_out_dir[0] = '\0';
    snprintf(a.run_bind_host, sizeof a.run_bind_host, "\"");
    a.replay_capacity = 1000000000000;
    fl_err_t err;
    fl_err_init(&err);

    const char *path = tmp_path("dump.ini");
    assert_int_equal(fl_config_write_file(&a, path, &err), FL_OK);
    fl_config_defaults(&b);
    fl_status st = fl_config_load_file(&b, path, &err);
    if (st != FL_OK) fail_msg("reload failed: %s", err.msg);
    assert_same(&a, &b);

    /* The dump is readable: sections, help comments above keys, short float forms. */
    char *text = read_all(path);
    assert_contains(text, "[learner]\n");
    assert_contains(text,
                    "# transitions per sampled batch\n"
                    "# int: an integer in [1, 65536]; default 128\n"
                    "batch_size = ");
    assert_contains(text, "\nlr = 6.25e-05\n");
    assert_contains(text, "\nadam_eps = 1e-08\n");
    assert_contains(text, "\npriority_eps = 0.30000000000000004\n");
    assert_contains(text, "\nplugin = \"\"quoted\"\"\n");
    assert_contains(text, "\nout_dir = \"\"\n");
    free(text);

    /* The same text from memory (a launcher's config handed to a joining actor) reads the
     * same; a bad line there is named by the name given. */
    char *dumped = read_all(path);
    fl_config_defaults(&b);
    assert_int_equal(fl_config_load_string(&b, dumped, "the launcher's config", &err), FL_OK);
    assert_same(&a, &b);
    free(dumped);
    assert_int_equal(fl_config_load_string(&b, "[learner]\nlr = fast\n", "the launcher's config", &err),
                     FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "the launcher's config:2");

    /* fl_config_dump to a stream gives the same text. */
    FILE *f = fopen(tmp_path("dump2.ini"), "w");
    assert_non_null(f);
    assert_int_equal(fl_config_dump(&a, f), FL_OK);
    fclose(f);
    fl_config_defaults(&b);
    assert_int_equal(fl_config_load_file(&b, tmp_path("dump2.ini"), &err), FL_OK);
    assert_same(&a, &b);

    /* Defaults round-trip too. */
    fl_config_defaults(&a);
    assert_int_equal(fl_config_write_file(&a, path, &err), FL_OK);
    set_odd_values(&b);
    assert_int_equal(fl_config_load_file(&b, path, &err), FL_OK);
    assert_same(&a, &b);
}

/* Which keys take quotes (STRING and ENUM), from the table. */
#define QUOTED_INT 0
#define QUOTED_FLOAT 0
#define QUOTED_BOOL 0
#define QUOTED_STRING 1
#define QUOTED_ENUM 1
#define KEY_QUOTED(s, k, t, d, lo, hi, ch, h) QUOTED_##t,
static const int key_quoted[] = {FL_CONFIG_KEYS(KEY_QUOTED)};

/* Every key survives get_string -> --set, which is what a tool copying a value would do. */
static void test_get_set_round_trip(void **state) {
    (void)state;
    fl_config_t a, b;
    fl_config_defaults(&a);
    set_odd_values(&a);
    fl_config_defaults(&b);
    fl_err_t err;
    assert_int_equal(sizeof key_quoted / sizeof key_quoted[0], fl_config_key_count());
    for (size_t i = 0; i < fl_config_key_count(); i++) {
        const char *name = fl_config_key_name(i);
        char value[FL_CONFIG_STRING_MAX], assignment[2 * FL_CONFIG_STRING_MAX + 8];
        assert_int_equal(fl_config_get_string(&a, name, value, sizeof value, &err), FL_OK);
        /* Quoted so that the outer spaces of the odd strings survive trimming. */
        snprintf(assignment, sizeof assignment, key_quoted[i] ? "%s=\"%s\"" : "%s=%s", name, value);
        fl_status st = fl_config_set(&b, assignment, &err);
        if (st != FL_OK) fail_msg("%s: %s", name, err.msg);
    }
    assert_same(&a, &b);
}

static void test_dump_refuses_unloadable_values(void **state) {
    (void)state;
    fl_config_t c;
    fl_err_t err;
    fl_config_defaults(&c);
    c.learner_lr = NAN;
    FILE *f = fopen(tmp_path("bad_dump_stream.ini"), "w");
    assert_non_null(f);
    assert_int_equal(fl_config_dump(&c, f), FL_INVALID_ARGUMENT);
    fclose(f);
    assert_int_equal(fl_config_write_file(&c, tmp_path("bad_dump.ini"), &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "learner.lr");
    assert_contains(err.msg, "bad_dump.ini");
    assert_int_equal(access(tmp_path("bad_dump.ini"), F_OK), -1); /* nothing half-written left */

    fl_config_defaults(&c);
    snprintf(c.run_name, sizeof c.run_name, "two\nlines");
    assert_int_equal(fl_config_write_file(&c, tmp_path("bad_dump.ini"), &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "run.name");
    assert_contains(err.msg, "control character");

    fl_config_defaults(&c);
    assert_int_equal(fl_config_write_file(&c, "/nonexistent-dir/x.ini", &err), FL_IO_ERROR);
    assert_contains(err.msg, "/nonexistent-dir/x.ini");
}

/* ---- loading files -------------------------------------------------------------- */

/* A key given twice in one file is an error naming both lines, also across a reopened
 * section; the same key in another section is another key; --set still overrides. */
static void test_file_key_twice(void **state) {
    (void)state;
    const char *path = write_tmp("twice.ini",
                                 "[learner]\n"
                                 "batch_size = 64\n"
                                 "[env]\n"
                                 "name = cartpole\n"
                                 "[run]\n"
                                 "name = x\n"
                                 "[learner]\n"
                                 "lr = 0.01\n"
                                 "batch_size = 128\n");
    fl_config_t c;
    fl_err_t err;
    fl_config_defaults(&c);
    assert_int_equal(fl_config_load_file(&c, path, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "twice.ini:9: learner.batch_size is given twice in this file (first on line 2)");
    assert_int_equal(c.learner_batch_size, 128); /* *c unchanged on failure */

    path = write_tmp("once.ini", "[learner]\nbatch_size = 64\n[run]\nname = x\n[env]\nname = cartpole\n");
    assert_int_equal(fl_config_load_file(&c, path, &err), FL_OK);
    assert_int_equal(fl_config_set(&c, "learner.batch_size=32", &err), FL_OK);
    assert_int_equal(c.learner_batch_size, 32);
    /* Loading the same file twice is two files: each sets each key once. */
    assert_int_equal(fl_config_load_file(&c, path, &err), FL_OK);
    assert_int_equal(c.learner_batch_size, 64);
}

static void test_file_overrides(void **state) {
    (void)state;
    char text[2048];
    snprintf(text, sizeof text,
             "\xEF\xBB\xBF; an experiment\n"
             "# another comment\n"
             "[run]\n"
             "name = \"  spaced name  \"\n"
             "seed=42\n"
             "stop_at_target = No\n"
             "log_level = DEBUG ; inline comment after whitespace\n"
             "\n"
             "[learner]   ; comment after a section\n"
             "  batch_size = 64\n"
             "\tlr = 1e-4\n"
             "optimizer: adam\n"
             "mode = gorila\r\n"
             "[replay] # hash comment after a section\n"
             "capacity = 100000\n"
             "min_size_to_sample = +1000\n"
             "alpha = 0.5 ; %s\n"
             "[env]\n"
             "name = a;b\n"
             "plugin = ./x.so;not a comment\n"
             "[learner]\n"
             "target_update = 100\n",
             "a comment that makes this line longer than two hundred bytes (where libinih's defaults would "
             "cut it), so that the reader must strip an inline comment from a long line as from a short one, "
             "which this sentence makes sure of by going on for a while longer");
    assert_true(strlen(strstr(text, "alpha = ")) - strlen(strstr(text, "[env]")) > 200);
    const char *path = write_tmp("overrides.ini", text);
    fl_config_t c;
    fl_err_t err;
    fl_config_defaults(&c);
    fl_status st = fl_config_load_file(&c, path, &err);
    if (st != FL_OK) fail_msg("%s", err.msg);
    assert_string_equal(c.run_name, "  spaced name  ");
    assert_int_equal(c.run_seed, 42);
    assert_int_equal(c.run_stop_at_target, 0);
    assert_int_equal(c.run_log_level, FL_CFG_LOG_DEBUG);
    assert_int_equal(c.learner_batch_size, 64);
    assert_int_equal(c.learner_target_update, 100); /* a section may be opened again */
    assert_true(c.learner_lr == 1e-4);
    assert_int_equal(c.learner_optimizer, FL_CFG_OPTIM_ADAM);
    assert_int_equal(c.learner_mode, FL_CFG_MODE_GORILA);
    assert_int_equal(c.replay_capacity, 100000);
    assert_int_equal(c.replay_min_size_to_sample, 1000);
    assert_true(c.replay_alpha == 0.5);
    assert_string_equal(c.env_name, "a;b");
    assert_string_equal(c.env_plugin, "./x.so;not a comment");
    /* Keys not in the file keep their defaults. */
    assert_int_equal(c.actor_sync_every, 400);
    assert_string_equal(c.model_spec, "dense(128) relu dense(128) relu dueling");
    assert_true(c.learner_gamma == 0.99);
}

/* One case of a file that must fail: its text, status, and substrings of the message. */
typedef struct {
    const char *text;
    fl_status code;
    const char *want[5];
} bad_file;

static void check_bad_file(int idx, const bad_file *b) {
    char name[64];
    snprintf(name, sizeof name, "bad%02d.ini", idx);
    const char *path = write_tmp(name, b->text);
    fl_config_t c, before;
    fl_config_defaults(&c);
    c.run_seed = 777; /* not a default: the struct must come back untouched */
    before = c;
    fl_err_t err;
    fl_err_init(&err);
    fl_status st = fl_config_load_file(&c, path, &err);
    if (st != b->code)
        fail_msg("case %d: status %s, want %s (%s)", idx, fl_status_name(st), fl_status_name(b->code), err.msg);
    assert_int_equal(err.code, b->code);
    assert_contains(err.msg, path);
    for (int i = 0; i < 5 && b->want[i]; i++) assert_contains(err.msg, b->want[i]);
    assert_same(&c, &before);
}

static void test_file_errors(void **state) {
    (void)state;
    char long_string[400], long_then_error[600];
    snprintf(long_string, sizeof long_string, "[run]\nname = %0300d\n", 7);
    snprintf(long_then_error, sizeof long_then_error, "[run]\nname = %0250d\n; comment\nseed = -1\n", 7);
    const bad_file cases[] = {
        /* unknown section, with a key in it */
        {"[run]\nseed = 3\n\n[nosuch]\nkey = 1\n",
         FL_NOT_FOUND,
         {":5: ", "unknown key 'nosuch.key'", "section [nosuch] does not exist", "sections are run, env, eval, actor"}},
        /* unknown section without keys: reported at its own line */
        {"[nosuch]\n[run]\nseed = 2\n", FL_NOT_FOUND, {":1: ", "unknown section [nosuch]", "sections are run"}},
        {"[lerner]\n", FL_NOT_FOUND, {":1: ", "did you mean [learner]?"}},
        /* unknown key in a known section */
        {"[learner]\nbatchsize = 32\n",
         FL_NOT_FOUND,
         {":2: ", "unknown key 'learner.batchsize'", "did you mean 'learner.batch_size'?", "section [learner] has"}},
        {"[learner]\ncapacity = 10\n", FL_NOT_FOUND, {":2: ", "learner.capacity", "did you mean 'replay.capacity'?"}},
        {"seed = 1\n",
         FL_NOT_FOUND,
         {":1: ", "unknown key 'seed'", "before any [section]", "did you mean 'run.seed'?"}},
        /* out of range */
        {"[run]\n[learner]\nbatch_size = 0\n",
         FL_INVALID_ARGUMENT,
         {":3: learner.batch_size = 0 is out of range (expected an integer in [1, 65536])"}},
        {"[replay]\nalpha = 10.5\n",
         FL_INVALID_ARGUMENT,
         {":2: ", "replay.alpha = 10.5", "out of range", "a number in [0, 10]"}},
        {"[learner]\nhuber_delta = 1e-7\n", FL_INVALID_ARGUMENT, {"learner.huber_delta = 1e-7", "[1e-06, 1e+06]"}},
        {"[run]\nseed = 99999999999999999999\n",
         FL_INVALID_ARGUMENT,
         {"run.seed = 99999999999999999999", "out of range", "[0, 2147483647]"}},
        {"[run]\nseed = -1\n", FL_INVALID_ARGUMENT, {"run.seed = -1", "out of range"}},
        {"[run]\nmax_seconds = 1e999\n", FL_INVALID_ARGUMENT, {"run.max_seconds = 1e999", "out of range"}},
        /* not a number */
        {"[learner]\nbatch_size = 32abc\n",
         FL_INVALID_ARGUMENT,
         {":2: ", "learner.batch_size = 32abc", "not an integer", "[1, 65536]"}},
        {"[learner]\nbatch_size = 1.5\n", FL_INVALID_ARGUMENT, {"learner.batch_size = 1.5", "not an integer"}},
        {"[learner]\nbatch_size = 1e3\n", FL_INVALID_ARGUMENT, {"learner.batch_size = 1e3", "not an integer"}},
        {"[learner]\nbatch_size = 0x10\n", FL_INVALID_ARGUMENT, {"learner.batch_size = 0x10", "not an integer"}},
        {"[learner]\nbatch_size = 1_000\n", FL_INVALID_ARGUMENT, {"learner.batch_size = 1_000", "not an integer"}},
        {"[learner]\nbatch_size =\n", FL_INVALID_ARGUMENT, {"learner.batch_size = ''", "not an integer"}},
        {"[learner]\nlr = 0.1x\n", FL_INVALID_ARGUMENT, {"learner.lr = 0.1x", "not a number", "[0, 10]"}},
        {"[learner]\nlr = 0.1 # hash is no inline comment\n", FL_INVALID_ARGUMENT, {"learner.lr = 0.1 # hash"}},
        {"[learner]\nlr = nan\n", FL_INVALID_ARGUMENT, {"learner.lr = nan", "not a finite number"}},
        {"[learner]\nlr = inf\n", FL_INVALID_ARGUMENT, {"learner.lr = inf", "not a finite number"}},
        /* bad BOOL and ENUM */
        {"[run]\nstop_at_target = maybe\n",
         FL_INVALID_ARGUMENT,
         {":2: ", "run.stop_at_target = maybe", "not a boolean", "true/false"}},
        {"[learner]\noptimizer = adamw\n",
         FL_INVALID_ARGUMENT,
         {":2: ", "learner.optimizer = adamw", "one of rmsprop|adam|sgd"}},
        /* strings */
        {long_string, FL_INVALID_ARGUMENT, {":2: ", "run.name = 0000", "too long (300 bytes", "at most 255 bytes"}},
        {"[run]\nname = \"unterminated\n", FL_INVALID_ARGUMENT, {":2: ", "run.name", "opening double quote"}},
        {"[run]\nname = \"a ; b\"\n", FL_INVALID_ARGUMENT, {":2: ", "opening double quote"}},
        /* malformed lines */
        {"[run]\nseed = 1\njust some words\n",
         FL_PARSE_ERROR,
         {":3: syntax error (expected `key = value` or `[section]`)"}},
        {"[run\nseed = 1\n", FL_PARSE_ERROR, {":1: ", "syntax error"}},
        {"[run] seed = 1\n", FL_PARSE_ERROR, {":1: ", "syntax error", "after `]`"}},
        {"[]\n", FL_PARSE_ERROR, {":1: ", "syntax error"}},
        {"[run]\n= 5\n", FL_PARSE_ERROR, {":2: ", "syntax error"}},
        {"[run]\nname = a\n    continued\n", FL_PARSE_ERROR, {":3: ", "syntax error"}},
        /* the earliest error wins, and long lines do not shift line numbers */
        {"[learner]\nbatch_size = 0\nfoo\n", FL_INVALID_ARGUMENT, {":2: learner.batch_size = 0"}},
        {"[learner]\nfoo\nbatch_size = 0\n", FL_PARSE_ERROR, {":2: syntax error"}},
        {"[nosuch]\nfoo\n", FL_NOT_FOUND, {":1: unknown section [nosuch]"}},
        {long_then_error, FL_INVALID_ARGUMENT, {":4: run.seed = -1"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_bad_file((int)i, &cases[i]);
}

/* A NUL byte inside a line (which a C string literal cannot hold) is a syntax error. */
static void test_file_with_nul_byte(void **state) {
    (void)state;
    const char *path = tmp_path("nul.ini");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    static const char text[] = "[run]\nseed = 1\nname = a\0b\n";
    fwrite(text, 1, sizeof text - 1, f);
    fclose(f);
    fl_config_t c;
    fl_err_t err;
    fl_config_defaults(&c);
    assert_int_equal(fl_config_load_file(&c, path, &err), FL_PARSE_ERROR);
    assert_contains(err.msg, ":3: ");
    assert_contains(err.msg, "NUL");
    assert_string_equal(c.run_name, "default");
}

static void test_missing_file(void **state) {
    (void)state;
    fl_config_t c;
    fl_err_t err;
    fl_config_defaults(&c);
    const char *path = tmp_path("does-not-exist.ini");
    assert_int_equal(fl_config_load_file(&c, path, &err), FL_IO_ERROR);
    char want[1600];
    snprintf(want, sizeof want, "cannot open config file '%s': No such file or directory", path);
    assert_string_equal(err.msg, want);

    /* A name close to a file beside it is suggested. */
    char near[600];
    snprintf(near, sizeof near, "%s/near", g_dir);
    mkdir(near, 0700);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "%s/cartpole.ini", near);
    FILE *f = fopen(cmd, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/cartpol.ini", near);
    assert_int_equal(fl_config_load_file(&c, cmd, &err), FL_IO_ERROR);
    snprintf(want, sizeof want, "No such file or directory (did you mean '%s/cartpole.ini'?)", near);
    assert_contains(err.msg, want);

    /* A directory opens but cannot be read. */
    assert_int_equal(fl_config_load_file(&c, g_dir, &err), FL_IO_ERROR);
    assert_contains(err.msg, g_dir);
}

/* ---- --set ---------------------------------------------------------------------- */

static void test_set(void **state) {
    (void)state;
    fl_config_t c;
    fl_err_t err;
    fl_config_defaults(&c);

    assert_int_equal(fl_config_set(&c, "learner.batch_size=64", &err), FL_OK);
    assert_int_equal(c.learner_batch_size, 64);
    assert_int_equal(fl_config_set(&c, " learner.lr = 3e-4 ", &err), FL_OK);
    assert_true(c.learner_lr == 3e-4);
    assert_int_equal(fl_config_set(&c, "model.spec=dense(64) relu dense(num_actions)", &err), FL_OK);
    assert_string_equal(c.model_spec, "dense(64) relu dense(num_actions)");
    assert_int_equal(fl_config_set(&c, "run.name=a=b", &err), FL_OK);
    assert_string_equal(c.run_name, "a=b");
    assert_int_equal(fl_config_set(&c, "learner.device=CUDA", &err), FL_OK);
    assert_int_equal(c.learner_device, FL_CFG_DEVICE_CUDA);
    assert_int_equal(fl_config_set(&c, "run.out_dir=\"\"", &err), FL_OK);
    assert_string_equal(c.run_out_dir, "");
    assert_int_equal(fl_config_set(&c, "run.name= \" x \" ", &err), FL_OK);
    assert_string_equal(c.run_name, " x ");

    static const char *const truthy[] = {"true", "TRUE", "1", "yes", "Yes", "on", "ON"};
    static const char *const falsy[] = {"false", "False", "0", "no", "NO", "off", "Off"};
    for (int i = 0; i < 7; i++) {
        assert_int_equal(fl_config_set_kv(&c, "run", "stop_at_target", truthy[i], NULL, &err), FL_OK);
        assert_int_equal(c.run_stop_at_target, 1);
        assert_int_equal(fl_config_set_kv(&c, "run", "stop_at_target", falsy[i], NULL, &err), FL_OK);
        assert_int_equal(c.run_stop_at_target, 0);
    }
    assert_int_equal(fl_config_set_kv(&c, "actor", "eps_base", "0x1p-2", "test", &err), FL_OK);
    assert_true(c.actor_eps_base == 0.25);
    assert_int_equal(fl_config_set_kv(&c, "run", "seed", "-0", "test", &err), FL_OK);
    assert_int_equal(c.run_seed, 0);

    /* The exact message of a bad value. */
    fl_config_t before = c;
    assert_int_equal(fl_config_set(&c, "learner.batch_size=0", &err), FL_INVALID_ARGUMENT);
    assert_string_equal(err.msg,
                        "--set learner.batch_size=0: learner.batch_size = 0 is out of range (expected an integer in "
                        "[1, 65536])");
    assert_int_equal(fl_config_set_kv(&c, "learner", "batch_size", "many", "cli", &err), FL_INVALID_ARGUMENT);
    assert_string_equal(err.msg,
                        "cli: learner.batch_size = many is not an integer (expected an integer in [1, 65536])");
    assert_int_equal(fl_config_set(&c, "learner.nosuch=1", &err), FL_NOT_FOUND);
    assert_contains(err.msg, "--set learner.nosuch=1: unknown key 'learner.nosuch'");
    assert_int_equal(fl_config_set(&c, "nosuch.key=1", &err), FL_NOT_FOUND);
    assert_contains(err.msg, "section [nosuch] does not exist; sections are run, env");
    assert_int_equal(fl_config_set(&c, "learner.batch_size", &err), FL_PARSE_ERROR);
    assert_contains(err.msg, "--set learner.batch_size: expected section.key=value");
    assert_int_equal(fl_config_set(&c, "batch_size=3", &err), FL_PARSE_ERROR);
    assert_int_equal(fl_config_set(&c, ".batch_size=3", &err), FL_PARSE_ERROR);
    assert_int_equal(fl_config_set(&c, "learner.=3", &err), FL_PARSE_ERROR);
    assert_int_equal(fl_config_set(&c, "run.name=two\nlines", &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "control character");
    assert_int_equal(fl_config_set(&c, "run.name=a ;b", &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "starts a comment");
    char big[400];
    snprintf(big, sizeof big, "run.name=%0256d", 1);
    assert_int_equal(fl_config_set(&c, big, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "run.name");
    assert_contains(err.msg, "256 bytes");
    assert_contains(err.msg, "at most 255 bytes");
    snprintf(big, sizeof big, "run.name=%0255d", 1);
    assert_same(&c, &before); /* failures above changed nothing */
    assert_int_equal(fl_config_set(&c, big, &err), FL_OK);
    assert_int_equal(strlen(c.run_name), 255);
}

static void test_get_string(void **state) {
    (void)state;
    fl_config_t c;
    fl_err_t err;
    char buf[64];
    fl_config_defaults(&c);
    assert_int_equal(fl_config_get_string(&c, "learner.lr", buf, sizeof buf, &err), FL_OK);
    assert_string_equal(buf, "0.003");
    assert_int_equal(fl_config_get_string(&c, "run.stop_at_target", buf, sizeof buf, &err), FL_OK);
    assert_string_equal(buf, "true");
    assert_int_equal(fl_config_get_string(&c, "replay.capacity", buf, sizeof buf, &err), FL_OK);
    assert_string_equal(buf, "1000000");
    assert_int_equal(fl_config_get_string(&c, "learner.mode", buf, sizeof buf, &err), FL_OK);
    assert_string_equal(buf, "apex");
    assert_int_equal(fl_config_get_string(&c, "learner.nosuch", buf, sizeof buf, &err), FL_NOT_FOUND);
    assert_contains(err.msg, "learner.nosuch");
    assert_int_equal(fl_config_get_string(&c, "lr", buf, sizeof buf, &err), FL_NOT_FOUND);
    assert_int_equal(fl_config_get_string(&c, "model.spec", buf, 8, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "model.spec");
}

/* ---- cross-key checks ----------------------------------------------------------- */

static void test_validate(void **state) {
    (void)state;
    fl_config_t c;
    fl_err_t err;
    fl_config_defaults(&c);
    c.replay_capacity = 500;
    assert_int_equal(fl_config_validate(&c, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "replay.min_size_to_sample = 1000");
    assert_contains(err.msg, "replay.capacity = 500");
    c.replay_min_size_to_sample = 500;
    assert_int_equal(fl_config_validate(&c, &err), FL_OK);
    c.replay_capacity = 100;
    c.replay_min_size_to_sample = 100;
    assert_int_equal(fl_config_validate(&c, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "learner.batch_size = 128");
    assert_contains(err.msg, "replay.capacity = 100");

    /* Fields written by code are range-checked like parsed ones. */
    fl_config_defaults(&c);
    c.learner_batch_size = 0;
    assert_int_equal(fl_config_validate(&c, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "learner.batch_size = 0 is out of range (expected an integer in [1, 65536])");
    fl_config_defaults(&c);
    c.learner_optimizer = (fl_cfg_learner_optimizer)3;
    assert_int_equal(fl_config_validate(&c, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "learner.optimizer = 3 is not an accepted value");
    assert_contains(err.msg, "rmsprop|adam|sgd");
    fl_config_defaults(&c);
    c.run_stop_at_target = 2;
    assert_int_equal(fl_config_validate(&c, &err), FL_INVALID_ARGUMENT);
    fl_config_defaults(&c);
    c.learner_gamma = INFINITY;
    assert_int_equal(fl_config_validate(&c, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "learner.gamma");
    /* a Sample call of batches_per_call batches holds at most 65536 rows */
    fl_config_defaults(&c);
    c.replay_capacity = 1000000;
    c.learner_batch_size = 8192;
    c.learner_batches_per_call = 8;
    assert_int_equal(fl_config_validate(&c, &err), FL_OK);
    c.learner_batches_per_call = 9;
    assert_int_equal(fl_config_validate(&c, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "learner.batch_size x learner.batches_per_call = 8192 x 9");
}

/* Every ENUM key's C enum names its choices in the table's order, and no more. */
static void test_enum_values_match_choices(void **state) {
    (void)state;
    static const struct {
        const char *key;
        int value;
        const char *name;
    } rows[] = {
        {"run.log_level", FL_CFG_LOG_DEBUG, "debug"},
        {"run.log_level", FL_CFG_LOG_INFO, "info"},
        {"run.log_level", FL_CFG_LOG_WARN, "warn"},
        {"run.log_level", FL_CFG_LOG_ERROR, "error"},
        {"run.log_level", FL_CFG_LOG_ERROR + 1, ""},
        {"model.cpu_kernels", FL_CFG_KERNELS_AUTO, "auto"},
        {"model.cpu_kernels", FL_CFG_KERNELS_DNNL, "dnnl"},
        {"model.cpu_kernels", FL_CFG_KERNELS_REFERENCE, "reference"},
        {"model.cpu_kernels", FL_CFG_KERNELS_ONEDNN, "onednn"},
        {"model.cpu_kernels", FL_CFG_KERNELS_ONEDNN + 1, ""},
        {"env.rng", FL_CFG_RNG_FLEET, "fleet"},
        {"env.rng", FL_CFG_RNG_REFERENCE, "reference"},
        {"env.rng", FL_CFG_RNG_REFERENCE + 1, ""},
        {"replay.selector", FL_CFG_SELECTOR_PRIORITIZED, "prioritized"},
        {"replay.selector", FL_CFG_SELECTOR_UNIFORM, "uniform"},
        {"replay.selector", FL_CFG_SELECTOR_FIFO, "fifo"},
        {"replay.selector", FL_CFG_SELECTOR_FIFO + 1, ""},
        {"paramserver.stale_policy", FL_CFG_STALE_DROP, "drop"},
        {"paramserver.stale_policy", FL_CFG_STALE_WAIT, "wait"},
        {"paramserver.stale_policy", FL_CFG_STALE_WAIT + 1, ""},
        {"learner.mode", FL_CFG_MODE_APEX, "apex"},
        {"learner.mode", FL_CFG_MODE_GORILA, "gorila"},
        {"learner.mode", FL_CFG_MODE_GORILA + 1, ""},
        {"learner.device", FL_CFG_DEVICE_CPU, "cpu"},
        {"learner.device", FL_CFG_DEVICE_CUDA, "cuda"},
        {"learner.device", FL_CFG_DEVICE_AUTO, "auto"},
        {"learner.device", FL_CFG_DEVICE_AUTO + 1, ""},
        {"learner.optimizer", FL_CFG_OPTIM_RMSPROP, "rmsprop"},
        {"learner.optimizer", FL_CFG_OPTIM_ADAM, "adam"},
        {"learner.optimizer", FL_CFG_OPTIM_SGD, "sgd"},
        {"learner.optimizer", FL_CFG_OPTIM_SGD + 1, ""},
        {"learner.optimizer", -1, ""},
        {"env.preset", FL_CFG_PRESET_NONE, "none"},
        {"env.preset", FL_CFG_PRESET_NATURE, "nature"},
        {"env.preset", FL_CFG_PRESET_MACHADO, "machado"},
        {"env.preset", FL_CFG_PRESET_MACHADO + 1, ""},
        {"run.target_on", FL_CFG_TARGET_EVAL, "eval"},
        {"run.target_on", FL_CFG_TARGET_TRAIN, "train"},
        {"run.target_on", FL_CFG_TARGET_TRAIN + 1, ""},
        {"eval.every_unit", FL_CFG_EVERY_SECONDS, "seconds"},
        {"eval.every_unit", FL_CFG_EVERY_LEARNER_STEPS, "learner_steps"},
        {"eval.every_unit", FL_CFG_EVERY_LEARNER_STEPS + 1, ""},
        {"learner.lr", 0, ""},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *got = fl_config_enum_name(rows[i].key, rows[i].value);
        if (strcmp(got, rows[i].name) != 0)
            fail_msg("%s value %d: \"%s\", expected \"%s\"", rows[i].key, rows[i].value, got, rows[i].name);
    }
    /* Parsing sets the enum, case-insensitively; the dump writes the name. */
    fl_config_t c;
    fl_err_t err;
    fl_config_defaults(&c);
    assert_int_equal(fl_config_set(&c, "learner.device=AUTO", &err), FL_OK);
    assert_int_equal(c.learner_device, FL_CFG_DEVICE_AUTO);
    char buf[64];
    assert_int_equal(fl_config_get_string(&c, "learner.device", buf, sizeof buf, &err), FL_OK);
    assert_string_equal(buf, "auto");
    assert_string_equal(FL_CONFIG_ENUM_STR(&c, learner, device), "auto");
}

/* ---- command line --------------------------------------------------------------- */

static void test_from_args(void **state) {
    (void)state;
    const char *path = write_tmp("args.ini",
                                 "[learner]\nbatch_size = 32\nlr = 0.5\n[replay]\ncapacity = 5000\n"
                                 "min_size_to_sample = 100\n");
    char config_eq[600];
    snprintf(config_eq, sizeof config_eq, "--config=%s", path);
    /* The overrides come before the file on the command line but are applied after it. */
    char *argv[] = {
        "fleet",       "run", "--set", "learner.batch_size=64", "--verbose", config_eq, "x", "--set=replay.alpha=0.25",
        "--configure", "--",  "--set", "learner.lr=1",          NULL};
    int argc = 12;
    fl_config_t c;
    fl_err_t err;
    memset(&c, 0, sizeof c);
    fl_status st = fl_config_from_args(&c, &argc, argv, &err);
    if (st != FL_OK) fail_msg("%s", err.msg);
    assert_int_equal(argc, 8);
    const char *rest[] = {"fleet", "run", "--verbose", "x", "--configure", "--", "--set", "learner.lr=1"};
    for (int i = 0; i < 8; i++) assert_string_equal(argv[i], rest[i]);
    assert_null(argv[8]);
    assert_int_equal(c.learner_batch_size, 64); /* --set beats the file */
    assert_true(c.learner_lr == 0.5);           /* from the file; the --set after -- is not ours */
    assert_true(c.replay_alpha == 0.25);
    assert_int_equal(c.replay_capacity, 5000);
    assert_true(c.learner_gamma == 0.99); /* default */

    /* Separate --config FILE; later --set of the same key wins. */
    char *argv2[] = {
        "fleet", "--config", (char *)path, "--set", "learner.batch_size=8", "--set", "learner.batch_size=16", NULL};
    argc = 7;
    assert_int_equal(fl_config_from_args(&c, &argc, argv2, &err), FL_OK);
    assert_int_equal(argc, 1);
    assert_string_equal(argv2[0], "fleet");
    assert_null(argv2[1]);
    assert_int_equal(c.learner_batch_size, 16);

    /* No options at all: defaults, which pass validation. */
    char *argv3[] = {"fleet", "learner", NULL};
    argc = 2;
    assert_int_equal(fl_config_from_args(&c, &argc, argv3, &err), FL_OK);
    assert_int_equal(argc, 2);
    fl_config_t d;
    fl_config_defaults(&d);
    assert_same(&c, &d);
}

static void test_from_args_errors(void **state) {
    (void)state;
    fl_config_t c, before;
    fl_err_t err;
    fl_config_defaults(&c);
    c.run_seed = 99;
    before = c;

    /* A bad override: the status and message of fl_config_set, *c untouched, argv compacted. */
    char *argv[] = {"fleet", "run", "--set", "learner.batch_size=0", "tail", NULL};
    int argc = 5;
    assert_int_equal(fl_config_from_args(&c, &argc, argv, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "--set learner.batch_size=0: learner.batch_size = 0 is out of range");
    assert_int_equal(argc, 3);
    assert_string_equal(argv[2], "tail");
    assert_null(argv[3]);
    assert_same(&c, &before);

    char *argv2[] = {"fleet", "--set", NULL};
    argc = 2;
    assert_int_equal(fl_config_from_args(&c, &argc, argv2, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "--set expects section.key=value");
    assert_int_equal(argc, 1);

    char *argv3[] = {"fleet", "--config", "a.ini", "--config=b.ini", "x", NULL};
    argc = 5;
    assert_int_equal(fl_config_from_args(&c, &argc, argv3, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "--config given twice");
    assert_int_equal(argc, 2);
    assert_string_equal(argv3[1], "x");

    char *argv4[] = {"fleet", "--config", NULL};
    argc = 2;
    assert_int_equal(fl_config_from_args(&c, &argc, argv4, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "--config expects a file name");

    char missing[600];
    snprintf(missing, sizeof missing, "%s/none.ini", g_dir);
    char *argv5[] = {"fleet", "--config", missing, NULL};
    argc = 3;
    assert_int_equal(fl_config_from_args(&c, &argc, argv5, &err), FL_IO_ERROR);
    assert_contains(err.msg, "cannot open config file");

    /* The cross-key checks run on the combined result. */
    char *argv6[] = {"fleet", "--set", "replay.capacity=500", NULL};
    argc = 3;
    assert_int_equal(fl_config_from_args(&c, &argc, argv6, &err), FL_INVALID_ARGUMENT);
    assert_contains(err.msg, "replay.min_size_to_sample");
    assert_same(&c, &before);
}

/* ---- help ----------------------------------------------------------------------- */

static void test_print_help(void **state) {
    (void)state;
    const char *path = tmp_path("help.txt");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fl_config_print_help(f);
    fclose(f);
    char *text = read_all(path);
    for (size_t i = 0; i < fl_config_key_count(); i++) assert_contains(text, fl_config_key_name(i));
#define HELP_HAS(s, k, t, d, lo, hi, ch, h) assert_contains(text, h);
    FL_CONFIG_KEYS(HELP_HAS)
#undef HELP_HAS
    assert_contains(text, "[learner]\n");
    assert_contains(text, "learner.batch_size");
    assert_contains(text, "int: an integer in [1, 65536]; default 128");
    assert_contains(text, "enum: one of rmsprop|adam|sgd; default adam");
    assert_contains(text, "float: a number in [0, 10]; default 0.003");
    assert_contains(text, "bool: true/false, yes/no, on/off or 1/0; default true");
    assert_contains(text, "string: text of at most 255 bytes; default \"default\"");
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enum_values_match_choices),
        cmocka_unit_test(test_defaults_match_table),
        cmocka_unit_test(test_defaults_are_valid),
        cmocka_unit_test(test_dump_round_trip),
        cmocka_unit_test(test_get_set_round_trip),
        cmocka_unit_test(test_dump_refuses_unloadable_values),
        cmocka_unit_test(test_file_overrides),
        cmocka_unit_test(test_file_key_twice),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_file_with_nul_byte),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_set),
        cmocka_unit_test(test_get_string),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_from_args),
        cmocka_unit_test(test_from_args_errors),
        cmocka_unit_test(test_print_help),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
