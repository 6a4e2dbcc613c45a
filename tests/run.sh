#!/usr/bin/env bash
# Builds gardenalloc (Release, into build/) and runs every test: the C tests
# (ctest), the Python tests of python_shim/, and the package as users install
# it (tests/packaging/run.sh: the wheel, a fresh venv, real torch when a torch
# venv is there or GA_TORCH_INSTALL=1).
# Installs what is missing first (cmake, a C compiler, Criterion) with apt-get
# when run as root. Exits non-zero on any failure.
# GA_WERROR=1 turns warnings into errors.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/need.sh
need_packages cmake:cmake cc:gcc c++:g++ make:make pkg-config:pkg-config python3:python3 py:ensurepip:python3-venv pc:criterion:libcriterion-dev

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGA_BUILD_TESTS=ON -DGA_BUILD_BENCH=ON \
  -DGA_WERROR="$([ "${GA_WERROR:-0}" = 1 ] && echo ON || echo OFF)" >/dev/null
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")

# The Python package and the PyTorch entry points, through ctypes.
echo "== Python tests (python_shim, ctypes, simulated device)"
GARDENALLOC_LIBRARY="$PWD/build/libgardenalloc.so" GARDENALLOC_CONF="backend:sim,sim_capacity_mb:4096" \
  python3 -m unittest discover -s tests/python

echo "== the Python package as users install it"
tests/packaging/run.sh
