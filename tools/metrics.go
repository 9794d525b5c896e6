package tools

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// DurationMetric is the histogram of tool calls' durations, in seconds, by
// tool, backend and result class (ResultClass).
const DurationMetric = "oma_sandbox.tool.duration"

// durationBuckets span a cached read on a channel (a millisecond) to a
// long bash command.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

func durationHistogram(mp metric.MeterProvider) metric.Float64Histogram {
	h, err := mp.Meter(tracerName).Float64Histogram(DurationMetric, metric.WithUnit("s"),
		metric.WithDescription("Duration of agent tool calls, by tool, backend and result class"),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	if err != nil {
		return noop.Float64Histogram{}
	}
	return h
}
