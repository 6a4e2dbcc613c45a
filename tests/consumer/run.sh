#!/usr/bin/env bash
# Installs gardenalloc into a temporary prefix and builds a tiny consumer
# against it three ways — CMake package (shared and static), pkg-config — and
# once more with add_subdirectory of the source tree; runs each.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S . -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGA_BUILD_TESTS=OFF -DGA_BUILD_BENCH=OFF \
  -DGA_BUILD_EXAMPLES=OFF -DCMAKE_INSTALL_PREFIX="$work/prefix" >/dev/null
cmake --build "$work/build" -j"$jobs" >/dev/null
cmake --install "$work/build" >/dev/null
echo "installed: $(cd "$work/prefix" && find . -type f | sort | tr '\n' ' ')"

cmake -S tests/consumer -B "$work/cmake" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib" "$work/cmake/consumer_shared"
"$work/cmake/consumer_static"

export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
cc -o "$work/consumer_pc" tests/consumer/consumer.c $(pkg-config --cflags --libs gardenalloc)
LD_LIBRARY_PATH="$work/prefix/lib" "$work/consumer_pc"

cmake -S tests/consumer/subdir -B "$work/subdir" -DGA_SOURCE_DIR="$src" >/dev/null
cmake --build "$work/subdir" -j"$jobs" >/dev/null
"$work/subdir/consumer"
echo "4 passed, 0 failed"
