package msb

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// maxNameLen is msb's limit on sandbox and volume names, in bytes.
const maxNameLen = 128

// reservedLabelPrefixes are label key prefixes msb keeps for itself.
var reservedLabelPrefixes = []string{"sandbox.", "microsandbox.", "service."}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("msb: invalid %s %s: %s", e.Field, quoteBounded(e.Value, 80), e.Reason)
}

// Is makes every ValidationError match ErrInvalid.
func (e *ValidationError) Is(t error) bool { return t == ErrInvalid }

func invalid(field, value, reason string) error {
	return &ValidationError{Field: field, Value: value, Reason: reason}
}

// quoteBounded quotes s, cutting it to at most n bytes first so an error
// message stays readable whatever it reports.
func quoteBounded(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:n]) + "..."
}

// ValidateName checks a sandbox or volume name (1..128 bytes, [A-Za-z0-9][A-Za-z0-9._-]*).
func ValidateName(field, name string) error {
	switch {
	case name == "":
		return invalid(field, name, "must not be empty")
	case len(name) > maxNameLen:
		return invalid(field, name, fmt.Sprintf("is %d bytes, longer than msb's limit of %d", len(name), maxNameLen))
	case !isAlnum(name[0]):
		return invalid(field, name, "must start with a letter or digit")
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return invalid(field, name, fmt.Sprintf("contains %q; only letters, digits, '.', '_' and '-' are allowed", rune(c)))
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func validateNames(field string, names []string) error {
	if len(names) == 0 {
		return invalid(field, "", "at least one name is required")
	}
	for _, n := range names {
		if err := ValidateName(field, n); err != nil {
			return err
		}
	}
	return nil
}

// checkNUL refuses NUL bytes: they cannot travel in argv and would truncate
// the value msb sees.
func checkNUL(field, v string) error {
	if strings.IndexByte(v, 0) >= 0 {
		return invalid(field, v, "contains a NUL byte")
	}
	return nil
}

// checkValue refuses empty, NUL-carrying and flag-like values, which msb's
// argument parser could read as another option.
func checkValue(field, v string) error {
	if v == "" {
		return invalid(field, v, "must not be empty")
	}
	if err := checkNUL(field, v); err != nil {
		return err
	}
	if v[0] == '-' {
		return invalid(field, v, "must not start with '-' (it would be read as a flag)")
	}
	return nil
}

// checkWord is checkValue for single tokens such as images and users, which
// also must not carry whitespace or control characters.
func checkWord(field, v string) error {
	if err := checkValue(field, v); err != nil {
		return err
	}
	for _, r := range v {
		if r <= ' ' || r == 0x7f {
			return invalid(field, v, fmt.Sprintf("contains whitespace or control character %q", r))
		}
	}
	return nil
}

// checkGuestPath requires an absolute guest path without NUL bytes.
func checkGuestPath(field, p string) error {
	if err := checkNUL(field, p); err != nil {
		return err
	}
	if !strings.HasPrefix(p, "/") {
		return invalid(field, p, "must be an absolute guest path")
	}
	return nil
}

// checkSpecPath is checkGuestPath for paths embedded in a colon-separated
// mount spec, where a ':' would shift every later field.
func checkSpecPath(field, p string) error {
	if err := checkGuestPath(field, p); err != nil {
		return err
	}
	if strings.ContainsRune(p, ':') {
		return invalid(field, p, "must not contain ':' (it separates the fields of the spec)")
	}
	return nil
}

func checkLabel(field string, l Label) error {
	k := l.Key
	switch {
	case k == "":
		return invalid(field+" key", k, "must not be empty")
	case strings.ContainsRune(k, '='):
		return invalid(field+" key", k, "must not contain '='")
	}
	if err := checkValue(field+" key", k); err != nil {
		return err
	}
	for _, p := range reservedLabelPrefixes {
		if strings.HasPrefix(k, p) {
			return invalid(field+" key", k, fmt.Sprintf("uses the prefix %q that msb reserves", p))
		}
	}
	if err := checkNUL(field+" value", l.Value); err != nil {
		return err
	}
	if strings.HasPrefix(l.Value, "-") {
		return invalid(field+" value", l.Value, "must not start with '-'")
	}
	return nil
}

// checkEnv requires KEY=VALUE with a non-empty key: a bare KEY could make
// msb forward a host variable.
func checkEnv(entry string) error {
	if err := checkValue("env entry", entry); err != nil {
		return err
	}
	k, _, ok := strings.Cut(entry, "=")
	if !ok {
		return invalid("env entry", entry, "must be KEY=VALUE")
	}
	if k == "" {
		return invalid("env entry", entry, "has an empty key")
	}
	return nil
}

func checkEnum(field, v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return invalid(field, v, "must be one of "+strings.Join(allowed, ", "))
}

// ParseSize parses a size in msb's format and returns it in MiB, the unit
// msb itself reports (memory_mib, size_mib). Accepted: a positive decimal
// number with an optional fraction, followed by nothing (MiB), M/m (MiB) or
// G/g (GiB): "512", "512M", "1g", "1.5G". Refused, as msb refuses them:
// other units (K, Gi, GB), signs, exponents, spaces, and results below 1 MiB.
func ParseSize(s string) (float64, error) {
	num, mult := s, 1.0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'M', 'm':
			num = s[:n-1]
		case 'G', 'g':
			num, mult = s[:n-1], 1024
		}
	}
	if !isDecimal(num) {
		return 0, invalid("size", s, "must be a number with an optional M or G suffix, like 512M, 1G or 1.5G")
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsInf(v*mult, 0) {
		return 0, invalid("size", s, "is out of range")
	}
	v *= mult
	if v < 1 {
		return 0, invalid("size", s, "must be at least 1M")
	}
	return v, nil
}

// isDecimal reports whether s is digits with at most one '.' that has
// digits on both sides.
func isDecimal(s string) bool {
	intPart, frac, hasDot := strings.Cut(s, ".")
	if !allDigits(intPart) {
		return false
	}
	return !hasDot || allDigits(frac)
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ParseDuration parses a duration in msb's format: a positive whole number
// followed by s, m or h, or bare seconds ("30s", "5m", "2h", "90"). msb has
// no "ms", no "d" and no compound forms such as "1h30m".
func ParseDuration(s string) (time.Duration, error) {
	num, unit := s, time.Second
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 's':
			num = s[:n-1]
		case 'm':
			num, unit = s[:n-1], time.Minute
		case 'h':
			num, unit = s[:n-1], time.Hour
		}
	}
	if !allDigits(num) {
		return 0, invalid("duration", s, "must be a whole number with an optional s, m or h suffix, like 30s, 5m or 2h")
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > int64(math.MaxInt64/unit) {
		return 0, invalid("duration", s, "is out of range")
	}
	if n == 0 {
		return 0, invalid("duration", s, "must be positive")
	}
	return time.Duration(n) * unit, nil
}

// FormatDuration renders d in msb's format as whole seconds, rounded up so a
// deadline is never shortened. A non-positive d gives "0s", which the
// builders refuse: there is no time left to give msb.
func FormatDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	secs := d / time.Second
	if d%time.Second != 0 {
		secs++
	}
	return strconv.FormatInt(int64(secs), 10) + "s"
}

func checkSize(field, v string) error {
	if _, err := ParseSize(v); err != nil {
		return relabel(err, field)
	}
	return nil
}

func checkDuration(field, v string) error {
	if _, err := ParseDuration(v); err != nil {
		return relabel(err, field)
	}
	return nil
}

// relabel names the option a ValidationError came from.
func relabel(err error, field string) error {
	if ve, ok := err.(*ValidationError); ok {
		return &ValidationError{Field: field, Value: ve.Value, Reason: ve.Reason}
	}
	return err
}

// checkOptions validates a comma-separated option list against msb's
// accepted flags and key=value options.
func checkOptions(field string, opts []string, flags []string, keyed map[string]func(string) error) error {
	for _, o := range opts {
		if err := checkNUL(field, o); err != nil {
			return err
		}
		if o == "" || strings.ContainsAny(o, ",:") {
			return invalid(field, o, "must be a single option without ',' or ':'")
		}
		if k, v, ok := strings.Cut(o, "="); ok {
			check, known := keyed[k]
			if !known {
				return invalid(field, o, "is not an option msb accepts here")
			}
			if err := check(v); err != nil {
				return relabel(err, field+" "+k)
			}
			continue
		}
		if checkEnum(field, o, flags...) != nil {
			return invalid(field, o, "is not an option msb accepts here")
		}
	}
	return nil
}

// accessFlags are the bare options both tmpfs and named mounts accept.
var accessFlags = []string{"ro", "rw", "noexec", "nosuid", "nodev"}

func sizeOption(v string) error { _, err := ParseSize(v); return err }

var tmpfsKeyed = map[string]func(string) error{"size": sizeOption}

var mountKeyed = map[string]func(string) error{
	"size":  sizeOption,
	"quota": sizeOption,
	"kind":  func(v string) error { return checkEnum("kind", v, "dir", "disk") },
}
