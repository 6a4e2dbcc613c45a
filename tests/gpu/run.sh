#!/usr/bin/env bash
# GPU checks (needs an NVIDIA GPU, its driver, and PyTorch with CUDA). Builds
# the library, replays traces on the CUDA backend, then runs each PyTorch
# scenario in a fresh process (replace mode and backend mode). Results go to
# ${OUT:-tests/gpu/results}/gpu_results.txt. Meant to finish in under 8 minutes
# on an H200.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-tests/gpu/results}
mkdir -p "$out"
log="$out/gpu_results.txt"
: >"$log"
say() { echo "$*" | tee -a "$log"; }

say "== $(date -u) $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGA_WITH_CUDA=ON >/dev/null && cmake --build build -j"$(nproc)" >/dev/null ||
  { say "build failed"; exit 1; }

say "== C tests on the simulated device (the CUDA backend is exercised below)"
(cd build && ctest -j"$(nproc)" 2>&1 | tail -3) | tee -a "$log"

say "== what each driver call costs on this GPU (replaces the assumed cost table)"
timeout 60 build/bench/ga-bench drivercost --backend cuda 2>&1 | tee -a "$log"
say "== the benchmark on the GPU (driver-time estimates from costs measured there)"
timeout 180 build/bench/ga-bench run --out "$out/bench" 2>&1 | tee -a "$log"
say "== engine example with a real kernel"
if [ -x build/examples/engine_cuda ]; then timeout 60 build/examples/engine_cuda 2>&1 | tee -a "$log"; else say "engine_cuda not built"; fi

say "== gardenalloc on the CUDA backend: replay of the PyTorch traces"
shared=${GA_SHARED_DIR:-.}
for conf in "backend:cuda" "backend:cuda,expandable_segments:True"; do
  timeout 120 build/bench/ga-bench replay "$shared/traces/pytorch_snapshots" --conf "$conf" 2>&1 | tee -a "$log"
done
say "== hot path on the CUDA backend"
timeout 60 build/bench/ga-bench hotpath --conf backend:cuda 2>&1 | tee -a "$log"

export GARDENALLOC_LIBRARY="$PWD/build/libgardenalloc.so"
export PYTHONPATH="$PWD/python_shim${PYTHONPATH:+:$PYTHONPATH}"
pass=0
fail=0
for mode in replace mempool; do
  for scenario in fuzz oom oom_retry record_stream trace; do
    [ "$mode" = mempool ] && [ "$scenario" = record_stream ] && continue
    if timeout 120 python3 tests/gpu/scenarios.py "$mode" "$scenario" >>"$log" 2>&1; then
      say "PASS $mode $scenario"
      pass=$((pass + 1))
    else
      say "FAIL $mode $scenario (see $log)"
      fail=$((fail + 1))
    fi
  done
done
timeout 120 python3 tests/gpu/scenarios.py pytorch trace >>"$log" 2>&1 && say "PASS pytorch-allocator trace baseline" ||
  { say "FAIL pytorch-allocator trace baseline"; fail=$((fail + 1)); }
timeout 120 python3 tests/gpu/scenarios.py pytorch refused_after_init >>"$log" 2>&1 &&
  say "PASS install() refused after CUDA init" || { say "FAIL install() refused after CUDA init"; fail=$((fail + 1)); }
# No code change: the runner installs it, PyTorch's own variable configures it.
env -u GARDENALLOC_CONF PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 180 \
  python3 -m gardenalloc run -- python3 tests/gpu/scenarios.py run installed_by_run >>"$log" 2>&1 &&
  say "PASS gardenalloc run with PYTORCH_CUDA_ALLOC_CONF" ||
  { say "FAIL gardenalloc run with PYTORCH_CUDA_ALLOC_CONF"; fail=$((fail + 1)); }
say "$pass passed, $fail failed"
[ "$fail" = 0 ]
