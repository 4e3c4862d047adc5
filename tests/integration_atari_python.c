/* Fidelity of fleet's Atari envs against ale-py (the Python package of the same
 * emulator, installed with pip into <build>/pydeps when missing, as the other
 * interoperability tests do; skipped with a message where that cannot work, or when the
 * build has no ALE): for Pong, Breakout, Space Invaders, Seaquest and Ms. Pac-Man, the
 * same ALE seed and the same 10,000 actions (with sticky actions 0.25, and without for
 * one game) give identical raw frames (CRC-32 of every grayscale screen), rewards,
 * terminals and lives (tests/py/ale_interop.py holds the action pattern and the trace
 * format); and fleet's Nature preprocessing (`frameskip(4) resize(84,84) framestack(4)`,
 * then with `noop(30)` first) against Gymnasium's AtariPreprocessing (noop_max 0, then 30:
 * each reset's no-op count is fleet's, handed to Gymnasium's draw after a check of its
 * range) plus FrameStackObservation (pip: gymnasium,
 * opencv-python-headless) on 3,000 steps of each of the five games: the same rewards and
 * terminals, and stacks that agree to within one grey level (Pong exactly; in the others
 * 0.004% to 0.12% of the pixels round to the neighbouring level), except the frame of a step in
 * which the episode ends, where Gymnasium max-pools a stale buffer
 * (tests/py/ale_preprocessing.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/py_util.h"
#include "common/rng.h"
#include "envs/atari/atari.h"
#include "envs/registry.h"
#include "envs/core/wrappers.h"

#define STEPS 10000
#define SEED 123

static char g_env[2048];
static const char *g_python;

/* Plays atari-<game><variant> with ale_seed = seed and the env.args `more`, and writes
 * the trace ale_interop.py reads. */
static void write_trace(const char *game, const char *variant, long seed, const char *more, float sticky,
                        const char *path) {
    char name[96], args[160];
    snprintf(name, sizeof name, "atari-%s%s", game, variant);
    snprintf(args, sizeof args, "ale_seed=%ld %s", seed, more);
    const fl_env_def_t *d = fl_env_find(name);
    assert_non_null(d);
    void *state = calloc(1, d->state_size);
    uint8_t *obs = malloc(fl_env_obs_size(d));
    fl_env_options_t o = {.sticky_prob = sticky, .args = args};
    assert_int_equal(d->configure(state, &o), 0);
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    d->reset(state, &rng, obs);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    const int n = d->num_actions;
    for (int t = 0; t < STEPS; t++) {
        int a = (7 * t + t / 13) % n;
        float r;
        int term;
        d->step(state, &rng, a, obs, &r, &term);
        unsigned long crc = crc32(0L, obs, (uInt)fl_env_obs_size(d));
        fprintf(f, "%d %d %d %d %d %lu\n", t, a, (int)r, term, fl_atari_lives(d, state), crc);
        if (term) d->reset(state, &rng, obs);
    }
    fclose(f);
    fl_env_close(d, state);
    free(state);
    free(obs);
}

static void test_frames_match_ale_py(void **unused) {
    (void)unused;
    if (!fl_atari_available() || !fl_env_find("atari-pong")) {
        print_message("SKIP: this build has no ALE or no Atari ROMs (scripts/ale.sh builds them)\n");
        skip();
    }
    if (!py_find("ale_py, numpy", "ale-py==0.12.1", g_env, sizeof g_env, &g_python)) {
        print_message("SKIP: no python3 with ale-py, and pip could not install it\n");
        skip();
    }
    /* Five games with and without sticky actions; then the cases where fleet once began
     * differently from ale-py: a mode or difficulty given (the first episode began after
     * two reset_game calls), the -full set of games whose legal set is not 18 actions,
     * screens neither 210 nor 250 rows high, and an ALE seed below 0 (Gymnasium's seeds
     * map to such ones). */
    const struct {
        const char *game, *variant;
        long seed;
        const char *args; /* fleet's env.args besides ale_seed; ale_interop.py's the same */
        float sticky;
    } cases[] = {
        {"pong", "", SEED, "", 0.25f},
        {"breakout", "", SEED, "", 0.25f},
        {"space_invaders", "", SEED, "", 0.25f},
        {"seaquest", "", SEED, "", 0.25f},
        {"ms_pacman", "", SEED, "", 0.25f},
        {"breakout", "", SEED, "", 0.0f},
        {"berzerk", "", SEED, "mode=3", 0.25f},
        {"tennis", "", SEED, "mode=2 difficulty=1", 0.25f},
        {"beam_rider", "", SEED, "difficulty=1", 0.0f},
        {"assault", "", SEED, "mode=0", 0.25f},
        {"skiing", "-full", SEED, "", 0.25f},
        {"lost_luggage", "-full", SEED, "mode=1 difficulty=1", 0.25f},
        {"carnival", "", SEED, "", 0.25f},
        {"pooyan", "", SEED, "mode=30", 0.25f},
        {"journey_escape", "", SEED, "", 0.25f},
        {"pong", "", -1234567891L, "", 0.25f},
    };
    char dir[] = "/tmp/fl_ale_py_XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char trace[128], cmd[4096];
        snprintf(trace, sizeof trace, "%s/%s-%zu.txt", dir, cases[i].game, i);
        write_trace(cases[i].game, cases[i].variant, cases[i].seed, cases[i].args, cases[i].sticky, trace);
        snprintf(cmd, sizeof cmd, "%s %s %s/tests/py/ale_interop.py check %s %s %ld %g %d %s %s", g_env, g_python,
                 getenv("FLEET_SOURCE_DIR"), trace, cases[i].game, cases[i].seed, (double)cases[i].sticky, STEPS,
                 cases[i].args, cases[i].variant[0] ? "full" : "");
        if (py_shell(cmd) != 0)
            fail_msg("atari-%s%s %s (sticky %g): fleet and ale-py differ (above)", cases[i].game, cases[i].variant,
                     cases[i].args, (double)cases[i].sticky);
        unlink(trace);
    }
    rmdir(dir);
}

#define PRE_STEPS 3000

/* The episode's no-op count (0 without a noop wrapper), a line of f. */
static void put_noops(FILE *f, const fl_wrapped_env_t *w, const void *state) {
    const int n = fl_wrapped_env_noops(w, state);
    fprintf(f, "%d\n", n > 0 ? n : 0);
}

/* fleet's Nature preprocessing on atari-<game>, with noop(noop_max) starts when noop_max >
 * 0: the newest 84x84 frame of every stack, the rewards and terminals, and (noops_path)
 * the number of no-ops each reset took, one a line. */
static void write_preprocessed(const char *game, int noop_max, const char *frames_path, const char *trace_path,
                               const char *noops_path) {
    char name[96], spec[128];
    snprintf(name, sizeof name, "atari-%s", game);
    snprintf(spec, sizeof spec, "frameskip(4) resize(84,84) framestack(4)");
    if (noop_max > 0) snprintf(spec, sizeof spec, "noop(%d) frameskip(4) resize(84,84) framestack(4)", noop_max);
    fl_wrapped_env_t *w = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_wrapped_env_create(fl_env_find(name), spec, &w, &err), FL_OK);
    void *state = calloc(1, fl_wrapped_env_state_size(w));
    uint8_t *obs = malloc(fl_wrapped_env_obs_size(w));
    char args[64];
    snprintf(args, sizeof args, "ale_seed=%d", SEED);
    fl_env_options_t o = {.sticky_prob = 0, .args = args};
    assert_int_equal(fl_wrapped_env_configure(w, state, &o, &err), FL_OK);
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    FILE *ff = fopen(frames_path, "wb"), *tf = fopen(trace_path, "w"), *nf = fopen(noops_path, "w");
    assert_true(ff && tf && nf);
    uint8_t newest[84 * 84];
    fl_wrapped_env_reset(w, state, &rng, obs);
    put_noops(nf, w, state);
    for (int t = -1; t < PRE_STEPS; t++) {
        int term = 0, trunc = 0;
        if (t >= 0) {
            int a = (7 * t + t / 13) % fl_wrapped_env_info(w)->num_actions;
            float r;
            fl_wrapped_env_step(w, state, &rng, a, obs, &r, &term, &trunc);
            fprintf(tf, "%d %d %d %d\n", t, a, (int)r, term);
        }
        for (int i = 0; i < 84 * 84; i++) newest[i] = obs[i * 4 + 3]; /* the last channel: the newest frame */
        fwrite(newest, 1, sizeof newest, ff);
        if (term || trunc) { /* as the other side does */
            fl_wrapped_env_reset(w, state, &rng, obs);
            put_noops(nf, w, state);
        }
    }
    fclose(ff);
    fclose(tf);
    fclose(nf);
    fl_wrapped_env_close(w, state);
    free(state);
    free(obs);
    fl_wrapped_env_destroy(w);
}

/* The preprocessing of five games against Gymnasium's, with noop_max 0 and 30 (the no-op
 * counts fleet drew are handed to Gymnasium's draw, which then checks its bounds: both
 * sides draw in [1, 30]). */
static void test_preprocessing_matches_gymnasium(void **unused) {
    (void)unused;
    if (!fl_atari_available() || !fl_env_find("atari-pong")) {
        print_message("SKIP: this build has no ALE or no Atari ROMs (scripts/ale.sh builds them)\n");
        skip();
    }
    if (!py_find("ale_py, gymnasium, cv2", "ale-py==0.12.1 gymnasium opencv-python-headless", g_env, sizeof g_env,
                 &g_python)) {
        print_message("SKIP: no python3 with ale-py, Gymnasium and OpenCV, and pip could not install them\n");
        skip();
    }
    const char *games[] = {"pong", "breakout", "space_invaders", "seaquest", "ms_pacman"};
    const int noop_max[] = {0, 30};
    char dir[] = "/tmp/fl_ale_pre_XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (size_t k = 0; k < 2; k++) {
        for (size_t i = 0; i < sizeof games / sizeof games[0]; i++) {
            char frames[128], trace[128], noops[128], cmd[4096];
            snprintf(frames, sizeof frames, "%s/%s.u8", dir, games[i]);
            snprintf(trace, sizeof trace, "%s/%s.txt", dir, games[i]);
            snprintf(noops, sizeof noops, "%s/%s.noops", dir, games[i]);
            write_preprocessed(games[i], noop_max[k], frames, trace, noops);
            snprintf(cmd, sizeof cmd, "%s %s %s/tests/py/ale_preprocessing.py check %s %s %s %d %d %d %s", g_env,
                     g_python, getenv("FLEET_SOURCE_DIR"), frames, trace, games[i], SEED, PRE_STEPS, noop_max[k],
                     noops);
            if (py_shell(cmd) != 0)
                fail_msg("%s, noop_max %d: fleet's Nature preprocessing and Gymnasium's differ (above)", games[i],
                         noop_max[k]);
            unlink(frames);
            unlink(trace);
            unlink(noops);
        }
    }
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_frames_match_ale_py),
                                       cmocka_unit_test(test_preprocessing_matches_gymnasium)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
