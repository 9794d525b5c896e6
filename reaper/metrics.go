package reaper

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The sweeps' metrics, by backend (oma.backend): what cron's
// reap --metrics-file writes, as counters a long-running process (or the
// CLI with OTLP export) records.
const (
	// SweepsMetric counts sweeps by oma.outcome: "ok", or "failed" when
	// a listing or a removal failed.
	SweepsMetric = "oma_sandbox.reaper.sweeps"
	// RemovedMetric counts removed resources by oma.kind (dry runs,
	// which remove nothing, are not counted).
	RemovedMetric = "oma_sandbox.reaper.removed"
	// FailedMetric counts resources a sweep could not act on, by
	// oma.kind (Count.Failed).
	FailedMetric = "oma_sandbox.reaper.failed"
)

// Sweep is one sweep's outcome, for Record.
type Sweep struct {
	Backend string // "msb" or "local"
	DryRun  bool
	OK      bool
	Removed map[string]int // by kind
	Failed  map[string]int // by kind
}

// Record counts sweep on mp's instruments; nil mp means
// otel.GetMeterProvider(). Reap records its own sweeps; a caller of
// another backend's sweep (local.Reap) records it with this.
func Record(ctx context.Context, mp metric.MeterProvider, sweep Sweep) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter("github.com/oma-sandbox/oma-sandbox/reaper")
	backend := attribute.String("oma.backend", sweep.Backend)
	outcome := "ok"
	if !sweep.OK {
		outcome = "failed"
	}
	if c, err := m.Int64Counter(SweepsMetric, metric.WithUnit("{sweep}"), metric.WithDescription("Reaper sweeps, by backend and outcome")); err == nil {
		c.Add(ctx, 1, metric.WithAttributes(backend, attribute.String("oma.outcome", outcome)))
	}
	add := func(name, what string, by map[string]int) {
		c, err := m.Int64Counter(name, metric.WithUnit("{resource}"), metric.WithDescription(what))
		if err != nil {
			return
		}
		for kind, n := range by {
			if n > 0 {
				c.Add(ctx, int64(n), metric.WithAttributes(backend, attribute.String("oma.kind", kind)))
			}
		}
	}
	if !sweep.DryRun {
		add(RemovedMetric, "Resources the reaper removed, by backend and kind", sweep.Removed)
	}
	add(FailedMetric, "Resources the reaper could not act on, by backend and kind", sweep.Failed)
}

// sweepOf is what rep (nil: a listing failed) says for Record.
func sweepOf(dryRun bool, rep *Report, err error) Sweep {
	s := Sweep{Backend: "msb", DryRun: dryRun, OK: err == nil, Removed: map[string]int{}, Failed: map[string]int{}}
	if rep == nil {
		return s
	}
	s.Removed[KindSandbox], s.Removed[KindVolume], s.Removed[KindSnapshot] = len(rep.RemovedSandboxes), len(rep.RemovedVolumes), len(rep.RemovedSnapshots)
	for kind, c := range rep.Counts {
		s.Failed[kind] = c.Failed
	}
	return s
}
