#!/bin/sh
# bench_width.sh GA_BENCH DIR: every line that ga-bench prints for a person
# (tables, headers, help; not --json or --csv) fits in 100 columns, with one
# configuration and with several, for every command.
set -eu
bench=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
rm -rf "$2"
mkdir -p "$2"
cd "$2" # results written to short relative paths: a long path alone is no table
trace=cs336_a_trace_with_a_name_as_long_as_the_longest.csv
{
  echo "Thread,Time,Action,Pointer,Size,Stream"
  i=1
  while [ $i -le 60 ]; do
    echo "1,0,allocate,0x$i,$(((i % 7 + 1) << 20)),0"
    [ $((i % 3)) -eq 0 ] || echo "1,0,free,0x$i,$(((i % 7 + 1) << 20)),0"
    i=$((i + 1))
  done
} >"$trace"
bad=0
check() { # label, then the command
  label=$1
  shift
  out=$("$@" 2>/dev/null) || { echo "bench_width: $label failed" >&2; bad=1; return; }
  [ -n "$out" ] || { echo "bench_width: $label printed nothing" >&2; bad=1; return; }
  wide=$(printf '%s\n' "$out" | awk 'length($0) > 100 { print length($0) ": " $0 }')
  if [ -n "$wide" ]; then
    printf 'bench_width: %s prints lines over 100 columns:\n%s\n' "$label" "$wide" >&2
    bad=1
  fi
}
two="--conf native_split_128_mib=max_split_size_mb:128 --conf expandable_segments_on=expandable_segments:True"
check "run" "$bench" run --workload pytorch_cases --scale 0.1 --iterations 2 --out run
# shellcheck disable=SC2086 # $two is several words
check "run, long configuration names" "$bench" run --trace "$trace" $two --out run2
check "replay" "$bench" replay "$trace" "$trace"
# shellcheck disable=SC2086
check "replay, several configurations" "$bench" replay "$trace" $two --iterations 2 --capacity-mb 24
check "fit" "$bench" fit "$trace"
# shellcheck disable=SC2086
check "fit, several configurations" "$bench" fit "$trace" $two
check "ranks" "$bench" ranks "$trace" --ranks 2
check "keys" "$bench" keys
check "drivercost" "$bench" drivercost --backend sim --reps 2
check "hotpath" "$bench" hotpath --pairs 1000 --sizes 4k,64m
check "sleep" "$bench" sleep --backend sim --mib 64
check "scale" "$bench" scale --max-n 1000 --budget-s 30 --out scale
check "help" "$bench" --help
for sub in run replay fit ranks keys drivercost hotpath sleep scale; do
  check "$sub --help" "$bench" "$sub" --help
done
[ $bad -eq 0 ] && echo "bench_width: every line fits in 100 columns"
exit $bad
