package omasandbox

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// The session metrics, by backend (attribute oma.backend). The tool
// calls' are tools.DurationMetric, msb's msb.InvocationsMetric.
const (
	// SessionsCreatedMetric counts sessions created (Open, Fork).
	SessionsCreatedMetric = "oma_sandbox.sessions.created"
	// SessionsOpenMetric is the sessions this process holds open (Open,
	// Attach and Fork add one, Close removes it).
	SessionsOpenMetric = "oma_sandbox.sessions.open"
)

var attrBackend = attribute.Key("oma.backend")

func (o Options) meterProvider() metric.MeterProvider {
	if o.MeterProvider == nil {
		return otel.GetMeterProvider()
	}
	return o.MeterProvider
}

type sessionMeters struct {
	created             metric.Int64Counter
	open                metric.Int64UpDownCounter
	uploaded, collected metric.Int64Counter
}

func (o Options) sessionMeters() sessionMeters {
	m := o.meterProvider().Meter(tracerName)
	created, err := m.Int64Counter(SessionsCreatedMetric, metric.WithUnit("{session}"),
		metric.WithDescription("Sessions created, by backend"))
	if err != nil {
		created = noop.Int64Counter{}
	}
	open, err := m.Int64UpDownCounter(SessionsOpenMetric, metric.WithUnit("{session}"),
		metric.WithDescription("Sessions this process holds open, by backend"))
	if err != nil {
		open = noop.Int64UpDownCounter{}
	}
	return sessionMeters{created: created, open: open,
		uploaded:  bytesCounter(o.meterProvider(), UploadedBytesMetric, "Bytes Upload placed in sessions, by backend"),
		collected: bytesCounter(o.meterProvider(), CollectedBytesMetric, "Bytes CollectOutputs copied out of sessions, by backend")}
}

// created counts a session Open or Fork made.
func (s *Session) created(ctx context.Context) {
	s.meters.created.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attrBackend.String(s.backend)))
}

// held adds n to the sessions held open.
func (s *Session) held(ctx context.Context, n int64) {
	s.meters.open.Add(context.WithoutCancel(ctx), n, metric.WithAttributes(attrBackend.String(s.backend)))
}
