package otlpexport

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

var errShutdown = errors.New("otlpexport: exporter is shut down")

// traceExporter sends spans to the endpoint the environment names.
type traceExporter struct {
	client  *client
	stopped context.Context // done once Shutdown is called
	stop    context.CancelFunc
}

// NewTraceExporter is a span exporter over OTLP/HTTP with binary
// protobuf, configured from the environment as otlptracehttp.New(ctx) is.
// ctx only bounds the construction, which fails once ctx is done.
func NewTraceExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := newClient(readConfig("TRACES", "/v1/traces"), "spans")
	if err != nil {
		return nil, err
	}
	stopped, stop := context.WithCancel(context.Background())
	return &traceExporter{client: c, stopped: stopped, stop: stop}, nil
}

// ExportSpans sends spans in one request; Shutdown interrupts it.
func (e *traceExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.stopped.Err() != nil {
		return errShutdown
	}
	body := encodeSpans(spans)
	if body == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.stopped, cancel)()
	if err := e.client.upload(ctx, body); err != nil {
		return fmt.Errorf("traces export: %w", err)
	}
	return nil
}

// Shutdown ends the exporter, and any export under way; ctx's error, if
// any, is returned, as the official exporter does.
func (e *traceExporter) Shutdown(ctx context.Context) error {
	e.stop()
	e.client.close()
	return ctx.Err()
}

// encodeSpans is the ExportTraceServiceRequest for spans, or nil when
// there is none: spans grouped by resource, then by scope, each group in
// the order first seen.
func encodeSpans(spans []sdktrace.ReadOnlySpan) []byte {
	type scopeKey struct {
		res   attribute.Distinct
		scope instrumentation.Scope
	}
	type scopeGroup struct {
		scope instrumentation.Scope
		spans []sdktrace.ReadOnlySpan
	}
	type resGroup struct {
		res    *resource.Resource
		scopes []*scopeGroup
	}
	var groups []*resGroup
	byRes := map[attribute.Distinct]*resGroup{}
	byScope := map[scopeKey]*scopeGroup{}
	for _, s := range spans {
		if s == nil {
			continue
		}
		res, scope := s.Resource(), s.InstrumentationScope()
		rg := byRes[res.Equivalent()]
		if rg == nil {
			rg = &resGroup{res: res}
			byRes[res.Equivalent()] = rg
			groups = append(groups, rg)
		}
		k := scopeKey{res.Equivalent(), scope}
		sg := byScope[k]
		if sg == nil {
			sg = &scopeGroup{scope: scope}
			byScope[k] = sg
			rg.scopes = append(rg.scopes, sg)
		}
		sg.spans = append(sg.spans, s)
	}
	var e encoder // writes nothing when there are no groups
	for _, rg := range groups {
		rs := e.begin(1) // ResourceSpans
		if rg.res != nil {
			e.resource(1, rg.res)
		}
		for _, sg := range rg.scopes {
			ss := e.begin(2) // ScopeSpans
			if sg.scope != (instrumentation.Scope{}) {
				e.scope(1, sg.scope)
			}
			for _, s := range sg.spans {
				e.span(2, s)
			}
			e.stringField(3, sg.scope.SchemaURL)
			e.end(ss)
		}
		e.stringField(3, rg.res.SchemaURL())
		e.end(rs)
	}
	return e.b
}

// span writes the Span field num.
func (e *encoder) span(num int, s sdktrace.ReadOnlySpan) {
	m := e.begin(num)
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	e.bytesField(1, tid[:])
	e.bytesField(2, sid[:])
	e.stringField(3, sc.TraceState().String())
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		e.bytesField(4, psid[:])
	}
	e.stringField(5, s.Name())
	e.varintField(6, spanKind(s.SpanKind()))
	e.fixed64Field(7, unixNano(s.StartTime()))
	e.fixed64Field(8, unixNano(s.EndTime()))
	e.keyValues(9, s.Attributes())
	e.varintField(10, count(s.DroppedAttributes()))
	for _, ev := range s.Events() {
		em := e.begin(11)
		e.fixed64Field(1, unixNano(ev.Time))
		e.stringField(2, ev.Name)
		e.keyValues(3, ev.Attributes)
		e.varintField(4, count(ev.DroppedAttributeCount))
		e.end(em)
	}
	e.varintField(12, count(s.DroppedEvents()))
	for _, l := range s.Links() {
		lm := e.begin(13)
		tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		e.bytesField(1, tid[:])
		e.bytesField(2, sid[:])
		// The official exporter sends no trace state (3) for a link.
		e.keyValues(4, l.Attributes)
		e.varintField(5, count(l.DroppedAttributeCount))
		e.fixed32Field(6, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		e.end(lm)
	}
	e.varintField(14, count(s.DroppedLinks()))
	st := e.begin(15) // Status, sent even when unset
	e.stringField(2, s.Status().Description)
	e.varintField(3, statusCode(s.Status().Code))
	e.end(st)
	e.fixed32Field(16, spanFlags(sc.TraceFlags(), parent))
	e.end(m)
}

// spanFlags: the W3C trace flags, and whether parent is remote, which is
// known (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK).
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | 0x100
	if parent.IsRemote() {
		f |= 0x200 // SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
	}
	return f
}

// spanKind is the Span.SpanKind enum's value.
func spanKind(k trace.SpanKind) uint64 {
	switch k {
	case trace.SpanKindInternal:
		return 1
	case trace.SpanKindServer:
		return 2
	case trace.SpanKindClient:
		return 3
	case trace.SpanKindProducer:
		return 4
	case trace.SpanKindConsumer:
		return 5
	}
	return 0
}

// statusCode is the Status.StatusCode enum's value.
func statusCode(c codes.Code) uint64 {
	switch c {
	case codes.Ok:
		return 1
	case codes.Error:
		return 2
	}
	return 0
}
