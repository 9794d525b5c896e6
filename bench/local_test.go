package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// BenchmarkLocal is the local backend's cost per tool call, side by side
// in one run: a frame to the guest agent in the session's resident sandbox
// (ours; where the host cannot start one, a sandbox per call), the agent's
// builtin in a fresh bubblewrap sandbox per call ("per-call"), the
// floor (a fresh minimal bubblewrap sandbox running true) and the same tool
// with the host's bash and no isolation at all ("host":
// internal/sessiontest.Host).
func BenchmarkLocal(b *testing.B) {
	floor := bwrapFloor(b)
	ctx := context.Background()
	open := func(id string, perCall bool) *local.Session {
		sess, err := local.Create(ctx, local.Options{StateDir: b.TempDir(), WorkspaceID: "bench", SessionID: id,
			AgentFile: agenttest.AgentBinary(b), SandboxPerCall: perCall})
		if err != nil {
			b.Skipf("the local backend cannot run here: %v", err)
		}
		b.Cleanup(func() { _ = sess.Close(ctx) })
		mustShell(b, sess, fixtureScript)
		return sess
	}
	sess, perCallSess := open("local", false), open("percall", true)
	host := sessiontest.NewHost(b)
	mustShell(b, host, fixtureScript)
	ours, perCall := tools.New(sess, tools.Options{}), tools.New(perCallSess, tools.Options{})
	bare := tools.New(host, tools.Options{})
	// Each session keeps its own edit flips.
	hostRows := toolRows(host.Paths().Workspace)
	perCallRows := toolRows(sess.Paths().Workspace)
	// The program grep and bash start, alone, started from here (rg with
	// the flags the agent's grep builtin gives it): what no engine around
	// it can go below.
	programs := map[string][]string{
		"grep": {"rg", "--no-config", "--hidden", "--no-ignore", "--color", "never", "--count", "--with-filename", "--null", "--no-mmap", "--sort", "path", "--", "needle", host.Paths().Workspace + "/bench"},
		"bash": {"/bin/bash", "-c", "echo hello"},
	}
	for i, row := range toolRows(sess.Paths().Workspace) {
		b.Run("tool="+row.name, func(b *testing.B) {
			s := newSideBySide(b)
			vs := []variant{
				{"ours", func() { row.ours(b, ours) }},
				{"per-call", func() { perCallRows[i].ours(b, perCall) }},
				{"floor", func() { check(b, floor()) }},
				{"host", func() { hostRows[i].ours(b, bare) }},
			}
			if argv := programs[row.name]; argv != nil {
				vs = append(vs, variant{"program", func() { check(b, exec.Command(argv[0], argv[1:]...).Run()) }})
			}
			for b.Loop() {
				s.round(vs...)
			}
			s.report()
		})
	}
	b.Logf("resident sandbox calls: %d of ours", sess.Served().Resident)
}

// BenchmarkLocalPolicies is what a session's policy costs a call, side by
// side in one run: read and bash on a session with an egress allowlist
// (ours: its resident sandbox, the agent relaying to the sandbox's proxy),
// one with memory and CPU limits ("limits": the resident sandbox in its
// cgroups), one with a process limit ("processes": each command joins the
// sandbox's commands group through a shim), one with none of these
// ("plain"), the allowlist session's calls in a sandbox each ("per-call",
// as every allowlist call ran before) and the floor.
func BenchmarkLocalPolicies(b *testing.B) {
	floor := bwrapFloor(b)
	ctx := context.Background()
	allow, err := egress.ParseTarget("127.0.0.1:9")
	if err != nil {
		b.Fatal(err)
	}
	allowlist := local.Policy{Network: local.NetworkAllowlist, Allow: []egress.Target{allow}}
	open := func(id string, o local.Options) *tools.Toolbox {
		o.StateDir, o.WorkspaceID, o.SessionID, o.AgentFile = b.TempDir(), "bench", id, agenttest.AgentBinary(b)
		sess, err := local.Create(ctx, o)
		if err != nil {
			b.Skipf("the local backend cannot run here: %v", err)
		}
		b.Cleanup(func() { _ = sess.Close(ctx) })
		mustShell(b, sess, fixtureScript)
		return tools.New(sess, tools.Options{})
	}
	ours := open("allowlist", local.Options{Policy: allowlist})
	limited := open("limits", local.Options{Limits: local.Limits{MemoryBytes: 256 << 20, CPUQuota: 100 * time.Millisecond}})
	processes := open("processes", local.Options{Limits: local.Limits{Processes: 256}})
	plain := open("plain", local.Options{})
	perCall := open("percall", local.Options{Policy: allowlist, SandboxPerCall: true})
	for _, tc := range []struct{ tool, input string }{
		{"read", `{"path":"bench/read.txt"}`},
		{"bash", `{"command":"echo hi"}`},
	} {
		call := func(tb *tools.Toolbox) func() {
			return func() {
				if _, err := tb.Call(ctx, tc.tool, []byte(tc.input), nil); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run("tool="+tc.tool, func(b *testing.B) {
			s := newSideBySide(b)
			for b.Loop() {
				s.round(
					variant{"ours", call(ours)},
					variant{"limits", call(limited)},
					variant{"processes", call(processes)},
					variant{"plain", call(plain)},
					variant{"per-call", call(perCall)},
					variant{"floor", func() { check(b, floor()) }},
				)
			}
			s.report()
		})
	}
}

// BenchmarkConcurrentLocal is BenchmarkConcurrent's row on the local
// backend: -bench.sessions sessions at once through one process, each
// making -bench.calls tool calls from mix, first as frames to each
// session's resident sandbox (ours; the first call starts it), then on as
// many sessions with a sandbox per call ("per-call"), then as many fresh
// minimal bubblewrap sandboxes running true (the floor). It reports what
// BenchmarkConcurrent does, and fails unless nothing is left once every
// session closed: goroutines, and processes binding any session's
// workspace (a sandbox, and everything in its pid namespace).
func BenchmarkConcurrentLocal(b *testing.B) {
	floor := bwrapFloor(b)
	ctx := context.Background()
	agent := agenttest.AgentBinary(b)
	n, perSession := *sessions, *callsPer
	ours := phase{name: "tool calls in resident sandboxes"}
	perCall := phase{name: "tool calls in a sandbox each"}
	floors := phase{name: "floor calls"}
	var heap, rss uint64
	leftG, leftP := 0, 0
	resident := 0
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		goroutines := runtime.NumGoroutine()
		state := b.TempDir()
		open := func(perCall bool) []*local.Session {
			out := make([]*local.Session, n)
			var opening errgroup.Group
			opening.SetLimit(4)
			for i := range n {
				opening.Go(func() (err error) {
					out[i], err = local.Create(ctx, local.Options{StateDir: state, WorkspaceID: "bench", SessionID: fmt.Sprint(i),
						AgentFile: agent, SandboxPerCall: perCall})
					return err
				})
			}
			err := opening.Wait()
			for _, s := range out {
				if s != nil {
					b.Cleanup(func() { _ = s.Close(ctx) })
				}
			}
			if err != nil {
				b.Skipf("the local backend cannot run here: %v", err)
			}
			return out
		}
		residents, perCalls := open(false), open(true)
		check(b, resetPeakRSS())
		b.StartTimer()
		h := heapPeak(func() { ours.run(b, seams(residents), perSession, mixCalls(b, seams(residents))) })
		b.StopTimer()
		r, err := peakRSS()
		check(b, err)
		heap, rss = max(heap, h), max(rss, r)
		for _, s := range residents {
			resident += s.Served().Resident
		}
		perCall.run(b, seams(perCalls), perSession, mixCalls(b, seams(perCalls)))
		floors.run(b, seams(perCalls), perSession, func(int, int) (string, error) {
			return "bwrap true", floor()
		})
		all := append(residents, perCalls...)
		check(b, parallel(len(all), func(i int) error { return all[i].Close(ctx) }))
		g, p := settle(b, goroutines, func() []int { return workspaceBinders(state) })
		leftG, leftP = max(leftG, g), max(leftP, p)
		b.StartTimer()
	}
	reportRow(b, &ours, &perCall, &floors, "per-call-", heap, rss, leftG, leftP)
	b.Logf("calls the resident sandboxes ran: %d of %d", resident, len(ours.lat))
	if leftG != 0 || leftP != 0 {
		b.Errorf("after every session closed: %d goroutines and %d processes more than before", leftG, leftP)
	}
}

// workspaceBinders lists the processes whose command line names a
// directory under state: every sandbox of its sessions binds its
// workspace there.
func workspaceBinders(state string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(cmdline, []byte(state+"/")) {
			out = append(out, pid)
		}
	}
	return out
}

// BenchmarkLocalCLI is one tool call through the one-shot CLI,
// `oma-sandbox tool NAME TOOL JSON`, a process per call attaching to a
// local session as root (ours: the call joins the session's resident
// sandbox through its socket), side by side with the CLI's own start
// ("start": `oma-sandbox tool --list`, which attaches to nothing), the same
// start of the CLI built with cgo ("start-cgo": what a plain `go build`
// gives where a C compiler is installed), the same call on the same session
// made by a program that links only the library ("lean": testdata/leantool,
// without the MCP server and the OpenTelemetry SDK the CLI links, whose
// packages' start every CLI command pays) and the floor (a fresh minimal
// bubblewrap sandbox running true). Both programs are built as `make build`
// builds the CLI, without cgo.
func BenchmarkLocalCLI(b *testing.B) {
	floor := bwrapFloor(b)
	cli, cgoCLI := buildCommand(b, cliPackage, "0"), buildCommand(b, cliPackage, "1")
	lean := buildCommand(b, "./testdata/leantool", "0")
	state, name := cliSession(b, cli)
	runWith := func(cli string, args ...string) string { return runCLI(b, cli, state, args...) }
	run := func(args ...string) string { return runWith(cli, args...) }
	run("tool", name, "write", `{"path":"notes.txt","content":"one\ntwo\n"}`)
	for _, row := range []struct{ tool, input string }{
		{"read", `{"path":"notes.txt"}`},
		{"write", `{"path":"out.txt","content":"x\n"}`},
		{"ls", `{}`},
		{"bash", `{"command":"echo hi"}`},
	} {
		b.Run("tool="+row.tool, func(b *testing.B) {
			s := newSideBySide(b)
			for b.Loop() {
				s.round(
					variant{"ours", func() { run("tool", name, row.tool, row.input) }},
					variant{"start", func() { run("tool", "--list") }},
					variant{"start-cgo", func() { runWith(cgoCLI, "tool", "--list") }},
					variant{"lean", func() {
						if out, err := exec.Command(lean, state, name, row.tool, row.input).CombinedOutput(); err != nil {
							b.Fatalf("leantool %s: %v\n%s", row.tool, err, out)
						}
					}},
					variant{"floor", func() { check(b, floor()) }},
				)
			}
			s.report()
		})
	}
}

// cliPackage is oma-sandbox's command, for buildCommand.
const cliPackage = "../cmd/oma-sandbox"

// buildCommand builds the command pkg with CGO_ENABLED=cgo into a directory
// b removes.
func buildCommand(b *testing.B, pkg, cgo string) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building %s (CGO_ENABLED=%s): %v\n%s", pkg, cgo, err, out)
	}
	return bin
}

// runCLI runs cli with args on the state directory state and returns its
// output, failing b if it fails.
func runCLI(b *testing.B, cli, state string, args ...string) string {
	b.Helper()
	out, err := exec.Command(cli, append([]string{"--state-dir", state}, args...)...).Output()
	if err != nil {
		b.Fatalf("oma-sandbox %q: %v", args, err)
	}
	return string(out)
}

// cliSession creates a local session with cli in a new state directory and
// removes it when b ends.
func cliSession(b *testing.B, cli string) (state, name string) {
	b.Helper()
	state = b.TempDir()
	name = strings.TrimSpace(runCLI(b, cli, state, "session", "create", "--backend", "local"))
	b.Cleanup(func() { runCLI(b, cli, state, "session", "rm", name) })
	return state, name
}
