#!/usr/bin/env bash
# Formats every C, C++ and CUDA file of the tree (tracked, or new and not ignored) with the root .clang-format.
# --check: change nothing, list the files that differ and exit 1 if any do.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/need.sh
need_packages clang-format:clang-format
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.c' '*.h' '*.cpp' '*.cu')
if [ "${1:-}" = --check ]; then
  bad=()
  for f in "${files[@]}"; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "not formatted (run scripts/format.sh): ${bad[*]}" >&2
    exit 1
  fi
  echo "all ${#files[@]} files formatted"
else
  clang-format -i "${files[@]}"
fi
