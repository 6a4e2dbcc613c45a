#!/bin/sh
# bench_scale.sh GA_BENCH OUTDIR: ga-bench scale measures every series at
# each N and writes its table, CSV, command and plot; a series over its time
# budget stops and says so instead of holding the run up.
set -eu
bench=$1
dir=$2
rm -rf "$dir"
fail() {
  echo "bench_scale: $*" >&2
  exit 1
}
out=$("$bench" scale --max-n 3000 --budget-s 60 --out "$dir/full" 2>/dev/null)
for title in "allocation of a fresh block" "free of a random live block" "allocation right after those frees" \
  "ga_empty_cache right after 16 random frees" "a request refused after the whole retry ladder"; do
  printf '%s\n' "$out" | grep -q "$title" || fail "no table '$title' in: $out"
done
csv="$dir/full/scale.csv"
head -1 "$csv" | grep -q '^series,mode,conf,pattern,n_live,ops,alloc_ns,free_ns,reuse_ns,empty_cache_ns,refused_ns,cpu_s,status$' ||
  fail "bad header in $csv"
rows=$(grep -c ',"done"$' "$csv")
[ "$rows" -eq 12 ] || fail "$rows rows done in $csv, want 6 series x 2 points"
for series in "native 4k" "expandable 4k" "pytorch 4k" "native mixed" "expandable mixed" "pytorch mixed"; do
  grep -q "^$series,.*,3000,[0-9]*,[0-9.]*,[0-9.]*,[0-9.]*,[0-9]*\.[0-9],[0-9]*\.[0-9],[0-9.]*," "$csv" ||
    fail "no point at 3000 for $series"
done
grep -q 'ga-bench.* scale --max-n 3000' "$dir/full/scale.cmd" || fail "scale.cmd: $(cat "$dir/full/scale.cmd")"
head -c 200 "$dir/full/scale.svg" | grep -q '^<svg' || fail "scale.svg is not an SVG"
# A budget too small for any point: every series stops, says why, and the run still succeeds.
out=$("$bench" scale --max-n 1000 --budget-s 0.000001 --modes native --patterns 4k --out "$dir/cut" 2>/dev/null)
printf '%s\n' "$out" | grep -q 'native 4k: time budget reached' || fail "no budget line in: $out"
grep -q '^native 4k,native,"",4k,,,,,,,,,"time budget reached' "$dir/cut/scale.csv" ||
  fail "no budget row in $(cat "$dir/cut/scale.csv")"
