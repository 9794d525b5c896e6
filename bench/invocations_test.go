package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/reaper"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// counts accumulates, per side of a row, the msb invocations fakemsb
// logged. Only ours runs with the benchmark timer on.
type counts struct {
	b      *testing.B
	env    *fakemsbtest.Env
	n      map[string]int
	rounds int
}

func newCounts(b *testing.B, env *fakemsbtest.Env) *counts {
	return &counts{b: b, env: env, n: map[string]int{}}
}

func (c *counts) measure(side string, fn func()) {
	c.b.StopTimer()
	c.env.ResetLog(c.b)
	if side == "ours" {
		c.rounds++
		c.b.StartTimer()
	}
	fn()
	c.b.StopTimer()
	c.n[side] += len(c.env.Invocations(c.b))
	c.b.StartTimer()
}

// report publishes msb-calls/op (ours), seed-msb-calls/op and their ratio.
func (c *counts) report() {
	if c.rounds == 0 {
		return
	}
	ours := float64(c.n["ours"]) / float64(c.rounds)
	seed := float64(c.n["seed"]) / float64(c.rounds)
	c.b.ReportMetric(ours, "msb-calls/op")
	c.b.ReportMetric(seed, "seed-msb-calls/op")
	c.b.ReportMetric(ours/seed, "calls-x-seed")
}

// BenchmarkInvocations counts the msb invocations of each operation in
// fakemsb's log, ours side by side with the seed's sequence for it: session
// create, each tool call, close, and one sweep of -bench.sweep stale
// sessions. No latency is injected: the counts do not depend on it.
func BenchmarkInvocations(b *testing.B) {
	ctx := context.Background()
	b.Run("op=create", func(b *testing.B) {
		env := newEnv(b, 0)
		client := newClient(env)
		c := newCounts(b, env)
		for b.Loop() {
			var ours *microvm.Session
			var sd *seed
			c.measure("ours", func() {
				var err error
				ours, err = createSession(ctx, client)
				check(b, err)
			})
			c.measure("seed", func() {
				var err error
				sd, err = seedCreate(ctx, client, seedNames(), agenttest.AgentBinary(b))
				check(b, err)
			})
			b.StopTimer()
			check(b, ours.Close(ctx))
			check(b, sd.close(ctx))
			b.StartTimer()
		}
		c.report()
	})

	b.Run("op=tools", func(b *testing.B) {
		env := newEnv(b, 0)
		client := newClient(env)
		sess := mustSession(b, client)
		tb, sd := toolFixture(b, client, sess)
		for _, row := range toolRows(sess.Paths().Workspace) {
			b.Run("tool="+row.name, func(b *testing.B) {
				c := newCounts(b, env)
				for b.Loop() {
					c.measure("ours", func() { row.ours(b, tb) })
					c.measure("seed", func() { row.seed(b, sd) })
				}
				c.report()
			})
		}
	})

	b.Run("op=close", func(b *testing.B) {
		env := newEnv(b, 0)
		client := newClient(env)
		c := newCounts(b, env)
		for b.Loop() {
			b.StopTimer()
			ours, err := createSession(ctx, client)
			check(b, err)
			sd, err := seedCreate(ctx, client, seedNames(), agenttest.AgentBinary(b))
			check(b, err)
			b.StartTimer()
			c.measure("ours", func() { check(b, ours.Close(ctx)) })
			c.measure("seed", func() { check(b, sd.close(ctx)) })
		}
		c.report()
	})

	b.Run(fmt.Sprintf("op=sweep-%d", *sweepN), func(b *testing.B) {
		env := newEnv(b, 0)
		client := newClient(env)
		c := newCounts(b, env)
		later := func() time.Time { return time.Now().Add(time.Hour) }
		for b.Loop() {
			b.StopTimer()
			stale(b, env, client, *sweepN)
			b.StartTimer()
			c.measure("ours", func() {
				rep, err := reaper.Reap(ctx, client, reaper.Options{OlderThan: time.Minute, Now: later})
				check(b, err)
				if len(rep.RemovedSandboxes) != *sweepN || len(rep.RemovedVolumes) != *sweepN {
					b.Fatalf("ours removed %d sandboxes and %d volumes of %d each", len(rep.RemovedSandboxes), len(rep.RemovedVolumes), *sweepN)
				}
			})
			b.StopTimer()
			stale(b, env, client, *sweepN)
			b.StartTimer()
			c.measure("seed", func() {
				sd := &seed{client: client}
				removed, err := sd.reap(ctx, time.Minute, later())
				check(b, err)
				if removed != 2**sweepN {
					b.Fatalf("the seed replay removed %d of %d resources", removed, 2**sweepN)
				}
			})
		}
		c.report()
	})
}

// stale leaves n sessions behind on env: created and never closed, as a
// crashed process would.
func stale(b *testing.B, env *fakemsbtest.Env, client *msb.Client, n int) {
	b.Helper()
	for range n {
		_, err := createSession(context.Background(), client)
		check(b, err)
	}
	if got := len(env.Sandboxes(b)); got != n {
		b.Fatalf("%d sandboxes before the sweep, want %d", got, n)
	}
}
