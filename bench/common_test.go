package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

var (
	latency = flag.Duration("bench.latency", 20*time.Millisecond,
		"FAKEMSB_LATENCY (or the in-memory msb's delay) for the rows that stand in for a VM round trip")
	searchFiles = flag.Int("bench.files", 100_000, "files in the glob and grep workspace")
	reapN       = flag.Int("bench.reap", 1000, "stale sandboxes, each with its volume, in the reaping row")
	sweepN      = flag.Int("bench.sweep", 10, "stale sessions on fakemsb in the invocation-count sweep row")
	sessions    = flag.Int("bench.sessions", 16, "concurrent sessions in the concurrency row (the full mode is 64)")
	callsPer    = flag.Int("bench.calls", 50, "mixed tool calls per session in the concurrency row")
)

// image is any name: fakemsb runs the host's userland whatever it is.
const image = "debian"

// requireFakemsb skips unless this host can run fakemsb's sandboxes.
func requireFakemsb(b testing.TB) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("fakemsb needs root for its bwrap namespace holders")
	}
	for _, tool := range []string{"bwrap", "nsenter", "setpriv", "rg"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("fakemsb's guests need %s on the host: %v", tool, err)
		}
	}
}

// newEnv is a private fakemsb with its invocation log, and latency injected
// into every invocation when lat > 0.
func newEnv(b *testing.B, lat time.Duration) *fakemsbtest.Env {
	b.Helper()
	requireFakemsb(b)
	env := fakemsbtest.New(b)
	if lat > 0 {
		env.SetKnob("FAKEMSB_LATENCY", lat.String())
	}
	return env
}

func newClient(env *fakemsbtest.Env) *msb.Client {
	return msb.NewClient(&msb.CLI{Path: env.Bin})
}

var sessionSeq atomic.Int64

// createSession opens a session whose calls each make one msb exec: no
// guest agent is placed, whatever this build bundles, so the rows that
// count or time exec calls measure the same thing under go test and make
// bench.
func createSession(ctx context.Context, client *msb.Client) (*microvm.Session, error) {
	return microvm.Create(ctx, sessionOptions(client, ""))
}

// createChannelSession opens a session that places the guest agent at
// agentFile, so that its calls travel over the agent's channel.
func createChannelSession(ctx context.Context, client *msb.Client, agentFile string) (*microvm.Session, error) {
	return microvm.Create(ctx, sessionOptions(client, agentFile))
}

func sessionOptions(client *msb.Client, agentFile string) microvm.Options {
	return microvm.Options{
		Client:      client,
		WorkspaceID: "bench",
		SessionID:   "s" + strconv.FormatInt(sessionSeq.Add(1), 10),
		Image:       image,
		AgentFile:   agentFile,
		NoChannel:   agentFile == "",
	}
}

// agentFile builds the guest agent (once per process) and gives b a
// private agent cache for Create to copy it into.
func agentFile(b *testing.B) string {
	b.Helper()
	b.Setenv("XDG_CACHE_HOME", b.TempDir())
	return agenttest.AgentBinary(b)
}

func mustSession(b *testing.B, client *msb.Client) *microvm.Session {
	b.Helper()
	return openSession(b, client, "")
}

func mustChannelSession(b *testing.B, client *msb.Client) *microvm.Session {
	b.Helper()
	return openSession(b, client, agentFile(b))
}

// openSession creates a session (see sessionOptions) that is closed when
// b ends, and fails b if it cannot.
func openSession(b *testing.B, client *msb.Client, agentFile string) *microvm.Session {
	b.Helper()
	s, err := microvm.Create(context.Background(), sessionOptions(client, agentFile))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func mustShell(b *testing.B, s session.Session, script string, args ...string) {
	b.Helper()
	res, err := s.Shell(context.Background(), session.Command{Script: script, Args: args},
		session.ShellOptions{GuestTimeout: 5 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	if res.ExitCode != 0 {
		b.Fatalf("setup script exited %d: %s", res.ExitCode, res.Stderr)
	}
}

// call runs one tool call and fails the benchmark on any error: a failing
// call measures nothing.
func call(b *testing.B, tb *tools.Toolbox, name string, input any) string {
	b.Helper()
	raw := mustJSON(b, input)
	out, err := tb.Call(context.Background(), name, raw, nil)
	if err != nil {
		b.Fatalf("%s %s: %v", name, raw, err)
	}
	return out
}

func mustJSON(b *testing.B, v any) json.RawMessage {
	b.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

func check(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

// floor is the least any msb-backed call can cost: one raw exec of true.
func floor(b *testing.B, client *msb.Client, sandbox string) {
	b.Helper()
	_, err := client.Exec(context.Background(), msb.ExecOptions{Name: sandbox, Argv: []string{"true"}}, msb.Streams{})
	check(b, err)
}

// bwrapFloor is the local benchmarks' floor: a fresh minimal bubblewrap
// sandbox running true. It skips b where there is no bwrap.
func bwrapFloor(b *testing.B) (floor func() error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		b.Skipf("the local backend needs bwrap: %v", err)
	}
	return func() error {
		return exec.Command(bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "/usr/bin/true").Run()
	}
}

// variant is one side of a row.
type variant struct {
	name string // "ours", "exec", "seed", "floor", "host", "bare"
	fn   func()
}

// sideBySide runs the variants of one operation in the same b.N loop, in
// an order that rotates each round so no side always runs first (a run of
// one round, -benchtime 1x, starts with the first variant), and reports
// each side's time and the ratios of ours to the others. Only ours
// runs with the benchmark timer on, so ns/op is ours.
type sideBySide struct {
	b     *testing.B
	total map[string]time.Duration
	order []string
	n     int
}

func newSideBySide(b *testing.B) *sideBySide {
	return &sideBySide{b: b, total: map[string]time.Duration{}}
}

func (s *sideBySide) round(vs ...variant) {
	if s.order == nil {
		for _, v := range vs {
			s.order = append(s.order, v.name)
		}
	}
	for i := range vs {
		v := vs[(i+s.n)%len(vs)]
		if v.name != "ours" {
			s.b.StopTimer()
		}
		start := time.Now()
		v.fn()
		s.total[v.name] += time.Since(start)
		if v.name != "ours" {
			s.b.StartTimer()
		}
	}
	s.n++
}

// report publishes ms/op for ours, NAME-ms/op for the others, and
// x-NAME = ours / NAME; with a floor, also NAME-x-floor for every other
// side (seed-x-floor, exec-x-floor).
func (s *sideBySide) report() {
	if s.n == 0 {
		return
	}
	ms := func(name string) float64 {
		return float64(s.total[name].Microseconds()) / 1000 / float64(s.n)
	}
	for _, name := range s.order {
		if name == "ours" {
			s.b.ReportMetric(ms(name), "ms/op")
			continue
		}
		s.b.ReportMetric(ms(name), name+"-ms/op")
		s.b.ReportMetric(ms("ours")/ms(name), "x-"+name)
	}
	if _, ok := s.total["floor"]; !ok {
		return
	}
	for _, name := range s.order {
		if name != "ours" && name != "floor" {
			s.b.ReportMetric(ms(name)/ms("floor"), name+"-x-floor")
		}
	}
}

// heapPeak runs fn and returns the high-water mark of this process's heap
// (live and not yet swept objects) above its level before fn, sampled
// every millisecond after a forced GC.
func heapPeak(fn func()) uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	runtime.GC()
	base := read()
	var peak atomic.Uint64
	peak.Store(base)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if v := read(); v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	}()
	fn()
	close(stop)
	wg.Wait()
	if v := read(); v > peak.Load() {
		peak.Store(v)
	}
	return peak.Load() - base
}

// resetPeakRSS restarts the kernel's peak-RSS counter (VmHWM) of this
// process, so peakRSS reports the peak of what follows.
func resetPeakRSS() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSS is this process's VmHWM in bytes.
func peakRSS() (uint64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}

// children lists the live processes whose parent is this process. Every
// msb invocation is one while it runs; none may remain after a call.
func children() []int {
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: state, ppid, ...
		s := string(data)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 || fields[0] == "Z" {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == self {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}

// percentile of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
