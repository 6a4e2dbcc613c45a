#!/usr/bin/env bash
# The main job: builds gardenalloc (Release, into build/) and replays the real
# PyTorch traces in ../shared/traces/pytorch_snapshots/ on the default device
# (a GPU when one answers, else the simulated 80 GiB device) in native mode
# (PyTorch's defaults, then max_split_size_mb:128) and with expandable
# segments, printing per trace the peak live bytes, gardenalloc's peak
# reserved bytes and PyTorch's own reserved bytes from the trace's .meta.json;
# then the MiniMalloc problems (sizes x64) in both modes.
# Per-trace JSON lines go to bench/results/, each file starting with the
# command that made it.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/need.sh
need_packages cmake:cmake cc:gcc make:make

shared=${GA_SHARED_DIR:-../shared}
traces="$shared/traces/pytorch_snapshots"
if [ ! -d "$traces" ]; then
  echo "bench/run.sh: no traces at $traces (set GA_SHARED_DIR to the folder holding traces/)" >&2
  exit 1
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGA_BUILD_BENCH=ON >/dev/null
cmake --build build -j"$jobs" --target ga-bench

mkdir -p bench/results
run() { # name, then ga-bench replay arguments
  local name=$1
  shift
  echo "== $name"
  build/bench/ga-bench replay "$@"
  echo
  {
    echo "# build/bench/ga-bench replay $* --json"
    build/bench/ga-bench replay "$@" --json 2>/dev/null
  } >"bench/results/$name.jsonl"
}
run pytorch_native "$traces" --conf ""
run pytorch_native_max_split_128 "$traces" --conf "max_split_size_mb:128"
run pytorch_expandable "$traces" --conf "expandable_segments:True"
minimalloc="$shared/traces/minimalloc"
if [ -d "$minimalloc" ]; then
  run minimalloc_x64_native "$minimalloc" --size-scale 64 --conf ""
  run minimalloc_x64_expandable "$minimalloc" --size-scale 64 --conf "expandable_segments:True"
fi
echo "per-trace JSON lines: bench/results/"
