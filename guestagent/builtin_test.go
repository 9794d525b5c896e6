//go:build linux

package guestagent

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// withBuiltin registers fn as name for one test.
func withBuiltin(t *testing.T, name string, fn builtin) {
	t.Helper()
	builtins[name] = fn
	t.Cleanup(func() { delete(builtins, name) })
}

func builtinLine(id int, name string, stdin bool, timeoutMS int64, maxOutput int64, args ...string) string {
	run := &agentwire.Run{ID: uint64(id), Builtin: name, MaxOutput: maxOutput, Stdin: stdin, TimeoutMS: timeoutMS}
	for _, a := range args {
		run.Args = append(run.Args, []byte(a))
	}
	b, err := agentwire.Append(nil, run)
	if err != nil {
		panic(err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// collect gathers each call's output and exit from an agent's frames.
func collect(frames []agentwire.Frame) (out map[uint64]string, exits map[uint64]*agentwire.Exit) {
	out, exits = map[uint64]string{}, map[uint64]*agentwire.Exit{}
	for _, f := range frames {
		switch f := f.(type) {
		case *agentwire.Out:
			out[f.ID] += fmt.Sprintf("%d:%s|", f.FD, f.Data)
		case *agentwire.Exit:
			exits[f.ID] = f
		}
	}
	return out, exits
}

// A builtin gets the run's args, stdin, user and workdir; its output goes
// out as frames and its status ends the call; the hello names it.
func TestBuiltinCall(t *testing.T) {
	withBuiltin(t, "test-echo", func(c *builtinCall) int {
		in, err := io.ReadAll(c.Stdin)
		if err != nil {
			return 9
		}
		fmt.Fprintf(c.Stdout, "args=%q stdin=%q", c.Args, in)
		fmt.Fprintf(c.Stderr, "uid=%d dir-set=%v", c.User.uid, c.Workdir != "")
		return 7
	})
	err, frames := serveHost(t,
		builtinLine(1, "test-echo", true, 0, 1<<20, "a b", "c"),
		stdinLine(1, 3), `{"type":"eof","id":1}`,
		builtinLine(2, "test-echo", false, 0, 1<<20),
		builtinLine(3, "no-such", false, 0, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	hello := frames[0].(*agentwire.Hello)
	if !strings.Contains(strings.Join(hello.Builtins, " "), "test-echo") {
		t.Fatalf("hello lists %q", hello.Builtins)
	}
	out, exits := collect(frames)
	want := fmt.Sprintf(`1:args=["a b" "c"] stdin="xxx"|2:uid=%d dir-set=true|`, os.Geteuid())
	if out[1] != want || exits[1].Code != 7 {
		t.Fatalf("call 1: %q %+v, want %q and 7", out[1], exits[1], want)
	}
	if !strings.HasPrefix(out[2], `1:args=[] stdin=""|`) || exits[2].Code != 7 {
		t.Fatalf("call 2: %q %+v", out[2], exits[2])
	}
	if exits[3].Error != `unknown builtin "no-such"` {
		t.Fatalf("call 3: %+v", exits[3])
	}
}

// A kill frame, the guest timer and the output cap each close Killed, and
// the exit says which.
func TestBuiltinEnds(t *testing.T) {
	withBuiltin(t, "test-wait", func(c *builtinCall) int {
		<-c.Killed
		return 3
	})
	withBuiltin(t, "test-flood", func(c *builtinCall) int {
		chunk := bytes.Repeat([]byte("y"), 1000)
		for {
			if _, err := c.Stdout.Write(chunk); err != nil {
				<-c.Killed
				return 4
			}
		}
	})
	err, frames := serveHost(t,
		builtinLine(1, "test-wait", false, 0, 1<<20), pause, `{"type":"kill","id":1}`,
		builtinLine(2, "test-wait", false, 50, 1<<20),
		builtinLine(3, "test-flood", false, 0, 2500), pause)
	if err != nil {
		t.Fatal(err)
	}
	out, exits := collect(frames)
	if e := exits[1]; e == nil || e.Code != 3 || e.TimedOut {
		t.Fatalf("killed: %+v", e)
	}
	if e := exits[2]; e == nil || e.Code != 3 || !e.TimedOut {
		t.Fatalf("timed out: %+v", e)
	}
	if e := exits[3]; e == nil || e.Code != 4 || !e.Overflow || len(out[3]) != 2500+3*len("1:|") {
		t.Fatalf("overflow: %+v, %d bytes out", e, len(out[3]))
	}
}

// A workdir that is no directory gives msb's 255, as for a script.
func TestBuiltinMissingWorkdir(t *testing.T) {
	withBuiltin(t, "test-echo", func(c *builtinCall) int { return 0 })
	run := &agentwire.Run{ID: 1, Builtin: "test-echo", MaxOutput: 1, Workdir: "/nonexistent/dir"}
	line, _ := agentwire.Append(nil, run)
	err, frames := serveHost(t, strings.TrimSuffix(string(line), "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, exits := collect(frames); exits[1] == nil || exits[1].Code != 255 {
		t.Fatalf("exit %+v", exits[1])
	}
}

// asUser acts with the user's filesystem identity: it cannot enter a
// directory only root may, and what it creates is the user's; the agent's
// other threads stay root.
func TestAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch identities")
	}
	// Not t.TempDir: nobody must be able to reach it.
	dir, err := os.MkdirTemp("", "asuser")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	private := dir + "/private"
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	nobody := identity{65534, 65534}
	err = asUser(nobody, func() error {
		if _, err := os.ReadDir(private); !os.IsPermission(err) {
			return fmt.Errorf("read root's 0700 directory: %v", err)
		}
		return os.WriteFile(dir+"/made", []byte("x"), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir+"/made", &st); err != nil || st.Uid != 65534 || st.Gid != 65534 {
		t.Fatalf("made by %d:%d (%v), want 65534:65534", st.Uid, st.Gid, err)
	}
	if _, err := os.ReadDir(private); err != nil {
		t.Fatalf("the agent lost root: %v", err)
	}
}

// The agent offers every builtin of agentwire's list, and no other: the
// list a host holds an agent's hello to (an agent lacking one is older).
func TestBuiltinsMatchTheWireList(t *testing.T) {
	if missing := agentwire.Lacking(BuiltinNames()); len(missing) != 0 {
		t.Fatalf("the agent lacks %q", missing)
	}
	if names, all := BuiltinNames(), agentwire.Lacking(nil); len(names) != len(all) {
		t.Fatalf("the agent offers %q, agentwire lists %q", names, all)
	}
}
