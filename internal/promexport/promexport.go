// Package promexport serves a meter provider's metrics in the Prometheus
// text format (0.0.4) as go.opentelemetry.io/otel/exporters/prometheus
// (v0.69.0, default options) and promhttp serve them, without linking the
// Prometheus client: its packages' initialisation costs every start of the
// CLI, though only `mcp --http` serves /metrics.
package promexport

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Exporter is a metric reader to give a meter provider and the handler that
// collects from it on each request.
type Exporter struct {
	sdkmetric.Reader

	mu sync.Mutex
	// seen holds the type and help first given to each name: like the
	// official exporter, every later scrape keeps them, so that which
	// instrument wins a clash does not change with the SDK's scope order.
	seen map[string]meta
}

type meta struct{ typ, help string }

// New returns an Exporter over a ManualReader made with opts (such as a
// producer); the Prometheus model needs their temporality left cumulative.
func New(opts ...sdkmetric.ManualReaderOption) *Exporter {
	return &Exporter{Reader: sdkmetric.NewManualReader(opts...), seen: map[string]meta{}}
}

const contentType = "text/plain; version=0.0.4; charset=utf-8"

// ServeHTTP answers GET (and HEAD) with the metrics collected now; if
// anything fails it answers 500 with the reason instead of a partial page.
func (e *Exporter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var rm metricdata.ResourceMetrics
	err := e.Collect(r.Context(), &rm)
	var fams []*family
	if err == nil {
		fams, err = e.families(&rm)
	}
	if err != nil {
		http.Error(w, "collecting metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	writeText(&buf, fams)
	w.Header().Set("Content-Type", contentType)
	_, _ = w.Write(buf.Bytes())
}

type family struct {
	name, typ, help string
	samples         []sample
}

// sample is one series of a family: a value, or a histogram.
type sample struct {
	attrs   attribute.Set // before they become labels
	labels  []label       // sorted by name
	value   float64
	buckets []bucket // cumulative; the +Inf bucket is the count
	sum     float64
	count   uint64
}

type bucket struct {
	bound float64
	count uint64
}

type label struct{ name, value string }

// families translates what was collected into families sorted by name,
// their samples sorted by label values as promhttp's registry sorts them.
// Where the official exporter and registry fail a scrape, so does it.
func (e *Exporter) families(rm *metricdata.ResourceMetrics) ([]*family, error) {
	res, err := attrLabels(*rm.Resource.Set(), "", nil)
	if err != nil {
		return nil, fmt.Errorf("resource: %w", err)
	}
	target, err := newSample(sample{value: 1}, res, nil, false)
	if err != nil {
		return nil, fmt.Errorf("resource: %w", err)
	}
	fams := map[string]*family{
		"target_info": {name: "target_info", typ: "gauge", help: "Target metadata", samples: []sample{target}},
	}
	for _, sm := range rm.ScopeMetrics {
		scope, err := attrLabels(sm.Scope.Attributes, "otel_scope_", isScopeLabel)
		if err != nil {
			return nil, fmt.Errorf("scope %q: %w", sm.Scope.Name, err)
		}
		scope = append(scope,
			label{"otel_scope_name", sm.Scope.Name},
			label{"otel_scope_version", sm.Scope.Version},
			label{"otel_scope_schema_url", sm.Scope.SchemaURL})
		for _, m := range sm.Metrics {
			k, samples, err := convert(m.Data)
			if err != nil {
				return nil, fmt.Errorf("metric %q: %w", m.Name, err)
			}
			name, err := metricName(m.Name, m.Unit, k)
			if err != nil {
				return nil, err
			}
			help, err := e.register(name, k.typ(), m.Description)
			if err != nil {
				return nil, err
			}
			if len(samples) == 0 {
				continue
			}
			f := fams[name]
			if f == nil {
				f = &family{name: name, typ: k.typ(), help: help}
				fams[name] = f
			} else if f.typ != k.typ() || f.help != help {
				return nil, fmt.Errorf("metric %s: %s %q clashes with %s %q", name, k.typ(), help, f.typ, f.help)
			}
			for _, s := range samples {
				attrs, err := attrLabels(s.attrs, "", nil)
				if err == nil {
					s, err = newSample(s, attrs, scope, k == histogram)
				}
				if err != nil {
					return nil, fmt.Errorf("metric %s: %w", name, err)
				}
				f.samples = append(f.samples, s)
			}
		}
	}
	list := make([]*family, 0, len(fams))
	for _, f := range fams {
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if _, ok := fams[f.name+suffix]; ok && f.typ == "histogram" {
				return nil, fmt.Errorf("metric %s%s clashes with the histogram's own", f.name, suffix)
			}
		}
		slices.SortFunc(f.samples, compareSamples)
		for i := 1; i < len(f.samples); i++ {
			if compareSamples(f.samples[i-1], f.samples[i]) == 0 {
				return nil, fmt.Errorf("metric %s: two series have the labels %v", f.name, f.samples[i].labels)
			}
		}
		list = append(list, f)
	}
	slices.SortFunc(list, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	return list, nil
}

// register returns the help to write for name, the first it was given; a
// name first given to another type is an error, as the official exporter
// drops the instrument with an invalid metric that fails the scrape.
func (e *Exporter) register(name, typ, help string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	first, ok := e.seen[name]
	if !ok {
		e.seen[name] = meta{typ, help}
		return help, nil
	}
	if first.typ != typ {
		return "", fmt.Errorf("metric %s: a %s instrument clashes with the %s first seen", name, typ, first.typ)
	}
	return first.help, nil
}

// convert returns the kind and the samples (without labels) of data.
func convert(data metricdata.Aggregation) (kind, []sample, error) {
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		return sumKind(d.IsMonotonic), values(d.DataPoints), nil
	case metricdata.Sum[float64]:
		return sumKind(d.IsMonotonic), values(d.DataPoints), nil
	case metricdata.Gauge[int64]:
		return gauge, values(d.DataPoints), nil
	case metricdata.Gauge[float64]:
		return gauge, values(d.DataPoints), nil
	case metricdata.Histogram[int64]:
		return histogram, histograms(d.DataPoints), nil
	case metricdata.Histogram[float64]:
		return histogram, histograms(d.DataPoints), nil
	case metricdata.ExponentialHistogram[int64]:
		return histogram, exponentialHistograms(d.DataPoints), nil
	case metricdata.ExponentialHistogram[float64]:
		return histogram, exponentialHistograms(d.DataPoints), nil
	}
	return 0, nil, fmt.Errorf("unsupported data %T", data)
}

func sumKind(monotonic bool) kind {
	if monotonic {
		return counter
	}
	return upDown
}

// values converts sums' and gauges' points; Prometheus values are floats,
// so an int64 beyond 2^53 loses precision as it does in the official one.
func values[N int64 | float64](dps []metricdata.DataPoint[N]) []sample {
	s := make([]sample, len(dps))
	for i, dp := range dps {
		s[i] = sample{attrs: dp.Attributes, value: float64(dp.Value)}
	}
	return s
}

func histograms[N int64 | float64](dps []metricdata.HistogramDataPoint[N]) []sample {
	s := make([]sample, len(dps))
	for i, dp := range dps {
		b := make([]bucket, len(dp.Bounds))
		var n uint64
		for j, bound := range dp.Bounds {
			n += dp.BucketCounts[j]
			b[j] = bucket{bound, n}
		}
		s[i] = sample{attrs: dp.Attributes, buckets: b, sum: float64(dp.Sum), count: dp.Count}
	}
	return s
}

// exponentialHistograms keeps only the sum and count: the official exporter
// makes native histograms of them, which the text format writes as a
// histogram with just the +Inf bucket.
func exponentialHistograms[N int64 | float64](dps []metricdata.ExponentialHistogramDataPoint[N]) []sample {
	s := make([]sample, len(dps))
	for i, dp := range dps {
		s[i] = sample{attrs: dp.Attributes, sum: float64(dp.Sum), count: dp.Count}
	}
	return s
}

// attrLabels translates attributes to labels named prefix+key, leaving out
// the keys that skip reports. Keys that translate alike share a label, its
// value their values sorted and joined by ";".
func attrLabels(set attribute.Set, prefix string, skip func(string) bool) ([]label, error) {
	vals := map[string][]string{}
	for _, kv := range set.ToSlice() {
		name, err := labelName(string(kv.Key))
		if err != nil {
			return nil, err
		}
		if skip == nil || !skip(name) {
			vals[name] = append(vals[name], kv.Value.String())
		}
	}
	labels := make([]label, 0, len(vals))
	for name, v := range vals {
		slices.Sort(v)
		labels = append(labels, label{prefix + name, strings.Join(v, ";")})
	}
	return labels, nil
}

// isScopeLabel reports whether a scope attribute would take the name of a
// label the scope itself sets; the official exporter leaves those out.
func isScopeLabel(name string) bool {
	return name == "name" || name == "version" || name == "schema_url"
}

// newSample gives s the attribute and scope labels, sorted, and checks
// them as the registry (and, for "le", the text format) needs.
func newSample(s sample, attrs, scope []label, isHistogram bool) (sample, error) {
	s.labels = slices.Concat(attrs, scope)
	slices.SortFunc(s.labels, func(a, b label) int { return strings.Compare(a.name, b.name) })
	for i, l := range s.labels {
		switch {
		case i > 0 && l.name == s.labels[i-1].name:
			return s, fmt.Errorf("two labels are named %s", l.name)
		case strings.HasPrefix(l.name, "__"):
			return s, fmt.Errorf("label name %s is reserved", l.name)
		case isHistogram && l.name == "le":
			return s, errors.New(`a histogram cannot have a label named "le"`)
		case !utf8.ValidString(l.value):
			return s, fmt.Errorf("label %s: value %q is not UTF-8", l.name, l.value)
		}
	}
	return s, nil
}

// compareSamples orders samples by the number of labels, then their values,
// as promhttp's registry does, then (what it leaves to chance) their names.
func compareSamples(a, b sample) int {
	if c := cmp.Compare(len(a.labels), len(b.labels)); c != 0 {
		return c
	}
	for i := range a.labels {
		if c := strings.Compare(a.labels[i].value, b.labels[i].value); c != 0 {
			return c
		}
	}
	for i := range a.labels {
		if c := strings.Compare(a.labels[i].name, b.labels[i].name); c != 0 {
			return c
		}
	}
	return 0
}
