/* Tests for launcher/progress: the progress line keeps to FL_PROGRESS_COLUMNS columns with the
 * widest figures there are, keeps the headline (eval), the training return and the budget
 * when it must leave parts out, reads as documented on typical figures (the env steps,
 * frames and learner steps so far beside the rates), compacts numbers into at most 7
 * characters and totals into at most 5. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "launcher/progress.h"

static void test_compact(void **unused) {
    (void)unused;
    char b[16];
    const struct {
        double v;
        const char *want;
    } rows[] = {{0, "0.0"},          {12.34, "12.3"},    {-999.9, "-999.9"}, {999.96, "1.0K"},
                {31234, "31.2K"},    {-45678, "-45.7K"}, {1.5e6, "1.5M"},    {2.25e9, "2.2G"},
                {9.99e14, "999.0T"}, {NAN, "nan"},       {-INFINITY, "-inf"}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fl_progress_compact(rows[i].v, b);
        if (strcmp(b, rows[i].want) != 0) fail_msg("%g: \"%s\", expected \"%s\"", rows[i].v, b, rows[i].want);
    }
    const double wide[] = {-1e300, 1e300, -9.87654e17, -999999.0, 123456789.0, -1e-300};
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++) {
        fl_progress_compact(wide[i], b);
        assert_true(strlen(b) <= 8);
    }
}

static void test_total(void **unused) {
    (void)unused;
    char b[16];
    const struct {
        uint64_t n;
        const char *want;
    } rows[] = {{0, "0"},
                {999, "999"},
                {1000, "1K"},
                {1234, "1.23K"},
                {131200, "131K"},
                {999499, "999K"},
                {999500, "1M"},
                {1200000, "1.2M"},
                {26234567, "26.2M"},
                {4500000000ull, "4.5G"},
                {UINT64_MAX, "18.4E"}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fl_progress_total(rows[i].n, b);
        if (strcmp(b, rows[i].want) != 0)
            fail_msg("%llu: \"%s\", expected \"%s\"", (unsigned long long)rows[i].n, b, rows[i].want);
    }
    for (uint64_t n = 1; n < UINT64_MAX / 7; n = n * 7 + 3) { /* never wider than 5 */
        fl_progress_total(n, b);
        assert_true(strlen(b) <= 5);
    }
}

static void test_typical_line(void **unused) {
    (void)unused;
    fl_progress_t p = {.elapsed_s = 12.34,
                       .evaluators = 1,
                       .have_eval = 1,
                       .eval_mean = 475.0,
                       .eval_ci95 = 3.2,
                       .have_train = 1,
                       .train_return = 187.3,
                       .env_steps = 412345,
                       .env_rate = 31234,
                       .learner_steps = 12345,
                       .upd_rate = 950,
                       .have_upd = 1,
                       .loss = 0.0123,
                       .replay_size = 412345,
                       .lag = 2,
                       .budget_done = 0.42,
                       .eta_s = 185};
    char line[FL_PROGRESS_COLUMNS + 1];
    fl_progress_format(&p, line, sizeof line);
    /* with everything the line is 127 columns: the version lag is left out */
    assert_string_equal(line,
                        "[  12.3s] eval 475.0+-3.2 | train 187.3 | env 412K 31.2K/s | upd 12.3K 950.0/s "
                        "loss 0.012 | replay 412K | 42% ETA 3m05s");
    p.have_eval = 0;
    p.have_train = 0;
    p.budget_done = -1;
    fl_progress_format(&p, line, sizeof line);
    assert_string_equal(line,
                        "[  12.3s] eval - | train - | env 412K 31.2K/s | upd 12.3K 950.0/s loss 0.012 | "
                        "replay 412K | lag 2");
    p.evaluators = 0;
    p.gorila = 1;
    p.pushes_applied = 1234;
    p.pushes_dropped = 5;
    fl_progress_format(&p, line, sizeof line);
    assert_string_equal(line,
                        "[  12.3s] train - | env 412K 31.2K/s | upd 12.3K 950.0/s loss 0.012 | replay 412K | "
                        "lag 2 | push 1.2K/5 dropped");
    p.gorila = 0;
    p.restarts = 3;
    fl_progress_format(&p, line, sizeof line);
    assert_string_equal(line,
                        "[  12.3s] train - | env 412K 31.2K/s | upd 12.3K 950.0/s loss 0.012 | replay 412K | "
                        "lag 2 | restarts 3");
    p.restarts = 0;
    p.joined_ever = 1; /* actors joined: the launcher's and the joined ones at work */
    p.actors_started = 4;
    p.actors_joined = 2;
    fl_progress_format(&p, line, sizeof line);
    assert_string_equal(line,
                        "[  12.3s] train - | env 412K 31.2K/s | upd 12.3K 950.0/s loss 0.012 | replay 412K | "
                        "lag 2 | actors 4+2 joined");
    /* the start: nothing counted yet */
    fl_progress_t z = {.elapsed_s = 1.0, .evaluators = 1, .budget_done = -1};
    fl_progress_format(&z, line, sizeof line);
    assert_string_equal(line, "[   1.0s] eval - | train - | env 0 0.0/s | upd 0 -/s | replay 0 | lag 0");
    /* a resumed run before its learner's first report: the steps so far, no rate yet */
    z.learner_steps = 32900;
    fl_progress_format(&z, line, sizeof line);
    assert_string_equal(line, "[   1.0s] eval - | train - | env 0 0.0/s | upd 32.9K -/s | replay 0 | lag 0");
}

/* Atari: the frames so far beside env steps/s; while replay fills, how far it is from the
 * sampling threshold stands where the updates go, then the updates come back. */
static void test_frames_and_warm_up(void **unused) {
    (void)unused;
    fl_progress_t p = {.elapsed_s = 30.1,
                       .evaluators = 1,
                       .have_train = 1,
                       .train_return = -20.4,
                       .env_steps = 32800,
                       .env_rate = 1100,
                       .frames = 131200,
                       .warmup_need = 50000,
                       .replay_size = 32800,
                       .budget_done = -1};
    char line[FL_PROGRESS_COLUMNS + 1];
    fl_progress_format(&p, line, sizeof line);
    assert_string_equal(line,
                        "[  30.1s] eval - | train -20.4 | env 32.8K 1.1K/s | frames 131K | warm-up 32.8K/50K | "
                        "replay 32.8K | lag 0");
    p.replay_size = 50000; /* reached: learner steps, updates and loss */
    p.env_steps = 50000;
    p.frames = 200000;
    p.learner_steps = 12;
    p.upd_rate = 3;
    p.have_upd = 1;
    p.loss = 0.02;
    fl_progress_format(&p, line, sizeof line);
    assert_string_equal(line,
                        "[  30.1s] eval - | train -20.4 | env 50K 1.1K/s | frames 200K | upd 12 3.0/s loss 0.02 | "
                        "replay 50K | lag 0");
    p.frames = 0; /* no frame skip: no part */
    p.warmup_need = 0;
    fl_progress_format(&p, line, sizeof line);
    assert_null(strstr(line, "frames"));
    assert_null(strstr(line, "warm-up"));
}

static void test_widest_line_fits(void **unused) {
    (void)unused;
    fl_progress_t p = {.elapsed_s = 1e9,
                       .evaluators = 1,
                       .have_eval = 1,
                       .eval_mean = -123456.7,
                       .eval_ci95 = 98765.4,
                       .have_train = 1,
                       .train_return = -876543.2,
                       .env_rate = 9.99e13,
                       .upd_rate = -1e300,
                       .have_upd = 1,
                       .loss = -1.23456e-300,
                       .replay_size = UINT64_MAX,
                       .lag = UINT64_MAX,
                       .gorila = 1,
                       .pushes_applied = UINT64_MAX,
                       .pushes_dropped = UINT64_MAX,
                       .restarts = UINT64_MAX,
                       .budget_done = 0.5,
                       .eta_s = 1e12,
                       .frames = UINT64_MAX,
                       .warmup_need = UINT64_MAX,
                       .joined_ever = 1,
                       .actors_started = UINT64_MAX,
                       .actors_joined = UINT64_MAX,
                       .env_steps = UINT64_MAX,
                       .learner_steps = UINT64_MAX};
    char line[FL_PROGRESS_COLUMNS + 1];
    size_t n = fl_progress_format(&p, line, sizeof line);
    assert_true(n <= FL_PROGRESS_COLUMNS);
    assert_int_equal(n, strlen(line));
    assert_non_null(strstr(line, "eval -123.5K+-98.8K"));
    assert_non_null(strstr(line, "train -876.5K"));
    assert_non_null(strstr(line, "50% ETA 99h59m"));
    assert_null(strstr(line, "push")); /* the first part left out */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compact),          cmocka_unit_test(test_total),
        cmocka_unit_test(test_typical_line),     cmocka_unit_test(test_frames_and_warm_up),
        cmocka_unit_test(test_widest_line_fits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
