//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
)

// TestToolBashStdout checks what `tool NAME bash` writes on stdout for long,
// at-the-limit and binary output, on fakemsb and the local backend. On a
// pipe it is the result text an agent gets; on a terminal the whole output
// as it streamed, then what the result adds after its output, so no line
// shows twice.
func TestToolBashStdout(t *testing.T) {
	const line = "0123456789012345678901234567890\n" // 32 bytes: 1600 lines are the 50KB limit
	atLimit := strings.Repeat(line, 1600)
	ff := strings.Repeat("\xff", 60000)
	cases := []struct {
		name, command string
		code          int
		out           string // all the output
		shown         string // the output the result shows
		notes         string // the rest of the result, the log file's path as LOG
	}{
		{name: "long", command: "seq 1 100000", out: seq(1, 100000), shown: seq(98002, 100000),
			notes: "\n\n[Showing lines 98002-100001 of 100001. Full output: LOG]"},
		{name: "long failing", command: "seq 1 100000; exit 3", code: 1, out: seq(1, 100000), shown: seq(98002, 100000),
			notes: "\n\n[Showing lines 98002-100001 of 100001. Full output: LOG]\n\nCommand exited with code 3"},
		{name: "2000 lines", command: "seq 1 1999", out: seq(1, 1999), shown: seq(1, 1999)},
		{name: "50KB", command: "yes " + strings.TrimSuffix(line, "\n") + " | head -n 1600", out: atLimit, shown: atLimit},
		{name: "50KB and a byte", command: "yes " + strings.TrimSuffix(line, "\n") + " | head -n 1600; printf x",
			out: atLimit + "x", shown: atLimit[len(line):] + "x",
			notes: "\n\n[Showing lines 2-1601 of 1601 (50.0KB limit). Full output: LOG]"},
		{name: "binary", command: `printf 'a\000b\377\376\n'`, out: "a\x00b\xff\xfe\n", shown: "a\x00b\xff\xfe\n"},
		{name: "binary long", command: `head -c 60000 /dev/zero | tr '\0' '\377'`, out: ff, shown: ff[len(ff)-50<<10:],
			notes: "\n\n[Showing last 50.0KB of line 1 (line is 58.6KB). Full output: LOG]"},
	}
	logPath := regexp.MustCompile(`/workspace/\.bash-output/[0-9a-f]{32}\.log`)
	for _, backend := range []string{"local", "msb"} {
		t.Run(backend, func(t *testing.T) {
			global := []string{"--state-dir", t.TempDir()}
			if backend == "msb" {
				global = append(global, "--msb", fakemsbtest.New(t).Bin)
			}
			var created bytes.Buffer
			if code := Main(slices.Concat(global, []string{"session", "create", "--backend", backend}), nil, &created, io.Discard); code != 0 {
				t.Fatalf("session create exited %d", code)
			}
			name := strings.TrimSpace(created.String())
			t.Cleanup(func() { Main(slices.Concat(global, []string{"session", "rm", name}), nil, io.Discard, io.Discard) })
			for _, tc := range cases {
				args := slices.Concat(global, []string{"tool", name, "bash", fmt.Sprintf(`{"command":%q}`, tc.command)})
				newline := "\n"
				if strings.HasSuffix(tc.shown+tc.notes, "\n") {
					newline = ""
				}
				check := func(t *testing.T, code int, stdout, stderr string, want string) {
					t.Helper()
					if code != tc.code || stderr != "" {
						t.Errorf("exited %d, want %d; stderr %q", code, tc.code, stderr)
					}
					got := logPath.ReplaceAllString(stdout, "LOG")
					if got != want {
						t.Errorf("stdout: %d bytes, want %d\n got ...%q\nwant ...%q", len(got), len(want), got[max(len(got)-150, 0):], want[max(len(want)-150, 0):])
					}
				}
				t.Run(tc.name+"/pipe", func(t *testing.T) {
					var stdout, stderr bytes.Buffer
					code := Main(args, nil, &stdout, &stderr)
					check(t, code, stdout.String(), stderr.String(), tc.shown+tc.notes+newline)
				})
				t.Run(tc.name+"/terminal", func(t *testing.T) {
					tty, output := openTerminal(t)
					read := make(chan []byte, 1)
					go func() {
						b, _ := io.ReadAll(output)
						read <- b
					}()
					var stderr bytes.Buffer
					code := Main(args, nil, tty, &stderr)
					tty.Close()
					check(t, code, string(<-read), stderr.String(), tc.out+tc.notes+newline)
				})
			}
		})
	}
}

func seq(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// openTerminal opens a pseudo-terminal in raw mode, so bytes pass through
// unchanged: what is written to tty is read from output, which ends once
// tty is closed.
func openTerminal(t *testing.T) (tty *os.File, output io.Reader) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	if _, err := term.MakeRaw(int(tty.Fd())); err != nil {
		t.Fatal(err)
	}
	return tty, terminalOutput{ptm}
}

// terminalOutput reads a pseudo-terminal's output; EIO, once the
// terminal's side is closed, is its end.
type terminalOutput struct{ ptm *os.File }

func (o terminalOutput) Read(p []byte) (int, error) {
	n, err := o.ptm.Read(p)
	if errors.Is(err, syscall.EIO) {
		err = io.EOF
	}
	return n, err
}

// Each `tool NAME bash` is a process of its own, and a local session's
// agent still starts the next one's bash ahead: a call leaves the id it
// named for its successor in the session's state, where the next process
// takes it up. The first call names none (a session used once leaves no
// bash waiting); from the third on, each runs in a bash started as the
// one before ended.
func TestToolBashRunsInTheBashStartedAheadAcrossProcesses(t *testing.T) {
	global, name := newLocalSession(t)
	s, err := omasandbox.Attach(context.Background(), name, omasandbox.Options{StateDir: global[1]})
	if err != nil {
		t.Fatal(err)
	}
	if scoped, ok := s.Sandbox().(interface{ ProcessesEndWithCall() bool }); ok && scoped.ProcessesEndWithCall() {
		t.Skip("this host gives the local session a sandbox per call, with no agent to start a bash ahead")
	}
	// The age of the command's bash in clock ticks (hundredths), by
	// bash's builtins alone: a program started to read the clock would
	// add its own start to the age.
	probe := `read -r u _ </proc/uptime; read -r -a st </proc/$$/stat; echo $(( ${u%.*}${u#*.} - ${st[21]} ))`
	const between = 500 * time.Millisecond
	ages := make([]int, 4)
	for i := range ages {
		if i > 0 {
			time.Sleep(between)
		}
		var out, errOut bytes.Buffer
		if code := Main(slices.Concat(global, []string{"tool", name, "bash", fmt.Sprintf(`{"command":%q}`, probe)}), nil, &out, &errOut); code != 0 {
			t.Fatalf("tool bash exited %d: %s", code, errOut.String())
		}
		n, err := strconv.Atoi(strings.TrimSpace(out.String()))
		if err != nil {
			t.Fatalf("call %d printed %q", i, out.String())
		}
		ages[i] = n
	}
	ticks := int(between / (10 * time.Millisecond))
	if ages[0] >= ticks/2 || ages[1] >= ticks/2 {
		t.Errorf("the first two calls' bash were %d and %d ticks old: the first must name no next call", ages[0], ages[1])
	}
	if ages[2] < ticks*9/10 || ages[3] < ticks*9/10 {
		t.Errorf("the third and fourth calls' bash were %d and %d ticks old, not started as the call before ended (%d ticks before)", ages[2], ages[3], ticks)
	}
}

// One-shot bash calls on one session at once, wave after wave, each take
// up the chain of ids as it stands: every call runs, and no two run under
// one id (the tag a call's processes carry and its log's name).
func TestToolBashCallsAtOnceRunUnderIDsOfTheirOwn(t *testing.T) {
	global, name := newLocalSession(t)
	args := slices.Concat(global, []string{"tool", name, "bash", `{"command":"echo \"$OMA_BASH_OWNER\""}`})
	seen := map[string]bool{}
	for wave := range 3 {
		ids := make([]string, 6)
		var wg sync.WaitGroup
		for i := range ids {
			wg.Go(func() {
				var out, errOut bytes.Buffer
				if code := Main(args, nil, &out, &errOut); code != 0 {
					t.Errorf("wave %d, call %d exited %d: %s", wave, i, code, errOut.String())
				}
				ids[i] = strings.TrimSpace(out.String())
			})
		}
		wg.Wait()
		for _, id := range ids {
			if len(id) != 32 || seen[id] {
				t.Errorf("wave %d: id %q is not a call's own (all: %q)", wave, id, ids)
			}
			seen[id] = true
		}
	}
}

// newLocalSession creates a local session through the CLI, removed when
// the test ends, and returns the global flags that reach it and its name.
func newLocalSession(t *testing.T) (global []string, name string) {
	t.Helper()
	global = []string{"--state-dir", t.TempDir()}
	var created bytes.Buffer
	if code := Main(slices.Concat(global, []string{"session", "create", "--backend", "local"}), nil, &created, io.Discard); code != 0 {
		t.Fatalf("session create exited %d", code)
	}
	name = strings.TrimSpace(created.String())
	t.Cleanup(func() { Main(slices.Concat(global, []string{"session", "rm", name}), nil, io.Discard, io.Discard) })
	return global, name
}
