#!/usr/bin/env bash
# Runs the benchmarks in ./bench side by side with their baselines and saves
# the raw output (what benchstat reads) under bench/results/, then prints
# benchstat's summary of it when benchstat is installed
# (go install golang.org/x/perf/cmd/benchstat@latest).
#
# Usage: scripts/bench.sh [go test flags or -bench.* flags...]
#   COUNT=5        runs of each quick row (invocations, tool calls, local)
#   BENCHTIME=5x   iterations per run of the quick rows
#   HEAVY_COUNT=3  runs of each heavy row (search, concurrency, reaping), one
#                  iteration each
# Extra arguments go to both go test runs, e.g. the full concurrency mode:
#   scripts/bench.sh -bench.sessions=64
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-5}
benchtime=${BENCHTIME:-5x}
heavy_count=${HEAVY_COUNT:-3}

mkdir -p bench/results
out=bench/results/$(date -u +%Y%m%dT%H%M%SZ).txt
{
	echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet -- . || echo -dirty)"
	echo "nproc: $(nproc)"
	echo "go: $(go env GOVERSION)"
	echo "kernel: $(uname -sr | tr ' ' '-')"
} >"$out"
echo "bench: raw output in $out"

# run BENCH BENCHTIME COUNT runs one group; the script's arguments follow
# the package, where go test passes them to the test binary.
run() {
	local cmd=(go test -run '^$' -bench "$1" -benchtime "$2" -count "$3" -benchmem -timeout 0 ./bench/ "${extra[@]}")
	echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
	echo "# $(printf '%q ' "${cmd[@]}")" >>"$out"
	echo "+ $(printf '%q ' "${cmd[@]}")" >&2
	"${cmd[@]}" | tee -a "$out"
	echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
}
extra=("$@")
run '^Benchmark(Invocations|ToolCall|Local)$' "$benchtime" "$count"
run '^Benchmark(Search|Concurrent|Reap)$' 1x "$heavy_count"

if grep -q -e '^--- FAIL' -e '^FAIL' "$out"; then
	echo "bench: a benchmark failed; see $out" >&2
	exit 1
fi
benchstat=$(command -v benchstat || echo "$(go env GOPATH)/bin/benchstat")
if [ -x "$benchstat" ]; then
	"$benchstat" "$out"
else
	echo "bench: benchstat not found; go install golang.org/x/perf/cmd/benchstat@latest to summarise $out"
fi
