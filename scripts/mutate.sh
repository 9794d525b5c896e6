#!/usr/bin/env bash
# Mutation testing of the pure packages with gremlins: each mutant of a
# package's code is run against that package's own tests, and one that no
# test kills "lives". Usage: mutate.sh [PACKAGE...] (default: all of them).
# Results go to .tools/mutate/PACKAGE.{log,json}; docs/TESTING.md records
# them. Slow: one `go test` per mutant (about 6 s each on two shared cores).
set -euo pipefail
cd "$(dirname "$0")/.."
version=v0.6.0
export GOBIN="$PWD/.tools/bin"
if ! [ -x "$GOBIN/gremlins" ] || ! [ -f "$GOBIN/gremlins.$version" ]; then
  go install "github.com/go-gremlins/gremlins/cmd/gremlins@$version"
  touch "$GOBIN/gremlins.$version"
fi
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(glob grep bashproto outputs msb)
out=.tools/mutate
mkdir -p "$out"
status=0
for pkg in "${pkgs[@]}"; do
  args=(--workers 1 --test-cpu 1 --timeout-coefficient "${MUTATE_TIMEOUT_COEFFICIENT:-10}" -o "$out/$pkg.json")
  if [ "$pkg" = msb ]; then
    # Only the pure parts: argv building, validation and output parsing.
    args+=(-E '(^|/)(api|client|errors|runner|proc_[a-z]+)\.go$')
  fi
  echo "mutate: $pkg"
  if ! "$GOBIN/gremlins" unleash "${args[@]}" "./$pkg" > "$out/$pkg.log" 2>&1; then
    status=1
  fi
  grep -iE '^(Killed|Timed out)|efficacy|coverage:' "$out/$pkg.log" || tail -3 "$out/$pkg.log"
  grep -E '^ *LIVED' "$out/$pkg.log" || true
done
exit $status
