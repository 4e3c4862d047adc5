// atari_ale: the extern "C" shim over ale::ALEInterface (see atari_ale.h). The only C++
// of fleet: exceptions stop here and become messages.
#include "envs/atari/atari_ale.h"

#include <ale_interface.hpp>
#include <games/Roms.hpp>

#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

struct fl_ale {
    ale::ALEInterface ale{false};
    std::vector<unsigned char> buf;
    ale::ALEState start;  // the console as the load left it (mode and difficulty set), without ALE's generator
};

namespace {
void quiet() {
    static bool done = false;
    if (!done) ale::Logger::setMode(ale::Logger::Error);
    done = true;
}
}  // namespace

extern "C" fl_ale_t *fl_ale_open(const fl_ale_opts_t *o, char *err, size_t err_len) {
    quiet();
    try {
        std::unique_ptr<fl_ale> a(new fl_ale());
        a->ale.setInt("random_seed", o->seed);
        a->ale.setFloat("repeat_action_probability", o->repeat_prob);
        a->ale.setInt("max_num_frames_per_episode", o->max_frames);
        a->ale.loadROM(o->rom);
        if (o->mode >= 0) a->ale.setMode(static_cast<ale::game_mode_t>(o->mode));
        if (o->difficulty >= 0) a->ale.setDifficulty(static_cast<ale::difficulty_t>(o->difficulty));
        /* the mode and difficulty take effect at the next reset_game: the env's first reset,
         * as Gymnasium's AtariEnv sets them at load and resets once */
        a->start = a->ale.cloneState(false);
        return a.release();
    } catch (const std::exception &e) {
        std::snprintf(err, err_len, "%s", e.what());
    } catch (...) {
        std::snprintf(err, err_len, "unknown error from ALE");
    }
    return nullptr;
}

extern "C" void fl_ale_close(fl_ale_t *a) {
    delete a;
}

/* What a load with random_seed `seed` leaves differs from the load this emulator had only
 * in ALE's generator (seeded with random_seed; the console's own generator starts from
 * the fixed system_random_seed, and the load's reset_game draws nothing from ALE's): the
 * console state saved after the load, and ALE's generator seeded as a load seeds it. */
extern "C" int fl_ale_restart(fl_ale_t *a, int32_t seed) {
    if (seed == -1) return -1; /* a load takes the time for -1 */
    try {
        a->ale.restoreState(a->start);
        a->ale.environment->getEnvironmentRNG().seed(static_cast<uint32_t>(seed));
        return 0;
    } catch (...) {
        return -1;
    }
}

extern "C" int fl_ale_game_actions(const char *rom, int full, int *actions, char *err, size_t err_len) {
    quiet();
    try {
        std::unique_ptr<ale::RomSettings> s(ale::buildRomRLWrapper(rom, ""));
        if (!s) {
            std::snprintf(err, err_len, "%s is not a ROM this ALE supports", rom);
            return -1;
        }
        ale::ActionVect v;
        if (full)
            v = s->getAllActions(); /* ALE's legal set (getLegalActionSet): 18 but in a few games */
        else
            v = s->getMinimalActionSet();
        int n = 0;
        for (ale::Action x : v)
            if (n < FL_ALE_MAX_ACTIONS) actions[n++] = static_cast<int>(x);
        return n;
    } catch (const std::exception &e) {
        std::snprintf(err, err_len, "%s", e.what());
    }
    return -1;
}

extern "C" float fl_ale_act(fl_ale_t *a, int action) {
    return static_cast<float>(a->ale.act(static_cast<ale::Action>(action), 1.0f));
}

extern "C" int fl_ale_terminal(const fl_ale_t *a) {
    return a->ale.game_over(false) ? 1 : 0;
}
extern "C" int fl_ale_truncated(const fl_ale_t *a) {
    return a->ale.game_truncated() ? 1 : 0;
}
extern "C" int fl_ale_lives(fl_ale_t *a) {
    return a->ale.lives();
}
extern "C" int fl_ale_frame_number(const fl_ale_t *a) {
    return a->ale.getEpisodeFrameNumber();
}
extern "C" void fl_ale_reset(fl_ale_t *a) {
    a->ale.reset_game();
}

extern "C" void fl_ale_screen(const fl_ale_t *a, int *height, int *width) {
    *height = static_cast<int>(a->ale.getScreen().height());
    *width = static_cast<int>(a->ale.getScreen().width());
}

static size_t pixels(const fl_ale_t *a) {
    return a->ale.getScreen().height() * a->ale.getScreen().width();
}

extern "C" void fl_ale_gray(const fl_ale_t *a, uint8_t *out) {
    std::vector<unsigned char> &b = const_cast<fl_ale *>(a)->buf;
    b.resize(pixels(a));
    a->ale.getScreenGrayscale(b);
    std::copy(b.begin(), b.end(), out);
}

extern "C" void fl_ale_rgb(const fl_ale_t *a, uint8_t *out) {
    std::vector<unsigned char> &b = const_cast<fl_ale *>(a)->buf;
    b.resize(pixels(a) * 3);
    a->ale.getScreenRGB(b);
    std::copy(b.begin(), b.end(), out);
}

extern "C" const char *fl_ale_action_name(int action) {
    static const char *const names[FL_ALE_MAX_ACTIONS] = {
        "noop",     "fire",     "up",          "right",      "left",          "down",
        "upright",  "upleft",   "downright",   "downleft",   "upfire",        "rightfire",
        "leftfire", "downfire", "uprightfire", "upleftfire", "downrightfire", "downleftfire"};
    return action >= 0 && action < FL_ALE_MAX_ACTIONS ? names[action] : "?";
}
