#!/usr/bin/env python3
"""The reference side of bench/inference_bench: an actor's per-step inference in PyTorch (eager).

One step, as a PyTorch actor over a vector of --batch envs does it: take the envs' numpy
observations (torch.from_numpy), convert them to float32 (float(); / 255 for the Nature
CNN's uint8 pixels; MinAtar's uint8 0/1 planes are used as they are), run the network
(bench/learner_bench_torch.py's, float32), take the greedy argmax and hand the actions
back as numpy. The whole timed loop runs inside torch.inference_mode(). With
--memory-format contiguous (the default) images come as (C, H, W), the layout torch's
convolutions take by default, so no step pays a transpose; with channels_last they come
as the environments give them, (H, W, C), and go in as a permuted view, (N, C, H, W) with
the channels innermost in memory, the layout of PyTorch's channels-last convolution
kernels (the network's weights are in it too: model.to(memory_format=torch.channels_last)).
inference_bench runs both for the image networks and keeps the faster. The same
observations, made before the clock starts, are used every step.

--threads T is torch.set_num_threads(T); inference_bench runs this script at 1 with
OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1 in its environment (Debian's torch calls
OpenBLAS for its dense layers), plus OPENBLAS_CORETYPE where OpenBLAS does not know the
CPU (SkylakeX on AVX-512) and ATEN_CPU_CAPABILITY=avx512 on AVX-512 (its first output line
says which).

Prints one line: "<steps/s> <torch version> <threads> <steps/s of the best window>" (windows
of at least 0.1 s and 10 steps, as inference_bench cuts its own).
Usage: inference_bench_torch.py --case mlp|minatar|nature --batch B [--threads T] --seconds S
       [--memory-format contiguous|channels_last]
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from learner_bench_torch import SHAPES, network, report_rate  # noqa: E402


def observations(case, shape, B, channels_last):
    """The batch as the envs hand it over, and the conversion an actor applies to it."""
    rng = np.random.default_rng(1)
    if case == "mlp":
        return rng.random((B,) + shape, dtype=np.float32), lambda x: x
    h, w, c = shape
    dims = (B, h, w, c) if channels_last else (B, c, h, w)
    # channels_last: (B, H, W, C) seen as (B, C, H, W); float() keeps those strides
    view = (lambda x: x.permute(0, 3, 1, 2)) if channels_last else (lambda x: x)
    if case == "minatar":
        return (rng.random(dims) < 0.1).astype(np.uint8), lambda x: view(x).float()
    return rng.integers(0, 256, dims, dtype=np.uint8), lambda x: view(x).float() / 255.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=sorted(SHAPES), required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--memory-format", default="contiguous", choices=["contiguous", "channels_last"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    shape, actions = SHAPES[a.case]
    channels_last = a.memory_format == "channels_last" and len(shape) == 3
    net = network(a.case, actions).eval()
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    obs, convert = observations(a.case, shape, a.batch, channels_last)

    def step():
        return net(convert(torch.from_numpy(obs))).argmax(dim=1).numpy()

    with torch.inference_mode():
        report_rate(step, a.seconds)


if __name__ == "__main__":
    main()
