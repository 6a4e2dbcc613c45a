#!/usr/bin/env bash
# Runs the libFuzzer harnesses of tests/fuzz (clang, -fsanitize=fuzzer,address,undefined):
#   tests/fuzz.sh                    each harness for 60 seconds (what CI runs)
#   tests/fuzz.sh --minutes N        each for N minutes
#   tests/fuzz.sh --seconds N [config|ops|trace|streams|torch ...]
#   tests/fuzz.sh --coverage ...     then the line coverage of what the corpus reaches (llvm-cov)
# Every harness runs ga_check after every public call (GA_CHECK_EVERY_CALL):
# a broken invariant aborts, naming the call, and counts as a crash.
# Builds into build-fuzz/ (installing clang and libFuzzer with apt-get when
# missing, as root; GA_WERROR=1 makes warnings errors). Each harness starts from its seed corpus and the inputs
# that once crashed (tests/fuzz/corpus/<name>, tests/fuzz/crashes/<name>) and
# keeps what it finds in build-fuzz/corpus/<name> for the next run. A crash
# writes build-fuzz/crashes/<name>-crash-*, is reported with the command that
# replays it, and makes the script fail; once fixed, the input belongs in
# tests/fuzz/crashes/<name>/, where every test run replays it.
# FUZZ_OPS_TRACE=1 build-fuzz/tests/fuzz/fuzz_ops FILE prints what an input of
# fuzz_ops does, call by call (FUZZ_STREAMS_TRACE, FUZZ_TORCH_TRACE likewise).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
coverage=0
harnesses=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) seconds=${2:-}; [[ "$seconds" =~ ^[0-9]+$ ]] && seconds=$((10#$seconds * 60)); shift $(($# > 1 ? 2 : 1)) ;;
    --seconds) seconds=${2:-}; shift $(($# > 1 ? 2 : 1)) ;;
    --coverage) coverage=1; shift ;;
    config|ops|trace|streams|torch) harnesses+=("$1"); shift ;;
    -h|--help) sed -n '2,/^set /p' "$0" | sed '$d'; exit 0 ;;
    *) echo "tests/fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#harnesses[@]} -gt 0 ] || harnesses=(config ops trace streams torch)
case "$seconds" in
  '' | *[!0-9]* | 0) echo "tests/fuzz.sh: --seconds and --minutes take a whole number above 0" >&2; exit 2 ;;
esac

. scripts/need.sh
need_packages cmake:cmake clang:clang make:make pkg-config:pkg-config pc:criterion:libcriterion-dev
major=$(clang -dumpversion | cut -d. -f1)
need_packages "file:$(clang -print-resource-dir)/lib/linux/libclang_rt.fuzzer-$(uname -m).a:libclang-rt-${major}-dev"

jobs=$(nproc 2>/dev/null || echo 2)
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGA_FUZZ=ON -DGA_BUILD_TESTS=ON \
  -DGA_CHECK_EVERY_CALL=ON -DGA_BUILD_BENCH=OFF -DGA_BUILD_EXAMPLES=OFF -DGA_LTO=OFF \
  -DGA_WERROR="$([ "${GA_WERROR:-0}" = 1 ] && echo ON || echo OFF)" >/dev/null
cmake --build build-fuzz -j"$jobs" --target $(printf 'fuzz_%s ' "${harnesses[@]}") >/dev/null

declare -A max_len=([config]=512 [ops]=4096 [trace]=8192 [streams]=4096 [torch]=4096)
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
failed=0
summary=()
for h in "${harnesses[@]}"; do
  work=build-fuzz/corpus/$h
  mkdir -p "$work" build-fuzz/crashes
  dirs=("$work" "tests/fuzz/corpus/$h")
  [ -d "tests/fuzz/crashes/$h" ] && dirs+=("tests/fuzz/crashes/$h")
  log=build-fuzz/fuzz_$h.log
  echo "== fuzz_$h for ${seconds} s (log: $log)"
  rc=0
  build-fuzz/tests/fuzz/fuzz_$h -max_total_time="$seconds" -max_len="${max_len[$h]}" -timeout=20 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="build-fuzz/crashes/$h-" "${dirs[@]}" \
    >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 runs in \2 s/p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*/[0-9a-zA-Z]*' "$log" | tail -1)
  if [ "$rc" -ne 0 ]; then
    failed=1
    grep -E 'broken:|ERROR:|SUMMARY:' "$log" | head -5 >&2 || true
    art=$(grep -o "build-fuzz/crashes/$h-[a-z]*-[0-9a-f]*" "$log" | tail -1 || true)
    echo "fuzz_$h FOUND A CRASH: $art (replay: build-fuzz/tests/fuzz/fuzz_$h $art)" >&2
    summary+=("fuzz_$h: CRASH after ${runs:-?}; $cov")
  else
    summary+=("fuzz_$h: ${runs:-?}, 0 crashes; $cov")
  fi
done

if [ "$coverage" = 1 ]; then
  # The corpus replayed by a build with clang's source coverage: lines of the
  # library (and of the trace reader) that some kept input reaches.
  prof=$(command -v "llvm-profdata-$major" || command -v llvm-profdata || true)
  llcov=$(command -v "llvm-cov-$major" || command -v llvm-cov || true)
  if [ -z "$prof" ] || [ -z "$llcov" ]; then
    need_packages "llvm-cov-$major:llvm-$major"
    prof=$(command -v "llvm-profdata-$major")
    llcov=$(command -v "llvm-cov-$major")
  fi
  CC=clang CXX=clang++ cmake -S . -B build-fuzz-cov -DCMAKE_BUILD_TYPE=Debug -DGA_BUILD_TESTS=ON \
    -DGA_BUILD_BENCH=OFF -DGA_BUILD_EXAMPLES=OFF -DGA_LTO=OFF -DGA_WITH_CUDA=OFF \
    -DCMAKE_C_FLAGS="-fprofile-instr-generate -fcoverage-mapping" \
    -DCMAKE_CXX_FLAGS="-fprofile-instr-generate -fcoverage-mapping" >/dev/null
  cmake --build build-fuzz-cov -j"$jobs" --target $(printf 'fuzz_%s_replay ' "${harnesses[@]}") >/dev/null
  rm -f build-fuzz-cov/*.profraw
  objs=()
  for h in "${harnesses[@]}"; do
    dirs=("build-fuzz/corpus/$h" "tests/fuzz/corpus/$h")
    [ -d "tests/fuzz/crashes/$h" ] && dirs+=("tests/fuzz/crashes/$h")
    LLVM_PROFILE_FILE="build-fuzz-cov/$h.profraw" build-fuzz-cov/tests/fuzz/fuzz_${h}_replay "${dirs[@]}" >/dev/null
    objs+=(-object "build-fuzz-cov/tests/fuzz/fuzz_${h}_replay")
  done
  "$prof" merge -sparse build-fuzz-cov/*.profraw -o build-fuzz-cov/fuzz.profdata
  "$llcov" report "${objs[@]:1}" -instr-profile=build-fuzz-cov/fuzz.profdata \
    "$PWD/allocator" "$PWD/bench/trace.c" >build-fuzz-cov/coverage.txt
  echo "== lines of the library and the trace reader that the kept corpus reaches (all files:" \
    "build-fuzz-cov/coverage.txt)"
  awk '/^(allocator\/(api|config|check)\.c|allocator\/(policy|segment)\/.*\.c|bench\/trace\.c|TOTAL)/ {
         printf "  %-34s %6s lines %6s missed %8s\n", $1, $8, $9, $10 }' build-fuzz-cov/coverage.txt
fi

echo "== fuzz summary"
printf '  %s\n' "${summary[@]}"
exit $failed
