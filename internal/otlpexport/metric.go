package otlpexport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// metricExporter sends metrics to the endpoint the environment names.
type metricExporter struct {
	temporality sdkmetric.TemporalitySelector
	aggregation sdkmetric.AggregationSelector

	mu     sync.Mutex // held by an export: Shutdown waits for it
	client *client    // nil once shut down
}

// NewMetricExporter is a metric exporter over OTLP/HTTP with binary
// protobuf, configured from the environment as otlpmetrichttp.New(ctx)
// is. ctx only bounds the construction, which fails once ctx is done.
func NewMetricExporter(ctx context.Context) (sdkmetric.Exporter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := newClient(readConfig("METRICS", "/v1/metrics"), "metric data points")
	if err != nil {
		return nil, err
	}
	e := &metricExporter{
		temporality: sdkmetric.DefaultTemporalitySelector,
		aggregation: sdkmetric.DefaultAggregationSelector,
		client:      c,
	}
	if name, v := env("METRICS_TEMPORALITY_PREFERENCE"); v != "" {
		switch strings.ToLower(v) {
		case "cumulative":
			e.temporality = sdkmetric.CumulativeTemporalitySelector
		case "delta":
			e.temporality = sdkmetric.DeltaTemporalitySelector
		case "lowmemory":
			e.temporality = sdkmetric.LowMemoryTemporalitySelector
		default:
			ignored(name, v, errors.New("not cumulative, delta or lowmemory"))
		}
	}
	if name, v := env("METRICS_DEFAULT_HISTOGRAM_AGGREGATION"); v != "" {
		switch strings.ToLower(v) {
		case "explicit_bucket_histogram":
		case "base2_exponential_bucket_histogram":
			e.aggregation = base2Histograms
		default:
			ignored(name, v, errors.New("not explicit_bucket_histogram or base2_exponential_bucket_histogram"))
		}
	}
	return e, nil
}

// base2Histograms aggregates histograms into exponential buckets, with
// the official exporter's (and the specification's) default limits.
func base2Histograms(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	if k == sdkmetric.InstrumentKindHistogram {
		return sdkmetric.AggregationBase2ExponentialHistogram{MaxSize: 160, MaxScale: 20}
	}
	return sdkmetric.DefaultAggregationSelector(k)
}

func (e *metricExporter) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	return e.temporality(k)
}

func (e *metricExporter) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return e.aggregation(k)
}

// Export sends rm in one request. A metric that cannot be encoded (an
// unknown aggregation or temporality) is left out and reported in the
// error; the rest is sent.
func (e *metricExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	body, encErr := encodeMetrics(rm)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.client == nil {
		return shutdownErr(ctx)
	}
	if err := e.client.upload(ctx, body); err != nil {
		return errors.Join(fmt.Errorf("failed to upload metrics: %w", err), encErr)
	}
	return encErr
}

// ForceFlush has nothing to flush: the exporter holds no data.
func (e *metricExporter) ForceFlush(ctx context.Context) error {
	return ctx.Err()
}

// Shutdown ends the exporter once an export under way is done; again, it
// is an error.
func (e *metricExporter) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.client == nil {
		return shutdownErr(ctx)
	}
	e.client.close()
	e.client = nil
	return ctx.Err()
}

func shutdownErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return errShutdown
}

// encodeMetrics is the ExportMetricsServiceRequest for rm.
func encodeMetrics(rm *metricdata.ResourceMetrics) ([]byte, error) {
	var e encoder
	var errs []error
	rmm := e.begin(1) // ResourceMetrics
	e.resource(1, rm.Resource)
	for _, sm := range rm.ScopeMetrics {
		smm := e.begin(2) // ScopeMetrics
		e.scope(1, sm.Scope)
		for _, m := range sm.Metrics {
			if err := e.metric(2, m); err != nil {
				errs = append(errs, fmt.Errorf("metric %q left out: %w", m.Name, err))
			}
		}
		e.stringField(3, sm.Scope.SchemaURL)
		e.end(smm)
	}
	e.stringField(3, rm.Resource.SchemaURL())
	e.end(rmm)
	return e.b, errors.Join(errs...)
}

// metric writes the Metric field num, or nothing and an error when its
// data cannot be sent.
func (e *encoder) metric(num int, m metricdata.Metrics) error {
	start := len(e.b)
	mm := e.begin(num)
	e.stringField(1, m.Name)
	e.stringField(2, m.Description)
	e.stringField(3, m.Unit)
	var err error
	switch d := m.Data.(type) {
	case metricdata.Gauge[int64]:
		gauge(e, d)
	case metricdata.Gauge[float64]:
		gauge(e, d)
	case metricdata.Sum[int64]:
		err = sum(e, d)
	case metricdata.Sum[float64]:
		err = sum(e, d)
	case metricdata.Histogram[int64]:
		err = histogram(e, d)
	case metricdata.Histogram[float64]:
		err = histogram(e, d)
	case metricdata.ExponentialHistogram[int64]:
		err = expHistogram(e, d)
	case metricdata.ExponentialHistogram[float64]:
		err = expHistogram(e, d)
	case metricdata.Summary:
		summary(e, d)
	default:
		err = fmt.Errorf("unknown aggregation %T", d)
	}
	if err != nil {
		e.b = e.b[:start]
		return err
	}
	e.end(mm)
	return nil
}

// temporality is the AggregationTemporality enum's value.
func temporality(t metricdata.Temporality) (uint64, error) {
	switch t {
	case metricdata.DeltaTemporality:
		return 1, nil
	case metricdata.CumulativeTemporality:
		return 2, nil
	}
	return 0, fmt.Errorf("unknown temporality %s", t)
}

func gauge[N int64 | float64](e *encoder, g metricdata.Gauge[N]) {
	m := e.begin(5)
	numberPoints(e, g.DataPoints)
	e.end(m)
}

func sum[N int64 | float64](e *encoder, s metricdata.Sum[N]) error {
	t, err := temporality(s.Temporality)
	if err != nil {
		return err
	}
	m := e.begin(7)
	numberPoints(e, s.DataPoints)
	e.varintField(2, t)
	e.boolField(3, s.IsMonotonic)
	e.end(m)
	return nil
}

func numberPoints[N int64 | float64](e *encoder, dps []metricdata.DataPoint[N]) {
	for _, dp := range dps {
		m := e.begin(1)
		e.attributeSet(7, &dp.Attributes)
		e.fixed64Field(2, unixNano(dp.StartTime))
		e.fixed64Field(3, unixNano(dp.Time))
		number(e, 4, 6, dp.Value)
		exemplars(e, 5, dp.Exemplars)
		e.end(m)
	}
}

// number writes v in its oneof: as the double field or the int (sfixed64)
// one.
func number[N int64 | float64](e *encoder, doubleNum, intNum int, v N) {
	switch v := any(v).(type) {
	case float64:
		e.double(doubleNum, v)
	case int64:
		e.tag(intNum, wireFixed64)
		e.le64(uint64(v))
	}
}

func exemplars[N int64 | float64](e *encoder, num int, xs []metricdata.Exemplar[N]) {
	for _, x := range xs {
		m := e.begin(num)
		e.keyValues(7, x.FilteredAttributes)
		e.fixed64Field(2, unixNano(x.Time))
		number(e, 3, 6, x.Value)
		e.bytesField(4, x.SpanID)
		e.bytesField(5, x.TraceID)
		e.end(m)
	}
}

// extrema writes the optional min and max fields when they are set.
func extrema[N int64 | float64](e *encoder, minNum int, lo, hi metricdata.Extrema[N]) {
	if v, ok := lo.Value(); ok {
		e.double(minNum, float64(v))
	}
	if v, ok := hi.Value(); ok {
		e.double(minNum+1, float64(v))
	}
}

func histogram[N int64 | float64](e *encoder, h metricdata.Histogram[N]) error {
	t, err := temporality(h.Temporality)
	if err != nil {
		return err
	}
	m := e.begin(9)
	for _, dp := range h.DataPoints {
		p := e.begin(1)
		e.attributeSet(9, &dp.Attributes)
		e.fixed64Field(2, unixNano(dp.StartTime))
		e.fixed64Field(3, unixNano(dp.Time))
		e.fixed64Field(4, dp.Count)
		e.double(5, float64(dp.Sum))
		e.packedFixed64(6, dp.BucketCounts)
		e.packedDouble(7, dp.Bounds)
		exemplars(e, 8, dp.Exemplars)
		extrema(e, 11, dp.Min, dp.Max)
		e.end(p)
	}
	e.varintField(2, t)
	e.end(m)
	return nil
}

func expHistogram[N int64 | float64](e *encoder, h metricdata.ExponentialHistogram[N]) error {
	t, err := temporality(h.Temporality)
	if err != nil {
		return err
	}
	m := e.begin(10)
	for _, dp := range h.DataPoints {
		p := e.begin(1)
		e.attributeSet(1, &dp.Attributes)
		e.fixed64Field(2, unixNano(dp.StartTime))
		e.fixed64Field(3, unixNano(dp.Time))
		e.fixed64Field(4, dp.Count)
		e.double(5, float64(dp.Sum))
		e.zigzagField(6, dp.Scale)
		e.fixed64Field(7, dp.ZeroCount)
		e.buckets(8, dp.PositiveBucket)
		e.buckets(9, dp.NegativeBucket)
		exemplars(e, 11, dp.Exemplars)
		extrema(e, 12, dp.Min, dp.Max)
		e.doubleField(14, dp.ZeroThreshold)
		e.end(p)
	}
	e.varintField(2, t)
	e.end(m)
	return nil
}

func (e *encoder) buckets(num int, b metricdata.ExponentialBucket) {
	m := e.begin(num)
	e.zigzagField(1, b.Offset)
	e.packedVarint(2, b.Counts)
	e.end(m)
}

func summary(e *encoder, s metricdata.Summary) {
	m := e.begin(11)
	for _, dp := range s.DataPoints {
		p := e.begin(1)
		e.attributeSet(7, &dp.Attributes)
		e.fixed64Field(2, unixNano(dp.StartTime))
		e.fixed64Field(3, unixNano(dp.Time))
		e.fixed64Field(4, dp.Count)
		e.doubleField(5, dp.Sum)
		for _, q := range dp.QuantileValues {
			qm := e.begin(6)
			e.doubleField(1, q.Quantile)
			e.doubleField(2, q.Value)
			e.end(qm)
		}
		e.end(p)
	}
	e.end(m)
}
