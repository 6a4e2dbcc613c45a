#!/bin/sh
# bench_scale.sh GA_BENCH OUTDIR MALLOC: ga-bench scale measures every series
# at each N and writes its table, CSV, command and plot; a series over its
# time budget stops and says so instead of holding the run up. Each figure is
# the median of --rounds measurements with their minimum and maximum; the
# glibc series (the C library's malloc/free) give the floor. MALLOC is libc,
# or sanitizer where the build's malloc is a sanitizer's: then there is no
# floor to measure, the glibc series are left out and refused by name.
set -eu
bench=$1
dir=$2
malloc=$3
rm -rf "$dir"
fail() {
  echo "bench_scale: $*" >&2
  exit 1
}
case $malloc in
libc)
  floor="the floor: the C library's malloc/free"
  glibc_series="glibc 4k,glibc mixed"
  ;;
sanitizer)
  floor="the floor: not measured, malloc is the sanitizer's in this build"
  glibc_series=
  msg="--modes glibc: malloc is the sanitizer's in this build, not the C library's"
  got=$("$bench" scale --modes native,glibc --out "$dir/refused" 2>&1) && fail "--modes glibc accepted: $got"
  printf '%s\n' "$got" | grep -qF -- "$msg" || fail "--modes glibc refused without '$msg': $got"
  ;;
*) fail "MALLOC must be libc or sanitizer, not '$malloc'" ;;
esac
out=$("$bench" scale --max-n 3000 --budget-s 60 --rounds 3 --out "$dir/full" 2>/dev/null)
for title in "allocation of a fresh block" "free of a random live block" "allocation right after those frees" \
  "ga_empty_cache right after 16 random frees" "a request refused after the whole retry ladder" \
  "ga_would_fit of 16 requests of the pattern" "ga_largest_free (the cache alone" \
  "ga_would_fit of 16 requests of 32-64 MiB" \
  "$floor" "memory latency, the floor under a random free" "each cell the median of 3 rounds"; do
  printf '%s\n' "$out" | grep -qF -- "$title" || fail "no table '$title' in: $out"
done
# Cells are a median to three digits and its spread over the rounds:
# "412 ns (12%)", "1.20 us (3%)".
printf '%s\n' "$out" | grep -Eq '^3000 +[0-9.]+ (ns|us|ms) \([0-9]+%\)' || fail "no median (spread) cells in: $out"
printf '%s\n' "$out" | grep -Eq '^(1000|3000) .*[0-9]{4}|[0-9]\.[0-9]{3}' &&
  fail "a cell with more than three digits in: $out"
# The memory latency under the figures: one cell per N, a time and its spread.
printf '%s\n' "$out" | sed -n '/^memory latency/,/^$/p' | grep -Eq '^3000 +[0-9.]+ (ns|us) \([0-9]+%\)$' ||
  fail "no memory latency at 3000 in: $out"
csv="$dir/full/scale.csv"
want=series,mode,conf,pattern,n_live,ops,rounds
for m in alloc_ns free_ns reuse_ns empty_cache_ns refused_ns would_fit_ns largest_free_ns would_grow_ns; do want="$want,$m,${m}_min,${m}_max"; done
want="$want,cpu_s,status"
[ "$(head -1 "$csv")" = "$want" ] || fail "bad header in $csv: $(head -1 "$csv")"
series="native 4k,expandable 4k,pytorch 4k,native mixed,expandable mixed,pytorch mixed${glibc_series:+,$glibc_series}"
want_rows=$(($(printf '%s\n' "$series" | tr ',' '\n' | wc -l) * 2))
rows=$(grep -c ',"done"$' "$csv")
[ "$rows" -eq "$want_rows" ] || fail "$rows rows done in $csv, want $want_rows (2 points for each of $series)"
[ -n "$glibc_series" ] || ! grep -q '^glibc' "$csv" || fail "glibc rows under a sanitizer in $csv"
# Every point: 3 rounds, every figure's minimum <= median <= maximum, the
# allocator's eight figures all present, the C library's last five empty
# (quoted fields, which may hold commas, are blanked first).
sed 's/"[^"]*"/Q/g' "$csv" | awk -F, 'NR > 1 {
  if ($7 != 3) { print "rounds " $7 ": " $0; bad = 1 }
  for (m = 0; m < 8; m++) {
    med = $(8 + 3 * m); lo = $(9 + 3 * m); hi = $(10 + 3 * m)
    glibc_only = ($2 == "glibc" && m >= 3)
    if (glibc_only) { if (med != "" || lo != "" || hi != "") { print "glibc figure " m ": " $0; bad = 1 } }
    else if (med == "" || lo + 0 > med + 0 || med + 0 > hi + 0 || lo + 0 <= 0) { print "figure " m ": " $0; bad = 1 }
  }
} END { exit bad }' || fail "bad points in $csv"
printf '%s\n' "$series" | tr ',' '\n' | while read -r one; do
  grep -q "^$one,.*,3000,[0-9]*,3,[0-9]" "$csv" || fail "no point at 3000 for $one"
done
grep -q 'ga-bench.* scale --max-n 3000' "$dir/full/scale.cmd" || fail "scale.cmd: $(cat "$dir/full/scale.cmd")"
head -c 200 "$dir/full/scale.svg" | grep -q '^<svg' || fail "scale.svg is not an SVG"
# A budget too small for any point: every series stops, says why, and the run still succeeds.
out=$("$bench" scale --max-n 1000 --budget-s 0.000001 --modes native --patterns 4k --out "$dir/cut" 2>/dev/null)
printf '%s\n' "$out" | grep -q 'native 4k: time budget reached' || fail "no budget line in: $out"
grep -q '^native 4k,native,"",4k,,,,,,,,,,,,,,,,,,,,,,,,,,,,,"time budget reached' "$dir/cut/scale.csv" ||
  fail "no budget row in $(cat "$dir/cut/scale.csv")"
