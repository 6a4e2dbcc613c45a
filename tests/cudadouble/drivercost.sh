#!/bin/sh
# drivercost.sh GA_BENCH: ga-bench drivercost on the CUDA backend over the
# driver double (LD_LIBRARY_PATH at it): every call kind through cuda.c, no
# call refused by the double, nothing leaked (it aborts at exit on a leak).
set -eu
out=$("$1" drivercost --backend cuda --reps 5 2>&1) || { printf '%s\n' "$out" >&2; exit 1; }
printf '%s\n' "$out" | grep -q 'measured on backend cuda' ||
  { printf 'no "measured on backend cuda" in:\n%s\n' "$out" >&2; exit 1; }
if printf '%s\n' "$out" | grep -q 'cuda double'; then printf '%s\n' "$out" >&2; exit 1; fi
