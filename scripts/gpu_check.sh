#!/usr/bin/env bash
# gpu_check: on a machine with an NVIDIA GPU, what shows fleet's GPU learner working
# there, step by step, each step's output in OUT_DIR/<step>.log and one line per step in
# OUT_DIR/summary.txt (a failed step does not stop the later ones; at most 8 files in
# OUT_DIR):
#   gpu      nvidia-smi, and the loader finding every library the programs need, CUDA's
#            among them (a build without CUDA fails here)
#   tests    the GPU tests (ctest's label gpu, run directly): tests/test_kernels_cuda_gpu,
#            tests/test_learner_cuda_gpu
#   cartpole tests/integration_cartpole_gpu: a CartPole fleet with learner.device = cuda
#            solves it, and resumes from its checkpoint
#   bench    bench/learner_bench's GPU rows against PyTorch on the same GPU (--no-cpu)
#   minatar  configs/minatar-breakout.ini with learner.device = cuda for
#            GPU_CHECK_SECONDS (default 60) seconds
#   pong     configs/atari-pong.ini with learner.device = cuda, 4 replay shards where
#            there are 8 cores or more (one shard serves about 18K samples of 84x84x4
#            frames a second, 550 batches of 32: the GPU learner takes twice that),
#            learner.prefetch = 8, as many actors as the other cores allow (nproc - 1 -
#            shards, at least 1) and an evaluation every 60 s, until the greedy
#            evaluation reaches +18 or GPU_CHECK_PONG_SECONDS (default 360) pass;
#            pong.log ends with its curve (evals.csv: seconds, frames, return), the
#            learner's pace and the time to +18
#   profile  (only when GPU_CHECK_STEPS names it) scripts/gpu_profile.sh: the kernels of
#            GPU_CHECK_PROFILE (default "nature 512") under ncu, summed by kernel in
#            profile.log (ncu's CSV stays in a temporary folder: OUT_DIR keeps to 8 files)
# A step that skips for want of a GPU or of CUDA in the build (a test's "SKIP: no GPU",
# "SKIP: fleet was built without CUDA", learner_bench's "GPU rows skipped") counts as
# failed: it showed nothing.
#
#   bash scripts/gpu_check.sh [OUT_DIR] [BUNDLE.tar.gz]
#   GPU_CHECK_STEPS="gpu tests cartpole bench minatar pong" (the default: all, in this order)
#   GPU_CHECK_BUDGET=540 (seconds for all the steps together: each step's limit is cut to
#     what is left, and a step with under 20 s left is not started)
#   GPU_CHECK_BENCH="--case nature --seconds 2" (learner_bench's other arguments)
#   PYTHON=python3 (the interpreter with PyTorch, for the bench)
#
# Run from the repository root, with the programs built (build/, FLEET_CUDA on) or with
# BUNDLE, scripts/bundle.sh's archive of them, for a machine without fleet's Debian
# packages: it is unpacked into the repository root first and build/bundle-lib goes first
# on LD_LIBRARY_PATH. The CUDA runtime, cuBLAS and cuDNN are taken from the machine: its
# CUDA and driver folders and the Python packages nvidia-* (PyTorch's), whichever has them.
# shellcheck disable=SC2317 # the step functions are called through step()
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root" || exit 1
out="${1:-$root/gpu-check}"
bundle="${2:-}"
steps="${GPU_CHECK_STEPS:-gpu tests cartpole bench minatar pong}"
seconds="${GPU_CHECK_SECONDS:-60}"
pong_seconds="${GPU_CHECK_PONG_SECONDS:-360}"
budget="${GPU_CHECK_BUDGET:-540}"
python="${PYTHON:-python3}"
mkdir -p "$out"
: >"$out/summary.txt"
note() { echo "gpu_check: $*" | tee -a "$out/summary.txt"; }

if [ -n "$bundle" ]; then
  tar xzf "$bundle" -C "$root" || { note "cannot unpack $bundle"; exit 1; }
  note "unpacked $bundle ($(cat build/bundle-commit.txt 2>/dev/null || echo 'commit unknown'); this checkout: $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
fi
libpath="$root/build/bundle-lib"
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/local/cuda/lib64 /usr/local/cuda/lib \
  /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && libpath="$libpath:$d"
done
# Python's nvidia-* packages (cuBLAS, cuDNN, the CUDA runtime as PyTorch has them)
while read -r d; do libpath="$libpath:$d"; done < <("$python" - 2>/dev/null <<'EOF'
import os, nvidia
seen = set()
for p in nvidia.__path__:
    for dirpath, _, files in os.walk(p):
        if any(f.startswith("lib") and ".so" in f for f in files) and dirpath not in seen:
            seen.add(dirpath)
            print(dirpath)
EOF
)
# PyTorch's interpreter keeps the machine's own libraries (the bundle's libstdc++, zlib or
# OpenSSL may be older than its): learner_bench starts it through this wrapper
pywrap="$(mktemp -d /tmp/gpu-check-XXXXXX)/python"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "${LD_LIBRARY_PATH:-}" "$(command -v "$python" || echo "$python")" >"$pywrap"
chmod +x "$pywrap"
trap 'rm -rf "$(dirname "$pywrap")"' EXIT
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHON="$pywrap" FLEET_BIN="$root/build/bin/fleet" FLEET_SOURCE_DIR="$root" FLEET_BINARY_DIR="$root/build" OPENBLAS_NUM_THREADS=1

# step NAME LIMIT_S COMMAND...: runs it with its output in OUT_DIR/NAME.log, within
# LIMIT_S and what is left of the budget
step() {
  local name="$1" limit="$2"
  shift 2
  case " $steps " in *" $name "*) ;; *) return 0 ;; esac
  local left=$((budget - SECONDS))
  if [ "$left" -lt 20 ]; then
    note "$name: FAILED: not started, ${left} s of the ${budget} s budget left"
    return 1
  fi
  [ "$limit" -le "$left" ] || limit=$left
  local t0=$SECONDS
  timeout "$limit" bash -c '"$@"' "$name" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local how="ok"
  [ $rc -eq 0 ] || how="FAILED (exit $rc$([ $rc -eq 124 ] && echo ", over ${limit} s"))"
  local skipped='SKIP: (no GPU|fleet was built without CUDA)|GPU rows skipped'
  if [ $rc -eq 0 ] && grep -q -E "$skipped" "$out/$name.log"; then
    rc=1
    how="FAILED (it skipped: $(grep -m1 -E "$skipped" "$out/$name.log"))"
  fi
  note "$name: $how in $((SECONDS - t0)) s: $*"
  return "$rc"
}

gpu_info() {
  local bad=0
  nvidia-smi || bad=1
  for p in build/bin/fleet build/lib/libfleet_cuda.so build/bench/learner_bench build/tests/test_kernels_cuda_gpu \
    build/tests/test_learner_cuda_gpu build/tests/integration_cartpole_gpu; do
    echo "== ldd $p"
    [ -f "$p" ] || { echo "missing: $p"; bad=1; continue; }
    ldd "$p" | grep -E "not found|cud|cublas" || true
    ldd "$p" | grep -q "not found" && bad=1
  done
  if [ -x build/tests/test_kernels_cuda_gpu ] && ! ldd build/tests/test_kernels_cuda_gpu | grep -q libcudart; then
    echo "build/tests/test_kernels_cuda_gpu does not load the CUDA runtime: a build without CUDA (FLEET_CUDA off)"
    bad=1
  fi
  ldd --version 2>&1 | head -1
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  return "$bad"
}
gpu_tests() {
  local rc=0
  for t in test_kernels_cuda_gpu test_learner_cuda_gpu; do
    echo "== $t"
    (cd build/tests && "./$t") || rc=1
  done
  return "$rc"
}
minatar() {
  "$FLEET_BIN" run configs/minatar-breakout.ini --set learner.device=cuda --set run.max_seconds="$seconds" \
    --set run.out_dir="$runs" || return 1
  # a time limit ends the run normally even when the learner never trained
  local steps
  steps="$(sed -n 's/^learner_steps=//p' "$runs/minatar-breakout/summary.txt")"
  echo "== summary.txt"
  cat "$runs/minatar-breakout/summary.txt"
  echo "learner steps: ${steps:-none}"
  [ "${steps:-0}" -gt 0 ]
}
pong() {
  local shards=1
  [ "$(nproc)" -ge 8 ] && shards=4
  local actors=$(($(nproc) - 1 - shards))
  [ "$actors" -ge 1 ] || actors=1
  "$FLEET_BIN" run configs/atari-pong.ini --set learner.device=cuda --set actor.count="$actors" \
    --set replay.shards="$shards" --set learner.prefetch=8 --set eval.every=60 \
    --set run.target_return=18 --set run.max_seconds="$pong_seconds" --set run.out_dir="$runs" || return 1
  local dir="$runs/atari-pong"
  echo "== summary.txt"
  cat "$dir/summary.txt"
  echo "== the curve (evals.csv: seconds, frames, greedy return over 10 episodes)"
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
           { printf "%8.1f s %12d frames %7.2f\n", $col["time_s"], $col["frames"], $col["return_mean"] }' \
    "$dir/evals.csv"
  echo "== the pace (metrics.csv, every 30th row: seconds, env steps/s, updates/s, learner's wait fraction)"
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next } NR % 30 == 2 {
             printf "%8.1f s %8.0f env/s %8.0f upd/s wait %.2f\n", $col["time_s"], $col["env_steps_per_s"],
                    $col["learner_steps_per_s"], $col["wait_fraction"] }' "$dir/metrics.csv"
  # a time limit ends the run normally: the check is that it learned to +18
  grep -q '^reason=target reached' "$dir/summary.txt" && echo "+18 reached: $(sed -n 's/^reason=//p' "$dir/summary.txt")"
}

# the MinAtar run's folder stays out of OUT_DIR (only its summary and metrics go there)
runs="$(dirname "$pywrap")/runs"
export -f gpu_info gpu_tests minatar pong
export out seconds pong_seconds runs
step gpu 60 gpu_info
step tests 240 gpu_tests
step cartpole 300 bash -c 'cd build/tests && ./integration_cartpole_gpu'
# shellcheck disable=SC2086
step bench 300 build/bench/learner_bench --no-cpu --python "$pywrap" \
  --torch-script bench/learner_bench_torch.py ${GPU_CHECK_BENCH:---case nature --seconds 2}
step minatar $((seconds + 90)) minatar
step pong $((pong_seconds + 120)) pong
# shellcheck disable=SC2086
step profile 240 bash scripts/gpu_profile.sh "$(dirname "$pywrap")/profile" ${GPU_CHECK_PROFILE:-nature 512}
case " $steps " in *" minatar "*)
  cp "$runs/minatar-breakout/metrics.csv" "$out/minatar-metrics.csv" 2>/dev/null ;;
esac
grep -q FAILED "$out/summary.txt" && exit 1
exit 0
