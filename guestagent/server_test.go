//go:build linux

package guestagent

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

func TestMain(m *testing.M) { agenttest.MainNoLeaks(m) }

func TestLookupUser(t *testing.T) {
	etc := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("passwd", "root:x:0:0:root:/root:/bin/bash\nbroken\nagent:x:1000:1001::/home/agent:/bin/sh\nbad:x:12:notanumber::/:/bin/sh\n")
	write("group", "root:x:0:\nstaff:x:50:agent\n")
	for _, tc := range []struct {
		spec     string
		uid, gid uint32
		err      string
	}{
		{spec: "root", uid: 0, gid: 0},
		{spec: "0", uid: 0, gid: 0},
		{spec: "agent", uid: 1000, gid: 1001},
		{spec: "1000", uid: 1000, gid: 1001},
		{spec: "4242", uid: 4242, gid: 4242},
		{spec: "agent:staff", uid: 1000, gid: 50},
		{spec: "agent:7", uid: 1000, gid: 7},
		{spec: "65534:65534", uid: 65534, gid: 65534},
		{spec: "nobody", err: "user not found: nobody"},
		{spec: "bad", err: "user not found: bad"},
		{spec: "agent:wheel", err: "group not found: wheel"},
		{spec: "", err: "bad user"},
		{spec: "agent:", err: "bad user"},
		{spec: "4294967295", err: "user not found"},
		{spec: "-1", err: "user not found"},
	} {
		id, err := lookupUser(etc, tc.spec)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: got %v, %v; want error %q", tc.spec, id, err, tc.err)
		case tc.err == "" && (err != nil || id != identity{tc.uid, tc.gid}):
			t.Errorf("%q: got %v, %v; want %d:%d", tc.spec, id, err, tc.uid, tc.gid)
		}
	}
}

// pause, among serveHost's lines, waits before the next.
const pause = "(pause)"

// serveHost runs a Server in this process on pipes; frames the host wants
// to send are lines, and it returns Serve's error and what the agent wrote.
func serveHost(t *testing.T, lines ...string) (error, []agentwire.Frame) {
	t.Helper()
	return serveHostWith(t, &Server{}, lines...)
}

func serveHostWith(t *testing.T, s *Server, lines ...string) (error, []agentwire.Frame) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s.In, s.Out, s.DefaultWorkdir, s.Etc, s.Shell = inR, outW, t.TempDir(), "/etc", "/bin/bash"
	served := make(chan error, 1)
	go func() {
		served <- s.Serve()
		outW.Close()
	}()
	got := make(chan []agentwire.Frame, 1)
	go func() {
		var frames []agentwire.Frame
		r := agentwire.NewGuestReader(outR)
		for {
			f, err := r.Read()
			if err != nil {
				got <- frames
				return
			}
			frames = append(frames, f)
		}
	}()
	go func() {
		for _, l := range lines {
			if l == pause {
				time.Sleep(300 * time.Millisecond)
				continue
			}
			if _, err := io.WriteString(inW, l+"\n"); err != nil {
				return
			}
		}
		time.Sleep(300 * time.Millisecond)
		inW.Close()
	}()
	select {
	case err := <-served:
		inR.Close()
		return err, <-got
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
		return nil, nil
	}
}

func runLine(id int, script string, stdin bool) string {
	b, _ := agentwire.Append(nil, &agentwire.Run{ID: uint64(id), Script: []byte(script), MaxOutput: 1 << 20, Stdin: stdin})
	return strings.TrimSuffix(string(b), "\n")
}

func stdinLine(id, n int) string {
	b, _ := agentwire.Append(nil, &agentwire.Stdin{ID: uint64(id), Data: bytes.Repeat([]byte("x"), n)})
	return strings.TrimSuffix(string(b), "\n")
}

// A host that breaks the protocol ends the agent with an error naming it,
// after the calls in flight were killed and reported.
func TestServeRefusesABadHost(t *testing.T) {
	flood := []string{runLine(1, "sleep 5", true)}
	// The pipe and the chunk being written hold some more than the queue.
	for range agentwire.MaxStdinQueue/agentwire.MaxChunk + 12 {
		flood = append(flood, stdinLine(1, agentwire.MaxChunk))
	}
	for _, tc := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"id not increasing", []string{runLine(2, "sleep 5", false), runLine(1, "true", false)}, "run frame for call 1 after call 2"},
		{"never started", []string{runLine(1, "sleep 5", false), `{"type":"kill","id":2}`}, "kill frame for call 2, which was never started"},
		{"stdin not announced", []string{runLine(1, "sleep 5", false), stdinLine(1, 1)}, "started without stdin"},
		{"stdin beyond the queue", flood, "stdin beyond the 262144 bytes"},
		{"stdin after eof", []string{runLine(1, "sleep 5", true), `{"type":"eof","id":1}`, stdinLine(1, 1)}, "stdin frame after eof"},
		{"garbage", []string{"{"}, "bad frame"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err, frames := serveHost(t, tc.lines...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Serve returned %v, want %q", err, tc.want)
			}
			if time.Since(start) > 3*time.Second {
				t.Fatalf("the call in flight was not killed (%s)", time.Since(start))
			}
			if _, ok := frames[0].(*agentwire.Hello); !ok {
				t.Fatalf("first frame %T", frames[0])
			}
		})
	}
}

// Frames for a call that already ended are ignored (they cross its exit),
// and the end of the input ends Serve cleanly.
func TestServeIgnoresFramesForEndedCalls(t *testing.T) {
	err, frames := serveHost(t, runLine(1, "echo hi", true), `{"type":"eof","id":1}`, pause,
		`{"type":"kill","id":1}`, stdinLine(1, 1), `{"type":"eof","id":1}`)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, f := range frames {
		types = append(types, agentwire.Type(f))
	}
	if got := strings.Join(types, " "); got != "hello out exit" {
		t.Fatalf("frames: %s", got)
	}
	if e := frames[len(frames)-1].(*agentwire.Exit); e.Code != 0 || e.TimedOut || e.Overflow || e.Error != "" {
		t.Fatalf("exit %+v", e)
	}
}

// Calls beyond MaxCalls are refused; the others run.
func TestServeBoundsCalls(t *testing.T) {
	err, frames := serveHostWith(t, &Server{MaxCalls: 2},
		runLine(1, "sleep 5", false), runLine(2, "sleep 5", false), runLine(3, "echo 3", false))
	if err != nil {
		t.Fatal(err)
	}
	var refused []uint64
	for _, f := range frames {
		if e, ok := f.(*agentwire.Exit); ok && e.Error != "" {
			if e.Error != "more than 2 calls in flight" {
				t.Fatalf("exit %+v", e)
			}
			refused = append(refused, e.ID)
		}
	}
	if len(refused) != 1 || refused[0] != 3 || len(frames) != 4 {
		t.Fatalf("refused %v among %d frames", refused, len(frames))
	}
}

func TestErrorText(t *testing.T) {
	long := errors.New(strings.Repeat("é", agentwire.MaxErrorBytes))
	for _, err := range []error{long, errors.New("user not found: \xff\xfe"), errors.New("x\xc3")} {
		s := errorText(err, agentwire.MaxErrorBytes)
		if err := agentwire.Validate(&agentwire.Exit{ID: 1, Code: 1, Error: s}); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if _, err := agentwire.Append(nil, &agentwire.Exit{ID: 1, Code: 1, Error: s}); err != nil {
			t.Fatal(err)
		}
	}
}

// A call enters its workdir as root and only then becomes its user, as
// msb's agent does: a workdir its user cannot search (here mode 000, under
// a private parent) still runs the call there. A workdir that does not
// exist, or is not a directory, answers 255 and no output. The agent's own
// directory is the same after its calls.
func TestServeEntersTheWorkdirAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a call as another user needs root")
	}
	locked := filepath.Join(t.TempDir(), "locked")
	file := filepath.Join(t.TempDir(), "file")
	if err := os.Mkdir(locked, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	line := func(id int, dir string) string {
		b, _ := agentwire.Append(nil, &agentwire.Run{ID: uint64(id), Script: []byte(`pwd; id -u; ls . || exit 3`), Workdir: dir, MaxOutput: 1 << 20})
		return strings.TrimSuffix(string(b), "\n")
	}
	err, frames := serveHostWith(t, &Server{DefaultUser: "65534"},
		line(1, locked), line(2, filepath.Join(locked, "missing")), line(3, file))
	if err != nil {
		t.Fatal(err)
	}
	stdout := map[uint64]string{}
	codes := map[uint64]int{}
	for _, f := range frames {
		switch f := f.(type) {
		case *agentwire.Out:
			if f.FD == 1 {
				stdout[f.ID] += string(f.Data)
			}
		case *agentwire.Exit:
			if f.Error != "" {
				t.Fatalf("call %d could not start: %s", f.ID, f.Error)
			}
			codes[f.ID] = f.Code
		}
	}
	if want := locked + "\n65534\n"; stdout[1] != want || codes[1] != 3 {
		t.Errorf("locked workdir: exit %d, stdout %q; want 3 (ls refused), %q", codes[1], stdout[1], want)
	}
	for _, id := range []uint64{2, 3} {
		if codes[id] != 255 || stdout[id] != "" {
			t.Errorf("call %d: exit %d, stdout %q; want 255 and nothing", id, codes[id], stdout[id])
		}
	}
	if after, err := os.Getwd(); err != nil || after != cwd {
		t.Errorf("the agent's directory is %q (%v) after its calls, was %q", after, err, cwd)
	}
}

// A script whose wait failed (a status taken by another wait) answers 255
// instead of panicking the agent.
func TestExitCodeWithoutAWait(t *testing.T) {
	if code := exitCode(nil); code != 255 {
		t.Fatalf("exit code %d, want 255", code)
	}
}

// The guest timer kills a script call's whole tree: a descendant that left
// the call's process group (setsid) too, found through its parent.
func TestTimeoutKillsDescendantsOutsideTheGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	h := startAgentHost(t, dir)
	h.send(&agentwire.Run{ID: 1, Script: []byte(`setsid sleep 100 & echo $! > "$1"; wait`),
		Args: [][]byte{[]byte(pidFile)}, TimeoutMS: 500, MaxOutput: 1 << 10})
	exit := h.waitFor(1, 10*time.Second)
	if !exit.TimedOut {
		t.Fatalf("exit %+v", exit)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if _, live := readStat(pid); !live {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	t.Fatalf("the setsid child %d outlived the timeout", pid)
}
