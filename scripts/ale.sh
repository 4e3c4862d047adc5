#!/usr/bin/env bash
# Fetches and builds the Arcade Learning Environment (the C++ emulator library behind
# ale-py; GPL-2.0) once, from the ale-py source distribution on PyPI, which holds ALE's
# whole C++ source and its ROMs. The result is cached in DEPS (default: .deps/ in the
# source tree, or $FLEET_DEPS_DIR):
#   DEPS/ale-<version>/src      the unpacked source (src/ale/..., roms in src/ale/python/roms)
#   DEPS/ale-<version>/build    libale.so and the generated headers
#   DEPS/ale-<version>/roms     the ROMs (*.bin)
# CMake finds it there (FLEET_ALE=AUTO). Does nothing when the library is already built.
# Needs python3 with venv and pip (pip fetches the source), cmake, a C++ compiler, zlib.
# A failure prints why and exits 1; scripts/setup.sh then goes on without Atari.
set -euo pipefail
version=0.12.1
root="$(cd "$(dirname "$0")/.." && pwd)"
deps="${FLEET_DEPS_DIR:-$root/.deps}"
dir="$deps/ale-$version"
if [ -f "$dir/build/src/ale/libale.so" ] && [ -d "$dir/roms" ]; then
  echo "ale: $dir (cached)"
  exit 0
fi
mkdir -p "$dir"
py="$(command -v python3 || true)"
[ -n "$py" ] || { echo "ale: python3 is needed to fetch the ale-py source (apt-get install python3-venv)" >&2; exit 1; }
if [ ! -f "$dir/ale_py-$version.tar.gz" ]; then
  echo "ale: fetching ale-py $version's source distribution with pip"
  rm -rf "$dir/venv"
  "$py" -m venv "$dir/venv" >/dev/null || { echo "ale: python3 -m venv failed (apt-get install python3-venv)" >&2; exit 1; }
  # pip cannot read the package's metadata in an isolated build environment (it cannot
  # resolve jax there), so the sdist is fetched without isolation, with scikit-build-core.
  "$dir/venv/bin/pip" install --quiet --disable-pip-version-check scikit-build-core
  "$dir/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    --no-build-isolation -d "$dir" "ale-py==$version"
  rm -rf "$dir/venv"
fi
rm -rf "$dir/src" && mkdir -p "$dir/src"
tar -xzf "$dir/ale_py-$version.tar.gz" -C "$dir/src" --strip-components=1
echo "ale: building libale (C++ only, no SDL, no Python; about 2 minutes on 2 cores)"
cmake -S "$dir/src" -B "$dir/build" -DBUILD_PYTHON_LIB=OFF -DBUILD_CPP_LIB=ON -DSDL_SUPPORT=OFF \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON >"$dir/build.log" 2>&1 ||
  { echo "ale: cmake failed, see $dir/build.log" >&2; exit 1; }
cmake --build "$dir/build" -j"$(nproc)" >>"$dir/build.log" 2>&1 || { echo "ale: build failed, see $dir/build.log" >&2; exit 1; }
rm -rf "$dir/roms" && mkdir -p "$dir/roms"
cp "$dir"/src/src/ale/python/roms/*.bin "$dir/roms/"
echo "ale: $dir ($(ls "$dir/roms" | wc -l) ROMs)"
