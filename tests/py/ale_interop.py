#!/usr/bin/env python3
"""Fidelity check run by tests/integration_atari_python.c: fleet's Atari envs against
ale-py, the Python package of the same emulator.

  ale_interop.py check TRACE GAME SEED STICKY STEPS [mode=M] [difficulty=D] [full]

TRACE was written by fleet's env atari-GAME (env.args ale_seed=SEED, env.sticky_actions
STICKY), one line per frame: "t action reward terminal lives crc" where action is the
index into the game's minimal action set (with `full`, fleet's atari-GAME-full: into
ALE's legal set, as Gymnasium's full_action_space), terminal is 1 at a game over (fleet
then resets, as this script does with reset_game), lives is ALE's count after the frame
and crc is zlib's CRC-32 of the whole grayscale screen after the frame (210x160 for most
games; its own height for a few). The actions are
     a(t) = (7 t + t // 13) % n        (n: the size of the action set)
This script plays the same actions with ale_py.ALEInterface (random_seed SEED, any int32,
repeat_action_probability STICKY, the ROM of the ale-py wheel; with mode=M and
difficulty=D, setMode and setDifficulty after loading it, then one reset_game, as
Gymnasium's AtariEnv begins its first episode and fleet begins every episode) and checks
every line: exit 0 when all STEPS agree, 1 at the first difference (printed).
"""
import sys
import zlib

from ale_py import ALEInterface, LoggerMode, roms


def main():
    _, trace, game, seed, sticky, steps = sys.argv[1:7]
    seed, sticky, steps = int(seed), float(sticky), int(steps)
    extra = dict(a.split("=") if "=" in a else (a, "1") for a in sys.argv[7:])
    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.setInt("random_seed", seed)
    ale.setFloat("repeat_action_probability", sticky)
    ale.loadROM(roms.get_rom_path(game))
    if "mode" in extra:
        ale.setMode(int(extra["mode"]))
    if "difficulty" in extra:
        ale.setDifficulty(int(extra["difficulty"]))
    ale.reset_game()  # an episode begins with reset_game, the first one too (as in fleet and Gymnasium)
    actions = ale.getLegalActionSet() if "full" in extra else ale.getMinimalActionSet()
    n = len(actions)
    with open(trace) as f:
        lines = [line.split() for line in f if line.strip()]
    if len(lines) != steps:
        print(f"{game}: {len(lines)} lines in the trace, expected {steps}")
        return 1
    for t in range(steps):
        a = (7 * t + t // 13) % n
        r = ale.act(actions[a])
        term = 1 if ale.game_over(with_truncation=False) else 0
        lives = ale.lives()
        crc = zlib.crc32(ale.getScreenGrayscale().tobytes())
        want = [str(t), str(a), str(int(r)), str(term), str(lives), str(crc)]
        if lines[t] != want:
            print(f"{game} {' '.join(sys.argv[7:])} (seed {seed}, sticky {sticky}, {n} actions, screen "
                  f"{ale.getScreenDims()}) frame {t}: fleet {' '.join(lines[t])}, ale-py {' '.join(want)}")
            return 1
        if term:
            ale.reset_game()
    print(f"{game} {' '.join(sys.argv[7:])} (seed {seed}, {n} actions, screen {ale.getScreenDims()}): "
          f"{steps} frames identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
