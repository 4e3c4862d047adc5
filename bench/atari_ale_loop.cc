// atari_ale_loop: ALE's own C++ loop for bench/atari_bench.c, the reference that fleet's
// Atari env is measured against: ale::ALEInterface directly, random actions from the
// minimal set (a small LCG), the grayscale screen read after every frame, resets at game
// over. Returns frames per second.
#include <ale_interface.hpp>

#include <chrono>
#include <cstdint>
#include <vector>

extern "C" double fl_bench_ale_loop(const char *rom, int frames, float sticky) {
    ale::Logger::setMode(ale::Logger::Error);
    ale::ALEInterface a(false);
    a.setInt("random_seed", 7);
    a.setFloat("repeat_action_probability", sticky);
    a.loadROM(rom);
    ale::ActionVect actions = a.getMinimalActionSet();
    std::vector<unsigned char> screen(a.getScreen().height() * a.getScreen().width());
    uint64_t x = 12345;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < frames; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        a.act(actions[(x >> 33) % actions.size()], 1.0f);
        a.getScreenGrayscale(screen);
        if (a.game_over()) a.reset_game();
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return frames / s;
}
