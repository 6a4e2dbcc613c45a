#!/usr/bin/env bash
# Builds gardenalloc (Release, into build/) and runs every test.
# Installs what is missing first (cmake, a C compiler, Criterion) with apt-get
# when run as root. Exits non-zero on any failure.
# GA_WERROR=1 turns warnings into errors.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v cc >/dev/null || missing+=(gcc)
command -v make >/dev/null || missing+=(make)
command -v pkg-config >/dev/null || missing+=(pkg-config)
if ! pkg-config --exists criterion 2>/dev/null; then missing+=(libcriterion-dev); fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "tests/run.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "tests/run.sh: missing ${missing[*]}; install them (e.g. sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGA_BUILD_TESTS=ON -DGA_BUILD_BENCH=ON \
  -DGA_WERROR="$([ "${GA_WERROR:-0}" = 1 ] && echo ON || echo OFF)" >/dev/null
cmake --build build -j"$jobs"
cd build
ctest --output-on-failure -j"$jobs"
