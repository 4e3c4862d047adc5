#!/usr/bin/env bash
# gpu_profile: where one GPU update's time goes. Runs bench/learner_bench's GPU rows for
# one case and batch under Nsight Compute (ncu), timing every kernel at the card's own
# clocks (one metric, gpu__time_duration), and prints per kernel name its count and total
# time over the profiled launches, largest first, with the pinned host-to-device copy
# rate PyTorch measures on the same GPU (the batch's copy is part of every update).
# OUT_DIR gets ncu's CSV (ncu.csv); the rest goes to standard output.
#
#   bash scripts/gpu_profile.sh [OUT_DIR] [CASE] [BATCH] [LAUNCHES]
#   (defaults: gpu-profile, nature, 512, 400 kernel launches from the first row's start:
#   TF32 on, heuristic algorithms, its warm-up, capture and replays)
# Needs ncu on PATH (or NCU=path) and the programs built with CUDA (build/, or unpacked
# from scripts/bundle.sh's archive with build/bundle-lib on LD_LIBRARY_PATH, as
# scripts/gpu_check.sh sets it up).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root" || exit 1
out="${1:-$root/gpu-profile}"
case_="${2:-nature}"
batch="${3:-512}"
launches="${4:-400}"
ncu="${NCU:-$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)}"
[ -n "$ncu" ] || { echo "gpu_profile: no ncu (set NCU)"; exit 1; }
python="${PYTHON:-python3}"
mkdir -p "$out"
"$python" - 2>&1 <<'EOF'
import torch
n = 2 * 512 * 84 * 84 * 4  # a Nature batch of 512: obs and next_obs, uint8
h = torch.empty(n, dtype=torch.uint8).pin_memory()
d = torch.empty(n, dtype=torch.uint8, device="cuda")
for _ in range(3):
    d.copy_(h, non_blocking=True)
torch.cuda.synchronize()
a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
a.record()
for _ in range(50):
    d.copy_(h, non_blocking=True)
b.record()
torch.cuda.synchronize()
ms = a.elapsed_time(b) / 50
print(f"pinned host-to-device copy: {n / 1e6:.1f} MB in {ms:.3f} ms = {n / ms / 1e6:.1f} GB/s")
EOF
"$ncu" --csv --clock-control none --metrics gpu__time_duration.sum --launch-count "$launches" \
  build/bench/learner_bench --no-cpu --no-torch --case "$case_" --batch "$batch" --seconds 0.2 \
  >"$out/ncu.csv" 2>&1
rc=$?
grep -v '^"' "$out/ncu.csv" | tail -5
echo "ncu exit $rc ($(grep -c gpu__time_duration "$out/ncu.csv") kernels)"
"$python" - "$out/ncu.csv" <<'EOF'
import csv, sys, collections
rows = []
with open(sys.argv[1]) as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "ns")
    v *= {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1e-3)
    rows.append((r["Kernel Name"][:110], v))
tot = collections.defaultdict(float)
cnt = collections.Counter()
for name, us in rows:
    tot[name] += us
    cnt[name] += 1
all_us = sum(tot.values())
print(f"{len(rows)} launches, {all_us / 1e3:.2f} ms of kernels")
for name, us in sorted(tot.items(), key=lambda kv: -kv[1])[:40]:
    print(f"{us:10.1f} us {cnt[name]:5d}x {us / cnt[name]:9.1f} us  {name}")
EOF
