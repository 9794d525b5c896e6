package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/reaper"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// memMsb is an in-memory msb.Runner for the reaping row. It answers list,
// inspect, remove and their volume counterparts with fakemsb's JSON shapes
// and messages, after sleeping the injected latency, as msb's process spawn
// and VM round trip would take. It stands in for fakemsb there because
// fakemsb can only make a sandbox by starting it (a bwrap holder each, about
// 80 ms with its stop on this machine kind), so 1,000 stale sandboxes per
// side per round would cost minutes of setup.
type memMsb struct {
	latency time.Duration
	calls   atomic.Int64

	mu        sync.Mutex
	sandboxes map[string]memSandbox
	volumes   map[string]time.Time
}

type memSandbox struct {
	created time.Time
	labels  map[string]string
	volume  string
}

// fill adds n sessions of ours, each a sandbox and its volume, created at
// created.
func (m *memMsb) fill(n int, created time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sandboxes = map[string]memSandbox{}
	m.volumes = map[string]time.Time{}
	labels := map[string]string{}
	for _, l := range session.OwnerLabels() {
		labels[l.Key] = l.Value
	}
	for i := range n {
		names := session.NewNames(session.DefaultPrefix, "bench", fmt.Sprintf("s%d", i), created, uint64(i))
		m.sandboxes[names.Sandbox] = memSandbox{created: created, labels: labels, volume: names.Volume}
		m.volumes[names.Volume] = created
	}
}

func (m *memMsb) left() (sandboxes, volumes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sandboxes), len(m.volumes)
}

func (m *memMsb) Run(ctx context.Context, c msb.Call) (*msb.Result, error) {
	m.calls.Add(1)
	t := time.NewTimer(m.latency)
	select {
	case <-ctx.Done():
		t.Stop()
		return nil, fmt.Errorf("msb %s: %w: %w", c.Args[0], msb.ErrAborted, ctx.Err())
	case <-t.C:
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	res := &msb.Result{Args: c.Args}
	args := c.Args
	fail := func(kind error, msg string) (*msb.Result, error) {
		res.ExitCode = 1
		res.Stderr = []byte("error: " + msg + "\n")
		return res, &msb.ExitError{Args: args, ExitCode: 1, Message: msg, Stderr: res.Stderr, Kind: kind}
	}
	var out any
	switch {
	case args[0] == "list":
		want := map[string]string{}
		for i := 1; i+1 < len(args); i++ {
			if args[i] == "--label" {
				k, v, _ := strings.Cut(args[i+1], "=")
				want[k] = v
			}
		}
		var list []map[string]any
		for _, name := range slices.Sorted(maps.Keys(m.sandboxes)) {
			sb := m.sandboxes[name]
			if matches(sb.labels, want) {
				list = append(list, map[string]any{"created_at": sb.created, "image": image, "name": name, "status": "Stopped"})
			}
		}
		out = list
	case args[0] == "inspect":
		sb, ok := m.sandboxes[args[1]]
		if !ok {
			return fail(msb.ErrSandboxNotFound, "sandbox not found: "+args[1])
		}
		out = map[string]any{"name": args[1], "status": "Stopped", "created_at": sb.created, "updated_at": sb.created,
			"active_config": nil, "pending_changes": []any{},
			"config": map[string]any{"name": args[1], "labels": sb.labels, "mounts": []any{
				map[string]any{"type": "Named", "name": sb.volume, "guest": "/workspace"},
			}}}
	case args[0] == "remove":
		name := args[len(args)-1]
		if _, ok := m.sandboxes[name]; !ok {
			return fail(msb.ErrSandboxNotFound, "sandbox not found: "+name)
		}
		delete(m.sandboxes, name)
		return res, nil
	case args[0] == "volume" && args[1] == "list":
		var list []map[string]any
		for _, name := range slices.Sorted(maps.Keys(m.volumes)) {
			list = append(list, map[string]any{"name": name, "kind": "dir", "used_bytes": 0, "created_at": m.volumes[name]})
		}
		out = list
	case args[0] == "snapshot" && args[1] == "list":
		out = []any{} // forks remove their snapshots: none left
	case args[0] == "volume" && args[1] == "inspect":
		created, ok := m.volumes[args[2]]
		if !ok {
			return fail(msb.ErrVolumeNotFound, "volume not found: "+args[2])
		}
		res.Stdout = fmt.Appendf(nil, "Name:     %s\nKind:     dir\nCreated:  %s\n", args[2], created.Format(time.RFC3339))
		return res, nil
	case args[0] == "volume" && args[1] == "remove":
		name := args[2]
		if _, ok := m.volumes[name]; !ok {
			return fail(msb.ErrVolumeNotFound, "volume not found: "+name)
		}
		delete(m.volumes, name)
		return res, nil
	default:
		return nil, fmt.Errorf("in-memory msb: unexpected %v", args)
	}
	data, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	if string(data) == "null" {
		data = []byte("[]")
	}
	res.Stdout = append(data, '\n')
	return res, nil
}

func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// BenchmarkReap removes -bench.reap stale sandboxes and their volumes: ours
// (three concurrent listings, then removals at reaper.DefaultConcurrency)
// side by side with the seed's sequential list, inspect each, remove each,
// volume list, volume inspect each, remove each, every msb call delayed by
// -bench.latency. Both run against the in-memory msb (see memMsb).
func BenchmarkReap(b *testing.B) {
	ctx := context.Background()
	n := *reapN
	created := time.Now().Add(-time.Hour)
	msbs := map[string]*memMsb{"ours": {latency: *latency}, "seed": {latency: *latency}}
	s := newSideBySide(b)
	calls := map[string]int64{}
	side := func(name string, fn func(*msb.Client)) variant {
		m := msbs[name]
		return variant{name, func() {
			before := m.calls.Load()
			fn(msb.NewClient(m))
			calls[name] += m.calls.Load() - before
			if sb, v := m.left(); sb != 0 || v != 0 {
				b.Fatalf("%s left %d sandboxes and %d volumes of %d each", name, sb, v, n)
			}
		}}
	}
	for b.Loop() {
		b.StopTimer()
		for _, m := range msbs {
			m.fill(n, created)
		}
		b.StartTimer()
		s.round(
			side("ours", func(c *msb.Client) {
				_, err := reaper.Reap(ctx, c, reaper.Options{OlderThan: time.Minute})
				check(b, err)
			}),
			side("seed", func(c *msb.Client) {
				_, err := (&seed{client: c}).reap(ctx, time.Minute, time.Now())
				check(b, err)
			}),
		)
	}
	s.report()
	b.ReportMetric(float64(calls["ours"])/float64(s.n), "msb-calls/op")
	b.ReportMetric(float64(calls["seed"])/float64(s.n), "seed-msb-calls/op")
	b.ReportMetric(float64(calls["ours"])/float64(calls["seed"]), "calls-x-seed")
}
