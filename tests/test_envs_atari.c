/* Tests for envs/atari/ (the ALE games as built-in envs), skipped with a message in a
 * build without ALE or without ROMs:
 *  - the registry lists the games and finds the -full and -rgb variants, with ALE's
 *    action sets (Pong's 6 minimal actions, 18 in full) and screen sizes;
 *  - the family's rows (envs/atari/atari.c): every game's base env after the other
 *    families, named without being built, no reward bound, lives declared to the core;
 *  - a seed and an action sequence replay exactly (frames, rewards, terminals), also with
 *    sticky actions; other seeds with sticky actions play differently;
 *  - env.args frameskip=4 sums the rewards of 4 frames and ends on the 4th; bad args are
 *    refused;
 *  - Breakout starts with 5 lives (fl_atari_lives) and loses them;
 *  - the grayscale and RGB variants show the same screen, and instances are closed
 *    (their emulators freed: the sanitizer build finds a leak otherwise);
 *  - screen heights other than 210 (Carnival 214, Pooyan 220) are found once and kept in
 *    the user's cache folder ($XDG_CACHE_HOME, here a temporary one), not the ROM folder;
 *  - every wrapper alone, and each preset's chain, moves the game on as the unwrapped
 *    game moves;
 *  - an emulator kept from a closed instance starts the next one as a new emulator with
 *    its seed would, without loading the ROM again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/rng.h"
#include "envs/atari/atari.h"
#include "envs/registry.h"
#include "envs/core/wrappers.h"

#define SKIP_WITHOUT_ATARI()                                                                              \
    do {                                                                                                  \
        if (!fl_atari_available() || !fl_env_find("atari-pong")) {                                        \
            print_message("SKIP: this build has no ALE or no Atari ROMs (scripts/ale.sh builds them)\n"); \
            skip();                                                                                       \
        }                                                                                                 \
    } while (0)

typedef struct inst {
    const fl_env_def_t *d;
    void *state, *obs;
    fl_rng_t rng;
} inst_t;

static void inst_open(inst_t *in, const char *name, uint64_t seed, float sticky, const char *args) {
    in->d = fl_env_find(name);
    assert_non_null(in->d);
    in->state = calloc(1, in->d->state_size);
    in->obs = malloc(fl_env_obs_size(in->d));
    fl_env_options_t o = {.sticky_prob = sticky, .args = args};
    assert_int_equal(in->d->configure(in->state, &o), 0);
    fl_rng_init_stream(&in->rng, seed, 0);
    in->d->reset(in->state, &in->rng, in->obs);
}

static void inst_close(inst_t *in) {
    fl_env_close(in->d, in->state);
    free(in->state);
    free(in->obs);
}

/* Plays n steps of a fixed action pattern; a checksum of every frame, reward and end. */
static uint64_t play(inst_t *in, int n, double *ret) {
    uint64_t h = 1469598103934665603ull;
    size_t bytes = fl_env_obs_size(in->d);
    *ret = 0;
    for (int t = 0; t < n; t++) {
        float r;
        int term;
        in->d->step(in->state, &in->rng, (t / 7) % in->d->num_actions, in->obs, &r, &term);
        *ret += r;
        const uint8_t *o = in->obs;
        for (size_t i = 0; i < bytes; i += 13) h = (h ^ o[i]) * 1099511628211ull;
        h = (h ^ (uint64_t)(int64_t)r ^ ((uint64_t)term << 40)) * 1099511628211ull;
        if (term) in->d->reset(in->state, &in->rng, in->obs);
    }
    return h;
}

static char g_cache[64];

/* In a fresh process (a fork before this process touched the registry): atari-<game>'s
 * screen height, or -1. */
static int height_in_child(const char *game) {
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        char name[96];
        snprintf(name, sizeof name, "atari-%s", game);
        const fl_env_def_t *d = fl_env_find(name);
        int h = d ? d->obs.shape[0] : -1;
        _exit(write(fd[1], &h, sizeof h) == (ssize_t)sizeof h ? 0 : 1);
    }
    close(fd[1]);
    int h = -1, status = 0;
    if (read(fd[0], &h, sizeof h) != (ssize_t)sizeof h) h = -1;
    close(fd[0]);
    waitpid(pid, &status, 0);
    return h;
}

/* Lines of the screen cache naming rom (a ROM file's name). */
static int cache_lines(const char *rom) {
    char path[128], line[1200];
    snprintf(path, sizeof path, "%s/fleet/atari-screens.txt", g_cache);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, rom) != NULL;
    fclose(f);
    return n;
}

/* Screen heights: found by running the game once, kept in the user's cache folder (one
 * line a game however many processes make it), whatever the height. */
static void test_screen_heights_cached(void **unused) {
    (void)unused;
    if (!fl_atari_available()) {
        print_message("SKIP: this build has no ALE\n");
        skip();
    }
    assert_int_equal(height_in_child("carnival"), 214);
    assert_int_equal(height_in_child("carnival"), 214);
    assert_int_equal(height_in_child("pooyan"), 220);
    assert_int_equal(cache_lines("/carnival.bin 214"), 1);
    assert_int_equal(cache_lines("/pooyan.bin 220"), 1);
    /* the ROM folder is read, never written */
    char path[1200];
    snprintf(path, sizeof path, "%s/atari-screens.txt", fl_atari_roms_dir());
    assert_int_not_equal(access(path, F_OK), 0);
}

static void test_registry(void **unused) {
    (void)unused;
    SKIP_WITHOUT_ATARI();
    const fl_env_def_t *p = fl_env_find("atari-pong"), *pf = fl_env_find("atari-pong-full"),
                       *pr = fl_env_find("atari-pong-rgb"), *pfr = fl_env_find("atari-pong-full-rgb");
    assert_non_null(p);
    assert_non_null(pf);
    assert_non_null(pr);
    assert_non_null(pfr);
    assert_int_equal(p->num_actions, 6);
    assert_int_equal(pf->num_actions, 18);
    assert_int_equal(p->obs.dtype, FL_DTYPE_UINT8);
    assert_int_equal(p->obs.rank, 3);
    assert_int_equal(p->obs.shape[0], 210);
    assert_int_equal(p->obs.shape[1], 160);
    assert_int_equal(p->obs.shape[2], 1);
    assert_int_equal(pr->obs.shape[2], 3);
    assert_string_equal(p->action_name(1), "fire");
    assert_null(fl_env_find("atari-nosuchgame"));
    assert_null(fl_env_find("atari-pong-rgb-full")); /* -full comes first */
    int found = 0;
    for (int i = 0; i < fl_env_count(); i++) found += strcmp(fl_env_at(i)->name, "atari-breakout") == 0;
    assert_int_equal(found, 1);
    assert_true(fl_atari_count() >= 50);
}

/* The family's rows: none fixed; the base env of every game listed after the other
 * families, named without building it, the variants found but not listed, no reward bound,
 * and lives declared to the core for the episodiclife wrapper. */
static void test_family_rows(void **unused) {
    (void)unused;
    const fl_env_family_t *f = &fl_env_family_atari;
    assert_string_equal(f->name, "atari");
    assert_int_equal(f->num_rows, 0);
    assert_int_equal(f->count(), fl_atari_count());
    assert_int_equal(fl_env_count() - f->count(), 13); /* classic 3, MinAtar 10, then these */
    SKIP_WITHOUT_ATARI();
    int first = fl_env_count() - f->count();
    for (int i = 0; i < f->count(); i++) {
        char name[80];
        assert_int_equal(f->env_name(i, name, sizeof name), 0);
        const fl_env_def_t *d = f->at(i);
        assert_non_null(d);
        assert_string_equal(d->name, name);
        assert_ptr_equal(fl_env_at(first + i), d);
        assert_ptr_equal(f->find(name), d);
        assert_ptr_equal(fl_env_find(name), d);
        assert_true(fl_env_reward_bound(name) == 0.0);
        assert_non_null(fl_env_lives_of(d));
    }
    assert_int_equal(f->env_name(f->count(), (char[80]){0}, 80), -1);
    assert_null(f->at(f->count()));
    const fl_env_def_t *pf = f->find("atari-pong-full");
    assert_non_null(pf);
    assert_non_null(fl_env_lives_of(pf));
    for (int i = 0; i < fl_env_count(); i++) assert_ptr_not_equal(fl_env_at(i), pf);
    assert_null(f->find("cartpole"));
    assert_null(fl_env_lives_of(fl_env_find("cartpole")));
    fl_err_t err = {0};
    const fl_env_def_t *out;
    assert_int_equal(fl_env_lookup("atari-pongg", &out, &err), FL_NOT_FOUND);
    assert_non_null(strstr(err.msg, "did you mean 'atari-pong'?"));
    /* an unknown name's message counts the family's games */
    char count[80];
    snprintf(count, sizeof count, "and %d envs of the atari family: atari-<game>", f->count());
    assert_int_equal(fl_env_lookup("cartpol", &out, &err), FL_NOT_FOUND);
    assert_non_null(strstr(err.msg, count));
    assert_non_null(strstr(err.msg, "did you mean 'cartpole'?"));
    /* other libraries' ids are given fleet's name, not taken for it */
    const char *ids[][2] = {{"ALE/Pong-v5", "atari-pong"},
                            {"PongNoFrameskip-v4", "atari-pong"},
                            {"pong", "atari-pong"},
                            {"ALE/SpaceInvaders-v5", "atari-space_invaders"},
                            {"BreakoutDeterministic-v4", "atari-breakout"},
                            {"ALE/MsPacman-v5", "atari-ms_pacman"}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        assert_null(fl_env_find(ids[i][0]));
        assert_int_equal(fl_env_lookup(ids[i][0], &out, &err), FL_NOT_FOUND);
        char want[120];
        snprintf(want, sizeof want, "fleet's name for it is '%s'", ids[i][1]);
        if (!strstr(err.msg, want)) fail_msg("%s: %s", ids[i][0], err.msg);
    }
    /* the games whose score is capped */
    double m = 0;
    assert_int_equal(fl_env_return_max("atari-pong", &m), 0);
    assert_true(m == 21);
    assert_int_equal(fl_env_return_max("atari-pong-full", &m), 0);
    assert_true(m == 21);
    assert_int_equal(fl_env_return_max("atari-boxing", &m), 0);
    assert_true(m == 100);
    assert_int_equal(fl_env_return_max("atari-breakout", &m), -1);
}

static void test_replays_exactly(void **unused) {
    (void)unused;
    SKIP_WITHOUT_ATARI();
    const float sticky[] = {0.0f, 0.25f};
    for (int k = 0; k < 2; k++) {
        inst_t a, b, c;
        inst_open(&a, "atari-breakout", 7, sticky[k], "");
        inst_open(&b, "atari-breakout", 7, sticky[k], "");
        inst_open(&c, "atari-breakout", 8, sticky[k], "");
        double ra, rb, rc;
        uint64_t ha = play(&a, 3000, &ra), hb = play(&b, 3000, &rb), hc = play(&c, 3000, &rc);
        assert_true(ha == hb);
        assert_true(ra == rb);
        if (sticky[k] > 0) assert_true(ha != hc); /* ALE's sticky draws come from the seed */
        inst_close(&a);
        inst_close(&b);
        inst_close(&c);
    }
}

/* An emulator kept from a closed instance (fl_atari_keep_emulators) starts the next
 * instance of the same game and options as a new emulator with that instance's seed
 * would: the same first frame, then the same frames, rewards and ends, sticky actions,
 * modes, difficulties, paddles and a DPC cartridge's generator included; after an
 * instance that played other frames with another seed; without a load. Other options
 * (another sticky-action probability) load a new one. */
static void test_kept_emulators_play_as_new(void **unused) {
    (void)unused;
    SKIP_WITHOUT_ATARI();
    const struct {
        const char *name, *args;
        float sticky;
    } cases[] = {{"atari-pong", "", 0.0f},
                 {"atari-breakout", "", 0.25f},
                 {"atari-tennis", "mode=2 difficulty=1", 0.25f},
                 {"atari-berzerk", "mode=3", 0.0f},
                 {"atari-montezuma_revenge", "", 0.25f},
                 {"atari-pitfall2", "", 0.25f},
                 {"atari-kaboom", "", 0.25f},
                 {"atari-pooyan", "mode=30", 0.0f}};
    int tried = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (!fl_env_find(cases[k].name)) continue;
        tried++;
        const int before = fl_atari_keep_emulators(0);
        inst_t fresh;
        inst_open(&fresh, cases[k].name, 21, cases[k].sticky, cases[k].args);
        const size_t bytes = fl_env_obs_size(fresh.d);
        unsigned char *first = malloc(bytes);
        memcpy(first, fresh.obs, bytes);
        double r_fresh, r;
        const uint64_t h_fresh = play(&fresh, 2500, &r_fresh);
        inst_close(&fresh);

        fl_atari_keep_emulators(8);
        inst_t used;
        inst_open(&used, cases[k].name, 5, cases[k].sticky, cases[k].args);
        play(&used, 1200, &r);
        inst_close(&used); /* its emulator is kept */
        const uint64_t loads = fl_atari_loads();
        inst_t kept;
        inst_open(&kept, cases[k].name, 21, cases[k].sticky, cases[k].args);
        assert_true(fl_atari_loads() == loads);
        if (memcmp(first, kept.obs, bytes) != 0) fail_msg("%s: a kept emulator's first frame differs", cases[k].name);
        const uint64_t h = play(&kept, 2500, &r);
        if (h != h_fresh || r != r_fresh)
            fail_msg("%s %s sticky %g: a kept emulator played other frames (return %g, a new one's %g)", cases[k].name,
                     cases[k].args, (double)cases[k].sticky, r, r_fresh);
        inst_close(&kept);
        inst_t other;
        inst_open(&other, cases[k].name, 21, cases[k].sticky > 0 ? 0.0f : 0.25f, cases[k].args);
        assert_true(fl_atari_loads() == loads + 1);
        inst_close(&other);
        free(first);
        fl_atari_keep_emulators(before);
    }
    assert_true(tried >= 2);
}

static void test_frameskip_and_args(void **unused) {
    (void)unused;
    SKIP_WITHOUT_ATARI();
    inst_t one, four;
    inst_open(&one, "atari-pong", 3, 0.0f, "");
    inst_open(&four, "atari-pong", 3, 0.0f, "frameskip=4");
    /* Four single frames of an action, then one 4-frame step of the same: the same screen. */
    float r1 = 0, r;
    int term;
    for (int k = 0; k < 4; k++) {
        one.d->step(one.state, &one.rng, 2, one.obs, &r, &term);
        r1 += r;
    }
    four.d->step(four.state, &four.rng, 2, four.obs, &r, &term);
    assert_memory_equal(one.obs, four.obs, fl_env_obs_size(one.d));
    assert_true(r == r1);
    inst_close(&one);
    inst_close(&four);
    const fl_env_def_t *d = fl_env_find("atari-pong");
    void *s = calloc(1, d->state_size);
    const char *bad[] = {"frameskip=0", "frameskip=x", "colour=3", "mode=-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fl_env_options_t o = {.sticky_prob = 0, .args = bad[i]};
        if (d->configure(s, &o) != -1) fail_msg("args \"%s\" accepted", bad[i]);
    }
    fl_env_options_t o = {.sticky_prob = 1.5f, .args = ""};
    assert_int_equal(d->configure(s, &o), -1);
    fl_env_close(d, s);
    free(s);
}

static void test_lives_and_variants(void **unused) {
    (void)unused;
    SKIP_WITHOUT_ATARI();
    inst_t g, c;
    inst_open(&g, "atari-breakout", 5, 0.0f, "");
    inst_open(&c, "atari-breakout-rgb", 5, 0.0f, "");
    assert_int_equal(fl_atari_lives(g.d, g.state), 5);
    assert_int_equal(fl_atari_lives(fl_env_find("cartpole"), g.state), -1);
    /* Gray and RGB of the same play: where the RGB screen is black, so is the gray one. */
    double r;
    play(&g, 200, &r);
    play(&c, 200, &r);
    const uint8_t *gray = g.obs, *rgb = c.obs;
    for (size_t i = 0; i < 210 * 160; i++)
        if (!rgb[3 * i] && !rgb[3 * i + 1] && !rgb[3 * i + 2]) assert_int_equal(gray[i], 0);
    /* Without firing, Breakout's ball never comes: play with fire until a life is lost. */
    int lost = 0;
    for (int t = 0; t < 20000 && !lost; t++) {
        float rr;
        int term;
        g.d->step(g.state, &g.rng, t % 2 ? 1 : 0, g.obs, &rr, &term);
        lost = fl_atari_lives(g.d, g.state) < 5;
    }
    assert_true(lost);
    inst_close(&g);
    inst_close(&c);
}

/* firereset starts Breakout's ball; episodiclife ends the agent's episode at a lost life
 * while the game goes on (the next reset continues it with 4 lives, not a new game of 5). */
static void test_fire_and_episodic_life(void **unused) {
    (void)unused;
    SKIP_WITHOUT_ATARI();
    const fl_env_def_t *d = fl_env_find("atari-breakout");
    fl_wrapped_env_t *w = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_wrapped_env_create(d, "episodiclife firereset", &w, &err), FL_OK);
    void *state = calloc(1, fl_wrapped_env_state_size(w));
    void *obs = malloc(fl_wrapped_env_obs_size(w));
    fl_env_options_t o = {.sticky_prob = 0, .args = ""};
    assert_int_equal(fl_wrapped_env_configure(w, state, &o, &err), FL_OK);
    fl_rng_t rng;
    fl_rng_init(&rng, 3);
    fl_wrapped_env_reset(w, state, &rng, obs);
    assert_int_equal(fl_atari_lives(d, fl_wrapped_env_inner_state(w, state)), 5);
    int t = 0, term = 0, trunc = 0;
    float r;
    while (!term && t < 5000) { /* noop: the paddle stays; the fired ball is lost */
        fl_wrapped_env_step(w, state, &rng, 0, obs, &r, &term, &trunc);
        t++;
    }
    assert_true(term);
    assert_int_equal(fl_atari_lives(d, fl_wrapped_env_inner_state(w, state)), 4);
    fl_wrapped_env_reset(w, state, &rng, obs);
    assert_int_equal(fl_atari_lives(d, fl_wrapped_env_inner_state(w, state)), 4); /* the same game */
    fl_wrapped_env_close(w, state);
    free(state);
    free(obs);
    fl_wrapped_env_destroy(w);
    /* What the wrappers need of the env. */
    assert_int_equal(fl_wrapped_env_create(fl_env_find("cartpole"), "episodiclife", &w, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "lives"));
    assert_int_equal(fl_wrapped_env_create(fl_env_find("atari-ms_pacman"), "firereset", &w, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "fire"));
}

/* What a random policy's play looks like through a chain: agent steps, episode ends
 * (terminations and truncations), the sum of rewards, steps whose frame differs from the
 * one before, and whole games (the inner game over). */
typedef struct play_stats {
    int steps, terms, truncs, changed, games;
    double ret;
} play_stats_t;

/* Plays spec around env `name` with uniformly random actions (seeded) for up to
 * max_steps agent steps or until `games` games are over; resets after every end. */
static play_stats_t play_chain(const char *name, const char *spec, float sticky, uint64_t seed, int max_steps,
                               int games) {
    const fl_env_def_t *d = fl_env_find(name);
    assert_non_null(d);
    fl_wrapped_env_t *w = NULL;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_wrapped_env_create(d, spec, &w, &err) != FL_OK) fail_msg("'%s' around %s: %s", spec, name, err.msg);
    void *state = calloc(1, fl_wrapped_env_state_size(w));
    size_t bytes = fl_wrapped_env_obs_size(w);
    uint8_t *obs = malloc(bytes), *prev = malloc(bytes);
    fl_env_options_t o = {.sticky_prob = sticky, .args = ""};
    assert_int_equal(fl_wrapped_env_configure(w, state, &o, &err), FL_OK);
    fl_rng_t rng;
    fl_rng_init(&rng, seed);
    fl_wrapped_env_reset(w, state, &rng, obs);
    play_stats_t st = {0};
    const fl_env_def_t *inner = fl_wrapped_env_inner(w);
    while (st.steps < max_steps && st.games < games) {
        memcpy(prev, obs, bytes);
        float r = 0.0f;
        int term = 0, trunc = 0;
        int a = (int)fl_rng_below(&rng, (uint64_t)inner->num_actions);
        fl_wrapped_env_step(w, state, &rng, a, obs, &r, &term, &trunc);
        st.steps++;
        st.ret += r;
        st.changed += memcmp(prev, obs, bytes) != 0;
        if (term || trunc) {
            st.terms += term;
            st.truncs += trunc;
            /* a game is over when the game has no lives left (or never had any) */
            st.games += trunc || fl_atari_lives(inner, fl_wrapped_env_inner_state(w, state)) <= 0;
            fl_wrapped_env_reset(w, state, &rng, obs);
        }
    }
    fl_wrapped_env_close(w, state);
    free(state);
    free(obs);
    free(prev);
    fl_wrapped_env_destroy(w);
    return st;
}

/* Every wrapper alone moves the game on: Breakout (lives and a fire action) under random
 * actions ends episodes, scores and changes its screen on most steps; a wrapper whose step
 * did nothing would leave one frame forever. */
static void test_every_wrapper_advances_the_game(void **unused) {
    (void)unused;
    SKIP_WITHOUT_ATARI();
    const char *specs[] = {"",          "sticky(0.25)",  "noop(30)",   "frameskip(4)",  "episodiclife",
                           "firereset", "resize(84,84)", "clipreward", "maxsteps(400)", "framestack(4)"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        const int frames = 5000, skip = strstr(specs[i], "frameskip") ? 4 : 1;
        play_stats_t st = play_chain("atari-breakout", specs[i], 0.0f, 11, frames / skip, 1000);
        if (st.terms + st.truncs < 2 || st.ret <= 0 || st.changed < st.steps / 4)
            fail_msg(
                "'%s' on Breakout, %d random steps: %d terminations, %d truncations, return %g, the screen "
                "changed on %d steps; expected 2 or more ends, a positive return and a change on a quarter of "
                "the steps or more",
                specs[i], st.steps, st.terms, st.truncs, st.ret, st.changed);
    }
}

/* Each preset's chain plays the game as the unwrapped env does: a random agent loses Pong
 * about 21-0 (the unwrapped game's return, not a frozen 0) within a game of about the same
 * number of frames (agent steps x 4), and Breakout under the Nature chain ends an agent
 * episode at each of its 5 lives. */
static void test_preset_chains_play_the_game(void **unused) {
    (void)unused;
    SKIP_WITHOUT_ATARI();
    /* The unwrapped game: random actions held for 4 frames, as a frame skip of 4 does. */
    play_stats_t raw = {0};
    {
        inst_t g;
        inst_open(&g, "atari-pong", 5, 0.0f, "");
        fl_rng_t pick;
        fl_rng_init(&pick, 5);
        int term = 0, a = 0;
        while (!term && raw.steps < 200000) {
            if (raw.steps % 4 == 0) a = (int)fl_rng_below(&pick, (uint64_t)g.d->num_actions);
            float r;
            g.d->step(g.state, &g.rng, a, g.obs, &r, &term);
            raw.ret += r;
            raw.steps++;
        }
        assert_true(term);
        inst_close(&g);
    }
    assert_true(raw.ret <= -18);
    static const struct {
        const char *env, *spec;
        float sticky;
    } presets[] = {
        {"atari-pong", FL_WRAPPERS_NATURE_FIRE, 0.0f},
        {"atari-pong", FL_WRAPPERS_NATURE, 0.0f},
        {"atari-pong-full", FL_WRAPPERS_MACHADO, 0.25f},
    };
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        play_stats_t st = play_chain(presets[i].env, presets[i].spec, presets[i].sticky, 21, 20000, 1);
        double frames = 4.0 * st.steps;
        if (st.games != 1 || st.terms != 1 || st.ret > -18 || frames < 0.5 * raw.steps || frames > 2.0 * raw.steps ||
            st.changed < st.steps * 9 / 10)
            fail_msg(
                "%s under '%s': %d steps, %d terminations, %d truncations, return %g, %d changed frames; expected "
                "one game ended by the game itself, a return of -18 or less and about %d frames (%d steps x 4) as "
                "the unwrapped game took, a new frame on 9 of 10 steps",
                presets[i].env, presets[i].spec, st.steps, st.terms, st.truncs, st.ret, st.changed, raw.steps,
                raw.steps / 4);
    }
    play_stats_t b = play_chain("atari-breakout", FL_WRAPPERS_NATURE_FIRE, 0.0f, 3, 20000, 1);
    if (b.games != 1 || b.terms != 5 || b.truncs != 0)
        fail_msg(
            "Breakout under the Nature chain: %d terminations and %d truncations in %d game(s) of %d steps, "
            "expected 5 terminations (one per life) in one game",
            b.terms, b.truncs, b.games, b.steps);
}

/* Evaluations drop the training-only wrappers, and only those. */
static void test_wrappers_for_evaluation(void **unused) {
    (void)unused;
    char out[256];
    fl_wrappers_for_evaluation(
        "noop(30) frameskip(4) episodiclife firereset resize(84, 84) clipreward "
        "maxsteps(27000) framestack(4)",
        out, sizeof out);
    assert_string_equal(out, "noop(30) frameskip(4) firereset resize(84, 84) maxsteps(27000) framestack(4)");
    fl_wrappers_for_evaluation("", out, sizeof out);
    assert_string_equal(out, "");
    fl_wrappers_for_evaluation("clipreward", out, sizeof out);
    assert_string_equal(out, "");
}

int main(void) {
    /* the screen-height cache goes to a cache folder of this test's own */
    snprintf(g_cache, sizeof g_cache, "/tmp/fleet-atari-cache-XXXXXX");
    if (!mkdtemp(g_cache)) return 1;
    setenv("XDG_CACHE_HOME", g_cache, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_screen_heights_cached),
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_family_rows),
        cmocka_unit_test(test_replays_exactly),
        cmocka_unit_test(test_kept_emulators_play_as_new),
        cmocka_unit_test(test_frameskip_and_args),
        cmocka_unit_test(test_lives_and_variants),
        cmocka_unit_test(test_fire_and_episodic_life),
        cmocka_unit_test(test_every_wrapper_advances_the_game),
        cmocka_unit_test(test_preset_chains_play_the_game),
        cmocka_unit_test(test_wrappers_for_evaluation),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    fl_atari_keep_emulators(0); /* the kept emulators are freed: the sanitizer build finds any other */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_cache);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_cache);
    return failed;
}
