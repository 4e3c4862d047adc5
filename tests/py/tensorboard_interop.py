#!/usr/bin/env python3
"""Interoperability check run by tests/integration_tensorboard_python.c.

  tensorboard_interop.py check DIR   DIR holds one event file written by fleet
                                     (common/tfevents); checks it against the pattern
                                     below with the `tensorboard` package: every record's
                                     CRCs with TensorBoard's own masked_crc32c, the first
                                     Event (file_version "brain.Event:2"), then
                                     event_accumulator.EventAccumulator (scalars: every
                                     tag, step, value and wall time) and the accumulator
                                     of TensorBoard's server (plugin_event_accumulator,
                                     which turns simple_value into scalar tensors)

Pattern (tests/integration_tensorboard_python.c writes the same): K = 300 events,
k = 0 .. K-1, all arithmetic in float64, left to right:
  step(k) = 97 k                          for k < 250
          = 2^32 - 5 + (k - 250) 2^35     for k >= 250 (steps past 2^32)
  wall(k) = 1700000000.0 + k * 0.37 + 0.001
  one Event at (step(k), wall(k)) with, in this order,
    "env/steps_per_s" = 1000.0 + k * 0.1
    "loss/td"         = (k % 7 - 3) / 3.0
    "replay/size"     = k * 16777217.0
  and, for k % 10 == 0, a second Event at (step(k), wall(k) + 0.5) with
    "eval/return_mean" = -200.0 + k * 1.37
Values are stored as float32, so each must equal numpy.float32(expected) exactly (most
of these are not float32 numbers: the rounding shows); wall times must agree to 1e-6.

  tensorboard_interop.py run RUN_DIR  RUN_DIR is the folder of a real `fleet run`; its
                                     event file must hold every metrics.csv column (but
                                     env_steps, the x axis, and the eval_ columns) under
                                     the tag TAGS gives it, one point per row at that
                                     row's env_steps; eval/* one point per evals.csv row at
                                     its env_steps; train/return_actor_<i> one point per
                                     returns.csv row of actor i. Counts and integer columns
                                     must match exactly, other values to the CSV's printed
                                     precision.
Exit status 0 on success, 1 on a mismatch (printed).
"""
import glob
import os
import struct
import sys

import numpy as np
from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from tensorboard.util import tensor_util

K = 300
EVAL_EVERY = 10


def step(k):
    return 97 * k if k < 250 else 2**32 - 5 + (k - 250) * 2**35


def wall(k):
    return 1700000000.0 + k * 0.37 + 0.001


def expected():
    """tag -> list of (step, wall time, float64 value) in file order."""
    e = {"env/steps_per_s": [], "loss/td": [], "replay/size": [], "eval/return_mean": []}
    for k in range(K):
        e["env/steps_per_s"].append((step(k), wall(k), 1000.0 + k * 0.1))
        e["loss/td"].append((step(k), wall(k), (k % 7 - 3) / 3.0))
        e["replay/size"].append((step(k), wall(k), k * 16777217.0))
        if k % EVAL_EVERY == 0:
            e["eval/return_mean"].append((step(k), wall(k) + 0.5, -200.0 + k * 1.37))
    return e


def check_records(path):
    """Walks the TFRecord framing, checking both CRCs; returns the records' data."""
    with open(path, "rb") as f:
        b = f.read()
    out, at = [], 0
    while at < len(b):
        if len(b) - at < 16:
            raise ValueError(f"{len(b) - at} stray bytes at offset {at}")
        (n,) = struct.unpack_from("<Q", b, at)
        (hcrc,) = struct.unpack_from("<I", b, at + 8)
        if masked_crc32c(b[at:at + 8]) != hcrc:
            raise ValueError(f"record {len(out)}: length CRC {hcrc:#x}, expected {masked_crc32c(b[at:at + 8]):#x}")
        data = b[at + 12:at + 12 + n]
        if len(data) != n or len(b) < at + 16 + n:
            raise ValueError(f"record {len(out)}: length {n} past the end of the file")
        (dcrc,) = struct.unpack_from("<I", b, at + 12 + n)
        if masked_crc32c(data) != dcrc:
            raise ValueError(f"record {len(out)}: data CRC {dcrc:#x}, expected {masked_crc32c(data):#x}")
        out.append(data)
        at += 16 + n
    return out


def compare(where, tag, got, want):
    """got: list of (step, wall, value as float); want: list of (step, wall, float64)."""
    if len(got) != len(want):
        print(f"{where} {tag}: {len(got)} points, expected {len(want)}")
        return False
    for i, ((gs, gw, gv), (ws, ww, wv)) in enumerate(zip(got, want)):
        w32 = np.float32(wv)
        if gs != ws or abs(gw - ww) > 1e-6 or np.float32(gv) != w32 or gv != float(w32):
            print(f"{where} {tag} point {i}: got (step {gs}, wall {gw!r}, value {gv!r}), "
                  f"expected (step {ws}, wall {ww!r}, value float32({wv!r}) = {float(w32)!r})")
            return False
    return True


# metrics.csv column -> TensorBoard tag (cli/launch.c's table)
TAGS = {
    "time_s": "time/seconds", "frames": "env/frames", "env_steps_per_s": "env/steps_per_s", "episodes": "train/episodes",
    "mean_return_100": "train/mean_return_100", "replay_size": "replay/size", "replay_inserted": "replay/inserted",
    "replay_inserts_per_s": "replay/inserts_per_s", "replay_storage_mb": "replay/storage_mb",
    "replay_frames": "replay/frames", "learner_steps": "learner/steps",
    "learner_steps_per_s": "learner/steps_per_s", "samples_per_s": "learner/samples_per_s", "loss": "learner/loss",
    "wait_fraction": "learner/wait_fraction", "param_version": "params/version", "version_lag": "params/version_lag",
    "pushes_applied": "params/pushes_applied", "pushes_dropped": "params/pushes_dropped",
    "memory_rss_mb": "memory/rss_mb", "memory_private_mb": "memory/private_mb",
}
EVAL_TAGS = {"return_mean": "eval/return_mean", "return_std": "eval/return_std", "return_ci95": "eval/return_ci95",
             "return_min": "eval/return_min", "return_max": "eval/return_max", "length_mean": "eval/length_mean",
             "learner_steps": "eval/learner_steps"}


def read_csv(path):
    import csv
    with open(path) as f:
        return list(csv.DictReader(f))


def near(got, text):
    """got (a float32) against a CSV field: exact for integers, else to the printed digits."""
    want = float(text)
    if "." not in text and "e" not in text:
        return got == float(np.float32(want))
    digits = len(text.split(".")[1].split("e")[0]) if "." in text else 0
    return abs(got - want) <= 0.5 * 10.0 ** -digits + 1e-6 * abs(want) + 1e-30


def check_series(acc, tag, rows, column, step_column="env_steps"):
    got = [(e.step, e.value) for e in acc.Scalars(tag)]
    if len(got) != len(rows):
        print(f"{tag}: {len(got)} points, {len(rows)} CSV rows")
        return False
    for i, ((step, value), row) in enumerate(zip(got, rows)):
        if step != int(float(row[step_column])) or not near(value, row[column]):
            print(f"{tag} point {i}: (step {step}, {value!r}), CSV ({row[step_column]}, {row[column]})")
            return False
    return True


def check_run(folder):
    metrics = read_csv(os.path.join(folder, "metrics.csv"))
    evals = read_csv(os.path.join(folder, "evals.csv"))
    returns = read_csv(os.path.join(folder, "returns.csv"))
    if not metrics or not evals or not returns:
        print(f"rows: metrics {len(metrics)}, evals {len(evals)}, returns {len(returns)}: the run is too short")
        return 1
    acc = event_accumulator.EventAccumulator(folder, size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    want = {TAGS.get(c, "params/" + c) for c in metrics[0] if c != "env_steps" and not c.startswith("eval")}
    want |= set(EVAL_TAGS.values())
    actors = sorted({r["actor"] for r in returns})
    want |= {f"train/return_actor_{a}" for a in actors}
    if tags != want:
        print("missing tags:", sorted(want - tags), "unexpected:", sorted(tags - want))
        return 1
    for column in metrics[0]:
        if column == "env_steps" or column.startswith("eval"):
            continue
        if not check_series(acc, TAGS.get(column, "params/" + column), metrics, column):
            return 1
    for column, tag in EVAL_TAGS.items():
        if not check_series(acc, tag, evals, column):
            return 1
    for a in actors:
        if not check_series(acc, f"train/return_actor_{a}", [r for r in returns if r["actor"] == a], "return_mean"):
            return 1
    return 0


def main():
    mode, folder = sys.argv[1], sys.argv[2]
    if mode == "run":
        return check_run(folder)
    if mode != "check":
        print("usage: tensorboard_interop.py check DIR | run RUN_DIR")
        return 1
    files = glob.glob(os.path.join(folder, "events.out.tfevents.*"))
    if len(files) != 1:
        print("event files:", files)
        return 1
    want = expected()
    # The pattern does exercise float32 rounding.
    for tag in ("env/steps_per_s", "loss/td", "replay/size", "eval/return_mean"):
        if not any(float(np.float32(v)) != v for _, _, v in want[tag]):
            print(f"pattern: no {tag} value is changed by float32 rounding")
            return 1

    try:
        records = check_records(files[0])
    except ValueError as e:
        print(f"{files[0]}: {e}")
        return 1
    n_events = K + (K + EVAL_EVERY - 1) // EVAL_EVERY + 1
    if len(records) != n_events:
        print(f"{len(records)} records, expected {n_events}")
        return 1
    first = event_pb2.Event.FromString(records[0])
    if first.WhichOneof("what") != "file_version" or first.file_version != "brain.Event:2" or first.wall_time < 1.6e9:
        print("first event:", first)
        return 1

    acc = event_accumulator.EventAccumulator(folder, size_guidance={"scalars": 0})
    acc.Reload()
    if acc.file_version != 2.0:
        print("file_version:", acc.file_version)
        return 1
    tags = acc.Tags()["scalars"]
    if sorted(tags) != sorted(want):
        print("scalar tags:", sorted(tags), "expected", sorted(want))
        return 1
    for tag in sorted(want):
        got = [(e.step, e.wall_time, e.value) for e in acc.Scalars(tag)]
        if not compare("EventAccumulator", tag, got, want[tag]):
            return 1

    # What TensorBoard's server reads (with --load_fast=false): scalar tensors.
    pacc = plugin_event_accumulator.EventAccumulator(folder, size_guidance={"tensors": 0})
    pacc.Reload()
    ptags = pacc.Tags()["tensors"]
    if sorted(ptags) != sorted(want):
        print("tensor tags:", sorted(ptags), "expected", sorted(want))
        return 1
    for tag in sorted(want):
        if pacc.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
            print(f"{tag}: plugin {pacc.SummaryMetadata(tag).plugin_data.plugin_name!r}, expected 'scalars'")
            return 1
        got = []
        for e in pacc.Tensors(tag):
            a = tensor_util.make_ndarray(e.tensor_proto)
            if a.dtype != np.float32 or a.shape != ():
                print(f"{tag}: tensor of {a.dtype} {a.shape}, expected a float32 scalar")
                return 1
            got.append((e.step, e.wall_time, float(a)))
        if not compare("plugin_event_accumulator", tag, got, want[tag]):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
