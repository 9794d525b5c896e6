package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/oma-sandbox/oma-sandbox/reaper"
	"github.com/oma-sandbox/oma-sandbox/session/local"
)

// metricPrefix starts every metric reap --metrics-file writes.
const metricPrefix = "oma_sandbox_reaper_"

// lastSuccessName is the metric carried from the previous file over
// failed sweeps.
const lastSuccessName = "last_success_timestamp_seconds"

// kindSession is the one kind of resource the local backend reaps.
const kindSession = "session"

// reapRun is what one reap run did, for its metrics.
type reapRun struct {
	dryRun   bool
	took     time.Duration
	backends []backendSweep
}

// backendSweep is one backend's sweep. kinds is nil when the sweep ended
// before it could count anything (a failed listing).
type backendSweep struct {
	backend string
	ok      bool
	kinds   []kindFigures
}

// kindFigures count one kind of resource. noForeign marks a backend that
// has no foreign resources (local: its state directory holds ours only).
type kindFigures struct {
	kind                                   string
	listed, removed, kept, foreign, failed int
	noForeign                              bool
}

// msbSweep gives the figures of an msb sweep; rep is nil when it failed
// before removing anything.
func msbSweep(rep *reaper.Report, err error) backendSweep {
	b := backendSweep{backend: backendMsb, ok: err == nil}
	if rep == nil {
		return b
	}
	kept := map[string]int{}
	for _, s := range rep.Skipped {
		kept[s.Kind]++
	}
	removed := map[string]int{
		reaper.KindSandbox:  len(rep.RemovedSandboxes),
		reaper.KindVolume:   len(rep.RemovedVolumes),
		reaper.KindSnapshot: len(rep.RemovedSnapshots),
	}
	for _, kind := range []string{reaper.KindSandbox, reaper.KindVolume, reaper.KindSnapshot} {
		c := rep.Counts[kind]
		b.kinds = append(b.kinds, kindFigures{kind: kind, listed: c.Listed, removed: removed[kind],
			kept: kept[kind], foreign: c.Foreign, failed: c.Failed})
	}
	return b
}

// localSweep gives the figures of a local sweep; counted is false when it
// failed as a whole (the state directory could not be read).
func localSweep(rep local.ReapReport, err error, counted bool) backendSweep {
	b := backendSweep{backend: backendLocal, ok: err == nil}
	if counted {
		n := len(rep.Removed) + len(rep.Kept) + len(rep.Failed)
		b.kinds = []kindFigures{{kind: kindSession, listed: n, removed: len(rep.Removed),
			kept: len(rep.Kept), failed: len(rep.Failed), noForeign: true}}
	}
	return b
}

// ok reports whether every backend's sweep succeeded.
func (r *reapRun) ok() bool {
	for _, b := range r.backends {
		if !b.ok {
			return false
		}
	}
	return true
}

// metricFamily is one gauge and its samples, in the text exposition format.
type metricFamily struct {
	name, help string
	samples    []metricSample
}

type metricSample struct {
	labels [][2]string
	value  float64
}

// families lays out a run's figures. lastSuccess is zero when no sweep is
// known to have succeeded.
func (r *reapRun) families(lastSuccess time.Time) []metricFamily {
	out := r.kindFamilies()
	success := metricFamily{name: "sweep_success", help: "1 when the last sweep of the backend listed and removed without a failure, else 0."}
	for _, b := range r.backends {
		success.samples = append(success.samples, metricSample{[][2]string{{"backend", b.backend}}, boolValue(b.ok)})
	}
	out = append(out, success,
		metricFamily{name: "dry_run", help: "1 when the last run was a dry run, which removed nothing.", samples: []metricSample{{value: boolValue(r.dryRun)}}},
		metricFamily{name: "duration_seconds", help: "How long the last run's sweeps took.", samples: []metricSample{{value: r.took.Seconds()}}})
	if !lastSuccess.IsZero() {
		out = append(out, metricFamily{name: lastSuccessName,
			help:    "When the last sweep that removed without a failure ended (not a dry run), in seconds since the Unix epoch.",
			samples: []metricSample{{value: float64(lastSuccess.UnixMilli()) / 1000}}})
	}
	return out
}

// kindFamilies are the counts by backend and kind.
func (r *reapRun) kindFamilies() []metricFamily {
	always := func(v int) (int, bool) { return v, true }
	perKind := []struct {
		name, help string
		value      func(kindFigures) (int, bool)
	}{
		{"listed", "Resources the last sweep found in its backend's listing, by backend and kind.", func(k kindFigures) (int, bool) { return always(k.listed) }},
		{"removed", "Resources of ours the last sweep removed (would have removed, in a dry run), by backend and kind.", func(k kindFigures) (int, bool) { return always(k.removed) }},
		{"kept", "Resources of ours the last sweep left in place: younger than --older-than, in use, or already gone.", func(k kindFigures) (int, bool) { return always(k.kept) }},
		{"foreign", "Listed resources that are not provably ours, which the last sweep never touches (msb only).", func(k kindFigures) (int, bool) { return k.foreign, !k.noForeign }},
		{"failed", "Resources the last sweep could not act on: a failed or unstarted removal, a failed inspection or listing.", func(k kindFigures) (int, bool) { return always(k.failed) }},
	}
	var out []metricFamily
	for _, m := range perKind {
		f := metricFamily{name: m.name, help: m.help}
		for _, b := range r.backends {
			for _, k := range b.kinds {
				if v, ok := m.value(k); ok {
					f.samples = append(f.samples, metricSample{[][2]string{{"backend", b.backend}, {"kind", k.kind}}, float64(v)})
				}
			}
		}
		out = append(out, f)
	}
	return out
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// writeExposition writes families in the Prometheus text format, each
// with HELP and TYPE lines; a family without samples is left out.
func writeExposition(w io.Writer, families []metricFamily) error {
	bw := bufio.NewWriter(w)
	for _, f := range families {
		if len(f.samples) == 0 {
			continue
		}
		name := metricPrefix + f.name
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s gauge\n", name, f.help, name)
		for _, s := range f.samples {
			bw.WriteString(name)
			if len(s.labels) > 0 {
				pairs := make([]string, len(s.labels))
				for i, l := range s.labels {
					pairs[i] = l[0] + `="` + escapeLabel(l[1]) + `"`
				}
				bw.WriteString("{" + strings.Join(pairs, ",") + "}")
			}
			fmt.Fprintf(bw, " %s\n", strconv.FormatFloat(s.value, 'f', -1, 64))
		}
	}
	return bw.Flush()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(v string) string { return labelEscaper.Replace(v) }

// metricsFile is --metrics-file: checked and its temporary file made
// before the sweep, so that bad input changes nothing, and replaced
// atomically after it, so that the textfile collector never reads half a
// file.
type metricsFile struct {
	path string
	tmp  *os.File
}

// openMetricsFile refuses a path that is a directory or another non-regular
// file, whose directory is missing, or where no file can be created.
func openMetricsFile(path string) (*metricsFile, error) {
	refuse := func(format string, args ...any) error {
		return &usageError{msg: fmt.Sprintf("--metrics-file %s: ", path) + fmt.Sprintf(format, args...)}
	}
	switch info, err := os.Lstat(path); {
	case err == nil && info.IsDir():
		return nil, refuse("is a directory; name a file in it, such as %s", filepath.Join(path, "oma-sandbox-reaper.prom"))
	case err == nil && !info.Mode().IsRegular():
		return nil, refuse("is not a regular file (%v); it would be replaced", info.Mode().Type())
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, refuse("%v", unwrapPath(err))
	}
	dir := filepath.Dir(path)
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return nil, refuse("its directory %s does not exist", dir)
	}
	// Hidden and without .prom, so the collector skips it if left behind.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, refuse("cannot create a file in %s: %v", dir, unwrapPath(err))
	}
	return &metricsFile{path: path, tmp: tmp}, nil
}

// unwrapPath drops the path an *fs.PathError repeats.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// commit writes run's figures to the temporary file, makes it durable and
// renames it over the path. A run that failed keeps the last success time
// of the file it replaces, when that file has one.
func (m *metricsFile) commit(run *reapRun, finished time.Time) error {
	last := finished
	if !run.ok() || run.dryRun {
		last = previousSuccess(m.path)
	}
	var buf bytes.Buffer
	if err := writeExposition(&buf, run.families(last)); err != nil {
		return err
	}
	err := m.write(buf.Bytes())
	if err == nil {
		err = os.Rename(m.tmp.Name(), m.path)
	}
	if err != nil {
		m.discard()
		return fmt.Errorf("--metrics-file %s: %w", m.path, err)
	}
	m.tmp = nil
	syncDir(filepath.Dir(m.path))
	return nil
}

func (m *metricsFile) write(data []byte) error {
	if _, err := m.tmp.Write(data); err != nil {
		return err
	}
	// CreateTemp makes the file 0600; the collector may run as another user.
	if err := m.tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := m.tmp.Sync(); err != nil {
		return err
	}
	return m.tmp.Close()
}

// discard removes the temporary file unless it was committed.
func (m *metricsFile) discard() {
	if m.tmp == nil {
		return
	}
	m.tmp.Close()
	os.Remove(m.tmp.Name())
	m.tmp = nil
}

// syncDir makes a rename in dir durable. Best effort: the file is in place
// either way.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// maxMetricsFile bounds what previousSuccess reads of an earlier file.
const maxMetricsFile = 1 << 20

// previousSuccess reads the last success time from the metrics file at
// path; zero when there is none, or it is not a sample this command wrote.
func previousSuccess(path string) time.Time {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxMetricsFile))
	for sc.Scan() {
		value, ok := strings.CutPrefix(sc.Text(), metricPrefix+lastSuccessName+" ")
		if !ok {
			continue
		}
		secs, err := strconv.ParseFloat(value, 64)
		if err != nil || secs <= 0 || math.IsInf(secs, 0) || math.IsNaN(secs) {
			return time.Time{}
		}
		return time.UnixMilli(int64(math.Round(secs * 1000)))
	}
	return time.Time{}
}
