#!/bin/sh
# expect_output.sh PATTERN COMMAND [ARG...]: runs the command and passes when
# its output (stdout and stderr) contains PATTERN (a fixed string); prints
# what it got otherwise.
pattern=$1
shift
out=$("$@" 2>&1)
if printf '%s\n' "$out" | grep -qF -- "$pattern"; then exit 0; fi
printf 'expected output containing: %s\ngot:\n%s\n' "$pattern" "$out" >&2
exit 1
