#!/bin/sh
# bench_drivercost.sh GA_BENCH OUTDIR: every call kind timed through the
# device layer; the --cost line it prints must be accepted by ga-bench run.
set -eu
bench=$1
out=$("$bench" drivercost --backend sim --reps 5)
printf '%s\n' "$out" | grep -q 'measured on backend sim' || { echo "no 'measured on backend sim' in: $out" >&2; exit 1; }
cost=$(printf '%s\n' "$out" | tail -1)
# shellcheck disable=SC2086 # the cost line is two words: --cost STR
"$bench" run --workload pytorch_cases --out "$2" $cost | grep -q 'cost table, with --cost'
