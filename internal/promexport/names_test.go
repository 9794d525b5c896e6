package promexport

import (
	"testing"

	"github.com/prometheus/otlptranslator"
)

var kinds = map[kind]otlptranslator.MetricType{
	counter:   otlptranslator.MetricTypeMonotonicCounter,
	upDown:    otlptranslator.MetricTypeNonMonotonicCounter,
	gauge:     otlptranslator.MetricTypeGauge,
	histogram: otlptranslator.MetricTypeHistogram,
}

// checkNames compares our translation of a name, unit and attribute key
// with otlptranslator's, as the official exporter configures it.
func checkNames(t *testing.T, name, unit string) {
	t.Helper()
	namer := otlptranslator.NewMetricNamer("", otlptranslator.UnderscoreEscapingWithSuffixes)
	for k, typ := range kinds {
		want, wantErr := namer.Build(otlptranslator.Metric{Name: name, Unit: unit, Type: typ})
		got, err := metricName(name, unit, k)
		if got != want || (err == nil) != (wantErr == nil) {
			t.Errorf("metricName(%q, %q, %v) = %q, %v; otlptranslator: %q, %v", name, unit, typ, got, err, want, wantErr)
		}
	}
	labelNamer := otlptranslator.LabelNamer{}
	want, wantErr := labelNamer.Build(name)
	got, err := labelName(name)
	if got != want || (err == nil) != (wantErr == nil) {
		t.Errorf("labelName(%q) = %q, %v; otlptranslator: %q, %v", name, got, err, want, wantErr)
	}
}

var nameSeeds = [][2]string{
	{"http.server.duration", "s"}, {"requests", "{request}"}, {"sent", "By/s"}, {"x", "1/s"},
	{"cpu.utilization", "1"}, {"load", "%"}, {"a_total", "ms"}, {"total", ""}, {"ratio", "1"},
	{"seconds.spent", "s"}, {"x", "m/m"}, {"x", "By/{x}"}, {"x", "{x}/s"}, {"x", " s / h "},
	{"x", "foo bar!"}, {"x", "a/!"}, {"x", "__/__"}, {"x", "/"}, {"x", "per/second"},
	{"9lives", ""}, {"ns:x-y", ""}, {"a__b..c", "Cel"}, {"", ""}, {"!!", ""}, {"_", ""},
	{"__", ""}, {"___", ""}, {"____", ""}, {"__x__", ""}, {"__x.y__", ""}, {"1st", ""},
	{"ünï.code", "µs"}, {"\xff", "\xff"}, {"a\xffb", "x/\xff"}, {"key", "KiBy"},
}

func TestNamesMatchOTLPTranslator(t *testing.T) {
	for _, s := range nameSeeds {
		checkNames(t, s[0], s[1])
	}
}

func FuzzNamesMatchOTLPTranslator(f *testing.F) {
	for _, s := range nameSeeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(checkNames)
}
