#!/usr/bin/env bash
# Installs gardenalloc with `cmake --install --prefix` into a fresh folder, as
# users do, and builds a tiny consumer against it: the CMake package (shared
# and static) and pkg-config (PKG_CONFIG_PATH only); then moves the installed
# tree and builds both again (the files find their prefix themselves); builds
# it from the build tree's own package (-Dgardenalloc_DIR=<build dir>) and with
# add_subdirectory of the source tree; runs the installed ga-bench; and
# compiles and runs the C program of the README, taken from the README's text.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
jobs=$(nproc 2>/dev/null || echo 2)
passed=0
check() { # label, then a command that must succeed
  local label=$1
  shift
  if ! "$@"; then
    echo "consumer: $label: FAILED" >&2
    exit 1
  fi
  echo "consumer: $label: ok"
  passed=$((passed + 1))
}

cmake -S . -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGA_BUILD_TESTS=OFF -DGA_BUILD_BENCH=ON \
  -DGA_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$work/build" -j"$jobs" >/dev/null
prefix="$work/prefix"
cmake --install "$work/build" --prefix "$prefix" >/dev/null
echo "installed: $(cd "$prefix" && find . \( -type f -o -type l \) | sort | tr '\n' ' ')"

consumers() { # prefix, label: the CMake package and pkg-config against an installed tree
  local p=$1 label=$2
  rm -rf "$work/cmake"
  cmake -S tests/consumer -B "$work/cmake" -DCMAKE_PREFIX_PATH="$p" >/dev/null
  cmake --build "$work/cmake" >/dev/null
  check "$label: CMake package, shared" env LD_LIBRARY_PATH="$p/lib" "$work/cmake/consumer_shared"
  check "$label: CMake package, static" "$work/cmake/consumer_static"
  # pkg-config with nothing but PKG_CONFIG_PATH, as a user would.
  cc -o "$work/consumer_pc" tests/consumer/consumer.c \
    $(env -i PATH="$PATH" PKG_CONFIG_PATH="$p/lib/pkgconfig" pkg-config --cflags --libs gardenalloc)
  # The .pc file carries the run path: the program starts without LD_LIBRARY_PATH.
  check "$label: pkg-config" env -u LD_LIBRARY_PATH "$work/consumer_pc"
}
consumers "$prefix" "--prefix install"
mv "$prefix" "$work/moved"
consumers "$work/moved" "the same tree, moved"
prefix="$work/moved"

cmake -S tests/consumer -B "$work/fromtree" -Dgardenalloc_DIR="$work/build" >/dev/null
cmake --build "$work/fromtree" >/dev/null
check "the build tree's package (-Dgardenalloc_DIR)" "$work/fromtree/consumer_shared"

cmake -S tests/consumer/subdir -B "$work/subdir" -DGA_SOURCE_DIR="$src" >/dev/null
cmake --build "$work/subdir" -j"$jobs" >/dev/null
check "add_subdirectory" "$work/subdir/consumer"

# Each output is read whole before grep -q looks at it: grep -q stops at its
# first match, and under pipefail a writer still writing then dies of SIGPIPE
# and fails the check at random.
bench_works() {
  local keys replay
  keys=$("$prefix/bin/ga-bench" keys) &&
    grep -q '^max_split_size_mb' <<<"$keys" &&
    replay=$("$prefix/bin/ga-bench" replay traces/minimalloc/A.events.csv --conf backend:sim,sim_capacity_mb:1024) &&
    grep -q '^A.events ' <<<"$replay"
}
check "the installed bin/ga-bench" bench_works

# The README's C program, from the README itself.
awk '/^## The C API/ {f = 1; next} f && /^```c$/ {c = 1; next} c && /^```$/ {exit} c {print}' README.md \
  >"$work/readme.c"
if [ ! -s "$work/readme.c" ]; then
  echo "consumer: no C program found under the README's '## The C API' heading" >&2
  exit 1
fi
cc -std=c11 -Wall -Wextra -Werror -o "$work/readme" "$work/readme.c" \
  $(env -i PATH="$PATH" PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs gardenalloc)
out=$(env -u LD_LIBRARY_PATH "$work/readme" 2>/dev/null)
echo "consumer: the README's C program ($(wc -l <"$work/readme.c") lines) printed: $out"
check "the README's C program" grep -q ', 0 broken invariants$' <<<"$out"
echo "$passed passed, 0 failed"
