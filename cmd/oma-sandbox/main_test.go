package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/oma-sandbox/oma-sandbox/guestagent/bundle"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
	"github.com/oma-sandbox/oma-sandbox/mcpserver"
	"github.com/oma-sandbox/oma-sandbox/session/local"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"oma-sandbox": main})
}

type fakemsbKey struct{}

// TestScripts runs testdata/script/*.txtar. Each script gets its own
// fakemsb (OMA_MSB), HOME and local state directory (XDG_STATE_HOME). The
// fakemsb's doctor fails (knob FAKEMSB_DOCTOR), so auto picks local on every
// host.
//
// The condition [agent] holds when this build bundles the guest agent.
//
// Commands beside testscript's own:
//
//	status N PROG [ARG...]   run PROG; fail unless it exits with N
//	capture VAR [REGEXP]     set $VAR to the last command's stdout, trimmed, or to
//	                         the first group of REGEXP's first match in it
//	msbcalls reset|N         forget fakemsb's log | fail unless it logged N invocations since
//	knob NAME [VALUE]        set (or unset) a fakemsb knob such as FAKEMSB_FAULTS
//	waitfile DIR NAME        wait up to 20s for a file NAME anywhere below DIR
//	mcpclient [-http] [-exit N] TOOL JSON... -- MCPARGS...
//	                         run `oma-sandbox mcp MCPARGS`, list its tools, call
//	                         each TOOL with JSON, then disconnect (stdio) or send
//	                         SIGTERM (-http, with a token in OMA_MCP_TOKEN); fail
//	                         unless the server exits 0 (or N)
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(e *testscript.Env) error {
			env := fakemsbtest.New(t)
			home := filepath.Join(e.WorkDir, ".home")
			if err := os.MkdirAll(home, 0o755); err != nil {
				return err
			}
			e.Setenv("HOME", home)
			e.Setenv("XDG_STATE_HOME", filepath.Join(e.WorkDir, ".state"))
			// A script that fails midway leaves its local sessions: their
			// sandboxes, which outlive the commands, end with the script.
			e.Defer(func() {
				_, _ = local.Reap(context.Background(), filepath.Join(e.WorkDir, ".state", "oma-sandbox", "local"), 0, time.Now().Add(time.Hour), false)
			})
			e.Setenv("OMA_MSB", env.Bin)
			e.Setenv("FAKEMSB_HOME", env.Home)
			e.Setenv("FAKEMSB_LOG", env.LogPath)
			// testscript puts its command directory first on PATH.
			e.Setenv("OMA_BIN_DIR", filepath.SplitList(e.Getenv("PATH"))[0])
			// Under -race every process would sleep 1s at exit by default.
			e.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
			// Every script starts on a host whose msb cannot boot a VM, as
			// real msb answers on one, whatever this host has; a script
			// clears the knob to play a KVM host.
			env.SetKnob("FAKEMSB_DOCTOR", "CPU virtualization is not available")
			e.Values[fakemsbKey{}] = env
			return nil
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "agent": // this build bundles the guest agent (make agent)
				_, ok := bundle.Binary(bundle.GuestArch())
				return ok, nil
			case "cgroups": // the local backend enforces memory and CPU limits here
				return enforcesSize(), nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"status":   cmdStatus,
			"capture":  cmdCapture,
			"knob":     cmdKnob,
			"waitfile": cmdWaitFile,
			"msbcalls": func(ts *testscript.TestScript, neg bool, args []string) {
				cmdMsbCalls(t, ts, neg, args)
			},
			"mcpclient": cmdMCPClient,
		},
	})
}

// enforcesSize reports whether the local backend enforces a session's
// memory and CPU limits here; one probe serves every script.
var enforcesSize = sync.OnceValue(func() bool {
	limits := local.Probe(context.Background()).Limits
	return limits[local.LimitMemory].Evidence == local.EvidenceFull && limits[local.LimitCPU].Evidence == local.EvidenceFull
})

func cmdStatus(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: status N PROG [ARG...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("status: %v", err)
	}
	got := 0
	var exitErr *exec.ExitError
	switch err := ts.Exec(args[1], args[2:]...); {
	case errors.As(err, &exitErr):
		got = exitErr.ExitCode()
	case err != nil:
		ts.Fatalf("status: %v", err)
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

func cmdCapture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: capture VAR [REGEXP]")
	}
	value := strings.TrimSpace(ts.ReadFile("stdout"))
	if len(args) == 2 {
		m := regexp.MustCompile("(?m)" + args[1]).FindStringSubmatch(value)
		if len(m) != 2 {
			ts.Fatalf("capture: %s has no match with one group in %q", args[1], value)
		}
		value = m[1]
	}
	ts.Setenv(args[0], value)
}

func fakemsbOf(ts *testscript.TestScript) *fakemsbtest.Env {
	return ts.Value(fakemsbKey{}).(*fakemsbtest.Env)
}

func cmdKnob(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: knob NAME [VALUE]")
	}
	fakemsbOf(ts).SetKnob(args[0], strings.Join(args[1:], ""))
}

func cmdMsbCalls(t *testing.T, ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: msbcalls reset|N")
	}
	env := fakemsbOf(ts)
	if args[0] == "reset" {
		env.ResetLog(t)
		return
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("msbcalls: %v", err)
	}
	var got []string
	for _, inv := range env.Invocations(t) {
		got = append(got, strings.Join(inv.Argv[:min(len(inv.Argv), 2)], " "))
	}
	if len(got) != want {
		ts.Fatalf("fakemsb logged %d invocations, want %d: %q", len(got), want, got)
	}
}

func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waitfile DIR NAME")
	}
	found := errors.New("found")
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		err := filepath.WalkDir(ts.MkAbs(args[0]), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == args[1] {
				return found
			}
			return nil
		})
		if err == found {
			return
		}
	}
	ts.Fatalf("no file named %s under %s", args[1], args[0])
}

func cmdMCPClient(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! mcpclient")
	}
	useHTTP, wantExit := false, 0
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "--" {
		switch {
		case args[0] == "-http":
			useHTTP, args = true, args[1:]
		case args[0] == "-exit" && len(args) > 1:
			n, err := strconv.Atoi(args[1])
			if err != nil {
				ts.Fatalf("mcpclient -exit %q: %v", args[1], err)
			}
			wantExit, args = n, args[2:]
		default:
			ts.Fatalf("mcpclient: unknown option %s", args[0])
		}
	}
	sep := -1
	for i, a := range args {
		if a == "--" {
			sep = i
			break
		}
	}
	if sep < 0 || sep%2 != 0 {
		ts.Fatalf("usage: mcpclient [-http] [-exit N] TOOL JSON... -- MCPARGS...")
	}
	calls, mcpArgs := args[:sep], append([]string{"mcp"}, args[sep+1:]...)
	var endpoint string
	if useHTTP {
		endpoint = freeLoopback(ts)
		mcpArgs = append(mcpArgs, "--http", endpoint)
	}
	cmd := exec.Command("oma-sandbox", mcpArgs...)
	cmd.Dir = ts.MkAbs(".")
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "XDG_STATE_HOME", "OMA_MSB", "GORACE"} {
		cmd.Env = append(cmd.Env, k+"="+ts.Getenv(k))
	}
	token := mcpserver.NewToken()
	cmd.Env = append(cmd.Env, "OMA_MCP_TOKEN="+token)
	stderr := &testutil.LockedBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "oma-sandbox-test", Version: "1"}, nil)

	var transport mcp.Transport = &mcp.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}
	if useHTTP {
		if err := cmd.Start(); err != nil {
			ts.Fatalf("start mcp: %v", err)
		}
		waitListening(ts, endpoint, stderr)
		transport = &mcp.StreamableClientTransport{Endpoint: "http://" + endpoint + "/mcp", MaxRetries: -1,
			HTTPClient: &http.Client{Transport: bearer(token)}}
	}
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		ts.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	out := ts.Stdout()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		ts.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	fmt.Fprintf(out, "tools: %s\n", strings.Join(names, ","))
	for i := 0; i < len(calls); i += 2 {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: calls[i], Arguments: rawArgs(calls[i+1])})
		if err != nil {
			ts.Fatalf("tools/call %s: %v", calls[i], err)
		}
		fmt.Fprintf(out, "%s isError=%v\n", calls[i], res.IsError)
		for _, c := range res.Content {
			if text, ok := c.(*mcp.TextContent); ok {
				fmt.Fprintln(out, text.Text)
			}
		}
	}
	if useHTTP {
		scrapeMetrics(ts, "http://"+endpoint+mcpserver.MetricsPath, token)
		_ = cs.Close()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			ts.Fatalf("signal mcp: %v", err)
		}
		err = cmd.Wait()
	} else {
		err = cs.Close() // closes stdin and waits for the server to exit
	}
	fmt.Fprint(ts.Stderr(), stderr.String())
	var exitErr *exec.ExitError
	switch {
	case wantExit != 0 && errors.As(err, &exitErr) && exitErr.ExitCode() == wantExit:
	case wantExit != 0:
		ts.Fatalf("mcp server: %v, want exit status %d\n%s", err, wantExit, stderr.String())
	case err != nil:
		ts.Fatalf("mcp server: %v\n%s", err, stderr.String())
	}
}

// scrapeMetrics gets url with the token, parses it as the Prometheus text
// format, and prints "metric NAME{LABELS} VALUE" for each sample of the
// project's own families (a histogram's count only), sorted; a request
// without the token must be refused.
func scrapeMetrics(ts *testscript.TestScript, url, token string) {
	res, err := http.Get(url)
	if err != nil {
		ts.Fatalf("GET %s: %v", url, err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		ts.Fatalf("GET %s without the token: %s", url, res.Status)
	}
	res, err = (&http.Client{Transport: bearer(token)}).Get(url)
	if err != nil {
		ts.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		ts.Fatalf("GET %s: %s", url, res.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		ts.Fatalf("parsing %s: %v", url, err)
	}
	var lines []string
	for name, f := range families {
		if !strings.HasPrefix(name, "oma_sandbox_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				if !strings.HasPrefix(l.GetName(), "otel_scope_") {
					labels = append(labels, l.GetName()+"="+strconv.Quote(l.GetValue()))
				}
			}
			sort.Strings(labels)
			var v float64
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				name, v = name+"_count", float64(m.GetHistogram().GetSampleCount())
			}
			lines = append(lines, fmt.Sprintf("metric %s{%s} %g", name, strings.Join(labels, ","), v))
			name = f.GetName()
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Fprintln(ts.Stdout(), l)
	}
}

// bearer sends the server's token with every request.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// rawArgs passes a tool's JSON arguments through unchanged.
type rawArgs string

func (r rawArgs) MarshalJSON() ([]byte, error) { return []byte(r), nil }

func freeLoopback(ts *testscript.TestScript) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ts.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitListening(ts *testscript.TestScript, addr string, stderr *testutil.LockedBuffer) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
	}
	ts.Fatalf("mcp server never listened on %s\n%s", addr, stderr.String())
}
