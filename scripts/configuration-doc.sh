#!/bin/sh
# configuration-doc.sh GA_BENCH [--check]: docs/configuration.md's key reference
# is what `ga-bench keys --markdown` prints, from the list the parser uses.
# Rewrites everything after the marker line; with --check, fails (naming the
# command that fixes it) when the file differs instead.
set -eu
bench=$1
mode=${2:-}
here=$(cd "$(dirname "$0")/.." && pwd)
doc="$here/docs/configuration.md"
marker='<!-- generated from here on by: scripts/configuration-doc.sh build/bench/ga-bench -->'
grep -qxF "$marker" "$doc" || { echo "configuration-doc: no marker line in $doc" >&2; exit 1; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
{
  sed "/^$(printf '%s' "$marker" | sed 's/[].[*/^$\\]/\\&/g')\$/q" "$doc"
  echo
  "$bench" keys --markdown
} >"$tmp"
if [ "$mode" = --check ]; then
  if ! cmp -s "$tmp" "$doc"; then
    diff -u "$doc" "$tmp" | head -40 >&2 || true
    echo "configuration-doc: docs/configuration.md differs from the keys the parser knows;" \
      "run scripts/configuration-doc.sh build/bench/ga-bench" >&2
    exit 1
  fi
  echo "configuration-doc: docs/configuration.md lists every key as the parser does"
else
  cp "$tmp" "$doc"
fi
