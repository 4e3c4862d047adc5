#!/usr/bin/env bash
# bundle: fleet's programs and the shared libraries they load, in one archive, for a
# machine of the same architecture that lacks the Debian packages fleet builds against
# (a cluster node, a GPU machine with its own image). The programs keep their paths
# under the build folder (build/bin/fleet, build/bench/learner_bench, ...), stripped of
# debug information; the libraries go to build/bundle-lib/. Left out, as they come from
# the machine itself: the C library (libc, libm, libpthread, libdl, librt, the loader),
# the C++ runtime (libstdc++, libgcc_s: a machine's own is at least as new as what this
# build needs where its C library is, and an older copy loaded first would break its
# other programs' libraries) and NVIDIA's driver and CUDA libraries (libcuda, the CUDA
# runtime, cuBLAS, cuDNN: scripts/gpu_check.sh finds them there).
#
#   bash scripts/bundle.sh [BUILD_DIR] [OUT.tar.gz] [PROGRAM ...]
#   (defaults: build, fleet-bundle.tar.gz; programs relative to BUILD_DIR, by default
#   bin/fleet, bench/learner_bench, bench/inference_bench, the GPU tests, tests/*_gpu,
#   and the GPU learner's library lib/libfleet_cuda.so, which the learner loads from the
#   lib/ folder beside bin/)
# Unpack it in a checkout of the same commit (tar xzf OUT.tar.gz) and put
# build/bundle-lib first on LD_LIBRARY_PATH.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$here/build}" && pwd)"
out="${2:-$PWD/fleet-bundle.tar.gz}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
shift $(( $# < 2 ? $# : 2 ))
programs=("$@")
if [ ${#programs[@]} -eq 0 ]; then
  programs=(bin/fleet bench/learner_bench bench/inference_bench)
  for t in "$build"/tests/*_gpu; do [ -x "$t" ] && programs+=("tests/$(basename "$t")"); done
  [ -f "$build/lib/libfleet_cuda.so" ] && programs+=(lib/libfleet_cuda.so)
fi
stage="$(mktemp -d /tmp/fleet-bundle-XXXXXX)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/bundle-lib"
# what the machine itself provides (see above)
system='^(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnvidia-[a-z-]*)\.so'
missing=0
for p in "${programs[@]}"; do
  src="$build/$p"
  if [ ! -f "$src" ]; then
    echo "bundle: $src: no such program (build it first, or name the programs to take)" >&2
    exit 1
  fi
  mkdir -p "$stage/build/$(dirname "$p")"
  cp "$src" "$stage/build/$p"
  strip --strip-debug "$stage/build/$p"
  # every library the loader resolves for it, under the name it asks for (the soname)
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [[ "$name" =~ $system ]]; then continue; fi
    [ "$name" = libfleet_cuda.so ] && continue # bundled as lib/libfleet_cuda.so, where RUNPATH finds it
    if [ "$path" = "not" ]; then
      echo "bundle: $p needs $name, which this machine does not resolve" >&2
      missing=1
      continue
    fi
    [ -e "$stage/build/bundle-lib/$name" ] || cp -L "$path" "$stage/build/bundle-lib/$name"
  done < <(ldd "$src")
done
[ "$missing" = 0 ] || exit 1
git -C "$here" describe --always --dirty >"$stage/build/bundle-commit.txt" 2>/dev/null || true
tar czf "$out" -C "$stage" build
echo "bundle: $out: ${#programs[@]} programs, $(ls "$stage/build/bundle-lib" | wc -l) libraries, $(du -h "$out" | cut -f1)"
