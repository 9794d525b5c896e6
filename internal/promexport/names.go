package promexport

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// kind is what a metric's name and type follow from.
type kind int

const (
	counter   kind = iota // a monotonic sum
	upDown                // a non-monotonic sum: a gauge, but never named _ratio
	gauge                 // a gauge; of unit "1", named _ratio
	histogram             // explicit or exponential
)

// typ is the kind's Prometheus type.
func (k kind) typ() string {
	switch k {
	case counter:
		return "counter"
	case histogram:
		return "histogram"
	}
	return "gauge"
}

// Unit words, as otlptranslator (v1.0.0) maps the UCUM units that OTel
// semantic conventions use.
var (
	unitWords = map[string]string{
		"d": "days", "h": "hours", "min": "minutes", "s": "seconds",
		"ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds",

		"By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes", "GiBy": "gibibytes",
		"TiBy": "tibibytes", "KBy": "kilobytes", "MBy": "megabytes", "GBy": "gigabytes",
		"TBy": "terabytes",

		"m": "meters", "V": "volts", "A": "amperes", "J": "joules", "W": "watts", "g": "grams",

		"Cel": "celsius", "Hz": "hertz", "1": "", "%": "percent",
	}
	perUnitWords = map[string]string{
		"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year",
	}
)

// metricName translates an instrument's name and unit as the exporter's
// default strategy (otlptranslator's UnderscoreEscapingWithSuffixes) does:
// the name's runs of characters other than ASCII letters, digits and ':'
// separate words; the unit's words follow unless the name has them already;
// counters end in _total and gauges of unit "1" in _ratio; the words are
// joined by single underscores, and a leading digit gets an underscore.
func metricName(name, unit string, k kind) (string, error) {
	words := strings.FieldsFunc(name, func(r rune) bool { return !isMetricChar(r) })
	main, per := unitSuffixes(unit)
	main, per = cleanUnit(main), cleanUnit(per)
	if slices.Contains(words, main) {
		main = ""
	}
	if per == "per_" {
		per = ""
	} else if per = strings.TrimSuffix(per, "_"); slices.Contains(words, per) {
		per = ""
	}
	if per != "" {
		main = strings.TrimSuffix(main, "_")
	}
	if main != "" {
		words = append(words, main)
	}
	if per != "" {
		words = append(words, per)
	}
	switch {
	case k == counter:
		words = appendLast(words, "total")
	case k == gauge && unit == "1":
		words = appendLast(words, "ratio")
	}
	n := strings.Join(words, "_")
	if n == "" {
		return "", fmt.Errorf("metric %q: nothing of its name is left for Prometheus", name)
	}
	if isDigit(n[0]) {
		n = "_" + n
	}
	return n, nil
}

// appendLast moves or adds word to the end of words.
func appendLast(words []string, word string) []string {
	return append(slices.DeleteFunc(words, func(w string) bool { return w == word }), word)
}

// unitSuffixes splits a unit like "By/s" into its words, "bytes" and
// "per_second"; annotations like "{call}" have no words.
func unitSuffixes(unit string) (main, per string) {
	mainUnit, perUnit, hasPer := strings.Cut(unit, "/")
	if u := strings.TrimSpace(mainUnit); u != "" && !strings.ContainsAny(u, "{}") {
		main = lookup(unitWords, u)
	}
	if u := strings.TrimSpace(perUnit); hasPer && u != "" && !strings.ContainsAny(u, "{}") {
		per = "per_" + lookup(perUnitWords, u)
	}
	return main, per
}

func lookup(m map[string]string, k string) string {
	if v, ok := m[k]; ok {
		return v
	}
	return k
}

// cleanUnit turns invalid characters of a unit word into underscores,
// collapsing runs of them, and drops a leading one.
func cleanUnit(u string) string {
	var b strings.Builder
	for _, r := range u {
		if !isMetricChar(r) {
			r = '_'
		}
		if r != '_' || !strings.HasSuffix(b.String(), "_") {
			b.WriteRune(r)
		}
	}
	return strings.TrimPrefix(b.String(), "_")
}

// labelName translates an attribute key as otlptranslator's LabelNamer does
// without UTF-8: runs of characters other than ASCII letters and digits
// become one underscore, except for the double underscores around a
// "__reserved__" key, and a leading digit gets "key_".
func labelName(key string) (string, error) {
	if key == "" {
		return "", errors.New("an attribute key is empty")
	}
	inner, reserved := key, false
	if len(key) >= 4 && strings.HasPrefix(key, "__") && strings.HasSuffix(key, "__") {
		inner, reserved = key[2:len(key)-2], true
	}
	var b strings.Builder
	under := false
	for _, r := range inner {
		switch {
		case r < 0x80 && (isDigit(byte(r)) || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'):
			b.WriteRune(r)
			under = false
		case !under:
			b.WriteByte('_')
			under = true
		}
	}
	n := b.String()
	if reserved {
		n = "__" + n + "__"
	}
	if isDigit(n[0]) {
		n = "key_" + n
	}
	if strings.Trim(n, "_") == "" {
		return "", fmt.Errorf("attribute key %q: nothing of it is left for Prometheus", key)
	}
	return n, nil
}

func isMetricChar(r rune) bool {
	return r < 0x80 && (isDigit(byte(r)) || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || r == ':')
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
