package promexport

import (
	"bytes"
	"math"
	"strconv"
	"strings"
)

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// writeText writes families as expfmt's text encoder does. Their names are
// all legacy Prometheus names, so none needs quoting.
func writeText(w *bytes.Buffer, fams []*family) {
	for _, f := range fams {
		w.WriteString("# HELP " + f.name + " ")
		_, _ = helpEscaper.WriteString(w, f.help)
		w.WriteString("\n# TYPE " + f.name + " " + f.typ + "\n")
		for _, s := range f.samples {
			if f.typ != "histogram" {
				writeSample(w, f.name, s.labels, "", s.value)
				continue
			}
			for _, b := range s.buckets {
				writeSample(w, f.name+"_bucket", s.labels, formatFloat(b.bound), float64(b.count))
			}
			if n := len(s.buckets); n == 0 || !math.IsInf(s.buckets[n-1].bound, 1) {
				writeSample(w, f.name+"_bucket", s.labels, "+Inf", float64(s.count))
			}
			writeSample(w, f.name+"_sum", s.labels, "", s.sum)
			writeSample(w, f.name+"_count", s.labels, "", float64(s.count))
		}
	}
}

// writeSample writes one line; le, unless empty, is a bucket's bound.
func writeSample(w *bytes.Buffer, name string, labels []label, le string, v float64) {
	w.WriteString(name)
	sep := byte('{')
	for _, l := range labels {
		w.WriteByte(sep)
		w.WriteString(l.name + `="`)
		_, _ = valueEscaper.WriteString(w, l.value)
		w.WriteByte('"')
		sep = ','
	}
	if le != "" {
		w.WriteByte(sep)
		w.WriteString(`le="` + le + `"`)
	}
	if len(labels) > 0 || le != "" {
		w.WriteByte('}')
	}
	w.WriteByte(' ')
	w.WriteString(formatFloat(v))
	w.WriteByte('\n')
}

// formatFloat formats as expfmt does: shortest 'g', NaN, +Inf and -Inf,
// and a negative zero as 0.
func formatFloat(f float64) string {
	if f == 0 {
		return "0"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
