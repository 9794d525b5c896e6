package agentchan

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

// agent is a real oma-guest-agent started as a subprocess, as msb exec
// --stream would run it in a guest.
type agent struct {
	cmd    *exec.Cmd
	conn   *Conn
	waited chan struct{}
	stderr bytes.Buffer
}

func startAgent(t *testing.T, workdir string) *agent {
	t.Helper()
	bin := agenttest.AgentBinary(t)
	a := &agent{waited: make(chan struct{})}
	a.cmd = exec.Command(bin, "serve",
		"--default-user", fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()),
		"--default-workdir", workdir)
	a.cmd.Stderr = &a.stderr
	stdin, err := a.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = a.cmd.Wait(); close(a.waited) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if a.conn, err = Open(ctx, stdout, stdin); err != nil {
		_ = a.cmd.Process.Kill()
		<-a.waited
		t.Fatalf("%v\n%s", err, &a.stderr)
	}
	t.Cleanup(func() {
		a.conn.Close()
		select {
		case <-a.waited:
		case <-time.After(10 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.waited
			t.Errorf("the agent outlived its channel")
		}
	})
	return a
}

func run(t *testing.T, c *Conn, req Request) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.Run(ctx, req, Output{})
	if err != nil {
		t.Fatalf("%q: %v", req.Script, err)
	}
	return res
}

func TestAgentExitCodesAndStreams(t *testing.T) {
	a := startAgent(t, t.TempDir())
	res := run(t, a.conn, Request{Script: `echo out; echo err >&2; echo "$PWD"; exit 3`})
	if res.ExitCode != 3 || string(res.Stderr) != "err\n" || !strings.HasPrefix(string(res.Stdout), "out\n/") {
		t.Fatalf("got %+v", res)
	}
	if res := run(t, a.conn, Request{Script: "kill -9 $$"}); res.ExitCode != 255 {
		t.Fatalf("a signal death gave %d, want 255", res.ExitCode)
	}
	if res := run(t, a.conn, Request{Script: "cat; echo -n end"}); string(res.Stdout) != "end" {
		t.Fatalf("a call without stdin read %q", res.Stdout)
	}
}

// Output reaches the callbacks while the command still runs, in order.
func TestAgentStreams(t *testing.T) {
	dir := t.TempDir()
	a := startAgent(t, dir)
	gate := filepath.Join(dir, "gate")
	var stdout, stderr []byte
	out := Output{
		Stdout: func(b []byte) {
			if bytes.Contains(b, []byte("first")) {
				_ = os.WriteFile(gate, nil, 0o644)
			}
			stdout = append(stdout, b...)
		},
		Stderr: func(b []byte) { stderr = append(stderr, b...) },
	}
	script := `echo first; while [ ! -e "$1" ]; do sleep 0.01; done; for i in $(seq 1 200); do echo o$i; echo e$i >&2; done`
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := a.conn.Run(ctx, Request{Script: script, Args: []string{gate}}, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 0 || len(res.Stderr) != 0 {
		t.Fatal("streamed output also kept in the result")
	}
	var wantOut, wantErr strings.Builder
	wantOut.WriteString("first\n")
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&wantOut, "o%d\n", i)
		fmt.Fprintf(&wantErr, "e%d\n", i)
	}
	if string(stdout) != wantOut.String() || string(stderr) != wantErr.String() {
		t.Fatalf("stdout %q\nstderr %q", stdout, stderr)
	}
}

func TestAgentStdin(t *testing.T) {
	a := startAgent(t, t.TempDir())
	in := make([]byte, 5<<20)
	_, _ = rand.Read(in)
	res := run(t, a.conn, Request{Script: "cat", Stdin: bytes.NewReader(in)})
	if !bytes.Equal(res.Stdout, in) {
		t.Fatalf("stdin came back as %d bytes", len(res.Stdout))
	}
	// A command that never reads its stdin neither stalls nor blocks
	// other calls.
	start := time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if res := run(t, a.conn, Request{Script: "sleep 2; echo done", Stdin: bytes.NewReader(in)}); string(res.Stdout) != "done\n" {
			t.Errorf("got %q", res.Stdout)
		}
	}()
	if res := run(t, a.conn, Request{Script: "echo other"}); string(res.Stdout) != "other\n" || time.Since(start) > 1500*time.Millisecond {
		t.Errorf("another call took %s", time.Since(start))
	}
	wg.Wait()
	// Nor does one that closes it early.
	if res := run(t, a.conn, Request{Script: "head -c 10 >/dev/null; exec 0<&-; echo closed", Stdin: bytes.NewReader(in)}); string(res.Stdout) != "closed\n" {
		t.Fatalf("got %q", res.Stdout)
	}
}

func TestAgentArgsAnyBytes(t *testing.T) {
	a := startAgent(t, t.TempDir())
	args := []string{"", " two words ", "\xff\xfe", "new\nline", `'"$(x)\`, "é", strings.Repeat("a", 100<<10)}
	res := run(t, a.conn, Request{Script: `printf '%s\0' "$@"`, Args: args})
	if want := strings.Join(args, "\x00") + "\x00"; string(res.Stdout) != want {
		t.Fatalf("args came back as %q", res.Stdout)
	}
}

func TestAgentStartFailures(t *testing.T) {
	a := startAgent(t, t.TempDir())
	res := run(t, a.conn, Request{Script: "echo hi", Workdir: "/nonexistent/dir"})
	if res.ExitCode != 255 || len(res.Stdout)+len(res.Stderr) != 0 {
		t.Fatalf("a missing workdir gave %+v", res)
	}
	_, err := a.conn.Run(context.Background(), Request{Script: "echo hi", User: "no-such-user-here"}, Output{})
	if !errors.Is(err, ErrCannotStart) || !strings.Contains(err.Error(), "user not found: no-such-user-here") {
		t.Fatalf("an unknown user gave %v", err)
	}
}

// treeScript starts a background sleep, prints its pid and waits.
const treeScript = `sleep 100 & echo $!; wait`

func TestAgentGuestTimeoutKillsTree(t *testing.T) {
	a := startAgent(t, t.TempDir())
	var pid int
	start := time.Now()
	_, err := a.conn.Run(context.Background(), Request{Script: treeScript, Timeout: 500 * time.Millisecond},
		Output{Stdout: func(b []byte) { pid, _ = strconv.Atoi(strings.TrimSpace(string(b))) }})
	if !errors.Is(err, ErrTimedOut) || time.Since(start) > 5*time.Second {
		t.Fatalf("got %v after %s", err, time.Since(start))
	}
	requireGone(t, pid)
}

// A process orphaned inside the call (its parent exited) is no longer a
// descendant, but still in the call's process group: killed too. It
// ignores SIGHUP, which the kernel sends a stopped orphaned group.
func TestAgentGuestTimeoutKillsOrphans(t *testing.T) {
	a := startAgent(t, t.TempDir())
	var pid int
	_, err := a.conn.Run(context.Background(), Request{Script: "(trap '' HUP; sleep 100 & echo $!); sleep 100", Timeout: 500 * time.Millisecond},
		Output{Stdout: func(b []byte) { pid, _ = strconv.Atoi(strings.TrimSpace(string(b))) }})
	if !errors.Is(err, ErrTimedOut) {
		t.Fatalf("got %v", err)
	}
	requireGone(t, pid)
}

func TestAgentContextKillsTree(t *testing.T) {
	a := startAgent(t, t.TempDir())
	for _, tc := range []struct {
		name string
		want error
	}{{"deadline", context.DeadlineExceeded}, {"cancel", context.Canceled}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if tc.want == context.DeadlineExceeded {
				ctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
				defer cancel()
			}
			pids := make(chan int, 1)
			done := goRun(ctx, a.conn, Request{Script: treeScript}, Output{Stdout: func(b []byte) {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				pids <- pid
			}})
			pid := <-pids
			if tc.want == context.Canceled {
				cancel()
			}
			if r := wait(t, done); !errors.Is(r.err, tc.want) {
				t.Fatalf("got %v", r.err)
			}
			requireGone(t, pid)
		})
	}
}

// requireGone fails unless pid dies within a few seconds (a zombie that
// nobody reaps counts as dead).
func requireGone(t *testing.T, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatal("no pid")
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	t.Fatalf("process %d outlived its call", pid)
}

func TestAgentOutputCap(t *testing.T) {
	a := startAgent(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := a.conn.Run(ctx, Request{Script: "head -c 1000000 /dev/zero; sleep 100", MaxOutput: 1000}, Output{})
	if !errors.Is(err, ErrOutputOverflow) || len(res.Stdout) != 1000 {
		t.Fatalf("got %v with %d bytes", err, len(res.Stdout))
	}
	res = run(t, a.conn, Request{Script: "head -c 1000 /dev/zero", MaxOutput: 1000})
	if len(res.Stdout) != 1000 {
		t.Fatalf("output at the cap gave %d bytes", len(res.Stdout))
	}
}

func TestAgentConcurrentCalls(t *testing.T) {
	a := startAgent(t, t.TempDir())
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := run(t, a.conn, Request{Script: `sleep 0.2; echo "$1"; echo "$1" >&2`, Args: []string{strconv.Itoa(i)}})
			if want := fmt.Sprintf("%d\n", i); string(res.Stdout) != want || string(res.Stderr) != want {
				t.Errorf("call %d got %+v", i, res)
			}
		}()
	}
	wg.Wait()
}

// As with msb exec, a background child holding the pipes keeps its call
// open, but never other calls.
func TestAgentBackgroundChildHoldsOnlyItsCall(t *testing.T) {
	a := startAgent(t, t.TempDir())
	done := goRun(context.Background(), a.conn, Request{Script: "(sleep 2; echo late) &"}, Output{})
	start := time.Now()
	if res := run(t, a.conn, Request{Script: "echo quick"}); string(res.Stdout) != "quick\n" || time.Since(start) > 1500*time.Millisecond {
		t.Fatalf("another call took %s", time.Since(start))
	}
	if r := wait(t, done); r.err != nil || string(r.res.Stdout) != "late\n" {
		t.Fatalf("got %+v, %v", r.res, r.err)
	}
}

// An agent that dies fails its calls at once, and takes their processes
// with it (whatever user they run as) rather than leave them unwaited.
func TestAgentKilledMidCall(t *testing.T) {
	a := startAgent(t, t.TempDir())
	users := []string{""}
	if os.Geteuid() == 0 {
		users = append(users, "65534")
	}
	var pids []int
	var calls []<-chan runResult
	for _, user := range users {
		got := make(chan int, 1)
		calls = append(calls, goRun(context.Background(), a.conn, Request{Script: "echo $$; exec sleep 100", User: user, Workdir: "/"},
			Output{Stdout: func(b []byte) {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				got <- pid
			}}))
		pids = append(pids, <-got)
	}
	_ = a.cmd.Process.Kill()
	start := time.Now()
	for _, done := range calls {
		if r := wait(t, done); !errors.Is(r.err, ErrBroken) || time.Since(start) > 2*time.Second {
			t.Fatalf("got %v after %s", r.err, time.Since(start))
		}
	}
	for _, pid := range pids {
		requireGone(t, pid)
	}
}

// Closing the channel ends the agent, which kills what still runs.
func TestAgentCloseKillsCalls(t *testing.T) {
	a := startAgent(t, t.TempDir())
	pids := make(chan int, 1)
	done := goRun(context.Background(), a.conn, Request{Script: treeScript}, Output{Stdout: func(b []byte) {
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		pids <- pid
	}})
	pid := <-pids
	a.conn.Close()
	if r := wait(t, done); !errors.Is(r.err, ErrBroken) {
		t.Fatalf("got %v", r.err)
	}
	select {
	case <-a.waited:
	case <-time.After(5 * time.Second):
		t.Fatal("the agent outlived its channel")
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the agent exited %d: %s", code, &a.stderr)
	}
	requireGone(t, pid)
}

func TestAgentSwitchesUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	a := startAgent(t, t.TempDir())
	res := run(t, a.conn, Request{Script: "id -u; id -g; id -G", User: "65534", Workdir: "/"})
	if string(res.Stdout) != "65534\n65534\n65534\n" {
		t.Fatalf("as 65534: %q %q", res.Stdout, res.Stderr)
	}
	res = run(t, a.conn, Request{Script: "id -u; id -g", User: "65534:0", Workdir: "/"})
	if string(res.Stdout) != "65534\n0\n" {
		t.Fatalf("as 65534:0: %q", res.Stdout)
	}
	if res := run(t, a.conn, Request{Script: "id -u", User: "root"}); string(res.Stdout) != "0\n" {
		t.Fatalf("as root: %q", res.Stdout)
	}
}

// BenchmarkAgentRun measures one call's round trip through a real agent
// (no msb in between): the channel's own cost per tool call.
func BenchmarkAgentRun(b *testing.B) {
	bin := agenttest.AgentBinary(b)
	cmd := exec.Command(bin, "serve", "--default-workdir", b.TempDir())
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	c, err := Open(context.Background(), stdout, stdin)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for b.Loop() {
		if res, err := c.Run(ctx, Request{Script: "echo hi"}, Output{}); err != nil || string(res.Stdout) != "hi\n" {
			b.Fatal(res, err)
		}
	}
}

// The channel dies at random points (the agent killed, or Close) while
// calls of every kind are in flight: every Run returns promptly with a
// result or ErrBroken, and nothing is left behind (goleak, and the
// agent's exit).
func TestAgentDiesAtRandomPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	scripts := []Request{
		{Script: "echo quick"},
		{Script: "head -c 200000 /dev/urandom | od | head -c 100000"},
		{Script: "cat", Stdin: bytes.NewReader(make([]byte, 1<<20))},
		{Script: "sleep 0.05; echo slow >&2"},
		// Short sleeps: a grandchild outlives an agent killed with SIGKILL.
		{Script: "sleep 2 & wait", Timeout: 30 * time.Millisecond},
		{Script: "(sleep 0.2; echo bg) &"},
	}
	for i := range 12 {
		dir := t.TempDir()
		// An agent SIGKILLed between stopping a timed-out call's tree and
		// killing it leaves the grandchild stopped for good: the kernel
		// sends an orphaned group SIGHUP and SIGCONT only if its members had
		// already stopped when the agent died. Each round removes what its
		// calls left (they run in dir).
		t.Cleanup(func() { killProcsIn(dir) })
		a := startAgent(t, dir)
		var wg sync.WaitGroup
		errs := make(chan error, len(scripts))
		for _, req := range scripts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if req.Stdin != nil {
					req.Stdin = bytes.NewReader(make([]byte, 1<<20))
				}
				_, err := a.conn.Run(ctx, req, Output{})
				if err != nil && !errors.Is(err, ErrBroken) && !errors.Is(err, ErrTimedOut) {
					errs <- err
				}
			}()
		}
		time.Sleep(time.Duration(i*7%60) * time.Millisecond)
		if i%2 == 0 {
			_ = a.cmd.Process.Kill()
		} else {
			a.conn.Close()
		}
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: calls hung after the channel died", i)
		}
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", i, err)
		}
	}
}

// killProcsIn SIGKILLs every process whose working directory is dir.
func killProcsIn(dir string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && strings.TrimSuffix(cwd, " (deleted)") == dir {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
