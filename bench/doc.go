// Package bench holds the project's benchmarks (its _test.go files): msb
// invocations per operation, tool-call wall time against the raw exec
// floor, glob and grep over a large workspace, reaping, many concurrent
// sessions through one process, and the local backend's overhead.
//
// Every row runs its variants side by side in the same b.N loop: ours, a
// baseline that replays the msb sequence of the seed (open-managed-agents
// 0.1.0, microsandbox.js), and the floor (one raw `msb exec NAME -- true`,
// the bare find or rg, or the same script run directly on the host). Each
// reports its times, counts and ratios with b.ReportMetric, so benchstat
// reads them. scripts/bench.sh runs them; docs/BENCHMARKS.md has the
// results and the command that produced them.
package bench
