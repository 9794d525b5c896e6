package promexport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
)

// setup is what both exporters are given: the provider's options, a
// producer of data the SDK would not make (or nil), and what to record.
type setup struct {
	opts     []sdkmetric.Option
	producer sdkmetric.Producer
	record   func(metric.MeterProvider)
}

// serve starts a provider read by the official exporter (official) or by
// ours, and a server of its /metrics.
func serve(t *testing.T, official bool, s setup) (*sdkmetric.MeterProvider, string) {
	t.Helper()
	var reader sdkmetric.Reader
	var h http.Handler
	if official {
		reg := prometheus.NewRegistry()
		opts := []otelprom.Option{otelprom.WithRegisterer(reg)}
		if s.producer != nil {
			opts = append(opts, otelprom.WithProducer(s.producer))
		}
		exp, err := otelprom.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		reader, h = exp, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	} else {
		var opts []sdkmetric.ManualReaderOption
		if s.producer != nil {
			opts = append(opts, sdkmetric.WithProducer(s.producer))
		}
		exp := New(opts...)
		reader, h = exp, exp
	}
	mp := sdkmetric.NewMeterProvider(append([]sdkmetric.Option{sdkmetric.WithReader(reader)}, s.opts...)...)
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	if s.record != nil {
		s.record(mp)
	}
	return mp, srv.URL
}

func scrape(t *testing.T, method, url string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(body)
}

func parse(page string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(page))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// recordAll records into every kind of instrument, with names, units,
// attributes, values and scopes that the translation has to get right.
func recordAll(mp metric.MeterProvider) {
	ctx := context.Background()
	a := mp.Meter("github.com/oma-sandbox/a",
		metric.WithInstrumentationVersion("v1.2.3"),
		metric.WithSchemaURL("https://opentelemetry.io/schemas/1.26.0"),
		metric.WithInstrumentationAttributes(
			attribute.String("team.name", "core"), attribute.String("team-name", "ops"),
			attribute.String("name", "left out"), attribute.Int("1-shard", 2)))
	b := mp.Meter("b")
	odd := metric.WithAttributes(
		attribute.String("http.method", "GET"),
		attribute.String("net-peer", `say "hi" \ bye`+"\nnext"),
		attribute.String("1st", "x"),
		attribute.String("a.b", "2"), attribute.String("a_b", "1"),
		attribute.String("ünïcode", "ünï"),
		attribute.String("__res.erved", ""),
		attribute.Bool("ok", true), attribute.Float64("ratio", 0.25),
		attribute.Int64Slice("ids", []int64{1, 2}))
	kv := func(v string) metric.MeasurementOption { return metric.WithAttributes(attribute.String("k", v)) }

	c := must(a.Int64Counter("http.requests", metric.WithUnit("{request}"),
		metric.WithDescription(`Requests "served" \ counted`+"\nby method")))
	c.Add(ctx, 3, odd)
	c.Add(ctx, 1<<53+1, metric.WithAttributes(attribute.String("http.method", "POST")))
	c.Add(ctx, 5)
	fc := must(a.Float64Counter("bytes.sent.total", metric.WithUnit("By")))
	fc.Add(ctx, 0.1)
	fc.Add(ctx, 1e21, kv("big"))
	must(a.Float64Counter("jobs_total", metric.WithUnit("s"))).Add(ctx, 1.5)
	must(a.Int64Counter("rate.x", metric.WithUnit("1/s"))).Add(ctx, 1000000)
	must(a.Int64Counter("energy", metric.WithUnit("J"))).Add(ctx, 0)
	for _, m := range []metric.Meter{a, b} {
		must(m.Int64Counter("shared", metric.WithDescription("in two scopes"))).Add(ctx, 1)
	}

	must(a.Int64UpDownCounter("queue-depth", metric.WithUnit("{item}"))).Add(ctx, -4, kv("q"))
	must(a.Float64UpDownCounter("fill.level", metric.WithUnit("1"))).Add(ctx, 0.5)
	must(a.Int64Gauge("cpu.utilization", metric.WithUnit("1"))).Record(ctx, 1)
	g := must(b.Float64Gauge("temperature", metric.WithUnit("Cel")))
	for v, x := range map[string]float64{
		"nan": math.NaN(), "inf": math.Inf(1), "-inf": math.Inf(-1), "-0": math.Copysign(0, -1),
		"-1": -1, "small": 1.5e-7, "big": 123456789, "frac": 2.0 / 3,
	} {
		g.Record(ctx, x, kv(v))
	}
	must(b.Float64Gauge("speed", metric.WithUnit("m/s"))).Record(ctx, 3)
	must(b.Float64Gauge("load", metric.WithUnit("%"))).Record(ctx, 99.5)
	must(b.Float64Gauge("odd.unit", metric.WithUnit("foo bar!/{x}"))).Record(ctx, 1)
	must(b.Float64Gauge("size", metric.WithUnit("By/{x}"))).Record(ctx, 2)
	must(b.Int64Gauge("renamed.me")).Record(ctx, 9)
	must(b.Int64Gauge("colon")).Record(ctx, 7)
	// The same name twice in one scope: the first description wins.
	must(b.Int64Gauge("dup.name", metric.WithDescription("first"))).Record(ctx, 1, kv("1"))
	must(b.Int64Gauge("dup_name", metric.WithDescription("second"))).Record(ctx, 2, kv("2"))

	h := must(a.Float64Histogram("rpc.duration", metric.WithUnit("s")))
	for _, v := range []float64{0.003, 0.3, 7, 20000} {
		h.Record(ctx, v, kv("x"))
	}
	h.Record(ctx, 1)
	ch := must(a.Float64Histogram("payload", metric.WithUnit("KiBy"),
		metric.WithExplicitBucketBoundaries(1, 2.5, 1e6)))
	ch.Record(ctx, 2, odd)
	ch.Record(ctx, 2e6, odd)
	ih := must(b.Int64Histogram("queue.wait", metric.WithUnit("ms"), metric.WithExplicitBucketBoundaries(0, 10)))
	ih.Record(ctx, 0)
	ih.Record(ctx, 11)
	eh := must(a.Float64Histogram("latency.exp", metric.WithUnit("us")))
	for _, v := range []float64{-2, 0, 0.5, 3, 1e9} {
		eh.Record(ctx, v, kv("e"))
	}
	must(b.Int64Histogram("size.exp", metric.WithUnit("By"))).Record(ctx, 1<<20)
}

var allOpts = []sdkmetric.Option{
	sdkmetric.WithResource(resource.NewSchemaless(
		attribute.String("service.name", "svc"),
		attribute.Int("k8s.pod-count", 3),
		attribute.String("odd key", `va"l\ue`+"\n"))),
	sdkmetric.WithView(
		sdkmetric.NewView(sdkmetric.Instrument{Name: "*.exp"},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationBase2ExponentialHistogram{MaxSize: 160, MaxScale: 20}}),
		sdkmetric.NewView(sdkmetric.Instrument{Name: "renamed.me"}, sdkmetric.Stream{Name: "9lives"}),
		sdkmetric.NewView(sdkmetric.Instrument{Name: "colon"}, sdkmetric.Stream{Name: "ns:colon.x"})),
}

// produced is data the SDK does not make but a producer may: a bucket
// bound of +Inf, an exponential histogram of scale 20 and an empty metric.
type produced struct{}

func (produced) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	return []metricdata.ScopeMetrics{{
		Scope: instrumentation.Scope{Name: "producer"},
		Metrics: []metricdata.Metrics{
			{Name: "inf.bound", Data: metricdata.Histogram[int64]{
				Temporality: metricdata.CumulativeTemporality,
				DataPoints: []metricdata.HistogramDataPoint[int64]{{
					Bounds: []float64{1, math.Inf(1)}, BucketCounts: []uint64{1, 2, 0}, Count: 3, Sum: 7,
				}},
			}},
			{Name: "fine.exp", Data: metricdata.ExponentialHistogram[int64]{
				Temporality: metricdata.CumulativeTemporality,
				DataPoints: []metricdata.ExponentialHistogramDataPoint[int64]{{
					Scale: 20, Count: 3, Sum: 4, ZeroCount: 1,
					PositiveBucket: metricdata.ExponentialBucket{Offset: 5, Counts: []uint64{1, 1}},
				}},
			}},
			{Name: "no.points", Data: metricdata.Gauge[float64]{}},
		},
	}}, nil
}

// TestMatchesOfficial scrapes the official exporter and ours, after the
// same recording into each, and requires byte-equal pages.
func TestMatchesOfficial(t *testing.T) {
	for name, s := range map[string]setup{
		"empty":          {},
		"empty resource": {opts: []sdkmetric.Option{sdkmetric.WithResource(resource.Empty())}},
		"everything":     {opts: allOpts, record: recordAll},
		"produced":       {opts: []sdkmetric.Option{sdkmetric.WithResource(resource.Empty())}, producer: produced{}},
	} {
		t.Run(name, func(t *testing.T) {
			offMP, off := serve(t, true, s)
			ourMP, our := serve(t, false, s)
			for round := range 2 {
				if round == 1 && s.record != nil { // cumulative values grow
					s.record(offMP)
					s.record(ourMP)
				}
				offRes, want := scrape(t, "GET", off)
				ourRes, got := scrape(t, "GET", our)
				if offRes.StatusCode != 200 || ourRes.StatusCode != 200 {
					t.Fatalf("status: official %s, ours %s\n%s", offRes.Status, ourRes.Status, got)
				}
				if got != want {
					t.Errorf("round %d: ours differs from the official\n--- official:\n%s\n--- ours:\n%s", round, want, got)
				}
				if ct := ourRes.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
					t.Errorf("Content-Type %q", ct)
				}
				if _, err := parse(got); err != nil {
					t.Errorf("parsing ours: %v", err)
				}
			}
		})
	}
}

// failing is a producer whose data breaks a rule of the Prometheus model.
type failing []metricdata.Metrics

func (f failing) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	return []metricdata.ScopeMetrics{{Scope: instrumentation.Scope{Name: "failing"}, Metrics: f}}, nil
}

func gaugeAt(name string, attrs ...attribute.KeyValue) metricdata.Metrics {
	return metricdata.Metrics{Name: name, Data: metricdata.Gauge[int64]{
		DataPoints: []metricdata.DataPoint[int64]{{Attributes: attribute.NewSet(attrs...), Value: 1}},
	}}
}

// TestFailsAsOfficial requires a 500, with the reason, where the official
// exporter's registry fails the scrape as well.
func TestFailsAsOfficial(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]struct {
		s    setup
		want string
	}{
		"type clash": {s: setup{record: func(mp metric.MeterProvider) {
			m := mp.Meter("m")
			must(m.Int64Counter("x")).Add(ctx, 1)
			must(m.Float64Gauge("x.total")).Record(ctx, 1)
		}}, want: "metric x_total: a gauge instrument clashes with the counter first seen"},
		"attribute named as a scope label": {s: setup{record: func(mp metric.MeterProvider) {
			must(mp.Meter("m").Int64Counter("x")).Add(ctx, 1, metric.WithAttributes(attribute.String("otel.scope.name", "y")))
		}}, want: "two labels are named otel_scope_name"},
		"reserved label": {s: setup{record: func(mp metric.MeterProvider) {
			must(mp.Meter("m").Int64Counter("x")).Add(ctx, 1, metric.WithAttributes(attribute.String("__x__", "y")))
		}}, want: "label name __x__ is reserved"},
		"scope attribute": {s: setup{record: func(mp metric.MeterProvider) {
			m := mp.Meter("m", metric.WithInstrumentationAttributes(attribute.String("__", "y")))
			must(m.Int64Counter("x")).Add(ctx, 1)
		}}, want: `scope "m": attribute key "__"`},
		"two series alike": {s: setup{record: func(mp metric.MeterProvider) {
			x := must(mp.Meter("m").Int64Counter("x"))
			x.Add(ctx, 1, metric.WithAttributes(attribute.String("a.b", "y")))
			x.Add(ctx, 1, metric.WithAttributes(attribute.String("a_b", "y")))
		}}, want: "metric x_total: two series have the labels"},
		"histogram suffix": {s: setup{record: func(mp metric.MeterProvider) {
			m := mp.Meter("m")
			must(m.Float64Histogram("h")).Record(ctx, 1)
			must(m.Int64Gauge("h.count")).Record(ctx, 1)
		}}, want: "metric h_count clashes with the histogram's own"},
		"target_info": {s: setup{record: func(mp metric.MeterProvider) {
			must(mp.Meter("m").Int64Gauge("target_info")).Record(ctx, 1)
		}}, want: `metric target_info: gauge "" clashes with gauge "Target metadata"`},
		"not UTF-8": {s: setup{record: func(mp metric.MeterProvider) {
			must(mp.Meter("m").Int64Counter("x")).Add(ctx, 1, metric.WithAttributes(attribute.String("k", "\xff")))
		}}, want: `label k: value "\xff" is not UTF-8`},
		"empty attribute key": {s: setup{producer: failing{gaugeAt("g", attribute.String("", "v"))}},
			want: "metric g: an attribute key is empty"},
		"no name left": {s: setup{producer: failing{gaugeAt("!!")}},
			want: `metric "!!": nothing of its name is left`},
		"summary": {s: setup{producer: failing{{Name: "s", Data: metricdata.Summary{
			DataPoints: []metricdata.SummaryDataPoint{{Count: 1, Sum: 1}},
		}}}}, want: `metric "s": unsupported data metricdata.Summary`},
	} {
		t.Run(name, func(t *testing.T) {
			_, off := serve(t, true, c.s)
			_, our := serve(t, false, c.s)
			offRes, offBody := scrape(t, "GET", off)
			ourRes, ourBody := scrape(t, "GET", our)
			if offRes.StatusCode != 500 {
				t.Errorf("official: %s, want 500 (test set-up?)\n%s", offRes.Status, offBody)
			}
			if ourRes.StatusCode != 500 || !strings.Contains(ourBody, c.want) {
				t.Errorf("ours: %s %q, want 500 with %q", ourRes.Status, ourBody, c.want)
			}
		})
	}
}

// TestTypeClashSticks checks that the type a name is first given keeps it
// in later scrapes: the instrument of the other type is the one refused.
func TestTypeClashSticks(t *testing.T) {
	ctx := context.Background()
	mp, url := serve(t, false, setup{})
	must(mp.Meter("a").Float64Gauge("x.total")).Record(ctx, 1)
	if res, body := scrape(t, "GET", url); res.StatusCode != 200 || !strings.Contains(body, "# TYPE x_total gauge\n") {
		t.Fatalf("%s\n%s", res.Status, body)
	}
	must(mp.Meter("b").Int64Counter("x")).Add(ctx, 1)
	for range 5 { // whichever scope the SDK gives first
		if res, body := scrape(t, "GET", url); res.StatusCode != 500 || !strings.Contains(body, "a counter instrument clashes with the gauge") {
			t.Fatalf("%s\n%s", res.Status, body)
		}
	}
}

// TestDeviations covers what ours does differently, on purpose.
func TestDeviations(t *testing.T) {
	ctx := context.Background()
	t.Run("le on a histogram", func(t *testing.T) {
		// The official exporter writes a second le label, which parsers refuse.
		mp, url := serve(t, false, setup{})
		must(mp.Meter("m").Float64Histogram("h")).Record(ctx, 1, metric.WithAttributes(attribute.String("le", "1")))
		if res, body := scrape(t, "GET", url); res.StatusCode != 500 || !strings.Contains(body, `label named "le"`) {
			t.Errorf("%s\n%s", res.Status, body)
		}
	})
	t.Run("resource", func(t *testing.T) {
		// The official exporter leaves target_info out, for good.
		_, url := serve(t, false, setup{opts: []sdkmetric.Option{
			sdkmetric.WithResource(resource.NewSchemaless(attribute.String("__x__", "v")))}})
		if res, body := scrape(t, "GET", url); res.StatusCode != 500 || !strings.Contains(body, "resource: label name __x__ is reserved") {
			t.Errorf("%s\n%s", res.Status, body)
		}
	})
	t.Run("exponential scale below -4", func(t *testing.T) {
		// Native histograms cannot have it, so the official exporter fails;
		// the text format has only the count and sum, which are right.
		mp, url := serve(t, false, setup{opts: []sdkmetric.Option{sdkmetric.WithView(sdkmetric.NewView(
			sdkmetric.Instrument{Name: "h"},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationBase2ExponentialHistogram{MaxSize: 2, MaxScale: 20}}))}})
		h := must(mp.Meter("m").Float64Histogram("h"))
		h.Record(ctx, 1e-300)
		h.Record(ctx, 1e300)
		res, body := scrape(t, "GET", url)
		if res.StatusCode != 200 || !strings.Contains(body, `h_bucket{otel_scope_name="m",otel_scope_schema_url="",otel_scope_version="",le="+Inf"} 2`+"\n") {
			t.Errorf("%s\n%s", res.Status, body)
		}
	})
}

func TestCollectionErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("callback", func(t *testing.T) {
		// The official exporter logs it and serves what it has.
		mp, url := serve(t, false, setup{})
		m := mp.Meter("m")
		g := must(m.Int64ObservableGauge("g"))
		must(m.RegisterCallback(func(context.Context, metric.Observer) error { return errors.New("no reading") }, g))
		if res, body := scrape(t, "GET", url); res.StatusCode != 500 || body != "collecting metrics: no reading\n" {
			t.Errorf("%s %q", res.Status, body)
		}
	})
	t.Run("shut down", func(t *testing.T) {
		// The official exporter serves an empty page.
		mp, url := serve(t, false, setup{})
		if err := mp.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if res, body := scrape(t, "GET", url); res.StatusCode != 500 || !strings.Contains(body, "reader is shutdown") {
			t.Errorf("%s %q", res.Status, body)
		}
	})
	t.Run("not registered", func(t *testing.T) {
		rec := httptest.NewRecorder()
		New().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 500 || !strings.Contains(rec.Body.String(), "reader is not registered") {
			t.Errorf("%d %q", rec.Code, rec.Body)
		}
	})
}

func TestMethods(t *testing.T) {
	_, url := serve(t, false, setup{})
	if res, body := scrape(t, "HEAD", url); res.StatusCode != 200 || body != "" {
		t.Errorf("HEAD: %s %q", res.Status, body)
	}
	for _, method := range []string{"POST", "PUT", "DELETE"} {
		res, _ := scrape(t, method, url)
		if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %s, Allow %q", method, res.Status, res.Header.Get("Allow"))
		}
	}
}

// TestConcurrentScrapes scrapes while recording, each scrape with a new
// name to register; run it with -race.
func TestConcurrentScrapes(t *testing.T) {
	ctx := context.Background()
	exp := New()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer func() { _ = mp.Shutdown(ctx) }()
	m := mp.Meter("m")
	c := must(m.Int64Counter("c"))
	h := must(m.Float64Histogram("h"))
	stop := make(chan struct{})
	var recorders sync.WaitGroup
	for i := range 4 {
		recorders.Go(func() {
			attrs := metric.WithAttributes(attribute.Int("worker", i))
			for {
				select {
				case <-stop:
					return
				default:
					c.Add(ctx, 1, attrs)
					h.Record(ctx, float64(i), attrs)
				}
			}
		})
	}
	var scrapers sync.WaitGroup
	for i := range 4 {
		scrapers.Go(func() {
			for n := range 20 {
				must(m.Int64Gauge(fmt.Sprintf("g%d.%d", i, n))).Record(ctx, 1)
				rec := httptest.NewRecorder()
				exp.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
				if rec.Code != 200 {
					t.Errorf("%d\n%s", rec.Code, rec.Body)
					return
				}
				if _, err := parse(rec.Body.String()); err != nil {
					t.Errorf("parsing: %v\n%s", err, rec.Body)
					return
				}
			}
		})
	}
	scrapers.Wait()
	close(stop)
	recorders.Wait()
}
