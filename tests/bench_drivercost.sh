#!/bin/sh
# bench_drivercost.sh GA_BENCH OUTDIR: every call kind timed through the
# device layer; the --cost options it prints (lines joined by a backslash)
# must be accepted by ga-bench run, and every line fits in 100 columns.
set -eu
bench=$1
out=$("$bench" drivercost --backend sim --reps 5)
printf '%s\n' "$out" | grep -q 'measured on backend sim' || { echo "no 'measured on backend sim' in: $out" >&2; exit 1; }
wide=$(printf '%s\n' "$out" | awk 'length($0) > 100')
[ -z "$wide" ] || { echo "lines over 100 columns: $wide" >&2; exit 1; }
cost=$(printf '%s\n' "$out" | sed -n '/^for ga-bench run:$/,$p' | sed '1d; s/ \\$//' | tr '\n' ' ')
[ "$(printf '%s\n' "$cost" | grep -o -- '--cost' | wc -l)" -gt 1 ] || { echo "one --cost line: $cost" >&2; exit 1; }
# shellcheck disable=SC2086 # the cost lines are words: --cost STR --cost STR ...
"$bench" run --workload pytorch_cases --out "$2" $cost | tr -s '\n ' '  ' | grep -q 'cost table, with --cost'
