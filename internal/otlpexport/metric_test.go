package otlpexport

import (
	"context"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"
)

var (
	t0 = time.Date(2024, 5, 6, 7, 8, 9, 1, time.UTC)
	t1 = t0.Add(time.Minute)
)

func attrs(kvs ...attribute.KeyValue) attribute.Set { return attribute.NewSet(kvs...) }

func intExemplars() []metricdata.Exemplar[int64] {
	return []metricdata.Exemplar[int64]{
		{FilteredAttributes: everyAttribute()[:10], Time: t1, Value: -7,
			SpanID: []byte{1, 2, 3, 4, 5, 6, 7, 8}, TraceID: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
		{Value: 0},
	}
}

func floatExemplars() []metricdata.Exemplar[float64] {
	return []metricdata.Exemplar[float64]{
		{FilteredAttributes: []attribute.KeyValue{attribute.Bool("b", true)}, Time: t0, Value: 2.5, SpanID: []byte{9}},
		{Value: 0},
	}
}

// metricFixture has every aggregation, int and float, both
// temporalities, exemplars, extrema set and not, zero values, negative
// scales and offsets, and a histogram long enough for 3-byte lengths.
func metricFixture() *metricdata.ResourceMetrics {
	many := make([]uint64, 3000)
	bounds := make([]float64, 2999)
	for i := range many {
		many[i] = uint64(i) * 1000
	}
	for i := range bounds {
		bounds[i] = float64(i) / 3
	}
	return &metricdata.ResourceMetrics{
		Resource: resource.NewWithAttributes("https://example.com/res-schema", attribute.String("service.name", "svc"),
			attribute.Int64Slice("ints", []int64{1, 2})),
		ScopeMetrics: []metricdata.ScopeMetrics{
			{
				Scope: instrumentation.Scope{Name: "lib", Version: "v1", SchemaURL: "https://example.com/scope-schema",
					Attributes: attrs(attribute.String("scope.attr", "x"))},
				Metrics: []metricdata.Metrics{
					{Name: "gauge.int", Description: "an int gauge", Unit: "By", Data: metricdata.Gauge[int64]{DataPoints: []metricdata.DataPoint[int64]{
						{Attributes: attrs(attribute.String("k", "v"), attribute.Int("n", 1)), StartTime: t0, Time: t1, Value: -3, Exemplars: intExemplars()},
						{Value: 0},
					}}},
					{Name: "gauge.float", Data: metricdata.Gauge[float64]{DataPoints: []metricdata.DataPoint[float64]{
						{Time: t1, Value: 1.5, Exemplars: floatExemplars()},
						{Value: 0},
						{Value: math.Copysign(0, -1)},
						{Value: math.NaN()},
					}}},
					{Name: "sum.int", Unit: "{call}", Data: metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
						DataPoints: []metricdata.DataPoint[int64]{{Attributes: attrs(attribute.Bool("ok", true)), StartTime: t0, Time: t1, Value: math.MaxInt64}}}},
					{Name: "sum.float", Data: metricdata.Sum[float64]{Temporality: metricdata.DeltaTemporality,
						DataPoints: []metricdata.DataPoint[float64]{{StartTime: t0, Time: t1, Value: -0.25, Exemplars: floatExemplars()}}}},
					{Name: "sum.empty", Data: metricdata.Sum[int64]{Temporality: metricdata.DeltaTemporality}},
				},
			},
			{
				Metrics: []metricdata.Metrics{
					{Name: "histogram.int", Data: metricdata.Histogram[int64]{Temporality: metricdata.DeltaTemporality,
						DataPoints: []metricdata.HistogramDataPoint[int64]{
							{Attributes: attrs(attribute.String("route", "/x")), StartTime: t0, Time: t1, Count: 6, Sum: 0,
								Bounds: []float64{0, 5, 10}, BucketCounts: []uint64{1, 0, 2, 3},
								Min: metricdata.NewExtrema[int64](-4), Max: metricdata.NewExtrema[int64](0), Exemplars: intExemplars()},
							{},
						}}},
					{Name: "histogram.float", Data: metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality,
						DataPoints: []metricdata.HistogramDataPoint[float64]{
							{Time: t1, Count: 3, Sum: 7.5, Bounds: []float64{1.5}, BucketCounts: []uint64{1, 2}, Max: metricdata.NewExtrema(6.0),
								Exemplars: floatExemplars()},
							{Count: 1 << 40, Sum: -1e300, Bounds: bounds, BucketCounts: many},
						}}},
					{Name: "exp.int", Data: metricdata.ExponentialHistogram[int64]{Temporality: metricdata.CumulativeTemporality,
						DataPoints: []metricdata.ExponentialHistogramDataPoint[int64]{
							{Attributes: attrs(attribute.Int("a", 1)), StartTime: t0, Time: t1, Count: 9, Sum: -12,
								Min: metricdata.NewExtrema[int64](-10), Max: metricdata.NewExtrema[int64](3),
								Scale: -3, ZeroCount: 2, ZeroThreshold: 0.001,
								PositiveBucket: metricdata.ExponentialBucket{Offset: -5, Counts: []uint64{1, 0, 300, 1 << 50}},
								NegativeBucket: metricdata.ExponentialBucket{Offset: 7, Counts: []uint64{4}},
								Exemplars:      intExemplars()},
							{},
						}}},
					{Name: "exp.float", Data: metricdata.ExponentialHistogram[float64]{Temporality: metricdata.DeltaTemporality,
						DataPoints: []metricdata.ExponentialHistogramDataPoint[float64]{
							{Time: t1, Count: 1, Sum: 0.5, Scale: 20, Min: metricdata.NewExtrema(0.5), Max: metricdata.NewExtrema(0.5),
								PositiveBucket: metricdata.ExponentialBucket{Offset: math.MinInt32, Counts: []uint64{1}},
								ZeroThreshold:  math.Copysign(0, -1), Exemplars: floatExemplars()},
						}}},
					{Name: "summary", Data: metricdata.Summary{DataPoints: []metricdata.SummaryDataPoint{
						{Attributes: attrs(attribute.String("q", "y")), StartTime: t0, Time: t1, Count: 10, Sum: 55.5,
							QuantileValues: []metricdata.QuantileValue{{Quantile: 0, Value: 1}, {Quantile: 0.5, Value: 0}, {Quantile: 1, Value: 10}}},
						{},
					}}},
				},
			},
		},
	}
}

// exportMetricsBoth exports rm with the official exporter, then with
// ours, both configured by the environment as it is.
func exportMetricsBoth(t *testing.T, rm *metricdata.ResourceMetrics) (official, ours error) {
	t.Helper()
	ctx := context.Background()
	off, offErr := otlpmetrichttp.New(ctx)
	exp, expErr := NewMetricExporter(ctx)
	require.Equal(t, offErr != nil, expErr != nil, "construction: official %v, ours %v", offErr, expErr)
	if offErr != nil {
		return offErr, expErr
	}
	defer off.Shutdown(ctx)
	defer exp.Shutdown(ctx)
	return off.Export(ctx, rm), exp.Export(ctx, rm)
}

func requireSameMetrics(t *testing.T, reqs []request) {
	t.Helper()
	require.Len(t, reqs, 2)
	var want, got colmetricpb.ExportMetricsServiceRequest
	require.NoError(t, proto.Unmarshal(reqs[0].body, &want))
	require.NoError(t, proto.Unmarshal(reqs[1].body, &got))
	if !proto.Equal(&want, &got) {
		t.Fatalf("requests differ:\nofficial %v\nours     %v", &want, &got)
	}
}

// TestMetricEncodingMatchesOfficial: the request body our exporter sends
// decodes to what the official one sends.
func TestMetricEncodingMatchesOfficial(t *testing.T) {
	rec := newTestRecorder(t)
	official, ours := exportMetricsBoth(t, metricFixture())
	require.NoError(t, official)
	require.NoError(t, ours)
	reqs := rec.take()
	requireSameMetrics(t, reqs)
	for _, r := range reqs {
		assert.Equal(t, "/v1/metrics", r.uri)
		assert.Equal(t, "application/x-protobuf", r.header.Get("Content-Type"))
	}
	assert.Greater(t, len(reqs[1].body), 1<<14, "a length of three bytes")

	t.Run("empty", func(t *testing.T) {
		official, ours := exportMetricsBoth(t, &metricdata.ResourceMetrics{})
		require.NoError(t, official)
		require.NoError(t, ours)
		requireSameMetrics(t, rec.take())
	})
}

// TestMetricCannotEncode: a metric of an unknown aggregation or
// temporality is left out, and said so, the rest sent; as the official
// exporter does.
func TestMetricCannotEncode(t *testing.T) {
	rec := newTestRecorder(t)
	rm := metricFixture()
	sm := &rm.ScopeMetrics[0]
	sm.Metrics = append(sm.Metrics[:1],
		metricdata.Metrics{Name: "no data"},
		metricdata.Metrics{Name: "sum.bad", Data: metricdata.Sum[int64]{DataPoints: []metricdata.DataPoint[int64]{{Value: 1}}}},
		sm.Metrics[1],
		metricdata.Metrics{Name: "histogram.bad", Data: metricdata.Histogram[float64]{Temporality: 9}},
		metricdata.Metrics{Name: "exp.bad", Data: metricdata.ExponentialHistogram[int64]{}},
	)
	official, ours := exportMetricsBoth(t, rm)
	require.Error(t, official)
	require.Error(t, ours)
	for _, name := range []string{"no data", "sum.bad", "histogram.bad", "exp.bad"} {
		assert.Contains(t, ours.Error(), name)
	}
	requireSameMetrics(t, rec.take())
}

// TestMetricPreferences: the temporality and aggregation the environment
// asks for are the official exporter's, for every instrument kind.
func TestMetricPreferences(t *testing.T) {
	newTestRecorder(t)
	kinds := []sdkmetric.InstrumentKind{
		sdkmetric.InstrumentKindCounter, sdkmetric.InstrumentKindUpDownCounter, sdkmetric.InstrumentKindHistogram,
		sdkmetric.InstrumentKindGauge, sdkmetric.InstrumentKindObservableCounter,
		sdkmetric.InstrumentKindObservableUpDownCounter, sdkmetric.InstrumentKindObservableGauge,
	}
	for _, env := range [][2]string{
		{"", ""}, {"cumulative", ""}, {"DELTA", ""}, {"lowmemory", ""}, {"bogus", ""},
		{"", "explicit_bucket_histogram"}, {"delta", "Base2_Exponential_Bucket_Histogram"}, {"", "bogus"},
	} {
		t.Run(env[0]+"/"+env[1], func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", env[0])
			t.Setenv("OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", env[1])
			reported := captureReports(t)
			off, err := otlpmetrichttp.New(t.Context())
			require.NoError(t, err)
			exp, err := NewMetricExporter(t.Context())
			require.NoError(t, err)
			for _, k := range kinds {
				assert.Equal(t, off.Temporality(k), exp.Temporality(k), "%v", k)
				assert.Equal(t, off.Aggregation(k), exp.Aggregation(k), "%v", k)
			}
			if env[0] == "bogus" || env[1] == "bogus" {
				assert.Len(t, *reported, 1)
			} else {
				assert.Empty(t, *reported)
			}
			require.NoError(t, off.Shutdown(t.Context()))
			require.NoError(t, exp.Shutdown(t.Context()))
		})
	}
}

func TestMetricShutdown(t *testing.T) {
	rec := newTestRecorder(t)
	rm := &metricdata.ResourceMetrics{}
	exp, err := NewMetricExporter(t.Context())
	require.NoError(t, err)
	require.NoError(t, exp.ForceFlush(t.Context()))
	require.NoError(t, exp.Shutdown(t.Context()))
	assert.ErrorIs(t, exp.Export(t.Context(), rm), errShutdown)
	assert.ErrorIs(t, exp.Shutdown(t.Context()), errShutdown, "again")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, exp.Export(ctx, rm), context.Canceled)
	assert.ErrorIs(t, exp.ForceFlush(ctx), context.Canceled)
	assert.Empty(t, rec.take())

	t.Run("waits for an export under way", func(t *testing.T) {
		arrived, released := make(chan struct{}), make(chan struct{})
		release := sync.OnceFunc(func() { close(released) })
		defer release() // should the test fail first
		rec.answer(func(w http.ResponseWriter, r *http.Request, _ int) {
			close(arrived)
			<-released
		})
		exp, err := NewMetricExporter(t.Context())
		require.NoError(t, err)
		done := make(chan error)
		go func() { done <- exp.Export(context.Background(), rm) }()
		<-arrived
		shut := make(chan error)
		go func() { shut <- exp.Shutdown(context.Background()) }()
		select {
		case <-shut:
			t.Fatal("Shutdown did not wait for the export")
		case <-time.After(50 * time.Millisecond):
		}
		release()
		assert.NoError(t, <-done)
		assert.NoError(t, <-shut)
	})
}
