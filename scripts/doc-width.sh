#!/bin/sh
# doc-width.sh [FILE...]: every table line (starting with '|') and every line
# of a fenced code block in the README and docs/*.md fits in 100 columns, so
# that they read in a terminal and in a narrow browser window without
# scrolling. Prints each line that does not, with its file and line number.
set -eu
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  set -- README.md docs/*.md
fi
awk '
  FNR == 1 { fence = 0 }
  /^[ \t]*(```|~~~)/ { fence = !fence; next }
  (fence || /^[ \t]*\|/) && length($0) > 100 {
    printf "%s:%d: %d columns: %s\n", FILENAME, FNR, length($0), substr($0, 1, 60) "..."; bad++
  }
  END {
    if (bad) { printf "doc-width: %d table or code lines over 100 columns\n", bad; exit 1 }
    print "doc-width: every table and code line fits in 100 columns"
  }' "$@"
