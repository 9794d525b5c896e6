package bench

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// mix is the tool-call cycle every concurrent session runs; its first call
// rewrites the file the later ones read, edit and search.
var mix = []struct {
	tool  string
	input map[string]any
}{
	{"write", map[string]any{"path": "mix/notes.txt", "content": strings.Repeat("alpha beta needle\n", 20) + "tail\n"}},
	{"read", map[string]any{"path": "mix/notes.txt"}},
	{"edit", map[string]any{"path": "mix/notes.txt", "oldText": "tail", "newText": "end"}},
	{"ls", map[string]any{"path": "mix"}},
	{"glob", map[string]any{"pattern": "**/*.txt"}},
	{"grep", map[string]any{"pattern": "needle", "path": "/workspace/mix"}},
	{"bash", map[string]any{"command": "echo $((6 * 7)); ls mix"}},
}

// BenchmarkConcurrent runs -bench.sessions sessions at once through one
// process, each making -bench.calls tool calls from mix, with every msb
// invocation delayed by -bench.latency; then, on the same sandboxes and
// with the same concurrency, as many raw `exec NAME -- true` calls as the
// floor. It reports both sides' throughput and p50/p99 call latency, this
// process's peak heap and peak RSS during the tool calls, and the
// goroutines, child processes and sandbox holders left after every session
// closed, which must all be zero.
func BenchmarkConcurrent(b *testing.B) {
	env := newEnv(b, *latency)
	client := newClient(env)
	ctx := context.Background()
	n, perSession := *sessions, *callsPer
	var ours, floors []time.Duration
	var oursWall, floorWall time.Duration
	var heap, rss uint64
	leftG, leftP := 0, 0
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		goroutines := runtime.NumGoroutine()
		sessions := make([]*session.MsbSession, n)
		err := parallel(n, func(i int) (err error) {
			sessions[i], err = createSession(ctx, client)
			return err
		})
		check(b, err)

		check(b, resetPeakRSS())
		lat := make([][]time.Duration, n)
		var wall time.Duration
		b.StartTimer()
		h := heapPeak(func() {
			start := time.Now()
			err = parallel(n, func(i int) error {
				tb := tools.New(sessions[i], tools.Options{})
				for j := range perSession {
					c := mix[j%len(mix)]
					t0 := time.Now()
					if _, err := tb.Call(ctx, c.tool, mustJSON(b, c.input), nil); err != nil {
						return err
					}
					lat[i] = append(lat[i], time.Since(t0))
				}
				return nil
			})
			wall = time.Since(start)
		})
		b.StopTimer()
		check(b, err)
		r, err := peakRSS()
		check(b, err)
		heap, rss = max(heap, h), max(rss, r)
		oursWall += wall
		ours = append(ours, slices.Concat(lat...)...)

		lat = make([][]time.Duration, n)
		start := time.Now()
		check(b, parallel(n, func(i int) error {
			for range perSession {
				t0 := time.Now()
				if _, err := client.Exec(ctx, msb.ExecOptions{Name: sessions[i].Name(), Argv: []string{"true"}}, msb.Streams{}); err != nil {
					return err
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
			return nil
		}))
		floorWall += time.Since(start)
		floors = append(floors, slices.Concat(lat...)...)

		check(b, parallel(n, func(i int) error { return sessions[i].Close(ctx) }))
		g, p := settle(b, goroutines, env.Holders)
		leftG, leftP = max(leftG, g), max(leftP, p)
		b.StartTimer()
	}
	slices.Sort(ours)
	slices.Sort(floors)
	oursRate := float64(len(ours)) / oursWall.Seconds()
	floorRate := float64(len(floors)) / floorWall.Seconds()
	b.ReportMetric(oursRate, "calls/s")
	b.ReportMetric(floorRate, "floor-calls/s")
	b.ReportMetric(floorRate/oursRate, "time-x-floor")
	b.ReportMetric(msOf(percentile(ours, 0.50)), "p50-ms")
	b.ReportMetric(msOf(percentile(ours, 0.99)), "p99-ms")
	b.ReportMetric(msOf(percentile(floors, 0.50)), "floor-p50-ms")
	b.ReportMetric(msOf(percentile(floors, 0.99)), "floor-p99-ms")
	b.ReportMetric(float64(heap), "peak-heap-B")
	b.ReportMetric(float64(rss), "peak-rss-B")
	b.ReportMetric(float64(leftG), "goroutines-left")
	b.ReportMetric(float64(leftP), "procs-left")
	if leftG != 0 || leftP != 0 {
		b.Errorf("after every session closed: %d goroutines and %d processes more than before", leftG, leftP)
	}
}

// parallel runs fn(0..n-1) at once and returns their errors joined.
func parallel(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = fn(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// settle waits up to five seconds for the goroutine count to fall back to
// before and for child processes and holders to be gone, and returns what
// is left of each.
func settle(b *testing.B, before int, holders func() []int) (goroutines, procs int) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		goroutines = max(0, runtime.NumGoroutine()-before)
		procs = len(children()) + len(holders())
		if goroutines == 0 && procs == 0 || time.Now().After(deadline) {
			return goroutines, procs
		}
		time.Sleep(20 * time.Millisecond)
	}
}
