package bench

import (
	"context"
	"errors"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
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
// floor. It reports both sides' throughput and p50/p99 call latency, the
// fraction of calls that failed (under overload they run into their
// timeouts; a session that is poisoned stops there), this process's peak
// heap and peak RSS during the tool calls, and the goroutines, child
// processes and sandbox holders left after every session closed, which
// must all be zero.
func BenchmarkConcurrent(b *testing.B) {
	env := newEnv(b, *latency)
	client := newClient(env)
	ctx := context.Background()
	n, perSession := *sessions, *callsPer
	var ours, floors []time.Duration
	var oursWall, floorWall time.Duration
	var heap, rss uint64
	leftG, leftP, failedCalls, floorFailedCalls := 0, 0, 0, 0
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		goroutines := runtime.NumGoroutine()
		// Creation is not what this row measures, and 64 preflights at once
		// on two cores outlast their 10 s timeout: open a few at a time.
		sessions := make([]*microvm.Session, n)
		var opening errgroup.Group
		opening.SetLimit(4)
		for i := range n {
			opening.Go(func() (err error) {
				sessions[i], err = createSession(ctx, client)
				return err
			})
		}
		err := opening.Wait()
		for _, s := range sessions {
			if s != nil {
				b.Cleanup(func() { _ = s.Close(ctx) })
			}
		}
		check(b, err)

		check(b, resetPeakRSS())
		lat := make([][]time.Duration, n)
		var wall time.Duration
		var failed errorLog
		b.StartTimer()
		h := heapPeak(func() {
			start := time.Now()
			_ = parallel(n, func(i int) error {
				tb := tools.New(sessions[i], tools.Options{})
				for j := range perSession {
					c := mix[j%len(mix)]
					t0 := time.Now()
					_, err := tb.Call(ctx, c.tool, mustJSON(b, c.input), nil)
					lat[i] = append(lat[i], time.Since(t0))
					if err != nil {
						failed.add(c.tool, err)
						if sessions[i].Poisoned() {
							break
						}
					}
				}
				return nil
			})
			wall = time.Since(start)
		})
		b.StopTimer()
		r, err := peakRSS()
		check(b, err)
		heap, rss = max(heap, h), max(rss, r)
		oursWall += wall
		ours = append(ours, slices.Concat(lat...)...)

		lat = make([][]time.Duration, n)
		var floorFailed errorLog
		start := time.Now()
		_ = parallel(n, func(i int) error {
			if sessions[i].Poisoned() {
				return nil
			}
			for range perSession {
				t0 := time.Now()
				_, err := client.Exec(ctx, msb.ExecOptions{Name: sessions[i].Name(), Argv: []string{"true"}}, msb.Streams{})
				lat[i] = append(lat[i], time.Since(t0))
				if err != nil {
					floorFailed.add("exec", err)
				}
			}
			return nil
		})
		floorWall += time.Since(start)
		floors = append(floors, slices.Concat(lat...)...)
		failedCalls += failed.report(b, "tool calls")
		floorFailedCalls += floorFailed.report(b, "floor calls")

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
	b.ReportMetric(float64(failedCalls)/float64(len(ours)), "failed-fraction")
	b.ReportMetric(float64(floorFailedCalls)/float64(len(floors)), "floor-failed-fraction")
	b.ReportMetric(float64(heap), "peak-heap-B")
	b.ReportMetric(float64(rss), "peak-rss-B")
	b.ReportMetric(float64(leftG), "goroutines-left")
	b.ReportMetric(float64(leftP), "procs-left")
	if leftG != 0 || leftP != 0 {
		b.Errorf("after every session closed: %d goroutines and %d processes more than before", leftG, leftP)
	}
}

// errorLog counts the calls that failed, by the error they returned: under
// overload they run into their timeouts, which the row reports rather than
// stopping at.
type errorLog struct {
	mu sync.Mutex
	n  map[string]int
}

func (l *errorLog) add(what string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[what+": "+err.Error()]++
}

// report logs the failures and returns their number.
func (l *errorLog) report(b *testing.B, what string) int {
	total := 0
	for _, k := range slices.Sorted(maps.Keys(l.n)) {
		b.Logf("%s failed %d times: %s", what, l.n[k], k)
		total += l.n[k]
	}
	return total
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
