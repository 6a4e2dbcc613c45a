#!/usr/bin/env bash
# The main job, on the default device (a GPU when one answers, else the
# simulated 80 GiB device), after building gardenalloc (Release, into build/):
#  1. the built-in workloads under native, native + max_split_size_mb:128,
#     PyTorch's expandable segments, and gardenalloc's expandable segments
#     (the default, moves only when the device is full; 2 MiB pages; settle)
#     side by side (bench/results/run.csv and one SVG plot per workload), then
#     again with the GPU 5 ms behind the CPU and 5 iterations
#     (bench/results/lag5ms_x5/);
#  2. the real PyTorch traces in traces/pytorch_snapshots/ in native mode
#     next to PyTorch's own reserved memory, gardenalloc's expandable
#     segments beside PyTorch's (no lag; 5 ms; 5 ms and 5 iterations); the
#     dominance check of the default over PyTorch's expandable segments on
#     every trace in traces/ and every built-in workload, and on the MiniMalloc
#     problems with sizes x64 (bench/tools/dominance.py,
#     bench/results/dominance.txt); the frontier of memory against driver time
#     over the real traces (bench/results/frontier.svg, its points in
#     frontier.json and frontier.txt; docs/figures/frontier.svg is a copy); the
#     summary of memory, driver time and stalls over the knobs
#     (bench/tools/versus.py, bench/results/versus.txt); the MiniMalloc
#     problems (sizes x64), as JSON lines in bench/results/, and the same
#     traces under every configuration with one plot per trace
#     (bench/results/pytorch_traces/, bench/results/minimalloc_x64/);
#  3. the hot path: allocate+free pairs from the cache next to libc malloc
#     at sizes from 4 KiB to 64 MiB in each mode, with instructions per pair
#     (from callgrind when valgrind is installed); with valgrind, also the
#     instructions per allocate+free of every trace under the default against
#     PyTorch's expandable segments (bench/tools/replay_instructions.py,
#     bench/results/replay_instructions.txt);
#  4. the CPU time of one allocation and one free with N blocks live, for
#     N = 10^3 .. 10^5 in every mode and with the C library's malloc/free, the
#     median of 5 rounds per point (ga-bench scale: bench/results/scale.csv,
#     scale.svg, scale.txt), each series within 30 s of CPU time; --full-scale takes N
#     up to 10^6 with 180 s per series (GA_BENCH_SCALE_N and
#     GA_BENCH_SCALE_BUDGET_S set them too).
# Every result records the command that made it: a "command" field in each
# JSON line, run.cmd beside each run.csv, the <desc> of each SVG.
# GA_BENCH_SCALE sets the size of the built-in workloads (default 1, ~10^4
# events each; 100 gives ~10^6).
set -euo pipefail
cd "$(dirname "$0")/.."
# Every ga-bench on a machine without a GPU says that it uses the simulated
# device: once is enough for the whole script.
exec 2> >(awk '/no usable CUDA driver or device/ { if (seen++) next } { print; fflush() }' >&2)

scale_n=${GA_BENCH_SCALE_N:-100000}
scale_budget=${GA_BENCH_SCALE_BUDGET_S:-30}
for arg in "$@"; do
  case $arg in
    --full-scale)
      scale_n=1000000
      scale_budget=${GA_BENCH_SCALE_BUDGET_S:-180}
      ;;
    *)
      echo "usage: bench/run.sh [--full-scale]" >&2
      exit 2
      ;;
  esac
done

. scripts/need.sh
need_packages cmake:cmake cc:gcc make:make python3:python3

# The traces are in the repository (traces/); GA_SHARED_DIR names another
# folder holding a traces/ of the same layout.
shared=${GA_SHARED_DIR:-.}
traces="$shared/traces/pytorch_snapshots"
if [ ! -d "$traces" ]; then
  echo "bench/run.sh: no traces at $traces (GA_SHARED_DIR must name a folder holding traces/)" >&2
  exit 1
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGA_BUILD_BENCH=ON >/dev/null # tests only where Criterion is
cmake --build build -j"$jobs" --target ga-bench

mkdir -p bench/results
echo "== built-in workloads"
build/bench/ga-bench run --scale "${GA_BENCH_SCALE:-1}" --out bench/results
echo
echo "== built-in workloads, the GPU 5 ms behind the CPU, 5 iterations each"
build/bench/ga-bench run --scale "${GA_BENCH_SCALE:-1}" --lag-us 5000 --iterations 5 --out bench/results/lag5ms_x5
echo

run() { # name, then ga-bench replay arguments
  local name=$1
  shift
  echo "== $name"
  build/bench/ga-bench replay "$@"
  echo
  build/bench/ga-bench replay "$@" --json 2>/dev/null >"bench/results/$name.jsonl.tmp"
  mv "bench/results/$name.jsonl.tmp" "bench/results/$name.jsonl"
}
run pytorch_native "$traces" --conf ""
run pytorch_native_max_split_128 "$traces" --conf "max_split_size_mb:128"
both=(--conf "gardenalloc=expandable_segments:True"
  --conf "pytorch_expandable=expandable_segments:True,expandable_policy:pytorch")
run pytorch_expandable "$traces" "${both[@]}"
run pytorch_expandable_lag5ms "$traces" "${both[@]}" --lag-us 5000
run pytorch_expandable_lag5ms_x5 "$traces" "${both[@]}" --lag-us 5000 --iterations 5
minimalloc="$shared/traces/minimalloc"
alexnet="$shared/traces/allocatorsim_alexnet"
dominance=(python3 bench/tools/dominance.py --bench build/bench/ga-bench)
echo "== dominance of the default over PyTorch's expandable segments: every trace and workload"
{
  "${dominance[@]}" "$traces" "$minimalloc" "$alexnet" workload:all
  echo
  echo "MiniMalloc, sizes x64:"
  "${dominance[@]}" --size-scale 64 "$minimalloc"
} | tee bench/results/dominance.txt.tmp
mv bench/results/dominance.txt.tmp bench/results/dominance.txt
echo
echo "== the frontier over the real traces: memory against driver time (bench/results/frontier.svg)"
"${dominance[@]}" "$traces" --lag-us 0 --svg bench/results/frontier.svg >bench/results/frontier.txt
sed -n '/^frontier:/,$p' bench/results/frontier.txt # the points it plots
echo
echo "== expandable segments against PyTorch's: memory, driver time, stalls over the knobs"
: >bench/results/versus.txt
for table in blackwell a100; do # the two cost tables of the simulated device (docs/benchmarks.md)
  python3 bench/tools/versus.py --bench build/bench/ga-bench "$traces" --cost-table $table | tee -a bench/results/versus.txt
  python3 bench/tools/versus.py --bench build/bench/ga-bench "$traces" --cost-table $table --iterations 5 |
    tee -a bench/results/versus.txt
done
echo
run minimalloc_x64_native "$minimalloc" --size-scale 64 --conf ""
run minimalloc_x64_expandable "$minimalloc" --size-scale 64 "${both[@]}" \
  --conf "2m_always=expandable_segments:True,expandable_page_size_mb:2,expandable_move_pages:always"
echo "== plots of the real traces under every configuration"
build/bench/ga-bench run --trace "$traces" --out bench/results/pytorch_traces --y-near-data 2>/dev/null |
  grep -E '^CSV' | tail -1
build/bench/ga-bench run --trace "$minimalloc" --size-scale 64 --out bench/results/minimalloc_x64 2>/dev/null |
  grep -E '^CSV' | tail -1
echo
echo "== hot path"
# Instructions per pair from callgrind (two runs per size and mode) when
# valgrind is installed and the CPU's counter cannot be read.
hp_ins=""
command -v valgrind >/dev/null && hp_ins=--instructions
build/bench/ga-bench hotpath ${hp_ins:+"$hp_ins"} | tee bench/results/hotpath.txt
echo
echo "== replay: instructions per allocate+free, the default against PyTorch's expandable segments"
if [ -n "$hp_ins" ]; then
  ri=(python3 bench/tools/replay_instructions.py --bench build/bench/ga-bench --traces "$shared/traces")
  # Its progress (a line per trace) goes to the log, which is shown if it fails.
  if ! "${ri[@]}" >bench/results/replay_instructions.tmp 2>bench/results/replay_instructions.log; then
    tail -20 bench/results/replay_instructions.log >&2
    exit 1
  fi
  { echo "\$ ${ri[*]}"; cat bench/results/replay_instructions.tmp; } | tee bench/results/replay_instructions.txt
  rm -f bench/results/replay_instructions.tmp
else
  echo "(valgrind is not installed: skipped)"
fi
echo
echo "== CPU time per call with N blocks live"
build/bench/ga-bench scale --max-n "$scale_n" --budget-s "$scale_budget" --out bench/results 2>/dev/null |
  tee bench/results/scale.txt
echo
echo "results: bench/results/"
