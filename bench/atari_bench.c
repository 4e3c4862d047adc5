/* atari_bench: raw Atari frames per second on one core, three ways, in the same run:
 *   ale      ALE's own C++ loop (bench/atari_ale_loop.cc: ale::ALEInterface, random
 *            minimal-set actions, the grayscale screen read after every frame);
 *   fleet    fleet's env atari-<game> (the C shim over the same emulator), the same work
 *            per frame through the env API (step, grayscale observation, reset);
 *   ale-py   ale-py's Python loop (python3 with <build>/pydeps on PYTHONPATH; skipped
 *            when it does not import).
 * Each game is measured `--reps` times in turn (ale, fleet, ale-py), and the best of each
 * is printed with fleet's share of ALE's loop.
 *
 *   build/bench/atari_bench [GAME...] [--frames N] [--reps R] [--sticky P] [--json]
 *   (defaults: pong breakout space_invaders seaquest ms_pacman, 20000 frames, 2 reps,
 *   sticky 0) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/rng.h"
#include "envs/atari/atari.h"
#include "envs/registry.h"

double fl_bench_ale_loop(const char *rom, int frames, float sticky);

static double fleet_loop(const char *game, int frames, float sticky) {
    char name[96];
    snprintf(name, sizeof name, "atari-%s", game);
    const fl_env_def_t *d = fl_env_find(name);
    if (!d) return 0;
    void *state = calloc(1, d->state_size);
    void *obs = malloc(fl_env_obs_size(d));
    fl_env_options_t o = {.sticky_prob = sticky, .args = ""};
    d->configure(state, &o);
    fl_rng_t rng, act;
    fl_rng_init(&rng, 7);
    fl_rng_init(&act, 8);
    d->reset(state, &rng, obs);
    double t0 = fl_clock_sec();
    for (int i = 0; i < frames; i++) {
        float r;
        int term;
        d->step(state, &rng, (int)fl_rng_below(&act, (uint64_t)d->num_actions), obs, &r, &term);
        if (term) d->reset(state, &rng, obs);
    }
    double s = fl_clock_sec() - t0;
    fl_env_close(d, state);
    free(state);
    free(obs);
    return frames / s;
}

/* ale-py's loop in a python3 subprocess; 0 when it cannot run. */
static double python_loop(const char *game, int frames, float sticky) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "PYTHONPATH=%s/pydeps${PYTHONPATH:+:$PYTHONPATH} python3 -c '\n"
             "import time, random\n"
             "from ale_py import ALEInterface, LoggerMode, roms\n"
             "ALEInterface.setLoggerMode(LoggerMode.Error)\n"
             "a = ALEInterface(); a.setInt(\"random_seed\", 7); a.setFloat(\"repeat_action_probability\", %g)\n"
             "a.loadROM(roms.get_rom_path(\"%s\")); acts = a.getMinimalActionSet(); random.seed(8)\n"
             "t = time.perf_counter()\n"
             "for i in range(%d):\n"
             "    a.act(acts[random.randrange(len(acts))]); a.getScreenGrayscale()\n"
             "    if a.game_over(): a.reset_game()\n"
             "print(%d / (time.perf_counter() - t))' 2>/dev/null",
             FL_BINARY_DIR, (double)sticky, game, frames, frames);
    FILE *p = popen(cmd, "r");
    double rate = 0;
    if (p) {
        if (fscanf(p, "%lf", &rate) != 1) rate = 0;
        pclose(p);
    }
    return rate;
}

int main(int argc, char **argv) {
    const char *games[32];
    int ng = 0, frames = 20000, reps = 2, json = 0;
    float sticky = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--frames") == 0 && i + 1 < argc)
            frames = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--sticky") == 0 && i + 1 < argc)
            sticky = (float)atof(argv[++i]);
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (ng < 32)
            games[ng++] = argv[i];
    }
    if (!fl_atari_available() || !fl_env_find("atari-pong")) {
        fprintf(stderr, "atari_bench: this build has no ALE or no ROMs (scripts/ale.sh)\n");
        return 1;
    }
    if (!ng) {
        static const char *const defaults[] = {"pong", "breakout", "space_invaders", "seaquest", "ms_pacman"};
        for (ng = 0; ng < 5; ng++) games[ng] = defaults[ng];
    }
    if (!json)
        printf(
            "raw Atari frames/s on one core (%ld cores; %d frames, best of %d, sticky %g)\n%-16s %10s %10s %8s %10s\n",
            sysconf(_SC_NPROCESSORS_ONLN), frames, reps, (double)sticky, "game", "ale C++", "fleet", "share", "ale-py");
    for (int g = 0; g < ng; g++) {
        char rom[1200];
        snprintf(rom, sizeof rom, "%s/%s.bin", fl_atari_roms_dir(), games[g]);
        double best[3] = {0, 0, 0};
        for (int r = 0; r < reps; r++) {
            double v[3] = {fl_bench_ale_loop(rom, frames, sticky), fleet_loop(games[g], frames, sticky),
                           python_loop(games[g], frames, sticky)};
            for (int k = 0; k < 3; k++)
                if (v[k] > best[k]) best[k] = v[k];
        }
        double share = best[0] > 0 ? best[1] / best[0] : 0;
        if (json)
            printf(
                "{\"bench\":\"atari\",\"case\":\"%s\",\"ale_fps\":%.0f,\"fleet_fps\":%.0f,\"share\":%.4f,"
                "\"alepy_fps\":%.0f,\"cores\":%ld}\n",
                games[g], best[0], best[1], share, best[2], sysconf(_SC_NPROCESSORS_ONLN));
        else
            printf("%-16s %10.0f %10.0f %7.1f%% %10.0f\n", games[g], best[0], best[1], 100 * share, best[2]);
        fflush(stdout);
    }
    return 0;
}
