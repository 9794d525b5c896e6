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
	"github.com/oma-sandbox/oma-sandbox/session"
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
// invocation delayed by -bench.latency: first over each session's guest
// agent channel (ours; the first call opens it), then, on the same
// sandboxes with their channels closed, with one msb exec per call
// ("exec"), then as many raw `exec NAME -- true` calls as the floor. It
// reports each side's throughput and p50/p99 call latency, the fraction
// of calls that failed (under overload they run into their timeouts; a
// session that is poisoned stops there), this process's peak heap and
// peak RSS during ours, and what is left after every session closed,
// which must be nothing: goroutines, child processes (msb, the channels'
// msb exec --stream), sandbox holders (a guest process, the agent
// included, dies with its holder's pid namespace), channel processes, and
// sandboxes and volumes in fakemsb's state.
func BenchmarkConcurrent(b *testing.B) {
	env := newEnv(b, *latency)
	client := newClient(env)
	agent := agentFile(b)
	ctx := context.Background()
	n, perSession := *sessions, *callsPer
	ours := phase{name: "tool calls over the channel"}
	execs := phase{name: "tool calls with one exec each"}
	floors := phase{name: "floor calls"}
	var heap, rss uint64
	leftG, leftP, leftState := 0, 0, 0
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
				sessions[i], err = createChannelSession(ctx, client, agent)
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
		b.StartTimer()
		h := heapPeak(func() { ours.run(b, seams(sessions), perSession, mixCalls(b, seams(sessions))) })
		b.StopTimer()
		r, err := peakRSS()
		check(b, err)
		heap, rss = max(heap, h), max(rss, r)

		for _, s := range sessions {
			s.DisableAgentChannel()
		}
		execs.run(b, seams(sessions), perSession, mixCalls(b, seams(sessions)))
		floors.run(b, seams(sessions), perSession, func(i, _ int) (string, error) {
			_, err := client.Exec(ctx, msb.ExecOptions{Name: sessions[i].Name(), Argv: []string{"true"}}, msb.Streams{})
			return "exec", err
		})

		check(b, parallel(n, func(i int) error { return sessions[i].Close(ctx) }))
		g, p := settle(b, goroutines, env.Holders)
		for _, s := range sessions {
			if procs := env.Channel(s.Name()); !procs.Empty() {
				b.Errorf("%s: channel processes left: %+v", s.Name(), procs)
				p += len(procs.Msb) + len(procs.Agents)
			}
		}
		state := len(env.Sandboxes(b)) + len(env.Volumes(b))
		leftG, leftP, leftState = max(leftG, g), max(leftP, p), max(leftState, state)
		b.StartTimer()
	}
	reportRow(b, &ours, &execs, &floors, "exec-", heap, rss, leftG, leftP)
	b.ReportMetric(float64(leftState), "state-left")
	if leftG != 0 || leftP != 0 || leftState != 0 {
		b.Errorf("after every session closed: %d goroutines, %d processes and %d sandboxes or volumes more than before", leftG, leftP, leftState)
	}
}

// seams is sessions as the session seam.
func seams[S session.Session](sessions []S) []session.Session {
	out := make([]session.Session, len(sessions))
	for i, s := range sessions {
		out[i] = s
	}
	return out
}

// reportRow publishes a concurrency row: ours, the other transport's
// phase under prefix, the floor, each side's time per call over the
// floor's, this process's peak heap and RSS, and what was left.
func reportRow(b *testing.B, ours, other, floors *phase, prefix string, heap, rss uint64, leftG, leftP int) {
	ours.report(b, "")
	other.report(b, prefix)
	floors.report(b, "floor-")
	b.ReportMetric(floors.rate()/ours.rate(), "time-x-floor")
	b.ReportMetric(floors.rate()/other.rate(), prefix+"time-x-floor")
	b.ReportMetric(float64(heap), "peak-heap-B")
	b.ReportMetric(float64(rss), "peak-rss-B")
	b.ReportMetric(float64(leftG), "goroutines-left")
	b.ReportMetric(float64(leftP), "procs-left")
}

// mixCalls returns the j-th call of session i's share of mix.
func mixCalls(b *testing.B, sessions []session.Session) func(i, j int) (string, error) {
	tbs := make([]*tools.Toolbox, len(sessions))
	for i, s := range sessions {
		tbs[i] = tools.New(s, tools.Options{})
	}
	return func(i, j int) (string, error) {
		c := mix[j%len(mix)]
		_, err := tbs[i].Call(context.Background(), c.tool, mustJSON(b, c.input), nil)
		return c.tool, err
	}
}

// phase is one side of the concurrency row: every call's latency, the
// wall time of its rounds and its failures.
type phase struct {
	name   string
	lat    []time.Duration
	wall   time.Duration
	failed int
}

// run makes perSession calls in each session, all sessions at once; a
// session that is poisoned stops there.
func (p *phase) run(b *testing.B, sessions []session.Session, perSession int, call func(i, j int) (string, error)) {
	lat := make([][]time.Duration, len(sessions))
	var failed errorLog
	start := time.Now()
	_ = parallel(len(sessions), func(i int) error {
		for j := 0; j < perSession && !sessions[i].Poisoned(); j++ {
			t0 := time.Now()
			what, err := call(i, j)
			lat[i] = append(lat[i], time.Since(t0))
			if err != nil {
				failed.add(what, err)
			}
		}
		return nil
	})
	p.wall += time.Since(start)
	p.lat = append(p.lat, slices.Concat(lat...)...)
	p.failed += failed.report(b, p.name)
}

func (p *phase) rate() float64 { return float64(len(p.lat)) / p.wall.Seconds() }

// report publishes the phase's throughput, p50 and p99, and failed
// fraction, each name prefixed.
func (p *phase) report(b *testing.B, prefix string) {
	slices.Sort(p.lat)
	b.ReportMetric(p.rate(), prefix+"calls/s")
	b.ReportMetric(msOf(percentile(p.lat, 0.50)), prefix+"p50-ms")
	b.ReportMetric(msOf(percentile(p.lat, 0.99)), prefix+"p99-ms")
	b.ReportMetric(float64(p.failed)/float64(len(p.lat)), prefix+"failed-fraction")
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
