#!/usr/bin/env bash
# Runs every fuzz target in the module briefly, so a parser regression that
# panics is caught. Usage: fuzz-smoke.sh [BUDGET], a -fuzztime: a count of
# inputs (20000x) by default, since Go 1.26's fuzzing coordinator can fail
# a target with "context deadline exceeded" when a wall-clock budget (3s)
# ends while a worker is busy (go.dev/issue/75804, fixed in Go 1.27).
set -euo pipefail
dur=${1:-20000x}
cd "$(dirname "$0")/.."
count=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# inputs counts the saved inputs of a fuzz target's corpus directory.
inputs() { if [ -d "$1" ]; then ls -A "$1" | wc -l; else echo 0; fi; }
while IFS= read -r pkg; do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz $pkg $target ($dur)"
    # A failure that saved no new input under testdata/fuzz (a fuzzing
    # worker lost to load, not a crasher) is tried once more; a crasher
    # fails at once, and either way go test's output is shown.
    corpus="$dir/testdata/fuzz/$target"
    before=$(inputs "$corpus")
    for attempt in 1 2; do
      if go test -run='^$' -fuzz="^${target}\$" -fuzztime="$dur" "$pkg" >"$log" 2>&1; then
        break
      fi
      tail -n 30 "$log" >&2
      if [ "$attempt" = 2 ] || [ "$(inputs "$corpus")" != "$before" ]; then
        exit 1
      fi
      echo "fuzz $pkg $target: failed without a new input; once more" >&2
    done
    count=$((count + 1))
  done
done < <(go list ./...)
echo "fuzz: $count targets ran for $dur each"
