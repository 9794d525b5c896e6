//go:build linux

package main

import (
	"errors"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
)

// maxSandboxName is msb's limit on sandbox names. Volume names have none
// but the file system's (255 bytes for the volume's directory).
const maxSandboxName = 128

// validName reports whether s is a valid sandbox or volume name as far as
// its characters go: [A-Za-z0-9] then [A-Za-z0-9._-].
func validName(s string) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// checkSandboxName and checkVolumeName refuse a name with msb's texts.
func checkSandboxName(s string) error {
	if len(s) > maxSandboxName {
		return failf("invalid config: sandbox name must be at most %d characters: got %d", maxSandboxName, len(s))
	}
	if !validName(s) {
		return failf("invalid config: sandbox name must start with an alphanumeric and contain only alphanumeric, dots, hyphens, and underscores: %s", s)
	}
	return nil
}

func checkVolumeName(s string) error {
	if !validName(s) {
		return failf("invalid config: volume name must start with an alphanumeric character and contain only alphanumeric characters, dots, hyphens, and underscores: %s", s)
	}
	return nil
}

// intError mirrors the wording of Rust's ParseIntError.
func intError(s string, err error) string {
	switch {
	case s == "":
		return "cannot parse integer from empty string"
	case errors.Is(err, strconv.ErrRange):
		return "number too large to fit in target type"
	default:
		return "invalid digit found in string"
	}
}

// parseSizeMiB parses msb's size syntax into MiB: "1G", "1.5g", "512M",
// "512m", or a bare number of MiB. Other units (Gi, GB, K) are refused.
func parseSizeMiB(raw string) (int, error) {
	s := strings.TrimSpace(raw)
	var mib float64
	switch {
	case strings.HasSuffix(s, "G") || strings.HasSuffix(s, "g"):
		n := strings.TrimSpace(s[:len(s)-1])
		f, err := strconv.ParseFloat(n, 64)
		if err != nil || strings.ContainsAny(n, "_xXpP") {
			if n == "" {
				return 0, errors.New("invalid size: cannot parse float from empty string")
			}
			return 0, errors.New("invalid size: invalid float literal")
		}
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			return 0, errors.New("size must be a finite positive number")
		}
		mib = f * 1024
	case strings.HasSuffix(s, "M") || strings.HasSuffix(s, "m"):
		n := strings.TrimSpace(s[:len(s)-1])
		v, err := strconv.ParseUint(n, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("invalid size: %s", intError(n, err))
		}
		mib = float64(v)
	default:
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("invalid size (expected e.g. 512M, 1G): %s", intError(s, err))
		}
		mib = float64(v)
	}
	if mib > math.MaxUint32 {
		return 0, errors.New("size too large")
	}
	if mib < 1 {
		return 0, errors.New("size must be at least 1 MiB")
	}
	return int(mib), nil
}

// parseDurationSecs parses msb's duration syntax: "30s", "5m", "2h" or bare
// seconds. No ms, no days, no compound values.
func parseDurationSecs(raw string) (int64, error) {
	s := strings.TrimSpace(raw)
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 's':
			s = s[:n-1]
		case 'm':
			s, mult = s[:n-1], 60
		case 'h':
			s, mult = s[:n-1], 3600
		}
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, errors.New(intError(s, err))
	}
	return int64(v) * mult, nil
}

var reservedLabelPrefixes = []string{"sandbox.", "microsandbox.", "service."}

// parseLabel splits KEY=VALUE; a bare KEY has an empty value.
func parseLabel(s string) (string, string) {
	k, v, _ := strings.Cut(s, "=")
	return k, v
}

func checkLabelKey(k string) error {
	if k == "" {
		return failf("invalid config: label key must not be empty")
	}
	for _, p := range reservedLabelPrefixes {
		if strings.HasPrefix(k, p) {
			return failf("invalid config: label key '%s' uses reserved prefix '%s'", k, p)
		}
	}
	return nil
}

// mountOptions are the per-mount flags shown by inspect.
type mountOptions struct {
	ReadOnly bool `json:"readonly"`
	NoExec   bool `json:"noexec"`
	NoSuid   bool `json:"nosuid"`
	NoDev    bool `json:"nodev"`
}

// namedMount is one --mount-named VOLUME:GUEST[:OPTS].
type namedMount struct {
	Volume  string       `json:"volume"`
	Guest   string       `json:"guest"`
	Options mountOptions `json:"options"`
	Kind    string       `json:"kind,omitempty"`
	SizeMiB int          `json:"size_mib,omitempty"`
}

// tmpfsMount is one --tmpfs PATH[:SIZE][:OPTS].
type tmpfsMount struct {
	Guest   string       `json:"guest"`
	SizeMiB int          `json:"size_mib,omitempty"`
	Options mountOptions `json:"options"`
}

func guestPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("invalid config: guest mount path must be absolute: %s", p)
	}
	c := path.Clean(p)
	if c == "/" {
		return "", errors.New("cannot mount over the guest root")
	}
	return c, nil
}

// applyOption applies one mount option; sized reports the size= or quota=
// value in MiB, kind the kind= value.
func applyOption(o *mountOptions, raw string, named bool) (kind string, sizeMiB int, err error) {
	k, v, hasVal := strings.Cut(raw, "=")
	switch {
	case !hasVal && k == "ro":
		o.ReadOnly = true
	case !hasVal && k == "rw":
		o.ReadOnly = false
	case !hasVal && k == "noexec":
		o.NoExec = true
	case !hasVal && k == "nosuid":
		o.NoSuid = true
	case !hasVal && k == "nodev":
		o.NoDev = true
	case hasVal && k == "size", hasVal && named && k == "quota":
		n, err := parseSizeMiB(v)
		if err != nil {
			return "", 0, err
		}
		return "", n, nil
	case hasVal && named && k == "kind":
		if v != "dir" && v != "disk" {
			return "", 0, fmt.Errorf("invalid named volume kind %q (expected dir|disk)", v)
		}
		return v, 0, nil
	default:
		return "", 0, fmt.Errorf("unsupported mount option %q", raw)
	}
	return "", 0, nil
}

func parseNamedMount(s string) (namedMount, error) {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) < 2 {
		return namedMount{}, errors.New("mount-named must be in format source:/guest[:options]")
	}
	if err := checkVolumeName(parts[0]); err != nil {
		return namedMount{}, errors.New(strings.TrimSuffix(strings.TrimPrefix(err.Error(), "error: "), "\n"))
	}
	g, err := guestPath(parts[1])
	if err != nil {
		return namedMount{}, err
	}
	m := namedMount{Volume: parts[0], Guest: g}
	if len(parts) == 3 {
		for _, o := range strings.Split(parts[2], ",") {
			kind, size, err := applyOption(&m.Options, o, true)
			if err != nil {
				return namedMount{}, err
			}
			if kind != "" {
				m.Kind = kind
			}
			if size != 0 {
				m.SizeMiB = size
			}
		}
	}
	return m, nil
}

func parseTmpfs(s string) (tmpfsMount, error) {
	parts := strings.SplitN(s, ":", 3)
	g, err := guestPath(parts[0])
	if err != nil {
		return tmpfsMount{}, err
	}
	m := tmpfsMount{Guest: g}
	var opts string
	switch len(parts) {
	case 2:
		// The second field is a size unless it only reads as options.
		if n, err := parseSizeMiB(parts[1]); err == nil {
			m.SizeMiB = n
		} else {
			opts = parts[1]
		}
	case 3:
		if parts[1] != "" {
			n, err := parseSizeMiB(parts[1])
			if err != nil {
				return tmpfsMount{}, err
			}
			m.SizeMiB = n
		}
		opts = parts[2]
	}
	if opts != "" {
		for _, o := range strings.Split(opts, ",") {
			_, size, err := applyOption(&m.Options, o, false)
			if err != nil {
				return tmpfsMount{}, err
			}
			if size != 0 {
				m.SizeMiB = size
			}
		}
	}
	return m, nil
}
