//go:build unix

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os/exec"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

var strict = flag.Bool("chaos.strict", false,
	"fail on the known issues of other packages (knownIssues) instead of logging them, and run their reproductions")

// knownIssue is a failure the suite found outside this package. TestChaos
// logs its occurrences; under -chaos.strict they fail it, and
// TestKnownIssues reproduces each one deterministically.
type knownIssue struct {
	id    string
	where string // what to change
	// errs matches the errors of operations this issue produces; nil when
	// the issue shows otherwise.
	errs func(op string, err error) bool
}

// knownIssues are the issues still open; TestKnownIssues keeps each fixed
// one as a regression test. None is open.
var knownIssues []knownIssue

// knownIssueOf returns the id of the known issue an error of op shows, or "".
func knownIssueOf(op string, err error) string {
	if err == nil {
		return ""
	}
	for _, k := range knownIssues {
		if k.errs != nil && k.errs(op, err) {
			return k.id
		}
	}
	return ""
}

// TestKnownIssues reproduces each issue the suite found: the fixed ones as
// ordinary regression tests, and those still in knownIssues (each subtest
// fails while its issue stands) under -chaos.strict.
func TestKnownIssues(t *testing.T) {
	requireFakemsb(t)
	ctx := context.Background()
	open := func(t *testing.T, env *fakemsbtest.Env) (*microvm.Session, *tools.Toolbox) {
		t.Helper()
		s, err := microvm.Create(ctx, microvm.Options{
			Client: msb.NewClient(&msb.CLI{Path: env.Bin}), WorkspaceID: "known", SessionID: "s", Image: "debian",
			NoChannel: true, // the faults below hit msb exec invocations
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(ctx) })
		tb := tools.New(s, tools.Options{})
		if _, err := tb.Call(ctx, "write", json.RawMessage(`{"path":"a.txt","content":"alpha\n"}`), nil); err != nil {
			t.Fatal(err)
		}
		return s, tb
	}

	t.Run("prepare-untyped", func(t *testing.T) {
		env := fakemsbtest.New(t)
		env.SetKnob("FAKEMSB_FAULTS", "exec#1=exit:1:error: exec failed: no such user")
		_, err := microvm.Create(ctx, microvm.Options{
			Client: msb.NewClient(&msb.CLI{Path: env.Bin}), WorkspaceID: "known", SessionID: "s", Image: "debian",
		})
		if err == nil || classify(err) == untyped {
			t.Errorf("create whose preparation exec fails: want a typed error, got %v", err)
		}
	})

	t.Run("edit-untyped", func(t *testing.T) {
		_, tb := open(t, fakemsbtest.New(t))
		_, err := tb.Call(ctx, "edit", json.RawMessage(`{"path":"a.txt","oldText":"omega","newText":"beta"}`), nil)
		if err == nil || classify(err) == untyped {
			t.Errorf("edit of text the file does not hold: want a typed error, got %v", err)
		}
	})

	t.Run("msb-killed-as-guest-exit", func(t *testing.T) {
		env := fakemsbtest.New(t)
		_, tb := open(t, env)
		// msb dies by SIGKILL after 5 bytes of output: exit status -1, which
		// msb never reports for a guest (a guest killed by a signal is 255).
		env.SetKnob("FAKEMSB_FAULTS", "exec#1=die-after:5")
		_, err := tb.Call(ctx, "read", json.RawMessage(`{"path":"a.txt"}`), nil)
		var guest *tools.GuestError
		if err == nil || errors.As(err, &guest) {
			t.Errorf("read while msb is killed: want an msb failure, got %v (%s)", err, classify(err))
		}
	})

	t.Run("read-cut-output", func(t *testing.T) {
		env := fakemsbtest.New(t)
		_, tb := open(t, env)
		// msb prints only the first half of stdout and exits 0.
		env.SetKnob("FAKEMSB_FAULTS", "exec#1=malformed")
		out, err := tb.Call(ctx, "read", json.RawMessage(`{"path":"a.txt"}`), nil)
		if err == nil || classify(err) == untyped {
			t.Errorf("read whose output msb cut short: want a typed error, got %q, %v", out, err)
		}
	})

	t.Run("search-operation-timeout", func(t *testing.T) {
		env := fakemsbtest.New(t)
		s, _ := open(t, env)
		tb := tools.New(s, tools.Options{OperationTimeout: time.Second})
		if _, err := tb.Call(ctx, "bash", json.RawMessage(`{"command":"mkfifo blocked"}`), nil); err != nil {
			t.Fatal(err)
		}
		// The session's own operation timeout is 10 s; the tools' is 1 s.
		start := time.Now()
		_, err := tb.Call(ctx, "grep", json.RawMessage(`{"pattern":"x","path":"/workspace/blocked"}`), nil)
		if !errors.Is(err, session.ErrGuestTimeout) && !errors.Is(err, session.ErrHostTimeout) {
			t.Errorf("grep on a fifo: want a timeout, got %v", err)
		}
		if d := time.Since(start); d > 6*time.Second {
			t.Errorf("grep ended after %v, past the tools' 1 s operation timeout", d)
		}
	})

	t.Run("glob-match-allocations", func(t *testing.T) {
		p, err := glob.Compile("42/17/*")
		if err != nil {
			t.Fatal(err)
		}
		paths := make([]string, 100_000)
		for i := range paths {
			paths[i] = fmt.Sprintf("%02d/%02d/%d", i/1000, i/10%100, i%10)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for _, rel := range paths {
			p.Match(rel)
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 2<<20 {
			t.Errorf("matching 100,000 paths allocated %d bytes, more than 2 MiB", n)
		}
	})

	t.Run("bash-kill-cut-by-channel", func(t *testing.T) {
		env := fakemsbtest.New(t)
		s, err := microvm.Create(ctx, microvm.Options{
			Client: msb.NewClient(&msb.CLI{Path: env.Bin}), WorkspaceID: "known", SessionID: "s", Image: "debian",
			AgentFile: agentFile(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(ctx) })
		// The bash call is cancelled; its kill exec, slowed down, is cut
		// by the agent's death.
		tb := tools.New(&killCutter{Session: s, env: env}, tools.Options{})
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err = tb.Call(cctx, "bash", json.RawMessage(`{"command":"sleep 5"}`), nil)
		cancel()
		if classify(err) == untyped {
			t.Errorf("bash cancelled: want a typed error, got %v", err)
		}
		if s.Poisoned() {
			t.Errorf("a bash kill cut by the channel's death poisoned the session: %v", err)
		}
	})

	t.Run("killed-create-holder", func(t *testing.T) {
		env := fakemsbtest.New(t)
		for attempt := range 5 {
			name := fmt.Sprintf("box%d", attempt)
			cmd := exec.Command(env.Bin, "create", "debian", "--name", name, "-q")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// As a client's deadline would: kill msb's process group once
			// the sandbox is recorded as Starting (its holder starts next)
			// or its holder is up. The state file is read first: it is
			// cheap, and a scan of the process table alone is often
			// slower than the rest of a create.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if env.Status(t, name) == "Starting" || slices.Contains(slices.Collect(maps.Values(env.HolderSandboxes())), name) {
					break
				}
			}
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			if cmd.Wait() == nil {
				continue // create finished first; try again
			}
			if !slices.Contains(env.Sandboxes(t), name) {
				t.Errorf("the sandbox of a create killed mid-start is not listed")
			}
			// What a session does after a create it killed.
			env.Run(t, "remove", "--force", "-q", name)
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if !slices.Contains(slices.Collect(maps.Values(env.HolderSandboxes())), name) {
					return
				}
			}
			t.Errorf("the holder of %s outlives its killed create and remove --force; fakemsb list shows nothing", name)
			return
		}
		t.Fatal("every create finished before it could be killed")
	})
}

// killCutter passes Shell calls to a session with the guest-agent channel
// on, and kills the channel's agent under the second one (a bash call's
// kill exec), which it slows down so that it is in flight then.
type killCutter struct {
	session.Session
	env *fakemsbtest.Env
	n   atomic.Int32
}

func (c *killCutter) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	if c.n.Add(1) == 2 {
		cmd.Script = "sleep 1\n" + cmd.Script
		agents := c.env.Channel(c.Name()).Agents
		timer := time.AfterFunc(300*time.Millisecond, func() {
			for _, pid := range agents {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		defer timer.Stop()
	}
	return c.Session.Shell(ctx, cmd, o)
}
