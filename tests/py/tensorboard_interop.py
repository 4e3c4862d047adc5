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
                                     env_steps, the x axis, the eval_ columns and, in an
                                     apex run, Gorila's pushes_* and staleness_*) under
                                     the tag TAGS gives it, one point per row at that
                                     row's env_steps; eval/* one point per evals.csv row at
                                     its env_steps; train/return_actor_<i> one point per
                                     returns.csv row of actor i. Counts and integer columns
                                     must match exactly, other values to the CSV's printed
                                     precision. Then the configuration (check_config):
                                     the text summary run/config (the text plugin's, a
                                     string scalar) holds config.ini's every key, value
                                     and, where it differs, default, and renders as a
                                     table; the hparams plugin's experiment, session start
                                     and end records parse, agree with config.ini and the
                                     text, and the plugin's own handlers (get_experiment,
                                     list_session_groups, as the HPARAMS tab asks) list
                                     the run with its hyperparameters and its last
                                     evaluation return as a metric.
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


# metrics.csv column -> TensorBoard tag (launcher/monitor.c's period_metrics)
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
    mode = read_summary(folder).get("learner_mode")
    skip = lambda c: c == "env_steps" or c.startswith("eval") or (mode != "gorila" and gorila_only(c))
    want = {TAGS.get(c, "params/" + c) for c in metrics[0] if not skip(c)}
    want |= set(EVAL_TAGS.values())
    actors = sorted({r["actor"] for r in returns})
    want |= {f"train/return_actor_{a}" for a in actors}
    if tags != want:
        print("missing tags:", sorted(want - tags), "unexpected:", sorted(tags - want))
        return 1
    for column in metrics[0]:
        if skip(column):
            continue
        if not check_series(acc, TAGS.get(column, "params/" + column), metrics, column):
            return 1
    for column, tag in EVAL_TAGS.items():
        if not check_series(acc, tag, evals, column):
            return 1
    for a in actors:
        if not check_series(acc, f"train/return_actor_{a}", [r for r in returns if r["actor"] == a], "return_mean"):
            return 1
    return check_config(folder, evals)


def gorila_only(column):
    """The metrics.csv columns of Gorila's pushes, sent to TensorBoard in Gorila runs only."""
    return column.startswith("pushes_") or column.startswith("staleness_")


def read_summary(folder):
    with open(os.path.join(folder, "summary.txt")) as f:
        return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)


def read_config(folder):
    """config.ini: {"section.key": (value, default)} as its lines and comments spell them."""
    out, section, default = {}, "", None
    with open(os.path.join(folder, "config.ini")) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("["):
                section = line.strip("[]")
            elif line.startswith("#") and "; default " in line:
                default = line.split("; default ", 1)[1]
            elif " = " in line and not line.startswith(("#", ";")):
                key, value = line.split(" = ", 1)
                unq = lambda v: v[1:-1] if len(v) >= 2 and v[0] == v[-1] == '"' else v
                out[f"{section}.{key}"] = (unq(value), unq(default))
    return out


def code_span(cell):
    """The text of a Markdown table cell holding one code span ("" for an empty cell)."""
    cell = cell.strip()
    if not cell:
        return None
    ticks = len(cell) - len(cell.lstrip("`"))
    inner = cell[ticks:-ticks]
    if ticks > 1 and inner.startswith(" ") and inner.endswith(" "):
        inner = inner[1:-1]
    return inner


def check_config(folder, evals):
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard import context
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment, list_session_groups
    from tensorboard.plugins.hparams import metadata as hp_metadata
    from tensorboard.plugins.text import text_plugin

    config = read_config(folder)
    pacc = plugin_event_accumulator.EventAccumulator(folder, size_guidance={"tensors": 0})
    pacc.Reload()
    tags = set(pacc.Tags()["tensors"])
    for tag, plugin in (("run/config", "text"), ("_hparams_/experiment", "hparams"),
                        ("_hparams_/session_start_info", "hparams"), ("_hparams_/session_end_info", "hparams")):
        if tag not in tags or pacc.SummaryMetadata(tag).plugin_data.plugin_name != plugin:
            print(f"{tag}: missing, or not the {plugin} plugin's")
            return 1

    # The text summary: a string scalar at step 0, a Markdown table of every key.
    events = pacc.Tensors("run/config")
    text = tensor_util.make_ndarray(events[0].tensor_proto)
    if len(events) != 1 or events[0].step != 0 or text.shape != () or not isinstance(text.item(), bytes):
        print("run/config:", len(events), "events, step", events[0].step, "shape", text.shape)
        return 1
    rows = {}
    for line in text.item().decode("utf-8").splitlines():
        cells = line.split(" | ")
        if len(cells) == 3 and line.startswith("| ") and line.endswith(" |") and "`" in cells[1]:
            rows[cells[0][2:]] = (code_span(cells[1]), code_span(cells[2][:-2]))
    if set(rows) != set(config):
        print("run/config keys: missing", sorted(set(config) - set(rows)), "unexpected", sorted(set(rows) - set(config)))
        return 1
    for key, (value, default) in config.items():
        want = (value if value else '""', None if value == default else (default if default else '""'))
        if rows[key] != want:
            print(f"run/config {key}: {rows[key]}, config.ini {want}")
            return 1
    html = text_plugin.text_array_to_html(text, enable_markdown=True)
    if html.count("<tr>") != len(config) + 1 or "<code>" not in html:
        print("run/config does not render as a table of every key:", html[:400])
        return 1

    # The hparams plugin's records.
    experiment = hp_metadata.parse_experiment_plugin_data(pacc.SummaryMetadata("_hparams_/experiment").plugin_data.content)
    start = hp_metadata.parse_session_start_info_plugin_data(
        pacc.SummaryMetadata("_hparams_/session_start_info").plugin_data.content)
    end = hp_metadata.parse_session_end_info_plugin_data(
        pacc.SummaryMetadata("_hparams_/session_end_info").plugin_data.content)
    infos = {h.name: h for h in experiment.hparam_infos}
    if set(infos) != set(start.hparams) or not set(infos) <= set(config):
        print("hparams: experiment", sorted(infos), "session", sorted(start.hparams))
        return 1
    for must in ("env.name", "learner.lr", "learner.batch_size", "actor.count", "run.seed", "learner.mode"):
        if must not in infos:
            print(f"hparams: no {must}")
            return 1
    for plumbing in ("run.out_dir", "run.name", "run.tls_dir", "run.checkpoint_dir", "run.log_level"):
        if plumbing in infos:
            print(f"hparams: {plumbing} is not a hyperparameter")
            return 1
    for name, info in infos.items():
        value, default = config[name]
        got = start.hparams[name]
        kind = got.WhichOneof("kind")
        if info.type == api_pb2.DATA_TYPE_FLOAT64:
            ok = kind == "number_value" and got.number_value == float(value)
        elif info.type == api_pb2.DATA_TYPE_BOOL:
            ok = kind == "bool_value" and got.bool_value == (value == "true") and \
                list(info.domain_discrete.values) == [struct_value(False), struct_value(True)]
        else:
            ok = kind == "string_value" and got.string_value == value
        if not ok or info.differs != (value != default) or not info.description:
            print(f"hparam {name}: {info} value {got} against config.ini {value!r} (default {default!r})")
            return 1
    if "eval" not in [v.string_value for v in infos["run.target_on"].domain_discrete.values]:
        print("run.target_on's domain:", infos["run.target_on"])
        return 1
    metric_tags = [m.name.tag for m in experiment.metric_infos]
    if metric_tags != ["eval/return_mean", "train/mean_return_100", "learner/steps", "time/seconds"]:
        print("hparams metrics:", metric_tags)
        return 1
    if end.status != api_pb2.STATUS_SUCCESS or not end.end_time_secs > start.start_time_secs > 1.6e9:
        print("session start", start.start_time_secs, "end", end)
        return 1

    # As the HPARAMS tab asks for them, through TensorBoard's data provider.
    logdir = os.path.dirname(os.path.abspath(folder))
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    tb = base_plugin.TBContext(logdir=logdir, multiplexer=mux, plugin_name_to_instance={},
                               data_provider=data_provider.MultiplexerDataProvider(mux, logdir))
    bc, rc = backend_context.Context(tb), context.RequestContext()
    got = get_experiment.Handler(rc, bc, "", api_pb2.GetExperimentRequest(hparams_limit=1000)).run()
    if {h.name for h in got.hparam_infos} != set(infos) or [m.name.tag for m in got.metric_infos] != metric_tags:
        print("get_experiment:", got)
        return 1
    request = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=1000, allowed_statuses=[0, 1, 2, 3])
    for h in got.hparam_infos:
        request.col_params.add(hparam=h.name)
    for m in got.metric_infos:
        request.col_params.add(metric=m.name)
    groups = list_session_groups.Handler(rc, bc, "", request).run().session_groups
    run = os.path.basename(os.path.abspath(folder))
    mine = [g for g in groups if g.name == run]
    if len(mine) != 1 or mine[0].hparams["learner.lr"].number_value != float(config["learner.lr"][0]):
        print("list_session_groups:", [g.name for g in groups])
        return 1
    final = {v.name.tag: v.value for v in mine[0].metric_values}
    if not near(np.float32(final.get("eval/return_mean", np.nan)), evals[-1]["return_mean"]):
        print("the HPARAMS tab's evaluation return", final, "against evals.csv's last", evals[-1]["return_mean"])
        return 1
    return 0


def struct_value(b):
    from google.protobuf import struct_pb2
    return struct_pb2.Value(bool_value=b)


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
