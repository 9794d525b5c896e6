package omasandbox

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// The transfer metrics, by backend: bytes that reached the session
// (Upload) and that left it (CollectOutputs).
const (
	UploadedBytesMetric  = "oma_sandbox.uploaded"
	CollectedBytesMetric = "oma_sandbox.collected"
)

var (
	attrSession = attribute.Key("oma.session")
	attrBytes   = attribute.Key("oma.bytes")
	attrFiles   = attribute.Key("oma.files")
	attrRefused = attribute.Key("oma.refused")
)

func bytesCounter(mp metric.MeterProvider, name, what string) metric.Int64Counter {
	c, err := mp.Meter(tracerName).Int64Counter(name, metric.WithUnit("By"), metric.WithDescription(what))
	if err != nil {
		return noop.Int64Counter{}
	}
	return c
}

// beginTransfer starts the span of an upload or a collection, "session
// NAME", a child of the caller's span; endTransfer ends it with the
// sizes, which are all it carries (never a path or a file's contents).
func (s *Session) beginTransfer(ctx context.Context, name string) (context.Context, trace.Span) {
	return s.opts.tracerProvider().Tracer(tracerName).Start(ctx, "session "+name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrAction.String(name), attrSession.String(s.Name()), attrBackend.String(s.backend)))
}

func (s *Session) endTransfer(ctx context.Context, span trace.Span, err error, counter metric.Int64Counter, bytes int64, attrs ...attribute.KeyValue) {
	out := outcome(ctx, err)
	if span.IsRecording() {
		span.SetAttributes(append(attrs, attrBytes.Int64(bytes), attrOutcome.String(out))...)
		if err != nil {
			span.SetStatus(codes.Error, out)
		}
	}
	span.End()
	if bytes > 0 {
		counter.Add(context.WithoutCancel(ctx), bytes, metric.WithAttributes(attrBackend.String(s.backend)))
	}
}
