#!/usr/bin/env bash
# Runs BenchmarkLocal as uid 65534, the way the local backend runs for a
# user other than root (docs/BENCHMARKS.md §6g), and saves the output under
# bench/results/. Run as root: it builds the benchmark and the agent, then
# runs them through setpriv in a mount namespace of its own whose /tmp is
# empty (the "host" row writes /tmp/oma-bash, which a root run may own).
#
# Usage: scripts/bench-unprivileged.sh [BENCH REGEX] (default BenchmarkLocal$)
#   COUNT=5 BENCHTIME=20x
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-unprivileged: run as root (it becomes uid 65534)" >&2; exit 2; }
bench=${1:-'BenchmarkLocal$'}
work=$(mktemp -d -p /var/tmp oma-bench-unpriv-XXXXXX)
trap 'rm -rf "$work"' EXIT
go test -c -o "$work/bench.test" ./bench
CGO_ENABLED=0 go build -trimpath -o "$work/agent" ./cmd/oma-guest-agent
chmod 755 "$work"
mkdir -p bench/results
out=$PWD/bench/results/$(date -u +%Y%m%dT%H%MZ)-local-unprivileged.txt
{
	echo "# commit $(git rev-parse --short HEAD)$(git diff --quiet -- . || echo -dirty), nproc $(nproc), $(go env GOVERSION), kernel $(uname -r), run as uid 65534"
	echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# scripts/bench-unprivileged.sh '$bench' (COUNT=${COUNT:-5} BENCHTIME=${BENCHTIME:-20x})"
} >"$out"
unshare --mount --propagation private sh -ec '
	mount -t tmpfs -o mode=1777 tmpfs /tmp
	mkdir /tmp/home && chown 65534:65534 /tmp/home && cd /tmp/home
	exec setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH="$PATH" HOME=/tmp/home TMPDIR=/tmp/home \
		OMA_TEST_AGENT="$1/agent" "$1/bench.test" -test.run "^\$" -test.bench "$2" -test.benchtime "$3" -test.count "$4"
' sh "$work" "$bench" "${BENCHTIME:-20x}" "${COUNT:-5}" | tee -a "$out"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
echo "bench-unprivileged: output in $out"
