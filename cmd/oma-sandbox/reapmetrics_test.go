//go:build linux

package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
)

// reapEnv runs the CLI against a private fakemsb and state directory.
type reapEnv struct {
	t      *testing.T
	msb    *fakemsbtest.Env
	global []string
}

func newReapEnv(t *testing.T) *reapEnv {
	env := fakemsbtest.New(t)
	return &reapEnv{t: t, msb: env, global: []string{"--msb", env.Bin, "--state-dir", t.TempDir()}}
}

// run runs the CLI and returns its exit code and stderr.
func (e *reapEnv) run(args ...string) (int, string) {
	var stderr bytes.Buffer
	code := Main(slices.Concat(e.global, args), nil, io.Discard, &stderr)
	return code, stderr.String()
}

func (e *reapEnv) create(backend string) string {
	e.t.Helper()
	var out bytes.Buffer
	if code := Main(slices.Concat(e.global, []string{"session", "create", "--backend", backend}), nil, &out, io.Discard); code != 0 {
		e.t.Fatalf("session create --backend %s exited %d", backend, code)
	}
	return strings.TrimSpace(out.String())
}

// readMetrics parses the file with Prometheus' own text parser, checks
// that every family is a prefixed gauge with help, and returns them.
func readMetrics(t *testing.T, path string) map[string]*dto.MetricFamily {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	for name, mf := range fams {
		if !strings.HasPrefix(name, "oma_sandbox_reaper_") || mf.GetType() != dto.MetricType_GAUGE || mf.GetHelp() == "" {
			t.Errorf("family %s: type %v, help %q; want a prefixed gauge with help", name, mf.GetType(), mf.GetHelp())
		}
	}
	return fams
}

// sample returns the value of the named metric (without its prefix) whose
// labels are exactly labels ("k=v" each).
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf := fams["oma_sandbox_reaper_"+name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		var got []string
		for _, l := range m.GetLabel() {
			got = append(got, l.GetName()+"="+l.GetValue())
		}
		if slices.Equal(got, labels) {
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// wantSamples checks name=value pairs, each name with its labels as
// "name{k=v,k=v}".
func wantSamples(t *testing.T, fams map[string]*dto.MetricFamily, want map[string]float64) {
	t.Helper()
	for key, v := range want {
		name, labels, _ := strings.Cut(strings.TrimSuffix(key, "}"), "{")
		var ls []string
		if labels != "" {
			ls = strings.Split(labels, ",")
		}
		got, ok := sample(fams, name, ls...)
		if !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, v)
		}
	}
}

// onlyFile fails unless dir holds exactly the file name: no temporary file
// was left behind.
func onlyFile(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{name}) {
		t.Errorf("%s holds %q, want only %s", dir, names, name)
	}
}

// TestReapMetricsFile runs reap --metrics-file on fakemsb and the local
// backend and reads the file back with the Prometheus text parser: the
// figures of a clean, a failed, a dry and a removing sweep, the last
// success carried over failures, and an atomic replacement each time.
func TestReapMetricsFile(t *testing.T) {
	e := newReapEnv(t)
	e.create("msb")
	e.create("local")
	dir := t.TempDir()
	path := filepath.Join(dir, "reaper.prom")

	before := time.Now()
	if code, stderr := e.run("reap", "--older-than", "1h", "--backend", "all", "--metrics-file", path); code != 0 {
		t.Fatalf("reap exited %d: %s", code, stderr)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o644 {
		t.Fatalf("metrics file: %v, %v; want mode 0644", info, err)
	}
	onlyFile(t, dir, "reaper.prom")
	fams := readMetrics(t, path)
	wantSamples(t, fams, map[string]float64{
		"listed{backend=msb,kind=sandbox}":   1,
		"listed{backend=msb,kind=volume}":    1,
		"listed{backend=msb,kind=snapshot}":  0,
		"kept{backend=msb,kind=sandbox}":     1,
		"kept{backend=msb,kind=volume}":      1,
		"removed{backend=msb,kind=sandbox}":  0,
		"foreign{backend=msb,kind=volume}":   0,
		"failed{backend=msb,kind=sandbox}":   0,
		"listed{backend=local,kind=session}": 1,
		"kept{backend=local,kind=session}":   1,
		"failed{backend=local,kind=session}": 0,
		"sweep_success{backend=msb}":         1,
		"sweep_success{backend=local}":       1,
		"dry_run":                            0,
	})
	if _, ok := sample(fams, "foreign", "backend=local", "kind=session"); ok {
		t.Error("a local foreign count: the local backend has none")
	}
	if d, ok := sample(fams, "duration_seconds"); !ok || d <= 0 || d > 60 {
		t.Errorf("duration_seconds = %v, %v", d, ok)
	}
	first, ok := sample(fams, "last_success_timestamp_seconds")
	if at := time.UnixMilli(int64(first * 1000)); !ok || at.Before(before.Truncate(time.Millisecond)) || at.After(time.Now()) {
		t.Fatalf("last_success_timestamp_seconds = %v (%v), want the run's end", first, ok)
	}

	// A failed removal: exit 1 as before, the file still replaced, the
	// failure counted and the last success carried over.
	e.msb.SetKnob("FAKEMSB_FAULTS", "remove=exit:1:error: sandbox busy")
	if code, _ := e.run("reap", "--older-than", "1ms", "--metrics-file", path); code != 1 {
		t.Errorf("failed sweep exited %d, want 1", code)
	}
	onlyFile(t, dir, "reaper.prom")
	fams = readMetrics(t, path)
	wantSamples(t, fams, map[string]float64{
		"failed{backend=msb,kind=sandbox}": 1,
		"kept{backend=msb,kind=volume}":    1, // its sandbox could not be removed
		"sweep_success{backend=msb}":       0,
		"last_success_timestamp_seconds":   first,
	})
	if _, ok := sample(fams, "sweep_success", "backend=local"); ok {
		t.Error("--backend msb wrote a local figure")
	}

	// A failed listing: no figures to count, the failure and the carried
	// last success only.
	e.msb.SetKnob("FAKEMSB_FAULTS", "list=exit:1:error: state locked")
	if code, stderr := e.run("reap", "--older-than", "1ms", "--metrics-file", path); code != 1 || !strings.Contains(stderr, "state locked") {
		t.Errorf("failed listing exited %d: %s", code, stderr)
	}
	fams = readMetrics(t, path)
	wantSamples(t, fams, map[string]float64{"sweep_success{backend=msb}": 0, "last_success_timestamp_seconds": first})
	if _, ok := fams["oma_sandbox_reaper_listed"]; ok {
		t.Error("a failed listing wrote listed figures")
	}

	// A previous file that cannot be read leaves no last success to carry.
	if err := os.WriteFile(path, []byte("oma_sandbox_reaper_last_success_timestamp_seconds soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.run("reap", "--older-than", "1ms", "--metrics-file", path)
	if _, ok := sample(readMetrics(t, path), "last_success_timestamp_seconds"); ok {
		t.Error("a last success came from an unparseable file")
	}
	e.msb.SetKnob("FAKEMSB_FAULTS", "")

	// A dry run reports what would go and is no success to carry.
	if code, stderr := e.run("reap", "--older-than", "1ms", "--backend", "all", "--dry-run", "--metrics-file", path); code != 0 {
		t.Fatalf("dry run exited %d: %s", code, stderr)
	}
	fams = readMetrics(t, path)
	wantSamples(t, fams, map[string]float64{"dry_run": 1, "removed{backend=msb,kind=sandbox}": 1, "removed{backend=local,kind=session}": 1})
	if _, ok := sample(fams, "last_success_timestamp_seconds"); ok {
		t.Error("a dry run set the last success")
	}

	// The real sweep removes both sessions and sets the last success anew.
	if code, stderr := e.run("reap", "--older-than", "1ms", "--backend", "all", "--metrics-file", path); code != 0 {
		t.Fatalf("reap exited %d: %s", code, stderr)
	}
	onlyFile(t, dir, "reaper.prom")
	fams = readMetrics(t, path)
	wantSamples(t, fams, map[string]float64{
		"removed{backend=msb,kind=sandbox}":   1,
		"removed{backend=msb,kind=volume}":    1,
		"removed{backend=local,kind=session}": 1,
		"dry_run":                             0,
	})
	if last, ok := sample(fams, "last_success_timestamp_seconds"); !ok || last <= first {
		t.Errorf("last_success_timestamp_seconds = %v (%v), want later than %v", last, ok, first)
	}
}

// TestReapMetricsFileRefused: a path that cannot take the file is a usage
// error naming it, given before the sweep, so nothing changes: no msb
// call, no file written or removed.
func TestReapMetricsFileRefused(t *testing.T) {
	e := newReapEnv(t)
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing")
	if err := os.Mkdir(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.prom")
	if err := os.Symlink(filepath.Join(dir, "target.prom"), link); err != nil {
		t.Fatal(err)
	}
	unwritable := "/sys/oma-sandbox-reaper.prom" // sysfs takes no new files, even from root
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		unwritable = filepath.Join(ro, "reaper.prom")
	}
	cases := []struct{ path, says string }{
		{existing, "is a directory"},
		{filepath.Join(dir, "missing", "reaper.prom"), "its directory " + filepath.Join(dir, "missing") + " does not exist"},
		{link, "is not a regular file"},
		{unwritable, "cannot create a file in " + filepath.Dir(unwritable)},
	}
	snapshot := func() []string {
		var all []string
		filepath.WalkDir(dir, func(p string, _ os.DirEntry, _ error) error {
			all = append(all, p)
			return nil
		})
		return all
	}
	before := snapshot()
	e.msb.ResetLog(t)
	for _, tc := range cases {
		code, stderr := e.run("reap", "--older-than", "1h", "--metrics-file", tc.path)
		if code != exitUsage || !strings.Contains(stderr, "--metrics-file "+tc.path+": "+tc.says) {
			t.Errorf("%s: exited %d, stderr %q; want 2 and %q", tc.path, code, stderr, tc.says)
		}
	}
	if code, stderr := e.run("reap", "--older-than", "1h", "--metrics-file="); code != exitUsage || !strings.Contains(stderr, "--metrics-file needs a PATH") {
		t.Errorf("empty path: exited %d, %q", code, stderr)
	}
	if calls := e.msb.Invocations(t); len(calls) != 0 {
		t.Errorf("refused runs called msb: %v", calls)
	}
	if after := snapshot(); !slices.Equal(after, before) {
		t.Errorf("refused runs changed %s: %q, was %q", dir, after, before)
	}
}

// TestMetricsFileCommitFails: a file that cannot be put in place after the
// sweep (its directory went) is an error naming the path.
func TestMetricsFileCommitFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "textfile")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "reaper.prom")
	m, err := openMetricsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	err = m.commit(&reapRun{backends: []backendSweep{{backend: backendMsb, ok: true}}}, time.Now())
	if err == nil || !strings.HasPrefix(err.Error(), "--metrics-file "+path+": ") {
		t.Errorf("commit: %v, want an error naming %s", err, path)
	}
	m.discard() // as runReap's defer does: nothing left to do
}
