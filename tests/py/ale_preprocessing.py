#!/usr/bin/env python3
"""Nature preprocessing check run by tests/integration_atari_python.c: fleet's
`[noop(NOOP_MAX)] frameskip(4) resize(84,84) framestack(4)` over atari-GAME against
Gymnasium's AtariPreprocessing (noop_max NOOP_MAX, frame_skip 4, screen_size 84,
grayscale, no scaling, no terminal on life loss) plus FrameStackObservation(4), over
ALE/GAME-v5 with frameskip 1 and no sticky actions, on the same actions and ALE seed
(fleet: env.args ale_seed=SEED).

  ale_preprocessing.py check FRAMES TRACE GAME SEED STEPS [NOOP_MAX NOOPS]

NOOPS: the number of no-ops fleet took at each reset, one a line. Gymnasium draws its own
with the env's np_random (integers(1, noop_max + 1)); that draw is replaced by one that
checks Gymnasium asks for the same range and hands out fleet's counts in order, so that
both sides start every episode after the same no-ops and the rest is compared as is.

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
    noop_max = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    fleet_noops = []
    if noop_max > 0:
        with open(sys.argv[8]) as f:
            fleet_noops = [int(line) for line in f if line.strip()]
    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    name = "".join(w.capitalize() for w in game.split("_"))
    env = gym.make(f"ALE/{name}-v5", frameskip=1, repeat_action_probability=0.0)
    env = AtariPreprocessing(env, noop_max=noop_max, frame_skip=4, screen_size=84, grayscale_obs=True,
                             scale_obs=False, terminal_on_life_loss=False)
    env = FrameStackObservation(env, 4)
    # ALE's random_seed SEED, as fleet's ale_seed (some games read uninitialised RAM, which
    # the console fills from ALE's generator), then a reset without a seed: reset_game.
    env.unwrapped.ale.setInt("random_seed", seed)
    env.unwrapped.load_game()
    drawn = []
    if noop_max > 0:
        class FleetDraws:
            """Gymnasium's no-op draw, answered with fleet's counts in order."""

            def integers(self, low, high):
                if (low, high) != (1, noop_max + 1):
                    raise SystemExit(f"Gymnasium drew no-ops in [{low}, {high}), fleet in [1, {noop_max + 1})")
                if len(drawn) == len(fleet_noops):
                    raise SystemExit(f"Gymnasium reset {len(drawn) + 1} times, fleet {len(fleet_noops)}")
                n = fleet_noops[len(drawn)]
                if not 1 <= n <= noop_max:
                    raise SystemExit(f"fleet took {n} no-ops at reset {len(drawn)}, expected 1..{noop_max}")
                drawn.append(n)
                return n

        env.unwrapped._np_random = FleetDraws()
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
    if len(drawn) != len(fleet_noops):
        print(f"{game}: Gymnasium reset {len(drawn)} times, fleet {len(fleet_noops)}")
        return 1
    compared = steps + 1 - len(ends)
    total = compared * 84 * 84
    print(f"{game} (noop_max {noop_max}, no-ops {fleet_noops[:8]}{'...' if len(fleet_noops) > 8 else ''}): {steps} steps, rewards and terminals identical; {same} of {compared} stacks' newest frames "
          f"identical ({len(ends)} episode ends not compared); {diff_pixels} of {total} pixels differ "
          f"({100.0 * diff_pixels / total:.4f}%), largest difference {worst}")
    return 0 if worst <= MAX_DIFF else 1


if __name__ == "__main__":
    sys.exit(main())
