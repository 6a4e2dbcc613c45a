#!/usr/bin/env bash
# The main job: builds gardenalloc (Release, into build/) and replays the real
# PyTorch traces in ../shared/traces/pytorch_snapshots/ on the default device
# (a GPU when one answers, else the simulated 80 GiB device), printing per
# trace the peak live bytes, gardenalloc's peak reserved bytes and PyTorch's
# own reserved bytes from the trace's .meta.json.
# Results also go to bench/results/ (CSV-like JSON lines with the command).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v cc >/dev/null || missing+=(gcc)
command -v make >/dev/null || missing+=(make)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "bench/run.sh: missing ${missing[*]}; install them first" >&2
    exit 1
  fi
fi

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
out=bench/results/replay_native.jsonl
for conf in "" "max_split_size_mb:128"; do
  echo "== native mode, GARDENALLOC_CONF=\"$conf\""
  build/bench/ga-bench replay "$traces" --conf "$conf"
  echo
done
{
  echo "# build/bench/ga-bench replay $traces --json --conf \"\""
  build/bench/ga-bench replay "$traces" --json --conf ""
} >"$out"
echo "per-trace JSON: $out"
