#!/usr/bin/env bash
# Installs every Debian package fleet's build and tests need, then fetches and builds the
# Arcade Learning Environment once (scripts/ale.sh, cached in .deps/; FLEET_ALE=OFF skips
# it, and a failure there only leaves the build without Atari envs). Idempotent: does
# nothing when all is present. Uses sudo when not root. CUDA (nvcc, cuBLAS, cuDNN) is
# optional and not installed here: the build uses it when /usr/local/cuda (or nvcc on
# PATH) has it.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  clang-format  # scripts/format.sh: the sources' style, checked by scripts/test.sh
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libcmocka-dev libopenblas-dev libzstd-dev zlib1g-dev
  libssl-dev  # tests/cert_util.h makes test credentials with libcrypto
  libopenmpi-dev openmpi-bin
  libdnnl-dev  # oneDNN: the CPU Q-network's faster backend (a build without it uses the reference kernels)
  gnuplot-nox  # draws each run's curve.png (a run goes on without it; its tests skip the drawing)
  openssl  # `fleet certs` makes a fleet's TLS certificates with the openssl command
  slurm-wlm munge  # tests/integration_slurm.c runs a one-node Slurm cluster (skipped without root)
  python3-venv python3-pip  # fetch ALE's source (scripts/ale.sh) and the interoperability tests' packages
)

# ALE for the Atari envs, after the packages it needs.
ale() {
  if [ "${FLEET_ALE:-AUTO}" = "OFF" ]; then return 0; fi
  bash "$(dirname "$0")/ale.sh" || echo "setup: going on without the Atari envs (see above)" >&2
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  ale
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1
  fi
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
ale
