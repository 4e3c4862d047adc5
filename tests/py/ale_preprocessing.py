#!/usr/bin/env python3
"""Nature preprocessing check run by tests/integration_atari_python.c: fleet's
`frameskip(4) resize(84,84) framestack(4)` over atari-GAME against Gymnasium's
AtariPreprocessing (noop_max 0, frame_skip 4, screen_size 84, grayscale, no scaling, no
terminal on life loss) plus FrameStackObservation(4), over ALE/GAME-v5 with frameskip 1
and no sticky actions, on the same actions and ALE seed (fleet: env.args ale_seed=SEED).

  ale_preprocessing.py check FRAMES TRACE GAME SEED STEPS

FRAMES: STEPS + 1 newest 84x84 frames (uint8, row-major) that fleet observed, the reset
frame first; TRACE: one line a step, "t action reward terminal". The actions are
a(t) = (7 t + t // 13) % n over the minimal action set; both sides reset after a
terminal step. Checks that rewards and terminals agree at every step, and that the
stacks agree: the newest frame of each (fleet's last channel, Gymnasium's last entry) is
compared pixel by pixel; exit 0 when rewards and terminals agree and no pixel differs by
more than MAX_DIFF (one grey level: the two area resizes round a few pixels differently,
see below), 1 otherwise. The one exception, counted and reported: a step in which the episode ends
inside the frame skip, where Gymnasium max-pools a stale buffer (a frame of the previous
step) and fleet the last two frames taken.
"""
import sys

import numpy as np
import gymnasium as gym
import ale_py
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

# OpenCV's INTER_AREA and fleet's area resize weigh the same source pixels but round a
# few means (none of Pong's pixels, 0.004% of Breakout's, 0.12% of Ms. Pac-Man's) to the
# other neighbouring grey level. The frames agree up to this difference.
MAX_DIFF = 1


def main():
    _, frames_path, trace, game, seed, steps = sys.argv[1:7]
    seed, steps = int(seed), int(steps)
    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    name = "".join(w.capitalize() for w in game.split("_"))
    env = gym.make(f"ALE/{name}-v5", frameskip=1, repeat_action_probability=0.0)
    env = AtariPreprocessing(env, noop_max=0, frame_skip=4, screen_size=84, grayscale_obs=True,
                             scale_obs=False, terminal_on_life_loss=False)
    env = FrameStackObservation(env, 4)
    # ALE's random_seed SEED, as fleet's ale_seed (some games read uninitialised RAM, which
    # the console fills from ALE's generator), then a reset without a seed: reset_game.
    env.unwrapped.ale.setInt("random_seed", seed)
    env.unwrapped.load_game()
    ours = np.fromfile(frames_path, dtype=np.uint8).reshape(steps + 1, 84, 84)
    with open(trace) as f:
        lines = [line.split() for line in f if line.strip()]
    n = env.action_space.n
    obs, _ = env.reset()
    same = 0
    diff_pixels = 0
    worst = 0
    first_diff = [-1]
    ends = []

    def compare(k, theirs):
        nonlocal same, diff_pixels, worst
        d = np.abs(ours[k].astype(int) - theirs.astype(int))
        same += int(d.max() == 0)
        if d.max() and first_diff[0] < 0: first_diff[0] = k
        diff_pixels += int((d > 0).sum())
        worst = max(worst, int(d.max()))

    compare(0, obs[-1])
    for t in range(steps):
        a = (7 * t + t // 13) % n
        obs, r, term, trunc, _ = env.step(a)
        want = [str(t), str(a), str(int(r)), str(int(term))]
        if lines[t] != want:
            print(f"{game} step {t}: fleet {' '.join(lines[t])}, Gymnasium {' '.join(want)} "
                  f"(before it: {same} of {t + 1} frames identical, largest difference {worst}, first at frame {first_diff[0]})")
            return 1
        if term or trunc:
            # The episode ended inside the frame skip: Gymnasium max-pools its buffers as
            # they stand, one of them still holding a frame of the previous step, where
            # fleet max-pools the last two frames taken. Counted apart, not compared.
            ends.append(t + 1)
            obs, _ = env.reset()
            continue
        compare(t + 1, obs[-1])
    compared = steps + 1 - len(ends)
    total = compared * 84 * 84
    print(f"{game}: {steps} steps, rewards and terminals identical; {same} of {compared} stacks' newest frames "
          f"identical ({len(ends)} episode ends not compared); {diff_pixels} of {total} pixels differ "
          f"({100.0 * diff_pixels / total:.4f}%), largest difference {worst}")
    return 0 if worst <= MAX_DIFF else 1


if __name__ == "__main__":
    sys.exit(main())
