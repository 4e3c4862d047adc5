/* `fleet eval` and `fleet env record --checkpoint` on a real run: a short `fleet run` of
 * configs/cartpole.ini (300 learner steps, no evaluator) keeps its learner checkpoint in
 * its run folder (learner.checkpoint_dir = RUN_DIR/checkpoints), then, through the real
 * binary:
 *   - `fleet eval RUN_DIR --episodes 5 --json` prints one JSON object whose statistics
 *     agree with its per-episode returns and lengths (mean within [min, max], ci95 >= 0);
 *   - the same seed twice gives the same output (but for the seconds), and the
 *     checkpoint file as the argument (its config.ini found in the folder above) the
 *     same episodes as the run folder;
 *   - --record x.gif writes a GIF89a of episode 0's length + 1 frames (counted by walking
 *     the GIF's blocks), x.png a PNG strip of the asked layout, x.mp4 an MP4 (an ftyp
 *     box) when ffmpeg is installed, and with a PATH without ffmpeg exits 1 saying how
 *     to get it, leaving no file;
 *   - `fleet env record cartpole --checkpoint RUN_DIR` records the same episode 0;
 *   - errors: a folder without a checkpoint (exit 2, naming where it looked), a model.spec
 *     other than the checkpoint's (exit 2, naming model.spec), bad --episodes, no argument
 *     and a missing path (exit 2). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/proc_util.h"
#include "tests/run_util.h"

static char g_tmp[256], g_run[512];

/* A shell command line in g_tmp (tests/proc_util.h, shell_in). */
#define shell(out, ...) shell_in(g_tmp, out, __VA_ARGS__)

/* The number after "key": in a JSON text; fails the test when it is absent. */
static double json_num(const char *json, const char *key) {
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    if (!p) fail_msg("no %s in %s", key, json);
    return strtod(p + strlen(pat), NULL);
}

/* The integer array "key":[...] into v; returns its length. */
static int json_ints(const char *json, const char *key, long *v, int max) {
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\":[", key);
    const char *p = strstr(json, pat);
    if (!p) fail_msg("no %s in %s", key, json);
    p += strlen(pat);
    int n = 0;
    while (*p && *p != ']' && n < max) {
        char *end = NULL;
        v[n++] = strtol(p, &end, 10);
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* A whole file and its size (the caller frees it). */
static unsigned char *read_bytes(const char *path, long *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*size + 1);
    if (fread(b, 1, (size_t)*size, f) != (size_t)*size) *size = -1;
    fclose(f);
    return b;
}

/* Skips GIF sub-blocks from p; returns the position after the terminator (or end). */
static long skip_blocks(const unsigned char *b, long p, long n) {
    while (p < n && b[p]) p += 1 + b[p];
    return p + 1;
}

/* The frames of a GIF file (its image descriptors), -1 when it is malformed. */
static int gif_frames(const char *path) {
    long n = 0;
    unsigned char *b = read_bytes(path, &n);
    if (!b || n < 13 || memcmp(b, "GIF89a", 6) != 0) {
        free(b);
        return -1;
    }
    long p = 13;
    if (b[10] & 0x80) p += 3L << ((b[10] & 7) + 1);
    int frames = 0;
    while (p < n && b[p] != 0x3b) {
        if (b[p] == 0x21) {
            p = skip_blocks(b, p + 2, n);
        } else if (b[p] == 0x2c && p + 10 <= n) {
            unsigned char packed = b[p + 9];
            p += 10;
            if (packed & 0x80) p += 3L << ((packed & 7) + 1);
            p = skip_blocks(b, p + 1, n); /* after the LZW minimum code size */
            frames++;
        } else {
            frames = -1;
            break;
        }
    }
    if (p >= n) frames = -1; /* no trailer */
    free(b);
    return frames;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-eval-XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    snprintf(g_run, sizeof g_run, "%s/ev", g_tmp);
    char ckpt[600];
    snprintf(ckpt, sizeof ckpt, "learner.checkpoint_dir=%s/checkpoints", g_run);
    const char *sets[] = {ckpt, "run.max_learner_steps=300", "run.stop_at_target=false", "run.evaluators=0",
                          "run.max_seconds=60"};
    char *log = NULL;
    int rc = run_fleet_at(g_tmp, NULL, 0, "ev", sets, 5, 120, &log);
    free(log);
    char path[700];
    snprintf(path, sizeof path, "%s/checkpoints/learner-0.safetensors", g_run);
    if (rc != 0 || access(path, R_OK) != 0) {
        fprintf(stderr, "fleet run exited %d; checkpoint %s %s\n", rc, path, access(path, R_OK) ? "missing" : "there");
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_tmp);
    return 0;
}

static void test_eval_json(void **state) {
    (void)state;
    char *out;
    assert_int_equal(shell(&out, "$F eval ev --episodes 5 --json"), 0);
    assert_non_null(strstr(out, "\"checkpoint\":\"ev/checkpoints/learner-0.safetensors\""));
    assert_non_null(strstr(out, "\"config\":\"ev/config.ini\""));
    assert_non_null(strstr(out, "\"env\":\"cartpole\""));
    assert_int_equal((int)json_num(out, "episodes"), 5);
    assert_true(json_num(out, "epsilon") == 0.0);
    assert_int_equal((int)json_num(out, "seed"), 1); /* run.seed */
    const double mean = json_num(out, "return_mean"), lo = json_num(out, "return_min"),
                 hi = json_num(out, "return_max");
    assert_true(lo <= mean && mean <= hi);
    assert_true(json_num(out, "return_ci95") >= 0 && json_num(out, "return_std") >= 0);
    long ret[8], len[8];
    assert_int_equal(json_ints(out, "returns", ret, 8), 5);
    assert_int_equal(json_ints(out, "lengths", len, 8), 5);
    long steps = 0, at_limit = 0;
    for (int k = 0; k < 5; k++) {
        steps += len[k];
        at_limit += len[k] == 500; /* CartPole-v1 truncates at 500 steps */
        assert_true(len[k] >= 1 && len[k] <= 500);
        assert_int_equal(ret[k], len[k]); /* CartPole pays 1 per step */
        assert_true(len[k] >= json_num(out, "length_min") && len[k] <= json_num(out, "length_max"));
    }
    assert_int_equal((long)json_num(out, "steps"), steps);
    assert_true(json_num(out, "truncated") == (double)at_limit); /* however well the agent learned */
    free(out);
    /* the text form names the same things */
    assert_int_equal(shell(&out, "$F eval ev --episodes 5"), 0);
    assert_non_null(strstr(out, "checkpoint ev/checkpoints/learner-0.safetensors"));
    assert_non_null(strstr(out, "(95% CI, t with 4 df)"));
    assert_non_null(strstr(out, "truncated"));
    assert_non_null(strstr(out, "agent steps in"));
    const char *trained = strstr(out, "trained    ");
    assert_non_null(trained);
    assert_true(strtol(trained + 11, NULL, 10) >= 300); /* run.max_learner_steps ends the run past it */
    assert_null(strstr(out, "warning"));
    free(out);
}

/* A checkpoint of learner step 0 (its metadata's learner.steps made "0", padded with JSON
 * whitespace so the header keeps its length) is evaluated with a warning. */
static void test_step_zero_warns(void **state) {
    (void)state;
    char src[700], dst[700];
    snprintf(src, sizeof src, "%s/checkpoints/learner-0.safetensors", g_run);
    snprintf(dst, sizeof dst, "%s/zero.safetensors", g_tmp);
    long n = 0;
    unsigned char *b = read_bytes(src, &n);
    assert_non_null(b);
    assert_true(n > 8);
    char *hdr = (char *)b + 8;
    char *at = strstr(hdr, "\"learner.steps\":\"");
    assert_non_null(at);
    char *v = at + strlen("\"learner.steps\":\""), *end = strchr(v, '"');
    assert_non_null(end);
    assert_true(end > v);
    v[0] = '0';
    v[1] = '"';
    memset(v + 2, ' ', (size_t)(end - v - 1));
    FILE *f = fopen(dst, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    free(b);
    char *out;
    assert_int_equal(shell(&out, "$F eval zero.safetensors --config ev/config.ini --episodes 2"), 0);
    assert_non_null(strstr(out, "warning: zero.safetensors was written at learner step 0"));
    assert_non_null(strstr(out, "trained    0 learner steps"));
    free(out);
}

/* A run with an evaluator keeps the parameters of its best evaluation
 * (checkpoints/best-0.safetensors, format fleet.policy): `fleet eval RUN_DIR` plays them
 * and says so, --final plays the learner's last checkpoint. */
static void test_best_policy(void **state) {
    (void)state;
    const char *sets[] = {"run.max_seconds=60", "eval.every=0.5"};
    char *log = NULL;
    assert_int_equal(run_fleet_at(g_tmp, NULL, 0, "withev", sets, 2, 120, &log), 0);
    free(log);
    char *out;
    assert_int_equal(shell(&out, "ls withev/checkpoints"), 0);
    assert_non_null(strstr(out, "best-0.safetensors"));
    free(out);
    assert_int_equal(shell(&out, "$F eval withev --episodes 3 --json"), 0);
    assert_non_null(strstr(out, "\"checkpoint\":\"withev/checkpoints/best-0.safetensors\""));
    assert_non_null(strstr(out, "\"origin\":\"the evaluator's best: return "));
    free(out);
    assert_int_equal(shell(&out, "$F eval withev --episodes 3"), 0);
    assert_non_null(strstr(out, "which      the evaluator's best: return "));
    assert_non_null(strstr(out, "(--final: the learner's last checkpoint)"));
    free(out);
    assert_int_equal(shell(&out, "$F eval withev --episodes 3 --final"), 0);
    assert_non_null(strstr(out, "checkpoint withev/checkpoints/learner-0.safetensors"));
    assert_non_null(strstr(out, "which      the learner's checkpoint"));
    free(out);
    /* the policy file itself is a checkpoint fleet eval takes */
    assert_int_equal(shell(&out, "$F eval withev/checkpoints/best-0.safetensors --episodes 2"), 0);
    assert_non_null(strstr(out, "the evaluator's best"));
    free(out);
}

/* --progress S: progress lines on stderr while the episodes are played. */
static void test_progress(void **state) {
    (void)state;
    char *out;
    assert_int_equal(shell(&out, "$F eval ev --episodes 4 --progress 0.0001"), 0);
    assert_non_null(strstr(out, "episodes begun"));
    free(out);
    assert_int_equal(shell(&out, "$F eval ev --episodes 4 --progress 0"), 0);
    assert_null(strstr(out, "episodes begun"));
    free(out);
    assert_int_equal(shell(&out, "$F eval ev --progress soon"), 2);
    assert_non_null(strstr(out, "--progress 'soon'"));
    free(out);
}

/* out without its "seconds":... field */
static void drop_seconds(char *out) {
    char *p = strstr(out, ",\"seconds\":");
    assert_non_null(p);
    char *end = strchr(p + 1, ',');
    assert_non_null(end);
    memmove(p, end, strlen(end) + 1);
}

static void test_same_seed_same_output(void **state) {
    (void)state;
    char *a, *b, *c;
    assert_int_equal(shell(&a, "$F eval ev --episodes 6 --seed 7 --epsilon 0.05 --parallel 4 --json"), 0);
    assert_int_equal(shell(&b, "$F eval ev --episodes 6 --seed 7 --epsilon 0.05 --parallel 4 --json"), 0);
    drop_seconds(a);
    drop_seconds(b);
    assert_string_equal(a, b);
    /* the checkpoint itself as the argument: its config.ini is the run folder's */
    assert_int_equal(shell(&c,
                           "$F eval ev/checkpoints/learner-0.safetensors --episodes 6 --seed 7 --epsilon 0.05 "
                           "--parallel 4 --json"),
                     0);
    assert_non_null(strstr(c, "\"config\":\"ev/config.ini\""));
    long ra[8], rc[8];
    assert_int_equal(json_ints(a, "returns", ra, 8), 6);
    assert_int_equal(json_ints(c, "returns", rc, 8), 6);
    assert_memory_equal(ra, rc, sizeof ra[0] * 6);
    free(a);
    free(b);
    free(c);
}

static unsigned u32be(const unsigned char *p) {
    return (unsigned)p[0] << 24 | (unsigned)p[1] << 16 | (unsigned)p[2] << 8 | p[3];
}

static void test_record(void **state) {
    (void)state;
    char *out, path[700];
    /* GIF: the reset's frame and one per step of episode 0 */
    assert_int_equal(shell(&out, "$F eval ev --episodes 3 --record x.gif --json"), 0);
    long len[4];
    assert_int_equal(json_ints(out, "lengths", len, 4), 3);
    snprintf(path, sizeof path, "%s/x.gif", g_tmp);
    assert_int_equal(gif_frames(path), len[0] + 1);
    assert_int_equal((long)json_num(out, "frames"), len[0] + 1);
    free(out);
    /* PNG: 4 frames, 2 per row, 300 x 200 each at scale 1 */
    assert_int_equal(shell(&out, "$F eval ev --episodes 2 --record x.png --frames 4 --columns 2"), 0);
    assert_non_null(strstr(out, "4 frames of 300 x 200"));
    free(out);
    long n = 0;
    snprintf(path, sizeof path, "%s/x.png", g_tmp);
    unsigned char *png = read_bytes(path, &n);
    assert_non_null(png);
    assert_memory_equal(png, "\x89PNG\r\n\x1a\n", 8);
    assert_int_equal(u32be(png + 16), 2 * 300 + 3 * 4);
    assert_int_equal(u32be(png + 20), 2 * 200 + 3 * 4);
    free(png);
    /* MP4 through ffmpeg, when it is installed */
    if (system("command -v ffmpeg >/dev/null 2>&1") == 0) {
        assert_int_equal(shell(&out, "$F eval ev --episodes 1 --record x.mp4 --scale 1"), 0);
        free(out);
        snprintf(path, sizeof path, "%s/x.mp4", g_tmp);
        unsigned char *mp4 = read_bytes(path, &n);
        assert_non_null(mp4);
        assert_true(n > 100);
        assert_memory_equal(mp4 + 4, "ftyp", 4);
        free(mp4);
    } else {
        fprintf(stderr, "no ffmpeg on PATH: the MP4 recording is not checked\n");
    }
    /* without ffmpeg: a clear message, exit 1, nothing written */
    assert_int_equal(shell(&out, "mkdir -p nobin && PATH=\"$PWD/nobin\" $F eval ev --record y.mp4"), 1);
    assert_non_null(strstr(out, "MP4 needs ffmpeg"));
    assert_non_null(strstr(out, "apt-get install ffmpeg"));
    assert_non_null(strstr(out, ".gif"));
    free(out);
    snprintf(path, sizeof path, "%s/y.mp4", g_tmp);
    assert_int_equal(access(path, F_OK), -1);
}

static void test_env_record_checkpoint(void **state) {
    (void)state;
    char *out, path[700];
    assert_int_equal(shell(&out, "$F eval ev --episodes 1 --json"), 0);
    long len[2];
    assert_int_equal(json_ints(out, "lengths", len, 2), 1);
    free(out);
    /* the same seed (run.seed) and epsilon (eval.epsilon): the same episode */
    assert_int_equal(shell(&out, "$F env record cartpole --checkpoint ev --out y.gif"), 0);
    assert_non_null(strstr(out, "recorded cartpole (agent of ev/checkpoints/learner-0.safetensors"));
    free(out);
    snprintf(path, sizeof path, "%s/y.gif", g_tmp);
    assert_int_equal(gif_frames(path), len[0] + 1);
    /* another env than the run's */
    assert_int_equal(shell(&out, "$F env record acrobot --checkpoint ev --out z.gif"), 2);
    assert_non_null(strstr(out, "env.name = cartpole"));
    free(out);
}

static void test_errors(void **state) {
    (void)state;
    char *out;
    /* a run folder without a checkpoint */
    assert_int_equal(shell(&out, "mkdir -p bare && printf '[run]\\nname = bare\\n' > bare/config.ini && $F eval bare"),
                     2);
    assert_non_null(strstr(out, "looked for bare/checkpoints/learner-0.safetensors"));
    assert_non_null(strstr(out, "every run.checkpoint_every = 300 s")); /* checkpoints are on by default */
    assert_null(strstr(out, "learner.checkpoint_dir"));                 /* no advice to set what needs no setting */
    free(out);
    /* ... and one that had checkpoints off */
    assert_int_equal(shell(&out,
                           "mkdir -p off && printf '[run]\\ncheckpoints = false\\n' > off/config.ini && "
                           "$F eval off"),
                     2);
    assert_non_null(strstr(out, "run.checkpoints = false"));
    free(out);
    /* a suite folder: its runs are named */
    assert_int_equal(shell(&out,
                           "mkdir -p su/seed-2 su/seed-10 && cp ev/config.ini su/ && cp ev/config.ini su/seed-2/ "
                           "&& cp ev/config.ini su/seed-10/ && $F eval su"),
                     2);
    assert_non_null(strstr(out, "su is a suite folder"));
    assert_non_null(strstr(out, "(seed-2, seed-10)"));
    assert_non_null(strstr(out, "`fleet eval su/seed-2`"));
    free(out);
    /* a file that is not a learner checkpoint */
    assert_int_equal(shell(&out, "$F eval ev/config.ini"), 2);
    assert_non_null(strstr(out, "ev/config.ini is not a learner checkpoint"));
    free(out);
    /* ... said first, not that no config.ini is beside it */
    assert_int_equal(shell(&out, "mkdir -p loose && echo notes > loose/notes.txt && $F eval loose/notes.txt"), 2);
    assert_non_null(strstr(out, "loose/notes.txt is not a learner checkpoint"));
    assert_null(strstr(out, "no config.ini"));
    free(out);
    /* not a run folder */
    assert_int_equal(shell(&out, "mkdir -p empty && $F eval empty"), 2);
    assert_non_null(strstr(out, "no config.ini"));
    free(out);
    /* another model than the checkpoint's */
    assert_int_equal(shell(&out, "$F eval ev --set 'model.spec=dense(64) relu dueling'"), 2);
    assert_non_null(strstr(out, "model.spec"));
    assert_non_null(strstr(out, "dense(128) relu dense(128) relu dueling"));
    free(out);
    /* usage */
    assert_int_equal(shell(&out, "$F eval ev --episodes 0"), 2);
    assert_non_null(strstr(out, "--episodes 0 is out of range"));
    free(out);
    assert_int_equal(shell(&out, "$F eval ev --episodes many"), 2);
    assert_non_null(strstr(out, "--episodes"));
    free(out);
    assert_int_equal(shell(&out, "$F eval"), 2);
    assert_non_null(strstr(out, "missing RUN_DIR or CHECKPOINT"));
    free(out);
    assert_int_equal(shell(&out, "$F eval nowhere"), 2);
    assert_non_null(strstr(out, "nowhere"));
    free(out);
    assert_int_equal(shell(&out, "$F eval ev --record x.bmp"), 2);
    assert_non_null(strstr(out, "must end in .gif"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eval_json), cmocka_unit_test(test_same_seed_same_output),
        cmocka_unit_test(test_record),    cmocka_unit_test(test_env_record_checkpoint),
        cmocka_unit_test(test_errors),    cmocka_unit_test(test_step_zero_warns),
        cmocka_unit_test(test_progress),  cmocka_unit_test(test_best_policy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
