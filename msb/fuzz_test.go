package msb

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Fuzz targets for everything that reads msb's output or a caller's size
// and duration strings: they must never panic, and whatever they accept
// must satisfy the invariants callers rely on. The real msb's captured
// outputs (testdata/real-*) seed them too.

// goldenFiles returns the captured files NAME.ext of every case whose
// name has one of prefixes.
func goldenFiles(f *testing.F, ext string, prefixes ...string) map[string][]byte {
	f.Helper()
	paths, _ := filepath.Glob(filepath.Join("testdata", "real-*", "*."+ext))
	out := map[string][]byte{}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), "."+ext)
		for _, prefix := range prefixes {
			if strings.HasPrefix(name, prefix) {
				b, err := os.ReadFile(p)
				if err != nil {
					f.Fatal(err)
				}
				out[p] = b
			}
		}
	}
	return out
}

func FuzzParseList(f *testing.F) {
	for _, s := range []string{
		``, `[]`, `null`, `{}`, `[1]`, `[null]`, `[{}]`,
		`[{"created_at":"2026-08-22T14:49:44.123+00:00","image":"alpine","name":"box1","status":"Running"}]`,
		`[{"created_at":"2026-08-22 14:49:44","image":null,"name":"b","status":"Stopped","x":[1,{}]}]`,
		`[{"created_at":"2026-08-22T14:49:44Z","name":"-x","status":"Running"}]`,
		`[{"created_at":7,"name":"a","status":"Running"}]`,
		`[{"name":"a","status":"","created_at":"2026-08-22T14:49:44Z"}]`,
	} {
		f.Add([]byte(s))
	}
	for _, b := range goldenFiles(f, "stdout", "list-") {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseList(data)
		if err != nil {
			return
		}
		if got == nil {
			t.Fatal("accepted output gave a nil slice")
		}
		for i, s := range got {
			if s.Name == "" || s.Status == "" {
				t.Fatalf("entry %d violates invariants: %+v", i, s)
			}
		}
	})
}

func FuzzParseVolumeList(f *testing.F) {
	for _, s := range []string{
		``, `[]`, `[{}]`,
		`[{"name":"vol","kind":"dir","quota_mib":null,"used_bytes":0,"capacity_bytes":null,"disk_format":null,"disk_fstype":null,"created_at":"2026-08-22T14:49:44.123+00:00"}]`,
		`[{"name":"v","used_bytes":-1,"created_at":"2026-08-22T14:49:44Z"}]`,
		`[{"name":"v","used_bytes":1e30,"created_at":"2026-08-22 14:49:44"}]`,
	} {
		f.Add([]byte(s))
	}
	for _, b := range goldenFiles(f, "stdout", "volume-list") {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseVolumeList(data)
		if err != nil {
			return
		}
		for i, v := range got {
			if v.Name == "" || v.UsedBytes < 0 {
				t.Fatalf("entry %d violates invariants: %+v", i, v)
			}
		}
	})
}

func FuzzParseInspect(f *testing.F) {
	for _, s := range []string{
		inspectSample, ``, `{}`, `[]`, `null`,
		`{"name":"b","created_at":"2026-08-22T14:49:44Z"}`,
		`{"name":"b","created_at":"2026-08-22T14:49:44Z","config":{"mounts":[{"type":"Named","name":"v","guest":"/w"},{"type":"Bind","guest":"/h"}]}}`,
		`{"name":"b","created_at":"2026-08-22T14:49:44Z","config":{"labels":{"a":"b","c":null},"network":{"enabled":null}}}`,
		`{"name":"b","created_at":"2026-08-22T14:49:44Z","config":{"resources":{"cpus":-1}}}`,
		`{"name":"b","created_at":"2026-08-22T14:49:44Z","config":{"image":{"Oci":null}}}`,
		`{"name":"b","created_at":"2026-08-22T14:49:44Z","config":{"network":{"enabled":true,"policy":{"default_egress":"deny","rules":[]}}}}`,
		`{"name":"b","created_at":"2026-08-22T14:49:44Z","config":{"network":{"policy":{"default_egress":"deny","rules":{}}}}}`,
		`{"name":"b","created_at":"2026-08-22T14:49:44Z","config":{"network":{"policy":{"default_egress":1}}}}`,
	} {
		f.Add([]byte(s))
	}
	for _, b := range goldenFiles(f, "stdout", "inspect-") {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := ParseInspect(data)
		if err != nil {
			if info != nil {
				t.Fatal("result returned with an error")
			}
			return
		}
		if ValidateName("name", info.Name) != nil || info.Labels == nil || info.CPUs < 0 || info.MemoryMiB < 0 {
			t.Fatalf("accepted output violates invariants: %+v", info)
		}
		for i, m := range info.Mounts {
			if m.Type == "" || m.SizeMiB < 0 || m.Guest != "" && !strings.HasPrefix(m.Guest, "/") ||
				m.Type == "Named" && ValidateName("name", m.Name) != nil {
				t.Fatalf("mount %d violates invariants: %+v", i, m)
			}
		}
	})
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{
		"2026-08-22T14:49:44.123+00:00", "2026-08-22T14:49:44Z", "2026-08-22T14:49:44.123456789-07:30",
		"2026-08-22 14:49:44", "2026-08-22 14:49:44.5", "", "2026-02-30 00:00:00", "9999-12-31T23:59:59+23:59",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTime(s)
		if err != nil {
			return
		}
		back, err := ParseTime(got.Format(time.RFC3339Nano))
		if err != nil || !back.Equal(got) {
			t.Fatalf("%q parsed to %v, which does not round-trip: %v, %v", s, got, back, err)
		}
	})
}

func FuzzClassify(f *testing.F) {
	f.Add("remove\x00box1", 1, []byte("error: sandbox not found: box1\n"))
	f.Add("volume\x00remove\x00v", 1, []byte("\x1b[31merror:\x1b[0m invalid config: volume \"v\" is attached to active sandbox \"s\"\r\n"))
	f.Add("exec\x00b\x00--\x00x", 127, []byte("error: failed to exec \"x\"\nhint: nope\n"))
	f.Add("exec\x00b", 1, []byte("out\nerror: exec timed out after 10s"))
	f.Add("", -1, []byte("\x1b]8;;x\x07\x1b[\x1b"))
	f.Add("create\x00a", 2, []byte(strings.Repeat("\xff\xfe", 400)))
	f.Add("copy\x00b:/x\x00/y", 1, []byte("error: sandbox not found: b\n"))
	f.Add("create\x00i\x00--name\x00b", 1, []byte("error: failed to start \"b\"\n  \u2192 cause\n\n  \u2192 hint\nguest\n"))
	f.Add("create\x00nope:1", 1, []byte("error: image error: image not cached: docker.io/library/nope:1\n"))
	f.Add("list", 1, []byte("error: "+leaseRefusal+"\n"))
	for p, stderr := range goldenFiles(f, "stderr", "") {
		argv, err := os.ReadFile(strings.TrimSuffix(p, ".stderr") + ".argv")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(strings.ReplaceAll(strings.TrimSuffix(string(argv), "\n"), "\n", "\x00"), 1, stderr)
	}
	f.Fuzz(func(t *testing.T, argv string, code int, stderr []byte) {
		args := strings.Split(argv, "\x00")
		clean := StripANSI(string(stderr))
		if strings.ContainsAny(clean, "\x1b\r") {
			t.Fatalf("StripANSI left an escape or CR: %q", clean)
		}
		msg, kind := classify(args, code, []byte(clean))
		head, _, _ := strings.Cut(msg, " → ")
		if kind != nil && (msg == "" || !hasErrorLine(clean, head)) {
			t.Fatalf("kind %v without its message line: %q in %q", kind, msg, clean)
		}
		e := newExitError(args, code, []byte(clean), true)
		if e.Message != msg || e.Kind != kind || e.RetryAt.IsZero() != (kind != ErrInstallInProgress) {
			t.Fatalf("newExitError = %q, %v, %v; classify said %q, %v", e.Message, e.Kind, e.RetryAt, msg, kind)
		}
		text := e.Error()
		if !utf8.ValidString(text) || len(text) > 2*maxDetail+128 {
			t.Fatalf("Error() not bounded or not UTF-8: %d bytes", len(text))
		}
	})
}

// hasErrorLine tells whether text has an "error: " line whose message,
// spaces around it aside (classify takes them off), begins with head.
func hasErrorLine(text, head string) bool {
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(line, "error: "); ok && strings.HasPrefix(strings.TrimSpace(rest), head) {
			return true
		}
	}
	return false
}

var (
	sizeGrammar     = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?[MmGg]?$`)
	durationGrammar = regexp.MustCompile(`^[0-9]+[smh]?$`)
)

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"512", "512M", "1g", "1.5G", "0", "1Gi", "1GB", "512K", "-1", "1e9", ".5", "1.", "99999999999999999999999G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSize(s)
		if err != nil {
			return
		}
		if v < 1 || math.IsInf(v, 0) || math.IsNaN(v) {
			t.Fatalf("ParseSize(%q) = %v", s, v)
		}
		if !sizeGrammar.MatchString(s) {
			t.Fatalf("ParseSize accepted %q with an unexpected suffix", s)
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"30s", "5m", "2h", "90", "0s", "500ms", "1d", "1h30m", "-1s", "9223372036s", "99999999999999999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		if d <= 0 || d%time.Second != 0 || !durationGrammar.MatchString(s) {
			t.Fatalf("ParseDuration(%q) = %v", s, d)
		}
		back, err := ParseDuration(FormatDuration(d))
		if err != nil || back != d {
			t.Fatalf("FormatDuration(%v) = %q does not round-trip: %v, %v", d, FormatDuration(d), back, err)
		}
	})
}

func FuzzParseMetrics(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `[]`, `null`, metricsSample,
		`{"name":"b","state":"exited","timestamp":"2026-11-30 15:53:02","cpus":null,"cpu_percent":0,"memory_bytes":0,"memory_limit_bytes":0,"disk_read_bytes":0,"disk_write_bytes":0,"net_rx_bytes":0,"net_tx_bytes":0,"uptime_secs":0}`,
		`{"name":"b","state":"running","timestamp":"2026-11-30T15:53:02Z","cpu_percent":1e308,"memory_bytes":9223372036854775807,"memory_limit_bytes":0,"disk_read_bytes":0,"disk_write_bytes":0,"net_rx_bytes":0,"net_tx_bytes":0,"uptime_secs":9.2e9}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMetrics(data)
		if err != nil {
			if !errors.Is(err, ErrMalformedOutput) {
				t.Fatalf("refusal %v does not match ErrMalformedOutput", err)
			}
			return
		}
		if m.Name == "" || !slices.Contains(metricStates, m.State) {
			t.Fatalf("accepted output violates invariants: %+v", m)
		}
		for _, n := range []int64{m.MemoryBytes, m.MemoryLimitBytes, m.DiskReadBytes, m.DiskWriteBytes, m.NetRxBytes, m.NetTxBytes, m.UpperUsedBytes, m.UpperFreeBytes, int64(m.CPUs), int64(m.Uptime)} {
			if n < 0 {
				t.Fatalf("accepted a negative quantity: %+v", m)
			}
		}
		if m.CPUPercent < 0 || math.IsNaN(m.CPUPercent) || math.IsInf(m.CPUPercent, 0) {
			t.Fatalf("accepted cpu_percent %v", m.CPUPercent)
		}
	})
}

// FuzzParsePortForward: whatever is accepted renders as a spec msb's own
// grammar reads (an explicit address, bracketed when IPv6) that parses back
// to the same forward with that address made explicit.
func FuzzParsePortForward(f *testing.F) {
	for _, s := range []string{"8080:80", "0.0.0.0:1:65535/udp", "[::1]:8080:80/tcp", "8080", ":80", "[::1]8080:80", "1.2.3.4:5:6:7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		p, err := ParsePortForward(spec)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParsePortForward(%q) = %v, not an ErrInvalid", spec, err)
			}
			return
		}
		rendered := p.String()
		back, err := ParsePortForward(rendered)
		if err != nil {
			t.Fatalf("%q renders as %q, which does not parse: %v", spec, rendered, err)
		}
		a, _ := p.address()
		if back.Addr != a.String() || back.Host != p.Host || back.Guest != p.Guest || back.udp() != p.udp() {
			t.Fatalf("%q -> %q -> %+v, want %+v", spec, rendered, back, p)
		}
	})
}

// ValidateName is msb's name rule, the expression below, written out.
func FuzzValidateName(f *testing.F) {
	rule := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	for _, s := range []string{"", "a", ".a", "-a", "_a", "a.b-c_d", "a/b", "a b", "ä", strings.Repeat("a", 128), strings.Repeat("a", 129), "a\n", "A9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if got, want := ValidateName("name", name) == nil, rule.MatchString(name); got != want {
			t.Fatalf("ValidateName(%q) accepts: %v, the rule says %v", name, got, want)
		}
	})
}
