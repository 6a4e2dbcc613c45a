#!/usr/bin/env bash
# GPU checks, in one run (an NVIDIA GPU, its driver; PyTorch with CUDA for the
# PyTorch scenarios). Builds, then:
#   1. the C tests (ctest: the simulated device, and the CUDA backend over the
#      driver double), and the double's driver_rules suite against the real
#      driver: where the GPU disagrees with the double, the double is wrong;
#   2. ga-bench drivercost on the GPU (the measured cost table);
#   3. the benchmark on the GPU (driver-time estimates from those costs), the
#      PyTorch traces replayed on the CUDA backend, the hot path there, and
#      how allocate+free pairs scale over 1 to 16 threads (this machine's
#      cores) against the C library and mimalloc;
#   4. the CUDA engine example (a real kernel), tests/gpu/engines_check.c
#      (docs/engines.md's calls on the real driver: one-region allocations,
#      the budget, would_fit, restore modes, sleep under running work, a CUDA
#      graph replayed into its pool after flushes and sleep, the OOM report's
#      memory outside the allocator), ga-bench sleep on the GPU (sleep and
#      wake time against the copy bandwidth), and tests/gpu/ipc_check.c (IPC
#      between two processes, deterministic placement under GPU timing);
#   5. the PyTorch scenarios, each in a fresh process (replace mode, MemPool
#      mode, PyTorch's own allocator as the baseline, gardenalloc run).
# Everything goes under ${OUT:-tests/gpu/results}: gpu_results.txt (the
# summary, with each command), and one file per step. Without a GPU it says so,
# runs the parts that need none (build, ctest) and exits 0; without torch the
# PyTorch scenarios are skipped, said so. Each step has a timeout; the whole run
# is meant to finish within 10 minutes on an H200 (GA_GPU_QUICK=1: no
# benchmark, trace replays or hot path, about 3 minutes).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-tests/gpu/results}
mkdir -p "$out"
log="$out/gpu_results.txt"
: >"$log"
say() { echo "$*" | tee -a "$log"; }
pass=0
fail=0
skip=0
# step NAME FILE TIMEOUT COMMAND...: runs it, output into $out/FILE, PASS/FAIL in the summary.
step() {
  local name=$1 file=$2 limit=$3
  shift 3
  say "== $name: $*"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$file" 2>&1
  local rc=$?
  tail -n 25 "$out/$file" | tee -a "$log" >/dev/null
  if [ $rc = 0 ]; then
    say "PASS $name ($((SECONDS - t0)) s; $out/$file)"
    pass=$((pass + 1))
  else
    [ $rc = 124 ] && say "(timed out after $limit s)"
    say "FAIL $name (exit $rc, $((SECONDS - t0)) s; $out/$file)"
    fail=$((fail + 1))
  fi
}
skipped() {
  say "SKIP $1: $2"
  skip=$((skip + 1))
}
finish() {
  say "== $pass passed, $fail failed, $skip skipped ($SECONDS s)"
  [ "$fail" = 0 ]
  exit
}

# ---- Is there a GPU? ----
gpu=""
if command -v nvidia-smi >/dev/null 2>&1; then
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
fi
if [ -n "$gpu" ] && ! grep -q 'libcuda\.so\.1' <<<"$(ldconfig -p 2>/dev/null)"; then
  say "nvidia-smi answers ($gpu) but libcuda.so.1 is not on the loader's path"
  gpu=""
fi
say "== $(date -u) on $(hostname): ${gpu:-no GPU answers (nvidia-smi found no device)}"
jobs=$(nproc 2>/dev/null || echo 2)

# ---- Build ----
step "build (Release, CUDA backend required)" build.txt 600 \
  sh -c "cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGA_WITH_CUDA=ON -DGA_BUILD_TESTS=ON -DGA_BUILD_BENCH=ON &&
         cmake --build build -j$jobs"
[ -x build/tests/test_cudadouble ] || { say "the build failed: nothing else can run"; finish; }

# ---- 1. C tests ----
step "C tests: the simulated device and the CUDA backend over the driver double" ctest.txt 300 \
  sh -c "cd build && ctest -j$jobs --output-on-failure"
if [ -z "$gpu" ]; then
  skipped "everything on the GPU" "no GPU answers here; the CUDA backend was tested over the driver double above (ctest -L cudadouble), which does not replace a GPU"
  finish
fi
# The system's libcuda.so.1, not the double: the double's rules checked against the driver.
step "the driver double's rules against this driver (test_cudadouble driver_rules)" driver_rules.txt 120 \
  env -u LD_LIBRARY_PATH build/tests/test_cudadouble --jobs 1 --filter 'driver_rules/*' --verbose

# ---- 2. What each driver call costs here ----
step "ga-bench drivercost on the GPU" drivercost.txt 120 build/bench/ga-bench drivercost --backend cuda --reps 200
build/bench/ga-bench drivercost --backend cuda --reps 200 --json >"$out/drivercost.json" 2>/dev/null || true
# the --cost options, one a line joined by backslashes, after "for ga-bench run:"
cost=$(sed -n '/^for ga-bench run:$/,$p' "$out/drivercost.txt" | sed '1d; s/ \\$//; s/^ *//' | grep -- '^--cost ' |
  tr '\n' ' ')
say "cost line: ${cost:-none}"

# ---- 3. The benchmark and the traces on the GPU ----
if [ "${GA_GPU_QUICK:-0}" = 1 ]; then
  skipped "benchmark, trace replays, hot path" "GA_GPU_QUICK=1"
else
  # shellcheck disable=SC2086 # the cost lines are words: --cost STR --cost STR ...
  step "the benchmark on the GPU" bench.txt 240 build/bench/ga-bench run --out "$out/bench" $cost
  step "PyTorch traces replayed on the CUDA backend" replay.txt 240 \
    build/bench/ga-bench replay traces/pytorch_snapshots --conf native=backend:cuda \
    --conf expandable=backend:cuda,expandable_segments:True --json
  step "hot path on the CUDA backend" hotpath.txt 180 build/bench/ga-bench hotpath --conf backend:cuda
  # Thread scaling needs real cores (the development VMs give two threads one
  # core). mimalloc is the second reference when its library can be had: it
  # is installed from Debian when apt can reach a mirror (the GPU machines may
  # have no network), else the run compares with the C library alone. The
  # simulated device: cached pairs make no device call, and a stream per
  # thread needs no real streams there.
  if ! grep -q 'libmimalloc\.so\.2' <<<"$(ldconfig -p 2>/dev/null)"; then
    if timeout 120 apt-get install -y -q libmimalloc2.0 >"$out/mimalloc_install.txt" 2>&1; then
      say "installed libmimalloc2.0 for the thread-scaling run"
    else
      say "libmimalloc2.0 is not installed and could not be ($out/mimalloc_install.txt): thread scaling against the C library only"
    fi
  fi
  step "thread scaling: 1-16 threads on one allocator, one stream and a stream each, vs the C library and mimalloc" \
    threads.txt 300 build/bench/ga-bench hotpath --threads 1,2,4,8,16 --pairs 200000 --conf backend:sim
fi

# ---- 4. The engine example ----
if [ -x build/examples/engine_cuda ]; then
  step "engine example with a real kernel" engine_cuda.txt 60 build/examples/engine_cuda
else
  skipped "engine example" "engine_cuda was not built (no nvcc found by CMake)"
fi

# ---- 4b. docs/engines.md on the real driver ----
if cc -O2 -Iinclude tests/gpu/engines_check.c -o "$out/engines_check" -Lbuild -lgardenalloc -ldl \
  -Wl,-rpath,"$PWD/build" >"$out/engines_check_build.txt" 2>&1; then
  step "engines: one-region allocations, the budget, would_fit, restore modes, sleep under running work, graph replay across flushes and sleep, the OOM report" \
    engines_check.txt 120 "$out/engines_check"
else
  say "FAIL engines check build ($out/engines_check_build.txt)"
  fail=$((fail + 1))
fi
step "ga-bench sleep on the GPU: sleep and wake time per restore mode, copy bandwidth" sleep_bench.txt 180 \
  build/bench/ga-bench sleep --backend cuda
if cc -O2 -Iinclude tests/gpu/ipc_check.c -o "$out/ipc_check" -Lbuild -lgardenalloc -ldl \
  -Wl,-rpath,"$PWD/build" >"$out/ipc_check_build.txt" 2>&1; then
  step "engines: IPC across two processes (POSIX fd handles), deterministic placement under GPU timing" \
    ipc_check.txt 120 "$out/ipc_check"
  # Fabric handles need an IMEX channel and fabric support: exit 77 without, a skip with the reason.
  name="engines: IPC across two processes with fabric handles (plain bytes, ga_ipc_unexport)"
  say "== $name: $out/ipc_check fabric"
  timeout 120 "$out/ipc_check" fabric >"$out/fabric_check.txt" 2>&1
  rc=$?
  tail -n 25 "$out/fabric_check.txt" | tee -a "$log" >/dev/null
  if [ $rc = 0 ]; then
    say "PASS $name ($out/fabric_check.txt)"
    pass=$((pass + 1))
  elif [ $rc = 77 ]; then
    skipped "$name" "$(grep -m1 '^skip: ' "$out/fabric_check.txt" | cut -c7-)"
  else
    say "FAIL $name (exit $rc; $out/fabric_check.txt)"
    fail=$((fail + 1))
  fi
else
  say "FAIL ipc check build ($out/ipc_check_build.txt)"
  fail=$((fail + 1))
fi

# ---- 5. PyTorch ----
export GARDENALLOC_LIBRARY="$PWD/build/libgardenalloc.so"
export PYTHONPATH="$PWD/python_shim${PYTHONPATH:+:$PYTHONPATH}"
torch=$(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, torch.cuda.is_available())' 2>&1 | tail -1)
say "torch: $torch"
case "$torch" in
  *True) ;;
  *)
    skipped "PyTorch scenarios" "no torch with a usable GPU here ($torch)"
    finish
    ;;
esac
for mode in replace mempool; do
  for scenario in fuzz oom oom_retry record_stream graph trace; do
    # record_stream and graph capture are replace-mode hooks of the pluggable allocator
    [ "$mode" = mempool ] && { [ "$scenario" = record_stream ] || [ "$scenario" = graph ]; } && continue
    step "PyTorch $mode $scenario" "torch_${mode}_$scenario.txt" 150 python3 tests/gpu/scenarios.py "$mode" "$scenario"
  done
done
step "PyTorch's own allocator: trace baseline" torch_pytorch_trace.txt 150 python3 tests/gpu/scenarios.py pytorch trace
step "install() refused after CUDA init" torch_refused_after_init.txt 120 \
  python3 tests/gpu/scenarios.py pytorch refused_after_init
# No code change: the runner installs it, PyTorch's own variable configures it.
step "gardenalloc run with PYTORCH_CUDA_ALLOC_CONF" torch_run.txt 180 \
  env -u GARDENALLOC_CONF PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
  python3 -m gardenalloc run -- python3 tests/gpu/scenarios.py run installed_by_run
finish
