#!/usr/bin/env bash
# Runs every fuzz target in the module briefly, so a parser regression that
# panics is caught. Usage: fuzz-smoke.sh [DURATION]
set -euo pipefail
dur=${1:-3s}
cd "$(dirname "$0")/.."
count=0
while IFS= read -r pkg; do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz $pkg $target ($dur)"
    go test -run='^$' -fuzz="^${target}\$" -fuzztime="$dur" "$pkg" >/dev/null
    count=$((count + 1))
  done
done < <(go list ./...)
echo "fuzz: $count targets ran for $dur each"
