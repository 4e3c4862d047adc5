/* `fleet env play` and `fleet env record` through the real binary: a scripted play session
 * (keys on stdin) steps the game once per action key and ignores other keys; a recorded
 * GIF and PNG strip have the sizes and frame counts asked for, and an MP4 (with ffmpeg) is
 * an MP4 file; usage mistakes exit 2 and a missing env exits 1, each with a message naming
 * the problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/proc_util.h"

static char g_dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fleet-show-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_dir);
    return 0;
}

/* Runs a shell command line with the fleet binary as $F; returns its exit status and
 * its combined output in *out. */
static int shell(char **out, const char *fmt, const char *arg) {
    char cmd[2048], log[128];
    snprintf(log, sizeof log, "%s/out.txt", g_dir);
    int n = snprintf(cmd, sizeof cmd, "F='%s'; (", fleet_bin());
    n += snprintf(cmd + n, sizeof cmd - (size_t)n, fmt, arg);
    snprintf(cmd + n, sizeof cmd - (size_t)n, ") >%s 2>&1 </dev/null", log);
    int rc = system(cmd);
    *out = read_file(log);
    assert_non_null(*out);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_play_scripted(void **state) {
    (void)state;
    char *out;
    /* Breakout: three rights, an ignored 'x', a noop; then quit. */
    assert_int_equal(shell(&out, "printf 'dddx.q' | $F env play minatar-breakout-v1 --plain --width 20%s", ""), 0);
    assert_non_null(strstr(out, "actions: 0=noop 1=left 2=right"));
    assert_non_null(strstr(out, "step 4 "));
    assert_null(strstr(out, "step 5 "));
    assert_non_null(strstr(out, "played 1 episode(s)"));
    free(out);
    /* CartPole falls within 60 pushes to one side; the next key starts episode 2. */
    char keys[80];
    memset(keys, 'a', 60);
    strcpy(keys + 60, "aq");
    assert_int_equal(shell(&out, "printf '%s' | $F env play cartpole --plain --width 40", keys), 0);
    assert_non_null(strstr(out, "[terminated"));
    assert_non_null(strstr(out, "episode 2 "));
    free(out);
    /* End of input quits like q. */
    assert_int_equal(shell(&out, "printf '1' | $F env play minatar-asterix --plain%s", ""), 0);
    assert_non_null(strstr(out, "step 1 "));
    free(out);
}

static unsigned u16le(const unsigned char *p) {
    return p[0] | p[1] << 8;
}

static unsigned u32be(const unsigned char *p) {
    return (unsigned)p[0] << 24 | (unsigned)p[1] << 16 | (unsigned)p[2] << 8 | p[3];
}

static void test_record(void **state) {
    (void)state;
    char *out, cmd[512];
    snprintf(cmd, sizeof cmd, "$F env record minatar-breakout --steps 5 --scale 2 --out %s/b.gif%%s", g_dir);
    assert_int_equal(shell(&out, cmd, ""), 0);
    assert_non_null(strstr(out, "recorded minatar-breakout"));
    /* 5 steps at most: the reset's frame and up to 5 more. */
    assert_non_null(strstr(out, "(320 x 320)"));
    free(out);
    char path[128];
    snprintf(path, sizeof path, "%s/b.gif", g_dir);
    unsigned char *gif = (unsigned char *)read_file(path);
    assert_non_null(gif);
    assert_memory_equal(gif, "GIF89a", 6);
    assert_int_equal(u16le(gif + 6), 320);
    assert_int_equal(u16le(gif + 8), 320);
    free(gif);

    snprintf(cmd, sizeof cmd, "$F env record cartpole --frames 6 --columns 3 --out %s/c.png%%s", g_dir);
    assert_int_equal(shell(&out, cmd, ""), 0);
    assert_non_null(strstr(out, "6 frames (300 x 200)"));
    free(out);
    snprintf(path, sizeof path, "%s/c.png", g_dir);
    unsigned char *png = (unsigned char *)read_file(path);
    assert_non_null(png);
    assert_memory_equal(png + 1, "PNG", 3);
    assert_memory_equal(png + 12, "IHDR", 4);
    /* 3 columns x 2 rows of 300 x 200 with 4-pixel gaps. */
    assert_int_equal(u32be(png + 16), 3 * 300 + 4 * 4);
    assert_int_equal(u32be(png + 20), 2 * 200 + 3 * 4);
    free(png);

    /* MP4 through ffmpeg (the same recorder as `fleet eval --record`), when installed */
    if (system("command -v ffmpeg >/dev/null 2>&1") != 0) return;
    snprintf(cmd, sizeof cmd, "$F env record minatar-breakout --steps 5 --scale 3 --out %s/b.mp4%%s", g_dir);
    assert_int_equal(shell(&out, cmd, ""), 0);
    assert_non_null(strstr(out, "(480 x 480) -> "));
    free(out);
    snprintf(path, sizeof path, "%s/b.mp4", g_dir);
    unsigned char *mp4 = (unsigned char *)read_file(path);
    assert_non_null(mp4);
    assert_memory_equal(mp4 + 4, "ftyp", 4);
    free(mp4);
}

static void test_errors(void **state) {
    (void)state;
    char *out;
    assert_int_equal(shell(&out, "$F env record cartpole%s", ""), 2);
    assert_non_null(strstr(out, "missing --out"));
    free(out);
    assert_int_equal(shell(&out, "$F env record cartpole --out x.bmp%s", ""), 2);
    assert_non_null(strstr(out, "must end in .gif"));
    free(out);
    assert_int_equal(shell(&out, "$F env record nosuchgame --out /tmp/x.gif%s", ""), 1);
    assert_non_null(strstr(out, "nosuchgame"));
    free(out);
    assert_int_equal(shell(&out, "$F env play%s", ""), 2);
    assert_non_null(strstr(out, "missing env name"));
    free(out);
    assert_int_equal(shell(&out, "$F env play cartpole --frames 3%s", ""), 2);
    assert_non_null(strstr(out, "unknown option '--frames'"));
    free(out);
    assert_int_equal(shell(&out, "$F env record cartpole --out /tmp/x.gif --sticky 2%s", ""), 2);
    assert_non_null(strstr(out, "--sticky expects a probability"));
    free(out);
    assert_int_equal(shell(&out, "$F env record minatar-breakout --out /nonexistent-dir/x.gif%s", ""), 1);
    assert_non_null(strstr(out, "/nonexistent-dir/x.gif"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_play_scripted),
        cmocka_unit_test(test_record),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
