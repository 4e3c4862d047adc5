#!/usr/bin/env python3
"""The reference side of bench/learner_bench: the same DQN update in PyTorch (eager).

One update, as learner/dqn.h does it: double DQN with a target network, a dueling head,
n-step returns and discounts given per item, importance weights, Huber loss (delta 1)
averaged with the weights, new priorities |y - q|, global gradient-norm clipping to 40,
and one centered RMSProp step (lr 6.25e-5, alpha 0.95, eps 1.5e-7). Inputs are random
tensors made before the clock starts.

On the CPU (the default) the observations of --obs-dtype sit in host tensors. float32
images are already in (C, H, W), in the memory layout --memory-format names; uint8 images
are (H, W, C), as replay stores them, and every update converts them (x / 255) into the
network's layout: the whole batch's s_t and s_{t+n} once each, as an Ape-X learner in
PyTorch does. --memory-format contiguous is torch's default (N, C, H, W) layout;
channels_last keeps the channels innermost, (N, H, W, C) in memory (the network's weights
too, model.to(memory_format=torch.channels_last)), where PyTorch's oneDNN convolutions run
their channels-last kernels; learner_bench tries both for the image networks and keeps the
faster. With --device cuda the update mirrors fleet's GPU
learner (learner/dqn_cuda.h) step for step: the batch (observations of
--obs-dtype, actions, returns, discounts, weights) sits in pinned host memory and is
copied to the GPU every update; uint8 observations are converted there (x / 255), images
go from (H, W, C) to (C, H, W) there, and the priorities come back to the host at the
end of every update. --tf32 1 allows TF32 in matmuls and cuDNN convolutions (fleet's
tf32 flag), 0 forbids it; --cudnn-benchmark 1 sets torch.backends.cudnn.benchmark (cuDNN
times its algorithms; fleet's cudnn_benchmark), 0 (the default) leaves the heuristics.

--threads T is torch.set_num_threads(T). learner_bench runs this script with
OMP_NUM_THREADS=T and OPENBLAS_NUM_THREADS=1, then with OPENBLAS_NUM_THREADS set to the
core count (Debian's torch calls OpenBLAS for its dense layers), and keeps the faster; on
a CPU that OpenBLAS does not know it adds OPENBLAS_CORETYPE (SkylakeX on AVX-512), and on
AVX-512 ATEN_CPU_CAPABILITY=avx512 (its first output line says which). Run it by hand
with the same environment to get the same configuration.

Prints one line: "<updates/s> <torch version> <threads> <updates/s of the best window>"
(report_rate says how the windows are cut).
Usage: learner_bench_torch.py --case mlp|minatar|nature --batch B --threads T --seconds S
       [--device cpu|cuda] [--tf32 0|1] [--obs-dtype float32|uint8] [--cudnn-benchmark 0|1]
       [--memory-format contiguous|channels_last]
"""
import argparse
import time

import torch
import torch.nn as nn


class Dueling(nn.Module):
    def __init__(self, features, actions):
        super().__init__()
        self.value = nn.Linear(features, 1)
        self.advantage = nn.Linear(features, actions)

    def forward(self, h):
        a = self.advantage(h)
        return self.value(h) + a - a.mean(dim=1, keepdim=True)


def network(case, actions):
    if case == "mlp":
        return nn.Sequential(nn.Linear(4, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), Dueling(256, actions))
    if case == "minatar":
        return nn.Sequential(nn.Conv2d(4, 16, 3, 1), nn.ReLU(), nn.Flatten(), nn.Linear(1024, 128), nn.ReLU(),
                             Dueling(128, actions))
    return nn.Sequential(nn.Conv2d(4, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
                         nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(),
                         Dueling(512, actions))


SHAPES = {"mlp": ((4,), 2), "minatar": ((10, 10, 4), 6), "nature": ((84, 84, 4), 18)}


def learner(case, actions, dev, memory_format=torch.contiguous_format):
    """The online network, the target network (a copy of it) and the centered RMSProp."""
    online = network(case, actions).to(dev, memory_format=memory_format)
    target = network(case, actions).to(dev, memory_format=memory_format)
    target.load_state_dict(online.state_dict())
    opt = torch.optim.RMSprop(online.parameters(), lr=6.25e-5, alpha=0.95, eps=1.5e-7, centered=True)
    return online, target, opt


def update(online, target, opt, obs, nxt, act, ret, disc, w):
    """One update (see above) on a batch already on the device; returns the priorities."""
    with torch.no_grad():
        a_star = online(nxt).argmax(dim=1, keepdim=True)
        y = ret + disc * target(nxt).gather(1, a_star).squeeze(1)
    q = online(obs).gather(1, act.unsqueeze(1)).squeeze(1)
    loss = (w * nn.functional.huber_loss(q, y, reduction="none", delta=1.0)).mean()
    prio = (q - y).detach().abs()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(online.parameters(), 40.0)
    opt.step()
    return prio


# a window of the best-window rate: at least this long and this many steps (bench/flops.h's
# FL_BENCH_WINDOW_S and FL_BENCH_WINDOW_STEPS, the C benches' own windows)
WINDOW_S, WINDOW_STEPS = 0.1, 10


def report_rate(step, seconds, warmed_up=None):
    """3 warm-up steps (then warmed_up()), then steps for `seconds` (at least 2); prints the
    line: the mean steps/s, torch's version, its threads, and the steps/s of the best window
    (consecutive windows of at least WINDOW_S seconds and WINDOW_STEPS steps; the mean when
    the run holds none)."""
    for _ in range(3):
        step()
    if warmed_up:
        warmed_up()
    n, t0 = 0, time.perf_counter()
    best, wn, wt = 0.0, 0, 0.0
    while True:
        step()
        n += 1
        t = time.perf_counter() - t0
        if n - wn >= WINDOW_STEPS and t - wt >= WINDOW_S:
            best = max(best, (n - wn) / (t - wt))
            wn, wt = n, t
        if t >= seconds and n >= 2:
            break
    print(f"{n / t:.3f} {torch.__version__} {torch.get_num_threads()} {best or n / t:.3f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=sorted(SHAPES), required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--tf32", type=int, default=1, choices=[0, 1])
    p.add_argument("--obs-dtype", default="float32", choices=["float32", "uint8"])
    p.add_argument("--cudnn-benchmark", type=int, default=0, choices=[0, 1])
    p.add_argument("--memory-format", default="contiguous", choices=["contiguous", "channels_last"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = bool(a.tf32)
        torch.backends.cudnn.allow_tf32 = bool(a.tf32)
        # heuristics (0) or timed algorithms (1), as fleet's convs column
        torch.backends.cudnn.benchmark = bool(a.cudnn_benchmark)
        return main_cuda(a, dev)
    shape, actions = SHAPES[a.case]
    image = len(shape) == 3
    fmt = torch.channels_last if image and a.memory_format == "channels_last" else torch.contiguous_format
    online, target, opt = learner(a.case, actions, dev, fmt)
    B = a.batch
    if a.obs_dtype == "uint8":
        obs = torch.randint(0, 256, (B,) + shape, dtype=torch.uint8)
        nxt = torch.randint(0, 256, (B,) + shape, dtype=torch.uint8)
    else:
        obs = torch.rand((B,) + shape, device=dev)
        nxt = torch.rand((B,) + shape, device=dev)
    act = torch.randint(0, actions, (B,), device=dev)
    ret = torch.rand(B, device=dev)
    disc = torch.full((B,), 0.99 ** 3, device=dev)
    w = torch.rand(B, device=dev) * 0.9 + 0.1

    def to_input(x):
        """(B, H, W, C) as the environments give it into (B, C, H, W) in layout fmt."""
        x = x.permute(0, 3, 1, 2) if image else x
        # float() keeps the channels-last strides of the permuted view; contiguous() makes
        # the default layout from it
        x = x.float().div_(255.0) if x.dtype == torch.uint8 else x
        return x.contiguous(memory_format=fmt)

    if a.obs_dtype == "uint8":
        def step():
            return update(online, target, opt, to_input(obs), to_input(nxt), act, ret, disc, w)
    else:
        obs, nxt = to_input(obs), to_input(nxt)

        def step():
            return update(online, target, opt, obs, nxt, act, ret, disc, w)
    report_rate(step, a.seconds)


def main_cuda(a, dev):
    shape, actions = SHAPES[a.case]
    online, target, opt = learner(a.case, actions, dev)
    B = a.batch
    if a.obs_dtype == "uint8":
        h_obs = torch.randint(0, 256, (B,) + shape, dtype=torch.uint8).pin_memory()
        h_nxt = torch.randint(0, 256, (B,) + shape, dtype=torch.uint8).pin_memory()
    else:
        h_obs = torch.rand((B,) + shape).pin_memory()
        h_nxt = torch.rand((B,) + shape).pin_memory()
    h_act = torch.randint(0, actions, (B,)).pin_memory()
    h_ret = torch.rand(B).pin_memory()
    h_disc = torch.full((B,), 0.99 ** 3).pin_memory()
    h_w = (torch.rand(B) * 0.9 + 0.1).pin_memory()
    image = len(shape) == 3

    def to_input(h):
        x = h.to(dev, non_blocking=True)
        x = x.float() / 255.0 if x.dtype == torch.uint8 else x
        return x.permute(0, 3, 1, 2).contiguous() if image else x

    def step():
        obs, nxt = to_input(h_obs), to_input(h_nxt)
        act = h_act.to(dev, non_blocking=True)
        ret = h_ret.to(dev, non_blocking=True)
        disc = h_disc.to(dev, non_blocking=True)
        w = h_w.to(dev, non_blocking=True)
        prio = update(online, target, opt, obs, nxt, act, ret, disc, w)
        return prio.cpu()  # the priorities go back to replay every update (synchronizes)

    report_rate(step, a.seconds, torch.cuda.synchronize)


if __name__ == "__main__":
    main()
