package otlpexport

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// everyAttribute has a value of each attribute type, zero values, nested
// slices and maps, and a string long enough for a 3-byte length.
func everyAttribute() []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("string", "héllo"),
		attribute.String("empty string", ""),
		attribute.String("long", strings.Repeat("x", 20000)),
		attribute.Bool("true", true),
		attribute.Bool("false", false),
		attribute.Int64("int", -42),
		attribute.Int64("zero", 0),
		attribute.Int64("max", math.MaxInt64),
		attribute.Float64("float", 3.25),
		attribute.Float64("float zero", 0),
		attribute.Float64("negative zero", math.Copysign(0, -1)),
		attribute.Float64("nan", math.NaN()),
		attribute.Float64("inf", math.Inf(-1)),
		attribute.BoolSlice("bools", []bool{true, false}),
		attribute.Int64Slice("ints", []int64{1, 0, -1}),
		attribute.Float64Slice("floats", []float64{1.5, 0}),
		attribute.StringSlice("strings", []string{"a", ""}),
		attribute.StringSlice("no strings", []string{}),
		attribute.ByteSlice("bytes", []byte{0, 1, 2, 255}),
		attribute.ByteSlice("no bytes", nil),
		attribute.Slice("slice", attribute.IntValue(7), attribute.StringValue("s"), attribute.Value{},
			attribute.SliceValue(attribute.BoolValue(true)), attribute.MapValue(attribute.Int("in", 1))),
		attribute.Slice("empty slice"),
		attribute.Map("map", attribute.String("b", "x"), attribute.Float64("a", 1),
			attribute.Map("nested", attribute.ByteSlice("raw", []byte("r"))), attribute.KeyValue{Key: "nothing"}),
		attribute.Map("empty map"),
		{Key: "empty value"},
		{Key: "", Value: attribute.StringValue("no key")},
	}
}

func spanContext(tid, sid byte, flags trace.TraceFlags, state string, remote bool) trace.SpanContext {
	ts, err := trace.ParseTraceState(state)
	if err != nil {
		panic(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{tid, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, SpanID: trace.SpanID{sid, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: flags, TraceState: ts, Remote: remote,
	})
}

// spanFixtures are spans of two resources (and one without), several
// scopes (and the zero one), every kind and status, events, links,
// parents remote, local and none, dropped counts and odd times.
func spanFixtures(t *testing.T) []sdktrace.ReadOnlySpan {
	res := resource.NewWithAttributes("https://example.com/res-schema", attribute.String("service.name", "svc"), attribute.Int("n", 1))
	other := resource.NewSchemaless(attribute.Bool("other", true), attribute.StringSlice("list", []string{"a"}))
	lib := instrumentation.Scope{Name: "lib", Version: "v1.2.3", SchemaURL: "https://example.com/scope-schema",
		Attributes: attribute.NewSet(attribute.String("scope.attr", "x"))}
	start := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	stubs := []tracetest.SpanStub{
		{
			Name:        "all of it",
			SpanContext: spanContext(1, 1, trace.FlagsSampled, "k1=v1,k2=v2", false),
			Parent:      spanContext(1, 9, trace.FlagsSampled, "", true),
			SpanKind:    trace.SpanKindServer,
			StartTime:   start, EndTime: start.Add(1500 * time.Millisecond),
			Attributes: everyAttribute(),
			Events: []sdktrace.Event{
				{Name: "ev", Time: start.Add(time.Millisecond), Attributes: []attribute.KeyValue{attribute.Int("i", 1)}, DroppedAttributeCount: 3},
				{Name: "", Time: time.Time{}},
				{Name: "before 1970", Time: time.Unix(-5, 0)},
			},
			Links: []sdktrace.Link{
				{SpanContext: spanContext(7, 7, trace.FlagsSampled, "lk=lv", true), Attributes: []attribute.KeyValue{attribute.String("l", "v")}, DroppedAttributeCount: 2},
				{SpanContext: spanContext(8, 8, 0, "", false)},
				{},
			},
			Status:            sdktrace.Status{Code: codes.Error, Description: "it broke"},
			DroppedAttributes: 1 << 33, DroppedEvents: 5, DroppedLinks: 6, ChildSpanCount: 2,
			Resource: res, InstrumentationScope: lib,
		},
		{Name: "local parent", SpanContext: spanContext(2, 2, 0, "", false), Parent: spanContext(2, 3, 0, "", false),
			SpanKind: trace.SpanKindClient, Status: sdktrace.Status{Code: codes.Ok}, StartTime: start, EndTime: start,
			Resource: res, InstrumentationScope: instrumentation.Scope{Name: "second"}},
		{Name: "producer", SpanContext: spanContext(3, 3, 0x05, "", false), SpanKind: trace.SpanKindProducer,
			Resource: other, InstrumentationScope: lib},
		{Name: "consumer", SpanContext: spanContext(4, 4, 0, "", false), SpanKind: trace.SpanKindConsumer,
			Resource: res, InstrumentationScope: lib},
		{Name: "internal", SpanKind: trace.SpanKindInternal, Resource: other},
		{Name: "unspecified kind", SpanKind: trace.SpanKind(0), DroppedAttributes: -1, Resource: other},
		{Name: "no resource"},
	}
	var spans []sdktrace.ReadOnlySpan
	for _, s := range stubs {
		spans = append(spans, s.Snapshot())
	}

	// And spans as the SDK makes them.
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(res))
	ctx, parent := tp.Tracer("sdk", trace.WithInstrumentationVersion("v9")).Start(context.Background(), "sdk parent",
		trace.WithAttributes(attribute.String("a", "b")))
	_, child := tp.Tracer("sdk").Start(ctx, "sdk child", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(trace.Link{SpanContext: spanContext(5, 5, 1, "", true)}))
	child.AddEvent("event", trace.WithAttributes(attribute.Int("x", 1)))
	child.RecordError(errors.New("boom"))
	child.SetStatus(codes.Error, "failed")
	child.End()
	parent.End()
	require.NoError(t, tp.Shutdown(context.Background()))
	for _, s := range rec.Ended() {
		spans = append(spans, s)
	}
	return append(spans, nil)
}

// traceRequest is the ExportTraceServiceRequest in body, its resources
// in a stable order: the official exporter's come from a map.
func traceRequest(t *testing.T, body []byte) *coltracepb.ExportTraceServiceRequest {
	t.Helper()
	var req coltracepb.ExportTraceServiceRequest
	require.NoError(t, proto.Unmarshal(body, &req))
	key := func(rs *tracepb.ResourceSpans) []byte {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rs.Resource)
		require.NoError(t, err)
		return b
	}
	slices.SortFunc(req.ResourceSpans, func(a, b *tracepb.ResourceSpans) int { return bytes.Compare(key(a), key(b)) })
	return &req
}

// requireSameTraces: the two requests, the official exporter's then
// ours, carry the same ExportTraceServiceRequest.
func requireSameTraces(t *testing.T, reqs []request) {
	t.Helper()
	require.Len(t, reqs, 2)
	want, got := traceRequest(t, reqs[0].body), traceRequest(t, reqs[1].body)
	if !proto.Equal(want, got) {
		t.Fatalf("requests differ:\nofficial %v\nours     %v", want, got)
	}
}

// exportBoth exports spans with the official exporter, then with ours,
// both configured by the environment as it is, and returns what each
// exporter's ExportSpans returned.
func exportBoth(t *testing.T, spans []sdktrace.ReadOnlySpan) (official, ours error) {
	t.Helper()
	ctx := context.Background()
	off, offErr := otlptracehttp.New(ctx)
	exp, expErr := NewTraceExporter(ctx)
	require.Equal(t, offErr != nil, expErr != nil, "construction: official %v, ours %v", offErr, expErr)
	if offErr != nil {
		return offErr, expErr
	}
	defer off.Shutdown(ctx)
	defer exp.Shutdown(ctx)
	return off.ExportSpans(ctx, spans), exp.ExportSpans(ctx, spans)
}

// TestTraceEncodingMatchesOfficial: the request body our exporter sends
// decodes to what the official one sends, for spans with every field.
func TestTraceEncodingMatchesOfficial(t *testing.T) {
	rec := newTestRecorder(t)
	spans := spanFixtures(t)
	official, ours := exportBoth(t, spans)
	require.NoError(t, official)
	require.NoError(t, ours)
	reqs := rec.take()
	requireSameTraces(t, reqs)
	require.Len(t, traceRequest(t, reqs[0].body).ResourceSpans, 3)
	for _, r := range reqs {
		assert.Equal(t, "POST", r.method)
		assert.Equal(t, "/v1/traces", r.uri)
		assert.Equal(t, "application/x-protobuf", r.header.Get("Content-Type"))
	}
	assert.Equal(t, userAgent, reqs[1].header.Get("User-Agent"))
}

// TestTraceNothingToSend: no spans, no request.
func TestTraceNothingToSend(t *testing.T) {
	rec := newTestRecorder(t)
	official, ours := exportBoth(t, []sdktrace.ReadOnlySpan{nil})
	require.NoError(t, official)
	require.NoError(t, ours)
	assert.Empty(t, rec.take())
}

func TestTraceShutdown(t *testing.T) {
	rec := newTestRecorder(t)
	span := tracetest.SpanStub{Name: "s"}.Snapshot()

	t.Run("export after", func(t *testing.T) {
		exp, err := NewTraceExporter(t.Context())
		require.NoError(t, err)
		require.NoError(t, exp.Shutdown(t.Context()))
		assert.ErrorIs(t, exp.ExportSpans(t.Context(), []sdktrace.ReadOnlySpan{span}), errShutdown)
		assert.NoError(t, exp.Shutdown(t.Context()), "again")
		assert.Empty(t, rec.take())
	})
	t.Run("ends an export under way", func(t *testing.T) {
		arrived := make(chan struct{})
		rec.answer(func(w http.ResponseWriter, r *http.Request, _ int) {
			close(arrived)
			<-r.Context().Done()
		})
		exp, err := NewTraceExporter(t.Context())
		require.NoError(t, err)
		done := make(chan error)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		go func() { done <- exp.ExportSpans(ctx, []sdktrace.ReadOnlySpan{span}) }()
		<-arrived
		require.NoError(t, exp.Shutdown(t.Context()))
		select {
		case err := <-done:
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(5 * time.Second):
			t.Fatal("the export outlived Shutdown")
		}
	})
	t.Run("context done", func(t *testing.T) {
		exp, err := NewTraceExporter(t.Context())
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		assert.ErrorIs(t, exp.Shutdown(ctx), context.Canceled)
		_, err = NewTraceExporter(ctx)
		assert.ErrorIs(t, err, context.Canceled)
	})
}
