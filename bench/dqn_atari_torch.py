#!/usr/bin/env python3
"""dqn_atari_torch: the PyTorch peer of fleet's Atari agent, in the style of CleanRL's
dqn_atari.py: one process that steps a Gymnasium Atari env (ale-py), keeps a replay
buffer and trains a double, dueling, n-step DQN on it with PyTorch, acting and learning
in turn. Used by docs/benchmarks.md ("Atari learning throughput: fleet and a PyTorch DQN")
to compare learning throughput at the same replay ratio, batch, n-step and network as a
fleet config, and the time each takes to reach a Pong return.

What it runs, as fleet's Nature preset does: ALE/<Game>-v5 with frameskip 1 and no sticky
actions, Gymnasium's AtariPreprocessing (noop_max 30, frame_skip 4 with a max over the
last two frames, 84x84 grayscale, terminal on life loss for training), reward clipping to
its sign, FrameStackObservation(4), 27,000 agent steps at most; --envs copies stepped in
turn (gymnasium.vector.SyncVectorEnv). The network is --net: "small" (conv(16,8,4) relu
conv(32,4,2) relu flatten dense(256) relu dueling, fleet's Pong config) or "nature" (the
Nature CNN with a dueling head); inputs uint8 scaled by 1/255. The update: n-step double
DQN targets with the target network, Huber loss (delta 1), Adam (--lr, eps --adam-eps),
gradient norm clipped to --grad-clip, the target copied every --target-update updates.
Replay: uniform over the last --capacity transitions (CleanRL's), stored as uint8 stacks.
Replay ratio: --replay-ratio samples per inserted transition, i.e. one update of --batch
every batch / replay_ratio env steps (a fraction carried over). Exploration: epsilon
from 1.0 down to --eps-end linearly over --eps-steps env steps. Learning starts at
--learning-starts transitions.

Output: one line every --report seconds (elapsed, env steps, frames, frames/s and
updates/s over the last period and since learning began, the mean return of the last 10
training episodes, the latest greedy evaluation); with --eval-every S, a greedy
evaluation of --eval-episodes episodes (without the life-loss terminal, epsilon
--eval-epsilon) every S seconds of training, its time not counted in the throughput; a
CSV of every report (--csv). Stops after --seconds, or --frames, or when the evaluation
(else the training mean) reaches --target. The last line is a summary:
  peer: frames/s F (learning phase), updates/s U, threads T, reached R at S s / N frames

  python3 bench/dqn_atari_torch.py --game pong --net small --batch 32 --replay-ratio 32 \\
      --n-step 3 --lr 1e-4 --target-update 1000 --threads 2 --seconds 600

Needs: torch (Debian: python3-torch), gymnasium, ale-py, numpy (pip).
"""
import argparse
import collections
import csv
import sys
import time

import numpy as np


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="pong")
    p.add_argument("--net", choices=["small", "nature"], default="small")
    p.add_argument("--envs", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--replay-ratio", type=float, default=32.0)
    p.add_argument("--n-step", type=int, default=3)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--adam-eps", type=float, default=1.5e-4)
    p.add_argument("--grad-clip", type=float, default=10.0)
    p.add_argument("--target-update", type=int, default=1000)
    p.add_argument("--capacity", type=int, default=200000)
    p.add_argument("--learning-starts", type=int, default=10000)
    p.add_argument("--eps-end", type=float, default=0.01)
    p.add_argument("--eps-steps", type=int, default=100000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--frames", type=float, default=0.0)
    p.add_argument("--target", type=float, default=None)
    p.add_argument("--eval-every", type=float, default=0.0)
    p.add_argument("--eval-episodes", type=int, default=5)
    p.add_argument("--eval-epsilon", type=float, default=0.0)
    p.add_argument("--report", type=float, default=10.0)
    p.add_argument("--csv", default="")
    return p.parse_args()


def make_env(game, seed, train):
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, TransformReward

    gym.register_envs(ale_py)
    name = "".join(w.capitalize() for w in game.split("_"))

    def thunk():
        env = gym.make(f"ALE/{name}-v5", frameskip=1, repeat_action_probability=0.0,
                       max_num_frames_per_episode=108000)
        env = AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True,
                                 scale_obs=False, terminal_on_life_loss=train)
        if train:
            env = TransformReward(env, lambda r: float(np.sign(r)))
        env = FrameStackObservation(env, 4)
        env.action_space.seed(seed)
        return env

    return thunk


def build_net(torch, kind, actions):
    nn = torch.nn

    class Dueling(nn.Module):
        def __init__(self):
            super().__init__()
            if kind == "small":
                self.torso = nn.Sequential(nn.Conv2d(4, 16, 8, 4), nn.ReLU(), nn.Conv2d(16, 32, 4, 2), nn.ReLU(),
                                           nn.Flatten())
                flat, hidden = 32 * 9 * 9, 256
            else:
                self.torso = nn.Sequential(nn.Conv2d(4, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
                                           nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten())
                flat, hidden = 64 * 7 * 7, 512
            self.value = nn.Sequential(nn.Linear(flat, hidden), nn.ReLU(), nn.Linear(hidden, 1))
            self.adv = nn.Sequential(nn.Linear(flat, hidden), nn.ReLU(), nn.Linear(hidden, actions))

        def forward(self, x):
            h = self.torso(x.float() / 255.0)
            a = self.adv(h)
            return self.value(h) + a - a.mean(dim=1, keepdim=True)

    return Dueling()


class Replay:
    """Uniform replay of n-step transitions over the last `capacity`, uint8 stacks."""

    def __init__(self, capacity, rng):
        self.cap, self.rng = capacity, rng
        self.obs = np.zeros((capacity, 4, 84, 84), np.uint8)
        self.nxt = np.zeros((capacity, 4, 84, 84), np.uint8)
        self.act = np.zeros(capacity, np.int64)
        self.rew = np.zeros(capacity, np.float32)
        self.disc = np.zeros(capacity, np.float32)
        self.size = self.pos = 0

    def add(self, o, a, r, d, n):
        i = self.pos
        self.obs[i], self.act[i], self.rew[i], self.disc[i], self.nxt[i] = o, a, r, d, n
        self.pos = (i + 1) % self.cap
        self.size = min(self.size + 1, self.cap)

    def sample(self, b):
        idx = self.rng.integers(0, self.size, b)
        return self.obs[idx], self.act[idx], self.rew[idx], self.disc[idx], self.nxt[idx]


def evaluate(torch, net, game, seed, episodes, epsilon, actions):
    env = make_env(game, seed, train=False)()
    rng = np.random.default_rng(seed)
    rets = []
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        ret, done, steps = 0.0, False, 0
        while not done and steps < 27000:
            if rng.random() < epsilon:
                a = int(rng.integers(actions))
            else:
                with torch.no_grad():
                    a = int(net(torch.from_numpy(np.asarray(obs)[None])).argmax(1).item())
            obs, r, term, trunc, _ = env.step(a)
            ret += r
            steps += 1
            done = term or trunc
        rets.append(ret)
    env.close()
    return float(np.mean(rets))


def main():
    args = parse()
    import gymnasium as gym
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    envs = gym.vector.SyncVectorEnv([make_env(args.game, args.seed + i, True) for i in range(args.envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    A = envs.single_action_space.n
    online, target = build_net(torch, args.net, A), build_net(torch, args.net, A)
    target.load_state_dict(online.state_dict())
    opt = torch.optim.Adam(online.parameters(), lr=args.lr, eps=args.adam_eps)
    replay = Replay(args.capacity, rng)
    pending = [collections.deque() for _ in range(args.envs)]  # (obs, action, reward) of the last n steps
    obs, _ = envs.reset(seed=args.seed)
    steps = updates = 0
    owed = 0.0
    returns = collections.deque(maxlen=10)
    ep_ret = np.zeros(args.envs)
    t0 = time.monotonic()
    eval_time = 0.0
    last_eval_at, last_eval = 0.0, float("nan")
    learn_t0 = learn_steps0 = learn_updates0 = None
    rep_t, rep_steps, rep_updates = t0, 0, 0
    reached = None
    rows = []
    gn = args.gamma ** np.arange(args.n_step + 1)

    def emit(q, k, terminal):
        """Inserts the transition of q[0]: k rewards, bootstrapping from the k-th step's next observation."""
        r = sum(gn[j] * q[j][2] for j in range(k))
        replay.add(q[0][0], q[0][1], r, 0.0 if terminal else gn[k], q[k - 1][3])
        q.popleft()

    while True:
        now = time.monotonic()
        train_s = now - t0 - eval_time
        if args.seconds and train_s >= args.seconds:
            break
        if args.frames and steps * 4 >= args.frames:
            break
        eps = max(args.eps_end, 1.0 - (1.0 - args.eps_end) * steps / max(1, args.eps_steps))
        with torch.no_grad():
            q = online(torch.from_numpy(np.asarray(obs)))
        acts = q.argmax(1).numpy()
        explore = rng.random(args.envs) < eps
        acts = np.where(explore, rng.integers(0, A, args.envs), acts)
        nobs, r, term, trunc, info = envs.step(acts)
        for i in range(args.envs):
            ep_ret[i] += r[i]
            # the observation after this step: the next stack, or at an end the final one
            after = np.asarray(info["final_obs"][i]) if (term[i] or trunc[i]) and "final_obs" in info else nobs[i]
            q0 = pending[i]
            q0.append((np.asarray(obs[i]), int(acts[i]), float(r[i]), after))
            if term[i] or trunc[i]:  # every pending transition ends here (bootstrapping only when cut)
                while q0:
                    emit(q0, len(q0), bool(term[i]))
                returns.append(ep_ret[i])
                ep_ret[i] = 0
            elif len(q0) >= args.n_step:
                emit(q0, args.n_step, False)
        obs = nobs
        steps += args.envs
        if replay.size >= args.learning_starts:
            if learn_t0 is None:
                learn_t0, learn_steps0, learn_updates0 = time.monotonic() - t0 - eval_time, steps, updates
            owed += args.envs * args.replay_ratio / args.batch
            while owed >= 1.0:
                owed -= 1.0
                o, a, rw, d, n = replay.sample(args.batch)
                o, n = torch.from_numpy(o), torch.from_numpy(n)
                with torch.no_grad():
                    best = online(n).argmax(1, keepdim=True)
                    y = torch.from_numpy(rw) + torch.from_numpy(d) * target(n).gather(1, best).squeeze(1)
                qa = online(o).gather(1, torch.from_numpy(a)[:, None]).squeeze(1)
                loss = torch.nn.functional.smooth_l1_loss(qa, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(online.parameters(), args.grad_clip)
                opt.step()
                updates += 1
                if updates % args.target_update == 0:
                    target.load_state_dict(online.state_dict())
        now = time.monotonic()
        if args.eval_every and learn_t0 is not None and now - t0 - eval_time - last_eval_at >= args.eval_every:
            e0 = time.monotonic()
            last_eval = evaluate(torch, online, args.game, 10_000 + updates, args.eval_episodes, args.eval_epsilon, A)
            eval_time += time.monotonic() - e0
            rep_t += time.monotonic() - e0  # the period's rates count training time only
            last_eval_at = time.monotonic() - t0 - eval_time
            now = time.monotonic()
        headline = last_eval if args.eval_every else (np.mean(returns) if len(returns) == 10 else float("nan"))
        if reached is None and args.target is not None and headline == headline and headline >= args.target:
            reached = (time.monotonic() - t0 - eval_time, steps * 4)
        if now - rep_t >= args.report or reached is not None:
            el = now - t0 - eval_time
            fps = (steps - rep_steps) * 4 / (now - rep_t)
            ups = (updates - rep_updates) / (now - rep_t)
            mret = float(np.mean(returns)) if returns else float("nan")
            row = dict(time_s=round(el, 1), env_steps=steps, frames=steps * 4, frames_per_s=round(fps, 1),
                       updates_per_s=round(ups, 2), eps=round(eps, 4), train_return_10=round(mret, 2),
                       eval_return=round(last_eval, 2))
            rows.append(row)
            print(" ".join(f"{k} {v}" for k, v in row.items()), flush=True)
            rep_t, rep_steps, rep_updates = now, steps, updates
        if reached is not None:
            break
    end = time.monotonic() - t0 - eval_time
    if learn_t0 is not None and end > learn_t0:
        lfps = (steps - learn_steps0) * 4 / (end - learn_t0)
        lups = (updates - learn_updates0) / (end - learn_t0)
    else:
        lfps = lups = float("nan")
    if args.csv and rows:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    where = f"reached {args.target} at {reached[0]:.0f} s / {reached[1]} frames" if reached else "target not reached"
    print(f"peer: frames/s {lfps:.1f} (learning phase), updates/s {lups:.2f}, threads {args.threads}, "
          f"net {args.net}, batch {args.batch}, replay ratio {args.replay_ratio:g}, {args.envs} env(s); {where}; "
          f"{steps} env steps, {updates} updates in {end:.0f} s of training")
    envs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
