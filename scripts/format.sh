#!/usr/bin/env bash
# The sources in .clang-format's style (Debian's clang-format). `bash scripts/format.sh`
# rewrites every C, C++ and CUDA source in place; `--check` changes nothing, names the
# files that differ and fails (scripts/test.sh runs it after the tests). Tables that read
# better aligned by hand sit between `clang-format off` and `on` comments.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  echo "format: clang-format is missing (scripts/setup.sh installs it)" >&2
  exit 1
fi
if [ -d .git ] || [ -f .git ]; then
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cc' '*.cu')
else
  mapfile -t files < <(find . -path ./build -prune -o -path './build-*' -prune -o -path ./.deps -prune -o \
    \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' \) -print | sed 's|^\./||' | sort)
fi
if [ "${1:-}" != "--check" ]; then
  clang-format -i "${files[@]}"
  echo "format: ${#files[@]} files in .clang-format's style"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format: ${#bad[@]} of ${#files[@]} files differ from .clang-format's style (bash scripts/format.sh rewrites them):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format: ${#files[@]} files in .clang-format's style"
